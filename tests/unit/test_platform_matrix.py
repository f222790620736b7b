# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The platform matrix: every role preflight site.yml applies, on the facts of an HGX H100 node of each supported
platform (Debian 12, Debian 13, Ubuntu 22.04, Ubuntu 24.04, Rocky 9), in one ansible-playbook run.

One inventory host per platform (its facts: tests/unit/platform_facts.py, field by field with the sources), each a
cluster of its own (its Slurm controller and compute node, its monitoring server), with a site's variables written
here into the run's inventory: what a site on that platform sets (the driver from NVIDIA's CUDA repository, Slurm from the release's archive
where the role runs it, from a site repository on Ubuntu 22.04 as inventories/example does, pinned on Rocky 9 where EPEL
keeps only its newest build; node_exporter from the archive on Debian and Ubuntu, the upstream release on Rocky). Five
more preflights carry the refusals that matter, on three more hosts: the archive Slurm of Ubuntu 22.04 without a site
repository; node_exporter from packages and the driver from the distribution on Rocky (one host: a refusal stops only
its own role's preflight); the driver and the toolkit from NVIDIA's CUDA repository on a POWER (ppc64le) node, an
architecture that repository does not serve. The harness (site.yml's plays, the stand-ins for mokutil, id, dpkg-query, rpm, dnf and
the node's python3, the local HTTPS key server, the PCI sysfs tree) is tests/unit/platform_facts.py's, shared with
tests/unit/test_example_inventory_preflight.py. site.yml's plays run as they are: every host is a cluster of its own
(its own Slurm and monitoring groups), so one Slurm play holds four Slurm versions side by side.

From the same run:

1. the outcome of each preflight per platform, 'passed' or a refusal whose message names the variable and what is
   accepted, against the table EXPECTED below;
2. what each role planned (recorded in the play, after its preflight): the driver and toolkit packages, the Slurm and
   munge versions and package names, the container engine and toolkit packages, node_exporter's version and web
   option, the RDMA packages; every name and version checked against the platform table
   (plugins/module_utils/platforms.py ARCHIVE, plugins/module_utils/nvidia_packages.py, docs/platforms.md's EL names);
3. every template of every role that passed (roles/<role>/templates/**/*.j2) rendered by Ansible's template lookup on
   the host, with the role's defaults and vars (include_role public), the platform's facts and what the preflight set:
   each renders, except those listed in NEEDS_FULL_RUN with the variable only the full run sets (each must fail naming
   that variable: the list is exact); where a role's vars/Debian.yml and vars/RedHat.yml give a template different
   values, the platform's value is in the rendered text.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import glob
import json
import os
import re

import pytest
import yaml

import platform_facts as pf

from ansible_collections.gpucluster.core.plugins.module_utils import nvidia_packages, platforms

DOMAIN = '.cluster.example.org'
# The five platforms, one host each, in the order of the brief; the index gives the addresses.
MAIN = ['debian12', 'debian13', 'ubuntu2204', 'ubuntu2404', 'rocky9']
# Refusal cases: host -> (platform, what the host runs: the site-wide switches of the case, its variables).
REFUSALS = {
    'ubuntu2204-archive-slurm': ('ubuntu2204', 'slurm'),
    'rocky9-refused': ('rocky9', 'gpu_stack_monitoring'),
    'debian13-ppc64le': ('debian13', 'gpu_stack'),
}
# Facts a refusal host has besides its platform's: an architecture NVIDIA's CUDA repository does not serve.
REFUSAL_FACTS = {'debian13-ppc64le': {'architecture': 'ppc64le'}}
HOSTS = MAIN + sorted(REFUSALS)
ROLES = ['os_tuning', 'nvidia_driver', 'cuda_toolkit', 'rdma', 'container_runtime', 'health_check', 'slurm', 'monitoring']

DRIVER = '550.163.01'
# The Rocky site's pins: EPEL 9's slurm and RHEL 9's munge (munge-0.5.13-13.el9, docs/platforms.md; the slurm version
# an example, as in tests/unit/roles/slurm/test_slurm_rhel.py: EPEL keeps only its newest build). The preflight does
# not ask dnf; install_dnf.yml's check of the pins against what dnf offers is test_slurm_rhel.py's.
EL_SLURM, EL_MUNGE = '24.11.5', '0.5.13'

# ------------------------------------------------------------------ the site

# Every host: the example's stack (inventories/example/group_vars/gpucluster.yml), without its Slurm lines.
SITE = {
    'gpucluster_scheduler': 'slurm', 'gpucluster_gpu_stack': True, 'gpucluster_monitoring': True,
    'gpucluster_fabric': 'infiniband', 'gpucluster_fabric_rate_gbps': 400, 'rdma_subnet_manager': 'switch',
    'ansible_user': 'admin', 'nvidia_driver_source': 'cuda_repo', 'nvidia_driver_version': DRIVER,
    'nvidia_driver_kernel_module_type': 'open', 'cuda_toolkit_version': '12.4.1',
    'cuda_toolkit_cudnn_version': '9.1.0.70-1', 'cuda_toolkit_nccl_version': '2.21.5-1+cuda12.4',
    'container_runtime_nvidia_toolkit_version': '1.18.2', 'slurm_pam_adopt_exempt_groups': ['hpcadmin'],
    'os_tuning_ntp_servers': ['ntp1' + DOMAIN, 'ntp2' + DOMAIN], 'os_tuning_swap_off': True,
    'monitoring_cluster_network': '10.10.0.0/16',
    'slurm_node_gpus': 8, 'slurm_gpu_type': 'h100', 'slurm_mem_spec_limit_mib': 8192,
    'health_check_expected_gpu_count': 8,
    'rdma_ipoib_interfaces': [{'name': 'ibp26s0', 'subnet': '10.20.0.0/16'}],
}
# A site repository for Slurm (apt), as inventories/example has it; the URL is the example's own name.
SITE_SLURM_APT = {'name': 'site-slurm', 'uris': 'https://repo' + DOMAIN + '/slurm/ubuntu', 'suites': 'jammy',
                  'components': ['main'], 'signed_by': 'https://repo' + DOMAIN + '/slurm/site-slurm.asc'}
# Per platform: what that site sets beside SITE.
PLATFORM_SITE = {
    # The archive's Slurm and munge (empty pins: the table's versions), node_exporter from the archive.
    'debian12': {'slurm_version': '', 'slurm_munge_version': '', 'monitoring_install_method': 'package'},
    'debian13': {'slurm_version': '', 'slurm_munge_version': '', 'monitoring_install_method': 'package'},
    # jammy's archive Slurm (21.08.5) is refused: the example's site repository with noble's 23.11.4, jammy's munge.
    'ubuntu2204': {'slurm_version': '23.11.4', 'slurm_munge_version': '0.5.14', 'slurm_apt_repository': SITE_SLURM_APT,
                   'monitoring_install_method': 'package'},
    'ubuntu2404': {'slurm_version': '', 'slurm_munge_version': '', 'monitoring_install_method': 'package'},
    # EPEL keeps only its newest build: pinned to what dnf offers; node_exporter from the upstream release (EL has no
    # distribution package); the driver from NVIDIA's repository for rhel9.
    'rocky9': {'slurm_version': EL_SLURM, 'slurm_munge_version': EL_MUNGE, 'monitoring_install_method': 'binary',
               'slurm_pam_adopt_exempt_groups': ['hpcadmin', 'wheel']},
}
# The refusal hosts run only the part named (the other site-wide switches off, outside gpu_nodes unless the GPU stack).
_ONLY = {
    'slurm': {'gpucluster_gpu_stack': False, 'gpucluster_fabric': 'none', 'gpucluster_monitoring': False,
              'slurm_node_gpus': 0},
    # Both Rocky refusals on one host: a refusal stops only its own role's preflight here.
    'gpu_stack_monitoring': {'gpucluster_fabric': 'none', 'gpucluster_scheduler': 'none'},
    'gpu_stack': {'gpucluster_fabric': 'none', 'gpucluster_scheduler': 'none', 'gpucluster_monitoring': False},
}
REFUSAL_SITE = {
    'ubuntu2204-archive-slurm': {'slurm_version': '', 'slurm_munge_version': ''},
    'rocky9-refused': {'monitoring_install_method': 'package', 'nvidia_driver_source': 'distro'},
    'debian13-ppc64le': {},
}


# ------------------------------------------------------------------ what each host must do

# slurm's check of its repository, the pins and the release (tasks/pins.yml).
SLURM_PINS_CHECK = ("Check slurm_apt_repository, slurm_version and slurm_munge_version against the node's release archive,"
                    " and the Slurm release")

# The Slurm and munge versions each host's preflight resolves, and where they come from: the release's archive (the
# platform table, an empty pin), the site's repository (the example's pin, jammy's munge), or the site's pins on EL (EPEL 9,
# RHEL 9's munge). A host refused before it resolves has none.
SLURM = {
    'debian12': (platforms.archive_version('Debian', '12', 'slurm-wlm'), platforms.archive_version('Debian', '12', 'munge'),
                 'archive'),
    'debian13': (platforms.archive_version('Debian', '13', 'slurm-wlm'), platforms.archive_version('Debian', '13', 'munge'),
                 'archive'),
    'ubuntu2204': ('23.11.4', platforms.archive_version('Ubuntu', '22.04', 'munge'), 'site repository'),
    'ubuntu2404': (platforms.archive_version('Ubuntu', '24.04', 'slurm-wlm'),
                   platforms.archive_version('Ubuntu', '24.04', 'munge'), 'archive'),
    'rocky9': (EL_SLURM, EL_MUNGE, 'pins'),
}
PASSED = 'passed'
# (role, host) -> 'passed' or ('refused', the task that stops, [texts of its message: the variable, what is accepted]).
EXPECTED = dict(((role, host), PASSED) for host in MAIN for role in ROLES)
EXPECTED.update({
    # NVIDIA's CUDA repository serves x86_64 and aarch64 (sbsa) only (roles/nvidia_driver/vars/main.yml
    # __nvidia_driver_cuda_repo_slugs and _arches): a POWER node is refused, naming the variable and what is accepted,
    # by the driver and by the toolkit, whose cuda_repo source reads the same table.
    ('os_tuning', 'debian13-ppc64le'): PASSED,
    ('nvidia_driver', 'debian13-ppc64le'): ('refused', 'Check that the CUDA repository exists for this OS', [
        'nvidia_driver_source=cuda_repo supports Ubuntu-22, Ubuntu-24, Debian-12, Debian-13, RedHat-8, RedHat-9',
        'on x86_64, aarch64; this node is Debian-13 on ppc64le']),
    ('cuda_toolkit', 'debian13-ppc64le'): (
        'refused', 'Check the toolkit inputs, quoted versions and the repository settings (every failing check is listed)',
        ["cuda_toolkit_source=cuda_repo needs NVIDIA's CUDA repository, which exists for Ubuntu-22, Ubuntu-24, Debian-12,"
         ' Debian-13, RedHat-8, RedHat-9 on x86_64, aarch64; this node is Debian-13 on ppc64le',
         'use cuda_toolkit_source=distro']),
    ('container_runtime', 'debian13-ppc64le'): PASSED,
    ('health_check', 'debian13-ppc64le'): PASSED,
    # The archive's Slurm on Ubuntu 22.04 without a site repository.
    ('os_tuning', 'ubuntu2204-archive-slurm'): PASSED,
    ('slurm', 'ubuntu2204-archive-slurm'): ('refused', SLURM_PINS_CHECK, [
        'slurm_version %s on Ubuntu 22.04 (jammy) is older than Slurm 22.05, the oldest release the slurm role runs'
        % platforms.archive_version('Ubuntu', '22.04', 'slurm-wlm'),
        'Add a package repository with Slurm 22.05 or newer (slurm_apt_repository) and set slurm_version',
        'Debian 12, Debian 13, Ubuntu 24.04']),
    # node_exporter from packages on Rocky: EL has none.
    ('monitoring', 'rocky9-refused'): (
        'refused', 'Check the monitoring inputs, the cluster network and every scraped node (every failing check is listed)', [
            'monitoring_install_method=package is not accepted here', "'binary' (checksum-verified upstream releases)",
            'RedHat hosts have no distribution packages, so they need \'binary\'']),
    # The driver from the distribution on Rocky: no driver in its base repositories.
    ('os_tuning', 'rocky9-refused'): PASSED,
    ('nvidia_driver', 'rocky9-refused'): ('refused', 'Plan the driver packages', [
        "nvidia_driver_source 'distro' is not available on RHEL/Rocky", "use 'cuda_repo' or 'runfile'"]),
    ('cuda_toolkit', 'rocky9-refused'): PASSED,
    ('container_runtime', 'rocky9-refused'): PASSED,
    ('health_check', 'rocky9-refused'): PASSED,
})
# A preflight failing for a reason in the role (not in this test), strict xfail with the reason: {(role, host): reason}.
KNOWN_FAILURES = {}

# Templates that render only with what the full run sets (rendered here, they must fail naming that; the list is
# exact): (role, path under templates/) -> (the text of the error, why).
NEEDS_FULL_RUN = {
    ('nvidia_driver', 'etc/apt/sources.list.d/gpucluster-debian-nonfree.sources.j2'): (
        "'__nvidia_driver_debian_sources' is undefined",
        'Debian\'s non-free sources, set by the distro source\'s tasks (nvidia_driver_source: distro on Debian)'),
    ('rdma', 'etc/nccl.conf.j2'): ("'__rdma_nccl' is undefined", 'NCCL settings from rdma_facts, read in the full run'),
    ('rdma', 'etc/opensm/opensm.conf.j2'): (
        'is not in list', 'rendered only on rdma_subnet_manager_hosts (rdma_subnet_manager: host); this site\'s '
        'switches run the subnet manager'),
    ('rdma', 'usr/local/libexec/gpucluster/rdma-roce-qos.j2'): (
        "'__rdma_qos_devices' is undefined", 'RoCE only: the devices rdma_facts finds in the full run'),
    ('container_runtime', 'etc/containerd/conf.d/99-gpucluster-nvidia.toml.j2'): (
        "'__container_runtime_containerd_dropin' is undefined", 'made from the node\'s containerd configuration'),
    ('slurm', 'etc/slurm/gpucluster-gpu-jobs.j2'): (
        "'__slurm_gpu_jobs_kind' is undefined", 'the GPU job statistics source, probed in the full run'),
    ('slurm', 'etc/slurm/gres.conf.j2'): ("'__slurm_nodes' is undefined", 'the node list the full run gathers'),
    ('slurm', 'etc/slurm/slurm.conf.j2'): (
        "'__slurm_controller_name' is undefined", 'the controller\'s name, read from it in the full run'),
    ('slurm', 'etc/slurm/slurmdbd.conf.j2'): (
        "'__slurm_db_password' is undefined", 'the database password, made or read on the controller'),
    ('monitoring', 'grafana/datasource.yml.j2'): (
        "'__monitoring_scrape_password' is undefined", 'the scrape password, made or read on the server'),
    ('monitoring', 'web.yml.j2'): ("'__monitoring_scrape_password' is undefined", 'the same password'),
    ('monitoring', 'prometheus.yml.j2'): (
        "'__monitoring_targets' is undefined", 'the scrape targets, gathered from every node in the full run'),
}


def fqdn(host):
    return host + DOMAIN


def _host_vars(host):
    if host in REFUSALS:
        platform, only = REFUSALS[host]
        variables = dict(SITE, **PLATFORM_SITE[platform])
        variables.update(_ONLY[only])
        variables.update(REFUSAL_SITE[host])
    else:
        platform = host
        variables = dict(SITE, **PLATFORM_SITE[platform])
        variables['test_render'] = True
    group = 'cluster_' + host.replace('-', '_')
    # Each host is a cluster of its own: its Slurm controller and compute node, its monitoring server and targets.
    variables.update({'slurm_controller_group': group, 'slurm_compute_group': group, 'monitoring_server_group': group,
                      'monitoring_scrape_group': group, 'monitoring_gpu_group': group})
    return platform, group, variables


def _inventory(work, server):
    children = {'gpu_nodes': {'hosts': {}}, 'slurm_controller': {'hosts': {}}, 'slurm_compute': {'hosts': {}},
                'monitoring': {'hosts': {}}}
    inventory = {'all': {'children': {'gpucluster': {'children': children}}}}
    for index, host in enumerate(HOSTS):
        platform, group, variables = _host_vars(host)
        name = fqdn(host)
        variables.update(pf.machine_vars(work, server))
        variables['test_facts'] = dict(pf.node_facts(platform, name, '10.10.0.%d' % (11 + index), '10.20.0.%d' % (10 + index)),
                                       **REFUSAL_FACTS.get(host, {}))
        variables['health_check_python'] = str(work / 'node' / 'python3')
        children[group] = {'hosts': {name: variables}}
        if variables['gpucluster_gpu_stack']:
            children['gpu_nodes']['hosts'][name] = None
        children['slurm_controller']['hosts'][name] = None
        children['slurm_compute']['hosts'][name] = None
        children['monitoring']['hosts'][name] = None
    return inventory


def _answers():
    answers = {'*': dict(pf.COMMON_ANSWERS)}
    for host in HOSTS:
        platform = REFUSALS[host][0] if host in REFUSALS else host
        answers[fqdn(host)] = dict(pf.python_answer(pf.PLATFORMS[platform]['python']))
    return answers


# ------------------------------------------------------------------ what each role planned, recorded in its play

PLANS = {
    'os_tuning': "{{ {} }}",
    'nvidia_driver': "{{ {'plan': __nvidia_driver_plan, 'module': __nvidia_driver_module.type,"
                     " 'fabricmanager': __nvidia_driver_fabricmanager, 'os': __nvidia_driver_os,"
                     " 'kernel_packages': __nvidia_driver_kernel_packages, 'headers_prefix': __nvidia_driver_headers_prefix} }}",
    'cuda_toolkit': "{{ {'plan': __cuda_toolkit_plan} }}",
    'rdma': "{{ {'ipoib': __rdma_ipoib, 'inbox': __rdma_inbox_packages[ansible_facts['os_family']]} }}",
    'container_runtime': "{{ {'pkg_mgr': __container_runtime_pkg_mgr, 'engine': __container_runtime_engine_packages,"
                         " 'toolkit': __container_runtime_toolkit_packages} }}",
    'health_check': "{{ {} }}",
    'slurm': "{{ {'slurm': slurm_version, 'munge': slurm_munge_version, 'pkg_mgr': __slurm_pkg_mgr | default(none),"
             " 'munge_packages': __slurm_packages_munge,"
             " 'packages': __slurm_packages_common + __slurm_packages_controller + __slurm_packages_dbd"
             " + __slurm_packages_compute + __slurm_packages_pam_adopt} }}",
    'monitoring': "{{ {'method': monitoring_install_method, 'node_exporter': __monitoring_node_exporter_version,"
                  " 'web_args': __monitoring_node_exporter_web_args, 'packages': __monitoring_packages,"
                  " 'address': __monitoring_net.address} }}",
}
RECORD = "{{ {'outcomes': test_outcomes | default({}), 'plans': test_plans | default({}), 'renders': test_renders | default({})} | to_json }}"


def _templates(role):
    base = os.path.join(pf.REPO, 'roles', role, 'templates')
    return sorted(glob.glob(os.path.join(base, '**', '*.j2'), recursive=True))


# The variables a role's own task gives a template it renders in a loop: the first IPoIB interface (rdma, ipoib.yml's
# loop over __rdma_ipoib), node_exporter's unit (monitoring, install_binary.yml's __monitoring_component).
RENDER_VARS = {
    'rdma': {'item': '{{ __rdma_ipoib | first }}'},
    'monitoring': {'__monitoring_component': 'node_exporter'},
}


def _playbook(work):
    play = pf.playbook(work / 'out', RECORD, public=True, render=dict((role, _templates(role)) for role in ROLES),
                       render_vars=RENDER_VARS)
    # After each role's passing preflight (and its renders), note its plan in the same play (its vars are public there).
    for entry in play[1:-1]:
        for block in entry['tasks'][1:]:
            role = block['name'].split()[1]
            block['block'].append({'name': 'Note the %s plan' % role, 'ansible.builtin.set_fact': {
                'test_plans': "{{ test_plans | default({}) | combine({'%s': %s}) }}" % (role, PLANS.get(role, '{{ {} }}')[3:-3])}})
    # Each host is a cluster of its own (its slurm_controller_group and slurm_compute_group), all in site.yml's one
    # Slurm play: the slurm preflight's version rule compares the Slurm hosts of the play in this host's cluster only
    # (roles/slurm/vars/main.yml __slurm_version_hosts), so five platforms with four Slurm versions pass side by side.
    return play


@pytest.fixture(scope='module')
def matrix(tmp_path_factory):
    pf.require_tools()
    work = tmp_path_factory.mktemp('platform_matrix')
    pf.prepare(work, _answers())
    server = pf.KeyServer(work)
    (work / 'hosts.yml').write_text(yaml.safe_dump(_inventory(work, server), sort_keys=False))
    result = pf.run(work, [work / 'hosts.yml'], _playbook(work), [fqdn(h) for h in HOSTS], len(HOSTS), server)
    return result


def test_the_playbook_ran_on_every_host(matrix):
    assert matrix['rc'] == 0, matrix['out'][-8000:]
    for host in HOSTS:
        assert matrix['results'][fqdn(host)] is not None, (host, matrix['out'][-8000:])


def _result(matrix, host):
    result = matrix['results'][fqdn(host)]
    assert result is not None, (host, matrix['out'][-6000:])
    return result


def _platform(host):
    return REFUSALS[host][0] if host in REFUSALS else host


def _cases():
    cases = []
    for (role, host) in sorted(EXPECTED):
        marks = []
        if (role, host) in KNOWN_FAILURES:
            marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_FAILURES[(role, host)]))
        cases.append(pytest.param(role, host, marks=marks, id='%s-%s' % (role, host)))
    return cases


def test_site_yml_runs_exactly_these_preflights(matrix):
    for host in HOSTS:
        ran = set(_result(matrix, host)['outcomes'])
        assert ran == set(role for role, name in EXPECTED if name == host), host


@pytest.mark.parametrize('role, host', _cases())
def test_the_preflight_outcome(matrix, role, host):
    outcome = _result(matrix, host)['outcomes'].get(role)
    expected = EXPECTED[(role, host)]
    if expected == PASSED:
        assert outcome == PASSED, (role, host, outcome)
        return
    assert isinstance(outcome, dict), (role, host, outcome)
    assert outcome['task'] == expected[1], outcome
    for text in expected[2]:
        assert text in outcome['msg'], (text, outcome['msg'])


# ------------------------------------------------------------------ the plans against the platform table

def _passed(matrix, host, role):
    result = _result(matrix, host)
    if result['outcomes'].get(role) != PASSED:
        pytest.fail('%s did not pass on %s: %s' % (role, host, result['outcomes'].get(role)))
    return result['plans'][role]


def _docs_el_slurm_names():
    """The EL package names docs/platforms.md gives for EPEL's and SchedMD's Slurm builds."""
    with open(os.path.join(pf.REPO, 'docs', 'platforms.md')) as handle:
        text = handle.read()
    sentence = re.search(r'both name the packages (.*?)\(Fedora', text, re.S).group(1)
    return re.findall(r'`([a-z_-]+)`', sentence)


def _docs_debian_slurm_names():
    with open(os.path.join(pf.REPO, 'docs', 'platforms.md')) as handle:
        text = handle.read()
    return re.search(r'binary packages ([a-z, -]+)\)', text).group(1).split(', ')


def _passing(role):
    """The platforms whose preflight of ``role`` passes (EXPECTED): those have a plan to check."""
    return [host for host in MAIN if EXPECTED[(role, host)] == PASSED]


@pytest.mark.parametrize('host', _passing('nvidia_driver'))
def test_the_driver_plan_is_the_package_table(matrix, host):
    plan = _passed(matrix, host, 'nvidia_driver')
    facts = pf.PLATFORMS[host]
    distribution = 'RedHat' if facts['os_family'] == 'RedHat' else facts['distribution']
    assert plan['os'] == distribution and plan['module'] == 'open' and plan['fabricmanager'] is True
    branch = int(DRIVER.split('.', maxsplit=1)[0])
    table = nvidia_packages.driver_package_names(distribution, 'cuda_repo', branch, 'open', headless=True, fabricmanager=True)
    assert plan['plan']['packages'] == table['packages']
    assert plan['plan']['manager'] == table['manager'] == facts['pkg_mgr']
    pin = '%s=%s-*' if table['manager'] == 'apt' else '%s-%s'
    assert plan['plan']['install'] == [pin % (name, DRIVER) for name in table['packages']]
    # The kernel packages held with the driver: the running kernel's image on Debian and Ubuntu, EL's kernel packages.
    if facts['os_family'] == 'Debian':
        assert plan['kernel_packages'][0] == 'linux-image-' + facts['kernel'], plan['kernel_packages']
        assert plan['headers_prefix'] == 'linux-headers-'
    else:
        assert plan['headers_prefix'] == 'kernel-devel-' and 'kernel-core' in plan['kernel_packages']


@pytest.mark.parametrize('host', _passing('cuda_toolkit'))
def test_the_toolkit_plan_is_the_package_table(matrix, host):
    plan = _passed(matrix, host, 'cuda_toolkit')['plan']
    manager = pf.PLATFORMS[host]['pkg_mgr']
    assert plan['manager'] == manager
    names = {nvidia_packages.CUDA_TOOLKIT_PACKAGES['cuda_repo'].format(cuda_major=12, cuda_minor=4): '12.4.1',
             nvidia_packages.NCCL_PACKAGES[manager][0]: SITE['cuda_toolkit_nccl_version'],
             nvidia_packages.NCCL_PACKAGES[manager][1]: SITE['cuda_toolkit_nccl_version']}
    for name in nvidia_packages.cudnn_package_names(manager, 9, 12):
        names[name] = SITE['cuda_toolkit_cudnn_version']
    separator = '=' if manager == 'apt' else '-'
    planned = {}
    for spec in plan['install']:
        name = next((n for n in sorted(names, key=len, reverse=True) if spec.startswith(n + separator)), None)
        assert name is not None, (spec, sorted(names))
        planned[name] = spec[len(name) + 1:].rstrip('-*')
    assert planned == names


@pytest.mark.parametrize('host', MAIN)
def test_the_slurm_versions_and_names_are_the_platform_tables(matrix, host):
    plan = _passed(matrix, host, 'slurm')
    slurm, munge, source = SLURM[host]
    facts = pf.PLATFORMS[host]
    assert (plan['slurm'], plan['munge']) == (slurm, munge)
    assert plan['pkg_mgr'] == facts['pkg_mgr']
    if source == 'archive':
        # Empty pins: exactly the platform table's versions for the release.
        assert slurm == platforms.archive_version(facts['distribution'], facts['distribution_version'], 'slurm-wlm') != ''
    elif source == 'site repository':
        # Not the archive's Slurm (the site's repository serves it), but the archive's munge.
        assert slurm != platforms.archive_version(facts['distribution'], facts['distribution_version'], 'slurm-wlm')
        assert PLATFORM_SITE[host]['slurm_apt_repository']
    else:
        # EL: no archive row (EPEL keeps only its newest build): the site's pins, taken as they are.
        assert platforms.archive_version(facts['distribution'], facts['distribution_version'], 'slurm-wlm') == ''
        assert (slurm, munge) == (PLATFORM_SITE[host]['slurm_version'], PLATFORM_SITE[host]['slurm_munge_version'])
    if facts['os_family'] == 'Debian':
        assert munge == platforms.archive_version(facts['distribution'], facts['distribution_version'], 'munge')
        assert sorted(plan['packages']) == sorted(_docs_debian_slurm_names()) and plan['munge_packages'] == ['munge']
    else:
        assert sorted(plan['packages']) == sorted(_docs_el_slurm_names()) and plan['munge_packages'] == ['munge']


@pytest.mark.parametrize('host', MAIN)
def test_node_exporter_version_and_web_option_follow_the_platform_table(matrix, host):
    plan = _passed(matrix, host, 'monitoring')
    facts = pf.PLATFORMS[host]
    assert plan['method'] == PLATFORM_SITE[host]['monitoring_install_method']
    if plan['method'] == 'package':
        assert plan['packages']['node_exporter'] == ['prometheus-node-exporter']
        assert plan['node_exporter'] == platforms.archive_version(
            facts['distribution'], facts['distribution_version'], 'prometheus-node-exporter') != ''
    else:
        with open(os.path.join(pf.REPO, 'roles', 'monitoring', 'defaults', 'main.yml')) as handle:
            releases = yaml.safe_load(handle)['monitoring_binary_releases']
        assert plan['packages'] == {} and plan['node_exporter'] == releases['node_exporter']['version']
    # --web.config before 1.5.0, --web.config.file from 1.5.0 (node_exporter's CHANGELOG, docs/platforms.md).
    version = tuple(int(part) for part in plan['node_exporter'].split('.'))
    flag = '--web.config' if version < (1, 5, 0) else '--web.config.file'
    assert [arg.split('=')[0] for arg in plan['web_args']] == [flag]
    assert (host == 'ubuntu2204') == (flag == '--web.config')
    assert plan['address'] == '10.10.0.%d' % (11 + HOSTS.index(host))


@pytest.mark.parametrize('host', MAIN)
def test_the_container_and_rdma_packages_are_the_platforms(matrix, host):
    facts = pf.PLATFORMS[host]
    runtime = _passed(matrix, host, 'container_runtime')
    assert runtime['pkg_mgr'] == facts['pkg_mgr']
    separator = '=' if facts['pkg_mgr'] == 'apt' else '-'
    assert [spec.split(separator + SITE['container_runtime_nvidia_toolkit_version'])[0] for spec in runtime['toolkit']] == [
        'nvidia-container-toolkit', 'nvidia-container-toolkit-base', 'libnvidia-container-tools', 'libnvidia-container1']
    with open(os.path.join(pf.REPO, 'roles', 'container_runtime', 'vars', facts['os_family'] + '.yml')) as handle:
        family = yaml.safe_load(handle)['__container_runtime_engine_packages']
    debian13 = os.path.join(pf.REPO, 'roles', 'container_runtime', 'vars', 'Debian_13.yml')
    if host == 'debian13':
        with open(debian13) as handle:
            family = yaml.safe_load(handle)['__container_runtime_engine_packages']
    assert runtime['engine'] == family
    rdma = _passed(matrix, host, 'rdma')
    with open(os.path.join(pf.REPO, 'roles', 'rdma', 'vars', 'main.yml')) as handle:
        assert rdma['inbox'] == yaml.safe_load(handle)['__rdma_inbox_packages'][facts['os_family']]
    assert [i['name'] for i in rdma['ipoib']] == ['ibp26s0']


# ------------------------------------------------------------------ the templates


def _render_cases():
    cases = []
    for host in MAIN:
        for role in ROLES:
            if EXPECTED[(role, host)] == PASSED:
                cases.append(pytest.param(role, host, id='%s-%s' % (role, host)))
    return cases


def _family_values(role, family):
    path = os.path.join(pf.REPO, 'roles', role, 'vars', family + '.yml')
    if not os.path.exists(path):
        return {}
    with open(path) as handle:
        return yaml.safe_load(handle) or {}


@pytest.mark.parametrize('role, host', _render_cases())
def test_every_template_renders_on_the_platform(matrix, role, host):
    renders = _result(matrix, host)['renders'].get(role)
    assert renders is not None, (role, host)
    base = os.path.join(pf.REPO, 'roles', role, 'templates') + os.sep
    assert sorted(renders) == _templates(role)
    family = pf.PLATFORMS[host]['os_family']
    mine, other = _family_values(role, family), _family_values(role, 'RedHat' if family == 'Debian' else 'Debian')
    # Plain values that differ between the families' vars files (paths, service names).
    differing = dict((name, value) for name, value in mine.items()
                     if isinstance(value, str) and '{' not in value and other.get(name) not in (None, value))
    checked = 0
    for path, result in sorted(renders.items()):
        name = path[len(base):]
        if (role, name) in NEEDS_FULL_RUN:
            assert 'error' in result and NEEDS_FULL_RUN[(role, name)][0] in result['error'], (name, result)
            continue
        assert 'text' in result, (name, result.get('error'))
        with open(path) as handle:
            source = handle.read()
        for variable, value in differing.items():
            if re.search(r'\{\{-?\s*' + re.escape(variable) + r'\s*-?\}\}', source):
                assert value in result['text'], (name, variable, value)
                checked += 1
    # monitoring's units and configuration name the family's paths and users directly: at least one is checked.
    if role == 'monitoring':
        assert checked, (role, host, sorted(differing))


def test_the_stand_ins_were_asked_what_the_preflights_read(matrix):
    calls = [(call['host'], call['argv']) for call in matrix['calls']]
    for host in MAIN:
        # health_check_python: each release's python3 answered, and the preflight accepted it.
        assert (fqdn(host), pf.PYTHON_VERSION_ARGV) in calls, host
    # Slurm's upgrade window: dpkg-query on Debian and Ubuntu, rpm on Rocky.
    for host in ('debian12', 'debian13', 'ubuntu2204', 'ubuntu2404'):
        assert any(h == fqdn(host) and argv[0] == 'dpkg-query' for h, argv in calls), host
    assert any(h == fqdn('rocky9') and argv[0] == 'rpm' for h, argv in calls)
    assert not [(h, argv) for h, argv in calls if not h.startswith('rocky9') and argv[0] in ('rpm', 'dnf')]
    assert not [(h, argv) for h, argv in calls if h.startswith('rocky9') and argv[0] == 'dpkg-query']


def test_the_facts_are_the_releases():
    """The Debian 12 facts are the recorded ones (tests/unit/fixtures/k8s/facts-debian12.json), its python3 the
    recording's; every release's major version is what Ansible derives from its version."""
    with open(os.path.join(pf.FIXTURES, 'k8s', 'facts-debian12.json')) as handle:
        recorded = json.load(handle)
    python = recorded['ansible_python']['version']
    assert pf.PLATFORMS['debian12']['python'] == '%d.%d' % (python['major'], python['minor'])
    for key in ('distribution', 'distribution_version', 'distribution_major_version', 'distribution_release', 'os_family'):
        assert pf.node_facts('debian12', 'x.example.org', '10.10.0.1', '10.20.0.1')[key] == recorded['ansible_' + key]
    for name, facts in pf.PLATFORMS.items():
        assert facts['distribution_major_version'] == facts['distribution_version'].split('.')[0], name
        assert facts['pkg_mgr'] == ('dnf' if facts['os_family'] == 'RedHat' else 'apt'), name
