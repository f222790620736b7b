# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The built artifact carries the product only, and a plain checkout resolves gpucluster.core.*."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import shutil
import subprocess
import sys
import tarfile

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
BIN = os.path.dirname(sys.executable)


def _tool(name):
    path = os.path.join(BIN, name)
    return path if os.path.exists(path) else shutil.which(name)


@pytest.fixture(scope='module')
def artifact_members(tmp_path_factory):
    out = tmp_path_factory.mktemp('build')
    subprocess.run([_tool('ansible-galaxy'), 'collection', 'build', '--force', '--output-path', str(out), REPO],
                   check=True, cwd=REPO, capture_output=True)
    (tarball,) = [p for p in os.listdir(str(out)) if p.endswith('.tar.gz')]
    with tarfile.open(os.path.join(str(out), tarball)) as tar:
        return [m.name for m in tar.getmembers()]


@pytest.mark.parametrize('excluded', ['tests/', 'molecule/', 'lab/', 'bench/', '.ci/', '.config/', 'requirements/',
                                      'collections/', 'inventories/lab/', 'Makefile', '.venv/'])
def test_artifact_leaves_out_development_files(artifact_members, excluded):
    leaked = [m for m in artifact_members if m == excluded.rstrip('/') or m.startswith(excluded)]
    assert not leaked, 'the collection artifact contains %s' % leaked[:5]


@pytest.mark.parametrize('included', ['MANIFEST.json', 'meta/runtime.yml', 'playbooks/site.yml',
                                      'roles/os_tuning/tasks/main.yml', 'inventories/example/hosts.yml'])
def test_artifact_has_the_product(artifact_members, included):
    assert included in artifact_members


def test_checkout_resolves_the_collection():
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'))
    env.pop('ANSIBLE_COLLECTIONS_PATH', None)
    env.pop('ANSIBLE_COLLECTIONS_PATHS', None)
    result = subprocess.run([_tool('ansible-doc'), '-l', 'gpucluster.core', '--json'], cwd=REPO, env=env,
                            check=True, capture_output=True, text=True)
    modules = json.loads(result.stdout)
    assert 'gpucluster.core.gpu_facts' in modules
