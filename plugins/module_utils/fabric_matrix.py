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

A verdict blames nodes only when the measurement can stand up (``fleet_verdict``, FLEET_VERDICTS):
when no pair could be measured (a blocked port, a missing tool), every figure is 0, every pair is
below the absolute floor (a uniformly slow fabric: HDR links on an NDR fabric, PFC off everywhere),
or more than half the nodes would be bad nodes (the fleet reference is then the bad figure: "no fleet
reference: the measurement is suspect"), the run fails with that reason and **no node or link is
blamed**, so nothing is drained. A pair whose measuring server was not ours (``cause: port_taken``:
another process held the port) fails as "port taken" and counts against no node.

Also here, as pure functions over facts the playbook gathers: the NCCL rails of a node and whether
they match across nodes (:func:`nccl_rails`, :func:`check_rails`), absolute floors from each port's rate
(:func:`port_floor_gbps`, :func:`rail_floor`), one machine under two inventory names
(:func:`duplicate_hosts`), the MTU of the interface that carries a measured address
(:func:`address_interface`, :func:`mtu_plan`), whether the process listening on a port is the
server we started (:func:`server_owner`), and the size of the schedule (:func:`plan_estimate`).
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import ipaddress
import math
import re

from ansible_collections.gpucluster.core.plugins.module_utils import rdma_sysfs

PAIR_STATUSES = ('ok', 'low', 'below_floor', 'failed', 'port_taken')
# ok: nothing low; blamed: bad nodes or bad links named; incomplete: no blame, but some pairs could not
# be measured (port taken); the others withhold all blame (see the module docstring).
FLEET_VERDICTS = ('ok', 'blamed', 'incomplete', 'no_measurement', 'all_zero', 'all_below_floor', 'no_reference')
WITHHELD = ('no_measurement', 'all_zero', 'all_below_floor', 'no_reference')
CAUSES = ('port_taken', 'unreachable')
# Share of a port's line rate one ib_write_bw pair must reach. NVIDIA's own multi-node acceptance
# (Mellanox/ngc_multinode_perf, ngc_rdma_test.sh) passes perftest write/read/send at "90% of the port
# link speed"; a healthy HDR port measures 196.5 of 200 Gb/s with ib_write_bw (0.98, shared fixtures
# 06_infiniband/aksrdma__*), and a port at half its rate (trained at HDR on an NDR fabric, x2 width,
# an NDR card in a PCIe Gen4 x8 slot) falls far below.
DEFAULT_RDMA_EFFICIENCY = 0.9
MAX_QUOTE = 200


class MatrixInputError(ValueError):
    """Bad arguments: the message names the argument and what is accepted."""


def _check_nodes(nodes):
    if not isinstance(nodes, (list, tuple)) or not all(isinstance(n, str) and n for n in nodes):
        raise MatrixInputError('nodes must be a list of non-empty host names, got %r' % (nodes,))
    if len(set(nodes)) != len(nodes):
        raise MatrixInputError('nodes must not repeat a host: %s' % ', '.join(sorted(
            n for n in set(nodes) if list(nodes).count(n) > 1)))
    return list(nodes)


def _quote(value, limit=MAX_QUOTE):
    text = ' '.join(str(value).split())
    return text if len(text) <= limit else text[:limit] + '...'


def _number(value, name, low, high, low_inclusive):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise MatrixInputError('%s must be a finite number, got %r' % (name, value))
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
    """{(src, dst): (gbps or None, error or None, cause or None)} from a list of measurement dicts
    ``{src, dst, gbps, error, cause}`` (``cause``: None or one of CAUSES)."""
    known = set(nodes)
    result = {}
    if not isinstance(measurements, (list, tuple)):
        raise MatrixInputError('measurements must be a list of {src, dst, gbps, error} records')
    for item in measurements:
        if not isinstance(item, dict) or not isinstance(item.get('src'), str) or not isinstance(item.get('dst'), str) \
                or item['src'] not in known or item['dst'] not in known or item['src'] == item['dst']:
            raise MatrixInputError('measurement %s must name two different nodes of the matrix as src '
                                   'and dst' % _quote(repr(item)))
        gbps = item.get('gbps')
        error = item.get('error')
        cause = item.get('cause')
        if cause is not None and cause not in CAUSES:
            raise MatrixInputError('measurement %s -> %s: cause must be empty or one of %s, got %s'
                                   % (item['src'], item['dst'], ', '.join(CAUSES), _quote(repr(cause))))
        if gbps is not None:
            if isinstance(gbps, bool) or not isinstance(gbps, (int, float)) or not math.isfinite(gbps) or gbps < 0:
                raise MatrixInputError('measurement %s -> %s: gbps must be a finite number of at least 0, got %s'
                                       % (item['src'], item['dst'], _quote(repr(gbps))))
            gbps = float(gbps)
        if error is not None and not isinstance(error, str):
            error = _quote(repr(error))
        if gbps is None and not error:
            error = 'no figure'
        result[(item['src'], item['dst'])] = (None if error else gbps, _quote(error) if error else None,
                                              cause if error else None)
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
            causes = []
            for src, dst in ((a, b), (b, a)):
                gbps, error, cause = directional.get((src, dst), (None, 'not measured', None))
                if error:
                    errors.append('%s -> %s: %s' % (src, dst, error))
                if cause and cause not in causes:
                    causes.append(cause)
                legs.append(gbps)
            pairs[(a, b)] = {
                'a': a, 'b': b,
                'a_to_b_gbps': legs[0], 'b_to_a_gbps': legs[1],
                'gbps': None if errors else min(legs),
                'errors': errors,
                'port_taken': 'port_taken' in causes,
            }
    return pairs


def judge(nodes, measurements, fraction=0.8, floor_gbps=None):
    """The verdict on a pair matrix. See the module docstring for the rules.

    Returns a dict: ``reference_gbps``, ``threshold_gbps``, ``floor_gbps``, ``pairs`` (one per
    unordered pair with ``status`` in PAIR_STATUSES and a ``reason``), ``nodes`` ({name: {status:
    ok|suspect|bad_node|unjudged, low_pairs, pairs}}; a node whose low pairs all touch bad nodes is
    ok), ``bad_nodes``, ``bad_links`` ([[a, b], ...]), ``passed`` (the ok nodes, retest partners),
    ``fleet_verdict`` (FLEET_VERDICTS) with ``fleet_reason``, ``withheld`` (the nodes and links
    that would have been blamed when the verdict withholds blame), ``unmeasured_pairs`` (port
    taken) and ``ok`` (``fleet_verdict`` is ok).
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
        if pair['errors'] and pair['port_taken']:
            pair['status'] = 'port_taken'
            pair['reason'] = 'port taken (the server measured was not ours; no node is blamed): %s' % (
                '; '.join(pair['errors']))
        elif pair['errors']:
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
        # A pair whose server was not ours says nothing about either node.
        mine = [p for p in pairs.values() if node in (p['a'], p['b']) and p['status'] != 'port_taken']
        low = [p for p in mine if p['status'] != 'ok']
        node_info[node] = {
            'status': 'bad_node' if low and len(low) == len(mine) and len(nodes) > 2 else 'ok',
            'pairs': len(mine),
            'low_pairs': sorted((p['b'] if p['a'] == node else p['a']) for p in low),
        }
    bad_nodes = [n for n in nodes if node_info[n]['status'] == 'bad_node']
    bad_links = []
    order = sorted(pairs, key=lambda k: (nodes.index(k[0]), nodes.index(k[1])))
    for key in order:
        pair = pairs[key]
        if pair['status'] not in ('ok', 'port_taken') and pair['a'] not in bad_nodes and pair['b'] not in bad_nodes:
            bad_links.append([pair['a'], pair['b']])
            # A low pair that no bad node explains makes both its ends suspects.
            node_info[pair['a']]['status'] = node_info[pair['b']]['status'] = 'suspect'
    ordered_pairs = [pairs[k] for k in order]
    verdict = {
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
    }
    return _fleet(verdict)


def _fleet(verdict):
    """``verdict`` with ``fleet_verdict``, ``fleet_reason``, ``withheld``, ``unmeasured_pairs`` and
    ``ok`` set, blame withheld (bad nodes and links moved to ``withheld``) when the measurement
    cannot stand up. See the module docstring."""
    nodes = verdict['nodes_order']
    pairs = verdict['pairs']
    unmeasured = [[p['a'], p['b']] for p in pairs if p['status'] == 'port_taken']
    measured = [p for p in pairs if p['status'] != 'port_taken']
    figures = [p['gbps'] for p in measured if p['gbps'] is not None]
    floor = verdict['floor_gbps']
    kind, reason = None, None
    if measured and not figures:
        kind = 'no_measurement'
        reason = 'no pair could be measured (%d of %d failed), so no node is blamed: %s' % (
            len(measured), len(pairs), measured[0]['reason'])
    elif figures and all(g == 0 for g in figures):
        kind = 'all_zero'
        reason = 'every measured pair reads 0 Gb/s (%d pairs): the measurement is broken, no node is blamed' % (
            len(figures))
    elif figures and floor is not None and all(p['gbps'] is None or p['gbps'] < floor for p in measured):
        kind = 'all_below_floor'
        reason = ('every pair is below the absolute floor of %.2f Gb/s (best %.2f Gb/s): the whole fabric is slow '
                  '(or the floor does not fit it); no single node or link is blamed' % (floor, max(figures)))
    elif len(verdict['bad_nodes']) * 2 > len(nodes):
        kind = 'no_reference'
        reason = ('no fleet reference: the measurement is suspect (%d of %d nodes would be blamed: %s); '
                  'nothing is blamed or drained' % (len(verdict['bad_nodes']), len(nodes),
                                                    ', '.join(verdict['bad_nodes'])))
    result = dict(verdict)
    if kind:
        result['withheld'] = {'bad_nodes': list(verdict['bad_nodes']), 'bad_links': [list(x) for x in verdict['bad_links']]}
        result['bad_nodes'], result['bad_links'], result['passed'] = [], [], []
        result['nodes'] = dict((n, dict(info, status='unjudged')) for n, info in verdict['nodes'].items())
    else:
        result['withheld'] = {'bad_nodes': [], 'bad_links': []}
        if verdict['bad_nodes'] or verdict['bad_links']:
            kind = 'blamed'
        elif unmeasured:
            kind = 'incomplete'
            reason = '%d pair(s) could not be measured because their port was taken by another process: %s' % (
                len(unmeasured), ', '.join('%s-%s' % tuple(p) for p in unmeasured[:10]))
        else:
            kind = 'ok'
    result['fleet_verdict'] = kind
    result['fleet_reason'] = reason
    result['unmeasured_pairs'] = unmeasured
    result['ok'] = kind == 'ok'
    return result


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
        if pair['port_taken']:
            return None  # a server that was not ours confirms nothing either way
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
    })
    if verdict.get('fleet_verdict') in WITHHELD:
        return final  # blame was withheld before the retest; a retest cannot restore it
    return _fleet(final)


# --------------------------------------------------------------------------- absolute floors

def _rate(value, name):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise MatrixInputError('%s must be a finite number of Gb/s above 0, got %s' % (name, _quote(repr(value))))
    return float(value)


def _efficiency(value):
    return _number(value, 'efficiency', 0.0, 1.0, False)


def port_floor_gbps(rate_gbps, efficiency=DEFAULT_RDMA_EFFICIENCY, expected_rate_gbps=None, bidirectional=False):
    """The figure (Gb/s) an ``ib_write_bw`` between two ports must reach: ``efficiency`` x the line
    rate, where the line rate is ``expected_rate_gbps`` when the site states it (so a port that
    trained at a lower rate is held to the fabric's rate) and the port's own ``rate_gbps``
    (rdma_facts) otherwise, the larger of the two when both are known; twice that with ``-b``
    (perftest then reports both directions added). NaN, infinite, zero or negative inputs are refused.
    """
    rate = _rate(rate_gbps, 'rate_gbps')
    if expected_rate_gbps is not None:
        rate = max(rate, _rate(expected_rate_gbps, 'expected_rate_gbps'))
    floor = _efficiency(efficiency) * rate * (2 if bidirectional else 1)
    return round(floor, 3)


def rail_floor(port_rates, efficiency=DEFAULT_RDMA_EFFICIENCY, expected_rate_gbps=None, bidirectional=False):
    """The floor of one rail across the fleet, from every node's port rate on that rail.

    ``port_rates`` maps node -> rate in Gb/s (rdma_facts ``rate_gbps``; None when unknown). The rail's
    line rate is ``expected_rate_gbps`` when set, else the fastest port of the rail (a port that
    trained lower is then below the rail's line rate, not the measure of it). Returns
    ``{line_rate_gbps, floor_gbps, slow_ports: [{node, rate_gbps}], unknown: [nodes]}``.
    """
    if not isinstance(port_rates, dict) or not port_rates:
        raise MatrixInputError('port_rates must map each node to its port rate in Gb/s, got %s'
                               % _quote(repr(port_rates)))
    known = {}
    unknown = []
    for node in sorted(port_rates):
        value = port_rates[node]
        if value is None:
            unknown.append(node)
        else:
            known[node] = _rate(value, 'port_rates[%s]' % _quote(node, 60))
    expected = None if expected_rate_gbps is None else _rate(expected_rate_gbps, 'expected_rate_gbps')
    line = expected if expected is not None else (max(known.values()) if known else None)
    if line is None:
        raise MatrixInputError('no port rate is known for the rail (%s) and expected_rate_gbps is not set: '
                               'no absolute floor can be derived' % ', '.join(unknown))
    return {
        'line_rate_gbps': line,
        'floor_gbps': port_floor_gbps(line, efficiency, None, bidirectional),
        'slow_ports': [{'node': n, 'rate_gbps': r} for n, r in sorted(known.items()) if r < line],
        'unknown': unknown,
    }


# --------------------------------------------------------------------------- rails

ACTIVE_PORT_STATES = ('ACTIVE', 'ACTIVE_DEFER')


def _natural(name):
    return [int(part) if part.isdigit() else part for part in re.split(r'(\d+)', name)]


def nccl_rails(rdma_facts, hcas=None):
    """The NCCL rails of one node from its ``rdma_facts`` (``ansible_facts['rdma']``).

    The rails are the HCAs named in ``hcas`` (the site's NCCL HCA list, in that order) or, when it is
    empty, the HCAs that share a PCIe switch with a GPU (``pcie_acs.gpus``: storage and front-end
    ports do not), in natural name order. Each rail is its first active port that is not ignored:
    ``{rail, hca, port, link_layer, rate_gbps, gid_index, address, gpu, node_guid}`` (``gid_index``
    and ``address``: the RoCE v2 IPv4 GID rdma_facts picked, None on InfiniBand; ``gpu``: the PCI
    address of the nearest GPU, for ``--use_cuda_bus_id``). Returns ``{rails, problems}``.
    """
    if not isinstance(rdma_facts, dict) or not isinstance(rdma_facts.get('hcas'), list):
        raise MatrixInputError('rdma_facts must be the rdma facts of a node (a dict with a list of hcas)')
    if hcas is not None and (not isinstance(hcas, (list, tuple)) or not all(isinstance(h, str) and h for h in hcas)):
        raise MatrixInputError('hcas must be a list of HCA names (mlx5_0, ...), got %s' % _quote(repr(hcas), 80))
    by_name = dict((h.get('name'), h) for h in rdma_facts['hcas'] if isinstance(h, dict))
    problems = []
    if hcas:
        chosen = []
        for name in hcas:
            if name in by_name:
                chosen.append(by_name[name])
            else:
                problems.append('HCA %s (in the NCCL HCA list) is not on this node (it has %s)'
                                % (_quote(name, 40), ', '.join(sorted(by_name, key=_natural)) or 'none'))
    else:
        chosen = [h for h in rdma_facts['hcas'] if rdma_sysfs.beside_gpu(h)]
        chosen.sort(key=lambda h: _natural(str(h.get('name'))))
        if not chosen and by_name:
            problems.append('no HCA shares a PCIe switch with a GPU (or the PCIe tree was not readable): name the '
                            'NCCL HCAs explicitly')
    rails = []
    for hca in chosen:
        ports = [p for p in hca.get('ports') or [] if isinstance(p, dict) and not p.get('ignored')
                 and p.get('state') in ACTIVE_PORT_STATES]
        if not ports:
            problems.append('HCA %s has no active port' % _quote(hca.get('name'), 40))
            continue
        port = ports[0]
        ethernet = port.get('link_layer') == 'Ethernet'
        gpus = (hca.get('pcie_acs') or {}).get('gpus') or []
        rails.append({'rail': len(rails), 'hca': hca.get('name'), 'port': port.get('port'),
                      'link_layer': port.get('link_layer'), 'rate_gbps': port.get('rate_gbps'),
                      'gid_index': port.get('roce_v2_ipv4_gid_index') if ethernet else None,
                      'address': port.get('roce_v2_ipv4_address') if ethernet else None,
                      'gpu': gpus[0] if gpus else None, 'node_guid': hca.get('node_guid')})
        if ethernet and port.get('roce_v2_ipv4_gid_index') is None:
            problems.append('HCA %s port %s is RoCE without a RoCE v2 IPv4 GID: give its netdev an address'
                            % (_quote(hca.get('name'), 40), port.get('port')))
    return {'rails': rails, 'problems': problems}


def check_rails(rails_by_host):
    """Messages for rails that do not match across nodes (count, link layer), empty when they do.
    ``rails_by_host`` maps host -> the ``rails`` list of :func:`nccl_rails`."""
    if not isinstance(rails_by_host, dict) or not rails_by_host:
        raise MatrixInputError('rails_by_host must map each host to its list of rails')
    shapes = {}
    for host in sorted(rails_by_host):
        rails = rails_by_host[host]
        if not isinstance(rails, list):
            raise MatrixInputError('rails_by_host[%s] must be a list of rails' % _quote(host, 60))
        shape = tuple((r.get('link_layer') if isinstance(r, dict) else None) for r in rails)
        shapes.setdefault(shape, []).append(host)
    if len(shapes) <= 1:
        return []
    ordered = sorted(shapes.items(), key=lambda item: (-len(item[1]), item[1]))
    common, _hosts = ordered[0]
    messages = []
    for shape, hosts in ordered[1:]:
        messages.append('%s: %d rail(s) (%s), most nodes have %d (%s): the NCCL HCAs must match across nodes'
                        % (', '.join(hosts[:10]), len(shape), ', '.join(str(x) for x in shape) or 'none',
                           len(common), ', '.join(str(x) for x in common) or 'none'))
    return messages


# --------------------------------------------------------------------------- one machine, two names

def _identity_values(kind, values):
    """Normalised identity values of one host, dropping those every machine shares."""
    out = []
    for value in values:
        if not isinstance(value, str) or not value.strip():
            continue
        text = value.strip().lower()
        if kind == 'address':
            try:
                address = ipaddress.ip_address(text.split('%', 1)[0])
            except ValueError:
                raise MatrixInputError('address %s is not an IP address' % _quote(repr(value), 80))
            if address.is_loopback or address.is_link_local or address.is_unspecified:
                continue
            text = str(address)
        elif kind == 'guid':
            text = text[2:] if text.startswith('0x') else text
            text = text.replace(':', '')
            if not re.match(r'^[0-9a-f]{16}$', text) or int(text, 16) == 0:
                continue
        if text not in out:
            out.append(text)
    return out


def duplicate_hosts(identities):
    """Inventory names that are one machine, from per-host identity facts, before anything runs.

    ``identities`` maps inventory name -> ``{machine_id, addresses, guids}``: the content of
    /etc/machine-id, the address(es) the run measures (validate address, ansible_host; not every
    interface address: docker0's 172.17.0.1 is on every Docker host), and the HCA node GUIDs
    (rdma_facts). Loopback and link-local addresses and zero GUIDs are ignored. Returns one entry
    per shared value: ``{hosts, by, value, message}``; empty when every name is its own machine.
    """
    if not isinstance(identities, dict):
        raise MatrixInputError('identities must map each inventory name to {machine_id, addresses, guids}')
    seen = {}
    for host in sorted(identities):
        facts = identities[host]
        if not isinstance(facts, dict):
            raise MatrixInputError('identities[%s] must be a dict with machine_id, addresses and guids'
                                   % _quote(host, 60))
        machine_id = facts.get('machine_id')
        addresses = facts.get('addresses') or []
        guids = facts.get('guids') or []
        for name, value in (('addresses', addresses), ('guids', guids)):
            if not isinstance(value, (list, tuple)):
                raise MatrixInputError('identities[%s].%s must be a list, got %s'
                                       % (_quote(host, 60), name, _quote(repr(value), 60)))
        for kind, values in (('machine-id', [machine_id] if machine_id else []),
                             ('address', list(addresses)), ('guid', list(guids))):
            for value in _identity_values(kind, values):
                seen.setdefault((kind, value), []).append(host)
    found = []
    labels = {'machine-id': '/etc/machine-id', 'address': 'measured address', 'guid': 'HCA node GUID'}
    for (kind, value), hosts in sorted(seen.items()):
        if len(hosts) > 1:
            hint = (' (cloned images share one too: regenerate it with systemd-machine-id-setup after '
                    'removing /etc/machine-id)' if kind == 'machine-id' else '')
            found.append({'hosts': hosts, 'by': kind, 'value': value,
                          'message': '%s are one machine: same %s %s%s; list each machine once in the inventory'
                                     % (' and '.join(hosts), labels[kind], value, hint)})
    return found


# --------------------------------------------------------------------------- MTU of a measured path

def address_interface(facts, address):
    """``{interface, mtu, family}`` of the interface that carries ``address`` on a host, from its
    network facts (``ansible_facts`` after ``setup: gather_subset: network``: each interface a dict
    with ``device``, ``mtu``, ``ipv4``, ``ipv4_secondaries`` and ``ipv6``). None when no interface
    of the host carries the address."""
    if not isinstance(facts, dict):
        raise MatrixInputError("facts must be the host's ansible_facts (a dict), got %s" % type(facts).__name__)
    try:
        wanted = ipaddress.ip_address(str(address).split('%', 1)[0])
    except ValueError:
        raise MatrixInputError('address %s is not an IP address' % _quote(repr(address), 80))
    for value in facts.values():
        if not isinstance(value, dict) or not isinstance(value.get('device'), str):
            continue
        candidates = []
        if isinstance(value.get('ipv4'), dict):
            candidates.append(value['ipv4'].get('address'))
        for key in ('ipv4_secondaries', 'ipv6'):
            for entry in value.get(key) or []:
                if isinstance(entry, dict):
                    candidates.append(entry.get('address'))
        for candidate in candidates:
            try:
                if ipaddress.ip_address(str(candidate).split('%', 1)[0]) == wanted:
                    mtu = value.get('mtu')
                    if isinstance(mtu, bool) or not isinstance(mtu, int) or mtu < 68:
                        raise MatrixInputError('interface %s carries %s but reports no usable MTU (%s)'
                                               % (_quote(value['device'], 40), wanted, _quote(repr(mtu), 40)))
                    return {'interface': value['device'], 'mtu': mtu, 'family': wanted.version}
            except ValueError:
                continue
    return None


def ping_payload(mtu, family):
    """The ``ping -M do -s`` payload that fills an ``mtu``-byte packet: IPv4 header 20 + ICMP 8, IPv6
    header 40 + ICMPv6 8."""
    if isinstance(mtu, bool) or not isinstance(mtu, int) or mtu < 68 or mtu > 65535:
        raise MatrixInputError('mtu must be a whole number from 68 to 65535, got %s' % _quote(repr(mtu), 40))
    if family not in (4, 6):
        raise MatrixInputError('family must be 4 or 6, got %s' % _quote(repr(family), 40))
    return mtu - (28 if family == 4 else 48)


def mtu_plan(host_facts, addresses):
    """Per host, the MTU expected on its measured paths: that of the interface carrying the measured
    address (the IPoIB interface when the address is IPoIB), not the default route's.

    ``host_facts`` maps host -> ansible_facts, ``addresses`` host -> measured address. Returns
    ``{host: {interface, mtu, family, payload}}``; a host whose address is on none of its interfaces
    is refused, naming the host, the address and the interfaces it has.
    """
    if not isinstance(host_facts, dict) or not isinstance(addresses, dict):
        raise MatrixInputError('host_facts and addresses must map each host to its facts and its measured address')
    plan, problems = {}, []
    for host in sorted(addresses):
        found = address_interface(host_facts.get(host) or {}, addresses[host])
        if found is None:
            facts = host_facts.get(host) or {}
            names = sorted(v['device'] for v in facts.values() if isinstance(v, dict) and isinstance(v.get('device'), str))
            problems.append('%s: no interface carries %s (interfaces: %s); set validate_address to one of its '
                            'addresses' % (_quote(host, 60), _quote(addresses[host], 60),
                                           ', '.join(names[:12]) or 'none in the facts'))
            continue
        plan[host] = dict(found, payload=ping_payload(found['mtu'], found['family']))
    if problems:
        raise MatrixInputError('; '.join(problems))
    return plan


# --------------------------------------------------------------------------- who holds the port

_SS_LISTENER = re.compile(r'(?:^|\s)(\S+):(\d+)\s+\S+:(?:\*|\d+)(?:\s+users:\(\((.*)\)\))?\s*$')
_SS_USER = re.compile(r'"((?:[^"\\]|\\.)*)",pid=(\d+)')


def listeners(ss_output, port):
    """The processes listening on TCP ``port``, from ``ss -Hltnp`` (or ``ss -ltnp``, ``ss -tulnp``)
    output: ``[{address, pids, names}]``."""
    if not isinstance(ss_output, str):
        raise MatrixInputError('ss_output must be the text ss printed, got %s' % type(ss_output).__name__)
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise MatrixInputError('port must be a whole number from 1 to 65535, got %s' % _quote(repr(port), 40))
    found = []
    for line in ss_output.splitlines():
        if 'LISTEN' not in line:
            continue
        match = _SS_LISTENER.search(line.rstrip())
        if not match or int(match.group(2)) != port:
            continue
        users = _SS_USER.findall(match.group(3) or '')
        found.append({'address': match.group(1), 'pids': sorted(set(int(pid) for _name, pid in users)),
                      'names': sorted(set(name for name, _pid in users))})
    return found


def server_owner(ss_output, port, pid):
    """Whether the measuring server on ``port`` is the one we started (process id ``pid``).

    Returns ``{ours, cause, reason}``: ours when every listener on the port is ``pid``; ``cause``
    ``port_taken`` when another process listens there (its name and pid quoted: the pair then fails as
    "port taken" and blames no node), ``not_listening`` when nothing does (our server is gone).
    """
    if isinstance(pid, bool) or not isinstance(pid, int) or pid < 1:
        raise MatrixInputError('pid must be the process id of the server we started, got %s' % _quote(repr(pid), 40))
    found = listeners(ss_output, port)
    if not found:
        return {'ours': False, 'cause': 'not_listening', 'reason': 'nothing listens on port %d' % port}
    others = [entry for entry in found if entry['pids'] != [pid]]
    if others:
        return {'ours': False, 'cause': 'port_taken',
                'reason': 'port %d is held by %s' % (port, '; '.join(
                    '%s pid %s on %s' % ('/'.join(e['names']) or 'an unnamed process',
                                         ','.join(str(p) for p in e['pids']) or '?', e['address'])
                    for e in others[:4]))}
    return {'ours': True, 'cause': None, 'reason': 'port %d is held by our server (pid %d)' % (port, pid)}


def listening(ss_output, ports):
    """The ports of ``ports`` that something listens on, from ``ss -Hltnp`` output (in the order given)."""
    if not isinstance(ports, (list, tuple)):
        raise MatrixInputError('ports must be a list of TCP ports, got %s' % _quote(repr(ports), 60))
    return [port for port in ports if listeners(ss_output, port)]


def server_owners(ss_output, ports, pids):
    """:func:`server_owner` for each (port, pid) of the servers we started; a pid that is not a whole
    number above 0 (its pid file was never written: the server did not start) gives ``not_listening``
    when nothing listens and ``port_taken`` when another process does."""
    if not isinstance(ports, (list, tuple)) or not isinstance(pids, (list, tuple)) or len(ports) != len(pids):
        raise MatrixInputError('ports and pids must be lists of the same length (one pid per server), got %s and %s'
                               % (_quote(repr(ports), 60), _quote(repr(pids), 60)))
    owners = []
    for port, pid in zip(ports, pids):
        try:
            pid = int(str(pid).strip())
        except ValueError:
            pid = 0
        if pid < 1:
            found = listeners(ss_output, port)
            owners.append({'ours': False, 'cause': 'port_taken' if found else 'not_listening',
                           'reason': ('port %d is held by %s; our server did not start' % (port, '; '.join(
                               '/'.join(e['names']) or 'an unnamed process' for e in found)))
                           if found else 'our server on port %d did not start' % port})
        else:
            owners.append(server_owner(ss_output, port, pid))
    return owners


# --------------------------------------------------------------------------- rails: rounds and floors

def _rail_list(rails, name='rails'):
    if not isinstance(rails, (list, tuple)) or not all(
            isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in rails):
        raise MatrixInputError('%s must be a list of rail numbers (0, 1, ...), got %s' % (name, _quote(repr(rails), 60)))
    return list(rails)


def rail_rounds(rounds, rails):
    """The pair rounds with every rail of each pair measured at once: ``[[{a, b, rails}, ...], ...]``
    (a pair's rails run side by side on their own HCAs and ports; a node is in one pair per round)."""
    rails = _rail_list(rails)
    if not isinstance(rounds, (list, tuple)):
        raise MatrixInputError('rounds must be a list of rounds of [a, b] pairs')
    out = []
    for rnd in rounds:
        if not isinstance(rnd, (list, tuple)) or not all(isinstance(p, (list, tuple)) and len(p) == 2 for p in rnd):
            raise MatrixInputError('each round must be a list of [a, b] pairs, got %s' % _quote(repr(rnd), 80))
        out.append([{'a': p[0], 'b': p[1], 'rails': list(rails)} for p in rnd])
    return out


def rail_retest_rounds(plans):
    """Rounds of the retest over every rail: ``plans`` lists each rail's :func:`retest_plan` (index =
    rail); a pair retested on several rails is measured once with those rails side by side. Returns
    ``[[{a, b, rails}, ...], ...]``, a node in one pair per round."""
    if not isinstance(plans, (list, tuple)):
        raise MatrixInputError('plans must list the retest plan of each rail')
    wanted = []
    for rail, plan in enumerate(plans):
        if not isinstance(plan, dict) or not isinstance(plan.get('pairs'), list):
            raise MatrixInputError('plans[%d] must be a retest plan (a dict with pairs)' % rail)
        for pair in plan['pairs']:
            key = tuple(pair)
            for entry in wanted:
                if entry['pair'] in (key, key[::-1]):
                    if rail not in entry['rails']:
                        entry['rails'].append(rail)
                    break
            else:
                wanted.append({'pair': key, 'rails': [rail]})
    rails_of = dict((entry['pair'], entry['rails']) for entry in wanted)
    return [[{'a': a, 'b': b, 'rails': rails_of[(a, b)]} for a, b in rnd]
            for rnd in schedule([entry['pair'] for entry in wanted])]


def rail_floors(rails_by_host, efficiency=DEFAULT_RDMA_EFFICIENCY, expected_rate_gbps=None, bidirectional=True):
    """The absolute floor of each rail across the nodes (:func:`rail_floor` over every node's port on
    that rail): ``[{rail, hcas: {host: hca}, link_layer, line_rate_gbps, floor_gbps, slow_ports, unknown,
    note}]``. ``rails_by_host`` maps host -> its :func:`nccl_rails` rails (they must match:
    :func:`check_rails`). A rail whose port rates are all unknown, with no expected rate, has no floor
    (``floor_gbps`` None) and a note saying to set the expected rate."""
    if not isinstance(rails_by_host, dict) or not rails_by_host:
        raise MatrixInputError('rails_by_host must map each host to its list of rails')
    counts = set(len(r) if isinstance(r, list) else -1 for r in rails_by_host.values())
    if len(counts) != 1 or -1 in counts:
        raise MatrixInputError('rails_by_host must give every host the same number of rails (check_rails first)')
    floors = []
    for index in range(counts.pop()):
        rates, hcas, layers = {}, {}, []
        for host in sorted(rails_by_host):
            rail = rails_by_host[host][index]
            if not isinstance(rail, dict):
                raise MatrixInputError('rails_by_host[%s][%d] must be a rail (a dict)' % (_quote(host, 60), index))
            rate = rail.get('rate_gbps')
            rates[host] = rate if isinstance(rate, (int, float)) and not isinstance(rate, bool) and rate > 0 else None
            hcas[host] = rail.get('hca')
            if rail.get('link_layer') not in layers:
                layers.append(rail.get('link_layer'))
        entry = {'rail': index, 'hcas': hcas, 'link_layer': '/'.join(str(x) for x in layers)}
        if expected_rate_gbps is None and all(r is None for r in rates.values()):
            entry.update({'line_rate_gbps': None, 'floor_gbps': None, 'slow_ports': [], 'unknown': sorted(rates),
                          'note': 'no port rate readable on rail %d and no expected rate: no absolute floor (set '
                                  'validate_rdma_expected_rate_gbps)' % index})
        else:
            entry.update(rail_floor(rates, efficiency, expected_rate_gbps, bidirectional))
            entry['note'] = None
        floors.append(entry)
    return floors


# --------------------------------------------------------------------------- schedule size

def plan_estimate(node_count, seconds_per_pair=10, rails=1, rails_in_parallel=True):
    """What the pair schedule costs for ``node_count`` nodes: ``{nodes, pairs, rounds, rails,
    measurements, seconds_serial, seconds_scheduled}``.

    Pairs are n(n-1)/2; :func:`round_robin` runs them in n-1 rounds (n rounds for odd n), every pair
    of a round at once, so the scheduled time is rounds x seconds per pair (x rails when the rails of
    a pair are measured one after the other). ``seconds_serial`` is the time of one pair after the
    other, for comparison.
    """
    for name, value, low in (('node_count', node_count, 2), ('rails', rails, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise MatrixInputError('%s must be a whole number of at least %d, got %s' % (name, low, _quote(repr(value), 40)))
    seconds = _number(seconds_per_pair, 'seconds_per_pair', 0.0, 86400.0, False)
    pairs = node_count * (node_count - 1) // 2
    rounds = node_count - 1 if node_count % 2 == 0 else node_count
    per_slot = seconds * (1 if rails_in_parallel else rails)
    return {'nodes': node_count, 'pairs': pairs, 'rounds': rounds, 'rails': rails,
            'measurements': pairs * rails, 'seconds_serial': pairs * seconds * rails,
            'seconds_scheduled': rounds * per_slot}
