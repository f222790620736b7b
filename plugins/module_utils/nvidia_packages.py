# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA package names per OS and source: the one table both sides read.

The nvidia_driver and cuda_toolkit roles build their install plans from it
(plugins/filter/nvidia.py) and stack_facts reads installed versions back with rules derived from
it (plugins/module_utils/stack_versions.py), so a package name changes in one place and the drift
audit always recognises what the roles install. Pure data and string functions, no Ansible
imports.

Names are templates: ``{branch}`` is the driver branch (535), ``{cuda_major}``/``{cuda_minor}``
the CUDA toolkit version, ``{cudnn_major}`` cuDNN's major version. A slot that differs between the
kernel module flavours is a dict ``{'open': (...), 'proprietary': (...)}``.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re

FLAVOURS = ('open', 'proprietary')

# A node's architecture as Ansible reports it (ansible_facts['architecture']) -> its dpkg name
# (dpkg --print-architecture); rpm names it as Ansible does.
DEB_ARCHITECTURES = {'x86_64': 'amd64', 'aarch64': 'arm64', 'ppc64le': 'ppc64el', 'i386': 'i386', 'i686': 'i386'}
# Packages of no architecture, installed the same way on every node.
ARCH_INDEPENDENT = ('all', 'noarch')


def native_architectures(architecture):
    """The names a node's own packages carry: ``x86_64`` -> {'x86_64', 'amd64'}; a dpkg name is taken as
    it is (``arm64`` -> {'arm64', 'aarch64'}). Empty for an empty architecture."""
    architecture = str(architecture or '').strip()
    if not architecture:
        return frozenset()
    names = {architecture}
    names.update(deb for machine, deb in DEB_ARCHITECTURES.items() if machine == architecture)
    names.update(machine for machine, deb in DEB_ARCHITECTURES.items() if deb == architecture)
    return frozenset(names)


def foreign_package(package_arch, architecture):
    """True when a package of ``package_arch`` (dpkg's or rpm's name; '' or None when not given) is
    another architecture's than the node's (``architecture``): an i386 library on an amd64 node
    (multiarch) does not make the node's own package installed. Never foreign when either is unknown."""
    package_arch = str(package_arch or '').strip()
    native = native_architectures(architecture)
    if not package_arch or not native or package_arch in ARCH_INDEPENDENT:
        return False
    return package_arch not in native


# One row per (distribution, driver source) that installs packages (the runfile installs none).
#   meta_headless / meta_desktop  the metapackage that pulls the driver without / with X11
#   kernel_module                 the kernel module package (when the metapackage does not pull it)
#   utilities                     userspace packages installed at the driver version
#   persistenced                  nvidia-persistenced
#   unpinned                      names installed at the source's own version (not the driver's)
#   carrier                       the package whose version is the installed driver version
#   fabricmanager / nscq          ((lowest branch, names), ...): first row whose branch fits wins
#   last_branch                   the last branch these names fit (None: no known end)
#   meta_no_dkms                  the userspace metapackage without the DKMS module (Ubuntu: what goes with
#                                 Canonical's prebuilt modules); its version is the driver's
#   prebuilt_modules              Canonical's prebuilt, signed kernel module metapackage of a kernel flavour
#                                 ({kernel_flavour}: generic, nvidia, aws...); its version is the kernel's ABI
#                                 (5.15.0-112.122), not the driver's, so the drift audit never reads it
#   open_every_build              the source ships the open kernel modules of every build from R515 (the
#                                 nvidia_driver role's auto flavour takes them from Turing on); Debian's
#                                 nvidia-open-kernel-dkms lags its nvidia-kernel-dkms (bookworm has none at
#                                 535.309.01, the nvidia_driver scenario's refused case)
DRIVER_SOURCES = (
    {
        'distribution': 'Debian', 'source': 'distro', 'manager': 'apt',
        'meta_headless': (), 'meta_desktop': ('nvidia-driver',),
        'kernel_module': {'open': ('nvidia-open-kernel-dkms',), 'proprietary': ('nvidia-kernel-dkms',)},
        'utilities': ('nvidia-smi', 'libcuda1', 'libnvidia-ml1'),
        # nvidia-persistenced is its own upstream project in Debian (535.171.04 in bookworm).
        'persistenced': ('nvidia-persistenced',), 'unpinned': ('nvidia-persistenced',),
        'carrier': 'nvidia-smi',
        'fabricmanager': (), 'nscq': (), 'last_branch': None, 'open_every_build': False,
    },
    {
        'distribution': 'Ubuntu', 'source': 'distro', 'manager': 'apt',
        'meta_headless': {'open': ('nvidia-headless-{branch}-server-open',),
                          'proprietary': ('nvidia-headless-{branch}-server',)},
        'meta_desktop': {'open': ('nvidia-driver-{branch}-server-open',),
                         'proprietary': ('nvidia-driver-{branch}-server',)},
        'kernel_module': (),
        'meta_no_dkms': {'open': ('nvidia-headless-no-dkms-{branch}-server-open',),
                         'proprietary': ('nvidia-headless-no-dkms-{branch}-server',)},
        'prebuilt_modules': {'open': ('linux-modules-nvidia-{branch}-server-open-{kernel_flavour}',),
                             'proprietary': ('linux-modules-nvidia-{branch}-server-{kernel_flavour}',)},
        'utilities': ('nvidia-utils-{branch}-server', 'nvidia-compute-utils-{branch}-server'),
        'persistenced': (), 'unpinned': (),
        'carrier': 'nvidia-utils-{branch}-server',
        'fabricmanager': ((0, ('nvidia-fabricmanager-{branch}',)),),
        'nscq': ((0, ('libnvidia-nscq-{branch}',)),), 'last_branch': None, 'open_every_build': True,
    },
    {
        'distribution': 'Debian', 'source': 'cuda_repo', 'manager': 'apt',
        'meta_headless': {'open': ('nvidia-open-{branch}',), 'proprietary': ('cuda-drivers-{branch}',)},
        'meta_desktop': {'open': ('nvidia-open-{branch}',), 'proprietary': ('cuda-drivers-{branch}',)},
        'kernel_module': (), 'utilities': (),
        'persistenced': ('nvidia-persistenced',), 'unpinned': (),
        'carrier': {'open': 'nvidia-open-{branch}', 'proprietary': 'cuda-drivers-{branch}'},
        # From R580 the repository's Fabric Manager packages lost the branch in their names.
        'fabricmanager': ((580, ('nvidia-fabricmanager',)), (0, ('nvidia-fabricmanager-{branch}',))),
        'nscq': ((580, ('libnvidia-nscq',)), (0, ('libnvidia-nscq-{branch}',))),
        # From R590 the repository drops branch names from the driver packages too.
        'last_branch': 589, 'open_every_build': True,
    },
    {
        'distribution': 'RedHat', 'source': 'cuda_repo', 'manager': 'dnf',
        'meta_headless': ('nvidia-driver', 'nvidia-driver-cuda', 'nvidia-driver-libs'),
        'meta_desktop': ('nvidia-driver', 'nvidia-driver-cuda', 'nvidia-driver-libs'),
        'kernel_module': {'open': ('kmod-nvidia-open-dkms',), 'proprietary': ('kmod-nvidia-latest-dkms',)},
        'utilities': (),
        'persistenced': ('nvidia-persistenced',), 'unpinned': (),
        'carrier': 'nvidia-driver',
        'fabricmanager': ((0, ('nvidia-fabric-manager',)),),
        'nscq': ((0, ('libnvidia-nscq-{branch}',)),), 'last_branch': None, 'open_every_build': True,
    },
)
# Ubuntu's cuda_repo path reads the Debian row: the repository names its packages the same way.
DRIVER_SOURCE_ALIASES = {('Ubuntu', 'cuda_repo'): ('Debian', 'cuda_repo')}

# Driver and Fabric Manager packages that no plan installs but a node may carry (installed by hand,
# by an older release of this collection or by NVIDIA's other repositories); the drift audit still
# reads them, after the names of the table.
DRIVER_OTHER_NAMES = (
    'cuda-drivers', 'nvidia-driver-{branch}', 'nvidia-driver-{branch}-open', 'nvidia-open',
    'nvidia-headless-{branch}', 'nvidia-headless-{branch}-open',
)
FABRICMANAGER_OTHER_NAMES = (
    'nvidia-fabricmanager', 'nvidia-fabricmanager-{branch}', 'cuda-drivers-fabricmanager',
    'cuda-drivers-fabricmanager-{branch}',
)

# CUDA toolkit, cuDNN and NCCL: per toolkit source / package manager.
CUDA_TOOLKIT_PACKAGES = {'cuda_repo': 'cuda-toolkit-{cuda_major}-{cuda_minor}', 'distro': 'nvidia-cuda-toolkit'}
# Debian's nvidia-cuda-toolkit installs under this prefix (nvcc in /usr/bin).
CUDA_DISTRO_PATH = '/usr/lib/nvidia-cuda-toolkit'
# (runtime, development) per manager; cuDNN 8 has one package per major for every CUDA, later
# majors one per CUDA major.
CUDNN_PACKAGES = {
    'apt': {'8': ('libcudnn8', 'libcudnn8-dev'),
            'later': ('libcudnn{cudnn_major}-cuda-{cuda_major}', 'libcudnn{cudnn_major}-dev-cuda-{cuda_major}')},
    'dnf': {'8': ('libcudnn8', 'libcudnn8-devel'),
            'later': ('libcudnn{cudnn_major}-cuda-{cuda_major}', 'libcudnn{cudnn_major}-devel-cuda-{cuda_major}')},
}
# Names no plan installs: the repository's meta package, cuDNN 7 and older, Debian's downloader.
CUDNN_OTHER_NAMES = ('cudnn{cudnn_major}-cuda-{cuda_major}', 'libcudnn{cudnn_major}', 'nvidia-cudnn')
NCCL_PACKAGES = {'apt': ('libnccl2', 'libnccl-dev'), 'dnf': ('libnccl', 'libnccl-devel')}

# Mellanox / NVIDIA networking stacks (DOCA-OFED, MLNX_OFED), most specific first; no role installs
# them yet, the drift audit reads them.
OFED_PACKAGES = (
    'doca-ofed', 'mlnx-ofed-all', 'mlnx-ofed-basic', 'mlnx-ofed-hpc', 'mlnx-ofed-kernel-utils',
    'mlnx-ofed-kernel', 'mlnx-ofed-kernel-dkms',
)

_PLACEHOLDER = re.compile(r'\{(branch|cuda_major|cuda_minor|cudnn_major)\}')


class PackageTableError(ValueError):
    """A (distribution, source) the table has no row for."""


def offers_open_every_build(distribution, source):
    """Whether a driver source ships the open kernel modules of every build from R515 (the runfile: yes)."""
    if source == 'runfile':
        return True
    try:
        return bool(driver_source_row(distribution, source).get('open_every_build'))
    except PackageTableError:
        return False


def driver_source_row(distribution, source):
    """The table row of a driver source on a distribution; PackageTableError when there is none."""
    key = DRIVER_SOURCE_ALIASES.get((distribution, source), (distribution, source))
    for row in DRIVER_SOURCES:
        if (row['distribution'], row['source']) == key:
            return row
    raise PackageTableError('no NVIDIA driver packages for source %s on %s' % (source, distribution))


def _slot(value, flavour):
    if isinstance(value, dict):
        return value[flavour]
    return value


def _by_branch(rows, branch):
    for lowest, names in rows:
        if branch >= lowest:
            return names
    return ()


def _fill(templates, **values):
    return [t.format(**values) for t in templates]


def _plan_names(row, first, slots, branch, fabricmanager):
    """(names in install order: ``first``, then each slot's templates filled for ``branch`` without repeats, then
    Fabric Manager's daemon and NSCQ when asked; the daemon's package name or '')."""
    names = list(first)
    for templates in slots:
        for name in _fill(templates, branch=branch):
            if name not in names:
                names.append(name)
    fm_daemon = ''
    if fabricmanager:
        daemon = _fill(_by_branch(row['fabricmanager'], branch), branch=branch)
        names += daemon + _fill(_by_branch(row['nscq'], branch), branch=branch)
        fm_daemon = daemon[0] if daemon else ''
    return names, fm_daemon


def driver_package_names(distribution, source, branch, flavour, headless=True, fabricmanager=False):
    """Names a driver source installs, in install order, and their roles.

    Returns {'manager', 'packages', 'unpinned', 'carrier', 'fabricmanager' (the Fabric Manager
    daemon package or ''), 'last_branch'}.
    """
    if flavour not in FLAVOURS:
        raise PackageTableError("kernel module flavour '%s' is not one of %s" % (flavour, ', '.join(FLAVOURS)))
    row = driver_source_row(distribution, source)
    meta = _slot(row['meta_headless'] if headless else row['meta_desktop'], flavour)
    names, fm_daemon = _plan_names(row, [], (meta, _slot(row['kernel_module'], flavour), row['utilities'],
                                             row['persistenced']), branch, fabricmanager)
    return {
        'manager': row['manager'],
        'packages': names,
        'unpinned': [n for n in _fill(row['unpinned'], branch=branch) if n in names],
        'carrier': _slot(row['carrier'], flavour).format(branch=branch),
        'fabricmanager': fm_daemon,
        'last_branch': row['last_branch'],
    }


def prebuilt_package_names(distribution, source, branch, flavour, kernel_flavour, fabricmanager=False):
    """Names of the prebuilt-module path of a driver source (Ubuntu's distro packages only), in install order.

    Returns {'manager', 'packages', 'modules' (the prebuilt kernel module metapackage, at the kernel's
    version), 'carrier', 'fabricmanager'}; PackageTableError where the source ships no prebuilt modules.
    """
    if flavour not in FLAVOURS:
        raise PackageTableError("kernel module flavour '%s' is not one of %s" % (flavour, ', '.join(FLAVOURS)))
    row = driver_source_row(distribution, source)
    if not row.get('prebuilt_modules'):
        raise PackageTableError('no prebuilt NVIDIA kernel modules for source %s on %s' % (source, distribution))
    modules = _slot(row['prebuilt_modules'], flavour)[0].format(branch=branch, kernel_flavour=kernel_flavour)
    names, fm_daemon = _plan_names(row, [modules], (_slot(row['meta_no_dkms'], flavour), row['utilities'],
                                                    row['persistenced']), branch, fabricmanager)
    return {
        'manager': row['manager'],
        'packages': names,
        'modules': modules,
        'carrier': _slot(row['carrier'], flavour).format(branch=branch),
        'fabricmanager': fm_daemon,
    }


def cudnn_package_names(manager, cudnn_major, cuda_major):
    """(runtime, development) package names of cuDNN for a package manager."""
    family = CUDNN_PACKAGES[manager]
    templates = family['8'] if str(cudnn_major) == '8' else family['later']
    return tuple(_fill(templates, cudnn_major=cudnn_major, cuda_major=cuda_major))


def template_regex(template):
    """A regular expression (without anchors) matching every name a template can produce."""
    parts = []
    position = 0
    for match in _PLACEHOLDER.finditer(template):
        parts.append(re.escape(template[position:match.start()]))
        parts.append(r'(?P<%s>[0-9]+)' % match.group(1))
        position = match.end()
    parts.append(re.escape(template[position:]))
    return ''.join(parts)


def _unique(items):
    seen = []
    for item in items:
        if item not in seen:
            seen.append(item)
    return seen


def _all_flavours(value):
    if isinstance(value, dict):
        return [name for flavour in FLAVOURS for name in value[flavour]]
    return list(value)


def _all_carriers():
    for row in DRIVER_SOURCES:
        carrier = row['carrier']
        yield from (carrier.values() if isinstance(carrier, dict) else (carrier,))


def driver_templates():
    """Every name template read as the nvidia_driver component, most telling first: the carriers,
    then the metapackages and kernel modules of every row, then the names no plan installs. Canonical's
    prebuilt module packages (prebuilt_modules) are left out: their version is the kernel's, and the
    userspace metapackage beside them (meta_no_dkms) carries the driver's."""
    templates = list(_all_carriers())
    for row in DRIVER_SOURCES:
        for slot in ('meta_headless', 'meta_desktop', 'kernel_module', 'meta_no_dkms', 'utilities'):
            templates += _all_flavours(row.get(slot, ()))
    # Debian's libraries (libcuda1, libnvidia-ml1) follow the driver version, but they are also what a
    # container toolkit host may have without the driver: the carrier and the module decide.
    templates = [t for t in templates if not t.startswith('lib')]
    return _unique(templates + list(DRIVER_OTHER_NAMES))


def fabricmanager_templates():
    """Every name template read as the nvidia_fabricmanager component (the daemon packages)."""
    templates = []
    for row in DRIVER_SOURCES:
        for _lowest, names in row['fabricmanager']:
            templates += names
    return _unique(templates + list(FABRICMANAGER_OTHER_NAMES))


def package_rules():
    """(component, (regex, ...)) for the components whose version is a package version, in the
    order stack_versions reports them; the first pattern with an installed match wins."""
    cudnn = [CUDNN_PACKAGES[m]['later'][0] for m in sorted(CUDNN_PACKAGES)] + list(CUDNN_OTHER_NAMES)
    nccl = [NCCL_PACKAGES[m][0] for m in sorted(NCCL_PACKAGES)]
    return (
        ('nvidia_driver', tuple(template_regex(t) for t in driver_templates())),
        ('nvidia_fabricmanager', tuple(template_regex(t) for t in fabricmanager_templates())),
        ('cudnn', tuple(template_regex(t) for t in _unique(cudnn))),
        ('nccl', tuple(template_regex(t) for t in _unique(nccl))),
        ('ofed', tuple(template_regex(t) for t in OFED_PACKAGES)),
    )


CUDA_TOOLKIT_REGEX = re.compile(template_regex(CUDA_TOOLKIT_PACKAGES['cuda_repo']) + r'\Z')
