# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The checkpoint backup program (roles/checkpoint_backup), installed as the role installs it, against a
test double of restic (a small script keeping snapshots in a directory; the real restic runs in the
molecule scenario molecule/storage)."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import importlib
import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from ansible_collections.gpucluster.core.plugins.module_utils import checkpoint_scan as cs

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
MODULE_UTILS = os.path.join(REPO, 'plugins', 'module_utils')
ROLE = os.path.join(REPO, 'roles', 'checkpoint_backup')

# restic's command line as the program uses it; snapshots are directories below the "repository". Like the
# real one: `version` (FAKE_RESTIC_VERSION, default Debian 12's 0.14.0); backup --json prints a summary whose
# files_unmodified counts the files whose size and mtime the parent snapshot has (the parent: --parent, or with
# --group-by host,tags the newest of this host and tag, else the newest with the same host and paths, as
# restic 0.14 picks it); FAKE_RESTIC_REMOVE names a file removed while "reading", reported as restic does
# (a JSON error line on stderr, exit 3); FAKE_RESTIC_UNREADABLE names one reported unreadable but left there.
FAKE_RESTIC = r'''#!%(python)s
import json, os, shutil, sys
args = sys.argv[1:]
calls = os.environ['FAKE_RESTIC_LOG']
with open(calls, 'a') as handle:
    handle.write(json.dumps(args) + '\n')
repo = os.environ['RESTIC_REPOSITORY']
while args[0] in ('-o', '--cache-dir'):
    args = args[2:]
command, rest = args[0], args[1:]
def opt(name, default=None):
    return rest[rest.index(name) + 1] if name in rest else default
if command == 'version':
    print('restic %%s compiled with go1.19.8 on linux/amd64' %% os.environ.get('FAKE_RESTIC_VERSION', '0.14.0'))
    sys.exit(0)
if 'RESTIC_PASSWORD' in os.environ:
    sys.exit('the password must come from the file only')
if command == 'init':
    os.makedirs(os.path.join(repo, 'snapshots'))
    shutil.copy(os.environ['RESTIC_PASSWORD_FILE'], os.path.join(repo, 'password'))
    sys.exit(0)
if not os.path.exists(os.path.join(repo, 'password')):
    sys.stderr.write('Fatal: unable to open config file: stat %%s/config: no such file or directory\n'
                     'Is there a repository at the following location?\n' %% repo)
    sys.exit(1)
if open(os.environ['RESTIC_PASSWORD_FILE']).read() != open(os.path.join(repo, 'password')).read():
    sys.stderr.write('Fatal: wrong password or no key found\n')
    sys.exit(1)
snapdir = os.path.join(repo, 'snapshots')
def snapshots():
    found = []
    for sid in sorted(os.listdir(snapdir)):
        with open(os.path.join(snapdir, sid, 'meta.json')) as handle:
            found.append(json.load(handle))
    return found
if command == 'cat':
    print('{}')
elif command == 'backup':
    with open(opt('--files-from-raw'), 'rb') as handle:
        paths = [p.decode('utf-8', 'surrogateescape') for p in handle.read().split(b'\0') if p]
    mine = [s for s in snapshots() if s['hostname'] == opt('--host')]
    if opt('--parent'):
        parent = [s for s in mine if s['id'] == opt('--parent')][-1]
    elif opt('--group-by') == 'host,tags':
        parent = ([s for s in mine if opt('--tag') in s['tags']] or [None])[-1]
    else:
        parent = ([s for s in mine if s['paths'] == sorted(paths)] or [None])[-1]
    known = parent['files'] if parent else {}
    remove = os.environ.get('FAKE_RESTIC_REMOVE')
    unreadable = os.environ.get('FAKE_RESTIC_UNREADABLE')
    sid = '%%064x' %% (len(os.listdir(snapdir)) + 1)
    os.makedirs(os.path.join(snapdir, sid, 'tree'))
    files, errors, counts, added = {}, [], {'new': 0, 'changed': 0, 'unmodified': 0}, 0
    for path in paths:
        walk = [(path, [], [])] if os.path.isfile(path) else os.walk(path)
        for dirpath, _dirs, names in walk:
            for full in ([dirpath] if not names and os.path.isfile(dirpath) else [os.path.join(dirpath, n) for n in names]):
                if full in (remove, unreadable):
                    if full == remove:
                        os.unlink(full)
                    errors.append(full)
                    continue
                st = os.lstat(full)
                files[full] = [st.st_size, st.st_mtime_ns]
                kind = 'unmodified' if known.get(full) == files[full] else ('changed' if full in known else 'new')
                counts[kind] += 1
                added += 0 if kind == 'unmodified' else st.st_size
                dest = os.path.join(snapdir, sid, 'tree', full.lstrip('/'))
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                shutil.copy2(full, dest)
    for item in errors:
        sys.stderr.write(json.dumps({'message_type': 'error', 'error': {}, 'during': 'archival', 'item': item}) + '\n')
    print(json.dumps({'message_type': 'status', 'percent_done': 0.5}))
    print(json.dumps({'message_type': 'summary', 'files_new': counts['new'], 'files_changed': counts['changed'],
                      'files_unmodified': counts['unmodified'], 'data_added': added, 'snapshot_id': sid[:8]}))
    with open(os.path.join(snapdir, sid, 'meta.json'), 'w') as handle:
        json.dump({'id': sid, 'short_id': sid[:8], 'paths': sorted(paths), 'tags': [opt('--tag')],
                   'hostname': opt('--host'), 'time': '2026-01-05T10:00:%%02d.5Z' %% len(os.listdir(snapdir)),
                   'files': files}, handle)
    sys.exit(3 if errors else 0)
elif command == 'snapshots':
    found = [s for s in snapshots() if s['hostname'] == opt('--host') and opt('--tag') in s['tags']]
    print(json.dumps(found[-1:] if opt('--latest') else found))
elif command in ('forget', 'check'):
    print('%%s done' %% command)
elif command == 'ls':
    sid = rest[-1]
    tree = os.path.join(snapdir, sid, 'tree')
    print(json.dumps({'struct_type': 'snapshot', 'id': sid}))
    for dirpath, dirnames, filenames in os.walk(tree):
        for name in filenames:
            full = os.path.join(dirpath, name)
            print(json.dumps({'struct_type': 'node', 'type': 'file', 'size': os.path.getsize(full),
                              'path': '/' + os.path.relpath(full, tree)}))
elif command == 'restore':
    print('restoring <Snapshot %%s> to %%s' %% (rest[0][:8], opt('--target')))
    tree = os.path.join(snapdir, rest[0], 'tree')
    include = opt('--include').lstrip('/')
    shutil.copytree(os.path.join(tree, include), os.path.join(opt('--target'), include))
else:
    sys.exit('unexpected command %%s' %% command)
'''


def _role_modules():
    with open(os.path.join(ROLE, 'vars', 'main.yml')) as handle:
        return yaml.safe_load(handle)['__checkpoint_backup_modules']


def _checkpoint(root, user, name, marker=True, size=4096):
    """A checkpoint directory as a job writes it: its files, then (MARKER) the marker listing them, last."""
    directory = os.path.join(root, user, name)
    os.makedirs(directory)
    with open(os.path.join(directory, 'model.bin'), 'wb') as handle:
        handle.write(os.urandom(size))
    if marker:
        files = cs.walk_files(cs.DiskView(directory), '')
        with open(os.path.join(directory, '.checkpoint-complete'), 'wb') as handle:
            handle.write(cs.manifest_for(files))
    return directory


@pytest.fixture
def program(tmp_path):
    lib = tmp_path / 'lib'
    package = lib / 'gpucluster_checkpoint_backup'
    package.mkdir(parents=True)
    for name in _role_modules():
        shutil.copy(os.path.join(MODULE_UTILS, name), str(package))
    shutil.copy(os.path.join(ROLE, 'files', 'gpucluster_checkpoint_backup_cli.py'), str(package / 'cli.py'))
    (package / '__init__.py').write_text('')
    restic = tmp_path / 'restic'
    restic.write_text(FAKE_RESTIC % {'python': sys.executable})
    restic.chmod(0o755)
    source = tmp_path / 'shared' / 'checkpoints'
    source.mkdir(parents=True)
    password = tmp_path / 'password'
    password.write_text('right\n')
    textfile = tmp_path / 'textfile'
    textfile.mkdir()
    config = {'source': str(source), 'marker': '.checkpoint-complete', 'min_age_seconds': 0, 'max_depth': 3,
              'conventions': list(cs.DEFAULT_CONVENTIONS), 'stable_seconds': 1,
              'repository': str(tmp_path / 'repo'), 'password_file': str(password), 'env_file': '',
              'restic': str(restic), 'restic_options': ['-o', 'sftp.command=ssh -i key backup@host -s sftp'],
              'host': 'node1', 'tag': 'gpucluster-checkpoints', 'keep_last': 3, 'keep_daily': 7,
              'check_read_data_subset': '', 'state_file': str(tmp_path / 'state' / 'state.json'),
              'cache_dir': str(tmp_path / 'cache'),
              'textfile': str(textfile / 'gpucluster_checkpoint_backup.prom')}
    config_path = tmp_path / 'checkpoint-backup.json'
    config_path.write_text(json.dumps(config))
    calls = tmp_path / 'calls.log'

    code = ('import sys; sys.path.insert(0, %r); from gpucluster_checkpoint_backup.cli import main; '
            'sys.exit(main())' % str(lib))

    def command(*args, **env_extra):
        env = dict(os.environ, FAKE_RESTIC_LOG=str(calls), RESTIC_PASSWORD='must-not-be-passed-on', **env_extra)
        return [sys.executable, '-c', code, '--config', str(config_path)] + list(args), env

    def run(*args, **env_extra):
        argv, env = command(*args, **env_extra)
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False,
                              universal_newlines=True, env=env)
        return proc.returncode, proc.stdout, proc.stderr

    def metrics():
        with open(config['textfile']) as handle:
            return dict(line.rsplit(' ', 1) for line in handle.read().splitlines() if not line.startswith('#'))

    def restic_calls():
        with open(str(calls)) as handle:
            return [json.loads(line) for line in handle]

    run.command = command
    run.lib = str(lib)
    run.config = config
    run.source = str(source)
    run.tmp = tmp_path
    run.password = password
    run.metrics = metrics
    run.calls = restic_calls
    return run


def test_init_creates_the_repository_once(program):
    rc, out, err = program('init')
    assert (rc, json.loads(out)) == (0, {'changed': True, 'repository': 'created'}), err
    rc, out, err = program('init')
    assert (rc, json.loads(out)) == (0, {'changed': False, 'repository': 'exists'}), err
    program.password.write_text('wrong\n')
    rc, out, err = program('init')
    assert rc == 1 and 'cannot be opened' in err and 'wrong' not in out


def _commands(calls):
    return [call[call.index('--cache-dir') + 2] if '--cache-dir' in call else call[0] for call in calls]


def test_backup_takes_complete_checkpoints_only_and_writes_metrics(program):
    """Issue 32: forget --prune runs on its own timer, not after every backup (the old expectation here)."""
    assert program('init')[0] == 0
    done = _checkpoint(program.source, 'alice', 'step100')
    _checkpoint(program.source, 'bob', 'step7', marker=False)
    rc, out, err = program('backup')
    assert rc == 0, err
    assert 'not backed up (no-convention): %s: no checkpoint convention' % os.path.join(program.source, 'bob', 'step7') in err
    assert 'backed up (marker: marker): %s: 1 file(s) as the marker lists them' % done in err
    rc, out, err = program('snapshots')
    snapshots = json.loads(out)
    assert [s['paths'] for s in snapshots] == [[done]]
    metrics = program.metrics()
    assert metrics['gpucluster_checkpoint_backup_success'] == '1'
    assert metrics['gpucluster_checkpoint_backup_snapshots'] == '1'
    assert metrics['gpucluster_checkpoint_backup_checkpoints{state="incomplete"}'] == '1'
    assert metrics['gpucluster_checkpoint_backup_decisions{state="complete",reason="marker"}'] == '1'
    assert metrics['gpucluster_checkpoint_backup_decisions{state="incomplete",reason="no-convention"}'] == '1'
    assert metrics['gpucluster_checkpoint_backup_seen'] == '2'
    assert metrics['gpucluster_checkpoint_backup_files{kind="new"}'] == '2'
    assert metrics['gpucluster_checkpoint_backup_user_last_complete_timestamp_seconds{user="alice"}'] != '0'
    assert metrics['gpucluster_checkpoint_backup_user_last_complete_timestamp_seconds{user="bob"}'] == '0'
    assert int(metrics['gpucluster_checkpoint_backup_last_success_timestamp_seconds']) > 0
    assert _commands(program.calls())[-5:] == ['version', 'snapshots', 'backup', 'snapshots', 'snapshots']
    assert 'forget' not in _commands(program.calls())
    rc, out, err = program('forget')
    assert rc == 0 and 'forget ok' in err
    forget = [call for call in program.calls() if 'forget' in call][0]
    assert forget[-7:] == ['--group-by', 'host,tags', '--keep-last', '3', '--keep-daily', '7', '--prune']
    assert program.metrics()['gpucluster_checkpoint_backup_forget_success'] == '1'


@pytest.mark.parametrize('version, expected', [
    ('0.14.0', ['--parent']),
    ('0.17.0', ['--group-by', 'host,tags', '--skip-if-unchanged']),
])
def test_unchanged_checkpoints_are_not_read_again(program, version, expected):
    """The path list changes with every new checkpoint: the parent snapshot is still found (0.14: --parent
    of the newest snapshot of this host and tag; 0.16+: --group-by host,tags), so restic's own summary says
    the old checkpoints' files were not read again."""
    assert program('init')[0] == 0
    for step in range(5):
        _checkpoint(program.source, 'alice', 'step%d' % step)
    assert program('backup', FAKE_RESTIC_VERSION=version)[0] == 0
    _checkpoint(program.source, 'alice', 'step5')
    rc, out, err = program('backup', FAKE_RESTIC_VERSION=version)
    assert rc == 0, err
    metrics = program.metrics()
    assert (metrics['gpucluster_checkpoint_backup_files{kind="unmodified"}'],
            metrics['gpucluster_checkpoint_backup_files{kind="new"}']) == ('10', '2')
    assert 'files new 2, changed 0, unmodified 10' in err
    assert '5 complete checkpoint(s) unchanged since the last backup' in err
    backup = [call for call in program.calls() if 'backup' in call][-1]
    assert [part for part in backup if part in ('--parent', '--group-by', 'host,tags', '--skip-if-unchanged')] == expected


def test_a_checkpoint_rotated_away_during_the_backup_is_a_warning(program):
    assert program('init')[0] == 0
    old = _checkpoint(program.source, 'alice', 'step1')
    _checkpoint(program.source, 'alice', 'step2')
    rc, out, err = program('backup', FAKE_RESTIC_REMOVE=os.path.join(old, 'model.bin'))
    assert rc == 0, err
    assert 'WARNING: 1 file(s) were removed while restic read them' in err
    assert 'restic could not read %s (removed during the backup)' % os.path.join(old, 'model.bin') in err
    metrics = program.metrics()
    assert metrics['gpucluster_checkpoint_backup_success'] == '1'
    assert metrics['gpucluster_checkpoint_backup_vanished_files'] == '1'


def test_a_file_restic_cannot_read_fails_the_run(program):
    assert program('init')[0] == 0
    done = _checkpoint(program.source, 'alice', 'step1')
    rc, out, err = program('backup', FAKE_RESTIC_UNREADABLE=os.path.join(done, 'model.bin'))
    assert rc == 1
    assert 'backup FAILED: restic backup could not read 1 file(s) that are still there' in err
    assert program.metrics()['gpucluster_checkpoint_backup_success'] == '0'


def test_a_torch_save_file_growing_between_the_two_looks_waits(program):
    assert program('init')[0] == 0
    path = os.path.join(program.source, 'carol', 'model.pt')
    os.makedirs(os.path.dirname(path))
    with open(path, 'wb') as handle:
        handle.write(b'a' * 100)
    argv, env = program.command('backup')
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if 'second look at 1 checkpoint(s)' in line:
            with open(path, 'ab') as handle:
                handle.write(b'b' * 100)
    proc.wait(timeout=60)
    assert proc.returncode == 0, ''.join(lines)
    assert any('not backed up (torch_save: still-changing): %s' % path in line for line in lines), lines
    assert not [call for call in program.calls() if 'backup' in call]
    # unchanged at the next run's two looks: backed up; the run after that does not look twice
    rc, out, err = program('backup')
    assert rc == 0 and 'backed up (torch_save: torch-save): %s' % path in err, err
    rc, out, err = program('backup')
    assert rc == 0 and 'second look' not in err and '1 complete checkpoint(s) unchanged' in err, err


def test_journal_lines_cannot_be_forged_by_names(program):
    assert program('init')[0] == 0
    forged = 'x\ngpucluster-checkpoint-backup: backup ok: 99 complete checkpoint(s)'
    _checkpoint(program.source, 'alice', forged, marker=False)
    _checkpoint(program.source, 'JDoe', 'step\x1b[31mred', marker=True)
    rc, out, err = program('backup')
    assert rc == 0, err
    lines = err.splitlines()
    assert all(line.startswith('gpucluster-checkpoint-backup: ') for line in lines), lines
    assert len([line for line in lines if line.startswith('gpucluster-checkpoint-backup: backup ok')]) == 1
    assert len([line for line in lines if line.startswith('gpucluster-checkpoint-backup: backup ok: 1 complete')]) == 1
    assert any('alice/x\\x0agpucluster-checkpoint-backup' in line for line in lines)
    assert any('JDoe/step\\x1b[31mred' in line for line in lines)
    assert '\x1b' not in err


def _in_process(program, monkeypatch):
    """The program's modules imported in this process, from the test's copy of the archive's package."""
    monkeypatch.syspath_prepend(program.lib)
    for name in list(sys.modules):
        if name.startswith('gpucluster_checkpoint_backup'):
            monkeypatch.delitem(sys.modules, name)
    cli = importlib.import_module('gpucluster_checkpoint_backup.cli')
    return cli, importlib.import_module('gpucluster_checkpoint_backup.checkpoint_scan')


def test_root_squashed_share_fails_naming_path_and_export_option(program, monkeypatch, capsys):
    """As root on a local file system a 0700 directory is readable: the view stands in for an NFS client whose
    root is squashed (every user's directory EACCES), and the mount table for its NFS mount."""
    cli, scan_module = _in_process(program, monkeypatch)
    _checkpoint(program.source, 'alice', 'step1')
    _checkpoint(program.source, 'bob', 'step1')

    class Squashed(scan_module.DiskView):
        def entries(self, rel):
            if rel:
                raise scan_module.ScanError('permission-denied', 'EACCES', rel)
            return scan_module.DiskView.entries(self, rel)

    monkeypatch.setattr(cli, 'DiskView', Squashed)
    monkeypatch.setattr(cli, 'read_mounts', lambda: [(program.source, 'nfs4', 'filer:/srv/shared/checkpoints', 'rw')])
    with pytest.raises(cli.ShareError) as raised:
        cli.scan_share(program.config, 1767607200)
    message = str(raised.value)
    assert 'cannot read %s as root (EACCES)' % os.path.join(program.source, 'alice') in message
    assert 'root_squash' in message and 'export /srv/shared/checkpoints to this host with no_root_squash' in message

    class OneSquashed(scan_module.DiskView):
        def entries(self, rel):
            if rel.startswith('bob'):
                raise scan_module.ScanError('permission-denied', 'EACCES', rel)
            return scan_module.DiskView.entries(self, rel)

    monkeypatch.setattr(cli, 'DiskView', OneSquashed)
    _view, result = cli.scan_share(program.config, 1767607200)
    assert [(i['rel'], i['state'], i['reason']) for i in result['items']] == [
        ('alice/step1', 'complete', 'marker'), ('bob', 'skipped', 'permission-denied')]


def test_wrong_password_fails_and_keeps_the_last_success(program):
    assert program('init')[0] == 0
    _checkpoint(program.source, 'alice', 'step100')
    assert program('backup')[0] == 0
    last_success = program.metrics()['gpucluster_checkpoint_backup_last_success_timestamp_seconds']
    program.password.write_text('wrong\n')
    rc, out, err = program('backup')
    assert rc == 1 and 'backup FAILED' in err and 'wrong\n' not in err
    metrics = program.metrics()
    assert metrics['gpucluster_checkpoint_backup_success'] == '0'
    assert metrics['gpucluster_checkpoint_backup_last_success_timestamp_seconds'] == last_success
    rc, out, err = program('check')
    assert rc == 1 and program.metrics()['gpucluster_checkpoint_backup_check_success'] == '0'


def test_unmounted_share_fails_the_run(program):
    assert program('init')[0] == 0
    os.rmdir(program.source)
    rc, out, err = program('backup')
    assert rc == 1 and 'is the share mounted?' in err
    assert program.metrics()['gpucluster_checkpoint_backup_success'] == '0'


def test_restore_verifies_and_refuses_bad_requests(program):
    assert program('init')[0] == 0
    _checkpoint(program.source, 'alice', 'step100', size=10000)
    _checkpoint(program.source, 'bob', 'step7', marker=False)
    assert program('backup')[0] == 0
    target = str(program.tmp / 'restore')
    rc, out, err = program('restore', '--user', 'alice', '--target', target)
    assert rc == 0, err
    result = json.loads(out)
    marker = os.path.getsize(os.path.join(program.source, 'alice', 'step100', '.checkpoint-complete'))
    assert result['files'] == 2 and result['bytes'] == 10000 + marker
    restored = os.path.join(target, program.source.lstrip('/'), 'alice', 'step100', 'model.bin')
    with open(restored, 'rb') as got, open(os.path.join(program.source, 'alice', 'step100', 'model.bin'), 'rb') as want:
        assert got.read() == want.read()
    restore_call = [call for call in program.calls() if 'restore' in call][0]
    assert '--verify' in restore_call
    # not empty now; bob's checkpoint was never complete; a target inside the source
    assert program('restore', '--user', 'alice', '--target', target)[0] == 2
    rc, out, err = program('restore', '--user', 'bob', '--target', str(program.tmp / 'r2'))
    assert rc == 2 and 'holds no checkpoint file of user bob' in err
    assert not os.path.exists(str(program.tmp / 'r2'))
    rc, out, err = program('restore', '--user', 'alice', '--target', os.path.join(program.source, 'alice', 'x'))
    assert rc == 2 and 'outside the checkpoint directory' in err
    rc, out, err = program('restore', '--user', 'alice', '--snapshot', 'HEAD', '--target', str(program.tmp / 'r3'))
    assert rc == 2 and 'snapshot must be' in err


def test_bad_configuration_is_refused(program, tmp_path):
    bad = tmp_path / 'bad.json'
    bad.write_text(json.dumps({'source': 'relative', 'keep_last': 0}))
    rc, out, err = program('--config', str(bad), 'backup')
    assert rc == 2 and 'keep_last must be an integer from 1' in err and 'source must be an absolute path' in err
    assert 'conventions must be a non-empty list' in err
