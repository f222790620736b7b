# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the Kubernetes roles (k8s_node, k8s_control_plane, k8s_gpu): thin adapters over
plugins/module_utils/k8s.py, where each decision lives and is documented.

    errors:  "{{ k8s_node_version | gpucluster.core.k8s_version_errors('k8s_node_version') }}"
    minor:   "{{ k8s_node_version | gpucluster.core.k8s_minor }}"                 -> '1.35'
    specs:   "{{ k8s_node_version | gpucluster.core.k8s_package_specs('1.1', 'apt') }}"
    repo:    "{{ k8s_node_repo_url | gpucluster.core.k8s_repo_errors(k8s_node_version) }}"
    network: "{{ pod | gpucluster.core.k8s_network_errors(service, {node: cidr, ...}) }}"
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

from ansible_collections.gpucluster.core.plugins.filter.config_values import guarded
from ansible_collections.gpucluster.core.plugins.module_utils import k8s

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - only without ansible-core installed
    class AnsibleFilterError(Exception):
        pass


def k8s_minor(version):
    return k8s.minor(version)


def k8s_version_errors(version, var='k8s_node_version'):
    return k8s.check_version(version, var)


def k8s_package_specs(version, revision, pkg_mgr='apt'):
    return k8s.package_specs(version, revision, pkg_mgr)


def k8s_repo_errors(url, version, url_var='k8s_node_repo_url', version_var='k8s_node_version'):
    return k8s.repo_errors(url, version, url_var, version_var)


def k8s_endpoint_errors(endpoint, var='k8s_control_plane_endpoint'):
    return k8s.endpoint_errors(endpoint, var)


def k8s_network_errors(pod_cidr, service_cidr, cluster_networks, pod_var='k8s_control_plane_pod_cidr',
                       service_var='k8s_control_plane_service_cidr'):
    return k8s.network_errors(pod_cidr, service_cidr, cluster_networks, pod_var, service_var)


def k8s_cni_errors(cni, pod_cidr):
    return k8s.cni_errors(cni, pod_cidr)


def k8s_device_plugin_config(mig_strategy='none', replicas=0, rename_by_default=False,
                             fail_requests_greater_than_one=True, device_list_strategy='envvar'):
    try:
        return k8s.device_plugin_config(mig_strategy, replicas, rename_by_default, fail_requests_greater_than_one,
                                        device_list_strategy)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc))


def k8s_operator_values(base, overrides, var='k8s_gpu_operator_values'):
    values, errors = k8s.operator_values(base, overrides, var)
    return {'values': values, 'errors': errors}


def k8s_join(text):
    """{endpoint, token, ca_cert_hashes} of `kubeadm token create --print-join-command` (secret: no_log)."""
    try:
        return k8s.parse_join_command(text)
    except ValueError as exc:
        raise AnsibleFilterError('k8s_join: %s' % exc)


def k8s_rdma_resource(entry):
    return k8s.rdma_resource(entry)


def k8s_rdma_resource_errors(resources, var='k8s_gpu_rdma_resources'):
    return k8s.rdma_resource_errors(resources, var)


_EXPECTED = {
    'k8s_minor': 'a Kubernetes release "X.Y.Z" (k8s_node_version)',
    'k8s_version_errors': 'a version and the name of its variable',
    'k8s_package_specs': 'k8s_node_version, k8s_node_package_revision (such as "1.1") and apt or dnf',
    'k8s_repo_errors': 'k8s_node_repo_url and k8s_node_version',
    'k8s_endpoint_errors': 'k8s_control_plane_endpoint',
    'k8s_network_errors': 'the pod network, the service network and a dict of node name to network',
    'k8s_cni_errors': 'k8s_control_plane_cni and k8s_control_plane_pod_cidr',
    'k8s_device_plugin_config': 'k8s_gpu_mig_strategy, k8s_gpu_time_slicing_replicas and the sharing flags',
    'k8s_operator_values': "the role's Operator values (a dict) and k8s_gpu_operator_values (a dict)",
    'k8s_join': 'the output of kubeadm token create --print-join-command',
    'k8s_rdma_resource': 'one entry of k8s_gpu_rdma_resources',
    'k8s_rdma_resource_errors': 'k8s_gpu_rdma_resources',
}


class FilterModule(object):
    def filters(self):
        funcs = {
            'k8s_minor': k8s_minor,
            'k8s_version_errors': k8s_version_errors,
            'k8s_package_specs': k8s_package_specs,
            'k8s_repo_errors': k8s_repo_errors,
            'k8s_endpoint_errors': k8s_endpoint_errors,
            'k8s_network_errors': k8s_network_errors,
            'k8s_cni_errors': k8s_cni_errors,
            'k8s_device_plugin_config': k8s_device_plugin_config,
            'k8s_operator_values': k8s_operator_values,
            'k8s_join': k8s_join,
            'k8s_rdma_resource': k8s_rdma_resource,
            'k8s_rdma_resource_errors': k8s_rdma_resource_errors,
        }
        return dict((name, guarded(name, _EXPECTED[name])(func)) for name, func in funcs.items())
