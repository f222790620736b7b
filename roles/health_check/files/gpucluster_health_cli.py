# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Installed by gpucluster.core.health_check as gpucluster_health/cli.py; /usr/local/sbin/gpucluster-health
# runs main(). The checks are the modules next to it in that package: byte-identical copies of the
# collection's plugins/module_utils/gpu_*.py, rdma_sysfs.py, rdma_health.py and atomic_file.py, so this program
# and the gpucluster.core.gpu_facts / rdma_facts modules give the same verdict. Python 3.9+, standard library only.
"""gpucluster-health: GPU node health verdict for Slurm, monitoring and people.

Exit codes: 0 ok, 1 warning, 2 critical, 3 unknown (the health could not be determined, or
the program itself failed: a bad config or command line, an internal error, its run timeout
passing outside nvidia-smi). Every verdict, unknown included, comes with its reason on stdout:
JSON unless --quiet; --format summary prints one line fit for a Slurm drain reason.

External commands run in their own process group, which is killed as a whole when the command
outlives its timeout. --run-timeout bounds the whole run: every command's timeout is cut to fit
in it, and nvidia-smi still running when it passes is reported as hung (critical).
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import argparse
import json
import math
import os
import re
import signal
import socket
import sys
import time
import traceback

DEFAULT_CONFIG = '/etc/gpucluster/health.json'
TEXTFILE_NAME = 'gpucluster_health.prom'
CONFIG_KEYS = ('nvidia_smi_path', 'expected_count', 'thresholds', 'xid_window_minutes', 'kernel_log_path',
               'sysfs_root', 'timeout', 'run_timeout', 'rdma', 'job_source', 'job_records_dir')
# job_source: which scheduler says which job holds each GPU (gpu_jobs.SOURCES: none, slurm, swarm);
# job_records_dir: where the Slurm Prolog writes its records (gpu_jobs.RECORDS_DIR when absent).
# The "rdma" object: expect_present (the node belongs on the RDMA fabric: no adapter is critical),
# expected_rate_gbps (a port below it is a warning) and ignore_ports ("mlx5_0" or "mlx5_0/1").
# hcas: the ports the node's jobs use (NCCL_IB_HCA entries, mlx5_0 or mlx5_0:1): only those are judged,
# and one the node lacks is critical; empty or absent: the ports of the adapters that share a PCIe switch
# with a GPU when there are any (the others are not judged), else every port not in ignore_ports.
RDMA_KEYS = ('expect_present', 'expected_rate_gbps', 'ignore_ports', 'hcas')
EXIT_UNKNOWN = 3
# Exit codes of the reports this file writes itself (independent of the checks, which may be what failed).
FAILURE_EXIT_CODES = {'critical': 2, 'unknown': EXIT_UNKNOWN}
DEFAULT_TIMEOUT = 60
# Seconds of the run timeout kept back for what follows nvidia-smi (kernel log, verdict, output).
RUN_RESERVE = 2
# Seconds to wait for a killed process group to go (a process stuck in the driver cannot die
# before the driver lets go of it; the program does not wait for that).
KILL_WAIT = 1
# The configuration is a small JSON object written by the role: a larger file is refused, not read.
CONFIG_MAX_BYTES = 1024 * 1024
# Nesting of the configuration checked for numbers (the role writes 3 levels).
CONFIG_MAX_DEPTH = 32

# Relative: this file only runs as gpucluster_health.cli, inside the package with the checks.
from . import (atomic_file, gpu_bounds, gpu_fabric, gpu_health, gpu_jobs, gpu_probe, gpu_prom, rdma_health, rdma_sysfs,
               timed_command)
from .gpu_bounds import clip, quote


class ConfigError(Exception):
    pass


class UsageError(Exception):
    pass


class RunTimeout(BaseException):
    """The run timeout passed (BaseException: no ``except Exception`` in the checks may swallow it)."""


def _read_config_text(path, explicit):
    """The configuration's text, or None when the default file is absent. A FIFO, a device or a
    directory is refused without blocking; a file over CONFIG_MAX_BYTES is refused unread."""
    where = clip(path)
    try:
        data = gpu_bounds.read_regular(path, CONFIG_MAX_BYTES)
    except gpu_bounds.NotRegularFile as exc:
        raise ConfigError('config %s: %s' % (where, clip(exc.strerror)))
    except gpu_bounds.TooLarge:
        raise ConfigError('config %s is larger than %d bytes; not read' % (where, CONFIG_MAX_BYTES))
    except (IOError, OSError) as exc:
        if not explicit and not os.path.lexists(path):
            return None
        if explicit and not os.path.lexists(path):
            raise ConfigError('config file %s does not exist' % where)
        raise ConfigError('cannot read config %s: %s' % (where, clip(exc.strerror or str(exc))))
    return data.decode('utf-8', 'replace')


def _non_finite(data):
    """Path ('thresholds.retired_pages_max') of the first NaN/Infinity number in the parsed JSON, or None.

    json.load accepts NaN, Infinity and 1e999 (read as infinity); each would switch a rule off silently.
    Iterative and depth-bounded.
    """
    stack = [(data, '', 0)]
    while stack:
        value, where, depth = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            return where or '(the whole document)'
        if isinstance(value, (dict, list)) and depth >= CONFIG_MAX_DEPTH:
            raise ConfigError('nested more than %d levels deep' % CONFIG_MAX_DEPTH)
        if isinstance(value, dict):
            for key, item in value.items():
                stack.append((item, '%s.%s' % (where, key) if where else str(key), depth + 1))
        elif isinstance(value, list):
            for number, item in enumerate(value):
                stack.append((item, '%s[%d]' % (where, number), depth + 1))
    return None


def load_config(path, explicit):
    text = _read_config_text(path, explicit)
    if text is None:
        return {}
    where = clip(path)
    try:
        data = json.loads(text)
    except RecursionError:
        raise ConfigError('cannot read config %s: nested too deeply' % where)
    except ValueError as exc:
        raise ConfigError('cannot read config %s: %s' % (where, clip(str(exc))))
    if not isinstance(data, dict):
        raise ConfigError('config %s: expected a JSON object' % where)
    try:
        bad = _non_finite(data)
    except ConfigError as exc:
        raise ConfigError('config %s: %s' % (where, exc))
    if bad is not None:
        raise ConfigError('config %s: %s is not a finite number (NaN, Infinity and numbers beyond the float '
                          'range such as 1e999 are refused); accepted: a finite number' % (where, clip(bad)))
    # Keys starting with "_" are comments (JSON has none; the role writes "_managed" there).
    unknown = sorted(clip(k, 60) for k in data if not k.startswith('_') and k not in CONFIG_KEYS)
    if unknown:
        raise ConfigError('config %s: unknown key(s) %s; known: %s'
                          % (where, clip(', '.join(unknown)), ', '.join(CONFIG_KEYS)))
    config = dict((k, v) for k, v in data.items() if not k.startswith('_'))
    for key in ('expected_count', 'xid_window_minutes', 'timeout', 'run_timeout'):
        value = config.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or not 0 <= value <= gpu_health.SETTING_LIMITS[key]):
            raise ConfigError('config %s: %s must be a whole number >= 0 and <= %d, got %s'
                              % (where, key, gpu_health.SETTING_LIMITS[key], quote(value)))
    for key in ('nvidia_smi_path', 'kernel_log_path', 'sysfs_root', 'job_records_dir'):
        value = config.get(key)
        if value is not None and (not isinstance(value, str) or '\x00' in value):
            raise ConfigError('config %s: %s must be a path (a string without NUL) or null, got %s'
                              % (where, key, quote(value)))
    if config.get('job_records_dir') is not None and not config['job_records_dir'].startswith('/'):
        raise ConfigError('config %s: job_records_dir must be an absolute path, got %s' % (where, quote(config['job_records_dir'])))
    if config.get('job_source', 'none') not in gpu_jobs.SOURCES:
        raise ConfigError('config %s: job_source must be one of %s, got %s'
                          % (where, ', '.join(gpu_jobs.SOURCES), quote(config.get('job_source'))))
    try:
        config['thresholds'] = gpu_health.merge_thresholds(config.get('thresholds') or {})
    except gpu_health.ThresholdError as exc:
        raise ConfigError('config %s: %s' % (where, exc))
    config['rdma'] = _rdma_config(where, config.get('rdma'))
    return config


def _rdma_config(path, rdma):
    """The validated "rdma" object of the config (an empty one when absent or null)."""
    if rdma is None:
        return {}
    if not isinstance(rdma, dict):
        raise ConfigError('config %s: rdma must be an object with the keys %s, got %s'
                          % (path, ', '.join(RDMA_KEYS), quote(rdma)))
    unknown = sorted(clip(str(k), 60) for k in rdma if k not in RDMA_KEYS)
    if unknown:
        raise ConfigError('config %s: rdma: unknown key(s) %s; known: %s'
                          % (path, clip(', '.join(unknown)), ', '.join(RDMA_KEYS)))
    if not isinstance(rdma.get('expect_present', False), bool):
        raise ConfigError('config %s: rdma.expect_present must be true or false, got %s'
                          % (path, quote(rdma['expect_present'])))
    hcas = rdma.get('hcas')
    if hcas is not None and (not isinstance(hcas, list) or not all(
            isinstance(h, str) and re.match(r'^[^/:\s]+(:[1-9][0-9]*)?$', h) for h in hcas)):
        raise ConfigError('config %s: rdma.hcas must be a list of RDMA devices, optionally with a port '
                          '(mlx5_0, mlx5_1:1), got %s' % (path, quote(hcas)))
    try:
        rdma_sysfs.normalize_options(rdma.get('expected_rate_gbps'), rdma.get('ignore_ports'))
    except rdma_sysfs.RdmaOptionError as exc:
        raise ConfigError('config %s: rdma: %s' % (path, clip(str(exc), 600)))
    return rdma


def judge_rdma(config, sysfs_root):
    """(facts, issues) of the node's RDMA adapters, or (None, []) on a node with none that is not expected on a fabric.

    Reads sysfs only (no program runs). A port down is critical, below the expected rate a warning.
    """
    rdma = config.get('rdma') or {}
    expect = bool(rdma.get('expect_present'))
    snapshot = rdma_sysfs.collect(sysfs_root)
    ignored, missing = list(rdma.get('ignore_ports') or []), []
    if rdma.get('hcas'):
        outside, missing = rdma_health.select_ports(snapshot.get('hcas'), rdma['hcas'])
        ignored += outside
    else:
        # No port set named: when adapters share a PCIe switch with a GPU, they are the fabric (the rdma role's
        # NCCL_IB_HCA default, rdma_sysfs.fabric_ports); the others (storage, front-end) are not judged, so an
        # uncabled storage port drains nothing.
        ignored += [entry.rpartition(':')[0] + '/' + entry.rpartition(':')[2]
                    for entry in rdma_sysfs.fabric_ports(snapshot.get('hcas'))['others']]
    facts = rdma_sysfs.build_facts(snapshot, expected_rate_gbps=rdma.get('expected_rate_gbps'), ignore_ports=ignored)
    if not facts['present'] and not expect and not missing and facts['health']['status'] == 'ok':
        return None, []
    return facts, rdma_health.health_issues(facts, expect_present=expect) + rdma_health.missing_issues(missing)


class SmiRecorder(object):
    """The runner, keeping the output of the ``nvidia-smi -q -x`` run (the fabric check reads it too)."""

    def __init__(self, runner):
        self.runner = runner
        self.xml = None

    def __call__(self, argv, timeout):
        rc, out, err = self.runner(argv, timeout)
        if list(argv[1:]) == ['-q', '-x'] and rc is not None:
            self.xml = out
        return rc, out, err


def judge_fabric(sysfs_root, recorder, snapshot, facts):
    """(samples, issues) of the NVLink fabric; both empty on a node without NVSwitches (nothing runs).

    With NVSwitches: every GPU's fabric state from this run's nvidia-smi XML and Fabric Manager's
    service state (``systemctl is-active``, timed like every command of the program).
    """
    nvswitches = gpu_fabric.nvswitch_addresses(sysfs_root)
    if not nvswitches:
        return [], []
    gpus = None
    if snapshot.get('parsed') and recorder.xml:
        gpus = gpu_fabric.fabric_from_xml(recorder.xml)
    timeout = gpu_fabric.SYSTEMCTL_TIMEOUT
    deadline = getattr(recorder.runner, 'deadline', None)
    if deadline is not None:
        # Inside the run timeout, with the time kept for what follows (RDMA, verdict, output).
        timeout = max(0.1, min(timeout, deadline - time.monotonic() - RUN_RESERVE))
    manager = gpu_fabric.fabric_manager_state(recorder.runner, timeout=timeout)
    devices = facts.get('devices') or []
    return (gpu_fabric.prometheus_samples(nvswitches, gpus, devices, manager),
            gpu_fabric.health_issues(nvswitches, gpus, devices, manager))


class Runner(object):
    """``run(argv, timeout) -> (rc, stdout, stderr)`` for gpu_probe, rc None on timeout.

    Each command runs in a new session (its own process group) through timed_command.run_bounded: the
    command's exit is what counts (a child left holding its output open cannot make a finished command
    "hung"), output is bounded, and on timeout the whole group gets SIGKILL. With a deadline (the run
    timeout), a command's timeout is cut to the time left. ``timed_out`` lists the commands that ran out
    of time.
    """

    def __init__(self, deadline=None):
        self.deadline = deadline
        self.timed_out = []
        self.current = None
        self.interrupted = None

    def budget(self, timeout):
        if self.deadline is None:
            return timeout
        left = self.deadline - time.monotonic()
        return max(0.1, min(timeout, left))

    def __call__(self, argv, timeout):
        env = dict(os.environ, LC_ALL='C')
        limit = self.budget(timeout)
        self.current = argv
        try:
            rc, out, err, state = timed_command.run_bounded(argv, limit, env=env, kill_wait=KILL_WAIT)
        except OSError:
            self.current = None
            raise  # could not start: gpu_probe reports it
        except BaseException:
            # Interrupted (the run timeout): run_bounded took the command's process group down.
            self.interrupted = argv
            self.current = None
            raise
        self.current = None
        if state['timed_out']:
            self.timed_out.append(argv)
        return rc, decode(out), decode(err)


def decode(data):
    return (data or b'').decode('utf-8', 'replace')


def write_textfile(directory, text):
    """Write atomically (with fsync): node_exporter must never read a half-written file."""
    atomic_file.write_atomic(os.path.join(directory, TEXTFILE_NAME), text, prefix='.%s.' % TEXTFILE_NAME)


def summary_line(report):
    bad = [i for i in report['issues'] if i['severity'] in ('critical', 'warning', 'unknown')]
    bad.sort(key=lambda i: {'critical': 0, 'unknown': 1, 'warning': 2}[i['severity']])
    text = 'gpucluster-health %s' % report['status']
    if bad:
        text += ': ' + '; '.join(i['message'] for i in bad[:3])
        if len(bad) > 3:
            text += ' (+%d more)' % (len(bad) - 3)
    return ' '.join(text.split())


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError('bad command line: %s (see gpucluster-health --help)' % message)


def parse_args(argv):
    parser = _Parser(
        prog='gpucluster-health',
        description='GPU node health verdict. Exit 0 ok, 1 warning, 2 critical, 3 unknown.')
    parser.add_argument('--config', help='JSON config (default %s; read when present)' % DEFAULT_CONFIG)
    parser.add_argument('--check-config', metavar='FILE', help='validate a config file and exit (0 valid, 3 invalid)')
    parser.add_argument('--textfile', metavar='DIR', help='write %s into this node_exporter textfile directory'
                        % TEXTFILE_NAME)
    parser.add_argument('--quiet', action='store_true', help='print nothing; the exit code is the verdict')
    parser.add_argument('--format', choices=('json', 'summary'), default='json',
                        help='json (default) or summary: one line for a Slurm drain reason')
    parser.add_argument('--nvidia-smi', dest='nvidia_smi_path', help='nvidia-smi to run (overrides the config)')
    parser.add_argument('--expected-count', type=int, help='GPUs this node must have (overrides the config)')
    parser.add_argument('--kernel-log', dest='kernel_log_path', help='read the kernel log from this file')
    parser.add_argument('--sysfs-root', help='sysfs root for the PCI count (default /sys)')
    parser.add_argument('--xid-window-minutes', type=int, help='Xid window in minutes (default 120)')
    parser.add_argument('--timeout', type=int, help='seconds nvidia-smi may take (default %d)' % DEFAULT_TIMEOUT)
    parser.add_argument('--thresholds', metavar='JSON',
                        help='threshold overrides as a JSON object, in place of the config\'s (merged over the '
                             'defaults the same way; the rolling upgrade\'s health gate passes its own)')
    parser.add_argument('--run-timeout', type=int,
                        help='seconds the whole run may take (default: the config, else no limit); nvidia-smi '
                             'gets at most this minus %d s' % RUN_RESERVE)
    args = parser.parse_args(argv)
    if args.thresholds is not None:
        try:
            args.thresholds = gpu_health.merge_thresholds(_json_object('--thresholds', args.thresholds))
        except gpu_health.ThresholdError as exc:
            raise UsageError('bad command line: --thresholds: %s' % exc)
    for key in ('expected_count', 'xid_window_minutes', 'timeout', 'run_timeout'):
        value = getattr(args, key)
        if value is not None and not 0 <= value <= gpu_health.SETTING_LIMITS[key]:
            raise UsageError('bad command line: --%s must be >= 0 and <= %d, got %d'
                             % (key.replace('_', '-'), gpu_health.SETTING_LIMITS[key], value))
    return args


def _json_object(option, text):
    try:
        value = json.loads(text)
    except RecursionError:
        raise UsageError('bad command line: %s must be a JSON object, got %s (nested too deeply)'
                         % (option, quote(text)))
    except ValueError as exc:
        raise UsageError('bad command line: %s must be a JSON object, got %s (%s)' % (option, quote(text), clip(str(exc))))
    if not isinstance(value, dict):
        raise UsageError('bad command line: %s must be a JSON object, got %s' % (option, quote(text)))
    return value


def output_choice(argv):
    """(quiet, format) read from the raw arguments: an unknown verdict is printed even when they do not parse."""
    quiet = '--quiet' in argv
    fmt = 'json'
    for i, arg in enumerate(argv):
        if arg == '--format' and i + 1 < len(argv):
            fmt = argv[i + 1]
        elif arg.startswith('--format='):
            fmt = arg.split('=', 1)[1]
    return quiet, ('summary' if fmt == 'summary' else 'json')


def failure_report(check, message, now=None, status='unknown'):
    """The report of a run that could not judge the GPUs (status unknown), or found nvidia-smi hung."""
    now = time.time() if now is None else now
    return {
        'status': status,
        'exit_code': FAILURE_EXIT_CODES[status],
        'host': socket.gethostname(),
        'timestamp': int(now),
        'issues': [{'gpu': None, 'check': check, 'severity': status, 'message': clip(' '.join(str(message).split()), 2000)}],
        'checks_skipped': [],
        'gpu': None,
    }


def emit(report, quiet, fmt):
    if quiet:
        return
    if fmt == 'summary':
        text = summary_line(report) + '\n'
    else:
        text = json.dumps(report, indent=2, sort_keys=True) + '\n'
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except (IOError, OSError, ValueError, AttributeError):
        pass  # stdout closed (sys.stdout is None, or a closed file): the exit code still carries the verdict


def warn(text):
    """A line on stderr, if there is one (a closed stderr never turns a verdict into a traceback)."""
    try:
        sys.stderr.write('gpucluster-health: %s\n' % text)
        sys.stderr.flush()
    except (IOError, OSError, ValueError, AttributeError):
        pass


def describe(exc):
    """'ValueError: bad thing (gpu_smi_xml.py:123)' for an unexpected exception."""
    where = ''
    frames = traceback.extract_tb(exc.__traceback__)
    if frames:
        last = frames[-1]
        where = ' (%s:%s)' % (os.path.basename(last.filename), last.lineno)
    return '%s: %s%s' % (type(exc).__name__, clip(str(exc)), where)


def _on_alarm(signum, frame):
    raise RunTimeout()


def judge_jobs(config, runner, facts):
    """(samples, report part) of which job holds each GPU; ([], None) when no scheduler is named. Never changes
    the verdict: a source that cannot be read is gpucluster_gpu_jobs_source_up 0 and a problem in the report."""
    source = config.get('job_source') or 'none'
    if source == 'none':
        return [], None
    devices = facts.get('devices') or []
    if source == 'slurm':
        try:
            assignments, problems = gpu_jobs.read_records(config.get('job_records_dir') or gpu_jobs.RECORDS_DIR)
            ok = True
        except gpu_jobs.RecordError as exc:
            assignments, problems, ok = {}, [str(exc)], False
    else:
        timeout = gpu_jobs.DOCKER_TIMEOUT
        deadline = getattr(runner, 'deadline', None)
        if deadline is not None:
            timeout = max(0.1, min(timeout, deadline - time.monotonic() - RUN_RESERVE))
        assignments, problems, ok = gpu_jobs.collect_swarm(runner, devices, timeout=timeout)
    if devices:
        problems = problems + gpu_jobs.unknown_gpus(assignments, devices)
    return (gpu_jobs.prometheus_samples(source, assignments, devices, ok),
            gpu_jobs.report(source, assignments, problems, ok))


def judge(args, config, runner, now):
    """The report and exit code of one run (exceptions are the caller's)."""
    window = config.get('xid_window_minutes') or 120
    timeout = config.get('timeout') or DEFAULT_TIMEOUT
    run_timeout = config.get('run_timeout') or None
    if run_timeout:
        # nvidia-smi must answer, or be called hung, inside the run timeout.
        timeout = max(1, min(timeout, run_timeout - RUN_RESERVE))
    thresholds = config.get('thresholds') or gpu_health.merge_thresholds()

    recorder = SmiRecorder(runner)
    snapshot = gpu_probe.collect(recorder, nvidia_smi_path=config.get('nvidia_smi_path') or None,
                                 sysfs_root=config.get('sysfs_root') or '/sys',
                                 kernel_log_path=config.get('kernel_log_path') or None,
                                 window_minutes=window, now=now, timeout=timeout)
    facts = gpu_health.build_facts(snapshot, expected_count=config.get('expected_count') or None,
                                   thresholds=thresholds, window_minutes=window)
    issues = facts['health']['issues']
    smi_path = (facts.get('nvidia_smi_path') or '')
    if smi_path and any(argv and argv[0] == smi_path for argv in runner.timed_out):
        # Name the failure the way operators search for it (sinfo -R): the driver check is critical.
        for issue in issues:
            if issue.get('check') == 'driver' and issue.get('severity') == 'critical':
                issue['message'] = ('nvidia-smi hung: no answer within %ss, its process group killed '
                                    '(a hung driver usually means a sick GPU)' % timeout)
    fabric_samples, fabric_issues = judge_fabric(config.get('sysfs_root') or '/sys', recorder, snapshot, facts)
    rdma_facts, rdma_issues = judge_rdma(config, config.get('sysfs_root') or '/sys')
    # The node's verdict is the worst of the GPUs', the NVLink fabric's and the RDMA fabric's; the GPU
    # facts keep the GPUs' own.
    job_samples, jobs = judge_jobs(config, runner, facts)
    status = rdma_health.merge_status(facts['health']['status'], fabric_issues + rdma_issues)
    issues = issues + fabric_issues + rdma_issues
    code = gpu_health.exit_code(status)
    report = {
        'status': status,
        'exit_code': code,
        'host': socket.gethostname(),
        'timestamp': int(now),
        'issues': issues,
        'checks_skipped': facts['health']['checks_skipped'],
        'gpu': facts,
    }
    if rdma_facts is not None:
        report['rdma'] = rdma_facts
    if jobs is not None:
        report['jobs'] = jobs
    if args.textfile:
        node = dict(facts, health=dict(facts['health'], status=status, issues=issues))
        text = gpu_prom.render(node, now)
        if fabric_samples:
            text += gpu_fabric.render_prometheus(fabric_samples)
        if rdma_facts is not None:
            text += rdma_health.render_prometheus(rdma_health.prometheus_samples(rdma_facts, rdma_issues))
        if job_samples:
            text += gpu_jobs.render_prometheus(job_samples)
        try:
            write_textfile(args.textfile, text)
        except (IOError, OSError) as exc:
            warn('cannot write %s into %s: %s' % (TEXTFILE_NAME, clip(args.textfile), clip(str(exc))))
            if code == 0:
                code = EXIT_UNKNOWN
                report['status'] = 'unknown'
                report['exit_code'] = code
                report['issues'] = issues + [{
                    'gpu': None, 'check': 'textfile', 'severity': 'unknown',
                    'message': 'cannot write %s into %s: %s' % (TEXTFILE_NAME, clip(args.textfile), clip(str(exc)))}]
    return report, code


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    quiet, fmt = output_choice(argv)
    now = time.time()
    state = {'runner': None, 'run_timeout': None}
    try:
        try:
            args = parse_args(argv)
            quiet, fmt = args.quiet, args.format
            if args.check_config:
                try:
                    load_config(args.check_config, explicit=True)
                except ConfigError as exc:
                    warn(exc)
                    return EXIT_UNKNOWN
                return 0
            report, code = _run(args, now, state)
        finally:
            if state['run_timeout']:
                signal.setitimer(signal.ITIMER_REAL, 0)
    except RunTimeout:
        report = timeout_report(state, now)
    except (ConfigError, UsageError) as exc:
        warn(exc)
        report = failure_report('program', str(exc), now)
    except KeyboardInterrupt:
        report = failure_report('program', 'interrupted; GPU health not determined', now)
    except Exception as exc:  # pylint: disable=broad-except
        # Any failure of the program itself is "unknown" with its reason, never a traceback exit
        # (exit 1 would read as "warning"); the traceback still goes to stderr for the journal.
        if sys.stderr is not None:
            try:
                traceback.print_exc(file=sys.stderr)
            except (IOError, OSError, ValueError):
                pass
        report = failure_report('program', 'internal error: %s; GPU health not determined' % describe(exc), now)
    else:
        emit(report, quiet, fmt)
        return code
    emit(report, quiet, fmt)
    return report['exit_code']


def _arm(state, run_timeout, started):
    """(Re)arm the run timeout: RunTimeout is raised ``run_timeout`` seconds after ``started``."""
    deadline = started + run_timeout
    signal.signal(signal.SIGALRM, _on_alarm)
    state['run_timeout'] = run_timeout
    signal.setitimer(signal.ITIMER_REAL, max(0.001, deadline - time.monotonic()))
    return deadline


def _run(args, now, state):
    started = time.monotonic()
    deadline = None
    if args.run_timeout:
        # Armed before anything is read: a configuration that blocks (a FIFO, a hung mount) ends as
        # "unknown" within the run timeout, never as a hung nvidia-smi.
        deadline = _arm(state, args.run_timeout, started)
    config = load_config(args.config or DEFAULT_CONFIG, explicit=bool(args.config))
    for key in ('nvidia_smi_path', 'expected_count', 'kernel_log_path', 'sysfs_root', 'xid_window_minutes',
                'timeout', 'run_timeout'):
        value = getattr(args, key)
        if value is not None:
            config[key] = value
    if args.thresholds is not None:
        config['thresholds'] = args.thresholds
    run_timeout = config.get('run_timeout') or None
    if run_timeout and not args.run_timeout:
        deadline = _arm(state, run_timeout, started)
    state['runner'] = Runner(deadline)
    return judge(args, config, state['runner'], now)


def timeout_report(state, now):
    """nvidia-smi still running when the run timeout passed: hung (critical); anything else: unknown."""
    runner = state['runner']
    command = (runner.current or runner.interrupted) if runner is not None else None
    if command and os.path.basename(command[0]).startswith('nvidia-smi'):
        return failure_report('driver', 'nvidia-smi hung: no answer within the run timeout of %ss, its process '
                              'group killed (a hung driver usually means a sick GPU)' % state['run_timeout'], now,
                              status='critical')
    return failure_report('program', 'health program ran out of its run timeout of %ss%s; GPU health not '
                          'determined' % (state['run_timeout'], ' while running %s' % command[0] if command else ''),
                          now)
