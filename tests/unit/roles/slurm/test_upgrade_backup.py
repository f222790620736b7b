# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The slurm role's upgrade backup (tasks/upgrade_backup.yml) run by ansible-playbook on this machine:
mysql and mysqldump are stand-ins (a size, a dump that ends the way mysqldump ends one), StateSaveLocation
and the backup directory are temporary directories, tar is real. The password never reaches a
command line or the output; a directory that is not writable or too small stops before the dump."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import subprocess
import sys
import tarfile

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), 'ansible-playbook')
SECRET = 'Sup3rSecretDbPass'

pytestmark = [
    pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason='ansible-playbook not beside this python'),
    pytest.mark.skipif(os.geteuid() != 0, reason='the backup is owned by root (file owner root)'),
]

PLAYBOOK = u'''
- hosts: controller
  gather_facts: false
  tasks:
    - ansible.builtin.import_role:
        name: gpucluster.core.slurm
        tasks_from: upgrade_backup
'''


@pytest.fixture
def backup(tmp_path):
    calls = tmp_path / 'calls'
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    # The stand-ins record their arguments and whether the password came through the environment.
    (bin_dir / 'mysql').write_text(
        u'#!/bin/bash\necho "mysql $* pwd=${MYSQL_PWD:+set}" >> %s\necho "${STANDIN_DB_BYTES:-1048576}"\n' % calls)
    (bin_dir / 'mysqldump').write_text(
        u'#!/bin/bash\necho "mysqldump $* pwd=${MYSQL_PWD:+set}" >> %s\n'
        u'for a in "$@"; do case "$a" in --result-file=*) out=${a#--result-file=} ;; esac; done\n'
        u'printf -- "-- MariaDB dump\\nCREATE TABLE job_table (id int);\\n-- Dump completed on 2026-12-03\\n" > "$out"\n'
        % calls)
    for tool in ('mysql', 'mysqldump'):
        (bin_dir / tool).chmod(0o755)
    state = tmp_path / 'state' / 'slurmctld'
    state.mkdir(parents=True)
    (state / 'job_state').write_bytes(b'\x00' * 4096)
    (state / 'node_state').write_bytes(b'\x01' * 1024)
    (tmp_path / 'hosts.yml').write_text(
        u'all:\n  hosts:\n    controller: {ansible_connection: local, ansible_python_interpreter: "%s"}\n' % sys.executable)
    (tmp_path / 'site.yml').write_text(PLAYBOOK)
    env = dict(os.environ, PATH='%s:%s' % (bin_dir, os.environ.get('PATH', '')),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, 'collections'),
               ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_NOCOLOR='1')

    def run(**extra):
        settings = {'slurm_version': '22.05.8.1', 'slurm_accounting_db_password': SECRET,
                    '__slurm_version_before': {'stdout': '22.05.8-4+deb12u3', 'rc': 0},
                    '__slurm_state_save_location': str(state), '__slurm_conf_dir': str(tmp_path / 'etc'),
                    'slurm_upgrade_backup_dir': str(tmp_path / 'backups'), 'slurm_upgrade_backup_min_free_mib': 0}
        settings.update(extra)
        proc = subprocess.run([ANSIBLE_PLAYBOOK, '-i', str(tmp_path / 'hosts.yml'), str(tmp_path / 'site.yml'),
                               '-e', json.dumps(settings)], env=env, cwd=str(tmp_path), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, universal_newlines=True, timeout=300, check=False)
        return proc.returncode, proc.stdout
    run.tmp = tmp_path
    run.calls = calls
    return run


def _dated(root):
    return sorted(d for d in os.listdir(str(root)) if not d.startswith('.'))


def test_dump_and_state_archive_are_written_checked_and_kept_n_times(backup):
    root = backup.tmp / 'backups'
    root.mkdir()
    for old in ('20250101T000000Z-slurm-21.08.8-to-22.05.8', '20250601T000000Z-slurm-22.05.7-to-22.05.8',
                'not-a-backup'):
        (root / old).mkdir()
    rc, out = backup(slurm_upgrade_backup_keep=2)
    assert rc == 0, out
    assert SECRET not in out
    dated = _dated(root)
    # The newest two upgrade backups are kept; what is not one of ours is left alone.
    assert len(dated) == 3 and dated[0] == '20250601T000000Z-slurm-22.05.7-to-22.05.8' and dated[2] == 'not-a-backup'
    new = root / dated[1]
    assert dated[1].endswith('-slurm-22.05.8-to-22.05.8.1')
    dump = (new / 'slurm_acct_db.sql').read_text()
    assert dump.rstrip().endswith('-- Dump completed on 2026-12-03')
    with tarfile.open(str(new / 'statesave.tar.gz')) as archive:
        assert sorted(archive.getnames()) == ['slurmctld', 'slurmctld/job_state', 'slurmctld/node_state']
    assert oct(os.stat(str(root)).st_mode & 0o777) == '0o700'
    assert oct(os.stat(str(new / 'slurm_acct_db.sql')).st_mode & 0o777) == '0o600'
    calls = backup.calls.read_text()
    assert SECRET not in calls
    assert ('mysqldump --single-transaction --quick --no-tablespaces --host=localhost --port=3306 --user=slurm '
            '--result-file=%s/slurm_acct_db.sql --databases slurm_acct_db pwd=set' % new) in calls
    assert 'backup before the Slurm upgrade in %s' % new in ' '.join(out.split())


def test_a_backup_dir_that_is_not_writable_stops_before_the_dump(backup):
    blocker = backup.tmp / 'a-file'
    blocker.write_text(u'')
    rc, out = backup(slurm_upgrade_backup_dir=str(blocker / 'backups'))
    flat = ' '.join(out.split())
    assert rc != 0, out
    assert 'controller: slurm_upgrade_backup_dir %s/backups is not writable' % blocker in flat
    assert 'Nothing was stopped.' in flat and 'mysqldump' not in backup.calls.read_text()


def test_a_backup_dir_too_small_stops_before_the_dump(backup):
    rc, out = backup(slurm_upgrade_backup_min_free_mib=1 << 40)
    flat = ' '.join(out.split())
    assert rc != 0, out
    assert 'the dump and the state archive need about' in flat and '(database 1 MiB, StateSaveLocation 1 MiB' in flat
    assert 'Nothing was stopped.' in flat and 'mysqldump' not in backup.calls.read_text()
    assert _dated(backup.tmp / 'backups') == []


def test_a_database_that_cannot_be_read_stops_before_the_dump(backup):
    (backup.tmp / 'bin' / 'mysql').write_text(
        u'#!/bin/bash\necho "ERROR 1045 (28000): Access denied for user \'slurm\'@\'localhost\' (using password: YES)" >&2\n'
        u'exit 1\n')
    rc, out = backup()
    flat = ' '.join(out.split())
    assert rc != 0, out
    assert "cannot read database: ERROR 1045 (28000): Access denied for user 'slurm'@'localhost'" in flat
    assert SECRET not in out and not (backup.tmp / 'backups').exists()
