# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/drift_audit.yml end to end with ansible-playbook (the issue's "done when" case):
offline on a jsonfile fact cache written by Ansible's own cache plugin, and live with local
connections plus one unreachable host."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

import pytest

from ansible.plugins.loader import cache_loader, init_plugin_loader
from ansible.utils.collection_loader import AnsibleCollectionConfig

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
PLAYBOOK = os.path.join(REPO, 'playbooks', 'drift_audit.yml')
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), 'ansible-playbook')

STACK = {'os': 'ubuntu 22.04.4', 'kernel': '5.15.0-119-generic', 'nvidia_driver': '550.54.15-1',
         'nvidia_driver_loaded': '550.54.15', 'cuda_toolkit': '12.4.1', 'cudnn': '9.1.0.70-1',
         'nccl': '2.21.5-1+cuda12.4', 'rdma_core': '2404mlnx51-1.2404066', 'hca_firmware': '28.39.1002',
         'gpu_vbios': '96.00.99.00.01', 'slurm': '23.11.10-1', 'nvidia_container_toolkit': '1.16.2-1',
         'ofed': '24.04-0.6.6.0'}

pytestmark = pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason='ansible-playbook not beside this python')


@pytest.fixture(scope='module', autouse=True)
def plugin_loader():
    if AnsibleCollectionConfig.collection_finder is None:
        init_plugin_loader([os.path.join(REPO, 'collections')])


def write_cache(path, skewed):
    cache = cache_loader.get('ansible.builtin.jsonfile', _uri=str(path), _prefix='', _timeout=0)
    for host in ('host1', 'host2', 'host3'):
        stack = dict(STACK)
        if skewed and host == 'host2':
            stack['nccl'] = '2.20.3-1+cuda12.4'
        if skewed and host == 'host3':
            stack['cuda_toolkit'] = '12.2.0'
        cache.set(host, {'gpu_stack': stack, 'gpu_stack_details': {'collected_at': time.time(), 'raw': {}}})


def write_inventory(path, with_pins, templated=False):
    (path / 'group_vars').mkdir(parents=True)
    (path / 'hosts.yml').write_text(
        'all:\n  children:\n    gpucluster:\n      children:\n        gpu_nodes:\n'
        '          hosts:\n            host1:\n            host2:\n            host3:\n')
    # The site's pins of the other components (what the cache holds): without them the roles'
    # defaults would be the pins (tests/unit/plugins/action/test_drift_audit.py covers that).
    (path / 'group_vars' / 'all.yml').write_text(
        '---\nnvidia_driver_version: "550.54.15"\ncuda_toolkit_version: ""\n'
        'cuda_toolkit_cudnn_version: "9.1.0.70-1"\ncuda_toolkit_nccl_version: ""\n'
        'container_runtime_nvidia_toolkit_version: "1.16.2"\nslurm_version: "23.11.10"\nslurm_munge_version: ""\n')
    if with_pins:
        # The role variable that installs the toolkit is the baseline: one source of truth.
        (path / 'group_vars' / 'gpu_nodes.yml').write_text(
            '---\nsite_cuda_series: "12.4"\ncuda_toolkit_version: "{{ site_cuda_series }}.1"\n' if templated
            else '---\ncuda_toolkit_version: "12.4.1"\n')


def run_playbook(args, cwd):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, 'collections'), ANSIBLE_NOCOLOR='1')
    proc = subprocess.run([ANSIBLE_PLAYBOOK, PLAYBOOK] + args, cwd=str(cwd), env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, check=False)
    return proc.returncode, proc.stdout


def read_reports(report_dir):
    with open(os.path.join(str(report_dir), 'drift.json')) as handle:
        report = json.load(handle)
    junit = ET.parse(os.path.join(str(report_dir), 'drift.junit.xml')).getroot()
    with open(os.path.join(str(report_dir), 'drift.md')) as handle:
        markdown = handle.read()
    return report, junit, markdown


# inventory_template: the pin is a template over another inventory variable, expanded under the host's
# variables as hostvars does (the audit templates only values that can be templates).
@pytest.mark.parametrize('pin_source', ['inventory', 'inventory_template', 'extra_vars_kv', 'extra_vars_json'])
def test_offline_done_when(tmp_path, pin_source):
    cache = tmp_path / 'cache'
    inventory = tmp_path / 'inventory'
    reports = tmp_path / 'reports'
    write_cache(cache, skewed=True)
    write_inventory(inventory, with_pins=pin_source.startswith('inventory'), templated=pin_source == 'inventory_template')
    args = ['-i', str(inventory), '-e', 'drift_audit_fact_cache=%s' % cache, '-e', 'drift_audit_report_dir=%s' % reports]
    if pin_source == 'extra_vars_kv':
        # key=value extra vars split at spaces: the JSON value is written without them.
        args += ['-e', 'drift_audit_baseline={"cuda_toolkit":"12.4.1"}']
    elif pin_source == 'extra_vars_json':
        args += ['-e', '{"drift_audit_baseline": {"cuda_toolkit": "12.4.1"}}']

    rc, out = run_playbook(args, tmp_path)
    assert rc == 2, out
    assert 'CRITICAL host3/cuda_toolkit [baseline]: expected 12.4.1, found 12.2.0' in out
    assert 'CRITICAL host2/nccl [majority]: expected 2.21.5-1+cuda12.4, found 2.20.3-1+cuda12.4' in out
    assert 'skipping: no hosts matched' in out          # the gathering play touched no host

    report, junit, markdown = read_reports(reports)
    got = sorted((f['host'], f['component'], f['kind'], f['expected'], f['found']) for f in report['findings'])
    assert got == [('host2', 'nccl', 'majority', '2.21.5-1+cuda12.4', '2.20.3-1+cuda12.4'),
                   ('host3', 'cuda_toolkit', 'baseline', '12.4.1', '12.2.0')]
    assert report['summary']['failed'] is True and report['summary']['hosts'] == 3
    assert junit.get('tests') == str(report['summary']['checks'])
    f3 = junit.find("testsuite[@name='host3']/testcase[@name='cuda_toolkit']/failure")
    f2 = junit.find("testsuite[@name='host2']/testcase[@name='nccl']/failure")
    assert 'expected 12.4.1, found 12.2.0' in f3.get('message')
    assert 'expected 2.21.5-1+cuda12.4, found 2.20.3-1+cuda12.4' in f2.get('message')
    assert junit.get('failures') == '2'
    assert '| critical | host3 | cuda_toolkit | 12.4.1 | 12.2.0 | baseline |' in markdown
    assert '| critical | host2 | nccl | 2.21.5-1+cuda12.4 | 2.20.3-1+cuda12.4 | majority |' in markdown

    # Skew removed: the same command passes.
    write_cache(cache, skewed=False)
    rc, out = run_playbook(args, tmp_path)
    assert rc == 0, out
    report, junit, markdown = read_reports(reports)
    assert report['findings'] == [] and junit.get('failures') == '0'
    assert markdown.startswith('# GPU stack drift audit: passed')


def test_offline_inventory_host_missing_from_cache_fails(tmp_path):
    cache = tmp_path / 'cache'
    inventory = tmp_path / 'inventory'
    write_cache(cache, skewed=False)
    write_inventory(inventory, with_pins=False)
    with open(str(inventory / 'hosts.yml'), 'a') as handle:
        handle.write('            host4:\n')
    rc, out = run_playbook(['-i', str(inventory), '-e', 'drift_audit_fact_cache=%s' % cache,
                            '-e', 'drift_audit_report_dir=%s' % (tmp_path / 'r')], tmp_path)
    assert rc == 2, out
    # The 12 consistent components and the fabric manager, pinned by nvidia_driver_version.
    assert 'CRITICAL host4 [unknown]: no facts for 14 components: no entry in the fact cache' in out
    # A pattern narrows the audit to hosts that have facts.
    rc, out = run_playbook(['-i', str(inventory), '-e', 'drift_audit_fact_cache=%s' % cache,
                            '-e', 'drift_audit_hosts=host1:host2', '-e', 'drift_audit_report_dir=%s' % (tmp_path / 'r')],
                           tmp_path)
    assert rc == 0, out
    assert 'drift audit: 2 hosts' in out


def test_live_mode_local_hosts_and_an_unreachable_one(tmp_path):
    inventory = tmp_path / 'hosts.yml'
    local = 'ansible_connection: local, ansible_python_interpreter: "%s"' % sys.executable
    inventory.write_text(
        'all:\n  children:\n    gpu_nodes:\n      hosts:\n'
        '        live1: {%s}\n        live2: {%s}\n'
        '        dead1: {ansible_host: 127.0.0.1, ansible_port: 9, ansible_connection: ssh,'
        ' ansible_ssh_common_args: "-o ConnectTimeout=3 -o StrictHostKeyChecking=no"}\n' % (local, local))
    reports = tmp_path / 'reports'
    rc, out = run_playbook(['-i', str(inventory), '-e', 'drift_audit_report_dir=%s' % reports], tmp_path)
    assert rc == 2, out
    report, junit, markdown = read_reports(reports)
    assert report['summary']['unknown_hosts'] == ['dead1']
    assert set(f['host'] for f in report['findings']) == {'dead1'}
    assert all(f['message'].startswith('unreachable: ') for f in report['findings'])
    # Both live hosts ran stack_facts on this machine and agree with each other.
    rc, out = run_playbook(['-i', str(inventory), '-e', 'drift_audit_hosts=live1:live2',
                            '-e', 'drift_audit_report_dir=%s' % reports], tmp_path)
    assert rc == 0, out
    report, junit, markdown = read_reports(reports)
    assert report['summary']['hosts'] == 2 and report['findings'] == []
    # 13 consistent components per host, and the fabric manager that the driver role's default pins where
    # installed (not on this machine: no finding); the slurm role's pins default to empty (each node's archive
    # version, docs/platforms.md), which is no baseline, so munge is not a check of its own. kubectl may be installed here: the roles'
    # default Kubernetes release pins nothing (only an inventory's k8s_node_version does). Where this machine has
    # a docker CLI, each host's swarm state is one check more (the same on both: no finding).
    with_docker = [h for h, row in (report.get('swarm') or {}).items() if row and row['state'] != 'absent']
    assert with_docker in ([], ['live1', 'live2'])
    assert report['summary']['checks'] == 28 + len(with_docker)
    assert 'pinned by role defaults' in out
