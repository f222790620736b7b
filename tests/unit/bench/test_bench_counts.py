# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The bench's counting callback: the workers' CPU per task, summed per action and per task."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import importlib.util
import json
import os

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))


def _plugin():
    path = os.path.join(REPO, 'bench', 'callback_plugins', 'gpucluster_bench_counts.py')
    spec = importlib.util.spec_from_file_location('gpucluster_bench_counts', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Task:
    action = 'ansible.builtin.assert'

    @staticmethod
    def get_name():
        return 'role : Check\tthe inputs\nof the role'


class _Executor:
    _task = _Task()


def test_each_worker_appends_its_task_and_the_sums_are_per_action_and_task(tmp_path, monkeypatch):
    plugin = _plugin()
    counts = tmp_path / 'rerun.counts'
    monkeypatch.setenv('GPUCLUSTER_BENCH_COUNTS', str(counts))
    measured = plugin._measured(lambda self: {'ok': True})
    assert measured(_Executor()) == {'ok': True}
    assert measured(_Executor()) == {'ok': True}
    lines = (tmp_path / 'rerun.counts.tasks').read_text().splitlines()
    assert len(lines) == 2
    assert all(line.split('\t')[1:] == ['ansible.builtin.assert', 'role : Check the inputs of the role'] for line in lines)
    # A line cut short (a worker killed mid-write) is left out, not counted as a task.
    with open(str(tmp_path / 'rerun.counts.tasks'), 'a') as handle:
        handle.write('0.5000\tansible.builtin.command\tRun it\n0.25\tbroken\n')
    summary = plugin._cpu_summary(str(tmp_path / 'rerun.counts.tasks'))
    actions = dict((row['name'], row['results']) for row in summary['by_action'])
    assert actions == {'ansible.builtin.assert': 2, 'ansible.builtin.command': 1}
    assert summary['by_action'][0]['name'] == 'ansible.builtin.command'
    assert summary['workers_seconds'] >= 0.5


def test_a_run_starts_a_new_tasks_file_and_writes_the_split_into_the_counts(tmp_path, monkeypatch):
    plugin = _plugin()
    counts = tmp_path / 'check.counts'
    (tmp_path / 'check.counts.tasks').write_text('9.0\tansible.builtin.assert\tfrom an earlier run\n')
    monkeypatch.setenv('GPUCLUSTER_BENCH_COUNTS', str(counts))
    callback = plugin.CallbackModule()
    assert not (tmp_path / 'check.counts.tasks').exists()
    callback.v2_playbook_on_stats(None)
    written = json.loads(counts.read_text())
    assert written == {'_cpu': {}}


def test_a_missing_tasks_file_gives_no_split(tmp_path):
    assert _plugin()._cpu_summary(str(tmp_path / 'none.tasks')) == {}


def test_controller_actions_are_not_module_runs():
    plugin = _plugin()

    class Task(object):
        delegate_to = None

        def __init__(self, action):
            self.action = action

    class Result(object):
        def __init__(self, action):
            self._task = Task(action)

    on_node = plugin.CallbackModule._on_node
    assert not on_node(Result('ansible.builtin.assert'))
    assert not on_node(Result('gpucluster.core.checks'))
    assert on_node(Result('gpucluster.core.converged'))
    assert on_node(Result('ansible.builtin.command'))
