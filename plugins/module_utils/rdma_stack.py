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
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re

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
