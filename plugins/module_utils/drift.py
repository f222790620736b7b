# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Drift computation for the GPU stack audit.

Pure functions over plain dicts (no Ansible imports, no file system): the action plugin
``drift_audit`` and the benchmark call them; the unit tests drive them with tables. The reports are
built and written on the controller by plugins/plugin_utils/drift_reports.py (the collection's one
report writer, plugins/plugin_utils/reports.py, renders them).

A finding is ``{host, component, expected, found, kind, severity}`` (plus ``group`` and a
readable ``message``); ``kind`` is one of:

``baseline``  the host's version does not match the declared pin;
``missing``   the component is absent where a pin or the group majority expects it;
``majority``  no pin, and the host differs from the version most hosts of its group have,
              or the group is split evenly (a tie has no majority: every side is reported);
``unknown``   the host has no usable facts (unreachable, gathering failed, stale, collected in the
              future, a corrupt or malformed cache entry), or the version of one component cannot be
              known (stack_facts could not read its file: a FIFO, a hung mount; ``scope`` is
              ``component``): never a pass.

The Docker Swarm state (``gpu_stack_details.swarm``) is no version and is never pinned: its own rules
(module_utils/swarm_report.py) report, as component ``swarm`` and kind ``majority``, hosts in another
swarm than most, and hosts in or out of a swarm against most of their group.

Nothing here raises on the content of facts: a host whose facts have the wrong shape is
``unknown`` with the reason (see :func:`check_facts`), and every report is valid JSON, XML and
Markdown whatever text the hosts, pins and versions carry.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import fnmatch
import ipaddress
import math
import re

from ansible_collections.gpucluster.core.plugins.module_utils import stack_versions, swarm_report
from ansible_collections.gpucluster.core.plugins.module_utils.text_bounds import INVISIBLE_CLASS, clip, quote

KINDS = ('baseline', 'majority', 'missing', 'unknown')
SEVERITIES = ('critical', 'warning', 'info')
_RANK = {'critical': 3, 'warning': 2, 'info': 1, 'never': 99}

# Components that must be equal inside a group even without a pin.
DEFAULT_CONSISTENT = (
    'kernel', 'nvidia_driver', 'nvidia_driver_loaded', 'cuda_toolkit', 'nccl', 'cudnn',
    'ofed', 'rdma_core', 'hca_firmware', 'gpu_vbios', 'slurm', 'nvidia_container_toolkit', 'kubelet',
)

# Drift that breaks or slows distributed jobs is critical; firmware, VBIOS and tooling that
# rarely changes job behaviour is a warning. Components not listed default to warning.
DEFAULT_SEVERITY = {
    'kernel': 'critical',
    'nvidia_driver': 'critical',
    'nvidia_driver_loaded': 'critical',
    'nvidia_fabricmanager': 'critical',
    'cuda_toolkit': 'critical',
    'cudnn': 'critical',
    'nccl': 'critical',
    'ofed': 'critical',
    'rdma_core': 'critical',
    'slurm': 'critical',
    'munge': 'critical',
    'nvidia_container_toolkit': 'critical',
    'hca_firmware': 'warning',
    'gpu_vbios': 'warning',
    'os': 'warning',
    'containerd': 'warning',
    'docker': 'warning',
    # kubelet off the cluster's release breaks Kubernetes' version skew policy; kubeadm and kubectl are tools.
    'kubelet': 'critical',
    'kubeadm': 'warning',
    'kubectl': 'warning',
    'dcgm': 'warning',
    'python': 'warning',
}

# Role variables that install a component: the default baseline, one source of truth.
# The fabric manager always runs the driver's version, so the driver pin applies to it.
DEFAULT_BASELINE_VARS = {
    'nvidia_driver': 'nvidia_driver_version',
    'nvidia_driver_loaded': 'nvidia_driver_version',
    'nvidia_fabricmanager': 'nvidia_driver_version',
    'cuda_toolkit': 'cuda_toolkit_version',
    'cudnn': 'cuda_toolkit_cudnn_version',
    'nccl': 'cuda_toolkit_nccl_version',
    'nvidia_container_toolkit': 'container_runtime_nvidia_toolkit_version',
    'slurm': 'slurm_version',
    'munge': 'slurm_munge_version',
    'kubelet': 'k8s_node_version',
    'kubeadm': 'k8s_node_version',
    'kubectl': 'k8s_node_version',
}
# Components pinned only where the inventory sets their variable, never by a role's default: a site that runs
# another scheduler may have kubectl (or kubelet) on a node for its own use, which is not drift from a release it
# never chose.
BASELINE_INVENTORY_ONLY = ('kubelet', 'kubeadm', 'kubectl')
# Components whose pin only applies where the component is installed (the fabric manager is
# needed on NVSwitch systems only; PCIe servers have none and are not missing anything).
DEFAULT_BASELINE_IF_PRESENT = ('nvidia_fabricmanager',)

UNGROUPED = '(ungrouped)'
# The components stack_facts reports: baseline, consistent, severity and baseline_vars may name
# only these (a misspelled component would otherwise be checked as absent everywhere and pass).
KNOWN_COMPONENTS = stack_versions.COMPONENTS
# The swarm state is compared by its own rules (swarm_report.swarm_findings), never pinned nor in
# ``consistent``; ``severity`` and ``ignore`` may name it.
SWARM = swarm_report.COMPONENT
SEVERITY_COMPONENTS = KNOWN_COMPONENTS + (SWARM,)
# Characters after which a pin ends: '12.4' matches '12.4.1' and '2.21.5' matches
# '2.21.5-1+cuda12.4', but '12.4' never matches '12.40' or '12.4a'. '~' is not one of them:
# '2.21.5~rc1' is a pre-release, older than 2.21.5 for dpkg and rpm, and does not meet the pin.
_SEPARATORS = '.-+_^ '
_PIN_ENDS = _SEPARATORS + '~'
# '~' followed by one of these marks a repacked upstream tarball, not a pre-release.
_REPACK = re.compile(r'(?:dfsg|ds|repack)(?![A-Za-z])')


def pin_matches(pin, found, family=None):
    """True when ``found`` meets ``pin``.

    The epoch is compared only when the pin names one (``1:2.0`` needs epoch 1, a missing epoch
    is 0); a pin without epoch applies to the version as displayed. Then ``found`` meets the pin
    when it is the same version by the rules of the package ``family`` (``dpkg``, ``rpm``; see
    :func:`stack_versions.compare_versions`: ``12.04`` is ``12.4``) or starts with the pin at a
    separator that does not make it a pre-release (``2.21.5-1``, ``2.21.5.1``, but not
    ``2.21.5~rc1``; Debian's repack suffixes ``~ds1``, ``~dfsg``, ``~repack`` are the same
    upstream version and do meet it).
    """
    if found is None or pin is None:
        return False
    pin = str(pin).strip()
    found = str(found)
    if found == pin:
        return True
    if ':' in pin or ':' in found:
        pin_epoch, pin_rest = stack_versions._split_epoch(pin)
        found_epoch, found_rest = stack_versions._split_epoch(found.strip())
    else:
        pin_epoch, pin_rest, found_epoch, found_rest = '', pin, '', found.strip()
    if not pin_rest:
        return False
    if pin_epoch and stack_versions._cmp_digits(pin_epoch, found_epoch or '0') != 0:
        return False
    if found_rest == pin_rest:
        return True
    if found_rest.startswith(pin_rest):
        following = found_rest[len(pin_rest)]
        if following == '~':
            # A pre-release ('~rc1', '~beta') is older than the pinned version; Debian's repacked
            # upstream sources ('1.6.20~ds1', '~dfsg', '~repack') are that upstream version.
            if _REPACK.match(found_rest, len(pin_rest) + 1):
                return True
        elif pin_rest[-1] in _PIN_ENDS or following in _SEPARATORS:
            return True
    return stack_versions.compare_versions(found_rest, pin_rest, family) == 0


def _relation(pin, found, family):
    """' (older than the pin)' or ' (newer than the pin)' for a version that misses its pin."""
    if found is None:
        return ''
    pin_epoch, pin_rest = stack_versions._split_epoch(str(pin).strip())
    found_epoch, found_rest = stack_versions._split_epoch(str(found).strip())
    if pin_epoch:
        order = stack_versions.compare_versions(str(found), str(pin), family)
    else:
        order = stack_versions.compare_versions(found_rest, pin_rest, family)
    if order < 0:
        return ' (older than the pin)'
    if order > 0:
        return ' (newer than the pin)'
    return ''


# ---------------------------------------------------------------- input validation

_CONTROL = re.compile('[\x00-\x1f\x7f-\x9f]')
# A pin longer than this is no version (it would be copied into every finding of every host).
PIN_MAX_CHARS = 200


class BaselineError(ValueError):
    """A baseline, pin or component list that cannot be audited; the message names it."""


def _type_name(value):
    """The plain type name (Ansible hands over tagged subclasses such as _AnsibleTaggedFloat)."""
    for base in (bool, int, float, str, bytes, list, tuple, dict):
        if isinstance(value, base):
            return base.__name__
    return type(value).__name__


def check_components(names, what, known=KNOWN_COMPONENTS):
    """Refuse component names that stack_facts never reports; ``what`` names the option."""
    unknown = []
    for name in names:
        if not isinstance(name, str) or name not in known:
            unknown.append(name)
    if unknown:
        raise BaselineError('%s names unknown component%s %s; known components: %s' % (
            what, 's' if len(unknown) > 1 else '', clip(', '.join(quote(n, 60) for n in unknown[:20]), 600)
            + (' and %d more' % (len(unknown) - 20) if len(unknown) > 20 else ''),
            ', '.join(known)))


def check_pin(value, what):
    """A pin must be a string (or None/empty for no pin); returns it stripped or None."""
    if value is None:
        return None
    if not isinstance(value, str):
        if isinstance(value, float):
            hint = ('YAML read an unquoted version as a number, which loses trailing zeros '
                    '(12.10 becomes %r)' % value)
        elif isinstance(value, bool):
            hint = 'YAML read it as a boolean'
        else:
            hint = 'a pin is text'
        # quote(): a YAML alias bomb (lists shared nine levels deep) is shown by its first 200
        # characters, never expanded.
        raise BaselineError('%s=%s has type %s: pins must be strings; %s: quote the version '
                            '(for example "12.10")' % (what, quote(value), _type_name(value), hint))
    pin = value.strip()
    if _CONTROL.search(pin):
        raise BaselineError('%s=%s holds a newline or control character; accepted: a version '
                            'string such as "12.4.1" or "2:1.0-1"' % (what, quote(value)))
    if len(pin) > PIN_MAX_CHARS:
        raise BaselineError('%s=%s is %d characters long; accepted: a version string of at most %d '
                            'characters such as "12.4.1"' % (what, quote(value), len(pin), PIN_MAX_CHARS))
    return pin or None


def check_baseline(baseline, what='baseline', known=KNOWN_COMPONENTS):
    """Validate a component -> pin mapping; returns it with pins stripped (None: no pin)."""
    if not isinstance(baseline, dict):
        raise BaselineError('%s must be a mapping of component to version string, got %s'
                            % (what, _type_name(baseline)))
    check_components(list(baseline), what, known)
    return dict((component, check_pin(pin, '%s[%s]' % (what, component)))
                for component, pin in baseline.items())


def _bad_text(value):
    """Why a fact value is not a clean version string (None when it is one)."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return 'is bytes, expected a version string or null'
    if not isinstance(value, str):
        return 'has type %s, expected a version string or null' % _type_name(value)
    try:
        value.encode('utf-8')
    except UnicodeEncodeError:
        return 'holds bytes that are not valid UTF-8 (%s)' % clip(ascii(value[:200]), 200)
    return None


def _ascii(value):
    """ascii() of a key, at most 200 characters."""
    if isinstance(value, (str, bytes)):
        return clip(ascii(value[:201]), 200)
    return quote(value).encode('ascii', 'backslashreplace').decode('ascii')


def check_unknown(unknown):
    """Why ``gpu_stack_details.unknown`` (component -> reason) cannot be read, or None."""
    if unknown is None:
        return None
    if not isinstance(unknown, dict):
        return 'gpu_stack_details.unknown has type %s, expected a mapping' % _type_name(unknown)
    for key, reason in unknown.items():
        if not isinstance(key, str) or _bad_text(key):
            return 'gpu_stack_details.unknown has a key %s that is not a component name' % _ascii(key)
        if not isinstance(reason, str) or _bad_text(reason):
            return 'gpu_stack_details.unknown[%s] is not a reason text' % key
    return None


def check_facts(stack, raw=None):
    """Why a host's ``gpu_stack`` (and ``gpu_stack_details.raw``) cannot be audited, or None.

    stack_facts writes a mapping of component to string or null; anything else (a hand-edited or
    truncated cache entry, facts of another tool, bytes, surrogates from undecodable bytes) makes
    the host unknown with this reason instead of a traceback or a wrong comparison.
    """
    if not isinstance(stack, dict):
        return 'gpu_stack has type %s, expected a mapping of component to version' % _type_name(stack)
    for key in stack:
        if not isinstance(key, str) or _bad_text(key):
            return 'gpu_stack has a key %s that is not a component name' % _ascii(key)
        why = _bad_text(stack[key])
        if why:
            return 'gpu_stack[%s] %s' % (key, why)
    if raw is not None:
        if not isinstance(raw, dict):
            return 'gpu_stack_details.raw has type %s, expected a mapping' % _type_name(raw)
        for key in raw:
            if not isinstance(key, str) or _bad_text(key):
                return 'gpu_stack_details.raw has a key %s that is not a component name' % _ascii(key)
            why = _bad_text(raw[key])
            if why:
                return 'gpu_stack_details.raw[%s] %s' % (key, why)
    return None


# Seconds a host's clock may run ahead of the controller's before its facts count as collected in the
# future (the largest clock skew Kerberos accepts by default).
CLOCK_AHEAD_TOLERANCE = 300


def fact_age_problem(collected, now, max_age):
    """Why facts collected at ``collected`` (seconds since the epoch) cannot count as fresh, or None:
    older than ``max_age``, or more than CLOCK_AHEAD_TOLERANCE seconds in the future (a clock ahead:
    such facts would pass as fresh for ever). ``max_age`` 0 checks nothing."""
    if max_age <= 0:
        return None
    if isinstance(collected, bool) or not isinstance(collected, (int, float, str)):
        return 'gpu_stack facts carry no collected_at; max_fact_age cannot be checked'
    try:
        collected = float(collected)
    except (TypeError, ValueError, OverflowError):
        return 'gpu_stack facts carry no collected_at; max_fact_age cannot be checked'
    if not math.isfinite(collected):
        return 'gpu_stack facts carry collected_at=%s; max_fact_age cannot be checked' % collected
    age = now - collected
    if -age > CLOCK_AHEAD_TOLERANCE:
        return ('gpu_stack facts carry collected_at %d s in the future (clock ahead on the host or behind on '
                'the controller; more than %d s); max_fact_age cannot be checked' % (-age, CLOCK_AHEAD_TOLERANCE))
    if age > max_age:
        return 'gpu_stack facts are %d s old (max_fact_age %d s)' % (age, max_age)
    return None


def _display(value):
    return 'absent' if value is None else str(value)


def _ip_literal(text):
    """The address of an IPv6 literal host name ('::1', '[::1]', 'fe80::1'), or None for anything else."""
    if text.startswith('[') and text.endswith(']'):
        text = text[1:-1]
    if ':' not in text:
        return None
    try:
        return ipaddress.IPv6Address(text)
    except ValueError:
        return None


class IgnoreRules(object):
    """``component`` or ``host:component`` entries, shell globs on either side.

    A host that is an IPv6 literal is matched literally, never as a glob (``[::1]`` would be a
    character class): write it in brackets, ``[::1]:nccl`` or ``[fe80::1]`` (every component); it
    matches the host named ``::1`` or ``[::1]`` (any spelling of the same address).
    """

    def __init__(self, entries):
        self._components = set()
        self._patterns = []
        for entry in entries or ():
            entry = str(entry).strip()
            if not entry:
                continue
            if entry.startswith('[') and ']' in entry:
                # '[::1]:nccl', or '[::1]' alone: every component of that host.
                close = entry.index(']') + 1
                address = _ip_literal(entry[:close])
                rest = entry[close:]
                if address is not None and (not rest or rest.startswith(':')):
                    self._patterns.append((address, rest[1:] or '*'))
                    continue
            if ':' in entry:
                host, component = entry.rsplit(':', 1)
                address = _ip_literal(host)
                self._patterns.append((address if address is not None else host, component))
            elif any(ch in entry for ch in '*?['):
                self._patterns.append(('*', entry))
            else:
                self._components.add(entry)

    def ignored(self, host, component):
        if component in self._components:
            return True
        for host_pat, comp_pat in self._patterns:
            if not fnmatch.fnmatchcase(component, comp_pat):
                continue
            if isinstance(host_pat, ipaddress.IPv6Address):
                if _ip_literal(str(host)) == host_pat:
                    return True
            elif fnmatch.fnmatchcase(host, host_pat):
                return True
        return False

    def __bool__(self):
        return bool(self._components or self._patterns)

    __nonzero__ = __bool__


def partition_hosts(hosts, group_members=None):
    """Map host -> group name: the first group (in the order given) that lists the host.

    ``group_members`` is an ordered list of ``(group, [hosts])``; hosts in none of them are
    compared with each other under ``UNGROUPED``.
    """
    membership = {}
    for group, members in group_members or ():
        for host in members:
            if host not in membership:
                membership[host] = group
    return dict((host, membership.get(host, UNGROUPED)) for host in hosts)


def _severity_of(component, severity):
    return severity.get(component) or DEFAULT_SEVERITY.get(component, 'warning')


def audit(hosts, facts, baselines=None, consistent=DEFAULT_CONSISTENT, groups=None,
          severity=None, ignore=None, unknown_severity='critical', unknown_reasons=None,
          raw=None, baseline_if_present=DEFAULT_BASELINE_IF_PRESENT, families=None, pin_origins=None,
          unknown_components=None, swarm=None):
    """Compare every host with its pins and with the majority of its group.

    hosts: ordered host names to audit.
    facts: host -> {component: version or None}; a host missing here or mapped to None is
        ``unknown``.
    baselines: host -> {component: pin} (pins already merged from role variables and
        explicit overrides; a None or empty pin is no pin).
    consistent: components that must be equal inside a group when a host has no pin.
    groups: host -> group name (see :func:`partition_hosts`); default one group.
    severity: component -> severity overrides.
    ignore: an :class:`IgnoreRules` or a list of entries.
    unknown_reasons: host -> text explaining why it has no facts.
    raw: host -> {component: raw version} (package version with epoch) that a pin may also
        match.
    baseline_if_present: components whose pin is skipped on hosts where they are absent.
    families: host -> package family (``dpkg``, ``rpm``) whose rules order its versions.
    pin_origins: host -> {component: text} for pins that are not the inventory's own (a role's
        default): such a pin applies only where the component is installed (a host the role does
        not manage is not "missing" it), and its findings name the origin.
    unknown_components: host -> {component: reason} for components whose version the host could
        not know (``gpu_stack_details.unknown``): each is an ``unknown`` finding of that component
        (``scope`` ``component``), never compared, never counted in its group.
    swarm: host -> ``gpu_stack_details.swarm`` of the hosts whose facts have it (see
        :func:`audit_swarm`).

    Returns ``(findings, stats)``: findings sorted by severity, host, component; stats with
    the per-group value distribution of every host with facts (those that missed a pin too),
    the hosts of each group (``members``, unknown hosts included), the host x component
    checks and ``swarm`` (host -> swarm report, see :func:`audit_swarm`).
    """
    baselines = baselines or {}
    severity = severity or {}
    groups = groups or {}
    raw = raw or {}
    families = families or {}
    pin_origins = pin_origins or {}
    unknown_reasons = unknown_reasons or {}
    unknown_components = unknown_components or {}
    if not isinstance(ignore, IgnoreRules):
        ignore = IgnoreRules(ignore)
    consistent = tuple(consistent or ())
    if_present = frozenset(baseline_if_present or ())
    findings = []
    # group -> component -> value -> [hosts] for hosts that passed (or had no) pin check: the
    # majority is computed among these, so a host that missed its pin is reported once.
    distribution = {}
    # Hosts that missed a pin, group -> component -> value -> [hosts]: with the above, every host
    # with facts, which the report shows.
    missed = {}
    group_hosts = {}
    checks = {}
    empty = {}

    for host in hosts:
        group = groups.get(host, UNGROUPED)
        group_hosts.setdefault(group, []).append(host)
        host_facts = facts.get(host)
        pins = dict((c, p) for c, p in (baselines.get(host) or empty).items()
                    if p is not None and str(p).strip() != '')
        components = list(consistent)
        components.extend(c for c in pins if c not in components)
        if ignore:
            components = [c for c in components if not ignore.ignored(host, c)]
        checks[host] = components

        if host_facts is None:
            reason = unknown_reasons.get(host) or 'no facts for this host'
            for component in components:
                expected = pins.get(component)
                findings.append({
                    'host': host, 'component': component, 'expected': expected, 'found': None,
                    'kind': 'unknown', 'severity': unknown_severity, 'group': group,
                    'message': reason,
                })
            continue

        host_raw = raw.get(host) or empty
        family = families.get(host)
        origins = pin_origins.get(host) or empty
        host_unknown = unknown_components.get(host) or empty
        group_values = distribution.get(group)
        if group_values is None:
            group_values = distribution[group] = {}
        for component in components:
            if component in host_unknown:
                findings.append({
                    'host': host, 'component': component, 'expected': pins.get(component), 'found': None,
                    'kind': 'unknown', 'severity': unknown_severity, 'group': group, 'scope': 'component',
                    'message': '%s version unknown: %s' % (component, host_unknown[component]),
                })
                continue
            found = host_facts.get(component)
            pin = pins.get(component)
            if pin is not None and not (found is None and (component in if_present or component in origins)):
                pin = str(pin).strip()
                raw_found = host_raw.get(component)
                if not (pin_matches(pin, found, family) or pin_matches(pin, raw_found, family)):
                    kind = 'missing' if found is None else 'baseline'
                    findings.append({
                        'host': host, 'component': component, 'expected': pin,
                        'found': found, 'kind': kind, 'severity': _severity_of(component, severity),
                        'group': group,
                        'message': '%s %s, pinned %s%s%s' % (
                            component, _display(found), pin,
                            _relation(pin, raw_found or found, family),
                            ' (%s)' % origins[component] if component in origins else ''),
                    })
                    if component in origins:
                        findings[-1]['pin_origin'] = origins[component]
                    missed.setdefault(group, {}).setdefault(component, {}).setdefault(found, []).append(host)
                    continue
            group_values.setdefault(component, {}).setdefault(found, []).append(host)

    consistent_set = frozenset(consistent)
    for group in distribution:
        for component, by_value in distribution[group].items():
            if len(by_value) < 2 or component not in consistent_set:
                continue
            ranked = sorted(by_value.items(), key=lambda item: (-len(item[1]), _display(item[0])))
            total = sum(len(members) for dummy, members in ranked)
            top = len(ranked[0][1])
            tied = [value for value, members in ranked if len(members) == top]
            if len(tied) == 1:
                majority = tied[0]
                for value, members in ranked[1:]:
                    kind = 'missing' if value is None else 'majority'
                    for host in members:
                        findings.append({
                            'host': host, 'component': component, 'expected': majority,
                            'found': value, 'kind': kind,
                            'severity': _severity_of(component, severity), 'group': group,
                            'message': '%s %s, %d of %d hosts in %s have %s' % (
                                component, _display(value), top, total, group, _display(majority)),
                        })
            else:
                spread = ', '.join('%s on %d' % (_display(v), len(m)) for v, m in ranked)
                expected = 'no majority (%s)' % spread
                for value, members in ranked:
                    kind = 'missing' if value is None else 'majority'
                    for host in members:
                        findings.append({
                            'host': host, 'component': component, 'expected': expected,
                            'found': value, 'kind': kind,
                            'severity': _severity_of(component, severity), 'group': group,
                            'message': '%s %s; group %s is split: %s' % (
                                component, _display(value), group, spread),
                        })

    swarm_rows = {}
    if swarm:
        swarm_found, swarm_rows = audit_swarm(hosts, facts, swarm, groups, severity.get(SWARM), ignore,
                                              unknown_severity, checks)
        findings.extend(swarm_found)
    findings.sort(key=lambda f: (-_RANK.get(f['severity'], 0), f['host'], f['component']))
    shown = {}
    for source in (distribution, missed):
        for group, comps in source.items():
            for component, values in comps.items():
                counts = shown.setdefault(group, {}).setdefault(component, {})
                for value, names in values.items():
                    key = _display(value)
                    counts[key] = counts.get(key, 0) + len(names)
    stats = {
        'checks': checks,
        'distribution': shown,
        'members': dict((group, sorted(names)) for group, names in group_hosts.items()),
        'swarm': swarm_rows,
    }
    return findings, stats


def audit_swarm(hosts, facts, swarm, groups=None, severity=None, ignore=None, unknown_severity='critical',
                checks=None):
    """The swarm part of the audit: ``(findings, rows)``.

    Hosts with facts (``facts[host]`` not None) and a ``swarm`` entry take part, unless ``ignore``
    names their ``swarm``; an entry of the wrong shape is an ``unknown`` finding of ``swarm`` (``scope``
    ``component``) with the reason. The findings are those of :func:`swarm_report.swarm_findings`;
    ``severity`` overrides both rules' defaults. ``checks`` (host -> components, as in :func:`audit`)
    gets ``swarm`` for each host with docker. ``rows``: host -> report (None: its facts have no swarm
    state) for every host with facts, when any host has docker; else empty.
    """
    groups = groups or {}
    if not isinstance(ignore, IgnoreRules):
        ignore = IgnoreRules(ignore)
    checks = checks if checks is not None else {}
    reports = {}
    rows = {}
    findings = []
    for host in hosts:
        if facts.get(host) is None:
            continue
        if host not in swarm:
            rows[host] = None
            continue
        if ignore and ignore.ignored(host, SWARM):
            continue
        report, why = swarm_report.check_report(swarm[host])
        if why:
            rows[host] = dict(swarm_report.empty('unknown'), error=why)
            checks.setdefault(host, []).append(SWARM)
            findings.append({
                'host': host, 'component': SWARM, 'expected': None, 'found': None, 'kind': 'unknown',
                'severity': unknown_severity, 'group': groups.get(host, UNGROUPED), 'scope': 'component',
                'message': 'swarm state unknown: %s' % why,
            })
            continue
        rows[host] = report
        if report['state'] != 'absent':
            reports[host] = report
            checks.setdefault(host, []).append(SWARM)
    if not reports and not findings:
        return [], {}
    grouped = dict((host, groups.get(host, UNGROUPED)) for host in reports)
    findings.extend(swarm_report.swarm_findings(hosts, reports, grouped, severity))
    return findings, rows


def swarm_lines(rows):
    """One readable line per host of the swarm rows (``stats['swarm']``)."""
    return ['%s: %s' % (host, swarm_report.line(report)) for host, report in rows.items()]


def summarize(hosts, findings, stats, fail_on='critical', unknown_hosts=()):
    """Counts for the reports and the decision whether the audit fails."""
    by_severity = dict((s, 0) for s in SEVERITIES)
    by_kind = dict((k, 0) for k in KINDS)
    hosts_with = set()
    for finding in findings:
        by_severity[finding['severity']] = by_severity.get(finding['severity'], 0) + 1
        by_kind[finding['kind']] = by_kind.get(finding['kind'], 0) + 1
        hosts_with.add(finding['host'])
    threshold = _RANK.get(fail_on, 99)
    failing = sum(1 for f in findings if _RANK.get(f['severity'], 0) >= threshold)
    components = set()
    for comps in stats['checks'].values():
        components.update(comps)
    return {
        'hosts': len(hosts),
        'hosts_with_findings': len(hosts_with),
        'hosts_unknown': len(unknown_hosts),
        'unknown_hosts': sorted(unknown_hosts),
        'components': sorted(components),
        'checks': sum(len(c) for c in stats['checks'].values()),
        'findings': len(findings),
        'by_severity': by_severity,
        'by_kind': by_kind,
        'fail_on': fail_on,
        'failing_findings': failing,
        'failed': failing > 0,
    }


def collapse_unknown(findings):
    """One row per host without facts instead of one per component (the JSON report keeps all)."""
    rows = []
    seen = {}
    for finding in findings:
        if finding['kind'] != 'unknown' or finding.get('scope') == 'component':
            rows.append(finding)
            continue
        row = seen.get(finding['host'])
        if row is None:
            row = dict(finding, component='*', expected=None, count=0)
            seen[finding['host']] = row
            rows.append(row)
        row['count'] += 1
    return rows


def summary_text(summary, findings, limit=20, stats=None):
    """The readable lines that the task prints: a headline, the first findings and, when a host has
    docker, the swarm state of the first hosts (``stats['swarm']``), ``limit`` of each."""
    head = 'drift audit: %d hosts, %d checks, %d findings (%s)' % (
        summary['hosts'], summary['checks'], summary['findings'],
        ', '.join('%d %s' % (n, s) for s, n in summary['by_severity'].items() if n) or 'none')
    if summary['hosts_unknown']:
        head += ', %d hosts without facts' % summary['hosts_unknown']
    head += '; fail_on=%s: %s' % (summary['fail_on'], 'FAILED' if summary['failed'] else 'passed')
    lines = [head]
    lines.extend('note: %s' % note for note in summary.get('notes') or ())
    rows = collapse_unknown(findings)
    for row in rows[:limit]:
        if row['kind'] == 'unknown' and 'count' in row:
            lines.append('%s %s [unknown]: no facts for %d components: %s' % (
                row['severity'].upper(), row['host'], row['count'], row.get('message', '')))
        elif row['kind'] == 'unknown':
            lines.append('%s %s/%s [unknown]: %s' % (
                row['severity'].upper(), row['host'], row['component'], row.get('message', '')))
        else:
            lines.append('%s %s/%s [%s]: expected %s, found %s' % (
                row['severity'].upper(), row['host'], row['component'], row['kind'],
                _display(row['expected']), _display(row['found'])))
    if len(rows) > limit:
        lines.append('... %d more in the reports' % (len(rows) - limit))
    swarm_rows = (stats or {}).get('swarm') or {}
    if swarm_rows:
        every = swarm_lines(swarm_rows)
        lines.append('swarm state of %d hosts:' % len(every))
        lines.extend('  %s' % text for text in every[:limit])
        if len(every) > limit:
            lines.append('  ... %d more in the reports' % (len(every) - limit))
    return [_escape_unsafe(line, _UNPRINTABLE_LINE) for line in lines]


# ---------------------------------------------------------------- text output

# In one line of text (task output) every control character is shown escaped.
_UNPRINTABLE_LINE = re.compile('[\x00-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff%s]' % INVISIBLE_CLASS)


def _escape_char(match):
    code = ord(match.group(0))
    return '\\x%02x' % code if code < 0x100 else '\\u%04x' % code


def _escape_unsafe(text, pattern):
    """Show characters that would make a line unreadable as visible escapes (``\\x1b``)."""
    return pattern.sub(_escape_char, text)
