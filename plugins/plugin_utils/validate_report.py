# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side code of the acceptance playbook (playbooks/validate.yml).

Parsers of the measuring tools' output (iperf3 ``-J``, perftest ``--report_gbits``, nccl-tests) and
renderers of the validate report: JSON, JUnit XML, Markdown with the pair matrix, and the
node_exporter textfile metrics each node keeps. Pure functions, no I/O.

The report is one dict built by the playbook: ``generated_at`` (ISO 8601 UTC), ``ok``, ``nodes``
(ordered host names), ``checks`` (``{name, node, status: passed|failed|skipped, message}``, ``node``
is ``fleet`` for a check of the whole cluster), ``matrix`` (the final
:func:`fabric_matrix.judge`/``apply_retest`` verdict of the bandwidth matrix, or None), ``mtu``
(the verdict of the MTU path check, same shape) and ``tool`` (what measured the matrix).

The drift audit has a report writer of its own (module_utils/drift.py); this one is kept free of
Ansible so both can move into one shared writer.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import math
import re

CHECK_STATUSES = ('passed', 'failed', 'skipped')
_XML_BAD = re.compile(u'[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ufffe\uffff]')


class ReportInputError(ValueError):
    """The input is not what the renderer or parser accepts; the message says what is."""


# --------------------------------------------------------------------------- parsers

def iperf3_gbps(output):
    """``{'gbps': float or None, 'error': str or None}`` from the text (or dict) of ``iperf3 -J``.

    The figure is the receiver's (``end.sum_received``): what arrived, not what was sent; for UDP
    runs (no ``sum_received``) ``end.sum``. iperf3 writes its own failures into the JSON as
    ``error``; text that is not iperf3's JSON is an error, never a figure.
    """
    data = output
    if not isinstance(output, dict):
        text = output if isinstance(output, str) else ''
        if not text.strip():
            return {'gbps': None, 'error': 'iperf3 printed nothing'}
        try:
            data = json.loads(text)
        except ValueError:
            return {'gbps': None, 'error': 'iperf3 output is not JSON: %s' % _short(text)}
    if not isinstance(data, dict):
        return {'gbps': None, 'error': 'iperf3 output is not a JSON object'}
    if data.get('error'):
        return {'gbps': None, 'error': 'iperf3: %s' % _short(str(data['error']))}
    end = data.get('end') if isinstance(data.get('end'), dict) else {}
    summary = end.get('sum_received') or end.get('sum')
    bps = summary.get('bits_per_second') if isinstance(summary, dict) else None
    if isinstance(bps, bool) or not isinstance(bps, (int, float)) or math.isnan(bps) or bps < 0:
        return {'gbps': None, 'error': 'iperf3 reported no received bandwidth'}
    return {'gbps': round(bps / 1e9, 3), 'error': None}


_PERFTEST_ROW = re.compile(r'^\s*(\d+)\s+(\d+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s*$')


def perftest_gbps(output):
    """``{'gbps', 'error'}`` from ``ib_write_bw --report_gbits`` output: the average bandwidth column
    of the result row (``#bytes #iterations BW peak BW average MsgRate``)."""
    text = output if isinstance(output, str) else ''
    if 'Gb/sec' not in text:
        return {'gbps': None, 'error': 'no --report_gbits result in the output: %s' % _short(text)}
    rows = [m for m in (_PERFTEST_ROW.match(line) for line in text.splitlines()) if m]
    if not rows:
        return {'gbps': None, 'error': 'no result row in the output: %s' % _short(text)}
    return {'gbps': float(rows[-1].group(4)), 'error': None}


_NCCL_AVG = re.compile(r'^#\s*Avg bus bandwidth\s*:\s*([0-9.]+)', re.M)


def nccl_busbw(output):
    """``{'gbytes', 'error'}`` from nccl-tests output: its ``# Avg bus bandwidth`` line (GB/s), or
    the error when the run reports wrong results (``#wrong`` column above 0)."""
    text = output if isinstance(output, str) else ''
    match = _NCCL_AVG.search(text)
    if not match:
        return {'gbytes': None, 'error': 'no "# Avg bus bandwidth" line: %s' % _short(text)}
    wrong = re.search(r'^#\s*Out of bounds values\s*:\s*(\d+)\s*(\w+)', text, re.M)
    if wrong and int(wrong.group(1)) > 0:
        return {'gbytes': None, 'error': 'nccl-tests: %s out of bounds values' % wrong.group(1)}
    return {'gbytes': float(match.group(1)), 'error': None}


def _short(text, limit=300):
    text = ' '.join(str(text).split())
    return text if len(text) <= limit else text[:limit] + '...'


# --------------------------------------------------------------------------- renderers

def _check_report(report):
    if not isinstance(report, dict) or not isinstance(report.get('checks'), list) \
            or not isinstance(report.get('nodes'), list):
        raise ReportInputError('report must be a dict with a list of nodes and a list of checks')
    for check in report['checks']:
        if not isinstance(check, dict) or check.get('status') not in CHECK_STATUSES \
                or not check.get('name') or not check.get('node'):
            raise ReportInputError('check %r must have a name, a node and a status in %s'
                                   % (check, ', '.join(CHECK_STATUSES)))
    return report


def render_json(report):
    """The report as sorted, indented JSON text."""
    return json.dumps(_check_report(report), indent=2, sort_keys=True) + '\n'


def _xml(value):
    text = _XML_BAD.sub(u'\ufffd', u'%s' % (value,))
    return (text.replace('&', '&amp;').replace('<', '&lt;').replace('>', '&gt;')
            .replace('"', '&quot;'))


def render_junit(report, suite_name='gpucluster.validate'):
    """JUnit XML: one ``<testsuite>`` per node (and ``fleet``), one ``<testcase>`` per check."""
    report = _check_report(report)
    suites = []
    for check in report['checks']:
        if check['node'] not in suites:
            suites.append(check['node'])
    checks = report['checks']
    parts = ['<?xml version="1.0" encoding="UTF-8"?>\n',
             '<testsuites name="%s" tests="%d" failures="%d" errors="0" skipped="%d">\n' % (
                 _xml(suite_name), len(checks), sum(c['status'] == 'failed' for c in checks),
                 sum(c['status'] == 'skipped' for c in checks))]
    for suite in suites:
        mine = [c for c in checks if c['node'] == suite]
        parts.append('  <testsuite name="%s" tests="%d" failures="%d" errors="0" skipped="%d">\n' % (
            _xml('%s.%s' % (suite_name, suite)), len(mine),
            sum(c['status'] == 'failed' for c in mine), sum(c['status'] == 'skipped' for c in mine)))
        for check in mine:
            parts.append('    <testcase classname="%s" name="%s"' % (
                _xml('%s.%s' % (suite_name, suite)), _xml(check['name'])))
            message = check.get('message') or ''
            if check['status'] == 'passed':
                parts.append('>\n      <system-out>%s</system-out>\n    </testcase>\n' % _xml(message)
                             if message else '/>\n')
            elif check['status'] == 'skipped':
                parts.append('>\n      <skipped message="%s"/>\n    </testcase>\n' % _xml(message))
            else:
                parts.append('>\n      <failure message="%s">%s</failure>\n    </testcase>\n' % (
                    _xml(message.split('\n')[0][:500]), _xml(message)))
        parts.append('  </testsuite>\n')
    parts.append('</testsuites>\n')
    return ''.join(parts)


def _md(value):
    text = u'%s' % ('' if value is None else value,)
    return ' '.join(text.replace('|', '\\|').split())


def _gbps(value):
    return '-' if value is None else '%.2f' % value


def render_matrix(verdict, unit='Gb/s'):
    """Markdown table of a pair verdict: row = sender, column = receiver, figures in ``unit``."""
    nodes = verdict['nodes_order']
    legs = {}
    for pair in verdict['pairs']:
        legs[(pair['a'], pair['b'])] = pair['a_to_b_gbps']
        legs[(pair['b'], pair['a'])] = pair['b_to_a_gbps']
    status = dict(((p['a'], p['b']), p['status']) for p in verdict['pairs'])
    status.update(dict(((p['b'], p['a']), p['status']) for p in verdict['pairs']))
    lines = ['| from \\ to (%s) | %s |' % (unit, ' | '.join(_md(n) for n in nodes)),
             '|---|%s' % ('---|' * len(nodes))]
    for src in nodes:
        cells = []
        for dst in nodes:
            if src == dst:
                cells.append('')
                continue
            mark = '' if status.get((src, dst)) == 'ok' else ' **%s**' % status.get((src, dst), '?')
            cells.append(_gbps(legs.get((src, dst))) + mark)
        lines.append('| %s | %s |' % (_md(src), ' | '.join(cells)))
    return '\n'.join(lines)


def _verdict_lines(verdict, what):
    lines = ['- reference (median of the nodes\' best pairs): %s, threshold %s (fraction %s)%s' % (
        _gbps(verdict['reference_gbps']), _gbps(verdict['threshold_gbps']), verdict['fraction'],
        '' if verdict.get('floor_gbps') is None else ', floor %s' % _gbps(verdict['floor_gbps']))]
    lines.append('- bad nodes: %s' % (', '.join(verdict['bad_nodes']) or 'none'))
    links = ', '.join('%s-%s' % tuple(link) for link in verdict['bad_links'])
    lines.append('- bad links: %s' % (links or 'none'))
    for item in verdict.get('not_reproduced') or []:
        lines.append('- not reproduced on retest: %s' % (
            item['node'] if 'node' in item else '%s-%s' % tuple(item['link'])))
    for pair in verdict['pairs']:
        if pair['status'] != 'ok':
            lines.append('- %s %s-%s: %s' % (what, pair['a'], pair['b'], _md(pair['reason'])))
    return lines


def render_markdown(report, title='Cluster acceptance (validate)'):
    """Markdown: verdict, the checks that did not pass, the bandwidth matrix, every check."""
    report = _check_report(report)
    checks = report['checks']
    failed = [c for c in checks if c['status'] == 'failed']
    lines = ['# %s' % title, '',
             '**%s** on %d nodes at %s: %d checks, %d failed, %d skipped.' % (
                 'PASSED' if report.get('ok') else 'FAILED', len(report['nodes']),
                 report.get('generated_at', ''), len(checks), len(failed),
                 sum(c['status'] == 'skipped' for c in checks)), '']
    if failed:
        lines += ['## Failed', '']
        lines += ['- %s on %s: %s' % (_md(c['name']), _md(c['node']), _md(c.get('message'))) for c in failed]
        lines.append('')
    matrix = report.get('matrix')
    if matrix:
        lines += ['## Pair bandwidth (%s, worse direction judged)' % _md(report.get('tool', 'iperf3')), '',
                  render_matrix(matrix), '']
        lines += _verdict_lines(matrix, 'pair') + ['']
    mtu = report.get('mtu')
    if mtu:
        lines += ['## MTU path check', '']
        lines.append('- nodes that cannot pass a full-size frame to any peer: %s' % (
            ', '.join(mtu['bad_nodes']) or 'none'))
        lines += ['- %s-%s: %s' % (p['a'], p['b'], _md(p['reason'])) for p in mtu['pairs'] if p['status'] != 'ok']
        lines.append('')
    lines += ['## Checks', '', '| node | check | status | message |', '|---|---|---|---|']
    lines += ['| %s | %s | %s | %s |' % (_md(c['node']), _md(c['name']), c['status'], _md(c.get('message')))
              for c in checks]
    return '\n'.join(lines) + '\n'


_PROM_HELP = (
    ('gpucluster_validate_ok', 'Result of the last acceptance run on this node: 1 passed, 0 failed.'),
    ('gpucluster_validate_last_run_timestamp_seconds', 'Unix time of the last acceptance run.'),
    ('gpucluster_validate_checks_failed', 'Checks of this node (and of the fleet) that failed in the last run.'),
    ('gpucluster_validate_pair_bandwidth_gbps', 'Pair bandwidth from this node to a peer, Gb/s, last run.'),
    ('gpucluster_validate_pair_ok', 'Verdict on the pair of this node and a peer: 1 ok, 0 low or failed.'),
)


def _label(value):
    return str(value).replace('\\', '\\\\').replace('\n', '\\n').replace('"', '\\"')


def render_prom(report, node, timestamp):
    """node_exporter textfile metrics for ``node`` (same conventions as gpucluster_health.prom)."""
    report = _check_report(report)
    if node not in report['nodes']:
        raise ReportInputError('node %r is not in the report (nodes: %s)' % (node, ', '.join(report['nodes'])))
    samples = dict((entry[0], []) for entry in _PROM_HELP)
    mine = [c for c in report['checks'] if c['node'] in (node, 'fleet')]
    node_ok = not any(c['status'] == 'failed' for c in mine if c['node'] == node)
    matrix = report.get('matrix')
    if matrix:
        node_ok = node_ok and node not in matrix['bad_nodes'] and not any(node in l for l in matrix['bad_links'])
    samples['gpucluster_validate_ok'].append(('', '1' if (report.get('ok') and node_ok) else '0'))
    samples['gpucluster_validate_last_run_timestamp_seconds'].append(('', repr(float(timestamp))))
    samples['gpucluster_validate_checks_failed'].append(('', str(sum(c['status'] == 'failed' for c in mine))))
    tool = report.get('tool', 'iperf3')
    for pair in (matrix or {}).get('pairs', []):
        if node not in (pair['a'], pair['b']):
            continue
        peer = pair['b'] if pair['a'] == node else pair['a']
        value = pair['a_to_b_gbps'] if pair['a'] == node else pair['b_to_a_gbps']
        labels = '{peer="%s",tool="%s"}' % (_label(peer), _label(tool))
        if value is not None:
            samples['gpucluster_validate_pair_bandwidth_gbps'].append((labels, repr(float(value))))
        bad = pair['status'] != 'ok' and (
            pair['a'] in matrix['bad_nodes'] or pair['b'] in matrix['bad_nodes']
            or [pair['a'], pair['b']] in matrix['bad_links'])
        samples['gpucluster_validate_pair_ok'].append((labels, '0' if bad else '1'))
    lines = []
    for name, text in _PROM_HELP:
        if samples[name]:
            lines += ['# HELP %s %s' % (name, text), '# TYPE %s gauge' % name]
            lines += ['%s%s %s' % (name, labels, value) for labels, value in samples[name]]
    return '\n'.join(lines) + '\n'
