#!/usr/bin/env python
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark: a backup run over 1,000 unchanged checkpoint directories reads no checkpoint file again
(issue 32's goal), shown by restic's own statistics.

The checkpoint backup program is built as the role builds it (roles/health_check/files/build_zipapp.py over
the role's front end and the collection's module_utils) and run twice, as the timer runs it, against the real
restic with a local repository, over a tree made for this benchmark only (a temporary directory removed
afterwards): CHECKPOINTS torch.distributed.checkpoint directories (shards, then .metadata) of USERS users.
Between the runs nothing changes. Printed for each run: wall time, and restic's summary of the backup as the
program keeps it (the metrics gpucluster_checkpoint_backup_files{kind} and ..._data_added_bytes): on the
second run files new and changed are 0 and every file is unmodified (restic compared it with the parent
snapshot and did not read it); the bytes added are the new snapshot's own metadata (under a kilobyte), no
file content.

restic: --restic PATH, else restic on PATH, else Debian's package unpacked (not installed) into
.cache/restic via `apt-get download restic` (a Debian or Ubuntu machine with apt sources), as
tests/monitoring/promtool.sh gets promtool. The restic version decides how the parent snapshot is found
(roles/checkpoint_backup/README.md: 0.14 gets --parent, 0.16+ --group-by host,tags).

  python bench/checkpoint_backup_bench.py [--checkpoints 1000] [--users 10] [--shard-kib 64] [--restic PATH]
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
ROLE = os.path.join(REPO, 'roles', 'checkpoint_backup')
MODULE_UTILS = os.path.join(REPO, 'plugins', 'module_utils')
BUILDER = os.path.join(REPO, 'roles', 'health_check', 'files', 'build_zipapp.py')
CACHE = os.path.join(REPO, '.cache', 'restic')


def find_restic(given):
    if given:
        return given
    found = shutil.which('restic')
    if found:
        return found
    cached = os.path.join(CACHE, 'usr', 'bin', 'restic')
    if not os.path.exists(cached):
        if not shutil.which('apt-get'):
            sys.exit('checkpoint_backup_bench: no restic on PATH and no apt-get to fetch Debian\'s; pass --restic PATH')
        os.makedirs(os.path.join(CACHE, 'deb'), exist_ok=True)
        subprocess.check_call(['apt-get', 'download', 'restic'], cwd=os.path.join(CACHE, 'deb'),
                              stdout=subprocess.DEVNULL)
        subprocess.check_call(['dpkg-deb', '-x'] + glob.glob(os.path.join(CACHE, 'deb', 'restic_*.deb')) + [CACHE])
    return cached


def role_modules():
    """The module_utils the role packs (vars/main.yml, __checkpoint_backup_modules)."""
    import yaml
    with open(os.path.join(ROLE, 'vars', 'main.yml')) as handle:
        return yaml.safe_load(handle)['__checkpoint_backup_modules']


def build_program(work):
    argv = [sys.executable, BUILDER, '--package', 'gpucluster_checkpoint_backup', '--entry', 'cli:main',
            '--output-dir', work, '--output-name', 'gpucluster-checkpoint-backup.pyz',
            '--module', 'cli=' + os.path.join(ROLE, 'files', 'gpucluster_checkpoint_backup_cli.py')]
    for name in role_modules():
        argv += ['--module', '%s=%s' % (name[:-3], os.path.join(MODULE_UTILS, name))]
    return json.loads(subprocess.check_output(argv, universal_newlines=True))['path']


def build_tree(source, checkpoints, users, shard_kib):
    """CHECKPOINTS DCP directories of USERS users: two shards of SHARD_KIB KiB each, then .metadata."""
    files = 0
    for i in range(checkpoints):
        directory = os.path.join(source, 'user%02d' % (i % users), 'run', 'dcp', 'step_%06d' % i)
        os.makedirs(directory)
        for rank in range(2):
            with open(os.path.join(directory, '__%d_0.distcp' % rank), 'wb') as handle:
                handle.write(os.urandom(shard_kib * 1024))
        with open(os.path.join(directory, '.metadata'), 'wb') as handle:
            handle.write(b'metadata %d' % i)
        files += 3
    return files


def metrics(path):
    out = {}
    with open(path) as handle:
        for line in handle:
            if line.startswith('gpucluster_checkpoint_backup_files{') or \
                    line.startswith('gpucluster_checkpoint_backup_data_added_bytes ') or \
                    line.startswith('gpucluster_checkpoint_backup_checkpoints{state="complete"}'):
                name, value = line.rsplit(' ', 1)
                out[name] = int(float(value))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--checkpoints', type=int, default=1000)
    parser.add_argument('--users', type=int, default=10)
    parser.add_argument('--shard-kib', type=int, default=64)
    parser.add_argument('--restic', default='')
    args = parser.parse_args()
    restic = find_restic(args.restic)
    version = subprocess.check_output([restic, 'version'], universal_newlines=True).strip()
    work = tempfile.mkdtemp(prefix='gpucluster-backup-bench-')
    try:
        program = build_program(work)
        source = os.path.join(work, 'shared', 'checkpoints')
        files = build_tree(source, args.checkpoints, args.users, args.shard_kib)
        password = os.path.join(work, 'password')
        with open(password, 'w') as handle:
            handle.write('benchmark only\n')
        config = {'source': source, 'marker': '.checkpoint-complete', 'min_age_seconds': 0, 'max_depth': 3,
                  'conventions': ['marker', 'dcp', 'deepspeed', 'hf_trainer', 'lightning', 'torch_save'],
                  'stable_seconds': 1, 'repository': os.path.join(work, 'repo'), 'password_file': password,
                  'env_file': '', 'restic': restic, 'restic_options': [], 'host': 'bench',
                  'tag': 'gpucluster-checkpoints', 'keep_last': 3, 'keep_daily': 0, 'check_read_data_subset': '',
                  'state_file': os.path.join(work, 'state', 'state.json'), 'cache_dir': os.path.join(work, 'cache'),
                  'textfile': os.path.join(work, 'gpucluster_checkpoint_backup.prom')}
        config_path = os.path.join(work, 'checkpoint-backup.json')
        with open(config_path, 'w') as handle:
            json.dump(config, handle)
        run = [sys.executable, program, '--config', config_path]
        subprocess.check_call(run + ['init'], stdout=subprocess.DEVNULL)
        print('  %s; tree: %d checkpoint directories (torch.distributed.checkpoint) of %d users, %d files of %d KiB'
              % (version, args.checkpoints, args.users, files, args.shard_kib))
        for label in ('first backup', 'second backup (nothing changed)'):
            started = time.time()
            proc = subprocess.run(run + ['backup'], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  universal_newlines=True, check=False)
            wall = time.time() - started
            if proc.returncode != 0:
                sys.exit('checkpoint_backup_bench: the backup failed (exit %d):\n%s' % (proc.returncode, proc.stderr[-3000:]))
            figures = metrics(config['textfile'])
            new = figures.get('gpucluster_checkpoint_backup_files{kind="new"}', -1)
            changed = figures.get('gpucluster_checkpoint_backup_files{kind="changed"}', -1)
            unmodified = figures.get('gpucluster_checkpoint_backup_files{kind="unmodified"}', -1)
            added = figures.get('gpucluster_checkpoint_backup_data_added_bytes', -1)
            print('  %-32s %6.1f s wall; %d complete checkpoints; restic: files_new %d, files_changed %d, '
                  'files_unmodified %d, data_added %d bytes' % (
                      label, wall, figures.get('gpucluster_checkpoint_backup_checkpoints{state="complete"}', -1),
                      new, changed, unmodified, added))
            said = [line.split(': ', 1)[-1] for line in proc.stderr.splitlines()
                    if line.startswith(('gpucluster-checkpoint-backup: restic 0.', 'gpucluster-checkpoint-backup: restic backup',
                                        'gpucluster-checkpoint-backup: backup ok'))]
            for line in said:
                print('  %-32s %s' % ('', line if len(line) < 200 else line[:160] + ' ... ' + line[-36:]))
        print('  goal (the second run reads no checkpoint file again: new 0, changed 0, unmodified %d): %s'
              % (files, 'met' if (new, changed, unmodified) == (0, 0, files) else 'NOT met'))
    finally:
        shutil.rmtree(work)


if __name__ == '__main__':
    main()
