# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Scheduler actions behind one small interface: whose hold a node is under, and what to do about it.

Everything in gpucluster.core that takes a node out of service or gives it back (the Slurm
HealthCheckProgram wrapper, the slurm role's node plan, the day-2 playbooks) decides here, through
one path: read the node's state from the scheduler (``parse_state``), decide (``decide`` or
``decide_verdict``), and run the command the scheduler class gives for that decision
(``action_argv``). Pure functions and classes: standard library only, Python 3.9+, no Ansible
imports (the wrapper's archive packs this file verbatim; docs/performance.md).

Our reasons (the one place the format lives)
--------------------------------------------
    gpucluster/<source>#<tag>: <text>

- ``<source>``: who holds the node, one of SOURCES (health, shape, upgrade, decommission, validate).
- ``<tag>``: the first 6 hex digits (lower case) of SHA-256 over ``"<source>: <text>"`` (ASCII).
- ``<text>``: what was found, printable ASCII (0x20-0x7e) without ``[``, ``]`` and ``"`` (Slurm
  appends ``[user@time]`` to a reason and scontrol strips quotes around one; they become ``(``,
  ``)`` and ``'``), white space collapsed to single spaces, not empty, cut with ``...`` so that
  the whole reason is at most REASON_MAX (200) characters.

A reason is ours only when all of that holds exactly: the prefix, a known source, the tag of that
very text, a text already in that form, the length. An operator who edits any character of one of
our reasons (``... - RMA 1234``) makes the hold theirs: nothing of ours touches it again. Nobody
types a matching tag by accident.

Reasons of the previous release (legacy, read but never written): ``gpucluster-health: <text>``
(the wrapper, with its default prefix), ``gpucluster-shape: <text>`` (the role's node plan) and
``rolling_upgrade: <text>`` (the rolling upgrade) are read as holds of health, shape and upgrade,
so that a node drained before the upgrade of the collection is resumed by the new code when its
owner finds it fit. The owner rewrites such a hold in the new form when it holds the node again.
A site that had set ``slurm_health_check_reason_prefix`` to anything else resumes those nodes by
hand (docs/day2.md "Whose hold is it").

Operator states (never ours)
----------------------------
A node in an operator state is left exactly as it is: never held, never given back, whatever the
verdict. Resuming a Slurm node (State=RESUME) also clears DOWN, so a node that carries any of
these is never resumed, even when the drain reason is ours. Slurm: DOWN, FAIL (FAILING), MAINT
(MAINTENANCE), RESERVED, FUTURE; an operator's reboot (REBOOT_REQUESTED, REBOOT_ISSUED); power
saving in progress (POWER_DOWN, POWERED_DOWN, POWERING_DOWN, POWER_UP, POWERING_UP); a state
slurmctld does not know yet (UNKNOWN, ERROR, an unknown base) and any word this module does not
know (a newer Slurm's: left alone until it is known). Swarm: availability ``pause``, or an
availability this module does not know. Kubernetes: a cordon that is not part of a cordoning hold of
ours, and a NoSchedule/NoExecute taint that is neither ours nor Kubernetes' own (see Kubernetes below).
And on every scheduler: a hold whose reason is not ours.

Decisions
---------
``decide(state, want, source, text)``, want one of 'hold', 'release', 'keep':

| node                                   | hold                         | release          |
|----------------------------------------|------------------------------|------------------|
| operator state                         | none                         | none             |
| not held                               | drain                        | none             |
| held, reason not ours                  | none (someone else's)        | none             |
| held by another source of ours         | none (its owner lifts it)    | none             |
| held by this source, same reason       | none                         | resume           |
| held by this source, other/legacy text | drain (new reason)           | resume           |

``decide_verdict`` maps the health program's verdict: critical holds, ok releases, warning and
unknown keep (a held node stays held until the program says ok).

Schedulers
----------
``Slurm``: ``scontrol --oneliner show node [NAME]`` to NodeState; ``scontrol update
NodeName=NAME State=DRAIN Reason=...`` / ``State=RESUME``.

``Swarm``: ``docker node inspect NAME`` (JSON) to NodeState: held is ``Spec.Availability ==
'drain'``, the reason is the node label ``gpucluster.health`` (LABEL); hold:
``docker node update --availability drain --label-add gpucluster.health=<reason> NAME``, release:
``docker node update --availability active --label-rm gpucluster.health NAME`` (run on a manager).
An operator's drain has no label of ours and is never touched; only label-marked nodes are set
active again.

``Kubernetes``: ``kubectl get node NAME -o json`` to NodeState. Our hold is the taint
``gpucluster.io/health=critical:NoSchedule`` (TAINT_KEY, TAINT_VALUE, TAINT_EFFECT) with our reason in
the node annotation ``gpucluster.io/reason`` (ANNOTATION); the sources that empty a node (CORDONING:
upgrade, decommission) also cordon it (``spec.unschedulable``), as ``kubectl drain`` does, and uncordon it
when they give it back. Hold and release are one JSON patch (``kubectl patch node NAME --type=json``)
whose ``test`` operations make the API server refuse it when the taints or the annotation changed since
they were read. Operator words, never touched: a cordon without a cordoning hold of ours (CORDONED), any
NoSchedule or NoExecute taint that is not ours and not one of Kubernetes' own (the node lifecycle
controller's ``node.kubernetes.io/*`` conditions, the control-plane role, NVIDIA's ``nvidia.com/gpu``
dedication), ``node.kubernetes.io/out-of-service``, and our taint key with another value or effect.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import hashlib
import json
import re
from collections import namedtuple

SOURCES = ('health', 'shape', 'upgrade', 'decommission', 'validate')
REASON_MAX = 200
PREFIX = 'gpucluster/'
TAG_LENGTH = 6
# The previous release's reasons, read as ours (never written): exact prefix -> source.
LEGACY_PREFIXES = (('gpucluster-health: ', 'health'), ('gpucluster-shape: ', 'shape'),
                   ('rolling_upgrade: ', 'upgrade'))
WANTS = ('hold', 'release', 'keep')

_REASON_RE = re.compile(r'gpucluster/([a-z]+)#([0-9a-f]{%d}): (.+)\Z' % TAG_LENGTH, re.S)
# Characters a reason keeps as they are; '[', ']' and '"' are replaced, anything else becomes '?'.
_REPLACE = {'[': '(', ']': ')', '"': "'"}

Hold = namedtuple('Hold', 'source text legacy')
Decision = namedtuple('Decision', 'action reason why')


class NodeState(namedtuple('NodeState', 'name words held reason hold operator')):
    """A node as its scheduler reports it.

    name: the node's name; words: frozenset of the scheduler's state words (upper case); held: the
    scheduler gives the node no new work (Slurm DRAIN, Swarm availability drain); reason: the hold's
    text as the scheduler keeps it ('' when none); hold: Hold when ``held`` and the reason is ours,
    else None; operator: sorted tuple of the words that make it an operator state (empty when none).
    """
    __slots__ = ()

    @property
    def ours(self):
        return self.hold is not None

    def as_dict(self):
        hold = self.hold
        return {'name': self.name, 'state': sorted(self.words), 'held': self.held, 'reason': self.reason,
                'ours': hold is not None, 'source': hold.source if hold else None,
                'text': hold.text if hold else None, 'legacy': bool(hold and hold.legacy),
                'operator': list(self.operator)}


# --- our reasons ------------------------------------------------------------------------------------

def _check_source(source):
    if source not in SOURCES:
        raise ValueError('source %r is not one of %s' % (source, ', '.join(SOURCES)))


def _prefix_length(source):
    return len(PREFIX) + len(source) + 1 + TAG_LENGTH + 2


def _tag(source, text):
    return hashlib.sha256(('%s: %s' % (source, text)).encode('ascii')).hexdigest()[:TAG_LENGTH]


def clean_text(text, limit=REASON_MAX):
    """``text`` as a reason carries it: printable ASCII without [ ] ", single spaces, at most ``limit``."""
    if not isinstance(text, str):
        text = '' if text is None else str(text)
    out = []
    for char in text[:4 * REASON_MAX]:
        if char.isspace():
            out.append(' ')
        elif char in _REPLACE:
            out.append(_REPLACE[char])
        elif ' ' <= char <= '~':
            out.append(char)
        else:
            out.append('?')
    text = ' '.join(''.join(out).split())
    if len(text) > limit:
        text = text[:limit - 3].rstrip() + '...'
    return text


def make_reason(source, text):
    """Our reason for a hold by ``source`` with ``text`` (see the module's documentation)."""
    _check_source(source)
    text = clean_text(text, REASON_MAX - _prefix_length(source))
    if not text:
        raise ValueError('a %s reason needs a text: got %r' % (source, text))
    return '%s%s#%s: %s' % (PREFIX, source, _tag(source, text), text)


def parse_reason(reason):
    """Hold(source, text, legacy) when ``reason`` is one of ours (or of the previous release), else None."""
    if not isinstance(reason, str) or not reason:
        return None
    match = _REASON_RE.match(reason)
    if match:
        if len(reason) > REASON_MAX:
            return None
        source, tag, text = match.groups()
        if source in SOURCES and text == clean_text(text, REASON_MAX - _prefix_length(source)) \
                and tag == _tag(source, text):
            return Hold(source, text, False)
        return None
    for prefix, source in LEGACY_PREFIXES:
        if reason.startswith(prefix) and reason[len(prefix):].strip():
            return Hold(source, reason[len(prefix):].strip(), True)
    return None


def is_ours(reason, source=None):
    """Whether ``reason`` is one of ours (of ``source`` when given)."""
    hold = parse_reason(reason)
    return hold is not None and (source is None or hold.source == source)


# --- decisions --------------------------------------------------------------------------------------

def _owner(hold):
    return 'gpucluster %s%s' % (hold.source, ' (previous release\'s form)' if hold.legacy else '')


def decide(state, want, source, text=None):
    """Decision(action, reason, why): action 'drain' (with our reason), 'resume' or 'none'.

    state: a NodeState; want: 'hold', 'release' or 'keep'; source: who decides (SOURCES); text: what
    was found (needed to hold). See the module's table.
    """
    _check_source(source)
    if want not in WANTS:
        raise ValueError('want %r is not one of %s' % (want, ', '.join(WANTS)))
    if want == 'keep':
        return Decision('none', None, 'nothing to change')
    if state.operator:
        return Decision('none', None, 'left as it is: its state %s is not ours to change%s' % (
            '+'.join(state.operator), (' (reason: %s)' % state.reason) if state.reason else ''))
    hold = state.hold
    if want == 'hold':
        reason = make_reason(source, text)
        if not state.held:
            return Decision('drain', reason, 'not held')
        if hold is None:
            return Decision('none', None, 'held by someone else: %s' % (state.reason or '(no reason)'))
        if hold.source != source:
            return Decision('none', None, 'held by %s, who gives it back: %s' % (_owner(hold), state.reason))
        if state.reason == reason:
            return Decision('none', None, 'already held: %s' % reason)
        return Decision('drain', reason, 'held by us with another reason: %s' % state.reason)
    if not state.held:
        return Decision('none', None, 'not held')
    if hold is None:
        return Decision('none', None, 'held by someone else: %s' % (state.reason or '(no reason)'))
    if hold.source != source:
        return Decision('none', None, 'held by %s, who gives it back: %s' % (_owner(hold), state.reason))
    return Decision('resume', None, 'our hold is lifted: %s' % state.reason)


def decide_verdict(status, state, source, text=None):
    """The decision for a health verdict: critical holds (with ``text``), ok releases, the rest keeps."""
    if status == 'critical':
        return decide(state, 'hold', source, text)
    if status == 'ok':
        decision = decide(state, 'release', source)
        if decision.action == 'none' and decision.why == 'not held':
            return Decision('none', None, 'health ok')
        return decision
    _check_source(source)
    if status == 'warning':
        if state.held and state.hold is not None and state.hold.source == source and not state.operator:
            return Decision('none', None, 'health warning; the hold stays until the program says ok: %s'
                            % state.reason)
        return Decision('none', None, 'health warning')
    return Decision('none', None, 'health status unknown; node left as it is')


def settled(decision, state):
    """Whether ``decision``'s aim holds in ``state`` although its command failed, and why (bool, str).

    The scheduler answers a RESUME of a node that is no longer drained with an error ("Invalid node state
    specified" from Slurm): between our read and our command an operator, or another run, resumed it. A
    drain that failed while the node is held by now with our reason is done too. Anything else is a real
    failure: the node is not where the decision wanted it.
    """
    if decision.action == 'resume':
        if not state.held:
            return True, 'no longer held (resumed by someone else between the read and the resume)'
        return False, 'still held: %s' % (state.reason or '(no reason)')
    if decision.action == 'drain':
        if state.held and state.reason == decision.reason:
            return True, 'held with this reason already (drained by another run between the read and the drain)'
        return False, 'not held with this reason: %s' % (state.reason or 'not held')
    return True, 'nothing to do'


# --- Slurm ------------------------------------------------------------------------------------------

_SLURM_SUFFIXES = {'*': 'NOT_RESPONDING', '~': 'POWERED_DOWN', '#': 'POWERING_UP', '%': 'POWERING_DOWN',
                   '!': 'POWER_DOWN', '$': 'MAINT', '@': 'REBOOT_REQUESTED', '^': 'REBOOT_ISSUED', '-': 'PLANNED'}
# Fields scontrol prints after Reason= (src/api/node_info.c), when the reason has no [user@time].
_SLURM_AFTER_REASON = ('Comment', 'Extra', 'InstanceId', 'InstanceType', 'ReservationName', 'TLSCertTokenSet',
                       'Topology', 'Parameters')
# How much of a line after Reason= is read: ours are at most REASON_MAX; a longer one is not ours anyway.
_SLURM_REASON_SCAN = 4096
_SLURM_STAMP_RE = re.compile(r' \[[^\[\]\s]*@[^\[\]]*\](?= [A-Za-z]+=| *$)')
_SLURM_TAIL_RE = re.compile(r' (?:%s)=' % '|'.join(_SLURM_AFTER_REASON))


class Slurm(object):
    """Slurm through scontrol (22.05 and newer print the complete state, ``IDLE+DRAIN``)."""

    name = 'slurm'
    HELD = frozenset(['DRAIN', 'DRAINED', 'DRAINING'])
    OPERATOR = frozenset(['DOWN', 'FAIL', 'FAILING', 'MAINT', 'MAINTENANCE', 'RESERVED', 'FUTURE',
                          'REBOOT_REQUESTED', 'REBOOT_ISSUED', 'POWER_DOWN', 'POWERED_DOWN', 'POWERING_DOWN',
                          'POWER_UP', 'POWERING_UP', 'UNKNOWN', 'ERROR', 'INVALID'])
    NEUTRAL = frozenset(['IDLE', 'ALLOCATED', 'MIXED', 'COMPLETING', 'CLOUD', 'NOT_RESPONDING', 'PLANNED',
                         'PERFCTRS', 'DYNAMIC_NORM', 'DYNAMIC_FUTURE', 'INVALID_REG', 'INVAL', 'RESUME',
                         'BLOCKED', 'EXTERNAL'])

    def __init__(self, scontrol='scontrol'):
        if not isinstance(scontrol, str) or not scontrol:
            raise ValueError('scontrol must be a command name or path, got %r' % (scontrol,))
        self.scontrol = scontrol

    def show_argv(self, node=None):
        """argv that prints one line per node (every node when ``node`` is None)."""
        return [self.scontrol, '--oneliner', 'show', 'node'] + ([node] if node is not None else [])

    def action_argv(self, node, decision):
        """argv that carries out ``decision`` for ``node``; None for 'none'."""
        if decision.action == 'drain':
            return [self.scontrol, 'update', 'NodeName=' + node, 'State=DRAIN', 'Reason=' + decision.reason]
        if decision.action == 'resume':
            return [self.scontrol, 'update', 'NodeName=' + node, 'State=RESUME']
        return None

    @classmethod
    def words(cls, state_field):
        """Upper-case state words of a State= value: 'IDLE+DRAIN' -> {IDLE, DRAIN}, 'DOWN*' -> {DOWN, NOT_RESPONDING}."""
        found = set()
        for word in (state_field or '').upper().split('+'):
            while word and word[-1] in _SLURM_SUFFIXES:
                found.add(_SLURM_SUFFIXES[word[-1]])
                word = word[:-1]
            if word:
                found.add(word)
        return frozenset(found)

    @classmethod
    def operator_words(cls, words):
        if not words:
            return ('UNKNOWN',)
        return tuple(sorted(w for w in words if w in cls.OPERATOR or (w not in cls.NEUTRAL and w not in cls.HELD)))

    @staticmethod
    def reason_of(line):
        """The Reason= text of one ``scontrol --oneliner show node`` line, without Slurm's [user@time]."""
        match = re.search(r'(?:^|\s)Reason=', line)
        if not match:
            return ''
        rest = line[match.end():match.end() + _SLURM_REASON_SCAN].rstrip('\r\n')
        stamp = _SLURM_STAMP_RE.search(rest)
        # Only the right end is trimmed: a reason that starts with a space is not one of ours.
        if stamp:
            return rest[:stamp.start()].rstrip()
        tail = _SLURM_TAIL_RE.search(rest)
        return (rest[:tail.start()] if tail else rest).rstrip()

    @classmethod
    def parse_line(cls, line):
        """NodeState of one ``scontrol --oneliner show node`` line."""
        name = re.match(r'\s*NodeName=(\S*)', line or '')
        state = re.search(r'(?:^|\s)State=(\S+)', line or '')
        words = cls.words(state.group(1)) if state else frozenset()
        reason = cls.reason_of(line or '')
        held = bool(words & cls.HELD)
        return NodeState(name.group(1) if name else '', words, held, reason,
                         parse_reason(reason) if held else None, cls.operator_words(words))

    @classmethod
    def parse_states(cls, text):
        """{node name: NodeState} of ``scontrol --oneliner show node`` (lines not about a node are skipped)."""
        states = {}
        for line in (text or '').splitlines():
            if line.lstrip().startswith('NodeName='):
                state = cls.parse_line(line)
                states.setdefault(state.name, state)
        return states

    @classmethod
    def parse_state(cls, text, node=None):
        """NodeState of ``node`` (or of the only node) in scontrol's output; a node not found has an
        empty state, which is an operator state (UNKNOWN): nothing is done to what cannot be read."""
        states = cls.parse_states(text)
        if node is not None and node in states:
            return states[node]
        if node is None and len(states) == 1:
            return list(states.values())[0]
        return NodeState(node or '', frozenset(), False, '', None, ('UNKNOWN',))


# --- Docker Swarm -----------------------------------------------------------------------------------

class Swarm(object):
    """Docker Swarm through ``docker node`` (run on a manager); the reason lives in the node label LABEL."""

    name = 'swarm'
    LABEL = 'gpucluster.health'
    AVAILABILITY = frozenset(['ACTIVE', 'PAUSE', 'DRAIN'])
    OPERATOR = frozenset(['PAUSE'])

    def __init__(self, docker='docker'):
        if not isinstance(docker, str) or not docker:
            raise ValueError('docker must be a command name or path, got %r' % (docker,))
        self.docker = docker

    def show_argv(self, node):
        return [self.docker, 'node', 'inspect', node]

    def action_argv(self, node, decision):
        if decision.action == 'drain':
            return [self.docker, 'node', 'update', '--availability', 'drain',
                    '--label-add', '%s=%s' % (self.LABEL, decision.reason), node]
        if decision.action == 'resume':
            return [self.docker, 'node', 'update', '--availability', 'active', '--label-rm', self.LABEL, node]
        return None

    @classmethod
    def parse_node(cls, data):
        """NodeState of one node object of ``docker node inspect``."""
        if not isinstance(data, dict):
            raise ValueError('a docker node is a JSON object, got %s' % type(data).__name__)
        spec = data.get('Spec') if isinstance(data.get('Spec'), dict) else {}
        status = data.get('Status') if isinstance(data.get('Status'), dict) else {}
        description = data.get('Description') if isinstance(data.get('Description'), dict) else {}
        labels = spec.get('Labels') if isinstance(spec.get('Labels'), dict) else {}
        availability = spec.get('Availability')
        availability = availability.upper() if isinstance(availability, str) else ''
        words = set([availability] if availability else [])
        if isinstance(status.get('State'), str) and status['State']:
            words.add('STATUS_' + status['State'].upper())
        # The node's status (ready, down, ...) is no operator's; an availability we do not know is.
        unknown = set(w for w in words if not w.startswith('STATUS_') and w not in cls.AVAILABILITY)
        operator = tuple(sorted((words & cls.OPERATOR) | unknown))
        if not availability:
            operator = ('UNKNOWN',)
        reason = labels.get(cls.LABEL)
        reason = reason if isinstance(reason, str) else ''
        held = availability == 'DRAIN'
        name = spec.get('Name') or description.get('Hostname') or data.get('ID') or ''
        return NodeState(str(name), frozenset(words), held, reason, parse_reason(reason) if held else None,
                         operator)

    @classmethod
    def parse_state(cls, text, node=None):
        """NodeState from ``docker node inspect`` output (JSON text, or the parsed list or object)."""
        try:
            data = json.loads(text) if isinstance(text, (str, bytes)) else text
        except RecursionError:
            raise ValueError('docker node inspect printed JSON nested too deeply to read')
        if isinstance(data, dict):
            data = [data]
        if not isinstance(data, list) or not data:
            raise ValueError('docker node inspect printed no node')
        if node is None:
            if len(data) != 1:
                raise ValueError('docker node inspect printed %d nodes; name the one to read' % len(data))
            return cls.parse_node(data[0])
        for item in data:
            if not isinstance(item, dict):
                continue
            spec = item.get('Spec') if isinstance(item.get('Spec'), dict) else {}
            description = item.get('Description') if isinstance(item.get('Description'), dict) else {}
            if node in (item.get('ID'), spec.get('Name'), description.get('Hostname')):
                return cls.parse_node(item)
        raise ValueError('docker node inspect printed no node named %r' % (node,))


# --- Kubernetes -------------------------------------------------------------------------------------

class Kubernetes(object):
    """Kubernetes through kubectl (with the control plane's kubeconfig); the reason lives in ANNOTATION."""

    name = 'kubernetes'
    TAINT_KEY = 'gpucluster.io/health'
    TAINT_VALUE = 'critical'
    TAINT_EFFECT = 'NoSchedule'
    ANNOTATION = 'gpucluster.io/reason'
    # Sources whose hold empties the node (kubectl drain semantics): their hold cordons it too.
    CORDONING = ('upgrade', 'decommission')
    HOLDING_EFFECTS = ('NoSchedule', 'NoExecute')
    # Taints that are a node's standing role or Kubernetes' own view of it, not anyone's hold.
    NEUTRAL_TAINT_KEYS = frozenset(['node-role.kubernetes.io/control-plane', 'node-role.kubernetes.io/master',
                                    'nvidia.com/gpu', 'node.kubernetes.io/unschedulable'])
    NEUTRAL_TAINT_PREFIXES = ('node.kubernetes.io/', 'node.cloudprovider.kubernetes.io/')
    # An operator's word even under a neutral prefix (non-graceful node shutdown).
    OPERATOR_TAINT_KEYS = frozenset(['node.kubernetes.io/out-of-service'])

    def __init__(self, kubectl='kubectl'):
        if not isinstance(kubectl, str) or not kubectl:
            raise ValueError('kubectl must be a command name or path, got %r' % (kubectl,))
        self.kubectl = kubectl

    def show_argv(self, node):
        return [self.kubectl, 'get', 'node', node, '--output=json']

    @classmethod
    def _taint_word(cls, taint):
        value = taint.get('value')
        return 'TAINT %s%s:%s' % (taint.get('key'), ('=%s' % value) if value else '', taint.get('effect'))

    @classmethod
    def _ours(cls, taint):
        return (taint.get('key') == cls.TAINT_KEY and taint.get('value') == cls.TAINT_VALUE
                and taint.get('effect') == cls.TAINT_EFFECT)

    @staticmethod
    def _parts(data):
        meta = data.get('metadata') if isinstance(data.get('metadata'), dict) else {}
        spec = data.get('spec') if isinstance(data.get('spec'), dict) else {}
        annotations = meta.get('annotations') if isinstance(meta.get('annotations'), dict) else {}
        taints = spec.get('taints') if isinstance(spec.get('taints'), list) else []
        return meta, spec, annotations, [t for t in taints if isinstance(t, dict)]

    @classmethod
    def parse_node(cls, data):
        """NodeState of one Node object of ``kubectl get node NAME -o json``."""
        if not isinstance(data, dict):
            raise ValueError('a Kubernetes node is a JSON object, got %s' % type(data).__name__)
        meta, spec, annotations, taints = cls._parts(data)
        name = meta.get('name') if isinstance(meta.get('name'), str) else ''
        cordoned = spec.get('unschedulable') is True
        reason = annotations.get(cls.ANNOTATION)
        reason = reason if isinstance(reason, str) else ''
        ours = any(cls._ours(t) for t in taints)
        hold = parse_reason(reason) if ours else None
        words = set(['CORDONED' if cordoned else 'SCHEDULABLE'])
        operator = set()
        for taint in taints:
            key, effect = taint.get('key'), taint.get('effect')
            words.add(cls._taint_word(taint))
            if effect not in cls.HOLDING_EFFECTS or cls._ours(taint):
                continue
            if key in cls.OPERATOR_TAINT_KEYS or key == cls.TAINT_KEY or not (
                    key in cls.NEUTRAL_TAINT_KEYS
                    or (isinstance(key, str) and key.startswith(cls.NEUTRAL_TAINT_PREFIXES))):
                operator.add(cls._taint_word(taint))
        if cordoned and not (hold is not None and hold.source in cls.CORDONING):
            operator.add('CORDONED')
        if not name or data.get('kind') not in (None, 'Node'):
            operator = set(['UNKNOWN'])
        return NodeState(name, frozenset(words), ours or cordoned, reason, hold, tuple(sorted(operator)))

    @classmethod
    def _nodes(cls, text):
        try:
            data = json.loads(text) if isinstance(text, (str, bytes)) else text
        except RecursionError:
            raise ValueError('kubectl printed JSON nested too deeply to read')
        if isinstance(data, dict) and (data.get('kind') in ('List', 'NodeList') or 'items' in data):
            data = data.get('items')
        if isinstance(data, dict):
            data = [data]
        if not isinstance(data, list) or not data:
            raise ValueError('kubectl printed no node')
        return data

    @classmethod
    def find(cls, text, node=None):
        """The Node object named ``node`` (or the only one) in kubectl's JSON output."""
        data = cls._nodes(text)
        if node is None:
            if len(data) != 1:
                raise ValueError('kubectl printed %d nodes; name the one to read' % len(data))
            return data[0]
        for item in data:
            if isinstance(item, dict) and cls._parts(item)[0].get('name') == node:
                return item
        raise ValueError('kubectl printed no node named %r' % (node,))

    @classmethod
    def parse_state(cls, text, node=None):
        """NodeState from ``kubectl get node NAME -o json`` (or ``get nodes``) output, text or parsed."""
        return cls.parse_node(cls.find(text, node))

    @classmethod
    def patch(cls, decision, data):
        """The JSON patch (RFC 6902) that carries out ``decision`` on the Node object ``data`` as read.

        Its ``test`` operations make the API server refuse the whole patch when the taint list or our
        annotation changed since the read, so an operator's taint added meanwhile is never overwritten.
        """
        meta, spec, annotations, taints = cls._parts(data)
        raw_taints = spec.get('taints') if isinstance(spec.get('taints'), list) else None
        note = '/metadata/annotations/' + cls.ANNOTATION.replace('~', '~0').replace('/', '~1')
        ours = {'key': cls.TAINT_KEY, 'value': cls.TAINT_VALUE, 'effect': cls.TAINT_EFFECT}
        ops = []
        if decision.action == 'drain':
            if not any(cls._ours(t) for t in taints):
                if raw_taints:
                    ops += [{'op': 'test', 'path': '/spec/taints/%d' % (len(raw_taints) - 1), 'value': raw_taints[-1]},
                            {'op': 'add', 'path': '/spec/taints/-', 'value': ours}]
                elif raw_taints is not None:
                    ops += [{'op': 'test', 'path': '/spec/taints', 'value': []},
                            {'op': 'add', 'path': '/spec/taints/-', 'value': ours}]
                else:
                    ops.append({'op': 'add', 'path': '/spec/taints', 'value': [ours]})
            if isinstance(meta.get('annotations'), dict):
                ops.append({'op': 'add', 'path': note, 'value': decision.reason})
            else:
                ops.append({'op': 'add', 'path': '/metadata/annotations', 'value': {cls.ANNOTATION: decision.reason}})
            hold = parse_reason(decision.reason)
            if hold is not None and hold.source in cls.CORDONING and spec.get('unschedulable') is not True:
                ops.append({'op': 'add', 'path': '/spec/unschedulable', 'value': True})
            return ops
        if decision.action == 'resume':
            index = next((i for i, t in enumerate(raw_taints or []) if isinstance(t, dict) and cls._ours(t)), None)
            if index is not None:
                ops += [{'op': 'test', 'path': '/spec/taints/%d' % index, 'value': raw_taints[index]},
                        {'op': 'remove', 'path': '/spec/taints/%d' % index}]
            reason = annotations.get(cls.ANNOTATION)
            if isinstance(reason, str):
                ops += [{'op': 'test', 'path': note, 'value': reason}, {'op': 'remove', 'path': note}]
            hold = parse_reason(reason) if isinstance(reason, str) else None
            if hold is not None and hold.source in cls.CORDONING and spec.get('unschedulable') is True:
                ops += [{'op': 'test', 'path': '/spec/unschedulable', 'value': True},
                        {'op': 'remove', 'path': '/spec/unschedulable'}]
            return ops
        return []

    def action_argv(self, node, decision, data=None):
        """argv that carries out ``decision`` for ``node``, built against ``data``, the Node object as read
        (``find``); None for 'none'."""
        if decision.action not in ('drain', 'resume'):
            return None
        if not isinstance(data, dict):
            raise ValueError('a Kubernetes %s needs the node as kubectl printed it (kubectl get node %s -o json)'
                             % (decision.action, node))
        return [self.kubectl, 'patch', 'node', node, '--type=json',
                '--patch=' + json.dumps(self.patch(decision, data), separators=(',', ':'), sort_keys=True)]


SCHEDULERS = {'slurm': Slurm, 'swarm': Swarm, 'kubernetes': Kubernetes}


def scheduler(name, command=None):
    """An instance of the scheduler class called ``name`` ('kubernetes', 'slurm' or 'swarm'), with its command."""
    if name not in SCHEDULERS:
        raise ValueError('scheduler %r is not one of %s' % (name, ', '.join(sorted(SCHEDULERS))))
    return SCHEDULERS[name](command) if command else SCHEDULERS[name]()
