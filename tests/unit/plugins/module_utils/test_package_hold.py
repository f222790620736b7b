# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""package_hold decisions: which names change, with what, and which are errors."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.gpucluster.core.plugins.module_utils import package_hold as ph


def inst(instance, want, status='installed'):
    return {'instance': instance, 'want': want, 'status': status}


# ---------------------------------------------------------------------------------------------------------
# names and parsing
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize('names, expected', [
    (None, []),
    ([], []),
    (['a', 'b', 'a'], ['a', 'b']),
    (['libnvidia-compute-550', 'g++-12', 'kernel-core'], ['libnvidia-compute-550', 'g++-12', 'kernel-core']),
])
def test_names_are_kept_in_order_once(names, expected):
    assert ph.check_names(names) == expected


@pytest.mark.parametrize('names, says', [
    ('nvidia-driver-550', 'must be a list'),
    ({'a': 1}, 'must be a list'),
    (['nvidia-driver=550.54.15-1'], "'nvidia-driver=550.54.15-1'; accepted: package names"),
    (['libfoo:i386'], "'libfoo:i386'"),
    (['-o'], "'-o'"),
    ([''], "''"),
    (['a b'], "'a b'"),
    ([5], "'5'"),
])
def test_bad_names_are_refused_naming_them(names, says):
    with pytest.raises(ph.HoldError) as err:
        ph.check_names(names)
    assert says in str(err.value)


def test_dpkg_query_lines_are_read_per_name():
    text = ('nvidia-driver-550\tnvidia-driver-550\thold ok installed\n'
            'libfoo\tlibfoo:amd64\tinstall ok installed\n'
            'libfoo\tlibfoo:i386\tinstall ok installed\n'
            'other\tother\thold ok installed\n'
            'old\told\tdeinstall ok config-files\n'
            'garbage line\n'
            'bad\tbad\ttwo words\n')
    found = ph.parse_dpkg_query(text, ['nvidia-driver-550', 'libfoo', 'old', 'bad', 'unknown'])
    assert found == {
        'nvidia-driver-550': [inst('nvidia-driver-550', 'hold')],
        'libfoo': [inst('libfoo:amd64', 'install'), inst('libfoo:i386', 'install')],
        'old': [inst('old', 'deinstall', 'config-files')],
    }


def test_rpm_query_lines_are_read_per_name():
    text = ('kernel\t0:5.14.0-427.el9\nkernel\t0:5.14.0-503.el9\nkernel\t0:5.14.0-427.el9\n'
            'nvidia-driver\t3:550.54.15-1.el9\npackage cuda-toolkit-12-4 is not installed\n'
            'noepoch\t(none):1.0-1\n')
    assert ph.parse_rpm_query(text, ['kernel', 'nvidia-driver', 'cuda-toolkit-12-4', 'noepoch']) == {
        'kernel': ['0:5.14.0-427.el9', '0:5.14.0-503.el9'],
        'nvidia-driver': ['3:550.54.15-1.el9'],
        'noepoch': ['0:1.0-1'],
    }


# ---------------------------------------------------------------------------------------------------------
# apt
# ---------------------------------------------------------------------------------------------------------

APT_CASES = [
    # (state, instances, check_mode, skip_missing, lines, changed, not_installed)
    ('held', {'a': [inst('a', 'install')]}, False, False, [('a', 'hold')], ['a'], []),
    ('held', {'a': [inst('a', 'hold')]}, False, False, [], [], []),
    # marked for removal but installed: held all the same
    ('held', {'a': [inst('a', 'deinstall')]}, False, False, [('a', 'hold')], ['a'], []),
    # a package left half-configured by a failed build is on the node: it can be held
    ('held', {'a': [inst('a', 'install', 'half-configured')]}, False, False, [('a', 'hold')], ['a'], []),
    # multiarch: each installed instance, not the one that is only remembered
    ('held', {'a': [inst('a:amd64', 'install'), inst('a:i386', 'hold'), inst('a:arm64', 'install', 'not-installed')]},
     False, False, [('a:amd64', 'hold')], ['a'], []),
    # check mode: not installed yet, the real run installs it before the hold
    ('held', {}, True, False, [], ['a'], ['a']),
    ('held', {'a': [inst('a', 'unknown', 'not-installed')]}, True, False, [], ['a'], ['a']),
    # skip_missing: nothing to do for a name that is not installed, in either mode
    ('held', {}, False, True, [], [], ['a']),
    ('held', {}, True, True, [], [], ['a']),
    ('unheld', {'a': [inst('a', 'hold')]}, False, False, [('a', 'install')], ['a'], []),
    ('unheld', {'a': [inst('a', 'install')]}, False, False, [], [], []),
    # a remembered hold on a package that is gone: deinstall, never install (which would install it)
    ('unheld', {'a': [inst('a', 'hold', 'config-files')]}, False, False, [('a', 'deinstall')], ['a'], ['a']),
    ('unheld', {}, False, False, [], [], ['a']),
    ('unheld', {'a': [inst('a:amd64', 'hold'), inst('a:i386', 'hold')]}, True, False,
     [('a:amd64', 'install'), ('a:i386', 'install')], ['a'], []),
]


@pytest.mark.parametrize('state, instances, check_mode, skip_missing, lines, changed, not_installed', APT_CASES)
def test_apt_plan(state, instances, check_mode, skip_missing, lines, changed, not_installed):
    plan = ph.apt_plan(state, ['a'], instances, check_mode=check_mode, skip_missing=skip_missing)
    assert plan['lines'] == lines
    assert plan['changed'] == changed
    assert plan['not_installed'] == not_installed
    assert plan['after'] == dict(lines)


def test_apt_plan_keeps_the_names_order_and_changes_only_what_differs():
    instances = {'c': [inst('c', 'install')], 'a': [inst('a', 'hold')], 'b': [inst('b', 'install')]}
    plan = ph.apt_plan('held', ['c', 'a', 'b'], instances)
    assert plan['lines'] == [('c', 'hold'), ('b', 'hold')]
    assert plan['changed'] == ['c', 'b']
    assert ph.selections_text(plan['lines']) == 'c hold\nb hold\n'
    assert ph.apt_diff(plan)['before'] == 'b install\nc install\n'
    assert ph.apt_diff(plan)['after'] == 'b hold\nc hold\n'


@pytest.mark.parametrize('instances, says', [
    ({}, 'cannot hold b (unknown to dpkg): not installed'),
    ({'b': [inst('b', 'deinstall', 'config-files')]}, 'cannot hold b (b config-files): not installed'),
    ({'b': [inst('b:i386', 'unknown', 'not-installed')]}, 'cannot hold b (b:i386 not-installed)'),
])
def test_holding_a_package_that_is_not_installed_fails_naming_it(instances, says):
    instances = dict(instances, a=[inst('a', 'install')])
    with pytest.raises(ph.HoldError) as err:
        ph.apt_plan('held', ['a', 'b'], instances)
    assert says in str(err.value)
    assert 'must run first' in str(err.value)


def test_a_long_list_of_missing_names_is_cut_short():
    names = ['p%02d' % i for i in range(20)]
    with pytest.raises(ph.HoldError) as err:
        ph.apt_plan('held', names, {})
    assert 'and 8 more' in str(err.value)


def test_selections_dpkg_did_not_take_are_found():
    lines = [('a', 'hold'), ('b:i386', 'hold')]
    after = {'a': [inst('a', 'hold')], 'b': [inst('b:i386', 'install')]}
    assert ph.apt_unapplied(lines, after) == [('b:i386', 'hold')]
    assert ph.apt_unapplied(lines, {}) == lines


@settings(max_examples=60)
@given(st.dictionaries(st.sampled_from(['a', 'b', 'c']),
                       st.lists(st.tuples(st.sampled_from(['', ':amd64', ':i386']),
                                          st.sampled_from(['install', 'hold', 'deinstall', 'purge', 'unknown']),
                                          st.sampled_from(['installed', 'not-installed', 'config-files', 'unpacked'])),
                                min_size=1, max_size=3, unique_by=lambda t: t[0])),
       st.sampled_from(ph.STATES))
def test_applying_a_plan_reaches_the_state_and_a_second_plan_is_empty(db, state):
    instances = dict((name, [inst(name + arch, want, status) for arch, want, status in entries])
                     for name, entries in db.items())
    plan = ph.apt_plan(state, ['a', 'b', 'c'], instances, skip_missing=True)
    applied = dict((name, [dict(e, want=plan['after'].get(e['instance'], e['want'])) for e in entries])
                   for name, entries in instances.items())
    again = ph.apt_plan(state, ['a', 'b', 'c'], applied, skip_missing=True)
    assert again['lines'] == [] and again['changed'] == []
    for entries in applied.values():
        for entry in entries:
            if state == 'unheld':
                assert entry['want'] != 'hold'
            elif entry['status'] not in ph.ABSENT_STATUSES:
                assert entry['want'] == 'hold'
    # Only what differed was written.
    assert all(instances_want(instances, i) != s for i, s in plan['lines'])


def instances_want(instances, instance):
    for entries in instances.values():
        for entry in entries:
            if entry['instance'] == instance:
                return entry['want']
    return None


# ---------------------------------------------------------------------------------------------------------
# dnf
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize('entry, owner', [
    ('nvidia-container-toolkit-0:1.17.8-1.*', 'nvidia-container-toolkit'),
    ('nvidia-container-toolkit-base-0:1.17.8-1.*', 'nvidia-container-toolkit-base'),
    ('libnvidia-container-tools-0:1.17.8-1.*', 'libnvidia-container-tools'),
    ('kernel-5.14.0-427.el9.x86_64', 'kernel'),
    ('kernel-core-0:5.14.0-427.el9.*', 'kernel-core'),
    ('!nvidia-container-toolkit-0:1.17.7-1.*', None),
    ('# Added lock on Mon Jan  1 00:00:00 2024', None),
    ('nvidia-container-toolkit-1.17*', None),
    ('nvidia-container-toolkit-base-1.17.8', None),
    ('other-0:1-1.*', None),
    ('', None),
])
def test_lock_entries_belong_to_the_longest_matching_name(entry, owner):
    names = ['nvidia-container-toolkit', 'nvidia-container-toolkit-base', 'libnvidia-container-tools', 'kernel',
             'kernel-core']
    assert ph.lock_owner(entry, names) == owner


def test_lock_spec_is_the_plugins_own_form():
    assert ph.lock_spec('nvidia-driver', '3:550.54.15-1.el9') == 'nvidia-driver-3:550.54.15-1.el9.*'
    assert ph.lock_spec('x', '1.0-1') == 'x-0:1.0-1.*'


@pytest.mark.parametrize('text, expected', [
    ('[main]\nenabled = 1\nlocklist = /etc/dnf/plugins/versionlock.list\n', (True, '/etc/dnf/plugins/versionlock.list')),
    ('[main]\nenabled=0\nlocklist=/x\n', (False, '/x')),
    ('[main]\nenabled=False\n', (False, None)),
    ('# comment\n[other]\nlocklist=/y\n[main]\n; note\nenabled=yes\n', (True, None)),
    ('', (True, None)),
])
def test_versionlock_conf(text, expected):
    assert ph.parse_versionlock_conf(text) == expected


LIST = ('# Added lock on Mon Jan  1 00:00:00 2024\n'
        'nvidia-container-toolkit-0:1.17.7-1.*\n'
        'nvidia-container-toolkit-base-0:1.17.7-1.*\n'
        '!nvidia-container-toolkit-0:1.17.6-1.*\n'
        'site-pinned-thing-0:2.0-1.*\n')
NAMES = ['nvidia-container-toolkit', 'nvidia-container-toolkit-base']


def test_dnf_hold_moves_the_lock_to_the_installed_version_and_keeps_everything_else():
    installed = {'nvidia-container-toolkit': ['0:1.17.8-1'], 'nvidia-container-toolkit-base': ['0:1.17.8-1']}
    plan = ph.dnf_plan('held', NAMES, installed, LIST)
    assert plan['changed'] == NAMES
    assert plan['removed'] == ['nvidia-container-toolkit-0:1.17.7-1.*', 'nvidia-container-toolkit-base-0:1.17.7-1.*']
    assert plan['text'] == ('# Added lock on Mon Jan  1 00:00:00 2024\n'
                            '!nvidia-container-toolkit-0:1.17.6-1.*\n'
                            'site-pinned-thing-0:2.0-1.*\n'
                            'nvidia-container-toolkit-0:1.17.8-1.*\n'
                            'nvidia-container-toolkit-base-0:1.17.8-1.*\n')
    again = ph.dnf_plan('held', NAMES, installed, plan['text'])
    assert again['changed'] == [] and again['text'] == plan['text']


def test_dnf_hold_of_an_already_locked_version_changes_nothing():
    installed = {'nvidia-container-toolkit': ['0:1.17.7-1'], 'nvidia-container-toolkit-base': ['0:1.17.8-1']}
    plan = ph.dnf_plan('held', NAMES, installed, LIST)
    assert plan['changed'] == ['nvidia-container-toolkit-base']
    assert 'nvidia-container-toolkit-0:1.17.7-1.*\n' in plan['text']


def test_dnf_hold_locks_every_installed_kernel_and_drops_a_duplicate():
    installed = {'kernel': ['0:5.14.0-427.el9', '0:5.14.0-503.el9']}
    text = 'kernel-0:5.14.0-427.el9.*\nkernel-0:5.14.0-427.el9.*\n'
    plan = ph.dnf_plan('held', ['kernel'], installed, text)
    assert plan['text'] == 'kernel-0:5.14.0-427.el9.*\nkernel-0:5.14.0-503.el9.*\n'
    assert ph.dnf_plan('held', ['kernel'], installed, plan['text'])['changed'] == []


def test_dnf_release_removes_every_entry_of_the_names_only():
    plan = ph.dnf_plan('unheld', NAMES, {}, LIST)
    assert plan['changed'] == NAMES
    assert plan['text'] == ('# Added lock on Mon Jan  1 00:00:00 2024\n'
                            '!nvidia-container-toolkit-0:1.17.6-1.*\n'
                            'site-pinned-thing-0:2.0-1.*\n')
    assert ph.dnf_plan('unheld', NAMES, {}, plan['text'])['changed'] == []


def test_dnf_lock_of_a_package_that_is_not_installed_fails_naming_it():
    with pytest.raises(ph.HoldError) as err:
        ph.dnf_plan('held', NAMES, {'nvidia-container-toolkit': ['0:1.17.8-1']}, '')
    assert 'cannot lock nvidia-container-toolkit-base: not installed' in str(err.value)


def test_dnf_check_mode_and_skip_missing():
    plan = ph.dnf_plan('held', ['a', 'b'], {'a': ['0:1-1']}, '', check_mode=True)
    assert plan['changed'] == ['a', 'b'] and plan['not_installed'] == ['b'] and plan['text'] == 'a-0:1-1.*\n'
    plan = ph.dnf_plan('held', ['a', 'b'], {'a': ['0:1-1']}, '', skip_missing=True)
    assert plan['changed'] == ['a'] and plan['not_installed'] == ['b']


def test_dnf_list_without_a_final_newline_is_completed():
    plan = ph.dnf_plan('held', ['a'], {'a': ['0:1-1']}, 'b-0:2-2.*')
    assert plan['text'] == 'b-0:2-2.*\na-0:1-1.*\n'


def test_unknown_state_is_refused():
    with pytest.raises(ph.HoldError) as err:
        ph.apt_plan('present', ['a'], {})
    assert "state is 'present'; accepted: held, unheld" in str(err.value)
