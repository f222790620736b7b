# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Installed by gpucluster.core.checkpoint_backup as gpucluster_checkpoint_backup/cli.py inside one archive
# (/usr/local/lib/gpucluster/gpucluster-checkpoint-backup.pyz) with byte-identical copies of the collection's
# plugins/module_utils/checkpoint_backup.py, checkpoint_scan.py, prom_text.py and atomic_file.py.
# Python 3.9+, standard library only.
"""gpucluster-checkpoint-backup: back up completed training checkpoints with restic.

  backup   decide which checkpoints are complete (checkpoint_scan.py: the conventions training code writes,
           each decision logged with its reason), back up the complete ones (restic reads only what changed
           since the previous snapshot), write the textfile metrics. Exit 0 ok, 1 failed.
  forget   restic forget by the retention, then prune (own timer, daily by default). Exit 0 ok, 1 failed.
  check    restic check of the repository (own timer); writes the textfile metrics. Exit 0 ok, 1 failed.
  init     create the repository when there is none; prints {"changed": true|false}.
  list     every decision as JSON (nothing is backed up; no second look).
  snapshots  this host's checkpoint snapshots as JSON (restic's: id, time, paths = the checkpoints).
  restore  --user NAME [--snapshot latest|ID] --target DIR [--force]: restore a user's checkpoints and
           verify them (restic's --verify, then every file of the snapshot present with its size).

The repository password is read by restic from the password file (never an argument, never printed);
the environment file (KEY=VALUE lines, e.g. S3 credentials) is passed to restic only. Every line this
program writes to the journal is one record: names from the file system are escaped (control characters,
newlines, bidi characters), and so are restic's own lines, relayed one by one.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import argparse
import fcntl
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

from .atomic_file import write_atomic
from .checkpoint_backup import (ConfigError, backup_argv, backup_error_item, backup_outcome, backup_paths,
                                backup_summary, base_argv, check_argv, compare_restore, config_errors,
                                files_from_raw, forget_argv, newest_snapshot, parse_json_line,
                                parse_restic_version, render_metrics, restic_features, restore_errors,
                                scan_config, snapshot_files, snapshots_argv, update_state, RESTIC_EXITS)
from .checkpoint_scan import (DiskView, ScanError, display, look_again, mount_for, needs_second_look,
                              parse_mountinfo, refresh_user_figures, scan, second_look,
                              unreadable_share_message)

DEFAULT_CONFIG = '/etc/gpucluster/checkpoint-backup.json'
# restic says this (0.14 to 0.18) when the location holds no repository; anything else is an error.
NO_REPOSITORY = ('Is there a repository at the following location?', 'repository does not exist')
# How many paths of one kind (files restic could not read, decisions) are named one by one in the journal.
LOG_LIMIT = 50
ERROR_ITEMS_LIMIT = 100000


class ShareError(Exception):
    """The checkpoint directory cannot be read as a whole (not mounted, root squashed)."""


def log(message):
    """One journal record: MESSAGE's own line breaks escaped (values in it went through display())."""
    text = str(message).replace('\r', '\\r').replace('\n', '\\n')
    sys.stderr.write('gpucluster-checkpoint-backup: %s\n' % text)
    sys.stderr.flush()


def load_config(path):
    with open(path, encoding='utf-8') as handle:
        config = json.load(handle)
    errors = config_errors(config)
    if errors:
        raise ConfigError('%s: %s' % (path, '; '.join(errors)))
    return config


def restic_env(config):
    """The environment restic runs with: ours, the password FILE (never the password) and the env file."""
    env = dict(os.environ)
    env.pop('RESTIC_PASSWORD', None)
    env.pop('RESTIC_PASSWORD_COMMAND', None)
    env['RESTIC_PASSWORD_FILE'] = config['password_file']
    env['RESTIC_REPOSITORY'] = config['repository']
    env.setdefault('HOME', '/root')
    if config.get('env_file'):
        with open(config['env_file'], encoding='utf-8') as handle:
            for line in handle:
                line = line.strip()
                if not line or line.startswith('#') or '=' not in line:
                    continue
                key, value = line.split('=', 1)
                env[key.strip()] = value.strip()
    return env


def _relay(stream, handler):
    for raw in iter(stream.readline, b''):
        handler(raw.decode('utf-8', 'replace').rstrip('\n'))
    stream.close()


def run(config, argv, on_stdout=None, on_stderr=None, quiet=False):
    """Run restic. Each line of its stdout and stderr goes to ON_STDOUT / ON_STDERR, or (None) to the journal
    escaped, one record a line. Returns restic's exit status."""
    if not quiet:
        log('restic %s' % display(' '.join(argv[len(base_argv(config)):])))
    proc = subprocess.Popen(argv, env=restic_env(config), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)

    def default(line):
        if line.strip():
            log('restic: %s' % display(line, 1000))

    readers = [threading.Thread(target=_relay, args=(proc.stdout, on_stdout or default)),
               threading.Thread(target=_relay, args=(proc.stderr, on_stderr or default))]
    for reader in readers:
        reader.daemon = True
        reader.start()
    for reader in readers:
        reader.join()
    return proc.wait()


def run_capture(config, argv):
    """Run restic with its stdout kept (JSON for this program) and its stderr kept for the message."""
    out, err = [], []
    rc = run(config, argv, on_stdout=out.append, on_stderr=err.append, quiet=True)
    return rc, '\n'.join(out), '\n'.join(err)


def restic_version(config):
    rc, out, _err = run_capture(config, [config['restic'], 'version'])
    return parse_restic_version(out) if rc == 0 else None


def list_snapshots(config):
    rc, out, err = run_capture(config, snapshots_argv(config))
    if rc != 0:
        raise RuntimeError('restic snapshots failed (exit %d%s): %s'
                           % (rc, ', ' + RESTIC_EXITS[rc] if rc in RESTIC_EXITS else '', display(err.strip()[-500:])))
    found = json.loads(out or '[]')
    return found if isinstance(found, list) else []


class StateLock(object):
    """One run at a time per node (backup, forget, check, restore share the repository lock and the state)."""

    def __init__(self, state_file):
        directory = os.path.dirname(state_file)
        if not os.path.isdir(directory):
            os.makedirs(directory, 0o700)
        self.handle = open(state_file + '.lock', 'a')

    def __enter__(self):
        fcntl.flock(self.handle, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.handle, fcntl.LOCK_UN)
        self.handle.close()


def read_state(path):
    try:
        with open(path, encoding='utf-8') as handle:
            state = json.load(handle)
        return state if isinstance(state, dict) else {}
    except (IOError, OSError, ValueError):
        return {}


def record(config, operation, success, started, **values):
    now = time.time()
    state = update_state(read_state(config['state_file']), operation, success, now,
                         duration=now - started, **values)
    write_atomic(config['state_file'], json.dumps(state, sort_keys=True, indent=1) + '\n', mode=0o600)
    if config.get('textfile'):
        write_atomic(config['textfile'], render_metrics(state), mode=0o644)
    return state


def read_mounts():
    try:
        with open('/proc/self/mountinfo', encoding='utf-8', errors='surrogateescape') as handle:
            return parse_mountinfo(handle.read(4 * 1024 * 1024))
    except (IOError, OSError):
        return []


def scan_share(config, now):
    """checkpoint_scan.scan of the source; ShareError when it cannot be read at all (nothing listed, or no
    user directory readable while some exist)."""
    source = config['source']
    if not os.path.isdir(source):
        raise ShareError('the checkpoint directory %s is not there (is the share mounted?)' % display(source))
    view = DiskView(source)
    try:
        result = scan(view, scan_config(config), int(now * 1e9))
    except ScanError as exc:
        raise ShareError(unreadable_share_message(source, exc.detail, mount_for(source, read_mounts())))
    if result['unreadable_users'] and not result['readable_users']:
        first = [item for item in result['items'] if item['state'] == 'skipped' and
                 item['reason'] in ('permission-denied', 'unreadable')][0]
        raise ShareError(unreadable_share_message(os.path.join(source, first['rel']), first['detail'].split(': ')[-1],
                                                  mount_for(source, read_mounts())))
    return view, result


def log_decisions(config, result, previous):
    """Each decision with its reason, one record each; complete checkpoints unchanged since the last backup are
    counted in one record (a site's thousands of them every hour would hit journald's rate limit)."""
    unchanged = 0
    for item in result['items']:
        path = display(os.path.join(config['source'], item['rel']))
        if item['state'] == 'complete' and previous.get(item['rel']) == item['fingerprint']:
            unchanged += 1
            continue
        verb = {'complete': 'backed up', 'incomplete': 'not backed up', 'skipped': 'skipped'}[item['state']]
        convention = item['convention'] + ': ' if item['convention'] else ''
        log('%s (%s%s): %s%s' % (verb, convention, item['reason'], path,
                                 ': ' + item['detail'] if item['detail'] else ''))
    if unchanged:
        log('%d complete checkpoint(s) unchanged since the last backup: backed up again from the parent snapshot'
            % unchanged)


def take_second_look(config, view, result, previous):
    pending = [item for item in result['items'] if needs_second_look(item, previous)]
    if not pending:
        return
    log('second look at %d checkpoint(s) in %d s (complete only when unchanged between two looks)'
        % (len(pending), config['stable_seconds']))
    time.sleep(config['stable_seconds'])
    for item in pending:
        second_look(item, look_again(view, item))
    refresh_user_figures(result)


def restic_backup(config, paths, features):
    """restic backup of PATHS; returns (status, message, summary, gone paths)."""
    parent = None if features['backup_group_by'] else newest_snapshot(list_snapshots(config))
    if not os.path.isdir(config['cache_dir']):
        os.makedirs(config['cache_dir'], 0o700)
    summary = {}
    errors = []
    stderr_lines = []

    def on_stdout(line):
        message = parse_json_line(line)
        if message is None:
            if line.strip():
                log('restic: %s' % display(line, 1000))
        elif message.get('message_type') == 'summary':
            summary.update(backup_summary(message))

    def on_stderr(line):
        message = parse_json_line(line)
        item = backup_error_item(message) if message else ''
        if item:
            if len(errors) < ERROR_ITEMS_LIMIT:
                errors.append(item)
            return
        if line.strip():
            stderr_lines.append(line)
            log('restic: %s' % display(line, 1000))

    with tempfile.NamedTemporaryFile(dir=config['cache_dir'], prefix='files-from.') as listing:
        listing.write(files_from_raw(paths))
        listing.flush()
        rc = run(config, backup_argv(config, listing.name, features, parent), on_stdout, on_stderr)
    gone = [path for path in errors if not os.path.lexists(path)]
    status, message = backup_outcome(rc, errors, gone, '\n'.join(stderr_lines), features)
    for path in sorted(set(errors))[:LOG_LIMIT]:
        why = 'removed during the backup' if path in gone else 'still there'
        log('restic could not read %s (%s)' % (display(path), why))
    return status, message, summary, gone


def do_backup(config):
    started = time.time()
    result = None
    previous = (read_state(config['state_file']).get('backup') or {}).get('fingerprints') or {}
    summary, gone = None, []
    try:
        view, result = scan_share(config, started)
        take_second_look(config, view, result, previous)
        log_decisions(config, result, previous)
        paths = backup_paths(result['items'], config['source'])
        if paths:
            version = restic_version(config)
            features = restic_features(version)
            log('restic %s: %s' % ('.'.join(str(part) for part in version) if version else 'version unknown (0.14 assumed)',
                                   ', '.join(name for name, on in sorted(features.items()) if on) or 'baseline features'))
            status, message, summary, gone = restic_backup(config, paths, features)
            if status == 'failed':
                raise RuntimeError(message)
            log(('WARNING: ' if status == 'warning' else '') + message)
        else:
            log('no complete checkpoint under %s: nothing to back up (the decisions above say why)'
                % display(config['source']))
        snapshots = len(list_snapshots(config))
    except (ConfigError, ShareError, RuntimeError, OSError, ValueError) as exc:
        log('backup FAILED: %s' % exc)
        record(config, 'backup', False, started, scan=result, summary=summary)
        return 1
    fingerprints = dict((item['rel'], item['fingerprint']) for item in result['items'] if item['state'] == 'complete')
    record(config, 'backup', True, started, snapshots=snapshots, scan=result, summary=summary,
           vanished=len(set(gone)), fingerprints=fingerprints)
    complete = sum(1 for item in result['items'] if item['state'] == 'complete')
    log('backup ok: %d complete checkpoint(s)%s, %d snapshot(s) kept' % (
        complete, '' if not summary else ' (files new %d, changed %d, unmodified %d; %d bytes added)' % (
            summary.get('files_new', 0), summary.get('files_changed', 0), summary.get('files_unmodified', 0),
            summary.get('data_added', 0)), snapshots))
    return 0


def do_forget(config):
    started = time.time()
    rc = run(config, forget_argv(config))
    record(config, 'forget', rc == 0, started)
    if rc != 0:
        log('forget FAILED: restic forget --prune exit %d%s' % (rc, ': ' + RESTIC_EXITS[rc] if rc in RESTIC_EXITS else ''))
        return 1
    log('forget ok')
    return 0


def do_check(config):
    started = time.time()
    rc = run(config, check_argv(config))
    record(config, 'check', rc == 0, started)
    if rc != 0:
        log('check FAILED: restic check exit %d' % rc)
        return 1
    log('check ok')
    return 0


def do_init(config):
    rc, _out, err = run_capture(config, base_argv(config) + ['cat', 'config'])
    if rc == 0:
        print(json.dumps({'changed': False, 'repository': 'exists'}))
        return 0
    if rc != 10 and not any(text in err for text in NO_REPOSITORY):
        log('the repository cannot be opened (wrong password, key or address?): %s' % display(err.strip()[-500:]))
        return 1
    rc, _out, err = run_capture(config, base_argv(config) + ['init'])
    if rc != 0:
        log('restic init failed (exit %d): %s' % (rc, display(err.strip()[-500:])))
        return 1
    print(json.dumps({'changed': True, 'repository': 'created'}))
    return 0


def do_list(config):
    _view, result = scan_share(config, time.time())
    out = []
    for item in result['items']:
        out.append({'path': os.path.join(config['source'], item['rel']), 'user': item['user'],
                    'state': item['state'], 'reason': item['reason'], 'convention': item['convention'],
                    'detail': item['detail'], 'second_look_pending': item['look'],
                    'also': [os.path.join(config['source'], rel) for rel in item['extra']]})
    print(json.dumps(out, indent=1))
    return 0


def do_snapshots(config):
    rc, out, err = run_capture(config, snapshots_argv(config))
    if rc != 0:
        log('restic snapshots failed (exit %d): %s' % (rc, display(err.strip()[-500:])))
        return 1
    print(json.dumps(json.loads(out or '[]'), indent=1, sort_keys=True))
    return 0


def do_restore(config, args):
    target = args.target
    entries = sorted(os.listdir(target)) if os.path.isdir(target) else None
    if target and os.path.exists(target) and entries is None:
        entries = ['(not a directory)']
    errors = restore_errors(args.user, args.snapshot, target, config['source'], args.force, entries)
    if errors:
        for message in errors:
            log('restore refused: %s' % message)
        return 2
    if args.snapshot == 'latest':
        snapshot = newest_snapshot(list_snapshots(config))
        if not snapshot:
            log('restore refused: the repository has no checkpoint snapshot of host %s' % config['host'])
            return 2
    else:
        snapshot = args.snapshot
    prefix = os.path.join(config['source'], args.user)
    rc, out, err = run_capture(config, base_argv(config) + ['ls', '--json', snapshot])
    if rc != 0:
        log('restic ls %s failed (exit %d): %s' % (snapshot, rc, display(err.strip()[-500:])))
        return 1
    expected = snapshot_files(out.splitlines(), prefix)
    if not expected:
        log('restore refused: snapshot %s holds no checkpoint file of user %s (below %s)'
            % (snapshot[:8], display(args.user), display(prefix)))
        return 2
    rc = run(config, base_argv(config) + ['restore', snapshot, '--target', target, '--include', prefix, '--verify'])
    if rc != 0:
        log('restic restore failed (exit %d)' % rc)
        return 1
    problems = compare_restore(expected, target)
    if problems:
        for message in problems[:LOG_LIMIT]:
            log('restore verification: %s' % message)
        log('restore FAILED verification: %d problem(s)' % len(problems))
        return 1
    print(json.dumps({'snapshot': snapshot, 'user': args.user, 'target': target,
                      'restored': os.path.join(target, prefix.lstrip('/')), 'files': len(expected),
                      'bytes': sum(expected.values())}, sort_keys=True))
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog='gpucluster-checkpoint-backup', description=__doc__.splitlines()[0])
    parser.add_argument('--config', default=DEFAULT_CONFIG)
    commands = parser.add_subparsers(dest='command')
    for name in ('backup', 'forget', 'check', 'init', 'list', 'snapshots'):
        commands.add_parser(name)
    restore = commands.add_parser('restore')
    restore.add_argument('--user', required=True)
    restore.add_argument('--snapshot', default='latest')
    restore.add_argument('--target', required=True)
    restore.add_argument('--force', action='store_true', help='restore into a directory that is not empty')
    args = parser.parse_args(argv)
    if not args.command:
        parser.error('a command is required: backup, forget, check, init, list, snapshots or restore')
    try:
        config = load_config(args.config)
    except (ConfigError, IOError, OSError, ValueError) as exc:
        log('cannot use the configuration: %s' % exc)
        return 2
    try:
        if args.command == 'list':
            return do_list(config)
        if args.command == 'init':
            return do_init(config)
        if args.command == 'snapshots':
            return do_snapshots(config)
        with StateLock(config['state_file']):
            if args.command == 'backup':
                return do_backup(config)
            if args.command == 'forget':
                return do_forget(config)
            if args.command == 'check':
                return do_check(config)
            return do_restore(config, args)
    except ShareError as exc:
        log(str(exc))
        return 1
    except ConfigError as exc:
        log(str(exc))
        return 2
