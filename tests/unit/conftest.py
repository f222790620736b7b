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
    """Directory of real recorded tool output (GPUCLUSTER_FIXTURES, default ../shared/fixtures).

    A missing corpus fails the tests that need it, so a green run means they ran; a developer without
    the corpus skips them explicitly with GPUCLUSTER_SKIP_REAL_FIXTURES=1 (CI never sets it).
    """
    path = os.environ.get('GPUCLUSTER_FIXTURES') or os.path.join(REPO, '..', 'shared', 'fixtures')
    if not os.path.isdir(path):
        message = 'real fixture corpus not found at %s (set GPUCLUSTER_FIXTURES)' % path
        if os.environ.get('GPUCLUSTER_SKIP_REAL_FIXTURES') == '1' and os.environ.get('CI') != 'true':
            pytest.skip(message + '; skipped because GPUCLUSTER_SKIP_REAL_FIXTURES=1')
        pytest.fail(message + '; GPUCLUSTER_SKIP_REAL_FIXTURES=1 skips these tests outside CI', pytrace=False)
    return os.path.abspath(path)


@pytest.fixture(scope='session')
def own_fixtures_dir():
    return os.path.join(REPO, 'tests', 'unit', 'fixtures')
