# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import re

from ansible_collections.gpucluster.core.plugins.module_utils import gpu_health as gh
from ansible_collections.gpucluster.core.plugins.module_utils.gpu_kernel_log import parse_kernel_log
from ansible_collections.gpucluster.core.plugins.module_utils.gpu_prom import render
from ansible_collections.gpucluster.core.plugins.module_utils.gpu_smi_xml import parse_nvidia_smi_xml

SAMPLE = re.compile(r'^([a-z_]+)(\{[^}]*\})? (-?[0-9.e+]+)$')


def _facts(own_fixtures_dir, log='', expected=2):
    with open(os.path.join(own_fixtures_dir, 'gpu', 'two_gpus_v13_out_of_order.xml')) as handle:
        parsed = parse_nvidia_smi_xml(handle.read())
    snapshot = {'smi': {'found': True, 'path': '/usr/bin/nvidia-smi', 'failure': None, 'xml_error': None},
                'parsed': parsed, 'pci_addresses': ['0000:41:00.0', '0000:c1:00.0'],
                'kernel': {'source': 'file', 'events': parse_kernel_log(log), 'error': None}}
    return gh.build_facts(snapshot, expected_count=expected)


def _samples(text):
    samples = {}
    for line in text.splitlines():
        if line.startswith('#'):
            assert re.match(r'^# (HELP|TYPE) gpucluster_[a-z_]+ ', line), line
            continue
        match = SAMPLE.match(line)
        assert match, 'not a valid sample line: %r' % line
        samples[match.group(1) + (match.group(2) or '')] = match.group(3)
    return samples


def test_render_values(own_fixtures_dir):
    text = render(_facts(own_fixtures_dir), 1767607200.5)
    samples = _samples(text)
    gpu1 = '{gpu="1",uuid="GPU-test0000-0000-0000-0000-0000000000c1"}'
    assert samples['gpucluster_health_status'] == '0'
    assert samples['gpucluster_health_last_run_timestamp_seconds'] == '1767607200'
    assert samples['gpucluster_gpus'] == '2'
    assert samples['gpucluster_gpus_expected'] == '2'
    assert samples['gpucluster_gpus_pci'] == '2'
    assert samples['gpucluster_gpu_temperature_celsius' + gpu1] == '61'
    assert samples['gpucluster_gpu_slowdown_temperature_celsius' + gpu1] == '89'
    assert samples['gpucluster_gpu_power_draw_watts' + gpu1] == '652.33'
    assert samples['gpucluster_gpu_memory_total_bytes' + gpu1] == str(81559 * 1024 * 1024)
    assert samples['gpucluster_gpu_ecc_errors{gpu="1",uuid="GPU-test0000-0000-0000-0000-0000000000c1",'
                   'type="sbe",scope="aggregate"}'] == '42'
    assert samples['gpucluster_gpu_remapped_rows{gpu="1",uuid="GPU-test0000-0000-0000-0000-0000000000c1",'
                   'type="uncorrectable"}'] == '1'
    assert samples['gpucluster_gpu_remapped_rows_pending' + gpu1] == '0'
    assert samples['gpucluster_gpu_pcie_link_width' + gpu1] == '16'
    assert samples['gpucluster_gpu_persistence_mode' + gpu1] == '1'
    assert samples['gpucluster_gpu_clocks_event_active{gpu="1",uuid="GPU-test0000-0000-0000-0000-0000000000c1",'
                   'reason="sw_power_cap"}'] == '1'
    assert samples['gpucluster_node_version_info{component="nvidia_driver",version="570.86.15"}'] == '1'
    assert samples['gpucluster_node_version_info{component="gpu_vbios",version="96.00.AA.00.01"}'] == '1'
    # Not reported by the hardware -> left out (retired pages are N/A on this GPU generation).
    assert not any(k.startswith('gpucluster_gpu_retired_pages') for k in samples)
    assert 'nan' not in text.lower() and 'None' not in text


def test_render_issues_and_xids(own_fixtures_dir):
    facts = _facts(own_fixtures_dir, log='NVRM: Xid (PCI:0000:c1:00): 48, pid=1, DBE\n'
                                         'NVRM: Xid (PCI:0000:c1:00): 48, pid=1, DBE\n', expected=4)
    samples = _samples(render(facts, 0))
    assert samples['gpucluster_health_status'] == '2'
    assert samples['gpucluster_health_issues{severity="critical",check="gpu_count"}'] == '1'
    assert samples['gpucluster_health_issues{severity="critical",check="xid"}'] == '1'
    assert samples['gpucluster_gpu_xid_events{gpu="1",uuid="GPU-test0000-0000-0000-0000-0000000000c1",'
                   'xid="48",severity="critical"}'] == '2'
    assert samples['gpucluster_gpu_health_status{gpu="1",uuid="GPU-test0000-0000-0000-0000-0000000000c1"}'] == '2'
    assert samples['gpucluster_gpu_health_status{gpu="0",uuid="GPU-test0000-0000-0000-0000-000000000041"}'] == '0'


def test_label_values_are_escaped():
    facts = {'health': {'status': 'ok', 'issues': []}, 'count': 1,
             'devices': [{'index': 0, 'uuid': 'GPU-x', 'name': 'Odd "GPU"\\ name\nx', 'vbios_version': None}]}
    text = render(facts, 0)
    assert 'name="Odd \\"GPU\\"\\\\ name\\nx"' in text


def test_host_without_gpus_renders_status_and_count():
    facts = gh.build_facts({'smi': {'found': False}, 'parsed': None, 'pci_addresses': [], 'kernel': None})
    samples = _samples(render(facts, 5))
    assert samples == {'gpucluster_health_status': '0', 'gpucluster_health_last_run_timestamp_seconds': '5',
                       'gpucluster_gpus': '0', 'gpucluster_gpus_pci': '0'}
