# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import copy
import os
import re

import pytest

from ansible_collections.gpucluster.core.plugins.module_utils import gpu_health as gh
from ansible_collections.gpucluster.core.plugins.module_utils.gpu_kernel_log import parse_kernel_log
from ansible_collections.gpucluster.core.plugins.module_utils.gpu_smi_xml import parse_nvidia_smi_xml


@pytest.fixture
def parsed(own_fixtures_dir):
    with open(os.path.join(own_fixtures_dir, 'gpu', 'two_gpus_v13_out_of_order.xml')) as handle:
        return parse_nvidia_smi_xml(handle.read())


@pytest.fixture
def healthy(parsed):
    """GPU 0 of our fixture: idle, clean counters, x16 gen5, persistence on."""
    return copy.deepcopy(parsed['devices'][0])


def _set(path, value):
    def mutate(dev):
        node = dev
        keys = path.split('.')
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value
    return mutate


def _many(*mutations):
    def mutate(dev):
        for m in mutations:
            m(dev)
    return mutate


# (id, mutation of the healthy record, check expected, severity expected)
FIRES = [
    ('volatile DBE', _set('ecc_errors.volatile_dbe', 1), 'ecc_uncorrectable', 'critical'),
    ('aggregate SRAM uncorrectable', _set('ecc_errors.aggregate_sram_uncorrectable', 1), 'ecc_sram_uncorrectable',
     'critical'),
    ('aggregate DBE, no SRAM split',
     _many(_set('ecc_errors.aggregate_dbe', 3), _set('ecc_errors.aggregate_sram_uncorrectable', None),
           _set('ecc_errors.aggregate_dram_uncorrectable', None)),
     'ecc_uncorrectable_history', 'warning'),
    ('SRAM correctable over limit', _set('ecc_errors.aggregate_sram_correctable', 10001), 'ecc_correctable', 'warning'),
    ('DRAM correctable over limit', _set('ecc_errors.aggregate_dram_correctable', 20000001), 'ecc_correctable',
     'warning'),
    ('retirement pending', _set('retired_pages.pending', True), 'retired_pages_pending', 'critical'),
    ('DBE retired page', _set('retired_pages.dbe', 1), 'retired_pages', 'warning'),
    ('retired pages at the limit', _many(_set('retired_pages.sbe', 58), _set('retired_pages.dbe', 2)),
     'retired_pages', 'critical'),
    ('row remap pending', _set('remapped_rows.pending', True), 'row_remap_pending', 'critical'),
    ('row remap failure', _set('remapped_rows.failure', True), 'row_remap_failure', 'critical'),
    ('uncorrectable remaps over limit', _set('remapped_rows.uncorrectable', 513), 'row_remap_uncorrectable',
     'critical'),
    ('PCIe width x8 of x16', _set('pcie.width_current', 8), 'pcie_width', 'warning'),
    ('PCIe gen 3 of 5 under load', _many(_set('pcie.gen_current', 3), _set('utilization_gpu_pct', 90)),
     'pcie_gen', 'warning'),
    ('HW slowdown', _set('clocks_event_reasons_active', ['hw_slowdown']), 'clocks_hw_slowdown', 'critical'),
    ('HW thermal slowdown', _set('clocks_event_reasons_active', ['hw_thermal_slowdown']), 'clocks_hw_slowdown',
     'critical'),
    ('HW power brake', _set('clocks_event_reasons_active', ['gpu_idle', 'hw_power_brake_slowdown']),
     'clocks_hw_slowdown', 'critical'),
    ('SW thermal slowdown', _set('clocks_event_reasons_active', ['sw_thermal_slowdown']), 'clocks_event', 'warning'),
    ('near slowdown temperature', _set('temperature_c', 85), 'temperature', 'warning'),
    ('at slowdown temperature', _set('temperature_c', 89), 'temperature', 'critical'),
    ('persistence off', _set('persistence_mode', False), 'persistence_mode', 'warning'),
]


@pytest.mark.parametrize('mutation, check, severity', [f[1:] for f in FIRES], ids=[f[0] for f in FIRES])
def test_check_fires_on_a_bad_record(healthy, mutation, check, severity):
    mutation(healthy)
    issues = gh.check_device(healthy)
    assert [(i['check'], i['severity']) for i in issues] == [(check, severity)]
    assert issues[0]['gpu'] == 0
    assert 'GPU 0 (0000:41:00.0)' in issues[0]['message']


@pytest.mark.parametrize('check', gh.DEVICE_CHECKS, ids=[c.__name__ for c in gh.DEVICE_CHECKS])
def test_check_is_quiet_on_a_healthy_record(healthy, check):
    assert check(healthy, gh.merge_thresholds()) == []


@pytest.mark.parametrize('mutation', [
    _set('clocks_event_reasons_active', ['gpu_idle', 'sw_power_cap', 'applications_clocks_setting']),
    _set('pcie.gen_current', 1),  # idle GPUs downshift: gen is judged only under load
    _set('temperature_c', 83),  # 6 C below slowdown, margin 5
    _set('persistence_mode', None),  # Windows / vGPU: not reported
    _set('remapped_rows', {'correctable': None, 'uncorrectable': None, 'pending': None, 'failure': None}),
    _set('ecc_errors.aggregate_dram_uncorrectable', 1),  # remapped away; the remap checks judge it
    _set('retired_pages.sbe', 3),
], ids=['normal throttle reasons', 'idle gen downshift', 'temperature margin ok', 'persistence not reported',
        'remap not reported', 'historic DRAM uncorrectable', 'few SBE retirements'])
def test_normal_conditions_stay_quiet(healthy, mutation):
    mutation(healthy)
    assert gh.check_device(healthy) == []


@pytest.mark.parametrize('overrides, mutation, expected', [
    ({'pcie_width_severity': 'critical'}, _set('pcie.width_current', 8), [('pcie_width', 'critical')]),
    ({'pcie_width_severity': 'ignore'}, _set('pcie.width_current', 8), []),
    ({'persistence_mode_severity': 'ignore'}, _set('persistence_mode', False), []),
    ({'hw_slowdown_severity': 'warning'}, _set('clocks_event_reasons_active', ['hw_slowdown']),
     [('clocks_hw_slowdown', 'warning')]),
    ({'temperature_margin_c': 10}, _set('temperature_c', 80), [('temperature', 'warning')]),
    ({'remapped_rows_uncorrectable_max': 0}, _set('remapped_rows.uncorrectable', 1),
     [('row_remap_uncorrectable', 'critical')]),
])
def test_threshold_overrides(healthy, overrides, mutation, expected):
    mutation(healthy)
    issues = gh.check_device(healthy, gh.merge_thresholds(overrides))
    assert [(i['check'], i['severity']) for i in issues] == expected


@pytest.mark.parametrize('overrides, fragment', [
    ({'nope': 1}, 'unknown threshold'),
    ({'pcie_width_severity': 'fatal'}, 'accepted: info, warning, critical, ignore'),
    ({'temperature_margin_c': -1}, 'a number >= 0'),
    ({'retired_pages_max': 'many'}, 'a number >= 0'),
    ({'xid_ignore': ['x']}, 'list of Xid numbers'),
])
def test_bad_thresholds(overrides, fragment):
    with pytest.raises(gh.ThresholdError) as info:
        gh.merge_thresholds(overrides)
    assert fragment in str(info.value)


def test_none_keeps_the_default():
    assert gh.merge_thresholds({'temperature_margin_c': None})['temperature_margin_c'] == 5


def _snapshot(parsed=None, failure=None, found=True, pci=None, kernel=None, xml_error=None):
    return {
        'smi': {'found': found, 'path': '/usr/bin/nvidia-smi' if found else None, 'failure': failure,
                'xml_error': xml_error},
        'parsed': parsed,
        'pci_addresses': pci,
        'kernel': kernel if kernel is not None else {'source': 'file', 'events': [], 'error': None},
    }


def test_healthy_node(parsed):
    # Our fixture's GPU 1 carries one DRAM uncorrectable in its history, remapped: not a finding.
    facts = gh.build_facts(_snapshot(parsed, pci=['0000:41:00.0', '0000:c1:00.0']), expected_count=2)
    assert facts['health'] == {'status': 'ok', 'issues': [], 'checks_skipped': []}
    assert facts['present'] is True and facts['count'] == 2 and facts['pci_count'] == 2
    assert facts['source'] == 'nvidia-smi' and facts['driver_version'] == '570.86.15'


def test_count_below_expected_is_critical(parsed):
    facts = gh.build_facts(_snapshot(parsed), expected_count=8)
    assert facts['health']['status'] == 'critical'
    assert [(i['check'], i['severity']) for i in facts['health']['issues']] == [('gpu_count', 'critical')]


def test_count_above_expected_is_a_warning(parsed):
    facts = gh.build_facts(_snapshot(parsed), expected_count=1)
    assert facts['health']['status'] == 'warning'


def test_count_check_is_off_without_expected_count(parsed):
    assert gh.build_facts(_snapshot(parsed))['health']['status'] == 'ok'


def test_more_gpus_on_pci_than_the_driver_sees(parsed):
    facts = gh.build_facts(_snapshot(parsed, pci=['0000:41:00.0', '0000:91:00.0', '0000:c1:00.0']))
    issue, = facts['health']['issues']
    assert (issue['check'], issue['severity']) == ('gpu_pci_count', 'critical')
    assert 'not seen 0000:91:00.0' in issue['message']


def test_pci_check_skipped_without_sysfs(parsed):
    facts = gh.build_facts(_snapshot(parsed, pci=None))
    assert facts['health']['checks_skipped'] == ['gpu_pci_count'] and facts['pci_count'] is None


def test_driver_not_answering_is_critical():
    failure = {'reason': 'driver_not_loaded', 'severity': 'critical', 'rc': 9, 'message': 'NVIDIA-SMI has failed'}
    facts = gh.build_facts(_snapshot(None, failure=failure, pci=[]))
    assert facts['health']['status'] == 'critical' and facts['present'] is True
    assert facts['health']['issues'][0]['check'] == 'driver'
    assert facts['count'] == 0 and facts['devices'] == []


def test_no_nvidia_smi_but_gpus_on_pci_is_critical():
    facts = gh.build_facts(_snapshot(None, found=False, pci=['0000:41:00.0']))
    assert facts['health']['status'] == 'critical'
    assert facts['health']['issues'][0]['check'] == 'driver'


def test_host_without_gpus():
    kernel = {'source': None, 'events': [], 'error': 'not readable'}
    facts = gh.build_facts(_snapshot(None, found=False, pci=[], kernel=kernel))
    assert facts['present'] is False and facts['count'] == 0
    assert facts['health'] == {'status': 'ok', 'issues': [], 'checks_skipped': []}


def test_unparseable_xml_is_unknown():
    facts = gh.build_facts(_snapshot(None, xml_error='not well-formed', pci=[]))
    assert facts['health']['status'] == 'unknown'
    assert gh.exit_code(facts['health']['status']) == 3


def test_unreadable_kernel_log_does_not_change_the_status(parsed):
    facts = gh.build_facts(_snapshot(parsed, pci=[], kernel={'source': None, 'events': [], 'error': 'dmesg: EPERM'}))
    assert facts['health']['status'] == 'ok'
    # No NVIDIA device in sysfs next to a driver that reports GPUs: the PCI count is not judged.
    assert facts['health']['checks_skipped'] == ['xid', 'gpu_pci_count']
    issue, = facts['health']['issues']
    assert (issue['check'], issue['severity']) == ('xid', 'info') and 'EPERM' in issue['message']


LOG = (
    'NVRM: Xid (PCI:0000:c1:00): 48, pid=1, DBE\n'
    'NVRM: Xid (PCI:0000:c1:00): 48, pid=1, DBE again\n'
    'NVRM: Xid (PCI:0000:41:00): 13, pid=2, Graphics SM Warp Exception\n'
    'NVRM: Xid (PCI:0000:91:00): 79, pid=3, GPU has fallen off the bus.\n'
    'nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 48 LTSSM Fault Up\n'
)


def test_xid_events_classified_and_mapped_to_gpus(parsed):
    kernel = {'source': 'file', 'events': parse_kernel_log(LOG), 'error': None}
    facts = gh.build_facts(_snapshot(parsed, kernel=kernel))
    found = [(i['gpu'], i['check'], i['severity']) for i in facts['health']['issues']]
    assert found == [(1, 'xid', 'critical'), (0, 'xid', 'info'), (None, 'xid', 'critical'), (None, 'sxid', 'warning')]
    assert facts['health']['status'] == 'critical'
    xid48 = facts['xid_events'][0]
    assert (xid48['xid'], xid48['gpu'], xid48['count'], xid48['class']) == (48, 1, 2, 'reset')
    assert 'x2 in the last 120 min' in facts['health']['issues'][0]['message']


@pytest.mark.parametrize('line, severity', [
    ('NVRM: Xid (PCI:0000:41:00): 94, pid=1, Contained', 'warning'),
    ('NVRM: Xid (PCI:0000:41:00): 31, pid=1, MMU Fault', 'ok'),
    ('NVRM: Xid (PCI:0000:41:00): 79, pid=1, GPU has fallen off the bus.', 'critical'),
    ('NVRM: Xid (PCI:0000:41:00): 74, pid=1, NVLink', 'critical'),
])
def test_xid_severity_sets_the_status(parsed, line, severity):
    kernel = {'source': 'file', 'events': parse_kernel_log(line), 'error': None}
    assert gh.build_facts(_snapshot(parsed, kernel=kernel))['health']['status'] == severity


def test_xid_ignore(parsed):
    kernel = {'source': 'file', 'events': parse_kernel_log('NVRM: Xid (PCI:0000:41:00): 94, pid=1, x'), 'error': None}
    facts = gh.build_facts(_snapshot(parsed, kernel=kernel), thresholds=gh.merge_thresholds({'xid_ignore': [94]}))
    assert facts['health']['status'] == 'ok' and facts['xid_events'] == []


@pytest.mark.parametrize('severities, status', [
    ([], 'ok'), (['info'], 'ok'), (['unknown'], 'unknown'), (['warning', 'unknown'], 'warning'),
    (['unknown', 'critical', 'warning'], 'critical'),
])
def test_worst_status(severities, status):
    assert gh.worst_status([gh.make_issue(None, 'x', s, 'm') for s in severities]) == status


@pytest.mark.parametrize('status, code', [('ok', 0), ('warning', 1), ('critical', 2), ('unknown', 3)])
def test_exit_codes(status, code):
    assert gh.exit_code(status) == code


@pytest.mark.parametrize('devices, distinct, identity_issues', [
    ([], 0, 0),
    ([{'index': 0, 'uuid': 'GPU-a', 'pci_address': '0000:81:00.0', 'minor_number': 0},
      {'index': 1, 'uuid': 'GPU-b', 'pci_address': '0000:c1:00.0', 'minor_number': 1}], 2, 0),
    # One GPU listed twice: every identity repeats.
    ([{'index': 0, 'uuid': 'GPU-a', 'pci_address': '0000:81:00.0', 'minor_number': 0},
      {'index': 1, 'uuid': 'GPU-a', 'pci_address': '0000:81:00.0', 'minor_number': 0}], 1, 3),
    # Same UUID on another bus id: still one GPU.
    ([{'index': 0, 'uuid': 'GPU-a', 'pci_address': '0000:81:00.0'},
      {'index': 1, 'uuid': 'GPU-a', 'pci_address': '0000:c1:00.0'}], 1, 1),
    # Unknown identities (None) never match each other.
    ([{'index': 0, 'uuid': None, 'pci_address': None}, {'index': 1, 'uuid': None, 'pci_address': None}], 2, 0),
])
def test_identities(devices, distinct, identity_issues):
    assert gh.distinct_count(devices) == distinct
    issues = gh.check_identity(devices)
    assert len(issues) == identity_issues
    assert all((i['check'], i['severity']) == ('gpu_identity', 'critical') for i in issues)


@pytest.mark.parametrize('overrides, fragment', [
    ({'retired_pages_max': float('nan')}, 'retired_pages_max=nan'),
    ({'temperature_margin_c': float('inf')}, 'temperature_margin_c=inf'),
    ({'pcie_gen_load_pct': -1}, 'pcie_gen_load_pct=-1'),
    ({'xid_ignore': '79'}, "xid_ignore='79'"),
    ({'xid_ignore': [79.0]}, 'element 79.0'),
    ({1: 2}, 'unknown threshold 1'),
])
def test_thresholds_refused(overrides, fragment):
    with pytest.raises(gh.ThresholdError, match=re.escape(fragment)):
        gh.merge_thresholds(overrides)


def test_messages_are_bounded():
    issue = gh.make_issue(None, 'x', 'warning', 'y' * (gh.MESSAGE_MAX * 3))
    assert len(issue['message']) < gh.MESSAGE_MAX + 40
