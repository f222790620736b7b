# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A short distributed training loop that checkpoints the way real training code does (LAB ONLY: the lab's
checkpoint round trip, issue 32, and the example job `make lab` prints). CPU only, gloo; started by torchrun
or by srun (one task a rank).

Every --save-every steps it saves
  DIR/torch/model_step_NNNNNN.pt  torch.save by rank 0 into a .tmp file renamed into place: the backup's
                                  `torch_save` convention;
  DIR/dcp/step_NNNNNN/            torch.distributed.checkpoint: the ranks' *.distcp shards, then .metadata
                                  (written last, by rename): the backup's `dcp` convention. Where the torch
                                  cannot (Debian 12's python3-torch 1.13 on Python 3.11 fails to import it),
                                  the first log line says so and only torch.save files are written.
The data of each step is a function of the step alone, so a run resumed from the checkpoint of step N
computes exactly the losses an uninterrupted run computed after step N.

  torchrun --nproc_per_node=2 --redirects=1 --tee=1 train_checkpoint.py --dir DIR --steps 20 --save-every 5
  srun --ntasks=2 python3 train_checkpoint.py --dir DIR ...   (rank = SLURM_PROCID; the rendezvous is on the
                                                               step's first node unless MASTER_ADDR says)
      trains steps 1..20, saving at 5, 10, 15, 20
  ... --kill-at-save 15
      dies in the save of step 15 (exit status 86) after writing that torch.save file halfway
      (model_step_000015.pt.tmp) and the DCP shards, before .metadata: half-written checkpoints the
      backup must not take
  ... --resume-from DIR/dcp/step_000010 (or DIR/torch/model_step_000010.pt) --log B.jsonl
      loads that checkpoint, logs {"resumed": 10, "loss": L} with the loss saved in it, trains steps 11..20

Rank 0 prints one JSON line a step, and appends it to --log: first {"torch": VERSION, "dcp": true|false,
"launcher": "torchrun"|"srun", "world": N} ("dcp_unavailable": why, when false), then {"step": N, "loss":
"<repr of the float>"} (the loss averaged over the ranks). The round trip passes when B's "resumed" loss is A's
loss of step 10 and B's steps 11.. have A's losses, character for character.

torchrun's own flags: Debian 12's torch 1.13 cannot parse the defaults of --redirects and --tee under Python
3.11 (give both); Debian 13's torch 2.6 is built without libuv, and torchrun's rendezvous store asks for it
whatever the environment says ("use_libuv was requested but PyTorch was build without libuv support"): start
the ranks with srun there. This program asks for the store without libuv (USE_LIBUV=0 unless set).
"""
from __future__ import absolute_import, division, print_function

import argparse
import io
import json
import os
import subprocess
import sys

# The ranks' own store (init_process_group env://) honours this; libuv is only faster at thousands of ranks.
os.environ.setdefault('USE_LIBUV', '0')

try:
    import torch  # noqa: E402  pylint: disable=wrong-import-position
    import torch.distributed as dist  # noqa: E402  pylint: disable=wrong-import-position
except ImportError:  # the unit tests read launcher_env on a controller without torch; main() says so
    torch = dist = None

dcp = None
DCP_UNAVAILABLE = 'no torch'
if torch is not None:
    try:
        import torch.distributed.checkpoint as dcp
        DCP_UNAVAILABLE = ''
    # Missing before torch 2.0; any failure: try the old place.
    except Exception:  # pylint: disable=broad-except
        try:  # torch 1.13: the same API before it moved
            import torch.distributed._shard.checkpoint as dcp
            DCP_UNAVAILABLE = ''
        # torch 1.13 on Python 3.11 fails with a dataclass ValueError.
        except Exception as exc:  # pylint: disable=broad-except
            DCP_UNAVAILABLE = 'torch %s cannot import torch.distributed.checkpoint: %s: %s' % (
                torch.__version__, type(exc).__name__, str(exc)[:200])

FEATURES = 8
BATCH = 16
KILLED = 86


def slurm_hostnames(nodelist):
    """The host names of a Slurm node list (node[1-3]), as Slurm expands it."""
    return subprocess.check_output(['scontrol', 'show', 'hostnames', nodelist]).decode().split()


def launcher_env(environ, hostnames=slurm_hostnames):
    """(launcher, variables): RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT for init_process_group are
    torchrun's as they are, or made from srun's (SLURM_PROCID, SLURM_NTASKS; rank 0 runs on the step's first
    node: 127.0.0.1 on one node; the port from the job id). ValueError when neither started this program."""
    if 'RANK' in environ and 'WORLD_SIZE' in environ:
        return 'torchrun', {}
    if 'SLURM_PROCID' not in environ or 'SLURM_NTASKS' not in environ:
        raise ValueError('start it with torchrun, or with srun (one task a rank)')
    master = environ.get('MASTER_ADDR', '')
    if not master and environ.get('SLURM_STEP_NUM_NODES', environ.get('SLURM_NNODES', '1')) == '1':
        master = '127.0.0.1'
    if not master:
        master = hostnames(environ.get('SLURM_STEP_NODELIST') or environ['SLURM_JOB_NODELIST'])[0]
    job = int(environ.get('SLURM_JOB_ID', '0') or 0)
    return 'srun', {'RANK': environ['SLURM_PROCID'], 'WORLD_SIZE': environ['SLURM_NTASKS'],
                    'LOCAL_RANK': environ.get('SLURM_LOCALID', '0'), 'MASTER_ADDR': master,
                    'MASTER_PORT': environ.get('MASTER_PORT') or str(20000 + job % 10000)}


if dcp is not None:
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


def save_dcp(path, state, killed=False):
    writer = (KilledWriter if killed else dcp.FileSystemWriter)(path)
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
    """torch.save into PATH.tmp, renamed into place; HALF: stop after writing half of it (a killed save)."""
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
    if torch is None:
        sys.exit('train_checkpoint.py: no torch for %s (python3-torch, or a site\'s own)' % sys.executable)
    if args.resume_from and os.path.isdir(args.resume_from) and dcp is None:
        sys.exit('train_checkpoint.py: cannot resume from a torch.distributed.checkpoint directory: '
                 + DCP_UNAVAILABLE)
    try:
        launcher, env = launcher_env(os.environ)
    except ValueError as exc:
        sys.exit('train_checkpoint.py: %s' % exc)
    os.environ.update(env)
    dist.init_process_group('gloo')
    rank = dist.get_rank()
    if rank == 0:
        about = {'torch': torch.__version__, 'dcp': dcp is not None, 'launcher': launcher,
                 'world': dist.get_world_size()}
        if DCP_UNAVAILABLE:
            about['dcp_unavailable'] = DCP_UNAVAILABLE
        log_line(args.log, about)
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
    for directory in ('dcp', 'torch') if dcp is not None else ('torch',):
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
            if dcp is not None:
                os.makedirs(os.path.join(args.dir, 'dcp', name), exist_ok=True)
        dist.barrier()
        if dcp is None:
            if killed:
                os._exit(KILLED)
            continue
        save_dcp(os.path.join(args.dir, 'dcp', name), state, killed)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == '__main__':
    main()
