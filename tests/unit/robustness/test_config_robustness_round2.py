# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Round two of hostile and careless inputs (issue 27): secrets in messages, numbers that are not finite,
list settings given a string, and RDMA sysfs trees with junk names and files that are not files.

Every case states its exact outcome: refused with a message (the message, or its start, is written out),
accepted (no message, the value used as given), or read without a traceback (the verdict is written out).
The properties at the end (hypothesis) hold for every input shape.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import ast
import glob
import json
import math
import os
import re
import subprocess
import sys
import threading
import time

import pytest
import yaml
from hypothesis import given, settings, strategies as st

from ansible.errors import AnsibleFilterError
from ansible_collections.gpucluster.core.plugins.filter import config_values as cv
from ansible_collections.gpucluster.core.plugins.filter import rdma as rdma_filter
from ansible_collections.gpucluster.core.plugins.module_utils import rdma_health, rdma_sysfs
from ansible_collections.gpucluster.core.plugins.modules import rdma_facts
from ansible_collections.gpucluster.core.tests.unit.robustness.test_config_robustness import _run_preflight

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
ROLES = sorted(os.path.basename(os.path.dirname(os.path.dirname(p)))
               for p in glob.glob(os.path.join(REPO, 'roles', '*', 'meta', 'argument_specs.yml')))
FUZZ = settings(max_examples=150, deadline=None, derandomize=True)

NAN = float('nan')
INF = float('inf')
NOT_FINITE = cv.NOT_FINITE
YAML_HINT = ' (YAML reads an unquoted {...} as a mapping and [...] as a list: quote the value)'


def _load(*parts):
    with open(os.path.join(REPO, *parts)) as handle:
        return yaml.safe_load(handle)


def _options(role):
    return _load('roles', role, 'meta', 'argument_specs.yml')['argument_specs']['main']['options']


# ============================================================ 1. secrets never appear in a message

# (id, value, the problem the message gives); the value is always refused and never shown.
SECRET_REFUSED = [
    ('unquoted-braces-mapping', {'Sup3r-S3cret': None}, 'it is a mapping, not a string' + YAML_HINT),
    ('nested-mapping', {'Sup3r': {'S3cret': 'x'}}, 'it is a mapping, not a string' + YAML_HINT),
    ('list', ['hunter2'], 'it is a list, not a string' + YAML_HINT),
    ('list-of-mapping', [{'hunter2': 1}], 'it is a list, not a string' + YAML_HINT),
    ('whole-number', 52213377, 'it is a whole number, not a string (quote it: YAML reads 0777 as 511 and yes as true)'),
    ('boolean', True, 'it is a boolean, not a string (quote it: YAML reads 0777 as 511 and yes as true)'),
    ('float-nan', NAN, 'it is a number, not a string (quote it: YAML reads 0777 as 511 and yes as true)'),
    ('null', None, 'it is empty (null), not a string'),
    ('key-with-newline', {'Sup3r\nS3cret': 1}, 'it is a mapping, not a string' + YAML_HINT),
]


@pytest.mark.parametrize('case_id, value, problem', SECRET_REFUSED, ids=[c[0] for c in SECRET_REFUSED])
def test_a_wrongly_typed_secret_names_the_variable_and_the_type_only(case_id, value, problem):
    errors = cv.config_value_errors({'slurm_accounting_db_password': value}, 'slurm', 'slurmdbd.conf', secret=True)
    assert errors == ['slurm_accounting_db_password is not accepted in slurmdbd.conf (value not shown): %s; accepted: %s.'
                      % (problem, cv.KINDS['slurm'][1])]
    for part in ('Sup3r', 'S3cret', 'hunter2', '52213377', 'True', 'NaN'):
        assert part not in errors[0]


def test_a_good_secret_is_accepted():
    assert cv.config_value_errors({'checkpoint_backup_password': 'Xy7-Qz!9_pass'}, 'line', 'the secret files', True) == []


# ============================================================ 2. numbers are finite, in range, or refused

NUMBER_CASES = [
    # (id, value, integer, expected number or None, problem or None)
    ('int', 8, True, 8, None),
    ('digits-string', '8', True, 8, None),
    ('float-whole', 8.0, True, 8, None),
    ('negative-digits', '-3', True, -3, None),
    ('float', 2.5, False, 2.5, None),
    ('float-string', '400', False, 400.0, None),
    ('float-exponent-string', '4e2', False, 400.0, None),
    ('nan', NAN, True, None, NOT_FINITE),
    ('nan-float', NAN, False, None, NOT_FINITE),
    ('inf', INF, False, None, NOT_FINITE),
    ('minus-inf', -INF, False, None, NOT_FINITE),
    ('string-1e999', '1e999', False, None, NOT_FINITE),
    ('string-nan', 'NaN', False, None, NOT_FINITE),
    ('string-dot-inf', '.inf', False, None, NOT_FINITE),
    ('string-minus-infinity', '-Infinity', True, None, NOT_FINITE),
    ('string-1e999-int', '1e999', True, None, 'it is a string that is not a whole number written in digits'),
    ('string-1e3-int', '1e3', True, None, 'it is a string that is not a whole number written in digits'),
    ('fraction', 3.5, True, None, 'it has a fractional part, not a whole number'),
    ('boolean', True, True, None, 'it is a boolean, not a whole number'),
    ('huge-int', 2 ** 64, True, None, 'it is beyond 2^63, larger than any setting takes'),
    ('huge-int-digits', '9' * 25, True, None, 'it is beyond 2^63, larger than any setting takes'),
    ('words', 'lots', False, None, 'it is a string that is not a number written in digits'),
    ('list', [8], True, None, 'it is a list, not a whole number'),
    ('mapping', {'a': 1}, False, None, 'it is a mapping, not a number'),
    ('null', None, True, None, 'it is a null, not a whole number'),
]


@pytest.mark.parametrize('case_id, value, integer, number, problem', NUMBER_CASES, ids=[c[0] for c in NUMBER_CASES])
def test_number_problem(case_id, value, integer, number, problem):
    assert cv.number_problem(value, integer) == (number, problem)


@pytest.mark.parametrize('values, kwargs, expected', [
    ({'x': 60}, {'minimum': 60, 'integer': True}, []),
    ({'x': '120'}, {'minimum': 60, 'integer': True}, []),
    ({'x': 59}, {'minimum': 60, 'integer': True},
     ['x = 59 is not accepted: it is less than 60; accepted: a whole number of at least 60.']),
    ({'x': 9000}, {'minimum': 1, 'maximum': 8192, 'integer': True},
     ['x = 9000 is not accepted: it is more than 8192; accepted: a whole number from 1 to 8192.']),
    ({'x': NAN}, {'minimum': 0}, ['x = NaN is not accepted: %s; accepted: a finite number of at least 0.' % NOT_FINITE]),
    ({'x': INF}, {'maximum': 5}, ['x = Infinity is not accepted: %s; accepted: a finite number of at most 5.' % NOT_FINITE]),
    ({'b': -INF, 'a': True}, {}, ['a = true is not accepted: it is a boolean, not a number; accepted: a finite number.',
                                  'b = -Infinity is not accepted: %s; accepted: a finite number.' % NOT_FINITE]),
])
def test_number_errors(values, kwargs, expected):
    assert cv.number_errors(values, **kwargs) == expected


# input_type_errors: the types of meta/argument_specs.yml, strictly. (id, options, values, expected messages)
_LIST = {'type': 'list', 'elements': 'str', 'default': []}
_INTS = {'type': 'list', 'elements': 'int', 'default': []}
_INT = {'type': 'int', 'default': 3}
_FLOAT = {'type': 'float', 'default': 0}
_BOOL = {'type': 'bool', 'default': True}
_DICT = {'type': 'dict', 'default': {}}
_STR = {'type': 'str', 'default': ''}
_SECRET = {'type': 'str', 'default': '', 'no_log': True}
_SECRET_DICT = {'type': 'dict', 'default': {}, 'no_log': True}
_CHOICE = {'type': 'str', 'default': 'madvise', 'choices': ['always', 'madvise', 'never']}
_RAW_CHOICE = {'type': 'raw', 'default': 'auto', 'choices': ['auto', True, False]}
_LIST_CHOICES = {'type': 'list', 'elements': 'str', 'default': [], 'choices': ['marker', 'dcp']}
_LIST_ACCEPTED = 'accepted: a list, such as ["a", "b"] (one item: ["a"]).'
_STRING_NOT_LIST = 'it is a string, not a list (a string is never split into items: write ["..."] for one item)'

INPUT_CASES = [
    # accepted as given
    ('list', _LIST, ['mlx5_0'], []),
    ('list-empty', _LIST, [], []),
    ('ints-digit-strings', _INTS, [79, '48'], []),
    ('int-digits-string', _INT, '8', []),
    ('int-whole-float', _INT, 8.0, []),
    ('int-null-unset', {'type': 'int', 'default': None}, None, []),
    ('float-string', _FLOAT, '400', []),
    ('bool', _BOOL, False, []),
    ('dict', _DICT, {'a': [1, 2.5, {'b': None}]}, []),
    ('str-number', _STR, 12, []),
    ('secret-string', _SECRET, 'Sup3r-S3cret', []),
    ('raw-anything', {'type': 'raw', 'default': 'auto'}, True, []),
    ('choice', _CHOICE, 'madvise', []),
    ('choice-number-as-string', {'type': 'str', 'default': '1', 'choices': ['1', '2']}, 2, []),
    ('choice-raw-boolean', _RAW_CHOICE, False, []),
    ('choice-list', _LIST_CHOICES, ['dcp', 'marker'], []),
    ('choice-null-unset', {'type': 'str', 'default': None, 'choices': ['a']}, None, []),
    # refused: a string where a list belongs (Ansible's own check would split it at commas, the role would walk it)
    ('list-bare-string', _LIST, 'mlx5_0', ['x = "mlx5_0" is not accepted: %s; %s' % (_STRING_NOT_LIST, _LIST_ACCEPTED)]),
    ('list-comma-string', _LIST, 'a,b', ['x = "a,b" is not accepted: %s; %s' % (_STRING_NOT_LIST, _LIST_ACCEPTED)]),
    ('xid-ignore-string', _INTS, '79', ['x = "79" is not accepted: %s; %s' % (_STRING_NOT_LIST, _LIST_ACCEPTED)]),
    ('list-mapping', _LIST, {'mlx5_0': None},
     ['x = {"mlx5_0": null} is not accepted: it is a mapping, not a list; ' + _LIST_ACCEPTED]),
    ('list-null', _LIST, None, ['x = null is not accepted: it is empty (null), not a list; ' + _LIST_ACCEPTED]),
    ('list-item-mapping', _LIST, ['ok', {'a': 1}], ['x[1] = {"a": 1} is not accepted: it is a mapping, not a string'
                                                    + YAML_HINT + '; accepted: a list of strings.']),
    ('ints-boolean', _INTS, [True], ['x[0] = true is not accepted: it is a boolean, not a whole number; '
                                     'accepted: a list of whole numbers.']),
    ('ints-nan', _INTS, [NAN], ['x[0] = NaN is not accepted: %s; accepted: a list of whole numbers.' % NOT_FINITE]),
    # refused: numbers that are not finite, or not numbers
    ('int-nan', _INT, NAN, ['x = NaN is not accepted: %s; accepted: a whole number.' % NOT_FINITE]),
    ('int-inf', _INT, INF, ['x = Infinity is not accepted: %s; accepted: a whole number.' % NOT_FINITE]),
    ('int-1e999-string', _INT, '1e999', ['x = "1e999" is not accepted: it is a string that is not a whole number '
                                         'written in digits; accepted: a whole number.']),
    ('int-boolean', _INT, True, ['x = true is not accepted: it is a boolean, not a whole number; accepted: a whole number.']),
    ('int-fraction', _INT, 2.5, ['x = 2.5 is not accepted: it has a fractional part, not a whole number; '
                                 'accepted: a whole number.']),
    ('float-nan', _FLOAT, NAN, ['x = NaN is not accepted: %s; accepted: a finite number.' % NOT_FINITE]),
    ('float-minus-inf', _FLOAT, -INF, ['x = -Infinity is not accepted: %s; accepted: a finite number.' % NOT_FINITE]),
    ('float-nan-string', _FLOAT, 'nan', ['x = "nan" is not accepted: %s; accepted: a finite number.' % NOT_FINITE]),
    ('dict-nested-nan', _DICT, {'retired_pages_max': NAN},
     ['x.retired_pages_max = NaN is not accepted: %s; accepted: finite numbers.' % NOT_FINITE]),
    ('dict-deep-inf', _DICT, {'a': [{'b': [1, INF]}]},
     ['x.a[0].b[1] = Infinity is not accepted: %s; accepted: finite numbers.' % NOT_FINITE]),
    ('str-inf', _STR, INF, ['x = Infinity is not accepted: %s; accepted: finite numbers.' % NOT_FINITE]),
    # refused: other types
    ('bool-quoted-false', _BOOL, 'false', ['x = "false" is not accepted: it is a string, not a boolean (a quoted "false" '
                                           'is true in a condition): write true or false unquoted; accepted: true or '
                                           'false (a YAML boolean, unquoted).']),
    ('bool-one', _BOOL, 1, ['x = 1 is not accepted: it is a whole number, not a boolean; accepted: true or false '
                            '(a YAML boolean, unquoted).']),
    ('dict-key-value-string', _DICT, 'a=1', ['x = "a=1" is not accepted: it is a string, not a mapping; accepted: a '
                                             'mapping, such as {key: value}.']),
    ('str-mapping', _STR, {'braces': None}, ['x = {"braces": null} is not accepted: it is a mapping, not a string'
                                             + YAML_HINT + '; accepted: a string.']),
    # refused: not one of the choices (Ansible's own check is not run by site.yml: this one says it)
    ('choice-other', _CHOICE, 'sometimes', ['x = "sometimes" is not accepted: it is not one of the choices; '
                                            'accepted: one of always, madvise, never.']),
    ('choice-case', _CHOICE, 'Never', ['x = "Never" is not accepted: it is not one of the choices; '
                                       'accepted: one of always, madvise, never.']),
    ('choice-boolean-for-a-string', _CHOICE, True, ['x = true is not accepted: it is not one of the choices; '
                                                    'accepted: one of always, madvise, never.']),
    ('choice-raw-one-is-not-true', _RAW_CHOICE, 1, ['x = 1 is not accepted: it is not one of the choices; '
                                                    'accepted: one of auto, true, false.']),
    ('choice-raw-string-true', _RAW_CHOICE, 'true', ['x = "true" is not accepted: it is not one of the choices; '
                                                     'accepted: one of auto, true, false.']),
    ('choice-list-item', _LIST_CHOICES, ['dcp', 'zarr'], ['x[1] = "zarr" is not accepted: it is not one of the '
                                                          'choices; accepted: any of marker, dcp (a list of them).']),
    # refused: secrets, named with their type only
    ('secret-mapping', _SECRET, {'Sup3r-S3cret': None},
     ['x is not accepted (value not shown): it is a mapping, not a string' + YAML_HINT + '; accepted: a string.']),
    ('secret-list', _SECRET, ['hunter2'],
     ['x is not accepted (value not shown): it is a list, not a string' + YAML_HINT + '; accepted: a string.']),
    ('secret-number', _SECRET, 1234567, ['x is not accepted (value not shown): it is a whole number, not a string '
                                         '(quote it: YAML reads 0777 as 511 and yes as true); accepted: a string.']),
    ('secret-dict-deep-nan', _SECRET_DICT, {'Sup3r': [NAN]},
     ['x is not accepted (value not shown): it holds a number that is not finite; accepted: finite numbers.']),
    ('secret-dict-string', _SECRET_DICT, 'hunter2',
     ['x is not accepted (value not shown): it is a string, not a mapping; accepted: a mapping, such as {key: value}.']),
]


@pytest.mark.parametrize('case_id, option, value, expected', INPUT_CASES, ids=[c[0] for c in INPUT_CASES])
def test_input_type_errors(case_id, option, value, expected):
    assert cv.input_type_errors({'x': value}, {'x': option}) == expected
    if option.get('no_log'):
        for message in expected:
            assert 'Sup3r' not in message and 'hunter2' not in message and '1234567' not in message


def test_input_type_errors_ignores_names_without_a_spec_and_sorts_messages():
    assert cv.input_type_errors({'b': 'x', 'a': NAN, 'unknown': NAN}, {'a': _FLOAT, 'b': _LIST}) == [
        'a = NaN is not accepted: %s; accepted: a finite number.' % NOT_FINITE,
        'b = "x" is not accepted: %s; %s' % (_STRING_NOT_LIST, _LIST_ACCEPTED)]


def test_an_alias_bomb_is_walked_once_per_container():
    # YAML aliases share containers: 2**40 leaves on paper, a few dozen containers in memory.
    value = [1]
    for _unused in range(12):
        value = [value, value]
    node = {'k': value}
    for _unused in range(14):
        node = {'k': node, 'j': node}
    started = time.time()
    assert cv.input_type_errors({'x': {'a': value}}, {'x': _DICT}) == []
    deep = cv.input_type_errors({'x': node}, {'x': _DICT})
    assert time.time() - started < 10
    assert deep == ['x = <a mapping too large to show> is not accepted: it is nested more than 16 levels deep; '
                    'accepted: at most 16 levels of lists and mappings.']


@pytest.mark.parametrize('role', ROLES)
def test_every_role_default_passes_its_own_type_check(role):
    defaults = _load('roles', role, 'defaults', 'main.yml') or {}
    values = dict((k, v) for k, v in defaults.items() if not (isinstance(v, str) and '{{' in v))
    assert cv.input_type_errors(values, _options(role)) == []


@pytest.mark.parametrize('role', ROLES)
def test_every_choice_of_every_role_is_checked(role):
    """site.yml runs no Ansible argument check (rolespec_validate: false): the type check refuses a value
    outside an option's choices, for every option that has them."""
    options = _options(role)
    chosen = sorted(name for name, option in options.items() if option.get('choices'))
    for name in chosen:
        option = options[name]
        value = ['not-a-choice'] if option.get('type') == 'list' else 'not-a-choice'
        errors = cv.input_type_errors({name: value}, options)
        assert len(errors) == 1 and errors[0].startswith(name) and 'it is not one of the choices' in errors[0], errors
        good = option['choices'][:1] if option.get('type') == 'list' else option['choices'][0]
        assert cv.input_type_errors({name: good}, options) == []


def test_site_yml_imports_every_role_without_ansibles_own_check():
    imported = []
    for play in _load('playbooks', 'site.yml'):
        assert 'roles' not in play, play['name']
        for task in play.get('tasks') or []:
            if 'ansible.builtin.import_role' in task:
                imported.append(task['ansible.builtin.import_role']['name'].split('.')[-1])
                assert task['ansible.builtin.import_role']['rolespec_validate'] is False, task['name']
    assert sorted(set(imported)) == sorted(r for r in ROLES)


def test_ansible_argument_validation_takes_a_string_as_a_list_but_not_for_the_role():
    """Why the preflight checks again: Ansible's argument check converts a copy ("mlx5_0" -> ["mlx5_0"],
    "a,b" -> ["a", "b"], NaN passes as a float, a mapping as a string) and the role reads the value as written
    (validate_argument_spec sets no variable), so a loop walks "mlx5_0" as m, l, x, 5, _, 0."""
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
    spec = {'ports': {'type': 'list', 'elements': 'str'}, 'rate': {'type': 'float'}, 'pw': {'type': 'str'}}
    given_values = {'ports': 'mlx5_0,mlx5_1', 'rate': NAN, 'pw': {'Sup3r': None}}
    result = ArgumentSpecValidator(spec).validate(dict(given_values))
    assert result.error_messages == []
    assert result.validated_parameters['ports'] == ['mlx5_0', 'mlx5_1']
    assert math.isnan(result.validated_parameters['rate'])
    errors = cv.input_type_errors(given_values, spec)
    assert [e.split(' = ')[0] for e in errors] == ['ports', 'pw', 'rate']


# ============================================================ preflights: the type check, no_log, names only

# A variable is a secret when its name says so; each is no_log in meta/argument_specs.yml, the one list.
_SECRET_NAME = re.compile(r'(password|passphrase|secret|token|credential|munge_key|access_key|_key\Z|basic_auth_users'
                          r'|alertmanager_smtp|alertmanager_receivers)')
_NOT_SECRET = re.compile(r'(_url|_checksum|_fingerprints?|_file|_dir|_path|_vault_id)\Z')  # a vault id is a label
_EXPRESSION_KEYS = ('when', 'that', 'failed_when', 'changed_when', 'until')
_MESSAGE_KEYS = ('fail_msg', 'msg', 'success_msg', 'label', 'errors')
_JINJA = re.compile(r'\{\{.*?\}\}|\{%.*?%\}', re.S)


def _all_options():
    out = {}
    for role in ROLES:
        out.update(_options(role))
    return out


SECRETS = sorted(name for name, option in _all_options().items() if option.get('no_log'))


def _expressions(node, key=None):
    """(key, Jinja expression) of a task, outside its name."""
    if isinstance(node, dict):
        for child_key, child in node.items():
            if child_key != 'name':
                yield from _expressions(child, child_key)
    elif isinstance(node, list):
        for child in node:
            yield from _expressions(child, key)
    elif isinstance(node, str):
        if key in _EXPRESSION_KEYS:
            yield key, node
        for match in _JINJA.finditer(node):
            yield key, match.group(0)


def _tasks(items):
    for task in items or []:
        yield task
        for key in ('block', 'rescue', 'always'):
            yield from _tasks(task.get(key))


def _role_file_tasks(role, name):
    """The tasks of the role's tasks file NAME and of the files it includes as parts of the preflight (tagged
    <role>_preflight: a part that only some hosts run, which the others skip as one task)."""
    for task in _tasks(_load('roles', role, 'tasks', name)):
        yield task
        target = task.get('ansible.builtin.include_tasks')
        if isinstance(target, dict) and '%s_preflight' % role in (target.get('apply') or {}).get('tags', []):
            yield from _role_file_tasks(role, target['file'])


def _preflight_tasks():
    for role in ROLES:
        for task in _role_file_tasks(role, 'preflight.yml'):
            yield role, task


@pytest.mark.parametrize('role', ROLES)
def test_secret_variables_are_no_log_in_the_argument_specs(role):
    options = _options(role)
    named = sorted(n for n in options if _SECRET_NAME.search(n) and not _NOT_SECRET.search(n))
    marked = sorted(n for n, o in options.items() if o.get('no_log'))
    assert named == marked


def test_the_secret_list_is_the_expected_one():
    assert SECRETS == [
        'checkpoint_backup_password', 'checkpoint_backup_s3_access_key_id', 'checkpoint_backup_s3_secret_access_key',
        'monitoring_alertmanager_receivers', 'monitoring_alertmanager_smtp', 'monitoring_basic_auth_users',
        'monitoring_grafana_admin_password', 'monitoring_scrape_password', 'monitoring_tls_ca_key',
        'monitoring_tls_ca_key_passphrase', 'slurm_accounting_db_password', 'slurm_munge_key']


def test_every_preflight_task_that_reads_a_secret_is_no_log_and_names_it_only():
    checked = []
    for role, task in _preflight_tasks():
        own = dict((k, v) for k, v in task.items() if k not in ('block', 'rescue', 'always'))
        secrets = set()
        in_messages = set()
        for key, expression in _expressions(own):
            found = set(name for name in SECRETS if re.search(r'\b%s\b' % name, expression))
            if "ansible.builtin.vars'" in expression:
                found.add('(every input, through the vars lookup)')
            secrets |= found
            if key in _MESSAGE_KEYS:
                in_messages |= found
        loops_over_secret = any(re.search(r'\b%s\b' % name, str(own.get('loop', ''))) for name in SECRETS)
        if loops_over_secret:
            for key, expression in _expressions(own):
                if key in _MESSAGE_KEYS and re.search(r'\bitem\b', expression):
                    in_messages.add('item (an entry of a secret)')
        if secrets:
            checked.append('%s: %s' % (role, own.get('name')))
            assert own.get('no_log') is True, '%s: task %r reads %s without no_log' % (role, own.get('name'), sorted(secrets))
        assert not in_messages, '%s: task %r shows %s in a message' % (role, own.get('name'), sorted(in_messages))
    # The type check of every role, and the secret checks of checkpoint_backup, monitoring (basic-auth users with the
    # site CA, Alertmanager's settings) and slurm (the munge key with the values written into its files).
    assert len(checked) == len(ROLES) + 5, checked


@pytest.mark.parametrize('role', ROLES)
def test_the_type_check_runs_first_in_every_preflight(role):
    first = _load('roles', role, 'tasks', 'preflight.yml')[0]
    assert first['name'] == 'Check the type of every input (meta/argument_specs.yml), numbers finite'
    assert first['no_log'] is True
    assert first['gpucluster.core.checks']['errors'] == '{{ __%s_input_errors }}' % role
    assert 'gpucluster.core.input_type_errors(__%s_input_spec)' % role in first['vars']['__%s_input_errors' % role]


# Rendering a task's variables needs the collection's filters, found through Ansible's collection loader;
# installed in this process it would take over the ansible_collections package the other tests imported,
# so the rendering runs in a child process (once per test).
_RENDER = r"""
import json, sys
from ansible.plugins.loader import init_plugin_loader
init_plugin_loader([sys.argv[1]])
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

def trust(value):
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return dict((k, trust(v)) for k, v in value.items())
    if isinstance(value, list):
        return [trust(v) for v in value]
    return value

out = []
for job in json.load(sys.stdin):
    context = dict(job['variables'])
    for key, expression in job['task_vars']:
        context[key] = Templar(loader=DataLoader(), variables=trust(context)).template(trust(expression))
    out.append(Templar(loader=DataLoader(), variables=trust(context)).template(trust(job['message'])))
print(json.dumps(out))
"""


def _message(task):
    """The message a check task fails with: gpucluster.core.checks' errors, or an assert's fail_msg."""
    if 'gpucluster.core.checks' in task:
        return task['gpucluster.core.checks']['errors']
    return task['ansible.builtin.assert']['fail_msg']


def _render_messages(jobs):
    """[(task, variables)] -> the fail_msg each task renders with those variables (its own vars first)."""
    payload = [{'variables': variables, 'task_vars': list((task.get('vars') or {}).items()),
                'message': _message(task)} for task, variables in jobs]
    proc = subprocess.run([sys.executable, '-c', _RENDER, os.path.join(REPO, 'collections')], input=json.dumps(payload),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False,
                          timeout=120, env=dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg')))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _task(role, name):
    found = [t for r, t in _preflight_tasks() if r == role and t.get('name') == name]
    assert len(found) == 1, (role, name)
    return found[0]


def test_the_type_check_task_renders_names_only():
    task = _task('checkpoint_backup', 'Check the type of every input (meta/argument_specs.yml), numbers finite')
    variables = dict(_load('roles', 'checkpoint_backup', 'defaults', 'main.yml'),
                     role_path=os.path.join(REPO, 'roles', 'checkpoint_backup'), inventory_hostname='node1',
                     checkpoint_backup_password={'Sup3r-S3cret': None}, checkpoint_backup_keep_last=NAN,
                     checkpoint_backup_sftp_known_hosts='node2 ssh-ed25519 AAAA')
    assert _render_messages([(task, variables)]) == [[
        'checkpoint_backup_keep_last = NaN is not accepted: %s; accepted: a whole number.' % NOT_FINITE,
        'checkpoint_backup_password is not accepted (value not shown): it is a mapping, not a string' + YAML_HINT
        + '; accepted: a string.',
        'checkpoint_backup_sftp_known_hosts = "node2 ssh-ed25519 AAAA" is not accepted: %s; %s'
        % (_STRING_NOT_LIST, _LIST_ACCEPTED)]]


_CHECKPOINT_SECRET_CASES = [
    ('', {}, ['checkpoint_backup_password must be set (from Vault at a site; checkpoint_backup_password is the '
              'repository password).']),
    ('good-Pass', {}, []),
    ('Sup3r\nS3cret', {}, ['checkpoint_backup_password is not accepted in the root-only secret files (value not shown): '
                           'it contains a line break (\\n); accepted: text on one line (no line break or other control '
                           'character).']),
    ('good-Pass', {'checkpoint_backup_repository_type': 's3', 'checkpoint_backup_s3_access_key_id': ['Sup3rKey'],
                   'checkpoint_backup_s3_secret_access_key': ''},
     ['checkpoint_backup_s3_secret_access_key must be set (from Vault at a site; checkpoint_backup_password is the '
      'repository password).',
      'checkpoint_backup_s3_access_key_id is not accepted in the root-only secret files (value not shown): it is a '
      'list, not a string' + YAML_HINT + '; accepted: text on one line (no line break or other control character).']),
]


def test_checkpoint_secret_check_renders_names_only():
    task = _task('checkpoint_backup', 'Check the repository password and the S3 keys (values never shown)')
    assert task['no_log'] is True
    jobs = []
    for password, s3, _expected in _CHECKPOINT_SECRET_CASES:
        variables = dict(_load('roles', 'checkpoint_backup', 'defaults', 'main.yml'), checkpoint_backup_password=password)
        variables.update(s3)
        jobs.append((task, variables))
    rendered = _render_messages(jobs)
    assert rendered == [case[2] for case in _CHECKPOINT_SECRET_CASES]
    assert 'Sup3r' not in json.dumps(rendered)


def test_monitoring_basic_auth_and_smtp_checks_render_names_only():
    variables = dict(_load('roles', 'monitoring', 'defaults', 'main.yml'),
                     monitoring_basic_auth_users={'alice': 'ok-pass', 'bob': ['Sup3rList'], 'Sup3r S3cret': 'x', 'carol': ''},
                     monitoring_alertmanager_smtp={'smarthost': 'mail:25', 'auth_password': {'Sup3r-S3cret': None},
                                                   'Sup3rKey': None})
    users = _task('monitoring', 'Check the basic-auth users (each needs a password) and the site CA (both files, or '
                                'neither; secrets never shown)')
    assert users['no_log'] is True
    smtp = _task('monitoring', 'Check the Alertmanager SMTP settings (values never shown)')
    good = dict(variables, monitoring_basic_auth_users={'alice': 'ok-pass'}, monitoring_tls_ca_key='/nonexistent/Sup3r.key',
                __monitoring_pki_dir='/controller/pki')
    messages, errors, ca_only = _render_messages([(users, variables), (smtp, variables), (users, good)])
    assert len(messages) == 1 and ' 3 entries are not such a pair (names and passwords not shown)' in messages[0]
    message = messages[0]
    assert len(ca_only) == 1 and ca_only[0].startswith('monitoring_tls_ca_cert and monitoring_tls_ca_key are both needed')
    assert "got cert='' (exists: False), monitoring_tls_ca_key set: True (exists: False; its path is not shown)." in ca_only[0]
    assert 'Sup3r' not in ca_only[0]
    assert errors == [
        'monitoring_alertmanager_smtp has 1 keys that are not setting names such as auth_password (letters and "_"; '
        'keys not shown)',
        'monitoring_alertmanager_smtp.auth_password is not accepted in alertmanager.yml (value not shown): it is a '
        'mapping, not a string' + YAML_HINT + '; accepted: text on one line (no line break or other control character).']
    assert 'Sup3r' not in message + json.dumps(errors) and 'bob' not in message


@pytest.mark.parametrize('rate, ports, expected', [
    (0, [], []),
    ('400', ['mlx5_0', 'mlx5_1/2'], []),
    (NAN, [], ['health_check_rdma_expected_rate_gbps=nan; accepted: a number of Gb/s greater than 0 (finite)']),
    (INF, [], ['health_check_rdma_expected_rate_gbps=inf; accepted: a number of Gb/s greater than 0 (finite)']),
    ('1e999', [], ["health_check_rdma_expected_rate_gbps='1e999'; accepted: a number of Gb/s greater than 0 (finite)"]),
    (-5, 'mlx5_0', ['health_check_rdma_expected_rate_gbps=-5; accepted: a number of Gb/s greater than 0 (finite)',
                    "health_check_rdma_ignore_ports='mlx5_0' is a str; accepted: a list of HCA names (mlx5_0) or "
                    'HCA/port (mlx5_0/1), such as ["mlx5_0"]']),
])
def test_rdma_option_errors(rate, ports, expected):
    assert rdma_filter.rdma_option_errors({'expected_rate_gbps': rate, 'ignore_ports': ports}) == expected


# ============================================================ RDMA options on the node

@pytest.mark.parametrize('rate, ports, message', [
    (NAN, None, 'expected_rate_gbps=nan; accepted: a number of Gb/s greater than 0 (finite)'),
    (INF, None, 'expected_rate_gbps=inf; accepted: a number of Gb/s greater than 0 (finite)'),
    (-INF, None, 'expected_rate_gbps=-inf; accepted: a number of Gb/s greater than 0 (finite)'),
    (None, 'mlx5_0', "ignore_ports='mlx5_0' is a str; accepted: a list of HCA names (mlx5_0) or HCA/port (mlx5_0/1), "
                     'such as ["mlx5_0"]'),
    (None, {'mlx5_0': 1}, "ignore_ports={'mlx5_0': 1} is a dict; accepted: a list of HCA names (mlx5_0) or HCA/port "
                          '(mlx5_0/1), such as ["mlx5_0"]'),
    (None, ['x' * 20000000], "ignore_ports item '" + 'x' * 76 + "...; accepted: an HCA name (mlx5_0) or HCA/port (mlx5_0/1)"),
    (None, ['mlx5_0/²'], "ignore_ports item 'mlx5_0/²'; accepted: an HCA name (mlx5_0) or HCA/port (mlx5_0/1)"),
])
def test_rdma_options_refused_on_the_node(rate, ports, message):
    with pytest.raises(rdma_sysfs.RdmaOptionError) as info:
        rdma_sysfs.normalize_options(rate, ports)
    assert str(info.value) == message


def test_rdma_facts_module_takes_a_string_as_one_item_as_every_module_list_option(run_module, tmp_path):
    root = _tree(tmp_path, state='1: DOWN', phys='3: Disabled')
    how, result = run_module(rdma_facts.main, {'sysfs_root': root, 'ignore_ports': 'mlx5_0', 'fail_on': 'critical'})
    assert how == 'exit' and result['ansible_facts']['rdma']['ignore_ports'] == ['mlx5_0']
    assert result['ansible_facts']['rdma']['health']['status'] == 'ok'
    how, result = run_module(rdma_facts.main, {'sysfs_root': root, 'expected_rate_gbps': 'nan'})
    assert how == 'fail' and result['msg'] == 'expected_rate_gbps=nan; accepted: a number of Gb/s greater than 0 (finite)'


def test_rdma_prometheus_never_writes_a_rate_that_is_not_finite():
    facts = {'expected_rate_gbps': NAN, 'health': {'status': 'ok', 'issues': []},
             'hcas': [{'name': 'mlx5_0', 'ports': [{'port': 1, 'state': 'ACTIVE', 'rate_gbps': INF}]}]}
    text = rdma_health.render_prometheus(rdma_health.prometheus_samples(facts))
    values = [line.rsplit(' ', 1)[1] for line in text.splitlines() if not line.startswith('#')]
    assert values == ['0', '1', '1', '1']
    assert 'gpucluster_rdma_port_up{hca="mlx5_0",port="1",link_layer=""} 1' in text


# ============================================================ 3. RDMA sysfs: junk names and files that are not files

def _write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'wb' if isinstance(data, bytes) else 'w') as handle:
        handle.write(data)


def _tree(tmp_path, hca='mlx5_0', port='1', state='4: ACTIVE', phys='5: LinkUp', rate='400 Gb/sec (4X NDR)', gid='0'):
    """One InfiniBand HCA without a PCI link (a soft device: no ACS check), healthy unless told otherwise."""
    root = str(tmp_path / 'sys')
    hca_dir = os.path.join(root, 'class', 'infiniband', hca)
    for name, text in (('fw_ver', '28.41.1000'), ('board_id', 'MT_0000000838'), ('node_guid', '946d:ae03:00cd:e72c')):
        _write(os.path.join(hca_dir, name), text + '\n')
    port_dir = os.path.join(hca_dir, 'ports', port)
    for name, text in (('link_layer', 'InfiniBand'), ('state', state), ('phys_state', phys), ('rate', rate),
                       ('lid', '0x5'), ('sm_lid', '0x1'), ('lid_mask_count', '0'), ('cap_mask', '0x2651e848')):
        if text is not None:
            _write(os.path.join(port_dir, name), text + '\n')
    _write(os.path.join(port_dir, 'gids', gid), 'fe80:0000:0000:0000:946d:ae03:00cd:e72c\n')
    _write(os.path.join(port_dir, 'gid_attrs', 'types', gid), 'IB/RoCE v1\n')
    return root


def _verdict(root, **options):
    facts = rdma_sysfs.build_facts(rdma_sysfs.collect(root), **options)
    json.dumps(facts, allow_nan=False)
    rdma_health.render_prometheus(rdma_health.prometheus_samples(facts)).encode('utf-8')
    return facts


def _issues(facts):
    return [(i['hca'], i['port'], i['check'], i['severity'], i['message']) for i in facts['health']['issues']]


def test_a_healthy_tree_is_ok(tmp_path):
    facts = _verdict(_tree(tmp_path), expected_rate_gbps=400)
    assert facts['health']['status'] == 'ok' and _issues(facts) == []
    assert facts['hcas'][0]['ports'][0]['rate_gbps'] == 400


@pytest.mark.parametrize('port', ['²', '٣', '1.bak', 'port1', '9' * 40])
def test_a_ports_entry_that_is_not_a_decimal_number_is_not_a_port(tmp_path, port):
    facts = _verdict(_tree(tmp_path, port=port))
    assert facts['hcas'][0]['ports'] == []
    assert _issues(facts) == [('mlx5_0', None, 'sysfs', 'unknown', 'mlx5_0: no ports readable in sysfs')]


def test_a_junk_entry_beside_a_real_port_is_left_out(tmp_path):
    root = _tree(tmp_path)
    _write(os.path.join(root, 'class', 'infiniband', 'mlx5_0', 'ports', '²', 'state'), '1: DOWN\n')
    facts = _verdict(root)
    assert [p['port'] for p in facts['hcas'][0]['ports']] == [1] and facts['health']['status'] == 'ok'


@pytest.mark.parametrize('gid', ['²', '٣'])
def test_a_gid_entry_that_is_not_a_decimal_number_is_skipped(tmp_path, gid):
    facts = _verdict(_tree(tmp_path, gid=gid))
    assert facts['hcas'][0]['ports'][0]['gids'] == [] and facts['health']['status'] == 'ok'


@pytest.mark.parametrize('hca', ['²', '²mlx5', 'mlx5_²', 'mlx5_' + '9' * 40, 'éth'])
def test_printable_hca_names_of_any_digits_are_read(tmp_path, hca):
    facts = _verdict(_tree(tmp_path, hca=hca))
    assert [h['name'] for h in facts['hcas']] == [hca] and facts['health']['status'] == 'ok'


@pytest.mark.parametrize('hca, shown', [
    ('mlx5\n0', 'mlx5\\n0'),
    ('mlx5\x1b[31m', 'mlx5\\u001b[31m'),
    (os.fsdecode(b'mlx5_\xff'), 'mlx5_\\udcff'),
])
def test_an_hca_name_that_is_not_printable_text_is_reported_not_read(tmp_path, hca, shown):
    facts = _verdict(_tree(tmp_path, hca=hca))
    assert facts['hcas'] == [] and facts['health']['status'] == 'unknown'
    assert _issues(facts) == [(None, None, 'sysfs', 'unknown', '%s has an entry whose name is not printable text ("%s"): '
                               'not read' % (os.path.join(str(tmp_path / 'sys'), 'class', 'infiniband'), shown))]


def _collect_within(root, seconds=10):
    """collect() in a thread; a read that blocks (a FIFO without a writer) would keep it alive."""
    box = {}
    worker = threading.Thread(target=lambda: box.update(facts=rdma_sysfs.build_facts(rdma_sysfs.collect(root))))
    worker.daemon = True
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), 'collect() hung'
    return box['facts']


@pytest.mark.parametrize('name, make, reason', [
    ('state', os.mkfifo, 'not a regular file (a FIFO)'),
    ('rate', lambda p: os.symlink('/dev/zero', p), 'not a regular file (a device)'),
    ('phys_state', os.mkdir, 'not a regular file (a directory)'),
    ('link_layer', lambda p: _write(p, 'x' * 5000), 'larger than 4096 bytes, not a sysfs attribute'),
])
def test_a_port_file_that_is_not_a_small_regular_file_is_unknown_never_a_hang(tmp_path, name, make, reason):
    root = _tree(tmp_path)
    path = os.path.join(root, 'class', 'infiniband', 'mlx5_0', 'ports', '1', name)
    os.remove(path)
    make(path)
    facts = _collect_within(root)
    assert ('mlx5_0', 1, 'sysfs', 'unknown', 'mlx5_0 port 1: cannot read %s: %s' % (name, reason)) in _issues(facts)
    assert facts['health']['status'] == 'unknown'


def test_a_fifo_as_an_hca_attribute_and_as_pci_config_does_not_hang(tmp_path):
    root = _tree(tmp_path)
    path = os.path.join(root, 'class', 'infiniband', 'mlx5_0', 'fw_ver')
    os.remove(path)
    os.mkfifo(path)
    assert rdma_sysfs.read_bytes(path) == (None, 'not a regular file (a FIFO)')
    facts = _collect_within(root)
    assert _issues(facts) == [('mlx5_0', None, 'sysfs', 'unknown', 'mlx5_0: cannot read fw_ver: not a regular file (a FIFO)')]


@pytest.mark.parametrize('rate', [
    '9' * 4000 + ' Gb/sec (4X NDR)',
    'NaN Gb/sec (4X HDR)',
    'inf Gb/sec (4X HDR)',
    '1e999 Gb/sec (4X)',
    '٤٠٠ Gb/sec (4X NDR)',
    '400 Gb/sec (9999X NDR)',
    '4.5.6 Gb/sec (4X)',
    '',
])
def test_a_garbage_rate_is_unknown_not_a_crash(tmp_path, rate):
    facts = _verdict(_tree(tmp_path, rate=rate), expected_rate_gbps=400)
    port = facts['hcas'][0]['ports'][0]
    assert port['rate_gbps'] is None and port['width'] is None
    assert _issues(facts) == [('mlx5_0', 1, 'sysfs', 'unknown', "mlx5_0 port 1: unrecognised rate '%s'"
                               % rdma_sysfs.quote(rate))]
    assert len(_issues(facts)[0][4]) < 140


@pytest.mark.parametrize('state, phys, message', [
    ('٤: ACTIVE', '5: LinkUp', 'mlx5_0 port 1 (InfiniBand) is \\u0664: ACTIVE: physical state LinkUp'),
    ('1: DOWN\n\x1b[31m', '3: Disabled', 'mlx5_0 port 1 (InfiniBand) is DOWN\\n\\u001b[31m: physical state Disabled'),
    ('9' * 5000 + ': ACTIVE', '5: LinkUp', None),
])
def test_state_words_that_are_not_the_kernels_are_not_active(tmp_path, state, phys, message):
    facts = _verdict(_tree(tmp_path, state=state, phys=phys))
    port_state = [i for i in _issues(facts) if i[2] in ('port_state', 'sysfs')]
    assert facts['health']['status'] in ('critical', 'unknown')
    if message:
        assert port_state == [('mlx5_0', 1, 'port_state', 'critical', message)]
        assert '\n' not in message
    else:  # longer than a sysfs attribute: not read at all
        assert port_state == [('mlx5_0', 1, 'sysfs', 'unknown',
                               'mlx5_0 port 1: cannot read state: larger than 4096 bytes, not a sysfs attribute')]


@pytest.mark.parametrize('text, expected', [
    ('0x1f', 31), ('31', 31), ('²', None), ('٣', None), ('0x' + 'f' * 40, None), ('9' * 4000, None), (' 7\n', 7),
    ('', None), (None, None), (7, None),
])
def test_parse_hex_int_is_ascii_and_bounded(text, expected):
    assert rdma_sysfs.parse_hex_int(text) == expected


def test_junk_netdev_names_and_dev_ports_are_left_out(tmp_path):
    root = _tree(tmp_path)
    pci = os.path.join(str(tmp_path), 'pci', '0000:18:00.0')
    for name, dev_port in (('ibp24s0', '0'), ('bad\nname', '0'), ('ib²', '²')):
        _write(os.path.join(pci, 'net', name, 'dev_port'), dev_port + '\n')
    os.symlink(pci, os.path.join(root, 'class', 'infiniband', 'mlx5_0', 'device'))
    facts = _verdict(root)
    assert facts['hcas'][0]['netdevs'] == ['ibp24s0', 'ib²']
    # dev_port "²" is unknown: on a one-port HCA the interface belongs to that port.
    assert facts['hcas'][0]['ports'][0]['netdevs'] == ['ibp24s0', 'ib²']


# ============================================================ end to end: the preflight refuses before any change

_ERROR_PREFIX = '[ERROR]: Task failed: Action failed: '
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), 'ansible-playbook')

E2E_CASES = [
    ('checkpoint-password-braces', {'role_under_test': 'checkpoint_backup',
                                    'checkpoint_backup_password': {'Sup3r-S3cret': None}},
     ['checkpoint_backup_password is not accepted (value not shown): it is a mapping, not a string' + YAML_HINT
      + '; accepted: a string.'], 'Sup3r'),
    ('health-check-rdma-nan-and-string', {'role_under_test': 'health_check', 'health_check_rdma_expected_rate_gbps': NAN,
                                          'health_check_rdma_ignore_ports': 'mlx5_0'},
     ['health_check_rdma_expected_rate_gbps = NaN is not accepted: %s; accepted: a finite number.' % NOT_FINITE,
      'health_check_rdma_ignore_ports = "mlx5_0" is not accepted: %s; %s' % (_STRING_NOT_LIST, _LIST_ACCEPTED)], None),
    ('slurm-munge-key-list', {'role_under_test': 'slurm', 'slurm_munge_key': ['Sup3rMungeKey' * 4]},
     ['slurm_munge_key is not accepted (value not shown): it is a list, not a string' + YAML_HINT
      + '; accepted: a string.'], 'Sup3rMungeKey'),
]


@pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason='ansible-playbook not beside this python')
@pytest.mark.parametrize('case_id, extra_vars, expected, secret', E2E_CASES, ids=[c[0] for c in E2E_CASES])
def test_role_preflight_refuses_types_first(tmp_path, case_id, extra_vars, expected, secret):
    rc, out = _run_preflight(tmp_path, extra_vars)
    assert rc == 2, out
    tasks = [line for line in out.splitlines() if line.startswith('TASK [')]
    assert 'Check the type of every input' in tasks[-1], out
    assert 'changed=0' in out and 'failed=1' in out, out
    error = [line for line in out.splitlines() if line.startswith(_ERROR_PREFIX)]
    assert len(error) == 1, out
    assert ast.literal_eval(error[0][len(_ERROR_PREFIX):]) == expected
    if secret:
        assert secret not in out


# ============================================================ 4. properties (hypothesis)

MARK = 'ZQXSECRET'
SECRET_TEXT = st.text(max_size=12).map(lambda t: MARK + t)
SECRET_LEAF = st.one_of(SECRET_TEXT, st.integers(), st.floats(), st.booleans(), st.none(), st.binary(max_size=4))
SECRET_SHAPES = st.recursive(SECRET_LEAF, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.one_of(SECRET_TEXT, st.integers(), st.floats()), inner, max_size=3)),
    max_leaves=8)


@FUZZ
@given(value=SECRET_SHAPES, kind=st.sampled_from(sorted(cv.KINDS)))
def test_config_value_errors_never_echo_a_secret(value, kind):
    for message in cv.config_value_errors({'the_password': value}, kind, 'a file', secret=True):
        assert MARK not in message and message.startswith('the_password')


@FUZZ
@given(value=SECRET_SHAPES, kind=st.sampled_from(['str', 'path', 'int', 'float', 'bool', 'list', 'dict', 'raw']),
       elements=st.sampled_from([None, 'str', 'int', 'dict', 'list']))
def test_input_type_errors_never_echo_a_no_log_input(value, kind, elements):
    option = {'type': kind, 'no_log': True, 'default': ''}
    if kind == 'list' and elements:
        option['elements'] = elements
    for message in cv.input_type_errors({'the_secret': value}, {'the_secret': option}):
        assert MARK not in message and '(value not shown)' in message and message.startswith('the_secret')


NON_FINITE = st.sampled_from([NAN, INF, -INF, float('-nan')])
NON_FINITE_TEXT = st.sampled_from(['nan', 'NaN', '-nan', 'inf', '-inf', 'Infinity', '+Infinity', '.inf', '-.inf', '.nan',
                                   '1e999', '-1e999', '1E400', '9' * 30 + 'e300'])


@FUZZ
@given(value=st.one_of(NON_FINITE, NON_FINITE_TEXT), integer=st.booleans())
def test_every_non_finite_number_is_refused(value, integer):
    number, problem = cv.number_problem(value, integer)
    assert number is None and problem
    assert cv.input_type_errors({'x': value}, {'x': {'type': 'int' if integer else 'float'}}) != []
    assert cv.number_errors({'x': value}, minimum=-1e308, maximum=1e308, integer=integer) != []
    assert cv.input_type_errors({'x': {'deep': [value]}}, {'x': {'type': 'dict'}}) != [] or isinstance(value, str)


@FUZZ
@given(value=st.floats(allow_nan=False, allow_infinity=False))
def test_every_finite_float_is_a_number(value):
    assert cv.number_problem(value) == (value, None)
    assert cv.number_problem(repr(value)) == (float(repr(value)), None)


# Names a directory entry can have (no "/" or NUL, at most 255 bytes), contents of any bytes.
NAMES = st.one_of(st.text(min_size=1, max_size=12).filter(lambda n: '/' not in n and '\x00' not in n and n not in ('.', '..')),
                  st.sampled_from(['1', '2', '²', '٣', '01', '9' * 8, 'mlx5_0', '0']),
                  st.binary(min_size=1, max_size=12).map(os.fsdecode).filter(
                      lambda n: '/' not in n and '\x00' not in n and n not in ('.', '..')))
FILES = ('fw_ver', 'state', 'phys_state', 'rate', 'link_layer', 'lid', 'gids/0', 'gid_attrs/types/0', 'dev_port')


@settings(max_examples=120, deadline=None, derandomize=True)
@given(hcas=st.lists(st.tuples(NAMES, NAMES, NAMES,
                               st.dictionaries(st.sampled_from(FILES), st.binary(max_size=200), max_size=5)),
                     min_size=1, max_size=3))
def test_rdma_sysfs_never_raises_on_any_names_or_contents(tmp_path_factory, hcas):
    root = str(tmp_path_factory.mktemp('fuzz') / 'sys')
    for hca, port, netdev, files in hcas:
        hca_dir = os.path.join(root, 'class', 'infiniband', hca)
        for relpath, data in files.items():
            if relpath == 'fw_ver':
                path = os.path.join(hca_dir, 'fw_ver')
            elif relpath == 'dev_port':
                path = os.path.join(hca_dir, 'device', 'net', netdev, 'dev_port')
            else:
                path = os.path.join(hca_dir, 'ports', port, relpath)
            try:
                _write(path, data)
            except OSError:  # a name too long for this file system once encoded
                pass
    facts = _verdict(root, expected_rate_gbps=400, ignore_ports=['mlx5_0/1'])
    assert facts['health']['status'] in rdma_sysfs.STATUSES
    for issue in facts['health']['issues']:
        assert '\n' not in issue['message'] and len(issue['message']) < 600


def test_a_filter_error_quotes_a_huge_value_briefly():
    def parse(value):
        raise ValueError('invalid literal: %r' % value)
    with pytest.raises(AnsibleFilterError) as info:
        cv.guarded('some_filter', 'a number')(parse)('x' * 20000000)
    assert str(info.value) == ("some_filter: malformed input (ValueError: invalid literal: '%s...); expected a number"
                               % ('x' * 99))
    errors = rdma_filter.rdma_input_errors({'rdma_fabric': 'infiniband', 'rdma_stack': 'x' * 20000000})
    assert errors[0] == "rdma_stack must be inbox or doca (got '%s...)" % ('x' * 116) and len(errors[0]) < 200
