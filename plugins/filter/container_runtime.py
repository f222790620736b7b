# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure helpers of the container_runtime role: merge the NVIDIA runtime into configuration that
a user owns (containerd's config.toml and its imports, Docker's daemon.json) without losing a
key of theirs, and name the pinned NVIDIA Container Toolkit packages."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import copy
import fnmatch
import json
import math
import re

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.text.converters import to_text
from ansible_collections.gpucluster.core.plugins.filter.config_values import guarded
from ansible_collections.gpucluster.core.plugins.module_utils.text_bounds import quote

try:
    import tomllib
except ImportError:  # pragma: no cover - the controller runs Python >= 3.12
    tomllib = None

# containerd 1.x replaces a whole plugin section when an imported file names it
# (containerd#5837); 2.0 merges plugin sections key by key (containerd#9982).
_CRI_PLUGIN = {2: 'io.containerd.grpc.v1.cri', 3: 'io.containerd.cri.v1.runtime'}
_BARE_KEY = re.compile(r'^[A-Za-z0-9_-]+\Z')
_IMPORTS_LINE = re.compile(r'''^\s*(imports|"imports"|'imports')\s*=''')
_TABLE_HEADER = re.compile(r'^\s*\[')
_VERSION_LINE = re.compile(r'''^\s*(version|"version"|'version')\s*=''')
TOOLKIT_PACKAGES = ('nvidia-container-toolkit', 'nvidia-container-toolkit-base',
                    'libnvidia-container-tools', 'libnvidia-container1')


def _loads(text, what):
    if tomllib is None:  # pragma: no cover
        raise AnsibleFilterError('container_runtime filters need Python 3.11+ (tomllib) on the controller')
    try:
        return tomllib.loads(to_text(text or ''))
    except (tomllib.TOMLDecodeError, TypeError) as exc:
        raise AnsibleFilterError('%s is not valid TOML (%s); it was left untouched: fix it by hand' % (what, exc))


def _config_version(doc, text, what):
    if 'version' not in doc:
        if not to_text(text or '').strip():
            return None
        version = 1
    else:
        version = doc['version']
    if isinstance(version, bool) or not isinstance(version, int) or version not in (2, 3):
        raise AnsibleFilterError(
            '%s has config version %s; accepted: 2 (containerd 1.x) or 3 (containerd 2.x). '
            'Migrate it first with "containerd config migrate".' % (what, quote(version)))
    return version


def containerd_config_info(text, what='/etc/containerd/config.toml'):
    """Version (None for an empty file) and imports of a containerd configuration text."""
    doc = _loads(text, what)
    imports = doc.get('imports', [])
    if not isinstance(imports, list) or not all(isinstance(i, str) for i in imports):
        raise AnsibleFilterError('%s: imports must be a list of paths, got %s' % (what, quote(imports)))
    return {'version': _config_version(doc, text, what), 'imports': imports}


def _toml_string(value):
    out = ['"']
    for char in value:
        code = ord(char)
        if char == '"':
            out.append('\\"')
        elif char == '\\':
            out.append('\\\\')
        elif char == '\n':
            out.append('\\n')
        elif char == '\t':
            out.append('\\t')
        elif char == '\r':
            out.append('\\r')
        elif code < 0x20 or code == 0x7f:
            out.append('\\u%04x' % code)
        else:
            out.append(char)
    out.append('"')
    return ''.join(out)


def _toml_key(key):
    return key if _BARE_KEY.match(key) else _toml_string(key)


def _toml_value(value):
    if isinstance(value, bool):
        return 'true' if value else 'false'
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return 'nan'
        if math.isinf(value):
            return 'inf' if value > 0 else '-inf'
        return repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, dict):
        return '{' + ', '.join('%s = %s' % (_toml_key(k), _toml_value(v)) for k, v in value.items()) + '}'
    if isinstance(value, (list, tuple)):
        return '[' + ', '.join(_toml_value(v) for v in value) + ']'
    if hasattr(value, 'isoformat'):
        return value.isoformat()
    raise AnsibleFilterError('cannot write %s (%s) as TOML' % (quote(value), type(value).__name__))


def _is_table_array(value):
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _dump_table(lines, path, table):
    scalars = [(k, v) for k, v in table.items() if not isinstance(v, dict) and not _is_table_array(v)]
    tables = [(k, v) for k, v in table.items() if isinstance(v, dict)]
    arrays = [(k, v) for k, v in table.items() if _is_table_array(v)]
    if path and (scalars or not (tables or arrays)):
        lines.append('')
        lines.append('[%s]' % '.'.join(_toml_key(p) for p in path))
    for key, value in scalars:
        lines.append('%s = %s' % (_toml_key(key), _toml_value(value)))
    for key, value in tables:
        _dump_table(lines, path + [key], value)
    for key, items in arrays:
        for item in items:
            lines.append('')
            lines.append('[[%s]]' % '.'.join(_toml_key(p) for p in path + [key]))
            sub = []
            _dump_table(sub, path + [key], dict((k, v) for k, v in item.items()))
            # the header of the element itself was written above
            if sub[:2] == ['', '[%s]' % '.'.join(_toml_key(p) for p in path + [key])]:
                sub = sub[2:]
            lines.extend(sub)


def toml_dumps(doc):
    """Write a dict as TOML: tables in order, empty tables kept as headers."""
    lines = []
    _dump_table(lines, [], doc)
    while lines and lines[0] == '':
        lines.pop(0)
    return '\n'.join(lines) + '\n'


def _deep_merge(base, over):
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _assignment_end(lines, start):
    """Index of the last line of the value assigned on lines[start] (arrays may span lines)."""
    depth = 0
    quote = None
    for idx in range(start, len(lines)):
        line = lines[idx]
        pos = line.index('=') + 1 if idx == start else 0
        while pos < len(line):
            char = line[pos]
            if quote:
                if char == '\\' and quote == '"':
                    pos += 1
                elif char == quote:
                    quote = None
            elif char in ('"', "'"):
                quote = char
            elif char == '#':
                break
            elif char == '[':
                depth += 1
            elif char == ']':
                depth -= 1
            pos += 1
        if depth <= 0 and quote is None:
            return idx
    raise AnsibleFilterError('unterminated imports array in containerd configuration')


def containerd_config_imports(text, import_path, version=2, what='/etc/containerd/config.toml'):
    """Return text with import_path in its top-level imports; everything else stays as written."""
    text = to_text(text or '')
    doc = _loads(text, what)
    info = containerd_config_info(text, what)
    if import_path in info['imports']:
        return text
    if info['version'] is None:
        return 'version = %d\nimports = [%s]\n%s' % (int(version), _toml_string(import_path), text)
    wanted = info['imports'] + [import_path]
    new_line = 'imports = [%s]' % ', '.join(_toml_string(i) for i in wanted)
    lines = text.split('\n')
    top = next((i for i, line in enumerate(lines) if _TABLE_HEADER.match(line)), len(lines))
    found = next((i for i in range(top) if _IMPORTS_LINE.match(lines[i])), None)
    if found is not None:
        end = _assignment_end(lines, found)
        lines[found:end + 1] = [new_line]
    else:
        after = next((i for i in range(top) if _VERSION_LINE.match(lines[i])), None)
        lines.insert(0 if after is None else _assignment_end(lines, after) + 1, new_line)
    result = '\n'.join(lines)
    expected = dict(doc, imports=wanted)
    if _loads(result, what) != expected:
        raise AnsibleFilterError('could not add %s to the imports of %s without changing anything else; '
                                 'add it by hand' % (import_path, what))
    return result


def _get(doc, path):
    for key in path:
        if not isinstance(doc, dict) or key not in doc:
            return None
        doc = doc[key]
    return doc


def containerd_nvidia_dropin(main_text, imported_paths, contents, default_config, containerd_version, dropin_path,
                             runtime_name='nvidia', binary_path='/usr/bin/nvidia-container-runtime',
                             set_default=False):
    """TOML text of the drop-in that declares the NVIDIA runtime for containerd's CRI plugin.

    main_text: the (already imports-merged) config.toml; imported_paths: the files its imports
    load, in containerd's order, this drop-in included (files after it must not set the CRI plugin
    on 1.x); contents: path -> text of those files but this drop-in; default_config: `containerd config
    default`; containerd_version: `containerd --version`.
    """
    major = containerd_major(containerd_version)
    info = containerd_config_info(main_text)
    version = info['version'] or (3 if major >= 2 else 2)
    plugin = _CRI_PLUGIN[version]
    merged = _loads(main_text, 'containerd configuration')
    ours = None
    contents = contents or {}
    for path in imported_paths or []:
        if path == dropin_path:
            ours = path
            continue
        if path not in contents:
            raise AnsibleFilterError('containerd_nvidia_dropin: no content given for imported file %s' % path)
        doc = _loads(contents[path], path)
        if major < 2 and ours is not None and _get(doc, ['plugins', plugin]) is not None:
            raise AnsibleFilterError(
                '%s is imported after %s and sets plugins."%s": containerd %s would drop the NVIDIA '
                'runtime (imports replace whole plugin sections). Rename it to sort before %s or move '
                'its settings into config.toml.' % (path, dropin_path, plugin, major, dropin_path))
        merged = _deep_merge(merged, doc)
    defaults = _loads(default_config, 'containerd config default')
    default_plugin = _get(defaults, ['plugins', plugin]) or _get(defaults, ['plugins', _CRI_PLUGIN[5 - version]]) or {}
    user_plugin = _get(merged, ['plugins', plugin]) or {}
    user_containerd = user_plugin.get('containerd', {})
    runtimes = copy.deepcopy(user_containerd.get('runtimes')
                             or _get(default_plugin, ['containerd', 'runtimes']) or {})
    default_name = (user_containerd.get('default_runtime_name')
                    or _get(default_plugin, ['containerd', 'default_runtime_name']) or 'runc')
    base_name = default_name if default_name != runtime_name else 'runc'
    base = copy.deepcopy(runtimes.get(base_name, {}))
    # The NVIDIA runtime wraps runc: same settings (SystemdCgroup ...) as the default runtime.
    nvidia = _deep_merge(base, runtimes.get(runtime_name, {}))
    nvidia = _deep_merge(nvidia, {'runtime_type': 'io.containerd.runc.v2', 'options': {'BinaryName': binary_path}})
    runtimes[runtime_name] = nvidia
    if major < 2:
        section = copy.deepcopy(user_plugin)
    else:
        section = {}
    section.setdefault('containerd', {})
    section['containerd']['runtimes'] = runtimes
    if set_default:
        section['containerd']['default_runtime_name'] = runtime_name
    return toml_dumps({'version': version, 'plugins': {plugin: section}})


def containerd_major(version_output):
    match = re.search(r'\sv?(\d+)\.(\d+)\.', ' ' + to_text(version_output or ''))
    if not match:
        raise AnsibleFilterError('cannot read a containerd version from %s' % (quote(version_output),))
    return int(match.group(1))


def containerd_runtimes(dump_text, version_output=None):
    """Runtime names declared for the CRI plugin in a `containerd config dump`."""
    doc = _loads(dump_text, 'containerd config dump')
    for plugin in (_CRI_PLUGIN[3], _CRI_PLUGIN[2]):
        runtimes = _get(doc, ['plugins', plugin, 'containerd', 'runtimes'])
        if runtimes is not None:
            return sorted(runtimes)
    return []


def containerd_dropin_files(found_paths, imports, exclude=None):
    """Files that containerd loads through imports, in its order (imports order, then lexical)."""
    ordered = []
    for pattern in imports or []:
        for path in sorted(found_paths or []):
            if fnmatch.fnmatchcase(path, pattern) and path not in ordered and path != exclude:
                ordered.append(path)
    return ordered


def docker_daemon_merge(text, runtime_name='nvidia', binary_path='/usr/bin/nvidia-container-runtime',
                        runtime_args=None, set_default=False, what='/etc/docker/daemon.json'):
    """Merge runtimes.<name> (and default-runtime) into daemon.json text; keys of the user survive.

    Returns {'needs_write': bool, 'content': str}; content is the input text itself when nothing changes.
    """
    text = to_text(text or '')
    if text.strip():
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise AnsibleFilterError('%s is not valid JSON (%s); it was left untouched: fix it by hand' % (what, exc))
        if not isinstance(data, dict):
            raise AnsibleFilterError('%s must hold a JSON object, found %s; it was left untouched' % (what, type(data).__name__))
    else:
        data = {}
    wanted = copy.deepcopy(data)
    runtimes = wanted.get('runtimes', {})
    if not isinstance(runtimes, dict):
        raise AnsibleFilterError('%s: "runtimes" must be an object, found %s' % (what, quote(runtimes)))
    entry = dict(runtimes.get(runtime_name) or {})
    entry['path'] = binary_path
    if runtime_args and (isinstance(runtime_args, str) or not isinstance(runtime_args, (list, tuple))
                         or not all(isinstance(a, str) for a in runtime_args)):
        raise AnsibleFilterError('container_runtime_nvidia_runtime_args: %s is not a list of strings' % (quote(runtime_args),))
    if runtime_args:
        entry['runtimeArgs'] = list(runtime_args)
    else:
        entry.pop('runtimeArgs', None)
    runtimes[runtime_name] = entry
    wanted['runtimes'] = runtimes
    if set_default:
        wanted['default-runtime'] = runtime_name
    elif wanted.get('default-runtime') == runtime_name:
        # only ever set by this role: switching the option off returns Docker to runc
        del wanted['default-runtime']
    if wanted == data and text.strip():
        return {'needs_write': False, 'content': text}
    return {'needs_write': True, 'content': json.dumps(wanted, indent=2) + '\n'}


def nvidia_toolkit_packages(version, revision='1', pkg_mgr='apt'):
    """Package specs of the NVIDIA Container Toolkit at one exact version, as its guide installs them."""
    if not isinstance(version, str) or not re.match(r'^\d+\.\d+\.\d+(~rc\.\d+)?\Z', version):
        raise AnsibleFilterError('NVIDIA Container Toolkit version %s is not an exact version such as 1.18.2' % (quote(version),))
    if isinstance(revision, bool) or not re.match(r'^\d+\Z', to_text(revision if revision is not None else '')):
        raise AnsibleFilterError('package revision %s must be a number such as 1' % (quote(revision),))
    full = '%s-%s' % (version, revision)
    if pkg_mgr == 'apt':
        return ['%s=%s' % (name, full) for name in TOOLKIT_PACKAGES]
    if pkg_mgr in ('dnf', 'dnf5', 'yum'):
        return ['%s-%s' % (name, full) for name in TOOLKIT_PACKAGES]
    raise AnsibleFilterError('package manager %s is not supported (accepted: apt, dnf, dnf5, yum)' % (quote(pkg_mgr),))


_EXPECTED = {
    'containerd_config_info': 'the text of a containerd configuration file',
    'containerd_config_imports': 'the text of config.toml and the drop-in path (container_runtime_containerd_dropin_dir)',
    'containerd_dropin_files': 'a list of found paths and the imports list of config.toml',
    'containerd_major': 'the output of `containerd --version`',
    'containerd_nvidia_dropin': 'config.toml text, the imported paths, a dict of path to text, `containerd config '
                                'default`, `containerd --version`, the drop-in path, container_runtime_nvidia_runtime_name '
                                'and container_runtime_nvidia_runtime_path as strings',
    'containerd_runtimes': 'the output of `containerd config dump`',
    'docker_daemon_merge': 'the text of daemon.json, container_runtime_nvidia_runtime_name, '
                           'container_runtime_nvidia_runtime_path and container_runtime_nvidia_runtime_args (a list)',
    'nvidia_toolkit_packages': 'container_runtime_nvidia_toolkit_version as a string such as "1.18.2" and '
                               'container_runtime_nvidia_toolkit_package_revision such as "1"',
}


class FilterModule(object):
    def filters(self):
        funcs = {
            'containerd_config_info': containerd_config_info,
            'containerd_config_imports': containerd_config_imports,
            'containerd_dropin_files': containerd_dropin_files,
            'containerd_major': containerd_major,
            'containerd_nvidia_dropin': containerd_nvidia_dropin,
            'containerd_runtimes': containerd_runtimes,
            'docker_daemon_merge': docker_daemon_merge,
            'nvidia_toolkit_packages': nvidia_toolkit_packages,
        }
        return dict((name, guarded(name, _EXPECTED[name])(func)) for name, func in funcs.items())
