# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node health program labels the GPUs with the job that holds them (gpu_jobs): the Slurm Prolog's records or a
Swarm task's assignment (a docker stand-in printing tests/unit/fixtures/usage/docker-inspect-swarm.json)."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os

import pytest

# The installed program (fixture) of the health program's tests.
from test_gpu_health_cli import program  # noqa: F401  pylint: disable=unused-import

from ansible_collections.gpucluster.core.plugins.module_utils import gpu_jobs

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
INSPECT = os.path.join(REPO, 'tests', 'unit', 'fixtures', 'usage', 'docker-inspect-swarm.json')
# The two GPUs of tests/unit/fixtures/gpu/two_gpus_v13_out_of_order.xml, by nvidia-smi index (PCI bus order).
UUIDS = {0: 'GPU-test0000-0000-0000-0000-000000000041', 1: 'GPU-test0000-0000-0000-0000-0000000000c1'}


def _configure(program, **keys):  # pylint: disable=redefined-outer-name
    with open(program.config) as handle:
        config = json.load(handle)
    config.update(keys)
    with open(program.config, 'w') as handle:
        json.dump(config, handle)


def _textfile(program):  # pylint: disable=redefined-outer-name
    target = program.tmp / 'textfile'
    target.mkdir(exist_ok=True)
    rc, out, err = program('--config', program.config, '--textfile', str(target))
    return rc, json.loads(out), err, (target / 'gpucluster_health.prom').read_text()


def test_without_a_job_source_nothing_changes(program):  # pylint: disable=redefined-outer-name
    rc, report, _err, text = _textfile(program)
    assert rc == 0 and 'jobs' not in report and 'gpucluster_gpu_job' not in text


def test_slurm_records_label_the_gpu_they_name(program):  # pylint: disable=redefined-outer-name
    records = str(program.tmp / 'gpu-jobs')
    env = {'SLURM_JOB_ID': '4211', 'SLURM_JOB_USER': 'alice', 'SLURM_JOB_ACCOUNT': 'research',
           'SLURM_JOB_PARTITION': 'gpu', 'SLURM_JOB_GPUS': '1'}
    gpu_jobs.write_records(records, gpu_jobs.slurm_record(env, 1764700000))
    _configure(program, job_source='slurm', job_records_dir=records)
    rc, report, err, text = _textfile(program)
    assert rc == 0, err
    assert report['status'] == 'ok'   # which job holds a GPU never changes the verdict
    assert report['jobs'] == {'source': 'slurm', 'ok': True, 'problems': [], 'gpus': [
        {'gpu': 1, 'job_id': '4211', 'user': 'alice', 'account': 'research', 'partition': 'gpu', 'since': 1764700000}]}
    assert ('gpucluster_gpu_job_info{gpu="1",uuid="%s",job_id="4211",user="alice",account="research",partition="gpu"} 1\n'
            % UUIDS[1]) in text
    assert 'gpucluster_gpu_jobs_source_up{scheduler="slurm"} 1\n' in text
    assert text.count('gpucluster_gpu_job_info{') == 1
    # The job ends: its Epilog removes the record, the next run writes no label.
    gpu_jobs.remove_records(records, '4211')
    _rc, report, _err, text = _textfile(program)
    assert report['jobs']['gpus'] == [] and 'gpucluster_gpu_job_info{' not in text


def test_no_record_yet_is_a_source_up_without_labels(program):  # pylint: disable=redefined-outer-name
    _configure(program, job_source='slurm', job_records_dir=str(program.tmp / 'absent'))
    rc, report, _err, text = _textfile(program)
    assert rc == 0 and report['jobs'] == {'source': 'slurm', 'ok': True, 'problems': [], 'gpus': []}
    assert 'gpucluster_gpu_jobs_source_up{scheduler="slurm"} 1\n' in text


def test_unreadable_records_are_a_source_down_not_a_verdict(program):  # pylint: disable=redefined-outer-name
    blocked = program.tmp / 'gpu-jobs'
    blocked.write_text('a file where the directory should be')
    _configure(program, job_source='slurm', job_records_dir=str(blocked))
    rc, report, _err, text = _textfile(program)
    assert (rc, report['status']) == (0, 'ok')
    assert report['jobs']['ok'] is False and report['jobs']['problems'] == ['%s is not a directory' % blocked]
    assert 'gpucluster_gpu_jobs_source_up{scheduler="slurm"} 0\n' in text


def test_a_record_for_a_gpu_the_node_lacks_is_a_problem(program):  # pylint: disable=redefined-outer-name
    records = str(program.tmp / 'gpu-jobs')
    gpu_jobs.write_records(records, gpu_jobs.slurm_record({'SLURM_JOB_ID': '7', 'SLURM_JOB_GPUS': '5'}, 1))
    _configure(program, job_source='slurm', job_records_dir=records)
    _rc, report, _err, text = _textfile(program)
    assert report['jobs']['problems'] == ['job 7 holds GPU 5, which nvidia-smi does not list']
    assert 'gpucluster_gpu_job_info{' not in text


def _docker(program, body):  # pylint: disable=redefined-outer-name
    bindir = program.tmp / 'bin'
    bindir.mkdir(exist_ok=True)
    docker = bindir / 'docker'
    docker.write_text('#!/bin/sh\n' + body)
    docker.chmod(0o755)
    return str(bindir)


def test_swarm_tasks_label_the_gpus_they_were_given(program, monkeypatch):  # pylint: disable=redefined-outer-name
    with open(INSPECT) as handle:
        data = json.load(handle)
    # The fixture's tasks name the lab recording's GPUs; on this node: ml_train by UUID, ml_serve by index 0.
    data[0]['Config']['Env'][2] = 'DOCKER_RESOURCE_NVIDIA-GPU=%s' % UUIDS[1].lower()
    inspect = program.tmp / 'inspect.json'
    inspect.write_text(json.dumps(data))
    bindir = _docker(program, 'case "$1" in ps) printf "%%s\\n%%s\\n" %s %s ;; inspect) cat "%s" ;; esac\n'
                     % ('a' * 64, 'b' * 64, inspect))
    monkeypatch.setenv('PATH', bindir + os.pathsep + os.environ['PATH'])
    _configure(program, job_source='swarm')
    rc, report, err, text = _textfile(program)
    assert rc == 0, err
    assert [(g['gpu'], g['job_id']) for g in report['jobs']['gpus']] == [
        (0, 'ml_serve.2.p0o9i8u7y6t5r4e3w2q1a0s9d'), (1, 'ml_train.1.k2x9v7qzq1m4l0p3a8s6d5f4g')]
    assert ('gpucluster_gpu_job_info{gpu="0",uuid="%s",job_id="ml_serve.2.p0o9i8u7y6t5r4e3w2q1a0s9d",user="",account="",'
            'partition=""} 1\n' % UUIDS[0]) in text
    assert 'gpucluster_gpu_jobs_source_up{scheduler="swarm"} 1\n' in text


@pytest.mark.parametrize('body, problem', [
    ('echo "Cannot connect to the Docker daemon" >&2; exit 1\n', 'docker ps failed (exit 1): Cannot connect to the Docker daemon'),
    ('sleep 60\n', 'docker ps did not answer within'),
])
def test_swarm_without_an_answer_is_a_source_down_within_the_run(program, monkeypatch, body, problem):  # pylint: disable=redefined-outer-name
    monkeypatch.setenv('PATH', _docker(program, body) + os.pathsep + os.environ['PATH'])
    _configure(program, job_source='swarm', run_timeout=10)
    rc, report, _err, text = _textfile(program)
    assert (rc, report['status']) == (0, 'ok')
    assert report['jobs']['ok'] is False and problem in report['jobs']['problems'][0]
    assert 'gpucluster_gpu_jobs_source_up{scheduler="swarm"} 0\n' in text


@pytest.mark.parametrize('keys, fragment', [
    ({'job_source': 'kubernetes'}, 'job_source must be one of none, slurm, swarm'),
    ({'job_records_dir': 'relative/dir'}, 'job_records_dir must be an absolute path'),
    ({'job_records_dir': 5}, 'job_records_dir must be a path'),
])
def test_bad_job_settings_are_refused(program, keys, fragment):  # pylint: disable=redefined-outer-name
    _configure(program, **keys)
    rc, _out, err = program('--check-config', program.config)
    assert rc == 3 and fragment in err
