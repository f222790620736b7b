# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every day-2 playbook under --limit, run with ansible-playbook over local test hosts (no
containers): the settings stage runs once on the play's hosts (run_once, delegated to the
controller of the run), never on a localhost play that a limit leaves out; a limit that leaves out
what the plan needs stops the run before anything is drained, naming it. Slurm's commands and
dpkg-query are stand-ins that record every call; the machine running the tests is not changed."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import re
import subprocess
import sys

import pytest

from ansible_collections.gpucluster.core.plugins.module_utils.scheduler import make_reason

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
PLAYBOOKS = os.path.join(REPO, 'playbooks')
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), 'ansible-playbook')
INSTALLED = '22.05.8-4+deb12u3'

pytestmark = pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason='ansible-playbook not beside this python')

# Stand-ins: each records its arguments. scontrol shows a node idle and answers ping; squeue lists no
# job; dpkg-query reports the Slurm packages at $STANDIN_SLURM (stack_facts and the version reads).
STANDINS = {
    # Stateful like Slurm: a DRAIN is shown (State=IDLE+DRAIN, Reason=...) until a RESUME clears it.
    'scontrol': (
        'state="$(dirname "$0")/state-${@: -1}"\n'
        'case "$*" in\n'
        '  *" show node "*) if [ -s "$state" ]; then cat "$state"; else\n'
        '      echo "NodeName=${@: -1} Arch=x86_64 CoresPerSocket=1 State=IDLE ThreadsPerCore=1"; fi ;;\n'
        # Every node, as "scontrol --oneliner show node" lists them.
        '  *" show node") for n in n1 n2 n3; do if [ -s "$(dirname "$0")/state-$n" ]; then cat "$(dirname "$0")/state-$n";\n'
        '      else echo "NodeName=$n Arch=x86_64 CoresPerSocket=1 State=IDLE ThreadsPerCore=1"; fi; done ;;\n'
        '  "update NodeName="*" State=DRAIN Reason="*) node=${2#NodeName=}; reason=${4#Reason=}\n'
        '      echo "NodeName=$node Arch=x86_64 State=IDLE+DRAIN ThreadsPerCore=1 Reason=$reason [root@2026-12-03T00:00:00]"'
        ' > "$(dirname "$0")/state-$node" ;;\n'
        '  "update NodeName="*" State=RESUME") rm -f "$(dirname "$0")/state-${2#NodeName=}" ;;\n'
        '  ping*) echo "Slurmctld(primary) at node1 is UP" ;;\n'
        'esac\n'),
    'squeue': '',
    'sinfo': '',
    'srun': '',
    'sacct': '',
    'dpkg-query': (
        'case "$*" in\n'
        '  *"-W -f"*|*"-W --showformat"*) printf "ii \\tslurm-client\\t%s\\nii \\tslurmd\\t%s\\n" "$STANDIN_SLURM" "$STANDIN_SLURM" ;;\n'
        '  *slurmctld*|*slurm-client*) printf "%s" "$STANDIN_SLURM" ;;\n'
        '  *) exec /usr/bin/dpkg-query "$@" ;;\n'
        'esac\n'),
}


@pytest.fixture
def lab(tmp_path):
    calls = tmp_path / 'calls'
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    for name, body in STANDINS.items():
        tool = bin_dir / name
        tool.write_text(u'#!/bin/bash\necho "%s $*" >> %s\n%s' % (name, calls, body))
        tool.chmod(0o755)
    health = tmp_path / 'gpucluster-health'
    health.write_text(u'#!/bin/bash\necho "health $*" >> %s\n'
                      u'if [ -e %s ]; then echo "gpucluster-health critical: 1 GPU(s) visible to the driver, 2 expected"; exit 2; fi\n'
                      u'echo "gpucluster-health ok"\n' % (calls, tmp_path / 'sick'))
    health.chmod(0o755)
    local = 'ansible_connection: local, ansible_python_interpreter: "%s"' % sys.executable
    # Nothing listens on port 9 of this machine: the connection is refused at once.
    dead = ('ansible_host: 127.0.0.1, ansible_port: 9, ansible_connection: ssh,'
            ' ansible_ssh_common_args: "-o ConnectTimeout=3 -o StrictHostKeyChecking=no"')
    (tmp_path / 'hosts.yml').write_text(
        u'all:\n'
        u'  vars: {slurm_health_check_program: "%s", slurm_version: "22.05.8"}\n'
        u'  children:\n'
        u'    gpucluster:\n'
        u'      children:\n'
        u'        slurm_controller:\n          hosts:\n            node1: {%s, slurm_node_name: n1}\n'
        u'        slurm_compute:\n          hosts:\n'
        u'            node1: {}\n            node2: {%s, slurm_node_name: n2}\n            node3: {%s, slurm_node_name: n3}\n'
        u'        monitoring:\n          hosts:\n            node1: {}\n'
        u'    gpu_nodes:\n      hosts:\n        node2: {}\n        node3: {}\n        deadgpu: {%s}\n'
        u'    checkpoint_backup:\n      hosts:\n        node1: {}\n'
        u'    storage_clients:\n      hosts:\n        dead1: {%s}\n'
        % (health, local, local, local, dead, dead))
    env = dict(os.environ, PATH='%s:%s' % (bin_dir, os.environ.get('PATH', '')),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, 'collections'),
               ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_NOCOLOR='1', ANSIBLE_BECOME='false',
               STANDIN_SLURM=INSTALLED)

    def run(playbook, *args, **extra):
        argv = [ANSIBLE_PLAYBOOK, '-i', str(tmp_path / 'hosts.yml'), os.path.join(PLAYBOOKS, playbook)] + list(args)
        if extra:
            argv += ['-e', json.dumps(extra)]
        proc = subprocess.run(argv, env=env, cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True, timeout=600, check=False)
        return proc.returncode, proc.stdout

    def recorded():
        return calls.read_text().splitlines() if calls.exists() else []
    run.recorded = recorded
    run.tmp = tmp_path
    return run


def _flat(text):
    return ' '.join(text.split())


def _updates(lines):
    """The scontrol update calls (drain, resume) by node name."""
    out = []
    for line in lines:
        match = re.match(r'^scontrol update NodeName=(\S+) State=(\S+)( Reason=(.*))?$', line)
        if match:
            out.append((match.group(1), match.group(2), match.group(4)))
    return out


# ---------------------------------------------------------------- rolling_upgrade.yml

# The drain reason is the scheduler interface's (plugins/module_utils/scheduler.py): gpucluster/upgrade#<tag>: <text>.
UPGRADE = make_reason('upgrade', 'upgrade')
ROLLING = {'rolling_upgrade_roles': 'slurm', 'rolling_upgrade_poll_interval': 1, 'rolling_upgrade_job_timeout': 5}


@pytest.mark.parametrize('extra, says', [
    ({'rolling_upgrade_serial': 0}, 'rolling_upgrade_serial=0 is not accepted'),
    ({'rolling_upgrade_roles': 'slurm,kernel'}, 'rolling_upgrade_roles=slurm,kernel is not accepted'),
    ({'rolling_upgrade_job_timeout': 'soon'}, 'rolling_upgrade_job_timeout=soon is not accepted'),
])
def test_rolling_upgrade_settings_are_checked_under_limit(lab, extra, says):
    rc, out = lab('rolling_upgrade.yml', '--limit', 'node2,node3', **extra)
    assert rc != 0 and says in _flat(out), out
    assert 'HostVarsVars' not in out
    assert lab.recorded() == []          # not even stack_facts ran: the settings come first


def test_rolling_upgrade_under_limit_upgrades_exactly_the_limited_nodes(lab):
    """-l node2,node3 with the controller (node1) left out: drained and resumed through it by delegation."""
    rc, out = lab('rolling_upgrade.yml', '--limit', 'node2,node3', **ROLLING)
    assert rc == 0, out
    assert _updates(lab.recorded()) == [
        ('n2', 'DRAIN', UPGRADE), ('n2', 'RESUME', None),
        ('n3', 'DRAIN', UPGRADE), ('n3', 'RESUME', None)]
    assert 'node2: upgraded and passed the health gate, resumed' in out
    assert 'node3: upgraded and passed the health gate, resumed' in out
    # The gate ran the node health program with the gate's thresholds, once per node (no reboot).
    assert [c for c in lab.recorded() if c.startswith('health ')] == ['health --format summary --thresholds {}'] * 2
    assert 'node1' not in re.sub(r'node1 is UP', '', out.split('PLAY RECAP')[1])


def test_rolling_upgrade_gate_keeps_the_node_drained_with_the_programs_reason(lab):
    (lab.tmp / 'sick').write_text(u'')
    rc, out = lab('rolling_upgrade.yml', '--limit', 'node2,node3', **ROLLING)
    assert rc != 0, out
    reason = make_reason('upgrade', 'failed at health gate: gpucluster-health critical: 1 GPU(s) visible to the driver, 2 expected')
    assert _updates(lab.recorded()) == [('n2', 'DRAIN', UPGRADE), ('n2', 'DRAIN', reason)]
    assert 'rolling upgrade stopped at "health gate: gpucluster-health critical: 1 GPU(s) visible' in _flat(out)


def test_rolling_upgrade_limit_without_the_controller_while_slurm_changes_stops_before_any_drain(lab):
    rc, out = lab('rolling_upgrade.yml', '--limit', 'node2,node3', slurm_version='22.05.9', **ROLLING)
    flat = _flat(out)
    assert rc != 0, out
    assert ('slurm_version changes on node2, node3 but the Slurm controller node1 is not in this run '
            '(rolling_upgrade_hosts=gpucluster, --limit node2,node3) and its slurmctld is at 22.05.8, not at 22.05.9') in flat
    assert 'Add node1 to rolling_upgrade_hosts and to --limit. Nothing was drained.' in flat
    assert _updates(lab.recorded()) == []
    # The controller's version was read by delegation; nothing else ran there.
    assert 'dpkg-query --show --showformat=${Version} slurmctld' in lab.recorded()


def test_rolling_upgrade_refuses_a_jump_outside_the_window(lab):
    rc, out = lab('rolling_upgrade.yml', slurm_version='24.11.5', **ROLLING)
    flat = _flat(out)
    assert rc != 0, out
    assert ("node2: slurm_version 24.11.5 is outside SchedMD's upgrade window from the installed 22.05.8: "
            "slurmdbd and slurmctld 24.11 accept the state of 24.05, 23.11 and 23.02 only") in flat
    assert 'Go through 23.11 first' in flat and 'Nothing was drained.' in flat
    assert _updates(lab.recorded()) == []


# ---------------------------------------------------------------- the other playbooks


def test_decommission_limit_that_leaves_out_the_cluster_stops_before_anything_changes(lab):
    rc, out = lab('decommission.yml', '--limit', 'node3', decommission_nodes='node3')
    flat = _flat(out)
    assert rc != 0, out
    assert ('--limit node3 leaves out node1, node2: decommission.yml drains the nodes and waits for their jobs '
            'through the Slurm controller; rewrites slurm.conf on every Slurm host (it lists every node); rewrites '
            "the monitoring server's scrape targets over every kept node. Add them to --limit") in flat
    assert 'Nothing was changed.' in flat and lab.recorded() == []


def test_decommission_drains_the_retired_node_and_waits_for_its_jobs(lab):
    # The rest of the retirement (slurmd stopped, slurm.conf rewritten) needs systemd and the roles: not run here.
    lab('decommission.yml', decommission_nodes='node3', decommission_poll_interval=1, decommission_job_timeout=5)
    calls = lab.recorded()
    assert ('n3', 'DRAIN', make_reason('decommission', 'retired')) in _updates(calls), calls
    assert [c for c in calls if c.startswith('squeue ') and '--nodelist=n3 ' in c], calls
    assert not [c for c in _updates(calls) if c[0] != 'n3'], calls


def test_decommission_settings_are_checked_under_limit(lab):
    rc, out = lab('decommission.yml', '--limit', 'node1,node2,node3', decommission_nodes='node1')
    assert rc != 0 and 'decommission_nodes=node1 is not accepted' in _flat(out), out
    assert 'HostVarsVars' not in out and lab.recorded() == []


def test_restore_limit_that_leaves_out_the_restore_host_is_refused(lab):
    rc, out = lab('restore_checkpoints.yml', '--limit', 'node2', restore_user='alice', restore_target='/nonexistent/x')
    flat = _flat(out)
    assert rc != 0, out
    assert ('restore_host=checkpoint_backup must name exactly one inventory host (the one whose backup is restored); '
            'it names node1, which --limit node2 leaves out: add it to --limit. Nothing was restored.') in flat


@pytest.mark.parametrize('user, refused', [
    # Letters that are also hex digits or escape letters (x, f, 0, 1, 7) are names like any other.
    ('alex', False), ('f017', False), ('jdoe@corp', False),
    ('bad\tname', True), ('bad\x7fname', True), ('.hidden', True), ('a/b', True),
])
def test_restore_user_refuses_control_characters_only(lab, user, refused):
    rc, out = lab('restore_checkpoints.yml', restore_user=user, restore_target='/nonexistent/gpucluster-restore-test')
    said = 'restore_user must be the user whose checkpoints are restored' in _flat(out)
    assert said == refused, out
    assert rc != 0          # the backup program is not installed here: a granted request stops there


def test_drift_audit_under_limit_audits_the_limited_hosts(lab):
    reports = lab.tmp / 'drift'
    rc, out = lab('drift_audit.yml', '--limit', 'node2', drift_audit_report_dir=str(reports))
    assert rc == 0, out
    with open(str(reports / 'drift.json')) as handle:
        report = json.load(handle)
    assert report['summary']['hosts'] == 1 and report['findings'] == []
    assert 'drift audit: 1 host' in out


def test_health_check_under_limit_reports_the_limited_node_only(lab):
    rc, out = lab('health_check.yml', '--limit', 'deadgpu')
    assert rc != 0 and 'deadgpu: UNKNOWN - cannot be reached' in out, out
    assert 'node2' not in out and 'node3' not in out


@pytest.mark.skipif(os.geteuid() != 0, reason="site.yml's preflight needs the local test host to run as root")
def test_site_summary_runs_under_limit(lab):
    """Only site.yml's own checks and summary run (tagged always); the roles' tasks are skipped by tag."""
    roles = 'os_tuning,nvidia_driver,cuda_toolkit,rdma,container_runtime,health_check,shared_storage,' \
            'checkpoint_backup,slurm,monitoring'
    rc, out = lab('site.yml', '--limit', 'node2,dead1', '--tags', 'always', '--skip-tags', roles)
    flat = _flat(out)
    assert rc != 0, out
    assert 'Not converged: dead1 (failed or unreachable: see its error above; dead1: cannot be reached over SSH' in flat
    assert 'Converged: node2. Fix the node and rerun site.yml' in flat
    recap = out.split('PLAY RECAP')[1]
    assert re.search(r'node2\s*:.*failed=0', recap) and re.search(r'dead1\s*:.*failed=1', recap), recap


def test_validate_settings_are_checked_under_limit(lab):
    rc, out = lab('validate.yml', '--limit', 'node2', validate_install_tools=False,
                  validate_report_dir=str(lab.tmp / 'report'), validate_work_dir=str(lab.tmp / 'work'))
    assert rc != 0, out
    assert ('the pair matrix needs at least two hosts: validate_hosts=gpucluster matched 1 (node2) inside --limit '
            'node2; add hosts or set validate_matrix=false') in _flat(out)
    assert lab.recorded() == [] and not (lab.tmp / 'report').exists()
