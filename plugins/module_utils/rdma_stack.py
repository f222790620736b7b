# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Decisions about the RDMA stack's kernel modules (rdma role, stack: doca; rolling_upgrade.yml).

Pure functions over command output:
- ``parse_dkms_status``: the lines of ``dkms status`` (dkms 2.x and 3.x formats).
- ``nvidia_dkms_rebuilds``: the NVIDIA DKMS modules installed for a kernel, which must be built again
  once DOCA-OFED replaced the inbox RDMA modules: nvidia-peermem (and nvidia-fs) built against the
  inbox symbols fail to load with "Unknown symbol ib_register_peer_memory_client".
- ``stack_reload``: whether the mlx5_core that loads next (``modinfo -F version mlx5_core``) is the
  loaded one; when not, DOCA-OFED's modules take effect only after openibd restarts or the node
  reboots, which the rolling upgrade does after draining (rdma_reboot_required).
- ``doca_platform_error``: whether the role installs DOCA-OFED on a platform (apt on Debian and Ubuntu, dnf on
  RHEL, Rocky and AlmaLinux 9).
- ``doca_el_baseurl``: the dnf repository directory of NVIDIA's DOCA repository for a RHEL-family host, filling
  the ``{os}`` and ``{arch}`` placeholders of rdma_doca_repo_url from the host's facts.
- ``rpm_version_offered``: whether ``dnf repoquery`` lines offer the pinned version.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re

# NVIDIA's DOCA repository lays out one directory per release, OS and architecture:
# https://linux.mellanox.com/public/repo/doca/<release>/<os>/<arch>/. For the RHEL family the OS directory was
# per minor release (rhel9.4, rhel9.6: e.g. .../doca/2.9.3/rhel9.6/x86_64/) until DOCA 3.1; from DOCA 3.2.0 NVIDIA
# publishes per major release only (rhel9: .../doca/3.2.0/rhel9/x86_64/) and DKMS builds the kernel modules on the
# host (DOCA 3.2.1 "General Support": "NVIDIA no longer provides DOCA-Host for minor OS releases"; DOCA 3.3
# "DOCA-Host Installation and DKMS Management Guide": "Repository structure").
DOCA_PER_MAJOR_FROM = (3, 2, 0)
# Architecture directories: x86_64, and arm64-sbsa for aarch64 servers (NVIDIA/hpc-container-maker's doca_ofed
# building block, archlabel).
DOCA_ARCH_DIRS = {'x86_64': 'x86_64', 'aarch64': 'arm64-sbsa'}
# Platforms the role installs DOCA-OFED on: os_family -> accepted distributions and major releases (None: any).
DOCA_PLATFORMS = {
    'Debian': (None, None),
    'RedHat': (('RedHat', 'Rocky', 'AlmaLinux'), ('9',)),
}
DOCA_ACCEPTED = 'Debian and Ubuntu (apt), RHEL, Rocky Linux and AlmaLinux 9 (dnf)'
_DOCA_RELEASE_RE = re.compile(r'/doca/(\d+)\.(\d+)(?:\.(\d+))?/')
_EL_MINOR_RE = re.compile(r'^(\d+)\.(\d+)')

# dkms 3.x: "nvidia/535.183.01, 6.5.0-35-generic, x86_64: installed"; dkms 2.x before 2.8 used commas
# throughout: "nvidia, 535.183.01, 6.5.0-35-generic, x86_64: installed". A module only added has no
# kernel: "nvidia/535.183.01: added". What follows the state (a warning in brackets) is kept apart.
_DKMS_RE = re.compile(
    r'^(?P<module>[^\s,/:]+)(?:/|,\s*)(?P<version>[^\s,:]+)'
    r'(?:,\s*(?P<kernel>[^\s,:]+)(?:,\s*(?P<arch>[^\s,:]+))?)?'
    r':\s*(?P<state>[A-Za-z]+)(?P<note>.*)$')
# DKMS modules of NVIDIA's driver packages: nvidia (runfile, CUDA repository, Ubuntu), nvidia-current
# (Debian), nvidia-open / nvidia-srv (open and server flavours), nvidia-tesla-NNN (Debian's Tesla
# branches), nvidia-fs (GPUDirect Storage, built against the OFED symbols too).
_NVIDIA_MODULE_RE = re.compile(r'^nvidia([-_][A-Za-z0-9_.-]+)?\Z')


def parse_dkms_status(text):
    """Lines of ``dkms status`` -> [{module, version, kernel, arch, state, note}]; other lines ignored."""
    entries = []
    for line in str(text or '').splitlines():
        match = _DKMS_RE.match(line.strip())
        if not match:
            continue
        entry = match.groupdict()
        entry['kernel'] = entry['kernel'] or ''
        entry['arch'] = entry['arch'] or ''
        entry['note'] = entry['note'].strip()
        entries.append(entry)
    return entries


def nvidia_dkms_rebuilds(text, kernel):
    """``module/version`` of every NVIDIA DKMS module built or installed for ``kernel``, sorted, each once:
    what ``dkms install --force MODULE/VERSION -k KERNEL`` builds again after the RDMA stack changed."""
    wanted = set()
    for entry in parse_dkms_status(text):
        if entry['kernel'] != kernel or entry['state'] not in ('built', 'installed'):
            continue
        if _NVIDIA_MODULE_RE.match(entry['module']):
            wanted.add('%s/%s' % (entry['module'], entry['version']))
    return sorted(wanted)


def stack_reload(loaded_version, next_version, adapters=True):
    """Whether the node must restart openibd or reboot for the installed RDMA modules to be the loaded ones.

    ``loaded_version``: /sys/module/mlx5_core/version ('' when mlx5_core is not loaded or is the inbox
    module, which has no version); ``next_version``: ``modinfo -F version mlx5_core`` ('' for the inbox
    module); ``adapters``: whether the node has RDMA adapters (without one, nothing needs loading).
    -> {'required': bool, 'reasons': [...]}
    """
    loaded = str(loaded_version or '').strip()
    upcoming = str(next_version or '').strip()
    reasons = []
    if adapters and upcoming and loaded != upcoming:
        reasons.append('mlx5_core %s is installed but %s is loaded: restart openibd or reboot to load the '
                       'DOCA-OFED modules' % (upcoming, loaded or 'the inbox module'))
    return {'required': bool(reasons), 'reasons': reasons}


def doca_platform_error(os_family, distribution='', major=''):
    """'' when the role installs DOCA-OFED on this platform, else the refusal naming rdma_stack, the platform and
    what is accepted."""
    accepted = DOCA_PLATFORMS.get(os_family)
    distributions, majors = accepted if accepted else ((), ())
    if accepted and (distributions is None or distribution in distributions) and (majors is None or str(major) in majors):
        return ''
    return ('rdma_stack: doca is supported on %s by this role; this host is %s %s (os_family %s): use rdma_stack: '
            'inbox there' % (DOCA_ACCEPTED, distribution or '?', major or '?', os_family))


def doca_release(url):
    """The DOCA release a repository URL names (``.../doca/3.2.1/...`` -> (3, 2, 1)), or None (an alias such as
    ``latest`` or a mirror with another layout)."""
    match = _DOCA_RELEASE_RE.search(str(url or ''))
    if not match:
        return None
    return tuple(int(part or 0) for part in match.groups())


def doca_el_repo_dir(release, distribution_version):
    """NVIDIA's OS directory for a RHEL-family host: ``rhel<major>`` from DOCA 3.2.0, ``rhel<major>.<minor>``
    before. -> {'dir': str, 'error': str}."""
    version = str(distribution_version or '')
    minor = _EL_MINOR_RE.match(version)
    major = version.split('.', 1)[0]
    if not major.isdigit():
        return {'dir': '', 'error': 'the host reports no RHEL release (distribution_version %s)' % _shown(version)}
    if release is not None and tuple(release) >= DOCA_PER_MAJOR_FROM:
        return {'dir': 'rhel%s' % major, 'error': ''}
    if not minor:
        return {'dir': '', 'error': 'DOCA releases before 3.2.0 have one directory per minor release (rhel9.4) and '
                                    'the host reports none (distribution_version %s)' % _shown(version)}
    return {'dir': 'rhel%s.%s' % (minor.group(1), minor.group(2)), 'error': ''}


def _shown(text, limit=120):
    text = str(text)
    return repr(text if len(text) <= limit else text[:limit - 3] + '...')


def doca_el_baseurl(url, distribution_version, architecture):
    """rdma_doca_repo_url for a RHEL-family host with ``{os}`` and ``{arch}`` filled from the host's facts (a URL
    without them is taken as written: that is how to override the directory). -> {'url': str, 'error': str}."""
    url = str(url or '')
    if '{os}' not in url and '{arch}' not in url:
        return {'url': url, 'error': ''}
    filled = url
    if '{os}' in url:
        release = doca_release(url)
        if release is None:
            return {'url': '', 'error': 'rdma_doca_repo_url %s uses {os} but names no DOCA release (.../doca/<X.Y.Z>/{os}/'
                                        '{arch}/), which decides between rhel9 and rhel9.N; name the release or write '
                                        'the directory instead of {os}' % _shown(url)}
        repo_dir = doca_el_repo_dir(release, distribution_version)
        if repo_dir['error']:
            return {'url': '', 'error': 'rdma_doca_repo_url %s: %s; write the directory instead of {os}'
                                        % (_shown(url), repo_dir['error'])}
        filled = filled.replace('{os}', repo_dir['dir'])
    if '{arch}' in url:
        arch = DOCA_ARCH_DIRS.get(str(architecture or ''))
        if not arch:
            return {'url': '', 'error': 'rdma_doca_repo_url %s uses {arch} but NVIDIA publishes DOCA for %s only '
                                        '(this host: %s)' % (_shown(url), ', '.join(sorted(DOCA_ARCH_DIRS)),
                                                             _shown(architecture))}
        filled = filled.replace('{arch}', arch)
    return {'url': filled, 'error': ''}


def rpm_version_offered(lines, wanted):
    """Whether ``dnf repoquery --queryformat '%{version}-%{release}'`` lines offer ``wanted``, given as
    version-release (exact) or as version (any release of it: dnf installs the newest)."""
    wanted = str(wanted or '').strip()
    if not wanted:
        return False
    for line in lines or []:
        offered = str(line).strip()
        if offered == wanted or offered.startswith(wanted + '-'):
            return True
    return False
