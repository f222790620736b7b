# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import itertools

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.gpucluster.core.plugins.module_utils import fabric_matrix as fm


def nodes_of(n):
    return ['node%d' % i for i in range(1, n + 1)]


def matrix(nodes, default=100.0, slow_nodes=(), slow_links=(), failed_links=(), slow=25.0):
    """Directional measurements: every ordered pair at ``default`` unless it touches a slow node,
    is a slow link (either direction) or failed."""
    out = []
    for src, dst in itertools.permutations(nodes, 2):
        link = {src, dst}
        if any(link == set(lk) for lk in failed_links):
            out.append({'src': src, 'dst': dst, 'gbps': None, 'error': 'connection refused'})
        elif src in slow_nodes or dst in slow_nodes or any(link == set(lk) for lk in slow_links):
            out.append({'src': src, 'dst': dst, 'gbps': slow})
        else:
            out.append({'src': src, 'dst': dst, 'gbps': default})
    return out


@pytest.mark.parametrize('n', range(2, 13))
def test_round_robin_covers_every_pair_once_with_disjoint_rounds(n):
    nodes = nodes_of(n)
    rounds = fm.round_robin(nodes)
    seen = [frozenset(p) for r in rounds for p in r]
    assert len(seen) == len(set(seen)) == n * (n - 1) // 2
    for r in rounds:
        members = [x for p in r for x in p]
        assert len(members) == len(set(members))
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)


def test_round_robin_rejects_repeated_and_empty_names():
    with pytest.raises(fm.MatrixInputError, match='must not repeat a host: node1'):
        fm.round_robin(['node1', 'node2', 'node1'])
    with pytest.raises(fm.MatrixInputError, match='non-empty host names'):
        fm.round_robin(['node1', ''])


def test_healthy_fleet_passes():
    nodes = nodes_of(3)
    v = fm.judge(nodes, matrix(nodes))
    assert v['ok'] and v['passed'] == nodes and v['reference_gbps'] == 100.0
    assert {p['status'] for p in v['pairs']} == {'ok'}


@pytest.mark.parametrize('n', [3, 4, 6, 8])
def test_one_slow_node_is_the_bad_node_even_in_three(n):
    # With three nodes two of three pairs touch the bad node: the reference must not follow them.
    nodes = nodes_of(n)
    v = fm.judge(nodes, matrix(nodes, slow_nodes=['node2']))
    assert v['bad_nodes'] == ['node2'] and v['bad_links'] == [] and not v['ok']
    assert v['reference_gbps'] == 100.0
    assert v['nodes']['node2']['low_pairs'] == [x for x in nodes if x != 'node2']
    assert all(v['nodes'][x]['status'] == 'ok' for x in nodes if x != 'node2')
    assert v['passed'] == [x for x in nodes if x != 'node2']


@pytest.mark.parametrize('n', [3, 4, 6])
def test_one_slow_cable_is_a_bad_link(n):
    nodes = nodes_of(n)
    v = fm.judge(nodes, matrix(nodes, slow_links=[('node1', 'node3')]))
    assert v['bad_nodes'] == [] and v['bad_links'] == [['node1', 'node3']]
    assert 'below 0.80 x the fleet reference 100.0' in next(
        p['reason'] for p in v['pairs'] if (p['a'], p['b']) == ('node1', 'node3'))


def test_one_direction_slow_is_enough():
    nodes = nodes_of(3)
    m = matrix(nodes)
    next(x for x in m if (x['src'], x['dst']) == ('node3', 'node1'))['gbps'] = 10.0
    v = fm.judge(nodes, m)
    pair = next(p for p in v['pairs'] if (p['a'], p['b']) == ('node1', 'node3'))
    assert pair['gbps'] == 10.0 and pair['a_to_b_gbps'] == 100.0 and pair['b_to_a_gbps'] == 10.0
    assert v['bad_links'] == [['node1', 'node3']]


def test_a_pair_that_could_not_be_measured_fails_with_its_error():
    nodes = nodes_of(4)
    m = matrix(nodes, failed_links=[('node2', 'node4')])
    m = [x for x in m if (x['src'], x['dst']) != ('node3', 'node1')]  # never ran
    v = fm.judge(nodes, m)
    pairs = {(p['a'], p['b']): p for p in v['pairs']}
    assert pairs[('node2', 'node4')]['status'] == 'failed'
    assert 'connection refused' in pairs[('node2', 'node4')]['reason']
    assert pairs[('node1', 'node3')]['status'] == 'failed'
    assert 'node3 -> node1: not measured' in pairs[('node1', 'node3')]['reason']
    assert v['bad_links'] == [['node1', 'node3'], ['node2', 'node4']]


def test_floor_fails_a_uniformly_slow_fleet_the_relative_check_cannot_see():
    nodes = nodes_of(3)
    m = matrix(nodes, default=40.0)
    assert fm.judge(nodes, m)['ok']
    v = fm.judge(nodes, m, floor_gbps=78)
    # The run fails; no single node is blamed for a fabric that is slow everywhere.
    assert not v['ok'] and v['fleet_verdict'] == 'all_below_floor'
    assert v['bad_nodes'] == [] and v['bad_links'] == [] and set(v['withheld']['bad_nodes']) == set(nodes)
    assert 'every pair is below the absolute floor of 78.00 Gb/s (best 40.00 Gb/s)' in v['fleet_reason']
    assert all(p['status'] == 'below_floor' for p in v['pairs'])
    assert all(info['status'] == 'unjudged' for info in v['nodes'].values())


def test_two_nodes_only_the_floor_judges():
    nodes = nodes_of(2)
    slow = matrix(nodes, default=20.0)
    assert fm.judge(nodes, slow)['ok']
    v = fm.judge(nodes, slow, floor_gbps=50)
    assert not v['ok'] and v['fleet_verdict'] == 'all_below_floor'
    assert v['bad_nodes'] == [] and v['bad_links'] == [] and v['withheld']['bad_links'] == [['node1', 'node2']]


def test_retest_confirms_a_bad_node_against_a_passed_partner():
    nodes = nodes_of(4)
    v = fm.judge(nodes, matrix(nodes, slow_nodes=['node4']))
    assert v['passed'] == ['node1', 'node2', 'node3']
    plan = fm.retest_plan(v)
    assert plan['partners'] == {'node4': 'node1'} and plan['pairs'] == [['node4', 'node1']]
    slow_again = [{'src': 'node4', 'dst': 'node1', 'gbps': 30}, {'src': 'node1', 'dst': 'node4', 'gbps': 30}]
    final = fm.apply_retest(v, plan, slow_again)
    assert final['bad_nodes'] == ['node4'] and not final['ok'] and final['not_reproduced'] == []
    fine_now = [{'src': 'node4', 'dst': 'node1', 'gbps': 95}, {'src': 'node1', 'dst': 'node4', 'gbps': 96}]
    final = fm.apply_retest(v, plan, fine_now)
    assert final['ok'] and final['not_reproduced'] == [{'node': 'node4', 'partner': 'node1'}]


def test_without_a_passed_node_the_first_verdict_stands():
    nodes = nodes_of(3)
    # Two of three nodes slow: the fleet reference is the slow figure (the documented limit of a
    # relative check); the floor fails every pair, so the run fails and nobody is blamed.
    v = fm.judge(nodes, matrix(nodes, slow_nodes=['node1', 'node2']), floor_gbps=50)
    assert v['bad_nodes'] == [] and v['passed'] == [] and v['withheld']['bad_nodes'] == nodes
    plan = fm.retest_plan(v)
    assert plan['pairs'] == [] and plan['partners'] == {}
    final = fm.apply_retest(v, plan, [])
    assert not final['ok'] and final['fleet_verdict'] == 'all_below_floor' and final['bad_nodes'] == []


def test_retest_of_a_bad_link_blames_the_end_that_is_slow_against_a_good_partner():
    nodes = nodes_of(4)
    v = fm.judge(nodes, matrix(nodes, slow_links=[('node1', 'node2')]))
    plan = fm.retest_plan(v)
    assert plan['partners'] == {'node1': 'node3', 'node2': 'node3'}
    assert sorted(map(sorted, plan['pairs'])) == [['node1', 'node2'], ['node1', 'node3'], ['node2', 'node3']]
    for r in plan['rounds']:
        members = [x for p in r for x in p]
        assert len(members) == len(set(members))
    # node2 is slow against node3 too: node2 is the bad node after all.
    retest = [{'src': 'node1', 'dst': 'node2', 'gbps': 20}, {'src': 'node2', 'dst': 'node1', 'gbps': 20},
              {'src': 'node1', 'dst': 'node3', 'gbps': 99}, {'src': 'node3', 'dst': 'node1', 'gbps': 99},
              {'src': 'node2', 'dst': 'node3', 'gbps': 20}, {'src': 'node3', 'dst': 'node2', 'gbps': 20}]
    final = fm.apply_retest(v, plan, retest)
    assert final['bad_nodes'] == ['node2'] and final['bad_links'] == [] and not final['ok']


def test_retest_that_is_fine_is_not_reproduced_and_passes():
    nodes = nodes_of(4)
    v = fm.judge(nodes, matrix(nodes, slow_links=[('node1', 'node2')]))
    plan = fm.retest_plan(v)
    retest = [{'src': a, 'dst': b, 'gbps': 98} for x, y in plan['pairs'] for a, b in ((x, y), (y, x))]
    final = fm.apply_retest(v, plan, retest)
    assert final['ok'] and final['not_reproduced'] == [{'link': ['node1', 'node2']}]


def test_retest_confirms_a_bad_link():
    nodes = nodes_of(4)
    v = fm.judge(nodes, matrix(nodes, slow_links=[('node1', 'node2')]))
    plan = fm.retest_plan(v)
    retest = []
    for x, y in plan['pairs']:
        figure = 20 if {x, y} == {'node1', 'node2'} else 97
        retest += [{'src': x, 'dst': y, 'gbps': figure}, {'src': y, 'dst': x, 'gbps': figure}]
    final = fm.apply_retest(v, plan, retest)
    assert final['bad_links'] == [['node1', 'node2']] and final['bad_nodes'] == [] and not final['ok']


@pytest.mark.parametrize('kwargs, message', [
    ({'fraction': 0}, 'fraction must be above 0.0 and at most 1.0, got 0'),
    ({'fraction': 1.5}, 'fraction must be above 0.0 and at most 1.0, got 1.5'),
    ({'fraction': '0.8'}, "fraction must be a finite number, got '0.8'"),
    ({'fraction': True}, 'fraction must be a finite number, got True'),
    ({'fraction': float('nan')}, 'fraction must be a finite number, got nan'),
    ({'floor_gbps': -1}, 'floor_gbps must be at least 0.0'),
    ({'floor_gbps': float('nan')}, 'floor_gbps must be a finite number, got nan'),
    ({'floor_gbps': float('inf')}, 'floor_gbps must be a finite number, got inf'),
])
def test_bad_arguments_name_the_argument(kwargs, message):
    nodes = nodes_of(3)
    with pytest.raises(fm.MatrixInputError) as err:
        fm.judge(nodes, matrix(nodes), **kwargs)
    assert message in str(err.value)


@pytest.mark.parametrize('record, message', [
    ({'src': 'node1', 'dst': 'node9', 'gbps': 1}, 'must name two different nodes'),
    ({'src': 'node1', 'dst': 'node1', 'gbps': 1}, 'must name two different nodes'),
    ({'src': 'node1', 'dst': 'node2', 'gbps': -3}, 'gbps must be a finite number of at least 0, got -3'),
    ({'src': 'node1', 'dst': 'node2', 'gbps': 'fast'}, "gbps must be a finite number of at least 0, got 'fast'"),
    ({'src': 'node1', 'dst': 'node2', 'gbps': float('inf')}, 'gbps must be a finite number of at least 0, got inf'),
    ({'src': 'node1', 'dst': 'node2', 'gbps': float('nan')}, 'gbps must be a finite number of at least 0, got nan'),
    ({'src': 'node1', 'dst': 'node2', 'gbps': 1, 'error': 'x', 'cause': 'busy'}, 'cause must be empty or one of'),
    ({'src': ['node1'], 'dst': 'node2', 'gbps': 1}, 'must name two different nodes'),
])
def test_bad_measurements_are_refused(record, message):
    with pytest.raises(fm.MatrixInputError, match=message):
        fm.judge(nodes_of(3), [record])


def test_one_node_is_refused():
    with pytest.raises(fm.MatrixInputError, match='at least two hosts'):
        fm.judge(['node1'], [])


@settings(max_examples=150, deadline=None)
@given(n=st.integers(min_value=3, max_value=9), bad=st.integers(min_value=0, max_value=8),
       healthy=st.floats(min_value=10, max_value=400), ratio=st.floats(min_value=0.01, max_value=0.7))
def test_a_single_bad_node_is_always_found_whatever_the_figures(n, bad, healthy, ratio):
    nodes = nodes_of(n)
    culprit = nodes[bad % n]
    v = fm.judge(nodes, matrix(nodes, default=healthy, slow_nodes=[culprit], slow=healthy * ratio))
    assert v['bad_nodes'] == [culprit] and v['bad_links'] == []


# --------------------------------------------------------------------------- verdicts that stand up

def test_a_blocked_port_fails_every_pair_and_blames_no_one():
    nodes = nodes_of(6)
    blocked = [{'src': s, 'dst': d, 'gbps': None, 'error': 'unable to connect to server: Connection refused'}
               for s, d in itertools.permutations(nodes, 2)]
    v = fm.judge(nodes, blocked, floor_gbps=300)
    assert v['fleet_verdict'] == 'no_measurement' and not v['ok']
    assert v['bad_nodes'] == [] and v['bad_links'] == [] and v['passed'] == []
    assert set(v['withheld']['bad_nodes']) == set(nodes)
    assert v['fleet_reason'].startswith('no pair could be measured (15 of 15 failed), so no node is blamed: ')
    assert fm.retest_plan(v)['pairs'] == []
    final = fm.apply_retest(v, fm.retest_plan(v), [])
    assert final['bad_nodes'] == [] and final['fleet_verdict'] == 'no_measurement'


def test_all_zero_pairs_fail_with_that_reason():
    nodes = nodes_of(4)
    v = fm.judge(nodes, matrix(nodes, default=0.0))
    assert v['fleet_verdict'] == 'all_zero' and not v['ok'] and v['bad_nodes'] == []
    assert v['fleet_reason'].startswith('every measured pair reads 0 Gb/s (6 pairs)')
    # Zero beside failures is still no figure at all.
    m = matrix(nodes, default=0.0, failed_links=[('node1', 'node2')])
    assert fm.judge(nodes, m)['fleet_verdict'] == 'all_zero'


def test_more_than_half_blamed_is_no_fleet_reference():
    nodes = nodes_of(6)
    # Four of six at a quarter of line rate: the median of the nodes' best pairs is the slow figure,
    # so the two healthy nodes look like the outliers. Without a floor the relative verdict would
    # blame them; the rule refuses to blame four or two of six on such a reference.
    m = matrix(nodes, default=400.0, slow_nodes=['node1', 'node2', 'node3', 'node4'], slow=100.0)
    for rec in m:
        if {rec['src'], rec['dst']} <= {'node1', 'node2', 'node3', 'node4'}:
            rec['gbps'] = 100.0
    v = fm.judge(nodes, m)
    assert v['bad_nodes'] == [] and v['bad_links'] == []
    # With the absolute floor from the port rate (400 Gb/s x 0.9) the slow pairs fail and the run fails.
    v = fm.judge(nodes, m, floor_gbps=fm.port_floor_gbps(400))
    assert not v['ok'] and v['fleet_verdict'] == 'no_reference'
    assert v['fleet_reason'].startswith('no fleet reference: the measurement is suspect (4 of 6 nodes would be blamed')
    assert v['bad_nodes'] == [] and v['withheld']['bad_nodes'] == ['node1', 'node2', 'node3', 'node4']


def test_half_the_nodes_bad_is_still_blamed():
    nodes = nodes_of(4)
    m = matrix(nodes, default=100.0, slow_nodes=['node1', 'node2'], slow=10.0)
    v = fm.judge(nodes, m, floor_gbps=50)
    # node1-node2 is slow too, so both are bad nodes: 2 of 4 is not more than half.
    assert v['fleet_verdict'] == 'blamed' and v['bad_nodes'] == ['node1', 'node2']


def test_port_taken_fails_the_pair_and_blames_no_node():
    nodes = nodes_of(3)
    m = matrix(nodes)
    for rec in m:
        if 'node3' in (rec['src'], rec['dst']):
            rec.update(gbps=None, error='port 18515 is held by python pid 4242 on 0.0.0.0', cause='port_taken')
    v = fm.judge(nodes, m, floor_gbps=50)
    pairs = {(p['a'], p['b']): p for p in v['pairs']}
    assert pairs[('node1', 'node3')]['status'] == 'port_taken'
    assert pairs[('node1', 'node3')]['reason'].startswith('port taken (the server measured was not ours; no node is blamed)')
    assert v['bad_nodes'] == [] and v['bad_links'] == []
    assert v['fleet_verdict'] == 'incomplete' and not v['ok']
    assert v['unmeasured_pairs'] == [['node1', 'node3'], ['node2', 'node3']]
    assert v['fleet_reason'].startswith('2 pair(s) could not be measured because their port was taken')
    # Every pair taken: nothing measured, nobody blamed, the run fails.
    taken = [dict(r, gbps=None, error='taken', cause='port_taken') for r in matrix(nodes)]
    v = fm.judge(nodes, taken)
    assert v['fleet_verdict'] == 'incomplete' and v['bad_nodes'] == [] and not v['ok']


def test_a_retest_on_a_taken_port_confirms_nothing():
    nodes = nodes_of(4)
    v = fm.judge(nodes, matrix(nodes, slow_nodes=['node4']))
    plan = fm.retest_plan(v)
    taken = [{'src': 'node4', 'dst': 'node1', 'gbps': None, 'error': 'held', 'cause': 'port_taken'},
             {'src': 'node1', 'dst': 'node4', 'gbps': 99.0}]
    final = fm.apply_retest(v, plan, taken)
    assert final['bad_nodes'] == ['node4'] and final['not_reproduced'] == []


def test_a_retest_that_turns_link_ends_into_bad_nodes_rechecks_the_half_rule():
    nodes = nodes_of(5)
    v = fm.judge(nodes, matrix(nodes, slow_links=[('node1', 'node2'), ('node3', 'node4')]))
    assert v['fleet_verdict'] == 'blamed' and v['bad_links'] == [['node1', 'node2'], ['node3', 'node4']]
    plan = fm.retest_plan(v)
    assert set(plan['partners'].values()) == {'node5'}
    # Every end also slow against the node that passed: four bad nodes of five is no reference at all.
    slow = [{'src': a, 'dst': b, 'gbps': 5.0} for x, y in plan['pairs'] for a, b in ((x, y), (y, x))]
    final = fm.apply_retest(v, plan, slow)
    assert final['fleet_verdict'] == 'no_reference' and final['bad_nodes'] == [] and not final['ok']


@settings(max_examples=120, deadline=None)
@given(n=st.integers(min_value=2, max_value=9), seed=st.integers(min_value=0, max_value=2 ** 16),
       floor=st.one_of(st.none(), st.floats(min_value=0, max_value=500)))
def test_a_verdict_never_blames_more_than_half_and_is_never_ok_with_a_failed_pair(n, seed, floor):
    import random
    rng = random.Random(seed)
    nodes = nodes_of(n)
    m = []
    for src, dst in itertools.permutations(nodes, 2):
        roll = rng.random()
        if roll < 0.15:
            m.append({'src': src, 'dst': dst, 'gbps': None, 'error': 'refused',
                      'cause': 'port_taken' if rng.random() < 0.3 else None})
        else:
            m.append({'src': src, 'dst': dst, 'gbps': rng.choice([0.0, 10.0, 100.0, 400.0, rng.uniform(0, 500)])})
    v = fm.judge(nodes, m, floor_gbps=floor)
    assert v['fleet_verdict'] in fm.FLEET_VERDICTS
    assert len(v['bad_nodes']) * 2 <= n
    if any(p['status'] != 'ok' for p in v['pairs']):
        assert not v['ok']
    if v['fleet_verdict'] in fm.WITHHELD:
        assert v['bad_nodes'] == [] and v['bad_links'] == []
    final = fm.apply_retest(v, fm.retest_plan(v), [])
    assert len(final['bad_nodes']) * 2 <= n and final['fleet_verdict'] in fm.FLEET_VERDICTS


# --------------------------------------------------------------------------- floors

@pytest.mark.parametrize('args, expected', [
    ((400,), 360.0),
    ((200, 0.9), 180.0),
    ((200, 0.9, 400), 360.0),       # a port trained at HDR on an NDR fabric is held to NDR
    ((400, 0.9, 200), 360.0),       # the faster of the two
    ((100, 0.9, None, True), 180.0),  # -b: both directions added
])
def test_port_floor(args, expected):
    assert fm.port_floor_gbps(*args) == expected


@pytest.mark.parametrize('kwargs, message', [
    ({'rate_gbps': float('nan')}, 'rate_gbps must be a finite number of Gb/s above 0, got nan'),
    ({'rate_gbps': 0}, 'rate_gbps must be a finite number of Gb/s above 0, got 0'),
    ({'rate_gbps': '400'}, "rate_gbps must be a finite number of Gb/s above 0, got '400'"),
    ({'rate_gbps': 400, 'expected_rate_gbps': float('nan')}, 'expected_rate_gbps must be a finite number'),
    ({'rate_gbps': 400, 'expected_rate_gbps': float('inf')}, 'expected_rate_gbps must be a finite number'),
    ({'rate_gbps': 400, 'efficiency': 1.5}, 'efficiency must be above 0.0 and at most 1.0, got 1.5'),
    ({'rate_gbps': 400, 'efficiency': float('nan')}, 'efficiency must be a finite number, got nan'),
])
def test_port_floor_refuses_what_would_switch_it_off(kwargs, message):
    with pytest.raises(fm.MatrixInputError, match=message.replace('(', r'\(').replace(')', r'\)')):
        fm.port_floor_gbps(**kwargs)


def test_rail_floor_uses_the_fastest_port_or_the_expected_rate():
    got = fm.rail_floor({'n1': 400, 'n2': 400, 'n3': 200, 'n4': None})
    assert got == {'line_rate_gbps': 400.0, 'floor_gbps': 360.0,
                   'slow_ports': [{'node': 'n3', 'rate_gbps': 200.0}], 'unknown': ['n4']}
    # Every port at HDR on an NDR fabric: only the stated rate reveals it.
    assert fm.rail_floor({'n1': 200, 'n2': 200})['floor_gbps'] == 180.0
    uniform = fm.rail_floor({'n1': 200, 'n2': 200}, expected_rate_gbps=400)
    assert uniform['floor_gbps'] == 360.0 and len(uniform['slow_ports']) == 2
    with pytest.raises(fm.MatrixInputError, match='no port rate is known'):
        fm.rail_floor({'n1': None})
    with pytest.raises(fm.MatrixInputError, match=r'port_rates\[n1\] must be a finite number'):
        fm.rail_floor({'n1': float('nan')})


# --------------------------------------------------------------------------- one machine, two names

def test_duplicate_hosts_by_machine_id_address_and_guid():
    identities = {
        'gpu01': {'machine_id': '0123456789abcdef0123456789abcdef', 'addresses': ['10.0.0.1', '127.0.0.1'],
                  'guids': ['0x946dae0300cde72c']},
        'gpu01-ib': {'machine_id': '0123456789ABCDEF0123456789ABCDEF\n', 'addresses': ['10.0.0.1'],
                     'guids': ['946d:ae03:00cd:e72c']},
        'gpu02': {'machine_id': 'fedcba9876543210fedcba9876543210', 'addresses': ['10.0.0.2', 'fe80::1', '127.0.0.1'],
                  'guids': ['0x0000000000000000']},
        'gpu03': {'machine_id': None, 'addresses': ['::1'], 'guids': ['0x0000000000000000']},
    }
    found = fm.duplicate_hosts(identities)
    assert [(f['by'], f['hosts']) for f in found] == [('address', ['gpu01', 'gpu01-ib']),
                                                      ('guid', ['gpu01', 'gpu01-ib']),
                                                      ('machine-id', ['gpu01', 'gpu01-ib'])]
    assert found[2]['message'].startswith('gpu01 and gpu01-ib are one machine: same /etc/machine-id 0123')
    assert 'systemd-machine-id-setup' in found[2]['message']
    assert fm.duplicate_hosts({'a': {'machine_id': 'x'}, 'b': {'machine_id': 'y'}}) == []


@pytest.mark.parametrize('identities, message', [
    ([], 'identities must map'),
    ({'a': 'x'}, r'identities\[a\] must be a dict'),
    ({'a': {'addresses': '10.0.0.1'}}, r'identities\[a\].addresses must be a list'),
    ({'a': {'addresses': ['10.0.0.300']}}, 'is not an IP address'),
])
def test_duplicate_hosts_refuses_bad_facts(identities, message):
    with pytest.raises(fm.MatrixInputError, match=message):
        fm.duplicate_hosts(identities)


# --------------------------------------------------------------------------- MTU of the measured path

FACTS = {
    'interfaces': ['lo', 'eno1', 'ibp12s0', 'docker0'],
    'default_ipv4': {'address': '192.0.2.10', 'interface': 'eno1', 'mtu': 1500},
    'eno1': {'device': 'eno1', 'mtu': 1500, 'ipv4': {'address': '192.0.2.10'},
             'ipv6': [{'address': 'fe80::1', 'scope': 'link'}]},
    'ibp12s0': {'device': 'ibp12s0', 'mtu': 2044, 'ipv4': {'address': '10.10.0.10'},
                'ipv4_secondaries': [{'address': '10.10.1.10'}], 'ipv6': [{'address': 'fd00::10', 'scope': 'global'}]},
    'lo': {'device': 'lo', 'mtu': 65536, 'ipv4': {'address': '127.0.0.1'}},
}


@pytest.mark.parametrize('address, expected', [
    ('192.0.2.10', {'interface': 'eno1', 'mtu': 1500, 'family': 4}),
    ('10.10.0.10', {'interface': 'ibp12s0', 'mtu': 2044, 'family': 4}),   # IPoIB: not the default route's MTU
    ('10.10.1.10', {'interface': 'ibp12s0', 'mtu': 2044, 'family': 4}),
    ('fd00::10', {'interface': 'ibp12s0', 'mtu': 2044, 'family': 6}),
    ('10.99.0.1', None),
])
def test_the_mtu_of_a_path_is_that_of_the_interface_carrying_the_address(address, expected):
    assert fm.address_interface(FACTS, address) == expected


def test_mtu_plan_and_payloads():
    plan = fm.mtu_plan({'n1': FACTS}, {'n1': '10.10.0.10'})
    assert plan == {'n1': {'interface': 'ibp12s0', 'mtu': 2044, 'family': 4, 'payload': 2016}}
    assert fm.ping_payload(9000, 6) == 8952
    with pytest.raises(fm.MatrixInputError, match=r'n1: no interface carries 10.99.0.1 \(interfaces: eno1, ibp12s0, lo\)'):
        fm.mtu_plan({'n1': FACTS}, {'n1': '10.99.0.1'})
    with pytest.raises(fm.MatrixInputError, match='is not an IP address'):
        fm.address_interface(FACTS, 'gpu01')
    with pytest.raises(fm.MatrixInputError, match='mtu must be a whole number from 68 to 65535'):
        fm.ping_payload(float('inf'), 4)


# --------------------------------------------------------------------------- is the server ours

# Lines in ss(8)'s format (ss -Hltnp, and ss -tulnp with its Netid column).
SS = ('LISTEN 0      4096         0.0.0.0:5201       0.0.0.0:*    users:(("iperf3",pid=805787,fd=7))    \n'
      'LISTEN 0      100          0.0.0.0:7001       0.0.0.0:*    users:(("python",pid=860860,fd=42))   \n'
      'tcp LISTEN 0 4096 *:18515  *:*  users:(("ib_write_bw",pid=2131,fd=3))\n'
      'LISTEN 0      5               [::]:18516            [::]:*    users:(("python3",pid=99,fd=3),("python3",pid=98,fd=3))\n')


def test_server_owner():
    assert fm.server_owner(SS, 5201, 805787) == {'ours': True, 'cause': None,
                                                 'reason': 'port 5201 is held by our server (pid 805787)'}
    taken = fm.server_owner(SS, 7001, 1234)
    assert taken['cause'] == 'port_taken' and taken['reason'] == 'port 7001 is held by python pid 860860 on 0.0.0.0'
    assert fm.server_owner(SS, 18515, 2131)['ours']
    assert fm.server_owner(SS, 18516, 99)['cause'] == 'port_taken'
    assert fm.server_owner(SS, 6000, 1) == {'ours': False, 'cause': 'not_listening', 'reason': 'nothing listens on port 6000'}
    assert fm.listeners(SS, 18516) == [{'address': '[::]', 'pids': [98, 99], 'names': ['python3']}]
    with pytest.raises(fm.MatrixInputError, match='port must be a whole number'):
        fm.listeners(SS, 70000)
    with pytest.raises(fm.MatrixInputError, match='pid must be'):
        fm.server_owner(SS, 5201, '805787')


def test_listening_and_the_owner_of_each_of_our_servers():
    assert fm.listening(SS, [5201, 6000, 18515]) == [5201, 18515]
    owners = fm.server_owners(SS, [5201, 7001, 6000, 6001], ['805787', '1234', '', 'x'])
    assert [o['cause'] for o in owners] == [None, 'port_taken', 'not_listening', 'not_listening']
    assert owners[2]['reason'] == 'our server on port 6000 did not start'
    # Our server never wrote its pid (it failed to start) while another process holds the port.
    taken = fm.server_owners(SS, [7001], [''])[0]
    assert taken == {'ours': False, 'cause': 'port_taken', 'reason': 'port 7001 is held by python; our server did not start'}
    with pytest.raises(fm.MatrixInputError, match='ports and pids must be lists of the same length'):
        fm.server_owners(SS, [5201], [])
    with pytest.raises(fm.MatrixInputError, match='ports must be a list of TCP ports'):
        fm.listening(SS, 5201)


def test_rail_rounds_measure_every_rail_of_a_pair_at_once():
    rounds = fm.round_robin(['a', 'b', 'c', 'd'])
    got = fm.rail_rounds(rounds, [0, 1])
    assert len(got) == 3 and all(len(r) == 2 for r in got)
    assert got[0][0] == {'a': rounds[0][0][0], 'b': rounds[0][0][1], 'rails': [0, 1]}
    with pytest.raises(fm.MatrixInputError, match='rails must be a list of rail numbers'):
        fm.rail_rounds(rounds, [True])
    with pytest.raises(fm.MatrixInputError, match='each round must be a list of'):
        fm.rail_rounds([[['a']]], [0])


def test_rail_retest_rounds_merge_the_rails_of_a_pair():
    plans = [{'pairs': [['c', 'a'], ['b', 'c']]}, {'pairs': [['a', 'c']]}, {'pairs': []}]
    got = fm.rail_retest_rounds(plans)
    flat = [p for r in got for p in r]
    assert {'a': 'c', 'b': 'a', 'rails': [0, 1]} in flat and {'a': 'b', 'b': 'c', 'rails': [0]} in flat
    # c is in both pairs: two rounds, a node in one pair per round.
    assert len(got) == 2
    assert fm.rail_retest_rounds([]) == []
    with pytest.raises(fm.MatrixInputError, match=r'plans\[0\] must be a retest plan'):
        fm.rail_retest_rounds([{}])


def _rail(hca, rate, link='InfiniBand'):
    return {'hca': hca, 'rate_gbps': rate, 'link_layer': link}


def test_rail_floors_from_each_port_rate():
    rails = {'n1': [_rail('mlx5_0', 400), _rail('mlx5_1', 400)], 'n2': [_rail('mlx5_0', 200), _rail('mlx5_3', 400)]}
    got = fm.rail_floors(rails)
    assert [f['floor_gbps'] for f in got] == [720.0, 720.0]        # 0.9 x 400 x 2 (both directions added)
    assert got[0]['slow_ports'] == [{'node': 'n2', 'rate_gbps': 200.0}] and got[1]['hcas'] == {'n1': 'mlx5_1', 'n2': 'mlx5_3'}
    # The site's stated rate holds every port to it: a fabric that trained at HDR everywhere fails.
    slow = {'n1': [_rail('mlx5_0', 200)], 'n2': [_rail('mlx5_0', 200)]}
    assert fm.rail_floors(slow, 0.9, 400)[0]['floor_gbps'] == 720.0
    assert fm.rail_floors(slow, 0.5, None, False)[0]['floor_gbps'] == 100.0
    unknown = fm.rail_floors({'n1': [_rail('mlx5_0', None)], 'n2': [_rail('mlx5_0', None)]})[0]
    assert unknown['floor_gbps'] is None and 'set validate_rdma_expected_rate_gbps' in unknown['note']
    with pytest.raises(fm.MatrixInputError, match='must give every host the same number of rails'):
        fm.rail_floors({'n1': [_rail('mlx5_0', 400)], 'n2': []})
    with pytest.raises(fm.MatrixInputError, match='efficiency must be above 0'):
        fm.rail_floors(rails, 0)


# --------------------------------------------------------------------------- schedule size

@pytest.mark.parametrize('n, pairs, rounds, scheduled, serial', [
    (32, 496, 31, 310.0, 4960.0),
    (128, 8128, 127, 1270.0, 81280.0),
    (3, 3, 3, 30.0, 30.0),
])
def test_plan_estimate_matches_the_schedule(n, pairs, rounds, scheduled, serial):
    got = fm.plan_estimate(n, 10)
    assert (got['pairs'], got['rounds'], got['seconds_scheduled'], got['seconds_serial']) == (pairs, rounds, scheduled, serial)
    if n <= 32:
        schedule = fm.round_robin(nodes_of(n))
        assert len(schedule) == rounds and sum(len(r) for r in schedule) == pairs


def test_plan_estimate_with_rails_one_after_the_other():
    got = fm.plan_estimate(32, 10, rails=8, rails_in_parallel=False)
    assert got['measurements'] == 3968 and got['seconds_scheduled'] == 2480.0
    with pytest.raises(fm.MatrixInputError, match='node_count must be a whole number of at least 2'):
        fm.plan_estimate(1)
    with pytest.raises(fm.MatrixInputError, match='seconds_per_pair must be a finite number'):
        fm.plan_estimate(4, float('nan'))


# --------------------------------------------------------------------------- rails

def _port(port=1, link='InfiniBand', state='ACTIVE', rate=400, gid=None, addr=None, ignored=False):
    return {'port': port, 'link_layer': link, 'state': state, 'rate_gbps': rate, 'roce_v2_ipv4_gid_index': gid,
            'roce_v2_ipv4_address': addr, 'ignored': ignored}


def _hca(name, gpus=(), ports=None, guid='0x946dae0300cde72c'):
    return {'name': name, 'node_guid': guid, 'pcie_acs': {'gpus': list(gpus), 'bridges': [], 'enabled': False},
            'ports': ports if ports is not None else [_port()]}


RDMA = {'hcas': [
    _hca('mlx5_0', ['0000:18:00.0']), _hca('mlx5_1', ['0000:2a:00.0']),
    _hca('mlx5_10', ['0000:ba:00.0']), _hca('mlx5_2', ['0000:3a:00.0']),
    _hca('mlx5_4', [], [_port(link='Ethernet', rate=100, gid=3, addr='192.0.2.5')]),  # front end: no GPU
]}


def test_rails_are_the_hcas_beside_a_gpu_in_natural_order():
    got = fm.nccl_rails(RDMA)
    assert [r['hca'] for r in got['rails']] == ['mlx5_0', 'mlx5_1', 'mlx5_2', 'mlx5_10']
    assert got['rails'][0] == {'rail': 0, 'hca': 'mlx5_0', 'port': 1, 'link_layer': 'InfiniBand', 'rate_gbps': 400,
                               'gid_index': None, 'address': None, 'gpu': '0000:18:00.0',
                               'node_guid': '0x946dae0300cde72c'}
    assert got['problems'] == []


def test_rails_from_the_site_list_and_roce_gids():
    roce = {'hcas': [_hca('mlx5_0', [], [_port(link='Ethernet', gid=3, addr='10.0.0.1')]),
                     _hca('mlx5_1', [], [_port(link='Ethernet', gid=None)]),
                     _hca('mlx5_2', [], [_port(state='DOWN'), _port(port=2, ignored=True)])]}
    got = fm.nccl_rails(roce, ['mlx5_0', 'mlx5_1', 'mlx5_2', 'mlx5_9'])
    assert [(r['hca'], r['gid_index'], r['address']) for r in got['rails']] == [('mlx5_0', 3, '10.0.0.1'),
                                                                                ('mlx5_1', None, None)]
    assert got['problems'] == [
        'HCA mlx5_9 (in the NCCL HCA list) is not on this node (it has mlx5_0, mlx5_1, mlx5_2)',
        'HCA mlx5_1 port 1 is RoCE without a RoCE v2 IPv4 GID: give its netdev an address',
        'HCA mlx5_2 has no active port']
    assert fm.nccl_rails({'hcas': [_hca('mlx5_0')]})['problems'] == [
        'no HCA shares a PCIe switch with a GPU (or the PCIe tree was not readable): name the NCCL HCAs explicitly']
    with pytest.raises(fm.MatrixInputError, match='hcas must be a list of HCA names'):
        fm.nccl_rails(RDMA, 'mlx5_0')


def test_rails_that_differ_across_nodes_are_named():
    full = fm.nccl_rails(RDMA)['rails']
    assert fm.check_rails({'n1': full, 'n2': full, 'n3': full}) == []
    assert fm.check_rails({'n1': full, 'n2': full, 'n3': full[:3]}) == [
        'n3: 3 rail(s) (InfiniBand, InfiniBand, InfiniBand), most nodes have 4 (InfiniBand, InfiniBand, '
        'InfiniBand, InfiniBand): the NCCL HCAs must match across nodes']
    with pytest.raises(fm.MatrixInputError, match='rails_by_host must map'):
        fm.check_rails({})
