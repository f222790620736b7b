# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one atomic file writer of the collection.

Used on nodes by the health program (its node_exporter textfile, packed into the program's archive)
and on the controller by the drift audit's reports: a reader (node_exporter, a CI job, a person)
sees the old file or the new one, never half of one, and after a crash the new one is on disk or
the old one is still there. Standard library only; no Ansible imports.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import tempfile


def write_atomic(path, text, mode=0o644, prefix=None):
    """Write ``text`` (UTF-8) to ``path`` through a temporary file in the same directory: written,
    flushed and fsynced, given ``mode``, then renamed over ``path``; the directory is fsynced so the
    rename itself survives a crash. The temporary file is removed when anything fails."""
    directory = os.path.dirname(path) or '.'
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=prefix or '.%s.' % os.path.basename(path))
    try:
        with os.fdopen(fd, 'w', encoding='utf-8') as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    fsync_directory(directory)


def fsync_directory(directory):
    """fsync a directory, so that a rename in it survives a crash; a refusal of the file system is ignored."""
    try:
        dir_fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        # Some file systems (and platforms) refuse fsync on a directory; the data itself is synced.
        pass
    finally:
        os.close(dir_fd)
