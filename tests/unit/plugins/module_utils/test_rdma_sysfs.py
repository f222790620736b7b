# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""rdma_sysfs against sysfs trees built from every real ibstat/ibstatus/ibv_devinfo recording and from our own trees.

The recordings are tool output, not sysfs: :func:`recording_model` reads each one into the values
the kernel keeps per HCA and port, and :func:`write_tree` writes those values the way the kernel
prints them under /sys/class/infiniband. Where a tool prints less than sysfs holds, the tree holds
less (and the parser must say so); the few translations are listed in the functions below.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import glob
import json
import os
import re
import struct

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ansible_collections.gpucluster.core.plugins.module_utils import rdma_sysfs

STATE_CODES = {'NOP': 0, 'DOWN': 1, 'INIT': 2, 'ARMED': 3, 'ACTIVE': 4, 'ACTIVE_DEFER': 5}
PHYS_CODES = {'Sleep': 1, 'Polling': 2, 'Disabled': 3, 'PortConfigurationTraining': 4, 'LinkUp': 5,
              'LinkErrorRecovery': 6, 'Phy Test': 7}
PHYS_NAMES = dict((v, k) for k, v in PHYS_CODES.items())
# ibstat prints port states in its own words.
IBSTAT_STATES = {'Active': 'ACTIVE', 'Down': 'DOWN', 'Initializing': 'INIT', 'Armed': 'ARMED'}
# ibstat prints only the total rate. sysfs prints "<total> Gb/sec (<width>X <speed>)"; the width and
# speed names for the totals in the recordings are those ibstatus shows for the same totals (4X
# lanes: 40 QDR, 56 FDR, 200 HDR) and the IB speed table for the others (100 EDR, 400 NDR).
IBSTAT_RATE_TEXT = {40: '40 Gb/sec (4X QDR)', 56: '56 Gb/sec (4X FDR)', 100: '100 Gb/sec (4X EDR)',
                    200: '200 Gb/sec (4X HDR)', 400: '400 Gb/sec (4X NDR)'}
IBV_SPEEDS = {'2.5 Gbps': ('', 2.5), '5.0 Gbps': ('DDR', 5), '10.0 Gbps': ('QDR', 10), '14.0 Gbps': ('FDR', 14),
              '25.0 Gbps': ('EDR', 25), '50.0 Gbps': ('HDR', 50), '100.0 Gbps': ('NDR', 100)}

SIGNATURES = (
    ('ibstat', re.compile(r"^CA '[^']+'$", re.M)),
    ('ibstatus', re.compile(r"^Infiniband device '[^']+' port \d+ status:$", re.M)),
    ('ibv_devinfo', re.compile(r'^hca_id:\s+\S+$', re.M)),
)


# ---------------------------------------------------------------- recordings -> model

def _guid_to_gid(guid_hex):
    """Port GUID 0x946dae0300cde72c -> link-local GID fe80:0000:0000:0000:946d:ae03:00cd:e72c."""
    digits = guid_hex.lower().replace('0x', '').replace(':', '').rjust(16, '0')
    return 'fe80:0000:0000:0000:' + ':'.join(digits[i:i + 4] for i in range(0, 16, 4))


def _new_port():
    return {'state': None, 'phys_state': None, 'rate': None, 'rate_gbps': None, 'link_layer': None,
            'lid': None, 'sm_lid': None, 'lmc': None, 'cap_mask': None, 'port_guid': None, 'gids': []}


def _port_gids(port):
    """GID table the kernel builds: IB: index 0 from the port GUID. RoCE: the interface id of the
    link-local address once as RoCE v1 and once as RoCE v2; a GUID of 0 (port down) has no GID."""
    guid = port.pop('port_guid', None)
    if port['gids'] or not guid or int(guid.replace(':', ''), 16) == 0:
        return
    gid = _guid_to_gid(guid)
    if port['link_layer'] == 'Ethernet':
        port['gids'] = [(0, gid, 'IB/RoCE v1', None), (1, gid, 'RoCE v2', None)]
    else:
        port['gids'] = [(0, gid, 'IB/RoCE v1', None)]


def parse_ibstat(text):
    hcas = {}
    hca = port = None
    for line in text.splitlines():
        match = re.match(r"^CA '([^']+)'$", line)
        if match:
            hca = hcas.setdefault(match.group(1), {'name': match.group(1), 'attrs': {}, 'ports': {}})
            port = None
            continue
        if hca is None or ':' not in line:
            continue
        key, _sep, value = line.strip().partition(':')
        value = value.strip()
        match = re.match(r'^Port (\d+)$', key)
        if match:
            port = hca['ports'].setdefault(int(match.group(1)), _new_port())
        elif port is None:
            names = {'CA type': 'hca_type', 'Firmware version': 'fw_ver', 'Node GUID': 'node_guid',
                     'System image GUID': 'sys_image_guid', 'Hardware version': 'hw_rev'}
            if key in names:
                hca['attrs'][names[key]] = value
        elif key == 'State':
            port['state'] = IBSTAT_STATES[value]
        elif key == 'Physical state':
            port['phys_state'] = value
        elif key == 'Rate':
            port['rate_gbps'] = int(value)
            port['rate'] = IBSTAT_RATE_TEXT[int(value)]
        elif key == 'Base lid':
            port['lid'] = int(value)
        elif key == 'SM lid':
            port['sm_lid'] = int(value)
        elif key == 'LMC':
            port['lmc'] = int(value)
        elif key == 'Capability mask':
            port['cap_mask'] = value
        elif key == 'Port GUID':
            port['port_guid'] = value
        elif key == 'Link layer':
            port['link_layer'] = value
    return hcas


def parse_ibstatus(text):
    hcas = {}
    port = None
    for line in text.splitlines():
        match = re.match(r"^Infiniband device '([^']+)' port (\d+) status:$", line)
        if match:
            hca = hcas.setdefault(match.group(1), {'name': match.group(1), 'attrs': {}, 'ports': {}})
            port = hca['ports'].setdefault(int(match.group(2)), _new_port())
            continue
        if port is None or ':' not in line:
            continue
        key, _sep, value = line.strip().partition(':')
        value = value.strip()
        if key == 'default gid' and value != 'unknown':
            port['gids'] = [(0, value, 'IB/RoCE v1', None)]
        elif key == 'base lid':
            port['lid'] = int(value, 16)
        elif key == 'sm lid':
            port['sm_lid'] = int(value, 16)
        elif key == 'state':
            port['state'] = value.split(':', 1)[1].strip()
        elif key == 'phys state':
            port['phys_state'] = value.split(':', 1)[1].strip()
        elif key == 'rate':
            port['rate'] = value
            port['rate_gbps'] = int(value.split()[0])
        elif key == 'link_layer':
            port['link_layer'] = value
    return hcas


def parse_ibv_devinfo(text):
    hcas = {}
    hca = port = None
    width = speed = None
    for line in text.splitlines():
        match = re.match(r'^hca_id:\s+(\S+)$', line)
        if match:
            hca = hcas.setdefault(match.group(1), {'name': match.group(1), 'attrs': {}, 'ports': {}})
            port = None
            continue
        if hca is None:
            continue
        stripped = line.strip()
        match = re.match(r'^GID\[\s*(\d+)\]:\s+(\S+)', stripped)
        if match and port is not None:
            port['gids'].append((int(match.group(1)), match.group(2), 'IB/RoCE v1', None))
            continue
        key, _sep, value = stripped.partition(':')
        value = value.strip()
        if key == 'port' and line.startswith('\t\t'):
            port = hca['ports'].setdefault(int(value), _new_port())
            width = speed = None
        elif port is None:
            names = {'fw_ver': 'fw_ver', 'node_guid': 'node_guid', 'sys_image_guid': 'sys_image_guid',
                     'board_id': 'board_id', 'hw_ver': 'hw_rev'}
            if key in names:
                hca['attrs'][names[key]] = value
        elif key == 'state':
            port['state'] = re.match(r'^PORT_(\w+) \(\d+\)$', value).group(1)
        elif key == 'phys_state':
            port['phys_state'] = PHYS_NAMES[int(re.search(r'\((\d+)\)', value).group(1))]
        elif key == 'sm_lid':
            port['sm_lid'] = int(value)
        elif key == 'port_lid':
            port['lid'] = int(value)
        elif key == 'port_lmc':
            port['lmc'] = int(value, 16)
        elif key == 'link_layer':
            port['link_layer'] = value
        elif key == 'active_width':
            width = int(value.split('X')[0])
        elif key == 'active_speed':
            speed = IBV_SPEEDS[value.split(' (')[0]]
        if port is not None and width and speed and port['rate'] is None:
            total = width * speed[1]
            total = int(total) if float(total).is_integer() else total
            port['rate_gbps'] = total
            port['rate'] = '%s Gb/sec (%dX%s)' % (total, width, ' ' + speed[0] if speed[0] else '')
    return hcas


PARSERS = {'ibstat': parse_ibstat, 'ibstatus': parse_ibstatus, 'ibv_devinfo': parse_ibv_devinfo}


def recording_kind(path):
    with open(path, 'rb') as handle:
        text = handle.read().decode('utf-8', 'replace')
    for kind, pattern in SIGNATURES:
        if pattern.search(text):
            return kind, text
    return None, text


def real_recordings(real_fixtures_dir):
    """Every file in the corpus that is ibstat, ibstatus or ibv_devinfo output, with its kind."""
    found = []
    for path in sorted(glob.glob(os.path.join(real_fixtures_dir, '**', '*'), recursive=True)):
        if os.path.isfile(path) and not path.endswith(('.md', '.tsv')):
            kind, _text = recording_kind(path)
            if kind:
                found.append((os.path.basename(path), kind, path))
    return found


def recording_model(path):
    kind, text = recording_kind(path)
    hcas = PARSERS[kind](text)
    for hca in hcas.values():
        for port in hca['ports'].values():
            _port_gids(port)
    return [hcas[name] for name in sorted(hcas)]


# ---------------------------------------------------------------- model -> sysfs tree

def _write(path, text):
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        os.makedirs(parent)
    mode = 'wb' if isinstance(text, bytes) else 'w'
    with open(path, mode) as handle:
        handle.write(text)


def _sysfs_guid(value):
    """0x946dae0300cde72c or 946d:ae03:00cd:e72c -> 946d:ae03:00cd:e72c (the kernel's form)."""
    digits = value.lower().replace('0x', '').replace(':', '').rjust(16, '0')
    return ':'.join(digits[i:i + 4] for i in range(0, 16, 4))


def _pci_device(root, domain, chain):
    """Create devices/<domain>/<chain...> and the bus/pci/devices links; return the device's directory."""
    path = os.path.join(root, 'devices', domain)
    for address in chain:
        path = os.path.join(path, address)
        if not os.path.isdir(path):
            os.makedirs(path)
        link = os.path.join(root, 'bus', 'pci', 'devices', address)
        if not os.path.islink(link):
            if not os.path.isdir(os.path.dirname(link)):
                os.makedirs(os.path.dirname(link))
            os.symlink(os.path.relpath(path, os.path.dirname(link)), link)
    return path


def acs_config(control, with_acs=True, length=4096):
    """A PCIe config space: AER at 0x100 pointing to ACS at 0x148 (control word given), or no ACS."""
    data = bytearray(length)
    if length >= 0x108:
        struct.pack_into('<I', data, 0x100, 0x0001 | (1 << 16) | ((0x148 if with_acs else 0) << 20))
    if with_acs and length >= 0x150:
        struct.pack_into('<I', data, 0x148, 0x000d | (1 << 16))
        struct.pack_into('<H', data, 0x14c, 0x005f)
        struct.pack_into('<H', data, 0x14e, control)
    return bytes(data)


def write_tree(root, hcas, gpus=(), configs=None, net_mtu=None, zero_gids=2):
    """Write HCAs (model dicts) under root/class/infiniband, GPUs and bridges under root/devices."""
    os.makedirs(os.path.join(root, 'class', 'infiniband'))
    os.makedirs(os.path.join(root, 'bus', 'pci', 'devices'), exist_ok=True)
    for number, hca in enumerate(hcas):
        base = os.path.join(root, 'class', 'infiniband', hca['name'])
        os.makedirs(base)
        attrs = dict(hca['attrs'])
        for key in ('node_guid', 'sys_image_guid'):
            if key in attrs:
                attrs[key] = _sysfs_guid(attrs[key])
        for key, value in attrs.items():
            _write(os.path.join(base, key), value + '\n')
        domain = hca.get('pci_domain') or 'pci0000:%02x' % (0x10 + 2 * number)
        chain = hca.get('pci_chain') or ['0000:%02x:01.0' % (0x10 + 2 * number), '0000:%02x:00.0' % (0x11 + 2 * number)]
        device = _pci_device(root, domain, chain)
        _write(os.path.join(device, 'vendor'), '0x15b3\n')
        _write(os.path.join(device, 'class'), '0x020700\n')
        os.symlink(os.path.relpath(device, base), os.path.join(base, 'device'))
        for netdev, dev_port in (hca.get('netdevs') or {}).items():
            _write(os.path.join(device, 'net', netdev, 'dev_port'), '%d\n' % dev_port)
        for num, port in sorted(hca['ports'].items()):
            pdir = os.path.join(base, 'ports', str(num))
            os.makedirs(pdir)
            if port['state'] is not None:
                _write(os.path.join(pdir, 'state'), '%d: %s\n' % (STATE_CODES[port['state']], port['state']))
            if port['phys_state'] is not None:
                _write(os.path.join(pdir, 'phys_state'), '%d: %s\n' % (PHYS_CODES[port['phys_state']],
                                                                       port['phys_state']))
            if port['rate'] is not None:
                _write(os.path.join(pdir, 'rate'), port['rate'] + '\n')
            if port['link_layer'] is not None:
                _write(os.path.join(pdir, 'link_layer'), port['link_layer'] + '\n')
            for key in ('lid', 'sm_lid'):
                value = port.get(key)
                _write(os.path.join(pdir, key), '0x%x\n' % (value if value is not None else 0))
            _write(os.path.join(pdir, 'lid_mask_count'), '%d\n' % (port.get('lmc') or 0))
            _write(os.path.join(pdir, 'cap_mask'), '%s\n' % (port.get('cap_mask') or '0x00000000'))
            used = set()
            for index, gid, gid_type, ndev in port['gids']:
                used.add(index)
                _write(os.path.join(pdir, 'gids', str(index)), gid + '\n')
                _write(os.path.join(pdir, 'gid_attrs', 'types', str(index)), gid_type + '\n')
                if ndev:
                    _write(os.path.join(pdir, 'gid_attrs', 'ndevs', str(index)), ndev + '\n')
            top = max(used) + 1 if used else 0
            for index in range(top, top + zero_gids):
                _write(os.path.join(pdir, 'gids', str(index)), '0000:0000:0000:0000:0000:0000:0000:0000\n')
    for domain, chain in gpus:
        device = _pci_device(root, domain, chain)
        _write(os.path.join(device, 'vendor'), '0x10de\n')
        _write(os.path.join(device, 'class'), '0x030200\n')
    for address, data in (configs or {}).items():
        _write(os.path.join(root, 'bus', 'pci', 'devices', address, 'config'), data)
    for netdev, mtu in (net_mtu or {}).items():
        _write(os.path.join(root, 'class', 'net', netdev, 'mtu'), '%d\n' % mtu)
    return root


# ---------------------------------------------------------------- every real recording

# Exact verdict per recording: status, HCAs, ports, and the issues as "hca/port check severity"
# (None: computed by _expected_issues_from_recording from the recorded states).
ETH_OK_GID = 'roce_gid warning'  # active Ethernet port whose only RoCE v2 GID is link-local


def _issues(hcas, text, port=1):
    return ['%s/%s %s' % (hca, port, text) for hca in hcas]


H100_ETH_0 = ['mlx5_1', 'mlx5_6', 'mlx5_7', 'mlx5_8']
RECORDINGS = {
    'gpud__ibstat.39.0.a100.failed.ibpanic.exit-255.0.txt': ('ok', 8, 8, []),
    'gpud__ibstat.47.0.a100.all.active.0.txt': ('warning', 9, 9, _issues(['mlx5_0'], ETH_OK_GID)),
    # Four active 100GbE ports show Port GUID 0: GID index 0 is empty and ibstat shows no other GID.
    'gpud__ibstat.47.0.h100.all.active.0.txt': (
        'critical', 12, 12, _issues(['mlx5_%d' % i for i in (0, 3, 4, 5, 6, 9, 10, 11)], ETH_OK_GID)
        + _issues(['mlx5_%d' % i for i in (1, 2, 7, 8)], 'roce_gid critical')),
    'gpud__ibstat.47.0.h100.all.active.2.txt': ('warning', 9, 9, None),
    'gpud__ibstat.47.0.h100.some.down.0.txt': ('critical', 12, 12, None),
    'gpud__ibstat.47.0.h100.some.down.1.txt': ('critical', 12, 12, None),
    'gpud__ibstatus.39.0.a100.all.active.0.txt': ('critical', 9, 9, ['mlx5_8/1 roce_gid critical']),
    'heioy__ibstat_2x-connectx3-mt4099_fdr56.txt': ('ok', 2, 4, []),
    'heioy__ibstatus_connectx3_fdr56.txt': ('ok', 1, 2, []),
    'heioy__ibv_devinfo_2x-mlx4_port2-PORT_DOWN.txt': (
        'critical', 2, 4,
        ['%s/%d sysfs unknown' % (h, p) for h in ('mlx4_0', 'mlx4_1') for p in (1, 1, 2, 2)]
        + ['%s/2 port_state critical' % h for h in ('mlx4_0', 'mlx4_1')]),
    'heioy__ibv_devinfo-d-mlx4_1-i2-v_PORT_DOWN_verbose.txt': (
        'critical', 1, 1, ['mlx4_1/2 port_state critical', 'mlx4_1/2 port_phys_state critical']),
}


def _expected_issues_from_recording(model):
    """Independent rule for the ibstat recordings: down ports twice critical, active RoCE warned."""
    issues = []
    for hca in model:
        for num, port in hca['ports'].items():
            if port['state'] != 'ACTIVE':
                issues.append('%s/%d port_state critical' % (hca['name'], num))
            if port['phys_state'] != 'LinkUp':
                issues.append('%s/%d port_phys_state critical' % (hca['name'], num))
            if port['state'] == 'ACTIVE' and port['link_layer'] == 'Ethernet':
                issues.append('%s/%d %s' % (hca['name'], num, ETH_OK_GID if port['gids'] else 'roce_gid critical'))
    return issues


def _issue_keys(facts):
    return sorted('%s/%s %s %s' % (i['hca'], i['port'], i['check'], i['severity']) for i in facts['health']['issues'])


def test_every_recording_is_covered(real_fixtures_dir):
    found = real_recordings(real_fixtures_dir)
    assert sorted(name for name, _kind, _path in found) == sorted(RECORDINGS), \
        'a recording of ibstat/ibstatus/ibv_devinfo is not in RECORDINGS (or one listed there is gone)'
    assert set(kind for _name, kind, _path in found) == set(PARSERS)


def _recording_params():
    return sorted(RECORDINGS)


@pytest.mark.parametrize('name', _recording_params())
def test_recording_as_sysfs(real_fixtures_dir, tmp_path, name):
    paths = dict((n, p) for n, _kind, p in real_recordings(real_fixtures_dir))
    assert name in paths, 'recording %s not in the corpus' % name
    model = recording_model(paths[name])
    root = write_tree(str(tmp_path / 'sys'), model)
    facts = rdma_sysfs.build_facts(rdma_sysfs.collect(root))
    status, hca_count, port_count, issues = RECORDINGS[name]
    if issues is None:
        issues = _expected_issues_from_recording(model)
    assert facts['present'] is True
    assert (facts['count'], facts['port_count']) == (hca_count, port_count)
    assert _issue_keys(facts) == sorted(issues)
    assert facts['health']['status'] == status
    assert facts['gpus'] == []
    got = dict((h['name'], h) for h in facts['hcas'])
    assert sorted(got) == sorted(h['name'] for h in model)
    for hca in model:
        record = got[hca['name']]
        attrs = hca['attrs']
        assert record['fw_ver'] == attrs.get('fw_ver')
        assert record['board_id'] == attrs.get('board_id')
        assert record['hca_type'] == attrs.get('hca_type')
        want_guid = '0x' + _sysfs_guid(attrs['node_guid']).replace(':', '') if 'node_guid' in attrs else None
        assert record['node_guid'] == want_guid
        ports = dict((p['port'], p) for p in record['ports'])
        assert sorted(ports) == sorted(hca['ports'])
        for num, want in hca['ports'].items():
            port = ports[num]
            is_ib = want['link_layer'] == 'InfiniBand'
            assert port['state'] == want['state'], (hca['name'], num)
            assert port['phys_state'] == want['phys_state'], (hca['name'], num)
            assert port['rate_gbps'] == want['rate_gbps'], (hca['name'], num)
            assert port['link_layer'] == want['link_layer'], (hca['name'], num)
            assert port['lid'] == (want['lid'] if is_ib else None), (hca['name'], num)
            assert port['sm_lid'] == (want['sm_lid'] if is_ib else None), (hca['name'], num)
            assert [(g['index'], g['gid'], g['type']) for g in port['gids']] == \
                [(i, g, t) for i, g, t, _n in want['gids']], (hca['name'], num)
            assert port['roce_v2_ipv4_gid_index'] is None
            assert port['active_mtu'] is None


def test_recordings_exercise_both_link_layers_and_down_ports(real_fixtures_dir):
    states = set()
    for _name, _kind, path in real_recordings(real_fixtures_dir):
        for hca in recording_model(path):
            for port in hca['ports'].values():
                states.add((port['link_layer'], port['state']))
    assert {('InfiniBand', 'ACTIVE'), ('Ethernet', 'ACTIVE'), ('Ethernet', 'DOWN'), ('InfiniBand', 'DOWN')} <= states


# ---------------------------------------------------------------- our own trees

IB_DOMAIN = 'pci0000:15'
IB_HCA_CHAIN = ['0000:15:01.0', '0000:16:00.0', '0000:17:00.0', '0000:18:00.0']
IB_GPU_CHAIN = ['0000:15:01.0', '0000:16:00.0', '0000:17:01.0', '0000:19:00.0']
IB_OTHER_GPU = ('pci0000:97', ['0000:97:01.0', '0000:98:00.0'])


def ib_model():
    """Two NDR ports: mlx5_0 shares a PCIe switch with a GPU (bridges 17:00.0 and 17:01.0), mlx5_1 does not."""
    def port(lid, guid):
        return {'state': 'ACTIVE', 'phys_state': 'LinkUp', 'rate': '400 Gb/sec (4X NDR)', 'link_layer': 'InfiniBand',
                'lid': lid, 'sm_lid': 1, 'lmc': 0, 'cap_mask': '0xa751e848',
                'gids': [(0, _guid_to_gid(guid), 'IB/RoCE v1', None)]}
    return [
        {'name': 'mlx5_0', 'attrs': {'fw_ver': '28.39.1002', 'board_id': 'MT_0000000838', 'hca_type': 'MT4129',
                                     'node_guid': '0xa088c20300da6342', 'sys_image_guid': '0xa088c20300da6342'},
         'pci_domain': IB_DOMAIN, 'pci_chain': IB_HCA_CHAIN, 'netdevs': {'ibp24s0': 0},
         'ports': {1: port(534, '0xa088c20300da6342')}},
        {'name': 'mlx5_1', 'attrs': {'fw_ver': '28.39.1002', 'board_id': 'MT_0000000838', 'hca_type': 'MT4129',
                                     'node_guid': '0xa088c20300da656a'},
         'pci_domain': 'pci0000:a0', 'pci_chain': ['0000:a0:01.0', '0000:a1:00.0'], 'netdevs': {'ibp161s0': 0},
         'ports': {1: port(535, '0xa088c20300da656a')}},
    ]


def write_ib_tree(root, acs=(0, 0), configs=None, **kwargs):
    cfg = {'0000:15:01.0': acs_config(0x001d), '0000:16:00.0': acs_config(0, with_acs=False),
           '0000:17:00.0': acs_config(acs[0]), '0000:17:01.0': acs_config(acs[1])}
    cfg.update(configs or {})
    return write_tree(root, kwargs.pop('model', None) or ib_model(),
                      gpus=[(IB_DOMAIN, IB_GPU_CHAIN), IB_OTHER_GPU], configs=cfg,
                      net_mtu={'ibp24s0': 4092, 'ibp161s0': 2044}, **kwargs)


def roce_model(gids=None, state='ACTIVE', phys='LinkUp', rate='400 Gb/sec (4X NDR)'):
    ndev = 'ens1np0'
    if gids is None:
        gids = [(0, 'fe80:0000:0000:0000:a288:c2ff:fe12:3456', 'IB/RoCE v1', ndev),
                (1, 'fe80:0000:0000:0000:a288:c2ff:fe12:3456', 'RoCE v2', ndev),
                (2, '0000:0000:0000:0000:0000:ffff:0a00:000b', 'IB/RoCE v1', ndev),
                (3, '0000:0000:0000:0000:0000:ffff:0a00:000b', 'RoCE v2', ndev)]
    return [{'name': 'mlx5_0', 'attrs': {'fw_ver': '28.41.1000', 'board_id': 'MT_0000000834', 'hca_type': 'MT4129',
                                         'node_guid': 'a088:c203:0012:3456'},
             'netdevs': {ndev: 0},
             'ports': {1: {'state': state, 'phys_state': phys, 'rate': rate, 'link_layer': 'Ethernet',
                           'lid': 0, 'sm_lid': 0, 'lmc': 0, 'cap_mask': '0x00010000', 'gids': gids}}}]


def test_ib_tree(tmp_path):
    root = write_ib_tree(str(tmp_path / 'sys'))
    facts = rdma_sysfs.build_facts(rdma_sysfs.collect(root), expected_rate_gbps=400)
    assert facts['health'] == {'status': 'ok', 'issues': [], 'checks_skipped': []}
    assert facts['gpus'] == ['0000:19:00.0', '0000:98:00.0']
    assert facts['link_layers'] == ['InfiniBand'] and facts['active_port_count'] == 2
    hca = facts['hcas'][0]
    assert {k: hca[k] for k in ('name', 'fw_ver', 'board_id', 'hca_type', 'node_guid', 'sys_image_guid',
                                'pci_address', 'netdevs')} == {
        'name': 'mlx5_0', 'fw_ver': '28.39.1002', 'board_id': 'MT_0000000838', 'hca_type': 'MT4129',
        'node_guid': '0xa088c20300da6342', 'sys_image_guid': '0xa088c20300da6342', 'pci_address': '0000:18:00.0',
        'netdevs': ['ibp24s0']}
    assert hca['pcie_acs'] == {'gpus': ['0000:19:00.0'], 'enabled': False, 'bridges': [
        {'address': '0000:17:00.0', 'readable': True, 'capability': True, 'control': 0, 'flags': [], 'enabled': False},
        {'address': '0000:17:01.0', 'readable': True, 'capability': True, 'control': 0, 'flags': [], 'enabled': False}]}
    assert facts['hcas'][1]['pcie_acs'] == {'gpus': [], 'bridges': [], 'enabled': None}
    port = hca['ports'][0]
    assert {k: port[k] for k in ('port', 'link_layer', 'state', 'state_code', 'phys_state', 'phys_state_code', 'rate',
                                 'rate_gbps', 'width', 'speed', 'lid', 'sm_lid', 'lmc', 'netdevs', 'netdev_mtu',
                                 'active_mtu', 'roce_v2_ipv4_gid_index', 'roce_v2_gid_count')} == {
        'port': 1, 'link_layer': 'InfiniBand', 'state': 'ACTIVE', 'state_code': 4, 'phys_state': 'LinkUp',
        'phys_state_code': 5, 'rate': '400 Gb/sec (4X NDR)', 'rate_gbps': 400, 'width': '4X', 'speed': 'NDR',
        'lid': 534, 'sm_lid': 1, 'lmc': 0, 'netdevs': ['ibp24s0'], 'netdev_mtu': 4092, 'active_mtu': None,
        'roce_v2_ipv4_gid_index': None, 'roce_v2_gid_count': 0}
    assert port['gids'] == [{'index': 0, 'gid': 'fe80:0000:0000:0000:a088:c203:00da:6342', 'type': 'IB/RoCE v1',
                             'netdev': None, 'ipv4': None, 'link_local': True}]


def test_roce_tree(tmp_path):
    root = write_tree(str(tmp_path / 'sys'), roce_model(), net_mtu={'ens1np0': 9000})
    facts = rdma_sysfs.build_facts(rdma_sysfs.collect(root), expected_rate_gbps=400)
    assert facts['health'] == {'status': 'ok', 'issues': [], 'checks_skipped': []}
    port = facts['hcas'][0]['ports'][0]
    assert {k: port[k] for k in ('link_layer', 'lid', 'sm_lid', 'netdevs', 'netdev_mtu', 'netdev_mtu_from', 'active_mtu',
                                 'roce_v2_ipv4_gid_index', 'roce_v2_ipv4_gid', 'roce_v2_ipv4_address',
                                 'roce_v2_gid_count')} == {
        'link_layer': 'Ethernet', 'lid': None, 'sm_lid': None, 'netdevs': ['ens1np0'], 'netdev_mtu': 9000,
        'netdev_mtu_from': 'ens1np0', 'active_mtu': 4096, 'roce_v2_ipv4_gid_index': 3,
        'roce_v2_ipv4_gid': '0000:0000:0000:0000:0000:ffff:0a00:000b', 'roce_v2_ipv4_address': '10.0.0.11',
        'roce_v2_gid_count': 2}
    assert [(g['index'], g['type'], g['netdev'], g['ipv4']) for g in port['gids']] == [
        (0, 'IB/RoCE v1', 'ens1np0', None), (1, 'RoCE v2', 'ens1np0', None),
        (2, 'IB/RoCE v1', 'ens1np0', '10.0.0.11'), (3, 'RoCE v2', 'ens1np0', '10.0.0.11')]
    assert facts['hcas'][0]['node_guid'] == '0xa088c20300123456'


LINK_LOCAL_ONLY = [(0, 'fe80:0000:0000:0000:a288:c2ff:fe12:3456', 'IB/RoCE v1', 'ens1np0'),
                   (1, 'fe80:0000:0000:0000:a288:c2ff:fe12:3456', 'RoCE v2', 'ens1np0')]
IPV6_GLOBAL = LINK_LOCAL_ONLY + [(2, '2001:0db8:0000:0000:0000:0000:0000:0011', 'RoCE v2', 'ens1np0')]
V1_ONLY = [(0, 'fe80:0000:0000:0000:a288:c2ff:fe12:3456', 'IB/RoCE v1', 'ens1np0'),
           (1, '0000:0000:0000:0000:0000:ffff:0a00:000b', 'IB/RoCE v1', 'ens1np0')]


@pytest.mark.parametrize('model_args, options, status, issues', [
    ({}, {'expected_rate_gbps': 800}, 'warning', ['mlx5_0/1 port_rate warning']),
    ({'rate': '200 Gb/sec (4X HDR)'}, {'expected_rate_gbps': 400}, 'warning', ['mlx5_0/1 port_rate warning']),
    ({'rate': '200 Gb/sec (4X HDR)'}, {'expected_rate_gbps': 200}, 'ok', []),
    ({'rate': '200 Gb/sec (4X HDR)'}, {}, 'ok', []),
    ({'state': 'DOWN', 'phys': 'Disabled', 'rate': '40 Gb/sec (4X QDR)', 'gids': []}, {'expected_rate_gbps': 400},
     'critical', ['mlx5_0/1 port_state critical', 'mlx5_0/1 port_phys_state critical']),
    ({'state': 'DOWN', 'phys': 'Polling'}, {}, 'critical',
     ['mlx5_0/1 port_state critical', 'mlx5_0/1 port_phys_state critical']),
    ({'gids': LINK_LOCAL_ONLY}, {}, 'warning', ['mlx5_0/1 roce_gid warning']),
    ({'gids': IPV6_GLOBAL}, {}, 'ok', ['mlx5_0/1 roce_gid info']),
    ({'gids': V1_ONLY}, {}, 'critical', ['mlx5_0/1 roce_gid critical']),
    ({'gids': []}, {}, 'critical', ['mlx5_0/1 roce_gid critical']),
    ({'gids': []}, {'ignore_ports': ['mlx5_0/1']}, 'ok', []),
    ({'state': 'DOWN', 'phys': 'Disabled'}, {'ignore_ports': ['mlx5_0']}, 'ok', []),
    ({'state': 'DOWN', 'phys': 'Disabled'}, {'ignore_ports': ['mlx5_0/2']}, 'critical',
     ['mlx5_0/1 port_state critical', 'mlx5_0/1 port_phys_state critical']),
])
def test_roce_verdicts(tmp_path, model_args, options, status, issues):
    root = write_tree(str(tmp_path / 'sys'), roce_model(**model_args), net_mtu={'ens1np0': 9000})
    facts = rdma_sysfs.build_facts(rdma_sysfs.collect(root), **options)
    assert _issue_keys(facts) == sorted(issues)
    assert facts['health']['status'] == status


def test_ib_port_in_init_names_the_subnet_manager(tmp_path):
    model = ib_model()
    model[1]['ports'][1]['state'] = 'INIT'
    root = write_ib_tree(str(tmp_path / 'sys'), model=model)
    facts = rdma_sysfs.build_facts(rdma_sysfs.collect(root))
    assert _issue_keys(facts) == ['mlx5_1/1 port_state critical']
    assert 'no subnet manager' in facts['health']['issues'][0]['message']


@pytest.mark.parametrize('acs, status, issues, flags', [
    ((0, 0), 'ok', [], None),
    ((0x001d, 0), 'warning', ['mlx5_0/None pcie_acs warning'], ['SrcValid', 'ReqRedir', 'CmpltRedir', 'UpstreamFwd']),
    ((0, 0x0004), 'warning', ['mlx5_0/None pcie_acs warning'], ['ReqRedir']),
    ((0x0041, 0x0001), 'ok', [], None),  # source validation and direct translated P2P do not redirect
])
def test_acs_on_the_switch_path(tmp_path, acs, status, issues, flags):
    root = write_ib_tree(str(tmp_path / 'sys'), acs=acs)
    facts = rdma_sysfs.build_facts(rdma_sysfs.collect(root))
    assert _issue_keys(facts) == issues
    assert facts['health']['status'] == status
    enabled = [b for b in facts['hcas'][0]['pcie_acs']['bridges'] if b['enabled']]
    assert facts['hcas'][0]['pcie_acs']['enabled'] is bool(flags)
    if flags:
        assert enabled[0]['flags'] == flags
        assert 'ReqRedir+' in facts['health']['issues'][0]['message']


def test_acs_unreadable_without_root_is_skipped(tmp_path):
    root = write_ib_tree(str(tmp_path / 'sys'), configs={'0000:17:00.0': acs_config(0x1d)[:64]})
    facts = rdma_sysfs.build_facts(rdma_sysfs.collect(root))
    assert _issue_keys(facts) == ['None/None pcie_acs info']
    assert facts['health']['status'] == 'ok' and facts['health']['checks_skipped'] == ['pcie_acs']
    assert facts['hcas'][0]['pcie_acs']['enabled'] is None
    assert [b['readable'] for b in facts['hcas'][0]['pcie_acs']['bridges']] == [False, True]


@pytest.mark.parametrize('data, expected', [
    (None, {'readable': False, 'capability': None, 'control': None, 'flags': [], 'enabled': None}),
    (b'\x00' * 64, {'readable': False, 'capability': None, 'control': None, 'flags': [], 'enabled': None}),
    (acs_config(0, with_acs=False), {'readable': True, 'capability': False, 'control': None, 'flags': [],
                                     'enabled': False}),
    (b'\xff' * 4096, {'readable': False, 'capability': None, 'control': None, 'flags': [], 'enabled': None}),
    (acs_config(0x007f), {'readable': True, 'capability': True, 'control': 0x7f, 'enabled': True,
                          'flags': ['SrcValid', 'TransBlk', 'ReqRedir', 'CmpltRedir', 'UpstreamFwd', 'EgressCtrl',
                                    'DirectTrans']}),
    (acs_config(0x0002), {'readable': True, 'capability': True, 'control': 2, 'flags': ['TransBlk'], 'enabled': True}),
])
def test_decode_acs_control(data, expected):
    assert rdma_sysfs.decode_acs_control(data) == expected


def test_acs_capability_loop_ends():
    data = bytearray(4096)
    struct.pack_into('<I', data, 0x100, 0x0001 | (0x100 << 20))  # points at itself
    assert rdma_sysfs.decode_acs_control(bytes(data))['capability'] is False


@pytest.mark.parametrize('text, expected', [
    ('400 Gb/sec (4X NDR)', (400, '4X', 4, 'NDR')),
    ('200 Gb/sec (4X HDR)', (200, '4X', 4, 'HDR')),
    ('56 Gb/sec (4X FDR)', (56, '4X', 4, 'FDR')),
    ('2.5 Gb/sec (1X)', (2.5, '1X', 1, 'SDR')),
    ('53.125 Gb/sec (1X HDR)', (53.125, '1X', 1, 'HDR')),
    ('100 Gb/sec (2X HDR)', (100, '2X', 2, 'HDR')),
    ('fast', (None, None, None, None)),
    (None, (None, None, None, None)),
])
def test_parse_rate(text, expected):
    got = rdma_sysfs.parse_rate(text)
    assert (got['rate_gbps'], got['width'], got['lanes'], got['speed']) == expected


@pytest.mark.parametrize('mtu, expected', [(9000, 4096), (4200, 4096), (4192, 4096), (4191, 2048), (1500, 1024),
                                           (1120, 1024), (1119, 512), (300, None), (None, None)])
def test_roce_active_mtu(mtu, expected):
    assert rdma_sysfs.roce_active_mtu(mtu) == expected


def test_absent_class_is_ok_with_info(tmp_path):
    (tmp_path / 'sys').mkdir()
    facts = rdma_sysfs.build_facts(rdma_sysfs.collect(str(tmp_path / 'sys')))
    assert facts['present'] is False and facts['count'] == 0 and facts['hcas'] == []
    assert facts['health']['status'] == 'ok'
    assert _issue_keys(facts) == ['None/None rdma_present info']
    assert 'is absent' in facts['health']['issues'][0]['message']


def test_empty_class_is_ok_with_info(tmp_path):
    (tmp_path / 'sys' / 'class' / 'infiniband').mkdir(parents=True)
    facts = rdma_sysfs.build_facts(rdma_sysfs.collect(str(tmp_path / 'sys')))
    assert facts['present'] is False and facts['health']['status'] == 'ok'
    assert 'is empty' in facts['health']['issues'][0]['message']


def _unreadable(path):
    """Replace a file by a directory: reading it fails with EISDIR even for root."""
    os.remove(path)
    os.mkdir(path)


@pytest.mark.parametrize('relpath, field, issues', [
    ('ports/1/state', 'state', ['mlx5_0/1 sysfs unknown']),
    ('ports/1/rate', 'rate_gbps', ['mlx5_0/1 sysfs unknown']),
    ('ports/1/link_layer', 'link_layer', ['mlx5_0/1 sysfs unknown']),
    ('ports/1/lid', 'lid', ['mlx5_0/1 sysfs unknown']),
    ('fw_ver', 'fw_ver', ['mlx5_0/None sysfs unknown']),
    ('ports/1/gids/0', None, ['mlx5_0/1 sysfs info']),
])
def test_unreadable_file_gives_null_and_an_issue(tmp_path, relpath, field, issues):
    root = write_ib_tree(str(tmp_path / 'sys'))
    _unreadable(os.path.join(root, 'class', 'infiniband', 'mlx5_0', relpath))
    facts = rdma_sysfs.build_facts(rdma_sysfs.collect(root))
    assert _issue_keys(facts) == issues
    assert facts['health']['status'] == issues[0].split()[-1].replace('info', 'ok')
    hca = facts['hcas'][0]
    if field == 'fw_ver':
        assert hca['fw_ver'] is None
    elif field:
        assert hca['ports'][0][field] is None
    else:
        assert hca['ports'][0]['gids'] == []


def test_missing_ports_and_undecodable_bytes(tmp_path):
    root = write_ib_tree(str(tmp_path / 'sys'))
    with open(os.path.join(root, 'class', 'infiniband', 'mlx5_0', 'board_id'), 'wb') as handle:
        handle.write(b'MT_\xff\xfe0838\n')
    ports = os.path.join(root, 'class', 'infiniband', 'mlx5_1', 'ports')
    os.rename(ports, ports + '.gone')
    facts = rdma_sysfs.build_facts(rdma_sysfs.collect(root))
    assert facts['hcas'][0]['board_id'] == u'MT_\ufffd\ufffd0838'
    assert facts['hcas'][1]['ports'] == []
    assert _issue_keys(facts) == ['mlx5_1/None sysfs unknown']
    assert facts['health']['status'] == 'unknown'


def test_unrecognised_rate_and_unknown_state_words(tmp_path):
    root = write_tree(str(tmp_path / 'sys'), roce_model(rate='fast'), net_mtu={'ens1np0': 1500})
    facts = rdma_sysfs.build_facts(rdma_sysfs.collect(root), expected_rate_gbps=100)
    port = facts['hcas'][0]['ports'][0]
    assert port['rate'] == 'fast' and port['rate_gbps'] is None and port['active_mtu'] == 1024
    assert _issue_keys(facts) == ['mlx5_0/1 sysfs unknown']


def test_soft_device_without_pci_link(tmp_path):
    root = write_tree(str(tmp_path / 'sys'), roce_model(), net_mtu={'ens1np0': 9000})
    os.remove(os.path.join(root, 'class', 'infiniband', 'mlx5_0', 'device'))
    facts = rdma_sysfs.build_facts(rdma_sysfs.collect(root))
    hca = facts['hcas'][0]
    assert hca['pci_address'] is None and hca['pcie_acs'] == {'gpus': [], 'bridges': [], 'enabled': None}
    # The netdev still comes from the GID table.
    assert hca['ports'][0]['netdevs'] == ['ens1np0'] and facts['health']['status'] == 'ok'


@pytest.mark.parametrize('options, message', [
    ({'expected_rate_gbps': 0}, 'expected_rate_gbps=0'),
    ({'expected_rate_gbps': -1}, 'expected_rate_gbps=-1'),
    ({'expected_rate_gbps': True}, 'expected_rate_gbps=True'),
    ({'expected_rate_gbps': '400'}, "expected_rate_gbps='400'"),
    ({'ignore_ports': ['mlx5_0/0']}, "ignore_ports item 'mlx5_0/0'"),
    ({'ignore_ports': ['mlx5 0']}, "ignore_ports item 'mlx5 0'"),
    ({'ignore_ports': [3]}, 'ignore_ports item 3'),
])
def test_bad_options(options, message):
    with pytest.raises(rdma_sysfs.RdmaOptionError) as info:
        rdma_sysfs.build_facts({'hcas': []}, **options)
    assert message in str(info.value) and 'accepted' in str(info.value)


def test_gid_and_guid_helpers():
    assert rdma_sysfs.describe_gid('0000:0000:0000:0000:0000:ffff:c0a8:0102') == {
        'zero': False, 'ipv4': '192.168.1.2', 'link_local': False}
    assert rdma_sysfs.describe_gid('0000:0000:0000:0000:0000:0000:0000:0000')['zero'] is True
    assert rdma_sysfs.describe_gid('not a gid') is None
    assert rdma_sysfs.format_guid('946d:ae03:00cd:e72c') == '0x946dae0300cde72c'
    assert rdma_sysfs.format_guid('odd') == 'odd'
    assert rdma_sysfs.parse_numbered('7: Phy Test') == (7, 'Phy Test')
    assert rdma_sysfs.parse_numbered('garbage') == (None, 'garbage')


FUZZ_FILES = ('ports/1/state', 'ports/1/phys_state', 'ports/1/rate', 'ports/1/link_layer', 'ports/1/lid',
              'ports/1/sm_lid', 'ports/1/gids/0', 'ports/1/gid_attrs/types/0', 'ports/1/gid_attrs/ndevs/0',
              'fw_ver', 'board_id', 'node_guid', 'device/net/ibp24s0/dev_port')


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(garbage=st.dictionaries(st.sampled_from(FUZZ_FILES + ('config',)), st.binary(max_size=600), min_size=1))
def test_any_bytes_in_any_file_give_a_verdict(tmp_path_factory, garbage):
    root = write_ib_tree(str(tmp_path_factory.mktemp('fuzz') / 'sys'))
    hca_dir = os.path.join(root, 'class', 'infiniband', 'mlx5_0')
    for relpath, data in garbage.items():
        path = os.path.join(root, 'bus', 'pci', 'devices', '0000:17:00.0', 'config') if relpath == 'config' \
            else os.path.join(hca_dir, relpath)
        _write(path, data)
    facts = rdma_sysfs.build_facts(rdma_sysfs.collect(root), expected_rate_gbps=400)
    assert facts['health']['status'] in rdma_sysfs.STATUSES
    assert all(i['severity'] in ('info', 'warning', 'critical', 'unknown') for i in facts['health']['issues'])
    json.dumps(facts)


# ---------------------------------------------------------------- which ports are the fabric

def test_fabric_ports_on_a_tree_are_the_adapters_beside_a_gpu(tmp_path):
    # mlx5_0 shares a PCIe switch with a GPU; mlx5_1 sits on another root port (as a storage adapter does).
    facts = rdma_sysfs.build_facts(rdma_sysfs.collect(write_ib_tree(str(tmp_path / 'sys'))))
    assert rdma_sysfs.fabric_ports(facts['hcas'], 'InfiniBand') == {
        'ports': ['mlx5_0:1'], 'basis': 'gpu_switch', 'others': ['mlx5_1:1']}
    # The raw snapshot (the health program's input) gives the same choice.
    assert rdma_sysfs.fabric_ports(rdma_sysfs.collect(str(tmp_path / 'sys'))['hcas'])['ports'] == ['mlx5_0:1']


def _hca(name, layers, beside_gpu=False, ignored=()):
    return {'name': name, 'pcie_acs': {'gpus': ['0000:19:00.0'] if beside_gpu else [], 'bridges': [], 'enabled': None},
            'ports': [{'port': n, 'link_layer': layer, 'ignored': n in ignored} for n, layer in enumerate(layers, 1)]}


# An HGX-like node: four rails beside GPUs, a dual-port storage ConnectX and a BlueField on other root ports.
HGX = [_hca('mlx5_%d' % i, ['InfiniBand'], beside_gpu=True) for i in range(4)] + [
    _hca('mlx5_4', ['Ethernet', 'Ethernet']), _hca('mlx5_5', ['InfiniBand'])]


@pytest.mark.parametrize('hcas, layer, devices, expected', [
    (HGX, 'InfiniBand', None,
     {'ports': ['mlx5_0:1', 'mlx5_1:1', 'mlx5_2:1', 'mlx5_3:1'], 'basis': 'gpu_switch', 'others': ['mlx5_5:1']}),
    # RoCE on the storage adapter only: nothing beside a GPU carries Ethernet, so every Ethernet port.
    (HGX, 'Ethernet', None, {'ports': ['mlx5_4:1', 'mlx5_4:2'], 'basis': 'link_layer', 'others': []}),
    # Every layer (the health program): the rails, the rest reported.
    (HGX, None, None, {'ports': ['mlx5_0:1', 'mlx5_1:1', 'mlx5_2:1', 'mlx5_3:1'], 'basis': 'gpu_switch',
                       'others': ['mlx5_4:1', 'mlx5_4:2', 'mlx5_5:1']}),
    # Named devices are the choice, beside a GPU or not.
    (HGX, 'InfiniBand', ['mlx5_5', 'mlx5_1'], {'ports': ['mlx5_1:1', 'mlx5_5:1'], 'basis': 'devices', 'others': []}),
    # No GPU on the bus (a storage or login node, the lab): every port of the layer.
    ([_hca('mlx5_0', ['InfiniBand']), _hca('mlx5_1', ['InfiniBand'])], 'InfiniBand', None,
     {'ports': ['mlx5_0:1', 'mlx5_1:1'], 'basis': 'link_layer', 'others': []}),
    # Ignored ports are never candidates; a rail whose only port is ignored leaves the rest to the layer rule.
    ([_hca('mlx5_0', ['InfiniBand'], beside_gpu=True, ignored=(1,)), _hca('mlx5_1', ['InfiniBand'])], 'InfiniBand', None,
     {'ports': ['mlx5_1:1'], 'basis': 'link_layer', 'others': []}),
    ([], 'InfiniBand', None, {'ports': [], 'basis': 'link_layer', 'others': []}),
    (None, None, None, {'ports': [], 'basis': 'link_layer', 'others': []}),
])
def test_fabric_ports(hcas, layer, devices, expected):
    assert rdma_sysfs.fabric_ports(hcas, layer, devices) == expected
    assert expected['basis'] in rdma_sysfs.FABRIC_BASES


@pytest.mark.parametrize('acs', [(0x001d, 0), (0, 0)])
def test_acs_unit_bridges_are_the_switch_ports_on_the_gpu_paths(tmp_path, acs):
    # Enabled or already cleared (by the unit, which must clear them again after the next boot), both ports
    # between the rail and its GPU; not the root port above the switch, not the other adapter's path.
    root = write_ib_tree(str(tmp_path / 'sys'), acs=acs)
    facts = rdma_sysfs.build_facts(rdma_sysfs.collect(root))
    assert rdma_sysfs.acs_bridges(facts['hcas']) == ['0000:17:00.0', '0000:17:01.0']


def test_acs_unit_leaves_out_bridges_it_could_not_read(tmp_path):
    root = write_ib_tree(str(tmp_path / 'sys'), configs={'0000:17:00.0': acs_config(0x1d)[:64]})
    facts = rdma_sysfs.build_facts(rdma_sysfs.collect(root))
    assert rdma_sysfs.acs_bridges(facts['hcas']) == ['0000:17:01.0']
    assert rdma_sysfs.acs_bridges([]) == [] and rdma_sysfs.acs_bridges(None) == []
