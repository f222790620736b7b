# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node health program (roles/health_check), installed the way the role installs it."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import glob
import json
import os
import shutil
import subprocess
import sys
import time

import pytest
import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
MODULE_UTILS = os.path.join(REPO, 'plugins', 'module_utils')
ROLE = os.path.join(REPO, 'roles', 'health_check')
SMALL = os.path.join(REPO, 'tests', 'unit', 'fixtures', 'gpu', 'two_gpus_v13_out_of_order.xml')


def _role_modules():
    with open(os.path.join(ROLE, 'vars', 'main.yml')) as handle:
        return yaml.safe_load(handle)['__health_check_modules']


def test_role_installs_every_gpu_module_util():
    installed = _role_modules()
    present = sorted(os.path.basename(p) for p in glob.glob(os.path.join(MODULE_UTILS, 'gpu_*.py')))
    # Every gpu_*.py, the RDMA port checks, the shared atomic writer and exposition format the program
    # writes its textfile with, the bounded command runner (timed_command, shared with the modules), and the
    # bounded reads and label bounds of the job records (gpu_jobs).
    assert sorted(installed) == sorted(present + ['atomic_file.py', 'bounded_read.py', 'prom_text.py', 'rdma_health.py',
                                                  'rdma_sysfs.py', 'text_bounds.py', 'timed_command.py'])


def test_module_utils_have_no_ansible_imports():
    for name in _role_modules():
        with open(os.path.join(MODULE_UTILS, name)) as handle:
            text = handle.read()
        assert 'import ansible' not in text and 'from ansible' not in text, name


@pytest.fixture
def program(tmp_path):
    lib = tmp_path / 'lib'
    package = lib / 'gpucluster_health'
    package.mkdir(parents=True)
    for name in _role_modules():
        shutil.copy(os.path.join(MODULE_UTILS, name), str(package))
    shutil.copy(os.path.join(ROLE, 'files', 'gpucluster_health_cli.py'), str(package / 'cli.py'))
    (package / '__init__.py').write_text('')
    sysfs = tmp_path / 'sys' / 'bus' / 'pci' / 'devices'
    sysfs.mkdir(parents=True)
    smi = tmp_path / 'nvidia-smi'
    smi.write_text('#!/bin/sh\ncat "%s"\n' % SMALL)
    smi.chmod(0o755)
    log = tmp_path / 'kern.log'
    log.write_text('')
    config = tmp_path / 'health.json'
    config.write_text(json.dumps({'_managed': 'test', 'nvidia_smi_path': str(smi), 'expected_count': 2,
                                  'thresholds': {'temperature_margin_c': 5}, 'kernel_log_path': str(log),
                                  'sysfs_root': str(tmp_path / 'sys')}))

    def run(*args):
        code = ('import sys; sys.path.insert(0, %r); from gpucluster_health.cli import main; sys.exit(main())'
                % str(lib))
        proc = subprocess.run([sys.executable, '-c', code] + list(args), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, check=False, universal_newlines=True)
        return proc.returncode, proc.stdout, proc.stderr
    run.config = str(config)
    run.tmp = tmp_path
    run.log = log
    return run


def test_ok_verdict_json(program):
    rc, out, err = program('--config', program.config)
    report = json.loads(out)
    assert rc == 0, err
    assert report['status'] == 'ok' and report['exit_code'] == 0 and report['issues'] == []
    assert report['gpu']['count'] == 2 and report['gpu']['expected_count'] == 2
    assert set(report) == {'status', 'exit_code', 'host', 'timestamp', 'issues', 'checks_skipped', 'gpu'}


def test_critical_exit_code_and_summary(program):
    rc, out, err = program('--config', program.config, '--expected-count', '4', '--format', 'summary')
    assert rc == 2
    assert out == 'gpucluster-health critical: 2 GPU(s) visible to the driver, 4 expected\n'


def test_warning_exit_code(program):
    # Dated: a kernel-log file's undated lines never count as recent.
    program.log.write_text('%s,000000+00:00 NVRM: Xid (PCI:0000:41:00): 94, pid=1, Contained\n'
                           % time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime()))
    rc, out, err = program('--config', program.config)
    assert rc == 1 and json.loads(out)['issues'][0]['check'] == 'xid'


def test_textfile_and_quiet(program):
    target = program.tmp / 'textfile'
    target.mkdir()
    rc, out, err = program('--config', program.config, '--textfile', str(target), '--quiet')
    assert (rc, out) == (0, '')
    assert os.listdir(str(target)) == ['gpucluster_health.prom']  # no temp file left behind
    text = (target / 'gpucluster_health.prom').read_text()
    assert 'gpucluster_gpus 2\n' in text and 'gpucluster_health_status 0\n' in text
    assert oct(os.stat(str(target / 'gpucluster_health.prom')).st_mode & 0o777) == '0o644'


def test_textfile_dir_missing_makes_an_ok_run_unknown(program):
    rc, out, err = program('--config', program.config, '--textfile', str(program.tmp / 'nope'), '--quiet')
    assert rc == 3 and 'cannot write gpucluster_health.prom' in err


@pytest.mark.parametrize('content, fragment', [
    ({'expected_gpus': 2}, 'unknown key(s) expected_gpus'),
    ({'expected_count': -1}, 'expected_count must be a whole number >= 0'),
    ({'thresholds': {'pcie_width_severity': 'loud'}}, 'pcie_width_severity'),
    ([], 'expected a JSON object'),
])
def test_bad_config(program, content, fragment):
    bad = program.tmp / 'bad.json'
    bad.write_text(json.dumps(content))
    rc, out, err = program('--check-config', str(bad))
    assert rc == 3 and fragment in err
    rc, out, err = program('--config', str(bad))
    report = json.loads(out)  # the unknown verdict comes with its reason on stdout too
    assert rc == 3 and fragment in err and report['status'] == 'unknown' and report['exit_code'] == 3
    assert fragment in report['issues'][0]['message']


def test_check_config_accepts_a_good_file(program):
    assert program('--check-config', program.config)[0] == 0


def test_explicit_missing_config_is_an_error(program):
    rc, out, err = program('--config', str(program.tmp / 'absent.json'))
    assert rc == 3 and 'does not exist' in err


def test_thresholds_on_the_command_line_replace_the_configs(program):
    # The config sets temperature_margin_c 5; the SMALL recording's GPUs pass it. A margin no GPU has
    # turns the verdict (the rolling upgrade's gate passes its own thresholds this way).
    rc, out, _err = program('--config', program.config, '--format', 'summary')
    assert rc == 0, out
    rc, out, _err = program('--config', program.config, '--format', 'summary', '--thresholds',
                            '{"temperature_margin_c": 500}')
    assert rc == 1 and out.startswith('gpucluster-health warning: ') and 'within 500 C of its slowdown' in out, out
    rc, out, _err = program('--config', program.config, '--thresholds', '{}')
    assert rc == 0 and json.loads(out)['status'] == 'ok'


@pytest.mark.parametrize('value, fragment', [
    ('[1]', '--thresholds must be a JSON object'),
    ('{bad', '--thresholds must be a JSON object'),
    ('{"no_such": 1}', "--thresholds: unknown threshold 'no_such'"),
    ('{"temperature_margin_c": "hot"}', '--thresholds: threshold temperature_margin_c'),
])
def test_bad_thresholds_are_unknown_with_the_reason(program, value, fragment):
    rc, out, _err = program('--config', program.config, '--thresholds', value)
    report = json.loads(out)
    assert rc == 3 and report['status'] == 'unknown' and fragment in report['issues'][0]['message'], out
