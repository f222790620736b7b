# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the acceptance playbook (playbooks/validate.yml): thin wrappers over
module_utils/fabric_matrix.py (schedule and verdict of the pair matrix) and
plugin_utils/validate_report.py (tool output parsers, report and metrics renderers).

Bad input raises an error naming the argument and what is accepted.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

from collections import Counter

from ansible_collections.gpucluster.core.plugins.module_utils import fabric_matrix
from ansible_collections.gpucluster.core.plugins.plugin_utils import validate_report

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - only without ansible-core installed
    class AnsibleFilterError(Exception):
        pass


def _guard(function, *args, **kwargs):
    try:
        return function(*args, **kwargs)
    except (fabric_matrix.MatrixInputError, validate_report.ReportInputError) as exc:
        raise AnsibleFilterError('%s: %s' % (function.__name__, exc))


def fabric_rounds(nodes):
    """Rounds of disjoint pairs covering every pair once: ``[[[a, b], ...], ...]``."""
    return [[list(pair) for pair in rnd] for rnd in _guard(fabric_matrix.round_robin, nodes)]


def fabric_judge(measurements, nodes, fraction=0.8, floor_gbps=None):
    """The verdict of fabric_matrix.judge; ``floor_gbps`` empty or none means no absolute floor."""
    if floor_gbps in ('', None):
        floor_gbps = None
    return _guard(fabric_matrix.judge, nodes, measurements, fraction=fraction, floor_gbps=floor_gbps)


def fabric_retest_plan(verdict):
    """Pairs to measure again, in rounds (lists), and each suspect's partner."""
    plan = _guard(fabric_matrix.retest_plan, verdict)
    plan['rounds'] = [[list(pair) for pair in rnd] for rnd in plan['rounds']]
    return plan


def fabric_apply_retest(verdict, plan, measurements):
    """The final verdict once the retest figures are in."""
    return _guard(fabric_matrix.apply_retest, verdict, plan, measurements)


def fabric_most_common(values):
    """The value most of ``values`` have (the first one seen on a tie): the fleet's configured MTU."""
    values = list(values or [])
    if not values:
        raise AnsibleFilterError('fabric_most_common: got no values')
    counts = Counter(values)
    top = max(counts.values())
    return next(v for v in values if counts[v] == top)


def fabric_ping_measurement(result, src):
    """A matrix measurement from one registered ``ping -M do`` loop result: the pair is "up"
    (figure 1.0) when the full-size packets came back, else the error names the size and ping's
    last line. ``result`` is an item of ``register: ... loop:`` with ``item`` the peer."""
    if not isinstance(result, dict) or 'item' not in result or 'rc' not in result:
        raise AnsibleFilterError('fabric_ping_measurement: expected one result of a looped ping task, got %r'
                                 % (result,))
    if result['rc'] == 0:
        return {'src': src, 'dst': result['item'], 'gbps': 1.0, 'error': None}
    size = ''
    cmd = result.get('cmd') or []
    if '-s' in cmd and cmd.index('-s') + 1 < len(cmd):
        try:
            size = '%d-byte ' % (int(cmd[cmd.index('-s') + 1]) + 28)
        except ValueError:
            size = ''
    said = ((result.get('stderr') or '').strip() or (result.get('stdout') or '').strip()).splitlines()
    return {'src': src, 'dst': result['item'], 'gbps': None,
            'error': 'no reply to %spackets with DF set (rc %s)%s' % (size, result['rc'], ': ' + said[-1] if said else '')}


def iperf3_gbps(output):
    return validate_report.iperf3_gbps(output)


def perftest_gbps(output):
    return validate_report.perftest_gbps(output)


def nccl_busbw(output):
    return validate_report.nccl_busbw(output)


def validate_report_json(report):
    return _guard(validate_report.render_json, report)


def validate_report_junit(report):
    return _guard(validate_report.render_junit, report)


def validate_report_markdown(report):
    return _guard(validate_report.render_markdown, report)


def validate_report_prom(report, node, timestamp):
    return _guard(validate_report.render_prom, report, node, timestamp)


def validate_drain_plan(report):
    """The nodes to drain with the reason: see validate_report.drain_plan."""
    return _guard(validate_report.drain_plan, report)


class FilterModule(object):
    def filters(self):
        return {
            'fabric_rounds': fabric_rounds,
            'fabric_judge': fabric_judge,
            'fabric_retest_plan': fabric_retest_plan,
            'fabric_apply_retest': fabric_apply_retest,
            'fabric_most_common': fabric_most_common,
            'fabric_ping_measurement': fabric_ping_measurement,
            'iperf3_gbps': iperf3_gbps,
            'perftest_gbps': perftest_gbps,
            'nccl_busbw': nccl_busbw,
            'validate_report_json': validate_report_json,
            'validate_report_junit': validate_report_junit,
            'validate_report_markdown': validate_report_markdown,
            'validate_report_prom': validate_report_prom,
            'validate_drain_plan': validate_drain_plan,
        }
