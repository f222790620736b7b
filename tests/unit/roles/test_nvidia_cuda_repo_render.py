# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Render the CUDA repository path of nvidia_driver / cuda_toolkit for every supported OS.

The expressions are the role's own (set_fact of tasks/cuda_repo_key.yml, the templates), evaluated by
Ansible's templating engine with the facts each OS reports; expected values follow NVIDIA's
documented repository layout (repos/<ubuntu2204|ubuntu2404|debian12|debian13|rhel8|rhel9>/<x86_64|sbsa>/,
keys 3bf863cc.pub for apt and D42D0685.pub for dnf; debian13 is signed by its own key, 8793F200.pub).
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import re
import subprocess

import pytest
import yaml

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

try:  # ansible-core >= 2.19 templates only trusted strings
    from ansible.template import trust_as_template
except ImportError:  # pragma: no cover
    def trust_as_template(value):
        return value
from ansible_collections.gpucluster.core.plugins.filter import nvidia

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
DRIVER = os.path.join(REPO, 'roles', 'nvidia_driver')
TOOLKIT = os.path.join(REPO, 'roles', 'cuda_toolkit')

OSES = {
    'ubuntu2204': {'distribution': 'Ubuntu', 'os_family': 'Debian', 'distribution_major_version': '22'},
    'ubuntu2404': {'distribution': 'Ubuntu', 'os_family': 'Debian', 'distribution_major_version': '24'},
    'debian12': {'distribution': 'Debian', 'os_family': 'Debian', 'distribution_major_version': '12'},
    'debian13': {'distribution': 'Debian', 'os_family': 'Debian', 'distribution_major_version': '13'},
    'rhel8': {'distribution': 'Rocky', 'os_family': 'RedHat', 'distribution_major_version': '8'},
    'rhel9': {'distribution': 'RedHat', 'os_family': 'RedHat', 'distribution_major_version': '9'},
}
KEYS = {'Debian': '3bf863cc.pub', 'RedHat': 'D42D0685.pub'}
# Repositories signed by a key of their own, and the entry of nvidia_driver_cuda_repo_key_fingerprints that checks it.
SLUG_KEYS = {'debian13': '8793F200.pub'}


def _trust(value):
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return dict((k, _trust(v)) for k, v in value.items())
    if isinstance(value, list):
        return [_trust(v) for v in value]
    return value


def _yaml(path):
    with open(path) as handle:
        return _trust(yaml.safe_load(handle))


def _variables(facts, **extra):
    variables = {}
    variables.update(_yaml(os.path.join(DRIVER, 'defaults', 'main.yml')))
    variables.update(_yaml(os.path.join(DRIVER, 'vars', 'main.yml')))
    variables['ansible_facts'] = facts
    variables['ansible_managed'] = 'Managed by Ansible (gpucluster.core)'
    variables.update(extra)
    return variables


def _set_fact(variables):
    tasks = _yaml(os.path.join(DRIVER, 'tasks', 'cuda_repo_key.yml'))
    task = tasks[0]
    templar = Templar(loader=DataLoader(), variables=dict(variables, **task.get('vars', {})))
    return dict((k, templar.template(v)) for k, v in task['ansible.builtin.set_fact'].items())


def _render(template, variables):
    with open(template) as handle:
        source = trust_as_template(handle.read())
    return Templar(loader=DataLoader(), variables=variables).template(source)


@pytest.mark.parametrize('slug', sorted(OSES))
@pytest.mark.parametrize('arch,repo_arch', [('x86_64', 'x86_64'), ('aarch64', 'sbsa')])
def test_repository_location(slug, arch, repo_arch):
    facts = dict(OSES[slug], architecture=arch)
    result = _set_fact(_variables(facts))
    base = 'https://developer.download.nvidia.com/compute/cuda/repos'
    assert result['__nvidia_driver_cuda_repo_url'] == '%s/%s/%s/' % (base, slug, repo_arch)
    key = SLUG_KEYS.get(slug, KEYS[facts['os_family']])
    assert result['__nvidia_driver_cuda_repo_key'] == '%s/%s/%s/%s' % (base, slug, repo_arch, key)
    assert result['__nvidia_driver_cuda_repo_name'] == 'cuda-%s-%s' % (slug, repo_arch)
    # The fingerprint entry: the repository's own where it has one, else the OS family's (both in the defaults).
    assert result['__nvidia_driver_cuda_key_name'] == (slug if slug in SLUG_KEYS else facts['os_family'])
    fingerprints = _variables(facts)['nvidia_driver_cuda_repo_key_fingerprints']
    assert fingerprints[result['__nvidia_driver_cuda_key_name']].endswith(key.split('.')[0].upper())


def test_mirror_and_key_override():
    facts = dict(OSES['ubuntu2204'], architecture='x86_64')
    result = _set_fact(_variables(facts, nvidia_driver_cuda_repo_base_url='https://mirror.example.internal/cuda/repos/',
                                  nvidia_driver_cuda_repo_key_url='https://mirror.example.internal/keys/cuda.asc'))
    assert result['__nvidia_driver_cuda_repo_url'] == 'https://mirror.example.internal/cuda/repos/ubuntu2204/x86_64/'
    assert result['__nvidia_driver_cuda_repo_key'] == 'https://mirror.example.internal/keys/cuda.asc'


@pytest.mark.parametrize('slug', ['ubuntu2204', 'ubuntu2404', 'debian12', 'debian13'])
def test_apt_sources_file(slug):
    facts = dict(OSES[slug], architecture='x86_64')
    variables = _variables(facts)
    variables.update(_set_fact(variables))
    text = _render(os.path.join(DRIVER, 'templates', 'etc', 'apt', 'sources.list.d', 'gpucluster-cuda.sources.j2'), variables)
    assert text.startswith('#')
    stanza = dict(line.split(': ', 1) for line in text.splitlines() if line and not line.startswith('#'))
    assert stanza == {
        'Types': 'deb',
        'URIs': 'https://developer.download.nvidia.com/compute/cuda/repos/%s/x86_64/' % slug,
        'Suites': '/',
        'Signed-By': '/etc/apt/keyrings/gpucluster-cuda.asc',
    }


@pytest.mark.parametrize('slug,flavour,meta', [
    ('ubuntu2204', 'proprietary', 'cuda-drivers-535'),
    ('ubuntu2404', 'open', 'nvidia-open-535'),
    ('debian12', 'proprietary', 'cuda-drivers-535'),
])
def test_apt_pin_file(slug, flavour, meta):
    facts = dict(OSES[slug], architecture='x86_64')
    plan = nvidia.nvidia_driver_plan('535.309.01', 'cuda_repo', facts['distribution'], facts['distribution_major_version'],
                                     flavour, True, True)
    text = _render(os.path.join(DRIVER, 'templates', 'etc', 'apt', 'preferences.d', 'gpucluster-nvidia-driver.pref.j2'),
                   _variables(facts, __nvidia_driver_plan=plan))
    fields = dict(line.split(': ', 1) for line in text.splitlines() if line and not line.startswith('#'))
    assert fields['Pin'] == 'version 535.309.01-*'
    assert fields['Pin-Priority'] == '1001'
    regex = re.compile(fields['Package'].strip('/'))
    # Ubuntu/CUDA repository names and the Debian dependencies at exact versions (nvidia-alternative, ...).
    for name in plan['packages'] + ['nvidia-dkms-535', 'libnvidia-compute-535', 'nvidia-kernel-common-535',
                                    'libcuda1', 'nvidia-modprobe', 'nvidia-settings', 'xserver-xorg-video-nvidia-535',
                                    'nvidia-alternative', 'libnvidia-ptxjitcompiler1', 'firmware-nvidia-gsp',
                                    'nvidia-kernel-support', 'nvidia-open-kernel-support', 'libnvidia-pkcs11-openssl3']:
        assert regex.search(name), name
    assert meta in plan['packages']
    # CUDA libraries have their own versions and are not in the driver family.
    for name in ['cuda-toolkit-12-4', 'libnccl2', 'libcudnn9-cuda-12', 'cuda-compat-12-4']:
        assert not regex.search(name), name


def test_apt_pin_file_is_valid_for_apt(tmp_path):
    """apt itself parses the rendered preferences file (where apt exists)."""
    if not os.path.exists('/usr/bin/apt-cache'):
        pytest.skip('apt not available')
    facts = dict(OSES['debian12'], architecture='x86_64')
    plan = nvidia.nvidia_driver_plan('535.309.01', 'cuda_repo', 'Debian', '12', 'proprietary')
    text = _render(os.path.join(DRIVER, 'templates', 'etc', 'apt', 'preferences.d', 'gpucluster-nvidia-driver.pref.j2'),
                   _variables(facts, __nvidia_driver_plan=plan))
    prefs = tmp_path / 'preferences'
    prefs.write_text(text)
    parts = tmp_path / 'parts'
    parts.mkdir()
    result = subprocess.run(['apt-cache', '-o', 'Dir::Etc::preferences=%s' % prefs, '-o', 'Dir::Etc::preferencesparts=%s' % parts,
                             'policy'], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert 'E:' not in result.stderr and 'W:' not in result.stderr, result.stderr


def test_nouveau_blacklist():
    text = _render(os.path.join(DRIVER, 'templates', 'etc', 'modprobe.d', 'gpucluster-blacklist-nouveau.conf.j2'),
                   _variables({}))
    lines = [line for line in text.splitlines() if line and not line.startswith('#')]
    assert lines == ['blacklist nouveau', 'options nouveau modeset=0']


def test_toolkit_profile_is_valid_shell(tmp_path):
    plan = nvidia.cuda_toolkit_plan(['12.2', '12.4'], '12.4', 'cuda_repo', 'Ubuntu')
    text = _render(os.path.join(TOOLKIT, 'templates', 'etc', 'profile.d', 'gpucluster-cuda.sh.j2'),
                   _variables({}, __cuda_toolkit_plan=plan))
    script = tmp_path / 'cuda.sh'
    script.write_text(text)
    for start_path in ['/usr/bin:/bin', '/usr/local/cuda/bin:/usr/bin']:
        result = subprocess.run(['sh', '-c', '. %s; . %s; echo "$PATH"' % (script, script)],
                                env={'PATH': start_path}, capture_output=True, text=True, check=False)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip().split(':').count('/usr/local/cuda/bin') == 1
        assert result.stdout.strip().startswith('/usr/local/cuda/bin')
