# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""module_utils/swarm.py and its filters: managers, the GPU resource kind and variable, Swarm's ports, daemon.json
and the NVIDIA runtime's config.toml, when dockerd may restart, the join plan, labels and role changes. The filters
only adapt: each test of a decision is on the module, the filters are checked to pass it through and name
themselves in errors."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import sys

import pytest

from ansible_collections.gpucluster.core.plugins.filter import swarm as flt
from ansible_collections.gpucluster.core.plugins.module_utils import swarm as sw

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover
    AnsibleFilterError = Exception

UUID0 = 'GPU-00000002-1ab0-4000-8000-000000000000'
UUID1 = 'GPU-00000002-1ab0-4000-8000-000000000001'
# The runtime's config.toml as the toolkit's packages install it (1.17/1.18: nvidia-ctk config default), shortened;
# swarm-resource is a commented top-level key, mode sits in [nvidia-container-runtime].
TOOLKIT_TOML = '''#accept-nvidia-visible-devices-as-volume-mounts = false
#accept-nvidia-visible-devices-envvar-when-unprivileged = true
disable-require = false
supported-driver-capabilities = "compat32,compute,display,graphics,ngx,utility,video"
#swarm-resource = "DOCKER_RESOURCE_GPU"

[nvidia-container-cli]
environment = []
ldconfig = "@/sbin/ldconfig"

[nvidia-container-runtime]
log-level = "info"
mode = "auto"
runtimes = ["docker-runc", "runc", "crun"]

[nvidia-container-runtime.modes.cdi]
annotation-prefixes = ["cdi.k8s.io/"]
default-kind = "nvidia.com/gpu"
'''


def toml(text):
    if sys.version_info < (3, 11):  # pragma: no cover - tomllib is 3.11+
        pytest.skip('tomllib needs Python 3.11')
    import tomllib
    return tomllib.loads(text)


@pytest.mark.parametrize('nodes, explicit, managers', [
    (['n1'], None, ['n1']),
    (['n1', 'n2'], None, ['n1']),
    (['n1', 'n2', 'n3'], None, ['n1', 'n2', 'n3']),
    (['n1', 'n2', 'n3', 'n4', 'n5', 'n6'], [], ['n1', 'n2', 'n3']),
    (['n1', 'n2', 'n3', 'n4', 'n5'], ['n5', 'n4', 'n3', 'n2', 'n1'], ['n5', 'n4', 'n3', 'n2', 'n1']),
    (['n1', 'n2', 'n3'], ['n2'], ['n2']),
])
def test_managers(nodes, explicit, managers):
    assert sw.choose_managers(nodes, explicit) == managers


@pytest.mark.parametrize('nodes, explicit, message', [
    ([], None, 'its group is empty'),
    (['n1', 'n2', 'n3'], ['n1', 'n2'], 'use an odd number'),
    (['n1', 'n2'], ['n9'], 'n9, which is not in'),
    ('n1', None, 'must be a list'),
])
def test_managers_refused(nodes, explicit, message):
    with pytest.raises(ValueError, match=message):
        sw.choose_managers(nodes, explicit)


def test_managers_filter_reads_the_groups():
    groups = {'gpu_nodes': ['a', 'b', 'c', 'd'], 'swarm_managers': []}
    assert flt.swarm_managers(groups) == ['a', 'b', 'c']
    assert flt.swarm_managers(dict(groups, swarm_managers=['d'])) == ['d']
    with pytest.raises(AnsibleFilterError, match='swarm_managers: swarm_managers has 2 hosts'):
        flt.swarm_managers(dict(groups, swarm_managers=['a', 'b']))


@pytest.mark.parametrize('kind, env', [('GPU', 'DOCKER_RESOURCE_GPU'), ('gpu', 'DOCKER_RESOURCE_GPU'),
                                       ('NVIDIA_GPU', 'DOCKER_RESOURCE_NVIDIA_GPU')])
def test_env_name(kind, env):
    assert sw.env_name(kind) == env


@pytest.mark.parametrize('kind', ['NVIDIA-GPU', '', '1GPU', 'GPU=1', None, 'G' * 64])
def test_kind_refused(kind):
    with pytest.raises(ValueError, match='swarm_gpu_resource_kind'):
        sw.env_name(kind)


def test_generic_resources():
    assert sw.generic_resources('GPU', [UUID0, UUID1]) == ['GPU=' + UUID0, 'GPU=' + UUID1]
    with pytest.raises(ValueError, match='listed twice'):
        sw.generic_resources('GPU', [UUID0, UUID0])
    with pytest.raises(ValueError, match='not a GPU UUID'):
        sw.generic_resources('GPU', ['0'])


def test_daemon_merge_keeps_other_keys_and_kinds():
    text = json.dumps({'log-driver': 'json-file', 'node-generic-resources': ['SSD=fast', 'GPU=old'],
                       'runtimes': {'nvidia': {'path': '/usr/bin/nvidia-container-runtime'}}})
    plan = sw.daemon_merge(text, 'GPU', sw.generic_resources('GPU', [UUID0, UUID1]))
    data = json.loads(plan['content'])
    assert plan['needs_write']
    assert data['node-generic-resources'] == ['SSD=fast', 'GPU=' + UUID0, 'GPU=' + UUID1]
    assert data['log-driver'] == 'json-file' and data['runtimes']['nvidia']['path'].endswith('runtime')
    # the same again: nothing to write, the text itself comes back
    again = sw.daemon_merge(plan['content'], 'GPU', sw.generic_resources('GPU', [UUID0, UUID1]))
    assert again == {'needs_write': False, 'content': plan['content']}


def test_daemon_merge_empty_and_removal():
    plan = sw.daemon_merge('', 'GPU', ['GPU=' + UUID0])
    assert json.loads(plan['content']) == {'node-generic-resources': ['GPU=' + UUID0]}
    # no GPU left and no other kind: the key goes
    assert 'node-generic-resources' not in json.loads(sw.daemon_merge(plan['content'], 'GPU', [])['content'])


@pytest.mark.parametrize('text, message', [
    ('{"a": 1,}', 'not valid JSON'),
    ('[1]', 'must hold a JSON object'),
    ('{"node-generic-resources": "GPU=x"}', 'must be a list'),
])
def test_daemon_merge_refuses(text, message):
    with pytest.raises(ValueError, match=message):
        sw.daemon_merge(text, 'GPU', [])
    with pytest.raises(AnsibleFilterError, match='swarm_daemon_merge: '):
        flt.swarm_daemon_merge(text, 'GPU', [])


def test_running_resources_from_docker_info():
    info = json.dumps({'GenericResources': [
        {'NamedResourceSpec': {'Kind': 'GPU', 'Value': UUID0}},
        {'DiscreteResourceSpec': {'Kind': 'SSD', 'Value': 2}}, 'junk']})
    assert sw.running_resources(info) == ['GPU=' + UUID0, 'SSD=2']
    assert sw.running_resources(json.dumps({'GenericResources': None})) == []


@pytest.mark.parametrize('wanted, running, tasks, plan', [
    (['GPU=a'], ['GPU=a'], 3, (False, False)),
    (['GPU=a', 'GPU=b'], ['GPU=b', 'GPU=a'], 0, (False, False)),
    (['GPU=a'], [], 0, (True, False)),
    (['GPU=a'], ['GPU=c'], 2, (False, True)),
])
def test_restart_plan(wanted, running, tasks, plan):
    result = sw.restart_plan(wanted, running, tasks)
    assert (result['restart'], result['pending']) == plan
    if result['pending']:
        assert 'drain the node' in result['why'] and '2 Swarm task' in result['why']


@pytest.mark.parametrize('version, legacy', [
    ('1.18.2-1', True), ('1.17.8-1', True), ('1.19.0-1', False), ('1.19.0~rc.1-1', False), ('2.0.0', False),
    (None, True), ('', True), ('unknown', True),
])
def test_legacy_mode(version, legacy):
    assert sw.needs_legacy_mode(version) is legacy


def test_toolkit_config_from_the_package_file():
    plan = sw.toolkit_config(TOOLKIT_TOML, 'GPU', True)
    data = toml(plan['content'])
    assert plan['needs_write']
    assert data['swarm-resource'] == 'DOCKER_RESOURCE_GPU'
    assert data['nvidia-container-runtime']['mode'] == 'legacy'
    assert data['nvidia-container-runtime']['runtimes'] == ['docker-runc', 'runc', 'crun']
    assert data['nvidia-container-runtime']['modes']['cdi']['default-kind'] == 'nvidia.com/gpu'
    # every other line is kept as it was, the commented example included
    assert '#swarm-resource = "DOCKER_RESOURCE_GPU"' in plan['content']
    assert plan['content'].count('mode = ') == 1
    assert sw.toolkit_config(plan['content'], 'GPU', True) == {'needs_write': False, 'content': plan['content']}


def test_toolkit_config_other_kind_and_no_legacy():
    plan = sw.toolkit_config(TOOLKIT_TOML.replace('#swarm-resource', 'swarm-resource'), 'NVIDIA_GPU', False)
    data = toml(plan['content'])
    assert data['swarm-resource'] == 'DOCKER_RESOURCE_NVIDIA_GPU'
    # 1.19.0 and later: the mode is left as the site has it
    assert data['nvidia-container-runtime']['mode'] == 'auto'


def test_toolkit_config_missing_file_and_table():
    plan = sw.toolkit_config('', 'GPU', True)
    assert toml(plan['content']) == {'swarm-resource': 'DOCKER_RESOURCE_GPU', 'nvidia-container-runtime': {'mode': 'legacy'}}
    no_table = sw.toolkit_config('[nvidia-container-cli]\nldconfig = "@/sbin/ldconfig"\n', 'GPU', True)
    assert toml(no_table['content'])['nvidia-container-runtime'] == {'mode': 'legacy'}
    assert toml(no_table['content'])['swarm-resource'] == 'DOCKER_RESOURCE_GPU'


def info(state, manager=False, cluster='', remotes=(), node_id='n1', addr='10.0.0.1'):
    swarm = {'LocalNodeState': state, 'NodeID': node_id if state == 'active' else '', 'ControlAvailable': manager,
             'NodeAddr': addr, 'RemoteManagers': [{'NodeID': 'x', 'Addr': a} for a in remotes], 'Error': ''}
    if cluster:
        swarm['Cluster'] = {'ID': cluster}
    return json.dumps({'Swarm': swarm})


def test_swarm_state():
    state = sw.swarm_state(info('active', True, 'c1', ['10.0.0.1:2377']))
    assert state == {'state': 'active', 'node_id': 'n1', 'manager': True, 'cluster_id': 'c1',
                     'managers': ['10.0.0.1:2377'], 'node_addr': '10.0.0.1', 'error': ''}
    assert sw.swarm_state(json.dumps({}))['state'] == 'unknown'


MANAGERS = ['m1', 'm2', 'm3']
CLUSTER = {'cluster_id': 'c1', 'manager_addrs': ['10.0.0.1']}


@pytest.mark.parametrize('host, state, cluster, init_in_run, action, role', [
    ('m1', info('inactive'), {}, True, 'init', 'manager'),
    ('m2', info('inactive'), {}, True, 'join', 'manager'),
    ('w1', info('inactive'), CLUSTER, False, 'join', 'worker'),
    ('m2', info('active', True, 'c1'), CLUSTER, False, 'none', 'manager'),
    ('w1', info('active', False, '', ['10.0.0.1:2377']), CLUSTER, False, 'none', 'worker'),
])
def test_join_plan(host, state, cluster, init_in_run, action, role):
    plan = sw.join_plan(host, sw.swarm_state(state), MANAGERS, cluster, init_in_run)
    assert (plan['action'], plan['role'], plan['error']) == (action, role, '')


@pytest.mark.parametrize('host, state, cluster, message', [
    ('m2', info('inactive'), {}, 'no manager is in a swarm yet'),
    ('m2', info('active', True, 'other'), CLUSTER, 'is in another swarm'),
    ('w1', info('active', False, '', ['192.0.2.9:2377']), {'cluster_id': 'c1', 'manager_addrs': ['10.0.0.1:2377']},
     'a worker of a swarm whose managers are 192.0.2.9:2377'),
    ('m1', info('locked'), CLUSTER, 'docker swarm unlock'),
    ('m1', info('error'), CLUSTER, 'membership is error'),
    ('m1', info('weird'), CLUSTER, "swarm state 'weird'"),
])
def test_join_plan_refuses(host, state, cluster, message):
    plan = sw.join_plan(host, sw.swarm_state(state), MANAGERS, cluster)
    assert plan['action'] == 'error'
    assert message in plan['error']
    assert plan['error'].startswith(host)


def test_node_labels():
    devices = [{'name': 'NVIDIA H100 80GB HBM3', 'memory_total_mib': 81559}] * 8
    assert sw.node_labels(devices) == {'gpucluster.gpu.count': '8', 'gpucluster.gpu.model': 'NVIDIA H100 80GB HBM3',
                                       'gpucluster.gpu.memory_mib': '81559'}
    assert sw.node_labels([]) == {'gpucluster.gpu.count': '0'}
    labels = flt.swarm_node_labels(devices[:1], {'rack': 'r1', 'ib': True, 'slot': 4})
    assert labels['rack'] == 'r1' and labels['ib'] == 'true' and labels['slot'] == '4'


def test_role_changes_promotions_first():
    hosts = [{'inventory_hostname': 'a', 'swarm_node_state': {'node_id': 'ia'}},
             {'inventory_hostname': 'b', 'swarm_node_state': {'node_id': 'ib'}},
             {'inventory_hostname': 'c', 'swarm_node_state': {'node_id': 'ic'}},
             {'inventory_hostname': 'd'}]
    lines = ['ia manager', 'ib worker', 'ic manager']
    assert flt.swarm_role_changes(hosts, lines, ['a', 'b', 'd']) == [
        {'node_id': 'ib', 'host': 'b', 'role': 'manager'}, {'node_id': 'ic', 'host': 'c', 'role': 'worker'}]
    assert flt.swarm_role_changes(hosts, lines, ['a', 'c', 'd']) == []


def test_address_on_the_fabric_refused():
    facts = {'interfaces': ['eno1', 'ibp26s0', 'lo'],
             'eno1': {'ipv4': {'address': '10.1.0.5'}, 'type': 'ether'},
             'ibp26s0': {'ipv4': {'address': '192.168.100.5'}, 'type': 'infiniband'},
             'lo': {'ipv4': {'address': '127.0.0.1'}, 'type': 'loopback'}}
    assert flt.swarm_address_problem('10.1.0.5', facts) == ''
    assert 'IPoIB interface' in flt.swarm_address_problem('192.168.100.5', facts)
    assert 'ibp26s0' in flt.swarm_address_problem('192.168.100.5', facts)


# ---------------------------------------------------------------- ports: one table

def test_ports_table():
    assert sw.ports('tcp') == [2377, 7946]
    assert sw.ports('udp') == [4789, 7946]
    assert sw.ports('tcp', 2400) == [2400, 7946] and sw.ports('tcp', '9000') == [7946, 9000]
    # the control plane is TCP only: swarm_port never reaches the UDP ports
    assert sw.ports('udp', 2400) == [4789, 7946]
    assert sw.ports('tcp', None) == sw.ports('tcp', '') == [sw.default_port('control'), 7946]
    assert [sw.default_port(name) for name in ('control', 'gossip', 'vxlan')] == [2377, 7946, 4789]
    assert flt.swarm_ports('tcp', 2400) == [2400, 7946] and flt.swarm_default_port('control') == 2377


@pytest.mark.parametrize('protocol, control, message', [
    ('sctp', None, 'the protocol must be tcp or udp'),
    ('tcp', 7946, "swarm_port = 7946 is Swarm's gossip port"),
    ('udp', 7946, "swarm_port = 7946 is Swarm's gossip port"),
    ('tcp', 0, r'swarm_port must be a port number \(1-65535\), got 0'),
    ('tcp', 70000, 'swarm_port must be a port number'),
    ('tcp', True, 'swarm_port must be a port number'),
    ('tcp', 'x', 'swarm_port must be a port number'),
    ('tcp', 23.5, 'swarm_port must be a port number'),
])
def test_ports_refused(protocol, control, message):
    with pytest.raises(ValueError, match=message):
        sw.ports(protocol, control)
    with pytest.raises(AnsibleFilterError, match='swarm_ports: '):
        flt.swarm_ports(protocol, control)


def test_default_port_unknown():
    with pytest.raises(ValueError, match="'raft' is not one of Swarm's ports .control, gossip, vxlan."):
        sw.default_port('raft')
    with pytest.raises(AnsibleFilterError, match='swarm_default_port: '):
        flt.swarm_default_port('raft')


# ---------------------------------------------------------------- the decisions the filters used to make

def test_managers_from_groups():
    assert sw.managers_from_groups({'gpu_nodes': ['a', 'b']}, 'gpu_nodes', 'swarm_managers') == ['a']
    assert sw.managers_from_groups({'gpu_nodes': ['a', 'b'], 'swarm_managers': None}, 'gpu_nodes', 'swarm_managers') == ['a']
    with pytest.raises(ValueError, match='expected the groups variable, got list'):
        sw.managers_from_groups(['a'], 'gpu_nodes', 'swarm_managers')
    with pytest.raises(ValueError, match='the swarm has no nodes'):
        sw.managers_from_groups({}, 'gpu_nodes', 'swarm_managers')
    with pytest.raises(AnsibleFilterError, match='swarm_managers: expected the groups variable'):
        flt.swarm_managers('gpu_nodes')


@pytest.mark.parametrize('value, text', [
    (True, 'true'), (False, 'false'), (4, '4'), (2.5, '2.5'), ('r1', 'r1'), ('True', 'True'),
])
def test_label_value(value, text):
    assert sw.label_value(value) == text


def test_node_labels_with_extra_labels():
    devices = [{'name': 'NVIDIA H100 80GB HBM3', 'memory_total_mib': 81559}]
    labels = sw.node_labels(devices, {'rack': 'r1', 'ib': True, 'slot': 4})
    assert labels == {'gpucluster.gpu.count': '1', 'gpucluster.gpu.model': 'NVIDIA H100 80GB HBM3',
                      'gpucluster.gpu.memory_mib': '81559', 'rack': 'r1', 'ib': 'true', 'slot': '4'}
    assert sw.node_labels(devices, None) == sw.node_labels(devices) == sw.node_labels(devices, {})
    with pytest.raises(ValueError, match='swarm_node_labels must be a mapping'):
        sw.node_labels(devices, ['rack=r1'])
    with pytest.raises(AnsibleFilterError, match='swarm_node_labels: swarm_node_labels must be a mapping'):
        flt.swarm_node_labels(devices, 'rack=r1')


def test_node_roles_from_docker_node_inspect():
    lines = ['ia manager', 'ib  worker', '', 'WARNING: not a node', 'ic manager extra', 42]
    assert sw.node_roles(lines) == {'ia': 'manager', 'ib': 'worker'}
    assert sw.node_roles(None) == {}


def test_play_nodes():
    hosts = [{'inventory_hostname': 'a', 'swarm_node_state': {'node_id': 'ia'}},
             {'inventory_hostname': 'b', 'swarm_node_state': {'node_id': 'ib'}},
             {'inventory_hostname': 'c', 'swarm_node_state': {'node_id': ''}},
             {'inventory_hostname': 'd', 'swarm_node_state': 'unknown'},
             {'inventory_hostname': 'e'}, 'not a host']
    assert sw.play_nodes(hosts, ['ia manager']) == {'a': {'node_id': 'ia', 'role': 'manager'},
                                                    'b': {'node_id': 'ib', 'role': ''}}
    assert sw.play_role_changes(hosts, ['ia manager', 'ib worker'], ['b']) == [
        {'node_id': 'ib', 'host': 'b', 'role': 'manager'}, {'node_id': 'ia', 'host': 'a', 'role': 'worker'}]


def test_host_interfaces_from_facts():
    facts = {'interfaces': ['eno1', 'ib0.8001', 'br-x', 'lo', 'gone'],
             'eno1': {'ipv4': {'address': '10.1.0.5'}, 'ipv4_secondaries': [{'address': '10.1.0.6'}, 'junk'],
                      'ipv6': [{'address': 'fd00::5'}], 'type': 'ether'},
             'ib0_8001': {'ipv4': {'address': '192.168.100.5'}, 'type': 'infiniband'},
             'br_x': {'type': 'bridge'},
             'lo': 'not a mapping'}
    assert sw.host_interfaces(facts) == {
        'eno1': {'type': 'ether', 'addresses': ['10.1.0.5', '10.1.0.6', 'fd00::5']},
        'ib0.8001': {'type': 'infiniband', 'addresses': ['192.168.100.5']},
        'br-x': {'type': 'bridge', 'addresses': []}, 'gone': {'type': '', 'addresses': []}}
    assert sw.address_problem('fd00::5', facts) == ''
    assert 'ib0.8001' in sw.address_problem('192.168.100.5', facts)
    with pytest.raises(ValueError, match='expected the host facts, got str'):
        sw.host_interfaces('eno1')
    with pytest.raises(AnsibleFilterError, match='swarm_address_problem: expected the host facts'):
        flt.swarm_address_problem('10.1.0.5', None)


@pytest.mark.parametrize('tasks', ['2', ' 2 ', 2])
def test_restart_plan_counts(tasks):
    assert sw.restart_plan(['GPU=a'], None, tasks)['pending'] is True
    assert sw.restart_plan(None, None, tasks) == {'restart': False, 'pending': False, 'why': ''}


@pytest.mark.parametrize('tasks', [True, 'two', -1, None, 1.5])
def test_restart_plan_refuses_a_count_that_is_not_one(tasks):
    with pytest.raises(ValueError, match='must be a count'):
        sw.restart_plan(['GPU=a'], [], tasks)
    with pytest.raises(AnsibleFilterError, match='swarm_restart_plan: '):
        flt.swarm_restart_plan(['GPU=a'], [], tasks)


def test_join_plan_needs_managers_and_mappings():
    with pytest.raises(ValueError, match='no manager chosen for n1'):
        sw.join_plan('n1', {'state': 'inactive'}, [], {})
    with pytest.raises(ValueError, match='expected its swarm_state and the cluster seen as mappings'):
        sw.join_plan('n1', 'inactive', ['n1'], {})
    with pytest.raises(AnsibleFilterError, match='swarm_join_plan: no manager chosen'):
        flt.swarm_join_plan({'state': 'inactive'}, 'n1', None, {})


def test_filters_pass_through():
    """Each filter gives what the module gives: nothing is decided in plugins/filter/swarm.py."""
    assert flt.swarm_needs_legacy_mode('1.18.2-1') is sw.needs_legacy_mode('1.18.2-1') is True
    assert flt.swarm_toolkit_config('', 'GPU', True) == sw.toolkit_config('', 'GPU', True)
    assert flt.swarm_restart_plan(['GPU=a'], [], '0') == sw.restart_plan(['GPU=a'], [], 0)
    state = {'state': 'inactive'}
    assert flt.swarm_join_plan(state, 'n1', ['n1'], {}, False) == sw.join_plan('n1', state, ['n1'], {}, False)
    info = json.dumps({'GenericResources': [{'NamedResourceSpec': {'Kind': 'GPU', 'Value': UUID0}}]})
    assert flt.swarm_running_resources(info) == sw.running_resources(info) == ['GPU=' + UUID0]


def test_running_resources_refuses_what_is_not_docker_info():
    with pytest.raises(ValueError, match=r'^the output of docker info is not valid JSON \(Expecting value: .*\)$'):
        sw.running_resources('Cannot connect to the Docker daemon')
    assert sw.running_resources('') == sw.running_resources(None) == []


def test_daemon_merge_refusal_names_the_file():
    with pytest.raises(ValueError, match=r'^/etc/docker/custom.json must hold a JSON object, found an array; it was left '
                                         r'untouched: fix it by hand$'):
        sw.daemon_merge('[1]', 'GPU', [], '/etc/docker/custom.json')
    with pytest.raises(ValueError, match='/etc/docker/daemon.json: expected its text, got dict'):
        sw.daemon_merge({'a': 1}, 'GPU', [])
