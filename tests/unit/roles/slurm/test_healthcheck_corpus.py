# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Slurm wrapper's decisions on the REAL health program's output for every recording of the corpus.

The health program is the archive roles/health_check installs, run on each recording
(tests/monitoring/health_corpus.py: every nvidia-smi XML, every kernel log, every recorded nvidia-smi
failure); its exit code and JSON go through the wrapper's logic (module_utils/slurm_health.py for the
verdict, module_utils/scheduler.py for the decision) for each node state the wrapper meets. Fails when the corpus is missing (conftest's real_fixtures_dir).
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import sys

import pytest

from ansible_collections.gpucluster.core.plugins.module_utils import scheduler as sc
from ansible_collections.gpucluster.core.plugins.module_utils import slurm_health as sh

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
sys.path.insert(0, os.path.join(REPO, 'tests', 'monitoring'))
import health_corpus  # noqa: E402

ANOTHER_OF_OURS = sc.make_reason('health', 'gpu7 an older finding')
LEGACY = 'gpucluster-health: gpu7 an older finding'
OPERATOR = 'operator: fan swap'
# Node states as `scontrol --oneliner show node` prints them, read by scheduler.Slurm.
_STAMP = ' [root@2026-11-29T17:40:01]'
IDLE = sc.Slurm.parse_line('NodeName=node2 State=IDLE Partitions=gpu')
DRAINED_BY_US = sc.Slurm.parse_line('NodeName=node2 State=IDLE+DRAIN Reason=' + ANOTHER_OF_OURS + _STAMP)
DRAINED_BY_US_BEFORE = sc.Slurm.parse_line('NodeName=node2 State=IDLE+DRAIN Reason=' + LEGACY + _STAMP)
DRAINED_BY_OPERATOR = sc.Slurm.parse_line('NodeName=node2 State=MIXED+DRAIN Reason=' + OPERATOR + _STAMP)
DOWN_BY_OPERATOR = sc.Slurm.parse_line('NodeName=node2 State=DOWN Reason=PSU swap, do not use' + _STAMP)
# Recordings whose verdict is known from what they record (the rest is checked by the rules alone).
KNOWN = {
    '05_xid_kernel_log/gpud__dmesg.0.log': ('critical', 'Xid 48'),
    '05_xid_kernel_log/gpud__dmesg-with-xid-119.log': ('critical', 'Xid 119'),
    '05_xid_kernel_log/_extracted_from_docs/gpud-commit5014ca5b__journalctl-k_multiline-fallen-off-bus_no-xid_b200-2901.log':
        ('critical', 'fallen off the bus'),
    '03_nvidia_smi_text/_extracted_from_docs/nvdocker-issue365__nvidia-smi_FAILED_modprobe-module-not-found.txt':
        ('critical', 'nvidia-smi'),
    '01_nvidia_smi_xml/telegraf__dual_a5000-v13.xml': ('ok', None),
    '01_nvidia_smi_xml/netdata__tesla-p100.xml': ('warning', None),
}


@pytest.fixture(scope='module')
def verdicts(real_fixtures_dir):
    results = health_corpus.run_all(real_fixtures_dir)
    assert len(results) >= 40, 'the corpus runner found %d recordings' % len(results)
    return results


def test_every_recording_gives_a_verdict_the_wrapper_accepts(verdicts):
    seen = set()
    for rec, code, out, _text in verdicts:
        report = json.loads(out)
        status, issues, why = sh.parse_report(code, out)
        # The program's exit code and JSON agree on every recording: the wrapper takes the verdict as given.
        assert status == report['status'] and code == sh.EXIT_CODES[status], (rec['name'], code, why)
        assert issues == report['issues'], rec['name']
        seen.add(status)
    # The corpus exercises every verdict the wrapper acts on.
    assert {'ok', 'warning', 'critical'} <= seen, seen


def _decide(status, issues, state):
    return sc.decide_verdict(status, state, sh.SOURCE, sh.finding_text(issues) if status == 'critical' else None)


def _decisions(status, issues):
    return dict((name, _decide(status, issues, state))
                for name, state in (('idle', IDLE), ('ours', DRAINED_BY_US), ('ours_before', DRAINED_BY_US_BEFORE),
                                    ('operator', DRAINED_BY_OPERATOR), ('down', DOWN_BY_OPERATOR)))


def test_wrapper_decision_on_every_recording(verdicts):
    for rec, code, out, _text in verdicts:
        status, issues, _why = sh.parse_report(code, out)
        got = _decisions(status, issues)
        where = rec['name']
        # An operator's drain and an operator's DOWN are never touched, whatever the program says.
        assert got['operator'].action == 'none', (where, got['operator'])
        assert got['down'].action == 'none', (where, got['down'])
        if status == 'critical':
            critical = [i for i in issues if i.get('severity') == 'critical']
            assert critical, (where, 'critical without a critical finding')
            reason = sh.drain_reason(issues)
            for name in ('idle', 'ours', 'ours_before'):
                assert (got[name].action, got[name].reason) == ('drain', reason), (where, name, got[name])
            assert len(reason) <= sc.REASON_MAX, (where, reason)
            assert all(32 <= ord(c) < 127 for c in reason), (where, reason)
            # Every reason the wrapper writes reads back as a health hold of ours, through scontrol.
            back = sc.Slurm.parse_line('NodeName=node2 State=IDLE+DRAIN Reason=' + reason + _STAMP + ' Comment=x')
            assert back.hold is not None and back.hold.source == 'health' and not back.hold.legacy, (where, reason)
            # The reason names the first critical finding (cut to the limit, never dropped).
            first = sc.clean_text(' '.join(str(critical[0].get('message') or critical[0].get('check')).split()))
            assert first[:40] in reason or len(reason) >= sc.REASON_MAX - 1, (where, first, reason)
            # Already drained with this very reason: no second scontrol update.
            assert _decide(status, issues, back).action == 'none', where
        elif status == 'ok':
            assert got['idle'].action == 'none', (where, got['idle'])
            assert got['ours'].action == 'resume' and got['ours_before'].action == 'resume', (where, got)
        else:  # warning and unknown: nothing changes
            assert all(d.action == 'none' for d in got.values()), (where, status, got)


def test_known_recordings(verdicts):
    by_name = dict((rec['name'], (code, out)) for rec, code, out, _text in verdicts)
    for name, (status, fragment) in sorted(KNOWN.items()):
        assert name in by_name, 'recording %s not run' % name
        got, issues, _why = sh.parse_report(*by_name[name])
        assert got == status, (name, got, issues)
        decision = _decide(got, issues, IDLE)
        if status == 'critical':
            assert decision.action == 'drain' and fragment.lower() in decision.reason.lower(), (name, decision)
        else:
            assert decision.action == 'none', (name, decision)
