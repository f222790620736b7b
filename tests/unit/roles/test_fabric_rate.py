# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fabric's declared rate (gpucluster_fabric_rate_gbps, one site-wide value) is the rate the node health
program judges every fabric port against and the rate the InfiniBand alert expects, unless a role's own
variable says otherwise; site.yml refuses a declaration that is not a number of Gb/s before anything runs."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os

import pytest
import yaml

REPO = os.path.join(os.path.dirname(__file__), '..', '..', '..')


def _load(*parts):
    with open(os.path.join(REPO, *parts)) as handle:
        return yaml.safe_load(handle)


DEFAULTS = [('health_check', 'health_check_rdma_expected_rate_gbps'), ('monitoring', 'monitoring_ib_expected_rate_gbps')]


@pytest.mark.parametrize('role, name', DEFAULTS)
@pytest.mark.parametrize('site, expected', [({}, 0), ({'gpucluster_fabric_rate_gbps': 400}, 400),
                                            ({'gpucluster_fabric_rate_gbps': 200.0}, 200.0)])
def test_the_roles_expect_the_declared_rate(ansible_render, role, name, site, expected):
    defaults = _load('roles', role, 'defaults', 'main.yml')
    assert ansible_render(dict(site), defaults[name]) == expected
    specs = _load('roles', role, 'meta', 'argument_specs.yml')
    assert specs['argument_specs']['main']['options'][name]['default'] == defaults[name]


def _switch_check():
    for play in _load('playbooks', 'site.yml'):
        for task in play.get('tasks') or []:
            if task.get('name') == 'Check the site-wide switches':
                return task['ansible.builtin.assert']
    raise AssertionError('site.yml has no "Check the site-wide switches" task')


@pytest.mark.parametrize('value, accepted', [(None, True), (400, True), (0, True), (12.5, True), ('400', False),
                                             (-1, False), (True, False), ([400], False)])
def test_site_yml_refuses_a_rate_that_is_not_a_number_of_gbps(ansible_render, value, accepted):
    check = _switch_check()
    variables = {} if value is None else {'gpucluster_fabric_rate_gbps': value}
    # assert stops at the first condition that is false, as here.
    results = []
    for condition in check['that']:
        results.append(bool(ansible_render(variables, '{{ %s }}' % condition)))
        if not results[-1]:
            break
    assert all(results) is accepted, results
    if not accepted:
        message = ansible_render(dict(variables, inventory_hostname='gpu1'), check['fail_msg'])
        assert 'gpucluster_fabric_rate_gbps the Gb/s of the fabric' in message
