# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Write the node_exporter textfiles that playbooks/validate.yml writes, for promtool's metric lint.

The reports are built as the playbook builds them (the fabric filters: pair matrix judged, retest plan,
retest applied) for three runs of three nodes: all healthy, one slow node, one slow link; every node's
textfile of each run is rendered with the renderer the playbook calls (fabric.validate_report_prom).
Used by tests/monitoring/promtool.sh (``promtool check metrics`` on every textfile).

    python tests/monitoring/validate_textfiles.py --textfiles DIR    write DIR/validate-<run>-<node>.prom, list them
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import argparse
import os
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
sys.path.insert(0, os.path.join(REPO, 'collections'))
from ansible_collections.gpucluster.core.plugins.filter import fabric  # noqa: E402

NODES = ['node1', 'node2', 'node3']
HEALTHY_GBPS = 9.4
SLOW_GBPS = 1.2
TIMESTAMP = 1764547200


def _measurements(low):
    """Pair measurements as the playbook's rounds record them: {src, dst, gbps, error}; low: {(src, dst): gbps}."""
    found = []
    for src in NODES:
        for dst in NODES:
            if src != dst:
                found.append({'src': src, 'dst': dst, 'gbps': low.get((src, dst), HEALTHY_GBPS), 'error': None})
    return found


def report(low):
    verdict = fabric.fabric_judge(_measurements(low), NODES, 0.8)
    final = fabric.fabric_apply_retest(verdict, fabric.fabric_retest_plan(verdict), [])
    checks = [{'name': 'gpu_health', 'node': n, 'status': 'passed', 'message': 'ok'} for n in NODES]
    checks.append({'name': 'pair_matrix', 'node': 'fleet', 'status': 'passed' if final['ok'] else 'failed',
                   'message': 'bad nodes: %s; bad links: %s' % (final['bad_nodes'], final['bad_links'])})
    return {'generated_at': '2025-12-01T00:00:00Z', 'nodes': NODES, 'tool': 'iperf3', 'matrix': final,
            'mtu': None, 'ok': final['ok'], 'checks': checks}


RUNS = (
    ('healthy', {}),
    ('slow-node', {('node3', 'node1'): SLOW_GBPS, ('node3', 'node2'): SLOW_GBPS}),
    ('slow-link', {('node2', 'node3'): SLOW_GBPS, ('node3', 'node2'): SLOW_GBPS}),
)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
    parser.add_argument('--textfiles', required=True, metavar='DIR',
                        help='write every node textfile of every run as DIR/validate-<run>-<node>.prom; print the paths')
    args = parser.parse_args()
    if not os.path.isdir(args.textfiles):
        os.makedirs(args.textfiles)
    for name, low in RUNS:
        run = report(low)
        for node in NODES:
            path = os.path.join(args.textfiles, 'validate-%s-%s.prom' % (name, node))
            with open(path, 'w') as handle:
                handle.write(fabric.validate_report_prom(run, node, TIMESTAMP))
            print(path)
    return 0


if __name__ == '__main__':
    sys.exit(main())
