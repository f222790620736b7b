# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of the drift audit: its reports (JSON, JUnit XML, Markdown) built on the
collection's one report writer (plugin_utils/reports.py) from what module_utils/drift.py found.

Runs in the action plugin (and the benchmark) on the controller only; nothing here reaches a node.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.gpucluster.core.plugins.module_utils import drift
from ansible_collections.gpucluster.core.plugins.module_utils.text_bounds import quote
from ansible_collections.gpucluster.core.plugins.plugin_utils import reports

# The action plugin catches this when reports cannot be written.
ReportError = reports.ReportError
REPORT_FILES = {'json': 'drift.json', 'junit': 'drift.junit.xml', 'markdown': 'drift.md'}
TITLE = 'GPU stack drift audit'


def _display(value):
    return 'absent' if value is None else str(value)


def build_report(hosts, summary, findings, stats, baselines_used=None, generated_at=None, max_rows=500):
    """The drift audit as a :class:`reports.Report`.

    JSON: summary, findings, group distribution (and the baselines used). JUnit: one suite per
    host, one case per checked component, a failure per finding and an error for the components of
    a host without usable facts (the check could not run: it neither passed nor failed).
    Markdown: the headline, notes, hosts without facts and one row per finding (one per host
    without facts), at most ``max_rows``; when a host has docker, a table of every host's swarm state
    (``stats['swarm']``, also in the JSON under ``swarm``), at most ``max_rows`` too.
    """
    document = {
        'generated_at': generated_at,
        'summary': summary,
        'findings': findings,
        'groups': stats.get('distribution') or {},
        'group_hosts': stats.get('members') or {},
    }
    if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 0:
        # A negative limit would slice from the end (rows[:-3]).
        raise ValueError('max_rows must be a whole number of rows of 0 or more, got %s' % (quote(max_rows),))
    swarm_rows = stats.get('swarm') or {}
    if swarm_rows:
        document['swarm'] = swarm_rows
    if baselines_used is not None:
        document['baseline'] = baselines_used
    report = reports.Report(TITLE, 'FAILED' if summary['failed'] else 'passed', document,
                            'gpucluster.drift_audit', json_indent=1)

    by_cell = dict(((f['host'], f['component']), f) for f in findings)
    checks = stats.get('checks') or {}
    for host in hosts:
        cases = report.suite(host, 'drift.' + host)
        for component in checks.get(host, ()):
            finding = by_cell.get((host, component))
            if finding is None:
                cases.append(reports.case(component, 'passed'))
            elif finding['kind'] == 'unknown':
                pin = finding['expected']
                cases.append(reports.case(
                    component, 'error', 'unknown: %s' % finding.get('message', 'no facts'),
                    'host: %s\ncomponent: %s\npin: %s\nkind: unknown\nseverity: %s\nreason: %s' % (
                        host, component, 'none' if pin is None else pin, finding['severity'],
                        finding.get('message', '')),
                    finding['severity'] + ':unknown'))
            else:
                cases.append(reports.case(
                    component, 'failed', '%s drift: expected %s, found %s' % (
                        finding['kind'], _display(finding['expected']), _display(finding['found'])),
                    'host: %s\ncomponent: %s\nexpected: %s\nfound: %s\nkind: %s\nseverity: %s\n%s' % (
                        host, component, _display(finding['expected']), _display(finding['found']),
                        finding['kind'], finding['severity'], finding.get('message', '')),
                    finding['severity'] + ':' + finding['kind']))

    report.paragraph('%d hosts, %d host/component checks, %d findings (%s); fails on %s.' % (
        summary['hosts'], summary['checks'], summary['findings'],
        ', '.join('%d %s' % (n, s) for s, n in summary['by_severity'].items() if n) or 'none',
        summary['fail_on']))
    for note in summary.get('notes') or ():
        report.paragraph('Note: %s.' % reports.md_line(note))
    if summary['hosts_unknown']:
        shown = summary['unknown_hosts'][:20]
        more = summary['hosts_unknown'] - len(shown)
        # Host names as escaped text, never inside a code span (a backtick in a name would close it).
        report.paragraph('Hosts without facts (unreachable or not gathered): %s%s.' % (
            ', '.join(reports.md_line(h) for h in shown), ' and %d more' % more if more > 0 else ''))
    _findings_table(report, findings, max_rows)
    if swarm_rows:
        _swarm_table(report, swarm_rows, max_rows)
    return report


def _findings_table(report, findings, max_rows):
    rows = drift.collapse_unknown(findings)
    if not rows:
        report.paragraph('No drift: every host matches its pins and its group.')
        return
    table = []
    for row in rows[:max_rows]:
        if row['kind'] == 'unknown' and 'count' in row:
            component, expected = 'all %d checked' % row['count'], row.get('message')
        elif row['kind'] == 'unknown':
            component, expected = row['component'], row.get('message')
        else:
            component, expected = row['component'], _display(row['expected'])
        table.append([row['severity'], row['host'], component, expected, _display(row['found']), row['kind']])
    report.table(['severity', 'host', 'component', 'expected', 'found', 'kind'], table)
    if len(rows) > max_rows:
        report.paragraph('%d more rows are in drift.json.' % (len(rows) - max_rows))


def _swarm_table(report, swarm_rows, max_rows):
    """One row per host: its Docker Swarm state as stack_facts read it."""
    report.heading('Docker Swarm')
    table = []
    for host, row in list(swarm_rows.items())[:max_rows]:
        if row is None:
            table.append([host, 'not reported', '', '', '', '', '', 'its stack_facts predates the swarm state'])
            continue
        table.append([host, row['state'], row['role'], row['availability'], row['reachability'],
                      'yes' if row['leader'] else '', row['cluster_id'][:12], row['error']])
    report.table(['host', 'state', 'role', 'availability', 'reachability', 'leader', 'cluster', 'error'], table)
    if len(swarm_rows) > max_rows:
        report.paragraph('%d more hosts are in drift.json (swarm).' % (len(swarm_rows) - max_rows))


def render_markdown(summary, findings, stats, max_rows=500):
    """The Markdown report alone (hosts are only needed for JUnit)."""
    return build_report([], summary, findings, stats, max_rows=max_rows).render_markdown()


def write_reports(report_dir, hosts, summary, findings, stats, formats=reports.FORMATS,
                  baselines_used=None, generated_at=None, max_rows=500):
    """Write the chosen reports (drift.json, drift.junit.xml, drift.md) into ``report_dir``;
    returns format -> path, or raises :class:`ReportError` naming each file that failed."""
    report = build_report(hosts, summary, findings, stats, baselines_used, generated_at, max_rows)
    return report.write(report_dir, REPORT_FILES, formats, prefix='.drift-')
