# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""module_utils/nested: the path read and the overlay merge the containerd filters and the Kubernetes code share."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.gpucluster.core.plugins.module_utils.nested import deep_merge, get_path


def test_get_path_reads_a_path_and_gives_none_where_it_stops():
    doc = {'plugins': {'cri': {'containerd': {'runtimes': {'runc': {}}}}, 'list': [1]}}
    assert get_path(doc, ['plugins', 'cri', 'containerd', 'runtimes']) == {'runc': {}}
    assert get_path(doc, ['plugins', 'missing', 'x']) is None
    assert get_path(doc, ['plugins', 'list', 'x']) is None   # a step that is not a dict
    assert get_path(doc, []) is doc


def test_deep_merge_merges_dicts_replaces_the_rest_and_leaves_both_inputs_alone():
    base = {'a': {'b': 1, 'c': [1, 2]}, 'd': 'x'}
    over = {'a': {'c': [3], 'e': {'f': 1}}, 'd': {'g': 2}}
    merged = deep_merge(base, over)
    assert merged == {'a': {'b': 1, 'c': [3], 'e': {'f': 1}}, 'd': {'g': 2}}
    merged['a']['e']['f'] = 9
    merged['a']['c'].append(4)
    assert base == {'a': {'b': 1, 'c': [1, 2]}, 'd': 'x'} and over == {'a': {'c': [3], 'e': {'f': 1}}, 'd': {'g': 2}}
