# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fabric part of the node health program and of the drift audit, from rdma_facts.

Pure functions over rdma_sysfs.build_facts() output (no Ansible imports, standard library only,
Python 3.6+ for managed nodes): findings in the health program's issue shape with their
severities, the Prometheus samples of the textfile collector, and the per-device firmware that
the drift audit compares. The rules themselves (port down: critical; below the expected rate:
warning; ...) are rdma_sysfs's, documented in docs/rdma-facts.md; this module adds one rule:
a node that should be on the fabric (``expect_present``) but shows no RDMA adapter is critical.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import math

# One exposition format for every textfile the health program writes, and one status scale
# (worst_status: critical > warning > unknown > ok; info never changes the status).
from .gpu_health import STATUS_VALUES, worst_status
from .prom_text import render_samples

SEVERITY_ORDER = ('critical', 'warning', 'unknown', 'info')
ACTIVE_STATES = ('ACTIVE', 'ACTIVE_DEFER')

# (metric, type, help) of the samples prometheus_samples() emits.
METRICS = (
    ('gpucluster_rdma_health_status', 'gauge',
     'Fabric verdict of the node: 0 ok, 1 warning, 2 critical, 3 unknown.'),
    ('gpucluster_rdma_hcas', 'gauge', 'RDMA adapters (HCAs) found under /sys/class/infiniband.'),
    ('gpucluster_rdma_hca_info', 'gauge',
     'One series per HCA with its firmware and board id as labels (value 1).'),
    ('gpucluster_rdma_port_up', 'gauge',
     'RDMA port state: 1 when ACTIVE (and physically LinkUp), 0 otherwise. Ignored ports are not exported.'),
    ('gpucluster_rdma_port_rate_gbps', 'gauge', 'Link rate of an RDMA port in Gb/s as the kernel reports it.'),
    ('gpucluster_rdma_port_expected_rate_gbps', 'gauge',
     'The rate every judged port must reach (only when configured).'),
)


def _issue(check, severity, message, hca=None, port=None):
    return {'gpu': None, 'hca': hca, 'port': port, 'check': check, 'severity': severity, 'message': message}


def health_issues(rdma, expect_present=False):
    """rdma_facts findings as health-program issues ({gpu: None, hca, port, check, severity, message}).

    Checks are prefixed ``rdma_`` (rdma_port_state, rdma_port_rate, ...) so they stay apart from
    the GPU checks in the issue list and in ``gpucluster_health_issues{check=...}``. With
    ``expect_present`` (the node is in a fabric group), no adapter at all is critical.
    """
    rdma = rdma or {}
    issues = []
    for found in (rdma.get('health') or {}).get('issues') or []:
        check = found.get('check') or 'sysfs'
        severity = found.get('severity') or 'unknown'
        message = found.get('message') or ''
        if check == 'rdma_present' and expect_present:
            severity = 'critical'
            message = '%s; this node is expected on the RDMA fabric' % message
        issues.append(_issue(check if check.startswith('rdma_') else 'rdma_' + check, severity,
                             message, found.get('hca'), found.get('port')))
    if expect_present and not rdma.get('present') and not any(i['check'] == 'rdma_present' for i in issues):
        issues.append(_issue('rdma_present', 'critical',
                             'no RDMA adapter found; this node is expected on the RDMA fabric'))
    issues.sort(key=lambda i: (SEVERITY_ORDER.index(i['severity']) if i['severity'] in SEVERITY_ORDER else 9,
                               str(i.get('hca') or ''), i.get('port') or 0, i['check']))
    return issues


def select_ports(hcas, selection):
    """The ports outside ``selection`` (ignore_ports entries) and the entries of it the node lacks.

    ``hcas``: rdma_sysfs.collect()'s ``hcas`` ({name, ports: [{port}]}); ``selection``: the RDMA ports the
    node's jobs use, as NCCL_IB_HCA entries matched exactly (``mlx5_0`` every port of the device,
    ``mlx5_0:1`` one port; the rdma role's rdma_nccl_ib_hca). Returns ``(ignored, missing)``: ``ignored``
    names every other port as ``hca/port`` (rdma_sysfs.build_facts' ignore_ports), ``missing`` the
    entries with no such device or port on the node (sorted).
    """
    wanted = {}
    for entry in selection or []:
        name, _sep, port = str(entry).partition(':')
        wanted.setdefault(name, set()).add(int(port) if port else None)
    ignored = []
    found = set()
    for hca in hcas or []:
        ports = wanted.get(hca.get('name'))
        for port in hca.get('ports') or []:
            number = port.get('port')
            if ports is not None and (None in ports or number in ports):
                if number in ports:
                    found.add((hca['name'], number))
            else:
                ignored.append('%s/%s' % (hca.get('name'), number))
        if ports is not None and None in ports and hca.get('ports'):
            found.add((hca['name'], None))
    missing = sorted('%s:%s' % (name, port) if port is not None else name
                     for name, ports in wanted.items() for port in ports if (name, port) not in found)
    return ignored, missing


def missing_issues(missing):
    """Critical issues for the selected ports the node lacks (select_ports' ``missing``)."""
    return [_issue('rdma_present', 'critical', '%s is in the RDMA port set the node\'s jobs use (NCCL_IB_HCA, '
                   'health_check_rdma_hcas) but is not under /sys/class/infiniband' % entry,
                   hca=entry.split(':')[0], port=int(entry.split(':')[1]) if ':' in entry else None)
            for entry in missing]


def merge_status(gpu_status, rdma_issues):
    """The node's status once the fabric's issues join the GPU verdict (worst of both)."""
    order = ('ok', 'unknown', 'warning', 'critical')
    rdma_status = worst_status(rdma_issues)
    gpu_status = gpu_status if gpu_status in order else 'unknown'
    return max(gpu_status, rdma_status, key=order.index)


def _port_is_up(port):
    return port.get('state') in ACTIVE_STATES and port.get('phys_state') in (None, 'LinkUp')


def _finite_rate(value):
    """A rate worth a sample: a finite number of 0 or more (rdma_sysfs never gives NaN or
    Infinity; facts from elsewhere might, and the exposition format would carry them as a rate no alert
    compares)."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)
            and not math.isinf(value) and value >= 0)


def prometheus_samples(rdma, issues=None):
    """[(metric, [(label, value)...], number)] for the textfile collector.

    ``issues`` are health_issues() output (for the status); without them the facts' own verdict is used.
    """
    rdma = rdma or {}
    samples = []
    status = worst_status(issues) if issues is not None else (rdma.get('health') or {}).get('status', 'unknown')
    samples.append(('gpucluster_rdma_health_status', [], STATUS_VALUES.get(status, 3)))
    samples.append(('gpucluster_rdma_hcas', [], len(rdma.get('hcas') or [])))
    if rdma.get('expected_rate_gbps') and _finite_rate(rdma['expected_rate_gbps']):
        samples.append(('gpucluster_rdma_port_expected_rate_gbps', [], rdma['expected_rate_gbps']))
    for hca in rdma.get('hcas') or []:
        name = hca.get('name') or ''
        samples.append(('gpucluster_rdma_hca_info',
                        [('hca', name), ('fw_ver', hca.get('fw_ver') or ''), ('board_id', hca.get('board_id') or '')],
                        1))
        for port in hca.get('ports') or []:
            if port.get('ignored'):
                continue
            labels = [('hca', name), ('port', str(port.get('port'))), ('link_layer', port.get('link_layer') or '')]
            samples.append(('gpucluster_rdma_port_up', labels, 1 if _port_is_up(port) else 0))
            if _finite_rate(port.get('rate_gbps')):
                samples.append(('gpucluster_rdma_port_rate_gbps', labels, port['rate_gbps']))
    return samples


def render_prometheus(samples):
    """Exposition text (HELP/TYPE once per metric that has samples, in METRICS order)."""
    return render_samples(METRICS, samples)


def drift_hca_firmware(rdma):
    """{device: fw_ver} of the PCI HCAs (soft devices such as rxe have no firmware), the drift input ``hca_fw``."""
    out = {}
    for hca in (rdma or {}).get('hcas') or []:
        if hca.get('pci_address') and hca.get('fw_ver'):
            out[hca['name']] = hca['fw_ver']
    return out
