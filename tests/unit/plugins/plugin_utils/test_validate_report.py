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
