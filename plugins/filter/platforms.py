# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters over the platform table (plugins/module_utils/platforms.py): what a release's archive offers,
the version pins that follow it, and the features that follow a version."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.gpucluster.core.plugins.filter.config_values import guarded
from ansible_collections.gpucluster.core.plugins.module_utils import platforms

_EXPECTED = {
    'platform_archive_version': "ansible_facts' distribution, its distribution_version and a package name",
    'platform_pin': "a version pin ('' for the archive's), ansible_facts and the package it pins",
    'platform_pin_errors': ('a mapping of variable to pin, ansible_facts, a mapping of variable to the package it '
                            'pins, and optionally repository (a variable name), own_repository and check_offered'),
    'slurm_cluster_version_errors': ("a mapping of host to {version, distribution, distribution_version} and the "
                                     "controller's host name"),
    'node_exporter_web_flag': "node_exporter's version ('' when unknown)",
}


def _facts(facts):
    """distribution and distribution_version of ansible_facts (a mapping; missing keys are unknown)."""
    if not hasattr(facts, 'get'):
        raise TypeError('the facts must be a mapping such as ansible_facts, got %s' % type(facts).__name__)
    return facts.get('distribution') or '', facts.get('distribution_version') or ''


def _text(value, what):
    """A string as it is ('' for None); anything else is refused (an unquoted 22.10 in YAML is the float 22.1)."""
    if value is None:
        return ''
    if not isinstance(value, str):
        raise TypeError('%s must be a string, got %s' % (what, type(value).__name__))
    return value


def platform_pin(pin, facts, package):
    """``slurm_version | gpucluster.core.platform_pin(ansible_facts, 'slurm-wlm')``: the pin, or when it is
    empty the upstream version the node's archive offers ('' when the table does not record it)."""
    distribution, version = _facts(facts)
    return platforms.resolve_pin(_text(pin, 'the pin'), distribution, version, _text(package, 'the package'))


def platform_pin_errors(pins, facts, packages, repository='', own_repository=False, check_offered=True):
    """``{'slurm_version': slurm_version} | gpucluster.core.platform_pin_errors(ansible_facts,
    {'slurm_version': 'slurm-wlm'}, ...)``: messages naming the variable, the platform, the pin and what the
    archive offers; [] when every pin can be installed (module_utils/platforms.py pin_errors)."""
    distribution, version = _facts(facts)
    if not hasattr(pins, 'items') or not hasattr(packages, 'items'):
        raise TypeError('the pins and the packages must be mappings of variable name')
    missing = sorted(set(pins) - set(packages))
    if missing:
        raise KeyError('no package named for %s' % ', '.join(missing))
    checked = dict((name, _text(pin, name)) for name, pin in pins.items())
    return platforms.pin_errors(checked, distribution, version, packages, repository=_text(repository, 'repository'),
                                own_repository=bool(own_repository), check_offered=bool(check_offered))


def slurm_cluster_version_errors(hosts, controller):
    """``hosts | gpucluster.core.slurm_cluster_version_errors(slurm_controller_host)``: [] when no Slurm host
    would run a version its slurmctld cannot talk to (module_utils/platforms.py slurm_cluster_errors)."""
    if not hasattr(hosts, 'items'):
        raise TypeError('the hosts must be a mapping of host name')
    return platforms.slurm_cluster_errors(_text(controller, 'the controller'), dict(hosts))


class FilterModule(object):
    def filters(self):
        funcs = {'platform_archive_version': platforms.archive_version, 'platform_pin': platform_pin,
                 'platform_pin_errors': platform_pin_errors, 'slurm_cluster_version_errors': slurm_cluster_version_errors,
                 'node_exporter_web_flag': platforms.node_exporter_web_flag}
        return dict((name, guarded(name, _EXPECTED[name])(func)) for name, func in funcs.items())
