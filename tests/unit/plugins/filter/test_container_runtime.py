# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import tomllib

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.gpucluster.core.plugins.filter import container_runtime as cr
from ansible_collections.gpucluster.core.plugins.module_utils import swarm

DROPIN = '/etc/containerd/conf.d/99-gpucluster-nvidia.toml'
GLOB = '/etc/containerd/conf.d/*.toml'
BIN = '/usr/bin/nvidia-container-runtime'
V16 = 'containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3'
V17 = 'containerd github.com/containerd/containerd 1.7.24~ds1 1.7.24~ds1-6+deb13u1'
V20 = 'containerd github.com/containerd/containerd/v2 v2.0.4 1a43cb6a1035441f9aca8f5666a9b3ef9e70ab20'
CRI2 = 'io.containerd.grpc.v1.cri'
CRI3 = 'io.containerd.cri.v1.runtime'
DEFAULT_V3 = '''version = 3
[plugins.'io.containerd.cri.v1.runtime'.containerd]
  default_runtime_name = 'runc'
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = 'io.containerd.runc.v2'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      SystemdCgroup = false
'''


def _fixture(own_fixtures_dir, name):
    with open(os.path.join(own_fixtures_dir, 'container_runtime', name)) as handle:
        return handle.read()


# ---------------------------------------------------------------- imports merge

USER_CONFIG = '''# site config, kept by hand
version = 2
root = "/data/containerd"   # fast disk

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.example/pause:3.9"
'''


@pytest.mark.parametrize('text,expected_imports,kept', [
    (USER_CONFIG, [GLOB], ['# site config, kept by hand', 'root = "/data/containerd"   # fast disk']),
    ('version = 2\nimports = ["/etc/containerd/site/*.toml"]\n', ['/etc/containerd/site/*.toml', GLOB], ['version = 2']),
    ('version = 2\nimports = [\n  "/a/*.toml", # one\n  "/b/x].toml",\n]\n[grpc]\naddress = "/run/c.sock"\n',
     ['/a/*.toml', '/b/x].toml', GLOB], ['[grpc]', 'address = "/run/c.sock"']),
    ('imports = []\nversion = 3\n', [GLOB], ['version = 3']),
    ('', [GLOB], []),
    ('version = 2\n' + 'imports = ["%s"]\n' % GLOB, [GLOB], ['version = 2']),
])
def test_imports_merge_adds_entry_and_keeps_text(text, expected_imports, kept):
    result = cr.containerd_config_imports(text, GLOB)
    doc = tomllib.loads(result)
    assert doc['imports'] == expected_imports
    for line in kept:
        assert line in result.split('\n')
    original = tomllib.loads(text)
    original.pop('imports', None)
    doc.pop('imports')
    if text:
        assert doc == original
    # a second pass is a no-op: idempotent
    assert cr.containerd_config_imports(result, GLOB) == result


def test_imports_merge_of_empty_file_follows_containerd_major():
    assert cr.containerd_config_imports('', GLOB, version=3).startswith('version = 3\n')


@pytest.mark.parametrize('text,message', [
    ('version = 2\n[plugins\n', 'not valid TOML'),
    ('[plugins.cri]\nsandbox_image = "x"\n', 'config version 1'),
    ('version = 1\n', 'config version 1'),
    ('version = 4\n', 'config version 4'),
    ('version = 2\nimports = "/etc/x.toml"\n', 'imports must be a list'),
])
def test_imports_merge_refuses_configs_it_cannot_merge(text, message):
    with pytest.raises(AnsibleFilterError, match=message):
        cr.containerd_config_imports(text, GLOB)


# ---------------------------------------------------------------- the drop-in

def _dropin(own_fixtures_dir, main, version=V16, dropins=None, default=None, **kw):
    default = default if default is not None else _fixture(own_fixtures_dir, 'containerd-1.6-config-default.toml')
    dropins = dropins or []
    paths = [d['path'] for d in dropins]
    contents = dict((d['path'], d['content']) for d in dropins if 'content' in d)
    text = cr.containerd_nvidia_dropin(main, paths, contents, default, version, DROPIN, binary_path=BIN, **kw)
    return text, tomllib.loads(text)


def test_dropin_on_1x_carries_the_whole_cri_section_of_debian(own_fixtures_dir):
    main = cr.containerd_config_imports(_fixture(own_fixtures_dir, 'debian12-config.toml'), GLOB)
    _text, doc = _dropin(own_fixtures_dir, main)
    cri = doc['plugins'][CRI2]
    assert doc['version'] == 2
    # Debian's own setting survives the plugin-section replacement of containerd 1.x
    assert cri['cni']['bin_dir'] == '/usr/lib/cni'
    runtimes = cri['containerd']['runtimes']
    assert sorted(runtimes) == ['nvidia', 'runc']
    assert runtimes['runc']['runtime_type'] == 'io.containerd.runc.v2'
    assert runtimes['nvidia']['runtime_type'] == 'io.containerd.runc.v2'
    assert runtimes['nvidia']['options']['BinaryName'] == BIN
    assert 'default_runtime_name' not in cri['containerd']
    # nothing outside the CRI plugin is restated
    assert list(doc['plugins']) == [CRI2]


def test_dropin_copies_the_default_runtime_settings_and_user_runtimes(own_fixtures_dir):
    main = '''version = 2
[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "crun"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.crun]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.crun.options]
      BinaryName = "/usr/bin/crun"
      SystemdCgroup = true
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
    privileged_without_host_devices = true
'''
    _text, doc = _dropin(own_fixtures_dir, main, set_default=True)
    ctd = doc['plugins'][CRI2]['containerd']
    assert sorted(ctd['runtimes']) == ['crun', 'nvidia']  # the user's map, not the defaults
    assert ctd['default_runtime_name'] == 'nvidia'
    nvidia = ctd['runtimes']['nvidia']
    assert nvidia['options'] == {'BinaryName': BIN, 'SystemdCgroup': True}
    assert nvidia['privileged_without_host_devices'] is True


def test_dropin_merges_other_imported_files_in_order(own_fixtures_dir):
    main = 'version = 2\nimports = ["%s"]\n' % GLOB
    dropins = [
        {'path': '/etc/containerd/conf.d/10-registry.toml',
         'content': '[plugins."io.containerd.grpc.v1.cri".registry]\nconfig_path = "/etc/containerd/certs.d"\n'},
        {'path': '/etc/containerd/conf.d/20-sandbox.toml',
         'content': '[plugins."io.containerd.grpc.v1.cri"]\nsandbox_image = "pause:3.9"\n'},
        {'path': DROPIN},
    ]
    _text, doc = _dropin(own_fixtures_dir, main, dropins=dropins)
    cri = doc['plugins'][CRI2]
    assert cri['registry']['config_path'] == '/etc/containerd/certs.d'
    assert cri['sandbox_image'] == 'pause:3.9'


def test_dropin_refuses_a_later_file_that_would_drop_the_runtime(own_fixtures_dir):
    dropins = [{'path': DROPIN},
               {'path': '/etc/containerd/conf.d/zz-site.toml',
                'content': '[plugins."io.containerd.grpc.v1.cri"]\nsandbox_image = "pause:3.9"\n'}]
    with pytest.raises(AnsibleFilterError, match='zz-site.toml is imported after'):
        _dropin(own_fixtures_dir, 'version = 2\n', dropins=dropins)


def test_dropin_on_2x_holds_only_the_runtimes(own_fixtures_dir):
    main = '''version = 3
[plugins.'io.containerd.cri.v1.runtime']
  enable_cdi = true
'''
    text, doc = _dropin(own_fixtures_dir, main, version=V20, default=DEFAULT_V3)
    assert doc['version'] == 3
    section = doc['plugins'][CRI3]
    assert list(section) == ['containerd']
    assert sorted(section['containerd']['runtimes']) == ['nvidia', 'runc']
    assert 'enable_cdi' not in text


def test_dropin_for_empty_config_on_2x_uses_version_3(own_fixtures_dir):
    _text, doc = _dropin(own_fixtures_dir, '', version=V20, default=DEFAULT_V3)
    assert doc['version'] == 3 and CRI3 in doc['plugins']


def test_dropin_needs_the_content_of_each_imported_file(own_fixtures_dir):
    with pytest.raises(AnsibleFilterError, match='no content given for imported file /etc/containerd/conf.d/10-a.toml'):
        _dropin(own_fixtures_dir, 'version = 2\n', dropins=[{'path': '/etc/containerd/conf.d/10-a.toml'}])


def test_dropin_is_deterministic(own_fixtures_dir):
    main = cr.containerd_config_imports(_fixture(own_fixtures_dir, 'debian12-config.toml'), GLOB)
    assert _dropin(own_fixtures_dir, main)[0] == _dropin(own_fixtures_dir, main)[0]


@pytest.mark.parametrize('output,major', [(V16, 1), (V17, 1), (V20, 2), ('containerd containerd.io 1.7.27 05044ec0a', 1)])
def test_containerd_major(output, major):
    assert cr.containerd_major(output) == major


def test_containerd_major_rejects_garbage():
    with pytest.raises(AnsibleFilterError, match='cannot read a containerd version'):
        cr.containerd_major('command not found')


def test_runtimes_of_a_dump(own_fixtures_dir):
    assert cr.containerd_runtimes(_fixture(own_fixtures_dir, 'containerd-1.6-config-default.toml')) == ['runc']
    assert cr.containerd_runtimes(DEFAULT_V3) == ['runc']
    assert cr.containerd_runtimes('version = 2\n') == []


def test_dropin_files_follow_containerd_order():
    found = ['/etc/containerd/conf.d/b.toml', '/etc/containerd/conf.d/a.toml', DROPIN, '/etc/containerd/site/x.toml',
             '/etc/containerd/conf.d/readme.txt']
    imports = ['/etc/containerd/site/*.toml', GLOB]
    assert cr.containerd_dropin_files(found, imports) == [
        '/etc/containerd/site/x.toml', DROPIN, '/etc/containerd/conf.d/a.toml', '/etc/containerd/conf.d/b.toml']
    assert DROPIN not in cr.containerd_dropin_files(found, imports, exclude=DROPIN)


# ---------------------------------------------------------------- TOML writer

@pytest.mark.parametrize('doc', [
    {'a': 1, 'b': 'x"y\\z\n\t\x01', 'c': True, 'd': 1.5, 'e': [1, 2], 'f': {'g': {'h': []}}},
    {'plugins': {'io.containerd.grpc.v1.cri': {'containerd': {'runtimes': {'runc': {'options': {}}}}}}},
    {'t': [{'name': 'a', 'sub': {'k': 1}}, {'name': 'b'}]},
    {'mixed': [{'x': 1}, 2], 'empty': []},
    {'key with space': {'ü': 'ß'}},
])
def test_toml_dumps_round_trips(doc):
    assert tomllib.loads(cr.toml_dumps(doc)) == doc


def test_toml_dumps_keeps_empty_tables():
    text = cr.toml_dumps({'plugins': {'x': {'options': {}}}})
    assert '[plugins.x.options]' in text


# ---------------------------------------------------------------- daemon.json

USER_DAEMON = '{\n  "log-driver": "json-file",\n  "log-opts": {"max-size": "50m"}\n}\n'


@pytest.mark.parametrize('text,kwargs,expected', [
    (USER_DAEMON, {}, {'log-driver': 'json-file', 'log-opts': {'max-size': '50m'},
                       'runtimes': {'nvidia': {'path': BIN}}}),
    ('', {'set_default': True}, {'runtimes': {'nvidia': {'path': BIN}}, 'default-runtime': 'nvidia'}),
    ('{"runtimes": {"nvidia": {"path": "/old", "x": 1}, "crun": {"path": "/usr/bin/crun"}}}', {'runtime_args': ['--debug']},
     {'runtimes': {'nvidia': {'path': BIN, 'x': 1, 'runtimeArgs': ['--debug']}, 'crun': {'path': '/usr/bin/crun'}}}),
    ('{"default-runtime": "nvidia", "runtimes": {"nvidia": {"path": "%s"}}}' % BIN, {},
     {'runtimes': {'nvidia': {'path': BIN}}}),
    ('{"default-runtime": "crun"}', {}, {'default-runtime': 'crun', 'runtimes': {'nvidia': {'path': BIN}}}),
])
def test_daemon_merge(text, kwargs, expected):
    result = cr.docker_daemon_merge(text, binary_path=BIN, **kwargs)
    assert result['needs_write'] is True
    assert json.loads(result['content']) == expected
    again = cr.docker_daemon_merge(result['content'], binary_path=BIN, **kwargs)
    assert again == {'needs_write': False, 'content': result['content']}


def test_daemon_merge_keeps_the_users_text_when_already_merged():
    text = '{"runtimes":{"nvidia":{"path":"%s"}},"log-opts":{"max-size":"50m"}}' % BIN
    assert cr.docker_daemon_merge(text, binary_path=BIN) == {'needs_write': False, 'content': text}


@pytest.mark.parametrize('text,message', [
    ('{"log-opts": {"max-size": "50m"},}', 'not valid JSON'),
    ('["a"]', 'must hold a JSON object'),
    ('{"runtimes": []}', '"runtimes" must be an object'),
])
def test_daemon_merge_refuses_what_it_cannot_read(text, message):
    with pytest.raises(AnsibleFilterError, match=message):
        cr.docker_daemon_merge(text, binary_path=BIN)


@pytest.mark.parametrize('text', ['{"log-opts": {"max-size": "50m"},}', '["a"]', '"x"'])
def test_daemon_json_is_read_as_the_swarm_role_reads_it(text):
    """One loader of daemon.json (module_utils/json_object.py): both roles refuse a file with the same message,
    naming the file and what is wrong."""
    with pytest.raises(AnsibleFilterError) as ours:
        cr.docker_daemon_merge(text, binary_path=BIN, what='/srv/docker/daemon.json')
    with pytest.raises(ValueError) as swarms:
        swarm.daemon_merge(text, 'GPU', [], '/srv/docker/daemon.json')
    assert str(ours.value) == str(swarms.value)
    assert str(ours.value).startswith('/srv/docker/daemon.json ') and 'left untouched' in str(ours.value)


# ---------------------------------------------------------------- toolkit packages

@pytest.mark.parametrize('version,revision,mgr,expected', [
    ('1.18.2', '1', 'apt', ['nvidia-container-toolkit=1.18.2-1', 'nvidia-container-toolkit-base=1.18.2-1',
                            'libnvidia-container-tools=1.18.2-1', 'libnvidia-container1=1.18.2-1']),
    ('1.17.8', '1', 'dnf', ['nvidia-container-toolkit-1.17.8-1', 'nvidia-container-toolkit-base-1.17.8-1',
                            'libnvidia-container-tools-1.17.8-1', 'libnvidia-container1-1.17.8-1']),
    ('1.19.0~rc.5', '1', 'dnf5', ['nvidia-container-toolkit-1.19.0~rc.5-1', 'nvidia-container-toolkit-base-1.19.0~rc.5-1',
                                  'libnvidia-container-tools-1.19.0~rc.5-1', 'libnvidia-container1-1.19.0~rc.5-1']),
])
def test_toolkit_packages(version, revision, mgr, expected):
    assert cr.nvidia_toolkit_packages(version, revision, mgr) == expected


@pytest.mark.parametrize('version,revision,mgr,message', [
    ('latest', '1', 'apt', 'not an exact version'),
    ('1.18', '1', 'apt', 'not an exact version'),
    ('1.18.2', 'a', 'apt', 'must be a number'),
    ('1.18.2', '1', 'zypper', 'not supported'),
])
def test_toolkit_packages_refuses(version, revision, mgr, message):
    with pytest.raises(AnsibleFilterError, match=message):
        cr.nvidia_toolkit_packages(version, revision, mgr)
