# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every role takes the converged-state fast path the same way (docs/performance.md, "Fast path"), and
declares every file its tasks write, so that a file changed by hand is seen on the next run.

The declaration (``__<role>_fast_path`` in the role's vars/main.yml) is what the node module verifies
before the role's tasks are skipped. A task that writes a file the declaration does not name would let a
hand edit of that file survive every rerun: the coverage test below reads each writing task's destination
and requires its variables (or its literal path) in the declaration.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import glob
import os
import re

import pytest
import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
ROLES = sorted(os.path.basename(os.path.dirname(p)) for p in glob.glob(os.path.join(REPO, 'roles', '*', 'tasks')))
# Modules whose destination is a file or directory the role owns on the node.
WRITERS = {
    'ansible.builtin.template': ('dest',), 'ansible.builtin.copy': ('dest',), 'ansible.builtin.lineinfile': ('path',),
    'ansible.builtin.blockinfile': ('path',), 'ansible.builtin.replace': ('path',), 'community.general.ini_file': ('path',),
    'ansible.builtin.file': ('path',), 'ansible.builtin.get_url': ('dest',), 'ansible.builtin.unarchive': ('dest',),
}
# Destinations the fast path does not verify, with the reason. Keys are (role, the task's destination as written).
NOT_VERIFIED = {
    ('health_check', "{{ (__health_check_build.stdout | from_json)['dir'] }}"): 'temporary build directory on the controller',
    ('slurm', "{{ (__slurm_healthcheck_build.stdout | from_json)['dir'] }}"): 'temporary build directory on the controller',
    ('slurm', '{{ __slurm_state_dir }}'): 'directory of the restart marker, which is verified',
    ('slurm', '{{ __slurm_conf_dir }}/{{ item }}'): 'the three configuration files, verified by name',
    ('container_runtime', '{{ __container_runtime_pyxis_src_dir }}.tar.gz'): 'build input; the built plugin is verified',
    ('container_runtime', '{{ __container_runtime_pyxis_src_dir }}'): 'build directory; the built plugin is verified',
    ('container_runtime', '{{ __container_runtime_enroot_cache_dir }}/{{ item }}'):
        'downloaded packages; the installed packages are verified',
    ('container_runtime', '{{ __container_runtime_enroot_cache_dir }}'): 'download cache',
    ('container_runtime', '/run/enroot'): 'made at every boot by systemd-tmpfiles from the tmpfiles.d file, which is verified',
    ('container_runtime', '{{ __container_runtime_keyring_path | dirname }}'): 'keyring directory; the keyring is verified',
    ('container_runtime', '{{ item }}'): 'directories of the CDI specification and its stamp, which are verified',
    ('container_runtime', '{{ __container_runtime_cdi_stamp_path | dirname }}'): 'directory of the stamp, which is verified',
    ('container_runtime', '{{ container_runtime_docker_daemon_json_path | dirname }}'): "daemon.json's directory",
    ('container_runtime', '{{ container_runtime_containerd_dropin_dir }}'): 'drop-in directory; the drop-in is verified',
    ('container_runtime', '{{ container_runtime_slurm_config_dir }}/plugstack.conf.d'): "pyxis.conf's directory",
    ('nvidia_driver', '{{ __nvidia_driver_cuda_repo_key_file }}'): 'downloaded key; the keyring written from it is verified',
    ('os_tuning', '{{ __os_tuning_chrony_conf }}'): 'verified by name',
    ('rdma', '{{ __rdma_qos_script | dirname }}'): "the QoS script's directory",
    ('rdma', '/etc/systemd/network/60-gpucluster-{{ item.name }}.network'): 'verified through the pattern 60-gpucluster-*.network',
    ('rdma', '/etc/NetworkManager/system-connections/gpucluster-{{ item.name }}.nmconnection'):
        'verified through the pattern gpucluster-*.nmconnection',
    ('health_check', '{{ __health_check_lib_dir }}/'): 'directory of the archive, which is verified',
    ('slurm', '{{ __slurm_healthcheck_lib_dir }}/'): 'directory of the archive, which is verified',
    ('slurm', '{{ __slurm_usage_lib_dir }}/'): 'directory of the usage archive, which is verified',
    ('nvidia_driver', '{{ __nvidia_driver_runfile }}'): "NVIDIA's installer; what it installs is verified",
    ('nvidia_driver', '{{ nvidia_driver_runfile_dir }}'): "the installer's directory",
    ('rdma', '{{ __rdma_doca_keyring | dirname }}'): 'keyring directory; the keyring is verified',
    ('rdma', '{{ __rdma_memlock_manager | dirname }}'): "the drop-in's directory",
    ('rdma', '/etc/opensm'): "opensm.conf's directory",
    ('checkpoint_backup', '{{ item }}'): 'the secret, state and cache directories: the first two verified by name',
    ('checkpoint_backup', '{{ __checkpoint_backup_lib_dir }}/'): 'directory of the archive, which is verified',
    ('checkpoint_backup', '/etc/systemd/system/{{ item }}'): 'the units, verified from __checkpoint_backup_units',
    ('slurm', '{{ slurm_upgrade_backup_dir }}'): "upgrade backups: written before a version change, not the role's state",
    ('slurm', '{{ __slurm_backup_dir }}'): "upgrade backups: written before a version change, not the role's state",
    ('slurm', '{{ __slurm_backup_dir }}/{{ item }}'): "upgrade backups: written before a version change, not the role's state",
    ('monitoring', "/etc/systemd/system/{{ __monitoring_names[__monitoring_component]['service'] }}.service"):
        "each component's unit (binary installs), verified by name",
    ('monitoring', '/var/cache/gpucluster-monitoring/{{ __monitoring_release_url | basename }}'):
        "the downloaded release; the installed programs are verified",
    ('monitoring', '{{ __monitoring_release_dir }}'): "the unpacked release; the installed programs are verified",
    ('monitoring', '{{ item }}'): 'directories (rules, rule tests, release programs): their files are verified',
    ('k8s_control_plane', '{{ __k8s_control_plane_dir }}'): "the kubeadm files' directory; the files are verified",
    ('k8s_control_plane', '{{ __k8s_control_plane_join_config }}'): "a join's file, removed as soon as kubeadm join ends",
    ('k8s_gpu', '{{ __k8s_gpu_helm_archive }}'): "Helm's downloaded archive; the unpacked program is verified",
    ('k8s_gpu', '{{ __k8s_gpu_helm_dir }}'): "Helm's directory; the unpacked program is verified",
    ('k8s_gpu', '{{ item }}'): "the directories of Helm's archive and program; the program is verified",
    ('shared_storage', '{{ item.path }}'): 'the exported directories, verified from shared_storage_exports',
    ('shared_storage', '{{ item }}'): 'the exports and nfs.conf directories, or the layout directories (verified)',
    ('shared_storage', '{{ __shared_storage_unit_dir }}'): 'directory of the mount units, which are verified',
    ('shared_storage', '{{ __shared_storage_slurmd_dropin | dirname }}'): "the drop-in's directory",
}
# Roles the fast path does not cover yet, with the reason (the test fails when one of them gains it).
WITHOUT_FAST_PATH = {
    # Its state is the cluster's (membership, roles, labels, what the running dockerd advertises), read on every run:
    # a record on one node cannot say the swarm is as it was (roles/swarm/tasks/main.yml).
    'swarm': 'the swarm role reads the cluster on every run',
}


def _tasks(path):
    with open(path) as handle:
        data = yaml.safe_load(handle) or []
    stack = list(data)
    while stack:
        task = stack.pop()
        if not isinstance(task, dict):
            continue
        for key in ('block', 'rescue', 'always'):
            stack.extend(task.get(key) or [])
        yield task


def _declaration(role):
    with open(os.path.join(REPO, 'roles', role, 'vars', 'main.yml')) as handle:
        data = yaml.safe_load(handle) or {}
    return data.get('__%s_fast_path' % role)


@pytest.mark.parametrize('role', ROLES)
def test_the_role_takes_the_fast_path(role):
    if role in WITHOUT_FAST_PATH:
        assert _declaration(role) is None, 'remove %s from WITHOUT_FAST_PATH' % role
        pytest.skip(WITHOUT_FAST_PATH[role])
    declaration = _declaration(role)
    assert isinstance(declaration, dict) and declaration, 'roles/%s/vars/main.yml has no __%s_fast_path' % (role, role)
    main = list(_tasks(os.path.join(REPO, 'roles', role, 'tasks', 'main.yml')))
    with open(os.path.join(REPO, 'roles', role, 'tasks', 'converge.yml')) as handle:
        converge = yaml.safe_load(handle)
    checks = [t for t in main if 'gpucluster.core.converged' in t and t['gpucluster.core.converged'].get('state', 'check') == 'check']
    records = [t for t in converge if 'gpucluster.core.converged' in t and t['gpucluster.core.converged'].get('state') == 'record']
    assert len(checks) == 1, '%s: one check task in tasks/main.yml' % role
    assert not [t for t in main if 'gpucluster.core.converged' in t and t['gpucluster.core.converged'].get('state') == 'record'], \
        '%s: the record task is the last of tasks/converge.yml (a converged node skips it with the full path)' % role
    # The full path's last two tasks: the handlers, then the record of the state they leave.
    assert len(records) == 1 and converge[-1] is records[0], '%s: tasks/converge.yml must end with the record task' % role
    assert converge[-2].get('ansible.builtin.meta') == 'flush_handlers', \
        '%s: tasks/converge.yml must run the handlers just before the state is recorded' % role
    for task in checks + records:
        assert task['gpucluster.core.converged']['role'] == role
        assert task['gpucluster.core.converged']['manages'] == '{{ __%s_fast_path }}' % role
        assert 'always' in task['tags']
    # The record computes the fingerprint again from the same inputs as the check.
    for key in ('inputs', 'facts', 'instance'):
        assert records[0]['gpucluster.core.converged'].get(key) == checks[0]['gpucluster.core.converged'].get(key), key
    assert 'fingerprint' not in records[0]['gpucluster.core.converged']
    assert records[0]['when'] == '__%s_converged.recordable' % role
    includes = [t for t in main if 'converge.yml' in str(t.get('ansible.builtin.include_tasks'))]
    assert len(includes) == 1 and 'converged' in str(includes[0]['when']), '%s: the full path is included once' % role


def _destinations(role):
    for path in sorted(glob.glob(os.path.join(REPO, 'roles', role, 'tasks', '*.yml'))):
        for task in _tasks(path):
            for module, keys in WRITERS.items():
                args = task.get(module)
                # A delegated task writes another host's files (the controller's, a backup target's).
                if not isinstance(args, dict) or task.get('delegate_to'):
                    continue
                if module == 'ansible.builtin.file' and args.get('state') == 'absent':
                    continue
                for key in keys:
                    if key in args:
                        yield os.path.basename(path), str(args[key])
            file_set = task.get('gpucluster.core.file_set')
            if isinstance(file_set, dict):
                for item in (file_set.get('files') if isinstance(file_set.get('files'), list) else []):
                    yield os.path.basename(path), str(item.get('dest'))


def _covered(text, destination):
    names = re.findall(r'\b(__?[a-z][a-z0-9_]*|[a-z][a-z0-9]*_[a-z0-9_]+)\b', destination.replace('{{', ' ').replace('}}', ' '))
    names = [n for n in names if n not in ('item', 'dirname', 'basename', 'from_json', 'regex_replace', 'default', 'stdout')]
    if '{{' not in destination:
        return destination in text
    return bool(names) and all(n in text for n in names)


@pytest.mark.parametrize('role', sorted(set(ROLES) - set(WITHOUT_FAST_PATH)))
def test_every_file_the_role_writes_is_verified(role):
    with open(os.path.join(REPO, 'roles', role, 'vars', 'main.yml')) as handle:
        text = handle.read()
    text = text[text.index('__%s_fast_path:' % role):]
    missing = sorted(set('%s: %s' % (where, dest) for where, dest in _destinations(role)
                         if (role, dest) not in NOT_VERIFIED and not _covered(text, dest)))
    assert missing == [], 'roles/%s writes files __%s_fast_path does not name: %s' % (role, role, '; '.join(missing))


@pytest.mark.parametrize('role', sorted(set(ROLES) - set(WITHOUT_FAST_PATH)))
def test_every_kind_is_one_expression(role):
    """Each kind of the declaration is a list, or one template expression giving a list: a template with
    statements ({% set %}, {% for %}) renders to a string, which the converged action refuses on every run."""
    declaration = _declaration(role)
    for kind in ('files', 'packages', 'services', 'globs', 'probes'):
        value = declaration.get(kind, [])
        if isinstance(value, str):
            text = value.strip()
            assert text.startswith('{{') and text.endswith('}}') and '{%' not in text and text.count('{{') == 1, \
                'roles/%s/vars/main.yml: __%s_fast_path.%s must be a list or one {{ expression }}, not %r' % (
                    role, role, kind, text[:80])
        else:
            assert isinstance(value, list), '__%s_fast_path.%s: %r' % (role, kind, value)
