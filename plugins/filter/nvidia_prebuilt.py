# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the nvidia_driver role's prebuilt-module path (nvidia_driver_kernel_modules): thin wrappers
over module_utils/nvidia_prebuilt.py. Bad input raises an error naming the filter and what is wrong."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.gpucluster.core.plugins.module_utils import nvidia_prebuilt

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - only without ansible-core installed
    class AnsibleFilterError(Exception):
        pass


def _guard(name, function, *args, **kwargs):
    try:
        return function(*args, **kwargs)
    except nvidia_prebuilt.PrebuiltError as exc:
        raise AnsibleFilterError('%s: %s' % (name, exc))


def nvidia_kernel_modules_refusal(mode, source, distribution, headless=True):
    """'' when nvidia_driver_kernel_modules fits the platform, else the refusal."""
    return nvidia_prebuilt.refusal(mode, source, distribution, bool(headless))


def nvidia_kernel_modules_plan(dkms_plan, mode, version, kernel, module_type, fabricmanager=False,
                               flavour_override='', packages_override=None, hold_kernel=False):
    """The package plan of nvidia_driver_kernel_modules from the plan nvidia_driver_plan made."""
    return _guard('nvidia_kernel_modules_plan', nvidia_prebuilt.plan, dkms_plan, mode, version, kernel, module_type,
                  bool(fabricmanager), flavour_override, packages_override or None, bool(hold_kernel))


def nvidia_prebuilt_module_check(modinfo, version, kernel, pending=False, modules_package=''):
    """The version check of the prebuilt module; ``modinfo`` is the registered result of
    ``modinfo -k KERNEL -F version nvidia`` (rc and stdout)."""
    modinfo = modinfo if isinstance(modinfo, dict) else {}
    rc = modinfo.get('rc', 1)
    # A failed read says why on stderr (modinfo: ERROR: Module nvidia not found.).
    text = modinfo.get('stdout', '') if str(rc) == '0' else '\n'.join(
        [modinfo.get('stdout', '') or '', modinfo.get('stderr', '') or ''])
    return nvidia_prebuilt.module_version_check(version, kernel, rc, text, bool(pending), modules_package)


class FilterModule(object):
    def filters(self):
        return {
            'nvidia_kernel_modules_refusal': nvidia_kernel_modules_refusal,
            'nvidia_kernel_modules_plan': nvidia_kernel_modules_plan,
            'nvidia_prebuilt_module_check': nvidia_prebuilt_module_check,
        }
