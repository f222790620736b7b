# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Robustness of the health path: the node health program and the Slurm HealthCheckProgram wrapper.

Three tables, each case with its exact outcome:
  - WRAPPER_CASES: the wrapper (roles/slurm: module_utils/slurm_health.py, module_utils/scheduler.py and
    files/gpucluster_slurm_healthcheck.py,
    imported from the archive the role installs) against a scripted
    health program (every exit code / JSON / timeout shape) and a stand-in scontrol (node state and
    drain reason): the scontrol update it makes, or none.
  - CLI_*: the node health program (roles/health_check/files/gpucluster_health_cli.py, assembled as a
    package from plugins/module_utils like the role does) fed internal errors, bad command lines and
    configs, hung commands: verdict unknown/exit 3 with the reason (or critical for a hung nvidia-smi).
  - REAL_CASES: the wrapper running the REAL health program against a stand-in nvidia-smi replaying
    recordings from the fixture corpus and kernel-log lines from it (re-stamped to now).
Outcomes: 'no drain' (node not drained, left so), 'drain', 'resume', 'keep' (drained node left
drained), 'unknown' (the program's own verdict, exit 3).
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import atexit
import datetime
import importlib
import io
import grp
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time

import pytest
import yaml

from ansible_collections.gpucluster.core.plugins.module_utils import scheduler, slurm_health

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
MODULE_UTILS = os.path.join(REPO, 'plugins', 'module_utils')
CLI = os.path.join(REPO, 'roles', 'health_check', 'files', 'gpucluster_health_cli.py')

sys.path.insert(0, os.path.join(REPO, 'tests'))
import node_programs  # noqa: E402

# The wrapper's front end imported from the archive the slurm role installs (built as the role builds it).
_ARCHIVE_DIR = tempfile.mkdtemp(prefix='slurm-healthcheck-robustness-')
atexit.register(shutil.rmtree, _ARCHIVE_DIR, True)
hc = node_programs.import_front_end('slurm_healthcheck', _ARCHIVE_DIR)


def _script(path, body):
    with open(str(path), 'w') as handle:
        handle.write('#!/bin/sh\n' + body)
    os.chmod(str(path), stat.S_IRWXU)
    return str(path)


def _json(status, issues=None, code=None):
    data = {'status': status, 'issues': issues or []}
    if code is not None:
        data['exit_code'] = code
    return json.dumps(data)


CRIT_ISSUES = [{'gpu': 1, 'check': 'row_remap', 'severity': 'critical', 'message': 'row remap pending'},
               {'gpu': 0, 'check': 'temperature', 'severity': 'warning', 'message': 'hot'}]
CRIT_REASON = scheduler.make_reason('health', 'gpu1 row remap pending')
OLDER = scheduler.make_reason('health', 'gpu0 xid 79')

# Node states as `scontrol --oneliner show node NODE` prints them.
IDLE = 'NodeName=node2 Arch=x86_64 State=IDLE Partitions=gpu'
OURS = 'NodeName=node2 State=IDLE+DRAIN Partitions=gpu Reason=%s [root@2026-11-30T10:00:00]' % OLDER
OURS_SAME = 'NodeName=node2 State=IDLE+DRAIN Reason=%s [root@2026-11-30T10:00:00] Comment=(null)' % CRIT_REASON
OURS_MIXED = 'NodeName=node2 State=MIXED+DRAIN Reason=%s [root@t]' % OLDER
# Drained by the previous release (its reason form): still ours.
OURS_BEFORE = 'NodeName=node2 State=IDLE+DRAIN Reason=gpucluster-health: gpu0 xid 79 [root@t]'
OURS_BEFORE_XID = ('NodeName=node2 State=IDLE+DRAIN Reason=gpucluster-health: GPU0 Xid 79 (PCI:0000:81:00): 79, pid=0, '
                   'name=python3, GPU has fallen off the bus [root@2026-11-30T10:00:00] Comment=(null)')
OPERATOR = 'NodeName=node2 State=IDLE+DRAIN Reason=operator: fan swap [alice@2026-11-30T10:00:00]'
LOOKALIKE = 'NodeName=node2 State=IDLE+DRAIN Reason=gpucluster-healthy people [bob@t]'
EDITED = 'NodeName=node2 State=IDLE+DRAIN Reason=%s - RMA 1234 [alice@t]' % OLDER
# DOWN (whoever set it) is an operator state: State=RESUME would clear it.
DOWN_OURS = 'NodeName=node2 State=DOWN+DRAIN Reason=%s [root@t]' % OLDER
DOWN_OPERATOR = 'NodeName=node2 State=DOWN Reason=PSU swap, do not use [alice@t]'
MAINT_OURS = 'NodeName=node2 State=IDLE+DRAIN+MAINTENANCE+RESERVED Reason=%s [root@t]' % OLDER

DRAIN = 'update NodeName=node2 State=DRAIN Reason='
RESUME = 'update NodeName=node2 State=RESUME'
HUNG = DRAIN + scheduler.make_reason('health', 'nvidia-smi hung (the health program gave no answer within 1s; killed)')

# Program shapes: (shell body of the health program).
OK = "echo '%s'; exit 0\n" % _json('ok')
OK_CODE = "echo '%s'; exit 0\n" % _json('ok', code=0)
WARN = "echo '%s'; exit 1\n" % _json('warning', [{'severity': 'warning', 'message': 'hot'}])
CRIT = "echo '%s'; exit 2\n" % _json('critical', CRIT_ISSUES)
UNKNOWN = "echo '%s'; exit 3\n" % _json('unknown', [{'severity': 'unknown', 'message': 'internal error'}])
CRASH = ("echo 'Traceback (most recent call last):' >&2; echo 'ImportError: no module named gpu_health' >&2; "
         "exit 1\n")
EXIT1_NO_JSON = "echo 'warning-ish text'; exit 1\n"
EXIT0_EMPTY = 'exit 0\n'
EXIT0_GARBAGE = "printf '\\377\\376garbage{'; exit 0\n"
EXIT0_TRUNCATED = "printf '{\"status\": \"ok\", \"iss'; exit 0\n"
USAGE_EXIT2 = "echo 'usage: gpucluster-health [-h]' >&2; echo 'error: unrecognized arguments: --run-timeout' >&2; exit 2\n"
OK_JSON_EXIT2 = "echo '%s'; exit 2\n" % _json('ok')
CRIT_JSON_EXIT0 = "echo '%s'; exit 0\n" % _json('critical', CRIT_ISSUES)
OK_JSON_BAD_CODE = "echo '%s'; exit 0\n" % _json('ok', code=2)
WARN_JSON_EXIT0 = "echo '%s'; exit 0\n" % _json('warning')
JSON_ARRAY = "echo '[\"ok\"]'; exit 0\n"
JSON_NO_STATUS = "echo '{\"issues\": []}'; exit 0\n"
JSON_ODD_STATUS = "echo '{\"status\": \"OK\"}'; exit 0\n"
KILLED = 'kill -9 $$\n'
EXIT_127 = "echo 'not found' >&2; exit 127\n"
HANG = 'sleep 30\n'
HANG_AFTER_OK = "echo '%s'; sleep 30; exit 0\n" % _json('ok')

WRAPPER_CASES = [
    # id, program body (None: missing program), node state, outcome, exact scontrol update (or None)
    ('ok-idle', OK, IDLE, 'no drain', None),
    ('ok-ours', OK, OURS, 'resume', RESUME),
    ('ok-ours-mixed', OK, OURS_MIXED, 'resume', RESUME),
    ('ok-ours-before', OK, OURS_BEFORE, 'resume', RESUME),
    ('ok-ours-before-xid-name', OK, OURS_BEFORE_XID, 'resume', RESUME),
    ('ok-ours-down', OK, DOWN_OURS, 'keep', None),
    ('ok-ours-maint', OK, MAINT_OURS, 'keep', None),
    ('ok-operator-down', OK, DOWN_OPERATOR, 'no drain', None),
    ('ok-edited', OK, EDITED, 'keep', None),
    ('ok-exit-code-field', OK_CODE, OURS, 'resume', RESUME),
    ('ok-operator', OK, OPERATOR, 'keep', None),
    ('ok-lookalike-prefix', OK, LOOKALIKE, 'keep', None),
    ('warning-idle', WARN, IDLE, 'no drain', None),
    ('warning-ours', WARN, OURS, 'keep', None),
    ('warning-operator', WARN, OPERATOR, 'keep', None),
    ('critical-idle', CRIT, IDLE, 'drain', DRAIN + CRIT_REASON),
    ('critical-ours-other-reason', CRIT, OURS, 'drain', DRAIN + CRIT_REASON),
    ('critical-ours-same-reason', CRIT, OURS_SAME, 'keep', None),
    ('critical-operator', CRIT, OPERATOR, 'keep', None),
    ('critical-lookalike', CRIT, LOOKALIKE, 'keep', None),
    ('critical-ours-before', CRIT, OURS_BEFORE, 'drain', DRAIN + CRIT_REASON),
    ('critical-operator-down', CRIT, DOWN_OPERATOR, 'no drain', None),
    ('critical-ours-down', CRIT, DOWN_OURS, 'keep', None),
    ('critical-edited', CRIT, EDITED, 'keep', None),
    ('unknown-idle', UNKNOWN, IDLE, 'no drain', None),
    ('unknown-ours', UNKNOWN, OURS, 'keep', None),
    ('crash-idle', CRASH, IDLE, 'no drain', None),
    ('crash-ours', CRASH, OURS, 'keep', None),
    ('crash-operator', CRASH, OPERATOR, 'keep', None),
    ('exit1-no-json-ours', EXIT1_NO_JSON, OURS, 'keep', None),
    ('exit0-empty-ours', EXIT0_EMPTY, OURS, 'keep', None),
    ('exit0-empty-idle', EXIT0_EMPTY, IDLE, 'no drain', None),
    ('exit0-garbage-ours', EXIT0_GARBAGE, OURS, 'keep', None),
    ('exit0-truncated-json-ours', EXIT0_TRUNCATED, OURS, 'keep', None),
    ('usage-exit2-idle', USAGE_EXIT2, IDLE, 'no drain', None),
    ('usage-exit2-ours', USAGE_EXIT2, OURS, 'keep', None),
    ('ok-json-exit2-idle', OK_JSON_EXIT2, IDLE, 'no drain', None),
    ('ok-json-exit2-ours', OK_JSON_EXIT2, OURS, 'keep', None),
    ('critical-json-exit0-idle', CRIT_JSON_EXIT0, IDLE, 'no drain', None),
    ('critical-json-exit0-ours', CRIT_JSON_EXIT0, OURS, 'keep', None),
    ('ok-json-exit-code-field-2', OK_JSON_BAD_CODE, OURS, 'keep', None),
    ('warning-json-exit0-ours', WARN_JSON_EXIT0, OURS, 'keep', None),
    ('json-array-ours', JSON_ARRAY, OURS, 'keep', None),
    ('json-no-status-ours', JSON_NO_STATUS, OURS, 'keep', None),
    ('json-odd-status-ours', JSON_ODD_STATUS, OURS, 'keep', None),
    ('killed-by-signal-ours', KILLED, OURS, 'keep', None),
    ('killed-by-signal-idle', KILLED, IDLE, 'no drain', None),
    ('exit127-ours', EXIT_127, OURS, 'keep', None),
    ('missing-program-idle', None, IDLE, 'no drain', None),
    ('missing-program-ours', None, OURS, 'keep', None),
    ('hang-idle', HANG, IDLE, 'drain', HUNG),
    ('hang-ours', HANG, OURS, 'drain', HUNG),
    ('hang-operator', HANG, OPERATOR, 'keep', None),
    ('hang-operator-down', HANG, DOWN_OPERATOR, 'no drain', None),
    ('hang-after-printing-ok-ours', HANG_AFTER_OK, OURS, 'drain', HUNG),
]


@pytest.fixture
def cluster(tmp_path):
    """configure(program_body, state) -> settings path; a stand-in scontrol logs its updates."""
    state = tmp_path / 'state'
    updates = tmp_path / 'updates'
    args = tmp_path / 'args'
    scontrol = _script(tmp_path / 'scontrol',
                       'case " $* " in *" show "*) cat %s ;; *) echo "$@" >> %s ;; esac\n' % (state, updates))
    program = tmp_path / 'health'
    settings = tmp_path / 'settings.json'

    def configure(body, node_state, timeout=5, program_timeout=1):
        if body is not None:
            _script(program, 'echo "$@" > %s\n%s' % (args, body))
        state.write_text(node_state + '\n')
        settings.write_text(json.dumps({'program': str(program), 'node_name': 'node2',
                                        'timeout': timeout, 'program_timeout': program_timeout,
                                        'scontrol': scontrol}))
        return str(settings)

    def update():
        return updates.read_text().strip() if updates.exists() else None

    configure.update = update
    configure.args = args
    return configure


def outcome_of(update, node_state):
    if update is None:
        return 'keep' if 'DRAIN' in node_state.split('State=')[1].split()[0] else 'no drain'
    return 'resume' if update == RESUME else 'drain'


@pytest.mark.parametrize('body, node_state, outcome, update', [c[1:] for c in WRAPPER_CASES],
                         ids=[c[0] for c in WRAPPER_CASES])
def test_wrapper_decision(cluster, body, node_state, outcome, update):
    # A hanging program gets 1 s; the others get 10 s, so that a loaded test machine never turns a
    # quick answer into a hang (the verdict must not depend on this machine's speed).
    hangs = body in (HANG, HANG_AFTER_OK)
    program_timeout = 1 if hangs else 10
    settings = cluster(body, node_state, timeout=program_timeout + 4, program_timeout=program_timeout)
    started = time.monotonic()
    assert hc.main([settings]) == 0
    assert cluster.update() == update
    assert outcome_of(cluster.update(), node_state) == outcome
    if hangs:
        # The program (sleep 30) was killed after its run timeout, well before it would have ended.
        assert time.monotonic() - started < 20
    if body is not None:
        assert cluster.args.read_text().split() == ['--run-timeout', str(program_timeout)]


def _alive_with(marker):
    found = []
    for pid in os.listdir('/proc'):
        if not pid.isdigit():
            continue
        try:
            with open('/proc/%s/cmdline' % pid, 'rb') as handle:
                cmdline = handle.read().replace(b'\0', b' ').decode('utf-8', 'replace')
            with open('/proc/%s/stat' % pid) as handle:
                zombie = handle.read().rsplit(')', 1)[1].split()[0] == 'Z'
        except (IOError, OSError, IndexError):
            continue
        if marker in cmdline and not zombie:
            found.append(cmdline)
    return found


def test_wrapper_kills_the_programs_whole_process_group(cluster):
    marker = '4242.%d' % os.getpid()
    settings = cluster('sleep %s & sleep %s & wait\n' % (marker, marker), IDLE)
    assert hc.main([settings]) == 0
    assert cluster.update() == HUNG
    deadline = time.monotonic() + 3
    while _alive_with('sleep ' + marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _alive_with('sleep ' + marker) == []


@pytest.mark.skipif(not shutil.which('setsid'), reason='needs setsid (util-linux)')
def test_wrapper_kills_what_the_program_started_in_a_session_of_its_own(cluster):
    # The health program runs nvidia-smi in a new session (to kill it as a group); when the wrapper
    # has to kill the program, that nvidia-smi must go too.
    marker = '4444.%d' % os.getpid()
    settings = cluster('setsid sleep %s & sleep 30\n' % marker, IDLE)
    assert hc.main([settings]) == 0
    assert cluster.update() == HUNG
    deadline = time.monotonic() + 3
    while _alive_with('sleep ' + marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _alive_with('sleep ' + marker) == []


@pytest.mark.parametrize('settings, fragment', [
    ({'program': '/bin/true', 'node_name': 'n', 'timeout': 10, 'program_timeout': 10}, 'at least 2 s less'),
    ({'program': '/bin/true', 'node_name': 'n', 'timeout': 10, 'program_timeout': 9}, 'at least 2 s less'),
    ({'program': '/bin/true', 'node_name': 'n', 'timeout': 10, 'program_timeout': 0}, 'at least 1'),
    ({'program': '/bin/true', 'node_name': 'n', 'timeout': '45'}, 'timeout must be a whole number'),
    ({'program': '/bin/true', 'node_name': 'n', 'timeout': True}, 'timeout must be a whole number'),
    ({'node_name': 'n'}, 'program is missing'),
    (['program'], 'expected a JSON object'),
])
def test_wrapper_refuses_settings_that_do_not_fit(tmp_path, capsys, settings, fragment):
    path = tmp_path / 's.json'
    path.write_text(json.dumps(settings))
    assert hc.main([str(path)]) == 1
    assert fragment in capsys.readouterr().err


def test_wrapper_default_program_timeout_fits_an_old_settings_file(tmp_path):
    path = tmp_path / 's.json'
    path.write_text(json.dumps({'program': '/bin/true', 'node_name': 'n', 'timeout': 45}))
    settings = hc.load_settings(str(path))
    assert (settings['timeout'], settings['program_timeout']) == (45, 34)


# ---------------------------------------------------------------------------------------------
# The node health program, assembled the way the role installs it.

def _assemble(root, name):
    package = os.path.join(str(root), name)
    os.makedirs(package)
    with open(os.path.join(REPO, 'roles', 'health_check', 'vars', 'main.yml')) as handle:
        names = yaml.safe_load(handle)['__health_check_modules']
    for module in names:
        shutil.copy(os.path.join(MODULE_UTILS, module), package)
    shutil.copy(CLI, os.path.join(package, 'cli.py'))
    with open(os.path.join(package, '__init__.py'), 'w'):
        pass
    return str(root)


@pytest.fixture(scope='module')
def lib(tmp_path_factory):
    return _assemble(tmp_path_factory.mktemp('healthlib'), 'gpucluster_health')


@pytest.fixture(scope='module')
def cli(tmp_path_factory):
    """The CLI module imported in this process (package name of its own: no clash with other tests)."""
    root = _assemble(tmp_path_factory.mktemp('healthlib_inproc'), 'hw_robust_gpucluster_health')
    sys.path.insert(0, root)
    try:
        module = importlib.import_module('hw_robust_gpucluster_health.cli')
    finally:
        sys.path.remove(root)
    return module


SMALL_XML = os.path.join(REPO, 'tests', 'unit', 'fixtures', 'gpu', 'two_gpus_v13_out_of_order.xml')


@pytest.fixture
def node(tmp_path, lib):
    """A node for the program: stand-in nvidia-smi, empty kernel log, empty PCI tree, a config."""
    (tmp_path / 'sys' / 'bus' / 'pci' / 'devices').mkdir(parents=True)
    smi = _script(tmp_path / 'nvidia-smi', 'cat "%s"\n' % SMALL_XML)
    log = tmp_path / 'kern.log'
    log.write_text('')
    config = tmp_path / 'health.json'
    config.write_text(json.dumps({'nvidia_smi_path': smi, 'expected_count': 2, 'kernel_log_path': str(log),
                                  'sysfs_root': str(tmp_path / 'sys')}))
    launcher = _script(tmp_path / 'gpucluster-health',
                       'exec %s -c "import sys; sys.path.insert(0, %r); from gpucluster_health.cli import main; '
                       'sys.exit(main())" --config %s "$@"\n' % (sys.executable, lib, config))

    def run(*args, **kwargs):
        proc = subprocess.run([launcher] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, check=False, timeout=kwargs.get('timeout', 30))
        return proc.returncode, proc.stdout, proc.stderr

    run.tmp = tmp_path
    run.smi = smi
    run.log = log
    run.config = config
    run.launcher = launcher
    return run


def _report(out):
    report = json.loads(out)
    assert set(report) == {'status', 'exit_code', 'host', 'timestamp', 'issues', 'checks_skipped', 'gpu'}
    return report


# Internal errors raised inside the checks: each must become unknown / exit 3 with the reason.
CLI_INTERNAL_ERRORS = [
    ('collect-valueerror', 'gpu_probe', 'collect', ValueError('invalid literal for int()'),
     'internal error: ValueError: invalid literal for int()'),
    ('collect-keyerror', 'gpu_probe', 'collect', KeyError('attached_gpus'), "internal error: KeyError: 'attached_gpus'"),
    ('collect-unicode', 'gpu_probe', 'collect', UnicodeDecodeError('utf-8', b'\xff', 0, 1, 'invalid start byte'),
     'internal error: UnicodeDecodeError'),
    ('collect-recursion', 'gpu_probe', 'collect', RecursionError('maximum recursion depth exceeded'),
     'internal error: RecursionError: maximum recursion depth exceeded'),
    ('collect-memory', 'gpu_probe', 'collect', MemoryError(), 'internal error: MemoryError'),
    ('collect-oserror', 'gpu_probe', 'collect', OSError(13, 'Permission denied'),
     'internal error: PermissionError: [Errno 13] Permission denied'),
    ('build-facts-typeerror', 'gpu_health', 'build_facts', TypeError("'NoneType' object is not iterable"),
     "internal error: TypeError: 'NoneType' object is not iterable"),
    ('build-facts-attributeerror', 'gpu_health', 'build_facts', AttributeError("'str' object has no attribute 'get'"),
     "internal error: AttributeError: 'str' object has no attribute 'get'"),
    ('exit-code-indexerror', 'gpu_health', 'exit_code', IndexError('list index out of range'),
     'internal error: IndexError: list index out of range'),
    ('prom-render-zerodivision', 'gpu_prom', 'render', ZeroDivisionError('division by zero'),
     'internal error: ZeroDivisionError: division by zero'),
]


@pytest.mark.parametrize('module, function, exc, fragment', [c[1:] for c in CLI_INTERNAL_ERRORS],
                         ids=[c[0] for c in CLI_INTERNAL_ERRORS])
@pytest.mark.parametrize('fmt', ['json', 'summary'])
def test_cli_internal_error_is_unknown(cli, node, monkeypatch, capsys, module, function, exc, fragment, fmt):
    def boom(*args, **kwargs):
        raise exc
    monkeypatch.setattr(getattr(cli, module), function, boom)
    textfile = node.tmp / 'textfile'
    textfile.mkdir()
    rc = cli.main(['--config', str(node.config), '--textfile', str(textfile), '--format', fmt])
    out, err = capsys.readouterr()
    assert rc == 3
    assert 'Traceback' in err  # kept for the journal
    if fmt == 'summary':
        assert out.startswith('gpucluster-health unknown: ' + fragment) and out.count('\n') == 1
    else:
        report = _report(out)
        assert (report['status'], report['exit_code'], report['gpu']) == ('unknown', 3, None)
        assert report['issues'][0]['check'] == 'program' and report['issues'][0]['severity'] == 'unknown'
        assert report['issues'][0]['message'].startswith(fragment)
        assert report['issues'][0]['message'].endswith('GPU health not determined')


def test_cli_internal_error_quiet_prints_nothing(cli, node, monkeypatch, capsys):
    monkeypatch.setattr(cli.gpu_probe, 'collect', lambda *a, **k: 1 // 0)
    assert cli.main(['--config', str(node.config), '--quiet']) == 3
    assert capsys.readouterr().out == ''


CLI_BAD_INPUT = [
    # id, extra arguments, config content (None: the node's), exit, status, reason fragment
    ('unknown-option', ['--bogus'], None, 3, 'unknown', 'bad command line: unrecognized arguments: --bogus'),
    ('count-not-a-number', ['--expected-count', 'two'], None, 3, 'unknown', "bad command line: argument --expected-count"),
    ('negative-run-timeout', ['--run-timeout', '-5'], None, 3, 'unknown', 'bad command line: --run-timeout must be >= 0'),
    ('negative-timeout', ['--timeout', '-1'], None, 3, 'unknown', 'bad command line: --timeout must be >= 0'),
    ('format-choice', ['--format', 'xml'], None, 3, 'unknown', "bad command line: argument --format"),
    ('config-unknown-key', [], {'expected_gpus': 2}, 3, 'unknown', 'unknown key(s) expected_gpus'),
    ('config-not-object', [], ['x'], 3, 'unknown', 'expected a JSON object'),
    ('config-bool-timeout', [], {'timeout': True}, 3, 'unknown', 'timeout must be a whole number >= 0'),
    ('config-string-run-timeout', [], {'run_timeout': '30'}, 3, 'unknown', 'run_timeout must be a whole number >= 0'),
    ('config-path-not-string', [], {'kernel_log_path': 5}, 3, 'unknown', 'kernel_log_path must be a path'),
    ('config-bad-threshold', [], {'thresholds': {'pcie_width_severity': 'loud'}}, 3, 'unknown', 'pcie_width_severity'),
    ('config-not-json', [], 'not json {', 3, 'unknown', 'cannot read config'),
    ('missing-explicit-config', ['--config', '/nonexistent/health.json'], None, 3, 'unknown', 'does not exist'),
    ('missing-textfile-dir', ['--textfile', '/nonexistent/dir'], None, 3, 'unknown', 'cannot write gpucluster_health.prom'),
]


@pytest.mark.parametrize('args, content, code, status, fragment', [c[1:] for c in CLI_BAD_INPUT],
                         ids=[c[0] for c in CLI_BAD_INPUT])
def test_cli_bad_input_is_unknown_with_reason(node, args, content, code, status, fragment):
    if content is not None:
        node.config.write_text(content if isinstance(content, str) else json.dumps(content))
    rc, out, err = node(*args)
    report = _report(out)
    assert (rc, report['status'], report['exit_code']) == (code, status, code)
    assert any(fragment in i['message'] for i in report['issues']), report['issues']
    assert 'Traceback' not in err


def test_cli_bad_command_line_summary_is_one_line(node):
    rc, out, err = node('--format', 'summary', '--expected-count', 'x')
    assert rc == 3
    assert out.startswith('gpucluster-health unknown: bad command line: argument --expected-count') and out.count('\n') == 1


def test_cli_help_still_works(node):
    rc, out, err = node('--help')
    assert rc == 0 and '--run-timeout' in out


def test_cli_hung_nvidia_smi_is_critical_and_its_group_killed(node):
    marker = '4343.%d' % os.getpid()
    _script(node.smi, 'sleep %s & sleep %s\n' % (marker, marker))
    started = time.monotonic()
    rc, out, err = node('--timeout', '1')
    report = _report(out)
    # Killed after its timeout: the stand-in would sleep for over an hour.
    assert time.monotonic() - started < 20
    assert (rc, report['status']) == (2, 'critical')
    driver = [i for i in report['issues'] if i['check'] == 'driver']
    assert driver[0]['message'] == ('nvidia-smi hung: no answer within 1s, its process group killed '
                                    '(a hung driver usually means a sick GPU)')
    deadline = time.monotonic() + 3
    while _alive_with('sleep ' + marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _alive_with('sleep ' + marker) == []


def test_cli_run_timeout_cuts_the_nvidia_smi_timeout(node):
    _script(node.smi, 'sleep 30\n')
    started = time.monotonic()
    rc, out, err = node('--timeout', '60', '--run-timeout', '4')
    # Cut to the run timeout's share, not the 60 s asked for (the stand-in sleeps 30 s).
    assert time.monotonic() - started < 20
    report = _report(out)
    assert (rc, report['status']) == (2, 'critical')
    assert [i['message'] for i in report['issues'] if i['check'] == 'driver'] == [
        'nvidia-smi hung: no answer within 2s, its process group killed (a hung driver usually means a sick GPU)']


def test_cli_kernel_log_fifo_is_refused_without_waiting(node):
    # A FIFO without a writer as the kernel log: it used to block the open until the run timeout made the
    # verdict unknown; it is now refused at once (not a regular file) and the Xid check is reported skipped.
    # (The run timeout passing outside nvidia-smi: robustness/test_gpu_robustness_round2.py.)
    fifo = node.tmp / 'kern.fifo'
    os.mkfifo(str(fifo))
    started = time.monotonic()
    rc, out, err = node('--kernel-log', str(fifo), '--run-timeout', '20')
    assert time.monotonic() - started < 10
    report = _report(out)
    assert (rc, report['status']) == (0, 'ok')
    assert 'xid' in report['checks_skipped']
    assert [i['message'] for i in report['issues']] == [
        'Xid check skipped: kernel log not readable (cannot read %s: not a regular file (a FIFO))' % fifo]


def test_cli_run_timeout_from_the_config(node):
    node.config.write_text(json.dumps(dict(json.loads(node.config.read_text()), run_timeout=3, timeout=60)))
    _script(node.smi, 'sleep 30\n')
    rc, out, err = node()
    assert rc == 2 and 'nvidia-smi hung: no answer within 1s' in out


def test_cli_non_utf8_nvidia_smi_stderr_is_not_a_traceback(node):
    _script(node.smi, "printf '\\377\\376 driver error' >&2; exit 9\n")
    rc, out, err = node()
    report = _report(out)
    assert rc == report['exit_code'] and report['status'] in ('critical', 'unknown')
    assert 'Traceback' not in err


# ---------------------------------------------------------------------------------------------
# The wrapper deciding on the REAL program's output (recordings replayed by a stand-in nvidia-smi).

XML = os.path.join('01_nvidia_smi_xml', 'telegraf__dual_a5000-v13.xml')
KLOG = '05_xid_kernel_log'
XID79 = os.path.join(KLOG, '_extracted_from_docs', 'gpud-docs__xid79_fallen-off-bus_sxid20034.log')
XID94 = os.path.join(KLOG, '_extracted_from_docs', 'imbue__docstring_xid94_xid64_row-remapper.log')
XID13 = os.path.join(KLOG, '_extracted_from_docs', 'gpud-docs__xid13_xid109_xid31_ctime.log')
FAILED = os.path.join('03_nvidia_smi_text', '_extracted_from_docs',
                      'gcp-computegpu-pr18__nvidia-smi_FAILED_couldnt-communicate_after-kernel-upgrade.txt')
# A crashing program named like an Xid line, mapped from a file named like one (user-chosen text).
SEGV = ('NVRM: Xid 79[4242]: segfault at 0 ip 0000556b8e2a1149 sp 00007ffc5d3b0e40 error 4 in '
        'NVRM: Xid (PCI:0000:81:00): 79, pid=4242, name=x[556b8e2a1000+1000] likely on CPU 3 (core 3, socket 0)')


def _kernel_lines(fixtures, relpath, pick):
    """Lines of a recorded kernel log that contain ``pick``, without their time stamp."""
    lines = []
    with io.open(os.path.join(fixtures, relpath), encoding='utf-8', errors='replace') as handle:
        for line in handle:
            if pick in line:
                lines.append(line.split('] ', 1)[1].rstrip('\n') if line.startswith('[') else line.rstrip('\n'))
    assert lines, (relpath, pick)
    return lines


def _stamped(messages):
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%S.%f+00:00')
    return ''.join('%s node2 kernel: %s\n' % (stamp, m) for m in messages)


REAL_CASES = [
    # id, nvidia-smi (recording path, or ('fail', text path, rc), or 'hang'), expected GPUs,
    # kernel-log messages ((path, pick) or literal list), node state, program exit, outcome, reason fragment
    ('ok-idle', XML, 2, [], IDLE, 0, 'no drain', None),
    ('ok-resumes-ours', XML, 2, [], OURS, 0, 'resume', None),
    ('ok-keeps-operator', XML, 2, [], OPERATOR, 0, 'keep', None),
    ('ok-keeps-operator-down', XML, 2, [], DOWN_OPERATOR, 0, 'no drain', None),
    ('ok-resumes-ours-before', XML, 2, [], OURS_BEFORE_XID, 0, 'resume', None),
    ('missing-gpu-drains', XML, 4, [], IDLE, 2, 'drain', ': 2 GPU(s) visible to the driver, 4 expected'),
    ('missing-gpu-keeps-operator', XML, 4, [], OPERATOR, 2, 'keep', None),
    ('missing-gpu-keeps-operator-down', XML, 4, [], DOWN_OPERATOR, 2, 'no drain', None),
    ('xid79-drains', XML, 2, (XID79, 'Xid (PCI:0000:91:00): 79'), IDLE, 2, 'drain', 'Xid 79'),
    ('xid79-redrains-ours', XML, 2, (XID79, 'Xid (PCI:0000:91:00): 79'), OURS, 2, 'drain', 'Xid 79'),
    ('xid64-drains', XML, 2, (XID94, 'Xid (PCI:0000:0f:00): 64'), IDLE, 2, 'drain', 'Xid 64'),
    ('xid94-warning-keeps-ours', XML, 2, (XID94, 'Xid (PCI:0000:0f:00): 94'), OURS, 1, 'keep', None),
    ('xid94-warning-no-drain', XML, 2, (XID94, 'Xid (PCI:0000:0f:00): 94'), IDLE, 1, 'no drain', None),
    ('xid13-application-resumes', XML, 2, (XID13, 'Xid (PCI:0000:cb:00): 13'), OURS, 0, 'resume', None),
    ('segfault-line-no-drain', XML, 2, [SEGV], IDLE, 0, 'no drain', None),
    ('segfault-line-resumes-ours', XML, 2, [SEGV], OURS, 0, 'resume', None),
    ('driver-failed-drains', ('fail', FAILED, 9), 2, [], IDLE, 2, 'drain', 'nvidia-smi failed'),
    ('hung-smi-drains', 'hang', 2, [], IDLE, 2, 'drain', ': nvidia-smi hung: no answer within'),
    ('hung-smi-keeps-operator-down', 'hang', 2, [], DOWN_OPERATOR, 2, 'no drain', None),
    ('hung-smi-keeps-operator', 'hang', 2, [], OPERATOR, 2, 'keep', None),
    ('bad-config-unknown-keeps', XML, 'bad-config', [], OURS, 3, 'keep', None),
]


@pytest.mark.parametrize('smi, expected, klog, node_state, code, outcome, reason', [c[1:] for c in REAL_CASES],
                         ids=[c[0] for c in REAL_CASES])
def test_wrapper_on_the_real_program(real_fixtures_dir, node, cluster, smi, expected, klog, node_state, code,
                                     outcome, reason):
    if smi == 'hang':
        _script(node.smi, 'sleep 30\n')
    elif isinstance(smi, tuple):
        _script(node.smi, 'cat "%s" >&2; exit %d\n' % (os.path.join(real_fixtures_dir, smi[1]), smi[2]))
    else:
        _script(node.smi, 'cat "%s"\n' % os.path.join(real_fixtures_dir, smi))
    config = json.loads(node.config.read_text())
    if expected == 'bad-config':
        config['expected_gpus'] = 2
    else:
        config['expected_count'] = expected
    # The program's nvidia-smi timeout fits in the run timeout the wrapper gives it (15 s): 1 s where
    # nvidia-smi hangs, 10 s elsewhere, so that a loaded test machine never turns an answer into a hang.
    config['timeout'] = 1 if smi == 'hang' else 10
    node.config.write_text(json.dumps(config))
    messages = _kernel_lines(real_fixtures_dir, *klog) if isinstance(klog, tuple) else klog
    node.log.write_text(_stamped(messages))
    # The program's own verdict first, then the wrapper's decision on it.
    rc, out, err = node('--run-timeout', '15')
    assert rc == code and _report(out)['exit_code'] == code, out + err
    settings = cluster(None, node_state, timeout=18, program_timeout=15)
    data = json.loads(open(settings).read())
    data['program'] = node.launcher
    with open(settings, 'w') as handle:
        json.dump(data, handle)
    assert hc.main([settings]) == 0
    update = cluster.update()
    assert outcome_of(update, node_state) == outcome
    if outcome == 'drain':
        assert update.startswith(DRAIN + 'gpucluster/health#') and reason in update, update
        assert scheduler.parse_reason(update[len(DRAIN):]).source == 'health', update
        assert len(update) - len(DRAIN) <= slurm_health.REASON_MAX
    elif outcome == 'resume':
        assert update == RESUME
    else:
        assert update is None


# ---------------------------------------------------------------------------------------------
# The role preflights refuse timeouts that do not fit, before anything changes (local, --check).

ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), 'ansible-playbook')
_HOSTS = """all:
  hosts:
    node1:
      ansible_connection: local
      ansible_python_interpreter: %s
      # pam_slurm_adopt (on by default) needs the connecting account in an exempt group: its own primary one.
      slurm_pam_adopt_exempt_groups: [%s]
  children:
    slurm_controller:
      hosts:
        node1:
    slurm_compute:
      hosts:
        node1:
""" % (sys.executable, json.dumps(grp.getgrgid(os.getgid()).gr_name))
_PLAY = """- name: Run one role's preflight
  hosts: all
  gather_facts: false
  tasks:
    - name: Preflight of the role under test
      ansible.builtin.include_role:
        name: "gpucluster.core.{{ role_under_test }}"
        tasks_from: preflight
"""
SLURM_TASK = ('TASK [gpucluster.core.slurm : Check this host\'s part, pam_slurm_adopt, the limits, names, plugins, timeouts and GPU usage'
              ' settings (every failing check is listed)]')
HEALTH_TASK = ("TASK [gpucluster.core.health_check : Check the health_check inputs, the health program's timeouts, RDMA "
               "ports, thresholds and the node's Python (every failing check is listed)]")

PREFLIGHT_CASES = [
    ('slurm-budget-not-below-interval',
     {'role_under_test': 'slurm', 'slurm_health_check_timeout': 45, 'slurm_health_check_interval': 45},
     SLURM_TASK, 'slurm_health_check_timeout = 45 is not accepted with slurm_health_check_interval = 45: the '
                 "wrapper's budget must be less than the interval between its runs."),
    ('slurm-program-timeout-fills-the-budget',
     {'role_under_test': 'slurm', 'slurm_health_check_timeout': 45, 'slurm_health_check_program_timeout': 44},
     SLURM_TASK, 'slurm_health_check_program_timeout = 44 is not accepted with slurm_health_check_timeout = 45: '
                 'at least 1 and at least 2 s less'),
    ('slurm-nvidia-smi-timeout-above-program-timeout',
     {'role_under_test': 'slurm', 'health_check_timeout': 60},
     SLURM_TASK, 'health_check_timeout = 60 (seconds nvidia-smi may take) is not accepted with '
                 'slurm_health_check_program_timeout = 35: it must be at least 2 s less'),
    ('health-check-old-default-60s',
     {'role_under_test': 'health_check', 'health_check_timeout': 60},
     HEALTH_TASK, 'health_check_timeout = 60 (seconds nvidia-smi may take) is not accepted with '
                  'health_check_run_timeout = 40 (seconds the whole run may take)'),
    ('health-check-against-slurm-program-timeout',
     {'role_under_test': 'health_check', 'health_check_timeout': 34, 'slurm_health_check_program_timeout': 35},
     HEALTH_TASK, 'health_check_timeout = 34 (seconds nvidia-smi may take) is not accepted with '
                  'slurm_health_check_program_timeout = 35'),
    # The node's Python is judged in the same task, after the inputs: a program that prints nothing and fails.
    ('health-check-python-not-runnable',
     {'role_under_test': 'health_check', 'health_check_python': '/bin/false'},
     HEALTH_TASK, 'health_check_python=/bin/false must be Python 3.9 or newer on the node (got exit 1).'),
    ('health-check-python-missing',
     {'role_under_test': 'health_check', 'health_check_python': '/nonexistent/python3'},
     HEALTH_TASK, 'health_check_python=/nonexistent/python3 must be Python 3.9 or newer on the node (got exit 2: Error executing command.)'),
]


def _preflight(tmp_path, extra_vars):
    (tmp_path / 'hosts.yml').write_text(_HOSTS)
    (tmp_path / 'play.yml').write_text(_PLAY)
    (tmp_path / 'vars.json').write_text(json.dumps(extra_vars))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, 'collections'), ANSIBLE_NOCOLOR='1',
               ANSIBLE_RETRY_FILES_ENABLED='0', ANSIBLE_LOCAL_TEMP=str(tmp_path / 'tmp'))
    proc = subprocess.run([ANSIBLE_PLAYBOOK, '-i', 'hosts.yml', 'play.yml', '--check', '-e', '@vars.json'],
                          cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, check=False, timeout=300)
    return proc.returncode, proc.stdout


@pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason='ansible-playbook not beside this python')
@pytest.mark.parametrize('extra_vars, task, message', [c[1:] for c in PREFLIGHT_CASES],
                         ids=[c[0] for c in PREFLIGHT_CASES])
def test_preflight_refuses_timeouts_that_do_not_fit(tmp_path, extra_vars, task, message):
    rc, out = _preflight(tmp_path, extra_vars)
    assert rc == 2, out
    tasks = [line for line in out.splitlines() if line.startswith('TASK [')]
    assert tasks[-1].startswith(task), out
    assert message in ' '.join(out.split()), out


@pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason='ansible-playbook not beside this python')
@pytest.mark.parametrize('extra_vars, task', [
    ({'role_under_test': 'slurm', 'slurm_health_check_program': '/bin/true'}, SLURM_TASK),
    ({'role_under_test': 'slurm', 'slurm_health_check_program': '/bin/true', 'slurm_health_check_interval': 10,
      'slurm_health_check_timeout': 8, 'slurm_health_check_program_timeout': 5, 'health_check_timeout': 3},
     SLURM_TASK),
    ({'role_under_test': 'health_check'}, HEALTH_TASK),
], ids=['slurm-defaults', 'slurm-molecule-values', 'health-check-defaults'])
def test_preflight_accepts_timeouts_that_fit(tmp_path, extra_vars, task):
    _rc, out = _preflight(tmp_path, extra_vars)
    lines = out.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith(task)]
    assert starts, out
    after = lines[starts[0] + 1:]
    assert [line for line in after if line.startswith(('ok:', 'fatal:', 'failed:'))][0].startswith('ok:'), out
