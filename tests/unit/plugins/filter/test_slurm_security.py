# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""pam_slurm_adopt decisions, PrologFlags and the MariaDB buffer pool of the slurm role."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.gpucluster.core.plugins.filter import slurm as s
from ansible_collections.gpucluster.core.plugins.filter.slurm import FilterModule


def _spec(**over):
    spec = {'enabled': True, 'compute': True, 'exempt_groups': ['hpcadmin'],
            'options': {'action_adopt_failure': 'deny'}, 'prolog_flags': ['Contain'], 'conf_extra': {},
            'admin_user': 'gpuadmin', 'admin_groups': ['gpuadmin', 'hpcadmin']}
    spec.update(over)
    return spec


def test_pam_adopt_settings_that_are_fine():
    assert s.pam_adopt_errors(_spec()) == []
    # root is never adopted (pam_slurm_adopt ignores root), so its groups do not matter.
    assert s.pam_adopt_errors(_spec(admin_user='root', admin_groups=[])) == []
    # Connected as the exempt group through the user's primary group.
    assert s.pam_adopt_errors(_spec(exempt_groups=['gpuadmin'], admin_groups=['gpuadmin'])) == []


@pytest.mark.parametrize('groups', [[], None, 'hpcadmin'])
def test_pam_adopt_needs_an_exempt_group(groups):
    errors = s.pam_adopt_errors(_spec(exempt_groups=groups))
    assert len(errors) == 1 and errors[0].startswith('slurm_pam_adopt_exempt_groups:')
    assert 'slurm_pam_adopt: false' in errors[0]


def test_pam_adopt_off_needs_no_exempt_group():
    assert s.pam_adopt_errors(_spec(enabled=False, exempt_groups=[], admin_groups=[])) == []


def test_controller_only_host_is_not_checked_for_the_exemption():
    assert s.pam_adopt_errors(_spec(compute=False, exempt_groups=[], admin_groups=[])) == []


def test_admin_outside_every_exempt_group_is_refused():
    errors = s.pam_adopt_errors(_spec(admin_groups=['gpuadmin', 'sudo']))
    assert len(errors) == 1
    assert 'gpuadmin (the account Ansible connects as) is in none of hpcadmin' in errors[0]
    assert 'its groups: gpuadmin, sudo' in errors[0]


def test_admin_whose_groups_cannot_be_read_is_refused():
    errors = s.pam_adopt_errors(_spec(admin_groups=None))
    assert len(errors) == 1 and 'could not be read' in errors[0]


@pytest.mark.parametrize('group', ['admins wheel', 'a:b', 'a,b', '', 7, '-x'])
def test_group_names_pam_cannot_use_are_refused(group):
    errors = s.pam_adopt_errors(_spec(exempt_groups=['hpcadmin', group]))
    assert errors and errors[0].startswith('slurm_pam_adopt_exempt_groups:') and 'not group names' in errors[0]


@pytest.mark.parametrize('options, needle', [
    ({'action_adopt_failure': 'maybe'}, 'action_adopt_failure='),
    ({'action_adopt_failur': 'deny'}, 'action_adopt_failur is not'),
    ({'log_level': 'chatty'}, 'log_level='),
    ('deny', 'is not a dict'),
])
def test_pam_adopt_options_are_checked(options, needle):
    errors = s.pam_adopt_errors(_spec(options=options))
    assert len(errors) == 1 and errors[0].startswith('slurm_pam_adopt_options:') and needle in errors[0]


def test_pam_adopt_needs_prolog_contain():
    errors = s.pam_adopt_errors(_spec(prolog_flags=['X11']))
    assert len(errors) == 1 and errors[0].startswith('slurm_prolog_flags:') and 'Contain' in errors[0]
    assert s.pam_adopt_errors(_spec(prolog_flags=['contain', 'X11'])) == []
    # Without pam_slurm_adopt the flags are the site's choice.
    assert s.pam_adopt_errors(_spec(enabled=False, prolog_flags=[])) == []


@pytest.mark.parametrize('flags', ['Contain', ['Contain', 'a b'], [None]])
def test_prolog_flags_must_be_a_list_of_words(flags):
    errors = s.pam_adopt_errors(_spec(enabled=False, prolog_flags=flags))
    assert len(errors) == 1 and errors[0].startswith('slurm_prolog_flags:')


def test_prolog_flags_through_conf_extra_is_refused():
    errors = s.pam_adopt_errors(_spec(enabled=False, conf_extra={'prologflags': 'Alloc'}))
    assert errors == ['slurm_conf_extra: PrologFlags is set by slurm_prolog_flags (a list); move it there']


def test_pam_lines_exempt_groups_first_then_adopt_last():
    options = {'action_generic_failure': 'deny', 'action_adopt_failure': 'deny', 'disable_x11': True}
    lines = s.pam_adopt_lines(['hpcadmin', 'ops'], options)
    assert lines == [
        'account    sufficient   pam_succeed_if.so quiet user ingroup hpcadmin',
        'account    sufficient   pam_succeed_if.so quiet user ingroup ops',
        'account    required     pam_slurm_adopt.so action_adopt_failure=deny action_generic_failure=deny '
        'disable_x11=1',
    ]
    assert s.pam_adopt_lines(['a'])[-1] == 'account    required     pam_slurm_adopt.so'


@pytest.mark.parametrize('memtotal, expected', [
    (2063731, '16384M'),   # a 2 TiB node: capped
    (257000, '16384M'),    # 10 % of 251 GiB is over the cap
    (64000, '6400M'),      # 10 %, in whole 128 MiB
    (8000, '1024M'),       # at least 1 GiB on a real server
    (1500, '640M'),        # never more than half of a small host's memory
    (100, '128M'),
    ('32768', '3200M'),
])
def test_innodb_buffer_pool_auto(memtotal, expected):
    assert s.innodb_buffer_pool('auto', memtotal) == expected


def test_innodb_buffer_pool_given_size_is_kept():
    assert s.innodb_buffer_pool('128M', 64000) == '128M'


def test_innodb_buffer_pool_bad_memory_names_it():
    with pytest.raises(AnsibleFilterError, match='memtotal_mb'):
        s.innodb_buffer_pool('auto', 'lots')


def test_prolog_flags_change_needs_a_restart():
    old = 'ClusterName=c\nSlurmUser=slurm\n'
    assert s.conf_change(old, old + 'PrologFlags=Contain\n') == 'restart'


def test_new_filters_are_registered():
    filters = FilterModule().filters()
    for name in ('slurm_pam_adopt_errors', 'slurm_pam_adopt_lines', 'slurm_innodb_buffer_pool'):
        assert name in filters
