# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Bad, hostile and broken inputs for the GPU health path, each with its exact outcome.

Kernel log: a user's text (a crashing binary's name in a segfault line, a program writing to
syslog) never makes an Xid; undated or misdated file lines never count as recent. nvidia-smi:
every "no answer" shape is unknown or critical; per-GPU error states are critical for that GPU.
Commands: timeouts kill the whole process group; bytes that are not UTF-8 never abort.
Inputs are small inline texts and real recordings from the fixture corpus, mutated in memory.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import calendar
import json
import os
import time

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpucluster.core.plugins.module_utils import gpu_health as gh
from ansible_collections.gpucluster.core.plugins.module_utils import gpu_kernel_log as kl
from ansible_collections.gpucluster.core.plugins.module_utils import gpu_probe as gp
from ansible_collections.gpucluster.core.plugins.module_utils import timed_command
from ansible_collections.gpucluster.core.plugins.modules import gpu_facts

NOW = calendar.timegm((2026, 1, 5, 10, 0, 0, 0, 0, 0))
DUAL = os.path.join('01_nvidia_smi_xml', 'telegraf__dual_a5000-v13.xml')  # 2x RTX A5000, 81:00.0 and c1:00.0
XID79 = os.path.join('05_xid_kernel_log', '_extracted_from_docs', 'gpud-docs__xid79_fallen-off-bus_sxid20034.log')
B200 = os.path.join('05_xid_kernel_log', '_extracted_from_docs',
                    'gpud-commit5014ca5b__journalctl-k_multiline-fallen-off-bus_no-xid_b200-2901.log')
GENUINE = 'NVRM: Xid (PCI:0000:41:00): 79, pid=\'<unknown>\', name=<unknown>, GPU has fallen off the bus.'


def iso(seconds_ago):
    return time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(NOW - seconds_ago)) + ',000000+00:00'


def kinds(events):
    return [(e['kind'], e['code'], e['pci']) for e in events]


# --- 1. Kernel-log events come only from the kernel -------------------------------------------
# (name, kernel-log text, expected events)
SPOOFS = [
    ('segfault_binary_named_like_an_xid',
     '[ 5000.1] NVRM: Xid (PCI:[4242]: segfault at 0 ip 0000 sp 0000 error 4 in x[400000+1000]\n', []),
    ('segfault_file_name_quotes_a_whole_xid',
     '[ 5000.1] a.out[4242]: segfault at 0 ip 0 sp 0 error 4 in NVRM: Xid (PCI:0000:41:00): 79, x[400000+1000]\n', []),
    ('file_name_with_line_break_gives_an_indented_xid',
     '[ 5000.1] a.out[4242]: segfault at 0 ip 0 sp 0 error 4 in x\n'
     '          NVRM: Xid (PCI:0000:41:00): 79, pid=1, GPU has fallen off the bus.\n', []),
    ('file_name_with_line_break_gives_an_indented_stamped_xid',
     '[ 5000.1] a.out[4242]: segfault at 0 ip 0 in x\n          [ 5000.2] NVRM: Xid (PCI:0000:41:00): 48, DBE\n', []),
    ('journal_short_iso_other_program',
     '2026-01-05T09:59:00+0000 node1 evil[77]: NVRM: Xid (PCI:0000:41:00): 79, pid=1, off the bus\n', []),
    ('syslog_other_program', 'Jan  5 09:59:00 node1 evil[77]: NVRM: Xid (PCI:0000:41:00): 79, x\n', []),
    ('syslog_kernel_message_quoting_an_xid_later',
     'Jan  5 09:59:00 node1 kernel: audit: type=1400 comm="NVRM: Xid (PCI:0000:41:00): 79, x"\n', []),
    ('fallen_off_the_bus_in_a_segfault_line',
     '[ 5000.1] NVRM: GPU at 00[4242]: segfault at 0 in has fallen off the bus[400000+1000]\n', []),
    ('multi_line_fall_under_a_foreign_head',
     '[ 5000.1] a.out[4242]: segfault at 0 in x\n'
     '          NVRM: The NVIDIA GPU 0000:b3:00.0\n'
     '          NVRM: fallen off the bus and is not responding to commands.\n', []),
    ('driver_head_with_foreign_continuation_text',
     '[ 5000.1] NVRM: The NVIDIA GPU 0000:b3:00.0\n          some text: fallen off the bus\n', []),
    ('sxid_inside_a_user_message',
     '[ 5000.1] evil[1]: nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal\n', []),
    ('rminit_inside_a_user_message',
     '[ 5000.1] evil[1]: NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x22:0x56:884)\n', []),
    ('decode_user_facility_line_quoting_an_xid',
     'user  :warn  : [ 5000.1] evil[1]: NVRM: Xid (PCI:0000:41:00): 79, x\n', []),
    ('unicode_line_separator_in_a_file_name',
     '[ 5000.1] a.out[1]: segfault at 0 in x\u2028NVRM: Xid (PCI:0000:41:00): 79, pid=1, off the bus\n', []),
    ('next_line_character_in_a_file_name',
     '[ 5000.1] a.out[1]: segfault at 0 in x\x85NVRM: Xid (PCI:0000:41:00): 79, pid=1, off the bus\n', []),
    ('form_feed_in_a_file_name',
     '[ 5000.1] a.out[1]: segfault at 0 in x\x0cNVRM: Xid (PCI:0000:41:00): 79, pid=1, off the bus\n', []),
    ('genuine_dmesg_xid_79', '[ 5000.1] %s\n' % GENUINE, [('xid', 79, '0000:41:00')]),
    ('genuine_kmsg_xid_48', '3,17,5000100000,-;NVRM: Xid (PCI:0000:41:00): 48, pid=1, DBE\n', [('xid', 48, '0000:41:00')]),
    ('genuine_decode_sxid',
     'kern  :err   : [ 5000.1] nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 20034, Fatal, Link 37\n',
     [('sxid', 20034, '0000:07:00')]),
    ('genuine_multi_line_fall',
     '[ 5000.1] NVRM: The NVIDIA GPU 0000:b3:00.0\n'
     '               NVRM: (PCI ID: 10de:26b5) installed in this system has\n'
     '               NVRM: fallen off the bus and is not responding to commands.\n',
     [('fallen_off_bus', None, '0000:b3:00')]),
    ('genuine_xid_then_user_segfault_naming_it_again',
     '[ 5000.1] %s\n[ 5000.2] NVRM: Xid (PCI:[1]: segfault at 0 in NVRM: Xid (PCI:0000:42:00): 79, x\n' % GENUINE,
     [('xid', 79, '0000:41:00')]),
    ('crlf_line_ends', '[ 5000.1] %s\r\n' % GENUINE, [('xid', 79, '0000:41:00')]),
]


@pytest.mark.parametrize('name, text, expected', SPOOFS, ids=[c[0] for c in SPOOFS])
def test_kernel_log_only_kernel_messages_count(name, text, expected):
    assert kinds(kl.parse_kernel_log(text, now=NOW)) == expected


def _segfault(line):
    """The same kernel-log line, turned into a segfault line that quotes it (a file name)."""
    stamp, message = line.split('] ', 1)
    return '%s] a.out[4242]: segfault at 0 ip 0 sp 0 error 4 in %s[400000+1000]' % (stamp, message)


def test_real_xid79_recording_quoted_in_segfault_lines_gives_nothing(real_fixtures_dir):
    with open(os.path.join(real_fixtures_dir, XID79)) as handle:
        lines = handle.read().splitlines()
    genuine = kl.parse_kernel_log('\n'.join(lines), now=NOW)
    assert [e['code'] for e in genuine if e['kind'] == 'xid'] == [79] and len(genuine) == 9
    assert kl.parse_kernel_log('\n'.join(_segfault(ln) for ln in lines if ln), now=NOW) == []


def test_real_b200_journal_fall_and_its_spoof(real_fixtures_dir):
    with open(os.path.join(real_fixtures_dir, B200)) as handle:
        text = handle.read()
    assert kinds(kl.parse_kernel_log(text, now=NOW)) == [('fallen_off_bus', None, '0000:18:00')]
    # The same lines logged by another program (syslog identifier "gpud" instead of "kernel").
    assert kl.parse_kernel_log(text.replace(' kernel: ', ' gpud[7]: '), now=NOW) == []


# (name, journalctl -k -o json lines, expected events)
JOURNAL = [
    ('syslog_transport_is_ignored',
     [{'_TRANSPORT': 'syslog', 'MESSAGE': GENUINE, '__REALTIME_TIMESTAMP': '1767607140000000'}], []),
    ('stdout_transport_is_ignored', [{'_TRANSPORT': 'stdout', 'MESSAGE': GENUINE}], []),
    ('user_facility_on_the_kernel_transport_is_ignored',
     [{'_TRANSPORT': 'kernel', 'SYSLOG_FACILITY': '1', 'MESSAGE': GENUINE}], []),
    ('segfault_with_line_break_in_the_file_name',
     [{'_TRANSPORT': 'kernel', 'MESSAGE': 'a.out[1]: segfault at 0 in x\n' + GENUINE}], []),
    ('genuine', [{'_TRANSPORT': 'kernel', 'SYSLOG_FACILITY': '0', 'MESSAGE': GENUINE,
                  '__REALTIME_TIMESTAMP': '1767607140000000'}], [('xid', 79, '0000:41:00')]),
    ('genuine_message_as_byte_array',
     [{'_TRANSPORT': 'kernel', 'MESSAGE': list(bytearray(GENUINE.encode('ascii') + b' \xff'))}],
     [('xid', 79, '0000:41:00')]),
    ('genuine_multi_line_fall',
     [{'_TRANSPORT': 'kernel', 'MESSAGE': 'NVRM: The NVIDIA GPU 0000:18:00.0\nNVRM: (PCI ID: 10de:2901) installed '
                                          'in this system has\nNVRM: fallen off the bus and is not responding.'}],
     [('fallen_off_bus', None, '0000:18:00')]),
    ('no_transport_field', [{'MESSAGE': GENUINE}], []),
]


@pytest.mark.parametrize('name, entries, expected', JOURNAL, ids=[c[0] for c in JOURNAL])
def test_journal_kernel_transport_only(name, entries, expected):
    text = '\n'.join(json.dumps(e) for e in entries) + '\n'
    events, skipped = kl.parse_journal_json(text)
    assert kinds(events) == expected and skipped == 0
    assert all('\ufffd' in e['message'] or '\\x' not in e['message'] for e in events)


def test_journal_garbage_lines_are_skipped_and_counted():
    text = 'not json\n[1, 2]\n{"_TRANSPORT": "kernel", "MESSAGE": %s, "__REALTIME_TIMESTAMP": "x"}\n\xff{\n' % (
        json.dumps(GENUINE))
    events, skipped = kl.parse_journal_json(text)
    assert kinds(events) == [('xid', 79, '0000:41:00')] and skipped == 3
    assert events[0]['epoch'] is None  # an unreadable journal time is no time, never a traceback


# (name, file content, expected Xid codes counted as recent at NOW)
WINDOW = [
    ('undated_line_never_recent', 'NVRM: Xid (PCI:0000:41:00): 79, x\n', []),
    ('syslog_feb_30', 'Feb 30 09:59:00 node1 kernel: NVRM: Xid (PCI:0000:41:00): 79, x\n', []),
    ('syslog_hour_25', 'Jan  5 25:59:00 node1 kernel: NVRM: Xid (PCI:0000:41:00): 79, x\n', []),
    ('syslog_unknown_month', 'Foo  5 09:59:00 node1 kernel: NVRM: Xid (PCI:0000:41:00): 79, x\n', []),
    ('iso_month_13', '2026-13-05T09:59:00,000000+00:00 NVRM: Xid (PCI:0000:41:00): 79, x\n', []),
    ('iso_zone_plus_99', '2026-01-05T09:59:00,000000+99:00 NVRM: Xid (PCI:0000:41:00): 79, x\n', []),
    ('iso_year_9999', '9999-12-31T23:59:59,000000-23:59 NVRM: Xid (PCI:0000:41:00): 79, x\n', []),
    ('iso_year_0000', '0000-01-01T00:00:00,000000+00:00 NVRM: Xid (PCI:0000:41:00): 79, x\n', []),
    ('ctime_feb_31', '[Sat Feb 31 09:59:00 2026] NVRM: Xid (PCI:0000:41:00): 79, x\n', []),
    ('ctime_huge_fraction_iso', '2026-01-05T09:59:00,%s+00:00 NVRM: Xid (PCI:0000:41:00): 79, x\n' % ('9' * 500),
     [79]),
    ('future_date_is_not_recent', '2099-01-05T09:59:00,000000+00:00 NVRM: Xid (PCI:0000:41:00): 79, x\n', []),
    ('three_hours_old', '%s NVRM: Xid (PCI:0000:41:00): 79, x\n' % iso(3 * 3600), []),
    ('one_minute_old', '%s NVRM: Xid (PCI:0000:41:00): 79, x\n' % iso(60), [79]),
    ('non_utf8_bytes_in_a_recent_line', None, [79]),
    ('nul_bytes_and_a_recent_line', '\x00\x00\n%s NVRM: Xid (PCI:0000:41:00): 48, x\x00\n' % iso(60), [48]),
    ('dated_xid_inside_an_over_long_line',
     'x' * (64 * 1024 - 1) + ' %s NVRM: Xid (PCI:0000:41:00): 79, x\n' % iso(60), []),
    ('one_megabyte_line_then_a_recent_xid', 'x' * (1 << 20) + '\n%s NVRM: Xid (PCI:0000:41:00): 94, x\n' % iso(60),
     [94]),
]


@pytest.mark.parametrize('name, content, expected', WINDOW, ids=[c[0] for c in WINDOW])
def test_kernel_log_file_window(tmp_path, name, content, expected):
    path = tmp_path / 'kern.log'
    if content is None:
        path.write_bytes(b'\xff\xfe\x80 junk\n' + iso(60).encode() + b' NVRM: Xid (PCI:0000:41:00): 79, name=\xc3\x28\n')
    else:
        path.write_bytes(content.encode('utf-8'))
    result = gp.read_kernel_log(None, 120, kernel_log_path=str(path), now=NOW)
    assert result['error'] is None and [e['code'] for e in result['events']] == expected
    for event in result['events']:
        event['message'].encode('utf-8')  # no surrogates


def test_kernel_log_file_tail_is_bounded(tmp_path):
    """Only the last max_bytes are read when no line older than the window is met; it is said so."""
    path = tmp_path / 'kern.log'
    recent = ('%s NVRM: Xid (PCI:0000:41:00): 94, x\n' % iso(60)).encode()
    path.write_bytes(recent * 40000)  # about 2.6 MB of lines within the window
    result = gp.read_kernel_log_file(str(path), 7200, now=NOW, max_bytes=1 << 20)
    assert result['limited'] == 'only the last 1 MiB of %s were read (2 MiB)' % path
    count = result['events'][0]['count']
    assert len(result['events']) == 1 and (1 << 20) // len(recent) - 1 <= count <= (1 << 20) // len(recent) + 1
    facts = gh.build_facts({'smi': {'found': False}, 'parsed': None, 'pci_addresses': None, 'kernel': result})
    assert ('xid', 'info') in [(i['check'], i['severity']) for i in facts['health']['issues']]


def test_kernel_log_file_stops_at_the_window(tmp_path):
    path = tmp_path / 'kern.log'
    old = ('%s NVRM: Xid (PCI:0000:41:00): 48, old\n' % iso(5 * 3600)).encode()
    new = ('%s NVRM: Xid (PCI:0000:41:00): 79, new\n' % iso(60)).encode()
    path.write_bytes(old * 60000 + new * 3)
    result = gp.read_kernel_log_file(str(path), 7200, now=NOW, max_bytes=1 << 30)
    assert result['limited'] is None
    assert [(e['code'], e['count']) for e in result['events']] == [(79, 3)]


# --- 2. nvidia-smi: no answer is never ok ----------------------------------------------------

class Runner:
    def __init__(self, rc, out, err=''):
        self.answer = (rc, out, err)

    def __call__(self, argv, timeout):
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def _real(real_fixtures_dir, name=DUAL):
    with open(os.path.join(real_fixtures_dir, name), 'rb') as handle:
        return handle.read()


def _drop_second_gpu(xml):
    start = xml.rindex(b'<gpu id=')
    end = xml.index(b'</gpu>', start) + len(b'</gpu>')
    return xml[:start] + xml[end:]


def _verdict(rc, out, pci=None, err=''):
    smi, parsed = gp.run_nvidia_smi(Runner(rc, out, err), '/usr/bin/nvidia-smi', timeout=7)
    facts = gh.build_facts({'smi': smi, 'parsed': parsed, 'pci_addresses': pci,
                            'kernel': {'source': 'file', 'events': [], 'error': None}})
    json.dumps(facts).encode('utf-8')  # serialisable, no surrogates
    return facts


PCI2 = ['0000:81:00.0', '0000:c1:00.0']
# (name, rc, stdout (bytes; callables get the real DUAL recording), pci, status, check, fragment)
SMI = [
    ('exit0_empty', 0, b'', None, 'unknown', 'driver', 'printed no XML (empty output)'),
    ('exit0_empty_gpus_on_bus', 0, b'', PCI2, 'critical', 'driver', '2 NVIDIA GPU(s) are on the PCI bus'),
    ('exit0_blank_lines', 0, b'\n\n  \n', [], 'unknown', 'driver', 'printed no XML'),
    ('exit0_plain_text', 0, b'Hello from a wrapper script\n', None, 'unknown', 'driver', 'not XML'),
    ('exit0_garbage_bytes', 0, b'\xff\xfe\x00\x80<<<', None, 'unknown', 'driver', 'not well-formed'),
    ('exit0_truncated_recording', 0, lambda x: x[:len(x) // 2], PCI2, 'critical', 'driver', 'not well-formed'),
    ('exit0_wrong_root', 0, b'<?xml version="1.0"?><log><gpu/></log>', None, 'unknown', 'driver',
     'unexpected XML root element <log>'),
    ('exit0_internal_entities_and_no_records', 0,
     b'<?xml version="1.0"?><!DOCTYPE l [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">'
     b'<!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;"><!ENTITY d "&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;">]>'
     b'<nvidia_smi_log><driver_version>&d;</driver_version><attached_gpus>0</attached_gpus></nvidia_smi_log>',
     None, 'unknown', 'gpu_count', 'without any GPU record'),
    ('exit0_no_gpu_records', 0, b'<nvidia_smi_log><attached_gpus>0</attached_gpus></nvidia_smi_log>', [],
     'unknown', 'gpu_count', 'without any GPU record (attached_gpus=0)'),
    ('exit0_no_gpu_records_no_attached', 0, b'<nvidia_smi_log></nvidia_smi_log>', None,
     'unknown', 'gpu_count', 'attached_gpus=not reported'),
    ('exit0_no_gpu_records_gpus_on_bus', 0, b'<nvidia_smi_log><attached_gpus>0</attached_gpus></nvidia_smi_log>',
     PCI2, 'critical', 'gpu_pci_count', '2 NVIDIA GPU(s) on the PCI bus, 0 visible'),
    ('attached_more_than_records', 0, _drop_second_gpu, None, 'critical', 'gpu_attached',
     'counts 2 attached GPU(s) but returned 1 GPU record(s)'),
    ('attached_fewer_than_records', 0,
     lambda x: x.replace(b'<attached_gpus>2</attached_gpus>', b'<attached_gpus>1</attached_gpus>'),
     None, 'unknown', 'gpu_attached', 'attached_gpus=1 but 2 GPU record(s)'),
    ('attached_na', 0, lambda x: x.replace(b'<attached_gpus>2</attached_gpus>', b'<attached_gpus>N/A</attached_gpus>'),
     None, 'unknown', 'gpu_attached', 'attached_gpus=N/A'),
    ('attached_negative', 0,
     lambda x: x.replace(b'<attached_gpus>2</attached_gpus>', b'<attached_gpus>-2</attached_gpus>'),
     None, 'unknown', 'gpu_attached', 'attached_gpus=-2, not a GPU count'),
    ('attached_huge_number', 0,
     lambda x: x.replace(b'<attached_gpus>2</attached_gpus>', b'<attached_gpus>' + b'9' * 5000 + b'</attached_gpus>'),
     None, 'unknown', 'gpu_attached', 'attached_gpus=9999'),
    ('more_gpus_on_bus_than_records', 0, lambda x: x, PCI2 + ['0000:e1:00.0'], 'critical', 'gpu_pci_count',
     'not seen 0000:e1:00.0'),
    ('fewer_gpus_on_bus_than_records', 0, lambda x: x, ['0000:81:00.0'], 'unknown', 'gpu_pci_count',
     'not on the bus 0000:c1:00.0'),
    ('uuid_gpu_is_lost', 0, lambda x: x.replace(x[x.index(b'<uuid>'):x.index(b'</uuid>')], b'<uuid>[GPU is lost]'),
     PCI2, 'critical', 'gpu_error_state', 'GPU 0 (0000:81:00.0): nvidia-smi reports an error state (uuid=[GPU is lost]'),
    ('temperature_gpu_requires_reset', 0,
     lambda x: x.replace(x[x.index(b'<gpu_temp>'):x.index(b'</gpu_temp>')], b'<gpu_temp>[GPU requires reset]', 1),
     PCI2, 'critical', 'gpu_error_state', 'GPU 0 (0000:81:00.0): nvidia-smi reports an error state '
                                          '(gpu_temp=[GPU requires reset])'),
    ('name_unknown_error_on_second_gpu', 0,
     lambda x: x[:x.rindex(b'<product_name>')] + b'<product_name>[Unknown Error]'
     + x[x.index(b'</product_name>', x.rindex(b'<product_name>')):],
     PCI2, 'critical', 'gpu_error_state', 'GPU 1 (0000:c1:00.0): nvidia-smi reports an error state '
                                          '(name=[Unknown Error])'),
    ('memory_total_na', 0,
     lambda x: x.replace(x[x.index(b'<total>'):x.index(b'</total>')], b'<total>[N/A]', 1),
     PCI2, 'critical', 'gpu_error_state', 'memory_total_mib=[N/A]'),
    ('pci_bus_id_na_falls_back_to_the_gpu_id', 0,
     lambda x: x.replace(b'<pci_bus_id>00000000:81:00.0</pci_bus_id>', b'<pci_bus_id>N/A</pci_bus_id>'),
     PCI2, 'critical', 'gpu_error_state', 'GPU 0 (0000:81:00.0): nvidia-smi reports an error state (pci_bus_id=N/A)'),
    ('gpu_without_identity', 0,
     b'<nvidia_smi_log><attached_gpus>1</attached_gpus><gpu><fan_speed>1 %</fan_speed></gpu></nvidia_smi_log>',
     None, 'critical', 'gpu_error_state', 'GPU 0 (unknown PCI address): nvidia-smi reports an error state '
                                          '(identity=not reported'),
    ('non_utf8_product_name_is_replaced', 0,
     lambda x: x.replace(b'NVIDIA RTX A5000', b'NVIDIA \xff\xfe A5000', 1), PCI2, 'ok', None, None),
    ('healthy_recording', 0, lambda x: x, PCI2, 'ok', None, None),
    ('healthy_recording_sysfs_without_nvidia', 0, lambda x: x, [], 'ok', None, None),
    ('exit9_garbage_bytes', 9, b'\xff\xfe\x00garbage', None, 'critical', 'driver',
     'nvidia-smi failed (driver_not_loaded): nvidia-smi exited with 9 (the NVIDIA driver is not loaded)'),
    ('exit0_failure_text_only', 0, b'NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver.',
     PCI2, 'critical', 'driver', 'driver_not_loaded'),
    ('exit0_xml_and_lost_gpu_text', 0,
     lambda x: b'Unable to determine the device handle for GPU0000:e1:00.0: GPU is lost\n' + x,
     PCI2, 'critical', 'driver', 'gpu_lost'),
]


@pytest.mark.parametrize('name, rc, out, pci, status, check, fragment', SMI, ids=[c[0] for c in SMI])
def test_nvidia_smi_shapes(real_fixtures_dir, name, rc, out, pci, status, check, fragment):
    if callable(out):
        out = out(_real(real_fixtures_dir))
    facts = _verdict(rc, out, pci=pci)
    health = facts['health']
    assert health['status'] == status, health['issues']
    if check is None:
        assert [i for i in health['issues'] if i['severity'] != 'info'] == []
    else:
        messages = [i['message'] for i in health['issues'] if i['check'] == check and i['severity'] == status]
        assert any(fragment in m for m in messages), health['issues']


def test_non_utf8_bytes_never_put_surrogates_into_facts(real_fixtures_dir):
    raw = _real(real_fixtures_dir).replace(b'NVIDIA RTX A5000', b'NVIDIA \xff\xfe A5000', 1)
    as_surrogates = raw.decode('utf-8', 'surrogateescape')  # what a surrogateescape decoder hands on
    facts = _verdict(0, as_surrogates, pci=PCI2)
    assert facts['devices'][0]['name'] == 'NVIDIA \ufffd\ufffd A5000'
    assert facts['health']['status'] == 'ok'


def test_nvidia_smi_timeout_and_missing_program():
    facts = _verdict(None, '', pci=PCI2)
    issue, = [i for i in facts['health']['issues'] if i['severity'] == 'critical']
    assert issue['message'] == ('nvidia-smi failed (timeout): nvidia-smi hung: no answer within 7s, its process group '
                                'was killed (a hung driver usually means a sick GPU)')
    broken = Runner(0, '')
    broken.answer = OSError('Exec format error')
    smi, parsed = gp.run_nvidia_smi(broken, '/x/nvidia-smi')
    assert parsed is None
    assert smi['failure'] == {'reason': 'not_executable', 'severity': 'unknown', 'rc': None,
                              'message': 'cannot run /x/nvidia-smi: Exec format error'}


# --- 3. Kernel-log commands that hang ---------------------------------------------------------

def test_kernel_log_commands_that_hang_make_the_verdict_unknown(tmp_path, monkeypatch):
    for name in ('journalctl', 'dmesg'):
        (tmp_path / name).write_text('#!/bin/sh\n')
        (tmp_path / name).chmod(0o755)
    monkeypatch.setenv('PATH', str(tmp_path))
    monkeypatch.setattr(gp, 'EXTRA_BIN_DIRS', ())
    kernel = gp.read_kernel_log(lambda argv, timeout: (None, '', ''), 120, now=NOW, timeout=9)
    assert kernel['timed_out'] is True and kernel['events'] == []
    assert kernel['error'] == 'journalctl -k: no answer within 9s (killed); dmesg: no answer within 9s (killed)'
    facts = gh.build_facts({'smi': {'found': False}, 'parsed': None, 'pci_addresses': PCI2, 'kernel': kernel})
    found = [(i['check'], i['severity']) for i in facts['health']['issues']]
    assert found == [('driver', 'critical'), ('xid', 'unknown')]


# --- 4. The module: real processes, timeouts, bytes ------------------------------------------

class ExitJson(Exception):
    pass


class FailJson(Exception):
    pass


@pytest.fixture
def module(monkeypatch, tmp_path):
    def exit_json(self, **kwargs):
        raise ExitJson(kwargs)

    def fail_json(self, **kwargs):
        kwargs['failed'] = True
        raise FailJson(kwargs)
    monkeypatch.setattr(basic.AnsibleModule, 'exit_json', exit_json)
    monkeypatch.setattr(basic.AnsibleModule, 'fail_json', fail_json)
    (tmp_path / 'sys' / 'bus' / 'pci' / 'devices').mkdir(parents=True)
    log = tmp_path / 'kern.log'
    log.write_text('')

    def run(script, expect_fail=False, **args):
        smi = tmp_path / 'nvidia-smi'
        smi.write_bytes(b'#!/bin/sh\n' + script)
        smi.chmod(0o755)
        params = dict({'nvidia_smi_path': str(smi), 'sysfs_root': str(tmp_path / 'sys'),
                       'kernel_log_path': str(log)}, **args)
        with patch_module_args(params):
            with pytest.raises(FailJson if expect_fail else ExitJson) as info:
                gpu_facts.main()
        return info.value.args[0]
    run.tmp = tmp_path
    return run


def _gone(pid):
    try:
        with open('/proc/%d/status' % pid) as handle:
            return 'State:\tZ' in handle.read()
    except (IOError, OSError):
        return True


@pytest.mark.parametrize('with_timeout_binary', [True, False], ids=['coreutils_timeout', 'timer_fallback'])
def test_module_hung_nvidia_smi_is_killed_with_its_children(module, monkeypatch, with_timeout_binary):
    pidfile = module.tmp / 'child.pid'
    if not with_timeout_binary:
        real = basic.AnsibleModule.get_bin_path
        monkeypatch.setattr(basic.AnsibleModule, 'get_bin_path',
                            lambda self, name, *a, **k: None if name == 'timeout' else real(self, name, *a, **k))
    script = ('sleep 60 &\necho $! > %s\nsleep 60\n' % pidfile).encode()
    started = time.time()
    result = module(script, timeout=1)
    elapsed = time.time() - started
    gpu = result['ansible_facts']['gpu']
    assert gpu['health']['status'] == 'critical'
    assert 'nvidia-smi hung: no answer within 1s' in gpu['health']['issues'][0]['message']
    assert elapsed < 1 + timed_command.KILL_AFTER + 5
    if with_timeout_binary:  # the whole process group went, the background child included
        child = int(pidfile.read_text())
        for dummy in range(50):
            if _gone(child):
                break
            time.sleep(0.1)
        assert _gone(child)


@pytest.mark.parametrize('name, script, status, fragment', [
    ('exit0_nothing', b'exit 0\n', 'unknown', 'printed no XML (empty output)'),
    ('exit0_binary_garbage', b'printf "\\377\\376\\000\\200garbage"\n', 'unknown', 'output is not XML'),
], ids=['exit0_nothing', 'exit0_binary_garbage'])
def test_module_no_answer_fails_with_the_verdict(module, name, script, status, fragment):
    result = module(script, expect_fail=True)
    assert fragment in result['msg']
    assert result['ansible_facts']['gpu']['health']['status'] == status
    json.dumps(result).encode('utf-8')


def test_module_non_utf8_output_does_not_abort(module, real_fixtures_dir):
    xml = _real(real_fixtures_dir).replace(b'NVIDIA RTX A5000', b'NVIDIA \xff A5000', 1)
    path = module.tmp / 'out.xml'
    path.write_bytes(xml)
    result = module(('cat "%s"\n' % path).encode())
    gpu = result['ansible_facts']['gpu']
    assert gpu['devices'][0]['name'] == 'NVIDIA \ufffd A5000' and gpu['health']['status'] == 'ok'
    json.dumps(result).encode('utf-8')
