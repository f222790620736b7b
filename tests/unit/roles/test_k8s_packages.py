# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""k8s_node's pin and hold of kubelet, kubeadm and kubectl, run by the real apt and dpkg against packages built
here as test doubles (dpkg-deb; "test double" in their description, no maintainer scripts), in a flat repository
laid out as pkgs.k8s.io's (``deb URL /``), installed into a directory of their own (dpkg --instdir/--admindir, no
chroot, nothing of this machine's packages touched).

The files are the role's own: the apt source and the preferences pin rendered from its templates (the source
with ``trusted=yes`` in place of ``signed-by``: the doubles' repository is not signed), the install specs from
its filter (k8s_package_specs), the hold as the role sets it (dpkg --set-selections, what
gpucluster.core.package_hold runs on apt). What is shown:

- the pin makes the pinned release apt's candidate though the repository has a newer one, and an older one;
- installed and held, nothing moves them: ``apt-get upgrade`` keeps them back;
- a pin change moves them to the new release only with the hold overridden, as the role installs
  (allow_change_held_packages); that install resets their selection to "install", and the role's hold task, which
  follows the install, holds them again at the new release; a pin to an older release downgrades (allow_downgrade);
- the repository check of the role (the versions ``apt-cache madison`` lists) finds a release the repository does
  not serve.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest

from ansible_collections.gpucluster.core.plugins.module_utils import k8s

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
TOOLS = ('dpkg', 'dpkg-deb', 'apt-get', 'apt-cache')
RELEASES = ('1.34.3', '1.35.0', '1.35.1')
REVISION = '1.1'


def _need_tools():
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        if os.environ.get('CI') == 'true':
            pytest.fail('%s missing on this CI machine (Debian)' % ', '.join(missing))
        pytest.skip('%s not on this machine (the test runs on Debian)' % ', '.join(missing))


def _double(build, name, version, depends=''):
    """A .deb test double: a control file and one documentation file, no scripts."""
    root = build / ('%s_%s' % (name, version))
    (root / 'DEBIAN').mkdir(parents=True)
    (root / 'usr' / 'share' / 'doc' / name).mkdir(parents=True)
    (root / 'usr' / 'share' / 'doc' / name / 'TEST-DOUBLE').write_text(u'%s %s\n' % (name, version))
    control = ['Package: %s' % name, 'Version: %s' % version, 'Architecture: all',
               'Maintainer: gpucluster.core tests <tests@example.invalid>',
               'Description: test double of %s for the gpucluster.core unit tests' % name]
    if depends:
        control.insert(3, 'Depends: %s' % depends)
    (root / 'DEBIAN' / 'control').write_text(u'\n'.join(control) + '\n')
    deb = build / ('%s_%s_all.deb' % (name, version))
    subprocess.run(['dpkg-deb', '--build', '--root-owner-group', str(root), str(deb)], check=True,
                   stdout=subprocess.PIPE, timeout=60)
    return deb


def _repository(repo, build):
    """pkgs.k8s.io's flat layout: the .debs and one Packages index beside them."""
    repo.mkdir()
    stanzas = []
    for version in RELEASES:
        full = '%s-%s' % (version, REVISION)
        debs = [_double(build, 'kubelet', full), _double(build, 'kubectl', full),
                _double(build, 'kubeadm', full, 'kubelet (>= %s), kubectl (>= %s), cri-tools' % (version, version))]
        for deb in debs:
            target = repo / deb.name
            shutil.copy(str(deb), str(target))
            fields = subprocess.run(['dpkg-deb', '--field', str(target)], check=True, stdout=subprocess.PIPE,
                                    universal_newlines=True, timeout=60).stdout.strip()
            data = target.read_bytes()
            stanzas.append('%s\nFilename: ./%s\nSize: %d\nSHA256: %s\n' % (fields, target.name, len(data),
                                                                           hashlib.sha256(data).hexdigest()))
    cri = _double(build, 'cri-tools', '1.35.0-1.1')
    shutil.copy(str(cri), str(repo / cri.name))
    fields = subprocess.run(['dpkg-deb', '--field', str(repo / cri.name)], check=True, stdout=subprocess.PIPE,
                            universal_newlines=True, timeout=60).stdout.strip()
    data = (repo / cri.name).read_bytes()
    stanzas.append('%s\nFilename: ./%s\nSize: %d\nSHA256: %s\n' % (fields, cri.name, len(data), hashlib.sha256(data).hexdigest()))
    (repo / 'Packages').write_text(u'\n'.join(stanzas))


def _render(jobs):
    proc = subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), 'k8s_render.py')],
                          input=json.dumps(jobs), stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          timeout=300, env=dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, 'collections')), check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


class Node(object):
    """A directory apt and dpkg take as the node's root: its sources, preferences, lists and dpkg database."""

    def __init__(self, root):
        self.root = root
        for path in ('etc/apt/sources.list.d', 'etc/apt/preferences.d', 'etc/apt/apt.conf.d', 'var/lib/apt/lists/partial',
                     'var/cache/apt/archives/partial', 'var/lib/dpkg/updates', 'var/lib/dpkg/info', 'var/log'):
            (root / path).mkdir(parents=True, exist_ok=True)
        (root / 'var' / 'lib' / 'dpkg' / 'status').write_text(u'')
        (root / 'etc' / 'apt' / 'sources.list').write_text(u'')
        self.admindir = str(root / 'var' / 'lib' / 'dpkg')

    def apt_options(self):
        root = str(self.root)
        options = {'Dir': root, 'Dir::State::status': self.admindir + '/status', 'Dir::Etc': root + '/etc/apt',
                   'Dir::Cache': root + '/var/cache/apt', 'Dir::State': root + '/var/lib/apt', 'Dir::Log': root + '/var/log',
                   'Dir::Bin::dpkg': shutil.which('dpkg'), 'APT::Sandbox::User': 'root', 'Debug::NoLocking': 'true',
                   'APT::Architecture': 'amd64', 'Acquire::Languages': 'none'}
        argv = []
        for key, value in options.items():
            if value is not None:
                argv += ['-o', '%s=%s' % (key, value)]
        for dpkg_option in ('--instdir=' + root, '--admindir=' + self.admindir, '--force-script-chrootless',
                            '--force-not-root', '--log=' + root + '/var/log/dpkg.log'):
            argv += ['-o', 'DPkg::Options::=' + dpkg_option]
        return argv

    def run(self, argv, check=True):
        tool = argv[0]
        full = [tool] + self.apt_options() + argv[1:] if tool.startswith('apt') else argv
        proc = subprocess.run(full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=120,
                              env=dict(os.environ, DEBIAN_FRONTEND='noninteractive', LC_ALL='C'), check=False)
        if check:
            assert proc.returncode == 0, (full, proc.stdout[-3000:])
        return proc

    def candidate(self, name):
        policy = self.run(['apt-cache', 'policy', name]).stdout
        return next(line.split(':', 1)[1].strip() for line in policy.splitlines() if line.strip().startswith('Candidate:'))

    def installed(self):
        out = self.run(['dpkg-query', '--admindir=' + self.admindir, '-W', '-f=${Package} ${Version} ${db:Status-Abbrev}\\n'])
        return dict((line.split()[0], (line.split()[1], line.split()[2])) for line in out.stdout.splitlines() if line.strip())

    def hold(self, names):
        proc = subprocess.run(['dpkg', '--admindir=' + self.admindir, '--set-selections'],
                              input=''.join('%s hold\n' % name for name in names), universal_newlines=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60, check=False)
        assert proc.returncode == 0, proc.stdout


def test_pin_and_hold_with_the_real_apt_and_dpkg(tmp_path):
    _need_tools()
    build = tmp_path / 'build'
    build.mkdir()
    repo = tmp_path / 'repo'
    _repository(repo, build)
    node = Node(tmp_path / 'node')
    url = 'file://%s/' % repo

    def role_files(version):
        variables = {'k8s_node_version': version, 'k8s_node_repo_url': url, 'ansible_managed': 'Managed by Ansible',
                     'ansible_facts': {'os_family': 'Debian'}, '__k8s_node_pkg_mgr': 'apt'}
        return _render([
            {'role': 'k8s_node', 'template': 'etc/apt/sources.list.d/gpucluster-kubernetes.list.j2', 'variables': variables},
            {'role': 'k8s_node', 'template': 'etc/apt/preferences.d/gpucluster-kubernetes.j2', 'variables': variables}])

    def configure(version):
        source, pin = role_files(version)
        assert 'deb [signed-by=/etc/apt/keyrings/gpucluster-kubernetes.asc] %s /' % url in source
        (node.root / 'etc' / 'apt' / 'sources.list.d' / 'gpucluster-kubernetes.list').write_text(
            source.replace('signed-by=/etc/apt/keyrings/gpucluster-kubernetes.asc', 'trusted=yes'))
        (node.root / 'etc' / 'apt' / 'preferences.d' / 'gpucluster-kubernetes').write_text(pin)
        node.run(['apt-get', 'update'])

    configure('1.35.0')
    # The repository offers three releases; the role's check reads them as apt-cache madison lists them.
    madison = node.run(['apt-cache', 'madison', 'kubelet', 'kubeadm', 'kubectl']).stdout
    offered = set(tuple(part.strip() for part in line.split('|')[:2]) for line in madison.splitlines() if '|' in line)
    assert ('kubelet', '1.35.1-1.1') in offered and ('kubeadm', '1.34.3-1.1') in offered
    assert ('kubelet', '1.36.0-1.1') not in offered  # a release the repository does not serve is named, not installed
    # The pin, not the newest version, is the candidate.
    for name in k8s.PACKAGES:
        assert node.candidate(name) == '1.35.0-1.1'

    specs = k8s.package_specs('1.35.0', REVISION, 'apt')
    node.run(['apt-get', 'install', '-y', '--no-install-recommends'] + specs)
    assert node.installed() == {'kubelet': ('1.35.0-1.1', 'ii'), 'kubeadm': ('1.35.0-1.1', 'ii'),
                                'kubectl': ('1.35.0-1.1', 'ii'), 'cri-tools': ('1.35.0-1.1', 'ii')}
    assert (node.root / 'usr' / 'share' / 'doc' / 'kubelet' / 'TEST-DOUBLE').read_text() == 'kubelet 1.35.0-1.1\n'
    node.hold(k8s.PACKAGES)
    assert node.installed()['kubelet'] == ('1.35.0-1.1', 'hi')

    # Nothing moves held, pinned packages; with the pin moved, a plain upgrade still keeps them back.
    assert 'kubelet' not in node.run(['apt-get', '-s', 'upgrade']).stdout.split('Inst ')[-1]
    configure('1.35.1')
    for name in k8s.PACKAGES:
        assert node.candidate(name) == '1.35.1-1.1'
    upgrade = node.run(['apt-get', '-s', 'upgrade']).stdout
    assert 'kept back' in upgrade and 'Inst kubelet' not in upgrade

    # The new pin goes in the way the role installs it: the hold must be overridden ...
    specs = k8s.package_specs('1.35.1', REVISION, 'apt')
    refused = node.run(['apt-get', 'install', '-y', '--no-install-recommends'] + specs, check=False)
    assert refused.returncode != 0 and 'Held packages were changed' in refused.stdout
    node.run(['apt-get', 'install', '-y', '--no-install-recommends', '--allow-change-held-packages'] + specs)
    # apt's install of a held package makes its selection "install" again: the role's hold task (which follows the
    # install on every full run) puts the hold back.
    installed = node.installed()
    assert all(installed[name] == ('1.35.1-1.1', 'ii') for name in k8s.PACKAGES), installed
    node.hold(k8s.PACKAGES)
    installed = node.installed()
    assert all(installed[name] == ('1.35.1-1.1', 'hi') for name in k8s.PACKAGES), installed

    # ... and a pin to an older release downgrades (allow_downgrade), the hold kept.
    configure('1.34.3')
    specs = k8s.package_specs('1.34.3', REVISION, 'apt')
    node.run(['apt-get', 'install', '-y', '--no-install-recommends', '--allow-change-held-packages',
              '--allow-downgrades'] + specs)
    node.hold(k8s.PACKAGES)
    installed = node.installed()
    assert all(installed[name] == ('1.34.3-1.1', 'hi') for name in k8s.PACKAGES), installed
