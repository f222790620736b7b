# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fast path's decisions: fingerprints, what changed, and when a node counts as converged."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.gpucluster.core.plugins.module_utils import converged_state as cs

PARTS = {'code': 'abc', 'variables': {'slurm_version': '22.05.8', 'slurm_accounting': True},
         'facts': {'os_family': 'Debian'}, 'inputs': {'controller': 'node1'}}
STATE = {'files': {'/etc/slurm/slurm.conf': {'type': 'file', 'content': 'aa', 'mode': '0644', 'uid': 0, 'gid': 0}},
         'packages': {'slurmd': {'version': '22.05.8-4', 'held': True}},
         'services': {'slurmd.service': {'enabled': 'enabled', 'active': 'active'}},
         'globs': {'/dev/nvidia[0-9]*': ['/dev/nvidia0']}, 'probes': {}}


def record(parts=None, state=None, role='slurm', outputs=None):
    return cs.record_document(role, cs.fingerprint(PARTS if parts is None else parts), STATE if state is None else state,
                              outputs)


def with_change(base, path, value):
    out = dict((k, dict(v) if isinstance(v, dict) else v) for k, v in base.items())
    target = out
    for key in path[:-1]:
        target[key] = dict(target[key])
        target = target[key]
    target[path[-1]] = value
    return out


def test_equal_inputs_and_state_are_converged():
    assert cs.decide('slurm', record(), cs.fingerprint(PARTS), STATE) == (True, [])


@pytest.mark.parametrize('part, key, value, reason', [
    ('variables', 'slurm_version', '23.02.1', 'variables changed: slurm_version'),
    ('variables', 'slurm_new', 1, 'variables new: slurm_new'),
    ('facts', 'os_family', 'RedHat', 'facts changed: os_family'),
    ('inputs', 'controller', 'node2', 'inputs changed: controller'),
])
def test_a_changed_input_is_named(part, key, value, reason):
    changed = with_change(PARTS, (part, key), value)
    converged, reasons = cs.decide('slurm', record(), cs.fingerprint(changed), STATE)
    assert not converged
    assert reasons == [reason]


def test_a_gone_variable_and_changed_code_are_named():
    changed = dict(PARTS, code='other', variables={'slurm_version': '22.05.8'})
    converged, reasons = cs.decide('slurm', record(), cs.fingerprint(changed), STATE)
    assert not converged
    assert reasons == ["the role's code or the collection's plugins changed", 'variables gone: slurm_accounting']


@pytest.mark.parametrize('path, value, reason', [
    (('files', '/etc/slurm/slurm.conf', 'content'), 'bb', 'file /etc/slurm/slurm.conf changed (content)'),
    (('files', '/etc/slurm/slurm.conf', 'mode'), '0600', 'file /etc/slurm/slurm.conf changed (mode)'),
    (('files', '/etc/slurm/slurm.conf', 'type'), 'missing', 'file /etc/slurm/slurm.conf is gone'),
    (('packages', 'slurmd', 'held'), False, 'package slurmd is 22.05.8-4 (was 22.05.8-4 held)'),
    (('packages', 'slurmd', 'version'), None, 'package slurmd is not installed (was 22.05.8-4 held)'),
    (('services', 'slurmd.service', 'active'), 'failed',
     'service slurmd.service is enabled/failed (was enabled/active; enabled/active)'),
    (('globs', '/dev/nvidia[0-9]*'), [], 'the paths matching /dev/nvidia[0-9]* changed'),
])
def test_a_change_by_hand_is_named(path, value, reason):
    observed = with_change(STATE, path, value)
    converged, reasons = cs.decide('slurm', record(), cs.fingerprint(PARTS), observed)
    assert not converged
    assert reasons == [reason]


def test_a_new_managed_item_is_not_trusted():
    observed = with_change(STATE, ('services', 'slurmctld.service'), {'enabled': 'enabled', 'active': 'active'})
    converged, reasons = cs.decide('slurm', record(), cs.fingerprint(PARTS), observed)
    assert not converged
    assert reasons == ['the managed services differ from the record (now also slurmctld.service)']


def test_file_patterns_compare_each_match():
    base = {'files': {'/etc/x/*.conf': {'type': 'pattern', 'matches': {'/etc/x/a.conf': {'type': 'file', 'content': '1'}}}}}
    more = {'files': {'/etc/x/*.conf': {'type': 'pattern', 'matches': {'/etc/x/a.conf': {'type': 'file', 'content': '1'},
                                                                       '/etc/x/b.conf': {'type': 'file', 'content': '2'}}}}}
    edited = {'files': {'/etc/x/*.conf': {'type': 'pattern', 'matches': {'/etc/x/a.conf': {'type': 'file', 'content': '9'}}}}}
    assert cs.compare_state(base, base) == []
    assert cs.compare_state(base, more) == ['the files matching /etc/x/*.conf are now /etc/x/a.conf, /etc/x/b.conf '
                                            '(were /etc/x/a.conf)']
    assert cs.compare_state(base, edited) == ['file /etc/x/a.conf changed (content)']


@pytest.mark.parametrize('stored, reason', [
    (None, 'no record of a finished full run of slurm on this node'),
    (ValueError('/var/lib/gpucluster/converged/slurm.json is not JSON (Expecting value)'),
     'the record of slurm cannot be used: /var/lib/gpucluster/converged/slurm.json is not JSON'),
    ({'format': 0, 'role': 'slurm'}, 'the record of slurm has format 0, this collection writes 1'),
    (['not', 'a', 'mapping'], "the record of slurm has format 'list'"),
    ({'format': cs.RECORD_FORMAT, 'role': 'monitoring'}, "the record is of role 'monitoring', not slurm"),
    ({'format': cs.RECORD_FORMAT, 'role': 'slurm', 'fingerprint': 'x', 'state': STATE}, 'the record holds no fingerprint'),
])
def test_a_record_that_cannot_be_trusted_runs_the_full_path(stored, reason):
    converged, reasons = cs.decide('slurm', stored, cs.fingerprint(PARTS), STATE)
    assert not converged
    assert reasons[0].startswith(reason)


def test_outputs_are_kept_plain_and_finite():
    doc = record(outputs={'os_tuning_reboot_required': True, 'ratio': float('nan')})
    assert doc['outputs'] == {'os_tuning_reboot_required': True, 'ratio': 'nan'}


def test_the_fingerprint_keeps_no_value():
    secret = 'Sup3r-S3cret-munge-key'
    doc = record(dict(PARTS, variables={'slurm_munge_key': secret}))
    assert secret not in repr(doc)


def test_a_value_nested_too_deep_is_refused():
    deep = []
    for dummy in range(cs.MAX_DEPTH + 2):
        deep = [deep]
    with pytest.raises(cs.FingerprintError):
        cs.fingerprint(dict(PARTS, inputs={'deep': deep}))


@pytest.mark.parametrize('manages, error', [
    ('files', 'manages must be a mapping'),
    ({'file': []}, 'manages has unknown keys file'),
    ({'files': '/etc/x'}, 'manages.files must be a list of strings'),
    ({'files': ['etc/x']}, "manages.files holds 'etc/x'; accepted: absolute paths"),
    ({'packages': ['']}, 'manages.packages holds'),
    ({'probes': [{'name': 'x', 'argv': 'ls'}]}, 'manages.probes holds'),
])
def test_a_bad_declaration_is_refused_naming_the_key(manages, error):
    with pytest.raises(ValueError) as caught:
        cs.normalize_manages(manages)
    assert str(caught.value).startswith(error)


def test_declarations_are_sorted_and_unique():
    assert cs.normalize_manages({'files': ['/b', '/a', '/b'], 'probes': [{'name': 'p', 'argv': ['true']}]}) == {
        'files': ['/a', '/b'], 'packages': [], 'services': [], 'globs': [], 'probes': [{'name': 'p', 'argv': ['true']}]}


@pytest.mark.parametrize('name, value, expected', [
    ('interfaces', ['lo', 'eth0', 'veth12ab', 'docker0', 'br-1234', 'ib0'], ['eth0', 'ib0', 'lo']),
    ('gpu', {'present': True, 'count': 1, 'driver_version': '550.54.15', 'cuda_version': '12.4',
             'health': {'status': 'ok', 'issues': []},
             'devices': [{'index': 0, 'uuid': 'GPU-1', 'pci_bus_id': '00000000:81:00.0', 'name': 'A100',
                          'memory_total_mib': 81920, 'temperature_c': 40, 'utilization_pct': 99}]},
     {'top': {'present': True, 'count': 1, 'driver_version': '550.54.15', 'cuda_version': '12.4'}, 'status': 'ok',
      'devices': [{'index': 0, 'uuid': 'GPU-1', 'pci_bus_id': '00000000:81:00.0', 'name': 'A100',
                   'memory_total_mib': 81920, 'serial': None, 'vbios_version': None}]}),
    ('os_family', 'Debian', 'Debian'),
])
def test_facts_keep_what_describes_the_machine(name, value, expected):
    assert cs.stable_fact(name, value) == expected


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                     lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
                     max_leaves=12)


@settings(max_examples=60)
@given(variables=st.dictionaries(st.text(min_size=1, max_size=10), _JSON, max_size=5))
def test_the_fingerprint_is_a_function_of_the_values(variables):
    parts = dict(PARTS, variables=variables)
    again = dict(PARTS, variables=dict(reversed(list(variables.items()))))
    assert cs.fingerprint(parts) == cs.fingerprint(again)
    assert cs.fingerprint_reasons(cs.fingerprint(parts), cs.fingerprint(again)) == []


@settings(max_examples=60)
@given(name=st.text(min_size=1, max_size=10), a=_JSON, b=_JSON)
def test_a_changed_variable_is_always_seen(name, a, b):
    before = cs.fingerprint(dict(PARTS, variables={name: a}))
    after = cs.fingerprint(dict(PARTS, variables={name: b}))
    if cs.digest(a) != cs.digest(b):
        assert cs.fingerprint_reasons(before, after) == ['variables changed: %s' % name]
    else:
        assert cs.fingerprint_reasons(before, after) == []
