# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Extract every PromQL expression from the monitoring role's Grafana dashboards.

Used three ways:
  * tests/unit/roles/test_monitoring_dashboards.py (structure, pure);
  * ``dashboard_queries.py rules`` prints them as recording rules so that
    ``promtool check rules`` parses every expression offline (tests/monitoring/promtool.sh);
  * ``dashboard_queries.py check URL [DIR]`` runs each, template variables replaced, against a
    Prometheus (the molecule verify step copies this file to the lab's monitoring node and points
    it at the dashboards as installed there) and fails unless each one returns data.

A target or a query variable may carry ``"gpuclusterMayBeEmpty": "<reason>"``: the query must still
run, but an empty answer is accepted (hardware the lab lacks, a series that only exists during a
fault, or while a job holds a GPU).
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import re
import sys

DASHBOARD_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                             '..', '..', 'roles', 'monitoring', 'files', 'dashboards')

# Grafana's built-in interval variables, replaced by values that suit a short lab history.
BUILTINS = {
    '__rate_interval': '1m',
    '__interval': '30s',
    '__range': '1h',
}
_VAR_RE = re.compile(r'\$(?:\{(\w+)(?::\w+)?\}|(\w+))')
_LABEL_VALUES_RE = re.compile(r'^\s*label_values\((?:(.*),\s*)?(\w+)\s*\)\s*$', re.S)


def load_dashboards(directory=DASHBOARD_DIR):
    """Return {file name: dashboard dict} for every *.json in directory."""
    result = {}
    for name in sorted(os.listdir(directory)):
        if name.endswith('.json'):
            with open(os.path.join(directory, name)) as handle:
                result[name] = json.load(handle)
    return result


def iter_panels(panels):
    """Yield every panel, descending into collapsed rows."""
    for panel in panels or []:
        yield panel
        yield from iter_panels(panel.get('panels'))


def variable_values(dashboard):
    """Map each template variable to the value its 'All' option stands for (or its first option)."""
    values = {}
    for var in dashboard.get('templating', {}).get('list', []):
        if var.get('includeAll') and var.get('allValue'):
            values[var['name']] = var['allValue']
        elif var.get('options'):
            values[var['name']] = var['options'][0]['value']
        else:
            values[var['name']] = '.+'
    return values


def substitute(expr, values):
    """Replace $var / ${var} by values; unknown variables raise KeyError."""
    def repl(match):
        name = match.group(1) or match.group(2)
        if name in values:
            return values[name]
        if name in BUILTINS:
            return BUILTINS[name]
        raise KeyError(name)
    return _VAR_RE.sub(repl, expr)


def label_values_to_query(query):
    """label_values(selector, label) -> (selector or None, label); None when not that form."""
    match = _LABEL_VALUES_RE.match(query)
    if not match:
        return None
    return match.group(1), match.group(2)


def extract(dashboards):
    """Return a list of query records from {name: dashboard}.

    Each record: dashboard, uid, panel, ref, expr (raw), query (variables replaced),
    may_be_empty (reason or None), kind ('panel' or 'variable'), label (variables only).
    """
    records = []
    for name, dashboard in sorted(dashboards.items()):
        values = variable_values(dashboard)
        for var in dashboard.get('templating', {}).get('list', []):
            if var.get('type') != 'query':
                continue
            raw = var['query']['query'] if isinstance(var.get('query'), dict) else var.get('query', '')
            parsed = label_values_to_query(raw)
            if parsed is None:
                raise ValueError('%s: variable %s uses an unsupported query %r' % (name, var.get('name'), raw))
            selector, label = parsed
            if not selector:
                raise ValueError('%s: variable %s must name a selector in label_values()' % (name, var.get('name')))
            others = dict((k, v) for k, v in values.items() if k != var['name'])
            records.append({'dashboard': name, 'uid': dashboard.get('uid'), 'panel': 'variable $' + var['name'],
                            'ref': var['name'], 'expr': raw, 'query': substitute(selector, others),
                            'may_be_empty': var.get('gpuclusterMayBeEmpty'), 'kind': 'variable', 'label': label})
        for panel in iter_panels(dashboard.get('panels')):
            for target in panel.get('targets', []) or []:
                expr = target.get('expr')
                if expr is None:
                    continue
                records.append({'dashboard': name, 'uid': dashboard.get('uid'),
                                'panel': '%s (id %s)' % (panel.get('title'), panel.get('id')),
                                'ref': target.get('refId'), 'expr': expr, 'query': substitute(expr, values),
                                'may_be_empty': target.get('gpuclusterMayBeEmpty'), 'kind': 'panel', 'label': None})
    return records


def as_recording_rules(records):
    """A Prometheus rule file (YAML is a superset of JSON) with one recording rule per query."""
    rules = [{'record': 'gpucluster_dashboard_check_%d' % index, 'expr': record['query']}
             for index, record in enumerate(records)]
    return json.dumps({'groups': [{'name': 'gpucluster-dashboard-queries', 'rules': rules}]}, indent=2)


def judge(record, answer):
    """Return None when a query's answer is acceptable, else the reason it is not."""
    if answer.get('status') != 'success':
        return 'query failed: %s' % answer.get('error')
    result = answer.get('data', {}).get('result', [])
    if record['kind'] == 'variable':
        if not result and record.get('may_be_empty'):
            return None
        if not any(record['label'] in series.get('metric', {}) for series in result):
            return 'no series carries label %r' % record['label']
        return None
    if not result and not record['may_be_empty']:
        return 'no data'
    return None


def _opener():  # pragma: no cover - network I/O, exercised by molecule verify
    """POST to a Prometheus behind TLS and basic auth: the CA from PROMETHEUS_CA_FILE, the user from
    PROMETHEUS_USER and its password from PROMETHEUS_PASSWORD_FILE (never on a command line); unset, plain."""
    import base64
    import ssl
    from urllib.request import Request, urlopen
    ca_file = os.environ.get('PROMETHEUS_CA_FILE')
    context = ssl.create_default_context(cafile=ca_file) if ca_file else None
    headers = {}
    if os.environ.get('PROMETHEUS_USER'):
        with open(os.environ['PROMETHEUS_PASSWORD_FILE']) as handle:
            secret = '%s:%s' % (os.environ['PROMETHEUS_USER'], handle.read().strip())
        headers['Authorization'] = 'Basic ' + base64.b64encode(secret.encode('utf-8')).decode('ascii')

    def post(url, body):
        return urlopen(Request(url, body, headers), timeout=30, context=context)
    return post


def check(prometheus, records):  # pragma: no cover - network I/O, exercised by molecule verify
    """Run every query against prometheus; print one line each; return the number of failures."""
    from urllib.parse import urlencode
    post = _opener()
    failures = 0
    for record in records:
        body = urlencode({'query': record['query']}).encode('utf-8')
        try:
            answer = json.loads(post(prometheus.rstrip('/') + '/api/v1/query', body).read().decode('utf-8'))
        except (OSError, ValueError) as exc:  # HTTP errors (400 on a parse error) are OSErrors
            answer = {'status': 'error', 'error': str(exc)}
        problem = judge(record, answer)
        count = len(answer.get('data', {}).get('result', []))
        if problem:
            failures += 1
        state = 'FAIL ' + problem if problem else ('ok (empty: %s)' % record['may_be_empty'] if count == 0 else 'ok')
        print('%-26s %-60s %s series=%d %s' % (record['dashboard'], record['panel'][:60], record['ref'], count, state))
    print('%d queries, %d failed' % (len(records), failures))
    return failures


def main(argv):
    if len(argv) < 2 or argv[1] not in ('rules', 'json', 'check') or (argv[1] == 'check' and len(argv) not in (3, 4)):
        sys.stderr.write('usage: dashboard_queries.py rules | json | check PROMETHEUS_URL [DASHBOARD_DIR]\n')
        return 2
    directory = argv[3] if argv[1] == 'check' and len(argv) == 4 else DASHBOARD_DIR
    records = extract(load_dashboards(directory))
    if argv[1] == 'rules':
        print(as_recording_rules(records))
    elif argv[1] == 'json':
        print(json.dumps(records, indent=1))
    else:
        return 1 if check(argv[2], records) else 0
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
