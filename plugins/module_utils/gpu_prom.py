# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Render GPU facts and the health verdict as node_exporter textfile metrics.

Metric names are the contract in docs/DEVELOPING.md ("Textfile metrics of the node health
program"). A value the hardware does not report is left out, never written as NaN. Pure code.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

from .gpu_health import STATUS_VALUES, worst_status
from .prom_text import format_labels as _labels, format_number as _number

_HELP = (
    ('gpucluster_health_status', 'Node GPU health: 0 ok, 1 warning, 2 critical, 3 unknown.'),
    ('gpucluster_health_last_run_timestamp_seconds', 'Unix time of the last health run.'),
    ('gpucluster_health_issues', 'Number of health findings by severity and check.'),
    ('gpucluster_gpus', 'GPUs visible to the NVIDIA driver.'),
    ('gpucluster_gpus_expected', 'GPUs this node is expected to have.'),
    ('gpucluster_gpus_pci', 'NVIDIA display controllers on the PCI bus.'),
    ('gpucluster_gpu_info', 'GPU identity (always 1).'),
    ('gpucluster_gpu_health_status', 'Per-GPU health: 0 ok, 1 warning, 2 critical, 3 unknown.'),
    ('gpucluster_gpu_temperature_celsius', 'GPU core temperature.'),
    ('gpucluster_gpu_slowdown_temperature_celsius', 'Temperature at which the GPU slows down.'),
    ('gpucluster_gpu_power_draw_watts', 'Power draw.'),
    ('gpucluster_gpu_power_limit_watts', 'Enforced power limit.'),
    ('gpucluster_gpu_utilization_percent', 'GPU utilisation.'),
    ('gpucluster_gpu_memory_used_bytes', 'Framebuffer memory used.'),
    ('gpucluster_gpu_memory_total_bytes', 'Framebuffer memory total.'),
    ('gpucluster_gpu_ecc_errors', 'ECC error counters.'),
    ('gpucluster_gpu_retired_pages', 'Retired framebuffer pages.'),
    ('gpucluster_gpu_retired_pages_pending', 'Page retirement pending a reboot (1/0).'),
    ('gpucluster_gpu_remapped_rows', 'Remapped DRAM rows.'),
    ('gpucluster_gpu_remapped_rows_pending', 'Row remapping pending a GPU reset (1/0).'),
    ('gpucluster_gpu_remapped_rows_failure', 'Row remapping failed (1/0).'),
    ('gpucluster_gpu_xid_events', 'Xid events in the kernel log within the health window.'),
    ('gpucluster_gpu_clocks_event_active', 'Active clock event (throttle) reason (1).'),
    ('gpucluster_gpu_pcie_link_width', 'Current PCIe link width (lanes).'),
    ('gpucluster_gpu_pcie_link_width_max', 'Maximum PCIe link width (lanes).'),
    ('gpucluster_gpu_pcie_link_gen', 'Current PCIe generation.'),
    ('gpucluster_gpu_pcie_link_gen_max', 'Maximum PCIe generation.'),
    ('gpucluster_gpu_persistence_mode', 'Persistence mode (1 on, 0 off).'),
    ('gpucluster_node_version_info', 'Driver, CUDA driver API and VBIOS versions (always 1).'),
)
# The names of the metrics render() writes (dashboards and rules may use only these and the other writers').
METRIC_NAMES = tuple(name for name, _help in _HELP)
MIB = 1024 * 1024


def render(facts, timestamp):
    """Return the text of ``gpucluster_health.prom`` for build_facts() output."""
    samples = dict((entry[0], []) for entry in _HELP)

    def add(name, labels, value):
        if value is None:
            return
        samples[name].append('%s%s %s' % (name, _labels(labels), _number(value)))

    health = facts.get('health') or {}
    issues = health.get('issues') or []
    add('gpucluster_health_status', [], STATUS_VALUES.get(health.get('status'), 3))
    add('gpucluster_health_last_run_timestamp_seconds', [], int(timestamp))
    counts = {}
    for issue in issues:
        key = (issue['severity'], issue['check'])
        counts[key] = counts.get(key, 0) + 1
    for (severity, check), number in sorted(counts.items()):
        add('gpucluster_health_issues', [('severity', severity), ('check', check)], number)
    add('gpucluster_gpus', [], facts.get('count'))
    add('gpucluster_gpus_expected', [], facts.get('expected_count'))
    add('gpucluster_gpus_pci', [], facts.get('pci_count'))

    for component, version in (('nvidia_driver', facts.get('driver_version')),
                               ('cuda_driver', facts.get('cuda_version'))):
        if version:
            add('gpucluster_node_version_info', [('component', component), ('version', version)], 1)
    vbios = sorted(set(d.get('vbios_version') for d in facts.get('devices') or [] if d.get('vbios_version')))
    for version in vbios:
        add('gpucluster_node_version_info', [('component', 'gpu_vbios'), ('version', version)], 1)

    per_gpu = {}
    for issue in issues:
        if issue.get('gpu') is not None:
            per_gpu.setdefault(issue['gpu'], []).append(issue)

    for dev in facts.get('devices') or []:
        gpu = [('gpu', dev.get('index')), ('uuid', dev.get('uuid') or '')]
        info = gpu + [('name', dev.get('name') or ''), ('pci_bus_id', dev.get('pci_bus_id') or ''),
                      ('serial', dev.get('serial') or ''), ('vbios_version', dev.get('vbios_version') or '')]
        add('gpucluster_gpu_info', info, 1)
        add('gpucluster_gpu_health_status', gpu, STATUS_VALUES[worst_status(per_gpu.get(dev.get('index'), []))])
        add('gpucluster_gpu_temperature_celsius', gpu, dev.get('temperature_c'))
        add('gpucluster_gpu_slowdown_temperature_celsius', gpu, dev.get('slowdown_temperature_c'))
        add('gpucluster_gpu_power_draw_watts', gpu, dev.get('power_draw_w'))
        add('gpucluster_gpu_power_limit_watts', gpu, dev.get('power_limit_w'))
        add('gpucluster_gpu_utilization_percent', gpu, dev.get('utilization_gpu_pct'))
        for name, key in (('gpucluster_gpu_memory_used_bytes', 'memory_used_mib'),
                          ('gpucluster_gpu_memory_total_bytes', 'memory_total_mib')):
            value = dev.get(key)
            add(name, gpu, int(value * MIB) if value is not None else None)
        ecc = dev.get('ecc_errors') or {}
        for scope in ('volatile', 'aggregate'):
            for kind in ('sbe', 'dbe'):
                add('gpucluster_gpu_ecc_errors', gpu + [('type', kind), ('scope', scope)],
                    ecc.get('%s_%s' % (scope, kind)))
        pages = dev.get('retired_pages') or {}
        for kind in ('sbe', 'dbe'):
            add('gpucluster_gpu_retired_pages', gpu + [('type', kind)], pages.get(kind))
        add('gpucluster_gpu_retired_pages_pending', gpu, pages.get('pending'))
        rows = dev.get('remapped_rows') or {}
        for kind in ('correctable', 'uncorrectable'):
            add('gpucluster_gpu_remapped_rows', gpu + [('type', kind)], rows.get(kind))
        add('gpucluster_gpu_remapped_rows_pending', gpu, rows.get('pending'))
        add('gpucluster_gpu_remapped_rows_failure', gpu, rows.get('failure'))
        for event in facts.get('xid_events') or []:
            if event.get('kind') == 'xid' and event.get('gpu') == dev.get('index'):
                add('gpucluster_gpu_xid_events', gpu + [('xid', event['xid']), ('severity', event['severity'])],
                    event['count'])
        for reason in dev.get('clocks_event_reasons_active') or []:
            add('gpucluster_gpu_clocks_event_active', gpu + [('reason', reason)], 1)
        link = dev.get('pcie') or {}
        add('gpucluster_gpu_pcie_link_width', gpu, link.get('width_current'))
        add('gpucluster_gpu_pcie_link_width_max', gpu, link.get('width_max'))
        add('gpucluster_gpu_pcie_link_gen', gpu, link.get('gen_current'))
        add('gpucluster_gpu_pcie_link_gen_max', gpu, link.get('gen_max'))
        add('gpucluster_gpu_persistence_mode', gpu, dev.get('persistence_mode'))

    lines = []
    for name, text in _HELP:
        if not samples[name]:
            continue
        lines.append('# HELP %s %s' % (name, text))
        lines.append('# TYPE %s gauge' % name)
        lines.extend(samples[name])
    return '\n'.join(lines) + '\n'
