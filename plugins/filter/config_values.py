# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Check role variables whose values the roles write into configuration files.

One call per role preflight returns every offending variable as a readable message, before
anything on a host changes. A value that carries a line break (or any other control character)
would add lines of its own to slurm.conf, cgroup.conf, plugstack.conf, a repository file or a
systemd unit; a ``#`` starts a comment in most of those files, and white space ends a value in
slurm.conf and plugstack.conf. Secrets are checked the same way, but their value never appears
in a message.

Usage in a preflight::

    {{ {'slurm_select_type_parameters': slurm_select_type_parameters}
       | gpucluster.core.config_value_errors('slurm', 'slurm.conf') }}
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import math
import re

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - only without ansible-core installed
    class AnsibleFilterError(Exception):
        pass

from collections.abc import Mapping


# C0 and C1 control characters (line feed, carriage return, tab, escape, NUL ...), DEL, and the
# Unicode line and paragraph separators, which some readers take as line breaks.
_CONTROL = re.compile('[\x00-\x1f\x7f-\x9f\u2028\u2029]')
_SPACE = re.compile(r'\s', re.UNICODE)
_SLURM_KEY = re.compile(r'[A-Za-z][A-Za-z0-9]*\Z')
_SLURM_NAME = re.compile(r'[A-Za-z0-9][A-Za-z0-9_.+-]*\Z')
_URL = re.compile(r'[A-Za-z][A-Za-z0-9+.-]*://\S+\Z')
_CONTROL_NAMES = {'\n': 'a line break (\\n)', '\r': 'a carriage return (\\r)', '\t': 'a tab (\\t)', '\x00': 'a NUL byte'}
# Deeper nesting than this is not a configuration value (and would be a RecursionError).
_MAX_DEPTH = 16
# The longest rendering of a value a message quotes.
SHOW_LIMIT = 120
# The largest whole number any setting takes (a signed 64-bit integer); beyond it a number is a typo.
INT_LIMIT = 2 ** 63 - 1
_DIGITS = re.compile(r'\s*[+-]?[0-9]{1,30}\s*\Z')
_DECIMAL = re.compile(r'\s*[+-]?([0-9]{1,30}(\.[0-9]{0,30})?|\.[0-9]{1,30})([eE][+-]?[0-9]{1,4})?\s*\Z')
NOT_FINITE = 'it is not a finite number (NaN, Infinity or beyond 1.8e308 are never settings)'

# kind -> (characters refused besides control characters, what is accepted)
_WORD_CHARS = '#"\'\\'
KINDS = {
    'line': ('', 'text on one line (no line break or other control character)'),
    'word': (_WORD_CHARS, "one word: no white space, quotes, backslash, '#' or control character"),
    'slurm': (_WORD_CHARS, "one word: Slurm ends a value at white space, reads '#' as the start of a comment and "
                           "drops backslashes; no quotes or control characters"),
    'slurm_name': ('', 'a name of letters, digits, "_", ".", "+" or "-" (Slurm joins these with ",")'),
    'url': (_WORD_CHARS, "a URL such as https://host/path: no white space, quotes, backslash, '#' or control character"),
    'path': (_WORD_CHARS, "an absolute path without white space, quotes, backslash, '#' or control character"),
    'version': (_WORD_CHARS, 'a version written as a quoted string, such as "12.4"'),
    'versions': (_WORD_CHARS, 'a list of versions, each a quoted string, such as ["12.4", "12.10"]'),
}


def _fail(msg):
    raise AnsibleFilterError(msg)


def guarded(name, expected):
    """Turn a malformed input's KeyError/TypeError/ValueError/... into an AnsibleFilterError that names
    the filter and what it expects (AnsibleFilterErrors raised on purpose pass unchanged)."""
    def wrap(func):
        def run(*args, **kwargs):
            try:
                return func(*args, **kwargs)
            except AnsibleFilterError:
                raise
            except (KeyError, IndexError, TypeError, ValueError, AttributeError, RecursionError) as exc:
                raise AnsibleFilterError('%s: malformed input (%s: %s); expected %s'
                                         % (name, type(exc).__name__, _clip(str(exc)), expected))
        run.__name__ = func.__name__
        run.__doc__ = func.__doc__
        return run
    return wrap


def _clip(text, limit=SHOW_LIMIT):
    """``text`` cut to ``limit`` characters (with "...") so that no message copies a huge value."""
    return text if len(text) <= limit else text[:limit - 3] + '...'


def _show(value):
    """A short, escaped rendering of a value: control characters become visible, at most SHOW_LIMIT characters.

    Never call it on a secret. A value too large or too deep to render cheaply is shown by its type.
    """
    if isinstance(value, str) and len(value) > SHOW_LIMIT:
        value = value[:SHOW_LIMIT]  # json.dumps of a 20 MB string would copy it whole first
    if isinstance(value, (Mapping, list, tuple, set)) and _too_big(value):
        return '<a %s too large to show>' % _kind(value)
    try:
        text = json.dumps(value, ensure_ascii=True, sort_keys=True, default=repr)
    except (TypeError, ValueError, RecursionError):
        try:
            text = repr(value)
        except RecursionError:  # pragma: no cover - a self-containing custom object
            text = '<%s>' % type(value).__name__
    return _clip(text)


show = _show


def _too_big(value, budget=200):
    """True when rendering ``value`` would visit more than ``budget`` items or big strings (alias bombs)."""
    stack = [value]
    while stack:
        item = stack.pop()
        budget -= 1
        if budget < 0:
            return True
        if isinstance(item, str):
            if len(item) > SHOW_LIMIT:
                return True
        elif isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set)):
            stack.extend(item)
    return False


def _char_problem(text, refused, what):
    match = _CONTROL.search(text)
    if match:
        char = match.group(0)
        return 'it contains %s' % _CONTROL_NAMES.get(char, 'the control character U+%04X' % ord(char))
    if not refused:
        return None
    if _SPACE.search(text):
        return 'it contains white space'
    for char in refused:
        if char in text:
            if char == '#':
                return "it contains '#', which starts a comment in %s" % (what or 'the file')
            return 'it contains %s' % ("a backslash" if char == '\\' else "a quote (%s)" % char)
    return None


def _kind(value):
    """What a value is, in the words a message uses (never the value itself)."""
    if value is None:
        return 'null'
    if isinstance(value, bool):
        return 'boolean'
    if isinstance(value, int):
        return 'whole number'
    if isinstance(value, float):
        return 'number'
    if isinstance(value, str):
        return 'string'
    if isinstance(value, Mapping):
        return 'mapping'
    if isinstance(value, (list, tuple, set)):
        return 'list'
    return type(value).__name__


_YAML_HINT = ' (YAML reads an unquoted {...} as a mapping and [...] as a list: quote the value)'


def secret_type_problem(value):
    """Why a secret is not a string, naming only the type (no part of the value, keys included); None when it is."""
    if isinstance(value, str):
        return None
    if value is None:
        return 'it is empty (null), not a string'
    return 'it is a %s, not a string%s' % (_kind(value), _YAML_HINT if isinstance(value, (Mapping, list, tuple, set)) else
                                           ' (quote it: YAML reads 0777 as 511 and yes as true)')


def number_problem(value, integer=False):
    """``(number, None)`` for a finite number a setting can take, else ``(None, why)``.

    Accepted: an int (not a boolean) or a finite float (with ``integer``, one without a fractional part),
    and a string of decimal digits (what ``-e name=8`` gives; with ``integer`` digits only) that reads as
    such a number. Refused: NaN, Infinity, 1e999 (whatever their spelling: YAML ``.nan``/``.inf``, JSON
    ``NaN``, a string), booleans, containers, and whole numbers beyond INT_LIMIT.
    """
    what = 'a whole number' if integer else 'a number'
    if isinstance(value, bool):
        return None, 'it is a boolean, not %s' % what
    if isinstance(value, str):
        text = value
        if not (_DIGITS if integer else _DECIMAL).match(text):
            if text.strip().lower().lstrip('+-') in ('nan', 'inf', 'infinity', '.nan', '.inf'):
                return None, NOT_FINITE
            return None, 'it is a string that is not %s written in digits' % what
        value = int(text) if integer else float(text)
    if isinstance(value, int):
        if abs(value) > INT_LIMIT:
            return None, 'it is beyond 2^63, larger than any setting takes'
        return value, None
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return None, NOT_FINITE
        if abs(value) > INT_LIMIT and integer:
            return None, 'it is beyond 2^63, larger than any setting takes'
        if integer:
            if not value.is_integer():
                return None, 'it has a fractional part, not %s' % what
            return int(value), None
        return value, None
    return None, 'it is a %s, not %s' % (_kind(value), what)


def _scalar_text(value):
    """Text a template writes for a scalar, or None when the value is not a scalar."""
    if isinstance(value, bool):
        return 'true' if value else 'false'
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return None
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):  # AnsibleUnsafeText and other templated strings are str subclasses
        return value
    return None


class _Checker(object):
    def __init__(self, kind, what, secret):
        if kind not in KINDS:
            _fail('config_value_errors: kind %r is not one of %s' % (kind, ', '.join(sorted(KINDS))))
        self.kind = kind
        self.what = what or ''
        self.secret = bool(secret)
        self.refused, self.accepted = KINDS[kind]
        self.errors = []

    def _add(self, name, value, problem):
        where = (' in %s' % self.what) if self.what else ''
        if self.secret:
            self.errors.append('%s is not accepted%s (value not shown): %s; accepted: %s.'
                               % (name, where, problem, self.accepted))
        else:
            self.errors.append('%s = %s is not accepted%s: %s; accepted: %s.'
                               % (name, _show(value), where, problem, self.accepted))

    def _text(self, name, value, nested):
        """Check one scalar; return its text or None after recording an error."""
        if value is None:
            self._add(name, value, 'it is empty (null)')
            return None
        text = _scalar_text(value)
        if text is None:
            if isinstance(value, float):
                self._add(name, value, NOT_FINITE)
            else:
                self._add(name, value, 'it is a %s, not a single value' % _kind(value))
            return None
        problem = _char_problem(text, self.refused, self.what)
        if problem is None and nested and text == '' and self.kind != 'line':
            problem = 'it is empty'
        if problem is None and text:
            if self.kind == 'path' and not text.startswith('/'):
                problem = 'it is not an absolute path'
            elif self.kind == 'url' and not _URL.match(text):
                problem = 'it is not a URL (scheme://...)'
            elif self.kind == 'slurm_name' and not _SLURM_NAME.match(text):
                problem = 'it has characters other than letters, digits, "_", ".", "+" or "-"'
        if problem:
            self._add(name, value, problem)
            return None
        return text

    def _version(self, name, value, quoted):
        if isinstance(value, bool):
            self._add(name, value, 'it is a boolean, not a version string')
            return
        if isinstance(value, (int, float)):
            self._add(name, value, 'it is the number %s, not a string (YAML reads an unquoted 12.10 as 12.1 '
                                   'and 12.0 as 12); quote it: %s' % (_show(value), quoted))
            return
        if not isinstance(value, str):
            self._add(name, value, 'it is a %s, not a string' % type(value).__name__)
            return
        self._text(name, value, True)

    def check(self, name, value, depth=0, nested=False):
        if self.secret and depth == 0:
            # A secret is one string: a mapping, list or number would be written as its Python form (or
            # differ from what was typed), and its keys or items would be parts of the secret.
            problem = secret_type_problem(value)
            if problem:
                self._add(name, None, problem)
                return
        if depth > _MAX_DEPTH:
            self._add(name, '...', 'it is nested more than %d levels deep' % _MAX_DEPTH)
            return
        if self.kind == 'versions' and depth == 0:
            if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
                self._add(name, value, 'it is not a list')
                return
            quoted = '%s: [%s]' % (name, ', '.join('"%s"' % (_scalar_text(v) if _scalar_text(v) is not None else '...')
                                                   for v in value))
            for index, item in enumerate(value):
                self._version('%s[%d]' % (name, index), item, quoted)
            return
        if self.kind == 'version':
            self._version(name, value, '%s: "%s"' % (name, _scalar_text(value)))
            return
        if isinstance(value, Mapping):
            for key in sorted(value, key=str):
                key_name = '%s.%s' % (name, key)
                if self.kind == 'slurm':
                    if not isinstance(key, str) or not _SLURM_KEY.match(key):
                        self._add(name, key, 'the key %s is not a Slurm option name (letters and digits, '
                                             'starting with a letter)' % _show(key))
                        continue
                elif _scalar_text(key) is None or _char_problem(_scalar_text(key), self.refused, self.what):
                    self._add(name, key, 'the key %s has characters the file cannot hold' % _show(key))
                    continue
                self.check(key_name, value[key], depth + 1, True)
            return
        if isinstance(value, (list, tuple, set)):
            for index, item in enumerate(value):
                self.check('%s[%d]' % (name, index), item, depth + 1, True)
            return
        self._text(name, value, nested)


def config_value_errors(values, kind='line', what='', secret=False):
    """Messages for every variable of ``values`` ({name: value}) that ``kind`` refuses ([] when fine).

    kind: line (one line of text), word (one word), slurm (a slurm.conf/cgroup.conf value; dict
    keys must be Slurm option names), slurm_name (a Slurm feature/name), url, path (absolute),
    version (a quoted string), versions (a list of quoted strings). Lists and dicts are checked
    element by element, keys included. what: the file, named in the message. secret: never show
    the value.
    """
    if not isinstance(values, Mapping):
        _fail('config_value_errors: expects a dict of {variable name: value}, got %s' % type(values).__name__)
    checker = _Checker(kind, what, secret)
    for name in sorted(values, key=str):
        checker.check(str(name), values[name])
    return checker.errors


# argument_specs type -> (what is accepted, in a message)
_ACCEPTED = {
    'str': 'a string',
    'path': 'a path (a string)',
    'int': 'a whole number',
    'float': 'a finite number',
    'bool': 'true or false (a YAML boolean, unquoted)',
    'list': 'a list, such as ["a", "b"] (one item: ["a"])',
    'dict': 'a mapping, such as {key: value}',
}


def _type_problem(value, kind, default):
    """Why ``value`` is not of argument_specs type ``kind`` (None when it is, or when the type is not checked)."""
    if value is None:
        # Unset: Ansible's own check skips it, and a role reads null as "not set" where the default is null.
        if kind in ('list', 'dict', 'bool') and default is not None:
            return 'it is empty (null), not %s' % _ACCEPTED[kind].split(',')[0].split(' (')[0]
        return None
    if kind in ('str', 'path'):
        if isinstance(value, (Mapping, list, tuple, set)):
            return 'it is a %s, not a string%s' % (_kind(value), _YAML_HINT)
        return None
    if kind in ('int', 'float'):
        return number_problem(value, integer=kind == 'int')[1]
    if kind == 'bool':
        if isinstance(value, bool):
            return None
        if isinstance(value, str):
            return 'it is a string, not a boolean (a quoted "false" is true in a condition): write true or false unquoted'
        return 'it is a %s, not a boolean' % _kind(value)
    if kind == 'list':
        if isinstance(value, list):
            return None
        if isinstance(value, str):
            # Ansible's argument check splits a string at commas, but the role reads the value as written
            # and a loop over a string walks its characters ("mlx5_0" -> m, l, x, ...).
            return 'it is a string, not a list (a string is never split into items: write ["..."] for one item)'
        return 'it is a %s, not a list' % _kind(value)
    if kind == 'dict':
        if isinstance(value, Mapping):
            return None
        return 'it is a %s, not a mapping' % _kind(value)
    return None


class _InputChecker(object):
    """Strict types (meta/argument_specs.yml) and finite numbers at every depth of the role inputs."""

    def __init__(self):
        self.errors = []

    def add(self, name, value, problem, accepted, secret):
        if secret:
            self.errors.append('%s is not accepted (value not shown): %s; accepted: %s.' % (name, problem, accepted))
        else:
            self.errors.append('%s = %s is not accepted: %s; accepted: %s.' % (name, _show(value), problem, accepted))

    def deep(self, name, value, secret):
        """Refuse a non-finite number anywhere in ``value`` (the first one found is named), and nesting
        deeper than _MAX_DEPTH. Containers shared through YAML aliases are walked once."""
        seen = set()
        stack = [(name, value, 0)]
        while stack:
            path, item, depth = stack.pop()
            if isinstance(item, float) and (math.isnan(item) or math.isinf(item)):
                self.add(path if not secret else name, item, 'it holds a number that is not finite' if secret else NOT_FINITE,
                         'finite numbers', secret)
                return
            if not isinstance(item, (Mapping, list, tuple, set)):
                continue
            if id(item) in seen:
                continue
            seen.add(id(item))
            if depth >= _MAX_DEPTH:
                self.add(name, value, 'it is nested more than %d levels deep' % _MAX_DEPTH,
                         'at most %d levels of lists and mappings' % _MAX_DEPTH, secret)
                return
            if isinstance(item, Mapping):
                children = [('%s.%s' % (path, _clip(str(key), 40)), item[key]) for key in item]
                children.extend(('%s (a key)' % path, key) for key in item if isinstance(key, float))
            else:
                children = [('%s[%d]' % (path, index), child) for index, child in enumerate(item)]
            stack.extend((child_path, child, depth + 1) for child_path, child in reversed(children))

    def check(self, name, value, option):
        kind = option.get('type') or 'str'
        secret = bool(option.get('no_log'))
        accepted = _ACCEPTED.get(kind, '')
        if secret and kind in ('str', 'path'):
            problem = secret_type_problem(value) if value is not None else None
        else:
            problem = _type_problem(value, kind, option.get('default', None))
        if problem:
            self.add(name, value, problem, accepted, secret)
            return
        elements = option.get('elements')
        if kind == 'list' and elements in _ACCEPTED and isinstance(value, list):
            found = False
            for index, item in enumerate(value):
                if item is None:
                    problem = 'it is empty (null)'
                else:
                    problem = (secret_type_problem(item) if secret and elements in ('str', 'path')
                               else _type_problem(item, elements, None))
                if problem:
                    found = True
                    self.add('%s[%d]' % (name, index), item, problem, 'a list of %s' % _plural(elements), secret)
                    if secret:
                        return
            if found:
                return
        choices = option.get('choices')
        if isinstance(choices, (list, tuple)) and value is not None:
            self.choice(name, value, kind, option.get('elements'), list(choices), secret)
        self.deep(name, value, secret)

    def choice(self, name, value, kind, elements, choices, secret):
        """The value (each item of a list) one of ``choices``, compared as Ansible's argument check compares
        them after converting to the option's type (a str option's 12 is "12"); a boolean matches only a
        boolean choice, never 1 or 0."""
        shown = ', '.join(_show(c) if not isinstance(c, str) else c for c in choices)
        if kind == 'list' and isinstance(value, list):
            for index, item in enumerate(value):
                if not _among(item, elements, choices):
                    self.add('%s[%d]' % (name, index), item, 'it is not one of the choices',
                             'any of %s (a list of them)' % shown, secret)
            return
        if not _among(value, kind, choices):
            self.add(name, value, 'it is not one of the choices', 'one of %s' % shown, secret)


def _among(value, kind, choices):
    if kind in ('str', 'path') and not isinstance(value, bool):
        value = str(value)
    if isinstance(value, bool):
        return any(isinstance(c, bool) and c is value for c in choices)
    return any(not isinstance(c, bool) and c == value for c in choices)


def _plural(kind):
    return {'str': 'strings', 'path': 'paths', 'int': 'whole numbers', 'float': 'finite numbers',
            'bool': 'booleans', 'list': 'lists', 'dict': 'mappings'}[kind]


def input_type_errors(values, options):
    """Messages for every role input of ``values`` ({name: value}) that its argument spec refuses ([] when fine).

    ``options`` is ``argument_specs.main.options`` of the role's meta/argument_specs.yml, the one place
    each input's type is written. Ansible's own argument check converts a copy and hands the role the
    value as written: a string passes as a list (split at commas) but a loop walks its characters, a
    mapping passes as a string, NaN and Infinity pass as numbers, "yes" passes as a boolean. This check is
    strict where that matters:

    - list: a list (a string is refused, never split); its ``elements`` (str, int, float, bool, dict, list)
      checked item by item;
    - dict: a mapping; bool: a boolean; int: a whole number (or a string of digits, as ``-e name=8``
      gives); float: a finite number; str and path: not a mapping or a list;
    - ``choices``: the value one of them (a list: each item), compared after the type's conversion as
      Ansible compares them (a str option's 12 is "12"), a boolean only with a boolean choice;
    - every number at any depth is finite (NaN, Infinity, 1e999 are refused), nesting at most 16 deep;
    - an option with ``no_log: true`` (a secret) must be a string where its type is str, and its
      message names it and the accepted type only, never any part of the value (keys included).

    null is accepted where Ansible skips it (an unset option), except for a list, dict or bool whose
    default is not null. Options not in ``values`` are not checked.
    """
    if not isinstance(values, Mapping):
        _fail('input_type_errors: expects a dict of {variable name: value}, got %s' % type(values).__name__)
    if not isinstance(options, Mapping):
        _fail('input_type_errors: expects the options of meta/argument_specs.yml, got %s' % type(options).__name__)
    checker = _InputChecker()
    for name in sorted(values, key=str):
        option = options.get(name)
        if not isinstance(option, Mapping):
            continue
        checker.check(str(name), values[name], option)
    return checker.errors


def number_errors(values, minimum=None, maximum=None, integer=False):
    """Messages for every ``{name: value}`` that is not a finite number from ``minimum`` to ``maximum``
    ([] when fine); with ``integer``, a whole number. See :func:`number_problem` for what is a number."""
    if not isinstance(values, Mapping):
        _fail('number_errors: expects a dict of {variable name: value}, got %s' % type(values).__name__)
    errors = []
    what = 'a whole number' if integer else 'a finite number'
    if minimum is not None and maximum is not None:
        accepted = '%s from %s to %s' % (what, minimum, maximum)
    elif minimum is not None:
        accepted = '%s of at least %s' % (what, minimum)
    elif maximum is not None:
        accepted = '%s of at most %s' % (what, maximum)
    else:
        accepted = what
    for name in sorted(values, key=str):
        value = values[name]
        number, problem = number_problem(value, integer)
        if problem is None and minimum is not None and number < minimum:
            problem = 'it is less than %s' % minimum
        if problem is None and maximum is not None and number > maximum:
            problem = 'it is more than %s' % maximum
        if problem:
            errors.append('%s = %s is not accepted: %s; accepted: %s.' % (name, _show(value), problem, accepted))
    return errors


class FilterModule(object):
    def filters(self):
        return {
            'config_value_errors': config_value_errors,
            'input_type_errors': input_type_errors,
            'number_errors': number_errors,
        }
