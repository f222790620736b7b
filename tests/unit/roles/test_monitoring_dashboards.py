# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The monitoring role's dashboards and rules, checked offline.

Every PromQL expression is extracted from the dashboards' JSON (tests/monitoring/dashboard_queries.py,
the same extractor the molecule verify step runs against the lab Prometheus). Here: structure,
variables, brackets, and that every GPU metric name is one the node health program documents.
`promtool check rules` parses the same expressions in tests/monitoring/promtool.sh.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import importlib.util
import json
import os
import re

import pytest
import yaml

from ansible_collections.gpucluster.core.plugins.module_utils import (
    checkpoint_backup, gpu_fabric, gpu_jobs, gpu_prom, rdma_health, slurm_usage)
from ansible_collections.gpucluster.core.plugins.plugin_utils import validate_report

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
ROLE = os.path.join(REPO, 'roles', 'monitoring')

_spec = importlib.util.spec_from_file_location('dashboard_queries', os.path.join(REPO, 'tests', 'monitoring', 'dashboard_queries.py'))
dq = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(dq)

# The metrics the node health program writes, from the code that writes them (single source; docs/DEVELOPING.md,
# "Textfile metrics of the node health program", documents the same names).
HEALTH_METRICS = set(gpu_prom.METRIC_NAMES) | set(metric for metric, _kind, _help in rdma_health.METRICS) \
    | set(metric for metric, _kind, _help in gpu_fabric.METRICS) | set(gpu_jobs.METRIC_NAMES)
# ... plus the per-node expectations this role writes itself.
OWN_METRICS = {'gpucluster_monitoring_expect_gpu_metrics', 'gpucluster_monitoring_ib_expected_rate_bytes_per_second'} \
    | set(validate_report.METRIC_NAMES) \
    | set(checkpoint_backup.METRIC_NAMES) \
    | set(slurm_usage.METRIC_NAMES)   # playbooks/validate.yml's textfile; roles/checkpoint_backup's; roles/slurm's
# node_exporter 1.5.0's infiniband collector, as printed by Debian's binary over a synthetic sysfs tree.
INFINIBAND_METRICS = {
    'node_infiniband_info', 'node_infiniband_state_id', 'node_infiniband_physical_state_id',
    'node_infiniband_rate_bytes_per_second', 'node_infiniband_port_data_received_bytes_total',
    'node_infiniband_port_data_transmitted_bytes_total', 'node_infiniband_port_packets_received_total',
    'node_infiniband_port_packets_transmitted_total', 'node_infiniband_port_errors_received_total',
    'node_infiniband_port_discards_transmitted_total', 'node_infiniband_symbol_error_total',
    'node_infiniband_link_downed_total', 'node_infiniband_link_error_recovery_total',
}
_METRIC_RE = re.compile(r'\b((?:gpucluster|node_infiniband)_[a-zA-Z0-9_]+)(?![.\w])')

DASHBOARDS = dq.load_dashboards()
RECORDS = dq.extract(DASHBOARDS)


def _role_vars():
    with open(os.path.join(ROLE, 'vars', 'main.yml')) as handle:
        return yaml.safe_load(handle)


def test_the_shipped_dashboards_are_the_provisioned_ones():
    names = sorted(name[:-len('.json')] for name in DASHBOARDS)
    assert names == sorted(_role_vars()['__monitoring_dashboards'])


@pytest.mark.parametrize('name', sorted(DASHBOARDS))
def test_dashboard_structure(name):
    dashboard = DASHBOARDS[name]
    assert dashboard['uid'] == name[:-len('.json')]
    assert 'gpucluster' in dashboard['tags']
    panels = list(dq.iter_panels(dashboard['panels']))
    assert panels, 'no panels'
    ids = [p['id'] for p in panels]
    assert len(ids) == len(set(ids)), 'duplicate panel ids %s' % ids
    for panel in panels:
        if panel.get('type') == 'row':
            continue
        assert panel['datasource'] == DATASOURCE, panel['title']
        refs = [t['refId'] for t in panel['targets']]
        assert refs and len(refs) == len(set(refs)), panel['title']
        for target in panel['targets']:
            assert target['datasource'] == DATASOURCE, (panel['title'], target['refId'])
            assert target.get('expr', '').strip(), '%s %s has no expression' % (panel['title'], target['refId'])
            reason = target.get('gpuclusterMayBeEmpty')
            assert reason is None or (isinstance(reason, str) and len(reason) > 10)


# Every panel, target and query variable reads the dashboard's `datasource` variable, so the dashboards
# work in any Grafana whatever its Prometheus data source's uid (Grafana substitutes ${datasource}).
DATASOURCE = {'type': 'prometheus', 'uid': '${datasource}'}


def _datasource_refs(value, path='$'):
    """Every datasource reference anywhere in a dashboard, with where it is."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == 'datasource':
                yield path, item
            else:
                yield from _datasource_refs(item, '%s.%s' % (path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _datasource_refs(item, '%s[%d]' % (path, index))


@pytest.mark.parametrize('name', sorted(DASHBOARDS))
def test_datasource_is_a_variable(name):
    dashboard = DASHBOARDS[name]
    variables = dashboard['templating']['list']
    chosen = [v for v in variables if v['name'] == 'datasource']
    assert len(chosen) == 1
    assert chosen[0]['type'] == 'datasource' and chosen[0]['query'] == 'prometheus'
    # Grafana resolves a variable only from those listed before it.
    assert variables[0] is chosen[0]
    refs = list(_datasource_refs(dashboard))
    assert refs
    for where, ref in refs:
        assert ref == DATASOURCE, '%s: %r' % (where, ref)
    # No data source uid of one installation is left anywhere (the role's own included).
    text = json.dumps(dashboard)
    assert _role_vars()['__monitoring_grafana_datasource_uid'] not in text
    for variable in variables:
        if variable['type'] == 'query':
            assert variable['datasource'] == DATASOURCE, variable['name']


def test_every_query_was_extracted():
    targets = sum(len(p.get('targets', [])) for d in DASHBOARDS.values() for p in dq.iter_panels(d['panels']))
    variables = sum(1 for d in DASHBOARDS.values() for v in d['templating']['list'] if v['type'] == 'query')
    assert len(RECORDS) == targets + variables
    assert len(RECORDS) > 40


@pytest.mark.parametrize('record', RECORDS, ids=lambda r: '%s:%s:%s' % (r['uid'], r['panel'][:30], r['ref']))
def test_query_is_well_formed(record):
    query = record['query']
    assert '$' not in query, 'unreplaced variable in %r' % query
    for opening, closing in ('()', '[]', '{}'):
        depth = 0
        for char in re.sub(r'"(?:[^"\\]|\\.)*"', '""', query):
            depth += {opening: 1, closing: -1}.get(char, 0)
            assert depth >= 0, 'unbalanced %s in %r' % (opening + closing, query)
        assert depth == 0, 'unbalanced %s in %r' % (opening + closing, query)
    assert query.count('"') % 2 == 0


@pytest.mark.parametrize('record', RECORDS, ids=lambda r: '%s:%s:%s' % (r['uid'], r['panel'][:30], r['ref']))
def test_query_uses_documented_metric_names(record):
    for metric in _METRIC_RE.findall(record['query']):
        assert metric in HEALTH_METRICS | OWN_METRICS | INFINIBAND_METRICS, 'unknown metric %s in %r' % (metric, record['query'])


@pytest.mark.parametrize('template', sorted(os.listdir(os.path.join(ROLE, 'templates', 'rules'))))
def test_rules_use_documented_metric_names(template):
    with open(os.path.join(ROLE, 'templates', 'rules', template)) as handle:
        text = handle.read()
    unknown = set(_METRIC_RE.findall(text)) - HEALTH_METRICS - OWN_METRICS - INFINIBAND_METRICS
    assert not unknown


_ALERTNAME_RE = re.compile(r'alertname\s*=~?\s*"([^"]+)"')
_RULE_ALERT_RE = re.compile(r'^\s*- alert: (\S+)', re.M)


def _defined_alerts():
    names = set()
    for template in os.listdir(os.path.join(ROLE, 'templates', 'rules')):
        with open(os.path.join(ROLE, 'templates', 'rules', template)) as handle:
            names.update(_RULE_ALERT_RE.findall(handle.read()))
    return names


@pytest.mark.parametrize('record', [r for r in RECORDS if _ALERTNAME_RE.search(r['query'])],
                         ids=lambda r: '%s:%s:%s' % (r['uid'], r['panel'][:30], r['ref']))
def test_query_names_only_shipped_alerts(record):
    assert set(_ALERTNAME_RE.findall(record['query'])) <= _defined_alerts(), record['query']


def test_developing_guide_documents_every_written_metric():
    with open(os.path.join(REPO, 'docs', 'DEVELOPING.md')) as handle:
        text = handle.read()
    section = text[text.index('## Textfile metrics of the node health program'):]
    section = section[:section.index('\n## ')] if '\n## ' in section else section
    documented = set(re.findall(r'`(gpucluster_[a-z_]+)', section))
    written = HEALTH_METRICS | set(validate_report.METRIC_NAMES) | set(slurm_usage.METRIC_NAMES)
    assert written <= documented, sorted(written - documented)


def test_every_rule_file_has_a_test_file():
    rules = _role_vars()['__monitoring_rule_files']
    assert sorted(rules) == sorted(f[:-len('.rules.yml.j2')] for f in os.listdir(os.path.join(ROLE, 'templates', 'rules')))
    assert sorted(rules) == sorted(f[:-len('.test.yml.j2')] for f in os.listdir(os.path.join(ROLE, 'templates', 'rule-tests')))


@pytest.mark.parametrize('expr, values, expected', [
    ('up{instance=~"$node"}', {'node': '.+'}, 'up{instance=~".+"}'),
    ('x{instance=~"${node}",gpu=~"$gpu"}', {'node': 'node1', 'gpu': '0'}, 'x{instance=~"node1",gpu=~"0"}'),
    ('rate(x[$__rate_interval])', {}, 'rate(x[1m])'),
    ('increase(x[$__range])', {}, 'increase(x[1h])'),
    ('x{a="${node:regex}"}', {'node': 'n'}, 'x{a="n"}'),
])
def test_substitute(expr, values, expected):
    assert dq.substitute(expr, values) == expected


def test_substitute_rejects_unknown_variables():
    with pytest.raises(KeyError):
        dq.substitute('up{instance=~"$nodes"}', {'node': '.+'})


@pytest.mark.parametrize('query, expected', [
    ('label_values(up{job="node"}, instance)', ('up{job="node"}', 'instance')),
    ('label_values(gpucluster_gpu_info{instance=~"$node"}, gpu)', ('gpucluster_gpu_info{instance=~"$node"}', 'gpu')),
    ('label_values(instance)', (None, 'instance')),
    ('query_result(up)', None),
])
def test_label_values_to_query(query, expected):
    assert dq.label_values_to_query(query) == expected


@pytest.mark.parametrize('answer, record, problem', [
    ({'status': 'success', 'data': {'result': [{'metric': {}}]}}, {'kind': 'panel', 'may_be_empty': None}, None),
    ({'status': 'success', 'data': {'result': []}}, {'kind': 'panel', 'may_be_empty': None}, 'no data'),
    ({'status': 'success', 'data': {'result': []}}, {'kind': 'panel', 'may_be_empty': 'no IB here'}, None),
    ({'status': 'error', 'error': 'parse error'}, {'kind': 'panel', 'may_be_empty': 'x'}, 'query failed: parse error'),
    ({'status': 'success', 'data': {'result': [{'metric': {'gpu': '0'}}]}}, {'kind': 'variable', 'label': 'gpu'}, None),
    ({'status': 'success', 'data': {'result': [{'metric': {'job': 'node'}}]}}, {'kind': 'variable', 'label': 'gpu'},
     "no series carries label 'gpu'"),
    ({'status': 'success', 'data': {'result': []}}, {'kind': 'variable', 'label': 'job_id', 'may_be_empty': 'no job'}, None),
    ({'status': 'success', 'data': {'result': []}}, {'kind': 'variable', 'label': 'job_id', 'may_be_empty': None},
     "no series carries label 'job_id'"),
])
def test_judge(answer, record, problem):
    assert dq.judge(record, answer) == problem


def test_recording_rules_cover_every_query():
    rules = yaml.safe_load(dq.as_recording_rules(RECORDS))['groups'][0]['rules']
    assert [r['expr'] for r in rules] == [r['query'] for r in RECORDS]


def test_molecule_metrics_stand_in_is_the_programs_output():
    """molecule/monitoring's textfile stand-in is gpu_prom.render's output (regenerate it with
    `python tests/monitoring/health_metrics_double.py --write`), never a hand-written copy."""
    spec = importlib.util.spec_from_file_location(
        'health_metrics_double', os.path.join(REPO, 'tests', 'monitoring', 'health_metrics_double.py'))
    double = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(double)
    text = double.render(gpu_prom)
    with open(double.TEMPLATE) as handle:
        assert handle.read() == text
    names = set(re.findall(r'^(gpucluster_[a-z_]+)', text, re.M))
    assert names <= HEALTH_METRICS


def test_molecule_slurm_metrics_stand_in_is_the_programs_output():
    """molecule/monitoring's Slurm metrics stand-in is slurm_usage.render's output (regenerate it with
    `python tests/monitoring/usage_metrics_double.py --write`), never a hand-written copy."""
    spec = importlib.util.spec_from_file_location(
        'usage_metrics_double', os.path.join(REPO, 'tests', 'monitoring', 'usage_metrics_double.py'))
    double = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(double)
    text = double.render(slurm_usage)
    with open(double.TEMPLATE) as handle:
        assert handle.read() == text
    names = set(re.findall(r'^(gpucluster_[a-z_]+)', text, re.M))
    assert names <= OWN_METRICS and 'gpucluster_slurm_pending_jobs_fit_idle_gpus' in names
