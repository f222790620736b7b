# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os

import pytest

from ansible_collections.gpucluster.core.plugins.module_utils import gpu_probe as gp

XML = ('<nvidia_smi_log><driver_version>570.1</driver_version><attached_gpus>1</attached_gpus>'
       '<gpu id="00000000:41:00.0"><uuid>GPU-a</uuid><pci><pci_bus_id>00000000:41:00.0</pci_bus_id></pci></gpu>'
       '</nvidia_smi_log>')


def make_sysfs(root, devices):
    """devices: {address: (vendor, class)}"""
    base = root / 'bus' / 'pci' / 'devices'
    base.mkdir(parents=True)
    for address, (vendor, pci_class) in devices.items():
        dev = base / address
        dev.mkdir()
        (dev / 'vendor').write_text(vendor + '\n')
        (dev / 'class').write_text(pci_class + '\n')
    return str(root)


def test_pci_count_counts_nvidia_display_controllers_only(tmp_path):
    root = make_sysfs(tmp_path, {
        '0000:41:00.0': ('0x10de', '0x030200'),  # 3D controller (data-centre GPU)
        '0000:81:00.0': ('0x10de', '0x030000'),  # VGA controller
        '0000:05:00.0': ('0x10de', '0x068000'),  # NVSwitch bridge: not a GPU
        '0000:41:00.1': ('0x10de', '0x040300'),  # HDMI audio function of a GPU
        '0000:3b:00.0': ('0x15b3', '0x020700'),  # Mellanox HCA
        '0000:00:02.0': ('0x8086', '0x030000'),  # Intel graphics
    })
    (tmp_path / 'bus' / 'pci' / 'devices' / 'broken').mkdir()
    assert gp.nvidia_pci_addresses(root) == ['0000:41:00.0', '0000:81:00.0']


def test_pci_count_none_without_sysfs(tmp_path):
    assert gp.nvidia_pci_addresses(str(tmp_path / 'missing')) is None


class FakeRunner:
    def __init__(self, answers):
        self.answers = answers
        self.calls = []

    def __call__(self, argv, timeout):
        self.calls.append(list(argv))
        key = os.path.basename(argv[0]) + ' ' + ' '.join(argv[1:])
        for prefix, answer in self.answers.items():
            if key.startswith(prefix):
                if isinstance(answer, Exception):
                    raise answer
                return answer
        raise AssertionError('unexpected command %s' % key)


@pytest.fixture
def bindir(tmp_path, monkeypatch):
    directory = tmp_path / 'bin'
    directory.mkdir()
    monkeypatch.setenv('PATH', str(directory))
    monkeypatch.setattr(gp, 'EXTRA_BIN_DIRS', ())

    def add(name):
        path = directory / name
        path.write_text('#!/bin/sh\n')
        path.chmod(0o755)
        return str(path)
    return add


def test_kernel_log_from_journal(bindir):
    bindir('journalctl')
    bindir('dmesg')
    run = FakeRunner({
        'journalctl -k -b -q --no-pager -n 1': (0, '2026-01-05T09:00:00+0000 node1 kernel: Linux version\n', ''),
        'journalctl -k -q --no-pager -o json --since -120min':
            (0, '{"_TRANSPORT": "kernel", "SYSLOG_FACILITY": "0", "__REALTIME_TIMESTAMP": "1767607140000000", '
                '"MESSAGE": "NVRM: Xid (PCI:0000:41:00): 79, pid=1, off the bus"}\n', ''),
    })
    result = gp.read_kernel_log(run, 120, now=1767607200.0)
    assert result['source'] == 'journalctl' and result['error'] is None
    assert [e['code'] for e in result['events']] == [79]


def test_kernel_log_falls_back_to_dmesg_when_the_journal_has_no_kernel_messages(bindir):
    bindir('journalctl')
    bindir('dmesg')
    run = FakeRunner({
        'journalctl -k -b': (0, '', ''),
        'dmesg': (0, '[ 19000.0] NVRM: Xid (PCI:0000:41:00): 48, pid=1, DBE\n[ 10.0] NVRM: Xid (PCI:0000:41:00): 79, x\n',
                  ''),
    })
    result = gp.read_kernel_log(run, 120, uptime=20000.0)
    assert result['source'] == 'dmesg'
    assert [e['code'] for e in result['events']] == [48]  # the boot-time Xid 79 is outside the window


def test_kernel_log_not_readable(bindir):
    bindir('journalctl')
    bindir('dmesg')
    run = FakeRunner({
        'journalctl -k -b': (0, '', ''),
        'dmesg': (1, '', 'dmesg: read kernel buffer failed: Operation not permitted\n'),
    })
    result = gp.read_kernel_log(run, 120)
    assert result['source'] is None and result['events'] == []
    assert 'Operation not permitted' in result['error'] and 'no kernel messages in the journal' in result['error']


def test_kernel_log_from_file(tmp_path):
    log = tmp_path / 'kern.log'
    # A file's undated line never counts as recent; a dated one within the window does.
    log.write_text('NVRM: Xid (PCI:0000:41:00): 79, pid=1, undated\n'
                   '2026-01-05T09:59:00,000000+00:00 NVRM: Xid (PCI:0000:41:00): 94, pid=1, x\n')
    result = gp.read_kernel_log(None, 120, kernel_log_path=str(log), now=1767607200.0)
    assert result['source'] == 'file' and [e['code'] for e in result['events']] == [94]
    missing = gp.read_kernel_log(None, 120, kernel_log_path=str(tmp_path / 'nope'))
    assert missing['error'].startswith('cannot read')


def test_run_nvidia_smi_outcomes():
    ok = gp.run_nvidia_smi(FakeRunner({'nvidia-smi -q -x': (0, XML, '')}), '/usr/bin/nvidia-smi')
    assert ok[0]['failure'] is None and ok[1]['count'] == 1
    timeout = gp.run_nvidia_smi(FakeRunner({'nvidia-smi': (None, '', '')}), '/usr/bin/nvidia-smi', timeout=7)
    assert timeout[0]['failure']['reason'] == 'timeout' and timeout[0]['failure']['severity'] == 'critical'
    cannot = gp.run_nvidia_smi(FakeRunner({'nvidia-smi': OSError('Permission denied')}), '/usr/bin/nvidia-smi')
    assert cannot[0]['failure']['reason'] == 'not_executable' and cannot[0]['failure']['severity'] == 'unknown'
    garbled = gp.run_nvidia_smi(FakeRunner({'nvidia-smi': (0, XML[:60], '')}), '/usr/bin/nvidia-smi')
    assert garbled[1] is None and 'not well-formed' in garbled[0]['xml_error']
    failed = gp.run_nvidia_smi(FakeRunner({'nvidia-smi': (9, 'No devices were found\n', '')}), '/usr/bin/nvidia-smi')
    assert failed[0]['failure']['reason'] == 'no_devices' and failed[1] is None
    assert gp.run_nvidia_smi(None, None) == ({'found': False, 'path': None, 'failure': None, 'xml_error': None}, None)


def test_collect_without_gpu_reads_no_kernel_log(tmp_path, bindir):
    sysfs = make_sysfs(tmp_path / 'sys', {'0000:00:02.0': ('0x8086', '0x030000')})
    run = FakeRunner({})
    snapshot = gp.collect(run, sysfs_root=sysfs)
    assert snapshot['smi']['found'] is False and snapshot['pci_addresses'] == [] and snapshot['kernel'] is None
    assert run.calls == []


def test_collect_configured_path_that_does_not_exist(tmp_path, bindir):
    snapshot = gp.collect(FakeRunner({}), nvidia_smi_path=str(tmp_path / 'nvidia-smi'),
                          sysfs_root=make_sysfs(tmp_path / 'sys', {}))
    assert snapshot['smi']['found'] is False and snapshot['smi']['path'] == str(tmp_path / 'nvidia-smi')


def test_collect_with_gpu(tmp_path, bindir):
    smi = bindir('nvidia-smi')
    sysfs = make_sysfs(tmp_path / 'sys', {'0000:41:00.0': ('0x10de', '0x030200')})
    log = tmp_path / 'kern.log'
    log.write_text('')
    snapshot = gp.collect(FakeRunner({'nvidia-smi -q -x': (0, XML, '')}), sysfs_root=sysfs,
                          kernel_log_path=str(log))
    assert snapshot['smi']['path'] == smi and snapshot['parsed']['count'] == 1
    assert snapshot['pci_addresses'] == ['0000:41:00.0'] and snapshot['kernel']['source'] == 'file'
