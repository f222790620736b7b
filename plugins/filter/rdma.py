# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Decision code of the rdma role.

Pure functions over strings, lists and dicts: the bad-input errors of the role's preflight
(fabric, stack, DOCA repository, IPoIB subnets and MTUs, RoCE QoS values, subnet manager hosts,
GPUDirect against the driver's choices, NCCL settings), the IPoIB address plan of a host and
the /etc/nccl.conf settings from rdma_facts and variables.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import ipaddress
import math
import re

from ansible_collections.gpucluster.core.plugins.filter.config_values import SHOW_LIMIT, guarded, number_problem
from ansible_collections.gpucluster.core.plugins.module_utils.rdma_stack import (
    doca_el_baseurl, doca_platform_error, nvidia_dkms_rebuilds, rpm_version_offered, stack_reload)
from ansible_collections.gpucluster.core.plugins.module_utils.rdma_sysfs import RdmaOptionError, acs_bridges, fabric_ports, normalize_options

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - only without ansible-core installed
    class AnsibleFilterError(Exception):
        pass


FABRICS = ('none', 'infiniband', 'roce')
STACKS = ('inbox', 'doca')
IPOIB_MODES = ('datagram', 'connected')
RENDERERS = ('auto', 'networkd', 'netplan', 'networkmanager')
SUBNET_MANAGERS = ('none', 'switch', 'host')
GPUDIRECT = ('none', 'dmabuf', 'peermem')
# IPoIB MTU: datagram mode carries the IB MTU (at most 4096) less the 4-byte IPoIB header;
# connected mode up to 65520. Below 1280 IPv6 cannot run and the kernel refuses below 68.
IPOIB_MTU_MAX = {'datagram': 4092, 'connected': 65520}
IPOIB_MTU_MIN = 1280
DMABUF_MIN_KERNEL = (5, 12)
DMABUF_MIN_CUDA = (11, 7)
_IFNAME_RE = re.compile(r'^[A-Za-z0-9_.:-]{1,15}\Z')
_WORD_RE = re.compile(r'^[^\s"\'\\#\x00-\x1f\x7f]+\Z')
_RDMA_DEV_RE = re.compile(r'^[A-Za-z0-9_]{1,64}\Z')
_NCCL_KEY_RE = re.compile(r'^NCCL_[A-Z0-9_]+\Z')
_FPR_RE = re.compile(r'^(?:0X)?(?:[0-9A-F]{40}|[0-9A-F]{64})\Z')
_URL_RE = re.compile(r'^https?://[^\s"\'\\#\x00-\x1f\x7f]+\Z')
# Keys /etc/nccl.conf must not carry through rdma_nccl_extra: debug output belongs to a job, and the GID
# index has its own variable (rdma_nccl_ib_gid_index: checked, or read from rdma_facts), since a wrong one
# breaks RoCE (NVIDIA/nccl#426).
_NCCL_REFUSED_RE = re.compile(r'^NCCL_(DEBUG.*|IB_GID_INDEX)\Z')
# NCCL before 2.21 takes GID index 0 unless told (RoCE v1: no IP header, so no DSCP and no lossless class).
NCCL_AUTO_GID_VERSION = (2, 21)


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


class _Brief(object):
    """A value in a message: its repr() (or text) at most SHOW_LIMIT characters, so no message copies a huge value."""

    def __init__(self, value, text=False):
        self.value = value
        self.text = text

    def _render(self, render):
        value = self.value
        if isinstance(value, str) and len(value) > SHOW_LIMIT:
            value = value[:SHOW_LIMIT]
        elif isinstance(value, (list, tuple, dict, set)) and len(value) > 16:
            return '<a %s of %d items>' % (type(value).__name__, len(value))
        try:
            out = render(value)
        except RecursionError:  # pragma: no cover - a value that contains itself
            out = '<%s>' % type(value).__name__
        return out if len(out) <= SHOW_LIMIT else out[:SHOW_LIMIT - 3] + '...'

    def __repr__(self):
        return self._render(repr)

    def __str__(self):
        return self._render(str) if self.text else self._render(repr)


def _r(value, text=False):
    return _Brief(value, text)


def _choice_error(name, choices, value):
    return '%s must be one of %s (got %r)' % (name, ', '.join(choices), _r(value))


def _version_tuple(text):
    match = re.match(r'^\s*(\d+)\.(\d+)', str(text))
    if not match:
        return None
    return (int(match.group(1)), int(match.group(2)))


def normalize_fingerprint(text):
    """An OpenPGP fingerprint written with or without spaces, in any case -> 40 upper-case hex digits."""
    return re.sub(r'\s+', '', str(text or '')).upper()


def _ipoib_entries(cfg):
    """(index, entry) of rdma_ipoib_interfaces, entries being dicts."""
    entries = cfg.get('rdma_ipoib_interfaces') or []
    if not isinstance(entries, list):
        return None
    return list(enumerate(entries))


def ipoib_host_index(cfg):
    """The host's address index: rdma_ipoib_host_index, else its position in the sorted group plus the offset.

    Returns (index, error)."""
    explicit = cfg.get('rdma_ipoib_host_index')
    if explicit not in (None, '', 0):
        if not _is_int(explicit) or explicit < 1:
            return None, 'rdma_ipoib_host_index must be a positive integer, or 0 for the computed index (got %r)' % (_r(explicit),)
        return explicit, None
    group = cfg.get('rdma_ipoib_group')
    members = sorted(cfg.get('group_hosts') or [])
    host = cfg.get('inventory_hostname')
    offset = cfg.get('rdma_ipoib_index_offset')
    if not _is_int(offset) or offset < 1:
        return None, 'rdma_ipoib_index_offset must be a positive integer (got %r)' % (_r(offset),)
    if host not in members:
        return None, ('%s is not in group %s (rdma_ipoib_group), so it has no IPoIB address index; set '
                      'rdma_ipoib_host_index or an explicit address' % (host, group))
    return members.index(host) + offset, None


def _host_part(text):
    """The address of 'a.b.c.d' or 'a.b.c.d/len'."""
    return str(text).partition('/')[0]


def _parse_subnet(text):
    net = ipaddress.ip_network(str(text), strict=False)
    if _host_part(text) != str(net.network_address) or '/' not in str(text):
        raise ValueError('%s is not a network address with a prefix length (such as %s)' % (text, net))
    return net


def _usable(net):
    """First and last usable host offsets of a network."""
    if net.version == 4 and net.prefixlen >= 31:
        return 0, net.num_addresses - 1
    return 1, net.num_addresses - 2


def ipoib_plan(cfg):
    """The IPoIB interfaces of this host: [{name, subnet, address (CIDR), address_ip, prefix, mtu, mode}].

    Raises AnsibleFilterError on input the preflight should have refused."""
    errors = ipoib_errors(cfg)
    if errors:
        raise AnsibleFilterError('; '.join(errors))
    plan = []
    index = None
    for _pos, entry in _ipoib_entries(cfg):
        net = _parse_subnet(entry['subnet'])
        if entry.get('address'):
            ip = ipaddress.ip_address(_host_part(entry['address']))
        else:
            if index is None:
                index, _err = ipoib_host_index(cfg)
            ip = net.network_address + index
        mode = entry.get('mode', cfg.get('rdma_ipoib_mode'))
        plan.append({
            'name': entry['name'],
            'subnet': str(net),
            'address': '%s/%d' % (ip, net.prefixlen),
            'address_ip': str(ip),
            'prefix': net.prefixlen,
            'mtu': entry.get('mtu', cfg.get('rdma_ipoib_mtu')),
            'mode': mode,
        })
    return plan


def ipoib_errors(cfg):
    """Errors of rdma_ipoib_* (each names the variable and what is accepted)."""
    errors = []
    entries = _ipoib_entries(cfg)
    if entries is None:
        return ['rdma_ipoib_interfaces must be a list of {name, subnet, address?, mtu?, mode?} (got %r)'
                % (_r(cfg.get('rdma_ipoib_interfaces')),)]
    if not entries:
        return errors
    if cfg.get('rdma_fabric') != 'infiniband':
        return ['rdma_ipoib_interfaces is for rdma_fabric: infiniband (IPoIB); this host has rdma_fabric: %s'
                % cfg.get('rdma_fabric')]
    group_size = len(cfg.get('group_hosts') or [])
    names = []
    for pos, entry in entries:
        label = 'rdma_ipoib_interfaces[%d]' % pos
        if not isinstance(entry, dict):
            errors.append('%s must be a dict with name and subnet (got %r)' % (label, _r(entry)))
            continue
        unknown = sorted(set(entry) - set(('name', 'subnet', 'address', 'mtu', 'mode')))
        if unknown:
            errors.append('%s has unknown keys %s (accepted: name, subnet, address, mtu, mode)'
                          % (label, ', '.join(unknown)))
        name = entry.get('name')
        if not isinstance(name, str) or not _IFNAME_RE.match(name):
            errors.append('%s.name must be an interface name of at most 15 letters, digits, "_", ".", ":" or "-" '
                          '(got %r)' % (label, _r(name)))
        else:
            names.append(name)
        mode = entry.get('mode', cfg.get('rdma_ipoib_mode'))
        if mode not in IPOIB_MODES:
            errors.append('%s.mode (or rdma_ipoib_mode) must be datagram or connected (got %r)' % (label, _r(mode)))
            mode = None
        mtu = entry.get('mtu', cfg.get('rdma_ipoib_mtu'))
        if not _is_int(mtu):
            errors.append('%s.mtu (or rdma_ipoib_mtu) must be an integer (got %r)' % (label, _r(mtu)))
        elif mode and not IPOIB_MTU_MIN <= mtu <= IPOIB_MTU_MAX[mode]:
            errors.append('%s.mtu %d cannot be carried by IPoIB in %s mode: accepted %d to %d (%s)'
                          % (label, mtu, mode, IPOIB_MTU_MIN, IPOIB_MTU_MAX[mode],
                             '4K IB MTU less the 4-byte IPoIB header; 2044 on a 2K IB MTU' if mode == 'datagram'
                             else 'connected mode'))
        try:
            net = _parse_subnet(entry.get('subnet'))
        except ValueError as exc:
            errors.append('%s.subnet must be a network such as 10.20.0.0/16 (%s)' % (label, _r(str(exc), text=True)))
            continue
        first, last = _usable(net)
        address = entry.get('address')
        if address:
            try:
                ip = ipaddress.ip_address(_host_part(address))
            except ValueError as exc:
                errors.append('%s.address must be an IP address inside %s (%s)' % (label, net, _r(str(exc), text=True)))
                continue
            if '/' in str(address) and str(address).partition('/')[2] != str(net.prefixlen):
                errors.append('%s.address %s has another prefix length than subnet %s' % (label, _r(address, text=True), net))
            if ip not in net or not first <= int(ip) - int(net.network_address) <= last:
                errors.append('%s.address %s is not a usable address of subnet %s' % (label, _r(address, text=True), net))
            continue
        index, err = ipoib_host_index(cfg)
        if err:
            errors.append('%s: %s' % (label, err))
            continue
        explicit = cfg.get('rdma_ipoib_host_index') not in (None, '', 0)
        highest = index if explicit else max(index, group_size - 1 + cfg.get('rdma_ipoib_index_offset'))
        if highest > last or index < first:
            errors.append('%s.subnet %s is too small for the hosts: it has usable host indexes %d to %d, the hosts '
                          'need up to %d (%d hosts in %s from offset %s); use a larger subnet, a smaller '
                          'rdma_ipoib_index_offset or explicit addresses'
                          % (label, net, first, last, highest, group_size, cfg.get('rdma_ipoib_group'),
                             cfg.get('rdma_ipoib_index_offset')))
    duplicates = sorted(set(n for n in names if names.count(n) > 1))
    if duplicates:
        errors.append('rdma_ipoib_interfaces names %s more than once' % ', '.join(duplicates))
    return errors


def _doca_errors(cfg):
    errors = []
    for key in ('rdma_doca_repo_url', 'rdma_doca_repo_key_url'):
        value = cfg.get(key)
        if not isinstance(value, str) or not _URL_RE.match(value):
            errors.append('rdma_stack: doca needs %s, an http(s) URL without white space, quotes or "#" (got %r)'
                          % (key, _r(value)))
    fpr = normalize_fingerprint(cfg.get('rdma_doca_repo_key_fingerprint'))
    if not _FPR_RE.match(fpr):
        errors.append('rdma_stack: doca needs rdma_doca_repo_key_fingerprint, the full fingerprint (40 or 64 hex digits) of '
                      "the repository's signing key (got %r); the key is checked against it before apt trusts it"
                      % (_r(cfg.get('rdma_doca_repo_key_fingerprint')),))
    version = cfg.get('rdma_doca_version')
    if not isinstance(version, str) or not version or not _WORD_RE.match(version):
        errors.append('rdma_stack: doca needs rdma_doca_version, the exact package version (quoted string) of %s '
                      'as apt-cache madison prints it (dnf: version or version-release as dnf repoquery prints it) '
                      '(got %r)' % (_r((cfg.get('rdma_doca_packages') or ['doca-ofed'])[0], text=True), _r(version)))
    packages = cfg.get('rdma_doca_packages')
    if not isinstance(packages, list) or not packages or not all(
            isinstance(p, str) and _WORD_RE.match(p) for p in packages):
        errors.append('rdma_doca_packages must be a non-empty list of package names (got %r)' % (_r(packages),))
    platform = doca_platform_error(cfg.get('os_family'), cfg.get('distribution'), cfg.get('distribution_major_version'))
    url = cfg.get('rdma_doca_repo_url')
    if platform:
        errors.append(platform)
    elif cfg.get('os_family') == 'RedHat' and isinstance(url, str) and _URL_RE.match(url):
        baseurl = doca_el_baseurl(url, cfg.get('distribution_version'), cfg.get('architecture'))
        if baseurl['error']:
            errors.append(baseurl['error'])
    elif isinstance(url, str) and ('{os}' in url or '{arch}' in url):
        errors.append('rdma_doca_repo_url: the {os} and {arch} placeholders are filled on RHEL, Rocky and AlmaLinux '
                      'only; on Debian and Ubuntu write the repository directory, e.g. .../doca/<release>/debian12/'
                      'x86_64/ (got %r)' % (_r(url),))
    return errors


def rdma_doca_el_baseurl(cfg):
    """The dnf baseurl of the DOCA repository for a RHEL-family host (__rdma_context): rdma_doca_repo_url with
    {os} and {arch} filled from its facts. -> {'url': str, 'error': str} (the preflight reports the error)."""
    if not isinstance(cfg, dict):
        raise AnsibleFilterError('rdma_doca_el_baseurl expects a dict')
    return doca_el_baseurl(cfg.get('rdma_doca_repo_url'), cfg.get('distribution_version'), cfg.get('architecture'))


def _roce_errors(cfg):
    errors = []
    prio = cfg.get('rdma_roce_pfc_priority')
    if not _is_int(prio) or not 0 <= prio <= 7:
        errors.append('rdma_roce_pfc_priority must be an 802.1p priority 0 to 7 (got %r)' % (_r(prio),))
    dscp = cfg.get('rdma_roce_dscp')
    if not _is_int(dscp) or not 0 <= dscp <= 63:
        errors.append('rdma_roce_dscp must be a DSCP value 0 to 63 (got %r)' % (_r(dscp),))
    tos = cfg.get('rdma_roce_tos')
    if not _is_int(tos) or not 0 <= tos <= 255:
        errors.append('rdma_roce_tos must be a ToS byte 0 to 255 (got %r)' % (_r(tos),))
    elif _is_int(dscp) and 0 <= dscp <= 63 and tos >> 2 != dscp:
        errors.append('rdma_roce_tos %d carries DSCP %d, not rdma_roce_dscp %r: RDMA CM traffic would miss the '
                      'lossless class (ToS = DSCP * 4 + ECN bits, e.g. 106 for DSCP 26)' % (tos, tos >> 2, _r(dscp)))
    devices = cfg.get('rdma_roce_devices')
    if not isinstance(devices, list) or not all(isinstance(d, str) and _RDMA_DEV_RE.match(d) for d in devices):
        errors.append('rdma_roce_devices must be a list of RDMA device names such as mlx5_0 (got %r)' % (_r(devices),))
    return errors


def _sm_errors(cfg):
    errors = []
    sm = cfg.get('rdma_subnet_manager')
    if sm not in SUBNET_MANAGERS:
        return [_choice_error('rdma_subnet_manager', SUBNET_MANAGERS, sm)]
    if sm == 'host':
        if cfg.get('rdma_fabric') != 'infiniband':
            errors.append('rdma_subnet_manager: host is for InfiniBand; RoCE needs no subnet manager '
                          '(rdma_fabric: %s)' % cfg.get('rdma_fabric'))
        hosts = cfg.get('rdma_subnet_manager_hosts')
        inventory = cfg.get('inventory_hosts') or []
        if (not isinstance(hosts, list) or len(hosts) != 2 or len(set(map(str, hosts))) != 2
                or not all(h in inventory for h in hosts)):
            errors.append('rdma_subnet_manager: host needs rdma_subnet_manager_hosts, two different inventory hosts '
                          '(master first, standby second) (got %r)' % (_r(hosts),))
        prios = cfg.get('rdma_subnet_manager_priorities')
        if (not isinstance(prios, list) or len(prios) != 2 or not all(_is_int(p) and 0 <= p <= 15 for p in prios)
                or prios[0] <= prios[1]):
            errors.append('rdma_subnet_manager_priorities must be two OpenSM priorities 0 to 15, the first (master) '
                          'higher than the second (got %r)' % (_r(prios),))
    return errors


def _gpudirect_errors(cfg):
    errors = []
    mode = cfg.get('rdma_gpudirect')
    if mode not in GPUDIRECT:
        return [_choice_error('rdma_gpudirect', GPUDIRECT, mode)]
    if mode == 'peermem' and cfg.get('rdma_stack') == 'inbox':
        errors.append('rdma_gpudirect: peermem needs rdma_stack: doca; with the inbox stack nvidia_peermem fails to '
                      'load ("Unknown symbol ib_register_peer_memory_client"). Use rdma_gpudirect: dmabuf')
    if mode != 'dmabuf':
        return errors
    driver_type = cfg.get('nvidia_driver_kernel_module_type')
    if driver_type == 'proprietary':
        errors.append('rdma_gpudirect: dmabuf needs the open NVIDIA kernel modules, but nvidia_driver_kernel_module_type '
                      'is proprietary; set it to open (Turing or newer) or use rdma_gpudirect: peermem with DOCA')
    loaded = cfg.get('nvidia_version_text') or ''
    if loaded and 'Open Kernel Module' not in loaded and driver_type != 'open':
        errors.append('rdma_gpudirect: dmabuf needs the open NVIDIA kernel modules; the loaded driver is the '
                      'proprietary one (%s)' % loaded.strip().splitlines()[0])
    kernel = _version_tuple(cfg.get('kernel') or '')
    if kernel is not None and kernel < DMABUF_MIN_KERNEL:
        errors.append('rdma_gpudirect: dmabuf needs Linux 5.12 or newer; this host runs %s' % cfg.get('kernel'))
    cuda = cfg.get('cuda_toolkit_version')
    cuda_v = _version_tuple(cuda) if cuda not in (None, '') else None
    if cuda_v is not None and cuda_v < DMABUF_MIN_CUDA:
        errors.append('rdma_gpudirect: dmabuf needs CUDA 11.7 or newer; cuda_toolkit_version is %s' % _r(cuda, text=True))
    return errors


def _nccl_errors(cfg):
    errors = []
    ifname = cfg.get('rdma_nccl_socket_ifname')
    if not isinstance(ifname, str) or (ifname and not re.match(r'^[=^]?[A-Za-z0-9_.:,-]+\Z', ifname)):
        errors.append('rdma_nccl_socket_ifname must be an interface name or NCCL prefix list such as ib0 or =eth0 '
                      '(got %r)' % (_r(ifname),))
    hcas = cfg.get('rdma_nccl_ib_hca')
    if not isinstance(hcas, list) or not all(isinstance(h, str) and re.match(r'^[A-Za-z0-9_]+(:[0-9]+)?\Z', h)
                                             for h in hcas):
        errors.append('rdma_nccl_ib_hca must be a list of RDMA devices, optionally with a port (mlx5_0, mlx5_1:1) '
                      '(got %r)' % (_r(hcas),))
    gid = cfg.get('rdma_nccl_ib_gid_index', '')
    if _gid_choice(gid) is None:
        errors.append("rdma_nccl_ib_gid_index must be empty (NCCL picks), auto (the RoCE v2 IPv4 GID rdma_facts finds on "
                      "the fabric ports) or a GID table index 0 to 255 (got %r)" % (_r(gid),))
    elif cfg.get('rdma_fabric') == 'infiniband' and _gid_choice(gid) != '':
        errors.append('rdma_nccl_ib_gid_index is for RoCE; on InfiniBand NCCL uses the port GID (got %r): leave it empty'
                      % (_r(gid),))
    extra = cfg.get('rdma_nccl_extra')
    if not isinstance(extra, dict):
        errors.append('rdma_nccl_extra must be a dict of NCCL_* settings (got %r)' % (_r(extra),))
    else:
        for key in sorted(extra, key=str):
            value = extra[key]
            if not isinstance(key, str) or not _NCCL_KEY_RE.match(key):
                errors.append('rdma_nccl_extra: %r is not an NCCL_* variable name' % (_r(key),))
            elif key == 'NCCL_IB_GID_INDEX':
                errors.append('rdma_nccl_extra: NCCL_IB_GID_INDEX is set with rdma_nccl_ib_gid_index (a number, or auto: '
                              'the RoCE v2 IPv4 GID rdma_facts finds on the fabric ports), which is checked')
            elif _NCCL_REFUSED_RE.match(key):
                errors.append('rdma_nccl_extra: %s does not belong in /etc/nccl.conf (read by every job); set debug '
                              'variables in the job environment' % key)
            elif (isinstance(value, (dict, list)) or value is None or not _WORD_RE.match(str(value))
                  or (isinstance(value, float) and not math.isfinite(value))):
                errors.append('rdma_nccl_extra.%s must be one word without white space, quotes or "#" (got %r)'
                              % (key, _r(value)))
    return errors


def _gid_choice(value):
    """'' (NCCL picks), 'auto' or an index 0..255 from rdma_nccl_ib_gid_index; None when not accepted."""
    if value is None or value == '':
        return ''
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 <= value <= 255 else None
    if value == 'auto':
        return 'auto'
    if isinstance(value, str) and re.match(r'^\s*[0-9]{1,3}\s*\Z', value) and int(value) <= 255:
        return int(value)
    return None


def rdma_input_warnings(cfg):
    """What the rdma preflight says without stopping (a list of messages).

    RoCE with NCCL picking the GID index while the pinned NCCL (cuda_toolkit_nccl_version, in cfg as
    nccl_version) is older than 2.21: that NCCL takes index 0, RoCE v1, which carries no DSCP, so its
    traffic misses the lossless class the QoS unit sets up. InfiniBand with rdma_subnet_manager none: nothing
    says which subnet manager runs the fabric; without one every port stays INIT."""
    if not isinstance(cfg, dict):
        raise AnsibleFilterError('rdma_input_warnings expects a dict')
    warnings = []
    version = _version_tuple(cfg.get('nccl_version') or '')
    if (cfg.get('rdma_fabric') == 'roce' and _gid_choice(cfg.get('rdma_nccl_ib_gid_index', '')) == ''
            and version is not None and version < NCCL_AUTO_GID_VERSION):
        warnings.append('NCCL %s (cuda_toolkit_nccl_version) is older than %d.%d and takes GID index 0 (RoCE v1, no DSCP: '
                        'outside the lossless class) unless told: set rdma_nccl_ib_gid_index: auto (the RoCE v2 IPv4 GID '
                        'rdma_facts finds) or the index' % ((cfg.get('nccl_version'),) + NCCL_AUTO_GID_VERSION))
    if cfg.get('rdma_fabric') == 'infiniband' and cfg.get('rdma_subnet_manager') == 'none':
        warnings.append('rdma_subnet_manager is none: an InfiniBand fabric needs a subnet manager running somewhere, or '
                        'every port stays INIT (ibstat: State Initializing) and no job can use it. Say which: switch '
                        '(the managed switches run it; OpenSM is kept stopped here) or host (OpenSM on the two hosts of '
                        'rdma_subnet_manager_hosts)')
    return warnings


def rdma_gid_index(cfg, rdma=None):
    """NCCL_IB_GID_INDEX for /etc/nccl.conf: ``{'index': N or None, 'error': ''}``.

    Empty: None (NCCL picks). A number: that number. auto: the RoCE v2 IPv4 GID index rdma_facts found on
    the fabric's ports (rdma_fabric_ports); ports without one, or ports that disagree (NCCL takes one index
    for every port), are an error naming them."""
    choice = _gid_choice(cfg.get('rdma_nccl_ib_gid_index', ''))
    if choice is None or choice == '' or cfg.get('rdma_fabric') != 'roce':
        return {'index': None, 'error': ''}
    if choice != 'auto':
        return {'index': choice, 'error': ''}
    chosen = set(cfg.get('rdma_nccl_ib_hca') or []) or set(rdma_fabric_ports(rdma, 'roce', cfg.get('rdma_roce_devices'))['ports'])
    found = {}
    for hca in (rdma or {}).get('hcas') or []:
        for port in hca.get('ports') or []:
            entry = '%s:%s' % (hca.get('name'), port.get('port'))
            if entry in chosen or hca.get('name') in chosen:
                found[entry] = port.get('roce_v2_ipv4_gid_index')
    if not found:
        return {'index': None, 'error': 'rdma_nccl_ib_gid_index: auto found no RoCE port on this host (rdma_facts)'}
    missing = sorted(e for e, i in found.items() if i is None)
    if missing:
        return {'index': None, 'error': 'rdma_nccl_ib_gid_index: auto found no RoCE v2 IPv4 GID on %s (an address on the '
                                        "port's interface makes one)" % ', '.join(missing)}
    indexes = sorted(set(found.values()))
    if len(indexes) > 1:
        return {'index': None, 'error': 'rdma_nccl_ib_gid_index: auto found different RoCE v2 IPv4 GID indexes (%s); NCCL '
                                        'takes one for every port: set the index the ports share, or give them the same '
                                        'address layout' % ', '.join('%s=%s' % (e, found[e]) for e in sorted(found))}
    return {'index': indexes[0], 'error': ''}


def rdma_input_errors(cfg):
    """Every bad-input error of the rdma role for one host, as a list of messages (empty: fine).

    cfg holds the role's variables plus context: os_family, kernel, inventory_hostname, group_hosts
    (the members of rdma_ipoib_group), inventory_hosts, nvidia_driver_kernel_module_type,
    cuda_toolkit_version, nvidia_version_text (/proc/driver/nvidia/version, empty when absent)."""
    if not isinstance(cfg, dict):
        raise AnsibleFilterError('rdma_input_errors expects a dict')
    errors = []
    fabric = cfg.get('rdma_fabric')
    if fabric not in FABRICS:
        return [_choice_error('rdma_fabric (gpucluster_fabric)', FABRICS, fabric)]
    if fabric == 'none':
        return errors
    if cfg.get('rdma_stack') not in STACKS:
        errors.append('rdma_stack must be inbox or doca (got %r)' % (_r(cfg.get('rdma_stack')),))
    elif cfg.get('rdma_stack') == 'doca':
        errors.extend(_doca_errors(cfg))
    elif cfg.get('os_family') not in ('Debian', 'RedHat'):
        errors.append('rdma_stack: inbox knows the package names of the Debian and RedHat families; this host is %s'
                      % cfg.get('os_family'))
    extra = cfg.get('rdma_extra_packages')
    if not isinstance(extra, list) or not all(isinstance(p, str) and _WORD_RE.match(p) for p in extra):
        errors.append('rdma_extra_packages must be a list of package names (got %r)' % (_r(extra),))
    if cfg.get('rdma_network_renderer') not in RENDERERS:
        errors.append(_choice_error('rdma_network_renderer', RENDERERS, cfg.get('rdma_network_renderer')))
    errors.extend(ipoib_errors(cfg))
    if fabric == 'roce':
        errors.extend(_roce_errors(cfg))
    errors.extend(_sm_errors(cfg))
    errors.extend(_gpudirect_errors(cfg))
    errors.extend(_nccl_errors(cfg))
    return errors


def rdma_fabric_ports(rdma, fabric, devices=None):
    """Which RDMA ports are the fabric and why (module_utils/rdma_sysfs.fabric_ports over rdma_facts' result).

    Every port of the fabric's link layer is a candidate whatever its state (so the files written from it
    do not change when a port flaps); devices, when given, limits the choice; ignored ports are left out.
    Without named devices, the adapters that share a PCIe switch with a GPU are the fabric when there are any."""
    layer = {'infiniband': 'InfiniBand', 'roce': 'Ethernet'}.get(fabric)
    if layer is None:
        return {'ports': [], 'basis': 'link_layer', 'others': []}
    return fabric_ports((rdma or {}).get('hcas') or [], layer, devices or None)


def rdma_acs_bridges(rdma):
    """The PCIe switch ports whose ACS the opt-in unit clears (module_utils/rdma_sysfs.acs_bridges)."""
    return acs_bridges((rdma or {}).get('hcas'))


def rdma_fabric_hcas(rdma, fabric, devices=None):
    """The fabric's ports (rdma_fabric_ports) as NCCL_IB_HCA entries (mlx5_0:1)."""
    return rdma_fabric_ports(rdma, fabric, devices)['ports']


def rdma_nccl_settings(cfg, rdma=None, default_ifname=''):
    """The (name, value) pairs of /etc/nccl.conf, in a stable order."""
    fabric = cfg.get('rdma_fabric')
    ifname = cfg.get('rdma_nccl_socket_ifname') or ''
    if not ifname:
        ipoib = cfg.get('rdma_ipoib_interfaces') or []
        if fabric == 'infiniband' and ipoib:
            ifname = ipoib[0]['name']
        else:
            ifname = default_ifname or ''
    settings = []
    if ifname:
        settings.append(('NCCL_SOCKET_IFNAME', ifname))
    hcas = cfg.get('rdma_nccl_ib_hca') or rdma_fabric_hcas(rdma, fabric, cfg.get('rdma_roce_devices'))
    if hcas:
        settings.append(('NCCL_IB_HCA', '=' + ','.join(hcas)))
    if fabric == 'roce':
        settings.append(('NCCL_IB_TC', str(cfg.get('rdma_roce_tos'))))
        gid = rdma_gid_index(cfg, rdma)['index']
        if gid is not None:
            settings.append(('NCCL_IB_GID_INDEX', str(gid)))
    for key in sorted(cfg.get('rdma_nccl_extra') or {}):
        if key not in dict(settings):
            settings.append((key, str(cfg['rdma_nccl_extra'][key])))
    return settings


def rdma_socket_ifname_check(ifname, interfaces, planned=None):
    """What NCCL_SOCKET_IFNAME names that this host lacks: ``{'missing': [...], 'unmatched': [...]}``.

    NCCL reads the value as a comma-separated list of interface name prefixes, exact names after a
    leading '=', or names to avoid after a leading '^' (nothing to check then). ``missing``: exact names
    that are neither an interface of the host nor one the role plans (``planned``, the IPoIB interfaces
    it configures); NCCL would find no interface and every job's bootstrap would fail. ``unmatched``:
    prefixes that match no interface yet (an adapter whose driver is not loaded yet may still bring one).
    """
    text = ifname if isinstance(ifname, str) else ''
    known = [str(i) for i in list(interfaces or []) + list(planned or [])]
    result = {'missing': [], 'unmatched': []}
    if not text or text.startswith('^'):
        return result
    exact = text.startswith('=')
    for name in [n for n in text.lstrip('=').split(',') if n]:
        if exact and name not in known:
            result['missing'].append(name)
        elif not exact and not any(i.startswith(name) for i in known):
            result['unmatched'].append(name)
    return result


def rdma_option_errors(options, prefix='health_check_rdma_'):
    """Messages for the fabric options of rdma_facts and the node health program ([] when fine).

    ``options``: {'expected_rate_gbps': ..., 'ignore_ports': [...]}, each named ``prefix`` + key in a
    message. The rules are rdma_sysfs.normalize_options' (the node applies the same); a rate of 0 or
    null means no rate check, and a rate written as digits in a string counts as the number (the role
    writes it with ``| float``)."""
    if not isinstance(options, dict):
        raise AnsibleFilterError('rdma_option_errors expects a dict of expected_rate_gbps and ignore_ports')
    errors = []
    rate = options.get('expected_rate_gbps')
    if rate is not None and not isinstance(rate, bool):
        number, _problem = number_problem(rate)
        rate = number if number is not None else rate
    try:
        normalize_options(rate or None if not isinstance(rate, bool) else rate, None)
    except RdmaOptionError as exc:
        errors.append(prefix + str(exc))
    try:
        normalize_options(None, options.get('ignore_ports'))
    except RdmaOptionError as exc:
        errors.append(prefix + str(exc))
    return errors


_EXPECTED = {
    'rdma_input_errors': 'a dict of the rdma role variables and host context',
    'rdma_ipoib_plan': 'a dict of the rdma role variables and host context',
    'rdma_fabric_hcas': "rdma_facts' ansible_facts.rdma and a fabric name",
    'rdma_fabric_ports': "rdma_facts' ansible_facts.rdma and a fabric name",
    'rdma_nccl_settings': 'a dict of the rdma role variables, rdma_facts and an interface name',
    'rdma_normalize_fingerprint': 'a fingerprint string',
    'rdma_option_errors': 'a dict of expected_rate_gbps and ignore_ports',
    'rdma_socket_ifname_check': 'an NCCL_SOCKET_IFNAME value and the host\'s interface names',
    'rdma_input_warnings': 'a dict of the rdma role variables and host context',
    'rdma_gid_index': "a dict of the rdma role variables and rdma_facts' ansible_facts.rdma",
    'rdma_dkms_rebuilds': "the output of dkms status and the running kernel's release",
    'rdma_stack_reload': "mlx5_core's loaded version, the version modinfo finds, and whether adapters are present",
    'rdma_acs_bridges': "rdma_facts' ansible_facts.rdma",
    'rdma_doca_el_baseurl': 'a dict of the rdma role variables and host context',
    'rdma_rpm_version_offered': 'the lines of dnf repoquery and a package version',
}


class FilterModule(object):
    def filters(self):
        funcs = {
            'rdma_input_errors': rdma_input_errors,
            'rdma_ipoib_plan': ipoib_plan,
            'rdma_fabric_hcas': rdma_fabric_hcas,
            'rdma_fabric_ports': rdma_fabric_ports,
            'rdma_nccl_settings': rdma_nccl_settings,
            'rdma_normalize_fingerprint': normalize_fingerprint,
            'rdma_option_errors': rdma_option_errors,
            'rdma_socket_ifname_check': rdma_socket_ifname_check,
            'rdma_input_warnings': rdma_input_warnings,
            'rdma_gid_index': rdma_gid_index,
            'rdma_dkms_rebuilds': nvidia_dkms_rebuilds,
            'rdma_stack_reload': stack_reload,
            'rdma_acs_bridges': rdma_acs_bridges,
            'rdma_doca_el_baseurl': rdma_doca_el_baseurl,
            'rdma_rpm_version_offered': rpm_version_offered,
        }
        return dict((name, guarded(name, _EXPECTED[name])(func)) for name, func in funcs.items())
