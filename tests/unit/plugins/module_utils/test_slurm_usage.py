# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""slurm_usage: the Slurm controller's usage metrics from squeue, sinfo and sshare output (tests/unit/fixtures/usage)."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import re

import pytest

from ansible_collections.gpucluster.core.plugins.module_utils import slurm_usage as su


def _read(own_fixtures_dir, command):
    with open(os.path.join(own_fixtures_dir, 'usage', command + '.txt')) as handle:
        return handle.read()


@pytest.fixture
def results(own_fixtures_dir):
    return dict((c, {'ok': True, 'text': _read(own_fixtures_dir, c)}) for c in su.COMMANDS)


def _values(text, metric):
    """{label text: value} of one metric in exposition text."""
    return dict((m.group(1) or '', float(m.group(2)))
                for m in re.finditer(r'^%s(\{[^}]*\})? (\S+)$' % re.escape(metric), text, re.M))


def test_command_lines():
    assert su.squeue_argv() == [
        'squeue', '--all', '--array', '--noheader', '--states=PENDING,RUNNING,CONFIGURING,COMPLETING,SUSPENDED',
        '--Format=jobid:0|,partition:0|,state:0|,reason:0|,username:0|,account:0|,numnodes:0|,tres-alloc:0']
    assert su.sinfo_argv('/usr/bin/sinfo') == [
        '/usr/bin/sinfo', '--all', '--Node', '--noheader',
        '--Format=nodelist:0|,partitionname:0|,statelong:0|,gres:0|,gresused:0']
    assert su.sshare_argv() == [
        'sshare', '--all', '--noheader', '--parsable2',
        '--format=Account,User,RawShares,NormShares,RawUsage,EffectvUsage,LevelFS,FairShare']


@pytest.mark.parametrize('tres, gpus', [
    ('cpu=16,mem=128G,node=1,billing=16,gres/gpu=4,gres/gpu:a100=4', 4),
    ('gres/gpu:a100=4,gres/gpu=4', 4), ('cpu=2,mem=4G,node=1,billing=2', 0), ('', 0), ('gres/gpu=x', 0),
    ('gres/gpumem=8G,gres/gpu=1', 1),
])
def test_tres_gpus(tres, gpus):
    assert su.tres_gpus(tres) == gpus


@pytest.mark.parametrize('gres, gpus', [
    ('gpu:a100:8(S:0-1)', 8), ('gpu:8', 8), ('gpu', 1), ('gpu:0', 0), ('gpu:(null):0(IDX:N/A)', 0),
    ('gpu:(null):2', 2), ('gpu:a100:4(IDX:0-3)', 4), ('gpu:a100:2(IDX:0-1),gpu:h100:1(IDX:4)', 3),
    ('gpu:h200:7(IDX:0,2-7)', 7), ('gpu:a100:4(S:0,1),tmpdir:400G', 4), ('tmpdir:400G,gpu:kepler:4', 4),
    ('(null)', 0), ('', 0), ('N/A', 0),
])
def test_gres_gpus(gres, gpus):
    assert su.gres_gpus(gres) == gpus


@pytest.mark.parametrize('gres', ['gpu:a100:x', 'gpu:a:b:c', ':4'])
def test_gres_that_cannot_be_read(gres):
    assert su.gres_gpus(gres) is None


@pytest.mark.parametrize('text, expected', [
    ('idle', ('idle', '', True)), ('mixed', ('mixed', '', True)), ('allocated', ('allocated', '', True)),
    ('mixed-', ('mixed', '-', True)), ('completing', ('completing', '', True)),
    ('drained', ('drained', '', False)), ('draining', ('draining', '', False)), ('down*', ('down', '*', False)),
    ('idle~', ('idle', '~', False)), ('idle*', ('idle', '*', False)), ('mixed$', ('mixed', '$', False)),
    ('allocated@', ('allocated', '@', False)), ('reserved', ('reserved', '', False)), ('inval', ('inval', '', False)),
    ('IDLE', ('idle', '', True)), ('idle+drain', (None, '', False)), ('', (None, '', False)),
])
def test_node_state(text, expected):
    assert su.node_state(text) == expected


def test_jobs_from_squeue(own_fixtures_dir):
    jobs, refused = su.parse_squeue(_read(own_fixtures_dir, 'squeue'))
    assert refused == 0 and len(jobs) == 9
    assert jobs[0] == {'job_id': '4211', 'partition': 'gpu', 'partitions': ['gpu'], 'state': 'running', 'reason': 'None',
                       'user': 'alice', 'account': 'research', 'nodes': 1, 'gpus': 4}
    assert [j['state'] for j in jobs].count('pending') == 5
    assert jobs[4]['partitions'] == ['gpu', 'debug']
    assert jobs[7]['state'] == 'running'  # COMPLETING still holds its GPU


def test_nodes_from_sinfo(own_fixtures_dir):
    nodes, refused = su.parse_sinfo(_read(own_fixtures_dir, 'sinfo'))
    assert refused == 0
    assert nodes['gpu-a04'] == {'partitions': ['gpu', 'debug'], 'state': 'idle', 'flags': '', 'usable': True,
                                'gpus': 8, 'gpus_used': 0}
    assert (nodes['gpu-a06']['state'], nodes['gpu-a06']['usable']) == ('down', False)
    assert [su.idle_gpus(nodes[n]) for n in sorted(nodes)] == [0, 4, 0, 0, 8, 0, 0, 0, 1]


def test_shares_from_sshare(own_fixtures_dir):
    accounts, users, refused = su.parse_sshare(_read(own_fixtures_dir, 'sshare'))
    assert refused == 0
    assert accounts['research'] == {'shares_normalized': 0.666667, 'usage_effective': 0.81, 'level_fairshare': 0.823045,
                                    'fairshare': None}
    assert accounts['vision']['level_fairshare'] is None
    assert users == {('root', 'root'): 1.0, ('research', 'alice'): 0.4, ('research', 'carol'): 0.8,
                     ('vision', 'bob'): 0.6}


@pytest.mark.parametrize('line, refused', [
    ('4211|gpu|RUNNING|None|alice|research|1', 1),                          # a field short
    ('4211|gpu|RUNNING|None|alice|research|1|gres/gpu=1|x', 1),             # one too many
    ('4211|gpu|PREEMPTED|None|alice|research|1|gres/gpu=1', 1),             # a state not asked for
    ('4211|gpu|RUNNING|None|alice|research|one|gres/gpu=1', 1),             # node count not a number
    ('|gpu|RUNNING|None|alice|research|1|gres/gpu=1', 1),                   # no job id
    ('4211|gpu|RUNNING|None|alice|research|1|gres/gpu=1', 0),
])
def test_squeue_lines_without_the_fields_are_counted_and_left_out(line, refused):
    jobs, count = su.parse_squeue(line + '\n\n')
    assert (len(jobs), count) == (1 - refused, refused)


def test_pending_jobs_that_idle_gpus_could_run(own_fixtures_dir):
    jobs, _refused = su.parse_squeue(_read(own_fixtures_dir, 'squeue'))
    nodes, _refused = su.parse_sinfo(_read(own_fixtures_dir, 'sinfo'))
    # 4213_1 (2 GPUs) fits gpu-a01's 4 idle; 4220 (1 GPU, gpu or debug) fits; 4213_2 waits on priority, 4222 on a
    # QOS limit: neither waits for resources; 4224 (16 GPUs on 2 nodes) needs two usable nodes with 8 idle: one.
    assert su.pending_fits(jobs, nodes) == {'gpu': 1, 'gpu,debug': 1}


@pytest.mark.parametrize('gpus, count, idle, fits', [
    (8, 1, [8], True), (9, 1, [8, 8], False), (16, 2, [8, 8], True), (16, 2, [8, 7], False),
    (3, 2, [2, 2], True), (3, 2, [2, 1], False), (1, 0, [1], True), (0, 1, [8], False),
])
def test_fit_needs_enough_idle_gpus_on_enough_nodes(gpus, count, idle, fits):
    job = {'state': 'pending', 'reason': 'Resources', 'gpus': gpus, 'nodes': count, 'partition': 'p', 'partitions': ['p']}
    nodes = dict(('n%d' % i, {'partitions': ['p'], 'usable': True, 'gpus': 8, 'gpus_used': 8 - free})
                 for i, free in enumerate(idle))
    assert su.pending_fits([job], nodes) == ({'p': 1} if fits else {})


def test_idle_gpus_of_nodes_that_take_no_jobs_do_not_count():
    job = {'state': 'pending', 'reason': 'Resources', 'gpus': 1, 'nodes': 1, 'partition': 'p', 'partitions': ['p']}
    nodes = {'n1': {'partitions': ['p'], 'usable': False, 'gpus': 8, 'gpus_used': 0},
             'n2': {'partitions': ['q'], 'usable': True, 'gpus': 8, 'gpus_used': 0}}
    assert su.pending_fits([job], nodes) == {}


def test_metrics_of_a_run(results):
    text = su.render(results, 1764700000.9, 0.1234)
    assert _values(text, 'gpucluster_slurm_scrape_failed') == {
        '{command="squeue"}': 0, '{command="sinfo"}': 0, '{command="sshare"}': 0}
    assert _values(text, 'gpucluster_slurm_scrape_timestamp_seconds') == {'': 1764700000}
    assert _values(text, 'gpucluster_slurm_scrape_duration_seconds') == {'': 0.123}
    assert _values(text, 'gpucluster_slurm_jobs')['{partition="gpu",state="pending",reason="Resources"}'] == 2
    assert _values(text, 'gpucluster_slurm_job_gpus') == {
        '{partition="cpu",state="running"}': 0, '{partition="gpu",state="pending"}': 28,
        '{partition="gpu",state="running"}': 21, '{partition="gpu,debug",state="pending"}': 1}
    assert _values(text, 'gpucluster_slurm_pending_jobs_fit_idle_gpus') == {
        '{partition="cpu"}': 0, '{partition="debug"}': 0, '{partition="gpu"}': 1, '{partition="gpu,debug"}': 1}
    assert _values(text, 'gpucluster_slurm_node_gpus_idle')['{node="gpu-a04"}'] == 8
    assert _values(text, 'gpucluster_slurm_node_state')['{node="gpu-a06",state="down",usable="0"}'] == 1
    assert _values(text, 'gpucluster_slurm_user_gpus')['{user="bob",state="running"}'] == 16
    assert _values(text, 'gpucluster_slurm_account_gpus')['{account="vision",state="pending"}'] == 24
    assert _values(text, 'gpucluster_slurm_user_fairshare')['{account="research",user="alice"}'] == 0.4
    assert 'gpucluster_slurm_account_fairshare' not in text   # fair tree: no account factor, nothing invented
    assert not re.search(r' (NaN|[+-]?[Ii]nf)$', text, re.M)


def test_every_family_is_declared(results):
    text = su.render(results, 0, 0)
    written = set(re.findall(r'^# TYPE (\S+) gauge$', text, re.M))
    assert written <= set(su.METRIC_NAMES)
    assert set(su.METRIC_NAMES) - written == {'gpucluster_slurm_account_fairshare'}


@pytest.mark.parametrize('failed, absent, present', [
    ('squeue', ['gpucluster_slurm_jobs', 'gpucluster_slurm_user_gpus', 'gpucluster_slurm_pending_jobs_fit_idle_gpus'],
     ['gpucluster_slurm_node_gpus', 'gpucluster_slurm_user_fairshare']),
    ('sinfo', ['gpucluster_slurm_node_gpus', 'gpucluster_slurm_node_state', 'gpucluster_slurm_pending_jobs_fit_idle_gpus'],
     ['gpucluster_slurm_jobs', 'gpucluster_slurm_user_fairshare']),
    ('sshare', ['gpucluster_slurm_user_fairshare', 'gpucluster_slurm_account_usage_effective'],
     ['gpucluster_slurm_jobs', 'gpucluster_slurm_node_gpus', 'gpucluster_slurm_pending_jobs_fit_idle_gpus']),
])
def test_a_failed_command_leaves_out_its_families_never_stale_ones(results, failed, absent, present):
    results[failed] = {'ok': False, 'text': ''}
    text = su.render(results, 5, 1)
    assert _values(text, 'gpucluster_slurm_scrape_failed')['{command="%s"}' % failed] == 1
    for metric in absent:
        assert metric + '{' not in text
    for metric in present:
        assert metric + '{' in text


def test_sshare_left_out_when_accounting_is_off(results):
    del results['sshare']
    text = su.render(results, 5, 1)
    assert 'command="sshare"' not in text and 'fairshare' not in text


def test_everything_failed_is_still_a_file():
    text = su.render(dict((c, {'ok': False, 'text': ''}) for c in su.COMMANDS), 7, 30.0)
    assert sorted(set(re.findall(r'^(gpucluster_\w+)', text, re.M))) == [
        'gpucluster_slurm_scrape_duration_seconds', 'gpucluster_slurm_scrape_failed',
        'gpucluster_slurm_scrape_timestamp_seconds']


def test_a_huge_answer_is_cut_and_counted(monkeypatch):
    monkeypatch.setattr(su, 'MAX_LINES', 100)
    line = '1|gpu|RUNNING|None|a|b|1|gres/gpu=1\n'
    jobs, refused = su.parse_squeue(line * 105)
    assert (len(jobs), refused) == (100, 5)
