# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""jobstats: a job's GPUs from Prometheus answers, and the verdict."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible_collections.gpucluster.core.plugins.module_utils import jobstats as js

GIB = 1024.0 ** 3


def _matrix(series):
    return {'status': 'success', 'data': {'resultType': 'matrix', 'result': [
        {'metric': m, 'values': [[1764700000.0 + 15 * i, str(v)] for i, v in enumerate(values)]} for m, values in series]}}


def _gpu(instance, gpu, **extra):
    labels = {'instance': instance, 'job': 'node', 'gpu': str(gpu), 'uuid': 'GPU-%s-%d' % (instance, gpu)}
    labels.update(extra)
    return labels


INFO = dict(job_id='42', user='alice', account='research', partition='gpu')


def _located():
    """timestamp(gpucluster_gpu_job_info{job_id="42"}) over the window: each point's value is its sample's time."""
    return _matrix([(_gpu('node2', 1, **INFO), [1060, 1300, 4600]), (_gpu('node2', 0, **INFO), [1000, 2000, 4600]),
                    (_gpu('node10', 0, **INFO), [1000, 4540])])


@pytest.mark.parametrize('job_id', ['1', '4211', '9' * 20])
def test_job_ids(job_id):
    assert js.check_job_id(job_id) == job_id


@pytest.mark.parametrize('job_id', ['', '42_1', '42.0', 'x', '"}or{', '9' * 21, None, 42])
def test_job_ids_refused(job_id):
    with pytest.raises(js.JobstatsError, match='is not a Slurm job id'):
        js.check_job_id(job_id)


@pytest.mark.parametrize('text, seconds', [('7d', 604800), ('12h', 43200), ('90m', 5400), ('30s', 30), ('2w', 1209600)])
def test_durations(text, seconds):
    assert js.seconds(text) == seconds


@pytest.mark.parametrize('text', ['', '7', 'd', '0d', '7 d', '1y', '-1d', '1000000d'])
def test_durations_refused(text):
    with pytest.raises(js.JobstatsError, match='is not a duration'):
        js.seconds(text)


def test_queries():
    assert js.locate_query('42') == 'timestamp(gpucluster_gpu_job_info{job_id="42"})'
    assert js.figure_queries('42') == {
        'gpucluster_gpu_memory_total_bytes':
            'gpucluster_gpu_memory_total_bytes * on(instance, gpu) group_left() gpucluster_gpu_job_info{job_id="42"}',
        'gpucluster_gpu_memory_used_bytes':
            'gpucluster_gpu_memory_used_bytes * on(instance, gpu) group_left() gpucluster_gpu_job_info{job_id="42"}',
        'gpucluster_gpu_utilization_percent':
            'gpucluster_gpu_utilization_percent * on(instance, gpu) group_left() gpucluster_gpu_job_info{job_id="42"}'}
    with pytest.raises(js.JobstatsError):
        js.locate_query('42"} or vector(1) or {"')


@pytest.mark.parametrize('start, end, expected', [
    (0, 604800, (0.0, 604800.0, 60.48)),        # a week: 10,000 points
    (1000, 4600, (1000.0, 4600.0, 15.0)),       # an hour: every 15 s, both ends included
    (1000, 1010, (1000.0, 1010.0, 10.0)),       # shorter than a step: its two ends
    (1000, 1000, (1000.0, 1000.0, 15.0)),       # one sighting: one point
])
def test_range_plans_include_both_ends(start, end, expected):
    got = js.plan(start, end)
    assert got[:2] == expected[:2] and got[2] == pytest.approx(expected[2])
    points = int(round((got[1] - got[0]) / got[2]))
    assert points <= js.MAX_POINTS and got[0] + points * got[2] == pytest.approx(got[1])


def test_locate_orders_gpus_by_node_and_index():
    rows = js.locate(_located())
    assert [(r['instance'], r['gpu']) for r in rows] == [('node10', '0'), ('node2', '0'), ('node2', '1')]
    assert rows[1] == {'instance': 'node2', 'gpu': '0', 'uuid': 'GPU-node2-0', 'user': 'alice', 'account': 'research',
                       'partition': 'gpu', 'first': 1000.0, 'last': 4600.0}
    assert js.span(rows) == (1000.0, 4600.0)


def test_a_gpu_seen_under_two_label_sets_is_one_row():
    answer = _matrix([(_gpu('node2', 0, **INFO), [1000, 1200]), (_gpu('node2', 0, uuid='GPU-swapped', **INFO), [3000])])
    rows = js.locate(answer)
    assert len(rows) == 1 and (rows[0]['first'], rows[0]['last']) == (1000.0, 3000.0)


def test_span_needs_gpus():
    assert js.locate(_matrix([])) == []
    with pytest.raises(js.JobstatsError, match='no GPU of the job'):
        js.span([])


@pytest.mark.parametrize('answer, fragment', [
    ({'status': 'error', 'errorType': 'bad_data', 'error': 'parse error at char 5'}, 'refused the query: parse error at char 5'),
    ({'status': 'success', 'data': {'resultType': 'vector', 'result': []}}, "answered 'vector', not a matrix"),
    ({'status': 'success', 'data': {'resultType': 'matrix', 'result': [{'metric': {}, 'values': [[1]]}]}},
     'not [time, value] points'),
    ('<html>', 'refused the query'),
])
def test_answers_that_cannot_be_used(answer, fragment):
    with pytest.raises(js.JobstatsError, match=fragment.replace('[', '\\[').replace(']', '\\]')):
        js.matrix(answer)


def _rows(means, peaks=None):
    rows = []
    for index, mean in enumerate(means):
        rows.append({'instance': 'node2', 'gpu': str(index), 'uuid': 'GPU-%d' % index, 'user': 'alice',
                     'account': 'research', 'partition': 'gpu', 'first': 1000.0, 'last': 4600.0,
                     'util_mean': mean, 'util_peak': (peaks or means)[index] if mean is not None else None,
                     'mem_mean': 2 * GIB if mean else 0.0, 'mem_peak': 3 * GIB if mean else 0.0, 'mem_total': 24 * GIB})
    return rows


@pytest.mark.parametrize('means, word, line', [
    ([0.0] * 8 + [], 'unused', '8 GPUs held, none used (mean below 10 %): check that the job runs on the GPU, or request none'),
    ([95.0] + [0.0] * 7, 'fewer', '8 GPUs held, 1 used: request fewer'),
    ([0.0], 'unused', '1 GPU held, none used (mean below 10 %): check that the job runs on the GPU, or request none'),
    ([25.0, 35.0], 'low', '2 GPUs held, all used at 30 % on average: the GPUs wait on input, communication or the CPU'),
    ([92.0, 96.0], 'ok', '2 GPUs held, all used (94 % on average)'),
    ([None, None], 'unknown', '2 GPUs held, no utilisation recorded: nothing to judge (the health program reports none)'),
    ([90.0, None], 'ok', '2 GPUs held (1 with utilisation recorded), all used (90 % on average)'),
    ([9.99, 10.0], 'fewer', '2 GPUs held, 1 used: request fewer'),
])
def test_verdict(means, word, line):
    assert js.verdict(_rows(means)) == (word, line)


def test_verdict_threshold_is_a_parameter():
    assert js.verdict(_rows([15.0]), used_percent=20)[0] == 'unused'


def test_add_figures_and_report():
    rows = js.locate(_located())
    answer = {
        'gpucluster_gpu_utilization_percent': _matrix([(_gpu('node2', 0), [0, 3, 0]), (_gpu('node2', 1), [75, 100, 87.5]),
                                                       (_gpu('node10', 0), [0, 0])]),
        'gpucluster_gpu_memory_used_bytes': _matrix([(_gpu('node2', 1), [18 * GIB, 22 * GIB, 20 * GIB]),
                                                     (_gpu('node10', 0), [float('nan')])]),
        'gpucluster_gpu_memory_total_bytes': _matrix([(_gpu('node2', 0), [24 * GIB]), (_gpu('node2', 1), [24 * GIB]),
                                                      (_gpu('node10', 0), [24 * GIB])]),
    }
    rows = js.add_figures(rows, answer)
    assert (rows[0]['mem_mean'], rows[0]['mem_peak']) == (None, None)   # NaN is no figure
    assert (rows[2]['util_mean'], rows[2]['util_peak'], rows[2]['mem_mean']) == (87.5, 100.0, 20 * GIB)
    report = js.report('42', rows)
    assert report['verdict'] == 'fewer' and report['summary'] == '3 GPUs held, 1 used: request fewer'
    assert (report['user'], report['account'], report['partition']) == ('alice', 'research', 'gpu')
    assert (report['first_seen'], report['last_seen'], report['gpus_held']) == (1000.0, 4600.0, 3)
    text = js.render_text(report)
    assert text.splitlines() == [
        'job 42: user alice, account research, partition gpu; 3 GPUs on node10, node2, seen 1970-01-01 00:16:40 UTC '
        'to 1970-01-01 01:16:40 UTC',
        'NODE    GPU  UUID          UTIL MEAN  UTIL PEAK  MEM MEAN  MEM PEAK  MEM TOTAL',
        'node10  0    GPU-node10-0  0 %        0 %        -         -         24.0 GiB',
        'node2   0    GPU-node2-0   1 %        3 %        -         -         24.0 GiB',
        'node2   1    GPU-node2-1   88 %       100 %      20.0 GiB  22.0 GiB  24.0 GiB',
        'verdict: 3 GPUs held, 1 used: request fewer']


def test_not_found_says_why():
    text = js.not_found('42', '7d')
    assert text.startswith('job 42: no GPU held by it was seen in Prometheus in the last 7d')
    assert 'held no GPU' in text and 'does not exist' in text and '--since' in text
