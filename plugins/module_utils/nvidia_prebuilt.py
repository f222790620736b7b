# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Canonical's prebuilt, signed NVIDIA kernel modules (nvidia_driver_kernel_modules: prebuilt).

Ubuntu builds the NVIDIA kernel modules of its ``-server`` driver branches for every kernel it ships
(source linux-restricted-modules) and signs them with the key the kernel trusts, so they load under
Secure Boot without a Machine Owner Key and without a compiler on the node. Per kernel flavour a
metapackage ``linux-modules-nvidia-<branch>-server[-open]-<flavour>`` follows that flavour's newest kernel;
the userspace comes from ``nvidia-headless-no-dkms-<branch>-server[-open]``.

The decisions of that path, pure functions over strings and dicts (no Ansible imports): which kernel
flavour the node runs, whether the path fits the platform, the package plan built from the DKMS plan
(plugins/filter/nvidia.py) and the names of nvidia_packages, and whether the module installed for a
kernel is the pinned driver version (Canonical builds each kernel's module at the driver version current
when that kernel was built, which need not be nvidia_driver_version).
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re

from ansible_collections.gpucluster.core.plugins.module_utils import nvidia_packages

MODES = ('dkms', 'prebuilt')
# The one platform that ships prebuilt modules of its driver packages.
PREBUILT_PLATFORM = ('Ubuntu', 'distro')

# uname -r of an Ubuntu kernel: VERSION-ABI-FLAVOUR (5.15.0-112-generic, 6.8.0-1013-nvidia,
# 6.8.0-1013-nvidia-64k, 6.5.0-1024-aws).
_KERNEL_RE = re.compile(r'^[0-9]+\.[0-9]+\.[0-9]+-[0-9]+-(?P<flavour>[a-z][a-z0-9]*(?:-[a-z0-9]+)*)\Z')
# A flavour as the metapackage names write it (generic, nvidia-64k, generic-hwe-22.04).
_FLAVOUR_RE = re.compile(r'^[a-z][a-z0-9]*(?:[.-][a-z0-9]+)*\Z')
_VERSION_RE = re.compile(r'^(?P<branch>[1-9][0-9]{2,3})\.[0-9]{1,3}(?:\.[0-9]{1,3})?\Z')


class PrebuiltError(ValueError):
    """An input the prebuilt-module path cannot work with."""


def kernel_flavour(kernel):
    """The flavour of an Ubuntu kernel release: '5.15.0-112-generic' -> 'generic',
    '6.8.0-1013-nvidia' -> 'nvidia', '6.8.0-1013-nvidia-64k' -> 'nvidia-64k'."""
    match = _KERNEL_RE.match(str(kernel or '').strip())
    if not match:
        raise PrebuiltError("kernel '%s' is not an Ubuntu kernel release VERSION-ABI-FLAVOUR such as "
                            "5.15.0-112-generic: set nvidia_driver_prebuilt_kernel_flavour to the flavour of the "
                            "linux-modules-nvidia metapackage (generic, nvidia, aws...)" % (kernel,))
    return match.group('flavour')


def refusal(mode, source, distribution, headless=True):
    """'' when ``mode`` fits the platform, else the message that refuses it (names the variable, the
    platform and what it accepts)."""
    if mode not in MODES:
        return "nvidia_driver_kernel_modules must be one of %s (got '%s')" % (', '.join(MODES), mode)
    if mode == 'dkms':
        return ''
    if (distribution, source) != PREBUILT_PLATFORM:
        return ("nvidia_driver_kernel_modules 'prebuilt' is accepted only with nvidia_driver_source 'distro' on "
                "Ubuntu (Canonical's signed linux-modules-nvidia packages); this node is %s with nvidia_driver_source "
                "'%s', where only 'dkms' is accepted. Nothing was changed." % (distribution, source))
    if not headless:
        return ("nvidia_driver_kernel_modules 'prebuilt' installs the compute-only userspace "
                "(nvidia-headless-no-dkms-<branch>-server); Ubuntu's full driver metapackage pulls the DKMS module, so "
                "set nvidia_driver_headless: true, or nvidia_driver_kernel_modules: dkms. Nothing was changed.")
    return ''


def _branch(version):
    match = _VERSION_RE.match(str(version))
    if not match:
        raise PrebuiltError("nvidia_driver_version '%s' is not an upstream driver version such as 535.309.01" % (version,))
    return int(match.group('branch'))


def _obsolete_re(branch, module_type):
    """Installed names the prebuilt plan replaces: other branches of the family (as the DKMS plan), the DKMS
    path of this branch (both kernel module flavours), the other flavour's userspace and every prebuilt
    module package of another branch or flavour."""
    other = '-server' if module_type == 'open' else '-server-open'
    # linux-modules-nvidia-535-server-<...> is this branch's proprietary flavour unless <...> starts with open-.
    keep = ('%d-server-open-' % branch) if module_type == 'open' else ('%d-server-(?!open-)' % branch)
    return '|'.join((
        r'^(lib)?nvidia-[a-z0-9-]+-(?!%d(-|$))[0-9]{3}(-server)?(-open)?$' % branch,
        r'^nvidia-(dkms|kernel-source|headless)-%d-server(-open)?$' % branch,
        r'^nvidia-(driver|headless-no-dkms)-%d%s$' % (branch, re.escape(other)),
        r'^linux-modules-nvidia-(?!%s)[0-9]+-server(-open)?-[a-z0-9][a-z0-9.+-]*$' % keep,
    ))


def plan(dkms_plan, mode, version, kernel, module_type, fabricmanager=False, flavour_override='',
         packages_override=None, hold_kernel=False):
    """The package plan for ``mode``: the DKMS plan as it is for 'dkms'; for 'prebuilt' the kernel flavour's
    linux-modules-nvidia metapackage, the no-DKMS userspace and the utilities (Fabric Manager when asked).

    The userspace is pinned to the driver version and held as on the DKMS path. The module metapackage has
    the kernel's version, so it is installed unpinned; it is held only with the kernel
    (``hold_kernel``): unheld it follows the flavour's kernel, held it would keep a new kernel from getting
    its module, and with the kernel held it must not pull a new kernel in either. ``packages_override``
    (nvidia_driver_packages) replaces the names; a linux-modules-* name among them is treated as the module.
    Adds 'kernel_modules', 'modules_package' and 'kernel_flavour' to the plan.
    """
    if mode not in MODES:
        raise PrebuiltError("nvidia_driver_kernel_modules must be one of %s (got '%s')" % (', '.join(MODES), mode))
    result = dict(dkms_plan)
    if mode == 'dkms':
        result.update({'kernel_modules': 'dkms', 'modules_package': '', 'kernel_flavour': ''})
        return result
    if module_type not in nvidia_packages.FLAVOURS:
        raise PrebuiltError("kernel module type '%s' is not 'open' or 'proprietary'" % (module_type,))
    if dkms_plan.get('manager') != 'apt':
        raise PrebuiltError("nvidia_driver_kernel_modules 'prebuilt' needs the apt plan of Ubuntu's distro packages")
    flavour = str(flavour_override or '').strip() or kernel_flavour(kernel)
    if not _FLAVOUR_RE.match(flavour):
        raise PrebuiltError("nvidia_driver_prebuilt_kernel_flavour '%s' is not a kernel flavour such as generic, "
                            "nvidia or generic-hwe-22.04" % (flavour,))
    branch = _branch(version)
    try:
        names = nvidia_packages.prebuilt_package_names(PREBUILT_PLATFORM[0], PREBUILT_PLATFORM[1], branch, module_type,
                                                       flavour, fabricmanager=fabricmanager)
    except nvidia_packages.PackageTableError as exc:
        raise PrebuiltError(str(exc))
    packages = list(packages_override) if packages_override else names['packages']
    modules = [n for n in packages if n.startswith('linux-modules-')]
    unpinned = modules + [n for n in dkms_plan.get('unpinned', []) if n in packages and n not in modules]
    pinned = [n for n in packages if n not in unpinned]
    obsolete = _obsolete_re(branch, module_type)
    result.update({
        'packages': packages,
        'unpinned': unpinned,
        'carrier': names['carrier'] if not packages_override else packages[0],
        'obsolete_re': obsolete,
        'install': ['%s=%s-*' % (n, version) for n in pinned] + unpinned,
        'hold': [n for n in packages if hold_kernel or n not in modules],
        'kernel_modules': 'prebuilt',
        'modules_package': modules[0] if modules else '',
        'kernel_flavour': flavour,
    })
    return result


def module_version_check(version, kernel, modinfo_rc, modinfo_out, pending=False, modules_package=''):
    """Whether the nvidia module installed for ``kernel`` is driver ``version``.

    ``modinfo_rc``/``modinfo_out``: the exit status and output of ``modinfo -k KERNEL -F version nvidia``.
    ``pending``: check mode with package changes still to make (the module read is the one before the
    install, so it decides nothing). Returns {'ok', 'state' (match, mismatch, missing, pending), 'found', 'msg'}.
    """
    kernel = str(kernel or '')
    package = modules_package or 'the linux-modules-nvidia package'
    found = ''
    lines = [line.strip() for line in str(modinfo_out or '').splitlines() if line.strip()]
    if str(modinfo_rc) == '0' and lines:
        found = lines[0]
    if pending:
        return {'ok': True, 'state': 'pending', 'found': found,
                'msg': 'check mode: the prebuilt module for kernel %s is compared with %s after the real run installs '
                       '%s (now: %s).' % (kernel, version, package, found or 'none installed')}
    ways_out = ('Either set nvidia_driver_version to the version Canonical built for this kernel%s, or set '
                'nvidia_driver_kernel_modules: dkms to build %s for it.')
    if not found:
        return {'ok': False, 'state': 'missing', 'found': '',
                'msg': 'No nvidia kernel module is installed for kernel %s after installing %s (modinfo: %s): '
                       'Canonical ships no prebuilt module of this branch for that kernel. Set '
                       'nvidia_driver_kernel_modules: dkms, or boot a kernel of the flavour Canonical builds the '
                       'module for.' % (kernel, package, ' '.join(lines) or 'no output')}
    if found == str(version):
        return {'ok': True, 'state': 'match', 'found': found,
                'msg': 'The prebuilt nvidia module for kernel %s is %s, the pinned driver version.' % (kernel, found)}
    return {'ok': False, 'state': 'mismatch', 'found': found,
            'msg': ("Canonical's prebuilt nvidia module for kernel %s (%s) is driver %s, but nvidia_driver_version is "
                    '%s: the userspace pinned at %s does not work with a %s module (Canonical builds each kernel\'s '
                    'module at the driver version current when that kernel was built). '
                    % (kernel, package, found, version, version, found))
            + ways_out % (' (nvidia_driver_version: "%s")' % found, version)}
