# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible_collections.gpucluster.core.plugins.module_utils.gpu_smi_failure import classify_failure

DRIVER = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
          "Make sure that the latest NVIDIA driver is installed and running.\n")


@pytest.mark.parametrize('rc, out, err, reason, severity', [
    (9, DRIVER, '', 'driver_not_loaded', 'critical'),
    (0, DRIVER, '', 'driver_not_loaded', 'critical'),
    (9, '', 'modprobe: FATAL: Module nvidia not found.\n' + DRIVER, 'driver_not_loaded', 'critical'),
    (18, 'Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 550.144\n', '',
     'version_mismatch', 'critical'),
    (9, 'Failed to initialize NVML: Unknown Error\n', '', 'nvml_init_failed', 'critical'),
    (6, 'No devices were found\n', '', 'no_devices', 'critical'),
    (15, '', 'Unable to determine the device handle for GPU0000:91:00.0: Unknown Error\n', 'device_handle', 'critical'),
    (12, 'NVIDIA-SMI couldn\'t find libnvidia-ml.so library in your system.\n', '', 'nvml_missing', 'critical'),
    (15, 'Unable to determine the device handle for gpu 0000:3B:00.0: GPU is lost.\n', '', 'gpu_lost', 'critical'),
    (14, 'WARNING: infoROM is corrupted at gpu 0000:3B:00.0\n', '', 'inforom_corrupted', 'critical'),
    (4, 'Insufficient Permissions\n', '', 'insufficient_permissions', 'unknown'),
    (9, '', '', 'driver_not_loaded', 'critical'),
    (15, '', '', 'gpu_lost', 'critical'),
    (255, 'something odd\n', '', 'nvidia_smi_failed', 'critical'),
    (3, '', '', 'nvidia_smi_failed', 'critical'),
])
def test_failures(rc, out, err, reason, severity):
    result = classify_failure(rc, out, err)
    assert result['reason'] == reason
    assert result['severity'] == severity
    assert result['rc'] == rc
    assert result['message']


def test_healthy_xml_is_not_a_failure():
    assert classify_failure(0, '<?xml version="1.0" ?>\n<nvidia_smi_log></nvidia_smi_log>\n', '') is None


def test_text_inside_the_xml_is_not_failure_text():
    xml = '<nvidia_smi_log><gpu><product_name>No devices were found</product_name></gpu></nvidia_smi_log>'
    assert classify_failure(0, xml, '') is None


def test_failure_next_to_xml_is_reported():
    xml = '<nvidia_smi_log><attached_gpus>1</attached_gpus></nvidia_smi_log>'
    result = classify_failure(15, xml, 'Unable to determine the device handle for GPU0000:91:00.0: Unknown Error')
    assert result['reason'] == 'device_handle'
    assert '0000:91:00.0' in result['message']
