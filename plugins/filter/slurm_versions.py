# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""SchedMD's Slurm upgrade window for the slurm role and playbooks/rolling_upgrade.yml: a thin
adapter over module_utils/slurm_versions.py, which holds the release list and the rule."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.gpucluster.core.plugins.module_utils import platforms, slurm_versions

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - only without ansible-core installed
    class AnsibleFilterError(Exception):
        pass


def slurm_upgrade_errors(target, installed):
    """``slurm_version | gpucluster.core.slurm_upgrade_errors(installed)``: messages, [] when the change keeps the state.

    ``installed``: the installed package version (dpkg-query's ``${Version}``, or the drift facts'
    ``slurm``); empty when Slurm is not installed.
    """
    if target is None or isinstance(target, (dict, list, bool)):
        raise AnsibleFilterError('slurm_upgrade_errors: the version to install must be a string such as 24.11.5, got %r'
                                 % (target,))
    if installed is not None and isinstance(installed, (dict, list, bool)):
        raise AnsibleFilterError('slurm_upgrade_errors: the installed version must be a string (empty when none), got %r'
                                 % (installed,))
    return slurm_versions.upgrade_errors(installed, str(target))


def slurm_support_errors(version, facts=None, repository='slurm_apt_repository'):
    """``slurm_version | gpucluster.core.slurm_support_errors(ansible_facts)``: [] when the slurm role runs that
    release (module_utils/slurm_versions.py support_errors); the facts name the platform in the message."""
    if version is None or isinstance(version, (dict, list, bool)):
        raise AnsibleFilterError('slurm_support_errors: the version must be a string such as 24.11.5, got %r' % (version,))
    if facts is not None and not hasattr(facts, 'get'):
        raise AnsibleFilterError('slurm_support_errors: the facts must be a mapping such as ansible_facts')
    facts = facts or {}
    platform = platforms.release_name(facts.get('distribution'), facts.get('distribution_version')) if facts else ''
    return slurm_versions.support_errors(str(version), platform, str(repository))


class FilterModule(object):
    def filters(self):
        return {'slurm_upgrade_errors': slurm_upgrade_errors, 'slurm_support_errors': slurm_support_errors}
