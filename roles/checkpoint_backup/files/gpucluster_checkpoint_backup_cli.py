# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Installed by gpucluster.core.checkpoint_backup as gpucluster_checkpoint_backup/cli.py inside one archive
# (/usr/local/lib/gpucluster/gpucluster-checkpoint-backup.pyz) with byte-identical copies of the collection's
# plugins/module_utils/checkpoint_backup.py and atomic_file.py. Python 3.9+, standard library only.
"""gpucluster-checkpoint-backup: back up completed training checkpoints with restic.

  backup   back up the complete checkpoints (the marker/age rule in checkpoint_backup.py), then forget
           by the retention and prune; writes the textfile metrics. Exit 0 ok, 1 failed.
  check    restic check of the repository (own timer); writes the textfile metrics. Exit 0 ok, 1 failed.
  init     create the repository when there is none; prints {"changed": true|false}.
  list     the checkpoints and their state as JSON (nothing is backed up).
  snapshots  this host's checkpoint snapshots as JSON (restic's: id, time, paths = the checkpoints).
  restore  --user NAME [--snapshot latest|ID] --target DIR [--force]: restore a user's checkpoints and
           verify them (restic's --verify, then every file of the snapshot present with its size).

The repository password is read by restic from the password file (never an argument, never printed);
the environment file (KEY=VALUE lines, e.g. S3 credentials) is passed to restic only.
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
import time

from .atomic_file import write_atomic
from .checkpoint_backup import (ConfigError, backup_argv, check_argv, compare_restore, config_errors,
                                files_from_raw, forget_argv, render_metrics, restore_errors, scan_checkpoints,
                                snapshot_files, snapshots_argv, update_state, base_argv)

DEFAULT_CONFIG = '/etc/gpucluster/checkpoint-backup.json'
# restic says this (0.14 to 0.17) when the location holds no repository; anything else is an error.
NO_REPOSITORY = ('Is there a repository at the following location?', 'repository does not exist')


def log(message):
    sys.stderr.write('gpucluster-checkpoint-backup: %s\n' % message)
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


def run(config, argv, capture=False):
    """Run restic; its output goes to our stderr (the journal) unless CAPTURE, so that stdout carries only
    the program's own JSON. Returns (rc, stdout, stderr)."""
    log('restic %s' % ' '.join(argv[len(base_argv(config)):]))
    sys.stdout.flush()
    result = subprocess.run(argv, env=restic_env(config), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE if capture else sys.stderr,
                            stderr=subprocess.PIPE if capture else None, universal_newlines=True, check=False)
    return result.returncode, result.stdout or '', result.stderr or ''


def count_snapshots(config):
    rc, out, err = run(config, snapshots_argv(config), capture=True)
    if rc != 0:
        raise RuntimeError('restic snapshots failed (exit %d): %s' % (rc, err.strip()[-500:]))
    return len(json.loads(out or '[]'))


class StateLock(object):
    """One run at a time per node (backup, check, restore share the repository lock and the state)."""

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
            return json.load(handle)
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


def do_backup(config):
    started = time.time()
    checkpoints = None
    try:
        checkpoints = scan_checkpoints(config['source'], config.get('marker', ''), config['min_age_seconds'],
                                       started, config['max_depth'])
        complete = [item for item in checkpoints if item['state'] == 'complete']
        for item in checkpoints:
            if item['state'] != 'complete':
                log('not backed up (%s): %s' % (item['reason'], item['path']))
        if complete:
            if not os.path.isdir(config['cache_dir']):
                os.makedirs(config['cache_dir'], 0o700)
            with tempfile.NamedTemporaryFile(dir=config['cache_dir'], prefix='files-from.') as listing:
                listing.write(files_from_raw(checkpoints))
                listing.flush()
                rc, _out, _err = run(config, backup_argv(config, listing.name))
            if rc != 0:
                raise RuntimeError('restic backup failed (exit %d%s)'
                                   % (rc, ': some files could not be read' if rc == 3 else ''))
            rc, _out, _err = run(config, forget_argv(config))
            if rc != 0:
                raise RuntimeError('restic forget --prune failed (exit %d)' % rc)
        else:
            log('no complete checkpoint under %s: nothing to back up' % config['source'])
        snapshots = count_snapshots(config)
    except (ConfigError, RuntimeError, OSError, ValueError) as exc:
        log('backup FAILED: %s' % exc)
        record(config, 'backup', False, started, checkpoints=checkpoints)
        return 1
    record(config, 'backup', True, started, snapshots=snapshots, checkpoints=checkpoints)
    log('backup ok: %d complete checkpoint(s) backed up, %d snapshot(s) kept' % (len(complete), snapshots))
    return 0


def do_check(config):
    started = time.time()
    rc, _out, _err = run(config, check_argv(config))
    record(config, 'check', rc == 0, started)
    if rc != 0:
        log('check FAILED: restic check exit %d' % rc)
        return 1
    log('check ok')
    return 0


def do_init(config):
    rc, _out, err = run(config, base_argv(config) + ['cat', 'config'], capture=True)
    if rc == 0:
        print(json.dumps({'changed': False, 'repository': 'exists'}))
        return 0
    if not any(text in err for text in NO_REPOSITORY):
        log('the repository cannot be opened (wrong password, key or address?): %s' % err.strip()[-500:])
        return 1
    rc, _out, err = run(config, base_argv(config) + ['init'], capture=True)
    if rc != 0:
        log('restic init failed (exit %d): %s' % (rc, err.strip()[-500:]))
        return 1
    print(json.dumps({'changed': True, 'repository': 'created'}))
    return 0


def do_list(config):
    checkpoints = scan_checkpoints(config['source'], config.get('marker', ''), config['min_age_seconds'],
                                   time.time(), config['max_depth'])
    print(json.dumps(checkpoints, indent=1))
    return 0


def do_snapshots(config):
    rc, out, err = run(config, snapshots_argv(config), capture=True)
    if rc != 0:
        log('restic snapshots failed (exit %d): %s' % (rc, err.strip()[-500:]))
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
        rc, out, err = run(config, snapshots_argv(config, latest=True), capture=True)
        if rc != 0:
            log('restic snapshots failed (exit %d): %s' % (rc, err.strip()[-500:]))
            return 1
        found = json.loads(out or '[]')
        if not found:
            log('restore refused: the repository has no checkpoint snapshot of host %s' % config['host'])
            return 2
        snapshot = found[-1]['id']
    else:
        snapshot = args.snapshot
    prefix = os.path.join(config['source'], args.user)
    rc, out, err = run(config, base_argv(config) + ['ls', '--json', snapshot], capture=True)
    if rc != 0:
        log('restic ls %s failed (exit %d): %s' % (snapshot, rc, err.strip()[-500:]))
        return 1
    expected = snapshot_files(out.splitlines(), prefix)
    if not expected:
        log('restore refused: snapshot %s holds no checkpoint file of user %s (below %s)'
            % (snapshot[:8], args.user, prefix))
        return 2
    rc, _out, _err = run(config, base_argv(config) + ['restore', snapshot, '--target', target,
                                                      '--include', prefix, '--verify'])
    if rc != 0:
        log('restic restore failed (exit %d)' % rc)
        return 1
    problems = compare_restore(expected, target)
    if problems:
        for message in problems[:50]:
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
    for name in ('backup', 'check', 'init', 'list', 'snapshots'):
        commands.add_parser(name)
    restore = commands.add_parser('restore')
    restore.add_argument('--user', required=True)
    restore.add_argument('--snapshot', default='latest')
    restore.add_argument('--target', required=True)
    restore.add_argument('--force', action='store_true', help='restore into a directory that is not empty')
    args = parser.parse_args(argv)
    if not args.command:
        parser.error('a command is required: backup, check, init, list, snapshots or restore')
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
            if args.command == 'check':
                return do_check(config)
            return do_restore(config, args)
    except ConfigError as exc:
        log(str(exc))
        return 2
