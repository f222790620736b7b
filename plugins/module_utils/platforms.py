# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Platform facts, one place: what a release's archive offers, and the features that follow a version.

Archive facts are recorded from the public package indexes and cited in docs/platforms.md (one row per
fact, with its source); a release or package not listed is unknown here, and callers say what they
assume then. Pure data and functions, no Ansible imports.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re

from ansible_collections.gpucluster.core.plugins.module_utils import slurm_versions

# (distribution, release as Ansible's distribution_version gives it: '12', '22.04') -> {package: upstream
# version the archive offers}. A package is named as its source package is (slurm-wlm builds slurmd,
# slurmctld, slurmdbd, slurm-client and libpam-slurm-adopt at one version).
ARCHIVE = {
    ('Debian', '12'): {'prometheus-node-exporter': '1.5.0', 'slurm-wlm': '22.05.8', 'munge': '0.5.15',
                       'restic': '0.14.0'},
    ('Debian', '13'): {'prometheus-node-exporter': '1.9.0', 'slurm-wlm': '24.11.5', 'munge': '0.5.16',
                       'restic': '0.18.0'},
    ('Ubuntu', '22.04'): {'prometheus-node-exporter': '1.3.1', 'slurm-wlm': '21.08.5', 'munge': '0.5.14',
                          'restic': '0.12.1'},
    ('Ubuntu', '24.04'): {'prometheus-node-exporter': '1.7.0', 'slurm-wlm': '23.11.4', 'munge': '0.5.15',
                          'restic': '0.16.4'},
}

# The releases' code names, for messages.
CODENAMES = {
    ('Debian', '12'): 'bookworm',
    ('Debian', '13'): 'trixie',
    ('Ubuntu', '22.04'): 'jammy',
    ('Ubuntu', '24.04'): 'noble',
}

# node_exporter took its web configuration (TLS, basic auth) as --web.config before 1.5.0 and as
# --web.config.file from 1.5.0 on (prometheus/node_exporter CHANGELOG, 1.5.0: "--web.config" renamed).
NODE_EXPORTER_WEB_CONFIG_FILE_FROM = (1, 5, 0)

DOC = 'docs/platforms.md'

# RHEL, Rocky and AlmaLinux (as Ansible names them): Slurm comes from EPEL or a site repository and munge from the
# distribution or that repository. EPEL keeps only its newest build of a package, so no version is recorded here for
# them and a pin is required (docs/platforms.md).
EPEL_DISTRIBUTIONS = ('RedHat', 'Rocky', 'AlmaLinux')


def _release(distribution, version):
    """'12.7' -> '12' for Debian (point releases share an archive); Ubuntu keeps 'YY.MM'."""
    version = str(version or '').strip()
    if distribution == 'Debian':
        return version.split('.', 1)[0]
    return '.'.join(version.split('.')[:2])


def archive_version(distribution, version, package):
    """The upstream version of ``package`` in the archive of a release, or '' when not recorded."""
    return ARCHIVE.get((str(distribution or ''), _release(distribution, version)), {}).get(package, '')


def release_name(distribution, version):
    """'Debian 12 (bookworm)', 'Ubuntu 22.04 (jammy)'; a release the table does not know as Ansible names it."""
    distribution = str(distribution or '').strip()
    key = (distribution, _release(distribution, version))
    if key in CODENAMES:
        return '%s %s (%s)' % (key[0], key[1], CODENAMES[key])
    return ('%s %s' % (distribution or 'an unknown distribution', str(version or '').strip())).strip()


def resolve_pin(pin, distribution, version, package):
    """The version to install: ``pin`` itself, or when it is empty what the release's archive offers
    ('' when the table does not record ``package`` for the release)."""
    pin = '' if pin is None else str(pin).strip()
    return pin or archive_version(distribution, version, package)


def pin_errors(pins, distribution, version, packages, repository='', own_repository=False, check_offered=True):
    """Why the version pins cannot be installed on a release ([] when they can).

    ``pins``: {variable: pin}, an empty pin meaning "what the release's archive offers"; ``packages``:
    {variable: the package whose archive version it pins}. Refused: an empty pin where the table does
    not record the package for the release; with ``check_offered``, a pin other than the upstream
    version the release's archive offers (compared as the package install compares it: the upstream
    version exactly, without epoch or Debian revision), unless ``own_repository``: the site installs
    from its own package repository (the variable ``repository`` names, in the messages), and the
    install then checks the pin against what its package sources offer.
    """
    errors = []
    platform = release_name(distribution, version)
    for variable in sorted(pins):
        pin = pins[variable]
        pin = '' if pin is None else str(pin).strip()
        package = packages[variable]
        offered = archive_version(distribution, version, package)
        if not pin:
            if not offered and distribution in EPEL_DISTRIBUTIONS:
                errors.append(
                    '%s is empty, which means the %s version the node\'s archive offers, but %s has none this '
                    'collection can record (%s: EPEL keeps only its newest build, a site repository%s its own): set %s '
                    'to the upstream version (the part before "-") that this host\'s package sources offer '
                    '(dnf repoquery --available %s lists them)' % (
                        variable, package, platform, DOC, (' (%s)' % repository) if repository else '', variable,
                        package))
            elif not offered:
                errors.append(
                    '%s is empty, which means the %s version the node\'s archive offers, but the platform table '
                    '(%s) records none for %s: set %s to the upstream version (the part before "-") that this '
                    'host\'s package sources offer' % (variable, package, DOC, platform, variable))
            continue
        if check_offered and offered and pin != offered and not own_repository:
            errors.append(
                '%s = "%s" is not offered on %s: its archive has %s %s (%s). Set %s to "%s" or leave it empty '
                '(the archive\'s version), or install %s %s from your own package repository%s' % (
                    variable, pin, platform, package, offered, DOC, variable, offered, package, pin,
                    (' (%s)' % repository) if repository else ''))
    return errors


def _numbers(version):
    match = re.match(r'^\s*v?(\d+)\.(\d+)(?:\.(\d+))?', str(version or ''))
    if not match:
        return None
    return tuple(int(p or 0) for p in match.groups())


def _upstream_key(version):
    """(22, 5, 8) of '22.05.8', (22, 5, 8, 1) of '22.05.8.1'; None when it is no dotted version."""
    text = str(version or '').strip()
    text = text.split(':', 1)[1] if re.match(r'^[0-9]+:', text) else text
    match = re.match(r'^([0-9]+(?:\.[0-9]+)*)', text)
    if not match:
        return None
    return tuple(int(p) for p in match.group(1).split('.'))


def slurm_cluster_errors(controller, hosts):
    """Slurm's rule across the cluster, for the versions each host will install: no slurmd or client newer
    than slurmctld, and none older than the releases slurmctld still talks to (SchedMD's window, the same
    as for its state: module_utils/slurm_versions.py).

    ``controller``: the controller host's name; ``hosts``: {host: {'version': its resolved slurm_version,
    'distribution': ..., 'distribution_version': ...}} for the Slurm hosts of the play (the controller
    among them, or nothing is judged). A version that is no Slurm version is left to the checks that name
    it; a controller release this collection does not know is judged by "not newer" alone.
    """
    if controller not in hosts:
        return []

    def label(host):
        entry = hosts[host]
        return '%s at %s on %s' % (host, str(entry.get('version') or '').strip(),
                                   release_name(entry.get('distribution'), entry.get('distribution_version')))

    want = str(hosts[controller].get('version') or '').strip()
    try:
        want_major = slurm_versions.major_release(want)
    except slurm_versions.SlurmVersionError:
        return []
    want_key = _upstream_key(want)
    accepted = slurm_versions.window(want_major) if want_major in slurm_versions.RELEASES else None
    newer, outside = [], []
    for host in sorted(hosts):
        if host == controller:
            continue
        have = str(hosts[host].get('version') or '').strip()
        try:
            have_major = slurm_versions.major_release(have)
        except slurm_versions.SlurmVersionError:
            continue
        if _upstream_key(have) > want_key:
            newer.append(label(host))
        elif have_major != want_major and accepted is not None and have_major not in accepted:
            outside.append(label(host))
    if not newer and not outside:
        return []
    parts = []
    if newer:
        parts.append('newer than slurmctld: %s' % ', '.join(newer))
    if outside:
        parts.append('older than the releases slurmctld %s talks to (%s): %s'
                     % (want_major, ', '.join(accepted), ', '.join(outside)))
    return ['slurm_version differs across the cluster: the controller %s; %s. Every slurmd and client must run '
            'the controller\'s version or an older one inside its window (%s). An empty slurm_version is each '
            'node\'s own archive version (%s): on mixed releases set one slurm_version for the whole cluster '
            'that every release can install (with slurm_apt_repository where an archive does not offer it)'
            % (label(controller), '; '.join(parts), slurm_versions.GUIDE_URL, DOC)]


def node_exporter_web_flag(version):
    """The command-line option node_exporter ``version`` reads its web configuration from; the current one
    (--web.config.file) when the version is unknown ('' or unparsable)."""
    numbers = _numbers(version)
    if numbers is not None and numbers < NODE_EXPORTER_WEB_CONFIG_FILE_FROM:
        return '--web.config'
    return '--web.config.file'
