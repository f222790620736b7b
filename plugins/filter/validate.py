# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the acceptance playbook (playbooks/validate.yml) over module_utils/validate_plan.py:
GPU layout, the Slurm reservation, the job steps' command lines and the smoke test's verdict.

Bad input raises an error naming the filter, the argument and what is accepted.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.gpucluster.core.plugins.module_utils import validate_plan

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - only without ansible-core installed
    class AnsibleFilterError(Exception):
        pass


def _guard(function, *args, **kwargs):
    try:
        return function(*args, **kwargs)
    except validate_plan.PlanInputError as exc:
        raise AnsibleFilterError('%s: %s' % (function.__name__, exc))


def _int(value, filter_name, name):
    try:
        return int(value)
    except (TypeError, ValueError):
        raise AnsibleFilterError('%s: %s must be a whole number, got %r' % (filter_name, name, value))


def _optional(value):
    return None if value in ('', None) else value


def validate_gpu_layout(counts):
    """``{gpu_hosts, cpu_hosts, gpus_per_node, backend, problems}`` from ``{host: GPU count}``."""
    if not isinstance(counts, dict):
        raise AnsibleFilterError('validate_gpu_layout: counts must map each host to its GPU count, got %r' % (counts,))
    return _guard(validate_plan.gpu_layout, dict((h, _int(c, 'validate_gpu_layout', 'counts[%s]' % h))
                                                 for h, c in counts.items()))


def validate_fleet_shape(nodes, rdma_pairs='auto', sysfs_root='/sys'):
    """``{duplicates, layout, rails_on, rails, problems}``: whether the nodes can be measured together."""
    return _guard(validate_plan.fleet_shape, nodes, str(rdma_pairs).lower(), sysfs_root)


def validate_busy_jobs(squeue_output):
    """``[{job, user, state, nodes}]``: the jobs that hold the nodes (squeue --format=%A|%u|%T|%N)."""
    return _guard(validate_plan.busy_jobs, squeue_output)


def validate_describe_jobs(jobs):
    """One line naming the jobs of validate_busy_jobs."""
    return validate_plan.describe_jobs(list(jobs or []))


def validate_reservation_argv(nodes, name, minutes, users=('root',), ignore_jobs=False):
    """``scontrol create reservation`` for the run (validate_plan.reservation_argv)."""
    return _guard(validate_plan.reservation_argv, name, list(nodes or []),
                  _int(minutes, 'validate_reservation_argv', 'minutes'), list(users or []), bool(ignore_jobs))


def validate_reservation_info(text):
    """``{name, state, nodes, users, flags, start, end}`` of scontrol show reservation, or None."""
    return _guard(validate_plan.parse_reservation, text)


def validate_srun_argv(nodes, job_name, minutes, ntasks_per_node=1, gpus_per_node=None, partition=None,
                       reservation=None, export=None, mpi=None, container_image=None):
    """The srun prefix of a job step: explicit nodes and a time limit (validate_plan.srun_argv)."""
    gpus = _optional(gpus_per_node)
    return _guard(validate_plan.srun_argv, job_name, list(nodes or []), _int(minutes, 'validate_srun_argv', 'minutes'),
                  _int(ntasks_per_node, 'validate_srun_argv', 'ntasks_per_node'),
                  None if gpus is None or _int(gpus, 'validate_srun_argv', 'gpus_per_node') == 0 else int(gpus),
                  _optional(partition), _optional(reservation), export or None, _optional(mpi),
                  _optional(container_image))


def validate_nccl_argv(nodes, kind, tests_dir, gpus_per_node, minutes, job_name, partition=None, reservation=None,
                       mpi='pmix', container_image=None, export=None):
    """all_reduce_perf through srun on one node (``node``) or across ``nodes`` (``fleet``)."""
    return _guard(validate_plan.nccl_argv, kind, tests_dir, list(nodes or []),
                  _int(gpus_per_node, 'validate_nccl_argv', 'gpus_per_node'),
                  _int(minutes, 'validate_nccl_argv', 'minutes'), job_name, _optional(partition),
                  _optional(reservation), _optional(mpi), _optional(container_image), export or None)


def validate_ddp_verdict(stdout, rc, hosts, ranks_per_node, backend):
    """``{ok, ranks, expected, hosts, backends, message, lines}`` of the PyTorch all-reduce job."""
    return _guard(validate_plan.ddp_verdict, stdout, rc, list(hosts or []),
                  _int(ranks_per_node, 'validate_ddp_verdict', 'ranks_per_node'), backend)


class FilterModule(object):
    def filters(self):
        return {
            'validate_gpu_layout': validate_gpu_layout,
            'validate_fleet_shape': validate_fleet_shape,
            'validate_busy_jobs': validate_busy_jobs,
            'validate_describe_jobs': validate_describe_jobs,
            'validate_reservation_argv': validate_reservation_argv,
            'validate_reservation_info': validate_reservation_info,
            'validate_srun_argv': validate_srun_argv,
            'validate_nccl_argv': validate_nccl_argv,
            'validate_ddp_verdict': validate_ddp_verdict,
        }
