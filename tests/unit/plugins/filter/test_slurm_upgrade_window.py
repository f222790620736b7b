# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.gpucluster.core.plugins.filter import slurm_versions as f


def test_the_filter_is_the_module_utils_rule():
    assert f.FilterModule().filters()['slurm_upgrade_errors'] is f.slurm_upgrade_errors
    assert f.slurm_upgrade_errors('23.11.10', '22.05.8-4+deb12u3') == []
    assert 'Go through 23.11 first' in f.slurm_upgrade_errors('24.11.5', '22.05.8-4+deb12u3')[0]
    assert f.slurm_upgrade_errors('24.11.5', '') == []


@pytest.mark.parametrize('target, installed', [(None, '22.05.8'), ({'v': 1}, '22.05.8'), ('24.11.5', ['22.05.8']),
                                               (True, '')])
def test_bad_arguments_are_named(target, installed):
    with pytest.raises(AnsibleFilterError, match='slurm_upgrade_errors: the'):
        f.slurm_upgrade_errors(target, installed)
