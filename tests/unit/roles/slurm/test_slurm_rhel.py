# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The slurm role on RHEL, Rocky and AlmaLinux 9 (vars/RedHat.yml, tasks/install_dnf.yml), from each platform's facts.

Three checks, in the way tests/unit/roles/test_storage_platforms.py checks shared_storage and checkpoint_backup:

- the preflight (tasks/preflight.yml) run by ansible-playbook (local connection, --check) on one inventory host per
  case, whose facts are the platform's (a stand-in module returns them as a module's facts, so the preflight does not
  gather this machine's), followed by install_dnf.yml's read-only checks (what rpm says is installed, what dnf offers,
  the pins against both). rpm and dnf do not exist on this machine: stand-ins named so, answering per host from a
  table, print what the real commands print on an EL 9 host (comments beside each answer) and log every call. What
  is accepted (the resolved pins and the package specs of the host's part) and what is refused, by task and message;
- the install tasks (tasks/install*.yml) evaluated with Ansible's templar under EL facts and vars/RedHat.yml: the dnf
  tasks run, the apt tasks do not, the package names are those of EPEL's and SchedMD's builds, versionlock is
  installed and the hold names every package installed; every condition of the role's full path evaluates in order
  on EL facts, in check mode and out of it;
- slurm.conf, cgroup.conf, gres.conf and slurmdbd.conf rendered with EL's paths.

The facts: os-release ID=rhel / rocky / almalinux, VERSION_ID="9.4"; Ansible names them RedHat, Rocky and AlmaLinux,
os_family RedHat, distribution_major_version 9 (ansible/ansible test/units/module_utils/facts/system/distribution
fixtures: redhat_7.7.json, rockylinux_8_3.json, almalinux_8_3_beta.json derive them the same way), pkg_mgr dnf.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import stat
import subprocess
import sys

import pytest
import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
ROLE = os.path.join(REPO, 'roles', 'slurm')
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), 'ansible-playbook')
RENDER = os.path.join(REPO, 'tests', 'unit', 'roles', 'k8s_render.py')


def _load(*parts):
    with open(os.path.join(ROLE, *parts)) as handle:
        return yaml.safe_load(handle)


def _facts(distribution, version, hostname):
    return {'distribution': distribution, 'distribution_version': version,
            'distribution_major_version': version.split('.')[0], 'os_family': 'RedHat', 'pkg_mgr': 'dnf',
            'service_mgr': 'systemd', 'system': 'Linux', 'architecture': 'x86_64', 'hostname': hostname,
            'memtotal_mb': 515000}


ROCKY94 = _facts('Rocky', '9.4', 'rocky94')
RHEL94 = _facts('RedHat', '9.4', 'rhel94')

# ------------------------------------------------------------------ stand-ins for rpm and dnf

STAND_IN = '''#!PYTHON
# Test double of NAME for tests/unit/roles/slurm/test_slurm_rhel.py: answers from answers.json by host and argv.
import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
argv = [os.path.basename(sys.argv[0])] + sys.argv[1:]
host = os.environ.get('GPUCLUSTER_STUB_HOST', '')
with open(os.path.join(here, 'calls.jsonl'), 'a') as handle:
    handle.write(json.dumps([host] + argv) + '\\n')
with open(os.path.join(here, 'answers.json')) as handle:
    answer = json.load(handle).get(host, {}).get(json.dumps(argv))
if answer is None:
    sys.stderr.write(argv[0] + ': no answer for ' + json.dumps(argv) + '\\n')
    sys.exit(127)
sys.stdout.write(answer.get('stdout', ''))
sys.stderr.write(answer.get('stderr', ''))
sys.exit(answer.get('rc', 0))
'''
# upgrade_window.yml: rpm prints the upstream version and exits 0, or "package slurm is not installed" and exits 1
# (rpm(8): -q reports each package not installed and exits with their number).
RPM_WINDOW = ['rpm', '-q', '--queryformat', '%{VERSION}', 'slurm']
RPM_WINDOW_NONE = {json.dumps(RPM_WINDOW): {'rc': 1, 'stdout': 'package slurm is not installed\n'}}
# install_dnf.yml: one rpm query for both packages; a fresh host has neither (two lines, exit 2).
RPM_BOTH = ['rpm', '-q', '--queryformat', '%{NAME} %{VERSION}\n', 'slurm', 'munge']
RPM_BOTH_NONE = {json.dumps(RPM_BOTH): {'rc': 2, 'stdout': 'package slurm is not installed\npackage munge is not installed\n'}}
# dnf 4 (RHEL 9) repoquery prints one line per available package version with the query format; EPEL 9 keeps one
# build of slurm, RHEL 9 AppStream munge-0.5.13-13.el9 (the RHEL sources: openela-main/munge, branch el9). The
# versions here are examples: EPEL's current one is read from the host, never recorded.
DNF_OFFERED = ['dnf', '--quiet', 'repoquery', '--available', '--queryformat', '%{name} %{version}', 'slurm', 'munge']


def _offers(*lines):
    return {json.dumps(DNF_OFFERED): {'stdout': ''.join(line + '\n' for line in lines)}}


EPEL = _offers('munge 0.5.13', 'slurm 24.11.5')
_PINS = {'slurm_version': '24.11.5', 'slurm_munge_version': '0.5.13'}
_CLUSTER = {'slurm_pam_adopt_exempt_groups': ['wheel']}

# (host, facts, host variables, stand-in answers, expected: ('accepted', plan) or ('refused', task, texts))
CASES = [
    ('rocky94', ROCKY94, dict(_PINS, **_CLUSTER), dict(RPM_WINDOW_NONE, **dict(RPM_BOTH_NONE, **EPEL)),
     ('accepted', {'slurm': '24.11.5', 'munge': '0.5.13', 'pkg_mgr': 'dnf',
                   'specs': ['munge-0.5.13', 'slurm-24.11.5', 'slurm-slurmctld-24.11.5', 'slurm-slurmdbd-24.11.5',
                             'slurm-slurmd-24.11.5', 'slurm-pam_slurm-24.11.5'],
                   'hold': ['munge', 'slurm', 'slurm-slurmctld', 'slurm-slurmdbd', 'slurm-slurmd', 'slurm-pam_slurm']})),
    ('rhel94', RHEL94, dict(_PINS, slurm_accounting=False, **_CLUSTER), dict(RPM_WINDOW_NONE, **dict(RPM_BOTH_NONE, **EPEL)),
     ('accepted', {'slurm': '24.11.5', 'munge': '0.5.13', 'pkg_mgr': 'dnf',
                   'specs': ['munge-0.5.13', 'slurm-24.11.5', 'slurm-slurmctld-24.11.5', 'slurm-slurmd-24.11.5',
                             'slurm-pam_slurm-24.11.5'],
                   'hold': ['munge', 'slurm', 'slurm-slurmctld', 'slurm-slurmd', 'slurm-pam_slurm']})),
    # Installed at 24.11.4 while EPEL moved on to 24.11.5 (it keeps its newest build only): the installed pin stands.
    ('alma94-installed', _facts('AlmaLinux', '9.4', 'alma94'), dict(_CLUSTER, slurm_version='24.11.4', slurm_munge_version='0.5.13'),
     {json.dumps(RPM_WINDOW): {'stdout': '24.11.4'},
      json.dumps(RPM_BOTH): {'stdout': 'slurm 24.11.4\nmunge 0.5.13\n'}, json.dumps(DNF_OFFERED): EPEL[json.dumps(DNF_OFFERED)]},
     ('accepted', {'slurm': '24.11.4', 'munge': '0.5.13', 'pkg_mgr': 'dnf',
                   'specs': ['munge-0.5.13', 'slurm-24.11.4', 'slurm-slurmctld-24.11.4', 'slurm-slurmdbd-24.11.4',
                             'slurm-slurmd-24.11.4', 'slurm-pam_slurm-24.11.4'],
                   'hold': ['munge', 'slurm', 'slurm-slurmctld', 'slurm-slurmdbd', 'slurm-slurmd', 'slurm-pam_slurm']})),
    # A site repository built from SchedMD's slurm.spec: accepted in the preflight (the install reads what it offers).
    ('rocky94-site', ROCKY94, dict(_PINS, slurm_version='25.05.3', slurm_dnf_repository={
        'baseurl': 'https://repo.example.org/slurm/el9/$basearch', 'gpgkey': 'https://repo.example.org/RPM-GPG-KEY-slurm'},
        **_CLUSTER), dict(RPM_WINDOW_NONE, **dict(RPM_BOTH_NONE, **_offers('munge 0.5.13', 'slurm 25.05.3', 'slurm 24.11.5'))),
     ('accepted', {'slurm': '25.05.3', 'munge': '0.5.13', 'pkg_mgr': 'dnf',
                   'specs': ['munge-0.5.13', 'slurm-25.05.3', 'slurm-slurmctld-25.05.3', 'slurm-slurmdbd-25.05.3',
                             'slurm-slurmd-25.05.3', 'slurm-pam_slurm-25.05.3'],
                   'hold': ['munge', 'slurm', 'slurm-slurmctld', 'slurm-slurmdbd', 'slurm-slurmd', 'slurm-pam_slurm']})),
    # No pins: EPEL keeps no version to default to; the message names both variables and the platform.
    ('rocky94-empty', ROCKY94, dict(_CLUSTER), {},
     ('refused', "Check slurm_apt_repository, slurm_version and slurm_munge_version against the node's release archive, and the Slurm release",
      ['rocky94-empty: slurm_munge_version is empty',
       'slurm_version is empty, which means the slurm version the node\'s archive offers, but Rocky 9.4 has none this '
       'collection can record (docs/platforms.md: EPEL keeps only its newest build, a site repository '
       '(slurm_dnf_repository) its own): set slurm_version to the upstream version (the part before "-") that this '
       'host\'s package sources offer (dnf repoquery --available slurm lists them)', 'Nothing was changed.'])),
    ('rhel94-empty', RHEL94, dict(_CLUSTER, slurm_munge_version='0.5.13'), {},
     ('refused', "Check slurm_apt_repository, slurm_version and slurm_munge_version against the node's release archive, and the Slurm release",
      ['rhel94-empty: slurm_version is empty', 'RedHat 9.4 has none this collection can record',
       'set slurm_version to the upstream version'])),
    ('rocky94-not-offered', ROCKY94, dict(_CLUSTER, slurm_version='24.11.6', slurm_munge_version='0.5.13'),
     dict(RPM_WINDOW_NONE, **dict(RPM_BOTH_NONE, **EPEL)),
     ('refused', 'Check slurm_version and slurm_munge_version are offered or installed (dnf)',
      ['slurm_version=24.11.6 / slurm_munge_version=0.5.13 are not both installed on rocky94-not-offered or offered',
       'installed: neither; offered: munge 0.5.13, slurm 24.11.5.', 'slurm_dnf_repository'])),
    # EPEL not enabled: dnf finds no slurm at all.
    ('rhel94-no-epel', RHEL94, dict(_PINS, **_CLUSTER), dict(RPM_WINDOW_NONE, **dict(RPM_BOTH_NONE, **_offers('munge 0.5.13'))),
     ('refused', 'Check slurm_version and slurm_munge_version are offered or installed (dnf)',
      ['offered: munge 0.5.13.', 'EPEL 9 (enable it: dnf install epel-release, with CRB on RHEL)'])),
    ('rocky94-bad-repo', ROCKY94, dict(_PINS, slurm_dnf_repository={'baseurl': 'https://repo.example.org/el9',
                                                                    'gpgkey': 'https://repo.example.org/key',
                                                                    'gpgcheck': False}, **_CLUSTER), {},
     ('refused', 'Check the OS family, slurm_dnf_repository and slurm_retired_nodes (every failing check is listed)',
      ['slurm_dnf_repository is not accepted: a mapping of name', 'gpgcheck is always on',
       '["baseurl", "gpgkey", "gpgcheck"]'])),
    ('rhel8', _facts('RedHat', '8.9', 'rhel8'), dict(_PINS, **_CLUSTER), {},
     ('refused', 'Check the OS family, slurm_dnf_repository and slurm_retired_nodes (every failing check is listed)',
      ['and RHEL, Rocky and AlmaLinux 9 with Slurm from EPEL 9 or a site repository (slurm_dnf_repository); this host '
       'reports os_family=RedHat (RedHat 8.9)'])),
]

FACTS_MODULE = '''#!/usr/bin/python
from ansible.module_utils.basic import AnsibleModule
module = AnsibleModule(argument_spec={'facts': {'type': 'dict', 'required': True}}, supports_check_mode=True)
module.exit_json(changed=False, ansible_facts=module.params['facts'])
'''

# install_dnf.yml's read-only checks, taken from the file (the dnf, user and versionlock tasks need a real EL host).
_CHECKS = ['Read the installed Slurm and munge versions (rpm)',
           'List the Slurm and munge versions the enabled repositories offer (dnf)',
           'Check slurm_version and slurm_munge_version are offered or installed (dnf)',
           'Check slurm_version is not a downgrade (dnf)']


def _group(host):
    return 'cluster_' + host.replace('-', '_')


def _play(out_dir):
    """One play per host: the preflight's cross-host checks read the play's hosts, and each host is a cluster."""
    return [dict(_host_play(out_dir), name='The slurm preflight on EL 9: ' + case[0], hosts=_group(case[0])) for case in CASES]


def _host_play(out_dir):
    install = dict((t['name'], t) for t in _load('tasks', 'install_dnf.yml'))
    preflight = {'name': 'Preflight', 'ansible.builtin.include_role': {
        'name': 'gpucluster.core.slurm', 'tasks_from': 'preflight', 'public': True}}
    plan = {'name': 'Write the plan', 'check_mode': False, 'ansible.builtin.copy': {
        'dest': out_dir + '/{{ inventory_hostname }}.json', 'mode': '0644',
        'content': "{{ {'outcome': 'accepted', 'plan': {'slurm': slurm_version, 'munge': slurm_munge_version,"
                   " 'pkg_mgr': __slurm_pkg_mgr, 'specs': __slurm_package_specs,"
                   " 'hold': __slurm_package_hold_names}} | to_json }}"}}
    refusal = {'name': 'Write the refusal', 'check_mode': False, 'ansible.builtin.copy': {
        'dest': out_dir + '/{{ inventory_hostname }}.json', 'mode': '0644',
        'content': "{{ {'outcome': 'refused', 'task': ansible_failed_task.name,"
                   " 'msg': ansible_failed_result.msg} | to_json }}"}}
    return {
        'gather_facts': False,
        'environment': {'GPUCLUSTER_STUB_HOST': '{{ inventory_hostname }}'},
        'tasks': [
            {'name': 'Take the platform facts', 'platform_facts': {'facts': '{{ platform_facts }}'}},
            {'name': 'Run the preflight and the install checks',
             'block': [preflight] + [install[name] for name in _CHECKS] + [plan], 'rescue': [refusal]},
        ],
        # install_dnf.yml's first task (the repository) is not run here: as skipped.
        'vars': {'__slurm_dnf_repo': {'changed': False, 'skipped': True}},
    }


@pytest.fixture(scope='module')
def preflights(tmp_path_factory):
    if not os.path.exists(ANSIBLE_PLAYBOOK):
        pytest.skip('ansible-playbook not beside this python')
    work = tmp_path_factory.mktemp('slurm-rhel')
    stubs = work / 'stubs'
    stubs.mkdir()
    for name in ('rpm', 'dnf'):
        path = stubs / name
        path.write_text(STAND_IN.replace('PYTHON', sys.executable).replace('NAME', name))
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    (stubs / 'answers.json').write_text(json.dumps(dict((case[0], case[3]) for case in CASES)))
    (stubs / 'calls.jsonl').write_text(u'')
    (work / 'library').mkdir()
    (work / 'library' / 'platform_facts.py').write_text(FACTS_MODULE)
    (work / 'out').mkdir()
    inventory = {'all': {'children': {}}}
    for host, facts, variables, _answers, _expected in CASES:
        # Each host is a cluster of its own: the controller and its only compute node.
        inventory['all']['children'][_group(host)] = {'hosts': {host: dict(
            variables, ansible_connection='local', ansible_python_interpreter=sys.executable, platform_facts=facts,
            slurm_controller_host=host, slurm_compute_group=_group(host), slurm_controller_group=_group(host),
            slurm_health_check=False)}}
    (work / 'hosts.yml').write_text(json.dumps(inventory))
    (work / 'play.yml').write_text(yaml.safe_dump(_play(str(work / 'out')), sort_keys=False, width=200))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, 'collections'), ANSIBLE_NOCOLOR='1',
               ANSIBLE_RETRY_FILES_ENABLED='0', ANSIBLE_LOCAL_TEMP=str(work / 'tmp'),
               ANSIBLE_LIBRARY=str(work / 'library'),
               PATH=str(stubs) + os.pathsep + os.environ.get('PATH', ''))
    proc = subprocess.run([ANSIBLE_PLAYBOOK, '-i', 'hosts.yml', 'play.yml', '--check'], cwd=str(work), env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, check=False,
                          timeout=900)
    assert proc.returncode == 0, proc.stdout[-6000:]
    results = {}
    for host, _facts_, _variables, _answers, _expected in CASES:
        path = work / 'out' / (host + '.json')
        assert path.exists(), (host, proc.stdout[-6000:])
        results[host] = json.loads(path.read_text())
    calls = [json.loads(line) for line in (stubs / 'calls.jsonl').read_text().splitlines() if line.strip()]
    return results, calls, proc.stdout


@pytest.mark.parametrize('host, facts, variables, answers, expected', CASES, ids=[case[0] for case in CASES])
def test_the_preflight_and_the_install_checks_on_el9(preflights, host, facts, variables, answers, expected):
    results, _calls, out = preflights
    result = results[host]
    if expected[0] == 'accepted':
        assert result == {'outcome': 'accepted', 'plan': expected[1]}, (result, out[-3000:])
        return
    assert result['outcome'] == 'refused' and result['task'] == expected[1], result
    message = result['msg'] if isinstance(result['msg'], str) else ' '.join(result['msg'])
    message = ' '.join(message.split())
    for text in expected[2]:
        assert text in message, (text, message)


def test_the_host_is_asked_only_what_the_checks_need(preflights):
    """rpm for the upgrade window and the installed versions, dnf once for what the repositories offer; a host refused
    before the pins are resolved is asked nothing."""
    _results, calls, _out = preflights
    by_host = {}
    for call in calls:
        by_host.setdefault(call[0], []).append(call[1:])
    assert by_host['rocky94'] == [RPM_WINDOW, RPM_BOTH, DNF_OFFERED]
    for host in ('rocky94-empty', 'rhel94-empty', 'rocky94-bad-repo', 'rhel8'):
        assert host not in by_host, (host, by_host.get(host))


# ------------------------------------------------------------------ templar: the install tasks and the full path

def _render(jobs):
    proc = subprocess.run([sys.executable, RENDER], input=json.dumps(jobs), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=300, check=False,
                          env=dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, 'collections')))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def _variables(facts=None, **extra):
    variables = dict(_load('vars', 'RedHat.yml'), ansible_facts=facts or ROCKY94, role_path=ROLE, inventory_hostname='node1',
                     ansible_check_mode=False, ansible_managed='Managed by Ansible (gpucluster.core)',
                     slurm_version='24.11.5', slurm_munge_version='0.5.13', __slurm_is_controller=True,
                     __slurm_is_compute=True, __slurm_preview=False, groups={'slurm_compute': ['node1']},
                     ansible_play_hosts=['node1'], slurm_controller_host='node1')
    variables.update(extra)
    return variables


def _tasks(name):
    """The tasks of a tasks file in order, blocks flattened, with the conditions of the blocks around them."""
    out = []

    def walk(tasks, outer, outer_vars):
        for task in tasks or []:
            when = task.get('when', [])
            when = outer + ([when] if isinstance(when, (str, bool)) else list(when))
            task_vars = dict(outer_vars, **(task.get('vars') or {}))
            if any(key in task for key in ('block', 'rescue', 'always')):
                for key in ('block', 'rescue', 'always'):
                    walk(task.get(key), when, task_vars)
            elif 'ansible.builtin.import_tasks' in task:
                walk(_load('tasks', task['ansible.builtin.import_tasks']), when, task_vars)
            else:
                out.append((dict(task, vars=task_vars), [str(c) for c in when]))
    walk(_load('tasks', name), [], {})
    return out


def _condition(conditions):
    return '{{ %s }}' % (' and '.join('(%s)' % c for c in conditions) or 'true')


@pytest.mark.parametrize('part', ['compute', 'controller'])
def test_the_install_tasks_are_dnf_with_el_package_names_and_versionlock(part):
    role = {'compute': {'__slurm_is_controller': False}, 'controller': {'__slurm_is_compute': False}}[part]
    variables = _variables(**role)
    registered = {'__slurm_dnf_repo': {'changed': False, 'skipped': True}}
    tasks = _tasks('install.yml')
    jobs = []
    for task, conditions in tasks:
        jobs.append({'role': 'slurm', 'variables': dict(variables, **dict(registered, **task['vars'])),
                     'expression': _condition(conditions)})
        if task.get('register'):
            registered[task['register']] = {'changed': False, 'rc': 0, 'stdout': '', 'stdout_lines': [], 'msg': ''}
    modules = ('ansible.builtin.apt', 'ansible.builtin.dnf', 'ansible.builtin.command', 'gpucluster.core.package_hold',
               'gpucluster.core.apt_index', 'ansible.builtin.deb822_repository', 'ansible.builtin.yum_repository')
    names = [(task, next((m for m in modules if m in task), None)) for task, _c in tasks]
    jobs += [{'role': 'slurm', 'variables': variables, 'expression': task[module]['name']}
             for task, module in names if module in ('ansible.builtin.dnf', 'gpucluster.core.package_hold')]
    results = _render(jobs)
    runs, named = results[:len(tasks)], iter(results[len(tasks):])
    ran = [(task['name'], module) for (task, module), run in zip(names, runs) if run is True]
    assert all(run in (True, False) for run in runs), runs
    # No apt task runs on EL; every dnf-side task does except the repository (EPEL: none set).
    apt_side = ('ansible.builtin.apt', 'gpucluster.core.apt_index', 'ansible.builtin.deb822_repository')
    assert not [name for name, module in ran if module in apt_side], ran
    assert ('Add the site\'s Slurm package repository (dnf)', 'ansible.builtin.yum_repository') not in ran
    commands = [name for name, module in ran if module == 'ansible.builtin.command']
    assert commands == ['Read the installed Slurm and munge versions (rpm)',
                        'List the Slurm and munge versions the enabled repositories offer (dnf)']
    installed = {}
    for task, module in names:
        if module in ('ansible.builtin.dnf', 'gpucluster.core.package_hold'):
            value = next(named)
            installed[task['name']] = [value] if isinstance(value, str) else value
    specs = installed['Install munge and the Slurm packages of this host\'s part (dnf)']
    expected = {'compute': ['munge-0.5.13', 'slurm-24.11.5', 'slurm-slurmd-24.11.5', 'slurm-pam_slurm-24.11.5'],
                'controller': ['munge-0.5.13', 'slurm-24.11.5', 'slurm-slurmctld-24.11.5', 'slurm-slurmdbd-24.11.5']}[part]
    assert specs == expected
    assert installed['Install the dnf versionlock plugin'] == ['python3-dnf-plugin-versionlock']
    # The lock names exactly the packages installed, without their versions (versionlock locks the installed ones).
    assert installed['Lock munge and Slurm at the pinned versions (dnf versionlock)'] == [s.rsplit('-', 1)[0] for s in specs]
    assert [t for t, _m in names if t['name'] == 'Lock munge and Slurm at the pinned versions (dnf versionlock)'][0][
        'gpucluster.core.package_hold']['manager'] == 'dnf'
    dnf_install = [t for t, _m in names if t['name'] == 'Install munge and the Slurm packages of this host\'s part (dnf)'][0]
    assert dnf_install['ansible.builtin.dnf']['disable_plugin'] == ['versionlock']
    # configure.yml, accounting.yml and upgrade.yml read __slurm_install, which the (skipped) apt task registers: on EL
    # the dnf install's result takes its place, after both branches.
    last = _load('tasks', 'install.yml')[-1]
    assert last['ansible.builtin.set_fact'] == {'__slurm_install': '{{ __slurm_install_dnf }}'}
    assert last['when'] == "__slurm_pkg_mgr == 'dnf'" and dnf_install['register'] == '__slurm_install_dnf'
    if part == 'controller':
        assert installed['Install MariaDB and the Python client the accounting setup needs (dnf)'] == [
            'mariadb-server', 'python3-PyMySQL']


_NODE = {'name': 'gpu01', 'host': 'node1', 'cpus': 64, 'boards': 1, 'sockets_per_board': 2, 'cores_per_socket': 16,
         'threads_per_core': 2, 'real_memory': 500000,
         'gres': [{'type': 'a100', 'count': 2, 'files': ['/dev/nvidia0', '/dev/nvidia1']}]}
# What the full path's set_fact tasks leave, for the conditions after them (a one-node cluster that converged).
_SET_FACTS = {
    '__slurm_munge_plan': {}, '__slurm_db_password': 'x' * 24, '__slurm_old_by_name': {}, '__slurm_kept': {},
    '__slurm_plan': {}, '__slurm_controller_name': 'gpu01', '__slurm_controller_addr': '', '__slurm_nodes': [_NODE],
    '__slurm_node_names': {'node1': 'gpu01'}, '__slurm_change': 'none', '__slurm_install': {'changed': True},
    '__slurm_cluster': {'nodes': [_NODE], 'names': {'node1': 'gpu01'}, 'absent': [], 'unreachable': [], 'kept': [],
                        'problems': {}, 'notes': []},
    'slurm_report': {'unreachable': [], 'kept': [], 'left_out': [], 'mismatched': {}, 'retired': [], 'notes': []},
}

# The tasks files of the full path (tasks/converge.yml) in order, with the conditions of their imports.


def _imports(entries):
    for entry in entries:
        if 'ansible.builtin.import_tasks' in entry:
            when = entry.get('when', [])
            yield entry['ansible.builtin.import_tasks'], [str(c) for c in ([when] if isinstance(when, str) else when)]


_CONVERGE = list(_imports(_load('tasks', 'converge.yml')))


@pytest.mark.parametrize('check_mode', [False, True], ids=['run', 'check'])
@pytest.mark.parametrize('facts', [ROCKY94, RHEL94], ids=['rocky94', 'rhel94'])
def test_every_condition_of_the_full_path_evaluates_in_order_on_el(facts, check_mode):
    """Each condition evaluates on EL facts with only the results the tasks before it registered (a condition reading a
    result that only the apt branch registers fails here, as it would on the host). A result registered on another
    host (the controller's, through hostvars) is given as that host leaves it."""
    base = _variables(facts, ansible_check_mode=check_mode, __slurm_preview=check_mode,
                      __slurm_munge_key_stat={'stat': {'exists': True, 'checksum': 'a' * 64}},
                      __slurm_munge_record_controller={'contents': {}})
    base['hostvars'] = {'node1': {'__slurm_preview': check_mode, '__slurm_munge_key_created': {'changed': False}}}
    registered = {}
    jobs = []
    for name, outer in _CONVERGE:
        if name == 'munge_key.yml':
            continue  # its own test: tests/unit/roles/slurm/test_munge_key_playbook.py
        for task, conditions in _tasks(name):
            conditions = outer + conditions
            if conditions:
                variables = dict(base, **dict(registered, **task['vars']))
                # This host is the controller too: what it registered is also hostvars['node1'].
                variables['hostvars'] = {'node1': dict(base['hostvars']['node1'], **registered)}
                jobs.append({'role': 'slurm', 'variables': variables, 'expression': _condition(conditions)})
            if task.get('register'):
                registered[task['register']] = {'changed': False, 'rc': 0, 'msg': '', 'results': [], 'stdout': '',
                                                'stdout_lines': [], 'stat': {'exists': True}, 'skipped': False,
                                                'contents': {}}
            for fact in task.get('ansible.builtin.set_fact') or {}:
                registered[fact] = _SET_FACTS[fact]
    assert jobs
    results = _render(jobs)
    assert all(result in (True, False) for result in results), [
        (job['expression'], result) for job, result in zip(jobs, results) if result not in (True, False)][:3]


# ------------------------------------------------------------------ the templates with EL's paths


@pytest.mark.parametrize('version, pids', [
    # SchedMD's units from 23.11 on (EPEL's build installs them): slurmctld and slurmdbd as slurm, each with its own
    # RuntimeDirectory; slurmd as root with RuntimeDirectory=slurm.
    ('24.11.5', ('/run/slurmctld/slurmctld.pid', '/run/slurm/slurmd.pid', '/run/slurmdbd/slurmdbd.pid')),
    ('23.02.7', ('/run/slurmctld.pid', '/run/slurmd.pid', '/run/slurmdbd.pid')),
])
def test_the_configuration_files_have_el_paths(version, pids):
    variables = _variables(slurm_version=version, __slurm_nodes=[_NODE], __slurm_node_names={'node1': 'gpu01'},
                           __slurm_cluster={'absent': []}, __slurm_controller_name='gpu01', __slurm_controller_addr='',
                           slurm_partitions=[{'name': 'gpu', 'nodes': 'ALL', 'default': True}],
                           hostvars={'node1': {'__slurm_host_info': {'node_name': 'gpu01'}}},
                           __slurm_db_password='x' * 24)
    jobs = [{'role': 'slurm', 'variables': variables, 'template': 'etc/slurm/' + name}
            for name in ('slurm.conf.j2', 'cgroup.conf.j2', 'gres.conf.j2', 'slurmdbd.conf.j2')]
    jobs.append({'role': 'slurm', 'variables': variables, 'expression': '{{ __slurm_munge_key_create }}'})
    jobs.append({'role': 'slurm', 'variables': dict(variables, slurm_munge_version='0.5.16'),
                 'expression': '{{ __slurm_munge_key_create }}'})
    jobs.append({'role': 'slurm', 'variables': variables, 'expression': '{{ __slurm_fast_path.files }}'})
    jobs.append({'role': 'slurm', 'variables': variables, 'expression': '{{ __slurm_usage_textfile_dir }}'})
    slurm_conf, cgroup_conf, gres_conf, dbd_conf, key_old, key_new, fast_files, textfile = _render(jobs)
    lines = slurm_conf.splitlines()
    for line in ('SlurmUser=slurm', 'StateSaveLocation=/var/spool/slurmctld', 'SlurmdSpoolDir=/var/spool/slurmd',
                 'SlurmctldPidFile=' + pids[0], 'SlurmdPidFile=' + pids[1], 'SlurmctldLogFile=/var/log/slurm/slurmctld.log',
                 'SlurmdLogFile=/var/log/slurm/slurmd.log', 'ProctrackType=proctrack/cgroup', 'PrologFlags=Contain',
                 'Prolog=/etc/slurm/prolog.d/*'):
        assert line in lines, (line, slurm_conf)
    assert [line for line in lines if line.startswith('NodeName=gpu01 ')], slurm_conf
    assert 'ConstrainDevices=yes' in cgroup_conf.splitlines()
    assert [line for line in gres_conf.splitlines() if not line.startswith('#')] == [
        'NodeName=gpu01 Name=gpu Type=a100 File=/dev/nvidia[0-1]'], gres_conf
    assert 'PidFile=' + pids[2] in dbd_conf.splitlines() and 'LogFile=/var/log/slurm/slurmdbd.log' in dbd_conf.splitlines()
    # RHEL 9's munge 0.5.13 has create-munge-key (writes /etc/munge/munge.key); mungekey came with 0.5.14.
    assert key_old == ['/usr/sbin/create-munge-key']
    assert key_new == ['mungekey', '--create', '--keyfile', '/etc/munge/munge.key']
    # The Slurm metrics go where EL's node_exporter reads them (the monitoring role's directory for the family).
    with open(os.path.join(REPO, 'roles', 'monitoring', 'vars', 'RedHat.yml')) as handle:
        assert textfile == yaml.safe_load(handle)['__monitoring_textfile_dir_default'] != '/var/lib/prometheus/node-exporter'
    # The fast path looks at the directories the role creates and at the versionlock list.
    for path in ('/var/spool/slurmctld', '/var/spool/slurmd', '/var/log/slurm', '/etc/dnf/plugins/versionlock.list',
                 '/etc/my.cnf.d/90-slurmdbd.cnf'):
        assert path in fast_files, (path, fast_files)


def test_the_pam_settings_follow_el_and_schedmds_guide():
    """pam_slurm_adopt after password-auth's account stack (EL 9's sshd includes it), pam_systemd and pam_localuser
    commented out in the generated password-auth, nothing of the sort on Debian."""
    import re
    el = _load('vars', 'RedHat.yml')
    debian = _load('vars', 'Debian.yml')
    sshd_el9 = ('#%PAM-1.0\nauth       substack     password-auth\nauth       include      postlogin\n'
                'account    required     pam_sepermit.so\naccount    required     pam_nologin.so\n'
                'account    include      password-auth\npassword   include      password-auth\n')
    assert re.search(el['__slurm_pam_account_anchor'], sshd_el9, re.M)
    assert el['__slurm_pam_generated_files'] == ['/etc/pam.d/password-auth']
    assert '__slurm_pam_generated_files' not in debian
    tasks = dict((t['name'], t) for t, _c in _tasks('pam_adopt.yml'))
    localuser = tasks["Comment pam_localuser's sufficient account line out of the generated files sshd includes (EL)"]
    systemd = tasks['Comment pam_systemd out of the generated files sshd includes (EL)']
    # authselect's password-auth lines (sssd profile) as EL 9 writes them.
    for task, line in ((localuser, 'account     sufficient                                   pam_localuser.so'),
                       (systemd, '-session    optional                                     pam_systemd.so')):
        regexp = task['ansible.builtin.replace']['regexp']
        assert re.match(regexp, line)
        commented = re.sub(regexp, task['ansible.builtin.replace']['replace'].replace('\\1', r'\1'), line)
        assert commented.startswith('# ') and not re.match(regexp, commented)
