# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every condition in the project's YAML is a string (or a boolean) once YAML has read it.

A plain scalar with ': ' inside (`- x is search('no GPU: gloo')`) is read by YAML as a one-key mapping, not as
the expression: the file stays valid YAML and passes yamllint and ansible-lint, and ansible-core stops the task
only when it gets there ("Conditional expressions must be strings"), which for a verify file is at the end of a
lab run. This finds it at once: assert's `that` and every when/failed_when/changed_when/until, in every YAML file
of the roles, playbooks, molecule scenarios, lab and inventories.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os

import pytest
import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
TOPS = ('roles', 'playbooks', 'molecule', 'lab', 'inventories')
CONDITIONS = ('when', 'failed_when', 'changed_when', 'until')


class _Loader(yaml.SafeLoader):
    """Safe loading that reads a tagged node (!vault, !unsafe) as its plain value."""


_Loader.add_multi_constructor('!', lambda loader, _suffix, node: (
    loader.construct_scalar(node) if isinstance(node, yaml.ScalarNode) else None))


def _yaml_files():
    for top in TOPS:
        for directory, _dirs, names in os.walk(os.path.join(REPO, top)):
            for name in sorted(names):
                if name.endswith(('.yml', '.yaml')):
                    yield os.path.relpath(os.path.join(directory, name), REPO)


def _not_strings(node):
    """(keyword, item) for each condition item that is neither a string nor a boolean."""
    found = []
    if isinstance(node, dict):
        for key, value in node.items():
            items = None
            if key in ('assert', 'ansible.builtin.assert') and isinstance(value, dict) and 'that' in value:
                items = value['that']
                key = 'that'
            elif key in CONDITIONS:
                items = value
            if items is not None:
                for item in items if isinstance(items, list) else [items]:
                    if not isinstance(item, (str, bool)):
                        found.append((key, item))
            found.extend(_not_strings(value))
    elif isinstance(node, list):
        for item in node:
            found.extend(_not_strings(item))
    return found


def test_the_check_finds_a_colon_inside_a_plain_condition():
    task = yaml.safe_load("- ansible.builtin.assert:\n    that:\n      - x is search('no GPU: gloo')\n      - y\n"
                          "  when:\n    - z: 1\n")
    assert [key for key, _item in _not_strings(task)] == ['that', 'when']


@pytest.mark.parametrize('path', list(_yaml_files()))
def test_every_condition_is_a_string(path):
    with open(os.path.join(REPO, path)) as handle:
        data = yaml.load(handle, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    found = _not_strings(data)
    assert not found, '%s: conditions YAML reads as something else than a string (quote them): %s' % (path, found)
