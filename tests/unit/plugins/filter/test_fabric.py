# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import xml.etree.ElementTree as ET

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpucluster.core.plugins.filter import fabric
from ansible_collections.gpucluster.core.plugins.module_utils import scheduler as sc
from ansible_collections.gpucluster.core.plugins.plugin_utils import validate_report

NODES = ['n1', 'n2', 'n3']


def _iperf(bps, key='sum_received'):
    return json.dumps({'start': {}, 'intervals': [], 'end': {'sum_sent': {'bits_per_second': bps * 1.01},
                                                             key: {'bits_per_second': bps}}})


def _measure(figures):
    """figures: {(src, dst): gbps or None}"""
    return [dict({'src': s, 'dst': d}, **({'gbps': g, 'error': None} if g is not None else {'gbps': None, 'error': 'x'}))
            for (s, d), g in figures.items()]


def _all(value, low=None):
    figures = {}
    for s in NODES:
        for d in NODES:
            if s != d:
                figures[(s, d)] = value
    figures.update(low or {})
    return figures


def test_iperf3_receiver_figure():
    assert fabric.iperf3_gbps(_iperf(9.4e9)) == {'gbps': 9.4, 'error': None}


def test_iperf3_errors_are_not_figures():
    assert fabric.iperf3_gbps(json.dumps({'error': 'unable to connect to server: Connection refused'}))['error'] \
        .startswith('iperf3: unable to connect')
    assert fabric.iperf3_gbps('')['gbps'] is None
    assert fabric.iperf3_gbps('iperf3: error - boom')['error'].startswith('iperf3 output is not JSON')
    assert fabric.iperf3_gbps(json.dumps({'end': {}}))['error'] == 'iperf3 reported no received bandwidth'
    assert fabric.iperf3_gbps('[1]')['error'] == 'iperf3 output is not a JSON object'


def test_perftest_average_column():
    # The layout of perftest's RESULT_FMT_G / REPORT_FMT (src/perftest_parameters.h); real
    # recordings are judged in tests/unit/plugins/module_utils/test_perftest.py.
    out = ('---\n #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n'
           ' 8388608    5000             392.11             391.87               0.005839\n---\n')
    assert fabric.perftest_gbps(out) == {'gbps': 391.87, 'error': None, 'cause': None, 'bytes': 8388608,
                                         'bidirectional': False, 'units': 'Gb/sec'}
    refused = fabric.perftest_gbps('Couldn\'t connect to localhost:18515')
    assert refused['gbps'] is None and refused['cause'] == 'unreachable'
    assert fabric.perftest_gbps(None)['error'] == 'perftest printed nothing'
    assert fabric.perftest_gbps(12)['error'] == 'perftest output must be text, got int'


def test_nccl_busbw_is_the_largest_size_not_the_average():
    head = ('#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n')
    good = (head + '           8             2     float     sum      -1    13.67    0.00    0.00      0    13.03    0.00    0.00      0\n'
            ' 17179869184    4294967296     float     sum      -1    62648  274.23  479.90      0    62636  274.28  479.99      0\n'
            '# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 159.151\n')
    got = fabric.nccl_busbw(good)
    assert (got['gbytes'], got['size'], got['avg_gbytes'], got['error']) == (479.90, 17179869184, 159.151, None)
    bad = good.replace('Out of bounds values : 0 OK', 'Out of bounds values : 12 FAILED')
    assert fabric.nccl_busbw(bad)['error'] == 'nccl-tests: 12 out of bounds values (wrong results)'
    assert fabric.nccl_busbw('srun: error: node1: task 0: Exited with exit code 1')['gbytes'] is None
    # The old test: an average line alone is no figure.
    assert fabric.nccl_busbw('# Avg bus bandwidth    : 452.731 \n')['gbytes'] is None


def test_rounds_are_lists_of_disjoint_pairs():
    rounds = fabric.fabric_rounds(['a', 'b', 'c', 'd', 'e'])
    pairs = [tuple(p) for r in rounds for p in r]
    assert len(pairs) == len(set(pairs)) == 10
    for r in rounds:
        ends = [n for p in r for n in p]
        assert len(ends) == len(set(ends))
        assert all(isinstance(p, list) for p in r)


def test_bad_input_names_the_argument():
    with pytest.raises(AnsibleFilterError, match='fraction must be'):
        fabric.fabric_judge(_measure(_all(1.0)), NODES, 1.5)
    with pytest.raises(AnsibleFilterError, match='at least two hosts'):
        fabric.fabric_judge([], ['n1'])
    with pytest.raises(AnsibleFilterError, match='got no values'):
        fabric.fabric_most_common([])


def test_empty_floor_means_none():
    verdict = fabric.fabric_judge(_measure(_all(1.0)), NODES, 0.8, '')
    assert verdict['floor_gbps'] is None and verdict['ok']


def test_most_common_mtu():
    assert fabric.fabric_most_common([1500, 1400, 1500]) == 1500
    assert fabric.fabric_most_common([9000, 1500]) == 9000


def _report(figures, checks=None):
    verdict = fabric.fabric_judge(_measure(figures), NODES, 0.8)
    plan = fabric.fabric_retest_plan(verdict)
    final = fabric.fabric_apply_retest(verdict, plan, [])
    checks = checks or [{'name': 'gpu_health', 'node': n, 'status': 'passed', 'message': 'ok, 8 GPUs'} for n in NODES]
    checks = checks + [{'name': 'pair_matrix', 'node': 'fleet', 'status': 'passed' if final['ok'] else 'failed',
                        'message': 'bad nodes: %s' % final['bad_nodes']}]
    return {'generated_at': '2026-12-01T00:00:00Z', 'nodes': NODES, 'tool': 'iperf3', 'matrix': final, 'mtu': None,
            'ok': final['ok'], 'checks': checks}


SLOW_N3 = _all(1.0, {('n3', 'n1'): 0.2, ('n3', 'n2'): 0.2})


def test_markdown_shows_the_matrix_and_the_bad_node():
    text = fabric.validate_report_markdown(_report(SLOW_N3))
    assert '**FAILED** on 3 nodes' in text
    assert text.startswith('# Cluster acceptance (validate): FAILED\n')
    assert '| from / to (Gb/s) | n1 | n2 | n3 |' in text
    assert '| n3 | 0.20 **low** | 0.20 **low** |  |' in text
    assert '- bad nodes: n3' in text and '- bad links: none' in text


def test_junit_is_xml_with_one_suite_per_node_and_fleet():
    report = _report(SLOW_N3)
    report['checks'].append({'name': 'nccl <all_reduce> & "x"', 'node': 'fleet', 'status': 'skipped',
                             'message': 'no node has an NVIDIA GPU \x01'})
    root = ET.fromstring(fabric.validate_report_junit(report))
    assert root.get('tests') == '5' and root.get('failures') == '1' and root.get('skipped') == '1'
    assert [s.get('name') for s in root] == ['gpucluster.validate.%s' % n for n in NODES + ['fleet']]
    failure = root.find(".//testcase[@name='pair_matrix']/failure")
    assert failure is not None and 'n3' in failure.get('message')


def test_json_round_trips_and_bad_checks_are_refused():
    report = _report(_all(1.0))
    assert json.loads(fabric.validate_report_json(report))['ok'] is True
    with pytest.raises(AnsibleFilterError, match='status in passed, failed, skipped'):
        fabric.validate_report_json(dict(report, checks=[{'name': 'x', 'node': 'n1', 'status': 'ok'}]))


def test_prom_metrics_per_node():
    report = _report(SLOW_N3)
    n3 = fabric.validate_report_prom(report, 'n3', 1700000000)
    assert 'gpucluster_validate_ok 0' in n3
    # n3 sends 0.2 Gb/s to n1 and receives the healthy 1 Gb/s: both directions, in bytes per second.
    assert 'gpucluster_validate_pair_bandwidth_bytes_per_second{peer="n1",direction="out",tool="iperf3"} 25000000.0' in n3
    assert 'gpucluster_validate_pair_bandwidth_bytes_per_second{peer="n1",direction="in",tool="iperf3"} 125000000.0' in n3
    assert 'gpucluster_validate_pair_ok{peer="n1"} 0' in n3
    assert 'gpucluster_validate_last_run_timestamp_seconds 1700000000.0' in n3
    assert 'gpucluster_validate_verdict{verdict="bad_node"} 1' in n3
    assert 'gpucluster_validate_verdict{verdict="failed"} 1' in n3
    assert 'gpucluster_validate_verdict{verdict="passed"} 0' in n3
    n1 = fabric.validate_report_prom(report, 'n1', 1700000000)
    # n1 -> n3 figure is the healthy direction; the pair is still bad (n3 is the bad node).
    assert 'gpucluster_validate_pair_bandwidth_bytes_per_second{peer="n3",direction="out",tool="iperf3"} 125000000.0' in n1
    assert 'gpucluster_validate_pair_ok{peer="n2"} 1' in n1
    assert 'gpucluster_validate_ok 0' in n1  # the run failed
    assert 'gpucluster_validate_verdict{verdict="bad_node"} 0' in n1
    healthy = fabric.validate_report_prom(_report(_all(1.0)), 'n1', 1)
    assert 'gpucluster_validate_ok 1' in healthy
    assert 'gpucluster_validate_verdict{verdict="passed"} 1' in healthy
    assert healthy.count('gpucluster_validate_verdict{') == len(validate_report.VERDICT_KINDS)
    assert healthy.count('gpucluster_validate_pair_bandwidth_bytes_per_second{') == 4  # 2 peers x 2 directions
    for line in healthy.splitlines():
        assert line.startswith('#') or line.split()[-1].replace('.', '', 1).isdigit()
    with pytest.raises(AnsibleFilterError, match='not in the report'):
        fabric.validate_report_prom(report, 'n9', 1)


def test_bad_link_only_marks_its_ends():
    report = _report(_all(1.0, {('n2', 'n3'): 0.2}))
    assert report['matrix']['bad_links'] == [['n2', 'n3']]
    n1 = fabric.validate_report_prom(report, 'n1', 1)
    assert 'gpucluster_validate_pair_ok{peer="n2"} 1' in n1
    assert 'gpucluster_validate_verdict{verdict="bad_link"} 0' in n1
    n2 = fabric.validate_report_prom(report, 'n2', 1)
    assert 'gpucluster_validate_pair_ok{peer="n3"} 0' in n2
    assert 'gpucluster_validate_verdict{verdict="bad_link"} 1' in n2
    assert 'gpucluster_validate_verdict{verdict="bad_node"} 0' in n2


def test_drain_plan_names_bad_nodes_with_the_reason_and_never_link_ends():
    plan = fabric.validate_drain_plan(_report(SLOW_N3))
    assert [p['node'] for p in plan] == ['n3']
    assert plan[0]['reason'].startswith('gpucluster/validate#')
    assert plan[0]['reason'].split(': ', 1)[1].startswith('2026-12-01T00:00:00Z: every pair below ')
    assert sc.parse_reason(plan[0]['reason']).source == 'validate'
    # A bad link blames the cable, not a node: nothing is drained.
    assert fabric.validate_drain_plan(_report(_all(1.0, {('n2', 'n3'): 0.2}))) == []
    assert fabric.validate_drain_plan(_report(_all(1.0))) == []
    mtu = {'bad_nodes': ['n2'], 'pairs': []}
    plan = fabric.validate_drain_plan(dict(_report(_all(1.0)), mtu=mtu, matrix=None))
    text = '2026-12-01T00:00:00Z: full-size frames to no peer (MTU path)'
    assert plan == [{'node': 'n2', 'reason': sc.make_reason('validate', text), 'text': text}]
    with pytest.raises(AnsibleFilterError, match='validate_drain_plan|drain_plan'):
        fabric.validate_drain_plan({'checks': 'no'})


def test_ping_results_become_matrix_measurements():
    ok = {'item': 'n2', 'rc': 0, 'cmd': ['ping', '-M', 'do', '-s', '1472'], 'stdout': '', 'stderr': ''}
    lost = {'item': 'n3', 'rc': 1, 'cmd': ['ping', '-M', 'do', '-s', '1472'],
            'stdout': '3 packets transmitted, 0 received, 100% packet loss, time 404ms\n', 'stderr': ''}
    assert fabric.fabric_ping_measurement(ok, 'n1') == {'src': 'n1', 'dst': 'n2', 'gbps': 1.0, 'error': None}
    got = fabric.fabric_ping_measurement(lost, 'n1')
    assert got['gbps'] is None and got['error'].startswith('no reply to 1500-byte packets with DF set (rc 1): 3 packets')
    with pytest.raises(AnsibleFilterError, match='looped ping task'):
        fabric.fabric_ping_measurement({'skipped': True}, 'n1')
    # n2 cannot pass full-size frames: every pair touching it fails, so the verdict names n2.
    measured = [fabric.fabric_ping_measurement(dict(lost, item=d) if 'n2' in (s, d) else dict(ok, item=d), s)
                for s in NODES for d in NODES if s != d]
    verdict = fabric.fabric_judge(measured, NODES, 0.5)
    assert verdict['bad_nodes'] == ['n2'] and verdict['bad_links'] == []


def test_new_filters_adapt_the_pure_functions():
    filters = fabric.FilterModule().filters()
    for name in ('fabric_port_floor', 'fabric_rail_floor', 'fabric_duplicate_hosts', 'fabric_mtu_plan',
                 'fabric_server_owner', 'fabric_plan_estimate', 'perftest_cuda_support', 'nccl_transport',
                 'nccl_node_verdict', 'nccl_fleet_verdict', 'nccl_fleet_floor'):
        assert callable(filters[name])
    assert fabric.fabric_port_floor(400) == 360.0 and fabric.fabric_port_floor(400, 0.9, None, True) == 720.0
    assert fabric.fabric_rail_floor({'n1': 400, 'n2': 200}, 0.9, '')['slow_ports'] == [{'node': 'n2', 'rate_gbps': 200.0}]
    dup = fabric.fabric_duplicate_hosts({'a': {'machine_id': 'f' * 32}, 'b': {'machine_id': 'F' * 32}})
    assert [d['hosts'] for d in dup] == [['a', 'b']]
    facts = {'ib0': {'device': 'ib0', 'mtu': 2044, 'ipv4': {'address': '10.1.0.5'}}}
    assert fabric.fabric_mtu_plan({'n1': facts}, {'n1': '10.1.0.5'})['n1']['payload'] == 2016
    assert fabric.fabric_server_owner('LISTEN 0 5 0.0.0.0:18515 0.0.0.0:* users:(("ib_write_bw",pid=77,fd=3))\n',
                                      '18515', '77')['ours']
    assert fabric.fabric_plan_estimate(128)['seconds_scheduled'] == 1270.0
    assert fabric.nccl_fleet_floor(8, 400) == 300.0
    assert fabric.perftest_cuda_support('--use_cuda=<cuda device id>')['cuda'] is True
    verdict = fabric.nccl_node_verdict('', '', '')
    assert not verdict['ok'] and verdict['message'] == 'no nccl-tests result row in the output (it printed nothing)'
    fleet = fabric.nccl_fleet_verdict('x via NET/Socket/0', 100, 'ib', False, '')
    assert not fleet['ok']
    with pytest.raises(AnsibleFilterError, match='judge_fleet: expect_net must be one of ib, socket, any'):
        fabric.nccl_fleet_verdict('', None, 'roce')
    with pytest.raises(AnsibleFilterError, match='duplicate_hosts: identities must map'):
        fabric.fabric_duplicate_hosts([])
