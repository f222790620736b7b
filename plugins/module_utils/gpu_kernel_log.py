# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Find NVIDIA Xid / SXid events and GPU bus failures in kernel log text.

Pure code, no I/O, no Ansible imports (shared with the node health program). Python 3.9+.

Understands the line prefixes the kernel log comes with: ``dmesg`` (``[  12.345678]``),
``dmesg -T`` / ``--ctime`` (``[Sun Feb 23 16:24:18 2025]``), ``dmesg --time-format iso``
(``2024-11-15T12:02:03,470068+00:00``), ``dmesg --decode`` (``kern  :warn  : ...``),
syslog and ``journalctl -k`` (``Feb 14 05:03:41 host kernel: ...``), ``journalctl -o short-iso``
(``2025-02-14T05:03:41+0000 host kernel: ...``), ``/dev/kmsg`` records
(``4,1234,206764307,-;...``) and bare messages without a time stamp.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import calendar
import datetime
import re
import time

# Xid classes after NVIDIA's Xid catalogue and what GPU fleets do with them
# (see docs/health-checks.md). Severity: critical drains the node, warning is reported.
XID_REBOOT = frozenset((79, 151, 168))
XID_RESET = frozenset((48, 64, 95, 109, 110, 119, 120, 136, 140, 143, 155, 156, 158))
XID_NVLINK_RESET = frozenset((74,))
XID_NVLINK_MONITOR = frozenset(range(144, 151))
XID_MONITOR = frozenset((63, 81, 92, 94, 121, 125, 126, 154, 157, 162, 163, 164))
# Usually raised by a faulty application (illegal address, MMU fault, ...), not by the GPU.
XID_APPLICATION = frozenset((13, 31, 43, 45))

_XID = re.compile(r'NVRM: Xid \((?:PCI:)?([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.\d)?\): (\d+),(.*)$')
_SXID = re.compile(r'SXid \((?:PCI:)?([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.\d)?\): (\d+),(.*)$')
_GPU_AT = re.compile(r'NVRM: (?:The NVIDIA )?GPU (?:at )?(?:PCI:)?([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})')
_FALLEN = re.compile(r'fallen off the bus')
_RMINIT = re.compile(r'NVRM: GPU ([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.\d)?: RmInitAdapter failed')

_MONTHS = dict((m, i + 1) for i, m in enumerate(
    ('Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec')))
_P_MONO = re.compile(r'^\[\s*(\d+\.\d+)\]\s?(.*)$')
_P_CTIME = re.compile(r'^\[(?:\w{3}) (\w{3})\s+(\d{1,2}) (\d{2}):(\d{2}):(\d{2}) (\d{4})\]\s?(.*)$')
_P_DECODE = re.compile(r'^(?:kern|user|mail|daemon|auth|syslog|lpr|news|uucp|cron|authpriv|ftp|local[0-7])\s*:'
                       r'\s*(?:emerg|alert|crit|err|warn|notice|info|debug)\s*:\s(.*)$')
_P_ISO = re.compile(r'^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:[,.](\d+))?([+-]\d{2}:?\d{2}|Z)?\s(.*)$')
_P_SYSLOG = re.compile(r'^(\w{3})\s+(\d{1,2}) (\d{2}):(\d{2}):(\d{2}) \S+ kernel: ?(.*)$')
_P_KMSG = re.compile(r'^\d+,\d+,(\d+),[^;]*;(.*)$')
_P_CONT = re.compile(r'^\s+(NVRM: .*)$')


def xid_class(code):
    """(class, severity) for an Xid code."""
    if code in XID_REBOOT:
        return 'reboot', 'critical'
    if code in XID_RESET:
        return 'reset', 'critical'
    if code in XID_NVLINK_RESET:
        return 'nvlink_reset', 'critical'
    if code in XID_NVLINK_MONITOR:
        return 'nvlink', 'warning'
    if code in XID_MONITOR:
        return 'monitor', 'warning'
    if code in XID_APPLICATION:
        return 'application', 'info'
    return 'unclassified', 'warning'


def _tz_seconds(text):
    if not text or text == 'Z':
        return 0
    sign = -1 if text[0] == '-' else 1
    digits = text[1:].replace(':', '')
    return sign * (int(digits[:2]) * 3600 + int(digits[2:4]) * 60)


def _utc(year, month, day, hour, minute, second):
    return calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))


def _local(year, month, day, hour, minute, second):
    return time.mktime((year, month, day, hour, minute, second, 0, 0, -1))


def split_prefix(line, now=None):
    """Return ``(epoch or None, monotonic seconds or None, message)`` for one log line."""
    match = _P_DECODE.match(line)
    if match:
        line = match.group(1)
    match = _P_MONO.match(line)
    if match:
        return None, float(match.group(1)), match.group(2)
    match = _P_CTIME.match(line)
    if match:
        mon, day, hh, mm, ss, year, msg = match.groups()
        if mon in _MONTHS:
            return _local(int(year), _MONTHS[mon], int(day), int(hh), int(mm), int(ss)), None, msg
    match = _P_ISO.match(line)
    if match:
        y, mo, d, hh, mm, ss, frac, tz, msg = match.groups()
        epoch = _utc(int(y), int(mo), int(d), int(hh), int(mm), int(ss)) - _tz_seconds(tz)
        if frac:
            epoch += float('0.' + frac)
        host_kernel = re.match(r'^\S+ kernel: ?(.*)$', msg)
        if host_kernel:
            msg = host_kernel.group(1)
        return epoch, None, msg
    match = _P_SYSLOG.match(line)
    if match:
        mon, day, hh, mm, ss, msg = match.groups()
        if mon in _MONTHS:
            # syslog carries no year: take the current one, or the previous one for a date ahead of now.
            ref = now if now is not None else time.time()
            year = time.localtime(ref).tm_year
            epoch = _local(year, _MONTHS[mon], int(day), int(hh), int(mm), int(ss))
            if epoch > ref + 86400:
                epoch = _local(year - 1, _MONTHS[mon], int(day), int(hh), int(mm), int(ss))
            return epoch, None, msg
    match = _P_KMSG.match(line)
    if match:
        return None, int(match.group(1)) / 1e6, match.group(2)
    return None, None, line


def parse_kernel_log(text, now=None):
    """Return the GPU events in kernel log text, in log order.

    Each event: ``kind`` (``xid``, ``sxid``, ``fallen_off_bus``, ``init_failed``), ``code`` (int or
    None), ``pci`` (``dddd:bb:dd`` as logged, lower case), ``epoch`` / ``monotonic`` (whichever the
    line carries, else None), ``class``, ``severity`` and ``message``.
    """
    if isinstance(text, bytes):
        text = text.decode('utf-8', 'replace')
    events = []
    last_gpu = None
    last_time = (None, None)
    for raw in (text or '').splitlines():
        line = raw.rstrip('\r')
        if not line.strip():
            continue
        cont = _P_CONT.match(line)
        if cont and not _P_MONO.match(line):
            epoch, mono, msg = last_time[0], last_time[1], cont.group(1)
        else:
            epoch, mono, msg = split_prefix(line, now)
            last_time = (epoch, mono)
        match = _XID.search(msg)
        if match:
            code = int(match.group(2))
            cls, severity = xid_class(code)
            events.append(_event('xid', code, match.group(1), epoch, mono, cls, severity, msg))
            continue
        match = _SXID.search(msg)
        if match:
            events.append(_event('sxid', int(match.group(2)), match.group(1), epoch, mono,
                                 'nvswitch', 'warning', msg))
            continue
        match = _RMINIT.search(msg)
        if match:
            events.append(_event('init_failed', None, match.group(1), epoch, mono, 'reboot', 'critical', msg))
            continue
        match = _GPU_AT.search(msg)
        if match:
            last_gpu = match.group(1)
        if _FALLEN.search(msg):
            # Without an Xid 79 line (probe-time or old drivers); the address sits on this line or
            # on the line that opened the multi-line message.
            pci = match.group(1) if match else last_gpu
            if events and events[-1]['kind'] in ('xid', 'fallen_off_bus') and events[-1]['pci'] == _norm(pci) \
                    and (events[-1]['code'] == 79 or events[-1]['kind'] == 'fallen_off_bus'):
                continue  # the same fall already counted (Xid 79 is followed by this text line)
            events.append(_event('fallen_off_bus', None, pci, epoch, mono, 'reboot', 'critical', msg))
    return events


def _norm(pci):
    if not pci:
        return None
    parts = pci.lower().split(':')
    if len(parts) == 3:
        return '%04x:%s:%s' % (int(parts[0], 16), parts[1], parts[2])
    return pci.lower()


def _event(kind, code, pci, epoch, mono, cls, severity, msg):
    return {
        'kind': kind, 'code': code, 'pci': _norm(pci), 'epoch': epoch, 'monotonic': mono,
        'class': cls, 'severity': severity, 'message': msg.strip(),
    }


def in_window(event, window_s, now=None, uptime=None):
    """True when the event lies within ``window_s`` seconds before now.

    Wall-clock stamps are compared with ``now``, boot-relative stamps with ``uptime``; an event
    without a usable stamp is kept (the caller asked the log source for the window already, and
    an Xid that cannot be placed in time is not silently dropped).
    """
    if window_s is None:
        return True
    if event.get('epoch') is not None and now is not None:
        return now - event['epoch'] <= window_s
    if event.get('monotonic') is not None and uptime is not None:
        return uptime - event['monotonic'] <= window_s
    return True


def events_in_window(events, window_s, now=None, uptime=None):
    return [e for e in events if in_window(e, window_s, now, uptime)]


def pci_matches(event_pci, device_pci_address):
    """Kernel log ``0000:91:00`` against a device address ``0000:91:00.0``."""
    if not event_pci or not device_pci_address:
        return False
    return device_pci_address.lower().startswith(event_pci.lower())


def format_epoch(epoch):
    if epoch is None:
        return None
    return datetime.datetime.fromtimestamp(epoch, tz=datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')
