# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The HealthCheckProgram wrapper of roles/slurm: its decisions (module_utils/slurm_health.py) and its front end
(files/gpucluster_slurm_healthcheck.py) run from the archive the role installs."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import atexit
import json
import os
import shutil
import stat
import sys
import tempfile

import pytest

from ansible_collections.gpucluster.core.plugins.module_utils import slurm_health as sh

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
sys.path.insert(0, os.path.join(REPO, 'tests'))
import node_programs  # noqa: E402

# The front end imported from the archive the slurm role installs (built as the role builds it).
_ARCHIVE_DIR = tempfile.mkdtemp(prefix='slurm-healthcheck-test-')
atexit.register(shutil.rmtree, _ARCHIVE_DIR, True)
hc = node_programs.import_front_end('slurm_healthcheck', _ARCHIVE_DIR)

CRIT = json.dumps({'status': 'critical', 'issues': [
    {'gpu': 1, 'check': 'row_remap', 'severity': 'critical', 'message': 'row remap pending'},
    {'gpu': 0, 'check': 'temperature', 'severity': 'warning', 'message': 'hot'},
    {'gpu': 3, 'check': 'xid', 'severity': 'critical', 'message': 'GPU3 Xid 79 fell off the bus'}]})
P = 'gpucluster-health'


@pytest.mark.parametrize('rc, out, status', [
    (0, '{"status": "ok", "issues": []}', 'ok'),
    (1, '{"status": "warning", "issues": []}', 'warning'),
    (2, CRIT, 'critical'),
    (2, 'not json', 'unknown'),  # no JSON verdict: never acted on
    (3, '{"status": "unknown"}', 'unknown'),
    (127, '', 'unknown'),
])
def test_parse_report(rc, out, status):
    assert sh.parse_report(rc, out)[0] == status


def test_drain_reason_lists_critical_findings_only():
    _status, issues, _why = sh.parse_report(2, CRIT)
    assert sh.drain_reason(P, issues) == 'gpucluster-health: gpu1 row remap pending; GPU3 Xid 79 fell off the bus'
    assert sh.drain_reason(P, []) == 'gpucluster-health: health program reports critical'
    long_issues = [{'gpu': i, 'severity': 'critical', 'message': 'x' * 50} for i in range(10)]
    assert len(sh.drain_reason(P, long_issues)) == sh.REASON_MAX


@pytest.mark.parametrize('text, flags, reason', [
    ('NodeName=node2 Arch=x86_64 State=IDLE ThreadsPerCore=1', {'IDLE'}, ''),
    ('NodeName=node2 State=IDLE+DRAIN Partitions=gpu Reason=gpucluster-health: gpu1 row remap pending [root@2026-11-29T17:40:01]',
     {'IDLE', 'DRAIN'}, 'gpucluster-health: gpu1 row remap pending'),
    ('NodeName=node3 State=MIXED+DRAIN Reason=operator: fan swap [alice@2026-11-29T17:40:01] Comment=(null)',
     {'MIXED', 'DRAIN'}, 'operator: fan swap'),
])
def test_parse_node(text, flags, reason):
    assert sh.parse_node(text) == (flags, reason)


ISSUES = [{'gpu': 1, 'severity': 'critical', 'message': 'row remap pending'}]
OURS = 'gpucluster-health: gpu1 row remap pending'


@pytest.mark.parametrize('status, flags, reason, action', [
    ('critical', {'IDLE'}, '', ('drain', OURS)),
    ('critical', {'IDLE', 'DRAIN'}, OURS, 'none'),
    ('critical', {'IDLE', 'DRAIN'}, 'gpucluster-health: gpu0 other', ('drain', OURS)),
    ('critical', {'IDLE', 'DRAIN'}, 'operator: fan swap', 'none'),
    ('ok', {'IDLE', 'DRAIN'}, OURS, ('resume', None)),
    ('warning', {'MIXED', 'DRAIN'}, OURS, 'none'),  # resumes on ok only
    ('ok', {'IDLE', 'DRAIN'}, 'operator: fan swap', 'none'),
    ('ok', {'IDLE', 'DRAIN'}, 'gpucluster-healthy people', 'none'),
    ('ok', {'IDLE'}, '', 'none'),
    ('unknown', {'IDLE', 'DRAIN'}, OURS, 'none'),
    ('unknown', {'IDLE'}, '', 'none'),
])
def test_decide(status, flags, reason, action):
    got = sh.decide(status, ISSUES, flags, reason, P)
    if action == 'none':
        assert got[0] == 'none'
    else:
        assert got == action


def _script(path, body):
    with open(path, 'w') as f:
        f.write('#!/bin/sh\n' + body)
    os.chmod(path, stat.S_IRWXU)
    return path


@pytest.fixture
def cluster(tmp_path):
    """A stand-in scontrol that keeps the node state in a file and logs updates."""
    state = tmp_path / 'state'
    state.write_text('NodeName=node2 State=IDLE Partitions=gpu\n')
    log = tmp_path / 'updates'
    scontrol = _script(str(tmp_path / 'scontrol'),
                       'if [ "$1" = show ]; then cat %s; else echo "$@" >> %s; fi\n' % (state, log))
    health = tmp_path / 'health'
    cfg = tmp_path / 'cfg.json'

    def configure(program_body, state_text=None):
        if program_body is not None:
            _script(str(health), program_body)
        if state_text is not None:
            state.write_text(state_text)
        cfg.write_text(json.dumps({'program': str(health), 'node_name': 'node2', 'reason_prefix': P,
                                   'timeout': 5, 'scontrol': scontrol}))
        return str(cfg)
    return configure, log


def test_main_drains_on_critical(cluster):
    configure, log = cluster
    cfg = configure("echo '%s'; exit 2\n" % CRIT)
    assert hc.main([cfg]) == 0
    assert log.read_text().strip() == ('update NodeName=node2 State=DRAIN Reason=gpucluster-health: gpu1 row remap '
                                       'pending; GPU3 Xid 79 fell off the bus')


def test_main_resumes_its_own_drain(cluster):
    configure, log = cluster
    cfg = configure("echo '{\"status\": \"ok\", \"issues\": []}'; exit 0\n",
                    'NodeName=node2 State=IDLE+DRAIN Reason=%s [root@t]\n' % OURS)
    assert hc.main([cfg]) == 0
    assert log.read_text().strip() == 'update NodeName=node2 State=RESUME'


def test_main_keeps_an_operator_drain(cluster):
    configure, log = cluster
    cfg = configure("echo '{\"status\": \"ok\", \"issues\": []}'; exit 0\n",
                    'NodeName=node2 State=IDLE+DRAIN Reason=operator: fan swap [alice@t]\n')
    assert hc.main([cfg]) == 0
    assert not log.exists()


def test_main_missing_program_changes_nothing(cluster):
    configure, log = cluster
    cfg = configure(None)
    assert hc.main([cfg]) == 0
    assert not log.exists()


def test_main_hanging_program_drains(cluster):
    configure, log = cluster
    cfg = configure('sleep 30\n')
    with open(cfg) as f:
        data = json.load(f)
    data['program_timeout'] = 1
    with open(cfg, 'w') as f:
        json.dump(data, f)
    assert hc.main([cfg]) == 0
    assert log.read_text().startswith('update NodeName=node2 State=DRAIN Reason=gpucluster-health: nvidia-smi hung')


def test_main_unreadable_settings(tmp_path):
    assert hc.main([str(tmp_path / 'missing.json')]) == 1
