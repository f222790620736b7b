# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""lab/stage.sh, the wrapper of every `make test` stage: a failed stage leaves, besides its excerpt, one
line that says why (STAGE_LOG.why), which .ci/run prints last, so a CI log cut to its tail names the
failure that stopped a host (not one a rescue handled). Run here with stand-ins for molecule and a command; their output is the shape Ansible
2.21 and molecule print."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import stat
import subprocess

import pytest

STAGE = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'lab', 'stage.sh')

MOLECULE_FAILURE = """\
INFO     [default > prepare] Executing

TASK [Wait for the node to finish booting] *************************************
ok: [default-node2]
[ERROR]: Task failed: Module failed: non-zero return code
Origin: /check/work/main/lab/bootstrap.yml:71:7

fatal: [default-node1]: FAILED! => {"changed": false, "msg": "non-zero return code", "rc": 1, "stdout": "maintenance"}

TASK [Wait for sshd's host key (made at first boot)] ***************************
fatal: [default-node3]: UNREACHABLE! => {"changed": false, "msg": "second failure, not the first"}

PLAY RECAP *********************************************************************
ERROR    [default > prepare] Executed: Failed
ERROR    Ansible return code was 2, command was: ansible-playbook prepare.yml
"""


def _tool(tmp_path, name, output, rc):
    text = tmp_path / ('%s.out' % name)
    text.write_text(output)
    tool = tmp_path / 'bin' / name
    tool.parent.mkdir(exist_ok=True)
    tool.write_text('#!/bin/sh\ncat %s\nexit %d\n' % (text, rc))
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return str(tool)


def _stage(tmp_path, name, tool):
    log = tmp_path / 'stages'
    proc = subprocess.run(['bash', STAGE, name, tool], env=dict(os.environ, STAGE_LOG=str(log)),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, check=False)
    why = tmp_path / 'stages.why'
    return proc, log.read_text(), why.read_text() if why.exists() else None


def test_failed_molecule_stage_names_the_first_failed_task(tmp_path):
    proc, stages, why = _stage(tmp_path, 'molecule default', _tool(tmp_path, 'molecule', MOLECULE_FAILURE, 2))
    assert proc.returncode == 2
    assert 'stage molecule default' in stages and 'FAILED (exit 2)' in stages
    assert why.startswith('== why stage molecule default failed: TASK [Wait for the node to finish booting] '
                          'fatal: [default-node1]: FAILED! =>')
    assert 'maintenance' in why and 'second failure' not in why
    assert why.count('\n') == 1


def test_molecule_error_without_a_failed_task_is_the_reason(tmp_path):
    output = 'INFO     [default > create] Executing\nCRITICAL Scenario default: the driver is missing\n'
    _proc, _stages, why = _stage(tmp_path, 'molecule default', _tool(tmp_path, 'molecule', output, 1))
    assert why == '== why stage molecule default failed: CRITICAL Scenario default: the driver is missing\n'


def test_failed_command_gives_its_last_line_cut_to_1000_characters(tmp_path):
    output = '1 passed\n' + 'E' * 2000 + '\n\n\n'
    _proc, _stages, why = _stage(tmp_path, 'units', _tool(tmp_path, 'units', output, 1))
    assert why == '== why stage units failed: %s\n' % ('E' * 1000)


def test_passed_stage_leaves_no_reason(tmp_path):
    proc, stages, why = _stage(tmp_path, 'units', _tool(tmp_path, 'units', 'fatal: [x]: FAILED! => {}\n', 0))
    assert proc.returncode == 0
    assert 'FAILED' not in stages
    assert why is None


@pytest.mark.parametrize('rc', [1, 2])
def test_reasons_of_two_failed_stages_are_both_kept(tmp_path, rc):
    _stage(tmp_path, 'first', _tool(tmp_path, 'first', 'one\n', rc))
    _proc, _stages, why = _stage(tmp_path, 'second', _tool(tmp_path, 'second', 'two\n', rc))
    assert why == '== why stage first failed: one\n== why stage second failed: two\n'


# Ansible 2.21's output for a play whose first failure was rescued and whose second was ignored: what stopped
# node1 is the last failure before the recap that counts it, with the msg line of its result (printed below it).
RESCUED_THEN_FAILED = """\
TASK [Try the bad input (rescued)] *********************************************
[ERROR]: Task failed: Action failed: bad input named
fatal: [node1]: FAILED! =>
    changed: false
    msg: the expected refusal of a bad input

TASK [Check something optional] ************************************************
fatal: [node2]: FAILED! =>
    changed: false
    msg: optional, ignored
...ignoring

TASK [Read the training log] ***************************************************
ok: [node2]
fatal: [node1]: FAILED! =>
    changed: false
    failed: true
    msg: the file /tmp/train-A.jsonl does not exist

PLAY RECAP *********************************************************************
node1                      : ok=3    changed=0    unreachable=0    failed=1    skipped=0    rescued=1    ignored=0
node2                      : ok=3    changed=0    unreachable=0    failed=0    skipped=0    rescued=0    ignored=1

CRITICAL Ansible return code was 2, command was: ansible-playbook verify.yml
"""


def test_the_failure_that_stopped_a_host_is_the_reason_not_a_rescued_or_ignored_one(tmp_path):
    _proc, _stages, why = _stage(tmp_path, 'molecule storage', _tool(tmp_path, 'molecule', RESCUED_THEN_FAILED, 1))
    assert why == ('== why stage molecule storage failed: TASK [Read the training log] fatal: [node1]: FAILED! => '
                   'msg: the file /tmp/train-A.jsonl does not exist\n')


def test_a_recap_without_failures_is_passed_over(tmp_path):
    earlier = ('TASK [Converge] ****\nfatal: [node1]: FAILED! => {"msg": "rescued"}\n\nPLAY RECAP ****\n'
               'node1                      : ok=3    changed=0    unreachable=0    failed=0    skipped=0    rescued=1\n\n')
    _proc, _stages, why = _stage(tmp_path, 'molecule storage',
                                 _tool(tmp_path, 'molecule', earlier + RESCUED_THEN_FAILED, 1))
    assert 'TASK [Read the training log]' in why and 'rescued' not in why


def test_without_a_recap_the_first_failure_not_ignored_is_the_reason(tmp_path):
    cut = RESCUED_THEN_FAILED.split('TASK [Read the training log]', maxsplit=1)[0].replace('fatal: [node1]', 'fatal: [node3]')
    _proc, _stages, why = _stage(tmp_path, 'molecule storage', _tool(tmp_path, 'molecule', cut, 1))
    assert why == ('== why stage molecule storage failed: TASK [Try the bad input (rescued)] fatal: [node3]: FAILED! => '
                   'msg: the expected refusal of a bad input\n')


# Ansible 2.21's output for a failed assert whose fail_msg spans lines (to_nice_json): the why-line names the
# condition that failed and joins the block; a result without msg does not swallow the next task's name.
ASSERT_BLOCK = """\
TASK [Check every rail pair is below the floor] ********************************
fatal: [localhost]: FAILED! =>
    assertion: __rail.pairs | selectattr('status', 'equalto', 'below_floor') | list | length == 3
    changed: false
    evaluated_to: false
    msg: |-
        {
            "fleet_verdict": "all_below_floor",
            "pairs": [

                {"status": "failed"}
            ]
        }

PLAY RECAP *********************************************************************
localhost                  : ok=3    changed=0    unreachable=0    failed=1    skipped=0    rescued=0    ignored=0
"""

NO_MSG_THEN_TASK = """\
TASK [Probe] *******************************************************************
fatal: [node1]: FAILED! =>
    changed: false
    rc: 3
TASK [Read the state] **********************************************************
fatal: [node2]: FAILED! =>
    msg: the state file is missing

PLAY RECAP *********************************************************************
node1                      : ok=3    changed=0    unreachable=0    failed=0    skipped=0    rescued=1    ignored=0
node2                      : ok=3    changed=0    unreachable=0    failed=1    skipped=0    rescued=0    ignored=0
"""


def test_a_long_block_message_is_cut_to_1000_characters(tmp_path):
    long_block = ASSERT_BLOCK.replace('{"status": "failed"}', '\n'.join(['                "x%03d",' % i for i in range(300)]))
    _proc, _stages, why = _stage(tmp_path, 'molecule default', _tool(tmp_path, 'molecule', long_block, 2))
    assert len(why) == len('== why stage molecule default failed: ') + 1000 + 1


# A long assertion and a long msg, folded by Ansible's YAML output onto lines indented deeper than their keys.
FOLDED = """\
TASK [Check every rail pair is below the floor] ********************************
fatal: [localhost]: FAILED! =>
    assertion: __rail.pairs | selectattr('status', 'equalto', 'below_floor') | list |
        length == 3
    changed: false
    evaluated_to: false
    msg: 'rc=2 verdict=blamed (none); pairs: node1 node2 ok 1.2;
        node1 node3 below_floor 0.4'

PLAY RECAP *********************************************************************
localhost                  : ok=3    changed=0    unreachable=0    failed=1    skipped=0    rescued=0    ignored=0
"""


_RAIL_TASK = 'TASK [Check every rail pair is below the floor] fatal: [localhost]: FAILED! => '
_RAIL_ASSERTION = "assertion: __rail.pairs | selectattr('status', 'equalto', 'below_floor') | list | length == 3 "


@pytest.mark.parametrize('output, reason', [
    # A failed assert names its condition; its block message is joined into the line.
    (ASSERT_BLOCK, _RAIL_TASK + _RAIL_ASSERTION
     + 'msg: { "fleet_verdict": "all_below_floor", "pairs": [ {"status": "failed"} ] }'),
    # A result without msg does not swallow the next task's name.
    (NO_MSG_THEN_TASK, 'TASK [Read the state] fatal: [node2]: FAILED! => msg: the state file is missing'),
    # A folded assertion and a folded msg are joined.
    (FOLDED, _RAIL_TASK + _RAIL_ASSERTION
     + "msg: 'rc=2 verdict=blamed (none); pairs: node1 node2 ok 1.2; node1 node3 below_floor 0.4'"),
])
def test_the_reason_joins_the_results_lines(tmp_path, output, reason):
    _proc, _stages, why = _stage(tmp_path, 'molecule default', _tool(tmp_path, 'molecule', output, 2))
    assert why == '== why stage molecule default failed: %s\n' % reason
