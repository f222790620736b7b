# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The validate report: strict JSON, withheld verdicts shown and never drained."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import itertools
import json

import pytest

from ansible_collections.gpucluster.core.plugins.module_utils import fabric_matrix as fm
from ansible_collections.gpucluster.core.plugins.plugin_utils import validate_report as vr

NODES = ['n1', 'n2', 'n3', 'n4']


def _report(verdict, mtu=None, ok=None):
    checks = [{'name': 'pair_matrix', 'node': 'fleet', 'status': 'passed' if verdict['ok'] else 'failed',
               'message': verdict.get('fleet_reason') or 'bad nodes: %s' % verdict['bad_nodes']}]
    return {'generated_at': '2026-12-01T00:00:00Z', 'nodes': NODES, 'tool': 'ib_write_bw', 'matrix': verdict,
            'mtu': mtu, 'ok': verdict['ok'] if ok is None else ok, 'checks': checks}


def _blocked():
    return fm.judge(NODES, [{'src': s, 'dst': d, 'gbps': None, 'error': 'Connection refused'}
                            for s, d in itertools.permutations(NODES, 2)])


def _slow_node():
    return fm.judge(NODES, [{'src': s, 'dst': d, 'gbps': 20.0 if 'n4' in (s, d) else 390.0}
                            for s, d in itertools.permutations(NODES, 2)])


def test_a_blocked_port_drains_nothing_and_says_why():
    report = _report(_blocked())
    assert vr.drain_plan(report) == []
    text = vr.render_markdown(report)
    assert '- verdict: no pair could be measured (6 of 6 failed), so no node is blamed: ' in text
    assert '- bad nodes: none' in text


def test_a_withheld_mtu_verdict_drains_nothing():
    mtu = fm.judge(NODES, [{'src': s, 'dst': d, 'gbps': None, 'error': 'no reply'}
                           for s, d in itertools.permutations(NODES, 2)], 0.5)
    assert mtu['fleet_verdict'] == 'no_measurement'
    report = _report(_slow_node(), mtu=mtu)
    assert [p['node'] for p in vr.drain_plan(report)] == ['n4']
    assert 'verdict: no pair could be measured' in vr.render_markdown(report)


def test_json_is_strict_and_refuses_non_finite_figures():
    report = _report(_slow_node())
    text = vr.render_json(report)
    json.loads(text, parse_constant=lambda name: pytest.fail('JSON holds %s' % name))
    bad = json.loads(text)
    bad['matrix']['pairs'][0]['gbps'] = float('inf')
    with pytest.raises(vr.ReportInputError, match=r'report\.matrix\.pairs\[0\]\.gbps is inf: every figure in the '
                                                  r'report must be a finite number'):
        vr.render_json(bad)
    bad['matrix']['pairs'][0]['gbps'] = float('nan')
    for render in (vr.render_json, vr.render_junit, vr.render_markdown, vr.drain_plan):
        with pytest.raises(vr.ReportInputError, match='is nan'):
            render(bad)
    with pytest.raises(vr.ReportInputError, match='is nan'):
        vr.render_prom(bad, 'n1', 1)


def test_a_deeply_nested_report_is_refused_not_a_recursion_error():
    deep = []
    for dummy in range(200):
        deep = [deep]
    report = dict(_report(_slow_node()), extra=deep)
    with pytest.raises(vr.ReportInputError, match='nested deeper than 64 levels'):
        vr.render_json(report)


@pytest.mark.parametrize('text, error', [
    ('{"end": {"sum_received": {"bits_per_second": Infinity}}}', 'iperf3 reported no received bandwidth (inf)'),
    ('{"end": {"sum_received": {"bits_per_second": 1e999}}}', 'iperf3 reported no received bandwidth (inf)'),
    ('{"end": {"sum_received": {"bits_per_second": NaN}}}', 'iperf3 reported no received bandwidth (nan)'),
    ('[' * 5000, 'iperf3 output is not JSON: ' + '[' * 300 + '...'),
])
def test_iperf3_non_finite_and_hostile_json(text, error):
    assert vr.iperf3_gbps(text) == {'gbps': None, 'error': error}


def test_parsers_delegate_to_the_pure_modules():
    assert vr.perftest_gbps(b'x')['error'] == 'perftest output must be text, got bytes'
    assert vr.nccl_busbw(3)['error'] == 'nccl-tests output must be text, got int'
    assert vr.nccl_busbw('')['error'] == 'no nccl-tests result row in the output (it printed nothing)'


# --------------------------------------------------------------------------- RDMA rails in the report

def _floor(rail=0, floor=720.0):
    return {'rail': rail, 'hcas': dict((n, 'mlx5_%d' % rail) for n in NODES), 'link_layer': 'InfiniBand',
            'line_rate_gbps': 400.0, 'floor_gbps': floor, 'slow_ports': [{'node': 'n4', 'rate_gbps': 200.0}], 'note': None}


def _rail_judge(slow=(), figure=780.0, floor=720.0):
    return fm.judge(NODES, [{'src': s, 'dst': d, 'gbps': 300.0 if (s in slow or d in slow) else figure, 'rail': 0,
                             'bidirectional': True} for s, d in itertools.permutations(NODES, 2)], floor_gbps=floor)


def test_a_rail_entry_and_its_check():
    entry = vr.rail_entry((_floor(), _rail_judge(slow=['n4'])), 'ib_write_bw -b -D 5')
    assert entry['tool'] == 'ib_write_bw -b -D 5' and entry['verdict']['bad_nodes'] == ['n4']
    check = vr.rail_check(entry)
    assert check['name'] == 'rdma_pairs rail 0 (mlx5_0)' and check['status'] == 'failed'
    assert check['message'].startswith('RDMA fabric, InfiniBand: bad nodes: n4; bad links: none; reference 780.00 Gb/s; '
                                       'floor 720.00 Gb/s (line rate 400.00 Gb/s, both directions added)')
    assert 'ports below the line rate: n4 at 200.0 Gb/s' in check['message']
    assert 'pair n1-n4: 300.0 Gb/s is below the floor of 720.0 Gb/s' in check['message']
    passed = vr.rail_check(vr.rail_entry((_floor(), _rail_judge())))
    assert passed['status'] == 'passed'
    assert vr.rail_check(vr.rail_entry((_floor(), None)))['message'] == 'the rail was not judged'
    with pytest.raises(vr.ReportInputError, match='rail_entry takes'):
        vr.rail_entry(_floor())


def test_a_rail_bad_node_is_drained_and_shown():
    report = dict(_report(_rail_judge()), rails=[vr.rail_entry((_floor(), _rail_judge(slow=['n4'])))])
    plan = vr.drain_plan(report)
    assert [p['node'] for p in plan] == ['n4']
    assert plan[0]['text'] == ('2026-12-01T00:00:00Z: RDMA rail 0 (mlx5_0): every pair below 624.00 Gb/s (fleet 780.00 Gb/s)')
    text = vr.render_markdown(report)
    assert '## RDMA rail 0 (mlx5_0, InfiniBand): ib_write_bw -b, both directions added' in text
    assert '- line rate 400.00 Gb/s, floor 720.00 Gb/s' in text
    prom = vr.render_prom(report, 'n4', 1)
    assert 'gpucluster_validate_verdict{verdict="bad_node"} 1' in prom
    assert ('gpucluster_validate_pair_bandwidth_bytes_per_second{peer="n1",direction="both",tool="ib_write_bw",'
            'rail="mlx5_0"} 37500000000.0') in prom
    assert 'gpucluster_validate_pair_ok{peer="n1",rail="mlx5_0"} 0' in prom


def test_an_all_slow_rail_drains_nothing():
    slow = _rail_judge(figure=390.0)
    assert slow['fleet_verdict'] == 'all_below_floor'
    report = dict(_report(_rail_judge()), rails=[vr.rail_entry((_floor(), slow))])
    assert vr.drain_plan(report) == [] and vr.drain_withheld(report) is None


def test_more_than_half_the_nodes_blamed_over_all_checks_drains_nothing():
    """Each verdict blames one node alone, but together three of four: the measurement is suspect."""
    mtu = fm.judge(NODES, [{'src': s, 'dst': d, 'gbps': None if 'n2' in (s, d) else 1.0,
                            'error': 'no reply' if 'n2' in (s, d) else None} for s, d in itertools.permutations(NODES, 2)], 0.5)
    report = dict(_report(_slow_node(), mtu=mtu), rails=[vr.rail_entry((_floor(), _rail_judge(slow=['n1'])))])
    assert sorted(set([mtu['bad_nodes'][0], 'n4', 'n1'])) == ['n1', 'n2', 'n4']
    assert vr.drain_plan(report) == []
    assert vr.drain_withheld(report) == ('3 of 4 nodes are blamed over all the checks (n1, n2, n4): more than half, so the '
                                         'measurement is suspect and nothing is drained')
    # Two of four is half, not more: drained.
    half = dict(_report(_slow_node()), rails=[vr.rail_entry((_floor(), _rail_judge(slow=['n1'])))])
    assert sorted(p['node'] for p in vr.drain_plan(half)) == ['n1', 'n4'] and vr.drain_withheld(half) is None
