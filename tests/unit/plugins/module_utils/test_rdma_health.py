# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""rdma_health on fake sysfs trees read by rdma_sysfs (the same path the health program takes)."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import re

import pytest

from ansible_collections.gpucluster.core.plugins.module_utils import rdma_health, rdma_sysfs


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as handle:
        handle.write(text)


def _tree(root, ports, fw='28.39.1002'):
    """ports: [(hca, port, link_layer, state, phys, rate)]; HCAs are PCI devices with firmware."""
    for hca, port, layer, state, phys, rate in ports:
        base = os.path.join(str(root), 'class', 'infiniband', hca)
        pci = os.path.join(str(root), 'devices', 'pci0000:00', '0000:00:%02x.0' % int(hca[-1]))
        if not os.path.exists(os.path.join(base, 'fw_ver')):
            _write(os.path.join(base, 'fw_ver'), fw + '\n')
            _write(os.path.join(base, 'board_id'), 'MT_0000000838\n')
            os.makedirs(pci, exist_ok=True)
            os.symlink(pci, os.path.join(base, 'device'))
        pdir = os.path.join(base, 'ports', str(port))
        _write(os.path.join(pdir, 'link_layer'), layer + '\n')
        _write(os.path.join(pdir, 'state'), state + '\n')
        _write(os.path.join(pdir, 'phys_state'), phys + '\n')
        _write(os.path.join(pdir, 'rate'), rate + '\n')
        for name, value in (('lid', '0x12'), ('sm_lid', '0x1'), ('lid_mask_count', '0'), ('cap_mask', '0xa651e848')):
            _write(os.path.join(pdir, name), value + '\n')
        os.makedirs(os.path.join(pdir, 'gids'), exist_ok=True)
    return str(root)


def _facts(root, expected=None, ignore=None):
    return rdma_sysfs.build_facts(rdma_sysfs.collect(root), expected_rate_gbps=expected, ignore_ports=ignore)


ACTIVE = ('4: ACTIVE', '5: LinkUp', '400 Gb/sec (4X NDR)')
DOWN = ('1: DOWN', '2: Polling', '40 Gb/sec (4X QDR)')
SLOW = ('4: ACTIVE', '5: LinkUp', '200 Gb/sec (4X HDR)')


def test_healthy_ib_node(tmp_path):
    facts = _facts(_tree(tmp_path, [('mlx5_0', 1, 'InfiniBand') + ACTIVE, ('mlx5_1', 1, 'InfiniBand') + ACTIVE]), 400)
    issues = rdma_health.health_issues(facts, expect_present=True)
    assert [i for i in issues if i['severity'] != 'info'] == []
    assert rdma_health.worst_status(issues) == 'ok'
    text = rdma_health.render_prometheus(rdma_health.prometheus_samples(facts, issues))
    assert 'gpucluster_rdma_health_status 0\n' in text
    assert 'gpucluster_rdma_hcas 2\n' in text
    assert 'gpucluster_rdma_port_up{hca="mlx5_1",port="1",link_layer="InfiniBand"} 1\n' in text
    assert 'gpucluster_rdma_port_rate_gbps{hca="mlx5_0",port="1",link_layer="InfiniBand"} 400\n' in text
    assert 'gpucluster_rdma_port_expected_rate_gbps 400\n' in text
    assert 'gpucluster_rdma_hca_info{hca="mlx5_0",fw_ver="28.39.1002",board_id="MT_0000000838"} 1\n' in text


def test_port_down_is_critical_and_slow_port_a_warning(tmp_path):
    root = _tree(tmp_path, [('mlx5_0', 1, 'InfiniBand') + DOWN, ('mlx5_1', 1, 'InfiniBand') + SLOW,
                            ('mlx5_2', 1, 'InfiniBand') + ACTIVE])
    facts = _facts(root, 400)
    issues = rdma_health.health_issues(facts)
    judged = [(i['hca'], i['check'], i['severity']) for i in issues if i['severity'] != 'info']
    assert ('mlx5_0', 'rdma_port_state', 'critical') in judged
    assert ('mlx5_0', 'rdma_port_phys_state', 'critical') in judged
    assert ('mlx5_1', 'rdma_port_rate', 'warning') in judged
    assert not [j for j in judged if j[0] == 'mlx5_2']
    # Critical first, then warnings.
    assert [i['severity'] for i in issues if i['severity'] != 'info'] == ['critical', 'critical', 'warning']
    assert all(set(i) == {'gpu', 'hca', 'port', 'check', 'severity', 'message'} for i in issues)
    text = rdma_health.render_prometheus(rdma_health.prometheus_samples(facts, issues))
    assert 'gpucluster_rdma_health_status 2\n' in text
    assert 'gpucluster_rdma_port_up{hca="mlx5_0",port="1",link_layer="InfiniBand"} 0\n' in text
    assert rdma_health.merge_status('ok', issues) == 'critical'
    assert rdma_health.merge_status('critical', rdma_health.health_issues(_facts(_tree(tmp_path / 'x', [
        ('mlx5_0', 1, 'InfiniBand') + SLOW]), 400))) == 'critical'


def test_slow_port_alone_gives_warning_and_ignored_port_is_not_exported(tmp_path):
    root = _tree(tmp_path, [('mlx5_0', 1, 'Ethernet') + SLOW, ('mlx5_1', 1, 'InfiniBand') + DOWN])
    facts = _facts(root, 400, ['mlx5_1'])
    issues = rdma_health.health_issues(facts)
    assert rdma_health.worst_status(issues) in ('warning', 'critical')
    assert not [i for i in issues if i['hca'] == 'mlx5_1' and i['severity'] != 'info']
    samples = rdma_health.prometheus_samples(facts, issues)
    assert not [s for s in samples if s[0] == 'gpucluster_rdma_port_up' and ('hca', 'mlx5_1') in s[1]]
    assert rdma_health.merge_status('ok', [i for i in issues if i['check'] == 'rdma_port_rate']) == 'warning'


def test_no_adapter(tmp_path):
    facts = _facts(str(tmp_path))
    issues = rdma_health.health_issues(facts)
    assert [(i['check'], i['severity']) for i in issues] == [('rdma_present', 'info')]
    assert rdma_health.worst_status(issues) == 'ok'
    expected = rdma_health.health_issues(facts, expect_present=True)
    assert [(i['check'], i['severity']) for i in expected] == [('rdma_present', 'critical')]
    assert 'expected on the RDMA fabric' in expected[0]['message']
    # Facts from an older run without the finding still give the critical issue.
    assert rdma_health.health_issues({'present': False}, expect_present=True)[0]['severity'] == 'critical'
    text = rdma_health.render_prometheus(rdma_health.prometheus_samples(facts, expected))
    assert 'gpucluster_rdma_health_status 2\n' in text and 'gpucluster_rdma_hcas 0\n' in text
    assert 'port_up' not in text


def test_exposition_format_is_well_formed(tmp_path):
    facts = _facts(_tree(tmp_path, [('mlx5_0', 1, 'InfiniBand') + ACTIVE, ('mlx5_0', 2, 'Ethernet') + DOWN],
                         fw='28.39."1002\\'), 400)
    text = rdma_health.render_prometheus(rdma_health.prometheus_samples(facts))
    sample = re.compile(r'^[a-z_]+(\{([a-z_]+="([^"\\\n]|\\[\\"n])*",?)*\})? -?[0-9.e+]+$')
    helped = set()
    for line in text.splitlines():
        if line.startswith('# HELP '):
            helped.add(line.split()[2])
        elif not line.startswith('# TYPE '):
            assert sample.match(line), line
            assert line.split('{')[0].split(' ')[0] in helped
    assert 'fw_ver="28.39.\\"1002\\\\"' in text


def test_drift_firmware(tmp_path):
    facts = _facts(_tree(tmp_path, [('mlx5_0', 1, 'InfiniBand') + ACTIVE, ('mlx5_1', 1, 'InfiniBand') + ACTIVE]))
    assert rdma_health.drift_hca_firmware(facts) == {'mlx5_0': '28.39.1002', 'mlx5_1': '28.39.1002'}
    soft = {'hcas': [{'name': 'rxe0', 'pci_address': None, 'fw_ver': None}]}
    assert rdma_health.drift_hca_firmware(soft) == {}


_HCAS = [{'name': 'mlx5_0', 'ports': [{'port': 1}]}, {'name': 'mlx5_1', 'ports': [{'port': 1}, {'port': 2}]},
         {'name': 'mlx5_10', 'ports': [{'port': 1}]}]


@pytest.mark.parametrize('selection, ignored, missing', [
    (['mlx5_0', 'mlx5_1', 'mlx5_10'], [], []),
    (['mlx5_1'], ['mlx5_0/1', 'mlx5_10/1'], []),                       # exact names: mlx5_1 is not mlx5_10
    (['mlx5_1:2'], ['mlx5_0/1', 'mlx5_1/1', 'mlx5_10/1'], []),
    (['mlx5_1', 'mlx5_1:2'], ['mlx5_0/1', 'mlx5_10/1'], []),
    (['mlx5_0', 'mlx5_3', 'mlx5_0:2'], ['mlx5_1/1', 'mlx5_1/2', 'mlx5_10/1'], ['mlx5_0:2', 'mlx5_3']),
    ([], ['mlx5_0/1', 'mlx5_1/1', 'mlx5_1/2', 'mlx5_10/1'], []),
])
def test_select_ports(selection, ignored, missing):
    assert rdma_health.select_ports(_HCAS, selection) == (ignored, missing)


def test_missing_issues_are_critical_and_name_the_entry():
    issues = rdma_health.missing_issues(['mlx5_0:2', 'mlx5_3'])
    assert [(i['check'], i['severity'], i['hca'], i['port']) for i in issues] == [
        ('rdma_present', 'critical', 'mlx5_0', 2), ('rdma_present', 'critical', 'mlx5_3', None)]
    assert issues[1]['message'].startswith('mlx5_3 is in the RDMA port set the node')
