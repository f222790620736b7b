# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The filter the roles' installs read (plugins/filter/packages.py): it adapts converged_state's decision only."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.gpucluster.core.plugins.filter import packages

SEEN = {'restic': {'version': '0.14.0-1+b5', 'held': True}, 'openssh-client': {'version': '1:9.2p1-2', 'held': False}}


def test_the_filter_is_the_decision():
    installed = packages.FilterModule().filters()['apt_request_installed']
    assert installed(['restic=0.14.0-*', 'openssh-client'], SEEN) is True
    # The converged check's result without packages (the fingerprint could not be computed) runs the install.
    assert installed(['restic=0.14.0-*'], {}) is False
    assert installed('openssh-client=9.2p1-*', SEEN) is False
