# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Decisions of the checkpoint backup program: its configuration, the restic command lines (by the restic
version the node has), what restic's output means, the state kept between runs, the node_exporter textfile
metrics and the check of a restore. Which checkpoints are complete is checkpoint_scan.py's.

Shipped to nodes verbatim inside the gpucluster-checkpoint-backup archive (roles/checkpoint_backup) and
unit-tested in tests/unit/plugins/module_utils/test_checkpoint_backup.py. Standard library only, no I/O.

restic features by version (the program asks `restic version` and uses what the node's restic has):
  every version (Debian 12: 0.14.0)  backup --json (summary: files_new/changed/unmodified, data_added),
      --files-from-raw, --parent ID (the newest snapshot of this host and tag, so that unchanged checkpoints
      are not read again although the list of paths changes), exit 3 = some files could not be read;
      forget --group-by host,tags --prune.
  0.16+  backup --group-by host,tags: restic itself picks that parent (no --parent).
  0.17+  backup --skip-if-unchanged (no new snapshot when nothing changed); exit 10 = no repository,
      11 = repository locked; 0.17.1+ exit 12 = wrong password.
  0.18+ (Debian 13: 0.18.0)  files removed during the backup are skipped by restic quietly.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import calendar
import json
import os
import re
import stat

from .checkpoint_scan import (CONVENTIONS, REASONS, STATES, display, user_name_errors)
from .prom_text import render_samples

SNAPSHOT_ID = re.compile(r'^(latest|[0-9a-f]{8,64})$')
BACKUP_EXIT_OK = 0
BACKUP_EXIT_PARTIAL = 3
MAX_STABLE_SECONDS = 3600
# (feature, first restic version with it, what the program does with it)
RESTIC_FEATURES = (
    ('backup_group_by', (0, 16, 0), 'backup --group-by host,tags picks the parent snapshot'),
    ('skip_if_unchanged', (0, 17, 0), 'backup --skip-if-unchanged'),
    ('exit_codes', (0, 17, 0), 'exit 10: no repository, 11: repository locked'),
    ('exit_wrong_password', (0, 17, 1), 'exit 12: wrong password'),
    ('ignores_vanished', (0, 18, 0), 'files removed during the backup are skipped quietly'),
)
RESTIC_EXITS = {10: 'the repository does not exist', 11: 'the repository is locked by another restic',
                12: 'wrong repository password'}
NO_PARENT_TEXT = 'all target directories/files do not exist'

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
    ('gpucluster_checkpoint_backup_seen', 'gauge',
     'Entries the last backup run decided on (user directories skipped, checkpoints and other entries).'),
    ('gpucluster_checkpoint_backup_decisions', 'gauge',
     'Decisions of the last backup run by state (complete, incomplete, skipped) and reason.'),
    ('gpucluster_checkpoint_backup_user_last_change_timestamp_seconds', 'gauge',
     'Newest modification time of a file in the user\'s checkpoint directory (last backup run).'),
    ('gpucluster_checkpoint_backup_user_last_complete_timestamp_seconds', 'gauge',
     'Newest modification time in the user\'s newest complete checkpoint (0: none).'),
    ('gpucluster_checkpoint_backup_user_incomplete_since_timestamp_seconds', 'gauge',
     'Oldest modification time of a file written after the user\'s newest complete checkpoint (0: none).'),
    ('gpucluster_checkpoint_backup_files', 'gauge',
     'Files of the last backup by what restic found: new, changed, unmodified (not read again).'),
    ('gpucluster_checkpoint_backup_data_added_bytes', 'gauge',
     'Bytes the last backup added to the repository (restic\'s data_added).'),
    ('gpucluster_checkpoint_backup_vanished_files', 'gauge',
     'Files removed while the last backup read them (restic exit 3; a warning, not a failure).'),
    ('gpucluster_checkpoint_backup_forget_success', 'gauge',
     'Last restic forget --prune of this host\'s snapshots succeeded (1) or failed (0).'),
    ('gpucluster_checkpoint_backup_forget_last_run_timestamp_seconds', 'gauge',
     'Unix time the last restic forget --prune ended.'),
    ('gpucluster_checkpoint_backup_forget_last_success_timestamp_seconds', 'gauge',
     'Unix time the last successful restic forget --prune ended (0: never).'),
    ('gpucluster_checkpoint_backup_check_success', 'gauge',
     'Last restic check of the checkpoint repository succeeded (1) or failed (0).'),
    ('gpucluster_checkpoint_backup_check_last_run_timestamp_seconds', 'gauge',
     'Unix time the last restic check of the checkpoint repository ended.'),
    ('gpucluster_checkpoint_backup_check_last_success_timestamp_seconds', 'gauge',
     'Unix time the last successful restic check ended (0: never).'),
)
METRIC_NAMES = tuple(name for name, _kind, _help in METRICS)
OPERATIONS = ('backup', 'forget', 'check')


class ConfigError(Exception):
    pass


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def config_errors(config):
    """Messages for a program configuration that cannot be used (empty list: usable)."""
    errors = []
    if not isinstance(config, dict):
        return ['the configuration must be a JSON object (got %s)' % type(config).__name__]

    def absolute(key, required=True):
        value = config.get(key)
        if value in (None, '') and not required:
            return
        if not isinstance(value, str) or not os.path.isabs(value) or '\n' in value or '\0' in value:
            errors.append('%s must be an absolute path (got %s)' % (key, display(repr(value), 120)))

    for key in ('source', 'password_file', 'restic', 'state_file', 'cache_dir'):
        absolute(key)
    for key in ('textfile', 'env_file'):
        absolute(key, required=False)
    if not isinstance(config.get('repository'), str) or not config.get('repository'):
        errors.append('repository must be a non-empty string')
    marker = config.get('marker', '')
    if not isinstance(marker, str) or '/' in marker or '\0' in marker or marker in ('.', '..') or \
            display(marker) != marker:
        errors.append('marker must be a printable file name without "/" or empty (got %s)' % display(repr(marker), 80))
        marker = ''
    for key, low, high in (('min_age_seconds', 0, None), ('keep_last', 1, None), ('keep_daily', 0, None),
                           ('max_depth', 1, 16), ('stable_seconds', 1, MAX_STABLE_SECONDS)):
        value = config.get(key)
        if not _is_int(value) or value < low or (high is not None and value > high):
            errors.append('%s must be an integer from %d%s (got %s)' % (
                key, low, ' to %d' % high if high is not None else '', display(repr(value), 40)))
    conventions = config.get('conventions')
    if not isinstance(conventions, list) or not conventions or \
            not all(isinstance(item, str) and item in CONVENTIONS for item in conventions) or \
            len(set(conventions)) != len(conventions):
        errors.append('conventions must be a non-empty list of distinct names from %s (got %s)'
                      % (', '.join(CONVENTIONS), display(repr(conventions), 120)))
    else:
        if 'marker' in conventions and not marker:
            errors.append('conventions has marker but marker (the file name) is empty')
        if 'age' in conventions and _is_int(config.get('min_age_seconds')) and config['min_age_seconds'] < 1:
            errors.append('conventions has age but min_age_seconds is 0: no age says a checkpoint is complete')
    for key in ('host', 'tag'):
        value = config.get(key)
        if not isinstance(value, str) or not re.match(r'^[A-Za-z0-9_.:=-]+$', value):
            errors.append('%s must be a non-empty word of letters, digits and _.:=- (got %s)' % (key, display(repr(value), 80)))
    options = config.get('restic_options', [])
    if not isinstance(options, list) or not all(isinstance(item, str) for item in options):
        errors.append('restic_options must be a list of strings')
    return errors


def scan_config(config):
    """The settings checkpoint_scan.scan reads, from the program's CONFIG."""
    return {'conventions': list(config['conventions']), 'marker': config.get('marker', ''),
            'max_depth': config['max_depth'], 'min_age_seconds': config['min_age_seconds']}


def parse_restic_version(text):
    """(major, minor, patch) of `restic version` output ("restic 0.14.0 compiled with go1.19.8 on
    linux/amd64"), or None when it says no version."""
    match = re.search(r'\brestic ([0-9]+)\.([0-9]+)\.([0-9]+)', text or '')
    return tuple(int(part) for part in match.groups()) if match else None


def restic_features(version):
    """{feature: bool} for restic VERSION ((major, minor, patch); None: the oldest supported, 0.14)."""
    version = version or (0, 14, 0)
    return dict((name, tuple(version) >= since) for name, since, _what in RESTIC_FEATURES)


def _snapshot_time_key(snapshot):
    """A sortable key of a restic snapshot's RFC 3339 time (nanoseconds, any offset)."""
    match = re.match(r'^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$',
                     str(snapshot.get('time', '')))
    if not match:
        return (0, 0)
    parts = [int(part) for part in match.groups()[:6]]
    seconds = calendar.timegm(tuple(parts) + (0, 0, 0))
    zone = match.group(8)
    if zone != 'Z':
        sign = 1 if zone[0] == '+' else -1
        seconds -= sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    return (seconds, int((match.group(7) or '0')[:9].ljust(9, '0')))


def newest_snapshot(snapshots):
    """The id of the newest snapshot of SNAPSHOTS (restic snapshots --json), or None."""
    dated = [s for s in snapshots or [] if isinstance(s, dict) and SNAPSHOT_ID.match(str(s.get('id', '')))]
    if not dated:
        return None
    return max(dated, key=_snapshot_time_key)['id']


def backup_paths(items, source):
    """The absolute paths restic backs up: every complete checkpoint and the files it is backed up with
    (DeepSpeed's `latest`), each once, sorted."""
    paths = set()
    for item in items:
        if item['state'] == 'complete':
            for rel in [item['rel']] + list(item.get('extra', ())):
                paths.add(os.path.join(source, rel))
    return sorted(paths)


def files_from_raw(paths):
    """The NUL-separated list restic's --files-from-raw reads (file system bytes kept as they are)."""
    return b''.join(path.encode('utf-8', 'surrogateescape') + b'\0' for path in paths)


def base_argv(config):
    return [config['restic']] + list(config.get('restic_options', [])) + ['--cache-dir', config['cache_dir']]


def backup_argv(config, list_file, features, parent=None):
    """restic backup of the listed paths, one JSON message a line on stdout (the summary has files_new,
    files_changed, files_unmodified and data_added). The parent snapshot (whose unchanged files are not read
    again) is picked by restic from this host's and tag's snapshots (0.16+: --group-by host,tags), or given
    (PARENT: the newest snapshot of this host and tag, found by the caller)."""
    argv = base_argv(config) + ['backup', '--json', '--files-from-raw', list_file, '--tag', config['tag'],
                                '--host', config['host']]
    if features.get('backup_group_by'):
        argv += ['--group-by', 'host,tags']
    elif parent:
        argv += ['--parent', parent]
    if features.get('skip_if_unchanged'):
        argv += ['--skip-if-unchanged']
    return argv


def forget_argv(config):
    """Retention per host and tag (its own timer, not after every backup): the snapshot's path list changes with
    every new checkpoint, so grouping by paths (restic's default) would keep every snapshot forever."""
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


def parse_json_line(line):
    """The JSON object of one line of restic --json output, or None (a plain text line)."""
    line = line.strip()
    if not line.startswith('{'):
        return None
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return message if isinstance(message, dict) else None


SUMMARY_KEYS = ('files_new', 'files_changed', 'files_unmodified', 'dirs_new', 'dirs_changed', 'dirs_unmodified',
                'data_added', 'total_files_processed', 'total_bytes_processed')


def backup_summary(message):
    """The figures of restic's summary MESSAGE (message_type summary) this program keeps (integers >= 0)."""
    summary = {}
    for key in SUMMARY_KEYS:
        value = message.get(key)
        if _is_int(value) and value >= 0:
            summary[key] = value
    snapshot = message.get('snapshot_id')
    summary['snapshot_id'] = snapshot if isinstance(snapshot, str) and SNAPSHOT_ID.match(snapshot) else ''
    return summary


def backup_error_item(message):
    """The path an error MESSAGE of restic backup --json (message_type error) is about, or ''."""
    item = message.get('item')
    return item if message.get('message_type') == 'error' and isinstance(item, str) else ''


def backup_outcome(rc, error_items, gone, stderr_text, features):
    """What a restic backup that ended with RC means: (status, message), status ok, warning or failed.
    ERROR_ITEMS: the paths restic could not read (its error messages), GONE: those of them not there any
    more (removed while restic read them: a checkpoint rotated away, a warning) — a path still there but
    unreadable fails the run (the snapshot holds a partial copy of it)."""
    if rc == BACKUP_EXIT_OK:
        return 'ok', 'restic backup ok'
    if rc == BACKUP_EXIT_PARTIAL:
        unreadable = sorted(set(error_items) - set(gone))
        if unreadable:
            return 'failed', ('restic backup could not read %d file(s) that are still there, first %s'
                              % (len(unreadable), display(unreadable[0])))
        first = display(sorted(gone)[0]) if gone else '(not named by restic)'
        return 'warning', ('%d file(s) were removed while restic read them (rotated away during the backup), '
                           'first %s; the snapshot holds the rest' % (len(set(gone)), first))
    if rc == 1 and NO_PARENT_TEXT in stderr_text:
        return 'warning', 'every checkpoint listed was removed before restic read it: nothing was backed up'
    if features.get('exit_codes') and rc in RESTIC_EXITS and (rc != 12 or features.get('exit_wrong_password')):
        return 'failed', 'restic backup failed (exit %d: %s)' % (rc, RESTIC_EXITS[rc])
    return 'failed', 'restic backup failed (exit %d)' % rc


def _user_figures(figures):
    return dict((key, int(figures.get(key, 0)) // 1000000000)
                for key in ('newest_ns', 'complete_ns', 'incomplete_since_ns'))


def update_state(state, operation, success, now, duration=None, snapshots=None, scan=None, summary=None,
                 vanished=None, fingerprints=None):
    """The state after a run of OPERATION (backup, forget or check): last-run values replaced, last-success kept
    from STATE unless this run succeeded. SCAN: checkpoint_scan.scan's result (its items and users), SUMMARY:
    backup_summary's, FINGERPRINTS: {rel: fingerprint} of what was backed up. Returns a new dict."""
    if operation not in OPERATIONS:
        raise ValueError('operation must be one of %s' % ', '.join(OPERATIONS))
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
    if operation == 'backup':
        # What the last run found replaces what an earlier one did; a run that found nothing leaves none.
        for key, given in (('checkpoints', scan), ('decisions', scan), ('seen', scan), ('users', scan),
                           ('summary', summary), ('vanished', vanished)):
            if given is None:
                part.pop(key, None)
    if scan is not None:
        items = scan['items']
        part['checkpoints'] = dict((name, sum(1 for item in items if item['state'] == name))
                                   for name in ('complete', 'incomplete'))
        decisions = {}
        for item in items:
            key = '%s/%s' % (item['state'], item['reason'])
            decisions[key] = decisions.get(key, 0) + 1
        part['decisions'] = decisions
        part['seen'] = len(items)
        part['users'] = dict((user, _user_figures(figures)) for user, figures in scan['users'].items())
    if summary is not None:
        part['summary'] = dict(summary)
    if vanished is not None:
        part['vanished'] = int(vanished)
    if fingerprints is not None:
        part['fingerprints'] = dict(fingerprints)
    new[operation] = part
    return new


def _run_samples(samples, part, prefix):
    samples.append(('gpucluster_checkpoint_backup_%ssuccess' % prefix, [], part['success']))
    samples.append(('gpucluster_checkpoint_backup_%slast_run_timestamp_seconds' % prefix, [], part['last_run']))
    samples.append(('gpucluster_checkpoint_backup_%slast_success_timestamp_seconds' % prefix, [],
                    part['last_success']))


def render_metrics(state):
    """node_exporter textfile text of STATE (update_state's result); a part never run is left out. User
    names are label values as display() writes them (then the exposition format's own escaping)."""
    samples = []
    state = state or {}
    backup = state.get('backup')
    if backup:
        _run_samples(samples, backup, '')
        if 'duration' in backup:
            samples.append(('gpucluster_checkpoint_backup_duration_seconds', [], backup['duration']))
        if 'snapshots' in backup:
            samples.append(('gpucluster_checkpoint_backup_snapshots', [], backup['snapshots']))
        for name in ('complete', 'incomplete'):
            if name in backup.get('checkpoints', {}):
                samples.append(('gpucluster_checkpoint_backup_checkpoints', [('state', name)],
                                backup['checkpoints'][name]))
        if 'seen' in backup:
            samples.append(('gpucluster_checkpoint_backup_seen', [], backup['seen']))
        decisions = backup.get('decisions', {})
        for state_name in STATES:
            for reason in REASONS[state_name]:
                key = '%s/%s' % (state_name, reason)
                if key in decisions:
                    samples.append(('gpucluster_checkpoint_backup_decisions',
                                    [('state', state_name), ('reason', reason)], decisions[key]))
        users = backup.get('users', {})
        for metric, key in (('user_last_change', 'newest_ns'), ('user_last_complete', 'complete_ns'),
                            ('user_incomplete_since', 'incomplete_since_ns')):
            for user in sorted(users):
                samples.append(('gpucluster_checkpoint_backup_%s_timestamp_seconds' % metric,
                                [('user', display(user))], users[user].get(key, 0)))
        summary = backup.get('summary', {})
        for kind in ('new', 'changed', 'unmodified'):
            if 'files_' + kind in summary:
                samples.append(('gpucluster_checkpoint_backup_files', [('kind', kind)], summary['files_' + kind]))
        if 'data_added' in summary:
            samples.append(('gpucluster_checkpoint_backup_data_added_bytes', [], summary['data_added']))
        if 'vanished' in backup:
            samples.append(('gpucluster_checkpoint_backup_vanished_files', [], backup['vanished']))
    for operation, prefix in (('forget', 'forget_'), ('check', 'check_')):
        if state.get(operation):
            _run_samples(samples, state[operation], prefix)
    return render_samples(METRICS, samples)


def restore_errors(user, snapshot, target, source, force, target_entries):
    """Messages for a restore request that must not run (empty list: go). TARGET_ENTRIES: the names in the
    target directory now (None: it does not exist)."""
    errors = list(user_name_errors(user))
    if not isinstance(snapshot, str) or not SNAPSHOT_ID.match(snapshot):
        errors.append('snapshot must be "latest" or a snapshot id of 8 to 64 hex digits (got %s)'
                      % display(repr(snapshot), 80))
    if not isinstance(target, str) or not os.path.isabs(target):
        errors.append('target must be an absolute path (got %s)' % display(repr(target), 120))
    elif os.path.normpath(target) in ('/', os.path.normpath(source)) or \
            os.path.normpath(source).startswith(os.path.normpath(target) + os.sep) or \
            os.path.normpath(target).startswith(os.path.normpath(source) + os.sep):
        errors.append('target %s must be outside the checkpoint directory %s and not contain it'
                      % (display(target), display(source)))
    elif target_entries and not force:
        errors.append('target %s is not empty (%d entries): choose a new directory or force the restore'
                      % (display(target), len(target_entries)))
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
            problems.append('%s: missing' % display(restored))
            continue
        if not stat.S_ISREG(got.st_mode):
            problems.append('%s: not a regular file' % display(restored))
        elif got.st_size != size:
            problems.append('%s: %d bytes, the snapshot has %d' % (display(restored), got.st_size, size))
    return problems
