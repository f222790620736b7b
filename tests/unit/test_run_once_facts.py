# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""No run_once task that sets facts or prints runs on hosts whose facts were not gathered yet.

ansible-core 2.21 applies a run_once task's variables to every host of the play. set_fact, debug and
include_vars register a "cacheable facts" layer (set_fact's is an empty dict unless cacheable), and for a
host with no facts yet VariableManager.set_host_facts stores that very dict as the host's facts: after a
run_once set_fact or debug, the hosts that had no facts share one facts object. The next fact gathering
then updates it in place, once per host, and every host ends up with the facts of the last node gathered
(ansible_hostname included). That drained node2 in node3's batch of rolling_upgrade.yml and made the
slurm role see node1..3 all as node2 in decommission.yml. Reproduced with two local hosts: a run_once
set_fact, debug or include_vars in a play without gathering, then `setup` in the next play, gives both
hosts the first host's ansible_local.

The rule checked here, over every playbook in its run order (imported playbooks, included task files
and roles expanded): a run_once set_fact, debug, include_vars or facts module before the first fact
gathering of the playbook is an error when a gathering follows it. Roles are safe on their own: each
role's preflight gathers the facts it needs first (checked below), so a role's run_once task never runs
on hosts without facts.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import functools
import os

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
# The actions that give the play's hosts a facts layer (or facts) from one run.
SETS_FACTS = {'set_fact', 'debug', 'include_vars', 'setup', 'gather_facts', 'gpu_facts', 'rdma_facts',
              'stack_facts', 'package_facts', 'service_facts'}
GATHERS = {'setup', 'gather_facts', 'gpu_facts', 'rdma_facts', 'stack_facts', 'package_facts', 'service_facts'}
INCLUDES = {'include_tasks', 'import_tasks'}
ROLE_INCLUDES = {'include_role', 'import_role'}
TRUE = (True, 'true', 'yes', 'True')


def _action(task):
    for key in task:
        short = str(key).rsplit('.', maxsplit=1)[-1]
        if short in SETS_FACTS or short in INCLUDES or short in ROLE_INCLUDES:
            return short, task[key]
    return None, None


def _role_dir(name):
    return os.path.join(REPO, 'roles', str(name).rsplit('.', maxsplit=1)[-1])


@functools.lru_cache(maxsize=None)
def _load(path):
    """The parsed file (cached: the walk reads the roles once per play; nothing here changes what it returns)."""
    with open(path) as handle:
        return yaml.safe_load(handle)


class _Scan:
    """Walks a playbook in run order; records risky run_once tasks seen before the first gathering."""

    def __init__(self):
        self.gathered = False
        self.pending = []   # (where, task name) of risky run_once tasks before any gathering
        self.errors = []    # the pending ones a later gathering made real

    def _gathering(self):
        if self.pending:
            self.errors.extend(self.pending)
            self.pending = []
        self.gathered = True

    def tasks(self, tasks, where, base, run_once=False):
        for task in tasks or []:
            if not isinstance(task, dict):
                continue
            once = task.get('run_once', run_once) in TRUE
            for section in ('block', 'rescue', 'always'):
                if section in task:
                    self.tasks(task[section], where, base, once)
            action, args = _action(task)
            if action in INCLUDES:
                target = args.get('file') if isinstance(args, dict) else args
                path = os.path.normpath(os.path.join(base, str(target)))
                if os.path.isfile(path):
                    self.tasks(_load(path), path, os.path.dirname(path), once)
            elif action in ROLE_INCLUDES:
                self.role(args.get('name') if isinstance(args, dict) else args)
            elif action:
                if once and not self.gathered:
                    self.pending.append((where, task.get('name') or action))
                if action in GATHERS and not once:
                    self._gathering()

    def role(self, name):
        main = os.path.join(_role_dir(name), 'tasks', 'main.yml')
        if os.path.isfile(main):
            # The role's preflight gathers first (test_every_role_gathers_before_its_run_once_tasks).
            self._gathering()
            self.tasks(_load(main), main, os.path.dirname(main))

    def playbook(self, path):
        for play in _load(path) or []:
            if 'import_playbook' in play:
                self.playbook(os.path.normpath(os.path.join(os.path.dirname(path), play['import_playbook'])))
                continue
            where = '{0} [{1}]'.format(os.path.relpath(path, REPO), play.get('name'))
            if play.get('gather_facts', True) in TRUE:
                self._gathering()
            base = os.path.dirname(path)
            self.tasks(play.get('pre_tasks'), where, base)
            for role in play.get('roles') or []:
                self.role(role if isinstance(role, str) else role.get('role') or role.get('name'))
            for section in ('tasks', 'post_tasks', 'handlers'):
                self.tasks(play.get(section), where, base)
        return self


def _playbooks():
    for top in ('playbooks', 'lab', 'molecule'):
        for root, dirs, files in os.walk(os.path.join(REPO, top)):
            dirs[:] = sorted(d for d in dirs if d not in ('tasks', 'templates', 'files', 'group_vars', 'host_vars'))
            for name in sorted(files):
                path = os.path.join(root, name)
                if not name.endswith('.yml') or name in ('molecule.yml', 'requirements.yml'):
                    continue
                document = _load(path)
                if isinstance(document, list) and document and isinstance(document[0], dict) and (
                        'hosts' in document[0] or 'import_playbook' in document[0]):
                    yield path


def _scan_text(text, tmp_path):
    path = tmp_path / 'play.yml'
    path.write_text(text)
    return _Scan().playbook(str(path)).errors


def test_the_scan_finds_a_run_once_set_fact_before_a_gathering(tmp_path):
    text = ("- hosts: all\n  gather_facts: false\n  tasks:\n"
            "    - name: Shared\n      ansible.builtin.set_fact: {x: 1}\n      run_once: true\n"
            "- hosts: all\n  tasks: []\n")
    assert [name for dummy, name in _scan_text(text, tmp_path)] == ['Shared']


def test_the_scan_passes_a_run_once_debug_after_gathering_or_with_no_gathering_after(tmp_path):
    after = ("- hosts: all\n  gather_facts: false\n  tasks:\n"
             "    - ansible.builtin.setup: {gather_subset: [min]}\n"
             "    - name: Say\n      ansible.builtin.debug: {msg: x}\n      run_once: true\n"
             "- hosts: all\n  tasks: []\n")
    last = ("- hosts: all\n  gather_facts: false\n  tasks:\n"
            "    - name: Say\n      ansible.builtin.debug: {msg: x}\n      run_once: true\n")
    assert _scan_text(after, tmp_path) == []
    assert _scan_text(last, tmp_path) == []


def test_no_run_once_fact_task_runs_before_the_first_gathering():
    found = []
    for path in _playbooks():
        found.extend(_Scan().playbook(path).errors)
    assert not found, 'run_once set_fact/debug/include_vars on hosts with no facts yet, and a gathering after it ' \
        '(the hosts would share one facts object; see this test\'s docstring): {0}'.format(found)


def test_every_role_gathers_before_its_run_once_tasks():
    """Each role with a run_once fact task starts with its preflight, whose setup gathers missing facts."""
    missing = []
    for role in sorted(os.listdir(os.path.join(REPO, 'roles'))):
        tasks_dir = os.path.join(REPO, 'roles', role, 'tasks')
        if not os.path.isdir(tasks_dir):
            continue
        risky = False
        for name in os.listdir(tasks_dir):
            scan = _Scan()
            scan.tasks(_load(os.path.join(tasks_dir, name)), name, tasks_dir)
            risky = risky or bool(scan.pending)
        if not risky:
            continue
        first = (_load(os.path.join(tasks_dir, 'main.yml')) or [{}])[0]
        action, args = _action(first)
        target = args.get('file') if isinstance(args, dict) else args
        preflight = os.path.join(tasks_dir, str(target))
        gathers = action in INCLUDES and os.path.isfile(preflight) and any(
            _action(task)[0] in GATHERS for task in _load(preflight) or [] if isinstance(task, dict))
        if not gathers:
            missing.append(role)
    assert not missing, 'roles whose run_once set_fact/debug can run before their facts are gathered: {0}'.format(missing)
