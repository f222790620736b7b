# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""module_utils/scheduler.py: our reason format, whose hold a node is under, the decisions, the
Slurm, Swarm and Kubernetes readings and commands."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import itertools
import json

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.gpucluster.core.plugins.module_utils import scheduler as sc

STAMP = ' [root@2026-11-29T17:40:01]'


def _line(state, reason=None, name='node2', stamp=STAMP, tail=''):
    """One `scontrol --oneliner show node` line in the order Slurm 22.05 prints it (src/api/node_info.c)."""
    line = ('NodeName=%s Arch=x86_64 CoresPerSocket=8 CPUAlloc=0 CPUTot=16 CPULoad=0.01 AvailableFeatures=ib '
            'ActiveFeatures=ib Gres=gpu:rtx_a5000:2 NodeAddr=%s NodeHostName=%s Version=22.05.8 '
            'OS=Linux 6.1.0-18-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1 (2024-02-01) RealMemory=248832 '
            'AllocMem=0 FreeMem=250000 Sockets=2 Boards=1 State=%s ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A '
            'MCS_label=N/A Partitions=gpu BootTime=2026-11-29T08:00:00 SlurmdStartTime=2026-11-29T08:01:00 '
            'LastBusyTime=2026-11-29T17:00:00 CfgTRES=cpu=16,mem=243G,billing=16,gres/gpu=2 AllocTRES= '
            'CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s'
            % (name, name, name, state))
    if reason is not None:
        line += ' Reason=' + reason + stamp
    return line + tail


# --- the reason format --------------------------------------------------------------------------

def test_make_reason_exact_form():
    reason = sc.make_reason('health', 'gpu1 row remap pending')
    assert reason == 'gpucluster/health#%s: gpu1 row remap pending' % sc._tag('health', 'gpu1 row remap pending')
    assert len(reason.split(': ', 1)[0]) == len('gpucluster/health#') + 6
    assert sc.parse_reason(reason) == sc.Hold('health', 'gpu1 row remap pending', False)
    assert sc.is_ours(reason) and sc.is_ours(reason, 'health') and not sc.is_ours(reason, 'shape')


@pytest.mark.parametrize('text, expected', [
    ('a  b\n\tc', 'a b c'),
    ('GPU "quoted" [x]', "GPU 'quoted' (x)"),
    (u'temp 85\u00b0C \u202e', 'temp 85?C ?'),
    ('Xid 79, pid=0, name=python3, GPU has fallen off the bus', 'Xid 79, pid=0, name=python3, GPU has fallen off the bus'),
    (42, '42'),
])
def test_reason_text_is_printable_ascii(text, expected):
    assert sc.parse_reason(sc.make_reason('shape', text)).text == expected


def test_reason_is_bounded():
    for source in sc.SOURCES:
        reason = sc.make_reason(source, 'x' * 10000)
        assert len(reason) == sc.REASON_MAX and reason.endswith('...')
        assert sc.parse_reason(reason).source == source
    # Bounded before it is cleaned: a 20 MB text costs no more than a short one.
    assert len(sc.make_reason('health', 'y' * (20 * 2 ** 20))) == sc.REASON_MAX


@pytest.mark.parametrize('source, text, message', [
    ('maint', 'x', "source 'maint' is not one of health"),
    ('Health', 'x', 'is not one of'),
    ('health', '   ', 'needs a text'),
    ('health', None, 'needs a text'),
])
def test_make_reason_refuses(source, text, message):
    with pytest.raises(ValueError, match=message):
        sc.make_reason(source, text)


@settings(max_examples=300)
@given(source=st.sampled_from(sc.SOURCES), text=st.text(min_size=1, max_size=400))
def test_every_reason_we_make_reads_back_as_ours(source, text):
    cleaned = sc.clean_text(text, sc.REASON_MAX - sc._prefix_length(source))
    if not cleaned:
        with pytest.raises(ValueError):
            sc.make_reason(source, text)
        return
    reason = sc.make_reason(source, text)
    assert len(reason) <= sc.REASON_MAX
    assert all(' ' <= c <= '~' and c not in '[]"' for c in reason)
    assert sc.parse_reason(reason) == sc.Hold(source, cleaned, False)
    assert sc.make_reason(source, cleaned) == reason
    # Through scontrol: Slurm appends [user@time], and fields may follow.
    for tail in ('', ' Comment=rack 4 row=2', ' Extra=x ReservationName=maint'):
        state = sc.Slurm.parse_line(_line('IDLE+DRAIN', reason, tail=tail))
        assert state.reason == reason and state.hold == sc.Hold(source, cleaned, False), tail
    # Any edit makes it someone else's.
    assert sc.parse_reason(reason + ' RMA') is None
    assert sc.parse_reason(reason[:-1] + ('a' if reason[-1] != 'a' else 'b')) is None


@settings(max_examples=200)
@given(source=st.sampled_from(sc.SOURCES), tag=st.text('0123456789abcdef', min_size=6, max_size=6),
       text=st.text(st.characters(min_codepoint=33, max_codepoint=126, blacklist_characters='[]"'),
                    min_size=1, max_size=60))
def test_a_made_up_tag_is_ours_only_when_it_is_the_tag(source, tag, text):
    reason = 'gpucluster/%s#%s: %s' % (source, tag, text)
    assert (sc.parse_reason(reason) is not None) == (tag == sc._tag(source, text))


# Reasons operators, slurmctld and other tools write: none of them is ours.
OPERATOR_REASONS = [
    'operator: fan swap', 'PSU swap, do not use', 'maint', 'maintenance: gpu swap', 'maint gpucluster-health',
    'Not responding', 'Kill task failed', 'Node unexpectedly rebooted', 'batch job complete failure',
    'Prolog error', 'Epilog error', 'Reboot ASAP', 'reboot requested', 'Low RealMemory', 'Low socket*core*thread count',
    'gres/gpu count reported lower than configured (1 < 2)', 'NHC: check_hw_ib: No IB port is ACTIVE',
    'RMA 12345 (alice)', 'xid 79', 'hung GPU per nvidia-smi', 'gpucluster-healthy people',
    'gpucluster health: gpu1', 'gpucluster-health gpu1', 'GPUCLUSTER-HEALTH: gpu1', ' gpucluster-health: gpu1',
    'gpucluster-health:', 'gpucluster-health:  ', 'gpucluster-shape:x', 'rolling_upgrade:upgrade',
    'decommission: retired', 'gpucluster validate 2026-11-29T17:40:01Z: every pair below 80 Gb/s',
    'gpucluster/health: gpu1 row remap pending', 'gpucluster/health#: gpu1', 'gpucluster/health#00000: gpu1',
    'gpucluster/health#000000: gpu1 row remap pending', 'gpucluster/health#ZZZZZZ: gpu1',
    'gpucluster/maint#%s: x' % sc._tag('maint', 'x'),
    'gpucluster/Health#%s: x' % sc._tag('Health', 'x'),
    'gpucluster/health#%s: x' % sc._tag('health', 'x').upper(),
    'gpucluster/health#%s:  x' % sc._tag('health', ' x'),
    'gpucluster/health#%s: x ' % sc._tag('health', 'x '),
    'gpucluster/health#%s: a  b' % sc._tag('health', 'a  b'),
    'gpucluster/health#%s: x"' % sc._tag('health', 'x"'),
    sc.make_reason('health', 'gpu1 row remap pending') + ' - keep, RMA 1234',
    'see ' + sc.make_reason('health', 'gpu1 row remap pending'),
    'gpucluster/health#%s: %s' % (sc._tag('health', 'x' * 190), 'x' * 190),
    '',
]


@pytest.mark.parametrize('reason', OPERATOR_REASONS)
def test_no_operator_reason_is_ours(reason):
    assert sc.parse_reason(reason) is None and not sc.is_ours(reason)
    state = sc.Slurm.parse_line(_line('IDLE+DRAIN', reason))
    assert state.held and state.hold is None
    for source in sc.SOURCES:
        for want in ('hold', 'release'):
            assert sc.decide(state, want, source, 'finding').action == 'none', (source, want)


@pytest.mark.parametrize('reason, hold', [
    ('gpucluster-health: gpu1 row remap pending', sc.Hold('health', 'gpu1 row remap pending', True)),
    ('gpucluster-health: GPU0 Xid 79 (PCI:0000:81:00): 79, pid=0, name=python3, GPU has fallen off the bus',
     sc.Hold('health', 'GPU0 Xid 79 (PCI:0000:81:00): 79, pid=0, name=python3, GPU has fallen off the bus', True)),
    ('gpucluster-shape: slurm_node_gpus=2 but nvidia-smi reports 1 GPU',
     sc.Hold('shape', 'slurm_node_gpus=2 but nvidia-smi reports 1 GPU', True)),
    ('rolling_upgrade: failed at health gate: GPU health', sc.Hold('upgrade', 'failed at health gate: GPU health', True)),
    ('rolling_upgrade: ' + 'u' * 300, sc.Hold('upgrade', 'u' * 300, True)),
])
def test_the_previous_releases_reasons_are_read_as_ours(reason, hold):
    assert sc.parse_reason(reason) == hold
    state = sc.Slurm.parse_line(_line('IDLE+DRAIN', reason))
    assert state.hold == hold
    # Its owner gives the node back, and rewrites the hold in the new form when it holds it again.
    assert sc.decide(state, 'release', hold.source) == sc.Decision('resume', None, 'our hold is lifted: ' + reason)
    again = sc.decide(state, 'hold', hold.source, hold.text)
    assert again.action == 'drain' and again.reason == sc.make_reason(hold.source, hold.text)
    other = [s for s in sc.SOURCES if s != hold.source][0]
    assert sc.decide(state, 'release', other).action == 'none'


# --- Slurm: reading scontrol -----------------------------------------------------------------------

@pytest.mark.parametrize('line, words, reason', [
    (_line('IDLE'), {'IDLE'}, ''),
    (_line('IDLE+DRAIN', 'operator: fan swap'), {'IDLE', 'DRAIN'}, 'operator: fan swap'),
    (_line('MIXED+DRAIN', 'operator: fan swap', stamp=' [alice@2026-11-29T17:40:01]', tail=' Comment=(null)'),
     {'MIXED', 'DRAIN'}, 'operator: fan swap'),
    # A reason with key=value text reads whole (the old reader stopped at " name=").
    (_line('IDLE+DRAIN', 'gpucluster-health: GPU0 Xid 79, pid=0, name=python3, GPU has fallen off the bus'),
     {'IDLE', 'DRAIN'}, 'gpucluster-health: GPU0 Xid 79, pid=0, name=python3, GPU has fallen off the bus'),
    # An operator's brackets inside the reason: the [user@time] Slurm appends is the one before a field or the end.
    (_line('IDLE+DRAIN', 'see [bob@ticket] now', tail=' Extra=x'), {'IDLE', 'DRAIN'}, 'see [bob@ticket] now'),
    # No [user@time] (reason_time 0): the reason ends where the next field begins.
    (_line('DOWN', 'Not responding', stamp='', tail=' Comment=rack 4'), {'DOWN'}, 'Not responding'),
    (_line('DOWN+NOT_RESPONDING', 'Not responding', stamp=' [slurm@Tomorrow 10:00]'), {'DOWN', 'NOT_RESPONDING'},
     'Not responding'),
    # A reason of two lines: scontrol --oneliner joins them.
    (_line('IDLE+DRAIN', 'line one       line two'), {'IDLE', 'DRAIN'}, 'line one       line two'),
    # Older scontrol/sinfo suffixes.
    (_line('DOWN*'), {'DOWN', 'NOT_RESPONDING'}, ''),
    (_line('IDLE$'), {'IDLE', 'MAINT'}, ''),
    (_line('DRAINED@', 'x'), {'DRAINED', 'REBOOT_REQUESTED'}, 'x'),
    ('NodeName=node2 Arch=x86_64', set(), ''),
])
def test_slurm_parse_line(line, words, reason):
    state = sc.Slurm.parse_line(line)
    assert (state.name, set(state.words), state.reason) == ('node2', words, reason)


def test_slurm_parse_states_and_state():
    text = '\n'.join([_line('IDLE', name='node1'), _line('DOWN', 'PSU', name='node2'), '', 'garbage'])
    states = sc.Slurm.parse_states(text)
    assert sorted(states) == ['node1', 'node2']
    assert sc.Slurm.parse_state(text, 'node2').operator == ('DOWN',)
    assert sc.Slurm.parse_state(_line('IDLE', name='node1')).name == 'node1'
    # A node scontrol did not list (or output that is not scontrol's) is nothing to act on.
    for missing in (sc.Slurm.parse_state(text, 'node9'), sc.Slurm.parse_state('', 'node2'),
                    sc.Slurm.parse_state(text)):
        assert missing.operator == ('UNKNOWN',)
        assert sc.decide(missing, 'hold', 'health', 'x').action == 'none'


def test_slurm_argv():
    slurm = sc.Slurm('/usr/bin/scontrol')
    reason = sc.make_reason('health', 'gpu1 row remap pending')
    assert slurm.show_argv('node2') == ['/usr/bin/scontrol', '--oneliner', 'show', 'node', 'node2']
    assert slurm.show_argv() == ['/usr/bin/scontrol', '--oneliner', 'show', 'node']
    assert slurm.action_argv('node2', sc.Decision('drain', reason, '')) == [
        '/usr/bin/scontrol', 'update', 'NodeName=node2', 'State=DRAIN', 'Reason=' + reason]
    assert slurm.action_argv('node2', sc.Decision('resume', None, '')) == [
        '/usr/bin/scontrol', 'update', 'NodeName=node2', 'State=RESUME']
    assert slurm.action_argv('node2', sc.Decision('none', None, '')) is None
    with pytest.raises(ValueError, match='scontrol must be'):
        sc.Slurm(['scontrol'])


# --- decisions ---------------------------------------------------------------------------------------

OURS = sc.make_reason('health', 'gpu1 row remap pending')
OURS_SHAPE = sc.make_reason('shape', 'slurm_node_gpus=2 but nvidia-smi reports 1 GPU')


@pytest.mark.parametrize('state, reason, want, action', [
    ('IDLE', None, 'hold', 'drain'),
    ('MIXED', None, 'hold', 'drain'),
    ('IDLE+DRAIN', OURS, 'hold', 'none'),                       # already held with this reason
    ('IDLE+DRAIN', sc.make_reason('health', 'gpu0 other'), 'hold', 'drain'),
    ('IDLE+DRAIN', 'gpucluster-health: gpu1 row remap pending', 'hold', 'drain'),  # rewritten in the new form
    ('IDLE+DRAIN', OURS_SHAPE, 'hold', 'none'),                 # another source's hold
    ('IDLE+DRAIN', 'operator: fan swap', 'hold', 'none'),
    ('IDLE+DRAIN', OURS, 'release', 'resume'),
    ('MIXED+DRAIN', OURS, 'release', 'resume'),
    ('IDLE+DRAIN+NOT_RESPONDING', OURS, 'release', 'resume'),
    ('IDLE+DRAIN', OURS_SHAPE, 'release', 'none'),
    ('IDLE+DRAIN', 'operator: fan swap', 'release', 'none'),
    ('IDLE', None, 'release', 'none'),
    ('DOWN+DRAIN', OURS, 'release', 'none'),                    # State=RESUME would clear DOWN
    ('DOWN', 'PSU swap, do not use', 'hold', 'none'),
    ('IDLE+DRAIN', OURS, 'keep', 'none'),
])
def test_decide(state, reason, want, action):
    got = sc.decide(sc.Slurm.parse_line(_line(state, reason)), want, 'health', 'gpu1 row remap pending')
    assert got.action == action, got
    assert (got.reason == OURS) == (action == 'drain')


@pytest.mark.parametrize('status, state, reason, expected', [
    ('critical', 'IDLE', None, ('drain', OURS, 'not held')),
    ('critical', 'IDLE+DRAIN', OURS, ('none', None, 'already held: ' + OURS)),
    ('critical', 'IDLE+DRAIN', 'operator: fan swap', ('none', None, 'held by someone else: operator: fan swap')),
    ('critical', 'DOWN', 'PSU swap', ('none', None, 'left as it is: its state DOWN is not ours to change (reason: PSU swap)')),
    ('ok', 'IDLE', None, ('none', None, 'health ok')),
    ('ok', 'IDLE+DRAIN', OURS, ('resume', None, 'our hold is lifted: ' + OURS)),
    ('ok', 'IDLE+DRAIN', OURS_SHAPE,
     ('none', None, 'held by gpucluster shape, who gives it back: ' + OURS_SHAPE)),
    ('warning', 'IDLE+DRAIN', OURS,
     ('none', None, 'health warning; the hold stays until the program says ok: ' + OURS)),
    ('warning', 'IDLE', None, ('none', None, 'health warning')),
    ('unknown', 'IDLE+DRAIN', OURS, ('none', None, 'health status unknown; node left as it is')),
])
def test_decide_verdict(status, state, reason, expected):
    got = sc.decide_verdict(status, sc.Slurm.parse_line(_line(state, reason)), 'health', 'gpu1 row remap pending')
    assert tuple(got) == expected


def test_decide_refuses_what_it_does_not_know():
    state = sc.Slurm.parse_line(_line('IDLE'))
    with pytest.raises(ValueError, match='want'):
        sc.decide(state, 'drain', 'health', 'x')
    with pytest.raises(ValueError, match='source'):
        sc.decide(state, 'hold', 'maint', 'x')
    with pytest.raises(ValueError, match='needs a text'):
        sc.decide(state, 'hold', 'health', '')


# Every combination of a base state and the flags an operator (or slurmctld for them) sets: left as it
# is, whatever is asked and whoever asks, with any reason - ours included.
BASES = ['IDLE', 'MIXED', 'ALLOCATED', 'DOWN', 'FUTURE', 'UNKNOWN']
OPERATOR_FLAGS = ['FAIL', 'MAINTENANCE', 'RESERVED', 'REBOOT_REQUESTED', 'POWERED_DOWN']
OTHER_FLAGS = ['DRAIN', 'NOT_RESPONDING', 'COMPLETING']
REASONS = [None, OURS, OURS_SHAPE, 'gpucluster-health: gpu1 row remap pending', 'operator: PSU swap']


def test_every_operator_state_is_left_alone():
    checked = 0
    for base in BASES:
        for count in range(len(OPERATOR_FLAGS) + 1):
            for flags in itertools.combinations(OPERATOR_FLAGS, count):
                for others in itertools.product([False, True], repeat=len(OTHER_FLAGS)):
                    words = [base] + list(flags) + [f for f, on in zip(OTHER_FLAGS, others) if on]
                    operator = base in ('DOWN', 'FUTURE', 'UNKNOWN') or bool(flags)
                    for reason in REASONS:
                        state = sc.Slurm.parse_line(_line('+'.join(words), reason))
                        assert bool(state.operator) == operator, words
                        if not operator:
                            continue
                        for source in ('health', 'shape', 'upgrade'):
                            for want in ('hold', 'release'):
                                decision = sc.decide(state, want, source, 'finding')
                                assert decision.action == 'none', (words, reason, source, want)
                                assert decision.why.startswith('left as it is: its state ')
                        checked += 1
    assert checked > 5000


def test_an_unknown_state_word_is_left_alone():
    # A newer Slurm's flag this module does not know yet: nothing is done until it is known.
    state = sc.Slurm.parse_line(_line('IDLE+DRAIN+SOMETHING_NEW', OURS))
    assert state.operator == ('SOMETHING_NEW',)
    assert sc.decide(state, 'release', 'health').action == 'none'


def test_node_state_as_dict():
    state = sc.Slurm.parse_line(_line('IDLE+DRAIN', 'gpucluster-shape: x'))
    assert state.as_dict() == {'name': 'node2', 'state': ['DRAIN', 'IDLE'], 'held': True,
                               'reason': 'gpucluster-shape: x', 'ours': True, 'source': 'shape', 'text': 'x',
                               'legacy': True, 'operator': []}


# --- Docker Swarm ----------------------------------------------------------------------------------
# `docker node inspect` output in the shape Docker's reference shows it
# (https://docs.docker.com/engine/reference/commandline/node_inspect/; Engine API NodeSpec schema);
# identifiers made up here.

def _swarm(availability='active', labels=None, state='ready', hostname='node2', role='worker'):
    spec = {'Role': role, 'Availability': availability}
    if labels is not None:
        spec['Labels'] = labels
    return [{'ID': 'p3q7tnv2k1xw0m9d8c6b5a4z3', 'Version': {'Index': 31},
             'CreatedAt': '2026-11-29T08:00:00.1Z', 'UpdatedAt': '2026-11-29T17:40:01.2Z', 'Spec': spec,
             'Description': {'Hostname': hostname, 'Platform': {'Architecture': 'x86_64', 'OS': 'linux'},
                             'Resources': {'NanoCPUs': 16000000000, 'MemoryBytes': 270582939648,
                                           'GenericResources': [{'DiscreteResourceSpec': {'Kind': 'GPU', 'Value': 2}}]},
                             'Engine': {'EngineVersion': '27.3.1'}},
             'Status': {'State': state, 'Addr': '10.213.12.12'}}]


@pytest.mark.parametrize('node, words, held, hold, operator', [
    (_swarm(), {'ACTIVE', 'STATUS_READY'}, False, None, ()),
    (_swarm('drain'), {'DRAIN', 'STATUS_READY'}, True, None, ()),                        # an operator's drain
    (_swarm('drain', {'gpucluster.health': OURS}), {'DRAIN', 'STATUS_READY'}, True,
     sc.Hold('health', 'gpu1 row remap pending', False), ()),
    (_swarm('drain', {'gpucluster.health': 'maint'}), {'DRAIN', 'STATUS_READY'}, True, None, ()),
    (_swarm('active', {'gpucluster.health': OURS}), {'ACTIVE', 'STATUS_READY'}, False, None, ()),
    (_swarm('pause', {'gpucluster.health': OURS}), {'PAUSE', 'STATUS_READY'}, False, None, ('PAUSE',)),
    (_swarm('drain', {'gpucluster.health': OURS}, state='down'), {'DRAIN', 'STATUS_DOWN'}, True,
     sc.Hold('health', 'gpu1 row remap pending', False), ()),
    (_swarm('DRAIN', {'gpucluster.health': OURS}), {'DRAIN', 'STATUS_READY'}, True,
     sc.Hold('health', 'gpu1 row remap pending', False), ()),
    (_swarm('sleepy'), {'SLEEPY', 'STATUS_READY'}, False, None, ('SLEEPY',)),
    ([{'ID': 'x', 'Spec': {}}], set(), False, None, ('UNKNOWN',)),
])
def test_swarm_parse_state(node, words, held, hold, operator):
    for given_as in (json.dumps(node), node, node[0]):
        state = sc.Swarm.parse_state(given_as)
        assert (set(state.words), state.held, state.hold, state.operator) == (words, held, hold, operator)


@pytest.mark.parametrize('availability, labels, want, action', [
    ('active', None, 'hold', 'drain'),
    ('active', None, 'release', 'none'),
    ('drain', None, 'release', 'none'),                 # an operator's drain is never set active
    ('drain', None, 'hold', 'none'),
    ('drain', {'gpucluster.health': OURS}, 'release', 'resume'),
    ('drain', {'gpucluster.health': OURS}, 'hold', 'none'),
    ('drain', {'gpucluster.health': OURS + ' keep'}, 'release', 'none'),
    ('pause', {'gpucluster.health': OURS}, 'release', 'none'),
    ('pause', None, 'hold', 'none'),
])
def test_swarm_decisions(availability, labels, want, action):
    state = sc.Swarm.parse_state(_swarm(availability, labels))
    assert sc.decide(state, want, 'health', 'gpu1 row remap pending').action == action


def test_swarm_argv_and_names():
    swarm = sc.Swarm('/usr/bin/docker')
    assert swarm.show_argv('node2') == ['/usr/bin/docker', 'node', 'inspect', 'node2']
    assert swarm.action_argv('node2', sc.Decision('drain', OURS, '')) == [
        '/usr/bin/docker', 'node', 'update', '--availability', 'drain', '--label-add', 'gpucluster.health=' + OURS,
        'node2']
    assert swarm.action_argv('node2', sc.Decision('resume', None, '')) == [
        '/usr/bin/docker', 'node', 'update', '--availability', 'active', '--label-rm', 'gpucluster.health', 'node2']
    assert swarm.action_argv('node2', sc.Decision('none', None, '')) is None
    two = _swarm(hostname='node1') + _swarm('drain', {'gpucluster.health': OURS}, hostname='node2')
    assert sc.Swarm.parse_state(two, 'node2').hold.source == 'health'
    assert sc.Swarm.parse_state(two, 'p3q7tnv2k1xw0m9d8c6b5a4z3').name == 'node1'
    for bad, message in ((two, 'printed 2 nodes'), ('[]', 'printed no node'), ('{"a": 1}', 'printed no node'),
                         ('"x"', 'printed no node')):
        with pytest.raises(ValueError, match=message):
            sc.Swarm.parse_state(bad, 'node9' if message == 'printed no node' and bad == '{"a": 1}' else None)
    with pytest.raises(ValueError, match="no node named 'node9'"):
        sc.Swarm.parse_state(two, 'node9')
    with pytest.raises(ValueError):
        sc.Swarm.parse_state('not json')


def test_scheduler_by_name():
    assert isinstance(sc.scheduler('slurm'), sc.Slurm) and sc.scheduler('slurm').scontrol == 'scontrol'
    assert sc.scheduler('swarm', '/opt/docker').docker == '/opt/docker'
    assert sc.scheduler('kubernetes', '/usr/bin/kubectl').kubectl == '/usr/bin/kubectl'
    with pytest.raises(ValueError, match="scheduler 'k8s' is not one of kubernetes, slurm, swarm"):
        sc.scheduler('k8s')


# --- Kubernetes ------------------------------------------------------------------------------------
# `kubectl get node NAME -o json` in the shape of the Node API object (Kubernetes API reference, Node v1:
# metadata.annotations, spec.taints, spec.unschedulable); names, versions and addresses made up here.

OURS_TAINT = {'key': 'gpucluster.io/health', 'value': 'critical', 'effect': 'NoSchedule'}
GPU_TAINT = {'key': 'nvidia.com/gpu', 'value': 'present', 'effect': 'NoSchedule'}
CP_TAINT = {'key': 'node-role.kubernetes.io/control-plane', 'effect': 'NoSchedule'}
UNREACHABLE = {'key': 'node.kubernetes.io/unreachable', 'effect': 'NoExecute', 'timeAdded': '2026-11-29T17:40:01Z'}
CORDON_MIRROR = {'key': 'node.kubernetes.io/unschedulable', 'effect': 'NoSchedule', 'timeAdded': '2026-11-29T17:41:00Z'}
UPGRADE = sc.make_reason('upgrade', 'upgrade')


def _k8s(taints=None, reason=None, unschedulable=None, name='gpu2', annotations=True):
    meta = {'name': name, 'uid': '4f0c6a2e-5b1d-4c7e-9a3f-1d2e3f4a5b6c', 'resourceVersion': '918273',
            'labels': {'kubernetes.io/hostname': name, 'nvidia.com/gpu.present': 'true'}}
    if annotations:
        meta['annotations'] = {'kubeadm.alpha.kubernetes.io/cri-socket': 'unix:///run/containerd/containerd.sock',
                               'node.alpha.kubernetes.io/ttl': '0'}
        if reason is not None:
            meta['annotations']['gpucluster.io/reason'] = reason
    spec = {'podCIDR': '10.244.2.0/24', 'podCIDRs': ['10.244.2.0/24']}
    if taints is not None:
        spec['taints'] = taints
    if unschedulable is not None:
        spec['unschedulable'] = unschedulable
    return {'apiVersion': 'v1', 'kind': 'Node', 'metadata': meta, 'spec': spec,
            'status': {'addresses': [{'type': 'InternalIP', 'address': '10.213.12.12'}],
                       'nodeInfo': {'kubeletVersion': 'v1.35.0', 'containerRuntimeVersion': 'containerd://1.7.24'}}}


def _pointer(doc, path):
    parts = [p.replace('~1', '/').replace('~0', '~') for p in path.split('/')[1:]]
    for part in parts[:-1]:
        doc = doc[int(part)] if isinstance(doc, list) else doc[part]
    return doc, parts[-1]


def _apply(doc, ops):
    """RFC 6902 as the API server applies it (add, remove, test), all or nothing: enough to prove the patches."""
    import copy
    doc = copy.deepcopy(doc)
    for op in ops:
        parent, key = _pointer(doc, op['path'])
        if op['op'] == 'test':
            current = parent[int(key)] if isinstance(parent, list) else parent[key]
            if current != op['value']:
                raise ValueError('test failed at %s' % op['path'])
        elif op['op'] == 'add':
            if isinstance(parent, list):
                parent.insert(len(parent) if key == '-' else int(key), op['value'])
            else:
                parent[key] = op['value']
        elif op['op'] == 'remove':
            del parent[int(key) if isinstance(parent, list) else key]
    return doc


@pytest.mark.parametrize('node, held, hold, operator', [
    (_k8s(), False, None, ()),
    (_k8s([GPU_TAINT, CP_TAINT, UNREACHABLE]), False, None, ()),             # standing and Kubernetes' own taints
    (_k8s([OURS_TAINT], OURS), True, sc.Hold('health', 'gpu1 row remap pending', False), ()),
    (_k8s([GPU_TAINT, OURS_TAINT], OURS, unschedulable=True), True,          # our health taint, an operator's cordon
     sc.Hold('health', 'gpu1 row remap pending', False), ('CORDONED',)),
    (_k8s([OURS_TAINT, CORDON_MIRROR], UPGRADE, unschedulable=True), True, sc.Hold('upgrade', 'upgrade', False), ()),
    (_k8s(unschedulable=True), True, None, ('CORDONED',)),                  # an operator's cordon
    (_k8s([OURS_TAINT]), True, None, ()),                                   # our taint, no reason: not ours to lift
    (_k8s([OURS_TAINT], OURS + ' - RMA 4711'), True, None, ()),              # an operator edited the reason
    (_k8s([{'key': 'example.com/maintenance', 'effect': 'NoExecute'}]), False, None,
     ('TAINT example.com/maintenance:NoExecute',)),
    (_k8s([{'key': 'example.com/soft', 'effect': 'PreferNoSchedule'}]), False, None, ()),
    (_k8s([{'key': 'node.kubernetes.io/out-of-service', 'value': 'nodeshutdown', 'effect': 'NoExecute'}]), False, None,
     ('TAINT node.kubernetes.io/out-of-service=nodeshutdown:NoExecute',)),
    (_k8s([{'key': 'gpucluster.io/health', 'value': 'critical', 'effect': 'NoExecute'}], OURS), False, None,
     ('TAINT gpucluster.io/health=critical:NoExecute',)),
    (_k8s(name=''), False, None, ('UNKNOWN',)),
])
def test_kubernetes_parse_state(node, held, hold, operator):
    for given_as in (json.dumps(node), node, {'apiVersion': 'v1', 'kind': 'List', 'items': [node]}):
        state = sc.Kubernetes.parse_state(given_as)
        assert (state.held, state.hold, state.operator) == (held, hold, operator)


@pytest.mark.parametrize('node, want, source, action', [
    (_k8s([GPU_TAINT]), 'hold', 'health', 'drain'),
    (_k8s([GPU_TAINT]), 'release', 'health', 'none'),
    (_k8s([OURS_TAINT], OURS), 'release', 'health', 'resume'),
    (_k8s([OURS_TAINT], OURS), 'hold', 'health', 'none'),
    (_k8s([OURS_TAINT], OURS), 'hold', 'upgrade', 'none'),                 # health holds it: its owner lifts it
    (_k8s([OURS_TAINT], OURS), 'release', 'upgrade', 'none'),
    (_k8s([OURS_TAINT], OURS, unschedulable=True), 'release', 'health', 'none'),   # an operator's cordon too
    (_k8s(unschedulable=True), 'hold', 'upgrade', 'none'),                  # an operator's cordon is never taken over
    (_k8s(unschedulable=True), 'release', 'upgrade', 'none'),
    (_k8s([OURS_TAINT, CORDON_MIRROR], UPGRADE, unschedulable=True), 'release', 'upgrade', 'resume'),
    (_k8s([{'key': 'example.com/maintenance', 'effect': 'NoSchedule'}]), 'hold', 'health', 'none'),
    (_k8s([OURS_TAINT], 'maintenance by Alice'), 'release', 'health', 'none'),
])
def test_kubernetes_decisions(node, want, source, action):
    state = sc.Kubernetes.parse_state(node)
    assert sc.decide(state, want, source, 'gpu1 row remap pending').action == action


@pytest.mark.parametrize('node', [
    _k8s(), _k8s([]), _k8s([GPU_TAINT, CP_TAINT]), _k8s([GPU_TAINT], annotations=False),
])
@pytest.mark.parametrize('source, cordons', [('health', False), ('upgrade', True), ('decommission', True)])
def test_kubernetes_hold_and_release_round_trip(node, source, cordons):
    kube = sc.Kubernetes('/usr/bin/kubectl')
    before = sc.Kubernetes.parse_state(node)
    hold = sc.decide(before, 'hold', source, 'gpu1 row remap pending')
    argv = kube.action_argv('gpu2', hold, node)
    assert argv[:5] == ['/usr/bin/kubectl', 'patch', 'node', 'gpu2', '--type=json'] and argv[5].startswith('--patch=')
    held = _apply(node, json.loads(argv[5][len('--patch='):]))
    state = sc.Kubernetes.parse_state(held)
    assert (state.held, state.ours, state.operator) == (True, True, ())
    assert state.hold.source == source and held['metadata']['annotations']['gpucluster.io/reason'] == hold.reason
    assert held['spec'].get('unschedulable', False) is cordons
    # Whatever taint the node had stays; ours is added once.
    assert [t for t in held['spec']['taints'] if t != OURS_TAINT] == (node['spec'].get('taints') or [])
    assert sc.decide(state, 'hold', source, 'gpu1 row remap pending').action == 'none'
    release = sc.decide(state, 'release', source)
    released = _apply(held, json.loads(kube.action_argv('gpu2', release, held)[5][len('--patch='):]))
    assert released['spec'].get('taints', []) == (node['spec'].get('taints') or [])
    assert 'unschedulable' not in released['spec']
    assert 'gpucluster.io/reason' not in released['metadata']['annotations']


def test_kubernetes_patch_is_refused_when_the_node_changed_since_it_was_read():
    kube = sc.Kubernetes()
    read = _k8s([GPU_TAINT])
    hold_argv = kube.action_argv('gpu2', sc.decide(sc.Kubernetes.parse_state(read), 'hold', 'health', 'x'), read)
    meanwhile = _k8s([GPU_TAINT, {'key': 'example.com/maintenance', 'effect': 'NoExecute'}])
    # The operator's taint, added after the read, moved the end of the list: the test operation fails.
    meanwhile['spec']['taints'] = [meanwhile['spec']['taints'][1], GPU_TAINT]
    with pytest.raises(ValueError, match='test failed at /spec/taints/0'):
        _apply(meanwhile, json.loads(hold_argv[5][len('--patch='):]))
    held = _k8s([OURS_TAINT], OURS)
    release_argv = kube.action_argv('gpu2', sc.decide(sc.Kubernetes.parse_state(held), 'release', 'health'), held)
    edited = _k8s([OURS_TAINT], OURS + ' - RMA 4711')
    with pytest.raises(ValueError, match='test failed at /metadata/annotations/gpucluster.io~1reason'):
        _apply(edited, json.loads(release_argv[5][len('--patch='):]))


def test_kubernetes_argv_and_names():
    kube = sc.Kubernetes()
    assert kube.show_argv('gpu2') == ['kubectl', 'get', 'node', 'gpu2', '--output=json']
    assert kube.action_argv('gpu2', sc.Decision('none', None, ''), _k8s()) is None
    with pytest.raises(ValueError, match='needs the node as kubectl printed it'):
        kube.action_argv('gpu2', sc.Decision('drain', OURS, ''), None)
    two = {'kind': 'NodeList', 'items': [_k8s(name='gpu1'), _k8s([OURS_TAINT], OURS)]}
    assert sc.Kubernetes.parse_state(two, 'gpu2').hold.source == 'health'
    assert sc.Kubernetes.parse_state(json.dumps(two), 'gpu1').held is False
    for bad, message in ((two, 'printed 2 nodes'), ('[]', 'printed no node'),
                         ('{"kind": "List", "items": []}', 'printed no node')):
        with pytest.raises(ValueError, match=message):
            sc.Kubernetes.parse_state(bad)
    with pytest.raises(ValueError, match="no node named 'gpu9'"):
        sc.Kubernetes.parse_state(two, 'gpu9')
    with pytest.raises(ValueError):
        sc.Kubernetes.parse_state('not json')
    with pytest.raises(ValueError, match='is a JSON object'):
        sc.Kubernetes.parse_node(['x'])
