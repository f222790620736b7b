# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Decision code of the health_check role: the threshold overrides, checked by the same code the
health program and the gpu_facts module use (module_utils/gpu_health.py, the one definition)."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.gpucluster.core.plugins.module_utils.gpu_health import ThresholdError, merge_thresholds
from ansible_collections.gpucluster.core.plugins.filter.config_values import guarded


def health_threshold_errors(overrides, name='health_check_thresholds'):
    """[] when ``overrides`` is a mapping of thresholds the health program accepts; otherwise one
    message per problem, naming the variable, the key and what is accepted."""
    if not isinstance(overrides, dict):
        return ['%s: %r is not a mapping of threshold names to values' % (name, overrides)]
    errors = []
    for key in sorted(overrides, key=str):
        try:
            merge_thresholds({key: overrides[key]})
        except ThresholdError as exc:
            errors.append('%s: %s' % (name, exc))
    return errors


class FilterModule(object):
    def filters(self):
        return {
            'health_threshold_errors': guarded(
                'health_threshold_errors', 'health_check_thresholds as a mapping of threshold names to values'
            )(health_threshold_errors),
        }
