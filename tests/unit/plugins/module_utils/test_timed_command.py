# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""module_utils/timed_command.py: the command's exit counts, output is bounded, a timeout kills the group."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import time

import pytest

from ansible_collections.gpucluster.core.plugins.module_utils import timed_command as tc


@pytest.mark.parametrize('script, rc, out, err, leftover', [
    ('echo hi; echo err >&2; exit 3', 3, b'hi\n', b'err\n', False),
    ('printf "\\377"', 0, b'\xff', b'', False),
    # A background child keeps stdout open: the command is done, the drain ends, the child goes.
    ('echo done; sleep 30 &', 0, b'done\n', b'', True),
])
def test_run_bounded_results(script, rc, out, err, leftover):
    started = time.monotonic()
    got = tc.run_bounded(['sh', '-c', script], 20, drain=1)
    assert got[:3] == (rc, out, err)
    assert got[3] == {'timed_out': False, 'cut': [], 'leftover': leftover}
    assert time.monotonic() - started < 10


def test_run_bounded_timeout_kills_the_group():
    started = time.monotonic()
    rc, _out, _err, state = tc.run_bounded(['sh', '-c', 'sleep 30 & sleep 30'], 1)
    assert (rc, state['timed_out']) == (None, True)
    assert time.monotonic() - started < 8


def test_run_bounded_cuts_both_streams():
    rc, out, err, state = tc.run_bounded(['sh', '-c', 'head -c 5000 /dev/zero; head -c 5000 /dev/zero >&2'], 20,
                                         max_bytes=100)
    assert (rc, len(out), state['cut']) == (0, 100, ['stdout', 'stderr'])
    assert err.endswith(b'gpucluster: stdout cut after 100 bytes (the command printed more)\n'
                        b'gpucluster: stderr cut after 100 bytes (the command printed more)')


def test_run_bounded_cannot_start():
    with pytest.raises(OSError):
        tc.run_bounded(['/nonexistent/program'], 5)
