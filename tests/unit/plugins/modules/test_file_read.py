# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""file_read: the content of several files of a node in one module call."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import errno
import os

import pytest
from unittest import mock

from ansible_collections.gpucluster.core.plugins.modules import file_read


@pytest.fixture
def run(run_module):
    def call(args, check=False):
        return run_module(file_read.main, args, check=check)
    return call


@pytest.mark.parametrize('check', [False, True], ids=['run', 'check_mode'])
def test_reads_present_files_and_reports_missing_ones(tmp_path, check, run):
    (tmp_path / 'slurm.conf').write_text('ClusterName=gpu\nNodeName=node1 Gres=gpu:2\n')
    (tmp_path / 'empty.conf').write_text('')
    paths = [str(tmp_path / 'slurm.conf'), str(tmp_path / 'gres.conf'), str(tmp_path / 'empty.conf')]
    how, result = run({'paths': paths}, check=check)
    assert how == 'exit' and result['changed'] is False
    assert result['contents'] == {paths[0]: 'ClusterName=gpu\nNodeName=node1 Gres=gpu:2\n', paths[1]: None,
                                  paths[2]: ''}
    assert result['missing'] == [paths[1]]


def test_a_link_is_followed(tmp_path, run):
    (tmp_path / 'real.conf').write_text('x=1\n')
    os.symlink(str(tmp_path / 'real.conf'), str(tmp_path / 'link.conf'))
    how, result = run({'paths': [str(tmp_path / 'link.conf')]})
    assert result['contents'] == {str(tmp_path / 'link.conf'): 'x=1\n'}


def test_bytes_that_are_not_utf8_become_replacement_characters(tmp_path, run):
    (tmp_path / 'odd.conf').write_bytes(b'Name=n\xff1\n')
    how, result = run({'paths': [str(tmp_path / 'odd.conf')]})
    assert result['contents'][str(tmp_path / 'odd.conf')] == 'Name=n\ufffd1\n'


def _fifo(tmp_path):
    path = tmp_path / 'pipe'
    os.mkfifo(str(path))
    return str(path)


@pytest.mark.parametrize('make, words', [
    (str, 'is a directory, not a file'),
    (_fifo, 'is not a regular file'),
    (lambda t: 'relative.conf', 'must be absolute'),
], ids=['directory', 'fifo', 'relative'])
def test_what_is_not_a_readable_file_fails_and_is_named(tmp_path, make, words, run):
    path = make(tmp_path)
    how, result = run({'paths': [path]})
    assert how == 'fail' and words in result['msg'] and path in result['msg'], result


def test_a_file_over_max_bytes_is_refused(tmp_path, run):
    (tmp_path / 'big.conf').write_text('x' * 100)
    how, result = run({'paths': [str(tmp_path / 'big.conf')], 'max_bytes': 99})
    assert how == 'fail' and result['msg'] == 'file_read: %s is larger than max_bytes=99' % (tmp_path / 'big.conf')
    how, result = run({'paths': [str(tmp_path / 'big.conf')], 'max_bytes': 100})
    assert how == 'exit' and len(result['contents'][str(tmp_path / 'big.conf')]) == 100


def test_max_bytes_must_be_positive(tmp_path, run):
    how, result = run({'paths': [str(tmp_path / 'a')], 'max_bytes': 0})
    assert how == 'fail' and 'max_bytes must be a whole number of bytes from 1 to 1073741824, got 0' in result['msg']


def test_an_unreadable_file_fails_and_is_named(tmp_path, run):
    # Root reads any file whatever its mode: the refusal comes from a replaced os.open.
    def denied(path, flags):
        raise OSError(errno.EACCES, 'Permission denied')
    with mock.patch.object(file_read.os, 'open', denied):
        how, result = run({'paths': [str(tmp_path / 'secret.conf')]})
    assert (how, result['msg']) == ('fail', 'file_read: cannot read %s: [Errno 13] Permission denied'
                                    % (tmp_path / 'secret.conf'))
