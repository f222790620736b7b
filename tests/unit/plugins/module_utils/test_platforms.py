# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The platform table (module_utils/platforms.py, cited in docs/platforms.md) and node_exporter's web option:
Ubuntu 22.04's archive offers node_exporter 1.3.1, which reads --web.config; 1.5.0 and later read
--web.config.file. The monitoring role writes the option its node's node_exporter knows."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import re
import subprocess
import sys

import pytest
import yaml

from ansible_collections.gpucluster.core.plugins.filter.platforms import FilterModule
from ansible_collections.gpucluster.core.plugins.module_utils import platforms
from ansible_collections.gpucluster.core.plugins.module_utils import slurm_versions

REPO = os.path.join(os.path.dirname(__file__), '..', '..', '..', '..')


@pytest.mark.parametrize('distribution, version, expected', [
    ('Debian', '12', '1.5.0'), ('Debian', '12.7', '1.5.0'), ('Debian', '13', '1.9.0'),
    ('Ubuntu', '22.04', '1.3.1'), ('Ubuntu', '24.04', '1.7.0'), ('Rocky', '9.4', ''), ('', '', ''),
])
def test_archive_versions(distribution, version, expected):
    assert platforms.archive_version(distribution, version, 'prometheus-node-exporter') == expected


# Slurm and munge as each release's archive offers them (docs/platforms.md cites every row): the slurm role's
# default pins.
@pytest.mark.parametrize('distribution, version, slurm, munge', [
    ('Debian', '12', '22.05.8', '0.5.15'), ('Debian', '12.11', '22.05.8', '0.5.15'),
    ('Debian', '13', '24.11.5', '0.5.16'), ('Debian', '13.1', '24.11.5', '0.5.16'),
    ('Ubuntu', '22.04', '21.08.5', '0.5.14'), ('Ubuntu', '24.04', '23.11.4', '0.5.15'),
    ('Ubuntu', '20.04', '', ''), ('Debian', '11', '', ''), ('Rocky', '9.4', '', ''), ('RedHat', '9.4', '', ''),
    ('', '', '', ''), (None, None, '', ''),
])
def test_slurm_and_munge_archive_versions(distribution, version, slurm, munge):
    assert platforms.archive_version(distribution, version, 'slurm-wlm') == slurm
    assert platforms.archive_version(distribution, version, 'munge') == munge
    assert platforms.resolve_pin('', distribution, version, 'slurm-wlm') == slurm
    assert platforms.resolve_pin(None, distribution, version, 'munge') == munge
    assert platforms.resolve_pin(' 23.02.7 ', distribution, version, 'slurm-wlm') == '23.02.7'   # a pin stands


def test_every_slurm_release_of_the_table_is_one_slurm_versions_knows():
    # The upgrade window and the cross-node rule judge these versions: each major release must be known there.
    for release, packages in platforms.ARCHIVE.items():
        if 'slurm-wlm' in packages:
            assert slurm_versions.major_release(packages['slurm-wlm']) in slurm_versions.RELEASES, release
        assert release in platforms.CODENAMES, release


@pytest.mark.parametrize('distribution, version, name', [
    ('Debian', '12.7', 'Debian 12 (bookworm)'), ('Ubuntu', '24.04', 'Ubuntu 24.04 (noble)'),
    ('Ubuntu', '20.04', 'Ubuntu 20.04'), ('', '', 'an unknown distribution'),
])
def test_release_names(distribution, version, name):
    assert platforms.release_name(distribution, version) == name


PACKAGES = {'slurm_version': 'slurm-wlm', 'slurm_munge_version': 'munge'}


def _pins(slurm='', munge=''):
    return {'slurm_version': slurm, 'slurm_munge_version': munge}


@pytest.mark.parametrize('pins, distribution, version', [
    (_pins(), 'Debian', '12'), (_pins(), 'Ubuntu', '24.04'),
    (_pins('22.05.8', '0.5.15'), 'Debian', '12.9'), (_pins('24.11.5'), 'Debian', '13'),
    (_pins('21.08.5', '0.5.14'), 'Ubuntu', '22.04'),
    (_pins('20.11.9', '0.5.13'), 'Ubuntu', '20.04'),      # unknown to the table: the install checks the offer
])
def test_pins_accepted(pins, distribution, version):
    assert platforms.pin_errors(pins, distribution, version, PACKAGES) == []


def test_an_empty_pin_on_a_release_the_table_does_not_know_is_refused():
    errors = platforms.pin_errors(_pins(munge='0.5.13'), 'Ubuntu', '20.04', PACKAGES)
    assert errors == [
        'slurm_version is empty, which means the slurm-wlm version the node\'s archive offers, but the platform table '
        '(docs/platforms.md) records none for Ubuntu 20.04: set slurm_version to the upstream version (the part '
        'before "-") that this host\'s package sources offer']
    # Also with the site's repository and without the offer check (tasks_from upgrade): nothing to resolve to.
    assert platforms.pin_errors(_pins(), 'Ubuntu', '20.04', PACKAGES, own_repository=True, check_offered=False) == [
        e.replace('slurm_version', 'slurm_munge_version').replace('slurm-wlm', 'munge') for e in errors] + errors


EL_PACKAGES = {'slurm_version': 'slurm', 'slurm_munge_version': 'munge'}


@pytest.mark.parametrize('distribution', ['RedHat', 'Rocky', 'AlmaLinux'])
def test_an_empty_pin_on_el_says_where_the_packages_come_from(distribution):
    # EPEL keeps only its newest build: nothing is recorded for EL (docs/platforms.md), a pin is required.
    assert distribution in platforms.EPEL_DISTRIBUTIONS
    assert platforms.archive_version(distribution, '9.4', 'slurm') == platforms.archive_version(distribution, '9.4', 'munge') == ''
    errors = platforms.pin_errors(_pins(munge='0.5.13'), distribution, '9.4', EL_PACKAGES, repository='slurm_dnf_repository')
    assert errors == [
        'slurm_version is empty, which means the slurm version the node\'s archive offers, but %s 9.4 has none this '
        'collection can record (docs/platforms.md: EPEL keeps only its newest build, a site repository '
        '(slurm_dnf_repository) its own): set slurm_version to the upstream version (the part before "-") that this '
        'host\'s package sources offer (dnf repoquery --available slurm lists them)' % distribution]
    # Pinned: accepted, with or without the site's repository (the install checks what dnf offers).
    for own in (False, True):
        assert platforms.pin_errors(_pins('24.11.5', '0.5.13'), distribution, '9.4', EL_PACKAGES, own_repository=own) == []
    # Other distributions the table does not know keep the general message.
    assert 'records none for Fedora 40' in platforms.pin_errors(_pins('', '0.5.13'), 'Fedora', '40', EL_PACKAGES)[0]


@pytest.mark.parametrize('pins, distribution, version, message', [
    (_pins('22.05.8'), 'Ubuntu', '22.04',
     'slurm_version = "22.05.8" is not offered on Ubuntu 22.04 (jammy): its archive has slurm-wlm 21.08.5 '
     '(docs/platforms.md). Set slurm_version to "21.08.5" or leave it empty (the archive\'s version), or install '
     'slurm-wlm 22.05.8 from your own package repository (slurm_apt_repository)'),
    (_pins('22.05.8'), 'Ubuntu', '24.04',
     'slurm_version = "22.05.8" is not offered on Ubuntu 24.04 (noble): its archive has slurm-wlm 23.11.4'),
    (_pins('22.05.9'), 'Debian', '12.4',
     'slurm_version = "22.05.9" is not offered on Debian 12 (bookworm): its archive has slurm-wlm 22.05.8'),
    (_pins('24.11.5', '0.5.15'), 'Debian', '13',
     'slurm_munge_version = "0.5.15" is not offered on Debian 13 (trixie): its archive has munge 0.5.16'),
    # As the install compares: the upstream version exactly, never the package version or an epoch.
    (_pins('22.05.8-4+deb12u3'), 'Debian', '12', 'slurm_version = "22.05.8-4+deb12u3" is not offered'),
    (_pins('1:24.11.5'), 'Debian', '13', 'slurm_version = "1:24.11.5" is not offered'),
    (_pins('22.05'), 'Debian', '12', 'slurm_version = "22.05" is not offered'),
])
def test_a_pin_the_archive_does_not_offer_is_refused(pins, distribution, version, message):
    errors = platforms.pin_errors(pins, distribution, version, PACKAGES, repository='slurm_apt_repository')
    assert len(errors) == 1 and errors[0].startswith(message), errors
    # The site's own repository, or the upgrade path (whose install checks what the sources offer), takes it.
    assert platforms.pin_errors(pins, distribution, version, PACKAGES, own_repository=True) == []
    assert platforms.pin_errors(pins, distribution, version, PACKAGES, check_offered=False) == []


def _hosts(**spec):
    return dict((h, {'version': v, 'distribution': d, 'distribution_version': r}) for h, (v, d, r) in spec.items())


@pytest.mark.parametrize('hosts', [
    _hosts(ctl=('22.05.8', 'Debian', '12'), n1=('22.05.8', 'Debian', '12.5')),
    _hosts(ctl=('23.11.4', 'Ubuntu', '24.04'), n1=('23.02.7', 'Ubuntu', '24.04'), n2=('22.05.8', 'Debian', '12')),
    _hosts(ctl=('24.11.5', 'Debian', '13'), n1=('23.02.7', 'Debian', '12')),     # three releases from 24.11
    _hosts(ctl=('22.05.8.1', 'Debian', '12'), n1=('22.05.8', 'Debian', '12')),   # the lab's test double, controller first
    _hosts(ctl=('22.05.8', 'Debian', '12'), n1=('latest', 'Debian', '12')),      # no version: its own check names it
    _hosts(n1=('24.11.5', 'Debian', '13')),                                      # the controller is not in the play
    _hosts(ctl=('26.05.1', 'Debian', '14'), n1=('25.11.2', 'Debian', '14')),     # a release not known: "not newer" only
])
def test_cluster_versions_accepted(hosts):
    assert platforms.slurm_cluster_errors('ctl', hosts) == []


def test_a_slurmd_newer_than_slurmctld_or_outside_its_window_is_refused():
    hosts = _hosts(ctl=('22.05.8', 'Debian', '12'), n1=('24.11.5', 'Debian', '13'), n2=('22.05.9', 'Debian', '12'),
                   n3=('20.02.7', 'Ubuntu', '20.04'), n4=('21.08.5', 'Ubuntu', '22.04'))
    errors = platforms.slurm_cluster_errors('ctl', hosts)
    assert len(errors) == 1
    assert errors[0].startswith(
        'slurm_version differs across the cluster: the controller ctl at 22.05.8 on Debian 12 (bookworm); newer than '
        'slurmctld: n1 at 24.11.5 on Debian 13 (trixie), n2 at 22.05.9 on Debian 12 (bookworm); older than the '
        'releases slurmctld 22.05 talks to (21.08, 20.11): n3 at 20.02.7 on Ubuntu 20.04. Every slurmd')
    assert 'on mixed releases set one slurm_version for the whole cluster' in errors[0]
    assert platforms.slurm_cluster_errors('ctl', _hosts(ctl=('22.05.8', 'Debian', '12'), n1=('22.05.8.1', 'Debian', '12')))


@pytest.mark.parametrize('version, flag', [
    ('1.3.1', '--web.config'), ('1.4.1', '--web.config'), ('1.5.0', '--web.config.file'),
    ('1.9.1', '--web.config.file'), ('v1.10.2', '--web.config.file'), ('', '--web.config.file'),
    ('unknown', '--web.config.file'),
])
def test_node_exporter_web_flag(version, flag):
    assert platforms.node_exporter_web_flag(version) == flag


def test_every_archive_row_is_cited_in_docs_platforms():
    with open(os.path.join(REPO, 'docs', 'platforms.md')) as handle:
        doc = handle.read()
    for (distribution, release), packages in platforms.ARCHIVE.items():
        for package, version in packages.items():
            row = re.search(r'^\| %s %s [^|]*\| %s \| %s[ (][^|]*\| https://\S+' % (
                re.escape(distribution), re.escape(release), re.escape(package), re.escape(version)), doc, re.M)
            assert row, 'docs/platforms.md has no cited row for %s %s %s %s' % (distribution, release, package, version)


RENDER = os.path.join(REPO, 'tests', 'unit', 'roles', 'k8s_render.py')


def test_the_role_writes_the_option_its_node_exporter_knows():
    # Rendered by Ansible's templar in a process of its own (tests/unit/roles/k8s_render.py: the collection's
    # filters found by name, the role's defaults and vars loaded), as in a play.
    cases = [('package', 'Ubuntu', '22.04', '--web.config'), ('package', 'Debian', '12', '--web.config.file'),
             ('package', 'Ubuntu', '24.04', '--web.config.file'), ('binary', 'Ubuntu', '22.04', '--web.config.file')]
    # The role loads its OS file (vars/Debian.yml on Debian and Ubuntu) before these are read.
    with open(os.path.join(REPO, 'roles', 'monitoring', 'vars', 'Debian.yml')) as handle:
        packages = yaml.safe_load(handle)['__monitoring_packages']
    jobs = []
    for method, distribution, version, _flag in cases:
        for tls in (True, False):
            jobs.append({'role': 'monitoring', 'expression': '{{ __monitoring_node_exporter_web_args }}',
                         'variables': {'monitoring_install_method': method, 'monitoring_tls': tls,
                                       'ansible_facts': {'distribution': distribution, 'distribution_version': version},
                                       '__monitoring_packages': packages,
                                       '__monitoring_web_config': '/etc/gpucluster-monitoring/web.yml'}})
    proc = subprocess.run([sys.executable, RENDER], input=json.dumps(jobs), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout)
    for index, (_method, _distribution, _version, flag) in enumerate(cases):
        assert results[2 * index] == [flag + '=/etc/gpucluster-monitoring/web.yml'], cases[index]
        assert results[2 * index + 1] == [], cases[index]


def test_filters_name_themselves_on_malformed_input():
    filters = FilterModule().filters()
    with pytest.raises(Exception, match='platform_archive_version: malformed input'):
        filters['platform_archive_version']('Debian')
    with pytest.raises(Exception, match='platform_pin: malformed input .*the facts must be a mapping'):
        filters['platform_pin']('', 'Debian', 'slurm-wlm')
    with pytest.raises(Exception, match='platform_pin: malformed input .*the pin must be a string'):
        filters['platform_pin']({'x': 1}, {'distribution': 'Debian'}, 'slurm-wlm')
    with pytest.raises(Exception, match='platform_pin_errors: malformed input .*no package named for slurm_version'):
        filters['platform_pin_errors']({'slurm_version': ''}, {}, {})
    with pytest.raises(Exception, match='platform_pin_errors: malformed input .*slurm_version must be a string'):
        filters['platform_pin_errors']({'slurm_version': 22.05}, {}, PACKAGES)
    with pytest.raises(Exception, match='slurm_cluster_version_errors: malformed input'):
        filters['slurm_cluster_version_errors'](['ctl'], 'ctl')


def test_filters_read_ansible_facts():
    filters = FilterModule().filters()
    facts = {'distribution': 'Ubuntu', 'distribution_version': '24.04', 'os_family': 'Debian'}
    assert filters['platform_pin']('', facts, 'slurm-wlm') == '23.11.4'
    assert filters['platform_pin']('', {}, 'slurm-wlm') == ''
    assert filters['platform_pin_errors'](_pins('23.11.4', ''), facts, PACKAGES) == []
    assert filters['platform_pin_errors'](_pins('', ''), {}, PACKAGES, check_offered=False)[0].startswith(
        'slurm_munge_version is empty')
