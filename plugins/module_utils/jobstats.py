# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpucluster-jobstats: what one job did with the GPUs it held, from Prometheus, and a one-line verdict.

The GPUs of a job are the series of ``gpucluster_gpu_job_info{job_id="<id>"}`` (the node health program
writes one per GPU the job holds: gpu_jobs.py). Two range queries (``/api/v1/query_range``, whose
evaluation points start and end exactly where asked, unlike a subquery's, which align to the step):

* where and when: ``timestamp()`` of the info series over the look-back window, ending now: each GPU
  (node, index, UUID, user, account, partition) and the first and last time it was seen held;
* what it did: each GPU metric joined with the info series (``* on(instance, gpu) group_left()``), from
  the first to the last sighting, so that only samples where this job held the GPU count; means and
  peaks are taken over the evaluation points here.

Pure code (queries, answers, verdict, text): standard library only, Python 3.9, no Ansible imports (the
slurm role's usage archive packs it; the program in roles/slurm/files/gpucluster_usage_cli.py does the HTTP).
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import math
import re
import time

from .text_bounds import clip, quote

JOB_ID_RE = re.compile(r'^[0-9]{1,20}\Z')
# A GPU whose mean utilisation over the job is below USED_PERCENT was held, not used; a job whose used GPUs
# average below LOW_PERCENT waits on something else (input, communication, the CPU).
USED_PERCENT = 10.0
LOW_PERCENT = 40.0
DEFAULT_SINCE = '7d'
# Seconds between evaluation points (at least), and points per series at most (Prometheus refuses more than 11,000).
MIN_STEP = 15
MAX_POINTS = 10000
_DURATION_RE = re.compile(r'^([1-9][0-9]{0,5})([smhdw])\Z')
_UNITS = {'s': 1, 'm': 60, 'h': 3600, 'd': 86400, 'w': 604800}
# The labels of the job that the table and the JSON show (the scheduler's names).
JOB_LABELS = ('user', 'account', 'partition')
# (figure, metric, how the points are summed up)
FIGURES = (
    ('util_mean', 'gpucluster_gpu_utilization_percent', 'mean'),
    ('util_peak', 'gpucluster_gpu_utilization_percent', 'max'),
    ('mem_mean', 'gpucluster_gpu_memory_used_bytes', 'mean'),
    ('mem_peak', 'gpucluster_gpu_memory_used_bytes', 'max'),
    ('mem_total', 'gpucluster_gpu_memory_total_bytes', 'max'),
)
FIGURE_METRICS = tuple(sorted(set(metric for _name, metric, _how in FIGURES)))


class JobstatsError(Exception):
    """A job id, a duration or an answer that cannot be used: the message says why."""


def check_job_id(job_id):
    if not isinstance(job_id, str) or not JOB_ID_RE.match(job_id):
        raise JobstatsError('%s is not a Slurm job id (digits only, as squeue prints it in JOBID)' % quote(job_id, 60))
    return job_id


def seconds(duration):
    """Seconds of a look-back such as '7d', '12h', '90m'."""
    match = _DURATION_RE.match(duration or '')
    if not match:
        raise JobstatsError('%s is not a duration (a number and s, m, h, d or w: 7d, 12h)' % quote(duration, 40))
    return int(match.group(1)) * _UNITS[match.group(2)]


def _selector(job_id):
    return 'gpucluster_gpu_job_info{job_id="%s"}' % check_job_id(job_id)


def plan(start, end):
    """(start, end, step) of a range query whose points include both ends: at least MIN_STEP apart, at most
    MAX_POINTS of them (a span shorter than a step gets its two ends)."""
    width = max(float(end) - float(start), 0.0)
    points = max(1, min(MAX_POINTS, int(math.ceil(width / MIN_STEP))))
    return float(start), float(end), (width / points) or float(MIN_STEP)


def locate_query(job_id):
    """The range query of where and when the job held GPUs (value: the time of each sample)."""
    return 'timestamp(%s)' % _selector(job_id)


def figure_queries(job_id):
    """{metric: the range query of that GPU metric while the job held the GPU}."""
    selector = _selector(job_id)
    return dict((metric, '%s * on(instance, gpu) group_left() %s' % (metric, selector)) for metric in FIGURE_METRICS)


def matrix(answer):
    """[(labels, [value, ...])] of a Prometheus range-query answer (a matrix); JobstatsError for anything else."""
    if not isinstance(answer, dict) or answer.get('status') != 'success':
        error = answer.get('error') if isinstance(answer, dict) else None
        raise JobstatsError('Prometheus refused the query: %s' % clip(str(error or quote(answer, 120)), 200))
    data = answer.get('data') or {}
    if data.get('resultType') != 'matrix' or not isinstance(data.get('result'), list):
        raise JobstatsError('Prometheus answered %s, not a matrix' % quote(data.get('resultType'), 40))
    out = []
    for item in data['result']:
        try:
            labels = dict((str(k), str(v)) for k, v in item['metric'].items())
            values = [float(point[1]) for point in item['values']]
        except (KeyError, IndexError, TypeError, ValueError, AttributeError):
            raise JobstatsError('Prometheus answered a series that is not [time, value] points: %s' % quote(item, 120))
        out.append((labels, [v for v in values if math.isfinite(v)]))
    return out


def _key(labels):
    gpu = labels.get('gpu', '')
    return (labels.get('instance', ''), int(gpu) if gpu.isdigit() else -1, gpu)


def locate(answer):
    """[{instance, gpu, uuid, user, account, partition, first, last}] of the locate_query() answer, by node and GPU.
    A GPU held by the job at two times under other labels (another UUID after a swap) is one row, its span both."""
    rows = {}
    for labels, values in matrix(answer):
        if not values:
            continue
        row = rows.setdefault(_key(labels), dict(
            [('instance', labels.get('instance', '')), ('gpu', labels.get('gpu', '')), ('uuid', labels.get('uuid', ''))]
            + [(name, labels.get(name, '')) for name in JOB_LABELS] + [('first', min(values)), ('last', max(values))]))
        row['first'], row['last'] = min(row['first'], *values), max(row['last'], *values)
    return [rows[k] for k in sorted(rows)]


def span(rows):
    """(first, last) time any GPU of the job was seen held."""
    if not rows:
        raise JobstatsError('no GPU of the job to measure')
    return min(r['first'] for r in rows), max(r['last'] for r in rows)


def add_figures(rows, answers):
    """The rows with each FIGURES value (None where Prometheus has none: a GPU that reports no utilisation).
    ``answers``: {metric: the figure_queries() answer}."""
    by_key = dict((_key(r), dict(r, **dict((name, None) for name, _m, _how in FIGURES))) for r in rows)
    for name, metric, how in FIGURES:
        for labels, values in matrix(answers[metric]):
            row = by_key.get(_key(labels))
            if row is None or not values:
                continue
            row[name] = sum(values) / len(values) if how == 'mean' else max(values)
    return [by_key[k] for k in sorted(by_key)]


def verdict(rows, used_percent=USED_PERCENT, low_percent=LOW_PERCENT):
    """(word, line): 'unused', 'fewer', 'low', 'ok' or 'unknown', and the one-line verdict."""
    held = len(rows)
    known = [r for r in rows if r.get('util_mean') is not None]
    used = [r for r in known if r['util_mean'] >= used_percent]
    gpus = '%d GPU%s held' % (held, '' if held == 1 else 's')
    if not known:
        return 'unknown', '%s, no utilisation recorded: nothing to judge (the health program reports none)' % gpus
    if len(known) < held:
        gpus += ' (%d with utilisation recorded)' % len(known)
    if not used:
        return 'unused', '%s, none used (mean below %g %%): check that the job runs on the GPU, or request none' % (
            gpus, used_percent)
    if len(used) < len(known):
        return 'fewer', '%s, %d used: request fewer' % (gpus, len(used))
    mean = sum(r['util_mean'] for r in used) / len(used)
    if mean < low_percent:
        return 'low', '%s, all used at %.0f %% on average: the GPUs wait on input, communication or the CPU' % (gpus, mean)
    return 'ok', '%s, all used (%.0f %% on average)' % (gpus, mean)


def report(job_id, rows, used_percent=USED_PERCENT, low_percent=LOW_PERCENT):
    """The job's report (what --format json prints)."""
    word, line = verdict(rows, used_percent, low_percent)
    firsts = [r['first'] for r in rows if r.get('first') is not None]
    lasts = [r['last'] for r in rows if r.get('last') is not None]
    job = dict((name, sorted(set(r[name] for r in rows if r.get(name)))) for name in JOB_LABELS)
    return {'job_id': job_id, 'gpus_held': len(rows), 'verdict': word, 'summary': line,
            'user': ', '.join(job['user']), 'account': ', '.join(job['account']),
            'partition': ', '.join(job['partition']), 'first_seen': min(firsts) if firsts else None,
            'last_seen': max(lasts) if lasts else None,
            'gpus': [dict((k, r.get(k)) for k in ('instance', 'gpu', 'uuid', 'first', 'last')
                          + tuple(name for name, _f, _m in FIGURES)) for r in rows]}


def _gib(value):
    return '-' if value is None else '%.1f GiB' % (value / 1024.0 ** 3)


def _pct(value):
    return '-' if value is None else '%.0f %%' % value


def _when(value):
    return '-' if value is None else time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(value))


def render_text(data):
    """The table and the verdict line of a report()."""
    nodes = sorted(set(g['instance'] for g in data['gpus']))
    head = 'job %s: user %s, account %s, partition %s; %d GPU%s on %s, seen %s to %s' % (
        data['job_id'], data['user'] or '-', data['account'] or '-', data['partition'] or '-', data['gpus_held'],
        '' if data['gpus_held'] == 1 else 's', ', '.join(nodes), _when(data['first_seen']), _when(data['last_seen']))
    table = [('NODE', 'GPU', 'UUID', 'UTIL MEAN', 'UTIL PEAK', 'MEM MEAN', 'MEM PEAK', 'MEM TOTAL')]
    for gpu in data['gpus']:
        table.append((gpu['instance'], gpu['gpu'], gpu['uuid'] or '-', _pct(gpu['util_mean']), _pct(gpu['util_peak']),
                      _gib(gpu['mem_mean']), _gib(gpu['mem_peak']), _gib(gpu['mem_total'])))
    widths = [max(len(str(row[i])) for row in table) for i in range(len(table[0]))]
    lines = [head] + ['  '.join(str(cell).ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in table]
    lines.append('verdict: %s' % data['summary'])
    return '\n'.join(lines) + '\n'


def not_found(job_id, since):
    """Why a job cannot be shown."""
    return ('job %s: no GPU held by it was seen in Prometheus in the last %s (gpucluster_gpu_job_info{job_id="%s"}): '
            'it held no GPU, ended before that, ran for less than one run of the node health program (which labels a GPU '
            'with its job when it runs), ran where the program does not label GPUs with jobs, or does not exist '
            '(squeue/sacct -j %s). A longer --since looks further back, within the retention.'
            % (job_id, since, job_id, job_id))
