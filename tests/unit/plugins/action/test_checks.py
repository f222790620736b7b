# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpucluster.core.checks: fail with every gathered message, pass on none (plugins/action/checks.py), and
through ansible-playbook: the list is templated once per task, where assert templates it twice."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpucluster.core.plugins.action import checks

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), 'ansible-playbook')


@pytest.mark.parametrize('errors', [[], (), ''])
def test_no_message_passes(errors):
    assert checks.outcome(errors) == (False, checks.PASSED)


def test_every_message_is_the_failure():
    assert checks.outcome(['a = 1 is not accepted.', 'b: use a list.']) == (True, ['a = 1 is not accepted.', 'b: use a list.'])
    assert checks.outcome('one message') == (True, ['one message'])
    assert checks.outcome([3]) == (True, ['3'])


@pytest.mark.parametrize('errors', [None, {'a': 1}, 3, True])
def test_anything_else_is_the_roles_mistake(errors):
    failed, msg = checks.outcome(errors)
    assert failed and msg.startswith('gpucluster.core.checks: errors must be a list of messages')


PLAY = '''- name: Checks
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Passes, templating the list once
      gpucluster.core.checks:
        errors: "{{ __errors }}"
      vars:
        __errors: "{{ [] if lookup('ansible.builtin.pipe', 'echo x >> ' ~ counter ~ '; echo ok') == 'ok' else ['never'] }}"
    - name: The same with assert, which templates it twice
      ansible.builtin.assert:
        that: __errors | length == 0
        fail_msg: "{{ __errors }}"
        quiet: true
      vars:
        __errors: "{{ [] if lookup('ansible.builtin.pipe', 'echo y >> ' ~ counter ~ '; echo ok') == 'ok' else ['never'] }}"
    - name: Fails with every message
      gpucluster.core.checks:
        errors: ["first = 1 is not accepted.", "second: use a list."]
'''


@pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason='ansible-playbook not beside this python')
def test_through_ansible_playbook(tmp_path):
    play = tmp_path / 'play.yml'
    play.write_text(PLAY)
    counter = tmp_path / 'counter'
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_NOCOLOR='1',
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, 'collections'), ANSIBLE_STDOUT_CALLBACK='ansible.builtin.json',
               ANSIBLE_INVENTORY_UNPARSED_WARNING='false', ANSIBLE_LOCALHOST_WARNING='false')
    proc = subprocess.run([ANSIBLE_PLAYBOOK, '-i', 'localhost,', '-c', 'local', '-e', 'counter=%s' % counter, str(play)],
                          cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    tasks = json.loads(proc.stdout)['plays'][0]['tasks']
    results = [task['hosts']['localhost'] for task in tasks]
    assert results[0]['msg'] == 'every check passed' and not results[0].get('failed') and not results[0]['changed']
    assert not results[1].get('failed')
    assert results[2]['failed'] and results[2]['msg'] == ['first = 1 is not accepted.', 'second: use a list.']
    lines = counter.read_text().split()
    assert lines.count('x') == 1, lines
    assert lines.count('y') == 2, lines
