# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Kubernetes roles, checked offline (no kubelet, kubeadm or API server can run here):

- every manifest k8s_gpu renders, in each of its shapes, passes kubernetes-validate in strict mode for the
  Kubernetes release k8s_node pins, a missing schema failing as loudly as an invalid object (one test, all
  manifests, so that the schema is loaded once);
- the Helm values of Node Feature Discovery's chart pass the chart's published values schema (v0.19.0), and name no
  key the schema does not know; the GPU Operator's chart publishes no values schema (the refusals of
  module_utils/k8s.py are its check);
- kubeadm's v1beta4 configuration and join file render with the fields kubeadm reads (kubeadm config validate runs
  at the site, before init);
- a gpucluster_scheduler: kubernetes inventory passes site.yml --syntax-check, and the roles' preflights pass on it
  with facts recorded on a real Debian 12 machine; bad input (a repository of another release, a pod network
  overlapping the nodes' network, an endpoint that is a URL, the GPU Operator asked for the driver) is refused by the
  preflight, naming the variable, before any task that changes a host.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import copy
import gzip
import json
import os
import subprocess
import sys

import pytest
import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
COLLECTIONS = os.path.join(REPO, 'collections')
FIXTURES = os.path.join(REPO, 'tests', 'unit', 'fixtures', 'k8s')
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), 'ansible-playbook')


def _yaml(path):
    with open(path) as handle:
        return yaml.safe_load(handle) or {}


def _role(role, **overrides):
    """The variables of a job of k8s_render.py (the role's defaults and vars are added there)."""
    variables = {'__role': role}
    variables.update({'ansible_managed': 'Managed by Ansible (gpucluster.core)', 'inventory_hostname': 'cp1',
                      'groups': {'k8s_control_plane': ['cp1'], 'k8s_workers': ['gpu1', 'gpu2'], 'gpu_nodes': ['gpu1', 'gpu2']},
                      'ansible_facts': {'architecture': 'x86_64', 'nodename': 'cp1', 'os_family': 'Debian'}})
    variables.update(overrides)
    return variables


@pytest.fixture(scope='module')
def render():
    """render(variables, template=..., expression=...) through k8s_render.py (one process per call batch)."""
    def run_jobs(jobs):
        proc = subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), 'k8s_render.py')],
                              input=json.dumps(jobs), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=300, env=dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS), check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout)

    def run(variables, template=None, expression=None):
        role = variables.pop('__role')
        job = {'role': role, 'variables': variables}
        if template is not None:
            job['template'] = template
        else:
            job['expression'] = expression
        return run_jobs([job])[0]
    run.jobs = run_jobs
    return run


GPU_TEMPLATE = 'manifests/gpu.yaml.j2'
# Each shape of the GPU stack: (name, variables over k8s_gpu's defaults, the objects expected).
SHAPES = [
    ('default', {}, ['Namespace/gpucluster-gpu', 'ConfigMap/nvidia-device-plugin-config', 'DaemonSet/nvidia-device-plugin',
                     'DaemonSet/gpu-feature-discovery', 'DaemonSet/dcgm-exporter']),
    ('mig-time-slicing-rdma-plain-http', {'k8s_gpu_mig_strategy': 'single', 'k8s_gpu_time_slicing_replicas': 4,
                                          'gpucluster_fabric': 'infiniband', 'monitoring_tls': False,
                                          'k8s_gpu_rdma_resources': [
                                              {'name': 'ib', 'hca_max': 16, 'selectors': {'linkTypes': ['infiniband']}},
                                              {'name': 'roce', 'hca_max': 8, 'selectors': {'drivers': ['mlx5_core']}}]},
     ['Namespace/gpucluster-gpu', 'ConfigMap/nvidia-device-plugin-config', 'DaemonSet/nvidia-device-plugin',
      'DaemonSet/gpu-feature-discovery', 'DaemonSet/dcgm-exporter', 'ConfigMap/rdma-devices',
      'DaemonSet/rdma-shared-device-plugin']),
    ('plugin-only', {'k8s_gpu_feature_discovery': False, 'k8s_gpu_dcgm_exporter': False, 'k8s_gpu_mig_strategy': 'mixed'},
     ['Namespace/gpucluster-gpu', 'ConfigMap/nvidia-device-plugin-config', 'DaemonSet/nvidia-device-plugin']),
    ('gpu-operator', {'k8s_gpu_stack': 'gpu_operator', 'k8s_gpu_namespace': 'gpu-operator'},
     ['Namespace/gpu-operator', 'ConfigMap/nvidia-device-plugin-config', 'DaemonSet/dcgm-exporter']),
]


def _job(role, template=None, expression=None, **variables):
    job = {'role': role, 'variables': dict((k, v) for k, v in _role(role, **variables).items() if k != '__role')}
    job.update({'template': template} if template else {'expression': expression})
    return job


@pytest.fixture(scope='module')
def rendered(render):
    """Every rendering the tests below read, in one k8s_render.py run: {name: text or value}."""
    jobs = dict(('shape:' + name, _job('k8s_gpu', GPU_TEMPLATE, **overrides)) for name, overrides, _expected in SHAPES)
    jobs.update(RENDER_JOBS)
    names = sorted(jobs)
    return dict(zip(names, render.jobs([jobs[n] for n in names])))


@pytest.fixture(scope='module')
def shapes(rendered):
    """{shape name: [manifest documents]}."""
    return dict((name, [doc for doc in yaml.safe_load_all(rendered['shape:' + name]) if doc]) for name, _o, _e in SHAPES)


def test_every_manifest_passes_kubernetes_validate_strict(shapes):
    """kubernetes-validate's schema of the pinned release, strict (no field the API does not know); a kind whose
    schema is missing raises SchemaNotFoundError, which fails this test like any invalid object."""
    import kubernetes_validate
    release = _yaml(os.path.join(REPO, 'roles', 'k8s_node', 'defaults', 'main.yml'))['k8s_node_version']
    minor = '.'.join(release.split('.')[:2])
    seen = 0
    for name, overrides, expected in SHAPES:
        docs = shapes[name]
        assert ['%s/%s' % (d['kind'], d['metadata']['name']) for d in docs] == expected, name
        for doc in docs:
            # A schema of an older release would be used silently for a release newer than the package knows.
            assert kubernetes_validate.validate(doc, release, strict=True) == minor, (name, doc['kind'])
            seen += 1
    assert seen == sum(len(s[2]) for s in SHAPES)
    # The check bites: an unknown field, a wrong type and an unknown kind are refused.
    daemonset = copy.deepcopy(shapes['default'][2])
    daemonset['spec']['template']['spec']['containers'][0]['gpus'] = 1
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(daemonset, release, strict=True)
    daemonset = copy.deepcopy(shapes['default'][2])
    daemonset['spec']['template']['spec']['hostNetwork'] = 'yes'
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(daemonset, release, strict=True)
    with pytest.raises(kubernetes_validate.SchemaNotFoundError):
        kubernetes_validate.validate({'apiVersion': 'nvidia.com/v1', 'kind': 'ClusterPolicy', 'metadata': {'name': 'x'}},
                                     release, strict=True)


def test_the_device_plugin_and_its_companions_read_one_configuration(shapes):
    docs = dict(('%s/%s' % (d['kind'], d['metadata']['name']), d) for d in shapes['mig-time-slicing-rdma-plain-http'])
    config = yaml.safe_load(docs['ConfigMap/nvidia-device-plugin-config']['data']['default'])
    assert config['flags']['migStrategy'] == 'single'
    assert config['sharing']['timeSlicing']['resources'] == [{'name': 'nvidia.com/gpu', 'replicas': 4}]
    for name in ('nvidia-device-plugin', 'gpu-feature-discovery'):
        pod = docs['DaemonSet/' + name]['spec']['template']['spec']
        assert {'name': 'CONFIG_FILE', 'value': '/etc/nvidia-device-plugin/default'} in pod['containers'][0]['env']
        assert pod['nodeSelector'] == {'nvidia.com/gpu.present': 'true'}
        assert {'key': 'gpucluster.io/health', 'operator': 'Exists', 'effect': 'NoSchedule'} in pod['tolerations']
    dcgm = docs['DaemonSet/dcgm-exporter']['spec']['template']['spec']
    assert dcgm['hostNetwork'] is True
    mounts = dict((m['name'], m) for m in dcgm['containers'][0]['volumeMounts'])
    assert mounts['pod-resources'] == {'name': 'pod-resources', 'mountPath': '/var/lib/kubelet/pod-resources', 'readOnly': True}
    assert 'web-config' not in mounts  # monitoring_tls false: plain HTTP
    env = dict((e['name'], e.get('value')) for e in dcgm['containers'][0]['env'])
    assert env['DCGM_EXPORTER_LISTEN'] == '$(NODE_IP):9400' and env['DCGM_EXPORTER_KUBERNETES'] == 'true'
    rdma = json.loads(docs['ConfigMap/rdma-devices']['data']['config.json'])
    assert rdma['configList'] == [{'resourceName': 'ib', 'rdmaHcaMax': 16, 'selectors': {'linkTypes': ['infiniband']}},
                                  {'resourceName': 'roce', 'rdmaHcaMax': 8, 'selectors': {'drivers': ['mlx5_core']}}]
    # With the monitoring role's TLS (the default), dcgm-exporter serves its web configuration from the node.
    default = dict(('%s/%s' % (d['kind'], d['metadata']['name']), d) for d in shapes['default'])
    tls = default['DaemonSet/dcgm-exporter']['spec']['template']['spec']
    env = dict((e['name'], e.get('value')) for e in tls['containers'][0]['env'])
    assert env['DCGM_EXPORTER_WEB_CONFIG_FILE'] == '/etc/gpucluster-monitoring/web.yml'
    assert {'name': 'web-config', 'hostPath': {'path': '/etc/gpucluster-monitoring', 'type': 'Directory'}} in tls['volumes']


def _schema_keys(schema, values, path, root, problems):
    """Every key of ``values`` the published schema names (where it lists properties), following $ref."""
    while '$ref' in schema and 'properties' not in schema:
        node = root
        for part in schema['$ref'].lstrip('#/').split('/'):
            node = node[part.replace('~1', '/').replace('~0', '~')]
        schema = node
    props = schema.get('properties')
    if not isinstance(values, dict) or not props:
        return
    for key, value in values.items():
        if key not in props:
            problems.append('%s%s' % (path, key))
        else:
            _schema_keys(props[key], value, '%s%s.' % (path, key), root, problems)


INIT_TEMPLATE = 'etc/kubernetes/gpucluster/kubeadm-init.yaml.j2'
JOIN_TEMPLATE = 'etc/kubernetes/gpucluster/kubeadm-join.yaml.j2'
CP_GROUPS = {'k8s_control_plane': ['cp1', 'cp2'], 'k8s_workers': ['gpu1'], 'gpu_nodes': ['gpu1']}
JOIN = {'endpoint': 'k8s-api.cluster.example.org:6443', 'token': 'abcdef.0123456789abcdef',
        'ca_cert_hashes': ['sha256:' + '0f' * 32]}


def _control_plane(host, groups, template, **extra):
    variables = dict(inventory_hostname=host, groups=groups, k8s_node_version='1.35.0',
                     ansible_facts={'nodename': host.upper(), 'architecture': 'x86_64'},
                     __k8s_control_plane_cluster={'address': '192.0.2.10', 'network': '192.0.2.0/24', 'error': ''},
                     hostvars={'cp1': {'__k8s_control_plane_cluster': {'address': '192.0.2.2'}}})
    variables.update(extra)
    return _job('k8s_control_plane', template, **variables)


RENDER_JOBS = {
    'nfd': _job('k8s_gpu', expression='{{ __k8s_gpu_nfd_release }}'),
    'nfd-site': _job('k8s_gpu', expression='{{ __k8s_gpu_nfd_release }}',
                     k8s_gpu_nfd_values={'worker': {'config': {'core': {'sleepInterval': '60s'}}}}),
    'operator': _job('k8s_gpu', expression='{{ __k8s_gpu_operator_release }}', k8s_gpu_stack='gpu_operator',
                     k8s_gpu_operator_values={'migManager': {'enabled': True}, 'driver': {'enabled': False}}),
    'init': _control_plane('cp1', {'k8s_control_plane': ['cp1'], 'k8s_workers': ['gpu1'], 'gpu_nodes': ['gpu1']},
                           INIT_TEMPLATE),
    'init-gpu-member': _control_plane('gpu1', {'k8s_control_plane': ['gpu1'], 'k8s_workers': ['gpu1'], 'gpu_nodes': ['gpu1']},
                                      INIT_TEMPLATE, k8s_control_plane_endpoint='[fd00::10]:6443', hostvars={'gpu1': {}}),
    'join-worker': _control_plane('gpu1', CP_GROUPS, JOIN_TEMPLATE, k8s_control_plane_endpoint=JOIN['endpoint'],
                                  __k8s_control_plane_join=JOIN),
    'join-member': _control_plane('cp2', CP_GROUPS, JOIN_TEMPLATE, k8s_control_plane_endpoint=JOIN['endpoint'],
                                  __k8s_control_plane_join=JOIN,
                                  __k8s_control_plane_certificate_key={'stdout': 'f' * 64 + '\n'}),
}


def test_nfd_values_pass_the_charts_published_schema(rendered):
    import jsonschema
    with gzip.open(os.path.join(FIXTURES, 'nfd-0.19.0-values.schema.json.gz'), 'rt') as handle:
        schema = json.load(handle)
    assert _yaml(os.path.join(REPO, 'roles', 'k8s_gpu', 'defaults', 'main.yml'))['k8s_gpu_nfd_chart_version'] == '0.19.0'
    for name in ('nfd', 'nfd-site'):
        values = json.loads(json.dumps(rendered[name]['values']))
        jsonschema.Draft202012Validator(schema).validate(values)
        problems = []
        _schema_keys(schema, values, '', schema, problems)
        assert problems == []
        assert values['master']['extraLabelNs'] == ['nvidia.com']
    assert rendered['nfd-site']['values']['worker']['config'] == {'core': {'sleepInterval': '60s'}}
    assert rendered['nfd-site']['values']['worker']['tolerations'] == rendered['nfd']['values']['worker']['tolerations']
    # The key check bites: a misspelt key is named.
    problems = []
    _schema_keys(schema, {'master': {'extraLabelNS': ['nvidia.com']}}, '', schema, problems)
    assert problems == ['master.extraLabelNS']
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(schema).validate({'master': {'extraLabelNs': 'nvidia.com'}})


def test_gpu_operator_values_leave_driver_toolkit_and_cdi_to_this_project(rendered):
    release = rendered['operator']
    values = release['values']
    assert (values['driver']['enabled'], values['toolkit']['enabled'], values['cdi']['enabled']) == (False, False, False)
    assert values['dcgmExporter']['enabled'] is False and values['migManager']['enabled'] is True
    assert values['devicePlugin']['config'] == {'name': 'nvidia-device-plugin-config', 'default': 'default'}
    assert (release['chart'], release['repo']) == ('gpu-operator', 'https://helm.ngc.nvidia.com/nvidia')


def test_kubeadm_init_configuration(rendered):
    docs = list(yaml.safe_load_all(rendered['init']))
    assert [(d['apiVersion'], d['kind']) for d in docs] == [
        ('kubeadm.k8s.io/v1beta4', 'InitConfiguration'), ('kubeadm.k8s.io/v1beta4', 'ClusterConfiguration'),
        ('kubelet.config.k8s.io/v1beta1', 'KubeletConfiguration')]
    init, cluster, kubelet = docs
    assert init['localAPIEndpoint'] == {'advertiseAddress': '192.0.2.10', 'bindPort': 6443}
    assert init['nodeRegistration'] == {'name': 'cp1', 'criSocket': 'unix:///run/containerd/containerd.sock',
                                        'kubeletExtraArgs': [{'name': 'node-ip', 'value': '192.0.2.10'}]}
    assert cluster == {'apiVersion': 'kubeadm.k8s.io/v1beta4', 'kind': 'ClusterConfiguration', 'clusterName': 'gpucluster',
                       'kubernetesVersion': 'v1.35.0', 'controlPlaneEndpoint': '192.0.2.2:6443',
                       'imageRepository': 'registry.k8s.io',
                       'networking': {'podSubnet': '10.244.0.0/16', 'serviceSubnet': '10.96.0.0/12',
                                      'dnsDomain': 'cluster.local'}}
    assert kubelet['cgroupDriver'] == 'systemd'
    # A control-plane node that is also a GPU worker: labelled for the device plugin, no control-plane taint.
    init = next(yaml.safe_load_all(rendered['init-gpu-member']))
    assert init['nodeRegistration']['taints'] == []
    assert {'name': 'node-labels', 'value': 'nvidia.com/gpu.present=true'} in init['nodeRegistration']['kubeletExtraArgs']
    cluster = list(yaml.safe_load_all(rendered['init-gpu-member']))[1]
    assert cluster['controlPlaneEndpoint'] == '[fd00::10]:6443'


def test_kubeadm_join_configuration(rendered):
    worker = yaml.safe_load(rendered['join-worker'])
    assert worker['apiVersion'] == 'kubeadm.k8s.io/v1beta4' and worker['kind'] == 'JoinConfiguration'
    assert worker['discovery'] == {'bootstrapToken': {'apiServerEndpoint': 'k8s-api.cluster.example.org:6443',
                                                      'token': JOIN['token'], 'caCertHashes': JOIN['ca_cert_hashes']}}
    assert 'controlPlane' not in worker and 'taints' not in worker['nodeRegistration']
    assert {'name': 'node-labels', 'value': 'nvidia.com/gpu.present=true'} in worker['nodeRegistration']['kubeletExtraArgs']
    member = yaml.safe_load(rendered['join-member'])
    assert member['controlPlane'] == {'localAPIEndpoint': {'advertiseAddress': '192.0.2.10', 'bindPort': 6443},
                                      'certificateKey': 'f' * 64}
    assert member['nodeRegistration']['kubeletExtraArgs'] == [{'name': 'node-ip', 'value': '192.0.2.10'}]


def _env(tmp_path, **extra):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_COLLECTIONS_PATH=COLLECTIONS,
               ANSIBLE_NOCOLOR='1', ANSIBLE_RETRY_FILES_ENABLED='0', ANSIBLE_LOCAL_TEMP=str(tmp_path / 'tmp'))
    env.update(extra)
    return env


@pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason='ansible-playbook not beside this python')
def test_site_yml_syntax_check_with_a_kubernetes_inventory(tmp_path):
    proc = subprocess.run([ANSIBLE_PLAYBOOK, '-i', os.path.join(FIXTURES, 'inventory'), os.path.join(REPO, 'site.yml'),
                           '--syntax-check'], cwd=REPO, env=_env(tmp_path), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout


PREFLIGHTS = """- name: Kubernetes nodes' preflights
  hosts: k8s_control_plane:k8s_workers
  gather_facts: false
  tasks:
    - name: k8s_node
      ansible.builtin.include_role: {name: gpucluster.core.k8s_node, tasks_from: preflight}
    - name: k8s_control_plane
      ansible.builtin.include_role: {name: gpucluster.core.k8s_control_plane, tasks_from: preflight}

- name: The GPU stack's preflight
  hosts: k8s_control_plane
  gather_facts: false
  tasks:
    - name: k8s_gpu
      ansible.builtin.include_role: {name: gpucluster.core.k8s_gpu, tasks_from: preflight}
"""
# Hosts added to the fixture inventory, each with one bad input: (host, groups, variables, failing task, message parts).
BAD = [
    ('bad-repo', ['k8s_workers'], {'k8s_node_repo_url': 'https://pkgs.k8s.io/core:/stable:/v1.34/deb/'},
     'Check the Kubernetes release and the repository that serves it',
     ['k8s_node_repo_url = "https://pkgs.k8s.io/core:/stable:/v1.34/deb/" points at the packages of Kubernetes 1.34, '
      'not at those of k8s_node_version = "1.35.0"']),
    ('bad-cidr', ['k8s_workers'], {'k8s_control_plane_cni': 'calico', 'k8s_control_plane_pod_cidr': '192.0.0.0/16'},
     'Check the pod and service networks against every node',
     ['k8s_control_plane_pod_cidr = "192.0.0.0/16" overlaps the cluster network of']),
    ('bad-endpoint', ['k8s_workers'], {'k8s_control_plane_endpoint': 'https://k8s-api.cluster.example.org:6443'},
     'Check the release, the endpoint, the CNI and the join settings',
     ['k8s_control_plane_endpoint = "https://k8s-api.cluster.example.org:6443" is not accepted: give HOST[:PORT], '
      'not a URL']),
    ('bad-operator', ['k8s_control_plane'], {'k8s_gpu_stack': 'gpu_operator',
                                             'k8s_gpu_operator_values': {'driver': {'enabled': True}}},
     "Check the GPU stack's settings",
     ['k8s_gpu_operator_values.driver.enabled = true is not accepted: this project installs the NVIDIA driver']),
]


@pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason='ansible-playbook not beside this python')
def test_preflights_pass_on_recorded_facts_and_refuse_bad_input_naming_the_variable(tmp_path):
    from ansible.plugins.loader import cache_loader, init_plugin_loader
    init_plugin_loader([COLLECTIONS])
    with open(os.path.join(FIXTURES, 'facts-debian12.json')) as handle:
        facts = json.load(handle)
    cache_dir = tmp_path / 'facts'
    cache = cache_loader.get('jsonfile', _uri=str(cache_dir))
    good = ['cp1', 'gpu1', 'gpu2']
    for host in good + [b[0] for b in BAD]:
        cache.set(host, facts)
    extra = {'all': {'vars': {'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable,
                              'k8s_control_plane_endpoint': 'k8s-api.cluster.example.org:6443'},
                     'children': {}}}
    for host, groups, variables, _task, _parts in BAD:
        for group in groups:
            extra['all']['children'].setdefault(group, {'hosts': {}})['hosts'][host] = variables
    (tmp_path / 'extra.yml').write_text(yaml.safe_dump(extra))
    (tmp_path / 'play.yml').write_text(PREFLIGHTS)
    proc = subprocess.run([ANSIBLE_PLAYBOOK, '-i', os.path.join(FIXTURES, 'inventory'), '-i', str(tmp_path / 'extra.yml'),
                           str(tmp_path / 'play.yml'), '--check'], cwd=str(tmp_path),
                          env=_env(tmp_path, ANSIBLE_CACHE_PLUGIN='jsonfile', ANSIBLE_CACHE_PLUGIN_CONNECTION=str(cache_dir),
                                   ANSIBLE_GATHERING='explicit', ANSIBLE_STDOUT_CALLBACK='ansible.builtin.json'),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=600, check=False)
    report = json.loads(proc.stdout)
    stats = report['stats']
    for host in good:
        assert stats[host]['failures'] == 0 and stats[host]['changed'] == 0, (host, proc.stdout[-4000:])
    assert stats['cp1']['ok'] > 10
    failed = {}
    for play in report['plays']:
        for task in play['tasks']:
            for host, result in task['hosts'].items():
                if result.get('failed'):
                    failed[host] = (task['task']['name'], str(result.get('msg')))
    assert sorted(failed) == sorted(b[0] for b in BAD), failed
    for host, _groups, _variables, task, parts in BAD:
        name, message = failed[host]
        assert task in name, (host, name)
        for part in parts:
            assert part in message, (host, message)
        assert stats[host]['changed'] == 0
