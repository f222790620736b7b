# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""package_hold in-process, against stand-in dpkg-query, dpkg and rpm programs over a package database in a
JSON file: one read, only the changed lines written, check mode and diff, and a clear error for a package
that is not installed."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import stat
import sys

import pytest
from unittest import mock

from ansible.module_utils import basic

from ansible_collections.gpucluster.core.plugins.modules import package_hold

# The stand-in: dpkg-query -W -f FORMAT NAME..., dpkg --set-selections (stdin), rpm -q --qf FORMAT NAME...
# Every call is logged with its arguments (and stdin) so the tests can count them.
STAND_IN = r'''#!%(python)s
import json, os, sys
db_path = os.environ.get('STAND_IN_DB') or %(db)r
with open(db_path) as handle:
    db = json.load(handle)
prog = os.path.basename(sys.argv[0])
args = sys.argv[1:]
stdin = sys.stdin.read() if prog == 'dpkg' else ''
db['calls'].append([prog] + args + ([stdin] if stdin else []))

def expand(fmt, fields):
    for key, value in fields.items():
        fmt = fmt.replace(key, value)
    return fmt.replace('\\t', '\t').replace('\\n', '\n')

rc = 0
if prog == 'dpkg-query':
    assert args[0] == '-W' and args[1] == '-f'
    for name in args[3:]:
        rows = [r for r in db['dpkg'] if r['package'] == name]
        if not rows:
            sys.stderr.write('dpkg-query: no packages found matching %%s\n' %% name)
            rc = 1
        for r in rows:
            sys.stdout.write(expand(args[2], {'${Package}': r['package'], '${binary:Package}': r['instance'],
                                              '${Status}': '%%s ok %%s' %% (r['want'], r['status'])}))
elif prog == 'dpkg':
    assert args == ['--set-selections']
    for line in stdin.splitlines():
        instance, selection = line.split()
        rows = [r for r in db['dpkg'] if r['instance'] == instance]
        if not rows:
            sys.stderr.write('dpkg: warning: package not in status nor available database at line 1: %%s\n' %% instance)
        for r in rows:
            r['want'] = 'ignored' if db.get('dpkg_ignores') else selection
elif prog == 'rpm':
    assert args[0] == '-q' and args[1] == '--qf'
    for name in args[3:]:
        evrs = db['rpm'].get(name) or []
        if not evrs:
            sys.stdout.write('package %%s is not installed\n' %% name)
            rc += 1
        for evr in evrs:
            epoch, _sep, vr = evr.partition(':')
            version, _sep, release = vr.partition('-')
            sys.stdout.write(expand(args[2], {'%%{NAME}': name, '%%{EPOCHNUM}': epoch, '%%{VERSION}': version,
                                              '%%{RELEASE}': release}))
with open(db_path, 'w') as handle:
    json.dump(db, handle)
sys.exit(rc)
'''


class Node(object):
    """A stand-in node: programs in a directory, the database in a JSON file."""

    def __init__(self, root, programs):
        self.root = root
        self.db_path = str(root / 'db.json')
        self.bin = root / 'bin'
        self.bin.mkdir()
        self.programs = programs
        for prog in programs:
            path = self.bin / prog
            path.write_text(STAND_IN % {'python': sys.executable, 'db': self.db_path})
            path.chmod(path.stat().st_mode | stat.S_IEXEC)
        self.save({'dpkg': [], 'rpm': {}, 'calls': []})

    def save(self, db):
        with open(self.db_path, 'w') as handle:
            json.dump(db, handle)

    def load(self):
        with open(self.db_path) as handle:
            return json.load(handle)

    def dpkg(self, *rows):
        db = self.load()
        db['dpkg'] = [dict(zip(('package', 'instance', 'want', 'status'), r)) for r in rows]
        self.save(db)

    def rpm(self, installed):
        db = self.load()
        db['rpm'] = installed
        self.save(db)

    def wants(self):
        return dict((r['instance'], r['want']) for r in self.load()['dpkg'])

    def calls(self):
        return self.load()['calls']

    def forget_calls(self):
        db = self.load()
        db['calls'] = []
        self.save(db)


@pytest.fixture
def run(run_module):
    def call(node, args, check=False, diff=False):
        def bin_path(self, name, required=False, opt_dirs=None):
            if name in node.programs:
                return str(node.bin / name)
            if required:
                self.fail_json(msg='stand-in: %s not found' % name)
            return None
        with mock.patch.object(basic.AnsibleModule, 'get_bin_path', bin_path):
            return run_module(package_hold.main, args, check=check, diff=diff)
    return call


@pytest.fixture
def debian(tmp_path):
    node = Node(tmp_path, ('dpkg-query', 'dpkg'))
    node.dpkg(('nvidia-driver-550', 'nvidia-driver-550', 'install', 'installed'),
              ('libnvidia-compute-550', 'libnvidia-compute-550:amd64', 'hold', 'installed'),
              ('libnvidia-compute-550', 'libnvidia-compute-550:i386', 'install', 'installed'),
              ('nvidia-kernel-open-dkms', 'nvidia-kernel-open-dkms', 'deinstall', 'config-files'))
    return node


def test_apt_holds_only_what_differs_in_one_write_then_changes_nothing(debian, run):
    how, result = run(debian, {'name': ['nvidia-driver-550', 'libnvidia-compute-550']})
    assert how == 'exit', result
    assert result['changed'] is True and result['manager'] == 'apt'
    assert result['changed_names'] == ['nvidia-driver-550', 'libnvidia-compute-550']
    assert debian.wants() == {'nvidia-driver-550': 'hold', 'libnvidia-compute-550:amd64': 'hold',
                              'libnvidia-compute-550:i386': 'hold', 'nvidia-kernel-open-dkms': 'deinstall'}
    calls = debian.calls()
    # One read, one write of the changed lines only, one read that proves dpkg took them.
    assert [c[0] for c in calls] == ['dpkg-query', 'dpkg', 'dpkg-query']
    assert calls[1] == ['dpkg', '--set-selections', 'nvidia-driver-550 hold\nlibnvidia-compute-550:i386 hold\n']
    assert calls[0][1:4] == ['-W', '-f', '${Package}\\t${binary:Package}\\t${Status}\\n']

    debian.forget_calls()
    how, result = run(debian, {'name': ['nvidia-driver-550', 'libnvidia-compute-550']})
    assert result['changed'] is False and result['changed_names'] == []
    assert [c[0] for c in debian.calls()] == ['dpkg-query']


def test_apt_check_mode_and_diff_write_nothing(debian, run):
    how, result = run(debian, {'name': ['nvidia-driver-550', 'libnvidia-compute-550', 'nvidia-fabricmanager-550']},
                      check=True, diff=True)
    assert how == 'exit', result
    # The fabric manager is not installed: in check mode its install was simulated, so it counts as to be held.
    assert result['changed_names'] == ['nvidia-driver-550', 'libnvidia-compute-550', 'nvidia-fabricmanager-550']
    assert result['not_installed'] == ['nvidia-fabricmanager-550']
    assert result['diff']['before'] == 'libnvidia-compute-550:i386 install\nnvidia-driver-550 install\n'
    assert result['diff']['after'] == 'libnvidia-compute-550:i386 hold\nnvidia-driver-550 hold\n'
    assert [c[0] for c in debian.calls()] == ['dpkg-query']
    assert debian.wants()['nvidia-driver-550'] == 'install'


def test_apt_hold_of_a_package_that_is_not_installed_fails_before_any_change(debian, run):
    how, result = run(debian, {'name': ['nvidia-driver-550', 'nvidia-kernel-open-dkms', 'nvidia-nope']})
    assert how == 'fail'
    assert result['msg'].startswith('package_hold: cannot hold nvidia-kernel-open-dkms (nvidia-kernel-open-dkms '
                                    'config-files), nvidia-nope (unknown to dpkg): not installed')
    assert [c[0] for c in debian.calls()] == ['dpkg-query']
    assert debian.wants()['nvidia-driver-550'] == 'install'


def test_apt_skip_missing_holds_the_installed_ones(debian, run):
    how, result = run(debian, {'name': ['nvidia-driver-550', 'linux-image-cloud-amd64'], 'skip_missing': True})
    assert how == 'exit' and result['changed_names'] == ['nvidia-driver-550']
    assert result['not_installed'] == ['linux-image-cloud-amd64']


def test_apt_release(debian, run):
    how, result = run(debian, {'name': ['libnvidia-compute-550', 'nvidia-driver-550', 'gone'], 'state': 'unheld'})
    assert how == 'exit' and result['changed_names'] == ['libnvidia-compute-550']
    assert debian.wants()['libnvidia-compute-550:amd64'] == 'install'
    assert debian.calls()[1][2] == 'libnvidia-compute-550:amd64 install\n'


def test_apt_selection_dpkg_does_not_take_fails(debian, run):
    db = debian.load()
    db['dpkg_ignores'] = True
    debian.save(db)
    how, result = run(debian, {'name': ['nvidia-driver-550']})
    assert how == 'fail' and result['msg'] == 'package_hold: dpkg did not take the selections nvidia-driver-550 hold'


def test_an_empty_list_runs_nothing(debian, run):
    how, result = run(debian, {'name': []})
    assert how == 'exit' and result['changed'] is False and debian.calls() == []


@pytest.mark.parametrize('args, says', [
    ({'name': ['nvidia-driver-550=550.54.15-1']}, "name holds 'nvidia-driver-550=550.54.15-1'; accepted: package names"),
    ({'name': ['x'], 'state': 'locked'}, 'value of state must be one of: held, unheld'),
])
def test_bad_arguments_fail_naming_them(debian, run, args, says):
    how, result = run(debian, args)
    assert how == 'fail' and says in result['msg']
    assert debian.calls() == []


# ---------------------------------------------------------------------------------------------------------
# dnf
# ---------------------------------------------------------------------------------------------------------

@pytest.fixture
def rhel(tmp_path):
    node = Node(tmp_path, ('rpm',))
    node.rpm({'nvidia-container-toolkit': ['0:1.17.8-1'], 'nvidia-container-toolkit-base': ['0:1.17.8-1'],
              'kernel': ['0:5.14.0-427.el9', '0:5.14.0-503.el9']})
    plugins = tmp_path / 'plugins'
    plugins.mkdir()
    node.locklist = plugins / 'versionlock.list'
    node.conf = plugins / 'versionlock.conf'
    node.conf.write_text('[main]\nenabled = 1\nlocklist = %s\n' % node.locklist)
    return node


def dnf_args(node, **kw):
    return dict(dict(name=['nvidia-container-toolkit', 'nvidia-container-toolkit-base'],
                     versionlock_conf=str(node.conf)), **kw)


def test_dnf_moves_the_lock_to_the_installed_version_keeping_the_rest(rhel, run):
    rhel.locklist.write_text('# Added lock on Mon Jan  1 00:00:00 2024\nnvidia-container-toolkit-0:1.17.7-1.*\n'
                             '!nvidia-container-toolkit-0:1.17.6-1.*\nsite-thing-0:1-1.*\n')
    os.chmod(str(rhel.locklist), 0o640)
    how, result = run(rhel, dnf_args(rhel), diff=True)
    assert how == 'exit', result
    assert result['changed_names'] == ['nvidia-container-toolkit', 'nvidia-container-toolkit-base']
    assert result['manager'] == 'dnf' and result['locklist'] == str(rhel.locklist)
    assert rhel.locklist.read_text() == ('# Added lock on Mon Jan  1 00:00:00 2024\n!nvidia-container-toolkit-0:1.17.6-1.*\n'
                                         'site-thing-0:1-1.*\nnvidia-container-toolkit-0:1.17.8-1.*\n'
                                         'nvidia-container-toolkit-base-0:1.17.8-1.*\n')
    assert stat.S_IMODE(os.stat(str(rhel.locklist)).st_mode) == 0o640
    assert 'nvidia-container-toolkit-0:1.17.7-1.*' in result['diff']['before']
    assert [c[0] for c in rhel.calls()] == ['rpm']
    assert sorted(os.listdir(str(rhel.locklist.parent))) == ['versionlock.conf', 'versionlock.list']

    how, result = run(rhel, dnf_args(rhel))
    assert result['changed'] is False


def test_dnf_creates_the_list_and_locks_every_installed_kernel(rhel, run):
    how, result = run(rhel, dnf_args(rhel, name=['kernel', 'kernel-core'], skip_missing=True))
    assert how == 'exit', result
    assert result['changed_names'] == ['kernel'] and result['not_installed'] == ['kernel-core']
    assert rhel.locklist.read_text() == 'kernel-0:5.14.0-427.el9.*\nkernel-0:5.14.0-503.el9.*\n'
    assert stat.S_IMODE(os.stat(str(rhel.locklist)).st_mode) == 0o644


def test_dnf_release_and_check_mode(rhel, run):
    text = 'nvidia-container-toolkit-0:1.17.8-1.*\nother-0:1-1.*\n'
    rhel.locklist.write_text(text)
    how, result = run(rhel, dnf_args(rhel, state='unheld'), check=True)
    assert result['changed_names'] == ['nvidia-container-toolkit'] and rhel.locklist.read_text() == text
    how, result = run(rhel, dnf_args(rhel, state='unheld'))
    assert result['changed_names'] == ['nvidia-container-toolkit'] and rhel.locklist.read_text() == 'other-0:1-1.*\n'


def test_dnf_lock_of_a_package_that_is_not_installed_fails(rhel, run):
    how, result = run(rhel, dnf_args(rhel, name=['nvidia-container-toolkit', 'libnvidia-container1']))
    assert how == 'fail'
    assert result['msg'].startswith('package_hold: cannot lock libnvidia-container1: not installed')
    assert not rhel.locklist.exists()


@pytest.mark.parametrize('conf, says', [
    (None, 'does not exist: the dnf versionlock plugin is not installed'),
    ('[main]\nenabled=0\nlocklist=/x\n', 'is disabled'),
    ('[main]\nenabled=1\n', 'names no locklist'),
    ('[main]\nlocklist=relative.list\n', 'accepted: an absolute path'),
])
def test_dnf_without_a_usable_plugin_fails_naming_the_file(rhel, run, conf, says):
    if conf is None:
        rhel.conf.unlink()
    else:
        rhel.conf.write_text(conf)
    how, result = run(rhel, dnf_args(rhel))
    assert how == 'fail' and says in result['msg'] and str(rhel.conf) in result['msg']


def test_dnf_check_mode_before_the_plugin_is_installed_reports_the_locks(rhel, run):
    rhel.conf.unlink()
    how, result = run(rhel, dnf_args(rhel), check=True)
    assert how == 'exit' and result['changed'] is True and result['locklist'] == '/etc/dnf/plugins/versionlock.list'


def test_auto_takes_apt_where_dpkg_query_exists_else_dnf(tmp_path, run):
    node = Node(tmp_path, ('rpm',))
    how, result = run(node, {'name': ['x'], 'versionlock_conf': str(tmp_path / 'none.conf')})
    assert how == 'fail' and 'versionlock plugin is not installed' in result['msg']
    empty = tmp_path / 'empty'
    empty.mkdir()
    nothing = Node(empty, ())
    how, result = run(nothing, {'name': ['x']})
    assert how == 'fail' and 'neither dpkg-query nor rpm' in result['msg']
