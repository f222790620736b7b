# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Values that land in configuration files, and the filters that render them, under bad input.

Every case states its exact outcome: accepted (no message, the rendering unchanged) or refused
with a message that names the variable and the problem. A few cases run a role's preflight with
ansible-playbook (local connection, --check) to show the refusal comes before any change.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import ast
import grp
import json
import os
import subprocess
import sys

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.gpucluster.core.plugins.filter import config_values as cv
from ansible_collections.gpucluster.core.plugins.filter import container_runtime as cr
from ansible_collections.gpucluster.core.plugins.filter import nvidia as nv
from ansible_collections.gpucluster.core.plugins.filter import slurm as sl

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), 'ansible-playbook')

NL = 'a line break (\\n)'

# (id, kind, what, values, expected messages as (variable path, problem fragment)); [] = accepted
VALUE_CASES = [
    # accepted
    ('slurm-defaults', 'slurm', 'slurm.conf',
     {'slurm_select_type_parameters': 'CR_Core_Memory', 'slurm_priority': {
         'PriorityType': 'priority/multifactor', 'PriorityDecayHalfLife': '7-0', 'PriorityWeightAge': 1000,
         'PriorityFavorSmall': 'NO'}, 'slurm_health_check_interval': 300, 'slurm_node_addr': ''}, []),
    ('slurm-tres-weights', 'slurm', 'slurm.conf',
     {'slurm_conf_extra': {'PriorityWeightTRES': 'CPU=1000,Mem=2000,GRES/gpu=8000',
                           'SchedulerParameters': 'bf_continue,bf_window=4320'}}, []),
    ('slurm-bool-value', 'slurm', 'cgroup.conf', {'slurm_cgroup_extra': {'ConstrainSwapSpace': True}}, []),
    ('features-ok', 'slurm_name', 'slurm.conf', {'slurm_node_features': ['gpu', 'ib_hdr', 'h100.80gb', 'rack-4']}, []),
    ('pyxis-args-ok', 'word', 'plugstack.conf', {'container_runtime_pyxis_args': ['container_scope=global', 'remap_root=1']}, []),
    ('urls-ok', 'url', '', {'a': 'https://download.docker.com/linux/rhel/$releasever/$basearch/stable',
                            'b': 'https://nvidia.github.io/libnvidia-container/stable', 'c': ''}, []),
    ('paths-ok', 'path', '', {'a': '/usr/local', 'b': '/etc/slurm', 'c': ''}, []),
    ('versions-ok', 'versions', '', {'cuda_toolkit_versions': ['12.4', '12.10', '12.4.1']}, []),
    ('versions-empty-list', 'versions', '', {'cuda_toolkit_versions': []}, []),
    ('version-ok', 'version', '', {'nvidia_driver_version': '535.309.01'}, []),
    ('line-sysctl-ok', 'line', 'sysctl.d', {'os_tuning_sysctl_settings': {'net.ipv4.tcp_rmem': '4096 87380 16777216',
                                                                          'vm.swappiness': 1}}, []),
    ('secret-ok', 'slurm', 'slurmdbd.conf', {'slurm_accounting_db_password': 'Xy7-Qz!9_pass'}, []),
    ('word-top-level-empty', 'word', '', {'monitoring_prometheus_retention_size': ''}, []),
    ('gpu-cores-int-keys', 'word', 'gres.conf', {'slurm_gpu_cores': {0: '0-31', 1: '32-63'}}, []),
    # refused: line breaks and control characters
    ('cgroup-extra-newline', 'slurm', 'cgroup.conf',
     {'slurm_cgroup_extra': {'AllowedRAMSpace': '100\nConstrainDevices=no'}},
     [('slurm_cgroup_extra.AllowedRAMSpace = "100\\nConstrainDevices=no"', NL)]),
    ('select-params-newline', 'slurm', 'slurm.conf', {'slurm_select_type_parameters': 'CR_Core\nSelectType=x'},
     [('slurm_select_type_parameters = ', NL)]),
    ('conf-extra-cr', 'slurm', 'slurm.conf', {'slurm_conf_extra': {'MaxJobCount': '10\r'}},
     [('slurm_conf_extra.MaxJobCount = ', 'a carriage return (\\r)')]),
    ('priority-tab', 'slurm', 'slurm.conf', {'slurm_priority': {'PriorityMaxAge': '7-0\t'}},
     [('slurm_priority.PriorityMaxAge = ', 'a tab (\\t)')]),
    ('nul-byte', 'line', '', {'x': 'a\x00b'}, [('x = ', 'a NUL byte')]),
    ('escape-char', 'line', '', {'x': '\x1b[31m'}, [('x = ', 'the control character U+001B')]),
    ('unicode-line-separator', 'line', '', {'x': 'a\u2028b'}, [('x = ', 'the control character U+2028')]),
    ('c1-next-line', 'line', '', {'x': 'a\x85b'}, [('x = ', 'the control character U+0085')]),
    ('pyxis-args-newline', 'word', 'plugstack.conf',
     {'container_runtime_pyxis_args': ['remap_root=1\nrequired /tmp/evil.so']},
     [('container_runtime_pyxis_args[0] = ', NL)]),
    ('features-newline', 'slurm_name', 'slurm.conf', {'slurm_node_features': ['gpu\nNodeName=evil']},
     [('slurm_node_features[0] = ', NL)]),
    ('enroot-config-newline', 'line', 'enroot.conf', {'container_runtime_enroot_config': {'ENROOT_X': 'a\nb'}},
     [('container_runtime_enroot_config.ENROOT_X = ', NL)]),
    ('nested-list-in-dict', 'line', '', {'v': {'k': ['ok', 'bad\n']}}, [('v.k[1] = ', NL)]),
    ('trailing-newline-url', 'url', 'the repository file', {'u': 'https://example.com/repo\n'}, [('u = ', NL)]),
    ('key-with-newline', 'line', '', {'v': {'a\nb': 1}}, [('v = "a\\nb"', 'the key "a\\nb" has characters')]),
    # refused: comment and separator characters
    ('conf-extra-hash', 'slurm', 'slurm.conf', {'slurm_conf_extra': {'Prolog': '/x#y'}},
     [('slurm_conf_extra.Prolog = ', "it contains '#', which starts a comment in slurm.conf")]),
    ('select-params-space', 'slurm', 'slurm.conf', {'slurm_select_type_parameters': 'CR_Core ConstrainDevices=no'},
     [('slurm_select_type_parameters = ', 'it contains white space')]),
    ('slurm-quote', 'slurm', 'slurm.conf', {'slurm_health_check_node_state': 'ANY"'},
     [('slurm_health_check_node_state = ', 'a quote (")')]),
    ('slurm-backslash', 'slurm', 'slurm.conf', {'slurm_node_addr': 'a\\b'},
     [('slurm_node_addr = ', 'a backslash')]),
    ('slurm-bad-key', 'slurm', 'slurm.conf', {'slurm_conf_extra': {'Bad Key': 'x'}},
     [('slurm_conf_extra = "Bad Key"', 'is not a Slurm option name')]),
    ('slurm-key-trailing-newline', 'slurm', 'slurm.conf', {'slurm_conf_extra': {'MaxJobCount\n': '5'}},
     [('slurm_conf_extra = "MaxJobCount\\n"', 'is not a Slurm option name')]),
    ('slurm-empty-value', 'slurm', 'slurm.conf', {'slurm_conf_extra': {'MaxJobCount': ''}},
     [('slurm_conf_extra.MaxJobCount = ""', 'it is empty')]),
    ('slurm-null-value', 'slurm', 'slurm.conf', {'slurm_conf_extra': {'MaxJobCount': None}},
     [('slurm_conf_extra.MaxJobCount = null', 'it is empty (null)')]),
    ('features-comma', 'slurm_name', 'slurm.conf', {'slurm_node_features': ['a,b']},
     [('slurm_node_features[0] = "a,b"', 'characters other than letters')]),
    ('pyxis-args-space', 'word', 'plugstack.conf', {'container_runtime_pyxis_args': ['a b']},
     [('container_runtime_pyxis_args[0] = ', 'it contains white space')]),
    ('pyxis-args-hash', 'word', 'plugstack.conf', {'container_runtime_pyxis_args': ['#x']},
     [('container_runtime_pyxis_args[0] = ', "'#', which starts a comment in plugstack.conf")]),
    ('url-hash', 'url', '', {'u': 'https://h/x#frag'}, [('u = ', "it contains '#'")]),
    ('url-no-scheme', 'url', '', {'u': 'example.com/repo'}, [('u = ', 'it is not a URL')]),
    ('path-relative', 'path', '', {'p': 'usr/local'}, [('p = ', 'it is not an absolute path')]),
    ('path-space', 'path', '', {'p': '/usr/local dir'}, [('p = ', 'it contains white space')]),
    ('mapping-where-scalar', 'word', '', {'x': [{'a': {'b': None}}]}, [('x[0].a.b = null', 'it is empty (null)')]),
    ('float-nan', 'line', '', {'x': float('nan')}, [('x = NaN', 'it is not a finite number')]),
    # versions must be strings
    ('versions-float', 'versions', '', {'cuda_toolkit_versions': [12.1]},
     [('cuda_toolkit_versions[0] = 12.1', 'quote it: cuda_toolkit_versions: ["12.1"]')]),
    ('versions-int', 'versions', '', {'cuda_toolkit_versions': ['12.4', 12]},
     [('cuda_toolkit_versions[1] = 12', 'it is the number 12, not a string')]),
    ('versions-bool', 'versions', '', {'cuda_toolkit_versions': [True]},
     [('cuda_toolkit_versions[0] = true', 'it is a boolean')]),
    ('versions-string-not-list', 'versions', '', {'cuda_toolkit_versions': '12.4'},
     [('cuda_toolkit_versions = "12.4"', 'it is not a list')]),
    ('versions-trailing-newline', 'versions', '', {'cuda_toolkit_versions': ['12.4\n']},
     [('cuda_toolkit_versions[0] = ', NL)]),
    ('version-float', 'version', '', {'cuda_toolkit_version': 12.2},
     [('cuda_toolkit_version = 12.2', 'quote it: cuda_toolkit_version: "12.2"')]),
    # several variables: one message each, sorted by name
    ('two-offenders', 'slurm', 'slurm.conf', {'b_var': 'x y', 'a_var': 'ok', 'c_var': 'z\n'},
     [('b_var = ', 'white space'), ('c_var = ', NL)]),
]


@pytest.mark.parametrize('case_id, kind, what, values, expected', VALUE_CASES, ids=[c[0] for c in VALUE_CASES])
def test_config_value_errors(case_id, kind, what, values, expected):
    errors = cv.config_value_errors(values, kind, what)
    assert len(errors) == len(expected), errors
    for message, (start, fragment) in zip(errors, expected):
        assert message.startswith(start), message
        assert fragment in message, message
        assert 'accepted: ' in message
        if what:
            assert (' in %s' % what) in message


@pytest.mark.parametrize('password, fragment', [
    ('Zq7#Vw9', "it contains '#'"),
    ('Zq7 Vw9', 'it contains white space'),
    ('Zq7\nVw9', NL),
    ('Zq7"Vw9', 'a quote (")'),
    ('Zq7\\Vw9', 'a backslash'),
])
def test_secret_is_never_shown(password, fragment):
    errors = cv.config_value_errors({'slurm_accounting_db_password': password}, 'slurm', 'slurmdbd.conf', secret=True)
    assert len(errors) == 1
    assert errors[0].startswith('slurm_accounting_db_password is not accepted in slurmdbd.conf (value not shown): ')
    assert fragment in errors[0]
    assert 'Zq7' not in errors[0] and 'Vw9' not in errors[0]


def test_deep_nesting_is_a_message_not_a_recursion_error():
    value = 'x'
    for _unused in range(200):
        value = [value]
    errors = cv.config_value_errors({'deep': value}, 'line')
    assert len(errors) == 1
    assert 'it is nested more than 16 levels deep' in errors[0]
    assert errors[0].startswith('deep' + '[0]' * 17)


@pytest.mark.parametrize('values, kind, fragment', [
    (['not', 'a', 'dict'], 'line', 'expects a dict of {variable name: value}, got list'),
    ({'a': 'b'}, 'nonsense', "kind 'nonsense' is not one of"),
])
def test_config_value_errors_bad_call(values, kind, fragment):
    with pytest.raises(AnsibleFilterError, match=r'^config_value_errors: ') as err:
        cv.config_value_errors(values, kind)
    assert fragment in str(err.value)


# --- the filters: bad input is an AnsibleFilterError naming the variable, good input renders as before ---

_FILTERS = dict(list(sl.FilterModule().filters().items()) + list(nv.FilterModule().filters().items())
                + list(cr.FilterModule().filters().items()))
_REPORT = {'cpus': 8, 'boards': 1, 'sockets_per_board': 1, 'cores_per_socket': 4, 'threads_per_core': 2,
           'real_memory': 64000, 'node_name': 'gpu1'}

FILTER_CASES = [
    ('driver-version-trailing-newline', 'nvidia_driver_version_info', ('535.309.01\n',), {},
     "nvidia_driver_version '535.309.01\n' is not an upstream driver version"),
    ('driver-version-float', 'nvidia_driver_version_info', (535.1,), {}, 'nvidia_driver_version: 535.1 is a number'),
    ('cuda-version-trailing-newline', 'cuda_version_info', ('12.4\n',), {}, "CUDA toolkit version '12.4\n' is malformed"),
    ('cuda-version-float', 'cuda_version_info', (12.1,), {}, 'cuda_toolkit_version/cuda_toolkit_versions: 12.1 is a number'),
    ('cuda-plan-float-list', 'cuda_toolkit_plan', ([12.1], '12.1', 'cuda_repo', 'Debian'), {},
     'cuda_toolkit_version/cuda_toolkit_versions: 12.1 is a number'),
    ('cuda-plan-string-list', 'cuda_toolkit_plan', ('12.4', '12.4', 'cuda_repo', 'Debian'), {},
     "cuda_toolkit_versions: '12.4' is not a list"),
    ('nccl-trailing-newline', 'cuda_toolkit_plan', (['12.4'], '12.4', 'cuda_repo', 'Debian', '', '2.21.5-1+cuda12.4\n'), {},
     'cuda_toolkit_nccl_version'),
    ('cudnn-trailing-junk', 'cuda_toolkit_plan', (['12.4'], '12.4', 'cuda_repo', 'Debian', '9.1.0.70-1 evil'), {},
     'cuda_toolkit_cudnn_version'),
    ('driver-packages-string', 'nvidia_driver_plan', ('535.309.01', 'cuda_repo', 'Debian', '12', 'open'),
     {'packages_override': 'nvidia-driver'}, "nvidia_driver_packages: 'nvidia-driver' is not a list of package names"),
    ('installed-matches-bad-plan', 'nvidia_installed_matches', ({}, {}), {},
     'nvidia_installed_matches: malformed input (KeyError'),
    ('kernel-module-bad-devices', 'nvidia_kernel_module_type', ('auto', '535.309.01', [{'kind': 'gpu'}]), {},
     'nvidia_kernel_module_type: malformed input (KeyError'),
    ('toolkit-version-trailing-newline', 'nvidia_toolkit_packages', ('1.18.2\n',), {},
     "NVIDIA Container Toolkit version '1.18.2\\n'"),
    ('toolkit-revision-trailing-newline', 'nvidia_toolkit_packages', ('1.18.2', '1\n'), {}, "package revision '1\\n'"),
    ('runtime-args-string', 'docker_daemon_merge', ('{}',), {'runtime_args': 'a b'},
     "container_runtime_nvidia_runtime_args: 'a b' is not a list of strings"),
    ('dropin-contents-not-dict', 'containerd_nvidia_dropin',
     ('version = 2\n', ['/x.toml'], ['/x.toml'], '', 'containerd 1.7.2', '/y.toml'), {},
     'containerd_nvidia_dropin: malformed input (TypeError'),
    ('gres-type-trailing-newline', 'slurm_gpu_type', ('NVIDIA H100',), {'type_map': {'NVIDIA H100': 'h100\n'}},
     "slurm_gpu_type_map: 'NVIDIA H100' maps to 'h100\\n'"),
    ('type-map-not-dict', 'slurm_gpu_type', ('NVIDIA H100',), {'type_map': 'h100'},
     "slurm_gpu_type_map: 'h100' is not a dict"),
    ('node-record-reserve-text', 'slurm_node_record', (_REPORT,), {'overrides': {'memory_reserve_mib': 'lots'}},
     "slurm_real_memory_reserve_mib: 'lots' is not a whole number"),
    ('node-record-memory-text', 'slurm_node_record', (_REPORT,), {'overrides': {'real_memory': '1e3'}},
     "slurm_node_real_memory: '1e3' is not a whole number"),
    ('node-record-features-string', 'slurm_node_record', (_REPORT,), {'overrides': {'features': 'gpu,ib'}},
     "slurm_node_features: 'gpu,ib' is not a list of feature names"),
    ('node-record-feature-newline', 'slurm_node_record', (_REPORT,), {'overrides': {'features': ['gpu\nx']}},
     "slurm_node_features: 'gpu\\nx' is not a feature name"),
    ('node-record-name-newline', 'slurm_node_record', (_REPORT,), {'overrides': {'name': 'gpu1\n'}},
     "slurm_node_name: 'gpu1\\n' is not a Slurm node name"),
    ('node-record-missing-key', 'slurm_node_record', ({'node_name': 'gpu1'},), {},
     'slurm_node_record: malformed input (KeyError'),
    ('gpu-cores-not-dict', 'slurm_node_record', (_REPORT, {'present': True, 'devices': [
        {'index': 0, 'minor_number': 0, 'name': 'NVIDIA H100'}]}), {'overrides': {'gpu_cores': ['0-3']}},
     "slurm_gpu_cores: ['0-3'] is not a dict"),
    ('node-line-not-record', 'slurm_node_line', ({'name': 'x'},), {}, 'slurm_node_line: malformed input (KeyError'),
    ('partition-lines-no-name', 'slurm_partition_lines', ([{'nodes': 'ALL'}], {}), {},
     'slurm_partition_lines: malformed input (KeyError'),
    ('partition-lines-nodes-int', 'slurm_partition_lines', ([{'name': 'p', 'nodes': 5}], {}), {},
     'slurm_partition_lines: malformed input (TypeError'),
    ('validate-not-dict', 'slurm_validate', (['x'],), {}, 'slurm_validate: malformed input (AttributeError'),
    ('default-mem-bad-cpus', 'slurm_default_mem_per_cpu', ([{'real_memory': 10, 'cpus': 'many'}],), {},
     'slurm_default_mem_per_cpu: malformed input (ValueError'),
    ('compress-files-int', 'slurm_compress_files', ([1, 2],), {}, 'slurm_compress_files: malformed input (TypeError'),
]


@pytest.mark.parametrize('case_id, name, args, kwargs, fragment', FILTER_CASES, ids=[c[0] for c in FILTER_CASES])
def test_filters_refuse_bad_input_with_a_clear_error(case_id, name, args, kwargs, fragment):
    with pytest.raises(AnsibleFilterError) as err:
        _FILTERS[name](*args, **kwargs)
    assert fragment in str(err.value)


def _spec(**extra):
    spec = {'controller': 'ctl', 'controllers': ['ctl'], 'inventory': ['ctl', 'gpu1'],
            'compute': {'gpu1': {'node_name': 'gpu1', 'memtotal_mib': 64000}},
            'partitions': [{'name': 'gpu', 'nodes': 'ALL', 'default': True}], 'conf_extra': {}}
    spec.update(extra)
    return spec


@pytest.mark.parametrize('extra, expected', [
    ({}, []),
    ({'conf_extra': {'PriorityWeightTRES': 'CPU=1000,GRES/gpu=8000', 'MaxJobCount': 10000}}, []),
    ({'conf_extra': {'MaxJobCount': '10\nConstrainDevices=no'}},
     ["slurm_conf_extra: MaxJobCount='10\\nConstrainDevices=no' is not a slurm.conf setting (Key=value, the value one "
      "word without white space, quotes, \"#\" or control characters)"]),
    ({'conf_extra': {'Prolog': '/x #y'}},
     ["slurm_conf_extra: Prolog='/x #y' is not a slurm.conf setting (Key=value, the value one word without white "
      "space, quotes, \"#\" or control characters)"]),
    ({'conf_extra': 'MaxJobCount=1'}, ["slurm_conf_extra: 'MaxJobCount=1' is not a dict of slurm.conf settings"]),
    ({'partitions': [{'name': 'gpu', 'nodes': 'ALL', 'max_time': '1-0\nState=DOWN'}]},
     ["slurm_partitions: partition gpu max_time='1-0\\nState=DOWN': one word (no white space, quotes, \"#\" or "
      "control characters), such as INFINITE"]),
    ({'partitions': [{'name': 'gpu', 'nodes': 'ALL', 'state': 'UP #'}]},
     ["slurm_partitions: partition gpu state='UP #': one word (no white space, quotes, \"#\" or control "
      "characters), such as UP"]),
    ({'partitions': [{'name': 'gpu', 'nodes': 'ALL', 'options': {'MaxNodes': '4#'}}]},
     ["slurm_partitions: partition gpu option MaxNodes='4#': keys are Slurm option names, values one word "
      "(no white space, quotes, \"#\" or control characters)"]),
    ({'partitions': [{'name': 'gpu\n', 'nodes': 'ALL'}]},
     ['slurm_partitions[0]: needs a name of letters, digits, "_", "." or "-"']),
])
def test_slurm_validate_config_values(extra, expected):
    assert sl.validate(_spec(**extra)) == expected


def test_good_values_render_as_before():
    record = sl.node_record(_REPORT, None, {'features': ['gpu', 'ib_hdr'], 'weight': '10', 'memory_reserve_mib': '1024'})
    assert sl.node_line(record) == ('NodeName=gpu1 CPUs=8 Boards=1 SocketsPerBoard=1 CoresPerSocket=4 ThreadsPerCore=2 '
                                    'RealMemory=62976 Feature=gpu,ib_hdr Weight=10 State=UNKNOWN')
    plan = nv.cuda_toolkit_plan(['12.4', '12.2'], '12.4', 'cuda_repo', 'Debian', '', '2.21.5-1+cuda12.4')
    assert plan['install'] == ['cuda-toolkit-12-4', 'cuda-toolkit-12-2', 'libnccl2=2.21.5-1+cuda12.4',
                               'libnccl-dev=2.21.5-1+cuda12.4']
    assert nv.cuda_toolkit_plan(['12.4'], '12.4', 'cuda_repo', 'Debian', '8.9.7.29-1+cuda12.2')['install'][1:] == [
        'libcudnn8=8.9.7.29-1+cuda12.2', 'libcudnn8-dev=8.9.7.29-1+cuda12.2']
    assert cr.nvidia_toolkit_packages('1.18.2', '1', 'apt')[0] == 'nvidia-container-toolkit=1.18.2-1'
    assert cr.docker_daemon_merge('{}', runtime_args=['--debug'])['content'] == (
        '{\n  "runtimes": {\n    "nvidia": {\n      "path": "/usr/bin/nvidia-container-runtime",\n'
        '      "runtimeArgs": [\n        "--debug"\n      ]\n    }\n  }\n}\n')


# --- end to end: the role preflight refuses before anything changes ---

_HOSTS = """all:
  hosts:
    node1:
      ansible_connection: local
      ansible_python_interpreter: %s
      # pam_slurm_adopt (on by default) needs the connecting account in an exempt group: its own primary one.
      slurm_pam_adopt_exempt_groups: [%s]
  children:
    slurm_controller:
      hosts:
        node1:
    slurm_compute:
      hosts:
        node1:
""" % (sys.executable, json.dumps(grp.getgrgid(os.getgid()).gr_name))

_PLAY = """- name: Run one role's preflight
  hosts: all
  gather_facts: false
  tasks:
    - name: Preflight of the role under test
      ansible.builtin.include_role:
        name: "gpucluster.core.{{ role_under_test }}"
        tasks_from: preflight
"""


def _run_preflight(tmp_path, extra_vars):
    (tmp_path / 'hosts.yml').write_text(_HOSTS)
    (tmp_path / 'play.yml').write_text(_PLAY)
    # JSON extra vars carry control characters exactly, as a vars file or inventory would.
    (tmp_path / 'vars.json').write_text(json.dumps(extra_vars))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, 'collections'), ANSIBLE_NOCOLOR='1',
               ANSIBLE_RETRY_FILES_ENABLED='0', ANSIBLE_LOCAL_TEMP=str(tmp_path / 'tmp'))
    proc = subprocess.run([ANSIBLE_PLAYBOOK, '-i', 'hosts.yml', 'play.yml', '--check', '-e', '@vars.json'],
                          cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, check=False, timeout=300)
    return proc.returncode, proc.stdout


E2E_CASES = [
    ('slurm-cgroup-extra-and-password', {
        'role_under_test': 'slurm', 'slurm_health_check': False,
        'slurm_cgroup_extra': {'AllowedRAMSpace': '100\nConstrainDevices=no'},
        'slurm_accounting_db_password': 'hunter#2secret'},
     'the values written into slurm.conf',
     ['slurm_cgroup_extra.AllowedRAMSpace = "100\\nConstrainDevices=no" is not accepted in cgroup.conf: '
      'it contains a line break (\\n); accepted: one word',
      "slurm_accounting_db_password is not accepted in slurmdbd.conf (value not shown): it contains '#', "
      "which starts a comment in slurmdbd.conf; accepted: one word"],
     'hunter'),
    # The munge key is checked with the values (one task): named, never shown.
    ('slurm-munge-key-short', {'role_under_test': 'slurm', 'slurm_health_check': False,
                               'slurm_munge_key': 'Sh0rtKeyX', 'slurm_cgroup_extra': {'A': 'x y'}},
     'Check the munge key and the values written into slurm.conf',
     ["slurm_munge_key is not accepted (value not shown): a string, empty (the controller's key is used) or at least "
      "32 characters.",
      'slurm_cgroup_extra.A = "x y" is not accepted in cgroup.conf'],
     'Sh0rtKeyX'),
    ('cuda-toolkit-float-version', {'role_under_test': 'cuda_toolkit', 'cuda_toolkit_versions': [12.1, '12.4'],
                                    'cuda_toolkit_driver_version': '550.54.15'},
     'Check the toolkit inputs, quoted versions and the repository settings (every failing check is listed)',
     ['cuda_toolkit_versions[0] = 12.1 is not accepted: it is the number 12.1, not a string (YAML reads an unquoted '
      '12.10 as 12.1 and 12.0 as 12); quote it: cuda_toolkit_versions: ["12.1", "12.4"]'], None),
    ('container-runtime-pyxis-args', {'role_under_test': 'container_runtime',
                                      'container_runtime_pyxis_args': ['remap_root=1\nrequired /tmp/x.so']},
     'Check the container_runtime inputs, the toolkit pin, paths, releases and URLs (every failing check is listed)',
     ['container_runtime_pyxis_args[0] = "remap_root=1\\nrequired /tmp/x.so" is not accepted in plugstack.conf: '
      'it contains a line break (\\n)'], None),
    ('nvidia-driver-trailing-newline', {'role_under_test': 'nvidia_driver', 'nvidia_driver_version': '535.309.01\n'},
     'Check the version is a quoted string',
     ['nvidia_driver_version = "535.309.01\\n" is not accepted: it contains a line break (\\n)'], None),
]

_ERROR_PREFIX = '[ERROR]: Task failed: Action failed: '


@pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason='ansible-playbook not beside this python')
@pytest.mark.parametrize('case_id, extra_vars, task, expected, secret', E2E_CASES, ids=[c[0] for c in E2E_CASES])
def test_role_preflight_refuses_before_any_change(tmp_path, case_id, extra_vars, task, expected, secret):
    rc, out = _run_preflight(tmp_path, extra_vars)
    assert rc == 2, out
    tasks = [line for line in out.splitlines() if line.startswith('TASK [')]
    assert task in tasks[-1], out
    assert 'changed=0' in out and 'failed=1' in out, out
    error = [line for line in out.splitlines() if line.startswith(_ERROR_PREFIX)]
    assert len(error) == 1, out
    messages = ast.literal_eval(error[0][len(_ERROR_PREFIX):])
    assert len(messages) == len(expected), messages
    for message, start in zip(messages, expected):
        assert message.startswith(start), message
    if secret:
        assert secret not in out


@pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason='ansible-playbook not beside this python')
def test_role_preflight_accepts_good_values(tmp_path):
    rc, out = _run_preflight(tmp_path, {'role_under_test': 'cuda_toolkit', 'cuda_toolkit_versions': ['12.4', '12.2'],
                                        'cuda_toolkit_version': '12.4', 'cuda_toolkit_driver_version': '550.54.15'})
    assert rc == 0, out
    assert ('TASK [gpucluster.core.cuda_toolkit : Check the toolkit inputs, quoted versions and the repository settings '
            '(every failing check is listed)]') in out
    assert 'failed=0' in out and 'changed=0' in out, out


@pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason='ansible-playbook not beside this python')
def test_slurm_preflight_accepts_good_config_values(tmp_path):
    task = ('TASK [gpucluster.core.slurm : Check the munge key and the values written into slurm.conf, gres.conf, '
            'cgroup.conf, slurmdbd.conf and the MariaDB drop-in]')
    _rc, out = _run_preflight(tmp_path, {
        'role_under_test': 'slurm', 'slurm_health_check': False, 'slurm_gpu_cores': {'0': '0-31', '1': '32-63'},
        'slurm_node_features': ['gpu', 'ib_hdr'], 'slurm_accounting_db_password': 'Good-Pass_123!',
        'slurm_conf_extra': {'PriorityWeightTRES': 'CPU=1000,GRES/gpu=8000', 'MaxJobCount': 10000}})
    lines = out.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith(task)]
    assert len(starts) == 1, out
    assert lines[starts[0] + 1] == 'ok: [node1]', out
    assert 'Good-Pass_123!' not in out
