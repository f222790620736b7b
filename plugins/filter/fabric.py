# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the acceptance playbook (playbooks/validate.yml): thin wrappers over
module_utils/fabric_matrix.py (schedule, floors, identities, MTU plan, port ownership and the verdict
of the pair matrix), module_utils/perftest.py and module_utils/nccl_tests.py (tool output and their
verdicts) and plugin_utils/validate_report.py (report and metrics renderers).

Bad input raises an error naming the filter, the argument and what is accepted.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

from collections import Counter

from ansible_collections.gpucluster.core.plugins.module_utils import fabric_matrix, nccl_tests, perftest
from ansible_collections.gpucluster.core.plugins.plugin_utils import validate_report

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - only without ansible-core installed
    class AnsibleFilterError(Exception):
        pass


def _guard(function, *args, **kwargs):
    try:
        return function(*args, **kwargs)
    except (fabric_matrix.MatrixInputError, validate_report.ReportInputError, nccl_tests.NcclInputError,
            perftest.PerftestInputError) as exc:
        raise AnsibleFilterError('%s: %s' % (function.__name__, exc))


def _optional(value):
    """An inventory value that may be left empty: '' and None mean "not set"."""
    return None if value in ('', None) else value


def fabric_rounds(nodes):
    """Rounds of disjoint pairs covering every pair once: ``[[[a, b], ...], ...]``."""
    return [[list(pair) for pair in rnd] for rnd in _guard(fabric_matrix.round_robin, nodes)]


def fabric_judge(measurements, nodes, fraction=0.8, floor_gbps=None):
    """The verdict of fabric_matrix.judge; ``floor_gbps`` empty or none means no absolute floor."""
    return _guard(fabric_matrix.judge, nodes, measurements, fraction=fraction, floor_gbps=_optional(floor_gbps))


def fabric_port_floor(rate_gbps, efficiency=fabric_matrix.DEFAULT_RDMA_EFFICIENCY, expected_rate_gbps=None,
                      bidirectional=False):
    """fabric_matrix.port_floor_gbps: the ib_write_bw floor (Gb/s) of a port from its rate."""
    return _guard(fabric_matrix.port_floor_gbps, rate_gbps, efficiency, _optional(expected_rate_gbps),
                  bool(bidirectional))


def fabric_rail_floor(port_rates, efficiency=fabric_matrix.DEFAULT_RDMA_EFFICIENCY, expected_rate_gbps=None,
                      bidirectional=False):
    """fabric_matrix.rail_floor: ``{line_rate_gbps, floor_gbps, slow_ports, unknown}`` of one rail
    from ``{node: rate_gbps}``."""
    return _guard(fabric_matrix.rail_floor, port_rates, efficiency, _optional(expected_rate_gbps), bool(bidirectional))


def fabric_rails(rdma_facts, hcas=None):
    """fabric_matrix.nccl_rails: ``{rails, problems}`` of one node; ``hcas`` empty means the HCAs that
    share a PCIe switch with a GPU."""
    return _guard(fabric_matrix.nccl_rails, rdma_facts, _optional(hcas) or None)


def fabric_check_rails(rails_by_host):
    """fabric_matrix.check_rails: messages for rails that differ across nodes (empty: they match)."""
    return _guard(fabric_matrix.check_rails, rails_by_host)


def fabric_duplicate_hosts(identities):
    """fabric_matrix.duplicate_hosts: ``[{hosts, by, value, message}]``, empty when every inventory
    name is its own machine."""
    return _guard(fabric_matrix.duplicate_hosts, identities)


def fabric_mtu_plan(host_facts, addresses):
    """fabric_matrix.mtu_plan: per host the interface, MTU and ping payload of its measured address."""
    return _guard(fabric_matrix.mtu_plan, host_facts, addresses)


def fabric_server_owner(ss_output, port, pid):
    """fabric_matrix.server_owner: ``{ours, cause, reason}`` from ``ss -Hltnp`` output."""
    try:
        port, pid = int(port), int(pid)
    except (TypeError, ValueError):
        raise AnsibleFilterError('fabric_server_owner: port and pid must be whole numbers, got %r and %r'
                                 % (port, pid))
    return _guard(fabric_matrix.server_owner, ss_output, port, pid)


def _lines(text):
    """``ss`` output as text, or as its lines (a register's ``stdout_lines`` slice)."""
    if isinstance(text, (list, tuple)):
        return '\n'.join(str(line) for line in text)
    return text


def fabric_listening(ss_output, ports):
    """fabric_matrix.listening: the ports of ``ports`` something listens on (``ss -Hltnp`` text or lines)."""
    return _guard(fabric_matrix.listening, _lines(ss_output), _ports(ports, 'fabric_listening'))


def fabric_server_owners(ss_output, ports, pids):
    """fabric_matrix.server_owners: ``[{ours, cause, reason}]``, one per (port, pid) of our servers
    (``ss -Hltnp`` text or lines)."""
    return _guard(fabric_matrix.server_owners, _lines(ss_output), _ports(ports, 'fabric_server_owners'), list(pids or []))


def _ports(ports, name):
    try:
        return [int(p) for p in ports]
    except (TypeError, ValueError):
        raise AnsibleFilterError('%s: ports must be a list of whole numbers, got %r' % (name, ports))


def fabric_rail_ports(rails, base_port):
    """The TCP port of each rail's ib_write_bw server: ``base_port`` + rail number."""
    try:
        base = int(base_port)
        return [base + int(rail) for rail in rails]
    except (TypeError, ValueError):
        raise AnsibleFilterError('fabric_rail_ports: rails and base_port must be whole numbers, got %r and %r'
                                 % (rails, base_port))


def fabric_rail_rounds(rounds, rails):
    """fabric_matrix.rail_rounds: ``[[{a, b, rails}]]``, every rail of a pair measured at once."""
    return _guard(fabric_matrix.rail_rounds, rounds, list(rails))


def fabric_rail_retest_rounds(plans):
    """fabric_matrix.rail_retest_rounds: the retest of every rail in rounds of ``{a, b, rails}``."""
    return _guard(fabric_matrix.rail_retest_rounds, plans)


def fabric_rail_floors(rails_by_host, efficiency=None, expected_rate_gbps=None, bidirectional=True):
    """fabric_matrix.rail_floors: the floor of each rail; ``efficiency`` empty means the default
    (fabric_matrix.DEFAULT_RDMA_EFFICIENCY)."""
    efficiency = _optional(efficiency)
    return _guard(fabric_matrix.rail_floors, rails_by_host,
                  fabric_matrix.DEFAULT_RDMA_EFFICIENCY if efficiency is None else efficiency,
                  _optional(expected_rate_gbps), bool(bidirectional))


def fabric_plan_estimate(node_count, seconds_per_pair=10, rails=1, rails_in_parallel=True):
    """fabric_matrix.plan_estimate: pairs, rounds and time of the schedule."""
    return _guard(fabric_matrix.plan_estimate, node_count, seconds_per_pair, rails, bool(rails_in_parallel))


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
    """One direction of a pair: ``{gbps, error, cause, bytes, bidirectional, units}``."""
    return validate_report.perftest_gbps(output)


def perftest_cuda_support(help_text):
    """``{cuda, cuda_bus_id, dmabuf}`` from ``ib_write_bw --help``: whether perftest was built with CUDA."""
    return _guard(perftest.cuda_support, help_text)


def perftest_argv(path, rail, tcp_port, size=8388608, seconds=5, bidirectional=True, cuda=None, extra=None,
                  server=None):
    """perftest.bw_argv for one side of a pair on ``rail`` (a fabric_rails rail: hca, port, gid_index)."""
    if not isinstance(rail, dict):
        raise AnsibleFilterError('perftest_argv: rail must be a rail of fabric_rails, got %r' % (rail,))
    try:
        numbers = [int(tcp_port), int(size), int(seconds)]
    except (TypeError, ValueError):
        raise AnsibleFilterError('perftest_argv: tcp_port, size and seconds must be whole numbers, got %r, %r, %r'
                                 % (tcp_port, size, seconds))
    return _guard(perftest.bw_argv, path, rail.get('hca'), rail.get('port') or 1, rail.get('gid_index'), numbers[0],
                  numbers[1], numbers[2], bool(bidirectional), cuda, extra, _optional(server))


def perftest_cuda_args(gpu_address, support, gpus=None, dmabuf=False):
    """perftest.cuda_args: ``{args, gpu, note, error}``, the GPU memory options of the rail whose nearest GPU
    is at ``gpu_address`` (so that ``rails | map(attribute='gpu') | map('perftest_cuda_args', ...)`` works)."""
    return _guard(perftest.cuda_args, support, _optional(gpu_address), gpus, bool(dmabuf))


def perftest_pair(client_output, owner=None, server_output=None, client_rc=None):
    """perftest.pair_result: one pair of a rail from the client's output and who held the server's port
    (``server_output``: text, or a list of texts such as the server's stdout and stderr)."""
    if isinstance(server_output, (list, tuple)):
        server_output = '\n'.join(str(part) for part in server_output if part)
    return _guard(perftest.pair_result, client_output, owner, server_output, client_rc)


def nccl_busbw(output):
    """``{gbytes, size, avg_gbytes, error, hosts, ranks, wrong}``: the largest size's bus bandwidth."""
    return validate_report.nccl_busbw(output)


def nccl_transport(output):
    """What NCCL_DEBUG=INFO says about the paths NCCL took (nccl_tests.transport)."""
    return _guard(nccl_tests.transport, output)


def nccl_node_verdict(output, floor_gbytes=None, expected_gpus=None):
    """``{ok, gbytes, floor_gbytes, message}`` of one node's all_reduce_perf against the SKU floor."""
    return _guard(nccl_tests.judge_node, output, _optional(floor_gbytes), _optional(expected_gpus))


def nccl_fleet_verdict(output, floor_gbytes=None, expect_net='ib', expect_gdr=False, expected_hosts=None):
    """``{ok, gbytes, floor_gbytes, message, transport, reasons}`` of the all_reduce_perf across nodes."""
    return _guard(nccl_tests.judge_fleet, output, _optional(floor_gbytes), expect_net, bool(expect_gdr),
                  _optional(expected_hosts))


def nccl_fleet_floor(rails, rate_gbps, efficiency=nccl_tests.DEFAULT_FLEET_EFFICIENCY):
    """GB/s an all-reduce across nodes must reach: rails x rate / 8 x efficiency."""
    return _guard(nccl_tests.fleet_floor_gbytes, rails, rate_gbps, efficiency)


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


def validate_rail_entry(floor_and_verdict, tool='ib_write_bw -b'):
    """The report's record of one RDMA rail from ``(floor, verdict)`` (``floors | zip(verdicts)``)."""
    return _guard(validate_report.rail_entry, floor_and_verdict, tool)


def validate_rail_check(entry):
    """The ``rdma_pairs rail N (hca)`` check of a rail entry."""
    return _guard(validate_report.rail_check, entry)


def validate_drain_withheld(report):
    """Why a run that blames nodes drains none of them (more than half blamed over all checks), or None."""
    return _guard(validate_report.drain_withheld, report)


class FilterModule(object):
    def filters(self):
        return {
            'fabric_rounds': fabric_rounds,
            'fabric_judge': fabric_judge,
            'fabric_retest_plan': fabric_retest_plan,
            'fabric_apply_retest': fabric_apply_retest,
            'fabric_most_common': fabric_most_common,
            'fabric_ping_measurement': fabric_ping_measurement,
            'fabric_port_floor': fabric_port_floor,
            'fabric_rail_floor': fabric_rail_floor,
            'fabric_rails': fabric_rails,
            'fabric_check_rails': fabric_check_rails,
            'fabric_duplicate_hosts': fabric_duplicate_hosts,
            'fabric_mtu_plan': fabric_mtu_plan,
            'fabric_server_owner': fabric_server_owner,
            'fabric_plan_estimate': fabric_plan_estimate,
            'fabric_rail_floors': fabric_rail_floors,
            'fabric_rail_retest_rounds': fabric_rail_retest_rounds,
            'fabric_rail_rounds': fabric_rail_rounds,
            'fabric_server_owners': fabric_server_owners,
            'fabric_listening': fabric_listening,
            'fabric_rail_ports': fabric_rail_ports,
            'iperf3_gbps': iperf3_gbps,
            'perftest_gbps': perftest_gbps,
            'perftest_cuda_support': perftest_cuda_support,
            'perftest_pair': perftest_pair,
            'perftest_cuda_args': perftest_cuda_args,
            'perftest_argv': perftest_argv,
            'nccl_busbw': nccl_busbw,
            'nccl_transport': nccl_transport,
            'nccl_node_verdict': nccl_node_verdict,
            'nccl_fleet_verdict': nccl_fleet_verdict,
            'nccl_fleet_floor': nccl_fleet_floor,
            'validate_report_json': validate_report_json,
            'validate_report_junit': validate_report_junit,
            'validate_report_markdown': validate_report_markdown,
            'validate_report_prom': validate_report_prom,
            'validate_drain_plan': validate_drain_plan,
            'validate_drain_withheld': validate_drain_withheld,
            'validate_rail_entry': validate_rail_entry,
            'validate_rail_check': validate_rail_check,
        }
