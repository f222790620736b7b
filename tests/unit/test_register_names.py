# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""No role registers a result under the name of one of its own variables (defaults/ or vars/).

A registered result outranks role and include_vars variables: once the task has run, every later reader of the
name gets the result, not the value the role defined. The monitoring role's nftables package name once shared the
install task's register name, and the fast path's package list then held that task's result dict; nvidia_driver's
APT sources path shared the name of the task that reads the sources."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import glob
import os
import re

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
REGISTER = re.compile(r'^\s*register:\s*([A-Za-z_][A-Za-z0-9_]*)\s*$', re.M)


def _collisions(role):
    names = set()
    for path in glob.glob(os.path.join(role, 'defaults', '*.yml')) + glob.glob(os.path.join(role, 'vars', '*.yml')):
        with open(path) as handle:
            names |= set(yaml.safe_load(handle) or {})
    registered = set()
    for path in glob.glob(os.path.join(role, 'tasks', '*.yml')) + glob.glob(os.path.join(role, 'handlers', '*.yml')):
        with open(path) as handle:
            registered |= set(REGISTER.findall(handle.read()))
    return sorted(names & registered)


def test_no_role_registers_over_its_own_variables():
    roles = sorted(glob.glob(os.path.join(REPO, 'roles', '*')))
    assert len(roles) > 10
    found = dict((os.path.basename(role), _collisions(role)) for role in roles)
    assert dict((role, names) for role, names in found.items() if names) == {}


def test_the_check_finds_a_register_named_like_a_variable(tmp_path):
    (tmp_path / 'vars').mkdir()
    (tmp_path / 'tasks').mkdir()
    (tmp_path / 'vars' / 'main.yml').write_text('---\n__demo_package: nftables\n__demo_other: 1\n')
    (tmp_path / 'tasks' / 'main.yml').write_text('---\n- name: Install\n  ansible.builtin.package:\n'
                                                 '    name: "{{ __demo_package }}"\n  register: __demo_package\n')
    assert _collisions(str(tmp_path)) == ['__demo_package']
