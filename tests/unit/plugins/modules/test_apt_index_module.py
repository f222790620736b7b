# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""apt_index in-process against a stand-in apt-get and a node tree in a temporary directory: a fresh index
runs nothing, a stale or emptied one is refreshed once and stamped, a failed refresh fails and is not stamped."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import stat
import sys
import time

import pytest
from unittest import mock

from ansible.module_utils import basic

from ansible_collections.gpucluster.core.plugins.module_utils import apt_index as ai
from ansible_collections.gpucluster.core.plugins.modules import apt_index

# The stand-in apt-get: logs its call, answers with the output and exit status the test set (one pair per
# call, the last one repeated), and on success writes a package index as apt would.
STAND_IN = r'''#!%(python)s
import os, sys
root = %(root)r
with open(os.path.join(root, 'calls'), 'a') as log:
    log.write(' '.join(sys.argv[1:]) + '\n')
with open(os.path.join(root, 'calls')) as log:
    n = len(log.read().splitlines())
answers = open(os.path.join(root, 'answers')).read().split('\n----\n')
answer = answers[min(n, len(answers)) - 1]
rc, _sep, out = answer.partition('\n')
sys.stdout.write(out)
if int(rc) == 0 and 'W: Failed' not in out:
    open(os.path.join(root, 'var/lib/apt/lists/deb_dists_bookworm_main_binary-amd64_Packages'), 'w').close()
sys.exit(int(rc))
'''


# The module's clock runs a day ahead of the files' (a test cannot date a change time back): the sources the
# fixture writes are then a day old, as on a node configured yesterday.
AHEAD = 86400
REAL_TIME = time.time


def now():
    return REAL_TIME() + AHEAD


class Node(object):
    def __init__(self, root, monkeypatch):
        self.root = root
        for d in ('var/lib/apt/lists/partial', 'var/lib/apt/periodic', 'etc/apt/sources.list.d', 'bin'):
            (root / d).mkdir(parents=True)
        (root / 'etc/apt/sources.list.d/debian.sources').write_text('Types: deb\n')
        self.apt_get = root / 'bin' / 'apt-get'
        self.apt_get.write_text(STAND_IN % {'python': sys.executable, 'root': str(root)})
        self.apt_get.chmod(self.apt_get.stat().st_mode | stat.S_IEXEC)
        self.answer('0\nHit:1 http://deb.debian.org/debian bookworm InRelease\n')
        self.stamp = root / 'var/lib/apt/periodic/update-success-stamp'
        monkeypatch.setattr(ai, 'STAMP', str(self.stamp))
        monkeypatch.setattr(ai, 'LISTS_DIR', str(root / 'var/lib/apt/lists'))
        monkeypatch.setattr(ai, 'SOURCES', (str(root / 'etc/apt/sources.list'), str(root / 'etc/apt/sources.list.d')))

    def answer(self, *answers):
        (self.root / 'answers').write_text('\n----\n'.join(answers))

    def calls(self):
        path = self.root / 'calls'
        return path.read_text().splitlines() if path.exists() else []

    def index(self, age):
        path = self.root / 'var/lib/apt/lists/deb_dists_bookworm_main_binary-amd64_Packages'
        path.write_text('Package: x\n')
        self.set_stamp(age)

    def set_stamp(self, age):
        self.stamp.write_text('')
        when = now() - age
        os.utime(str(self.stamp), (when, when))


@pytest.fixture
def node(tmp_path, monkeypatch):
    return Node(tmp_path, monkeypatch)


@pytest.fixture
def run(run_module, node):
    warned = []

    def call(args=None, check=False):
        def bin_path(self, name, required=False, opt_dirs=None):
            if name == 'apt-get':
                return str(node.apt_get)
            if required:
                self.fail_json(msg='stand-in: %s not found' % name)
            return None
        with mock.patch.object(basic.AnsibleModule, 'get_bin_path', bin_path), \
                mock.patch.object(basic.AnsibleModule, 'warn', lambda self, text: warned.append(text)), \
                mock.patch.object(apt_index.time, 'time', now), \
                mock.patch.object(apt_index.time, 'sleep', lambda s: None):
            return run_module(apt_index.main, args or {}, check=check)
    call.warned = warned
    return call


def test_a_fresh_index_runs_nothing(node, run):
    node.index(age=600)
    how, result = run()
    assert how == 'exit', result
    assert result['stale'] is False and result['refreshed'] is False and result['changed'] is False
    assert 590 <= result['age'] <= 700
    assert node.calls() == []


def test_emptied_lists_with_a_fresh_stamp_are_refreshed_and_stamped(node, run):
    # The lab image's trap: the lists were emptied; no age of any directory makes them usable.
    node.set_stamp(age=10)
    how, result = run()
    assert how == 'exit', result
    assert result['stale'] is True and result['refreshed'] is True and result['changed'] is False
    assert 'hold no package index' in result['reason']
    assert node.calls() == ['update -q']
    assert abs(now() - os.stat(str(node.stamp)).st_mtime) < 60
    how, result = run()
    assert result['stale'] is False and node.calls() == ['update -q']


def test_no_stamp_refreshes_then_the_stamp_makes_the_next_run_a_read(node, run):
    node.index(age=0)
    node.stamp.unlink()
    how, result = run()
    assert result['refreshed'] is True and result['age'] is None
    assert node.stamp.exists()
    how, result = run({'valid_for': 3600})
    assert result['stale'] is False and len(node.calls()) == 1


def test_an_old_index_or_a_new_source_or_force_refreshes(node, run):
    node.index(age=7200)
    how, result = run()
    assert result['refreshed'] is True and 'older than valid_for=3600' in result['reason']
    # A source written now, after the last refresh (dated by the module's clock).
    node.set_stamp(age=AHEAD + 60)
    (node.root / 'etc/apt/sources.list.d/gpucluster-doca.sources').write_text('Types: deb\n')
    how, result = run()
    assert result['refreshed'] is True and 'gpucluster-doca.sources' in result['reason']
    how, result = run({'force': True})
    assert result['refreshed'] is True and 'asked for' in result['reason']
    assert len(node.calls()) == 3


def test_check_mode_refreshes_nothing(node, run):
    node.index(age=7200)
    before = os.stat(str(node.stamp)).st_mtime
    how, result = run(check=True)
    assert result['stale'] is True and result['refreshed'] is False and node.calls() == []
    assert os.stat(str(node.stamp)).st_mtime == before


def test_a_failed_fetch_fails_and_leaves_the_stamp(node, run):
    node.index(age=7200)
    before = os.stat(str(node.stamp)).st_mtime
    node.answer('0\nW: Failed to fetch http://mirror.example/doca/InRelease  Could not resolve host: mirror.example\n'
                'W: Some index files failed to download. They have been ignored, or old ones used instead.\n')
    how, result = run()
    assert how == 'fail'
    assert result['msg'].startswith('apt_index: apt-get update did not refresh the index (the index is ')
    assert 'W: Failed to fetch http://mirror.example/doca/InRelease' in result['msg']
    assert os.stat(str(node.stamp)).st_mtime == before


def test_a_busy_lock_is_waited_for(node, run):
    node.index(age=7200)
    lock = '100\nE: Could not get lock /var/lib/apt/lists/lock. It is held by process 812 (apt-get)\n'
    node.answer(lock, lock, '0\nHit:1 http://deb.debian.org/debian bookworm InRelease\n')
    how, result = run()
    assert how == 'exit' and result['refreshed'] is True
    assert len(node.calls()) == 3


def test_a_lock_busy_past_the_timeout_fails(node, run):
    node.index(age=7200)
    node.answer('100\nE: Could not get lock /var/lib/apt/lists/lock. It is held by process 812 (apt-get)\n')
    how, result = run({'lock_timeout': 0})
    assert how == 'fail' and 'Could not get lock' in result['msg'] and len(node.calls()) == 1


def test_warnings_of_a_refresh_that_worked_are_shown(node, run):
    node.index(age=7200)
    node.answer('0\nW: https://x/InRelease: Key is stored in legacy trusted.gpg keyring\n')
    how, result = run()
    assert how == 'exit' and result['refreshed'] is True
    assert run.warned == ['apt-get update: W: https://x/InRelease: Key is stored in legacy trusted.gpg keyring']


@pytest.mark.parametrize('args, says', [
    ({'valid_for': -1}, 'valid_for must be 0 or more seconds, got -1'),
    ({'lock_timeout': -5}, 'lock_timeout must be 0 or more seconds, got -5'),
])
def test_bad_arguments(node, run, args, says):
    how, result = run(args)
    assert how == 'fail' and says in result['msg'] and node.calls() == []
