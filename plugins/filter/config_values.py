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
                                         % (name, type(exc).__name__, exc, expected))
        run.__name__ = func.__name__
        run.__doc__ = func.__doc__
        return run
    return wrap


def _show(value):
    """A short, escaped rendering of a value: control characters become visible."""
    try:
        text = json.dumps(value, ensure_ascii=True, sort_keys=True, default=repr)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    if len(text) > 120:
        text = text[:117] + '...'
    return text


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
            self._add(name, value, 'it is a %s, not a single value' % type(value).__name__)
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


class FilterModule(object):
    def filters(self):
        return {
            'config_value_errors': config_value_errors,
        }
