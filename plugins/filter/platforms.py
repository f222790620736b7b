# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters over the platform table (plugins/module_utils/platforms.py): what a release's archive offers,
and the features that follow a version."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.gpucluster.core.plugins.filter.config_values import guarded
from ansible_collections.gpucluster.core.plugins.module_utils.platforms import archive_version, node_exporter_web_flag

_EXPECTED = {
    'platform_archive_version': "ansible_facts' distribution, its distribution_version and a package name",
    'node_exporter_web_flag': "node_exporter's version ('' when unknown)",
}


class FilterModule(object):
    def filters(self):
        funcs = {'platform_archive_version': archive_version, 'node_exporter_web_flag': node_exporter_web_flag}
        return dict((name, guarded(name, _EXPECTED[name])(func)) for name, func in funcs.items())
