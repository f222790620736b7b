# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Render the monitoring role's Alertmanager command line with Ansible's own templar: with two monitoring
servers each Alertmanager lists the other as its cluster peer. Ansible's templating keeps a backslash
pair in a Jinja string as two characters, so a regex replacement written '\\\\1' would put a literal
backslash into the peer address; only a rendering by Ansible shows that."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os

import yaml

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

try:  # ansible-core >= 2.19 templates only trusted strings
    from ansible.template import trust_as_template
except ImportError:  # pragma: no cover
    def trust_as_template(value):
        return value

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
ROLE = os.path.join(REPO, 'roles', 'monitoring')


def _trust(value):
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return dict((k, _trust(v)) for k, v in value.items())
    if isinstance(value, list):
        return [_trust(v) for v in value]
    return value


def _load(*parts):
    with open(os.path.join(ROLE, *parts)) as handle:
        return _trust(yaml.safe_load(handle))


def _alertmanager_args(servers, peers):
    variables = dict(_load('defaults', 'main.yml'))
    variables.update(_load('vars', 'main.yml'))
    variables.update({
        'inventory_hostname': servers[0],
        'groups': {variables['monitoring_server_group']: servers},
        '__monitoring_address': '10.0.0.1',
        # Stands for the hostvars lookup of the other servers' addresses.
        '__monitoring_alertmanager_peer_addresses': peers,
    })
    templar = Templar(loader=DataLoader(), variables=variables)
    return templar.template(variables['__monitoring_alertmanager_args'])


def test_two_servers_name_each_other_as_cluster_peers():
    args = _alertmanager_args(['mon1', 'mon2'], ['10.0.0.2'])
    port = yaml.safe_load(open(os.path.join(ROLE, 'defaults', 'main.yml')))['monitoring_alertmanager_cluster_port']
    assert '--cluster.peer=10.0.0.2:%s' % port in args, args
    assert '--cluster.listen-address=10.0.0.1:%s' % port in args, args
    assert not [a for a in args if '\\' in a], args


def test_one_server_turns_clustering_off():
    args = _alertmanager_args(['mon1'], [])
    assert '--cluster.listen-address=' in args, args
    assert not [a for a in args if a.startswith('--cluster.peer')], args
