# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Decision code of the slurm role.

Pure functions over strings, lists and dicts: the node's own ``slurmd -C`` report, GPU facts
(``gpucluster.core.gpu_facts``) turned into GRES types and device files, the NodeName /
PartitionName / gres.conf lines, the cross-host validation that runs before any file changes,
and whether a configuration change can be applied with ``scontrol reconfigure`` or needs the
ordered restart.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import base64
import re

from ansible_collections.gpucluster.core.plugins.filter.config_values import guarded

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
    'PriorityType', 'ProctrackType', 'SelectType', 'SelectTypeParameters', 'SlurmctldHost',
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


def node_record(report, gpu=None, overrides=None):
    """One node's Slurm description from its ``slurmd -C`` report, GPU facts and host overrides.

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
        'gres': node_gres(gpu, o.get('gpu_type'), o.get('gpu_type_map'), o.get('gpu_cores')),
        'features': _features(o.get('features')),
        'weight': None if o.get('weight') in (None, '') else _whole(o.get('weight'), 'slurm node weight'),
    }
    return record


def _whole(value, name):
    """A whole number (int, or digits as text) or an AnsibleFilterError naming the variable."""
    if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, str) and value.strip().isdigit())):
        _fail('%s: %r is not a whole number' % (name, value))
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
    if node.get('gres'):
        words.append('Gres=' + ','.join('gpu:%s:%d' % (g['type'], g['count']) for g in node['gres']))
    if node.get('features'):
        words.append('Feature=' + ','.join(node['features']))
    if node.get('weight') not in (None, ''):
        words.append('Weight=%d' % int(node['weight']))
    words.append('State=UNKNOWN')
    return ' '.join(words)


def default_mem_per_cpu(nodes):
    """DefMemPerCPU: the smallest RealMemory per CPU of any node, so that a job that asks for no
    memory gets its share instead of the whole node (which would block every other job there)."""
    shares = [int(n['real_memory']) // max(int(n['cpus']), 1) for n in nodes or []]
    return max(min(shares), 1) if shares else 1


def gres_lines(nodes):
    """gres.conf lines for every node (the same file on every host).

    A group whose device files ascend in index order becomes one line with a bracket range;
    otherwise each GPU gets its own line, in index order, so Slurm's device order stays the PCI order.
    """
    lines = []
    for node in sorted(nodes, key=lambda n: n['name']):
        for g in node.get('gres') or []:
            minors = [int(f[len('/dev/nvidia'):]) for f in g['files']]
            same_cores = len(set(g.get('cores') or [''])) == 1
            if minors == sorted(minors) and same_cores:
                entries = [(compress_files(g['files']), (g.get('cores') or [''])[0])]
            else:
                entries = list(zip(g['files'], g.get('cores') or [''] * len(g['files'])))
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


def partition_lines(partitions, nodes):
    """PartitionName lines. ``nodes`` maps inventory hostname -> Slurm node name."""
    by_name = set(nodes.values())
    lines = []
    for p in partitions:
        members = p.get('nodes')
        if members in (None, 'ALL', ['ALL']):
            names = sorted(by_name)
        else:
            names = []
            for entry in members:
                name = _resolve(entry, nodes, by_name)
                if name is None:
                    _fail('slurm_partitions: partition %s names %r, which is neither a host of the compute '
                          'group nor a Slurm node name' % (p.get('name'), entry))
                if name not in names:
                    names.append(name)
        words = ['PartitionName=%s' % p['name'], 'Nodes=%s' % ','.join(names)]
        words.append('Default=%s' % ('YES' if p.get('default') else 'NO'))
        words.append('MaxTime=%s' % p.get('max_time', 'INFINITE'))
        words.append('State=%s' % p.get('state', 'UP'))
        for key in sorted(p.get('options') or {}):
            words.append('%s=%s' % (key, p['options'][key]))
        lines.append(' '.join(words))
    return lines


def validate(spec):
    """Everything wrong with the cluster description, as readable messages (empty when fine).

    spec keys:
      controller: the host named as controller; inventory: all inventory hostnames;
      controllers: hosts of the controller group; compute: {inventory host: {node_name,
      memtotal_mib, real_memory, gpu_type}}; partitions: list; conf_extra: dict.
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
        mem = info.get('real_memory')
        total = info.get('memtotal_mib')
        if mem not in (None, '', 0):
            if not isinstance(mem, int) or isinstance(mem, bool) or mem < 1:
                errors.append('slurm_node_real_memory: %s has %r; use a whole number of MiB' % (host, mem))
            elif total and mem > int(total):
                errors.append('slurm_node_real_memory: %s has %d MiB but the host has %d MiB'
                              % (host, mem, int(total)))
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
                unknown = [m for m in members if _resolve(m, by_host, set(names)) is None]
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


_EXPECTED = {
    'slurm_gpu_type': 'an nvidia-smi product name and slurm_gpu_type_map as a dict of product name to GRES type',
    'slurm_parse_node_report': 'the text of `slurmd -C`',
    'slurm_node_record': 'a `slurmd -C` report, gpu_facts and host overrides (slurm_node_name, slurm_node_addr, '
                         'slurm_node_real_memory and slurm_real_memory_reserve_mib as whole MiB, slurm_gpu_type, '
                         'slurm_gpu_type_map as a dict, slurm_gpu_cores as a dict, slurm_node_features as a list)',
    'slurm_node_line': 'a node record from slurm_node_record',
    'slurm_gres_lines': 'a list of node records from slurm_node_record',
    'slurm_default_mem_per_cpu': 'a list of node records with whole-number cpus and real_memory',
    'slurm_partition_lines': 'slurm_partitions as a list of {name, nodes, default, max_time, state, options} '
                             'and a dict of inventory host to Slurm node name',
    'slurm_compress_files': 'a list of device file paths',
    'slurm_validate': 'a dict with controller, controllers, inventory, compute (a dict of host to node info), '
                      'partitions (slurm_partitions, a list of dicts) and conf_extra (a dict)',
    'slurm_conf_change': 'the old and new configuration texts',
    'slurm_cluster_action': 'a list of none/reconfigure/restart',
    'slurm_conf_file_change': 'a slurp result and a dict of file name to old text',
}


class FilterModule(object):
    def filters(self):
        funcs = {
            'slurm_gpu_type': gpu_type,
            'slurm_parse_node_report': parse_node_report,
            'slurm_node_record': node_record,
            'slurm_node_line': node_line,
            'slurm_gres_lines': gres_lines,
            'slurm_default_mem_per_cpu': default_mem_per_cpu,
            'slurm_partition_lines': partition_lines,
            'slurm_compress_files': compress_files,
            'slurm_validate': validate,
            'slurm_conf_change': conf_change,
            'slurm_cluster_action': cluster_action,
            'slurm_conf_file_change': conf_file_change,
        }
        return dict((name, guarded(name, _EXPECTED[name])(func)) for name, func in funcs.items())
