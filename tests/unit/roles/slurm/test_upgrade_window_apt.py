# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""tasks/upgrade_window.yml on a Debian-family host: what dpkg-query answers decides the Slurm installed, and an
answer that is neither "installed" nor "never installed" stops the run instead of passing as nothing to upgrade from.

ansible-playbook (local connection) runs the file through include_role on one host per case, with a stand-in
dpkg-query first on PATH that prints and exits as the real one does (dpkg-query(1), EXIT STATUS: 0 found, 1 not
found, 2 a fatal error such as an unreadable database).
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import subprocess
import sys

import pytest
import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), 'ansible-playbook')

STAND_IN = '''#!/bin/sh
# Stand-in dpkg-query: the answer of this host (GPUCLUSTER_STUB_HOST) from answers/<host>.
. "$(dirname "$0")/answers/$GPUCLUSTER_STUB_HOST"
printf '%s' "$OUT"
printf '%s' "$ERR" >&2
exit "$RC"
'''

# host: (slurm_version wanted, dpkg-query's stdout, stderr, exit status, expected: 'passed' or the failed task's
# name and a text of its message)
CASES = {
    # Never installed: nothing to upgrade from.
    'fresh': ('24.11.5', '', 'dpkg-query: no packages found matching slurm-client\n', 1, ('passed',)),
    # Installed inside the window (24.11 reads 24.05, 23.11 and 23.02).
    'inside': ('24.11.5', 'ii 23.11.4-1.2', '', 0, ('passed',)),
    # Held counts as installed.
    'held-outside': ('24.11.5', 'hi 22.05.8-4+deb12u3', '', 0,
                     ('Check slurm_version stays inside SchedMD\'s upgrade window', '22.05')),
    # Removed with its configuration kept: nothing installed.
    'removed': ('24.11.5', 'rc 22.05.8-4+deb12u3', '', 0, ('passed',)),
    # dpkg's database cannot be read: the version is unknown, never "not installed".
    'broken': ('24.11.5', '', 'dpkg-query: error: cannot open /var/lib/dpkg/status: Permission denied\n', 2,
               ('Read the installed Slurm version (upgrade window)', 'Permission denied')),
}


@pytest.fixture(scope='module')
def played(tmp_path_factory):
    if not os.path.exists(ANSIBLE_PLAYBOOK):
        pytest.skip('ansible-playbook not beside this python')
    work = tmp_path_factory.mktemp('upgrade-window-apt')
    stubs = work / 'stubs'
    (stubs / 'answers').mkdir(parents=True)
    (stubs / 'dpkg-query').write_text(STAND_IN)
    (stubs / 'dpkg-query').chmod(0o755)
    for host, (_version, out, err, rc, _expected) in CASES.items():
        (stubs / 'answers' / host).write_text('OUT=%s\nERR=%s\nRC=%d\n' % (
            "'" + out.replace("'", "'\\''") + "'", "'" + err.replace("'", "'\\''") + "'", rc))
    (work / 'out').mkdir()
    inventory = {'all': {'hosts': dict((host, {
        'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable,
        'slurm_version': spec[0]}) for host, spec in CASES.items())}}
    record = {'name': 'Record the outcome', 'check_mode': False, 'ansible.builtin.copy': {
        'dest': str(work / 'out') + '/{{ inventory_hostname }}.json', 'mode': '0644'}}
    play = [{'name': 'The upgrade window on apt', 'hosts': 'all', 'gather_facts': False,
             'environment': {'GPUCLUSTER_STUB_HOST': '{{ inventory_hostname }}',
                             'PATH': str(stubs) + ':' + os.environ.get('PATH', '/usr/bin:/bin')},
             'tasks': [{'block': [
                 {'name': 'The upgrade window', 'ansible.builtin.include_role': {
                     'name': 'gpucluster.core.slurm', 'tasks_from': 'upgrade_window'},
                  'vars': {'__slurm_pkg_mgr': 'apt'}},
                 dict(record, **{'ansible.builtin.copy': dict(record['ansible.builtin.copy'],
                                                              content="{{ {'outcome': 'passed'} | to_json }}")})],
                 'rescue': [dict(record, **{'ansible.builtin.copy': dict(
                     record['ansible.builtin.copy'],
                     content="{{ {'outcome': ansible_failed_task.name, 'result': ansible_failed_result} | to_json }}")})]}]}]
    (work / 'hosts.yml').write_text(json.dumps(inventory))
    (work / 'play.yml').write_text(yaml.safe_dump(play, sort_keys=False, width=200))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, 'collections'), ANSIBLE_NOCOLOR='1',
               ANSIBLE_RETRY_FILES_ENABLED='0', ANSIBLE_LOCAL_TEMP=str(work / 'tmp'))
    proc = subprocess.run([ANSIBLE_PLAYBOOK, '-i', 'hosts.yml', 'play.yml'], cwd=str(work), env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, check=False,
                          timeout=600)
    results = {}
    for host in CASES:
        path = work / 'out' / (host + '.json')
        results[host] = json.loads(path.read_text()) if path.exists() else None
    return results, proc.stdout


@pytest.mark.parametrize('host', sorted(CASES))
def test_what_dpkg_query_answers_decides_the_window(played, host):
    results, out = played
    result = results[host]
    expected = CASES[host][4]
    assert result is not None, out[-4000:]
    if expected == ('passed',):
        assert result == {'outcome': 'passed'}, (result, out[-4000:])
        return
    assert result['outcome'] == expected[0], (result, out[-4000:])
    assert expected[1] in json.dumps(result['result']), result
