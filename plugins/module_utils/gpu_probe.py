# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Gather what the GPU health rules judge: nvidia-smi XML, NVIDIA PCI functions, kernel log.

Commands run through a ``run(argv, timeout) -> (rc, stdout, stderr)`` callable supplied by the
caller (``AnsibleModule.run_command`` in the module, ``subprocess`` in the node program), where
``rc`` is None when the command timed out; a missing program raises OSError. No Ansible imports.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import time

from .gpu_kernel_log import events_in_window, parse_kernel_log
from .gpu_smi_failure import classify_failure
from .gpu_smi_xml import GpuXmlError, normalize_pci_address, parse_nvidia_smi_xml

NVIDIA_VENDOR = 0x10de
# Common locations besides PATH (cron/systemd PATHs are short; the lab stand-in lives elsewhere).
EXTRA_BIN_DIRS = ('/usr/bin', '/usr/sbin', '/usr/local/bin', '/usr/local/sbin', '/bin', '/sbin')


def find_executable(name, path=None):
    dirs = (path if path is not None else os.environ.get('PATH', '')).split(os.pathsep)
    for directory in list(dirs) + list(EXTRA_BIN_DIRS):
        if not directory:
            continue
        candidate = os.path.join(directory, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def _read(path):
    with open(path) as handle:
        return handle.read().strip()


def nvidia_pci_addresses(sysfs_root='/sys'):
    """Addresses of NVIDIA display controllers (class 0x03xx; NVSwitches are 0x0680) on the PCI bus.

    None when the PCI tree cannot be read (then the PCI-vs-driver count is not judged).
    """
    base = os.path.join(sysfs_root, 'bus', 'pci', 'devices')
    try:
        entries = sorted(os.listdir(base))
    except OSError:
        return None
    found = []
    for entry in entries:
        try:
            vendor = int(_read(os.path.join(base, entry, 'vendor')), 16)
            pci_class = int(_read(os.path.join(base, entry, 'class')), 16)
        except (OSError, ValueError):
            continue
        if vendor == NVIDIA_VENDOR and (pci_class >> 16) == 0x03:
            found.append(normalize_pci_address(entry))
    return found


def read_uptime(path='/proc/uptime'):
    try:
        return float(_read(path).split()[0])
    except (OSError, ValueError, IndexError):
        return None


def read_kernel_log(run, window_minutes, kernel_log_path=None, now=None, uptime=None, timeout=30):
    """``{source, events, error}`` with the GPU events of the last ``window_minutes``.

    Source order: ``kernel_log_path`` (a file, for tests and the lab), ``journalctl -k`` when the
    journal holds kernel messages of this boot (not so in most containers), then ``dmesg``.
    """
    now = time.time() if now is None else now
    window_s = window_minutes * 60
    if kernel_log_path:
        try:
            with open(kernel_log_path, 'rb') as handle:
                text = handle.read()
        except (IOError, OSError) as exc:
            return {'source': 'file', 'events': [], 'error': 'cannot read %s: %s' % (kernel_log_path, exc)}
        events = parse_kernel_log(text, now=now)
        return {'source': 'file', 'events': events_in_window(events, window_s, now, uptime), 'error': None}

    errors = []
    journalctl = find_executable('journalctl')
    if journalctl:
        try:
            rc, out, err = run([journalctl, '-k', '-b', '-q', '--no-pager', '-n', '1'], timeout)
            if rc == 0 and out.strip():
                rc, out, err = run([journalctl, '-k', '-q', '--no-pager', '-o', 'short-iso',
                                    '--since', '-%dmin' % window_minutes], timeout)
                if rc == 0:
                    events = parse_kernel_log(out, now=now)
                    return {'source': 'journalctl', 'events': events_in_window(events, window_s, now, uptime),
                            'error': None}
            errors.append('journalctl -k: %s' % ((err or '').strip() or 'no kernel messages in the journal'
                                                 if rc is not None else 'timed out'))
        except OSError as exc:
            errors.append('journalctl: %s' % exc)
    dmesg = find_executable('dmesg')
    if dmesg:
        try:
            rc, out, err = run([dmesg], timeout)
            if rc == 0:
                events = parse_kernel_log(out, now=now)
                return {'source': 'dmesg', 'events': events_in_window(events, window_s, now, uptime), 'error': None}
            errors.append('dmesg: %s' % ((err or '').strip() or 'exit %s' % rc))
        except OSError as exc:
            errors.append('dmesg: %s' % exc)
    else:
        errors.append('dmesg not found')
    return {'source': None, 'events': [], 'error': '; '.join(errors)}


def run_nvidia_smi(run, path, timeout=60):
    """``{found, path, failure, xml_error}`` and the parsed XML (or None)."""
    smi = {'found': bool(path), 'path': path, 'failure': None, 'xml_error': None}
    if not path:
        return smi, None
    try:
        rc, out, err = run([path, '-q', '-x'], timeout)
    except OSError as exc:
        smi['failure'] = {'reason': 'not_executable', 'severity': 'unknown', 'rc': None,
                          'message': 'cannot run %s: %s' % (path, exc)}
        return smi, None
    if rc is None:
        smi['failure'] = {'reason': 'timeout', 'severity': 'critical', 'rc': None,
                          'message': 'no answer within %ss (a hung driver usually means a sick GPU)' % timeout}
        return smi, None
    failure = classify_failure(rc, out, err)
    parsed = None
    if '<nvidia_smi_log' in (out or ''):
        try:
            parsed = parse_nvidia_smi_xml(out)
        except GpuXmlError as exc:
            if failure is None:
                smi['xml_error'] = str(exc)
    smi['failure'] = failure
    return smi, parsed


def collect(run, nvidia_smi_path=None, sysfs_root='/sys', kernel_log_path=None, window_minutes=120,
            now=None, timeout=60, uptime=None, read_log=True):
    """Everything :func:`gpu_health.build_facts` needs, from the host."""
    if nvidia_smi_path:
        # A configured path that does not exist counts as "no nvidia-smi" (judged with the PCI bus).
        path = nvidia_smi_path if os.path.exists(nvidia_smi_path) else None
    else:
        path = find_executable('nvidia-smi')
    smi, parsed = run_nvidia_smi(run, path, timeout)
    if nvidia_smi_path and not path:
        smi['path'] = nvidia_smi_path
    pci = nvidia_pci_addresses(sysfs_root)
    snapshot = {'smi': smi, 'parsed': parsed, 'pci_addresses': pci, 'kernel': None}
    if read_log and (path or pci or kernel_log_path):
        snapshot['kernel'] = read_kernel_log(run, window_minutes, kernel_log_path, now=now,
                                             uptime=uptime if uptime is not None else read_uptime(),
                                             timeout=min(timeout, 30))
    return snapshot
