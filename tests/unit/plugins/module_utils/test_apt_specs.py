# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether an apt install would change nothing, judged as ansible.builtin.apt's state=present judges it."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible_collections.gpucluster.core.plugins.module_utils import apt_specs

OBSERVED = {'restic': {'version': '0.14.0-1+b5', 'held': True}, 'chrony': {'version': '4.3-2+deb12u1', 'held': False},
            'munge': {'version': None, 'held': False}}


@pytest.mark.parametrize('spec, versions, satisfied', [
    ('chrony', ['4.3-2+deb12u1'], True),
    # apt's version wildcards are fnmatch patterns over the whole version.
    ('restic=0.14.0-*', ['0.14.0-1+b5'], True),
    ('restic=0.14.*', ['0.14.0-1+b5'], True),
    ('restic=0.14.0-1+b5', ['0.14.0-1+b5'], True),
    ('restic=0.14.0', ['0.14.0-1+b5'], False),
    ('restic=0.14.0-?', ['0.14.0-1+b5'], False),
    # Every package of the name on the node's architecture must be installed at a matching version.
    ('libnccl2=2.21.5-1+cuda12.4', ['2.21.5-1+cuda12.4', '2.21.5-1+cuda12.4'], True),
    ('libnccl2=2.21.5-1+cuda12.4', ['2.21.5-1+cuda12.4', None], False),
    ('libnccl2', ['2.21.5-1+cuda12.4', '2.20.3-1+cuda12.2'], True),
    # Not installed, or a form this does not judge as apt does: the install runs.
    ('chrony', [], False),
    ('chrony', None, False),
    ('chrony', [None], False),
    ('chrony', [''], False),
    ('restic>=0.14.0', ['0.14.0-1+b5'], False),
    ('restic==0.14.0', ['0.14.0-1+b5'], False),
    ('restic=', ['0.14.0-1+b5'], False),
    ('chrony:amd64', ['4.3-2+deb12u1'], False),
    ('chron*', ['4.3-2+deb12u1'], False),
    ('Chrony', ['4.3-2+deb12u1'], False),
    (None, ['1'], False),
])
def test_a_spec_is_satisfied_only_as_apt_would_leave_it(spec, versions, satisfied):
    assert apt_specs.spec_satisfied(spec, versions) is satisfied


@pytest.mark.parametrize('request_, installed', [
    ('chrony', True),
    (['chrony'], True),
    (['restic=0.14.0-*', 'chrony'], True),
    (['restic=0.15.0-*', 'chrony'], False),
    # One name not installed, or not observed at all (a virtual package, one the fast path does not list).
    (['chrony', 'munge'], False),
    (['nfs-common'], False),
    (['restic>=0.14.0'], False),
    ([], False),
    ('', False),
    ([None], False),
    ({'chrony': 1}, False),
])
def test_an_install_that_would_change_nothing(request_, installed):
    assert apt_specs.request_installed(request_, OBSERVED) is installed


@pytest.mark.parametrize('packages', [None, [], 'chrony', {'chrony': '4.3'}, {'chrony': {'version': 4.3}},
                                      {'chrony': {'version': ''}}])
def test_an_observation_that_cannot_be_read_runs_the_install(packages):
    assert apt_specs.request_installed(['chrony'], packages) is False
