# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import re

import pytest

from ansible_collections.gpucluster.core.plugins.module_utils import checkpoint_backup as cb
from ansible_collections.gpucluster.core.plugins.module_utils import checkpoint_scan as cs

NOW = 1767607200.0
SAMPLE = re.compile(r'^([a-z_]+)(\{[^}]*\})? (-?[0-9.e+]+)$')


def _write(path, data=b'x', mtime=NOW - 3600):
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        os.makedirs(directory)
    with open(path, 'wb') as handle:
        handle.write(data)
    os.utime(path, (mtime, mtime))


def _states(found, root):
    return dict((os.path.relpath(item['path'], root), item['state']) for item in found)


def _config(**overrides):
    config = {'source': '/shared/checkpoints', 'marker': '.checkpoint-complete', 'min_age_seconds': 0,
              'max_depth': 3, 'repository': 'sftp:backup@node2:/srv/restic', 'password_file': '/etc/pw',
              'restic': '/usr/bin/restic', 'restic_options': ['-o', 'sftp.command=ssh x'], 'host': 'node1',
              'tag': 'gpucluster-checkpoints', 'keep_last': 3, 'keep_daily': 7, 'state_file': '/var/lib/s.json',
              'cache_dir': '/var/cache/c', 'textfile': '/var/lib/prometheus/node-exporter/x.prom', 'env_file': '',
              'conventions': list(cs.DEFAULT_CONVENTIONS), 'stable_seconds': 60}
    config.update(overrides)
    return config


# The completeness rules moved to checkpoint_scan.py (tests/unit/plugins/module_utils/test_checkpoint_scan.py).
# Three expectations of the tests that stood here were the bugs of issue 27/32 and changed: a directory whose
# name is not a POSIX user name ("Not A User", JDoe, jdoe@corp) was ignored silently (now a user's, backed up);
# an empty marker made with `touch` counted as complete (now incomplete, marker-empty: the marker's content
# lists the files); completeness was decided from timestamps alone (a shard written after the marker within
# the same second counted as complete).


def test_backup_paths_and_files_from_raw():
    items = [{'rel': 'a/x', 'state': 'complete', 'extra': []}, {'rel': 'a/y', 'state': 'incomplete', 'extra': []},
             {'rel': 'b/ds/t2', 'state': 'complete', 'extra': ['b/ds/latest']},
             {'rel': 'b/z z', 'state': 'complete'}, {'rel': 'c', 'state': 'skipped', 'extra': []}]
    paths = cb.backup_paths(items, '/s')
    assert paths == ['/s/a/x', '/s/b/ds/latest', '/s/b/ds/t2', '/s/b/z z']
    assert cb.files_from_raw(paths) == b'/s/a/x\0/s/b/ds/latest\0/s/b/ds/t2\0/s/b/z z\0'
    odd = b'/s/u/\xff\nname'.decode('utf-8', 'surrogateescape')
    assert cb.files_from_raw([odd]) == b'/s/u/\xff\nname\0'


def test_restic_command_lines():
    config = _config()
    base = ['/usr/bin/restic', '-o', 'sftp.command=ssh x', '--cache-dir', '/var/cache/c']
    backup = base + ['backup', '--json', '--files-from-raw', '/tmp/list', '--tag', 'gpucluster-checkpoints',
                     '--host', 'node1']
    # Debian 12's restic 0.14: the parent is given (the newest snapshot of this host and tag)
    assert cb.backup_argv(config, '/tmp/list', cb.restic_features((0, 14, 0)), 'abcdef12') == \
        backup + ['--parent', 'abcdef12']
    assert cb.backup_argv(config, '/tmp/list', cb.restic_features((0, 14, 0))) == backup
    assert cb.backup_argv(config, '/tmp/list', cb.restic_features((0, 16, 4)), 'abcdef12') == \
        backup + ['--group-by', 'host,tags']
    # Debian 13's restic 0.18
    assert cb.backup_argv(config, '/tmp/list', cb.restic_features((0, 18, 0)), 'abcdef12') == \
        backup + ['--group-by', 'host,tags', '--skip-if-unchanged']
    assert cb.forget_argv(config) == base + [
        'forget', '--tag', 'gpucluster-checkpoints', '--host', 'node1', '--group-by', 'host,tags',
        '--keep-last', '3', '--keep-daily', '7', '--prune']
    assert '--keep-daily' not in cb.forget_argv(_config(keep_daily=0))
    assert cb.snapshots_argv(config, latest=True)[-2:] == ['--latest', '1']
    assert cb.check_argv(_config(check_read_data_subset='5%'))[-3:] == ['check', '--read-data-subset', '5%']
    assert cb.check_argv(config)[-1] == 'check'
    assert all('password' not in part for part in cb.backup_argv(config, '/l', {}) + cb.forget_argv(config))


def test_retention_of_zero_is_refused():
    with pytest.raises(cb.ConfigError, match='retention of zero'):
        cb.forget_argv(_config(keep_last=0))
    assert any('keep_last' in message for message in cb.config_errors(_config(keep_last=0)))


def test_config_errors():
    assert cb.config_errors(_config()) == []
    errors = cb.config_errors(_config(source='shared', marker='a/b', host='', restic_options='-o x'))
    assert any(message.startswith('source must be an absolute path') for message in errors)
    assert any(message.startswith('marker must be a printable file name') for message in errors)
    assert any(message.startswith('host must be') for message in errors)
    assert any(message.startswith('restic_options must be a list') for message in errors)
    assert cb.config_errors(_config(marker='')) == ['conventions has marker but marker (the file name) is empty']
    assert cb.config_errors(_config(marker='', conventions=['dcp'])) == []
    assert cb.config_errors(_config(conventions=['age'])) == [
        'conventions has age but min_age_seconds is 0: no age says a checkpoint is complete']
    assert cb.config_errors(_config(conventions=['age'], min_age_seconds=60)) == []
    assert any('min_age_seconds' in message for message in cb.config_errors(_config(min_age_seconds=True)))
    for bad in ([], 'marker', ['marker', 'marker'], ['nfs'], None):
        assert any(message.startswith('conventions must be a non-empty list')
                   for message in cb.config_errors(_config(conventions=bad))), bad
    for bad in (0, 3601, 1.5, '60'):
        assert any(message.startswith('stable_seconds must be an integer from 1 to 3600')
                   for message in cb.config_errors(_config(stable_seconds=bad))), bad
    assert cb.config_errors(['not', 'a', 'dict']) == ['the configuration must be a JSON object (got list)']


def test_conventions_are_the_roles_choices():
    """One list of convention names: the program's, and the role's argument spec and default."""
    import yaml
    role = os.path.join(os.path.dirname(cb.__file__), '..', '..', 'roles', 'checkpoint_backup')
    with open(os.path.join(role, 'meta', 'argument_specs.yml')) as handle:
        spec = yaml.safe_load(handle)['argument_specs']['main']['options']['checkpoint_backup_conventions']
    with open(os.path.join(role, 'defaults', 'main.yml')) as handle:
        default = yaml.safe_load(handle)['checkpoint_backup_conventions']
    assert spec['choices'] == list(cs.CONVENTIONS)
    assert spec['default'] == default == list(cs.DEFAULT_CONVENTIONS)


@pytest.mark.parametrize('text, version', [
    ('restic 0.14.0 compiled with go1.19.8 on linux/amd64\n', (0, 14, 0)),
    ('restic 0.18.0 compiled with go1.24.1 on linux/arm64', (0, 18, 0)),
    ('restic 0.17.3 (v0.17.3-0-g1234) compiled with go1.23.3 on linux/amd64', (0, 17, 3)),
    ('restic development version', None), ('', None), (None, None),
])
def test_parse_restic_version(text, version):
    assert cb.parse_restic_version(text) == version


def test_restic_features_by_version():
    assert cb.restic_features((0, 14, 0)) == cb.restic_features(None) == dict(
        (name, False) for name, _since, _what in cb.RESTIC_FEATURES)
    assert cb.restic_features((0, 17, 0)) == {'backup_group_by': True, 'skip_if_unchanged': True,
                                              'exit_codes': True, 'exit_wrong_password': False,
                                              'ignores_vanished': False}
    assert all(cb.restic_features((0, 18, 0)).values())


def test_newest_snapshot():
    snapshots = [{'id': 'a' * 64, 'time': '2026-01-05T10:00:00.5+01:00'},
                 {'id': 'b' * 64, 'time': '2026-01-05T09:30:00.123456789Z'},
                 {'id': 'c' * 64, 'time': '2026-01-05T09:00:00Z'},
                 {'id': 'not hex', 'time': '2027-01-01T00:00:00Z'}, 'junk']
    assert cb.newest_snapshot(snapshots) == 'b' * 64
    assert cb.newest_snapshot([]) is None and cb.newest_snapshot(None) is None


@pytest.mark.parametrize('rc, items, gone, stderr, features, status, fragment', [
    (0, [], [], '', {}, 'ok', 'restic backup ok'),
    (3, ['/s/a/x.pt'], ['/s/a/x.pt'], '', {}, 'warning', 'removed while restic read them'),
    (3, [], [], '', {}, 'warning', '(not named by restic)'),
    (3, ['/s/a/x.pt', '/s/b/y.pt'], ['/s/a/x.pt'], '', {}, 'failed', 'still there, first /s/b/y.pt'),
    (3, ['/s/a/x\ny'], [], '', {}, 'failed', 'first /s/a/x\\x0ay'),
    (1, [], [], 'Fatal: all target directories/files do not exist', {}, 'warning', 'removed before restic'),
    (1, [], [], 'Fatal: unable to open repository', {}, 'failed', 'exit 1'),
    (10, [], [], '', cb.restic_features((0, 17, 0)), 'failed', 'exit 10: the repository does not exist'),
    (12, [], [], '', cb.restic_features((0, 17, 0)), 'failed', 'restic backup failed (exit 12)'),
    (12, [], [], '', cb.restic_features((0, 18, 0)), 'failed', 'exit 12: wrong repository password'),
    (10, [], [], '', cb.restic_features((0, 14, 0)), 'failed', 'restic backup failed (exit 10)'),
])
def test_backup_outcome(rc, items, gone, stderr, features, status, fragment):
    got_status, message = cb.backup_outcome(rc, items, gone, stderr, features)
    assert got_status == status and fragment in message and '\n' not in message


def test_backup_summary_and_error_lines():
    summary = cb.parse_json_line('{"message_type":"summary","files_new":0,"files_changed":0,"files_unmodified":1000,'
                                 '"data_added":0,"total_files_processed":1000,"snapshot_id":"0123abcd",'
                                 '"dirs_new":-1,"total_duration":1.5}')
    assert cb.backup_summary(summary) == {'files_new': 0, 'files_changed': 0, 'files_unmodified': 1000,
                                          'data_added': 0, 'total_files_processed': 1000,
                                          'snapshot_id': '0123abcd'}
    error = cb.parse_json_line('{"message_type":"error","error":{},"during":"archival","item":"/s/a/b.pt"}')
    assert cb.backup_error_item(error) == '/s/a/b.pt'
    assert cb.backup_error_item({'message_type': 'status', 'item': 'x'}) == ''
    assert cb.parse_json_line('Warning: /s/x does not exist, skipping') is None
    assert cb.parse_json_line('{broken') is None and cb.parse_json_line('[1]') is None


def _samples(text):
    samples = {}
    for line in text.splitlines():
        if line.startswith('#'):
            assert re.match(r'^# (HELP|TYPE) gpucluster_checkpoint_backup_[a-z_]+ ', line), line
            continue
        match = SAMPLE.match(line)
        assert match, 'not a valid sample line: %r' % line
        samples[match.group(1) + (match.group(2) or '')] = match.group(3)
    return samples


def _scan_result():
    items = [{'rel': 'alice/a', 'state': 'complete', 'reason': 'marker'},
             {'rel': 'alice/b', 'state': 'complete', 'reason': 'dcp-metadata'},
             {'rel': 'bob/c', 'state': 'incomplete', 'reason': 'dcp-no-metadata'},
             {'rel': '.snap', 'state': 'skipped', 'reason': 'hidden'},
             {'rel': 'eve', 'state': 'skipped', 'reason': 'permission-denied'}]
    users = {'alice': {'newest_ns': 1767600000 * 10 ** 9 + 5, 'complete_ns': 1767600000 * 10 ** 9,
                       'incomplete_since_ns': 0},
             'bob\n"x"': {'newest_ns': 1767603600 * 10 ** 9, 'complete_ns': 0,
                          'incomplete_since_ns': 1767500000 * 10 ** 9}}
    return {'items': items, 'users': users}


def test_state_and_metrics_keep_the_last_success():
    summary = {'files_new': 3, 'files_changed': 0, 'files_unmodified': 997, 'data_added': 4096, 'snapshot_id': ''}
    state = cb.update_state({}, 'backup', True, NOW, duration=12.5, snapshots=2, scan=_scan_result(),
                            summary=summary, vanished=1, fingerprints={'alice/a': 'f1'})
    samples = _samples(cb.render_metrics(state))
    assert samples == {
        'gpucluster_checkpoint_backup_success': '1',
        'gpucluster_checkpoint_backup_last_run_timestamp_seconds': str(int(NOW)),
        'gpucluster_checkpoint_backup_last_success_timestamp_seconds': str(int(NOW)),
        'gpucluster_checkpoint_backup_duration_seconds': '12.5',
        'gpucluster_checkpoint_backup_snapshots': '2',
        'gpucluster_checkpoint_backup_checkpoints{state="complete"}': '2',
        'gpucluster_checkpoint_backup_checkpoints{state="incomplete"}': '1',
        'gpucluster_checkpoint_backup_seen': '5',
        'gpucluster_checkpoint_backup_decisions{state="complete",reason="marker"}': '1',
        'gpucluster_checkpoint_backup_decisions{state="complete",reason="dcp-metadata"}': '1',
        'gpucluster_checkpoint_backup_decisions{state="incomplete",reason="dcp-no-metadata"}': '1',
        'gpucluster_checkpoint_backup_decisions{state="skipped",reason="hidden"}': '1',
        'gpucluster_checkpoint_backup_decisions{state="skipped",reason="permission-denied"}': '1',
        'gpucluster_checkpoint_backup_user_last_change_timestamp_seconds{user="alice"}': '1767600000',
        'gpucluster_checkpoint_backup_user_last_change_timestamp_seconds{user="bob\\\\x0a\\"x\\""}': '1767603600',
        'gpucluster_checkpoint_backup_user_last_complete_timestamp_seconds{user="alice"}': '1767600000',
        'gpucluster_checkpoint_backup_user_last_complete_timestamp_seconds{user="bob\\\\x0a\\"x\\""}': '0',
        'gpucluster_checkpoint_backup_user_incomplete_since_timestamp_seconds{user="alice"}': '0',
        'gpucluster_checkpoint_backup_user_incomplete_since_timestamp_seconds{user="bob\\\\x0a\\"x\\""}':
            '1767500000',
        'gpucluster_checkpoint_backup_files{kind="new"}': '3',
        'gpucluster_checkpoint_backup_files{kind="changed"}': '0',
        'gpucluster_checkpoint_backup_files{kind="unmodified"}': '997',
        'gpucluster_checkpoint_backup_data_added_bytes': '4096',
        'gpucluster_checkpoint_backup_vanished_files': '1',
    }
    assert state['backup']['fingerprints'] == {'alice/a': 'f1'}
    # A run that could not scan (share not mounted): failure, the last success kept, no stale decisions left;
    # the fingerprints of what was backed up stay for the next run.
    state = cb.update_state(state, 'backup', False, NOW + 3600, duration=1.25)
    samples = _samples(cb.render_metrics(state))
    assert samples == {
        'gpucluster_checkpoint_backup_success': '0',
        'gpucluster_checkpoint_backup_last_run_timestamp_seconds': str(int(NOW) + 3600),
        'gpucluster_checkpoint_backup_last_success_timestamp_seconds': str(int(NOW)),
        'gpucluster_checkpoint_backup_duration_seconds': '1.25',
        'gpucluster_checkpoint_backup_snapshots': '2',
    }
    assert state['backup']['fingerprints'] == {'alice/a': 'f1'}
    state = cb.update_state(state, 'check', False, NOW + 7200)
    state = cb.update_state(state, 'forget', True, NOW + 7300)
    samples = _samples(cb.render_metrics(state))
    assert samples['gpucluster_checkpoint_backup_check_success'] == '0'
    assert samples['gpucluster_checkpoint_backup_check_last_success_timestamp_seconds'] == '0'
    assert samples['gpucluster_checkpoint_backup_forget_success'] == '1'
    assert samples['gpucluster_checkpoint_backup_forget_last_success_timestamp_seconds'] == str(int(NOW) + 7300)
    assert samples['gpucluster_checkpoint_backup_success'] == '0'
    assert cb.render_metrics({}) == ''
    with pytest.raises(ValueError):
        cb.update_state({}, 'prune', True, NOW)


def test_every_metric_is_declared():
    state = cb.update_state({}, 'backup', True, NOW, duration=1, snapshots=1, scan=_scan_result(),
                            summary={'files_new': 1, 'files_changed': 0, 'files_unmodified': 0, 'data_added': 1},
                            vanished=0)
    state = cb.update_state(state, 'check', True, NOW)
    state = cb.update_state(state, 'forget', True, NOW)
    names = set(key.split('{')[0] for key in _samples(cb.render_metrics(state)))
    assert names == set(cb.METRIC_NAMES)


def test_restore_errors():
    ok = cb.restore_errors('alice', 'latest', '/restore/a', '/shared/checkpoints', False, None)
    assert ok == []
    assert cb.restore_errors('alice', '0123abcd', '/restore/a', '/shared/checkpoints', False, []) == []
    errors = cb.restore_errors('', 'HEAD', 'restore', '/shared/checkpoints', False, None)
    assert [message.split(' ')[0] for message in errors] == ['user', 'snapshot', 'target']
    for user in ('JDoe', 'jdoe@corp', '1user'):
        assert cb.restore_errors(user, 'latest', '/r', '/shared/checkpoints', False, None) == [], user
    for user in ('../alice', 'a\nb', '.hidden'):
        assert cb.restore_errors(user, 'latest', '/r', '/shared/checkpoints', False, None)[0].startswith('user')
    assert 'not empty' in cb.restore_errors('alice', 'latest', '/r', '/shared/checkpoints', False, ['x'])[0]
    assert cb.restore_errors('alice', 'latest', '/r', '/shared/checkpoints', True, ['x']) == []
    for target in ('/shared/checkpoints', '/shared/checkpoints/alice/r', '/shared', '/'):
        assert 'outside the checkpoint directory' in cb.restore_errors(
            'alice', 'latest', target, '/shared/checkpoints', False, None)[0], target


def test_snapshot_files_and_compare(tmp_path):
    lines = [json.dumps({'struct_type': 'snapshot', 'id': 'abc'}),
             json.dumps({'struct_type': 'node', 'type': 'dir', 'path': '/s/alice/r1'}),
             json.dumps({'struct_type': 'node', 'type': 'file', 'path': '/s/alice/r1/m.pt', 'size': 3}),
             json.dumps({'struct_type': 'node', 'type': 'file', 'path': '/s/alicex/r1/m.pt', 'size': 3}),
             json.dumps({'struct_type': 'node', 'type': 'file', 'path': '/s/bob/r/m.pt', 'size': 9}), '']
    expected = cb.snapshot_files(lines, '/s/alice')
    assert expected == {'/s/alice/r1/m.pt': 3}
    target = str(tmp_path)
    assert cb.compare_restore(expected, target) == ['%s/s/alice/r1/m.pt: missing' % target]
    _write(os.path.join(target, 's', 'alice', 'r1', 'm.pt'), b'abcd')
    assert cb.compare_restore(expected, target) == ['%s/s/alice/r1/m.pt: 4 bytes, the snapshot has 3' % target]
    _write(os.path.join(target, 's', 'alice', 'r1', 'm.pt'), b'abc')
    assert cb.compare_restore(expected, target) == []
