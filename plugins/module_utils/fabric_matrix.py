# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pairwise fabric acceptance: which pairs to measure when, and what the figures say.

Pure functions, no I/O, no Ansible imports; the acceptance playbook measures (iperf3 over the
cluster or IPoIB network, ``ib_write_bw`` on RDMA) and hands the figures here. Python 3.9+.

- :func:`round_robin` schedules every pair of nodes so that a node is in one pair per round (the
  circle method): a pair's bandwidth is never shared with a third transfer on either end.
- :func:`judge` compares every pair with the fleet. A pair's figure is the lower of its two
  directions (a link is as fast as its worse direction). The fleet reference is the median, over
  the nodes, of each node's best pair: with three nodes and one bad node, two of the three pairs
  touch the bad node, so the median of all pairs would be the bad figure and hide it; the
  median of per-node bests stays at the healthy figure while fewer than half the nodes are bad.
  A pair below ``fraction`` x reference, below the absolute floor, or that could not be measured
  is low. A node whose every pair is low is a **bad node**; a low pair between two nodes that are
  not bad is a **bad link**. With two nodes only the floor can judge (there is no fleet).
- :func:`retest_plan` and :func:`apply_retest`: each suspect is measured again against a node
  that passed (and a bad link once more end to end) before anything is blamed; a suspect whose
  retest is fine is reported as not reproduced, not failed.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import math

PAIR_STATUSES = ('ok', 'low', 'below_floor', 'failed')


class MatrixInputError(ValueError):
    """Bad arguments: the message names the argument and what is accepted."""


def _check_nodes(nodes):
    if not isinstance(nodes, (list, tuple)) or not all(isinstance(n, str) and n for n in nodes):
        raise MatrixInputError('nodes must be a list of non-empty host names, got %r' % (nodes,))
    if len(set(nodes)) != len(nodes):
        raise MatrixInputError('nodes must not repeat a host: %s' % ', '.join(sorted(
            n for n in set(nodes) if list(nodes).count(n) > 1)))
    return list(nodes)


def _number(value, name, low, high, low_inclusive):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise MatrixInputError('%s must be a number, got %r' % (name, value))
    if value > high or value < low or (value == low and not low_inclusive):
        raise MatrixInputError('%s must be %s %s and at most %s, got %r' % (
            name, 'at least' if low_inclusive else 'above', low, high, value))
    return float(value)


def round_robin(nodes):
    """Rounds of disjoint pairs covering every pair of ``nodes`` once.

    ``n`` nodes give ``n - 1`` rounds (even ``n``) or ``n`` rounds (odd ``n``, one node rests each
    round). Pairs are ``(a, b)`` with ``a`` before ``b`` in ``nodes``; the caller measures both
    directions within the pair's slot.
    """
    nodes = _check_nodes(nodes)
    order = {n: i for i, n in enumerate(nodes)}
    ring = list(nodes) + ([None] if len(nodes) % 2 else [])
    size = len(ring)
    rounds = []
    for _round in range(size - 1):
        pairs = []
        for i in range(size // 2):
            a, b = ring[i], ring[size - 1 - i]
            if a is not None and b is not None:
                pairs.append((a, b) if order[a] < order[b] else (b, a))
        rounds.append(sorted(pairs, key=lambda p: (order[p[0]], order[p[1]])))
        ring = [ring[0], ring[-1]] + ring[1:-1]
    return [r for r in rounds if r]


def schedule(pairs):
    """Greedy rounds for an arbitrary list of pairs, a node in at most one pair per round."""
    rounds = []
    for pair in pairs:
        for current in rounds:
            if not any(pair[0] in p or pair[1] in p for p in current):
                current.append(pair)
                break
        else:
            rounds.append([pair])
    return rounds


def _directional(measurements, nodes):
    """{(src, dst): (gbps or None, error or None)} from a list of measurement dicts."""
    known = set(nodes)
    result = {}
    if not isinstance(measurements, (list, tuple)):
        raise MatrixInputError('measurements must be a list of {src, dst, gbps, error} records')
    for item in measurements:
        if not isinstance(item, dict) or item.get('src') not in known or item.get('dst') not in known \
                or item.get('src') == item.get('dst'):
            raise MatrixInputError('measurement %r must name two different nodes of the matrix as src '
                                   'and dst' % (item,))
        gbps = item.get('gbps')
        error = item.get('error')
        if gbps is not None:
            if isinstance(gbps, bool) or not isinstance(gbps, (int, float)) or math.isnan(gbps) or gbps < 0:
                raise MatrixInputError('measurement %s -> %s: gbps must be a number of at least 0, got %r'
                                       % (item['src'], item['dst'], gbps))
            gbps = float(gbps)
        if gbps is None and not error:
            error = 'no figure'
        result[(item['src'], item['dst'])] = (None if error else gbps, error or None)
    return result


def _median(values):
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2.0


def _pair_figures(nodes, directional):
    pairs = {}
    for i, a in enumerate(nodes):
        for b in nodes[i + 1:]:
            legs = []
            errors = []
            for src, dst in ((a, b), (b, a)):
                gbps, error = directional.get((src, dst), (None, 'not measured'))
                if error:
                    errors.append('%s -> %s: %s' % (src, dst, error))
                legs.append(gbps)
            pairs[(a, b)] = {
                'a': a, 'b': b,
                'a_to_b_gbps': legs[0], 'b_to_a_gbps': legs[1],
                'gbps': None if errors else min(legs),
                'errors': errors,
            }
    return pairs


def judge(nodes, measurements, fraction=0.8, floor_gbps=None):
    """The verdict on a pair matrix. See the module docstring for the rules.

    Returns a dict: ``reference_gbps``, ``threshold_gbps``, ``floor_gbps``, ``pairs`` (one per
    unordered pair with ``status`` in PAIR_STATUSES and a ``reason``), ``nodes`` ({name: {status:
    ok|suspect|bad_node, low_pairs, pairs}}; a node whose low pairs all touch bad nodes is ok),
    ``bad_nodes``, ``bad_links`` ([[a, b], ...]), ``passed`` (the ok nodes, retest partners) and
    ``ok`` (no bad node and no bad link).
    """
    nodes = _check_nodes(nodes)
    if len(nodes) < 2:
        raise MatrixInputError('nodes must name at least two hosts to measure a pair, got %d' % len(nodes))
    fraction = _number(fraction, 'fraction', 0.0, 1.0, False)
    if floor_gbps is not None:
        floor_gbps = _number(floor_gbps, 'floor_gbps', 0.0, float('inf'), True)
    pairs = _pair_figures(nodes, _directional(measurements, nodes))

    best = {}
    for pair in pairs.values():
        value = pair['gbps'] if pair['gbps'] is not None else 0.0
        for node in (pair['a'], pair['b']):
            best[node] = max(best.get(node, 0.0), value)
    reference = _median([best[n] for n in nodes])
    threshold = fraction * reference

    for pair in pairs.values():
        if pair['errors']:
            pair['status'], pair['reason'] = 'failed', '; '.join(pair['errors'])
        elif floor_gbps is not None and pair['gbps'] < floor_gbps:
            pair['status'] = 'below_floor'
            pair['reason'] = '%.1f Gb/s is below the floor of %.1f Gb/s' % (pair['gbps'], floor_gbps)
        elif pair['gbps'] < threshold:
            pair['status'] = 'low'
            pair['reason'] = '%.1f Gb/s is below %.2f x the fleet reference %.1f Gb/s' % (
                pair['gbps'], fraction, reference)
        else:
            pair['status'], pair['reason'] = 'ok', ''

    node_info = {}
    for node in nodes:
        mine = [p for p in pairs.values() if node in (p['a'], p['b'])]
        low = [p for p in mine if p['status'] != 'ok']
        node_info[node] = {
            'status': 'bad_node' if low and len(low) == len(mine) and len(nodes) > 2 else 'ok',
            'pairs': len(mine),
            'low_pairs': sorted((p['b'] if p['a'] == node else p['a']) for p in low),
        }
    bad_nodes = [n for n in nodes if node_info[n]['status'] == 'bad_node']
    bad_links = []
    for key in sorted(pairs, key=lambda k: (nodes.index(k[0]), nodes.index(k[1]))):
        pair = pairs[key]
        if pair['status'] != 'ok' and pair['a'] not in bad_nodes and pair['b'] not in bad_nodes:
            bad_links.append([pair['a'], pair['b']])
            # A low pair that no bad node explains makes both its ends suspects.
            node_info[pair['a']]['status'] = node_info[pair['b']]['status'] = 'suspect'
    ordered_pairs = [pairs[k] for k in sorted(pairs, key=lambda k: (nodes.index(k[0]), nodes.index(k[1])))]
    return {
        'nodes_order': nodes,
        'fraction': fraction,
        'reference_gbps': reference,
        'threshold_gbps': threshold,
        'floor_gbps': floor_gbps,
        'pairs': ordered_pairs,
        'nodes': node_info,
        'bad_nodes': bad_nodes,
        'bad_links': bad_links,
        'passed': [n for n in nodes if node_info[n]['status'] == 'ok'],
        'ok': not bad_nodes and not bad_links,
    }


def _partner(verdict, exclude):
    """The node that passed with the best figure, not in ``exclude``; None when there is none."""
    candidates = [n for n in verdict['passed'] if n not in exclude]
    if not candidates:
        return None

    def best(node):
        return max((p['gbps'] or 0.0) for p in verdict['pairs'] if node in (p['a'], p['b']))
    return sorted(candidates, key=lambda n: (-best(n), verdict['nodes_order'].index(n)))[0]


def retest_plan(verdict):
    """Pairs to measure again before blaming anyone, and the partner each suspect is tried with.

    A bad node is measured against a node that passed; a bad link once more end to end and each
    end against a node that passed. Returns ``{'pairs': [[a, b], ...], 'rounds': [...],
    'partners': {suspect: partner or None}}``; a suspect without a partner (no node passed) keeps
    its first verdict.
    """
    pairs = []
    partners = {}

    def add(a, b):
        if [a, b] not in pairs and [b, a] not in pairs:
            pairs.append([a, b])

    for node in verdict['bad_nodes']:
        partners[node] = _partner(verdict, {node})
        if partners[node]:
            add(node, partners[node])
    for a, b in verdict['bad_links']:
        add(a, b)
        for end in (a, b):
            partners.setdefault(end, _partner(verdict, {a, b}))
            if partners[end]:
                add(end, partners[end])
    return {'pairs': pairs, 'rounds': schedule([tuple(p) for p in pairs]), 'partners': partners}


def apply_retest(verdict, plan, measurements):
    """The final verdict once the retest figures are in.

    The retest is judged against the first run's threshold and floor (the fleet reference does not
    move). A bad node whose retest against a passed partner is fine, or a bad link whose retest end
    to end is fine, is "not reproduced"; a bad link whose end also fails against a passed partner
    becomes that end's bad node.
    """
    nodes = verdict['nodes_order']
    directional = _directional(measurements, nodes)
    retested = _pair_figures(nodes, directional)

    def low(a, b):
        key = (a, b) if nodes.index(a) < nodes.index(b) else (b, a)
        if (key[0], key[1]) not in directional and (key[1], key[0]) not in directional:
            return None
        pair = retested[key]
        if pair['errors']:
            return True
        if verdict['floor_gbps'] is not None and pair['gbps'] < verdict['floor_gbps']:
            return True
        return pair['gbps'] < verdict['threshold_gbps']

    bad_nodes, not_reproduced, bad_links = [], [], []
    for node in verdict['bad_nodes']:
        partner = plan['partners'].get(node)
        result = low(node, partner) if partner else None
        if result is False:
            not_reproduced.append({'node': node, 'partner': partner})
        else:
            bad_nodes.append(node)
    for a, b in verdict['bad_links']:
        ends_low = [end for end in (a, b)
                    if plan['partners'].get(end) and low(end, plan['partners'][end]) is True]
        for end in ends_low:
            if end not in bad_nodes:
                bad_nodes.append(end)
        if ends_low:
            continue
        if low(a, b) is False:
            not_reproduced.append({'link': [a, b]})
        else:
            bad_links.append([a, b])
    final = dict(verdict)
    final.update({
        'bad_nodes': [n for n in nodes if n in bad_nodes],
        'bad_links': bad_links,
        'not_reproduced': not_reproduced,
        'retest': [{'a': p['a'], 'b': p['b'], 'gbps': p['gbps'], 'errors': p['errors']}
                   for k, p in sorted(retested.items())
                   if k in directional or (k[1], k[0]) in directional],
        'ok': not bad_nodes and not bad_links,
    })
    return final
