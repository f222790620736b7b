# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the swarm role and the day-2 playbooks: thin wrappers over module_utils/swarm.py.

Each turns the module's ValueError into an AnsibleFilterError that names the filter and what it takes.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.gpucluster.core.plugins.module_utils import swarm as sw

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - only without ansible-core installed
    class AnsibleFilterError(Exception):
        pass


def _run(name, function, *args):
    try:
        return function(*args)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise AnsibleFilterError('%s: %s' % (name, str(exc)[:600]))


def swarm_managers(groups, node_group='gpu_nodes', manager_group='swarm_managers'):
    """The manager hosts: the group ``manager_group`` when it has hosts, else the first 3 (or 1) of ``node_group``."""
    if not isinstance(groups, dict):
        raise AnsibleFilterError('swarm_managers: expected the groups variable, got %s' % type(groups).__name__)
    return _run('swarm_managers', sw.choose_managers, list(groups.get(node_group) or []),
                list(groups.get(manager_group) or []))


def swarm_env_name(kind):
    """The variable a task gets its GPUs in: DOCKER_RESOURCE_<KIND>."""
    return _run('swarm_env_name', sw.env_name, kind)


def swarm_generic_resources(uuids, kind):
    """["<kind>=<uuid>", ...] for node-generic-resources."""
    return _run('swarm_generic_resources', sw.generic_resources, kind, uuids)


def swarm_daemon_merge(text, kind, resources, what='/etc/docker/daemon.json'):
    """{needs_write, content}: daemon.json with this kind's generic resources set; other keys and kinds kept."""
    return _run('swarm_daemon_merge', sw.daemon_merge, text, kind, resources, what)


def swarm_running_resources(info_text):
    """The generic resources the running dockerd advertises (docker info --format '{{json .}}')."""
    return _run('swarm_running_resources', sw.running_resources, info_text)


def swarm_restart_plan(wanted, running, tasks_running):
    """{restart, pending, why}: restart dockerd for new generic resources only while no Swarm task runs."""
    return _run('swarm_restart_plan', sw.restart_plan, list(wanted or []), list(running or []), int(tasks_running))


def swarm_needs_legacy_mode(toolkit_version):
    """Whether the NVIDIA runtime needs mode legacy for swarm-resource to count (below 1.19.0 or unknown)."""
    return sw.needs_legacy_mode(toolkit_version)


def swarm_toolkit_config(text, kind, legacy):
    """{needs_write, content}: config.toml with swarm-resource from the kind (and mode legacy when asked)."""
    return _run('swarm_toolkit_config', sw.toolkit_config, text, kind, bool(legacy))


def swarm_state(info_text):
    """{state, node_id, manager, cluster_id, managers, node_addr, error} from docker info --format '{{json .}}'."""
    return _run('swarm_state', sw.swarm_state, info_text)


def swarm_join_plan(state, host, managers, cluster, init_in_run=False):
    """{action (init, join, none, error), role, error} for ``host``."""
    return _run('swarm_join_plan', sw.join_plan, host, state, list(managers), cluster, bool(init_in_run))


def swarm_address_problem(address, facts):
    """'' when ``address`` may carry Swarm's traffic, else why not (an IPoIB interface is the fabric's)."""
    if not isinstance(facts, dict):
        raise AnsibleFilterError('swarm_address_problem: expected the host facts, got %s' % type(facts).__name__)
    interfaces = {}
    for device in facts.get('interfaces') or []:
        data = facts.get(str(device).replace('-', '_').replace('.', '_')) or facts.get(device) or {}
        if not isinstance(data, dict):
            continue
        addresses = [(data.get('ipv4') or {}).get('address')] + [item.get('address') for item in data.get('ipv4_secondaries') or []
                                                                 if isinstance(item, dict)]
        addresses += [item.get('address') for item in data.get('ipv6') or [] if isinstance(item, dict)]
        interfaces[device] = {'type': data.get('type') or '', 'addresses': [a for a in addresses if a]}
    return _run('swarm_address_problem', sw.fabric_address_problem, address, interfaces)


def swarm_node_labels(devices, extra=None):
    """The GPU node labels (gpucluster.gpu.model, .count, .memory_mib) from gpu_facts' devices, plus ``extra``."""
    labels = _run('swarm_node_labels', sw.node_labels, devices)
    for key, value in (extra or {}).items():
        labels[str(key)] = str(value).lower() if isinstance(value, bool) else str(value)
    return labels


def swarm_role_changes(hosts_vars, role_lines, managers):
    """[{node_id, host, role}] of the nodes whose Swarm role must change, promotions first.

    ``hosts_vars``: the play's hosts' variables (``ansible_play_hosts | map('extract', hostvars)``), each with
    ``swarm_node_state`` when the role read it; ``role_lines``: ``<ID> <role>`` lines of docker node inspect.
    """
    roles = {}
    for line in role_lines or []:
        parts = str(line).split()
        if len(parts) == 2:
            roles[parts[0]] = parts[1]
    nodes = {}
    for item in hosts_vars or []:
        state = item.get('swarm_node_state') if hasattr(item, 'get') else None
        if isinstance(state, dict) and state.get('node_id'):
            nodes[str(item.get('inventory_hostname'))] = {'node_id': state['node_id'], 'role': roles.get(state['node_id'], '')}
    return _run('swarm_role_changes', sw.role_changes, nodes, list(managers))


class FilterModule(object):
    def filters(self):
        return {
            'swarm_managers': swarm_managers,
            'swarm_env_name': swarm_env_name,
            'swarm_generic_resources': swarm_generic_resources,
            'swarm_daemon_merge': swarm_daemon_merge,
            'swarm_running_resources': swarm_running_resources,
            'swarm_restart_plan': swarm_restart_plan,
            'swarm_needs_legacy_mode': swarm_needs_legacy_mode,
            'swarm_toolkit_config': swarm_toolkit_config,
            'swarm_state': swarm_state,
            'swarm_join_plan': swarm_join_plan,
            'swarm_node_labels': swarm_node_labels,
            'swarm_address_problem': swarm_address_problem,
            'swarm_role_changes': swarm_role_changes,
        }
