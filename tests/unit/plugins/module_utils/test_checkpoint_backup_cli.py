# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The checkpoint backup program (roles/checkpoint_backup), installed as the role installs it, against a
test double of restic (a small script keeping snapshots in a directory; the real restic runs in the
molecule scenario molecule/storage)."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
MODULE_UTILS = os.path.join(REPO, 'plugins', 'module_utils')
ROLE = os.path.join(REPO, 'roles', 'checkpoint_backup')

# restic's command line as the program uses it; snapshots are directories below the "repository".
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
        paths = [p.decode() for p in handle.read().split(b'\0') if p]
    sid = '%%064x' %% (len(os.listdir(snapdir)) + 1)
    os.makedirs(os.path.join(snapdir, sid, 'tree'))
    for path in paths:
        shutil.copytree(path, os.path.join(snapdir, sid, 'tree', path.lstrip('/')))
    with open(os.path.join(snapdir, sid, 'meta.json'), 'w') as handle:
        json.dump({'id': sid, 'short_id': sid[:8], 'paths': sorted(paths), 'tags': [opt('--tag')],
                   'hostname': opt('--host')}, handle)
elif command == 'snapshots':
    found = [s for s in snapshots() if s['hostname'] == opt('--host') and opt('--tag') in s['tags']]
    print(json.dumps(found[-1:] if opt('--latest') else found))
elif command in ('forget', 'check'):
    pass
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
    directory = os.path.join(root, user, name)
    os.makedirs(directory)
    with open(os.path.join(directory, 'model.pt'), 'wb') as handle:
        handle.write(os.urandom(size))
    if marker:
        open(os.path.join(directory, '.checkpoint-complete'), 'w').close()
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
              'repository': str(tmp_path / 'repo'), 'password_file': str(password), 'env_file': '',
              'restic': str(restic), 'restic_options': ['-o', 'sftp.command=ssh -i key backup@host -s sftp'],
              'host': 'node1', 'tag': 'gpucluster-checkpoints', 'keep_last': 3, 'keep_daily': 7,
              'check_read_data_subset': '', 'state_file': str(tmp_path / 'state' / 'state.json'),
              'cache_dir': str(tmp_path / 'cache'),
              'textfile': str(textfile / 'gpucluster_checkpoint_backup.prom')}
    config_path = tmp_path / 'checkpoint-backup.json'
    config_path.write_text(json.dumps(config))
    calls = tmp_path / 'calls.log'

    def run(*args):
        code = ('import sys; sys.path.insert(0, %r); from gpucluster_checkpoint_backup.cli import main; '
                'sys.exit(main())' % str(lib))
        env = dict(os.environ, FAKE_RESTIC_LOG=str(calls), RESTIC_PASSWORD='must-not-be-passed-on')
        proc = subprocess.run([sys.executable, '-c', code, '--config', str(config_path)] + list(args),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False,
                              universal_newlines=True, env=env)
        return proc.returncode, proc.stdout, proc.stderr

    def metrics():
        with open(config['textfile']) as handle:
            return dict(line.rsplit(' ', 1) for line in handle.read().splitlines() if not line.startswith('#'))

    def restic_calls():
        with open(str(calls)) as handle:
            return [json.loads(line) for line in handle]

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


def test_backup_takes_complete_checkpoints_only_and_writes_metrics(program):
    assert program('init')[0] == 0
    done = _checkpoint(program.source, 'alice', 'step100')
    _checkpoint(program.source, 'bob', 'step7', marker=False)
    rc, out, err = program('backup')
    assert rc == 0, err
    assert 'not backed up (no marker): %s' % os.path.join(program.source, 'bob', 'step7') in err
    rc, out, err = program('snapshots')
    snapshots = json.loads(out)
    assert [s['paths'] for s in snapshots] == [[done]]
    metrics = program.metrics()
    assert metrics['gpucluster_checkpoint_backup_success'] == '1'
    assert metrics['gpucluster_checkpoint_backup_snapshots'] == '1'
    assert metrics['gpucluster_checkpoint_backup_checkpoints{state="incomplete"}'] == '1'
    assert int(metrics['gpucluster_checkpoint_backup_last_success_timestamp_seconds']) > 0
    commands = [call[call.index('--cache-dir') + 2] for call in program.calls()]
    assert commands[-4:] == ['backup', 'forget', 'snapshots', 'snapshots']
    forget = [call for call in program.calls() if 'forget' in call][0]
    assert forget[-7:] == ['--group-by', 'host,tags', '--keep-last', '3', '--keep-daily', '7', '--prune']


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
    assert result['files'] == 2 and result['bytes'] == 10000
    restored = os.path.join(target, program.source.lstrip('/'), 'alice', 'step100', 'model.pt')
    with open(restored, 'rb') as got, open(os.path.join(program.source, 'alice', 'step100', 'model.pt'), 'rb') as want:
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
    assert rc == 2 and 'keep_last must be an integer >= 1' in err and 'source must be an absolute path' in err
