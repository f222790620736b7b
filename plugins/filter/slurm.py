# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Decision code of the slurm role.

Pure functions over strings, lists and dicts: each node's DECLARED shape (GPU count and type,
memory) checked against its live facts (``slurmd -C``, ``gpucluster.core.gpu_facts``), the
definitions kept from the current files for nodes that cannot be read, the NodeName /
PartitionName / gres.conf lines, the cross-host validation that runs before any file changes,
and whether a configuration change can be applied with ``scontrol reconfigure`` or needs the
ordered restart.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import base64
import re

from ansible_collections.gpucluster.core.plugins.filter.config_values import guarded
from ansible_collections.gpucluster.core.plugins.module_utils import scheduler
from ansible_collections.gpucluster.core.plugins.module_utils.slurm_topology import numa_gpu_cores

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - only without ansible-core installed
    class AnsibleFilterError(Exception):
        pass


# A GRES type, a partition name, a node name: one word Slurm parses without quoting.
GRES_TYPE_RE = re.compile(r'^[A-Za-z0-9][A-Za-z0-9_.-]*\Z')
NAME_RE = re.compile(r'^[A-Za-z0-9][A-Za-z0-9_.-]*\Z')
CONF_KEY_RE = re.compile(r'^[A-Za-z][A-Za-z0-9]*\Z')
FEATURE_RE = re.compile(r'^[A-Za-z0-9][A-Za-z0-9_.+-]*\Z')
# A slurm.conf value: one word (Slurm ends a value at white space, '#' starts a comment, the parser drops
# backslashes), no quotes, no control characters (a line break would add a line of its own).
CONF_VALUE_RE = re.compile(r'^[^\s#"\'\\\x00-\x1f\x7f-\x9f\u2028\u2029]+\Z')
# Words nvidia-smi puts in front of the model that say nothing about the model.
_GPU_NAME_NOISE = ('nvidia', 'tesla', 'geforce', 'quadro')

# `scontrol reconfigure` re-reads slurm.conf everywhere, but these settings (and any change to a
# NodeName line: nodes added, removed, or with other hardware) only take effect when the daemons
# restart (slurm.conf(5), scontrol(1) "reconfigure"). Plugin types are loaded once at start-up.
RESTART_KEYS = frozenset(k.lower() for k in (
    'AccountingStorageHost', 'AccountingStoragePort', 'AccountingStorageType', 'AuthAltTypes',
    'AuthType', 'BackupAddr', 'BackupController', 'ClusterName', 'ControlAddr', 'ControlMachine',
    'CredType', 'GresTypes', 'JobAcctGatherType', 'LaunchType', 'MpiDefault', 'PluginDir',
    'PriorityType', 'PrologFlags', 'ProctrackType', 'SelectType', 'SelectTypeParameters', 'SlurmctldHost',
    'SlurmctldPort', 'SlurmdPort', 'SlurmdSpoolDir', 'SlurmdUser', 'SlurmUser',
    'StateSaveLocation', 'SwitchType', 'TaskPlugin', 'TopologyPlugin',
))


def _fail(msg):
    raise AnsibleFilterError(msg)


def _conf_value_ok(value):
    """A scalar that slurm.conf reads back as written (see CONF_VALUE_RE)."""
    if isinstance(value, bool) or isinstance(value, (int, float)):
        return True
    return isinstance(value, str) and bool(CONF_VALUE_RE.match(value))


def gpu_type(name, type_map=None):
    """Slurm GRES type for an nvidia-smi product name.

    ``NVIDIA RTX A5000`` -> ``rtx_a5000``, ``NVIDIA A100-SXM4-80GB`` -> ``a100_sxm4_80gb``,
    ``NVIDIA H100 80GB HBM3`` -> ``h100_80gb_hbm3``. ``type_map`` (product name -> type) wins.
    """
    if not isinstance(name, str) or not name.strip():
        _fail('slurm: a GPU has no product name to derive a GRES type from: %r' % (name,))
    if type_map is not None and not isinstance(type_map, dict):
        _fail('slurm_gpu_type_map: %r is not a dict of nvidia-smi product name to GRES type' % (type_map,))
    if type_map and name in type_map:
        mapped = type_map[name]
        if not isinstance(mapped, str) or not GRES_TYPE_RE.match(mapped):
            _fail('slurm_gpu_type_map: %r maps to %r, which is not a GRES type (letters, digits, '
                  '"_", "." and "-", no spaces)' % (name, mapped))
        return mapped
    words = re.split(r'[^a-z0-9]+', name.lower())
    words = [w for w in words if w]
    while words and words[0] in _GPU_NAME_NOISE:
        words.pop(0)
    if not words:
        _fail('slurm: the GPU product name %r leaves no model to use as a GRES type; '
              'set slurm_gpu_type_map' % name)
    return '_'.join(words)


def parse_node_report(text):
    """Parse ``slurmd -C`` output into a dict of ints (cpus, boards, sockets, cores, threads, memory)."""
    if not isinstance(text, str):
        _fail('slurm: slurmd -C output must be text, got %r' % type(text).__name__)
    fields = {}
    for line in text.splitlines():
        if line.startswith('NodeName='):
            for word in line.split():
                key, sep, value = word.partition('=')
                if sep:
                    fields[key] = value
    wanted = {
        'CPUs': 'cpus', 'Boards': 'boards', 'SocketsPerBoard': 'sockets_per_board',
        'CoresPerSocket': 'cores_per_socket', 'ThreadsPerCore': 'threads_per_core',
        'RealMemory': 'real_memory',
    }
    report = {}
    for key, out in wanted.items():
        value = fields.get(key)
        if value is None or not value.isdigit():
            _fail('slurm: slurmd -C did not report %s (got: %r)' % (key, text.strip()[:200]))
        report[out] = int(value)
    report['node_name'] = fields.get('NodeName', '')
    return report


def _ranges(numbers):
    """[0, 1, 2, 5] -> '0-2,5'."""
    runs = []
    for n in sorted(set(numbers)):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ','.join(str(a) if a == b else '%d-%d' % (a, b) for a, b in runs)


def compress_files(files):
    """['/dev/nvidia0', '/dev/nvidia1'] -> '/dev/nvidia[0-1]' (Slurm's bracket notation)."""
    groups = {}
    order = []
    plain = []
    for path in files:
        m = re.match(r'^(.*?)([0-9]+)$', path)
        if not m:
            plain.append(path)
            continue
        prefix = m.group(1)
        if prefix not in groups:
            groups[prefix] = []
            order.append(prefix)
        groups[prefix].append(int(m.group(2)))
    out = []
    for prefix in order:
        nums = groups[prefix]
        if len(nums) == 1:
            out.append('%s%d' % (prefix, nums[0]))
        else:
            out.append('%s[%s]' % (prefix, _ranges(nums)))
    return ','.join(out + plain)


def node_gres(gpu, type_override=None, type_map=None, cores=None):
    """GRES groups of one node from its ``gpu_facts``: [{type, count, files, minors, cores}].

    One group per GPU type. Devices stay in nvidia-smi index order (PCI bus order, the order CUDA
    uses with CUDA_DEVICE_ORDER=PCI_BUS_ID), which Slurm takes as the order of the File entries;
    ``/dev/nvidia<minor>`` is the device file of each GPU, and minor numbers need not follow the
    index. ``cores`` maps a GPU index to a Slurm core list.
    """
    if not gpu or not gpu.get('present') or not gpu.get('devices'):
        return []
    if type_override is not None and type_override != '':
        if not isinstance(type_override, str) or not GRES_TYPE_RE.match(type_override):
            _fail('slurm_gpu_type: %r is not a GRES type: use letters, digits, "_", "." or "-" '
                  '(no spaces), for example a100_sxm4_80gb' % (type_override,))
    cores = cores or {}
    if not isinstance(cores, dict):
        _fail('slurm_gpu_cores: %r is not a dict of GPU index to a Slurm core list such as "0-31"' % (cores,))
    groups = {}
    order = []
    devices = sorted(gpu['devices'], key=lambda d: (d.get('index') is None, d.get('index')))
    for dev in devices:
        minor = dev.get('minor_number')
        if minor is None:
            minor = dev.get('index')
        try:
            minor = int(minor)
        except (TypeError, ValueError):
            _fail('slurm: GPU %r reports no usable minor number (%r)' % (dev.get('uuid'), minor))
        kind = type_override or gpu_type(dev.get('name'), type_map)
        if kind not in groups:
            groups[kind] = {'type': kind, 'count': 0, 'files': [], 'minors': [], 'cores': []}
            order.append(kind)
        group = groups[kind]
        group['count'] += 1
        group['minors'].append(minor)
        group['files'].append('/dev/nvidia%d' % minor)
        index = dev.get('index')
        core_list = cores.get(index, cores.get(str(index))) if index is not None else None
        group['cores'].append(None if core_list is None else str(core_list))
    for group in groups.values():
        # Cores= only when every GPU of the group has an affinity; a partial list would bind wrongly.
        if any(c is None for c in group['cores']):
            group['cores'] = []
    return [groups[k] for k in order]


def _declared(value):
    """None for an unset shape variable (None, '' or omitted), the value otherwise."""
    return None if value is None or value == '' else value


def real_memory(memory_mib, reserve_mib=1024, reserve_percent=0, round_mib=1024):
    """RealMemory for a node with ``memory_mib`` MiB: what is left after the system's share, rounded down.

    The share is ``reserve_percent`` of the memory, at least ``reserve_mib``; the rest is rounded down to
    a multiple of ``round_mib`` so that a few MiB more or less (firmware, kernel) do not change slurm.conf.
    """
    memory = _whole(memory_mib, 'slurm_node_memory_mib')
    reserve_mib = _whole(reserve_mib, 'slurm_real_memory_reserve_mib')
    percent = _whole(reserve_percent, 'slurm_real_memory_reserve_percent')
    step = _whole(round_mib, 'slurm_real_memory_round_mib')
    if percent > 90:
        _fail('slurm_real_memory_reserve_percent: %d is not accepted: 0 to 90' % percent)
    if step < 1:
        _fail('slurm_real_memory_round_mib: %d is not accepted: 1 or more MiB' % step)
    reserve = max(reserve_mib, -(-memory * percent // 100))
    value = (memory - reserve) // step * step
    if value < 1:
        _fail('slurm_real_memory_reserve_mib/slurm_real_memory_reserve_percent/slurm_real_memory_round_mib: '
              'reserving %d MiB of %d MiB and rounding to %d MiB leaves no memory for jobs'
              % (reserve, memory, step))
    return value


# The most device files one gres.conf File= value may name when it is read back: a node has at most 255
# NVIDIA device minors (/dev/nvidia0..254; 255 is nvidiactl). A range beyond that is refused, never expanded.
GRES_FILES_MAX = 256
_DEVICE_RE = re.compile(r'^/dev/nvidia([0-9]+)\Z')


def expand_files(spec, where=None):
    """'/dev/nvidia[0-1,3]' -> ['/dev/nvidia0', '/dev/nvidia1', '/dev/nvidia3'] (the reverse of compress_files).

    At most GRES_FILES_MAX files: a larger or reversed range is refused (naming ``where``, the gres.conf
    line it comes from, when given) before anything is expanded.
    """
    if spec is None:
        return []
    if not isinstance(spec, str):
        _fail('slurm: a gres.conf File= value must be text, got %s' % type(spec).__name__)
    origin = ' in gres.conf line %r' % (where[:160],) if where else ' of gres.conf'
    out = []
    for part in re.findall(r'[^,\[]+(?:\[[^\]]*\])?', spec):
        m = re.match(r'^(.*)\[([0-9,-]+)\]$', part)
        if not m:
            out.append(part)
            continue
        for chunk in m.group(2).split(','):
            first, _sep, last = chunk.partition('-')
            if not re.match(r'^[0-9]{1,12}\Z', first) or (last and not re.match(r'^[0-9]{1,12}\Z', last)):
                _fail('slurm: cannot read the device range %r%s' % (part[:80], origin))
            low, high = int(first), int(last or first)
            if high < low or len(out) + high - low + 1 > GRES_FILES_MAX:
                _fail('slurm: the device range %r%s is not accepted: %s; at most %d device files are read'
                      % (part[:80], origin, 'it runs backwards' if high < low else
                         'it names %d device files' % (len(out) + high - low + 1), GRES_FILES_MAX))
            out.extend('%s%d' % (m.group(1), n) for n in range(low, high + 1))
    if len(out) > GRES_FILES_MAX:
        _fail('slurm: the File= value %r%s names %d device files; at most %d are read'
              % (spec[:80], origin, len(out), GRES_FILES_MAX))
    return out


def _words(line):
    fields = {}
    for word in line.split():
        key, sep, value = word.partition('=')
        if sep:
            fields[key.lower()] = value
    return fields


def kept_nodes(conf_text, gres_text):
    """The node records the current slurm.conf and gres.conf describe: {node name: record}.

    A node that cannot be read this run (unreachable, or no ``slurmd -C`` yet) keeps these definitions,
    and a node without a declared shape keeps what was derived when it joined.
    """
    nodes = {}
    for raw in (conf_text or '').splitlines():
        line, dummy, comment = raw.partition('#')
        line = line.strip()
        if not line.lower().startswith('nodename='):
            continue
        f = _words(line)
        # node_line's trailing comment names the inventory host: a host that cannot be reached (no
        # hostname fact, so no node name this run) still finds its definition by it.
        host = _words(comment).get('host', '')
        try:
            record = {
                'name': f['nodename'],
                'addr': f.get('nodeaddr', ''),
                'cpus': int(f['cpus']),
                'boards': int(f.get('boards', 1)),
                'sockets_per_board': int(f.get('socketsperboard', f.get('sockets', 1))),
                'cores_per_socket': int(f.get('corespersocket', 1)),
                'threads_per_core': int(f.get('threadspercore', 1)),
                'real_memory': int(f.get('realmemory', 1)),
                'mem_spec_limit': int(f.get('memspeclimit', 0)),
                'features': [x for x in f.get('feature', '').split(',') if x],
                'weight': int(f['weight']) if 'weight' in f else None,
                'gres': [],
            }
            if host:
                record['host'] = host
        except (KeyError, ValueError):
            # Not a line this role wrote (node ranges, DEFAULT): it is not kept.
            continue
        if NAME_RE.match(record['name']) and record['name'].lower() != 'default':
            nodes[record['name']] = record
    groups = {}
    for raw in (gres_text or '').splitlines():
        line = raw.split('#', 1)[0].strip()
        f = _words(line)
        if f.get('nodename') not in nodes or f.get('name') != 'gpu' or not f.get('file'):
            continue
        key = (f['nodename'], f.get('type', ''))
        if key not in groups:
            groups[key] = {'type': f.get('type', ''), 'count': 0, 'files': [], 'minors': [], 'cores': []}
            nodes[f['nodename']]['gres'].append(groups[key])
        group = groups[key]
        files = expand_files(f['file'], line)
        group['files'] += files
        group['minors'] += [int(m.group(1)) for m in (_DEVICE_RE.match(x) for x in files) if m]
        group['count'] += len(files)
        group['cores'] += [f.get('cores')] * len(files)
    for group in groups.values():
        if any(c is None for c in group['cores']):
            group['cores'] = []
    return nodes


def _gres_count(gres):
    return sum(g['count'] for g in gres or [])


def _files_twice(gres):
    """Device files a node's GRES groups name more than once."""
    seen = set()
    twice = []
    for group in gres or []:
        for path in group.get('files') or []:
            if path in seen and path not in twice:
                twice.append(path)
            seen.add(path)
    return twice


def cluster_nodes(compute, kept=None):
    """The nodes slurm.conf describes this run, and what the run reports about them.

    compute: {inventory host: {'name': node name, 'live': bool, 'plan': node_plan result or None}} for every
    compute host of the inventory (retired ones left out); kept: kept_nodes of the current files.
    A live host with a plan uses it; any other host keeps its current definition; a host with neither is
    left out. Returns {'nodes': [record], 'names': {host: node name}, 'absent': [hosts left out],
    'unreachable': [hosts not live], 'kept': [node names kept for them], 'problems': {node name: [problem]}
    (live, described nodes only), 'notes': [text]}.
    """
    kept = kept or {}
    out = {'nodes': [], 'names': {}, 'absent': [], 'unreachable': [], 'kept': [], 'problems': {}, 'notes': []}
    for host in sorted(compute or {}):
        info = compute[host] or {}
        name = str(info.get('name') or host)
        plan = info.get('plan') if info.get('live') else None
        if not info.get('live'):
            out['unreachable'].append(host)
        node = None
        if plan:
            node = plan.get('node')
            out['notes'] += plan.get('notes') or []
            if node is not None:
                out['problems'][node['name']] = list(plan.get('problems') or [])
        if node is None and name not in kept and not info.get('live'):
            # No facts this run, so the name may be the inventory host's: find the record by its host.
            name = next((n for n in sorted(kept) if kept[n].get('host') == host), name)
        if node is None and name in kept:
            node = kept[name]
            if not info.get('live'):
                out['kept'].append(name)
                out['notes'].append('%s (%s): not reachable this run, its definition is kept' % (name, host))
        if node is None:
            out['absent'].append(host)
            if not plan:
                out['notes'].append('%s (%s): no definition yet and no facts this run; left out of slurm.conf'
                                    % (name, host))
            continue
        node = dict(node, host=host)
        out['nodes'].append(node)
        out['names'][host] = node['name']
    out['nodes'].sort(key=lambda n: n['name'])
    return out


def gpu_identity_problems(gpu):
    """Problems with the GPUs' identities in ``gpu_facts``: a GPU listed twice (same UUID, PCI bus id,
    index or device minor). Counts alone cannot see one GPU listed twice and another missing."""
    devices = [d for d in (gpu or {}).get('devices') or [] if isinstance(d, dict)]
    problems = []
    for key, label in (('uuid', 'UUID'), ('pci_address', 'PCI bus id'), ('index', 'index'),
                       ('minor_number', 'minor number')):
        seen = {}
        for dev in devices:
            value = dev.get(key)
            if key == 'minor_number' and value is None:
                value = dev.get('index')
            if value is None or value == '':
                continue
            seen[str(value)] = seen.get(str(value), 0) + 1
        twice = sorted(v for v, n in seen.items() if n > 1)
        if twice:
            problems.append('nvidia-smi lists the GPU with %s %s more than once' % (
                label, ', '.join(v[:60] for v in twice[:3])))
    return problems


def _health_summary(gpu):
    issues = [i for i in (gpu.get('health') or {}).get('issues') or [] if i.get('severity') == 'critical']
    words = []
    for issue in issues[:3]:
        where = '' if issue.get('gpu') is None else 'GPU %s: ' % issue.get('gpu')
        words.append(where + str(issue.get('message') or issue.get('check') or 'critical'))
    return '; '.join(words) or 'critical'


def node_plan(report, gpu=None, settings=None, previous=None):
    """One node's Slurm description: the DECLARED shape, with the live facts as checks.

    report: ``slurmd -C`` text (or parsed) of this run, or None/'' when it cannot be read (check mode
    before slurmd is installed). gpu: ``gpu_facts`` (None/{} when not gathered). previous: this node's
    record from the current files (kept_nodes), or None.
    settings: name, addr, gpus (slurm_node_gpus), gpu_type, gpu_type_map, gpu_cores, gpu_cores_auto
    (slurm_gpu_cores_from_numa: Cores= from the GPUs' NUMA nodes when gpu_cores is empty), memory_mib
    (slurm_node_memory_mib), real_memory (slurm_node_real_memory), reserve_mib, reserve_percent,
    round_mib, mem_spec_limit, features, weight.

    Returns {'node': record or None, 'problems': [...], 'notes': [...]}. Problems are facts that
    disagree with the definition (the node keeps the definition and is drained); notes say where a
    value came from when it was not declared. ``node`` is None only when nothing describes the node yet.
    """
    s = settings or {}
    name = s.get('name') or (previous or {}).get('name')
    if not name or not NAME_RE.match(str(name)):
        _fail('slurm_node_name: %r is not a Slurm node name (letters, digits, "_", "." or "-")' % (name,))
    name = str(name)
    if isinstance(report, str):
        report = parse_node_report(report) if report.strip() else None
    gathered = isinstance(gpu, dict) and 'devices' in gpu
    problems = []
    notes = []

    if report:
        topo = report
    elif previous:
        topo = previous
        notes.append('%s: no slurmd -C report this run, CPU layout kept from the current slurm.conf' % name)
    else:
        return {'node': None, 'problems': [], 'notes': [
            '%s: not described yet (no slurmd -C report: slurmd is not installed, and no current slurm.conf '
            'entry); the next run without --check writes it' % name]}

    # Memory: slurm_node_real_memory, else from slurm_node_memory_mib, else kept, else derived once.
    mem_spec = _whole(s.get('mem_spec_limit') or 0, 'slurm_mem_spec_limit_mib')
    reserve = (s.get('reserve_mib', 1024), s.get('reserve_percent', 0), s.get('round_mib', 1024))
    if _declared(s.get('real_memory')) not in (None, 0):
        memory = _whole(s.get('real_memory'), 'slurm_node_real_memory')
    elif _declared(s.get('memory_mib')) not in (None, 0):
        memory = real_memory(s.get('memory_mib'), *reserve)
    elif previous:
        memory = int(previous['real_memory'])
        notes.append('%s: RealMemory=%d kept from the current slurm.conf (declare slurm_node_memory_mib to set it)'
                     % (name, memory))
    else:
        memory = real_memory(report['real_memory'], *reserve)
        notes.append('%s: RealMemory=%d derived once from slurmd -C (%d MiB); declare slurm_node_memory_mib to '
                     'pin it' % (name, memory, report['real_memory']))
    if mem_spec >= memory:
        _fail('slurm_mem_spec_limit_mib: %d MiB is not accepted for %s: less than its RealMemory (%d MiB)'
              % (mem_spec, name, memory))
    if report and int(report['real_memory']) < memory:
        problems.append('RealMemory=%d MiB but slurmd -C reports %d MiB' % (memory, int(report['real_memory'])))

    # GPUs: declared count and type, device files from healthy facts that agree, else kept, else 0..N-1.
    type_map = s.get('gpu_type_map') or {}
    cores = s.get('gpu_cores') or {}
    if not cores and s.get('gpu_cores_auto') and gathered and report:
        # Cores= from each GPU's NUMA node (module_utils/slurm_topology.py); slurm_gpu_cores wins.
        cores, why = numa_gpu_cores(gpu.get('devices'), gpu.get('numa_nodes_with_cpus'),
                                    int(report['boards']) * int(report['sockets_per_board']),
                                    int(report['cores_per_socket']))
        if cores:
            notes.append('%s: gres.conf Cores= from each GPU\'s NUMA node (%s)'
                         % (name, ', '.join('GPU %d: %s' % (i, cores[i]) for i in sorted(cores))))
        elif not why.startswith(('one NUMA node', 'no GPU facts')):
            notes.append('%s: no Cores= in gres.conf: %s (set slurm_gpu_cores to bind GPUs to cores by hand)'
                         % (name, why))
    critical = gathered and (gpu.get('health') or {}).get('status') == 'critical'
    live = node_gres(gpu, None, type_map, cores) if gathered else []
    live_count = _gres_count(live)
    if critical:
        problems.append('GPU health critical: %s' % _health_summary(gpu))
    # A GPU listed twice gives no usable device files (gres.conf would name one twice and miss another).
    twice = gpu_identity_problems(gpu) if gathered else []
    problems += twice
    declared = _declared(s.get('gpus'))
    if declared is not None:
        count = _whole(declared, 'slurm_node_gpus')
        gtype = s.get('gpu_type')
        if count and (not isinstance(gtype, str) or not GRES_TYPE_RE.match(gtype)):
            _fail('slurm_gpu_type: %r is not accepted for %s with slurm_node_gpus=%d: the GRES type of its GPUs, '
                  'one word of letters, digits, "_", "." or "-", for example rtx_a5000' % (gtype, name, count))
        gres = []
        if count:
            kept = list((previous or {}).get('gres') or [])
            if live and live_count == count and not critical and not twice:
                source = live
            elif kept and _gres_count(kept) == count and not _files_twice(kept):
                source = kept
            else:
                source = [{'files': ['/dev/nvidia%d' % i for i in range(count)], 'cores': []}]
            files = [f for g in source for f in g['files']]
            group_cores = [c for g in source for c in (g.get('cores') or [None] * len(g['files']))]
            gres = [{'type': gtype, 'count': count, 'files': files,
                     'minors': [int(f[len('/dev/nvidia'):]) for f in files],
                     'cores': [] if any(c is None for c in group_cores) else group_cores}]
        if gathered and live_count != count:
            problems.append('slurm_node_gpus=%d but nvidia-smi reports %d GPU%s'
                            % (count, live_count, '' if live_count == 1 else 's'))
        elif gathered and count:
            mapped = set(type_map[d.get('name')] for d in gpu.get('devices') or [] if d.get('name') in type_map)
            if mapped and mapped != set([gtype]):
                problems.append('slurm_gpu_type=%s but slurm_gpu_type_map names the GPUs %s'
                                % (gtype, ','.join(sorted(mapped))))
    elif previous is not None:
        gres = previous.get('gres') or []
        if gres:
            notes.append('%s: GPUs (%s) kept from the current gres.conf; declare slurm_node_gpus and slurm_gpu_type'
                         % (name, ','.join('%s:%d' % (g['type'], g['count']) for g in gres)))
        if gathered and live_count != _gres_count(gres):
            problems.append('slurm.conf has %d GPUs but nvidia-smi reports %d' % (_gres_count(gres), live_count))
    elif critical or twice:
        return {'node': None, 'problems': problems, 'notes': [
            '%s: left out of slurm.conf: no shape is declared and its GPU facts are %s, so its GPUs cannot '
            'be derived; declare slurm_node_gpus and slurm_gpu_type'
            % (name, 'critical' if critical else 'inconsistent (%s)' % '; '.join(twice))]}
    else:
        gres = node_gres(gpu, s.get('gpu_type') or None, type_map, cores) if gathered else []
        if gres:
            notes.append('%s: GPUs (%s) derived once from gpu_facts; declare slurm_node_gpus and slurm_gpu_type'
                         % (name, ','.join('%s:%d' % (g['type'], g['count']) for g in gres)))

    record = {
        'name': name,
        'addr': s.get('addr') or '',
        'cpus': int(topo['cpus']),
        'boards': int(topo['boards']),
        'sockets_per_board': int(topo['sockets_per_board']),
        'cores_per_socket': int(topo['cores_per_socket']),
        'threads_per_core': int(topo['threads_per_core']),
        'real_memory': memory,
        'mem_spec_limit': mem_spec,
        'gres': gres,
        'features': _features(s.get('features')),
        'weight': None if s.get('weight') in (None, '') else _whole(s.get('weight'), 'slurm node weight'),
    }
    return {'node': record, 'problems': problems, 'notes': notes}


def node_record(report, gpu=None, overrides=None):
    """One node's Slurm description from its live ``slurmd -C`` report and GPU facts alone (what the node
    says it is). The role describes nodes with node_plan (declared shape, facts as checks); this stays
    for playbooks that want a node's live description, for example to write its shape into the inventory.

    overrides: name, addr, real_memory (MiB, wins), memory_reserve_mib, gpu_type, gpu_type_map,
    gpu_cores, features (list), weight.
    """
    if isinstance(report, str):
        report = parse_node_report(report)
    o = overrides or {}
    name = o.get('name') or report.get('node_name')
    if not name or not NAME_RE.match(str(name)):
        _fail('slurm_node_name: %r is not a Slurm node name (letters, digits, "_", "." or "-")' % (name,))
    reported = int(report['real_memory'])
    memory = o.get('real_memory')
    reserve = _whole(o.get('memory_reserve_mib') or 0, 'slurm_real_memory_reserve_mib')
    if memory in (None, '', 0):
        memory = reported - reserve
        if memory < 1:
            _fail('slurm_real_memory_reserve_mib: reserving %s MiB leaves no memory on %s (it reports %d MiB)'
                  % (o.get('memory_reserve_mib'), name, reported))
    else:
        memory = _whole(memory, 'slurm_node_real_memory')
        if memory > reported:
            _fail('slurm_node_real_memory: %d MiB is more than %s has (slurmd -C reports RealMemory=%d)'
                  % (memory, name, reported))
    record = {
        'name': str(name),
        'addr': o.get('addr') or '',
        'cpus': report['cpus'],
        'boards': report['boards'],
        'sockets_per_board': report['sockets_per_board'],
        'cores_per_socket': report['cores_per_socket'],
        'threads_per_core': report['threads_per_core'],
        'real_memory': memory,
        'reported_memory': reported,
        'gres': _live_gres(str(name), gpu, o),
        'features': _features(o.get('features')),
        'weight': None if o.get('weight') in (None, '') else _whole(o.get('weight'), 'slurm node weight'),
    }
    return record


def _live_gres(name, gpu, overrides):
    twice = gpu_identity_problems(gpu) if isinstance(gpu, dict) else []
    if twice:
        _fail('slurm: the GPU facts of %s cannot describe its GPUs: %s' % (name, '; '.join(twice)))
    return node_gres(gpu, overrides.get('gpu_type'), overrides.get('gpu_type_map'), overrides.get('gpu_cores'))


def _whole(value, name):
    """A whole number (int, or digits as text) or an AnsibleFilterError naming the variable."""
    if isinstance(value, bool) or not ((isinstance(value, int) and value >= 0)
                                       or (isinstance(value, str) and value.strip().isdigit())):
        _fail('%s: %r is not a whole number (0 or more)' % (name, value))
    return int(value)


def _features(features):
    if features in (None, ''):
        return []
    if not isinstance(features, (list, tuple)):
        _fail('slurm_node_features: %r is not a list of feature names' % (features,))
    for feature in features:
        if not isinstance(feature, str) or not FEATURE_RE.match(feature):
            _fail('slurm_node_features: %r is not a feature name (letters, digits, "_", ".", "+" or "-")' % (feature,))
    return list(features)


def node_line(node):
    """The slurm.conf NodeName line of one node record."""
    words = ['NodeName=%s' % node['name']]
    if node.get('addr'):
        words.append('NodeAddr=%s' % node['addr'])
    words += [
        'CPUs=%d' % node['cpus'],
        'Boards=%d' % node['boards'],
        'SocketsPerBoard=%d' % node['sockets_per_board'],
        'CoresPerSocket=%d' % node['cores_per_socket'],
        'ThreadsPerCore=%d' % node['threads_per_core'],
        'RealMemory=%d' % node['real_memory'],
    ]
    if node.get('mem_spec_limit'):
        words.append('MemSpecLimit=%d' % int(node['mem_spec_limit']))
    if node.get('gres'):
        words.append('Gres=' + ','.join('gpu:%s:%d' % (g['type'], g['count']) for g in node['gres']))
    if node.get('features'):
        words.append('Feature=' + ','.join(node['features']))
    if node.get('weight') not in (None, ''):
        words.append('Weight=%d' % int(node['weight']))
    words.append('State=UNKNOWN')
    if node.get('host'):
        # Read back by kept_nodes: the definition of a host that is unreachable in a later run.
        words.append('# host=%s' % node['host'])
    return ' '.join(words)


def default_mem_per_cpu(nodes):
    """DefMemPerCPU: the smallest RealMemory per CPU of any node, so that a job that asks for no
    memory gets its share instead of the whole node (which would block every other job there)."""
    shares = [int(n['real_memory']) // max(int(n['cpus']), 1) for n in nodes or []]
    return max(min(shares), 1) if shares else 1


def default_per_gpu(nodes):
    """DefCpuPerGPU and DefMemPerGPU: the smallest CPU and memory share per GPU of any GPU node, so that a
    GPU job that asks for neither gets a share it can have on every node (memory net of MemSpecLimit).
    {'cpus': 0, 'memory': 0} when no node has GPUs."""
    cpus = []
    memory = []
    for n in nodes or []:
        gpus = _gres_count(n.get('gres'))
        if gpus:
            cpus.append(int(n['cpus']) // gpus)
            memory.append((int(n['real_memory']) - int(n.get('mem_spec_limit') or 0)) // gpus)
    if not cpus:
        return {'cpus': 0, 'memory': 0}
    return {'cpus': max(min(cpus), 1), 'memory': max(min(memory), 1)}


def shape_drain_plan(show_lines, problems):
    """What the controller does about nodes whose facts disagree with their definition.

    show_lines: the lines of ``scontrol --oneliner show node`` (every node); problems: {node name:
    [problem]} for every node checked this run (an empty list: the node agrees). Returns
    {'drain': [{'node', 'reason'}], 'resume': [node], 'left': [{'node', 'why'}]}, decided by
    module_utils/scheduler.py for the source ``shape``: drain a node with problems (reason
    ``gpucluster/shape#<tag>: <problems>``) unless it is held by someone else, by another of our
    sources, or is in an operator state (DOWN, FAIL, MAINT, RESERVED, FUTURE, ...); rewrite the
    reason of a shape hold whose problems changed; resume a shape hold (also the previous release's
    ``gpucluster-shape: ...``) once the facts agree, never a node in an operator state. ``left``
    names the nodes with problems that were left as they are, and why. Nodes not checked this run
    (unreachable) and nodes Slurm does not list are left alone.
    """
    if isinstance(show_lines, str):
        show_lines = show_lines.splitlines()
    if not isinstance(problems, dict):
        _fail('slurm_shape_drain_plan: problems must be a dict of node name to a list of problems, got %s'
              % type(problems).__name__)
    states = scheduler.Slurm.parse_states('\n'.join(str(line) for line in show_lines or []))
    plan = {'drain': [], 'resume': [], 'left': []}
    for node in sorted(problems):
        if node not in states:
            continue
        found = problems[node] or []
        if isinstance(found, str):
            found = [found]
        text = '; '.join(str(p) for p in found)
        decision = scheduler.decide(states[node], 'hold' if found else 'release', 'shape', text or None)
        if decision.action == 'drain':
            plan['drain'].append({'node': node, 'reason': decision.reason})
        elif decision.action == 'resume':
            plan['resume'].append(node)
        elif found and (states[node].operator or not states[node].hold or states[node].hold.source != 'shape'):
            plan['left'].append({'node': node, 'why': decision.why})
    return plan


def nodes_not_ready(sinfo_lines, expected):
    """The expected node names that sinfo (``--noheader --Node --format=%N %T``) does not show as a
    responding node in a usable state (down, unknown, invalid, future, not responding, or a state
    with a * ~ # ! % ^ - suffix). A drained node counts as ready: it answers."""
    seen = {}
    for line in sinfo_lines or []:
        words = line.split()
        if len(words) >= 2:
            seen.setdefault(words[0], words[-1].lower())
    bad = re.compile(r'([*~#!%^-]$|^down|^unk|^inval|^fut|^not_resp)')
    return sorted(n for n in set(expected or []) if n not in seen or bad.search(seen[n]))


def gres_lines(nodes):
    """gres.conf lines for every node (the same file on every host).

    A group whose device files ascend in index order becomes one line with a bracket range per run of
    GPUs with the same Cores= (one line per socket when Cores= follows the NUMA nodes); otherwise each GPU
    gets its own line, in index order, so Slurm's device order stays the PCI order.
    """
    lines = []
    for node in sorted(nodes, key=lambda n: n['name']):
        twice = _files_twice(node.get('gres'))
        if twice:
            _fail('slurm: gres.conf would name %s twice for node %s; nothing is written (a GPU listed twice in '
                  'its facts or in the current gres.conf: fix the node or the file, or declare slurm_node_gpus)'
                  % (', '.join(twice[:3]), node['name']))
        for g in node.get('gres') or []:
            minors = [int(f[len('/dev/nvidia'):]) for f in g['files']]
            core_lists = g.get('cores') or [''] * len(g['files'])
            if minors == sorted(minors):
                # One line per run of GPUs with the same cores (a socket's GPUs), files as a bracket range.
                entries = []
                for path, core_list in zip(g['files'], core_lists):
                    if entries and entries[-1][1] == core_list:
                        entries[-1][0].append(path)
                    else:
                        entries.append(([path], core_list))
                entries = [(compress_files(paths), core_list) for paths, core_list in entries]
            else:
                entries = list(zip(g['files'], core_lists))
            for files, core_list in entries:
                line = 'NodeName=%s Name=gpu Type=%s File=%s' % (node['name'], g['type'], files)
                if core_list:
                    line += ' Cores=%s' % core_list
                lines.append(line)
    return lines


def _resolve(entry, by_host, by_name):
    if entry in by_host:
        return by_host[entry]
    if entry in by_name:
        return entry
    return None


def partition_lines(partitions, nodes, absent=None):
    """PartitionName lines. ``nodes`` maps inventory hostname -> Slurm node name of every node in
    slurm.conf; ``absent`` lists hosts or node names that are not (retired, or never described), which
    a partition's list drops. A partition left without nodes is not written (Slurm refuses it)."""
    by_name = set(nodes.values())
    absent = set(absent or [])
    lines = []
    for p in partitions:
        pname = p['name']
        members = p.get('nodes')
        if members in (None, 'ALL', ['ALL']):
            names = sorted(by_name)
        else:
            names = []
            for entry in members:
                if entry in absent and entry not in nodes and entry not in by_name:
                    continue
                name = _resolve(entry, nodes, by_name)
                if name is None:
                    _fail('slurm_partitions: partition %s names %r, which is neither a host of the compute '
                          'group nor a Slurm node name' % (p.get('name'), entry))
                if name not in names:
                    names.append(name)
        if not names:
            continue
        words = ['PartitionName=%s' % pname, 'Nodes=%s' % ','.join(names)]
        words.append('Default=%s' % ('YES' if p.get('default') else 'NO'))
        words.append('MaxTime=%s' % p.get('max_time', 'INFINITE'))
        words.append('State=%s' % p.get('state', 'UP'))
        for key in sorted(p.get('options') or {}):
            words.append('%s=%s' % (key, p['options'][key]))
        lines.append(' '.join(words))
    return lines


def _is_whole(value, minimum=0):
    """An int, or digits as text (``-e slurm_node_gpus=8`` arrives as text), of at least ``minimum``."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _shape_errors(host, info):
    """Bad declared shape values of one compute host (values are checked, live facts are not)."""
    errors = []
    for key, var, minimum, what in (
            ('real_memory', 'slurm_node_real_memory', 1, 'a whole number of MiB (0 or unset: derived)'),
            ('memory_mib', 'slurm_node_memory_mib', 1, 'a whole number of MiB, the memory the node reports '
                                                       '(0 or unset: derived once)'),
            ('mem_spec_limit', 'slurm_mem_spec_limit_mib', 0, 'a whole number of MiB, 0 or more')):
        value = info.get(key)
        if value in (None, '') or (value == 0 and minimum == 1):
            continue
        if not _is_whole(value, minimum):
            errors.append('%s: %s has %r; %s' % (var, host, value, what))
    gpus = info.get('gpus')
    if gpus not in (None, ''):
        if not _is_whole(gpus, 0):
            errors.append('slurm_node_gpus: %s has %r; the number of GPUs the node has, a whole number (1 or more; '
                          '0 for a node without GPUs)' % (host, gpus))
        elif int(gpus) > 0 and info.get('gpu_type') in (None, ''):
            errors.append('slurm_gpu_type: %s declares slurm_node_gpus=%d without a GRES type; set slurm_gpu_type '
                          '(for example rtx_a5000)' % (host, int(gpus)))
    return errors


def validate(spec):
    """Everything wrong with the cluster description, as readable messages (empty when fine).

    spec keys:
      controller: the host named as controller; inventory: all inventory hostnames;
      controllers: hosts of the controller group; compute: {inventory host: {node_name,
      real_memory, gpu_type, gpus, memory_mib, mem_spec_limit}}; partitions: list; conf_extra: dict.
    """
    errors = []
    inventory = set(spec.get('inventory') or [])
    controller = spec.get('controller')
    controllers = list(spec.get('controllers') or [])
    if not controllers:
        errors.append('slurm_controller_group: the group has no host; put exactly one host in it')
    elif len(controllers) > 1:
        errors.append('slurm_controller_group: %d hosts (%s); this role runs one slurmctld, put one host '
                      'in the group' % (len(controllers), ', '.join(sorted(controllers))))
    if not controller:
        errors.append('slurm_controller_host: empty; name the inventory host that runs slurmctld')
    elif controller not in inventory:
        errors.append('slurm_controller_host: %r is not a host of this inventory (known: %s)'
                      % (controller, ', '.join(sorted(inventory)) or 'none'))
    elif controllers and controller not in controllers:
        errors.append('slurm_controller_host: %r is not in the controller group (%s)'
                      % (controller, ', '.join(sorted(controllers))))
    compute = spec.get('compute') or {}
    if not compute:
        errors.append('slurm_compute_group: the group has no host; Slurm needs at least one compute node')
    names = {}
    for host in sorted(compute):
        info = compute[host] or {}
        name = info.get('node_name')
        if not name or not NAME_RE.match(str(name)):
            errors.append('slurm_node_name: %s has %r, not a Slurm node name (letters, digits, "_", "." '
                          'or "-")' % (host, name))
        elif name in names:
            errors.append('slurm_node_name: %s and %s would both be Slurm node %s' % (names[name], host, name))
        else:
            names[name] = host
        gtype = info.get('gpu_type')
        if gtype not in (None, '') and (not isinstance(gtype, str) or not GRES_TYPE_RE.match(gtype)):
            errors.append('slurm_gpu_type: %s has %r; a GRES type is one word of letters, digits, "_", '
                          '"." or "-" (no spaces), for example rtx_a5000' % (host, gtype))
        errors += _shape_errors(host, info)
    by_host = dict((h, (compute[h] or {}).get('node_name')) for h in compute)
    defaults = []
    seen = set()
    for i, p in enumerate(spec.get('partitions') or []):
        if not isinstance(p, dict) or not isinstance(p.get('name'), str) or not NAME_RE.match(p['name']):
            errors.append('slurm_partitions[%d]: needs a name of letters, digits, "_", "." or "-"' % i)
            continue
        if p['name'] in seen:
            errors.append('slurm_partitions: partition %s is defined twice' % p['name'])
        seen.add(p['name'])
        if p.get('default'):
            defaults.append(p['name'])
        members = p.get('nodes')
        if members not in (None, 'ALL', ['ALL']):
            if not isinstance(members, list) or not members:
                errors.append('slurm_partitions: partition %s: nodes is a non-empty list of hosts of the '
                              'compute group (or ALL)' % p['name'])
            else:
                absent = set(spec.get('absent') or [])
                unknown = [m for m in members if _resolve(m, by_host, set(names)) is None and m not in absent]
                if unknown:
                    errors.append('slurm_partitions: partition %s names %s, not hosts of the compute group '
                                  '(known: %s)' % (p['name'], ', '.join(map(str, unknown)),
                                                   ', '.join(sorted(compute)) or 'none'))
        for field in ('max_time', 'state'):
            if field in p and not _conf_value_ok(p[field]):
                example = 'INFINITE' if field == 'max_time' else 'UP'
                errors.append('slurm_partitions: partition %s %s=%r: one word (no white space, quotes, "#" or '
                              'control characters), such as %s' % (p['name'], field, p[field], example))
        options = p.get('options') or {}
        if not isinstance(options, dict):
            errors.append('slurm_partitions: partition %s options=%r: a dict of Slurm option names to values'
                          % (p['name'], options))
            options = {}
        for key, value in sorted(options.items(), key=lambda kv: str(kv[0])):
            if not CONF_KEY_RE.match(str(key)) or not _conf_value_ok(value):
                errors.append('slurm_partitions: partition %s option %s=%r: keys are Slurm option names, '
                              'values one word (no white space, quotes, "#" or control characters)'
                              % (p['name'], key, value))
    if len(defaults) > 1:
        errors.append('slurm_partitions: %s are all marked default; mark one' % ', '.join(defaults))
    conf_extra = spec.get('conf_extra') or {}
    if not isinstance(conf_extra, dict):
        errors.append('slurm_conf_extra: %r is not a dict of slurm.conf settings' % (conf_extra,))
        conf_extra = {}
    for key, value in sorted(conf_extra.items(), key=lambda kv: str(kv[0])):
        if not CONF_KEY_RE.match(str(key)) or not _conf_value_ok(value):
            errors.append('slurm_conf_extra: %s=%r is not a slurm.conf setting (Key=value, the value one word '
                          'without white space, quotes, "#" or control characters)' % (key, value))
    return errors


def _parse_conf(text):
    """slurm.conf text -> (settings {lower key: value}, node lines, other entity lines)."""
    settings = {}
    nodes = []
    entities = []
    for raw in (text or '').splitlines():
        line = raw.split('#', 1)[0].strip()
        if not line or '=' not in line:
            continue
        key, _sep, value = line.partition('=')
        key = key.strip().lower()
        if key == 'nodename':
            nodes.append(' '.join(line.split()))
        elif key in ('partitionname', 'nodeset', 'downnodes', 'frontendname'):
            entities.append(' '.join(line.split()))
        else:
            settings.setdefault(key, [])
            settings[key].append(value.strip())
    return settings, sorted(nodes), sorted(entities)


def conf_change(old, new, kind='slurm.conf'):
    """How a config change takes effect: 'none', 'reconfigure' or 'restart'.

    A missing old file (first run) is 'restart'. gres.conf and cgroup.conf are read by slurmd at
    start-up, so any change there is 'restart'.
    """
    if old is None or old == '':
        return 'restart' if new else 'none'
    if kind != 'slurm.conf':
        return 'none' if _parse_conf(old) == _parse_conf(new) else 'restart'
    old_settings, old_nodes, old_entities = _parse_conf(old)
    new_settings, new_nodes, new_entities = _parse_conf(new)
    if old_nodes != new_nodes:
        return 'restart'
    for key in set(old_settings) | set(new_settings):
        if old_settings.get(key) != new_settings.get(key) and key in RESTART_KEYS:
            return 'restart'
    if old_settings != new_settings or old_entities != new_entities:
        return 'reconfigure'
    return 'none'


def conf_file_change(result, old_by_name):
    """conf_change for one slurp result of a rewritten file (its loop item names the file)."""
    item = result.get('item') or {}
    name = item.get('item') if isinstance(item, dict) else item
    try:
        new = base64.b64decode(result['content']).decode('utf-8')
    except (KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError('slurm: cannot read back %s: %s' % (name, exc))
    return conf_change((old_by_name or {}).get(name), new, name)


def cluster_action(actions):
    """The strongest of several per-file/per-host actions."""
    rank = {'none': 0, 'reconfigure': 1, 'restart': 2}
    best = 'none'
    for a in actions or []:
        if a not in rank:
            _fail('slurm: unknown change action %r' % (a,))
        if rank[a] > rank[best]:
            best = a
    return best


# pam_slurm_adopt(8) module arguments this role accepts, with their documented values
# (https://slurm.schedmd.com/pam_slurm_adopt.html). Anything else is refused: a misspelt option is
# ignored by the module and would leave its default (for example allow on an adoption failure).
PAM_ADOPT_OPTIONS = {
    'action_no_jobs': ('deny', 'ignore'),
    'action_unknown': ('newest', 'allow', 'deny'),
    'action_adopt_failure': ('deny', 'allow'),
    'action_generic_failure': ('deny', 'allow', 'ignore'),
    'disable_x11': ('0', '1'),
    'join_container': ('true', 'false'),
    'log_level': ('quiet', 'fatal', 'error', 'info', 'verbose', 'debug', 'debug2', 'debug3', 'debug4',
                  'debug5'),
}
# A group name PAM's pam_succeed_if and getent can both use: no white space, ':' or ',' (list separators).
GROUP_RE = re.compile(r'^[A-Za-z_][A-Za-z0-9_.-]*\$?\Z')


def pam_adopt_errors(spec):
    """Everything wrong with the pam_slurm_adopt settings of one host (empty when fine).

    spec keys: enabled (slurm_pam_adopt), compute (the host runs slurmd), exempt_groups
    (slurm_pam_adopt_exempt_groups), options (slurm_pam_adopt_options), prolog_flags
    (slurm_prolog_flags), conf_extra (slurm_conf_extra), admin_user (the login name Ansible connects
    as) and admin_groups (that user's groups on the host, None when they could not be read).
    """
    errors = []
    flags = spec.get('prolog_flags')
    if not isinstance(flags, list) or [f for f in flags if not isinstance(f, str) or not NAME_RE.match(f)]:
        errors.append('slurm_prolog_flags: %r is not a list of PrologFlags words (for example [Contain, X11])'
                      % (flags,))
        flags = []
    extra = spec.get('conf_extra') or {}
    if isinstance(extra, dict) and [k for k in extra if str(k).lower() == 'prologflags']:
        errors.append('slurm_conf_extra: PrologFlags is set by slurm_prolog_flags (a list); move it there')
    if not spec.get('enabled'):
        return errors
    if 'contain' not in [f.lower() for f in flags]:
        errors.append('slurm_prolog_flags: %s has no Contain; pam_slurm_adopt (slurm_pam_adopt) adopts SSH '
                      'sessions into the extern step that PrologFlags=Contain creates' % (flags,))
    if not spec.get('compute'):
        return errors
    groups = spec.get('exempt_groups')
    if not isinstance(groups, list) or not groups:
        errors.append('slurm_pam_adopt_exempt_groups: %r; with slurm_pam_adopt on, name at least one group '
                      'whose members (the administrators, the account Ansible connects as) may SSH to a '
                      'compute node without a job there, or set slurm_pam_adopt: false' % (groups,))
        groups = []
    bad = [g for g in groups if not isinstance(g, str) or not GROUP_RE.match(g)]
    if bad:
        errors.append('slurm_pam_adopt_exempt_groups: %s are not group names (letters, digits, "_", "." or '
                      '"-", no white space, ":" or ",")' % (bad,))
    options = spec.get('options')
    if not isinstance(options, dict):
        errors.append('slurm_pam_adopt_options: %r is not a dict of pam_slurm_adopt arguments' % (options,))
        options = {}
    for key in sorted(options, key=str):
        value = options[key]
        text = str(value).lower() if isinstance(value, bool) else str(value)
        if isinstance(value, bool) and key == 'disable_x11':
            text = '1' if value else '0'
        if key not in PAM_ADOPT_OPTIONS:
            errors.append('slurm_pam_adopt_options: %s is not a pam_slurm_adopt argument this role knows (%s)'
                          % (key, ', '.join(sorted(PAM_ADOPT_OPTIONS))))
        elif text not in PAM_ADOPT_OPTIONS[key]:
            errors.append('slurm_pam_adopt_options: %s=%r is not accepted; one of %s'
                          % (key, value, ', '.join(PAM_ADOPT_OPTIONS[key])))
    user = spec.get('admin_user')
    if user and user != 'root' and not bad and groups:
        member_of = spec.get('admin_groups')
        if member_of is None:
            errors.append('slurm_pam_adopt_exempt_groups: the groups of %s (the account Ansible connects as) '
                          'could not be read on this host, so the role cannot tell whether pam_slurm_adopt '
                          'would lock it out; nothing was changed' % user)
        elif not set(member_of) & set(groups):
            errors.append('slurm_pam_adopt_exempt_groups: %s (the account Ansible connects as) is in none of '
                          '%s on this host (its groups: %s); pam_slurm_adopt would refuse its next SSH login. '
                          'Add it to one of them first or name one of its groups; nothing was changed'
                          % (user, ', '.join(groups), ', '.join(member_of) or 'none'))
    return errors


def pam_adopt_lines(groups, options=None):
    """The account lines for /etc/pam.d/sshd: members of an exempt group pass, everyone else must
    have a job on the node (pam_slurm_adopt last in the account stack)."""
    lines = ['account    sufficient   pam_succeed_if.so quiet user ingroup %s' % g for g in groups]
    args = []
    for key in sorted(options or {}):
        value = options[key]
        if isinstance(value, bool):
            value = ('1' if value else '0') if key == 'disable_x11' else str(value).lower()
        args.append('%s=%s' % (key, value))
    lines.append(' '.join(['account    required     pam_slurm_adopt.so'] + args))
    return lines


def innodb_buffer_pool(value, memtotal_mb, percent=10, minimum_mib=1024, maximum_mib=16384):
    """innodb_buffer_pool_size for slurmdbd's MariaDB: a given size as it is, or for 'auto' a share of
    the host's memory (percent), at least minimum_mib and at most maximum_mib, never more than half
    of the memory, in whole 128 MiB (MariaDB's allocation unit), as '<n>M'."""
    if value != 'auto':
        return value
    memory = _whole(memtotal_mb, 'memtotal_mb')
    size = max(int(minimum_mib), memory * int(percent) // 100)
    size = min(size, int(maximum_mib), memory // 2)
    size = max(128, size // 128 * 128)
    return '%dM' % size


_EXPECTED = {
    'slurm_gpu_type': 'an nvidia-smi product name and slurm_gpu_type_map as a dict of product name to GRES type',
    'slurm_parse_node_report': 'the text of `slurmd -C`',
    'slurm_node_record': 'a `slurmd -C` report, gpu_facts and host overrides (slurm_node_name, slurm_node_addr, '
                         'slurm_node_real_memory and slurm_real_memory_reserve_mib as whole MiB, slurm_gpu_type, '
                         'slurm_gpu_type_map as a dict, slurm_gpu_cores as a dict, slurm_node_features as a list)',
    'slurm_node_plan': 'a `slurmd -C` report (or empty), gpu_facts, the node settings (slurm_node_name, '
                       'slurm_node_addr, slurm_node_gpus, slurm_gpu_type, slurm_node_memory_mib, slurm_node_real_memory '
                       'and the slurm_real_memory_* reserve as whole MiB, slurm_gpu_type_map and slurm_gpu_cores as '
                       'dicts, slurm_node_features as a list) and the current record (or none)',
    'slurm_real_memory': 'the node memory, slurm_real_memory_reserve_mib, slurm_real_memory_reserve_percent and '
                         'slurm_real_memory_round_mib as whole numbers',
    'slurm_kept_nodes': 'the texts of the current slurm.conf and gres.conf',
    'slurm_cluster_nodes': 'a dict of compute host to {name, live, plan} and the kept nodes (slurm_kept_nodes)',
    'slurm_expand_files': 'a gres.conf File= value',
    'slurm_default_per_gpu': 'a list of node records',
    'slurm_shape_drain_plan': 'the lines of `scontrol --oneliner show node` and a dict of node name to a list of '
                              'problems',
    'slurm_nodes_not_ready': 'sinfo lines (%N %T) and a list of node names',
    'slurm_node_line': 'a node record from slurm_node_plan or slurm_node_record',
    'slurm_gres_lines': 'a list of node records from slurm_node_record',
    'slurm_default_mem_per_cpu': 'a list of node records with whole-number cpus and real_memory',
    'slurm_partition_lines': 'slurm_partitions as a list of {name, nodes, default, max_time, state, options}, '
                             'a dict of inventory host to Slurm node name and a list of absent hosts',
    'slurm_compress_files': 'a list of device file paths',
    'slurm_validate': 'a dict with controller, controllers, inventory, compute (a dict of host to node info), '
                      'partitions (slurm_partitions, a list of dicts) and conf_extra (a dict)',
    'slurm_conf_change': 'the old and new configuration texts',
    'slurm_cluster_action': 'a list of none/reconfigure/restart',
    'slurm_conf_file_change': 'a slurp result and a dict of file name to old text',
    'slurm_pam_adopt_errors': 'a dict with enabled, compute, exempt_groups (a list), options (a dict), prolog_flags '
                              '(a list), conf_extra (a dict), admin_user and admin_groups (a list or none)',
    'slurm_pam_adopt_lines': 'slurm_pam_adopt_exempt_groups (a list) and slurm_pam_adopt_options (a dict)',
    'slurm_innodb_buffer_pool': 'slurm_accounting_innodb_buffer_pool_size (auto or a size such as 4096M) and the '
                                'memory in MiB as a whole number',
}


class FilterModule(object):
    def filters(self):
        funcs = {
            'slurm_gpu_type': gpu_type,
            'slurm_parse_node_report': parse_node_report,
            'slurm_node_record': node_record,
            'slurm_node_plan': node_plan,
            'slurm_real_memory': real_memory,
            'slurm_kept_nodes': kept_nodes,
            'slurm_cluster_nodes': cluster_nodes,
            'slurm_expand_files': expand_files,
            'slurm_default_per_gpu': default_per_gpu,
            'slurm_shape_drain_plan': shape_drain_plan,
            'slurm_nodes_not_ready': nodes_not_ready,
            'slurm_node_line': node_line,
            'slurm_gres_lines': gres_lines,
            'slurm_default_mem_per_cpu': default_mem_per_cpu,
            'slurm_partition_lines': partition_lines,
            'slurm_compress_files': compress_files,
            'slurm_validate': validate,
            'slurm_conf_change': conf_change,
            'slurm_cluster_action': cluster_action,
            'slurm_conf_file_change': conf_file_change,
            'slurm_pam_adopt_errors': pam_adopt_errors,
            'slurm_pam_adopt_lines': pam_adopt_lines,
            'slurm_innodb_buffer_pool': innodb_buffer_pool,
        }
        return dict((name, guarded(name, _EXPECTED[name])(func)) for name, func in funcs.items())
