# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Render the files and package specs of issue 14's Slurm/OS decisions with the roles' own expressions:
os_tuning's scoped limits, slurmdbd's MariaDB drop-in, pyxis keyed on the Slurm version with
`required` only where the plugin is installed, and DCGM 4 pinned under its current package names."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os

import pytest
import yaml

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar
from ansible_collections.gpucluster.core.plugins.filter import slurm as slurm_filters

try:  # ansible-core >= 2.19 templates only trusted strings
    from ansible.template import trust_as_template
except ImportError:  # pragma: no cover
    def trust_as_template(value):
        return value

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
ROLES = os.path.join(REPO, 'roles')
MANAGED = 'Managed by Ansible (gpucluster.core)'


def _trust(value):
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return dict((k, _trust(v)) for k, v in value.items())
    if isinstance(value, list):
        return [_trust(v) for v in value]
    return value


def _yaml(*parts):
    with open(os.path.join(ROLES, *parts)) as handle:
        return _trust(yaml.safe_load(handle))


def _template(variables, value):
    return Templar(loader=DataLoader(), variables=variables).template(_trust(value))


def _render(variables, *parts):
    with open(os.path.join(ROLES, *parts)) as handle:
        return _template(variables, handle.read())


def _lines(text):
    return [line for line in text.splitlines() if line and not line.startswith('#')]


def _os_tuning(**extra):
    variables = dict(_yaml('os_tuning', 'defaults', 'main.yml'), ansible_managed=MANAGED)
    variables.update(extra)
    return variables


def test_limits_default_no_nproc_and_services_keep_systemds_nofile():
    variables = _os_tuning()
    limits = _lines(_render(variables, 'os_tuning', 'templates', 'etc', 'security', 'limits.d', '90-gpucluster.conf.j2'))
    assert [line.split() for line in limits] == [
        [domain, kind, item, value]
        for domain in ('*', 'root')
        for item, value in (('memlock', 'unlimited'), ('nofile', '1048576'))
        for kind in ('soft', 'hard')
    ]
    assert not [line for line in limits if 'nproc' in line]
    manager = _lines(_render(variables, 'os_tuning', 'templates', 'etc', 'systemd', 'system.conf.d', '90-gpucluster.conf.j2'))
    assert manager == ['[Manager]', 'DefaultLimitMEMLOCK=infinity']


def test_limits_scoped_to_a_group_with_nproc_and_a_service_default():
    variables = _os_tuning(os_tuning_limits_domains=['@hpcusers', 'root'], os_tuning_limits_nproc=65536,
                           os_tuning_limits_systemd_nofile='1024:524288', os_tuning_limits_memlock=8192)
    text = _render(variables, 'os_tuning', 'templates', 'etc', 'security', 'limits.d', '90-gpucluster.conf.j2')
    limits = [line.split() for line in _lines(text)]
    assert sorted(set(row[0] for row in limits)) == ['@hpcusers', 'root']
    assert ['@hpcusers', 'hard', 'nproc', '65536'] in limits
    assert ['root', 'soft', 'memlock', '8192'] in limits
    assert len(limits) == 12
    manager = _lines(_render(variables, 'os_tuning', 'templates', 'etc', 'systemd', 'system.conf.d', '90-gpucluster.conf.j2'))
    assert manager == ['[Manager]', 'DefaultLimitMEMLOCK=8388608', 'DefaultLimitNOFILE=1024:524288']


def _slurm(**extra):
    variables = dict(_yaml('slurm', 'defaults', 'main.yml'), ansible_managed=MANAGED)
    variables.update(extra)
    return variables


@pytest.mark.parametrize('memtotal, size, expected', [
    (128000, 'auto', '12800M'),
    (4000, 'auto', '1024M'),
    (128000, '128M', '128M'),  # the lab's override
])
def test_mariadb_drop_in(memtotal, size, expected):
    # The collection's filter is not loaded by a bare Templar: the template's call is evaluated here with
    # the same arguments, through the plugin's function.
    call = "slurm_accounting_innodb_buffer_pool_size | gpucluster.core.slurm_innodb_buffer_pool(ansible_facts['memtotal_mb'])"
    with open(os.path.join(ROLES, 'slurm', 'templates', 'etc', 'mysql', 'mariadb.conf.d', '90-slurmdbd.cnf.j2')) as handle:
        source = handle.read()
    assert source.count(call) == 1
    variables = _slurm(ansible_facts={'memtotal_mb': memtotal}, slurm_accounting_innodb_buffer_pool_size=size,
                       __pool=slurm_filters.innodb_buffer_pool(size, memtotal))
    text = _template(variables, source.replace(call, '__pool'))
    assert _lines(text) == ['[mysqld]', 'innodb_buffer_pool_size = ' + expected, 'innodb_log_file_size = 64M',
                            'innodb_lock_wait_timeout = 900']


def test_pam_adopt_is_on_and_needs_contain_by_default():
    defaults = _yaml('slurm', 'defaults', 'main.yml')
    assert defaults['slurm_pam_adopt'] is True
    assert defaults['slurm_pam_adopt_exempt_groups'] == []
    assert defaults['slurm_prolog_flags'] == ['Contain']
    assert defaults['slurm_slurmd_limit_memlock'] == 'infinity'
    debian = _yaml('slurm', 'vars', 'Debian.yml')
    names = _template(dict(defaults, __slurm_is_controller=False, __slurm_is_compute=True, **debian),
                      debian['__slurm_package_names'])
    assert 'libpam-slurm-adopt' in names
    names = _template(dict(defaults, __slurm_is_controller=True, __slurm_is_compute=False, **debian),
                      debian['__slurm_package_names'])
    assert 'libpam-slurm-adopt' not in names


def _container_runtime(os_family, **extra):
    variables = dict(_yaml('container_runtime', 'defaults', 'main.yml'))
    variables.update(_yaml('container_runtime', 'vars', 'main.yml'))
    variables.update(_yaml('container_runtime', 'vars', os_family + '.yml'))
    variables.update(ansible_managed=MANAGED, ansible_facts={'os_family': os_family})
    variables.update(extra)
    return variables


@pytest.mark.parametrize('os_family, spec', [('Debian', 'libslurm-dev=22.05.8-*'), ('RedHat', 'slurm-devel-22.05.8*')])
def test_pyxis_headers_and_build_directory_follow_the_slurm_pin(os_family, spec):
    variables = _container_runtime(os_family, slurm_version='22.05.8')
    assert _template(variables, variables['__container_runtime_pyxis_slurm_dev']) == spec
    assert _template(variables, variables['__container_runtime_pyxis_src_dir']) == '/usr/local/src/pyxis-0.20.0-slurm-22.05.8'
    # Raising Slurm gives another build directory, so pyxis builds and installs again.
    variables['slurm_version'] = '24.11.5'
    assert _template(variables, variables['__container_runtime_pyxis_src_dir']) == '/usr/local/src/pyxis-0.20.0-slurm-24.11.5'


def test_pyxis_slurm_version_is_empty_without_a_slurm_pin():
    variables = _container_runtime('Debian')
    assert _template(variables, variables['container_runtime_pyxis_slurm_version']) == ''


@pytest.mark.parametrize('installed, word', [(True, 'required'), (False, 'optional')])
def test_plugstack_line_is_required_only_where_pyxis_is_installed(installed, word):
    variables = _container_runtime('Debian', container_runtime_pyxis_args=['container_scope=job'],
                                   __container_runtime_pyxis_stat={'stat': {'exists': installed}})
    text = _render(variables, 'container_runtime', 'templates', 'etc', 'slurm', 'plugstack.conf.d', 'pyxis.conf.j2')
    assert _lines(text) == ['%s /usr/local/lib/slurm/spank_pyxis.so container_scope=job' % word]


def _dcgm_task(os_family):
    tasks = _yaml('monitoring', 'tasks', 'dcgm_exporter.yml')
    module = 'ansible.builtin.apt' if os_family == 'Debian' else 'ansible.builtin.dnf'
    return [t for t in tasks if module in t][0][module]


@pytest.mark.parametrize('os_family, specs', [
    ('Debian', ['datacenter-gpu-manager-4-core=1:4.5.2-*', 'datacenter-gpu-manager-4-cuda12=1:4.5.2-*']),
    ('RedHat', ['datacenter-gpu-manager-4-core-4.5.2-*', 'datacenter-gpu-manager-4-cuda12-4.5.2-*']),
])
def test_dcgm_is_pinned_under_its_dcgm4_names(os_family, specs):
    variables = dict(_yaml('monitoring', 'defaults', 'main.yml'), ansible_facts={'os_family': os_family})
    assert _template(variables, _dcgm_task(os_family)['name']) == specs
