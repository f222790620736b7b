# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Decisions of the Slurm HealthCheckProgram wrapper: drain, resume or leave a node as it is.

The wrapper (roles/slurm/files/gpucluster_slurm_healthcheck.py, packed with this module into one
archive by the slurm role the way the health_check role packs the node health program) runs the
health program, asks scontrol for the node's state and acts on what these functions decide:

  - critical: drain the node with "<prefix>: <critical findings>", unless the node is already
    drained for another reason (an operator's drain is left as it is).
  - no answer within program_timeout (plus a grace second): the node is drained with
    "<prefix>: nvidia-smi hung ..." (a hung driver hangs the program; the node must not take jobs),
    with the same respect for an operator's drain.
  - ok (JSON "ok" and exit 0): resume the node only when its drain reason starts with "<prefix>:".
  - warning: nothing changes (a drained node stays drained until the program says ok).
  - unknown, program missing or not runnable: nothing changes. A missing or broken health program
    never drains a node and never resumes one.

The verdict counts only when the program's JSON status and its exit code agree (0 ok, 1 warning,
2 critical, 3 unknown); anything else (a crash, a traceback with exit 1, no or bad JSON, a
mismatch) is unknown. Pure functions: no I/O, standard library only, Python 3.9+.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import re

EXIT_CODES = {'ok': 0, 'warning': 1, 'critical': 2, 'unknown': 3}
REASON_MAX = 200
DEFAULT_PREFIX = 'gpucluster-health'
DEFAULT_TIMEOUT = 45
DRAINED_FLAGS = frozenset(['DRAIN', 'DRAINED', 'DRAINING'])


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
    drained = bool(set(flags) & DRAINED_FLAGS)
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


def update_command(scontrol, node, action, reason):
    """The scontrol argv that carries out ``decide()``'s action ('drain' or 'resume')."""
    if action == 'drain':
        return [scontrol, 'update', 'NodeName=' + node, 'State=DRAIN', 'Reason=' + reason]
    if action == 'resume':
        return [scontrol, 'update', 'NodeName=' + node, 'State=RESUME']
    raise ValueError('no scontrol update for action %r' % (action,))


def _whole(cfg, key, default):
    value = cfg.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise SettingsError('%s must be a whole number of seconds, got %r' % (key, value))
    return value


def settings(cfg):
    """The wrapper's settings from its parsed JSON file; SettingsError names what is wrong."""
    if not isinstance(cfg, dict):
        raise SettingsError('expected a JSON object')
    for key in ('program', 'node_name'):
        if not isinstance(cfg.get(key), str) or not cfg.get(key):
            raise SettingsError('%s is missing' % key)
    timeout = _whole(cfg, 'timeout', DEFAULT_TIMEOUT)
    program_timeout = _whole(cfg, 'program_timeout', timeout - max(2, timeout // 4))
    if not 1 <= program_timeout <= timeout - 2:
        raise SettingsError('program_timeout (%r) must be at least 1 and at least 2 s less than timeout (%r)'
                            % (program_timeout, timeout))
    return {'program': cfg['program'], 'node': cfg['node_name'],
            'prefix': cfg.get('reason_prefix') or DEFAULT_PREFIX, 'timeout': timeout,
            'program_timeout': program_timeout, 'scontrol': cfg.get('scontrol') or 'scontrol'}
