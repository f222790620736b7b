# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the preload callback (plugins/callback/preload.py) imports before ansible-playbook forks.

ansible-playbook runs each task of each host in a worker process forked from the main process. A worker
imports every plugin its task needs (the action, the lookups, the filter and test files its templates
name, the connection, shell and become plugins, the module_utils an action plugin uses) and, for a
collection's plugins, compiles their source first: Ansible's collection loader keeps no byte code. The
worker exits after its task, so a run of N tasks on H hosts pays those imports N x H times. Imported once
in the main process before the first fork, the modules are inherited by every worker (Ansible's plugin
loader takes a module already in ``sys.modules`` as loaded).

This module decides which: pure functions over a directory listing, no Ansible imports.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import re

# The collection's Python that runs on the controller: what its tasks' templates and actions import.
# Modules (plugins/modules) run on the nodes and are never imported by the controller's workers.
COLLECTION_PACKAGES = ('module_utils', 'plugin_utils', 'filter', 'test', 'lookup', 'action')
# ansible-core's plugin types whose every builtin plugin is cheap to import once (about 0.2 s together):
# the loader of each is asked for all of them by name, so the module lands under the name a worker uses.
CORE_PLUGIN_TYPES = ('action', 'lookup')
# Of the connection, shell and become plugins, those a run over SSH with sudo uses (importing every
# connection plugin would import optional libraries a site may not have).
CORE_PLUGINS = (('connection', 'ssh'), ('connection', 'local'), ('shell', 'sh'), ('become', 'sudo'), ('become', 'su'))

_MODULE = re.compile(r'^[A-Za-z_][A-Za-z0-9_]*\.py\Z')


def module_names(files):
    """Python module names (without ``.py``) of the file names in ``files``: sorted, ``__init__`` and
    anything that is not an importable ``name.py`` left out."""
    names = set()
    for name in files:
        if _MODULE.match(name) and name != '__init__.py':
            names.add(name[:-3])
    return sorted(names)


def collection_modules(plugins_dir, namespace, collection, listdir=os.listdir):
    """Full module names of a collection's controller-side Python under ``plugins_dir``
    (``ansible_collections.<namespace>.<collection>.plugins.<package>.<module>``), module_utils and
    plugin_utils first (the plugins import them), in a stable order. A package directory that is
    missing is left out."""
    found = []
    for package in COLLECTION_PACKAGES:
        try:
            files = listdir(os.path.join(plugins_dir, package))
        except OSError:
            continue
        prefix = 'ansible_collections.%s.%s.plugins.%s.' % (namespace, collection, package)
        found.extend(prefix + name for name in module_names(files))
    return found
