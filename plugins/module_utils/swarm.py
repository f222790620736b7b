# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Docker Swarm with GPUs: the decisions of the swarm role and the day-2 playbooks, in one place.

Pure functions: standard library only, Python 3.9+, no Ansible imports. plugins/filter/swarm.py adapts
them; the role's tasks run the commands.

How a GPU reaches a Swarm task (docs: roles/swarm/README.md)
------------------------------------------------------------
- The node's dockerd advertises each GPU as a generic resource, ``"node-generic-resources":
  ["<KIND>=<GPU UUID>", ...]`` in daemon.json, read when dockerd starts (a reload does not apply it).
- A service reserves them (``--generic-resource <KIND>=1``); swarmkit hands each task the ids it was
  given in the variable ``DOCKER_RESOURCE_<KIND upper-cased>`` (comma-separated), ``env_name``.
- The NVIDIA container runtime exposes exactly the GPUs named in the variable that ``swarm-resource``
  in /etc/nvidia-container-runtime/config.toml names. The kind and that setting come from one
  variable here (``swarm_gpu_resource_kind``), so they cannot disagree (nvidia-container-toolkit#57).
- From 1.18 the runtime's default mode (jit-cdi) ignores ``swarm-resource`` (nvidia-container-toolkit
  #1599, fixed for 1.19.0 by #1600): below 1.19.0, or when the installed version is not known, the
  runtime's mode is set to ``legacy`` (``needs_legacy_mode``).

Managers
--------
``choose_managers``: the hosts of the group ``swarm_managers`` when the inventory has it, else the first
three nodes of the swarm's group (inventory order) when it has three or more, else the first one. An
even number of managers is refused: two managers tolerate no more failures than one, and lose quorum
when either stops.

Ports
-----
``PORTS`` is the one table of the ports Swarm uses: the control plane (TCP, the default of the swarm role's
``swarm_port``), gossip (TCP and UDP) and the overlay's VXLAN data (UDP). The swarm role takes its port from it,
the monitoring role's nftables table admits all of them from the cluster network only (``ports``).
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import re
from collections.abc import Mapping

from ansible_collections.gpucluster.core.plugins.module_utils import swarm_report
from ansible_collections.gpucluster.core.plugins.module_utils.json_object import load_object

KIND_RE = re.compile(r'[A-Za-z][A-Za-z0-9_]{0,62}\Z')
ENV_PREFIX = 'DOCKER_RESOURCE_'
# The first NVIDIA Container Toolkit release whose default mode honours swarm-resource again.
TOOLKIT_SWARM_FIXED = (1, 19, 0)
DAEMON_KEY = 'node-generic-resources'
TOML_TABLE = 'nvidia-container-runtime'
LOCAL_STATES = ('inactive', 'pending', 'active', 'error', 'locked')
LABEL_PREFIX = 'gpucluster.gpu.'
# The ports Swarm uses (Docker's "open protocols and ports"), in one place. The control plane's is where a site may
# move it (swarm_port); gossip and the overlay's VXLAN data stay on Docker's ports, which the swarm role never sets.
# VXLAN is not authenticated: only the cluster network may send it.
PORTS = (
    {'name': 'control', 'port': 2377, 'protocols': ('tcp',), 'use': 'cluster management (the managers)'},
    {'name': 'gossip', 'port': 7946, 'protocols': ('tcp', 'udp'), 'use': 'node discovery (gossip)'},
    {'name': 'vxlan', 'port': 4789, 'protocols': ('udp',), 'use': 'overlay network data (VXLAN)'},
)
CONTROL_PORT_VAR = 'swarm_port'


def check_kind(kind):
    """The generic resource kind, or ValueError naming what is accepted."""
    if not isinstance(kind, str) or not KIND_RE.match(kind):
        raise ValueError('swarm_gpu_resource_kind must be a letter followed by letters, digits or _ (at most 63), '
                         'got %r: a hyphen (NVIDIA-GPU) makes DOCKER_RESOURCE_NVIDIA-GPU, which shells drop' % (kind,))
    return kind


def env_name(kind):
    """The variable swarmkit sets in a task for ``kind`` (DOCKER_RESOURCE_ + the kind upper-cased)."""
    return ENV_PREFIX + check_kind(kind).upper()


def generic_resources(kind, uuids):
    """``["<kind>=<uuid>", ...]`` for the node's GPUs, in the order given (nvidia-smi's)."""
    check_kind(kind)
    if not isinstance(uuids, (list, tuple)):
        raise ValueError('the GPU UUIDs must be a list, got %s' % type(uuids).__name__)
    out = []
    for uuid in uuids:
        if not isinstance(uuid, str) or not re.match(r'(GPU|MIG)-[0-9A-Za-z-]{8,}\Z', uuid):
            raise ValueError('%r is not a GPU UUID as nvidia-smi prints it (GPU-...)' % (uuid,))
        if uuid in (item.split('=', 1)[1] for item in out):
            raise ValueError('GPU UUID %s is listed twice' % uuid)
        out.append('%s=%s' % (kind, uuid))
    return out


def _version(text):
    match = re.match(r'\s*v?(\d+)\.(\d+)\.(\d+)', text or '') if isinstance(text, str) else None
    return tuple(int(part) for part in match.groups()) if match else None


def needs_legacy_mode(toolkit_version):
    """Whether the runtime must run in legacy mode for swarm-resource to count (unknown version: yes)."""
    version = _version(toolkit_version)
    return version is None or version < TOOLKIT_SWARM_FIXED


def default_port(name):
    """The port of ``name`` (control, gossip, vxlan) in PORTS; the control plane's is swarm_port's default."""
    for entry in PORTS:
        if entry['name'] == name:
            return entry['port']
    raise ValueError('%r is not one of Swarm\'s ports (%s)' % (name, ', '.join(entry['name'] for entry in PORTS)))


def ports(protocol, control_port=None):
    """The ports Swarm uses over ``protocol`` (tcp or udp), sorted, the control plane on ``control_port``.

    ``control_port``: swarm_port (None or '': the table's). A control port on another of Swarm's TCP ports is
    refused: dockerd could not listen on both.
    """
    if protocol not in ('tcp', 'udp'):
        raise ValueError('the protocol must be tcp or udp, got %r' % (protocol,))
    control = default_port('control') if control_port in (None, '') else _port(control_port, CONTROL_PORT_VAR)
    out = set()
    for entry in PORTS:
        port = control if entry['name'] == 'control' else entry['port']
        if entry['name'] != 'control' and port == control and 'tcp' in entry['protocols']:
            raise ValueError('%s = %d is Swarm\'s %s port (%s): choose another'
                             % (CONTROL_PORT_VAR, control, entry['name'], entry['use']))
        if protocol in entry['protocols']:
            out.add(port)
    return sorted(out)


def _port(value, what):
    """``value`` as a port number (1-65535; a string of digits too), or ValueError naming ``what``."""
    text = str(value).strip() if not isinstance(value, bool) and isinstance(value, (int, str)) else ''
    if not text.isdecimal() or not 1 <= int(text) <= 65535:
        raise ValueError('%s must be a port number (1-65535), got %r' % (what, value))
    return int(text)


def choose_managers(nodes, explicit=None):
    """The manager hosts (see the module's documentation); ValueError on a choice that cannot work."""
    if not isinstance(nodes, (list, tuple)) or not all(isinstance(n, str) and n for n in nodes):
        raise ValueError('the swarm nodes must be a list of host names, got %r' % (nodes,))
    if not nodes:
        raise ValueError('the swarm has no nodes: its group is empty')
    if explicit:
        if not isinstance(explicit, (list, tuple)) or not all(isinstance(n, str) and n for n in explicit):
            raise ValueError('the group swarm_managers must list host names, got %r' % (explicit,))
        strangers = [n for n in explicit if n not in nodes]
        if strangers:
            raise ValueError('swarm_managers names %s, which %s not in the swarm\'s nodes (%s)'
                             % (', '.join(strangers), 'is' if len(strangers) == 1 else 'are', ', '.join(nodes)))
        managers = list(dict.fromkeys(explicit))
    else:
        managers = list(nodes[:3] if len(nodes) >= 3 else nodes[:1])
    if len(managers) % 2 == 0:
        raise ValueError('swarm_managers has %d hosts (%s): use an odd number (1, 3 or 5); %d managers tolerate no '
                         'more failures than %d would' % (len(managers), ', '.join(managers), len(managers), len(managers) - 1))
    return managers


def managers_from_groups(groups, node_group, manager_group):
    """choose_managers over the inventory's ``groups``: the nodes of ``node_group``, the explicit managers of
    ``manager_group`` (a group that is missing or empty chooses them from the nodes)."""
    if not isinstance(groups, Mapping):
        raise ValueError('expected the groups variable, got %s' % type(groups).__name__)
    return choose_managers(list(groups.get(node_group) or []), list(groups.get(manager_group) or []))


def daemon_merge(text, kind, resources, what='/etc/docker/daemon.json'):
    """daemon.json text with this kind's ``node-generic-resources`` replaced by ``resources``.

    Entries of other kinds (a site's own) are kept, in their order, before ours. Returns
    {'needs_write': bool, 'content': str}; content is the input itself when nothing changes.
    """
    check_kind(kind)
    data = load_object(text, what)
    current = data.get(DAEMON_KEY, [])
    if not isinstance(current, list) or not all(isinstance(item, str) for item in current):
        raise ValueError('%s: "%s" must be a list of "KIND=value" strings, found %s'
                         % (what, DAEMON_KEY, json.dumps(current)[:200]))
    keep = [item for item in current if item.split('=', 1)[0] != kind]
    wanted = keep + list(resources)
    new = dict(data)
    if wanted:
        new[DAEMON_KEY] = wanted
    else:
        new.pop(DAEMON_KEY, None)
    if new == data and (text or '').strip():
        return {'needs_write': False, 'content': text}
    return {'needs_write': True, 'content': json.dumps(new, indent=2) + '\n'}


def running_resources(info_text):
    """``["KIND=value", ...]`` the running dockerd advertises, from ``docker info --format '{{json .}}'``."""
    data = load_object(info_text, 'the output of docker info', advice='')
    out = []
    for item in data.get('GenericResources') or []:
        if not isinstance(item, dict):
            continue
        for key, fmt in (('DiscreteResourceSpec', '%s=%s'), ('NamedResourceSpec', '%s=%s')):
            spec = item.get(key)
            if isinstance(spec, dict) and isinstance(spec.get('Kind'), str):
                out.append(fmt % (spec['Kind'], spec.get('Value')))
    return out


def restart_plan(wanted, running, tasks_running):
    """Whether dockerd must restart to advertise ``wanted``, and whether it may now.

    {'restart': bool, 'pending': bool, 'why': str}: a restart stops every container on the node
    (live-restore is not available in swarm mode), so it is never done while Swarm tasks run there;
    the node is drained first (rolling_upgrade.yml) and the next run restarts it.
    """
    wanted, running = list(wanted or []), list(running or [])
    if isinstance(tasks_running, bool) or not str(tasks_running).strip().isdecimal():
        raise ValueError('the number of Swarm task containers running must be a count, got %r' % (tasks_running,))
    tasks_running = int(str(tasks_running).strip())
    if sorted(wanted) == sorted(running):
        return {'restart': False, 'pending': False, 'why': ''}
    why = 'dockerd advertises %s, daemon.json says %s' % (', '.join(sorted(running)) or 'no generic resources',
                                                          ', '.join(sorted(wanted)) or 'none')
    if tasks_running:
        return {'restart': False, 'pending': True,
                'why': why + '; %d Swarm task container(s) run here, so dockerd was not restarted: drain the node '
                             '(rolling_upgrade.yml, or docker node update --availability drain) and run again'
                             % tasks_running}
    return {'restart': True, 'pending': False, 'why': why}


_TABLE_RE = re.compile(r'\s*\[\s*([^\]\s]+)\s*\]\s*(#.*)?\Z')


def _key_re(key):
    return re.compile(r'\s*(#\s*)?"?%s"?\s*=' % re.escape(key))


def _set_key(lines, start, end, key, value):
    """Set ``key = value`` between lines[start:end]; returns the new lines."""
    active = [i for i in range(start, end) if _key_re(key).match(lines[i]) and not lines[i].lstrip().startswith('#')]
    wanted = '%s = %s' % (key, value)
    if active:
        first = active[0]
        lines = [line for i, line in enumerate(lines) if i not in active[1:]]
        lines[first] = wanted
        return lines
    commented = [i for i in range(start, end) if _key_re(key).match(lines[i])]
    at = commented[0] + 1 if commented else start
    return lines[:at] + [wanted] + lines[at:]


def toolkit_config(text, kind, legacy):
    """config.toml of the NVIDIA container runtime with ``swarm-resource`` (and mode legacy when asked).

    Only these keys change; every other line stays as it is. Returns {'needs_write', 'content'}.
    """
    name = env_name(kind)
    text = text if isinstance(text, str) else ''
    lines = text.splitlines()
    tables = [(i, m.group(1)) for i, m in ((i, _TABLE_RE.match(line)) for i, line in enumerate(lines)) if m]
    first_table = tables[0][0] if tables else len(lines)
    # swarm-resource is a top-level key: before the first table.
    lines = _set_key(lines, 0, first_table, 'swarm-resource', json.dumps(name))
    if legacy:
        tables = [(i, m.group(1)) for i, m in ((i, _TABLE_RE.match(line)) for i, line in enumerate(lines)) if m]
        found = [n for n, (i, table) in enumerate(tables) if table == TOML_TABLE]
        if found:
            n = found[0]
            start = tables[n][0] + 1
            end = tables[n + 1][0] if n + 1 < len(tables) else len(lines)
            lines = _set_key(lines, start, end, 'mode', '"legacy"')
        else:
            lines = lines + ['', '[%s]' % TOML_TABLE, 'mode = "legacy"']
    content = '\n'.join(lines) + '\n'
    if content == text or (content.rstrip('\n') == text.rstrip('\n') and text.endswith('\n')):
        return {'needs_write': False, 'content': text}
    return {'needs_write': True, 'content': content}


def swarm_state(info_text):
    """{state, node_id, manager, cluster_id, managers, node_addr, error} from ``docker info --format '{{json .}}'``.

    Read by module_utils/swarm_report.py (the one parser of docker info, which stack_facts reports from); a
    docker info that cannot be read is the state unknown with the reason in error.
    """
    report = swarm_report.from_info(info_text if isinstance(info_text, str) else '')
    return {'state': report['state'], 'node_id': report['node_id'], 'manager': report['role'] == 'manager',
            'cluster_id': report['cluster_id'], 'managers': sorted(m['addr'] for m in report['managers'] if m['addr']),
            'node_addr': report['node_addr'], 'error': report['error']}


def address_host(address):
    """The host part of ``10.0.0.1:2377``, ``[fd00::1]:2377`` or a bare address."""
    address = str(address or '')
    match = re.match(r'\[([^\]]+)\](:\d+)?\Z', address)
    if match:
        return match.group(1)
    if address.count(':') == 1:
        return address.split(':', maxsplit=1)[0]
    return address


def join_plan(host, state, managers, cluster, init_in_run=False):
    """What this host must do to be in the cluster's swarm with its role.

    ``state``: swarm_state of the host; ``managers``: the manager hosts, the first one initialises;
    ``cluster``: {'cluster_id', 'manager_addrs'} as read from the managers already in the swarm
    (empty cluster_id: none is); ``init_in_run``: the first manager initialises the swarm in this run, so
    the others join it afterwards. Returns {'action', 'role', 'error'}; action one of init, join, none,
    error. Leaving another swarm, or a locked one, is an operator's decision: refused with what to do.
    """
    managers = list(managers or [])
    if not managers:
        raise ValueError('no manager chosen for %s: the swarm needs at least one' % host)
    if not isinstance(state, Mapping) or not isinstance(cluster, Mapping):
        raise ValueError('%s: expected its swarm_state and the cluster seen as mappings, got %s and %s'
                         % (host, type(state).__name__, type(cluster).__name__))
    role = 'manager' if host in managers else 'worker'
    local = state.get('state')
    cluster_id = cluster.get('cluster_id') or ''
    if local == 'locked':
        return {'action': 'error', 'role': role,
                'error': '%s: its swarm is locked (autolock): unlock it with docker swarm unlock and the key, then '
                         'run again' % host}
    if local in ('pending', 'error'):
        return {'action': 'error', 'role': role,
                'error': '%s: its swarm membership is %s (%s); see docker info, then docker swarm leave --force '
                         'by hand and run again' % (host, local, state.get('error') or 'no detail')}
    if local == 'active':
        if cluster_id and state.get('cluster_id') and state['cluster_id'] != cluster_id:
            return {'action': 'error', 'role': role,
                    'error': '%s is in another swarm (cluster %s; this cluster is %s on %s). It is never taken out '
                             'of a swarm by this role: docker swarm leave --force on it, then run again'
                             % (host, state['cluster_id'][:12], cluster_id[:12], managers[0])}
        if not state.get('cluster_id') and not state.get('manager') and cluster_id and \
                not set(map(address_host, state.get('managers') or [])) & set(map(address_host, cluster.get('manager_addrs') or [])):
            return {'action': 'error', 'role': role,
                    'error': '%s is a worker of a swarm whose managers are %s, not this cluster\'s (%s). Leave it by '
                             'hand (docker swarm leave) and run again'
                             % (host, ', '.join(state.get('managers') or []) or 'unknown',
                                ', '.join(cluster.get('manager_addrs') or []))}
        return {'action': 'none', 'role': role, 'error': ''}
    if local != 'inactive':
        return {'action': 'error', 'role': role,
                'error': '%s: docker info reports the swarm state %r; expected inactive or active%s'
                         % (host, local, (' (%s)' % state['error']) if state.get('error') else '')}
    if not cluster_id:
        if host == managers[0]:
            return {'action': 'init', 'role': role, 'error': ''}
        if init_in_run:
            return {'action': 'join', 'role': role, 'error': ''}
        return {'action': 'error', 'role': role,
                'error': '%s cannot join: no manager is in a swarm yet (the first manager %s initialises it in this '
                         'play; is it in the run?)' % (host, managers[0])}
    return {'action': 'join', 'role': role, 'error': ''}


def node_labels(devices, extra=None):
    """The node labels: those that describe its GPUs (model, count and memory in MiB, from gpu_facts' devices), then
    ``extra`` (swarm_node_labels), each value as Docker stores it: a string, true/false for a boolean."""
    if extra is not None and not isinstance(extra, Mapping):
        raise ValueError('swarm_node_labels must be a mapping of label names to values, got %s' % type(extra).__name__)
    devices = [d for d in devices or [] if isinstance(d, dict)]
    names = sorted(set(str(d.get('name') or '') for d in devices if d.get('name')))
    memory = [d.get('memory_total_mib') for d in devices if isinstance(d.get('memory_total_mib'), (int, float))]
    labels = {LABEL_PREFIX + 'count': str(len(devices))}
    if names:
        labels[LABEL_PREFIX + 'model'] = ' + '.join(names)
    if memory:
        labels[LABEL_PREFIX + 'memory_mib'] = str(int(min(memory)))
    for key, value in (extra or {}).items():
        labels[str(key)] = label_value(value)
    return labels


def label_value(value):
    """A label's value as Docker stores it: a string; a boolean as true or false (as YAML writes it), not True."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def node_roles(lines):
    """{node_id: role} from the ``<ID> <role>`` lines of ``docker node inspect --format '{{.ID}} {{.Spec.Role}}'``;
    a line of another shape (a warning, an empty line) is no node's."""
    roles = {}
    for line in lines or []:
        parts = str(line).split()
        if len(parts) == 2:
            roles[parts[0]] = parts[1]
    return roles


def play_nodes(hosts_vars, role_lines):
    """{host: {'node_id', 'role'}} for role_changes: the play's hosts whose ``swarm_node_state`` has a node id,
    each with its role as the manager read it (``node_roles``; '' when it was not read).

    ``hosts_vars``: each host's variables (``ansible_play_hosts | map('extract', hostvars)``), mappings with
    ``inventory_hostname``; a host the role did not read (no ``swarm_node_state``) is left out.
    """
    roles = node_roles(role_lines)
    nodes = {}
    for item in hosts_vars or []:
        state = item.get('swarm_node_state') if hasattr(item, 'get') else None
        if isinstance(state, Mapping) and state.get('node_id'):
            nodes[str(item.get('inventory_hostname'))] = {'node_id': state['node_id'], 'role': roles.get(state['node_id'], '')}
    return nodes


def play_role_changes(hosts_vars, role_lines, managers):
    """role_changes of the play's hosts (``play_nodes``) for the chosen ``managers``."""
    return role_changes(play_nodes(hosts_vars, role_lines), list(managers or []))


def role_changes(nodes, managers):
    """[{'node_id', 'host', 'role'}] of the nodes whose Swarm role differs from the wanted one.

    ``nodes``: {host: {'node_id', 'role'}} as read from ``docker node inspect`` on a manager.
    Promotions come first, so that quorum never shrinks in between.
    """
    changes = []
    for host in sorted(nodes):
        item = nodes[host] or {}
        wanted = 'manager' if host in managers else 'worker'
        if item.get('node_id') and item.get('role') != wanted:
            changes.append({'node_id': item['node_id'], 'host': host, 'role': wanted})
    return sorted(changes, key=lambda c: (c['role'] != 'manager', c['host']))


def fabric_address_problem(address, interfaces):
    """'' when ``address`` may carry Swarm's traffic, else why not.

    ``interfaces``: {device: {'type': str, 'addresses': [str]}} (the host's facts, reduced). Swarm's
    control and data traffic (VXLAN) belongs on the management network: an IPoIB interface is the RDMA
    fabric, whose bandwidth is the jobs'.
    """
    for device in sorted(interfaces or {}):
        item = interfaces[device] or {}
        if address in (item.get('addresses') or []):
            if item.get('type') == 'infiniband' or re.match(r'ib[a-z0-9]', device):
                return ('%s is on %s, an IPoIB interface of the RDMA fabric: Swarm\'s control and overlay traffic '
                        'belongs on the management network (set swarm_cluster_network or swarm_cluster_interface)'
                        % (address, device))
            return ''
    return ''


def host_interfaces(facts):
    """{device: {'type', 'addresses'}} from a host's facts (``ansible_facts``): for each device of ``interfaces``, its
    entry (named with - and . as _) gives the type and the IPv4 address, secondary ones and the IPv6 ones."""
    if not isinstance(facts, Mapping):
        raise ValueError('expected the host facts, got %s' % type(facts).__name__)
    interfaces = {}
    for device in facts.get('interfaces') or []:
        data = facts.get(str(device).replace('-', '_').replace('.', '_')) or facts.get(device) or {}
        if not isinstance(data, Mapping):
            continue
        addresses = [(data.get('ipv4') or {}).get('address')]
        addresses += [item.get('address') for item in data.get('ipv4_secondaries') or [] if isinstance(item, Mapping)]
        addresses += [item.get('address') for item in data.get('ipv6') or [] if isinstance(item, Mapping)]
        interfaces[device] = {'type': data.get('type') or '', 'addresses': [a for a in addresses if a]}
    return interfaces


def address_problem(address, facts):
    """fabric_address_problem over a host's facts: '' when ``address`` may carry Swarm's traffic, else why not."""
    return fabric_address_problem(address, host_interfaces(facts))
