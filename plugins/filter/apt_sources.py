# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A site's own APT repository as the roles take it (options of ansible.builtin.deb822_repository): a thin
adapter over module_utils/apt_sources.py site_repository_errors."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.gpucluster.core.plugins.module_utils import apt_sources

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - only without ansible-core installed
    class AnsibleFilterError(Exception):
        pass


def apt_site_repository_errors(repository, variable):
    """``slurm_apt_repository | gpucluster.core.apt_site_repository_errors('slurm_apt_repository')``: messages
    naming the variable and what it accepts; [] when the repository can be added (or is {})."""
    if not isinstance(variable, str) or not variable:
        raise AnsibleFilterError('apt_site_repository_errors: name the variable the repository comes from')
    return apt_sources.site_repository_errors(repository, variable)


class FilterModule(object):
    def filters(self):
        return {'apt_site_repository_errors': apt_site_repository_errors}
