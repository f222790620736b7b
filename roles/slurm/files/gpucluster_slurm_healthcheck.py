# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Slurm HealthCheckProgram: run the node health program, drain on critical, resume when healthy.

Installed by the gpucluster.core.slurm role as /usr/local/sbin/gpucluster-slurm-healthcheck (with
an interpreter line added) and run by slurmd as root every HealthCheckInterval seconds. Settings
come from a JSON file (default /etc/slurm/gpucluster-healthcheck.json, or the path in the first
argument): program, node_name, reason_prefix, timeout (this wrapper's budget, seconds),
program_timeout (the run timeout passed to the program, less than timeout), scontrol.

The verdict counts only when the program's JSON status and its exit code agree (0 ok, 1 warning,
2 critical, 3 unknown); anything else (a crash, a traceback with exit 1, no or bad JSON, a
mismatch) is unknown.

Rules:
  - critical: drain the node with "<prefix>: <critical findings>", unless the node is already
    drained for another reason (an operator's drain is left as it is).
  - no answer within program_timeout (plus a second's grace): the program's process group is
    killed and the node drained with "<prefix>: nvidia-smi hung ..." (a hung driver hangs the
    program; the node must not take jobs), with the same respect for an operator's drain.
  - ok (JSON "ok" and exit 0): resume the node only when its drain reason starts with "<prefix>:".
  - warning: nothing changes (a drained node stays drained until the program says ok).
  - unknown, program missing or not runnable: nothing changes; the reason is logged. A missing
    or broken health program never drains a node and never resumes one.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import re
import signal
import subprocess
import sys
import time

try:
    import syslog
except ImportError:  # pragma: no cover - not on Linux
    syslog = None

DEFAULT_CONFIG = '/etc/slurm/gpucluster-healthcheck.json'
EXIT_CODES = {'ok': 0, 'warning': 1, 'critical': 2, 'unknown': 3}
REASON_MAX = 200
# Seconds the program may overrun its run timeout before its process group is killed, and the
# least this wrapper keeps for scontrol after that.
GRACE = 1
KILL_WAIT = 1
# Seconds each scontrol call gets at least, even when the program used up the budget (Slurm stops
# HealthCheckProgram only after 60 s; the budget is at most 55).
SCONTROL_MIN = 2


class SettingsError(Exception):
    pass


def parse_report(rc, stdout):
    """(status, issues, why) from the health program's exit status and JSON output.

    ``status`` is the program's verdict only when its JSON (an object with a known ``status``, and
    ``exit_code`` when present) and its exit status agree; otherwise 'unknown', with ``why``.
    """
    try:
        data = json.loads(stdout) if stdout and stdout.strip() else None
    except ValueError as exc:
        return 'unknown', [], 'exit %s with output that is not JSON (%s)' % (rc, exc)
    if data is None:
        return 'unknown', [], 'exit %s without a JSON verdict on stdout' % rc
    if not isinstance(data, dict) or data.get('status') not in EXIT_CODES:
        return 'unknown', [], 'exit %s with JSON that carries no known status' % rc
    status = data['status']
    if rc != EXIT_CODES[status]:
        return 'unknown', [], 'exit %s does not match the JSON status %s' % (rc, status)
    if 'exit_code' in data and data['exit_code'] != rc:
        return 'unknown', [], 'exit %s does not match the JSON exit_code %r' % (rc, data['exit_code'])
    issues = data.get('issues')
    issues = [i for i in issues if isinstance(i, dict)] if isinstance(issues, list) else []
    return status, issues, 'health %s' % status


def drain_reason(prefix, issues):
    """'<prefix>: gpu1 row remap pending; gpu0 xid 79' from the critical findings (<= 200 chars)."""
    parts = []
    for issue in issues:
        if issue.get('severity') != 'critical':
            continue
        text = ' '.join(str(issue.get('message') or issue.get('check') or 'critical').split())
        gpu = issue.get('gpu')
        if gpu is not None and gpu != '' and not text.lower().startswith('gpu'):
            text = 'gpu%s %s' % (gpu, text)
        if text not in parts:
            parts.append(text)
    reason = '%s: %s' % (prefix, '; '.join(parts) if parts else 'health program reports critical')
    # scontrol takes the reason as one argument; keep it printable and short enough for sinfo -R.
    reason = re.sub(r'[^\x20-\x7e]', '?', reason)
    if len(reason) > REASON_MAX:
        reason = reason[:REASON_MAX - 3] + '...'
    return reason


def hung_issues(program_timeout):
    return [{'severity': 'critical', 'check': 'driver',
             'message': 'nvidia-smi hung (the health program gave no answer within %ss; killed)'
                        % program_timeout}]


def parse_node(text):
    """(state flags, reason) from `scontrol show node NAME -o`."""
    state = re.search(r'\bState=(\S+)', text or '')
    flags = set(state.group(1).upper().split('+')) if state else set()
    reason = re.search(r'\bReason=(.*?)(?: \[[^\]]*\])?(?=\s+[A-Za-z]+=|\s*$)', text or '')
    return flags, (reason.group(1).strip() if reason else '')


def decide(status, issues, flags, current_reason, prefix):
    """('drain', reason) | ('resume', None) | ('none', why)."""
    ours = current_reason.startswith(prefix + ':')
    drained = bool(flags & set(['DRAIN', 'DRAINED', 'DRAINING']))
    if status == 'critical':
        reason = drain_reason(prefix, issues)
        if drained and not ours:
            return 'none', 'critical, but the node is already drained by someone else: %s' % current_reason
        if drained and current_reason == reason:
            return 'none', 'critical, already drained: %s' % reason
        return 'drain', reason
    if status == 'ok':
        if drained and ours:
            return 'resume', None
        return 'none', 'health ok'
    if status == 'warning':
        if drained and ours:
            return 'none', 'health warning; the drain stays until the program says ok: %s' % current_reason
        return 'none', 'health warning'
    return 'none', 'health status unknown; node left as it is'


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


def _whole(cfg, key, default):
    value = cfg.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise SettingsError('%s must be a whole number of seconds, got %r' % (key, value))
    return value


def load_settings(path):
    try:
        with open(path) as handle:
            cfg = json.load(handle)
    except (OSError, ValueError) as exc:
        raise SettingsError(str(exc))
    if not isinstance(cfg, dict):
        raise SettingsError('expected a JSON object')
    for key in ('program', 'node_name'):
        if not isinstance(cfg.get(key), str) or not cfg.get(key):
            raise SettingsError('%s is missing' % key)
    timeout = _whole(cfg, 'timeout', 45)
    program_timeout = _whole(cfg, 'program_timeout', timeout - max(2, timeout // 4))
    if not 1 <= program_timeout <= timeout - 2:
        raise SettingsError('program_timeout (%r) must be at least 1 and at least 2 s less than timeout (%r)'
                            % (program_timeout, timeout))
    return {'program': cfg['program'], 'node': cfg['node_name'],
            'prefix': cfg.get('reason_prefix') or 'gpucluster-health', 'timeout': timeout,
            'program_timeout': program_timeout, 'scontrol': cfg.get('scontrol') or 'scontrol'}


def main(argv=None):
    start = time.monotonic()
    argv = sys.argv[1:] if argv is None else argv
    path = argv[0] if argv else DEFAULT_CONFIG
    try:
        cfg = load_settings(path)
    except SettingsError as exc:
        log('cannot read settings %s: %s; nothing done' % (path, exc), error=True)
        return 1
    program, node, prefix, scontrol = cfg['program'], cfg['node'], cfg['prefix'], cfg['scontrol']
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
        src, show, err = run([scontrol, 'show', 'node', node, '-o'], max(SCONTROL_MIN, deadline - time.monotonic()))
    except OSError as exc:
        log('scontrol show node %s failed (%s); nothing done' % (node, exc), error=True)
        return 0
    if src != 0:
        log('scontrol show node %s failed: %s; nothing done'
            % (node, 'timed out' if src is None else err.strip()), error=True)
        return 0
    flags, current = parse_node(show)
    action, detail = decide(status, issues, flags, current, prefix)
    if action == 'drain':
        cmd = [scontrol, 'update', 'NodeName=' + node, 'State=DRAIN', 'Reason=' + detail]
    elif action == 'resume':
        cmd = [scontrol, 'update', 'NodeName=' + node, 'State=RESUME']
    else:
        if status == 'unknown':
            log('%s: %s (%s)' % (node, detail, why), error=True)
        elif status != 'ok':
            log('%s: %s' % (node, detail), error=status != 'critical' or 'someone else' in detail)
        return 0
    try:
        urc, _out, uerr = run(cmd, max(SCONTROL_MIN, deadline - time.monotonic()))
    except OSError as exc:
        urc, uerr = 1, str(exc)
    if urc != 0:
        log('%s failed: %s' % (' '.join(cmd[:3]), 'timed out' if urc is None else uerr.strip()), error=True)
        return 1
    log('%s: %s%s' % (node, 'drained: ' if action == 'drain' else 'resumed: health ',
                      detail if action == 'drain' else status))
    return 0


if __name__ == '__main__':
    sys.exit(main())
