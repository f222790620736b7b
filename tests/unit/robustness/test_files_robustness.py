# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Robustness, second round (issue 27), for what reads and writes files, reports and certificates:
file_set, file_read, stack_facts (CUDA's version.json), the drift audit (fact cache, clock, pins,
ignore rules, limits), the reports (Markdown, JUnit, JSON), the CA's validity, mixed architectures
and the bounded quote of messages.

Every case has its exact expected outcome, one of

``refused``  the input is refused with this message, before anything changes;
``finding``  the input is reported (unknown with its reason, a finding, a renewal reason);
``ok``       the hostile input is handled as what it is (an apostrophe is a character);
``no-hang``  a FIFO, a device or a hung mount answers within seconds, never blocks.

The counts by outcome go into the issue note (test_case_count_by_outcome).
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import datetime
import json
import os
import re
import socket
import stat
import sys
import threading
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
from ansible_collections.gpucluster.core.plugins.filter import nvidia
from ansible_collections.gpucluster.core.plugins.filter.certificate import certificate_renewal_reason
from ansible_collections.gpucluster.core.plugins.module_utils import drift
from ansible_collections.gpucluster.core.plugins.module_utils import stack_versions as sv
from ansible_collections.gpucluster.core.plugins.module_utils.text_bounds import quote
from ansible_collections.gpucluster.core.plugins.modules import file_read, file_set, stack_facts
from ansible_collections.gpucluster.core.plugins.plugin_utils import drift_reports, reports, validate_report

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
OUTCOMES = []          # (table, case, outcome) of every case, for the count at the end
KINDS = ('refused', 'finding', 'ok', 'no-hang')


def _record(table, rows, position=-1):
    for row in rows:
        OUTCOMES.append((table, row[0], row[position]))
    return rows


def _one(table, case, kind):
    OUTCOMES.append((table, case, kind))


@pytest.fixture(scope='module', autouse=True)
def plugin_loader():
    if AnsibleCollectionConfig.collection_finder is None:
        init_plugin_loader([os.path.join(REPO, 'collections')])


def within(seconds, function, *args):
    """``function(*args)`` in a daemon thread: its result, or a test failure after ``seconds`` (a hang)."""
    box = {}

    def target():
        try:
            box['value'] = function(*args)
        except BaseException as exc:  # handed to the test below
            box['error'] = exc

    worker = threading.Thread(target=target)
    worker.daemon = True
    started = time.time()
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), 'still running after %s s: a hang' % seconds
    if 'error' in box:
        raise box['error']
    return box['value'], time.time() - started


def _fifo(path):
    os.mkfifo(str(path))
    return str(path)


def _socket(path):
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    return str(path), server


def listing(root):
    out = {}
    for base, dirs, files in os.walk(str(root)):
        for name in dirs + files:
            path = os.path.join(base, name)
            info = os.lstat(path)
            if stat.S_ISREG(info.st_mode):
                with open(path, 'rb') as handle:
                    out[path] = (handle.read(), stat.S_IMODE(info.st_mode))
            else:
                out[path] = (stat.S_IFMT(info.st_mode), stat.S_IMODE(info.st_mode))
    return out


# ====================================================================== file_set

@pytest.fixture
def run_set(run_module):
    def call(args, check=False, diff=False):
        return run_module(file_set.main, args, check=check, diff=diff)
    return call


def test_fifo_destination_is_refused_in_check_mode_and_run_without_blocking(tmp_path, run_set):
    pipe = _fifo(tmp_path / 'pipe.conf')
    for check in (True, False):
        (how, result), took = within(10, run_set, {'files': [{'dest': pipe, 'content': 'x\n'}]}, check)
        assert (how, result['msg']) == (
            'fail', 'file_set: %s is a FIFO; files[].dest must be a regular file or not exist' % pipe)
        assert stat.S_ISFIFO(os.lstat(pipe).st_mode)


_one('file_set', 'fifo-destination-check-mode', 'no-hang')
_one('file_set', 'fifo-destination-run', 'no-hang')


def test_socket_destination_is_refused(tmp_path, run_set):
    path, server = _socket(tmp_path / 'sock')
    try:
        how, result = run_set({'files': [{'dest': path, 'content': 'x'}]})
    finally:
        server.close()
    assert (how, result['msg']) == (
        'fail', 'file_set: %s is a socket; files[].dest must be a regular file or not exist' % path)


_one('file_set', 'socket-destination', 'refused')


def test_dev_zero_destination_is_refused_in_check_mode():
    # Check mode only on the real /dev/zero (it never writes); the real run is proven on a device node
    # of our own below where the system allows making one.
    def run():
        full = {'files': [{'dest': '/dev/zero', 'content': 'x'}], '_ansible_check_mode': True}
        with patch_module_args(full), mock.patch.object(basic.AnsibleModule, 'fail_json', _raise('fail')), \
                mock.patch.object(basic.AnsibleModule, 'exit_json', _raise('exit')):
            try:
                file_set.main()
            except _Ended as ended:
                return ended.args
    (how, result), took = within(10, run)
    assert (how, result['msg']) == (
        'fail', 'file_set: /dev/zero is a character device; files[].dest must be a regular file or not exist')


_one('file_set', 'dev-zero-check-mode', 'no-hang')


class _Ended(Exception):
    pass


def _raise(how):
    def end(self, **kwargs):
        raise _Ended(how, kwargs)
    return end


def test_device_destination_is_refused_in_a_real_run(tmp_path, run_set):
    device = str(tmp_path / 'zero')
    try:
        os.mknod(device, stat.S_IFCHR | 0o600, os.makedev(1, 5))
    except (OSError, AttributeError) as exc:
        pytest.skip('cannot make a device node here (%s); the check-mode case covers /dev/zero' % exc)
    (how, result), took = within(10, run_set, {'files': [{'dest': device, 'content': 'x'}]})
    assert (how, result['msg']) == (
        'fail', 'file_set: %s is a character device; files[].dest must be a regular file or not exist' % device)
    assert stat.S_ISCHR(os.lstat(device).st_mode)


_one('file_set', 'device-destination-run', 'no-hang')

VALIDATE_REFUSED = [
    ('percent-a', 'visudo -cf %a', "holds '%a': the only directive is %s (the file to check); write %% for a "
                                   "literal %; got 'visudo -cf %a'"),
    ('two-percent-s', 'diff %s %s', "must contain %s (the file to check) exactly once, found it 2 times; "
                                    "got 'diff %s %s'"),
    ('percent-d', 'check --level=%d %s', "holds '%d': the only directive is %s (the file to check); write %% for "
                                         "a literal %; got 'check --level=%d %s'"),
    ('trailing-percent', 'check %s 50%', "holds '%': the only directive is %s (the file to check); write %% for a "
                                         "literal %; got 'check %s 50%'"),
    ('no-percent-s', 'true', "must contain %s (the file to check) exactly once, found it 0 times; got 'true'"),
    ('unbalanced-quote', "check '%s", "cannot be split into a command and its arguments (No closing quotation); "
                                      "got \"check '%s\""),
    ('path-as-command', '%s --check', "must start with the checking command, not with %s; got '%s --check'"),
    ('huge-command-quoted-short', 'check %a ' + 'x' * 100000, None),
]
for _row in VALIDATE_REFUSED:
    _one('file_set', 'validate-' + _row[0], 'refused')


@pytest.mark.parametrize('case, validate, words', VALIDATE_REFUSED, ids=[c[0] for c in VALIDATE_REFUSED])
def test_a_validate_command_that_cannot_be_run_is_refused_before_anything(tmp_path, case, validate, words, run_set):
    dest = str(tmp_path / 'a.conf')
    how, result = run_set({'directories': [{'path': str(tmp_path / 'd')}],
                           'files': [{'dest': dest, 'content': 'x', 'validate': validate}]})
    assert how == 'fail' and 'Traceback' not in result['msg']
    prefix = 'file_set: the validate command of %s ' % dest
    if words is None:
        # 100,000 characters quoted in 200: the message stays short.
        assert result['msg'].startswith(prefix + "holds '%a': ")
        assert len(result['msg']) < len(prefix) + 400 and result['msg'].endswith("xxx...")
    else:
        assert result['msg'] == prefix + words
    assert os.listdir(str(tmp_path)) == []


def _checker(tmp_path):
    """A validator that records the argv it was given and checks the file it names exists."""
    seen = tmp_path / 'seen.json'
    script = tmp_path / 'check.py'
    script.write_text('import json, os, sys\njson.dump({"argv": sys.argv[1:], "exists": os.path.isfile(sys.argv[-1])}, '
                      'open(%r, "w"))\n' % str(seen))
    return seen, script


SHELL_NAMES = _record('file_set', [
    ('apostrophe', "it's.conf", 'ok'),
    ('double-quote', 'say "hi".conf', 'ok'),
    ('space', 'two words.conf', 'ok'),
    ('command-substitution', '$(touch PWNED).conf', 'ok'),
    ('backticks-and-semicolon', '`touch PWNED`;x.conf', 'ok'),
    ('backslash-and-glob', 'a\\b*?.conf', 'ok'),
    ('percent-s-in-name', '100%s.conf', 'ok'),
])


@pytest.mark.parametrize('case, name, dummy', SHELL_NAMES, ids=[c[0] for c in SHELL_NAMES])
def test_any_character_of_a_destination_reaches_the_validator_unchanged(tmp_path, case, name, dummy, run_set):
    target = tmp_path / 'etc'
    target.mkdir()
    seen, script = _checker(tmp_path)
    dest = str(target / name)
    how, result = run_set({'files': [{'dest': dest, 'content': 'x\n', 'mode': '0644',
                                      'validate': '%s %s --file=%%%% %%s' % (sys.executable, script)}]})
    assert how == 'exit' and result['changed_paths'] == [dest], result
    recorded = json.loads(seen.read_text())
    # One argument per word of the command, the temporary file's path last and whole.
    assert recorded['argv'][:1] == ['--file=%'] and recorded['exists'] is True
    assert os.path.dirname(recorded['argv'][1]) == str(target)
    assert os.path.basename(recorded['argv'][1]).startswith('.' + name[:100] + '.')
    assert sorted(os.listdir(str(target))) == [name]
    assert not (tmp_path / 'PWNED').exists() and not os.path.exists('PWNED')


def _attribute_failure(function_name, tmp_path, run_set):
    dest = tmp_path / 'a.conf'
    dest.write_text('old\n')
    real = getattr(os, function_name)

    def refuse(path, *args, **kwargs):
        name = path if isinstance(path, str) else os.fsdecode(path)
        if os.path.basename(name).startswith('.a.conf.'):
            raise PermissionError(1, 'Operation not permitted', name)
        return real(path, *args, **kwargs)
    with mock.patch.object(os, function_name, refuse):
        how, result = run_set({'files': [{'dest': str(dest), 'content': 'new\n', 'owner': '1', 'group': '1',
                                          'mode': '0640'}]})
    return how, result, dest


@pytest.mark.parametrize('function_name', ['lchown', 'chmod'])
def test_a_failed_owner_or_mode_change_leaves_no_temporary_file(tmp_path, function_name, run_set):
    how, result, dest = _attribute_failure(function_name, tmp_path, run_set)
    if function_name == 'lchown':
        # AnsibleModule ends the run itself (fail_json): the temporary file is removed on the way out.
        assert how == 'fail' and result['msg'] == 'chown failed'
    else:
        # AnsibleModule lets this OSError through: file_set names the file instead of a traceback.
        assert how == 'fail' and re.match(r"file_set: cannot give the new %s its owner, group or mode: \[Errno 1\] "
                                          r"Operation not permitted: '%s/\.a\.conf\.\w+'\Z"
                                          % (re.escape(str(dest)), re.escape(str(tmp_path))), result['msg']), result
    assert os.listdir(str(tmp_path)) == ['a.conf'] and dest.read_text() == 'old\n'


_one('file_set', 'failed-chown-no-temp', 'refused')
_one('file_set', 'failed-chmod-no-temp', 'refused')

MODE_CASES = _record('file_set', [
    ('int-644', 644, 'is the number 644, not text: YAML reads an unquoted 644 as the decimal number 644 (which '
                     'ansible.builtin.file would apply as mode 1204) and an unquoted 0644 as 420; write the mode '
                     'quoted, such as "0644"', 'refused'),
    ('int-420-yaml-octal', 420, 'is the number 420, not text: YAML reads an unquoted 644 as the decimal number 644 '
                                '(which ansible.builtin.file would apply as mode 0644) and an unquoted 0644 as 420; '
                                'write the mode quoted, such as "0644"', 'refused'),
    ('int-755', 755, 'is the number 755, not text: YAML reads an unquoted 644 as the decimal number 644 (which '
                     'ansible.builtin.file would apply as mode 1363) and an unquoted 0644 as 420; write the mode '
                     'quoted, such as "0644"', 'refused'),
    ('int-huge', 10 ** 30, 'is the number 1000000000000000000000000000000, not text: write the mode quoted, such '
                           'as "0644"', 'refused'),
    ('float', 644.0, 'is the number 644.0, not text: write the mode quoted, such as "0644"', 'refused'),
    ('bool', True, 'is True, not a mode', 'refused'),
    ('string-644', '644', None, 'ok'),
    ('string-0644', '0644', None, 'ok'),
    ('symbolic', 'u=rw,g=r,o=r', None, 'ok'),
])


@pytest.mark.parametrize('case, mode, words, kind', MODE_CASES, ids=[c[0] for c in MODE_CASES])
def test_a_mode_is_text_a_number_is_refused(tmp_path, case, mode, words, kind, run_set):
    dest = str(tmp_path / 'a.conf')
    for where in ('files', 'directories'):
        args = ({'files': [{'dest': dest, 'content': 'x', 'mode': mode}]} if where == 'files'
                else {'directories': [{'path': str(tmp_path / 'd'), 'mode': mode}]})
        how, result = run_set(args)
        if words is None:
            path = dest if where == 'files' else str(tmp_path / 'd')
            assert how == 'exit' and stat.S_IMODE(os.stat(path).st_mode) == 0o644
        else:
            path = dest if where == 'files' else str(tmp_path / 'd')
            assert (how, result['msg']) == ('fail', 'file_set: the mode of %s (%s[]) %s' % (path, where, words))
            assert not os.path.exists(path)


def _absent_overlap(tmp_path):
    conf = tmp_path / 'conf.d'
    link = tmp_path / 'alias'
    os.symlink(str(conf), str(link))
    return conf, link


ABSENT_CASES = _record('file_set', [
    ('same-file', lambda t, c, l: str(c / 'a.conf'), str, 'refused'),
    ('parent-of-file', lambda t, c, l: str(c), str, 'refused'),
    ('listed-directory', lambda t, c, l: str(t / 'made'), str, 'refused'),
    ('dot-spelling', lambda t, c, l: str(c) + '/./', str, 'refused'),
    ('through-a-link', lambda t, c, l: str(l), lambda t, c, l: str(c), 'refused'),
    ('sibling-is-fine', lambda t, c, l: str(c / 'old.conf'), None, 'ok'),
])


@pytest.mark.parametrize('case, absent, holder, kind', ABSENT_CASES, ids=[c[0] for c in ABSENT_CASES])
def test_absent_never_removes_what_the_same_call_writes(tmp_path, case, absent, holder, kind, run_set):
    conf, link = _absent_overlap(tmp_path)
    conf.mkdir()
    (conf / 'old.conf').write_text('old')
    args = {'directories': [{'path': str(conf)}, {'path': str(tmp_path / 'made')}],
            'files': [{'dest': str(conf / 'a.conf'), 'content': 'x\n'}],
            'absent': [absent(tmp_path, conf, link)]}
    before = listing(tmp_path)
    how, result = run_set(args)
    if kind == 'ok':
        assert how == 'exit' and not (conf / 'old.conf').exists() and (conf / 'a.conf').read_text() == 'x\n'
        return
    assert how == 'fail'
    assert result['msg'].startswith('file_set: absent[] lists %s, which holds ' % args['absent'][0])
    assert result['msg'].endswith('that this call writes: a path is either written or removed, never both')
    assert listing(tmp_path) == before


NUL_CASES = _record('file_set', [
    ('nul-in-dest', {'files': [{'dest': '/tmp/a\x00b', 'content': 'x'}]},
     "file_set: files[].dest holds a NUL byte, which no file name has: '/tmp/a\\x00b'", 'refused'),
    ('nul-in-directory', {'directories': [{'path': '/tmp/d\x00'}]},
     "file_set: directories[].path holds a NUL byte, which no file name has: '/tmp/d\\x00'", 'refused'),
    ('nul-in-absent', {'absent': ['/usr/local/x\x00y']},
     "file_set: absent[] holds a NUL byte, which no file name has: '/usr/local/x\\x00y'", 'refused'),
    ('unknown-owner', {'files': [{'dest': '{root}/a', 'content': 'x', 'owner': 'no-such-user-gpucluster'}]},
     "file_set: {root}/a (files[]) names the user 'no-such-user-gpucluster', which this node does not have",
     'refused'),
    ('unknown-group', {'directories': [{'path': '{root}/d', 'group': 'no-such-group-gpucluster'}]},
     "file_set: {root}/d (directories[]) names the group 'no-such-group-gpucluster', which this node does not "
     "have", 'refused'),
])


@pytest.mark.parametrize('case, args, message, kind', NUL_CASES, ids=[c[0] for c in NUL_CASES])
def test_bad_paths_and_names_are_refused_before_anything(tmp_path, case, args, message, kind, run_set):
    root = str(tmp_path)
    args = json.loads(json.dumps(args).replace('{root}', root))
    args.setdefault('directories', []).insert(0, {'path': root + '/first'})
    how, result = run_set(args)
    assert (how, result['msg']) == ('fail', message.replace('{root}', root))
    assert os.listdir(root) == []


def test_a_large_old_file_is_never_read_whole(tmp_path, run_set):
    dest = tmp_path / 'big.conf'
    dest.write_bytes(b'x' * (3 * file_set.DIFF_MAX_BYTES))
    asked = []
    real_read = os.read

    def counting(fd, size):
        asked.append(size)
        return real_read(fd, size)
    with mock.patch.object(file_set.os, 'read', counting):
        how, result = run_set({'files': [{'dest': str(dest), 'content': 'small\n'}]}, check=True, diff=True)
    assert how == 'exit' and result['changed_paths'] == [str(dest)]
    assert result['diff'][0]['before'] == '(more than 1048576 bytes, not shown)'
    assert sum(asked) == 0
    with mock.patch.object(file_set.os, 'read', counting):
        how, result = run_set({'files': [{'dest': str(dest), 'content': 'y' * (3 * file_set.DIFF_MAX_BYTES)}]},
                              check=True)
    # Same size: compared, reading at most the new content's size and one byte more.
    assert result['changed_paths'] == [str(dest)] and sum(asked) <= 3 * file_set.DIFF_MAX_BYTES + 1


_one('file_set', 'large-old-file-bounded-read', 'ok')


# ====================================================================== file_read

@pytest.fixture
def run_read(run_module):
    def call(args):
        return run_module(file_read.main, args)
    return call


READ_LIMITS = _record('file_read', [
    ('max-bytes-2-63', 2 ** 63, 'file_read: max_bytes must be a whole number of bytes from 1 to 1073741824, '
                                'got 9223372036854775808', 'refused'),
    ('max-bytes-negative', -1, 'file_read: max_bytes must be a whole number of bytes from 1 to 1073741824, got -1',
     'refused'),
    ('max-bytes-above-1gib', 2 ** 30 + 1, 'file_read: max_bytes must be a whole number of bytes from 1 to '
                                          '1073741824, got 1073741825', 'refused'),
    ('max-bytes-1gib', 2 ** 30, None, 'ok'),
])


@pytest.mark.parametrize('case, max_bytes, message, kind', READ_LIMITS, ids=[c[0] for c in READ_LIMITS])
def test_max_bytes_is_bounded(tmp_path, case, max_bytes, message, kind, run_read):
    (tmp_path / 'a').write_text('x')
    how, result = run_read({'paths': [str(tmp_path / 'a')], 'max_bytes': max_bytes})
    if message is None:
        assert how == 'exit' and result['contents'] == {str(tmp_path / 'a'): 'x'}
    else:
        assert (how, result['msg']) == ('fail', message)


def test_a_path_with_a_nul_byte_is_refused_naming_it(tmp_path, run_read):
    path = str(tmp_path / 'slurm.conf') + '\x00.bak'
    how, result = run_read({'paths': [path]})
    assert (how, result['msg']) == ('fail', 'file_read: paths[] holds a path with a NUL byte, which no file has: %r'
                                    % path)


_one('file_read', 'nul-in-path', 'refused')


def test_what_is_not_a_regular_file_is_refused_without_waiting(tmp_path, run_read):
    pipe = _fifo(tmp_path / 'pipe')
    sock, server = _socket(tmp_path / 'sock')
    try:
        for path, kind in ((pipe, 'a FIFO'), ('/dev/zero', 'a character device'), (sock, 'a socket')):
            (how, result), took = within(10, run_read, {'paths': [path]})
            assert (how, result['msg']) == ('fail', 'file_read: %s is not a regular file (it is %s)' % (path, kind))
    finally:
        server.close()


_one('file_read', 'fifo', 'no-hang')
_one('file_read', 'dev-zero', 'no-hang')
_one('file_read', 'socket', 'refused')


# ====================================================================== stack_facts: version.json

def run_stack_facts(root, args=None):
    def exit_json(self, **kwargs):
        raise _Ended('exit', kwargs)

    def fail_json(self, **kwargs):
        raise _Ended('fail', kwargs)

    with patch_module_args(dict({'package_manager': 'none'}, **(args or {}))), \
            mock.patch.object(stack_facts, 'ROOT', root), \
            mock.patch.object(basic.AnsibleModule, 'exit_json', exit_json), \
            mock.patch.object(basic.AnsibleModule, 'fail_json', fail_json):
        try:
            stack_facts.main()
        except _Ended as ended:
            return ended.args
    raise AssertionError('stack_facts ended without exit_json or fail_json')


@pytest.fixture
def cuda_root(tmp_path):
    root = tmp_path / 'root'
    (root / 'etc').mkdir(parents=True)
    (root / 'etc' / 'os-release').write_text('ID=debian\nVERSION_ID="12"\n')
    cuda = root / 'usr' / 'local' / 'cuda-12.4'
    cuda.mkdir(parents=True)
    os.symlink('cuda-12.4', str(root / 'usr' / 'local' / 'cuda'))
    return root, cuda


VJSON = '/usr/local/cuda-12.4/version.json'
VERSION_JSON_CASES = _record('stack_facts', [
    ('fifo', _fifo, VJSON + ': it is a FIFO, not a regular file', 'no-hang'),
    ('5000-brackets', lambda p: p.write_text('[' * 5000), VJSON + ': it nests deeper than 32 levels', 'finding'),
    ('deep-objects', lambda p: p.write_text('{"a":' * 40 + '1' + '}' * 40), VJSON + ': it nests deeper than 32 levels',
     'finding'),
    ('too-large', lambda p: p.write_text(' ' * 70000 + '{}'), VJSON + ': it is larger than 65536 bytes (70002 bytes)',
     'finding'),
    ('version-a-list', lambda p: p.write_text('{"cuda": {"version": ["12.4.1"]}}'),
     VJSON + ': its cuda.version is not a version string', 'finding'),
    ('version-huge', lambda p: p.write_text('{"cuda": {"version": "%s"}}' % ('1' * 1000)),
     VJSON + ': its cuda.version is not a version string', 'finding'),
    ('not-json', lambda p: p.write_text('{"cuda": '), VJSON + ': it is not JSON (Expecting value: line 1 column 10 '
                                                              '(char 9))', 'finding'),
    ('huge-int', lambda p: p.write_text('{"cuda": {"version": %s}}' % ('9' * 5000)), None, 'finding'),
    ('brackets-in-strings-are-text', lambda p: p.write_text('{"cuda": {"name": "%s", "version": "12.4.1"}}'
                                                            % ('[' * 100)), '12.4.1', 'ok'),
    ('a-directory', lambda p: p.mkdir(), VJSON + ': it is a directory, not a regular file', 'finding'),
])


@pytest.mark.parametrize('case, make, expected, kind', VERSION_JSON_CASES, ids=[c[0] for c in VERSION_JSON_CASES])
def test_cuda_version_json_of_any_kind_is_known_or_unknown_with_its_reason(cuda_root, case, make, expected, kind):
    root, cuda = cuda_root
    make(cuda / 'version.json')
    (how, result), took = within(20, run_stack_facts, str(root))
    assert how == 'exit'
    facts = result['ansible_facts']
    if kind == 'ok':
        assert facts['gpu_stack']['cuda_toolkit'] == expected
        assert facts['gpu_stack_details']['unknown'] == {}
        return
    assert facts['gpu_stack']['cuda_toolkit'] is None
    reason = facts['gpu_stack_details']['unknown']['cuda_toolkit']
    if expected is None:
        assert reason.startswith(VJSON + ': it is not JSON (Exceeds the limit (4300 digits)')
    else:
        assert reason == expected
    assert facts['gpu_stack_cuda_toolkits'] == [{'version': None, 'path': '/usr/local/cuda-12.4', 'source': None,
                                                 'unknown': reason}]
    assert took < 10


def test_a_package_gives_the_version_when_the_file_cannot(cuda_root):
    root, cuda = cuda_root
    _fifo(cuda / 'version.json')
    inputs = {'cuda_version_files': {'/usr/local/cuda-12.4': {
        'json': None, 'txt': None, 'problems': {VJSON: 'it is a FIFO, not a regular file'}}},
        'cuda_default_path': '/usr/local/cuda-12.4', 'packages': {'cuda-toolkit-12-4': '12.4.1-1'}}
    stack, toolkits, details = sv.build_stack(inputs)
    assert stack['cuda_toolkit'] == '12.4.1' and details['unknown'] == {}
    assert toolkits == [{'version': '12.4.1', 'path': '/usr/local/cuda-12.4', 'source': 'package:cuda-toolkit-12-4'}]


_one('stack_facts', 'package-covers-unreadable-file', 'ok')


def test_a_hung_mount_is_given_up_and_reported(cuda_root):
    root, cuda = cuda_root
    (cuda / 'version.json').write_text('{"cuda": {"version": "12.4.1"}}')
    (root / 'usr' / 'include').mkdir(parents=True)
    (root / 'usr' / 'include' / 'nccl.h').write_text('#define NCCL_MAJOR 2\n#define NCCL_MINOR 21\n#define NCCL_PATCH 5\n')
    release = threading.Event()
    real_isdir = os.path.isdir
    hung = str(cuda)

    def isdir(path):
        if str(path) == hung:
            release.wait(60)        # a stat on an NFS mount whose server is gone
        return real_isdir(path)
    try:
        with mock.patch.object(stack_facts, 'FILE_TIMEOUT', 0.5), mock.patch.object(stack_facts.os.path, 'isdir', isdir):
            (how, result), took = within(10, run_stack_facts, str(root))
    finally:
        release.set()
    facts = result['ansible_facts']
    assert facts['gpu_stack']['cuda_toolkit'] is None
    assert facts['gpu_stack_details']['unknown'] == {
        'cuda_toolkit': '/usr/local/cuda-12.4: no answer within 0.5 s (a hung mount?)'}
    # The rest of the node was read.
    assert facts['gpu_stack']['nccl'] == '2.21.5' and facts['gpu_stack']['os'] == 'debian 12'
    assert took < 5


_one('stack_facts', 'hung-mount', 'no-hang')

OTHER_FILES = _record('stack_facts', [
    ('os-release-fifo', 'etc/os-release', 'os', '/etc/os-release: it is a FIFO, not a regular file', 'no-hang'),
    ('nccl-header-fifo', 'usr/include/nccl.h', 'nccl', '/usr/include/nccl.h: it is a FIFO, not a regular file',
     'no-hang'),
    ('proc-version-fifo', 'proc/driver/nvidia/version', 'nvidia_driver_loaded',
     '/proc/driver/nvidia/version: it is a FIFO, not a regular file', 'no-hang'),
])


@pytest.mark.parametrize('case, relative, component, reason, kind', OTHER_FILES, ids=[c[0] for c in OTHER_FILES])
def test_any_file_read_may_be_a_fifo(cuda_root, case, relative, component, reason, kind):
    root, cuda = cuda_root
    (cuda / 'version.json').write_text('{"cuda": {"version": "12.4.1"}}')
    path = root / relative
    if path.exists():
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    _fifo(path)
    (how, result), took = within(10, run_stack_facts, str(root))
    facts = result['ansible_facts']
    assert facts['gpu_stack'][component] is None
    assert facts['gpu_stack_details']['unknown'][component] == reason
    assert facts['gpu_stack']['cuda_toolkit'] == '12.4.1'


# ====================================================================== drift audit

STACK = {'kernel': '6.1.0-25-amd64', 'nvidia_driver': '550.54.15-1', 'nvidia_driver_loaded': '550.54.15',
         'cuda_toolkit': '12.4.1', 'nccl': '2.21.5-1+cuda12.4', 'cudnn': None}


def good_facts(collected_at=None, **changes):
    stack = dict(STACK)
    stack.update(changes)
    return {'gpu_stack': stack, 'gpu_stack_details': {
        'collected_at': time.time() if collected_at is None else collected_at, 'raw': {}, 'package_manager': 'dpkg'}}


def run_action(args, hostvars=None, templar=None):
    hostvars = hostvars or {}
    task = mock.MagicMock()
    task.args = dict({'role_defaults': False, 'baseline_vars': {}}, **args)
    task.async_val = 0
    task.check_mode = False
    action = ActionModule(task, mock.MagicMock(), PlayContext(), loader=None, templar=templar,
                          shared_loader_obj=None)
    hosts = list(hostvars) if hasattr(hostvars, 'keys') else list(getattr(hostvars, 'names', []))
    return action.run(task_vars={'hostvars': hostvars, 'groups': {'all': hosts, 'ungrouped': []}})


def mine(result, host):
    return [(f['component'], f['kind'], f['message']) for f in result.get('findings', []) if f['host'] == host]


def test_a_fifo_in_the_fact_cache_is_unknown_and_never_opened(tmp_path):
    cache_dir = tmp_path / 'cache'
    cache = cache_loader.get('ansible.builtin.jsonfile', _uri=str(cache_dir), _prefix='', _timeout=0)
    for host in ('ok1', 'ok2'):
        cache.set(host, good_facts())
    before = set(os.listdir(str(cache_dir)))
    cache.set('node', good_facts())
    (name,) = set(os.listdir(str(cache_dir))) - before
    path = os.path.join(str(cache_dir), name)
    os.unlink(path)
    os.mkfifo(path)
    result, took = within(20, run_action, {'fact_cache': str(cache_dir), 'consistent': ['nccl'],
                                           'report_dir': str(tmp_path / 'r')})
    assert mine(result, 'node') == [('nccl', 'unknown', 'the fact cache entry cannot be read (left as it is): '
                                     '%s is a FIFO, not a regular file' % path)]
    assert mine(result, 'ok1') == [] and stat.S_ISFIFO(os.lstat(path).st_mode)


_one('drift', 'fifo-in-fact-cache', 'no-hang')

CLOCK_CASES = _record('drift', [
    ('one-hour-ahead', 3600, 3600, 'gpu_stack facts carry collected_at 3600 s in the future (clock ahead on the '
                                   'host or behind on the controller; more than 300 s); max_fact_age cannot be '
                                   'checked', 'finding'),
    ('a-year-ahead', 365 * 86400, 3600, 'gpu_stack facts carry collected_at 31536000 s in the future (clock ahead '
                                        'on the host or behind on the controller; more than 300 s); max_fact_age '
                                        'cannot be checked', 'finding'),
    ('small-skew-accepted', 60, 3600, None, 'ok'),
    ('no-age-check-no-finding', 3600, 0, None, 'ok'),
])


@pytest.mark.parametrize('case, ahead, max_age, reason, kind', CLOCK_CASES, ids=[c[0] for c in CLOCK_CASES])
def test_facts_from_the_future_are_never_fresh(case, ahead, max_age, reason, kind):
    now = 1767225600.0
    assert drift.fact_age_problem(now + ahead, now, max_age) == reason
    if reason:
        result = run_action({'facts': {'ok': good_facts(), 'node': good_facts(collected_at=time.time() + ahead)},
                             'consistent': ['nccl'], 'max_fact_age': max_age})
        got = mine(result, 'node')
        assert got and got[0][1] == 'unknown' and 'clock ahead' in got[0][2]


def _bomb(levels=9, width=9):
    """A YAML billion laughs as PyYAML builds it from anchors: each level one list shared ``width`` times."""
    value = ['lol'] * width
    for dummy in range(levels - 1):
        value = [value] * width
    return value


BOMB_CASES = _record('drift', [
    ('bomb-as-explicit-pin', 'explicit', 'refused'),
    ('bomb-as-host-variable', 'hostvar', 'refused'),
    ('bomb-as-host-variable-through-hostvars', 'hostvars-view', 'refused'),
])


class _HostVars(object):
    """Ansible's hostvars as the action reads them: raw_get gives a host's untemplated variables."""

    def __init__(self, hosts):
        self._hosts = hosts
        self.names = list(hosts)

    def raw_get(self, host):
        return self._hosts[host]

    def __getitem__(self, host):
        raise AssertionError('hostvars[%s] would template every variable' % host)

    def __contains__(self, host):
        return host in self._hosts


@pytest.mark.parametrize('case, where, kind', BOMB_CASES, ids=[c[0] for c in BOMB_CASES])
def test_a_yaml_alias_bomb_as_a_pin_is_refused_quickly(case, where, kind, tmp_path):
    bomb = _bomb()
    facts = {'node': good_facts()}
    if where == 'explicit':
        args, hostvars = {'facts': facts, 'baseline': {'nccl': bomb}}, {'node': {}}
        what = 'baseline[nccl]'
    else:
        args = {'facts': facts, 'baseline_vars': {'nccl': 'cuda_toolkit_nccl_version'}}
        variables = {'cuda_toolkit_nccl_version': bomb}
        hostvars = _HostVars({'node': variables}) if where == 'hostvars-view' else {'node': variables}
        what = 'cuda_toolkit_nccl_version of host node (the pin of nccl)'
    args['report_dir'] = str(tmp_path / 'r')
    result, took = within(20, run_action, args, hostvars)
    assert result['failed'] is True
    head = "drift_audit: %s=[[[[[[[[['lol', 'lol', 'lol', 'lol', 'lol'" % what
    assert result['msg'].startswith(head)
    assert result['msg'].endswith("...] has type list: pins must be strings; a pin is text: quote the version "
                                  "(for example \"12.10\")") is False
    assert '...' in result['msg'] and len(result['msg']) < 500
    assert not (tmp_path / 'r').exists() and took < 5


ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), 'ansible-playbook')


@pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason='ansible-playbook not beside this python')
def test_a_yaml_alias_bomb_in_group_vars_fails_the_offline_audit_in_seconds(tmp_path):
    """End to end: the YAML anchors of a billion laughs as cuda_toolkit_version (Ansible's own loader,
    its hostvars, playbooks/drift_audit.yml offline). Before the fix this ran for minutes."""
    import subprocess
    cache = cache_loader.get('ansible.builtin.jsonfile', _uri=str(tmp_path / 'cache'), _prefix='', _timeout=0)
    for host in ('host1', 'host2'):
        cache.set(host, good_facts())
    (tmp_path / 'inv' / 'group_vars').mkdir(parents=True)
    lines = ['---', 'a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    previous = 'a'
    for name in 'bcdefghi':
        lines.append('%s: &%s [%s]' % (name, name, ', '.join(['*' + previous] * 9)))
        previous = name
    lines.append('cuda_toolkit_version: *i')
    (tmp_path / 'inv' / 'group_vars' / 'all.yml').write_text('\n'.join(lines) + '\n')
    (tmp_path / 'inv' / 'hosts.yml').write_text('all:\n  hosts:\n    host1:\n    host2:\n')
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, 'collections'), ANSIBLE_NOCOLOR='1')
    started = time.time()
    proc = subprocess.run([ANSIBLE_PLAYBOOK, '-i', str(tmp_path / 'inv'), os.path.join(REPO, 'playbooks', 'drift_audit.yml'),
                           '-e', 'drift_audit_fact_cache=%s' % (tmp_path / 'cache'),
                           '-e', 'drift_audit_report_dir=%s' % (tmp_path / 'r')],
                          cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stdout
    out = ' '.join(proc.stdout.split()).replace("''", "'")
    assert "drift_audit: cuda_toolkit_version of host host1 (the pin of cuda_toolkit)=[[[[[[[[['lol', 'lol'" in out
    assert "'lol'... has type list: pins must be strings" in out
    assert not (tmp_path / 'r').exists()
    assert time.time() - started < 60


_one('drift', 'bomb-in-group-vars-playbook', 'refused')

IGNORE_CASES = _record('drift', [
    ('bracketed-ipv6-component', ['[::1]:nccl'], {'::1': [], '1': ['nccl'], ':': ['nccl']}, 'ok'),
    ('bracketed-ipv6-alone', ['[::1]'], {'::1': [], '1': ['nccl'], ':': ['nccl']}, 'ok'),
    ('bare-ipv6-component', ['::1:nccl'], {'::1': [], '1': ['nccl'], ':': ['nccl']}, 'ok'),
    ('other-spelling', ['[0:0:0:0:0:0:0:1]:nccl'], {'::1': [], '1': ['nccl'], ':': ['nccl']}, 'ok'),
    ('glob-still-a-glob', ['[n]ode*:nccl'], {'::1': ['nccl'], 'node1': []}, 'ok'),
])


@pytest.mark.parametrize('case, rules, expected, kind', IGNORE_CASES, ids=[c[0] for c in IGNORE_CASES])
def test_an_ipv6_literal_in_an_ignore_rule_is_literal(case, rules, expected, kind):
    hosts = sorted(expected) + ['ok1', 'ok2', 'ok3', 'ok4']
    facts = dict((h, good_facts()) for h in hosts)
    for host in expected:
        facts[host] = good_facts(nccl='2.20.3-1')
    result = run_action({'facts': facts, 'consistent': ['nccl'], 'ignore': rules, 'hosts': hosts})
    for host, components in expected.items():
        assert [c for c, kind_, msg in mine(result, host)] == components, host


LIMIT_CASES = _record('drift', [
    ('markdown-rows-negative', {'markdown_max_rows': -3}, 'drift_audit: markdown_max_rows=-3; accepted: a number '
                                                          'of rows of 0 or more', 'refused'),
    ('findings-returned-negative', {'findings_returned': -1}, 'drift_audit: findings_returned=-1; accepted: a '
                                                              'number of rows of 0 or more', 'refused'),
    ('markdown-rows-zero', {'markdown_max_rows': 0}, None, 'ok'),
])


@pytest.mark.parametrize('case, args, message, kind', LIMIT_CASES, ids=[c[0] for c in LIMIT_CASES])
def test_negative_row_limits_are_refused_not_sliced_from_the_end(case, args, message, kind, tmp_path):
    facts = {'a': good_facts(), 'b': good_facts(), 'c': good_facts(nccl='2.20.3-1')}
    result = run_action(dict(args, facts=facts, consistent=['nccl'], report_dir=str(tmp_path / 'r')))
    if message:
        assert (result['failed'], result['msg']) == (True, message)
        assert not (tmp_path / 'r').exists()
    else:
        assert result['summary']['findings'] == 1 and (tmp_path / 'r' / 'drift.md').exists()
    with pytest.raises(ValueError, match='max_rows must be a whole number of rows of 0 or more, got -1'):
        drift_reports.build_report([], result.get('summary') or drift.summarize([], [], {'checks': {}}), [], {},
                                   max_rows=-1)


def test_a_component_stack_facts_could_not_read_is_unknown_in_the_audit(tmp_path):
    node = good_facts(cuda_toolkit=None)
    node['gpu_stack_details']['unknown'] = {'cuda_toolkit': VJSON + ': it is a FIFO, not a regular file'}
    facts = {'ok1': good_facts(), 'ok2': good_facts(), 'node': node}
    result = run_action({'facts': facts, 'consistent': ['cuda_toolkit', 'nccl'], 'baseline': {'cuda_toolkit': '12.4'},
                         'report_dir': str(tmp_path)})
    assert mine(result, 'node') == [('cuda_toolkit', 'unknown', 'cuda_toolkit version unknown: ' + VJSON
                                     + ': it is a FIFO, not a regular file')]
    assert result['summary']['unknown_hosts'] == [] and result['failed'] is True
    junit = ET.parse(str(tmp_path / 'drift.junit.xml')).getroot()
    error = junit.find("testsuite[@name='node']/testcase[@name='cuda_toolkit']/error")
    assert error.get('message').startswith('unknown: cuda_toolkit version unknown: ')
    assert junit.find("testsuite[@name='node']/testcase[@name='nccl']/error") is None
    markdown = (tmp_path / 'drift.md').read_text()
    assert '| critical | node | cuda_toolkit | cuda_toolkit version unknown: ' in markdown
    # A wrongly shaped "unknown" makes the host unknown, never a traceback.
    node['gpu_stack_details']['unknown'] = ['cuda_toolkit']
    result = run_action({'facts': facts, 'consistent': ['nccl']})
    assert mine(result, 'node') == [('nccl', 'unknown', 'facts of the wrong shape: gpu_stack_details.unknown has '
                                     'type list, expected a mapping')]


_one('drift', 'component-unknown', 'finding')
_one('drift', 'unknown-wrong-shape', 'finding')


# ====================================================================== reports

HOSTILE_HOSTS = _record('reports', [
    ('raw-html', '<script>alert(1)</script>', 'ok'),
    ('img-onerror', '<img src=x onerror=alert(1)>', 'ok'),
    ('markdown-link', '[click](javascript:alert(1))', 'ok'),
    ('emphasis-and-code', '*bold* _it_ `code` ~strike~', 'ok'),
    ('bidi-override', 'node\u202e1gnp.exe', 'ok'),
    ('bidi-isolates', '\u2066node\u2069\u2067x\u2068', 'ok'),
    ('zero-width-and-bom', 'no\u200bde\ufeff', 'ok'),
    ('c1-control', 'node\x85\x9b31m', 'ok'),
    ('entity', 'a&lt;b &amp; c', 'ok'),
])
INVISIBLE = re.compile('[\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]')


@pytest.mark.parametrize('case, host, kind', HOSTILE_HOSTS, ids=[c[0] for c in HOSTILE_HOSTS])
def test_host_strings_are_inert_in_every_report(case, host, kind, tmp_path):
    facts = {'ok1': good_facts(), 'ok2': good_facts(), host: good_facts(nccl='2.20.3-1 <b>' + host)}
    result = run_action({'facts': facts, 'consistent': ['nccl'], 'report_dir': str(tmp_path),
                         'hosts': ['ok1', 'ok2', host], 'groups': {'g<i>': ['ok1', 'ok2', host]}})
    assert [c for c, k, m in mine(result, host)] == ['nccl']
    markdown = (tmp_path / 'drift.md').read_text(encoding='utf-8')
    assert '<' not in markdown and not INVISIBLE.search(markdown)
    assert '&lt;b&gt;' in markdown
    rows = [line for line in markdown.splitlines() if line.startswith('| critical |')]
    assert len(rows) == 1 and rows[0].count(' | ') == 5
    junit_text = (tmp_path / 'drift.junit.xml').read_text(encoding='utf-8')
    assert not INVISIBLE.search(junit_text)
    root = ET.fromstring(junit_text)
    failure = root.find('.//failure')
    assert '<b>' in failure.get('message')          # XML-escaped in the file, the text itself when parsed
    raw = (tmp_path / 'drift.json').read_text(encoding='utf-8')
    assert not INVISIBLE.search(raw)
    assert not INVISIBLE.search(result['msg'])


def test_json_reports_never_hold_nan_or_infinity(tmp_path):
    """The collection's report writer writes a non-finite figure as null and names where, in all three
    formats; the acceptance report, whose figures drive drains, refuses one instead (its figures are
    checked finite where they are parsed, plugins/plugin_utils/validate_report.py)."""
    document = {'busbw_gbytes': {'n1': float('inf'), 'n2': float('nan')},
                'checks': [{'name': 'nccl', 'figure': float('-inf')}]}
    report = reports.Report('t', 'failed', document, 'suite')
    text = report.render_json()

    def refuse(constant):
        raise AssertionError('invalid JSON constant %s' % constant)
    written = json.loads(text, parse_constant=refuse)
    assert written['busbw_gbytes'] == {'n1': None, 'n2': None} and written['checks'][0]['figure'] is None
    assert written['non_finite_values'] == ['busbw_gbytes.n1', 'busbw_gbytes.n2', 'checks[0].figure']
    junit = ET.fromstring(report.render_junit())
    error = junit.find("testsuite[@name='report']/testcase[@name='finite values']/error")
    assert error.get('message') == ('3 values are not finite numbers (NaN or infinite), written as null in the JSON '
                                    'report')
    assert ('**3 values are not finite numbers** (NaN or infinite; null in the JSON report): busbw_gbytes.n1, '
            'busbw_gbytes.n2, checks\\[0\\].figure.') in report.render_markdown()
    # The input is left as it was.
    assert document['busbw_gbytes']['n1'] == float('inf')
    validate = {'generated_at': '2026-12-01T00:00:00Z', 'ok': False, 'nodes': ['n1', 'n2'], 'tool': 'nccl-tests',
                'matrix': None, 'mtu': None, 'busbw_gbytes': {'n1': float('inf')},
                'checks': [{'name': 'nccl', 'node': 'fleet', 'status': 'failed', 'message': 'busbw inf'}]}
    with pytest.raises(validate_report.ReportInputError, match=r'report\.busbw_gbytes\.n1 is inf'):
        validate_report.render_json(validate)


_one('reports', 'json-infinity-nan', 'finding')


def test_a_drift_document_with_nan_is_valid_json():
    report = reports.Report('t', 'ok', {'figure': float('nan'), 'list': [1.5, float('inf')]}, 's')
    assert json.loads(report.render_json()) == {'figure': None, 'list': [1.5, None],
                                                'non_finite_values': ['figure', 'list[1]']}


_one('reports', 'document-nan', 'finding')


# ====================================================================== certificates

NOW = datetime.datetime(2026, 12, 2, 12, 0, tzinfo=datetime.timezone.utc)


@pytest.fixture(scope='module')
def keys():
    from cryptography.hazmat.primitives.asymmetric import ec
    return ec.generate_private_key(ec.SECP384R1()), ec.generate_private_key(ec.SECP384R1())


def write_pki(directory, keys, ca_days, node_days=(-1, 730)):
    """A CA valid from ``ca_days[0]`` to ``ca_days[1]`` days from NOW and node1's certificate under it."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    ca_key, key = keys
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, 'gpucluster monitoring CA')])
    ca = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(ca_key.public_key())
          .serial_number(1).not_valid_before(NOW + datetime.timedelta(days=ca_days[0]))
          .not_valid_after(NOW + datetime.timedelta(days=ca_days[1]))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True).sign(ca_key, hashes.SHA256()))
    node = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, 'node1')]))
            .issuer_name(name).public_key(key.public_key()).serial_number(2)
            .not_valid_before(NOW + datetime.timedelta(days=node_days[0]))
            .not_valid_after(NOW + datetime.timedelta(days=node_days[1]))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName('node1')]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=False)
            .sign(ca_key, hashes.SHA256()))
    for filename, data, mode in (
            ('ca.crt', ca.public_bytes(serialization.Encoding.PEM), 0o644),
            ('node1.crt', node.public_bytes(serialization.Encoding.PEM), 0o644),
            ('node1.key', key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                            serialization.NoEncryption()), 0o600)):
        path = os.path.join(str(directory), filename)
        with open(path, 'wb') as handle:
            handle.write(data)
        os.chmod(path, mode)
    return ca


def reason_for(directory, renew_days=30):
    return certificate_renewal_reason(os.path.join(str(directory), 'node1.crt'), os.path.join(str(directory), 'node1.key'),
                                      os.path.join(str(directory), 'ca.crt'), 'node1', ['DNS:node1'], renew_days, now=NOW)


CA_CASES = _record('certificate', [
    ('ca-expired-yesterday', (-3650, -1), 'the CA certificate {ca} has expired (2026-12-01 12:00 UTC): renew the CA '
                                          'first, then this node certificate', 'finding'),
    ('ca-expires-in-the-window', (-3650, 10), 'the CA certificate {ca} ends within 30 days (2026-12-12 12:00 UTC): '
                                              'renew the CA first, then this node certificate', 'finding'),
    ('ca-expires-on-the-window-edge', (-3650, 30), 'the CA certificate {ca} ends within 30 days (2027-01-01 12:00 '
                                                   'UTC): renew the CA first, then this node certificate', 'finding'),
    ('ca-not-valid-yet', (1, 3650), 'the CA certificate {ca} is not valid yet (from 2026-12-03 12:00 UTC): renew the '
                                    'CA first, then this node certificate', 'finding'),
    ('ca-current', (-10, 3650), '', 'ok'),
    ('ca-just-outside-the-window', (-10, 31), '', 'ok'),
])


@pytest.mark.parametrize('case, ca_days, expected, kind', CA_CASES, ids=[c[0] for c in CA_CASES])
def test_a_ca_that_expired_or_ends_inside_the_window_is_a_reason(tmp_path, keys, case, ca_days, expected, kind):
    write_pki(tmp_path, keys, ca_days, node_days=(-1, 700))
    assert reason_for(tmp_path) == expected.replace('{ca}', str(tmp_path / 'ca.crt'))


# ====================================================================== mixed architectures

ARCH_CASES = _record('nvidia', [
    ('foreign-only-at-version', 'x86_64', ['libnvidia-compute-550:i386 550.54.15-1 ii '], ['unsatisfied'], 'ok'),
    ('native-missing-foreign-ok', 'x86_64', ['libnvidia-compute-550:amd64  un ',
                                             'libnvidia-compute-550:i386 550.54.15-1 ii '], ['unsatisfied'], 'ok'),
    ('native-old-foreign-new', 'x86_64', ['libnvidia-compute-550:amd64 550.40.07-1 ii ',
                                          'libnvidia-compute-550:i386 550.54.15-1 ii '], ['unsatisfied'], 'ok'),
    ('native-new-foreign-old', 'x86_64', ['libnvidia-compute-550:amd64 550.54.15-1 ii ',
                                          'libnvidia-compute-550:i386 550.40.07-1 ii '], [], 'ok'),
    ('both-at-version', 'amd64', ['libnvidia-compute-550:amd64 550.54.15-1 hi ',
                                  'libnvidia-compute-550:i386 550.54.15-1 ii '], [], 'ok'),
    ('unqualified-native', 'x86_64', ['libnvidia-compute-550 550.54.15-1 ii '], [], 'ok'),
    ('arch-all', 'x86_64', ['libnvidia-compute-550:all 550.54.15-1 ii '], [], 'ok'),
    ('arm64-node', 'aarch64', ['libnvidia-compute-550:arm64 550.54.15-1 ii ',
                               'libnvidia-compute-550:amd64 550.40.07-1 ii '], [], 'ok'),
    ('arm64-node-amd64-only', 'aarch64', ['libnvidia-compute-550:amd64 550.54.15-1 ii '], ['unsatisfied'], 'ok'),
])


@pytest.mark.parametrize('case, arch, lines, expected, kind', ARCH_CASES, ids=[c[0] for c in ARCH_CASES])
def test_mixed_architectures_never_skip_apt_for_the_node_own(case, arch, lines, expected, kind):
    spec = 'libnvidia-compute-550=550.54.15-*'
    got = nvidia.FilterModule().filters()['apt_specs_unsatisfied']([spec], lines, arch)
    assert got == ([spec] if expected else [])


def entry(version, arch):
    return {'version': version, 'arch': arch}


def test_installed_matches_counts_the_node_architecture_only():
    plan = nvidia.nvidia_driver_plan('550.54.15', 'cuda_repo', 'Ubuntu', '22', 'open')
    foreign = dict((name, [entry('550.54.15-1', 'i386')]) for name in plan['packages'])
    state = nvidia.nvidia_installed_matches(foreign, plan, 'x86_64')
    assert state['current'] is False and state['missing'] == plan['packages']
    mixed = dict((name, [entry('550.40.07-1', 'i386'), entry('550.54.15-1', 'amd64')]) for name in plan['packages'])
    state = nvidia.nvidia_installed_matches(mixed, plan, 'x86_64')
    assert state['current'] is True and state['installed_version'] == '550.54.15'


_one('nvidia', 'package-facts-foreign-only', 'ok')
_one('nvidia', 'package-facts-mixed', 'ok')


def test_a_qualified_line_without_the_node_architecture_is_refused():
    with pytest.raises(Exception, match="names an architecture; pass the node's architecture"):
        nvidia.FilterModule().filters()['apt_specs_unsatisfied'](['x'], ['x:i386 1 ii '])


_one('nvidia', 'qualified-without-architecture', 'refused')


# ====================================================================== bounded quote

QUOTE_CASES = _record('quote', [
    ('20-mb-string', 'x' * (20 << 20), "'" + 'x' * 199 + '...', 'ok'),
    ('alias-bomb', _bomb(), "[[[[[[[[['lol', 'lol', 'lol', 'lol', 'lol', 'lol', 'lol', 'lol', 'lol'], ['lol', 'lol', "
                            "'lol', 'lol', 'lol', 'lol', 'lol', 'lol', 'lol'], ['lol', 'lol', 'lol', 'lol', 'lol', "
                            "'lol', 'lol', 'lol', 'lol'...", 'ok'),
    ('int-of-5000-digits', 10 ** 5000, '<an integer of 16610 bits>', 'ok'),
    ('5000-deep-list', None, '[[[[[[[[[[[[...]]]]]]]]]]]]', 'ok'),
    ('short-values-unchanged', {'a': [1, 2.5, None, True, b'x']}, "{'a': [1, 2.5, None, True, b'x']}", 'ok'),
])


@pytest.mark.parametrize('case, value, expected, kind', QUOTE_CASES, ids=[c[0] for c in QUOTE_CASES])
def test_quote_is_bounded_and_never_raises(case, value, expected, kind):
    if value is None:
        value = []
        for dummy in range(5000):
            value = [value]
    text, took = within(10, quote, value)
    assert text == expected and len(text) <= 203 and took < 2


# ====================================================================== the count for the issue note

def test_case_count_by_outcome():
    counts = dict((kind, 0) for kind in KINDS)
    for dummy_table, dummy_case, kind in OUTCOMES:
        assert kind in KINDS, kind
        counts[kind] += 1
    assert len(set((t, c) for t, c, k in OUTCOMES)) == len(OUTCOMES), 'a case is counted twice'
    assert all(counts.values()), counts
    assert len(OUTCOMES) >= 90, counts
