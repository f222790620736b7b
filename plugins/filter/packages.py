# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether a role's package install would change nothing: a thin adapter over
module_utils/apt_specs.py request_installed."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.gpucluster.core.plugins.module_utils import apt_specs


def apt_request_installed(request, packages):
    """``__x_packages | gpucluster.core.apt_request_installed(__x_converged.packages | default({}))``: true when
    every name of the apt request is installed at a version it accepts (the install would change nothing),
    from the packages the role's converged check observed; false whenever that cannot be judged."""
    return apt_specs.request_installed(request, packages)


class FilterModule(object):
    def filters(self):
        return {'apt_request_installed': apt_request_installed}
