# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The health thresholds are defined once (module_utils/gpu_health.THRESHOLDS): the gpu_facts module's
argument spec is built from it, and every place that documents or checks them is compared with it."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import re

import pytest
import yaml

from ansible_collections.gpucluster.core.plugins.filter.health_check import health_threshold_errors
from ansible_collections.gpucluster.core.plugins.module_utils import gpu_health
from ansible_collections.gpucluster.core.plugins.modules import gpu_facts

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
NAMES = [t[0] for t in gpu_health.THRESHOLDS]


def _shown(value):
    """How the docs write a default: 10 000, 20 000 000, warning."""
    if isinstance(value, bool) or not isinstance(value, int):
        return str(value)
    return '{:,}'.format(value).replace(',', ' ')


def test_module_argument_spec_is_the_definition():
    spec = gpu_facts._THRESHOLD_OPTIONS
    assert list(spec) == NAMES
    for name, kind, _default, choices, _limits, _doc in gpu_health.THRESHOLDS:
        assert spec[name]['type'] == kind
        assert spec[name].get('choices') == (list(choices) if choices else None)


def test_module_documentation_matches():
    options = yaml.safe_load(gpu_facts.DOCUMENTATION)['options']['thresholds']['suboptions']
    assert sorted(options) == sorted(NAMES)
    for name, kind, default, choices, _limits, doc in gpu_health.THRESHOLDS:
        option = options[name]
        assert option['type'] == kind, name
        assert option.get('choices') == (list(choices) if choices else None), name
        assert option['description'].startswith(doc), (name, option['description'])
        if default not in ([], None):
            assert re.search(r'Default C?\(?%s\)?\.' % re.escape(str(default)), option['description']), name


def test_role_argument_spec_names_every_threshold():
    with open(os.path.join(REPO, 'roles', 'health_check', 'meta', 'argument_specs.yml')) as handle:
        specs = yaml.safe_load(handle)
    text = ' '.join(specs['argument_specs']['main']['options']['health_check_thresholds']['description'])
    named = re.findall(r'C\(([a-z_]+)\)', text)
    assert sorted(n for n in named if n not in ('info', 'warning', 'critical', 'ignore')) == sorted(NAMES)


def test_docs_table_shows_every_default():
    with open(os.path.join(REPO, 'docs', 'health-checks.md')) as handle:
        text = handle.read()
    for name, _kind, default, _choices, _limits, _doc in gpu_health.THRESHOLDS:
        if default in ([], None):
            assert '`%s`' % name in text, name
        else:
            assert re.search(r'`%s` \(%s[ )C%%]' % (re.escape(name), re.escape(_shown(default))), text), name


@pytest.mark.parametrize('overrides,error', [
    ({'temperature_margin_c': 8, 'xid_ignore': [94], 'pcie_width_severity': 'critical'}, None),
    ({'temperature_margn_c': 8}, "unknown threshold 'temperature_margn_c'"),
    ({'pcie_width_severity': 'loud'}, 'pcie_width_severity'),
    ({'retired_pages_max': -1}, 'a number >= 0'),
    ({'sram_correctable_max': True}, 'a number >= 0'),
    ({'xid_ignore': ['x']}, 'a list of Xid numbers'),
    ('8', 'is not a mapping'),
])
def test_role_preflight_uses_the_program_check(overrides, error):
    errors = health_threshold_errors(overrides)
    if error is None:
        assert errors == []
    else:
        assert len(errors) == 1 and error in errors[0] and errors[0].startswith('health_check_thresholds')


def test_every_number_threshold_has_limits_that_hold_its_default():
    for name, kind, default, _choices, limits, _doc in gpu_health.THRESHOLDS:
        if kind in ('int', 'float'):
            low, high = limits
            assert low <= default <= high, name
            assert gpu_health.merge_thresholds({name: low})[name] == low
            assert gpu_health.merge_thresholds({name: high})[name] == high
            with pytest.raises(gpu_health.ThresholdError, match='threshold %s=' % name):
                gpu_health.merge_thresholds({name: high + 1})
