# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parse ``nvidia-smi -q -x`` XML into plain device records.

Pure code: text in, dicts out, no I/O and no Ansible imports, so that the node health program
(roles/health_check) runs the very same parser as the ``gpu_facts`` module. Python 3.9+.

Covers the DTD generations seen in the field (no DOCTYPE / v11 / v12 / v13): ECC counters as
``single_bit``/``double_bit`` totals (pre-Ampere drivers) or as ``sram_*``/``dram_*`` counters,
``clocks_throttle_reasons`` (before driver 535) or ``clocks_event_reasons``, ``power_readings`` or
``gpu_power_readings`` with ``power_draw`` or ``instant_power_draw``. A value the hardware does
not report (``N/A``, ``[N/A]``, ``[Not Supported]``, ``Unknown Error``...) becomes ``None``.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re

try:  # nvidia-smi output is local tool output; defusedxml is used where a node has it anyway.
    from defusedxml import ElementTree as _ET  # pylint: disable=import-error
    HAS_DEFUSEDXML = True
except ImportError:
    from xml.etree import ElementTree as _ET
    HAS_DEFUSEDXML = False

from xml.etree.ElementTree import ParseError as _ParseError

from .gpu_bounds import clip


class GpuXmlError(ValueError):
    """The text is not usable ``nvidia-smi -q -x`` output."""


# Values nvidia-smi prints where a field is not reported; compared case-insensitively without brackets.
_MISSING = frozenset((
    '', 'n/a', 'na', 'not supported', 'unknown error', 'unknown', 'not available', 'none',
    'insufficient permissions', 'requested functionality has been deprecated',
    'gpu requires reset', 'gpu is lost', 'not found',
))
_TRUE = frozenset(('enabled', 'yes', 'active', 'true', 'on'))
_FALSE = frozenset(('disabled', 'no', 'not active', 'false', 'off'))
_NUMBER = re.compile(r'^\s*(-?\d{1,30}(?:\.\d{1,30})?)\s*(?:[A-Za-z%]+(?:\(s\))?(?:/s)?)?\s*$')

# Components of the pre-Ampere ECC counters, split by where they live (on-chip SRAM vs DRAM).
_OLD_ECC_SRAM = ('l1_cache', 'l2_cache', 'register_file', 'texture_shm', 'cbu', 'sram')
_OLD_ECC_DRAM = ('device_memory', 'dram', 'texture_memory')

# Reasons the driver lowers clocks as a matter of course; anything else is worth a look.
THROTTLE_NORMAL = frozenset((
    'gpu_idle', 'sw_power_cap', 'applications_clocks_setting', 'display_clocks_setting', 'sync_boost',
))


def _clean(text):
    if text is None:
        return None
    value = text.strip()
    bare = value.strip('[]').strip().lower()
    if bare in _MISSING:
        return None
    return value


def to_text(text):
    """Return the stripped string, or None for a value the driver does not report."""
    return _clean(text)


def to_number(text):
    """``'24564 MiB'`` -> 24564, ``'6.41 W'`` -> 6.41, ``'16x'`` -> 16, ``'N/A'`` -> None."""
    value = _clean(text)
    if value is None:
        return None
    match = _NUMBER.match(value)
    if not match:
        return None
    number = match.group(1)
    if '.' in number:
        return float(number)
    return int(number)


def to_bool(text):
    """``Enabled``/``Yes``/``Active`` -> True, ``Disabled``/``No``/``Not Active`` -> False, else None."""
    value = _clean(text)
    if value is None:
        return None
    low = value.lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    return None


def _find_text(node, path):
    if node is None:
        return None
    child = node.find(path)
    if child is None:
        return None
    return child.text


def _first(node, paths, convert):
    """Value of the first path that exists and reports a value (field renames between drivers)."""
    for path in paths:
        value = convert(_find_text(node, path))
        if value is not None:
            return value
    return None


def _sum(values):
    present = [v for v in values if v is not None]
    if not present:
        return None
    return sum(present)


def normalize_pci_address(bus_id):
    """``00000000:81:00.0`` -> ``0000:81:00.0`` (the form sysfs and the kernel log use), lower case."""
    value = _clean(bus_id)
    if value is None:
        return None
    match = re.match(r'^([0-9a-fA-F]+):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$', value)
    if not match:
        return value.lower()
    domain = int(match.group(1), 16)
    return '%04x:%s:%s.%s' % (domain, match.group(2).lower(), match.group(3).lower(), match.group(4))


def _pci_sort_key(pci_address, position):
    if pci_address:
        parts = re.split(r'[:.]', pci_address)
        try:
            return (0, tuple(int(p, 16) for p in parts), position)
        except ValueError:
            pass
    return (1, (), position)


def _ecc_scope(scope):
    """Counters of one ECC scope (``volatile`` or ``aggregate``) in both schema generations."""
    result = {
        'sbe': None, 'dbe': None,
        'sram_correctable': None, 'sram_uncorrectable': None,
        'dram_correctable': None, 'dram_uncorrectable': None,
    }
    if scope is None:
        return result
    single = scope.find('single_bit')
    double = scope.find('double_bit')
    if single is not None or double is not None:
        result['sbe'] = to_number(_find_text(single, 'total'))
        result['dbe'] = to_number(_find_text(double, 'total'))
        result['sram_correctable'] = _sum(to_number(_find_text(single, n)) for n in _OLD_ECC_SRAM)
        result['sram_uncorrectable'] = _sum(to_number(_find_text(double, n)) for n in _OLD_ECC_SRAM)
        result['dram_correctable'] = _sum(to_number(_find_text(single, n)) for n in _OLD_ECC_DRAM)
        result['dram_uncorrectable'] = _sum(to_number(_find_text(double, n)) for n in _OLD_ECC_DRAM)
        return result
    sram_unc = to_number(_find_text(scope, 'sram_uncorrectable'))
    if sram_unc is None:
        # Driver 550+ splits SRAM uncorrectable errors by detection method.
        sram_unc = _sum((to_number(_find_text(scope, 'sram_uncorrectable_parity')),
                         to_number(_find_text(scope, 'sram_uncorrectable_secded'))))
    result['sram_correctable'] = to_number(_find_text(scope, 'sram_correctable'))
    result['sram_uncorrectable'] = sram_unc
    result['dram_correctable'] = to_number(_find_text(scope, 'dram_correctable'))
    result['dram_uncorrectable'] = to_number(_find_text(scope, 'dram_uncorrectable'))
    result['sbe'] = _sum((result['sram_correctable'], result['dram_correctable']))
    result['dbe'] = _sum((result['sram_uncorrectable'], result['dram_uncorrectable']))
    return result


def _ecc_counters(volatile_node, aggregate_node):
    volatile = _ecc_scope(volatile_node)
    aggregate = _ecc_scope(aggregate_node)
    errors = {
        'volatile_sbe': volatile['sbe'],
        'volatile_dbe': volatile['dbe'],
        'aggregate_sbe': aggregate['sbe'],
        'aggregate_dbe': aggregate['dbe'],
    }
    for scope_name, scope in (('volatile', volatile), ('aggregate', aggregate)):
        for key in ('sram_correctable', 'sram_uncorrectable', 'dram_correctable', 'dram_uncorrectable'):
            errors['%s_%s' % (scope_name, key)] = scope[key]
    return errors


def _ecc_errors(gpu):
    node = gpu.find('ecc_errors')
    return _ecc_counters(node.find('volatile') if node is not None else None,
                         node.find('aggregate') if node is not None else None)


def _retired_pages(gpu):
    node = gpu.find('retired_pages')
    pending = to_bool(_find_text(node, 'pending_retirement'))
    if pending is None:
        pending = to_bool(_find_text(node, 'pending_blacklist'))
    return {
        'sbe': to_number(_find_text(node, 'multiple_single_bit_retirement/retired_count')),
        'dbe': to_number(_find_text(node, 'double_bit_retirement/retired_count')),
        'pending': pending,
    }


def _remapped_rows(gpu):
    node = gpu.find('remapped_rows')
    return {
        'correctable': to_number(_find_text(node, 'remapped_row_corr')),
        'uncorrectable': to_number(_find_text(node, 'remapped_row_unc')),
        'pending': to_bool(_find_text(node, 'remapped_row_pending')),
        'failure': to_bool(_find_text(node, 'remapped_row_failure')),
    }


def _pcie(gpu):
    link = gpu.find('pci/pci_gpu_link_info')
    return {
        'gen_current': to_number(_find_text(link, 'pcie_gen/current_link_gen')),
        'gen_max': to_number(_find_text(link, 'pcie_gen/max_link_gen')),
        'width_current': to_number(_find_text(link, 'link_widths/current_link_width')),
        'width_max': to_number(_find_text(link, 'link_widths/max_link_width')),
    }


def _clock_event_reasons(gpu):
    """Names of the active clock event (throttle) reasons, prefix removed, in document order."""
    active = []
    for tag, prefix in (('clocks_event_reasons', 'clocks_event_reason_'),
                        ('clocks_throttle_reasons', 'clocks_throttle_reason_')):
        node = gpu.find(tag)
        if node is None:
            continue
        for child in node:
            if not child.tag.startswith(prefix):
                continue
            if to_bool(child.text):
                name = child.tag[len(prefix):]
                if name not in active:
                    active.append(name)
    return active


def _power_nodes(gpu):
    return [n for n in (gpu.find('gpu_power_readings'), gpu.find('power_readings')) if n is not None]


def _power(gpu, paths):
    for node in _power_nodes(gpu):
        value = _first(node, paths, to_number)
        if value is not None:
            return value
    return None


def _nvlink(gpu):
    """NVLink state where the XML reports it (only newer drivers with ``-q -x`` on NVLink boards)."""
    node = gpu.find('nvlink')
    if node is None:
        return None
    links = []
    for link in node:
        state = to_text(_find_text(link, 'state')) or to_text(link.text)
        links.append({'link': to_number(link.get('id')) if link.get('id') else len(links), 'state': state})
    return {'links': links}


# States in which the driver cannot talk to the GPU (NVML's error strings for NVML_ERROR_GPU_IS_LOST and
# NVML_ERROR_RESET_REQUIRED). nvidia-smi prints such a string as the whole value of a field it could not
# read, as it prints "Unknown Error" (the recorded 535.154.05 -q output has "Addressing Mode : Unknown
# Error"); they make the GPU critical only as the whole value of a field the driver writes.
_ERROR_STATES = frozenset(('gpu requires reset', 'gpu is lost'))
# Values every working GPU reports; a marker such as [N/A] or [Unknown Error] there is an error state.
_REQUIRED = (('uuid', 'uuid'), ('product_name', 'name'), ('pci/pci_bus_id', 'pci_bus_id'),
             ('fb_memory_usage/total', 'memory_total_mib'))
_MAX_ERROR_STATES = 8
# Subtrees of <gpu> whose text is not the driver's: a process's name is its full command line (any user
# sets it: exec -a, setproctitle), accounted processes likewise, and vGPU instances carry what a guest
# reports (guest_driver_version, vm_name, guest info). No rule reads anything inside them.
_USER_SUBTREES = frozenset(('processes', 'accounted_processes', 'vgpus', 'vgpu_instances', 'vgpu_instance'))


def _user_controlled(tag):
    """True for an element whose content a user, a job or a vGPU guest controls (see _USER_SUBTREES)."""
    tag = tag if isinstance(tag, str) else ''
    return (tag in _USER_SUBTREES or 'process' in tag or tag.startswith('vgpu') or 'guest' in tag
            or tag.startswith('vm_'))


def driver_fields(gpu):
    """(tag, text) of every leaf element of a <gpu> the driver writes, in document order.

    Iterative (no recursion whatever the nesting); subtrees a user controls (:func:`_user_controlled`)
    are never entered.
    """
    stack = [iter(list(gpu))]
    while stack:
        node = next(stack[-1], None)
        if node is None:
            stack.pop()
            continue
        if _user_controlled(node.tag):
            continue
        children = list(node)
        if children:
            stack.append(iter(children))
        else:
            yield node.tag, node.text


def _error_states(gpu):
    """``['uuid=[GPU is lost]', ...]``: fields in an error state, at most _MAX_ERROR_STATES.

    A marker counts only as the whole value of a field the driver writes (driver_fields): text inside a
    process's name or a vGPU guest's report never does.
    """
    found = []
    for path, label in _REQUIRED:
        node = gpu.find(path)
        if node is not None and _clean(node.text) is None:
            found.append('%s=%s' % (label, clip((node.text or '').strip(), 60) or 'empty'))
    seen = set()
    for tag, raw in driver_fields(gpu):
        text = (raw or '').strip()
        bare = text.strip('[]').strip().lower()
        if bare in _ERROR_STATES and bare not in seen:
            seen.add(bare)
            quoted = clip(text, 60)
            entry = '%s=%s' % (clip(str(tag), 60), quoted)
            if not any(f.endswith('=' + quoted) for f in found):
                found.append(entry)
        if len(found) >= _MAX_ERROR_STATES:
            break
    if not any(gpu.find(path) is not None and _clean(gpu.find(path).text) is not None
               for path in ('uuid', 'product_name', 'pci/pci_bus_id')) and not gpu.get('id'):
        found.append('identity=not reported (no uuid, product name or PCI bus id)')
    return found[:_MAX_ERROR_STATES]


def _mig_devices(gpu):
    """MIG devices of a GPU in MIG mode with their own ECC counters (``<mig_devices><mig_device>``).

    Each: ``index``, ``gpu_instance_id``, ``compute_instance_id``, ``memory_total_mib`` and
    ``ecc_errors`` (same keys as the GPU's; drivers report the volatile SRAM uncorrectable count here).
    An empty list without MIG devices (``<mig_devices>None</mig_devices>``).
    """
    node = gpu.find('mig_devices')
    if node is None:
        return []
    devices = []
    for mig in node.findall('mig_device'):
        counts = mig.find('ecc_error_count')
        devices.append({
            'index': to_number(_find_text(mig, 'index')),
            'gpu_instance_id': to_number(_find_text(mig, 'gpu_instance_id')),
            'compute_instance_id': to_number(_find_text(mig, 'compute_instance_id')),
            'memory_total_mib': to_number(_find_text(mig, 'fb_memory_usage/total')),
            'ecc_errors': _ecc_counters(counts.find('volatile_count') if counts is not None else None,
                                        counts.find('aggregate_count') if counts is not None else None),
        })
    return devices


def _cpu_affinity(gpu):
    value = _first(gpu, ('cpu_affinity', 'pci/cpu_affinity'), to_text)
    return value


def parse_gpu(gpu, position):
    """One ``<gpu>`` element -> device record (``index`` is set by the caller after sorting)."""
    pci_bus_id = to_text(_find_text(gpu, 'pci/pci_bus_id')) or to_text(gpu.get('id'))
    temperature = gpu.find('temperature')
    record = {
        'index': None,
        'minor_number': to_number(_find_text(gpu, 'minor_number')),
        'uuid': to_text(_find_text(gpu, 'uuid')),
        'name': to_text(_find_text(gpu, 'product_name')),
        'architecture': to_text(_find_text(gpu, 'product_architecture')),
        'serial': to_text(_find_text(gpu, 'serial')),
        'pci_bus_id': pci_bus_id,
        'pci_address': normalize_pci_address(pci_bus_id),
        'vbios_version': to_text(_find_text(gpu, 'vbios_version')),
        'memory_total_mib': to_number(_find_text(gpu, 'fb_memory_usage/total')),
        'memory_used_mib': to_number(_find_text(gpu, 'fb_memory_usage/used')),
        'temperature_c': to_number(_find_text(temperature, 'gpu_temp')),
        'slowdown_temperature_c': to_number(_find_text(temperature, 'gpu_temp_slow_threshold')),
        'shutdown_temperature_c': to_number(_find_text(temperature, 'gpu_temp_max_threshold')),
        'memory_temperature_c': to_number(_find_text(temperature, 'memory_temp')),
        'power_draw_w': _power(gpu, ('instant_power_draw', 'power_draw', 'average_power_draw')),
        'power_limit_w': _power(gpu, ('current_power_limit', 'power_limit', 'enforced_power_limit')),
        'utilization_gpu_pct': to_number(_find_text(gpu, 'utilization/gpu_util')),
        'performance_state': to_text(_find_text(gpu, 'performance_state')),
        'persistence_mode': to_bool(_find_text(gpu, 'persistence_mode')),
        'mig_mode': to_bool(_find_text(gpu, 'mig_mode/current_mig')),
        'ecc_mode': to_bool(_find_text(gpu, 'ecc_mode/current_ecc')),
        'ecc_errors': _ecc_errors(gpu),
        'retired_pages': _retired_pages(gpu),
        'remapped_rows': _remapped_rows(gpu),
        'pcie': _pcie(gpu),
        'clocks_event_reasons_active': _clock_event_reasons(gpu),
        'nvlink': _nvlink(gpu),
        'mig_devices': _mig_devices(gpu),
        'error_states': _error_states(gpu),
    }
    affinity = _cpu_affinity(gpu)
    if affinity is not None:
        record['cpu_affinity'] = affinity
    numa = _first(gpu, ('numa_node', 'pci/numa_node'), to_number)
    if numa is not None:
        record['numa_node'] = numa
    return record, _pci_sort_key(record['pci_address'], position)


def _decode(text):
    if text is None:
        return ''
    if isinstance(text, bytes):
        return text.decode('utf-8', 'replace')
    try:
        text.encode('utf-8')
        return text
    except UnicodeEncodeError:  # stray surrogates (bytes smuggled through surrogateescape)
        try:
            raw = text.encode('utf-8', 'surrogateescape')
        except UnicodeEncodeError:
            raw = text.encode('utf-8', 'replace')
        return raw.decode('utf-8', 'replace')


def _root(text):
    text = _decode(text)
    if not text or not text.strip():
        raise GpuXmlError('nvidia-smi printed no XML (empty output)')
    start = text.find('<')
    if start < 0:
        raise GpuXmlError('nvidia-smi output is not XML: %r' % text.strip()[:120])
    body = text[start:]
    if body.startswith('<?xml'):
        # ElementTree refuses a str that still carries an encoding declaration only for
        # some encodings; dropping the declaration keeps every recorded form parseable.
        end = body.find('?>')
        if end > 0:
            body = body[end + 2:]
    try:
        root = _ET.fromstring(body)
    except RecursionError:
        raise GpuXmlError('nvidia-smi XML was refused by the parser: nested too deeply')
    except _ParseError as exc:
        raise GpuXmlError('nvidia-smi XML is not well-formed (garbled or truncated output): %s' % clip(str(exc)))
    except Exception as exc:  # defusedxml refuses entity tricks with its own exception types
        raise GpuXmlError('nvidia-smi XML was refused by the parser: %s: %s' % (type(exc).__name__, clip(str(exc))))
    if root.tag != 'nvidia_smi_log':
        raise GpuXmlError('unexpected XML root element <%s>, expected <nvidia_smi_log>' % clip(str(root.tag)))
    return root


def parse_nvidia_smi_xml(text):
    """Parse ``nvidia-smi -q -x`` output.

    Returns ``{'driver_version', 'cuda_version', 'attached_gpus', 'timestamp', 'count', 'devices',
    'error_states'}`` (``error_states``: document-level values in an error state, e.g. ``attached_gpus=[N/A]``)
    with devices ordered by their nvidia-smi/NVML index. NVML enumerates GPUs in PCI bus order,
    so devices are sorted by PCI address and numbered from 0; ``minor_number`` (``/dev/nvidiaN``)
    is kept separately because it can differ from the index.
    Raises GpuXmlError for anything that is not parseable nvidia-smi XML.
    """
    root = _root(text)
    parsed = []
    for position, gpu in enumerate(root.findall('gpu')):
        parsed.append(parse_gpu(gpu, position))
    parsed.sort(key=lambda item: item[1])
    devices = []
    for index, (record, _key) in enumerate(parsed):
        record['index'] = index
        devices.append(record)
    attached_text = _find_text(root, 'attached_gpus')
    attached = to_number(attached_text)
    errors = []
    if root.find('attached_gpus') is not None and (attached is None or isinstance(attached, float)):
        errors.append('attached_gpus=%s' % (clip((attached_text or '').strip(), 60) or 'empty'))
        attached = None
    return {
        'error_states': errors,
        'driver_version': to_text(_find_text(root, 'driver_version')),
        'cuda_version': to_text(_find_text(root, 'cuda_version')),
        'attached_gpus': attached,
        'timestamp': to_text(_find_text(root, 'timestamp')),
        'count': len(devices),
        'devices': devices,
    }
