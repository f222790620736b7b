# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which job holds each GPU of a node, from the scheduler itself, for the node health program's metrics.

Slurm (records): slurmd runs the Prolog as root when a job is allocated the node (PrologFlags=Contain
or Alloc; otherwise at its first step) and the Epilog when the allocation ends. The slurm role's
program there (the gpucluster-slurm-usage archive, roles/slurm) writes one small record per GPU of the
job into RECORDS_DIR, ``gpu<N>.json``, and the Epilog removes the records that name its job. Every
value comes from the environment slurmd gives those programs (SLURM_JOB_ID, SLURM_JOB_USER,
SLURM_JOB_ACCOUNT, SLURM_JOB_PARTITION, SLURM_JOB_GPUS): a job's user cannot set it. N is Slurm's
GPU id, the position of the device in the node's gres.conf; the slurm role writes gres.conf in
nvidia-smi index order (PCI bus order), so it is the index the health program labels ``gpu``.
A GPU is held by one job at a time (Slurm frees it only after the Epilog of the job before), and the
record of a GPU is replaced by the next job's Prolog, so a record left by an Epilog that never ran
(a killed slurmd) lasts until the GPU's next job or the next boot (RECORDS_DIR is under /run).

Why records rather than the job's cgroup: under cgroup v2 (Debian 12 and later, RHEL 9) Slurm confines
devices with an eBPF program attached to the job's cgroup, whose allowed devices cannot be read back
as a list (v1's devices.list is gone), and a cgroup names a job, not its user, account or partition.

Swarm: a task given GPUs through Swarm's generic resources (daemon.json ``node-generic-resources``,
``docker service create --generic-resource NVIDIA-GPU=1``) carries the assignment in its container's
environment as ``DOCKER_RESOURCE_<KIND>=<id>,<id>`` (swarmkit's EnvFormat: the kind upper-cased). The
health program reads it with ``docker inspect`` of the node's running task containers (those with the
label com.docker.swarm.task.id). An id is a GPU's UUID or nvidia-smi index. Swarm names no user,
account or partition: job_id is the task's name (``<service>.<slot>.<task id>``).

Label values are bounded (LABEL_MAX characters, then '...'), control and invisible characters become
'?', and prom_text escapes the rest. Pure decisions plus the small reads and writes of RECORDS_DIR;
standard library only, Python 3.9, no Ansible imports (packed into the health program's archive and the
slurm role's usage archive).
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import re
import stat

from .atomic_file import write_atomic
from .bounded_read import Unreadable, read_regular
from .prom_text import render_samples
from .text_bounds import INVISIBLE_CLASS, clip, quote

RECORDS_DIR = '/run/gpucluster/gpu-jobs'
RECORD_VERSION = 1
# A record is one small JSON object; anything larger is not ours.
RECORD_MAX_BYTES = 4096
# GPUs one job may hold on one node, and record files read from RECORDS_DIR: more are refused, never read.
MAX_GPUS = 64
MAX_RECORD_FILES = 256
# Characters of a label value (user, account, partition, job id) before it is cut with '...'.
LABEL_MAX = 128
SOURCES = ('none', 'slurm', 'swarm')
JOB_ID_RE = re.compile(r'^[0-9]{1,20}\Z')
_RECORD_NAME_RE = re.compile(r'^gpu([0-9]{1,3})\.json\Z')
_UNPRINTABLE_RE = re.compile(u'[\x00-\x1f\x7f-\x9f' + INVISIBLE_CLASS + u']')

# Swarm: the environment names of a task's GPU assignment (DOCKER_RESOURCE_ + the generic resource's kind,
# upper-cased), the labels Swarm puts on a task's container, and how many containers are read.
SWARM_RESOURCES = ('DOCKER_RESOURCE_GPU', 'DOCKER_RESOURCE_NVIDIA-GPU', 'DOCKER_RESOURCE_NVIDIA_GPU')
SWARM_TASK_LABEL = 'com.docker.swarm.task.id'
SWARM_TASK_NAME_LABEL = 'com.docker.swarm.task.name'
MAX_CONTAINERS = 256
DOCKER_TIMEOUT = 10
_CONTAINER_ID_RE = re.compile(r'^[0-9a-f]{12,64}\Z')

METRICS = (
    ('gpucluster_gpu_job_info', 'gauge',
     'The job holding the GPU (value 1): job_id, user, account and partition as the scheduler names them.'),
    ('gpucluster_gpu_jobs_source_up', 'gauge',
     'Whether the node could read which job holds each GPU (1) or not (0), by scheduler.'),
)
METRIC_NAMES = tuple(name for name, _kind, _help in METRICS)


class RecordError(Exception):
    """A record, an environment or a source that cannot be used: the message says why."""


def clean_label(value):
    """A label value as the scheduler gave it: '' for none, control and invisible characters as '?', at most
    LABEL_MAX characters (then '...'). Anything but text is refused (RecordError)."""
    if value is None:
        return ''
    if not isinstance(value, str):
        raise RecordError('%s is not text' % quote(value, 60))
    return clip(_UNPRINTABLE_RE.sub('?', value), LABEL_MAX)


def parse_gpu_ids(text):
    """Sorted GPU ids of SLURM_JOB_GPUS ('0,1,3'); [] for none. Anything else is refused (RecordError)."""
    text = (text or '').strip()
    if not text:
        return []
    if len(text) > 4 * MAX_GPUS:
        raise RecordError('SLURM_JOB_GPUS=%s names more than %d GPUs' % (quote(text, 60), MAX_GPUS))
    ids = []
    for part in text.split(','):
        part = part.strip()
        if not re.match(r'^[0-9]{1,3}\Z', part):
            raise RecordError('SLURM_JOB_GPUS=%s is not a list of GPU ids (0,1,...)' % quote(text, 60))
        ids.append(int(part))
    if len(set(ids)) != len(ids):
        raise RecordError('SLURM_JOB_GPUS=%s names a GPU twice' % quote(text, 60))
    return sorted(ids)


def slurm_record(environ, now):
    """The record of the job whose Prolog runs, from slurmd's environment: {job_id, user, account, partition,
    gpus, since}. RecordError when SLURM_JOB_ID or SLURM_JOB_GPUS is not what slurmd writes."""
    job_id = environ.get('SLURM_JOB_ID', '')
    if not isinstance(job_id, str) or not JOB_ID_RE.match(job_id):
        raise RecordError('SLURM_JOB_ID=%s is not a Slurm job id' % quote(job_id, 60))
    return {
        'job_id': job_id,
        'user': clean_label(environ.get('SLURM_JOB_USER')),
        'account': clean_label(environ.get('SLURM_JOB_ACCOUNT')),
        'partition': clean_label(environ.get('SLURM_JOB_PARTITION')),
        'gpus': parse_gpu_ids(environ.get('SLURM_JOB_GPUS')),
        'since': int(now),
    }


def record_name(gpu):
    return 'gpu%d.json' % gpu


def record_files(record):
    """[(file name, text)]: one record per GPU of a slurm_record()."""
    files = []
    for gpu in record['gpus']:
        body = {'version': RECORD_VERSION, 'scheduler': 'slurm', 'gpu': gpu, 'job_id': record['job_id'],
                'user': record['user'], 'account': record['account'], 'partition': record['partition'],
                'since': record['since']}
        files.append((record_name(gpu), json.dumps(body, sort_keys=True) + '\n'))
    return files


def parse_record(name, data):
    """(gpu, {job_id, user, account, partition, since}) of a record file's bytes; RecordError says why not."""
    match = _RECORD_NAME_RE.match(name or '')
    if not match:
        raise RecordError('%s is not a record name (gpu<N>.json)' % quote(name, 60))
    if not isinstance(data, (bytes, bytearray)) or len(data) > RECORD_MAX_BYTES:
        raise RecordError('%s: not a record of at most %d bytes' % (name, RECORD_MAX_BYTES))
    try:
        body = json.loads(bytes(data).decode('utf-8'))
    except (UnicodeDecodeError, ValueError) as exc:
        raise RecordError('%s: not a JSON record (%s)' % (name, clip(str(exc), 80)))
    except RecursionError:
        raise RecordError('%s: not a JSON record (nested too deep)' % name)
    if not isinstance(body, dict) or body.get('version') != RECORD_VERSION:
        raise RecordError('%s: not a version %d record' % (name, RECORD_VERSION))
    gpu = body.get('gpu')
    if isinstance(gpu, bool) or not isinstance(gpu, int) or gpu != int(match.group(1)):
        raise RecordError('%s: names GPU %s' % (name, quote(gpu, 40)))
    job_id = body.get('job_id')
    if not isinstance(job_id, str) or not JOB_ID_RE.match(job_id):
        raise RecordError('%s: job_id %s is not a Slurm job id' % (name, quote(job_id, 40)))
    since = body.get('since')
    if since is not None and (isinstance(since, bool) or not isinstance(since, int) or since < 0):
        raise RecordError('%s: since %s is not a time' % (name, quote(since, 40)))
    record = {'job_id': job_id, 'since': since}
    for key in ('user', 'account', 'partition'):
        try:
            record[key] = clean_label(body.get(key))
        except RecordError as exc:
            raise RecordError('%s: %s %s' % (name, key, exc))
    return gpu, record


def _check_directory(directory):
    """The records directory must be a real directory (never a link somebody planted)."""
    info = os.lstat(directory)
    if not stat.S_ISDIR(info.st_mode):
        raise RecordError('%s is not a directory' % directory)


def _listing(directory):
    """Record file names in ``directory`` (sorted); [] when it does not exist. RecordError when it cannot be read."""
    try:
        _check_directory(directory)
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise RecordError('cannot read %s: %s' % (directory, exc.strerror or exc))
    names = sorted(n for n in names if _RECORD_NAME_RE.match(n))
    if len(names) > MAX_RECORD_FILES:
        raise RecordError('%s holds %d records, more than %d: not read' % (directory, len(names), MAX_RECORD_FILES))
    return names


def read_records(directory=RECORDS_DIR):
    """({gpu: record}, [problem]) of the records in ``directory``; ({}, []) when it does not exist (no job has
    held a GPU since boot). A record that cannot be used is a problem, never an assignment. RecordError when the
    directory itself cannot be read (the source is down)."""
    assignments = {}
    problems = []
    for name in _listing(directory):
        try:
            data = read_regular(os.path.join(directory, name), RECORD_MAX_BYTES)
            if data is None:
                continue  # removed by an Epilog meanwhile
            gpu, record = parse_record(name, data)
        except Unreadable as exc:
            problems.append('%s: %s' % (name, exc))
            continue
        except RecordError as exc:
            problems.append(str(exc))
            continue
        assignments[gpu] = record
    return assignments, problems


def write_records(directory, record):
    """Write the records of a slurm_record() (the Prolog); the names written."""
    try:
        os.makedirs(directory, mode=0o755, exist_ok=True)
        _check_directory(directory)
    except OSError as exc:
        raise RecordError('cannot create %s: %s' % (directory, exc.strerror or exc))
    written = []
    for name, text in record_files(record):
        write_atomic(os.path.join(directory, name), text, mode=0o644, prefix='.%s.' % name)
        written.append(name)
    return written


def remove_records(directory, job_id):
    """Remove the records that name ``job_id`` (the Epilog); the names removed. A record of another job, or one
    that does not parse, is left."""
    if not isinstance(job_id, str) or not JOB_ID_RE.match(job_id):
        raise RecordError('SLURM_JOB_ID=%s is not a Slurm job id' % quote(job_id, 60))
    removed = []
    for name in _listing(directory):
        path = os.path.join(directory, name)
        try:
            data = read_regular(path, RECORD_MAX_BYTES)
            if data is None:
                continue
            _gpu, record = parse_record(name, data)
        except (Unreadable, RecordError):
            continue
        if record['job_id'] == job_id:
            try:
                os.unlink(path)
            except FileNotFoundError:
                continue
            removed.append(name)
    return removed


# Swarm ------------------------------------------------------------------------------------------

def docker_ps_argv(docker='docker'):
    """The node's running Swarm task containers, full ids."""
    return [docker, 'ps', '--no-trunc', '--quiet', '--filter', 'label=' + SWARM_TASK_LABEL]


def docker_inspect_argv(ids, docker='docker'):
    return [docker, 'inspect', '--type', 'container'] + list(ids)


def parse_container_ids(text):
    """Container ids of ``docker ps --quiet`` output (at most MAX_CONTAINERS); RecordError for anything else."""
    ids = [line.strip() for line in (text or '').splitlines() if line.strip()]
    bad = [i for i in ids if not _CONTAINER_ID_RE.match(i)]
    if bad:
        raise RecordError('docker ps printed %s, not a container id' % quote(bad[0], 80))
    if len(ids) > MAX_CONTAINERS:
        raise RecordError('%d Swarm task containers, more than %d: not read' % (len(ids), MAX_CONTAINERS))
    return ids


def _environment(env):
    """{name: value} of a container's Config.Env list (the last of a name wins, as Swarm appends its own)."""
    out = {}
    for item in env or []:
        if isinstance(item, str) and '=' in item:
            name, _sep, value = item.partition('=')
            out[name] = value
    return out


def _device_index(value, devices):
    """The index of the node's GPU that ``value`` (a UUID or an index) names, or None."""
    text = value.strip()
    for dev in devices:
        uuid = dev.get('uuid')
        if uuid and text.lower() == uuid.lower():
            return dev.get('index')
    if re.match(r'^[0-9]{1,3}\Z', text):
        wanted = int(text)
        for dev in devices:
            if dev.get('index') == wanted:
                return wanted
    return None


def swarm_assignments(inspect_text, devices, resources=SWARM_RESOURCES):
    """({gpu: record}, [problem]) from ``docker inspect`` output of the node's task containers. ``devices``: the
    health facts' devices ({index, uuid}). RecordError when the output is not docker's JSON list."""
    try:
        containers = json.loads(inspect_text or '[]')
    except ValueError as exc:
        raise RecordError('docker inspect printed no JSON (%s)' % clip(str(exc), 80))
    except RecursionError:
        raise RecordError('docker inspect printed JSON nested too deep')
    if not isinstance(containers, list):
        raise RecordError('docker inspect printed %s, not a list of containers' % type(containers).__name__)
    tasks = []
    for container in containers[:MAX_CONTAINERS]:
        if not isinstance(container, dict) or not (container.get('State') or {}).get('Running'):
            continue
        config = container.get('Config') or {}
        labels = config.get('Labels') or {}
        if not isinstance(labels, dict) or not isinstance(labels.get(SWARM_TASK_LABEL), str):
            continue
        name = labels.get(SWARM_TASK_NAME_LABEL)
        job_id = name if isinstance(name, str) and name else labels[SWARM_TASK_LABEL]
        tasks.append((clean_label(job_id), _environment(config.get('Env'))))
    assignments = {}
    problems = []
    for job_id, env in sorted(tasks, key=lambda t: t[0]):
        for resource in resources:
            value = env.get(resource)
            if not value:
                continue
            for item in value.split(',')[:MAX_GPUS]:
                gpu = _device_index(item, devices)
                if gpu is None:
                    problems.append('task %s: %s names GPU %s, which this node does not have'
                                    % (job_id, resource, quote(clip(item, 80))))
                elif gpu in assignments and assignments[gpu]['job_id'] != job_id:
                    problems.append('GPU %d is named by tasks %s and %s: kept %s'
                                    % (gpu, assignments[gpu]['job_id'], job_id, assignments[gpu]['job_id']))
                else:
                    assignments[gpu] = {'job_id': job_id, 'user': '', 'account': '', 'partition': '', 'since': None}
    return assignments, problems


def collect_swarm(runner, devices, docker='docker', timeout=DOCKER_TIMEOUT, resources=SWARM_RESOURCES):
    """({gpu: record}, [problem], ok) of the node's Swarm tasks. ``runner(argv, timeout) -> (rc, out, err)``,
    rc None when the command ran out of time (the health program's runner)."""
    def run(argv):
        rc, out, err = runner(argv, timeout)
        if rc is None:
            raise RecordError('%s did not answer within %ss' % (' '.join(argv[:2]), timeout))
        if rc != 0:
            raise RecordError('%s failed (exit %s): %s' % (' '.join(argv[:2]), rc, clip(' '.join((err or '').split()), 160)))
        return out
    try:
        ids = parse_container_ids(run(docker_ps_argv(docker)))
        if not ids:
            return {}, [], True
        assignments, problems = swarm_assignments(run(docker_inspect_argv(ids, docker)), devices, resources)
    except RecordError as exc:
        return {}, [str(exc)], False
    except OSError as exc:
        return {}, ['cannot run %s: %s' % (docker, exc.strerror or exc)], False
    return assignments, problems, True


# Both -------------------------------------------------------------------------------------------

def prometheus_samples(source, assignments, devices, ok):
    """[(metric, labels, value)]: the source's state, and one gpucluster_gpu_job_info per held GPU the node has."""
    samples = [('gpucluster_gpu_jobs_source_up', [('scheduler', source)], 1 if ok else 0)]
    by_index = dict((d.get('index'), d) for d in devices or [] if d.get('index') is not None)
    for gpu in sorted(assignments):
        device = by_index.get(gpu)
        if device is None:
            continue
        record = assignments[gpu]
        samples.append(('gpucluster_gpu_job_info',
                        [('gpu', gpu), ('uuid', device.get('uuid') or ''), ('job_id', record['job_id']),
                         ('user', record['user']), ('account', record['account']), ('partition', record['partition'])],
                        1))
    return samples


def unknown_gpus(assignments, devices):
    """Problems for assignments that name a GPU the node does not have."""
    have = set(d.get('index') for d in devices or [])
    return ['job %s holds GPU %d, which nvidia-smi does not list' % (assignments[g]['job_id'], g)
            for g in sorted(assignments) if g not in have]


def render_prometheus(samples):
    """Exposition text (HELP/TYPE once per metric that has samples, in METRICS order)."""
    return render_samples(METRICS, samples)


def report(source, assignments, problems, ok):
    """The part of the health program's JSON report that says which job holds each GPU."""
    return {'source': source, 'ok': bool(ok), 'problems': list(problems),
            'gpus': [dict(assignments[g], gpu=g) for g in sorted(assignments)]}
