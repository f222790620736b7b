# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The slurm role's munge key guard (tasks/munge_key.yml) with ansible-playbook on local connections: the
controller host and two compute nodes share one munge key path and one record path in a temporary
directory (extra vars), so the records the nodes read are the ones the controller host holds."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import hashlib
import os
import subprocess
import sys

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), 'ansible-playbook')

pytestmark = pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason='ansible-playbook not beside this python')

HOSTS = '''all:
  vars:
    ansible_connection: local
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
  children:
    slurm_controller:
      hosts:
        ctl:
    slurm_compute:
      hosts:
        node2:
        node3:
'''
PLAY = '''- name: The munge key guard
  hosts: slurm_controller:slurm_compute
  gather_facts: false
  tasks:
    - name: Check the controller host's munge key is the cluster's
      ansible.builtin.include_role:
        name: gpucluster.core.slurm
        tasks_from: munge_key.yml
'''


def run(tmp_path, *extra):
    (tmp_path / 'hosts.yml').write_text(HOSTS)
    (tmp_path / 'play.yml').write_text(PLAY)
    (tmp_path / 'state').mkdir(exist_ok=True)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, 'collections'), ANSIBLE_NOCOLOR='1')
    argv = [ANSIBLE_PLAYBOOK, '-i', str(tmp_path / 'hosts.yml'), str(tmp_path / 'play.yml'),
            '-e', '__slurm_munge_key_path=%s' % (tmp_path / 'munge.key'), '-e', '__slurm_state_dir=%s' % (tmp_path / 'state')]
    proc = subprocess.run(argv + list(extra), cwd=str(tmp_path), env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, check=False)
    return proc.returncode, proc.stdout


def test_a_controller_host_with_another_key_or_none_stops_and_the_recorded_key_passes(tmp_path):
    key = tmp_path / 'munge.key'
    key.write_bytes(os.urandom(1024))
    (tmp_path / 'state').mkdir()
    (tmp_path / 'state' / 'munge-key.sha256').write_text(hashlib.sha256(key.read_bytes()).hexdigest() + '\n')
    rc, out = run(tmp_path)
    assert rc == 0, out
    assert "Read which cluster munge key every node recorded" in out and 'skipping: [node2]' in out   # nothing read

    key.write_bytes(os.urandom(1024))                        # a reinstalled controller host: a new key
    rc, out = run(tmp_path)
    assert rc != 0, out
    assert 'the Slurm controller host ctl holds a munge key (%s) that is not the cluster key' % key in out
    assert 'node2, node3 hold the cluster key' in out and 'slurm_munge_key' in out

    key.unlink()                                             # ... or none at all
    rc, out = run(tmp_path)
    assert rc != 0, out
    assert 'the Slurm controller host ctl has no munge key (%s)' % key in out
    assert 'Creating one there and copying it to every node would replace the key' in out

    rc, out = run(tmp_path, '-e', 'slurm_munge_key=' + 'k' * 40)   # the site's key from Vault: no guard
    assert rc == 0, out
    assert 'k' * 40 not in out


def test_a_cluster_without_records_uses_the_controller_hosts_key(tmp_path):
    (tmp_path / 'munge.key').write_bytes(os.urandom(1024))   # a running cluster from a release without records
    rc, out = run(tmp_path)
    assert rc == 0, out
    assert 'ok: [node3]' in out                              # the nodes' records were read: none
