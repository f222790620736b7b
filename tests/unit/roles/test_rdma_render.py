# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Evaluate the rdma role's systemd version decision with Ansible's own templar: networkd reads the
[IPoIB] section from systemd 257 (Debian 13), not in 252 (Debian 12). Ansible's templating keeps a
backslash pair in a Jinja string as two characters, so the regex must be written with single ones;
only a rendering by Ansible shows that."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os

import pytest
import yaml

TASKS = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'roles', 'rdma', 'tasks', 'ipoib.yml')


def _expression():
    with open(TASKS) as handle:
        tasks = yaml.safe_load(handle)
    for task in tasks:
        facts = task.get('ansible.builtin.set_fact') or {}
        if '__rdma_networkd_ipoib_section' in facts:
            return facts['__rdma_networkd_ipoib_section']
    raise AssertionError('no task sets __rdma_networkd_ipoib_section in %s' % TASKS)


@pytest.mark.parametrize('line, expected', [
    ('systemd 257 (257.9-1~deb13u1)', True),
    ('systemd 258 (258.1-1)', True),
    ('systemd 252 (252.39-1~deb12u1)', False),
    ('', False),
])
def test_networkd_ipoib_section_follows_the_systemd_version(ansible_render, line, expected):
    variables = {'__rdma_systemd_version': {'stdout_lines': [line] if line else []}}
    result = ansible_render(variables, _expression())
    assert str(result) == str(expected), (line, result)


NCCL_TEMPLATE = os.path.join(os.path.dirname(TASKS), '..', 'templates', 'etc', 'nccl.conf.j2')


@pytest.mark.parametrize('choice, says', [
    ({'ports': ['mlx5_0:1', 'mlx5_1:1'], 'basis': 'gpu_switch', 'others': ['mlx5_4:1']},
     ['# NCCL_IB_HCA: the adapters that share a PCIe switch with a GPU (the compute rails).',
      '# Not used by NCCL (no GPU beside them: storage or front-end): mlx5_4:1.']),
    ({'ports': ['mlx5_0:1'], 'basis': 'link_layer', 'others': []},
     ["# NCCL_IB_HCA: every port of the fabric's link layer (no adapter shares a PCIe switch with a GPU)."]),
    ({'ports': ['mlx5_0'], 'basis': 'devices', 'others': []},
     ['# NCCL_IB_HCA: the ports named (rdma_nccl_ib_hca or rdma_roce_devices).']),
    ({'ports': [], 'basis': 'link_layer', 'others': []}, []),
])
def test_nccl_conf_says_which_ports_are_the_fabric(ansible_render, choice, says):
    with open(NCCL_TEMPLATE) as handle:
        template = handle.read()
    hcas = [('NCCL_IB_HCA', '=' + ','.join(choice['ports']))] if choice['ports'] else []
    text = ansible_render({'ansible_managed': 'Ansible managed', 'rdma_fabric': 'infiniband',
                           '__rdma_nccl': [('NCCL_SOCKET_IFNAME', 'ib0')] + hcas, '__rdma_fabric_choice': choice}, template)
    lines = text.splitlines()
    assert [line for line in lines if line.startswith('# NCCL_IB_HCA') or line.startswith('# Not used')] == says
    # NCCL reads NAME=VALUE lines; every other line is a comment.
    assert [line for line in lines if line and not line.startswith('#')] == ['%s=%s' % kv for kv in
                                                                             [('NCCL_SOCKET_IFNAME', 'ib0')] + hcas]


ACS_TEMPLATE = os.path.join(os.path.dirname(TASKS), '..', 'templates', 'etc', 'systemd', 'system',
                            'gpucluster-pcie-acs.service.j2')


@pytest.mark.parametrize('bridges, stack, starts', [
    (['0000:17:00.0', '0000:17:01.0'], 'doca', ['/usr/bin/setpci -s 0000:17:00.0 ECAP_ACS+0x6.w=0000',
                                                '/usr/bin/setpci -s 0000:17:01.0 ECAP_ACS+0x6.w=0000']),
    ([], 'inbox', ['/bin/true']),
])
def test_acs_unit_clears_each_bridge_before_the_fabric_starts(ansible_render, bridges, stack, starts):
    with open(ACS_TEMPLATE) as handle:
        template = handle.read()
    text = ansible_render({'ansible_managed': 'Ansible managed', '__rdma_acs_bridges': bridges, 'rdma_stack': stack},
                          template)
    lines = text.splitlines()
    assert [line.split('=', 1)[1] for line in lines if line.startswith('ExecStart=')] == starts
    before = [line for line in lines if line.startswith('Before=')][0]
    assert ('openibd.service' in before) == (stack == 'doca') and 'nvidia-persistenced.service' in before
    assert 'local-fs.target' in [line for line in lines if line.startswith('After=')][0].split('=', 1)[1].split()
    assert 'Type=oneshot' in lines and 'RemainAfterExit=yes' in lines and 'WantedBy=multi-user.target' in lines


# DOCA-OFED on RHEL, Rocky Linux and AlmaLinux 9 (tasks/stack_doca_dnf.yml): the repository file, the task file chosen,
# the dnf tasks' conditions and package names, and the fast path's files, all evaluated with Ansible's templar under
# each platform's facts (the facts as tests/unit/roles/test_storage_platforms.py writes them: os-release
# VERSION_ID 9.4, os_family RedHat) with the role's defaults and vars/main.yml.
ROLE = os.path.join(os.path.dirname(TASKS), '..')


# The DOCA tasks use the collection's filters: rendered by a child process (tests/unit/conftest.py served_render).
@pytest.fixture(scope='module')
def filter_render(served_render):
    """``render(variables, value)`` with Ansible's templar and the collection's filters, in a child process."""
    return served_render


REPO_TEMPLATE = os.path.join(ROLE, 'templates', 'etc', 'yum.repos.d', 'gpucluster-doca.repo.j2')
DOCA_URL = 'https://linux.mellanox.com/public/repo/doca/3.2.1/{os}/{arch}/'
DOCA_FPR = '3D4E 3DF0 A8FE 2D45 0E8B  E62F A4B4 69963BF8 63CC'
CONTAINERS = ['docker', 'container', 'podman', 'lxc', 'containerd']


def _platform(distribution, version, family, kernel, arch='x86_64', virtualization='kvm'):
    return {'distribution': distribution, 'distribution_version': version,
            'distribution_major_version': version.split('.')[0], 'os_family': family, 'kernel': kernel,
            'architecture': arch, 'virtualization_type': virtualization, 'interfaces': ['lo', 'eth0'],
            'pkg_mgr': 'dnf' if family == 'RedHat' else 'apt'}


EL_PLATFORMS = {
    'rocky94': _platform('Rocky', '9.4', 'RedHat', '5.14.0-427.13.1.el9_4.x86_64'),
    'rhel94': _platform('RedHat', '9.4', 'RedHat', '5.14.0-427.13.1.el9_4.x86_64'),
    'alma94_arm': _platform('AlmaLinux', '9.4', 'RedHat', '5.14.0-427.13.1.el9_4.aarch64', arch='aarch64'),
}
DEBIAN12 = _platform('Debian', '12.11', 'Debian', '6.1.0-28-amd64')


def _yaml_file(*parts):
    with open(os.path.join(ROLE, *parts)) as handle:
        return yaml.safe_load(handle)


def _role_vars(facts, check_mode=False, **over):
    variables = dict(_yaml_file('defaults', 'main.yml'))
    variables.update(_yaml_file('vars', 'main.yml'))
    variables.update({
        'ansible_facts': facts, 'ansible_check_mode': check_mode, 'ansible_managed': 'Ansible managed',
        'inventory_hostname': 'gpu01', 'groups': {'all': ['gpu01'], 'gpu_nodes': ['gpu01']},
        '__rdma_nvidia_version': {'content': ''},
        'rdma_fabric': 'infiniband', 'rdma_stack': 'doca', 'rdma_doca_repo_url': DOCA_URL,
        'rdma_doca_repo_key_url': 'https://linux.mellanox.com/public/repo/doca/3.2.1/rhel9/x86_64/GPG-KEY-Mellanox.pub',
        'rdma_doca_repo_key_fingerprint': DOCA_FPR, 'rdma_doca_version': '3.2.1-1.el9',
    })
    variables.update(over)
    return variables


def _when(render, variables, task):
    conditions = task.get('when', [])
    conditions = conditions if isinstance(conditions, list) else [conditions]
    return all(render(variables, '{{ (%s) | bool }}' % c) in (True, 'True') for c in conditions)


def _dnf_tasks():
    with open(os.path.join(os.path.dirname(TASKS), 'stack_doca_dnf.yml')) as handle:
        return yaml.safe_load(handle)


@pytest.mark.parametrize('platform, directory', [('rocky94', 'rhel9/x86_64'), ('rhel94', 'rhel9/x86_64'),
                                                 ('alma94_arm', 'rhel9/arm64-sbsa')])
def test_doca_repo_file_for_el9(filter_render, platform, directory):
    with open(REPO_TEMPLATE) as handle:
        template = handle.read()
    variables = _role_vars(EL_PLATFORMS[platform])
    assert filter_render(variables, '{{ __rdma_context | gpucluster.core.rdma_input_errors }}') == []
    lines = filter_render(variables, template).splitlines()
    settings = dict(line.split('=', 1) for line in lines if line and not line.startswith('#') and '=' in line)
    assert '[gpucluster-doca]' in lines
    assert settings['baseurl'] == 'https://linux.mellanox.com/public/repo/doca/3.2.1/%s/' % directory
    assert settings['gpgcheck'] == '1' and settings['enabled'] == '1'
    assert settings['gpgkey'] == 'file:///etc/pki/rpm-gpg/RPM-GPG-KEY-gpucluster-doca'
    assert '# 3D4E3DF0A8FE2D450E8BE62FA4B469963BF863CC before it was written here.' in lines
    # the per-minor layout before DOCA 3.2 (e.g. 2.9.3's rhel9.4), and a directory written out used as it is.
    older = dict(variables, rdma_doca_repo_url='https://linux.mellanox.com/public/repo/doca/2.9.3/{os}/x86_64/')
    assert filter_render(older, '{{ __rdma_doca_baseurl }}') == \
        'https://linux.mellanox.com/public/repo/doca/2.9.3/rhel9.4/x86_64/'
    written = dict(variables, rdma_doca_repo_url='https://linux.mellanox.com/public/repo/doca/2.9.3/rhel9.2/x86_64/')
    assert filter_render(written, '{{ __rdma_doca_baseurl }}') == written['rdma_doca_repo_url']


@pytest.mark.parametrize('facts, stack, wanted', [
    (EL_PLATFORMS['rocky94'], 'doca', 'stack_doca_dnf.yml'), (EL_PLATFORMS['rhel94'], 'doca', 'stack_doca_dnf.yml'),
    (DEBIAN12, 'doca', 'stack_doca.yml'), (EL_PLATFORMS['rocky94'], 'inbox', 'stack_inbox.yml'),
    (DEBIAN12, 'inbox', 'stack_inbox.yml'),
])
def test_the_stack_file_follows_the_family(filter_render, facts, stack, wanted):
    assert filter_render(_role_vars(facts, rdma_stack=stack), '{{ __rdma_stack_tasks }}') == wanted
    assert os.path.exists(os.path.join(os.path.dirname(TASKS), wanted))


@pytest.mark.parametrize('platform', sorted(EL_PLATFORMS))
def test_dnf_tasks_on_a_converging_el9_host(filter_render, platform):
    facts = EL_PLATFORMS[platform]
    variables = _role_vars(facts, rdma_extra_packages=['mlnx-ethtool'], rdma_doca_packages=['doca-ofed', 'mlnx-tools'],
                           __rdma_doca_repo={'changed': False}, __rdma_doca_rpm_key_file={'changed': False},
                           __rdma_doca_versionlock_plugin={'changed': False})
    tasks = _dnf_tasks()
    ran = [t['name'] for t in tasks if _when(filter_render, variables, t)]
    assert ran == [t['name'] for t in tasks], 'every dnf task runs on a VM'
    names = dict((filter_render(variables, t['name']), t) for t in tasks)
    install = names['Install DOCA-OFED with dnf at 3.2.1-1.el9']['ansible.builtin.dnf']
    assert filter_render(variables, install['name']) == ['doca-ofed-3.2.1-1.el9', 'mlnx-tools', 'mlnx-ethtool']
    assert install['disable_plugin'] == ['versionlock'] and install['allow_downgrade'] is True
    assert names['Install DOCA-OFED with dnf at 3.2.1-1.el9']['notify'] == 'rdma doca changed'
    headers = names['Install the headers of the running kernel for the DOCA kernel modules (DKMS, dnf)']
    assert filter_render(variables, headers['ansible.builtin.dnf']['name']) == 'kernel-devel-' + facts['kernel']
    query = names['Ask dnf for the offered versions of doca-ofed']
    assert filter_render(variables, query['ansible.builtin.command']['argv']) == [
        'dnf', '--quiet', 'repoquery', '--available', '--repo', 'gpucluster-doca', '--queryformat',
        '%{version}-%{release}', 'doca-ofed']
    assert query['changed_when'] is False and query['check_mode'] is False
    # a real failed_when: dnf could not read the repository.
    for rc, failed in ((0, False), (1, True)):
        assert filter_render(dict(variables, __rdma_doca_repoquery={'rc': rc}),
                             '{{ (%s) | bool }}' % query['failed_when']) is failed
    offered = names['Fail before any package change when the version is not offered (dnf)']['ansible.builtin.assert']
    for lines, result in ((['3.2.1-1.el9', '3.2.0-1.el9'], True), (['3.2.0-1.el9'], False), ([], False)):
        assert filter_render(dict(variables, __rdma_doca_repoquery={'stdout_lines': lines}),
                             '{{ (%s) | bool }}' % offered['that']) is result
    assert filter_render(variables, names['Lock the DOCA packages with dnf versionlock']['gpucluster.core.package_hold']['name']) == \
        ['doca-ofed', 'mlnx-tools']
    assert tasks[-1] == {'name': 'Build the NVIDIA DKMS modules again now if DOCA-OFED changed',
                         'ansible.builtin.meta': 'flush_handlers'}


def test_dnf_tasks_in_check_mode_from_zero_and_in_a_container(filter_render):
    variables = _role_vars(dict(EL_PLATFORMS['rocky94'], virtualization_type='container'), check_mode=True,
                           __rdma_doca_repo={'changed': True}, __rdma_doca_rpm_key_file={'changed': True},
                           __rdma_doca_versionlock_plugin={'changed': True})
    tasks = _dnf_tasks()
    ran = [filter_render(variables, t['name']) for t in tasks if _when(filter_render, variables, t)]
    # Nothing reads the repository that check mode did not write, and the key not written is not imported.
    assert ran == ['Fetch and check the DOCA repository key', 'Write the checked DOCA key where rpm and dnf read it',
                   'Define the DOCA repository (dnf)', 'Install the dnf versionlock plugin',
                   'Build the NVIDIA DKMS modules again now if DOCA-OFED changed']
    # a converged host in check mode runs the read-only checks and the install and lock (which report nothing).
    converged = dict(variables, __rdma_doca_repo={'changed': False}, __rdma_doca_rpm_key_file={'changed': False},
                     __rdma_doca_versionlock_plugin={'changed': False})
    assert [t['name'] for t in tasks if not _when(filter_render, converged, t)] == [
        'Install the headers of the running kernel for the DOCA kernel modules (DKMS, dnf)']


@pytest.mark.parametrize('facts, wanted', [
    (EL_PLATFORMS['rocky94'], ['/etc/pki/rpm-gpg/RPM-GPG-KEY-gpucluster-doca', '/etc/yum.repos.d/gpucluster-doca.repo',
                               '/etc/dnf/plugins/versionlock.list']),
    (DEBIAN12, ['/etc/apt/keyrings/gpucluster-doca.asc', '/etc/apt/sources.list.d/gpucluster-doca.sources',
                '/etc/apt/preferences.d/gpucluster-doca.pref']),
])
def test_fast_path_verifies_the_files_of_the_family(filter_render, facts, wanted):
    files = filter_render(_role_vars(facts), '{{ __rdma_fast_path.files }}')
    doca = [f for f in files if 'doca' in f or 'versionlock' in f]
    assert doca == wanted
    assert '/sys/module/mlx5_core/version' in files and '/proc/sys/kernel/random/boot_id' in files
    inbox = filter_render(_role_vars(facts, rdma_stack='inbox'), '{{ __rdma_fast_path.files }}')
    assert [f for f in inbox if 'doca' in f or 'versionlock' in f or 'mlx5' in f] == []
