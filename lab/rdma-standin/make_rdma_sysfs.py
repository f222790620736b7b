# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""TEST DOUBLE of the gpucluster lab: write a small RDMA sysfs tree (one RoCE HCA on a node's Ethernet
interface) for gpucluster.core.rdma_facts to read with ``sysfs_root``.

Lab containers have no HCA. The acceptance playbook reads its rails from rdma_facts; pointed at this
tree (validate_rdma_sysfs_root), it sees one active RoCE port whose RoCE v2 GID carries the node's
address, and measures that rail with the ib_write_bw stand-in beside this file (TCP, not RDMA).
Written only by the lab's molecule prepare (lab/rdma_standin.yml) and by unit tests, never by a role.

The layout is the kernel's (Documentation/ABI/stable/sysfs-class-infiniband): class/infiniband/<hca>/
{node_guid, sys_image_guid, fw_ver, board_id, hca_type, hw_rev, node_type, node_desc} and
ports/1/{link_layer, state, phys_state, rate, lid, sm_lid, lid_mask_count, cap_mask, gids/N,
gid_attrs/types/N, gid_attrs/ndevs/N}; GIDs 0/1 link-local (RoCE v1/v2), 2/3 the IPv4-mapped address
(RoCE v1/v2), so rdma_facts picks GID index 3 as on a real ConnectX port. class/net links to the real
/sys/class/net, so the port's MTU is the interface's, live.

  make_rdma_sysfs.py ROOT --hca labroce0 --netdev eth0 --address 10.213.21.11 [--rate '2.5 Gb/sec (1X SDR)']
"""
import argparse
import ipaddress
import os
import sys


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as handle:
        handle.write(text + '\n')


def gid_text(address):
    """A GID as sysfs prints it: eight groups of four hex digits."""
    return ':'.join('%04x' % int.from_bytes(address.packed[i:i + 2], 'big') for i in range(0, 16, 2))


def build(root, hca, netdev, address, rate, state='4: ACTIVE', phys_state='5: LinkUp'):
    ipv4 = ipaddress.IPv4Address(address)
    guid_hex = 'a5ed' + '0000' + ''.join('%02x' % b for b in ipv4.packed)
    guid = ':'.join(guid_hex[i:i + 4] for i in range(0, 16, 4))
    base = os.path.join(root, 'class', 'infiniband', hca)
    for name, value in (('node_guid', guid), ('sys_image_guid', guid), ('fw_ver', '0.0.0 (lab test double)'),
                        ('board_id', 'GPUCLUSTER_LAB_STANDIN'), ('hca_type', 'lab-standin'), ('hw_rev', '0'),
                        ('node_type', '1: CA'), ('node_desc', '%s lab test double' % hca)):
        write(os.path.join(base, name), value)
    port = os.path.join(base, 'ports', '1')
    for name, value in (('link_layer', 'Ethernet'), ('state', state), ('phys_state', phys_state), ('rate', rate),
                        ('lid', '0x0'), ('sm_lid', '0x0'), ('lid_mask_count', '0'), ('cap_mask', '0x00010000')):
        write(os.path.join(port, name), value)
    link_local = ipaddress.IPv6Address('fe80::' + guid_hex[:4] + ':' + guid_hex[4:8] + ':' + guid_hex[8:12] + ':'
                                       + guid_hex[12:16])
    mapped = ipaddress.IPv6Address('::ffff:' + str(ipv4))
    gids = [(link_local, 'IB/RoCE v1'), (link_local, 'RoCE v2'), (mapped, 'IB/RoCE v1'), (mapped, 'RoCE v2')]
    for index, (gid, kind) in enumerate(gids):
        write(os.path.join(port, 'gids', str(index)), gid_text(gid))
        write(os.path.join(port, 'gid_attrs', 'types', str(index)), kind)
        write(os.path.join(port, 'gid_attrs', 'ndevs', str(index)), netdev)
    net = os.path.join(root, 'class', 'net')
    if not os.path.lexists(net):
        os.symlink('/sys/class/net', net)
    return guid


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
    parser.add_argument('root')
    parser.add_argument('--hca', required=True)
    parser.add_argument('--netdev', required=True)
    parser.add_argument('--address', required=True)
    parser.add_argument('--rate', default='2.5 Gb/sec (1X SDR)')
    args = parser.parse_args()
    print(build(args.root, args.hca, args.netdev, args.address, args.rate))
    return 0


if __name__ == '__main__':
    sys.exit(main())
