# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Choose the address a node's services bind to on the cluster network.

A server often has several networks (management, routed/public, cluster, container bridges). The
address of the default route is frequently the wrong one, so the roles pick the address from the
cluster network the site names, as a CIDR or an interface, and refuse to guess when a node has
more than one candidate.

Usage in a preflight (``facts`` is the host's ``ansible_facts`` with the network subset)::

    {{ ansible_facts | gpucluster.core.cluster_address(network=monitoring_cluster_network,
                                                        interface=monitoring_cluster_interface,
                                                        address=monitoring_listen_address,
                                                        prefix='monitoring_') }}

The result is a dict: ``address`` (the address to bind to), ``network`` (the cluster network as
a CIDR, for firewall rules), ``candidates`` (the addresses that were considered) and ``error`` (an
empty string, or a message naming the variable to set and what it accepts). Only the standard
library's ipaddress module is used, so the controller needs no extra package.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import ipaddress

from collections.abc import Mapping

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - only without ansible-core installed
    class AnsibleFilterError(Exception):
        pass


def _text(value):
    return value if isinstance(value, str) else ('' if value is None else str(value))


def _interfaces(facts):
    """Yield (device, [(address, prefix length), ...]) for every interface in the facts."""
    for value in facts.values():
        if not isinstance(value, Mapping) or 'device' not in value:
            continue
        entries = []
        ipv4 = value.get('ipv4')
        if isinstance(ipv4, Mapping) and ipv4.get('address'):
            entries.append(ipv4)
        for extra in value.get('ipv4_secondaries') or []:
            if isinstance(extra, Mapping) and extra.get('address'):
                entries.append(extra)
        for extra in value.get('ipv6') or []:
            if isinstance(extra, Mapping) and extra.get('address'):
                entries.append(extra)
        addresses = []
        for entry in entries:
            try:
                if 'netmask' in entry:
                    iface = ipaddress.ip_interface('%s/%s' % (entry['address'], entry['netmask']))
                else:
                    iface = ipaddress.ip_interface('%s/%s' % (entry['address'], entry.get('prefix', '128')))
            except ValueError:
                continue
            addresses.append(iface)
        yield _text(value['device']), addresses


def _usable(iface):
    ip = iface.ip
    return not (ip.is_loopback or ip.is_link_local or ip.is_multicast or ip.is_unspecified)


def cluster_address(facts, network='', interface='', address='', prefix=''):
    """Return {'address', 'network', 'candidates', 'error'} for this host's cluster network."""
    if not isinstance(facts, Mapping):
        raise AnsibleFilterError('cluster_address: expects the host facts (a dict), got %s' % type(facts).__name__)
    network, interface, address = _text(network).strip(), _text(interface).strip(), _text(address).strip()
    var_network, var_interface, var_address = prefix + 'cluster_network', prefix + 'cluster_interface', prefix + 'listen_address'
    result = {'address': '', 'network': '', 'candidates': [], 'error': ''}

    def fail(message):
        result['error'] = message
        return result

    net = None
    if network:
        try:
            net = ipaddress.ip_network(network, strict=False)
        except ValueError:
            return fail("%s='%s' is not a network in CIDR form (for example 10.10.0.0/16 or fd00:10::/64)." % (var_network, network))
    ifaces = dict(_interfaces(facts))
    every = [i for device in sorted(ifaces) for i in ifaces[device] if _usable(i)]

    if address:
        try:
            ip = ipaddress.ip_address(address.strip('[]'))
        except ValueError:
            return fail("%s='%s' is not an IPv4 or IPv6 address." % (var_address, address))
        if ip.is_unspecified:
            return fail("%s='%s' would listen on every interface: give the node's address on the cluster network." % (var_address, address))
        result['candidates'] = [str(ip)]
        if net is not None:
            if ip.version != net.version or ip not in net:
                return fail("%s=%s is not in %s=%s: the cluster network must contain the node's address."
                            % (var_address, ip, var_network, net))
            result.update(address=str(ip), network=str(net))
            return result
        on_iface = [i for i in every if i.ip == ip]
        if not on_iface:
            return fail("%s=%s is on none of this host's interfaces (%s), so its network is unknown: set %s to the cluster "
                        "network's CIDR as well." % (var_address, ip, ', '.join(str(i.ip) for i in every) or 'none found', var_network))
        result.update(address=str(ip), network=str(on_iface[0].network))
        return result

    if interface:
        if interface not in ifaces:
            return fail("%s='%s' is not an interface of this host (it has: %s)." % (var_interface, interface, ', '.join(sorted(ifaces))))
        found = [i for i in ifaces[interface] if _usable(i) and (net is None or (i.version == net.version and i.ip in net))]
        if net is None:
            found = [i for i in found if i.version == 4] or found
        result['candidates'] = [str(i.ip) for i in found]
        if not found:
            return fail("Interface %s has no usable address%s." % (interface, (' in %s=%s' % (var_network, net)) if net else ''))
        result.update(address=str(found[0].ip), network=str(net if net is not None else found[0].network))
        return result

    if net is not None:
        found = [i for i in every if i.version == net.version and i.ip in net]
        result['candidates'] = [str(i.ip) for i in found]
        if not found:
            return fail("%s=%s contains none of this host's addresses (%s): the cluster network must contain the node's address."
                        % (var_network, net, ', '.join(str(i.ip) for i in every) or 'none found'))
        if len(set(i.ip for i in found)) > 1:
            return fail("%s=%s contains several addresses of this host (%s): set %s or %s to choose one."
                        % (var_network, net, ', '.join(result['candidates']), var_interface, var_address))
        result.update(address=str(found[0].ip), network=str(net))
        return result

    found = [i for i in every if i.version == 4]
    result['candidates'] = sorted(set(str(i.ip) for i in found))
    if len(result['candidates']) == 1:
        result.update(address=str(found[0].ip), network=str(found[0].network))
        return result
    return fail("This host has %s IPv4 address candidates (%s): set %s (a CIDR such as 10.10.0.0/16) or %s (an interface "
                "name) to the cluster network its services bind to." % (
                    'no' if not found else len(result['candidates']), ', '.join(result['candidates']) or 'none',
                    var_network, var_interface))


class FilterModule(object):
    def filters(self):
        return {
            'cluster_address': cluster_address,
        }
