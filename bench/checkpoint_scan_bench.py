#!/usr/bin/env python
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark: the checkpoint backup's scan of 10,000 checkpoint directories (issue 32's goal: under 5 s).

A tree is built for this benchmark only, in a temporary directory removed afterwards: USERS users, each with
runs whose checkpoints follow the conventions in turn (the project's marker listing its files, a
torch.distributed.checkpoint directory with .metadata, a DeepSpeed save_dir with `latest`, a Hugging Face
checkpoint-N, Lightning .ckpt files, torch.save files), a tenth of them half-written. The scan
(checkpoint_scan.scan over DiskView) runs in a fresh Python process, twice: the first with a cold page
cache for this tree as far as the kernel allows without root (the figure that counts on NFS is the lab's),
the second warm. Wall and CPU time, peak RSS and the decisions are printed.

The other goal, "a backup over 1,000 unchanged checkpoints reads no checkpoint file again", is restic's to
show: run the backup twice in the lab and read the second run's summary (the journal's "backup ok: ...
(files new 0, changed 0, unmodified N; ...)" line, or gpucluster_checkpoint_backup_files{kind="unmodified"}).

  python bench/checkpoint_scan_bench.py [--checkpoints 10000] [--users 50] [--files 4]
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
GOAL_S = 5.0

CHILD = r'''
import json, resource, sys, time
sys.path.insert(0, %(collections)r)
from ansible_collections.gpucluster.core.plugins.module_utils import checkpoint_scan as cs
config = {'conventions': list(cs.DEFAULT_CONVENTIONS), 'marker': '.checkpoint-complete', 'max_depth': 3,
          'min_age_seconds': 0}
t0, c0 = time.perf_counter(), time.process_time()
result = cs.scan(cs.DiskView(%(root)r), config, time.time_ns())
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
counts = {}
for (state, reason), n in cs.counts(result['items']).items():
    counts['%%s/%%s' %% (state, reason)] = n
print(json.dumps({'wall': wall, 'cpu': cpu, 'rss_mb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
                  'items': len(result['items']), 'users': len(result['users']), 'counts': counts}))
'''


def _write(path, data=b'x'):
    with open(path, 'wb') as handle:
        handle.write(data)


def build(root, checkpoints, users, files):
    """USERS users, CHECKPOINTS checkpoint directories (or files) spread over them, FILES files each."""
    sys.path.insert(0, os.path.join(REPO, 'collections'))
    from ansible_collections.gpucluster.core.plugins.module_utils import checkpoint_scan as cs
    made = 0
    per_user = (checkpoints + users - 1) // users
    for u in range(users):
        user = os.path.join(root, 'user%03d' % u)
        for i in range(per_user):
            if made >= checkpoints:
                return made
            kind = i % 6
            run = os.path.join(user, 'run%02d' % (i // 60))
            broken = (i // 6) % 10 == 9
            if kind == 0:  # the project's marker
                d = os.path.join(run, 'marker', 'step%05d' % i)
                os.makedirs(d)
                for f in range(files):
                    _write(os.path.join(d, 'shard-%d.bin' % f))
                if not broken:
                    listing = cs.walk_files(cs.DiskView(d), '')
                    _write(os.path.join(d, '.checkpoint-complete'), cs.manifest_for(listing))
            elif kind == 1:  # torch.distributed.checkpoint
                d = os.path.join(run, 'dcp', 'step%05d' % i)
                os.makedirs(d)
                for f in range(files):
                    _write(os.path.join(d, '__%d_0.distcp' % f))
                if not broken:
                    _write(os.path.join(d, '.metadata'), b'metadata')
            elif kind == 2:  # DeepSpeed save_dir, one tag a save_dir
                d = os.path.join(run, 'ds%05d' % i)
                tag = os.path.join(d, 'global_step%d' % i)
                os.makedirs(tag)
                for f in range(files):
                    _write(os.path.join(tag, 'zero_pp_rank_%d_mp_rank_00_optim_states.pt' % f))
                _write(os.path.join(d, 'latest'), b'' if broken else ('global_step%d' % i).encode())
            elif kind == 3:  # Hugging Face Trainer
                d = os.path.join(run, 'hf', ('tmp-checkpoint-%d' if broken else 'checkpoint-%d') % i)
                os.makedirs(d)
                for f in range(files - 1):
                    _write(os.path.join(d, 'model-%d.safetensors' % f))
                _write(os.path.join(d, 'trainer_state.json'), b'{"global_step": %d}' % i)
            elif kind == 4:  # Lightning
                d = os.path.join(run, 'lightning')
                if not os.path.isdir(d):
                    os.makedirs(d)
                _write(os.path.join(d, 'epoch=%d-step=%d.ckpt%s' % (i, i, '.tmp' if broken else '')))
            else:  # torch.save
                d = os.path.join(run, 'plain')
                if not os.path.isdir(d):
                    os.makedirs(d)
                _write(os.path.join(d, 'model_%05d.pt%s' % (i, '.tmp' if broken else '')))
            made += 1
    return made


def scan_once(root):
    code = CHILD % {'collections': os.path.join(REPO, 'collections'), 'root': root}
    out = subprocess.check_output([sys.executable, '-c', code], universal_newlines=True)
    return json.loads(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--checkpoints', type=int, default=10000)
    parser.add_argument('--users', type=int, default=50)
    parser.add_argument('--files', type=int, default=4)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix='gpucluster-ckpt-bench-')
    try:
        made = build(root, args.checkpoints, args.users, args.files)
        entries = sum(len(dirs) + len(files) for _d, dirs, files in os.walk(root))
        print('  tree: %d checkpoints (6 conventions, 1 in 10 half-written) of %d users, %d entries'
              % (made, args.users, entries))
        for label in ('first scan', 'second scan'):
            figures = scan_once(root)
            print('  %-12s %6.2f s wall  %6.2f s CPU  %6.1f MB peak RSS  %d decisions  (goal < %.0f s: %s)'
                  % (label, figures['wall'], figures['cpu'], figures['rss_mb'], figures['items'], GOAL_S,
                     'met' if figures['wall'] < GOAL_S else 'NOT met'))
        complete = sum(n for key, n in figures['counts'].items() if key.startswith('complete/'))
        print('  decisions: %d complete, %d not; by reason: %s' % (
            complete, figures['items'] - complete,
            ', '.join('%s %d' % (key, n) for key, n in sorted(figures['counts'].items()))))
    finally:
        shutil.rmtree(root)


if __name__ == '__main__':
    main()
