# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""file_set: one module call writes a set of files and directories, validated as a set."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import stat
import sys

import pytest
from unittest import mock

from ansible_collections.gpucluster.core.plugins.modules import file_set


@pytest.fixture
def run(run_module):
    def call(args, check=False, diff=False):
        return run_module(file_set.main, args, check=check, diff=diff)
    return call


def mode_of(path):
    return stat.S_IMODE(os.stat(str(path)).st_mode)


def listing(root):
    out = {}
    for base, dirs, files in os.walk(str(root)):
        for name in dirs + files:
            path = os.path.join(base, name)
            if os.path.isdir(path):
                out[path] = ('dir', mode_of(path))
            else:
                with open(path, 'rb') as handle:
                    out[path] = (handle.read(), mode_of(path))
    return out


def a_set(root, first='one\n', second='two\n'):
    return {
        'directories': [{'path': str(root / 'conf.d'), 'mode': '0750'}],
        'files': [
            {'dest': str(root / 'conf.d' / 'a.conf'), 'content': first, 'mode': '0644'},
            {'dest': str(root / 'b.conf'), 'content': second, 'mode': '0600'},
        ],
    }


def test_creates_the_set_then_a_rerun_changes_nothing(tmp_path, run):
    how, result = run(a_set(tmp_path))
    assert how == 'exit' and result['changed'] is True
    assert result['changed_paths'] == [str(tmp_path / 'conf.d'), str(tmp_path / 'conf.d' / 'a.conf'),
                                       str(tmp_path / 'b.conf')]
    assert (tmp_path / 'conf.d' / 'a.conf').read_text() == 'one\n'
    assert mode_of(tmp_path / 'conf.d') == 0o750
    assert mode_of(tmp_path / 'conf.d' / 'a.conf') == 0o644
    assert mode_of(tmp_path / 'b.conf') == 0o600
    before = listing(tmp_path)
    how, result = run(a_set(tmp_path))
    assert how == 'exit' and result['changed'] is False and result['changed_paths'] == []
    assert listing(tmp_path) == before


def test_one_changed_file_is_the_only_change(tmp_path, run):
    run(a_set(tmp_path))
    inode = os.stat(str(tmp_path / 'conf.d' / 'a.conf')).st_ino
    how, result = run(a_set(tmp_path, second='two, edited\n'))
    assert result['changed_paths'] == [str(tmp_path / 'b.conf')]
    assert (tmp_path / 'b.conf').read_text() == 'two, edited\n'
    assert mode_of(tmp_path / 'b.conf') == 0o600
    # The unchanged file was not rewritten.
    assert os.stat(str(tmp_path / 'conf.d' / 'a.conf')).st_ino == inode
    assert sorted(os.listdir(str(tmp_path))) == ['b.conf', 'conf.d']


def test_a_mode_change_alone_is_reported_and_applied(tmp_path, run):
    run(a_set(tmp_path))
    os.chmod(str(tmp_path / 'b.conf'), 0o644)
    os.chmod(str(tmp_path / 'conf.d'), 0o755)
    how, result = run(a_set(tmp_path), diff=True)
    assert result['changed_paths'] == [str(tmp_path / 'conf.d'), str(tmp_path / 'b.conf')]
    assert mode_of(tmp_path / 'b.conf') == 0o600 and mode_of(tmp_path / 'conf.d') == 0o750
    modes = [(d['before'].get('mode'), d['after'].get('mode')) for d in result['diff']]
    assert ('0755', '0750') in modes and ('0644', '0600') in modes


def test_check_mode_writes_nothing_and_shows_the_diff(tmp_path, run):
    run(a_set(tmp_path))
    before = listing(tmp_path)
    how, result = run(a_set(tmp_path, first='one\nmore\n'), check=True, diff=True)
    assert how == 'exit' and result['changed'] is True
    assert result['changed_paths'] == [str(tmp_path / 'conf.d' / 'a.conf')]
    assert result['diff'] == [{'before_header': str(tmp_path / 'conf.d' / 'a.conf'),
                               'after_header': str(tmp_path / 'conf.d' / 'a.conf'),
                               'before': 'one\n', 'after': 'one\nmore\n'}]
    assert listing(tmp_path) == before


def test_check_mode_on_an_empty_node_lists_everything_and_creates_nothing(tmp_path, run):
    how, result = run(a_set(tmp_path), check=True)
    assert how == 'exit' and len(result['changed_paths']) == 3
    assert os.listdir(str(tmp_path)) == []


def test_no_diff_unless_asked(tmp_path, run):
    how, result = run(a_set(tmp_path))
    assert 'diff' not in result


def test_a_failed_validation_leaves_the_whole_set_as_it_was(tmp_path, run):
    run(a_set(tmp_path))
    before = listing(tmp_path)
    args = a_set(tmp_path, first='one, edited\n', second='broken\n')
    checker = tmp_path / 'check.py'
    checker.write_text('import sys\nsys.exit("bad line 1" if open(sys.argv[1]).read().startswith("broken") else 0)\n')
    args['files'][0]['validate'] = '%s %s %%s' % (sys.executable, checker)
    args['files'][1]['validate'] = '%s %s %%s' % (sys.executable, checker)
    before[str(checker)] = (checker.read_bytes(), mode_of(checker))
    how, result = run(args)
    assert how == 'fail'
    assert str(tmp_path / 'b.conf') in result['msg'] and 'bad line 1' in result['msg']
    assert result['failed_path'] == str(tmp_path / 'b.conf')
    # Neither the file that passed its check nor the one that failed was replaced; no temporary is left.
    assert listing(tmp_path) == before


def test_the_validator_sees_the_new_content_with_the_final_mode(tmp_path, run):
    seen = tmp_path / 'seen'
    checker = tmp_path / 'check.py'
    checker.write_text('import os, stat, sys\n'
                       'open(%r, "w").write(open(sys.argv[1]).read() + oct(stat.S_IMODE(os.stat(sys.argv[1]).st_mode)))\n'
                       % str(seen))
    args = {'files': [{'dest': str(tmp_path / 'c.conf'), 'content': 'new\n', 'mode': '0640',
                       'validate': '%s %s %%s' % (sys.executable, checker)}]}
    how, result = run(args)
    assert how == 'exit' and result['changed'] is True
    assert seen.read_text() == 'new\n0o640'


def test_an_existing_files_attributes_are_kept_when_not_given(tmp_path, run):
    target = tmp_path / 'keep.conf'
    target.write_text('old\n')
    os.chmod(str(target), 0o604)
    how, result = run({'files': [{'dest': str(target), 'content': 'new\n'}]})
    assert result['changed_paths'] == [str(target)]
    assert target.read_text() == 'new\n' and mode_of(target) == 0o604


@pytest.mark.parametrize('args, words', [
    ({'files': [{'dest': 'relative.conf', 'content': 'x'}]}, 'must be absolute'),
    ({'directories': [{'path': 'rel/dir'}]}, 'must be absolute'),
    ({'files': [{'dest': '{root}/a', 'content': 'x'}, {'dest': '{root}/./a', 'content': 'y'}]}, 'listed twice'),
    ({'files': [{'dest': '{root}/sub', 'content': 'x'}]}, 'is a directory'),
    ({'files': [{'dest': '{root}/missing/a', 'content': 'x'}]}, 'does not exist and is not listed'),
    ({'files': [{'dest': '{root}/a', 'content': 'x', 'validate': 'true'}]}, 'must contain %s'),
    ({'directories': [{'path': '{root}/plain'}]}, 'exists as something else'),
])
def test_bad_input_fails_before_anything_changes(tmp_path, args, words, run):
    (tmp_path / 'sub').mkdir()
    (tmp_path / 'plain').write_text('x')
    before = listing(tmp_path)
    for key in ('files', 'directories'):
        for spec in args.get(key, []):
            for field in ('dest', 'path'):
                if field in spec:
                    spec[field] = spec[field].replace('{root}', str(tmp_path))
    # A valid directory first: bad input must stop the run before it is created.
    args.setdefault('directories', []).insert(0, {'path': str(tmp_path / 'new-dir')})
    how, result = run(args)
    assert how == 'fail' and words in result['msg'], result
    assert listing(tmp_path) == before


def test_a_link_is_not_followed(tmp_path, run):
    (tmp_path / 'real').write_text('x')
    os.symlink(str(tmp_path / 'real'), str(tmp_path / 'link'))
    how, result = run({'files': [{'dest': str(tmp_path / 'link'), 'content': 'y'}]})
    assert how == 'fail' and 'symbolic link' in result['msg']
    assert (tmp_path / 'real').read_text() == 'x'


def test_binary_content_is_not_shown_in_the_diff(tmp_path, run):
    how, result = run({'files': [{'dest': str(tmp_path / 'b'), 'content': 'a\x00b', 'mode': '0644'}]}, diff=True)
    assert result['diff'][0]['after'] == '(binary, changed)'


def test_absent_paths_are_removed_after_the_files_and_reported(tmp_path, run):
    # Removal is real here, so every path handed to it must lie under tmp_path.
    real_rmtree, real_unlink = file_set.shutil.rmtree, file_set.os.unlink

    root = os.path.realpath(str(tmp_path)) + os.sep

    def inside(path):
        assert os.path.realpath(str(path)).startswith(root), path
        return path
    with mock.patch.object(file_set.shutil, 'rmtree', lambda p, *a, **k: real_rmtree(inside(p), *a, **k)), \
            mock.patch.object(file_set.os, 'unlink',
                              # rmtree's own calls name an entry relative to a directory it already checked
                              lambda p, *a, **k: real_unlink(p if 'dir_fd' in k else inside(p), *a, **k)):
        _absent_removal(tmp_path, run)


def _absent_removal(tmp_path, run):
    old = tmp_path / 'old_package'
    old.mkdir()
    (old / 'module.py').write_text('x')
    (tmp_path / 'old.conf').write_text('x')
    args = a_set(tmp_path)
    args['absent'] = [str(old), str(tmp_path / 'old.conf'), str(tmp_path / 'never-there')]
    how, result = run(args, check=True)
    assert result['changed_paths'][-2:] == [str(old), str(tmp_path / 'old.conf')]
    assert old.is_dir()
    how, result = run(args)
    assert result['changed_paths'][-2:] == [str(old), str(tmp_path / 'old.conf')]
    assert not old.exists() and not (tmp_path / 'old.conf').exists()
    how, result = run(args)
    assert result['changed'] is False


@pytest.mark.parametrize('path', ['/', '//', '/.', '/etc', '//usr/', '/tmp/..', 'relative/dir', ''])
def test_absent_refuses_root_top_level_and_relative_paths(tmp_path, path, run):
    # Nothing here may ever delete: the module's removal calls are replaced by ones that fail the test.
    def refuse(*args, **kwargs):
        raise AssertionError('file_set tried to remove %r' % (args,))
    with mock.patch.object(file_set.shutil, 'rmtree', refuse), mock.patch.object(file_set.os, 'unlink', refuse):
        how, result = run({'absent': [path], 'directories': [{'path': str(tmp_path / 'd')}]})
    assert how == 'fail' and 'absent[]' in result['msg'], result
    assert not (tmp_path / 'd').exists()


def test_a_link_that_resolves_to_a_top_level_directory_is_refused(tmp_path, run):
    link = tmp_path / 'sub' / 'to-usr'
    link.parent.mkdir()
    os.symlink('/usr', str(link))

    def refuse(*args, **kwargs):
        raise AssertionError('file_set tried to remove %r' % (args,))
    with mock.patch.object(file_set.shutil, 'rmtree', refuse), mock.patch.object(file_set.os, 'unlink', refuse):
        how, result = run({'absent': [str(link)]})
    assert how == 'fail' and 'absent[]' in result['msg']


def test_check_mode_accepts_a_directory_an_earlier_task_would_create(tmp_path, run):
    args = {'files': [{'dest': str(tmp_path / 'not-yet' / 'a.conf'), 'content': 'x\n'}]}
    how, result = run(args, check=True)
    assert how == 'exit' and result['changed_paths'] == [str(tmp_path / 'not-yet' / 'a.conf')]
    how, result = run(args)
    assert how == 'fail' and 'does not exist and is not listed' in result['msg']
    assert os.listdir(str(tmp_path)) == []
