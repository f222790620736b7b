# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""module_utils/rdma_stack.py: which NVIDIA DKMS modules are built again after DOCA-OFED changed, and
whether the installed mlx5_core is the loaded one (rdma_reboot_required)."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible_collections.gpucluster.core.plugins.filter.rdma import FilterModule
from ansible_collections.gpucluster.core.plugins.module_utils.rdma_stack import (
    nvidia_dkms_rebuilds, parse_dkms_status, stack_reload)

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover
    AnsibleFilterError = Exception

KERNEL = '6.8.0-45-generic'
# dkms 3.x lines (the format of dkms(8) since 2.8: MODULE/VERSION, KERNEL, ARCH: STATE), a node with the CUDA
# repository's open driver, DOCA-OFED's kernel package, GPUDirect Storage, an older kernel still listed, and a
# module only added; the warning dkms appends when the built and installed modules differ.
STATUS_DKMS3 = (
    'mlnx-ofed-kernel/24.10.OFED.24.10.1.1.4.1, 6.8.0-45-generic, x86_64: installed\n'
    'nvidia/550.127.05, 6.8.0-45-generic, x86_64: installed (WARNING! Diff between built and installed module!)\n'
    'nvidia/550.127.05, 6.8.0-40-generic, x86_64: installed\n'
    'nvidia-fs/2.22.3, 6.8.0-45-generic, x86_64: installed\n'
    'nvidia-srv/535.216.03, 6.8.0-45-generic, x86_64: built\n'
    'nvidia/560.35.03: added\n'
    'knem/1.1.4.90mlnx3, 6.8.0-45-generic, x86_64: installed\n'
    'Error! Could not locate dkms.conf file.\n'
)
# dkms before 2.8 separated every field with commas; the line format of a status printed by dkms 2.x in
# realsenseai/librealsense#4763: "librealsense2-dkms, 1.3.6, 4.18.0-15-generic, x86_64: installed".
STATUS_DKMS2 = (
    'nvidia-current, 535.216.01, 6.1.0-26-amd64, x86_64: installed\n'
    'librealsense2-dkms, 1.3.6, 6.1.0-26-amd64, x86_64: installed\n'
)


def test_dkms3_lines_are_parsed_with_their_state_and_note():
    entries = parse_dkms_status(STATUS_DKMS3)
    assert len(entries) == 7
    assert entries[1] == {'module': 'nvidia', 'version': '550.127.05', 'kernel': KERNEL, 'arch': 'x86_64',
                          'state': 'installed', 'note': '(WARNING! Diff between built and installed module!)'}
    assert entries[5] == {'module': 'nvidia', 'version': '560.35.03', 'kernel': '', 'arch': '', 'state': 'added',
                          'note': ''}


def test_dkms2_comma_lines_are_parsed():
    entries = parse_dkms_status(STATUS_DKMS2)
    assert [(e['module'], e['version'], e['kernel'], e['state']) for e in entries] == [
        ('nvidia-current', '535.216.01', '6.1.0-26-amd64', 'installed'),
        ('librealsense2-dkms', '1.3.6', '6.1.0-26-amd64', 'installed')]


def test_rebuilds_are_the_nvidia_modules_of_the_running_kernel_only():
    # Not the OFED or knem modules themselves, not another kernel's build, not a module only added.
    assert nvidia_dkms_rebuilds(STATUS_DKMS3, KERNEL) == ['nvidia-fs/2.22.3', 'nvidia-srv/535.216.03', 'nvidia/550.127.05']
    assert nvidia_dkms_rebuilds(STATUS_DKMS2, '6.1.0-26-amd64') == ['nvidia-current/535.216.01']
    assert nvidia_dkms_rebuilds(STATUS_DKMS3, '6.1.0-26-amd64') == []


@pytest.mark.parametrize('text', ['', None, 'Error! dkms: command not found', 'nvidiafoo/1, %s, x86_64: installed' % KERNEL])
def test_no_dkms_module_to_rebuild(text):
    assert nvidia_dkms_rebuilds(text, KERNEL) == []


def test_the_doca_module_installed_but_the_inbox_one_loaded_needs_a_reboot():
    result = stack_reload('', '24.10-1.1.4')
    assert result['required'] is True
    assert result['reasons'] == ['mlx5_core 24.10-1.1.4 is installed but the inbox module is loaded: restart openibd '
                                 'or reboot to load the DOCA-OFED modules']


def test_an_older_doca_module_loaded_needs_a_reboot():
    result = stack_reload('24.07-0.6.1\n', '24.10-1.1.4\n')
    assert result['required'] is True
    assert '24.07-0.6.1 is loaded' in result['reasons'][0]


@pytest.mark.parametrize('loaded,upcoming,adapters', [
    ('24.10-1.1.4\n', '24.10-1.1.4', True),   # converged
    ('', '', True),                          # inbox stack: no module version on either side
    ('', '24.10-1.1.4', False),              # no adapter: nothing has to load
])
def test_no_reboot(loaded, upcoming, adapters):
    assert stack_reload(loaded, upcoming, adapters) == {'required': False, 'reasons': []}


def test_filters_name_themselves_on_malformed_input():
    filters = FilterModule().filters()
    assert filters['rdma_dkms_rebuilds'](STATUS_DKMS3, KERNEL)[0] == 'nvidia-fs/2.22.3'
    with pytest.raises(AnsibleFilterError, match='rdma_dkms_rebuilds: malformed input'):
        filters['rdma_dkms_rebuilds'](STATUS_DKMS3)
