# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Docker Swarm state of a node, as ``stack_facts`` reports it and the drift audit compares it.

Pure functions: standard library (and this collection's text_bounds) only, Python 3.9+, no Ansible
imports. The module ``stack_facts`` runs the two commands and hands their output here; the drift
audit (module_utils/drift.py) calls :func:`swarm_findings`.

What is read
------------
- ``docker info --format '{{json .}}'``, its ``Swarm`` section (Docker 20.10 to 28 write the same
  fields): ``LocalNodeState`` (inactive, pending, active, error, locked), ``NodeID``, ``NodeAddr``,
  ``ControlAvailable`` (true on a manager), ``Cluster.ID`` (managers only), ``RemoteManagers``
  (``[{NodeID, Addr}]``: the managers this node knows), ``Error``. A CLI that cannot reach its daemon
  still prints the JSON (every field empty) but exits 1: that is the state ``unknown`` with the CLI's
  message, as is ``ServerErrors`` in the JSON.
- On a manager only, ``docker node inspect self --format '{{json .}}'`` (a worker cannot answer it):
  ``Spec.Role``, ``Spec.Availability`` (active, pause, drain), ``Status.State`` (ready, down, ...),
  ``ManagerStatus.Reachability`` and ``ManagerStatus.Leader``.

The report (``gpu_stack_details.swarm``)
-----------------------------------------
``{state, node_id, node_addr, cluster_id, role, availability, status, reachability, leader,
managers, error}``: ``state`` one of :data:`STATES` (``absent``: no docker CLI on the node,
``unknown``: docker did not answer, with the reason in ``error``); ``role`` manager, worker or ''
(not active); ``availability``, ``status``, ``reachability`` and ``leader`` are known on managers only
('' and false elsewhere); ``managers`` the sorted ``[{node_id, addr}]`` of RemoteManagers.
:func:`summary` is its short form for ``gpu_stack.swarm`` (``active/manager/active``,
``active/worker``, ``inactive``; None without docker).

The drift rules (:func:`swarm_findings`)
----------------------------------------
A swarm state is reported for every node; a finding is raised only where the nodes of one audit
disagree:

``cluster`` (default critical)
    among the hosts active in a swarm, those that are not in the swarm most of them are in. Swarms are
    told apart by their managers' cluster id and by the manager node ids that managers and workers
    list in RemoteManagers (a worker knows no cluster id): a worker whose managers are the managers of
    cluster X is in X. Across the whole audit, not per group: one cluster has one swarm.
``membership`` (default warning)
    in one group of the audit, some hosts with docker are active in a swarm while others are not
    (inactive, or pending, error, locked, unknown): the side with fewer hosts is reported, both sides
    when they are as many.
Both are findings of the component ``swarm`` with kind ``majority``; a ``severity`` override of
``swarm`` applies to both.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json

from ansible_collections.gpucluster.core.plugins.module_utils.text_bounds import clip, quote

COMPONENT = 'swarm'
# LocalNodeState values of the engine (swarm.LocalNodeState).
DOCKER_STATES = ('inactive', 'pending', 'active', 'error', 'locked')
STATES = DOCKER_STATES + ('unknown', 'absent')
ROLES = ('manager', 'worker', '')
INFO_ARGS = ('info', '--format', '{{json .}}')
NODE_ARGS = ('node', 'inspect', 'self', '--format', '{{json .}}')
# The keys of a report, in the order the reports show them.
KEYS = ('state', 'role', 'availability', 'status', 'reachability', 'leader', 'node_id', 'node_addr',
        'cluster_id', 'managers', 'error')
_TEXT_KEYS = ('state', 'role', 'availability', 'status', 'reachability', 'node_id', 'node_addr',
              'cluster_id', 'error')
# Characters kept of an error text and of an identifier or a short value.
ERROR_MAX_CHARS = 500
VALUE_MAX_CHARS = 100
# RemoteManagers entries kept (a swarm has 1, 3, 5 or 7 managers).
MANAGERS_MAX = 32
DEFAULT_SEVERITY = {'cluster': 'critical', 'membership': 'warning'}
# Characters of a cluster id shown in messages (what docker prints in its tables).
SHORT_ID = 12
# The group of hosts that no group lists (drift.UNGROUPED).
UNGROUPED = '(ungrouped)'


def empty(state):
    """A report of ``state`` with every other field empty."""
    return {'state': state, 'role': '', 'availability': '', 'status': '', 'reachability': '',
            'leader': False, 'node_id': '', 'node_addr': '', 'cluster_id': '', 'managers': [], 'error': ''}


def absent():
    """The report of a node without a docker CLI."""
    return empty('absent')


def _value(value, limit=VALUE_MAX_CHARS):
    return clip(value.strip(), limit) if isinstance(value, str) else ''


def _add_error(report, text):
    text = ' '.join(text.split())
    report['error'] = clip('%s; %s' % (report['error'], text) if report['error'] else text, ERROR_MAX_CHARS)


def _load(text, what):
    """The JSON object (or the one object of a one-element list) ``text`` holds; ValueError naming ``what``."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError('%s printed nothing' % what)
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError('%s did not print JSON (%s): %s' % (what, exc, clip(text.strip(), 200)))
    except RecursionError:
        raise ValueError('%s printed JSON nested too deeply to read' % what)
    if isinstance(data, list) and len(data) == 1:
        data = data[0]
    if not isinstance(data, dict):
        raise ValueError('%s printed JSON %s, expected an object' % (what, type(data).__name__))
    return data


def _managers(remotes):
    out = []
    for remote in remotes if isinstance(remotes, list) else ():
        if not isinstance(remote, dict):
            continue
        entry = {'node_id': _value(remote.get('NodeID')), 'addr': _value(remote.get('Addr'))}
        if entry['node_id'] or entry['addr']:
            out.append(entry)
    out.sort(key=lambda m: (m['addr'], m['node_id']))
    return out[:MANAGERS_MAX]


def from_info(text, error=''):
    """The report from the output of ``docker info --format '{{json .}}'``.

    ``error``: why the command did not succeed (it timed out, exited non-zero); the state is then
    ``unknown`` with that reason, whatever it printed. Never raises.
    """
    report = empty('unknown')
    if error:
        _add_error(report, error)
        return report
    try:
        data = _load(text, 'docker info')
    except ValueError as exc:
        _add_error(report, str(exc))
        return report
    server_errors = data.get('ServerErrors')
    if isinstance(server_errors, list) and server_errors:
        _add_error(report, 'docker info: %s' % '; '.join(
            clip(e, VALUE_MAX_CHARS * 3) if isinstance(e, str) else quote(e) for e in server_errors[:5]))
        return report
    swarm = data.get('Swarm')
    if not isinstance(swarm, dict):
        _add_error(report, 'docker info has no Swarm section (is this a Docker engine?)')
        return report
    state = swarm.get('LocalNodeState')
    if state in DOCKER_STATES:
        report['state'] = state
    else:
        _add_error(report, 'docker info reports the swarm state %s; expected one of %s'
                   % (quote(state, 60), ', '.join(DOCKER_STATES)))
    report['node_id'] = _value(swarm.get('NodeID'))
    report['node_addr'] = _value(swarm.get('NodeAddr'))
    cluster = swarm.get('Cluster')
    report['cluster_id'] = _value(cluster.get('ID')) if isinstance(cluster, dict) else ''
    report['managers'] = _managers(swarm.get('RemoteManagers'))
    if report['state'] == 'active':
        report['role'] = 'manager' if swarm.get('ControlAvailable') is True else 'worker'
    if isinstance(swarm.get('Error'), str) and swarm['Error'].strip():
        _add_error(report, swarm['Error'])
    return report


def needs_node_inspect(report):
    """Whether ``docker node inspect self`` can answer on this node: an active manager only."""
    return report.get('state') == 'active' and report.get('role') == 'manager'


def with_node(report, text, error=''):
    """``report`` (of :func:`from_info`) completed from ``docker node inspect self --format '{{json .}}'``.

    ``error``: why the command did not succeed; it is added to the report's error and the fields of
    docker info stay. Never raises.
    """
    report = dict(report)
    if error:
        _add_error(report, 'docker node inspect self: %s' % error)
        return report
    try:
        data = _load(text, 'docker node inspect self')
    except ValueError as exc:
        _add_error(report, str(exc))
        return report
    spec = data.get('Spec') if isinstance(data.get('Spec'), dict) else {}
    status = data.get('Status') if isinstance(data.get('Status'), dict) else {}
    manager = data.get('ManagerStatus') if isinstance(data.get('ManagerStatus'), dict) else {}
    role = _value(spec.get('Role'))
    if role in ('manager', 'worker'):
        report['role'] = role
    report['availability'] = _value(spec.get('Availability'))
    report['status'] = _value(status.get('State'))
    report['reachability'] = _value(manager.get('Reachability'))
    report['leader'] = manager.get('Leader') is True
    node_id = _value(data.get('ID'))
    if node_id and report['node_id'] and node_id != report['node_id']:
        _add_error(report, 'docker node inspect self answered for node %s, docker info names node %s'
                   % (node_id, report['node_id']))
    return report


def summary(report):
    """The short form for ``gpu_stack.swarm``: ``active/<role>[/<availability>]`` or the state alone;
    None without docker."""
    if not isinstance(report, dict) or report.get('state') in (None, 'absent'):
        return None
    if report['state'] != 'active':
        return report['state']
    parts = ['active', report.get('role') or 'unknown']
    if report.get('availability'):
        parts.append(report['availability'])
    return '/'.join(parts)


# ---------------------------------------------------------------- facts read back (the audit)

def _type_name(value):
    for base in (bool, int, float, str, bytes, list, tuple, dict):
        if isinstance(value, base):
            return base.__name__
    return type(value).__name__


def _bad_string(value):
    if not isinstance(value, str):
        return 'has type %s, expected a string' % _type_name(value)
    try:
        value.encode('utf-8')
    except UnicodeEncodeError:
        return 'holds bytes that are not valid UTF-8'
    return None


def check_report(value, what='gpu_stack_details.swarm'):
    """``(report, None)`` with every key of a report, or ``(None, reason)`` when ``value`` (read back
    from facts, a cache) does not have the shape :func:`from_info` gives. Missing keys are empty."""
    if not isinstance(value, dict):
        return None, '%s has type %s, expected a mapping' % (what, _type_name(value))
    report = empty(value.get('state'))
    if value.get('state') not in STATES:
        return None, '%s.state is %s; expected one of %s' % (what, quote(value.get('state'), 60), ', '.join(STATES))
    for key in _TEXT_KEYS[1:]:
        if key not in value or value[key] is None:
            continue
        why = _bad_string(value[key])
        if why:
            return None, '%s.%s %s' % (what, key, why)
        report[key] = clip(value[key], ERROR_MAX_CHARS)
    if report['role'] not in ROLES:
        return None, '%s.role is %s; expected manager, worker or empty' % (what, quote(report['role'], 60))
    leader = value.get('leader', False)
    if not isinstance(leader, bool):
        return None, '%s.leader has type %s, expected a boolean' % (what, _type_name(leader))
    report['leader'] = leader
    managers = value.get('managers') or []
    if not isinstance(managers, list):
        return None, '%s.managers has type %s, expected a list' % (what, _type_name(managers))
    for index, entry in enumerate(managers[:MANAGERS_MAX]):
        if not isinstance(entry, dict):
            return None, '%s.managers[%d] has type %s, expected a mapping' % (what, index, _type_name(entry))
        clean = {}
        for key in ('node_id', 'addr'):
            item = entry.get(key) or ''
            why = _bad_string(item)
            if why:
                return None, '%s.managers[%d].%s %s' % (what, index, key, why)
            clean[key] = clip(item, VALUE_MAX_CHARS)
        report['managers'].append(clean)
    return report, None


def _short(cluster_id):
    return cluster_id[:SHORT_ID]


def line(report):
    """One readable line of a node's swarm state (the audit's per-node lines)."""
    if report is None:
        return 'not reported (its stack_facts predates the swarm state)'
    if report['state'] == 'absent':
        return 'absent (no docker CLI)'
    parts = [summary(report)]
    if report['leader']:
        parts.append('leader')
    if report['reachability']:
        parts.append(report['reachability'])
    if report['cluster_id']:
        parts.append('cluster %s' % _short(report['cluster_id']))
    elif report['role'] == 'worker' and report['managers']:
        parts.append('managers %s' % ' '.join(m['addr'] or m['node_id'] for m in report['managers']))
    text = ', '.join(parts)
    if report['error']:
        text += ' (%s)' % report['error']
    return text


class _Sets(object):
    """Union-find over labels (cluster ids, manager node ids)."""

    def __init__(self):
        self.parent = {}

    def find(self, label):
        root = self.parent.setdefault(label, label)
        while root != self.parent[root]:
            root = self.parent[root]
        while label != root:
            self.parent[label], label = root, self.parent[label]
        return root

    def union(self, labels):
        roots = [self.find(label) for label in labels]
        for root in roots[1:]:
            self.parent[root] = roots[0]


def _labels(report):
    """What ties an active host to its swarm: its cluster id (managers), its own node id (managers) and
    the node ids of the managers it knows (addresses where a node id is missing)."""
    labels = []
    if report['role'] == 'manager':
        if report['cluster_id']:
            labels.append('cluster:' + report['cluster_id'])
        if report['node_id']:
            labels.append('node:' + report['node_id'])
    for manager in report['managers']:
        labels.append('node:' + manager['node_id'] if manager['node_id'] else 'addr:' + manager['addr'])
    return labels


def _describe(members, reports):
    """A swarm as the messages name it: its cluster id(s), else the managers its workers know."""
    ids = sorted(set(_short(reports[h]['cluster_id']) for h in members if reports[h]['cluster_id']))
    if ids:
        return 'cluster %s' % ', '.join(ids)
    addrs = sorted(set(m['addr'] or m['node_id'] for h in members for m in reports[h]['managers']))
    shown = ', '.join(addrs[:3]) + (' and %d more' % (len(addrs) - 3) if len(addrs) > 3 else '')
    return 'managers %s' % shown


def _cluster_findings(hosts, reports, groups, severity):
    active = [h for h in hosts if reports[h]['state'] == 'active' and _labels(reports[h])]
    sets = _Sets()
    for host in active:
        sets.union(_labels(reports[host]))
    swarms = {}
    for host in active:
        swarms.setdefault(sets.find(_labels(reports[host])[0]), []).append(host)
    if len(swarms) < 2:
        return []
    ranked = sorted(((_describe(members, reports), members) for members in swarms.values()),
                    key=lambda item: (-len(item[1]), item[0]))
    total = len(active)
    top = len(ranked[0][1])
    tied = [name for name, members in ranked if len(members) == top]
    spread = ', '.join('%s on %d' % (name, len(members)) for name, members in ranked)
    findings = []
    for index, (name, members) in enumerate(ranked):
        if len(tied) == 1 and index == 0:
            continue
        for host in members:
            if len(tied) == 1:
                expected = ranked[0][0]
                message = ('swarm: %s is in the swarm of %s; %d of %d hosts active in a swarm are in the swarm '
                           'of %s' % (host, name, top, total, expected))
            else:
                expected = 'no majority (%s)' % spread
                message = 'swarm: the hosts of this audit are in %d different swarms: %s' % (len(ranked), spread)
            findings.append({'host': host, 'component': COMPONENT, 'expected': expected, 'found': name,
                             'kind': 'majority', 'severity': severity.get('cluster'),
                             'group': groups.get(host, UNGROUPED), 'rule': 'cluster', 'message': message})
    return findings


def _membership_findings(hosts, reports, groups, severity):
    by_group = {}
    for host in hosts:
        if reports[host]['state'] != 'absent':
            by_group.setdefault(groups.get(host, UNGROUPED), []).append(host)
    findings = []
    for group, members in by_group.items():
        active = [h for h in members if reports[h]['state'] == 'active']
        others = [h for h in members if reports[h]['state'] != 'active']
        if not active or not others:
            continue
        counts = {}
        for host in others:
            counts[reports[host]['state']] = counts.get(reports[host]['state'], 0) + 1
        not_active = ', '.join('%s on %d' % (state, counts[state]) for state in sorted(counts))
        spread = 'active on %d, %s' % (len(active), not_active)
        if len(active) == len(others):
            flagged = members
            expected = 'no majority (%s)' % spread
        elif len(active) > len(others):
            flagged = others
            expected = 'active'
        else:
            flagged = active
            expected = 'inactive' if list(counts) == ['inactive'] else 'not active (%s)' % not_active
        for host in flagged:
            report = reports[host]
            why = ' (%s)' % report['error'] if report['error'] and report['state'] != 'active' else ''
            if len(active) == len(others):
                message = 'swarm state %s%s; group %s is split: %s' % (report['state'], why, group, spread)
            elif report['state'] == 'active':
                message = ('swarm state active (%s) while %d of %d hosts with docker in %s are not in a swarm (%s)'
                           % (summary(report), len(others), len(members), group, not_active))
            else:
                message = ('swarm state %s%s while %d of %d hosts with docker in %s are active in a swarm'
                           % (report['state'], why, len(active), len(members), group))
            findings.append({'host': host, 'component': COMPONENT, 'expected': expected,
                             'found': report['state'], 'kind': 'majority', 'severity': severity.get('membership'),
                             'group': group, 'rule': 'membership', 'message': message})
    return findings


def swarm_findings(hosts, reports, groups=None, severity=None):
    """The findings of the swarm rules (see the module's documentation), at most one per host.

    hosts: ordered host names; reports: host -> report (:func:`check_report`) for the hosts compared
    (hosts not in it take no part); groups: host -> group name; severity: one severity for every
    swarm finding, else :data:`DEFAULT_SEVERITY` by rule. A host reported by both rules gets one
    finding, the cluster's, with both messages.
    """
    groups = groups or {}
    levels = dict(DEFAULT_SEVERITY)
    if severity:
        levels = dict((rule, severity) for rule in levels)
    hosts = [h for h in hosts if h in reports]
    findings = []
    by_host = {}
    for finding in _cluster_findings(hosts, reports, groups, levels) + \
            _membership_findings(hosts, reports, groups, levels):
        first = by_host.get(finding['host'])
        if first is None:
            by_host[finding['host']] = finding
            findings.append(finding)
        else:
            first['message'] += '; ' + finding['message']
    return findings
