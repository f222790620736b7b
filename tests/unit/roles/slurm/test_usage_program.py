# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The slurm role's usage program (files/gpucluster_usage_cli.py in gpucluster-slurm-usage.pyz), built as the role
builds it: the Prolog/Epilog records, the controller's metrics run and gpucluster-jobstats against a Prometheus
stand-in (an HTTP server in this process answering the program's queries)."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import base64
import json
import os
import re
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from urllib.parse import parse_qs

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', '..', '..'))
import node_programs  # noqa: E402  pylint: disable=wrong-import-position

REPO = node_programs.REPO
ROLE = os.path.join(REPO, 'roles', 'slurm')
FIXTURES = os.path.join(REPO, 'tests', 'unit', 'fixtures', 'usage')
ENV = {'SLURM_JOB_ID': '4211', 'SLURM_JOB_USER': 'alice', 'SLURM_JOB_ACCOUNT': 'research',
       'SLURM_JOB_PARTITION': 'gpu', 'SLURM_JOB_GPUS': '0,1'}


@pytest.fixture(scope='module')
def archive(tmp_path_factory):
    return node_programs.build('usage', tmp_path_factory.mktemp('usage'))


def _run(archive, *args, **kwargs):  # pylint: disable=redefined-outer-name
    env = dict(os.environ)
    env.update(kwargs.pop('env', {}))
    proc = subprocess.run([sys.executable, archive] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, check=False, env=env, **kwargs)
    return proc.returncode, proc.stdout, proc.stderr


def test_no_command_is_a_usage_error(archive):  # pylint: disable=redefined-outer-name
    rc, _out, err = _run(archive)
    assert rc == 2 and 'give a command: prolog, epilog, metrics, jobstats' in err


# Prolog / Epilog ----------------------------------------------------------------------------------

def test_prolog_records_and_epilog_forgets(archive, tmp_path):  # pylint: disable=redefined-outer-name
    records = str(tmp_path / 'gpu-jobs')
    assert _run(archive, 'prolog', '--records-dir', records, env=ENV)[0] == 0
    assert sorted(os.listdir(records)) == ['gpu0.json', 'gpu1.json']
    with open(os.path.join(records, 'gpu1.json')) as handle:
        body = json.load(handle)
    assert {k: body[k] for k in ('job_id', 'user', 'account', 'partition', 'gpu')} == {
        'job_id': '4211', 'user': 'alice', 'account': 'research', 'partition': 'gpu', 'gpu': 1}
    assert _run(archive, 'epilog', '--records-dir', records, env={'SLURM_JOB_ID': '9999'})[0] == 0
    assert len(os.listdir(records)) == 2
    assert _run(archive, 'epilog', '--records-dir', records, env={'SLURM_JOB_ID': '4211'})[0] == 0
    assert os.listdir(records) == []


@pytest.mark.parametrize('env, message', [
    (dict(ENV, SLURM_JOB_ID='x'), "prolog: SLURM_JOB_ID='x' is not a Slurm job id"),
    (dict(ENV, SLURM_JOB_GPUS='0,zero'), "prolog: SLURM_JOB_GPUS='0,zero' is not a list of GPU ids"),
])
def test_prolog_never_fails_the_job(archive, tmp_path, env, message):  # pylint: disable=redefined-outer-name
    records = tmp_path / 'gpu-jobs'
    rc, _out, err = _run(archive, 'prolog', '--records-dir', str(records), env=env)
    assert rc == 0 and message in err and 'the GPUs of this job are not labelled with it' in err
    assert not records.exists()


def test_prolog_that_cannot_write_still_exits_0(archive, tmp_path):  # pylint: disable=redefined-outer-name
    (tmp_path / 'blocked').write_text('a file where the directory should be')
    rc, _out, err = _run(archive, 'prolog', '--records-dir', str(tmp_path / 'blocked' / 'gpu-jobs'), env=ENV)
    assert rc == 0 and 'cannot create' in err


def test_prolog_without_gpus_writes_nothing(archive, tmp_path):  # pylint: disable=redefined-outer-name
    env = dict(ENV, SLURM_JOB_GPUS='')
    assert _run(archive, 'prolog', '--records-dir', str(tmp_path / 'r'), env=env) == (0, '', '')
    assert not (tmp_path / 'r').exists()


def _render_record_script(kind, python, archive_path, timeout):  # pylint: disable=redefined-outer-name
    with open(os.path.join(ROLE, 'templates', 'etc', 'slurm', 'gpucluster-gpu-jobs.j2')) as handle:
        text = handle.read()
    command = [line for line in text.splitlines() if line.startswith('/usr/bin/timeout')][0]
    for name, value in (('slurm_gpu_job_records_timeout', str(timeout)), ('__slurm_python', python),
                        ('__slurm_usage_archive', archive_path), ('__slurm_gpu_jobs_kind', kind)):
        command = command.replace('{{ %s }}' % name, value)
    assert '{{' not in command
    return '#!/bin/sh\n%s\nexit 0\n' % command


def test_the_record_script_is_bounded_and_always_exits_0(tmp_path):
    """A hung program (the stand-in sleeps) is killed at the script's timeout; the job is not failed."""
    if not os.path.exists('/usr/bin/timeout'):
        pytest.skip('coreutils timeout is not at /usr/bin/timeout here')
    hang = tmp_path / 'python'
    hang.write_text('#!/bin/sh\nsleep 30\nexit 7\n')
    hang.chmod(0o755)
    script = tmp_path / '50-gpucluster-gpu-jobs'
    script.write_text(_render_record_script('prolog', str(hang), '/nonexistent.pyz', 1))
    script.chmod(0o755)
    start = time.monotonic()
    proc = subprocess.run([str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False, timeout=20)
    assert proc.returncode == 0 and time.monotonic() - start < 10


def test_the_record_script_runs_the_archive(archive, tmp_path):  # pylint: disable=redefined-outer-name
    records = tmp_path / 'gpu-jobs'
    script = tmp_path / 'prolog'
    script.write_text(_render_record_script('prolog', sys.executable, archive, 10)
                      .replace(' prolog <', ' prolog --records-dir %s <' % records))
    script.chmod(0o755)
    proc = subprocess.run([str(script)], env=dict(os.environ, **ENV), check=False, timeout=60)
    assert proc.returncode == 0 and sorted(os.listdir(str(records))) == ['gpu0.json', 'gpu1.json']


# metrics ------------------------------------------------------------------------------------------

def _fake_command(tmp_path, name, body):
    path = tmp_path / name
    path.write_text('#!/bin/sh\necho "$@" > "%s.args"\n%s\n' % (path, body))
    path.chmod(0o755)
    return str(path)


def _commands(tmp_path, **bodies):
    out = []
    for name in ('squeue', 'sinfo', 'sshare'):
        body = bodies.get(name, 'cat "%s"' % os.path.join(FIXTURES, name + '.txt'))
        out += ['--' + name, _fake_command(tmp_path, name, body)]
    return out


def test_metrics_run_writes_the_textfile(archive, tmp_path):  # pylint: disable=redefined-outer-name
    target = tmp_path / 'textfile'
    target.mkdir()
    rc, out, err = _run(archive, 'metrics', '--textfile', str(target), *_commands(tmp_path))
    assert (rc, out, err) == (0, '', '')
    text = (target / 'gpucluster_slurm.prom').read_text()
    assert 'gpucluster_slurm_scrape_failed{command="sshare"} 0\n' in text
    assert 'gpucluster_slurm_pending_jobs_fit_idle_gpus{partition="gpu"} 1\n' in text
    assert (tmp_path / 'squeue.args').read_text().startswith('--all --array --noheader --states=PENDING,RUNNING')
    assert [p.name for p in target.iterdir()] == ['gpucluster_slurm.prom']


def test_metrics_without_sshare(archive, tmp_path):  # pylint: disable=redefined-outer-name
    rc, out, _err = _run(archive, 'metrics', '--stdout', '--no-sshare', *_commands(tmp_path))
    assert rc == 0 and 'command="sshare"' not in out and not (tmp_path / 'sshare.args').exists()


def test_a_failing_and_a_hanging_command_are_gauges_within_the_run_timeout(archive, tmp_path):  # pylint: disable=redefined-outer-name
    commands = _commands(tmp_path, sinfo='sleep 60', sshare='echo "sshare: error: Problem talking to the database" >&2; exit 1')
    start = time.monotonic()
    rc, out, err = _run(archive, 'metrics', '--stdout', '--run-timeout', '7', *commands, timeout=60)
    assert rc == 0 and time.monotonic() - start < 20
    assert 'gpucluster_slurm_scrape_failed{command="sinfo"} 1\n' in out
    assert 'gpucluster_slurm_scrape_failed{command="sshare"} 1\n' in out
    assert 'gpucluster_slurm_jobs{' in out and 'gpucluster_slurm_node_gpus{' not in out
    assert 'sinfo failed: no answer within' in err
    assert 'sshare failed: exit 1: sshare: error: Problem talking to the database' in err


def test_metrics_that_cannot_be_written_fail_the_unit(archive, tmp_path):  # pylint: disable=redefined-outer-name
    rc, _out, err = _run(archive, 'metrics', '--textfile', str(tmp_path / 'absent'), *_commands(tmp_path))
    assert rc == 3 and 'cannot write' in err


@pytest.mark.parametrize('args, message', [
    ([], 'give --textfile DIR or --stdout'),
    (['--stdout', '--run-timeout', '1'], '--run-timeout must be 2 s or more'),
    (['--stdout', '--run-timeout', 'x'], "invalid int value: 'x'"),
])
def test_metrics_usage_errors(archive, args, message):  # pylint: disable=redefined-outer-name
    rc, _out, err = _run(archive, 'metrics', *args)
    assert rc == 2 and message in err


# jobstats -----------------------------------------------------------------------------------------

def _matrix(series):
    return {'status': 'success', 'data': {'resultType': 'matrix', 'result': [
        {'metric': labels, 'values': [[1764696400.0 + 60 * i, str(v)] for i, v in enumerate(values)]}
        for labels, values in series]}}


def _labels(gpu, **extra):
    labels = {'instance': 'node2', 'job': 'node', 'gpu': str(gpu), 'uuid': 'GPU-12345678-aaaa-bbbb-cccc-0123456789%s'
              % ('ab' if gpu == 0 else 'cd')}
    labels.update(extra)
    return labels


def _prometheus_answer(query):
    """What the lab's Prometheus answers for job 42 (node2, GPUs 0 and 1; GPU 1 busy), nothing for other jobs."""
    if 'job_id="42"' not in query:
        return _matrix([])
    job = dict(job_id='42', user='alice', account='research', partition='gpu')
    if query.startswith('timestamp('):
        return _matrix([(_labels(0, **job), [1764696400.0, 1764700000.0]), (_labels(1, **job), [1764696400.0, 1764700000.0])])
    if query.startswith('gpucluster_gpu_utilization_percent'):
        return _matrix([(_labels(0), [0, 0]), (_labels(1), [74, 100])])
    return _matrix([(_labels(0), [0]), (_labels(1), [24 * 1024.0 ** 3 if 'total' in query else 2 * 1024.0 ** 3])])


@pytest.fixture
def prometheus():
    seen = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802  pylint: disable=invalid-name
            body = parse_qs(self.rfile.read(int(self.headers['Content-Length'])).decode('ascii'))
            seen.append((self.path, body, self.headers.get('Authorization')))
            expected = 'Basic ' + base64.b64encode(b'gpucluster-scrape:s3cr3t pass').decode('ascii')
            if self.headers.get('Authorization') != expected:
                self.send_response(401)
                self.end_headers()
                return
            data = json.dumps(_prometheus_answer(body['query'][0])).encode('utf-8')
            self.send_response(200)
            self.send_header('Content-Type', 'application/json')
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):  # pylint: disable=arguments-differ
            pass

    server = HTTPServer(('127.0.0.1', 0), Handler)
    thread = threading.Thread(target=server.serve_forever)
    thread.daemon = True
    thread.start()
    server.url = 'http://127.0.0.1:%d' % server.server_address[1]
    server.seen = seen
    yield server
    server.shutdown()
    server.server_close()


def _config(tmp_path, url, password='s3cr3t pass\n'):
    secret = tmp_path / 'scrape.password'
    secret.write_text(password)
    config = tmp_path / 'jobstats.json'
    config.write_text(json.dumps({'_managed': 'test', 'prometheus_url': url, 'ca_file': None,
                                  'user': 'gpucluster-scrape', 'password_file': str(secret), 'timeout': 10}))
    return str(config)


def test_jobstats_prints_the_gpus_and_the_verdict(archive, tmp_path, prometheus):  # pylint: disable=redefined-outer-name
    rc, out, err = _run(archive, 'jobstats', '42', '--config', _config(tmp_path, prometheus.url), timeout=60)
    assert (rc, err) == (0, '')
    lines = out.splitlines()
    assert lines[0] == ('job 42: user alice, account research, partition gpu; 2 GPUs on node2, seen 2025-12-02 '
                        '17:26:40 UTC to 2025-12-02 18:26:40 UTC')
    assert lines[1].split() == ['NODE', 'GPU', 'UUID', 'UTIL', 'MEAN', 'UTIL', 'PEAK', 'MEM', 'MEAN', 'MEM', 'PEAK',
                                'MEM', 'TOTAL']
    assert lines[2].split()[:5] == ['node2', '0', 'GPU-12345678-aaaa-bbbb-cccc-0123456789ab', '0', '%']
    assert lines[-1] == 'verdict: 2 GPUs held, 1 used: request fewer'
    # Located over the look-back window at "now", the figures over the job's span at its last sighting.
    # Where and when over the last week ending now, then the figures from the first to the last sighting.
    seen = [(path, body['query'][0], body['start'][0], body['end'][0], body['step'][0]) for path, body, _a in prometheus.seen]
    assert len(seen) == 4 and set(path for path, _q, _s, _e, _st in seen) == {'/api/v1/query_range'}
    assert seen[0][1] == 'timestamp(gpucluster_gpu_job_info{job_id="42"})' and seen[0][4] == '60.480'
    assert float(seen[0][3]) - float(seen[0][2]) == pytest.approx(604800)
    assert set((start, end, step) for _p, _q, start, end, step in seen[1:]) == {('1764696400.000', '1764700000.000', '15.000')}
    assert 'gpucluster_gpu_utilization_percent * on(instance, gpu) group_left() gpucluster_gpu_job_info{job_id="42"}' \
        in [query for _p, query, _s, _e, _st in seen]


def test_jobstats_json(archive, tmp_path, prometheus):  # pylint: disable=redefined-outer-name
    rc, out, _err = _run(archive, 'jobstats', '42', '--format', 'json', '--since', '2h',
                         '--config', _config(tmp_path, prometheus.url), timeout=60)
    data = json.loads(out)
    assert rc == 0 and data['verdict'] == 'fewer' and data['gpus_held'] == 2
    assert [(g['instance'], g['gpu'], g['util_mean']) for g in data['gpus']] == [('node2', '0', 0.0), ('node2', '1', 87.0)]
    assert data['first_seen'] == 1764696400.0 and data['last_seen'] == 1764700000.0


def test_jobstats_refuses_a_job_it_cannot_find_and_says_why(archive, tmp_path, prometheus):  # pylint: disable=redefined-outer-name
    rc, out, err = _run(archive, 'jobstats', '43', '--config', _config(tmp_path, prometheus.url), timeout=60)
    assert (rc, out) == (1, '')
    assert 'job 43: no GPU held by it was seen in Prometheus in the last 7d' in err


def test_jobstats_wrong_password_is_named_never_shown(archive, tmp_path, prometheus):  # pylint: disable=redefined-outer-name
    rc, _out, err = _run(archive, 'jobstats', '42', '--config', _config(tmp_path, prometheus.url, 'wrong'), timeout=60)
    assert rc == 3 and 'refused the credentials of user gpucluster-scrape (HTTP 401)' in err and 'wrong' not in err


def test_jobstats_unreachable_prometheus(archive, tmp_path):  # pylint: disable=redefined-outer-name
    rc, _out, err = _run(archive, 'jobstats', '42', '--config', _config(tmp_path, 'http://127.0.0.1:9'), timeout=60)
    assert rc == 3 and err.startswith('gpucluster-jobstats: cannot ask Prometheus at http://127.0.0.1:9:')


@pytest.mark.parametrize('args, message', [
    (['4211_3'], "'4211_3' is not a Slurm job id"),
    (['42', '--since', 'ever'], "'ever' is not a duration"),
    (['42', '--format', 'yaml'], "invalid choice: 'yaml'"),
    (['42', '--config', '/nonexistent.json'], 'the configuration /nonexistent.json does not exist'),
    (['42', '--url', 'ftp://x'], 'no Prometheus URL'),
    (['42', '--url', 'http://127.0.0.1:9', '--password-file', '/nonexistent'], 'the password file /nonexistent does not exist'),
])
def test_jobstats_usage_errors(archive, args, message):  # pylint: disable=redefined-outer-name
    rc, out, err = _run(archive, 'jobstats', *args)
    assert (rc, out) == (2, '') and message in err


def test_jobstats_configuration_with_unknown_keys(archive, tmp_path):  # pylint: disable=redefined-outer-name
    config = tmp_path / 'jobstats.json'
    config.write_text(json.dumps({'prometheus_url': 'http://x', 'passwd': 'no'}))
    rc, _out, err = _run(archive, 'jobstats', '42', '--config', str(config))
    assert rc == 2 and 'unknown key(s) passwd' in err


# The launchers ------------------------------------------------------------------------------------

@pytest.mark.parametrize('template, command', [
    ('usr/local/bin/gpucluster-jobstats.j2', 'jobstats'), ('usr/local/sbin/gpucluster-slurm-metrics.j2', 'metrics')])
def test_launchers_run_their_command_of_the_archive(archive, tmp_path, template, command):  # pylint: disable=redefined-outer-name
    with open(os.path.join(ROLE, 'templates', template)) as handle:
        text = handle.read()
    body = text.split('import sys\n', 1)[1]
    assert "main(['%s'] + sys.argv[1:])" % command in body
    launcher = tmp_path / 'launcher'
    launcher.write_text('import sys\n' + body.replace('{{ __slurm_usage_archive | to_json }}', json.dumps(archive)))
    proc = subprocess.run([sys.executable, str(launcher), '--help'], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, check=False)
    assert proc.returncode == 0 and re.search(r'usage: gpucluster-(jobstats|slurm-metrics)', proc.stdout)


def test_each_command_gets_a_fair_share_of_what_is_left(tmp_path):
    cli = node_programs.import_front_end('usage', tmp_path)
    now = [100.0]
    given = []

    def runner(argv, timeout):
        given.append((argv[0], round(timeout, 3)))
        now[0] += timeout if argv[0] == 'hangs' else 0.5  # the hung one uses its whole share
        return (None, '', '') if argv[0] == 'hangs' else (0, 'x', '')

    results = cli.collect([('squeue', ['fast']), ('sinfo', ['hangs']), ('sshare', ['fast'])], 31, runner=runner,
                          clock=lambda: now[0])
    # 30 s after the reserve: a third to squeue (it takes 0.5 s), half of the 29.5 s left to sinfo, the rest to sshare.
    assert given == [('fast', 10.0), ('hangs', 14.75), ('fast', 14.75)]
    assert [results[c]['ok'] for c in ('squeue', 'sinfo', 'sshare')] == [True, False, True]
    assert results['sinfo']['reason'] == 'no answer within 15 s (killed)'
