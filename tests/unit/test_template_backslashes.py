# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
r"""No doubled backslash inside a {{ ... }} expression of the project's YAML.

Ansible escapes the backslashes of a template's string literals before Jinja reads them (conditionals,
when/that/until, are not templated that way). In a plain or block YAML value, '\\S' in a {{ }}
expression therefore reaches the regular expression engine as a backslash followed by S, not as "not
a space": regex_search finds nothing and a regex_replace back-reference becomes the text "\\1". Both
broke something real: the monitoring role's key and certificate names were "monitoring-pki/\\1.key" (the
node keys never reached the inventory's store), and restore_checkpoints.yml refused every user name with an
x, 0, 1, 7 or f in it. Write the expression with one backslash ('\S', '\1') in plain and block values
(two in double-quoted ones), or avoid the backslash.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import re

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
SKIP_DIRS = {'.git', '.venv', '.cache', 'collections', 'node_modules', '.tox', 'tests'}
CONDITIONS = {'when', 'that', 'until', 'failed_when', 'changed_when'}
EXPRESSION = re.compile(r'\{\{.*?\}\}', re.S)


def _yaml_files():
    for top, dirs, files in os.walk(REPO):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for name in sorted(files):
            if name.endswith(('.yml', '.yaml')):
                yield os.path.join(top, name)


def _doubled(node, key=None):
    """(line, expression) for every {{ }} expression of a templated value that holds a doubled backslash."""
    if isinstance(node, yaml.ScalarNode):
        if key in CONDITIONS and '{{' not in node.value:
            return []
        return [(node.start_mark.line + 1, m.group(0)) for m in EXPRESSION.finditer(node.value) if '\\\\' in m.group(0)]
    if isinstance(node, yaml.SequenceNode):
        return [hit for child in node.value for hit in _doubled(child, key)]
    if isinstance(node, yaml.MappingNode):
        return [hit for k, v in node.value for hit in _doubled(v, k.value if isinstance(k, yaml.ScalarNode) else None)]
    return []


def test_the_scan_finds_a_doubled_backslash():
    node = yaml.compose("x: >-\n  {{ out | regex_search('State=(\\\\S+)') }}\nwhen: out is search('\\\\S')\n")
    assert [line for line, dummy in _doubled(node)] == [1]


def test_no_doubled_backslash_in_a_template_expression():
    found = []
    for path in _yaml_files():
        with open(path) as handle:
            try:
                documents = list(yaml.compose_all(handle))
            except yaml.YAMLError:
                continue  # yamllint reports it
        for document in documents:
            if document is not None:
                found += ['%s:%d: %s' % (os.path.relpath(path, REPO), line, text[:120])
                          for line, text in _doubled(document)]
    assert not found, 'a doubled backslash reaches Jinja doubled (see this test\'s docstring):\n' + '\n'.join(found)
