# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The facts of a GPU node on each platform the collection supports, and the harness that runs the role preflights
site.yml applies on them (tests/unit/test_example_inventory_preflight.py, tests/unit/test_platform_matrix.py).

Not a test module (pytest collects test_*.py only): data and functions, no fixtures.

The node: an HGX H100 server with eight ConnectX-7 NDR InfiniBand adapters, as recorded in one boot
(../shared/fixtures/05_xid_kernel_log/gpud__dmesg.decode.iso.log.1.txt, from leptonai/gpud
pkg/dmesg/testdata/dmesg.decode.iso.log.1) and in the project's PCI record tests/unit/fixtures/nvidia_driver/
pci_hgx_h100.txt, installed with each release below. What differs per platform, field by field (ansible_facts names):

- distribution, distribution_version, distribution_major_version, distribution_release, os_family: what Ansible
  derives from each release's /etc/os-release (and /etc/debian_version on Debian), as in Ansible's own fixtures
  (ansible/ansible test/units/module_utils/facts/system/distribution/fixtures):

  - Debian 12: tests/unit/fixtures/k8s/facts-debian12.json, recorded with ``ansible -m setup`` on a Debian 12 machine
    (Debian, 12.11, 12, bookworm, Debian); debian_10.json shows the same derivation (distribution_version from
    /etc/debian_version, its first part the major version).
  - Debian 13: os-release VERSION_ID="13", VERSION_CODENAME=trixie; /etc/debian_version 13.1 (the point release of
    September 2025), so 13.1, 13, trixie, Debian.
  - Ubuntu 22.04 and 24.04: os-release VERSION_ID="22.04" / "24.04", VERSION_CODENAME=jammy / noble; Ansible takes
    VERSION_ID as distribution_version and its first part as distribution_major_version (ubuntu_18.04.json: 18.04,
    18, bionic), os_family Debian.
  - Rocky 9: os-release ID="rocky", VERSION_ID="9.4"; Ansible names it Rocky, os_family RedHat, 9.4, 9
    (rockylinux_8_3.json derives 8.3 and 8 the same way). distribution_release "Blue Onyx" (os-release VERSION
    "9.4 (Blue Onyx)"; the code name of Rocky Linux 9, https://wiki.rockylinux.org/rocky/version).

- pkg_mgr: apt on Debian and Ubuntu, dnf on Rocky 9 (Ansible's pkg_mgr fact: dnf on EL 8 and later); service_mgr
  systemd on every release (PID 1 on each); system Linux; architecture x86_64.
- kernel: the release's own (GA) kernel, as ``uname -r`` prints it:

  - Debian 12: 6.1.0-20-amd64 (Debian's 6.1.85-1; bookworm's linux-image-amd64 depends on linux-image-6.1.0-N-amd64,
    the ABI number N moving with point releases: a recorded ``uname -a`` of a Debian 12 machine, "Linux ... 6.1.0-20-amd64
    #1 SMP PREEMPT_DYNAMIC Debian 6.1.85-1 (2024-04-11) x86_64", quoted at super-unix.com "Defer kernel updates until
    the corresponding linux-headers package is available");
  - Debian 13: 6.12.43+deb13-amd64 (trixie ships Linux 6.12 LTS; from trixie on the kernel's ABI name carries the
    release, <upstream>+deb13; 6.12.43 is 13.1's kernel);
  - Ubuntu 22.04: 5.15.0-112-generic, from the recorded H100 boot (``BOOT_IMAGE=/vmlinuz-5.15.0-112-generic``;
    another H100 capture reports Ubuntu 22.04.5 LTS with 5.15.0-185-generic:
    ../shared/fixtures/00_raw_composite/uozd__linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt);
  - Ubuntu 24.04: 6.8.0-31-generic (noble's GA kernel is 6.8; Ubuntu's kernel naming <version>-<ABI>-<flavour>,
    https://ubuntu.com/kernel);
  - Rocky 9: 5.14.0-427.13.1.el9_4.x86_64 (Rocky 9.4's release kernel 5.14.0-427.13.1,
    https://wiki.rockylinux.org/rocky/version; EL's uname -r appends .el9_<minor>.<arch>).

- python3 (health_check_python's answer, the release's python3 package): Debian 12 3.11 (python3 3.11.2-1+b1), Debian 13
  3.13 (python3 3.13.5-1), Ubuntu 22.04 3.10 (python3 3.10.6-1~22.04), Ubuntu 24.04 3.12 (python3 3.12.3-0ubuntu2),
  Rocky 9 3.9 (python3 3.9.x, the platform Python of EL 9): packages.debian.org/{bookworm,trixie}/python3,
  packages.ubuntu.com/{jammy,noble}/python3; the facts-debian12.json recording reports Python 3.11.2.
- interfaces: the recorded boot's names (``renamed from`` lines), which systemd-udevd's predictable naming gives on
  every release here (systemd.net-naming-scheme(7): Debian 12/13, Ubuntu 22.04/24.04 and EL 9 all name by PCI
  path; the ibpNs0 names carry the adapter's PCI bus in decimal): eno8303 and eno8403 (on-board Ethernet), bootnet
  (the front-end adapter), enp157s0f0np0 / enp157s0f1np1, and the IPoIB interfaces of the eight ConnectX-7 rails,
  ibp26s0 (0000:1a:00.0) ... ibp220s0 (0000:dc:00.0); lo. Addresses are the site's: eno8303 on the cluster network
  10.10.0.0/16 (the default route), ibp26s0 on the IPoIB subnet 10.20.0.0/16.
- virtualization_type and virtualization_role NA: what Ansible reports on bare metal
  (ansible/module_utils/facts/virtual/linux.py, "If none of the above matches, return 'NA'").
- memtotal_mb 2063937 (a node with 2 TiB; not recorded).

The stand-ins (programs the preflights run that this machine has not, or must not answer for the node), each
answering per host from a table and logging every call: mokutil (``SecureBoot disabled``), id (the connecting
account ``admin`` and its groups), dpkg-query (a package never installed: the sentence on stderr, exit 1), rpm
(``package slurm is not installed``, exit 1: rpm(8)), and the node's python3 (its version). dnf stands in with no
answers: no preflight asks it (install_dnf.yml's offer check is tests/unit/roles/slurm/test_slurm_rhel.py's), and one
that did would fail loudly. A call no table answers exits 2 with the argv on stderr.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import threading
import time

from http.server import HTTPServer, SimpleHTTPRequestHandler

import pytest
import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
EXAMPLE = os.path.join(REPO, 'inventories', 'example')
FIXTURES = os.path.join(REPO, 'tests', 'unit', 'fixtures')
SHARED = os.path.join(os.path.dirname(REPO), 'shared', 'fixtures')
RECORDED_BOOT = os.path.join(SHARED, '05_xid_kernel_log', 'gpud__dmesg.decode.iso.log.1.txt')
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), 'ansible-playbook')

# The IPoIB interfaces of the recorded H100 boot (ibpNs0, N the adapter's PCI bus in decimal), in its order.
IPOIB = ['ibp26s0', 'ibp60s0', 'ibp77s0', 'ibp94s0', 'ibp156s0', 'ibp188s0', 'ibp204s0', 'ibp220s0']
ETHERNET = ['eno8303', 'eno8403', 'bootnet', 'enp157s0f0np0', 'enp157s0f1np1']


def _recorded_debian12():
    with open(os.path.join(FIXTURES, 'k8s', 'facts-debian12.json')) as handle:
        recorded = json.load(handle)
    return dict((key, recorded['ansible_' + key]) for key in (
        'distribution', 'distribution_version', 'distribution_major_version', 'distribution_release', 'os_family',
        'pkg_mgr'))


# The release facts of each platform (see the docstring), and the python3 each release ships.
PLATFORMS = {
    'debian12': dict(_recorded_debian12(), kernel='6.1.0-20-amd64', python='3.11'),
    'debian13': {'distribution': 'Debian', 'distribution_version': '13.1', 'distribution_major_version': '13',
                 'distribution_release': 'trixie', 'os_family': 'Debian', 'pkg_mgr': 'apt',
                 'kernel': '6.12.43+deb13-amd64', 'python': '3.13'},
    'ubuntu2204': {'distribution': 'Ubuntu', 'distribution_version': '22.04', 'distribution_major_version': '22',
                   'distribution_release': 'jammy', 'os_family': 'Debian', 'pkg_mgr': 'apt',
                   'kernel': '5.15.0-112-generic', 'python': '3.10'},
    'ubuntu2404': {'distribution': 'Ubuntu', 'distribution_version': '24.04', 'distribution_major_version': '24',
                   'distribution_release': 'noble', 'os_family': 'Debian', 'pkg_mgr': 'apt',
                   'kernel': '6.8.0-31-generic', 'python': '3.12'},
    'rocky9': {'distribution': 'Rocky', 'distribution_version': '9.4', 'distribution_major_version': '9',
               'distribution_release': 'Blue Onyx', 'os_family': 'RedHat', 'pkg_mgr': 'dnf',
               'kernel': '5.14.0-427.13.1.el9_4.x86_64', 'python': '3.9'},
}
# The recorded H100 boot's kernel (Ubuntu 22.04).
RECORDED_KERNEL = PLATFORMS['ubuntu2204']['kernel']


def _iface(name, address=None, prefix=None, kind='ether'):
    facts = {'device': name, 'active': True, 'type': kind}
    if address:
        network = '.'.join(address.split('.')[:2]) + '.0.0'
        facts['ipv4'] = {'address': address, 'netmask': '255.255.0.0', 'network': network, 'prefix': str(prefix)}
    return facts


def node_facts(platform, host, cluster, ipoib):
    """ansible_facts of the H100 node ``host`` (its FQDN) on ``platform``, with the cluster and IPoIB addresses."""
    release = PLATFORMS[platform]
    short = host.split('.')[0]
    facts = dict((key, value) for key, value in release.items() if key != 'python')
    facts.update({
        'service_mgr': 'systemd', 'system': 'Linux', 'architecture': 'x86_64',
        'virtualization_type': 'NA', 'virtualization_role': 'NA',
        'hostname': short, 'nodename': short, 'fqdn': host, 'memtotal_mb': 2063937,
        'interfaces': ['lo'] + ETHERNET + IPOIB,
        'default_ipv4': {'address': cluster, 'interface': 'eno8303', 'netmask': '255.255.0.0', 'network': '10.10.0.0',
                         'prefix': '16', 'gateway': '10.10.0.1'},
        'all_ipv4_addresses': [cluster, ipoib],
        'lo': {'device': 'lo', 'active': True, 'type': 'loopback',
               'ipv4': {'address': '127.0.0.1', 'netmask': '255.0.0.0', 'network': '127.0.0.0', 'prefix': '8'}},
    })
    for name in ETHERNET:
        facts[name.replace('-', '_')] = _iface(name, cluster if name == 'eno8303' else None, 16)
    for name in IPOIB:
        facts[name] = _iface(name, ipoib if name == 'ibp26s0' else None, 16, kind='infiniband')
    return facts


# A lookup for the tests only (ANSIBLE_LOOKUP_PLUGINS): every template named rendered by the template lookup, with the
# task's variables; an error is returned as text, so one failing template does not hide the others.
RENDER_LOOKUP = '''
from ansible.plugins.loader import lookup_loader
from ansible.plugins.lookup import LookupBase


class LookupModule(LookupBase):
    def run(self, terms, variables=None, role_path=None, **kwargs):
        template = lookup_loader.get('ansible.builtin.template', loader=self._loader, templar=self._templar)
        # Inside the role, its own folder is first on the search path (a template including another by its path
        # under templates/).
        variables = dict(variables or {}, role_path=role_path,
                         ansible_search_path=[role_path] + list((variables or {}).get('ansible_search_path') or []))
        out = {}
        for term in terms:
            try:
                text = template.run([term], variables)[0]
            except Exception as error:  # every template's own error, reported by the test
                out[term] = {'error': '%s: %s' % (type(error).__name__, error)}
                continue
            if isinstance(text, str):
                out[term] = {'text': text}
            else:  # ansible-core 2.19 and later: an undefined variable is a marker carrying its message
                out[term] = {'error': getattr(text, '_as_message', lambda: repr(text))()}
        return [out]
'''

FACTS_MODULE = '''#!/usr/bin/python
from ansible.module_utils.basic import AnsibleModule
module = AnsibleModule(argument_spec={'facts': {'type': 'dict', 'required': True}}, supports_check_mode=True)
module.exit_json(changed=False, ansible_facts=module.params['facts'])
'''

# Stand-ins: each answers from the argv it was given, per host (the play's environment names it; '*' answers every
# host), and logs the call, as the real program answers on the node.
STAND_IN = '''#!%(python)s
import json, os, sys
here = %(here)r
argv = [os.path.basename(sys.argv[0])] + sys.argv[1:]
host = os.environ.get('GPUCLUSTER_STUB_HOST', '')
with open(os.path.join(here, 'calls.jsonl'), 'a') as handle:
    handle.write(json.dumps({'host': host, 'argv': argv}) + '\\n')
with open(os.path.join(here, 'answers.json')) as handle:
    answers = json.load(handle)
key = json.dumps(argv)
answer = answers.get(host, {}).get(key, answers.get('*', {}).get(key))
if answer is None:
    sys.stderr.write('%%s: no answer recorded for %%r on %%s\\n' %% (argv[0], argv[1:], host))
    sys.exit(2)
sys.stdout.write(answer.get('stdout', ''))
sys.stderr.write(answer.get('stderr', ''))
sys.exit(answer.get('rc', 0))
'''
PYTHON_VERSION_ARGV = ['python3', '-c', "import sys; print('%d.%d' % sys.version_info[:2])"]
# Answers for every host: the connecting account and its groups (the administrators' group exempt from
# pam_slurm_adopt), Secure Boot off, and dpkg-query / rpm for a Slurm never installed (a fresh node).
COMMON_ANSWERS = {
    json.dumps(['id', '-un']): {'stdout': 'admin\n'},
    json.dumps(['id', '-Gn', 'admin']): {'stdout': 'admin sudo hpcadmin\n'},
    # dpkg-query for a package dpkg has never seen: this sentence on stderr, exit 1.
    json.dumps(['dpkg-query', '--show', '--showformat=${db:Status-Abbrev} ${Version}', 'slurm-client']): {
        'rc': 1, 'stderr': 'dpkg-query: no packages found matching slurm-client\n'},
    # rpm -q of a package not installed: the sentence on stdout, exit 1 (rpm(8)); slurm's upgrade window on EL.
    json.dumps(['rpm', '-q', '--queryformat', '%{VERSION}', 'slurm']): {
        'rc': 1, 'stdout': 'package slurm is not installed\n'},
    json.dumps(['mokutil', '--sb-state']): {'stdout': 'SecureBoot disabled\n'},
}


def python_answer(version):
    """The node's python3 answering its version (health_check_python)."""
    return {json.dumps(PYTHON_VERSION_ARGV): {'stdout': version + '\n'}}


def openpgp_test_key():
    """The ed25519 test key of tests/unit/plugins/filter/test_openpgp.py and its fingerprint."""
    with open(os.path.join(REPO, 'tests', 'unit', 'plugins', 'filter', 'test_openpgp.py')) as handle:
        text = handle.read()
    key = re.search(r'ED25519_KEY = """(.*?)"""', text, re.S).group(1)
    fingerprint = re.search(r"ED25519_FPR = '([0-9A-F]{40})'", text).group(1)
    return key, fingerprint


def pci_tree(root):
    """A sysfs bus/pci/devices tree from the recorded HGX H100 listing (address vendor class device)."""
    with open(os.path.join(FIXTURES, 'nvidia_driver', 'pci_hgx_h100.txt')) as handle:
        for line in handle:
            address, vendor, klass, device = line.split()
            path = os.path.join(root, address)
            os.makedirs(path)
            for name, value in (('vendor', vendor), ('class', klass), ('device', device)):
                with open(os.path.join(path, name), 'w') as out:
                    out.write(value + '\n')


def site_plays():
    with open(os.path.join(REPO, 'playbooks', 'site.yml')) as handle:
        return yaml.safe_load(handle)


def site_roles(play):
    """(role, vars) of each role a play of site.yml applies, in order: its import_role tasks (or a roles: list)."""
    entries = [(entry['role'], entry.get('vars')) for entry in play.get('roles') or []]
    for task in play.get('tasks') or []:
        imported = task.get('ansible.builtin.import_role')
        if imported:
            entries.append((imported['name'], task.get('vars')))
    return [(name.split('.')[-1], variables) for name, variables in entries]


def role_block(role, variables, public=False, render=None, render_vars=None):
    """The tasks that run ``role``'s preflight (nvidia_driver's set_vars.yml first, as its tasks/main.yml does) and
    note 'passed' or where it stopped. ``render``: a list of template paths rendered after a passing preflight (each
    result noted under test_renders[role]), with ``render_vars`` beside the play's (a loop's item, as the role's task
    gives it); ``public`` exposes the role's defaults and vars to those renders."""
    entries = []
    if role == 'nvidia_driver':
        entries.append({'name': 'Load the nvidia_driver OS settings as its tasks/main.yml does',
                        'ansible.builtin.include_role': {'name': 'gpucluster.core.nvidia_driver', 'tasks_from': 'set_vars'}})
    entries.append({'name': 'Run the %s preflight' % role,
                    'ansible.builtin.include_role': {'name': 'gpucluster.core.' + role, 'tasks_from': 'preflight'}})
    if public:
        for entry in entries:
            entry['ansible.builtin.include_role']['public'] = True
    if variables:
        for entry in entries:
            entry['vars'] = variables
    passed = [{'name': 'Note that the %s preflight passed' % role,
               'ansible.builtin.set_fact': {'test_outcomes': "{{ test_outcomes | default({}) | combine({'%s': 'passed'}) }}" % role}}]
    if render:
        # One task per role: the test lookup test_render_templates (RENDER_LOOKUP) renders each template as the
        # template lookup does and returns {path: {'text': ...} or {'error': ...}}, so one failing template does not
        # hide the others.
        passed.append({'name': 'Render the %s templates' % role, 'when': 'test_render | default(false)',
                       'vars': dict(variables or {}, **(render_vars or {})), 'ansible.builtin.set_fact': {
                           'test_renders': "{{ test_renders | default({}) | combine({'%s': query('test_render_templates', "
                                           "*%s, role_path=%s)[0]}) }}" % (role, json.dumps(render), json.dumps(os.path.join(REPO, 'roles', role)))}})
    return {'name': 'The %s preflight' % role, 'block': entries + passed,
            'rescue': [{'name': 'Note where the %s preflight stopped' % role, 'ansible.builtin.set_fact': {
                'test_outcomes': "{{ test_outcomes | default({}) | combine({'%s': {'task': ansible_failed_task.name, "
                                 "'msg': ansible_failed_result.msg | default(ansible_failed_result) | string}}) }}" % role}}]}


def playbook(out_dir, record, record_hosts='gpucluster', public=False, render=None, render_vars=None):
    """site.yml's first play as written, then each later play that applies roles with its roles' preflights (fact
    gathering replaced by the stand-in facts module), then a play writing ``record`` (a Jinja expression giving JSON)
    to ``out_dir``/<host>.json. ``render``: {role: [template paths]} rendered after that role's preflight passes, with
    ``render_vars``: {role: variables}."""
    plays = site_plays()
    environment = {'GPUCLUSTER_STUB_HOST': '{{ inventory_hostname }}'}
    assert plays[0]['name'] == 'Check the cluster definition before anything changes'
    ours = [dict(plays[0], environment=environment)]
    for play in plays[2:]:
        entries = site_roles(play)
        if not entries:
            continue
        # Facts stay with the host from play to play: the stand-in runs where the host has none yet.
        tasks = [{'name': 'Stand in for fact gathering', 'facts_standin': {'facts': '{{ test_facts }}'},
                  'when': "'distribution' not in ansible_facts"}]
        for role, variables in entries:
            tasks.append(role_block(role, variables, public=public, render=(render or {}).get(role),
                                    render_vars=(render_vars or {}).get(role)))
        ours.append({'name': play['name'], 'hosts': play['hosts'], 'gather_facts': False, 'environment': environment,
                     'tasks': tasks})
    ours.append({'name': 'Record what the preflights decided', 'hosts': record_hosts, 'gather_facts': False, 'tasks': [
        {'name': 'Write the record', 'ansible.builtin.copy': {
            'dest': str(out_dir) + '/{{ inventory_hostname }}.json', 'mode': '0644', 'content': record},
         'check_mode': False},
    ]})
    return ours


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class KeyServer(object):
    """The repository signing keys (NVIDIA's CUDA repository key, the Container Toolkit key), which the preflights
    download over HTTPS: the test key served from this machine with a certificate made here (``cert``), at
    ``base`` + cuda.pub / gpgkey; ``fingerprint`` is the key's."""

    def __init__(self, work):
        key, self.fingerprint = openpgp_test_key()
        keys = os.path.join(str(work), 'keys')
        os.makedirs(keys)
        for name in ('cuda.pub', 'gpgkey'):
            with open(os.path.join(keys, name), 'w') as handle:
                handle.write(key)
        self.cert, private = os.path.join(str(work), 'cert.pem'), os.path.join(str(work), 'key.pem')
        subprocess.run(['openssl', 'req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', private, '-out', self.cert,
                        '-days', '2', '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1'],
                       check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        self.server = HTTPServer(('127.0.0.1', 0), lambda *a: _Quiet(*a, directory=keys))
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert, private)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base = 'https://127.0.0.1:%d/' % self.server.server_address[1]

    def host_vars(self):
        """The variables pointing the preflights at the served keys."""
        return {
            'nvidia_driver_cuda_repo_key_url': self.base + 'cuda.pub',
            'nvidia_driver_cuda_repo_key_fingerprints': {'Debian': self.fingerprint, 'RedHat': self.fingerprint},
            'container_runtime_nvidia_toolkit_gpgkey_url': self.base + 'gpgkey',
            'container_runtime_nvidia_toolkit_gpgkey_fingerprint': self.fingerprint,
            # Docker's repository key (RHEL and its rebuilds: Docker's repository is their engine's source).
            'container_runtime_docker_repo_gpgkey_url': self.base + 'gpgkey',
            'container_runtime_docker_repo_gpgkey_fingerprint': self.fingerprint,
        }

    def shutdown(self):
        self.server.shutdown()


def prepare(work, answers, stand_ins=('id', 'dpkg-query', 'rpm', 'dnf')):
    """The work folder: out/, library/ (the facts module), bin/ (stand-ins found on PATH, with answers.json and
    calls.jsonl), node/ (mokutil and python3, run by the paths the roles are given, kept off PATH), pci/ (the sysfs
    tree). ``answers``: {host or '*': {json argv: answer}}."""
    for name in ('out', 'library', 'lookup_plugins', 'bin', 'node', 'pci'):
        (work / name).mkdir()
    (work / 'library' / 'facts_standin.py').write_text(FACTS_MODULE)
    (work / 'lookup_plugins' / 'test_render_templates.py').write_text(RENDER_LOOKUP)
    for folder, name in [('bin', n) for n in stand_ins] + [('node', 'mokutil'), ('node', 'python3')]:
        path = work / folder / name
        path.write_text(STAND_IN % {'python': sys.executable, 'here': str(work / 'bin')})
        path.chmod(0o755)
    (work / 'bin' / 'answers.json').write_text(json.dumps(answers))
    (work / 'bin' / 'calls.jsonl').write_text(u'')
    pci_tree(str(work / 'pci'))


def machine_vars(work, server):
    """What this machine needs per host beside the facts: the local connection, the stand-ins' paths, the sysfs tree,
    the loaded module's /proc record (rdma: the open module at 550.163.01), and the served keys."""
    variables = {
        'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable, 'ansible_become': False,
        'nvidia_driver_sysfs_pci_path': str(work / 'pci'),
        'nvidia_driver_mokutil_path': str(work / 'node' / 'mokutil'),
        'rdma_proc_nvidia_version_path': os.path.join(FIXTURES, 'nvidia_driver', 'proc_version_open_550.163.01.txt'),
        'health_check_python': str(work / 'node' / 'python3'),
    }
    variables.update(server.host_vars())
    return variables


def run(work, inventories, play, hosts, forks, server):
    """ansible-playbook --check over ``inventories`` with ``play``; the record of each host and every stand-in call."""
    (work / 'play.yml').write_text(yaml.safe_dump(play, sort_keys=False, width=200))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, 'collections'), ANSIBLE_NOCOLOR='1',
               ANSIBLE_LIBRARY=str(work / 'library'), ANSIBLE_LOOKUP_PLUGINS=str(work / 'lookup_plugins'), SSL_CERT_FILE=server.cert, ANSIBLE_FORKS=str(forks),
               ANSIBLE_LOCAL_TEMP=str(work / 'tmp'), ANSIBLE_HOME=str(work / 'ansible_home'),
               ANSIBLE_RETRY_FILES_ENABLED='0', ANSIBLE_PIPELINING='1',
               PATH=str(work / 'bin') + os.pathsep + os.environ.get('PATH', ''))
    env.pop('ANSIBLE_INVENTORY', None)
    command = [ANSIBLE_PLAYBOOK, '--check']
    for inventory in inventories:
        command += ['-i', str(inventory)]
    started = time.time()
    try:
        proc = subprocess.run(command + [str(work / 'play.yml')], cwd=str(work), env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, universal_newlines=True, timeout=600, check=False)
    finally:
        server.shutdown()
    elapsed = time.time() - started
    results = {}
    for host in hosts:
        path = work / 'out' / (host + '.json')
        results[host] = json.loads(path.read_text()) if path.exists() else None
    calls = [json.loads(line) for line in (work / 'bin' / 'calls.jsonl').read_text().splitlines()]
    return {'out': proc.stdout, 'rc': proc.returncode, 'results': results, 'calls': calls, 'elapsed': elapsed}


def require_tools():
    """Fail (never skip: CI has both) when ansible-playbook is not beside this python or openssl, which makes the
    local HTTPS server's certificate, is missing."""
    if not os.path.exists(ANSIBLE_PLAYBOOK):
        pytest.fail('ansible-playbook is not beside this python (%s)' % sys.executable)
    if not shutil.which('openssl'):
        pytest.fail('openssl is needed for the local HTTPS server that serves the repository keys')
