# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Probe TCP ports of a host from this node's own address and from an extra one outside the network.

Usage: port_probe.py TARGET OUTSIDE_ADDRESS PORT...

Adds OUTSIDE_ADDRESS to the interface that reaches TARGET (the lab bridge), connects to each port
from the node's own address ("inside") and from OUTSIDE_ADDRESS ("outside"), then removes the
address again. One line per probe: "inside|outside PORT open|refused|dropped"; dropped means no
answer within the timeout (a firewall drop), refused a TCP reset (the packet reached the host).
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import errno
import socket
import subprocess
import sys

TIMEOUT = 3.0


def probe(target, port, source=None):
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(TIMEOUT)
    try:
        if source:
            sock.bind((source, 0))
        sock.connect((target, port))
        return 'open'
    except socket.timeout:
        return 'dropped'
    except socket.error as exc:
        if exc.errno == errno.ECONNREFUSED:
            return 'refused'
        return 'error-%s' % exc.errno
    finally:
        sock.close()


def main(argv):
    if len(argv) < 4:
        sys.stderr.write(__doc__)
        return 2
    target, outside, ports = argv[1], argv[2], [int(port) for port in argv[3:]]
    route = subprocess.check_output(['ip', '-o', 'route', 'get', target]).decode().split()
    device = route[route.index('dev') + 1]
    subprocess.check_call(['ip', 'address', 'add', outside + '/32', 'dev', device])
    try:
        for port in ports:
            print('inside %d %s' % (port, probe(target, port)))
        for port in ports:
            print('outside %d %s' % (port, probe(target, port, outside)))
    finally:
        subprocess.check_call(['ip', 'address', 'del', outside + '/32', 'dev', device])
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
