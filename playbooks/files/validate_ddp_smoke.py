# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Distributed training smoke test of playbooks/validate.yml, started by torchrun on every node.

Each rank joins the process group with the backend the playbook asks for (GPUCLUSTER_DDP_BACKEND:
NCCL on GPU nodes, gloo where no node has a GPU; a rank asked for NCCL that sees no GPU says so and
fails), all-reduces a tensor holding
rank + 1, checks the sum is 1 + 2 + ... + world_size and prints one line:
``gpucluster-ddp rank=R world=W local_rank=L host=H backend=B sum=S expected=E result=ok|wrong``.
Exit status 1 on a wrong sum; a rank that cannot join makes torchrun fail.
"""
import os
import socket
import sys

import torch
import torch.distributed as dist


def main():
    backend = os.environ.get('GPUCLUSTER_DDP_BACKEND') or ('nccl' if torch.cuda.is_available() else 'gloo')
    local_rank = int(os.environ.get('LOCAL_RANK', '0'))
    device = torch.device('cpu')
    if backend == 'nccl' and not torch.cuda.is_available():
        # The playbook asked for NCCL (the nodes have GPUs) but this rank sees none: say so, never fall
        # back to gloo (that would pass a job that cannot train on the GPUs).
        print('gpucluster-ddp rank=%s world=%s local_rank=%d host=%s backend=nccl-without-gpu sum=0 expected=0 '
              'result=no_gpu' % (os.environ.get('RANK', '?'), os.environ.get('WORLD_SIZE', '?'), local_rank,
                                 socket.gethostname()), flush=True)
        return 1
    if backend == 'nccl':
        torch.cuda.set_device(local_rank)
        device = torch.device('cuda', local_rank)
    dist.init_process_group(backend=backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    tensor = torch.tensor([float(rank + 1)], device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    total = tensor.item()
    expected = world * (world + 1) / 2.0
    good = total == expected
    print('gpucluster-ddp rank=%d world=%d local_rank=%d host=%s backend=%s sum=%g expected=%g result=%s'
          % (rank, world, local_rank, socket.gethostname(), backend, total, expected, 'ok' if good else 'wrong'),
          flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0 if good else 1


if __name__ == '__main__':
    sys.exit(main())
