# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read what perftest's bandwidth tools print (``ib_write_bw``, ``ib_read_bw``, ``ib_send_bw``).

Pure functions, no I/O, no Ansible imports; Python 3.9+. The layout is perftest's own
(linux-rdma/perftest src/perftest_parameters.h: ``RESULT_FMT``/``RESULT_FMT_G`` and ``REPORT_FMT``;
the tests read output recorded on real ConnectX ports, tests/unit/fixtures/fabric/INDEX.md):

- a banner ``RDMA_Write BW Test`` (``RDMA_Write Bidirectional BW Test`` with ``-b``; ``Send``,
  ``RDMA_Read``), then ``Name : value`` lines (``Device``, ``Link type``, ``GID index``, ``Mtu``...);
- the result header ``#bytes #iterations BW peak[UNIT] BW average[UNIT] MsgRate[Mpps]`` where UNIT
  is ``Gb/sec`` (``--report_gbits``: 10^9 bit/s) or ``MiB/sec`` (``MB/sec`` before perftest 4.5-0.x
  relabelled it; both are 2^20 byte/s, perftest's ``format_factor``);
- one row per message size; with ``-b`` the figure is the sum of both directions (perftest adds
  the remote side's report to its own before printing).

A figure is the **average** column of the row with the largest message size, in Gb/s. A row that
is not made of plain non-negative numbers (``4.5.6``, ``-3.2``, ``inf``, ``nan``) is never a figure:
the output is then an error, not a number. Errors perftest prints (``Couldn't connect``, ``Couldn't
listen to port``, ``Completion with error``...) are returned as such, with a cause the fabric verdict
understands (``port_taken``: our server could not bind its port, someone else holds it).
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import math
import re

# Gb/s per unit of the bandwidth columns (perftest_parameters.c: format_factor 0x100000 or 125000000).
UNIT_GBPS = {'Gb/sec': 1.0, 'MiB/sec': 1048576 * 8 / 1e9, 'MB/sec': 1048576 * 8 / 1e9}
MAX_QUOTE = 200

_NUMBER = r'(?:\d+(?:\.\d+)?)'
_BANNER = re.compile(r'^\s*(RDMA_Write|RDMA_Read|Send|Atomic|RDMA_Write_imm)\s+(?:(?!Bidirectional)\w+\s+)?'
                     r'(Bidirectional\s+)?(?:Post List\s+)?BW Test\s*$')
_HEADER = re.compile(r'^\s*#bytes\s+(#sl\s+)?#iterations\s+BW peak\[([^\]]+)\]\s+BW average\[([^\]]+)\]')
_FIELD = re.compile(r'^\s*([A-Za-z][A-Za-z0-9 _.*/-]*?)\s*:\s*(\S.*?)\s*$')
_SPLIT = re.compile(r'(?:\t+|\s{2,})(?=[A-Za-z][A-Za-z0-9 .*/_-]*?\s*:)')
# Lines perftest prints when a run fails (perftest_communication.c, perftest_resources.c, *_bw.c).
_ERRORS = (
    ('port_taken', re.compile(r"Couldn't listen to port\s+\d+")),
    ('unreachable', re.compile(r"Couldn't connect to\s+\S+")),
    (None, re.compile(r'Unable to (?:open file descriptor|init the socket connection|find the Infiniband/RoCE'
                      r'|create the rdma_resources|create QP|allocate|set up|modify)')),
    (None, re.compile(r'Completion with error')),
    (None, re.compile(r"ethernet_read_keys: Couldn't read remote address")),
    (None, re.compile(r"Couldn't (?:get device|allocate|create|read|post|modify|establish|exchange)")),
    (None, re.compile(r'IB device \S+ not found')),
    (None, re.compile(r'No IB devices found')),
    (None, re.compile(r'Unsupported memory type')),
    (None, re.compile(r'Failed to (?:modify|create|init|allocate|register|post|get|connect)')),
    (None, re.compile(r'\bfailed\b.*\berror\b|\berror\b.*\bfailed\b', re.I)),
)
_WARNINGS = re.compile(r'^\s*(WARNING:.*|Conflicting CPU frequency values detected.*|Requested mtu is higher.*)$')


class PerftestInputError(ValueError):
    """The argument is not perftest output (a non-string): the message says what is accepted."""


def _quote(text, limit=MAX_QUOTE):
    text = ' '.join(str(text).split())
    return text if len(text) <= limit else text[:limit] + '...'


def _number(token):
    """A finite non-negative float from a plain decimal token, else None (``4.5.6``, ``-1``, ``inf``)."""
    if not re.match(r'^' + _NUMBER + r'$', token):
        return None
    value = float(token)
    return value if math.isfinite(value) else None


def _text(output):
    if output is None:
        return ''
    if not isinstance(output, str):
        raise PerftestInputError('perftest output must be text (the stdout of ib_write_bw/ib_read_bw/ib_send_bw), '
                                 'got %s' % type(output).__name__)
    return output


def parse(output):
    """Everything the bandwidth tools print that a verdict needs.

    Returns ``{test, bidirectional, fields, units, rows, bad_rows, errors, causes, warnings, cuda}``:
    ``fields`` maps banner names to values (``Device``, ``Link type``, ``GID index``, ``Mtu``...);
    ``rows`` are ``{bytes, iterations, peak, average, msg_rate, gbps}`` (``gbps``: the average in
    Gb/s); ``bad_rows`` the result lines that are not plain numbers (quoted, never figures);
    ``errors`` the failure lines perftest printed; ``causes`` their kinds (``port_taken``,
    ``unreachable``); ``cuda`` whether the run used GPU memory (``initializing CUDA``).
    """
    text = _text(output)
    result = {'test': None, 'bidirectional': False, 'fields': {}, 'units': None, 'rows': [], 'bad_rows': [],
              'errors': [], 'causes': [], 'warnings': [], 'cuda': False}
    layout = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        banner = _BANNER.match(line)
        if banner:
            result['test'] = banner.group(1)
            result['bidirectional'] = bool(banner.group(2))
            layout = None
            continue
        header = _HEADER.match(line)
        if header:
            if header.group(2) != header.group(3) or header.group(2) not in UNIT_GBPS:
                result['errors'].append('unknown bandwidth unit in the result header: %s' % _quote(line))
                layout = None
                continue
            result['units'] = header.group(2)
            layout = 'qos' if header.group(1) else 'bw'
            continue
        if line.startswith('initializing CUDA') or line.startswith('Picking device No.'):
            result['cuda'] = True
        warning = _WARNINGS.match(line)
        if warning:
            if len(result['warnings']) < 20:
                result['warnings'].append(_quote(warning.group(1)))
            continue
        for cause, pattern in _ERRORS:
            if pattern.search(line):
                if len(result['errors']) < 20:
                    result['errors'].append(_quote(line))
                if cause and cause not in result['causes']:
                    result['causes'].append(cause)
                break
        else:
            if layout and re.match(r'^[-+]?\d', line):
                _row(line, layout, result)
                continue
            if set(line) == {'-'}:
                continue
            field = _FIELD.match(line)
            if field and result['test'] and not result['rows']:
                for name, value in _fields(line):
                    result['fields'].setdefault(name, value)
    return result


def _fields(line):
    """``Name : value`` pairs of one banner line (two per line, tab- or space-separated)."""
    pairs = []
    for part in _SPLIT.split(line):
        match = _FIELD.match(part)
        if match:
            pairs.append((match.group(1), match.group(2)))
    return pairs


def _row(line, layout, result):
    tokens = line.split()
    need = 6 if layout == 'qos' else 5
    if len(tokens) < need:
        result['bad_rows'].append(_quote(line))
        return
    if layout == 'qos':
        tokens = [tokens[0]] + tokens[2:]
    values = [_number(t) for t in tokens[:5]]
    size, iterations = tokens[0], tokens[1]
    if None in values or not size.isdigit() or not iterations.isdigit():
        result['bad_rows'].append(_quote(line))
        return
    factor = UNIT_GBPS[result['units']]
    result['rows'].append({'bytes': int(size), 'iterations': int(iterations), 'peak': values[2],
                           'average': values[3], 'msg_rate': values[4], 'gbps': round(values[3] * factor, 6)})


def measurement(output, min_bytes=None):
    """One direction of a pair as the fabric verdict takes it: ``{gbps, error, cause, bytes,
    bidirectional, units}``.

    ``gbps`` is the average of the row with the largest message size (None when there is no
    figure); ``error`` says why there is none, quoting perftest; ``cause`` is ``port_taken`` when our
    server could not listen on its port (someone else holds it: the pair blames no node), else
    ``unreachable``, else None. A row that is not plain numbers, or a largest message below
    ``min_bytes`` (a run that stopped early), is an error, never a figure.
    """
    if min_bytes is not None and (isinstance(min_bytes, bool) or not isinstance(min_bytes, int) or min_bytes < 1):
        raise PerftestInputError('min_bytes must be a whole number of bytes of at least 1, got %r' % (min_bytes,))
    parsed = parse(output)
    base = {'gbps': None, 'error': None, 'cause': None, 'bytes': None, 'bidirectional': parsed['bidirectional'],
            'units': parsed['units']}
    cause = parsed['causes'][0] if parsed['causes'] else None
    if parsed['errors']:
        return dict(base, error='perftest: %s' % '; '.join(parsed['errors'][:3]), cause=cause)
    if parsed['bad_rows']:
        return dict(base, error='perftest result row is not made of plain numbers: %s' % parsed['bad_rows'][0])
    if not parsed['rows']:
        text = _text(output)
        if not text.strip():
            return dict(base, error='perftest printed nothing')
        return dict(base, error='no perftest result row in the output: %s' % _quote(text))
    largest = max(row['bytes'] for row in parsed['rows'])
    if min_bytes is not None and largest < min_bytes:
        return dict(base, error='the largest message measured is %d bytes, below the %d bytes asked for'
                    % (largest, min_bytes))
    row = [r for r in parsed['rows'] if r['bytes'] == largest][-1]
    return dict(base, gbps=row['gbps'], bytes=largest)


def cuda_support(help_text):
    """What GPU memory this perftest can use, from ``ib_write_bw --help``: ``{cuda, cuda_bus_id, dmabuf}``.

    perftest prints ``--use_cuda=<cuda device id>`` only when it was built with CUDA, and
    ``--use_cuda_dmabuf`` only when that build supports DMA-BUF (perftest_parameters.c, usage()).
    """
    text = _text(help_text)
    return {'cuda': '--use_cuda=' in text,
            'cuda_bus_id': '--use_cuda_bus_id=' in text,
            'dmabuf': '--use_cuda_dmabuf' in text}


# --------------------------------------------------------------------------- command lines

# Options bw_argv sets itself: a site's extra arguments may not set them again (perftest takes the last
# one, so an extra "-D 60" would silently outlast every timeout built on our duration).
OWN_OPTIONS = ('-d', '--ib-dev', '-i', '--ib-port', '-x', '--gid-index', '-p', '--port', '-s', '--size',
               '-D', '--duration', '-b', '--bidirectional', '-F', '--CPU-freq', '--report_gbits',
               '-n', '--iters', '-a', '--all', '-h', '--help', '--use_cuda', '--use_cuda_bus_id', '--use_cuda_dmabuf')
MAX_SECONDS = 3600
MAX_SIZE = 1 << 31


def _whole(value, name, low, high):
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise PerftestInputError('%s must be a whole number from %d to %d, got %s' % (name, low, high, _quote(repr(value), 60)))
    return value


def _words(value, name):
    if value is None:
        return []
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v and '\n' not in v for v in value):
        raise PerftestInputError('%s must be a list of command-line words, got %s' % (name, _quote(repr(value), 80)))
    return list(value)


def bw_argv(path, device, ib_port=1, gid_index=None, tcp_port=18515, size=8388608, seconds=5, bidirectional=True,
            cuda=None, extra=None, server=None):
    """The command line of one side of an ``ib_write_bw`` pair (perftest's own options).

    ``server`` None gives the server (it waits for one client on ``tcp_port``), an address the client
    that connects there. ``-d``/``-i`` name the HCA and port of the rail, ``-x`` the GID index (RoCE:
    the RoCE v2 IPv4 GID rdma_facts picked; None on InfiniBand, where perftest needs none), ``-D`` a
    duration in seconds (every run ends on its own), ``-F`` no failure on CPU frequency scaling,
    ``--report_gbits`` figures in Gb/s, ``-b`` both directions at once (the figure is both added).
    ``cuda``: the options of :func:`cuda_args`; ``extra``: the site's further options, which may not
    set any of OWN_OPTIONS.
    """
    if not isinstance(path, str) or not path.strip():
        raise PerftestInputError('path must name the ib_write_bw program, got %s' % _quote(repr(path), 80))
    if not isinstance(device, str) or not re.match(r'^[A-Za-z0-9_.:-]+$', device):
        raise PerftestInputError('device must be an RDMA device name (mlx5_0), got %s' % _quote(repr(device), 80))
    _whole(ib_port, 'ib_port', 1, 255)
    if gid_index is not None:
        _whole(gid_index, 'gid_index', 0, 65535)
    _whole(tcp_port, 'tcp_port', 1, 65535)
    _whole(size, 'size', 1, MAX_SIZE)
    _whole(seconds, 'seconds', 1, MAX_SECONDS)
    cuda = _words(cuda, 'cuda')
    extra = _words(extra, 'extra')
    clash = [word for word in extra if word.split('=', 1)[0] in OWN_OPTIONS]
    if clash:
        raise PerftestInputError('extra arguments may not set %s: the acceptance run sets them itself (%s)'
                                 % (', '.join(clash), ' '.join(OWN_OPTIONS)))
    if server is not None and (not isinstance(server, str) or not re.match(r'^[A-Za-z0-9_.:%-]+$', server)):
        raise PerftestInputError('server must be the address of the server side, got %s' % _quote(repr(server), 80))
    argv = [path, '-d', device, '-i', str(ib_port)]
    if gid_index is not None:
        argv += ['-x', str(gid_index)]
    argv += ['-p', str(tcp_port), '-s', str(size), '-D', str(seconds), '-F', '--report_gbits']
    if bidirectional:
        argv.append('-b')
    argv += cuda + extra
    if server is not None:
        argv.append(server)
    return argv


def cuda_args(support, gpu_address=None, gpus=None, dmabuf=False):
    """The perftest options that put the buffers in the GPU nearest the HCA (GPUDirect RDMA):
    ``{args, gpu, note, error}``.

    ``support`` is :func:`cuda_support` of this node's perftest; ``gpu_address`` the PCI address of
    the rail's nearest GPU (fabric_matrix.nccl_rails ``gpu``); ``gpus`` the node's GPUs as gpu_facts
    lists them (``index``, ``pci_address``), to find that GPU's index. ``--use_cuda_bus_id=<address>``
    where perftest has it, else ``--use_cuda=<index>``; with ``dmabuf`` also ``--use_cuda_dmabuf``.
    ``error`` says why GPU memory cannot be measured (a perftest built without CUDA or without DMA-BUF):
    the pair is then measured in host memory and the run says so.
    """
    if not isinstance(support, dict) or 'cuda' not in support:
        raise PerftestInputError('support must be the result of perftest cuda_support (ib_write_bw --help)')
    if gpus is not None and not isinstance(gpus, (list, tuple)):
        raise PerftestInputError('gpus must be the list of GPU devices of gpu_facts, got %s' % _quote(repr(gpus), 80))
    if not support['cuda']:
        return {'args': [], 'gpu': None, 'note': None,
                'error': 'perftest was built without CUDA (ib_write_bw --help lists no --use_cuda): GPUDirect RDMA '
                         'cannot be measured with it; install a perftest built with CUDA (validate_perftest_path) '
                         'or set validate_gpudirect=false'}
    if dmabuf and not support.get('dmabuf'):
        return {'args': [], 'gpu': None, 'note': None,
                'error': 'perftest has no --use_cuda_dmabuf (built without DMA-BUF support): GPUDirect RDMA over '
                         'DMA-BUF cannot be measured with it; install a newer perftest built with CUDA'}
    address = gpu_address.lower() if isinstance(gpu_address, str) and gpu_address else None
    index, note = None, None
    for gpu in gpus or []:
        if isinstance(gpu, dict) and address and str(gpu.get('pci_address') or '').lower() == address \
                and isinstance(gpu.get('index'), int) and not isinstance(gpu.get('index'), bool):
            index = gpu['index']
    if address and support.get('cuda_bus_id'):
        args = ['--use_cuda_bus_id=%s' % address]
    elif index is not None:
        args = ['--use_cuda=%d' % index]
    else:
        args = ['--use_cuda=0']
        note = ('GPU 0 used: %s' % ('no GPU shares a PCIe switch with the HCA' if not address
                                    else 'the GPU at %s is not in the GPU list' % address))
    if dmabuf:
        args.append('--use_cuda_dmabuf')
    return {'args': args, 'gpu': address if address else index, 'note': note, 'error': None}


def pair_result(client_output, owner=None, server_output=None, client_rc=None):
    """One pair of one rail as the fabric verdict takes it, from the client's output, who held the
    server's port (fabric_matrix.server_owner) and the server's own output.

    A server that was not ours (``owner.cause`` ``port_taken``) makes the pair "port taken": no client
    ran against it and no node is blamed. A server that never listened, or a client that failed, is a
    failed measurement quoting perftest (the server's own error first: ``Couldn't listen to port``
    makes it port taken too). A client killed by its time limit (``timeout`` exit 124/137) says so.
    Returns :func:`measurement`'s dict.
    """
    if owner is not None and not (isinstance(owner, dict) and 'ours' in owner):
        raise PerftestInputError('owner must be the result of fabric_matrix.server_owner, got %s' % _quote(repr(owner), 80))
    server = parse(server_output) if server_output else None
    base = {'gbps': None, 'error': None, 'cause': None, 'bytes': None, 'bidirectional': False, 'units': None}
    if owner is not None and not owner['ours']:
        if owner.get('cause') == 'port_taken' or (server and 'port_taken' in server['causes']):
            return dict(base, error='port taken: %s' % owner.get('reason'), cause='port_taken')
        said = '; '.join(server['errors'][:2]) if server and server['errors'] else 'it printed no error'
        return dict(base, error='our ib_write_bw server did not listen (%s): %s' % (owner.get('reason'), _quote(said)))
    result = measurement(client_output)
    if result['error'] and client_rc in (124, 137):
        result = dict(result, error='ib_write_bw client stopped by its time limit (timeout exit %d): %s'
                      % (client_rc, result['error']))
    if result['error'] and server and server['errors']:
        cause = 'port_taken' if 'port_taken' in server['causes'] else result['cause']
        result = dict(result, error='%s; server: %s' % (result['error'], '; '.join(server['errors'][:2])), cause=cause)
    return result
