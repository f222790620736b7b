# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import calendar
import os

import pytest

from ansible_collections.gpucluster.core.plugins.module_utils import gpu_kernel_log as kl

NOW = calendar.timegm((2026, 1, 5, 10, 0, 0, 0, 0, 0))


@pytest.mark.parametrize('line, epoch, mono, message', [
    ('[ 1843.308145] NVRM: x', None, 1843.308145, 'NVRM: x'),
    ('[6781741.548779] NVRM: x', None, 6781741.548779, 'NVRM: x'),
    ('2024-11-15T12:02:03,470068+00:00 NVRM: x', calendar.timegm((2024, 11, 15, 12, 2, 3)) + 0.470068, None, 'NVRM: x'),
    ('2024-11-15T13:02:03,000000+01:00 NVRM: x', calendar.timegm((2024, 11, 15, 12, 2, 3)), None, 'NVRM: x'),
    ('kern  :warn  : 2025-01-21T02:21:33,000000+00:00 NVRM: x', calendar.timegm((2025, 1, 21, 2, 21, 33)), None,
     'NVRM: x'),
    ('2025-02-14T05:03:41+0000 node1 kernel: NVRM: x', calendar.timegm((2025, 2, 14, 5, 3, 41)), None, 'NVRM: x'),
    ('6,3964,206764307,-;NVRM: x', None, 206.764307, 'NVRM: x'),
    ('NVRM: x', None, None, 'NVRM: x'),
    # rsyslog's RFC 3339 kern.log (Ubuntu 24.04), with and without the kernel's own stamp after "kernel:".
    ('2024-05-14T10:11:12.123456+00:00 node1 kernel: [ 1234.567890] NVRM: x',
     calendar.timegm((2024, 5, 14, 10, 11, 12)) + 0.123456, None, 'NVRM: x'),
    ('2024-05-14T12:11:12.123456+02:00 node1 kernel: NVRM: x', calendar.timegm((2024, 5, 14, 10, 11, 12)) + 0.123456,
     None, 'NVRM: x'),
    # Only one stamp is the kernel's; a second one is part of the message.
    ('2024-05-14T10:11:12+00:00 node1 kernel: [ 1.0] [ 2.0] NVRM: x', calendar.timegm((2024, 5, 14, 10, 11, 12)),
     None, '[ 2.0] NVRM: x'),
    ('\u00b2 NVRM: x', None, None, '\u00b2 NVRM: x'),
    ('[\u00b2.\u00b2] NVRM: x', None, None, '[\u00b2.\u00b2] NVRM: x'),
])
def test_split_prefix(line, epoch, mono, message):
    got_epoch, got_mono, got_message = kl.split_prefix(line, now=NOW)
    assert got_message == message
    assert got_mono == (pytest.approx(mono) if mono is not None else None)
    assert got_epoch == (pytest.approx(epoch) if epoch is not None else None)


def test_local_time_formats_use_local_time():
    # dmesg -T and syslog print local time; compare against time.mktime of the same fields.
    import time
    expected = time.mktime((2024, 8, 30, 11, 43, 9, 0, 0, -1))
    assert kl.split_prefix('[Fri Aug 30 11:43:09 2024] NVRM: x')[0] == expected
    syslog = kl.split_prefix('Jan  5 09:56:00 node1 kernel: NVRM: x', now=NOW)
    assert syslog[0] == time.mktime((2026, 1, 5, 9, 56, 0, 0, 0, -1)) and syslog[2] == 'NVRM: x'


@pytest.mark.parametrize('line', [
    'Jan  5 09:56:00 node1 kernel: [ 1234.567890] NVRM: x',  # rsyslog traditional kern.log (Debian)
    'Jan  5 09:56:00.545053 node1 kernel: NVRM: x',  # journalctl -o short-precise
    'Jan  5 09:56:00 kernel: NVRM: x',  # journalctl --no-hostname
])
def test_syslog_variants(line):
    import time
    assert kl.split_prefix(line, now=NOW) == (time.mktime((2026, 1, 5, 9, 56, 0, 0, 0, -1)), None, 'NVRM: x')


@pytest.mark.parametrize('line', [
    'Jan  5 09:56:00 node1 evil[7]: kernel: NVRM: x',  # another program cannot pose as the kernel
    'Jan  5 09:56:00 node1 kernel[7]: NVRM: x',
])
def test_syslog_other_programs_are_not_the_kernel(line):
    assert kl.split_prefix(line, now=NOW) == (None, None, line)


def test_syslog_date_ahead_of_now_is_last_year():
    import time
    epoch = kl.split_prefix('Dec 31 23:00:00 node1 kernel: NVRM: x', now=NOW)[0]
    assert time.localtime(epoch).tm_year == 2025


@pytest.mark.parametrize('code, cls, severity', [
    (79, 'reboot', 'critical'), (48, 'reset', 'critical'), (119, 'reset', 'critical'), (74, 'nvlink_reset', 'critical'),
    (145, 'nvlink', 'warning'), (94, 'monitor', 'warning'), (63, 'monitor', 'warning'), (13, 'application', 'info'),
    (31, 'application', 'info'), (43, 'application', 'info'), (999, 'unclassified', 'warning'),
])
def test_xid_class(code, cls, severity):
    assert kl.xid_class(code) == (cls, severity)


def test_mixed_formats(own_fixtures_dir):
    with open(os.path.join(own_fixtures_dir, 'gpu', 'kernel_mixed_formats.log'), 'rb') as handle:
        events = kl.parse_kernel_log(handle.read(), now=NOW)
    summary = [(e['kind'], e['code'], e['pci'], e['severity']) for e in events]
    assert summary == [
        ('xid', 79, '0000:41:00', 'critical'),  # the "GPU has fallen off the bus" line after it is the same fall
        ('xid', 13, '0000:c1:00', 'info'),
        ('xid', 48, '0000:c1:00', 'critical'),
        ('xid', 94, '0000:c1:00', 'warning'),
        ('xid', 63, '0000:c1:00', 'warning'),
        ('sxid', 20034, '0000:05:00', 'warning'),
        ('xid', 74, '0000:c1:00', 'critical'),
        ('fallen_off_bus', None, '0000:81:00', 'critical'),
        ('init_failed', None, '0000:82:00', 'critical'),
        ('xid', 154, '0000:c1:00', 'warning'),
    ]
    assert events[2]['epoch'] == pytest.approx(NOW - 120 + 0.123456)
    assert events[7]['monotonic'] == 12.0


def test_window():
    events = kl.parse_kernel_log(
        '2026-01-05T07:00:00,000000+00:00 NVRM: Xid (PCI:0000:41:00): 48, old\n'
        '2026-01-05T09:30:00,000000+00:00 NVRM: Xid (PCI:0000:41:00): 48, recent\n'
        '[ 100.0] NVRM: Xid (PCI:0000:41:00): 79, long ago since boot\n'
        '[ 9000.0] NVRM: Xid (PCI:0000:41:00): 79, minutes ago\n'
        'NVRM: Xid (PCI:0000:41:00): 64, no stamp\n', now=NOW)
    kept = kl.events_in_window(events, 7200, now=NOW, uptime=10000.0)
    assert [e['message'].rsplit(', ', 1)[-1] for e in kept] == ['recent', 'minutes ago', 'no stamp']
    # Without an uptime a boot-relative stamp cannot be placed: kept rather than lost.
    assert len(kl.events_in_window(events, 7200, now=NOW, uptime=None)) == 4


@pytest.mark.parametrize('event_pci, address, expected', [
    ('0000:91:00', '0000:91:00.0', True), ('0000:91:00', '0000:91:00.1', True), ('0000:91:00', '0000:92:00.0', False),
    (None, '0000:91:00.0', False), ('0000:91:00', None, False),
])
def test_pci_matches(event_pci, address, expected):
    assert kl.pci_matches(event_pci, address) is expected


def test_unrelated_lines_give_no_events():
    assert kl.parse_kernel_log('[ 1.0] eth0: link up\nnvidia-peermem nv_get_p2p_free_callback:127 ERROR\n') == []
    assert kl.parse_kernel_log('') == [] and kl.parse_kernel_log(None) == []
