# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Find NVIDIA Xid / SXid events and GPU bus failures in kernel log text.

Pure code, no I/O, no Ansible imports (shared with the node health program). Python 3.9+.

Understands the line prefixes the kernel log comes with: ``dmesg`` (``[  12.345678]``),
``dmesg -T`` / ``--ctime`` (``[Sun Feb 23 16:24:18 2025]``), ``dmesg --time-format iso``
(``2024-11-15T12:02:03,470068+00:00``), ``dmesg --decode`` (``kern  :warn  : ...``),
syslog and ``journalctl -k`` (``Feb 14 05:03:41 host kernel: ...``, also with fractional seconds
and without the host), ``journalctl -o short-iso`` (``2025-02-14T05:03:41+0000 host kernel: ...``),
rsyslog's ``/var/log/kern.log`` in both its formats, traditional and RFC 3339 high precision
(``2024-05-14T10:11:12.123456+00:00 host kernel: ...``), each with or without the kernel's own
``[seconds.micro]`` stamp after ``kernel:``, ``/dev/kmsg`` records
(``4,1234,206764307,-;...``) and bare messages without a time stamp, and ``journalctl -k -o json``
(:func:`parse_journal_json`).

An event counts only when the kernel message starts with the NVIDIA driver's own text; text a user
controls (a crashing program's name and file in a segfault line, another program's syslog line)
never makes one. See docs/health-checks.md, "The kernel log and the window".
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import calendar
import datetime
import json
import math
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

# Every pattern is anchored at the start of the kernel message (after the time stamp / syslog
# header): the driver prints these itself, while a user's text (a crashing binary's name in a
# segfault line, at most 15 characters of it before "[pid]:") can only ever appear later in a line.
_ADDR = r'([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})'
_XID = re.compile(r'^NVRM: Xid \((?:PCI:)?' + _ADDR + r'(?:\.\d)?\): (\d{1,6}),(.*)$', re.ASCII)
_SXID = re.compile(r'^nvidia-nvswitch\d{0,4}: SXid \((?:PCI:)?' + _ADDR + r'(?:\.\d)?\): (\d{1,6}),(.*)$', re.ASCII)
_GPU_AT = re.compile(r'^NVRM: (?:The NVIDIA )?GPU (?:at )?(?:PCI:)?' + _ADDR + r'(?:\.\d)?(?:[: ]|$)', re.ASCII)
_FALLEN = re.compile(r'fallen off the bus')
_RMINIT = re.compile(r'^NVRM: GPU ' + _ADDR + r'(?:\.\d)?: RmInitAdapter failed', re.ASCII)
# Every event's message starts with one of these: a line without one is not looked at further
# (most kernel-log lines are not about NVIDIA GPUs).
_OPENER = re.compile(r'NVRM: (?:Xid \(|GPU |The NVIDIA GPU )|nvidia-nvswitch\d{0,4}: SXid \(', re.ASCII)
# After an RFC 3339 stamp (rsyslog's RSYSLOG_FileFormat, the default of Ubuntu 24.04 and Debian 12's
# /var/log/kern.log, journalctl -o short-iso): "host kernel: message".
_HOST_KERNEL = re.compile(r'^\S+ kernel: ?(.*)$', re.ASCII)
# The kernel's own time stamp that rsyslog keeps after "kernel:" in kern.log ("kernel: [ 1234.567890] NVRM:
# ..."): the message starts after it. The syslog header's wall-clock date is the line's time.
_KERNEL_STAMP = re.compile(r'^\[\s*\d{1,12}\.\d{1,9}\] ?(.*)$', re.ASCII)
_JOURNAL_STAMP = re.compile(r'^[0-9]{1,17}$')
_CACHE_MAX = 4096
_DAY_CACHE = {}
_TZ_CACHE = {}
_PCI_CACHE = {}
# A wall-clock stamp this far ahead of now is a wrong clock or a forged date, never "recent".
FUTURE_SKEW_S = 3600

_MONTHS = dict((m, i + 1) for i, m in enumerate(
    ('Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec')))
_P_MONO = re.compile(r'^\[\s*(\d+\.\d+)\]\s?(.*)$', re.ASCII)
_P_CTIME = re.compile(r'^\[(?:\w{3}) (\w{3})\s+(\d{1,2}) (\d{2}):(\d{2}):(\d{2}) (\d{4})\]\s?(.*)$', re.ASCII)
_P_DECODE = re.compile(r'^(?:kern|user|mail|daemon|auth|syslog|lpr|news|uucp|cron|authpriv|ftp|local[0-7])\s*:'
                       r'\s*(?:emerg|alert|crit|err|warn|notice|info|debug)\s*:\s(.*)$', re.ASCII)
_P_ISO = re.compile(r'^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:[,.](\d+))?([+-]\d{2}:?\d{2}|Z)?\s(.*)$',
                    re.ASCII)
# Traditional syslog ("Feb 14 05:03:41 host kernel: ...", rsyslog's RSYSLOG_TraditionalFileFormat and
# journalctl's short format), with fractional seconds (journalctl -o short-precise) and without a host
# name (journalctl --no-hostname).
_P_SYSLOG = re.compile(r'^(\w{3})\s+(\d{1,2}) (\d{2}):(\d{2}):(\d{2})(?:\.\d{1,9})? (?:\S+ )?kernel: ?(.*)$', re.ASCII)
_P_KMSG = re.compile(r'^\d+,\d+,(\d+),[^;]*;(.*)$', re.ASCII)


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
    cached = _TZ_CACHE.get(text)
    if cached is not None:
        return cached
    value = _tz_parse(text)
    if len(_TZ_CACHE) < _CACHE_MAX:
        _TZ_CACHE[text] = value
    return value


def _tz_parse(text):
    sign = -1 if text[0] == '-' else 1
    digits = text[1:].replace(':', '')
    hours, minutes = int(digits[:2]), int(digits[2:4])
    if hours > 23 or minutes > 59:
        raise ValueError('time zone offset %s' % text)
    return sign * (hours * 3600 + minutes * 60)


def _check_fields(year, month, day, hour, minute, second):
    # A date the calendar does not have is refused (mktime/timegm would silently roll it over).
    if not (1970 <= year <= 9998 and 1 <= month <= 12 and 1 <= hour + 1 <= 24 and 0 <= minute <= 59
            and 0 <= second <= 60):
        raise ValueError('date out of range')
    if day < 1 or day > calendar.monthrange(year, month)[1]:
        raise ValueError('no such day')


def _utc(year, month, day, hour, minute, second):
    key = (year, month, day)
    midnight = _DAY_CACHE.get(key)
    if midnight is None or hour > 23 or minute > 59 or second > 60:
        _check_fields(year, month, day, hour, minute, second)
        midnight = calendar.timegm((year, month, day, 0, 0, 0, 0, 0, 0))
        if len(_DAY_CACHE) < _CACHE_MAX:
            _DAY_CACHE[key] = midnight
    return midnight + hour * 3600 + minute * 60 + second


def _local(year, month, day, hour, minute, second):
    _check_fields(year, month, day, hour, minute, second)
    return time.mktime((year, month, day, hour, minute, second, 0, 0, -1))


def _finite(value):
    return value if math.isfinite(value) else None


def split_prefix(line, now=None):
    """Return ``(epoch or None, monotonic seconds or None, message)`` for one log line.

    A time stamp that is not a real date (month 13, Feb 30, a zone of +99:00...) gives
    ``epoch=None``: the line is then judged as undated, never a traceback.
    """
    try:
        return _split_prefix(line, now)
    except (ValueError, OverflowError, OSError):
        return None, None, _message_after_stamp(line)


def _after_kernel_tag(msg):
    """The message after a syslog "kernel:" tag, without the kernel's own [seconds.micro] stamp."""
    match = _KERNEL_STAMP.match(msg)
    return match.group(1) if match else msg


def _message_after_stamp(line):
    for pattern in (_P_CTIME, _P_ISO, _P_SYSLOG):
        match = pattern.match(line)
        if match:
            msg = match.groups()[-1]
            if pattern is _P_ISO:
                host_kernel = _HOST_KERNEL.match(msg)
                if host_kernel:
                    msg = _after_kernel_tag(host_kernel.group(1))
            elif pattern is _P_SYSLOG:
                msg = _after_kernel_tag(msg)
            return msg
    return line


def _split_prefix(line, now):
    first = line[:1]
    if first.isalpha():
        match = _P_DECODE.match(line)
        if match:
            line = match.group(1)
            first = line[:1]
    if first == '[':
        return _split_bracket(line)
    if first.isdigit():
        return _split_digit(line)
    if first.isalpha():
        return _split_syslog(line, now)
    return None, None, line


def _split_bracket(line):
    match = _P_MONO.match(line)
    if match:
        return None, _finite(float(match.group(1))), match.group(2)
    match = _P_CTIME.match(line)
    if match:
        mon, day, hh, mm, ss, year, msg = match.groups()
        if mon in _MONTHS:
            return _local(int(year), _MONTHS[mon], int(day), int(hh), int(mm), int(ss)), None, msg
        return None, None, msg
    return None, None, line


def _split_digit(line):
    match = _P_ISO.match(line)
    if match:
        y, mo, d, hh, mm, ss, frac, tz, msg = match.groups()
        host_kernel = _HOST_KERNEL.match(msg)
        if host_kernel:
            msg = _after_kernel_tag(host_kernel.group(1))
        try:
            epoch = _utc(int(y), int(mo), int(d), int(hh), int(mm), int(ss)) - _tz_seconds(tz)
        except (ValueError, OverflowError):
            return None, None, msg
        if frac:
            epoch += float('0.' + frac[:9])
        return epoch, None, msg
    match = _P_KMSG.match(line)
    if match:
        return None, int(match.group(1)[:15]) / 1e6, match.group(2)
    return None, None, line


def _split_syslog(line, now):
    match = _P_SYSLOG.match(line)
    if match:
        mon, day, hh, mm, ss, msg = match.groups()
        msg = _after_kernel_tag(msg)
        if mon not in _MONTHS:
            return None, None, msg
        # syslog carries no year: take the current one, or the previous one for a date ahead of now.
        ref = now if now is not None else time.time()
        year = time.localtime(ref).tm_year
        try:
            epoch = _local(year, _MONTHS[mon], int(day), int(hh), int(mm), int(ss))
        except (ValueError, OverflowError):
            epoch = None
        if epoch is None or epoch > ref + 86400:
            try:  # Feb 29 of a leap year read in a common year, or a date ahead of now
                epoch = _local(year - 1, _MONTHS[mon], int(day), int(hh), int(mm), int(ss))
            except (ValueError, OverflowError):
                return None, None, msg
        return epoch, None, msg
    return None, None, line


def decode_text(data):
    """Text from bytes or str: undecodable bytes and stray surrogates become U+FFFD."""
    if data is None:
        return ''
    if isinstance(data, bytes):
        return data.decode('utf-8', 'replace')
    try:
        data.encode('utf-8')
        return data
    except UnicodeEncodeError:
        try:
            raw = data.encode('utf-8', 'surrogateescape')
        except UnicodeEncodeError:
            raw = data.encode('utf-8', 'replace')
        return raw.decode('utf-8', 'replace')


class KernelLogParser(object):
    """Streaming parser: :meth:`feed` lines in log order, then :meth:`close`; events go to ``sink``.

    Lines end at ``\\n`` only (never at the other characters ``str.splitlines`` breaks on, such as
    U+2028 or NEL, which a user's text may carry). A record is one line with its time stamp plus
    the indented lines that follow it (a multi-line
    kernel message, as ``dmesg`` and ``journalctl`` print them). Only a record whose first line is
    a message of the NVIDIA driver counts; an indented line never opens a record of its own, so a
    line break inside another message (for example in a file name a segfault line quotes) cannot
    fake one.
    """

    def __init__(self, sink, now=None):
        self.sink = sink
        self.now = now
        self._head = None  # (epoch, mono, message) of the open record, None when not an NVIDIA one
        self._more = []
        self._last = None

    def feed(self, line):
        line = line.rstrip('\r\n')
        if not line.strip():
            self._flush()
            return
        if line[0] in ' \t':
            if self._head is not None and len(self._more) < 32:
                self._more.append(line.strip())
            return
        self._flush()
        if _OPENER.search(line) is None:
            return
        epoch, mono, msg = split_prefix(line, self.now)
        self._head = (epoch, mono, msg)

    def close(self):
        self._flush()

    def feed_record(self, epoch, mono, message):
        """One whole message (journald: the MESSAGE field, continuation lines included)."""
        self._flush()
        lines = (message or '').split('\n')
        self._head = (epoch, mono, lines[0])
        self._more = [ln.strip() for ln in lines[1:33]]
        self._flush()

    def _flush(self):
        head, more = self._head, self._more
        self._head, self._more = None, []
        if head is None:
            return
        event = classify_record(head[0], head[1], head[2], more)
        if event is None:
            return
        last = self._last
        if event['kind'] == 'fallen_off_bus' and last is not None and last['pci'] == event['pci'] \
                and (last['kind'] == 'fallen_off_bus' or (last['kind'] == 'xid' and last['code'] == 79)):
            return  # the same fall already counted (Xid 79 is followed by this text line)
        self._last = event
        self.sink(event)


def classify_record(epoch, mono, message, more=()):
    """The GPU event one kernel message stands for, or None. ``message`` is the first line."""
    msg = message.strip()
    if not msg.startswith(('NVRM: ', 'nvidia-nvswitch')):
        return None
    match = _XID.match(msg)
    if match:
        code = int(match.group(2))
        cls, severity = xid_class(code)
        return _event('xid', code, match.group(1), epoch, mono, cls, severity, msg)
    match = _SXID.match(msg)
    if match:
        return _event('sxid', int(match.group(2)), match.group(1), epoch, mono, 'nvswitch', 'warning', msg)
    match = _RMINIT.match(msg)
    if match:
        return _event('init_failed', None, match.group(1), epoch, mono, 'reboot', 'critical', msg)
    match = _GPU_AT.match(msg)
    if match:
        # Continuation lines of the driver's multi-line message carry the "NVRM: " prefix too.
        text = ' '.join([msg] + [ln for ln in more if ln.startswith('NVRM: ')])
        if _FALLEN.search(text):
            return _event('fallen_off_bus', None, match.group(1), epoch, mono, 'reboot', 'critical', text)
    return None


def parse_kernel_log(text, now=None):
    """Return the GPU events in kernel log text, in log order.

    Each event: ``kind`` (``xid``, ``sxid``, ``fallen_off_bus``, ``init_failed``), ``code`` (int or
    None), ``pci`` (``dddd:bb:dd`` as logged, lower case), ``epoch`` / ``monotonic`` (whichever the
    line carries, else None), ``class``, ``severity`` and ``message``.
    """
    events = []
    parser = KernelLogParser(events.append, now)
    for line in decode_text(text).split('\n'):
        parser.feed(line)
    parser.close()
    return events


def parse_journal_json(text, sink=None):
    """GPU events from ``journalctl -k -o json`` output (one JSON object per line).

    Only entries of the kernel transport count (``_TRANSPORT=kernel``, facility kern when given);
    the time is journald's own receive time. Lines that are not JSON objects are skipped and
    counted. Returns ``(events, skipped_lines)`` (events is empty when ``sink`` takes them).
    """
    events = []
    parser = KernelLogParser(sink or events.append)
    skipped = 0
    for line in decode_text(text).split('\n'):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):
            skipped += 1
            continue
        if not isinstance(entry, dict):
            skipped += 1
            continue
        if entry.get('_TRANSPORT') != 'kernel' or entry.get('SYSLOG_FACILITY', '0') not in ('0', 0):
            continue
        message = entry.get('MESSAGE')
        if isinstance(message, list):  # journald writes non-UTF-8 messages as a byte array
            try:
                message = bytes(bytearray(b & 0xff for b in message if isinstance(b, int))).decode('utf-8', 'replace')
            except (TypeError, ValueError):
                message = None
        if not isinstance(message, str):
            continue
        epoch = None
        stamp = entry.get('__REALTIME_TIMESTAMP')
        # ASCII digits only: str.isdigit() is also true for '²' or '٣', which int() refuses or misreads.
        if isinstance(stamp, (str, int)) and not isinstance(stamp, bool) and _JOURNAL_STAMP.match(str(stamp)):
            epoch = int(str(stamp)) / 1e6
        parser.feed_record(epoch, None, message)
    parser.close()
    return events, skipped


def _norm(pci):
    if not pci:
        return None
    cached = _PCI_CACHE.get(pci)
    if cached is not None:
        return cached
    parts = pci.lower().split(':')
    value = '%04x:%s:%s' % (int(parts[0], 16), parts[1], parts[2]) if len(parts) == 3 else pci.lower()
    if len(_PCI_CACHE) < _CACHE_MAX:
        _PCI_CACHE[pci] = value
    return value


def _event(kind, code, pci, epoch, mono, cls, severity, msg):
    return {
        'kind': kind, 'code': code, 'pci': _norm(pci), 'epoch': epoch, 'monotonic': mono,
        'class': cls, 'severity': severity, 'message': msg.strip()[:400],
    }


class EventGroups(object):
    """Bounded-memory tally of events by (kind, code, PCI address), in order of first sight.

    :meth:`events` gives one event per group with ``count``, ``first_epoch`` and the last
    message and stamp: a log flooded with Xids costs a few dicts, not one per line.
    """

    def __init__(self):
        self._groups = {}
        self._order = []

    def add(self, event):
        key = (event['kind'], event['code'], event['pci'])
        group = self._groups.get(key)
        if group is None:
            group = dict(event, count=0, first_epoch=event.get('epoch'))
            self._groups[key] = group
            self._order.append(key)
        group['count'] += event.get('count', 1)
        if group['first_epoch'] is None:
            group['first_epoch'] = event.get('first_epoch', event.get('epoch'))
        for field in ('epoch', 'monotonic', 'message'):
            if event.get(field) is not None:
                group[field] = event[field]

    def events(self):
        return [self._groups[k] for k in self._order]


def in_window(event, window_s, now=None, uptime=None, keep_undated=True):
    """True when the event lies within ``window_s`` seconds before now.

    Wall-clock stamps are compared with ``now`` (a stamp more than FUTURE_SKEW_S ahead is not
    recent), boot-relative stamps with ``uptime``. An event without a usable stamp is kept when
    ``keep_undated`` (the log source was asked for the window already: journald, the kernel ring
    buffer of this boot) and dropped otherwise (a file's undated or misdated lines never count as
    recent).
    """
    if window_s is None:
        return True
    if event.get('epoch') is not None and now is not None:
        age = now - event['epoch']
        return -FUTURE_SKEW_S <= age <= window_s
    if event.get('monotonic') is not None and uptime is not None:
        age = uptime - event['monotonic']
        return -FUTURE_SKEW_S <= age <= window_s
    return keep_undated


def events_in_window(events, window_s, now=None, uptime=None, keep_undated=True):
    return [e for e in events if in_window(e, window_s, now, uptime, keep_undated)]


def pci_matches(event_pci, device_pci_address):
    """Kernel log ``0000:91:00`` against a device address ``0000:91:00.0``."""
    if not event_pci or not device_pci_address:
        return False
    return device_pci_address.lower().startswith(event_pci.lower())


def format_epoch(epoch):
    if epoch is None:
        return None
    try:
        return datetime.datetime.fromtimestamp(epoch, tz=datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')
    except (ValueError, OverflowError, OSError):
        return None
