# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import ipaddress

import pytest
from hypothesis import given, settings, strategies as st

from ansible.errors import AnsibleFilterError
from ansible_collections.gpucluster.core.plugins.filter import rdma


def _cfg(**over):
    cfg = {
        'rdma_fabric': 'infiniband', 'rdma_stack': 'inbox', 'rdma_extra_packages': [],
        'rdma_doca_repo_url': '', 'rdma_doca_repo_key_url': '', 'rdma_doca_repo_key_fingerprint': '',
        'rdma_doca_version': '', 'rdma_doca_packages': ['doca-ofed'],
        'rdma_ipoib_interfaces': [], 'rdma_ipoib_group': 'gpu_nodes', 'rdma_ipoib_index_offset': 10,
        'rdma_ipoib_host_index': 0, 'rdma_ipoib_mtu': 2044, 'rdma_ipoib_mode': 'datagram',
        'rdma_network_renderer': 'auto', 'rdma_roce_pfc_priority': 3, 'rdma_roce_dscp': 26, 'rdma_roce_tos': 106,
        'rdma_roce_devices': [], 'rdma_subnet_manager': 'none', 'rdma_subnet_manager_hosts': [],
        'rdma_subnet_manager_priorities': [14, 13], 'rdma_gpudirect': 'dmabuf', 'rdma_nccl_socket_ifname': '',
        'rdma_nccl_ib_hca': [], 'rdma_nccl_extra': {}, 'os_family': 'Debian', 'kernel': '6.1.0-28-amd64',
        'inventory_hostname': 'gpu02', 'inventory_hosts': ['head', 'gpu01', 'gpu02', 'gpu03'],
        'group_hosts': ['gpu03', 'gpu01', 'gpu02'], 'nvidia_driver_kernel_module_type': '',
        'cuda_toolkit_version': '', 'nvidia_version_text': '', 'rdma_nccl_ib_gid_index': '', 'nccl_version': '',
    }
    cfg.update(over)
    return cfg


OPEN_TEXT = 'NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.163.01  Release Build\n'
PROPRIETARY_TEXT = 'NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.309.01  Wed Oct 15 2025\n'
FPR = '3D4E 3DF0 A8FE 2D45 0E8B  E62F A4B4 69963BF8 63CC'


def _error_text(**over):
    """Every input error of a configuration, joined (tests look for several messages at once)."""
    return ' | '.join(rdma.rdma_input_errors(_cfg(**over)))


def test_defaults_are_accepted():
    assert rdma.rdma_input_errors(_cfg()) == []
    assert rdma.rdma_input_errors(_cfg(rdma_fabric='roce')) == []


def test_fabric_none_checks_nothing_else():
    assert rdma.rdma_input_errors(_cfg(rdma_fabric='none', rdma_stack='bogus', rdma_roce_pfc_priority=9)) == []


def test_unknown_fabric():
    (err,) = rdma.rdma_input_errors(_cfg(rdma_fabric='ethernet'))
    assert 'rdma_fabric (gpucluster_fabric) must be one of none, infiniband, roce' in err


def test_host_index_from_sorted_group():
    cfg = _cfg(rdma_ipoib_interfaces=[{'name': 'ib0', 'subnet': '10.20.0.0/24'}])
    assert rdma.ipoib_host_index(cfg) == (11, None)
    plan = rdma.ipoib_plan(cfg)
    assert plan == [{'name': 'ib0', 'subnet': '10.20.0.0/24', 'address': '10.20.0.11/24', 'address_ip': '10.20.0.11',
                     'prefix': 24, 'mtu': 2044, 'mode': 'datagram'}]


def test_explicit_index_and_address():
    cfg = _cfg(rdma_ipoib_host_index=300, rdma_ipoib_interfaces=[
        {'name': 'ib0', 'subnet': '10.20.0.0/16'},
        {'name': 'ib1', 'subnet': '10.21.0.0/16', 'address': '10.21.7.7', 'mtu': 4092, 'mode': 'datagram'}])
    assert [p['address'] for p in rdma.ipoib_plan(cfg)] == ['10.20.1.44/16', '10.21.7.7/16']


def test_subnet_too_small_for_the_hosts():
    # 3 hosts from offset 10 need index 12; a /29 has usable indexes 1..6.
    errors = rdma.rdma_input_errors(_cfg(rdma_ipoib_interfaces=[{'name': 'ib0', 'subnet': '10.20.0.0/29'}]))
    assert len(errors) == 1
    assert 'rdma_ipoib_interfaces[0].subnet 10.20.0.0/29 is too small for the hosts' in errors[0]
    assert 'usable host indexes 1 to 6' in errors[0] and 'need up to 12' in errors[0]


def test_subnet_size_judged_for_the_whole_group_not_this_host():
    # gpu01 itself fits (index 10 of 1..14) but gpu03 needs 12... and a 4th host would need 13: /28 fits 3 hosts.
    ok = _cfg(inventory_hostname='gpu01', rdma_ipoib_interfaces=[{'name': 'ib0', 'subnet': '10.20.0.0/28'}])
    assert rdma.rdma_input_errors(ok) == []
    bad = dict(ok, group_hosts=['gpu01', 'gpu02', 'gpu03', 'gpu04', 'gpu05', 'gpu06'])
    assert 'too small for the hosts' in rdma.rdma_input_errors(bad)[0]


def test_subnet_must_be_a_network():
    (err,) = rdma.rdma_input_errors(_cfg(rdma_ipoib_interfaces=[{'name': 'ib0', 'subnet': '10.20.0.5/24'}]))
    assert 'rdma_ipoib_interfaces[0].subnet must be a network such as 10.20.0.0/16' in err
    (err,) = rdma.rdma_input_errors(_cfg(rdma_ipoib_interfaces=[{'name': 'ib0', 'subnet': 'ten'}]))
    assert '.subnet must be a network' in err


@pytest.mark.parametrize('mode,mtu,ok', [
    ('datagram', 2044, True), ('datagram', 4092, True), ('datagram', 4093, False), ('datagram', 9000, False),
    ('connected', 65520, True), ('connected', 65521, False), ('datagram', 1279, False), ('datagram', '2044', False),
])
def test_mtu_the_link_layer_can_carry(mode, mtu, ok):
    errors = rdma.rdma_input_errors(_cfg(rdma_ipoib_interfaces=[
        {'name': 'ib0', 'subnet': '10.20.0.0/24', 'mode': mode, 'mtu': mtu}]))
    assert (errors == []) is ok
    if not ok:
        assert 'rdma_ipoib_interfaces[0].mtu' in errors[0]


def test_address_outside_subnet_and_duplicates_and_unknown_keys():
    text = _error_text(rdma_ipoib_interfaces=[
        {'name': 'ib0', 'subnet': '10.20.0.0/24', 'address': '10.20.1.5'},
        {'name': 'ib0', 'subnet': '10.20.0.0/24', 'address': '10.20.0.255'},
        {'name': 'ib1', 'subnet': '10.20.0.0/24', 'adress': '10.20.0.4'}])
    assert 'address 10.20.1.5 is not a usable address of subnet 10.20.0.0/24' in text
    assert 'address 10.20.0.255 is not a usable address' in text
    assert 'unknown keys adress' in text
    assert 'names ib0 more than once' in text


def test_host_index_values():
    assert rdma.ipoib_host_index(_cfg(rdma_ipoib_host_index=None)) == (11, None)
    assert rdma.ipoib_host_index(_cfg(rdma_ipoib_host_index=7)) == (7, None)
    for bad in (-1, '7', 2.0):
        index, err = rdma.ipoib_host_index(_cfg(rdma_ipoib_host_index=bad))
        assert index is None and 'rdma_ipoib_host_index must be a positive integer' in err


def test_host_outside_group_needs_an_index():
    (err,) = rdma.rdma_input_errors(_cfg(inventory_hostname='head',
                                         rdma_ipoib_interfaces=[{'name': 'ib0', 'subnet': '10.20.0.0/24'}]))
    assert 'head is not in group gpu_nodes' in err


def test_ipoib_only_on_infiniband():
    (err,) = rdma.rdma_input_errors(_cfg(rdma_fabric='roce',
                                         rdma_ipoib_interfaces=[{'name': 'ib0', 'subnet': '10.20.0.0/24'}]))
    assert 'rdma_ipoib_interfaces is for rdma_fabric: infiniband' in err


def test_plan_refuses_what_preflight_refuses():
    with pytest.raises(AnsibleFilterError, match='too small'):
        rdma.ipoib_plan(_cfg(rdma_ipoib_interfaces=[{'name': 'ib0', 'subnet': '10.20.0.0/30'}]))


@settings(max_examples=150, deadline=None)
@given(prefix=st.integers(min_value=8, max_value=30), hosts=st.integers(min_value=1, max_value=300),
       offset=st.integers(min_value=1, max_value=50), pick=st.integers(min_value=0, max_value=299))
def test_plan_addresses_are_unique_usable_or_refused(prefix, hosts, offset, pick):
    group = ['n%03d' % i for i in range(hosts)]
    net = ipaddress.ip_network('10.0.0.0/%d' % prefix)
    base = _cfg(group_hosts=group, rdma_ipoib_index_offset=offset,
                rdma_ipoib_interfaces=[{'name': 'ib0', 'subnet': str(net)}])
    fits = hosts - 1 + offset <= net.num_addresses - 2
    errors = rdma.rdma_input_errors(dict(base, inventory_hostname=group[pick % hosts]))
    assert (errors == []) is fits
    if fits:
        addresses = set()
        for host in group if hosts <= 40 else [group[0], group[-1], group[pick % hosts]]:
            ip = ipaddress.ip_address(rdma.ipoib_plan(dict(base, inventory_hostname=host))[0]['address_ip'])
            assert ip in net and ip not in (net.network_address, net.broadcast_address)
            addresses.add(ip)
        assert len(addresses) == min(hosts, 40) if hosts <= 40 else len(addresses) >= 2 or hosts == 1


@pytest.mark.parametrize('over,expect', [
    ({'rdma_roce_pfc_priority': 8}, 'rdma_roce_pfc_priority must be an 802.1p priority 0 to 7 (got 8)'),
    ({'rdma_roce_pfc_priority': -1}, 'rdma_roce_pfc_priority must be an 802.1p priority 0 to 7'),
    ({'rdma_roce_pfc_priority': True}, 'rdma_roce_pfc_priority must be'),
    ({'rdma_roce_dscp': 64}, 'rdma_roce_dscp must be a DSCP value 0 to 63'),
    ({'rdma_roce_tos': 256}, 'rdma_roce_tos must be a ToS byte 0 to 255'),
    ({'rdma_roce_tos': 96}, 'rdma_roce_tos 96 carries DSCP 24, not rdma_roce_dscp 26'),
    ({'rdma_roce_devices': ['mlx5 0']}, 'rdma_roce_devices must be a list of RDMA device names'),
])
def test_roce_values(over, expect):
    errors = rdma.rdma_input_errors(_cfg(rdma_fabric='roce', **over))
    assert len(errors) == 1 and expect in errors[0]


def test_roce_values_not_judged_on_infiniband():
    assert rdma.rdma_input_errors(_cfg(rdma_roce_pfc_priority=8)) == []


def test_doca_needs_a_fingerprint():
    cfg = _cfg(rdma_stack='doca', rdma_doca_repo_url='https://linux.mellanox.com/public/repo/doca/2.9.1/debian12/x86_64/',
               rdma_doca_repo_key_url='https://linux.mellanox.com/public/repo/doca/GPG-KEY-Mellanox.pub',
               rdma_doca_version='2.9.1-1')
    (err,) = rdma.rdma_input_errors(cfg)
    assert 'rdma_stack: doca needs rdma_doca_repo_key_fingerprint' in err
    assert rdma.rdma_input_errors(dict(cfg, rdma_doca_repo_key_fingerprint=FPR)) == []
    assert 'needs rdma_doca_repo_key_fingerprint' in rdma.rdma_input_errors(
        dict(cfg, rdma_doca_repo_key_fingerprint=FPR[:-1]))[0]


def test_doca_other_inputs():
    text = _error_text(rdma_stack='doca', rdma_doca_repo_key_fingerprint=FPR,
                       rdma_doca_repo_url='ftp://x/', rdma_doca_version=2.9, os_family='RedHat')
    assert 'needs rdma_doca_repo_url, an http(s) URL' in text
    assert 'needs rdma_doca_repo_key_url' in text
    assert 'needs rdma_doca_version, the exact package version (quoted string) of doca-ofed' in text
    assert 'rdma_stack: doca is supported on Debian and Ubuntu (apt), RHEL, Rocky Linux and AlmaLinux 9 (dnf)' in text


DOCA_EL = {'rdma_stack': 'doca', 'rdma_doca_repo_key_fingerprint': FPR, 'rdma_doca_version': '3.2.1',
           'rdma_doca_repo_url': 'https://linux.mellanox.com/public/repo/doca/3.2.1/{os}/{arch}/',
           'rdma_doca_repo_key_url': 'https://linux.mellanox.com/public/repo/doca/3.2.1/rhel9/x86_64/GPG-KEY-Mellanox.pub',
           'os_family': 'RedHat', 'distribution': 'Rocky', 'distribution_version': '9.4',
           'distribution_major_version': '9', 'architecture': 'x86_64'}


def _doca_el(**over):
    """A RHEL-family host with rdma_stack: doca (Rocky 9.4 unless ``over`` says otherwise)."""
    cfg = _cfg()
    cfg.update(DOCA_EL)
    cfg.update(over)
    return cfg


@pytest.mark.parametrize('distribution', ['RedHat', 'Rocky', 'AlmaLinux'])
def test_doca_accepted_on_el9(distribution):
    assert rdma.rdma_input_errors(_doca_el(distribution=distribution)) == []
    # a directory written out is used as it is (the override of {os}), e.g. a minor release NVIDIA publishes.
    assert rdma.rdma_input_errors(_doca_el(
        distribution=distribution, rdma_doca_repo_url='https://linux.mellanox.com/public/repo/doca/2.9.3/rhel9.6/x86_64/')) == []


@pytest.mark.parametrize('over, says', [
    ({'distribution': 'RedHat', 'distribution_version': '8.9', 'distribution_major_version': '8'},
     'this host is RedHat 8 (os_family RedHat): use rdma_stack: inbox there'),
    ({'distribution': 'Fedora', 'distribution_version': '40', 'distribution_major_version': '40'},
     'this host is Fedora 40 (os_family RedHat)'),
    ({'os_family': 'Suse', 'distribution': 'SLES', 'distribution_version': '15.5', 'distribution_major_version': '15'},
     'this host is SLES 15 (os_family Suse)'),
])
def test_doca_refused_elsewhere_naming_the_platform(over, says):
    (err,) = rdma.rdma_input_errors(_doca_el(**over))
    assert err.startswith('rdma_stack: doca is supported on Debian and Ubuntu (apt), RHEL, Rocky Linux and AlmaLinux 9 '
                          '(dnf) by this role;') and says in err


def test_doca_el_directory_that_cannot_be_derived_is_refused():
    (err,) = rdma.rdma_input_errors(_doca_el(
        rdma_doca_repo_url='https://linux.mellanox.com/public/repo/doca/2.9.3/{os}/{arch}/', distribution_version='9'))
    assert 'one directory per minor release' in err and 'write the directory instead of {os}' in err
    (err,) = rdma.rdma_input_errors(_doca_el(rdma_doca_repo_url='https://linux.mellanox.com/public/repo/doca/latest/{os}/{arch}/'))
    assert 'names no DOCA release' in err


def test_doca_placeholders_refused_on_debian():
    (err,) = rdma.rdma_input_errors(_doca_el(os_family='Debian', distribution='Debian', distribution_major_version='12'))
    assert err.startswith('rdma_doca_repo_url: the {os} and {arch} placeholders are filled on RHEL, Rocky and AlmaLinux only')


def test_inbox_os_families():
    assert rdma.rdma_input_errors(_cfg(os_family='RedHat')) == []
    (err,) = rdma.rdma_input_errors(_cfg(os_family='Suse'))
    assert 'rdma_stack: inbox knows the package names of the Debian and RedHat families; this host is Suse' in err


def test_peermem_needs_doca():
    (err,) = rdma.rdma_input_errors(_cfg(rdma_gpudirect='peermem'))
    assert 'rdma_gpudirect: peermem needs rdma_stack: doca' in err and 'ib_register_peer_memory_client' in err


@pytest.mark.parametrize('over,expect', [
    ({'nvidia_driver_kernel_module_type': 'proprietary'}, 'nvidia_driver_kernel_module_type is proprietary'),
    ({'nvidia_version_text': PROPRIETARY_TEXT}, 'the loaded driver is the proprietary one (NVRM version: NVIDIA UNIX x86_64'),
    ({'kernel': '5.10.0-33-amd64'}, 'needs Linux 5.12 or newer; this host runs 5.10.0-33-amd64'),
    ({'cuda_toolkit_version': '11.6'}, 'needs CUDA 11.7 or newer'),
])
def test_dmabuf_against_the_driver_choices(over, expect):
    (err,) = rdma.rdma_input_errors(_cfg(**over))
    assert expect in err


def test_dmabuf_accepted():
    assert rdma.rdma_input_errors(_cfg(nvidia_version_text=OPEN_TEXT, kernel='5.12.0', cuda_toolkit_version='12.10',
                                       nvidia_driver_kernel_module_type='auto')) == []
    # The driver role is about to install the open modules over a proprietary one still loaded.
    assert rdma.rdma_input_errors(_cfg(nvidia_version_text=PROPRIETARY_TEXT,
                                       nvidia_driver_kernel_module_type='open')) == []
    assert rdma.rdma_input_errors(_cfg(rdma_gpudirect='none', kernel='4.18.0')) == []


def test_subnet_manager_hosts():
    ok = _cfg(rdma_subnet_manager='host', rdma_subnet_manager_hosts=['gpu01', 'head'])
    assert rdma.rdma_input_errors(ok) == []
    for hosts in (['gpu01'], ['gpu01', 'gpu01'], ['gpu01', 'nowhere'], 'gpu01,head'):
        (err,) = rdma.rdma_input_errors(dict(ok, rdma_subnet_manager_hosts=hosts))
        assert 'needs rdma_subnet_manager_hosts, two different inventory hosts' in err
    (err,) = rdma.rdma_input_errors(dict(ok, rdma_subnet_manager_priorities=[13, 14]))
    assert 'rdma_subnet_manager_priorities must be two OpenSM priorities 0 to 15' in err
    (err,) = rdma.rdma_input_errors(dict(ok, rdma_fabric='roce'))
    assert 'RoCE needs no subnet manager' in err
    (err,) = rdma.rdma_input_errors(_cfg(rdma_subnet_manager='opensm'))
    assert 'rdma_subnet_manager must be one of none, switch, host' in err


@pytest.mark.parametrize('extra,expect', [
    ({'NCCL_DEBUG': 'INFO'}, 'NCCL_DEBUG does not belong in /etc/nccl.conf'),
    ({'NCCL_DEBUG_SUBSYS': 'ALL'}, 'NCCL_DEBUG_SUBSYS does not belong'),
    ({'NCCL_IB_GID_INDEX': 3}, 'NCCL_IB_GID_INDEX is set with rdma_nccl_ib_gid_index'),
    ({'GLOO_SOCKET_IFNAME': 'ib0'}, "'GLOO_SOCKET_IFNAME' is not an NCCL_* variable name"),
    ({'NCCL_ALGO': 'Ring Tree'}, 'rdma_nccl_extra.NCCL_ALGO must be one word'),
])
def test_nccl_extra_refused(extra, expect):
    (err,) = rdma.rdma_input_errors(_cfg(rdma_nccl_extra=extra))
    assert expect in err


def _facts(*ports):
    hcas = {}
    for name, port, layer in ports:
        hcas.setdefault(name, []).append({'port': port, 'link_layer': layer, 'ignored': name == 'mlx5_9'})
    return {'present': bool(hcas), 'hcas': [{'name': n, 'ports': p} for n, p in sorted(hcas.items())]}


def test_nccl_settings_infiniband():
    facts = _facts(('mlx5_0', 1, 'InfiniBand'), ('mlx5_1', 1, 'InfiniBand'), ('mlx5_2', 1, 'Ethernet'),
                   ('mlx5_9', 1, 'InfiniBand'))
    cfg = _cfg(rdma_ipoib_interfaces=[{'name': 'ib0', 'subnet': '10.20.0.0/24'}], rdma_nccl_extra={'NCCL_IB_QPS_PER_CONNECTION': 4})
    assert rdma.rdma_nccl_settings(cfg, facts, 'eno1') == [
        ('NCCL_SOCKET_IFNAME', 'ib0'), ('NCCL_IB_HCA', '=mlx5_0:1,mlx5_1:1'), ('NCCL_IB_QPS_PER_CONNECTION', '4')]


def test_nccl_settings_roce_and_lab():
    facts = _facts(('mlx5_0', 1, 'Ethernet'), ('mlx5_1', 1, 'Ethernet'), ('mlx5_2', 1, 'InfiniBand'))
    cfg = _cfg(rdma_fabric='roce', rdma_roce_devices=['mlx5_1'])
    assert rdma.rdma_nccl_settings(cfg, facts, 'eth0') == [
        ('NCCL_SOCKET_IFNAME', 'eth0'), ('NCCL_IB_HCA', '=mlx5_1:1'), ('NCCL_IB_TC', '106')]
    # No HCA: no NCCL_IB_HCA line; explicit values win.
    assert rdma.rdma_nccl_settings(cfg, {'present': False, 'hcas': []}, 'eth0') == [
        ('NCCL_SOCKET_IFNAME', 'eth0'), ('NCCL_IB_TC', '106')]
    cfg = dict(cfg, rdma_nccl_socket_ifname='=bond0', rdma_nccl_ib_hca=['mlx5_0'])
    assert rdma.rdma_nccl_settings(cfg, facts, 'eth0')[:2] == [('NCCL_SOCKET_IFNAME', '=bond0'), ('NCCL_IB_HCA', '=mlx5_0')]


def test_nccl_hcas_are_the_rails_beside_the_gpus():
    def hca(name, layer, beside_gpu):
        return {'name': name, 'pcie_acs': {'gpus': ['0000:19:00.0'] if beside_gpu else []},
                'ports': [{'port': 1, 'link_layer': layer, 'ignored': False}]}
    facts = {'present': True, 'hcas': [hca('mlx5_0', 'InfiniBand', True), hca('mlx5_1', 'InfiniBand', True),
                                       hca('mlx5_2', 'InfiniBand', False), hca('mlx5_3', 'Ethernet', False)]}
    assert rdma.rdma_nccl_settings(_cfg(), facts, 'eno1')[1] == ('NCCL_IB_HCA', '=mlx5_0:1,mlx5_1:1')
    assert rdma.rdma_fabric_ports(facts, 'infiniband') == {
        'ports': ['mlx5_0:1', 'mlx5_1:1'], 'basis': 'gpu_switch', 'others': ['mlx5_2:1']}
    # RoCE: no Ethernet adapter beside a GPU, so every Ethernet port; rdma_roce_devices limits the choice.
    assert rdma.rdma_fabric_ports(facts, 'roce') == {'ports': ['mlx5_3:1'], 'basis': 'link_layer', 'others': []}
    assert rdma.rdma_fabric_ports(facts, 'roce', ['mlx5_9'])['ports'] == []
    assert rdma.rdma_fabric_ports(facts, 'none') == {'ports': [], 'basis': 'link_layer', 'others': []}


@pytest.mark.parametrize('ifname, interfaces, planned, expected', [
    ('', ['eth0'], [], {'missing': [], 'unmatched': []}),
    ('=ib0,ib1', ['lo', 'ib0', 'eth0'], [], {'missing': ['ib1'], 'unmatched': []}),
    ('=ib0,ib1', ['lo', 'ib0'], ['ib1'], {'missing': [], 'unmatched': []}),
    # A prefix matches ibp24s0; "bond" matches nothing yet: a warning, not a refusal.
    ('ibp,bond', ['lo', 'ibp24s0'], [], {'missing': [], 'unmatched': ['bond']}),
    # Names to avoid: nothing to check.
    ('^docker,lo', [], [], {'missing': [], 'unmatched': []}),
    ('=eth0', None, None, {'missing': ['eth0'], 'unmatched': []}),
])
def test_socket_ifname_check(ifname, interfaces, planned, expected):
    assert rdma.rdma_socket_ifname_check(ifname, interfaces, planned) == expected


def _roce_facts(*ports):
    """RoCE ports as rdma_facts gives them: (hca, port, roce_v2_ipv4_gid_index, beside a GPU)."""
    hcas = {}
    for name, port, gid, beside in ports:
        hca = hcas.setdefault(name, {'name': name, 'pcie_acs': {'gpus': ['0000:19:00.0'] if beside else []}, 'ports': []})
        hca['ports'].append({'port': port, 'link_layer': 'Ethernet', 'ignored': False, 'roce_v2_ipv4_gid_index': gid})
    return {'present': bool(hcas), 'hcas': [hcas[n] for n in sorted(hcas)]}


@pytest.mark.parametrize('gid, facts, expected', [
    ('', _roce_facts(('mlx5_0', 1, 3, True)), {'index': None, 'error': ''}),
    (5, _roce_facts(('mlx5_0', 1, 3, True)), {'index': 5, 'error': ''}),
    ('7', _roce_facts(), {'index': 7, 'error': ''}),
    ('auto', _roce_facts(('mlx5_0', 1, 3, True), ('mlx5_1', 1, 3, True), ('mlx5_2', 1, None, False)),
     {'index': 3, 'error': ''}),
    ('auto', _roce_facts(('mlx5_0', 1, 3, True), ('mlx5_1', 1, 5, True)),
     {'index': None, 'error': 'rdma_nccl_ib_gid_index: auto found different RoCE v2 IPv4 GID indexes (mlx5_0:1=3, '
                              'mlx5_1:1=5); NCCL takes one for every port: set the index the ports share, or give them '
                              'the same address layout'}),
    ('auto', _roce_facts(('mlx5_0', 1, None, True)),
     {'index': None, 'error': "rdma_nccl_ib_gid_index: auto found no RoCE v2 IPv4 GID on mlx5_0:1 (an address on the "
                              "port's interface makes one)"}),
    ('auto', _roce_facts(), {'index': None, 'error': 'rdma_nccl_ib_gid_index: auto found no RoCE port on this host '
                                                     '(rdma_facts)'}),
])
def test_gid_index(gid, facts, expected):
    assert rdma.rdma_gid_index(_cfg(rdma_fabric='roce', rdma_nccl_ib_gid_index=gid), facts) == expected


def test_gid_index_in_nccl_conf_and_its_checks():
    facts = _roce_facts(('mlx5_0', 1, 3, True))
    assert rdma.rdma_nccl_settings(_cfg(rdma_fabric='roce', rdma_nccl_ib_gid_index='auto'), facts, 'eth0') == [
        ('NCCL_SOCKET_IFNAME', 'eth0'), ('NCCL_IB_HCA', '=mlx5_0:1'), ('NCCL_IB_TC', '106'), ('NCCL_IB_GID_INDEX', '3')]
    assert 'NCCL_IB_GID_INDEX' not in dict(rdma.rdma_nccl_settings(_cfg(rdma_fabric='roce'), facts, 'eth0'))
    # Exactly 'auto': the role's tasks compare it as written, so ' auto ' would skip their checks.
    for bad in ('any', ' auto ', 256, -1, True, 1.5, [3]):
        assert 'rdma_nccl_ib_gid_index must be empty (NCCL picks), auto' in _error_text(rdma_nccl_ib_gid_index=bad), bad
    assert 'rdma_nccl_ib_gid_index is for RoCE' in _error_text(rdma_nccl_ib_gid_index=3)
    assert _error_text(rdma_fabric='roce', rdma_nccl_ib_gid_index='auto') == ''
    assert 'set with rdma_nccl_ib_gid_index' in _error_text(rdma_nccl_extra={'NCCL_IB_GID_INDEX': 3})


@pytest.mark.parametrize('fabric, gid, version, warned', [
    ('roce', '', '2.18.5-1+cuda12.2', True),
    ('roce', '', '2.21.5-1+cuda12.4', False),
    ('roce', 'auto', '2.18.5-1+cuda12.2', False),
    ('roce', '', '', False),
    ('infiniband', '', '2.18.5-1+cuda12.2', False),
])
def test_old_nccl_picking_the_gid_on_roce_is_a_warning(fabric, gid, version, warned):
    warnings = rdma.rdma_input_warnings(_cfg(rdma_fabric=fabric, rdma_nccl_ib_gid_index=gid, nccl_version=version,
                                             rdma_subnet_manager='switch'))
    assert bool(warnings) is warned
    if warned:
        assert warnings[0].startswith('NCCL 2.18.5-1+cuda12.2 (cuda_toolkit_nccl_version) is older than 2.21 and takes '
                                      'GID index 0')


@pytest.mark.parametrize('fabric, manager, warned', [
    ('infiniband', 'none', True), ('infiniband', 'switch', False), ('infiniband', 'host', False), ('roce', 'none', False),
])
def test_an_infiniband_fabric_without_a_named_subnet_manager_is_a_warning(fabric, manager, warned):
    warnings = rdma.rdma_input_warnings(_cfg(rdma_fabric=fabric, rdma_subnet_manager=manager))
    assert [w for w in warnings if w.startswith('rdma_subnet_manager is none: an InfiniBand fabric needs')] == (
        warnings if warned else [])
    assert bool(warnings) is warned


def test_filters_are_guarded():
    filters = rdma.FilterModule().filters()
    with pytest.raises(AnsibleFilterError, match='rdma_input_errors'):
        filters['rdma_input_errors']('not a dict')
    assert filters['rdma_normalize_fingerprint']('ab cd') == 'ABCD'
