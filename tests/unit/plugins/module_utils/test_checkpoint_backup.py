# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import re

import pytest

from ansible_collections.gpucluster.core.plugins.module_utils import checkpoint_backup as cb

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
              'cache_dir': '/var/cache/c', 'textfile': '/var/lib/prometheus/node-exporter/x.prom', 'env_file': ''}
    config.update(overrides)
    return config


def test_marker_rule_backs_up_marked_and_untouched_only(tmp_path):
    root = str(tmp_path)
    _write(os.path.join(root, 'alice', 'run1', 'step100', 'model.pt'), mtime=NOW - 600)
    _write(os.path.join(root, 'alice', 'run1', 'step100', '.checkpoint-complete'), b'', mtime=NOW - 500)
    # half-written: no marker yet
    _write(os.path.join(root, 'alice', 'run2', 'step5', 'model.pt'))
    # rewritten after its marker: a writer is at it again
    _write(os.path.join(root, 'bob', 'ckpt', 'model.pt'), mtime=NOW - 10)
    _write(os.path.join(root, 'bob', 'ckpt', '.checkpoint-complete'), b'', mtime=NOW - 100)
    # not a user name: ignored
    _write(os.path.join(root, 'Not A User', 'x', '.checkpoint-complete'))
    found = cb.scan_checkpoints(root, '.checkpoint-complete', 0, NOW)
    assert _states(found, root) == {
        'alice/run1/step100': 'complete',
        'alice/run2': 'incomplete',
        'bob/ckpt': 'incomplete',
    }
    reasons = dict((os.path.relpath(item['path'], root), item['reason']) for item in found)
    assert reasons['bob/ckpt'] == 'modified after its marker'
    assert reasons['alice/run2'] == 'no marker'
    assert [item['user'] for item in found] == ['alice', 'alice', 'bob']


def test_marker_rule_with_min_age_and_depth(tmp_path):
    root = str(tmp_path)
    _write(os.path.join(root, 'alice', 'young', 'model.pt'), mtime=NOW - 30)
    _write(os.path.join(root, 'alice', 'young', '.done'), b'', mtime=NOW - 20)
    _write(os.path.join(root, 'alice', 'a', 'b', 'c', 'deep', '.done'), b'', mtime=NOW - 999)
    found = _states(cb.scan_checkpoints(root, '.done', 60, NOW, max_depth=3), root)
    assert found == {'alice/young': 'incomplete', 'alice/a': 'incomplete'}
    found = _states(cb.scan_checkpoints(root, '.done', 10, NOW, max_depth=4), root)
    assert found == {'alice/young': 'complete', 'alice/a/b/c/deep': 'complete'}


def test_age_rule(tmp_path):
    root = str(tmp_path)
    _write(os.path.join(root, 'alice', 'old', 'model.pt'), mtime=NOW - 7200)
    os.utime(os.path.join(root, 'alice', 'old'), (NOW - 7200, NOW - 7200))
    _write(os.path.join(root, 'alice', 'busy', 'model.pt'), mtime=NOW - 7200)
    _write(os.path.join(root, 'alice', 'busy', 'sub', 'shard1.pt'), mtime=NOW - 5)
    os.utime(os.path.join(root, 'alice', 'busy'), (NOW - 7200, NOW - 7200))
    _write(os.path.join(root, 'alice', 'single.pt'), mtime=NOW - 4000)
    found = _states(cb.scan_checkpoints(root, '', 3600, NOW), root)
    assert found == {'alice/old': 'complete', 'alice/busy': 'incomplete', 'alice/single.pt': 'complete'}


def test_missing_source_fails_instead_of_backing_up_nothing(tmp_path):
    with pytest.raises(cb.ConfigError, match='not there'):
        cb.scan_checkpoints(str(tmp_path / 'absent'), '.done', 0, NOW)


def test_files_from_raw_lists_complete_only():
    items = [{'path': '/s/a/x', 'state': 'complete'}, {'path': '/s/a/y', 'state': 'incomplete'},
             {'path': '/s/b/z z', 'state': 'complete'}]
    assert cb.files_from_raw(items) == b'/s/a/x\0/s/b/z z\0'


def test_restic_command_lines():
    config = _config()
    base = ['/usr/bin/restic', '-o', 'sftp.command=ssh x', '--cache-dir', '/var/cache/c']
    assert cb.backup_argv(config, '/tmp/list') == base + [
        'backup', '--files-from-raw', '/tmp/list', '--tag', 'gpucluster-checkpoints', '--host', 'node1']
    assert cb.forget_argv(config) == base + [
        'forget', '--tag', 'gpucluster-checkpoints', '--host', 'node1', '--group-by', 'host,tags',
        '--keep-last', '3', '--keep-daily', '7', '--prune']
    assert '--keep-daily' not in cb.forget_argv(_config(keep_daily=0))
    assert cb.snapshots_argv(config, latest=True)[-2:] == ['--latest', '1']
    assert cb.check_argv(_config(check_read_data_subset='5%'))[-3:] == ['check', '--read-data-subset', '5%']
    assert cb.check_argv(config)[-1] == 'check'
    assert all('password' not in part for part in cb.backup_argv(config, '/l') + cb.forget_argv(config))


def test_retention_of_zero_is_refused():
    with pytest.raises(cb.ConfigError, match='retention of zero'):
        cb.forget_argv(_config(keep_last=0))
    assert any('keep_last' in message for message in cb.config_errors(_config(keep_last=0)))


def test_config_errors():
    assert cb.config_errors(_config()) == []
    errors = cb.config_errors(_config(source='shared', marker='a/b', host='', restic_options='-o x'))
    assert any(message.startswith('source must be an absolute path') for message in errors)
    assert any(message.startswith('marker must be a file name') for message in errors)
    assert any(message.startswith('host must be') for message in errors)
    assert any(message.startswith('restic_options must be a list') for message in errors)
    assert cb.config_errors(_config(marker='', min_age_seconds=0)) == [
        'marker is empty and min_age_seconds is 0: no rule says a checkpoint is complete']
    assert cb.config_errors(_config(marker='', min_age_seconds=60)) == []
    assert any('min_age_seconds' in message for message in cb.config_errors(_config(min_age_seconds=True)))


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


def test_state_and_metrics_keep_the_last_success():
    checkpoints = [{'state': 'complete'}, {'state': 'complete'}, {'state': 'incomplete'}]
    state = cb.update_state({}, 'backup', True, NOW, duration=12.5, snapshots=2, checkpoints=checkpoints)
    state = cb.update_state(state, 'backup', False, NOW + 3600, duration=1.25, checkpoints=None)
    samples = _samples(cb.render_metrics(state))
    assert samples == {
        'gpucluster_checkpoint_backup_success': '0',
        'gpucluster_checkpoint_backup_last_run_timestamp_seconds': str(int(NOW) + 3600),
        'gpucluster_checkpoint_backup_last_success_timestamp_seconds': str(int(NOW)),
        'gpucluster_checkpoint_backup_duration_seconds': '1.25',
        'gpucluster_checkpoint_backup_snapshots': '2',
        'gpucluster_checkpoint_backup_checkpoints{state="complete"}': '2',
        'gpucluster_checkpoint_backup_checkpoints{state="incomplete"}': '1',
    }
    state = cb.update_state(state, 'check', False, NOW + 7200)
    samples = _samples(cb.render_metrics(state))
    assert samples['gpucluster_checkpoint_backup_check_success'] == '0'
    assert samples['gpucluster_checkpoint_backup_check_last_success_timestamp_seconds'] == '0'
    assert samples['gpucluster_checkpoint_backup_success'] == '0'
    assert cb.render_metrics({}) == ''
    with pytest.raises(ValueError):
        cb.update_state({}, 'prune', True, NOW)


def test_every_metric_is_declared():
    state = cb.update_state({}, 'backup', True, NOW, duration=1, snapshots=1, checkpoints=[{'state': 'complete'}])
    state = cb.update_state(state, 'check', True, NOW)
    names = set(key.split('{')[0] for key in _samples(cb.render_metrics(state)))
    assert names == set(cb.METRIC_NAMES)


def test_restore_errors():
    ok = cb.restore_errors('alice', 'latest', '/restore/a', '/shared/checkpoints', False, None)
    assert ok == []
    assert cb.restore_errors('alice', '0123abcd', '/restore/a', '/shared/checkpoints', False, []) == []
    errors = cb.restore_errors('', 'HEAD', 'restore', '/shared/checkpoints', False, None)
    assert [message.split(' ')[0] for message in errors] == ['user', 'snapshot', 'target']
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
