# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Platform facts, one place: what a release's archive offers, and the features that follow a version.

Archive facts are recorded from the public package indexes and cited in docs/platforms.md (one row per
fact, with its source); a release or package not listed is unknown here, and callers say what they
assume then. Pure data and functions, no Ansible imports.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re

# (distribution, release as Ansible's distribution_version gives it: '12', '22.04') -> {package: upstream
# version the archive offers}.
ARCHIVE = {
    ('Debian', '12'): {'prometheus-node-exporter': '1.5.0'},
    ('Debian', '13'): {'prometheus-node-exporter': '1.9.0'},
    ('Ubuntu', '22.04'): {'prometheus-node-exporter': '1.3.1'},
}

# node_exporter took its web configuration (TLS, basic auth) as --web.config before 1.5.0 and as
# --web.config.file from 1.5.0 on (prometheus/node_exporter CHANGELOG, 1.5.0: "--web.config" renamed).
NODE_EXPORTER_WEB_CONFIG_FILE_FROM = (1, 5, 0)


def _release(distribution, version):
    """'12.7' -> '12' for Debian (point releases share an archive); Ubuntu keeps 'YY.MM'."""
    version = str(version or '').strip()
    if distribution == 'Debian':
        return version.split('.', 1)[0]
    return '.'.join(version.split('.')[:2])


def archive_version(distribution, version, package):
    """The upstream version of ``package`` in the archive of a release, or '' when not recorded."""
    return ARCHIVE.get((str(distribution or ''), _release(distribution, version)), {}).get(package, '')


def _numbers(version):
    match = re.match(r'^\s*v?(\d+)\.(\d+)(?:\.(\d+))?', str(version or ''))
    if not match:
        return None
    return tuple(int(p or 0) for p in match.groups())


def node_exporter_web_flag(version):
    """The command-line option node_exporter ``version`` reads its web configuration from; the current one
    (--web.config.file) when the version is unknown ('' or unparsable)."""
    numbers = _numbers(version)
    if numbers is not None and numbers < NODE_EXPORTER_WEB_CONFIG_FILE_FROM:
        return '--web.config'
    return '--web.config.file'
