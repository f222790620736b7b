# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""perftest output, read from real recordings (tests/unit/fixtures/fabric/INDEX.md and the shared
corpus 06_infiniband) and judged against floors derived from the port rate."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import re

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


# --------------------------------------------------------------------------- command lines of a pair

RAIL_ARGS = dict(ib_port=1, gid_index=3, tcp_port=18516, size=8388608, seconds=5)


def test_server_and_client_command_lines():
    server = perftest.bw_argv('ib_write_bw', 'mlx5_1', **RAIL_ARGS)
    assert server == ['ib_write_bw', '-d', 'mlx5_1', '-i', '1', '-x', '3', '-p', '18516', '-s', '8388608', '-D', '5',
                      '-F', '--report_gbits', '-b']
    client = perftest.bw_argv('/opt/perftest/ib_write_bw', 'mlx5_1', cuda=['--use_cuda_bus_id=0000:18:00.0'],
                              extra=['-q', '4'], server='10.0.0.2', **RAIL_ARGS)
    assert client[-5:] == ['-b', '--use_cuda_bus_id=0000:18:00.0', '-q', '4', '10.0.0.2']
    # InfiniBand: no GID index (perftest needs none); one direction only when asked.
    ib = perftest.bw_argv('ib_write_bw', 'mlx5_0', 1, None, 18515, 65536, 2, bidirectional=False)
    assert '-x' not in ib and '-b' not in ib


@pytest.mark.parametrize('kwargs, says', [
    ({'extra': ['-D', '60']}, 'extra arguments may not set -D'),
    ({'extra': ['--duration=60']}, 'extra arguments may not set --duration=60'),
    ({'extra': ['--use_cuda=1']}, 'may not set --use_cuda=1'),
    ({'extra': '-q 4'}, 'extra must be a list of command-line words'),
    ({'seconds': 0}, 'seconds must be a whole number from 1 to 3600'),
    ({'seconds': True}, 'seconds must be a whole number'),
    ({'tcp_port': 70000}, 'tcp_port must be a whole number from 1 to 65535'),
    ({'size': 0}, 'size must be a whole number from 1'),
    ({'gid_index': -1}, 'gid_index must be a whole number from 0 to 65535'),
    ({'device': 'mlx5_0; reboot'}, 'device must be an RDMA device name'),
    ({'server': 'a b'}, 'server must be the address of the server side'),
    ({'path': ''}, 'path must name the ib_write_bw program'),
])
def test_command_lines_refuse_bad_arguments(kwargs, says):
    args = dict(path='ib_write_bw', device='mlx5_0', **RAIL_ARGS)
    args.update(kwargs)
    with pytest.raises(perftest.PerftestInputError, match=re.escape(says)):
        perftest.bw_argv(**args)


CUDA_ALL = {'cuda': True, 'cuda_bus_id': True, 'dmabuf': True}
CUDA_OLD = {'cuda': True, 'cuda_bus_id': False, 'dmabuf': False}
NO_CUDA = {'cuda': False, 'cuda_bus_id': False, 'dmabuf': False}
GPUS = [{'index': 0, 'pci_address': '0000:18:00.0'}, {'index': 3, 'pci_address': '0000:9A:00.0'}]


@pytest.mark.parametrize('support, address, dmabuf, args, note', [
    (CUDA_ALL, '0000:9a:00.0', True, ['--use_cuda_bus_id=0000:9a:00.0', '--use_cuda_dmabuf'], None),
    (CUDA_OLD, '0000:9a:00.0', False, ['--use_cuda=3'], None),      # the index of the GPU at that address
    (CUDA_OLD, '0000:aa:00.0', False, ['--use_cuda=0'], 'GPU 0 used: the GPU at 0000:aa:00.0 is not in the GPU list'),
    (CUDA_ALL, None, False, ['--use_cuda=0'], 'GPU 0 used: no GPU shares a PCIe switch with the HCA'),
])
def test_gpu_memory_of_a_rail(support, address, dmabuf, args, note):
    got = perftest.cuda_args(support, address, GPUS, dmabuf)
    assert got['args'] == args and got['note'] == note and got['error'] is None


def test_gpu_memory_says_why_it_cannot_be_measured():
    got = perftest.cuda_args(NO_CUDA, '0000:18:00.0', GPUS)
    assert got['args'] == [] and got['error'].startswith('perftest was built without CUDA (ib_write_bw --help lists no '
                                                         '--use_cuda): GPUDirect RDMA cannot be measured')
    assert 'validate_gpudirect=false' in got['error']
    got = perftest.cuda_args(CUDA_OLD, '0000:18:00.0', GPUS, dmabuf=True)
    assert got['args'] == [] and got['error'].startswith('perftest has no --use_cuda_dmabuf')
    with pytest.raises(perftest.PerftestInputError, match='support must be the result of perftest cuda_support'):
        perftest.cuda_args({}, None)


# --------------------------------------------------------------------------- one pair from client, owner and server

def test_pair_result_from_the_client_when_the_server_is_ours(own_fixtures_dir):
    client = _own(own_fixtures_dir, 'perftest_write_bw_roce_cuda_dmabuf_client.txt')
    owner = {'ours': True, 'cause': None, 'reason': 'port 18515 is held by our server (pid 7)'}
    got = perftest.pair_result(client, owner, '', 0)
    assert got['gbps'] == 181.46 and got['error'] is None


def test_pair_result_port_taken_blames_no_one():
    owner = {'ours': False, 'cause': 'port_taken', 'reason': 'port 18515 is held by nc pid 99 on 0.0.0.0'}
    got = perftest.pair_result('', owner, "Couldn't listen to port 18515\n")
    assert got == {'gbps': None, 'error': 'port taken: port 18515 is held by nc pid 99 on 0.0.0.0', 'cause': 'port_taken',
                   'bytes': None, 'bidirectional': False, 'units': None}


def test_pair_result_when_our_server_never_listened():
    owner = {'ours': False, 'cause': 'not_listening', 'reason': 'nothing listens on port 18515'}
    got = perftest.pair_result('', owner, ' IB device mlx5_9 not found\n Unable to find the Infiniband/RoCE device\n')
    assert got['cause'] is None
    assert got['error'] == ('our ib_write_bw server did not listen (nothing listens on port 18515): IB device mlx5_9 not '
                            'found; Unable to find the Infiniband/RoCE device')


def test_pair_result_client_stopped_by_its_time_limit(own_fixtures_dir):
    got = perftest.pair_result('', {'ours': True, 'cause': None, 'reason': ''}, None, 124)
    assert got['error'] == 'ib_write_bw client stopped by its time limit (timeout exit 124): perftest printed nothing'
    refused = _own(own_fixtures_dir, 'perftest_client_connect_refused.txt')
    got = perftest.pair_result(refused, {'ours': True, 'cause': None, 'reason': ''}, "Couldn't listen to port 18515\n", 1)
    assert got['cause'] == 'port_taken' and got['error'].endswith("server: Couldn't listen to port 18515")
    with pytest.raises(perftest.PerftestInputError, match='owner must be the result of fabric_matrix.server_owner'):
        perftest.pair_result('', {'cause': 'x'})
