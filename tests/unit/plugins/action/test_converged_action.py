# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fast path's controller side: what goes into a role's fingerprint, run as a play would run it.

A throw-away role on localhost (connection local, record under tmp_path) takes the fast path as the
collection's roles do: check, full path when not converged, record.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpucluster.core.plugins.action import converged as action

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), 'ansible-playbook')

ROLE_TASKS = '''---
- name: Compare
  gpucluster.core.converged:
    role: demo
    manages: {files: ["{{ demo_file }}"]}
    inputs: {peers: "{{ demo_peers }}"}
    record_dir: "{{ demo_records }}"
  register: __demo_converged
  tags: [demo, always]

- name: Full path
  ansible.builtin.copy:
    content: "{{ demo_value }}\\n"
    dest: "{{ demo_file }}"
    mode: "0644"
  when: not __demo_converged.converged
  tags: [demo_files]

- name: Record
  gpucluster.core.converged:
    role: demo
    state: record
    manages: {files: ["{{ demo_file }}"]}
    inputs: {peers: "{{ demo_peers }}"}
    record_dir: "{{ demo_records }}"
  when: not __demo_converged.converged and __demo_converged.recordable
  tags: [demo, always]
'''


@pytest.fixture
def play(tmp_path):
    role = tmp_path / 'roles' / 'demo'
    (role / 'tasks').mkdir(parents=True)
    (role / 'defaults').mkdir()
    (role / 'tasks' / 'main.yml').write_text(ROLE_TASKS)
    (role / 'defaults' / 'main.yml').write_text(
        '---\ndemo_value: one\ndemo_file: %s\ndemo_records: %s\ndemo_peers: [a, b]\n'
        '# read as a fact: {{ ansible_facts["os_family"] | default("") }}\n'
        % (tmp_path / 'managed.txt', tmp_path / 'records'))
    (tmp_path / 'play.yml').write_text('- hosts: localhost\n  connection: local\n  gather_facts: false\n'
                                       '  roles: [demo]\n')
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_NOCOLOR='1',
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, 'collections'), ANSIBLE_ROLES_PATH=str(tmp_path / 'roles'),
               ANSIBLE_STDOUT_CALLBACK='ansible.posix.json')

    def run(*extra):
        argv = [ANSIBLE_PLAYBOOK, '-i', 'localhost,', 'play.yml', '-e', 'ansible_python_interpreter=' + sys.executable]
        proc = subprocess.run(argv + list(extra), cwd=str(tmp_path),
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                              check=False)
        assert proc.returncode == 0, proc.stdout[-3000:]
        report = json.loads(proc.stdout[proc.stdout.index('{'):])
        tasks = [t for play in report['plays'] for t in play['tasks'] if t['task']['name'].split(' : ')[-1] == 'Compare']
        return tasks[0]['hosts']['localhost']
    return tmp_path, run


pytestmark = pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason='ansible-playbook not beside this python')


def test_record_fast_path_and_what_changed(play):
    tmp_path, run = play
    first = run()
    assert first['converged'] is False and first['recordable'] is True
    assert first['reasons'][0].startswith('no record of a finished full run of demo')
    assert (tmp_path / 'records' / 'demo.json').exists()
    assert run() == dict(run(), converged=True, reasons=[])
    # A variable, then an input, then a file changed by hand: each is named, then the next run is converged.
    assert run('-e', 'demo_value=two')['reasons'] == ['variables changed: demo_value']
    peers = ('-e', 'demo_value=two', '-e', '{"demo_peers": ["a", "c"]}')
    assert run(*peers)['reasons'] == ['variables changed: demo_peers', 'inputs changed: peers']
    (tmp_path / 'managed.txt').write_text('edited\n')
    assert run(*peers)['reasons'] == ['file %s changed (content)' % (tmp_path / 'managed.txt')]
    assert (tmp_path / 'managed.txt').read_text() == 'two\n'
    assert run(*peers)['converged'] is True
    # The switch, as the command line gives it (a string) or as YAML does (a boolean).
    for value, converged in (('gpucluster_fast_path=false', False), ('{"gpucluster_fast_path": false}', False),
                             ('gpucluster_fast_path=True', True)):
        result = run(*(peers + ('-e', value)))
        assert result['converged'] is converged, value
        if not converged:
            # Nothing compared, the packages observed (none here), the record kept.
            assert result['reasons'] == ['gpucluster_fast_path is false: the full path runs']
            assert (result['packages'], result['invalidated'], result['recordable']) == ({}, False, True)


def test_a_run_with_tags_or_in_check_mode_records_nothing(play):
    tmp_path, run = play
    assert run('--tags', 'demo')['recordable'] is False
    assert run('--skip-tags', 'demo_files')['recordable'] is False
    assert run('--check')['recordable'] is False
    assert not (tmp_path / 'records').exists()
    # A skipped tag the role does not use (molecule passes --skip-tags molecule-notest) leaves the run whole.
    assert run('--skip-tags', 'molecule-notest,notest')['recordable'] is True
    assert (tmp_path / 'records' / 'demo.json').exists()


def test_the_facts_a_role_reads_are_found_in_its_files(tmp_path):
    (tmp_path / 'tasks').mkdir()
    (tmp_path / 'templates').mkdir()
    (tmp_path / 'files').mkdir()
    (tmp_path / 'tasks' / 'main.yml').write_text("when: ansible_facts['os_family'] == 'Debian' and ansible_facts.get('x')\n")
    (tmp_path / 'templates' / 'a.j2').write_text('{{ ansible_facts.kernel }} {{ ansible_facts["default_ipv4"]["address"] }}\n')
    (tmp_path / 'files' / 'ignored.sh').write_text("ansible_facts['hostname']\n")
    assert action.referenced_facts(str(tmp_path)) == {'os_family', 'kernel', 'default_ipv4'}


def test_the_code_digest_follows_names_and_bytes(tmp_path):
    (tmp_path / 'a').write_text('1')
    first = action.code_digest([str(tmp_path)])
    (tmp_path / '__pycache__').mkdir()
    (tmp_path / '__pycache__' / 'x.pyc').write_bytes(b'\0')
    assert action.code_digest([str(tmp_path)]) == first
    (tmp_path / 'a').write_text('2')
    assert action.code_digest([str(tmp_path)]) != first
