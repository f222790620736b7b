# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Installed by gpucluster.core.health_check as gpucluster_health/cli.py; /usr/local/sbin/gpucluster-health
# runs main(). The checks are the modules next to it in that package: byte-identical copies of the
# collection's plugins/module_utils/gpu_*.py, so this program and the gpucluster.core.gpu_facts
# module give the same verdict. Python 3.9+, standard library only.
"""gpucluster-health: GPU node health verdict for Slurm, monitoring and people.

Exit codes: 0 ok, 1 warning, 2 critical, 3 unknown (the health could not be determined, or
the program itself failed). JSON on stdout unless --quiet; --format summary prints one line
fit for a Slurm drain reason.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

DEFAULT_CONFIG = '/etc/gpucluster/health.json'
TEXTFILE_NAME = 'gpucluster_health.prom'
CONFIG_KEYS = ('nvidia_smi_path', 'expected_count', 'thresholds', 'xid_window_minutes', 'kernel_log_path',
               'sysfs_root', 'timeout')
EXIT_UNKNOWN = 3

# Relative: this file only runs as gpucluster_health.cli, inside the package with the checks.
from . import gpu_health, gpu_probe, gpu_prom


class ConfigError(Exception):
    pass


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
    for key in ('expected_count', 'xid_window_minutes', 'timeout'):
        value = config.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ConfigError('config %s: %s must be a whole number >= 0, got %r' % (path, key, value))
    try:
        config['thresholds'] = gpu_health.merge_thresholds(config.get('thresholds') or {})
    except gpu_health.ThresholdError as exc:
        raise ConfigError('config %s: %s' % (path, exc))
    return config


def run(argv, timeout):
    env = dict(os.environ, LC_ALL='C')
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout, env=env,
                              check=False)
    except subprocess.TimeoutExpired as exc:
        return None, (exc.stdout or b'').decode('utf-8', 'replace'), (exc.stderr or b'').decode('utf-8', 'replace')
    return proc.returncode, proc.stdout.decode('utf-8', 'replace'), proc.stderr.decode('utf-8', 'replace')


def write_textfile(directory, text):
    """Write atomically: node_exporter must never read a half-written file."""
    fd, tmp = tempfile.mkstemp(prefix='.%s.' % TEXTFILE_NAME, dir=directory)
    try:
        with os.fdopen(fd, 'w') as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, os.path.join(directory, TEXTFILE_NAME))
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def summary_line(report):
    bad = [i for i in report['issues'] if i['severity'] in ('critical', 'warning', 'unknown')]
    bad.sort(key=lambda i: {'critical': 0, 'unknown': 1, 'warning': 2}[i['severity']])
    text = 'gpucluster-health %s' % report['status']
    if bad:
        text += ': ' + '; '.join(i['message'] for i in bad[:3])
        if len(bad) > 3:
            text += ' (+%d more)' % (len(bad) - 3)
    return text


def parse_args(argv):
    parser = argparse.ArgumentParser(
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
    parser.add_argument('--timeout', type=int, help='seconds nvidia-smi may take (default 60)')
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.check_config:
        try:
            load_config(args.check_config, explicit=True)
        except ConfigError as exc:
            sys.stderr.write('gpucluster-health: %s\n' % exc)
            return EXIT_UNKNOWN
        return 0
    try:
        config = load_config(args.config or DEFAULT_CONFIG, explicit=bool(args.config))
    except ConfigError as exc:
        sys.stderr.write('gpucluster-health: %s\n' % exc)
        return EXIT_UNKNOWN
    for key in ('nvidia_smi_path', 'expected_count', 'kernel_log_path', 'sysfs_root', 'xid_window_minutes',
                'timeout'):
        value = getattr(args, key)
        if value is not None:
            config[key] = value
    window = config.get('xid_window_minutes') or 120
    timeout = config.get('timeout') or 60
    thresholds = config.get('thresholds') or gpu_health.merge_thresholds()

    now = time.time()
    snapshot = gpu_probe.collect(run, nvidia_smi_path=config.get('nvidia_smi_path') or None,
                                 sysfs_root=config.get('sysfs_root') or '/sys',
                                 kernel_log_path=config.get('kernel_log_path') or None,
                                 window_minutes=window, now=now, timeout=timeout)
    facts = gpu_health.build_facts(snapshot, expected_count=config.get('expected_count') or None,
                                   thresholds=thresholds, window_minutes=window)
    status = facts['health']['status']
    code = gpu_health.exit_code(status)
    report = {
        'status': status,
        'exit_code': code,
        'host': socket.gethostname(),
        'timestamp': int(now),
        'issues': facts['health']['issues'],
        'checks_skipped': facts['health']['checks_skipped'],
        'gpu': facts,
    }
    if args.textfile:
        try:
            write_textfile(args.textfile, gpu_prom.render(facts, now))
        except (IOError, OSError) as exc:
            sys.stderr.write('gpucluster-health: cannot write %s into %s: %s\n' % (TEXTFILE_NAME, args.textfile, exc))
            if code == 0:
                code = EXIT_UNKNOWN
    if not args.quiet:
        if args.format == 'summary':
            sys.stdout.write(summary_line(report) + '\n')
        else:
            sys.stdout.write(json.dumps(report, indent=2, sort_keys=True) + '\n')
    return code
