# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Bench only (bench/run.sh): counts, per host, the task results and the module runs on the node.

A module run on the node is a result of a task that was not skipped, not delegated to the controller and
whose action runs no module of its own on the controller alone (set_fact, assert, debug, include, meta,
group_by...). At the end of the run it writes {host: {"results": N, "module_runs": N}} as JSON to the file
named by GPUCLUSTER_BENCH_COUNTS.
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

from ansible.plugins.callback import CallbackBase

CONTROLLER_ACTIONS = frozenset((
    'set_fact', 'assert', 'debug', 'fail', 'meta', 'include_tasks', 'import_tasks', 'include_role', 'import_role',
    'include_vars', 'group_by', 'add_host', 'set_stats', 'pause', 'validate_argument_spec', 'include', 'noop'))


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = 'aggregate'
    CALLBACK_NAME = 'gpucluster_bench_counts'
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super(CallbackModule, self).__init__()
        self.counts = {}

    def _entry(self, result):
        return self.counts.setdefault(result._host.get_name(), {'results': 0, 'module_runs': 0})

    @staticmethod
    def _on_node(result):
        return (result._task.action.split('.')[-1] not in CONTROLLER_ACTIONS
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
            with open(path, 'w') as handle:
                json.dump(self.counts, handle, sort_keys=True)
