# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVLink fabric state (gpu_fabric) and its wiring in the node health program, against the real recordings.

Which recordings carry a fabric state: the ``nvidia-smi -q`` texts of Hopper GPUs (8x H100 HGX with
drivers 535.161/535.183, single H100/H200 with 590) report ``Completed``/``Success``; every other text
recording and every ``-q -x`` XML recording reads ``N/A`` (A100 SXM4 included) or has no fabric section.
No recording shows a fabric that is not ready: those states are set in a copy of a real recording.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import glob
import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpucluster.core.plugins.module_utils import gpu_fabric

# The installed program (fixture) of the health program's tests.
from test_gpu_health_cli import program  # noqa: F401  pylint: disable=unused-import

HGX_535 = '03_nvidia_smi_text/gpud__nvidia-smi-query.535.183.01.out.0.valid.q.txt'
HGX_535_161 = '03_nvidia_smi_text/gpud__nvidia-smi-query.535.161.08.out.0.valid.q.txt'
H100_590 = '03_nvidia_smi_text/uozd__linux-h100-80gb-hbm3__590.48.01__idle__nvidia-smi-q.txt'
L40S = '03_nvidia_smi_text/uozd__linux-l40s__595.80__idle__nvidia-smi-q.txt'
# A real two-GPU recording whose GPUs report the (N/A) fabric fields and which the program judges ok.
TWO_GPU_XML = '01_nvidia_smi_xml/telegraf__dual_a5000-v13.xml'


def _read(root, name):
    with open(os.path.join(root, name), encoding='utf-8') as handle:
        return handle.read()


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as handle:
        handle.write(text)


def _pci(sysfs, address, vendor, pci_class):
    _write(os.path.join(sysfs, 'bus', 'pci', 'devices', address, 'vendor'), vendor + '\n')
    _write(os.path.join(sysfs, 'bus', 'pci', 'devices', address, 'class'), pci_class + '\n')


def _nvswitches(sysfs, count=4):
    for number in range(count):
        _pci(sysfs, '0000:%02x:00.0' % (0x05 + number), '0x10de', '0x068000')


# ---------------------------------------------------------------- parsers on the real recordings

@pytest.mark.parametrize('name', [HGX_535, HGX_535_161])
def test_eight_gpu_hgx_with_a_registered_fabric(real_fixtures_dir, name):
    gpus = gpu_fabric.fabric_from_q_text(_read(real_fixtures_dir, name))
    assert len(gpus) == 8
    assert {(g['state'], g['status']) for g in gpus} == {('Completed', 'Success')}
    assert gpu_fabric.fabric_findings(gpus, nvswitch_system=True) == []


def test_health_subsection_does_not_override_the_state(real_fixtures_dir):
    # 590 drivers add Fabric / Health / Summary ... below State and Status.
    gpus = gpu_fabric.fabric_from_q_text(_read(real_fixtures_dir, H100_590))
    assert gpus == [{'gpu': '00000000:00:09.0', 'state': 'Completed', 'status': 'Success'}]


def test_na_fabric_is_not_judged(real_fixtures_dir):
    gpus = gpu_fabric.fabric_from_q_text(_read(real_fixtures_dir, L40S))
    assert [(g['state'], g['status']) for g in gpus] == [('N/A', 'N/A')]
    assert gpu_fabric.fabric_findings(gpus, nvswitch_system=False) == []
    # A GPU that reports no fabric state (before Hopper) is left to the Fabric Manager check.
    assert gpu_fabric.fabric_findings(gpus, nvswitch_system=True) == []


def test_every_recorded_q_output_parses_one_entry_per_gpu(real_fixtures_dir):
    files = sorted(glob.glob(os.path.join(real_fixtures_dir, '03_nvidia_smi_text', '*q.txt')))
    assert len(files) >= 20
    completed = 0
    for path in files:
        with open(path, encoding='utf-8', errors='replace') as handle:
            text = handle.read()
        gpus = gpu_fabric.fabric_from_q_text(text)
        headers = [line for line in text.splitlines() if gpu_fabric._GPU_HEADER_RE.match(line)]  # pylint: disable=protected-access
        assert len(gpus) == len(headers), path
        for gpu in gpus:
            assert gpu['state'] in (None, 'N/A', 'Completed'), (path, gpu)
        completed += sum(g['state'] == 'Completed' for g in gpus)
        assert gpu_fabric.fabric_findings(gpus, nvswitch_system=True) == [] or not gpus, path
    assert completed >= 16  # two 8-GPU HGX H100 recordings, and the single H100/H200 ones


def test_xml_recordings_report_na_or_nothing(real_fixtures_dir):
    files = sorted(glob.glob(os.path.join(real_fixtures_dir, '**', '*.xml'), recursive=True))
    with_fabric = 0
    for path in files:
        with open(path, 'rb') as handle:
            data = handle.read()
        if b'<nvidia_smi_log' not in data:
            continue
        gpus = gpu_fabric.fabric_from_xml(data)
        assert gpus, path
        with_fabric += sum(g['state'] is not None for g in gpus)
        assert all(g['state'] in (None, 'N/A') for g in gpus), path
        # The NVSwitch judgement never flags a GPU that reports no fabric state.
        assert gpu_fabric.fabric_findings(gpus, nvswitch_system=True) == [], path
    assert with_fabric >= 10


def _q(state, status):
    return ('GPU 00000000:18:00.0\n    Product Name : NVIDIA H100 80GB HBM3\n    Fabric\n'
            '        State                                          : %s\n'
            '        Status                                         : %s\n'
            '        Health\n            Summary : Healthy\n    Processes : None\n' % (state, status))


@pytest.mark.parametrize('state, status, expect', [
    ('In Progress', 'N/A', 'NVLink fabric state In Progress: not ready'),
    ('Not Started', 'N/A', 'NVLink fabric state Not Started'),
    ('Completed', 'NVML_ERROR_INSUFFICIENT_RESOURCES', 'finished with status NVML_ERROR_INSUFFICIENT_RESOURCES'),
])
def test_not_ready_fabric_is_critical_on_nvswitch_systems(state, status, expect):
    gpus = gpu_fabric.fabric_from_q_text(_q(state, status))
    assert gpus == [{'gpu': '00000000:18:00.0', 'state': state, 'status': status}]
    assert gpu_fabric.fabric_findings(gpus, nvswitch_system=False) == []
    findings = gpu_fabric.fabric_findings(gpus, nvswitch_system=True)
    assert len(findings) == 1
    assert findings[0]['severity'] == 'critical' and expect in findings[0]['message']
    assert '00000000:18:00.0' in findings[0]['message']


def test_no_gpus_on_an_nvswitch_system_is_critical():
    assert gpu_fabric.fabric_findings([], nvswitch_system=True)[0]['severity'] == 'critical'
    assert gpu_fabric.fabric_findings([], nvswitch_system=False) == []


def test_old_drivers_without_a_fabric_section():
    gpus = gpu_fabric.fabric_from_q_text('GPU 00000000:3B:00.0\n    Product Name : Tesla V100\n')
    assert gpus == [{'gpu': '00000000:3B:00.0', 'state': None, 'status': None}]
    assert gpu_fabric.fabric_findings(gpus, nvswitch_system=True) == []


def test_xml_states_and_bad_xml():
    doc = ('<nvidia_smi_log><gpu id="00000000:18:00.0"><fabric><state>Completed</state><status>Success</status>'
           '<cliqueId>0</cliqueId></fabric></gpu><gpu id="00000000:2A:00.0"><fabric><state>In Progress</state>'
           '<status>N/A</status></fabric></gpu></nvidia_smi_log>')
    gpus = gpu_fabric.fabric_from_xml(doc)
    findings = gpu_fabric.fabric_findings(gpus, nvswitch_system=True)
    assert [f['gpu'] for f in findings] == ['00000000:2A:00.0']
    with pytest.raises(ValueError, match='not well-formed'):
        gpu_fabric.fabric_from_xml('<nvidia_smi_log><gpu>')


# ---------------------------------------------------------------- NVSwitches, Fabric Manager, issues, metrics

def test_nvswitches_are_found_by_pci_class(tmp_path):
    sysfs = str(tmp_path)
    _nvswitches(sysfs, 2)
    _pci(sysfs, '0000:18:00.0', '0x10de', '0x030200')  # an H100
    _pci(sysfs, '0000:18:00.1', '0x10de', '0x040300')  # another function of a board
    _pci(sysfs, '0000:20:00.0', '0x15b3', '0x068000')  # not NVIDIA's
    assert gpu_fabric.nvswitch_addresses(sysfs) == ['0000:05:00.0', '0000:06:00.0']
    assert gpu_fabric.nvswitch_addresses(str(tmp_path / 'missing')) == []


class FakeRun(object):
    def __init__(self, answer):
        self.answer = answer
        self.calls = []

    def __call__(self, argv, timeout):
        self.calls.append((argv, timeout))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


@pytest.mark.parametrize('answer, expected', [
    ((0, 'active\n', ''), (True, 'active')),
    ((3, 'inactive\n', ''), (False, 'inactive')),
    ((3, 'failed\n', ''), (False, 'failed')),
    ((3, 'activating\n', ''), (False, 'activating')),
    ((None, '', ''), (None, 'systemctl is-active gave no answer within 10s')),
    ((1, '', 'Failed to connect to bus: No such file or directory\n'),
     (None, 'systemctl is-active exited 1: Failed to connect to bus: No such file or directory')),
    (OSError(13, 'Permission denied'), (None, 'cannot run /bin/systemctl: [Errno 13] Permission denied')),
])
def test_fabric_manager_state(answer, expected):
    run = FakeRun(answer)
    assert gpu_fabric.fabric_manager_state(run, systemctl='/bin/systemctl') == expected
    assert run.calls == [(['/bin/systemctl', 'is-active', 'nvidia-fabricmanager.service'], 10)]


def test_no_systemctl(monkeypatch):
    monkeypatch.setattr(gpu_fabric, 'find_executable', lambda name: None)
    assert gpu_fabric.fabric_manager_state(FakeRun((0, 'active', ''))) == (None, 'systemctl not found')


DEVICES = [{'index': 0, 'uuid': 'GPU-a', 'pci_bus_id': '00000000:18:00.0'},
           {'index': 1, 'uuid': 'GPU-b', 'pci_bus_id': '00000000:2A:00.0'}]
GPUS = [{'gpu': '00000000:18:00.0', 'state': 'Completed', 'status': 'Success'},
        {'gpu': '00000000:2a:00.0', 'state': 'In Progress', 'status': 'N/A'}]


def test_issues_and_samples_without_nvswitches_are_empty():
    assert gpu_fabric.health_issues([], GPUS, DEVICES, (False, 'inactive')) == []
    assert gpu_fabric.prometheus_samples([], GPUS, DEVICES, (False, 'inactive')) == []
    assert gpu_fabric.render_prometheus([]) == ''


def test_issues_name_the_gpu_index_and_fabric_manager():
    issues = gpu_fabric.health_issues(['0000:05:00.0'], GPUS, DEVICES, (False, 'failed'))
    assert [(i['gpu'], i['check'], i['severity']) for i in issues] == [
        (None, 'fabric_manager', 'critical'), (1, 'gpu_fabric', 'critical')]
    assert 'nvidia-fabricmanager.service is failed on a node with 1 NVSwitches' in issues[0]['message']
    unknown = gpu_fabric.health_issues(['0000:05:00.0'], None, DEVICES, (None, 'systemctl not found'))
    assert [(i['check'], i['severity']) for i in unknown] == [('fabric_manager', 'warning')]


def test_samples_and_exposition():
    samples = gpu_fabric.prometheus_samples(['0000:05:00.0', '0000:06:00.0'], GPUS, DEVICES, (True, 'active'))
    text = gpu_fabric.render_prometheus(samples)
    assert text == (
        '# HELP gpucluster_nvswitches %s\n# TYPE gpucluster_nvswitches gauge\ngpucluster_nvswitches 2\n'
        '# HELP gpucluster_fabric_manager_active %s\n# TYPE gpucluster_fabric_manager_active gauge\n'
        'gpucluster_fabric_manager_active 1\n'
        '# HELP gpucluster_gpu_fabric_ready %s\n# TYPE gpucluster_gpu_fabric_ready gauge\n'
        'gpucluster_gpu_fabric_ready{gpu="0",uuid="GPU-a"} 1\ngpucluster_gpu_fabric_ready{gpu="1",uuid="GPU-b"} 0\n'
        % tuple(help_text for _name, _kind, help_text in gpu_fabric.METRICS))
    # Fabric Manager's state unknown: no sample (not a false 0); GPUs without a fabric state: none either.
    na = [dict(g, state='N/A') for g in GPUS]
    assert [s[0] for s in gpu_fabric.prometheus_samples(['x'], na, DEVICES, (None, 'x'))] == ['gpucluster_nvswitches']


# ---------------------------------------------------------------- the health program on an NVSwitch node

def _fabric_node(program, real_fixtures_dir, states, manager):  # pylint: disable=redefined-outer-name
    """The program's node turned into an NVSwitch node: a real two-GPU recording with the fabric fields
    of its GPUs set to ``states`` [(state, status)] in document order, four NVSwitches on the PCI bus, a
    systemctl that prints ``manager`` (None: systemctl gives no answer in time)."""
    xml = _read(real_fixtures_dir, TWO_GPU_XML)
    assert xml.count('<state>N/A</state>') == 2 and xml.count('<status>N/A</status>') == 2
    head, *blocks = xml.split('<fabric>')
    assert len(blocks) == len(states) == 2
    xml = head + ''.join(
        '<fabric>' + block.replace('<state>N/A</state>', '<state>%s</state>' % state, 1).replace(
            '<status>N/A</status>', '<status>%s</status>' % status, 1)
        for block, (state, status) in zip(blocks, states))
    smi_xml = program.tmp / 'hgx.xml'
    smi_xml.write_text(xml)
    (program.tmp / 'nvidia-smi').write_text('#!/bin/sh\ncat "%s"\n' % smi_xml)
    _nvswitches(str(program.tmp / 'sys'))
    for address in ('0000:81:00.0', '0000:c1:00.0'):
        _pci(str(program.tmp / 'sys'), address, '0x10de', '0x030200')
    bindir = program.tmp / 'bin'
    bindir.mkdir()
    systemctl = bindir / 'systemctl'
    if manager is None:
        systemctl.write_text('#!/bin/sh\nexec sleep 30\n')
    else:
        systemctl.write_text('#!/bin/sh\necho "%s" >> "%s"\necho %s\n[ %s = active ]\n'
                             % ('$*', program.tmp / 'systemctl.calls', manager, manager))
    systemctl.chmod(0o755)
    with open(program.config) as handle:
        config = json.load(handle)
    config['expected_count'] = 2
    with open(program.config, 'w') as handle:
        json.dump(config, handle)


def _run(program, *args):  # pylint: disable=redefined-outer-name
    env = dict(os.environ, PATH='%s:%s' % (program.tmp / 'bin', os.environ.get('PATH', '')))
    code = 'import sys; sys.path.insert(0, %r); from gpucluster_health.cli import main; sys.exit(main())' % str(
        program.tmp / 'lib')
    target = program.tmp / 'textfile'
    target.mkdir(exist_ok=True)
    proc = subprocess.run([sys.executable, '-c', code, '--config', program.config, '--textfile', str(target)]
                          + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False,
                          universal_newlines=True, env=env)
    return proc.returncode, json.loads(proc.stdout), proc.stderr, (target / 'gpucluster_health.prom').read_text()


def test_registered_fabric_and_active_manager_is_ok(program, real_fixtures_dir):  # pylint: disable=redefined-outer-name
    _fabric_node(program, real_fixtures_dir, [('Completed', 'Success')] * 2, 'active')
    rc, report, err, text = _run(program)
    assert (rc, report['status'], report['issues']) == (0, 'ok', []), err
    assert (program.tmp / 'systemctl.calls').read_text() == 'is-active nvidia-fabricmanager.service\n'
    assert 'gpucluster_nvswitches 4\n' in text and 'gpucluster_fabric_manager_active 1\n' in text
    ready = [line for line in text.splitlines() if line.startswith('gpucluster_gpu_fabric_ready{')]
    assert [line.split('{')[1].split(',')[0] for line in ready] == ['gpu="0"', 'gpu="1"']
    assert all(line.endswith(' 1') for line in ready)


def test_fabric_not_ready_and_manager_failed_are_critical(program, real_fixtures_dir):  # pylint: disable=redefined-outer-name
    # GPU 0 (00000000:81:00.0, first in the document) not ready, GPU 1 ready.
    _fabric_node(program, real_fixtures_dir, [('In Progress', 'N/A'), ('Completed', 'Success')], 'failed')
    rc, report, _err, text = _run(program)
    assert (rc, report['status']) == (2, 'critical')
    assert [(i['gpu'], i['check'], i['severity']) for i in report['issues']] == [
        (None, 'fabric_manager', 'critical'), (0, 'gpu_fabric', 'critical')]
    # The GPU facts keep the GPUs' own verdict; the node's and the GPU's metrics carry the fabric's.
    assert report['gpu']['health']['status'] == 'ok'
    assert 'gpucluster_health_status 2\n' in text and 'gpucluster_fabric_manager_active 0\n' in text
    assert 'gpucluster_health_issues{severity="critical",check="gpu_fabric"} 1\n' in text
    assert 'gpucluster_gpu_fabric_ready{gpu="0",' in text and 'gpucluster_gpu_health_status{gpu="0",' in text
    ready = dict((line.split('"')[1], line.rsplit(' ', 1)[1])
                 for line in text.splitlines() if line.startswith('gpucluster_gpu_fabric_ready{'))
    assert ready == {'0': '0', '1': '1'}
    assert '00000000:81:00.0' in report['issues'][1]['message']
    rc, out, _err = program('--config', program.config, '--format', 'summary')
    assert rc == 2 and 'nvidia-fabricmanager' in out


def test_fabric_na_is_judged_by_the_manager_only(program, real_fixtures_dir):  # pylint: disable=redefined-outer-name
    _fabric_node(program, real_fixtures_dir, [('N/A', 'N/A')] * 2, 'inactive')
    rc, report, _err, text = _run(program)
    assert (rc, [(i['check'], i['severity']) for i in report['issues']]) == (2, [('fabric_manager', 'critical')])
    assert 'gpucluster_gpu_fabric_ready' not in text


def test_systemctl_hanging_is_bounded_and_a_warning(program, real_fixtures_dir):  # pylint: disable=redefined-outer-name
    _fabric_node(program, real_fixtures_dir, [('Completed', 'Success')] * 2, None)
    # The run timeout cuts systemctl's own timeout (10 s) to what is left of it, less the time kept for the rest.
    rc, report, _err, text = _run(program, '--run-timeout', '6')
    assert (rc, [(i['check'], i['severity']) for i in report['issues']]) == (1, [('fabric_manager', 'warning')])
    assert 'no answer within' in report['issues'][0]['message']
    assert 'gpucluster_fabric_manager_active' not in text and 'gpucluster_nvswitches 4\n' in text


def test_node_without_nvswitches_runs_no_systemctl(program, real_fixtures_dir):  # pylint: disable=redefined-outer-name
    _fabric_node(program, real_fixtures_dir, [('In Progress', 'N/A')] * 2, 'failed')
    for entry in glob.glob(str(program.tmp / 'sys' / 'bus' / 'pci' / 'devices' / '0000:0[5-8]:00.0')):
        os.remove(os.path.join(entry, 'class'))
    rc, report, err, text = _run(program)
    assert (rc, report['status']) == (0, 'ok'), err
    assert not (program.tmp / 'systemctl.calls').exists()
    assert 'fabric' not in text and 'nvswitch' not in text
    assert set(report) == {'status', 'exit_code', 'host', 'timestamp', 'issues', 'checks_skipped', 'gpu'}
