# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""inventories/example pins a coherent stack: every version the drift audit reads is set, and the
roles' own decision code accepts them together (driver plan, toolkit/driver compatibility, cuDNN and
NCCL builds for the toolkit)."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import glob
import os

import yaml

from ansible_collections.gpucluster.core.plugins.filter import nvidia
from ansible_collections.gpucluster.core.plugins.module_utils import drift

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))


# The pins of another scheduler's components: the Slurm example runs no Kubernetes (the Kubernetes test inventory,
# tests/unit/fixtures/k8s/inventory, pins them).
KUBERNETES = ('kubelet', 'kubeadm', 'kubectl')


def _group_vars(inventory=os.path.join(REPO, 'inventories', 'example')):
    merged = {}
    for path in sorted(glob.glob(os.path.join(inventory, 'group_vars', '*.yml'))):
        with open(path) as handle:
            merged.update(yaml.safe_load(handle) or {})
    return merged


def test_every_baseline_variable_is_pinned():
    values = _group_vars()
    for component, var in sorted(drift.DEFAULT_BASELINE_VARS.items()):
        if component in KUBERNETES:
            continue
        value = values.get(var)
        assert isinstance(value, str) and value.strip(), '%s (the pin of %s) is not set as a string' % (var, component)
        assert drift.check_pin(value, var) == value


def test_the_kubernetes_inventory_pins_its_release():
    values = _group_vars(os.path.join(REPO, 'tests', 'unit', 'fixtures', 'k8s', 'inventory'))
    assert values['gpucluster_scheduler'] == 'kubernetes'
    for component in KUBERNETES:
        var = drift.DEFAULT_BASELINE_VARS[component]
        assert var == 'k8s_node_version'
        assert drift.check_pin(values[var], var) == values[var]
        assert drift.pin_matches(values[var], values[var] + '-1.1', 'dpkg')


def test_pinned_stack_holds_together():
    values = _group_vars()
    driver = values['nvidia_driver_version']
    # The example's nodes are 8-GPU HGX boards (NVSwitch) on Ubuntu 22.04: the source must package Fabric Manager,
    # and the open kernel modules the example declares (GPUDirect RDMA over DMA-BUF).
    assert values['nvidia_driver_kernel_module_type'] == 'open'
    plan = nvidia.nvidia_driver_plan(driver, values.get('nvidia_driver_source', 'distro'), 'Ubuntu', '22', 'open',
                                     fabricmanager=True)
    assert any('fabricmanager' in name for name in plan['packages'])
    toolkit = values['cuda_toolkit_version']
    checks = nvidia.cuda_driver_check([toolkit], driver)
    assert all(c['ok'] for c in checks), checks
    toolkit_plan = nvidia.cuda_toolkit_plan([toolkit], toolkit, 'cuda_repo', 'Ubuntu',
                                            cudnn=values['cuda_toolkit_cudnn_version'],
                                            nccl=values['cuda_toolkit_nccl_version'])
    assert any(spec.startswith('libnccl2=') for spec in toolkit_plan['install'])
    assert any(spec.startswith('libcudnn') for spec in toolkit_plan['install'])
