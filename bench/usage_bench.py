# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark of the Slurm controller's usage metrics run (gpucluster-slurm-metrics, roles/slurm).

Goal (issue 34): the run stays under 2 s for 1,000 jobs and 64 nodes. The squeue, sinfo and sshare answers are
made from the recorded shapes of tests/unit/fixtures/usage (each line of the fixtures repeated with new job ids,
node names and users: 1,000 jobs of 40 users in 8 accounts, 64 nodes of 8 GPUs in two partitions). Measured:

* decide:  slurm_usage.render on the three answers (parse, decide, write the exposition text), in process;
* program: the whole run as the timer starts it: the usage archive built as the role builds it, run by python3,
           its three commands stand-ins that print the answers, the textfile written atomically.

Run from the repository root with the venv:  .venv/bin/python bench/usage_bench.py
"""
from __future__ import absolute_import, division, print_function

import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
sys.path.insert(0, os.path.join(REPO, 'collections'))
sys.path.insert(0, os.path.join(REPO, 'tests'))

from ansible_collections.gpucluster.core.plugins.module_utils import slurm_usage  # noqa: E402
import node_programs  # noqa: E402

JOBS = 1000
NODES = 64
GOAL_SECONDS = 2.0
REPEAT = 5


def answers():
    """(squeue, sinfo, sshare) text in the recorded shapes, at the bench's size."""
    squeue, states = [], [('RUNNING', 'None'), ('PENDING', 'Resources'), ('PENDING', 'Priority'), ('RUNNING', 'None')]
    for job in range(JOBS):
        state, reason = states[job % len(states)]
        gpus = (1, 2, 4, 8, 16)[job % 5]
        nodes = 2 if gpus == 16 else 1
        squeue.append('%d|%s|%s|%s|user%02d|acct%d|%d|cpu=%d,mem=%dG,node=%d,billing=%d,gres/gpu=%d,gres/gpu:h100=%d'
                      % (100000 + job, 'gpu' if job % 7 else 'gpu,debug', state, reason, job % 40, job % 8, nodes,
                         gpus * 8, gpus * 64, nodes, gpus * 8, gpus, gpus))
    sinfo = []
    for node in range(NODES):
        used = (0, 2, 4, 8)[node % 4]
        state = {0: 'idle', 8: 'allocated'}.get(used, 'mixed') if node % 16 else 'drained'
        for partition in (('gpu', 'debug') if node < 8 else ('gpu',)):
            sinfo.append('gpu-%03d|%s|%s|gpu:h100:8(S:0-1)|gpu:h100:%d(IDX:%s)'
                         % (node, partition, state, used, '0-%d' % (used - 1) if used else 'N/A'))
    sshare = ['root|||0.000000|987654321|1.000000||', ' root|root|1|0.111111|0|0.000000|inf|1.000000']
    for account in range(8):
        sshare.append(' acct%d||10|0.111111|%d|0.125000|0.888889|' % (account, 1000000 * (account + 1)))
        for user in range(account, 40, 8):
            sshare.append('  acct%d|user%02d|1|0.200000|%d|0.025000|1.200000|0.%06d' % (account, user, 1000 * user, 500000 + user))
    return '\n'.join(squeue) + '\n', '\n'.join(sinfo) + '\n', '\n'.join(sshare) + '\n'


def bench_decide(texts):
    results = dict((c, {'ok': True, 'text': t}) for c, t in zip(slurm_usage.COMMANDS, texts))
    best = None
    for _run in range(REPEAT):
        start = time.perf_counter()
        text = slurm_usage.render(results, time.time(), 0.0)
        elapsed = time.perf_counter() - start
        best = elapsed if best is None else min(best, elapsed)
    return best, text


def bench_program(texts):
    with tempfile.TemporaryDirectory(prefix='usage-bench.') as work:
        archive = node_programs.build('usage', work)
        argv = [sys.executable, archive, 'metrics', '--textfile', work, '--run-timeout', '30']
        for command, text in zip(slurm_usage.COMMANDS, texts):
            answer = os.path.join(work, command + '.txt')
            with open(answer, 'w') as handle:
                handle.write(text)
            stand_in = os.path.join(work, command)
            with open(stand_in, 'w') as handle:
                handle.write('#!/bin/sh\nexec cat %s\n' % answer)
            os.chmod(stand_in, 0o755)
            argv += ['--' + command, stand_in]
        best = None
        for _run in range(REPEAT):
            start = time.perf_counter()
            proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False)
            elapsed = time.perf_counter() - start
            if proc.returncode != 0:
                raise SystemExit('usage_bench: the metrics run failed (exit %d): %s' % (proc.returncode, proc.stderr))
            best = elapsed if best is None else min(best, elapsed)
        with open(os.path.join(work, slurm_usage.TEXTFILE_NAME)) as handle:
            size = len(handle.read())
    return best, size


def main():
    texts = answers()
    decide, text = bench_decide(texts)
    program, size = bench_program(texts)
    samples = sum(1 for line in text.splitlines() if line and not line.startswith('#'))
    print('usage_bench: %d jobs, %d nodes: %d samples, textfile %d bytes' % (JOBS, NODES, samples, size))
    verdict = 'met' if program < GOAL_SECONDS else 'NOT met'
    print('usage_bench: decide (parse, decide, render) %.3f s; whole metrics run (python3 + archive + 3 commands + '
          'atomic write) %.3f s; goal under %.1f s: %s' % (decide, program, GOAL_SECONDS, verdict))
    return 0


if __name__ == '__main__':
    sys.exit(main())
