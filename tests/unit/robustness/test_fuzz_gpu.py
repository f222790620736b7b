# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Property-based fuzzing of the nvidia-smi XML parser and the kernel-log parser (hypothesis).

Only documented outcomes: GpuXmlError for unusable XML, a verdict among ok/warning/critical/unknown,
no event from text a user controls, never a traceback. Deterministic for CI (derandomize).
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import calendar
import json

from hypothesis import HealthCheck, given, settings, strategies as st

from ansible_collections.gpucluster.core.plugins.module_utils import gpu_health as gh
from ansible_collections.gpucluster.core.plugins.module_utils import gpu_kernel_log as kl
from ansible_collections.gpucluster.core.plugins.module_utils import gpu_probe as gp
from ansible_collections.gpucluster.core.plugins.module_utils.gpu_smi_xml import GpuXmlError, parse_nvidia_smi_xml

NOW = calendar.timegm((2026, 1, 5, 10, 0, 0, 0, 0, 0))
FUZZ = settings(max_examples=200, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

# --- XML ---------------------------------------------------------------------------------------
TAGS = ('gpu', 'uuid', 'product_name', 'pci', 'pci_bus_id', 'attached_gpus', 'fb_memory_usage', 'total',
        'temperature', 'gpu_temp', 'gpu_temp_slow_threshold', 'ecc_errors', 'volatile', 'aggregate',
        'double_bit', 'single_bit', 'sram_uncorrectable', 'remapped_rows', 'remapped_row_pending',
        'retired_pages', 'pending_retirement', 'clocks_event_reasons', 'clocks_event_reason_hw_slowdown',
        'persistence_mode', 'nvlink', 'driver_version', 'utilization', 'gpu_util', 'pci_gpu_link_info')
VALUES = st.one_of(
    st.sampled_from(('N/A', '[N/A]', '[GPU is lost]', '[GPU requires reset]', '[Unknown Error]', 'Yes', 'No',
                     'Enabled', 'Active', '0', '-1', '81 C', '24564 MiB', '00000000:81:00.0', 'GPU-1', '2', '')),
    st.text(max_size=20),
    st.integers(min_value=-10 ** 40, max_value=10 ** 40).map(str),
)


def _xml_escape(text):
    return (text.replace('&', '&amp;').replace('<', '&lt;').replace('>', '&gt;')
            .encode('utf-8', 'replace').decode('utf-8'))


ELEMENTS = st.recursive(
    st.tuples(st.sampled_from(TAGS), VALUES).map(lambda t: '<%s>%s</%s>' % (t[0], _xml_escape(t[1]), t[0])),
    lambda children: st.tuples(st.sampled_from(TAGS), st.lists(children, max_size=5)).map(
        lambda t: '<%s>%s</%s>' % (t[0], ''.join(t[1]), t[0])),
    max_leaves=25)
DOCUMENTS = st.lists(ELEMENTS, max_size=6).map(lambda parts: '<nvidia_smi_log>%s</nvidia_smi_log>' % ''.join(parts))
PCI = st.one_of(st.none(), st.lists(st.sampled_from(('0000:81:00.0', '0000:c1:00.0', '0000:e1:00.0')),
                                    max_size=3, unique=True))


def _judge(smi, parsed, pci):
    facts = gh.build_facts({'smi': smi, 'parsed': parsed, 'pci_addresses': pci,
                            'kernel': {'source': 'file', 'events': [], 'error': None}})
    json.dumps(facts).encode('utf-8')  # serialisable, no surrogates
    assert facts['health']['status'] in gh.STATUSES
    return facts


@FUZZ
@given(doc=DOCUMENTS, pci=PCI)
def test_structured_documents_parse_or_fail_cleanly(doc, pci):
    try:
        parsed = parse_nvidia_smi_xml(doc)
    except GpuXmlError:
        return
    facts = _judge({'found': True, 'path': 'x'}, parsed, pci)
    if facts['health']['status'] == 'ok':
        # ok needs GPU records that agree with attached_gpus and carry no error state.
        assert parsed['count'] >= 1 and parsed['attached_gpus'] in (None, parsed['count'])
        assert not any(d['error_states'] for d in parsed['devices'])
    for dev in parsed['devices']:
        if any('GPU is lost' in s or 'GPU requires reset' in s for s in dev['error_states']):
            assert facts['health']['status'] == 'critical'


@FUZZ
@given(rc=st.one_of(st.none(), st.integers(min_value=0, max_value=255)),
       out=st.one_of(st.binary(max_size=300), st.text(max_size=300), DOCUMENTS.map(lambda d: d.encode('utf-8'))),
       err=st.binary(max_size=100), pci=PCI)
def test_any_nvidia_smi_answer_gives_a_documented_verdict(rc, out, err, pci):
    smi, parsed = gp.run_nvidia_smi(lambda argv, timeout: (rc, out, err), '/usr/bin/nvidia-smi', timeout=5)
    facts = _judge(smi, parsed, pci)
    if facts['health']['status'] == 'ok':
        assert rc == 0 and parsed is not None and parsed['count'] >= 1


@FUZZ
@given(data=st.binary(max_size=2000))
def test_arbitrary_bytes_never_crash_the_xml_parser(data):
    try:
        parse_nvidia_smi_xml(data)
    except GpuXmlError:
        pass


# --- kernel log ----------------------------------------------------------------------------------
PREFIXES = st.sampled_from((
    '[ 5000.123456] ', '[Mon Jan  5 09:59:00 2026] ', '2026-01-05T09:59:00,000000+00:00 ', 'Jan  5 09:59:00 node1 kernel: ',
    '2026-01-05T09:59:00+0000 node1 kernel: ', 'kern  :warn  : [ 5000.1] ', '4,1,5000000000,-;', '',
    '[Sat Feb 31 25:61:61 2026] ', '2026-13-45T99:99:99,000000+99:99 ', 'Feb 30 25:00:00 node1 kernel: ',
))
KERNEL_TEXT = st.sampled_from((
    'NVRM: Xid (PCI:0000:41:00): 79, pid=1, GPU has fallen off the bus.', 'NVRM: GPU 0000:41:00.0: GPU has fallen off the bus.',
    'nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal', 'NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x22)',
    'NVRM: The NVIDIA GPU 0000:b3:00.0', 'NVRM: fallen off the bus and is not responding', '\n    NVRM: fallen off the bus',
    '\n', ' ', '[', '\x00', '\ufffd',
))
USER_TEXT = st.lists(st.one_of(KERNEL_TEXT, st.text(max_size=40)), max_size=6).map(''.join)


@FUZZ
@given(prefix=PREFIXES, comm=st.text(max_size=15).filter(lambda c: '\n' not in c and '\r' not in c), user=USER_TEXT)
def test_user_text_in_a_segfault_line_never_makes_an_event(prefix, comm, user):
    # The kernel prints "<comm>[<pid>]: segfault at ... in <file>": comm (15 chars) and file are the user's.
    line = '%s%s[4242]: segfault at 0 ip 0 sp 0 error 4 in %s[400000+1000]' % (prefix, comm, user)
    lines = line.split('\n')
    # The kernel log shows a line break of the message as an indented continuation line.
    text = '\n'.join([lines[0]] + ['    ' + ln for ln in lines[1:]])
    assert kl.parse_kernel_log(text, now=NOW) == []
    events, dummy = kl.parse_journal_json(json.dumps({'_TRANSPORT': 'kernel', 'MESSAGE': line[len(prefix):]}))
    assert events == []


@FUZZ
@given(parts=st.lists(st.tuples(PREFIXES, st.one_of(KERNEL_TEXT, st.text(max_size=60))), max_size=20))
def test_kernel_log_lines_give_documented_events(parts):
    text = '\n'.join(p + m for p, m in parts)
    for event in kl.parse_kernel_log(text, now=NOW):
        assert event['kind'] in ('xid', 'sxid', 'fallen_off_bus', 'init_failed')
        assert event['severity'] in ('info', 'warning', 'critical')
        assert event['message'].startswith(('NVRM: ', 'nvidia-nvswitch'))
        event['message'].encode('utf-8')
        kl.format_epoch(event['epoch'])


@FUZZ
@given(data=st.binary(max_size=3000))
def test_arbitrary_bytes_never_crash_the_kernel_log_parsers(data):
    kl.parse_kernel_log(data, now=NOW)
    kl.parse_journal_json(data)


@FUZZ
@given(epoch=st.floats(allow_nan=True, allow_infinity=True))
def test_format_epoch_never_raises(epoch):
    value = kl.format_epoch(epoch)
    assert value is None or value.endswith('Z')


@FUZZ
@given(parts=st.lists(st.tuples(st.sampled_from(('', 'NVRM: Xid (PCI:0000:41:00): 48, x')), st.binary(max_size=40)),
                      max_size=30))
def test_undated_file_lines_never_count_as_recent(tmp_path_factory, parts):
    path = tmp_path_factory.mktemp('fuzz') / 'kern.log'
    path.write_bytes(b'\n'.join(m.encode() + junk.replace(b'\n', b' ') for m, junk in parts))
    result = gp.read_kernel_log_file(str(path), 7200, now=NOW, uptime=None)
    assert result['error'] is None and result['events'] == []
