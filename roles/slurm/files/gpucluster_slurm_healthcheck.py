# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Slurm HealthCheckProgram: run the node health program, drain on critical, resume when healthy.

Installed by the gpucluster.core.slurm role as /usr/local/sbin/gpucluster-slurm-healthcheck (with
an interpreter line added) and run by slurmd as root every HealthCheckInterval seconds. Settings
come from a JSON file (default /etc/slurm/gpucluster-healthcheck.json, or the path in the first
argument): program, node_name, reason_prefix, timeout, scontrol.

Rules:
  - health program exit 2 (critical): drain the node with "<prefix>: <critical findings>", unless
    the node is already drained for another reason (an operator's drain is left as it is).
  - exit 0 (ok) or 1 (warning): resume the node only when its drain reason starts with "<prefix>:".
  - anything else (program missing, not answering, unreadable output, exit 3 = unknown): change
    nothing and log why. A missing or broken health program never drains a node.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import re
import subprocess
import sys

try:
    import syslog
except ImportError:  # pragma: no cover - not on Linux
    syslog = None

DEFAULT_CONFIG = '/etc/slurm/gpucluster-healthcheck.json'
STATUS_BY_RC = {0: 'ok', 1: 'warning', 2: 'critical'}
REASON_MAX = 200


def parse_report(rc, stdout):
    """(status, issues) from the health program's exit status and JSON output.

    The exit status decides; the JSON adds the findings. An exit status outside 0..2 is 'unknown'.
    """
    status = STATUS_BY_RC.get(rc, 'unknown')
    issues = []
    try:
        data = json.loads(stdout) if stdout and stdout.strip() else {}
    except ValueError:
        data = {}
    if isinstance(data, dict) and isinstance(data.get('issues'), list):
        issues = [i for i in data['issues'] if isinstance(i, dict)]
    return status, issues


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
    if status in ('ok', 'warning'):
        if drained and ours:
            return 'resume', None
        return 'none', 'health %s' % status
    return 'none', 'health status unknown; node left as it is'


def log(message, error=False):
    if syslog is not None:
        syslog.openlog('gpucluster-slurm-healthcheck')
        syslog.syslog(syslog.LOG_WARNING if error else syslog.LOG_INFO, message)
    sys.stderr.write(message + '\n')


def run(argv, timeout):
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=timeout, check=False)
    return proc.returncode, proc.stdout, proc.stderr


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    path = argv[0] if argv else DEFAULT_CONFIG
    try:
        with open(path) as handle:
            cfg = json.load(handle)
        program = cfg['program']
        node = cfg['node_name']
        prefix = cfg.get('reason_prefix', 'gpucluster-health')
        timeout = int(cfg.get('timeout', 45))
        scontrol = cfg.get('scontrol', 'scontrol')
    except (OSError, ValueError, KeyError) as exc:
        log('cannot read settings %s: %s; nothing done' % (path, exc), error=True)
        return 1
    if not (os.path.isfile(program) and os.access(program, os.X_OK)):
        log('health program %s is missing or not executable; node %s left as it is' % (program, node), error=True)
        return 0
    try:
        rc, out, _err = run([program], timeout)
    except subprocess.TimeoutExpired:
        log('health program %s did not answer within %ds; node %s left as it is' % (program, timeout, node),
            error=True)
        return 0
    except OSError as exc:
        log('health program %s could not run (%s); node %s left as it is' % (program, exc, node), error=True)
        return 0
    status, issues = parse_report(rc, out)
    try:
        src, show, err = run([scontrol, 'show', 'node', node, '-o'], timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log('scontrol show node %s failed (%s); nothing done' % (node, exc), error=True)
        return 0
    if src != 0:
        log('scontrol show node %s failed: %s; nothing done' % (node, err.strip()), error=True)
        return 0
    flags, current = parse_node(show)
    action, detail = decide(status, issues, flags, current, prefix)
    if action == 'drain':
        cmd = [scontrol, 'update', 'NodeName=' + node, 'State=DRAIN', 'Reason=' + detail]
    elif action == 'resume':
        cmd = [scontrol, 'update', 'NodeName=' + node, 'State=RESUME']
    else:
        if status not in ('ok', 'warning'):
            log('%s: %s' % (node, detail), error=status != 'critical' or 'someone else' in detail)
        return 0
    urc, _out, uerr = run(cmd, timeout)
    if urc != 0:
        log('%s failed: %s' % (' '.join(cmd[:3]), uerr.strip()), error=True)
        return 1
    log('%s: %s%s' % (node, 'drained: ' if action == 'drain' else 'resumed: health ',
                      detail if action == 'drain' else status))
    return 0


if __name__ == '__main__':
    sys.exit(main())
