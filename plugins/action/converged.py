# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of the converged-state fast path (module gpucluster.core.converged).

With state=check, computes the fingerprint of what the calling role would apply to this host and
sends it, digests only, to the node module, which compares it with the record of the last finished
full run and observes the managed state in the same round trip. With state=record (after the full
path) it computes the fingerprint again, as the next run's check will, and sends it with the values of
the role's outputs (``manages.outputs``: names of variables the role reports to the play) to be kept.
The parts of the fingerprint:

- code: every file of the collection's roles and plugins (a new release, a patched template; a role
  copied out of the collection counts with its own directory instead);
- variables: the role's own variables (the keys of its defaults, templated as the role sees them),
  every ``gpucluster_*`` site switch, and the host's name and address;
- facts: each fact the role's files read as ``ansible_facts['NAME']`` or ``ansible_facts.NAME``, plus
  the ``facts`` the task names, reduced to what describes the machine (converged_state's projection);
- inputs: the ``inputs`` mapping the task passes (what the role reads of other hosts, derived values).

The decisions are in module_utils/converged_state.py; this plugin only gathers.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import hashlib
import os
import re

import yaml

from ansible.errors import AnsibleError
from ansible.module_utils.common.text.converters import to_native
from ansible.plugins.action import ActionBase

from ansible_collections.gpucluster.core.plugins.module_utils import converged_state as cs

PLUGINS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The collection's roles: a role may run tasks of another (cuda_toolkit takes nvidia_driver's repository
# tasks), so the code part covers every role of the collection and its plugins.
ROLES_DIR = os.path.join(os.path.dirname(PLUGINS_DIR), 'roles')
_FACT_REFERENCE = re.compile(r"ansible_facts(?:\[\s*['\"]([A-Za-z0-9_]+)['\"]\s*\]|\.([A-Za-z_][A-Za-z0-9_]*))")
# Attribute access on the facts dictionary that is a method, not a fact.
_NOT_FACTS = frozenset(('get', 'keys', 'items', 'values'))
_SKIP_DIRS = frozenset(('__pycache__', '.pytest_cache'))


def tree_files(root):
    """Relative paths of the files under ``root``, sorted, without byte-code caches."""
    found = []
    for directory, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
        for name in files:
            if not name.endswith(('.pyc', '.pyo')):
                found.append(os.path.relpath(os.path.join(directory, name), root))
    return sorted(found)


def code_digest(roots):
    """One digest over the names and bytes of every file under ``roots``."""
    sha = hashlib.sha256()
    for root in roots:
        for rel in tree_files(root):
            with open(os.path.join(root, rel), 'rb') as handle:
                data = handle.read()
            sha.update(('%s\0%d\0' % (rel, len(data))).encode('utf-8', 'surrogateescape'))
            sha.update(data)
    return sha.hexdigest()


# The code part of the fingerprint, per tuple of roots: computed once per process (reading and hashing
# every file of the collection takes about 30 ms), and by before_fork() in ansible-playbook's main process,
# whose workers then inherit it (the gpucluster.core.preload callback calls it before the first fork).
_CODE_DIGESTS = {}


def code_digest_once(roots):
    """code_digest(roots), computed once per process for the same roots."""
    key = tuple(roots)
    if key not in _CODE_DIGESTS:
        _CODE_DIGESTS[key] = code_digest(key)
    return _CODE_DIGESTS[key]


def before_fork():
    """The digest of the collection's roles and plugins, for every worker forked after this."""
    code_digest_once([ROLES_DIR, PLUGINS_DIR])


def role_tags(role_path):
    """Every tag the role's task files name (its tasks are skipped by a --skip-tags naming one of them)."""
    tags = set(['always'])
    for rel in tree_files(os.path.join(role_path, 'tasks')):
        if not rel.endswith(('.yml', '.yaml')):
            continue
        with open(os.path.join(role_path, 'tasks', rel), 'rb') as handle:
            try:
                data = yaml.safe_load(handle)
            except yaml.YAMLError:
                continue
        stack = [data]
        while stack:
            item = stack.pop()
            if isinstance(item, list):
                stack.extend(item)
            elif isinstance(item, dict):
                value = item.get('tags')
                if isinstance(value, str):
                    tags.add(value)
                elif isinstance(value, list):
                    tags.update(str(t) for t in value)
                stack.extend(v for v in item.values() if isinstance(v, (list, dict)))
    return tags


def referenced_facts(role_path):
    """Names of the facts the role's files read (tasks, handlers, templates, vars, defaults)."""
    names = set()
    for rel in tree_files(role_path):
        if not rel.split(os.sep)[0] in ('tasks', 'handlers', 'templates', 'vars', 'defaults'):
            continue
        with open(os.path.join(role_path, rel), 'rb') as handle:
            text = handle.read().decode('utf-8', 'replace')
        for match in _FACT_REFERENCE.finditer(text):
            name = match.group(1) or match.group(2)
            if name not in _NOT_FACTS:
                names.add(name)
    return names


class ActionModule(ActionBase):

    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        args = dict(self._task.args)
        state = args.get('state', 'check')
        role = args.get('role')
        manages = dict(args.get('manages') or {})
        # The values the role reports to the play: kept in the record, never part of the fingerprint.
        outputs = manages.pop('outputs', None) or []
        if isinstance(outputs, str) or not isinstance(outputs, list) or not all(isinstance(o, str) for o in outputs):
            result.update(failed=True, msg='converged: manages.outputs must be a list of variable names')
            return result
        args['manages'] = manages
        try:
            # Computed again when the state is recorded, after the full path: what the role read then (its
            # node's certificate issued, a peer's address chosen) is what the next run's check will read.
            fingerprint = cs.fingerprint(self._parts(role, args, task_vars, outputs))
        except (AnsibleError, cs.FingerprintError, IOError, OSError) as exc:
            if state == 'record':
                result.update(failed=True, msg='converged: the fingerprint of %s cannot be computed: %s' % (
                    role, to_native(exc)[:300]))
                return result
            # A fingerprint that cannot be computed is never a skip: the full path runs, and nothing is
            # recorded (there would be nothing to compare the next run with).
            result.update(changed=False, converged=False, recordable=False, fingerprint=None, outputs={}, packages={},
                          reasons=['the fingerprint of %s cannot be computed on the controller: %s'
                                   % (role, to_native(exc)[:300])])
            return result
        args['fingerprint'] = fingerprint
        args.pop('inputs', None)
        args.pop('facts', None)
        if state == 'record':
            args['outputs'] = dict((name, self._templar.template(task_vars.get(name))) for name in outputs)
            result.update(self._execute_module(module_name='gpucluster.core.converged', module_args=args,
                                               task_vars=task_vars))
            return result
        switch = self._templar.template(task_vars.get('gpucluster_fast_path', True))
        # -e gpucluster_fast_path=false on the command line gives a string.
        if isinstance(switch, str) and switch.lower() in ('true', 'false'):
            switch = switch.lower() == 'true'
        if not isinstance(switch, bool):
            result.update(failed=True, msg='gpucluster_fast_path must be true or false, got %r' % (str(switch)[:40],))
            return result
        # A run that left out any task of the role must not stand for a full one. Skipped tags the role does
        # not use (molecule's molecule-notest, a site's own) leave it whole.
        skipped = set(task_vars.get('ansible_skip_tags') or [])
        recordable = (not self._task.check_mode
                      and list(task_vars.get('ansible_run_tags') or ['all']) == ['all']
                      and not (skipped and skipped & role_tags(self._task._role._role_path)))
        if not switch:
            # Nothing is compared and the record stays; the packages are still observed (one dpkg-query or rpm
            # read) so that the full path can leave out an install that would change nothing.
            args['compare'] = False
            args['manages'] = {'packages': manages.get('packages') or []}
        module = self._execute_module(module_name='gpucluster.core.converged', module_args=args, task_vars=task_vars)
        result.update(module)
        if not module.get('failed'):
            result['recordable'] = recordable
        return result

    def _parts(self, role, args, task_vars, outputs=()):
        role_obj = getattr(self._task, '_role', None)
        if role_obj is None:
            raise AnsibleError('the converged action runs only inside a role')
        if role and role != role_obj.get_name(include_role_fqcn=False):
            raise AnsibleError('role=%s but the task belongs to role %s' % (role, role_obj.get_name()))
        role_path = role_obj._role_path
        names = sorted(n for n in role_obj.get_default_vars() if n not in outputs)
        # The fast path's own switch decides how a run is made, not what it applies.
        names += sorted(n for n in task_vars if n.startswith('gpucluster_') and n not in names and n != 'gpucluster_fast_path')
        variables = {}
        for name in names:
            variables[name] = self._templar.template(task_vars[name]) if name in task_vars else None
        for name in ('inventory_hostname', 'ansible_host'):
            variables['.' + name] = self._templar.template(task_vars.get(name))
        facts_all = task_vars.get('ansible_facts') or {}
        wanted = (referenced_facts(role_path) - cs.PRODUCED_FACTS) | set(args.get('facts') or [])
        facts = dict((name, cs.stable_fact(name, facts_all.get(name))) for name in sorted(wanted))
        return {
            'code': code_digest_once([ROLES_DIR if os.path.dirname(os.path.realpath(role_path)) == os.path.realpath(ROLES_DIR)
                                      else role_path, PLUGINS_DIR]),
            'variables': variables,
            'facts': facts,
            'inputs': args.get('inputs') or {},
        }
