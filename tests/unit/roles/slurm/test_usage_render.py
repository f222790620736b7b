# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The slurm role's GPU usage parts rendered with Ansible's own templar: the preflight's refusals, the Prometheus URL
gpucluster-jobstats asks, the Prolog/Epilog scripts, the metrics units and slurm.conf's Prolog/Epilog lines; and the
health program's job source default."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import subprocess
import sys

import pytest
import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
ROLE = os.path.join(REPO, 'roles', 'slurm')


def _load(*parts, role=ROLE):
    with open(os.path.join(role, *parts)) as handle:
        return yaml.safe_load(handle)


def _text(*parts):
    with open(os.path.join(ROLE, *parts)) as handle:
        return handle.read()


def _variables(**extra):
    variables = dict(_load('defaults', 'main.yml'))
    variables.update(_load('vars', 'main.yml'))
    variables.update(_load('vars', 'Debian.yml'))
    variables.update({'ansible_managed': 'Ansible managed', 'inventory_hostname': 'node1', 'groups': {'monitoring': ['mon1']},
                      '__slurm_is_compute': True, '__slurm_is_controller': True, 'ansible_facts': {'architecture': 'x86_64'},
                      'monitoring_scrape_user': 'gpucluster-scrape'})
    variables.update(extra)
    return variables


# The preflight uses the collection's filters, found through Ansible's collection loader; installed in this process
# it would take over the ansible_collections package the other tests imported, so that rendering runs in a child.
_RENDER = r'''
import json, sys
from ansible.plugins.loader import init_plugin_loader
init_plugin_loader([sys.argv[1]])
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

def trust(value):
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return dict((k, trust(v)) for k, v in value.items())
    if isinstance(value, list):
        return [trust(v) for v in value]
    return value

print(json.dumps([Templar(loader=DataLoader(), variables=trust(v)).template(trust(e)) for v, e in json.load(sys.stdin)]))
'''


def _render_with_filters(jobs):
    proc = subprocess.run([sys.executable, '-c', _RENDER, os.path.join(REPO, 'collections')], input=json.dumps(jobs),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


PREFLIGHT_CASES = [
    ({'slurm_conf_extra': {'Prolog': '/site/prolog'}},
     'slurm_conf_extra: Prolog is set by the role while slurm_gpu_job_records is on (Prolog=/etc/slurm/prolog.d/*, '
     'Epilog=/etc/slurm/epilog.d/*: Slurm runs every program there): put your programs in those directories (the role '
     'leaves them alone) and remove Prolog from slurm_conf_extra, or set slurm_gpu_job_records: false'),
    ({'slurm_conf_extra': {'epilog': '/x', 'Prolog': '/y'}}, 'remove epilog and Prolog from slurm_conf_extra'),
    ({'slurm_gpu_job_records_timeout': 10}, 'slurm_gpu_job_records_timeout'),
    ({'slurm_gpu_job_records_timeout': 0}, 'slurm_gpu_job_records_timeout'),
    ({'slurm_usage_metrics_timeout': 4}, 'slurm_usage_metrics_timeout'),
    ({'slurm_usage_metrics_timeout': 301}, 'slurm_usage_metrics_timeout'),
    ({'slurm_usage_metrics_interval': '1 fortnight'}, 'slurm_usage_metrics_interval = "1 fortnight" is not accepted'),
    ({'slurm_usage_metrics_interval': '1min\nExecStart=/bin/evil'}, 'slurm_usage_metrics_interval'),
    ({'slurm_usage_metrics_textfile_dir': 'relative'}, 'slurm_usage_metrics_textfile_dir'),
    ({'slurm_jobstats_prometheus_url': 'https://mon1:9090 evil'}, 'slurm_jobstats_prometheus_url'),
    ({'slurm_jobstats_password_file': '/x y'}, 'slurm_jobstats_password_file'),
]
ACCEPTED_CASES = [
    {},
    {'slurm_conf_extra': {'MessageTimeout': 30}, 'slurm_gpu_job_records_timeout': 20},
    {'slurm_conf_extra': {'Prolog': '/site/prolog'}, 'slurm_gpu_job_records': False},
]


@pytest.fixture(scope='module')
def preflight_errors():
    task = [t for t in _load('tasks', 'preflight.yml') if '__slurm_usage_errors' in t.get('vars', {})][0]
    jobs = []
    for extra in [case for case, _fragment in PREFLIGHT_CASES] + ACCEPTED_CASES:
        variables = _variables(**extra)
        variables.update(task['vars'])
        jobs.append([variables, '{{ __slurm_usage_errors }}'])
    return _render_with_filters(jobs)


@pytest.mark.parametrize('index', range(len(PREFLIGHT_CASES)))
def test_the_preflight_refuses(preflight_errors, index):  # pylint: disable=redefined-outer-name
    fragment = PREFLIGHT_CASES[index][1]
    errors = preflight_errors[index]
    assert [e for e in errors if fragment in e], errors


@pytest.mark.parametrize('index', range(len(ACCEPTED_CASES)))
def test_the_preflight_accepts(preflight_errors, index):  # pylint: disable=redefined-outer-name
    # The defaults; a raised MessageTimeout admits a longer record timeout; a site's Prolog without the records.
    assert preflight_errors[len(PREFLIGHT_CASES) + index] == []


@pytest.mark.parametrize('extra, url', [
    ({}, 'https://mon1:9090'),
    ({'monitoring_tls': False, 'monitoring_prometheus_port': 9999}, 'http://mon1:9999'),
    ({'groups': {}}, 'https://localhost:9090'),
    ({'slurm_jobstats_prometheus_url': 'https://prometheus.example:443'}, 'https://prometheus.example:443'),
])
def test_the_prometheus_url_jobstats_asks(ansible_render, extra, url):
    assert ansible_render(_variables(**extra), '{{ __slurm_jobstats_url }}') == url


def _template(render, path, **extra):
    return render(_variables(**extra), _text('templates', *path.split('/')))


@pytest.mark.parametrize('tls, expected', [
    (True, {'prometheus_url': 'https://mon1:9090', 'ca_file': '/etc/gpucluster-monitoring/tls/ca.crt',
            'user': 'gpucluster-scrape', 'password_file': '/etc/gpucluster-monitoring/scrape.password', 'timeout': 10}),
    (False, {'prometheus_url': 'http://mon1:9090', 'ca_file': None, 'user': None, 'password_file': None, 'timeout': 10}),
])
def test_jobstats_configuration(ansible_render, tls, expected):
    data = json.loads(_template(ansible_render, 'etc/gpucluster/jobstats.json.j2', monitoring_tls=tls))
    assert data.pop('_managed') == 'Ansible managed'
    assert data == expected


@pytest.mark.parametrize('kind, directory', [('prolog', '/etc/slurm/prolog.d'), ('epilog', '/etc/slurm/epilog.d')])
def test_record_scripts(ansible_render, kind, directory):
    text = _template(ansible_render, 'etc/slurm/gpucluster-gpu-jobs.j2', __slurm_gpu_jobs_kind=kind)
    lines = text.splitlines()
    assert lines[0] == '#!/bin/sh' and lines[-1] == 'exit 0'
    assert ('/usr/bin/timeout --kill-after=1 5 /usr/bin/python3 /usr/local/lib/gpucluster/gpucluster-slurm-usage.pyz %s '
            '</dev/null >/dev/null 2>&1' % kind) in lines
    assert '%s/*' % directory in text


def test_metrics_units(ansible_render):
    service = _template(ansible_render, 'etc/systemd/system/gpucluster-slurm-metrics.service.j2')
    assert ('ExecStart=/usr/local/sbin/gpucluster-slurm-metrics --textfile /var/lib/prometheus/node-exporter '
            '--run-timeout 30\n') in service
    assert 'TimeoutStartSec=60\n' in service
    service = _template(ansible_render, 'etc/systemd/system/gpucluster-slurm-metrics.service.j2', slurm_accounting=False,
                        slurm_usage_metrics_textfile_dir='/srv/textfile')
    assert '--textfile /srv/textfile --run-timeout 30 --no-sshare\n' in service
    timer = _template(ansible_render, 'etc/systemd/system/gpucluster-slurm-metrics.timer.j2')
    assert 'OnUnitActiveSec=1min\n' in timer


def test_slurm_conf_runs_the_prolog_and_epilog_directories():
    text = _text('templates', 'etc', 'slurm', 'slurm.conf.j2')
    assert '{% if slurm_gpu_job_records %}' in text
    assert 'Prolog={{ __slurm_prolog_dir }}/*\nEpilog={{ __slurm_epilog_dir }}/*\n' in text


@pytest.mark.parametrize('on, absent', [
    ({}, []),
    ({'slurm_gpu_job_records': False}, ['/etc/slurm/prolog.d/50-gpucluster-gpu-jobs', '/etc/slurm/epilog.d/50-gpucluster-gpu-jobs']),
    ({'gpucluster_monitoring': False},
     ['/usr/local/sbin/gpucluster-slurm-metrics', '/etc/systemd/system/gpucluster-slurm-metrics.service',
      '/etc/systemd/system/gpucluster-slurm-metrics.timer', '/usr/local/bin/gpucluster-jobstats', '/etc/gpucluster/jobstats.json']),
    ({'slurm_usage_metrics': False, 'slurm_jobstats': False, '__slurm_is_compute': False},
     ['/etc/slurm/prolog.d/50-gpucluster-gpu-jobs', '/etc/slurm/epilog.d/50-gpucluster-gpu-jobs',
      '/usr/local/sbin/gpucluster-slurm-metrics', '/etc/systemd/system/gpucluster-slurm-metrics.service',
      '/etc/systemd/system/gpucluster-slurm-metrics.timer', '/usr/local/bin/gpucluster-jobstats', '/etc/gpucluster/jobstats.json',
      '/usr/local/lib/gpucluster/gpucluster-slurm-usage.pyz']),
])
def test_a_part_turned_off_leaves_nothing_behind(ansible_render, on, absent):
    assert ansible_render(_variables(**on), '{{ __slurm_usage_set_absent }}') == absent


def test_every_usage_file_is_in_the_fast_path(ansible_render):
    variables = _variables(__slurm_conf_files=['slurm.conf'])
    files = ansible_render(variables, '{{ __slurm_fast_path.files }}')
    for path in (['/usr/local/lib/gpucluster/gpucluster-slurm-usage.pyz', '/usr/local/sbin/gpucluster-slurm-metrics',
                  '/usr/local/bin/gpucluster-jobstats', '/etc/gpucluster/jobstats.json', '/etc/slurm/prolog.d',
                  '/etc/slurm/epilog.d', '/var/lib/prometheus/node-exporter']
                 + ansible_render(variables, '{{ __slurm_gpu_jobs_programs + __slurm_usage_metrics_units }}')):
        assert path in files
    assert 'gpucluster-slurm-metrics.timer' in ansible_render(variables, '{{ __slurm_fast_path.services }}')


@pytest.mark.parametrize('scheduler, source', [(None, 'slurm'), ('slurm', 'slurm'), ('swarm', 'swarm'), ('none', 'none')])
def test_health_program_job_source_follows_the_scheduler(ansible_render, scheduler, source):
    defaults = _load('defaults', 'main.yml', role=os.path.join(REPO, 'roles', 'health_check'))
    variables = {} if scheduler is None else {'gpucluster_scheduler': scheduler}
    assert ansible_render(variables, defaults['health_check_job_source']) == source
