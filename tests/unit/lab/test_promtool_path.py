# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""lab/promtool-path.sh, which `make promtool` and the storage scenario's textfile lint both call, possibly at the
same moment (make test runs them as two jobs): one fetch, both get a working promtool, a fetch that was cut off is
done again, and a failed fetch says what to set. Run with a stand-in apt-get that hands out a small .deb built here;
PATH holds only the tools the script needs, so a promtool installed on the machine cannot answer instead."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import shutil
import subprocess

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'lab', 'promtool-path.sh')
TOOLS = ('bash', 'sh', 'dirname', 'mkdir', 'mktemp', 'flock', 'rm', 'mv', 'dpkg-deb', 'tar', 'cat', 'sleep', 'cp',
         'xz', 'gzip', 'zstd', 'timeout')

APT_GET = """#!/bin/sh
# Stand-in for `apt-get download prometheus`: counts its calls, is slow enough for a second fetcher to wait on the
# first, and leaves the package in the current directory (or fails, when FAIL is set; hangs for HANG seconds).
echo "$@" >> "%(calls)s"
sleep ${HANG:-1}
[ -z "$FAIL" ] || exit 100
cp "%(deb)s" ./prometheus_2.42.0+ds-5_amd64.deb
"""


@pytest.fixture
def tree(tmp_path):
    if shutil.which('dpkg-deb') is None:
        pytest.fail('dpkg-deb is needed to build the stand-in package (Debian/Ubuntu controller)')
    root = tmp_path / 'tree'
    (root / 'lab').mkdir(parents=True)
    shutil.copy(SCRIPT, str(root / 'lab' / 'promtool-path.sh'))
    pkg = tmp_path / 'pkg'
    (pkg / 'DEBIAN').mkdir(parents=True)
    (pkg / 'DEBIAN' / 'control').write_text(
        'Package: prometheus\nVersion: 2.42.0+ds-5\nArchitecture: all\nMaintainer: test <t@example.org>\n'
        'Description: stand-in\n')
    (pkg / 'usr' / 'bin').mkdir(parents=True)
    (pkg / 'usr' / 'bin' / 'promtool').write_text('#!/bin/sh\necho "promtool, version 2.42.0+ds"\n')
    (pkg / 'usr' / 'bin' / 'promtool').chmod(0o755)
    deb = tmp_path / 'prometheus.deb'
    subprocess.run(['dpkg-deb', '--root-owner-group', '-b', str(pkg), str(deb)], check=True, stdout=subprocess.PIPE)
    bindir = tmp_path / 'bin'
    bindir.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        if found:
            os.symlink(found, str(bindir / tool))
    calls = tmp_path / 'apt-get.calls'
    (bindir / 'apt-get').write_text(APT_GET % {'calls': calls, 'deb': deb})
    (bindir / 'apt-get').chmod(0o755)
    env = {'PATH': str(bindir), 'HOME': str(tmp_path)}
    return root, env, calls


def _run(root, env, **extra):
    return subprocess.Popen(['bash', str(root / 'lab' / 'promtool-path.sh')], env=dict(env, **extra),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)


def test_promtool_from_the_environment_is_used_as_given_and_nothing_is_fetched(tree):
    root, env, calls = tree
    out, err = _run(root, env, PROMTOOL='/opt/prometheus/promtool').communicate()
    assert (out, err) == ('/opt/prometheus/promtool\n', '')
    assert not calls.exists()
    assert not (root / '.cache').exists()


def test_two_jobs_at_once_fetch_once_and_both_get_a_working_promtool(tree):
    root, env, calls = tree
    first, second = _run(root, env), _run(root, env)
    answers = [proc.communicate() + (proc.returncode,) for proc in (first, second)]
    cached = str(root / '.cache' / 'promtool' / 'usr' / 'bin' / 'promtool')
    assert answers == [(cached + '\n', '', 0)] * 2
    assert calls.read_text() == 'download prometheus\n'
    assert subprocess.check_output([cached], universal_newlines=True) == 'promtool, version 2.42.0+ds\n'
    # Only the cache and the lock are left: no half-unpacked directory beside them.
    assert sorted(os.listdir(str(root / '.cache'))) == ['promtool', 'promtool.lock']
    # The next call finds it without fetching.
    assert _run(root, env).communicate() == (cached + '\n', '')
    assert calls.read_text() == 'download prometheus\n'


def test_what_an_interrupted_fetch_left_is_replaced(tree):
    root, env, calls = tree
    (root / '.cache' / 'promtool' / 'deb').mkdir(parents=True)  # an older fetch stopped after making its directory
    proc = _run(root, env)
    out, err = proc.communicate()
    assert (proc.returncode, err) == (0, '')
    assert os.access(out.strip(), os.X_OK)
    assert calls.read_text() == 'download prometheus\n'


def test_a_failed_fetch_says_what_to_set_and_leaves_nothing_behind(tree):
    root, env, calls = tree
    proc = _run(root, env, FAIL='1')
    out, err = proc.communicate()
    assert (proc.returncode, out) == (2, '')
    assert err == ('promtool-path.sh: apt-get download prometheus failed or took longer than 300 s'
                   ' (PROMTOOL_FETCH_TIMEOUT); set PROMTOOL=/path/to/promtool\n')
    assert os.listdir(str(root / '.cache')) == ['promtool.lock']


def test_a_fetch_that_hangs_is_stopped_at_its_limit(tree):
    root, env, calls = tree
    proc = _run(root, env, HANG='60', PROMTOOL_FETCH_TIMEOUT='2')
    out, err = proc.communicate(timeout=30)
    assert (proc.returncode, out) == (2, '')
    assert 'took longer than 2 s (PROMTOOL_FETCH_TIMEOUT)' in err
    assert calls.read_text() == 'download prometheus\n'
    assert os.listdir(str(root / '.cache')) == ['promtool.lock']
