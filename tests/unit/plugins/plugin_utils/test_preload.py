# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which modules the preload callback imports before the first fork (plugins/plugin_utils/preload.py)."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import subprocess
import sys

import pytest

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


class _Result(object):
    def __init__(self, obj):
        self.object = obj


class _Loader(object):
    """Stands in for Ansible's Jinja2Loader: counts how often each name is resolved."""

    def __init__(self, known):
        self.known = known
        self.asked = []
        self.cleared = 0

    def get_with_context(self, name, *args, **kwargs):
        self.asked.append((name, args, tuple(sorted(kwargs.items()))))
        if name == 'broken.name.here':
            raise ValueError('cannot load')
        return _Result(self.known.get(name))

    def _clear_caches(self):
        self.cleared += 1


def test_remember_resolved_answers_each_name_once_found_or_not():
    loader = _Loader({'ns.coll.f': 'F', 'length': None})
    assert preload.remember_resolved(loader, ['ns.coll.f', 'length', 'ns.coll.missing', 'broken.name.here']) == 1
    asked = len(loader.asked)
    assert loader.get_with_context('ns.coll.f').object == 'F'
    assert loader.get_with_context('length').object is None
    assert loader.get_with_context('ns.coll.missing').object is None
    assert len(loader.asked) == asked
    # A failure to load is never remembered; other arguments and ansible.legacy names always go to the loader.
    with pytest.raises(ValueError):
        loader.get_with_context('broken.name.here')
    loader.get_with_context('ns.coll.f', class_only=True)
    loader.get_with_context('ansible.legacy.f')
    loader.get_with_context('ansible.legacy.f')
    assert [a[0] for a in loader.asked[asked:]] == ['broken.name.here', 'ns.coll.f', 'ansible.legacy.f', 'ansible.legacy.f']
    # A loader that forgets (a new plugin directory) makes it forget too.
    loader._clear_caches()  # pylint: disable=protected-access
    assert loader.cleared == 1
    loader.get_with_context('ns.coll.f')
    assert loader.asked[-1][0] == 'ns.coll.f'
    # Wrapped once only.
    assert preload.remember_resolved(loader, ['ns.coll.f']) == 0


def test_collection_plugin_names_are_full_names_each_once():
    maps = [{'b': 1, 'a': 2}, {'a': 3, 'x.y': 4, '': 5}]
    assert preload.collection_plugin_names('ns', 'coll', maps) == ['ns.coll.a', 'ns.coll.b']


def test_learn_module_files_fills_inspects_table():
    import inspect
    known = preload.learn_module_files(inspect, sys._getframe())  # pylint: disable=protected-access
    assert known >= len([m for m in sys.modules.values() if getattr(m, '__file__', None)]) // 2


def test_keep_out_of_collections_freezes_what_is_tracked_and_does_not_count_it():
    class Gc(object):
        calls = []

        def freeze(self):
            self.calls.append('freeze')

        def get_freeze_count(self):
            self.calls.append('count')
            return 123

    gc_stand_in = Gc()
    assert preload.keep_out_of_collections(gc_stand_in) is None
    assert gc_stand_in.calls == ['freeze']
