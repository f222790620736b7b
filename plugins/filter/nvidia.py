# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Decision code of the nvidia_driver and cuda_toolkit roles.

Pure functions over strings, lists and dicts: which packages (and which package version
patterns) each driver source installs for an upstream driver version, which kernel module
flavour fits the GPUs found on the PCI bus, whether NVSwitches are present, what the loaded
kernel module reports, and which driver a CUDA toolkit needs.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re

from ansible_collections.gpucluster.core.plugins.module_utils import apt_sources, apt_specs, nvidia_packages
from ansible_collections.gpucluster.core.plugins.module_utils.gpu_probe import nvidia_pci_kind
from ansible_collections.gpucluster.core.plugins.module_utils.stack_versions import parse_proc_driver_version
from ansible_collections.gpucluster.core.plugins.module_utils.text_bounds import quote
from ansible_collections.gpucluster.core.plugins.filter.config_values import guarded

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - only without ansible-core installed
    class AnsibleFilterError(Exception):
        pass


DRIVER_VERSION_RE = re.compile(r'^(?P<branch>[1-9][0-9]{2,3})\.(?P<minor>[0-9]{1,3})(?:\.(?P<patch>[0-9]{1,3}))?\Z')
CUDA_VERSION_RE = re.compile(r'^(?P<major>[0-9]{2})\.(?P<minor>[0-9]{1,2})(?:\.(?P<patch>[0-9]{1,2}))?\Z')

# The first Turing device id is 0x1e02 (TU102); every Maxwell, Pascal and Volta id is below 0x1e00.
# The open kernel modules support Turing and later only.
TURING_FIRST_DEVICE_ID = 0x1e00
# Grace Hopper (GH100 in GH200 is 0x2342) and Blackwell (GB100/GB102 0x29xx, GB20x 0x2bxx-0x2fxx):
# NVIDIA supports only the open kernel modules there.
OPEN_ONLY_FIRST_DEVICE_ID = 0x2900
# Since R560 NVIDIA's installers default to the open modules (on Turing and later GPUs).
OPEN_DEFAULT_BRANCH = 560
# Open kernel modules exist from R515 (production for data center GPUs).
OPEN_FIRST_BRANCH = 515

# CUDA Toolkit release notes, "CUDA Toolkit and Corresponding Driver Versions", Linux x86_64:
# the driver shipped with each toolkit release (full feature set, PTX JIT of its own code).
CUDA_TOOLKIT_DRIVER = {
    '11.0.1': '450.36.06', '11.0.2': '450.51.05', '11.0.3': '450.51.06',
    '11.1.0': '455.23', '11.1.1': '455.32',
    '11.2.0': '460.27.03', '11.2.1': '460.32.03', '11.2.2': '460.32.03',
    '11.3.0': '465.19.01', '11.3.1': '465.19.01',
    '11.4.0': '470.42.01', '11.4.1': '470.57.02', '11.4.2': '470.57.02',
    '11.4.3': '470.82.01', '11.4.4': '470.82.01',
    '11.5.0': '495.29.05', '11.5.1': '495.29.05', '11.5.2': '495.29.05',
    '11.6.0': '510.39.01', '11.6.1': '510.47.03', '11.6.2': '510.47.03',
    '11.7.0': '515.43.04', '11.7.1': '515.48.07',
    '11.8.0': '520.61.05',
    '12.0.0': '525.60.13', '12.0.1': '525.85.12',
    '12.1.0': '530.30.02', '12.1.1': '530.30.02',
    '12.2.0': '535.54.03', '12.2.1': '535.86.09', '12.2.2': '535.104.05',
    '12.3.0': '545.23.06', '12.3.1': '545.23.08', '12.3.2': '545.23.08',
    '12.4.0': '550.54.14', '12.4.1': '550.54.15',
    '12.5.0': '555.42.02', '12.5.1': '555.42.06',
    '12.6.0': '560.28.03', '12.6.1': '560.35.03', '12.6.2': '560.35.03', '12.6.3': '560.35.05',
    '12.8.0': '570.26', '12.8.1': '570.124.06',
    '12.9.0': '575.51.03', '12.9.1': '575.57.08',
    '13.0.0': '580.65.06', '13.0.1': '580.82.07', '13.0.2': '580.95.05',
}
# CUDA Compatibility guide, minor version compatibility: the lowest driver of each major family.
CUDA_MINOR_COMPAT_DRIVER = {'11': '450.80.02', '12': '525.60.13', '13': '580.65.06'}

SOURCES = ('distro', 'cuda_repo', 'runfile')
MODULE_TYPES = ('auto', 'open', 'proprietary')


def _fail(msg):
    raise AnsibleFilterError(msg)


def _vtuple(version):
    return tuple(int(p) for p in str(version).split('.'))


def _version_text(version, name, example):
    """A version must arrive as a string: YAML reads an unquoted 12.10 as the number 12.1."""
    if isinstance(version, bool) or isinstance(version, (int, float)):
        _fail('%s: %s is a number, not a string (YAML reads an unquoted 12.10 as 12.1 and 535.10 as 535.1); '
              'quote it, for example "%s"' % (name, quote(version), example))
    if not isinstance(version, str):
        _fail('%s: %s is not a version string such as "%s"' % (name, quote(version), example))
    return version


def nvidia_driver_version_info(version):
    """Split an upstream driver version such as 535.309.01 into its parts; fail when malformed."""
    _version_text(version, 'nvidia_driver_version', '535.309.01')
    match = DRIVER_VERSION_RE.match(str(version))
    if not match:
        _fail("nvidia_driver_version '%s' is not an upstream driver version: expected "
              "BRANCH.MINOR[.PATCH] such as 535.309.01 or 570.26" % (version,))
    return {
        'version': str(version),
        'branch': int(match.group('branch')),
        'minor': int(match.group('minor')),
        'patch': int(match.group('patch')) if match.group('patch') is not None else None,
    }


def nvidia_upstream_version(package_version):
    """Upstream driver version inside a package version string.

    '535.309.01-0+deb12u1' -> '535.309.01', '3:550.54.15-1.el9' -> '550.54.15',
    '550.163.01-0ubuntu0.24.04.1' -> '550.163.01'; '' when nothing fits.
    """
    text = str(package_version or '')
    if ':' in text:
        text = text.split(':', 1)[1]
    match = re.match(r'^([0-9]+\.[0-9]+(?:\.[0-9]+)?)', text)
    return match.group(1) if match else ''


def nvidia_loaded_version(proc_text):
    """Version of the loaded kernel module from /proc/driver/nvidia/version text ('' when absent).

    The parsing is stack_facts' (one implementation): open and proprietary module lines.
    """
    parsed = parse_proc_driver_version(str(proc_text or ''))
    return parsed['version'] if parsed else ''


def nvidia_loaded_flavour(proc_text):
    """'open', 'proprietary' or '' for the loaded module described by /proc/driver/nvidia/version."""
    parsed = parse_proc_driver_version(str(proc_text or ''))
    return parsed['flavor'] if parsed else ''


def nvidia_pci_devices(probe_text):
    """NVIDIA devices from lines 'ADDRESS VENDOR CLASS DEVICE' (values as sysfs writes them)."""
    devices = []
    for line in str(probe_text or '').splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        # The one rule of which NVIDIA functions are GPUs: the health program's (gpu_probe).
        kind = nvidia_pci_kind(fields[1], fields[2])
        if kind is None:
            continue
        pci_class = fields[2].lower()
        try:
            device_id = int(fields[3], 16)
        except ValueError:
            continue
        devices.append({'address': fields[0], 'class': pci_class, 'device': device_id, 'kind': kind})
    return devices


def nvidia_nvswitch_present(devices):
    return any(d.get('kind') == 'nvswitch' for d in devices or [])


def nvidia_kernel_module_type(requested, version, devices=None, source='', distribution='', loaded=''):
    """Choose the kernel module flavour and say why.

    auto: proprietary when any pre-Turing GPU is present; open when an open-only GPU
    (Grace Hopper / Blackwell) is present; the flavour of the loaded module when one is loaded
    (``loaded``: /proc/driver/nvidia/version's text, or 'open' / 'proprietary', '' when none is loaded;
    a flavour changes only when asked, through the rolling
    upgrade); open from R560 (NVIDIA's installer default); open from R515 where the source ships the
    open modules of every build (NVIDIA's recommendation from Turing on, and what GPUDirect RDMA over
    DMA-BUF needs); proprietary otherwise. An explicit choice that the GPUs or the branch cannot run fails.
    """
    if requested not in MODULE_TYPES:
        _fail("nvidia_driver_kernel_module_type '%s' is not one of %s" % (requested, ', '.join(MODULE_TYPES)))
    branch = nvidia_driver_version_info(version)['branch']
    gpus = [d for d in devices or [] if d.get('kind') == 'gpu']
    pre_turing = [d for d in gpus if d['device'] < TURING_FIRST_DEVICE_ID]
    open_only = [d for d in gpus if d['device'] >= OPEN_ONLY_FIRST_DEVICE_ID or d['device'] in (0x2342, 0x2348)]
    if pre_turing and open_only:
        _fail('GPUs that need the proprietary modules (%s) and GPUs that need the open modules (%s) '
              'are in the same node' % (_ids(pre_turing), _ids(open_only)))
    if requested == 'open':
        if pre_turing:
            _fail("nvidia_driver_kernel_module_type 'open' cannot drive the pre-Turing GPUs %s; "
                  "use 'proprietary' or 'auto'" % _ids(pre_turing))
        if branch < OPEN_FIRST_BRANCH:
            _fail("nvidia_driver_kernel_module_type 'open' needs driver branch >= %d (got %d)" % (OPEN_FIRST_BRANCH, branch))
        return {'type': 'open', 'reason': 'requested'}
    if requested == 'proprietary':
        if open_only:
            _fail("nvidia_driver_kernel_module_type 'proprietary' is not supported by NVIDIA on %s "
                  "(Grace Hopper / Blackwell need the open modules); use 'open' or 'auto'" % _ids(open_only))
        return {'type': 'proprietary', 'reason': 'requested'}
    if pre_turing:
        return {'type': 'proprietary', 'reason': 'pre-Turing GPU present (%s)' % _ids(pre_turing)}
    if open_only:
        if branch < OPEN_FIRST_BRANCH:
            _fail('GPUs %s need the open kernel modules, which driver branch %d does not have' % (_ids(open_only), branch))
        return {'type': 'open', 'reason': 'Grace Hopper / Blackwell GPU present (%s)' % _ids(open_only)}
    if loaded not in ('', 'open', 'proprietary'):
        loaded = nvidia_loaded_flavour(loaded)
    if loaded in ('open', 'proprietary'):
        return {'type': loaded, 'reason': 'the flavour of the loaded module (auto keeps it; set '
                                          'nvidia_driver_kernel_module_type to change it)'}
    if branch >= OPEN_DEFAULT_BRANCH:
        return {'type': 'open', 'reason': 'NVIDIA default from R%d for Turing and later' % OPEN_DEFAULT_BRANCH}
    if branch >= OPEN_FIRST_BRANCH and nvidia_packages.offers_open_every_build(distribution, source):
        return {'type': 'open', 'reason': 'Turing or later, and %s ships the open modules of R%d (NVIDIA recommends '
                                          'them from Turing on; GPUDirect RDMA over DMA-BUF needs them)' % (source, branch)}
    if branch >= OPEN_FIRST_BRANCH and source:
        return {'type': 'proprietary', 'reason': '%s on %s does not ship the open modules of every R%d build; set '
                                                 'nvidia_driver_kernel_module_type: open at a version it offers them'
                                                 % (source, distribution or 'this OS', branch)}
    return {'type': 'proprietary', 'reason': 'NVIDIA default before R%d' % OPEN_DEFAULT_BRANCH}


def _ids(devices):
    return ', '.join('%s (0x%04x)' % (d['address'], d['device']) for d in devices)


def _flavour_only(distribution, source, branch, flavour):
    """Packages a source installs only for one kernel module flavour (what the other one replaces)."""
    mine = nvidia_packages.driver_package_names(distribution, source, branch, flavour)['packages']
    theirs = nvidia_packages.driver_package_names(
        distribution, source, branch, 'open' if flavour == 'proprietary' else 'proprietary')['packages']
    return [n for n in mine if n not in theirs]


def _apt_pin(names, version):
    return ['%s=%s-*' % (n, version) for n in names]


def nvidia_driver_plan(version, source, distribution, major, module_type, headless=True,
                       fabricmanager=False, packages_override=None):
    """Package plan of one driver source on one OS.

    Returns a dict:
      packages       names to install (all at the driver version unless listed in unpinned)
      install        install specs (apt 'name=VER-*', dnf 'name-VER')
      unpinned       names installed at whatever the source ships (they have their own version)
      hold           names to hold (gpucluster.core.package_hold: apt-mark hold, or a dnf versionlock of the
                     installed version, which the install specs pin)
      version_glob   the package version glob of this driver version
      carrier        the package whose installed version is the installed driver version
      obsolete_re    regular expression of installed package names that this plan replaces
      module_stream  dnf module stream (RHEL family, cuda_repo) or ''
      fabricmanager_service / persistenced_service   unit names
    """
    info = nvidia_driver_version_info(version)
    branch = info['branch']
    if source not in SOURCES:
        _fail("nvidia_driver_source '%s' is not one of %s" % (source, ', '.join(SOURCES)))
    if module_type not in ('open', 'proprietary'):
        _fail("kernel module type '%s' is not 'open' or 'proprietary'" % (module_type,))
    is_open = module_type == 'open'
    major = str(major)
    plan = {
        'packages': [], 'unpinned': [], 'version_glob': '%s-*' % version, 'carrier': '',
        'obsolete_re': '', 'module_stream': '', 'manager': 'apt',
        'persistenced_service': 'nvidia-persistenced', 'fabricmanager_service': 'nvidia-fabricmanager',
    }
    if source == 'runfile':
        plan.update({'manager': 'runfile', 'install': [], 'hold': []})
        return plan

    if distribution == 'RedHat' and source == 'distro':
        _fail("nvidia_driver_source 'distro' is not available on RHEL/Rocky (no driver in the base "
              "repositories): use 'cuda_repo' or 'runfile'")
    if distribution == 'RedHat' and major not in ('8', '9'):
        _fail('the CUDA repository path supports RHEL/Rocky 8 and 9 (got %s)' % major)
    try:
        names = nvidia_packages.driver_package_names(distribution, source, branch, module_type,
                                                     headless=headless, fabricmanager=fabricmanager)
    except nvidia_packages.PackageTableError:
        _fail("nvidia_driver_source '%s' is not supported on %s %s" % (source, distribution, major))
    if names['last_branch'] is not None and branch > names['last_branch']:
        _fail('driver branch %d drops branch names from the CUDA repository packages; '
              'set nvidia_driver_packages explicitly' % branch)
    if fabricmanager and not names['fabricmanager']:
        _fail('%s does not package NVIDIA Fabric Manager: use nvidia_driver_source=cuda_repo on '
              'NVSwitch systems, or set nvidia_driver_fabricmanager=false if this node has no NVSwitch'
              % distribution)
    other = 'proprietary' if is_open else 'open'
    plan.update({
        'manager': names['manager'],
        'packages': names['packages'],
        'unpinned': names['unpinned'],
        'carrier': names['carrier'],
    })
    if distribution == 'Debian' and source == 'distro':
        plan['obsolete_re'] = '^%s$' % '|'.join(re.escape(n) for n in _flavour_only(distribution, source, branch, other))
    elif distribution == 'Ubuntu' and source == 'distro':
        # Other branches of the same family, and the other kernel module flavour of this branch.
        plan['obsolete_re'] = (r'^(lib)?nvidia-[a-z0-9-]+-(?!%d(-|$))[0-9]{3}(-server)?(-open)?$|'
                               r'^nvidia-(dkms|kernel-source|headless|driver|headless-no-dkms)-%d%s$'
                               % (branch, branch, '-server-open' if other == 'open' else '-server'))
    elif source == 'cuda_repo' and names['manager'] == 'apt':
        plan['obsolete_re'] = (r'^(cuda-drivers|nvidia-open|nvidia-fabricmanager|libnvidia-nscq)-(?!%d$)[0-9]{3}$|^%s$'
                               % (branch, '|'.join(re.escape(n) for n in _flavour_only(distribution, source, branch, other))))
    else:
        plan.update({
            'module_stream': 'nvidia-driver:%d-%s' % (branch, 'open' if is_open else 'dkms'),
            'obsolete_re': '^%s$' % '|'.join(re.escape(n) for n in _flavour_only(distribution, source, branch, other)),
        })

    if packages_override:
        if not isinstance(packages_override, (list, tuple)) or not all(
                isinstance(n, str) and re.match(r'^[A-Za-z0-9][A-Za-z0-9+._-]*\Z', n) for n in packages_override):
            _fail('nvidia_driver_packages: %s is not a list of package names' % (quote(packages_override),))
        plan['packages'] = list(packages_override)
        plan['carrier'] = plan['packages'][0]
        plan['unpinned'] = [n for n in plan['unpinned'] if n in plan['packages']]
    pinned = [n for n in plan['packages'] if n not in plan['unpinned']]
    if plan['manager'] == 'dnf':
        plan['install'] = ['%s-%s' % (n, version) for n in pinned] + plan['unpinned']
    else:
        plan['install'] = _apt_pin(pinned, version) + plan['unpinned']
    plan['hold'] = list(plan['packages'])
    return plan


def _native_entries(installed, architecture):
    """package_facts' packages with only the entries of the node's own architecture (and of none):
    a name whose only entries are foreign (an i386 library on an amd64 node) is not installed."""
    if not architecture:
        return installed
    native = {}
    for name, entries in installed.items():
        mine = [e for e in entries or [] if not nvidia_packages.foreign_package(
            e.get('arch') if isinstance(e, dict) else None, architecture)]
        if mine:
            native[name] = mine
    return native


def nvidia_installed_matches(installed, plan, architecture=None):
    """Compare package_facts' packages with a plan.

    ``architecture`` is the node's (ansible_facts['architecture']): package entries of another
    architecture (multiarch: an i386 driver library beside the amd64 one) are not the node's and are
    ignored; without it every entry counts.

    Returns {'current': bool, 'installed_version': upstream version of the carrier or '',
             'stale': [names installed at another driver version],
             'obsolete': [installed names that the plan replaces]}.
    """
    installed = _native_entries(installed or {}, architecture)
    version = plan['version_glob'][:-2]
    stale = []
    for name in plan['packages']:
        if name in plan.get('unpinned', []):
            continue
        for entry in installed.get(name, []):
            if nvidia_upstream_version(entry.get('version', '')) != version:
                stale.append(name)
                break
    obsolete = []
    if plan.get('obsolete_re'):
        regex = re.compile(plan['obsolete_re'])
        obsolete = sorted(n for n in installed if regex.search(n) and n not in plan['packages'])
    carrier = installed.get(plan.get('carrier', ''), [])
    installed_version = nvidia_upstream_version(carrier[0].get('version', '')) if carrier else ''
    missing = [n for n in plan['packages'] if n not in installed]
    return {
        'current': not stale and not obsolete and not missing,
        'installed_version': installed_version,
        'stale': sorted(set(stale)),
        'obsolete': obsolete,
        'missing': missing,
    }


def nvidia_reboot_required(installed_version, proc_text, modules_text='', wanted_flavour=''):
    """The reboot contract: a reboot is needed when the loaded module is not the installed driver,
    when nouveau is still loaded, or when the loaded flavour is not the wanted one."""
    reasons = []
    loaded = nvidia_loaded_version(proc_text)
    if installed_version:
        if not loaded:
            reasons.append('no NVIDIA kernel module is loaded (installed %s)' % installed_version)
        elif loaded != installed_version:
            reasons.append('loaded module %s differs from installed driver %s' % (loaded, installed_version))
        elif wanted_flavour and nvidia_loaded_flavour(proc_text) != wanted_flavour:
            reasons.append('loaded module is %s, %s is installed' % (nvidia_loaded_flavour(proc_text), wanted_flavour))
    for line in str(modules_text or '').splitlines():
        if line.split(' ', 1)[0] == 'nouveau':
            reasons.append('nouveau is loaded')
            break
    return {'required': bool(reasons), 'reasons': reasons, 'loaded_version': loaded}


def cuda_version_info(version):
    _version_text(version, 'cuda_toolkit_version/cuda_toolkit_versions', '12.4')
    match = CUDA_VERSION_RE.match(str(version))
    if not match:
        _fail("CUDA toolkit version '%s' is malformed: expected MAJOR.MINOR or MAJOR.MINOR.UPDATE such as 12.4 or 12.4.1" % (version,))
    major, minor = match.group('major'), match.group('minor')
    return {
        'version': str(version), 'major': int(major), 'minor': int(minor),
        'patch': int(match.group('patch')) if match.group('patch') is not None else None,
        'short': '%s.%s' % (major, minor), 'dashed': '%s-%s' % (major, minor),
    }


def cuda_min_driver(version, compatibility='full'):
    """Lowest Linux x86_64 driver that runs a CUDA toolkit.

    full: the toolkit's own driver (for MAJOR.MINOR, the highest of its updates, since an
    unpinned update may be installed); minor: CUDA minor version compatibility.
    """
    info = cuda_version_info(version)
    if compatibility == 'minor':
        if str(info['major']) not in CUDA_MINOR_COMPAT_DRIVER:
            _fail('no minor version compatibility data for CUDA %d' % info['major'])
        return CUDA_MINOR_COMPAT_DRIVER[str(info['major'])]
    if compatibility != 'full':
        _fail("cuda_toolkit_driver_compatibility '%s' is not 'full' or 'minor'" % (compatibility,))
    if info['patch'] is not None:
        key = '%s.%d' % (info['short'], info['patch'])
        if key not in CUDA_TOOLKIT_DRIVER:
            _fail('CUDA %s is not in the toolkit/driver table (known: %s)' % (version, ', '.join(sorted(CUDA_TOOLKIT_DRIVER, key=_vtuple))))
        return CUDA_TOOLKIT_DRIVER[key]
    candidates = [v for k, v in CUDA_TOOLKIT_DRIVER.items() if k.startswith(info['short'] + '.')]
    if not candidates:
        _fail('CUDA %s is not in the toolkit/driver table' % (version,))
    return max(candidates, key=_vtuple)


def cuda_driver_check(versions, driver_version, compatibility='full'):
    """[{'version', 'min_driver', 'ok'}] for each toolkit version against the driver."""
    driver = _vtuple(nvidia_driver_version_info(driver_version)['version'])
    result = []
    for version in versions:
        need = cuda_min_driver(version, compatibility)
        result.append({'version': str(version), 'min_driver': need, 'ok': driver >= _vtuple(need)})
    return result


def cuda_toolkit_plan(versions, default, source, distribution, cudnn='', nccl=''):
    """Packages of the cuda_toolkit role: install specs, names to hold and the default prefix.

    ``hold`` holds package names on both families: gpucluster.core.package_hold locks the installed version
    on dnf, which the install specs pin."""
    if isinstance(versions, str) or not isinstance(versions, (list, tuple)):
        _fail('cuda_toolkit_versions: %s is not a list of version strings such as ["12.4"]' % (quote(versions),))
    infos = [cuda_version_info(v) for v in versions]
    default_info = cuda_version_info(default)
    if default_info['short'] not in [i['short'] for i in infos]:
        _fail("cuda_toolkit_version '%s' is not among cuda_toolkit_versions %s" % (default, list(versions)))
    if len(set(i['short'] for i in infos)) != len(infos):
        _fail('cuda_toolkit_versions %s names one toolkit twice' % (list(versions),))
    dnf = distribution == 'RedHat'
    install, hold = [], []
    if source == 'distro':
        if distribution != 'Debian' and distribution != 'Ubuntu':
            _fail("cuda_toolkit_source 'distro' exists on Debian and Ubuntu only")
        if len(infos) != 1:
            _fail("cuda_toolkit_source 'distro' provides one toolkit; cuda_toolkit_versions must hold only %s" % default)
        if cudnn:
            _fail("cuda_toolkit_cudnn_version cannot be pinned with cuda_toolkit_source 'distro' "
                  "(Debian's nvidia-cudnn downloads cuDNN at install time); use 'cuda_repo' or leave it empty")
        distro_name = nvidia_packages.CUDA_TOOLKIT_PACKAGES['distro']
        install.append('%s=%s.*' % (distro_name, default_info['short']) if default_info['patch'] is None
                       else '%s=%s.*~%s.%d-*' % (distro_name, default_info['short'], default_info['short'], default_info['patch']))
        hold.append(distro_name)
        if nccl:
            install += ['%s=%s*' % (n, nccl) for n in nvidia_packages.NCCL_PACKAGES['apt']]
            hold += list(nvidia_packages.NCCL_PACKAGES['apt'])
        return {'install': install, 'hold': hold, 'prefix': '/usr', 'prefixes': ['/usr'], 'manager': 'apt'}
    if source != 'cuda_repo':
        _fail("cuda_toolkit_source '%s' is not 'cuda_repo' or 'distro'" % (source,))
    for info in infos:
        name = nvidia_packages.CUDA_TOOLKIT_PACKAGES['cuda_repo'].format(cuda_major=info['major'], cuda_minor=info['minor'])
        if info['patch'] is None:
            install.append(name)
            hold.append(name)
        else:
            ver = '%s.%d' % (info['short'], info['patch'])
            install.append(('%s-%s' if dnf else '%s=%s-*') % (name, ver))
            hold.append(name)
    major = default_info['major']
    if cudnn:
        cudnn_major = str(cudnn).split('.', 1)[0]
        if not re.match(r'^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+-[0-9]+(\+cuda[0-9]+\.[0-9]+)?\Z', str(cudnn)):
            _fail("cuda_toolkit_cudnn_version '%s' is malformed: expected the package version such as 9.1.0.70-1" % (cudnn,))
        if cudnn_major == '8' and '+cuda%d.' % major not in str(cudnn):
            _fail("cuda_toolkit_cudnn_version '%s' (cuDNN 8) must name a build for CUDA %d, such as 8.9.7.29-1+cuda12.2" % (cudnn, major))
        names = nvidia_packages.cudnn_package_names('dnf' if dnf else 'apt', cudnn_major, major)
        install += [('%s-%s' if dnf else '%s=%s') % (n, cudnn) for n in names]
        hold += list(names)
    if nccl:
        match = re.match(r'^[0-9]+\.[0-9]+\.[0-9]+-[0-9]+\+cuda([0-9]+)\.[0-9]+\Z', str(nccl))
        if not match:
            _fail("cuda_toolkit_nccl_version '%s' is malformed: expected the package version such as 2.21.5-1+cuda12.4" % (nccl,))
        if int(match.group(1)) != major:
            _fail("cuda_toolkit_nccl_version '%s' is built for CUDA %s, the default toolkit is CUDA %d" % (nccl, match.group(1), major))
        names = nvidia_packages.NCCL_PACKAGES['dnf' if dnf else 'apt']
        install += [('%s-%s' if dnf else '%s=%s') % (n, nccl) for n in names]
        hold += list(names)
    return {
        'install': install, 'hold': hold, 'manager': 'dnf' if dnf else 'apt',
        'prefix': '/usr/local/cuda-%s' % default_info['short'],
        'prefixes': ['/usr/local/cuda-%s' % i['short'] for i in infos],
    }


def apt_specs_unsatisfied(specs, dpkg_lines, architecture=None):
    """The apt install specs (``name`` or ``name=VERSION-GLOB``) that the installed packages do not
    satisfy yet. ``dpkg_lines``:
    ``dpkg-query -W -f '${binary:Package} ${Version} ${db:Status-Abbrev}\\n'`` lines; a package counts
    as installed only in state ``ii`` or ``hi`` (half-installed, unpacked or config-files packages are
    not). An empty result means ``apt: state=present`` would change nothing, so the role can skip the
    apt module, whose pin and candidate resolution over the whole package cache costs a minute of CPU
    on a converged node.

    ``architecture`` is the node's (ansible_facts['architecture'] or its dpkg name). On a node with
    more than one dpkg architecture, dpkg-query lists a name once per architecture
    (``libnvidia-compute-550:amd64`` and ``libnvidia-compute-550:i386``): only the node's own
    architecture (or ``all``) satisfies a spec, so an i386 package at the wanted version never makes
    apt skip the amd64 one. Every line of the node's architecture must satisfy the spec. Without
    ``architecture``, a line qualified with an architecture fails the filter (it cannot tell which
    architecture is the node's).
    """
    if isinstance(specs, str) or not isinstance(specs, (list, tuple)):
        _fail('apt specs must be a list of strings such as ["nvidia-smi=535.309.01-*"] (got %s)' % (quote(specs),))
    if isinstance(dpkg_lines, str):
        dpkg_lines = dpkg_lines.splitlines()
    installed = {}
    for line in dpkg_lines or []:
        fields = str(line).split()
        if not fields:
            continue
        name, _sep, qualifier = fields[0].partition(':')
        if qualifier and not architecture:
            _fail('apt_specs_unsatisfied: the line %s names an architecture; pass the node\'s architecture '
                  '(ansible_facts[\'architecture\']) after the dpkg-query lines' % quote(str(line)))
        if qualifier and nvidia_packages.foreign_package(qualifier, architecture):
            continue
        ok = len(fields) >= 3 and fields[2][:2] in ('ii', 'hi')
        # Every line of the node's own architecture counts: one not installed (or another version) is unsatisfied.
        installed.setdefault(name, []).append(fields[1] if ok else None)
    # The decision itself (as apt's state=present judges a spec) is module_utils/apt_specs.py's.
    return [spec for spec in specs if not apt_specs.spec_satisfied(str(spec), installed.get(apt_specs.spec_name(spec)))]


_EXPECTED = {
    'nvidia_driver_version_info': 'nvidia_driver_version as a string such as "535.309.01"',
    'nvidia_upstream_version': 'a package version string',
    'nvidia_loaded_version': 'the text of /proc/driver/nvidia/version',
    'nvidia_pci_devices': 'lines "ADDRESS VENDOR CLASS DEVICE" from sysfs',
    'nvidia_nvswitch_present': 'a list of devices from nvidia_pci_devices',
    'nvidia_kernel_module_type': 'nvidia_driver_kernel_module_type, nvidia_driver_version, a list of devices, the source, '
                                 'the OS and the loaded flavour',
    'nvidia_driver_plan': 'nvidia_driver_version, nvidia_driver_source, the OS, the module type and '
                          'nvidia_driver_packages as a list of package names',
    'nvidia_installed_matches': "package_facts' packages (a dict of name to a list of {version, arch}), a plan "
                                "and the node's architecture",
    'nvidia_reboot_required': 'the installed driver version and the /proc texts',
    'cuda_version_info': 'cuda_toolkit_version as a string such as "12.4"',
    'cuda_min_driver': 'a CUDA version string and cuda_toolkit_driver_compatibility (full or minor)',
    'cuda_driver_check': 'cuda_toolkit_versions as a list of strings and the driver version',
    'cuda_toolkit_plan': 'cuda_toolkit_versions as a list of strings such as ["12.4"], cuda_toolkit_version, '
                         'cuda_toolkit_source, the OS, cuda_toolkit_cudnn_version and cuda_toolkit_nccl_version',
    'apt_specs_unsatisfied': "a list of apt install specs, dpkg-query's 'binary:Package Version Status' lines "
                             "and the node's architecture",
    'nvidia_debian_sources': "the node's APT source files as {path: content} and the release codename",
}


def nvidia_debian_sources(files, release, mirror='', security='', fallback=None):
    """What the distro source's component management needs from a Debian node's own APT sources.

    ``files``: ``{path: content}`` of /etc/apt/sources.list and sources.list.d (file_read's contents; the
    role's own file left out); ``release``: the codename. Returns ``{nonfree, archive, security, from}``: whether a binary entry
    already enables non-free; the mirrors for the added components: the settings when given, else the URIs
    the node's own sources use for ``<release>`` and ``<release>-security`` (a site's internal mirror, http
    included: apt checks the signed Release files against the archive keyring), else ``fallback``
    ({archive, security}); ``from`` says which (setting, node, default) for each."""
    entries = apt_sources.node_sources(files)
    fallback = fallback or {}
    found = {'archive': apt_sources.archive_uri(entries, release),
             'security': apt_sources.archive_uri(entries, '%s-security' % release)}
    wanted = {'archive': mirror or '', 'security': security or ''}
    result = {'nonfree': apt_sources.has_component(entries, 'non-free'), 'from': {}}
    for key in ('archive', 'security'):
        if wanted[key]:
            result[key], result['from'][key] = wanted[key], 'setting'
        elif found[key]:
            result[key], result['from'][key] = found[key], 'node'
        else:
            result[key], result['from'][key] = fallback.get(key, ''), 'default'
    return result


class FilterModule(object):
    def filters(self):
        funcs = {
            'nvidia_driver_version_info': nvidia_driver_version_info,
            'nvidia_upstream_version': nvidia_upstream_version,
            'nvidia_loaded_version': nvidia_loaded_version,
            'nvidia_pci_devices': nvidia_pci_devices,
            'nvidia_nvswitch_present': nvidia_nvswitch_present,
            'nvidia_kernel_module_type': nvidia_kernel_module_type,
            'nvidia_driver_plan': nvidia_driver_plan,
            'nvidia_installed_matches': nvidia_installed_matches,
            'nvidia_reboot_required': nvidia_reboot_required,
            'cuda_version_info': cuda_version_info,
            'cuda_min_driver': cuda_min_driver,
            'cuda_driver_check': cuda_driver_check,
            'cuda_toolkit_plan': cuda_toolkit_plan,
            'apt_specs_unsatisfied': apt_specs_unsatisfied,
            'nvidia_debian_sources': nvidia_debian_sources,
        }
        return dict((name, guarded(name, _EXPECTED[name])(func)) for name, func in funcs.items())
