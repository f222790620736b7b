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
    assert set(v['bad_nodes']) == set(nodes) and not v['ok']
    assert all(p['status'] == 'below_floor' for p in v['pairs'])


def test_two_nodes_only_the_floor_judges():
    nodes = nodes_of(2)
    slow = matrix(nodes, default=20.0)
    assert fm.judge(nodes, slow)['ok']
    v = fm.judge(nodes, slow, floor_gbps=50)
    assert v['bad_nodes'] == [] and v['bad_links'] == [['node1', 'node2']]
    assert v['nodes']['node1']['status'] == 'suspect'


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
    # relative check); the floor still fails them, and no node passed to retest against.
    v = fm.judge(nodes, matrix(nodes, slow_nodes=['node1', 'node2']), floor_gbps=50)
    assert v['bad_nodes'] == nodes and v['passed'] == []
    plan = fm.retest_plan(v)
    assert plan['pairs'] == [] and set(plan['partners'].values()) == {None}
    assert not fm.apply_retest(v, plan, [])['ok']


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
    ({'fraction': '0.8'}, "fraction must be a number, got '0.8'"),
    ({'fraction': True}, 'fraction must be a number, got True'),
    ({'floor_gbps': -1}, 'floor_gbps must be at least 0.0'),
    ({'floor_gbps': float('nan')}, 'floor_gbps must be a number'),
])
def test_bad_arguments_name_the_argument(kwargs, message):
    nodes = nodes_of(3)
    with pytest.raises(fm.MatrixInputError) as err:
        fm.judge(nodes, matrix(nodes), **kwargs)
    assert message in str(err.value)


@pytest.mark.parametrize('record, message', [
    ({'src': 'node1', 'dst': 'node9', 'gbps': 1}, 'must name two different nodes'),
    ({'src': 'node1', 'dst': 'node1', 'gbps': 1}, 'must name two different nodes'),
    ({'src': 'node1', 'dst': 'node2', 'gbps': -3}, 'gbps must be a number of at least 0'),
    ({'src': 'node1', 'dst': 'node2', 'gbps': 'fast'}, 'gbps must be a number of at least 0'),
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
