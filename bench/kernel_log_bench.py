#!/usr/bin/env python
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark: reading a 200 MB kernel log file for the Xid check (goal: a few seconds, bounded memory).

The inputs are built for this benchmark only, in a temporary directory that is removed afterwards:
the message texts of a real recording (05_xid_kernel_log/gpud__dmesg.0.log, ISO time stamps) are
repeated with new time stamps until the file reaches the size. Three shapes:

  old-then-recent  200 MB of lines older than the window, the last 2000 lines within it (the usual case)
  all-recent       200 MB of lines all within the window (the file is read up to the size cap, 16 MiB)
  xid-flood        200 MB of Xid lines all within the window (every line is parsed up to the cap)

Each shape runs in a fresh Python process; wall and CPU time and that process's peak RSS are printed
(CPU time is the figure to compare on a busy machine).

  python bench/kernel_log_bench.py [--fixtures DIR] [--size-mb 200]
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
SOURCE = os.path.join('05_xid_kernel_log', 'gpud__dmesg.0.log')
FALLBACK_MESSAGES = ['NVRM: Xid (PCI:0000:19:00): 94, pid=1, name=python3, Ch 00000008',
                     'nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context']
WINDOW_S = 7200

CHILD = r'''
import json, resource, sys, time
sys.path.insert(0, %(collections)r)
from ansible_collections.gpucluster.core.plugins.module_utils.gpu_probe import read_kernel_log_file
t0, c0 = time.perf_counter(), time.process_time()
result = read_kernel_log_file(%(path)r, %(window)d, now=%(now)r)
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
print(json.dumps({'wall': wall, 'cpu': cpu, 'rss_mb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
                  'groups': len(result['events']), 'events': sum(e['count'] for e in result['events']),
                  'limited': result['limited'], 'error': result['error']}))
'''


def messages(fixtures):
    path = os.path.join(fixtures, SOURCE)
    if not os.path.exists(path):
        return FALLBACK_MESSAGES
    found = []
    with open(path, 'rb') as handle:
        for raw in handle:
            line = raw.decode('utf-8', 'replace').rstrip('\n')
            match = re.match(r'^\S+ (.*)$', line)
            if match and match.group(1) not in found:
                found.append(match.group(1))
    return found or FALLBACK_MESSAGES


def stamp(epoch):
    return time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(epoch)) + ',000000+00:00'


def build(path, size, texts, now, shape):
    """Write the benchmark input: lines cycling through texts, stamps chosen by shape."""
    if shape == 'xid-flood':
        texts = [t for t in texts if t.startswith('NVRM: Xid')] or FALLBACK_MESSAGES[:1]
    block_lines = []
    for n in range(2000):
        block_lines.append(texts[n % len(texts)])
    old = stamp(now - 5 * 86400)
    recent = stamp(now - 600)
    body_stamp = recent if shape in ('all-recent', 'xid-flood') else old
    block = ''.join('%s %s\n' % (body_stamp, t) for t in block_lines).encode('utf-8')
    tail = ''.join('%s %s\n' % (recent, t) for t in block_lines).encode('utf-8')
    written = 0
    with open(path, 'wb') as handle:
        while written + len(block) + len(tail) < size:
            handle.write(block)
            written += len(block)
        handle.write(tail)
        written += len(tail)
    return written


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
    parser.add_argument('--fixtures', default=os.environ.get('GPUCLUSTER_FIXTURES')
                        or os.path.join(REPO, '..', 'shared', 'fixtures'))
    parser.add_argument('--size-mb', type=int, default=200)
    args = parser.parse_args()

    texts = messages(args.fixtures)
    now = time.time()
    tmp = tempfile.mkdtemp(prefix='kernel_log_bench.')
    try:
        print('input: message texts of %s re-stamped, %d MB per shape, window %d min'
              % (SOURCE, args.size_mb, WINDOW_S // 60))
        for shape in ('old-then-recent', 'all-recent', 'xid-flood'):
            path = os.path.join(tmp, 'kern-%s.log' % shape)
            size = build(path, args.size_mb * 1000 * 1000, texts, now, shape)
            code = CHILD % {'collections': os.path.join(REPO, 'collections'), 'path': path, 'window': WINDOW_S,
                            'now': now}
            proc = subprocess.run([sys.executable, '-c', code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  check=False, universal_newlines=True)
            if proc.returncode != 0:
                print('%-16s failed: %s' % (shape, proc.stderr[-500:]))
                return 1
            figures = json.loads(proc.stdout)
            print('%-16s %4d MB: %.2f s wall, %.2f s CPU, peak RSS %.0f MB, %d events in %d group(s)%s'
                  % (shape, size // 1000000, figures['wall'], figures['cpu'], figures['rss_mb'], figures['events'],
                     figures['groups'],
                     '; ' + figures['limited'] if figures['limited'] else ''))
            os.unlink(path)
    finally:
        shutil.rmtree(tmp)
    return 0


if __name__ == '__main__':
    sys.exit(main())
