# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os

import pytest

from ansible_collections.gpucluster.core.plugins.module_utils import gpu_smi_xml as sx


def _own(own_fixtures_dir, name):
    with open(os.path.join(own_fixtures_dir, 'gpu', name)) as handle:
        return handle.read()


@pytest.mark.parametrize('text, expected', [
    ('24564 MiB', 24564), ('6.41 W', 6.41), ('16x', 16), ('13 C', 13), ('0 %', 0), ('192 bank(s)', 192),
    ('31637354094 us', 31637354094), ('-7 C', -7), ('0', 0),
    ('N/A', None), ('[N/A]', None), ('[Not Supported]', None), ('Not Supported', None), ('Unknown Error', None),
    ('Requested functionality has been deprecated', None), ('', None), (None, None), ('  ', None),
    ('Enabled', None), ('0x8100', None),
])
def test_to_number(text, expected):
    value = sx.to_number(text)
    assert value == expected
    if expected is not None:
        assert isinstance(value, type(expected))


@pytest.mark.parametrize('text, expected', [
    ('Enabled', True), ('Disabled', False), ('Yes', True), ('No', False), ('Active', True), ('Not Active', False),
    ('N/A', None), ('[Not Supported]', None), ('Unknown Error', None), ('maybe', None), (None, None),
])
def test_to_bool(text, expected):
    assert sx.to_bool(text) is expected


@pytest.mark.parametrize('bus_id, expected', [
    ('00000000:81:00.0', '0000:81:00.0'), ('00000000:C1:00.0', '0000:c1:00.0'), ('0000:3b:00.0', '0000:3b:00.0'),
    ('00000001:0A:1F.7', '0001:0a:1f.7'), ('N/A', None), (None, None),
])
def test_normalize_pci_address(bus_id, expected):
    assert sx.normalize_pci_address(bus_id) == expected


def test_new_schema_two_gpus_sorted_by_pci(own_fixtures_dir):
    result = sx.parse_nvidia_smi_xml(_own(own_fixtures_dir, 'two_gpus_v13_out_of_order.xml'))
    assert result['driver_version'] == '570.86.15'
    assert result['cuda_version'] == '12.8'
    assert result['count'] == 2 and result['attached_gpus'] == 2
    first, second = result['devices']
    # Listed C1 first; NVML numbers by PCI address, so 41 is index 0. Minor numbers are kept apart.
    assert (first['index'], first['pci_address'], first['minor_number']) == (0, '0000:41:00.0', 1)
    assert (second['index'], second['pci_address'], second['minor_number']) == (1, '0000:c1:00.0', 0)
    assert second['pci_bus_id'] == '00000000:C1:00.0'
    assert second['ecc_errors'] == {
        'volatile_sbe': 7, 'volatile_dbe': 0, 'aggregate_sbe': 42, 'aggregate_dbe': 1,
        'volatile_sram_correctable': 2, 'volatile_sram_uncorrectable': 0,
        'volatile_dram_correctable': 5, 'volatile_dram_uncorrectable': 0,
        'aggregate_sram_correctable': 12, 'aggregate_sram_uncorrectable': 0,
        'aggregate_dram_correctable': 30, 'aggregate_dram_uncorrectable': 1,
    }
    assert second['remapped_rows'] == {'correctable': 1, 'uncorrectable': 1, 'pending': False, 'failure': False}
    assert second['retired_pages'] == {'sbe': None, 'dbe': None, 'pending': None}
    assert second['pcie'] == {'gen_current': 5, 'gen_max': 5, 'width_current': 16, 'width_max': 16}
    assert second['power_draw_w'] == 652.33 and second['power_limit_w'] == 700.0
    assert second['temperature_c'] == 61 and second['slowdown_temperature_c'] == 89
    assert second['memory_total_mib'] == 81559 and second['memory_used_mib'] == 40000
    assert second['utilization_gpu_pct'] == 97
    assert second['clocks_event_reasons_active'] == ['sw_power_cap']
    assert first['clocks_event_reasons_active'] == ['gpu_idle']
    assert second['persistence_mode'] is True and second['mig_mode'] is False and second['ecc_mode'] is True
    assert second['cpu_affinity'] == '48-95' and second['numa_node'] == 1
    assert second['nvlink'] is None


def test_old_schema(own_fixtures_dir):
    result = sx.parse_nvidia_smi_xml(_own(own_fixtures_dir, 'one_gpu_old_schema.xml'))
    dev = result['devices'][0]
    assert dev['serial'] is None
    assert dev['ecc_errors']['volatile_sbe'] == 5 and dev['ecc_errors']['volatile_dbe'] == 0
    assert dev['ecc_errors']['aggregate_sbe'] == 42 and dev['ecc_errors']['aggregate_dbe'] == 0
    assert dev['ecc_errors']['aggregate_dram_correctable'] == 40
    assert dev['ecc_errors']['aggregate_sram_correctable'] == 2
    assert dev['retired_pages'] == {'sbe': 2, 'dbe': 0, 'pending': False}
    assert dev['remapped_rows'] == {'correctable': None, 'uncorrectable': None, 'pending': None, 'failure': None}
    assert dev['clocks_event_reasons_active'] == ['gpu_idle']
    assert dev['power_draw_w'] == 38.25 and dev['power_limit_w'] == 250.0
    assert dev['shutdown_temperature_c'] is None and dev['slowdown_temperature_c'] == 82
    assert dev['persistence_mode'] is False and dev['mig_mode'] is None
    assert 'cpu_affinity' not in dev and 'numa_node' not in dev


@pytest.mark.parametrize('text, fragment', [
    ('', 'empty output'),
    ('   \n', 'empty output'),
    ('No devices were found', 'not XML'),
    ('<?xml version="1.0" ?>\n<nvidia_smi_log>\n\t<driver_version>5', 'not well-formed'),
    ('<nvidia_smi_log><gpu id="x"><uuid>a</gpu></nvidia_smi_log>', 'not well-formed'),
    ('<other_root/>', 'unexpected XML root'),
    (b'\xff\xfe<garbage', 'not well-formed'),
])
def test_garbled_xml_raises_a_clear_error(text, fragment):
    with pytest.raises(sx.GpuXmlError) as info:
        sx.parse_nvidia_smi_xml(text)
    assert fragment in str(info.value)


def test_zero_gpus_is_not_an_error():
    result = sx.parse_nvidia_smi_xml('<nvidia_smi_log><driver_version>550.1</driver_version>'
                                     '<attached_gpus>0</attached_gpus></nvidia_smi_log>')
    assert result['count'] == 0 and result['devices'] == []


def test_bytes_with_encoding_declaration():
    text = b'<?xml version="1.0" encoding="UTF-8"?>\n<nvidia_smi_log><attached_gpus>0</attached_gpus></nvidia_smi_log>'
    assert sx.parse_nvidia_smi_xml(text)['attached_gpus'] == 0
