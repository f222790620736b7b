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

The facts, the stand-ins, the key server and the playbook are built by tests/unit/platform_facts.py (shared with
tests/unit/test_platform_matrix.py, which runs the same preflights on each supported platform). The facts of
gpu1..gpu3 are its Ubuntu 22.04 ones, field by field (ansible_facts names):

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

import os
import re

import pytest
import yaml

import platform_facts as pf

EXAMPLE = pf.EXAMPLE

HOSTS = ['gpu1.cluster.example.org', 'gpu2.cluster.example.org', 'gpu3.cluster.example.org']
CONTROLLER = 'gpu1.cluster.example.org'
KERNEL = pf.RECORDED_KERNEL

# The role of each play of site.yml that applies roles, for the example: which preflights run where.
EXPECTED_ROLES = {
    'os_tuning': HOSTS, 'nvidia_driver': HOSTS, 'cuda_toolkit': HOSTS, 'rdma': HOSTS, 'container_runtime': HOSTS,
    'health_check': HOSTS, 'slurm': HOSTS, 'monitoring': HOSTS,
}

# A preflight failing on the example for a reason in the role (not in this test), strict xfail with the reason:
# {(role, host): reason}. Empty: every preflight passes.
KNOWN_FAILURES = {}

RECORD = ("{{ {'outcomes': test_outcomes | default({}),"
          " 'nvidia_module': __nvidia_driver_module | default(none),"
          " 'nvidia_fabricmanager': __nvidia_driver_fabricmanager | default(none),"
          " 'nvidia_packages': (__nvidia_driver_plan | default({})).packages | default(none),"
          " 'toolkit_install': (__cuda_toolkit_plan | default({})).install | default(none),"
          " 'ipoib': __rdma_ipoib | default(none),"
          " 'slurm': {'slurm': slurm_version, 'munge': slurm_munge_version},"
          " 'monitoring_address': (__monitoring_net | default({})).address | default(none)} | to_json }}")


@pytest.fixture(scope='module')
def preflights(tmp_path_factory):
    pf.require_tools()
    work = tmp_path_factory.mktemp('example_preflight')
    # jammy's python3 on every host; id, dpkg-query and mokutil as platform_facts.COMMON_ANSWERS.
    pf.prepare(work, {'*': dict(pf.COMMON_ANSWERS, **pf.python_answer('3.10'))}, stand_ins=('id', 'dpkg-query'))
    server = pf.KeyServer(work)
    hosts = {}
    for index, host in enumerate(HOSTS):
        hosts[host] = dict(pf.machine_vars(work, server),
                           test_facts=pf.node_facts('ubuntu2204', host, '10.10.0.%d' % (11 + index), '10.20.0.%d' % (10 + index)))
    (work / 'machine.yml').write_text(yaml.safe_dump({'all': {'hosts': hosts}}))
    return pf.run(work, [EXAMPLE, work / 'machine.yml'], pf.playbook(work / 'out', RECORD), HOSTS, 3, server)


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
    calls = [call['argv'] for call in preflights['calls']]
    assert ['mokutil', '--sb-state'] in calls
    assert ['id', '-un'] in calls and ['id', '-Gn', 'admin'] in calls
    assert any(call[0] == 'dpkg-query' for call in calls)
    assert any(call[0] == 'python3' for call in calls)


def test_the_recorded_host_is_what_the_facts_say():
    """The kernel and the interface names come from the recorded H100 boot (read, not copied)."""
    # CI always has ../shared beside the checkout: a missing recording fails here (open raises).
    with open(pf.RECORDED_BOOT, errors='replace') as handle:
        text = handle.read()
    assert 'BOOT_IMAGE=/vmlinuz-' + KERNEL in text
    renamed = re.findall(r'mlx5_core \S+ (ibp\d+s0): renamed from ib0', text)
    assert renamed == pf.IPOIB
    for name in pf.ETHERNET:
        assert ' %s: renamed from ' % name in text, name
