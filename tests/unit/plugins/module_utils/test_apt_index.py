# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""apt_index decisions: when the package index counts as fresh, and when a refresh counts as done."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.gpucluster.core.plugins.module_utils import apt_index as ai

NOW = 1_800_000_000.0
LISTS = ['deb.debian.org_debian_dists_bookworm_InRelease', 'deb.debian.org_debian_dists_bookworm_main_binary-amd64_Packages',
         'lock', 'partial']
SRC = [('/etc/apt/sources.list.d', NOW - 86400), ('/etc/apt/sources.list.d/debian.sources', NOW - 86400)]

CASES = [
    # (valid_for, stamp, index present, sources, force) -> stale, reason fragment
    (3600, NOW - 600, True, SRC, False, False, 'the index is 600 s old (valid for 3600 s)'),
    (3600, NOW - 3600, True, SRC, False, False, 'the index is 3600 s old'),
    (3600, NOW - 3601, True, SRC, False, True, 'the index is 3601 s old, older than valid_for=3600'),
    (3600, NOW - 600, True, SRC, True, True, 'a refresh was asked for'),
    (0, NOW, True, SRC, False, True, 'valid_for is 0: every run refreshes'),
    # The lab image's trap: lists emptied (whatever their directory's time), or a stamp that never existed.
    (3600, NOW - 600, False, SRC, False, True, 'hold no package index'),
    (3600, None, True, SRC, False, True, 'no refresh is on record (/var/lib/apt/periodic/update-success-stamp does not exist)'),
    # A source added or changed after the last refresh, by a role or by hand.
    (3600, NOW - 600, True, SRC + [('/etc/apt/sources.list.d/gpucluster-doca.sources', NOW - 60)], False, True,
     'package sources changed after the last refresh: /etc/apt/sources.list.d/gpucluster-doca.sources'),
    (3600, NOW - 600, True, [('/etc/apt/sources.list.d', NOW - 10)], False, True, 'changed after the last refresh'),
    # A clock set back: the age is unknown.
    (3600, NOW + 3600, True, SRC, False, True, 'dated 3600 s in the future'),
    (3600, NOW + 100, True, SRC, False, False, 'the index is 0 s old'),
]


@pytest.mark.parametrize('valid_for, stamp, index, sources, force, stale, reason', CASES)
def test_staleness(valid_for, stamp, index, sources, force, stale, reason):
    got, why = ai.staleness(NOW, valid_for, stamp, index, sources, force=force)
    assert got is stale
    assert reason in why


def test_many_changed_sources_are_cut_short():
    sources = [('/etc/apt/sources.list.d/s%d.list' % i, NOW) for i in range(7)]
    stale, why = ai.staleness(NOW, 3600, NOW - 60, True, sources)
    assert stale and why.endswith('and 3 more')


@pytest.mark.parametrize('names, present', [
    (LISTS, True),
    (['archive.ubuntu.com_ubuntu_dists_noble_main_binary-amd64_Packages.lz4'], True),
    (['lock', 'partial'], False),
    (['deb.debian.org_debian_dists_bookworm_InRelease'], False),
    ([], False),
    (None, False),
])
def test_a_package_index_is_a_packages_file(names, present):
    assert ai.has_package_index(names) is present


@settings(max_examples=80)
@given(st.integers(min_value=1, max_value=86400 * 30), st.floats(min_value=0, max_value=86400 * 60),
       st.lists(st.floats(min_value=0, max_value=86400 * 60), max_size=4))
def test_fresh_only_when_young_and_no_source_is_newer(valid_for, age, source_ages):
    stamp = NOW - age
    sources = [('/etc/apt/sources.list.d/s%d' % i, NOW - a) for i, a in enumerate(source_ages)]
    stale, _why = ai.staleness(NOW, valid_for, stamp, True, sources)
    fresh = int(age) <= valid_for and all(NOW - a <= stamp for a in source_ages)
    assert stale is not fresh


OK_OUTPUT = ('Hit:1 http://deb.debian.org/debian bookworm InRelease\n'
             'Get:2 http://deb.debian.org/debian bookworm-updates InRelease [55.4 kB]\n'
             'Fetched 55.4 kB in 1s (60.2 kB/s)\nReading package lists...\n')


@pytest.mark.parametrize('rc, output, problems', [
    (0, OK_OUTPUT, []),
    (0, OK_OUTPUT + 'W: Target Packages (main/binary-amd64/Packages) is configured multiple times in a.list:1 and b.list:1\n', []),
    (100, 'E: Could not get lock /var/lib/apt/lists/lock. It is held by process 812 (apt-get)\n'
          'E: Unable to lock directory /var/lib/apt/lists/\n',
     ['E: Could not get lock /var/lib/apt/lists/lock. It is held by process 812 (apt-get)',
      'E: Unable to lock directory /var/lib/apt/lists/']),
    # apt keeps the old lists of a source it could not fetch, and may still exit 0.
    (0, 'Err:3 http://mirror.example/doca ./ InRelease\n  Could not resolve host\n'
        'W: Failed to fetch http://mirror.example/doca/./InRelease  Could not resolve host: mirror.example\n'
        'W: Some index files failed to download. They have been ignored, or old ones used instead.\n',
     ['W: Failed to fetch http://mirror.example/doca/./InRelease  Could not resolve host: mirror.example',
      'W: Some index files failed to download. They have been ignored, or old ones used instead.']),
    (0, 'W: GPG error: https://repo.example stable InRelease: NO_PUBKEY 0123456789ABCDEF\n',
     ['W: GPG error: https://repo.example stable InRelease: NO_PUBKEY 0123456789ABCDEF']),
    (100, 'E: The repository \'https://repo.example stable InRelease\' is not signed.\n',
     ["E: The repository 'https://repo.example stable InRelease' is not signed."]),
    (1, '', ['apt-get update exited 1']),
])
def test_refresh_problems(rc, output, problems):
    assert ai.refresh_problems(rc, output) == problems


def test_only_a_busy_lock_is_worth_waiting_for():
    busy = ai.refresh_problems(100, 'E: Could not get lock /var/lib/apt/lists/lock. It is held by process 812 (apt-get)\n'
                                    'E: Unable to lock directory /var/lib/apt/lists/\n')
    assert ai.lock_busy(busy)
    assert not ai.lock_busy(ai.refresh_problems(0, 'W: GPG error: x: NO_PUBKEY 1\n'))
    assert not ai.lock_busy(ai.refresh_problems(100, 'E: Could not get lock x\nE: The repository y is not signed.\n'))
    assert not ai.lock_busy([])


def test_warnings_of_a_refresh_that_worked():
    out = OK_OUTPUT + 'W: https://x/InRelease: Key is stored in legacy trusted.gpg keyring\nW: Failed to fetch y\n'
    assert ai.refresh_warnings(out) == ['W: https://x/InRelease: Key is stored in legacy trusted.gpg keyring']
