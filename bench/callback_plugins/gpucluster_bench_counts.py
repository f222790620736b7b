# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Bench only (bench/run.sh): counts, per host, the task results and the module runs on the node.

A module run on the node is a result of a task that was not skipped, not delegated to the controller and
whose action runs no module of its own on the controller alone (set_fact, assert, gpucluster.core.checks,
debug, include, meta, group_by...). At the end of the run it writes {host: {"results": N, "module_runs": N}} as JSON to the file
named by GPUCLUSTER_BENCH_COUNTS.

It also measures where the controller's CPU goes: every worker process (one per task and host) appends the
CPU seconds it spent on its task to GPUCLUSTER_BENCH_COUNTS.tasks (one short line, appended at once), and the
figures are summed per action and per task into the same JSON under "cpu" (seconds, results). The
controller's main process (scheduling, variables, forking) is not in these sums: the bench's total
controller CPU minus them is that part.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
name: gpucluster_bench_counts
type: aggregate
short_description: Count task results and node module runs per host (bench only)
description: Writes the counts as JSON to the file named by the GPUCLUSTER_BENCH_COUNTS environment variable.
requirements: [enable in ANSIBLE_CALLBACKS_ENABLED]
'''

import json
import os
import resource

from ansible.executor import task_executor
from ansible.plugins.callback import CallbackBase

CONTROLLER_ACTIONS = frozenset((
    'set_fact', 'assert', 'debug', 'fail', 'meta', 'include_tasks', 'import_tasks', 'include_role', 'import_role',
    'include_vars', 'group_by', 'add_host', 'set_stats', 'pause', 'validate_argument_spec', 'include', 'noop'))
# The collection's own actions that run on the controller alone (full names).
COLLECTION_CONTROLLER_ACTIONS = frozenset(('gpucluster.core.checks',))


def _cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime + children.ru_utime + children.ru_stime


def _measured(run):
    """TaskExecutor.run, appending the worker's CPU seconds for its task to the tasks file."""
    def wrapper(self):
        start = _cpu_seconds()
        try:
            return run(self)
        finally:
            path = os.environ.get('GPUCLUSTER_BENCH_COUNTS')
            if path:
                task = self._task  # pylint: disable=protected-access
                name = task.get_name().replace('\t', ' ').replace('\n', ' ')[:160]
                line = '%.4f\t%s\t%s\n' % (_cpu_seconds() - start, task.action, name)
                # One write of a short line to a file opened for appending: lines of parallel workers never mix.
                with open(path + '.tasks', 'a') as handle:
                    handle.write(line)
    wrapper.gpucluster_bench = True
    return wrapper


# The workers are forked from this process after the callbacks are loaded, so they all run the wrapper.
if not getattr(task_executor.TaskExecutor.run, 'gpucluster_bench', False):
    task_executor.TaskExecutor.run = _measured(task_executor.TaskExecutor.run)


def _cpu_summary(path, top=12):
    by_action, by_task = {}, {}
    try:
        with open(path) as handle:
            lines = handle.read().splitlines()
    except (IOError, OSError):
        return {}
    for line in lines:
        fields = line.split('\t', 2)
        if len(fields) != 3:
            continue
        seconds = float(fields[0])
        for table, key in ((by_action, fields[1]), (by_task, fields[2])):
            entry = table.setdefault(key, [0.0, 0])
            entry[0] += seconds
            entry[1] += 1

    def rows(table):
        ordered = sorted(table.items(), key=lambda item: -item[1][0])[:top]
        return [{'name': name, 'seconds': round(entry[0], 2), 'results': entry[1]} for name, entry in ordered]
    return {'workers_seconds': round(sum(entry[0] for entry in by_action.values()), 2),
            'by_action': rows(by_action), 'by_task': rows(by_task)}


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = 'aggregate'
    CALLBACK_NAME = 'gpucluster_bench_counts'
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super(CallbackModule, self).__init__()
        self.counts = {}
        path = os.environ.get('GPUCLUSTER_BENCH_COUNTS')
        # The workers append: a file left by an earlier run with the same name would be counted again.
        if path and os.path.exists(path + '.tasks'):
            os.remove(path + '.tasks')

    def _entry(self, result):
        return self.counts.setdefault(result._host.get_name(), {'results': 0, 'module_runs': 0})

    @staticmethod
    def _on_node(result):
        return (result._task.action.split('.')[-1] not in CONTROLLER_ACTIONS
                and result._task.action not in COLLECTION_CONTROLLER_ACTIONS
                and result._task.delegate_to not in ('localhost', '127.0.0.1'))

    def _count(self, result, ran):
        entry = self._entry(result)
        entry['results'] += 1
        # A loop's module runs are counted per item (below).
        if ran and self._on_node(result) and 'results' not in result._result:
            entry['module_runs'] += 1

    def v2_runner_item_on_ok(self, result):
        if self._on_node(result):
            self._entry(result)['module_runs'] += 1

    def v2_runner_item_on_failed(self, result):
        self.v2_runner_item_on_ok(result)

    def v2_runner_on_ok(self, result):
        self._count(result, True)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._count(result, True)

    def v2_runner_on_skipped(self, result):
        self._count(result, False)

    def v2_runner_on_unreachable(self, result):
        self._count(result, False)

    def v2_playbook_on_stats(self, stats):
        path = os.environ.get('GPUCLUSTER_BENCH_COUNTS')
        if path:
            counts = dict(self.counts)
            counts['_cpu'] = _cpu_summary(path + '.tasks')
            with open(path, 'w') as handle:
                json.dump(counts, handle, sort_keys=True)
