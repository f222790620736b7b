# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import glob
import os

import pytest
import yaml

from ansible.errors import AnsibleFilterError
from ansible_collections.gpucluster.core.plugins.filter import nvidia
from ansible_collections.gpucluster.core.plugins.module_utils import gpu_probe


def _own(own_fixtures_dir, name):
    with open(os.path.join(own_fixtures_dir, 'nvidia_driver', name)) as handle:
        return handle.read()


@pytest.mark.parametrize('version,branch,patch', [
    ('535.309.01', 535, 1), ('550.163.01', 550, 1), ('570.26', 570, None), ('1000.10.1', 1000, 1),
])
def test_version_info(version, branch, patch):
    info = nvidia.nvidia_driver_version_info(version)
    assert (info['branch'], info['patch']) == (branch, patch)


@pytest.mark.parametrize('bad', ['535', '535.x.01', 'latest', '535.309.01-1', ' 535.309.01', '35.3.1', ''])
def test_version_info_rejects(bad):
    with pytest.raises(AnsibleFilterError, match='nvidia_driver_version'):
        nvidia.nvidia_driver_version_info(bad)


@pytest.mark.parametrize('package_version,upstream', [
    ('535.309.01-0+deb12u1', '535.309.01'),
    ('550.163.01-2', '550.163.01'),
    ('3:550.54.15-1.el9', '550.54.15'),
    ('535.216.01-0ubuntu0.22.04.1', '535.216.01'),
    ('', ''),
])
def test_upstream_version(package_version, upstream):
    assert nvidia.nvidia_upstream_version(package_version) == upstream


@pytest.mark.parametrize('name,version,flavour', [
    ('proc_version_proprietary_535.309.01.txt', '535.309.01', 'proprietary'),
    ('proc_version_open_550.163.01.txt', '550.163.01', 'open'),
])
def test_loaded_version_own(own_fixtures_dir, name, version, flavour):
    text = _own(own_fixtures_dir, name)
    assert nvidia.nvidia_loaded_version(text) == version
    assert nvidia.nvidia_loaded_flavour(text) == flavour


def test_loaded_version_real_recordings(real_fixtures_dir):
    files = sorted(glob.glob(os.path.join(real_fixtures_dir, '**', '*proc-driver-nvidia-version*'), recursive=True))
    if not files:
        pytest.skip('no /proc/driver/nvidia/version recordings in the corpus')
    for path in files:
        with open(path) as handle:
            text = handle.read()
        # The file names carry the version and flavour the recording shows.
        expected = [p for p in os.path.basename(path).replace('.txt', '').split('_') if p.count('.') >= 1]
        version = nvidia.nvidia_loaded_version(text)
        assert version and any(version in e for e in expected), path
        if '_open-' in path:
            assert nvidia.nvidia_loaded_flavour(text) == 'open'
        if '_proprietary-' in path:
            assert nvidia.nvidia_loaded_flavour(text) == 'proprietary'


def test_loaded_version_absent():
    assert nvidia.nvidia_loaded_version('') == ''
    assert nvidia.nvidia_loaded_version('garbage\n') == ''


def test_pci_devices_and_nvswitch(own_fixtures_dir):
    devices = nvidia.nvidia_pci_devices(_own(own_fixtures_dir, 'pci_hgx_h100.txt'))
    assert [d['kind'] for d in devices] == ['gpu', 'gpu', 'nvswitch', 'nvswitch']
    assert nvidia.nvidia_nvswitch_present(devices)
    assert not nvidia.nvidia_nvswitch_present(nvidia.nvidia_pci_devices(_own(own_fixtures_dir, 'pci_v100_pcie.txt')))
    assert nvidia.nvidia_pci_devices('') == []


@pytest.mark.parametrize('requested,version,pci,expected', [
    ('auto', '535.309.01', '', 'proprietary'),            # no GPU visible, R535 default
    ('auto', '570.124.06', '', 'open'),                   # R560+ default
    ('auto', '535.309.01', 'pci_hgx_h100.txt', 'proprietary'),
    ('auto', '570.124.06', 'pci_hgx_h100.txt', 'open'),
    ('auto', '570.124.06', 'pci_v100_pcie.txt', 'proprietary'),  # Volta needs proprietary
    ('auto', '570.124.06', 'pci_gb200.txt', 'open'),
    ('open', '535.309.01', 'pci_hgx_h100.txt', 'open'),
    ('proprietary', '570.124.06', 'pci_hgx_h100.txt', 'proprietary'),
])
def test_kernel_module_type(own_fixtures_dir, requested, version, pci, expected):
    devices = nvidia.nvidia_pci_devices(_own(own_fixtures_dir, pci)) if pci else []
    assert nvidia.nvidia_kernel_module_type(requested, version, devices)['type'] == expected


@pytest.mark.parametrize('requested,version,pci,message', [
    ('open', '570.124.06', 'pci_v100_pcie.txt', 'pre-Turing'),
    ('proprietary', '570.124.06', 'pci_gb200.txt', 'open modules'),
    ('open', '470.256.02', '', 'branch >= 515'),
    ('sometimes', '535.309.01', '', 'nvidia_driver_kernel_module_type'),
])
def test_kernel_module_type_rejects(own_fixtures_dir, requested, version, pci, message):
    devices = nvidia.nvidia_pci_devices(_own(own_fixtures_dir, pci)) if pci else []
    with pytest.raises(AnsibleFilterError, match=message):
        nvidia.nvidia_kernel_module_type(requested, version, devices)


# Package names per source, checked against the names in Debian's archive (apt-cache in the lab
# images), Ubuntu's -server packages and NVIDIA's driver installation guide.
@pytest.mark.parametrize('source,dist,major,flavour,headless,fm,packages,install0', [
    ('distro', 'Debian', '12', 'proprietary', True, False,
     ['nvidia-kernel-dkms', 'nvidia-smi', 'libcuda1', 'libnvidia-ml1', 'nvidia-persistenced'], 'nvidia-kernel-dkms=535.309.01-*'),
    ('distro', 'Debian', '12', 'open', False, False,
     ['nvidia-driver', 'nvidia-open-kernel-dkms', 'nvidia-smi', 'libcuda1', 'libnvidia-ml1', 'nvidia-persistenced'],
     'nvidia-driver=535.309.01-*'),
    ('distro', 'Ubuntu', '22', 'proprietary', True, True,
     ['nvidia-headless-535-server', 'nvidia-utils-535-server', 'nvidia-compute-utils-535-server',
      'nvidia-fabricmanager-535', 'libnvidia-nscq-535'], 'nvidia-headless-535-server=535.309.01-*'),
    ('distro', 'Ubuntu', '24', 'open', False, False,
     ['nvidia-driver-535-server-open', 'nvidia-utils-535-server', 'nvidia-compute-utils-535-server'],
     'nvidia-driver-535-server-open=535.309.01-*'),
    ('cuda_repo', 'Ubuntu', '22', 'proprietary', True, False, ['cuda-drivers-535', 'nvidia-persistenced'],
     'cuda-drivers-535=535.309.01-*'),
    ('cuda_repo', 'Ubuntu', '24', 'open', True, True,
     ['nvidia-open-535', 'nvidia-persistenced', 'nvidia-fabricmanager-535', 'libnvidia-nscq-535'], 'nvidia-open-535=535.309.01-*'),
    ('cuda_repo', 'Debian', '12', 'open', True, False, ['nvidia-open-535', 'nvidia-persistenced'], 'nvidia-open-535=535.309.01-*'),
    ('cuda_repo', 'RedHat', '9', 'proprietary', True, True,
     ['nvidia-driver', 'nvidia-driver-cuda', 'nvidia-driver-libs', 'kmod-nvidia-latest-dkms', 'nvidia-persistenced',
      'nvidia-fabric-manager', 'libnvidia-nscq-535'], 'nvidia-driver-535.309.01'),
    ('cuda_repo', 'RedHat', '8', 'open', True, False,
     ['nvidia-driver', 'nvidia-driver-cuda', 'nvidia-driver-libs', 'kmod-nvidia-open-dkms', 'nvidia-persistenced'],
     'nvidia-driver-535.309.01'),
])
def test_driver_plan(source, dist, major, flavour, headless, fm, packages, install0):
    plan = nvidia.nvidia_driver_plan('535.309.01', source, dist, major, flavour, headless, fm)
    assert plan['packages'] == packages
    assert plan['install'][0] == install0
    assert len(plan['install']) == len(packages)


def test_driver_plan_rhel_stream_and_lock():
    plan = nvidia.nvidia_driver_plan('550.163.01', 'cuda_repo', 'RedHat', '9', 'open')
    assert plan['module_stream'] == 'nvidia-driver:550-open'
    assert 'kmod-nvidia-open-dkms-550.163.01' in plan['install']
    # Held by name: package_hold locks the installed version, which the install spec pins.
    assert 'kmod-nvidia-open-dkms' in plan['hold'] and plan['hold'] == plan['packages']
    assert nvidia.nvidia_driver_plan('535.309.01', 'cuda_repo', 'RedHat', '8', 'proprietary')['module_stream'] == 'nvidia-driver:535-dkms'


def test_driver_plan_fabricmanager_names_from_580():
    plan = nvidia.nvidia_driver_plan('580.95.05', 'cuda_repo', 'Ubuntu', '24', 'open', True, True)
    assert plan['packages'][-2:] == ['nvidia-fabricmanager', 'libnvidia-nscq']


@pytest.mark.parametrize('args,message', [
    (('535.309.01', 'distro', 'Debian', '12', 'proprietary', True, True), 'Debian does not package NVIDIA Fabric Manager'),
    (('535.309.01', 'distro', 'RedHat', '9', 'proprietary'), "'distro' is not available on RHEL"),
    (('535.309.01', 'ppa', 'Ubuntu', '22', 'open'), 'nvidia_driver_source'),
    (('535.309.01', 'cuda_repo', 'RedHat', '10', 'open'), 'RHEL/Rocky 8 and 9'),
    (('590.44.01', 'cuda_repo', 'Ubuntu', '24', 'open'), 'nvidia_driver_packages'),
])
def test_driver_plan_rejects(args, message):
    with pytest.raises(AnsibleFilterError, match=message):
        nvidia.nvidia_driver_plan(*args)


def test_driver_plan_override_still_pins():
    plan = nvidia.nvidia_driver_plan('535.309.01', 'distro', 'Debian', '12', 'proprietary', True, False, ['nvidia-tesla-535-driver'])
    assert plan['install'] == ['nvidia-tesla-535-driver=535.309.01-*']
    assert plan['carrier'] == 'nvidia-tesla-535-driver'


def _pkgs(**versions):
    return dict((name.replace('_', '-'), [{'version': v}]) for name, v in versions.items())


def test_installed_matches_current_and_stale():
    plan = nvidia.nvidia_driver_plan('535.309.01', 'distro', 'Debian', '12', 'proprietary')
    current = _pkgs(nvidia_kernel_dkms='535.309.01-0+deb12u1', nvidia_smi='535.309.01-0+deb12u1',
                    libcuda1='535.309.01-0+deb12u1', libnvidia_ml1='535.309.01-0+deb12u1', nvidia_persistenced='535.171.04-1~deb12u1')
    state = nvidia.nvidia_installed_matches(current, plan)
    assert state['current'] and state['installed_version'] == '535.309.01' and not state['stale']
    older = dict(current, **_pkgs(nvidia_smi='535.261.03-1', libcuda1='535.261.03-1'))
    older['nvidia-open-kernel-dkms'] = [{'version': '535.261.03-1'}]
    state = nvidia.nvidia_installed_matches(older, plan)
    assert not state['current']
    assert state['stale'] == ['libcuda1', 'nvidia-smi']
    assert state['obsolete'] == ['nvidia-open-kernel-dkms']
    assert nvidia.nvidia_installed_matches({}, plan)['missing'] == plan['packages']


def test_installed_matches_ubuntu_branch_change():
    plan = nvidia.nvidia_driver_plan('550.163.01', 'distro', 'Ubuntu', '24', 'proprietary')
    installed = _pkgs(nvidia_headless_535_server='535.216.01-0ubuntu1', nvidia_dkms_535_server='535.216.01-0ubuntu1',
                      libnvidia_compute_535_server='535.216.01-0ubuntu1', nvidia_container_toolkit='1.17.8-1',
                      libnvidia_container1='1.17.8-1', nvidia_headless_550_server_open='550.163.01-0ubuntu1')
    state = nvidia.nvidia_installed_matches(installed, plan)
    assert state['obsolete'] == ['libnvidia-compute-535-server', 'nvidia-dkms-535-server', 'nvidia-headless-535-server',
                                 'nvidia-headless-550-server-open']


@pytest.mark.parametrize('installed,proc,modules,flavour,required', [
    ('535.309.01', 'proc_version_proprietary_535.309.01.txt', '', 'proprietary', False),
    ('535.309.01', 'proc_version_proprietary_535.309.01.txt', 'nouveau 2502656 0 - Live 0x0\n', 'proprietary', True),
    ('550.163.01', 'proc_version_proprietary_535.309.01.txt', '', 'proprietary', True),
    ('535.309.01', 'proc_version_proprietary_535.309.01.txt', '', 'open', True),
    ('535.309.01', None, '', 'proprietary', True),
    ('', None, '', 'proprietary', False),
    ('550.163.01', 'proc_version_open_550.163.01.txt', 'nvidia_uvm 1 0 - Live\nnouveau_x 1 0\n', 'open', False),
])
def test_reboot_required(own_fixtures_dir, installed, proc, modules, flavour, required):
    text = _own(own_fixtures_dir, proc) if proc else ''
    result = nvidia.nvidia_reboot_required(installed, text, modules, flavour)
    assert result['required'] is required
    assert bool(result['reasons']) is required


@pytest.mark.parametrize('version,compat,minimum', [
    ('12.4', 'full', '550.54.15'),
    ('12.4.0', 'full', '550.54.14'),
    ('12.2', 'full', '535.104.05'),
    ('11.8', 'full', '520.61.05'),
    ('12.8', 'full', '570.124.06'),
    ('13.0', 'full', '580.95.05'),
    ('12.4', 'minor', '525.60.13'),
    ('11.8', 'minor', '450.80.02'),
    ('13.0.1', 'minor', '580.65.06'),
])
def test_cuda_min_driver(version, compat, minimum):
    assert nvidia.cuda_min_driver(version, compat) == minimum


def test_cuda_driver_check():
    result = nvidia.cuda_driver_check(['12.2', '12.4', '13.0'], '535.309.01')
    assert [r['ok'] for r in result] == [True, False, False]
    assert [r['ok'] for r in nvidia.cuda_driver_check(['12.4', '13.0'], '535.309.01', 'minor')] == [True, False]
    # 570.26 vs 570.124.06: compared numerically, not as strings
    assert nvidia.cuda_driver_check(['12.8'], '570.26')[0]['ok'] is False
    assert nvidia.cuda_driver_check(['12.8.0'], '570.26')[0]['ok'] is True


@pytest.mark.parametrize('bad', ['12', '12.7', '12.4.9', 'latest', '9.2'])
def test_cuda_rejects(bad):
    with pytest.raises(AnsibleFilterError):
        nvidia.cuda_min_driver(bad)


def test_toolkit_plan_apt_and_dnf():
    plan = nvidia.cuda_toolkit_plan(['12.2', '12.4.1'], '12.4.1', 'cuda_repo', 'Ubuntu', '9.1.0.70-1', '2.21.5-1+cuda12.4')
    assert plan['install'] == ['cuda-toolkit-12-2', 'cuda-toolkit-12-4=12.4.1-*', 'libcudnn9-cuda-12=9.1.0.70-1',
                               'libcudnn9-dev-cuda-12=9.1.0.70-1', 'libnccl2=2.21.5-1+cuda12.4', 'libnccl-dev=2.21.5-1+cuda12.4']
    assert plan['prefix'] == '/usr/local/cuda-12.4'
    rhel = nvidia.cuda_toolkit_plan(['12.4.1'], '12.4.1', 'cuda_repo', 'RedHat', '', '2.21.5-1+cuda12.4')
    assert rhel['install'] == ['cuda-toolkit-12-4-12.4.1', 'libnccl-2.21.5-1+cuda12.4', 'libnccl-devel-2.21.5-1+cuda12.4']
    assert rhel['hold'] == ['cuda-toolkit-12-4', 'libnccl', 'libnccl-devel']
    cudnn8 = nvidia.cuda_toolkit_plan(['12.2'], '12.2', 'cuda_repo', 'Debian', '8.9.7.29-1+cuda12.2')
    assert cudnn8['install'][1:] == ['libcudnn8=8.9.7.29-1+cuda12.2', 'libcudnn8-dev=8.9.7.29-1+cuda12.2']


def test_toolkit_plan_distro():
    plan = nvidia.cuda_toolkit_plan(['11.8'], '11.8', 'distro', 'Debian')
    assert plan['install'] == ['nvidia-cuda-toolkit=11.8.*'] and plan['prefix'] == '/usr'


@pytest.mark.parametrize('args,message', [
    ((['12.2'], '12.4', 'cuda_repo', 'Ubuntu'), 'not among cuda_toolkit_versions'),
    ((['12.2', '12.2.2'], '12.2', 'cuda_repo', 'Ubuntu'), 'twice'),
    ((['12.4', '11.8'], '11.8', 'distro', 'Debian'), 'one toolkit'),
    ((['11.8'], '11.8', 'distro', 'Debian', '8.9.7.29-1+cuda11.8'), 'cuda_toolkit_cudnn_version'),
    ((['12.4'], '12.4', 'cuda_repo', 'Ubuntu', '', '2.21.5-1+cuda11.8'), 'built for CUDA 11'),
    ((['12.4'], '12.4', 'cuda_repo', 'Ubuntu', '', '2.21.5'), 'cuda_toolkit_nccl_version'),
    ((['12.4'], '12.4', 'cuda_repo', 'Ubuntu', '9.1'), 'cuda_toolkit_cudnn_version'),
    ((['12.4'], '12.4', 'cuda_repo', 'Ubuntu', '8.9.7.29-1+cuda11.8'), 'CUDA 12'),
    ((['12.4'], '12.4', 'pip', 'Ubuntu'), 'cuda_toolkit_source'),
])
def test_toolkit_plan_rejects(args, message):
    with pytest.raises(AnsibleFilterError, match=message):
        nvidia.cuda_toolkit_plan(*args)


# One rule of which NVIDIA PCI functions are GPUs: the driver role's filter and the health program's
# sysfs probe (gpu_probe.nvidia_pci_kind) agree on every class.
PCI_CLASSES = [
    ('0x030000', 'gpu'),        # VGA controller
    ('0x030200', 'gpu'),        # 3D controller (data center GPUs)
    ('0x038000', 'gpu'),        # other display controller
    ('0x068000', 'nvswitch'),   # other bridge: NVSwitch
    ('0x040300', 'other'),      # HD audio function of a board
    ('0x0c0330', 'other'),      # USB controller of a board
]


@pytest.mark.parametrize('pci_class,kind', PCI_CLASSES)
def test_pci_rule_is_shared(tmp_path, pci_class, kind):
    devices = nvidia.nvidia_pci_devices('0000:41:00.0 0x10de %s 0x2330\n0000:00:02.0 0x8086 0x030000 0x3e92\n' % pci_class)
    assert [d['kind'] for d in devices] == [kind]
    device = tmp_path / 'bus' / 'pci' / 'devices' / '0000:41:00.0'
    device.mkdir(parents=True)
    (device / 'vendor').write_text('0x10de\n')
    (device / 'class').write_text(pci_class + '\n')
    assert gpu_probe.nvidia_pci_addresses(str(tmp_path)) == (['0000:41:00.0'] if kind == 'gpu' else [])


# apt_specs_unsatisfied: which install specs apt would still act on, read from dpkg-query lines.
_DPKG_LINES = [
    'nvidia-cuda-toolkit 11.8.89~11.8.0-5~deb12u1 hi ',
    'libnccl2 2.21.5-1+cuda12.4 ii ',
    'libnccl-dev 2.21.5-1+cuda12.4 rc ',
    'cuda-toolkit-12-4 12.4.1-1 iU ',
]


def test_apt_specs_unsatisfied_installed_and_held_spec_is_satisfied():
    assert nvidia.apt_specs_unsatisfied(['nvidia-cuda-toolkit=11.8.*'], _DPKG_LINES) == []


def test_apt_specs_unsatisfied_other_version_is_not():
    assert nvidia.apt_specs_unsatisfied(['nvidia-cuda-toolkit=12.4.*'], _DPKG_LINES) == ['nvidia-cuda-toolkit=12.4.*']


def test_apt_specs_unsatisfied_config_files_and_unpacked_are_not_installed():
    specs = ['libnccl-dev=2.21.5-1+cuda12.4', 'cuda-toolkit-12-4']
    assert nvidia.apt_specs_unsatisfied(specs, _DPKG_LINES) == specs


def test_apt_specs_unsatisfied_unknown_package_and_plain_name():
    assert nvidia.apt_specs_unsatisfied(['libnccl2', 'nvidia-smi'], '\n'.join(_DPKG_LINES)) == ['nvidia-smi']


def test_apt_specs_unsatisfied_exact_version_with_architecture_suffix():
    # A qualified name counts only for the node's own architecture, so the node's architecture is
    # required with such lines (the old expectation, accepted without it, let an i386 package satisfy
    # an amd64 node: tests/unit/robustness/test_files_robustness.py, mixed architectures).
    lines = ['libnccl2:amd64 2.21.5-1+cuda12.4 ii ']
    assert nvidia.apt_specs_unsatisfied(['libnccl2=2.21.5-1+cuda12.4'], lines, 'x86_64') == []
    assert nvidia.apt_specs_unsatisfied(['libnccl2=2.21.5-1+cuda12.5'], lines, 'amd64') == ['libnccl2=2.21.5-1+cuda12.5']
    with pytest.raises(AnsibleFilterError, match="names an architecture; pass the node's architecture"):
        nvidia.apt_specs_unsatisfied(['libnccl2=2.21.5-1+cuda12.4'], lines)


def test_apt_specs_unsatisfied_rejects_a_string_of_specs():
    with pytest.raises(AnsibleFilterError, match='apt specs must be a list'):
        nvidia.FilterModule().filters()['apt_specs_unsatisfied']('libnccl2', _DPKG_LINES)


# auto on Turing and later GPUs (an HGX H100's PCI ids), R515-R559: open where the source ships the open modules
# of every build (NVIDIA's CUDA repository and runfile, Ubuntu's -server-open), proprietary on Debian's archive
# (nvidia-open-kernel-dkms lags nvidia-kernel-dkms there); a loaded module keeps its flavour (recorded
# /proc/driver/nvidia/version texts, ../shared/fixtures/INDEX.md).
@pytest.mark.parametrize('version,source,distribution,expected', [
    ('550.163.01', 'cuda_repo', 'Ubuntu', 'open'),
    ('550.163.01', 'cuda_repo', 'RedHat', 'open'),
    ('535.309.01', 'runfile', 'Debian', 'open'),
    ('535.216.03', 'distro', 'Ubuntu', 'open'),
    ('535.309.01', 'distro', 'Debian', 'proprietary'),
    ('470.256.02', 'cuda_repo', 'Ubuntu', 'proprietary'),
    ('570.124.06', 'distro', 'Debian', 'open'),
])
def test_auto_flavour_follows_the_source(own_fixtures_dir, version, source, distribution, expected):
    devices = nvidia.nvidia_pci_devices(_own(own_fixtures_dir, 'pci_hgx_h100.txt'))
    choice = nvidia.nvidia_kernel_module_type('auto', version, devices, source, distribution)
    assert choice['type'] == expected
    if expected == 'proprietary' and source == 'distro':
        assert choice['reason'] == ('distro on Debian does not ship the open modules of every R535 build; set '
                                    'nvidia_driver_kernel_module_type: open at a version it offers them')


@pytest.mark.parametrize('recording,expected', [
    ('nixgl-issue186__proc-driver-nvidia-version_open-565.57.01.txt', 'open'),
    ('truenas-issue19__proc-driver-nvidia-version_proprietary-580.173.02_MISMATCH.txt', 'proprietary'),
])
def test_auto_keeps_the_loaded_flavour(real_fixtures_dir, own_fixtures_dir, recording, expected):
    path = os.path.join(real_fixtures_dir, '08_versions_container', '_extracted_from_docs', recording)
    with open(path) as handle:
        loaded = handle.read()
    devices = nvidia.nvidia_pci_devices(_own(own_fixtures_dir, 'pci_hgx_h100.txt'))
    for version, source in (('550.163.01', 'cuda_repo'), ('535.309.01', 'distro'), ('570.124.06', 'cuda_repo')):
        choice = nvidia.nvidia_kernel_module_type('auto', version, devices, source, 'Debian', loaded)
        assert choice['type'] == expected and choice['reason'].startswith('the flavour of the loaded module')
    # Hardware rules come first: a GB200 needs open whatever is loaded; an explicit choice is taken as asked.
    gb200 = nvidia.nvidia_pci_devices(_own(own_fixtures_dir, 'pci_gb200.txt'))
    assert nvidia.nvidia_kernel_module_type('auto', '570.124.06', gb200, 'cuda_repo', 'Ubuntu', loaded)['type'] == 'open'
    assert nvidia.nvidia_kernel_module_type('open', '550.163.01', devices, 'cuda_repo', 'Ubuntu', loaded)['type'] == 'open'


@pytest.mark.parametrize('setting, distribution, expected', [
    ('', 'Ubuntu', '/var/lib/shim-signed/mok/MOK.der'),
    ('', 'Debian', '/var/lib/dkms/mok.pub'),
    ('', 'Rocky', '/var/lib/dkms/mok.pub'),
    ('/etc/site/mok.der', 'Ubuntu', '/etc/site/mok.der'),
])
def test_the_dkms_signing_certificate_follows_the_distribution(ansible_render, setting, distribution, expected):
    with open(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..', 'roles', 'nvidia_driver', 'vars',
                           'main.yml')) as handle:
        role_vars = yaml.safe_load(handle)
    variables = {'__nvidia_driver_mok_certs': role_vars['__nvidia_driver_mok_certs'],
                 'nvidia_driver_secure_boot_mok_cert': setting, 'ansible_facts': {'distribution': distribution}}
    assert ansible_render(variables, role_vars['__nvidia_driver_mok_cert']).strip() == expected
