# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""bounded_read: regular files only, never more than the limit, never waiting on a FIFO or a hung call."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import threading
import time

import pytest

from ansible_collections.gpucluster.core.plugins.module_utils.bounded_read import (
    TimedOut, Unreadable, call_with_timeout, read_regular)


def test_reads_a_regular_file_up_to_its_limit(tmp_path):
    path = tmp_path / 'f'
    path.write_bytes(b'abcdef')
    assert read_regular(str(path), 6) == b'abcdef'
    assert read_regular(str(path), 4, head=True) == b'abcd'
    with pytest.raises(Unreadable, match=r'^it is larger than 5 bytes \(6 bytes\)$'):
        read_regular(str(path), 5)
    assert read_regular(str(tmp_path / 'missing'), 5) is None
    assert read_regular(str(path / 'below-a-file'), 5) is None


@pytest.mark.parametrize('make, words', [
    (lambda p: os.mkfifo(str(p)), 'it is a FIFO, not a regular file'),
    (lambda p: p.mkdir(), 'it is a directory, not a regular file'),
])
def test_what_is_not_a_regular_file_is_refused_at_once(tmp_path, make, words):
    path = tmp_path / 'x'
    make(path)
    started = time.time()
    with pytest.raises(Unreadable) as info:
        read_regular(str(path), 100)
    assert str(info.value) == words and time.time() - started < 5


def test_a_nul_byte_is_refused():
    with pytest.raises(Unreadable, match='NUL byte'):
        read_regular('/etc/os-release\x00', 100)


def test_call_with_timeout_gives_up_a_call_that_hangs():
    release = threading.Event()
    started = time.time()
    with pytest.raises(TimedOut):
        call_with_timeout(release.wait, 0.2, 30)
    assert time.time() - started < 5
    release.set()
    assert call_with_timeout(lambda a, b: a + b, 5, 1, 2) == 3
    with pytest.raises(ZeroDivisionError):
        call_with_timeout(lambda: 1 // 0, 5)
    assert call_with_timeout(lambda: 'same thread', None) == 'same thread'
