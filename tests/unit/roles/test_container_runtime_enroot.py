# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""enroot's runtime directory: the role's default sits under /run/enroot (enroot's own default needs
XDG_RUNTIME_DIR, which a Slurm job step without a login session lacks), a site's key wins, and the
directory the default names is the one systemd-tmpfiles makes at boot."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os

import pytest
import yaml

ROLE = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'roles', 'container_runtime')


def _vars():
    with open(os.path.join(ROLE, 'vars', 'main.yml')) as handle:
        return yaml.safe_load(handle)


def _tasks():
    with open(os.path.join(ROLE, 'tasks', 'enroot.yml')) as handle:
        return yaml.safe_load(handle)


@pytest.mark.parametrize('site, expected', [
    ({}, {'ENROOT_RUNTIME_PATH': '/run/enroot/user-$(id -u)'}),
    ({'ENROOT_RUNTIME_PATH': '/scratch/enroot/$(id -u)', 'ENROOT_SQUASH_OPTIONS': '-comp lz4'},
     {'ENROOT_RUNTIME_PATH': '/scratch/enroot/$(id -u)', 'ENROOT_SQUASH_OPTIONS': '-comp lz4'}),
    ({'ENROOT_CACHE_PATH': '/var/lib/enroot/cache'},
     {'ENROOT_RUNTIME_PATH': '/run/enroot/user-$(id -u)', 'ENROOT_CACHE_PATH': '/var/lib/enroot/cache'}),
])
def test_settings_are_the_defaults_under_the_sites_keys(ansible_render, site, expected):
    variables = dict(_vars(), container_runtime_enroot_config=site)
    assert ansible_render(variables, '{{ __container_runtime_enroot_settings }}') == expected


def test_the_configuration_task_writes_the_settings_and_tmpfiles_makes_their_parent():
    tasks = dict((t['name'], t) for t in _tasks())
    config = tasks["Set enroot's configuration keys (the rest of enroot.conf stays as shipped)"]
    assert config['loop'] == '{{ __container_runtime_enroot_settings | dict2items }}'
    runtime = _vars()['__container_runtime_enroot_defaults']['ENROOT_RUNTIME_PATH']
    parent = os.path.dirname(runtime)
    tmpfiles = tasks['Create /run/enroot at every boot (systemd-tmpfiles)']['ansible.builtin.copy']['content']
    assert 'd %s 1777 root root -' % parent in tmpfiles.splitlines()
    now = tasks['Create /run/enroot now']['ansible.builtin.file']
    assert (now['path'], now['mode'], now['state']) == (parent, '1777', 'directory')


def test_the_nccl_settings_reach_enroot_containers_read_only(ansible_render):
    # enroot's fstab format (enroot's own hooks write "SRC DST none bind,x-create=file,nofail,silent"): the rdma
    # role's /etc/nccl.conf at the same path, read-only, skipped without a word on a node that has no such file.
    tasks = dict((t['name'], t) for t in _tasks())
    mount = tasks['Mount the node\'s NCCL settings into enroot containers']
    assert mount['ansible.builtin.copy']['dest'] == '{{ __container_runtime_enroot_nccl_mount }}'
    assert mount['when'] == 'container_runtime_enroot_nccl_conf | bool'
    text = ansible_render({'ansible_managed': 'Ansible managed'}, mount['ansible.builtin.copy']['content'])
    lines = [line for line in text.splitlines() if line and not line.startswith('#')]
    assert len(lines) == 1
    source, target, kind, options = lines[0].split()
    assert (source, target, kind) == ('/etc/nccl.conf', '/etc/nccl.conf', 'none')
    assert {'bind', 'ro', 'x-create=file', 'nofail', 'silent'} <= set(options.split(','))
    path = _vars()['__container_runtime_enroot_nccl_mount']
    assert path.startswith('/etc/enroot/mounts.d/') and path.endswith('.fstab')
    removal = tasks['Remove the NCCL settings mount of enroot containers']
    assert removal['ansible.builtin.file'] == {'path': '{{ __container_runtime_enroot_nccl_mount }}', 'state': 'absent'}
