# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure parsers that turn package databases and version files into the ``gpu_stack`` facts.

No ansible-core imports (only this collection's own module_utils): every function takes text or
plain data and returns plain data, so the parsing is tested with tables of real and written
samples. The module ``stack_facts`` is the I/O shell around :func:`build_stack`.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import fnmatch
import json
import re

from ansible_collections.gpucluster.core.plugins.module_utils import nvidia_packages

# The flat component list of ansible_facts.gpu_stack, in report order.
COMPONENTS = (
    'os', 'kernel', 'nvidia_driver', 'nvidia_driver_loaded', 'nvidia_fabricmanager',
    'cuda_toolkit', 'cudnn', 'nccl', 'nvidia_container_toolkit', 'containerd', 'docker',
    'rdma_core', 'ofed', 'hca_firmware', 'gpu_vbios', 'slurm', 'munge', 'kubelet', 'kubeadm', 'kubectl',
    'dcgm', 'python',
)

# Query formats; dpkg-query and rpm expand the backslash escapes themselves. One line per
# package. db:Status-Abbrev tells installed packages ("ii ", "hi ") from removed ones that
# only kept their config files ("rc ").
DPKG_QUERY_FORMAT = '${db:Status-Abbrev}\\t${Package}\\t${Version}\\n'
# rpm format: epoch stays separate so the displayed version never carries it.
RPM_QUERY_FORMAT = '%{NAME}\\t%{EPOCHNUM}\\t%{VERSION}\\t%{RELEASE}\\n'

# Package names per component, most specific first. The NVIDIA names (driver, Fabric Manager,
# cuDNN, NCCL, CUDA toolkit, DOCA/MLNX_OFED) come from nvidia_packages, the table the install plans
# of the nvidia_driver and cuda_toolkit roles are built from, so what a role installs is what the
# audit reads. The others differ between Debian's own packages, Docker's and SchedMD's
# repositories. The first pattern with an installed match wins; several packages matching one
# pattern resolve to the highest version.
_NVIDIA_RULES = dict(nvidia_packages.package_rules())
PACKAGE_RULES = (
    ('nvidia_driver', _NVIDIA_RULES['nvidia_driver']),
    ('nvidia_fabricmanager', _NVIDIA_RULES['nvidia_fabricmanager']),
    ('cudnn', _NVIDIA_RULES['cudnn']),
    ('nccl', _NVIDIA_RULES['nccl']),
    ('nvidia_container_toolkit', (
        r'nvidia-container-toolkit', r'nvidia-container-toolkit-base',
    )),
    ('containerd', (r'containerd\.io', r'containerd')),
    ('docker', (r'docker-ce', r'docker\.io', r'moby-engine')),
    ('rdma_core', (r'rdma-core',)),
    ('ofed', _NVIDIA_RULES['ofed']),
    ('slurm', (
        r'slurmd', r'slurm-smd-slurmd', r'slurm-slurmd', r'slurmctld', r'slurm-smd-slurmctld',
        r'slurm-smd', r'slurm-wlm', r'slurm-client', r'slurm', r'slurm-ohpc',
    )),
    ('munge', (r'munge', r'munge-ohpc')),
    ('kubelet', (r'kubelet',)),
    ('kubeadm', (r'kubeadm',)),
    ('kubectl', (r'kubectl',)),
    ('dcgm', (
        r'datacenter-gpu-manager-4-core', r'datacenter-gpu-manager',
        r'datacenter-gpu-manager-4-cuda\d+',
    )),
)
_COMPILED_RULES = tuple(
    (component, tuple(re.compile(p + r'\Z') for p in patterns))
    for component, patterns in PACKAGE_RULES
)

# CUDA toolkit packages of NVIDIA's repository: cuda-toolkit-12-4 (deb and rpm).
_CUDA_TOOLKIT_PKG = nvidia_packages.CUDA_TOOLKIT_REGEX
# Debian packs the toolkit as nvidia-cuda-toolkit "11.8.89~11.8.0-5~deb12u1":
# <nvcc version>~<toolkit version>-<revision>.
_DEBIAN_CUDA_PKG = nvidia_packages.CUDA_TOOLKIT_PACKAGES['distro']
_DEBIAN_CUDA_PATH = nvidia_packages.CUDA_DISTRO_PATH

# "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.173.02  Tue Jun 23 ..." (proprietary)
# "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  565.57.01  Release Build ..." (open)
_NVRM_RE = re.compile(
    r'^NVRM version:\s*NVIDIA UNIX\s+(?P<open>Open\s+)?(?:(?P<arch1>\S+)\s+)?Kernel Module'
    r'(?:\s+for\s+(?P<arch2>\S+))?\s+(?P<version>\d+(?:\.\d+)+)\b',
    re.MULTILINE,
)
_VBIOS_RE = re.compile(r'^Video BIOS:\s*(\S+)', re.MULTILINE)
_DEFINE_RE = re.compile(r'^\s*#\s*define\s+(\w+)\s+(\d+)\b', re.MULTILINE)
_CUDA_TXT_RE = re.compile(r'CUDA Version\s+(\d+(?:\.\d+)+)')
_OFED_INFO_RE = re.compile(r'(?:MLNX_OFED_LINUX|OFED-internal|DOCA-OFED)-(\d[\w.\-]*\w)')
_VERSION_SPLIT = re.compile(r'(\d+|[A-Za-z]+)')


def strip_epoch(version):
    """'5:27.3.1-1~debian.12~bookworm' -> '27.3.1-1~debian.12~bookworm'."""
    if version and ':' in version:
        head, tail = version.split(':', 1)
        if head.isdigit():
            return tail
    return version


def version_key(version):
    """A sort key that orders 12.10 after 12.9 and 2.21.5 after 2.3 (rpmvercmp-like)."""
    key = []
    for part in _VERSION_SPLIT.findall(version or ''):
        if part.isdigit():
            key.append((1, int(part), ''))
        else:
            key.append((0, 0, part))
    return tuple(key)


# ---------------------------------------------------------------- version ordering
#
# Package families order versions differently, and the audit must order them the way the node's
# package manager does. Both comparisons are total functions over any text (non-ASCII, control
# characters, surrogates, thousands of digits): a version never raises, and numbers are compared
# as digit strings, never converted with int() (Python refuses ints of more than 4300 digits).

FAMILIES = ('dpkg', 'rpm')


def _is_digit(char):
    return '0' <= char <= '9'


def _is_alpha(char):
    return 'a' <= char <= 'z' or 'A' <= char <= 'Z'


def _cmp_digits(left, right):
    """Compare two runs of ASCII digits by value (leading zeros ignored)."""
    left = left.lstrip('0')
    right = right.lstrip('0')
    if len(left) != len(right):
        return -1 if len(left) < len(right) else 1
    if left == right:
        return 0
    return -1 if left < right else 1


def _split_epoch(version):
    """'2:1.0-1' -> ('2', '1.0-1'); no epoch (or one that is not a number) -> ('', version)."""
    head, sep, tail = version.partition(':')
    if sep and head and all(_is_digit(c) for c in head):
        return head, tail
    return '', version


def _split_release(rest):
    """'1.0-1' -> ('1.0', '1'); the last '-' separates the release (revision); none -> (rest, '')."""
    version, dash, release = rest.rpartition('-')
    if not dash:
        return rest, ''
    return version, release


def _compare_evr(left, right, segment_cmp):
    """Order ``[epoch:]version[-release]``: the epoch by value, then the version, then the release,
    each with the package family's ``segment_cmp``."""
    epoch_l, rest_l = _split_epoch((left or '').strip())
    epoch_r, rest_r = _split_epoch((right or '').strip())
    diff = _cmp_digits(epoch_l, epoch_r)
    if diff:
        return diff
    version_l, release_l = _split_release(rest_l)
    version_r, release_r = _split_release(rest_r)
    return segment_cmp(version_l, version_r) or segment_cmp(release_l, release_r)


def _dpkg_order(char):
    # dpkg's lib/dpkg/version.c: digits 0 (handled apart), letters their code, '~' before
    # everything (even the end of the string), every other character after all letters.
    if not char:
        return 0
    if _is_digit(char):
        return 0
    if _is_alpha(char):
        return ord(char)
    if char == '~':
        return -1
    return ord(char) + 256


def _dpkg_verrevcmp(left, right):
    i = j = 0
    len_l, len_r = len(left), len(right)
    while i < len_l or j < len_r:
        while (i < len_l and not _is_digit(left[i])) or (j < len_r and not _is_digit(right[j])):
            order_l = _dpkg_order(left[i] if i < len_l else '')
            order_r = _dpkg_order(right[j] if j < len_r else '')
            if order_l != order_r:
                return -1 if order_l < order_r else 1
            i += 1
            j += 1
        start_l = i
        while i < len_l and _is_digit(left[i]):
            i += 1
        start_r = j
        while j < len_r and _is_digit(right[j]):
            j += 1
        diff = _cmp_digits(left[start_l:i], right[start_r:j])
        if diff:
            return diff
    return 0


def compare_dpkg(left, right):
    """-1, 0 or 1 as ``dpkg --compare-versions`` orders ``[epoch:]upstream[-revision]``.

    The epoch (a number, default 0) decides first; '~' sorts before anything, even the end of
    the version, so ``2.21.5~rc1`` is older than ``2.21.5``; letters sort before other
    punctuation; digit runs compare by value. Invalid versions are compared the same way
    instead of being refused.
    """
    return _compare_evr(left, right, _dpkg_verrevcmp)


def _rpmvercmp(left, right):
    # rpm's rpmio/rpmvercmp.c (rpm >= 4.15): segments of ASCII digits or letters, anything else
    # separates; '~' sorts before everything, '^' after the end of the version but before any
    # further segment; a numeric segment is newer than an alphabetic one.
    if left == right:
        return 0
    i = j = 0
    len_l, len_r = len(left), len(right)
    while i < len_l or j < len_r:
        while i < len_l and not (_is_digit(left[i]) or _is_alpha(left[i])) and left[i] not in '~^':
            i += 1
        while j < len_r and not (_is_digit(right[j]) or _is_alpha(right[j])) and right[j] not in '~^':
            j += 1
        char_l = left[i] if i < len_l else ''
        char_r = right[j] if j < len_r else ''
        if char_l == '~' or char_r == '~':
            if char_l != '~':
                return 1
            if char_r != '~':
                return -1
            i += 1
            j += 1
            continue
        if char_l == '^' or char_r == '^':
            if not char_l:
                return -1
            if not char_r:
                return 1
            if char_l != '^':
                return 1
            if char_r != '^':
                return -1
            i += 1
            j += 1
            continue
        if not (char_l and char_r):
            break
        start_l, start_r = i, j
        if _is_digit(char_l):
            while i < len_l and _is_digit(left[i]):
                i += 1
            while j < len_r and _is_digit(right[j]):
                j += 1
            numeric = True
        else:
            while i < len_l and _is_alpha(left[i]):
                i += 1
            while j < len_r and _is_alpha(right[j]):
                j += 1
            numeric = False
        if start_r == j:
            # Different segment types: the numeric one is newer.
            return 1 if numeric else -1
        seg_l, seg_r = left[start_l:i], right[start_r:j]
        if numeric:
            diff = _cmp_digits(seg_l, seg_r)
        else:
            diff = 0 if seg_l == seg_r else (-1 if seg_l < seg_r else 1)
        if diff:
            return diff
    if i >= len_l and j >= len_r:
        return 0
    return -1 if i >= len_l else 1


def compare_rpm(left, right):
    """-1, 0 or 1 as rpm orders ``[epoch:]version[-release]`` (epoch, then version, then release,
    each with rpmvercmp: '~' before anything, '^' after the base version)."""
    return _compare_evr(left, right, _rpmvercmp)


def compare_versions(left, right, family='dpkg'):
    """Order two versions by the rules of a package family (``dpkg`` or ``rpm``); any other
    family (``none``, unknown) uses the dpkg rules, which also order plain upstream versions."""
    if family == 'rpm':
        return compare_rpm(left, right)
    return compare_dpkg(left, right)


def clean_text(text):
    """Text safe for facts, JSON and YAML: lone surrogates (from bytes that were not UTF-8 and
    were decoded with surrogateescape: file names, uname) become U+FFFD."""
    if not isinstance(text, str):
        return text
    try:
        text.encode('utf-8')
        return text
    except UnicodeEncodeError:
        pass
    try:
        raw = text.encode('utf-8', 'surrogateescape')
    except UnicodeEncodeError:
        raw = text.encode('utf-8', 'surrogatepass')
    return raw.decode('utf-8', 'replace')


def clean_facts(value):
    """:func:`clean_text` applied to every string, key or value, of nested dicts and lists."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return dict((clean_facts(k), clean_facts(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [clean_facts(v) for v in value]
    return value


def decode_output(data):
    """Bytes of a command's output as text; bytes that are not UTF-8 become U+FFFD."""
    if data is None:
        return ''
    if isinstance(data, bytes):
        return data.decode('utf-8', 'replace')
    return clean_text(data)


def parse_dpkg_query(text):
    """Parse ``dpkg-query -W -f DPKG_QUERY_FORMAT`` output.

    Returns ``(installed, broken)``: installed maps package -> version (epoch kept, the
    display layer strips it; the highest by dpkg's rules where several architectures are
    installed) for packages whose status is installed, triggers-awaited or
    triggers-pending; broken maps package -> status for half-installed, half-configured and
    unpacked packages (a failed upgrade is exactly the drift we look for). Packages that are
    removed ("rc", "un") are ignored. Multi-arch duplicates collapse to one entry.
    """
    installed = {}
    broken = {}
    for line in (text or '').splitlines():
        fields = line.split('\t')
        if len(fields) < 3:
            continue
        status, name, version = fields[0], fields[1].strip(), fields[2].strip()
        if not name or len(status) < 2:
            continue
        name = name.split(':', 1)[0]
        state = status[1]
        if state in 'iWt' and version:
            previous = installed.get(name)
            if previous is None or compare_dpkg(version, previous) > 0:
                installed[name] = version
        elif state in 'HFU':
            broken[name] = status.strip()
    return installed, broken


def parse_rpm_query(text):
    """Parse ``rpm -qa --qf RPM_QUERY_FORMAT`` output into package -> 'epoch:version-release'.

    Several installed versions of one name (kernel-devel, parallel installs) resolve to the
    highest by rpm's rules (epoch first, '~' and '^'); the epoch is kept only when it is not 0.
    """
    installed = {}
    for line in (text or '').splitlines():
        fields = line.split('\t')
        if len(fields) < 4 or not fields[0]:
            continue
        name, epoch, version, release = (f.strip() for f in fields[:4])
        full = '%s-%s' % (version, release) if release and release != '(none)' else version
        if epoch and epoch not in ('0', '(none)'):
            full = '%s:%s' % (epoch, full)
        previous = installed.get(name)
        if previous is None or compare_rpm(full, previous) > 0:
            installed[name] = full
    return installed, {}


def select_package(installed, patterns, family='dpkg'):
    """First pattern with an installed package wins; several packages matching it resolve to
    the highest version by the rules of the package ``family`` (then the name); returns
    (name, version) or (None, None)."""
    for pattern in patterns:
        matches = [name for name in installed if pattern.match(name)]
        if matches:
            best = matches[0]
            for name in matches[1:]:
                order = compare_versions(installed[name], installed[best], family)
                if order > 0 or (order == 0 and name > best):
                    best = name
            return best, installed[best]
    return None, None


def parse_proc_driver_version(text):
    """Parse /proc/driver/nvidia/version.

    Returns ``{'version': '565.57.01', 'flavor': 'open'|'proprietary', 'arch': 'x86_64'}`` or
    None when the text holds no NVRM line (module not loaded, file from something else).
    """
    match = _NVRM_RE.search(text or '')
    if not match:
        return None
    return {
        'version': match.group('version'),
        'flavor': 'open' if match.group('open') else 'proprietary',
        'arch': match.group('arch2') or match.group('arch1'),
    }


def parse_gpu_information(text):
    """The 'Video BIOS:' line of /proc/driver/nvidia/gpus/<bus>/information (None if absent)."""
    match = _VBIOS_RE.search(text or '')
    if not match or match.group(1).lower() in ('??.??.??.??.??', 'n/a'):
        return None
    return match.group(1)


# version.json nests three levels; deeper input is refused before json.loads, which recurses once per
# level (5,000 '[' are a RecursionError).
JSON_MAX_DEPTH = 32
# A version longer than this is not one (the facts carry it into every report).
VERSION_MAX_CHARS = 64


def json_nesting_problem(text, max_depth=JSON_MAX_DEPTH):
    """Why ``text`` nests arrays or objects deeper than ``max_depth`` levels, or None (a linear scan that
    skips string contents; it does not check the rest of the syntax)."""
    depth = 0
    in_string = False
    escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == '\\':
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in '[{':
            depth += 1
            if depth > max_depth:
                return 'it nests deeper than %d levels' % max_depth
        elif char in ']}':
            depth -= 1
    return None


def cuda_version_json(text):
    """(version, problem) from version.json of CUDA >= 11.1: {"cuda": {"name": "CUDA SDK", "version": "12.4.1"}, ...}.

    ``problem`` says why there is no version (None with a version). Never raises: the nesting is bounded
    before the text is parsed, and a version must be text of at most VERSION_MAX_CHARS characters.
    """
    if not isinstance(text, str):
        return None, 'it is not text'
    problem = json_nesting_problem(text)
    if problem:
        return None, problem
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return None, 'it is not JSON (%s)' % (str(exc).split('\n', maxsplit=1)[0][:120],)
    cuda = data.get('cuda') if isinstance(data, dict) else None
    version = cuda.get('version') if isinstance(cuda, dict) else None
    if not version:
        return None, 'it has no cuda.version'
    if not isinstance(version, str) or len(version) > VERSION_MAX_CHARS or not version.strip():
        return None, 'its cuda.version is not a version string'
    return version.strip(), None


def parse_cuda_version_json(text):
    """The version in CUDA's version.json, or None (see :func:`cuda_version_json` for why)."""
    return cuda_version_json(text)[0]


def parse_cuda_version_txt(text):
    """version.txt of CUDA <= 11.0: 'CUDA Version 11.0.228'."""
    match = _CUDA_TXT_RE.search(text or '')
    return match.group(1) if match else None


def _defines(text):
    return dict((name, value) for name, value in _DEFINE_RE.findall(text or ''))


def parse_cudnn_header(text):
    """cudnn_version.h (cuDNN >= 8) or cudnn.h (older): CUDNN_MAJOR/MINOR/PATCHLEVEL."""
    values = _defines(text)
    if 'CUDNN_MAJOR' not in values:
        return None
    return '%s.%s.%s' % (values['CUDNN_MAJOR'], values.get('CUDNN_MINOR', '0'),
                         values.get('CUDNN_PATCHLEVEL', '0'))


def parse_nccl_header(text):
    """nccl.h: NCCL_MAJOR/NCCL_MINOR/NCCL_PATCH."""
    values = _defines(text)
    if 'NCCL_MAJOR' not in values:
        return None
    return '%s.%s.%s' % (values['NCCL_MAJOR'], values.get('NCCL_MINOR', '0'),
                         values.get('NCCL_PATCH', '0'))


def parse_ofed_info(text):
    """The version that the ofed_info script embeds ('MLNX_OFED_LINUX-23.10-1.1.9.0')."""
    match = _OFED_INFO_RE.search(text or '')
    return match.group(1) if match else None


def parse_os_release(text, debian_version=None):
    """'<ID> <version>' from /etc/os-release, e.g. 'debian 12.7', 'ubuntu 22.04.4', 'rhel 9.4'.

    VERSION_ID carries only the major release on Debian; /etc/debian_version has the point
    release. Ubuntu's point release is the first word of VERSION.
    """
    values = {}
    for line in (text or '').splitlines():
        if '=' not in line or line.lstrip().startswith('#'):
            continue
        key, value = line.split('=', 1)
        values[key.strip()] = value.strip().strip('"').strip("'")
    os_id = values.get('ID')
    if not os_id:
        return None
    version = values.get('VERSION_ID', '')
    point = (debian_version or '').strip()
    if os_id == 'debian' and point and (not version or point.startswith(version + '.')):
        version = point
    else:
        first = values.get('VERSION', '').split(' ', 1)[0]
        if version and first.startswith(version + '.'):
            version = first
    return ('%s %s' % (os_id, version)).strip()


def combine(values):
    """One value for several devices: None, the common value, or the sorted distinct values
    joined with ',' (so two HCAs on different firmware show up as drift of their own)."""
    distinct = sorted(set(v for v in values if v))
    if not distinct:
        return None
    return ','.join(distinct)


def _package_version(version):
    return strip_epoch(version) if version else None


def cuda_toolkits(version_files, packages, default_path=None):
    """All installed CUDA toolkits, and the default one.

    ``version_files`` maps a toolkit directory (/usr/local/cuda-12.4) to the text of its
    version.json or version.txt (key 'json' or 'txt'), and to why a file or the directory could
    not be read (key 'problems': file or directory path -> reason; a FIFO, a file too large, a hung
    mount). Packages add toolkits that have no directory of their own (Debian's
    nvidia-cuda-toolkit) or whose directory lacks a version file. ``default_path`` is where
    /usr/local/cuda points. Returns ``(toolkits, default)`` with toolkits a list of {'version',
    'path', 'source'} sorted by version; a directory whose version cannot be known (and that no
    package names) is listed with version None and 'unknown': the reason, and is the default
    when /usr/local/cuda points at it.
    """
    toolkits = []
    unknown = []
    seen_minor = set()
    for path in sorted(version_files):
        files = version_files[path]
        version = None
        source = None
        reasons = ['%s: %s' % (where, why) for where, why in sorted((files.get('problems') or {}).items())]
        if files.get('json') is not None:
            version, problem = cuda_version_json(files['json'])
            source = 'file:%s/version.json' % path
            if problem:
                reasons.append('%s/version.json: %s' % (path, problem))
        if version is None and files.get('txt') is not None:
            version = parse_cuda_version_txt(files['txt'])
            source = 'file:%s/version.txt' % path
        if version:
            toolkits.append({'version': version, 'path': path, 'source': source})
            seen_minor.add('.'.join(version.split('.')[:2]))
        elif reasons:
            unknown.append({'version': None, 'path': path, 'source': None, 'unknown': '; '.join(reasons)})
    for name in sorted(packages):
        match = _CUDA_TOOLKIT_PKG.match(name)
        if match:
            minor = '%s.%s' % match.groups()
            if minor in seen_minor:
                continue
            version = _package_version(packages[name]).split('-', 1)[0]
            toolkits.append({'version': version, 'path': '/usr/local/cuda-%s' % minor,
                             'source': 'package:%s' % name})
            seen_minor.add(minor)
        elif name == _DEBIAN_CUDA_PKG:
            upstream = _package_version(packages[name]).rsplit('-', 1)[0]
            version = upstream.split('~', 1)[1] if '~' in upstream else upstream
            toolkits.append({'version': version, 'path': _DEBIAN_CUDA_PATH,
                             'source': 'package:%s' % name})
    toolkits.sort(key=lambda t: (version_key(t['version']), t['path']))
    known_paths = set(t['path'] for t in toolkits)
    # A package that names the directory gives its version; the others stay unknown, listed first.
    unknown = [t for t in unknown if t['path'] not in known_paths]
    default = None
    if default_path:
        for toolkit in unknown + toolkits:
            if toolkit['path'] == default_path:
                default = toolkit
        if default is not None and default['version'] is None:
            return unknown + toolkits, default
    toolkits = unknown + toolkits
    known = [t for t in toolkits if t['version'] is not None]
    if default is None and len(toolkits) == 1:
        default = toolkits[0]
    if default is None and known:
        # No /usr/local/cuda link: nvcc on PATH comes from the distribution package if
        # there is one, else the newest toolkit is the reasonable guess.
        debian = [t for t in known if t['path'] == _DEBIAN_CUDA_PATH]
        default = debian[0] if debian else known[-1]
    return toolkits, default


def build_stack(inputs):
    """Assemble the facts from raw inputs that the module collected.

    ``inputs`` keys (all optional): ``packages`` (name -> version from the package database),
    ``broken_packages``, ``package_manager``, ``os_release``, ``debian_version``,
    ``kernel``, ``python``, ``proc_driver_version`` (text), ``gpu_information``
    (bus id -> text), ``cuda_version_files`` + ``cuda_default_path`` (see
    :func:`cuda_toolkits`), ``cudnn_headers`` / ``nccl_headers`` (path -> text, in search
    order), ``ofed_info`` (text of the ofed_info script), ``hca_fw`` (device -> fw_ver text).

    Returns ``(stack, toolkits, details)``: the flat component -> version mapping (every
    component present, None when absent), the list of installed CUDA toolkits, and details
    (per-component source and raw value, per-device values, kernel module flavour).
    """
    packages = inputs.get('packages') or {}
    stack = dict((c, None) for c in COMPONENTS)
    sources = {}
    raw = {}

    def put(component, value, source, raw_value=None):
        if value:
            stack[component] = value
            sources[component] = source
            if raw_value and raw_value != value:
                raw[component] = raw_value

    family = inputs.get('package_manager')
    for component, patterns in _COMPILED_RULES:
        name, version = select_package(packages, patterns, family)
        if name:
            put(component, _package_version(version), 'package:%s' % name, version)

    put('os', parse_os_release(inputs.get('os_release'), inputs.get('debian_version')),
        'file:/etc/os-release')
    put('kernel', inputs.get('kernel'), 'uname')
    put('python', inputs.get('python'), 'interpreter')

    loaded = parse_proc_driver_version(inputs.get('proc_driver_version'))
    if loaded:
        put('nvidia_driver_loaded', loaded['version'], 'file:/proc/driver/nvidia/version')

    toolkits, default = cuda_toolkits(inputs.get('cuda_version_files') or {}, packages,
                                      inputs.get('cuda_default_path'))
    unknown = {}
    if default and default['version']:
        put('cuda_toolkit', default['version'], default['source'])
    elif default:
        unknown['cuda_toolkit'] = default['unknown']

    for component, key, parser in (('cudnn', 'cudnn_headers', parse_cudnn_header),
                                   ('nccl', 'nccl_headers', parse_nccl_header)):
        if stack[component]:
            continue
        headers = inputs.get(key) or {}
        for path in headers:
            value = parser(headers[path])
            if value:
                put(component, value, 'file:%s' % path)
                break

    if not stack['ofed'] and inputs.get('ofed_info'):
        put('ofed', parse_ofed_info(inputs['ofed_info']), 'file:ofed_info')

    hca_fw = dict((dev, (text or '').strip()) for dev, text in (inputs.get('hca_fw') or {}).items())
    hca_fw = dict((dev, fw) for dev, fw in hca_fw.items() if fw)
    put('hca_firmware', combine(hca_fw.values()), 'file:/sys/class/infiniband/*/fw_ver')

    vbios = {}
    for bus, text in (inputs.get('gpu_information') or {}).items():
        value = parse_gpu_information(text)
        if value:
            vbios[bus] = value
    put('gpu_vbios', combine(vbios.values()), 'file:/proc/driver/nvidia/gpus/*/information')

    unreadable = dict(inputs.get('unreadable') or {})
    for component, reason in unknown_components(stack, unreadable, inputs.get('component_files') or {}).items():
        unknown.setdefault(component, reason)

    details = {
        'package_manager': inputs.get('package_manager'),
        'sources': sources,
        'raw': raw,
        'broken_packages': dict(inputs.get('broken_packages') or {}),
        'nvidia_kernel_module': loaded['flavor'] if loaded else None,
        'gpus': vbios,
        'hcas': hca_fw,
        'unknown': unknown,
        'unreadable': unreadable,
    }
    return stack, toolkits, details


def unknown_components(stack, unreadable, component_files):
    """Components without a version whose source could not be read: component -> reason.

    ``unreadable`` maps a path to why it was not read (a FIFO, too large, a hung mount);
    ``component_files`` maps a component to the path patterns (shell globs) it is read from. A
    component found elsewhere (a package) keeps its version; one absent everywhere whose file could
    not be read is unknown, never "absent".
    """
    found = {}
    for component in sorted(component_files):
        if stack.get(component):
            continue
        reasons = ['%s: %s' % (path, unreadable[path]) for path in sorted(unreadable)
                   if any(fnmatch.fnmatchcase(path, pattern) for pattern in component_files[component])]
        if reasons:
            found[component] = '; '.join(reasons)
    return found
