# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""module_utils/rdma_stack.py, DOCA-OFED on the RHEL family: which platforms the role installs it on, the dnf
repository directory of NVIDIA's DOCA repository from a host's facts, and the offered-version check.

NVIDIA's layout (cited in rdma_stack.py): .../doca/<release>/<os>/<arch>/, the RHEL directory per minor release
(rhel9.6) up to DOCA 3.1 and per major release (rhel9) from DOCA 3.2.0; arm64-sbsa for aarch64."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible_collections.gpucluster.core.plugins.filter.rdma import FilterModule
from ansible_collections.gpucluster.core.plugins.module_utils.rdma_stack import (
    doca_el_baseurl, doca_el_repo_dir, doca_platform_error, doca_release, rpm_version_offered)

BASE = 'https://linux.mellanox.com/public/repo/doca/'


@pytest.mark.parametrize('os_family, distribution, major', [
    ('Debian', 'Debian', '12'), ('Debian', 'Debian', '13'), ('Debian', 'Ubuntu', '22'), ('Debian', 'Ubuntu', '24'),
    ('RedHat', 'RedHat', '9'), ('RedHat', 'Rocky', '9'), ('RedHat', 'AlmaLinux', '9'),
])
def test_doca_platforms_accepted(os_family, distribution, major):
    assert doca_platform_error(os_family, distribution, major) == ''


@pytest.mark.parametrize('os_family, distribution, major, shown', [
    ('RedHat', 'RedHat', '8', 'RedHat 8 (os_family RedHat)'),
    ('RedHat', 'Rocky', '8', 'Rocky 8 (os_family RedHat)'),
    ('RedHat', 'Fedora', '40', 'Fedora 40 (os_family RedHat)'),
    ('RedHat', 'OracleLinux', '9', 'OracleLinux 9 (os_family RedHat)'),
    ('Suse', 'SLES', '15', 'SLES 15 (os_family Suse)'),
    (None, None, None, '? ? (os_family None)'),
])
def test_doca_platforms_refused_name_the_variable_the_platform_and_what_is_accepted(os_family, distribution, major, shown):
    err = doca_platform_error(os_family, distribution, major)
    assert err.startswith('rdma_stack: doca is supported on Debian and Ubuntu (apt), RHEL, Rocky Linux and '
                          'AlmaLinux 9 (dnf) by this role; this host is ' + shown)
    assert 'rdma_stack: inbox' in err


@pytest.mark.parametrize('url, release', [
    (BASE + '3.2.1/{os}/{arch}/', (3, 2, 1)),
    (BASE + '2.9.3/rhel9.6/x86_64/', (2, 9, 3)),
    (BASE + '3.2/rhel9/x86_64/', (3, 2, 0)),
    (BASE + 'latest/{os}/{arch}/', None),
    (BASE + 'DGX_latest_DOCA/rhel9/x86_64/', None),
    ('https://mirror.example/doca-3.2.1/', None),
    ('', None), (None, None),
])
def test_doca_release_from_the_url(url, release):
    assert doca_release(url) == release


@pytest.mark.parametrize('release, version, wanted', [
    ((3, 2, 0), '9.4', 'rhel9'),
    ((3, 2, 1), '9.6', 'rhel9'),
    ((3, 3, 0), '9', 'rhel9'),
    ((3, 1, 0), '9.4', 'rhel9.4'),
    ((2, 9, 3), '9.6', 'rhel9.6'),
    ((2, 9, 1), '9.10', 'rhel9.10'),
    (None, '9.4', 'rhel9.4'),
])
def test_el_directory_per_major_from_doca_3_2_per_minor_before(release, version, wanted):
    assert doca_el_repo_dir(release, version) == {'dir': wanted, 'error': ''}


@pytest.mark.parametrize('release, version, says', [
    ((2, 9, 3), '9', 'one directory per minor release'),
    ((3, 2, 1), '', 'no RHEL release'),
    ((3, 2, 1), None, 'no RHEL release'),
])
def test_el_directory_that_cannot_be_derived(release, version, says):
    result = doca_el_repo_dir(release, version)
    assert result['dir'] == '' and says in result['error']


@pytest.mark.parametrize('url, version, arch, wanted', [
    # Rocky and RHEL 9.4, the per-major layout of DOCA 3.2 and later.
    (BASE + '3.2.1/{os}/{arch}/', '9.4', 'x86_64', BASE + '3.2.1/rhel9/x86_64/'),
    (BASE + '3.2.1/{os}/{arch}/', '9.4', 'aarch64', BASE + '3.2.1/rhel9/arm64-sbsa/'),
    # the per-minor layout before DOCA 3.2.
    (BASE + '2.9.3/{os}/{arch}/', '9.4', 'x86_64', BASE + '2.9.3/rhel9.4/x86_64/'),
    (BASE + '2.9.3/{os}/x86_64/', '9.6', 'aarch64', BASE + '2.9.3/rhel9.6/x86_64/'),
    # written without placeholders: the override, used as it is.
    (BASE + '2.9.3/rhel9.2/x86_64/', '9.4', 'x86_64', BASE + '2.9.3/rhel9.2/x86_64/'),
    (BASE + 'DGX_latest_DOCA/rhel9/{arch}/', '9.4', 'x86_64', BASE + 'DGX_latest_DOCA/rhel9/x86_64/'),
])
def test_el_baseurl_from_the_facts(url, version, arch, wanted):
    assert doca_el_baseurl(url, version, arch) == {'url': wanted, 'error': ''}


@pytest.mark.parametrize('url, version, arch, says', [
    (BASE + 'latest/{os}/{arch}/', '9.4', 'x86_64', 'names no DOCA release'),
    (BASE + '2.9.3/{os}/{arch}/', '9', 'x86_64', 'write the directory instead of {os}'),
    (BASE + '3.2.1/{os}/{arch}/', '9.4', 'ppc64le', 'NVIDIA publishes DOCA for aarch64, x86_64 only'),
    (BASE + '2.9.3/' + 'x' * 500 + '/{os}/', '9', 'x86_64', "..."),
])
def test_el_baseurl_refused(url, version, arch, says):
    result = doca_el_baseurl(url, version, arch)
    assert result['url'] == '' and says in result['error'] and len(result['error']) < 400


@pytest.mark.parametrize('lines, wanted, offered', [
    (['3.2.1-1.el9', '3.2.0-2.el9'], '3.2.1-1.el9', True),
    (['3.2.1-1.el9', '3.2.0-2.el9'], '3.2.1', True),
    (['3.2.1-1.el9'], '3.2', False),
    (['3.2.1-1.el9'], '3.2.1-1', False),
    (['3.2.10-1.el9'], '3.2.1', False),
    (['  3.2.1-1.el9  '], '3.2.1-1.el9', True),
    ([], '3.2.1', False),
    (None, '3.2.1', False),
    (['3.2.1-1.el9'], '', False),
])
def test_offered_version_from_dnf_repoquery(lines, wanted, offered):
    assert rpm_version_offered(lines, wanted) is offered


def test_filters_adapt_the_pure_functions():
    filters = FilterModule().filters()
    cfg = {'rdma_doca_repo_url': BASE + '3.2.1/{os}/{arch}/', 'distribution_version': '9.4', 'architecture': 'x86_64'}
    assert filters['rdma_doca_el_baseurl'](cfg) == {'url': BASE + '3.2.1/rhel9/x86_64/', 'error': ''}
    assert filters['rdma_rpm_version_offered'](['3.2.1-1.el9'], '3.2.1') is True
