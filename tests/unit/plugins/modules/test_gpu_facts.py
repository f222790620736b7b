# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_facts through Ansible's module harness, against programs that print real nvidia-smi output."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import glob
import os
import time
import xml.etree.ElementTree as ET

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpucluster.core.plugins.modules import gpu_facts


class ExitJson(Exception):
    pass


class FailJson(Exception):
    pass


@pytest.fixture(autouse=True)
def harness(monkeypatch):
    def exit_json(self, **kwargs):
        raise ExitJson(kwargs)

    def fail_json(self, **kwargs):
        kwargs['failed'] = True
        raise FailJson(kwargs)
    monkeypatch.setattr(basic.AnsibleModule, 'exit_json', exit_json)
    monkeypatch.setattr(basic.AnsibleModule, 'fail_json', fail_json)


@pytest.fixture
def host(tmp_path):
    """An empty sysfs and an empty kernel log: the module sees only what a test gives it."""
    sysfs = tmp_path / 'sys'
    (sysfs / 'bus' / 'pci' / 'devices').mkdir(parents=True)
    log = tmp_path / 'kern.log'
    log.write_text('')
    return {'sysfs_root': str(sysfs), 'kernel_log_path': str(log), 'tmp': tmp_path}


def fake_smi(tmp, source_file=None, text=None, rc=0, stderr=None):
    """A program that prints a file (as-is) or a text, like nvidia-smi would."""
    if text is not None:
        source_file = str(tmp / 'output.txt')
        with open(source_file, 'w') as handle:
            handle.write(text)
    script = tmp / 'nvidia-smi'
    lines = ['#!/bin/sh', 'cat "%s"' % source_file]
    if stderr:
        lines.append('echo "%s" >&2' % stderr)
    lines.append('exit %d' % rc)
    script.write_text('\n'.join(lines) + '\n')
    script.chmod(0o755)
    return str(script)


def run_module(args, expect_fail=False):
    with patch_module_args(args):
        with pytest.raises(FailJson if expect_fail else ExitJson) as info:
            gpu_facts.main()
    return info.value.args[0]


def _text(node, path):
    found = node.find(path)
    return found.text.strip() if found is not None and found.text else None


def _int(text):
    """Independent of the parser: leading integer of '24564 MiB' / '16x' / '0', else None."""
    if text is None:
        return None
    head = text.split()[0].rstrip('x')
    return int(head) if head.isdigit() else None


def _yes_no(text):
    return {'Yes': True, 'No': False}.get(text)


def expected_from_file(path):
    root = ET.parse(path).getroot()
    gpus = {}
    for gpu in root.findall('gpu'):
        if gpu.find('ecc_errors/volatile/double_bit') is not None:
            dbe = {scope: _int(_text(gpu, 'ecc_errors/%s/double_bit/total' % scope)) for scope in ('volatile', 'aggregate')}
        else:
            dbe = {}
            for scope in ('volatile', 'aggregate'):
                parts = [_int(_text(gpu, 'ecc_errors/%s/%s' % (scope, name)))
                         for name in ('sram_uncorrectable', 'sram_uncorrectable_parity', 'sram_uncorrectable_secded',
                                      'dram_uncorrectable')]
                parts = [p for p in parts if p is not None]
                dbe[scope] = sum(parts) if parts else None
        pending = _yes_no(_text(gpu, 'retired_pages/pending_retirement'))
        if pending is None:
            pending = _yes_no(_text(gpu, 'retired_pages/pending_blacklist'))
        gpus[_text(gpu, 'pci/pci_bus_id')] = {
            'uuid': _text(gpu, 'uuid'),
            'name': _text(gpu, 'product_name'),
            'memory_total_mib': _int(_text(gpu, 'fb_memory_usage/total')),
            'volatile_dbe': dbe['volatile'],
            'aggregate_dbe': dbe['aggregate'],
            'retired_pending': pending,
            'remap_pending': _yes_no(_text(gpu, 'remapped_rows/remapped_row_pending')),
            'width_current': _int(_text(gpu, 'pci/pci_gpu_link_info/link_widths/current_link_width')),
            'width_max': _int(_text(gpu, 'pci/pci_gpu_link_info/link_widths/max_link_width')),
        }
    return {'count': len(root.findall('gpu')), 'driver': _text(root, 'driver_version'),
            'cuda': _text(root, 'cuda_version'), 'gpus': gpus}


def _real_xml(real_fixtures_dir):
    files = sorted(glob.glob(os.path.join(real_fixtures_dir, '**', '*.xml'), recursive=True))
    assert files
    return files


def test_every_real_xml_reports_the_values_in_the_file(real_fixtures_dir, host, tmp_path):
    for path in _real_xml(real_fixtures_dir):
        expected = expected_from_file(path)
        result = run_module({'nvidia_smi_path': fake_smi(tmp_path, source_file=path),
                             'sysfs_root': host['sysfs_root'], 'kernel_log_path': host['kernel_log_path']})
        gpu = result['ansible_facts']['gpu']
        name = os.path.basename(path)
        assert result['changed'] is False
        assert gpu['present'] is True and gpu['source'] == 'nvidia-smi', name
        assert gpu['count'] == expected['count'] == len(gpu['devices']), name
        assert gpu['driver_version'] == expected['driver'], name
        assert gpu['cuda_version'] == expected['cuda'], name
        got = {d['pci_bus_id']: d for d in gpu['devices']}
        assert set(got) == set(expected['gpus']), name
        for bus_id, want in expected['gpus'].items():
            dev = got[bus_id]
            actual = {
                'uuid': dev['uuid'], 'name': dev['name'], 'memory_total_mib': dev['memory_total_mib'],
                'volatile_dbe': dev['ecc_errors']['volatile_dbe'], 'aggregate_dbe': dev['ecc_errors']['aggregate_dbe'],
                'retired_pending': dev['retired_pages']['pending'], 'remap_pending': dev['remapped_rows']['pending'],
                'width_current': dev['pcie']['width_current'], 'width_max': dev['pcie']['width_max'],
            }
            assert actual == want, '%s %s' % (name, bus_id)
        assert gpu['health']['status'] in ('ok', 'warning', 'critical'), name


def _failure_texts(real_fixtures_dir):
    folder = os.path.join(real_fixtures_dir, '03_nvidia_smi_text', '_extracted_from_docs')
    return sorted(p for p in glob.glob(os.path.join(folder, '*'))
                  if 'FAILED' in os.path.basename(p) or 'unable-to-determine' in p)


@pytest.mark.parametrize('rc', [0, 9])
def test_real_failure_texts_are_critical_with_a_driver_check(real_fixtures_dir, host, tmp_path, rc):
    texts = _failure_texts(real_fixtures_dir)
    assert len(texts) >= 6
    for path in texts:
        result = run_module({'nvidia_smi_path': fake_smi(tmp_path, source_file=path, rc=rc),
                             'sysfs_root': host['sysfs_root'], 'kernel_log_path': host['kernel_log_path']})
        health = result['ansible_facts']['gpu']['health']
        assert health['status'] == 'critical', path
        assert health['issues'][0]['check'] == 'driver' and health['issues'][0]['severity'] == 'critical', path


def test_host_without_gpus(host):
    result = run_module({'nvidia_smi_path': str(host['tmp'] / 'no-such-nvidia-smi'), 'sysfs_root': host['sysfs_root']})
    gpu = result['ansible_facts']['gpu']
    assert gpu['present'] is False and gpu['count'] == 0 and gpu['devices'] == []
    assert gpu['health'] == {'status': 'ok', 'issues': [], 'checks_skipped': []}


def test_no_nvidia_smi_but_a_gpu_on_pci_is_critical(host):
    dev = host['tmp'] / 'sys' / 'bus' / 'pci' / 'devices' / '0000:41:00.0'
    dev.mkdir()
    (dev / 'vendor').write_text('0x10de\n')
    (dev / 'class').write_text('0x030200\n')
    result = run_module({'nvidia_smi_path': str(host['tmp'] / 'missing'), 'sysfs_root': host['sysfs_root'],
                         'kernel_log_path': host['kernel_log_path']})
    gpu = result['ansible_facts']['gpu']
    assert gpu['present'] is True and gpu['pci_count'] == 1
    assert gpu['health']['status'] == 'critical' and gpu['health']['issues'][0]['check'] == 'driver'


@pytest.mark.parametrize('text', [
    '<?xml version="1.0" ?>\n<nvidia_smi_log>\n\t<driver_version>590.44.01</driver_version>\n\t<gpu id="0',
    '<nvidia_smi_log><gpu></nvidia_smi_log>',
])
def test_garbled_xml_fails_with_a_clear_message(host, text):
    result = run_module({'nvidia_smi_path': fake_smi(host['tmp'], text=text), 'sysfs_root': host['sysfs_root'],
                         'kernel_log_path': host['kernel_log_path']}, expect_fail=True)
    assert 'could not parse the output of' in result['msg'] and 'not well-formed' in result['msg']
    assert 'Traceback' not in result['msg']


SMALL = os.path.join(os.path.dirname(__file__), '..', '..', 'fixtures', 'gpu', 'two_gpus_v13_out_of_order.xml')


def test_expected_count_and_fail_on(host):
    smi = fake_smi(host['tmp'], source_file=SMALL)
    base = {'nvidia_smi_path': smi, 'sysfs_root': host['sysfs_root'], 'kernel_log_path': host['kernel_log_path']}
    assert run_module(dict(base, expected_count=2))['ansible_facts']['gpu']['health']['status'] == 'ok'
    report = run_module(dict(base, expected_count=8))
    assert report['ansible_facts']['gpu']['health']['status'] == 'critical'
    failed = run_module(dict(base, expected_count=8, fail_on='critical'), expect_fail=True)
    assert failed['msg'].startswith('GPU health critical: 2 GPU(s) visible to the driver, 8 expected')
    assert failed['ansible_facts']['gpu']['count'] == 2
    # A warning passes fail_on=critical and fails fail_on=warning.
    run_module(dict(base, expected_count=1, fail_on='critical'))
    run_module(dict(base, expected_count=1, fail_on='warning'), expect_fail=True)


def test_thresholds_and_xid_window(host):
    log = host['tmp'] / 'xid.log'
    # Dated a minute ago (a kernel-log file's undated lines never count as recent).
    stamp = time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(time.time() - 60))
    log.write_text('%s,000000+00:00 NVRM: Xid (PCI:0000:c1:00): 94, pid=1, Contained: SM (0x1).\n' % stamp)
    smi = fake_smi(host['tmp'], source_file=SMALL)
    base = {'nvidia_smi_path': smi, 'sysfs_root': host['sysfs_root'], 'kernel_log_path': str(log)}
    gpu = run_module(base)['ansible_facts']['gpu']
    assert gpu['health']['status'] == 'warning' and gpu['xid_events'][0]['gpu'] == 1
    gpu = run_module(dict(base, thresholds={'xid_ignore': [94]}))['ansible_facts']['gpu']
    assert gpu['health']['status'] == 'ok'
    gpu = run_module(dict(base, thresholds={'temperature_margin_c': 30}))['ansible_facts']['gpu']
    assert ('temperature', 'warning') in [(i['check'], i['severity']) for i in gpu['health']['issues']]


@pytest.mark.parametrize('args, fragment', [
    ({'expected_count': -1}, 'expected_count must be >= 0'),
    ({'xid_window_minutes': 0}, 'xid_window_minutes must be >= 1'),
    ({'thresholds': {'temperature_margin_c': -3}}, 'thresholds: threshold temperature_margin_c'),
])
def test_bad_options(host, args, fragment):
    result = run_module(dict(args, sysfs_root=host['sysfs_root']), expect_fail=True)
    assert fragment in result['msg']
