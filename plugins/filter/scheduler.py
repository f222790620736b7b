# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the day-2 playbooks and roles that take a node out of service or give it back: thin
wrappers over module_utils/scheduler.py (our reason format, whose hold a node is under, the decision
and the scheduler's command for it). docs/day2.md "Whose hold is it" documents the rules.

    reason:   "{{ 'failed at health gate' | gpucluster.core.scheduler_reason('upgrade') }}"
    state:    "{{ show.stdout | gpucluster.core.scheduler_node_state('node2') }}"
    decision: "{{ show.stdout | gpucluster.core.scheduler_decide('hold', 'upgrade', 'upgrade', node='node2') }}"
              -> {action: drain|resume|none, reason, why, argv}; run ``argv`` when action is not none.

``show.stdout`` is what the scheduler printed about the node (Slurm: ``scontrol --oneliner show node
[NAME]``; Swarm: ``docker node inspect NAME``; Kubernetes: ``kubectl get node NAME -o json``), or a state
from scheduler_node_state (Kubernetes builds its patch from the node as read: it needs kubectl's output).
Bad input raises an error naming the filter, the argument and what is accepted.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.gpucluster.core.plugins.module_utils import scheduler as sc

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - only without ansible-core installed
    class AnsibleFilterError(Exception):
        pass


def _run(name, expected, function, *args):
    try:
        return function(*args)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise AnsibleFilterError('%s: %s; expected %s' % (name, str(exc)[:300], expected))


def _state(name, value, node, scheduler):
    """A NodeState from the scheduler's output (text, or parsed Swarm JSON) or from scheduler_node_state's dict."""
    if isinstance(value, dict) and 'held' in value and 'operator' in value:
        words = value.get('state') or []
        operator = value.get('operator') or []
        if not isinstance(words, list) or not isinstance(operator, list) or not isinstance(value.get('held'), bool):
            raise AnsibleFilterError('%s: the state %r is not one that scheduler_node_state returns' % (name, value))
        reason = value.get('reason') or ''
        # Whose hold it is is read again from the reason, never taken from the dict.
        return sc.NodeState(str(value.get('name') or node or ''), frozenset(str(w) for w in words), value['held'],
                            str(reason), sc.parse_reason(reason) if value['held'] else None,
                            tuple(str(w) for w in operator))
    impl = _run(name, 'scheduler to be one of %s' % ', '.join(sorted(sc.SCHEDULERS)), sc.scheduler, scheduler)
    if scheduler == 'slurm' and not isinstance(value, str):
        raise AnsibleFilterError('%s: expected the text of `scontrol --oneliner show node`, got %s'
                                 % (name, type(value).__name__))
    return _run(name, 'the output of %s' % ' '.join(impl.show_argv(node or 'NODE')), impl.parse_state, value, node)


def scheduler_reason(text, source):
    """Our reason for a hold by ``source`` (health, shape, upgrade, decommission, validate) with ``text``."""
    return _run('scheduler_reason', 'a source among %s and a text' % ', '.join(sc.SOURCES),
                sc.make_reason, source, text)


def scheduler_hold(reason):
    """{ours, source, text, legacy}: whether ``reason`` is one of ours, and whose."""
    hold = sc.parse_reason(reason if isinstance(reason, str) else '')
    return {'ours': hold is not None, 'source': hold.source if hold else None, 'text': hold.text if hold else None,
            'legacy': bool(hold and hold.legacy)}


def scheduler_node_state(output, node=None, scheduler='slurm'):
    """{name, state, held, reason, ours, source, text, legacy, operator} of ``node`` in the scheduler's output.

    A node the output does not name has the operator state UNKNOWN: nothing is done to it.
    """
    return _state('scheduler_node_state', output, node, scheduler).as_dict()


def _k8s_node(name, value, node, scheduler):
    """The Node object kubectl printed, for the Kubernetes patch (None for other schedulers)."""
    if scheduler != 'kubernetes':
        return None
    if isinstance(value, dict) and 'held' in value and 'operator' in value:
        return None
    return _run(name, 'the output of kubectl get node %s -o json' % (node or 'NODE'), sc.Kubernetes.find, value, node)


def _decision(name, decision, node, scheduler, command, data=None):
    impl = _run(name, 'scheduler to be one of %s and command a path' % ', '.join(sorted(sc.SCHEDULERS)),
                sc.scheduler, scheduler, command)
    if scheduler == 'kubernetes':
        argv = _run(name, 'the output of kubectl get node %s -o json, not a state' % (node or 'NODE'),
                    impl.action_argv, node, decision, data) if node else None
    else:
        argv = impl.action_argv(node, decision) if node else None
    return {'action': decision.action, 'reason': decision.reason, 'why': decision.why, 'argv': argv}


def scheduler_decide(state, want, source, text=None, node=None, scheduler='slurm', command=None):
    """{action, reason, why, argv}: what ``source`` does about the node to get what it wants ('hold' with
    ``text``, 'release', 'keep'); argv is the scheduler's command for the action (None for none)."""
    current = _state('scheduler_decide', state, node, scheduler)
    node = node or current.name
    decision = _run('scheduler_decide', "want to be hold, release or keep, a source among %s and a text to hold"
                    % ', '.join(sc.SOURCES), sc.decide, current, want, source, text)
    return _decision('scheduler_decide', decision, node, scheduler, command,
                     _k8s_node('scheduler_decide', state, node, scheduler))


def scheduler_verdict(state, status, source='health', text=None, node=None, scheduler='slurm', command=None):
    """scheduler_decide for a health verdict: critical holds with ``text``, ok releases, warning/unknown keep."""
    if status not in ('ok', 'warning', 'critical', 'unknown'):
        raise AnsibleFilterError('scheduler_verdict: status %r is not one of ok, warning, critical, unknown'
                                 % (status,))
    current = _state('scheduler_verdict', state, node, scheduler)
    node = node or current.name
    decision = _run('scheduler_verdict', 'a source among %s and a text for critical' % ', '.join(sc.SOURCES),
                    sc.decide_verdict, status, current, source, text)
    return _decision('scheduler_verdict', decision, node, scheduler, command,
                     _k8s_node('scheduler_verdict', state, node, scheduler))


class FilterModule(object):
    def filters(self):
        return {
            'scheduler_reason': scheduler_reason,
            'scheduler_hold': scheduler_hold,
            'scheduler_node_state': scheduler_node_state,
            'scheduler_decide': scheduler_decide,
            'scheduler_verdict': scheduler_verdict,
        }
