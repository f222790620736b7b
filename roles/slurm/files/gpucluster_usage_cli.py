# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Installed by gpucluster.core.slurm as gpucluster_usage/cli.py inside /usr/local/lib/gpucluster/gpucluster-slurm-usage.pyz
# (with the collection's module_utils gpu_jobs, slurm_usage, jobstats and what they import, verbatim). Python 3.9+,
# standard library only.
"""gpucluster-slurm-usage: who uses the GPUs of a Slurm cluster.

Commands (the first argument):
  prolog, epilog   slurmd's Prolog and Epilog on a compute node (as root; the slurm role puts a script in
                   prolog.d and epilog.d): record which job holds each GPU, and forget it when the job ends
                   (plugins/module_utils/gpu_jobs.py). Always exit 0: a failure here never fails a job or
                   drains a node; it is logged (syslog, the journal) with its reason.
  metrics          the controller's timer: squeue, sinfo and sshare as node_exporter textfile metrics
                   (plugins/module_utils/slurm_usage.py), each command bounded by what is left of --run-timeout;
                   a command that fails is a gauge in the file, its families left out. Exit 0 once the file is
                   written, 3 when it cannot be.
  jobstats JOBID   what a job did with its GPUs, from Prometheus (plugins/module_utils/jobstats.py): exit 0
                   shown, 1 no such job in Prometheus (says why), 2 bad command line or configuration, 3
                   Prometheus could not be asked.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import argparse
import json
import os
import signal
import subprocess
import sys
import time

# Relative: this file only runs as gpucluster_usage.cli, inside the archive with its modules.
from . import gpu_jobs

JOBSTATS_CONFIG = '/etc/gpucluster/jobstats.json'
JOBSTATS_KEYS = ('prometheus_url', 'ca_file', 'user', 'password_file', 'timeout')
EXIT_NOT_FOUND = 1
EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3
# Seconds of the metrics run kept back for writing the file after the last command.
RUN_RESERVE = 1
KILL_WAIT = 1
PASSWORD_MAX_BYTES = 4096
# The most of one Prometheus answer read (a week of one job's GPUs at 10,000 points each is far less).
ANSWER_MAX_BYTES = 64 * 1024 * 1024


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError('%s: %s (see %s --help)' % (self.prog, message, self.prog))


def _log(tag, message):
    """A line for the journal: syslog (the Prolog's stdout and stderr are not kept by slurmd) and stderr."""
    text = ' '.join(str(message).split())
    try:
        import syslog
        syslog.openlog(tag, 0, syslog.LOG_DAEMON)
        syslog.syslog(syslog.LOG_WARNING, text)
    except (ImportError, OSError):
        pass
    try:
        sys.stderr.write('%s: %s\n' % (tag, text))
    except (IOError, OSError):
        pass


# prolog / epilog ---------------------------------------------------------------------------------

def cmd_records(kind, argv, environ):
    """The Prolog (kind 'prolog') or the Epilog ('epilog'). Never raises, always 0."""
    tag = 'gpucluster-gpu-jobs'
    try:
        parser = _Parser(prog='gpucluster-slurm-usage %s' % kind)
        parser.add_argument('--records-dir', default=gpu_jobs.RECORDS_DIR)
        args = parser.parse_args(argv)
        if kind == 'prolog':
            record = gpu_jobs.slurm_record(environ, time.time())
            if record['gpus']:
                gpu_jobs.write_records(args.records_dir, record)
        else:
            gpu_jobs.remove_records(args.records_dir, environ.get('SLURM_JOB_ID', ''))
    except (gpu_jobs.RecordError, UsageError) as exc:
        _log(tag, '%s: %s; the GPUs of this job are not labelled with it' % (kind, exc))
    except (IOError, OSError) as exc:
        _log(tag, '%s: %s; the GPUs of this job are not labelled with it' % (kind, exc))
    except Exception as exc:  # pylint: disable=broad-except
        # Whatever happens, the job goes on and the node stays in service.
        _log(tag, '%s: internal error %s: %s' % (kind, type(exc).__name__, exc))
    return 0


# metrics ----------------------------------------------------------------------------------------

def run_command(argv, timeout):
    """(rc, stdout, stderr) of ``argv`` in a process group of its own, killed as a whole after ``timeout``
    seconds (rc None then)."""
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ, LC_ALL='C'), start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            out, err = proc.communicate(timeout=KILL_WAIT)
        except (subprocess.TimeoutExpired, ValueError, OSError):
            out, err = b'', b''
        return None, _decode(out), _decode(err)
    finally:
        if proc.returncode is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
    return proc.returncode, _decode(out), _decode(err)


def _decode(data):
    return (data or b'').decode('utf-8', 'replace')


def collect(commands, run_timeout, runner=run_command, clock=time.monotonic):
    """{command: {'ok', 'text', 'reason'}} of [(command, argv)], one after the other. Each gets an equal share of
    what is left of ``run_timeout`` seconds (less RUN_RESERVE): one that hangs cannot starve the others."""
    deadline = clock() + run_timeout
    results = {}
    for position, (command, argv) in enumerate(commands):
        left = (deadline - clock() - RUN_RESERVE) / (len(commands) - position)
        if left <= 0:
            results[command] = {'ok': False, 'text': '', 'reason': 'not run: the run timeout of %ss passed' % run_timeout}
            continue
        try:
            rc, out, err = runner(argv, left)
        except OSError as exc:
            results[command] = {'ok': False, 'text': '', 'reason': 'cannot run %s: %s' % (argv[0], exc.strerror or exc)}
            continue
        if rc is None:
            reason = 'no answer within %.0f s (killed)' % left
        elif rc != 0:
            reason = 'exit %d: %s' % (rc, ' '.join((err or '').split())[:300])
        else:
            reason = None
        results[command] = {'ok': reason is None, 'text': out if reason is None else '', 'reason': reason}
    return results


def cmd_metrics(argv):
    from . import atomic_file, slurm_usage
    parser = _Parser(prog='gpucluster-slurm-metrics',
                     description='Slurm usage (squeue, sinfo, sshare) as node_exporter textfile metrics.')
    parser.add_argument('--textfile', metavar='DIR', help='write %s into this node_exporter textfile directory'
                        % slurm_usage.TEXTFILE_NAME)
    parser.add_argument('--stdout', action='store_true', help='print the metrics instead of writing them')
    parser.add_argument('--run-timeout', type=int, default=30, help='seconds the three commands may take together')
    parser.add_argument('--no-sshare', action='store_true', help='leave out fair share (a cluster without accounting)')
    parser.add_argument('--squeue', default='squeue')
    parser.add_argument('--sinfo', default='sinfo')
    parser.add_argument('--sshare', default='sshare')
    args = parser.parse_args(argv)
    if args.run_timeout < 2:
        raise UsageError('gpucluster-slurm-metrics: --run-timeout must be 2 s or more, got %d' % args.run_timeout)
    if not args.textfile and not args.stdout:
        raise UsageError('gpucluster-slurm-metrics: give --textfile DIR or --stdout')
    start = time.monotonic()
    commands = [('squeue', slurm_usage.squeue_argv(args.squeue)), ('sinfo', slurm_usage.sinfo_argv(args.sinfo))]
    if not args.no_sshare:
        commands.append(('sshare', slurm_usage.sshare_argv(args.sshare)))
    results = collect(commands, args.run_timeout)
    for command in sorted(results):
        if results[command]['reason']:
            _log('gpucluster-slurm-metrics', '%s failed: %s; its metrics are left out' % (command, results[command]['reason']))
    text = slurm_usage.render(results, time.time(), time.monotonic() - start)
    if args.stdout:
        sys.stdout.write(text)
        return 0
    path = os.path.join(args.textfile, slurm_usage.TEXTFILE_NAME)
    try:
        atomic_file.write_atomic(path, text, prefix='.%s.' % slurm_usage.TEXTFILE_NAME)
    except (IOError, OSError) as exc:
        _log('gpucluster-slurm-metrics', 'cannot write %s: %s' % (path, exc))
        return EXIT_UNAVAILABLE
    return 0


# jobstats ---------------------------------------------------------------------------------------

class Unavailable(Exception):
    """Prometheus could not be asked (network, TLS, credentials, an error answer)."""


def load_jobstats_config(path, explicit):
    if not os.path.exists(path):
        if explicit:
            raise UsageError('gpucluster-jobstats: the configuration %s does not exist' % path)
        return {}
    try:
        with open(path) as handle:
            data = json.load(handle)
    except (IOError, OSError, ValueError) as exc:
        raise UsageError('gpucluster-jobstats: cannot read the configuration %s: %s' % (path, exc))
    if not isinstance(data, dict):
        raise UsageError('gpucluster-jobstats: %s is not a JSON object' % path)
    unknown = sorted(k for k in data if not k.startswith('_') and k not in JOBSTATS_KEYS)
    if unknown:
        raise UsageError('gpucluster-jobstats: %s: unknown key(s) %s; known: %s'
                         % (path, ', '.join(unknown), ', '.join(JOBSTATS_KEYS)))
    return dict((k, v) for k, v in data.items() if not k.startswith('_'))


def read_password(path):
    from . import bounded_read
    try:
        data = bounded_read.read_regular(path, PASSWORD_MAX_BYTES)
    except bounded_read.Unreadable as exc:
        raise UsageError('gpucluster-jobstats: cannot read the password file %s: %s' % (path, exc))
    except (IOError, OSError) as exc:
        raise UsageError('gpucluster-jobstats: cannot read the password file %s: %s (the scrape password is for root '
                         'and Prometheus\'s group: run it with sudo)' % (path, exc.strerror or exc))
    if data is None:
        raise UsageError('gpucluster-jobstats: the password file %s does not exist (on a host that is not the '
                         'monitoring server, set slurm_jobstats_password_file to a copy of the scrape password)' % path)
    return data.decode('utf-8', 'replace').strip('\r\n')


class Prometheus(object):
    """Instant queries over HTTP(S) with basic auth; the password is never printed."""

    def __init__(self, url, ca_file=None, user=None, password=None, timeout=10):
        self.url = url.rstrip('/')
        self.ca_file = ca_file
        self.user = user
        self.password = password
        self.timeout = timeout

    def query_range(self, expr, start, end, step):
        """The answer (JSON) of /api/v1/query_range: evaluation points from start to end, step seconds apart."""
        import base64
        import ssl
        from urllib.error import HTTPError, URLError
        from urllib.parse import urlencode
        from urllib.request import Request, urlopen
        body = urlencode({'query': expr, 'start': '%.3f' % start, 'end': '%.3f' % end, 'step': '%.3f' % step})
        request = Request(self.url + '/api/v1/query_range', data=body.encode('ascii'), method='POST',
                          headers={'Content-Type': 'application/x-www-form-urlencoded'})
        if self.user:
            token = base64.b64encode(('%s:%s' % (self.user, self.password or '')).encode('utf-8')).decode('ascii')
            request.add_header('Authorization', 'Basic ' + token)
        context = None
        if self.url.startswith('https:'):
            context = ssl.create_default_context(cafile=self.ca_file or None)
        try:
            with urlopen(request, timeout=self.timeout, context=context) as answer:
                return json.loads(answer.read(ANSWER_MAX_BYTES).decode('utf-8', 'replace'))
        except HTTPError as exc:
            if exc.code in (401, 403):
                raise Unavailable('Prometheus at %s refused the credentials of user %s (HTTP %d)'
                                  % (self.url, self.user or '(none)', exc.code))
            try:
                return json.loads(exc.read(65536).decode('utf-8', 'replace'))
            except (ValueError, OSError, RecursionError):
                raise Unavailable('Prometheus at %s answered HTTP %d' % (self.url, exc.code))
        except RecursionError:
            raise Unavailable('Prometheus at %s answered JSON nested too deep' % self.url)
        except (URLError, OSError, ValueError) as exc:
            reason = getattr(exc, 'reason', exc)
            raise Unavailable('cannot ask Prometheus at %s: %s' % (self.url, reason))


def cmd_jobstats(argv):
    from . import jobstats
    parser = _Parser(prog='gpucluster-jobstats',
                     description='What a Slurm job did with the GPUs it held (from Prometheus), and a verdict.')
    parser.add_argument('job_id', metavar='JOBID')
    parser.add_argument('--format', choices=('text', 'json'), default='text')
    parser.add_argument('--since', default=jobstats.DEFAULT_SINCE,
                        help='how far back to look for the job (default %s; within the retention)' % jobstats.DEFAULT_SINCE)
    parser.add_argument('--config', help='JSON configuration (default %s; read when present)' % JOBSTATS_CONFIG)
    parser.add_argument('--url', help='Prometheus URL (overrides the configuration)')
    parser.add_argument('--ca-file', help='CA certificate of Prometheus\'s TLS certificate')
    parser.add_argument('--user', help='basic-auth user')
    parser.add_argument('--password-file', help='file holding the basic-auth password')
    parser.add_argument('--used-percent', type=float, default=jobstats.USED_PERCENT,
                        help='a GPU whose mean utilisation is below this was held, not used (default %g)'
                        % jobstats.USED_PERCENT)
    args = parser.parse_args(argv)
    try:
        job_id = jobstats.check_job_id(args.job_id)
        window = jobstats.seconds(args.since)
    except jobstats.JobstatsError as exc:
        raise UsageError('gpucluster-jobstats: %s' % exc)
    config = load_jobstats_config(args.config or JOBSTATS_CONFIG, explicit=bool(args.config))
    url = args.url or config.get('prometheus_url')
    if not url or not isinstance(url, str) or not url.startswith(('http://', 'https://')):
        raise UsageError('gpucluster-jobstats: no Prometheus URL (http:// or https://): give --url or set '
                         'prometheus_url in %s' % (args.config or JOBSTATS_CONFIG))
    password_file = args.password_file or config.get('password_file')
    client = Prometheus(url, ca_file=args.ca_file or config.get('ca_file'), user=args.user or config.get('user'),
                        password=read_password(password_file) if password_file else None,
                        timeout=config.get('timeout') or 10)
    now = time.time()
    try:
        rows = jobstats.locate(client.query_range(jobstats.locate_query(job_id), *jobstats.plan(now - window, now)))
        if not rows:
            sys.stderr.write('gpucluster-jobstats: %s\n' % jobstats.not_found(job_id, args.since))
            return EXIT_NOT_FOUND
        first, last = jobstats.span(rows)
        figures = dict((metric, client.query_range(expr, *jobstats.plan(first, last)))
                       for metric, expr in jobstats.figure_queries(job_id).items())
        rows = jobstats.add_figures(rows, figures)
    except jobstats.JobstatsError as exc:
        raise Unavailable(str(exc))
    data = jobstats.report(job_id, rows, used_percent=args.used_percent)
    if args.format == 'json':
        sys.stdout.write(json.dumps(data, indent=2, sort_keys=True) + '\n')
    else:
        sys.stdout.write(jobstats.render_text(data))
    return 0


COMMANDS = ('prolog', 'epilog', 'metrics', 'jobstats')


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] not in COMMANDS:
        sys.stderr.write('gpucluster-slurm-usage: give a command: %s\n' % ', '.join(COMMANDS))
        return EXIT_USAGE
    command, rest = argv[0], argv[1:]
    if command in ('prolog', 'epilog'):
        return cmd_records(command, rest, os.environ)
    try:
        if command == 'metrics':
            return cmd_metrics(rest)
        return cmd_jobstats(rest)
    except UsageError as exc:
        sys.stderr.write('%s\n' % exc)
        return EXIT_USAGE
    except Unavailable as exc:
        sys.stderr.write('gpucluster-jobstats: %s\n' % exc)
        return EXIT_UNAVAILABLE
    except KeyboardInterrupt:
        return EXIT_USAGE
