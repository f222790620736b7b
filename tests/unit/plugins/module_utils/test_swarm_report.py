# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The swarm state as stack_facts reports it (docker info, docker node inspect self) and the drift
audit's swarm rules, on the fixtures in tests/unit/fixtures/swarm (INDEX.md says what each holds)."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os

import pytest

from ansible_collections.gpucluster.core.plugins.module_utils import swarm_report as sr

CLUSTER = 'w2s0d6tfqcgu8m2mjlsd5ca0r'
MANAGERS = [{'node_id': '4vzgkl1ovjh5bfmd3hmk5o1xq', 'addr': '10.0.0.11:2377'},
            {'node_id': 'h7d2k9s4m1x8c5v3b6n0q2w4e', 'addr': '10.0.0.12:2377'},
            {'node_id': 'z3c8v1b6n4m9q2w7e5r0t3y8u', 'addr': '10.0.0.13:2377'}]


def fixture(own_fixtures_dir, name):
    with open(os.path.join(own_fixtures_dir, 'swarm', name)) as handle:
        return handle.read()


# ------------------------------------------------------------------ docker info

def test_inactive(own_fixtures_dir):
    report = sr.from_info(fixture(own_fixtures_dir, 'info_inactive_20.10.json'))
    assert report == sr.empty('inactive')
    assert sr.summary(report) == 'inactive'
    assert not sr.needs_node_inspect(report)


def test_worker(own_fixtures_dir):
    report = sr.from_info(fixture(own_fixtures_dir, 'info_worker_26.json'))
    assert report['state'] == 'active' and report['role'] == 'worker'
    assert report['node_id'] == 'q8m1v4c2x7d9k3p5r6t0y2u4a' and report['node_addr'] == '10.0.0.14'
    # A worker knows no cluster id, only its managers (sorted by address).
    assert report['cluster_id'] == ''
    assert report['managers'] == MANAGERS
    assert report['availability'] == '' and report['leader'] is False and report['error'] == ''
    assert sr.summary(report) == 'active/worker'
    # A worker cannot inspect itself: the module does not ask.
    assert not sr.needs_node_inspect(report)


def test_manager_leader(own_fixtures_dir):
    report = sr.from_info(fixture(own_fixtures_dir, 'info_manager_leader_26.json'))
    assert (report['state'], report['role'], report['cluster_id']) == ('active', 'manager', CLUSTER)
    assert report['managers'] == MANAGERS
    assert sr.needs_node_inspect(report)
    report = sr.with_node(report, fixture(own_fixtures_dir, 'node_inspect_leader_26.json'))
    assert report == {
        'state': 'active', 'role': 'manager', 'availability': 'active', 'status': 'ready',
        'reachability': 'reachable', 'leader': True, 'node_id': '4vzgkl1ovjh5bfmd3hmk5o1xq',
        'node_addr': '10.0.0.11', 'cluster_id': CLUSTER, 'managers': MANAGERS, 'error': ''}
    assert sr.summary(report) == 'active/manager/active'
    assert sr.line(report) == 'active/manager/active, leader, reachable, cluster w2s0d6tfqcgu'


def test_drained_manager_that_is_not_the_leader(own_fixtures_dir):
    info = json.loads(fixture(own_fixtures_dir, 'info_manager_leader_26.json'))
    info['Swarm']['NodeID'] = 'h7d2k9s4m1x8c5v3b6n0q2w4e'
    report = sr.with_node(sr.from_info(json.dumps(info)), fixture(own_fixtures_dir, 'node_inspect_manager_drain_26.json'))
    assert (report['availability'], report['leader'], report['reachability']) == ('drain', False, 'reachable')
    assert sr.summary(report) == 'active/manager/drain'
    assert report['error'] == ''


def test_node_inspect_without_format_is_a_list(own_fixtures_dir):
    info = sr.from_info(fixture(own_fixtures_dir, 'info_manager_leader_26.json'))
    listed = '[%s]' % fixture(own_fixtures_dir, 'node_inspect_leader_26.json')
    assert sr.with_node(info, listed)['leader'] is True


def test_node_inspect_of_another_node_is_named(own_fixtures_dir):
    info = sr.from_info(fixture(own_fixtures_dir, 'info_manager_leader_26.json'))
    report = sr.with_node(info, fixture(own_fixtures_dir, 'node_inspect_manager_drain_26.json'))
    assert report['error'] == ('docker node inspect self answered for node h7d2k9s4m1x8c5v3b6n0q2w4e, '
                               'docker info names node 4vzgkl1ovjh5bfmd3hmk5o1xq')


def test_locked(own_fixtures_dir):
    report = sr.from_info(fixture(own_fixtures_dir, 'info_locked_26.json'))
    assert (report['state'], report['role'], report['node_id']) == ('locked', '', '')
    assert report['error'] == ('Swarm is encrypted and needs to be unlocked before it can be used. '
                               'Please use "docker swarm unlock" to unlock it.')
    assert sr.summary(report) == 'locked'
    assert not sr.needs_node_inspect(report)


def test_error(own_fixtures_dir):
    report = sr.from_info(fixture(own_fixtures_dir, 'info_error_20.10.json'))
    assert report['state'] == 'error' and report['node_addr'] == '10.0.0.19'
    assert report['error'].startswith('rpc error: code = Unavailable desc = connection error')
    assert sr.summary(report) == 'error'
    assert sr.line(report).startswith('error (rpc error: code = Unavailable')


def test_daemon_down_is_unknown_with_the_cli_message(own_fixtures_dir):
    # The CLI prints its JSON with empty server fields and exits 1; the module passes the failure on.
    why = 'docker info failed (rc=1): Cannot connect to the Docker daemon at unix:///var/run/docker.sock.'
    report = sr.from_info(fixture(own_fixtures_dir, 'info_daemon_down_28.json'), why)
    assert report == dict(sr.empty('unknown'), error=why)
    assert sr.summary(report) == 'unknown'
    # Even read without the exit status, an empty LocalNodeState is no state.
    report = sr.from_info(fixture(own_fixtures_dir, 'info_daemon_down_28.json'))
    assert report['state'] == 'unknown'
    assert report['error'] == ("docker info reports the swarm state ''; expected one of inactive, pending, "
                               "active, error, locked")


@pytest.mark.parametrize('text, error', [
    ('', 'docker info printed nothing'),
    ('Error: no such command', 'docker info did not print JSON (Expecting value: line 1 column 1 (char 0)): '
                               'Error: no such command'),
    ('[1, 2]', 'docker info printed JSON list, expected an object'),
    ('{"ServerVersion": "26.1.4"}', 'docker info has no Swarm section (is this a Docker engine?)'),
    ('{"ServerErrors": ["permission denied while trying to connect"], "Swarm": {"LocalNodeState": "inactive"}}',
     'docker info: permission denied while trying to connect'),
    ('{"Swarm": {"LocalNodeState": "exploded"}}',
     "docker info reports the swarm state 'exploded'; expected one of inactive, pending, active, error, locked"),
    ('{"Swarm": {"LocalNodeState": ["x"]}}',
     "docker info reports the swarm state ['x']; expected one of inactive, pending, active, error, locked"),
    ('[' * 100000 + ']' * 100000, 'docker info printed JSON nested too deeply to read'),
])
def test_info_that_cannot_be_read_is_unknown_with_the_reason(text, error):
    report = sr.from_info(text)
    assert report['state'] == 'unknown' and report['error'] == error


def test_failed_node_inspect_keeps_what_docker_info_said(own_fixtures_dir):
    info = sr.from_info(fixture(own_fixtures_dir, 'info_manager_leader_26.json'))
    report = sr.with_node(info, '', 'docker node inspect self failed (rc=1): Error response from daemon: '
                                    'rpc error: code = Unknown desc = The swarm does not have a leader.')
    assert (report['state'], report['role'], report['cluster_id']) == ('active', 'manager', CLUSTER)
    assert report['availability'] == '' and report['leader'] is False
    assert report['error'] == ('docker node inspect self: docker node inspect self failed (rc=1): Error response '
                               'from daemon: rpc error: code = Unknown desc = The swarm does not have a leader.')
    assert sr.summary(report) == 'active/manager'


def test_long_error_text_is_cut():
    report = sr.from_info('', 'x' * 5000)
    assert len(report['error']) == sr.ERROR_MAX_CHARS + 3 and report['error'].endswith('...')


def test_absent():
    assert sr.summary(sr.absent()) is None and sr.summary(None) is None
    assert sr.line(sr.absent()) == 'absent (no docker CLI)'


# ------------------------------------------------------------------ facts read back

def test_check_report_accepts_what_from_info_gives(own_fixtures_dir):
    report = sr.with_node(sr.from_info(fixture(own_fixtures_dir, 'info_manager_leader_26.json')),
                          fixture(own_fixtures_dir, 'node_inspect_leader_26.json'))
    assert sr.check_report(json.loads(json.dumps(report))) == (report, None)
    # Keys added later or left out by an older writer are empty.
    assert sr.check_report({'state': 'inactive'}) == (sr.empty('inactive'), None)


@pytest.mark.parametrize('value, reason', [
    (['active'], 'gpu_stack_details.swarm has type list, expected a mapping'),
    ({'state': 'sleeping'}, "gpu_stack_details.swarm.state is 'sleeping'; expected one of inactive, pending, "
                            "active, error, locked, unknown, absent"),
    ({'state': 'active', 'role': 'boss'}, "gpu_stack_details.swarm.role is 'boss'; expected manager, worker or empty"),
    ({'state': 'active', 'cluster_id': 7}, 'gpu_stack_details.swarm.cluster_id has type int, expected a string'),
    ({'state': 'active', 'leader': 'yes'}, 'gpu_stack_details.swarm.leader has type str, expected a boolean'),
    ({'state': 'active', 'managers': 'm1'}, 'gpu_stack_details.swarm.managers has type str, expected a list'),
    ({'state': 'active', 'managers': ['m1']},
     'gpu_stack_details.swarm.managers[0] has type str, expected a mapping'),
    ({'state': 'active', 'managers': [{'node_id': 3}]},
     'gpu_stack_details.swarm.managers[0].node_id has type int, expected a string'),
    ({'state': 'active', 'error': 'bad \udcff'}, 'gpu_stack_details.swarm.error holds bytes that are not valid UTF-8'),
])
def test_check_report_names_what_is_wrong(value, reason):
    assert sr.check_report(value) == (None, reason)


# ------------------------------------------------------------------ the drift rules

def manager(cluster=CLUSTER, node='4vzgkl1ovjh5bfmd3hmk5o1xq', managers=None, availability='active'):
    return dict(sr.empty('active'), role='manager', cluster_id=cluster, node_id=node, availability=availability,
                managers=MANAGERS if managers is None else managers)


def worker(managers=None):
    return dict(sr.empty('active'), role='worker', managers=MANAGERS if managers is None else managers)


def state(name, error=''):
    return dict(sr.empty(name), error=error)


def cells(findings):
    return sorted((f['host'], f['rule'], f['severity'], f['expected'], f['found']) for f in findings)


def test_one_swarm_no_findings():
    reports = {'m1': manager(), 'm2': manager(node='h7d2k9s4m1x8c5v3b6n0q2w4e'), 'w1': worker(), 'w2': worker()}
    assert sr.swarm_findings(list(reports), reports) == []


def test_all_inactive_no_findings():
    reports = dict((h, state('inactive')) for h in ('n1', 'n2', 'n3'))
    assert sr.swarm_findings(list(reports), reports) == []


def test_managers_of_two_clusters():
    other = [{'node_id': 'p9o8i7u6y5t4r3e2w1q0a9s8d', 'addr': '10.0.1.11:2377'}]
    reports = {'m1': manager(), 'w1': worker(), 'w2': worker(),
               'm9': manager(cluster='k1j2h3g4f5d6s7a8p9o0i1u2y', node='p9o8i7u6y5t4r3e2w1q0a9s8d', managers=other)}
    findings = sr.swarm_findings(['m1', 'w1', 'w2', 'm9'], reports)
    assert cells(findings) == [('m9', 'cluster', 'critical', 'cluster w2s0d6tfqcgu', 'cluster k1j2h3g4f5d6')]
    assert findings[0]['message'] == ('swarm: m9 is in the swarm of cluster k1j2h3g4f5d6; 3 of 4 hosts active in a '
                                      'swarm are in the swarm of cluster w2s0d6tfqcgu')
    assert findings[0]['component'] == 'swarm' and findings[0]['kind'] == 'majority'


def test_worker_whose_managers_are_not_the_clusters():
    strangers = [{'node_id': 'b1n2m3k4j5h6g7f8d9s0a1q2w', 'addr': '10.0.9.1:2377'}]
    reports = {'m1': manager(), 'w1': worker(), 'w2': worker(strangers)}
    assert cells(sr.swarm_findings(['m1', 'w1', 'w2'], reports)) == [
        ('w2', 'cluster', 'critical', 'cluster w2s0d6tfqcgu', 'managers 10.0.9.1:2377')]


def test_workers_alone_are_compared_by_their_managers():
    # No manager in the audit (the managers are not GPU nodes): workers that know the same managers
    # are one swarm, even when each knows only some of them.
    reports = {'w1': worker(MANAGERS[:2]), 'w2': worker(MANAGERS[1:]), 'w3': worker(MANAGERS[2:])}
    assert sr.swarm_findings(['w1', 'w2', 'w3'], reports) == []
    reports['w4'] = worker([{'node_id': 'b1n2m3k4j5h6g7f8d9s0a1q2w', 'addr': '10.0.9.1:2377'}])
    assert [f['host'] for f in sr.swarm_findings(['w1', 'w2', 'w3', 'w4'], reports)] == ['w4']


def test_two_swarms_of_equal_size_report_every_host():
    other = [{'node_id': 'p9o8i7u6y5t4r3e2w1q0a9s8d', 'addr': '10.0.1.11:2377'}]
    reports = {'a': manager(), 'b': manager(cluster='k1j2h3g4f5d6s7a8p9o0i1u2y', node=other[0]['node_id'],
                                            managers=other)}
    findings = sr.swarm_findings(['a', 'b'], reports)
    expected = 'no majority (cluster k1j2h3g4f5d6 on 1, cluster w2s0d6tfqcgu on 1)'
    assert cells(findings) == [('a', 'cluster', 'critical', expected, 'cluster w2s0d6tfqcgu'),
                               ('b', 'cluster', 'critical', expected, 'cluster k1j2h3g4f5d6')]


def test_a_host_out_of_the_swarm_of_its_group():
    reports = {'n1': worker(), 'n2': worker(), 'n3': state('inactive'), 'n4': state('locked', 'Swarm is encrypted')}
    findings = sr.swarm_findings(['n1', 'n2', 'n3', 'n4'], reports)
    expected = 'no majority (active on 2, inactive on 1, locked on 1)'
    # Two in, two out: a tie, every host is reported.
    assert cells(findings) == [(h, 'membership', 'warning', expected, reports[h]['state'])
                               for h in ('n1', 'n2', 'n3', 'n4')]
    reports['n5'] = worker()
    findings = sr.swarm_findings(['n1', 'n2', 'n3', 'n4', 'n5'], reports)
    assert cells(findings) == [('n3', 'membership', 'warning', 'active', 'inactive'),
                               ('n4', 'membership', 'warning', 'active', 'locked')]
    by_host = dict((f['host'], f['message']) for f in findings)
    assert by_host['n4'] == ('swarm state locked (Swarm is encrypted) while 3 of 5 hosts with docker in (ungrouped) are '
                             'active in a swarm')


def test_one_host_in_a_swarm_while_its_group_is_not():
    reports = {'n1': state('inactive'), 'n2': state('inactive'), 'n3': worker()}
    findings = sr.swarm_findings(['n1', 'n2', 'n3'], reports, {'n1': 'gpu', 'n2': 'gpu', 'n3': 'gpu'})
    assert cells(findings) == [('n3', 'membership', 'warning', 'inactive', 'active')]
    assert findings[0]['message'] == ('swarm state active (active/worker) while 2 of 3 hosts with docker in gpu are '
                                      'not in a swarm (inactive on 2)')


def test_membership_is_compared_per_group_and_without_absent_hosts():
    reports = {'g1': worker(), 'g2': worker(), 'login': state('inactive'), 'db': sr.absent()}
    groups = {'g1': 'gpu', 'g2': 'gpu', 'login': 'other', 'db': 'other'}
    assert sr.swarm_findings(['g1', 'g2', 'login', 'db'], reports, groups) == []


def test_docker_that_did_not_answer_counts_as_out_of_the_swarm():
    reports = {'n1': worker(), 'n2': worker(), 'n3': state('unknown', 'docker info failed (rc=1): Cannot connect')}
    findings = sr.swarm_findings(['n1', 'n2', 'n3'], reports)
    assert cells(findings) == [('n3', 'membership', 'warning', 'active', 'unknown')]
    assert 'Cannot connect' in findings[0]['message']


def test_a_host_reported_by_both_rules_gets_one_finding():
    strangers = [{'node_id': 'b1n2m3k4j5h6g7f8d9s0a1q2w', 'addr': '10.0.9.1:2377'}]
    reports = {'n1': state('inactive'), 'n2': state('inactive'), 'n3': worker(), 'n4': worker(strangers),
               'n5': state('inactive')}
    findings = sr.swarm_findings(['n1', 'n2', 'n3', 'n4', 'n5'], reports)
    # n3 and n4 are the active minority; their swarms differ too (one each: a tie, both reported).
    assert [(f['host'], f['rule']) for f in findings] == [('n3', 'cluster'), ('n4', 'cluster')]
    assert 'while 3 of 5 hosts with docker in (ungrouped) are not in a swarm' in findings[0]['message']
    assert findings[0]['message'].startswith('swarm: the hosts of this audit are in 2 different swarms')


def test_severity_override_applies_to_both_rules():
    reports = {'n1': worker(), 'n2': worker(), 'n3': state('inactive')}
    assert [f['severity'] for f in sr.swarm_findings(['n1', 'n2', 'n3'], reports, severity='info')] == ['info']


def test_active_host_without_managers_is_not_guessed_into_a_swarm():
    reports = {'m1': manager(), 'w1': worker([])}
    assert sr.swarm_findings(['m1', 'w1'], reports) == []
