# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""rdma_facts through Ansible's module harness, against sysfs trees built from real recordings and our own."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import importlib.util
import os

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpucluster.core.plugins.modules import rdma_facts

# The tree builders live beside the parser's tests; load them by path (the test folders are not packages).
_SPEC = importlib.util.spec_from_file_location(
    'rdma_tree_builders', os.path.join(os.path.dirname(__file__), '..', 'module_utils', 'test_rdma_sysfs.py'))
trees = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(trees)


class ExitJson(Exception):
    pass


class FailJson(Exception):
    pass


@pytest.fixture(autouse=True)
def harness(monkeypatch):
    def exit_json(self, **kwargs):
        raise ExitJson(kwargs)

    def fail_json(self, **kwargs):
        kwargs['failed'] = True
        raise FailJson(kwargs)
    monkeypatch.setattr(basic.AnsibleModule, 'exit_json', exit_json)
    monkeypatch.setattr(basic.AnsibleModule, 'fail_json', fail_json)


def run_module(args, expect_fail=False):
    with patch_module_args(args):
        with pytest.raises(FailJson if expect_fail else ExitJson) as info:
            rdma_facts.main()
    return info.value.args[0]


def _keys(rdma):
    return sorted('%s/%s %s %s' % (i['hca'], i['port'], i['check'], i['severity']) for i in rdma['health']['issues'])


def test_every_recording_end_to_end(real_fixtures_dir, tmp_path):
    found = trees.real_recordings(real_fixtures_dir)
    assert sorted(name for name, _kind, _path in found) == sorted(trees.RECORDINGS)
    for name, _kind, path in found:
        model = trees.recording_model(path)
        root = trees.write_tree(str(tmp_path / name), model)
        result = run_module({'sysfs_root': root})
        rdma = result['ansible_facts']['rdma']
        status, hca_count, port_count, issues = trees.RECORDINGS[name]
        if issues is None:
            issues = trees._expected_issues_from_recording(model)
        assert result['changed'] is False, name
        assert (rdma['present'], rdma['count'], rdma['port_count']) == (True, hca_count, port_count), name
        assert rdma['health']['status'] == status, name
        assert _keys(rdma) == sorted(issues), name


def test_ib_tree_end_to_end(tmp_path):
    root = trees.write_ib_tree(str(tmp_path / 'sys'))
    result = run_module({'sysfs_root': root, 'expected_rate_gbps': 400, 'fail_on': 'warning'})
    rdma = result['ansible_facts']['rdma']
    assert result['changed'] is False
    assert rdma['health'] == {'status': 'ok', 'issues': [], 'checks_skipped': []}
    assert [(h['name'], h['fw_ver'], h['ports'][0]['rate_gbps'], h['ports'][0]['lid']) for h in rdma['hcas']] == [
        ('mlx5_0', '28.39.1002', 400, 534), ('mlx5_1', '28.39.1002', 400, 535)]
    assert rdma['expected_rate_gbps'] == 400 and rdma['ignore_ports'] == []


def test_roce_tree_end_to_end_in_check_mode(tmp_path):
    root = trees.write_tree(str(tmp_path / 'sys'), trees.roce_model(), net_mtu={'ens1np0': 9000})
    normal = run_module({'sysfs_root': root})
    checked = run_module({'sysfs_root': root, '_ansible_check_mode': True})
    assert checked == normal
    port = normal['ansible_facts']['rdma']['hcas'][0]['ports'][0]
    assert (port['roce_v2_ipv4_gid_index'], port['roce_v2_ipv4_address'], port['active_mtu']) == (3, '10.0.0.11', 4096)


def test_host_without_hcas(tmp_path):
    (tmp_path / 'sys').mkdir()
    result = run_module({'sysfs_root': str(tmp_path / 'sys'), 'fail_on': 'warning'})
    rdma = result['ansible_facts']['rdma']
    assert result['changed'] is False
    assert (rdma['present'], rdma['count'], rdma['hcas']) == (False, 0, [])
    assert rdma['health']['status'] == 'ok' and _keys(rdma) == ['None/None rdma_present info']


@pytest.mark.parametrize('fail_on, model_args, fails', [
    ('never', {'state': 'DOWN', 'phys': 'Disabled'}, False),
    ('critical', {'state': 'DOWN', 'phys': 'Disabled'}, True),
    ('critical', {'rate': '200 Gb/sec (4X HDR)'}, False),
    ('warning', {'rate': '200 Gb/sec (4X HDR)'}, True),
    ('warning', {}, False),
])
def test_fail_on(tmp_path, fail_on, model_args, fails):
    root = trees.write_tree(str(tmp_path / 'sys'), trees.roce_model(**model_args), net_mtu={'ens1np0': 9000})
    result = run_module({'sysfs_root': root, 'fail_on': fail_on, 'expected_rate_gbps': 400}, expect_fail=fails)
    if fails:
        assert result['msg'].startswith('RDMA health ') and 'mlx5_0 port 1' in result['msg']
        assert result['ansible_facts']['rdma']['present'] is True


def test_ignore_ports_through_the_module(tmp_path):
    root = trees.write_tree(str(tmp_path / 'sys'), trees.roce_model(state='DOWN', phys='Disabled'),
                            net_mtu={'ens1np0': 9000})
    result = run_module({'sysfs_root': root, 'ignore_ports': ['mlx5_0/1'], 'fail_on': 'critical'})
    rdma = result['ansible_facts']['rdma']
    assert rdma['health']['status'] == 'ok' and rdma['hcas'][0]['ports'][0]['ignored'] is True


@pytest.mark.parametrize('args, message', [
    ({'expected_rate_gbps': 0}, 'expected_rate_gbps=0.0; accepted: a number of Gb/s greater than 0'),
    ({'expected_rate_gbps': 'fast'}, "expected_rate_gbps"),
    ({'ignore_ports': ['mlx5_0/x']}, "ignore_ports item 'mlx5_0/x'; accepted"),
    ({'fail_on': 'sometimes'}, 'fail_on'),
])
def test_bad_input_fails_with_a_clear_message(tmp_path, args, message):
    (tmp_path / 'sys').mkdir()
    args = dict(args, sysfs_root=str(tmp_path / 'sys'))
    result = run_module(args, expect_fail=True)
    assert message in result['msg'] and 'Traceback' not in result['msg']
