# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU fabric state: is every GPU of an NVSwitch system registered with the NVLink fabric?

On HGX/DGX systems with NVSwitches a GPU only runs CUDA work once Fabric Manager has trained the
NVLink fabric and registered it: ``nvidia-smi -q`` then reports, per GPU, ``Fabric / State:
Completed`` and ``Status: Success`` (XML: ``<fabric><state>``, ``<status>``). While Fabric Manager
is down the state stays ``Not Started`` or ``In Progress`` and every CUDA context fails, yet the GPU
looks healthy everywhere else. Without a fabric, and on GPUs before Hopper (A100 included), the fields read ``N/A``.

Functions for the node health program (Python 3.6+, standard library only, no Ansible imports):
:func:`nvswitch_addresses` (the NVSwitches on the PCI bus, sysfs), :func:`fabric_from_xml` and
:func:`fabric_from_q_text` (the per-GPU fields), :func:`fabric_manager_state` (``systemctl is-active``
through the program's timed runner) and :func:`health_issues`, which judges both only where the
node has NVSwitches: a GPU not ready is critical, Fabric Manager not active is critical.
:func:`prometheus_samples` gives the textfile metrics (none on a node without NVSwitches).
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import re

from . import gpu_smi_xml
from .gpu_bounds import clip
from .gpu_probe import find_executable, nvidia_pci_kind, read_attribute
from .prom_text import render_samples
from .gpu_smi_xml import normalize_pci_address

FABRIC_MANAGER_SERVICE = 'nvidia-fabricmanager.service'
SYSTEMCTL_TIMEOUT = 10
READY_STATE = 'Completed'
READY_STATUS = 'Success'
NOT_APPLICABLE = ('N/A', '', None)

_GPU_HEADER_RE = re.compile(r'^GPU (?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$')
_FIELD_RE = re.compile(r'^(?P<indent>\s+)(?P<key>[^:]+?)\s*:\s*(?P<value>.*?)\s*$')


def fabric_from_q_text(text):
    """Per-GPU fabric fields from ``nvidia-smi -q`` text, in output order.

    Returns ``[{'gpu': bus id, 'state': str or None, 'status': str or None}]``; a GPU whose output
    has no Fabric section (drivers before R530) gets ``None`` for both.
    """
    gpus = []
    current = None
    in_fabric = False
    fabric_indent = None
    for line in str(text or '').splitlines():
        header = _GPU_HEADER_RE.match(line)
        if header:
            current = {'gpu': header.group('bus'), 'state': None, 'status': None}
            gpus.append(current)
            in_fabric = False
            continue
        if current is None:
            continue
        stripped = line.strip()
        indent = len(line) - len(line.lstrip(' '))
        if stripped == 'Fabric' and ':' not in line:
            in_fabric = True
            fabric_indent = indent
            continue
        if in_fabric:
            if not stripped:
                continue
            if indent <= fabric_indent:
                in_fabric = False
                continue
            field = _FIELD_RE.match(line)
            # Only the section's own fields, not those of its Health subsection.
            if field and len(field.group('indent')) == fabric_indent + 4:
                key = field.group('key').strip().lower()
                if key in ('state', 'status'):
                    current[key] = field.group('value')
    return gpus


def fabric_from_xml(document):
    """Per-GPU fabric fields from ``nvidia-smi -q -x`` (text, bytes or the parsed root element).

    Text is parsed the way gpu_smi_xml parses it (same refusals, GpuXmlError); ``gpu`` is the GPU's
    PCI bus id. A GPU without a ``<fabric>`` element (drivers before R530) gets ``None`` for both fields.
    """
    if isinstance(document, (str, bytes)):
        # One parser (and its refusals) for nvidia-smi XML: gpu_smi_xml's.
        root = gpu_smi_xml._root(document)  # pylint: disable=protected-access
    else:
        root = document
    gpus = []
    for gpu in root.findall('gpu'):
        fabric = gpu.find('fabric')
        state = fabric.findtext('state') if fabric is not None else None
        status = fabric.findtext('status') if fabric is not None else None
        bus_id = gpu.findtext('pci/pci_bus_id') or gpu.get('id')
        gpus.append({'gpu': bus_id.strip() if bus_id else None,
                     'state': state.strip() if state is not None else None,
                     'status': status.strip() if status is not None else None})
    return gpus


def fabric_findings(gpus, nvswitch_system):
    """Health findings for the fabric fields of every GPU.

    ``nvswitch_system``: the node has NVSwitches (Fabric Manager expected). There, a GPU that reports
    a fabric state must report ``Completed``/``Success``; anything else is critical. A GPU that
    reports none (``N/A`` or no field: GPUs before Hopper, such as the A100 of an HGX A100 board, and
    drivers before R530) is not judged here: Fabric Manager's service state is the check there.
    Without NVSwitches nothing is judged. Returns ``[{'gpu', 'severity', 'message'}]`` (critical
    findings only).
    """
    if not nvswitch_system:
        return []
    if not gpus:
        return [{'gpu': None, 'severity': 'critical',
                 'message': 'NVSwitch system but nvidia-smi reported no GPU (no fabric state to judge)'}]
    findings = []
    for gpu in gpus:
        state, status = gpu.get('state'), gpu.get('status')
        if state in NOT_APPLICABLE or (state == READY_STATE and status == READY_STATUS):
            continue
        if state != READY_STATE:
            why = ('NVLink fabric state %s: not ready, CUDA jobs fail until Fabric Manager registers the GPU'
                   % clip(state, 80))
        else:
            why = 'NVLink fabric registration finished with status %s' % clip(status, 80)
        findings.append({'gpu': gpu.get('gpu'), 'severity': 'critical',
                         'message': 'GPU %s: %s (check nvidia-fabricmanager)' % (clip(gpu.get('gpu'), 80), why)})
    return findings


# (metric, type, help) of the samples prometheus_samples() emits (only on a node with NVSwitches).
METRICS = (
    ('gpucluster_nvswitches', 'gauge', 'NVSwitches on the PCI bus (NVIDIA PCI class 0x0680).'),
    ('gpucluster_fabric_manager_active', 'gauge',
     'nvidia-fabricmanager.service: 1 active, 0 not (no sample when systemctl could not tell).'),
    ('gpucluster_gpu_fabric_ready', 'gauge',
     'NVLink fabric registration of a GPU: 1 state Completed with status Success, else 0 '
     '(only GPUs that report a fabric state, Hopper and later).'),
)


def nvswitch_addresses(sysfs_root='/sys'):
    """PCI addresses of the NVSwitches under ``sysfs_root``/bus/pci/devices (empty when unreadable)."""
    base = os.path.join(sysfs_root, 'bus', 'pci', 'devices')
    try:
        entries = sorted(os.listdir(base))
    except OSError:
        return []
    found = []
    for entry in entries:
        try:
            vendor = read_attribute(os.path.join(base, entry, 'vendor'))
            pci_class = read_attribute(os.path.join(base, entry, 'class'))
        except (OSError, ValueError):
            continue
        if nvidia_pci_kind(vendor, pci_class) == 'nvswitch':
            found.append(normalize_pci_address(entry))
    return found


def fabric_manager_state(run, systemctl=None, timeout=SYSTEMCTL_TIMEOUT):
    """``(active, detail)`` of Fabric Manager from ``systemctl is-active``, through ``run(argv, timeout)``.

    ``active`` is True or False, or None when systemctl cannot tell (not found, no answer in time,
    an error); ``detail`` is the state systemd names (active, inactive, failed, activating, ...) or
    why there is none.
    """
    systemctl = systemctl or find_executable('systemctl')
    if not systemctl:
        return None, 'systemctl not found'
    try:
        rc, out, err = run([systemctl, 'is-active', FABRIC_MANAGER_SERVICE], timeout)
    except OSError as exc:
        return None, 'cannot run %s: %s' % (clip(systemctl), clip(str(exc)))
    if rc is None:
        return None, 'systemctl is-active gave no answer within %gs' % round(timeout, 1)
    state = ' '.join(str(out or '').split()) or ' '.join(str(err or '').split())
    if rc == 0 and state == 'active':
        return True, state
    if state in ('inactive', 'failed', 'activating', 'deactivating', 'reloading', 'maintenance', 'refreshing'):
        return False, state
    return None, 'systemctl is-active exited %s: %s' % (rc, clip(state) or 'no output')


def _device_index(devices):
    return dict((normalize_pci_address(d.get('pci_bus_id')), d.get('index')) for d in devices or []
                if d.get('pci_bus_id'))


def health_issues(nvswitches, gpus, devices, manager):
    """Findings in the health program's issue shape ({gpu, check, severity, message}).

    ``nvswitches``: nvswitch_addresses(); ``gpus``: fabric_from_xml() of this run's nvidia-smi output
    (None when there was none); ``devices``: the GPU facts' devices (for the GPU index);
    ``manager``: fabric_manager_state(). Nothing is judged on a node without NVSwitches.
    """
    if not nvswitches:
        return []
    issues = []
    active, detail = manager
    if active is False:
        issues.append({'gpu': None, 'check': 'fabric_manager', 'severity': 'critical',
                       'message': '%s is %s on a node with %d NVSwitches: the GPUs cannot join the NVLink '
                                  'fabric' % (FABRIC_MANAGER_SERVICE, detail, len(nvswitches))})
    elif active is None:
        issues.append({'gpu': None, 'check': 'fabric_manager', 'severity': 'warning',
                       'message': 'cannot tell whether %s runs: %s' % (FABRIC_MANAGER_SERVICE, detail)})
    if gpus is None:
        # nvidia-smi did not answer: the driver check already says so.
        return issues
    index = _device_index(devices)
    for finding in fabric_findings(gpus, nvswitch_system=True):
        bus = normalize_pci_address(finding['gpu']) if finding['gpu'] else None
        issues.append({'gpu': index.get(bus), 'check': 'gpu_fabric', 'severity': finding['severity'],
                       'message': finding['message']})
    return issues


def prometheus_samples(nvswitches, gpus, devices, manager):
    """[(metric, [(label, value)...], number)]; none on a node without NVSwitches."""
    if not nvswitches:
        return []
    samples = [('gpucluster_nvswitches', [], len(nvswitches))]
    if manager[0] is not None:
        samples.append(('gpucluster_fabric_manager_active', [], 1 if manager[0] else 0))
    by_bus = dict((normalize_pci_address(g['gpu']), g) for g in gpus or [] if g.get('gpu'))
    for dev in devices or []:
        gpu = by_bus.get(normalize_pci_address(dev.get('pci_bus_id')))
        if gpu is None or gpu.get('state') in NOT_APPLICABLE:
            # Not reported by this GPU (before Hopper): no sample rather than a false "not ready".
            continue
        ready = gpu.get('state') == READY_STATE and gpu.get('status') == READY_STATUS
        samples.append(('gpucluster_gpu_fabric_ready', [('gpu', dev.get('index')), ('uuid', dev.get('uuid') or '')],
                        1 if ready else 0))
    return samples


def render_prometheus(samples):
    """Exposition text (HELP/TYPE once per metric that has samples, in METRICS order), as gpu_prom writes it."""
    return render_samples(METRICS, samples)
