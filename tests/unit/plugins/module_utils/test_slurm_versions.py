# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""SchedMD's upgrade window (https://slurm.schedmd.com/upgrades.html#compatibility_window): the
table of that page, row by row, and what the role refuses."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.gpucluster.core.plugins.module_utils import slurm_versions as sv
from ansible_collections.gpucluster.core.plugins.filter import slurm_versions as fsv


# The guide's table "Compatible Prior Version", plus its text for 23.11 (two releases before 24.11).
@pytest.mark.parametrize('release, accepted', [
    ('23.02', ('22.05', '21.08')),
    ('23.11', ('23.02', '22.05')),
    ('24.05', ('23.11', '23.02')),
    ('24.11', ('24.05', '23.11', '23.02')),
    ('25.05', ('24.11', '24.05', '23.11')),
    ('25.11', ('25.05', '24.11', '24.05')),
    ('22.05', ('21.08', '20.11')),
    ('17.11', ('17.02',)),
    ('17.02', ()),
])
def test_window_is_the_guides_table(release, accepted):
    assert sv.window(release) == accepted


def test_window_of_an_unknown_release_is_a_key_error():
    with pytest.raises(KeyError):
        sv.window('22.06')


@pytest.mark.parametrize('version, major', [
    ('22.05.8', '22.05'),
    ('22.05.8-4+deb12u3', '22.05'),
    ('1:24.11.5-4+deb13u1', '24.11'),
    ('24.05.0rc1', '24.05'),
    ('22.05.8.1-0gpuclustertest1', '22.05'),
    (' 23.11.10 ', '23.11'),
    ('25.05', '25.05'),
])
def test_major_release(version, major):
    assert sv.major_release(version) == major


@pytest.mark.parametrize('version', ['', None, 'latest', '2.05.8', '22-05-8', 'slurm-22.05.8', '22.5.8'])
def test_major_release_refuses_what_is_not_a_version(version):
    with pytest.raises(sv.SlurmVersionError, match='is not a Slurm version: expected YY.MM.patch'):
        sv.major_release(version)


@pytest.mark.parametrize('installed, target, path', [
    ('22.05', '23.11', ['23.11']),
    ('22.05', '24.11', ['23.11', '24.11']),
    ('20.11', '23.11', ['22.05', '23.11']),      # the guide's own example
    ('20.11', '25.11', ['22.05', '23.11', '25.05', '25.11']),
    ('23.02', '25.05', ['24.11', '25.05']),
    ('24.05', '24.05', []),
    ('24.11', '23.11', []),
])
def test_upgrade_path_is_shortest_and_stays_in_each_window(installed, target, path):
    got = sv.upgrade_path(installed, target)
    assert got == path
    previous = installed
    for step in got:
        assert previous in sv.window(step)
        previous = step


@pytest.mark.parametrize('installed, target', [
    ('22.05.8-4+deb12u3', '22.05.9'),        # a maintenance release
    ('22.05.8-4+deb12u3', '22.05.8.1'),      # the lab's test double
    ('22.05.8', '23.02.7'),
    ('22.05.8', '23.11.10'),
    ('23.02.7', '24.11.5'),                   # three releases from 24.11 on
    ('23.11.10', '25.05.1'),
    ('24.05.4', '25.11.0'),
    ('', '24.11.5'),                          # nothing installed: a first install
    (None, '24.11.5'),
    ('24.11.5', '22.05.8'),                   # a downgrade: the downgrade checks judge it
    ('26.05.1', '26.05.3'),                   # one unknown major release, no window crossed
])
def test_changes_inside_the_window_are_accepted(installed, target):
    assert sv.upgrade_errors(installed, target) == []


def test_a_jump_outside_the_window_names_both_versions_and_the_release_between():
    errors = sv.upgrade_errors('22.05.8-4+deb12u3', '24.11.5')
    assert errors == [
        "slurm_version 24.11.5 is outside SchedMD's upgrade window from the installed 22.05.8: slurmdbd and "
        "slurmctld 24.11 accept the state of 24.05, 23.11 and 23.02 only, and a 22.05 state is refused at "
        "startup (https://slurm.schedmd.com/upgrades.html#compatibility_window). Go through 23.11 first: set "
        "slurm_version to a release of 23.11 and upgrade, then raise it to 24.11.5"]


@pytest.mark.parametrize('installed, target, through', [
    ('23.02.7', '25.05.1', 'Go through 24.11 first'),   # 25.05 reads 24.11, 24.05, 23.11: not 23.02
    ('22.05.8', '24.05.4', 'Go through 23.11 first'),   # 24.05 still reads two releases
    ('20.11.7', '25.11.1', 'Go through 22.05, then 23.11, then 25.05 first: set slurm_version to a release '
                           'of 22.05, then of 23.11, then of 25.05 and upgrade, then raise it to 25.11.1'),
    ('1:21.08.5-2', '23.11.4', 'Go through 23.02 first'),  # 23.02 reads 21.08, 23.11 reads 23.02
])
def test_jumps_outside_the_window(installed, target, through):
    errors = sv.upgrade_errors(installed, target)
    assert len(errors) == 1 and through in errors[0]
    assert 'from the installed %s' % installed.split(':')[-1].split('-')[0] in errors[0]


@pytest.mark.parametrize('installed, target, says', [
    ('22.05.8', '26.05.1', '26.05 is not a Slurm major release this collection knows'),
    ('16.05.9', '17.11.1', '16.05 is not a Slurm major release this collection knows'),
    ('16.05.9', '26.05.1', '16.05 and 26.05 are not a Slurm major release this collection knows'),
    ('22.05.8', '22.06.1', '22.06 is not a Slurm major release this collection knows'),
    ('22.05.8', 'latest', "slurm_version: 'latest' is not a Slurm version"),
    ('garbage', '24.11.5', "the installed Slurm cannot be read: 'garbage' is not a Slurm version"),
])
def test_what_cannot_be_judged_is_refused(installed, target, says):
    errors = sv.upgrade_errors(installed, target)
    assert len(errors) == 1 and says in errors[0], errors


_releases = st.sampled_from(sv.RELEASES)


@settings(max_examples=60)
@given(_releases, _releases, st.integers(min_value=0, max_value=20))
def test_refused_exactly_when_outside_the_window(have, want, patch):
    errors = sv.upgrade_errors('%s.%d-1' % (have, patch), '%s.%d' % (want, patch + 1))
    newer = sv.RELEASES.index(want) > sv.RELEASES.index(have)
    assert bool(errors) == (newer and have not in sv.window(want))
    if errors:
        # Every release the message sends the operator through is itself a step inside a window.
        assert 'Go through ' in errors[0] and have in errors[0] and want in errors[0]


@pytest.mark.parametrize('version, refused', [
    ('21.08.5', True), ('21.08.8-2', True), ('20.11.9', True),
    ('22.05.8', False), ('1:22.05.8-4+deb12u3', False), ('23.11.4', False), ('24.11.5', False), ('25.11.1', False),
    ('latest', False), ('', False),
])
def test_the_role_runs_slurm_22_05_and_newer(version, refused):
    errors = sv.support_errors(version, 'Ubuntu 22.04 (jammy)')
    assert bool(errors) == refused
    if refused:
        assert errors[0].startswith('slurm_version %s on Ubuntu 22.04 (jammy) is older than Slurm 22.05' % version)
        assert 'cgroup/v2' in errors[0] and 'slurm_apt_repository' in errors[0]


def test_the_filter_names_the_platform_from_the_facts():
    facts = {'distribution': 'Ubuntu', 'distribution_version': '22.04'}
    assert 'on Ubuntu 22.04 (jammy)' in fsv.slurm_support_errors('21.08.5', facts)[0]
    assert fsv.slurm_support_errors('23.11.4', facts) == []
    assert 'slurm_version 21.08.5 is older' in fsv.slurm_support_errors('21.08.5')[0]
    with pytest.raises(Exception, match='must be a string'):
        fsv.slurm_support_errors(['21.08.5'], facts)
