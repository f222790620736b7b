# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every role documents every public variable: defaults/main.yml and meta/argument_specs.yml agree."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os

import pytest
import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
ROLES_DIR = os.path.join(REPO, 'roles')
ROLES = sorted(r for r in os.listdir(ROLES_DIR) if os.path.isdir(os.path.join(ROLES_DIR, r)))


def _load(role, *parts):
    path = os.path.join(ROLES_DIR, role, *parts)
    if not os.path.exists(path):
        return None
    with open(path) as handle:
        return yaml.safe_load(handle) or {}


@pytest.mark.parametrize('role', ROLES)
def test_role_has_argument_specs(role):
    specs = _load(role, 'meta', 'argument_specs.yml')
    assert specs is not None, '%s has no meta/argument_specs.yml' % role
    assert 'main' in specs['argument_specs'], '%s: argument_specs has no main entry point' % role


@pytest.mark.parametrize('role', ROLES)
def test_defaults_equal_argument_spec_options(role):
    defaults = _load(role, 'defaults', 'main.yml') or {}
    options = _load(role, 'meta', 'argument_specs.yml')['argument_specs']['main'].get('options') or {}
    missing_in_spec = sorted(set(defaults) - set(options))
    missing_in_defaults = sorted(k for k, v in options.items() if k not in defaults and not v.get('required'))
    assert not missing_in_spec, '%s: defaults without an argument spec: %s' % (role, missing_in_spec)
    assert not missing_in_defaults, '%s: optional spec options without a default: %s' % (role, missing_in_defaults)


@pytest.mark.parametrize('role', ROLES)
def test_public_variables_carry_the_role_prefix(role):
    defaults = _load(role, 'defaults', 'main.yml') or {}
    options = _load(role, 'meta', 'argument_specs.yml')['argument_specs']['main'].get('options') or {}
    unprefixed = sorted(k for k in set(defaults) | set(options) if not k.startswith(role + '_'))
    assert not unprefixed, '%s: variables without the %s_ prefix: %s' % (role, role, unprefixed)


@pytest.mark.parametrize('role', ROLES)
def test_spec_options_are_typed_and_described(role):
    specs = _load(role, 'meta', 'argument_specs.yml')['argument_specs']
    for entry, spec in specs.items():
        for name, option in (spec.get('options') or {}).items():
            assert option.get('type'), '%s/%s: option %s has no type' % (role, entry, name)
            assert option.get('description'), '%s/%s: option %s has no description' % (role, entry, name)
            if option['type'] == 'list':
                assert option.get('elements'), '%s/%s: list option %s has no elements' % (role, entry, name)


@pytest.mark.parametrize('role', ROLES)
def test_spec_defaults_match_defaults_file(role):
    defaults = _load(role, 'defaults', 'main.yml') or {}
    options = _load(role, 'meta', 'argument_specs.yml')['argument_specs']['main'].get('options') or {}
    for name, option in options.items():
        if 'default' not in option or name not in defaults:
            continue
        value = defaults[name]
        if isinstance(value, str) and '{{' in value:
            continue  # templated defaults are documented in prose
        assert option['default'] == value, '%s: default of %s differs: spec %r, defaults %r' % (
            role, name, option['default'], value)
