#!/usr/bin/env python
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark: the size of the acceptance run's pair schedule, and the cost of judging it.

For 32 and 128 nodes (or --nodes), prints the planned pair count, the rounds of the circle-method
schedule (n - 1 for even n, n for odd n: every pair of a round measured at once, a node in one pair
per round) and the estimated time at --seconds-per-pair (default 10 s), measured one pair after the
other and scheduled in rounds, with --rails rails measured in parallel or one after the other.
The schedule is built for real (fabric_matrix.round_robin) and checked against the estimate; the
verdict of a full matrix (every pair both directions, one slow node) is timed. Prints figures,
asserts nothing but the schedule's own size.

  python bench/validate_plan_bench.py [--nodes 32 128] [--seconds-per-pair 10] [--rails 8]
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import argparse
import itertools
import os
import sys
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
sys.path.insert(0, os.path.join(REPO, 'collections'))

from ansible_collections.gpucluster.core.plugins.module_utils import fabric_matrix as fm  # noqa: E402


def _duration(seconds):
    if seconds < 120:
        return '%.0f s' % seconds
    if seconds < 7200:
        return '%.1f min' % (seconds / 60.0)
    return '%.1f h' % (seconds / 3600.0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--nodes', type=int, nargs='+', default=[32, 128])
    parser.add_argument('--seconds-per-pair', type=float, default=10.0)
    parser.add_argument('--rails', type=int, default=8)
    args = parser.parse_args()
    print('== pair schedule at %g s per pair (both directions of a pair inside that time)' % args.seconds_per_pair)
    for count in args.nodes:
        nodes = ['node%03d' % i for i in range(1, count + 1)]
        started = time.perf_counter()
        rounds = fm.round_robin(nodes)
        schedule_s = time.perf_counter() - started
        plan = fm.plan_estimate(count, args.seconds_per_pair)
        pairs = sum(len(r) for r in rounds)
        if (pairs, len(rounds)) != (plan['pairs'], plan['rounds']):
            raise SystemExit('schedule %d pairs in %d rounds does not match the estimate %d pairs in %d rounds'
                             % (pairs, len(rounds), plan['pairs'], plan['rounds']))
        parallel = fm.plan_estimate(count, args.seconds_per_pair, args.rails, True)
        serial_rails = fm.plan_estimate(count, args.seconds_per_pair, args.rails, False)
        slow = nodes[-1]
        measurements = [{'src': s, 'dst': d, 'gbps': 50.0 if slow in (s, d) else 390.0}
                        for s, d in itertools.permutations(nodes, 2)]
        started = time.perf_counter()
        verdict = fm.judge(nodes, measurements, floor_gbps=fm.port_floor_gbps(400))
        judge_s = time.perf_counter() - started
        print('%4d nodes: %5d pairs in %3d rounds (%d pairs per round); one pair after the other %s, '
              'scheduled %s' % (count, plan['pairs'], plan['rounds'], count // 2, _duration(plan['seconds_serial']),
                                _duration(plan['seconds_scheduled'])))
        print('            %d rails: %d measurements; rails in parallel %s, rails one after the other %s'
              % (args.rails, parallel['measurements'], _duration(parallel['seconds_scheduled']),
                 _duration(serial_rails['seconds_scheduled'])))
        print('            schedule built in %.3f s; verdict of %d directional figures in %.3f s (bad nodes: %s)'
              % (schedule_s, len(measurements), judge_s, ', '.join(verdict['bad_nodes']) or 'none'))


if __name__ == '__main__':
    main()
