# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The slurm role's version pins and the platform table (plugins/module_utils/platforms.py, cited in
docs/platforms.md): slurm_version and slurm_munge_version default to empty, the versions the node's release
archive offers; tasks/pins.yml refuses an empty pin on a release the table does not know and a pin the archive
does not offer (unless slurm_apt_repository is set), then writes the resolved versions into the two variables;
the preflight refuses a cluster whose slurmd would be newer than slurmctld or outside its window.

Run with ansible-playbook on local connections: each host's facts come from a stand-in module that returns
them as a module's facts (so hostvars carry them, as after fact gathering), the role's tasks file is included
as a play includes it, and the cross-node check is the preflight's own task (read from tasks/preflight.yml)
under the role's vars/main.yml."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import subprocess
import sys

import pytest
import yaml

from ansible_collections.gpucluster.core.plugins.module_utils import platforms, slurm_versions

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
ROLE = os.path.join(REPO, 'roles', 'slurm')
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), 'ansible-playbook')


def _load(*parts):
    with open(os.path.join(*parts)) as handle:
        return yaml.safe_load(handle)


def _names(tasks):
    return [t.get('name', '') for t in tasks]


# The preflight's tasks that read the resolved pins: the single-word settings (slurm_version among them) are checked
# with this host's other inputs, the versions across the cluster with the cluster description.
SINGLE_WORD_CHECK = ("Check this host's part, pam_slurm_adopt, the limits, names, plugins, timeouts and GPU usage settings "
                     "(every failing check is listed)")
CLUSTER_CHECK = ('Check the cluster description, the Slurm versions across it and the node health program '
                 '(every failing check is listed)')


# ------------------------------------------------------------------ the role's files

def test_the_pins_default_to_the_archive_and_the_spec_says_so():
    defaults = _load(ROLE, 'defaults', 'main.yml')
    options = _load(ROLE, 'meta', 'argument_specs.yml')['argument_specs']['main']['options']
    for name in ('slurm_version', 'slurm_munge_version'):
        assert defaults[name] == '' and options[name]['default'] == ''
        assert 'docs/platforms.md' in ' '.join(options[name]['description'])
    # The packages whose archive version each pin follows: the source packages the table records.
    packages = _load(ROLE, 'vars', 'Debian.yml')['__slurm_archive_packages']
    assert packages == {'slurm_version': 'slurm-wlm', 'slurm_munge_version': 'munge'}
    for release in (('Debian', '12'), ('Debian', '13'), ('Ubuntu', '22.04'), ('Ubuntu', '24.04')):
        for package in packages.values():
            assert platforms.ARCHIVE[release][package], (release, package)


def test_the_lab_and_the_example_pin_what_their_archives_offer():
    # molecule's default scenario (Debian 12) and LAB_IMAGE=debian13 keep their versions, and the preflight's
    # archive check accepts them; inventories/example describes Ubuntu 22.04 (jammy) nodes: jammy's munge, and Slurm
    # 23.11.4 from the site's repository (jammy's archive Slurm, 21.08.5, is older than the role runs).
    lab = _load(REPO, 'inventories', 'lab', 'group_vars', 'all.yml')['lab_versions']
    assert lab['debian12'] == {'slurm': platforms.archive_version('Debian', '12', 'slurm-wlm'),
                               'munge': platforms.archive_version('Debian', '12', 'munge')} == {
                                   'slurm': '22.05.8', 'munge': '0.5.15'}
    assert lab['debian13'] == {'slurm': platforms.archive_version('Debian', '13', 'slurm-wlm'),
                               'munge': platforms.archive_version('Debian', '13', 'munge')} == {
                                   'slurm': '24.11.5', 'munge': '0.5.16'}
    example = _load(REPO, 'inventories', 'example', 'group_vars', 'gpucluster.yml')
    pins = {'slurm_version': example['slurm_version'], 'slurm_munge_version': example['slurm_munge_version']}
    packages = {'slurm_version': 'slurm-wlm', 'slurm_munge_version': 'munge'}
    assert pins == {'slurm_version': '23.11.4', 'slurm_munge_version': platforms.archive_version('Ubuntu', '22.04', 'munge')}
    assert example['slurm_apt_repository']['suites'] == 'jammy'
    assert platforms.pin_errors(pins, 'Ubuntu', '22.04', packages, own_repository=True) == []
    assert platforms.pin_errors(pins, 'Ubuntu', '22.04', packages)  # refused without the site's repository
    assert slurm_versions.support_errors(platforms.archive_version('Ubuntu', '22.04', 'slurm-wlm'))
    assert slurm_versions.support_errors(pins['slurm_version']) == []


def test_the_pins_are_resolved_before_anything_reads_them():
    preflight = _names(_load(ROLE, 'tasks', 'preflight.yml'))
    tasks = _load(ROLE, 'tasks', 'preflight.yml')
    pins = [t for t in tasks if t.get('ansible.builtin.import_tasks') == 'pins.yml']
    assert len(pins) == 1 and pins[0]['vars'] == {'__slurm_pins_check_offered': True}
    at = tasks.index(pins[0])
    assert preflight.index('Load the OS-specific settings') < at        # __slurm_archive_packages is loaded
    for reader in (SINGLE_WORD_CHECK, "Check slurm_version is a change that keeps the cluster's state "
                   "(SchedMD's upgrade window)", CLUSTER_CHECK):
        assert at < preflight.index(reader), reader
    assert preflight.index('Note this host\'s part in the cluster') < preflight.index(CLUSTER_CHECK)
    # tasks_from upgrade (playbooks/rolling_upgrade.yml): resolved too; the install checks the offer.
    upgrade = _load(ROLE, 'tasks', 'upgrade.yml')
    pins = [t for t in upgrade if t.get('ansible.builtin.import_tasks') == 'pins.yml']
    assert len(pins) == 1 and pins[0]['vars'] == {'__slurm_pins_check_offered': False}
    assert upgrade.index(pins[0]) < _names(upgrade).index("Check the versions and this host's part")
    assert _names(upgrade).index('Load the OS-specific settings') < upgrade.index(pins[0])


def test_the_os_family_refusal_says_what_a_rhel_site_does():
    task = [t for t in _load(ROLE, 'tasks', 'preflight.yml') if '__slurm_msg_os_family' in t.get('vars', {})][0]
    message = task['vars']['__slurm_msg_os_family']
    assert 'RHEL, Rocky and AlmaLinux 9 with Slurm from EPEL 9 or a site repository (slurm_dnf_repository)' in message
    assert 'leave this host out of the Slurm groups' in message


# ------------------------------------------------------------------ ansible-playbook

# A module that returns its argument as the host's facts (hostvars then carry them, as after gathering).
FACTS_MODULE = '''#!/usr/bin/python
from ansible.module_utils.basic import AnsibleModule
module = AnsibleModule(argument_spec={'facts': {'type': 'dict', 'required': True}})
module.exit_json(changed=False, ansible_facts=module.params['facts'])
'''

# host: (distribution, distribution_version, host variables)
PIN_HOSTS = {
    'd12': ('Debian', '12.7', {}),
    'd13': ('Debian', '13', {}),
    'u2204': ('Ubuntu', '22.04', {}),
    'u2404': ('Ubuntu', '24.04', {}),
    'u2004empty': ('Ubuntu', '20.04', {}),
    'u2004pinned': ('Ubuntu', '20.04', {'slurm_version': '23.02.7', 'slurm_munge_version': '0.5.13'}),
    'u2204other': ('Ubuntu', '22.04', {'slurm_version': '22.05.8', 'slurm_munge_version': ''}),
    'u2204repo': ('Ubuntu', '22.04', {'slurm_version': '22.05.8', 'slurm_munge_version': '',
                                      'slurm_apt_repository': {'uris': 'https://slurm.example.org/debian',
                                                               'suites': 'jammy', 'signed_by': '/etc/keys/slurm.asc'}}),
    'd12munge': ('Debian', '12', {'slurm_version': '', 'slurm_munge_version': '0.5.16'}),
    'd12full': ('Debian', '12', {'slurm_version': '22.05.8-4+deb12u3'}),
    # tasks_from upgrade: the install judges the offer (the lab's test double comes from a repository of its own).
    'd12upgrade': ('Debian', '12', {'slurm_version': '22.05.8.1', '__slurm_pins_check_offered': False}),
}
# Cluster A: the controller on Debian 12, one node on Debian 13, one on Ubuntu 22.04, pins empty.
# Cluster B: one release, one node pinned older inside the window (a rolling upgrade half done).
# Cluster C: a Debian 13 controller and a Debian 12 node, pins empty (22.05 is outside 24.11's window).
CLUSTERS = {
    'a': {'actl': ('Debian', '12', {}), 'anode1': ('Debian', '13', {}), 'anode2': ('Ubuntu', '22.04', {})},
    'b': {'bctl': ('Ubuntu', '24.04', {}), 'bnode1': ('Ubuntu', '24.04', {}),
          'bnode2': ('Ubuntu', '24.04', {'slurm_version': '23.02.7', 'slurm_apt_repository': {
              'uris': 'https://slurm.example.org/ubuntu', 'suites': 'noble', 'signed_by': '/etc/apt/keyrings/slurm.gpg'}})},
    'c': {'cctl': ('Debian', '13', {}), 'cnode1': ('Debian', '12', {})},
}


def _host(distribution, version, variables):
    return dict(variables, test_facts={'distribution': distribution, 'distribution_version': version,
                                       'os_family': 'Debian', 'architecture': 'x86_64'})


def _playbook(tmp_path):
    # The cross-node version check of the preflight's cluster check, alone (the cluster description beside it reads
    # what these plays do not set), with the role's own message.
    cluster = [t for t in _load(ROLE, 'tasks', 'preflight.yml') if t.get('name') == CLUSTER_CHECK]
    assert len(cluster) == 1
    assert '__slurm_version_errors | length > 0' in cluster[0]['vars']['__slurm_cluster_check_errors']
    check = [{'name': 'Check no Slurm host gets a version its slurmctld cannot talk to',
              'ansible.builtin.assert': {'that': '__slurm_version_errors | length == 0',
                                         'fail_msg': '{{ __slurm_msg_versions }}', 'quiet': True},
              'vars': {'__slurm_msg_versions': cluster[0]['vars']['__slurm_msg_versions']}}]
    inventory = {'all': {'vars': {'ansible_connection': 'local',
                                  'ansible_python_interpreter': '{{ ansible_playbook_python }}'},
                         'children': {'pins': {'hosts': dict((h, _host(*spec)) for h, spec in PIN_HOSTS.items())}}}}
    for name, hosts in CLUSTERS.items():
        inventory['all']['children']['cluster_' + name] = {
            'vars': {'slurm_controller_host': name + 'ctl'},
            'hosts': dict((h, _host(*spec)) for h, spec in hosts.items())}
    out = str(tmp_path / 'out')
    steps = [
        {'name': 'Stand in for fact gathering', 'facts_standin': {'facts': '{{ test_facts }}'}},
        {'name': 'Check and resolve the pins as the role does',
         'ansible.builtin.include_role': {'name': 'gpucluster.core.slurm', 'tasks_from': 'pins'},
         'vars': {'__slurm_archive_packages': _load(ROLE, 'vars', 'Debian.yml')['__slurm_archive_packages']}},
        {'name': 'Record what the rest of the run reads',
         'ansible.builtin.copy': {'dest': out + '/{{ inventory_hostname }}.json', 'mode': '0644',
                                  'content': "{{ {'slurm': slurm_version, 'munge': slurm_munge_version} | to_json }}"}},
    ]
    plays = [{'name': 'Pins', 'hosts': 'pins', 'gather_facts': False, 'tasks': steps}]
    # One play per cluster: the cross-node check reads the play's hosts.
    for name in sorted(CLUSTERS):
        plays.append({'name': 'Cluster ' + name, 'hosts': 'cluster_' + name, 'gather_facts': False,
                      'vars_files': [os.path.join(ROLE, 'vars', 'main.yml')],
                      'tasks': steps + [
                          {'name': "Note this host's part", 'ansible.builtin.set_fact': {
                              '__slurm_is_controller': '{{ inventory_hostname == slurm_controller_host }}',
                              '__slurm_is_compute': '{{ inventory_hostname != slurm_controller_host }}'}},
                          dict(check[0], register='cluster_check', ignore_errors=True),
                          {'name': 'Record what the check said',
                           'ansible.builtin.copy': {'dest': out + '/{{ inventory_hostname }}.check', 'mode': '0644',
                                                    'content': "{{ 'passed' if cluster_check is succeeded else cluster_check.msg }}"}}]})
    (tmp_path / 'out').mkdir()
    (tmp_path / 'library').mkdir()
    (tmp_path / 'library' / 'facts_standin.py').write_text(FACTS_MODULE)
    (tmp_path / 'hosts.yml').write_text(yaml.safe_dump(inventory))
    (tmp_path / 'play.yml').write_text(yaml.safe_dump(plays, sort_keys=False, width=200))


@pytest.fixture(scope='module')
def played(tmp_path_factory):
    if not os.path.exists(ANSIBLE_PLAYBOOK):
        pytest.skip('ansible-playbook not beside this python')
    tmp_path = tmp_path_factory.mktemp('pins')
    _playbook(tmp_path)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, 'collections'), ANSIBLE_NOCOLOR='1',
               ANSIBLE_LIBRARY=str(tmp_path / 'library'))
    proc = subprocess.run([ANSIBLE_PLAYBOOK, '-i', str(tmp_path / 'hosts.yml'), str(tmp_path / 'play.yml')],
                          cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=600, check=False)
    results = {}
    for name in os.listdir(str(tmp_path / 'out')):
        with open(str(tmp_path / 'out' / name)) as handle:
            results[name] = handle.read()
    return ' '.join(proc.stdout.split()), results


def _resolved(results, host):
    text = results.get(host + '.json')
    return json.loads(text) if text is not None else None


@pytest.mark.parametrize('host, slurm, munge', [
    ('d12', '22.05.8', '0.5.15'),          # Debian 12.7: a point release reads Debian 12's archive
    ('d13', '24.11.5', '0.5.16'),
    ('u2404', '23.11.4', '0.5.15'),
    ('u2004pinned', '23.02.7', '0.5.13'),  # a release the table does not know: explicit pins are kept
    ('u2204repo', '22.05.8', '0.5.14'),    # the site's repository: the pin stands, the empty munge pin resolves
    ('d12upgrade', '22.05.8.1', '0.5.15'),
])
def test_an_empty_pin_is_the_archive_version_and_a_pin_is_kept(played, host, slurm, munge):
    out, results = played
    assert _resolved(results, host) == {'slurm': slurm, 'munge': munge}, out[-3000:]


@pytest.mark.parametrize('host, message', [
    ('u2004empty', 'u2004empty: slurm_munge_version is empty, which means the munge version the node\'s archive offers, '
                   'but the platform table (docs/platforms.md) records none for Ubuntu 20.04: set slurm_munge_version to '
                   'the upstream version (the part before "-") that this host\'s package sources offer; '
                   'slurm_version is empty, which means the slurm-wlm version the node\'s archive offers, but the '
                   'platform table (docs/platforms.md) records none for Ubuntu 20.04: set slurm_version'),
    ('u2204other', 'u2204other: slurm_version = "22.05.8" is not offered on Ubuntu 22.04 (jammy): its archive has '
                   'slurm-wlm 21.08.5 (docs/platforms.md). Set slurm_version to "21.08.5" or leave it empty (the '
                   'archive\'s version), or install slurm-wlm 22.05.8 from your own package repository '
                   '(slurm_apt_repository). Nothing was changed.'),
    # Ubuntu 22.04's archive Slurm is 21.08.5: no cgroup/v2 plugin, on a release that boots cgroup v2.
    ('u2204', 'u2204: slurm_version 21.08.5 on Ubuntu 22.04 (jammy) is older than Slurm 22.05, the oldest release the '
              'slurm role runs: Slurm gained its cgroup/v2 plugin in 22.05'),
    ('d12munge', 'd12munge: slurm_munge_version = "0.5.16" is not offered on Debian 12 (bookworm): its archive has '
                 'munge 0.5.15'),
    # The full package version is no upstream version: the install would not find it.
    ('d12full', 'd12full: slurm_version = "22.05.8-4+deb12u3" is not offered on Debian 12 (bookworm): its archive has '
                'slurm-wlm 22.05.8 (docs/platforms.md). Set slurm_version to "22.05.8"'),
])
def test_a_pin_that_cannot_be_installed_is_refused_before_anything_changes(played, host, message):
    out, results = played
    assert host + '.json' not in results, out[-3000:]
    # The check's messages are printed as a YAML list: an item with an apostrophe is single-quoted, the apostrophe
    # doubled ('' is one ' in YAML).
    assert message in out.replace("''", "'"), out[-3000:]


def test_a_cluster_on_mixed_releases_is_refused_naming_each_host(played):
    out, results = played
    mixed = ("slurm_version differs across the cluster: the controller actl at 22.05.8 on Debian 12 (bookworm); "
             "newer than slurmctld: anode1 at 24.11.5 on Debian 13 (trixie). Every slurmd and client must run the "
             "controller's version or an older one inside its window (https://slurm.schedmd.com/upgrades.html"
             "#compatibility_window). An empty slurm_version is each node's own archive version (docs/platforms.md): "
             "on mixed releases set one slurm_version for the whole cluster that every release can install (with "
             "slurm_apt_repository where an archive does not offer it). Nothing was changed.")
    # Every host of the play stops, with the same message; the Ubuntu 22.04 node stopped before it (its archive's
    # Slurm 21.08 is older than the role runs).
    for host in ('actl', 'anode1'):
        assert results.get(host + '.check') == mixed, out[-3000:]
    assert 'anode2.check' not in results and 'anode2: slurm_version 21.08.5 on Ubuntu 22.04 (jammy) is older' in out
    # A Debian 13 controller with a Debian 12 node: 22.05 is outside 24.11's window.
    for host in ('cctl', 'cnode1'):
        assert results.get(host + '.check', '').startswith(
            "slurm_version differs across the cluster: the controller cctl at 24.11.5 on Debian 13 (trixie); older "
            "than the releases slurmctld 24.11 talks to (24.05, 23.11, 23.02): cnode1 at 22.05.8 on Debian 12 "
            "(bookworm)."), out[-3000:]


def test_a_node_one_release_behind_its_controller_passes(played):
    out, results = played
    for host in ('bctl', 'bnode1', 'bnode2'):
        assert results.get(host + '.check') == 'passed', out[-3000:]
    assert _resolved(results, 'bnode2') == {'slurm': '23.02.7', 'munge': '0.5.15'}
