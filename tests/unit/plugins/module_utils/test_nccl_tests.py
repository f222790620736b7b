# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""nccl-tests tables and NCCL_DEBUG=INFO transport lines recorded on real clusters
(tests/unit/fixtures/fabric/INDEX.md), judged as the acceptance run judges them."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os

import pytest

from ansible_collections.gpucluster.core.plugins.module_utils import nccl_tests as nt

# The per-SKU single-node floors the acceptance playbook carries (shared docs HEALTH_CHECKS.md,
# "NCCL all_reduce_perf, one node, 8 GPUs"): test data here, not a second copy of the table.
H100_SXM_NODE_FLOOR = 460
A100_SXM_NODE_FLOOR = 228


def _fixture(own_fixtures_dir, name):
    with open(os.path.join(own_fixtures_dir, 'fabric', name)) as handle:
        return handle.read()


def test_healthy_h100_node_passes_on_its_largest_size_and_would_fail_on_the_average(own_fixtures_dir):
    text = _fixture(own_fixtures_dir, 'nccl_h100_dgx_1node_8B_16G.txt')
    parsed = nt.parse(text)
    assert len(parsed['rows']) == 32 and parsed['bad_rows'] == [] and parsed['wrong'] == 0
    assert parsed['min_bytes'] == 8 and parsed['max_bytes'] == 17179869184
    assert [r['model'] for r in parsed['ranks']] == ['NVIDIA H100 80GB HBM3'] * 8
    assert parsed['hosts'] == ['pool0-01806'] and parsed['out_of_bounds'] == 0
    figure = nt.busbw(text)
    assert (figure['gbytes'], figure['size'], figure['avg_gbytes']) == (479.90, 17179869184, 159.151)
    verdict = nt.judge_node(text, H100_SXM_NODE_FLOOR, expected_gpus=8)
    assert verdict['ok'] and verdict['message'] == (
        '479.90 GB/s bus bandwidth at 17179869184 bytes (the largest size); average over all sizes 159.15 GB/s, '
        'not judged reaches the single-node floor of 460.00 GB/s')
    # Why the largest size: the average of 8 B..16 GiB is dominated by latency-bound small messages;
    # judged on it, this healthy node would fail its SKU floor by a factor of three.
    assert figure['avg_gbytes'] < H100_SXM_NODE_FLOOR / 2
    # Sizes up to 1 MiB are latency-bound (below 70 GB/s here): 18 of the 32 sizes.
    assert sum(r['busbw'] < 70 for r in parsed['rows']) == 18


def test_the_same_h100_node_with_fewer_gpus_than_it_has_is_not_judged(own_fixtures_dir):
    text = _fixture(own_fixtures_dir, 'nccl_h100_dgx_1node_8B_16G.txt')
    verdict = nt.judge_node(text, H100_SXM_NODE_FLOOR, expected_gpus=4)
    assert not verdict['ok'] and verdict['message'] == 'the run used 8 GPU(s), the node has 4'


@pytest.mark.parametrize('name, floor, ok, gbytes', [
    ('nccl_a100_oci_1node_10G.txt', A100_SXM_NODE_FLOOR, True, 232.13),
    ('nccl_h100_dgx_1node_8B_16G.txt', H100_SXM_NODE_FLOOR, True, 479.90),
    # An A100 figure held to the H100 floor fails: the floors are per SKU.
    ('nccl_a100_oci_1node_10G.txt', H100_SXM_NODE_FLOOR, False, 232.13),
])
def test_per_sku_single_node_verdicts(own_fixtures_dir, name, floor, ok, gbytes):
    verdict = nt.judge_node(_fixture(own_fixtures_dir, name), floor)
    assert verdict['ok'] is ok and verdict['gbytes'] == gbytes


def test_two_a100_nodes_over_16_x_100g_roce_pass_the_rail_floor(own_fixtures_dir):
    text = _fixture(own_fixtures_dir, 'nccl_a100_oci_2node_10G.txt')
    floor = nt.fleet_floor_gbytes(16, 100)  # 16 rails x 100 Gb/s / 8 x 0.75
    assert floor == 150.0
    figure = nt.busbw(text)
    assert figure['gbytes'] == 191.75 and figure['hosts'] == ['inst-li3ob-ao-ub24', 'inst-wyzi7-ao-ub24']
    # The recording has no NCCL_DEBUG=INFO lines: the figure passes, the transport cannot be confirmed.
    verdict = nt.judge_fleet(text, floor, expect_net='ib', expected_hosts=['inst-li3ob-ao-ub24', 'inst-wyzi7-ao-ub24'])
    assert not verdict['ok'] and verdict['gbytes'] == 191.75
    assert verdict['reasons'] == ['no NCCL INFO lines in the output: run it with NCCL_DEBUG=INFO so the paths '
                                  'NCCL took can be checked']
    assert nt.judge_fleet(text, floor, expect_net='any')['ok']
    # Half the rate on every rail (HDR-class links where 100 Gb/s was planned twice over) fails.
    assert not nt.judge_fleet(text, nt.fleet_floor_gbytes(16, 200, 0.75), expect_net='any')['ok']


def test_missing_host_in_the_rank_list(own_fixtures_dir):
    text = _fixture(own_fixtures_dir, 'nccl_a100_oci_2node_10G.txt')
    verdict = nt.judge_fleet(text, 150, expect_net='any',
                             expected_hosts=['inst-li3ob-ao-ub24.example', 'inst-other'])
    assert verdict['reasons'] == ['ranks ran on inst-li3ob-ao-ub24, inst-wyzi7-ao-ub24, not on inst-other']


@pytest.mark.parametrize('name, gbytes, size, avg', [
    ('nccl_h100_p5_2node_efa_srun_l.txt', 487.09, 17179869184, None),
    ('nccl_h100_p5_2node_efa_mpirun_tag_output.txt', 437.79, 2147483648, 52.9753),
    ('nccl_a100_coreweave_128gpu_pre210_format.txt', 115.61, 8589934592, 37.7108),
])
def test_launcher_prefixes_and_the_old_layout(own_fixtures_dir, name, gbytes, size, avg):
    text = _fixture(own_fixtures_dir, name)
    figure = nt.busbw(text)
    assert (figure['gbytes'], figure['size'], figure['avg_gbytes'], figure['error']) == (gbytes, size, avg, None)
    parsed = nt.parse(text)
    assert parsed['bad_rows'] == []
    if 'pre210' in name:
        # A max-error column (0e+00, 5e-07) is not a count of wrong elements.
        assert parsed['wrong'] is None and len(parsed['rows']) == 31
        assert parsed['rows'][0]['type'] == 'float' and parsed['rows'][0]['redop'] == 'sum'


# --------------------------------------------------------------------------- transport

def test_ib_with_gdrdma_passes_the_transport_check(own_fixtures_dir):
    summary = nt.transport(_fixture(own_fixtures_dir, 'nccl_info_h100_ibext_gdrdma_nccl1453.txt'))
    assert summary['connections']['net_ib'] == 12 and summary['connections']['net_ib_gdr'] == 12
    assert nt.judge_transport(summary, 'ib', expect_gdr=True) == {'ok': True, 'reasons': [], 'notes': []}


def test_socket_fallback_fails_where_ib_is_configured(own_fixtures_dir):
    summary = nt.transport(_fixture(own_fixtures_dir, 'nccl_info_socket_fallback_nccl952.txt'))
    assert summary['connections'] == {'net_ib': 0, 'net_ib_gdr': 0, 'net_socket': 2, 'net_other': 0,
                                      'p2p': 14, 'shm': 0, 'other': 0}
    verdict = nt.judge_transport(summary, 'ib')
    assert verdict['reasons'] == ['NCCL fell back to TCP sockets where IB/RoCE is configured '
                                  '(2 connection(s) via NET/Socket)']
    assert nt.judge_transport(summary, 'socket')['ok']


def test_old_ring_lines_and_socket_interfaces(own_fixtures_dir):
    summary = nt.transport(_fixture(own_fixtures_dir, 'nccl_info_socket_rings_nccl278.txt'))
    assert summary['connections']['net_socket'] == 4
    assert summary['socket_interfaces'] == ['enP1p1s0f0', 'enP1p1s0f1']
    assert not nt.judge_transport(summary, 'ib')['ok']


def test_ib_without_gdrdma_fails_where_gpudirect_is_expected(own_fixtures_dir):
    summary = nt.transport(_fixture(own_fixtures_dir, 'nccl_info_ibext_receive_no_gdrdma_nccl1814.txt'))
    assert summary['connections']['net_ib'] == 4 and summary['connections']['net_ib_gdr'] == 0
    assert summary['connections']['p2p'] == 10
    assert nt.judge_transport(summary, 'ib')['ok']
    verdict = nt.judge_transport(summary, 'ib', expect_gdr=True)
    assert verdict['reasons'] == ['4 of 4 NET/IB connection(s) without GDRDMA: GPUDirect RDMA is not in use']


def test_gdr_disabled_lines_are_quoted(own_fixtures_dir):
    summary = nt.transport(_fixture(own_fixtures_dir, 'nccl_info_roce_gdr_disabled_nccl1537.txt'))
    assert summary['networks'] == ['IB'] and summary['gdr_disabled'] == ["0 'mlx5_0'", "1 'mlx5_1'"]
    assert summary['ib_devices'] == [{'index': 0, 'name': 'mlx5_0', 'port': 1, 'link': 'RoCE'},
                                     {'index': 1, 'name': 'mlx5_1', 'port': 1, 'link': 'RoCE'}]
    # No connection line in the excerpt: across nodes, nothing proves NET/IB was used.
    verdict = nt.judge_transport(summary, 'ib', expect_gdr=True)
    assert verdict['reasons'] == ['no connection via NET/IB across the nodes (0 network connection(s) via '
                                  'another transport): NCCL did not use the RDMA HCAs']
    assert verdict['notes'] == ['NET/IB devices: mlx5_0:1/RoCE, mlx5_1:1/RoCE']


def test_channel_counts_and_p2p_on_one_node(own_fixtures_dir):
    summary = nt.transport(_fixture(own_fixtures_dir, 'nccl_info_h800_channels_p2p_nccl892.txt'))
    assert summary['channels'] == {'coll': 16, 'nvls': 0, 'p2p': 16}
    assert summary['connections']['p2p'] == 2
    verdict = nt.judge_transport(summary, 'ib', multi_node=False)
    assert verdict['ok'] and verdict['notes'] == ['channels: coll 16, nvls 0, p2p 16']


def test_ib_devices_and_network(own_fixtures_dir):
    summary = nt.transport(_fixture(own_fixtures_dir, 'nccl_info_ib_using_nccltests228.txt'))
    assert summary['networks'] == ['IB'] and [d['name'] for d in summary['ib_devices']] == ['mlx5_0', 'mlx5_2']


# --------------------------------------------------------------------------- floors and bad arguments

@pytest.mark.parametrize('args, expected', [
    ((8, 400), 300.0),
    ((8, 400, 1), 400.0),
    ((8, 200), 150.0),
    ((16, 100, 0.75), 150.0),
])
def test_fleet_floor(args, expected):
    assert nt.fleet_floor_gbytes(*args) == expected


@pytest.mark.parametrize('args, message', [
    ((0, 400), 'rails must be a whole number of NCCL HCAs per node'),
    ((8, float('nan')), 'rate_gbps must be a finite number above 0, got nan'),
    ((8, 400, float('inf')), 'efficiency must be a finite number above 0, got inf'),
    ((8, 400, 1.2), 'efficiency must be at most 1, got 1.2'),
    ((True, 400), 'rails must be a whole number'),
])
def test_fleet_floor_refuses(args, message):
    with pytest.raises(nt.NcclInputError, match=message):
        nt.fleet_floor_gbytes(*args)


def test_judge_arguments_are_checked():
    with pytest.raises(nt.NcclInputError, match='floor_gbytes must be a finite number above 0, got nan'):
        nt.judge_node('', float('nan'))
    with pytest.raises(nt.NcclInputError, match='expect_net must be one of ib, socket, any'):
        nt.judge_transport(nt.transport(''), 'roce')
    with pytest.raises(nt.NcclInputError, match='expected_gpus must be a whole number'):
        nt.judge_node('', None, expected_gpus=0)
    with pytest.raises(nt.NcclInputError, match='must be text'):
        nt.parse(b'# Avg bus bandwidth : 1')
