# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""text_bounds: what a message quotes is bounded (hostile values: tests/unit/robustness/test_files_robustness.py)."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re

import pytest

from ansible_collections.gpucluster.core.plugins.module_utils.text_bounds import INVISIBLE_CLASS, clip, quote


@pytest.mark.parametrize('value, limit, expected', [
    ('short', 200, "'short'"),
    ('x' * 10, 5, "'xxxx..."),
    (['a', 1, None], 200, "['a', 1, None]"),
    ((1, 2), 200, '(1, 2)'),
    ({'k': {'v'}}, 200, "{'k': {'v'}}"),
    (b'\x00\xff', 200, "b'\\x00\\xff'"),
    ('\udcff', 200, "'\\udcff'"),
    (2 ** 5000, 200, '<an integer of 5001 bits>'),
    (float('nan'), 200, 'nan'),
    (list(range(100)), 20, '[0, 1, 2, 3, 4, 5, 6...'),
])
def test_quote(value, limit, expected):
    assert quote(value, limit) == expected


def test_quote_of_an_object_whose_repr_fails_names_its_type():
    class Broken(object):
        def __repr__(self):
            raise RuntimeError('no')
    assert quote(Broken()) == '<Broken>'


@pytest.mark.parametrize('text, limit, expected', [('abc', 3, 'abc'), ('abcd', 3, 'abc...'), (12, 200, '12')])
def test_clip(text, limit, expected):
    assert clip(text, limit) == expected


def test_invisible_class_holds_the_bidi_controls_and_nothing_printable():
    pattern = re.compile('[%s]' % INVISIBLE_CLASS)
    for code in list(range(0x202a, 0x202f)) + list(range(0x2066, 0x206a)) + [0x200e, 0x200f, 0x061c, 0xfeff, 0x200b]:
        assert pattern.match(chr(code)), hex(code)
    assert not pattern.search('node1 ÄÖ 漢字 - . _ ~ <>')
