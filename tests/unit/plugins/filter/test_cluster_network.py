# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible_collections.gpucluster.core.plugins.filter.cluster_network import cluster_address


def _facts(**ifaces):
    facts = {'interfaces': list(ifaces), 'hostname': 'node1', 'default_ipv4': {'address': '192.0.2.10'}}
    for name, (addr, mask) in ifaces.items():
        facts[name.replace('-', '_')] = {'device': name, 'ipv4': {'address': addr, 'netmask': mask}}
    facts['lo'] = {'device': 'lo', 'ipv4': {'address': '127.0.0.1', 'netmask': '255.0.0.0'}}
    return facts


ONE = _facts(eth0=('10.213.15.11', '255.255.255.0'))
TWO = _facts(eno1=('192.0.2.10', '255.255.255.0'), ib0=('10.10.3.7', '255.255.0.0'))


def test_single_candidate_needs_no_variable():
    r = cluster_address(ONE)
    assert (r['address'], r['network'], r['error']) == ('10.213.15.11', '10.213.15.0/24', '')


def test_two_candidates_require_the_cluster_network():
    r = cluster_address(TWO, prefix='monitoring_')
    assert r['address'] == ''
    assert 'monitoring_cluster_network' in r['error'] and '10.10.3.7' in r['error'] and '192.0.2.10' in r['error']


def test_cidr_picks_the_address_inside_it():
    r = cluster_address(TWO, network='10.10.0.0/16')
    assert (r['address'], r['network'], r['error']) == ('10.10.3.7', '10.10.0.0/16', '')


def test_interface_picks_its_address_and_network():
    r = cluster_address(TWO, interface='ib0')
    assert (r['address'], r['network'], r['error']) == ('10.10.3.7', '10.10.0.0/16', '')


def test_cidr_without_the_node_is_an_error_naming_the_variable():
    r = cluster_address(TWO, network='172.16.0.0/12', prefix='monitoring_')
    assert r['address'] == '' and r['error'].startswith('monitoring_cluster_network=172.16.0.0/12 contains none')


def test_explicit_address_outside_the_cidr_is_an_error():
    r = cluster_address(TWO, network='10.10.0.0/16', address='192.0.2.10', prefix='monitoring_')
    assert 'is not in monitoring_cluster_network' in r['error']


@pytest.mark.parametrize('bad', ['10.10.0.0/33', 'cluster', '10.10.0.0/16 ; drop'])
def test_bad_cidr(bad):
    assert 'is not a network in CIDR form' in cluster_address(TWO, network=bad)['error']


@pytest.mark.parametrize('bad', ['0.0.0.0', '::'])
def test_every_interface_is_refused(bad):
    assert 'every interface' in cluster_address(ONE, address=bad)['error']


def test_unknown_interface():
    assert "is not an interface of this host" in cluster_address(TWO, interface='eth9')['error']


def test_explicit_address_takes_its_interface_network():
    r = cluster_address(TWO, address='10.10.3.7')
    assert (r['address'], r['network'], r['error']) == ('10.10.3.7', '10.10.0.0/16', '')
