# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the acceptance run (playbooks/validate.yml) does beside production, decided from facts.

Pure functions, no I/O, no Ansible imports; Python 3.9+.

- :func:`gpu_layout`: which validated nodes are GPU nodes; a GPU count that differs between them, or
  GPU nodes mixed with nodes without GPUs, stops the run (the jobs ask every node for the same GPUs).
  The PyTorch smoke test runs NCCL on GPU nodes and gloo only where no node has a GPU.
- :func:`busy_jobs`, :func:`reservation_argv`, :func:`parse_reservation`: the run happens inside a
  Slurm reservation that the playbook creates (and deletes) or that the operator names; nodes that run
  jobs are refused unless the operator asks to wait for them or to go ahead beside them.
- :func:`srun_argv`, :func:`nccl_argv`: every job step has an explicit node list and a time limit
  (a job that cannot be bounded is refused here, not started).
- :func:`ddp_verdict`: the smoke test's ranks, hosts and the backend they ran.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re

from ansible_collections.gpucluster.core.plugins.module_utils import fabric_matrix

MAX_QUOTE = 200
# nccl-tests' sweep (NVIDIA/nccl-tests README): 8 B to the largest size, doubling. The verdict judges
# the largest size (module_utils/nccl_tests.py), so the sweep must reach the bandwidth regime.
NCCL_MIN_BYTES = '8'
NCCL_MAX_BYTES = '16G'
# squeue states of a job that holds a node's resources.
BUSY_STATES = ('RUNNING', 'COMPLETING', 'CONFIGURING', 'SUSPENDED', 'STOPPED', 'RESIZING', 'SIGNALING', 'STAGE_OUT')
SQUEUE_FORMAT = '%A|%u|%T|%N'
BACKENDS = ('nccl', 'gloo')
_NAME = re.compile(r'^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$')
_NODE = re.compile(r'^[A-Za-z0-9][A-Za-z0-9_.-]{0,252}$')


class PlanInputError(ValueError):
    """Bad arguments: the message names the argument and what is accepted."""


def _quote(value, limit=MAX_QUOTE):
    text = ' '.join(str(value).split())
    return text if len(text) <= limit else text[:limit] + '...'


def _whole(value, name, low, high=None):
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        raise PlanInputError('%s must be a whole number of at least %d%s, got %s'
                             % (name, low, '' if high is None else ' and at most %d' % high, _quote(repr(value), 60)))
    return value


def _nodes(nodes, name='nodes'):
    if not isinstance(nodes, (list, tuple)) or not nodes \
            or not all(isinstance(n, str) and _NODE.match(n) for n in nodes):
        raise PlanInputError('%s must be a non-empty list of Slurm node names, got %s' % (name, _quote(repr(nodes), 80)))
    if len(set(nodes)) != len(nodes):
        raise PlanInputError('%s must not repeat a node: %s' % (name, _quote(', '.join(nodes), 120)))
    return list(nodes)


def _optional_name(value, name):
    if value in (None, ''):
        return None
    if not isinstance(value, str) or not _NAME.match(value):
        raise PlanInputError('%s must be empty or a Slurm name (letters, digits, _ . -), got %s'
                             % (name, _quote(repr(value), 80)))
    return value


# --------------------------------------------------------------------------- GPUs

def gpu_layout(counts):
    """``counts`` maps host -> GPU count (gpu_facts ``count``; 0 without NVIDIA GPU). Returns
    ``{gpu_hosts, cpu_hosts, gpus_per_node, backend, problems}``: ``backend`` is ``nccl`` when every
    node has GPUs, ``gloo`` when none has; ``problems`` (stop the run) name GPU nodes mixed with nodes
    without GPUs, or GPU counts that differ, and say what to do."""
    if not isinstance(counts, dict) or not counts:
        raise PlanInputError('counts must map each host to its GPU count')
    clean = {}
    for host, count in counts.items():
        clean[host] = _whole(count, 'counts[%s]' % _quote(host, 60), 0)
    gpu_hosts = sorted(h for h, c in clean.items() if c > 0)
    cpu_hosts = sorted(h for h, c in clean.items() if c == 0)
    problems = []
    by_count = {}
    for host in gpu_hosts:
        by_count.setdefault(clean[host], []).append(host)
    if gpu_hosts and cpu_hosts:
        problems.append('GPU nodes (%s) and nodes without a GPU (%s) are validated together: the jobs ask every node '
                        'for the same GPUs; validate them apart (validate_hosts)'
                        % (_quote(', '.join(gpu_hosts), 120), _quote(', '.join(cpu_hosts), 120)))
    if len(by_count) > 1:
        ordered = sorted(by_count.items(), key=lambda item: (-len(item[1]), item[0]))
        common = ordered[0][0]
        for count, hosts in ordered[1:]:
            problems.append('%s: %d GPU(s), most GPU nodes have %d: a node with a GPU missing (or one too many) '
                            'fails the jobs; check it with gpu_facts / nvidia-smi, or leave it out (validate_hosts)'
                            % (_quote(', '.join(hosts), 120), count, common))
    per_node = None
    if gpu_hosts and len(by_count) == 1:
        per_node = clean[gpu_hosts[0]]
    return {'gpu_hosts': gpu_hosts, 'cpu_hosts': cpu_hosts, 'gpus_per_node': per_node,
            'backend': 'nccl' if gpu_hosts and not cpu_hosts else 'gloo', 'problems': problems}


RDMA_PAIRS = ('auto', 'true', 'false')


def fleet_shape(nodes, rdma_pairs='auto', sysfs_root='/sys'):
    """Whether the validated nodes can be measured together, before anything runs.

    ``nodes`` maps host -> ``{machine_id, address, guids, rails, rail_problems, rdma_present, gpu_count}``
    (/etc/machine-id, the measured address, the HCAs' node GUIDs, fabric_matrix.nccl_rails' rails and
    problems, whether rdma_facts found any RDMA device, the GPU count). ``rdma_pairs``: auto (measure the
    rails where the nodes have them), true (no rail is a problem), false (the rails are not looked at).

    Returns ``{duplicates, layout, rails_on, rails, problems}``: ``duplicates`` one machine under two
    inventory names (fabric_matrix.duplicate_hosts: same machine-id, measured address or HCA GUID);
    ``layout`` :func:`gpu_layout`; ``rails_on`` whether the RDMA pairs run; ``rails`` host -> rails;
    ``problems`` every message that stops the run (naming the node, the thing and what to do).
    """
    if not isinstance(nodes, dict) or not nodes:
        raise PlanInputError('nodes must map each validated host to its facts')
    if rdma_pairs not in RDMA_PAIRS:
        raise PlanInputError('rdma_pairs must be one of %s, got %s' % (', '.join(RDMA_PAIRS), _quote(repr(rdma_pairs), 40)))
    hosts = sorted(nodes)
    for host in hosts:
        if not isinstance(nodes[host], dict):
            raise PlanInputError('nodes[%s] must be a dict of its facts' % _quote(host, 60))
    rails = dict((h, list(nodes[h].get('rails') or [])) for h in hosts)
    identities = {}
    for host in hosts:
        facts = nodes[host]
        addresses = [facts.get('address')] + [r.get('address') for r in rails[host] if isinstance(r, dict)]
        identities[host] = {'machine_id': facts.get('machine_id') or '',
                            'addresses': [a for a in addresses if isinstance(a, str) and a],
                            'guids': [g for g in facts.get('guids') or [] if isinstance(g, str)]}
    try:
        duplicates = fabric_matrix.duplicate_hosts(identities)
    except fabric_matrix.MatrixInputError as exc:
        raise PlanInputError(str(exc))
    layout = gpu_layout(dict((h, nodes[h].get('gpu_count') or 0) for h in hosts))
    problems = [d['message'] for d in duplicates] + list(layout['problems'])
    with_rails = [h for h in hosts if rails[h]]
    rails_on = rdma_pairs != 'false' and bool(with_rails) and len(hosts) >= 2
    if rdma_pairs != 'false':
        for host in hosts:
            for problem in nodes[host].get('rail_problems') or []:
                problems.append('%s: %s' % (host, problem))
        if with_rails:
            problems.extend(fabric_matrix.check_rails(rails))
        if with_rails and len(with_rails) != len(hosts):
            problems.append('%s: no NCCL rail, while %s have some: the rails must match across the nodes (check the ports '
                            'with rdma_facts, or name the HCAs in validate_nccl_hcas)'
                            % (_quote(', '.join(h for h in hosts if not rails[h]), 120), _quote(', '.join(with_rails), 120)))
        if rdma_pairs == 'true' and not with_rails:
            present = any(nodes[h].get('rdma_present') for h in hosts)
            missing = '' if present else ' and rdma_facts found no RDMA device under %s' % _quote(sysfs_root, 80)
            problems.append('validate_rdma_pairs=true but no validated node has an NCCL rail (an active port of an HCA in '
                            'validate_nccl_hcas, or of an HCA beside a GPU)%s: name the HCAs in validate_nccl_hcas, or set '
                            'validate_rdma_pairs=auto' % missing)
    return {'duplicates': duplicates, 'layout': layout, 'rails_on': rails_on, 'rails': rails, 'problems': problems}


# --------------------------------------------------------------------------- Slurm reservation

def busy_jobs(squeue_output):
    """Jobs that hold the validated nodes, from ``squeue --noheader --nodelist=<nodes> --format=%A|%u|%T|%N``:
    ``[{job, user, state, nodes}]`` of the jobs in BUSY_STATES (pending jobs hold nothing)."""
    if squeue_output is None:
        return []
    if not isinstance(squeue_output, str):
        raise PlanInputError('squeue_output must be the text squeue printed, got %s' % type(squeue_output).__name__)
    jobs = []
    for line in squeue_output.splitlines():
        fields = line.strip().split('|')
        if len(fields) != 4 or not fields[0]:
            continue
        state = fields[2].strip().upper()
        if state in BUSY_STATES:
            jobs.append({'job': fields[0].strip(), 'user': fields[1].strip(), 'state': state, 'nodes': fields[3].strip()})
    return jobs


def describe_jobs(jobs, limit=10):
    """One line naming the jobs: ``job 12 (alice, RUNNING on node[1-2]); ...``."""
    text = '; '.join('job %s (%s, %s on %s)' % (j['job'], j['user'], j['state'], j['nodes']) for j in jobs[:limit])
    return _quote(text + ('; and %d more' % (len(jobs) - limit) if len(jobs) > limit else ''), 600)


def reservation_argv(name, nodes, minutes, users=('root',), ignore_jobs=False, scontrol='scontrol'):
    """``scontrol create reservation`` for the run: starts now, lasts ``minutes`` (it ends by itself
    even if the run is killed and never deletes it), on exactly ``nodes``, for ``users``.
    ``ignore_jobs``: made even though jobs run there (no new job starts on the nodes; the running ones
    go on), for an operator who asked to wait for them or to go ahead beside them."""
    name = _optional_name(name, 'name')
    if name is None:
        raise PlanInputError('name must name the reservation')
    nodes = _nodes(nodes)
    _whole(minutes, 'minutes', 1, 7 * 24 * 60)
    if not isinstance(users, (list, tuple)) or not users or not all(isinstance(u, str) and _NAME.match(u) for u in users):
        raise PlanInputError('users must be a non-empty list of user names, got %s' % _quote(repr(users), 80))
    argv = [scontrol, 'create', 'reservation', 'ReservationName=%s' % name, 'StartTime=now',
            'Duration=%d' % minutes, 'Nodes=%s' % ','.join(nodes), 'Users=%s' % ','.join(users)]
    if ignore_jobs:
        argv.append('Flags=IGNORE_JOBS')
    return argv


def parse_reservation(text):
    """The fields of ``scontrol show reservation NAME --oneliner``: ``{name, state, nodes, users, flags,
    start, end}`` (``nodes`` the host list expression as Slurm prints it); None when it printed no
    reservation (``Reservation NAME not found``)."""
    if text is None:
        return None
    if not isinstance(text, str):
        raise PlanInputError('text must be what scontrol show reservation printed')
    for line in text.splitlines():
        if 'ReservationName=' not in line:
            continue
        fields = dict(re.findall(r'(\w+)=(\S*)', line))
        return {'name': fields.get('ReservationName'), 'state': fields.get('State'), 'nodes': fields.get('Nodes'),
                'users': fields.get('Users'), 'flags': fields.get('Flags'), 'start': fields.get('StartTime'),
                'end': fields.get('EndTime')}
    return None


# --------------------------------------------------------------------------- job steps

def srun_argv(job_name, nodes, minutes, ntasks_per_node=1, gpus_per_node=None, partition=None, reservation=None,
              export=None, mpi=None, container_image=None, srun='srun'):
    """The ``srun`` prefix of every job step of the run: its name, exactly ``nodes`` (``--nodes`` and
    ``--nodelist``), a time limit of ``minutes`` (never unbounded), ``--gpus-per-node`` on GPU nodes,
    the reservation, the partition, ``--export`` (``ALL`` plus ``export``: a dict of variables),
    ``--mpi`` and a pyxis ``--container-image``."""
    name = _optional_name(job_name, 'job_name')
    if name is None:
        raise PlanInputError('job_name must name the job')
    nodes = _nodes(nodes)
    _whole(minutes, 'minutes', 1, 7 * 24 * 60)
    _whole(ntasks_per_node, 'ntasks_per_node', 1, 1024)
    if gpus_per_node is not None:
        _whole(gpus_per_node, 'gpus_per_node', 1, 64)
    partition = _optional_name(partition, 'partition')
    reservation = _optional_name(reservation, 'reservation')
    mpi = _optional_name(mpi, 'mpi')
    if export is not None and (not isinstance(export, dict) or not all(
            isinstance(k, str) and re.match(r'^[A-Za-z_][A-Za-z0-9_]*$', k) and isinstance(v, str) and ',' not in v
            and '\n' not in v for k, v in export.items())):
        raise PlanInputError('export must map variable names to values without commas, got %s' % _quote(repr(export), 80))
    if container_image not in (None, '') and (not isinstance(container_image, str) or not container_image.strip()
                                              or re.search(r'\s', container_image)):
        raise PlanInputError('container_image must be empty or an image reference for pyxis, got %s'
                             % _quote(repr(container_image), 80))
    argv = [srun, '--job-name=%s' % name, '--nodes=%d' % len(nodes), '--nodelist=%s' % ','.join(nodes),
            '--ntasks-per-node=%d' % ntasks_per_node, '--time=%d' % minutes]
    if gpus_per_node:
        argv.append('--gpus-per-node=%d' % gpus_per_node)
    if reservation:
        argv.append('--reservation=%s' % reservation)
    if partition:
        argv.append('--partition=%s' % partition)
    argv.append('--export=%s' % ','.join(['ALL'] + ['%s=%s' % (k, export[k]) for k in sorted(export or {})]))
    if mpi:
        argv.append('--mpi=%s' % mpi)
    if container_image:
        argv.append('--container-image=%s' % container_image)
    return argv


def nccl_argv(kind, tests_dir, nodes, gpus_per_node, minutes, job_name, partition=None, reservation=None, mpi='pmix',
              container_image=None, export=None, max_bytes=NCCL_MAX_BYTES):
    """``all_reduce_perf`` through srun (NVIDIA/nccl-tests README), with ``NCCL_DEBUG=INFO`` so the
    transport can be judged:

    - ``node``: one node, one process driving all its GPUs (``-g <GPUs>``): NVLink/NVSwitch;
    - ``fleet``: every node, one rank per GPU (``--ntasks-per-node=<GPUs> --mpi=<mpi>``, ``-g 1``;
      nccl-tests built with MPI=1): the fabric between the nodes.
    """
    if kind not in ('node', 'fleet'):
        raise PlanInputError('kind must be node or fleet, got %s' % _quote(repr(kind), 40))
    if not isinstance(tests_dir, str) or not tests_dir.startswith('/'):
        raise PlanInputError('tests_dir must be the absolute directory of the nccl-tests binaries, got %s'
                             % _quote(repr(tests_dir), 80))
    nodes = _nodes(nodes)
    _whole(gpus_per_node, 'gpus_per_node', 1, 64)
    if kind == 'node' and len(nodes) != 1:
        raise PlanInputError('a node run takes exactly one node, got %d' % len(nodes))
    if kind == 'fleet' and len(nodes) < 2:
        raise PlanInputError('a fleet run takes at least two nodes, got %d' % len(nodes))
    if not isinstance(max_bytes, str) or not re.match(r'^[0-9]+[KMG]?$', max_bytes):
        raise PlanInputError('max_bytes must be a size nccl-tests accepts (16G, 512M), got %s' % _quote(repr(max_bytes), 40))
    env = dict(export or {})
    env['NCCL_DEBUG'] = 'INFO'
    if kind == 'node':
        prefix = srun_argv(job_name, nodes, minutes, 1, gpus_per_node, partition, reservation, env, None, container_image)
        gpus = gpus_per_node
    else:
        prefix = srun_argv(job_name, nodes, minutes, gpus_per_node, gpus_per_node, partition, reservation, env, mpi,
                           container_image)
        gpus = 1
    return prefix + [tests_dir.rstrip('/') + '/all_reduce_perf', '-b', NCCL_MIN_BYTES, '-e', max_bytes, '-f', '2',
                     '-g', str(gpus)]


# --------------------------------------------------------------------------- the smoke test's verdict

_DDP_LINE = re.compile(r'^(?:\[[^\]]*\]:\s*)?(gpucluster-ddp\s.*)$')
_DDP_FIELD = re.compile(r'(\w+)=(\S+)')


def ddp_verdict(stdout, rc, hosts, ranks_per_node, backend):
    """The PyTorch all-reduce job: every rank printed ``gpucluster-ddp rank=... world=... host=...
    backend=... result=ok`` (playbooks/files/validate_ddp_smoke.py), with the world size expected, on
    every node, with the ``backend`` expected (``nccl`` on GPU nodes: a rank that fell back to gloo
    there fails). ``hosts`` are the nodes' short host names. Returns ``{ok, ranks, expected, hosts,
    backends, message}``; the message says which backend ran."""
    if backend not in BACKENDS:
        raise PlanInputError('backend must be one of %s, got %s' % (', '.join(BACKENDS), _quote(repr(backend), 40)))
    if not isinstance(hosts, (list, tuple)) or not hosts or not all(isinstance(h, str) and h for h in hosts):
        raise PlanInputError('hosts must be the non-empty list of the nodes\' short host names')
    _whole(ranks_per_node, 'ranks_per_node', 1, 1024)
    if stdout is not None and not isinstance(stdout, str):
        raise PlanInputError('stdout must be the text srun printed')
    expected = len(hosts) * ranks_per_node
    records = []
    for raw in (stdout or '').splitlines():
        match = _DDP_LINE.match(raw.strip())
        if match:
            records.append((match.group(1), dict(_DDP_FIELD.findall(match.group(1)))))
    seen_hosts = sorted(set(f.get('host', '').split('.')[0] for _line, f in records if f.get('host')))
    backends = sorted(set(f.get('backend', '?') for _line, f in records))
    good = [f for _line, f in records if f.get('world') == str(expected) and f.get('result') == 'ok'
            and f.get('backend') == backend]
    reasons = []
    if rc != 0:
        reasons.append('srun rc=%s' % rc)
    if len(records) != expected or len(good) != expected:
        reasons.append('%d of %d ranks joined and summed right' % (len(good), expected))
    if sorted(set(h.split('.')[0] for h in hosts)) != seen_hosts:
        reasons.append('ranks ran on %s, expected %s' % (', '.join(seen_hosts) or 'no node', ', '.join(sorted(hosts))))
    wrong_backend = [b for b in backends if b != backend]
    if wrong_backend:
        reasons.append('backend %s ran where %s was expected%s' % (
            ', '.join(wrong_backend), backend,
            ' (the job saw no GPU: torch.cuda.is_available() was false in it)' if backend == 'nccl' else ''))
    summary = '%d of %d ranks joined and summed right on %d of %d nodes (%s); backend %s (%s)' % (
        len(good), expected, len(seen_hosts), len(hosts), ', '.join(seen_hosts),
        ', '.join(backends) or 'none', 'GPU nodes: NCCL' if backend == 'nccl' else 'no GPU: gloo')
    return {'ok': not reasons, 'ranks': len(records), 'expected': expected, 'hosts': seen_hosts, 'backends': backends,
            'message': summary if not reasons else '%s; %s' % (summary, '; '.join(reasons)),
            'lines': [line for line, _f in records][:256]}
