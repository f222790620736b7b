# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Compiled Jinja templates kept on the controller's disk, shared by ansible-playbook's workers and runs.

Ansible compiles every template and conditional a task uses in the worker process it forks for that task
and host, and the worker exits after the task: Jinja parses the text, generates Python source from it and
compiles that to byte code, every time. A converged rerun of site.yml on three lab nodes compiled about
4,000 templates, 460 of them distinct (docs/performance.md, "Compiled templates kept").

The byte code depends on the template's text, the environment's syntax and code generation settings, the
versions of Python, Jinja and ansible-core, and, for each filter and test the template names, whether that
plugin asks Jinja for the context, the evaluation context or the environment (Jinja decides the call's
arguments when it compiles). The first four make the key of an entry; the last is stored in the entry and
checked against the plugin the worker resolves before the entry is used. Any difference is a miss: the
template is compiled as without the cache.

Trust: an entry is code the controller runs. The cache is used only in a directory owned by the user
running Ansible that nobody else can write, in a parent nobody else can replace it in (check_directory());
an entry carries the SHA-256 of its content, is written to a new file and renamed into place, and one that is truncated, corrupt or of
another format is a miss.

plugins/callback/preload.py installs it (install()) in ansible-playbook's main process before the first
fork; the functions here only need Jinja and ansible-core when install() is called.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import hashlib
import marshal
import os
import re
import stat
import sys
import threading
import time
import types

FORMAT = b'gpucluster.core jinja cache 1\n'
DIGEST_SIZE = 32
# Directories of other versions (another ansible-core, Jinja or Python) unused this long are removed.
STALE_SECONDS = 14 * 24 * 3600
# An entry is a few kilobytes; a directory with more than this many is emptied and filled again.
MAX_ENTRIES = 20000

# Jinja's generated source names each filter and test it uses once, as environment.filters['name'].
_PLUGIN_REFERENCE = re.compile(r"""environment\.(filters|tests)\[(?:'([^'\\]+)'|"([^"\\]+)")\]""")
# The environment settings the parser and the code generator read.
_SYNTAX = ('block_start_string', 'block_end_string', 'variable_start_string', 'variable_end_string',
           'comment_start_string', 'comment_end_string', 'line_statement_prefix', 'line_comment_prefix',
           'trim_blocks', 'lstrip_blocks', 'newline_sequence', 'keep_trailing_newline', 'is_async', 'sandboxed')


def _name(obj):
    if obj is None:
        return None
    kind = obj if isinstance(obj, type) else type(obj)
    return '%s.%s' % (getattr(obj, '__module__', kind.__module__), getattr(obj, '__qualname__', kind.__qualname__))


def pass_arg(func):
    """What Jinja passes first to a filter or test: 'context', 'eval_context', 'environment' or None (read as
    Jinja's _PassArg.from_obj reads it)."""
    value = getattr(func, 'jinja_pass_arg', None)
    return getattr(value, 'name', None) if value is not None else None


def environment_settings(env, escape_backslashes):
    """What, besides the text, decides the code Jinja generates for ``env``: a tuple of plain values, or None
    when the environment is one this cache does not serve (constant folding on: the optimizer may call filters
    while compiling; autoescape chosen per template by a function)."""
    if getattr(env, 'optimized', True) or callable(getattr(env, 'autoescape', None)):
        return None
    return (_name(env), _name(getattr(env, 'code_generator_class', None)), _name(getattr(env, 'finalize', None)),
            pass_arg(getattr(env, 'finalize', None)), bool(env.autoescape), tuple(sorted(getattr(env, 'extensions', {}))),
            tuple(sorted(getattr(env, 'intercepted_binops', ()))), tuple(sorted(getattr(env, 'intercepted_unops', ()))),
            tuple(getattr(env, attr, None) for attr in _SYNTAX), bool(escape_backslashes))


def versions_directory(root, versions):
    """The directory under ``root`` for one set of versions (a tuple of strings)."""
    return os.path.join(root, hashlib.sha256(repr(versions).encode('utf-8')).hexdigest()[:16])


def entry_key(kind, text, name, filename, defer_init, settings):
    """The file name of an entry: 'T' for a template, 'E' for an expression."""
    raw = repr((kind, text, name, filename, bool(defer_init), settings))
    return hashlib.sha256(raw.encode('utf-8', 'backslashreplace')).hexdigest()


def plugin_references(python_source):
    """The (kind, name) pairs of the filters and tests a generated template looks up, in order, once each."""
    seen = []
    for match in _PLUGIN_REFERENCE.finditer(python_source):
        ref = (match.group(1), match.group(2) or match.group(3))
        if ref not in seen:
            seen.append(ref)
    return seen


def check_directory(path, uid=None):
    """None when ``path`` can hold the cache, made (mode 0700) if missing; else why not, in one line.

    The directory itself: a directory (not a link), the user's, writable by nobody else. Its parent: the user's
    or root's, and not writable by everyone unless sticky (/tmp): nobody else can then put another directory in
    its place. A parent its group can write (a user's private group, a umask of 002) is accepted."""
    uid = os.getuid() if uid is None else uid
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError as exc:
        return 'cannot create %s (%s)' % (path, exc)
    parent = os.path.dirname(os.path.abspath(path))
    try:
        info, above = os.lstat(path), os.stat(parent)
    except OSError as exc:
        return 'cannot read %s (%s)' % (path, exc)
    if not stat.S_ISDIR(info.st_mode):
        return '%s is not a directory (a link is not followed)' % path
    if info.st_uid != uid:
        return '%s is owned by uid %d, not by this user (uid %d)' % (path, info.st_uid, uid)
    if info.st_mode & 0o022:
        return '%s can be written by other users (mode %04o)' % (path, stat.S_IMODE(info.st_mode))
    if above.st_uid not in (uid, 0):
        return '%s is owned by uid %d, neither this user (uid %d) nor root' % (parent, above.st_uid, uid)
    if above.st_mode & 0o002 and not above.st_mode & stat.S_ISVTX:
        return '%s can be written by everyone (mode %04o)' % (parent, stat.S_IMODE(above.st_mode))
    return None


def encode(references, code):
    """An entry's bytes: the format line, the SHA-256 of the payload, the payload (marshal)."""
    payload = marshal.dumps((tuple(tuple(ref) for ref in references), code))
    return FORMAT + hashlib.sha256(payload).digest() + payload


def decode(data):
    """(references, code) from an entry's bytes, or None for anything else than a whole entry of this format."""
    head = len(FORMAT) + DIGEST_SIZE
    if len(data) <= head or not data.startswith(FORMAT):
        return None
    payload = data[head:]
    if hashlib.sha256(payload).digest() != data[len(FORMAT):head]:
        return None
    try:
        references, code = marshal.loads(payload)
    except (EOFError, ValueError, TypeError):
        return None
    if not isinstance(code, types.CodeType) or not isinstance(references, tuple):
        return None
    return references, code


def load(directory, key):
    """The decoded entry ``key`` of ``directory``, or None."""
    try:
        with open(os.path.join(directory, key), 'rb') as handle:
            return decode(handle.read())
    except OSError:
        return None


def store(directory, key, references, code):
    """Write entry ``key`` (a new file, mode 0600, renamed into place); False when it could not be written."""
    path = os.path.join(directory, key)
    temporary = '%s.%d.%d.tmp' % (path, os.getpid(), threading.get_ident())
    try:
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, 'O_NOFOLLOW', 0), 0o600)
        with os.fdopen(descriptor, 'wb') as handle:
            handle.write(encode(references, code))
        os.replace(temporary, path)
    except OSError:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        return False
    return True


def prune(root, current, now=None, stale_seconds=STALE_SECONDS, max_entries=MAX_ENTRIES):
    """Remove the directories of other versions under ``root`` unused for ``stale_seconds``, and empty
    ``current`` when it holds more than ``max_entries`` entries. Returns the number of files removed."""
    now = time.time() if now is None else now
    removed = 0
    try:
        names = os.listdir(root)
    except OSError:
        return 0
    for name in names:
        path = os.path.join(root, name)
        if os.path.abspath(path) == os.path.abspath(current) or os.path.islink(path) or not os.path.isdir(path):
            continue
        try:
            if now - os.stat(path).st_mtime < stale_seconds:
                continue
        except OSError:
            continue
        removed += _empty(path, remove_directory=True)
    try:
        if len(os.listdir(current)) > max_entries:
            removed += _empty(current)
    except OSError:
        pass
    return removed


def _empty(directory, remove_directory=False):
    removed = 0
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    for name in names:
        try:
            os.unlink(os.path.join(directory, name))
            removed += 1
        except OSError:
            pass
    if remove_directory:
        try:
            os.rmdir(directory)
        except OSError:
            pass
    return removed


class CompileCache:
    """The cache, once installed on an environment class (install()): wraps its compile() and
    compile_expression(). ``hits``, ``misses`` and ``stored`` count this process's lookups."""

    def __init__(self, directory, escape_backslashes=lambda: False, debugging=lambda env: False):
        self.directory = directory
        self.escape_backslashes = escape_backslashes
        self.debugging = debugging
        self.hits = self.misses = self.stored = 0
        self._pending = threading.local()

    def _key(self, env, kind, text, name=None, filename=None, defer_init=False):
        if self.debugging(env):
            return None
        settings = environment_settings(env, self.escape_backslashes())
        if settings is None:
            return None
        return entry_key(kind, text, name, filename, defer_init, settings)

    def _cached(self, env, key):
        """The code of entry ``key`` when every filter and test it names resolves, in ``env``, to a plugin
        Jinja calls the same way as when it was compiled; else None."""
        entry = load(self.directory, key)
        if entry is None:
            return None
        references, code = entry
        for kind, name, passed in references:
            try:
                func = getattr(env, kind)[name]
            except Exception:  # pylint: disable=broad-exception-caught
                return None  # not found now, or failing: compiled again, Jinja says so as it would
            if pass_arg(func) != passed:
                return None
        return code

    def _compile_and_store(self, env, original, key, source, name, filename, defer_init):
        python_source = original(env, source, name, filename, True, defer_init)
        code = env._compile(python_source, '<template>' if filename is None else filename)  # pylint: disable=protected-access
        references = []
        for kind, plugin in plugin_references(python_source):
            try:
                references.append((kind, plugin, pass_arg(getattr(env, kind)[plugin])))
            except Exception:  # pylint: disable=broad-exception-caught
                return code  # a plugin that does not resolve: the code is right, not kept
        if store(self.directory, key, references, code):
            self.stored += 1
        return code

    def wrap_compile(self, original):
        cache = self

        def compile(self, source, name=None, filename=None, raw=False, defer_init=False):  # pylint: disable=redefined-builtin
            if raw:
                return original(self, source, name, filename, raw, defer_init)
            pending, cache._pending.key = getattr(cache._pending, 'key', None), None
            if isinstance(source, str):
                key = cache._key(self, 'T', str(source), name, filename, defer_init)
            else:
                key = pending  # the tree of an expression compile_expression() parsed (its key made there)
            if key is None:
                return original(self, source, name, filename, raw, defer_init)
            if isinstance(source, str):
                code = cache._cached(self, key)
                if code is not None:
                    cache.hits += 1
                    return code
                cache.misses += 1
            return cache._compile_and_store(self, original, key, source, name, filename, defer_init)
        compile.gpucluster_compile_cache = cache
        return compile

    def wrap_compile_expression(self, original, template_expression):
        cache = self

        def compile_expression(self, source, undefined_to_none=True):
            key = cache._key(self, 'E', str(source)) if isinstance(source, str) else None
            if key is None:
                return original(self, source, undefined_to_none)
            code = cache._cached(self, key)
            if code is not None:
                cache.hits += 1
                template = self.template_class.from_code(self, code, self.make_globals(None), None)
                return template_expression(template, undefined_to_none)
            cache.misses += 1
            cache._pending.key = key
            try:
                return original(self, source, undefined_to_none)
            finally:
                cache._pending.key = None
        compile_expression.gpucluster_compile_cache = cache
        return compile_expression


def install(root):
    """Install the cache under ``root`` on ansible-core's Jinja environment class, in this process and the
    workers it forks. Returns (cache, None), or (None, why not) leaving everything as it was."""
    try:
        import jinja2
        from jinja2.environment import TemplateExpression
        import ansible
        from ansible._internal._templating import _jinja_bits
    except ImportError as exc:
        return None, 'ansible-core or Jinja cannot be imported here (%s)' % exc
    env_class = getattr(_jinja_bits, 'AnsibleEnvironment', None)
    context = getattr(_jinja_bits, '_TemplateCompileContext', None)
    if env_class is None or context is None or not callable(getattr(env_class, '_compile', None)):
        return None, 'this ansible-core (%s) has not the Jinja environment the cache knows' % ansible.__version__
    current = env_class.__dict__.get('compile')
    if getattr(current, 'gpucluster_compile_cache', None) is not None:
        return current.gpucluster_compile_cache, None
    directory = versions_directory(root, (sys.version, jinja2.__version__, ansible.__version__, FORMAT.decode()))
    why = check_directory(root) or check_directory(directory)
    if why:
        return None, why
    # Marked as used: prune() in a run of other versions removes only directories unused for STALE_SECONDS.
    try:
        os.utime(directory)
    except OSError:
        pass
    prune(root, directory)

    def escape_backslashes():
        current_context = context.current(optional=True)
        return bool(current_context and current_context.escape_backslashes)

    def debugging(env):
        return bool(getattr(env, '_debuggable_template_source', False))

    cache = CompileCache(directory, escape_backslashes, debugging)
    env_class.compile = cache.wrap_compile(env_class.compile)
    env_class.compile_expression = cache.wrap_compile_expression(env_class.compile_expression, TemplateExpression)
    return cache, None
