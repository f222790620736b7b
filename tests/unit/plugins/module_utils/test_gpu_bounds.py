# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""module_utils/gpu_bounds.py: bounded quotes and bounded, non-blocking reads of regular files."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os

import pytest

from ansible_collections.gpucluster.core.plugins.module_utils import gpu_bounds as gb


@pytest.mark.parametrize('value, limit, expected', [
    ('short', 200, 'short'),
    ('x' * 201, 200, 'x' * 200 + '... (1 characters cut)'),
    ('abcdef', 3, 'abc... (3 characters cut)'),
    (None, 200, 'None'),
    (float('nan'), 200, 'nan'),
    ([1, 2], 200, '[1, 2]'),
    (b'\xff', 200, "b'\\xff'"),
])
def test_clip(value, limit, expected):
    assert gb.clip(value, limit) == expected


@pytest.mark.parametrize('value, expected', [
    ('ab', "'ab'"),
    ('a\nb', "'a\\nb'"),
    (79, '79'),
    ('y' * 300, "'" + 'y' * 199 + '... (102 characters cut)'),
])
def test_quote(value, expected):
    assert gb.quote(value) == expected


def test_read_regular(tmp_path):
    path = tmp_path / 'f'
    path.write_bytes(b'12345')
    assert gb.read_regular(str(path), 5) == b'12345'
    with pytest.raises(gb.TooLarge):
        gb.read_regular(str(path), 4)


@pytest.mark.parametrize('make, kind', [
    (os.mkfifo, 'a FIFO'),
    (os.mkdir, 'a directory'),
])
def test_special_files_are_refused_without_blocking(tmp_path, make, kind):
    path = str(tmp_path / 'special')
    make(path)
    with pytest.raises(gb.NotRegularFile) as caught:
        gb.read_regular(path, 10)
    assert caught.value.strerror == 'not a regular file (%s)' % kind
    assert caught.value.filename == path


def test_character_device_and_missing_file(tmp_path):
    with pytest.raises(gb.NotRegularFile, match=r'a character device'):
        gb.open_regular('/dev/null')
    with pytest.raises(FileNotFoundError):
        gb.open_regular(str(tmp_path / 'missing'))


def test_symlink_to_a_regular_file_is_read(tmp_path):
    (tmp_path / 'target').write_bytes(b'ok')
    os.symlink(str(tmp_path / 'target'), str(tmp_path / 'link'))
    assert gb.read_regular(str(tmp_path / 'link'), 10) == b'ok'
