# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every role imports into a play without facts (gather_facts: false): its argument validation, which
templates the role's defaults, passes with good input and names the variable with bad input.

The play runs against localhost with a local connection in check mode, selecting only the tasks tagged
`always` and skipping every role's own tag: what runs is Ansible's argument validation of each role and
nothing else, so nothing on this machine changes.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import glob
import os
import subprocess
import sys

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), 'ansible-playbook')
ROLES = sorted(os.path.basename(os.path.dirname(os.path.dirname(p)))
               for p in glob.glob(os.path.join(REPO, 'roles', '*', 'meta', 'argument_specs.yml')))

pytestmark = pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason='ansible-playbook not beside this python')


def _run(tmp_path, extra=()):
    play = tmp_path / 'play.yml'
    play.write_text('- name: Import every role without facts\n  hosts: localhost\n  connection: local\n'
                    '  gather_facts: false\n  roles:\n' + ''.join('    - gpucluster.core.%s\n' % r for r in ROLES))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, 'collections'), ANSIBLE_NOCOLOR='1')
    argv = [ANSIBLE_PLAYBOOK, '-i', 'localhost,', str(play), '--check',
            '--tags', 'gpucluster_argument_validation_only', '--skip-tags', ','.join(ROLES)] + list(extra)
    proc = subprocess.run(argv, cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, check=False)
    return proc.returncode, proc.stdout


def test_every_role_validates_without_facts(tmp_path):
    assert len(ROLES) >= 7, ROLES
    rc, out = _run(tmp_path)
    assert rc == 0, out
    for role in ROLES:
        assert "TASK [gpucluster.core.%s : Validating arguments against arg spec 'main'" % role in out, role
    assert 'ok=%d ' % len(ROLES) in out and 'failed=0' in out, out


def test_bad_input_is_refused_by_the_same_run(tmp_path):
    rc, out = _run(tmp_path, ['-e', 'health_check_timeout=soon'])
    assert rc != 0, out
    assert 'health_check_timeout' in out
