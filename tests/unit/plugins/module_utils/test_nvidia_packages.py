# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every install plan against the drift rules: what a role installs is what the audit reads.

The plans (plugins/filter/nvidia.py) and the rules (plugins/module_utils/stack_versions.py) both
come from plugins/module_utils/nvidia_packages.py. These tests install each plan's packages into a
package database at the plan's version, on every OS, source, kernel module flavour, variant and
branch, and read them back with build_stack. `pytest -rP -k plan_table` prints the table.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import itertools
import re

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.gpucluster.core.plugins.filter import nvidia
from ansible_collections.gpucluster.core.plugins.module_utils import nvidia_packages as np
from ansible_collections.gpucluster.core.plugins.module_utils import stack_versions as sv

OSES = (('Debian', '12'), ('Ubuntu', '22.04'), ('RedHat', '9'))
SOURCES = ('distro', 'cuda_repo')
# One version per branch family: before the open-module default, at it, and after the CUDA
# repository dropped branch names from Fabric Manager.
VERSIONS = ('535.309.01', '550.163.01', '570.26', '580.95.05')
FLAVOURS = ('open', 'proprietary')


def _combinations():
    for (distribution, major), source, version, flavour, headless, fabricmanager in itertools.product(
            OSES, SOURCES, VERSIONS, FLAVOURS, (True, False), (False, True)):
        yield distribution, major, source, version, flavour, headless, fabricmanager


def _refusal(distribution, source, fabricmanager):
    """Combinations the roles refuse on purpose (with the words of the error)."""
    if distribution == 'RedHat' and source == 'distro':
        return "'distro' is not available on RHEL"
    if distribution == 'Debian' and source == 'distro' and fabricmanager:
        return 'does not package NVIDIA Fabric Manager'
    return None


def _package_version(manager, version):
    return '3:%s-1.el9' % version if manager == 'dnf' else '%s-0ubuntu1' % version


def _installed(plan, version):
    """The package database after the plan ran: pinned names at the driver version, the unpinned
    ones at a version of their own."""
    packages = {}
    for name in plan['packages']:
        packages[name] = '535.171.04-2' if name in plan['unpinned'] else _package_version(plan['manager'], version)
    return packages


def _read_back(plan, version):
    family = 'rpm' if plan['manager'] == 'dnf' else 'dpkg'
    stack, _toolkits, details = sv.build_stack({'packages': _installed(plan, version), 'package_manager': family})
    return stack, details['sources']


def _rows():
    rows = []
    for distribution, major, source, version, flavour, headless, fabricmanager in _combinations():
        refusal = _refusal(distribution, source, fabricmanager)
        if refusal:
            continue
        plan = nvidia.nvidia_driver_plan(version, source, distribution, major, flavour,
                                         headless=headless, fabricmanager=fabricmanager)
        stack, sources = _read_back(plan, version)
        rows.append({
            'os': distribution, 'source': source, 'version': version, 'flavour': flavour,
            'variant': 'headless' if headless else 'desktop', 'fabricmanager': fabricmanager,
            'plan': plan, 'stack': stack, 'sources': sources,
        })
    return rows


ROWS = _rows()


@pytest.mark.parametrize('row', ROWS, ids=lambda r: '%s-%s-%s-%s-%s%s' % (
    r['os'], r['source'], r['version'], r['flavour'], r['variant'], '-fm' if r['fabricmanager'] else ''))
def test_plan_read_back_as_installed(row):
    plan, version = row['plan'], row['version']
    # The driver is the plan's carrier, at the plan's version.
    assert row['sources'].get('nvidia_driver') == 'package:%s' % plan['carrier'], plan['packages']
    assert nvidia.nvidia_upstream_version(row['stack']['nvidia_driver']) == version
    assert plan['carrier'] in plan['packages']
    if row['fabricmanager']:
        daemon = [n for n in plan['packages'] if re.search(r'fabric-?manager', n)]
        assert len(daemon) == 1, plan['packages']
        assert row['sources'].get('nvidia_fabricmanager') == 'package:%s' % daemon[0]
        assert nvidia.nvidia_upstream_version(row['stack']['nvidia_fabricmanager']) == version
    else:
        assert row['stack']['nvidia_fabricmanager'] is None
    # A package the plan leaves at its own version never stands for the driver.
    for name in plan['unpinned']:
        assert row['sources'].get('nvidia_driver') != 'package:%s' % name


@pytest.mark.parametrize('distribution,major,source,fabricmanager', [
    ('RedHat', '9', 'distro', False), ('Debian', '12', 'distro', True),
])
def test_refused_combinations_say_why(distribution, major, source, fabricmanager):
    with pytest.raises(AnsibleFilterError, match=re.escape(_refusal(distribution, source, fabricmanager))):
        nvidia.nvidia_driver_plan('550.163.01', source, distribution, major, 'open', fabricmanager=fabricmanager)


def test_every_combination_is_planned_or_refused():
    refused = [c for c in _combinations() if _refusal(c[0], c[2], c[6])]
    assert len(ROWS) + len(refused) == len(list(_combinations()))
    # 3 OS x 2 sources x 4 branches x 2 flavours x 2 variants x 2 = 192, less RHEL distro (32) and
    # Debian distro with Fabric Manager (16).
    assert len(ROWS) == 144


def test_plan_table(capsys):
    """The table the issue note quotes: one line per OS, source, flavour and variant (R550)."""
    lines = ['%-7s %-9s %-11s %-11s %-28s %-28s %s' % (
        'os', 'source', 'flavour', 'variant', 'carrier -> nvidia_driver', 'fabric manager -> component', 'packages')]
    for row in ROWS:
        if row['version'] != '550.163.01' or not row['fabricmanager'] and row['source'] == 'cuda_repo':
            continue
        fm = row['sources'].get('nvidia_fabricmanager', '-').replace('package:', '')
        lines.append('%-7s %-9s %-11s %-11s %-28s %-28s %s' % (
            row['os'], row['source'], row['flavour'], row['variant'] + ('+fm' if row['fabricmanager'] else ''),
            row['sources']['nvidia_driver'].replace('package:', ''), fm, ' '.join(row['plan']['packages'])))
    with capsys.disabled():
        print('\n' + '\n'.join(lines))
    assert len(lines) > 1


def test_table_rows_cover_every_source_the_filter_offers():
    keys = set((r['distribution'], r['source']) for r in np.DRIVER_SOURCES)
    keys.update(np.DRIVER_SOURCE_ALIASES)
    planned = set((r['os'], r['source']) for r in ROWS)
    assert planned == keys


@pytest.mark.parametrize('name', ['nvidia-fabric-manager', 'nvidia-fabricmanager-535', 'nvidia-fabricmanager'])
def test_fabricmanager_names_are_not_the_driver(name):
    stack, _toolkits, details = sv.build_stack({'packages': {name: '535.309.01-1'}, 'package_manager': 'dpkg'})
    assert stack['nvidia_driver'] is None
    assert details['sources']['nvidia_fabricmanager'] == 'package:%s' % name


def test_template_regex():
    regex = re.compile(np.template_regex('nvidia-utils-{branch}-server') + r'\Z')
    assert regex.match('nvidia-utils-535-server')
    assert not regex.match('nvidia-utils-535-server-open')
    assert not regex.match('nvidia-utils-x-server')
    assert np.CUDA_TOOLKIT_REGEX.match('cuda-toolkit-12-4').groups() == ('12', '4')


def test_unknown_source_is_refused():
    with pytest.raises(np.PackageTableError, match='no NVIDIA driver packages for source distro on RedHat'):
        np.driver_package_names('RedHat', 'distro', 550, 'open')
    with pytest.raises(np.PackageTableError, match='flavour'):
        np.driver_package_names('Debian', 'distro', 550, 'both')


# ------------------------------------------------------------------ CUDA toolkit, cuDNN, NCCL

TOOLKIT_CASES = [
    # distribution, source, versions, default, cudnn, nccl
    ('Ubuntu', 'cuda_repo', ['12.4.1', '12.6'], '12.4.1', '9.1.0.70-1', '2.21.5-1+cuda12.4'),
    ('RedHat', 'cuda_repo', ['12.4.1'], '12.4.1', '9.1.0.70-1', '2.21.5-1+cuda12.4'),
    ('Debian', 'cuda_repo', ['12.2'], '12.2', '8.9.7.29-1+cuda12.2', ''),
    ('RedHat', 'cuda_repo', ['12.2'], '12.2', '8.9.7.29-1+cuda12.2', ''),
    ('Debian', 'distro', ['11.8'], '11.8', '', '2.18.1-1'),
]


def _toolkit_package_version(name, plan, info):
    """The version a toolkit plan's package carries in the package database."""
    if name == 'nvidia-cuda-toolkit':
        return '11.8.89~11.8.0-5~deb12u1'
    if name.startswith('cuda-toolkit-'):
        minor = '%s.%s' % tuple(name.split('-')[2:4])
        return '%s.%s-1' % (minor, '1' if minor == '12.4' else '0')
    return info


@pytest.mark.parametrize('distribution,source,versions,default,cudnn,nccl', TOOLKIT_CASES)
def test_toolkit_plan_read_back(distribution, source, versions, default, cudnn, nccl):
    plan = nvidia.cuda_toolkit_plan(versions, default, source, distribution, cudnn=cudnn, nccl=nccl)
    packages = {}
    for name in plan['hold']:
        # Holds are package names on both families (package_hold locks the installed version on dnf).
        assert re.match(r'^[a-z0-9][a-z0-9+._-]*\Z', name) and not name.endswith(('-' + cudnn, '-' + nccl)), name
        value = cudnn if 'cudnn' in name else nccl if 'nccl' in name else ''
        packages[name] = _toolkit_package_version(name, plan, value)
    family = 'rpm' if plan['manager'] == 'dnf' else 'dpkg'
    stack, toolkits, details = sv.build_stack({'packages': packages, 'package_manager': family})
    wanted = [nvidia.cuda_version_info(v)['short'] for v in versions]
    assert sorted('.'.join(t['version'].split('.')[:2]) for t in toolkits) == sorted(wanted)
    assert stack['cuda_toolkit'] is not None
    if cudnn:
        assert stack['cudnn'] == cudnn, packages
    if nccl:
        assert stack['nccl'] == nccl, packages


def test_cudnn_names():
    assert np.cudnn_package_names('apt', 9, 12) == ('libcudnn9-cuda-12', 'libcudnn9-dev-cuda-12')
    assert np.cudnn_package_names('dnf', '8', 12) == ('libcudnn8', 'libcudnn8-devel')
