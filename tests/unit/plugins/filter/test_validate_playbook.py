# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/validate.yml's bad-input path with ansible-playbook over local connections: each bad
setting stops the run with a message naming the variable, before anything on a node changes and
with nothing drained (stand-ins for Slurm's commands record any call)."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import re
import subprocess
import sys

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
PLAYBOOK = os.path.join(REPO, 'playbooks', 'validate.yml')
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), 'ansible-playbook')

pytestmark = pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason='ansible-playbook not beside this python')


@pytest.fixture(scope='module')
def lab(tmp_path_factory):
    root = tmp_path_factory.mktemp('validate')
    calls = root / 'slurm-calls'
    bin_dir = root / 'bin'
    bin_dir.mkdir()
    for name in ('scontrol', 'srun', 'sacct', 'iperf3', 'tc'):
        tool = bin_dir / name
        tool.write_text(u'#!/bin/sh\necho "%s $*" >> %s\n' % (name, calls))
        tool.chmod(0o755)
    inventory = root / 'hosts.yml'
    inventory.write_text(
        u'all:\n  children:\n    gpucluster:\n      hosts:\n        node-a:\n        node-b:\n'
        u'      vars:\n        ansible_connection: local\n        ansible_python_interpreter: %s\n'
        u'        validate_address: 127.0.0.1\n' % sys.executable)
    env = dict(os.environ, PATH='%s:%s' % (bin_dir, os.environ.get('PATH', '')),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, 'collections'),
               ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_NOCOLOR='1',
               ANSIBLE_BECOME='false')
    return {'root': root, 'calls': calls, 'inventory': str(inventory), 'env': env}


def run(lab, extra):
    settings = dict({'validate_drain_bad_nodes': True, 'validate_install_tools': False,
                     'validate_report_dir': str(lab['root'] / 'report'),
                     'validate_work_dir': str(lab['root'] / 'work')}, **extra)
    proc = subprocess.run([ANSIBLE_PLAYBOOK, '-i', lab['inventory'], PLAYBOOK, '-e', json.dumps(settings)],
                          env=lab['env'], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=300, check=False)
    return proc.returncode, ' '.join(proc.stdout.split())


@pytest.mark.parametrize('extra, says', [
    ({'validate_fraction': 1.5}, 'validate_fraction must be a number above 0 and at most 1, got 1.5'),
    ({'validate_fraction': 0}, 'validate_fraction must be a number above 0 and at most 1, got 0'),
    ({'validate_fraction': 'most'}, 'validate_fraction must be a number above 0 and at most 1'),
    ({'validate_sku': 'b300_nvl'}, 'validate_sku must be empty (no absolute floors) or one of h100_sxm, h200_sxm'),
    ({'validate_hosts': 'node-a'}, 'the pair matrix needs at least two hosts: validate_hosts=node-a matched 1 (node-a)'),
    ({'validate_torch_python': '/nonexistent/python3'},
     'validate_torch_python=/nonexistent/python3 cannot run torch.distributed on node-'),
])
def test_bad_input_is_refused_and_changes_nothing(lab, extra, says):
    rc, out = run(lab, extra)
    assert rc != 0, out
    assert says in out, out
    assert 'Nothing was changed' in out
    assert re.search(r'changed=[1-9]', out) is None, out
    # No Slurm command (drain, job), no measurement ran; no report, no work directory was made.
    assert not lab['calls'].exists(), lab['calls'].read_text()
    assert not (lab['root'] / 'report').exists() and not (lab['root'] / 'work').exists()


def test_a_run_without_the_lab_parts_writes_reports_and_metrics(lab):
    """Matrix, MTU check and the Slurm job off (they need a lab: molecule/default/verify_validate.yml):
    the checks that remain pass, the three reports and each node's textfile metrics are written,
    and nothing is drained."""
    textfile = lab['root'] / 'textfile'
    textfile.mkdir()
    settings = {'validate_matrix': False, 'validate_mtu_check': False, 'validate_ddp': False,
                'validate_report_dir': str(lab['root'] / 'ok-report')}
    if os.geteuid() == 0:
        settings['validate_textfile_dir'] = str(textfile)
    rc, out = run(lab, settings)
    assert rc == 0, out
    assert 'Validation passed on 2 nodes' in out
    with open(str(lab['root'] / 'ok-report' / 'validate.json')) as handle:
        report = json.load(handle)
    assert report['ok'] is True and report['nodes'] == ['node-a', 'node-b']
    statuses = dict(((c['node'], c['name']), c['status']) for c in report['checks'])
    assert statuses[('fleet', 'pair_matrix')] == 'skipped' and statuses[('fleet', 'ddp_allreduce')] == 'skipped'
    assert (lab['root'] / 'ok-report' / 'validate.md').read_text().startswith('# Cluster acceptance (validate): PASSED\n')
    assert (lab['root'] / 'ok-report' / 'validate.junit.xml').read_text().startswith('<?xml')
    # Both hosts are this machine: the one textfile holds the last node's metrics (written as root:root,
    # so only a root test run can write it).
    if os.geteuid() == 0:
        prom = (textfile / 'gpucluster_validate.prom').read_text()
        assert 'gpucluster_validate_verdict{verdict="passed"} 1' in prom and 'gpucluster_validate_ok 1' in prom
    assert not lab['calls'].exists(), lab['calls'].read_text()
