# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Evaluate the rdma role's systemd version decision with Ansible's own templar: networkd reads the
[IPoIB] section from systemd 257 (Debian 13), not in 252 (Debian 12). Ansible's templating keeps a
backslash pair in a Jinja string as two characters, so the regex must be written with single ones;
only a rendering by Ansible shows that."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os

import pytest
import yaml

TASKS = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'roles', 'rdma', 'tasks', 'ipoib.yml')


def _expression():
    with open(TASKS) as handle:
        tasks = yaml.safe_load(handle)
    for task in tasks:
        facts = task.get('ansible.builtin.set_fact') or {}
        if '__rdma_networkd_ipoib_section' in facts:
            return facts['__rdma_networkd_ipoib_section']
    raise AssertionError('no task sets __rdma_networkd_ipoib_section in %s' % TASKS)


@pytest.mark.parametrize('line, expected', [
    ('systemd 257 (257.9-1~deb13u1)', True),
    ('systemd 258 (258.1-1)', True),
    ('systemd 252 (252.39-1~deb12u1)', False),
    ('', False),
])
def test_networkd_ipoib_section_follows_the_systemd_version(ansible_render, line, expected):
    variables = {'__rdma_systemd_version': {'stdout_lines': [line] if line else []}}
    result = ansible_render(variables, _expression())
    assert str(result) == str(expected), (line, result)
