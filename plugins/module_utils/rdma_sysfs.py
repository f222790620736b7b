# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""RDMA adapters (InfiniBand and RoCE HCAs) from sysfs: records and a verdict.

Reads only files, never runs a program, has no Ansible imports: the ``rdma_facts`` module calls
:func:`collect` and :func:`build_facts`; the node health program can reuse them unchanged.
Every path is taken under ``sysfs_root`` (``/sys`` on a host, a directory tree in tests).
Python 3.9+.

What is read (see docs/rdma-facts.md):

- ``class/infiniband/<hca>/``: ``fw_ver``, ``board_id``, ``node_guid``, ``sys_image_guid``,
  ``hca_type``, ``hw_rev``, ``node_type``, ``node_desc``; the ``device`` link gives the PCI
  function, whose ``net/`` lists the HCA's network interfaces.
- ``.../ports/<n>/``: ``link_layer``, ``state``, ``phys_state``, ``rate``, ``lid``, ``sm_lid``,
  ``lid_mask_count``, ``cap_mask``, the GID table ``gids/<i>`` with ``gid_attrs/types/<i>`` and
  ``gid_attrs/ndevs/<i>``.
- ``class/net/<netdev>/mtu``: the RoCE active MTU is derived from it the way the kernel does.
- ``bus/pci/devices/<bridge>/config``: the ACS control register of the PCIe bridges between an
  HCA and the NVIDIA GPUs under the same PCIe switch (full config space is root-only).
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import errno
import ipaddress
import json
import math
import os
import re
import stat
import struct

STATUSES = ('ok', 'warning', 'critical', 'unknown')
_RANK = {'ok': 0, 'unknown': 1, 'warning': 2, 'critical': 3}

NVIDIA_VENDOR = 0x10de
_PCI_ADDRESS = re.compile(r'^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$')
# "200 Gb/sec (4X HDR)", "2.5 Gb/sec (1X)" (SDR prints no speed name), "53.125 Gb/sec (1X HDR)".
# ASCII digits only (str.isdigit() and \d take "²" and other Unicode digits), and bounded: a rate
# of more digits than any link has is garbage, not a number to convert.
_RATE = re.compile(r'^[ \t]*([0-9]{1,6}(?:\.[0-9]{1,6})?)[ \t]*Gb/sec[ \t]*\([ \t]*([0-9]{1,3})X[ \t]*([A-Za-z0-9]{0,16})[ \t]*\)')
# "4: ACTIVE", "5: LinkUp", "7: Phy Test", "9: <unknown>".
_NUMBERED = re.compile(r'^\s*([0-9]{1,6})\s*:\s*(.*?)\s*$', re.S)
# Names of port and GID-table entries: the kernel writes small decimal numbers.
_INDEX_NAME = re.compile(r'^[0-9]{1,6}\Z')
# A name under /sys/class/infiniband or .../net this module reports: valid UTF-8 (os.listdir gives
# undecodable bytes as surrogates), no control character, no more than a file name holds.
_CONTROL = re.compile('[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]')
# Largest sysfs attribute read (the kernel's show() writes at most one page); the PCI config space
# of a PCIe function is 4096 bytes. A larger file is not a sysfs attribute: it is refused, not read.
MAX_TEXT_BYTES = 4096
MAX_CONFIG_BYTES = 4096
# Characters of a value (a file's content, an option) a message quotes.
QUOTE_LIMIT = 80

ACTIVE_STATES = ('ACTIVE', 'ACTIVE_DEFER')
LINK_UP = 'LinkUp'
GID_TYPE_ROCE_V2 = 'RoCE v2'

# IB MTUs a port can run; RoCE takes the largest that fits the netdev MTU minus the RoCE v2
# headers the kernel subtracts (GRH 40 + UDP 8 + BTH 12 + XRC 4 + AtomicETH 28 + ICRC 4).
IB_MTUS = (4096, 2048, 1024, 512, 256)
ROCE_MTU_OVERHEAD = 96

# PCIe extended capability ACS (ID 0x000d): control register at +6. The bits that send
# peer-to-peer traffic up to the root complex or block it (lspci's ACSCtl names).
PCI_EXT_CAP_START = 0x100
PCI_EXT_CAP_ID_ACS = 0x000d
ACS_CONTROL_BITS = (
    (0x0001, 'SrcValid'),
    (0x0002, 'TransBlk'),
    (0x0004, 'ReqRedir'),
    (0x0008, 'CmpltRedir'),
    (0x0010, 'UpstreamFwd'),
    (0x0020, 'EgressCtrl'),
    (0x0040, 'DirectTrans'),
)
ACS_P2P_BLOCKING = ('TransBlk', 'ReqRedir', 'CmpltRedir', 'UpstreamFwd', 'EgressCtrl')


class RdmaOptionError(ValueError):
    pass


def quote(text, limit=QUOTE_LIMIT):
    """``text`` for a message: control characters and non-ASCII escaped (\\n, \\u2028, ...), at most
    ``limit`` characters. Plain ASCII text is unchanged."""
    text = text if isinstance(text, str) else str(text)
    shown = json.dumps(text[:limit + 1], ensure_ascii=True)[1:-1]
    return shown if len(shown) <= limit else shown[:limit - 3] + '...'


def plain_name(name):
    """True for a directory entry this module reports under its own name (see _CONTROL)."""
    return isinstance(name, str) and 0 < len(name) <= 255 and not _CONTROL.search(name)


def _read_bounded(path, limit):
    """``(bytes, error)`` of a regular file of at most ``limit`` bytes; ``(None, None)`` when absent.

    Opened non-blocking, so a FIFO (or a device) placed where an attribute should be cannot hang the
    read: anything but a regular file is an error, as is a file longer than ``limit``.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, 'O_NONBLOCK', 0) | getattr(os, 'O_NOCTTY', 0))
    except (IOError, OSError, ValueError) as exc:
        if getattr(exc, 'errno', None) in (errno.ENOENT, errno.ENOTDIR):
            return None, None
        return None, getattr(exc, 'strerror', None) or str(exc)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = ('a directory' if stat.S_ISDIR(mode) else 'a FIFO' if stat.S_ISFIFO(mode)
                    else 'a device' if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else 'a special file')
            return None, 'not a regular file (%s)' % kind
        chunks = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            return None, 'larger than %d bytes, not a sysfs attribute' % limit
        return b''.join(chunks), None
    except (IOError, OSError) as exc:
        return None, exc.strerror or str(exc)
    finally:
        os.close(fd)


def read_text(path):
    """``(text, error)``: the file decoded with replacement and stripped; ``(None, None)`` when absent.

    sysfs answers a read of an attribute the device cannot report with an error (EINVAL, EIO...):
    that is ``(None, 'reason')``, never an exception. So is a file that is not a regular file (a FIFO
    is never waited on) or longer than MAX_TEXT_BYTES.
    """
    data, error = _read_bounded(path, MAX_TEXT_BYTES)
    if data is None:
        return None, error
    return data.decode('utf-8', 'replace').strip(), None


def read_bytes(path):
    """``(bytes, error)`` of a binary attribute (PCI config space), bounded like :func:`read_text`."""
    return _read_bounded(path, MAX_CONFIG_BYTES)


def _listdir(path):
    """``(names, error)``; ``(None, None)`` when the directory does not exist."""
    try:
        return sorted(os.listdir(path)), None
    except (IOError, OSError, ValueError) as exc:
        if getattr(exc, 'errno', None) in (errno.ENOENT, errno.ENOTDIR):
            return None, None
        return None, getattr(exc, 'strerror', None) or str(exc)


def _natural_key(name):
    """mlx5_2 before mlx5_10: runs of ASCII digits compare as numbers (by length once leading zeros are
    gone, then digit by digit: no int() of a run of any length); other characters, Unicode digits such
    as "²" included, compare as text."""
    parts = re.split(r'([0-9]+)', name)
    return [(len(part.lstrip('0')), part.lstrip('0'), part) if index % 2 else part for index, part in enumerate(parts)]


def parse_numbered(text):
    """``'4: ACTIVE'`` -> ``(4, 'ACTIVE')``; anything else -> ``(None, text)``."""
    if text is None:
        return None, None
    match = _NUMBERED.match(text)
    if not match:
        return None, text
    return int(match.group(1)), match.group(2)


def parse_rate(text):
    """``'200 Gb/sec (4X HDR)'`` -> ``{'rate_gbps': 200, 'width': '4X', 'lanes': 4, 'speed': 'HDR'}``.

    The kernel prints no speed name for SDR; ``speed`` is then ``'SDR'``. Unparsed text gives Nones.
    """
    empty = {'rate_gbps': None, 'width': None, 'lanes': None, 'speed': None}
    if not isinstance(text, str):
        return empty
    match = _RATE.match(text)
    if not match:
        return empty
    value = float(match.group(1))
    lanes = int(match.group(2))
    if not math.isfinite(value):  # pragma: no cover - six digits cannot overflow; kept for the rule
        return empty
    return {'rate_gbps': int(value) if value.is_integer() else value, 'width': '%dX' % lanes, 'lanes': lanes,
            'speed': match.group(3) or 'SDR'}


def parse_hex_int(text):
    """``'0x1f'`` or ``'31'`` -> 31 (at most 32 digits, ASCII only); anything else -> None."""
    if not isinstance(text, str):
        return None
    text = text.strip()
    if not re.match(r'^(0[xX][0-9a-fA-F]{1,32}|[+-]?[0-9]{1,32})\Z', text):
        return None
    return int(text, 16) if text.lower().startswith('0x') else int(text)


def format_guid(text):
    """sysfs ``'946d:ae03:00cd:e72c'`` -> ``'0x946dae0300cde72c'`` (the form ibstat prints)."""
    if text is None:
        return None
    digits = text.replace(':', '').lower()
    if len(digits) != 16 or not re.match(r'^[0-9a-f]{16}$', digits):
        return text
    return '0x' + digits


def describe_gid(gid_text):
    """``{'zero', 'ipv4', 'link_local'}`` of a GID in sysfs form (an IPv6 address)."""
    try:
        address = ipaddress.IPv6Address(gid_text)
    except ValueError:
        return None
    mapped = address.ipv4_mapped
    return {'zero': int(address) == 0, 'ipv4': str(mapped) if mapped is not None else None,
            'link_local': address.is_link_local}


def roce_active_mtu(netdev_mtu):
    """IB MTU a RoCE port runs on a netdev of this MTU (the kernel's rule); None when unknown or too small."""
    if netdev_mtu is None:
        return None
    room = netdev_mtu - ROCE_MTU_OVERHEAD
    for mtu in IB_MTUS:
        if room >= mtu:
            return mtu
    return None


def decode_acs_control(config):
    """ACS control register from a PCI config space dump (bytes).

    ``{'readable': False}`` when the dump stops before the extended capabilities (an unprivileged
    read returns 64 bytes) or reads as all ones (the device did not answer),
    ``{'readable': True, 'capability': False}`` without an ACS capability,
    else the control word, the set flags (lspci names) and ``enabled`` (any P2P redirect/block bit).
    """
    if config is None or len(config) < PCI_EXT_CAP_START + 4:
        return {'readable': False, 'capability': None, 'control': None, 'flags': [], 'enabled': None}
    offset = PCI_EXT_CAP_START
    seen = set()
    while offset and offset not in seen and offset + 4 <= len(config) and offset >= PCI_EXT_CAP_START:
        seen.add(offset)
        header = struct.unpack_from('<I', config, offset)[0]
        if header == 0xffffffff:
            # All ones: the device did not answer the config read (gone or in reset).
            return {'readable': False, 'capability': None, 'control': None, 'flags': [], 'enabled': None}
        if header == 0:
            break
        cap_id = header & 0xffff
        if cap_id == PCI_EXT_CAP_ID_ACS:
            if offset + 8 > len(config):
                return {'readable': False, 'capability': True, 'control': None, 'flags': [], 'enabled': None}
            control = struct.unpack_from('<H', config, offset + 6)[0]
            flags = [name for bit, name in ACS_CONTROL_BITS if control & bit]
            return {'readable': True, 'capability': True, 'control': control, 'flags': flags,
                    'enabled': any(name in ACS_P2P_BLOCKING for name in flags)}
        offset = (header >> 20) & 0xffc
    return {'readable': True, 'capability': False, 'control': None, 'flags': [], 'enabled': False}


def _pci_chain(sysfs_root, link):
    """PCI addresses from the root port down to the device that ``link`` resolves to, or None."""
    real = os.path.realpath(link)
    root = os.path.join(os.path.realpath(sysfs_root), '')
    if not os.path.isdir(real) or not real.startswith(root):
        return None
    parts = [p for p in os.path.relpath(real, root).split(os.sep) if _PCI_ADDRESS.match(p)]
    if not parts or not _PCI_ADDRESS.match(os.path.basename(real)):
        return None
    return [p.lower() for p in parts]


def nvidia_gpu_chains(sysfs_root):
    """``{address: chain}`` of NVIDIA display/3D controllers (class 0x03xx), or None when unreadable."""
    base = os.path.join(sysfs_root, 'bus', 'pci', 'devices')
    names, error = _listdir(base)
    if names is None:
        return None if error else {}
    found = {}
    for name in names:
        vendor = parse_hex_int(read_text(os.path.join(base, name, 'vendor'))[0])
        pci_class = parse_hex_int(read_text(os.path.join(base, name, 'class'))[0])
        if vendor != NVIDIA_VENDOR or pci_class is None or (pci_class >> 16) != 0x03:
            continue
        chain = _pci_chain(sysfs_root, os.path.join(base, name))
        if chain is not None:
            found[name.lower()] = chain
    return found


def acs_path(hca_chain, gpu_chains):
    """Bridges on the P2P path between the HCA and each GPU that shares a PCIe switch with it.

    Returns ``(gpus, bridges)``: the GPUs below a bridge the HCA is also below, and the bridges
    below the lowest common one on both sides (the switch ports that would redirect the traffic).
    GPUs reachable only through the root complex are not on a switch path and are not judged.
    """
    gpus = []
    bridges = []
    for address in sorted(gpu_chains):
        chain = gpu_chains[address]
        common = 0
        while common < min(len(chain), len(hca_chain)) - 1 and chain[common] == hca_chain[common]:
            common += 1
        if common == 0:
            continue
        gpus.append(address)
        for bridge in hca_chain[common:-1] + chain[common:-1]:
            if bridge not in bridges:
                bridges.append(bridge)
    return gpus, bridges


# Why a port set is the node's fabric (fabric_ports' ``basis``).
FABRIC_BASES = ('devices', 'gpu_switch', 'link_layer')


def beside_gpu(hca):
    """Whether an HCA record (:func:`collect`, :func:`build_facts`) shares a PCIe switch with an NVIDIA GPU."""
    return isinstance(hca, dict) and bool((hca.get('pcie_acs') or {}).get('gpus'))


def acs_bridges(hcas):
    """PCI addresses of the switch ports with an ACS capability on the P2P paths between HCAs and the GPUs
    under the same PCIe switch (:func:`acs_path`), sorted, each once: what the rdma role's opt-in unit
    clears at boot. Bridges whose ACS is already off are kept (the unit cleared them, and must again after
    the next boot, which sets ACS anew); a bridge whose config space could not be read (rdma_facts run as
    a normal user) is left out: setpci would fail on one without the capability."""
    found = set()
    for hca in hcas or []:
        for bridge in ((hca or {}).get('pcie_acs') or {}).get('bridges') or []:
            if bridge.get('capability') is True and bridge.get('address'):
                found.add(str(bridge['address']).lower())
    return sorted(found)


def fabric_ports(hcas, link_layer=None, devices=None):
    """The RDMA ports a node's jobs use unless the site names them: ``{'ports', 'basis', 'others'}``.

    ``hcas``: :func:`collect`'s or :func:`build_facts`' ``hcas``. The candidates are the ports whose
    link layer is ``link_layer`` ('InfiniBand', 'Ethernet'; every layer when None), not ignored, of the
    ``devices`` named (HCA names; every HCA when empty). When devices are named they are the choice
    (``basis`` 'devices'). Otherwise, when an HCA with a candidate port shares a PCIe switch with an
    NVIDIA GPU (``pcie_acs.gpus``), only such HCAs' ports are the fabric (``basis`` 'gpu_switch'): on
    HGX/DGX nodes each compute rail sits under a switch beside its GPUs, while storage and front-end
    adapters (a second ConnectX, a BlueField) hang off other root ports, and NCCL channels, lossless
    QoS and health drains belong on the rails only. Without such an HCA (no GPU on the bus, or GPUs
    and adapters on separate root ports) every candidate is the fabric (``basis`` 'link_layer').
    ``ports`` and ``others`` (the candidates left out) are ``hca:port`` strings, NCCL_IB_HCA's form.
    """
    wanted = set(devices or [])
    candidates = []
    for hca in hcas or []:
        name = hca.get('name')
        if wanted and name not in wanted:
            continue
        beside = beside_gpu(hca)
        for port in hca.get('ports') or []:
            if port.get('ignored') or (link_layer is not None and port.get('link_layer') != link_layer):
                continue
            candidates.append(('%s:%s' % (name, port.get('port')), beside))
    if wanted:
        return {'ports': [c[0] for c in candidates], 'basis': 'devices', 'others': []}
    if any(beside for _entry, beside in candidates):
        return {'ports': [c[0] for c in candidates if c[1]], 'basis': 'gpu_switch',
                'others': [c[0] for c in candidates if not c[1]]}
    return {'ports': [c[0] for c in candidates], 'basis': 'link_layer', 'others': []}


def _issue(hca, port, check, severity, message):
    return {'hca': hca, 'port': port, 'check': check, 'severity': severity, 'message': message}


def _read_port(port_dir):
    """Raw attributes of one port: ``(values, errors)`` where errors maps attribute -> reason."""
    values = {}
    errors = {}
    for name in ('link_layer', 'state', 'phys_state', 'rate', 'lid', 'sm_lid', 'lid_mask_count', 'cap_mask'):
        text, error = read_text(os.path.join(port_dir, name))
        values[name] = text
        if error:
            errors[name] = error
    return values, errors


def _read_gids(port_dir):
    """Non-zero GIDs with type and netdev; ``(gids, errors)``."""
    gids = []
    errors = []
    names, error = _listdir(os.path.join(port_dir, 'gids'))
    if error:
        errors.append('gids: %s' % quote(error))
    for name in sorted((n for n in names or [] if _INDEX_NAME.match(n)), key=int):
        text, error = read_text(os.path.join(port_dir, 'gids', name))
        if error:
            errors.append('gids/%s: %s' % (name, quote(error)))
            continue
        info = describe_gid(text) if text else None
        if info is None or info['zero']:
            continue
        gid_type, type_error = read_text(os.path.join(port_dir, 'gid_attrs', 'types', name))
        if type_error:
            errors.append('gid_attrs/types/%s: %s' % (name, quote(type_error)))
        # An IB GID has no netdev: the kernel answers EINVAL, which is not a fault.
        ndev = read_text(os.path.join(port_dir, 'gid_attrs', 'ndevs', name))[0]
        gids.append({'index': int(name), 'gid': text, 'type': gid_type or None, 'netdev': ndev or None,
                     'ipv4': info['ipv4'], 'link_local': info['link_local']})
    return gids, errors


def _hca_netdevs(sysfs_root, hca_dir):
    """``{netdev: dev_port}`` of the PCI function's interfaces (dev_port None when unreadable)."""
    names, _error = _listdir(os.path.join(hca_dir, 'device', 'net'))
    found = {}
    for name in names or []:
        if plain_name(name):  # the kernel refuses white space and "/" in interface names
            found[name] = parse_hex_int(read_text(os.path.join(hca_dir, 'device', 'net', name, 'dev_port'))[0])
    return found


def _port_netdevs(port_num, port_count, gids, pci_netdevs):
    netdevs = []
    for gid in gids:
        if gid['netdev'] and plain_name(gid['netdev']) and gid['netdev'] not in netdevs:
            netdevs.append(gid['netdev'])
    for name in sorted(pci_netdevs, key=_natural_key):
        dev_port = pci_netdevs[name]
        matches = dev_port == port_num - 1 if dev_port is not None else port_count == 1
        if matches and name not in netdevs:
            netdevs.append(name)
    return netdevs


def read_port(sysfs_root, hca, hca_dir, port_name, port_count, pci_netdevs):
    """One port record and the read problems found on it."""
    port_dir = os.path.join(hca_dir, 'ports', port_name)
    port_num = int(port_name)
    raw, errors = _read_port(port_dir)
    state_num, state = parse_numbered(raw['state'])
    phys_num, phys = parse_numbered(raw['phys_state'])
    rate = parse_rate(raw['rate'])
    link_layer = raw['link_layer']
    is_ib = link_layer == 'InfiniBand'
    gids, gid_errors = _read_gids(port_dir)
    netdevs = _port_netdevs(port_num, port_count, gids, pci_netdevs)

    roce_v2 = [g for g in gids if g['type'] == GID_TYPE_ROCE_V2]
    ipv4_v2 = [g for g in roce_v2 if g['ipv4']]
    picked = ipv4_v2[0] if ipv4_v2 else None
    mtu_netdev = picked['netdev'] if picked and picked['netdev'] else (netdevs[0] if netdevs else None)
    netdev_mtu = None
    if mtu_netdev:
        netdev_mtu = parse_hex_int(read_text(os.path.join(sysfs_root, 'class', 'net', mtu_netdev, 'mtu'))[0])
    active_mtu = roce_active_mtu(netdev_mtu) if link_layer == 'Ethernet' else None

    record = {
        'port': port_num,
        'link_layer': link_layer,
        'state': state,
        'state_code': state_num,
        'phys_state': phys,
        'phys_state_code': phys_num,
        'rate': raw['rate'],
        'rate_gbps': rate['rate_gbps'],
        'width': rate['width'],
        'speed': rate['speed'],
        'lid': parse_hex_int(raw['lid']) if is_ib else None,
        'sm_lid': parse_hex_int(raw['sm_lid']) if is_ib else None,
        'lmc': parse_hex_int(raw['lid_mask_count']) if is_ib else None,
        'cap_mask': raw['cap_mask'],
        'netdevs': netdevs,
        'netdev_mtu': netdev_mtu,
        'netdev_mtu_from': mtu_netdev if netdev_mtu is not None else None,
        'active_mtu': active_mtu,
        'gids': gids,
        'roce_v2_ipv4_gid_index': picked['index'] if picked else None,
        'roce_v2_ipv4_gid': picked['gid'] if picked else None,
        'roce_v2_ipv4_address': picked['ipv4'] if picked else None,
        'roce_v2_gid_count': len(roce_v2),
        'ignored': False,
    }
    problems = []
    for name in ('link_layer', 'state', 'phys_state', 'rate'):
        if name in errors:
            problems.append(_issue(hca, port_num, 'sysfs', 'unknown', '%s port %d: cannot read %s: %s'
                                   % (hca, port_num, name, quote(errors[name]))))
        elif raw[name] is None:
            problems.append(_issue(hca, port_num, 'sysfs', 'unknown', '%s port %d: %s is missing in sysfs'
                                   % (hca, port_num, name)))
    for name in ('lid', 'sm_lid'):
        if is_ib and name in errors:
            problems.append(_issue(hca, port_num, 'sysfs', 'unknown', '%s port %d: cannot read %s: %s'
                                   % (hca, port_num, name, quote(errors[name]))))
    if raw['rate'] is not None and rate['rate_gbps'] is None:
        problems.append(_issue(hca, port_num, 'sysfs', 'unknown', "%s port %d: unrecognised rate '%s'"
                               % (hca, port_num, quote(raw['rate']))))
    if gid_errors:
        problems.append(_issue(hca, port_num, 'sysfs', 'info', '%s port %d: GID table partly unreadable (%s)'
                               % (hca, port_num, '; '.join(gid_errors[:3]))))
    return record, problems


def read_hca(sysfs_root, name, gpu_chains):
    hca_dir = os.path.join(sysfs_root, 'class', 'infiniband', name)
    problems = []
    attrs = {}
    for attr in ('fw_ver', 'board_id', 'node_guid', 'sys_image_guid', 'hca_type', 'hw_rev', 'node_type', 'node_desc'):
        text, error = read_text(os.path.join(hca_dir, attr))
        attrs[attr] = text or None
        if error:
            problems.append(_issue(name, None, 'sysfs', 'unknown', '%s: cannot read %s: %s' % (name, attr, quote(error))))

    chain = _pci_chain(sysfs_root, os.path.join(hca_dir, 'device'))
    pci_address = chain[-1] if chain else None
    numa_node = None
    if chain:
        numa_node = parse_hex_int(read_text(os.path.join(os.path.realpath(os.path.join(hca_dir, 'device')),
                                                         'numa_node'))[0])
    pcie_acs = {'gpus': [], 'bridges': [], 'enabled': None}
    if chain and gpu_chains is not None:
        gpus, bridges = acs_path(chain, gpu_chains)
        pcie_acs['gpus'] = gpus
        for bridge in bridges:
            config, _error = read_bytes(os.path.join(sysfs_root, 'bus', 'pci', 'devices', bridge, 'config'))
            decoded = decode_acs_control(config)
            decoded['address'] = bridge
            pcie_acs['bridges'].append(decoded)
        states = [b['enabled'] for b in pcie_acs['bridges']]
        if any(states):
            pcie_acs['enabled'] = True
        elif gpus and all(s is False for s in states):
            pcie_acs['enabled'] = False

    pci_netdevs = _hca_netdevs(sysfs_root, hca_dir)
    port_names, error = _listdir(os.path.join(hca_dir, 'ports'))
    # Port directories are named by number; anything else there ("²", "1.bak", ...) is not a port.
    port_names = [p for p in (port_names or []) if _INDEX_NAME.match(p)]
    if error or not port_names:
        problems.append(_issue(name, None, 'sysfs', 'unknown', '%s: no ports readable in sysfs%s'
                               % (name, ' (%s)' % quote(error) if error else '')))
    ports = []
    for port_name in sorted(port_names, key=int):
        record, port_problems = read_port(sysfs_root, name, hca_dir, port_name, len(port_names), pci_netdevs)
        ports.append(record)
        problems.extend(port_problems)
    hca = {
        'name': name,
        'hca_type': attrs['hca_type'],
        'fw_ver': attrs['fw_ver'],
        'board_id': attrs['board_id'],
        'node_guid': format_guid(attrs['node_guid']),
        'sys_image_guid': format_guid(attrs['sys_image_guid']),
        'hw_rev': attrs['hw_rev'],
        'node_type': attrs['node_type'],
        'node_desc': attrs['node_desc'],
        'pci_address': pci_address,
        'numa_node': numa_node if numa_node is None or numa_node >= 0 else None,
        'netdevs': sorted(pci_netdevs, key=_natural_key),
        'ports': ports,
        'pcie_acs': pcie_acs,
    }
    return hca, problems


def collect(sysfs_root='/sys'):
    """Everything :func:`build_facts` judges, read from ``sysfs_root``."""
    base = os.path.join(sysfs_root, 'class', 'infiniband')
    names, error = _listdir(base)
    snapshot = {'sysfs_root': sysfs_root, 'class_dir': base, 'class_present': names is not None,
                'class_error': error, 'hcas': [], 'problems': [], 'gpus': None, 'names_not_read': 0}
    if not names:
        return snapshot
    gpu_chains = nvidia_gpu_chains(sysfs_root)
    snapshot['gpus'] = sorted(gpu_chains) if gpu_chains is not None else None
    for name in sorted(names, key=_natural_key):
        if not plain_name(name):
            # Not a name the kernel gives (undecodable bytes, a control character): reported, not read,
            # so that no record, message or metric label carries it.
            snapshot['problems'].append(_issue(None, None, 'sysfs', 'unknown', '%s has an entry whose name is not '
                                               'printable text ("%s"): not read' % (base, quote(name))))
            snapshot['names_not_read'] += 1
            continue
        hca, problems = read_hca(sysfs_root, name, gpu_chains)
        snapshot['hcas'].append(hca)
        snapshot['problems'].extend(problems)
    return snapshot


def normalize_options(expected_rate_gbps=None, ignore_ports=None):
    """Validated options: ``(expected_rate_gbps or None, set of 'hca' / 'hca/port' strings)``."""
    if expected_rate_gbps is not None:
        if isinstance(expected_rate_gbps, bool) or not isinstance(expected_rate_gbps, (int, float)) \
                or not math.isfinite(expected_rate_gbps) or expected_rate_gbps <= 0:
            # NaN would pass "<= 0" and then no rate is ever below it: the rate check would be off.
            raise RdmaOptionError('expected_rate_gbps=%s; accepted: a number of Gb/s greater than 0 (finite)'
                                  % _brief(expected_rate_gbps))
    if ignore_ports is not None and not isinstance(ignore_ports, (list, tuple, set, frozenset)):
        # A string is not split into its characters ("mlx5_0" would ignore "m", "l", "x", ...).
        raise RdmaOptionError('ignore_ports=%s is a %s; accepted: a list of HCA names (mlx5_0) or HCA/port '
                              '(mlx5_0/1), such as ["mlx5_0"]' % (_brief(ignore_ports), type(ignore_ports).__name__))
    ignored = set()
    for item in ignore_ports or []:
        if not isinstance(item, str) or not re.match(r'^[^/\s]{1,255}(/[1-9][0-9]{0,5})?\Z', item):
            raise RdmaOptionError('ignore_ports item %s; accepted: an HCA name (mlx5_0) or HCA/port (mlx5_0/1)'
                                  % _brief(item))
        ignored.add(item)
    return expected_rate_gbps or None, ignored


def _brief(value):
    """repr() of an option value for a message, at most QUOTE_LIMIT characters (a huge value is not copied)."""
    if isinstance(value, str) and len(value) > QUOTE_LIMIT:
        value = value[:QUOTE_LIMIT]
    elif isinstance(value, (list, tuple, set, frozenset, dict)) and len(value) > 8:
        return '<a %s of %d items>' % (type(value).__name__, len(value))
    try:
        text = repr(value)
    except RecursionError:  # pragma: no cover - a list that contains itself
        text = '<%s>' % type(value).__name__
    return text if len(text) <= QUOTE_LIMIT else text[:QUOTE_LIMIT - 3] + '...'


def _label(hca, port):
    return '%s port %s' % (hca['name'], port['port'])


def check_port(hca, port, expected_rate_gbps):
    issues = []
    name = hca['name']
    num = port['port']
    label = _label(hca, port)
    if port['state'] is not None and port['state'] not in ACTIVE_STATES:
        if port['state'] in ('INIT', 'ARMED') and port['link_layer'] == 'InfiniBand':
            why = 'link is up but no subnet manager has activated it'
        else:
            why = 'physical state %s' % (quote(port['phys_state']) if port['phys_state'] else 'unknown')
        issues.append(_issue(name, num, 'port_state', 'critical', '%s (%s) is %s: %s'
                             % (label, quote(port['link_layer']) if port['link_layer'] else 'unknown link layer',
                                quote(port['state']), why)))
    if port['phys_state'] is not None and port['phys_state'] != LINK_UP:
        issues.append(_issue(name, num, 'port_phys_state', 'critical', '%s: physical state %s, not LinkUp'
                             % (label, quote(port['phys_state']))))
    active = port['state'] in ACTIVE_STATES
    if active and expected_rate_gbps and port['rate_gbps'] is not None and port['rate_gbps'] < expected_rate_gbps:
        issues.append(_issue(name, num, 'port_rate', 'warning', '%s runs at %s Gb/s (%s), below the expected %s Gb/s'
                             % (label, port['rate_gbps'], quote(port['rate']), expected_rate_gbps)))
    if active and port['link_layer'] == 'Ethernet':
        if not port['roce_v2_gid_count']:
            issues.append(_issue(name, num, 'roce_gid', 'critical',
                                 '%s: active Ethernet port without a RoCE v2 GID: RDMA cannot use it (list an '
                                 'adapter that is not meant for RDMA in ignore_ports)' % label))
        elif port['roce_v2_ipv4_gid_index'] is None:
            routable = [g for g in port['gids'] if g['type'] == GID_TYPE_ROCE_V2 and not g['link_local']]
            if routable:
                issues.append(_issue(name, num, 'roce_gid', 'info',
                                     '%s: RoCE v2 GIDs are IPv6 only (index %s); no IPv4-mapped GID'
                                     % (label, ', '.join(str(g['index']) for g in routable))))
            else:
                issues.append(_issue(name, num, 'roce_gid', 'warning',
                                     '%s: only link-local RoCE v2 GIDs, which are not routable; give %s an IP address'
                                     % (label, quote('/'.join(port['netdevs'])) or 'its netdev')))
    return issues


def check_acs(hca):
    acs = hca['pcie_acs']
    enabled = [b for b in acs['bridges'] if b['enabled']]
    if not enabled:
        return []
    where = ', '.join('%s (%s)' % (b['address'], ' '.join(f + '+' for f in b['flags'] if f in ACS_P2P_BLOCKING))
                      for b in enabled)
    return [_issue(hca['name'], None, 'pcie_acs', 'warning',
                   '%s: PCIe ACS enabled on the path to GPU(s) %s: %s; GPUDirect RDMA traffic is redirected '
                   'through the root complex (the rdma role clears it at boot with rdma_pcie_acs_disable: true)'
                   % (hca['name'], ', '.join(acs['gpus']), where))]


def worst_status(issues):
    status = 'ok'
    for item in issues:
        sev = item['severity']
        if sev in _RANK and _RANK[sev] > _RANK[status]:
            status = sev
    return status


def build_facts(snapshot, expected_rate_gbps=None, ignore_ports=None):
    """Facts and verdict for one host from :func:`collect`'s snapshot. Options as :func:`normalize_options`."""
    expected_rate_gbps, ignored = normalize_options(expected_rate_gbps, ignore_ports)
    hcas = snapshot.get('hcas') or []
    issues = []
    skipped = []
    if not hcas:
        if snapshot.get('class_error'):
            issues.append(_issue(None, None, 'sysfs', 'unknown', 'cannot read %s: %s'
                                 % (snapshot.get('class_dir'), quote(snapshot['class_error']))))
        elif snapshot.get('names_not_read'):
            pass  # the entries are there, each reported as unknown: not "empty"
        elif snapshot.get('class_present'):
            issues.append(_issue(None, None, 'rdma_present', 'info',
                                 'no RDMA devices: %s is empty (no HCA, or its driver is not loaded)'
                                 % snapshot.get('class_dir')))
        else:
            issues.append(_issue(None, None, 'rdma_present', 'info',
                                 'no RDMA devices: %s is absent (no HCA, or no RDMA driver loaded)'
                                 % snapshot.get('class_dir')))
    issues.extend(snapshot.get('problems') or [])
    acs_unreadable = []
    for hca in hcas:
        hca_ignored = hca['name'] in ignored
        for port in hca['ports']:
            port['ignored'] = hca_ignored or '%s/%s' % (hca['name'], port['port']) in ignored
            if not port['ignored']:
                issues.extend(check_port(hca, port, expected_rate_gbps))
        if not hca_ignored:
            issues.extend(check_acs(hca))
        acs_unreadable.extend(b['address'] for b in hca['pcie_acs']['bridges']
                              if not b['readable'] and b['address'] not in acs_unreadable)
    if acs_unreadable:
        skipped.append('pcie_acs')
        issues.append(_issue(None, None, 'pcie_acs', 'info',
                             'PCIe ACS not checked on %s: config space not readable (beyond 64 bytes only root '
                             'can read it)'
                             % ', '.join(acs_unreadable)))
    if hcas and snapshot.get('gpus') is None:
        skipped.append('pcie_acs')
        issues.append(_issue(None, None, 'pcie_acs', 'info', 'PCIe ACS not checked: the PCI device list is not readable'))
    port_count = sum(len(h['ports']) for h in hcas)
    return {
        'present': bool(hcas),
        'sysfs_root': snapshot.get('sysfs_root'),
        'count': len(hcas),
        'port_count': port_count,
        'active_port_count': sum(1 for h in hcas for p in h['ports'] if p['state'] in ACTIVE_STATES),
        'link_layers': sorted(set(p['link_layer'] for h in hcas for p in h['ports'] if p['link_layer'])),
        'expected_rate_gbps': expected_rate_gbps,
        'ignore_ports': sorted(ignored),
        'gpus': snapshot.get('gpus'),
        'hcas': hcas,
        'health': {
            'status': worst_status(issues),
            'issues': issues,
            'checks_skipped': sorted(set(skipped)),
        },
    }
