# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Second round of hostile and careless inputs for the GPU health path (issue 27), each with its exact outcome.

A user's process name or a vGPU guest's report never changes a verdict; GPU identities are compared,
not counts; every number a user or a file gives is finite and in range or refused, naming it; every
file is read as a bounded regular file (a FIFO never hangs); a leftover child or a flood on
nvidia-smi's stdout never makes a finished run "hung"; every message is bounded; kernel-log lines as
rsyslog writes kern.log are read like dmesg's. Inputs: real recordings of the fixture corpus
(mutated in memory), small public excerpts in tests/unit/fixtures/kernel_log (README names each
source), and inline texts.

OUTCOMES records every case with its outcome ('refused' with a message, 'ok', 'critical', 'unknown',
'no hang'); test_case_count_by_outcome gives the counts for the issue note.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import calendar
import json
import math
import os
import re
import subprocess
import sys
import time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpucluster.core.plugins.filter.health_check import health_threshold_errors
from ansible_collections.gpucluster.core.plugins.filter import slurm
from ansible_collections.gpucluster.core.plugins.module_utils import gpu_bounds
from ansible_collections.gpucluster.core.plugins.module_utils import gpu_health as gh
from ansible_collections.gpucluster.core.plugins.module_utils import gpu_kernel_log as kl
from ansible_collections.gpucluster.core.plugins.module_utils import gpu_probe as gp
from ansible_collections.gpucluster.core.plugins.module_utils import gpu_prom
from ansible_collections.gpucluster.core.plugins.module_utils import gpu_smi_xml as sx
from ansible_collections.gpucluster.core.plugins.module_utils import timed_command
from ansible_collections.gpucluster.core.plugins.modules import gpu_facts

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
sys.path.insert(0, os.path.join(REPO, 'tests'))
import node_programs  # noqa: E402

NOW = calendar.timegm((2026, 1, 5, 10, 0, 0, 0, 0, 0))
DUAL = os.path.join('01_nvidia_smi_xml', 'telegraf__dual_a5000-v13.xml')  # 2x RTX A5000 (81:00.0, c1:00.0), ok
A100_MIG = os.path.join('01_nvidia_smi_xml', 'netdata__a100-sxm4-mig.xml')  # 1 A100 in MIG mode, 2 MIG devices
OWN = os.path.join(REPO, 'tests', 'unit', 'fixtures', 'kernel_log')
SMALL_XML = os.path.join(REPO, 'tests', 'unit', 'fixtures', 'gpu', 'two_gpus_v13_out_of_order.xml')
GENUINE = "NVRM: Xid (PCI:0000:81:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
BIG = 20 * 1024 * 1024
FUZZ = settings(max_examples=60, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
OUTCOMES = []  # (table, case id, outcome) of every case: refused / ok / critical / unknown / no hang
KINDS = ('refused', 'ok', 'critical', 'unknown', 'no hang')


def _record(table, rows, outcome_at=-1):
    for row in rows:
        OUTCOMES.append((table, row[0], row[outcome_at]))
    return rows


def _read(real_fixtures_dir, rel):
    with open(os.path.join(real_fixtures_dir, rel), encoding='utf-8') as handle:
        return handle.read()


def judge(xml, pci=None, expected=None, thresholds=None, kernel=None):
    parsed = sx.parse_nvidia_smi_xml(xml)
    facts = gh.build_facts({'smi': {'found': True, 'path': '/usr/bin/nvidia-smi', 'failure': None, 'xml_error': None},
                            'parsed': parsed, 'pci_addresses': pci,
                            'kernel': kernel or {'source': 'file', 'events': [], 'error': None}},
                           expected_count=expected, thresholds=thresholds)
    json.dumps(facts)
    return facts


def verdict(facts):
    return facts['health']['status'], [(i['check'], i['severity']) for i in facts['health']['issues']]


def _gpu_blocks(xml):
    """(head, [<gpu>...</gpu> blocks], tail) of an nvidia-smi XML document."""
    parts = re.split(r'(?=<gpu id=)', xml)
    head, gpus = parts[0], parts[1:]
    last = gpus[-1]
    end = last.rindex('</gpu>') + len('</gpu>')
    gpus[-1], tail = last[:end], last[end:]
    return head, gpus, tail


# --- 1. Only fields the driver writes count --------------------------------------------------------
def _names(xml, name):
    return re.sub(r'<process_name>[^<]*</process_name>', '<process_name>%s</process_name>' % name, xml)


def _vgpu(xml, field, value):
    """A vGPU host's <vgpus> block (nvsmi_device DTD shape) with ``field`` set by the guest, in the first GPU."""
    block = ('<vgpus><vgpu_instance id="0x1"><vm_id>42</vm_id><vm_name>%s</vm_name>'
             '<vgpu_name>GRID A100-4C</vgpu_name><guest_info><guest_driver_version>%s</guest_driver_version>'
             '<guest_driver_status>ok</guest_driver_status></guest_info></vgpu_instance></vgpus>'
             % (value if field == 'vm_name' else 'vm1', value if field == 'guest_driver_version' else '550.54'))
    return xml.replace('</processes>', '</processes>' + block, 1)


def _field(xml, tag, value):
    """The first <tag>...</tag> of the document set to ``value``."""
    return re.sub(r'<%s>[^<]*</%s>' % (tag, tag), '<%s>%s</%s>' % (tag, value, tag), xml, count=1)


USER_STRINGS = _record('driver-fields', [
    # id, mutation of the real dual A5000 recording, expected (status, issues)
    ('process-named-gpu-is-lost', lambda x: _names(x, 'GPU is lost'), ('ok', []), 'ok'),
    ('process-named-gpu-requires-reset', lambda x: _names(x, '[GPU requires reset]'), ('ok', []), 'ok'),
    ('process-command-line-with-marker', lambda x: _names(x, './a.out --flag [GPU is lost]'), ('ok', []), 'ok'),
    ('accounted-process-named-gpu-is-lost',
     lambda x: x.replace('<accounted_processes>', '<accounted_processes><accounted_process_info><pid>7</pid>'
                         '<process_name>GPU is lost</process_name></accounted_process_info>', 1), ('ok', []), 'ok'),
    ('vgpu-guest-driver-version-gpu-is-lost', lambda x: _vgpu(x, 'guest_driver_version', 'GPU is lost'), ('ok', []), 'ok'),
    ('vgpu-vm-name-gpu-requires-reset', lambda x: _vgpu(x, 'vm_name', '[GPU requires reset]'), ('ok', []), 'ok'),
    ('marker-inside-a-longer-driver-value', lambda x: _field(x, 'vbios_version', 'GPU is lost 94.02'), ('ok', []), 'ok'),
    ('process-name-20mb', lambda x: _names(x, 'GPU is lost ' + 'x' * BIG), ('ok', []), 'ok'),
    # Controls: the driver's own fields in an error state stay critical.
    ('driver-field-product-brand-gpu-requires-reset', lambda x: _field(x, 'product_brand', '[GPU requires reset]'),
     ('critical', [('gpu_error_state', 'critical')]), 'critical'),
    ('driver-field-uuid-gpu-is-lost', lambda x: _field(x, 'uuid', '[GPU is lost]'),
     ('critical', [('gpu_error_state', 'critical')]), 'critical'),
    ('driver-field-deeply-nested',
     lambda x: x.replace('<pci>', '<pci>' + '<board>' * 5000 + 'GPU is lost' + '</board>' * 5000, 1),
     ('critical', [('gpu_error_state', 'critical')]), 'critical'),
])


@pytest.mark.parametrize('case, mutate, expected, outcome', USER_STRINGS, ids=[c[0] for c in USER_STRINGS])
def test_only_driver_written_fields_change_a_verdict(real_fixtures_dir, case, mutate, expected, outcome):
    xml = mutate(_read(real_fixtures_dir, DUAL))
    facts = judge(xml)
    assert verdict(facts) == expected
    for issue in facts['health']['issues']:
        assert len(issue['message']) <= gh.MESSAGE_MAX + 40
    if outcome == 'ok':
        assert all(d['error_states'] == [] for d in facts['devices'])


def test_error_state_names_the_driver_field(real_fixtures_dir):
    facts = judge(_field(_read(real_fixtures_dir, DUAL), 'product_brand', '[GPU requires reset]'))
    assert facts['devices'][0]['error_states'] == ['product_brand=[GPU requires reset]']
    assert facts['health']['issues'][0]['message'] == (
        'GPU 0 (0000:81:00.0): nvidia-smi reports an error state (product_brand=[GPU requires reset]); '
        'reset the GPU or reboot')


# --- 2. Identities, not counts; MIG-level ECC ------------------------------------------------------
def _swap_second(xml, transform):
    head, gpus, tail = _gpu_blocks(xml)
    return head + gpus[0] + transform(gpus[0], gpus[1]) + tail


def _dup_whole(first, _second):
    return first


def _dup_uuid(first, second):
    uuid = re.search(r'<uuid>([^<]*)</uuid>', first).group(1)
    return re.sub(r'<uuid>[^<]*</uuid>', '<uuid>%s</uuid>' % uuid, second, count=1)


def _dup_minor(first, second):
    minor = re.search(r'<minor_number>([^<]*)</minor_number>', first).group(1)
    return re.sub(r'<minor_number>[^<]*</minor_number>', '<minor_number>%s</minor_number>' % minor, second, count=1)


def _head_first_big_uuid(xml):
    head, gpus, tail = _gpu_blocks(xml)
    huge = 'GPU-' + 'f' * BIG
    first = re.sub(r'<uuid>[^<]*</uuid>', '<uuid>%s</uuid>' % huge, gpus[0], count=1)
    second = re.sub(r'<uuid>[^<]*</uuid>', '<uuid>%s</uuid>' % huge, gpus[1], count=1)
    return head + first + second + tail


BUS = ['0000:81:00.0', '0000:c1:00.0']
IDENTITIES = _record('identities', [
    # id, document, pci on the bus, expected count, expected (status, issues)
    ('one-gpu-listed-twice-other-missing-expected-2', lambda x: _swap_second(x, _dup_whole), None, 2,
     ('critical', [('gpu_identity', 'critical'), ('gpu_identity', 'critical'), ('gpu_identity', 'critical'),
                   ('gpu_count', 'critical')]), 'critical'),
    ('one-gpu-listed-twice-pci-bus-shows-both', lambda x: _swap_second(x, _dup_whole), BUS, None,
     ('critical', [('gpu_identity', 'critical'), ('gpu_identity', 'critical'), ('gpu_identity', 'critical'),
                   ('gpu_pci_count', 'critical')]), 'critical'),
    ('duplicate-uuid-only', lambda x: _swap_second(x, _dup_uuid), BUS, 2,
     ('critical', [('gpu_identity', 'critical'), ('gpu_count', 'critical')]), 'critical'),
    ('duplicate-minor-number-only', lambda x: _swap_second(x, _dup_minor), BUS, 2,
     ('critical', [('gpu_identity', 'critical')]), 'critical'),
    ('same-count-other-address-on-the-bus', lambda x: x, ['0000:81:00.0', '0000:c2:00.0'], 2,
     ('critical', [('gpu_pci_count', 'critical'), ('gpu_pci_count', 'unknown')]), 'critical'),
    ('uuid-20mb-on-both-gpus', _head_first_big_uuid, BUS, 2,
     ('critical', [('gpu_identity', 'critical'), ('gpu_count', 'critical')]), 'critical'),
    ('distinct-identities-all-on-the-bus', lambda x: x, BUS, 2, ('ok', []), 'ok'),
])


@pytest.mark.parametrize('case, mutate, pci, expected_count, expected, outcome', IDENTITIES,
                         ids=[c[0] for c in IDENTITIES])
def test_identities_are_compared_not_counts(real_fixtures_dir, case, mutate, pci, expected_count, expected, outcome):
    facts = judge(mutate(_read(real_fixtures_dir, DUAL)), pci=pci, expected=expected_count)
    assert verdict(facts) == expected
    for issue in facts['health']['issues']:
        assert len(issue['message']) <= 1000, issue['message'][:200]


def test_identity_message_names_the_repeated_gpu(real_fixtures_dir):
    facts = judge(_swap_second(_read(real_fixtures_dir, DUAL), _dup_whole), pci=BUS)
    messages = [i['message'] for i in facts['health']['issues']]
    assert messages == [
        'nvidia-smi lists UUID GPU-12345678-aaaa-bbbb-cccc-0123456789ab for 2 GPU records (index 0, 1): one GPU '
        'reported more than once, so the GPU list cannot be trusted and a GPU may be missing',
        'nvidia-smi lists PCI bus id 0000:81:00.0 for 2 GPU records (index 0, 1): one GPU reported more than once, '
        'so the GPU list cannot be trusted and a GPU may be missing',
        'nvidia-smi lists minor number 1 for 2 GPU records (index 0, 1): one GPU reported more than once, so the '
        'GPU list cannot be trusted and a GPU may be missing',
        '2 NVIDIA GPU(s) on the PCI bus, 1 visible to the driver (fell off the bus?): not seen 0000:c1:00.0',
    ]


def _mig(xml, volatile=None, aggregate=None):
    """The first MIG device's ECC counters set (the GPU-level counters stay 0)."""
    block = '<ecc_error_count><volatile_count><sram_uncorrectable>%s</sram_uncorrectable></volatile_count>' % (
        volatile if volatile is not None else 0)
    if aggregate is not None:
        block += '<aggregate_count><sram_uncorrectable>%s</sram_uncorrectable></aggregate_count>' % aggregate
    block += '</ecc_error_count>'
    return re.sub(r'<ecc_error_count>.*?</ecc_error_count>', block, xml, count=1, flags=re.S)


MIG = _record('mig-ecc', [
    ('mig-volatile-uncorrectable', lambda x: _mig(x, volatile=3),
     ('critical', [('ecc_uncorrectable', 'critical'), ('persistence_mode', 'warning')]),
     'GPU 0 (0000:00:04.0): MIG device 0 (GPU instance 1, compute instance 0): 3 uncorrectable ECC error(s) since '
     'the last driver load; reset the GPU', 'critical'),
    ('mig-aggregate-sram-uncorrectable', lambda x: _mig(x, aggregate=2),
     ('critical', [('ecc_sram_uncorrectable', 'critical'), ('persistence_mode', 'warning')]),
     'GPU 0 (0000:00:04.0): MIG device 0 (GPU instance 1, compute instance 0): 2 uncorrectable SRAM ECC error(s) '
     'recorded over its lifetime; RMA candidate', 'critical'),
])


@pytest.mark.parametrize('case, mutate, expected, message, outcome', MIG, ids=[c[0] for c in MIG])
def test_mig_level_ecc_counts(real_fixtures_dir, case, mutate, expected, message, outcome):
    base = judge(_read(real_fixtures_dir, A100_MIG))
    assert verdict(base) == ('warning', [('persistence_mode', 'warning')])  # the recording as it is
    facts = judge(mutate(_read(real_fixtures_dir, A100_MIG)))
    assert verdict(facts) == expected
    assert facts['health']['issues'][0]['message'] == message


def test_mig_devices_are_in_the_record(real_fixtures_dir):
    dev = sx.parse_nvidia_smi_xml(_read(real_fixtures_dir, A100_MIG))['devices'][0]
    assert [(m['index'], m['gpu_instance_id'], m['compute_instance_id'], m['ecc_errors']['volatile_dbe'])
            for m in dev['mig_devices']] == [(0, 1, 0, 0), (1, 2, 0, 0)]


# --- 3. Numbers a user or a file gives: finite and in range, or refused -----------------------------
ACCEPT_INT = 'a number >= 0 and <= 9223372036854775807, without a fraction'
XID_ACCEPTED = ('a list of Xid numbers from 0 to 999999, for example [79, 94] (a single code is written [79], '
                'not "79")')
THRESHOLD_CASES = _record('thresholds', [
    # id, overrides, ThresholdError message or the merged value checked
    ('retired-pages-max-nan', {'retired_pages_max': float('nan')},
     'threshold retired_pages_max=nan; accepted: ' + ACCEPT_INT, 'refused'),
    ('retired-pages-max-infinity', {'retired_pages_max': float('inf')},
     'threshold retired_pages_max=inf; accepted: ' + ACCEPT_INT, 'refused'),
    ('retired-pages-max-1e999', {'retired_pages_max': float('1e999')},
     'threshold retired_pages_max=inf; accepted: ' + ACCEPT_INT, 'refused'),
    ('sram-max-minus-infinity', {'sram_correctable_max': float('-inf')},
     'threshold sram_correctable_max=-inf; accepted: ' + ACCEPT_INT, 'refused'),
    ('temperature-margin-nan', {'temperature_margin_c': float('nan')},
     'threshold temperature_margin_c=nan; accepted: a number >= 0 and <= 1000 (not NaN or infinite)', 'refused'),
    ('temperature-margin-1e999', {'temperature_margin_c': 1e999},
     'threshold temperature_margin_c=inf; accepted: a number >= 0 and <= 1000 (not NaN or infinite)', 'refused'),
    ('pcie-gen-load-101', {'pcie_gen_load_pct': 101},
     'threshold pcie_gen_load_pct=101; accepted: a number >= 0 and <= 100, without a fraction', 'refused'),
    ('retired-pages-fraction', {'retired_pages_max': 60.5},
     'threshold retired_pages_max=60.5; accepted: ' + ACCEPT_INT, 'refused'),
    ('retired-pages-beyond-64-bit', {'retired_pages_max': 2 ** 64},
     'threshold retired_pages_max=18446744073709551616; accepted: ' + ACCEPT_INT, 'refused'),
    ('xid-ignore-bare-string', {'xid_ignore': '79'}, "threshold xid_ignore='79'; accepted: " + XID_ACCEPTED, 'refused'),
    ('xid-ignore-superscript-two', {'xid_ignore': ['\u00b2']},
     "threshold xid_ignore=['\u00b2']: element '\u00b2'; accepted: " + XID_ACCEPTED, 'refused'),
    ('xid-ignore-boolean', {'xid_ignore': [True]},
     'threshold xid_ignore=[True]: element True; accepted: ' + XID_ACCEPTED, 'refused'),
    ('xid-ignore-out-of-range', {'xid_ignore': [1000000]},
     'threshold xid_ignore=[1000000]: element 1000000; accepted: ' + XID_ACCEPTED, 'refused'),
    ('xid-ignore-nan', {'xid_ignore': [float('nan')]},
     'threshold xid_ignore=[nan]: element nan; accepted: ' + XID_ACCEPTED, 'refused'),
    ('thresholds-a-list', ['retired_pages_max'],
     "thresholds=['retired_pages_max']; accepted: a mapping of threshold names to values", 'refused'),
    ('severity-20mb', {'pcie_width_severity': 'x' * BIG}, None, 'refused'),
    ('xid-ignore-digit-strings', {'xid_ignore': ['79', 94, '79']}, ('xid_ignore', [79, 94]), 'ok'),
    ('retired-pages-integral-float', {'retired_pages_max': 60.0}, ('retired_pages_max', 60), 'ok'),
])


@pytest.mark.parametrize('case, overrides, expected, outcome', THRESHOLD_CASES, ids=[c[0] for c in THRESHOLD_CASES])
def test_threshold_numbers_finite_and_in_range(case, overrides, expected, outcome):
    if outcome == 'ok':
        name, value = expected
        merged = gh.merge_thresholds(overrides)
        assert merged[name] == value and type(merged[name]) is type(value)
        return
    with pytest.raises(gh.ThresholdError) as caught:
        gh.merge_thresholds(overrides)
    if expected is None:  # a 20 MB value: the message quotes a bounded part of it
        assert len(str(caught.value)) < 400 and 'characters cut' in str(caught.value)
    else:
        assert str(caught.value) == expected


def test_nan_threshold_no_longer_weakens_a_rule():
    # 100 retired pages: critical with the default (60); NaN used to turn it into a warning.
    dev = {'index': 0, 'pci_address': '0000:81:00.0', 'retired_pages': {'sbe': 50, 'dbe': 50, 'pending': False}}
    assert [i['severity'] for i in gh.check_retired_pages(dev, gh.merge_thresholds())] == ['critical']
    with pytest.raises(gh.ThresholdError, match='retired_pages_max=nan'):
        gh.merge_thresholds({'retired_pages_max': float('nan')})


PREFLIGHT = _record('role-preflight', [
    ('preflight-nan', {'retired_pages_max': float('nan')},
     ['health_check_thresholds: threshold retired_pages_max=nan; accepted: ' + ACCEPT_INT], 'refused'),
    ('preflight-bare-string-xid', {'xid_ignore': '79'},
     ["health_check_thresholds: threshold xid_ignore='79'; accepted: " + XID_ACCEPTED], 'refused'),
    ('preflight-infinity-margin', {'temperature_margin_c': float('inf')},
     ['health_check_thresholds: threshold temperature_margin_c=inf; accepted: a number >= 0 and <= 1000 '
      '(not NaN or infinite)'], 'refused'),
])


@pytest.mark.parametrize('case, overrides, errors, outcome', PREFLIGHT, ids=[c[0] for c in PREFLIGHT])
def test_role_preflight_refuses_what_the_program_refuses(case, overrides, errors, outcome):
    assert health_threshold_errors(overrides) == errors


# --- 4. The module ------------------------------------------------------------------------------
class _Exit(Exception):
    def __init__(self, how, result):
        super(_Exit, self).__init__(how)
        self.how = how
        self.result = result


@pytest.fixture
def module(monkeypatch, tmp_path):
    def exit_json(self, **kwargs):
        raise _Exit('exit', kwargs)

    def fail_json(self, **kwargs):
        raise _Exit('fail', kwargs)
    monkeypatch.setattr(basic.AnsibleModule, 'exit_json', exit_json)
    monkeypatch.setattr(basic.AnsibleModule, 'fail_json', fail_json)
    (tmp_path / 'sys' / 'bus' / 'pci' / 'devices').mkdir(parents=True)
    log = tmp_path / 'kern.log'
    log.write_text('')

    def run(script=None, **args):
        smi = tmp_path / 'nvidia-smi'
        smi.write_bytes(b'#!/bin/sh\n' + (script or ('cat "%s"\n' % SMALL_XML).encode()))
        smi.chmod(0o755)
        params = dict({'nvidia_smi_path': str(smi), 'sysfs_root': str(tmp_path / 'sys'),
                       'kernel_log_path': str(log)}, **args)
        with patch_module_args(params):
            with pytest.raises(_Exit) as info:
                gpu_facts.main()
        return info.value.how, info.value.result
    run.tmp = tmp_path
    return run


MODULE_CASES = _record('gpu_facts', [
    ('module-temperature-margin-nan', {'thresholds': {'temperature_margin_c': 'nan'}},
     ('fail', 'thresholds: threshold temperature_margin_c=nan; accepted: a number >= 0 and <= 1000 '
              '(not NaN or infinite)'), 'refused'),
    ('module-temperature-margin-1e999', {'thresholds': {'temperature_margin_c': '1e999'}},
     ('fail', 'thresholds: threshold temperature_margin_c=inf; accepted: a number >= 0 and <= 1000 '
              '(not NaN or infinite)'), 'refused'),
    ('module-pcie-gen-load-200', {'thresholds': {'pcie_gen_load_pct': 200}},
     ('fail', 'thresholds: threshold pcie_gen_load_pct=200; accepted: a number >= 0 and <= 100, without a '
              'fraction'), 'refused'),
    ('module-timeout-10-to-the-20', {'timeout': 10 ** 20},
     ('fail', 'timeout must be >= 1 and <= 86400, got 100000000000000000000'), 'refused'),
    ('module-xid-window-beyond-100-years', {'xid_window_minutes': 10 ** 12},
     ('fail', 'xid_window_minutes must be >= 1 and <= 52704000, got 1000000000000'), 'refused'),
    ('module-expected-count-huge', {'expected_count': 10 ** 6},
     ('fail', 'expected_count must be >= 0 and <= 4096, got 1000000'), 'refused'),
    # Ansible's own list option reads "79" as [79] (a comma-separated string): one code, never [7, 9].
    ('module-xid-ignore-string', {'thresholds': {'xid_ignore': '79'}}, ('exit', 'ok'), 'ok'),
    ('module-kernel-log-fifo', {'kernel_log_path': 'FIFO'}, ('exit', 'ok'), 'no hang'),
])


@pytest.mark.parametrize('case, args, expected, outcome', MODULE_CASES, ids=[c[0] for c in MODULE_CASES])
def test_module_inputs(module, case, args, expected, outcome):
    if args.get('kernel_log_path') == 'FIFO':
        fifo = module.tmp / 'kern.fifo'
        os.mkfifo(str(fifo))
        args = dict(args, kernel_log_path=str(fifo))
    started = time.monotonic()
    how, result = module(**args)
    assert time.monotonic() - started < 20
    if expected[0] == 'fail':
        assert (how, result['msg']) == expected
    else:
        assert (how, result['ansible_facts']['gpu']['health']['status']) == expected
    if case == 'module-kernel-log-fifo':
        gpu = result['ansible_facts']['gpu']
        assert gpu['health']['checks_skipped'] == ['xid', 'gpu_pci_count']
        assert gpu['health']['issues'][0]['message'] == (
            'Xid check skipped: kernel log not readable (cannot read %s: not a regular file (a FIFO))' % fifo)


SLURM_PLAN = _record('slurm-node-plan', [
    # id, process name in the nvidia-smi output gpu_facts reads, problems of the slurm role's node plan
    ('job-named-gpu-is-lost', 'GPU is lost', [], 'ok'),
    ('job-named-gpu-requires-reset', '[GPU requires reset]', [], 'ok'),
])


@pytest.mark.parametrize('case, name, problems, outcome', SLURM_PLAN, ids=[c[0] for c in SLURM_PLAN])
def test_slurm_node_plan_ignores_a_process_name(module, real_fixtures_dir, case, name, problems, outcome):
    # gpu_facts on the real dual A5000 recording whose processes carry the name, then the slurm role's node
    # plan (plugins/filter/slurm.py) over those facts: no "GPU health critical" drain.
    xml = module.tmp / 'smi.xml'
    xml.write_text(_names(_read(real_fixtures_dir, DUAL), name))
    how, result = module(('cat "%s"\n' % xml).encode())
    gpu = result['ansible_facts']['gpu']
    assert (how, gpu['health']['status']) == ('exit', 'ok')
    with open(os.path.join(REPO, 'tests', 'unit', 'fixtures', 'slurm', 'slurmd-C-lab.txt')) as handle:
        report = handle.read()
    plan = slurm.node_plan(report, gpu=gpu, settings={'name': 'node1', 'gpus': 2, 'gpu_type': 'rtx_a5000'})
    assert plan['problems'] == problems
    assert plan['node']['gres'][0]['files'] == ['/dev/nvidia1', '/dev/nvidia0']


# --- 5. Files and programs: nothing blocks, nothing floods -----------------------------------------
def test_kernel_log_reader_refuses_what_is_not_a_regular_file(tmp_path):
    fifo = tmp_path / 'fifo'
    os.mkfifo(str(fifo))
    for path, kind in ((str(fifo), 'a FIFO'), ('/dev/zero', 'a character device'), (str(tmp_path), 'a directory')):
        started = time.monotonic()
        result = gp.read_kernel_log_file(path, 3600, now=NOW)
        assert time.monotonic() - started < 5
        assert result['error'] == 'cannot read %s: not a regular file (%s)' % (path, kind)


OUTCOMES.extend([('files', 'kernel-log-fifo', 'no hang'), ('files', 'kernel-log-dev-zero', 'no hang'),
                 ('files', 'kernel-log-directory', 'no hang')])


def test_sysfs_attribute_fifo_or_flood_is_skipped(tmp_path):
    devices = tmp_path / 'bus' / 'pci' / 'devices'
    fifo_dev = devices / '0000:81:00.0'
    fifo_dev.mkdir(parents=True)
    os.mkfifo(str(fifo_dev / 'vendor'))
    (fifo_dev / 'class').write_text('0x030200\n')
    big = devices / '0000:c1:00.0'
    big.mkdir()
    (big / 'vendor').write_text('0x10de' + ' ' * 10000)
    (big / 'class').write_text('0x030200\n')
    good = devices / '0000:e1:00.0'
    good.mkdir()
    (good / 'vendor').write_text('0x10de\n')
    (good / 'class').write_text('0x030200\n')
    started = time.monotonic()
    assert gp.nvidia_pci_addresses(str(tmp_path)) == ['0000:e1:00.0']
    assert time.monotonic() - started < 5


OUTCOMES.append(('files', 'sysfs-vendor-fifo-and-oversized', 'no hang'))


def test_bounded_reader():
    assert gpu_bounds.read_regular('/proc/uptime', 4096)
    with pytest.raises(gpu_bounds.TooLarge):
        gpu_bounds.read_regular(__file__, 10)
    with pytest.raises(gpu_bounds.NotRegularFile, match=r'not a regular file \(a character device\)'):
        gpu_bounds.read_regular('/dev/zero', 10)
    assert gpu_bounds.clip('x' * 500) == 'x' * 200 + '... (300 characters cut)'
    assert gpu_bounds.quote('ab') == "'ab'"


@pytest.fixture(scope='module')
def archive(tmp_path_factory):
    return node_programs.build('health', tmp_path_factory.mktemp('health-archive'))


@pytest.fixture
def node(tmp_path, archive):
    (tmp_path / 'sys' / 'bus' / 'pci' / 'devices').mkdir(parents=True)
    smi = tmp_path / 'nvidia-smi'
    log = tmp_path / 'kern.log'
    log.write_text('')
    config = tmp_path / 'health.json'

    def run(*args, **kwargs):
        script = kwargs.get('script', 'cat "%s"\n' % SMALL_XML)
        smi.write_text('#!/bin/sh\n' + script)
        smi.chmod(0o755)
        settings_ = dict({'nvidia_smi_path': str(smi), 'kernel_log_path': str(log),
                          'sysfs_root': str(tmp_path / 'sys')}, **kwargs.get('config', {}))
        if 'raw_config' in kwargs:
            config.write_text(kwargs['raw_config'])
        elif not kwargs.get('keep_config'):
            config.write_text(json.dumps(settings_))
        cfg = kwargs.get('config_path', str(config))
        command = '%s %s --config %s %s' % (sys.executable, archive, cfg, ' '.join(args))
        command += kwargs.get('redirect', '')
        started = time.monotonic()
        proc = subprocess.run(['sh', '-c', command], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, check=False, timeout=kwargs.get('timeout', 60))
        run.elapsed = time.monotonic() - started
        return proc.returncode, proc.stdout, proc.stderr
    run.tmp = tmp_path
    run.config = config
    return run


def _report(out):
    return json.loads(out)


CONFIGS = _record('health-program-config', [
    # id, raw config text (None: a special file), expected exit, expected message of the unknown verdict
    ('config-nan-threshold', '{"thresholds": {"retired_pages_max": NaN}}', 3,
     'config %(cfg)s: thresholds.retired_pages_max is not a finite number (NaN, Infinity and numbers beyond the '
     'float range such as 1e999 are refused); accepted: a finite number', 'refused'),
    ('config-infinity-rdma-rate', '{"rdma": {"expected_rate_gbps": Infinity}}', 3,
     'config %(cfg)s: rdma.expected_rate_gbps is not a finite number (NaN, Infinity and numbers beyond the float '
     'range such as 1e999 are refused); accepted: a finite number', 'refused'),
    ('config-1e999-margin', '{"thresholds": {"temperature_margin_c": 1e999}}', 3,
     'config %(cfg)s: thresholds.temperature_margin_c is not a finite number (NaN, Infinity and numbers beyond the '
     'float range such as 1e999 are refused); accepted: a finite number', 'refused'),
    ('config-xid-ignore-string', '{"thresholds": {"xid_ignore": "79"}}', 3,
     "config %(cfg)s: threshold xid_ignore='79'; accepted: " + XID_ACCEPTED, 'refused'),
    ('config-thresholds-a-list', '{"thresholds": [1]}', 3,
     'config %(cfg)s: thresholds=[1]; accepted: a mapping of threshold names to values', 'refused'),
    ('config-nested-100000', '[' * 100000 + ']' * 100000, 3,
     'cannot read config %(cfg)s: nested too deeply', 'refused'),
    ('config-over-1-mib', '{"_pad": "%s"}' % ('x' * (1024 * 1024)), 3,
     'config %(cfg)s is larger than 1048576 bytes; not read', 'refused'),
    ('config-timeout-huge', '{"run_timeout": 1e400}', 3,
     'config %(cfg)s: run_timeout is not a finite number (NaN, Infinity and numbers beyond the float range such as '
     '1e999 are refused); accepted: a finite number', 'refused'),
    ('config-run-timeout-10-to-the-20', '{"run_timeout": 100000000000000000000}', 3,
     'config %(cfg)s: run_timeout must be a whole number >= 0 and <= 86400, got 100000000000000000000', 'refused'),
    ('config-path-with-nul', '{"kernel_log_path": "/var/log/kern.log\\u0000x"}', 3,
     "config %(cfg)s: kernel_log_path must be a path (a string without NUL) or null, got '/var/log/kern.log\\x00x'",
     'refused'),
])


@pytest.mark.parametrize('case, raw, code, message, outcome', CONFIGS, ids=[c[0] for c in CONFIGS])
def test_health_program_refuses_bad_numbers_in_its_config(node, case, raw, code, message, outcome):
    rc, out, err = node(raw_config=raw)
    report = _report(out)
    assert (rc, report['status']) == (code, 'unknown')
    assert report['issues'][0]['message'] == message % {'cfg': node.config}
    assert 'Traceback' not in err


COMMAND_LINE = _record('health-program-command-line', [
    ('thresholds-option-nan', "--thresholds '{\"retired_pages_max\": NaN}'",
     'bad command line: --thresholds: threshold retired_pages_max=nan; accepted: ' + ACCEPT_INT, 'refused'),
    ('thresholds-option-bare-string-xid', "--thresholds '{\"xid_ignore\": \"79\"}'",
     "bad command line: --thresholds: threshold xid_ignore='79'; accepted: " + XID_ACCEPTED, 'refused'),
    ('run-timeout-beyond-a-day', '--run-timeout 100000',
     'bad command line: --run-timeout must be >= 0 and <= 86400, got 100000', 'refused'),
])


@pytest.mark.parametrize('case, args, message, outcome', COMMAND_LINE, ids=[c[0] for c in COMMAND_LINE])
def test_health_program_command_line_numbers(node, case, args, message, outcome):
    rc, out, err = node(args)
    report = _report(out)
    assert (rc, report['status'], report['issues'][0]['message']) == (3, 'unknown', message)


def test_check_config_refuses_nan(node):
    node.config.write_text('{"thresholds": {"retired_pages_max": NaN}}')
    rc, out, err = node('--check-config', str(node.config), keep_config=True)
    assert rc == 3 and out == ''
    assert err.strip().endswith('thresholds.retired_pages_max is not a finite number (NaN, Infinity and numbers '
                                'beyond the float range such as 1e999 are refused); accepted: a finite number')


OUTCOMES.append(('health-program-config', 'check-config-nan', 'refused'))

SPECIAL_CONFIGS = _record('health-program-files', [
    # id, how the config path is made, extra arguments, expected message
    ('config-fifo', 'fifo', '', 'config %(cfg)s: not a regular file (a FIFO)', 'no hang'),
    ('config-fifo-with-run-timeout', 'fifo', '--run-timeout 20', 'config %(cfg)s: not a regular file (a FIFO)',
     'no hang'),
    ('config-dev-zero', '/dev/zero', '', 'config /dev/zero: not a regular file (a character device)', 'no hang'),
    ('config-directory', 'dir', '', 'config %(cfg)s: not a regular file (a directory)', 'no hang'),
])


@pytest.mark.parametrize('case, kind, extra, message, outcome', SPECIAL_CONFIGS, ids=[c[0] for c in SPECIAL_CONFIGS])
def test_health_program_config_special_files_never_block(node, case, kind, extra, message, outcome):
    path = kind
    if kind == 'fifo':
        path = str(node.tmp / 'health.fifo')
        os.mkfifo(path)
    elif kind == 'dir':
        path = str(node.tmp / 'confdir')
        os.mkdir(path)
    rc, out, err = node(extra, config_path=path, timeout=30)
    assert node.elapsed < 10
    report = _report(out)
    # Unknown (exit 3), never critical "nvidia-smi hung": the Slurm wrapper leaves the node alone.
    assert (rc, report['status']) == (3, 'unknown')
    assert report['issues'][0]['message'] == message % {'cfg': path}


PROGRAMS = _record('health-program-runs', [
    # id, nvidia-smi script, extra arguments, redirect, (exit, status), outcome
    ('leftover-child-holds-stdout', 'cat "%s"\nsleep 30 &\nexit 0\n' % SMALL_XML, '--run-timeout 30', '',
     (0, 'ok'), 'ok'),
    ('leftover-child-detached-subshell', 'cat "%s"\n(sleep 30 &)\nexit 0\n' % SMALL_XML, '', '', (0, 'ok'), 'ok'),
    ('stdout-flood-20mb-then-exit', 'head -c %d /dev/zero | tr "\\000" x\nexit 0\n' % BIG, '', '',
     (3, 'unknown'), 'unknown'),
    ('stdout-closed-ok-verdict', 'cat "%s"\n' % SMALL_XML, '--format summary', ' >&-', (0, None), 'ok'),
    ('stdout-and-stderr-closed-bad-command-line', 'cat "%s"\n' % SMALL_XML, '--timeout x', ' >&- 2>&-',
     (3, None), 'unknown'),
    ('stdout-closed-critical-verdict', 'echo "NVIDIA-SMI has failed because it couldn\'t communicate with the '
     'NVIDIA driver."\nexit 9\n', '', ' >&-', (2, None), 'critical'),
])


@pytest.mark.parametrize('case, script, extra, redirect, expected, outcome', PROGRAMS, ids=[c[0] for c in PROGRAMS])
def test_health_program_runs(node, case, script, extra, redirect, expected, outcome):
    rc, out, err = node(extra, script=script, redirect=redirect)
    assert node.elapsed < 15
    if expected[1] is None:  # stdout closed: the exit code is the verdict, and there is no traceback
        assert (rc, out) == (expected[0], '')
        assert 'Traceback' not in err
        return
    report = _report(out)
    assert (rc, report['status']) == expected
    if case == 'stdout-flood-20mb-then-exit':
        assert report['issues'][0]['message'] == (
            'nvidia-smi output unusable: nvidia-smi printed more than 16 MiB on stdout; the output was cut and is '
            'not judged')


def test_run_timeout_outside_nvidia_smi_is_unknown(tmp_path):
    cli = node_programs.import_front_end('health', tmp_path)
    runner = cli.Runner()
    runner.interrupted = ['/usr/bin/dmesg']
    report = cli.timeout_report({'runner': runner, 'run_timeout': 2}, NOW)
    assert (report['status'], report['exit_code'], report['issues'][0]['message']) == (
        'unknown', 3, 'health program ran out of its run timeout of 2s while running /usr/bin/dmesg; GPU health '
        'not determined')
    report = cli.timeout_report({'runner': None, 'run_timeout': 2}, NOW)
    assert report['issues'][0]['message'] == 'health program ran out of its run timeout of 2s; GPU health not determined'


OUTCOMES.append(('health-program-runs', 'run-timeout-outside-nvidia-smi', 'unknown'))


def test_module_runner_waits_for_the_command_not_for_its_output(module):
    script = ('cat "%s"\nsleep 30 &\necho $! > "%s"\nexit 0\n' % (SMALL_XML, module.tmp / 'child.pid')).encode()
    started = time.monotonic()
    how, result = module(script, timeout=20)
    assert time.monotonic() - started < 15
    assert (how, result['ansible_facts']['gpu']['health']['status']) == ('exit', 'ok')
    child = int((module.tmp / 'child.pid').read_text())
    for dummy in range(50):  # the leftover went with the command's process group
        if not os.path.exists('/proc/%d' % child) or 'State:\tZ' in open('/proc/%d/status' % child).read():
            break
        time.sleep(0.1)
    else:
        pytest.fail('leftover child %d still running' % child)


OUTCOMES.append(('gpu_facts', 'module-leftover-child', 'ok'))


def test_run_bounded_keeps_memory_flat():
    rc, out, err, state = timed_command.run_bounded(['sh', '-c', 'head -c 3000000 /dev/zero; exit 4'], 20,
                                                    max_bytes=1000)
    assert (rc, len(out), state['cut']) == (4, 1000, ['stdout'])
    assert err == b'\ngpucluster: stdout cut after 1000 bytes (the command printed more)'


OUTCOMES.append(('files', 'run-bounded-flood', 'no hang'))


# --- 6. Kernel-log lines as syslog daemons write them --------------------------------------------
KERN_NOW = calendar.timegm((2026, 1, 5, 10, 0, 0, 0, 0, 0))
RECENT_SYSLOG = time.strftime('%b %e %H:%M:%S', time.localtime(KERN_NOW - 300))
RECENT_ISO = time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(KERN_NOW - 300)) + '.123456+00:00'
OLD_ISO = time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(KERN_NOW - 86400 * 3)) + '.123456+00:00'
KERN_LOG = _record('kern.log', [
    # id, file text, expected (status, [(kind, code, pci)])
    ('debian-traditional-with-kernel-stamp', '%s gpu1 kernel: [ 1234.567890] %s\n' % (RECENT_SYSLOG, GENUINE),
     'critical'),
    ('debian-traditional-without-kernel-stamp', '%s gpu1 kernel: %s\n' % (RECENT_SYSLOG, GENUINE), 'critical'),
    ('ubuntu-rfc3339-with-kernel-stamp', '%s gpu1 kernel: [ 1234.567890] %s\n' % (RECENT_ISO, GENUINE), 'critical'),
    ('ubuntu-rfc3339-without-kernel-stamp', '%s gpu1 kernel: %s\n' % (RECENT_ISO, GENUINE), 'critical'),
    ('journal-short-precise', '%s.545053 gpu1 kernel: %s\n' % (RECENT_SYSLOG, GENUINE), 'critical'),
    ('journal-no-hostname', '%s kernel: %s\n' % (RECENT_SYSLOG, GENUINE), 'critical'),
    ('rfc3339-older-than-the-window', '%s gpu1 kernel: [ 1234.567890] %s\n' % (OLD_ISO, GENUINE), 'ok'),
    ('other-program-tagging-kernel-later', '%s gpu1 evil[7]: kernel: [ 1.0] %s\n' % (RECENT_SYSLOG, GENUINE), 'ok'),
    ('segfault-comm-shaped-like-a-stamp',
     '%s gpu1 kernel: [1.2] NVRM: Xid[4242]: segfault at 0 ip 0 sp 0 error 4 in a.out[400000+1000]\n'
     % RECENT_SYSLOG, 'ok'),
    ('two-kernel-stamps-only-one-stripped', '%s gpu1 kernel: [ 1.0] [ 2.0] %s\n' % (RECENT_SYSLOG, GENUINE), 'ok'),
])


@pytest.mark.parametrize('case, text, outcome', KERN_LOG, ids=[c[0] for c in KERN_LOG])
def test_kern_log_lines_read_like_dmesg(tmp_path, case, text, outcome):
    log = tmp_path / 'kern.log'
    log.write_text(text)
    kernel = gp.read_kernel_log_file(str(log), 3600, now=KERN_NOW)
    kernel['timed_out'] = False
    events = [(e['kind'], e['code'], e['pci']) for e in kernel['events']]
    if outcome == 'critical':
        assert events == [('xid', 79, '0000:81:00')]
        assert kernel['events'][0]['message'] == GENUINE
    else:
        assert events == []
    facts = gh.build_facts({'smi': {'found': True}, 'parsed': sx.parse_nvidia_smi_xml(open(SMALL_XML).read()),
                            'pci_addresses': None, 'kernel': kernel})
    assert facts['health']['status'] == outcome


PUBLIC = _record('kern.log-public', [
    # file in tests/unit/fixtures/kernel_log, (month, day, h, m, s) of its first line, message of its first line,
    # events [(kind, code, pci)]
    ('ironhide-issue97__kern.log_traditional_kernel-stamp.log', (10, 3, 14, 1, 56),
     "nvidia: module license 'NVIDIA' taints kernel.", [], 'ok'),
    ('rocm-hip-issue15__syslog_traditional_kernel-stamp_nvrm.log', (3, 24, 11, 53, 43),
     'NVRM: Your system is not currently configured to drive a VGA console', [], 'ok'),
    ('ogkm-issue402__kern.log_traditional_kernel-stamp.log', (11, 24, 22, 57, 55),
     'acer_wmi: Unknown function number - 4 - 0', [], 'ok'),
    ('nixpkgs-issue539036__journal_xid13_no-kernel-stamp.log', (7, 6, 20, 2, 59),
     'NVRM: Xid (PCI:0000:01:00): 13, pid=1773, name=.gala-wrapped, Graphics Exception: channel 0x00000005, Class '
     '0000c997, Offset 00000000, Data', [('xid', 13, '0000:01:00')], 'ok'),
    ('ogkm-issue1151__journal_rminitadapter_no-kernel-stamp.log', (5, 27, 16, 50, 10),
     'NVRM: GPU 0000:09:00.0: rm_init_adapter failed, device minor number 0', [('init_failed', None, '0000:09:00')],
     'critical'),
    ('bottlerocket-pr2900__journal_short-precise.log', (3, 14, 10, 12, 31),
     'x86/PAT: Configuration [0-7]: WB  WC  UC- UC  WB  WP  UC- WT  ', [], 'ok'),
    ('bazzite-issue4449__journal_no-hostname.log', (3, 21, 21, 42, 1),
     'NVRM: GPU0 _kgspProcessRpcEvent: Attempted to process RPC event from GPU0: 0x101a '
     '(PFM_REQ_HNDLR_STATE_SYNC_CALLBACK) during bootup without API lock', [], 'ok'),
])


@pytest.mark.parametrize('name, stamp, message, events, outcome', PUBLIC, ids=[c[0] for c in PUBLIC])
def test_public_kern_log_excerpts(name, stamp, message, events, outcome):
    with open(os.path.join(OWN, name)) as handle:
        text = handle.read()
    month, day, hour, minute, second = stamp
    # "now" a day after the excerpt's first line (local time, as syslog writes it): every line is recent.
    first = time.mktime((2025, month, day, hour, minute, second, 0, 0, -1))
    epoch, mono, msg = kl.split_prefix(text.split('\n')[0], now=first + 86400)
    assert (epoch, mono, msg) == (first, None, message)
    found = kl.parse_kernel_log(text, now=first + 86400)
    assert [(e['kind'], e['code'], e['pci']) for e in found] == events
    kernel = {'source': 'file', 'events': found, 'error': None}
    facts = gh.build_facts({'smi': {'found': True}, 'parsed': sx.parse_nvidia_smi_xml(open(SMALL_XML).read()),
                            'pci_addresses': None, 'kernel': kernel})
    assert facts['health']['status'] == outcome


def test_public_excerpts_are_listed_in_the_index():
    with open(os.path.join(OWN, 'README.md')) as handle:
        index = handle.read()
    files = sorted(f for f in os.listdir(OWN) if f.endswith('.log'))
    assert files == sorted(c[0] for c in PUBLIC)
    for name in files:
        assert '`%s` | https://github.com/' % name in index, name


RFC3339_RECORDED_STAMP = '2013-10-03T12:28:00.429271-06:00'  # logstash-patterns-core#209 (rsyslog RSYSLOG_FileFormat)


def test_rfc3339_stamp_as_rsyslog_writes_it():
    # Assembled (see the fixture README): the recorded rsyslog stamp, a host, the recorded Xid 13 message.
    line = ('%s gaming kernel: [ 1234.567890] NVRM: Xid (PCI:0000:01:00): 13, pid=1773, name=.gala-wrapped, '
            'Graphics Exception: channel 0x00000005' % RFC3339_RECORDED_STAMP)
    epoch, mono, msg = kl.split_prefix(line)
    assert epoch == calendar.timegm((2013, 10, 3, 18, 28, 0, 0, 0, 0)) + 0.429271
    assert mono is None and msg.startswith('NVRM: Xid (PCI:0000:01:00): 13,')


OUTCOMES.append(('kern.log-public', 'rfc3339-recorded-stamp', 'ok'))

JOURNAL = _record('journal', [
    # id, __REALTIME_TIMESTAMP value, epoch read
    ('journal-stamp-superscript-two', '\u00b2', None, 'critical'),
    ('journal-stamp-arabic-indic-digits', '\u0663\u0664', None, 'critical'),
    ('journal-stamp-boolean', True, None, 'critical'),
    ('journal-stamp-18-digits', '1' * 18, None, 'critical'),
    ('journal-stamp-ascii', '1767607200000000', 1767607200.0, 'critical'),
])


@pytest.mark.parametrize('case, stamp, epoch, outcome', JOURNAL, ids=[c[0] for c in JOURNAL])
def test_journal_stamps_never_raise(case, stamp, epoch, outcome):
    entry = {'_TRANSPORT': 'kernel', 'MESSAGE': GENUINE, '__REALTIME_TIMESTAMP': stamp}
    events, skipped = kl.parse_journal_json(json.dumps(entry))
    assert (skipped, [(e['kind'], e['code'], e['epoch']) for e in events]) == (0, [('xid', 79, epoch)])
    kernel = {'source': 'journalctl', 'events': events, 'error': None}
    facts = gh.build_facts({'smi': {'found': True}, 'parsed': sx.parse_nvidia_smi_xml(open(SMALL_XML).read()),
                            'pci_addresses': None, 'kernel': kernel})
    assert facts['health']['status'] == outcome


def test_journal_line_nested_too_deeply_is_skipped():
    assert kl.parse_journal_json('[' * 100000) == ([], 1)


OUTCOMES.append(('journal', 'journal-line-nested-100000', 'ok'))


# --- 7. Unbounded inputs: every message bounded ---------------------------------------------------
def test_failure_text_of_20mb_is_bounded():
    class Run(object):
        def __call__(self, argv, timeout):
            return 9, '', "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver " + 'x' * BIG
    smi, parsed = gp.run_nvidia_smi(Run(), '/usr/bin/nvidia-smi')
    facts = gh.build_facts({'smi': smi, 'parsed': parsed, 'pci_addresses': ['0000:81:00.0'], 'kernel': None})
    assert facts['health']['status'] == 'critical'
    assert all(len(i['message']) <= gh.MESSAGE_MAX + 40 for i in facts['health']['issues'])


def test_prometheus_labels_of_a_20mb_uuid_are_bounded(real_fixtures_dir):
    facts = judge(_head_first_big_uuid(_read(real_fixtures_dir, DUAL)), pci=BUS, expected=2)
    text = gpu_prom.render(facts, NOW)
    assert max(len(line) for line in text.split('\n')) < 2000
    info = [line for line in text.split('\n') if line.startswith('gpucluster_gpu_info')]
    assert len(info) == 2 and len(set(info)) == 2  # the cut values stay distinct series (index label)


OUTCOMES.extend([('unbounded', 'failure-text-20mb', 'critical'), ('unbounded', 'prometheus-uuid-20mb', 'critical')])


# --- 8. Properties (hypothesis) -------------------------------------------------------------------
XMLSAFE = st.text(alphabet=st.characters(blacklist_categories=('Cs', 'Cc')), max_size=60).map(
    lambda t: t.replace('&', '&amp;').replace('<', '&lt;').replace('>', '&gt;'))


@FUZZ
@given(name=st.one_of(XMLSAFE, st.sampled_from(('GPU is lost', '[GPU is lost]', '[GPU requires reset]',
                                                'gpu requires reset', ' [ GPU IS LOST ] '))))
def test_property_a_process_name_never_changes_a_verdict(real_fixtures_dir, name):
    clean = _read(real_fixtures_dir, DUAL)
    base = judge(clean)
    facts = judge(_vgpu(_names(clean, name), 'guest_driver_version', name))
    assert verdict(facts) == verdict(base)
    assert [d['error_states'] for d in facts['devices']] == [d['error_states'] for d in base['devices']]


NUMBER_NAMES = [t[0] for t in gh.THRESHOLDS if t[1] in ('int', 'float')]


@FUZZ
@given(name=st.sampled_from(NUMBER_NAMES), value=st.sampled_from((float('nan'), float('inf'), float('-inf'), 1e999)))
def test_property_non_finite_thresholds_are_always_refused(name, value):
    with pytest.raises(gh.ThresholdError, match='threshold %s=' % name):
        gh.merge_thresholds({name: value})
    assert health_threshold_errors({name: value})[0].startswith('health_check_thresholds: threshold %s=' % name)


@FUZZ
@given(overrides=st.dictionaries(st.sampled_from([t[0] for t in gh.THRESHOLDS]),
                                 st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=5),
                                           st.lists(st.one_of(st.integers(), st.text(max_size=3)), max_size=3)),
                                 max_size=4))
def test_property_merged_thresholds_are_finite_and_in_range(overrides):
    try:
        merged = gh.merge_thresholds(overrides)
    except gh.ThresholdError:
        return
    for name, kind, _default, choices, limits, _doc in gh.THRESHOLDS:
        value = merged[name]
        if kind in ('int', 'float'):
            assert not isinstance(value, bool) and math.isfinite(value) and limits[0] <= value <= limits[1]
        elif kind == 'list':
            assert all(isinstance(c, int) and limits[0] <= c <= limits[1] for c in value)
        else:
            assert value in choices


PREFIXES = st.one_of(
    st.text(alphabet=st.characters(blacklist_characters='\n', blacklist_categories=('Cs',)), max_size=40),
    st.sampled_from(('Jan  5 09:55:00 gpu1 kernel: ', 'Jan  5 09:55:00 gpu1 kernel: [ 12.5] ', '[ 12.5] ',
                     '2026-01-05T09:55:00.123+00:00 gpu1 kernel: ', '4,1,2,-;', 'kern  :warn  : [ 1.0] ',
                     '\u00b2 ', '[\u00b2.\u00b2] ', 'Jan  5 09:55:00.5 kernel: [ 1.0] ')),
)


@FUZZ
@given(prefix=PREFIXES)
def test_property_kernel_log_random_prefixes(prefix):
    # Any prefix: no exception, and an event only ever carries the line's own code and address.
    line = prefix + GENUINE
    kl.split_prefix(line, now=NOW)
    for event in kl.parse_kernel_log(line, now=NOW):
        assert (event['kind'], event['code'], event['pci']) == ('xid', 79, '0000:81:00')


@FUZZ
@given(data=st.binary(max_size=400))
def test_property_xml_parser_never_raises_anything_else(data):
    try:
        parsed = sx.parse_nvidia_smi_xml(b'<nvidia_smi_log><gpu id="00000000:81:00.0">' + data + b'</gpu></nvidia_smi_log>')
    except sx.GpuXmlError:
        return
    json.dumps(parsed)


# --- Counts for the issue note ------------------------------------------------------------------
def test_case_count_by_outcome():
    counts = dict((kind, 0) for kind in KINDS)
    for dummy_table, dummy_case, kind in OUTCOMES:
        assert kind in counts, kind
        counts[kind] += 1
    names = [(table, case) for table, case, _kind in OUTCOMES]
    assert len(names) == len(set(names))
    assert all(counts[kind] > 0 for kind in KINDS), counts
    assert len(OUTCOMES) >= 80, counts
    print('issue 27 GPU robustness cases by outcome: %s (total %d)'
          % (', '.join('%s %d' % (k, counts[k]) for k in KINDS), len(OUTCOMES)))
