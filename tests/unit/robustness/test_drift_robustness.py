# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Robustness of the drift audit and stack_facts against bad, corrupt and hostile input.

Every case is a row of a table with its exact outcome, one of

``pass``     the host meets its pins and its group;
``drift``    a finding of the given kind (and, for a missed pin, whether the host is older or newer);
``unknown``  the host is reported unknown with this exact reason, and the other hosts are audited;
``error``    a documented error: the task fails with this message, before any report is written.

The audit runs in-process through the action plugin (argument validation, the fact cache read
through Ansible's own cache plugin loader, the reports on disk); stack_facts runs its real
process handling against scripts standing in for dpkg-query and rpm.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import re
import shutil
import stat
import time
import xml.etree.ElementTree as ET

import pytest
from unittest import mock

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from ansible.playbook.play_context import PlayContext
from ansible.plugins.loader import cache_loader, init_plugin_loader
from ansible.utils.collection_loader import AnsibleCollectionConfig

from ansible_collections.gpucluster.core.plugins.action.drift_audit import ActionModule
from ansible_collections.gpucluster.core.plugins.module_utils import drift
from ansible_collections.gpucluster.core.plugins.module_utils import timed_command
from ansible_collections.gpucluster.core.plugins.modules import stack_facts

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
KNOWN = ', '.join(drift.KNOWN_COMPONENTS)

STACK = {'kernel': '6.1.0-25-amd64', 'nvidia_driver': '550.54.15-1', 'nvidia_driver_loaded': '550.54.15',
         'cuda_toolkit': '12.4.1', 'nccl': '2.21.5-1+cuda12.4', 'cudnn': None}


@pytest.fixture(scope='module', autouse=True)
def plugin_loader():
    if AnsibleCollectionConfig.collection_finder is None:
        init_plugin_loader([os.path.join(REPO, 'collections')])


def good_facts(**changes):
    stack = dict(STACK)
    stack.update(changes)
    return {'gpu_stack': stack,
            'gpu_stack_details': {'collected_at': time.time(), 'raw': {}, 'package_manager': 'dpkg'}}


def run_action(args, hostvars=None):
    # The roles' default pins are tested in tests/unit/plugins/action; here only the pins a case sets.
    hostvars = hostvars or {}
    task = mock.MagicMock()
    task.args = dict({'role_defaults': False}, **args)
    task.async_val = 0
    task.check_mode = False
    action = ActionModule(task, mock.MagicMock(), PlayContext(), loader=None, templar=None,
                          shared_loader_obj=None)
    task_vars = {'hostvars': hostvars, 'groups': {'all': list(hostvars), 'ungrouped': []}}
    return action.run(task_vars=task_vars)


def outcome(result, host):
    """('pass',) / ('drift', [(component, kind, relation)]) / ('unknown', reason) / ('error', msg)."""
    if 'summary' not in result:
        return ('error', result['msg'])
    mine = [f for f in result['findings'] if f['host'] == host]
    if not mine:
        return ('pass',)
    if mine[0]['kind'] == 'unknown':
        assert all(f['kind'] == 'unknown' for f in mine)
        return ('unknown', mine[0]['message'])
    cells = []
    for finding in mine:
        relation = re.search(r'\((older|newer) than the pin\)', finding['message'])
        cells.append((finding['component'], finding['kind'], relation.group(1) if relation else None))
    return ('drift', sorted(cells))


OUTCOMES = []      # (table, case id, outcome kind) of every row, for the count at the end


def _record(table, rows):
    for row in rows:
        OUTCOMES.append((table, row[0], row[-1][0]))
    return rows


# ------------------------------------------------------------------ pins and version order

PIN_CASES = _record('pins', [
    # id, family, pin, found, raw, outcome
    ('dpkg-revision', 'dpkg', '2.21.5', '2.21.5-1+cuda12.4', None, ('pass',)),
    ('dpkg-rc-is-older', 'dpkg', '2.21.5', '2.21.5~rc1-1', None, ('drift', [('nccl', 'baseline', 'older')])),
    ('dpkg-rc-no-revision', 'dpkg', '2.21.5', '2.21.5~rc1', None, ('drift', [('nccl', 'baseline', 'older')])),
    ('dpkg-tilde-beta', 'dpkg', '2.21', '2.21~beta2-1', None, ('drift', [('nccl', 'baseline', 'older')])),
    ('dpkg-repack-ds', 'dpkg', '1.6.20', '1.6.20~ds1-1+deb12u3', None, ('pass',)),
    ('dpkg-repack-dfsg', 'dpkg', '2.21.5', '2.21.5~dfsg-2', None, ('pass',)),
    ('dpkg-longer-number', 'dpkg', '2.21.5', '2.21.50-1', None, ('drift', [('nccl', 'baseline', 'newer')])),
    ('dpkg-leading-zero', 'dpkg', '2.21.5', '2.21.05', None, ('pass',)),
    ('dpkg-letter-suffix', 'dpkg', '2.21.5', '2.21.5a', None, ('drift', [('nccl', 'baseline', 'newer')])),
    ('dpkg-older', 'dpkg', '2.21.5', '2.21.4-1', None, ('drift', [('nccl', 'baseline', 'older')])),
    ('dpkg-newer', 'dpkg', '2.21.5', '2.22.3-1', None, ('drift', [('nccl', 'baseline', 'newer')])),
    ('dpkg-epoch-pin-met', 'dpkg', '1:2.21.5', '2.21.5-1', '1:2.21.5-1', ('pass',)),
    ('dpkg-epoch-pin-lower-epoch', 'dpkg', '2:2.21.5', '2.21.5-1', '1:2.21.5-1',
     ('drift', [('nccl', 'baseline', 'older')])),
    ('dpkg-epoch-pin-no-epoch-found', 'dpkg', '1:2.21.5', '2.21.5-1', None,
     ('drift', [('nccl', 'baseline', 'older')])),
    ('dpkg-epoch-zero-explicit', 'dpkg', '0:2.21.5', '2.21.5-1', None, ('pass',)),
    ('dpkg-pin-without-epoch', 'dpkg', '27.3.1', '27.3.1-1~debian.12~bookworm', '5:27.3.1-1~debian.12~bookworm',
     ('pass',)),
    ('dpkg-epoch-is-not-a-prefix', 'dpkg', '1', '2.0-1', '1:2.0-1', ('drift', [('nccl', 'baseline', 'newer')])),
    ('rpm-caret-snapshot', 'rpm', '2.21.5', '2.21.5^20240101git1-1.el9', None, ('pass',)),
    ('rpm-tilde-rc', 'rpm', '2.21.5', '2.21.5~rc1-1.el9', None, ('drift', [('nccl', 'baseline', 'older')])),
    ('rpm-epoch-pin', 'rpm', '3:2.21.5', '2.21.5-1.el9', '3:2.21.5-1.el9', ('pass',)),
    ('rpm-epoch-higher', 'rpm', '2:2.21.5', '2.21.5-1.el9', '3:2.21.5-1.el9',
     ('drift', [('nccl', 'baseline', 'newer')])),
    ('rpm-release', 'rpm', '2.21.5-1', '2.21.5-1.el9', None, ('pass',)),
    ('rpm-release-10-is-not-1', 'rpm', '2.21.5-1', '2.21.5-10.el9', None, ('drift', [('nccl', 'baseline', 'newer')])),
    ('no-family-plain', None, '2.21', '2.21.5', None, ('pass',)),
    ('control-character', 'dpkg', '2.21.5', '2.21.5\x1b[31m', None, ('drift', [('nccl', 'baseline', 'newer')])),
    ('absent-but-pinned', 'dpkg', '2.21.5', None, None, ('drift', [('nccl', 'missing', None)])),
])


@pytest.mark.parametrize('case, family, pin, found, raw, expected', PIN_CASES, ids=[c[0] for c in PIN_CASES])
def test_pins_by_package_family(case, family, pin, found, raw, expected):
    facts = good_facts(nccl=found)
    details = facts['gpu_stack_details']
    details['package_manager'] = family or 'none'
    if raw:
        details['raw'] = {'nccl': raw}
    result = run_action({'hosts': ['node'], 'facts': {'node': facts}, 'consistent': [],
                         'baseline_vars': {}, 'baseline': {'nccl': pin}})
    assert outcome(result, 'node') == expected


# ------------------------------------------------------------------ facts of the wrong shape

def _with_stack(value):
    facts = good_facts()
    facts['gpu_stack'] = value
    return facts


def _with_nccl(value):
    facts = good_facts()
    facts['gpu_stack']['nccl'] = value
    return facts


def _with_details(**changes):
    facts = good_facts()
    facts['gpu_stack_details'].update(changes)
    return facts


WRONG = 'facts of the wrong shape: '
SHAPE_CASES = _record('shape', [
    # id, facts of the host 'node', max_fact_age, outcome
    ('stack-is-list', _with_stack(['12.4.1']), 0,
     ('unknown', WRONG + 'gpu_stack has type list, expected a mapping of component to version')),
    ('stack-is-text', _with_stack('12.4.1'), 0,
     ('unknown', WRONG + 'gpu_stack has type str, expected a mapping of component to version')),
    ('stack-is-number', _with_stack(7), 0,
     ('unknown', WRONG + 'gpu_stack has type int, expected a mapping of component to version')),
    ('stack-is-null', _with_stack(None), 0, ('unknown', 'no gpu_stack facts')),
    ('facts-are-text', 'garbage', 0, ('unknown', 'no gpu_stack facts')),
    ('value-int', _with_nccl(2), 0,
     ('unknown', WRONG + 'gpu_stack[nccl] has type int, expected a version string or null')),
    ('value-float', _with_nccl(12.1), 0,
     ('unknown', WRONG + 'gpu_stack[nccl] has type float, expected a version string or null')),
    ('value-bool', _with_nccl(True), 0,
     ('unknown', WRONG + 'gpu_stack[nccl] has type bool, expected a version string or null')),
    ('value-list', _with_nccl(['2.21.5']), 0,
     ('unknown', WRONG + 'gpu_stack[nccl] has type list, expected a version string or null')),
    ('value-dict', _with_nccl({'version': '2.21.5'}), 0,
     ('unknown', WRONG + 'gpu_stack[nccl] has type dict, expected a version string or null')),
    ('value-bytes', _with_nccl(b'2.21.5'), 0,
     ('unknown', WRONG + 'gpu_stack[nccl] is bytes, expected a version string or null')),
    ('value-surrogate', _with_nccl('2.21.5\udcff'), 0,
     ('unknown', WRONG + "gpu_stack[nccl] holds bytes that are not valid UTF-8 ('2.21.5\\udcff')")),
    ('key-not-text', _with_stack({1: '2.21.5'}), 0,
     ('unknown', WRONG + 'gpu_stack has a key 1 that is not a component name')),
    ('raw-is-list', _with_details(raw=['1:2.21.5']), 0,
     ('unknown', WRONG + 'gpu_stack_details.raw has type list, expected a mapping')),
    ('raw-value-int', _with_details(raw={'nccl': 5}), 0,
     ('unknown', WRONG + 'gpu_stack_details.raw[nccl] has type int, expected a version string or null')),
    ('collected-nan', _with_details(collected_at=float('nan')), 3600,
     ('unknown', 'gpu_stack facts carry collected_at=nan; max_fact_age cannot be checked')),
    ('collected-inf', _with_details(collected_at=float('inf')), 3600,
     ('unknown', 'gpu_stack facts carry collected_at=inf; max_fact_age cannot be checked')),
    ('collected-text', _with_details(collected_at='yesterday'), 3600,
     ('unknown', 'gpu_stack facts carry no collected_at; max_fact_age cannot be checked')),
    ('collected-bool', _with_details(collected_at=True), 3600,
     ('unknown', 'gpu_stack facts carry no collected_at; max_fact_age cannot be checked')),
    ('collected-old', _with_details(collected_at=1000.0), 3600, ('unknown', 'stale')),
    ('details-is-list', dict(good_facts(), gpu_stack_details=['x']), 0, ('pass',)),
    ('raw-null', _with_details(raw=None), 0, ('pass',)),
    ('raw-key-not-text', _with_details(raw={(1, 2): '1:2'}), 0,
     ('unknown', WRONG + 'gpu_stack_details.raw has a key (1, 2) that is not a component name')),
    ('key-surrogate', _with_stack({'nccl\udcff': '2.21.5'}), 0,
     ('unknown', WRONG + "gpu_stack has a key 'nccl\\udcff' that is not a component name")),
    ('value-null', _with_nccl(None), 0, ('drift', [('nccl', 'missing', None)])),
])


@pytest.mark.parametrize('case, host_facts, max_age, expected', SHAPE_CASES, ids=[c[0] for c in SHAPE_CASES])
def test_wrong_shape_makes_that_host_unknown(case, host_facts, max_age, expected, tmp_path):
    others = dict(('ok%d' % i, good_facts()) for i in range(3))
    others['node'] = host_facts
    result = run_action({'facts': others, 'consistent': ['nccl', 'kernel'], 'baseline_vars': {},
                         'max_fact_age': max_age, 'report_dir': str(tmp_path)})
    got = outcome(result, 'node')
    if expected == ('unknown', 'stale'):
        assert got[0] == 'unknown' and re.match(r'gpu_stack facts are \d+ s old \(max_fact_age 3600 s\)\Z', got[1])
    else:
        assert got == expected
    # The rest of the cluster is audited and passes; the reports are written and valid.
    assert [outcome(result, h) for h in ('ok0', 'ok1', 'ok2')] == [('pass',)] * 3
    assert result['summary']['hosts'] == 4
    assert json.load(open(str(tmp_path / 'drift.json'), encoding='utf-8'))['summary']['hosts'] == 4
    ET.parse(str(tmp_path / 'drift.junit.xml'))


# ------------------------------------------------------------------ corrupt fact-cache entries

def _payload(value):
    return json.dumps({'__payload__': json.dumps(value)})


CACHE_CASES = _record('cache', [
    # id, bytes written into node's cache file, outcome
    ('truncated-json', b'{"__payload__": "{\\"gpu_st',
     ('unknown', 'the fact cache entry cannot be read (left as it is): JSONDecodeError: ')),
    ('empty-file', b'', ('unknown', 'the fact cache entry cannot be read (left as it is): JSONDecodeError: ')),
    ('binary-garbage', b'\xff\xfe\x00\x81garbage',
     ('unknown', 'the fact cache entry cannot be read (left as it is): UnicodeDecodeError: ')),
    ('json-list', b'[1, 2]', ('unknown', 'the fact cache entry cannot be read (left as it is): TypeError: ')),
    ('no-payload-key', b'{"gpu_stack": {}}',
     ('unknown', "the fact cache entry cannot be read (left as it is): it lacks the key '__payload__'")),
    ('payload-not-json', b'{"__payload__": "not json"}',
     ('unknown', 'the fact cache entry cannot be read (left as it is): JSONDecodeError: ')),
    ('payload-not-text', b'{"__payload__": 5}',
     ('unknown', 'the fact cache entry cannot be read (left as it is): TypeError: ')),
    ('payload-a-list', _payload([1]).encode(),
     ('unknown', 'the fact cache entry is a list, not a mapping of facts')),
    ('payload-without-stack', _payload({'ansible_hostname': 'node'}).encode(),
     ('unknown', 'the fact cache entry holds no gpu_stack facts (stack_facts never ran)')),
    ('payload-wrong-shape', _payload({'gpu_stack': {'nccl': ['2.21.5']}}).encode(),
     ('unknown', WRONG + 'gpu_stack[nccl] has type list, expected a version string or null')),
    ('payload-surrogate', json.dumps({'__payload__': '{"gpu_stack": {"nccl": "2.21\\udcff"}}'}).encode(),
     ('unknown', 'the fact cache entry cannot be read (left as it is): UnicodeEncodeError: ')),
    ('payload-nul-in-version', _payload(good_facts(nccl='2.21.5\x00-1')).encode(),
     ('drift', [('nccl', 'majority', None)])),
])


def _cache_with_corrupt_node(cache_dir, content):
    cache = cache_loader.get('ansible.builtin.jsonfile', _uri=str(cache_dir), _prefix='', _timeout=0)
    for host in ('ok0', 'ok1', 'ok2'):
        cache.set(host, good_facts())
    before = set(os.listdir(str(cache_dir)))
    cache.set('node', good_facts())
    (name,) = set(os.listdir(str(cache_dir))) - before
    path = os.path.join(str(cache_dir), name)
    os.chmod(path, 0o644)
    with open(path, 'wb') as handle:
        handle.write(content)
    return path


@pytest.mark.parametrize('case, content, expected', CACHE_CASES, ids=[c[0] for c in CACHE_CASES])
def test_corrupt_cache_entry_is_unknown_and_left_untouched(case, content, expected, tmp_path):
    cache_dir = tmp_path / 'cache'
    path = _cache_with_corrupt_node(cache_dir, content)
    listing = sorted(os.listdir(str(cache_dir)))
    mtime = os.stat(path).st_mtime_ns
    result = run_action({'fact_cache': str(cache_dir), 'consistent': ['nccl'], 'baseline_vars': {},
                         'report_dir': str(tmp_path / 'r')})
    got = outcome(result, 'node')
    if expected[0] == 'unknown':
        assert got[0] == 'unknown' and got[1].startswith(expected[1])
        assert got[1] == expected[1] or expected[1].endswith(': ')
    else:
        assert got == expected
    # Read-only: the corrupt entry is still there, byte for byte, and nothing was added.
    with open(path, 'rb') as handle:
        assert handle.read() == content
    assert os.stat(path).st_mtime_ns == mtime
    assert sorted(os.listdir(str(cache_dir))) == listing
    assert [outcome(result, h) for h in ('ok0', 'ok1', 'ok2')] == [('pass',)] * 3
    ET.parse(str(tmp_path / 'r' / 'drift.junit.xml'))


# ------------------------------------------------------------------ baseline validation

ERROR_CASES = _record('errors', [
    # id, action arguments, host variables of 'node', outcome
    ('misspelled-component', {'baseline': {'cuda_tolkit': '12.4'}}, {},
     ('error', "drift_audit: baseline names unknown component 'cuda_tolkit'; known components: " + KNOWN)),
    ('two-unknown-components', {'baseline': {'cuda': '12.4', 'ncl': '2'}}, {},
     ('error', "drift_audit: baseline names unknown components 'cuda', 'ncl'; known components: " + KNOWN)),
    ('float-pin', {'baseline': {'cuda_toolkit': 12.10}}, {},
     ('error', 'drift_audit: baseline[cuda_toolkit]=12.1 has type float: pins must be strings; YAML read an '
               'unquoted version as a number, which loses trailing zeros (12.10 becomes 12.1): quote the '
               'version (for example "12.10")')),
    ('int-pin', {'baseline': {'nvidia_driver': 550}}, {},
     ('error', 'drift_audit: baseline[nvidia_driver]=550 has type int: pins must be strings; a pin is text: '
               'quote the version (for example "12.10")')),
    ('bool-pin', {'baseline': {'nccl': True}}, {},
     ('error', 'drift_audit: baseline[nccl]=True has type bool: pins must be strings; YAML read it as a '
               'boolean: quote the version (for example "12.10")')),
    ('list-pin', {'baseline': {'nccl': ['2.21.5']}}, {},
     ('error', "drift_audit: baseline[nccl]=['2.21.5'] has type list: pins must be strings; a pin is text: "
               'quote the version (for example "12.10")')),
    ('newline-in-pin', {'baseline': {'nccl': '2.21.5\nkernel: 6'}}, {},
     ('error', "drift_audit: baseline[nccl]='2.21.5\\nkernel: 6' holds a newline or control character; "
               'accepted: a version string such as "12.4.1" or "2:1.0-1"')),
    ('misspelled-consistent', {'consistent': ['kernal']}, {},
     ('error', "drift_audit: consistent names unknown component 'kernal'; known components: " + KNOWN)),
    ('misspelled-severity', {'severity': {'nccll': 'warning'}}, {},
     # severity may also name swarm (the swarm findings' severity).
     ('error', "drift_audit: severity names unknown component 'nccll'; known components: " + KNOWN + ', swarm')),
    ('misspelled-baseline-vars', {'baseline_vars': {'cuda': 'cuda_toolkit_version'}}, {},
     ('error', "drift_audit: baseline_vars names unknown component 'cuda'; known components: " + KNOWN)),
    ('baseline-var-not-a-name', {'baseline_vars': {'nccl': ''}}, {},
     ('error', "drift_audit: baseline_vars[nccl]=''; accepted: the name of a variable")),
    ('host-variable-float', {}, {'cuda_toolkit_version': 12.1},
     ('error', 'drift_audit: cuda_toolkit_version of host node (the pin of cuda_toolkit)=12.1 has type float: '
               'pins must be strings; YAML read an unquoted version as a number, which loses trailing zeros '
               '(12.10 becomes 12.1): quote the version (for example "12.10")')),
    ('null-pin-removes-role-pin', {'baseline': {'cuda_toolkit': None}}, {'cuda_toolkit_version': '11.8'},
     ('pass',)),
    ('empty-pin-is-no-pin', {'baseline': {'cuda_toolkit': '  '}}, {}, ('pass',)),
    ('quoted-pin', {'baseline': {'cuda_toolkit': '12.4'}}, {'cuda_toolkit_version': '12.4.1'}, ('pass',)),
])


@pytest.mark.parametrize('case, args, node_vars, expected', ERROR_CASES, ids=[c[0] for c in ERROR_CASES])
def test_baseline_is_validated_before_anything(case, args, node_vars, expected, tmp_path):
    hostvars = {'node': dict(node_vars, ansible_facts=good_facts()), 'ok': {'ansible_facts': good_facts()}}
    report_dir = tmp_path / 'r'
    result = run_action(dict(args, report_dir=str(report_dir)), hostvars)
    assert outcome(result, 'node') == expected
    if expected[0] == 'error':
        assert result['failed'] is True
        assert not report_dir.exists()          # refused before anything was written
    else:
        assert result['failed'] is False


# ------------------------------------------------------------------ reports for any content

def _junit(tmp_path):
    return ET.parse(str(tmp_path / 'drift.junit.xml')).getroot()


def _report_unwritable_parent(tmp_path):
    blocker = tmp_path / 'a-file'
    blocker.write_text('not a directory')
    return str(blocker / 'reports'), str(blocker / 'reports')


def _report_is_a_file(tmp_path):
    target = tmp_path / 'drift-report'
    target.write_text('')
    return str(target), str(target)


@pytest.mark.parametrize('case, make_dir', [
    ('under-a-file', _report_unwritable_parent),
    ('is-a-file', _report_is_a_file),
])
def test_report_failure_keeps_the_findings_and_names_the_path(case, make_dir, tmp_path):
    report_dir, failing = make_dir(tmp_path)
    facts = {'node1': good_facts(), 'node2': good_facts(), 'node3': good_facts(nccl='2.20.3-1+cuda12.4')}
    result = run_action({'facts': facts, 'consistent': ['nccl'], 'baseline_vars': {}, 'report_dir': report_dir})
    assert result['failed'] is True
    assert result['report_error'].startswith('drift_audit: the reports were not written (cannot write %s: ' % failing)
    lines = result['msg'].split('\n')
    assert lines[0] == result['report_error']
    assert 'CRITICAL node3/nccl [majority]: expected 2.21.5-1+cuda12.4, found 2.20.3-1+cuda12.4' in lines
    assert result['reports'] == {}
    assert outcome(result, 'node3') == ('drift', [('nccl', 'majority', None)])


OUTCOMES.extend([('reports', 'under-a-file', 'error'), ('reports', 'is-a-file', 'error')])


def test_report_failure_without_drift_still_fails(tmp_path):
    report_dir, dummy = _report_unwritable_parent(tmp_path)
    result = run_action({'facts': {'a': good_facts()}, 'baseline_vars': {}, 'report_dir': report_dir})
    assert result['failed'] is True and result['summary']['failed'] is False
    assert 'Not a directory' in result['report_error']


OUTCOMES.append(('reports', 'no-drift-unwritable', 'error'))

HOSTILE = [
    # id, host name, nccl value of that host
    ('escape-sequence', 'node', '2.21.5\x1b[31mRED'),
    ('nul-and-bell', 'node', '2.21\x00\x07'),
    ('noncharacter', 'node', '2.21.5\ufffe\uffff'),
    ('xml-markup', 'node', '</failure><injected/>&amp;'),
    ('control-in-host-name', 'no\x08de\x1f', '2.20'),
    ('surrogate-in-host-name', 'node\udcff', '2.20'),
    ('markdown-table-breaker', 'node', '2.20|x\n| fake | row |'),
]
OUTCOMES.extend(('reports', c[0], 'drift') for c in HOSTILE)


@pytest.mark.parametrize('case, host, value', HOSTILE, ids=[c[0] for c in HOSTILE])
def test_reports_are_valid_for_any_content(case, host, value, tmp_path):
    facts = {'ok1': good_facts(), 'ok2': good_facts(), host: good_facts(nccl=value)}
    result = run_action({'facts': facts, 'consistent': ['nccl'], 'baseline_vars': {},
                         'report_dir': str(tmp_path), 'hosts': ['ok1', 'ok2', host]})
    assert outcome(result, host) == ('drift', [('nccl', 'majority', None)])
    # JUnit: parses, and the failure shows the characters XML cannot carry as escapes.
    root = _junit(tmp_path)
    failures = root.findall('.//failure')
    assert len(failures) == 1 and int(root.get('failures')) == 1 and int(root.get('errors')) == 0
    shown = failures[0].get('message')
    assert not re.search('[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]', shown)
    if '\x1b' in value:
        assert '\\x1b[31mRED' in shown
    # JSON: strict UTF-8, no lone surrogate escapes.
    with open(str(tmp_path / 'drift.json'), 'rb') as handle:
        raw = handle.read()
    document = json.loads(raw.decode('utf-8'))
    assert '\\udcff' not in raw.decode('utf-8').replace('\\\\udcff', '')
    assert document['summary']['findings'] == 1
    # Markdown: the finding is one table row whatever the text holds.
    with open(str(tmp_path / 'drift.md'), encoding='utf-8') as handle:
        markdown = handle.read()
    rows = [line for line in markdown.splitlines() if line.startswith('| critical |')]
    assert len(rows) == 1
    assert not re.search('[\x00-\x08\x0b\x0c\x0e-\x1f]', markdown)
    # The task output is printable as well.
    assert not re.search('[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff]', result['msg'])


def test_unknown_host_is_a_junit_error_with_the_real_reason(tmp_path):
    facts = {'ok': good_facts(), 'node': _with_nccl(b'2.21.5')}
    result = run_action({'facts': facts, 'consistent': ['nccl', 'kernel'], 'baseline_vars': {},
                         'baseline': {'cuda_toolkit': '12.4.1'}, 'report_dir': str(tmp_path)})
    root = _junit(tmp_path)
    suite = root.find("testsuite[@name='node']")
    assert (suite.get('tests'), suite.get('failures'), suite.get('errors')) == ('3', '0', '3')
    assert (root.get('failures'), root.get('errors')) == ('0', '3')
    errors = suite.findall('testcase/error')
    reason = 'facts of the wrong shape: gpu_stack[nccl] is bytes, expected a version string or null'
    assert [e.get('message') for e in errors] == ['unknown: ' + reason] * 3
    assert all(e.get('type') == 'critical:unknown' for e in errors)
    assert 'absent' not in ''.join(e.get('message') + e.text for e in errors)
    assert 'pin: 12.4.1\n' in suite.find("testcase[@name='cuda_toolkit']/error").text
    assert 'pin: none\n' in suite.find("testcase[@name='nccl']/error").text
    assert root.find("testsuite[@name='ok']").find('testcase/error') is None
    assert result['summary']['unknown_hosts'] == ['node']


OUTCOMES.append(('reports', 'unknown-junit-error', 'unknown'))


def test_groups_list_every_host_including_pin_failures(tmp_path):
    facts = {'a': good_facts(), 'b': good_facts(), 'c': good_facts(nccl='2.20.3-1'),
             'd': good_facts(cuda_toolkit='12.2.0'), 'gone': None}
    result = run_action({'facts': facts, 'consistent': ['nccl', 'cuda_toolkit'], 'baseline_vars': {},
                         'baseline': {'cuda_toolkit': '12.4'}, 'groups': {'gpu': ['a', 'b', 'c', 'd', 'gone']},
                         'report_dir': str(tmp_path)})
    assert outcome(result, 'd') == ('drift', [('cuda_toolkit', 'baseline', 'older')])
    assert outcome(result, 'c') == ('drift', [('nccl', 'majority', None)])
    document = json.load(open(str(tmp_path / 'drift.json'), encoding='utf-8'))
    # d missed its pin: it is still counted in its group, once.
    assert document['groups']['gpu']['cuda_toolkit'] == {'12.4.1': 3, '12.2.0': 1}
    assert document['groups']['gpu']['nccl'] == {'2.21.5-1+cuda12.4': 3, '2.20.3-1': 1}
    assert document['group_hosts'] == {'gpu': ['a', 'b', 'c', 'd', 'gone']}
    assert [f['host'] for f in document['findings'] if f['kind'] == 'baseline'] == ['d']


OUTCOMES.append(('reports', 'groups-every-host', 'drift'))


# ------------------------------------------------------------------ stack_facts processes and bytes

class _Exit(Exception):
    pass


def _script(directory, name, body):
    path = os.path.join(directory, name)
    with open(path, 'w') as handle:
        handle.write('#!/bin/sh\n' + body)
    os.chmod(path, stat.S_IRWXU)
    return path


def run_stack_facts(args, root, bins):
    bins = dict(bins)
    bins.setdefault('timeout', shutil.which('timeout'))

    def fake_bin(self, name, *a, **kw):
        return bins.get(name)

    def exit_json(self, **kwargs):
        raise _Exit('exit', kwargs)

    def fail_json(self, **kwargs):
        raise _Exit('fail', kwargs)

    with patch_module_args(args), \
            mock.patch.object(stack_facts, 'ROOT', root), \
            mock.patch.object(basic.AnsibleModule, 'exit_json', exit_json), \
            mock.patch.object(basic.AnsibleModule, 'fail_json', fail_json), \
            mock.patch.object(basic.AnsibleModule, 'get_bin_path', fake_bin):
        try:
            stack_facts.main()
        except _Exit as exc:
            return exc.args
    raise AssertionError('stack_facts returned without exit_json/fail_json')


@pytest.fixture
def node_root(tmp_path):
    root = tmp_path / 'root'
    (root / 'var/lib/dpkg').mkdir(parents=True)
    (root / 'var/lib/dpkg/status').write_text('')
    (root / 'etc').mkdir()
    (root / 'etc/os-release').write_text('ID=debian\nVERSION_ID="12"\n')
    bindir = tmp_path / 'bin'
    bindir.mkdir()
    return str(root), str(bindir)


def _process_gone(pid):
    try:
        with open('/proc/%d/status' % pid) as handle:
            state = [line for line in handle if line.startswith('State:')][0]
    except (IOError, OSError):
        return True
    return ' Z ' in state or '(zombie)' in state


def test_hung_package_query_is_killed_with_its_group(node_root):
    root, bindir = node_root
    pidfile = os.path.join(bindir, 'child.pid')
    dpkg = _script(bindir, 'dpkg-query', 'sleep 300 &\necho $! > %s\nsleep 300\n' % pidfile)
    started = time.time()
    how, result = run_stack_facts({'command_timeout': 1}, root, {'dpkg-query': dpkg})
    elapsed = time.time() - started
    assert how == 'fail'
    assert result['msg'] == ('reading the dpkg package database timed out: dpkg-query did not finish within '
                             'command_timeout=1 s and was killed with its process group (a locked or hung '
                             'package database?)')
    assert elapsed < 10
    with open(pidfile) as handle:
        child = int(handle.read())
    deadline = time.time() + 5
    while not _process_gone(child) and time.time() < deadline:
        time.sleep(0.05)
    assert _process_gone(child), 'the background child of the hung query survived'


def test_non_utf8_output_and_files_become_replacement_characters(node_root):
    root, bindir = node_root
    dpkg = _script(bindir, 'dpkg-query',
                   "printf 'ii \\tnvidia-driver\\t550.54.15-1\\377\\nii \\tlibnccl2\\t2.21.5-1\\n'\n")
    with open(os.path.join(root, 'etc/os-release'), 'wb') as handle:
        handle.write(b'ID=deb\xffian\nVERSION_ID="12"\n')
    cuda = os.path.join(root.encode(), b'usr/local/cuda-12.\xff')
    os.makedirs(cuda)
    with open(os.path.join(cuda, b'version.json'), 'w') as handle:
        handle.write('{"cuda": {"version": "12.4.1"}}')
    how, result = run_stack_facts({}, root, {'dpkg-query': dpkg})
    assert how == 'exit'
    facts = result['ansible_facts']
    assert facts['gpu_stack']['nvidia_driver'] == '550.54.15-1\ufffd'
    assert facts['gpu_stack']['nccl'] == '2.21.5-1'
    assert facts['gpu_stack']['os'] == 'deb\ufffdian 12'
    assert facts['gpu_stack_cuda_toolkits'][0]['path'] == '/usr/local/cuda-12.\ufffd'
    # Plain UTF-8 all the way: the fact cache and the audit read it back.
    json.dumps(facts, ensure_ascii=False).encode('utf-8')
    assert drift.check_facts(facts['gpu_stack'], facts['gpu_stack_details']['raw']) is None


def test_failing_query_with_binary_stderr(node_root):
    root, bindir = node_root
    dpkg = _script(bindir, 'dpkg-query', "printf 'dpkg-query: error: \\377 bad\\n' >&2\nexit 2\n")
    how, result = run_stack_facts({}, root, {'dpkg-query': dpkg})
    assert (how, result['msg']) == ('fail', 'reading the dpkg package database failed (rc=2): '
                                            'dpkg-query: error: \ufffd bad')


def test_query_that_cannot_start(node_root):
    root, bindir = node_root
    rpm = os.path.join(bindir, 'rpm')
    with open(rpm, 'w') as handle:
        handle.write('not a program')
    os.chmod(rpm, 0o644)
    how, result = run_stack_facts({'package_manager': 'rpm'}, root, {'rpm': rpm})
    # coreutils timeout reports "Permission denied" and exits 126.
    assert how == 'fail'
    assert result['msg'].startswith('reading the rpm package database failed (rc=126): ')
    assert 'Permission denied' in result['msg']


def test_hung_query_without_coreutils_timeout_is_killed(node_root):
    root, bindir = node_root
    dpkg = _script(bindir, 'dpkg-query', 'exec sleep 300\n')
    started = time.time()
    with mock.patch.object(timed_command, 'KILL_AFTER', 0):
        how, result = run_stack_facts({'command_timeout': 1}, root, {'dpkg-query': dpkg, 'timeout': None})
    assert how == 'fail' and result['msg'].startswith('reading the dpkg package database timed out: ')
    assert time.time() - started < 10


@pytest.mark.parametrize('value', [0, -5])
def test_command_timeout_must_be_positive(node_root, value):
    root, bindir = node_root
    how, result = run_stack_facts({'command_timeout': value}, root, {})
    assert (how, result['msg']) == ('fail', 'command_timeout=%d; accepted: a number of seconds of at least 1' % value)


OUTCOMES.extend([('stack_facts', 'hung-query', 'error'), ('stack_facts', 'non-utf8', 'pass'),
                 ('stack_facts', 'hung-query-no-coreutils', 'error'),
                 ('stack_facts', 'binary-stderr', 'error'), ('stack_facts', 'cannot-start', 'error'),
                 ('stack_facts', 'timeout-0', 'error'), ('stack_facts', 'timeout-negative', 'error')])


def test_case_count_by_outcome():
    """At least 45 cases, and every outcome is exercised (the counts go into the issue note)."""
    counts = {}
    for dummy_table, dummy_case, kind in OUTCOMES:
        counts[kind] = counts.get(kind, 0) + 1
    assert len(OUTCOMES) >= 45
    assert set(counts) == {'pass', 'drift', 'unknown', 'error'}
