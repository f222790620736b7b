# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the acceptance run does beside production (module_utils/validate_plan.py): GPU layout, the
fleet's shape (one machine under two names, rails), the Slurm reservation, job steps, the DDP verdict."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re

import pytest

from ansible_collections.gpucluster.core.plugins.module_utils import validate_plan as vp


# --------------------------------------------------------------------------- GPUs

@pytest.mark.parametrize('counts, backend, per_node, problems', [
    ({'a': 8, 'b': 8}, 'nccl', 8, []),
    ({'a': 0, 'b': 0}, 'gloo', None, []),
    ({'a': 8, 'b': 0}, 'gloo', 8, ['GPU nodes (a) and nodes without a GPU (b) are validated together']),
    ({'a': 8, 'b': 8, 'c': 7}, 'nccl', None, ['c: 7 GPU(s), most GPU nodes have 8: a node with a GPU missing']),
])
def test_gpu_layout(counts, backend, per_node, problems):
    got = vp.gpu_layout(counts)
    assert got['backend'] == backend and got['gpus_per_node'] == per_node
    assert len(got['problems']) == len(problems)
    for said, wanted in zip(got['problems'], problems):
        assert said.startswith(wanted), said


def test_gpu_layout_refuses_bad_counts():
    with pytest.raises(vp.PlanInputError, match=r'counts\[a\] must be a whole number of at least 0'):
        vp.gpu_layout({'a': -1})
    with pytest.raises(vp.PlanInputError, match='counts must map each host'):
        vp.gpu_layout({})


# --------------------------------------------------------------------------- the fleet's shape

def _rail(hca='mlx5_0', link='InfiniBand', address=None):
    return {'rail': 0, 'hca': hca, 'port': 1, 'link_layer': link, 'rate_gbps': 400, 'gid_index': None,
            'address': address, 'gpu': None, 'node_guid': None}


def _node(machine_id, address, rails=None, guids=(), gpus=0, problems=(), present=True):
    return {'machine_id': machine_id, 'address': address, 'guids': list(guids), 'rails': rails if rails is not None else [_rail()],
            'rail_problems': list(problems), 'rdma_present': present, 'gpu_count': gpus}


def test_fleet_shape_of_a_sound_fleet():
    got = vp.fleet_shape({'n1': _node('a' * 32, '10.0.0.1', guids=['0x1']), 'n2': _node('b' * 32, '10.0.0.2', guids=['0x2'])})
    assert got['problems'] == [] and got['rails_on'] and got['layout']['backend'] == 'gloo'


def test_one_machine_under_two_names_by_machine_id_address_or_guid():
    got = vp.fleet_shape({'n1': _node('a' * 32, '10.0.0.1'), 'alias': _node('a' * 32, '10.0.0.1')})
    assert [d['by'] for d in got['duplicates']] == ['address', 'machine-id']
    assert got['problems'][0] == 'alias and n1 are one machine: same measured address 10.0.0.1; list each machine once in the inventory'
    # A RoCE rail's address counts as a measured address too.
    got = vp.fleet_shape({'n1': _node('a' * 32, '10.0.0.1', [_rail(link='Ethernet', address='192.168.1.5')]),
                          'n2': _node('b' * 32, '10.0.0.2', [_rail(link='Ethernet', address='192.168.1.5')])})
    assert got['duplicates'][0]['value'] == '192.168.1.5'
    got = vp.fleet_shape({'n1': _node('a' * 32, '10.0.0.1', guids=['0x946dae0300cde72c']),
                          'n2': _node('b' * 32, '10.0.0.2', guids=['0x946DAE0300CDE72C'])})
    assert got['duplicates'][0]['by'] == 'guid'


def test_rails_that_do_not_match_stop_the_run():
    got = vp.fleet_shape({'n1': _node('a' * 32, '10.0.0.1'), 'n2': _node('b' * 32, '10.0.0.2', rails=[]),
                          'n3': _node('c' * 32, '10.0.0.3', problems=['HCA mlx5_4 (in the NCCL HCA list) is not on this node'])})
    assert got['problems'] == [
        'n3: HCA mlx5_4 (in the NCCL HCA list) is not on this node',
        'n2: 0 rail(s) (none), most nodes have 1 (InfiniBand): the NCCL HCAs must match across nodes',
        'n2: no NCCL rail, while n1, n3 have some: the rails must match across the nodes (check the ports with rdma_facts, '
        'or name the HCAs in validate_nccl_hcas)']
    # Switched off: the rails are not looked at.
    assert vp.fleet_shape({'n1': _node('a' * 32, '10.0.0.1'), 'n2': _node('b' * 32, '10.0.0.2', rails=[])}, 'false')['problems'] == []


def test_rdma_pairs_forced_on_without_any_rail():
    nodes = {'n1': _node('a' * 32, '10.0.0.1', rails=[], present=False), 'n2': _node('b' * 32, '10.0.0.2', rails=[], present=False)}
    assert vp.fleet_shape(nodes)['problems'] == [] and not vp.fleet_shape(nodes)['rails_on']
    said = vp.fleet_shape(nodes, 'true', '/sys')['problems']
    assert said == ['validate_rdma_pairs=true but no validated node has an NCCL rail (an active port of an HCA in '
                    'validate_nccl_hcas, or of an HCA beside a GPU) and rdma_facts found no RDMA device under /sys: name the '
                    'HCAs in validate_nccl_hcas, or set validate_rdma_pairs=auto']
    with pytest.raises(vp.PlanInputError, match='rdma_pairs must be one of auto, true, false'):
        vp.fleet_shape(nodes, 'yes')


def test_one_node_measures_no_pair():
    assert not vp.fleet_shape({'n1': _node('a' * 32, '10.0.0.1')})['rails_on']


# --------------------------------------------------------------------------- Slurm reservation

SQUEUE = ('4242|alice|RUNNING|node[01-02]\n4243|bob|PENDING|(Resources)\n4244|carol|COMPLETING|node03\n'
          'not a line\n')


def test_busy_jobs_are_those_holding_the_nodes():
    jobs = vp.busy_jobs(SQUEUE)
    assert [j['job'] for j in jobs] == ['4242', '4244']
    assert vp.describe_jobs(jobs) == 'job 4242 (alice, RUNNING on node[01-02]); job 4244 (carol, COMPLETING on node03)'
    assert vp.busy_jobs('') == [] and vp.busy_jobs(None) == []
    many = [{'job': str(i), 'user': 'u', 'state': 'RUNNING', 'nodes': 'n'} for i in range(12)]
    assert vp.describe_jobs(many).endswith('; and 2 more')
    with pytest.raises(vp.PlanInputError, match='squeue_output must be the text squeue printed'):
        vp.busy_jobs(b'1|a|RUNNING|n')


def test_reservation_command():
    assert vp.reservation_argv('gpucluster-validate-20261203050000', ['node1', 'node2'], 120) == [
        'scontrol', 'create', 'reservation', 'ReservationName=gpucluster-validate-20261203050000', 'StartTime=now',
        'Duration=120', 'Nodes=node1,node2', 'Users=root']
    assert vp.reservation_argv('r', ['n1'], 10, ['root'], ignore_jobs=True)[-1] == 'Flags=IGNORE_JOBS'


@pytest.mark.parametrize('args, says', [
    (('', ['n1'], 10), 'name must name the reservation'),
    (('r x', ['n1'], 10), 'name must be empty or a Slurm name'),
    (('r', [], 10), 'nodes must be a non-empty list of Slurm node names'),
    (('r', ['n1', 'n1'], 10), 'nodes must not repeat a node'),
    (('r', ['n1,n2'], 10), 'nodes must be a non-empty list of Slurm node names'),
    (('r', ['n1'], 0), 'minutes must be a whole number of at least 1'),
    (('r', ['n1'], 10, []), 'users must be a non-empty list of user names'),
])
def test_reservation_command_refuses_bad_arguments(args, says):
    with pytest.raises(vp.PlanInputError, match=re.escape(says)):
        vp.reservation_argv(*args)


def test_parse_reservation():
    text = ('ReservationName=maint StartTime=2026-12-03T05:00:00 EndTime=2026-12-03T07:00:00 Duration=02:00:00 '
            'Nodes=node[1-3] NodeCnt=3 CoreCnt=96 Features=(null) PartitionName=(null) Flags=MAINT,IGNORE_JOBS '
            'TRES=cpu=96 Users=root Groups=(null) Accounts=(null) Licenses=(null) State=ACTIVE BurstBuffer=(null)\n')
    assert vp.parse_reservation(text) == {'name': 'maint', 'state': 'ACTIVE', 'nodes': 'node[1-3]', 'users': 'root',
                                          'flags': 'MAINT,IGNORE_JOBS', 'start': '2026-12-03T05:00:00',
                                          'end': '2026-12-03T07:00:00'}
    assert vp.parse_reservation('Reservation maint not found\n') is None and vp.parse_reservation(None) is None


# --------------------------------------------------------------------------- job steps

def test_every_job_step_names_its_nodes_and_has_a_time_limit():
    argv = vp.srun_argv('ddp', ['n1', 'n2'], 10, 1, 8, 'gpu', 'gpucluster-validate-1', {'B': '2', 'A': 'x'}, None,
                        'nvcr.io#nvidia/pytorch:24.05-py3')
    assert argv == ['srun', '--job-name=ddp', '--nodes=2', '--nodelist=n1,n2', '--ntasks-per-node=1', '--time=10',
                    '--gpus-per-node=8', '--reservation=gpucluster-validate-1', '--partition=gpu', '--export=ALL,A=x,B=2',
                    '--container-image=nvcr.io#nvidia/pytorch:24.05-py3']
    assert vp.srun_argv('ddp', ['n1'], 1) == ['srun', '--job-name=ddp', '--nodes=1', '--nodelist=n1',
                                              '--ntasks-per-node=1', '--time=1', '--export=ALL']


@pytest.mark.parametrize('kwargs, says', [
    ({'minutes': 0}, 'minutes must be a whole number of at least 1'),
    ({'minutes': None}, 'minutes must be a whole number'),
    ({'nodes': []}, 'nodes must be a non-empty list'),
    ({'export': {'A': 'x,y'}}, 'export must map variable names to values without commas'),
    ({'export': {'1A': 'x'}}, 'export must map variable names'),
    ({'gpus_per_node': 0}, 'gpus_per_node must be a whole number of at least 1'),
    ({'container_image': 'two words'}, 'container_image must be empty or an image reference'),
    ({'reservation': 'a b'}, 'reservation must be empty or a Slurm name'),
])
def test_job_steps_refuse_what_cannot_be_bounded_or_named(kwargs, says):
    args = {'job_name': 'j', 'nodes': ['n1'], 'minutes': 5}
    args.update(kwargs)
    with pytest.raises(vp.PlanInputError, match=re.escape(says)):
        vp.srun_argv(**args)


def test_nccl_on_one_node_and_across_the_nodes():
    node = vp.nccl_argv('node', '/opt/nccl-tests/build/', ['n1'], 8, 20, 'nccl', reservation='r1')
    assert node == ['srun', '--job-name=nccl', '--nodes=1', '--nodelist=n1', '--ntasks-per-node=1', '--time=20',
                    '--gpus-per-node=8', '--reservation=r1', '--export=ALL,NCCL_DEBUG=INFO',
                    '/opt/nccl-tests/build/all_reduce_perf', '-b', '8', '-e', '16G', '-f', '2', '-g', '8']
    fleet = vp.nccl_argv('fleet', '/opt/nccl-tests/build', ['n1', 'n2'], 8, 20, 'nccl', export={'NCCL_SOCKET_IFNAME': 'ib0'})
    assert fleet == ['srun', '--job-name=nccl', '--nodes=2', '--nodelist=n1,n2', '--ntasks-per-node=8', '--time=20',
                     '--gpus-per-node=8', '--export=ALL,NCCL_DEBUG=INFO,NCCL_SOCKET_IFNAME=ib0', '--mpi=pmix',
                     '/opt/nccl-tests/build/all_reduce_perf', '-b', '8', '-e', '16G', '-f', '2', '-g', '1']
    with pytest.raises(vp.PlanInputError, match='a node run takes exactly one node'):
        vp.nccl_argv('node', '/x', ['n1', 'n2'], 8, 20, 'nccl')
    with pytest.raises(vp.PlanInputError, match='a fleet run takes at least two nodes'):
        vp.nccl_argv('fleet', '/x', ['n1'], 8, 20, 'nccl')
    with pytest.raises(vp.PlanInputError, match='tests_dir must be the absolute directory'):
        vp.nccl_argv('node', 'build', ['n1'], 8, 20, 'nccl')
    with pytest.raises(vp.PlanInputError, match='kind must be node or fleet'):
        vp.nccl_argv('pair', '/x', ['n1'], 8, 20, 'nccl')


# --------------------------------------------------------------------------- the smoke test's verdict

def _ddp_lines(world, hosts, backend='gloo', result='ok', prefix='[default0]:'):
    lines = []
    rank = 0
    for host in hosts:
        for local in range(world // len(hosts)):
            lines.append('%sgpucluster-ddp rank=%d world=%d local_rank=%d host=%s.lab backend=%s sum=21 expected=21 result=%s'
                         % (prefix, rank, world, local, host, backend, result))
            rank += 1
    return '\n'.join(lines) + '\n'


def test_ddp_verdict_passes_and_says_the_backend():
    got = vp.ddp_verdict(_ddp_lines(6, ['node1', 'node2', 'node3']), 0, ['node1', 'node2', 'node3'], 2, 'gloo')
    assert got['ok'] and got['message'] == ('6 of 6 ranks joined and summed right on 3 of 3 nodes (node1, node2, node3); '
                                            'backend gloo (no GPU: gloo)')
    assert len(got['lines']) == 6 and got['lines'][0].startswith('gpucluster-ddp rank=0 world=6')


def test_ddp_verdict_fails_a_fall_back_to_gloo_on_gpu_nodes():
    got = vp.ddp_verdict(_ddp_lines(16, ['g1', 'g2']), 0, ['g1', 'g2'], 8, 'nccl')
    assert not got['ok']
    assert got['message'].endswith('0 of 16 ranks joined and summed right; backend gloo ran where nccl was expected '
                                   '(the job saw no GPU: torch.cuda.is_available() was false in it)')
    no_gpu = _ddp_lines(2, ['g1', 'g2'], backend='nccl-without-gpu', result='no_gpu')
    assert 'backend nccl-without-gpu ran where nccl was expected' in vp.ddp_verdict(no_gpu, 1, ['g1', 'g2'], 1, 'nccl')['message']


def test_ddp_verdict_missing_ranks_and_nodes():
    got = vp.ddp_verdict(_ddp_lines(4, ['node1', 'node2']), 0, ['node1', 'node2', 'node3'], 2, 'gloo')
    assert not got['ok'] and 'ranks ran on node1, node2, expected node1, node2, node3' in got['message']
    got = vp.ddp_verdict('', 1, ['node1'], 1, 'gloo')
    assert got['message'].startswith('0 of 1 ranks joined') and 'srun rc=1' in got['message']
    with pytest.raises(vp.PlanInputError, match='backend must be one of nccl, gloo'):
        vp.ddp_verdict('', 0, ['n'], 1, 'mpi')
