# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Write the node_exporter textfiles of "who uses the GPUs", for promtool's metric lint.

* the Slurm controller's gpucluster_slurm.prom (plugins/module_utils/slurm_usage.py) from the recorded-shape answers
  of tests/unit/fixtures/usage: every command answering, then sinfo failing;
* the job labels the node health program appends (plugins/module_utils/gpu_jobs.py): a Slurm record with hostile
  names, and a Swarm source that could not be read.
Used by tests/monitoring/promtool.sh (``promtool check metrics`` on every textfile).

    python tests/monitoring/usage_textfiles.py --textfiles DIR    write DIR/usage-<case>.prom, list them
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import argparse
import os
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
sys.path.insert(0, os.path.join(REPO, 'collections'))
from ansible_collections.gpucluster.core.plugins.module_utils import gpu_jobs, slurm_usage  # noqa: E402

FIXTURES = os.path.join(REPO, 'tests', 'unit', 'fixtures', 'usage')
TIMESTAMP = 1764547200
DEVICES = [{'index': 0, 'uuid': 'GPU-12345678-aaaa-bbbb-cccc-0123456789ab'},
           {'index': 1, 'uuid': 'GPU-12345678-aaaa-bbbb-cccc-0123456789cd'}]


def _answers():
    out = {}
    for command in slurm_usage.COMMANDS:
        with open(os.path.join(FIXTURES, command + '.txt')) as handle:
            out[command] = {'ok': True, 'text': handle.read()}
    return out


def cases():
    every = _answers()
    sinfo_failed = dict(every, sinfo={'ok': False, 'text': ''})
    record = gpu_jobs.slurm_record({'SLURM_JOB_ID': '4211', 'SLURM_JOB_USER': 'al"ice\\', 'SLURM_JOB_ACCOUNT': 'research',
                                    'SLURM_JOB_PARTITION': 'gpu', 'SLURM_JOB_GPUS': '0,1'}, TIMESTAMP)
    held = dict((gpu, dict((k, record[k]) for k in ('job_id', 'user', 'account', 'partition', 'since')))
                for gpu in record['gpus'])
    return (
        ('slurm', slurm_usage.render(every, TIMESTAMP, 0.25)),
        ('slurm-sinfo-failed', slurm_usage.render(sinfo_failed, TIMESTAMP, 0.25)),
        ('gpu-jobs-slurm', gpu_jobs.render_prometheus(gpu_jobs.prometheus_samples('slurm', held, DEVICES, True))),
        ('gpu-jobs-swarm-down', gpu_jobs.render_prometheus(gpu_jobs.prometheus_samples('swarm', {}, DEVICES, False))),
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
    parser.add_argument('--textfiles', required=True, metavar='DIR', help='write DIR/usage-<case>.prom; print the paths')
    args = parser.parse_args()
    if not os.path.isdir(args.textfiles):
        os.makedirs(args.textfiles)
    for name, text in cases():
        path = os.path.join(args.textfiles, 'usage-%s.prom' % name)
        with open(path, 'w') as handle:
            handle.write(text)
        print(path)
    return 0


if __name__ == '__main__':
    sys.exit(main())
