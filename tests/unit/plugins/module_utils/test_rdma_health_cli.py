# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node health program judges the RDMA ports too: sysfs trees from the real recordings and our own."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os

import pytest

# The installed program (fixture) and the sysfs tree writers of the rdma_sysfs tests.
from test_gpu_health_cli import program  # noqa: F401  pylint: disable=unused-import
from test_rdma_sysfs import acs_config, ib_model, real_recordings, recording_model, roce_model, write_tree

DOWN_RECORDING = 'gpud__ibstat.47.0.h100.some.down.0.txt'
HEALTHY_RECORDING = 'heioy__ibstat_2x-connectx3-mt4099_fdr56.txt'


def _configure(program, rdma):  # pylint: disable=redefined-outer-name
    with open(program.config) as handle:
        config = json.load(handle)
    config['rdma'] = rdma
    with open(program.config, 'w') as handle:
        json.dump(config, handle)


def _recording_tree(program, real_fixtures_dir, name):  # pylint: disable=redefined-outer-name
    paths = dict((n, p) for n, _kind, p in real_recordings(real_fixtures_dir))
    write_tree(str(program.tmp / 'sys'), recording_model(paths[name]))


def _textfile(program, *args):  # pylint: disable=redefined-outer-name
    target = program.tmp / 'textfile'
    target.mkdir(exist_ok=True)
    rc, out, err = program('--config', program.config, '--textfile', str(target), *args)
    return rc, json.loads(out), err, (target / 'gpucluster_health.prom').read_text()


def test_node_without_adapters_is_not_judged(program):  # pylint: disable=redefined-outer-name
    rc, report, err, text = _textfile(program)
    assert rc == 0, err
    assert 'rdma' not in report and not [i for i in report['issues'] if i['check'].startswith('rdma')]
    assert 'gpucluster_rdma_' not in text


def test_expected_fabric_without_adapters_is_critical(program):  # pylint: disable=redefined-outer-name
    _configure(program, {'expect_present': True})
    rc, report, _err, text = _textfile(program)
    assert (rc, report['status']) == (2, 'critical')
    assert [(i['check'], i['severity']) for i in report['issues']] == [('rdma_present', 'critical')]
    # The GPUs' own verdict stays ok; the node's is the worst of both, in the report and the metrics.
    assert report['gpu']['health']['status'] == 'ok'
    assert 'gpucluster_health_status 2\n' in text
    assert 'gpucluster_health_issues{severity="critical",check="rdma_present"} 1\n' in text
    assert 'gpucluster_rdma_health_status 2\n' in text and 'gpucluster_rdma_hcas 0\n' in text


def test_healthy_recording(program, real_fixtures_dir):  # pylint: disable=redefined-outer-name
    _recording_tree(program, real_fixtures_dir, HEALTHY_RECORDING)
    _configure(program, {'expect_present': True})
    rc, report, err, text = _textfile(program)
    assert (rc, report['status']) == (0, 'ok'), err
    assert report['rdma']['count'] == 2 and report['rdma']['port_count'] == 4
    assert 'gpucluster_health_status 0\n' in text and 'gpucluster_rdma_health_status 0\n' in text
    assert text.count('gpucluster_rdma_port_up{') == 4 and ' 0\n' not in ''.join(
        line + '\n' for line in text.splitlines() if line.startswith('gpucluster_rdma_port_up{'))


def test_ports_down_in_a_recording_are_critical(program, real_fixtures_dir):  # pylint: disable=redefined-outer-name
    _recording_tree(program, real_fixtures_dir, DOWN_RECORDING)
    rc, report, _err, text = _textfile(program, '--format', 'json')
    assert (rc, report['status']) == (2, 'critical')
    down = [i for i in report['issues'] if i['check'] == 'rdma_port_state']
    assert down and all(i['severity'] == 'critical' and i['hca'] for i in down)
    assert 'gpucluster_health_status 2\n' in text
    up = [line for line in text.splitlines() if line.startswith('gpucluster_rdma_port_up{')]
    assert len([line for line in up if line.endswith(' 0')]) == len(set((i['hca'], i['port']) for i in down))


def test_port_below_expected_rate_is_a_warning_and_summary_names_it(program):  # pylint: disable=redefined-outer-name
    write_tree(str(program.tmp / 'sys'), roce_model(rate='200 Gb/sec (4X HDR)'), net_mtu={'ens1np0': 9000})
    _configure(program, {'expected_rate_gbps': 400})
    rc, report, _err, text = _textfile(program)
    assert (rc, report['status']) == (1, 'warning')
    assert [(i['check'], i['hca'], i['port'], i['severity']) for i in report['issues']] == [
        ('rdma_port_rate', 'mlx5_0', 1, 'warning')]
    assert 'gpucluster_rdma_port_rate_gbps{hca="mlx5_0",port="1",link_layer="Ethernet"} 200\n' in text
    assert 'gpucluster_rdma_port_expected_rate_gbps 400\n' in text
    rc, out, _err = program('--config', program.config, '--format', 'summary')
    assert rc == 1 and 'mlx5_0' in out


def test_ignored_port_is_not_judged(program):  # pylint: disable=redefined-outer-name
    write_tree(str(program.tmp / 'sys'), roce_model(state='DOWN', phys='Disabled'), net_mtu={'ens1np0': 9000})
    _configure(program, {'ignore_ports': ['mlx5_0/1']})
    rc, report, err, _text = _textfile(program)
    assert (rc, report['status']) == (0, 'ok'), err


@pytest.mark.parametrize('rdma, fragment', [
    ({'expected_rate_gbps': 0}, 'expected_rate_gbps=0; accepted: a number of Gb/s greater than 0'),
    ({'ignore_ports': ['mlx5_0/x']}, "ignore_ports item 'mlx5_0/x'"),
    ({'expect_present': 'yes'}, 'rdma.expect_present must be true or false'),
    ({'expected_rate': 400}, 'rdma: unknown key(s) expected_rate; known: expect_present, expected_rate_gbps'),
    ([400], 'rdma must be an object'),
])
def test_bad_rdma_config(program, rdma, fragment):  # pylint: disable=redefined-outer-name
    _configure(program, rdma)
    rc, out, err = program('--check-config', program.config)
    assert rc == 3 and fragment in err, err
    assert out == '' and os.path.exists(program.config)


# The real H100 recording: eight InfiniBand ports up (the NCCL set), Ethernet adapters down.
IB_SET = ['mlx5_0', 'mlx5_3:1', 'mlx5_4', 'mlx5_5', 'mlx5_6', 'mlx5_9', 'mlx5_10', 'mlx5_11']


def test_only_the_nccl_port_set_is_judged(program, real_fixtures_dir):  # pylint: disable=redefined-outer-name
    _recording_tree(program, real_fixtures_dir, DOWN_RECORDING)
    _configure(program, {'expect_present': True, 'hcas': IB_SET})
    rc, report, err, text = _textfile(program)
    assert (rc, report['status']) == (0, 'ok'), (err, report['issues'])
    judged = sorted(h['name'] for h in report['rdma']['hcas'] if not all(p['ignored'] for p in h['ports']))
    assert judged == sorted(e.split(':', maxsplit=1)[0] for e in IB_SET)
    # The ports outside the set are not exported either (as ignore_ports).
    assert 'gpucluster_rdma_port_up{hca="mlx5_2"' not in text and 'gpucluster_rdma_port_up{hca="mlx5_10",port="1",link_layer="InfiniBand"} 1\n' in text


def test_a_port_of_the_set_down_or_missing_is_critical(program, real_fixtures_dir):  # pylint: disable=redefined-outer-name
    _recording_tree(program, real_fixtures_dir, DOWN_RECORDING)
    _configure(program, {'hcas': IB_SET + ['mlx5_7', 'mlx5_12', 'mlx5_0:2']})
    rc, report, _err, _text = _textfile(program)
    assert (rc, report['status']) == (2, 'critical')
    critical = [(i['check'], i['hca'], i['port']) for i in report['issues'] if i['severity'] == 'critical']
    assert ('rdma_port_state', 'mlx5_7', 1) in critical
    assert ('rdma_present', 'mlx5_12', None) in critical and ('rdma_present', 'mlx5_0', 2) in critical
    assert not [c for c in critical if c[1] in ('mlx5_2', 'mlx5_8')]
    rc, out, _err = program('--config', program.config, '--format', 'summary')
    assert rc == 2 and out.startswith('gpucluster-health critical: ')


def test_a_missing_port_of_the_set_is_critical_without_any_adapter(program):  # pylint: disable=redefined-outer-name
    _configure(program, {'hcas': ['mlx5_0']})
    rc, report, _err, _text = _textfile(program)
    assert (rc, report['status']) == (2, 'critical')
    assert [(i['check'], i['hca']) for i in report['issues'] if i['severity'] == 'critical'] == [('rdma_present', 'mlx5_0')]


@pytest.mark.parametrize('hcas', [['mlx5_0/1'], 'mlx5_0', [''], ['mlx5_0:0'], [1]])
def test_bad_hcas(program, hcas):  # pylint: disable=redefined-outer-name
    _configure(program, {'hcas': hcas})
    rc, _out, err = program('--check-config', program.config)
    assert rc == 3 and 'rdma.hcas must be a list of RDMA devices, optionally with a port (mlx5_0, mlx5_1:1)' in err, err


def _hgx_tree(program, rail_state='ACTIVE', storage_state='ACTIVE'):  # pylint: disable=redefined-outer-name
    """The stand-in nvidia-smi's two GPUs on the bus (0000:41:00.0 under a PCIe switch, 0000:c1:00.0 on a root
    port), mlx5_0 under the same switch as the first (a compute rail), mlx5_1 on a root port of its own (as a
    storage adapter is)."""
    model = ib_model()
    model[0]['pci_domain'], model[0]['pci_chain'] = 'pci0000:3c', ['0000:3c:01.0', '0000:3d:00.0', '0000:3e:01.0', '0000:42:00.0']
    for hca, state in ((model[0], rail_state), (model[1], storage_state)):
        hca['ports'][1].update(state=state, phys_state='LinkUp' if state == 'ACTIVE' else 'Disabled')
    write_tree(str(program.tmp / 'sys'), model,
               gpus=[('pci0000:3c', ['0000:3c:01.0', '0000:3d:00.0', '0000:3e:00.0', '0000:41:00.0']),
                     ('pci0000:c0', ['0000:c0:01.0', '0000:c1:00.0'])],
               configs={'0000:3e:00.0': acs_config(0), '0000:3e:01.0': acs_config(0)})


def _critical(report):
    return [(i['check'], i.get('hca'), i.get('port')) for i in report['issues'] if i['severity'] == 'critical']


def test_without_a_port_set_only_the_adapters_beside_a_gpu_are_judged(program):  # pylint: disable=redefined-outer-name
    # The storage adapter's port is down: not judged, so the node is not drained for it.
    _hgx_tree(program, storage_state='DOWN')
    _configure(program, {'expect_present': True})
    rc, report, err, _text = _textfile(program)
    assert (rc, report['status']) == (0, 'ok'), (err, report['issues'])
    ignored = [(h['name'], p['port']) for h in report['rdma']['hcas'] for p in h['ports'] if p['ignored']]
    assert ignored == [('mlx5_1', 1)]
    # Named as the jobs' port set, the storage adapter is judged again: its port down is critical.
    _configure(program, {'expect_present': True, 'hcas': ['mlx5_0', 'mlx5_1']})
    rc, report, _err, _text = _textfile(program)
    assert (rc, report['status']) == (2, 'critical')
    assert _critical(report) == [('rdma_port_phys_state', 'mlx5_1', 1), ('rdma_port_state', 'mlx5_1', 1)]


def test_the_rail_beside_a_gpu_down_is_critical(program):  # pylint: disable=redefined-outer-name
    _hgx_tree(program, rail_state='DOWN')
    _configure(program, {'expect_present': True})
    rc, report, _err, _text = _textfile(program)
    assert (rc, report['status']) == (2, 'critical')
    assert _critical(report) == [('rdma_port_phys_state', 'mlx5_0', 1), ('rdma_port_state', 'mlx5_0', 1)]
