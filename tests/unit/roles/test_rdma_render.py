# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Evaluate the rdma role's systemd version decision with Ansible's own templar: networkd reads the
[IPoIB] section from systemd 257 (Debian 13), not in 252 (Debian 12). Ansible's templating keeps a
backslash pair in a Jinja string as two characters, so the regex must be written with single ones;
only a rendering by Ansible shows that."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os

import pytest
import yaml

TASKS = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'roles', 'rdma', 'tasks', 'ipoib.yml')


def _expression():
    with open(TASKS) as handle:
        tasks = yaml.safe_load(handle)
    for task in tasks:
        facts = task.get('ansible.builtin.set_fact') or {}
        if '__rdma_networkd_ipoib_section' in facts:
            return facts['__rdma_networkd_ipoib_section']
    raise AssertionError('no task sets __rdma_networkd_ipoib_section in %s' % TASKS)


@pytest.mark.parametrize('line, expected', [
    ('systemd 257 (257.9-1~deb13u1)', True),
    ('systemd 258 (258.1-1)', True),
    ('systemd 252 (252.39-1~deb12u1)', False),
    ('', False),
])
def test_networkd_ipoib_section_follows_the_systemd_version(ansible_render, line, expected):
    variables = {'__rdma_systemd_version': {'stdout_lines': [line] if line else []}}
    result = ansible_render(variables, _expression())
    assert str(result) == str(expected), (line, result)


NCCL_TEMPLATE = os.path.join(os.path.dirname(TASKS), '..', 'templates', 'etc', 'nccl.conf.j2')


@pytest.mark.parametrize('choice, says', [
    ({'ports': ['mlx5_0:1', 'mlx5_1:1'], 'basis': 'gpu_switch', 'others': ['mlx5_4:1']},
     ['# NCCL_IB_HCA: the adapters that share a PCIe switch with a GPU (the compute rails).',
      '# Not used by NCCL (no GPU beside them: storage or front-end): mlx5_4:1.']),
    ({'ports': ['mlx5_0:1'], 'basis': 'link_layer', 'others': []},
     ["# NCCL_IB_HCA: every port of the fabric's link layer (no adapter shares a PCIe switch with a GPU)."]),
    ({'ports': ['mlx5_0'], 'basis': 'devices', 'others': []},
     ['# NCCL_IB_HCA: the ports named (rdma_nccl_ib_hca or rdma_roce_devices).']),
    ({'ports': [], 'basis': 'link_layer', 'others': []}, []),
])
def test_nccl_conf_says_which_ports_are_the_fabric(ansible_render, choice, says):
    with open(NCCL_TEMPLATE) as handle:
        template = handle.read()
    hcas = [('NCCL_IB_HCA', '=' + ','.join(choice['ports']))] if choice['ports'] else []
    text = ansible_render({'ansible_managed': 'Ansible managed', 'rdma_fabric': 'infiniband',
                           '__rdma_nccl': [('NCCL_SOCKET_IFNAME', 'ib0')] + hcas, '__rdma_fabric_choice': choice}, template)
    lines = text.splitlines()
    assert [line for line in lines if line.startswith('# NCCL_IB_HCA') or line.startswith('# Not used')] == says
    # NCCL reads NAME=VALUE lines; every other line is a comment.
    assert [line for line in lines if line and not line.startswith('#')] == ['%s=%s' % kv for kv in
                                                                             [('NCCL_SOCKET_IFNAME', 'ib0')] + hcas]


ACS_TEMPLATE = os.path.join(os.path.dirname(TASKS), '..', 'templates', 'etc', 'systemd', 'system',
                            'gpucluster-pcie-acs.service.j2')


@pytest.mark.parametrize('bridges, stack, starts', [
    (['0000:17:00.0', '0000:17:01.0'], 'doca', ['/usr/bin/setpci -s 0000:17:00.0 ECAP_ACS+0x6.w=0000',
                                                '/usr/bin/setpci -s 0000:17:01.0 ECAP_ACS+0x6.w=0000']),
    ([], 'inbox', ['/bin/true']),
])
def test_acs_unit_clears_each_bridge_before_the_fabric_starts(ansible_render, bridges, stack, starts):
    with open(ACS_TEMPLATE) as handle:
        template = handle.read()
    text = ansible_render({'ansible_managed': 'Ansible managed', '__rdma_acs_bridges': bridges, 'rdma_stack': stack},
                          template)
    lines = text.splitlines()
    assert [line.split('=', 1)[1] for line in lines if line.startswith('ExecStart=')] == starts
    before = [line for line in lines if line.startswith('Before=')][0]
    assert ('openibd.service' in before) == (stack == 'doca') and 'nvidia-persistenced.service' in before
    assert 'local-fs.target' in [line for line in lines if line.startswith('After=')][0].split('=', 1)[1].split()
    assert 'Type=oneshot' in lines and 'RemainAfterExit=yes' in lines and 'WantedBy=multi-user.target' in lines
