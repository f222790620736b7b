# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gres.conf's Cores= from where each GPU sits (slurm role, filter slurm_node_plan).

Slurm numbers cores logically, socket after socket (gres.conf(5), Cores: "Core 0 will be the first core
on the first socket"; the logical index lstopo prints), not by Linux CPU id. A GPU's PCI device names
its NUMA node (sysfs numa_node, in gpu_facts); the NUMA nodes with CPUs (sysfs has_cpu) split the cores.
When they split them evenly (one node per socket, or sub-NUMA clustering / NPS with the same number of
nodes in every socket), node k of the sorted list holds logical cores k*n .. k*n+n-1, n being the cores
per node. Anything else (a GPU without a node, a node without CPUs, an uneven split) gives no Cores= at
all, with the reason: a wrong binding is worse than none, and slurm_gpu_cores sets it by hand.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type


def _whole(value):
    return isinstance(value, int) and not isinstance(value, bool)


def numa_gpu_cores(devices, numa_nodes, sockets, cores_per_socket):
    """({GPU index: "first-last"}, reason) from gpu_facts' devices (index, numa_node), the NUMA nodes
    with CPUs (a list of ints), and the node's sockets and cores per socket (slurmd -C). The dict is
    empty, and the reason says why, when Cores= cannot be derived or would say nothing (one NUMA node)."""
    if not devices:
        return {}, 'no GPU facts'
    if not numa_nodes:
        return {}, 'the NUMA nodes with CPUs are not known (sysfs devices/system/node/has_cpu)'
    if not isinstance(numa_nodes, (list, tuple)) or not all(_whole(n) and n >= 0 for n in numa_nodes):
        return {}, 'the NUMA node list %r is not a list of node numbers' % (numa_nodes,)
    nodes = sorted(set(numa_nodes))
    if len(nodes) == 1:
        return {}, 'one NUMA node with CPUs: every core is as near to each GPU'
    if not (_whole(sockets) and _whole(cores_per_socket) and sockets > 0 and cores_per_socket > 0):
        return {}, 'the socket and core counts are not known (slurmd -C)'
    total = sockets * cores_per_socket
    if len(nodes) % sockets or total % len(nodes):
        return {}, ('%d NUMA nodes with CPUs do not split %d sockets of %d cores evenly'
                    % (len(nodes), sockets, cores_per_socket))
    per_node = total // len(nodes)
    cores = {}
    for dev in devices:
        index, node = dev.get('index'), dev.get('numa_node')
        if not _whole(index):
            return {}, 'a GPU has no index'
        if not _whole(node) or node not in nodes:
            return {}, ('GPU %d is on %s' % (index, 'no NUMA node' if not _whole(node) or node < 0
                                             else 'NUMA node %d, which has no CPUs' % node))
        first = nodes.index(node) * per_node
        cores[index] = '%d-%d' % (first, first + per_node - 1)
    return cores, ''
