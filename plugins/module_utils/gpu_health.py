# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU health rules: parsed nvidia-smi records, PCI and kernel-log findings in, verdict out.

Pure code, no I/O, no Ansible imports: the ``gpu_facts`` module and the node health program
(``gpucluster-health``, installed by roles/health_check) both call :func:`build_facts`, so a node
drains in Slurm for exactly the reasons Ansible reports. Python 3.9+.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import math
import re

from .gpu_bounds import clip, quote
from .gpu_kernel_log import format_epoch, pci_matches
from .gpu_smi_xml import THROTTLE_NORMAL

STATUSES = ('ok', 'warning', 'critical', 'unknown')
SEVERITIES = ('info', 'warning', 'critical', 'unknown')
# Node status from issue severities: critical beats warning beats unknown; info never counts.
_RANK = {'ok': 0, 'unknown': 1, 'warning': 2, 'critical': 3}
EXIT_CODES = {'ok': 0, 'warning': 1, 'critical': 2, 'unknown': 3}
STATUS_VALUES = {'ok': 0, 'warning': 1, 'critical': 2, 'unknown': 3}

HW_SLOWDOWN_REASONS = ('hw_slowdown', 'hw_thermal_slowdown', 'hw_power_brake_slowdown')

THRESHOLD_SEVERITIES = ('info', 'warning', 'critical', 'ignore')
# Largest count threshold accepted (NVML's counters are 64-bit; JSON and YAML carry this exactly).
COUNT_MAX = 2 ** 63 - 1
# Xid codes are read from the kernel log as at most 6 digits (gpu_kernel_log).
XID_MAX = 999999
# The health thresholds, defined once: (name, type, default, choices, (lowest, highest) for numbers,
# meaning). The gpu_facts module's argument spec, the health_check role's preflight (filter
# health_threshold_errors), the health program's configuration check and the documentation (gpu_facts'
# DOCUMENTATION, the role's argument_specs, docs/health-checks.md) come from here or are checked against
# it by tests/unit/plugins/module_utils/test_gpu_thresholds.py.
THRESHOLDS = (
    ('temperature_margin_c', 'float', 5, None, (0, 1000),
     'Warn when a GPU is this many degrees C (or fewer) below its slowdown temperature.'),
    ('sram_correctable_max', 'int', 10000, None, (0, COUNT_MAX),
     'Lifetime correctable SRAM ECC errors above which a GPU gets a warning.'),
    ('dram_correctable_max', 'int', 20000000, None, (0, COUNT_MAX),
     'Lifetime correctable DRAM ECC errors above which a GPU gets a warning.'),
    # Pre-Ampere page retirement: SBE+DBE retired pages at which the board is due for replacement.
    ('retired_pages_max', 'int', 60, None, (0, COUNT_MAX),
     'Retired pages (SBE+DBE) at which a pre-Ampere GPU is critical (replace).'),
    # Ampere+ row remapping: uncorrectable remaps beyond which the board is due for RMA.
    ('remapped_rows_uncorrectable_max', 'int', 512, None, (0, COUNT_MAX),
     'Rows remapped after uncorrectable errors above which a GPU is critical.'),
    ('pcie_width_severity', 'str', 'warning', THRESHOLD_SEVERITIES, None,
     'Severity of a PCIe link narrower than its maximum.'),
    # Idle GPUs downshift their PCIe generation.
    ('pcie_gen_load_pct', 'int', 50, None, (0, 100),
     'PCIe generation below maximum is judged only at or above this GPU utilisation.'),
    ('persistence_mode_severity', 'str', 'warning', THRESHOLD_SEVERITIES, None,
     'Severity of persistence mode off.'),
    ('hw_slowdown_severity', 'str', 'critical', THRESHOLD_SEVERITIES, None,
     'Severity of an active HW slowdown, HW thermal slowdown or HW power brake.'),
    # For example a site that accepts Xid 94 contained errors.
    ('xid_ignore', 'list', [], None, (0, XID_MAX), 'Xid codes that are never reported.'),
)
DEFAULT_THRESHOLDS = dict((t[0], t[2]) for t in THRESHOLDS)
_KINDS = dict((t[0], t[1]) for t in THRESHOLDS)
_SEVERITY_OPTIONS = dict((t[0], t[3]) for t in THRESHOLDS if t[3])
_LIMITS = dict((t[0], t[4]) for t in THRESHOLDS if t[4])
_NUMBER_THRESHOLDS = tuple(t[0] for t in THRESHOLDS if t[1] in ('int', 'float'))
_XID_TEXT = re.compile(r'^[0-9]{1,6}$')


def threshold_argument_spec():
    """The thresholds as AnsibleModule suboptions (no defaults: unset keeps the default)."""
    spec = {}
    for name, kind, _default, choices, _limits, _doc in THRESHOLDS:
        option = {'type': kind}
        if choices:
            option['choices'] = list(choices)
        if kind == 'list':
            option['elements'] = 'int'
        spec[name] = option
    return spec


class ThresholdError(ValueError):
    pass


def _accepted_number(name):
    low, high = _LIMITS[name]
    if _KINDS[name] == 'int':
        return 'a number >= %d and <= %d, without a fraction' % (low, high)
    return 'a number >= %s and <= %s (not NaN or infinite)' % (low, high)


def _number(name, value):
    """The threshold as a number of its kind, or ThresholdError naming it, its value and what is accepted.

    NaN, infinities (JSON's NaN/Infinity, YAML's .nan/.inf, 1e999) and out-of-range values are refused:
    a comparison with NaN is always false, so NaN would silently switch a rule off.
    """
    low, high = _LIMITS[name]
    ok = not isinstance(value, bool) and isinstance(value, (int, float))
    if ok and isinstance(value, float):
        ok = math.isfinite(value)
        if ok and _KINDS[name] == 'int':
            ok = value.is_integer()
            value = int(value) if ok else value
    if not ok or not low <= value <= high:
        raise ThresholdError('threshold %s=%s; accepted: %s' % (name, quote(value), _accepted_number(name)))
    return value


def _xid_list(value):
    """xid_ignore as a sorted list of codes. A bare string is refused (it is not split into characters)."""
    accepted = ('a list of Xid numbers from 0 to %d, for example [79, 94] (a single code is written [79], '
                'not "79")' % XID_MAX)
    if value is None:
        return []
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise ThresholdError('threshold xid_ignore=%s; accepted: %s' % (quote(value), accepted))
    codes = set()
    for item in value:
        if isinstance(item, str) and _XID_TEXT.match(item):
            item = int(item)
        if isinstance(item, bool) or not isinstance(item, int) or not 0 <= item <= XID_MAX:
            raise ThresholdError('threshold xid_ignore=%s: element %s; accepted: %s'
                                 % (quote(value), quote(item), accepted))
        codes.add(item)
    return sorted(codes)


def merge_thresholds(overrides=None):
    """Defaults with the overrides that are set (None means 'keep the default'); validated.

    ThresholdError names the threshold, quotes its value (shortened) and says what is accepted.
    """
    if overrides is None:
        overrides = {}
    if not isinstance(overrides, dict):
        raise ThresholdError('thresholds=%s; accepted: a mapping of threshold names to values' % quote(overrides))
    merged = dict(DEFAULT_THRESHOLDS)
    for key, value in overrides.items():
        if not isinstance(key, str) or key not in DEFAULT_THRESHOLDS:
            raise ThresholdError('unknown threshold %s; known: %s' % (quote(key), ', '.join(sorted(DEFAULT_THRESHOLDS))))
        if value is not None:
            merged[key] = value
    for key, choices in _SEVERITY_OPTIONS.items():
        if not isinstance(merged[key], str) or merged[key] not in choices:
            raise ThresholdError('threshold %s=%s; accepted: %s' % (key, quote(merged[key]), ', '.join(choices)))
    for key in _NUMBER_THRESHOLDS:
        merged[key] = _number(key, merged[key])
    merged['xid_ignore'] = _xid_list(merged['xid_ignore'])
    return merged


# Characters of an issue message kept (every value it quotes is already shortened with clip()).
MESSAGE_MAX = 2000

# Upper bounds of the run settings (gpu_facts options, the health program's config and command line): a
# larger value is a typo, and would overflow a timer or coreutils timeout. The Xid window goes up to 100
# years (the corpus runs read recordings of any age).
SETTING_LIMITS = {'expected_count': 4096, 'xid_window_minutes': 100 * 366 * 1440, 'timeout': 86400,
                  'run_timeout': 86400}


def make_issue(gpu, check, severity, message):
    return {'gpu': gpu, 'check': check, 'severity': severity, 'message': clip(message, MESSAGE_MAX)}


def worst_status(issues):
    status = 'ok'
    for item in issues:
        sev = item['severity']
        if sev in _RANK and _RANK[sev] > _RANK[status]:
            status = sev
    return status


def _gt(value, limit):
    return value is not None and value > limit


def _label(dev):
    return 'GPU %s (%s)' % (clip(dev.get('index')),
                            clip(dev.get('pci_address') or dev.get('pci_bus_id') or 'unknown PCI address', 60))


def check_ecc(dev, th):
    issues = []
    ecc = dev.get('ecc_errors') or {}
    gpu = dev.get('index')
    if _gt(ecc.get('volatile_dbe'), 0):
        issues.append(make_issue(gpu, 'ecc_uncorrectable', 'critical',
                                 '%s: %s uncorrectable ECC error(s) since the last driver load; reset the GPU'
                                 % (_label(dev), ecc['volatile_dbe'])))
    if _gt(ecc.get('aggregate_sram_uncorrectable'), 0):
        issues.append(make_issue(gpu, 'ecc_sram_uncorrectable', 'critical',
                                 '%s: %s uncorrectable SRAM ECC error(s) recorded over its lifetime; RMA candidate'
                                 % (_label(dev), ecc['aggregate_sram_uncorrectable'])))
    elif _gt(ecc.get('aggregate_dbe'), 0) and not _gt(ecc.get('volatile_dbe'), 0) \
            and ecc.get('aggregate_sram_uncorrectable') is None and ecc.get('aggregate_dram_uncorrectable') is None:
        # Only a total, no SRAM/DRAM split: the location (and so the remedy) is unknown.
        issues.append(make_issue(gpu, 'ecc_uncorrectable_history', 'warning',
                                 '%s: %s uncorrectable ECC error(s) recorded over its lifetime'
                                 % (_label(dev), ecc['aggregate_dbe'])))
    if _gt(ecc.get('aggregate_sram_correctable'), th['sram_correctable_max']):
        issues.append(make_issue(gpu, 'ecc_correctable', 'warning',
                                 '%s: %s correctable SRAM ECC errors (limit %s)'
                                 % (_label(dev), ecc['aggregate_sram_correctable'], th['sram_correctable_max'])))
    if _gt(ecc.get('aggregate_dram_correctable'), th['dram_correctable_max']):
        issues.append(make_issue(gpu, 'ecc_correctable', 'warning',
                                 '%s: %s correctable DRAM ECC errors (limit %s)'
                                 % (_label(dev), ecc['aggregate_dram_correctable'], th['dram_correctable_max'])))
    issues.extend(_check_mig_ecc(dev, ecc))
    return issues


def _mig_label(mig):
    return 'MIG device %s (GPU instance %s, compute instance %s)' % (
        clip(mig.get('index')), clip(mig.get('gpu_instance_id')), clip(mig.get('compute_instance_id')))


def _check_mig_ecc(dev, ecc):
    """Uncorrectable ECC errors a MIG device reports (in MIG mode the driver counts them per MIG device).

    Reported where the GPU's own counter does not already report them (same check, same severity).
    """
    issues = []
    gpu = dev.get('index')
    for mig in dev.get('mig_devices') or []:
        counts = mig.get('ecc_errors') or {}
        if _gt(counts.get('volatile_dbe'), 0) and not _gt(ecc.get('volatile_dbe'), 0):
            issues.append(make_issue(gpu, 'ecc_uncorrectable', 'critical',
                                     '%s: %s: %s uncorrectable ECC error(s) since the last driver load; reset the GPU'
                                     % (_label(dev), _mig_label(mig), counts['volatile_dbe'])))
        if _gt(counts.get('aggregate_sram_uncorrectable'), 0) and not _gt(ecc.get('aggregate_sram_uncorrectable'), 0):
            issues.append(make_issue(gpu, 'ecc_sram_uncorrectable', 'critical',
                                     '%s: %s: %s uncorrectable SRAM ECC error(s) recorded over its lifetime; '
                                     'RMA candidate' % (_label(dev), _mig_label(mig), counts['aggregate_sram_uncorrectable'])))
    return issues


def check_retired_pages(dev, th):
    issues = []
    pages = dev.get('retired_pages') or {}
    gpu = dev.get('index')
    if pages.get('pending'):
        issues.append(make_issue(gpu, 'retired_pages_pending', 'critical',
                                 '%s: page retirement pending; reboot or reset the GPU to retire the pages'
                                 % _label(dev)))
    total = (pages.get('sbe') or 0) + (pages.get('dbe') or 0)
    if total >= th['retired_pages_max'] and total > 0:
        issues.append(make_issue(gpu, 'retired_pages', 'critical',
                                 '%s: %s retired pages (limit %s); replace the board'
                                 % (_label(dev), total, th['retired_pages_max'])))
    elif _gt(pages.get('dbe'), 0):
        issues.append(make_issue(gpu, 'retired_pages', 'warning',
                                 '%s: %s page(s) retired after double-bit errors' % (_label(dev), pages['dbe'])))
    return issues


def check_remapped_rows(dev, th):
    issues = []
    rows = dev.get('remapped_rows') or {}
    gpu = dev.get('index')
    if rows.get('pending'):
        issues.append(make_issue(gpu, 'row_remap_pending', 'critical',
                                 '%s: row remapping pending; reset the GPU to activate it' % _label(dev)))
    if rows.get('failure'):
        issues.append(make_issue(gpu, 'row_remap_failure', 'critical',
                                 '%s: row remapping failed (no spare rows left); RMA' % _label(dev)))
    if _gt(rows.get('uncorrectable'), th['remapped_rows_uncorrectable_max']):
        issues.append(make_issue(gpu, 'row_remap_uncorrectable', 'critical',
                                 '%s: %s rows remapped after uncorrectable errors (limit %s)'
                                 % (_label(dev), rows['uncorrectable'], th['remapped_rows_uncorrectable_max'])))
    return issues


def check_pcie(dev, th):
    issues = []
    link = dev.get('pcie') or {}
    gpu = dev.get('index')
    cur, top = link.get('width_current'), link.get('width_max')
    if th['pcie_width_severity'] != 'ignore' and cur is not None and top is not None and cur < top:
        issues.append(make_issue(gpu, 'pcie_width', th['pcie_width_severity'],
                                 '%s: PCIe link x%s, capable of x%s' % (_label(dev), cur, top)))
    gen, gen_max = link.get('gen_current'), link.get('gen_max')
    util = dev.get('utilization_gpu_pct')
    if gen is not None and gen_max is not None and gen < gen_max and util is not None \
            and util >= th['pcie_gen_load_pct']:
        issues.append(make_issue(gpu, 'pcie_gen', 'warning',
                                 '%s: PCIe gen %s under load (%s%% busy), capable of gen %s'
                                 % (_label(dev), gen, util, gen_max)))
    return issues


def check_clock_events(dev, th):
    issues = []
    gpu = dev.get('index')
    active = dev.get('clocks_event_reasons_active') or []
    hw = [r for r in active if r in HW_SLOWDOWN_REASONS]
    other = [r for r in active if r not in HW_SLOWDOWN_REASONS and r not in THROTTLE_NORMAL]
    if hw and th['hw_slowdown_severity'] != 'ignore':
        issues.append(make_issue(gpu, 'clocks_hw_slowdown', th['hw_slowdown_severity'],
                                 '%s: clocks held down by %s' % (_label(dev), ', '.join(hw))))
    if other:
        issues.append(make_issue(gpu, 'clocks_event', 'warning',
                                 '%s: clocks held down by %s' % (_label(dev), ', '.join(other))))
    return issues


def check_temperature(dev, th):
    gpu = dev.get('index')
    temp, slow = dev.get('temperature_c'), dev.get('slowdown_temperature_c')
    if temp is None or slow is None:
        return []
    if temp >= slow:
        return [make_issue(gpu, 'temperature', 'critical',
                           '%s: %s C, at or above its slowdown temperature %s C' % (_label(dev), temp, slow))]
    if slow - temp <= th['temperature_margin_c']:
        return [make_issue(gpu, 'temperature', 'warning',
                           '%s: %s C, within %s C of its slowdown temperature %s C'
                           % (_label(dev), temp, th['temperature_margin_c'], slow))]
    return []


def check_persistence(dev, th):
    severity = th['persistence_mode_severity']
    if severity == 'ignore' or dev.get('persistence_mode') is not False:
        return []
    return [make_issue(dev.get('index'), 'persistence_mode', severity,
                       '%s: persistence mode is off (enable nvidia-persistenced)' % _label(dev))]


def check_error_states(dev, th):
    states = dev.get('error_states') or []
    if not states:
        return []
    return [make_issue(dev.get('index'), 'gpu_error_state', 'critical',
                       '%s: nvidia-smi reports an error state (%s); reset the GPU or reboot'
                       % (_label(dev), ', '.join(states)))]


DEVICE_CHECKS = (check_error_states, check_ecc, check_retired_pages, check_remapped_rows, check_pcie, check_clock_events,
                 check_temperature, check_persistence)


def check_device(dev, thresholds=None):
    th = thresholds if thresholds is not None else merge_thresholds()
    issues = []
    for check in DEVICE_CHECKS:
        issues.extend(check(dev, th))
    return issues


def _listing(values):
    """A comma-separated list of addresses or ids, shortened as a whole."""
    return clip(', '.join(str(v) for v in values))


def check_driver(snapshot):
    smi = snapshot.get('smi') or {}
    pci = snapshot.get('pci_addresses')
    if smi.get('failure'):
        failure = smi['failure']
        return [make_issue(None, 'driver', failure['severity'],
                           'nvidia-smi failed (%s): %s' % (failure['reason'], clip(failure['message'], 600)))]
    if smi.get('xml_error'):
        if pci:
            return [make_issue(None, 'driver', 'critical',
                               'nvidia-smi output unusable: %s; %d NVIDIA GPU(s) are on the PCI bus (%s)'
                               % (clip(smi['xml_error'], 600), len(pci), _listing(pci)))]
        return [make_issue(None, 'driver', 'unknown', 'nvidia-smi output unusable: %s' % clip(smi['xml_error'], 600))]
    if not smi.get('found') and pci:
        return [make_issue(None, 'driver', 'critical',
                           'nvidia-smi not found, but %d NVIDIA GPU(s) are on the PCI bus (%s)'
                           % (len(pci), _listing(pci)))]
    return []


# Fields that name one GPU: two records with the same value are one GPU listed twice.
IDENTITY_FIELDS = (('uuid', 'UUID'), ('pci_address', 'PCI bus id'), ('minor_number', 'minor number'))


def distinct_count(devices):
    """GPUs among the records: a record whose UUID or PCI bus id an earlier record has is not counted."""
    seen = set()
    count = 0
    for dev in devices or []:
        keys = set((field, dev.get(field)) for field in ('uuid', 'pci_address') if dev.get(field) is not None)
        if keys and keys & seen:
            seen |= keys
            continue
        seen |= keys
        count += 1
    return count


def check_identity(devices):
    """Each GPU identity (UUID, PCI bus id, minor number) must name one record: a repeat is critical.

    One GPU listed twice means the list cannot be trusted and another GPU may be missing (the count of
    records still matches); Slurm's gres.conf would get one device file twice.
    """
    issues = []
    for field, label in IDENTITY_FIELDS:
        where = {}
        order = []
        for dev in devices or []:
            value = dev.get(field)
            if value is None:
                continue
            if value not in where:
                where[value] = []
                order.append(value)
            where[value].append(dev.get('index'))
        for value in order:
            indexes = where[value]
            if len(indexes) > 1:
                issues.append(make_issue(None, 'gpu_identity', 'critical',
                                         'nvidia-smi lists %s %s for %d GPU records (index %s): one GPU reported '
                                         'more than once, so the GPU list cannot be trusted and a GPU may be missing'
                                         % (label, clip(value, 80), len(indexes), _listing(indexes))))
    return issues


def check_count(count, expected_count, pci_addresses, devices, driver_answered):
    """``count``: the distinct GPUs (distinct_count), compared with ``expected_count``; the PCI bus's
    NVIDIA GPUs compared address by address with the records (not only their number)."""
    issues = []
    if expected_count:
        if count < expected_count:
            issues.append(make_issue(None, 'gpu_count', 'critical',
                                     '%d GPU(s) visible to the driver, %d expected' % (count, expected_count)))
        elif count > expected_count:
            issues.append(make_issue(None, 'gpu_count', 'warning',
                                     '%d GPU(s) visible to the driver, only %d expected (inventory out of date?)'
                                     % (count, expected_count)))
    if driver_answered and pci_addresses:
        known = set(d.get('pci_address') for d in devices)
        missing = [a for a in pci_addresses if a not in known]
        if missing:
            issues.append(make_issue(None, 'gpu_pci_count', 'critical',
                                     '%d NVIDIA GPU(s) on the PCI bus, %d visible to the driver (fell off the bus?): '
                                     'not seen %s' % (len(pci_addresses), count, _listing(missing))))
    return issues


def check_consistency(parsed, smi, pci_addresses):
    """nvidia-smi answered: its ``attached_gpus``, its GPU records and the PCI bus must agree.

    A sysfs without any NVIDIA device next to a driver that reports GPUs (a container's or a test
    double's view) is not judged: the PCI check is then listed in ``checks_skipped``.
    """
    if not parsed or smi.get('failure') or smi.get('xml_error'):
        return []
    issues = []
    devices = parsed.get('devices') or []
    count = len(devices)
    attached = parsed.get('attached_gpus')
    if parsed.get('error_states'):
        issues.append(make_issue(None, 'gpu_attached', 'unknown',
                                 'nvidia-smi output in an error state: %s' % _listing(parsed['error_states'])))
    if attached is not None and (isinstance(attached, bool) or not isinstance(attached, int) or attached < 0):
        issues.append(make_issue(None, 'gpu_attached', 'unknown',
                                 'nvidia-smi reported attached_gpus=%s, not a GPU count' % clip(attached)))
        attached = None
    if attached is not None and attached > count:
        issues.append(make_issue(None, 'gpu_attached', 'critical',
                                 'nvidia-smi counts %d attached GPU(s) but returned %d GPU record(s): '
                                 'the others could not be queried' % (attached, count)))
    elif attached is not None and attached < count:
        issues.append(make_issue(None, 'gpu_attached', 'unknown',
                                 'nvidia-smi output is inconsistent: attached_gpus=%d but %d GPU record(s)'
                                 % (attached, count)))
    if count == 0 and not pci_addresses and not attached:
        issues.append(make_issue(None, 'gpu_count', 'unknown',
                                 'nvidia-smi answered without any GPU record (attached_gpus=%s)'
                                 % ('not reported' if attached is None else attached)))
    if pci_addresses:
        known = set(pci_addresses)
        extra = [d.get('pci_address') or 'unknown address' for d in devices if d.get('pci_address') not in known]
        if extra:
            issues.append(make_issue(None, 'gpu_pci_count', 'unknown',
                                     '%d NVIDIA GPU(s) on the PCI bus, but the driver reports %d: not on the bus %s'
                                     % (len(pci_addresses), count, _listing(extra))))
    return issues


def _gpu_for_pci(devices, pci):
    for dev in devices:
        if pci_matches(pci, dev.get('pci_address')):
            return dev.get('index')
    return None


def summarize_events(events, devices, thresholds):
    """Group kernel events by (kind, code, PCI address): counts for the facts and the metrics."""
    ignore = set(thresholds['xid_ignore'])
    groups = {}
    order = []
    for event in events:
        if event['kind'] == 'xid' and event['code'] in ignore:
            continue
        key = (event['kind'], event['code'], event['pci'])
        if key not in groups:
            groups[key] = {
                'kind': event['kind'], 'xid': event['code'], 'pci': event['pci'],
                'gpu': _gpu_for_pci(devices, event['pci']) if event['kind'] != 'sxid' else None,
                'class': event['class'], 'severity': event['severity'], 'count': 0,
                'first_seen': None, 'last_seen': None, 'message': event['message'],
            }
            order.append(key)
        group = groups[key]
        group['count'] += event.get('count', 1)
        first = format_epoch(event.get('first_epoch', event.get('epoch')))
        stamp = format_epoch(event.get('epoch'))
        if stamp:
            group['first_seen'] = group['first_seen'] or first or stamp
            group['last_seen'] = stamp
        group['message'] = event['message']
    return [groups[k] for k in order]


def check_xid(kernel, summary, window_minutes):
    if kernel is None or kernel.get('error'):
        reason = (kernel or {}).get('error') or 'no kernel log source'
        if (kernel or {}).get('timed_out'):
            # A log command that hangs is not "no log": the verdict cannot be trusted.
            return [make_issue(None, 'xid', 'unknown', 'Xid check failed: kernel log read timed out (%s)' % reason)]
        return [make_issue(None, 'xid', 'info', 'Xid check skipped: kernel log not readable (%s)' % reason)]
    issues = []
    if kernel.get('limited'):
        issues.append(make_issue(None, 'xid', 'info', 'Xid check partial: %s' % kernel['limited']))
    has_nvlink_xid = any(g['kind'] == 'xid' and g['xid'] == 74 for g in summary)
    for group in summary:
        where = 'GPU %s (%s)' % (group['gpu'], group['pci']) if group['gpu'] is not None else 'PCI %s' % group['pci']
        if group['kind'] == 'xid':
            text = '%s: Xid %s (%s class) x%d in the last %d min: %s' % (
                where, group['xid'], group['class'], group['count'], window_minutes, group['message'])
            issues.append(make_issue(group['gpu'], 'xid', group['severity'], text))
        elif group['kind'] == 'sxid':
            text = 'NVSwitch %s: SXid %s x%d in the last %d min%s' % (
                group['pci'], group['xid'], group['count'], window_minutes,
                ' (with Xid 74 on a GPU: suspect the NVSwitch)' if has_nvlink_xid else '')
            issues.append(make_issue(None, 'sxid', group['severity'], text))
        elif group['kind'] == 'fallen_off_bus':
            issues.append(make_issue(group['gpu'], 'xid', 'critical',
                                     '%s: GPU has fallen off the bus (kernel log)' % where))
        else:
            issues.append(make_issue(group['gpu'], 'xid', 'critical',
                                     '%s: driver failed to initialise the GPU x%d (RmInitAdapter failed)'
                                     % (where, group['count'])))
    return issues


def parse_node_list(text):
    """A sysfs node or CPU list ("0-1,4", "" for none) -> sorted ints; None when unreadable or malformed."""
    if text is None:
        return None
    out = set()
    for part in str(text).strip().split(','):
        if not part:
            continue
        bounds = part.split('-')
        if len(bounds) > 2 or not all(b.isdigit() for b in bounds):
            return None
        low, high = int(bounds[0]), int(bounds[-1])
        if high < low or high - low > 4096:
            return None
        out.update(range(low, high + 1))
    return sorted(out)


def _with_numa(devices, numa):
    """Devices with ``numa_node`` from sysfs where nvidia-smi gave none (a negative node: the platform
    reports none, left out)."""
    nodes = (numa or {}).get('devices') or {}
    out = []
    for dev in devices:
        value = nodes.get(dev.get('pci_address'))
        if 'numa_node' not in dev and value is not None and value.lstrip('-').isdigit() and int(value) >= 0:
            dev = dict(dev, numa_node=int(value))
        out.append(dev)
    return out


def build_facts(snapshot, expected_count=None, thresholds=None, window_minutes=120):
    """Facts and verdict for one host.

    ``snapshot`` (from gpu_probe.collect or a test): ``smi`` {found, path, failure, xml_error},
    ``parsed`` (parse_nvidia_smi_xml result or None), ``pci_addresses`` (list, or None when sysfs
    is not readable), ``kernel`` {source, events (already in the window), error}, ``numa`` (optional:
    gpu_probe.read_numa's has_cpu text and numa_node text per PCI address).
    """
    th = thresholds if thresholds is not None else merge_thresholds()
    smi = snapshot.get('smi') or {}
    parsed = snapshot.get('parsed') or {}
    devices = _with_numa(parsed.get('devices') or [], snapshot.get('numa'))
    pci = snapshot.get('pci_addresses')
    kernel = snapshot.get('kernel')
    count = len(devices)
    driver_answered = bool(parsed) and not smi.get('failure')

    issues = check_driver(snapshot)
    issues.extend(check_identity(devices))
    issues.extend(check_count(distinct_count(devices), expected_count, pci, devices, driver_answered or bool(parsed)))
    issues.extend(check_consistency(parsed, smi, pci))
    for dev in devices:
        issues.extend(check_device(dev, th))
    events = (kernel or {}).get('events') or []
    summary = summarize_events(events, devices, th)
    issues.extend(check_xid(kernel, summary, window_minutes))

    skipped = []
    if kernel is None or kernel.get('error'):
        skipped.append('xid')
    if pci is None or (not pci and count):
        skipped.append('gpu_pci_count')
    present = bool(count or pci or smi.get('found'))
    status = worst_status(issues)
    if not present and status == 'ok':
        issues = [i for i in issues if i['check'] != 'xid']
        skipped = [s for s in skipped if s != 'xid']
    return {
        'present': present,
        'source': 'nvidia-smi' if smi.get('found') else 'none',
        'nvidia_smi_path': smi.get('path'),
        'driver_version': parsed.get('driver_version'),
        'cuda_version': parsed.get('cuda_version'),
        'attached_gpus': parsed.get('attached_gpus'),
        'count': count,
        'expected_count': expected_count or None,
        'pci_count': len(pci) if pci is not None else None,
        'pci_devices': pci,
        # NUMA nodes with CPUs (sysfs devices/system/node/has_cpu); None when not read. With each
        # device's numa_node, the slurm role derives gres.conf's Cores= (module_utils/slurm_topology.py).
        'numa_nodes_with_cpus': parse_node_list((snapshot.get('numa') or {}).get('has_cpu')),
        'devices': devices,
        'xid_window_minutes': window_minutes,
        'kernel_log_source': (kernel or {}).get('source'),
        'xid_events': summary,
        'health': {
            'status': status,
            'issues': issues,
            'checks_skipped': skipped,
        },
    }


def exit_code(status):
    return EXIT_CODES.get(status, 3)
