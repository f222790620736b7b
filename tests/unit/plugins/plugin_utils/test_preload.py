# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which modules the preload callback imports before the first fork (plugins/plugin_utils/preload.py)."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import subprocess
import sys

from ansible_collections.gpucluster.core.plugins.plugin_utils import preload

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
PLUGINS = os.path.join(REPO, 'plugins')
COLLECTIONS = os.path.join(REPO, 'collections')


def test_module_names_keeps_importable_python_files_only():
    files = ['b.py', 'a.py', '__init__.py', 'README.md', 'c.pyc', 'has-dash.py', '9start.py', 'a.py', '.hidden.py', 'ok_2.py']
    assert preload.module_names(files) == ['a', 'b', 'ok_2']


def test_collection_modules_lists_module_utils_first_and_skips_missing_directories():
    tree = {
        os.path.join('P', 'module_utils'): ['util.py', '__init__.py'],
        os.path.join('P', 'filter'): ['fabric.py'],
        os.path.join('P', 'action'): ['converged.py'],
    }

    def listdir(path):
        if path not in tree:
            raise OSError(2, 'No such file or directory', path)
        return tree[path]

    assert preload.collection_modules('P', 'ns', 'coll', listdir=listdir) == [
        'ansible_collections.ns.coll.plugins.module_utils.util',
        'ansible_collections.ns.coll.plugins.filter.fabric',
        'ansible_collections.ns.coll.plugins.action.converged',
    ]


def test_the_collection_modules_are_its_controller_python_and_all_import():
    names = preload.collection_modules(PLUGINS, 'gpucluster', 'core')
    # The filters, the actions and the module_utils they use; never the modules (they run on the nodes).
    for expected in ('plugins.module_utils.converged_state', 'plugins.filter.fabric', 'plugins.action.converged',
                     'plugins.plugin_utils.reports'):
        assert 'ansible_collections.gpucluster.core.' + expected in names
    assert not [n for n in names if '.plugins.modules.' in n or '.plugins.callback.' in n]
    expected_count = sum(len(preload.module_names(os.listdir(os.path.join(PLUGINS, package))))
                         for package in preload.COLLECTION_PACKAGES if os.path.isdir(os.path.join(PLUGINS, package)))
    assert len(names) == expected_count
    # A module that could not be imported would be left to every worker again: none may fail. In a fresh
    # interpreter (another test of the session may have installed Ansible's collection finder, which then
    # refuses collections it has no metadata for).
    code = 'import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\nprint("imported", len(sys.argv) - 1)\n'
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([COLLECTIONS] + [p for p in [os.environ.get('PYTHONPATH')] if p]))
    proc = subprocess.run([sys.executable, '-c', code] + names, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == 'imported %d' % len(names)
