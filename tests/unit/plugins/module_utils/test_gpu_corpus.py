# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Invariants over every file of the real-output corpus ($GPUCLUSTER_FIXTURES; fails when absent, see conftest)."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import glob
import os
import re
import xml.etree.ElementTree as ET

import pytest

from ansible_collections.gpucluster.core.plugins.module_utils import gpu_health as gh
from ansible_collections.gpucluster.core.plugins.module_utils.gpu_kernel_log import parse_kernel_log
from ansible_collections.gpucluster.core.plugins.module_utils.gpu_smi_failure import classify_failure
from ansible_collections.gpucluster.core.plugins.module_utils.gpu_smi_xml import GpuXmlError, parse_nvidia_smi_xml

NUMBERS = ('index', 'minor_number', 'memory_total_mib', 'memory_used_mib', 'temperature_c', 'slowdown_temperature_c',
           'shutdown_temperature_c', 'memory_temperature_c', 'power_draw_w', 'power_limit_w', 'utilization_gpu_pct',
           'numa_node')
FLAGS = ('persistence_mode', 'mig_mode', 'ecc_mode')
MISSING_WORDS = re.compile(r'^\[?(N/A|Not Supported|Unknown Error|Requested functionality has been deprecated)\]?$')
# The corpus masks identifiers: the exporter captures zero them, telegraf's dual-GPU files reuse a placeholder.
MASKED_UUID = re.compile(r'^GPU-(00000000-0000|12345678-aaaa)-')


def _files(root, pattern):
    return sorted(glob.glob(os.path.join(root, '**', pattern), recursive=True))


def _all_files(root):
    return [p for p in _files(root, '*') if os.path.isfile(p) and not p.endswith(('.md', '.tsv'))]


def _xml_files(root):
    return _files(root, '*.xml')


def test_corpus_has_xml(real_fixtures_dir):
    assert len(_xml_files(real_fixtures_dir)) >= 20


def _check_typed(value, where):
    if isinstance(value, dict):
        for key, item in value.items():
            _check_typed(item, '%s.%s' % (where, key))
    elif isinstance(value, list):
        for pos, item in enumerate(value):
            _check_typed(item, '%s[%d]' % (where, pos))
    elif isinstance(value, str):
        assert not MISSING_WORDS.match(value.strip()), '%s is the string %r, expected null' % (where, value)


def test_every_xml_parses_with_the_invariants(real_fixtures_dir):
    failures = []
    for path in _xml_files(real_fixtures_dir):
        name = os.path.relpath(path, real_fixtures_dir)
        with open(path, 'rb') as handle:
            raw = handle.read()
        result = parse_nvidia_smi_xml(raw)
        gpus = ET.fromstring(raw).findall('gpu')
        try:
            assert result['count'] == len(gpus) == len(result['devices'])
            assert [d['index'] for d in result['devices']] == list(range(len(gpus)))
            uuids = [d['uuid'] for d in result['devices'] if not MASKED_UUID.match(d['uuid'] or '')]
            assert len(uuids) == len(set(uuids)), 'duplicate UUIDs'
            assert all(d['uuid'] and d['uuid'].startswith('GPU-') for d in result['devices'])
            for dev in result['devices']:
                for key in NUMBERS:
                    assert dev.get(key) is None or (isinstance(dev[key], (int, float)) and not isinstance(dev[key], bool)), key
                for key in FLAGS:
                    assert dev[key] is None or isinstance(dev[key], bool), key
                for group in ('ecc_errors', 'retired_pages', 'remapped_rows', 'pcie'):
                    for key, value in dev[group].items():
                        if key in ('pending', 'failure'):
                            assert value is None or isinstance(value, bool), (group, key)
                        else:
                            assert value is None or (isinstance(value, int) and not isinstance(value, bool)), (group, key, value)
                assert all(isinstance(r, str) and r for r in dev['clocks_event_reasons_active'])
                _check_typed(dev, 'gpu%s' % dev['index'])
            facts = gh.build_facts({'smi': {'found': True, 'path': 'x'}, 'parsed': result, 'pci_addresses': None,
                                    'kernel': {'source': 'file', 'events': [], 'error': None}})
            assert facts['health']['status'] in gh.STATUSES
        except AssertionError as exc:
            failures.append('%s: %s' % (name, exc))
    assert not failures, '\n'.join(failures)


def test_every_other_file_is_refused_cleanly_by_the_xml_parser(real_fixtures_dir):
    for path in _all_files(real_fixtures_dir):
        if path.endswith('.xml'):
            continue
        with open(path, 'rb') as handle:
            raw = handle.read()
        with pytest.raises(GpuXmlError):
            parse_nvidia_smi_xml(raw)


def test_kernel_logs(real_fixtures_dir):
    logs = _files(os.path.join(real_fixtures_dir, '05_xid_kernel_log'), '*.log') + \
        _files(os.path.join(real_fixtures_dir, '05_xid_kernel_log'), '*.txt')
    assert logs
    for path in logs:
        with open(path, 'rb') as handle:
            raw = handle.read()
        events = parse_kernel_log(raw)
        text = raw.decode('utf-8', 'replace')
        assert len([e for e in events if e['kind'] == 'xid']) == len(re.findall(r'NVRM: Xid \(', text)), path
        assert len([e for e in events if e['kind'] == 'sxid']) == len(re.findall(r'SXid \(', text)), path
        for event in events:
            assert event['severity'] in ('info', 'warning', 'critical')
            assert event['pci'] and re.match(r'^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}$', event['pci'])
        if re.search('fallen off the bus', text):
            assert any(e['severity'] == 'critical' and (e['code'] == 79 or e['kind'] == 'fallen_off_bus')
                       for e in events), path


def test_every_file_is_safe_for_the_kernel_log_parser(real_fixtures_dir):
    for path in _all_files(real_fixtures_dir):
        with open(path, 'rb') as handle:
            parse_kernel_log(handle.read())


def _failure_texts(root):
    folder = os.path.join(root, '03_nvidia_smi_text', '_extracted_from_docs')
    return [p for p in _files(folder, '*') if 'FAILED' in os.path.basename(p) or 'unable-to-determine' in p]


def test_failure_texts_are_critical_driver_findings(real_fixtures_dir):
    texts = _failure_texts(real_fixtures_dir)
    assert len(texts) >= 6
    for path in texts:
        with open(path) as handle:
            text = handle.read()
        for rc in (0, 9, 255):
            failure = classify_failure(rc, text, '')
            assert failure and failure['severity'] == 'critical', (path, rc)
            facts = gh.build_facts({'smi': {'found': True, 'path': 'x', 'failure': failure}, 'parsed': None,
                                    'pci_addresses': [], 'kernel': None})
            assert facts['health']['status'] == 'critical'
            assert facts['health']['issues'][0]['check'] == 'driver'
