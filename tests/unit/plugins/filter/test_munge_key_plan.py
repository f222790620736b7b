# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shared_secrets filters adapt module_utils.shared_secrets: inputs as the roles give them, bad input named."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.gpucluster.core.plugins.filter.shared_secrets import certificate_fingerprint, munge_key_plan

KEY = 'c' * 64


def test_records_as_file_read_gives_them():
    # file_read gives null for a missing record and the file's text (with its newline) otherwise.
    assert munge_key_plan('node1', '/etc/munge/munge.key', KEY, None)['action'] == 'read'
    assert munge_key_plan('node1', '/etc/munge/munge.key', KEY, KEY + '\n')['action'] == 'use'
    plan = munge_key_plan('node1', '/etc/munge/munge.key', '', None, [['node1', None], ['node2', KEY + '\n']])
    assert plan['action'] == 'stop' and 'node2 holds the cluster key' in plan['message']
    assert munge_key_plan('node1', '/k', KEY, '', {'node2': KEY})['action'] == 'use'


@pytest.mark.parametrize('args, match', [
    (('', '/k', KEY, ''), 'controller host'),
    ((None, '/k', KEY, ''), 'controller host'),
    (('node1', '/k', 5, ''), 'controller_key'),
    (('node1', '/k', KEY, '', [['node2']]), 'pairs'),
    (('node1', '/k', KEY, '', ['node2']), 'pairs'),
])
def test_bad_input_is_named(args, match):
    with pytest.raises(AnsibleFilterError, match=match):
        munge_key_plan(*args)


def test_certificate_fingerprint_of_anything_else_is_empty():
    assert certificate_fingerprint(None) == '' and certificate_fingerprint(['x']) == ''
