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
import os
import re
import signal
import socket
import subprocess
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
# and one the node lacks is critical; empty or absent: every port not in ignore_ports.
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

# Relative: this file only runs as gpucluster_health.cli, inside the package with the checks.
from . import atomic_file, gpu_fabric, gpu_health, gpu_jobs, gpu_probe, gpu_prom, rdma_health, rdma_sysfs


class ConfigError(Exception):
    pass


class UsageError(Exception):
    pass


class RunTimeout(BaseException):
    """The run timeout passed (BaseException: no ``except Exception`` in the checks may swallow it)."""


def load_config(path, explicit):
    if not os.path.exists(path):
        if explicit:
            raise ConfigError('config file %s does not exist' % path)
        return {}
    try:
        with open(path) as handle:
            data = json.load(handle)
    except (IOError, OSError, ValueError) as exc:
        raise ConfigError('cannot read config %s: %s' % (path, exc))
    if not isinstance(data, dict):
        raise ConfigError('config %s: expected a JSON object' % path)
    # Keys starting with "_" are comments (JSON has none; the role writes "_managed" there).
    unknown = sorted(k for k in data if not k.startswith('_') and k not in CONFIG_KEYS)
    if unknown:
        raise ConfigError('config %s: unknown key(s) %s; known: %s' % (path, ', '.join(unknown), ', '.join(CONFIG_KEYS)))
    config = dict((k, v) for k, v in data.items() if not k.startswith('_'))
    for key in ('expected_count', 'xid_window_minutes', 'timeout', 'run_timeout'):
        value = config.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ConfigError('config %s: %s must be a whole number >= 0, got %r' % (path, key, value))
    for key in ('nvidia_smi_path', 'kernel_log_path', 'sysfs_root', 'job_records_dir'):
        value = config.get(key)
        if value is not None and not isinstance(value, str):
            raise ConfigError('config %s: %s must be a path (a string) or null, got %r' % (path, key, value))
    if config.get('job_records_dir') is not None and not config['job_records_dir'].startswith('/'):
        raise ConfigError('config %s: job_records_dir must be an absolute path, got %r' % (path, config['job_records_dir']))
    if config.get('job_source', 'none') not in gpu_jobs.SOURCES:
        raise ConfigError('config %s: job_source must be one of %s, got %r'
                          % (path, ', '.join(gpu_jobs.SOURCES), config.get('job_source')))
    try:
        config['thresholds'] = gpu_health.merge_thresholds(config.get('thresholds') or {})
    except gpu_health.ThresholdError as exc:
        raise ConfigError('config %s: %s' % (path, exc))
    config['rdma'] = _rdma_config(path, config.get('rdma'))
    return config


def _rdma_config(path, rdma):
    """The validated "rdma" object of the config (an empty one when absent or null)."""
    if rdma is None:
        return {}
    if not isinstance(rdma, dict):
        raise ConfigError('config %s: rdma must be an object with the keys %s, got %r' % (path, ', '.join(RDMA_KEYS), rdma))
    unknown = sorted(k for k in rdma if k not in RDMA_KEYS)
    if unknown:
        raise ConfigError('config %s: rdma: unknown key(s) %s; known: %s' % (path, ', '.join(unknown), ', '.join(RDMA_KEYS)))
    if not isinstance(rdma.get('expect_present', False), bool):
        raise ConfigError('config %s: rdma.expect_present must be true or false, got %r' % (path, rdma['expect_present']))
    hcas = rdma.get('hcas')
    if hcas is not None and (not isinstance(hcas, list) or not all(
            isinstance(h, str) and re.match(r'^[^/:\s]+(:[1-9][0-9]*)?$', h) for h in hcas)):
        raise ConfigError('config %s: rdma.hcas must be a list of RDMA devices, optionally with a port '
                          '(mlx5_0, mlx5_1:1), got %r' % (path, hcas))
    try:
        rdma_sysfs.normalize_options(rdma.get('expected_rate_gbps'), rdma.get('ignore_ports'))
    except rdma_sysfs.RdmaOptionError as exc:
        raise ConfigError('config %s: rdma: %s' % (path, exc))
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

    Each command runs in a new session (its own process group); on timeout the whole group gets
    SIGKILL, so nothing it started is left behind. With a deadline (the run timeout), a command's
    timeout is cut to the time left. ``timed_out`` lists the commands that ran out of time.
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
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=env, start_new_session=True)
        self.current = argv
        try:
            try:
                out, err = proc.communicate(timeout=limit)
            except subprocess.TimeoutExpired:
                self.timed_out.append(argv)
                out, err = kill_group(proc)
                return None, decode(out), decode(err)
            return proc.returncode, decode(out), decode(err)
        finally:
            if proc.returncode is None:
                # Interrupted (the run timeout): take the command's process group down with us.
                self.interrupted = argv
                kill_group(proc)
            self.current = None


def kill_group(proc):
    """SIGKILL the process group of ``proc``; the output read so far, waiting at most KILL_WAIT s."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    try:
        out, err = proc.communicate(timeout=KILL_WAIT)
    except (subprocess.TimeoutExpired, ValueError, OSError):
        out, err = b'', b''
        for stream in (proc.stdout, proc.stderr):
            try:
                stream.close()
            except (OSError, AttributeError):
                pass
    return out or b'', err or b''


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
        if value is not None and value < 0:
            raise UsageError('bad command line: --%s must be >= 0, got %d' % (key.replace('_', '-'), value))
    return args


def _json_object(option, text):
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise UsageError('bad command line: %s must be a JSON object, got %r (%s)' % (option, text, exc))
    if not isinstance(value, dict):
        raise UsageError('bad command line: %s must be a JSON object, got %r' % (option, text))
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
        'issues': [{'gpu': None, 'check': check, 'severity': status, 'message': ' '.join(message.split())}],
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
    except (IOError, OSError):
        pass  # stdout closed: the exit code still carries the verdict


def describe(exc):
    """'ValueError: bad thing (gpu_smi_xml.py:123)' for an unexpected exception."""
    where = ''
    frames = traceback.extract_tb(exc.__traceback__)
    if frames:
        last = frames[-1]
        where = ' (%s:%s)' % (os.path.basename(last.filename), last.lineno)
    return '%s: %s%s' % (type(exc).__name__, exc, where)


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
            sys.stderr.write('gpucluster-health: cannot write %s into %s: %s\n' % (TEXTFILE_NAME, args.textfile, exc))
            if code == 0:
                code = EXIT_UNKNOWN
                report['status'] = 'unknown'
                report['exit_code'] = code
                report['issues'] = issues + [{
                    'gpu': None, 'check': 'textfile', 'severity': 'unknown',
                    'message': 'cannot write %s into %s: %s' % (TEXTFILE_NAME, args.textfile, exc)}]
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
                    sys.stderr.write('gpucluster-health: %s\n' % exc)
                    return EXIT_UNKNOWN
                return 0
            report, code = _run(args, now, state)
        finally:
            if state['run_timeout']:
                signal.alarm(0)
    except RunTimeout:
        report = timeout_report(state, now)
    except (ConfigError, UsageError) as exc:
        sys.stderr.write('gpucluster-health: %s\n' % exc)
        report = failure_report('program', str(exc), now)
    except KeyboardInterrupt:
        report = failure_report('program', 'interrupted; GPU health not determined', now)
    except Exception as exc:  # pylint: disable=broad-except
        # Any failure of the program itself is "unknown" with its reason, never a traceback exit
        # (exit 1 would read as "warning"); the traceback still goes to stderr for the journal.
        traceback.print_exc(file=sys.stderr)
        report = failure_report('program', 'internal error: %s; GPU health not determined' % describe(exc), now)
    else:
        emit(report, quiet, fmt)
        return code
    emit(report, quiet, fmt)
    return report['exit_code']


def _run(args, now, state):
    config = load_config(args.config or DEFAULT_CONFIG, explicit=bool(args.config))
    for key in ('nvidia_smi_path', 'expected_count', 'kernel_log_path', 'sysfs_root', 'xid_window_minutes',
                'timeout', 'run_timeout'):
        value = getattr(args, key)
        if value is not None:
            config[key] = value
    if args.thresholds is not None:
        config['thresholds'] = args.thresholds
    run_timeout = config.get('run_timeout') or None
    deadline = None
    if run_timeout:
        deadline = time.monotonic() + run_timeout
        signal.signal(signal.SIGALRM, _on_alarm)
        state['run_timeout'] = run_timeout
        signal.alarm(run_timeout)
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
