# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import base64
import os

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.gpucluster.core.plugins.filter import slurm as s
from ansible_collections.gpucluster.core.plugins.module_utils.gpu_smi_xml import parse_nvidia_smi_xml


def _gpu(*devices):
    return {'present': True, 'count': len(devices), 'devices': [
        {'index': i, 'minor_number': m, 'name': n, 'uuid': 'GPU-%d' % i} for i, m, n in devices]}


def _report(own_fixtures_dir, name):
    with open(os.path.join(own_fixtures_dir, 'slurm', name)) as f:
        return f.read()


@pytest.mark.parametrize('name, expected', [
    ('NVIDIA RTX A5000', 'rtx_a5000'),
    ('NVIDIA A100-SXM4-80GB', 'a100_sxm4_80gb'),
    ('NVIDIA H100 80GB HBM3', 'h100_80gb_hbm3'),
    ('NVIDIA H200', 'h200'),
    ('Tesla V100-SXM2-16GB', 'v100_sxm2_16gb'),
    ('NVIDIA GeForce RTX 4090', 'rtx_4090'),
    ('  NVIDIA  L40S ', 'l40s'),
])
def test_gpu_type(name, expected):
    assert s.gpu_type(name) == expected


def test_gpu_type_map_wins_and_is_checked():
    assert s.gpu_type('NVIDIA H100 80GB HBM3', {'NVIDIA H100 80GB HBM3': 'h100'}) == 'h100'
    with pytest.raises(AnsibleFilterError, match='slurm_gpu_type_map'):
        s.gpu_type('NVIDIA H100 80GB HBM3', {'NVIDIA H100 80GB HBM3': 'h100 sxm'})


@pytest.mark.parametrize('name', ['', None, 'NVIDIA'])
def test_gpu_type_refuses_empty(name):
    with pytest.raises(AnsibleFilterError):
        s.gpu_type(name)


def test_parse_node_report(own_fixtures_dir):
    r = s.parse_node_report(_report(own_fixtures_dir, 'slurmd-C-2socket.txt'))
    assert r == {'cpus': 128, 'boards': 1, 'sockets_per_board': 2, 'cores_per_socket': 32,
                 'threads_per_core': 2, 'real_memory': 2063731, 'node_name': 'gpu01'}


@pytest.mark.parametrize('text', ['', 'slurmd: error: something', 'NodeName=x CPUs=2 Boards=1'])
def test_parse_node_report_incomplete(text):
    with pytest.raises(AnsibleFilterError, match='slurmd -C did not report'):
        s.parse_node_report(text)


@pytest.mark.parametrize('files, expected', [
    (['/dev/nvidia0'], '/dev/nvidia0'),
    (['/dev/nvidia0', '/dev/nvidia1'], '/dev/nvidia[0-1]'),
    (['/dev/nvidia%d' % i for i in range(8)], '/dev/nvidia[0-7]'),
    (['/dev/nvidia0', '/dev/nvidia2', '/dev/nvidia3'], '/dev/nvidia[0,2-3]'),
])
def test_compress_files(files, expected):
    assert s.compress_files(files) == expected


def test_node_plan_and_line(own_fixtures_dir):
    gpu = _gpu(*[(i, i, 'NVIDIA H100 80GB HBM3') for i in range(8)])
    plan = s.node_plan(_report(own_fixtures_dir, 'slurmd-C-2socket.txt'), gpu,
                       {'name': 'gpu01', 'gpus': 8, 'gpu_type': 'h100', 'memory_mib': 2063731,
                        'reserve_mib': 1024, 'reserve_percent': 0, 'round_mib': 1024, 'features': ['h100', 'ib']})
    assert plan['problems'] == [] and plan['notes'] == []
    assert s.node_line(plan['node']) == (
        'NodeName=gpu01 CPUs=128 Boards=1 SocketsPerBoard=2 CoresPerSocket=32 ThreadsPerCore=2 '
        'RealMemory=2062336 Gres=gpu:h100:8 Feature=h100,ib State=UNKNOWN')
    assert s.gres_lines([plan['node']]) == ['NodeName=gpu01 Name=gpu Type=h100 File=/dev/nvidia[0-7]']


def test_node_without_gpus_has_no_gres(own_fixtures_dir):
    plan = s.node_plan(_report(own_fixtures_dir, 'slurmd-C-lab.txt'), {'present': False, 'devices': []},
                       {'name': 'cpu1', 'addr': '10.0.0.5', 'real_memory': 23000})
    assert s.node_line(plan['node']) == ('NodeName=cpu1 NodeAddr=10.0.0.5 CPUs=2 Boards=1 SocketsPerBoard=1 '
                                         'CoresPerSocket=2 ThreadsPerCore=1 RealMemory=23000 State=UNKNOWN')
    assert s.gres_lines([plan['node']]) == []


def test_memory_override_larger_than_the_node_is_a_problem_not_a_rewrite(own_fixtures_dir):
    plan = s.node_plan(_report(own_fixtures_dir, 'slurmd-C-lab.txt'), None, {'name': 'node1', 'real_memory': 30000})
    assert plan['node']['real_memory'] == 30000
    assert plan['problems'] == ['RealMemory=30000 MiB but slurmd -C reports 24105 MiB']
    plan = s.node_plan(_report(own_fixtures_dir, 'slurmd-C-lab.txt'), None, {'name': 'node1', 'real_memory': 20000})
    assert plan['node']['real_memory'] == 20000 and plan['problems'] == []


def test_gpu_type_override_with_spaces_is_refused(own_fixtures_dir):
    with pytest.raises(AnsibleFilterError, match='slurm_gpu_type'):
        s.node_plan(_report(own_fixtures_dir, 'slurmd-C-lab.txt'), _gpu((0, 0, 'NVIDIA RTX A5000')),
                    {'name': 'node1', 'gpus': 1, 'gpu_type': 'rtx a5000'})
    with pytest.raises(AnsibleFilterError, match='slurm_gpu_type'):
        s.node_plan(_report(own_fixtures_dir, 'slurmd-C-lab.txt'), _gpu((0, 0, 'NVIDIA RTX A5000')),
                    {'name': 'node1', 'gpu_type': 'rtx a5000'})


def test_node_record_describes_the_live_node(own_fixtures_dir):
    gpu = _gpu(*[(i, i, 'NVIDIA H100 80GB HBM3') for i in range(8)])
    node = s.node_record(_report(own_fixtures_dir, 'slurmd-C-2socket.txt'), gpu,
                         {'name': 'gpu01', 'memory_reserve_mib': 1024, 'features': ['h100', 'ib']})
    assert s.node_line(node) == (
        'NodeName=gpu01 CPUs=128 Boards=1 SocketsPerBoard=2 CoresPerSocket=32 ThreadsPerCore=2 '
        'RealMemory=2062707 Gres=gpu:h100_80gb_hbm3:8 Feature=h100,ib State=UNKNOWN')
    with pytest.raises(AnsibleFilterError, match='slurm_node_real_memory: 30000 MiB is more than node1'):
        s.node_record(_report(own_fixtures_dir, 'slurmd-C-lab.txt'), None, {'name': 'node1', 'real_memory': 30000})


def test_minor_numbers_out_of_index_order_get_one_line_per_gpu():
    # The real dual RTX A5000 recording has index 0 -> minor 1 and index 1 -> minor 0.
    node = {'name': 'node1', 'gres': s.node_gres(_gpu((0, 1, 'NVIDIA RTX A5000'), (1, 0, 'NVIDIA RTX A5000')))}
    assert s.gres_lines([node]) == [
        'NodeName=node1 Name=gpu Type=rtx_a5000 File=/dev/nvidia1',
        'NodeName=node1 Name=gpu Type=rtx_a5000 File=/dev/nvidia0',
    ]


def test_mixed_gpu_types_and_core_affinity():
    gpu = _gpu((0, 0, 'NVIDIA A100-SXM4-80GB'), (1, 1, 'NVIDIA A100-SXM4-80GB'), (2, 2, 'NVIDIA L4'))
    node = {'name': 'n', 'gres': s.node_gres(gpu, cores={0: '0-15', 1: '16-31', 2: '16-31'})}
    assert s.node_line(dict(node, cpus=1, boards=1, sockets_per_board=1, cores_per_socket=1,
                            threads_per_core=1, real_memory=1)).endswith('Gres=gpu:a100_sxm4_80gb:2,gpu:l4:1 State=UNKNOWN')
    assert s.gres_lines([node]) == [
        'NodeName=n Name=gpu Type=a100_sxm4_80gb File=/dev/nvidia0 Cores=0-15',
        'NodeName=n Name=gpu Type=a100_sxm4_80gb File=/dev/nvidia1 Cores=16-31',
        'NodeName=n Name=gpu Type=l4 File=/dev/nvidia2 Cores=16-31',
    ]


def test_real_recording_through_the_gpu_parser(real_fixtures_dir):
    with open(os.path.join(real_fixtures_dir, '01_nvidia_smi_xml', 'telegraf__dual_a5000-v13.xml')) as f:
        parsed = parse_nvidia_smi_xml(f.read())
    gres = s.node_gres(dict(parsed, present=True))
    assert [(g['type'], g['count']) for g in gres] == [('rtx_a5000', 2)]
    assert sorted(gres[0]['files']) == ['/dev/nvidia0', '/dev/nvidia1']


def test_partition_lines():
    nodes = {'slurm-node1': 'node1', 'slurm-node2': 'node2', 'slurm-node3': 'node3'}
    lines = s.partition_lines([
        {'name': 'gpu', 'nodes': 'ALL', 'default': True},
        {'name': 'debug', 'nodes': ['slurm-node2', 'node3'], 'max_time': '1:00:00', 'options': {'PriorityTier': 2}},
    ], nodes)
    assert lines == [
        'PartitionName=gpu Nodes=node1,node2,node3 Default=YES MaxTime=INFINITE State=UP',
        'PartitionName=debug Nodes=node2,node3 Default=NO MaxTime=1:00:00 State=UP PriorityTier=2',
    ]


def _spec(**kw):
    spec = {
        'controller': 'h1', 'controllers': ['h1'], 'inventory': ['h1', 'h2', 'h3'],
        'compute': {h: {'node_name': 'node%s' % h[1], 'memtotal_mib': 24105, 'real_memory': 0, 'gpu_type': ''}
                    for h in ('h1', 'h2', 'h3')},
        'partitions': [{'name': 'gpu', 'nodes': 'ALL', 'default': True}],
        'conf_extra': {},
    }
    spec.update(kw)
    return spec


def test_validate_accepts_a_good_cluster():
    assert s.validate(_spec()) == []


@pytest.mark.parametrize('change, message', [
    ({'partitions': [{'name': 'gpu', 'nodes': ['h1', 'h9']}]}, 'partition gpu names h9, not hosts of the compute group'),
    ({'controller': 'ctl9'}, "slurm_controller_host: 'ctl9' is not a host of this inventory"),
    ({'controllers': []}, 'slurm_controller_group: the group has no host'),
    ({'controllers': ['h1', 'h2']}, 'this role runs one slurmctld'),
    ({'compute': {'h1': {'node_name': 'node1', 'gpu_type': 'rtx a5000'}}}, 'slurm_gpu_type: h1 has'),
    ({'compute': {'h1': {'node_name': 'node1', 'real_memory': '64000x'}}}, "slurm_node_real_memory: h1 has '64000x'"),
    ({'compute': {'h1': {'node_name': 'n'}, 'h2': {'node_name': 'n'}}}, 'would both be Slurm node n'),
    ({'compute': {'h1': {'node_name': 'bad name'}}}, 'slurm_node_name: h1 has'),
    ({'compute': {}}, 'slurm_compute_group: the group has no host'),
    ({'partitions': [{'name': 'a', 'default': True}, {'name': 'b', 'default': True}]}, 'a, b are all marked default'),
    ({'partitions': [{'name': 'a'}, {'name': 'a'}]}, 'partition a is defined twice'),
    ({'partitions': [{'name': 'a b'}]}, 'slurm_partitions[0]: needs a name'),
    ({'partitions': [{'name': 'a', 'options': {'MaxNodes': 'two words'}}]}, 'option MaxNodes'),
    ({'conf_extra': {'SchedulerParameters': 'a\nb'}}, 'slurm_conf_extra: SchedulerParameters'),
])
def test_validate_reports_bad_input(change, message):
    errors = s.validate(_spec(**change))
    assert any(message in e for e in errors), errors


BASE = '''# managed
ClusterName=c
SlurmctldHost=node1
TaskPlugin=task/cgroup
PriorityWeightAge=1000
HealthCheckInterval=300
NodeName=node1 CPUs=2 RealMemory=100 Gres=gpu:a:2 State=UNKNOWN
PartitionName=gpu Nodes=node1 Default=YES
'''


@pytest.mark.parametrize('old, new, kind, expected', [
    (BASE, BASE, 'slurm.conf', 'none'),
    (BASE, BASE.replace('# managed', '# other comment'), 'slurm.conf', 'none'),
    (None, BASE, 'slurm.conf', 'restart'),
    (BASE, BASE.replace('PriorityWeightAge=1000', 'PriorityWeightAge=2000'), 'slurm.conf', 'reconfigure'),
    (BASE, BASE.replace('HealthCheckInterval=300', 'HealthCheckInterval=60'), 'slurm.conf', 'reconfigure'),
    (BASE, BASE.replace('Default=YES', 'Default=YES MaxTime=1:00:00'), 'slurm.conf', 'reconfigure'),
    (BASE, BASE + 'NodeName=node2 CPUs=2 RealMemory=100 State=UNKNOWN\n', 'slurm.conf', 'restart'),
    (BASE, BASE.replace('RealMemory=100', 'RealMemory=90'), 'slurm.conf', 'restart'),
    (BASE, BASE.replace('TaskPlugin=task/cgroup', 'TaskPlugin=task/cgroup,task/affinity'), 'slurm.conf', 'restart'),
    (BASE, BASE.replace('SlurmctldHost=node1', 'SlurmctldHost=node2'), 'slurm.conf', 'restart'),
    ('NodeName=n Name=gpu File=/dev/nvidia0\n', 'NodeName=n Name=gpu File=/dev/nvidia[0-1]\n', 'gres.conf', 'restart'),
    ('# a\nConstrainCores=yes\n', '# b\nConstrainCores=yes\n', 'cgroup.conf', 'none'),
])
def test_conf_change(old, new, kind, expected):
    assert s.conf_change(old, new, kind) == expected


def test_conf_file_change_reads_a_slurp_result():
    result = {'item': {'item': 'slurm.conf'}, 'content': base64.b64encode(BASE.encode()).decode()}
    assert s.conf_file_change(result, {'slurm.conf': BASE}) == 'none'
    assert s.conf_file_change(result, {}) == 'restart'


@pytest.mark.parametrize('actions, expected', [
    ([], 'none'), (['none', 'reconfigure'], 'reconfigure'), (['reconfigure', 'restart', 'none'], 'restart'),
])
def test_cluster_action(actions, expected):
    assert s.cluster_action(actions) == expected


def test_default_mem_per_cpu():
    assert s.default_mem_per_cpu([{'real_memory': 23081, 'cpus': 2}, {'real_memory': 1000000, 'cpus': 128}]) == 7812
    assert s.default_mem_per_cpu([]) == 1
