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

from ansible_collections.gpucluster.core.plugins.module_utils import scheduler as sc
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
CRIT_TEXT = 'gpu1 row remap pending; GPU3 Xid 79 fell off the bus'
CRIT_REASON = sc.make_reason('health', CRIT_TEXT)


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
    assert sh.finding_text(issues) == CRIT_TEXT
    assert sh.drain_reason(issues) == CRIT_REASON
    assert CRIT_REASON.startswith('gpucluster/health#') and CRIT_REASON.endswith(': ' + CRIT_TEXT)
    assert sh.drain_reason([]) == sc.make_reason('health', 'health program reports critical')
    long_issues = [{'gpu': i, 'severity': 'critical', 'message': 'x' * 50} for i in range(10)]
    reason = sh.drain_reason(long_issues)
    assert sc.REASON_MAX - 1 <= len(reason) <= sc.REASON_MAX and reason.endswith('...')
    # A finding quoting a huge field costs no more than a short one.
    huge = [{'gpu': 'G' * 10 ** 6, 'severity': 'critical', 'message': 'm' * 10 ** 7}]
    assert len(sh.drain_reason(huge)) == sc.REASON_MAX


ISSUES = [{'gpu': 1, 'severity': 'critical', 'message': 'row remap pending'}]
OURS = sc.make_reason('health', 'gpu1 row remap pending')
LEGACY = 'gpucluster-health: gpu1 row remap pending'


def _decide(status, state, reason):
    line = 'NodeName=node2 State=%s Partitions=gpu' % state
    if reason:
        line += ' Reason=%s [root@2026-11-29T17:40:01]' % reason
    return sc.decide_verdict(status, sc.Slurm.parse_line(line), sh.SOURCE,
                             sh.finding_text(ISSUES) if status == 'critical' else None)


@pytest.mark.parametrize('status, state, reason, action', [
    ('critical', 'IDLE', '', ('drain', OURS)),
    ('critical', 'IDLE+DRAIN', OURS, 'none'),
    ('critical', 'IDLE+DRAIN', sc.make_reason('health', 'gpu0 other'), ('drain', OURS)),
    ('critical', 'IDLE+DRAIN', LEGACY, ('drain', OURS)),         # the previous release's form, rewritten
    ('critical', 'IDLE+DRAIN', 'operator: fan swap', 'none'),
    ('critical', 'DOWN', 'PSU swap, do not use', 'none'),
    ('critical', 'IDLE+MAINTENANCE+RESERVED', '', 'none'),
    ('ok', 'IDLE+DRAIN', OURS, ('resume', None)),
    ('ok', 'IDLE+DRAIN', LEGACY, ('resume', None)),              # drained before the upgrade: resumed
    ('ok', 'DOWN+DRAIN', OURS, 'none'),                          # State=RESUME would clear DOWN
    ('ok', 'IDLE+DRAIN+FAIL', OURS, 'none'),
    ('ok', 'DOWN', 'PSU swap, do not use', 'none'),
    ('warning', 'MIXED+DRAIN', OURS, 'none'),  # resumes on ok only
    ('ok', 'IDLE+DRAIN', 'operator: fan swap', 'none'),
    ('ok', 'IDLE+DRAIN', 'gpucluster-healthy people', 'none'),
    ('ok', 'IDLE+DRAIN', 'maint gpucluster-health: x', 'none'),
    ('ok', 'IDLE+DRAIN', sc.make_reason('shape', 'x'), 'none'),  # another source's hold
    ('ok', 'IDLE', '', 'none'),
    ('unknown', 'IDLE+DRAIN', OURS, 'none'),
    ('unknown', 'IDLE', '', 'none'),
])
def test_decide(status, state, reason, action):
    got = _decide(status, state, reason)
    if action == 'none':
        assert got.action == 'none'
    else:
        assert (got.action, got.reason) == action


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
                       'case " $* " in *" show "*) cat %s ;; *) echo "$@" >> %s ;; esac\n' % (state, log))
    health = tmp_path / 'health'
    cfg = tmp_path / 'cfg.json'

    def configure(program_body, state_text=None):
        if program_body is not None:
            _script(str(health), program_body)
        if state_text is not None:
            state.write_text(state_text)
        cfg.write_text(json.dumps({'program': str(health), 'node_name': 'node2', 'timeout': 5,
                                   'scontrol': scontrol}))
        return str(cfg)
    return configure, log


def test_main_drains_on_critical(cluster):
    configure, log = cluster
    cfg = configure("echo '%s'; exit 2\n" % CRIT)
    assert hc.main([cfg]) == 0
    assert log.read_text().strip() == 'update NodeName=node2 State=DRAIN Reason=' + CRIT_REASON


@pytest.mark.parametrize('reason', [OURS, LEGACY])
def test_main_resumes_its_own_drain(cluster, reason):
    configure, log = cluster
    cfg = configure("echo '{\"status\": \"ok\", \"issues\": []}'; exit 0\n",
                    'NodeName=node2 State=IDLE+DRAIN Reason=%s [root@t]\n' % reason)
    assert hc.main([cfg]) == 0
    assert log.read_text().strip() == 'update NodeName=node2 State=RESUME'


def test_main_keeps_an_operator_drain(cluster):
    configure, log = cluster
    cfg = configure("echo '{\"status\": \"ok\", \"issues\": []}'; exit 0\n",
                    'NodeName=node2 State=IDLE+DRAIN Reason=operator: fan swap [alice@t]\n')
    assert hc.main([cfg]) == 0
    assert not log.exists()


@pytest.mark.parametrize('status, code', [('critical', 2), ('ok', 0)])
def test_main_keeps_a_node_an_operator_set_down(cluster, capsys, status, code):
    # "PSU swap, do not use": neither drained over on critical nor resumed (which clears DOWN) on ok.
    configure, log = cluster
    body = CRIT if status == 'critical' else json.dumps({'status': 'ok', 'issues': []})
    cfg = configure("echo '%s'; exit %d\n" % (body, code),
                    'NodeName=node2 State=DOWN Reason=PSU swap, do not use [alice@2026-11-29T17:40:01]\n')
    assert hc.main([cfg]) == 0
    assert not log.exists()
    if status == 'critical':
        assert ('node2: health critical: left as it is: its state DOWN is not ours to change '
                '(reason: PSU swap, do not use)') in capsys.readouterr().err


def test_main_passes_the_scontrol_it_was_given(cluster, tmp_path):
    configure, _log = cluster
    cfg = configure("echo '%s'; exit 2\n" % CRIT)
    with open(cfg) as f:
        data = json.load(f)
    seen = tmp_path / 'argv'
    data['scontrol'] = _script(str(tmp_path / 'scontrol2'), 'echo "$@" >> %s\n' % seen)
    with open(cfg, 'w') as f:
        json.dump(data, f)
    assert hc.main([cfg]) == 0
    # Its output named no node: nothing is done to what cannot be read.
    assert seen.read_text().strip() == '--oneliner show node node2'


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
    assert log.read_text().startswith('update NodeName=node2 State=DRAIN Reason=gpucluster/health#')
    assert ': nvidia-smi hung (the health program gave no answer within 1s; killed)' in log.read_text()


def test_main_unreadable_settings(tmp_path):
    assert hc.main([str(tmp_path / 'missing.json')]) == 1


@pytest.mark.parametrize('settings, fragment', [
    ({'program': '/bin/true', 'node_name': 'n', 'scontrol': 7}, 'scontrol must be the path of scontrol, got int'),
    ({'program': '/bin/true', 'node_name': 'n', 'scontrol': ['x']}, 'got list'),
])
def test_main_refuses_a_scontrol_that_is_not_a_path(tmp_path, capsys, settings, fragment):
    path = tmp_path / 's.json'
    path.write_text(json.dumps(settings))
    assert hc.main([str(path)]) == 1
    assert fragment in capsys.readouterr().err


def test_settings_of_an_older_release_still_load(tmp_path):
    path = tmp_path / 's.json'
    path.write_text(json.dumps({'program': '/bin/true', 'node_name': 'n', 'reason_prefix': 'maint', 'scontrol': None}))
    cfg = hc.load_settings(str(path))
    assert cfg['scontrol'] == 'scontrol' and 'prefix' not in cfg


def _racing_scontrol(tmp_path, before, after):
    """A scontrol whose node is resumed by someone else between the wrapper's read and its update."""
    state = tmp_path / 'race-state'
    state.write_text(before)
    return _script(str(tmp_path / 'scontrol-race'),
                   'case " $* " in *" show "*) cat %s ;;\n'
                   '  *) printf "%%s" "%s" > %s; echo "slurm_update error: Invalid node state specified" >&2; exit 1 ;;\n'
                   'esac\n' % (state, after.replace('"', '\\"'), state))


@pytest.mark.parametrize('after, code, says', [
    ('NodeName=node2 State=IDLE Partitions=gpu\n', 0,
     'node2: no longer held (resumed by someone else between the read and the resume) '
     '(%s update NodeName=node2: slurm_update error: Invalid node state specified)'),
    ('NodeName=node2 State=IDLE+DRAIN Reason=%s [root@t]\n' % OURS, 1,
     '%s update NodeName=node2 failed: slurm_update error: Invalid node state specified'),
])
def test_main_rereads_the_node_when_its_resume_fails(cluster, tmp_path, capsys, after, code, says):
    configure, _log = cluster
    cfg = configure("echo '{\"status\": \"ok\", \"issues\": []}'; exit 0\n")
    with open(cfg) as f:
        data = json.load(f)
    data['scontrol'] = _racing_scontrol(tmp_path, 'NodeName=node2 State=IDLE+DRAIN Reason=%s [root@t]\n' % OURS, after)
    with open(cfg, 'w') as f:
        json.dump(data, f)
    assert hc.main([cfg]) == code
    assert says % data['scontrol'] in capsys.readouterr().err


@pytest.mark.parametrize('action, state, done', [
    ('resume', 'NodeName=n State=IDLE', True),
    ('resume', 'NodeName=n State=IDLE+DRAIN Reason=%s' % OURS, False),
    ('drain', 'NodeName=n State=IDLE+DRAIN Reason=%s' % OURS, True),
    ('drain', 'NodeName=n State=IDLE+DRAIN Reason=operator: fan swap', False),
    ('drain', 'NodeName=n State=IDLE', False),
])
def test_settled_after_a_failed_command(action, state, done):
    decision = sc.Decision(action, OURS if action == 'drain' else None, 'x')
    assert sc.settled(decision, sc.Slurm.parse_line(state))[0] is done
