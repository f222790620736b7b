# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Who uses the GPUs, under hostile and careless input: the Prolog's environment and records (gpu_jobs), Docker's
inspect output, the answers of squeue, sinfo and sshare (slurm_usage) and of Prometheus (jobstats).

Every case states its exact outcome. Label values come from Slurm's names and a job's user cannot set them, but a
site's user and account names can hold what Linux and sssd allow (a domain user with '@', a '$'); nothing may break
a line of the textfile, reorder what a reader sees, or grow without bound.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import re

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ansible_collections.gpucluster.core.plugins.module_utils import gpu_jobs, jobstats, slurm_usage

FUZZ = settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
DEVICES = [{'index': 0, 'uuid': 'GPU-0'}, {'index': 1, 'uuid': 'GPU-1'}]
# One sample line of the exposition format: name, optional label set of escaped values, a number.
_SAMPLE_RE = re.compile(r'^[a-z_]+(\{([a-z_]+="([^"\\\n]|\\.)*",?)*\})? -?[0-9.e+]+$')
ENV = {'SLURM_JOB_ID': '42', 'SLURM_JOB_USER': 'alice', 'SLURM_JOB_ACCOUNT': 'research', 'SLURM_JOB_PARTITION': 'gpu',
       'SLURM_JOB_GPUS': '0'}


def _rendered(environ):
    record = gpu_jobs.slurm_record(environ, 0)
    assignments = dict((gpu, dict((k, record[k]) for k in ('job_id', 'user', 'account', 'partition', 'since')))
                       for gpu in record['gpus'])
    return gpu_jobs.render_prometheus(gpu_jobs.prometheus_samples('slurm', assignments, DEVICES, True))


# id, environment changes, the job_info line written (or the refusal)
ENV_CASES = [
    ('domain-user', {'SLURM_JOB_USER': 'alice@corp.example'},
     'gpucluster_gpu_job_info{gpu="0",uuid="GPU-0",job_id="42",user="alice@corp.example",account="research",partition="gpu"} 1'),
    ('quote-and-brace', {'SLURM_JOB_ACCOUNT': 'a"} evil{x="'},
     'gpucluster_gpu_job_info{gpu="0",uuid="GPU-0",job_id="42",user="alice",account="a\\"} evil{x=\\"",partition="gpu"} 1'),
    ('newline', {'SLURM_JOB_USER': 'alice\ngpucluster_health_status 0'},
     'gpucluster_gpu_job_info{gpu="0",uuid="GPU-0",job_id="42",user="alice?gpucluster_health_status 0",account="research",'
     'partition="gpu"} 1'),
    ('backslash', {'SLURM_JOB_PARTITION': 'g\\pu'},
     'gpucluster_gpu_job_info{gpu="0",uuid="GPU-0",job_id="42",user="alice",account="research",partition="g\\\\pu"} 1'),
    ('bidi-and-zero-width', {'SLURM_JOB_USER': u'ali\u200bce\u202e'},
     u'gpucluster_gpu_job_info{gpu="0",uuid="GPU-0",job_id="42",user="ali?ce?",account="research",partition="gpu"} 1'),
    ('escape-sequence', {'SLURM_JOB_USER': '\x1b[31malice'},
     'gpucluster_gpu_job_info{gpu="0",uuid="GPU-0",job_id="42",user="?[31malice",account="research",partition="gpu"} 1'),
    ('long-name', {'SLURM_JOB_ACCOUNT': 'a' * 100000},
     'gpucluster_gpu_job_info{gpu="0",uuid="GPU-0",job_id="42",user="alice",account="%s...",partition="gpu"} 1' % ('a' * 128)),
    ('no-account', {'SLURM_JOB_ACCOUNT': ''},
     'gpucluster_gpu_job_info{gpu="0",uuid="GPU-0",job_id="42",user="alice",account="",partition="gpu"} 1'),
    ('gpu-the-node-lacks', {'SLURM_JOB_GPUS': '7'}, None),
]


@pytest.mark.parametrize('changes, line', [c[1:] for c in ENV_CASES], ids=[c[0] for c in ENV_CASES])
def test_prolog_environments(changes, line):
    text = _rendered(dict(ENV, **changes))
    info = [row for row in text.splitlines() if row.startswith('gpucluster_gpu_job_info{')]
    assert info == ([line] if line else [])
    assert all(_SAMPLE_RE.match(row) for row in text.splitlines() if not row.startswith('#')), text


@pytest.mark.parametrize('changes, message', [
    ({'SLURM_JOB_ID': '42\n43'}, "SLURM_JOB_ID='42\\n43' is not a Slurm job id"),
    ({'SLURM_JOB_ID': '42"}'}, 'SLURM_JOB_ID=\'42"}\' is not a Slurm job id'),
    ({'SLURM_JOB_ID': u'\u0664\u0662'}, "is not a Slurm job id"),            # Arabic-Indic digits are not ASCII digits
    ({'SLURM_JOB_GPUS': u'\u0660'}, 'is not a list of GPU ids'),
    ({'SLURM_JOB_GPUS': '0,' * 10000}, 'names more than 64 GPUs'),
])
def test_prolog_environments_refused(changes, message):
    with pytest.raises(gpu_jobs.RecordError, match=re.escape(message)):
        gpu_jobs.slurm_record(dict(ENV, **changes), 0)


# id, what is put at gpu0.json, the problem read_records reports
RECORD_CASES = [
    ('directory', os.mkdir, 'gpu0.json: it is a directory, not a regular file'),
    ('fifo', os.mkfifo, 'gpu0.json: it is a FIFO, not a regular file'),
    ('huge', lambda p: open(p, 'w').write(' ' * (1 << 20)), 'gpu0.json: it is larger than 4096 bytes (1048576 bytes)'),
    ('deep-json', lambda p: open(p, 'w').write('[' * 4000), 'gpu0.json: not a JSON record (nested too deep)'),
    ('link-to-dev-zero', lambda p: os.symlink('/dev/zero', p), 'gpu0.json: it is a character device, not a regular file'),
    ('dangling-link', lambda p: os.symlink('/nonexistent/x', p), None),
    ('nul-bytes', lambda p: open(p, 'wb').write(b'\x00' * 10), 'gpu0.json: not a JSON record'),
    ('job-id-number', lambda p: open(p, 'w').write(json.dumps({'version': 1, 'gpu': 0, 'job_id': 42})),
     'gpu0.json: job_id 42 is not a Slurm job id'),
]


@pytest.mark.parametrize('make, problem', [c[1:] for c in RECORD_CASES], ids=[c[0] for c in RECORD_CASES])
def test_hostile_record_files(tmp_path, make, problem):
    make(str(tmp_path / 'gpu0.json'))
    assignments, problems = gpu_jobs.read_records(str(tmp_path))
    assert assignments == {}
    if problem is None:
        assert problems == []
    else:
        assert len(problems) == 1 and problems[0].startswith(problem), problems
    # The Epilog leaves what it cannot read, and never follows a link out of the directory.
    assert gpu_jobs.remove_records(str(tmp_path), '42') == []


def test_a_record_with_long_names_is_bounded(tmp_path):
    body = {'version': 1, 'gpu': 0, 'job_id': '42', 'user': 'u' * 3000, 'account': '', 'partition': 'gpu'}
    (tmp_path / 'gpu0.json').write_text(json.dumps(body))
    assignments, problems = gpu_jobs.read_records(str(tmp_path))
    assert problems == [] and assignments[0]['user'] == 'u' * 128 + '...'


@pytest.mark.parametrize('text, problem', [
    ('[' * 100000, 'docker inspect printed JSON nested too deep'),
    ('"x"', 'docker inspect printed str, not a list of containers'),
    ('[{"State": {"Running": true}, "Config": {"Labels": {"com.docker.swarm.task.id": 5}}}]', None),
    ('[{"State": {"Running": true}, "Config": {"Labels": {"com.docker.swarm.task.id": "t"}, "Env": [5, "DOCKER_RESOURCE_GPU"]}}]',
     None),
])
def test_hostile_docker_inspect(text, problem):
    if problem:
        with pytest.raises(gpu_jobs.RecordError, match=re.escape(problem)):
            gpu_jobs.swarm_assignments(text, DEVICES)
    else:
        assert gpu_jobs.swarm_assignments(text, DEVICES) == ({}, [])


def test_a_swarm_task_naming_many_gpus_is_bounded():
    env = ['DOCKER_RESOURCE_GPU=' + ','.join('GPU-x%d' % i for i in range(10000))]
    text = json.dumps([{'State': {'Running': True}, 'Config': {'Labels': {'com.docker.swarm.task.id': 't'}, 'Env': env}}])
    assignments, problems = gpu_jobs.swarm_assignments(text, DEVICES)
    assert assignments == {} and len(problems) == gpu_jobs.MAX_GPUS


# slurm_usage ----------------------------------------------------------------------------------------

@pytest.mark.parametrize('squeue, line', [
    ('1|g"p\\u|RUNNING|None|a"b|acct|1|gres/gpu=2', 'gpucluster_slurm_jobs{partition="g\\"p\\\\u",state="running",reason="None"} 1'),
    (u'1|gpu|RUNNING|None|\u202eeve|acct|1|gres/gpu=2', 'gpucluster_slurm_user_jobs{user="?eve",state="running"} 1'),
    ('1|gpu|RUNNING|None|alice|acct|1|gres/gpu=99999999999999999999', 'gpucluster_slurm_job_gpus{partition="gpu",state="running"} 0'),
    ('1|gpu|RUNNING|None|alice|acct|99999999999|gres/gpu=1', 'gpucluster_slurm_scrape_refused_lines{command="squeue"} 1'),
])
def test_hostile_squeue_lines(squeue, line):
    text = slurm_usage.render({'squeue': {'ok': True, 'text': squeue}}, 0, 0)
    assert line in text.splitlines()
    assert all(_SAMPLE_RE.match(row) for row in text.splitlines() if not row.startswith('#')), text


@pytest.mark.parametrize('sshare, absent', [
    ('acct||1|nan|1|-inf|1e400|', 'gpucluster_slurm_account_shares_normalized'),
    ('acct||1|0.5|1|inf|NaN|', 'gpucluster_slurm_account_usage_effective'),
])
def test_sshare_values_that_are_not_numbers_are_left_out(sshare, absent):
    text = slurm_usage.render({'sshare': {'ok': True, 'text': sshare}}, 0, 0)
    assert absent + '{' not in text and not re.search(r' (nan|inf|NaN|Inf|\+Inf|-Inf)$', text, re.M)


@FUZZ
@given(st.text(max_size=400))
def test_any_command_output_gives_a_valid_textfile(garbage):
    results = dict((c, {'ok': True, 'text': garbage + '\n' + garbage.replace('\n', '|')}) for c in slurm_usage.COMMANDS)
    text = slurm_usage.render(results, 0, 0)
    for row in text.splitlines():
        assert row.startswith('#') or _SAMPLE_RE.match(row), row


@FUZZ
@given(st.lists(st.sampled_from(['gpu', ':', '(', ')', ',', 'null', '4', 'IDX', 'N/A', 'a100', '-', '0']), max_size=30))
def test_gres_strings_never_raise(parts):
    value = slurm_usage.gres_gpus(''.join(parts))
    assert value is None or (isinstance(value, int) and value >= 0)


# jobstats ----------------------------------------------------------------------------------------

@pytest.mark.parametrize('answer, outcome', [
    ({'status': 'success', 'data': {'resultType': 'matrix', 'result': [{'metric': {'gpu': 0}, 'values': [[1, 'NaN']]}]}}, []),
    ({'status': 'success', 'data': {'resultType': 'matrix', 'result': [{'metric': {'gpu': '0', 'instance': 'n'},
                                                                        'values': [[1, '+Inf'], [2, '5']]}]}}, [(5.0, 5.0)]),
    ({'status': 'success', 'data': {'resultType': 'matrix', 'result': 'x'}}, 'not a matrix'),
    ({'status': 'success', 'data': {'resultType': 'matrix', 'result': [{'metric': [], 'values': []}]}}, 'not [time, value]'),
    ({'status': 'success'}, 'not a matrix'),
    ([], 'refused the query'),
])
def test_hostile_prometheus_answers(answer, outcome):
    if isinstance(outcome, str):
        with pytest.raises(jobstats.JobstatsError, match=re.escape(outcome)):
            jobstats.locate(answer)
    else:
        assert [(r['first'], r['last']) for r in jobstats.locate(answer)] == outcome
