# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure helpers of the container_runtime role: merge the NVIDIA runtime, and the CRI settings a
Kubernetes node needs (systemd cgroups, registry mirrors through hosts.toml, the pause image, the CNI
plugins' directory, the CRI plugin enabled), into configuration that a user owns (containerd's
config.toml and its imports, Docker's daemon.json) without losing a key of theirs; check containerd's
merged configuration for them; and name the pinned NVIDIA Container Toolkit packages. This role is the
one writer of containerd's configuration: the Kubernetes roles only read it."""
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
from ansible_collections.gpucluster.core.plugins.module_utils.json_object import load_object
from ansible_collections.gpucluster.core.plugins.module_utils.nested import deep_merge, get_path
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
_DISABLED_LINE = re.compile(r'''^\s*(disabled_plugins|"disabled_plugins"|'disabled_plugins')\s*=''')
_REGISTRY = re.compile(r'^(_default|[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*(:[0-9]{1,5})?)\Z')
_MIRROR = re.compile(r'^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~/-]*)?\Z')
# The registry a name stands for when it is not the host itself (Docker Hub's registry API host).
_REGISTRY_SERVERS = {'docker.io': 'https://registry-1.docker.io'}
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


_IMAGES_PLUGIN = 'io.containerd.cri.v1.images'
# Every name the CRI plugin goes by in disabled_plugins (containerd 1.x short and long IDs, 2.x's parts).
_CRI_NAMES = ('cri', 'io.containerd.grpc.v1.cri', 'io.containerd.cri.v1.runtime', 'io.containerd.cri.v1.images')


def containerd_dropin(main_text, imported_paths, contents, default_config, containerd_version, dropin_path,
                      runtime_name='nvidia', binary_path='/usr/bin/nvidia-container-runtime', set_default=False,
                      nvidia=True, systemd_cgroup=None, registry_config_path='', sandbox_image='', cni_bin_dir=''):
    """TOML text of gpucluster's drop-in for containerd's CRI plugin: the NVIDIA runtime, and what a
    Kubernetes node needs of the CRI plugin.

    main_text: the (already imports-merged) config.toml; imported_paths: the files its imports
    load, in containerd's order, this drop-in included (files after it must not set the CRI plugin
    on 1.x); contents: path -> text of those files but this drop-in; default_config: `containerd config
    default`; containerd_version: `containerd --version`.
    nvidia: declare the NVIDIA runtime (set_default: as the CRI's default runtime); systemd_cgroup: None
    leaves the runc runtimes' SystemdCgroup as it is, True/False sets it on every runc-type runtime (the
    NVIDIA runtime wraps runc and follows); registry_config_path: the hosts.toml directory (certs.d);
    sandbox_image: the pause image; cni_bin_dir: the directory of the CNI plugins ('' leaves each as is).
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
            raise AnsibleFilterError('containerd_dropin: no content given for imported file %s' % path)
        doc = _loads(contents[path], path)
        if major < 2 and ours is not None and get_path(doc, ['plugins', plugin]) is not None:
            raise AnsibleFilterError(
                '%s is imported after %s and sets plugins."%s": containerd %s would drop gpucluster\'s CRI '
                'settings (imports replace whole plugin sections). Rename it to sort before %s or move '
                'its settings into config.toml.' % (path, dropin_path, plugin, major, dropin_path))
        merged = deep_merge(merged, doc)
    defaults = _loads(default_config, 'containerd config default')
    # containerd 2.x reads a version 2 file too (Debian's packages of 2.x ship one): its defaults keep the
    # runtimes under the version 3 plugin name, so both names are looked at.
    default_containerd = (get_path(defaults, ['plugins', plugin, 'containerd', 'runtimes']) is not None
                          and get_path(defaults, ['plugins', plugin, 'containerd'])
                          or get_path(defaults, ['plugins', _CRI_PLUGIN[5 - version], 'containerd']) or {})
    user_plugin = get_path(merged, ['plugins', plugin]) or {}
    user_containerd = user_plugin.get('containerd', {})
    runtimes = copy.deepcopy(user_containerd.get('runtimes') or default_containerd.get('runtimes') or {})
    default_name = (user_containerd.get('default_runtime_name') or default_containerd.get('default_runtime_name')
                    or 'runc')
    if systemd_cgroup is not None:
        for entry in runtimes.values():
            if isinstance(entry, dict) and entry.get('runtime_type') == 'io.containerd.runc.v2':
                entry.setdefault('options', {})['SystemdCgroup'] = bool(systemd_cgroup)
    if nvidia:
        base_name = default_name if default_name != runtime_name else 'runc'
        base = copy.deepcopy(runtimes.get(base_name, {}))
        # The NVIDIA runtime wraps runc: same settings (SystemdCgroup ...) as the default runtime.
        entry = deep_merge(base, runtimes.get(runtime_name, {}))
        entry = deep_merge(entry, {'runtime_type': 'io.containerd.runc.v2', 'options': {'BinaryName': binary_path}})
        if systemd_cgroup is not None:
            entry['options']['SystemdCgroup'] = bool(systemd_cgroup)
        runtimes[runtime_name] = entry
    # The image settings of containerd 2.x live in a plugin of their own (config version 3).
    images = {}
    if major < 2:
        section = copy.deepcopy(user_plugin)
    else:
        section = {}
    if nvidia or systemd_cgroup is not None:
        section.setdefault('containerd', {})
        section['containerd']['runtimes'] = runtimes
    if nvidia and set_default:
        section.setdefault('containerd', {})['default_runtime_name'] = runtime_name
    image_section = section if version == 2 else images
    if registry_config_path:
        user_registry = (user_plugin if version == 2 else (get_path(merged, ['plugins', _IMAGES_PLUGIN]) or {})).get('registry')
        if isinstance(user_registry, dict) and user_registry.get('mirrors'):
            raise AnsibleFilterError(
                "containerd's configuration sets the CRI plugin's registry.mirrors, which containerd refuses together "
                'with registry.config_path: move those mirrors to container_runtime_containerd_registry_mirrors '
                '(hosts.toml files) and remove them from the configuration, or leave '
                'container_runtime_containerd_registry_config_path empty')
        image_section.setdefault('registry', {})['config_path'] = registry_config_path
    if sandbox_image:
        if version == 2:
            section['sandbox_image'] = sandbox_image
        else:
            images.setdefault('pinned_images', {})['sandbox'] = sandbox_image
    if cni_bin_dir:
        # Version 2 knows bin_dir only (containerd 2.x turns it into bin_dirs); version 3 of containerd 2.1 and
        # newer reads bin_dirs.
        default_cni = get_path(defaults, ['plugins', _CRI_PLUGIN[3], 'cni']) or {}
        cni = section.setdefault('cni', {})
        if version == 3 and 'bin_dirs' in default_cni:
            cni['bin_dirs'] = [cni_bin_dir]
            cni.pop('bin_dir', None)
        else:
            cni['bin_dir'] = cni_bin_dir
    plugins = {}
    if section:
        plugins[plugin] = section
    if images:
        plugins[_IMAGES_PLUGIN] = images
    return toml_dumps({'version': version, 'plugins': plugins})


def containerd_nvidia_dropin(main_text, imported_paths, contents, default_config, containerd_version, dropin_path,
                             runtime_name='nvidia', binary_path='/usr/bin/nvidia-container-runtime',
                             set_default=False):
    """containerd_dropin with the NVIDIA runtime only (the form of earlier releases)."""
    return containerd_dropin(main_text, imported_paths, contents, default_config, containerd_version, dropin_path,
                             runtime_name=runtime_name, binary_path=binary_path, set_default=set_default)


def containerd_config_enable_cri(text, what='/etc/containerd/config.toml'):
    """Return text whose top-level disabled_plugins no longer names the CRI plugin (Docker's containerd.io
    packages ship ``disabled_plugins = ["cri"]``); everything else stays as written."""
    text = to_text(text or '')
    doc = _loads(text, what)
    disabled = doc.get('disabled_plugins', [])
    if not isinstance(disabled, list) or not all(isinstance(p, str) for p in disabled):
        raise AnsibleFilterError('%s: disabled_plugins must be a list of plugin names, got %s' % (what, quote(disabled)))
    wanted = [p for p in disabled if p not in _CRI_NAMES]
    if wanted == disabled:
        return text
    lines = text.split('\n')
    top = next((i for i, line in enumerate(lines) if _TABLE_HEADER.match(line)), len(lines))
    found = next((i for i in range(top) if _DISABLED_LINE.match(lines[i])), None)
    if found is None:
        raise AnsibleFilterError('could not find the disabled_plugins line of %s; remove the CRI plugin from it by hand'
                                 % what)
    end = _assignment_end(lines, found)
    lines[found:end + 1] = ['disabled_plugins = [%s]' % ', '.join(_toml_string(p) for p in wanted)]
    result = '\n'.join(lines)
    if _loads(result, what) != dict(doc, disabled_plugins=wanted):
        raise AnsibleFilterError('could not remove the CRI plugin from disabled_plugins of %s without changing '
                                 'anything else; remove it by hand' % what)
    return result


def containerd_hosts_toml(registry, mirrors, what='container_runtime_containerd_registry_mirrors'):
    """hosts.toml of one registry (containerd's certs.d layout): its mirrors in order, then the registry."""
    if not isinstance(registry, str) or not _REGISTRY.match(registry):
        raise AnsibleFilterError('%s: %s is not a registry host (such as docker.io, registry.k8s.io, '
                                 'registry.example.org:5000)' % (what, quote(registry)))
    if not isinstance(mirrors, list) or not mirrors or not all(isinstance(m, str) and _MIRROR.match(m) for m in mirrors):
        raise AnsibleFilterError('%s[%s]: %s is not a list of mirror URLs (https://host[:port][/path])'
                                 % (what, registry, quote(mirrors)))
    doc = {'server': _REGISTRY_SERVERS.get(registry, 'https://' + registry), 'host': {}}
    for mirror in mirrors:
        doc['host'][mirror] = {'capabilities': ['pull', 'resolve']}
    return toml_dumps(doc)


def containerd_registry_mirror_errors(mirrors, config_path='', what='container_runtime_containerd_registry_mirrors'):
    """Messages for registry mirrors that containerd_hosts_toml would refuse ([]: accepted)."""
    if not isinstance(mirrors, dict):
        return ['%s = %s is not accepted: give a mapping {registry host: [mirror URL, ...]}' % (what, quote(mirrors))]
    errors = []
    for registry in sorted(mirrors, key=str):
        try:
            containerd_hosts_toml(registry, mirrors[registry], what)
        except AnsibleFilterError as exc:
            errors.append(str(exc))
    if mirrors and not config_path:
        errors.append('%s needs container_runtime_containerd_registry_config_path (the hosts.toml directory, such as '
                      '/etc/containerd/certs.d)' % what)
    return errors


def containerd_cri_errors(dump_text, runtime_name='', default_runtime='', systemd_cgroup=True,
                          registry_config_path='', sandbox_image='', cni_bin_dir=''):
    """What a Kubernetes node needs of containerd's merged configuration (`containerd config dump`), and
    does not have: the CRI plugin enabled, runc runtimes with SystemdCgroup, the default runtime, the
    runtime named runtime_name, the registry's hosts.toml directory, the pause image, the CNI plugins'
    directory. Returns the problems as messages ([]: none)."""
    doc = _loads(dump_text, 'containerd config dump')
    problems = []
    disabled = [p for p in (doc.get('disabled_plugins') or []) if p in _CRI_NAMES]
    if disabled:
        problems.append('the CRI plugin is disabled (disabled_plugins: %s)' % ', '.join(disabled))
    cri = get_path(doc, ['plugins', _CRI_PLUGIN[3]]) or get_path(doc, ['plugins', _CRI_PLUGIN[2]]) or {}
    images = get_path(doc, ['plugins', _IMAGES_PLUGIN]) or cri
    runtimes = get_path(cri, ['containerd', 'runtimes']) or {}
    default_name = get_path(cri, ['containerd', 'default_runtime_name']) or 'runc'
    if default_runtime and default_name != default_runtime:
        problems.append('the default runtime is %s, not %s' % (quote(default_name), default_runtime))
    if runtime_name and runtime_name not in runtimes:
        problems.append('no runtime named %s (runtimes: %s)' % (runtime_name, ', '.join(sorted(runtimes)) or 'none'))
    if systemd_cgroup is not None:
        for name, entry in sorted(runtimes.items()):
            if isinstance(entry, dict) and entry.get('runtime_type') == 'io.containerd.runc.v2' \
                    and get_path(entry, ['options', 'SystemdCgroup']) is not bool(systemd_cgroup):
                found = get_path(entry, ['options', 'SystemdCgroup'])
                problems.append('runtime %s has SystemdCgroup = %s, not %s' % (
                    name, str(found).lower() if isinstance(found, bool) else quote(found), str(bool(systemd_cgroup)).lower()))
    if registry_config_path and get_path(images, ['registry', 'config_path']) != registry_config_path:
        problems.append('registry.config_path is %s, not %s' % (quote(get_path(images, ['registry', 'config_path'])),
                                                                registry_config_path))
    if sandbox_image:
        found = get_path(images, ['pinned_images', 'sandbox']) or cri.get('sandbox_image')
        if found != sandbox_image:
            problems.append('the sandbox (pause) image is %s, not %s' % (quote(found), sandbox_image))
    if cni_bin_dir:
        cni = cri.get('cni') or {}
        dirs = cni.get('bin_dirs') or ([cni['bin_dir']] if cni.get('bin_dir') else [])
        if cni_bin_dir not in dirs:
            problems.append('the CNI plugins are looked for in %s, not in %s' % (quote(dirs), cni_bin_dir))
    return problems


def containerd_major(version_output):
    match = re.search(r'\sv?(\d+)\.(\d+)\.', ' ' + to_text(version_output or ''))
    if not match:
        raise AnsibleFilterError('cannot read a containerd version from %s' % (quote(version_output),))
    return int(match.group(1))


def containerd_runtimes(dump_text, version_output=None):
    """Runtime names declared for the CRI plugin in a `containerd config dump`."""
    doc = _loads(dump_text, 'containerd config dump')
    for plugin in (_CRI_PLUGIN[3], _CRI_PLUGIN[2]):
        runtimes = get_path(doc, ['plugins', plugin, 'containerd', 'runtimes'])
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
    try:
        data = load_object(text, what)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc))
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
    'containerd_dropin': 'config.toml text, the imported paths, a dict of path to text, `containerd config default`, '
                         '`containerd --version`, the drop-in path, and the container_runtime_containerd_* settings',
    'containerd_config_enable_cri': 'the text of a containerd configuration file',
    'containerd_hosts_toml': 'a registry host and a list of mirror URLs (container_runtime_containerd_registry_mirrors)',
    'containerd_cri_errors': 'the output of `containerd config dump` and the expected settings',
    'containerd_registry_mirror_errors': 'container_runtime_containerd_registry_mirrors (a dict) and the config path',
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
            'containerd_dropin': containerd_dropin,
            'containerd_config_enable_cri': containerd_config_enable_cri,
            'containerd_hosts_toml': containerd_hosts_toml,
            'containerd_cri_errors': containerd_cri_errors,
            'containerd_registry_mirror_errors': containerd_registry_mirror_errors,
            'containerd_runtimes': containerd_runtimes,
            'docker_daemon_merge': docker_daemon_merge,
            'nvidia_toolkit_packages': nvidia_toolkit_packages,
        }
        return dict((name, guarded(name, _EXPECTED[name])(func)) for name, func in funcs.items())
