# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""APT sources as nodes have them (sources.list(5): the one-line format and deb822), and what the
nvidia_driver role takes from them: whether non-free is enabled, and the node's own mirrors."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible_collections.gpucluster.core.plugins.filter.nvidia import nvidia_debian_sources
from ansible_collections.gpucluster.core.plugins.filter.apt_sources import apt_site_repository_errors
from ansible_collections.gpucluster.core.plugins.module_utils import apt_sources

# Debian 12's installer writes the one-line format; non-free-firmware is not non-free.
ONE_LINE = """# deb cdrom:[Debian GNU/Linux 12.8.0 _Bookworm_ - Official amd64 NETINST]/ bookworm main

deb http://mirror.example.internal/debian/ bookworm main non-free-firmware
deb-src http://mirror.example.internal/debian/ bookworm main non-free-firmware

deb http://security.debian.org/debian-security bookworm-security main non-free-firmware
deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://mirror.example.internal/debian/ bookworm-updates main
"""
# Debian's container and cloud images use deb822 (debian.sources); the cloud images name a mirror list file.
DEB822 = """Types: deb
# the site's mirror
URIs: https://mirror.example.internal/debian/
Suites: bookworm bookworm-updates
Components: main contrib non-free non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: https://mirror.example.internal/debian-security/
Suites: bookworm-security
Components: main contrib
  non-free non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Enabled: no
Types: deb
URIs: http://old.example.internal/debian/
Suites: bookworm
Components: main
"""
CLOUD = """Types: deb deb-src
URIs: mirror+file:///etc/apt/mirrors/debian.list
Suites: bookworm bookworm-updates bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""
FALLBACK = {'archive': 'https://deb.debian.org/debian', 'security': 'https://security.debian.org/debian-security'}


def test_one_line_format():
    entries = apt_sources.parse_sources(ONE_LINE)
    assert [(e['types'], e['uris'], e['suites']) for e in entries] == [
        (['deb'], ['http://mirror.example.internal/debian/'], ['bookworm']),
        (['deb-src'], ['http://mirror.example.internal/debian/'], ['bookworm']),
        (['deb'], ['http://security.debian.org/debian-security'], ['bookworm-security']),
        (['deb'], ['http://mirror.example.internal/debian/'], ['bookworm-updates'])]
    assert not apt_sources.has_component(entries, 'non-free')
    assert apt_sources.has_component(entries, 'non-free-firmware')


def test_deb822_with_comments_continuations_and_a_disabled_stanza():
    entries = apt_sources.parse_sources(DEB822, deb822=True)
    assert len(entries) == 2
    assert entries[1]['components'] == ['main', 'contrib', 'non-free', 'non-free-firmware']
    assert apt_sources.archive_uri(entries, 'bookworm') == 'https://mirror.example.internal/debian'
    assert apt_sources.archive_uri(entries, 'bookworm-security') == 'https://mirror.example.internal/debian-security'
    assert apt_sources.archive_uri(entries, 'trixie') == ''


@pytest.mark.parametrize('files, mirror, expected', [
    # A stock Debian 12 install: non-free-firmware only, the site's http mirror taken for the added components.
    ({'/etc/apt/sources.list': ONE_LINE}, '',
     {'nonfree': False, 'archive': 'http://mirror.example.internal/debian',
      'security': 'http://security.debian.org/debian-security', 'from': {'archive': 'node', 'security': 'node'}}),
    ({'/etc/apt/sources.list': None, '/etc/apt/sources.list.d/debian.sources': DEB822}, '',
     {'nonfree': True, 'archive': 'https://mirror.example.internal/debian',
      'security': 'https://mirror.example.internal/debian-security', 'from': {'archive': 'node', 'security': 'node'}}),
    # A mirror list file is no URL for another file: Debian's own mirrors.
    ({'/etc/apt/sources.list.d/debian.sources': CLOUD}, '',
     {'nonfree': False, 'archive': FALLBACK['archive'], 'security': FALLBACK['security'],
      'from': {'archive': 'default', 'security': 'default'}}),
    # The variable wins; a .list file in sources.list.d is the one-line format.
    ({'/etc/apt/sources.list.d/site.list': ONE_LINE}, 'http://apt.example.internal/debian',
     {'nonfree': False, 'archive': 'http://apt.example.internal/debian',
      'security': 'http://security.debian.org/debian-security', 'from': {'archive': 'setting', 'security': 'node'}}),
    ({}, '', {'nonfree': False, 'archive': FALLBACK['archive'], 'security': FALLBACK['security'],
              'from': {'archive': 'default', 'security': 'default'}}),
])
def test_what_the_driver_role_takes_from_a_nodes_sources(files, mirror, expected):
    assert nvidia_debian_sources(files, 'bookworm', mirror, '', FALLBACK) == expected


@pytest.mark.parametrize('text', ['', 'garbage', 'deb', 'deb http://x', None, 42, 'Types: deb\nURIs: http://x\n'])
def test_what_is_not_an_entry_is_left_out(text):
    assert apt_sources.parse_sources(text) == [] and apt_sources.parse_sources(text, deb822=True) == []


_SITE = {'name': 'site-slurm', 'uris': 'https://repo.example.org/slurm/ubuntu', 'suites': 'jammy',
         'components': ['main'], 'signed_by': 'https://repo.example.org/slurm/site-slurm.asc'}


@pytest.mark.parametrize('repository', [
    {}, None, _SITE, dict(_SITE, uris=['http://mirror.example.org/slurm']), dict(_SITE, signed_by='/etc/apt/keyrings/s.gpg'),
    dict(_SITE, signed_by='-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nmDMEZ...\n-----END PGP PUBLIC KEY BLOCK-----\n'),
    {'uris': 'https://r.example.org/', 'suites': ['jammy', 'jammy-updates'], 'signed_by': '/usr/share/keyrings/r.gpg'},
])
def test_a_site_repository_apt_can_authenticate_is_accepted(repository):
    assert apt_sources.site_repository_errors(repository, 'slurm_apt_repository') == []


@pytest.mark.parametrize('repository, says', [
    ('https://r.example.org', 'slurm_apt_repository must be a mapping'),
    (dict(_SITE, signed_by=''), 'slurm_apt_repository.signed_by must be the repository\'s signing key'),
    ({'uris': 'https://r.example.org/', 'suites': 'jammy'}, 'slurm_apt_repository.signed_by must be'),
    (dict(_SITE, signed_by='http://repo.example.org/key.asc'), 'slurm_apt_repository.signed_by must be'),
    (dict(_SITE, uris='ftp://r.example.org/'), 'slurm_apt_repository.uris must be one or more http'),
    (dict(_SITE, uris=None), 'slurm_apt_repository.uris must be one or more http'),
    (dict(_SITE, suites=''), 'slurm_apt_repository.suites must name one or more suites'),
    (dict(_SITE, components='main; rm -rf'), 'slurm_apt_repository.components must be a list'),
    (dict(_SITE, name='my repo'), 'slurm_apt_repository.name must be a word'),
    (dict(_SITE, trusted=True), 'slurm_apt_repository has keys it does not take: trusted'),
])
def test_a_bad_site_repository_is_refused_naming_the_variable(repository, says):
    errors = apt_sources.site_repository_errors(repository, 'slurm_apt_repository')
    assert any(says in e for e in errors), errors


def test_the_filter_adapts_and_names_the_variable():
    assert apt_site_repository_errors(_SITE, 'slurm_apt_repository') == []
    assert apt_site_repository_errors({'uris': 'x'}, 'my_repo')[0].startswith('my_repo.uris')
    with pytest.raises(Exception, match='name the variable'):
        apt_site_repository_errors(_SITE, '')
