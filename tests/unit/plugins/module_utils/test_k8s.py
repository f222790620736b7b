# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""module_utils/k8s.py: the Kubernetes roles' decisions, each with its exact outcome (accepted, or refused
with a message naming the variable)."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible_collections.gpucluster.core.plugins.module_utils import k8s

PKGS = 'https://pkgs.k8s.io/core:/stable:/v1.35/deb/'


@pytest.mark.parametrize('version, fragment', [
    ('1.35.0', None),
    ('1.31.14', None),
    ('1.40.2', None),
    ('1.30.9', 'kubeadm reads from 1.31 on'),
    ('v1.35.0', 'give one exact Kubernetes release as X.Y.Z'),
    ('1.35', 'give one exact Kubernetes release as X.Y.Z'),
    ('1.35.*', 'give one exact Kubernetes release as X.Y.Z'),
    ('1.35.0\n', 'give one exact Kubernetes release as X.Y.Z'),
    (1.35, 'it is not a string; quote the release'),
    (True, 'k8s_node_version = true is not accepted: it is not a string'),
])
def test_check_version(version, fragment):
    errors = k8s.check_version(version)
    if fragment is None:
        assert errors == []
    else:
        assert len(errors) == 1 and errors[0].startswith('k8s_node_version = ') and fragment in errors[0], errors


def test_packages():
    assert k8s.minor('1.35.0') == '1.35'
    assert k8s.package_version('1.35.0', '1.1') == '1.35.0-1.1'
    assert k8s.package_specs('1.35.0', '1.1') == ['kubelet=1.35.0-1.1', 'kubeadm=1.35.0-1.1', 'kubectl=1.35.0-1.1']
    assert k8s.package_specs('1.35.0', '1.1', 'dnf') == [
        'kubelet-1.35.0-1.1', 'kubeadm-1.35.0-1.1', 'kubectl-1.35.0-1.1']
    for bad in ('', '1.1 ', '1.1;rm', 11):
        with pytest.raises(ValueError, match='is not a revision such as "1.1"'):
            k8s.package_version('1.35.0', bad)
    with pytest.raises(ValueError, match='not supported'):
        k8s.package_specs('1.35.0', '1.1', 'zypper')


@pytest.mark.parametrize('url, version, fragment', [
    (PKGS, '1.35.0', None),
    ('https://pkgs.k8s.io/core:/stable:/v1.35/rpm/', '1.35.4', None),
    ('https://mirror.example.org/k8s/core:/stable:/v1.35/deb/', '1.35.0', None),
    ('https://pkgs.k8s.io/core:/stable:/v1.34/deb/', '1.35.0', 'points at the packages of Kubernetes 1.34, not at those of'),
    ('https://mirror.example.org/kubernetes/deb/', '1.35.0', 'does not name a Kubernetes minor version in its path'),
    ('https://m.example.org/v1.34/x/v1.35/deb/', '1.35.0', 'Kubernetes 1.34 and 1.35'),
    ('https://pkgs.k8s.io/core:/stable:/v1.3/deb/', '1.35.0', 'points at the packages of Kubernetes 1.3,'),
    ('', '1.35.0', 'give the URL of the package repository of Kubernetes 1.35'),
    (PKGS, '1.35', None),  # the version itself is reported by check_version
])
def test_repo_errors(url, version, fragment):
    errors = k8s.repo_errors(url, version)
    if fragment is None:
        assert errors == []
    else:
        assert len(errors) == 1 and errors[0].startswith('k8s_node_repo_url = ') and fragment in errors[0], errors


@pytest.mark.parametrize('endpoint, fragment', [
    ('', None),
    ('10.0.0.10', None),
    ('10.0.0.10:6443', None),
    ('k8s-api.cluster.example.org', None),
    ('k8s-api.cluster.example.org:443', None),
    ('api', None),
    ('[fd00::10]:6443', None),
    ('[fd00::10]', None),
    ('10.0.0.256:6443', 'is not an IPv4 address'),
    ('fd00::10', 'an IPv6 address is written in brackets'),
    ('[10.0.0.1]:6443', 'is not an IPv6 address'),
    ('[fd00::10]6443', 'after ] comes :port or nothing'),
    ('k8s_api.example.org', 'is neither an address nor a DNS name'),
    ('K8S.example.org', 'is neither an address nor a DNS name'),
    ('-api.example.org', 'is neither an address nor a DNS name'),
    ('https://api.example.org:6443', 'give HOST[:PORT], not a URL or a path'),
    ('api.example.org:6443/x', 'give HOST[:PORT], not a URL or a path'),
    ('api.example.org:0', 'the port "0" is not a number from 1 to 65535'),
    ('api.example.org:65536', 'is not a number from 1 to 65535'),
    ('api.example.org:', 'is not a number from 1 to 65535'),
    ('api example.org', 'is neither an address nor a DNS name'),
    ('a' * 64 + '.example.org', 'is neither an address nor a DNS name'),
    (6443, 'it is not a string'),
])
def test_endpoint_errors(endpoint, fragment):
    errors = k8s.endpoint_errors(endpoint)
    if fragment is None:
        assert errors == []
    else:
        assert errors and errors[0].startswith('k8s_control_plane_endpoint = ') and fragment in errors[0], errors
        assert 'accepted' in errors[0] or 'port' in errors[0]


NODES = {'cp1': '10.213.12.0/24', 'gpu1': '10.213.12.0/24', 'gpu2': '10.213.13.0/24'}


@pytest.mark.parametrize('pod, service, networks, fragments', [
    ('10.244.0.0/16', '10.96.0.0/12', NODES, []),
    ('192.168.0.0/16', '10.96.0.0/12', NODES, []),
    ('10.213.0.0/16', '10.96.0.0/12', NODES,
     ['k8s_control_plane_pod_cidr = "10.213.0.0/16" overlaps the cluster network of cp1 (10.213.12.0/24)',
      'overlaps the cluster network of gpu1', 'overlaps the cluster network of gpu2 (10.213.13.0/24)']),
    ('10.244.0.0/16', '10.213.12.0/24', NODES,
     ['k8s_control_plane_service_cidr = "10.213.12.0/24" overlaps the cluster network of cp1',
      'overlaps the cluster network of gpu1']),
    ('10.0.0.0/8', '10.96.0.0/12', {},
     ['k8s_control_plane_pod_cidr = "10.0.0.0/8" and k8s_control_plane_service_cidr = "10.96.0.0/12" overlap']),
    ('10.244.0.0/24', '10.96.0.0/12', {}, ['each node gets a /24 of the pod network']),
    ('10.244.0.0/16', '10.0.0.0/8', {}, ['kube-apiserver takes a service network of at most /12',
                                         'overlap: pod and service addresses must differ']),
    ('10.244.0.1/16', '10.96.0.0/12', {}, ['k8s_control_plane_pod_cidr = "10.244.0.1/16" is not accepted: '
                                           '10.244.0.1/16 has host bits set']),
    ('10.244.0.0/16', 'ten', {}, ['k8s_control_plane_service_cidr = "ten" is not accepted']),
    (None, '10.96.0.0/12', {}, ['k8s_control_plane_pod_cidr = null is not accepted: it is not a string']),
    ('fd00:10:244::/56', 'fd00:10:96::/112', {'cp1': '10.213.12.0/24'}, []),
    ('10.244.0.0/16', '10.96.0.0/12', {'cp1': 'nonsense'}, ['the cluster network of cp1, "nonsense", is not a network']),
])
def test_network_errors(pod, service, networks, fragments):
    errors = k8s.network_errors(pod, service, networks)
    assert len(errors) == len(fragments), errors
    for error, fragment in zip(errors, fragments):
        assert fragment in error, (error, fragment)


@pytest.mark.parametrize('cni, pod, fragment', [
    ('flannel', '10.244.0.0/16', None),
    ('calico', '192.168.0.0/16', None),
    ('none', '172.16.0.0/16', None),
    ('flannel', '192.168.0.0/16', 'k8s_control_plane_cni = flannel needs k8s_control_plane_pod_cidr = "10.244.0.0/16"'),
    ('cilium', '10.244.0.0/16', 'k8s_control_plane_cni = "cilium" is not accepted: accepted: flannel, calico, none'),
])
def test_cni_errors(cni, pod, fragment):
    errors = k8s.cni_errors(cni, pod)
    assert errors == ([] if fragment is None else [errors[0]]) and (fragment is None or fragment in errors[0])


def test_device_plugin_config():
    assert k8s.device_plugin_config() == {
        'version': 'v1', 'flags': {'migStrategy': 'none', 'failOnInitError': True,
                                   'plugin': {'deviceListStrategy': ['envvar'], 'deviceIDStrategy': 'uuid',
                                              'passDeviceSpecs': False}}}
    shared = k8s.device_plugin_config('single', 4)
    assert shared['flags']['migStrategy'] == 'single'
    assert shared['sharing'] == {'timeSlicing': {'renameByDefault': False, 'failRequestsGreaterThanOne': True,
                                                 'resources': [{'name': 'nvidia.com/gpu', 'replicas': 4}]}}
    mixed = k8s.device_plugin_config('mixed', 2, rename_by_default=True)
    assert mixed['sharing']['timeSlicing']['resources'] == [{'name': 'nvidia.com/gpu', 'replicas': 2}]
    assert mixed['sharing']['timeSlicing']['renameByDefault'] is True
    for args, fragment in (((('all',), {}), 'k8s_gpu_mig_strategy = "all" is not accepted'),
                           ((('none', 1), {}), 'k8s_gpu_time_slicing_replicas = 1 is not accepted'),
                           ((('none', True), {}), 'k8s_gpu_time_slicing_replicas = true'),
                           ((('none', 2048), {}), 'from 2 to 1024'),
                           ((('none', 0), {'device_list_strategy': 'magic'}), 'k8s_gpu_device_list_strategy')):
        with pytest.raises(ValueError, match=fragment):
            k8s.device_plugin_config(*args[0], **args[1])


BASE = {'driver': {'enabled': False}, 'toolkit': {'enabled': False}, 'cdi': {'enabled': False},
        'devicePlugin': {'config': {'name': 'nvidia-device-plugin-config', 'default': 'default'}}}


@pytest.mark.parametrize('overrides, fragments', [
    ({}, []),
    ({'dcgmExporter': {'enabled': False}, 'migManager': {'enabled': True}}, []),
    ({'driver': {'enabled': False, 'version': '580'}}, []),
    ({'driver': {'enabled': True}}, ['k8s_gpu_operator_values.driver.enabled = true is not accepted: this project '
                                     'installs the NVIDIA driver on the hosts (nvidia_driver)']),
    ({'toolkit': {'enabled': 'true'}}, ['k8s_gpu_operator_values.toolkit.enabled = "true" is not accepted']),
    ({'driver': {'enabled': 'yes'}, 'cdi': {'enabled': True}},
     ['driver.enabled = "yes"', 'k8s_gpu_operator_values.cdi.enabled = true is not accepted: this project installs the '
                                'CDI specification']),
    ('driver.enabled=true', ['k8s_gpu_operator_values = "driver.enabled=true" is not accepted: it is not a mapping']),
])
def test_operator_values(overrides, fragments):
    values, errors = k8s.operator_values(BASE, overrides)
    assert len(errors) == len(fragments), errors
    for error, fragment in zip(errors, fragments):
        assert fragment in error
    if not fragments:
        assert values['driver']['enabled'] is False and values['toolkit']['enabled'] is False
        assert values['devicePlugin']['config']['name'] == 'nvidia-device-plugin-config'


TOKEN = 'abcdef.0123456789abcdef'
HASH = 'sha256:' + '0f' * 32


@pytest.mark.parametrize('text, expected', [
    ('kubeadm join 10.0.0.10:6443 --token %s --discovery-token-ca-cert-hash %s \n' % (TOKEN, HASH),
     {'endpoint': '10.0.0.10:6443', 'token': TOKEN, 'ca_cert_hashes': [HASH]}),
    ('W1203 warning line\nkubeadm join api.example.org:6443 --token %s --discovery-token-ca-cert-hash %s '
     '--discovery-token-ca-cert-hash %s\n' % (TOKEN, HASH, HASH.replace('0f', 'a1')),
     {'endpoint': 'api.example.org:6443', 'token': TOKEN, 'ca_cert_hashes': [HASH, HASH.replace('0f', 'a1')]}),
])
def test_parse_join_command(text, expected):
    assert k8s.parse_join_command(text) == expected


@pytest.mark.parametrize('text', [
    '', None, 'kubeadm join 10.0.0.10:6443 --token %s' % TOKEN,
    'kubeadm join 10.0.0.10:6443 --token ABCDEF.0123456789abcdef --discovery-token-ca-cert-hash %s' % HASH,
    'kubeadm join 10.0.0.10:6443 --token %s --discovery-token-ca-cert-hash %s; rm -rf /' % (TOKEN, HASH),
    'kubeadm join bad_host:6443 --token %s --discovery-token-ca-cert-hash %s' % (TOKEN, HASH),
])
def test_parse_join_command_never_shows_the_token(text):
    with pytest.raises(ValueError) as err:
        k8s.parse_join_command(text)
    assert '0123456789abcdef' not in str(err.value) and 'output not shown' in str(err.value) or text is None


@pytest.mark.parametrize('resources, fragments', [
    ([{'name': 'rdma_shared_device_a', 'hca_max': 63, 'selectors': {'vendors': ['15b3']}}], []),
    ([{'name': 'ib', 'hca_max': 1000, 'selectors': {'ifNames': ['ib0', 'ib1'], 'linkTypes': ['infiniband']}},
      {'name': 'roce', 'hca_max': 8, 'selectors': {'drivers': ['mlx5_core'], 'deviceIDs': ['101d']}}], []),
    ([], ['k8s_gpu_rdma_resources = [] is not accepted']),
    ([{'name': 'a', 'hca_max': 0, 'selectors': {'vendors': ['15b3']}}], ['k8s_gpu_rdma_resources[0].hca_max = 0']),
    ([{'name': 'A B', 'hca_max': 1, 'selectors': {'vendors': ['15b3']}}], ['k8s_gpu_rdma_resources[0].name = "A B"']),
    ([{'name': 'a', 'hca_max': 1, 'selectors': {'vendors': '15b3'}}], ['k8s_gpu_rdma_resources[0].selectors.vendors']),
    ([{'name': 'a', 'hca_max': 1, 'selectors': {'pciAddresses': ['0000:3b:00.0']}}], ['selectors.pciAddresses is not a selector']),
    ([{'name': 'a', 'hca_max': 1, 'selectors': {}}], ['selectors = {} is not accepted']),
    ([{'name': 'a', 'hca_max': 1, 'selectors': {'vendors': ['15b3']}, 'extra': 1}], ['unknown keys extra']),
    ([{'name': 'a', 'hca_max': 2, 'selectors': {'vendors': ['15b3']}}] * 2, ['k8s_gpu_rdma_resources[1].name = "a" is listed twice']),
])
def test_rdma_resource_errors(resources, fragments):
    errors = k8s.rdma_resource_errors(resources)
    assert len(errors) == len(fragments), errors
    for error, fragment in zip(errors, fragments):
        assert fragment in error


def test_rdma_resource():
    assert k8s.rdma_resource({'name': 'ib', 'hca_max': 8, 'selectors': {'linkTypes': ['infiniband'], 'vendors': ['15b3']}}) == {
        'resourceName': 'ib', 'rdmaHcaMax': 8, 'selectors': {'vendors': ['15b3'], 'linkTypes': ['infiniband']}}
    with pytest.raises(ValueError, match='hca_max'):
        k8s.rdma_resource({'name': 'ib', 'hca_max': '8', 'selectors': {'vendors': ['15b3']}})
