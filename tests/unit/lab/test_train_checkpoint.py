# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The lab's training job (lab/train_checkpoint.py): how its ranks find each other under torchrun and under
srun. Its training, checkpoints and round trip run in the molecule scenario storage (verify_training.yml),
where torch is; here only the launcher's environment is decided, without torch."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import importlib.util
import os
import subprocess
import sys

import pytest

PATH = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'lab', 'train_checkpoint.py')


@pytest.fixture(scope='module')
def job():
    spec = importlib.util.spec_from_file_location('lab_train_checkpoint', PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _no_scontrol(nodelist):
    raise AssertionError('scontrol asked for %s' % nodelist)


SRUN = {'SLURM_PROCID': '1', 'SLURM_NTASKS': '4', 'SLURM_LOCALID': '1', 'SLURM_JOB_ID': '31337'}


@pytest.mark.parametrize('environ, hostnames, expected', [
    # torchrun sets everything itself: nothing is added.
    ({'RANK': '0', 'WORLD_SIZE': '2', 'MASTER_ADDR': 'node2', 'MASTER_PORT': '29500', 'SLURM_PROCID': '0',
      'SLURM_NTASKS': '1'}, _no_scontrol, ('torchrun', {})),
    # srun on one node: the rendezvous on this node; the port from the job id.
    (dict(SRUN, SLURM_STEP_NUM_NODES='1'), _no_scontrol,
     ('srun', {'RANK': '1', 'WORLD_SIZE': '4', 'LOCAL_RANK': '1', 'MASTER_ADDR': '127.0.0.1', 'MASTER_PORT': '21337'})),
    # srun over nodes: rank 0 runs on the step's first node, as Slurm expands the list.
    (dict(SRUN, SLURM_STEP_NUM_NODES='2', SLURM_STEP_NODELIST='node[2-3]'), lambda nodes: ['node2', 'node3'],
     ('srun', {'RANK': '1', 'WORLD_SIZE': '4', 'LOCAL_RANK': '1', 'MASTER_ADDR': 'node2', 'MASTER_PORT': '21337'})),
    # No step variables (an older Slurm): the job's.
    (dict(SRUN, SLURM_NNODES='2', SLURM_JOB_NODELIST='gpu[07,09]'), lambda nodes: ['gpu07', 'gpu09'],
     ('srun', {'RANK': '1', 'WORLD_SIZE': '4', 'LOCAL_RANK': '1', 'MASTER_ADDR': 'gpu07', 'MASTER_PORT': '21337'})),
    # The user's own rendezvous wins.
    (dict(SRUN, SLURM_STEP_NUM_NODES='2', MASTER_ADDR='10.0.0.5', MASTER_PORT='4000'), _no_scontrol,
     ('srun', {'RANK': '1', 'WORLD_SIZE': '4', 'LOCAL_RANK': '1', 'MASTER_ADDR': '10.0.0.5', 'MASTER_PORT': '4000'})),
    # No job id (srun outside a job is not possible, but an empty one is not a crash).
    ({'SLURM_PROCID': '0', 'SLURM_NTASKS': '1', 'SLURM_JOB_ID': ''}, _no_scontrol,
     ('srun', {'RANK': '0', 'WORLD_SIZE': '1', 'LOCAL_RANK': '0', 'MASTER_ADDR': '127.0.0.1', 'MASTER_PORT': '20000'})),
])
def test_launcher_env(job, environ, hostnames, expected):
    assert job.launcher_env(environ, hostnames) == expected


@pytest.mark.parametrize('environ', [{}, {'RANK': '0'}, {'SLURM_PROCID': '0'}, {'WORLD_SIZE': '2', 'SLURM_NTASKS': '2'}])
def test_neither_launcher_is_refused(job, environ):
    with pytest.raises(ValueError, match='start it with torchrun, or with srun'):
        job.launcher_env(environ, _no_scontrol)


def test_without_torch_the_job_says_so(job):
    # The controller's Python has no torch: the module still loads (for these tests) and main() refuses.
    if job.torch is not None:
        pytest.skip('torch is installed here')
    assert job.dcp is None and job.DCP_UNAVAILABLE == 'no torch'
    proc = subprocess.run([sys.executable, PATH, '--dir', '/nonexistent'], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=60, check=False)
    assert proc.returncode == 1 and 'train_checkpoint.py: no torch for ' in proc.stderr
