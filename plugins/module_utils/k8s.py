# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Decisions of the Kubernetes roles (k8s_node, k8s_control_plane, k8s_gpu), as pure functions.

Standard library only, Python 3.9+, no Ansible imports: the filters in plugins/filter/k8s.py adapt
them, the unit tests drive them with tables. Each ``*_errors`` function returns a list of messages
(empty: accepted); each message names the variable, what it holds and what is accepted, so that a
preflight fails with it before anything on a host changes.

What is decided here (one place each):

- the Kubernetes release and its packages: ``check_version`` (X.Y.Z, at least MIN_MINOR, the first
  release whose kubeadm reads the v1beta4 configuration the roles write), ``package_version`` /
  ``package_specs`` (pkgs.k8s.io's ``1.35.0-1.1``), ``repo_errors`` (the repository URL names the
  release's minor version as pkgs.k8s.io's layout does, ``.../v1.35/deb/``: a pin and a repository
  can never disagree, mirrors included);
- the control plane endpoint (``endpoint_errors``: an IPv4 address, a bracketed IPv6 address or a DNS
  name, with an optional port);
- the pod and service networks (``network_errors``: valid, not overlapping each other nor any cluster
  network of the nodes, sized as kube-controller-manager and kube-apiserver accept them) and the CNI's
  fixed network (``cni_errors``: flannel's manifest carries 10.244.0.0/16);
- the NVIDIA device plugin's configuration (``device_plugin_config``: MIG strategy, time-slicing);
- the GPU Operator's values (``operator_values``: this project installs the driver, the container
  toolkit and the CDI specification, so the Operator is refused any of them).
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import ipaddress
import re

from ansible_collections.gpucluster.core.plugins.module_utils.nested import deep_merge, get_path

# kubeadm's v1beta4 configuration (written by k8s_control_plane) is read by kubeadm 1.31 and newer.
MIN_MINOR = (1, 31)
# The packages of a Kubernetes node, as pkgs.k8s.io names them.
PACKAGES = ('kubelet', 'kubeadm', 'kubectl')
# kube-controller-manager gives each node a /24 of the pod network (--node-cidr-mask-size, IPv4) and
# /64 (IPv6): the pod network must be larger. kube-apiserver refuses a service network larger than
# /12 (IPv4) or /108 (IPv6).
NODE_MASK = {4: 24, 6: 64}
SERVICE_MIN_PREFIX = {4: 12, 6: 108}
# The network flannel's published manifest (kube-flannel.yml, ConfigMap kube-flannel-cfg, net-conf.json) uses.
FLANNEL_NETWORK = '10.244.0.0/16'
CNIS = ('flannel', 'calico', 'none')
MIG_STRATEGIES = ('none', 'single', 'mixed')
# The Operator's parts this project owns on the host (nvidia_driver, container_runtime).
OPERATOR_REFUSED = (('driver', 'enabled'), ('toolkit', 'enabled'), ('cdi', 'enabled'))

_VERSION_RE = re.compile(r'^([0-9]+)\.([0-9]+)\.([0-9]+)\Z')
_REVISION_RE = re.compile(r'^[0-9]+(\.[0-9]+)*\Z')
# A minor-version path segment of pkgs.k8s.io's layout: /core:/stable:/v1.35/deb/
_REPO_MINOR_RE = re.compile(r'/v([0-9]+)\.([0-9]+)(?=/)')
_LABEL_RE = re.compile(r'^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\Z')


def _show(value, limit=80):
    """A value as the inventory writes it (YAML/JSON spelling), clipped."""
    if isinstance(value, bool) or value is None:
        text = {True: 'true', False: 'false', None: 'null'}[value]
    elif isinstance(value, str):
        text = '"%s"' % value.encode('unicode_escape').decode('ascii')
    else:
        text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + '...'


# --- release and packages -----------------------------------------------------------------------------

def check_version(version, var='k8s_node_version'):
    """Errors of a Kubernetes version pin: a quoted "X.Y.Z" of 1.31 or newer."""
    if not isinstance(version, str) or isinstance(version, bool):
        return ['%s = %s is not accepted: it is not a string; quote the release: %s: "1.35.0"'
                % (var, _show(version), var)]
    match = _VERSION_RE.match(version)
    if not match:
        return ['%s = %s is not accepted: give one exact Kubernetes release as X.Y.Z, such as "1.35.0" '
                '(no leading v, no wildcard)' % (var, _show(version))]
    if (int(match.group(1)), int(match.group(2))) < MIN_MINOR:
        return ['%s = %s is not accepted: the roles write kubeadm\'s v1beta4 configuration, which kubeadm reads '
                'from %d.%d on; give %d.%d or newer' % ((var, _show(version)) + MIN_MINOR + MIN_MINOR)]
    return []


def minor(version):
    """'1.35.0' -> '1.35' (the version must pass check_version)."""
    match = _VERSION_RE.match(version or '')
    if not match:
        raise ValueError('%s is not a Kubernetes release X.Y.Z' % _show(version))
    return '%s.%s' % (match.group(1), match.group(2))


def package_version(version, revision):
    """The package version of a release on pkgs.k8s.io: ('1.35.0', '1.1') -> '1.35.0-1.1'."""
    minor(version)
    if not isinstance(revision, str) or not _REVISION_RE.match(revision):
        raise ValueError('package revision %s is not a revision such as "1.1"' % _show(revision))
    return '%s-%s' % (version, revision)


def package_specs(version, revision, pkg_mgr='apt', names=PACKAGES):
    """Install specs of the pinned packages: apt 'kubelet=1.35.0-1.1', dnf 'kubelet-1.35.0-1.1'."""
    full = package_version(version, revision)
    if pkg_mgr == 'apt':
        return ['%s=%s' % (name, full) for name in names]
    if pkg_mgr in ('dnf', 'dnf5', 'yum'):
        return ['%s-%s' % (name, full) for name in names]
    raise ValueError('package manager %s is not supported (accepted: apt, dnf)' % _show(pkg_mgr))


def repo_errors(url, version, url_var='k8s_node_repo_url', version_var='k8s_node_version'):
    """Errors when the repository URL does not name the minor version of the pinned release.

    pkgs.k8s.io has one repository per minor version (https://pkgs.k8s.io/core:/stable:/v1.35/deb/); a
    site mirror keeps that layout. A URL naming another minor version (or none) would install, or fail
    to find, packages of another release than the pin.
    """
    if check_version(version, version_var):
        return []  # reported by check_version
    if not isinstance(url, str) or not url:
        return ['%s = %s is not accepted: give the URL of the package repository of Kubernetes %s, such as '
                'https://pkgs.k8s.io/core:/stable:/v%s/deb/' % (url_var, _show(url), minor(version), minor(version))]
    found = sorted(set('%s.%s' % m for m in _REPO_MINOR_RE.findall(url)))
    wanted = minor(version)
    if not found:
        return ['%s = %s does not name a Kubernetes minor version in its path (pkgs.k8s.io\'s layout, '
                '.../v%s/deb/): a mirror keeps that layout, so that %s = "%s" and the repository cannot '
                'disagree' % (url_var, _show(url, 160), wanted, version_var, version)]
    if found != [wanted]:
        return ['%s = %s points at the packages of Kubernetes %s, not at those of %s = "%s" (v%s): change '
                'both together' % (url_var, _show(url, 160), ' and '.join(found), version_var, version, wanted)]
    return []


# --- control plane endpoint ---------------------------------------------------------------------------

def _port_error(port, var, endpoint):
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        return ['%s = %s is not accepted: the port %s is not a number from 1 to 65535' % (var, _show(endpoint), _show(port))]
    return []


def _dns_name(host):
    if len(host) > 253 or not host:
        return False
    labels = host.rstrip('.').split('.')
    return all(_LABEL_RE.match(label) for label in labels) and not labels[-1].isdigit()


def endpoint_errors(endpoint, var='k8s_control_plane_endpoint'):
    """Errors of a control plane endpoint: '' (the first control-plane node's address), or HOST[:PORT]
    where HOST is an IPv4 address, a bracketed IPv6 address or a DNS name (lower case, RFC 1123)."""
    accepted = ('accepted: an IPv4 address, a DNS name (letters, digits, "-" and "."), or [IPv6], each with an '
                'optional :port, such as k8s-api.cluster.example.org:6443')
    if endpoint == '':
        return []
    if not isinstance(endpoint, str):
        return ['%s = %s is not accepted: it is not a string; %s' % (var, _show(endpoint), accepted)]
    if '://' in endpoint or '/' in endpoint:
        return ['%s = %s is not accepted: give HOST[:PORT], not a URL or a path; %s' % (var, _show(endpoint), accepted)]
    if endpoint.startswith('['):
        host, _sep, rest = endpoint[1:].partition(']')
        try:
            if ipaddress.ip_address(host).version != 6:
                raise ValueError(host)
        except ValueError:
            return ['%s = %s is not accepted: %s is not an IPv6 address; %s' % (var, _show(endpoint), _show(host), accepted)]
        if rest == '':
            return []
        if not rest.startswith(':'):
            return ['%s = %s is not accepted: after ] comes :port or nothing; %s' % (var, _show(endpoint), accepted)]
        return _port_error(rest[1:], var, endpoint)
    if endpoint.count(':') > 1:
        return ['%s = %s is not accepted: an IPv6 address is written in brackets, [fd00::10]:6443; %s'
                % (var, _show(endpoint), accepted)]
    host, sep, port = endpoint.partition(':')
    errors = _port_error(port, var, endpoint) if sep else []
    try:
        ipaddress.IPv4Address(host)
        return errors
    except ValueError:
        pass
    if re.match(r'^[0-9.]+\Z', host):
        return ['%s = %s is not accepted: %s is not an IPv4 address; %s' % (var, _show(endpoint), _show(host), accepted)]
    if not _dns_name(host):
        return ['%s = %s is not accepted: %s is neither an address nor a DNS name; %s'
                % (var, _show(endpoint), _show(host), accepted)] + errors
    return errors


# --- pod and service networks -------------------------------------------------------------------------

def _network(value, var):
    if not isinstance(value, str) or isinstance(value, bool):
        return None, '%s = %s is not accepted: it is not a string; give a network such as "10.244.0.0/16"' % (var, _show(value))
    try:
        return ipaddress.ip_network(value, strict=True), None
    except ValueError as exc:
        return None, '%s = %s is not accepted: %s; give a network such as "10.244.0.0/16" (host bits zero)' % (
            var, _show(value), exc)


def network_errors(pod_cidr, service_cidr, cluster_networks, pod_var='k8s_control_plane_pod_cidr',
                   service_var='k8s_control_plane_service_cidr'):
    """Errors of the pod and service networks against each other and the nodes' cluster networks.

    cluster_networks: {node name: network (CIDR text)} of every Kubernetes node (the network of its address:
    the cluster network the site names, or the one its address lies in). A pod or service address that is
    also a node's address would be routed into the cluster, never to the node.
    """
    errors = []
    pods, problem = _network(pod_cidr, pod_var)
    if problem:
        errors.append(problem)
    services, problem = _network(service_cidr, service_var)
    if problem:
        errors.append(problem)
    if pods is not None and pods.prefixlen >= NODE_MASK[pods.version]:
        errors.append('%s = "%s" is not accepted: each node gets a /%d of the pod network, so it must be larger '
                      'than /%d (such as /16)' % (pod_var, pod_cidr, NODE_MASK[pods.version], NODE_MASK[pods.version]))
    if services is not None and services.prefixlen < SERVICE_MIN_PREFIX[services.version]:
        errors.append('%s = "%s" is not accepted: kube-apiserver takes a service network of at most /%d'
                      % (service_var, service_cidr, SERVICE_MIN_PREFIX[services.version]))
    if pods is not None and services is not None and pods.version == services.version and pods.overlaps(services):
        errors.append('%s = "%s" and %s = "%s" overlap: pod and service addresses must differ'
                      % (pod_var, pod_cidr, service_var, service_cidr))
    for name, text in sorted((cluster_networks or {}).items()):
        try:
            network = ipaddress.ip_network(text, strict=False)
        except (ValueError, TypeError):
            errors.append('the cluster network of %s, %s, is not a network' % (name, _show(text)))
            continue
        for var, value, net in ((pod_var, pod_cidr, pods), (service_var, service_cidr, services)):
            if net is not None and net.version == network.version and net.overlaps(network):
                errors.append('%s = "%s" overlaps the cluster network of %s (%s): choose a range none of the '
                              'nodes\' networks uses' % (var, value, name, network))
    return errors


def cni_errors(cni, pod_cidr, cni_var='k8s_control_plane_cni', pod_var='k8s_control_plane_pod_cidr'):
    """Errors of the CNI choice against the pod network (flannel's manifest fixes its network)."""
    if cni not in CNIS:
        return ['%s = %s is not accepted: accepted: %s' % (cni_var, _show(cni), ', '.join(CNIS))]
    if cni == 'flannel' and pod_cidr != FLANNEL_NETWORK:
        return ['%s = flannel needs %s = "%s" (the network of flannel\'s published manifest), got %s'
                % (cni_var, pod_var, FLANNEL_NETWORK, _show(pod_cidr))]
    return []


# --- GPU stack ----------------------------------------------------------------------------------------

def device_plugin_config(mig_strategy='none', replicas=0, rename_by_default=False, fail_requests_greater_than_one=True,
                         device_list_strategy='envvar'):
    """The NVIDIA device plugin's (and GPU feature discovery's) configuration file, version v1.

    replicas >= 2 shares each GPU (or MIG device) among that many pods by time-slicing; 0 shares nothing.
    """
    if mig_strategy not in MIG_STRATEGIES:
        raise ValueError('k8s_gpu_mig_strategy = %s is not accepted: accepted: %s'
                         % (_show(mig_strategy), ', '.join(MIG_STRATEGIES)))
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0 or replicas == 1 or replicas > 1024:
        raise ValueError('k8s_gpu_time_slicing_replicas = %s is not accepted: 0 (no sharing) or a whole number from '
                         '2 to 1024' % _show(replicas))
    if device_list_strategy not in ('envvar', 'cdi-annotations', 'cdi-cri', 'volume-mounts'):
        raise ValueError('k8s_gpu_device_list_strategy = %s is not accepted: accepted: envvar, cdi-annotations, '
                         'cdi-cri, volume-mounts' % _show(device_list_strategy))
    config = {'version': 'v1',
              'flags': {'migStrategy': mig_strategy, 'failOnInitError': True,
                        'plugin': {'deviceListStrategy': [device_list_strategy], 'deviceIDStrategy': 'uuid',
                                   'passDeviceSpecs': False}}}
    if replicas:
        # nvidia.com/gpu: every GPU, and with the single strategy every MIG device (offered under that name too).
        # With the mixed strategy MIG devices are nvidia.com/mig-<profile>, named per GPU model: not shared here.
        config['sharing'] = {'timeSlicing': {
            'renameByDefault': bool(rename_by_default),
            'failRequestsGreaterThanOne': bool(fail_requests_greater_than_one),
            'resources': [{'name': 'nvidia.com/gpu', 'replicas': replicas}]}}
    return config


def _truthy(value):
    if isinstance(value, str):
        return value.strip().lower() in ('true', 'yes', 'on', '1')
    return bool(value)


def operator_values(base, overrides, var='k8s_gpu_operator_values'):
    """(values, errors): the GPU Operator's Helm values, the site's overrides merged over ours.

    The Operator must not manage what this project installs on the hosts: the driver (nvidia_driver), the
    container toolkit and containerd's configuration (container_runtime) and the CDI specification
    (container_runtime). An override that turns any of them on is refused, naming it.
    """
    if not isinstance(overrides, dict):
        return base, ['%s = %s is not accepted: it is not a mapping of Helm values' % (var, _show(overrides))]
    values = deep_merge(base, overrides)
    errors = []
    for path in OPERATOR_REFUSED:
        if get_path(overrides, path) is not None and _truthy(get_path(overrides, path)):
            errors.append('%s.%s = %s is not accepted: this project installs %s on the hosts (%s); the GPU Operator '
                          'runs with %s: false' % (var, '.'.join(path), _show(get_path(overrides, path)),
                                                   {'driver': 'the NVIDIA driver', 'toolkit': 'the NVIDIA Container '
                                                    'Toolkit and containerd\'s configuration', 'cdi': 'the CDI '
                                                    'specification'}[path[0]],
                                                   'nvidia_driver' if path[0] == 'driver' else 'container_runtime',
                                                   '.'.join(path)))
    return values, errors


# --- kubeadm's join ---------------------------------------------------------------------------------

_JOIN_RE = re.compile(r'^kubeadm join (?P<endpoint>\S+) --token (?P<token>[a-z0-9]{6}\.[a-z0-9]{16})'
                      r'((?: --discovery-token-ca-cert-hash sha256:[0-9a-f]{64})+)\s*\Z')
_HASH_RE = re.compile(r'sha256:[0-9a-f]{64}')


def parse_join_command(text):
    """{endpoint, token, ca_cert_hashes} of ``kubeadm token create --print-join-command``'s output.

    The output carries a secret (the bootstrap token): a message never shows it, only its shape.
    """
    if not isinstance(text, str):
        raise ValueError('kubeadm token create --print-join-command printed no text')
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    match = _JOIN_RE.match(lines[-1]) if lines else None
    if not match:
        raise ValueError('kubeadm token create --print-join-command did not print "kubeadm join ENDPOINT --token '
                         'TOKEN --discovery-token-ca-cert-hash sha256:HASH" (%d line(s), output not shown: it holds '
                         'the token)' % len(lines))
    if endpoint_errors(match.group('endpoint'), 'the endpoint kubeadm printed'):
        raise ValueError('kubeadm printed an endpoint that is not HOST:PORT (output not shown: it holds the token)')
    return {'endpoint': match.group('endpoint'), 'token': match.group('token'),
            'ca_cert_hashes': _HASH_RE.findall(match.group(3))}


# --- RDMA shared device plugin ------------------------------------------------------------------------

RDMA_SELECTORS = ('vendors', 'deviceIDs', 'drivers', 'ifNames', 'linkTypes')
_RDMA_NAME_RE = re.compile(r'^[a-z0-9]([a-z0-9_.-]{0,61}[a-z0-9])?\Z')
_RDMA_VALUE_RE = re.compile(r'^[A-Za-z0-9_.:-]{1,64}\Z')


def rdma_resource_errors(resources, var='k8s_gpu_rdma_resources'):
    """Errors of the RDMA shared device plugin's resources: each {name, hca_max, selectors}."""
    if not isinstance(resources, list) or not resources:
        return ['%s = %s is not accepted: give a list of {name, hca_max, selectors}' % (var, _show(resources))]
    errors = []
    names = []
    for index, entry in enumerate(resources):
        where = '%s[%d]' % (var, index)
        if not isinstance(entry, dict):
            errors.append('%s = %s is not a mapping {name, hca_max, selectors}' % (where, _show(entry)))
            continue
        unknown = sorted(set(entry) - set(('name', 'hca_max', 'selectors')))
        if unknown:
            errors.append('%s has unknown keys %s; accepted: name, hca_max, selectors' % (where, ', '.join(unknown)))
        name = entry.get('name')
        if not isinstance(name, str) or not _RDMA_NAME_RE.match(name):
            errors.append('%s.name = %s is not a resource name (lower case letters, digits, "_", ".", "-")' % (where, _show(name)))
        elif name in names:
            errors.append('%s.name = "%s" is listed twice' % (where, name))
        names.append(name)
        hca_max = entry.get('hca_max')
        if isinstance(hca_max, bool) or not isinstance(hca_max, int) or not 1 <= hca_max <= 1000:
            errors.append('%s.hca_max = %s is not accepted: pods sharing the HCAs at once, 1 to 1000' % (where, _show(hca_max)))
        selectors = entry.get('selectors')
        if not isinstance(selectors, dict) or not selectors:
            errors.append('%s.selectors = %s is not accepted: a mapping of %s to lists of strings'
                          % (where, _show(selectors), ', '.join(RDMA_SELECTORS)))
            continue
        for key, values in sorted(selectors.items(), key=lambda kv: str(kv[0])):
            if key not in RDMA_SELECTORS:
                errors.append('%s.selectors.%s is not a selector; accepted: %s' % (where, key, ', '.join(RDMA_SELECTORS)))
            elif not isinstance(values, list) or not values or not all(
                    isinstance(v, str) and _RDMA_VALUE_RE.match(v) for v in values):
                errors.append('%s.selectors.%s = %s is not a list of names such as "15b3", "mlx5_core", "ib0"'
                              % (where, key, _show(values)))
    return errors


def rdma_resource(entry):
    """One entry of the RDMA shared device plugin's config.json configList."""
    errors = rdma_resource_errors([entry], 'k8s_gpu_rdma_resources[]')
    if errors:
        raise ValueError(errors[0])
    return {'resourceName': entry['name'], 'rdmaHcaMax': entry['hca_max'],
            'selectors': dict((k, list(entry['selectors'][k])) for k in RDMA_SELECTORS if k in entry['selectors'])}
