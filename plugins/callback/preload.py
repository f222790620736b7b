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

import importlib
import os

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
                importlib.import_module(name)
                count += 1
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
        display.vvv('gpucluster.core.preload: %d plugins and modules imported before the first fork' % count)
        if failed:
            display.vvv('gpucluster.core.preload: left to the workers that need them: %s' % '; '.join(failed))
