# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_jobs: which job holds each GPU, from the Slurm Prolog's records or a Swarm task's assignment."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os

import pytest

from ansible_collections.gpucluster.core.plugins.module_utils import gpu_jobs
from ansible_collections.gpucluster.core.plugins.module_utils.prom_text import render_samples

DEVICES = [{'index': 0, 'uuid': 'GPU-12345678-aaaa-bbbb-cccc-0123456789ab'},
           {'index': 1, 'uuid': 'GPU-12345678-aaaa-bbbb-cccc-0123456789cd'}]
ENV = {'SLURM_JOB_ID': '4211', 'SLURM_JOB_USER': 'alice', 'SLURM_JOB_ACCOUNT': 'research',
       'SLURM_JOB_PARTITION': 'gpu', 'SLURM_JOB_GPUS': '1,0', 'PATH': '/usr/bin'}


@pytest.mark.parametrize('text, expected', [
    ('', []), (None, []), ('0', [0]), ('1,0', [0, 1]), (' 3 , 7 ', [3, 7]),
    (','.join(str(i) for i in range(64)), list(range(64))),
])
def test_gpu_ids(text, expected):
    assert gpu_jobs.parse_gpu_ids(text) == expected


@pytest.mark.parametrize('text, fragment', [
    ('0,0', 'names a GPU twice'), ('0,a', 'is not a list of GPU ids'), ('-1', 'is not a list of GPU ids'),
    ('0,,1', 'is not a list of GPU ids'), ('1000', 'is not a list of GPU ids'), ('0-3', 'is not a list of GPU ids'),
    (','.join(['1'] * 300), 'names more than 64 GPUs'),
])
def test_gpu_ids_refused(text, fragment):
    with pytest.raises(gpu_jobs.RecordError, match=fragment):
        gpu_jobs.parse_gpu_ids(text)


def test_slurm_record_from_the_prolog_environment():
    assert gpu_jobs.slurm_record(ENV, 1764700000.7) == {
        'job_id': '4211', 'user': 'alice', 'account': 'research', 'partition': 'gpu', 'gpus': [0, 1], 'since': 1764700000}


@pytest.mark.parametrize('job_id', ['', 'abc', '4211_3', '4211.0', '1' * 21, ' 4211'])
def test_slurm_record_needs_slurms_job_id(job_id):
    with pytest.raises(gpu_jobs.RecordError, match='is not a Slurm job id'):
        gpu_jobs.slurm_record(dict(ENV, SLURM_JOB_ID=job_id), 0)


@pytest.mark.parametrize('value, expected', [
    ('alice', 'alice'), ('', ''), (None, ''),
    ('a\nb"c\\d', 'a?b"c\\d'),                 # a newline cannot start a new line of the textfile
    (u'eve\u202eecila', u'eve?ecila'),          # a bidi override cannot reorder what a reader sees
    ('x' * 500, 'x' * 128 + '...'),             # bounded
])
def test_label_values_are_printable_and_bounded(value, expected):
    assert gpu_jobs.clean_label(value) == expected


def test_records_round_trip(tmp_path):
    record = gpu_jobs.slurm_record(ENV, 1764700000)
    directory = str(tmp_path / 'gpu-jobs')
    assert gpu_jobs.write_records(directory, record) == ['gpu0.json', 'gpu1.json']
    assert sorted(os.listdir(directory)) == ['gpu0.json', 'gpu1.json']
    assert oct(os.stat(os.path.join(directory, 'gpu0.json')).st_mode & 0o777) == '0o644'
    assignments, problems = gpu_jobs.read_records(directory)
    assert problems == []
    assert assignments == {g: {'job_id': '4211', 'user': 'alice', 'account': 'research', 'partition': 'gpu',
                               'since': 1764700000} for g in (0, 1)}


def test_the_next_job_of_a_gpu_replaces_its_record_and_the_epilog_removes_only_its_own(tmp_path):
    directory = str(tmp_path)
    gpu_jobs.write_records(directory, gpu_jobs.slurm_record(ENV, 1))
    gpu_jobs.write_records(directory, gpu_jobs.slurm_record(dict(ENV, SLURM_JOB_ID='4300', SLURM_JOB_USER='bob',
                                                                 SLURM_JOB_GPUS='1'), 2))
    assignments, _problems = gpu_jobs.read_records(directory)
    assert (assignments[0]['job_id'], assignments[1]['job_id']) == ('4211', '4300')
    # 4211's Epilog (a late one: GPU 1 went to 4300 already) removes GPU 0's record only.
    assert gpu_jobs.remove_records(directory, '4211') == ['gpu0.json']
    assert sorted(os.listdir(directory)) == ['gpu1.json']
    assert gpu_jobs.remove_records(directory, '4211') == []
    assert gpu_jobs.remove_records(directory, '4300') == ['gpu1.json']


def test_absent_directory_is_no_job_and_no_problem(tmp_path):
    assert gpu_jobs.read_records(str(tmp_path / 'absent')) == ({}, [])
    assert gpu_jobs.remove_records(str(tmp_path / 'absent'), '1') == []


def test_a_file_in_place_of_the_directory_is_a_source_down(tmp_path):
    (tmp_path / 'gpu-jobs').write_text('')
    with pytest.raises(gpu_jobs.RecordError, match='is not a directory'):
        gpu_jobs.read_records(str(tmp_path / 'gpu-jobs'))


def test_a_link_in_place_of_the_directory_is_not_followed(tmp_path):
    (tmp_path / 'elsewhere').mkdir()
    os.symlink(str(tmp_path / 'elsewhere'), str(tmp_path / 'gpu-jobs'))
    with pytest.raises(gpu_jobs.RecordError, match='is not a directory'):
        gpu_jobs.write_records(str(tmp_path / 'gpu-jobs'), gpu_jobs.slurm_record(ENV, 0))
    assert os.listdir(str(tmp_path / 'elsewhere')) == []


@pytest.mark.parametrize('name, body, fragment', [
    ('gpu0.json', b'{', 'not a JSON record'),
    ('gpu0.json', b'\xff\xfe', 'not a JSON record'),
    ('gpu0.json', b'[]', 'not a version 1 record'),
    ('gpu0.json', json.dumps({'version': 2}).encode(), 'not a version 1 record'),
    ('gpu0.json', json.dumps({'version': 1, 'gpu': 1, 'job_id': '5'}).encode(), 'names GPU 1'),
    ('gpu0.json', json.dumps({'version': 1, 'gpu': True, 'job_id': '5'}).encode(), 'names GPU True'),
    ('gpu0.json', json.dumps({'version': 1, 'gpu': 0, 'job_id': 5}).encode(), 'is not a Slurm job id'),
    ('gpu0.json', json.dumps({'version': 1, 'gpu': 0, 'job_id': '5', 'since': -1}).encode(), 'is not a time'),
    ('gpu0.json', json.dumps({'version': 1, 'gpu': 0, 'job_id': '5', 'user': ['x']}).encode(), 'user'),
    ('gpu0.json', b' ' * 5000, 'at most 4096 bytes'),
    ('gpu.json', b'{}', 'is not a record name'),
])
def test_records_that_cannot_be_used_are_refused(name, body, fragment):
    with pytest.raises(gpu_jobs.RecordError, match=fragment):
        gpu_jobs.parse_record(name, body)


def test_bad_records_are_problems_never_assignments(tmp_path):
    gpu_jobs.write_records(str(tmp_path), gpu_jobs.slurm_record(dict(ENV, SLURM_JOB_GPUS='0'), 0))
    (tmp_path / 'gpu1.json').write_text('{"version": 1, "gpu": 0, "job_id": "9"}')
    os.mkfifo(str(tmp_path / 'gpu2.json'))
    (tmp_path / 'notes.txt').write_text('not a record: ignored')
    assignments, problems = gpu_jobs.read_records(str(tmp_path))
    assert list(assignments) == [0]
    assert problems == ['gpu1.json: names GPU 0', 'gpu2.json: it is a FIFO, not a regular file']


def test_too_many_records_are_not_read(tmp_path):
    for gpu in range(gpu_jobs.MAX_RECORD_FILES + 1):
        (tmp_path / ('gpu%d.json' % gpu)).write_text('{}')
    with pytest.raises(gpu_jobs.RecordError, match='more than 256'):
        gpu_jobs.read_records(str(tmp_path))


def test_samples_name_the_job_on_the_gpu_and_escape_its_names():
    assignments = {1: {'job_id': '4211', 'user': 'al"ice', 'account': 'research', 'partition': 'gpu', 'since': 1},
                   7: {'job_id': '9', 'user': 'x', 'account': '', 'partition': '', 'since': 1}}
    text = gpu_jobs.render_prometheus(gpu_jobs.prometheus_samples('slurm', assignments, DEVICES, True))
    assert text == (
        '# HELP gpucluster_gpu_job_info The job holding the GPU (value 1): job_id, user, account and partition as the '
        'scheduler names them.\n'
        '# TYPE gpucluster_gpu_job_info gauge\n'
        'gpucluster_gpu_job_info{gpu="1",uuid="GPU-12345678-aaaa-bbbb-cccc-0123456789cd",job_id="4211",user="al\\"ice",'
        'account="research",partition="gpu"} 1\n'
        '# HELP gpucluster_gpu_jobs_source_up Whether the node could read which job holds each GPU (1) or not (0), by '
        'scheduler.\n'
        '# TYPE gpucluster_gpu_jobs_source_up gauge\n'
        'gpucluster_gpu_jobs_source_up{scheduler="slurm"} 1\n')
    assert gpu_jobs.unknown_gpus(assignments, DEVICES) == ['job 9 holds GPU 7, which nvidia-smi does not list']


def test_a_source_down_says_so_and_labels_nothing():
    samples = gpu_jobs.prometheus_samples('swarm', {}, DEVICES, False)
    assert samples == [('gpucluster_gpu_jobs_source_up', [('scheduler', 'swarm')], 0)]


# Swarm --------------------------------------------------------------------------------------------

def _inspect(own_fixtures_dir):
    with open(os.path.join(own_fixtures_dir, 'usage', 'docker-inspect-swarm.json')) as handle:
        return handle.read()


def test_swarm_tasks_by_uuid_and_index(own_fixtures_dir):
    assignments, problems = gpu_jobs.swarm_assignments(_inspect(own_fixtures_dir), DEVICES)
    assert problems == []
    # GPU 1 by its UUID (ml_train), GPU 0 by its index (ml_serve); the exited task's container names none.
    assert assignments == {
        0: {'job_id': 'ml_serve.2.p0o9i8u7y6t5r4e3w2q1a0s9d', 'user': '', 'account': '', 'partition': '', 'since': None},
        1: {'job_id': 'ml_train.1.k2x9v7qzq1m4l0p3a8s6d5f4g', 'user': '', 'account': '', 'partition': '', 'since': None}}


def test_swarm_gpu_the_node_lacks_and_a_gpu_named_twice(own_fixtures_dir):
    data = json.loads(_inspect(own_fixtures_dir))
    data[1]['Config']['Env'] = ['DOCKER_RESOURCE_NVIDIA-GPU=GPU-12345678-aaaa-bbbb-cccc-0123456789cd,GPU-nope']
    assignments, problems = gpu_jobs.swarm_assignments(json.dumps(data), DEVICES)
    assert list(assignments) == [1] and assignments[1]['job_id'].startswith('ml_serve')
    assert problems == [
        "task ml_serve.2.p0o9i8u7y6t5r4e3w2q1a0s9d: DOCKER_RESOURCE_NVIDIA-GPU names GPU 'GPU-nope', which this node "
        "does not have",
        'GPU 1 is named by tasks ml_serve.2.p0o9i8u7y6t5r4e3w2q1a0s9d and ml_train.1.k2x9v7qzq1m4l0p3a8s6d5f4g: kept '
        'ml_serve.2.p0o9i8u7y6t5r4e3w2q1a0s9d']


def test_swarm_assignment_swarm_appends_wins(own_fixtures_dir):
    """A service's own environment may carry the name too; Swarm appends its assignment after it (the last wins)."""
    data = json.loads(_inspect(own_fixtures_dir))
    data[0]['Config']['Env'] = ['DOCKER_RESOURCE_NVIDIA-GPU=0'] + data[0]['Config']['Env']
    data[1]['State']['Running'] = False
    assignments, _problems = gpu_jobs.swarm_assignments(json.dumps(data), DEVICES)
    assert list(assignments) == [1]


@pytest.mark.parametrize('text, fragment', [('{', 'printed no JSON'), ('{}', 'not a list of containers')])
def test_swarm_inspect_that_is_not_dockers(text, fragment):
    with pytest.raises(gpu_jobs.RecordError, match=fragment):
        gpu_jobs.swarm_assignments(text, DEVICES)


def _runner(answers):
    calls = []

    def run(argv, timeout):
        calls.append((argv, timeout))
        return answers[argv[1]]
    run.calls = calls
    return run


def test_collect_swarm_runs_ps_then_inspect(own_fixtures_dir):
    ids = 'a' * 64 + '\n' + 'b' * 64 + '\n'
    runner = _runner({'ps': (0, ids, ''), 'inspect': (0, _inspect(own_fixtures_dir), '')})
    assignments, problems, ok = gpu_jobs.collect_swarm(runner, DEVICES, timeout=7)
    assert ok and problems == [] and sorted(assignments) == [0, 1]
    assert runner.calls == [
        (['docker', 'ps', '--no-trunc', '--quiet', '--filter', 'label=com.docker.swarm.task.id'], 7),
        (['docker', 'inspect', '--type', 'container', 'a' * 64, 'b' * 64], 7)]


@pytest.mark.parametrize('answers, fragment', [
    ({'ps': (None, '', '')}, 'docker ps did not answer within 7s'),
    ({'ps': (1, '', 'Cannot connect to the Docker daemon at unix:///var/run/docker.sock.')},
     'docker ps failed (exit 1): Cannot connect to the Docker daemon'),
    ({'ps': (0, 'not-an-id\n', '')}, "docker ps printed 'not-an-id', not a container id"),
    ({'ps': (0, 'a' * 64, ''), 'inspect': (0, '{', '')}, 'docker inspect printed no JSON'),
])
def test_collect_swarm_failures_are_a_source_down(answers, fragment):
    assignments, problems, ok = gpu_jobs.collect_swarm(_runner(answers), DEVICES, timeout=7)
    assert (assignments, ok) == ({}, False)
    assert len(problems) == 1 and fragment in problems[0]


def test_collect_swarm_without_tasks():
    assert gpu_jobs.collect_swarm(_runner({'ps': (0, '', '')}), DEVICES) == ({}, [], True)


def test_report_lists_each_gpu():
    report = gpu_jobs.report('slurm', {0: {'job_id': '1', 'user': 'a', 'account': '', 'partition': '', 'since': 2}},
                             ['x'], True)
    assert report == {'source': 'slurm', 'ok': True, 'problems': ['x'],
                      'gpus': [{'gpu': 0, 'job_id': '1', 'user': 'a', 'account': '', 'partition': '', 'since': 2}]}


def test_metric_names_are_rendered_in_order():
    samples = [('gpucluster_gpu_jobs_source_up', [('scheduler', 'slurm')], 1)]
    assert render_samples(gpu_jobs.METRICS, samples) == gpu_jobs.render_prometheus(samples)
