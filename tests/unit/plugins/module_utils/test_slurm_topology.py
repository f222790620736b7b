# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gres.conf Cores= from each GPU's NUMA node (module_utils/slurm_topology.py), the sysfs reads behind it
(gpu_probe.read_numa, gpu_health.build_facts) and the slurm_node_plan filter that writes it.

Real layouts: `nvidia-smi topo -m` of an 8x A800 node with four NICs and of an 8x A100 node (recordings
named in ../shared/fixtures/INDEX.md): their "NUMA Affinity" column is each GPU's NUMA node, and their
"CPU Affinity" column the Linux CPUs of that node, whose first threads must be the Slurm cores derived.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os

import pytest

from ansible_collections.gpucluster.core.plugins.filter.slurm import FilterModule
from ansible_collections.gpucluster.core.plugins.module_utils import gpu_health, gpu_probe
from ansible_collections.gpucluster.core.plugins.module_utils.slurm_topology import numa_gpu_cores

TOPO = os.path.join('04_topo_nvlink', '_extracted_from_docs')
# (recording, sockets, cores per socket, threads per core): the CPU Affinity column gives the node's size
# (A800: 0-31,64-95 on node 0 of 128 CPUs, two threads per core; A100: 0-23 on node 0 of 48 CPUs).
LAYOUTS = [
    ('llmaction__topo-matrix_a800x8_nics_crlf.txt', 2, 32, 2),
    ('stas00__topo-m_a100x8_nv12.txt', 2, 24, 1),
]


def _cpu_list(text):
    out = []
    for part in text.split(','):
        bounds = part.split('-')
        out += list(range(int(bounds[0]), int(bounds[-1]) + 1))
    return out


def read_topo(path):
    """GPU rows of `nvidia-smi topo -m`: [(index, numa node, Linux CPUs)]."""
    with open(path) as handle:
        lines = [line.rstrip('\r\n') for line in handle]
    rows = []
    for line in lines[1:]:
        words = line.split()
        # Columns: the GPU's name, one per GPU/NIC, then CPU Affinity and NUMA Affinity.
        if words and words[0].startswith('GPU'):
            rows.append((int(words[0][3:]), int(words[-1]), _cpu_list(words[-2])))
    return rows


@pytest.mark.parametrize('name,sockets,cores,threads', LAYOUTS)
def test_recorded_layouts_bind_each_gpu_to_the_cores_of_its_numa_node(real_fixtures_dir, name, sockets, cores, threads):
    rows = read_topo(os.path.join(real_fixtures_dir, TOPO, name))
    assert len(rows) == 8
    devices = [{'index': row[0], 'numa_node': row[1]} for row in rows]
    derived, why = numa_gpu_cores(devices, sorted(set(row[1] for row in rows)), sockets, cores)
    assert why == ''
    for index, _node, cpus in rows:
        first, last = (int(x) for x in derived[index].split('-'))
        # The node's first threads (Linux numbers every core's first thread before the second ones).
        assert list(range(first, last + 1)) == [c for c in cpus if c < sockets * cores]
        assert len(cpus) == cores * threads
    assert derived[0] == '0-%d' % (cores - 1) and derived[7] == '%d-%d' % (cores, 2 * cores - 1)


def test_sub_numa_clusters_split_each_socket():
    # Two sockets of 48 cores, two NUMA nodes each (SNC2 / NPS2): 24 cores per node.
    devices = [{'index': i, 'numa_node': n} for i, n in enumerate([0, 1, 2, 3])]
    assert numa_gpu_cores(devices, [0, 1, 2, 3], 2, 48) == ({0: '0-23', 1: '24-47', 2: '48-71', 3: '72-95'}, '')


def test_numa_nodes_without_cpus_are_not_counted():
    # Grace Hopper style: node 0 has the CPUs, nodes 1-8 are GPU memory; the GPU sits on node 0.
    cores, why = numa_gpu_cores([{'index': 0, 'numa_node': 0}], [0], 1, 72)
    assert cores == {} and why.startswith('one NUMA node')
    cores, why = numa_gpu_cores([{'index': 0, 'numa_node': 1}], [0, 2], 2, 8)
    assert cores == {} and why == 'GPU 0 is on NUMA node 1, which has no CPUs'


@pytest.mark.parametrize('devices,nodes,sockets,cores,reason', [
    ([], [0, 1], 2, 8, 'no GPU facts'),
    ([{'index': 0, 'numa_node': 0}], None, 2, 8, 'the NUMA nodes with CPUs are not known'),
    ([{'index': 0, 'numa_node': 0}], [0, 1, 2], 2, 8, '3 NUMA nodes with CPUs do not split 2 sockets of 8 cores evenly'),
    ([{'index': 0, 'numa_node': 0}], [0, 1], 2, 0, 'the socket and core counts are not known'),
    ([{'index': 0}], [0, 1], 2, 8, 'GPU 0 is on no NUMA node'),
    ([{'index': 0, 'numa_node': -1}], [0, 1], 2, 8, 'GPU 0 is on no NUMA node'),
    ([{'index': None, 'numa_node': 0}], [0, 1], 2, 8, 'a GPU has no index'),
    ([{'index': 0, 'numa_node': 0}], ['0', 1], 2, 8, 'is not a list of node numbers'),
])
def test_no_cores_and_why(devices, nodes, sockets, cores, reason):
    derived, why = numa_gpu_cores(devices, nodes, sockets, cores)
    assert derived == {} and reason in why


def _sysfs(tmp_path, numa, has_cpu):
    for address, node in numa.items():
        dev = tmp_path / 'bus' / 'pci' / 'devices' / address
        dev.mkdir(parents=True)
        (dev / 'vendor').write_text('0x10de\n')
        (dev / 'class').write_text('0x030200\n')
        (dev / 'numa_node').write_text('%s\n' % node)
    if has_cpu is not None:
        (tmp_path / 'devices' / 'system' / 'node').mkdir(parents=True)
        (tmp_path / 'devices' / 'system' / 'node' / 'has_cpu').write_text(has_cpu + '\n')
    return str(tmp_path)


def test_sysfs_numa_reaches_the_gpu_facts(tmp_path):
    root = _sysfs(tmp_path, {'0000:18:00.0': 0, '0000:9a:00.0': 1, '0000:ab:00.0': -1}, '0-1')
    numa = gpu_probe.read_numa(root, gpu_probe.nvidia_pci_addresses(root) + ['0000:00:00.0'])
    assert numa == {'has_cpu': '0-1', 'devices': {'0000:18:00.0': '0', '0000:9a:00.0': '1', '0000:ab:00.0': '-1'}}
    devices = [{'index': i, 'pci_address': a} for i, a in enumerate(['0000:18:00.0', '0000:9a:00.0', '0000:ab:00.0'])]
    # nvidia-smi's own numa_node (newer drivers) is kept.
    devices.append({'index': 3, 'pci_address': '0000:18:00.0', 'numa_node': 5})
    facts = gpu_health.build_facts({'smi': {'found': True}, 'parsed': {'devices': devices, 'count': 4},
                                    'pci_addresses': ['0000:18:00.0', '0000:9a:00.0', '0000:ab:00.0'], 'numa': numa})
    assert facts['numa_nodes_with_cpus'] == [0, 1]
    assert [d.get('numa_node') for d in facts['devices']] == [0, 1, None, 5]


@pytest.mark.parametrize('text,nodes', [('0-1', [0, 1]), ('0,2-3', [0, 2, 3]), ('', []), (None, None),
                                        ('0-x', None), ('3-1', None), ('1-2-3', None)])
def test_node_lists(text, nodes):
    assert gpu_health.parse_node_list(text) == nodes


def test_without_sysfs_the_facts_have_no_numa(tmp_path):
    assert gpu_probe.read_numa(str(tmp_path), ['0000:18:00.0']) == {'has_cpu': None, 'devices': {}}
    facts = gpu_health.build_facts({'smi': {'found': False}, 'parsed': None, 'pci_addresses': []})
    assert facts['numa_nodes_with_cpus'] is None


REPORT = 'NodeName=gpu1 CPUs=128 Boards=1 SocketsPerBoard=2 CoresPerSocket=32 ThreadsPerCore=2 RealMemory=1031000\n'


def _gpu(numa):
    return {'present': True, 'health': {'status': 'ok'}, 'numa_nodes_with_cpus': [0, 1],
            'devices': [{'index': i, 'minor_number': i, 'uuid': 'GPU-%d' % i, 'name': 'NVIDIA A800-SXM4-80GB',
                         'numa_node': n} for i, n in enumerate(numa)]}


def _plan(gpu, **settings):
    base = {'name': 'gpu1', 'gpus': 8, 'gpu_type': 'a800', 'memory_mib': 1031000, 'gpu_cores_auto': True}
    base.update(settings)
    return FilterModule().filters()['slurm_node_plan'](REPORT, gpu, base, None)


def test_the_plan_writes_cores_from_numa_and_says_so():
    plan = _plan(_gpu([0, 0, 0, 0, 1, 1, 1, 1]))
    assert plan['node']['gres'][0]['cores'] == ['0-31'] * 4 + ['32-63'] * 4
    assert any('Cores= from each GPU\'s NUMA node (GPU 0: 0-31' in n for n in plan['notes'])
    lines = FilterModule().filters()['slurm_gres_lines']([plan['node']])
    assert lines == ['NodeName=gpu1 Name=gpu Type=a800 File=/dev/nvidia[0-3] Cores=0-31',
                     'NodeName=gpu1 Name=gpu Type=a800 File=/dev/nvidia[4-7] Cores=32-63']


def test_the_plan_prefers_slurm_gpu_cores_and_can_be_told_not_to_derive():
    by_hand = dict((i, '0-63') for i in range(8))
    assert _plan(_gpu([0] * 4 + [1] * 4), gpu_cores=by_hand)['node']['gres'][0]['cores'] == ['0-63'] * 8
    plan = _plan(_gpu([0] * 4 + [1] * 4), gpu_cores_auto=False)
    assert plan['node']['gres'][0]['cores'] == []


def test_the_plan_says_why_there_are_no_cores():
    plan = _plan(_gpu([0, 0, 0, 0, 1, 1, 1, None]))
    assert plan['node']['gres'][0]['cores'] == []
    assert any('no Cores= in gres.conf: GPU 7 is on no NUMA node' in n for n in plan['notes'])
