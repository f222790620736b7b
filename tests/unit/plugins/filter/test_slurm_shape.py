# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Declared node shapes with live facts as checks, kept definitions, RealMemory, drains."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest
from hypothesis import given, strategies as st

from ansible.errors import AnsibleFilterError
from ansible_collections.gpucluster.core.plugins.filter import slurm as s
from ansible_collections.gpucluster.core.plugins.module_utils import scheduler as sched

REPORT = 'NodeName=node1 CPUs=16 Boards=1 SocketsPerBoard=2 CoresPerSocket=8 ThreadsPerCore=1 RealMemory=257000\n'
SHAPE = {'name': 'node1', 'gpus': 2, 'gpu_type': 'rtx_a5000', 'memory_mib': 257000,
         'reserve_mib': 1024, 'reserve_percent': 3, 'round_mib': 1024}


def _gpu(n=2, status='ok', name='NVIDIA RTX A5000', minors=None, issues=None):
    minors = minors or list(range(n))
    return {'present': n > 0, 'count': n,
            'devices': [{'index': i, 'minor_number': minors[i], 'name': name, 'uuid': 'GPU-%d' % i} for i in range(n)],
            'health': {'status': status, 'issues': issues or []}}


def _line(plan):
    return s.node_line(plan['node'])


# --- RealMemory ---------------------------------------------------------------------------------

@pytest.mark.parametrize('memory, reserve, percent, step, expected', [
    (257000, 1024, 3, 1024, 248832),      # 3% = 7710 MiB > 1024; 249290 rounded down to 243 GiB
    (24105, 1024, 3, 1024, 22528),        # 3% = 724 < 1024: the minimum reserve wins
    (2063731, 1024, 0, 1024, 2062336),
    (4096, 0, 0, 1, 4096),
])
def test_real_memory(memory, reserve, percent, step, expected):
    assert s.real_memory(memory, reserve, percent, step) == expected


def test_real_memory_does_not_churn_on_small_changes():
    # Firmware or a kernel update moves MemTotal by a few MiB: RealMemory stays.
    assert len(set(s.real_memory(m, 1024, 3, 1024) for m in range(257000, 257040))) == 1


@given(st.integers(min_value=2048, max_value=1 << 24), st.integers(min_value=0, max_value=4096),
       st.integers(min_value=0, max_value=50), st.sampled_from([1, 256, 1024, 4096]))
def test_real_memory_properties(memory, reserve, percent, step):
    try:
        value = s.real_memory(memory, reserve, percent, step)
    except AnsibleFilterError:
        assert memory - max(reserve, -(-memory * percent // 100)) < step
        return
    assert value % step == 0
    assert value <= memory - reserve
    assert value <= memory - memory * percent / 100.0
    assert value > memory - max(reserve, -(-memory * percent // 100)) - step


@pytest.mark.parametrize('args, message', [
    (('lots', 1024, 3, 1024), 'slurm_node_memory_mib'),
    ((4096, -1, 3, 1024), 'slurm_real_memory_reserve_mib'),
    ((4096, 1024, 95, 1024), 'slurm_real_memory_reserve_percent: 95 is not accepted'),
    ((4096, 1024, 3, 0), 'slurm_real_memory_round_mib: 0 is not accepted'),
    ((1500, 1024, 3, 1024), 'leaves no memory for jobs'),
    ((4096, True, 3, 1024), 'slurm_real_memory_reserve_mib'),
])
def test_real_memory_bad_input(args, message):
    with pytest.raises(AnsibleFilterError, match=message):
        s.real_memory(*args)


# --- declared shape, facts as checks --------------------------------------------------------------

def test_declared_shape_with_agreeing_facts():
    plan = s.node_plan(REPORT, _gpu(2, minors=[1, 0]), SHAPE)
    assert plan['problems'] == [] and plan['notes'] == []
    assert _line(plan) == ('NodeName=node1 CPUs=16 Boards=1 SocketsPerBoard=2 CoresPerSocket=8 ThreadsPerCore=1 '
                           'RealMemory=248832 Gres=gpu:rtx_a5000:2 State=UNKNOWN')
    # Device files come from the facts (minor numbers need not follow the index).
    assert s.gres_lines([plan['node']]) == ['NodeName=node1 Name=gpu Type=rtx_a5000 File=/dev/nvidia1',
                                            'NodeName=node1 Name=gpu Type=rtx_a5000 File=/dev/nvidia0']


def test_a_lost_gpu_keeps_the_declared_definition_and_is_a_problem():
    good = s.node_plan(REPORT, _gpu(2), SHAPE)
    lost = s.node_plan(REPORT, _gpu(1), SHAPE, previous=good['node'])
    assert _line(lost) == _line(good)
    assert s.gres_lines([lost['node']]) == s.gres_lines([good['node']])
    assert lost['problems'] == ['slurm_node_gpus=2 but nvidia-smi reports 1 GPU']


def test_critical_facts_keep_the_declared_definition():
    # A raised driver pin without a reboot: user space does not match the module, nvidia-smi fails.
    broken = {'present': True, 'count': 0, 'devices': [],
              'health': {'status': 'critical', 'issues': [
                  {'gpu': None, 'check': 'driver', 'severity': 'critical',
                   'message': 'Failed to initialize NVML: Driver/library version mismatch'}]}}
    good = s.node_plan(REPORT, _gpu(2), SHAPE)
    plan = s.node_plan(REPORT, broken, SHAPE, previous=good['node'])
    assert _line(plan) == _line(good)
    assert s.gres_lines([plan['node']]) == s.gres_lines([good['node']])
    assert plan['problems'][0] == 'GPU health critical: Failed to initialize NVML: Driver/library version mismatch'
    assert 'nvidia-smi reports 0 GPUs' in plan['problems'][1]


def test_critical_facts_with_all_gpus_still_use_the_kept_files():
    good = s.node_plan(REPORT, _gpu(2, minors=[1, 0]), SHAPE)
    issue = {'gpu': 0, 'check': 'xid', 'severity': 'critical', 'message': 'Xid 79: fallen off the bus'}
    plan = s.node_plan(REPORT, _gpu(2, status='critical', issues=[issue]), SHAPE, previous=good['node'])
    assert s.gres_lines([plan['node']]) == s.gres_lines([good['node']])
    assert plan['problems'] == ['GPU health critical: GPU 0: Xid 79: fallen off the bus']


def test_a_failed_dimm_keeps_real_memory_and_is_a_problem():
    plan = s.node_plan(REPORT.replace('RealMemory=257000', 'RealMemory=224000'), _gpu(2), SHAPE)
    assert plan['node']['real_memory'] == 248832
    assert plan['problems'] == ['RealMemory=248832 MiB but slurmd -C reports 224000 MiB']


def test_declared_gpus_without_facts_use_plain_device_files():
    plan = s.node_plan(REPORT, None, dict(SHAPE, gpus=4))
    assert s.gres_lines([plan['node']]) == ['NodeName=node1 Name=gpu Type=rtx_a5000 File=/dev/nvidia[0-3]']
    assert plan['problems'] == []


def test_gpu_type_map_disagreement_is_a_problem():
    plan = s.node_plan(REPORT, _gpu(2, name='NVIDIA L4'), dict(SHAPE, gpu_type_map={'NVIDIA L4': 'l4'}))
    assert plan['problems'] == ['slurm_gpu_type=rtx_a5000 but slurm_gpu_type_map names the GPUs l4']


def test_cpu_only_node_declared_with_zero_gpus():
    plan = s.node_plan(REPORT, {'present': False, 'devices': []}, dict(SHAPE, gpus=0, gpu_type=''))
    assert 'Gres=' not in _line(plan) and plan['problems'] == []


def test_mem_spec_limit_on_the_line_and_checked():
    plan = s.node_plan(REPORT, _gpu(2), dict(SHAPE, mem_spec_limit=4096))
    assert 'RealMemory=248832 MemSpecLimit=4096 ' in _line(plan)
    with pytest.raises(AnsibleFilterError, match='slurm_mem_spec_limit_mib: 248832 MiB is not accepted'):
        s.node_plan(REPORT, _gpu(2), dict(SHAPE, mem_spec_limit=248832))


@pytest.mark.parametrize('gpus', [-1, 'two', 1.5, True])
def test_bad_gpu_count_is_refused(gpus):
    with pytest.raises(AnsibleFilterError, match='slurm_node_gpus'):
        s.node_plan(REPORT, _gpu(2), dict(SHAPE, gpus=gpus))


# --- no shape declared: derived once, then kept ---------------------------------------------------

def test_undeclared_shape_is_derived_once_then_kept():
    bare = {'name': 'node1', 'reserve_mib': 1024, 'reserve_percent': 3, 'round_mib': 1024}
    first = s.node_plan(REPORT, _gpu(2), bare)
    assert 'Gres=gpu:rtx_a5000:2' in _line(first) and first['problems'] == []
    assert any('derived once from gpu_facts' in n for n in first['notes'])
    assert any('RealMemory=248832 derived once' in n for n in first['notes'])
    kept = s.kept_nodes(s.node_line(first['node']) + '\n', '\n'.join(s.gres_lines([first['node']])))
    later = s.node_plan(REPORT.replace('RealMemory=257000', 'RealMemory=240000'), _gpu(1), bare,
                        previous=kept['node1'])
    assert _line(later) == _line(first)
    assert later['problems'] == ['RealMemory=248832 MiB but slurmd -C reports 240000 MiB',
                                 'slurm.conf has 2 GPUs but nvidia-smi reports 1']


def test_undeclared_shape_with_critical_facts_is_left_out():
    plan = s.node_plan(REPORT, _gpu(2, status='critical'), {'name': 'node1'})
    assert plan['node'] is None
    assert 'declare slurm_node_gpus' in plan['notes'][0]


def test_no_report_keeps_the_current_definition_or_says_it_cannot_know():
    kept = s.kept_nodes('NodeName=node1 CPUs=16 Boards=1 SocketsPerBoard=2 CoresPerSocket=8 ThreadsPerCore=1 '
                        'RealMemory=248832 Gres=gpu:rtx_a5000:2 State=UNKNOWN\n',
                        'NodeName=node1 Name=gpu Type=rtx_a5000 File=/dev/nvidia[0-1]\n')
    plan = s.node_plan('', None, SHAPE, previous=kept['node1'])
    assert _line(plan).startswith('NodeName=node1 CPUs=16 ')
    assert 'CPU layout kept' in plan['notes'][0]
    fresh = s.node_plan('', None, SHAPE)
    assert fresh['node'] is None and 'not described yet' in fresh['notes'][0]


# --- kept definitions (unreachable nodes) ---------------------------------------------------------

CONF = '''# managed
ClusterName=c
NodeName=node1 NodeAddr=10.0.0.1 CPUs=16 Boards=1 SocketsPerBoard=2 CoresPerSocket=8 ThreadsPerCore=1 \
RealMemory=248832 MemSpecLimit=2048 Gres=gpu:rtx_a5000:2 Feature=ib Weight=5 State=UNKNOWN
NodeName=node2 CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=23552 State=UNKNOWN
NodeName=gpu[01-04] CPUs=2 RealMemory=1
PartitionName=gpu Nodes=node1,node2 Default=YES
'''
GRES = '''# managed
NodeName=node1 Name=gpu Type=rtx_a5000 File=/dev/nvidia1 Cores=0-7
NodeName=node1 Name=gpu Type=rtx_a5000 File=/dev/nvidia0 Cores=8-15
'''


def test_kept_nodes_give_back_the_same_lines():
    kept = s.kept_nodes(CONF, GRES)
    assert sorted(kept) == ['node1', 'node2']
    assert s.node_line(kept['node1']) == CONF.splitlines()[2]
    assert s.node_line(kept['node2']) == CONF.splitlines()[3]
    assert s.gres_lines([kept['node1'], kept['node2']]) == GRES.splitlines()[1:]


def test_kept_nodes_of_nothing():
    assert s.kept_nodes('', '') == {}
    assert s.kept_nodes(None, None) == {}


@pytest.mark.parametrize('spec, expected', [
    ('/dev/nvidia[0-3]', ['/dev/nvidia0', '/dev/nvidia1', '/dev/nvidia2', '/dev/nvidia3']),
    ('/dev/nvidia[0,2-3]', ['/dev/nvidia0', '/dev/nvidia2', '/dev/nvidia3']),
    ('/dev/nvidia5', ['/dev/nvidia5']),
    ('/dev/nvidia[0-1],/dev/nvidia4', ['/dev/nvidia0', '/dev/nvidia1', '/dev/nvidia4']),
])
def test_expand_files(spec, expected):
    assert s.expand_files(spec) == expected
    assert s.expand_files(s.compress_files(expected)) == expected


@pytest.mark.parametrize('spec, message', [
    ('/dev/nvidia[0-999999999]', 'names 1000000000 device files; at most 256'),
    ('/dev/nvidia[0-255],/dev/nvidia[0-1]', 'names 258 device files'),
    ('/dev/nvidia[7-3]', 'it runs backwards'),
    ('/dev/nvidia[1-99999999999999999]', 'cannot read the device range'),
    ('/dev/nvidia[1--3]', 'cannot read the device range'),
])
def test_expand_files_refuses_huge_ranges_without_expanding_them(spec, message):
    with pytest.raises(AnsibleFilterError, match=message):
        s.expand_files(spec)
    assert len(s.expand_files('/dev/nvidia[0-255]')) == s.GRES_FILES_MAX


def test_kept_nodes_refuse_a_huge_range_naming_the_line():
    gres = 'NodeName=node1 Name=gpu Type=rtx_a5000 File=/dev/nvidia[0-999999999]\n'
    with pytest.raises(AnsibleFilterError) as err:
        s.kept_nodes(CONF, gres)
    assert "gres.conf line 'NodeName=node1 Name=gpu Type=rtx_a5000 File=/dev/nvidia[0-999999999]'" in str(err.value)


def _twice(n=2):
    """gpu_facts with GPU 0 listed twice and GPU 1 missing (same count, wrong identities)."""
    gpu = _gpu(n)
    gpu['devices'][1] = dict(gpu['devices'][0])
    return gpu


def test_a_gpu_listed_twice_is_a_problem_not_a_duplicated_file():
    good = s.node_plan(REPORT, _gpu(2, minors=[1, 0]), SHAPE)
    plan = s.node_plan(REPORT, _twice(), SHAPE, previous=good['node'])
    # The kept device files stay; the identities are the problem (the node is drained with it).
    assert s.gres_lines([plan['node']]) == s.gres_lines([good['node']])
    assert plan['problems'] == ['nvidia-smi lists the GPU with UUID GPU-0 more than once',
                                'nvidia-smi lists the GPU with index 0 more than once',
                                'nvidia-smi lists the GPU with minor number 0 more than once']
    # Without a kept record the plain files 0..N-1 are used, never the duplicated one.
    plan = s.node_plan(REPORT, _twice(), SHAPE)
    assert s.gres_lines([plan['node']]) == ['NodeName=node1 Name=gpu Type=rtx_a5000 File=/dev/nvidia[0-1]']
    drain = s.shape_drain_plan([_show('node1', 'IDLE')], {'node1': plan['problems']})
    assert drain['drain'][0]['reason'].startswith('gpucluster/shape#')
    assert 'UUID GPU-0 more than once' in drain['drain'][0]['reason']


def test_a_gpu_listed_twice_without_a_declared_shape_leaves_the_node_out():
    plan = s.node_plan(REPORT, _twice(), {'name': 'node1'})
    assert plan['node'] is None and 'inconsistent (nvidia-smi lists the GPU with UUID GPU-0' in plan['notes'][0]
    with pytest.raises(AnsibleFilterError, match='cannot describe its GPUs: nvidia-smi lists the GPU with UUID'):
        s.node_record(REPORT, _twice())


def test_duplicate_pci_bus_ids_are_a_problem():
    gpu = _gpu(2)
    for dev in gpu['devices']:
        dev['pci_address'] = '0000:81:00.0'
    assert s.gpu_identity_problems(gpu) == ['nvidia-smi lists the GPU with PCI bus id 0000:81:00.0 more than once']
    assert s.gpu_identity_problems(_gpu(8)) == []
    assert s.gpu_identity_problems({}) == [] and s.gpu_identity_problems(None) == []


def test_gres_lines_never_write_a_device_file_twice():
    node = {'name': 'node1', 'gres': [{'type': 'a', 'count': 2, 'files': ['/dev/nvidia0', '/dev/nvidia0'],
                                       'cores': []}]}
    with pytest.raises(AnsibleFilterError, match='would name /dev/nvidia0 twice for node node1'):
        s.gres_lines([node])
    # A duplicated line in the current gres.conf is not kept as the node's files either.
    gres = ('NodeName=node1 Name=gpu Type=rtx_a5000 File=/dev/nvidia0\n'
            'NodeName=node1 Name=gpu Type=rtx_a5000 File=/dev/nvidia0\n')
    kept = s.kept_nodes(CONF, gres)['node1']
    plan = s.node_plan(REPORT, _twice(), SHAPE, previous=kept)
    assert s.gres_lines([plan['node']]) == ['NodeName=node1 Name=gpu Type=rtx_a5000 File=/dev/nvidia[0-1]']


# --- per-GPU defaults -----------------------------------------------------------------------------

def test_default_per_gpu_takes_the_smallest_share():
    nodes = [{'cpus': 64, 'real_memory': 500000, 'mem_spec_limit': 4000, 'gres': [{'count': 8}]},
             {'cpus': 16, 'real_memory': 248832, 'gres': [{'count': 2}]},
             {'cpus': 2, 'real_memory': 1000, 'gres': []}]
    assert s.default_per_gpu(nodes) == {'cpus': 8, 'memory': 62000}
    assert s.default_per_gpu([{'cpus': 2, 'real_memory': 1000, 'gres': []}]) == {'cpus': 0, 'memory': 0}


# --- drains ---------------------------------------------------------------------------------------

def _show(name, state, reason=None, user='root'):
    """One line of `scontrol --oneliner show node` as Slurm 22.05 prints it (src/api/node_info.c)."""
    line = ('NodeName=%s Arch=x86_64 CoresPerSocket=8 CPUAlloc=0 CPUTot=16 CPULoad=0.01 AvailableFeatures=(null) '
            'ActiveFeatures=(null) Gres=gpu:rtx_a5000:2 NodeAddr=%s NodeHostName=%s Version=22.05.8 '
            'OS=Linux 6.1.0-18-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1 (2024-02-01) RealMemory=248832 '
            'AllocMem=0 FreeMem=250000 Sockets=2 Boards=1 State=%s ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A '
            'MCS_label=N/A Partitions=gpu BootTime=2026-11-29T08:00:00 SlurmdStartTime=2026-11-29T08:01:00 '
            'LastBusyTime=2026-11-29T17:00:00 CfgTRES=cpu=16,mem=243G,billing=16,gres/gpu=2 AllocTRES= '
            'CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s'
            % (name, name, name, state))
    if reason is not None:
        line += ' Reason=%s [%s@2026-11-29T17:40:01]' % (reason, user)
    return line


SHAPE_PROBLEM = 'slurm_node_gpus=2 but nvidia-smi reports 1 GPU'
OURS_SHAPE = sched.make_reason('shape', SHAPE_PROBLEM)


def test_shape_drain_plan():
    lines = [_show('node1', 'IDLE'), _show('node2', 'IDLE+DRAIN', 'gpucluster-shape: old text'),
             _show('node3', 'IDLE+DRAIN', 'gpucluster-health: xid 79'),
             _show('node4', 'IDLE+DRAIN', OURS_SHAPE), _show('node5', 'MIXED'),
             _show('node6', 'IDLE+DRAIN', sched.make_reason('shape', 'an older finding'))]
    plan = s.shape_drain_plan(lines, {
        'node1': [SHAPE_PROBLEM],
        'node2': ['GPU health critical: "quoted"\nline'],
        'node3': [SHAPE_PROBLEM],
        'node4': [SHAPE_PROBLEM],
        'node5': [],
    })
    assert plan['drain'] == [
        {'node': 'node1', 'reason': OURS_SHAPE},
        # The previous release's reason is ours: rewritten in the new form with the new findings.
        {'node': 'node2', 'reason': sched.make_reason('shape', "GPU health critical: 'quoted' line")},
    ]
    assert plan['drain'][1]['reason'].endswith(": GPU health critical: 'quoted' line")
    assert plan['resume'] == []
    # node3 is held by the health wrapper (the previous release's form): its own to lift.
    assert [x['node'] for x in plan['left']] == ['node3']
    assert 'held by gpucluster health' in plan['left'][0]['why']
    plan = s.shape_drain_plan('\n'.join(lines), {'node2': [], 'node3': [], 'node6': [], 'node9': ['x']})
    assert plan == {'drain': [], 'resume': ['node2', 'node6'], 'left': []}


# Operators' states and drains: never drained over, never resumed, whatever the facts say.
@pytest.mark.parametrize('state, reason', [
    ('DOWN', 'PSU swap, do not use'),
    ('DOWN+DRAIN', OURS_SHAPE),                 # ours, but DOWN: resuming would clear DOWN
    ('DOWN+DRAIN+NOT_RESPONDING', 'gpucluster-shape: old text'),
    ('IDLE+FAIL', 'bad fan'),
    ('IDLE+DRAIN+FAIL', OURS_SHAPE),
    ('IDLE+MAINTENANCE+RESERVED', None),
    ('MIXED+RESERVED', None),
    ('ALLOCATED+DRAIN+MAINTENANCE', OURS_SHAPE),
    ('FUTURE', None),
    ('IDLE+DRAIN+REBOOT_REQUESTED', 'Reboot ASAP'),
    ('IDLE+POWERED_DOWN', None),
    ('UNKNOWN', None),
    ('IDLE+DRAIN', 'maint: gpu swap'),
    ('IDLE+DRAIN', 'gpucluster-shapes are odd'),
    ('IDLE+DRAIN', OURS_SHAPE + ' - RMA 1234'),  # an operator edited our reason: theirs now
])
@pytest.mark.parametrize('problems', [[SHAPE_PROBLEM], []])
def test_shape_drain_plan_leaves_operator_states(state, reason, problems):
    plan = s.shape_drain_plan([_show('node2', state, reason)], {'node2': problems})
    assert plan['drain'] == [] and plan['resume'] == []
    assert [x['node'] for x in plan['left']] == (['node2'] if problems else [])


def test_shape_drain_plan_reads_reasons_with_key_value_text():
    # Our own reason with " name=" and "x=y" in it reads back whole: it is not rewritten on every run.
    reason = sched.make_reason('shape', 'GPU health critical: GPU 0: Xid 79, pid=0, name=python3, off the bus')
    lines = [_show('node2', 'IDLE+DRAIN', reason) + ' Comment=rack 4']
    problems = {'node2': ['GPU health critical: GPU 0: Xid 79, pid=0, name=python3, off the bus']}
    assert s.shape_drain_plan(lines, problems) == {'drain': [], 'resume': [], 'left': []}


def test_shape_drain_plan_refuses_bad_problems():
    with pytest.raises(AnsibleFilterError, match='problems must be a dict'):
        s.shape_drain_plan([], ['node2'])


def test_nodes_not_ready():
    lines = ['node1 idle', 'node2 down*', 'node3 drained', 'node4 idle~']
    assert s.nodes_not_ready(lines, ['node1', 'node2', 'node3', 'node4', 'node5']) == ['node2', 'node4', 'node5']
    assert s.nodes_not_ready(lines, ['node1', 'node3']) == []


# --- validate: shape values ---------------------------------------------------------------------

def _spec(**info):
    base = {'node_name': 'node1', 'real_memory': 0, 'gpu_type': ''}
    base.update(info)
    return {'controller': 'h1', 'controllers': ['h1'], 'inventory': ['h1'], 'compute': {'h1': base},
            'partitions': [{'name': 'gpu', 'nodes': 'ALL', 'default': True}], 'conf_extra': {}}


@pytest.mark.parametrize('info, message', [
    ({'gpus': -2, 'gpu_type': 'a'}, "slurm_node_gpus: h1 has -2"),
    ({'gpus': 'eight', 'gpu_type': 'a'}, "slurm_node_gpus: h1 has 'eight'"),
    ({'gpus': 2.0, 'gpu_type': 'a'}, 'slurm_node_gpus: h1 has 2.0'),
    ({'gpus': 2}, 'slurm_gpu_type: h1 declares slurm_node_gpus=2 without a GRES type'),
    ({'memory_mib': '512G'}, "slurm_node_memory_mib: h1 has '512G'"),
    ({'mem_spec_limit': -1}, 'slurm_mem_spec_limit_mib: h1 has -1'),
])
def test_validate_refuses_bad_shapes(info, message):
    errors = s.validate(_spec(**info))
    assert any(message in e for e in errors), errors


def test_validate_accepts_good_shapes():
    assert s.validate(_spec(gpus=2, gpu_type='rtx_a5000', memory_mib=257000, mem_spec_limit=2048)) == []
    assert s.validate(_spec(gpus=0)) == []
    assert s.validate(_spec(gpus='8', gpu_type='h100', memory_mib='2063731')) == []  # -e values are text
    plan = s.node_plan(REPORT, _gpu(2), dict(SHAPE, gpus='2', memory_mib='257000'))
    assert plan['node']['gres'][0]['count'] == 2 and plan['node']['real_memory'] == 248832
    assert s.validate(_spec(gpus=None, memory_mib=0)) == []


# --- cluster_nodes: unreachable, left out, retired ------------------------------------------------

def test_cluster_nodes_keep_the_dead_and_leave_out_the_unknown():
    kept = s.kept_nodes(CONF, GRES)
    live = s.node_plan('NodeName=node2 CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 '
                       'RealMemory=24105\n', {'present': False, 'devices': []}, {'name': 'node2'},
                       previous=kept['node2'])
    out = s.cluster_nodes({'h1': {'name': 'node1', 'live': False, 'plan': None},
                           'h2': {'name': 'node2', 'live': True, 'plan': live},
                           'h3': {'name': 'node3', 'live': False, 'plan': None}}, kept)
    assert [n['name'] for n in out['nodes']] == ['node1', 'node2']
    assert s.node_line(out['nodes'][0]) == s.node_line(dict(kept['node1'], host='h1'))
    assert out['names'] == {'h1': 'node1', 'h2': 'node2'}
    assert out['unreachable'] == ['h1', 'h3'] and out['kept'] == ['node1'] and out['absent'] == ['h3']
    assert out['problems'] == {'node2': []}
    assert any('node3 (h3): no definition yet' in n for n in out['notes'])


def test_a_dead_host_without_facts_finds_its_definition_by_its_inventory_name():
    # Written by one run with every host up: each NodeName line names its inventory host.
    first = s.cluster_nodes({'lab-node1': {'name': 'node1', 'live': False, 'plan': None},
                             'lab-node2': {'name': 'node2', 'live': False, 'plan': None}}, s.kept_nodes(CONF, GRES))
    assert [n['name'] for n in first['nodes']] == ['node1', 'node2']
    conf = '\n'.join(s.node_line(n) for n in first['nodes']) + '\n'
    assert conf.splitlines()[1].endswith(' State=UNKNOWN # host=lab-node2')
    kept = s.kept_nodes(conf, GRES)
    assert kept['node2']['host'] == 'lab-node2'
    # The next run cannot reach lab-node2: no hostname fact, so its name falls back to the host's.
    out = s.cluster_nodes({'lab-node1': {'name': 'node1', 'live': False, 'plan': None},
                           'lab-node2': {'name': 'lab-node2', 'live': False, 'plan': None}}, kept)
    assert [n['name'] for n in out['nodes']] == ['node1', 'node2']
    assert out['names'] == {'lab-node1': 'node1', 'lab-node2': 'node2'}
    assert out['kept'] == ['node1', 'node2'] and out['absent'] == []
    assert s.node_line(out['nodes'][1]) == conf.splitlines()[1]
    # A live host is never matched by the comment: its name comes from its facts.
    live = s.cluster_nodes({'lab-node2': {'name': 'lab-node2', 'live': True, 'plan': None}}, kept)
    assert live['absent'] == ['lab-node2']


def test_partitions_drop_absent_members_and_empty_partitions():
    names = {'h1': 'node1', 'h2': 'node2'}
    lines = s.partition_lines([{'name': 'gpu', 'nodes': 'ALL', 'default': True},
                               {'name': 'small', 'nodes': ['h2', 'h3']},
                               {'name': 'gone', 'nodes': ['h3', 'h4']}], names, ['h3', 'h4'])
    assert lines == ['PartitionName=gpu Nodes=node1,node2 Default=YES MaxTime=INFINITE State=UP',
                     'PartitionName=small Nodes=node2 Default=NO MaxTime=INFINITE State=UP']
    with pytest.raises(AnsibleFilterError, match='partition small names'):
        s.partition_lines([{'name': 'small', 'nodes': ['h2', 'h9']}], names, ['h3'])


def test_validate_accepts_absent_partition_members():
    spec = _spec()
    spec['partitions'].append({'name': 'small', 'nodes': ['h1', 'h4']})
    assert any('names h4' in e for e in s.validate(spec))
    spec['absent'] = ['h4']
    assert s.validate(spec) == []
