# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import xml.etree.ElementTree as ET

import pytest

from ansible_collections.gpucluster.core.plugins.module_utils import drift
from ansible_collections.gpucluster.core.plugins.plugin_utils import drift_reports


def cells(findings):
    """(host, component, kind, expected, found) tuples, order-free."""
    return sorted((f['host'], f['component'], f['kind'], f['expected'], f['found']) for f in findings)


# ------------------------------------------------------------------ prefix pins

@pytest.mark.parametrize('pin, found, matches', [
    ('12.4', '12.4.1', True),
    ('12.4', '12.4', True),
    ('12.4', '12.40', False),
    ('12.4', '12.40.1', False),
    ('12.4.1', '12.4.1', True),
    ('12.4.1', '12.4.10', False),
    ('2.21.5', '2.21.5-1+cuda12.4', True),
    ('2.21.5-1', '2.21.5-1+cuda12.4', True),
    ('2.21.5-1', '2.21.5-10', False),
    ('1.6.20', '1.6.20~ds1-1+deb12u3', True),
    ('535', '535.183.01', True),
    ('535', '5350.1', False),
    ('12.4.', '12.4.1', True),
    ('12.4', None, False),
    ('', '12.4.1', False),
    (' 12.4 ', '12.4.1', True),
    ('12.4.1', '12.4', False),
])
def test_pin_matches(pin, found, matches):
    assert drift.pin_matches(pin, found) is matches


# ------------------------------------------------------------------ comparison

STACK = {'kernel': '6.1.0-25-amd64', 'cuda_toolkit': '12.4.1', 'nccl': '2.21.5-1+cuda12.4'}


def facts_with(**changes):
    stack = dict(STACK)
    stack.update(changes)
    return stack


def test_done_when_case_baseline_and_majority():
    hosts = ['host1', 'host2', 'host3']
    facts = {'host1': facts_with(), 'host2': facts_with(nccl='2.20.3-1+cuda12.4'),
             'host3': facts_with(cuda_toolkit='12.2.0')}
    baselines = dict((h, {'cuda_toolkit': '12.4.1'}) for h in hosts)
    findings, stats = drift.audit(hosts, facts, baselines=baselines, consistent=['kernel', 'cuda_toolkit', 'nccl'])
    assert cells(findings) == [
        ('host2', 'nccl', 'majority', '2.21.5-1+cuda12.4', '2.20.3-1+cuda12.4'),
        ('host3', 'cuda_toolkit', 'baseline', '12.4.1', '12.2.0'),
    ]
    assert all(f['severity'] == 'critical' for f in findings)
    assert stats['checks']['host1'] == ['kernel', 'cuda_toolkit', 'nccl']
    summary = drift.summarize(hosts, findings, stats)
    assert summary['failed'] and summary['failing_findings'] == 2 and summary['checks'] == 9


def test_no_drift_no_findings():
    hosts = ['a', 'b', 'c']
    findings, stats = drift.audit(hosts, dict((h, facts_with()) for h in hosts),
                                  baselines=dict((h, {'cuda_toolkit': '12.4'}) for h in hosts))
    assert findings == []
    assert not drift.summarize(hosts, findings, stats)['failed']


def test_prefix_pin_passes_but_consistency_still_applies():
    hosts = ['a', 'b', 'c']
    facts = {'a': facts_with(), 'b': facts_with(), 'c': facts_with(cuda_toolkit='12.4.0')}
    findings, dummy = drift.audit(hosts, facts, baselines=dict((h, {'cuda_toolkit': '12.4'}) for h in hosts),
                                  consistent=['cuda_toolkit'])
    assert cells(findings) == [('c', 'cuda_toolkit', 'majority', '12.4.1', '12.4.0')]


def test_baseline_finding_is_not_reported_twice_and_does_not_make_a_tie():
    # Two hosts, one off the pin: the other one matches the pin and is not 'tied' with it.
    hosts = ['a', 'b']
    facts = {'a': facts_with(), 'b': facts_with(cuda_toolkit='12.2.0')}
    findings, dummy = drift.audit(hosts, facts, baselines=dict((h, {'cuda_toolkit': '12.4.1'}) for h in hosts),
                                  consistent=['cuda_toolkit'])
    assert cells(findings) == [('b', 'cuda_toolkit', 'baseline', '12.4.1', '12.2.0')]


def test_missing_component_against_pin_and_majority():
    hosts = ['a', 'b', 'c']
    facts = {'a': facts_with(), 'b': facts_with(), 'c': facts_with(nccl=None, cuda_toolkit=None)}
    findings, dummy = drift.audit(hosts, facts, baselines=dict((h, {'cuda_toolkit': '12.4'}) for h in hosts),
                                  consistent=['nccl'])
    assert cells(findings) == [
        ('c', 'cuda_toolkit', 'missing', '12.4', None),
        ('c', 'nccl', 'missing', '2.21.5-1+cuda12.4', None),
    ]


def test_component_key_absent_from_facts_counts_as_missing():
    facts = {'a': facts_with(), 'b': facts_with(), 'c': {'kernel': STACK['kernel']}}
    findings, dummy = drift.audit(['a', 'b', 'c'], facts, consistent=['nccl'])
    assert cells(findings) == [('c', 'nccl', 'missing', '2.21.5-1+cuda12.4', None)]


def test_tie_reports_both_sides():
    hosts = ['a', 'b', 'c', 'd']
    facts = {'a': facts_with(), 'b': facts_with(), 'c': facts_with(nccl='2.20.3-1'), 'd': facts_with(nccl='2.20.3-1')}
    findings, dummy = drift.audit(hosts, facts, consistent=['nccl'])
    assert sorted(f['host'] for f in findings) == hosts
    assert all(f['kind'] == 'majority' for f in findings)
    expected = set(f['expected'] for f in findings)
    assert expected == {'no majority (2.20.3-1 on 2, 2.21.5-1+cuda12.4 on 2)'}
    assert dict((f['host'], f['found']) for f in findings)['c'] == '2.20.3-1'


def test_two_hosts_that_differ_are_a_tie():
    findings, dummy = drift.audit(['a', 'b'], {'a': facts_with(), 'b': facts_with(kernel='6.1.0-26-amd64')},
                                  consistent=['kernel'])
    assert sorted(f['host'] for f in findings) == ['a', 'b']


def test_one_host_has_nothing_to_compare_with_but_still_meets_pins():
    findings, dummy = drift.audit(['solo'], {'solo': facts_with()}, consistent=list(STACK))
    assert findings == []
    findings, dummy = drift.audit(['solo'], {'solo': facts_with()}, baselines={'solo': {'cuda_toolkit': '12.2'}})
    assert cells(findings) == [('solo', 'cuda_toolkit', 'baseline', '12.2', '12.4.1')]


def test_groups_compare_within_group_only():
    hosts = ['h1', 'h2', 'h3', 'a1', 'a2', 'a3']
    facts = dict((h, facts_with()) for h in hosts[:3])
    facts.update(dict((h, facts_with(cuda_toolkit='12.2.0')) for h in hosts[3:]))
    facts['a3'] = facts_with(cuda_toolkit='12.1.1')
    grouping = drift.partition_hosts(hosts, [('h100', ['h1', 'h2', 'h3']), ('a100', ['a1', 'a2', 'a3'])])
    findings, stats = drift.audit(hosts, facts, consistent=['cuda_toolkit'], groups=grouping)
    assert cells(findings) == [('a3', 'cuda_toolkit', 'majority', '12.2.0', '12.1.1')]
    assert findings[0]['group'] == 'a100'
    assert stats['distribution']['a100']['cuda_toolkit'] == {'12.2.0': 2, '12.1.1': 1}
    # Without groups the six hosts are one group: 3 x 12.4.1 is the majority.
    findings, dummy = drift.audit(hosts, facts, consistent=['cuda_toolkit'])
    assert sorted(f['host'] for f in findings) == ['a1', 'a2', 'a3']


def test_partition_first_group_wins_and_ungrouped_pool():
    grouping = drift.partition_hosts(['a', 'b', 'c'], [('g1', ['a']), ('g2', ['a', 'b'])])
    assert grouping == {'a': 'g1', 'b': 'g2', 'c': drift.UNGROUPED}


def test_unknown_hosts_are_never_passed():
    hosts = ['a', 'b', 'gone']
    findings, stats = drift.audit(hosts, {'a': facts_with(), 'b': facts_with()},
                                  baselines={'gone': {'cuda_toolkit': '12.4.1'}}, consistent=['nccl'],
                                  unknown_reasons={'gone': 'unreachable: ssh timeout'})
    assert cells(findings) == [('gone', 'cuda_toolkit', 'unknown', '12.4.1', None),
                               ('gone', 'nccl', 'unknown', None, None)]
    assert all(f['message'] == 'unreachable: ssh timeout' and f['severity'] == 'critical' for f in findings)
    summary = drift.summarize(hosts, findings, stats, unknown_hosts=['gone'])
    assert summary['hosts_unknown'] == 1 and summary['failed']
    # The unknown host does not count towards the majority of the others.
    assert stats['distribution'][drift.UNGROUPED]['nccl'] == {'2.21.5-1+cuda12.4': 2}


def test_unknown_severity_and_fail_on():
    findings, stats = drift.audit(['a'], {}, consistent=['kernel'], unknown_severity='warning')
    assert findings[0]['severity'] == 'warning'
    assert not drift.summarize(['a'], findings, stats, fail_on='critical')['failed']
    assert drift.summarize(['a'], findings, stats, fail_on='warning')['failed']
    assert not drift.summarize(['a'], findings, stats, fail_on='never')['failed']


def test_ignore_components_and_host_patterns():
    hosts = ['gpu-01', 'gpu-02', 'gpu-03']
    facts = {'gpu-01': dict(facts_with(), hca_firmware='28.39'), 'gpu-02': dict(facts_with(), hca_firmware='28.39'),
             'gpu-03': dict(facts_with(kernel='6.1.0-26-amd64', nccl='2.20.3-1'), hca_firmware='28.40')}
    consistent = ['kernel', 'nccl', 'hca_firmware']
    findings, stats = drift.audit(hosts, facts, consistent=consistent, ignore=['kernel', 'gpu-0[3]:hca_*'])
    assert cells(findings) == [('gpu-03', 'nccl', 'majority', '2.21.5-1+cuda12.4', '2.20.3-1')]
    assert stats['checks']['gpu-03'] == ['nccl']
    assert stats['checks']['gpu-01'] == ['nccl', 'hca_firmware']


def test_severity_defaults_and_overrides():
    hosts = ['a', 'b', 'c']
    facts = dict((h, dict(facts_with(), gpu_vbios='96.00.99.00.01', dcgm='3.3.8')) for h in hosts)
    facts['c'] = dict(facts_with(cuda_toolkit='12.2.0'), gpu_vbios='96.00.5E.00.01', dcgm='3.3.7')
    findings, dummy = drift.audit(hosts, facts, consistent=['cuda_toolkit', 'gpu_vbios', 'dcgm'],
                                  severity={'dcgm': 'info'})
    severities = dict((f['component'], f['severity']) for f in findings)
    assert severities == {'cuda_toolkit': 'critical', 'gpu_vbios': 'warning', 'dcgm': 'info'}
    assert [f['component'] for f in findings] == ['cuda_toolkit', 'gpu_vbios', 'dcgm']


def test_raw_package_version_satisfies_pin():
    facts = {'a': facts_with(docker='27.3.1-1~ubuntu.22.04~jammy')}
    findings, dummy = drift.audit(['a'], facts, baselines={'a': {'docker': '5:27.3.1'}}, consistent=[],
                                  raw={'a': {'docker': '5:27.3.1-1~ubuntu.22.04~jammy'}})
    assert findings == []


def test_fabricmanager_pin_applies_only_where_installed():
    pins = {'nvidia_fabricmanager': '550.54.15', 'nvidia_driver': '550.54.15'}
    facts = {'pcie': {'nvidia_driver': '550.54.15-1', 'nvidia_fabricmanager': None},
             'sxm': {'nvidia_driver': '550.54.15-1', 'nvidia_fabricmanager': '550.90.07-1'}}
    findings, dummy = drift.audit(['pcie', 'sxm'], facts, baselines={'pcie': pins, 'sxm': pins}, consistent=[])
    assert cells(findings) == [('sxm', 'nvidia_fabricmanager', 'baseline', '550.54.15', '550.90.07-1')]


def test_empty_pins_are_no_pins():
    findings, dummy = drift.audit(['a'], {'a': facts_with()}, baselines={'a': {'cuda_toolkit': '', 'nccl': None}},
                                  consistent=[])
    assert findings == []


def test_majority_absent_reports_the_odd_one_out():
    facts = {'a': {'ofed': None}, 'b': {'ofed': None}, 'c': {'ofed': '24.04-0.6.6.0'}}
    findings, dummy = drift.audit(['a', 'b', 'c'], facts, consistent=['ofed'])
    assert cells(findings) == [('c', 'ofed', 'majority', None, '24.04-0.6.6.0')]


def test_linear_enough_for_ten_thousand_hosts():
    """Not a timing assert (the benchmark measures): proves the data shapes at scale."""
    hosts = ['n%05d' % i for i in range(10000)]
    facts = dict((h, facts_with()) for h in hosts)
    facts['n00042'] = facts_with(nccl='2.20.3-1')
    findings, stats = drift.audit(hosts, facts, consistent=list(STACK))
    assert cells(findings) == [('n00042', 'nccl', 'majority', '2.21.5-1+cuda12.4', '2.20.3-1')]
    assert sum(len(c) for c in stats['checks'].values()) == 30000


# ------------------------------------------------------------------ reports

def _sample():
    hosts = ['host1', 'host2', 'host3', 'host4']
    facts = {'host1': facts_with(), 'host2': facts_with(nccl='2.20.3-1+cuda12.4'),
             'host3': facts_with(cuda_toolkit='12.2.0')}
    baselines = dict((h, {'cuda_toolkit': '12.4.1'}) for h in hosts)
    findings, stats = drift.audit(hosts, facts, baselines=baselines, consistent=['kernel', 'nccl'],
                                  unknown_reasons={'host4': 'unreachable: <ssh> & "timeout"'})
    summary = drift.summarize(hosts, findings, stats, unknown_hosts=['host4'])
    return hosts, findings, stats, summary


def test_junit_is_well_formed_with_consistent_counts(tmp_path):
    hosts, findings, stats, summary = _sample()
    paths = drift_reports.write_reports(str(tmp_path), hosts, summary, findings, stats)
    root = ET.parse(paths['junit']).getroot()
    assert root.tag == 'testsuites'
    suites = root.findall('testsuite')
    assert [s.get('name') for s in suites] == hosts
    total_cases = 0
    total_failures = 0
    total_errors = 0
    for suite in suites:
        cases = suite.findall('testcase')
        failures = [c for c in cases if c.find('failure') is not None]
        errors = [c for c in cases if c.find('error') is not None]
        assert int(suite.get('tests')) == len(cases)
        assert int(suite.get('failures')) == len(failures)
        assert int(suite.get('errors')) == len(errors)
        for case in cases:
            assert case.get('classname') == 'drift.' + suite.get('name')
            assert len(case.findall('failure')) + len(case.findall('error')) <= 1
        total_cases += len(cases)
        total_failures += len(failures)
        total_errors += len(errors)
    assert int(root.get('tests')) == total_cases == summary['checks'] == 12
    # host4 has no facts: its 3 checks could not run (errors), the 2 drifts are failures.
    assert int(root.get('failures')) == total_failures == 2
    assert int(root.get('errors')) == total_errors == 3
    assert total_failures + total_errors == len(findings) == 5
    failure = root.find("testsuite[@name='host3']/testcase[@name='cuda_toolkit']/failure")
    assert failure.get('type') == 'critical:baseline'
    assert 'expected 12.4.1, found 12.2.0' in failure.get('message')
    assert 'expected: 12.4.1' in failure.text and 'found: 12.2.0' in failure.text
    nccl = root.find("testsuite[@name='host2']/testcase[@name='nccl']/failure")
    assert 'found 2.20.3-1+cuda12.4' in nccl.get('message')
    unknown = root.find("testsuite[@name='host4']/testcase[@name='kernel']/error")
    assert 'unreachable: <ssh> & "timeout"' in unknown.text     # escaped and read back intact
    assert unknown.get('message') == 'unknown: unreachable: <ssh> & "timeout"'
    assert unknown.get('type') == 'critical:unknown' and 'absent' not in unknown.get('message')
    assert root.find("testsuite[@name='host1']/testcase[@name='kernel']").find('failure') is None


def test_json_report(tmp_path):
    hosts, findings, stats, summary = _sample()
    paths = drift_reports.write_reports(str(tmp_path), hosts, summary, findings, stats, formats=['json'],
                                        baselines_used={'explicit': {'cuda_toolkit': '12.4.1'}}, generated_at='T')
    assert sorted(os.listdir(str(tmp_path))) == ['drift.json']
    with open(paths['json']) as handle:
        report = json.load(handle)
    assert report['summary']['findings'] == 5 and report['summary']['failed'] is True
    got = dict(((f['host'], f['component']), (f['expected'], f['found'], f['kind'])) for f in report['findings'])
    assert got[('host3', 'cuda_toolkit')] == ('12.4.1', '12.2.0', 'baseline')
    assert got[('host2', 'nccl')] == ('2.21.5-1+cuda12.4', '2.20.3-1+cuda12.4', 'majority')
    assert got[('host4', 'cuda_toolkit')] == ('12.4.1', None, 'unknown')
    assert report['baseline'] == {'explicit': {'cuda_toolkit': '12.4.1'}}
    assert report['groups'][drift.UNGROUPED]['nccl'] == {'2.21.5-1+cuda12.4': 2, '2.20.3-1+cuda12.4': 1}


def test_markdown_table_and_cap():
    hosts, findings, stats, summary = _sample()
    text = drift_reports.render_markdown(summary, findings, stats)
    assert text.startswith('# GPU stack drift audit: FAILED\n')
    assert '| critical | host3 | cuda_toolkit | 12.4.1 | 12.2.0 | baseline |' in text
    assert '| critical | host2 | nccl | 2.21.5-1+cuda12.4 | 2.20.3-1+cuda12.4 | majority |' in text
    # Host names are escaped text, not code spans (a backtick in a name would close the span).
    assert 'Hosts without facts (unreachable or not gathered): host4.' in text
    # A host without facts is one row, not one per component (drift.json keeps every cell); the raw
    # HTML of its message is shown as text (entities), never passed to a Markdown renderer.
    assert '| critical | host4 | all 3 checked | unreachable: &lt;ssh&gt; &amp; "timeout" | absent | unknown |' in text
    rows = [line for line in text.splitlines() if line.startswith('| critical')]
    assert len(rows) == 3
    capped = drift_reports.render_markdown(summary, findings, stats, max_rows=2)
    assert len([line for line in capped.splitlines() if line.startswith('| critical')]) == 2
    assert '1 more rows are in drift.json.' in capped


def test_markdown_escapes_pipes_and_passes():
    summary = drift.summarize(['a'], [], {'checks': {'a': ['kernel']}, 'distribution': {}})
    assert 'No drift' in drift_reports.render_markdown(summary, [], {'checks': {}, 'distribution': {}})
    finding = {'host': 'a|b', 'component': 'kernel', 'expected': 'x|y', 'found': None, 'kind': 'baseline',
               'severity': 'critical'}
    text = drift_reports.render_markdown(dict(summary, findings=1, failed=True), [finding], {})
    assert '| critical | a\\|b | kernel | x\\|y | absent | baseline |' in text


def test_summary_text_limits_lines():
    hosts, findings, stats, summary = _sample()
    lines = drift.summary_text(summary, findings, limit=2)
    assert lines[0].startswith('drift audit: 4 hosts, 12 checks, 5 findings (5 critical), 1 hosts without facts')
    assert lines[0].endswith('FAILED')
    assert len(lines) == 4 and lines[-1] == '... 1 more in the reports'
    lines = drift.summary_text(dict(summary, notes=['cache only']), findings)
    assert lines[1] == 'note: cache only'
    assert lines[-1] == 'CRITICAL host4 [unknown]: no facts for 3 components: unreachable: <ssh> & "timeout"'


def test_pin_origins_apply_where_installed_and_are_named():
    facts = {'a': {'slurm': None, 'nvidia_driver': '550.54.15-1'}, 'b': {'slurm': '23.11.10-1', 'nvidia_driver': '550.54.15-1'}}
    origins = dict((h, {'slurm': 'default of role slurm: slurm_version'}) for h in facts)
    baselines = dict((h, {'slurm': '22.05.8'}) for h in facts)
    findings, dummy = drift.audit(['a', 'b'], facts, baselines=baselines, consistent=[], pin_origins=origins)
    # a has no Slurm: a role default does not make it "missing"; b runs another version.
    assert [(f['host'], f['kind'], f['pin_origin']) for f in findings] == [
        ('b', 'baseline', 'default of role slurm: slurm_version')]
    assert findings[0]['message'].endswith('(default of role slurm: slurm_version)')
    # The same pin from the inventory (no origin) calls the absent component missing.
    findings, dummy = drift.audit(['a', 'b'], facts, baselines=baselines, consistent=[])
    assert sorted((f['host'], f['kind']) for f in findings) == [('a', 'missing'), ('b', 'baseline')]
    assert all('pin_origin' not in f for f in findings)


# ------------------------------------------------------------------ the swarm state

CLUSTER = 'w2s0d6tfqcgu8m2mjlsd5ca0r'
SWARM_MANAGERS = [{'node_id': '4vzgkl1ovjh5bfmd3hmk5o1xq', 'addr': '10.0.0.11:2377'}]


def swarm_state(state, **fields):
    value = {'state': state, 'role': '', 'availability': '', 'status': '', 'reachability': '', 'leader': False,
             'node_id': '', 'node_addr': '', 'cluster_id': '', 'managers': [], 'error': ''}
    value.update(fields)
    return value


def swarm_manager(cluster=CLUSTER, node='4vzgkl1ovjh5bfmd3hmk5o1xq', managers=None):
    return swarm_state('active', role='manager', availability='active', reachability='reachable', leader=True,
                       cluster_id=cluster, node_id=node, managers=managers or SWARM_MANAGERS)


def swarm_worker(managers=None):
    return swarm_state('active', role='worker', managers=managers or SWARM_MANAGERS)


def test_swarm_state_is_reported_not_compared_as_a_version():
    hosts = ['m1', 'w1', 'w2']
    facts = dict((h, facts_with()) for h in hosts)
    # gpu_stack.swarm differs on every host (manager, worker, drained): no finding, it is no version.
    facts['m1']['swarm'] = 'active/manager/active'
    facts['w1']['swarm'] = 'active/worker'
    swarm = {'m1': swarm_manager(), 'w1': swarm_worker(), 'w2': swarm_worker()}
    findings, stats = drift.audit(hosts, facts, consistent=list(STACK), swarm=swarm)
    assert findings == []
    assert stats['checks']['w1'] == ['kernel', 'cuda_toolkit', 'nccl', 'swarm']
    assert list(stats['swarm']) == hosts and stats['swarm']['m1']['cluster_id'] == CLUSTER
    # swarm can be neither pinned nor made consistent.
    with pytest.raises(drift.BaselineError, match="names unknown component 'swarm'"):
        drift.check_components(['swarm'], 'consistent')
    drift.check_components(['swarm'], 'severity', drift.SEVERITY_COMPONENTS)


def test_swarm_findings_join_the_audit():
    hosts = ['m1', 'w1', 'w2', 'w3', 'other', 'nodocker', 'old', 'down']
    facts = dict((h, facts_with()) for h in hosts)
    facts['down'] = None
    strangers = [{'node_id': 'b1n2m3k4j5h6g7f8d9s0a1q2w', 'addr': '10.0.9.1:2377'}]
    swarm = {'m1': swarm_manager(), 'w1': swarm_worker(), 'w2': swarm_worker(),
             'w3': swarm_state('inactive'), 'other': swarm_worker(strangers),
             'nodocker': swarm_state('absent'), 'down': swarm_worker()}
    findings, stats = drift.audit(hosts, facts, consistent=['kernel'], swarm=swarm,
                                  unknown_reasons={'down': 'unreachable'})
    got = sorted((f['host'], f['component'], f['kind'], f['severity'], f['expected'], f['found'])
                 for f in findings)
    assert got == [
        ('down', 'kernel', 'unknown', 'critical', None, None),
        ('other', 'swarm', 'majority', 'critical', 'cluster w2s0d6tfqcgu', 'managers 10.0.9.1:2377'),
        ('w3', 'swarm', 'majority', 'warning', 'active', 'inactive'),
    ]
    # A host without facts takes no part; one without docker is shown, not checked; one whose facts
    # predate the swarm state is shown as such.
    assert 'swarm' not in stats['checks']['down'] and 'swarm' not in stats['checks']['nodocker']
    assert list(stats['swarm']) == ['m1', 'w1', 'w2', 'w3', 'other', 'nodocker', 'old']
    assert stats['swarm']['old'] is None
    summary = drift.summarize(hosts, findings, stats, unknown_hosts=['down'])
    assert 'swarm' in summary['components']
    lines = drift.summary_text(summary, findings, stats=stats)
    at = lines.index('swarm state of 7 hosts:')
    assert lines[at + 1:] == [
        '  m1: active/manager/active, leader, reachable, cluster w2s0d6tfqcgu',
        '  w1: active/worker, managers 10.0.0.11:2377',
        '  w2: active/worker, managers 10.0.0.11:2377',
        '  w3: inactive',
        '  other: active/worker, managers 10.0.9.1:2377',
        '  nodocker: absent (no docker CLI)',
        '  old: not reported (its stack_facts predates the swarm state)',
    ]
    assert drift.summary_text(summary, findings, limit=2, stats=stats)[-1] == '  ... 5 more in the reports'


def test_no_swarm_lines_when_no_host_has_docker():
    hosts = ['a', 'b']
    facts = dict((h, facts_with()) for h in hosts)
    findings, stats = drift.audit(hosts, facts, swarm={'a': swarm_state('absent'), 'b': swarm_state('absent')})
    assert findings == [] and stats['swarm'] == {}
    summary = drift.summarize(hosts, findings, stats)
    assert not any(line.startswith('swarm') for line in drift.summary_text(summary, findings, stats=stats))
    assert 'swarm' not in summary['components']


def test_swarm_severity_ignore_and_groups():
    hosts = ['g1', 'g2', 'g3', 'login']
    facts = dict((h, facts_with()) for h in hosts)
    swarm = {'g1': swarm_worker(), 'g2': swarm_worker(), 'g3': swarm_state('locked', error='Swarm is encrypted'),
             'login': swarm_state('inactive')}
    groups = drift.partition_hosts(hosts, [('gpu', ['g1', 'g2', 'g3'])])
    findings, dummy = drift.audit(hosts, facts, consistent=[], groups=groups, swarm=swarm)
    # login is alone in its group: inactive there is no drift.
    assert [(f['host'], f['severity'], f['group']) for f in findings] == [('g3', 'warning', 'gpu')]
    assert findings[0]['message'] == ('swarm state locked (Swarm is encrypted) while 2 of 3 hosts with docker in '
                                      'gpu are active in a swarm')
    findings, dummy = drift.audit(hosts, facts, consistent=[], groups=groups, swarm=swarm,
                                  severity={'swarm': 'critical'})
    assert [f['severity'] for f in findings] == ['critical']
    findings, stats = drift.audit(hosts, facts, consistent=[], groups=groups, swarm=swarm, ignore=['g3:swarm'])
    assert findings == [] and 'g3' not in stats['swarm']
    findings, dummy = drift.audit(hosts, facts, consistent=[], groups=groups, swarm=swarm, ignore=['swarm'])
    assert findings == []


def test_swarm_facts_of_the_wrong_shape_are_unknown_for_swarm_alone():
    hosts = ['a', 'b']
    facts = dict((h, facts_with()) for h in hosts)
    findings, stats = drift.audit(hosts, facts, consistent=['kernel'], unknown_severity='warning',
                                  swarm={'a': {'state': 'active', 'managers': 'm1'}, 'b': swarm_worker()})
    assert [(f['host'], f['component'], f['kind'], f['severity'], f['scope'], f['message']) for f in findings] == [
        ('a', 'swarm', 'unknown', 'warning', 'component',
         'swarm state unknown: gpu_stack_details.swarm.managers has type str, expected a list')]
    assert stats['checks']['a'] == ['kernel', 'swarm']
    assert stats['swarm']['a']['state'] == 'unknown'


def test_swarm_in_the_reports(tmp_path):
    hosts = ['m1', 'w1', 'w2', 'w3']
    facts = dict((h, facts_with()) for h in hosts)
    swarm = {'m1': swarm_manager(), 'w1': swarm_worker(), 'w2': swarm_worker(), 'w3': swarm_state(
        'unknown', error='docker info failed (rc=1): Cannot connect to the Docker daemon')}
    findings, stats = drift.audit(hosts, facts, consistent=['kernel'], swarm=swarm)
    summary = drift.summarize(hosts, findings, stats)
    paths = drift_reports.write_reports(str(tmp_path), hosts, summary, findings, stats)
    with open(paths['json']) as handle:
        document = json.load(handle)
    assert document['swarm']['w3']['error'].startswith('docker info failed')
    assert document['swarm']['m1']['leader'] is True
    root = ET.parse(paths['junit']).getroot()
    failure = root.find("testsuite[@name='w3']/testcase[@name='swarm']/failure")
    assert failure.get('type') == 'warning:majority'
    assert failure.get('message') == 'majority drift: expected active, found unknown'
    assert root.find("testsuite[@name='w1']/testcase[@name='swarm']").find('failure') is None
    with open(paths['markdown']) as handle:
        text = handle.read()
    assert '## Docker Swarm' in text
    assert '| m1 | active | manager | active | reachable | yes | w2s0d6tfqcgu |  |' in text
    assert '| w1 | active | worker |  |  |  |  |  |' in text
    assert ('| w3 | unknown |  |  |  |  |  | docker info failed (rc=1): Cannot connect to the Docker daemon |'
            in text)
    assert '| warning | w3 | swarm | active | unknown | majority |' in text
    capped = drift_reports.render_markdown(summary, findings, stats, max_rows=1)
    assert '3 more hosts are in drift.json (swarm).' in capped
