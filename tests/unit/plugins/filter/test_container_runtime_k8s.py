# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""container_runtime's Kubernetes settings of containerd (one writer of containerd's configuration): the CRI
plugin enabled, SystemdCgroup on every runc runtime, registry mirrors through hosts.toml (config_path), the
pause image, the CNI plugins' directory and the NVIDIA runtime as the default on GPU nodes. The drop-in is
rendered against the recorded defaults of containerd 1.6, 1.7 and 2.1 and checked by the same function
k8s_node and the lab's verify use (containerd_cri_errors); where a containerd binary is on this machine,
the rendered files are loaded by it (`containerd --config FILE config dump`, no daemon started)."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import shutil
import subprocess
import tomllib

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.gpucluster.core.plugins.filter import container_runtime as cr
from ansible_collections.gpucluster.core.plugins.module_utils.nested import deep_merge

BIN = '/usr/bin/nvidia-container-runtime'
PAUSE = 'registry.k8s.io/pause:3.10.1'
CERTS = '/etc/containerd/certs.d'
VERSIONS = {
    '1.6': ('containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3', 'containerd-1.6-config-default.toml'),
    '1.7': ('containerd github.com/containerd/containerd 1.7.24~ds1 1.7.24~ds1-6+deb13u1', 'containerd-1.7-config-default.toml'),
    '2.1': ('containerd github.com/containerd/containerd/v2 2.1.9+unknown ', 'containerd-2.1-config-default.toml'),
}
K8S = {'systemd_cgroup': True, 'registry_config_path': CERTS, 'sandbox_image': PAUSE, 'cni_bin_dir': '/opt/cni/bin'}


def _read(own_fixtures_dir, name):
    with open(os.path.join(own_fixtures_dir, 'container_runtime', name)) as handle:
        return handle.read()


def _render(own_fixtures_dir, base, main_text, conf_d, gpu):
    version, default_name = VERSIONS[base]
    default = _read(own_fixtures_dir, default_name)
    major = cr.containerd_major(version)
    dropin = os.path.join(conf_d, '99-gpucluster-nvidia.toml')
    main = cr.containerd_config_imports(main_text, os.path.join(conf_d, '*.toml'), 3 if major >= 2 else 2)
    main = cr.containerd_config_enable_cri(main)
    text = cr.containerd_dropin(main, [dropin], {}, default, version, dropin, binary_path=BIN, set_default=gpu,
                                nvidia=gpu, **K8S)
    return main, dropin, text


def _expected(gpu):
    return dict(K8S, runtime_name='nvidia' if gpu else '', default_runtime='nvidia' if gpu else 'runc')


@pytest.mark.parametrize('base', sorted(VERSIONS))
@pytest.mark.parametrize('config', ['debian', 'empty', 'cri-disabled'])
@pytest.mark.parametrize('gpu', [True, False])
def test_the_dropin_gives_kubernetes_what_it_needs(own_fixtures_dir, tmp_path, base, config, gpu):
    main_text = {'debian': _read(own_fixtures_dir, 'debian12-config.toml'), 'empty': '',
                 'cri-disabled': 'version = 2\ndisabled_plugins = ["cri", "io.containerd.internal.v1.opt"]\n'}[config]
    main, dropin, text = _render(own_fixtures_dir, base, main_text, str(tmp_path / 'conf.d'), gpu)
    doc = tomllib.loads(text)
    # What containerd would merge: config.toml, then the drop-in (containerd 1.x replaces the whole CRI section,
    # so the drop-in restates it; 2.x merges key by key).
    merged = deep_merge(tomllib.loads(main), doc)
    assert 'cri' not in (merged.get('disabled_plugins') or [])
    if config == 'cri-disabled':
        assert merged['disabled_plugins'] == ['io.containerd.internal.v1.opt']
    if base == '1.6' or base == '1.7':
        cri = doc['plugins']['io.containerd.grpc.v1.cri']
        assert cri['sandbox_image'] == PAUSE and cri['registry']['config_path'] == CERTS
        assert cri['cni']['bin_dir'] == '/opt/cni/bin'
    runtimes = next(p['containerd']['runtimes'] for p in doc['plugins'].values() if 'containerd' in p)
    assert runtimes['runc']['options']['SystemdCgroup'] is True
    assert ('nvidia' in runtimes) is gpu
    if gpu:
        assert runtimes['nvidia']['options'] == dict(runtimes['runc']['options'], BinaryName=BIN)


def test_nothing_but_the_nvidia_runtime_without_kubernetes(own_fixtures_dir):
    version, default_name = VERSIONS['1.7']
    text = cr.containerd_dropin('version = 2\n', [], {}, _read(own_fixtures_dir, default_name), version, '/x.toml')
    assert text == cr.containerd_nvidia_dropin('version = 2\n', [], {}, _read(own_fixtures_dir, default_name), version,
                                               '/x.toml')
    cri = tomllib.loads(text)['plugins']['io.containerd.grpc.v1.cri']
    assert 'registry' not in cri and 'sandbox_image' not in cri
    assert 'SystemdCgroup' not in cri['containerd']['runtimes']['nvidia']['options'] or \
        cri['containerd']['runtimes']['nvidia']['options']['SystemdCgroup'] is False


def test_registry_mirrors_in_the_config_are_refused_with_config_path(own_fixtures_dir):
    version, default_name = VERSIONS['1.7']
    main = 'version = 2\n[plugins."io.containerd.grpc.v1.cri".registry.mirrors."docker.io"]\nendpoint = ["https://m"]\n'
    with pytest.raises(AnsibleFilterError, match='container_runtime_containerd_registry_mirrors'):
        cr.containerd_dropin(main, [], {}, _read(own_fixtures_dir, default_name), version, '/x.toml', **K8S)


@pytest.mark.parametrize('text, expected', [
    ('version = 2\ndisabled_plugins = ["cri"]\n', 'version = 2\ndisabled_plugins = []\n'),
    ('# mine\nversion = 2\ndisabled_plugins = [\n  "io.containerd.grpc.v1.cri",  # off\n  "aufs",\n]\n[grpc]\nuid = 0\n',
     '# mine\nversion = 2\ndisabled_plugins = ["aufs"]\n[grpc]\nuid = 0\n'),
    ('version = 3\ndisabled_plugins = ["io.containerd.cri.v1.images", "io.containerd.cri.v1.runtime"]\n',
     'version = 3\ndisabled_plugins = []\n'),
    ('version = 2\n', 'version = 2\n'),
    ('version = 2\n[x]\ndisabled_plugins = ["cri"]\n', 'version = 2\n[x]\ndisabled_plugins = ["cri"]\n'),
])
def test_enable_cri_removes_only_the_cri_plugin(text, expected):
    assert cr.containerd_config_enable_cri(text) == expected


def test_enable_cri_refuses_what_it_cannot_read():
    with pytest.raises(AnsibleFilterError, match='disabled_plugins must be a list'):
        cr.containerd_config_enable_cri('disabled_plugins = "cri"\n')


def test_hosts_toml():
    doc = tomllib.loads(cr.containerd_hosts_toml('docker.io', ['https://mirror.example.org/v2/dockerhub',
                                                               'https://m2.example.org:5000']))
    assert doc['server'] == 'https://registry-1.docker.io'
    assert list(doc['host']) == ['https://mirror.example.org/v2/dockerhub', 'https://m2.example.org:5000']
    assert all(h['capabilities'] == ['pull', 'resolve'] for h in doc['host'].values())
    assert tomllib.loads(cr.containerd_hosts_toml('registry.k8s.io', ['https://r.example.org']))['server'] == \
        'https://registry.k8s.io'


@pytest.mark.parametrize('registry, mirrors, message', [
    ('Docker.IO', ['https://m'], 'is not a registry host'),
    ('docker.io/library', ['https://m'], 'is not a registry host'),
    ('docker.io', 'https://m', 'is not a list of mirror URLs'),
    ('docker.io', ['ftp://m'], 'is not a list of mirror URLs'),
    ('docker.io', ['https://m"\n[host."https://evil"]'], 'is not a list of mirror URLs'),
    ('docker.io', [], 'is not a list of mirror URLs'),
])
def test_hosts_toml_refuses(registry, mirrors, message):
    with pytest.raises(AnsibleFilterError, match=message):
        cr.containerd_hosts_toml(registry, mirrors)


def test_cri_errors_name_each_missing_setting(own_fixtures_dir):
    stock = _read(own_fixtures_dir, 'containerd-1.7-config-default.toml')
    problems = cr.containerd_cri_errors(stock.replace('disabled_plugins = []', 'disabled_plugins = ["cri"]'),
                                        runtime_name='nvidia', default_runtime='nvidia', **K8S)
    assert problems == [
        'the CRI plugin is disabled (disabled_plugins: cri)',
        "the default runtime is 'runc', not nvidia",
        'no runtime named nvidia (runtimes: runc)',
        'runtime runc has SystemdCgroup = false, not true',
        "registry.config_path is '', not /etc/containerd/certs.d",
        "the sandbox (pause) image is 'registry.k8s.io/pause:3.8', not registry.k8s.io/pause:3.10.1",
        "the CNI plugins are looked for in ['/usr/lib/cni'], not in /opt/cni/bin",
    ]


def _containerd_binaries():
    found = []
    for path in [shutil.which('containerd')] + os.environ.get('GPUCLUSTER_CONTAINERD', '').split(':'):
        if path and os.access(path, os.X_OK) and path not in found:
            found.append(path)
    return found


@pytest.mark.parametrize('gpu', [True, False])
def test_a_real_containerd_loads_the_rendered_configuration(tmp_path, gpu):
    """containerd reads the files as it would at start (config dump needs no daemon): the drop-in is
    accepted and the merged result has every setting Kubernetes needs."""
    binaries = _containerd_binaries()
    if not binaries:
        if os.environ.get('CI') == 'true':
            pytest.fail('no containerd binary on this CI machine (docker.io depends on it)')
        pytest.skip('no containerd binary here (GPUCLUSTER_CONTAINERD=PATH[:PATH] names more)')
    for number, binary in enumerate(binaries):
        version = subprocess.run([binary, '--version'], stdout=subprocess.PIPE, universal_newlines=True, check=True,
                                 timeout=30).stdout
        default = subprocess.run([binary, 'config', 'default'], stdout=subprocess.PIPE, universal_newlines=True,
                                 check=True, timeout=30).stdout
        root = tmp_path / str(number)
        conf_d = root / 'conf.d'
        conf_d.mkdir(parents=True)
        major = cr.containerd_major(version)
        main = cr.containerd_config_imports('version = 2\n[plugins."io.containerd.grpc.v1.cri".cni]\n'
                                            'bin_dir = "/usr/lib/cni"\n', str(conf_d / '*.toml'), 3 if major >= 2 else 2)
        dropin = str(conf_d / '99-gpucluster-nvidia.toml')
        text = cr.containerd_dropin(main, [dropin], {}, default, version, dropin, binary_path=BIN, set_default=gpu,
                                    nvidia=gpu, **K8S)
        (root / 'config.toml').write_text(main)
        (conf_d / '99-gpucluster-nvidia.toml').write_text(text)
        dump = subprocess.run([binary, '--config', str(root / 'config.toml'), 'config', 'dump'], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, universal_newlines=True, timeout=30, check=False)
        assert dump.returncode == 0, (binary, dump.stderr[-2000:])
        assert cr.containerd_cri_errors(dump.stdout, **_expected(gpu)) == [], (version, dump.stdout)
