# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Bounds on what the GPU health code quotes and reads, defined once.

- :func:`clip` (and :func:`quote`, its ``repr`` form): every value an error or a finding quotes (a GPU id, a field, a path, a command's
  output, a configuration value) goes through it, so a 20 MB field never becomes a 20 MB message.
- :func:`open_regular` / :func:`read_regular`: every file the health code reads (the health
  program's configuration, a kernel log file, sysfs attributes) is opened without blocking and
  refused unless it is a regular file, then read with a size bound, so a FIFO, a device such as
  ``/dev/zero`` or a directory never hangs a run or fills its memory.

Pure code, standard library only, no Ansible imports (the node health program packs it). Python 3.9+.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import errno
import os
import stat

# Characters of a quoted value kept in a message; the rest is replaced by a note of how much was cut.
QUOTE_MAX = 200


def clip(value, limit=QUOTE_MAX):
    """``value`` as text of at most ``limit`` characters (plus a note of how many were cut).

    Strings are quoted as they are; anything else as its ``repr`` (bounded the same way). Used by every
    message of the GPU health code that quotes something it did not write itself.
    """
    if not isinstance(value, str):
        try:
            value = repr(value)
        except Exception:  # pylint: disable=broad-except
            value = '<%s>' % type(value).__name__
    if len(value) <= limit:
        return value
    return '%s... (%d characters cut)' % (value[:limit], len(value) - limit)


def quote(value, limit=QUOTE_MAX):
    """``repr(value)`` (strings in quotes, escapes visible), shortened like :func:`clip`."""
    try:
        text = repr(value)
    except Exception:  # pylint: disable=broad-except
        text = '<%s>' % type(value).__name__
    return clip(text, limit)


class NotRegularFile(OSError):
    """The path exists but is not a regular file (a FIFO, a device, a directory, a socket)."""


_KINDS = (
    (stat.S_ISFIFO, 'a FIFO'),
    (stat.S_ISCHR, 'a character device'),
    (stat.S_ISBLK, 'a block device'),
    (stat.S_ISDIR, 'a directory'),
    (stat.S_ISSOCK, 'a socket'),
)


def file_kind(mode):
    """'a FIFO', 'a directory'... for a st_mode that is not a regular file, else None."""
    if stat.S_ISREG(mode):
        return None
    for test, name in _KINDS:
        if test(mode):
            return name
    return 'not a regular file'


def open_regular(path):
    """A binary file object for ``path``, refused (NotRegularFile) unless it is a regular file.

    The file is opened with O_NONBLOCK (opening a FIFO without a writer then returns at once instead of
    waiting for one) and checked with fstat on the open descriptor (no race between check and open); the
    descriptor is then switched back to blocking reads, which regular files never need to wait for.
    Other OSErrors (missing, permission denied) propagate unchanged.
    """
    flags = os.O_RDONLY | getattr(os, 'O_NONBLOCK', 0) | getattr(os, 'O_NOCTTY', 0) | getattr(os, 'O_CLOEXEC', 0)
    fd = os.open(path, flags)
    try:
        kind = file_kind(os.fstat(fd).st_mode)
        if kind is not None:
            raise NotRegularFile(errno.EINVAL, 'not a regular file (%s)' % kind, path)
        if hasattr(os, 'set_blocking'):
            os.set_blocking(fd, True)
        return os.fdopen(fd, 'rb')
    except BaseException:
        os.close(fd)
        raise


class TooLarge(ValueError):
    """A file is larger than the bound it is read with."""


def read_regular(path, max_bytes):
    """The bytes of the regular file ``path``, at most ``max_bytes``: TooLarge beyond that.

    NotRegularFile / OSError as :func:`open_regular`. Reads at most ``max_bytes + 1`` bytes whatever the
    file claims its size is (sysfs and /proc report 0).
    """
    with open_regular(path) as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise TooLarge('%s is larger than %d bytes' % (path, max_bytes))
    return data
