# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark of the offline drift audit.

For each size it builds an inventory (group gpu_nodes, pins in group_vars) and a jsonfile fact
cache written through Ansible's own cache plugin (the format the running ansible-core writes),
with 20 components per host and 1 % of the hosts skewed. Then it measures

* cache read:  loading every entry through the cache plugin loader;
* compare:     drift.audit + summarize on the loaded facts (pure Python);
* reports:     writing drift.json, drift.junit.xml and drift.md;
* playbook:    the whole `ansible-playbook playbooks/drift_audit.yml -e drift_audit_fact_cache=DIR`
               run, inventory parsing and interpreter start included (it exits 2: the skew is
               found on purpose).

Run from the repository root with the venv:  .venv/bin/python bench/drift_bench.py
"""
from __future__ import absolute_import, division, print_function

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
sys.path.insert(0, os.path.join(REPO, 'collections'))

from ansible.plugins.loader import cache_loader, init_plugin_loader  # noqa: E402

from ansible_collections.gpucluster.core.plugins.module_utils import drift  # noqa: E402
from ansible_collections.gpucluster.core.plugins.module_utils import stack_versions  # noqa: E402
from ansible_collections.gpucluster.core.plugins.plugin_utils import drift_reports  # noqa: E402

PINS = {'nvidia_driver_version': '550.54.15', 'cuda_toolkit_version': '12.4.1',
        'cuda_toolkit_nccl_version': '2.21.5',
        # Without these the audit pins the roles' defaults (drift_audit_role_defaults).
        'cuda_toolkit_cudnn_version': '9.1.0.70-1', 'container_runtime_nvidia_toolkit_version': '1.16.2',
        'slurm_version': '23.11.10', 'slurm_munge_version': '0.5.15'}
STACK = {
    'os': 'ubuntu 22.04.4', 'kernel': '5.15.0-119-generic', 'nvidia_driver': '550.54.15-1',
    'nvidia_driver_loaded': '550.54.15', 'nvidia_fabricmanager': '550.54.15-1',
    'cuda_toolkit': '12.4.1', 'cudnn': '9.1.0.70-1', 'nccl': '2.21.5-1+cuda12.4',
    'nvidia_container_toolkit': '1.16.2-1', 'containerd': '1.7.22-1', 'docker': None,
    'rdma_core': '2404mlnx51-1.2404066', 'ofed': '24.04-0.6.6.0', 'hca_firmware': '28.39.1002',
    'gpu_vbios': '96.00.89.00.01', 'slurm': '23.11.10-1', 'munge': '0.5.15-2',
    'kubelet': None, 'kubeadm': None, 'kubectl': None, 'dcgm': '3.3.8', 'python': '3.10.12',
}
assert sorted(STACK) == sorted(stack_versions.COMPONENTS)


def host_name(index):
    return 'gpu-%05d' % index


def host_facts(index):
    stack = dict(STACK)
    if index % 100 == 7:
        stack['nccl'] = '2.20.3-1+cuda12.4'
    if index % 100 == 42:
        stack['cuda_toolkit'] = '12.2.0'
    return {
        'gpu_stack': stack,
        'gpu_stack_cuda_toolkits': [{'version': stack['cuda_toolkit'], 'path': '/usr/local/cuda-12.4',
                                     'source': 'file:/usr/local/cuda-12.4/version.json'}],
        'gpu_stack_details': {
            'package_manager': 'dpkg', 'collected_at': time.time(), 'duration_s': 0.05,
            'sources': dict((c, 'package:%s' % c) for c in STACK if STACK[c]),
            'raw': {}, 'broken_packages': {}, 'nvidia_kernel_module': 'open',
            'gpus': dict(('0000:%02x:00.0' % (0x18 + g), STACK['gpu_vbios']) for g in range(8)),
            'hcas': dict(('mlx5_%d' % i, STACK['hca_firmware']) for i in range(8)),
        },
    }


def build(workdir, size, inventory_format):
    cache_dir = os.path.join(workdir, 'cache')
    inv_dir = os.path.join(workdir, 'inventory')
    os.makedirs(os.path.join(inv_dir, 'group_vars'))
    if inventory_format == 'yaml':
        with open(os.path.join(inv_dir, 'hosts.yml'), 'w') as out:
            out.write('all:\n  children:\n    gpu_nodes:\n      hosts:\n')
            for i in range(size):
                out.write('        %s:\n' % host_name(i))
    else:
        with open(os.path.join(inv_dir, 'hosts.ini'), 'w') as out:
            out.write('[gpu_nodes]\n')
            for i in range(size):
                out.write('%s\n' % host_name(i))
    with open(os.path.join(inv_dir, 'group_vars', 'gpu_nodes.yml'), 'w') as out:
        out.write('---\n')
        for key, value in sorted(PINS.items()):
            out.write('%s: "%s"\n' % (key, value))
    cache = cache_loader.get('ansible.builtin.jsonfile', _uri=cache_dir, _prefix='', _timeout=0)
    for i in range(size):
        cache.set(host_name(i), host_facts(i))
    return cache_dir, inv_dir


def measure(workdir, size, run_playbook, inventory_format):
    row = {'hosts': size}
    started = time.time()
    cache_dir, inv_dir = build(workdir, size, inventory_format)
    row['build_s'] = time.time() - started

    started = time.time()
    cache = cache_loader.get('ansible.builtin.jsonfile', _uri=cache_dir, _prefix='', _timeout=0)
    hosts = sorted(cache.keys())
    facts = dict((h, cache.get(h)['gpu_stack']) for h in hosts)
    row['cache_read_s'] = time.time() - started

    pins = {'nvidia_driver': PINS['nvidia_driver_version'],
            'nvidia_driver_loaded': PINS['nvidia_driver_version'],
            'nvidia_fabricmanager': PINS['nvidia_driver_version'],
            'cuda_toolkit': PINS['cuda_toolkit_version'], 'nccl': PINS['cuda_toolkit_nccl_version']}
    baselines = dict((h, pins) for h in hosts)
    consistent = list(stack_versions.COMPONENTS)
    started = time.time()
    findings, stats = drift.audit(hosts, facts, baselines=baselines, consistent=consistent,
                                  groups=drift.partition_hosts(hosts, [('gpu_nodes', hosts)]))
    summary = drift.summarize(hosts, findings, stats)
    row['compare_s'] = time.time() - started
    row['checks'] = summary['checks']
    row['findings'] = summary['findings']

    started = time.time()
    drift_reports.write_reports(os.path.join(workdir, 'pure-report'), hosts, summary, findings, stats)
    row['reports_s'] = time.time() - started

    if run_playbook:
        env = dict(os.environ)
        env['ANSIBLE_CONFIG'] = os.path.join(REPO, 'ansible.cfg')
        env['ANSIBLE_COLLECTIONS_PATH'] = os.path.join(REPO, 'collections')
        report_dir = os.path.join(workdir, 'report')
        # 'none': the cache alone (no pins from role variables, the baseline comes with -e).
        inventory = 'localhost,' if inventory_format == 'none' else inv_dir
        command = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'),
                   '-i', inventory, os.path.join(REPO, 'playbooks', 'drift_audit.yml'),
                   '-e', 'drift_audit_fact_cache=%s' % cache_dir,
                   '-e', 'drift_audit_report_dir=%s' % report_dir,
                   '-e', '{"drift_audit_consistent": %s}' % json.dumps(consistent)]
        if inventory_format == 'none':
            command += ['-e', json.dumps({'drift_audit_baseline': pins})]
        started = time.time()
        proc = subprocess.run(command, cwd=REPO, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, universal_newlines=True, check=False)
        row['playbook_s'] = time.time() - started
        row['playbook_rc'] = proc.returncode
        with open(os.path.join(report_dir, 'drift.json')) as handle:
            report = json.load(handle)
        row['playbook_findings'] = report['summary']['findings']
        if proc.returncode not in (0, 2) or report['summary']['hosts'] != size:
            sys.stderr.write(proc.stdout[-4000:])
            raise SystemExit('playbook run for %d hosts failed unexpectedly' % size)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
    parser.add_argument('--sizes', type=int, nargs='+', default=[100, 1000, 10000])
    parser.add_argument('--no-playbook', action='store_true', help='only the in-process figures')
    parser.add_argument('--keep', action='store_true', help='keep the work directories')
    parser.add_argument('--inventory', choices=['yaml', 'ini', 'none'], default='yaml',
                        help='inventory of the playbook run: YAML (default) or INI with the pins in '
                             'group_vars, or none (cache only, pins passed with -e)')
    args = parser.parse_args()
    init_plugin_loader([])

    columns = ['hosts', 'checks', 'findings', 'build_s', 'cache_read_s', 'compare_s', 'reports_s']
    if not args.no_playbook:
        columns += ['playbook_s', 'playbook_rc', 'us_per_host']
    print('inventory: %s' % args.inventory)
    print(' '.join('%13s' % c for c in columns))
    rows = []
    for size in args.sizes:
        workdir = tempfile.mkdtemp(prefix='drift-bench-%d-' % size)
        try:
            row = measure(workdir, size, not args.no_playbook, args.inventory)
        finally:
            if not args.keep:
                shutil.rmtree(workdir, ignore_errors=True)
            else:
                print('kept %s' % workdir)
        if 'playbook_s' in row:
            row['us_per_host'] = 1e6 * row['playbook_s'] / size
        rows.append(row)
        print(' '.join(('%13.3f' % row[c]) if isinstance(row[c], float) else '%13s' % row[c]
                       for c in columns))
        sys.stdout.flush()
    if len(rows) > 1 and not args.no_playbook:
        first, last = rows[0], rows[-1]
        print('growth %d -> %d hosts: playbook x%.1f, compare x%.1f (hosts x%d)' % (
            first['hosts'], last['hosts'], last['playbook_s'] / first['playbook_s'],
            last['compare_s'] / max(first['compare_s'], 1e-9), last['hosts'] // first['hosts']))


if __name__ == '__main__':
    main()
