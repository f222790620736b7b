# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's one report writer (plugin_utils/reports.py), shared by drift audit and validate."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import xml.etree.ElementTree as ET

import pytest

from ansible_collections.gpucluster.core.plugins.plugin_utils import reports


def _sample():
    report = reports.Report('Audit <x>', 'FAILED', {'ok': False, 'text': u'bad \ud800 surrogate'}, 'suite & co')
    cases = report.suite('host1', 'audit.host1')
    cases.append(reports.case('kernel', 'passed'))
    cases.append(reports.case('cuda', 'passed', body='12.4 & more'))
    cases.append(reports.case('driver', 'failed', 'expected <550>', 'long\nbody "quoted"', 'critical:baseline'))
    cases.append(reports.case('nccl', 'error', u'no facts \x01'))
    cases.append(reports.case('ib', 'skipped', 'no HCA'))
    report.suite('host2').append(reports.case('kernel', 'passed'))
    report.paragraph('2 hosts')
    report.heading('Findings')
    report.bullets(['one\nline', u'bell \x07'])
    report.table(['host', 'value'], [['a|b', 'c\\d'], ['x\ny', None]])
    return report


def test_junit_counts_statuses_and_escapes():
    root = ET.fromstring(_sample().render_junit())
    assert (root.get('name'), root.get('tests'), root.get('failures'), root.get('errors'), root.get('skipped')) == (
        'suite & co', '6', '1', '1', '1')
    host1 = root.find("testsuite[@name='host1']")
    assert (host1.get('tests'), host1.get('failures'), host1.get('errors'), host1.get('skipped')) == ('5', '1', '1', '1')
    failure = host1.find("testcase[@name='driver']/failure")
    assert failure.get('message') == 'expected <550>' and failure.get('type') == 'critical:baseline'
    assert failure.text == 'long\nbody "quoted"'
    assert host1.find("testcase[@name='cuda']/system-out").text == '12.4 & more'
    assert host1.find("testcase[@name='kernel']").find('system-out') is None
    # A control character XML forbids is shown escaped, not dropped or left to break the file.
    assert host1.find("testcase[@name='nccl']/error").get('message') == 'no facts \\x01'
    assert host1.find("testcase[@name='ib']/skipped").get('message') == 'no HCA'
    assert all(c.get('classname') == 'audit.host1' for c in host1)
    assert root.find("testsuite[@name='host2']/testcase").get('classname') == 'host2'


def test_markdown_blocks_and_escaping():
    text = _sample().render_markdown()
    # Raw HTML in a title (or any text) is shown as entities, never rendered.
    assert text.startswith('# Audit &lt;x&gt;: FAILED\n\n2 hosts\n\n## Findings\n\n- one line\n- bell \\x07\n')
    assert '| host | value |\n|---|---|\n| a\\|b | c\\\\d |\n| x y |  |\n' in text


def test_json_has_no_lone_surrogates():
    text = _sample().render_json()
    assert json.loads(text) == {'ok': False, 'text': 'bad \\ud800 surrogate'}
    text.encode('utf-8')


def test_bad_status_and_format_are_refused():
    with pytest.raises(ValueError, match='status must be one of passed, failed, error, skipped'):
        reports.case('x', 'ok')
    with pytest.raises(ValueError, match='report format must be one of'):
        _sample().render('html')


def test_write_is_atomic_and_reports_every_failure(tmp_path):
    report = _sample()
    names = {'json': 'r.json', 'junit': 'r.xml', 'markdown': 'r.md'}
    written = report.write(str(tmp_path / 'new'), names, formats=['json', 'markdown'], prefix='.r-')
    assert sorted(os.listdir(str(tmp_path / 'new'))) == ['r.json', 'r.md']
    assert set(written) == {'json', 'markdown'}
    # A directory where a report should go: that one fails, named, the others are written.
    os.mkdir(str(tmp_path / 'new' / 'r.xml'))
    with pytest.raises(reports.ReportError) as info:
        report.write(str(tmp_path / 'new'), names, prefix='.r-')
    assert list(info.value.failures) == [str(tmp_path / 'new' / 'r.xml')]
    assert set(info.value.written) == {'json', 'markdown'}
    assert [n for n in os.listdir(str(tmp_path / 'new')) if n.startswith('.r-')] == []
    blocker = tmp_path / 'file'
    blocker.write_text(u'x')
    with pytest.raises(reports.ReportError, match='cannot write'):
        report.write(str(blocker / 'sub'), names)
