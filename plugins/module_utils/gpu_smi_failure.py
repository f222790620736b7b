# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Classify a failed ``nvidia-smi`` run (exit code and output text) into a driver finding.

Pure code, no I/O, no Ansible imports (shared with the node health program). Python 3.9+.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re

from .gpu_bounds import clip

# nvidia-smi's documented return codes.
EXIT_CODES = {
    2: 'invalid argument or flag',
    3: 'the requested operation is not available on the target device',
    4: 'insufficient permissions',
    6: 'the query was unsuccessful',
    8: 'external power cables are not attached properly',
    9: 'the NVIDIA driver is not loaded',
    10: 'the NVIDIA kernel detected an interrupt issue with a GPU',
    12: 'the NVML shared library could not be found or loaded',
    13: 'the local NVML version does not implement this function',
    14: 'the infoROM is corrupted',
    15: 'the GPU has fallen off the bus or has otherwise become inaccessible',
    255: 'other error or internal driver error',
}

# (reason, pattern, severity). Order matters: the first match names the reason.
_PATTERNS = (
    ('driver_not_loaded', re.compile(r"couldn't communicate with the NVIDIA driver", re.I), 'critical'),
    ('version_mismatch', re.compile(r'Driver/library version mismatch', re.I), 'critical'),
    ('nvml_missing', re.compile(r'NVML Shared Library Not Found|libnvidia-ml\.so[^\n]*(?:not found|cannot open)', re.I),
     'critical'),
    ('nvml_init_failed', re.compile(r'Failed to initialize NVML', re.I), 'critical'),
    ('gpu_lost', re.compile(r'GPU is lost|fallen off the bus', re.I), 'critical'),
    ('device_handle', re.compile(r'Unable to determine the device handle for GPU', re.I), 'critical'),
    ('inforom_corrupted', re.compile(r'infoROM is corrupted', re.I), 'critical'),
    ('gpu_requires_reset', re.compile(r'GPU requires reset|reset required', re.I), 'critical'),
    ('no_devices', re.compile(r'No devices were found', re.I), 'critical'),
    ('insufficient_permissions', re.compile(r'Insufficient Permissions', re.I), 'unknown'),
)
_EXIT_REASON = {
    9: ('driver_not_loaded', 'critical'),
    12: ('nvml_missing', 'critical'),
    14: ('inforom_corrupted', 'critical'),
    15: ('gpu_lost', 'critical'),
    4: ('insufficient_permissions', 'unknown'),
}


def _relevant_line(text, pattern):
    for line in text.splitlines():
        if pattern.search(line):
            return line.strip()
    return None


def classify_failure(rc, stdout, stderr=''):
    """Return ``None`` when nvidia-smi looks healthy, else ``{reason, severity, rc, message}``.

    Text wins over the exit code (a message names the problem better than a number); an XML
    document on stdout with exit code 0 and no failure text is not a failure. A message such as
    "Unable to determine the device handle for GPU..." may come next to XML for the other GPUs:
    the caller parses the XML and adds this finding.
    """
    out = stdout.decode('utf-8', 'replace') if isinstance(stdout, bytes) else (stdout or '')
    err = stderr.decode('utf-8', 'replace') if isinstance(stderr, bytes) else (stderr or '')
    # Only text outside the XML document is failure text (a GPU name never says "fallen off").
    outside = out
    start = out.find('<nvidia_smi_log')
    if start >= 0:
        end = out.rfind('</nvidia_smi_log>')
        outside = out[:start] + (out[end + len('</nvidia_smi_log>'):] if end >= 0 else '')
    text = '\n'.join(t for t in (err, outside) if t.strip())
    for reason, pattern, severity in _PATTERNS:
        line = _relevant_line(text, pattern)
        if line:
            message = clip(line)
            extra = [ln.strip() for ln in text.splitlines() if ln.strip() and ln.strip() != line]
            if extra:
                message = '%s (%s)' % (message, '; '.join(clip(ln, 120) for ln in extra[:3]))
            return {'reason': reason, 'severity': severity, 'rc': rc, 'message': message}
    if rc == 0:
        return None
    reason, severity = _EXIT_REASON.get(rc, ('nvidia_smi_failed', 'critical'))
    first = text.strip().splitlines()[0].strip() if text.strip() else ''
    message = 'nvidia-smi exited with %s (%s)' % (rc, EXIT_CODES.get(rc, 'undocumented exit code'))
    if first:
        message = '%s: %s' % (message, clip(first))
    return {'reason': reason, 'severity': severity, 'rc': rc, 'message': message}
