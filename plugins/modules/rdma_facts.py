# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
---
module: rdma_facts
short_description: InfiniBand and RoCE adapter facts and a fabric verdict from sysfs
version_added: "0.1.0"
description:
  - Reads every RDMA adapter (HCA) under C(/sys/class/infiniband) and each of its ports, from files only
    (no program is run). Per port it returns the link layer (InfiniBand or Ethernet), port state, physical state, rate with width and
    speed, LID and SM LID (InfiniBand), the GID table with each GID's type and network interface, firmware
    version, board id, node GUID and the port's network interfaces.
  - On Ethernet (RoCE) ports it picks the RoCE v2 GID that carries an IPv4 address (the one NCCL and
    perftest use with C(-x)) and derives the active RoCE MTU from the interface MTU as the kernel does.
  - Reads the PCIe ACS control register of the switch ports between each HCA and the NVIDIA GPUs under
    the same PCIe switch; ACS redirection there makes GPUDirect RDMA crawl.
  - Returns a health verdict (C(ok), C(warning), C(critical), C(unknown)) with one issue per finding.
  - A host without C(/sys/class/infiniband) gets O(ignore:present=false) and health C(ok) with an
    C(info) issue; the module does not fail there.
  - A sysfs file that cannot be read gives C(null) for its value and an issue; the module does not fail.
author:
  - gpucluster.core maintainers (@gpucluster)
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
    details: Read-only; reads the same files in check mode.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
  facts:
    description: Action returns an C(ansible_facts) dictionary that will update existing host facts.
    support: full
  idempotent:
    description: When run twice in a row outside check mode, with the same arguments, the second invocation indicates no change.
    support: full
options:
  sysfs_root:
    description: Root of sysfs. A test seam; keep the default on real hosts.
    type: path
    default: /sys
  expected_rate_gbps:
    description:
      - Rate in Gb/s every judged active port must reach (for example C(400) for NDR or 400GbE). A port below it
        is a C(warning). Unset skips the rate check. A number above 0; NaN and Infinity (which would switch the check
        off) fail the module.
      - Exclude ports that legitimately run slower (a management NIC) with O(ignore_ports).
    type: float
  ignore_ports:
    description:
      - HCAs (C(mlx5_0)) or single ports (C(mlx5_0/1)) that are reported but not judged (state, rate, GID
        and ACS checks), for example an unused second port or a front-end Ethernet adapter.
      - As for every list option of a module, Ansible takes a string as a comma-separated list (C(mlx5_0) is
        one item, C(mlx5_0,mlx5_1) two). The health program's configuration and the health_check role take a
        list only.
    type: list
    elements: str
    default: []
  fail_on:
    description:
      - C(never) only reports. C(critical) fails the task when the health status is critical.
        C(warning) fails it on warning, critical or unknown.
    type: str
    choices: [never, warning, critical]
    default: never
notes:
  - The active MTU of an InfiniBand port is not in sysfs; it is returned as C(null) (C(ibv_devinfo) shows it).
  - The ACS check needs the full PCI configuration space, which only root can read. Run as a normal user,
    the check is skipped and reported in RV(ansible_facts.rdma.health.checks_skipped).
seealso:
  - name: RDMA facts
    description: What is read, the verdict rules and what only hardware can prove.
    link: https://github.com/gpucluster/gpucluster.core/blob/main/docs/rdma-facts.md
  - module: gpucluster.core.gpu_facts
'''

EXAMPLES = r'''
- name: Gather RDMA facts
  gpucluster.core.rdma_facts:

- name: Fail when a compute port is down; NDR expected, the front-end NIC is not judged
  gpucluster.core.rdma_facts:
    expected_rate_gbps: 400
    ignore_ports: [mlx5_bond_0]
    fail_on: critical

- name: Show the GID index NCCL should use on RoCE
  ansible.builtin.debug:
    msg: "{{ ansible_facts['rdma']['hcas'] | map(attribute='ports') | flatten | map(attribute='roce_v2_ipv4_gid_index') }}"
'''

RETURN = r'''
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    rdma:
      description: RDMA adapters, ports and verdict.
      returned: always
      type: dict
      contains:
        present:
          description: At least one RDMA device under C(/sys/class/infiniband).
          type: bool
          sample: true
        sysfs_root:
          description: Root of sysfs that was read.
          type: str
          sample: /sys
        count:
          description: Number of HCAs.
          type: int
          sample: 8
        port_count:
          description: Number of ports over all HCAs.
          type: int
          sample: 8
        active_port_count:
          description: Ports in state ACTIVE (or ACTIVE_DEFER).
          type: int
          sample: 8
        link_layers:
          description: Link layers seen on the ports.
          type: list
          elements: str
          sample: [InfiniBand]
        expected_rate_gbps:
          description: O(expected_rate_gbps), null when unset.
          type: float
          sample: 400
        ignore_ports:
          description: O(ignore_ports), sorted.
          type: list
          elements: str
          sample: []
        gpus:
          description: PCI addresses of NVIDIA GPUs found on the PCI bus (for the ACS check); null without HCAs (not read) or when not readable.
          type: list
          elements: str
          sample: ["0000:18:00.0"]
        hcas:
          description:
            - One record per HCA in natural name order (mlx5_2 before mlx5_10) with C(name), C(hca_type), C(fw_ver), C(board_id), C(node_guid) and
              C(sys_image_guid) (C(0x) and 16 hex digits, as ibstat prints them), C(hw_rev), C(node_type),
              C(node_desc), C(pci_address), C(numa_node), C(netdevs) (interfaces of the PCI function),
              C(pcie_acs) (C(gpus) sharing a PCIe switch with the HCA, C(bridges) between them each with
              C(address), C(readable), C(capability), C(control), C(flags), C(enabled), and C(enabled) overall,
              null when not judged) and C(ports).
            - Each port has C(port), C(link_layer), C(state) and C(state_code), C(phys_state) and
              C(phys_state_code), C(rate) (the sysfs text), C(rate_gbps), C(width), C(speed), C(lid), C(sm_lid)
              and C(lmc) (InfiniBand only), C(cap_mask), C(netdevs), C(netdev_mtu) and C(netdev_mtu_from),
              C(active_mtu) (RoCE only), C(gids) (non-zero entries with C(index), C(gid), C(type), C(netdev),
              C(ipv4), C(link_local)), C(roce_v2_ipv4_gid_index), C(roce_v2_ipv4_gid), C(roce_v2_ipv4_address),
              C(roce_v2_gid_count) and C(ignored).
          type: list
          elements: dict
        health:
          description: Verdict.
          type: dict
          contains:
            status:
              description: C(ok), C(warning), C(critical) or C(unknown).
              type: str
              sample: ok
            issues:
              description: Findings, each with C(hca) and C(port) (or null), C(check), C(severity) and C(message).
              type: list
              elements: dict
            checks_skipped:
              description: Checks that could not run (C(pcie_acs) without root).
              type: list
              elements: str
'''

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpucluster.core.plugins.module_utils.rdma_sysfs import (
    RdmaOptionError, build_facts, collect, normalize_options)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            sysfs_root=dict(type='path', default='/sys'),
            expected_rate_gbps=dict(type='float'),
            ignore_ports=dict(type='list', elements='str', default=[]),
            fail_on=dict(type='str', default='never', choices=['never', 'warning', 'critical']),
        ),
        supports_check_mode=True,
    )
    params = module.params
    try:
        normalize_options(params['expected_rate_gbps'], params['ignore_ports'])
    except RdmaOptionError as exc:
        module.fail_json(msg=str(exc))

    facts = build_facts(collect(params['sysfs_root']), expected_rate_gbps=params['expected_rate_gbps'],
                        ignore_ports=params['ignore_ports'])
    status = facts['health']['status']
    failing = {'never': (), 'critical': ('critical',), 'warning': ('warning', 'critical', 'unknown')}
    if status in failing[params['fail_on']]:
        problems = [i['message'] for i in facts['health']['issues'] if i['severity'] in ('warning', 'critical', 'unknown')]
        module.fail_json(msg='RDMA health %s: %s' % (status, '; '.join(problems)), ansible_facts={'rdma': facts})
    module.exit_json(changed=False, ansible_facts={'rdma': facts})


if __name__ == '__main__':
    main()
