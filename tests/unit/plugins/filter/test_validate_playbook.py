# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/validate.yml run with ansible-playbook over local connections.

- Bad input (settings, one machine under two names, rails that do not match, busy nodes, a GPU node
  without nccl-tests) stops the run with a message naming the node, the thing and what to do, before
  anything changes: no Slurm command but the read-only squeue, no report, no work directory.
- The per-rail RDMA pairs run end to end against the lab's ib_write_bw TEST DOUBLE (lab/rdma-standin:
  perftest's command line and output over TCP) on each host's stand-in RDMA sysfs tree, inside a
  reservation the run makes and deletes; a port held by another process fails the pair as "port taken"
  and drains nothing.
- GPU nodes (a stand-in nvidia-smi serving a real two-GPU recording): the NCCL and PyTorch job steps
  are checked for their command lines (a stand-in srun records them and prints recorded nccl-tests
  logs, which the verdict functions judge).

Stand-ins for Slurm's commands record every call (argv) as a JSON line.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import re
import shutil
import socket
import subprocess
import sys

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
PLAYBOOK = os.path.join(REPO, 'playbooks', 'validate.yml')
STANDIN = os.path.join(REPO, 'lab', 'rdma-standin')
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), 'ansible-playbook')

sys.path.insert(0, STANDIN)
import make_rdma_sysfs  # noqa: E402  pylint: disable=wrong-import-position,import-error

pytestmark = [
    pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason='ansible-playbook not beside this python'),
    # The playbook creates its work directory owned by root, as it does on a node.
    pytest.mark.skipif(os.geteuid() != 0, reason='the playbook makes root-owned files: run as root'),
]

# One stand-in for scontrol, squeue, srun, sacct (and the torch Python): records its argv, answers from
# files of the test (squeue.out, srun-node.out, srun-fleet.out) or not at all.
RECORDER = u'''#!%(python)s
import json, os, sys
name = os.path.basename(sys.argv[0])
here = %(root)r
with open(os.path.join(here, 'calls'), 'a') as handle:
    handle.write(json.dumps([name] + sys.argv[1:]) + '\\n')
def show(path):
    path = os.path.join(here, path)
    if os.path.exists(path):
        with open(path) as handle:
            sys.stdout.write(handle.read())
args = sys.argv[1:]
if name == 'squeue':
    show('squeue.out')
elif name == 'scontrol' and args[:2] == ['create', 'reservation']:
    print('Reservation created: ' + args[2].split('=', 1)[1])
elif name == 'srun' and any(a.endswith('/all_reduce_perf') for a in args):
    show('srun-fleet.out' if args[-1] == '1' else 'srun-node.out')
elif name == 'torch-python':
    print('2.1.0 True %%s' %% ('True' if os.path.exists(os.path.join(here, 'gpus')) else 'False'))
'''


@pytest.fixture()
def lab(tmp_path):
    root = tmp_path
    bin_dir = root / 'bin'
    bin_dir.mkdir()
    script = RECORDER % {'python': sys.executable, 'root': str(root)}
    for name in ('scontrol', 'squeue', 'srun', 'sacct', 'torch-python'):
        tool = bin_dir / name
        tool.write_text(script)
        tool.chmod(0o755)
    # The ib_write_bw stand-in starts with '#!/usr/bin/env python': this interpreter.
    (bin_dir / 'python').symlink_to(sys.executable)
    hosts = {'node-a': '127.0.0.1', 'node-b': '127.0.0.2'}
    host_lines = []
    for index, (host, address) in enumerate(sorted(hosts.items())):
        make_rdma_sysfs.build(str(root / ('sys-' + host)), 'labroce0', 'lo', address, '2.5 Gb/sec (1X SDR)')
        (root / ('machine-id-' + host)).write_text(u'%032x\n' % (index + 1))
        host_lines.append(
            u'        %s:\n          validate_address: %s\n          validate_slurm_node_name: %s\n'
            u'          validate_rdma_sysfs_root: %s\n          validate_machine_id_path: %s\n'
            % (host, address, host.replace('-', ''), root / ('sys-' + host), root / ('machine-id-' + host)))
    inventory = root / 'hosts.yml'
    inventory.write_text(
        u'all:\n  children:\n    gpucluster:\n      hosts:\n%s      vars:\n        ansible_connection: local\n'
        u'        ansible_python_interpreter: %s\n' % (''.join(host_lines), sys.executable))
    env = dict(os.environ, PATH='%s:%s' % (bin_dir, os.environ.get('PATH', '')),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, 'collections'),
               ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_NOCOLOR='1', ANSIBLE_BECOME='false',
               GPUCLUSTER_LAB_RDMA_SYSFS=str(root / 'sys-node-a'))
    return {'root': root, 'bin': bin_dir, 'calls': root / 'calls', 'inventory': str(inventory), 'env': env}


def run(lab, extra, timeout=300):
    settings = dict({'validate_drain_bad_nodes': True, 'validate_install_tools': False, 'validate_matrix': False,
                     'validate_mtu_check': False, 'validate_ib_loopback': False,
                     'validate_torch_python': str(lab['bin'] / 'torch-python'),
                     'validate_perftest_path': os.path.join(STANDIN, 'ib_write_bw'),
                     'validate_perftest_seconds': 1, 'validate_nccl_hcas': ['labroce0'],
                     'validate_perftest_extra_args': ['--rate_limit=1', '--rate_units=g'],
                     'validate_rdma_efficiency': 0.1,
                     'validate_report_dir': str(lab['root'] / 'report'),
                     'validate_work_dir': str(lab['root'] / 'work')}, **extra)
    proc = subprocess.run([ANSIBLE_PLAYBOOK, '-i', lab['inventory'], PLAYBOOK, '-e', json.dumps(settings)],
                          env=lab['env'], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=timeout, check=False)
    return proc.returncode, ' '.join(proc.stdout.split())


def calls(lab):
    """The Slurm commands that ran (the torch Python's import check is not one)."""
    if not lab['calls'].exists():
        return []
    return [c for c in (json.loads(line) for line in lab['calls'].read_text().splitlines()) if c[0] != 'torch-python']


def report(lab):
    with open(str(lab['root'] / 'report' / 'validate.json')) as handle:
        return json.load(handle)


def checks(data):
    return dict(((c['node'], c['name']), c) for c in data['checks'])


# Every setting is checked in one task whose items all run: one run shows every bad setting's message.
BAD_SETTINGS = {
    'validate_fraction': 1.5, 'validate_sku': 'b300_nvl', 'validate_rdma_pairs': 'maybe',
    'validate_perftest_extra_args': '-q 4', 'validate_reservation': 'two words', 'validate_perftest_path': 'bin/ib_write_bw',
    'validate_nccl_tests_source': 'https://example.invalid/nccl-tests.tar.gz', 'validate_reservation_minutes': 5,
}
BAD_SETTINGS_SAY = [
    'validate_fraction must be a number above 0 and at most 1, got 1.5',
    'validate_sku must be empty (no absolute floors) or one of h100_sxm, h200_sxm',
    'validate_rdma_pairs must be auto, true or false, got "maybe"',
    'validate_perftest_extra_args must be a list of ib_write_bw arguments, got "-q 4"',
    'validate_reservation must be empty (the run makes its own) or the name of a Slurm reservation, got "two words"',
    'validate_perftest_path must be ib_write_bw (the distribution\'s perftest) or the absolute path of an ib_write_bw',
    'validate_nccl_tests_source must be empty, or an https URL or an absolute path on the controller of an nccl-tests tarball',
    'validate_reservation_minutes must be an integer from 10 to 10080',
]


@pytest.mark.parametrize('extra, says', [
    (BAD_SETTINGS, BAD_SETTINGS_SAY),
    ({'validate_hosts': 'node-a', 'validate_matrix': True},
     ['the pair matrix needs at least two hosts: validate_hosts=node-a matched 1 (node-a)']),
    ({'validate_torch_python': '/nonexistent/python3'},
     ['validate_torch_python=/nonexistent/python3 cannot run torch.distributed on node-']),
    ({'validate_perftest_path': '/nonexistent/ib_write_bw'},
     ['has no executable /nonexistent/ib_write_bw (validate_perftest_path)']),
], ids=['settings', 'one-host', 'no-torch', 'no-perftest'])
def test_bad_input_is_refused_and_changes_nothing(lab, extra, says):
    rc, out = run(lab, extra)
    assert rc != 0, out
    for said in says:
        assert said in out, said + '\n' + out
    assert 'Nothing was changed' in out
    assert re.search(r'changed=[1-9]', out) is None, out
    # No Slurm command, no measurement; no report, no work directory.
    assert calls(lab) == []
    assert not (lab['root'] / 'report').exists() and not (lab['root'] / 'work').exists()


def test_one_machine_under_two_names_is_refused(lab):
    """Both inventory names read the same /etc/machine-id: refused before anything runs."""
    shutil.copy(str(lab['root'] / 'machine-id-node-a'), str(lab['root'] / 'machine-id-node-b'))
    rc, out = run(lab, {})
    assert rc != 0, out
    assert 'node-a and node-b are one machine: same /etc/machine-id 00000000000000000000000000000001' in out, out
    assert 'regenerate it with systemd-machine-id-setup' in out and 'Nothing was changed' in out
    assert calls(lab) == [] and not (lab['root'] / 'work').exists()


def test_rails_that_do_not_match_are_refused(lab):
    """node-b has no RDMA device: its rails do not match node-a's; and rdma pairs forced on with no rail."""
    (lab['root'] / 'empty').mkdir()
    shutil.rmtree(str(lab['root'] / 'sys-node-b'))
    rc, out = run(lab, {})
    assert rc != 0, out
    assert 'node-b: no NCCL rail, while node-a have some: the rails must match across the nodes' in out, out
    assert calls(lab) == []
    rc, out = run(lab, {'validate_rdma_pairs': True, 'validate_rdma_sysfs_root': str(lab['root'] / 'empty')})
    assert rc != 0, out
    assert 'validate_rdma_pairs=true but no validated node has an NCCL rail' in out, out
    assert 'rdma_facts found no RDMA device under %s' % (lab['root'] / 'empty') in out, out


def test_busy_nodes_are_refused_unless_told(lab):
    (lab['root'] / 'squeue.out').write_text(u'4242|alice|RUNNING|nodea\n4243|bob|PENDING|nodeb\n')
    rc, out = run(lab, {'validate_rdma_pairs': False, 'validate_ddp': False})
    assert rc != 0, out
    assert 'The validated nodes run jobs: job 4242 (alice, RUNNING on nodea).' in out, out
    assert 'validate_reservation_wait_s' in out and 'validate_force=true' in out and 'Nothing was changed' in out
    # Only the read-only look at the queue ran.
    assert [c[0] for c in calls(lab)] == ['squeue'], calls(lab)
    assert calls(lab)[0] == ['squeue', '--noheader', '--nodelist=nodea,nodeb', '--format=%A|%u|%T|%N']
    # Forced: the reservation ignores the running jobs and the report says the run went beside them.
    rc, out = run(lab, {'validate_rdma_pairs': False, 'validate_ddp': False, 'validate_force': True})
    assert rc == 0, out
    created = [c for c in calls(lab) if c[:3] == ['scontrol', 'create', 'reservation']]
    assert len(created) == 1 and created[0][-1] == 'Flags=IGNORE_JOBS', created
    assert 'beside running jobs (validate_force): job 4242' in checks(report(lab))[('fleet', 'reservation')]['message']


def test_rdma_pairs_per_rail_through_the_stand_in_inside_a_reservation(lab):
    rc, out = run(lab, {'validate_ddp': False})
    assert rc == 0, out
    data = report(lab)
    rail = data['rails'][0]
    assert rail['hcas'] == {'node-a': 'labroce0', 'node-b': 'labroce0'} and rail['link_layer'] == 'Ethernet'
    # Floor: 0.1 x 2.5 Gb/s x 2 (both directions added by ib_write_bw -b).
    assert rail['line_rate_gbps'] == 2.5 and rail['floor_gbps'] == 0.5
    pair = rail['verdict']['pairs'][0]
    assert (pair['a'], pair['b'], pair['status']) == ('node-a', 'node-b', 'ok') and pair['gbps'] > 0.5, pair
    check = checks(data)[('fleet', 'rdma_pairs rail 0 (labroce0)')]
    assert check['status'] == 'passed' and check['message'].startswith('RDMA fabric, Ethernet: bad nodes: none'), check
    made = [c for c in calls(lab) if c[0] == 'scontrol']
    name = made[0][3].split('=', 1)[1]
    assert re.match(r'^gpucluster-validate-\d{14}$', name), made
    assert made[0][:3] == ['scontrol', 'create', 'reservation'] and made[0][4:] == [
        'StartTime=now', 'Duration=120', 'Nodes=nodea,nodeb', 'Users=root'], made
    # Deleted at the end (after the report, before any drain).
    assert made[-1] == ['scontrol', 'delete', 'ReservationName=' + name], made
    assert checks(data)[('fleet', 'reservation')]['message'] == 'measured inside the reservation %s (made for the run)' % name
    assert not any(c[:2] == ['scontrol', 'update'] for c in calls(lab))


def test_a_port_taken_by_another_process_fails_the_pair_and_blames_no_one(lab):
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind(('0.0.0.0', 18515))
    holder.listen(1)
    try:
        rc, out = run(lab, {'validate_ddp': False})
    finally:
        holder.close()
    assert rc != 0, out
    verdict = report(lab)['rails'][0]['verdict']
    assert verdict['fleet_verdict'] == 'incomplete' and verdict['bad_nodes'] == [] and verdict['bad_links'] == []
    assert verdict['pairs'][0]['status'] == 'port_taken', verdict['pairs']
    assert 'port 18515 is held by' in verdict['pairs'][0]['reason'] and 'pid %d' % os.getpid() in verdict['pairs'][0]['reason']
    check = checks(report(lab))[('fleet', 'rdma_pairs rail 0 (labroce0)')]
    assert check['status'] == 'failed' and 'could not be measured because their port was taken' in check['message']
    # Nothing drained: no scontrol update, and the reservation was still removed.
    assert not any(c[:2] == ['scontrol', 'update'] for c in calls(lab))
    assert calls(lab)[-1][:2] == ['scontrol', 'delete'] or any(c[:2] == ['scontrol', 'delete'] for c in calls(lab))


@pytest.fixture()
def gpu_lab(lab, real_fixtures_dir):
    """Both hosts see two GPUs (a stand-in nvidia-smi serving a real 2 x RTX A5000 recording)."""
    recording = os.path.join(real_fixtures_dir, '01_nvidia_smi_xml', 'telegraf__dual_a5000-v13.xml')
    smi = lab['bin'] / 'nvidia-smi'
    smi.write_text(u'#!/bin/sh\n# TEST DOUBLE: a real recording for -q -x\nexec cat %s\n' % recording)
    smi.chmod(0o755)
    (lab['root'] / 'gpus').write_text(u'')
    return lab


def test_a_gpu_node_without_nccl_tests_fails_saying_how_to_provide_them(gpu_lab):
    rc, out = run(gpu_lab, {'validate_nccl_tests_dir': str(gpu_lab['root'] / 'none')})
    assert rc != 0, out
    assert 'has 2 GPU(s) but no nccl-tests: %s/all_reduce_perf is missing' % (gpu_lab['root'] / 'none') in out, out
    assert 'validate_nccl_tests_source' in out and 'validate_nccl_tests_image' in out and 'validate_nccl=false' in out
    assert calls(gpu_lab) == []


def test_nccl_and_ddp_job_steps_on_gpu_nodes(gpu_lab):
    fixtures = os.path.join(REPO, 'tests', 'unit', 'fixtures', 'fabric')
    shutil.copy(os.path.join(fixtures, 'nccl_h100_dgx_1node_8B_16G.txt'), str(gpu_lab['root'] / 'srun-node.out'))
    shutil.copy(os.path.join(fixtures, 'nccl_a100_oci_2node_10G.txt'), str(gpu_lab['root'] / 'srun-fleet.out'))
    tests_dir = gpu_lab['root'] / 'nccl-tests'
    tests_dir.mkdir()
    (tests_dir / 'all_reduce_perf').write_text(u'#!/bin/sh\nexit 1\n')
    (tests_dir / 'all_reduce_perf').chmod(0o755)
    rc, out = run(gpu_lab, {'validate_nccl_tests_dir': str(tests_dir), 'validate_sku': 'h100_sxm'})
    assert rc != 0, out
    steps = [c for c in calls(gpu_lab) if c[0] == 'srun']
    resv = [c for c in calls(gpu_lab) if c[:3] == ['scontrol', 'create', 'reservation']][0][3].split('=', 1)[1]
    ddp, node_a, node_b, fleet = steps
    # Every step: explicit nodes, a time limit, the reservation, GPUs per node.
    assert ddp[1:9] == ['--job-name=' + ddp[1].split('=', 1)[1], '--nodes=2', '--nodelist=nodea,nodeb', '--ntasks-per-node=1',
                        '--time=10', '--gpus-per-node=2', '--reservation=' + resv, '--export=ALL,GPUCLUSTER_DDP_BACKEND=nccl']
    assert '--nproc_per_node=2' in ddp
    assert node_a[2:9] == ['--nodes=1', '--nodelist=nodea', '--ntasks-per-node=1', '--time=20', '--gpus-per-node=2',
                           '--reservation=' + resv, '--export=ALL,NCCL_DEBUG=INFO']
    assert node_a[9:] == [str(tests_dir / 'all_reduce_perf'), '-b', '8', '-e', '16G', '-f', '2', '-g', '2']
    assert node_b[3] == '--nodelist=nodeb'
    assert fleet[2:11] == ['--nodes=2', '--nodelist=nodea,nodeb', '--ntasks-per-node=2', '--time=20', '--gpus-per-node=2',
                           '--reservation=' + resv, '--export=ALL,NCCL_DEBUG=INFO', '--mpi=pmix', str(tests_dir / 'all_reduce_perf')]
    assert fleet[-2:] == ['-g', '1']
    found = checks(report(gpu_lab))
    # The recorded 8-GPU H100 run is not this 2-GPU node's: judged as such, not as a figure.
    assert found[('node-a', 'nccl_all_reduce_node')]['status'] == 'failed'
    assert found[('node-a', 'nccl_all_reduce_node')]['message'].startswith('the run used 8 GPU(s), the node has 2')
    # The recorded OCI run across two other hosts, without NCCL_DEBUG=INFO lines: not these nodes, transport unknown.
    fleet_check = found[('fleet', 'nccl_all_reduce')]
    assert fleet_check['status'] == 'failed'
    assert 'not on nodea, nodeb' in fleet_check['message'] and 'no NCCL INFO lines in the output' in fleet_check['message']
    # The DDP job (the stand-in srun ran nothing): failed, saying the backend it expected.
    ddp_check = found[('fleet', 'ddp_allreduce')]
    assert ddp_check['status'] == 'failed' and '0 of 4 ranks' in ddp_check['message']
    assert 'GPU nodes: NCCL' in ddp_check['message']
