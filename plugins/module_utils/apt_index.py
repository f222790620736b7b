# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether apt's package index needs a refresh, and whether a refresh worked: decisions, no I/O.

The module gpucluster.core.apt_index reads a few file times and names (no package cache is opened) and
runs ``apt-get update`` only when ``staleness`` says so. The index counts as fresh only when all hold:

- the lists under /var/lib/apt/lists hold at least one package index (an image whose lists were emptied
  has none, whatever the directory's time says: the trap of judging by the directory's mtime alone);
- /var/lib/apt/periodic/update-success-stamp exists (the module touches it after each refresh that worked,
  as Ubuntu's update-notifier hook does, and Ansible's own apt module reads it for cache_valid_time);
- no package source (sources.list, a file of sources.list.d or that directory itself) changed after it: a
  source added or edited since, by a role or by hand, is fetched now (its ctime counts, which an mtime kept
  by a copy or a package cannot hide);
- it is not dated in the future and is at most ``valid_for`` seconds old.

Standard library only, Python 3.9+.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

STAMP = '/var/lib/apt/periodic/update-success-stamp'
LISTS_DIR = '/var/lib/apt/lists'
SOURCES = ('/etc/apt/sources.list', '/etc/apt/sources.list.d')
# A stamp up to this far ahead of the clock is taken as now (a clock stepped back by NTP a little).
FUTURE_SLACK = 300
MAX_NAMES_SHOWN = 4

# apt-get update output lines that mean a source was not read: apt keeps the old lists of that source and
# exits 0 for some of them, so the exit status alone would let a stale or unsigned source pass as refreshed.
FAILURE_MARKS = ('E:', 'W: Failed to fetch', 'W: Some index files failed to download', 'W: GPG error',
                 'W: The repository')
LOCK_MARKS = ('Could not get lock', 'Unable to lock', 'Unable to acquire the dpkg frontend lock')


def has_package_index(names):
    """Whether the file names of /var/lib/apt/lists include a package index (``..._Packages``, compressed or not)."""
    return any('_Packages' in str(name) for name in names or [])


def staleness(now, valid_for, stamp_time, index_present, sources, force=False):
    """(stale, reason). ``stamp_time``: the stamp's mtime, or None when it does not exist; ``sources``: a list
    of (path, time) with time the later of the path's mtime and ctime."""
    if force:
        return True, 'a refresh was asked for (a package source was added or changed in this run)'
    if valid_for <= 0:
        return True, 'valid_for is %d: every run refreshes' % valid_for
    if not index_present:
        return True, 'the package lists under %s hold no package index' % LISTS_DIR
    if stamp_time is None:
        return True, 'no refresh is on record (%s does not exist)' % STAMP
    if stamp_time > now + FUTURE_SLACK:
        return True, 'the last refresh is dated %d s in the future (the clock was set back): its age is unknown' % (
            int(stamp_time - now))
    newer = sorted(path for path, when in sources or [] if when > stamp_time)
    if newer:
        more = len(newer) - MAX_NAMES_SHOWN
        shown = ', '.join(newer[:MAX_NAMES_SHOWN]) + (' and %d more' % more if more > 0 else '')
        return True, 'package sources changed after the last refresh: %s' % shown
    age = max(0, int(now - stamp_time))
    if age > valid_for:
        return True, 'the index is %d s old, older than valid_for=%d' % (age, valid_for)
    return False, 'the index is %d s old (valid for %d s)' % (age, valid_for)


def refresh_problems(rc, output):
    """The lines of ``apt-get update`` output (LC_ALL=C) that say a source was not read; with a non-zero exit
    status and no such line, one line saying so."""
    lines = [line.strip() for line in (output or '').splitlines()]
    problems = [line for line in lines if line.startswith(FAILURE_MARKS)]
    if rc != 0 and not problems:
        problems = ['apt-get update exited %d' % rc]
    return problems


def lock_busy(problems):
    """Whether every problem is another apt or dpkg process holding the lock (worth waiting for)."""
    errors = [p for p in problems if p.startswith('E:')]
    return bool(errors) and all(any(mark in p for mark in LOCK_MARKS) for p in errors)


def refresh_warnings(output):
    """The warning lines of a refresh that worked (a source configured twice, a key in the legacy keyring)."""
    return [line.strip() for line in (output or '').splitlines()
            if line.strip().startswith('W:') and not line.strip().startswith(FAILURE_MARKS)]
