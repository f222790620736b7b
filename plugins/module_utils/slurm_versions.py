# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Slurm's major releases and SchedMD's upgrade window: which version change keeps the state.

SchedMD's upgrade guide (https://slurm.schedmd.com/upgrades.html, "Compatibility Window"; the page's
source is doc/html/upgrades.shtml in SchedMD/slurm, last modified 18 July 2024): slurmdbd and
slurmctld accept the RPCs, state files and database records of the previous TWO major releases; from
24.11 on, of the previous THREE (24.11 reads 24.05, 23.11 and 23.02; 25.05 reads 24.11, 24.05 and
23.11; 25.11 reads 25.05, 24.11 and 24.05). "Upgrades from incompatible versions will fail
immediately upon startup": a jump outside the window must go through an intermediate release
("instead of upgrading directly from Slurm 20.11 to 23.11, first upgrade all systems to Slurm
22.05").

The release list and the window rule live here and nowhere else; the filter
``gpucluster.core.slurm_upgrade_errors`` (plugins/filter/slurm_versions.py) adapts them for the
slurm role's preflight and upgrade tasks and for playbooks/rolling_upgrade.yml. Pure functions,
standard library only, Python 3.6+.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re

# Major releases, oldest first (YY.MM, the year and month of the release). Before 24.05 SchedMD
# released every nine months, from 24.05 on every six. A release missing here cannot be judged:
# add it, with its window, when SchedMD publishes it.
RELEASES = ('17.02', '17.11', '18.08', '19.05', '20.02', '20.11', '21.08', '22.05', '23.02', '23.11',
            '24.05', '24.11', '25.05', '25.11')
# From this release on, three previous releases are accepted; before it, two.
THREE_RELEASE_WINDOW_FROM = '24.11'
GUIDE_URL = 'https://slurm.schedmd.com/upgrades.html#compatibility_window'
# The oldest release the slurm role runs. Slurm gained its cgroup/v2 plugin and CgroupPlugin=autodetect in 22.05:
# the cgroup.conf(5) of 21.08.5 (Ubuntu 22.04's, https://manpages.ubuntu.com/manpages/jammy/en/man5/cgroup.conf.5.html)
# knows only per-controller cgroup v1 mounts under /sys/fs/cgroup/<controller>, that of 22.05.8
# (https://manpages.ubuntu.com/manpages/lunar/en/man5/cgroup.conf.5.html) names cgroup/v2; SchedMD's cgroup v2
# guide: https://slurm.schedmd.com/cgroup_v2.html. Ubuntu 22.04 and Debian 12 boot the unified (v2) hierarchy, so
# an older slurmd with task/cgroup cannot start there, and the cgroup.conf the role writes names the plugin.
MINIMUM_RELEASE = '22.05'

# Upstream version as the packages carry it: an optional epoch, YY.MM.patch (with more dotted parts
# or an rc suffix allowed), then the Debian/RPM revision after "-".
_VERSION_RE = re.compile(r'^(?:[0-9]+:)?(?P<major>[0-9]{2}\.[0-9]{2})(?P<rest>[.0-9A-Za-z~+_]*)(?:-.*)?$')


class SlurmVersionError(ValueError):
    """A version string that is not YY.MM[.patch...] (the message names it)."""


def major_release(version):
    """'22.05' from '22.05.8', '1:22.05.8-4+deb12u3', '24.05.0rc1'; SlurmVersionError otherwise."""
    text = str(version if version is not None else '').strip()
    match = _VERSION_RE.match(text)
    if not match:
        raise SlurmVersionError('%r is not a Slurm version: expected YY.MM.patch such as 22.05.8 or 24.11.5 '
                                '(a package version such as 22.05.8-4+deb12u3 is read too)' % (text,))
    return match.group('major')


def window(release):
    """The releases whose state ``release`` accepts (previous ones, newest first); KeyError if unknown."""
    index = RELEASES.index(release) if release in RELEASES else None
    if index is None:
        raise KeyError(release)
    width = 3 if _key(release) >= _key(THREE_RELEASE_WINDOW_FROM) else 2
    return tuple(reversed(RELEASES[max(0, index - width):index]))


def _key(release):
    year, month = release.split('.')
    return int(year), int(month)


def upgrade_path(installed, target):
    """Major releases to install in turn to go from ``installed`` to ``target`` (both YY.MM, known).

    The last item is ``target``; every step stays inside the next release's window. Each step goes
    as far as the window allows, so the path is a shortest one. Empty when ``target`` is not newer.
    """
    if _key(target) <= _key(installed):
        return []
    path = []
    current = installed
    while current != target:
        reachable = [r for r in RELEASES if _key(current) < _key(r) <= _key(target) and current in window(r)]
        if not reachable:  # pragma: no cover - every known release is in the window of the next one
            raise SlurmVersionError('no upgrade path from %s to %s' % (current, target))
        current = reachable[-1]
        path.append(current)
    return path


def upgrade_errors(installed, target):
    """Why going from the installed Slurm to ``target`` would lose the cluster's state ([] when it would not).

    ``installed``: the installed package version (empty or None: nothing installed, nothing to
    check); ``target``: the slurm_version pin. A change inside one major release, or to an older
    one (the downgrade checks judge that), is not judged here. A version that cannot be read, and a
    major release this module does not know, are refused: their window cannot be checked.
    """
    if installed is None or not str(installed).strip():
        return []
    try:
        want = major_release(target)
    except SlurmVersionError as exc:
        return ['slurm_version: %s' % exc]
    try:
        have = major_release(installed)
    except SlurmVersionError as exc:
        return ['the installed Slurm cannot be read: %s' % exc]
    if want == have or _key(want) < _key(have):
        return []
    unknown = [r for r in (have, want) if r not in RELEASES]
    if unknown:
        return ['slurm_version %s (from the installed %s): %s not a Slurm major release this collection knows '
                '(known: %s), so SchedMD\'s upgrade window cannot be checked (%s)'
                % (str(target).strip(), _upstream(installed), ' and '.join(unknown) + (' is' if len(unknown) == 1 else ' are'),
                   ', '.join(RELEASES), GUIDE_URL)]
    accepted = window(want)
    if have in accepted:
        return []
    path = upgrade_path(have, want)
    steps = path[:-1]
    return ['slurm_version %s is outside SchedMD\'s upgrade window from the installed %s: slurmdbd and slurmctld '
            '%s accept the state of %s only, and a %s state is refused at startup (%s). Go through %s first: '
            'set slurm_version to a release of %s and upgrade, then raise it to %s'
            % (str(target).strip(), _upstream(installed), want, _join(accepted), have, GUIDE_URL,
               ', then '.join(steps), ', then of '.join(steps), str(target).strip())]


def _upstream(version):
    """The upstream part of a package version: '22.05.8' of '1:22.05.8-4+deb12u3'."""
    text = str(version).strip()
    text = text.split(':', 1)[1] if re.match(r'^[0-9]+:', text) else text
    return text.split('-', 1)[0]


def _join(items):
    items = list(items)
    if len(items) < 2:
        return ''.join(items)
    return '%s and %s' % (', '.join(items[:-1]), items[-1])


def support_errors(version, platform='', repository='slurm_apt_repository'):
    """Why the slurm role cannot run Slurm ``version`` ([] when it can): a release older than MINIMUM_RELEASE.
    ``platform`` ('Ubuntu 22.04 (jammy)'), when given, names where the version comes from. A version that is
    no Slurm version is left to the checks that name it."""
    try:
        release = major_release(version)
    except SlurmVersionError:
        return []
    if _key(release) >= _key(MINIMUM_RELEASE):
        return []
    return ['slurm_version %s%s is older than Slurm %s, the oldest release the slurm role runs: Slurm gained its '
            'cgroup/v2 plugin in %s, and on a host that boots the unified cgroup hierarchy (Ubuntu 22.04, Debian 12 '
            'and later) an older slurmd with task/cgroup does not start. Add a package repository with Slurm %s or '
            'newer (%s) and set slurm_version to its version, or run a release whose archive has one (Debian 12, '
            'Debian 13, Ubuntu 24.04: docs/platforms.md)'
            % (str(version).strip(), (' on %s' % platform) if platform else '', MINIMUM_RELEASE, MINIMUM_RELEASE,
               MINIMUM_RELEASE, repository)]
