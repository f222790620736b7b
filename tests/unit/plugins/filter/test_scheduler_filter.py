# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The scheduler filters the day-2 playbooks use (plugins/filter/scheduler.py over module_utils/scheduler.py)."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.gpucluster.core.plugins.filter import scheduler as f
from ansible_collections.gpucluster.core.plugins.module_utils import scheduler as sc

STAMP = ' [root@2026-11-29T17:40:01]'
UPGRADE = sc.make_reason('upgrade', 'upgrade')


def _show(state, reason=None, name='node2'):
    line = 'NodeName=%s Arch=x86_64 State=%s ThreadsPerCore=1 Partitions=gpu' % (name, state)
    return line + (' Reason=' + reason + STAMP if reason else '')


def test_filters_are_registered():
    assert sorted(f.FilterModule().filters()) == ['scheduler_decide', 'scheduler_hold', 'scheduler_node_state',
                                                  'scheduler_reason', 'scheduler_verdict']


def test_reason_and_hold():
    reason = f.scheduler_reason('failed at health gate: GPU health', 'upgrade')
    assert reason == sc.make_reason('upgrade', 'failed at health gate: GPU health')
    assert f.scheduler_hold(reason) == {'ours': True, 'source': 'upgrade', 'text': 'failed at health gate: GPU health',
                                        'legacy': False}
    assert f.scheduler_hold('rolling_upgrade: upgrade') == {'ours': True, 'source': 'upgrade', 'text': 'upgrade',
                                                            'legacy': True}
    assert f.scheduler_hold('operator: fan swap')['ours'] is False
    assert f.scheduler_hold(None)['ours'] is False
    with pytest.raises(AnsibleFilterError, match="scheduler_reason: source 'rolling_upgrade' is not one of"):
        f.scheduler_reason('x', 'rolling_upgrade')


def test_node_state():
    got = f.scheduler_node_state(_show('DOWN', 'PSU swap, do not use'), 'node2')
    assert got == {'name': 'node2', 'state': ['DOWN'], 'held': False, 'reason': 'PSU swap, do not use',
                   'ours': False, 'source': None, 'text': None, 'legacy': False, 'operator': ['DOWN']}
    assert f.scheduler_node_state('', 'node2')['operator'] == ['UNKNOWN']
    with pytest.raises(AnsibleFilterError, match='expected the text of `scontrol --oneliner show node`, got list'):
        f.scheduler_node_state(['x'], 'node2')


# The rolling upgrade's steps as the playbook would run them: drain at the start, resume at the end.
@pytest.mark.parametrize('state, reason, start, end', [
    ('IDLE', None, 'drain', 'resume'),
    ('MIXED', None, 'drain', 'resume'),
    ('IDLE+DRAIN', 'rolling_upgrade: failed at reboot', 'drain', 'resume'),       # the previous release's run
    ('IDLE+DRAIN', sc.make_reason('upgrade', 'failed at reboot'), 'drain', 'resume'),
    ('IDLE+DRAIN', 'operator: fan swap', 'none', 'none'),
    ('IDLE+DRAIN', sc.make_reason('health', 'gpu1 row remap pending'), 'none', 'none'),
    ('DOWN', 'PSU swap, do not use', 'none', 'none'),
    ('IDLE+MAINTENANCE+RESERVED', None, 'none', 'none'),
])
def test_decide_as_the_rolling_upgrade_would(state, reason, start, end):
    got = f.scheduler_decide(_show(state, reason), 'hold', 'upgrade', 'upgrade', node='node2')
    assert got['action'] == start, got
    if start == 'drain':
        assert got['argv'] == ['scontrol', 'update', 'NodeName=node2', 'State=DRAIN', 'Reason=' + UPGRADE]
        after = _show(state.replace('+DRAIN', '') + '+DRAIN', UPGRADE)
    else:
        assert got['argv'] is None and got['reason'] is None
        after = _show(state, reason)
    done = f.scheduler_decide(after, 'release', 'upgrade', node='node2')
    assert done['action'] == end, done
    if end == 'resume':
        assert done['argv'] == ['scontrol', 'update', 'NodeName=node2', 'State=RESUME']


def test_decide_takes_a_state_dict_and_reads_the_reason_again():
    state = f.scheduler_node_state(_show('IDLE+DRAIN', 'operator: fan swap'), 'node2')
    forged = dict(state, ours=True, source='upgrade')
    assert f.scheduler_decide(forged, 'release', 'upgrade')['action'] == 'none'
    ours = f.scheduler_node_state(_show('IDLE+DRAIN', UPGRADE), 'node2')
    assert f.scheduler_decide(ours, 'release', 'upgrade', command='/usr/bin/scontrol')['argv'] == [
        '/usr/bin/scontrol', 'update', 'NodeName=node2', 'State=RESUME']
    with pytest.raises(AnsibleFilterError, match='is not one that scheduler_node_state returns'):
        f.scheduler_decide(dict(state, held='yes'), 'release', 'upgrade')


def test_decide_picks_the_node_from_every_nodes_output():
    out = '\n'.join([_show('IDLE', name='node1'), _show('DOWN', 'PSU', name='node3')])
    assert f.scheduler_decide(out, 'hold', 'validate', 'every pair below 80 Gb/s', node='node1')['action'] == 'drain'
    assert f.scheduler_decide(out, 'hold', 'validate', 'every pair below 80 Gb/s', node='node3')['action'] == 'none'
    assert f.scheduler_decide(out, 'hold', 'validate', 'x', node='node9')['why'].startswith('left as it is')


@pytest.mark.parametrize('args, message', [
    (('drain', 'upgrade', 'x'), "want 'drain' is not one of hold, release, keep"),
    (('hold', 'maint', 'x'), "source 'maint' is not one of"),
    (('hold', 'upgrade', ''), 'needs a text'),
])
def test_decide_refuses(args, message):
    with pytest.raises(AnsibleFilterError, match=message):
        f.scheduler_decide(_show('IDLE'), *args, node='node2')


def test_verdict():
    crit = f.scheduler_verdict(_show('IDLE'), 'critical', 'health', 'gpu1 row remap pending', node='node2')
    assert crit['action'] == 'drain' and crit['reason'] == sc.make_reason('health', 'gpu1 row remap pending')
    assert f.scheduler_verdict(_show('DOWN+DRAIN', crit['reason']), 'ok', node='node2')['action'] == 'none'
    assert f.scheduler_verdict(_show('IDLE+DRAIN', crit['reason']), 'ok', node='node2')['action'] == 'resume'
    with pytest.raises(AnsibleFilterError, match="status 'fine' is not one of"):
        f.scheduler_verdict(_show('IDLE'), 'fine')


def test_swarm():
    node = [{'ID': 'abc', 'Spec': {'Role': 'worker', 'Availability': 'drain',
                                   'Labels': {'gpucluster.health': sc.make_reason('health', 'x')}},
             'Description': {'Hostname': 'node2'}, 'Status': {'State': 'ready'}}]
    got = f.scheduler_decide(json.dumps(node), 'release', 'health', scheduler='swarm')
    assert got['argv'] == ['docker', 'node', 'update', '--availability', 'active', '--label-rm', 'gpucluster.health',
                           'node2']
    assert f.scheduler_node_state(node, scheduler='swarm')['source'] == 'health'
    with pytest.raises(AnsibleFilterError, match="scheduler 'k8s' is not one of kubernetes, slurm, swarm"):
        f.scheduler_node_state('x', scheduler='k8s')
    with pytest.raises(AnsibleFilterError, match='expected the output of docker node inspect NODE'):
        f.scheduler_node_state('not json', scheduler='swarm')


def test_kubernetes():
    node = {'apiVersion': 'v1', 'kind': 'Node', 'metadata': {'name': 'gpu2', 'annotations': {}},
            'spec': {'taints': [{'key': 'nvidia.com/gpu', 'value': 'present', 'effect': 'NoSchedule'}]}}
    got = f.scheduler_verdict(json.dumps(node), 'critical', 'health', 'gpu1 row remap pending', node='gpu2',
                              scheduler='kubernetes', command='/usr/bin/kubectl')
    reason = sc.make_reason('health', 'gpu1 row remap pending')
    assert got['action'] == 'drain' and got['reason'] == reason
    assert got['argv'][:5] == ['/usr/bin/kubectl', 'patch', 'node', 'gpu2', '--type=json']
    assert json.loads(got['argv'][5][len('--patch='):]) == [
        {'op': 'test', 'path': '/spec/taints/0', 'value': node['spec']['taints'][0]},
        {'op': 'add', 'path': '/spec/taints/-',
         'value': {'key': 'gpucluster.io/health', 'value': 'critical', 'effect': 'NoSchedule'}},
        {'op': 'add', 'path': '/metadata/annotations/gpucluster.io~1reason', 'value': reason}]
    state = f.scheduler_node_state(json.dumps(node), 'gpu2', scheduler='kubernetes')
    assert state['held'] is False and state['operator'] == []
    # A state (not kubectl's output) cannot carry the patch: refused, naming what is needed.
    with pytest.raises(AnsibleFilterError, match='kubectl get node gpu2 -o json'):
        f.scheduler_decide(state, 'hold', 'health', 'x', node='gpu2', scheduler='kubernetes')
    assert f.scheduler_decide(state, 'keep', 'health', node='gpu2', scheduler='kubernetes')['argv'] is None
    with pytest.raises(AnsibleFilterError, match='expected the output of kubectl get node gpu9'):
        f.scheduler_node_state(json.dumps(node), 'gpu9', scheduler='kubernetes')
