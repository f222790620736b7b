# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Drift computation and report writers for the GPU stack audit.

Pure functions over plain dicts (no Ansible imports): the action plugin ``drift_audit`` and the
benchmark call them; the unit tests drive them with tables.

A finding is ``{host, component, expected, found, kind, severity}`` (plus ``group`` and a
readable ``message``); ``kind`` is one of:

``baseline``  the host's version does not match the declared pin;
``missing``   the component is absent where a pin or the group majority expects it;
``majority``  no pin, and the host differs from the version most hosts of its group have,
              or the group is split evenly (a tie has no majority: every side is reported);
``unknown``   the host has no facts (unreachable, gathering failed, stale): never a pass.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import fnmatch
import json
import os
import tempfile
from xml.sax.saxutils import escape, quoteattr

KINDS = ('baseline', 'majority', 'missing', 'unknown')
SEVERITIES = ('critical', 'warning', 'info')
_RANK = {'critical': 3, 'warning': 2, 'info': 1, 'never': 99}

# Components that must be equal inside a group even without a pin.
DEFAULT_CONSISTENT = (
    'kernel', 'nvidia_driver', 'nvidia_driver_loaded', 'cuda_toolkit', 'nccl', 'cudnn',
    'ofed', 'rdma_core', 'hca_firmware', 'gpu_vbios', 'slurm', 'nvidia_container_toolkit',
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
    'kubelet': 'warning',
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
}
# Components whose pin only applies where the component is installed (the fabric manager is
# needed on NVSwitch systems only; PCIe servers have none and are not missing anything).
DEFAULT_BASELINE_IF_PRESENT = ('nvidia_fabricmanager',)

UNGROUPED = '(ungrouped)'
# Characters that end a version component: '12.4' matches '12.4.1' and '2.21.5' matches
# '2.21.5-1+cuda12.4', but '12.4' never matches '12.40'.
_SEPARATORS = '.-+~:_ '


def pin_matches(pin, found):
    """True when ``found`` equals ``pin`` or starts with it at a version separator."""
    if found is None or pin is None:
        return False
    pin = str(pin).strip()
    found = str(found)
    if found == pin:
        return True
    if not pin or not found.startswith(pin):
        return False
    return pin[-1] in _SEPARATORS or found[len(pin)] in _SEPARATORS


def _display(value):
    return 'absent' if value is None else str(value)


class IgnoreRules(object):
    """``component`` or ``host:component`` entries, shell globs on either side."""

    def __init__(self, entries):
        self._components = set()
        self._patterns = []
        for entry in entries or ():
            entry = str(entry).strip()
            if not entry:
                continue
            if ':' in entry:
                host, component = entry.rsplit(':', 1)
                self._patterns.append((host, component))
            elif any(ch in entry for ch in '*?['):
                self._patterns.append(('*', entry))
            else:
                self._components.add(entry)

    def ignored(self, host, component):
        if component in self._components:
            return True
        for host_pat, comp_pat in self._patterns:
            if fnmatch.fnmatchcase(component, comp_pat) and fnmatch.fnmatchcase(host, host_pat):
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
          raw=None, baseline_if_present=DEFAULT_BASELINE_IF_PRESENT):
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

    Returns ``(findings, stats)``: findings sorted by severity, host, component; stats with
    the per-group value distribution and the number of host x component checks.
    """
    baselines = baselines or {}
    severity = severity or {}
    groups = groups or {}
    raw = raw or {}
    unknown_reasons = unknown_reasons or {}
    if not isinstance(ignore, IgnoreRules):
        ignore = IgnoreRules(ignore)
    consistent = tuple(consistent or ())
    if_present = frozenset(baseline_if_present or ())
    findings = []
    # group -> component -> value -> [hosts] for hosts that passed (or had no) pin check
    distribution = {}
    checks = {}
    empty = {}

    for host in hosts:
        group = groups.get(host, UNGROUPED)
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
        group_values = distribution.get(group)
        if group_values is None:
            group_values = distribution[group] = {}
        for component in components:
            found = host_facts.get(component)
            pin = pins.get(component)
            if pin is not None and not (found is None and component in if_present):
                pin = str(pin).strip()
                if not (pin_matches(pin, found) or pin_matches(pin, host_raw.get(component))):
                    kind = 'missing' if found is None else 'baseline'
                    findings.append({
                        'host': host, 'component': component, 'expected': pin,
                        'found': found, 'kind': kind, 'severity': _severity_of(component, severity),
                        'group': group,
                        'message': '%s %s, pinned %s' % (component, _display(found), pin),
                    })
                    continue
            if component in consistent:
                group_values.setdefault(component, {}).setdefault(found, []).append(host)

    for group in distribution:
        for component, by_value in distribution[group].items():
            if len(by_value) < 2:
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

    findings.sort(key=lambda f: (-_RANK.get(f['severity'], 0), f['host'], f['component']))
    stats = {
        'checks': checks,
        'distribution': dict(
            (group, dict((component, dict((_display(v), len(m)) for v, m in values.items()))
                         for component, values in comps.items()))
            for group, comps in distribution.items()),
    }
    return findings, stats


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


def _collapse_unknown(findings):
    """One row per host without facts instead of one per component (reports keep all)."""
    rows = []
    seen = {}
    for finding in findings:
        if finding['kind'] != 'unknown':
            rows.append(finding)
            continue
        row = seen.get(finding['host'])
        if row is None:
            row = dict(finding, component='*', expected=None, count=0)
            seen[finding['host']] = row
            rows.append(row)
        row['count'] += 1
    return rows


def summary_text(summary, findings, limit=20):
    """The readable lines that the task prints: a headline and the first findings."""
    head = 'drift audit: %d hosts, %d checks, %d findings (%s)' % (
        summary['hosts'], summary['checks'], summary['findings'],
        ', '.join('%d %s' % (n, s) for s, n in summary['by_severity'].items() if n) or 'none')
    if summary['hosts_unknown']:
        head += ', %d hosts without facts' % summary['hosts_unknown']
    head += '; fail_on=%s: %s' % (summary['fail_on'], 'FAILED' if summary['failed'] else 'passed')
    lines = [head]
    lines.extend('note: %s' % note for note in summary.get('notes') or ())
    rows = _collapse_unknown(findings)
    for row in rows[:limit]:
        if row['kind'] == 'unknown':
            lines.append('%s %s [unknown]: no facts for %d components: %s' % (
                row['severity'].upper(), row['host'], row['count'], row.get('message', '')))
        else:
            lines.append('%s %s/%s [%s]: expected %s, found %s' % (
                row['severity'].upper(), row['host'], row['component'], row['kind'],
                _display(row['expected']), _display(row['found'])))
    if len(rows) > limit:
        lines.append('... %d more in the reports' % (len(rows) - limit))
    return lines


# ---------------------------------------------------------------- report writers

def _write_atomic(path, text):
    directory = os.path.dirname(path) or '.'
    handle, tmp = tempfile.mkstemp(dir=directory, prefix='.drift-')
    try:
        with os.fdopen(handle, 'w') as out:
            out.write(text)
        os.chmod(tmp, 0o644)
        os.rename(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def render_json(summary, findings, stats, baselines_used=None, generated_at=None):
    document = {
        'generated_at': generated_at,
        'summary': summary,
        'findings': findings,
        'groups': stats['distribution'],
    }
    if baselines_used is not None:
        document['baseline'] = baselines_used
    return json.dumps(document, indent=1, sort_keys=True) + '\n'


def render_junit(hosts, findings, stats, suite_name='gpucluster.drift_audit'):
    """JUnit XML: one <testsuite> per host, one <testcase> per checked component, a <failure>
    per finding. Jenkins, GitLab, GitHub test reporters and Azure accept this layout."""
    by_cell = {}
    for finding in findings:
        by_cell[(finding['host'], finding['component'])] = finding
    checks = stats['checks']
    total = sum(len(checks.get(h, ())) for h in hosts)
    parts = ['<?xml version="1.0" encoding="UTF-8"?>\n',
             '<testsuites name=%s tests="%d" failures="%d" errors="0" time="0">\n' % (
                 quoteattr(suite_name), total, len(by_cell))]
    for host in hosts:
        components = checks.get(host, ())
        failed = [c for c in components if (host, c) in by_cell]
        parts.append('  <testsuite name=%s tests="%d" failures="%d" errors="0" skipped="0" time="0">\n'
                     % (quoteattr(host), len(components), len(failed)))
        classname = quoteattr('drift.' + host)
        for component in components:
            finding = by_cell.get((host, component))
            if finding is None:
                parts.append('    <testcase classname=%s name=%s time="0"/>\n'
                             % (classname, quoteattr(component)))
                continue
            message = '%s drift: expected %s, found %s' % (
                finding['kind'], _display(finding['expected']), _display(finding['found']))
            body = 'host: %s\ncomponent: %s\nexpected: %s\nfound: %s\nkind: %s\nseverity: %s\n%s' % (
                host, component, _display(finding['expected']), _display(finding['found']),
                finding['kind'], finding['severity'], finding.get('message', ''))
            parts.append('    <testcase classname=%s name=%s time="0">\n'
                         '      <failure message=%s type=%s>%s</failure>\n'
                         '    </testcase>\n' % (
                             classname, quoteattr(component), quoteattr(message),
                             quoteattr(finding['severity'] + ':' + finding['kind']), escape(body)))
        parts.append('  </testsuite>\n')
    parts.append('</testsuites>\n')
    return ''.join(parts)


def _md_cell(value):
    text = _display(value)
    return text.replace('\\', '\\\\').replace('|', '\\|').replace('\n', ' ')


def render_markdown(summary, findings, stats, max_rows=500, title='GPU stack drift audit'):
    status = 'FAILED' if summary['failed'] else 'passed'
    lines = ['# %s: %s' % (title, status), '']
    lines.append('%d hosts, %d host/component checks, %d findings (%s); fails on %s.' % (
        summary['hosts'], summary['checks'], summary['findings'],
        ', '.join('%d %s' % (n, s) for s, n in summary['by_severity'].items() if n) or 'none',
        summary['fail_on']))
    for note in summary.get('notes') or ():
        lines.append('')
        lines.append('Note: %s.' % note)
    if summary['hosts_unknown']:
        shown = summary['unknown_hosts'][:20]
        more = summary['hosts_unknown'] - len(shown)
        lines.append('')
        lines.append('Hosts without facts (unreachable or not gathered): %s%s.' % (
            ', '.join('`%s`' % h for h in shown), ' and %d more' % more if more > 0 else ''))
    lines.append('')
    rows = _collapse_unknown(findings)
    if rows:
        lines.append('| severity | host | component | expected | found | kind |')
        lines.append('|---|---|---|---|---|---|')
        for row in rows[:max_rows]:
            if row['kind'] == 'unknown':
                component = 'all %d checked' % row['count']
                expected = row.get('message')
            else:
                component, expected = row['component'], row['expected']
            lines.append('| %s | %s | %s | %s | %s | %s |' % (
                row['severity'], _md_cell(row['host']), _md_cell(component),
                _md_cell(expected), _md_cell(row['found']), row['kind']))
        if len(rows) > max_rows:
            lines.append('')
            lines.append('%d more rows are in drift.json.' % (len(rows) - max_rows))
    else:
        lines.append('No drift: every host matches its pins and its group.')
    return '\n'.join(lines) + '\n'


def write_reports(report_dir, hosts, summary, findings, stats, formats=('json', 'junit', 'markdown'),
                  baselines_used=None, generated_at=None, max_rows=500):
    """Write the chosen reports into ``report_dir`` (created if needed); returns their paths."""
    if not os.path.isdir(report_dir):
        os.makedirs(report_dir)
    written = {}
    if 'json' in formats:
        path = os.path.join(report_dir, 'drift.json')
        _write_atomic(path, render_json(summary, findings, stats, baselines_used, generated_at))
        written['json'] = path
    if 'junit' in formats:
        path = os.path.join(report_dir, 'drift.junit.xml')
        _write_atomic(path, render_junit(hosts, findings, stats))
        written['junit'] = path
    if 'markdown' in formats:
        path = os.path.join(report_dir, 'drift.md')
        _write_atomic(path, render_markdown(summary, findings, stats, max_rows))
        written['markdown'] = path
    return written
