# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Import the plugins every task's worker would import, once, before ansible-playbook forks.

The choice of modules is in plugins/plugin_utils/preload.py; this plugin only asks Ansible's loaders
for them. docs/performance.md ("Imports before the first fork") has the measurement.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
name: preload
type: aggregate
short_description: Import the plugins the roles use once, before the first task's worker is forked
description:
  - ansible-playbook runs every task of every host in a worker process forked from its main process, and
    each worker imports, and for a collection's plugins first compiles, every plugin its task needs; the
    worker exits after the task. On a converged rerun of C(site.yml) that was about half of the controller's
    CPU.
  - When the playbook starts, this callback imports, in the main process, the collection's filter, test,
    lookup and action plugins and the module_utils they use, ansible-core's filter, test, lookup and action
    plugins, and the SSH and local connection, sh shell and sudo/su become plugins. Every worker forked
    afterwards inherits them.
  - It also keeps the byte code Jinja compiles for each template and conditional in a directory on the
    controller (O(compile_cache_dir)), which every worker and every later run reads instead of compiling the same
    text again; an entry is used only for the same text, environment settings, versions of Python, Jinja and
    ansible-core, and the same way of calling each filter and test it names. The directory must belong to the
    user running Ansible and be writable by nobody else, and its parent must not be writable by everyone (unless
    sticky, as /tmp); otherwise the cache is off for the run and a warning says why.
  - Before the first fork it also answers, once, what every worker would otherwise work out again for itself,
    what each of the collection's filter and test names (and Jinja's own) resolves to, which file each imported
    module comes from (a worker's first stack walk, as ansible-core does for every deprecation it records), and
    the digest of the collection's code that the converged-state fast path compares (a collection module's
    C(before_fork) function).
  - It moves the main process's objects (the imports, the loaded playbook, each play's objects when the play
    starts) out of Python's cyclic garbage collection (C(gc.freeze)), so that a worker's collections neither
    scan nor copy them (about a tenth of the controller's CPU on a converged rerun). Cycles of garbage made
    before then stay in memory until the run ends; the main process's peak memory was measured the same.
  - It changes no result. A module that cannot be imported is left to the worker that needs it, which reports
    the error as it would without this callback (C(-vvv) names it here too).
requirements:
  - enable it in ansible.cfg (C(callbacks_enabled = gpucluster.core.preload)) or ANSIBLE_CALLBACKS_ENABLED
options:
  compile_cache:
    description: Keep compiled templates in O(compile_cache_dir) and use them (C(false) compiles every template
      in every worker, as Ansible does by itself).
    type: bool
    default: true
    env:
      - name: GPUCLUSTER_COMPILE_CACHE
    ini:
      - section: callback_gpucluster_preload
        key: compile_cache
  compile_cache_dir:
    description: Where the compiled templates are kept (made with mode 0700 when missing); one directory per set
      of Python, Jinja and ansible-core versions is made under it.
    type: path
    default: ~/.cache/gpucluster/jinja
    env:
      - name: GPUCLUSTER_COMPILE_CACHE_DIR
    ini:
      - section: callback_gpucluster_preload
        key: compile_cache_dir
'''

import gc
import importlib
import inspect
import os
import sys

import jinja2.filters
import jinja2.tests

from ansible.plugins import loader as plugin_loader
from ansible.plugins.callback import CallbackBase
from ansible.utils.display import Display

from ansible_collections.gpucluster.core.plugins.plugin_utils import compile_cache, preload

display = Display()
PLUGINS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _core_names(kind):
    package = importlib.import_module('ansible.plugins.%s' % kind)
    return preload.module_names(os.listdir(os.path.dirname(package.__file__)))


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = 'aggregate'
    CALLBACK_NAME = 'gpucluster.core.preload'
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super(CallbackModule, self).__init__(*args, **kwargs)
        self._done = False

    def v2_playbook_on_start(self, playbook):
        if self._done:
            return
        self._done = True
        if self.get_option('compile_cache'):
            try:
                cache, why = compile_cache.install(self.get_option('compile_cache_dir'))
            except Exception as exc:  # pylint: disable=broad-exception-caught
                cache, why = None, 'unexpected %s: %s' % (type(exc).__name__, exc)
            if cache is None:
                display.warning('gpucluster.core.preload: compiled templates are not kept this run: %s' % why)
            else:
                display.vvv('gpucluster.core.preload: compiled templates kept in %s' % cache.directory)
        failed = []
        count = 0
        for name in preload.collection_modules(PLUGINS_DIR, 'gpucluster', 'core'):
            try:
                module = importlib.import_module(name)
                count += 1
                # Work every worker would repeat (the fast path's digest of the collection's code), done once here.
                if callable(getattr(module, 'before_fork', None)):
                    module.before_fork()
            except Exception as exc:  # pylint: disable=broad-exception-caught
                failed.append('%s (%s)' % (name, exc))
        # The Jinja loaders import every builtin filter and test file by themselves (all()), under the names a
        # worker's templar uses.
        # A file that fails to import stops all() for that loader; the workers then import the rest as they would.
        for loader in (plugin_loader.filter_loader, plugin_loader.test_loader):
            try:
                for dummy in loader.all():
                    count += 1
            except Exception as exc:  # pylint: disable=broad-exception-caught
                failed.append('ansible.builtin %s plugins (%s)' % (loader.type, exc))
        targets = [(kind, name) for kind in preload.CORE_PLUGIN_TYPES for name in _core_names(kind)]
        targets.extend(preload.CORE_PLUGINS)
        for kind, name in targets:
            try:
                if getattr(plugin_loader, '%s_loader' % kind).get('ansible.builtin.' + name, class_only=True) is not None:
                    count += 1
            except Exception as exc:  # pylint: disable=broad-exception-caught
                failed.append('ansible.builtin.%s %s (%s)' % (name, kind, exc))
        # What each of the collection's filter and test names, and Jinja's own, resolves to: answered once here for
        # every worker.
        for loader, package, factory, method, jinja_names in (
                (plugin_loader.filter_loader, 'filter', 'FilterModule', 'filters', jinja2.filters.FILTERS),
                (plugin_loader.test_loader, 'test', 'TestModule', 'tests', jinja2.tests.TESTS)):
            try:
                maps = [getattr(getattr(importlib.import_module(name), factory)(), method)()
                        for name in preload.collection_modules(PLUGINS_DIR, 'gpucluster', 'core', packages=(package,))
                        if name in sys.modules]
                names = preload.collection_plugin_names('gpucluster', 'core', maps) + sorted(jinja_names)
                resolved = preload.remember_resolved(loader, names)
                display.vvv('gpucluster.core.preload: %d %s names resolved before the first fork' % (resolved, package))
            except Exception as exc:  # pylint: disable=broad-exception-caught
                failed.append('resolving the collection %s names (%s)' % (package, exc))
        display.vvv('gpucluster.core.preload: %d plugins and modules imported before the first fork' % count)
        try:
            known = preload.learn_module_files(inspect, sys._getframe())  # pylint: disable=protected-access
            display.vvv('gpucluster.core.preload: the files of %d modules known to inspect before the first fork' % known)
        except Exception as exc:  # pylint: disable=broad-exception-caught
            failed.append('the files of the imported modules (%s)' % exc)
        if failed:
            display.vvv('gpucluster.core.preload: left to the workers that need them: %s' % '; '.join(failed))
        preload.keep_out_of_collections(gc)

    def v2_playbook_on_play_start(self, play):
        # The play's objects, made since the last freeze, before its first task's workers are forked.
        preload.keep_out_of_collections(gc)
