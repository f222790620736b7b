# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Render the monitoring role's Alertmanager command line with Ansible's own templar: with two monitoring
servers each Alertmanager lists the other as its cluster peer. Ansible's templating keeps a backslash
pair in a Jinja string as two characters, so a regex replacement written '\\\\1' would put a literal
backslash into the peer address; only a rendering by Ansible shows that."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
ROLE = os.path.join(REPO, 'roles', 'monitoring')


def _load(*parts):
    with open(os.path.join(ROLE, *parts)) as handle:
        return yaml.safe_load(handle)


def _alertmanager_args(render, servers, peers):
    variables = dict(_load('defaults', 'main.yml'))
    variables.update(_load('vars', 'main.yml'))
    variables.update({
        'inventory_hostname': servers[0],
        'groups': {variables['monitoring_server_group']: servers},
        '__monitoring_address': '10.0.0.1',
        # Stands for the hostvars lookup of the other servers' addresses.
        '__monitoring_alertmanager_peer_addresses': peers,
    })
    return render(variables, variables['__monitoring_alertmanager_args'])


def test_two_servers_name_each_other_as_cluster_peers(ansible_render):
    args = _alertmanager_args(ansible_render, ['mon1', 'mon2'], ['10.0.0.2'])
    port = _load('defaults', 'main.yml')['monitoring_alertmanager_cluster_port']
    assert '--cluster.peer=10.0.0.2:%s' % port in args, args
    assert '--cluster.listen-address=10.0.0.1:%s' % port in args, args
    assert not [a for a in args if '\\' in a], args


def test_one_server_turns_clustering_off(ansible_render):
    args = _alertmanager_args(ansible_render, ['mon1'], [])
    assert '--cluster.listen-address=' in args, args
    assert not [a for a in args if a.startswith('--cluster.peer')], args
