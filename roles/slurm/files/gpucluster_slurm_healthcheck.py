# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Slurm HealthCheckProgram: run the node health program, drain on critical, resume when healthy.

The command-line front end of the wrapper: its decisions are plugins/module_utils/slurm_health.py
(the program's verdict and findings) and plugins/module_utils/scheduler.py (the node's state, whose
hold it is, drain/resume/none, the scontrol argv), packed with this file into one archive by the
gpucluster.core.slurm role the way the health_check role packs the node health program
(roles/health_check/files/build_zipapp.py), and run by slurmd as root every HealthCheckInterval
seconds through /usr/local/sbin/gpucluster-slurm-healthcheck.
Settings come from a JSON file (default /etc/slurm/gpucluster-healthcheck.json, or the path in the
first argument): program, node_name, timeout (this wrapper's budget, seconds), program_timeout (the
run timeout passed to the program, less than timeout), scontrol; reason_prefix (older releases)
is ignored. Our drain reason is ``gpucluster/health#<tag>: <findings>``; the wrapper resumes only
such a drain (or the previous release's ``gpucluster-health: ...``), never a node in an operator
state (DOWN, FAIL, MAINT, RESERVED, FUTURE, ...) and never a drain whose reason is not ours.
This file runs the commands (the program, scontrol) and logs; the modules say what to do.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import signal
import subprocess
import sys
import time

try:
    import syslog
except ImportError:  # pragma: no cover - not on Linux
    syslog = None

DEFAULT_CONFIG = '/etc/slurm/gpucluster-healthcheck.json'
# Seconds the program may overrun its run timeout before its process group is killed, and the
# least this wrapper keeps for scontrol after that.
GRACE = 1
KILL_WAIT = 1
# Seconds each scontrol call gets at least, even when the program used up the budget (Slurm stops
# HealthCheckProgram only after 60 s; the budget is at most 55).
SCONTROL_MIN = 2

# Relative: this file only runs as gpucluster_slurm_healthcheck.cli, inside the archive with its logic.
from . import scheduler, slurm_health  # noqa: E402
from .slurm_health import SettingsError, finding_text, hung_issues, parse_report  # noqa: E402


def log(message, error=False):
    if syslog is not None:
        syslog.openlog('gpucluster-slurm-healthcheck')
        syslog.syslog(syslog.LOG_WARNING if error else syslog.LOG_INFO, message)
    sys.stderr.write(message + '\n')


def descendants(pid):
    """Process ids below ``pid`` (from /proc), also those in sessions of their own (the health program
    runs nvidia-smi in one, to kill it as a group)."""
    children = {}
    try:
        entries = os.listdir('/proc')
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open('/proc/%s/stat' % entry) as handle:
                ppid = int(handle.read().rsplit(')', 1)[1].split()[1])
        except (IOError, OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.append(child)
                todo.append(child)
    return found


def kill_group(proc):
    """SIGKILL ``proc``, its process group and every process below it; waits at most KILL_WAIT s (a
    process stuck in a driver call dies only when the driver lets go of it)."""
    below = descendants(proc.pid)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    for pid in below:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    try:
        proc.communicate(timeout=KILL_WAIT)
    except (subprocess.TimeoutExpired, ValueError, OSError):
        for stream in (proc.stdout, proc.stderr):
            try:
                stream.close()
            except (OSError, AttributeError):
                pass


def run(argv, timeout):
    """(rc, stdout, stderr) of ``argv`` in its own process group; None for rc when it outlived ``timeout``
    (then the whole group has been killed). OSError when it cannot start."""
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    done = False
    try:
        out, err = proc.communicate(timeout=max(0.1, timeout))
        done = True
    except subprocess.TimeoutExpired:
        return None, '', ''
    finally:
        if not done:
            kill_group(proc)
    return (proc.returncode, out.decode('utf-8', 'replace'), err.decode('utf-8', 'replace'))


def load_settings(path):
    try:
        with open(path) as handle:
            cfg = json.load(handle)
    except (OSError, ValueError) as exc:
        raise SettingsError(str(exc))
    return slurm_health.settings(cfg)


def main(argv=None):
    start = time.monotonic()
    argv = sys.argv[1:] if argv is None else argv
    path = argv[0] if argv else DEFAULT_CONFIG
    try:
        cfg = load_settings(path)
    except SettingsError as exc:
        log('cannot read settings %s: %s; nothing done' % (path, exc), error=True)
        return 1
    program, node = cfg['program'], cfg['node']
    slurm = scheduler.Slurm(cfg['scontrol'])
    deadline = start + cfg['timeout']
    if not (os.path.isfile(program) and os.access(program, os.X_OK)):
        log('health program %s is missing or not executable; node %s left as it is' % (program, node), error=True)
        return 0
    wait = min(cfg['program_timeout'] + GRACE, cfg['timeout'] - 1)
    try:
        rc, out, _err = run([program, '--run-timeout', str(cfg['program_timeout'])], wait)
    except OSError as exc:
        log('health program %s could not run (%s); node %s left as it is' % (program, exc, node), error=True)
        return 0
    if rc is None:
        status, issues = 'critical', hung_issues(cfg['program_timeout'])
        why = 'no answer within %ss' % wait
        log('health program %s gave no answer within %ss; its process group was killed' % (program, wait),
            error=True)
    else:
        status, issues, why = parse_report(rc, out)
    try:
        src, show, err = run(slurm.show_argv(node), max(SCONTROL_MIN, deadline - time.monotonic()))
    except OSError as exc:
        log('scontrol show node %s failed (%s); nothing done' % (node, exc), error=True)
        return 0
    if src != 0:
        log('scontrol show node %s failed: %s; nothing done'
            % (node, 'timed out' if src is None else err.strip()), error=True)
        return 0
    state = slurm.parse_state(show, node)
    decision = scheduler.decide_verdict(status, state, slurm_health.SOURCE,
                                        finding_text(issues) if status == 'critical' else None)
    cmd = slurm.action_argv(node, decision)
    if cmd is None:
        if status == 'unknown':
            log('%s: %s (%s)' % (node, decision.why, why), error=True)
        elif status != 'ok':
            # A critical node that is not ours to drain is worth a warning; so is a warning verdict.
            log('%s: health %s: %s' % (node, status, decision.why),
                error=not decision.why.startswith('already held'))
        return 0
    try:
        urc, _out, uerr = run(cmd, max(SCONTROL_MIN, deadline - time.monotonic()))
    except OSError as exc:
        urc, uerr = 1, str(exc)
    if urc != 0:
        failure = 'timed out' if urc is None else uerr.strip()
        # Another actor may have done it between our read and our command: read the node again.
        try:
            arc, again, _aerr = run(slurm.show_argv(node), max(SCONTROL_MIN, deadline - time.monotonic()))
        except OSError:
            arc, again = 1, ''
        if arc == 0:
            done, how = scheduler.settled(decision, slurm.parse_state(again, node))
            if done:
                log('%s: %s (%s: %s)' % (node, how, ' '.join(cmd[:3]), failure))
                return 0
        log('%s failed: %s' % (' '.join(cmd[:3]), failure), error=True)
        return 1
    log('%s: %s' % (node, ('drained: ' + decision.reason) if decision.action == 'drain'
                    else 'resumed: health %s (%s)' % (status, decision.why)))
    return 0


if __name__ == '__main__':
    sys.exit(main())
