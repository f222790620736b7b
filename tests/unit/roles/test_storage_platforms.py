# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""shared_storage and checkpoint_backup on each platform they support (Debian 12/13, Ubuntu 22.04/24.04, RHEL, Rocky
and AlmaLinux 9) and on platforms they refuse, from each platform's facts.

Four checks:

- the preflight of each role, run by ansible-playbook (local connection, --check) on one inventory host per platform
  and case, whose facts are the platform's (a stand-in module returns them as a module's facts, so the preflight does
  not gather this machine's): what it accepts and what it would install (the package names, the unit, the restic
  pin, the textfile directory), and what it refuses, by task and message. rpm, dnf and firewall-cmd do not exist on
  this machine: stand-ins named so (written here, answering per host from a table, logging every call) print what the
  real commands print on an EL host, as recorded in the comments beside each answer;
- the install tasks of each role (tasks/*.yml, every apt, dnf and package task) evaluated with Ansible's templar
  under each platform's facts and the vars file the preflight loads for it: exactly the tasks of the platform's
  package manager run, and every package they name is one the platform's archive (or EPEL) has, as listed below
  with a citation per platform;
- every condition of each role's full path (tasks/converge.yml's files) evaluated in order on each platform, in check
  mode and out of it, with only the results registered before it (a condition reading a result the other package
  manager's task registers later fails here, as it failed on a Debian 12 host in check mode);
- the templates of both roles rendered under each platform's names: the nfs.conf drop-in goes to a directory the
  platform's nfs-utils reads (conf.d support from nfs-utils 2.5.3), and the metrics file to the directory the
  platform's node_exporter reads (the monitoring role's directory for that family).

The fact sets, field by field (ansible_facts names; Ansible derives them from /etc/os-release and, on Debian,
/etc/debian_version):

- Debian 12: tests/unit/fixtures/k8s/facts-debian12.json, recorded with ``ansible -m setup`` on a Debian 12 machine
  (distribution Debian, distribution_version 12.11, distribution_major_version 12, distribution_release bookworm,
  os_family Debian, pkg_mgr apt); service_mgr is systemd (that machine's was a container's, process_api; the roles do
  not read it).
- Debian 13: os-release VERSION_ID="13", VERSION_CODENAME=trixie; distribution_version from /etc/debian_version as on
  Debian 12 (13.1); the rest as Debian 12.
- Ubuntu 22.04 and 24.04: os-release VERSION_ID="22.04" / "24.04", VERSION_CODENAME=jammy / noble; Ansible takes
  VERSION_ID as distribution_version and its first part as distribution_major_version (ansible/ansible
  test/units/module_utils/facts/system/distribution/fixtures/ubuntu_18.04.json: 18.04, 18, bionic).
- RHEL, Rocky and AlmaLinux 9: os-release ID=rhel / rocky / almalinux, VERSION_ID="9.4"; Ansible names them RedHat,
  Rocky and AlmaLinux, os_family RedHat (the same fixtures: redhat_7.7.json, rockylinux_8_3.json,
  almalinux_8_3_beta.json give distribution, distribution_version and distribution_major_version the same way);
  pkg_mgr dnf, service_mgr systemd. distribution_release is not read by the roles and left out.
- Refused: Debian 11 (bullseye), Ubuntu 20.04 (focal), RHEL 8.9, Fedora 40, built the same way.
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

from ansible_collections.gpucluster.core.plugins.module_utils import platforms

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), 'ansible-playbook')
RENDER = os.path.join(os.path.dirname(__file__), 'k8s_render.py')


def _yaml(*parts):
    with open(os.path.join(REPO, *parts)) as handle:
        return yaml.safe_load(handle)


def _recorded_debian12():
    with open(os.path.join(REPO, 'tests', 'unit', 'fixtures', 'k8s', 'facts-debian12.json')) as handle:
        recorded = json.load(handle)
    facts = dict((key, recorded['ansible_' + key]) for key in (
        'distribution', 'distribution_version', 'distribution_major_version', 'distribution_release', 'os_family',
        'pkg_mgr', 'system'))
    facts['service_mgr'] = 'systemd'
    return facts


def _facts(distribution, version, major, family, pkg_mgr, release=None):
    facts = {'distribution': distribution, 'distribution_version': version, 'distribution_major_version': major,
             'os_family': family, 'pkg_mgr': pkg_mgr, 'service_mgr': 'systemd', 'system': 'Linux'}
    if release:
        facts['distribution_release'] = release
    return facts


PLATFORMS = {
    'debian12': _recorded_debian12(),
    'debian13': _facts('Debian', '13.1', '13', 'Debian', 'apt', 'trixie'),
    'ubuntu2204': _facts('Ubuntu', '22.04', '22', 'Debian', 'apt', 'jammy'),
    'ubuntu2404': _facts('Ubuntu', '24.04', '24', 'Debian', 'apt', 'noble'),
    'rhel9': _facts('RedHat', '9.4', '9', 'RedHat', 'dnf'),
    'rocky9': _facts('Rocky', '9.4', '9', 'RedHat', 'dnf'),
    'alma9': _facts('AlmaLinux', '9.4', '9', 'RedHat', 'dnf'),
}
REFUSED_PLATFORMS = {
    'debian11': _facts('Debian', '11.9', '11', 'Debian', 'apt', 'bullseye'),
    'ubuntu2004': _facts('Ubuntu', '20.04', '20', 'Debian', 'apt', 'focal'),
    'rhel8': _facts('RedHat', '8.9', '8', 'RedHat', 'dnf'),
    'fedora40': _facts('Fedora', '40', '40', 'RedHat', 'dnf'),
}

# What each platform's package sources offer: {package: upstream version, or '' where only the name matters}.
DEBIAN12 = {
    # packages.debian.org, bookworm (and apt-cache policy on a Debian 12 machine): nfs-common and
    # nfs-kernel-server 1:2.6.2-4+deb12u1 (source nfs-utils), restic 0.14.0-1+b5, openssh-client 1:9.2p1-2+deb12u*.
    'nfs-common': '2.6.2', 'nfs-kernel-server': '2.6.2', 'restic': '0.14.0', 'openssh-client': '',
}
DEBIAN13 = {
    # packages.debian.org, trixie: nfs-kernel-server 1:2.8.3-1 (nfs-common from the same source), restic
    # 0.18.0-1+b4, openssh-client 1:10.0p1-7+deb13u1.
    'nfs-common': '2.8.3', 'nfs-kernel-server': '2.8.3', 'restic': '0.18.0', 'openssh-client': '',
}
UBUNTU2204 = {
    # packages.ubuntu.com jammy: nfs-kernel-server's file list (nfs-server.service, nfs-kernel-server.service);
    # manpages.ubuntu.com jammy: nfs-common 2.6.1-1ubuntu1.2. restic: 0.12.1, the platform table's row (docs/platforms.md:
    # the jammy page itself was not in the reference corpus; noble's page lists jammy among restic's suites).
    'nfs-common': '2.6.1', 'nfs-kernel-server': '2.6.1', 'restic': '0.12.1', 'openssh-client': '',
}
UBUNTU2404 = {
    # manpages.ubuntu.com noble: nfs-common 2.6.4-3ubuntu5.1 (nfs-kernel-server from the same source, nfs-utils);
    # packages.ubuntu.com noble: restic 0.16.4-2 (noble-updates 0.16.4-2ubuntu0.24.04.3).
    'nfs-common': '2.6.4', 'nfs-kernel-server': '2.6.4', 'restic': '0.16.4', 'openssh-client': '',
}
EL9 = {
    # RHEL 9 sources (the OpenELA rebuild's el9 branches): nfs-utils 2.5.4-20.el9 (nfs-server.service, /etc/exports.d;
    # client and server in one package), openssh 8.7p1 (subpackage openssh-clients: /usr/bin/ssh; the base package
    # openssh: ssh-keygen; openssh-server: /usr/libexec/openssh/sftp-server), dnf-plugins-core 4.3.0 (subpackage
    # python3-dnf-plugin-versionlock). restic: EPEL 9 (restic's documentation, "RHEL & CentOS Stream": dnf install
    # epel-release; dnf install restic); its version is read from the host, not recorded here.
    'nfs-utils': '2.5.4', 'openssh-clients': '', 'python3-dnf-plugin-versionlock': '', 'restic': '',
}
ARCHIVES = {'debian12': DEBIAN12, 'debian13': DEBIAN13, 'ubuntu2204': UBUNTU2204, 'ubuntu2404': UBUNTU2404,
            'rhel9': EL9, 'rocky9': EL9, 'alma9': EL9}
# The NFS server's unit in each platform's packages: nfs-server.service everywhere (Debian's and Ubuntu's
# nfs-kernel-server.service is a symbolic link to it in the package; EL's nfs-utils spec enables nfs-server.service).
NFS_SERVER_UNIT = 'nfs-server.service'
# /etc/nfs.conf.d/*.conf is read from nfs-utils 2.5.3 on (upstream commit 15e17993, "conffile: process config.d
# directory config files", first tagged nfs-utils-2-5-3); Debian and Ubuntu ignore /etc/default/nfs-* under systemd
# from 1:2.6.1 on (nfs-common's NEWS.Debian, 1:2.6.1-1; Ubuntu's README.Ubuntu).
NFS_CONF_D_FROM = (2, 5, 3)

_SFTP = {'checkpoint_backup_sftp_target': 'backup@backuphost:/srv/restic', 'checkpoint_backup_password': 'pw',
         'checkpoint_backup_sftp_known_hosts': ['backuphost ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA']}


def _version(text):
    return tuple(int(part) for part in text.split('.'))


# ------------------------------------------------------------------ the stand-ins for rpm, dnf and firewall-cmd

STAND_IN = '''#!PYTHON
# Test double of NAME for tests/unit/roles/test_storage_platforms.py: answers from answers.json by host and argv.
import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
argv = [os.path.basename(sys.argv[0])] + sys.argv[1:]
host = os.environ.get('GPUCLUSTER_STUB_HOST', '')
with open(os.path.join(here, 'calls.jsonl'), 'a') as handle:
    handle.write(json.dumps([host] + argv) + '\\n')
with open(os.path.join(here, 'answers.json')) as handle:
    answer = json.load(handle).get(host, {}).get(json.dumps(argv))
if answer is None:
    sys.stderr.write(argv[0] + ': command not found\\n')
    sys.exit(127)
sys.stdout.write(answer.get('stdout', ''))
sys.stderr.write(answer.get('stderr', ''))
sys.exit(answer.get('rc', 0))
'''
RPM_QUERY = ['rpm', '-q', '--queryformat', '%{VERSION}\n', 'restic']
DNF_QUERY = ['dnf', '--quiet', 'repoquery', '--available', '--queryformat', '%{version}', 'restic']
# rpm -q of a package that is not installed: the sentence on stdout, exit 1 (rpm(8)).
RPM_NONE = {json.dumps(RPM_QUERY): {'rc': 1, 'stdout': 'package restic is not installed\n'}}
# firewall-cmd on RHEL 9.2 (remotelyqueued/rhel9 README, a recorded session): --state says running; the default and
# active zone is public; --list-all of it, services without nfs.
FIREWALLD_RUNNING = {
    json.dumps(['firewall-cmd', '--state']): {'stdout': 'running\n'},
    json.dumps(['firewall-cmd', '--get-default-zone']): {'stdout': 'public\n'},
    json.dumps(['firewall-cmd', '--get-active-zones']): {'stdout': 'public\n  interfaces: ens192\n'},
}
RHEL92_PUBLIC = ('public (active)\n  target: default\n  icmp-block-inversion: no\n  interfaces: ens192\n  sources: \n'
                 '  services: dhcp dns http samba\n  ports: 34522/tcp\n  protocols: \n  forward: yes\n  masquerade: no\n'
                 '  forward-ports: \n  source-ports: \n  icmp-blocks: \n  rich rules: \n')
FIREWALLD_CLOSED = dict(FIREWALLD_RUNNING, **{
    json.dumps(['firewall-cmd', '--zone', 'public', '--list-all']): {'stdout': RHEL92_PUBLIC}})
FIREWALLD_OPEN = dict(FIREWALLD_RUNNING, **{
    json.dumps(['firewall-cmd', '--zone', 'public', '--list-all']): {
        'stdout': RHEL92_PUBLIC.replace('services: dhcp dns http samba', 'services: dhcp dns http nfs samba')}})

# (host, role, platform, host variables, stand-in answers, expected: ('accepted', plan) or ('refused', task, texts))
_CLIENT = {'shared_storage_mode': 'client', 'shared_storage_nfs_server': 'filer.example.org'}
_SERVER = {'shared_storage_mode': 'server', 'shared_storage_export_clients': ['10.0.0.0/16']}
_DEB_CLIENT = {'pkg_mgr': 'apt', 'packages': ['nfs-common'], 'services': []}
_EL_CLIENT = {'pkg_mgr': 'dnf', 'packages': ['nfs-utils'], 'services': []}
_SUPPORTED = 'Debian 12, Debian 13, Ubuntu 22.04, Ubuntu 24.04, RedHat 9, Rocky 9, AlmaLinux 9'
# checkpoint_backup's merged checks: the inputs and the platform, and what the node reports (restic among them).
_CB_INPUTS = ('Check the platform, the paths, the marker, the numbers, the repository and the values written into the units'
              ' (every failing check is listed)')
_CB_NODE = ("Check the restic to install, the schedules, the node's Python and root access to the share"
            ' (every failing check is listed)')
CASES = [
    ('ss-client-debian12', 'shared_storage', 'debian12', _CLIENT, {}, ('accepted', _DEB_CLIENT)),
    ('ss-client-debian13', 'shared_storage', 'debian13', _CLIENT, {}, ('accepted', _DEB_CLIENT)),
    ('ss-client-ubuntu2204', 'shared_storage', 'ubuntu2204', _CLIENT, {}, ('accepted', _DEB_CLIENT)),
    ('ss-client-ubuntu2404', 'shared_storage', 'ubuntu2404', _CLIENT, {}, ('accepted', _DEB_CLIENT)),
    ('ss-client-rhel9', 'shared_storage', 'rhel9', _CLIENT, {}, ('accepted', _EL_CLIENT)),
    ('ss-client-rocky9', 'shared_storage', 'rocky9', _CLIENT, {}, ('accepted', _EL_CLIENT)),
    ('ss-client-alma9', 'shared_storage', 'alma9', _CLIENT, {}, ('accepted', _EL_CLIENT)),
    # No firewall-cmd on the host (Debian's and Ubuntu's default): nothing to check.
    ('ss-server-debian12', 'shared_storage', 'debian12', _SERVER, {},
     ('accepted', {'pkg_mgr': 'apt', 'packages': ['nfs-kernel-server'], 'services': [NFS_SERVER_UNIT]})),
    ('ss-server-ubuntu2404', 'shared_storage', 'ubuntu2404', _SERVER, {},
     ('accepted', {'pkg_mgr': 'apt', 'packages': ['nfs-kernel-server'], 'services': [NFS_SERVER_UNIT]})),
    ('ss-server-rhel9-firewalld-closed', 'shared_storage', 'rhel9', _SERVER, FIREWALLD_CLOSED,
     ('refused', 'Check firewalld lets the NFS clients in',
      ['firewalld runs on ss-server-rhel9-firewalld-closed and none of its active zones (public) lets NFS in',
       'firewall-cmd --permanent --zone=public --add-service=nfs', 'shared_storage_check_firewalld: false'])),
    ('ss-server-rocky9-firewalld-open', 'shared_storage', 'rocky9', _SERVER, FIREWALLD_OPEN,
     ('accepted', {'pkg_mgr': 'dnf', 'packages': ['nfs-utils'], 'services': [NFS_SERVER_UNIT]})),
    ('ss-server-alma9-check-off', 'shared_storage', 'alma9', dict(_SERVER, shared_storage_check_firewalld=False),
     FIREWALLD_CLOSED, ('accepted', {'pkg_mgr': 'dnf', 'packages': ['nfs-utils'], 'services': [NFS_SERVER_UNIT]})),
] + [
    ('ss-client-' + name, 'shared_storage', name, _CLIENT, {},
     ('refused', 'Check the platform, the mode, the paths, the client mounts and the exports (every failing check is listed)',
      ['shared_storage supports ' + _SUPPORTED + ' (RedHat: RHEL); this host reports %s %s (os_family %s)' % (
          facts['distribution'], facts['distribution_version'], facts['os_family'])]))
    for name, facts in sorted(REFUSED_PLATFORMS.items())
] + [
    ('cb-debian12', 'checkpoint_backup', 'debian12', {}, {},
     ('accepted', {'pkg_mgr': 'apt', 'pin': '0.14.0', 'packages': ['restic', 'openssh-client'],
                   'textfile': '/var/lib/prometheus/node-exporter'})),
    ('cb-debian13', 'checkpoint_backup', 'debian13', {}, {},
     ('accepted', {'pkg_mgr': 'apt', 'pin': '0.18.0', 'packages': ['restic', 'openssh-client'],
                   'textfile': '/var/lib/prometheus/node-exporter'})),
    ('cb-ubuntu2404', 'checkpoint_backup', 'ubuntu2404', {}, {},
     ('accepted', {'pkg_mgr': 'apt', 'pin': '0.16.4', 'packages': ['restic', 'openssh-client'],
                   'textfile': '/var/lib/prometheus/node-exporter'})),
    ('cb-ubuntu2204', 'checkpoint_backup', 'ubuntu2204', {}, {},
     ('refused', _CB_NODE,
      ['Ubuntu 22.04 offers restic 0.12.1 (from its archive), older than restic 0.14.0, the oldest the role runs',
       'repository format version 2', 'set checkpoint_backup_restic_version to that version',
       'or run the backup on Debian 12/13, Ubuntu 24.04 or RHEL, Rocky or AlmaLinux 9'])),
    # A site repository that offers a newer restic: the pin says so.
    ('cb-ubuntu2204-site-restic', 'checkpoint_backup', 'ubuntu2204', {'checkpoint_backup_restic_version': '0.16.4'}, {},
     ('accepted', {'pkg_mgr': 'apt', 'pin': '0.16.4', 'packages': ['restic', 'openssh-client'],
                   'textfile': '/var/lib/prometheus/node-exporter'})),
    ('cb-debian12-old-pin', 'checkpoint_backup', 'debian12', {'checkpoint_backup_restic_version': '0.12.1'}, {},
     ('refused', _CB_NODE,
      ['checkpoint_backup_restic_version=0.12.1 is older than restic 0.14.0, the oldest the role runs'])),
    ('cb-debian12-bad-pin', 'checkpoint_backup', 'debian12', {'checkpoint_backup_restic_version': '0.14'}, {},
     ('refused', _CB_INPUTS,
      ['checkpoint_backup_restic_version must be empty or an upstream version as 0.14.0 (got "0.14").'])),
    # EPEL not enabled: rpm has no restic, dnf finds none (repoquery prints nothing and exits 0).
    ('cb-rhel9-no-epel', 'checkpoint_backup', 'rhel9', {}, dict(RPM_NONE, **{json.dumps(DNF_QUERY): {'stdout': ''}}),
     ('refused', _CB_NODE,
      ['restic is neither installed on cb-rhel9-no-epel (RedHat 9) nor offered by its enabled repositories',
       'EPEL, which this role does not enable'])),
    ('cb-rocky9-epel', 'checkpoint_backup', 'rocky9', {}, dict(RPM_NONE, **{json.dumps(DNF_QUERY): {'stdout': '0.18.1\n'}}),
     ('accepted', {'pkg_mgr': 'dnf', 'pin': '0.18.1', 'packages': ['restic', 'openssh-clients'],
                   'textfile': '/var/lib/node_exporter/textfile_collector'})),
    # Installed (and locked) already: kept, and dnf is not asked (a dnf call would get no answer and fail).
    ('cb-alma9-installed', 'checkpoint_backup', 'alma9', {}, {json.dumps(RPM_QUERY): {'stdout': '0.17.3\n'}},
     ('accepted', {'pkg_mgr': 'dnf', 'pin': '0.17.3', 'packages': ['restic', 'openssh-clients'],
                   'textfile': '/var/lib/node_exporter/textfile_collector'})),
    ('cb-rhel9-pin-not-offered', 'checkpoint_backup', 'rhel9', {'checkpoint_backup_restic_version': '0.16.0'},
     dict(RPM_NONE, **{json.dumps(DNF_QUERY): {'stdout': '0.18.1\n'}}),
     ('refused', _CB_NODE,
      ['checkpoint_backup_restic_version=0.16.0 is neither installed on cb-rhel9-pin-not-offered (no restic) nor offered',
       'they offer 0.18.1'])),
    ('cb-rhel9-dnf-fails', 'checkpoint_backup', 'rhel9', {},
     dict(RPM_NONE, **{json.dumps(DNF_QUERY): {'rc': 1, 'stderr': "Error: Failed to download metadata for repo 'epel'\n"}}),
     ('refused', _CB_NODE,
      ["dnf could not read the repositories of cb-rhel9-dnf-fails to find restic (rc 1:",
       "Failed to download metadata for repo 'epel'"])),
] + [
    ('cb-' + name, 'checkpoint_backup', name, {}, {},
     ('refused', _CB_INPUTS,
      ['checkpoint_backup supports ' + _SUPPORTED + ' (RedHat: RHEL), with restic from the host\'s package sources; '
       'this host reports %s %s (os_family %s)' % (facts['distribution'], facts['distribution_version'], facts['os_family'])]))
    for name, facts in sorted(REFUSED_PLATFORMS.items())
]

FACTS_MODULE = '''#!/usr/bin/python
from ansible.module_utils.basic import AnsibleModule
module = AnsibleModule(argument_spec={'facts': {'type': 'dict', 'required': True}}, supports_check_mode=True)
module.exit_json(changed=False, ansible_facts=module.params['facts'])
'''

PLAY = '''- name: The preflights of shared_storage and checkpoint_backup on every platform
  hosts: all
  gather_facts: false
  environment:
    GPUCLUSTER_STUB_HOST: "{{ inventory_hostname }}"
  tasks:
    - name: Take the platform's facts
      platform_facts:
        facts: "{{ platform_facts }}"

    - name: Run the role's preflight and say what it would install
      block:
        - name: Preflight
          ansible.builtin.include_role:
            name: "gpucluster.core.{{ role_under_test }}"
            tasks_from: preflight
            public: true

        - name: Write the plan
          ansible.builtin.copy:
            content: "{{ {'outcome': 'accepted', 'plan': plan} | to_json }}"
            dest: "{{ out_dir }}/{{ inventory_hostname }}.json"
            mode: "0644"
          check_mode: false
          vars:
            plan: >-
              {{ {'pkg_mgr': __shared_storage_pkg_mgr, 'packages': __shared_storage_fast_path.packages,
                  'services': __shared_storage_fast_path.services}
                 if role_under_test == 'shared_storage' else
                 {'pkg_mgr': __checkpoint_backup_pkg_mgr, 'pin': __checkpoint_backup_restic_pin,
                  'packages': __checkpoint_backup_fast_path.packages, 'textfile': __checkpoint_backup_textfile_path} }}
      rescue:
        - name: Write the refusal
          ansible.builtin.copy:
            content: "{{ {'outcome': 'refused', 'task': ansible_failed_task.name, 'msg': ansible_failed_result.msg} | to_json }}"
            dest: "{{ out_dir }}/{{ inventory_hostname }}.json"
            mode: "0644"
          check_mode: false
'''


@pytest.fixture(scope='module')
def preflights(tmp_path_factory):
    if not os.path.exists(ANSIBLE_PLAYBOOK):
        pytest.skip('ansible-playbook not beside this python')
    work = tmp_path_factory.mktemp('storage-platforms')
    stubs = work / 'stubs'
    stubs.mkdir()
    for name in ('rpm', 'dnf', 'firewall-cmd'):
        path = stubs / name
        path.write_text(STAND_IN.replace('PYTHON', sys.executable).replace('NAME', name))
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    (stubs / 'answers.json').write_text(json.dumps(dict((case[0], case[4]) for case in CASES)))
    (stubs / 'calls.jsonl').write_text(u'')
    (work / 'library').mkdir()
    (work / 'library' / 'platform_facts.py').write_text(FACTS_MODULE)
    (work / 'out').mkdir()
    hosts = {}
    for host, role, platform, variables, _answers, _expected in CASES:
        facts = PLATFORMS.get(platform) or REFUSED_PLATFORMS[platform]
        hosts[host] = dict(variables, ansible_connection='local', ansible_python_interpreter=sys.executable,
                           role_under_test=role, platform_facts=facts, out_dir=str(work / 'out'))
        if role == 'checkpoint_backup':
            hosts[host] = dict(_SFTP, **hosts[host])
    (work / 'hosts.yml').write_text(json.dumps({'all': {'hosts': hosts}}))
    (work / 'play.yml').write_text(PLAY)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, 'collections'), ANSIBLE_NOCOLOR='1',
               ANSIBLE_RETRY_FILES_ENABLED='0', ANSIBLE_LOCAL_TEMP=str(work / 'tmp'),
               PATH=str(stubs) + os.pathsep + os.environ.get('PATH', ''))
    proc = subprocess.run([ANSIBLE_PLAYBOOK, '-i', 'hosts.yml', 'play.yml', '--check'], cwd=str(work), env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, check=False,
                          timeout=900)
    assert proc.returncode == 0, proc.stdout[-6000:]
    # --check and a preflight: nothing on the host would change; the one change of each host is the file this test
    # reads (written outside check mode, into this test's directory).
    recap = [line for line in proc.stdout.splitlines() if ' : ok=' in line]
    assert len(recap) == len(hosts) and all(' changed=1 ' in line and ' failed=0 ' in line for line in recap), recap
    results = {}
    for host in hosts:
        with open(str(work / 'out' / (host + '.json'))) as handle:
            results[host] = json.load(handle)
    calls = [json.loads(line) for line in (stubs / 'calls.jsonl').read_text().splitlines() if line.strip()]
    return results, calls


@pytest.mark.parametrize('host, role, platform, variables, answers, expected', CASES, ids=[case[0] for case in CASES])
def test_preflight_on_the_platform(preflights, host, role, platform, variables, answers, expected):
    results, _calls = preflights
    result = results[host]
    if expected[0] == 'accepted':
        assert result == {'outcome': 'accepted', 'plan': expected[1]}, result
        for package in expected[1]['packages']:
            assert package in ARCHIVES[platform], (platform, package)
        return
    assert result['outcome'] == 'refused' and result['task'] == expected[1], result
    message = result['msg'] if isinstance(result['msg'], str) else ' '.join(result['msg'])
    for text in expected[2]:
        assert text in message, (text, message)


def test_the_host_is_asked_only_what_its_platform_needs(preflights):
    """dnf reads the repositories only when restic is not installed (or not the pinned one); firewall-cmd runs on an
    NFS server only, and not when the check is off; Debian and Ubuntu hosts run neither rpm nor dnf."""
    _results, calls = preflights
    by_host = {}
    for call in calls:
        by_host.setdefault(call[0], []).append(call[1:])
    assert by_host['cb-alma9-installed'] == [RPM_QUERY]
    assert by_host['cb-rocky9-epel'] == [RPM_QUERY, DNF_QUERY]
    assert 'ss-server-alma9-check-off' not in by_host
    assert by_host['ss-server-rocky9-firewalld-open'] == [
        ['firewall-cmd', '--state'], ['firewall-cmd', '--get-default-zone'], ['firewall-cmd', '--get-active-zones'],
        ['firewall-cmd', '--zone', 'public', '--list-all']]
    assert by_host['ss-server-debian12'] == [['firewall-cmd', '--state']]
    for host, role, platform, _variables, _answers, _expected in CASES:
        facts = PLATFORMS.get(platform) or REFUSED_PLATFORMS[platform]
        commands = set(call[0] for call in by_host.get(host, []))
        if role == 'shared_storage':
            assert commands <= ({'firewall-cmd'} if host.startswith('ss-server-') else set()), (host, commands)
        elif facts['pkg_mgr'] == 'apt':
            assert not commands, (host, commands)


def test_every_supported_platform_is_tried_both_ways():
    """Each supported platform is accepted by each role in some case (or refused with its archive's restic named), and
    each refused platform is refused by both."""
    for role in ('shared_storage', 'checkpoint_backup'):
        tried = set(case[2] for case in CASES if case[1] == role)
        assert set(PLATFORMS) | set(REFUSED_PLATFORMS) <= tried, (role, tried)


# ------------------------------------------------------------------ the install tasks and templates, by platform

def _render(jobs):
    proc = subprocess.run([sys.executable, RENDER], input=json.dumps(jobs), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=300, check=False,
                          env=dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, 'collections')))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def _os_vars(role, facts):
    """The vars file the role's preflight loads for FACTS, found as its first_found finds it."""
    task = [t for t in _yaml('roles', role, 'tasks', 'preflight.yml') if 'ansible.builtin.include_vars' in t][0]
    lookup = task['vars']['__%s_vars_files' % role]
    assert lookup['paths'] == ["{{ role_path }}/vars"]
    names = [name.replace("{{ ansible_facts['distribution'] }}", facts['distribution'])
             .replace("{{ ansible_facts['distribution_major_version'] }}", facts['distribution_major_version'])
             .replace("{{ ansible_facts['os_family'] }}", facts['os_family']) for name in lookup['files']]
    for name in names:
        if os.path.exists(os.path.join(REPO, 'roles', role, 'vars', name)):
            return _yaml('roles', role, 'vars', name)
    raise AssertionError('%s: no vars file among %s' % (role, names))


def _variables(role, facts, extra):
    variables = dict(_os_vars(role, facts), ansible_facts=facts, role_path=os.path.join(REPO, 'roles', role),
                     inventory_hostname='node1', ansible_check_mode=False,
                     ansible_managed='Managed by Ansible (gpucluster.core)')
    variables.update(extra)
    return variables


def _install_tasks(role):
    tasks = []
    for name in sorted(os.listdir(os.path.join(REPO, 'roles', role, 'tasks'))):
        stack = list(_yaml('roles', role, 'tasks', name) or [])
        while stack:
            task = stack.pop(0)
            for key in ('block', 'rescue', 'always'):
                stack[0:0] = task.get(key) or []
            for module in ('ansible.builtin.apt', 'ansible.builtin.dnf', 'ansible.builtin.package'):
                if module in task:
                    tasks.append((name, task, module))
    return tasks


def _when(task):
    when = task.get('when', [])
    return [when] if isinstance(when, (str, bool)) else list(when)


# Each role's modes, as the install tasks see them (the registered results they read stand for a fresh host).
MODES = {
    'shared_storage': [{'shared_storage_mode': 'server'}, {'shared_storage_mode': 'client'}],
    'checkpoint_backup': [{'__checkpoint_backup_restic_rpm': {'rc': 1, 'stdout': ''},
                           '__checkpoint_backup_restic_dnf': {'rc': 0, 'stdout_lines': ['0.18.1']}}],
}
# The tasks files each mode includes (tasks/converge.yml).
MODE_FILES = {'server': {'server.yml'}, 'client': {'client.yml'}}


@pytest.mark.parametrize('platform', sorted(PLATFORMS))
@pytest.mark.parametrize('role', sorted(MODES))
def test_the_install_tasks_name_packages_the_platform_has(role, platform):
    facts = PLATFORMS[platform]
    tasks = _install_tasks(role)
    assert set(module for _name, _task, module in tasks) == {'ansible.builtin.apt', 'ansible.builtin.dnf'}, tasks
    jobs, index = [], []
    for mode in MODES[role]:
        variables = _variables(role, facts, mode)
        for name, task, module in tasks:
            if role == 'shared_storage' and name not in MODE_FILES[mode['shared_storage_mode']]:
                continue
            conditions = [c if isinstance(c, str) else str(c) for c in _when(task)]
            jobs.append({'role': role, 'variables': variables,
                         'expression': '{{ %s }}' % (' and '.join('(%s)' % c for c in conditions) or 'true')})
            names = task[module]['name']
            names = [names] if isinstance(names, str) else names
            jobs.extend({'role': role, 'variables': variables, 'expression': entry} for entry in names)
            index.append((name, task['name'], module, len(names)))
    results = iter(_render(jobs))
    installed = []
    for name, task_name, module, count in index:
        runs = next(results)
        packages = [next(results) for _entry in range(count)]
        assert runs in (True, False), (task_name, runs)
        # Each install task belongs to one package manager, and runs exactly on its platforms.
        assert runs == (module == 'ansible.builtin.%s' % facts['pkg_mgr']), (platform, task_name, runs)
        if not runs:
            continue
        # A name is a package or a list of them (a variable the vars file sets).
        packages = [item for entry in packages for item in ([entry] if isinstance(entry, str) else entry)]
        for spec in packages:
            # apt 'restic=0.14.0-*', dnf 'restic-0.18.1': the package is the name before the version.
            package = spec.split('=')[0]
            if module == 'ansible.builtin.dnf' and package.startswith('restic-'):
                package = 'restic'
            installed.append(package)
            assert package in ARCHIVES[platform], '%s: %s installs %s, which %s does not have' % (
                name, task_name, package, platform)
    expected = {
        'shared_storage': {'Debian': {'nfs-common', 'nfs-kernel-server'}, 'RedHat': {'nfs-utils'}},
        'checkpoint_backup': {'Debian': {'restic', 'openssh-client'},
                              'RedHat': {'restic', 'openssh-clients', 'python3-dnf-plugin-versionlock'}},
    }[role][facts['os_family']]
    assert set(installed) == expected, (platform, installed)


# The tasks files of each role's full path after the preflight, in the order tasks/converge.yml runs them.
PATHS = {
    ('shared_storage', 'server'): ['server.yml', 'layout.yml'],
    ('shared_storage', 'client'): ['client.yml', 'layout.yml'],
    ('checkpoint_backup', 'sftp'): ['install.yml', 'configure.yml', 'repository.yml', 'timer.yml'],
}
# What the preflight registered (a fresh EL host: no restic, EPEL offering one; no users to look up).
PREFLIGHT_REGISTERS = {
    'shared_storage': {'__shared_storage_user_lookup': {'results': []}},
    'checkpoint_backup': MODES['checkpoint_backup'][0],
}


@pytest.mark.parametrize('check_mode', [False, True], ids=['run', 'check'])
@pytest.mark.parametrize('platform', sorted(PLATFORMS))
@pytest.mark.parametrize('role, path', sorted(PATHS), ids=['%s-%s' % key for key in sorted(PATHS)])
def test_every_condition_of_the_full_path_evaluates_in_order(role, path, platform, check_mode):
    """Each task's conditions evaluate on each platform, in check mode and out of it, with only the results the
    tasks before it registered (a condition reading a result registered later, or on the other package manager's
    path only, fails here as it fails on the host)."""
    facts = PLATFORMS[platform]
    mode = {'shared_storage_mode': path, 'shared_storage_mount': True} if role == 'shared_storage' else {}
    base = _variables(role, facts, dict(PREFLIGHT_REGISTERS[role], ansible_check_mode=check_mode, **mode))
    jobs, registered = [], {}
    for name in PATHS[(role, path)]:
        stack = list(_yaml('roles', role, 'tasks', name) or [])
        while stack:
            task = stack.pop(0)
            inner = [t for key in ('block', 'rescue', 'always') for t in task.get(key) or []]
            conditions = [c if isinstance(c, str) else str(c) for c in _when(task)]
            if conditions:
                jobs.append({'role': role, 'variables': dict(base, **registered),
                             'expression': '{{ %s }}' % ' and '.join('(%s)' % c for c in conditions)})
            stack[0:0] = inner
            if task.get('register'):
                # A result as a task leaves it when it ran and changed nothing (the conditions read changed, msg, rc).
                registered[task['register']] = {'changed': False, 'rc': 0, 'msg': '', 'results': [], 'stdout': ''}
    assert jobs
    assert all(result in (True, False) for result in _render(jobs))


@pytest.mark.parametrize('platform', sorted(PLATFORMS))
def test_the_archive_restic_table_is_what_the_archives_offer(platform):
    facts = PLATFORMS[platform]
    offered = platforms.archive_version(facts['distribution'], facts['distribution_version'], 'restic')
    if facts['pkg_mgr'] == 'dnf':
        # EPEL keeps its newest build only: the version is read from the host (the preflight cases above).
        assert offered == ''
        return
    assert offered == ARCHIVES[platform]['restic'], (platform, offered)
    minimum = _yaml('roles', 'checkpoint_backup', 'vars', 'main.yml')['__checkpoint_backup_restic_minimum']
    # Only Ubuntu 22.04's archive is older than the role's minimum (and refused in the preflight above).
    assert (_version(offered) < _version(minimum)) == (platform == 'ubuntu2204'), (platform, offered, minimum)


@pytest.mark.parametrize('platform', sorted(PLATFORMS))
def test_the_templates_render_for_the_platform(platform):
    facts = PLATFORMS[platform]
    storage = _variables('shared_storage', facts, {'shared_storage_nfs_server': 'filer.example.org',
                                                   'shared_storage_export_clients': ['10.0.0.0/16']})
    unit = {'name': 'checkpoints', 'what': 'filer.example.org:/srv/shared/checkpoints', 'where': '/shared/checkpoints',
            'options': ['rw', 'hard', 'nfsvers=4.2']}
    backup = _variables('checkpoint_backup', facts, _SFTP)
    jobs = [{'role': 'shared_storage', 'variables': storage, 'template': name} for name in (
        'nfs.conf.j2', 'gpucluster.exports.j2', 'slurmd-shared-storage.conf.j2')]
    jobs += [{'role': 'shared_storage', 'variables': dict(storage, __shared_storage_unit=unit), 'template': name}
             for name in ('storage.mount.j2', 'storage.automount.j2')]
    jobs += [{'role': 'shared_storage', 'variables': storage, 'expression': '{{ __shared_storage_nfs_conf }}'},
             {'role': 'checkpoint_backup', 'variables': backup,
              'template': 'etc/gpucluster/checkpoint-backup.json.j2'}]
    units = sorted(os.listdir(os.path.join(REPO, 'roles', 'checkpoint_backup', 'templates', 'etc', 'systemd', 'system')))
    jobs += [{'role': 'checkpoint_backup', 'variables': backup, 'template': 'etc/systemd/system/' + name} for name in units]
    out = _render(jobs)
    nfs_conf, exports, dropin, mount, automount, nfs_conf_path, config = out[:7]
    assert '[nfsd]\nthreads=64\nvers4.2=y' in nfs_conf
    assert [line for line in exports.splitlines() if line and not line.startswith('#')] == [
        '/srv/shared/datasets 10.0.0.0/16(ro,sync,root_squash,no_subtree_check)',
        '/srv/shared/checkpoints 10.0.0.0/16(rw,sync,root_squash,no_subtree_check)'], exports
    assert 'RequiresMountsFor=/shared/datasets /shared/checkpoints' in dropin
    assert 'What=filer.example.org:/srv/shared/checkpoints' in mount and 'Type=nfs' in mount
    assert 'Where=/shared/checkpoints' in automount
    # The drop-in directory is one the platform's nfs-utils reads.
    nfs_utils = ARCHIVES[platform].get('nfs-utils') or ARCHIVES[platform]['nfs-kernel-server']
    assert nfs_conf_path.startswith('/etc/nfs.conf.d/') and _version(nfs_utils) >= NFS_CONF_D_FROM, (platform, nfs_utils)
    # The metrics go where the platform's node_exporter reads them (the monitoring role's directory for the family).
    config = json.loads(config)
    monitoring = _yaml('roles', 'monitoring', 'vars', '%s.yml' % facts['os_family'])
    assert config['textfile'] == monitoring['__monitoring_textfile_dir_default'] + '/gpucluster_checkpoint_backup.prom'
    assert config['restic'] == '/usr/bin/restic'
    for name, text in zip(units, out[7:]):
        assert text.startswith('#') and '[Unit]' in text, name
