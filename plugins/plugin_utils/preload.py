# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the preload callback (plugins/callback/preload.py) imports before ansible-playbook forks.

ansible-playbook runs each task of each host in a worker process forked from the main process. A worker
imports every plugin its task needs (the action, the lookups, the filter and test files its templates
name, the connection, shell and become plugins, the module_utils an action plugin uses) and, for a
collection's plugins, compiles their source first: Ansible's collection loader keeps no byte code. The
worker exits after its task, so a run of N tasks on H hosts pays those imports N x H times. Imported once
in the main process before the first fork, the modules are inherited by every worker (Ansible's plugin
loader takes a module already in ``sys.modules`` as loaded).

This module decides which: pure functions over a directory listing, no Ansible imports. It also keeps,
for the Jinja plugin loaders it is handed, what each of the collection's filter and test names resolves to
(remember_resolved), so that the workers inherit the answers too.
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


def collection_modules(plugins_dir, namespace, collection, listdir=os.listdir, packages=COLLECTION_PACKAGES):
    """Full module names of a collection's controller-side Python under ``plugins_dir``
    (``ansible_collections.<namespace>.<collection>.plugins.<package>.<module>``), module_utils and
    plugin_utils first (the plugins import them), in a stable order; ``packages`` names the packages to
    list (all of COLLECTION_PACKAGES by default). A package directory that is missing is left out."""
    found = []
    for package in packages:
        try:
            files = listdir(os.path.join(plugins_dir, package))
        except OSError:
            continue
        prefix = 'ansible_collections.%s.%s.plugins.%s.' % (namespace, collection, package)
        found.extend(prefix + name for name in module_names(files))
    return found


def remember_resolved(loader, names=()):
    """Make a Jinja plugin loader (Ansible's filter or test loader) remember what each name resolves to,
    found or not, and resolve ``names`` now.

    Ansible resolves a collection's name (``namespace.collection.name``), and a name its own table of builtin
    and legacy plugins lacks (Jinja's own ``length``, ``map``, ``match``), by importing and listing every filter
    or test file of the collection (ansible.builtin for a short name), again in every task's worker, since each
    starts with empty lookup tables: about 1 to 8 ms a name on a converged rerun of site.yml, several names a
    task. Done in the main process before the first fork, every worker inherits the answers. What the loader
    forgets (a new plugin directory: a role's filter_plugins) is forgotten here too, and a name that fails to
    load, a call with other arguments or an ``ansible.legacy.`` name goes to the loader every time, as without
    this. Returns how many of ``names`` resolved to a plugin; a loader already wrapped is left as it is (0)."""
    current = loader.get_with_context
    if getattr(current, 'gpucluster_remembered', None) is not None:
        return 0
    remembered = {}
    clear_caches = loader._clear_caches  # pylint: disable=protected-access

    def get_with_context(name, *args, **kwargs):
        if args or kwargs or not isinstance(name, str) or name.startswith('ansible.legacy.'):
            return current(name, *args, **kwargs)
        found = remembered.get(name)
        if found is None:
            found = remembered[name] = current(name)
        return found

    def forget_and_clear_caches(*args, **kwargs):
        remembered.clear()
        return clear_caches(*args, **kwargs)

    get_with_context.gpucluster_remembered = remembered
    loader.get_with_context = get_with_context
    loader._clear_caches = forget_and_clear_caches  # pylint: disable=protected-access
    count = 0
    for name in names:
        try:
            if getattr(get_with_context(name), 'object', None) is not None:
                count += 1
        except Exception:  # pylint: disable=broad-exception-caught
            # Left to the worker that names it, which reports the error as it would without this.
            continue
    return count


def collection_plugin_names(namespace, collection, plugin_maps):
    """``namespace.collection.name`` for every name of the collection's filter or test maps
    (``FilterModule().filters()`` or ``TestModule().tests()`` of each file), sorted, each once."""
    names = set()
    for plugin_map in plugin_maps:
        for name in plugin_map:
            if isinstance(name, str) and name and '.' not in name:
                names.add('%s.%s.%s' % (namespace, collection, name))
    return sorted(names)


def learn_module_files(inspect_module, frame):
    """Have ``inspect`` learn, now, which file each imported module comes from.

    The first stack walk in a process (``inspect.stack()``: ansible-core 2.21 walks the stack for every
    deprecation it records, even one nobody displays, such as the skipped_reason of a task whose loop is
    empty) resolves the real path of every imported module's file, about 160 ms in a task's worker. Learned in
    the main process after the preload, every worker inherits the table and only looks up modules imported
    later. ``frame``: a frame of the caller (its file must be a module's). Returns how many modules are known."""
    inspect_module.getmodule(frame)
    return len(getattr(inspect_module, '_filesbymodname', {}))


def keep_out_of_collections(gc_module):
    """Move every object the process tracks now out of the cyclic garbage collector's reach (``gc.freeze()``).

    A worker forked afterwards shares those objects' memory with the main process until it writes to it; its
    collections, which scan every tracked object of the generations they collect and write to each, would copy
    the pages and spend the time (measured: about a tenth of the controller's CPU on a converged rerun of
    site.yml). Objects freed by reference counting are still freed; cycles of garbage among the frozen
    objects stay until the process ends. Counting the frozen objects (``gc.get_freeze_count()``) walks them all
    (about 10 ms a call at 100,000 objects on CPython 3.12), so it is not done here."""
    gc_module.freeze()
