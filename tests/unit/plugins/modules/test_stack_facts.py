# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""stack_facts end to end on a fake root filesystem: the module's I/O (globs, links, software
RDMA devices, the package query call) around the tested parsers."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import shutil

import pytest
from unittest import mock

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpucluster.core.plugins.modules import stack_facts


class ExitJson(Exception):
    pass


class FailJson(Exception):
    pass


def _exit_json(self, **kwargs):
    raise ExitJson(kwargs)


def _fail_json(self, **kwargs):
    raise FailJson(kwargs)


def _copy(own_fixtures_dir, name, root, relative):
    target = os.path.join(root, relative)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    shutil.copy(os.path.join(own_fixtures_dir, 'drift', name), target)


def _write(root, relative, text):
    target = os.path.join(root, relative)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(target, 'w') as handle:
        handle.write(text)


@pytest.fixture
def fake_root(tmp_path, own_fixtures_dir, monkeypatch):
    root = str(tmp_path)
    _copy(own_fixtures_dir, 'os-release_debian12', root, 'etc/os-release')
    _write(root, 'etc/debian_version', '12.7\n')
    _write(root, 'var/lib/dpkg/status', '')
    _write(root, 'proc/driver/nvidia/version',
           'NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n'
           'GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n')
    for bus in ('0000:19:00.0', '0000:3b:00.0'):
        _copy(own_fixtures_dir, 'proc-driver-nvidia-gpus-information_h100.txt', root,
              'proc/driver/nvidia/gpus/%s/information' % bus)
    _copy(own_fixtures_dir, 'cuda-12.4-version.json', root, 'usr/local/cuda-12.4/version.json')
    _copy(own_fixtures_dir, 'cuda-11.0-version.txt', root, 'usr/local/cuda-11.0/version.txt')
    os.symlink('cuda-12.4', os.path.join(root, 'usr/local/cuda'))
    _copy(own_fixtures_dir, 'nccl_2.21.5.h', root, 'usr/include/nccl.h')
    # Two Mellanox HCAs (PCI device behind them) and one soft-RoCE device without firmware.
    for dev in ('mlx5_0', 'mlx5_1'):
        _write(root, 'sys/class/infiniband/%s/fw_ver' % dev, '28.39.1002\n')
        os.makedirs(os.path.join(root, 'sys/class/infiniband/%s/device' % dev))
    _write(root, 'sys/class/infiniband/rxe0/fw_ver', '0.0.0\n')
    monkeypatch.setattr(stack_facts, 'ROOT', root)
    return root


def run_module(args, run_command, bins=('dpkg-query',)):
    calls = []

    def fake_run_query(module, cmd, timeout):
        calls.append(cmd)
        return run_command(cmd)

    def fake_bin(self, name, *a, **kw):
        return '/usr/bin/' + name if name in bins else None

    with patch_module_args(args), \
            mock.patch.object(basic.AnsibleModule, 'exit_json', _exit_json), \
            mock.patch.object(basic.AnsibleModule, 'fail_json', _fail_json), \
            mock.patch.object(stack_facts, 'run_query', fake_run_query), \
            mock.patch.object(basic.AnsibleModule, 'get_bin_path', fake_bin):
        try:
            stack_facts.main()
        except ExitJson as exc:
            return 'exit', exc.args[0], calls
        except FailJson as exc:
            return 'fail', exc.args[0], calls
    raise AssertionError('module returned without exit_json/fail_json')


def test_debian_gpu_node(fake_root):
    dpkg = ('ii \tnvidia-driver\t550.54.15-1\nii \tlibnccl2\t2.21.5-1+cuda12.4\n'
            'ii \tcontainerd\t1.6.20~ds1-1+deb12u3\nrc \tmunge\t0.5.15-2\n')
    how, result, calls = run_module({}, lambda cmd: (0, dpkg, ''))
    assert how == 'exit' and result['changed'] is False
    # One package database call for everything, with the documented format.
    assert calls == [['/usr/bin/dpkg-query', '-W', '-f', '${db:Status-Abbrev}\\t${Package}\\t${Version}\\n']]
    facts = result['ansible_facts']
    stack = facts['gpu_stack']
    assert stack['os'] == 'debian 12.7'
    assert stack['nvidia_driver'] == '550.54.15-1'
    assert stack['nvidia_driver_loaded'] == '550.54.15'
    assert stack['cuda_toolkit'] == '12.4.1'          # /usr/local/cuda -> cuda-12.4
    assert [t['version'] for t in facts['gpu_stack_cuda_toolkits']] == ['11.0.228', '12.4.1']
    assert facts['gpu_stack_cuda_toolkits'][1]['path'] == '/usr/local/cuda-12.4'
    assert stack['nccl'] == '2.21.5-1+cuda12.4'       # the package wins over nccl.h
    assert stack['containerd'] == '1.6.20~ds1-1+deb12u3'
    assert stack['munge'] is None                     # removed, config files only
    assert stack['hca_firmware'] == '28.39.1002'      # rxe0 (no PCI device) left out
    assert facts['gpu_stack_details']['hcas'] == {'mlx5_0': '28.39.1002', 'mlx5_1': '28.39.1002'}
    assert stack['gpu_vbios'] == '96.00.99.00.01'
    assert stack['kernel'] and stack['python']
    details = facts['gpu_stack_details']
    assert details['package_manager'] == 'dpkg' and details['nvidia_kernel_module'] == 'proprietary'
    assert details['collected_at'] > 0
    json.dumps(facts)       # facts must be plain JSON for the fact cache


def test_rpm_selected_when_no_dpkg(fake_root, own_fixtures_dir):
    os.remove(os.path.join(fake_root, 'var/lib/dpkg/status'))
    with open(os.path.join(own_fixtures_dir, 'drift', 'rpm-qa_rhel9_gpu.txt')) as handle:
        rpm = handle.read()
    how, result, calls = run_module({}, lambda cmd: (0, rpm, ''), bins=('rpm', 'dpkg-query'))
    assert how == 'exit'
    assert calls[0][:3] == ['/usr/bin/rpm', '-qa', '--qf']
    assert result['ansible_facts']['gpu_stack']['nvidia_driver'] == '550.90.07-1.el9'


def test_package_query_failure_is_a_readable_error(fake_root):
    how, result, dummy = run_module({}, lambda cmd: (2, '', 'dpkg-query: error: parsing file\n'))
    assert how == 'fail'
    assert result['msg'] == 'reading the dpkg package database failed (rc=2): dpkg-query: error: parsing file'


def test_forced_manager_missing(fake_root):
    how, result, dummy = run_module({'package_manager': 'rpm'}, lambda cmd: (0, '', ''))
    assert how == 'fail' and 'rpm is not on this node' in result['msg']


def test_files_only(fake_root):
    how, result, calls = run_module({'package_manager': 'none'}, lambda cmd: (0, '', ''))
    assert how == 'exit' and calls == []
    stack = result['ansible_facts']['gpu_stack']
    assert stack['nvidia_driver'] is None and stack['nvidia_driver_loaded'] == '550.54.15'
    assert stack['nccl'] == '2.21.5'                  # from nccl.h now
    assert result['ansible_facts']['gpu_stack_details']['sources']['nccl'] == 'file:/usr/include/nccl.h'


def test_bad_option_fails_cleanly(fake_root):
    how, result, dummy = run_module({'package_manager': 'apk'}, lambda cmd: (0, '', ''))
    assert how == 'fail' and 'package_manager' in result['msg']


# ------------------------------------------------------------------ the Docker Swarm state

DOCKER_INFO = ['/usr/bin/docker', 'info', '--format', '{{json .}}']
NODE_INSPECT = ['/usr/bin/docker', 'node', 'inspect', 'self', '--format', '{{json .}}']


def _swarm_fixture(own_fixtures_dir, name):
    with open(os.path.join(own_fixtures_dir, 'swarm', name)) as handle:
        return handle.read()


def _docker(answers):
    """A run_command for run_module: dpkg-query answers nothing, docker what ``answers`` maps its argv to."""
    def run_command(cmd):
        if cmd[0] == '/usr/bin/dpkg-query':
            return 0, '', ''
        answer = answers[tuple(cmd)]
        if isinstance(answer, Exception):
            raise answer
        return answer
    return run_command


def test_without_docker_the_swarm_is_absent(fake_root):
    how, result, calls = run_module({}, lambda cmd: (0, '', ''))
    assert how == 'exit' and len(calls) == 1
    assert result['ansible_facts']['gpu_stack']['swarm'] is None
    assert result['ansible_facts']['gpu_stack_details']['swarm']['state'] == 'absent'


def test_worker_reads_docker_info_only(fake_root, own_fixtures_dir):
    answers = {tuple(DOCKER_INFO): (0, _swarm_fixture(own_fixtures_dir, 'info_worker_26.json'), '')}
    how, result, calls = run_module({}, _docker(answers), bins=('dpkg-query', 'docker'))
    assert how == 'exit'
    # One docker call: a worker cannot inspect itself, so node inspect is never tried.
    assert calls[1:] == [DOCKER_INFO]
    swarm = result['ansible_facts']['gpu_stack_details']['swarm']
    assert (swarm['state'], swarm['role'], swarm['node_id']) == ('active', 'worker', 'q8m1v4c2x7d9k3p5r6t0y2u4a')
    assert [m['addr'] for m in swarm['managers']] == ['10.0.0.11:2377', '10.0.0.12:2377', '10.0.0.13:2377']
    assert result['ansible_facts']['gpu_stack']['swarm'] == 'active/worker'
    json.dumps(result['ansible_facts'])


def test_manager_reads_node_inspect_too(fake_root, own_fixtures_dir):
    answers = {tuple(DOCKER_INFO): (0, _swarm_fixture(own_fixtures_dir, 'info_manager_leader_26.json'), ''),
               tuple(NODE_INSPECT): (0, _swarm_fixture(own_fixtures_dir, 'node_inspect_leader_26.json'), '')}
    how, result, calls = run_module({}, _docker(answers), bins=('dpkg-query', 'docker'))
    assert how == 'exit' and calls[1:] == [DOCKER_INFO, NODE_INSPECT]
    swarm = result['ansible_facts']['gpu_stack_details']['swarm']
    assert swarm == {'state': 'active', 'role': 'manager', 'availability': 'active', 'status': 'ready',
                     'reachability': 'reachable', 'leader': True, 'node_id': '4vzgkl1ovjh5bfmd3hmk5o1xq',
                     'node_addr': '10.0.0.11', 'cluster_id': 'w2s0d6tfqcgu8m2mjlsd5ca0r',
                     'managers': swarm['managers'], 'error': ''}
    assert result['ansible_facts']['gpu_stack']['swarm'] == 'active/manager/active'


def test_locked_swarm_is_reported(fake_root, own_fixtures_dir):
    answers = {tuple(DOCKER_INFO): (0, _swarm_fixture(own_fixtures_dir, 'info_locked_26.json'), '')}
    how, result, calls = run_module({}, _docker(answers), bins=('dpkg-query', 'docker'))
    assert how == 'exit' and calls[1:] == [DOCKER_INFO]
    assert result['ansible_facts']['gpu_stack']['swarm'] == 'locked'
    assert 'docker swarm unlock' in result['ansible_facts']['gpu_stack_details']['swarm']['error']


def test_failing_docker_is_reported_never_a_module_failure(fake_root, own_fixtures_dir):
    answers = {tuple(DOCKER_INFO): (1, _swarm_fixture(own_fixtures_dir, 'info_daemon_down_28.json'),
                                    'Cannot connect to the Docker daemon at unix:///var/run/docker.sock. '
                                    'Is the docker daemon running?\n')}
    how, result, dummy = run_module({}, _docker(answers), bins=('dpkg-query', 'docker'))
    assert how == 'exit'
    swarm = result['ansible_facts']['gpu_stack_details']['swarm']
    assert swarm['state'] == 'unknown'
    assert swarm['error'] == ('docker info failed (rc=1): Cannot connect to the Docker daemon at '
                              'unix:///var/run/docker.sock. Is the docker daemon running?')
    assert result['ansible_facts']['gpu_stack']['swarm'] == 'unknown'


def test_hung_docker_info_and_node_inspect(fake_root, own_fixtures_dir):
    answers = {tuple(DOCKER_INFO): stack_facts.QueryTimeout()}
    how, result, dummy = run_module({'command_timeout': 7}, _docker(answers), bins=('dpkg-query', 'docker'))
    assert how == 'exit'
    assert result['ansible_facts']['gpu_stack_details']['swarm']['error'] == (
        'docker info did not finish within command_timeout=7 s and was killed with its process group (a hung dockerd?)')
    answers = {tuple(DOCKER_INFO): (0, _swarm_fixture(own_fixtures_dir, 'info_manager_leader_26.json'), ''),
               tuple(NODE_INSPECT): stack_facts.QueryTimeout()}
    how, result, dummy = run_module({}, _docker(answers), bins=('dpkg-query', 'docker'))
    swarm = result['ansible_facts']['gpu_stack_details']['swarm']
    assert how == 'exit' and (swarm['state'], swarm['role']) == ('active', 'manager')
    assert swarm['error'] == ('docker node inspect self: docker node inspect self did not finish within '
                              'command_timeout=60 s and was killed with its process group (a hung dockerd?)')


def test_hung_docker_is_killed_for_real(fake_root, tmp_path):
    """The real bounded command (no run_query fake): a docker that never answers costs command_timeout."""
    docker = tmp_path / 'docker'
    docker.write_text('#!/bin/sh\nexec sleep 60\n')
    docker.chmod(0o755)
    real_bin = basic.AnsibleModule.get_bin_path

    def fake_bin(self, name, *a, **kw):
        if name == 'docker':
            return str(docker)
        return real_bin(self, name, *a, **kw) if name == 'timeout' else None

    with patch_module_args({'package_manager': 'none', 'command_timeout': 1}), \
            mock.patch.object(basic.AnsibleModule, 'exit_json', _exit_json), \
            mock.patch.object(basic.AnsibleModule, 'get_bin_path', fake_bin):
        with pytest.raises(ExitJson) as ended:
            stack_facts.main()
    facts = ended.value.args[0]['ansible_facts']
    assert facts['gpu_stack_details']['swarm']['error'].startswith('docker info did not finish within command_timeout=1 s')
    assert facts['gpu_stack']['swarm'] == 'unknown'
    assert facts['gpu_stack_details']['duration_s'] < 30
