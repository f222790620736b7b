# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The parsers and the health verdict on output recorded on a real H200 (tests/unit/fixtures/gpu/recorded/README.md):
nvidia-smi -q -x of driver 580.159.04 and the open module's /proc/driver/nvidia/version line."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os

from ansible_collections.gpucluster.core.plugins.module_utils import gpu_health, gpu_smi_xml, stack_versions

HERE = os.path.join(os.path.dirname(__file__), '..', '..', 'fixtures', 'gpu', 'recorded')


def _read(name, mode='r'):
    with open(os.path.join(HERE, name), mode) as handle:
        return handle.read()


def test_nvidia_smi_xml_of_an_h200():
    parsed = gpu_smi_xml.parse_nvidia_smi_xml(_read('h200_580.159.04_nvidia-smi-q-x.xml', 'rb'))
    assert (parsed['driver_version'], parsed['cuda_version'], parsed['count']) == ('580.159.04', '13.0', 1)
    gpu, = parsed['devices']
    assert (gpu['name'], gpu['architecture'], gpu['pci_address']) == ('NVIDIA H200', 'Hopper', '0000:00:06.0')
    assert gpu['memory_total_mib'] == 143771
    assert gpu['pcie'] == {'gen_current': 5, 'gen_max': 5, 'width_current': 16, 'width_max': 16}
    # A GPU with a long life: millions of corrected DRAM errors since it was made, none since the driver loaded, none
    # uncorrected; 18 rows remapped for correctable errors, none pending, no remapping failure.
    assert gpu['ecc_mode'] is True
    assert gpu['ecc_errors']['aggregate_dram_correctable'] == 2841191
    assert gpu['ecc_errors']['aggregate_sbe'] == 2841191
    assert (gpu['ecc_errors']['volatile_sbe'], gpu['ecc_errors']['volatile_dbe'], gpu['ecc_errors']['aggregate_dbe']) == (0, 0, 0)
    assert gpu['remapped_rows'] == {'correctable': 18, 'uncorrectable': 0, 'pending': False, 'failure': False}
    assert gpu['clocks_event_reasons_active'] == ['gpu_idle']
    assert gpu['persistence_mode'] is True
    assert gpu['nvlink'] is None  # a PCIe H200 without NVLink peers


def test_the_health_verdict_of_that_h200_is_ok():
    """Corrected errors and rows remapped for them are the normal life of HBM; an idle clock is no throttle."""
    gpu, = gpu_smi_xml.parse_nvidia_smi_xml(_read('h200_580.159.04_nvidia-smi-q-x.xml', 'rb'))['devices']
    issues = gpu_health.check_device(gpu)
    assert gpu_health.worst_status(issues) == 'ok', issues


def test_proc_driver_version_of_the_open_module():
    parsed = stack_versions.parse_proc_driver_version(_read('h200_580.159.04_proc_driver_nvidia_version.txt'))
    assert parsed == {'version': '580.159.04', 'flavor': 'open', 'arch': 'x86_64'}
