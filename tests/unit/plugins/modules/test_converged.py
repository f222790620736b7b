# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fast path's node module, run in this process against files under tmp_path."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import stat
import sys
import time

import pytest

from ansible_collections.gpucluster.core.plugins.module_utils import converged_state as cs
from ansible_collections.gpucluster.core.plugins.modules import converged

FINGERPRINT = cs.fingerprint({'code': 'c', 'variables': {'os_tuning_sysctl': True}, 'facts': {}, 'inputs': {}})


@pytest.fixture
def node(tmp_path, run_module):
    conf = tmp_path / 'etc' / '90-gpucluster.conf'
    conf.parent.mkdir()
    conf.write_text('vm.swappiness = 1\n')
    conf.chmod(0o644)
    records = tmp_path / 'records'

    def call(state='check', check=False, manages=None, fingerprint=None, **extra):
        args = dict(role='os_tuning', state=state, fingerprint=FINGERPRINT if fingerprint is None else fingerprint, record_dir=str(records),
                    manages=manages if manages is not None else {'files': [str(conf)]}, **extra)
        return run_module(converged.main, args, check=check)
    return conf, records, call


def test_no_record_then_record_then_converged(node):
    conf, records, call = node
    how, result = call()
    assert (how, result['converged'], result['invalidated']) == ('exit', False, False)
    assert result['reasons'][0].startswith('no record of a finished full run of os_tuning')
    how, result = call('record', outputs={'os_tuning_reboot_required': False})
    assert (how, result['changed']) == ('exit', True)
    path = records / 'os_tuning.json'
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(records.stat().st_mode) == 0o700
    how, result = call()
    assert (result['converged'], result['reasons'], result['outputs']) == (True, [], {'os_tuning_reboot_required': False})
    # Recording the same state again changes nothing.
    assert call('record', outputs={'os_tuning_reboot_required': False})[1]['changed'] is False


def test_a_hand_edit_runs_the_full_path_and_removes_the_record(node):
    conf, records, call = node
    call('record')
    conf.write_text('vm.swappiness = 60\n')
    how, result = call()
    assert (result['converged'], result['invalidated']) == (False, True)
    assert result['reasons'] == ['file %s changed (content)' % conf]
    assert not (records / 'os_tuning.json').exists()


def test_check_mode_compares_but_removes_nothing(node):
    conf, records, call = node
    call('record')
    conf.chmod(0o600)
    how, result = call(check=True)
    assert (result['converged'], result['invalidated']) == (False, False)
    assert result['reasons'] == ['file %s changed (mode)' % conf]
    assert (records / 'os_tuning.json').exists()
    # check mode never writes a record either
    os.unlink(str(records / 'os_tuning.json'))
    assert call('record', check=True)[1]['changed'] is True
    assert not (records / 'os_tuning.json').exists()


def test_another_fingerprint_is_not_converged(node):
    conf, records, call = node
    call('record')
    other = cs.fingerprint({'code': 'c', 'variables': {'os_tuning_sysctl': False}, 'facts': {}, 'inputs': {}})
    result = call(fingerprint=other)[1]
    assert (result['converged'], result['reasons']) == (False, ['variables changed: os_tuning_sysctl'])


@pytest.mark.parametrize('content, reason', [
    (b'{not json', 'is not JSON'),
    (json.dumps({'format': 99, 'role': 'os_tuning'}).encode(), 'has format 99'),
])
def test_a_corrupt_or_foreign_record_is_said_and_never_trusted(node, content, reason):
    conf, records, call = node
    records.mkdir()
    (records / 'os_tuning.json').write_bytes(content)
    result = call()[1]
    assert result['converged'] is False
    assert reason in result['reasons'][0]


def test_a_fifo_as_record_or_managed_file_never_blocks(node, tmp_path):
    conf, records, call = node
    records.mkdir()
    os.mkfifo(str(records / 'os_tuning.json'))
    fifo = tmp_path / 'pipe'
    os.mkfifo(str(fifo))
    started = time.monotonic()
    result = call(manages={'files': [str(fifo)]})[1]
    assert time.monotonic() - started < 10
    assert result['converged'] is False
    assert 'is not a regular file' in result['reasons'][0]


def test_patterns_directories_links_and_missing_files_are_observed(node, tmp_path):
    conf, records, call = node
    (tmp_path / 'etc' / 'link').symlink_to('90-gpucluster.conf')
    manages = {'files': [str(tmp_path / 'etc' / '*.conf'), str(tmp_path / 'etc'), str(tmp_path / 'etc' / 'link'),
                         str(tmp_path / 'nothing')]}
    call('record', manages=manages)
    assert call(manages=manages)[1]['converged'] is True
    (tmp_path / 'etc' / 'new.conf').write_text('x')
    result = call(manages=manages)[1]
    assert result['converged'] is False
    assert result['reasons'][0].startswith('the files matching %s/etc/*.conf are now' % tmp_path)


def test_probes_compare_exit_status_and_output(node, tmp_path):
    conf, records, call = node
    flag = tmp_path / 'flag'
    flag.write_text('on')
    manages = {'probes': [{'name': 'flag', 'argv': [sys.executable, '-c', 'print(open(%r).read())' % str(flag)]}]}
    call('record', manages=manages)
    assert call(manages=manages)[1]['converged'] is True
    flag.write_text('off')
    assert call(manages=manages)[1]['reasons'] == ['probe flag answers differently']


def test_a_probe_that_hangs_is_cut_off_and_counts_as_changed(node):
    conf, records, call = node
    manages = {'probes': [{'name': 'hang', 'argv': [sys.executable, '-c', 'import time; time.sleep(30)']}]}
    started = time.monotonic()
    result = call('record', manages=manages, probe_timeout=1)[1]
    assert time.monotonic() - started < 20
    with open(result['record_path']) as handle:
        assert json.load(handle)['state']['probes'] == {'hang': 'timeout or not runnable'}


def test_without_comparing_the_packages_are_observed_and_the_record_stays(node, monkeypatch):
    conf, records, call = node
    call('record')
    seen = {'restic': {'version': '0.14.0-1+b5', 'held': True}}
    monkeypatch.setattr(converged, 'observe_packages', lambda module, names, timeout: dict((n, seen[n]) for n in names))
    # The record stays, so that recording the same state after the full path changes nothing.
    for check in (True, False):
        how, result = call(check=check, compare=False, manages={'packages': ['restic']})
        assert (how, result['converged'], result['invalidated']) == ('exit', False, False)
        assert result['reasons'] == ['gpucluster_fast_path is false: the full path runs']
        assert result['packages'] == seen and result['outputs'] == {}
        assert (records / 'os_tuning.json').exists()
    # A comparing check returns what it observed too.
    assert call(manages={'packages': ['restic']})[1]['packages'] == seen


@pytest.mark.skipif(not os.path.exists('/usr/bin/dpkg-query'), reason='needs a Debian-family machine (dpkg-query)')
def test_packages_are_read_from_the_package_database():
    class Module(object):
        @staticmethod
        def get_bin_path(name):
            return '/usr/bin/' + name if name == 'dpkg-query' else None
    found = converged.observe_packages(Module(), ['dpkg', 'gpucluster-no-such-package'], 10)
    assert found['gpucluster-no-such-package'] == {'version': None, 'held': False}
    assert found['dpkg']['version'] and found['dpkg']['held'] in (True, False)


@pytest.mark.parametrize('args, error', [
    ({'role': '../etc'}, 'role must be a role name'),
    ({'fingerprint': None}, 'fingerprint is missing'),
    ({'manages': {'files': ['relative']}}, "manages.files holds 'relative'; accepted: absolute paths"),
])
def test_bad_arguments_fail_naming_them(node, run_module, args, error):
    full = dict(role='os_tuning', fingerprint=FINGERPRINT, record_dir='/nonexistent', manages={})
    full.update(args)
    how, result = run_module(converged.main, full)
    assert how == 'fail'
    assert error in result['msg']
