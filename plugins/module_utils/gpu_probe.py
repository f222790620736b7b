# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Gather what the GPU health rules judge: nvidia-smi XML, NVIDIA PCI functions, kernel log.

Commands run through a ``run(argv, timeout) -> (rc, stdout, stderr)`` callable supplied by the
caller (``AnsibleModule.run_command`` in the module, ``subprocess`` in the node program), where
``rc`` is None when the command timed out; a missing program raises OSError. No Ansible imports.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import math
import os
import time

from .gpu_bounds import clip, open_regular, read_regular
from .gpu_kernel_log import (EventGroups, KernelLogParser, decode_text, in_window, parse_journal_json,
                             split_prefix)
from .gpu_smi_failure import classify_failure
from .gpu_smi_xml import GpuXmlError, normalize_pci_address, parse_nvidia_smi_xml
from .timed_command import OUTPUT_CUT_NOTE, OUTPUT_MAX_BYTES

NVIDIA_VENDOR = 0x10de
# Which NVIDIA PCI functions are GPUs, decided once for the health program, gpu_facts and the
# nvidia_driver role (plugins/filter/nvidia.py): every display controller (base class 0x03: 0x0300
# VGA, 0x0302 3D controller of the data center GPUs, 0x0380 other display controller); NVSwitches
# present themselves as 0x0680 (other bridge); anything else (audio 0x0403, USB-C 0x0c03, ...) is
# another function of a board.
GPU_BASE_CLASS = 0x03
NVSWITCH_CLASS = 0x0680


def nvidia_pci_kind(vendor, pci_class):
    """'gpu', 'nvswitch' or 'other' for an NVIDIA PCI function, None for another vendor's.

    ``vendor`` and ``pci_class`` are numbers or sysfs texts ('0x10de', '0x030200')."""
    try:
        vendor = int(vendor, 16) if isinstance(vendor, str) else int(vendor)
        pci_class = int(pci_class, 16) if isinstance(pci_class, str) else int(pci_class)
    except (TypeError, ValueError):
        return None
    if vendor != NVIDIA_VENDOR:
        return None
    if (pci_class >> 16) == GPU_BASE_CLASS:
        return 'gpu'
    if (pci_class >> 8) == NVSWITCH_CLASS:
        return 'nvswitch'
    return 'other'


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


# A sysfs or /proc attribute read here is a few bytes; a larger "attribute" is not one.
ATTRIBUTE_MAX_BYTES = 4096


def read_attribute(path):
    """A small regular file's text (sysfs attributes, /proc/uptime): bounded, never blocking on a FIFO."""
    return read_regular(path, ATTRIBUTE_MAX_BYTES).decode('ascii', 'replace').strip()


def nvidia_pci_addresses(sysfs_root='/sys'):
    """Addresses of the NVIDIA GPUs on the PCI bus (:func:`nvidia_pci_kind`).

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
            vendor = read_attribute(os.path.join(base, entry, 'vendor'))
            pci_class = read_attribute(os.path.join(base, entry, 'class'))
        except (OSError, ValueError):
            continue
        if nvidia_pci_kind(vendor, pci_class) == 'gpu':
            found.append(normalize_pci_address(entry))
    return found


def read_numa(sysfs_root, addresses):
    """The NUMA layout the GPUs sit in, as sysfs writes it: ``has_cpu`` (the text of
    devices/system/node/has_cpu, the NUMA nodes with CPUs, such as "0-1"; None when unreadable) and
    ``devices`` ({PCI address: text of its numa_node, "-1" when the platform gives none}, the addresses
    whose file could be read). Each file is a few bytes; a missing one is left out, never an error."""
    def attribute(path):
        try:
            return read_attribute(path)
        except (OSError, ValueError):
            return None
    devices = {}
    for address in addresses or []:
        value = attribute(os.path.join(sysfs_root, 'bus', 'pci', 'devices', address, 'numa_node'))
        if value is not None:
            devices[address] = value
    return {'has_cpu': attribute(os.path.join(sysfs_root, 'devices', 'system', 'node', 'has_cpu')), 'devices': devices}


def read_uptime(path='/proc/uptime'):
    try:
        value = float(read_attribute(path).split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return value if math.isfinite(value) and value >= 0 else None


# The kernel log file is read from its end: at most this many bytes (the newest lines), and only
# back to the first line older than the window. Memory stays bounded whatever the file's size.
KERNEL_LOG_MAX_BYTES = 16 * 1024 * 1024
_BLOCK = 1024 * 1024
# Lines at most this long are looked at; a longer one is cut (no kernel message is that long).
_MAX_LINE = 64 * 1024


def _stamp_of(line, now, uptime):
    """Age in seconds of a log line with a usable stamp, else None."""
    if not line or line[0] in ' \t':
        return None
    epoch, mono, dummy = split_prefix(line, now)
    if epoch is not None and now is not None:
        return now - epoch
    if mono is not None and uptime is not None:
        return uptime - mono
    return None


def _tail_start(handle, size, window_s, now, uptime, max_bytes):
    """Offset to read from: the start of the block holding the first line older than the window.

    Returns ``(offset, limited)``; ``limited`` is True when ``max_bytes`` stopped the search
    before a line older than the window was seen (older lines of the window are then not read).
    """
    pos = size
    floor = max(0, size - max_bytes)
    while pos > floor:
        start = max(floor, pos - _BLOCK)
        handle.seek(start)
        block = handle.read(pos - start)
        lines = block.split(b'\n')
        if start > 0:
            lines = lines[1:]  # the first piece may be the tail of a longer line
        for raw in lines[:200]:
            age = _stamp_of(raw[:_MAX_LINE].decode('utf-8', 'replace'), now, uptime)
            if age is not None and age > window_s:
                return start, False
        pos = start
    return floor, floor > 0


def read_kernel_log_file(path, window_s, now=None, uptime=None, max_bytes=KERNEL_LOG_MAX_BYTES):
    """``{source, events, error, limited}`` from a kernel log file, read from its tail.

    Lines whose date cannot be read, or that carry no date, never count as recent.
    """
    groups = EventGroups()

    def keep(event):
        if in_window(event, window_s, now, uptime, keep_undated=False):
            groups.add(event)

    parser = KernelLogParser(keep, now)
    try:
        # A FIFO, a device (/dev/zero) or a directory is refused at once, never read.
        with open_regular(path) as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            offset, limited = _tail_start(handle, size, window_s, now, uptime, max_bytes)
            handle.seek(offset)
            # The rest of a line cut by the offset or by _MAX_LINE is skipped: a piece of a line
            # never counts as a line of its own.
            skipping = offset > 0
            for raw in iter(lambda: handle.readline(_MAX_LINE), b''):
                if not skipping:
                    parser.feed(raw.decode('utf-8', 'replace'))
                skipping = not raw.endswith(b'\n')
    except (IOError, OSError) as exc:
        return {'source': 'file', 'events': [], 'error': 'cannot read %s: %s' % (clip(path), clip(exc.strerror or str(exc))),
                'limited': None}
    parser.close()
    note = None
    if limited:
        note = 'only the last %d MiB of %s were read (%d MiB)' % (max_bytes // 1048576, clip(path), size // 1048576)
    return {'source': 'file', 'events': groups.events(), 'error': None, 'limited': note}


def _window_events(parse, text, window_s, now, uptime):
    groups = EventGroups()

    def keep(event):
        if in_window(event, window_s, now, uptime, keep_undated=True):
            groups.add(event)
    parse(text, keep)
    return groups.events()


def _parse_text(text, sink):
    parser = KernelLogParser(sink)
    for line in decode_text(text).split('\n'):
        parser.feed(line)
    parser.close()


def _parse_journal(text, sink):
    parse_journal_json(text, sink)


def read_kernel_log(run, window_minutes, kernel_log_path=None, now=None, uptime=None, timeout=30):
    """``{source, events, error, timed_out, limited}`` with the GPU events of the last ``window_minutes``.

    Source order: ``kernel_log_path`` (a file, for tests and the lab), the journal's kernel
    transport (``journalctl -k -o json``) when it holds kernel messages of this boot (not so in
    most containers), then ``dmesg``. ``events`` are grouped (see EventGroups). ``timed_out`` is
    True when a log command had to be killed and no source answered.
    """
    now = time.time() if now is None else now
    window_s = window_minutes * 60
    if kernel_log_path:
        result = read_kernel_log_file(kernel_log_path, window_s, now=now, uptime=uptime)
        result['timed_out'] = False
        return result

    errors = []
    timed_out = False
    journalctl = find_executable('journalctl')
    if journalctl:
        try:
            rc, out, err = run([journalctl, '-k', '-b', '-q', '--no-pager', '-n', '1'], timeout)
            if rc == 0 and decode_text(out).strip():
                # JSON keeps one kernel message per entry with its transport: a line break inside
                # a message never becomes a line of its own.
                rc, out, err = run([journalctl, '-k', '-q', '--no-pager', '-o', 'json',
                                    '--since', '-%dmin' % window_minutes], timeout)
                if rc == 0:
                    events = _window_events(_parse_journal, out, window_s, now, uptime)
                    return {'source': 'journalctl', 'events': events, 'error': None, 'timed_out': False,
                            'limited': None}
            if rc is None:
                timed_out = True
                errors.append('journalctl -k: no answer within %ss (killed)' % timeout)
            else:
                errors.append('journalctl -k: %s' % (clip(decode_text(err).strip(), 300)
                                                     or 'no kernel messages in the journal'))
        except OSError as exc:
            errors.append('journalctl: %s' % clip(str(exc)))
    dmesg = find_executable('dmesg')
    if dmesg:
        try:
            rc, out, err = run([dmesg], timeout)
            if rc == 0:
                events = _window_events(_parse_text, out, window_s, now, uptime)
                return {'source': 'dmesg', 'events': events, 'error': None, 'timed_out': False, 'limited': None}
            if rc is None:
                timed_out = True
                errors.append('dmesg: no answer within %ss (killed)' % timeout)
            else:
                errors.append('dmesg: %s' % (clip(decode_text(err).strip(), 300) or 'exit %s' % rc))
        except OSError as exc:
            errors.append('dmesg: %s' % clip(str(exc)))
    else:
        errors.append('dmesg not found')
    return {'source': None, 'events': [], 'error': '; '.join(errors), 'timed_out': timed_out, 'limited': None}


def run_nvidia_smi(run, path, timeout=60):
    """``{found, path, failure, xml_error}`` and the parsed XML (or None).

    Exit 0 without a parseable ``nvidia_smi_log`` document (nothing, an empty line, garbage) is an
    ``xml_error``, never "no GPUs".
    """
    smi = {'found': bool(path), 'path': path, 'failure': None, 'xml_error': None}
    if not path:
        return smi, None
    try:
        rc, out, err = run([path, '-q', '-x'], timeout)
    except OSError as exc:
        smi['failure'] = {'reason': 'not_executable', 'severity': 'unknown', 'rc': None,
                          'message': 'cannot run %s: %s' % (clip(path), clip(str(exc)))}
        return smi, None
    out, err = decode_text(out), decode_text(err)
    cut = OUTPUT_CUT_NOTE % ('stdout', OUTPUT_MAX_BYTES)
    if cut in err:
        # A flood on stdout: what was kept is not the whole document, whatever it looks like.
        smi['xml_error'] = ('nvidia-smi printed more than %d MiB on stdout; the output was cut and is not '
                            'judged' % (OUTPUT_MAX_BYTES // 1048576))
        return smi, None
    if rc is None:
        smi['failure'] = {'reason': 'timeout', 'severity': 'critical', 'rc': None,
                          'message': 'nvidia-smi hung: no answer within %ss, its process group was killed '
                                     '(a hung driver usually means a sick GPU)' % timeout}
        return smi, None
    failure = classify_failure(rc, out, err)
    parsed = None
    if failure is None or '<nvidia_smi_log' in out:
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
    snapshot = {'smi': smi, 'parsed': parsed, 'pci_addresses': pci, 'kernel': None,
                'numa': read_numa(sysfs_root, pci) if pci else None}
    if read_log and (path or pci or kernel_log_path):
        snapshot['kernel'] = read_kernel_log(run, window_minutes, kernel_log_path, now=now,
                                             uptime=uptime if uptime is not None else read_uptime(),
                                             timeout=min(timeout, 30))
    return snapshot
