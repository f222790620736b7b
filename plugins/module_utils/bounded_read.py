# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reading a file of a node that may be anything: a FIFO, a device, a huge file or one on a hung mount.

:func:`read_regular` opens without blocking (a FIFO with no writer, a tty, a device never wait), reads
only a regular file, and never more than ``limit`` bytes. :func:`call_with_timeout` runs a call that
can block in the kernel (a stat or a read on an NFS mount whose server is gone) in a daemon thread
and gives up after ``timeout`` seconds: the caller reports the path as unreadable and goes on; the
stuck thread ends with the process.

Standard library only, no Ansible imports, Python 3.9.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import errno
import os
import stat
import threading

_KINDS = (
    (stat.S_ISDIR, 'a directory'),
    (stat.S_ISFIFO, 'a FIFO'),
    (stat.S_ISCHR, 'a character device'),
    (stat.S_ISBLK, 'a block device'),
    (stat.S_ISSOCK, 'a socket'),
    (stat.S_ISLNK, 'a symbolic link'),
)


class Unreadable(Exception):
    """A path that exists but is not read: the message says why (it names no path; the caller does)."""


def kind_of(mode):
    """'a FIFO', 'a directory', ... for an ``st_mode``; 'a regular file' for one."""
    if stat.S_ISREG(mode):
        return 'a regular file'
    for test, name in _KINDS:
        if test(mode):
            return name
    return 'not a regular file'


def read_regular(path, limit, head=False):
    """The bytes of the regular file at ``path`` (a symbolic link is followed), or None when it does not exist.

    At most ``limit`` bytes are read. A larger file raises :class:`Unreadable`, or with ``head`` gives its first
    ``limit`` bytes. Anything but a regular file (FIFO, device, socket, directory) raises :class:`Unreadable`
    without being waited on; so does a path holding a NUL byte and an error of the system.
    """
    nul = '\x00' if isinstance(path, str) else b'\x00'
    if nul in path:
        raise Unreadable('the path holds a NUL byte')
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, 'O_NOCTTY', 0))
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return None
        try:
            kind = kind_of(os.stat(path).st_mode)
        except OSError:
            kind = None
        if kind not in (None, 'a regular file'):
            # A socket cannot be opened at all (ENXIO): name what it is.
            raise Unreadable('it is %s, not a regular file' % kind)
        raise Unreadable(exc.strerror or str(exc))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Unreadable('it is %s, not a regular file' % kind_of(info.st_mode))
        if info.st_size > limit and not head:
            raise Unreadable('it is larger than %d bytes (%d bytes)' % (limit, info.st_size))
        chunks = []
        left = limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 65536))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise Unreadable(exc.strerror or str(exc))
    finally:
        os.close(fd)
    data = b''.join(chunks)
    if len(data) > limit:
        # The size grew after fstat (a log being written) or the file system reports none (procfs).
        if not head:
            raise Unreadable('it is larger than %d bytes' % limit)
        data = data[:limit]
    return data


class TimedOut(Exception):
    """The call did not return within its time."""


def call_with_timeout(function, timeout, *args):
    """``function(*args)`` run in a daemon thread; its result, its exception raised again, or
    :class:`TimedOut` after ``timeout`` seconds (None: wait, in this thread)."""
    if timeout is None:
        return function(*args)
    outcome = {}

    def target():
        try:
            outcome['value'] = function(*args)
        except BaseException as exc:  # handed back to the caller below
            outcome['error'] = exc

    worker = threading.Thread(target=target, name='bounded-read')
    worker.daemon = True
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise TimedOut('no answer within %s s' % timeout)
    if 'error' in outcome:
        raise outcome['error']
    return outcome.get('value')
