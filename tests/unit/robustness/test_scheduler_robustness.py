# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whose hold a node is under, and the Slurm node plan, under hostile and careless input.

Every case states its exact outcome: the decision (drain/resume/none) with the reason we would
write, or a refusal whose message names what is wrong. Inputs come from scontrol (an operator's
reason can hold anything), docker node inspect, a gres.conf read back from a node and gpu_facts.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import time

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.gpucluster.core.plugins.filter import slurm as sl
from ansible_collections.gpucluster.core.plugins.module_utils import scheduler as sc

OURS = sc.make_reason('health', 'gpu1 row remap pending')
STAMP = ' [root@2026-11-30T10:00:00]'


def _line(state, reason):
    return 'NodeName=node2 Arch=x86_64 State=%s Partitions=gpu Reason=%s%s' % (state, reason, STAMP)


# id, scontrol line, want, expected (action, reason written)
SLURM_CASES = [
    # An operator's reason that forges what follows Reason= in scontrol's output.
    ('forged-stamp-and-state', _line('IDLE+DRAIN', 'fan [x@y] State=IDLE Reason=' + OURS), 'release', ('none', None)),
    ('forged-ours-after-stamp', 'NodeName=node2 State=IDLE+DRAIN Reason=x' + STAMP + ' Comment=Reason=' + OURS,
     'release', ('none', None)),
    ('our-reason-then-comment-with-brackets', _line('IDLE+DRAIN', OURS) + ' Comment=see [a@b] Extra=1',
     'release', ('resume', None)),
    ('nul-and-controls-in-reason', _line('IDLE+DRAIN', 'a\x00b\x1b[31mc'), 'release', ('none', None)),
    ('bidi-override-in-reason', _line('IDLE+DRAIN', u'\u202egpucluster-health: x'), 'release', ('none', None)),
    ('unicode-digits-in-tag', _line('IDLE+DRAIN', OURS.replace('#', u'#\u00b2', 1)[:len(OURS) + 1]), 'release',
     ('none', None)),
    ('our-reason-lower-case-state', _line('idle+drain', OURS), 'release', ('resume', None)),
    ('state-with-empty-words', _line('IDLE++DRAIN+', OURS), 'release', ('resume', None)),
    ('state-unknown-word', _line('IDLE+DRAIN+WEIRD', OURS), 'release', ('none', None)),
    ('state-question-mark-flag', _line('IDLE+DRAIN+?', OURS), 'release', ('none', None)),
    ('no-state-field', 'NodeName=node2 Reason=' + OURS + STAMP, 'release', ('none', None)),
    ('no-state-critical', 'NodeName=node2 Arch=x86_64', 'hold', ('none', None)),
    ('other-node-only', _line('IDLE', 'x').replace('node2', 'node20'), 'hold', ('none', None)),
    ('down-asterisk-ours', _line('DOWN*+DRAIN', OURS), 'release', ('none', None)),
    ('idle-critical', 'NodeName=node2 State=IDLE', 'hold', ('drain', OURS)),
]


@pytest.mark.parametrize('line, want, expected', [c[1:] for c in SLURM_CASES], ids=[c[0] for c in SLURM_CASES])
def test_slurm_hostile_states(line, want, expected):
    decision = sc.decide(sc.Slurm.parse_state(line, 'node2'), want, 'health', 'gpu1 row remap pending')
    assert (decision.action, decision.reason) == expected, decision


def test_a_huge_reason_line_is_read_in_bounded_time():
    line = _line('IDLE+DRAIN', ' [a@' * 200000)
    started = time.monotonic()
    state = sc.Slurm.parse_state(line, 'node2')
    assert time.monotonic() - started < 2 and state.hold is None
    assert sc.decide(state, 'release', 'health').action == 'none'


@pytest.mark.parametrize('text, reason_text', [
    ('x' * (20 * 2 ** 20), 'x' * (sc.REASON_MAX - len('gpucluster/health#000000: ') - 3) + '...'),
    (u'\u202e\u2066evil\u2069 \x00\x07', '??evil? ??'),
    ('a\nState=DOWN Reason=forged', 'a State=DOWN Reason=forged'),
    ('[root@2026-11-30T10:00:00]', '(root@2026-11-30T10:00:00)'),
    ('"quoted"', "'quoted'"),
])
def test_our_reasons_stay_bounded_and_printable(text, reason_text):
    reason = sc.make_reason('health', text)
    assert reason.split(': ', 1)[1] == reason_text
    state = sc.Slurm.parse_state(_line('IDLE+DRAIN', reason) + ' Comment=x', 'node2')
    assert state.hold == sc.Hold('health', reason_text, False)


@pytest.mark.parametrize('text, message', [
    ('[' * 100000, 'nested too deeply'),
    ('{"Spec": "drain"}', ''),
    ('[1, 2]', 'printed 2 nodes'),
    ('null', 'printed no node'),
    ('', 'Expecting value'),
])
def test_swarm_hostile_inspect_output(text, message):
    if text == '{"Spec": "drain"}':
        # Not a node object docker prints: no availability, so nothing is done.
        state = sc.Swarm.parse_state(text)
        assert state.operator == ('UNKNOWN',) and sc.decide(state, 'hold', 'health', 'x').action == 'none'
        return
    with pytest.raises(ValueError, match=message):
        sc.Swarm.parse_state(text)


def test_swarm_label_that_is_not_text():
    node = {'Spec': {'Availability': 'drain', 'Labels': {'gpucluster.health': ['x']}}, 'Status': {'State': 'ready'}}
    state = sc.Swarm.parse_state(node)
    assert state.held and state.hold is None
    assert sc.decide(state, 'release', 'health').action == 'none'


# kubectl's output that is not a Node as the API returns it: refused with the reason, or read as a state that is
# left alone (UNKNOWN), never a traceback and never a hold or release of a node nobody can read.
@pytest.mark.parametrize('text, message', [
    ('[' * 100000, 'nested too deeply'),
    ('null', 'printed no node'),
    ('{"kind": "List", "items": []}', 'printed no node'),
    ('[1, 2]', 'printed 2 nodes'),
    ('', 'Expecting value'),
])
def test_kubernetes_hostile_kubectl_output(text, message):
    with pytest.raises(ValueError, match=message):
        sc.Kubernetes.parse_state(text)


@pytest.mark.parametrize('node, held, operator', [
    # Not a Node: no name, or another kind: UNKNOWN, nothing done.
    ({'kind': 'Pod', 'metadata': {'name': 'gpu2'}, 'spec': {}}, False, ('UNKNOWN',)),
    ({'metadata': 'gpu2', 'spec': 'taints'}, False, ('UNKNOWN',)),
    # Malformed parts are read as absent, never trusted as ours.
    ({'metadata': {'name': 'gpu2', 'annotations': ['gpucluster.io/reason']}, 'spec': {'taints': 'critical'}}, False, ()),
    ({'metadata': {'name': 'gpu2', 'annotations': {'gpucluster.io/reason': ['x']}},
      'spec': {'taints': [{'key': 'gpucluster.io/health', 'value': 'critical', 'effect': 'NoSchedule'}, 'junk', None]}},
     True, ()),
    ({'metadata': {'name': 'gpu2'}, 'spec': {'unschedulable': 'true'}}, False, ()),
    ({'metadata': {'name': 'gpu2'}, 'spec': {'taints': [{'effect': 'NoSchedule'}]}}, False, ('TAINT None:NoSchedule',)),
])
def test_kubernetes_malformed_node(node, held, operator):
    state = sc.Kubernetes.parse_state(node)
    assert (state.held, state.hold, state.operator) == (held, None, operator)
    for want in ('hold', 'release'):
        decision = sc.decide(state, want, 'health', 'x')
        if operator or want == 'release':
            assert decision.action == 'none'


def test_kubernetes_reason_of_ours_in_a_huge_annotation_is_not_ours():
    reason = sc.make_reason('health', 'x' * 150) + 'y' * 100000
    node = {'metadata': {'name': 'gpu2', 'annotations': {'gpucluster.io/reason': reason}},
            'spec': {'taints': [{'key': 'gpucluster.io/health', 'value': 'critical', 'effect': 'NoSchedule'}]}}
    state = sc.Kubernetes.parse_state(node)
    assert state.held and state.hold is None
    assert sc.decide(state, 'release', 'health').action == 'none'


# A gres.conf read back from a node and gpu_facts: refused naming what, never expanded or duplicated.
GRES_CASES = [
    ('huge-range', 'File=/dev/nvidia[0-999999999]', "names 1000000000 device files; at most 256"),
    ('many-ranges', 'File=/dev/nvidia[0-200],/dev/nvidia[0-200]', 'names 402 device files'),
    ('backwards', 'File=/dev/nvidia[9-0]', 'it runs backwards'),
    ('overlong-number', 'File=/dev/nvidia[0-1234567890123]', 'cannot read the device range'),
    ('unicode-digit', u'File=/dev/nvidia[\u00b2]', None),  # not a range: read as a plain path, no traceback
]


@pytest.mark.parametrize('file_field, message', [c[1:] for c in GRES_CASES], ids=[c[0] for c in GRES_CASES])
def test_gres_conf_read_back(file_field, message):
    conf = ('NodeName=node1 CPUs=16 Boards=1 SocketsPerBoard=2 CoresPerSocket=8 ThreadsPerCore=1 RealMemory=1000 '
            'State=UNKNOWN\n')
    gres = 'NodeName=node1 Name=gpu Type=a %s\n' % file_field
    if message is None:
        kept = sl.kept_nodes(conf, gres)
        assert kept['node1']['gres'][0]['minors'] == []
        return
    with pytest.raises(AnsibleFilterError) as err:
        sl.kept_nodes(conf, gres)
    assert message in str(err.value) and 'gres.conf line' in str(err.value)


def test_a_gpu_listed_twice_and_another_missing():
    gpu = {'present': True, 'count': 2, 'health': {'status': 'ok', 'issues': []},
           'devices': [{'index': 0, 'minor_number': 0, 'name': 'NVIDIA RTX A5000', 'uuid': 'GPU-a',
                        'pci_address': '0000:81:00.0'}] * 2}
    report = 'NodeName=node1 CPUs=16 Boards=1 SocketsPerBoard=2 CoresPerSocket=8 ThreadsPerCore=1 RealMemory=257000\n'
    plan = sl.node_plan(report, gpu, {'name': 'node1', 'gpus': 2, 'gpu_type': 'rtx_a5000'})
    assert sl.gres_lines([plan['node']]) == ['NodeName=node1 Name=gpu Type=rtx_a5000 File=/dev/nvidia[0-1]']
    assert plan['problems'] == ['nvidia-smi lists the GPU with UUID GPU-a more than once',
                                'nvidia-smi lists the GPU with PCI bus id 0000:81:00.0 more than once',
                                'nvidia-smi lists the GPU with index 0 more than once',
                                'nvidia-smi lists the GPU with minor number 0 more than once']
