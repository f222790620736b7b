# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""inventories/example, loaded as Ansible loads it, passes every role preflight that site.yml runs on its hosts, on the
facts of a real Ubuntu 22.04 HGX H100 node with ConnectX-7 NDR InfiniBand.

ansible-playbook runs (local connections, --check) with ``-i inventories/example`` itself, so group_vars merge as
on a site (all, gpucluster, gpu_nodes), plus a second inventory that adds only what this machine needs per host: the
local connection, the stand-ins named below and the facts. The plays come from playbooks/site.yml: its first play
(the site-wide switches and the group_by that select the later plays' hosts) runs as written; each later play that
applies roles runs on the same host pattern, with fact gathering replaced by a stand-in module that returns the
host's facts, and includes each of its roles' ``tasks/preflight.yml`` (nvidia_driver's ``set_vars.yml`` first, as
its tasks/main.yml does) with the play's role variables. A preflight that fails is recorded (task and message) and
the next role still runs, so one failure does not hide another.

The facts of gpu1..gpu3, field by field (ansible_facts names):

- distribution Ubuntu, distribution_version 22.04, distribution_major_version 22, distribution_release jammy,
  os_family Debian, pkg_mgr apt: Ubuntu 22.04's os-release (VERSION_ID="22.04", VERSION_CODENAME=jammy), which Ansible
  reads as in its own fixture test/units/module_utils/facts/system/distribution/fixtures/ubuntu_18.04.json (18.04, 18,
  bionic); the same as tests/unit/roles/test_storage_platforms.py. service_mgr systemd, system Linux.
- architecture x86_64 and kernel 5.15.0-112-generic: a recorded boot of an H100 server with eight ConnectX-7 InfiniBand
  adapters (../shared/fixtures/05_xid_kernel_log/gpud__dmesg.decode.iso.log.1.txt, from leptonai/gpud
  pkg/dmesg/testdata/dmesg.decode.iso.log.1: ``BOOT_IMAGE=/vmlinuz-5.15.0-112-generic``, jammy's 5.15 kernel; another
  H100 capture reports ``Ubuntu 22.04.5 LTS``, kernel 5.15.0-185-generic:
  ../shared/fixtures/00_raw_composite/uozd__linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt).
- interfaces: that boot's names (``renamed from`` lines): eno8303 and eno8403 (the on-board Ethernet), bootnet (the
  front-end adapter), enp157s0f0np0 / enp157s0f1np1, and the IPoIB interfaces of the eight ConnectX-7 rails,
  ibp26s0 (0000:1a:00.0) ... ibp220s0 (0000:dc:00.0); lo. The addresses are the site's (not in the recording):
  eno8303 on the cluster network 10.10.0.0/16 (the default route), ibp26s0 on the IPoIB subnet the example plans
  (10.20.0.0/16, 10.20.0.<10 + the host's position>).
- virtualization_type and virtualization_role NA: what Ansible reports on bare metal
  (ansible/module_utils/facts/virtual/linux.py, "If none of the above matches, return 'NA'").
- hostname gpu1..gpu3 (the inventory's short names); memtotal_mb 2063937 (a node with 2 TiB; not recorded: the
  example leaves slurm_node_memory_mib unset, and the slurm preflight only carries it).

The host state the preflights read, and what stands in for it:

- the PCI bus (nvidia_driver: GPUs, NVSwitches, adapters): a sysfs tree built here from the project's HGX H100 record,
  tests/unit/fixtures/nvidia_driver/pci_hgx_h100.txt (nvidia_driver_sysfs_pci_path);
- /proc/driver/nvidia/version (rdma, GPUDirect over DMA-BUF): tests/unit/fixtures/nvidia_driver/
  proc_version_open_550.163.01.txt, the open module at the example's pin (rdma_proc_nvidia_version_path);
- mokutil (nvidia_driver, Secure Boot): a stand-in printing ``SecureBoot disabled``; ``id`` (slurm, the account
  pam_slurm_adopt must keep exempt): a stand-in answering ``admin`` and its groups ``admin sudo hpcadmin``;
  ``dpkg-query`` (slurm's upgrade window): a stand-in answering as dpkg-query does for a package never installed;
  health_check_python: a stand-in answering 3.10 (jammy's python3);
- the repository signing keys (nvidia_driver: NVIDIA's CUDA repository key; container_runtime: the NVIDIA Container
  Toolkit key) are HTTPS downloads from developer.download.nvidia.com and nvidia.github.io, which this machine cannot
  reach: the preflights fetch a test key (the ed25519 key of tests/unit/plugins/filter/test_openpgp.py) from a
  local HTTPS server with a certificate made here, and check it against that key's fingerprint. The download, the
  fingerprint check and the error path run as on a site; that NVIDIA's real keys carry the fingerprints in the
  roles' defaults is not checked here (no network).

Not run: site.yml's second play (``id -u`` as the become user over SSH: a connection check, no role preflight), and
nothing after each preflight (the fast path, installs).
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
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), 'ansible-playbook')

HOSTS = ['gpu1.cluster.example.org', 'gpu2.cluster.example.org', 'gpu3.cluster.example.org']
CONTROLLER = 'gpu1.cluster.example.org'
KERNEL = '5.15.0-112-generic'
# The IPoIB interfaces of the recorded H100 boot (ibpNs0, N the adapter's PCI bus in decimal), in its order.
IPOIB = ['ibp26s0', 'ibp60s0', 'ibp77s0', 'ibp94s0', 'ibp156s0', 'ibp188s0', 'ibp204s0', 'ibp220s0']
ETHERNET = ['eno8303', 'eno8403', 'bootnet', 'enp157s0f0np0', 'enp157s0f1np1']

# The role of each play of site.yml that applies roles, for the example: which preflights run where.
EXPECTED_ROLES = {
    'os_tuning': HOSTS, 'nvidia_driver': HOSTS, 'cuda_toolkit': HOSTS, 'rdma': HOSTS, 'container_runtime': HOSTS,
    'health_check': HOSTS, 'slurm': HOSTS, 'monitoring': HOSTS,
}

# A preflight failing on the example for a reason in the role (not in this test), strict xfail with the reason:
# {(role, host): reason}. Empty: every preflight passes.
KNOWN_FAILURES = {}

FACTS_MODULE = '''#!/usr/bin/python
from ansible.module_utils.basic import AnsibleModule
module = AnsibleModule(argument_spec={'facts': {'type': 'dict', 'required': True}}, supports_check_mode=True)
module.exit_json(changed=False, ansible_facts=module.params['facts'])
'''

# Stand-ins: each answers from the argv it was given (and logs it), as the real program answers on the node.
STAND_IN = '''#!%(python)s
import json, os, sys
here = %(here)r
argv = [os.path.basename(sys.argv[0])] + sys.argv[1:]
with open(os.path.join(here, 'calls.jsonl'), 'a') as handle:
    handle.write(json.dumps(argv) + '\\n')
with open(os.path.join(here, 'answers.json')) as handle:
    answer = json.load(handle).get(json.dumps(argv))
if answer is None:
    sys.stderr.write('%%s: no answer recorded for %%r\\n' %% (argv[0], argv[1:]))
    sys.exit(2)
sys.stdout.write(answer.get('stdout', ''))
sys.stderr.write(answer.get('stderr', ''))
sys.exit(answer.get('rc', 0))
'''
ANSWERS = {
    # The connecting account and its groups (the administrators' group the example exempts from pam_slurm_adopt).
    json.dumps(['id', '-un']): {'stdout': 'admin\n'},
    json.dumps(['id', '-Gn', 'admin']): {'stdout': 'admin sudo hpcadmin\n'},
    # dpkg-query for a package dpkg has never seen: this sentence on stderr, exit 1 (a fresh node: no Slurm yet).
    json.dumps(['dpkg-query', '--show', '--showformat=${db:Status-Abbrev} ${Version}', 'slurm-client']): {
        'rc': 1, 'stderr': 'dpkg-query: no packages found matching slurm-client\n'},
    json.dumps(['mokutil', '--sb-state']): {'stdout': 'SecureBoot disabled\n'},
    json.dumps(['python3', '-c', "import sys; print('%d.%d' % sys.version_info[:2])"]): {'stdout': '3.10\n'},
}


def _openpgp_test_key():
    with open(os.path.join(REPO, 'tests', 'unit', 'plugins', 'filter', 'test_openpgp.py')) as handle:
        text = handle.read()
    key = re.search(r'ED25519_KEY = """(.*?)"""', text, re.S).group(1)
    fingerprint = re.search(r"ED25519_FPR = '([0-9A-F]{40})'", text).group(1)
    return key, fingerprint


def _iface(name, address=None, prefix=None, kind='ether'):
    facts = {'device': name, 'active': True, 'type': kind}
    if address:
        network = '.'.join(address.split('.')[:2]) + '.0.0'
        facts['ipv4'] = {'address': address, 'netmask': '255.255.0.0', 'network': network, 'prefix': str(prefix)}
    return facts


def _facts(index, host):
    short = host.split('.')[0]
    cluster = '10.10.0.%d' % (11 + index)
    ipoib = '10.20.0.%d' % (10 + index)
    facts = {
        'distribution': 'Ubuntu', 'distribution_version': '22.04', 'distribution_major_version': '22',
        'distribution_release': 'jammy', 'os_family': 'Debian', 'pkg_mgr': 'apt', 'service_mgr': 'systemd',
        'system': 'Linux', 'architecture': 'x86_64', 'kernel': KERNEL,
        'virtualization_type': 'NA', 'virtualization_role': 'NA',
        'hostname': short, 'nodename': short, 'fqdn': host, 'memtotal_mb': 2063937,
        'interfaces': ['lo'] + ETHERNET + IPOIB,
        'default_ipv4': {'address': cluster, 'interface': 'eno8303', 'netmask': '255.255.0.0', 'network': '10.10.0.0',
                         'prefix': '16', 'gateway': '10.10.0.1'},
        'all_ipv4_addresses': [cluster, ipoib],
        'lo': {'device': 'lo', 'active': True, 'type': 'loopback',
               'ipv4': {'address': '127.0.0.1', 'netmask': '255.0.0.0', 'network': '127.0.0.0', 'prefix': '8'}},
    }
    for name in ETHERNET:
        facts[name.replace('-', '_')] = _iface(name, cluster if name == 'eno8303' else None, 16)
    for name in IPOIB:
        facts[name] = _iface(name, ipoib if name == 'ibp26s0' else None, 16, kind='infiniband')
    return facts


def _pci_tree(root):
    """A sysfs bus/pci/devices tree from the recorded HGX H100 listing (address vendor class device)."""
    with open(os.path.join(FIXTURES, 'nvidia_driver', 'pci_hgx_h100.txt')) as handle:
        for line in handle:
            address, vendor, klass, device = line.split()
            path = os.path.join(root, address)
            os.makedirs(path)
            for name, value in (('vendor', vendor), ('class', klass), ('device', device)):
                with open(os.path.join(path, name), 'w') as out:
                    out.write(value + '\n')


def _site_plays():
    with open(os.path.join(REPO, 'playbooks', 'site.yml')) as handle:
        return yaml.safe_load(handle)


def _role_block(role, variables):
    entries = []
    if role == 'nvidia_driver':
        entries.append({'name': 'Load the nvidia_driver OS settings as its tasks/main.yml does',
                        'ansible.builtin.include_role': {'name': 'gpucluster.core.nvidia_driver', 'tasks_from': 'set_vars'}})
    entries.append({'name': 'Run the %s preflight' % role,
                    'ansible.builtin.include_role': {'name': 'gpucluster.core.' + role, 'tasks_from': 'preflight'}})
    block = {'name': 'The %s preflight' % role, 'block': entries + [
        {'name': 'Note that the %s preflight passed' % role,
         'ansible.builtin.set_fact': {'test_outcomes': "{{ test_outcomes | default({}) | combine({'%s': 'passed'}) }}" % role}}],
        'rescue': [{'name': 'Note where the %s preflight stopped' % role, 'ansible.builtin.set_fact': {
            'test_outcomes': "{{ test_outcomes | default({}) | combine({'%s': {'task': ansible_failed_task.name, "
                             "'msg': ansible_failed_result.msg | default(ansible_failed_result) | string}}) }}" % role}}]}
    if variables:
        for entry in entries:
            entry['vars'] = variables
    return block


def _playbook(work):
    plays = _site_plays()
    ours = [plays[0]]
    assert plays[0]['name'] == 'Check the cluster definition before anything changes'
    for play in plays[2:]:
        if not play.get('roles'):
            continue
        tasks = [{'name': 'Stand in for fact gathering', 'facts_standin': {'facts': '{{ test_facts }}'}}]
        for entry in play['roles']:
            tasks.append(_role_block(entry['role'].split('.')[-1], entry.get('vars')))
        ours.append({'name': play['name'], 'hosts': play['hosts'], 'gather_facts': False, 'tasks': tasks})
    record = ("{{ {'outcomes': test_outcomes | default({}),"
              " 'nvidia_module': __nvidia_driver_module | default(none),"
              " 'nvidia_fabricmanager': __nvidia_driver_fabricmanager | default(none),"
              " 'nvidia_packages': (__nvidia_driver_plan | default({})).packages | default(none),"
              " 'toolkit_install': (__cuda_toolkit_plan | default({})).install | default(none),"
              " 'ipoib': __rdma_ipoib | default(none),"
              " 'slurm': {'slurm': slurm_version, 'munge': slurm_munge_version},"
              " 'monitoring_address': (__monitoring_net | default({})).address | default(none)} | to_json }}")
    ours.append({'name': 'Record what the preflights decided', 'hosts': 'gpucluster', 'gather_facts': False, 'tasks': [
        {'name': 'Write the record', 'ansible.builtin.copy': {
            'dest': str(work / 'out') + '/{{ inventory_hostname }}.json', 'mode': '0644', 'content': record},
         'check_mode': False},
    ]})
    return ours


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope='module')
def preflights(tmp_path_factory):
    if not os.path.exists(ANSIBLE_PLAYBOOK):
        pytest.skip('ansible-playbook not beside this python')
    if not shutil.which('openssl'):
        pytest.skip('openssl is needed for the local HTTPS server that serves the repository keys')
    work = tmp_path_factory.mktemp('example_preflight')
    for name in ('out', 'library', 'bin', 'node', 'keys', 'pci'):
        (work / name).mkdir()
    (work / 'library' / 'facts_standin.py').write_text(FACTS_MODULE)
    # id and dpkg-query are found on PATH; mokutil and the node's python3 by the paths the roles are given (kept off
    # PATH, so nothing else on this machine runs them).
    for folder, name in (('bin', 'id'), ('bin', 'dpkg-query'), ('node', 'mokutil'), ('node', 'python3')):
        path = work / folder / name
        path.write_text(STAND_IN % {'python': sys.executable, 'here': str(work / 'bin')})
        path.chmod(0o755)
    (work / 'bin' / 'answers.json').write_text(json.dumps(ANSWERS))
    _pci_tree(str(work / 'pci'))

    # The repository keys, served over HTTPS on this machine.
    key, fingerprint = _openpgp_test_key()
    (work / 'keys' / 'cuda.pub').write_text(key)
    (work / 'keys' / 'gpgkey').write_text(key)
    cert, private = str(work / 'cert.pem'), str(work / 'key.pem')
    subprocess.run(['openssl', 'req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', private, '-out', cert,
                    '-days', '2', '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1'],
                   check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    server = HTTPServer(('127.0.0.1', 0), lambda *a: _Quiet(*a, directory=str(work / 'keys')))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, private)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = 'https://127.0.0.1:%d/' % server.server_address[1]

    hosts = {}
    for index, host in enumerate(HOSTS):
        hosts[host] = {
            'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable, 'ansible_become': False,
            'test_facts': _facts(index, host),
            'nvidia_driver_sysfs_pci_path': str(work / 'pci'),
            'nvidia_driver_mokutil_path': str(work / 'node' / 'mokutil'),
            'nvidia_driver_cuda_repo_key_url': base + 'cuda.pub',
            'nvidia_driver_cuda_repo_key_fingerprints': {'Debian': fingerprint, 'RedHat': fingerprint},
            'container_runtime_nvidia_toolkit_gpgkey_url': base + 'gpgkey',
            'container_runtime_nvidia_toolkit_gpgkey_fingerprint': fingerprint,
            'rdma_proc_nvidia_version_path': os.path.join(FIXTURES, 'nvidia_driver', 'proc_version_open_550.163.01.txt'),
            'health_check_python': str(work / 'node' / 'python3'),
        }
    (work / 'machine.yml').write_text(yaml.safe_dump({'all': {'hosts': hosts}}))
    (work / 'play.yml').write_text(yaml.safe_dump(_playbook(work), sort_keys=False, width=200))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, 'collections'), ANSIBLE_NOCOLOR='1',
               ANSIBLE_LIBRARY=str(work / 'library'), SSL_CERT_FILE=cert, ANSIBLE_FORKS='3',
               ANSIBLE_LOCAL_TEMP=str(work / 'tmp'), ANSIBLE_HOME=str(work / 'ansible_home'),
               PATH=str(work / 'bin') + os.pathsep + os.environ.get('PATH', ''))
    env.pop('ANSIBLE_INVENTORY', None)
    started = time.time()
    try:
        proc = subprocess.run([ANSIBLE_PLAYBOOK, '--check', '-i', EXAMPLE, '-i', str(work / 'machine.yml'),
                               str(work / 'play.yml')], cwd=str(work), env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, universal_newlines=True, timeout=600, check=False)
    finally:
        server.shutdown()
    elapsed = time.time() - started
    results = {}
    for host in HOSTS:
        path = work / 'out' / (host + '.json')
        results[host] = json.loads(path.read_text()) if path.exists() else None
    calls = [json.loads(line) for line in (work / 'bin' / 'calls.jsonl').read_text().splitlines()] \
        if (work / 'bin' / 'calls.jsonl').exists() else []
    return {'out': proc.stdout, 'rc': proc.returncode, 'results': results, 'calls': calls, 'elapsed': elapsed}


def test_the_playbook_ran_on_every_host(preflights):
    out = preflights['out']
    assert preflights['rc'] == 0, out[-6000:]
    for host in HOSTS:
        assert preflights['results'][host] is not None, (host, out[-6000:])


def _cases():
    cases = []
    for role in sorted(EXPECTED_ROLES):
        for host in EXPECTED_ROLES[role]:
            marks = []
            if (role, host) in KNOWN_FAILURES:
                marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_FAILURES[(role, host)]))
            cases.append(pytest.param(role, host, marks=marks, id='%s-%s' % (role, host.split('.')[0])))
    return cases


@pytest.mark.parametrize('role, host', _cases())
def test_the_preflight_passes_on_the_example(preflights, role, host):
    result = preflights['results'][host]
    assert result is not None, preflights['out'][-6000:]
    outcome = result['outcomes'].get(role)
    assert outcome == 'passed', (role, host, outcome)


def test_site_yml_runs_exactly_these_preflights(preflights):
    """Every role site.yml applies to the example's hosts is in EXPECTED_ROLES, and no other ran."""
    for host in HOSTS:
        ran = set(preflights['results'][host]['outcomes'])
        expected = set(role for role, hosts in EXPECTED_ROLES.items() if host in hosts)
        assert ran == expected, (host, ran, expected)


def test_the_decisions_are_those_of_an_hgx_h100_on_ubuntu_2204(preflights):
    values = {}
    for name in ('all.yml', 'gpucluster.yml', 'gpu_nodes.yml'):
        with open(os.path.join(EXAMPLE, 'group_vars', name)) as handle:
            values.update(yaml.safe_load(handle))
    branch = values['nvidia_driver_version'].split('.')[0]
    for index, host in enumerate(HOSTS):
        result = preflights['results'][host]
        # The open modules (asked for, and what GPUDirect over DMA-BUF needs); Fabric Manager for the NVSwitches.
        assert result['nvidia_module']['type'] == 'open', result['nvidia_module']
        assert result['nvidia_fabricmanager'] is True
        assert 'nvidia-open-%s' % branch in result['nvidia_packages'], result['nvidia_packages']
        assert 'nvidia-fabricmanager-%s' % branch in result['nvidia_packages'], result['nvidia_packages']
        assert 'libnccl2=%s' % values['cuda_toolkit_nccl_version'] in result['toolkit_install'], result['toolkit_install']
        # IPoIB on the first rail, named as Ubuntu names it, addressed from the host's position.
        assert [(i['name'], i['address']) for i in result['ipoib']] == [('ibp26s0', '10.20.0.%d/16' % (10 + index))], \
            result['ipoib']
        # Ubuntu 22.04's archive versions, as pinned.
        assert result['slurm'] == {'slurm': '23.11.4', 'munge': '0.5.14'}
        # Two IPv4 addresses on the node: the services bind to the cluster network the example names.
        assert result['monitoring_address'] == '10.10.0.%d' % (11 + index)


def test_the_stand_ins_were_asked_what_the_preflights_read(preflights):
    calls = preflights['calls']
    assert ['mokutil', '--sb-state'] in calls
    assert ['id', '-un'] in calls and ['id', '-Gn', 'admin'] in calls
    assert any(call[0] == 'dpkg-query' for call in calls)
    assert any(call[0] == 'python3' for call in calls)


def test_the_recorded_host_is_what_the_facts_say():
    """The kernel and the interface names come from the recorded H100 boot (read, not copied)."""
    path = os.path.join(SHARED, '05_xid_kernel_log', 'gpud__dmesg.decode.iso.log.1.txt')
    if not os.path.exists(path):
        pytest.skip('../shared/fixtures is not beside this checkout')
    with open(path, errors='replace') as handle:
        text = handle.read()
    assert 'BOOT_IMAGE=/vmlinuz-' + KERNEL in text
    renamed = re.findall(r'mlx5_core \S+ (ibp\d+s0): renamed from ib0', text)
    assert renamed == IPOIB
    for name in ETHERNET:
        assert ' %s: renamed from ' % name in text, name
