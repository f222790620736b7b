# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node health program's archive (roles/health_check/files/build_zipapp.py), built as the role builds it."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile

import pytest
import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
ROLE = os.path.join(REPO, 'roles', 'health_check')
MODULE_UTILS = os.path.join(REPO, 'plugins', 'module_utils')
SCRIPT = os.path.join(ROLE, 'files', 'build_zipapp.py')
SMALL = os.path.join(REPO, 'tests', 'unit', 'fixtures', 'gpu', 'two_gpus_v13_out_of_order.xml')

_spec = importlib.util.spec_from_file_location('build_zipapp', SCRIPT)
bz = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bz)


def _role_modules():
    with open(os.path.join(ROLE, 'vars', 'main.yml')) as handle:
        names = yaml.safe_load(handle)['__health_check_modules']
    modules = dict((name[:-len('.py')], os.path.join(MODULE_UTILS, name)) for name in names)
    modules['cli'] = os.path.join(ROLE, 'files', 'gpucluster_health_cli.py')
    return modules


def _build_with_cli(tmp_path, name):
    """Run the script as install.yml does (argv, JSON on stdout)."""
    argv = [sys.executable, SCRIPT, '--package', 'gpucluster_health', '--entry', 'cli:main',
            '--output-name', 'gpucluster-health.pyz']
    argv += ['--module=%s=%s' % item for item in sorted(_role_modules().items())]
    out = tmp_path / name
    out.mkdir()
    proc = subprocess.run(argv + ['--output-dir', str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_archive_is_reproducible(tmp_path):
    first = _build_with_cli(tmp_path, 'a')
    assert first['dir'] is None  # --output-dir given: nothing for the caller to remove
    # The same sources with other times, modes and listing order give the same bytes.
    copies = tmp_path / 'copies'
    copies.mkdir()
    modules = {}
    for index, (name, path) in enumerate(sorted(_role_modules().items(), reverse=True)):
        modules[name] = str(copies / ('%d.py' % index))
        shutil.copy(path, modules[name])
        os.chmod(modules[name], 0o600)
        os.utime(modules[name], (1234567890 + index, 1234567890 + index))
    out = tmp_path / 'b'
    out.mkdir()
    second = bz.build('gpucluster_health', 'cli:main', modules, str(out), 'gpucluster-health.pyz')
    with open(first['path'], 'rb') as one, open(second['path'], 'rb') as two:
        assert one.read() == two.read()
    assert first['checksum'] == second['checksum'] and first['sha256'] == second['sha256']


def test_archive_holds_the_cli_and_every_listed_module_verbatim(tmp_path):
    built = _build_with_cli(tmp_path, 'a')
    with zipfile.ZipFile(built['path']) as archive:
        infos = archive.infolist()
        names = [info.filename for info in infos]
        assert names == sorted(names) == built['entries']
        assert names == sorted(['__main__.py', 'gpucluster_health/__init__.py']
                               + ['gpucluster_health/%s.py' % name for name in _role_modules()])
        for name, path in _role_modules().items():
            with open(path, 'rb') as handle:
                assert archive.read('gpucluster_health/%s.py' % name) == handle.read()
        assert set(info.date_time for info in infos) == {(1980, 1, 1, 0, 0, 0)}
        assert set(info.compress_type for info in infos) == {zipfile.ZIP_STORED}
        assert set(info.external_attr >> 16 for info in infos) == {0o100644}


def test_default_output_is_a_new_directory_the_caller_removes():
    built = bz.build('gpucluster_health', 'cli:main', _role_modules())
    try:
        assert os.path.dirname(built['path']) == built['dir'] and os.listdir(built['dir']) == ['gpucluster_health.pyz']
    finally:
        shutil.rmtree(built['dir'])


def _fake_node(tmp_path):
    smi = tmp_path / 'nvidia-smi'
    smi.write_text('#!/bin/sh\ncat "%s"\n' % SMALL)
    smi.chmod(0o755)
    log = tmp_path / 'kern.log'
    log.write_text('')
    (tmp_path / 'sys' / 'bus' / 'pci' / 'devices').mkdir(parents=True)
    config = tmp_path / 'health.json'
    config.write_text(json.dumps({'nvidia_smi_path': str(smi), 'expected_count': 2, 'kernel_log_path': str(log),
                                  'sysfs_root': str(tmp_path / 'sys')}))
    return str(config)


def test_launcher_and_archive_run_the_same_program(tmp_path):
    built = _build_with_cli(tmp_path, 'a')
    config = _fake_node(tmp_path)
    # The launcher as templates/usr/local/sbin/gpucluster-health.j2 renders it (sys.path gets the archive).
    with open(os.path.join(ROLE, 'templates', 'usr', 'local', 'sbin', 'gpucluster-health.j2')) as handle:
        template = handle.read()
    body = template.split('import sys\n', 1)[1]
    assert '{{ __health_check_archive | to_json }}' in body
    launcher = tmp_path / 'gpucluster-health'
    launcher.write_text('import sys\n' + body.replace('{{ __health_check_archive | to_json }}', json.dumps(built['path'])))
    results = []
    for argv in ([sys.executable, str(launcher)], [sys.executable, built['path']]):
        proc = subprocess.run(argv + ['--config', config], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, check=False)
        assert proc.returncode == 0, proc.stderr
        results.append(json.loads(proc.stdout)['status'])
    assert results == ['ok', 'ok']
    for argv in ([sys.executable, str(launcher)], [sys.executable, built['path']]):
        proc = subprocess.run(argv + ['--check-config', config], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, check=False)
        assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize('drop, message', [
    ('gpu_smi_xml', 'imports gpu_smi_xml from its package, which is not packed'),
    ('gpu_prom', 'imports gpu_prom from its package, which is not packed'),
])
def test_a_module_missing_from_the_list_fails_the_build(drop, message):
    modules = _role_modules()
    del modules[drop]
    with pytest.raises(bz.BuildError, match=message):
        bz.build('gpucluster_health', 'cli:main', modules)


@pytest.mark.parametrize('package, entry, specs, message', [
    ('gpucluster_health', 'cli:main', ['cli'], "expected NAME=PATH"),
    ('gpucluster_health', 'cli:main', ['cli=/nonexistent/cli.py'], 'is not a file'),
    ('gpucluster_health', 'cli:main', ['__init__=%s' % SCRIPT], 'given twice or reserved'),
    ('gpucluster-health', 'cli:main', ['cli=%s' % SCRIPT], 'is not a Python identifier'),
    ('gpucluster_health', 'other:main', ['cli=%s' % SCRIPT], 'expected MODULE:FUNCTION'),
    ('gpucluster_health', 'cli', ['cli=%s' % SCRIPT], 'expected MODULE:FUNCTION'),
])
def test_bad_arguments_are_refused(package, entry, specs, message):
    with pytest.raises(bz.BuildError, match=message):
        bz.build(package, entry, bz.parse_modules(specs))


def test_syntax_error_and_import_outside_the_package_are_refused(tmp_path):
    broken = tmp_path / 'broken.py'
    broken.write_text('def main(:\n')
    with pytest.raises(bz.BuildError, match='does not compile'):
        bz.build('pkg', 'broken:main', {'broken': str(broken)})
    outside = tmp_path / 'outside.py'
    outside.write_text('from .. import something\n\n\ndef main():\n    return 0\n')
    with pytest.raises(bz.BuildError, match='import from outside the package'):
        bz.build('pkg', 'outside:main', {'outside': str(outside)})


def test_cli_reports_errors_on_stderr_with_exit_1(tmp_path):
    proc = subprocess.run([sys.executable, SCRIPT, '--package', 'p', '--entry', 'cli:main', '--module', 'cli=/nonexistent'],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False)
    assert proc.returncode == 1 and proc.stdout == ''
    assert proc.stderr == "build_zipapp: --module cli: /nonexistent is not a file\n"
