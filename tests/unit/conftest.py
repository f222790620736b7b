# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Make the checkout importable as ansible_collections.gpucluster.core for plain pytest runs."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import sys

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
_COLLECTIONS = os.path.join(REPO, 'collections')
if _COLLECTIONS not in sys.path:
    sys.path.insert(0, _COLLECTIONS)


@pytest.fixture(scope='session')
def real_fixtures_dir():
    """Directory of real recorded tool output (GPUCLUSTER_FIXTURES); skip when absent."""
    path = os.environ.get('GPUCLUSTER_FIXTURES') or os.path.join(REPO, '..', 'shared', 'fixtures')
    if not os.path.isdir(path):
        pytest.skip('real fixture corpus not found at %s (set GPUCLUSTER_FIXTURES)' % path)
    return os.path.abspath(path)


@pytest.fixture(scope='session')
def own_fixtures_dir():
    return os.path.join(REPO, 'tests', 'unit', 'fixtures')
