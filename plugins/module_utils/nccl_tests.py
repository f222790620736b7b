# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read NVIDIA/nccl-tests output (``all_reduce_perf`` and friends) and NCCL's ``NCCL_DEBUG=INFO``
transport lines, and judge them. Pure functions, no I/O, no Ansible imports; Python 3.9+.

The result table is read through its own header (nccl-tests src/util.cu ``writeResultHeader``), so
the layouts in the field all parse: ``size count type redop root`` then, out-of-place and in-place,
``time algbw busbw #wrong`` (``cputime`` with ``-C``, ``error`` instead of ``#wrong`` and no ``root``
before nccl-tests 2.10, per-iteration columns with ``-I``, a timestamp column with ``-S``), rows
prefixed by ``srun -l`` (``0: ``) or ``mpirun --tag-output`` (``[1,0]<stdout>:``).

**The figure judged is the bus bandwidth of the largest message size**, the lower of out-of-place
and in-place. ``# Avg bus bandwidth`` is the mean over *every* size the run swept, from 8 bytes up,
where latency, not bandwidth, dominates: on a healthy 8 x H100 DGX sweeping 8 B to 16 GiB it reads
159 GB/s while the 16 GiB row reads 480 GB/s (tests/unit/fixtures/fabric). A per-SKU floor meant
for the large-message bandwidth (460 GB/s) would fail every healthy node against the average, and
any cross-node floor would pass whatever the fabric. The average is kept for information only.

Verdicts: :func:`judge_node` (one node, its GPUs over NVLink/NVSwitch, against a per-SKU floor),
:func:`judge_fleet` (across nodes, against :func:`fleet_floor_gbytes`: rails x port rate x
efficiency) and :func:`judge_transport` (NET/IB, not NET/Socket, where IB/RoCE is configured;
GDRDMA where GPUDirect is expected).
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import math
import re

# Multi-node floor: a share of what the NCCL HCAs can carry. NVIDIA's engineers quote ring
# all-reduce at ~96 % of the NICs' aggregate (8 x 400 Gb/s CX7: ~396 GB/s; DGX A100, 8 x 200 Gb/s:
# 192 GB/s; NVIDIA/nccl-tests#319, NVIDIA/nccl#812), and a published two-node OCI A100 run reaches
# 191.8 GB/s on 16 x 100 Gb/s (fixtures/fabric). 0.75 leaves room for topology, PCIe and
# congestion-control variance while a fabric at half its line rate (HDR links trained on an NDR
# fabric, a rail down on every node) fails. Sites whose vendor publishes a lower reference lower it.
DEFAULT_FLEET_EFFICIENCY = 0.75
MAX_QUOTE = 200
MAX_LINES_KEPT = 20

_PREFIX = re.compile(r'^(?:\[\d+,\d+\]<std(?:out|err)>:|\d+:(?=\s)|\[\d+\](?=\s))\s?')
_FLOAT = re.compile(r'^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$')
_RANK = re.compile(r'^#\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+'
                   r'\[([^\]]*)\]\s*(.*?)\s*$')
_HEAD = re.compile(r'^#\s*nThread\s+(\d+)\s+nGpus(?:\(perProc\))?\s+(\d+)\s+minBytes\s+(\d+)\s+maxBytes\s+(\d+)')
_AVG = re.compile(r'^#\s*Avg bus bandwidth\s*:\s*(\S+)')
_OOB = re.compile(r'^#\s*Out of bounds values\s*:\s*(\S+)')
_COLLECTIVE = re.compile(r'^#\s*Collective test (?:starting|concluded):\s*(\S+)')
_NCCL_VERSION = re.compile(r'NCCL version\s+(\d+\.\d+\.\d+\S*)')
# Lines that say the run itself failed (nccl-tests' own checks, NCCL's error returns, the launcher).
_FAILURE = re.compile(r'(Test NCCL failure|Test CUDA failure|Test failure|'
                      r'unhandled (?:system|cuda|internal|remote) error|Segmentation fault|srun: error|'
                      r'invalid usage \(run with NCCL_DEBUG=WARN)')
# Transport lines (NCCL_DEBUG=INFO): "Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA",
# older "Ring 00 : 1[23000] -> 8[1e000] [send] via NET/IB/1/GDRDMA".
_CONNECTION = re.compile(r'NCCL INFO (?:Channel|Ring)\s+(\d+)(?:/\d+)?\s*:\s*(\d+)(?:\[[0-9a-fA-Fx]*\])?\s*->\s*'
                         r'(\d+)(?:\[[0-9a-fA-Fx]*\])?\s*(?:\[(send|receive)\]\s*)?via\s+(\S.*?)\s*$')
_NET_USING = re.compile(r'NCCL INFO NET/(IB|Socket)\s*:\s*Using\s+(.*?)\s*$')
_IB_DEVICE = re.compile(r'\[(\d+)\]([^\s:\[\]]+):(\d+)/(IB|RoCE)')
_USING_NETWORK = re.compile(r'NCCL INFO Using network\s+(\S.*?)\s*$')
_CHANNELS = re.compile(r'NCCL INFO (\d+) coll channels,(?:\s*(\d+) collnet channels,)?\s*(\d+) nvls channels,'
                       r'\s*(\d+) p2p channels')
_GDR_DISABLED = re.compile(r'GPU Direct RDMA Disabled for (?:GPU \S+ / )?HCA\s+(.*?)\s*$')
_GDR_ENABLED = re.compile(r'GPU Direct RDMA Enabled for (?:GPU \S+ / )?HCA')


class NcclInputError(ValueError):
    """Bad arguments (not the output's content): the message names the argument and what is accepted."""


def _quote(text, limit=MAX_QUOTE):
    text = ' '.join(str(text).split())
    return text if len(text) <= limit else text[:limit] + '...'


def _text(output):
    if output is None:
        return ''
    if not isinstance(output, str):
        raise NcclInputError('nccl-tests output must be text (the stdout of all_reduce_perf), got %s'
                             % type(output).__name__)
    return output


def _finite(token):
    if not _FLOAT.match(token):
        return None
    value = float(token)
    return value if math.isfinite(value) else None


def _strip(line):
    return _PREFIX.sub('', line.lstrip(), count=1).strip()


def _columns(line):
    """Column names of a result header line (``#  size  count  type ...``), or None."""
    body = line.lstrip('#').split()
    if len(body) < 7 or body[0] != 'size' or body[1] != 'count' or body.count('busbw') != 2:
        return None
    return body


def parse(output):
    """The result table and the run's facts: ``{collective, n_gpus, min_bytes, max_bytes, ranks,
    hosts, rows, bad_rows, avg_busbw, out_of_bounds, wrong, nccl_version, failures}``.

    ``rows`` are ``{size, count, type, redop, busbw_oop, busbw_ip, busbw, wrong}`` (``busbw`` the
    lower of the two, GB/s; ``wrong`` the #wrong count of both, None when the run did not check or
    printed a max-error column instead); ``bad_rows`` quote result lines that are not plain finite
    numbers (never figures); ``ranks`` ``{rank, pid, host, device, bus, model}``; ``hosts`` in order of
    first appearance; ``failures`` the lines that say the run failed (NCCL WARN, Test NCCL failure...).
    """
    text = _text(output)
    result = {'collective': None, 'n_gpus': None, 'min_bytes': None, 'max_bytes': None, 'ranks': [], 'hosts': [],
              'rows': [], 'bad_rows': [], 'avg_busbw': None, 'out_of_bounds': None, 'wrong': None,
              'nccl_version': None, 'failures': [], 'warnings': []}
    columns = None
    for raw in text.splitlines():
        line = _strip(raw)
        if not line:
            continue
        if line.startswith('#'):
            head = _HEAD.match(line)
            if head:
                result['n_gpus'] = int(head.group(2))
                result['min_bytes'], result['max_bytes'] = int(head.group(3)), int(head.group(4))
                continue
            rank = _RANK.match(line)
            if rank:
                result['ranks'].append({'rank': int(rank.group(1)), 'pid': int(rank.group(2)), 'host': rank.group(3),
                                        'device': int(rank.group(4)), 'bus': rank.group(5), 'model': rank.group(6)})
                if rank.group(3) not in result['hosts']:
                    result['hosts'].append(rank.group(3))
                continue
            found = _columns(line)
            if found:
                columns = found
                continue
            avg = _AVG.match(line)
            if avg:
                result['avg_busbw'] = _finite(avg.group(1))
                continue
            oob = _OOB.match(line)
            if oob:
                result['out_of_bounds'] = int(oob.group(1)) if oob.group(1).isdigit() else None
            collective = _COLLECTIVE.match(line)
            if collective:
                result['collective'] = collective.group(1)
            if _FAILURE.search(line) and len(result['failures']) < MAX_LINES_KEPT:
                result['failures'].append(_quote(line))
            continue
        version = _NCCL_VERSION.search(line)
        if version and result['nccl_version'] is None:
            result['nccl_version'] = version.group(1)
        if _FAILURE.search(line):
            if len(result['failures']) < MAX_LINES_KEPT:
                result['failures'].append(_quote(line))
            continue
        if 'NCCL WARN' in line:
            if len(result['warnings']) < MAX_LINES_KEPT:
                result['warnings'].append(_quote(line))
            continue
        tokens = line.split(None, 2)
        if columns and len(tokens) >= 2 and tokens[0].isdigit() and tokens[1].isdigit():
            _row(line, columns, result)
    wrongs = [r['wrong'] for r in result['rows'] if r['wrong'] is not None]
    result['wrong'] = sum(wrongs) if wrongs else None
    return result


def _row(line, columns, result):
    tokens = line.split()
    busbw_at = [i for i, name in enumerate(columns) if name == 'busbw']
    if len(tokens) < busbw_at[1] + 1:
        if len(result['bad_rows']) < MAX_LINES_KEPT:
            result['bad_rows'].append(_quote(line))
        return
    oop, ip = _finite(tokens[busbw_at[0]]), _finite(tokens[busbw_at[1]])
    wrong = 0
    for i, name in enumerate(columns[:len(tokens)]):
        if name != '#wrong':
            continue
        if tokens[i] == 'N/A':
            wrong = None
            break
        count = _finite(tokens[i])
        if count is None or count != int(count):
            oop = None  # a count that is not a whole number: the row is not nccl-tests'
            break
        wrong += int(count)
    if '#wrong' not in columns:
        wrong = None
    if oop is None or ip is None or oop < 0 or ip < 0:
        if len(result['bad_rows']) < MAX_LINES_KEPT:
            result['bad_rows'].append(_quote(line))
        return
    result['rows'].append({'size': int(tokens[0]), 'count': int(tokens[1]),
                           'type': tokens[2] if len(columns) > 2 and columns[2] == 'type' else None,
                           'redop': tokens[3] if len(columns) > 3 and columns[3] == 'redop' else None,
                           'busbw_oop': oop, 'busbw_ip': ip, 'busbw': min(oop, ip), 'wrong': wrong})


def busbw(output):
    """The figure a verdict judges: ``{gbytes, size, avg_gbytes, error, hosts, ranks, wrong}``.

    ``gbytes`` is the bus bandwidth (GB/s) of the largest message size the run measured, the lower
    of out-of-place and in-place; None with ``error`` when the run failed, reported wrong results
    (``#wrong`` above 0 or out-of-bounds values), or printed no result row. ``avg_gbytes`` is
    nccl-tests' ``# Avg bus bandwidth`` (the mean over every size: information, never judged).
    """
    return _figure(parse(output), output)


def _figure(parsed, output):
    base = {'gbytes': None, 'size': None, 'avg_gbytes': parsed['avg_busbw'], 'error': None,
            'hosts': parsed['hosts'], 'ranks': len(parsed['ranks']), 'wrong': parsed['wrong']}
    if parsed['out_of_bounds']:
        return dict(base, error='nccl-tests: %d out of bounds values (wrong results)' % parsed['out_of_bounds'])
    if parsed['wrong']:
        return dict(base, error='nccl-tests: %d wrong elements (#wrong) across the sizes: the reduction gave '
                    'wrong results' % parsed['wrong'])
    if parsed['bad_rows']:
        return dict(base, error='nccl-tests result row is not made of finite numbers: %s' % parsed['bad_rows'][0])
    if parsed['failures'] and not parsed['rows']:
        return dict(base, error='nccl-tests failed: %s' % '; '.join(parsed['failures'][:3]))
    if not parsed['rows']:
        text = _text(output)
        if parsed['warnings']:
            return dict(base, error='no nccl-tests result row; NCCL warned: %s' % '; '.join(parsed['warnings'][:3]))
        return dict(base, error='no nccl-tests result row in the output%s'
                    % (': %s' % _quote(text) if text.strip() else ' (it printed nothing)'))
    if parsed['failures']:
        return dict(base, error='nccl-tests reported a failure: %s' % '; '.join(parsed['failures'][:3]))
    largest = max(r['size'] for r in parsed['rows'])
    figure = min(r['busbw'] for r in parsed['rows'] if r['size'] == largest)
    return dict(base, gbytes=figure, size=largest)


# --------------------------------------------------------------------------- transport

def transport(output):
    """What ``NCCL_DEBUG=INFO`` says about the paths NCCL took.

    Returns ``{info_lines, connections, networks, ib_devices, socket_interfaces, ib_no_device,
    gdr_disabled, gdr_enabled, channels, nvls_available, warnings}``. ``connections`` counts the
    channel connections by path: ``net_ib`` (NET/IB, NET/IBext...: InfiniBand or RoCE verbs),
    ``net_ib_gdr`` (those with GDRDMA), ``net_socket``, ``net_other`` (another net plugin), ``p2p``
    (P2P/IPC, P2P/CUMEM, P2P/direct pointer), ``shm``, ``other``. ``ib_devices`` are
    ``{index, name, port, link}`` from ``NET/IB : Using``; ``channels`` the largest ``coll``, ``nvls``,
    ``collnet`` and ``p2p`` channel counts printed.
    """
    text = _text(output)
    summary = {'info_lines': 0, 'connections': {'net_ib': 0, 'net_ib_gdr': 0, 'net_socket': 0, 'net_other': 0,
                                                'p2p': 0, 'shm': 0, 'other': 0},
               'networks': [], 'ib_devices': [], 'socket_interfaces': [], 'ib_no_device': False,
               'gdr_disabled': [], 'gdr_enabled': False, 'channels': {}, 'nvls_available': None, 'warnings': []}
    for line in text.splitlines():
        if 'NCCL WARN' in line and len(summary['warnings']) < MAX_LINES_KEPT:
            summary['warnings'].append(_quote(line))
        if 'NCCL INFO' not in line:
            continue
        summary['info_lines'] += 1
        connection = _CONNECTION.search(line)
        if connection:
            _count_connection(connection.group(5), summary['connections'])
            continue
        using = _NET_USING.search(line)
        if using:
            if using.group(1) == 'IB':
                for index, name, port, link in _IB_DEVICE.findall(using.group(2)):
                    device = {'index': int(index), 'name': name, 'port': int(port), 'link': link}
                    if device not in summary['ib_devices']:
                        summary['ib_devices'].append(device)
            else:
                for name in re.findall(r'\[\d+\]([^\s:<]+)', using.group(2)):
                    if name not in summary['socket_interfaces']:
                        summary['socket_interfaces'].append(name)
            continue
        network = _USING_NETWORK.search(line)
        if network:
            if network.group(1) not in summary['networks']:
                summary['networks'].append(network.group(1))
            continue
        if 'NET/IB : No device found' in line:
            summary['ib_no_device'] = True
            continue
        disabled = _GDR_DISABLED.search(line)
        if disabled:
            hca = _quote(disabled.group(1), 60)
            if hca not in summary['gdr_disabled']:
                summary['gdr_disabled'].append(hca)
            continue
        if _GDR_ENABLED.search(line):
            summary['gdr_enabled'] = True
            continue
        channels = _CHANNELS.search(line)
        if channels:
            for key, value in (('coll', channels.group(1)), ('collnet', channels.group(2)),
                               ('nvls', channels.group(3)), ('p2p', channels.group(4))):
                if value is not None:
                    summary['channels'][key] = max(summary['channels'].get(key, 0), int(value))
            continue
        if 'NVLS multicast support is available' in line:
            summary['nvls_available'] = True
        elif 'NVLS multicast support is not available' in line:
            summary['nvls_available'] = summary['nvls_available'] or False
    return summary


def _count_connection(via, counts):
    if via.startswith('NET/'):
        name = via.split('/')[1] if via.count('/') >= 1 else ''
        if name.startswith('IB'):
            counts['net_ib'] += 1
            if '/GDRDMA' in via:
                counts['net_ib_gdr'] += 1
        elif name == 'Socket':
            counts['net_socket'] += 1
        else:
            counts['net_other'] += 1
    elif via.startswith('P2P/') or via.startswith('NVL'):
        counts['p2p'] += 1
    elif via.startswith('SHM/'):
        counts['shm'] += 1
    else:
        counts['other'] += 1


EXPECT_NET = ('ib', 'socket', 'any')


def judge_transport(summary, expect_net='ib', expect_gdr=False, multi_node=True):
    """Whether NCCL took the paths the site configured. Returns ``{ok, reasons, notes}``.

    ``expect_net``: ``ib`` (IB or RoCE verbs configured: a connection through NET/Socket, or
    ``Using network Socket``, fails; across nodes at least one NET/IB connection must show),
    ``socket`` (a site without RDMA) or ``any``. ``expect_gdr``: every NET/IB connection must carry
    ``/GDRDMA`` (GPUDirect RDMA in use). No ``NCCL INFO`` line at all fails whenever a path is
    expected: the run was not made with ``NCCL_DEBUG=INFO`` and nothing can be confirmed.
    """
    if expect_net not in EXPECT_NET:
        raise NcclInputError('expect_net must be one of %s, got %r' % (', '.join(EXPECT_NET), expect_net))
    if not isinstance(summary, dict) or 'connections' not in summary:
        raise NcclInputError('summary must be the result of nccl_tests.transport (a dict with connections)')
    reasons, notes = [], []
    counts = summary['connections']
    net_total = counts['net_ib'] + counts['net_socket'] + counts['net_other']
    if not summary['info_lines']:
        if expect_net != 'any' or expect_gdr:
            reasons.append('no NCCL INFO lines in the output: run it with NCCL_DEBUG=INFO so the paths NCCL '
                           'took can be checked')
        return {'ok': not reasons, 'reasons': reasons, 'notes': notes}
    if expect_net == 'ib':
        socket_used = counts['net_socket'] or 'Socket' in summary['networks']
        if socket_used:
            why = ['%d connection(s) via NET/Socket' % counts['net_socket']] if counts['net_socket'] else []
            if 'Socket' in summary['networks']:
                why.append('"Using network Socket"')
            if summary['ib_no_device']:
                why.append('"NET/IB : No device found"')
            reasons.append('NCCL fell back to TCP sockets where IB/RoCE is configured (%s)' % ', '.join(why))
        elif multi_node and not counts['net_ib']:
            reasons.append('no connection via NET/IB across the nodes (%d network connection(s) via another '
                           'transport): NCCL did not use the RDMA HCAs' % net_total)
    if expect_gdr and counts['net_ib']:
        plain = counts['net_ib'] - counts['net_ib_gdr']
        if plain:
            disabled = ''
            if summary['gdr_disabled']:
                disabled = ' (NCCL: GPU Direct RDMA Disabled for HCA %s)' % ', '.join(summary['gdr_disabled'][:4])
            reasons.append('%d of %d NET/IB connection(s) without GDRDMA: GPUDirect RDMA is not in use%s'
                           % (plain, counts['net_ib'], disabled))
    elif expect_gdr and multi_node and not counts['net_ib'] and not reasons:
        reasons.append('no NET/IB connection to check for GDRDMA')
    if summary['channels']:
        notes.append('channels: %s' % ', '.join('%s %d' % (k, v) for k, v in sorted(summary['channels'].items())))
    if summary['ib_devices']:
        notes.append('NET/IB devices: %s' % ', '.join('%s:%d/%s' % (d['name'], d['port'], d['link'])
                                                      for d in summary['ib_devices']))
    return {'ok': not reasons, 'reasons': reasons, 'notes': notes}


# --------------------------------------------------------------------------- floors and verdicts

def _positive(value, name, allow_none=False):
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise NcclInputError('%s must be a finite number above 0, got %r' % (name, value))
    return float(value)


def fleet_floor_gbytes(rails, rate_gbps, efficiency=DEFAULT_FLEET_EFFICIENCY):
    """The bus bandwidth (GB/s) an all-reduce across nodes must reach: ``rails`` NCCL HCAs per node
    at ``rate_gbps`` each (the port rate, Gb/s) times ``efficiency`` (in (0, 1]), over 8 bits a byte.
    Ring all-reduce across nodes approaches what the HCAs of one node carry together."""
    if isinstance(rails, bool) or not isinstance(rails, int) or rails < 1:
        raise NcclInputError('rails must be a whole number of NCCL HCAs per node (at least 1), got %r' % (rails,))
    rate = _positive(rate_gbps, 'rate_gbps')
    efficiency = _positive(efficiency, 'efficiency')
    if efficiency > 1:
        raise NcclInputError('efficiency must be at most 1, got %r' % (efficiency,))
    return round(rails * rate / 8.0 * efficiency, 3)


def _verdict(figure, floor, what):
    if figure['error']:
        return {'ok': False, 'gbytes': None, 'floor_gbytes': floor, 'message': figure['error']}
    text = '%.2f GB/s bus bandwidth at %d bytes (the largest size)%s' % (
        figure['gbytes'], figure['size'],
        '' if figure['avg_gbytes'] is None else '; average over all sizes %.2f GB/s, not judged' % figure['avg_gbytes'])
    if floor is None:
        return {'ok': True, 'gbytes': figure['gbytes'], 'floor_gbytes': None,
                'message': text + ' (no %s floor set)' % what}
    ok = figure['gbytes'] >= floor
    return {'ok': ok, 'gbytes': figure['gbytes'], 'floor_gbytes': floor,
            'message': '%s %s the %s floor of %.2f GB/s' % (text, 'reaches' if ok else 'is below', what, floor)}


def judge_node(output, floor_gbytes=None, expected_gpus=None):
    """One node's all-reduce over its own GPUs: ``{ok, gbytes, floor_gbytes, message}``.

    ``floor_gbytes`` is the per-SKU floor (None: no floor, the figure is reported); ``expected_gpus``
    the GPU count the run must have used (ranks x GPUs per rank), so a run that silently saw fewer
    GPUs is not judged as the node.
    """
    floor = _positive(floor_gbytes, 'floor_gbytes', allow_none=True)
    parsed = parse(output)
    figure = _figure(parsed, output)
    if expected_gpus is not None:
        if isinstance(expected_gpus, bool) or not isinstance(expected_gpus, int) or expected_gpus < 1:
            raise NcclInputError('expected_gpus must be a whole number of at least 1, got %r' % (expected_gpus,))
        used = len(parsed['ranks'])
        if not figure['error'] and used != expected_gpus:
            figure = dict(figure, error='the run used %d GPU(s), the node has %d' % (used, expected_gpus))
    return _verdict(figure, floor, 'single-node')


def judge_fleet(output, floor_gbytes=None, expect_net='ib', expect_gdr=False, expected_hosts=None):
    """The all-reduce across nodes: figure against the rail floor, and the transport NCCL used.

    Returns ``{ok, gbytes, floor_gbytes, message, transport, reasons}``; ``expected_hosts`` (the
    host names the job was given) must all appear in the rank list.
    """
    floor = _positive(floor_gbytes, 'floor_gbytes', allow_none=True)
    figure = busbw(output)
    verdict = _verdict(figure, floor, 'multi-node')
    reasons = [] if verdict['ok'] else [verdict['message']]
    if expected_hosts is not None:
        if not isinstance(expected_hosts, (list, tuple)) or not all(isinstance(h, str) and h for h in expected_hosts):
            raise NcclInputError('expected_hosts must be a list of host names, got %r' % (expected_hosts,))
        seen = set(figure['hosts'])
        short = set(h.split('.')[0] for h in seen)
        missing = [h for h in expected_hosts if h not in seen and h.split('.')[0] not in short]
        if missing and figure['hosts']:
            reasons.append('ranks ran on %s, not on %s' % (', '.join(figure['hosts']), ', '.join(missing)))
    judged = judge_transport(transport(output), expect_net=expect_net, expect_gdr=expect_gdr, multi_node=True)
    reasons.extend(judged['reasons'])
    message = verdict['message'] if not reasons else '; '.join(reasons)
    return dict(verdict, ok=not reasons, message=message, transport=judged, reasons=reasons)
