# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the swarm and monitoring roles and the day-2 playbooks: thin wrappers over module_utils/swarm.py,
where every decision is (and its unit tests).

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
    return _run('swarm_managers', sw.managers_from_groups, groups, node_group, manager_group)


def swarm_default_port(name):
    """The port Swarm uses for ``name`` (control, gossip, vxlan): the control plane's is swarm_port's default."""
    return _run('swarm_default_port', sw.default_port, name)


def swarm_ports(protocol, control_port=None):
    """The ports Swarm uses over ``protocol`` (tcp or udp), the control plane on ``control_port`` (swarm_port)."""
    return _run('swarm_ports', sw.ports, protocol, control_port)


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
    return _run('swarm_restart_plan', sw.restart_plan, wanted, running, tasks_running)


def swarm_needs_legacy_mode(toolkit_version):
    """Whether the NVIDIA runtime needs mode legacy for swarm-resource to count (below 1.19.0 or unknown)."""
    return _run('swarm_needs_legacy_mode', sw.needs_legacy_mode, toolkit_version)


def swarm_toolkit_config(text, kind, legacy):
    """{needs_write, content}: config.toml with swarm-resource from the kind (and mode legacy when asked)."""
    return _run('swarm_toolkit_config', sw.toolkit_config, text, kind, legacy)


def swarm_state(info_text):
    """{state, node_id, manager, cluster_id, managers, node_addr, error} from docker info --format '{{json .}}'."""
    return _run('swarm_state', sw.swarm_state, info_text)


def swarm_join_plan(state, host, managers, cluster, init_in_run=False):
    """{action (init, join, none, error), role, error} for ``host``."""
    return _run('swarm_join_plan', sw.join_plan, host, state, managers, cluster, init_in_run)


def swarm_address_problem(address, facts):
    """'' when ``address`` may carry Swarm's traffic, else why not (an IPoIB interface is the fabric's)."""
    return _run('swarm_address_problem', sw.address_problem, address, facts)


def swarm_node_labels(devices, extra=None):
    """The GPU node labels (gpucluster.gpu.model, .count, .memory_mib) from gpu_facts' devices, plus ``extra``."""
    return _run('swarm_node_labels', sw.node_labels, devices, extra)


def swarm_role_changes(hosts_vars, role_lines, managers):
    """[{node_id, host, role}] of the nodes whose Swarm role must change, promotions first.

    ``hosts_vars``: the play's hosts' variables (``ansible_play_hosts | map('extract', hostvars)``), each with
    ``swarm_node_state`` when the role read it; ``role_lines``: ``<ID> <role>`` lines of docker node inspect.
    """
    return _run('swarm_role_changes', sw.play_role_changes, hosts_vars, role_lines, managers)


class FilterModule(object):
    def filters(self):
        return {
            'swarm_managers': swarm_managers,
            'swarm_default_port': swarm_default_port,
            'swarm_ports': swarm_ports,
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
