# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Docker Swarm steps of the day-2 playbooks (gpucluster_scheduler: swarm): rolling_upgrade.yml,
decommission.yml and health_check.yml.

Three layers: the playbooks' YAML (every `docker node` step is delegated to a manager, goes through the scheduler
interface with scheduler='swarm' and is guarded by the scheduler condition); the key expressions rendered with
Ansible's templar and the collection's real filters against `docker node inspect` and `docker info` output (the
Swarm nodes of tests/unit/plugins/module_utils/test_scheduler.py, loaded from that file, and the files of
tests/unit/fixtures/swarm); and the playbooks run with
ansible-playbook over local test hosts with a stateful `docker` stand-in that records on which host each command
ran (each host's Python interpreter is a wrapper that names it). Nothing on the machine running the tests changes.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest
import yaml

from ansible_collections.gpucluster.core.plugins.module_utils.scheduler import make_reason

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
PLAYBOOKS = os.path.join(REPO, 'playbooks')
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), 'ansible-playbook')
MANAGER_DELEGATE = '{{ __ru_swarm_manager or inventory_hostname }}'


def load_scheduler_tests():
    """tests/unit/plugins/module_utils/test_scheduler.py, by path: its `docker node inspect` nodes (``_swarm``)."""
    path = os.path.join(REPO, 'tests', 'unit', 'plugins', 'module_utils', 'test_scheduler.py')
    spec = importlib.util.spec_from_file_location('gpucluster_test_scheduler_swarm_nodes', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SCHEDULER_TESTS = load_scheduler_tests()
swarm_inspect = getattr(SCHEDULER_TESTS, '_swarm')
NODE_ID = swarm_inspect()[0]['ID']
HEALTH_REASON = SCHEDULER_TESTS.OURS


def read_yaml(*parts):
    with open(os.path.join(REPO, *parts)) as handle:
        return yaml.safe_load(handle)


def walk(tasks, when=()):
    """(task, the when conditions of the blocks around it and its own) for every task, blocks entered."""
    for task in tasks or []:
        own = task.get('when', [])
        conditions = tuple(when) + tuple(own if isinstance(own, list) else [own])
        yield task, conditions
        for section in ('block', 'rescue', 'always'):
            if section in task:
                yield from walk(task[section], conditions)


def by_name(tasks, name):
    found = [task for task, dummy in walk(tasks) if task.get('name') == name]
    assert len(found) == 1, (name, len(found))
    return found[0]


def argv_text(task):
    command = task.get('ansible.builtin.command') or {}
    return json.dumps(command.get('argv', ''))


def flat(text):
    return ' '.join(text.split())


# ---------------------------------------------------------------- the YAML

def node_tasks():
    return read_yaml('playbooks', 'tasks', 'rolling_upgrade_node.yml')


def test_rolling_upgrade_docker_node_steps_run_on_a_manager_under_the_swarm_condition():
    tasks = node_tasks()
    pattern = re.compile(r'docker.*"node"|swarm_(hold|release)|failed_hold')
    docker_node = [(task, when) for task, when in walk(tasks)
                   if 'ansible.builtin.command' in task
                   and pattern.search(argv_text(task) + json.dumps(task.get('vars', {})))
                   and 'swarm' in json.dumps(task)]
    names = [task['name'] for task, dummy in docker_node]
    assert names == ['Read the node in Swarm before the upgrade', 'Hold the node with the reason (availability drain, our label)',
                     'Wait for the node\'s Swarm tasks to leave', 'Wait for the managers to report the node ready',
                     'Set the node active again', 'Read the node in Swarm after the failure',
                     'Hold the Swarm node with where the upgrade stopped'], names
    for task, when in docker_node:
        assert task['delegate_to'] in (MANAGER_DELEGATE, "{{ __ru_swarm_manager | default('', true) or inventory_hostname }}"), task
        assert any('__ru_swarm_node' in str(condition) for condition in when), task['name']
    # Every decision goes through the scheduler interface for Swarm, with the docker command.
    text = json.dumps(tasks)
    decisions = re.findall(r"scheduler_decide\([^)]*\)", text.replace('\\n', ' '))
    swarm = [d for d in decisions if 'swarm' in d]
    assert len(swarm) == 3 and all("scheduler='swarm', command='docker'" in ' '.join(d.split()) for d in swarm), swarm
    wants = [d.split(',')[0] for d in swarm]
    assert wants == ["scheduler_decide('hold'", "scheduler_decide('release'", "scheduler_decide('hold'"]
    assert by_name(tasks, 'Set the node active again')['when'] == "__ru_swarm_release.action == 'resume'"
    # The node's own steps (docker info, its containers) run on the node, not on the manager.
    for name in ("Read this node's Swarm identity on the node itself", "Wait for the node's Swarm task containers to stop"):
        assert 'delegate_to' not in by_name(tasks, name)


def test_rolling_upgrade_swarm_membership_is_the_scheduler_and_the_node_group():
    facts = by_name(node_tasks(), 'Work out how Swarm knows this node')
    member = ' '.join(facts['vars']['__ru_swarm_member'].split())
    assert "gpucluster_scheduler | default('slurm') == 'swarm'" in member
    assert "inventory_hostname in groups[swarm_node_group | default('gpu_nodes')]" in member


def test_rolling_upgrade_imports_the_swarm_role_after_the_container_runtime():
    block = by_name(node_tasks(), 'Upgrade, gate and resume the node')['block']
    names = [task.get('name') for task in block]
    runtime = names.index('Container runtime and NVIDIA Container Toolkit at their pins')
    swarm = names.index('Swarm membership and the GPUs dockerd advertises')
    assert swarm == runtime + 1
    task = block[swarm]
    assert task['ansible.builtin.include_role'] == {'name': 'gpucluster.core.swarm'}
    assert "gpucluster_scheduler | default('slurm') == 'swarm'" in task['when']
    assert "'swarm' in __ru_roles" in task['when']
    # The drain and the wait come before the parts; the give-back after the gate.
    assert names.index('Hold and drain the Swarm node') < runtime
    assert names.index('Give the Swarm node back') > names.index('Audit this node against the pins it was given')


def test_swarm_is_a_part_of_the_rolling_upgrade():
    plays = read_yaml('playbooks', 'rolling_upgrade.yml')
    settings = by_name(plays[0]['tasks'], 'Read the parts to apply')
    assert 'swarm' in settings['ansible.builtin.set_fact']['__ru_known_roles']
    assert 'swarm' in settings['vars']['__ru_all']
    with open(os.path.join(PLAYBOOKS, 'rolling_upgrade.yml')) as handle:
        header = handle.read().split('\n- name:')[0]
    assert 'container_runtime, slurm, swarm' in header and 'swarm (gpucluster_scheduler swarm)' in header


def test_decommission_swarm_play_runs_on_the_manager_group_and_the_leave_on_the_node():
    plays = read_yaml('playbooks', 'decommission.yml')
    play = [p for p in plays if p['name'].startswith('Drain the retired nodes in Swarm')][0]
    assert play['hosts'] == 'gpucluster_decommission_swarm_manager'
    group_by = by_name(plays[0]['tasks'], 'Put the Swarm manager that acts into its group')
    assert group_by['ansible.builtin.group_by']['key'] == play['hosts']
    assert "gpucluster_scheduler | default('slurm') == 'swarm'" in group_by['when']
    tasks = {task['name']: task for task in play['tasks']}
    hold = tasks['Hold the retired nodes with the reason (availability drain, our label)']
    assert "scheduler='swarm', command='docker'" in ' '.join(hold['vars']['__decom_hold'].split())
    assert "'decommission'" in hold['vars']['__decom_hold']
    assert tasks['Take each retired node out of the swarm (on the node)']['delegate_to'] == '{{ item.host }}'
    assert tasks['Remove the retired nodes from the swarm (on the manager)']['ansible.builtin.command']['argv'] == [
        'docker', 'node', 'rm', '{{ item.id }}']
    order = [task['name'] for task in play['tasks']]
    assert order.index('Wait for the retired nodes\' Swarm tasks to leave') < order.index(
        'Take each retired node out of the swarm (on the node)') < order.index(
        'Wait for the managers to see the retired nodes down') < order.index('Remove the retired nodes from the swarm (on the manager)')
    learn = [p for p in plays if p['name'] == "Learn the retired nodes' names in Slurm and Swarm"][0]
    info = by_name(learn['tasks'], "Read the node's Swarm identity on the node itself")
    assert 'delegate_to' not in info and "gpucluster_scheduler | default('slurm') == 'swarm'" in info['when']


def test_health_check_acts_before_the_critical_hosts_fail_and_only_on_swarm():
    play = read_yaml('playbooks', 'health_check.yml')[0]
    names = [task['name'] for task in play['tasks']]
    assert names.index('Act on the verdict in Swarm') < names.index('Fail the hosts with critical findings')
    act = play['tasks'][names.index('Act on the verdict in Swarm')]
    assert '__health_check_act | bool' in act['when']
    assert "gpucluster_scheduler | default('slurm') == 'swarm'" in act['when']
    assert '__health_check_run is not unreachable' in act['when']
    decide = by_name(act['block'], 'Decide what the verdict does to the node')
    assert "scheduler='swarm', command='docker'" in ' '.join(decide['ansible.builtin.set_fact']['__health_check_decision'].split())
    for name in ('Read the node in Swarm', 'Hold the node or give it back'):
        assert by_name(act['block'], name)['delegate_to'] == '{{ __health_check_manager }}'
    with open(os.path.join(PLAYBOOKS, 'health_check.yml')) as handle:
        assert '#   health_check_act' in handle.read()


# ---------------------------------------------------------------- the expressions, with the real filters

# The collection's filters are found through Ansible's collection loader; installed in this process it would take
# over the ansible_collections package the other tests imported (tests/unit/robustness/test_config_robustness_round2.py),
# so the expressions that call them are rendered by one child process per module (tests/unit/roles/k8s_render.py
# --serve), one JSON line per request.
@pytest.fixture(scope='module')
def render(served_render):
    """``render(variables, value)``: ``value`` templated as a play would (tests/unit/conftest.py served_render)."""
    return served_render


def ru_hold_vars(inspect, text='upgrade'):
    return {'__ru_swarm_before': {'rc': 0, 'stdout': json.dumps(inspect)}, '__ru_swarm_id': NODE_ID,
            '__ru_drain_text': text}


@pytest.mark.parametrize('availability, labels, action, left_out', [
    ('active', None, 'drain', False),
    ('drain', None, 'none', True),                                           # an operator's drain
    ('pause', None, 'none', True),                                           # an operator's pause
    ('drain', {'gpucluster.health': HEALTH_REASON}, 'none', True),           # health_check.yml's hold
    ('drain', {'gpucluster.health': HEALTH_REASON + ' - RMA 12'}, 'none', True),  # taken over by an operator
    ('drain', {'gpucluster.health': make_reason('upgrade', 'upgrade')}, 'none', False),   # ours already
    ('drain', {'gpucluster.health': make_reason('upgrade', 'failed at drain')}, 'drain', False),
])
def test_rolling_upgrade_hold_decision(render, availability, labels, action, left_out):
    tasks = node_tasks()
    decide = by_name(tasks, 'Decide whether the Swarm node is ours to hold')['ansible.builtin.set_fact']
    variables = ru_hold_vars(swarm_inspect(availability, labels))
    hold = render(variables, decide['__ru_swarm_hold'])
    state = render(variables, decide['__ru_swarm_state'])
    assert hold['action'] == action, hold
    if action == 'drain':
        assert hold['argv'] == ['docker', 'node', 'update', '--availability', 'drain', '--label-add',
                                'gpucluster.health=' + make_reason('upgrade', 'upgrade'), NODE_ID]
    condition = by_name(tasks, 'Leave a Swarm node held by an operator or by another part of gpucluster alone')['when']
    assert render(dict(variables, __ru_swarm_state=state, __ru_swarm_hold=hold), '{{ %s }}' % condition) is left_out


@pytest.mark.parametrize('labels, resumed', [
    ({'gpucluster.health': make_reason('upgrade', 'upgrade')}, True),
    ({'gpucluster.health': HEALTH_REASON}, False),
    (None, False),
])
def test_rolling_upgrade_gives_back_only_its_own_hold(render, labels, resumed):
    task = by_name(node_tasks(), 'Decide whether the Swarm node is ours to give back')
    variables = {'__ru_swarm_after': {'rc': 0, 'stdout': json.dumps(swarm_inspect('drain', labels))},
                 '__ru_swarm_id': NODE_ID}
    release = render(variables, task['ansible.builtin.set_fact']['__ru_swarm_release'])
    assert (release['action'] == 'resume') is resumed
    if resumed:
        assert release['argv'] == ['docker', 'node', 'update', '--availability', 'active', '--label-rm',
                                   'gpucluster.health', NODE_ID]


@pytest.mark.parametrize('managers, batch, host, chosen', [
    (['node1'], ['node1'], 'node1', 'node1'),                 # a one-manager swarm: the node itself
    (['node1'], ['node2'], 'node2', 'node1'),
    (['node1', 'node2', 'node3'], ['node1'], 'node1', 'node2'),
    (['node1', 'node2', 'node3'], ['node1', 'node4'], 'node4', 'node2'),   # not node1, whose dockerd restarts now
    (['node1', 'node2', 'node3'], ['node2', 'node3'], 'node2', 'node1'),
])
def test_rolling_upgrade_acts_from_a_manager_outside_the_batch(render, managers, batch, host, chosen):
    task = by_name(node_tasks(), 'Work out how Swarm knows this node')
    nodes = ['node1', 'node2', 'node3', 'node4']
    variables = dict(task['vars'], gpucluster_scheduler='swarm', inventory_hostname=host, ansible_play_batch=batch,
                     groups={'gpu_nodes': nodes, 'swarm_managers': managers})
    assert render(variables, task['ansible.builtin.set_fact']['__ru_swarm_manager']) == chosen
    assert render(dict(variables, gpucluster_scheduler='slurm'), task['ansible.builtin.set_fact']['__ru_swarm_manager']) == ''


@pytest.mark.parametrize('managers, batch, passes', [
    (['node1'], ['node1'], True),
    (['node1', 'node2', 'node3'], ['node1', 'node4'], True),
    (['node1', 'node2', 'node3'], ['node1', 'node2'], False),
    (['node1', 'node2', 'node3', 'node4', 'node5'], ['node1', 'node2'], True),
    (['node1', 'node2', 'node3', 'node4', 'node5'], ['node1', 'node2', 'node3'], False),
])
def test_rolling_upgrade_batch_keeps_the_manager_quorum(ansible_render, managers, batch, passes):
    task = by_name(node_tasks(), 'Check this batch leaves the Swarm managers their quorum')
    variables = dict(task['vars'], __ru_swarm_node=True, __ru_swarm_managers=managers, ansible_play_batch=batch)
    assert ansible_render(variables, '{{ %s }}' % task['ansible.builtin.assert']['that']) is passes


SWARM_FIXTURES = os.path.join(REPO, 'tests', 'unit', 'fixtures', 'swarm')


def swarm_fixture(name):
    """The text of one of tests/unit/fixtures/swarm (docker info / docker node inspect, see its INDEX.md)."""
    with open(os.path.join(SWARM_FIXTURES, name)) as handle:
        return handle.read()


@pytest.mark.parametrize('name, rc, state, accepted', [
    ('info_worker_26.json', 0, 'active', True),
    ('info_manager_leader_26.json', 0, 'active', True),
    ('info_inactive_20.10.json', 0, 'inactive', False),
    ('info_locked_26.json', 0, 'locked', False),
    ('info_error_20.10.json', 0, 'error', False),
    ('info_daemon_down_28.json', 1, 'unknown', False),       # the CLI exits 1 when its daemon does not answer
])
def test_the_node_id_is_read_from_docker_info_on_the_node(render, name, rc, state, accepted):
    tasks = node_tasks()
    text = swarm_fixture(name)
    info = {'rc': rc, 'stdout': text, 'stderr': 'Cannot connect to the Docker daemon' if rc else ''}
    got = render({'__ru_swarm_info': info}, by_name(tasks, "Take the node's Swarm NodeID")['ansible.builtin.set_fact']['__ru_swarm_self'])
    assert got['state'] == state
    assert got['node_id'] == (json.loads(text)['Swarm']['NodeID'] if rc == 0 else '')
    check = by_name(tasks, 'Check the node is in the swarm')['ansible.builtin.assert']
    variables = {'__ru_swarm_self': got, 'inventory_hostname': 'gpu-node-04'}
    assert render(variables, '{{ %s }}' % check['that']) is accepted
    if not accepted:
        message = flat(render(variables, check['fail_msg']))
        assert 'reports the swarm state %s' % state in message and 'Nothing was drained.' in message, message
    # health_check.yml and decommission.yml read it the same way.
    play = read_yaml('playbooks', 'health_check.yml')[0]
    act = by_name(play['tasks'], 'Act on the verdict in Swarm')
    health = render({'__health_check_swarm_info': info},
                    by_name(act['block'], "Take the node's Swarm NodeID")['ansible.builtin.set_fact']['__health_check_swarm'])
    assert (health['state'], health['node_id']) == (got['state'], got['node_id'])
    argv = by_name(tasks, "Read this node's Swarm identity on the node itself")['ansible.builtin.command']['argv']
    assert render({}, argv) == ['docker', 'info', '--format', '{{json .}}']


def test_a_manager_drained_by_an_operator_is_left_out_of_the_upgrade(render):
    text = swarm_fixture('node_inspect_manager_drain_26.json')
    node_id = json.loads(text)['ID']
    tasks = node_tasks()
    decide = by_name(tasks, 'Decide whether the Swarm node is ours to hold')['ansible.builtin.set_fact']
    variables = {'__ru_swarm_before': {'rc': 0, 'stdout': text}, '__ru_swarm_id': node_id, '__ru_drain_text': 'upgrade'}
    state = render(variables, decide['__ru_swarm_state'])
    hold = render(variables, decide['__ru_swarm_hold'])
    assert (state['held'], state['ours'], hold['action']) == (True, False, 'none')
    condition = by_name(tasks, 'Leave a Swarm node held by an operator or by another part of gpucluster alone')['when']
    assert render(dict(variables, __ru_swarm_state=state, __ru_swarm_hold=hold), '{{ %s }}' % condition) is True


ISSUES = [{'gpu': None, 'check': 'gpu_count', 'severity': 'critical', 'message': '1 GPU(s) visible to the driver, 2 expected'},
          {'gpu': 3, 'check': 'xid', 'severity': 'critical', 'message': 'GPU3 Xid 79 fell off the bus'},
          {'gpu': 0, 'check': 'temperature', 'severity': 'warning', 'message': 'GPU0 at 86 C'}]


@pytest.mark.parametrize('status, availability, labels, action', [
    ('critical', 'active', None, 'drain'),
    ('critical', 'drain', None, 'none'),                                     # an operator's drain stays theirs
    ('critical', 'pause', None, 'none'),
    ('ok', 'drain', {'gpucluster.health': HEALTH_REASON}, 'resume'),
    ('ok', 'drain', {'gpucluster.health': make_reason('upgrade', 'upgrade')}, 'none'),   # the upgrade gives it back
    ('ok', 'drain', None, 'none'),
    ('ok', 'pause', {'gpucluster.health': HEALTH_REASON}, 'none'),
    ('warning', 'drain', {'gpucluster.health': HEALTH_REASON}, 'none'),
    ('unknown', 'active', None, 'none'),
])
def test_health_check_verdict_through_the_scheduler_interface(render, status, availability, labels, action):
    play = read_yaml('playbooks', 'health_check.yml')[0]
    act = by_name(play['tasks'], 'Act on the verdict in Swarm')
    decide = by_name(act['block'], 'Decide what the verdict does to the node')['ansible.builtin.set_fact']
    variables = dict(act['vars'], ansible_facts={'gpu': {'health': {'status': status, 'issues': ISSUES}}},
                     __health_check_swarm={'node_id': NODE_ID},
                     __health_check_swarm_node={'rc': 0, 'stdout': json.dumps(swarm_inspect(availability, labels))})
    decision = render(variables, decide['__health_check_decision'])
    assert decision['action'] == action, decision
    if action == 'drain':
        reason = make_reason('health', '1 GPU(s) visible to the driver, 2 expected; GPU3 Xid 79 fell off the bus')
        assert decision['argv'] == ['docker', 'node', 'update', '--availability', 'drain', '--label-add',
                                    'gpucluster.health=' + reason, NODE_ID]


@pytest.mark.parametrize('scheduler, act, accepted, acts', [
    ('swarm', None, True, True),
    ('slurm', None, True, False),
    ('swarm', 'false', True, False),
    ('slurm', True, False, True),
    ('swarm', 'maybe', False, None),
])
def test_health_check_act_defaults_to_swarm_only(ansible_render, scheduler, act, accepted, acts):
    play = read_yaml('playbooks', 'health_check.yml')[0]
    check = by_name(play['tasks'], 'Check health_check_act')['ansible.builtin.assert']
    variables = dict(play['vars'], gpucluster_scheduler=scheduler)
    if act is not None:
        variables['health_check_act'] = act
    results = [ansible_render(variables, '{{ %s }}' % condition) for condition in check['that']]
    assert all(results) is accepted
    if acts is not None:
        assert ansible_render(variables, '{{ __health_check_act | bool }}') is acts


@pytest.mark.parametrize('retired, managers, says', [
    (['node4'], None, None),
    (['node1'], None, 'node1 is a Swarm manager (no group swarm_managers is set: the first nodes of gpu_nodes: node1, node2, node3)'),
    (['node2', 'node3', 'node4'], ['node3'], 'node3 is a Swarm manager (the group swarm_managers: node3)'),
    (['node2', 'node3'], None, 'node2, node3 are Swarm managers'),
])
def test_decommission_refuses_a_manager(render, retired, managers, says):
    plays = read_yaml('playbooks', 'decommission.yml')
    check = by_name(plays[0]['tasks'], 'Check no Swarm manager is to be retired')
    groups = {'gpu_nodes': ['node1', 'node2', 'node3', 'node4', 'node5']}
    if managers:
        groups['swarm_managers'] = managers
    variables = dict(check['vars'], __decom_nodes=retired, decommission_nodes=','.join(retired), groups=groups)
    assert render(variables, '{{ %s }}' % check['ansible.builtin.assert']['that']) is (says is None)
    if says:
        message = flat(render(variables, check['ansible.builtin.assert']['fail_msg']))
        assert says in message and 'demote it first: docker node demote, and take it out of swarm_managers' in message, message


# ---------------------------------------------------------------- the playbooks, run

# A stateful `docker`: each call is recorded as "<host> <args>", the host being the one the command ran on (the
# interpreter wrapper of each test host exports STANDIN_HOST). `docker node` answers on managers only, as dockerd does.
DOCKER = r'''
import fcntl, json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
host = os.environ.get('STANDIN_HOST', '?')
args = sys.argv[1:]
with open(os.path.join(here, 'docker.lock'), 'w') as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    with open(os.path.join(here, 'calls'), 'a') as calls:
        calls.write('%s %s\n' % (host, ' '.join(args)))
    with open(os.path.join(here, 'swarm.json')) as handle:
        state = json.load(handle)
    me = state['hosts'].get(host, {'id': '', 'local': 'inactive', 'manager': False})
    nodes = state['nodes']
    out, err, rc = '', '', 0

    def node(ident):
        return next((n for n in nodes if n['ID'] == ident), None)

    def running(ident, look):
        item = node(ident)
        tasks = state['tasks'].get(ident, [])
        if item is None or not tasks:
            return []
        if item['Spec']['Availability'] != 'drain':
            return tasks
        left = state['linger'].get(ident, 0)
        if look and left:
            state['linger'][ident] = left - 1
        return tasks if left else []

    def ids(words):
        found, skip = [], False
        for word in words:
            if skip:
                skip = False
            elif word in ('--filter', '--format', '--availability', '--label-add', '--label-rm'):
                skip = True
            elif not word.startswith('-'):
                found.append(word)
        return found

    if args[:1] == ['info']:
        out = json.dumps({'ID': 'engine-' + host, 'Swarm': {
            'NodeID': me['id'] if me['local'] == 'active' else '', 'LocalNodeState': me['local'],
            'ControlAvailable': me['manager'] and me['local'] == 'active', 'Error': '',
            'Cluster': {'ID': 'cluster1'} if me['manager'] else None}})
    elif args[:1] == ['node'] and not (me['manager'] and me['local'] == 'active'):
        err, rc = ('Error response from daemon: This node is not a swarm manager. Worker nodes can\'t be used to view '
                   'or modify cluster state.'), 1
    elif args[:2] == ['node', 'inspect']:
        found = [node(i) for i in ids(args[2:])]
        out = json.dumps([n for n in found if n])
        if not all(found):
            err, rc = 'Error: No such node: %s' % [i for i in ids(args[2:]) if not node(i)][0], 1
    elif args[:2] == ['node', 'update']:
        item = node(ids(args[2:])[0])
        for option, value in zip(args, args[1:]):
            labels = item['Spec'].setdefault('Labels', {})
            if option == '--availability':
                item['Spec']['Availability'] = value
            elif option == '--label-add':
                labels[value.split('=', 1)[0]] = value.split('=', 1)[1]
            elif option == '--label-rm':
                labels.pop(value, None)
        out = item['ID']
    elif args[:2] == ['node', 'ps']:
        out = '\n'.join(t for i in ids(args[2:]) for t in running(i, True))
    elif args[:1] == ['ps']:
        out = '\n'.join('c-' + t for t in running(me['id'], False))
    elif args[:2] == ['swarm', 'leave']:
        if me['manager']:
            err, rc = 'Error response from daemon: You are attempting to leave the swarm on a node that is participating as a manager.', 1
        else:
            me['local'] = 'inactive'
            node(me['id'])['Status']['State'] = 'down'
            out = 'Node left the swarm.'
    elif args[:2] == ['node', 'rm']:
        item = node(args[2])
        if item['Status']['State'] != 'down':
            err, rc = 'Error response from daemon: rpc error: node %s is not down and can\'t be removed' % args[2], 1
        else:
            nodes.remove(item)
            out = args[2]
    else:
        err, rc = 'docker stand-in: not known: %s' % ' '.join(args), 1
    with open(os.path.join(here, 'swarm.json'), 'w') as handle:
        json.dump(state, handle)
if out:
    print(out)
if err:
    sys.stderr.write(err + '\n')
sys.exit(rc)
'''

HOSTS = ('node1', 'node2', 'node3')
IDS = {'node1': 'm1anager0000000000000000a', 'node2': 'w2orker00000000000000000b', 'node3': 'w3orker00000000000000000c'}


def swarm_node(host, availability='active', labels=None, role='worker'):
    item = swarm_inspect(availability, labels, hostname=host, role=role)[0]
    item['ID'] = IDS[host]
    return item


@pytest.fixture
def swarm(tmp_path):
    """Three local test hosts in gpu_nodes; node1 is the manager (the group swarm_managers)."""
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    docker = bin_dir / 'docker'
    docker.write_text(u'#!%s\n%s' % (sys.executable, DOCKER))
    docker.chmod(0o755)
    health = tmp_path / 'gpucluster-health'
    health.write_text(u'#!/bin/bash\nif [ -e %s ]; then echo "gpucluster-health critical: 1 GPU(s) visible to the driver, 2 expected";'
                      u' exit 2; fi\necho "gpucluster-health ok"\n' % (tmp_path / 'sick'))
    health.chmod(0o755)
    kernel_log = tmp_path / 'kern.log'
    kernel_log.write_text(u'')
    hosts = []
    for host in HOSTS:
        wrapper = tmp_path / ('python-' + host)
        wrapper.write_text(u'#!/bin/sh\nSTANDIN_HOST=%s exec %s "$@"\n' % (host, sys.executable))
        wrapper.chmod(0o755)
        hosts.append(u'            %s: {ansible_connection: local, ansible_python_interpreter: "%s"}\n' % (host, wrapper))
    state = {'hosts': {h: {'id': IDS[h], 'local': 'active', 'manager': h == 'node1'} for h in HOSTS},
             'nodes': [swarm_node(h, role='manager' if h == 'node1' else 'worker') for h in HOSTS],
             'tasks': {IDS['node2']: ['task2a'], IDS['node3']: ['task3a', 'task3b']}, 'linger': {}}

    def save(value):
        (bin_dir / 'swarm.json').write_text(json.dumps(value))
    save(state)
    inventory = tmp_path / 'hosts.yml'

    def write_inventory(managers):
        inventory.write_text(
            u'all:\n'
            u'  vars: {gpucluster_scheduler: swarm, gpucluster_monitoring: false, gpucluster_gpu_stack: false,\n'
            u'         slurm_health_check_program: "%s", health_check_nvidia_smi_path: /nonexistent/nvidia-smi,\n'
            u'         health_check_kernel_log_path: "%s"}\n'
            u'  children:\n'
            u'    gpucluster:\n'
            u'      children:\n'
            u'        gpu_nodes:\n'
            u'          hosts:\n%s'
            u'    swarm_managers:\n'
            u'      hosts:\n%s' % (health, kernel_log, ''.join(hosts), ''.join(u'        %s: {}\n' % m for m in managers)))
    write_inventory(['node1'])
    env = dict(os.environ, PATH='%s:%s' % (bin_dir, os.environ.get('PATH', '')),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, 'collections'),
               ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_NOCOLOR='1', ANSIBLE_BECOME='false')

    def run(playbook, *args, **extra):
        argv = [ANSIBLE_PLAYBOOK, '-i', str(inventory), os.path.join(PLAYBOOKS, playbook)] + list(args)
        if extra:
            argv += ['-e', json.dumps(extra)]
        proc = subprocess.run(argv, env=env, cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True, timeout=600, check=False)
        return proc.returncode, proc.stdout

    def calls():
        path = bin_dir / 'calls'
        return path.read_text().splitlines() if path.exists() else []

    def current():
        return json.loads((bin_dir / 'swarm.json').read_text())

    def set_node(host, availability, labels=None):
        value = current()
        value['nodes'] = [swarm_node(host, availability, labels, n['Spec']['Role']) if n['ID'] == IDS[host] else n
                          for n in value['nodes']]
        save(value)

    def node_of(host):
        return next((n for n in current()['nodes'] if n['ID'] == IDS[host]), None)

    run.calls = calls
    run.current = current
    run.save = save
    run.set_node = set_node
    run.node = node_of
    run.tmp = tmp_path
    run.inventory = write_inventory
    return run


needs_ansible = pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason='ansible-playbook not beside this python')


def changes(calls):
    """(host the command ran on, availability, label value or '-' when removed, node id) of each docker node update."""
    out = []
    for line in calls:
        match = re.match(r'^(\S+) node update --availability (\S+) (?:--label-add gpucluster.health=(.*)|--label-rm gpucluster.health) (\S+)$',
                         line)
        if match:
            out.append((match.group(1), match.group(2), match.group(3) or '-', match.group(4)))
    return out


@needs_ansible
def test_health_check_drains_critical_and_gives_back_its_own_hold_through_the_manager(swarm):
    swarm.set_node('node3', 'drain', {'gpucluster.health': make_reason('health', 'GPU3 Xid 79 fell off the bus')})
    # node2 expects two GPUs: this machine shows none, which is critical.
    rc, out = swarm('health_check.yml', '--limit', 'node1,node3')
    assert rc == 0, out
    assert 'node3: Swarm node %s set active again, our health hold lifted' % IDS['node3'] in flat(out), out
    assert 'node1: Swarm node %s left as it is: health ok' % IDS['node1'] in flat(out), out
    rc, out = swarm('health_check.yml', '-e', 'health_check_expected_gpu_count=2', '--limit', 'node2')
    assert rc != 0 and 'node2 is critical: 0 GPU(s) visible to the driver, 2 expected' in flat(out), out
    reason = make_reason('health', '0 GPU(s) visible to the driver, 2 expected')
    assert changes(swarm.calls()) == [('node1', 'active', '-', IDS['node3']), ('node1', 'drain', reason, IDS['node2'])]
    # The NodeID was read on each node itself; every docker node command ran on the manager.
    assert sorted(c.split()[0] for c in swarm.calls() if c.split()[1] == 'info') == ['node1', 'node2', 'node3']
    assert {c.split()[0] for c in swarm.calls() if c.split()[1] == 'node'} == {'node1'}
    assert swarm.node('node2')['Spec']['Labels']['gpucluster.health'] == reason
    assert 'gpucluster.health' not in swarm.node('node3')['Spec']['Labels']
    assert 'node2: Swarm node %s drained with gpucluster.health=%s' % (IDS['node2'], reason) in flat(out), out


@needs_ansible
@pytest.mark.parametrize('availability, labels', [
    ('drain', None),                                                  # an operator's drain
    ('pause', None),                                                  # an operator's pause
    ('drain', {'gpucluster.health': make_reason('upgrade', 'upgrade')}),   # the rolling upgrade's
    ('drain', {'gpucluster.health': make_reason('health', 'x') + ' - RMA 12'}),   # taken over by an operator
])
def test_health_check_ok_never_touches_a_hold_that_is_not_its_own(swarm, availability, labels):
    swarm.set_node('node3', availability, labels)
    rc, out = swarm('health_check.yml', '--limit', 'node3')
    assert rc == 0, out
    assert changes(swarm.calls()) == []
    assert 'node3: Swarm node %s left as it is' % IDS['node3'] in flat(out), out


@needs_ansible
def test_health_check_act_false_and_check_mode_change_nothing(swarm):
    rc, out = swarm('health_check.yml', '--limit', 'node2', health_check_expected_gpu_count=2, health_check_act=False)
    assert rc != 0 and swarm.calls() == [], out
    rc, out = swarm('health_check.yml', '--check', '--limit', 'node2', health_check_expected_gpu_count=2)
    assert rc != 0 and changes(swarm.calls()) == [], out
    assert '(check mode: not done)' in out
    assert swarm.node('node2')['Spec']['Availability'] == 'active'


@needs_ansible
def test_health_check_act_true_on_slurm_is_refused(swarm):
    rc, out = swarm('health_check.yml', '--limit', 'node2', gpucluster_scheduler='slurm', health_check_act=True)
    assert rc != 0 and 'health_check_act=True is not accepted' in flat(out) and 'Nothing was checked.' in flat(out), out
    assert swarm.calls() == []


@needs_ansible
def test_decommission_drains_waits_leaves_and_removes_the_node(swarm):
    value = swarm.current()
    value['linger'] = {IDS['node3']: 2}          # its tasks take two more looks to leave
    swarm.save(value)
    rc, out = swarm('decommission.yml', decommission_nodes='node3', decommission_poll_interval=1, decommission_job_timeout=30)
    assert rc == 0, out
    calls = [c for c in swarm.calls() if c.split()[1] != 'info']
    reason = make_reason('decommission', 'retired')
    node3 = IDS['node3']
    assert calls == [
        'node1 node inspect ' + node3,
        'node1 node update --availability drain --label-add gpucluster.health=%s %s' % (reason, node3),
        'node1 node ps %s --filter desired-state=running --format {{.ID}}' % node3,
        'node1 node ps %s --filter desired-state=running --format {{.ID}}' % node3,
        'node1 node ps %s --filter desired-state=running --format {{.ID}}' % node3,
        'node3 swarm leave',
        'node1 node inspect ' + node3,
        'node1 node rm ' + node3], calls
    assert [c for c in swarm.calls() if c.split()[1] == 'info'] == ['node3 info --format {{json .}}']
    assert swarm.node('node3') is None and swarm.node('node2')['Spec']['Availability'] == 'active'


@needs_ansible
def test_decommission_refuses_a_manager_before_anything_changes(swarm):
    rc, out = swarm('decommission.yml', decommission_nodes='node1')
    assert rc != 0, out
    assert 'demote it first: docker node demote, and take it out of swarm_managers' in flat(out), out
    assert 'Nothing was changed.' in flat(out) and swarm.calls() == []


@needs_ansible
def test_decommission_refuses_a_paused_node_before_anything_changes_in_swarm(swarm):
    swarm.set_node('node3', 'pause')
    rc, out = swarm('decommission.yml', decommission_nodes='node2,node3', decommission_poll_interval=1)
    assert rc != 0, out
    assert 'node3 (%s, pause): Swarm reports an operator\'s state (availability pause)' % IDS['node3'] in flat(out), out
    assert changes(swarm.calls()) == [] and not [c for c in swarm.calls() if 'leave' in c or ' rm ' in c]


ROLLING = {'rolling_upgrade_roles': 'cuda_toolkit', 'rolling_upgrade_poll_interval': 1, 'rolling_upgrade_job_timeout': 20,
           'rolling_upgrade_gate_timeout': 5}


@needs_ansible
def test_rolling_upgrade_drains_waits_and_gives_back_each_node_through_a_manager(swarm):
    value = swarm.current()
    value['linger'] = {IDS['node3']: 1}
    swarm.save(value)
    rc, out = swarm('rolling_upgrade.yml', '--limit', 'node2,node3', **ROLLING)
    assert rc == 0, out
    upgrade = make_reason('upgrade', 'upgrade')
    assert changes(swarm.calls()) == [
        ('node1', 'drain', upgrade, IDS['node2']), ('node1', 'active', '-', IDS['node2']),
        ('node1', 'drain', upgrade, IDS['node3']), ('node1', 'active', '-', IDS['node3'])]
    # node3's tasks took one more look to leave, then its containers were checked on node3 itself.
    looks = [c for c in swarm.calls() if ' node ps ' + IDS['node3'] in c]
    assert len(looks) == 2 and all(c.startswith('node1 ') for c in looks)
    assert 'node3 ps --quiet --filter label=com.docker.swarm.task.id' in swarm.calls()
    assert 'node3: upgraded and passed the health gate, active again in Swarm.' in flat(out)


@needs_ansible
def test_decommission_limit_that_leaves_out_the_swarm_manager_stops_before_anything_changes(swarm):
    rc, out = swarm('decommission.yml', '--limit', 'node3', decommission_nodes='node3')
    assert rc != 0, out
    assert ('--limit node3 leaves out node1: decommission.yml drains the nodes, waits for their tasks and removes them '
            'through a Swarm manager') in flat(out), out
    assert swarm.calls() == []


@needs_ansible
def test_rolling_upgrade_leaves_a_node_held_by_someone_else_untouched(swarm):
    swarm.set_node('node2', 'drain', {'gpucluster.health': HEALTH_REASON})
    swarm.set_node('node3', 'pause')
    rc, out = swarm('rolling_upgrade.yml', '--limit', 'node2,node3', **ROLLING)
    assert rc == 0, out
    assert changes(swarm.calls()) == []
    text = flat(out)
    assert 'node2: left out of the rolling upgrade, untouched: Swarm reports a hold of gpucluster health' in text, out
    assert 'node3: left out of the rolling upgrade, untouched: Swarm reports availability pause' in text, out


@needs_ansible
def test_rolling_upgrade_gate_failure_keeps_the_node_held_with_the_step(swarm):
    (swarm.tmp / 'sick').write_text(u'')
    rc, out = swarm('rolling_upgrade.yml', '--limit', 'node2,node3', **ROLLING)
    assert rc != 0, out
    failed = make_reason('upgrade', 'failed at health gate: gpucluster-health critical: 1 GPU(s) visible to the driver, 2 expected')
    assert changes(swarm.calls()) == [('node1', 'drain', make_reason('upgrade', 'upgrade'), IDS['node2']),
                                      ('node1', 'drain', failed, IDS['node2'])]
    assert swarm.node('node2')['Spec']['Availability'] == 'drain'
    assert swarm.node('node3')['Spec']['Availability'] == 'active'      # not reached
    assert 'The node stays drained' in flat(out)


@needs_ansible
def test_rolling_upgrade_batch_with_most_managers_stops_before_any_drain(swarm):
    value = swarm.current()
    for host in HOSTS:
        value['hosts'][host]['manager'] = True
    swarm.save(value)
    swarm.inventory(list(HOSTS))
    rc, out = swarm('rolling_upgrade.yml', rolling_upgrade_serial=2, **ROLLING)
    assert rc != 0, out
    assert 'holds 2 of the 3 Swarm managers (node1, node2)' in flat(out) and 'Nothing was drained.' in flat(out), out
    assert changes(swarm.calls()) == []
