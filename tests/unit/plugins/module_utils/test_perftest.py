# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""perftest output, read from real recordings (tests/unit/fixtures/fabric/INDEX.md and the shared
corpus 06_infiniband) and judged against floors derived from the port rate."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os

import pytest

from ansible_collections.gpucluster.core.plugins.module_utils import fabric_matrix as fm
from ansible_collections.gpucluster.core.plugins.module_utils import perftest


def _own(own_fixtures_dir, name):
    with open(os.path.join(own_fixtures_dir, 'fabric', name)) as handle:
        return handle.read()


def _shared(real_fixtures_dir, name):
    with open(os.path.join(real_fixtures_dir, '06_infiniband', '_extracted_from_docs', name)) as handle:
        return handle.read()


def test_hdr_write_sweep_is_judged_on_its_largest_message(real_fixtures_dir):
    text = _shared(real_fixtures_dir, 'aksrdma__ib_write_bw_mlx5_0_sweep_200G.txt')
    parsed = perftest.parse(text)
    assert parsed['units'] == 'Gb/sec' and len(parsed['rows']) == 23 and parsed['bad_rows'] == []
    assert parsed['rows'][0] == {'bytes': 2, 'iterations': 5000, 'peak': 0.045656, 'average': 0.045526,
                                 'msg_rate': 2.845402, 'gbps': 0.045526}
    got = perftest.measurement(text, min_bytes=8388608)
    assert got == {'gbps': 196.55, 'error': None, 'cause': None, 'bytes': 8388608, 'bidirectional': False,
                   'units': 'Gb/sec'}
    # A healthy HDR port passes the rate-derived floor (200 x 0.9 = 180 Gb/s) ...
    assert got['gbps'] >= fm.port_floor_gbps(200)
    # ... and a port that trained at HDR on an NDR fabric fails once the fabric's rate is stated.
    assert got['gbps'] < fm.port_floor_gbps(200, expected_rate_gbps=400)


def test_hdr_read_sweep(real_fixtures_dir):
    got = perftest.measurement(_shared(real_fixtures_dir, 'aksrdma__ib_read_bw_mlx5_0_sweep_200G.txt'))
    assert (got['gbps'], got['bytes'], got['error']) == (197.48, 8388608, None)


def test_roce_run_with_a_warning_inside_the_table(real_fixtures_dir):
    text = _shared(real_fixtures_dir, 'deepops__ib_write_bw_roce_100g_cpu-freq-warning.txt')
    parsed = perftest.parse(text)
    assert parsed['test'] == 'RDMA_Write' and parsed['fields']['Link type'] == 'Ethernet'
    assert parsed['fields']['GID index'] == '3' and parsed['fields']['Device'] == 'mlx5_0'
    assert parsed['fields']['Data ex. method'] == 'rdma_cm'
    assert parsed['warnings'] == ['Conflicting CPU frequency values detected: 1200.535000 != 1251.336000. '
                                  'CPU Frequency is not max.']
    got = perftest.measurement(text)
    assert got['gbps'] == 92.4 and got['bytes'] == 65536
    assert got['gbps'] >= fm.port_floor_gbps(100)  # 90 Gb/s
    # min_bytes says the run was asked for 8 MiB messages: a 64 KiB figure is not that measurement.
    assert perftest.measurement(text, min_bytes=8388608)['error'] == \
        'the largest message measured is 65536 bytes, below the 8388608 bytes asked for'


def test_gpudirect_run_with_cuda_lines_and_tab_fields(own_fixtures_dir):
    text = _own(own_fixtures_dir, 'perftest_write_bw_roce_cuda_dmabuf_client.txt')
    parsed = perftest.parse(text)
    assert parsed['cuda'] is True and parsed['test'] == 'RDMA_Write' and not parsed['bidirectional']
    assert parsed['fields']['Device'] == 'mlx5_1' and parsed['fields']['Number of qps'] == '16'
    assert parsed['fields']['TOS'] == '41' and parsed['fields']['Mtu'] == '1024[B]'
    assert parsed['warnings'][0] == "WARNING: BW peak won't be measured in this run."
    assert parsed['rows'] == [{'bytes': 65536, 'iterations': 10384867, 'peak': 0.0, 'average': 181.46,
                               'msg_rate': 0.3461, 'gbps': 181.46}]
    assert perftest.measurement(text)['gbps'] == 181.46


def test_bidirectional_figure_is_both_directions_added(own_fixtures_dir):
    text = _own(own_fixtures_dir, 'perftest_write_bw_bidirectional_loopback_rocm_doc.txt')
    got = perftest.measurement(text)
    assert got['bidirectional'] is True and got['gbps'] == 204.59 and got['bytes'] == 8388608
    # The floor of a -b run is doubled: the same figure on a 200 Gb/s port is half its duplex rate.
    assert fm.port_floor_gbps(200, bidirectional=True) == 360.0
    assert got['gbps'] < fm.port_floor_gbps(200, bidirectional=True)
    assert got['gbps'] >= fm.port_floor_gbps(100, bidirectional=True)


def test_connection_refused_is_an_error_not_a_figure(own_fixtures_dir):
    got = perftest.measurement(_own(own_fixtures_dir, 'perftest_client_connect_refused.txt'))
    assert got['gbps'] is None and got['cause'] == 'unreachable'
    assert got['error'] == ("perftest: Couldn't connect to 192.168.125.211:18515; Unable to open file descriptor "
                            "for socket connection Unable to init the socket connection")


def test_a_server_that_cannot_listen_is_port_taken():
    # The line perftest prints when bind() fails (src/perftest_communication.c).
    got = perftest.measurement("Couldn't listen to port 18515\n")
    assert got['cause'] == 'port_taken' and got['gbps'] is None


@pytest.mark.parametrize('units, average, gbps', [
    ('MiB/sec', '11728.47', 98.385537),   # 2^20 bytes per MiB, 8 bits a byte
    ('MB/sec', '11728.47', 98.385537),    # the same unit before perftest relabelled it
    ('Gb/sec', '98.39', 98.39),
])
def test_units(units, average, gbps):
    text = (' #bytes     #iterations    BW peak[%s]    BW average[%s]   MsgRate[Mpps]\n'
            ' 65536      664644           0.00               %s           0.187655\n' % (units, units, average))
    assert perftest.measurement(text)['gbps'] == pytest.approx(gbps, abs=1e-4)


def test_unknown_unit_is_refused():
    text = (' #bytes     #iterations    BW peak[Kb/sec]    BW average[Kb/sec]   MsgRate[Mpps]\n'
            ' 65536      1000           1.0               1.0           0.1\n')
    assert perftest.measurement(text)['error'].startswith('perftest: unknown bandwidth unit')


def test_cuda_support_from_help():
    # The usage() strings of perftest_parameters.c (linux-rdma/perftest): printed only when built with CUDA.
    built = ('      --use_cuda=<cuda device id> Use CUDA specific device for GPUDirect RDMA testing\n'
             '      --use_cuda_bus_id=<cuda full BUS id> Use CUDA specific device, based on its full PCIe address\n'
             '      --use_cuda_dmabuf Use CUDA DMA-BUF for GPUDirect RDMA testing\n')
    assert perftest.cuda_support(built) == {'cuda': True, 'cuda_bus_id': True, 'dmabuf': True}
    assert perftest.cuda_support(' -d, --ib-dev=<dev> Use IB device <dev>\n') == \
        {'cuda': False, 'cuda_bus_id': False, 'dmabuf': False}
    with pytest.raises(perftest.PerftestInputError, match='must be text'):
        perftest.cuda_support(b'--use_cuda=')
