# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Decisions of the checkpoint backup program: which checkpoints are complete, the restic command lines,
the state kept between runs, the node_exporter textfile metrics and the check of a restore.

Shipped to nodes verbatim inside the gpucluster-checkpoint-backup archive (roles/checkpoint_backup) and
unit-tested in tests/unit/plugins/module_utils/test_checkpoint_backup.py. Standard library only; the only
side effect is reading the checkpoint tree (scan_checkpoints).

A checkpoint is COMPLETE, and only then backed up:
  - marker mode (marker set): a directory below SOURCE/<user>/ holding the marker file, with no file in it
    modified after the marker (a writer that touched it again is still writing), and, when min_age_seconds
    is set, a marker at least that old;
  - age mode (marker empty): every entry of SOURCE/<user>/ in which nothing was modified for min_age_seconds.
Everything else is INCOMPLETE and is never handed to restic.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import re
import stat

from .prom_text import render_samples

# Names a user directory may have (the Slurm/POSIX portable user name); anything else under SOURCE is not a
# user's and is left out (and counted as skipped).
USER_NAME = re.compile(r'^[a-z_][a-z0-9_.-]{0,31}$')
SNAPSHOT_ID = re.compile(r'^(latest|[0-9a-f]{8,64})$')
STATES = ('complete', 'incomplete')
BACKUP_EXIT_OK = 0

METRICS = (
    ('gpucluster_checkpoint_backup_success', 'gauge',
     'Last checkpoint backup run succeeded (1) or failed (0).'),
    ('gpucluster_checkpoint_backup_last_run_timestamp_seconds', 'gauge',
     'Unix time the last checkpoint backup run ended.'),
    ('gpucluster_checkpoint_backup_last_success_timestamp_seconds', 'gauge',
     'Unix time the last successful checkpoint backup ended (0: never).'),
    ('gpucluster_checkpoint_backup_duration_seconds', 'gauge',
     'Seconds the last checkpoint backup run took.'),
    ('gpucluster_checkpoint_backup_snapshots', 'gauge',
     'Checkpoint snapshots of this host in the repository after the last successful run.'),
    ('gpucluster_checkpoint_backup_checkpoints', 'gauge',
     'Checkpoints found by the last backup run, by state (only complete ones are backed up).'),
    ('gpucluster_checkpoint_backup_check_success', 'gauge',
     'Last restic check of the checkpoint repository succeeded (1) or failed (0).'),
    ('gpucluster_checkpoint_backup_check_last_run_timestamp_seconds', 'gauge',
     'Unix time the last restic check of the checkpoint repository ended.'),
    ('gpucluster_checkpoint_backup_check_last_success_timestamp_seconds', 'gauge',
     'Unix time the last successful restic check ended (0: never).'),
)
METRIC_NAMES = tuple(name for name, _kind, _help in METRICS)


class ConfigError(Exception):
    pass


def config_errors(config):
    """Messages for a program configuration that cannot be used (empty list: usable)."""
    errors = []

    def absolute(key, required=True):
        value = config.get(key)
        if value in (None, '') and not required:
            return
        if not isinstance(value, str) or not os.path.isabs(value) or '\n' in value:
            errors.append('%s must be an absolute path (got %r)' % (key, value))

    for key in ('source', 'password_file', 'restic', 'state_file', 'cache_dir'):
        absolute(key)
    for key in ('textfile', 'env_file'):
        absolute(key, required=False)
    if not isinstance(config.get('repository'), str) or not config.get('repository'):
        errors.append('repository must be a non-empty string (got %r)' % (config.get('repository'),))
    marker = config.get('marker', '')
    if not isinstance(marker, str) or '/' in marker or marker in ('.', '..'):
        errors.append('marker must be a file name without "/" or empty (got %r)' % (marker,))
    for key, low in (('min_age_seconds', 0), ('keep_last', 1), ('keep_daily', 0), ('max_depth', 1)):
        value = config.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            errors.append('%s must be an integer >= %d (got %r)' % (key, low, value))
    if not errors and not marker and config['min_age_seconds'] == 0:
        errors.append('marker is empty and min_age_seconds is 0: no rule says a checkpoint is complete')
    for key in ('host', 'tag'):
        value = config.get(key)
        if not isinstance(value, str) or not re.match(r'^[A-Za-z0-9_.:=-]+$', value):
            errors.append('%s must be a non-empty word of letters, digits and _.:=- (got %r)' % (key, value))
    options = config.get('restic_options', [])
    if not isinstance(options, list) or not all(isinstance(item, str) for item in options):
        errors.append('restic_options must be a list of strings (got %r)' % (options,))
    return errors


def _newest_mtime(path, entry_stat):
    """Newest modification time of PATH and everything below it (symlinks are not followed)."""
    newest = entry_stat.st_mtime
    if not stat.S_ISDIR(entry_stat.st_mode):
        return newest
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            try:
                newest = max(newest, os.lstat(os.path.join(dirpath, name)).st_mtime)
            except OSError:
                # Removed while we looked: the tree is changing, which makes it new.
                return float('inf')
    return newest


def _newest_except(path, skip):
    """Newest modification time of the files and directories below PATH, SKIP (a full path) left out."""
    newest = None
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            if full == skip:
                continue
            try:
                mtime = os.lstat(full).st_mtime
            except OSError:
                return float('inf')
            newest = mtime if newest is None else max(newest, mtime)
    return newest


def _marker_checkpoints(user_dir, marker, min_age, now, max_depth):
    """(path, state, reason) for each directory below USER_DIR (depth 1..max_depth) holding MARKER, and
    each top-level entry without one anywhere below it (incomplete: never marked)."""
    found = []
    marked_tops = set()
    base_depth = user_dir.rstrip(os.sep).count(os.sep)
    for dirpath, dirnames, filenames in os.walk(user_dir):
        depth = dirpath.rstrip(os.sep).count(os.sep) - base_depth
        dirnames.sort()
        if depth >= 1 and marker in filenames:
            marker_path = os.path.join(dirpath, marker)
            try:
                marker_mtime = os.lstat(marker_path).st_mtime
            except OSError:
                continue
            newest = _newest_except(dirpath, marker_path)
            if newest is not None and newest > marker_mtime:
                found.append((dirpath, 'incomplete', 'modified after its marker'))
            elif min_age and now - marker_mtime < min_age:
                found.append((dirpath, 'incomplete', 'marker younger than %d s' % min_age))
            else:
                found.append((dirpath, 'complete', 'marker'))
            marked_tops.add(os.path.relpath(dirpath, user_dir).split(os.sep)[0])
            dirnames[:] = []  # a checkpoint is backed up whole: nothing below it is a checkpoint of its own
        elif depth >= max_depth:
            dirnames[:] = []
    for name in sorted(os.listdir(user_dir)):
        if name not in marked_tops and name != marker:
            found.append((os.path.join(user_dir, name), 'incomplete', 'no marker'))
    return found


def _age_checkpoints(user_dir, min_age, now):
    found = []
    for name in sorted(os.listdir(user_dir)):
        path = os.path.join(user_dir, name)
        try:
            entry_stat = os.lstat(path)
        except OSError:
            continue
        newest = _newest_mtime(path, entry_stat)
        if now - newest >= min_age:
            found.append((path, 'complete', 'unchanged for %d s' % min_age))
        else:
            found.append((path, 'incomplete', 'modified in the last %d s' % min_age))
    return found


def scan_checkpoints(source, marker, min_age_seconds, now, max_depth=3):
    """Every checkpoint below SOURCE/<user>/ as a dict: path, user, state (complete/incomplete), reason.
    Sorted by path. A SOURCE that is not a directory raises ConfigError (an unmounted share must fail the
    run, not look like "nothing to back up")."""
    if not os.path.isdir(source):
        raise ConfigError('the checkpoint directory %s is not there (is the share mounted?)' % source)
    result = []
    for user in sorted(os.listdir(source)):
        user_dir = os.path.join(source, user)
        if not USER_NAME.match(user) or not os.path.isdir(user_dir) or os.path.islink(user_dir):
            continue
        if marker:
            entries = _marker_checkpoints(user_dir, marker, min_age_seconds, now, max_depth)
        else:
            entries = _age_checkpoints(user_dir, min_age_seconds, now)
        for path, state, reason in entries:
            result.append({'path': path, 'user': user, 'state': state, 'reason': reason})
    return sorted(result, key=lambda item: item['path'])


def files_from_raw(checkpoints):
    """The NUL-separated list restic's --files-from-raw reads: the complete checkpoints only."""
    paths = [item['path'] for item in checkpoints if item['state'] == 'complete']
    return b''.join(path.encode('utf-8', 'surrogateescape') + b'\0' for path in paths)


def base_argv(config):
    return [config['restic']] + list(config.get('restic_options', [])) + ['--cache-dir', config['cache_dir']]


def backup_argv(config, list_file):
    return base_argv(config) + ['backup', '--files-from-raw', list_file, '--tag', config['tag'],
                                '--host', config['host']]


def forget_argv(config):
    """Retention per host and tag: the snapshot's path list changes with every new checkpoint, so grouping
    by paths (restic's default) would keep every snapshot forever."""
    if config['keep_last'] < 1:
        raise ConfigError('keep_last must be at least 1: a retention of zero would forget every snapshot')
    argv = base_argv(config) + ['forget', '--tag', config['tag'], '--host', config['host'],
                                '--group-by', 'host,tags', '--keep-last', str(config['keep_last'])]
    if config['keep_daily'] > 0:
        argv += ['--keep-daily', str(config['keep_daily'])]
    return argv + ['--prune']


def snapshots_argv(config, latest=False):
    argv = base_argv(config) + ['snapshots', '--json', '--tag', config['tag'], '--host', config['host']]
    return argv + (['--latest', '1'] if latest else [])


def check_argv(config):
    argv = base_argv(config) + ['check']
    subset = config.get('check_read_data_subset', '')
    return argv + (['--read-data-subset', subset] if subset else [])


def update_state(state, operation, success, now, duration=None, snapshots=None, checkpoints=None):
    """The state after a run of OPERATION (backup or check): last-run values replaced, last-success kept
    from STATE unless this run succeeded. Returns a new dict."""
    if operation not in ('backup', 'check'):
        raise ValueError('operation must be backup or check')
    new = dict(state or {})
    part = dict(new.get(operation) or {})
    part['success'] = bool(success)
    part['last_run'] = int(now)
    if success:
        part['last_success'] = int(now)
        if snapshots is not None:
            part['snapshots'] = int(snapshots)
    part.setdefault('last_success', 0)
    if duration is not None:
        part['duration'] = round(float(duration), 3)
    if checkpoints is not None:
        part['checkpoints'] = dict((name, sum(1 for item in checkpoints if item['state'] == name))
                                   for name in STATES)
    new[operation] = part
    return new


def render_metrics(state):
    """node_exporter textfile text of STATE (update_state's result); a part never run is left out."""
    samples = []
    backup = (state or {}).get('backup')
    check = (state or {}).get('check')
    if backup:
        samples.append(('gpucluster_checkpoint_backup_success', [], backup['success']))
        samples.append(('gpucluster_checkpoint_backup_last_run_timestamp_seconds', [], backup['last_run']))
        samples.append(('gpucluster_checkpoint_backup_last_success_timestamp_seconds', [], backup['last_success']))
        if 'duration' in backup:
            samples.append(('gpucluster_checkpoint_backup_duration_seconds', [], backup['duration']))
        if 'snapshots' in backup:
            samples.append(('gpucluster_checkpoint_backup_snapshots', [], backup['snapshots']))
        for name in STATES:
            if name in backup.get('checkpoints', {}):
                samples.append(('gpucluster_checkpoint_backup_checkpoints', [('state', name)],
                                backup['checkpoints'][name]))
    if check:
        samples.append(('gpucluster_checkpoint_backup_check_success', [], check['success']))
        samples.append(('gpucluster_checkpoint_backup_check_last_run_timestamp_seconds', [], check['last_run']))
        samples.append(('gpucluster_checkpoint_backup_check_last_success_timestamp_seconds', [],
                        check['last_success']))
    return render_samples(METRICS, samples)


def restore_errors(user, snapshot, target, source, force, target_entries):
    """Messages for a restore request that must not run (empty list: go). TARGET_ENTRIES: the names in the
    target directory now (None: it does not exist)."""
    errors = []
    if not isinstance(user, str) or not USER_NAME.match(user):
        errors.append('user must be a user name (letters, digits, _.-; got %r)' % (user,))
    if not isinstance(snapshot, str) or not SNAPSHOT_ID.match(snapshot):
        errors.append('snapshot must be "latest" or a snapshot id of 8 to 64 hex digits (got %r)' % (snapshot,))
    if not isinstance(target, str) or not os.path.isabs(target):
        errors.append('target must be an absolute path (got %r)' % (target,))
    elif os.path.normpath(target) in ('/', os.path.normpath(source)) or \
            os.path.normpath(source).startswith(os.path.normpath(target) + os.sep) or \
            os.path.normpath(target).startswith(os.path.normpath(source) + os.sep):
        errors.append('target %s must be outside the checkpoint directory %s and not contain it' % (target, source))
    elif target_entries and not force:
        errors.append('target %s is not empty (%d entries): choose a new directory or force the restore'
                      % (target, len(target_entries)))
    return errors


def snapshot_files(ls_lines, prefix):
    """{path: size} of the regular files below PREFIX in `restic ls --json` output (JSON lines: the
    snapshot first, then one node per line)."""
    files = {}
    prefix = prefix.rstrip('/') + '/'
    for line in ls_lines:
        line = line.strip()
        if not line:
            continue
        node = json.loads(line)
        if node.get('struct_type') != 'node' or node.get('type') != 'file':
            continue
        path = node.get('path', '')
        if path.startswith(prefix):
            files[path] = int(node.get('size', 0))
    return files


def compare_restore(expected, target):
    """Differences between the snapshot's files EXPECTED ({path: size}) and what TARGET holds (restic
    restores absolute snapshot paths below the target). Empty list: every file is there with its size."""
    problems = []
    for path, size in sorted(expected.items()):
        restored = os.path.join(target, path.lstrip('/'))
        try:
            got = os.lstat(restored)
        except OSError:
            problems.append('%s: missing' % restored)
            continue
        if not stat.S_ISREG(got.st_mode):
            problems.append('%s: not a regular file' % restored)
        elif got.st_size != size:
            problems.append('%s: %d bytes, the snapshot has %d' % (restored, got.st_size, size))
    return problems
