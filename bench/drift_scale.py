# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The offline drift audit at scale against Ansible's own cost of loading the same inventory.

Builds one inventory and jsonfile fact cache (bench/drift_bench.py's build: group gpu_nodes, pins in
group_vars, 1 % of the hosts skewed), then times, in the same run and one after the other,

* inventory: ``ansible-inventory -i INVENTORY --list`` (Ansible parses the inventory and its
  group_vars: what any playbook over it pays before its first task);
* audit:     ``ansible-playbook -i INVENTORY playbooks/drift_audit.yml -e drift_audit_fact_cache=DIR``
             (exits 2: the skew is found on purpose);

and prints the ratio audit / inventory (the target is at most 2: the audit's own work is the
smaller part), in wall time and in CPU time (user + system of the command and its workers, which
other load on the machine does not inflate). Run from the repository root:  .venv/bin/python bench/drift_scale.py [--hosts N]
"""
from __future__ import absolute_import, division, print_function

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import drift_bench  # noqa: E402  (the inventory and cache builder, one implementation)
from ansible.plugins.loader import init_plugin_loader  # noqa: E402


def _cpu_of_children():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed(command, env, accepted):
    """(wall seconds, CPU seconds of the command and every process it waited for)."""
    started, cpu = time.time(), _cpu_of_children()
    proc = subprocess.run(command, cwd=drift_bench.REPO, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, check=False)
    elapsed, cpu = time.time() - started, _cpu_of_children() - cpu
    if proc.returncode not in accepted:
        sys.stderr.write(proc.stdout[-4000:])
        raise SystemExit('%s exited %d' % (command[0], proc.returncode))
    return elapsed, cpu


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
    parser.add_argument('--hosts', type=int, default=10000)
    parser.add_argument('--repeat', type=int, default=1, help='runs of each; the best counts')
    args = parser.parse_args()
    init_plugin_loader([])
    bindir = os.path.dirname(sys.executable)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(drift_bench.REPO, 'ansible.cfg'),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(drift_bench.REPO, 'collections'))
    workdir = tempfile.mkdtemp(prefix='drift-scale-')
    try:
        cache_dir, inv_dir = drift_bench.build(workdir, args.hosts, 'yaml')
        report_dir = os.path.join(workdir, 'report')
        inventory = [os.path.join(bindir, 'ansible-inventory'), '-i', inv_dir, '--list',
                     '--output', os.path.join(workdir, 'inventory.json')]
        audit = [os.path.join(bindir, 'ansible-playbook'), '-i', inv_dir,
                 os.path.join(drift_bench.REPO, 'playbooks', 'drift_audit.yml'),
                 '-e', 'drift_audit_fact_cache=%s' % cache_dir, '-e', 'drift_audit_report_dir=%s' % report_dir]
        load_s, load_cpu = min(_timed(inventory, env, (0,)) for dummy in range(args.repeat))
        audit_s, audit_cpu = min(_timed(audit, env, (0, 2)) for dummy in range(args.repeat))
        with open(os.path.join(report_dir, 'drift.json')) as handle:
            summary = json.load(handle)['summary']
        if summary['hosts'] != args.hosts:
            raise SystemExit('the audit saw %d hosts, not %d' % (summary['hosts'], args.hosts))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print('hosts %d  findings %d  inventory load %.2f s  offline audit %.2f s  ratio %.2f (target <= 2)'
          % (args.hosts, summary['findings'], load_s, audit_s, audit_s / load_s))
    # CPU time (user + system, the command and its workers) does not grow when other work shares the
    # machine, as wall time does: on a loaded machine this is the ratio to compare.
    print('cpu: inventory load %.2f s  offline audit %.2f s  ratio %.2f'
          % (load_cpu, audit_cpu, audit_cpu / load_cpu))


if __name__ == '__main__':
    main()
