# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A short distributed training loop that checkpoints the way real training code does, for the lab's
checkpoint round trip (issue 32): CPU only, gloo, started by torchrun (Debian's python3-torch 1.13 on
bookworm, newer on trixie).

Every --save-every steps it saves
  DIR/dcp/step_NNNNNN/          torch.distributed.checkpoint: every rank's __R_0.distcp shards, then .metadata
                                 (written by rank 0 last, by rename): the backup's `dcp` convention;
  DIR/torch/model_step_NNNNNN.pt  torch.save by rank 0 into a .tmp file renamed into place: `torch_save`.
The data of each step is a function of the step alone, so a run resumed from the checkpoint of step N
computes exactly the losses an uninterrupted run computed after step N.

  torchrun --standalone --nproc_per_node=2 train_checkpoint.py --dir DIR --steps 20 --save-every 5 --log A.jsonl
      trains steps 1..20, saving at 5, 10, 15, 20
  ... --kill-at-save 15
      dies in the save of step 15 after writing that torch.save file halfway (model_step_000015.pt.tmp) and the
      DCP shards, before .metadata: two half-written checkpoints the backup must not take (exit status 86)
  ... --resume-from RESTORED/.../dcp/step_000010 (or a restored model_step_000010.pt) --log B.jsonl
      loads that checkpoint, logs {"resumed": 10, "loss": L} with the loss saved in it, trains steps 11..20

Rank 0 appends one JSON line a step to --log: {"step": N, "loss": "<repr of the float>"} (the loss averaged
over the ranks). The round trip passes when B's "resumed" loss is A's loss of step 10 and B's steps 11..20
have A's losses, character for character.
"""
from __future__ import absolute_import, division, print_function

import argparse
import io
import json
import os

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

FEATURES = 8
BATCH = 16
KILLED = 86


class KilledWriter(dcp.FileSystemWriter):
    """A FileSystemWriter killed where a job killed mid-save dies: shards written, .metadata not."""

    def finish(self, *args, **kwargs):  # pylint: disable=unused-argument
        os._exit(KILLED)


def batch(step, rank):
    """The data of STEP on RANK: the same for every run."""
    generator = torch.Generator().manual_seed(1000003 * step + rank)
    x = torch.randn(BATCH, FEATURES, generator=generator, dtype=torch.float64)
    truth = torch.arange(1, FEATURES + 1, dtype=torch.float64) / FEATURES
    return x, x @ truth + 0.01 * torch.randn(BATCH, generator=generator, dtype=torch.float64)


def state_dict(model, step, loss):
    """What a checkpoint holds: the weights and a (step, loss) tensor (tensors only: DCP of torch 1.13)."""
    state = dict(('model.' + name, tensor) for name, tensor in model.state_dict().items())
    state['meta'] = torch.tensor([float(step), loss], dtype=torch.float64)
    return state


def save_dcp(path, state, writer_class=dcp.FileSystemWriter):
    writer = writer_class(path)
    if hasattr(dcp, 'save'):
        dcp.save(state, storage_writer=writer)
    else:
        dcp.save_state_dict(state, storage_writer=writer)


def load_dcp(path, state):
    reader = dcp.FileSystemReader(path)
    if hasattr(dcp, 'load'):
        dcp.load(state, storage_reader=reader)
    else:
        dcp.load_state_dict(state, storage_reader=reader)


def save_torch(path, state, half=False):
    """torch.save into PATH.tmp, renamed into place; HALF: die after writing half of it (a killed save)."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    data = buffer.getvalue()
    with open(path + '.tmp', 'wb') as handle:
        handle.write(data[:len(data) // 2] if half else data)
        handle.flush()
        os.fsync(handle.fileno())
    if not half:
        os.replace(path + '.tmp', path)


def log_line(path, record):
    line = json.dumps(record, sort_keys=True)
    print(line, flush=True)
    if path:
        with open(path, 'a') as handle:
            handle.write(line + '\n')


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--dir', required=True)
    parser.add_argument('--steps', type=int, default=20)
    parser.add_argument('--save-every', type=int, default=5)
    parser.add_argument('--kill-at-save', type=int, default=0)
    parser.add_argument('--resume-from', default='')
    parser.add_argument('--log', default='')
    args = parser.parse_args()

    dist.init_process_group('gloo')
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Linear(FEATURES, 1, dtype=torch.float64)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05)  # no optimizer state: the weights are the state
    first = 1
    if args.resume_from:
        state = state_dict(model, 0, 0.0)
        if os.path.isdir(args.resume_from):
            load_dcp(args.resume_from, state)
        else:
            state = torch.load(args.resume_from, map_location='cpu')
        model.load_state_dict(dict((name[len('model.'):], tensor) for name, tensor in state.items()
                                   if name.startswith('model.')))
        step, loss = int(state['meta'][0].item()), float(state['meta'][1].item())
        first = step + 1
        if rank == 0:
            log_line(args.log, {'resumed': step, 'loss': repr(loss)})
    for directory in ('dcp', 'torch'):
        os.makedirs(os.path.join(args.dir, directory), exist_ok=True)

    for step in range(first, args.steps + 1):
        x, y = batch(step, rank)
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(x).squeeze(1), y)
        loss.backward()
        optimizer.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        mean = float(mean.item()) / dist.get_world_size()
        if rank == 0:
            log_line(args.log, {'step': step, 'loss': repr(mean)})
        if step % args.save_every:
            continue
        state = state_dict(model, step, mean)
        name = 'step_%06d' % step
        killed = step == args.kill_at_save
        if rank == 0:
            save_torch(os.path.join(args.dir, 'torch', 'model_%s.pt' % name), state, half=killed)
            os.makedirs(os.path.join(args.dir, 'dcp', name), exist_ok=True)
        dist.barrier()
        save_dcp(os.path.join(args.dir, 'dcp', name), state, KilledWriter if killed else dcp.FileSystemWriter)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == '__main__':
    main()
