# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""module_utils/json_object.py: the one loader of a JSON object read as text (daemon.json for the container_runtime
and swarm roles, docker info's output): empty is {}, anything else that is not an object is refused, naming the
source and what is wrong."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible_collections.gpucluster.core.plugins.module_utils.json_object import LEFT_UNTOUCHED, load_object


@pytest.mark.parametrize('text', ['', '  \n', None, b'', b'\n'])
def test_empty_is_an_empty_object(text):
    assert load_object(text, '/etc/docker/daemon.json') == {}


@pytest.mark.parametrize('text, data', [
    ('{"log-driver": "json-file"}', {'log-driver': 'json-file'}),
    (b'{"a": {"b": [1, 2]}}', {'a': {'b': [1, 2]}}),
    ('\n{"a": 1}\n', {'a': 1}),
    ('{"\u00e9": "\u00e9"}'.encode('utf-8'), {'\u00e9': '\u00e9'}),
])
def test_an_object_is_read(text, data):
    assert load_object(text, 'f') == data


@pytest.mark.parametrize('text, message', [
    ('{"a": 1,}', r'^/etc/docker/daemon.json is not valid JSON \(.*\); it was left untouched: fix it by hand$'),
    ('[1]', r'^/etc/docker/daemon.json must hold a JSON object, found an array; it was left untouched'),
    ('"x"', 'found a string;'),
    ('1', 'found a number;'),
    ('true', 'found a boolean;'),
    ('null', 'found null;'),
    (b'\xff{}', r'^/etc/docker/daemon.json is not UTF-8 text \(.*\); it was left untouched'),
    ({'a': 1}, r'^/etc/docker/daemon.json: expected its text, got dict$'),
    (12, r'^/etc/docker/daemon.json: expected its text, got int$'),
])
def test_refusals_name_the_source_and_what_is_wrong(text, message):
    with pytest.raises(ValueError, match=message):
        load_object(text, '/etc/docker/daemon.json')


def test_advice_is_the_callers():
    with pytest.raises(ValueError, match=r'^the output of docker info is not valid JSON \(.*\)$'):
        load_object('Cannot connect', 'the output of docker info', advice='')
    with pytest.raises(ValueError, match='found an array; is dockerd running[?]$'):
        load_object('[]', 'docker info', advice='is dockerd running?')
    assert LEFT_UNTOUCHED == 'it was left untouched: fix it by hand'
