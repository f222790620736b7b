# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The drift_audit action plugin in-process: where facts and pins come from, host selection,
the fact cache read through Ansible's cache plugin loader, failure decision and reports."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import time

import pytest
from unittest import mock

from ansible.errors import AnsibleActionFail
from ansible.playbook.play_context import PlayContext
from ansible.plugins.loader import cache_loader, init_plugin_loader
from ansible.utils.collection_loader import AnsibleCollectionConfig

from ansible_collections.gpucluster.core.plugins.action.drift_audit import ActionModule, role_default_values
from ansible_collections.gpucluster.core.plugins.module_utils import drift as drift_module

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))

STACK = {'kernel': '6.1.0-25-amd64', 'nvidia_driver': '550.54.15-1', 'nvidia_driver_loaded': '550.54.15',
         'cuda_toolkit': '12.4.1', 'nccl': '2.21.5-1+cuda12.4', 'cudnn': None}


@pytest.fixture(scope='module', autouse=True)
def plugin_loader():
    if AnsibleCollectionConfig.collection_finder is None:
        init_plugin_loader([os.path.join(REPO, 'collections')])


def stack(**changes):
    value = dict(STACK)
    value.update(changes)
    return value


def facts(**changes):
    return {'gpu_stack': stack(**changes), 'gpu_stack_details': {'collected_at': time.time(), 'raw': {}}}


def run_action(args, task_vars, check_mode=False):
    """Run the action; the roles' default pins are off unless a test asks for them (the tests of
    where pins come from do, below), so the other tests read only the pins they set."""
    task = mock.MagicMock()
    task.args = dict({'role_defaults': False}, **args)
    task.async_val = 0
    task.check_mode = check_mode
    play_context = PlayContext()
    play_context.check_mode = check_mode
    action = ActionModule(task, mock.MagicMock(), play_context, loader=None, templar=None,
                          shared_loader_obj=None)
    return action.run(task_vars=task_vars)


def inventory_vars(hostvars, groups=None):
    all_hosts = list(hostvars)
    task_groups = {'all': all_hosts, 'ungrouped': []}
    task_groups.update(groups or {})
    return {'hostvars': hostvars, 'groups': task_groups}


def test_live_facts_and_role_variable_pins(tmp_path):
    hostvars = {
        'node1': {'ansible_facts': facts(), 'nvidia_driver_version': '550.54.15', 'cuda_toolkit_version': '12.4.1'},
        'node2': {'ansible_facts': facts(nccl='2.20.3-1+cuda12.4'), 'nvidia_driver_version': '550.54.15',
                  'cuda_toolkit_version': '12.4.1'},
        'node3': {'ansible_facts': facts(cuda_toolkit='12.2.0', nvidia_driver_loaded='535.183.01'),
                  'nvidia_driver_version': '550.54.15', 'cuda_toolkit_version': '12.4.1'},
    }
    result = run_action({'report_dir': str(tmp_path), 'groups': ['gpu_nodes']},
                        inventory_vars(hostvars, {'gpu_nodes': ['node1', 'node2', 'node3']}))
    assert result['failed'] is True
    got = sorted((f['host'], f['component'], f['kind'], f['expected'], f['found'], f['group'])
                 for f in result['findings'])
    assert got == [
        ('node2', 'nccl', 'majority', '2.21.5-1+cuda12.4', '2.20.3-1+cuda12.4', 'gpu_nodes'),
        ('node3', 'cuda_toolkit', 'baseline', '12.4.1', '12.2.0', 'gpu_nodes'),
        ('node3', 'nvidia_driver_loaded', 'baseline', '550.54.15', '535.183.01', 'gpu_nodes'),
    ]
    assert 'CRITICAL node3/cuda_toolkit [baseline]: expected 12.4.1, found 12.2.0' in result['msg']
    assert sorted(os.listdir(str(tmp_path))) == ['drift.json', 'drift.junit.xml', 'drift.md']
    assert result['changed'] is False


def test_explicit_baseline_overrides_and_removes_role_pins():
    hostvars = dict(('n%d' % i, {'ansible_facts': facts(), 'cuda_toolkit_version': '12.2'}) for i in range(3))
    result = run_action({'baseline': {'cuda_toolkit': '12.4', 'nccl': '2.21'}}, inventory_vars(hostvars))
    assert result['failed'] is False and result['summary']['findings'] == 0
    result = run_action({'baseline': {'cuda_toolkit': None}, 'findings_returned': 1}, inventory_vars(hostvars))
    assert result['summary']['findings'] == 0
    result = run_action({'baseline_vars': {}}, inventory_vars(hostvars))
    assert result['summary']['findings'] == 0
    result = run_action({}, inventory_vars(hostvars))
    assert result['summary']['by_kind']['baseline'] == 3


def test_unreachable_host_is_unknown_with_reason():
    hostvars = {
        'node1': {'ansible_facts': facts()},
        'node2': {'ansible_facts': facts()},
        'node3': {'ansible_facts': {}, '__gather': {'unreachable': True, 'msg': 'ssh: connect to host node3 port 22: No route'}},
        'node4': {'ansible_facts': {}, '__gather': {'failed': True, 'msg': 'dpkg-query failed'}},
    }
    result = run_action({'status_var': '__gather', 'fail_on': 'never'}, inventory_vars(hostvars))
    assert result['failed'] is False
    summary = result['summary']
    assert summary['hosts_unknown'] == 2 and summary['unknown_hosts'] == ['node3', 'node4']
    messages = dict((f['host'], f['message']) for f in result['findings'])
    assert messages['node3'] == 'unreachable: ssh: connect to host node3 port 22: No route'
    assert messages['node4'] == 'stack_facts failed: dpkg-query failed'
    assert set(f['kind'] for f in result['findings']) == {'unknown'}


def test_listed_host_without_inventory_entry_is_unknown():
    hostvars = {'node1': {'ansible_facts': facts()}}
    result = run_action({'hosts': ['node1', 'ghost']}, inventory_vars(hostvars))
    assert result['failed'] is True
    assert result['summary']['unknown_hosts'] == ['ghost']
    assert result['findings'][0]['message'] == 'not in the inventory and no facts given'


def test_stale_facts_are_unknown():
    old = facts()
    old['gpu_stack_details']['collected_at'] = time.time() - 7200
    hostvars = {'a': {'ansible_facts': facts()}, 'b': {'ansible_facts': old}}
    result = run_action({'max_fact_age': 3600}, inventory_vars(hostvars))
    assert result['summary']['unknown_hosts'] == ['b']
    assert 'max_fact_age 3600 s' in result['findings'][0]['message']


def test_explicit_facts_mapping_adds_hosts():
    result = run_action({'facts': {'x': facts(), 'y': facts(), 'z': facts(kernel='6.1.0-26-amd64')}},
                        inventory_vars({}))
    assert [(f['host'], f['component']) for f in result['findings']] == [('z', 'kernel')]


def _cache(path, entries):
    cache = cache_loader.get('ansible.builtin.jsonfile', _uri=str(path), _prefix='', _timeout=0)
    for host, value in entries.items():
        cache.set(host, value)


def test_fact_cache_through_the_cache_plugin(tmp_path):
    cache_dir = tmp_path / 'cache'
    _cache(cache_dir, {'host1': facts(), 'host2': facts(nccl='2.20.3-1+cuda12.4'),
                       'host3': facts(cuda_toolkit='12.2.0'), 'setup-only': {'ansible_hostname': 'setup-only'}})
    # The running ansible-core decides the file names; this test never guesses them.
    assert len(os.listdir(str(cache_dir))) == 4
    hostvars = {'host1': {'cuda_toolkit_version': '12.4.1'}, 'host2': {'cuda_toolkit_version': '12.4.1'},
                'host3': {'cuda_toolkit_version': '12.4.1'}, 'host4': {'cuda_toolkit_version': '12.4.1'},
                'localhost': {}}
    result = run_action({'fact_cache': str(cache_dir), 'report_dir': str(tmp_path / 'r')}, inventory_vars(hostvars))
    got = sorted((f['host'], f['component'], f['kind']) for f in result['findings'] if f['kind'] != 'unknown')
    assert got == [('host2', 'nccl', 'majority'), ('host3', 'cuda_toolkit', 'baseline')]
    # host4 is in the inventory but not in the cache; setup-only has facts but no gpu_stack.
    assert result['summary']['unknown_hosts'] == ['host4', 'setup-only']
    reasons = dict((f['host'], f['message']) for f in result['findings'] if f['kind'] == 'unknown')
    assert reasons['host4'].startswith('no entry in the fact cache')
    assert reasons['setup-only'].startswith('the fact cache entry holds no gpu_stack facts')
    # The controller is not a node of an offline audit.
    assert 'localhost' not in json.load(open(str(tmp_path / 'r' / 'drift.json')))['summary']['unknown_hosts']

    result = run_action({'fact_cache': str(cache_dir), 'include_cache_hosts': False}, inventory_vars(hostvars))
    assert result['summary']['hosts'] == 4 and result['summary']['notes'] == []


def test_fact_cache_of_another_cluster_is_audited_alone(tmp_path):
    cache_dir = tmp_path / 'cache'
    _cache(cache_dir, {'host1': facts(), 'host2': facts(), 'host3': facts(kernel='6.1.0-26-amd64')})
    # The default inventory describes other nodes (the lab): none of them is in the cache.
    lab = dict((h, {}) for h in ('node1', 'node2', 'node3'))
    result = run_action({'fact_cache': str(cache_dir)}, inventory_vars(lab))
    assert result['summary']['hosts'] == 3 and result['summary']['hosts_unknown'] == 0
    assert [(f['host'], f['component']) for f in result['findings']] == [('host3', 'kernel')]
    assert result['summary']['notes'][0].startswith('none of the 3 inventory hosts has an entry in the fact cache')
    assert 'note: none of the 3 inventory hosts' in result['msg']
    # Asking for the inventory hosts explicitly makes them unknown, as they have no facts.
    result = run_action({'fact_cache': str(cache_dir), 'hosts': ['node1']}, inventory_vars(lab))
    assert result['summary']['unknown_hosts'] == ['node1']


def test_fact_cache_missing_directory(tmp_path):
    result = run_action({'fact_cache': str(tmp_path / 'nope')}, inventory_vars({}))
    assert result['failed'] is True
    assert 'is not a directory' in result['msg']
    assert not os.path.exists(str(tmp_path / 'nope'))     # the cache plugin would have created it


def test_bad_inputs_fail_with_readable_messages():
    hostvars = {'a': {'ansible_facts': facts()}}
    result = run_action({'severity': {'nccl': 'fatal'}}, inventory_vars(hostvars))
    assert result['failed'] and "severity[nccl]='fatal'" in result['msg']
    result = run_action({'groups': 7}, inventory_vars(hostvars))
    assert result['failed'] and 'groups must be a list' in result['msg']
    result = run_action({}, inventory_vars({}))
    assert result['failed'] and 'no hosts to audit' in result['msg']
    # Argument-spec errors surface the way Ansible reports them for every action.
    with pytest.raises(AnsibleActionFail, match='value of fail_on must be one of'):
        run_action({'fail_on': 'sometimes'}, inventory_vars(hostvars))


def test_group_mapping_and_check_mode(tmp_path):
    hostvars = dict((h, {'ansible_facts': facts()}) for h in ('a1', 'a2', 'b1', 'b2', 'b3'))
    hostvars['b3']['ansible_facts'] = facts(cuda_toolkit='12.2.0')
    hostvars['a1']['ansible_facts'] = facts(cuda_toolkit='12.2.0')
    hostvars['a2']['ansible_facts'] = facts(cuda_toolkit='12.2.0')
    result = run_action({'groups': {'a': ['a1', 'a2'], 'b': ['b1', 'b2', 'b3']}, 'report_dir': str(tmp_path)},
                        inventory_vars(hostvars), check_mode=True)
    assert [(f['host'], f['component'], f['expected']) for f in result['findings']] == [('b3', 'cuda_toolkit', '12.4.1')]
    assert os.path.exists(str(tmp_path / 'drift.md'))


# ------------------------------------------------------------------ pins from the roles' defaults

def test_role_defaults_pin_what_the_inventory_leaves_unset(tmp_path):
    defaults = role_default_values()
    driver_default = defaults['nvidia_driver_version'][0]
    hostvars = {
        # No version in the inventory: the nvidia_driver role's default is the pin.
        'n1': {'ansible_facts': facts()},
        # The inventory's own pin wins over the role default.
        'n2': {'ansible_facts': facts(), 'nvidia_driver_version': '550.54.15'},
        # An empty inventory value turns the pin off (no fallback to the default).
        'n3': {'ansible_facts': facts(), 'nvidia_driver_version': ''},
    }
    result = run_action({'role_defaults': True, 'consistent': [], 'report_dir': str(tmp_path),
                         'baseline_vars': {'nvidia_driver': 'nvidia_driver_version',
                                           'slurm': 'slurm_version'}},
                        inventory_vars(hostvars))
    got = [(f['host'], f['component'], f['kind'], f['expected'], f.get('pin_origin')) for f in result['findings']]
    # slurm is absent everywhere: a role default pins only what is installed (the host may not
    # run that role), so nobody is "missing" Slurm.
    assert got == [('n1', 'nvidia_driver', 'baseline', driver_default,
                    'default of role nvidia_driver: nvidia_driver_version')]
    assert 'default of role nvidia_driver' in result['findings'][0]['message']
    # The slurm role's pin defaults to empty (the version each node's archive offers, docs/platforms.md):
    # an empty default is no baseline, so only the driver's default is named.
    assert defaults['slurm_version'][0] == ''
    assert result['summary']['notes'] == [
        'pinned by role defaults where installed (the inventory sets no version): nvidia_driver %s '
        '(nvidia_driver_version, default of role nvidia_driver; 1 hosts)' % driver_default]
    with open(result['reports']['json']) as handle:
        used = json.load(handle)['baseline']
    assert used['from_role_defaults']['nvidia_driver'] == {
        'value': driver_default, 'variable': 'nvidia_driver_version', 'role': 'nvidia_driver'}


def test_explicit_baseline_wins_over_role_defaults():
    hostvars = {'n1': {'ansible_facts': facts()}}
    result = run_action({'role_defaults': True, 'consistent': [], 'baseline': {'nvidia_driver': '550.54.15'},
                         'baseline_vars': {'nvidia_driver': 'nvidia_driver_version'}},
                        inventory_vars(hostvars))
    assert result['findings'] == []
    assert result['summary']['notes'] == []


def test_role_defaults_off():
    hostvars = {'n1': {'ansible_facts': facts()}}
    result = run_action({'role_defaults': False, 'consistent': [],
                         'baseline_vars': {'nvidia_driver': 'nvidia_driver_version'}},
                        inventory_vars(hostvars))
    assert result['findings'] == []


def test_role_default_values_are_literal_pins():
    values = role_default_values()
    # A templated default depends on other variables and is never a pin.
    assert 'cuda_toolkit_driver_version' not in values
    for component, var in drift_module.DEFAULT_BASELINE_VARS.items():
        assert var in values, '%s (the pin of %s) has no role default' % (var, component)


def test_kubernetes_tools_pinned_only_by_the_inventory():
    # kubectl on a node of a Slurm site is that site's own tool: the k8s_node role's default release
    # pins nothing; an inventory's k8s_node_version does.
    hostvars = {
        'n1': {'ansible_facts': facts(kubectl='1.20.1-00')},
        'n2': {'ansible_facts': facts(kubectl='1.20.1-00'), 'k8s_node_version': '1.31.4'},
    }
    result = run_action({'role_defaults': True, 'consistent': [],
                         'baseline_vars': {'kubectl': 'k8s_node_version'}},
                        inventory_vars(hostvars))
    got = [(f['host'], f['component'], f['kind'], f['expected'], f['found']) for f in result['findings']]
    assert got == [('n2', 'kubectl', 'baseline', '1.31.4', '1.20.1-00')]
    assert result['summary']['notes'] == []


def _swarm(state, **fields):
    value = {'state': state, 'role': '', 'availability': '', 'status': '', 'reachability': '', 'leader': False,
             'node_id': '', 'node_addr': '', 'cluster_id': '', 'managers': [], 'error': ''}
    value.update(fields)
    return value


def test_swarm_state_from_the_facts(tmp_path):
    managers = [{'node_id': '4vzgkl1ovjh5bfmd3hmk5o1xq', 'addr': '10.0.0.11:2377'}]
    states = {
        'node1': _swarm('active', role='manager', availability='active', reachability='reachable', leader=True,
                        node_id='4vzgkl1ovjh5bfmd3hmk5o1xq', cluster_id='w2s0d6tfqcgu8m2mjlsd5ca0r',
                        managers=managers),
        'node2': _swarm('active', role='worker', managers=managers),
        'node3': _swarm('inactive'),
    }
    hostvars = {}
    for host, state in states.items():
        host_facts = facts()
        host_facts['gpu_stack']['swarm'] = 'inactive' if host == 'node3' else 'active'
        host_facts['gpu_stack_details']['swarm'] = state
        hostvars[host] = {'ansible_facts': host_facts}
    # The old fact layout (no swarm state) of a fourth host is shown as such, never a finding.
    hostvars['node4'] = {'ansible_facts': facts()}
    result = run_action({'report_dir': str(tmp_path), 'groups': ['gpu_nodes'], 'severity': {'swarm': 'critical'}},
                        inventory_vars(hostvars, {'gpu_nodes': list(hostvars)}))
    assert result['failed'] is True
    assert [(f['host'], f['component'], f['kind'], f['severity'], f['expected'], f['found'])
            for f in result['findings']] == [('node3', 'swarm', 'majority', 'critical', 'active', 'inactive')]
    lines = result['msg'].splitlines()
    assert lines[lines.index('swarm state of 4 hosts:') + 1:] == [
        '  node1: active/manager/active, leader, reachable, cluster w2s0d6tfqcgu',
        '  node2: active/worker, managers 10.0.0.11:2377',
        '  node3: inactive',
        '  node4: not reported (its stack_facts predates the swarm state)',
    ]
    with open(result['reports']['json']) as handle:
        assert json.load(handle)['swarm']['node2']['role'] == 'worker'
    # Without the override the membership rule is a warning: the default fail_on passes.
    result = run_action({'groups': ['gpu_nodes']}, inventory_vars(hostvars, {'gpu_nodes': list(hostvars)}))
    assert result['failed'] is False and result['findings'][0]['severity'] == 'warning'


def test_swarm_is_no_component_to_pin():
    hostvars = {'node1': {'ansible_facts': facts()}}
    result = run_action({'consistent': ['swarm']}, inventory_vars(hostvars))
    assert result['failed'] and "consistent names unknown component 'swarm'" in result['msg']
    result = run_action({'baseline': {'swarm': 'active'}}, inventory_vars(hostvars))
    assert result['failed'] and "baseline names unknown component 'swarm'" in result['msg']
    result = run_action({'severity': {'swarm': 'loud'}}, inventory_vars(hostvars))
    assert result['failed'] and "severity[swarm]='loud'" in result['msg']
