# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Property-based fuzzing of the version parsing and ordering used by stack_facts and the drift
audit: dpkg and rpm orders are total orders that agree with the package managers' own examples,
pins never accept a pre-release, and no text (control characters, surrogates, huge numbers)
raises."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import functools
import shutil
import subprocess

import pytest
from hypothesis import example, given, settings, strategies as st

from ansible_collections.gpucluster.core.plugins.module_utils import drift
from ansible_collections.gpucluster.core.plugins.module_utils import stack_versions as sv

FUZZ = settings(max_examples=200, deadline=None, derandomize=True)
COMPARE = {'dpkg': sv.compare_dpkg, 'rpm': sv.compare_rpm}

# Characters that carry meaning in versions, plus a few that do not.
VERSIONISH = st.text(alphabet='0123456789.~^+-:_abzAZ', max_size=14)
ANY_TEXT = st.text(max_size=40)          # includes controls, surrogates, non-ASCII digits
VERSIONS = st.one_of(VERSIONISH, ANY_TEXT, st.integers(min_value=0).map(lambda n: '9' * 5000 + str(n)))


# ------------------------------------------------------------------ known orders

# Debian Policy 5.6.12 and dpkg's own test suite.
DPKG_KNOWN = [
    ('1.0', '1.0', 0), ('1.0', '1.0-0', 0), ('1.0~rc1', '1.0', -1), ('2.21.5~rc1', '2.21.5', -1),
    ('2.21.5~rc1-1', '2.21.5-1', -1), ('1~~', '1~~a', -1), ('1~~a', '1~', -1), ('1~', '1', -1),
    ('1', '1a', -1), ('1:0.1', '2.0', 1), ('0:1.0', '1.0', 0), ('1.0-1', '1.0-1~bpo1', 1),
    ('1.0a', '1.0+', -1), ('1.0+b1', '1.0', 1), ('1.0.1', '1.0+b1', 1), ('10', '9', 1),
    ('0010', '10', 0), ('1.0^', '1.0.1', 1), ('27.3.1-1~debian.12~bookworm', '27.3.1-1', -1),
    ('5:27.3.1-1', '27.3.1-1', 1), ('1.6.20~ds1-1+deb12u3', '1.6.20~ds1-1+deb12u1', 1),
    ('550.54.15-1', '550.127.05-1', -1), ('2.21.5-1+cuda12.4', '2.21.5-1+cuda12.2', 1),
]

# rpm's own tests (rpmvercmp.at) for rpmvercmp, and epoch:version-release for rpmVersionCompare.
RPM_KNOWN = [
    ('1.0', '1.0', 0), ('1.0', '2.0', -1), ('2.0', '1.0', 1), ('2.0.1', '2.0.1', 0), ('2.0', '2.0.1', -1),
    ('2.0.1a', '2.0.1', 1), ('5.5p1', '5.5p2', -1), ('5.5p1', '5.5p10', -1), ('10xyz', '10.1xyz', -1),
    ('xyz10', 'xyz10.1', -1), ('xyz.4', '8', -1), ('8', 'xyz.4', 1), ('5.5p2', '5.6p1', -1),
    ('6.0.rc1', '6.0', 1), ('10b2', '10a1', 1), ('10a2', '10b2', -1), ('1.0a', '1.0aa', -1),
    ('10.0001', '10.1', 0), ('10.0001', '10.0039', -1), ('4.999.9', '5.0', -1),
    ('20101121', '20101122', -1), ('2.0', '2_0', 0), ('a+', 'a_', 0), ('+a', '_a', 0), ('_+', '_', 0),
    ('+', '_', 0), ('1.0~rc1', '1.0', -1), ('1.0~rc1', '1.0~rc2', -1), ('1.0~rc1~git123', '1.0~rc1', -1),
    ('1.0^', '1.0', 1), ('1.0^git1', '1.0', 1), ('1.0^git1', '1.0^git2', -1), ('1.0^git1', '1.0.1', -1),
    ('1.0^20160101', '1.0.1', -1), ('1.0^20160102', '1.0^20160101^git1', 1), ('1.0~rc1^git1', '1.0~rc1', 1),
    ('1.0^git1', '1.0^git1~pre', 1), ('1:1.0-1', '2.0-1', 1), ('0:1.0-1', '1.0-1', 0),
    ('550.90.07-1.el9', '550.90.07-10.el9', -1), ('3:550.90.07-1.el9', '2:560.0-1.el9', 1),
]


def sign(value):
    return (value > 0) - (value < 0)


@pytest.mark.parametrize('older, newer, expected', DPKG_KNOWN)
def test_dpkg_known_orders(older, newer, expected):
    assert sv.compare_dpkg(older, newer) == expected
    swapped = (newer, older)
    assert sv.compare_dpkg(*swapped) == -expected


@pytest.mark.parametrize('older, newer, expected', RPM_KNOWN)
def test_rpm_known_orders(older, newer, expected):
    assert sv.compare_rpm(older, newer) == expected
    swapped = (newer, older)
    assert sv.compare_rpm(*swapped) == -expected


# ------------------------------------------------------------------ order properties

@pytest.mark.parametrize('family', sorted(COMPARE))
@FUZZ
@given(left=VERSIONS, right=VERSIONS)
@example(left='2.21.5~rc1', right='2.21.5')
@example(left='\udcff', right='\x00')
def test_order_is_antisymmetric_and_reflexive(family, left, right):
    compare = COMPARE[family]
    forward = compare(left, right)
    assert forward in (-1, 0, 1)
    swapped = (right, left)
    assert compare(*swapped) == -forward
    assert compare(left, left) == 0
    assert sv.compare_versions(left, right, family) == forward


@pytest.mark.parametrize('family', sorted(COMPARE))
@FUZZ
@given(versions=st.lists(VERSIONISH, min_size=3, max_size=8))
def test_order_is_transitive(family, versions):
    compare = COMPARE[family]
    ordered = sorted(versions, key=functools.cmp_to_key(compare))
    for i, low in enumerate(ordered):
        for high in ordered[i + 1:]:
            assert compare(low, high) <= 0, (low, high, ordered)


@pytest.mark.parametrize('family', sorted(COMPARE))
@FUZZ
@given(base=VERSIONISH.filter(lambda v: v and v[-1].isdigit() and ':' not in v), tail=VERSIONISH)
def test_tilde_sorts_before_the_release(family, base, tail):
    # "~anything" after a complete version is always older than that version, in both families.
    assert COMPARE[family](base + '~' + tail.replace('-', ''), base) == -1


# ------------------------------------------------------------------ pins and parsers never raise

@FUZZ
@given(pin=VERSIONS, found=st.one_of(st.none(), VERSIONS), family=st.sampled_from(['dpkg', 'rpm', None, 'none']))
def test_pin_matching_is_total(pin, found, family):
    assert drift.pin_matches(pin, found, family) in (True, False)


@FUZZ
@given(pin=st.from_regex(r'\A[0-9]{1,3}(\.[0-9]{1,3}){0,3}\Z'), tail=st.from_regex(r'\A(rc|beta|alpha|pre)[0-9]{0,2}\Z'),
       family=st.sampled_from(['dpkg', 'rpm', None]))
def test_a_pre_release_never_meets_its_pin(pin, tail, family):
    assert drift.pin_matches(pin, pin, family) is True
    assert drift.pin_matches(pin, pin + '-1', family) is True
    assert drift.pin_matches(pin, pin + '~' + tail, family) is False
    assert drift.pin_matches(pin, pin + '~' + tail + '-1', family) is False


@FUZZ
@given(text=st.one_of(ANY_TEXT, st.lists(st.lists(VERSIONS, min_size=1, max_size=5).map('\t'.join))
                      .map('\n'.join)))
def test_package_query_parsers_never_raise(text):
    installed, broken = sv.parse_dpkg_query(text)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in installed.items())
    installed, broken = sv.parse_rpm_query(text)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in installed.items())
    assert broken == {}


@FUZZ
@given(text=ANY_TEXT)
def test_cleaned_text_is_always_utf8(text):
    cleaned = sv.clean_text(text)
    cleaned.encode('utf-8')
    if text == cleaned:
        text.encode('utf-8')


# ------------------------------------------------------------------ against dpkg itself

DPKG = shutil.which('dpkg')
DPKG_PART = st.text(alphabet='0123456789abzAZ.+~', max_size=6)
DPKG_VERSION = st.builds(
    lambda epoch, head, upstream, revision: '%s%s%s%s' % (
        '%d:' % epoch if epoch is not None else '', head, upstream, '-' + revision if revision else ''),
    st.one_of(st.none(), st.integers(min_value=0, max_value=3)),
    st.sampled_from('0123456789'),
    DPKG_PART,
    st.one_of(st.none(), DPKG_PART.filter(lambda r: r and r[0].isalnum())),
)


def _dpkg_says(left, right):
    for relation, value in (('lt', -1), ('eq', 0), ('gt', 1)):
        if subprocess.call([DPKG, '--compare-versions', left, relation, right]) == 0:
            return value
    raise AssertionError('dpkg orders neither way: %r %r' % (left, right))


@pytest.mark.skipif(DPKG is None, reason='dpkg is not installed on this machine')
@FUZZ
@given(left=DPKG_VERSION, right=DPKG_VERSION)
@example(left='2.21.5~rc1-1', right='2.21.5-1')
@example(left='1:1.0', right='2.0')
def test_dpkg_order_agrees_with_dpkg(left, right):
    assert sv.compare_dpkg(left, right) == _dpkg_says(left, right)
