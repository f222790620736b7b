# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One licence across the collection: galaxy.yml, every role's meta, every Python header, COPYING."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import glob
import os

import pytest
import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
SPDX = 'GPL-3.0-or-later'
HEADER = '# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)'
# Files we did not write as collection code: the offline pip bootstrap is a development helper
# outside the artifact and says what it is in its docstring.
NOT_HEADED = {'lab/get_pip_offline.py'}


def _load(path):
    with open(os.path.join(REPO, path)) as handle:
        return yaml.safe_load(handle)


def test_galaxy_declares_the_licence():
    galaxy = _load('galaxy.yml')
    assert galaxy.get('license') == [SPDX]
    assert not galaxy.get('license_file'), 'license and license_file are exclusive in galaxy.yml'


def test_copying_is_the_gpl3_text():
    with open(os.path.join(REPO, 'COPYING')) as handle:
        text = handle.read()
    assert 'GNU GENERAL PUBLIC LICENSE' in text and 'Version 3, 29 June 2007' in text


@pytest.mark.parametrize('meta', sorted(glob.glob(os.path.join(REPO, 'roles', '*', 'meta', 'main.yml'))),
                         ids=lambda p: p.split(os.sep)[-3])
def test_role_meta_licence(meta):
    assert _load(meta)['galaxy_info']['license'] == SPDX


def _python_files():
    for top in ('plugins', 'roles', 'tests', 'lab', 'bench'):
        for path in glob.glob(os.path.join(REPO, top, '**', '*.py'), recursive=True):
            rel = os.path.relpath(path, REPO)
            if rel not in NOT_HEADED and '__pycache__' not in rel:
                yield rel


@pytest.mark.parametrize('path', sorted(_python_files()))
def test_python_header(path):
    with open(os.path.join(REPO, path)) as handle:
        head = handle.read(4096).splitlines()
    # A shebang may come first.
    lines = [line for line in head[:3] if not line.startswith('#!')]
    assert lines and lines[0] == HEADER, '%s: first line must be the licence header %r' % (path, HEADER)
