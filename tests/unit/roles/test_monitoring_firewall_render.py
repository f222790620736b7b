# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The monitoring role's nftables table on a Slurm and on a Docker Swarm cluster, rendered with Ansible's templar
and the collection's filters from the role's own defaults and vars: Swarm's TCP ports (2377, 7946) join the Slurm and
monitoring ports, and its UDP ports (VXLAN 4789, gossip 7946) get a set and rules of their own, admitted from the
cluster network only. The ports come from the one table of them (module_utils/swarm.py PORTS), with or without the
swarm role's variables. Where nft is installed and this runs as root, `nft -c` checks the rendered table as the
role's validate does."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import shutil
import subprocess
import tempfile

import pytest
import yaml

from ansible_collections.gpucluster.core.plugins.module_utils import swarm as sw

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
ROLE = os.path.join(REPO, 'roles', 'monitoring')


# The defaults call the collection's filters (gpucluster.core.swarm_ports), rendered by a child process (the
# served_render fixture of tests/unit/conftest.py).
@pytest.fixture(scope='module')
def render(served_render):
    return served_render


def load(*parts):
    with open(os.path.join(ROLE, *parts)) as handle:
        return yaml.safe_load(handle)


def render_table(render, scheduler):
    variables = dict(load('defaults', 'main.yml'))
    variables.update(load('vars', 'main.yml'))
    variables.update({
        'gpucluster_scheduler': scheduler,
        'inventory_hostname': 'node1',
        'groups': {'monitoring': ['node1'], 'gpu_nodes': ['node1']},
        '__monitoring_is_gpu_node': True,
        '__monitoring_is_server': False,
        '__monitoring_net': {'address': '10.0.0.1', 'network': '10.0.0.0/24'},
        'ansible_managed': 'managed by gpucluster.core',
    })
    with open(os.path.join(ROLE, 'templates', 'firewall.nft.j2')) as handle:
        return render(variables, handle.read())


def nft_check(text):
    nft = shutil.which('nft') or ('/usr/sbin/nft' if os.path.exists('/usr/sbin/nft') else None)
    if not nft or os.geteuid() != 0:
        return None
    with tempfile.NamedTemporaryFile('w', suffix='.nft', delete=False) as handle:
        handle.write(text)
    try:
        return subprocess.run([nft, '-c', '-f', handle.name], capture_output=True, text=True, timeout=30, check=False)
    finally:
        os.unlink(handle.name)


def test_slurm_cluster_has_no_udp_rules(render):
    text = render_table(render, 'slurm')
    assert 'elements = { 6817, 6818, 6819, 9100 }' in text, text
    assert 'udp' not in text, text
    checked = nft_check(text)
    if checked is not None:
        assert checked.returncode == 0, checked.stderr


def test_swarm_cluster_admits_its_ports_from_the_cluster_network_only(render):
    text = render_table(render, 'swarm')
    assert 'elements = { 2377, 6817, 6818, 6819, 7946, 9100 }' in text, text
    assert 'set udp_ports {' in text and 'elements = { 4789, 7946 }' in text, text
    assert 'udp dport @udp_ports ip saddr @cluster_v4 accept' in text, text
    # the drop comes after the accept of the cluster network
    assert text.index('udp dport @udp_ports ip saddr @cluster_v4 accept') < text.index('udp dport @udp_ports counter drop')
    checked = nft_check(text)
    if checked is not None:
        assert checked.returncode == 0, checked.stderr


@pytest.mark.parametrize('scheduler', ['slurm', 'swarm'])
def test_swarm_port_follows_the_swarm_role(render, scheduler):
    variables = dict(load('defaults', 'main.yml'))
    variables.update({'gpucluster_scheduler': scheduler, 'swarm_port': 2400})
    ports = render(variables, variables['monitoring_firewall_swarm_ports'])
    assert ports == ([2400, 7946] if scheduler == 'swarm' else [])
    assert render(variables, variables['monitoring_firewall_udp_ports']) == ([4789, 7946] if scheduler == 'swarm' else [])


def test_swarm_ports_come_from_the_one_table_without_the_swarm_role(render):
    """The monitoring role alone (no swarm_port): the control plane's port is the table's, as the swarm role's default."""
    variables = dict(load('defaults', 'main.yml'), gpucluster_scheduler='swarm')
    assert render(variables, variables['monitoring_firewall_swarm_ports']) == sw.ports('tcp') == [2377, 7946]
    assert render(variables, variables['monitoring_firewall_udp_ports']) == sw.ports('udp') == [4789, 7946]
    with open(os.path.join(REPO, 'roles', 'swarm', 'defaults', 'main.yml')) as handle:
        swarm_defaults = yaml.safe_load(handle)
    swarm_port = render({}, swarm_defaults['swarm_port'])
    assert swarm_port == sw.default_port('control') == 2377
    # with the swarm role's default in the play, the same ports
    variables['swarm_port'] = swarm_port
    assert render(variables, variables['monitoring_firewall_swarm_ports']) == [2377, 7946]


def test_swarm_port_on_the_gossip_port_is_refused(render):
    variables = dict(load('defaults', 'main.yml'), gpucluster_scheduler='swarm', swarm_port=7946)
    with pytest.raises(render.Error, match="swarm_ports: swarm_port = 7946 is Swarm's gossip port"):
        render(variables, variables['monitoring_firewall_swarm_ports'])
