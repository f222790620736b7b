# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Slurm HealthCheckProgram wrapper's reading of the health program: its verdict, its findings, its settings.

The wrapper (roles/slurm/files/gpucluster_slurm_healthcheck.py, packed with this module and
scheduler.py into one archive by the slurm role the way the health_check role packs the node health
program) runs the health program, reads its verdict here, asks scontrol for the node's state and
acts on what scheduler.decide_verdict() decides for the source ``health``:

  - critical: drain the node with our reason ``gpucluster/health#<tag>: <critical findings>``
    (scheduler.make_reason), unless the node is already held by someone else (an operator's
    drain, another of our sources) or is in an operator state (DOWN, FAIL, MAINT, RESERVED,
    FUTURE, ...: scheduler.py), which are left as they are.
  - no answer within program_timeout (plus a grace second): critical with the finding
    "nvidia-smi hung ..." (a hung driver hangs the program; the node must not take jobs), with the
    same respect for what is not ours.
  - ok (JSON "ok" and exit 0): resume the node only when its drain is a health hold of ours (the
    previous release's ``gpucluster-health: ...`` counts) and it is in no operator state
    (State=RESUME would also clear DOWN).
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

from .scheduler import REASON_MAX, make_reason

EXIT_CODES = {'ok': 0, 'warning': 1, 'critical': 2, 'unknown': 3}
SOURCE = 'health'
DEFAULT_TIMEOUT = 45


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


def finding_text(issues):
    """'gpu1 row remap pending; gpu0 xid 79': the critical findings, as the text of a drain reason."""
    parts = []
    for issue in issues:
        if issue.get('severity') != 'critical':
            continue
        # Bounded before anything else: a finding may quote a huge field.
        text = ' '.join(str(issue.get('message') or issue.get('check') or 'critical')[:REASON_MAX].split())
        gpu = issue.get('gpu')
        if gpu is not None and gpu != '' and not text.lower().startswith('gpu'):
            text = 'gpu%s %s' % (str(gpu)[:20], text)
        if text not in parts:
            parts.append(text)
        if sum(len(p) + 2 for p in parts) > REASON_MAX:
            break
    return '; '.join(parts) if parts else 'health program reports critical'


def drain_reason(issues):
    """Our reason for the critical findings: 'gpucluster/health#<tag>: gpu1 row remap pending; ...' (<= 200)."""
    return make_reason(SOURCE, finding_text(issues))


def hung_issues(program_timeout):
    return [{'severity': 'critical', 'check': 'driver',
             'message': 'nvidia-smi hung (the health program gave no answer within %ss; killed)'
                        % program_timeout}]


def _whole(cfg, key, default):
    value = cfg.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise SettingsError('%s must be a whole number of seconds, got %r' % (key, value))
    return value


def settings(cfg):
    """The wrapper's settings from its parsed JSON file; SettingsError names what is wrong.

    ``reason_prefix`` (written by releases before the reason format of scheduler.py) is accepted and
    ignored: our reasons have one fixed form.
    """
    if not isinstance(cfg, dict):
        raise SettingsError('expected a JSON object')
    for key in ('program', 'node_name'):
        if not isinstance(cfg.get(key), str) or not cfg.get(key):
            raise SettingsError('%s is missing' % key)
    scontrol = cfg.get('scontrol')
    scontrol = 'scontrol' if scontrol in (None, '') else scontrol
    if not isinstance(scontrol, str):
        raise SettingsError('scontrol must be the path of scontrol, got %s' % type(scontrol).__name__)
    timeout = _whole(cfg, 'timeout', DEFAULT_TIMEOUT)
    program_timeout = _whole(cfg, 'program_timeout', timeout - max(2, timeout // 4))
    if not 1 <= program_timeout <= timeout - 2:
        raise SettingsError('program_timeout (%r) must be at least 1 and at least 2 s less than timeout (%r)'
                            % (program_timeout, timeout))
    return {'program': cfg['program'], 'node': cfg['node_name'], 'timeout': timeout,
            'program_timeout': program_timeout, 'scontrol': scontrol}
