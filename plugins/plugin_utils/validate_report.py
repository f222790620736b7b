# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side code of the acceptance playbook (playbooks/validate.yml).

Parsers of the measuring tools' output (iperf3 ``-J`` here; perftest and nccl-tests through
module_utils/perftest.py and module_utils/nccl_tests.py) and
the validate report built on the collection's one report writer (plugins/plugin_utils/reports.py,
shared with the drift audit): JSON, JUnit XML, Markdown with the pair matrix; and the node_exporter
textfile metrics each node keeps. Pure functions, no I/O (the playbook writes the files).

The report is one dict built by the playbook: ``generated_at`` (ISO 8601 UTC), ``ok``, ``nodes``
(ordered host names), ``checks`` (``{name, node, status: passed|failed|skipped, message}``, ``node``
is ``fleet`` for a check of the whole cluster), ``matrix`` (the final
:func:`fabric_matrix.judge`/``apply_retest`` verdict of the bandwidth matrix, or None), ``mtu``
(the verdict of the MTU path check, same shape), ``tool`` (what measured the matrix: the management
network's TCP matrix) and ``rails`` (the RDMA fabric: one entry per NCCL rail, ``{rail, hcas, link_layer,
line_rate_gbps, floor_gbps, tool, verdict}`` with ``verdict`` the rail's final matrix verdict, or None
when the rail could not be judged).
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import math

from ansible_collections.gpucluster.core.plugins.module_utils import fabric_matrix, nccl_tests, perftest
from ansible_collections.gpucluster.core.plugins.module_utils.scheduler import make_reason
from ansible_collections.gpucluster.core.plugins.module_utils.text_bounds import clip, quote
from ansible_collections.gpucluster.core.plugins.plugin_utils import reports

CHECK_STATUSES = ('passed', 'failed', 'skipped')


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
        except (ValueError, RecursionError):
            return {'gbps': None, 'error': 'iperf3 output is not JSON: %s' % _short(text)}
    if not isinstance(data, dict):
        return {'gbps': None, 'error': 'iperf3 output is not a JSON object'}
    if data.get('error'):
        return {'gbps': None, 'error': 'iperf3: %s' % _short(str(data['error']))}
    end = data.get('end') if isinstance(data.get('end'), dict) else {}
    summary = end.get('sum_received') or end.get('sum')
    bps = summary.get('bits_per_second') if isinstance(summary, dict) else None
    if isinstance(bps, bool) or not isinstance(bps, (int, float)) or not math.isfinite(bps) or bps < 0:
        return {'gbps': None, 'error': 'iperf3 reported no received bandwidth%s'
                % ('' if bps is None else ' (%s)' % _short(repr(bps), 40))}
    return {'gbps': round(bps / 1e9, 3), 'error': None}


def perftest_gbps(output):
    """One direction of a pair from ``ib_write_bw``/``ib_read_bw``/``ib_send_bw`` output:
    ``{gbps, error, cause, bytes, bidirectional, units}`` (module_utils/perftest.py measurement: the
    average of the largest message size in Gb/s, ``--report_gbits`` or MiB/s; errors quoted; cause
    ``port_taken`` when our server could not listen on its port)."""
    if output is not None and not isinstance(output, str):
        return {'gbps': None, 'error': 'perftest output must be text, got %s' % type(output).__name__, 'cause': None,
                'bytes': None, 'bidirectional': False, 'units': None}
    return perftest.measurement(output)


def nccl_busbw(output):
    """The figure of an nccl-tests run: ``{gbytes, size, avg_gbytes, error, hosts, ranks, wrong}``
    (module_utils/nccl_tests.py busbw): the bus bandwidth of the **largest** message size, never the
    ``# Avg bus bandwidth`` of all sizes (kept as ``avg_gbytes``, information only)."""
    if output is not None and not isinstance(output, str):
        return {'gbytes': None, 'size': None, 'avg_gbytes': None, 'hosts': [], 'ranks': 0, 'wrong': None,
                'error': 'nccl-tests output must be text, got %s' % type(output).__name__}
    return nccl_tests.busbw(output)


def _short(text, limit=300):
    """``text`` on one line (runs of white space made one space), cut to ``limit`` (text_bounds.clip)."""
    return clip(' '.join(clip(text, 4 * limit).split()), limit)


# --------------------------------------------------------------------------- renderers

MAX_DEPTH = 64


def _non_finite(value, path, depth=0):
    """The path of the first NaN or infinite number in ``value`` (a JSON document), else None."""
    if depth > MAX_DEPTH:
        return '%s (nested deeper than %d levels)' % (path, MAX_DEPTH)
    if isinstance(value, float) and not math.isfinite(value):
        return '%s is %r' % (path, value)
    if isinstance(value, dict):
        for key, item in value.items():
            found = _non_finite(item, '%s.%s' % (path, _short(key, 60)), depth + 1)
            if found:
                return found
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            found = _non_finite(item, '%s[%d]' % (path, index), depth + 1)
            if found:
                return found
    return None


def _check_report(report):
    if not isinstance(report, dict) or not isinstance(report.get('checks'), list) \
            or not isinstance(report.get('nodes'), list):
        raise ReportInputError('report must be a dict with a list of nodes and a list of checks')
    for check in report['checks']:
        if not isinstance(check, dict) or check.get('status') not in CHECK_STATUSES \
                or not check.get('name') or not check.get('node'):
            raise ReportInputError('check %s must have a name, a node and a status in %s'
                                   % (quote(check), ', '.join(CHECK_STATUSES)))
    # JSON has no NaN or Infinity (RFC 8259): a report holding one would be a validate.json its
    # readers refuse. Every figure is checked finite where it is parsed; this is the last guard.
    found = _non_finite(report, 'report')
    if found:
        raise ReportInputError('%s: every figure in the report must be a finite number' % found)
    return report


def _build(report, title='Cluster acceptance (validate)', suite_name='gpucluster.validate'):
    """The validate report as a :class:`reports.Report` (the collection's one report writer)."""
    report = _check_report(report)
    checks = report['checks']
    failed = [c for c in checks if c['status'] == 'failed']
    verdict = 'PASSED' if report.get('ok') else 'FAILED'
    out = reports.Report(title, verdict, report, suite_name, json_indent=2)
    suites = []
    for check in checks:
        if check['node'] not in suites:
            suites.append(check['node'])
    for suite in suites:
        cases = out.suite('%s.%s' % (suite_name, suite))
        for check in checks:
            if check['node'] != suite:
                continue
            message = check.get('message') or ''
            if check['status'] == 'passed':
                cases.append(reports.case(check['name'], 'passed', body=message or None))
            elif check['status'] == 'skipped':
                cases.append(reports.case(check['name'], 'skipped', message))
            else:
                cases.append(reports.case(check['name'], 'failed', message.split('\n')[0][:500], message))
    out.paragraph('**%s** on %d nodes at %s: %d checks, %d failed, %d skipped.' % (
        verdict, len(report['nodes']), reports.md_line(report.get('generated_at', '')), len(checks),
        len(failed), sum(c['status'] == 'skipped' for c in checks)))
    if failed:
        out.heading('Failed')
        out.bullets('%s on %s: %s' % (c['name'], c['node'], c.get('message')) for c in failed)
    matrix = report.get('matrix')
    if matrix:
        out.heading('Pair bandwidth (%s, worse direction judged)' % report.get('tool', 'iperf3'))
        headers, rows = matrix_table(matrix)
        out.table(headers, rows)
        out.bullets(_verdict_lines(matrix, 'pair'))
    for rail in _rails(report):
        verdict = rail.get('verdict')
        if not verdict:
            continue
        hcas = sorted(set(str(h) for h in (rail.get('hcas') or {}).values()))
        out.heading('RDMA rail %s (%s, %s): %s, both directions added' % (
            rail.get('rail'), ', '.join(hcas) or '?', rail.get('link_layer') or '?', rail.get('tool') or 'ib_write_bw -b'))
        headers, rows = matrix_table(verdict)
        out.table(headers, rows)
        out.bullets(['line rate %s Gb/s, floor %s Gb/s' % (_gbps(rail.get('line_rate_gbps')), _gbps(rail.get('floor_gbps')))]
                    + _verdict_lines(verdict, 'pair'))
    mtu = report.get('mtu')
    if mtu:
        out.heading('MTU path check')
        out.bullets(['nodes that cannot pass a full-size frame to any peer: %s' % (', '.join(mtu['bad_nodes']) or 'none')]
                    + (['verdict: %s' % mtu['fleet_reason']] if mtu.get('fleet_reason') else [])
                    + ['%s-%s: %s' % (p['a'], p['b'], p['reason']) for p in mtu['pairs'] if p['status'] != 'ok'])
    out.heading('Checks')
    out.table(['node', 'check', 'status', 'message'],
              [[c['node'], c['name'], c['status'], c.get('message')] for c in checks])
    return out


def _rails(report):
    rails = report.get('rails') or []
    if not isinstance(rails, list) or not all(isinstance(r, dict) for r in rails):
        raise ReportInputError('report rails must be a list of {rail, hcas, verdict} records')
    return rails


def _blamed(verdict):
    """Bad nodes and links of a verdict that blames (none when it withheld blame)."""
    if not verdict or verdict.get('fleet_verdict') in fabric_matrix.WITHHELD:
        return [], []
    return list(verdict.get('bad_nodes') or []), [list(link) for link in verdict.get('bad_links') or []]


def _no_constant(name):
    raise ReportInputError('the JSON report would contain %s, which JSON does not allow' % name)


def render_json(report):
    """The report as sorted, indented JSON text (strict JSON: never NaN or Infinity)."""
    text = _build(report).render_json()
    json.loads(text, parse_constant=_no_constant)
    return text


def render_junit(report):
    """JUnit XML: one ``<testsuite>`` per node (and ``fleet``), one ``<testcase>`` per check."""
    return _build(report).render_junit()


def _gbps(value):
    return '-' if value is None else '%.2f' % value


def matrix_table(verdict, unit='Gb/s'):
    """Headers and rows of a pair verdict's table: row = sender, column = receiver, figures in
    ``unit``, a pair that is not ok marked with its status."""
    nodes = verdict['nodes_order']
    legs = {}
    status = {}
    for pair in verdict['pairs']:
        legs[(pair['a'], pair['b'])] = pair['a_to_b_gbps']
        legs[(pair['b'], pair['a'])] = pair['b_to_a_gbps']
        status[(pair['a'], pair['b'])] = status[(pair['b'], pair['a'])] = pair['status']
    rows = []
    for src in nodes:
        cells = [src]
        for dst in nodes:
            if src == dst:
                cells.append('')
                continue
            mark = '' if status.get((src, dst)) == 'ok' else ' **%s**' % reports.md_text(status.get((src, dst), '?'))
            cells.append(reports.Markup(reports.md_text(_gbps(legs.get((src, dst)))) + mark))
        rows.append(cells)
    return ['from / to (%s)' % unit] + list(nodes), rows


def _verdict_lines(verdict, what):
    lines = ['reference (median of the nodes\' best pairs): %s, threshold %s (fraction %s)%s' % (
        _gbps(verdict['reference_gbps']), _gbps(verdict['threshold_gbps']), verdict['fraction'],
        '' if verdict.get('floor_gbps') is None else ', floor %s' % _gbps(verdict['floor_gbps']))]
    if verdict.get('fleet_reason'):
        lines.append('verdict: %s' % verdict['fleet_reason'])
    lines.append('bad nodes: %s' % (', '.join(verdict['bad_nodes']) or 'none'))
    links = ', '.join('%s-%s' % tuple(link) for link in verdict['bad_links'])
    lines.append('bad links: %s' % (links or 'none'))
    for item in verdict.get('not_reproduced') or []:
        lines.append('not reproduced on retest: %s' % (
            item['node'] if 'node' in item else '%s-%s' % tuple(item['link'])))
    for pair in verdict['pairs']:
        if pair['status'] != 'ok':
            lines.append('%s %s-%s: %s' % (what, pair['a'], pair['b'], pair['reason']))
    return lines


def render_markdown(report):
    """Markdown: verdict, the checks that did not pass, the bandwidth matrix, every check."""
    return _build(report).render_markdown()


VERDICT_KINDS = ('passed', 'failed', 'bad_node', 'bad_link', 'mtu_path')
_PROM_HELP = (
    ('gpucluster_validate_ok', 'Last acceptance run for this node: 1 the run passed and nothing named this node, else 0.'),
    ('gpucluster_validate_verdict',
     'Last acceptance run, one series per verdict kind, 1 when it applies: passed/failed (the whole run), '
     'bad_node (this node), bad_link (a link of this node), mtu_path (this node drops full-size frames).'),
    ('gpucluster_validate_last_run_timestamp_seconds', 'Unix time of the last acceptance run.'),
    ('gpucluster_validate_checks_failed', 'Checks of this node (and of the fleet) that failed in the last run.'),
    ('gpucluster_validate_pair_bandwidth_bytes_per_second',
     'Pair bandwidth measured in the last run between this node and a peer; direction out: this node sends.'),
    ('gpucluster_validate_pair_ok', 'Verdict on the pair of this node and a peer: 1 ok, 0 low or failed.'),
)

# The names of the metrics render_prom writes (dashboards and rules may use only these).
METRIC_NAMES = tuple(name for name, dummy in _PROM_HELP)


def _label(value):
    return str(value).replace('\\', '\\\\').replace('\n', '\\n').replace('"', '\\"')


def _float(value):
    return repr(float(value))


def render_prom(report, node, timestamp):
    """node_exporter textfile metrics for ``node`` (same conventions as gpucluster_health.prom)."""
    report = _check_report(report)
    if node not in report['nodes']:
        raise ReportInputError('node %s is not in the report (nodes: %s)' % (quote(node), clip(', '.join(map(str, report['nodes'])))))
    samples = dict((entry[0], []) for entry in _PROM_HELP)
    mine = [c for c in report['checks'] if c['node'] in (node, 'fleet')]
    matrix = report.get('matrix') or {}
    mtu = report.get('mtu') or {}
    rail_verdicts = [r['verdict'] for r in _rails(report) if r.get('verdict')]
    kinds = {
        'passed': bool(report.get('ok')),
        'failed': not report.get('ok'),
        'bad_node': any(node in v.get('bad_nodes', ()) for v in [matrix] + rail_verdicts),
        'bad_link': any(node in link for v in [matrix] + rail_verdicts for link in v.get('bad_links', ())),
        'mtu_path': node in mtu.get('bad_nodes', ()),
    }
    node_ok = kinds['passed'] and not any(c['status'] == 'failed' for c in mine if c['node'] == node) \
        and not (kinds['bad_node'] or kinds['bad_link'] or kinds['mtu_path'])
    samples['gpucluster_validate_ok'].append(('', '1' if node_ok else '0'))
    for kind in VERDICT_KINDS:
        samples['gpucluster_validate_verdict'].append(('{verdict="%s"}' % kind, '1' if kinds[kind] else '0'))
    samples['gpucluster_validate_last_run_timestamp_seconds'].append(('', _float(timestamp)))
    samples['gpucluster_validate_checks_failed'].append(('', str(sum(c['status'] == 'failed' for c in mine))))
    tool = report.get('tool', 'iperf3')
    _pair_samples(samples, node, matrix, tool, None)
    for rail in _rails(report):
        if rail.get('verdict'):
            _pair_samples(samples, node, rail['verdict'], 'ib_write_bw', (rail.get('hcas') or {}).get(node) or str(rail.get('rail')))
    lines = []
    for name, text in _PROM_HELP:
        if samples[name]:
            lines += ['# HELP %s %s' % (name, text), '# TYPE %s gauge' % name]
            lines += ['%s%s %s' % (name, labels, value) for labels, value in samples[name]]
    return '\n'.join(lines) + '\n'


def _pair_samples(samples, node, verdict, tool, rail):
    """Pair bandwidth and pair verdict series of ``node`` from one matrix verdict (``rail``: the HCA of
    an RDMA rail, whose figures are both directions added: direction ``both``)."""
    for pair in verdict.get('pairs', []):
        if node not in (pair['a'], pair['b']):
            continue
        peer = pair['b'] if pair['a'] == node else pair['a']
        out = pair['a_to_b_gbps'] if pair['a'] == node else pair['b_to_a_gbps']
        back = pair['b_to_a_gbps'] if pair['a'] == node else pair['a_to_b_gbps']
        extra = '' if rail is None else ',rail="%s"' % _label(rail)
        legs = (('out', out), ('in', back)) if rail is None else (('both', pair.get('gbps')),)
        for direction, value in legs:
            if value is not None:
                samples['gpucluster_validate_pair_bandwidth_bytes_per_second'].append((
                    '{peer="%s",direction="%s",tool="%s"%s}' % (_label(peer), direction, _label(tool), extra),
                    _float(value * 1e9 / 8)))
        bad = pair['status'] != 'ok' and (
            pair['a'] in verdict['bad_nodes'] or pair['b'] in verdict['bad_nodes']
            or [pair['a'], pair['b']] in verdict['bad_links'])
        samples['gpucluster_validate_pair_ok'].append(('{peer="%s"%s}' % (_label(peer), extra), '0' if bad else '1'))


def drain_plan(report):
    """``[{'node', 'reason', 'text'}]``: the nodes the verdict blames on their own, to drain in Slurm with the
    reason ``gpucluster/validate#<tag>: <text>``, text ``<time>: <findings>`` (``validate_drain_bad_nodes``).
    Only a node blamed by itself is drained: a bad node of the pair matrix or a node that cannot pass
    full-size frames to any peer. A bad link (two good nodes, one bad cable or port) drains neither end,
    and nothing is drained from a report without verdicts, nor from a verdict that withheld blame (no pair
    measured, every figure 0, every pair below the floor, more than half the nodes blamed:
    fabric_matrix.WITHHELD). RDMA rails count like the matrix. A plan that would drain more than half the
    validated nodes over all the checks together is empty (:func:`drain_withheld` says why)."""
    report = _check_report(report)
    stamp = report.get('generated_at') or 'unknown time'
    reasons = {}
    matrix = report.get('matrix') or {}
    for node in _blamed(matrix)[0]:
        reasons.setdefault(node, []).append('every pair below %s Gb/s (fleet %s Gb/s)' % (
            _gbps(matrix.get('threshold_gbps')), _gbps(matrix.get('reference_gbps'))))
    for rail in _rails(report):
        verdict = rail.get('verdict') or {}
        hcas = rail.get('hcas') or {}
        for node in _blamed(verdict)[0]:
            reasons.setdefault(node, []).append('RDMA rail %s (%s): every pair below %s Gb/s (fleet %s Gb/s)' % (
                rail.get('rail'), hcas.get(node, '?'), _gbps(verdict.get('threshold_gbps')),
                _gbps(verdict.get('reference_gbps'))))
    mtu = report.get('mtu') or {}
    for node in _blamed(mtu)[0]:
        reasons.setdefault(node, []).append('full-size frames to no peer (MTU path)')
    # Every verdict alone blames at most half the nodes (fabric_matrix: more is "no fleet reference"), but
    # different checks may each blame a different half: a run that would drain more than half the cluster
    # drains nothing (drain_withheld says why).
    if len(reasons) * 2 > len(report['nodes']):
        return []
    # Our reason format (module_utils/scheduler.py): gpucluster/validate#<tag>: <time>: <findings>; ``text`` is
    # what goes after the tag (for gpucluster.core.scheduler_decide('hold', 'validate', text)).
    plan = []
    for node in report['nodes']:
        if node in reasons:
            text = '%s: %s' % (stamp, '; '.join(reasons[node]))
            plan.append({'node': node, 'reason': make_reason('validate', text), 'text': text})
    return plan


def drain_withheld(report):
    """Why nothing is drained although verdicts blame nodes: more than half the validated nodes would be
    drained over all the checks together (the measurement, not the fleet, is then suspect). None when the
    drain plan stands."""
    report = _check_report(report)
    blamed = set()
    for verdict in [report.get('matrix') or {}, report.get('mtu') or {}] + [r.get('verdict') or {} for r in _rails(report)]:
        blamed.update(_blamed(verdict)[0])
    if len(blamed) * 2 > len(report['nodes']):
        return ('%d of %d nodes are blamed over all the checks (%s): more than half, so the measurement is suspect '
                'and nothing is drained' % (len(blamed), len(report['nodes']), clip(', '.join(sorted(blamed)), 200)))
    return None


def rail_entry(floor_and_verdict, tool='ib_write_bw -b'):
    """The report's record of one RDMA rail from its floor (fabric_matrix.rail_floors) and its final
    verdict (fabric_matrix.apply_retest): ``{rail, hcas, link_layer, line_rate_gbps, floor_gbps,
    slow_ports, note, tool, verdict}``."""
    if not isinstance(floor_and_verdict, (list, tuple)) or len(floor_and_verdict) != 2 \
            or not isinstance(floor_and_verdict[0], dict):
        raise ReportInputError('rail_entry takes (rail floor, rail verdict), got %s' % quote(floor_and_verdict))
    floor, verdict = floor_and_verdict
    if verdict is not None and not isinstance(verdict, dict):
        raise ReportInputError('the verdict of rail %s must be a matrix verdict, got %s' % (floor.get('rail'), quote(verdict)))
    return {'rail': floor.get('rail'), 'hcas': floor.get('hcas') or {}, 'link_layer': floor.get('link_layer'),
            'line_rate_gbps': floor.get('line_rate_gbps'), 'floor_gbps': floor.get('floor_gbps'),
            'slow_ports': floor.get('slow_ports') or [], 'note': floor.get('note'), 'tool': tool, 'verdict': verdict}


def rail_check(entry):
    """The check of one RDMA rail (``rdma_pairs rail N (hca)``): passed when its verdict is ok."""
    if not isinstance(entry, dict) or 'rail' not in entry:
        raise ReportInputError('rail_check takes a rail entry (rail_entry), got %s' % quote(entry))
    hcas = sorted(set(str(h) for h in (entry.get('hcas') or {}).values()))
    name = 'rdma_pairs rail %s (%s)' % (entry['rail'], ', '.join(hcas) or '?')
    verdict = entry.get('verdict')
    if not verdict:
        return {'name': name, 'node': 'fleet', 'status': 'failed', 'message': 'the rail was not judged'}
    parts = ['RDMA fabric, %s: bad nodes: %s; bad links: %s; reference %s Gb/s; floor %s' % (
        entry.get('link_layer') or '?', ', '.join(verdict['bad_nodes']) or 'none',
        ', '.join('%s-%s' % tuple(link) for link in verdict['bad_links']) or 'none',
        _gbps(verdict.get('reference_gbps')),
        '%s Gb/s (line rate %s Gb/s, both directions added)' % (_gbps(entry['floor_gbps']), _gbps(entry.get('line_rate_gbps')))
        if entry.get('floor_gbps') is not None else 'none')]
    if verdict.get('fleet_reason'):
        parts.append(verdict['fleet_reason'])
    if entry.get('note'):
        parts.append(entry['note'])
    if entry.get('slow_ports'):
        parts.append('ports below the line rate: %s' % ', '.join('%s at %s Gb/s' % (p['node'], p['rate_gbps'])
                                                                 for p in entry['slow_ports'][:10]))
    for item in verdict.get('not_reproduced') or []:
        parts.append('not reproduced on retest: %s' % (item['node'] if 'node' in item else '%s-%s' % tuple(item['link'])))
    bad_pairs = [p for p in verdict.get('pairs', []) if p.get('status') != 'ok']
    parts.extend('pair %s-%s: %s' % (p['a'], p['b'], p['reason']) for p in bad_pairs[:10])
    return {'name': name, 'node': 'fleet', 'status': 'passed' if verdict.get('ok') else 'failed',
            'message': clip('; '.join(parts), 4000)}
