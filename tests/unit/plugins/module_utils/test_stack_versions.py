# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import glob
import os

import pytest

from ansible_collections.gpucluster.core.plugins.module_utils import stack_versions as sv


def _own(own_fixtures_dir, name):
    with open(os.path.join(own_fixtures_dir, 'drift', name)) as handle:
        return handle.read()


# ------------------------------------------------------------------ /proc/driver/nvidia/version

# Expected values for the real recordings (08_versions_container): version, flavour, arch.
REAL_PROC_VERSIONS = {
    'nixgl-issue121__proc-driver-nvidia-version_open-525.60.11_trailing-spaces.txt':
        ('525.60.11', 'open', 'x86_64'),
    'nixgl-issue139__proc-driver-nvidia-version_jetson-orin-aarch64_35.3.1.txt':
        ('35.3.1', 'open', 'aarch64'),
    'nixgl-issue186__proc-driver-nvidia-version_open-565.57.01.txt':
        ('565.57.01', 'open', 'x86_64'),
    'truenas-issue19__proc-driver-nvidia-version_proprietary-580.173.02_MISMATCH.txt':
        ('580.173.02', 'proprietary', 'x86_64'),
}


@pytest.mark.parametrize('name', sorted(REAL_PROC_VERSIONS))
def test_proc_driver_version_real_recordings(real_fixtures_dir, name):
    path = os.path.join(real_fixtures_dir, '08_versions_container', '_extracted_from_docs', name)
    if not os.path.exists(path):
        pytest.skip('%s not in the corpus' % name)
    with open(path) as handle:
        parsed = sv.parse_proc_driver_version(handle.read())
    version, flavor, arch = REAL_PROC_VERSIONS[name]
    assert parsed == {'version': version, 'flavor': flavor, 'arch': arch}


def test_every_real_proc_version_file_parses(real_fixtures_dir):
    """New recordings added to the corpus must parse too (version taken from the file name)."""
    paths = glob.glob(os.path.join(real_fixtures_dir, '08_versions_container', '**',
                                   '*proc-driver-nvidia-version*'), recursive=True)
    if not paths:
        pytest.skip('no /proc/driver/nvidia/version recordings in the corpus')
    for path in paths:
        with open(path) as handle:
            parsed = sv.parse_proc_driver_version(handle.read())
        assert parsed is not None, path
        assert parsed['version'] in os.path.basename(path), path


@pytest.mark.parametrize('text, expected', [
    # Written variants: old proprietary line with a CRLF, ppc64le, a GPL note before the line.
    ('NVRM version: NVIDIA UNIX x86_64 Kernel Module  390.87  Tue Aug 21 12:33:05 PDT 2018\r\n'
     'GCC version:  gcc version 7.3.0 (Ubuntu 7.3.0-16ubuntu3)\r\n', ('390.87', 'proprietary')),
    ('NVRM version: NVIDIA UNIX ppc64le Kernel Module  535.161.08  Tue Mar  5 22:51:04 UTC 2024\n',
     ('535.161.08', 'proprietary')),
    ('\nNVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build  (dvs-builder@U16-I3-B03-4-3)  Tue Mar  5 22:15:33 UTC 2024\n',
     ('550.54.15', 'open')),
])
def test_proc_driver_version_written_variants(text, expected):
    parsed = sv.parse_proc_driver_version(text)
    assert (parsed['version'], parsed['flavor']) == expected


@pytest.mark.parametrize('text', [None, '', 'GCC version:  gcc version 12.2.0\n', 'garbage'])
def test_proc_driver_version_absent(text):
    assert sv.parse_proc_driver_version(text) is None


# ------------------------------------------------------------------ package databases

def test_dpkg_query_installed_only(own_fixtures_dir):
    installed, broken = sv.parse_dpkg_query(_own(own_fixtures_dir, 'dpkg-query_ubuntu2204_gpu.txt'))
    assert installed['cuda-drivers'] == '550.54.15-1'
    assert installed['munge'] == '0.5.14-6'            # held ("hi") counts as installed
    assert installed['docker-ce'] == '5:27.3.1-1~ubuntu.22.04~jammy'
    assert installed['ibverbs-providers'] == '2404mlnx51-1.2404066'   # ":amd64" dropped
    assert installed['libc6'] == '2.35-0ubuntu3.8'      # multi-arch duplicates collapse
    assert 'libcudnn8' not in installed                 # "rc": only config files left
    assert 'nvidia-driver-535' not in installed         # "un": never installed
    assert 'kubelet' not in installed and broken == {'kubelet': 'iF'}


def test_rpm_query_highest_and_epoch(own_fixtures_dir):
    installed, broken = sv.parse_rpm_query(_own(own_fixtures_dir, 'rpm-qa_rhel9_gpu.txt'))
    assert installed['kernel'] == '5.14.0-427.13.1.el9_4'
    assert installed['nvidia-driver'] == '3:550.90.07-1.el9'
    assert installed['libnccl'] == '2.21.5-1+cuda12.4'
    assert broken == {}


@pytest.mark.parametrize('version, expected', [
    ('5:27.3.1-1~ubuntu.22.04~jammy', '27.3.1-1~ubuntu.22.04~jammy'),
    ('1:3.3.8', '3.3.8'),
    ('12.4.1-1', '12.4.1-1'),
    ('2404mlnx51-1.2404066', '2404mlnx51-1.2404066'),
    ('a:b', 'a:b'),
    (None, None),
])
def test_strip_epoch(version, expected):
    assert sv.strip_epoch(version) == expected


@pytest.mark.parametrize('low, high', [
    ('12.9', '12.10'), ('2.3', '2.21.5'), ('535.183.01', '550.54.15'), ('9.1.0.70-1', '9.2.1.18-1'),
])
def test_version_key_orders_numerically(low, high):
    assert sv.version_key(low) < sv.version_key(high)


# ------------------------------------------------------------------ whole stack

def test_build_stack_ubuntu_gpu_node(own_fixtures_dir):
    packages, broken = sv.parse_dpkg_query(_own(own_fixtures_dir, 'dpkg-query_ubuntu2204_gpu.txt'))
    inputs = {
        'package_manager': 'dpkg', 'packages': packages, 'broken_packages': broken,
        'os_release': _own(own_fixtures_dir, 'os-release_ubuntu2204'),
        'kernel': '5.15.0-119-generic', 'python': '3.10.12',
        'proc_driver_version': 'NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  '
                               'Release Build  (dvs-builder@U16)  Tue Mar  5 22:15:33 UTC 2024\n',
        'gpu_information': {
            '0000:19:00.0': _own(own_fixtures_dir, 'proc-driver-nvidia-gpus-information_h100.txt'),
            '0000:3b:00.0': _own(own_fixtures_dir, 'proc-driver-nvidia-gpus-information_h100.txt'),
        },
        'cuda_version_files': {'/usr/local/cuda-12.4': {'json': _own(own_fixtures_dir, 'cuda-12.4-version.json')}},
        'cuda_default_path': '/usr/local/cuda-12.4',
        'cudnn_headers': {'/usr/include/cudnn_version.h': _own(own_fixtures_dir, 'cudnn_version_9.1.0.h')},
        'hca_fw': {'mlx5_0': '28.39.1002\n', 'mlx5_1': '28.39.1002\n'},
    }
    stack, toolkits, details = sv.build_stack(inputs)
    assert sorted(stack) == sorted(sv.COMPONENTS)
    assert stack == {
        'os': 'ubuntu 22.04.4', 'kernel': '5.15.0-119-generic',
        'nvidia_driver': '550.54.15-1', 'nvidia_driver_loaded': '550.54.15',
        'nvidia_fabricmanager': '550.54.15-1', 'cuda_toolkit': '12.4.1',
        'cudnn': '9.1.0.70-1', 'nccl': '2.21.5-1+cuda12.4',
        'nvidia_container_toolkit': '1.16.2-1', 'containerd': '1.7.22-1',
        'docker': '27.3.1-1~ubuntu.22.04~jammy', 'rdma_core': '2404mlnx51-1.2404066',
        'ofed': '2.8.0-0.0.1', 'hca_firmware': '28.39.1002', 'gpu_vbios': '96.00.99.00.01',
        'slurm': '23.11.10-1', 'munge': '0.5.14-6', 'kubelet': None, 'kubeadm': None, 'kubectl': None, 'dcgm': '3.3.8',
        'python': '3.10.12',
    }
    assert [t['version'] for t in toolkits] == ['12.2.2', '12.4.1']
    assert toolkits[0]['source'] == 'package:cuda-toolkit-12-2'
    assert details['sources']['cuda_toolkit'] == 'file:/usr/local/cuda-12.4/version.json'
    # The carrier of the CUDA repository's proprietary plan (nvidia_packages) is read before the
    # unversioned cuda-drivers metapackage.
    assert details['sources']['nvidia_driver'] == 'package:cuda-drivers-550'
    assert details['raw'] == {'docker': '5:27.3.1-1~ubuntu.22.04~jammy', 'dcgm': '1:3.3.8'}
    assert details['broken_packages'] == {'kubelet': 'iF'}
    assert details['nvidia_kernel_module'] == 'open'
    assert details['gpus'] == {'0000:19:00.0': '96.00.99.00.01', '0000:3b:00.0': '96.00.99.00.01'}


def test_build_stack_rhel_gpu_node(own_fixtures_dir):
    packages, broken = sv.parse_rpm_query(_own(own_fixtures_dir, 'rpm-qa_rhel9_gpu.txt'))
    stack, toolkits, details = sv.build_stack({
        'package_manager': 'rpm', 'packages': packages, 'broken_packages': broken,
        'os_release': _own(own_fixtures_dir, 'os-release_rhel94'), 'kernel': '5.14.0-427.13.1.el9_4.x86_64',
    })
    assert stack['os'] == 'rhel 9.4'
    assert stack['nvidia_driver'] == '550.90.07-1.el9'
    assert details['raw']['nvidia_driver'] == '3:550.90.07-1.el9'
    assert stack['nvidia_fabricmanager'] == '550.90.07-1'
    assert stack['cuda_toolkit'] == '12.4.1'      # from the package: no version file on this node
    assert toolkits == [{'version': '12.4.1', 'path': '/usr/local/cuda-12.4', 'source': 'package:cuda-toolkit-12-4'}]
    assert stack['nccl'] == '2.21.5-1+cuda12.4'
    assert stack['cudnn'] == '9.2.1.18-1'
    assert stack['slurm'] == '23.11.10-1.el9'
    assert stack['docker'] == '27.3.1-1.el9'
    assert stack['nvidia_driver_loaded'] is None and stack['gpu_vbios'] is None


def test_build_stack_bare_node_is_all_null_but_basics():
    stack, toolkits, details = sv.build_stack({'kernel': '6.1.0-25-amd64', 'python': '3.11.2'})
    assert toolkits == []
    assert set(k for k, v in stack.items() if v) == {'kernel', 'python'}
    assert details['nvidia_kernel_module'] is None


def test_headers_used_without_packages(own_fixtures_dir):
    stack, dummy, details = sv.build_stack({
        'cudnn_headers': {'/usr/include/cudnn_version.h': _own(own_fixtures_dir, 'cudnn_version_9.1.0.h')},
        'nccl_headers': {'/usr/include/nccl.h': 'no defines here',
                         '/usr/local/cuda/include/nccl.h': _own(own_fixtures_dir, 'nccl_2.21.5.h')},
    })
    assert stack['cudnn'] == '9.1.0'
    assert stack['nccl'] == '2.21.5'
    assert details['sources']['nccl'] == 'file:/usr/local/cuda/include/nccl.h'


def test_distinct_device_values_are_joined():
    stack, dummy, details = sv.build_stack({'hca_fw': {'mlx5_1': '28.40.1000', 'mlx5_0': '28.39.1002', 'mlx5_2': ''}})
    assert stack['hca_firmware'] == '28.39.1002,28.40.1000'
    assert details['hcas'] == {'mlx5_0': '28.39.1002', 'mlx5_1': '28.40.1000'}


# ------------------------------------------------------------------ CUDA toolkits

def test_cuda_default_follows_the_link(own_fixtures_dir):
    files = {'/usr/local/cuda-12.4': {'json': _own(own_fixtures_dir, 'cuda-12.4-version.json')},
             '/usr/local/cuda-11.0': {'txt': _own(own_fixtures_dir, 'cuda-11.0-version.txt')}}
    toolkits, default = sv.cuda_toolkits(files, {}, '/usr/local/cuda-11.0')
    assert [t['version'] for t in toolkits] == ['11.0.228', '12.4.1']
    assert default['version'] == '11.0.228'
    toolkits, default = sv.cuda_toolkits(files, {}, None)
    assert default['version'] == '12.4.1'      # no link: the newest


def test_cuda_debian_package():
    toolkits, default = sv.cuda_toolkits({}, {'nvidia-cuda-toolkit': '11.8.89~11.8.0-5~deb12u1'})
    assert default == {'version': '11.8.0', 'path': '/usr/lib/nvidia-cuda-toolkit',
                       'source': 'package:nvidia-cuda-toolkit'}


def test_cuda_package_does_not_duplicate_directory(own_fixtures_dir):
    files = {'/usr/local/cuda-12.4': {'json': _own(own_fixtures_dir, 'cuda-12.4-version.json')}}
    toolkits, dummy = sv.cuda_toolkits(files, {'cuda-toolkit-12-4': '12.4.1-1'})
    assert len(toolkits) == 1 and toolkits[0]['source'].startswith('file:')


@pytest.mark.parametrize('text', ['{not json', '[]', '{"cuda": {}}'])
def test_cuda_version_json_bad(text):
    assert sv.parse_cuda_version_json(text) is None


# ------------------------------------------------------------------ small parsers

@pytest.mark.parametrize('name, debian_version, expected', [
    ('os-release_debian12', '12.7\n', 'debian 12.7'),
    ('os-release_debian12', None, 'debian 12'),
    ('os-release_debian12', 'trixie/sid\n', 'debian 12'),
    ('os-release_ubuntu2204', 'bookworm/sid\n', 'ubuntu 22.04.4'),
    ('os-release_rhel94', None, 'rhel 9.4'),
])
def test_os_release(own_fixtures_dir, name, debian_version, expected):
    assert sv.parse_os_release(_own(own_fixtures_dir, name), debian_version) == expected


def test_os_release_empty():
    assert sv.parse_os_release('') is None


@pytest.mark.parametrize('text, expected', [
    ('Video BIOS: \t 96.00.99.00.01\n', '96.00.99.00.01'),
    ('Video BIOS: \t ??.??.??.??.??\n', None),
    ('Model: NVIDIA H100\n', None),
])
def test_gpu_information(text, expected):
    assert sv.parse_gpu_information(text) == expected


@pytest.mark.parametrize('text, expected', [
    ('#!/bin/bash\nif [ "X$1" == "X-s" ]; then echo MLNX_OFED_LINUX-23.10-1.1.9.0: ; exit; fi\n', '23.10-1.1.9.0'),
    ('echo OFED-internal-24.04-0.6.6:\n', '24.04-0.6.6'),
    ('#!/bin/sh\n', None),
])
def test_ofed_info(text, expected):
    assert sv.parse_ofed_info(text) == expected


def test_ofed_info_used_only_without_package():
    stack, dummy, details = sv.build_stack({'ofed_info': 'echo MLNX_OFED_LINUX-5.8-1.0.1.1:\n'})
    assert stack['ofed'] == '5.8-1.0.1.1' and details['sources']['ofed'] == 'file:ofed_info'


def test_rules_name_known_components_and_match_whole_names():
    for component, patterns in sv.PACKAGE_RULES:
        assert component in sv.COMPONENTS
    rules = dict(sv._COMPILED_RULES)
    # 'slurm' must not swallow 'slurm-wlm-doc', 'munge' not 'libmunge2'
    assert sv.select_package({'slurm-wlm-doc': '22.05.8-4'}, rules['slurm']) == (None, None)
    assert sv.select_package({'libmunge2': '0.5.15-2'}, rules['munge']) == (None, None)
    assert sv.select_package({'nvidia-driver-550-server-open': '550.54.15-0ubuntu1'},
                             rules['nvidia_driver']) == ('nvidia-driver-550-server-open', '550.54.15-0ubuntu1')


@pytest.mark.parametrize('text, expected', [
    ('{"cuda": {"name": "CUDA SDK", "version": "12.4.1"}}', ('12.4.1', None)),
    ('[' * 5000, (None, 'it nests deeper than 32 levels')),
    ('{"cuda": {"version": ["12.4"]}}', (None, 'its cuda.version is not a version string')),
    ('{"nvcc": {}}', (None, 'it has no cuda.version')),
    ('"[[[[" ', (None, 'it has no cuda.version')),
    (None, (None, 'it is not text')),
])
def test_cuda_version_json_gives_the_version_or_why_not(text, expected):
    assert sv.cuda_version_json(text) == expected


def test_an_unreadable_default_toolkit_is_unknown_with_its_reason():
    files = {'/usr/local/cuda-12.4': {'json': None, 'txt': None,
                                      'problems': {'/usr/local/cuda-12.4': 'no answer within 10 s (a hung mount?)'}},
             '/usr/local/cuda-12.2': {'json': '{"cuda": {"version": "12.2.2"}}'}}
    toolkits, default = sv.cuda_toolkits(files, {}, '/usr/local/cuda-12.4')
    assert default == {'version': None, 'path': '/usr/local/cuda-12.4', 'source': None,
                       'unknown': '/usr/local/cuda-12.4: no answer within 10 s (a hung mount?)'}
    assert [t['version'] for t in toolkits] == [None, '12.2.2']
    # Without the link the newest known toolkit is the guess, as before.
    toolkits, default = sv.cuda_toolkits(files, {}, None)
    assert default['version'] == '12.2.2'
