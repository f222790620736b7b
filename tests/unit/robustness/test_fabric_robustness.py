# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Hostile and careless inputs to the acceptance run's parsers, floors and verdicts (issues 27, 30).

Every case states its exact outcome: a figure, an error record (never an exception from tool
output) or a refusal naming the argument. Tool output comes from nodes a user may control (a
process can print anything on a port we measure), so no text ever raises, every figure is finite,
and quotes are bounded.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import itertools
import json
import math

import pytest
from hypothesis import given, settings, strategies as st

from ansible.errors import AnsibleFilterError
from ansible_collections.gpucluster.core.plugins.filter import fabric
from ansible_collections.gpucluster.core.plugins.module_utils import fabric_matrix as fm
from ansible_collections.gpucluster.core.plugins.module_utils import nccl_tests as nt
from ansible_collections.gpucluster.core.plugins.module_utils import perftest

PERFTEST_HEADER = ' #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n'
NCCL_HEADER = ('#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   '
               'busbw #wrong\n')
NCCL_ROW = '  8589934592    2147483648     float     sum      -1    31307  274.38  %s      0    31328  274.19  %s      %s\n'


# (id, result row, exact error); the row follows perftest's result header
PERFTEST_ROWS = [
    ('version-like-size', ' 4.5.6      5000           1.0            1.0          0.1\n',
     'perftest result row is not made of plain numbers: 4.5.6 5000 1.0 1.0 0.1'),
    ('version-like-average', ' 8388608    5000           1.0            4.5.6          0.1\n',
     'perftest result row is not made of plain numbers: 8388608 5000 1.0 4.5.6 0.1'),
    ('negative-average', ' 8388608    5000           1.0            -3.2          0.1\n',
     'perftest result row is not made of plain numbers: 8388608 5000 1.0 -3.2 0.1'),
    ('negative-size', ' -8388608    5000           1.0            3.2          0.1\n',
     'perftest result row is not made of plain numbers: -8388608 5000 1.0 3.2 0.1'),
    ('inf-average', ' 8388608    5000           1.0            inf          0.1\n',
     'perftest result row is not made of plain numbers: 8388608 5000 1.0 inf 0.1'),
    ('exponent', ' 8388608    5000           1.0            1e999          0.1\n',
     'perftest result row is not made of plain numbers: 8388608 5000 1.0 1e999 0.1'),
    ('short-row', ' 8388608    5000\n', 'perftest result row is not made of plain numbers: 8388608 5000'),
]


@pytest.mark.parametrize('case, row, error', PERFTEST_ROWS, ids=[c[0] for c in PERFTEST_ROWS])
def test_perftest_rows_that_are_not_numbers_are_errors(case, row, error):
    got = perftest.measurement(PERFTEST_HEADER + row)
    assert got['gbps'] is None and got['error'] == error
    assert fabric.perftest_gbps(PERFTEST_HEADER + row)['error'] == error


def test_perftest_huge_output_is_quoted_bounded():
    got = perftest.measurement('x' * 20000000)
    assert got['gbps'] is None and len(got['error']) < 300


def test_perftest_error_lines_are_bounded():
    got = perftest.measurement("Couldn't connect to " + 'h' * 5000 + ':1\n' * 50)
    assert got['cause'] == 'unreachable' and len(got['error']) < 800


# (id, busbw out-of-place, busbw in-place, #wrong, exact error)
NCCL_ROWS = [
    ('inf-busbw', 'inf', '479.84', '0', 'nccl-tests result row is not made of finite numbers: 8589934592 '
     '2147483648 float sum -1 31307 274.38 inf 0 31328 274.19 479.84 0'),
    ('nan-busbw', '480.16', 'nan', '0', 'nccl-tests result row is not made of finite numbers: 8589934592 '
     '2147483648 float sum -1 31307 274.38 480.16 0 31328 274.19 nan 0'),
    ('negative-busbw', '-480.16', '479.84', '0', 'nccl-tests result row is not made of finite numbers: '
     '8589934592 2147483648 float sum -1 31307 274.38 -480.16 0 31328 274.19 479.84 0'),
    ('version-like', '4.5.6', '479.84', '0', 'nccl-tests result row is not made of finite numbers: 8589934592 '
     '2147483648 float sum -1 31307 274.38 4.5.6 0 31328 274.19 479.84 0'),
    ('fractional-wrong', '480.16', '479.84', '0.5', 'nccl-tests result row is not made of finite numbers: '
     '8589934592 2147483648 float sum -1 31307 274.38 480.16 0 31328 274.19 479.84 0.5'),
    ('wrong-results', '480.16', '479.84', '12', 'nccl-tests: 12 wrong elements (#wrong) across the sizes: the '
     'reduction gave wrong results'),
]


@pytest.mark.parametrize('case, oop, ip, wrong, error', NCCL_ROWS, ids=[c[0] for c in NCCL_ROWS])
def test_nccl_rows_that_are_not_finite_are_errors(case, oop, ip, wrong, error):
    got = nt.busbw(NCCL_HEADER + NCCL_ROW % (oop, ip, wrong))
    assert got['gbytes'] is None and got['error'] == error


def test_nccl_infinite_average_is_not_a_figure():
    got = nt.busbw(NCCL_HEADER + NCCL_ROW % ('480.16', '479.84', '0') + '# Avg bus bandwidth    : inf\n')
    assert got['gbytes'] == 479.84 and got['avg_gbytes'] is None


def test_nccl_log_lines_starting_with_digits_are_not_rows():
    text = NCCL_HEADER + '036260b61d3a:33347:33367 [7] NCCL INFO Channel 15/0 : 7[7] -> 4[4] via P2P/direct pointer\n'
    text += NCCL_ROW % ('480.16', '479.84', '0')
    assert nt.busbw(text)['gbytes'] == 479.84


@pytest.mark.parametrize('call, message', [
    (lambda: fm.port_floor_gbps(400, expected_rate_gbps=float('nan')),
     'expected_rate_gbps must be a finite number of Gb/s above 0, got nan'),
    (lambda: fm.rail_floor({'n1': 400}, expected_rate_gbps=float('nan')),
     'expected_rate_gbps must be a finite number of Gb/s above 0, got nan'),
    (lambda: fm.port_floor_gbps(float('inf')), 'rate_gbps must be a finite number of Gb/s above 0, got inf'),
    (lambda: fm.port_floor_gbps(1e999), 'rate_gbps must be a finite number of Gb/s above 0, got inf'),
    (lambda: fm.judge(['a', 'b'], [], floor_gbps=float('inf')), 'floor_gbps must be a finite number, got inf'),
    (lambda: nt.fleet_floor_gbytes(8, float('nan')), 'rate_gbps must be a finite number above 0, got nan'),
])
def test_nan_and_infinity_never_switch_a_floor_off(call, message):
    with pytest.raises((fm.MatrixInputError, nt.NcclInputError)) as err:
        call()
    assert message in str(err.value)


def test_filters_refuse_with_the_filter_name():
    with pytest.raises(AnsibleFilterError, match='port_floor_gbps: expected_rate_gbps must be a finite number'):
        fabric.fabric_port_floor(400, 0.9, float('nan'))
    with pytest.raises(AnsibleFilterError, match='fleet_floor_gbytes: rate_gbps must be a finite number'):
        fabric.nccl_fleet_floor(8, float('nan'))
    with pytest.raises(AnsibleFilterError, match='fabric_server_owner: port and pid must be whole numbers'):
        fabric.fabric_server_owner('', 'x', 1)
    # Empty inventory values mean "not set".
    assert fabric.fabric_port_floor(400, 0.9, '') == 360.0


def test_an_infinite_figure_never_reaches_validate_json():
    nodes = ['n1', 'n2', 'n3']
    with pytest.raises(AnsibleFilterError, match='gbps must be a finite number of at least 0, got inf'):
        fabric.fabric_judge([{'src': 'n1', 'dst': 'n2', 'gbps': float('inf')}], nodes)
    verdict = fabric.fabric_judge([{'src': s, 'dst': d, 'gbps': 100.0} for s, d in itertools.permutations(nodes, 2)],
                                  nodes)
    report = {'generated_at': 'x', 'nodes': nodes, 'ok': True, 'checks': [], 'matrix': verdict, 'mtu': None,
              'elapsed_s': float('inf')}
    with pytest.raises(AnsibleFilterError, match=r'report\.elapsed_s is inf'):
        fabric.validate_report_json(report)
    report['elapsed_s'] = 1.5
    assert 'Infinity' not in fabric.validate_report_json(report)


def test_a_measurement_quote_is_bounded():
    nodes = ['n1', 'n2']
    verdict = fm.judge(nodes, [{'src': 'n1', 'dst': 'n2', 'gbps': None, 'error': 'e' * 100000},
                               {'src': 'n2', 'dst': 'n1', 'gbps': 1.0}])
    assert len(verdict['pairs'][0]['reason']) < 500
    with pytest.raises(fm.MatrixInputError) as err:
        fm.judge(nodes, [{'src': 'x' * 100000, 'dst': 'n2', 'gbps': 1}])
    assert len(str(err.value)) < 400


# --------------------------------------------------------------------------- properties

@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(list(' \t\n0123456789.-+eEinfa#[]:/') + ['Gb/sec', 'MiB/sec', 'BW average',
                                                                         '#bytes', 'RDMA_Write BW Test']),
                max_size=200).map(''.join))
def test_perftest_never_raises_and_figures_are_finite(text):
    got = perftest.measurement(PERFTEST_HEADER + text)
    assert (got['gbps'] is None) != (got['error'] is None)
    if got['gbps'] is not None:
        assert math.isfinite(got['gbps']) and got['gbps'] >= 0


NCCL_TOKENS = list(' \t\n0123456789.-+eEinfaN/A#') + ['float', 'sum', 'busbw', '#wrong', 'NCCL INFO', 'via NET/Socket/0']


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(NCCL_TOKENS), max_size=200).map(''.join))
def test_nccl_never_raises_and_figures_are_finite(text):
    got = nt.busbw(NCCL_HEADER + text)
    assert (got['gbytes'] is None) != (got['error'] is None)
    if got['gbytes'] is not None:
        assert math.isfinite(got['gbytes']) and got['gbytes'] >= 0
    summary = nt.transport(text)
    assert nt.judge_transport(summary, 'ib', expect_gdr=True)['ok'] in (True, False)
    json.dumps(summary, allow_nan=False)
