# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
---
module: gpu_facts
short_description: NVIDIA GPU inventory and health facts from nvidia-smi, the PCI bus and the kernel log
version_added: "0.1.0"
description:
  - Runs C(nvidia-smi -q -x) once, counts NVIDIA display controllers on the PCI bus
    (C(/sys/bus/pci/devices/*/vendor) 0x10de, class 0x03xx) and reads the kernel log for Xid/SXid events
    within a window (C(journalctl -k) where the journal holds kernel messages, else C(dmesg)).
  - Returns one record per GPU (numbers as numbers, flags as booleans, C(null) for a value the
    hardware does not report) and a health verdict with the same rules as the node health program
    C(gpucluster-health) installed by the P(gpucluster.core.health_check#role) role.
  - A host without NVIDIA hardware and without nvidia-smi gets O(ignore:present=false), C(count=0) and
    health C(ok); the module does not fail there.
  - Output of nvidia-smi that is not parseable XML (also exit 0 with nothing or garbage on stdout) fails
    the module with a readable message; the facts returned with the failure carry health C(unknown),
    or C(critical) when NVIDIA GPUs are on the PCI bus.
  - Every command (nvidia-smi, journalctl, dmesg) runs under O(timeout) (the kernel log reads under at
    most 30 seconds); on expiry the command's whole process group is killed. nvidia-smi not answering
    is critical, a kernel-log read that times out makes the status C(unknown).
author:
  - gpucluster.core maintainers (@gpucluster)
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
    details: Read-only; runs the same probes in check mode.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
  facts:
    description: Action returns an C(ansible_facts) dictionary that will update existing host facts.
    support: full
  idempotent:
    description: When run twice in a row outside check mode, with the same arguments, the second invocation indicates no change.
    support: full
options:
  nvidia_smi_path:
    description:
      - Path of nvidia-smi. Default is C(nvidia-smi) found on E(PATH) or in the usual system directories.
      - A configured path that does not exist counts as "no nvidia-smi" (then NVIDIA GPUs on the PCI bus
        make the host critical).
    type: path
  expected_count:
    description:
      - Number of GPUs this host must have (at most 4096). Fewer distinct GPUs is critical, more is a warning.
        Unset or 0 skips the check.
    type: int
  thresholds:
    description:
      - Overrides of the health thresholds; unset keys keep their defaults (see docs/health-checks.md).
      - Every number must be finite and within its range (counts 0 to 2**63-1, C(temperature_margin_c) 0 to 1000,
        C(pcie_gen_load_pct) 0 to 100); NaN, infinities (also C(1e999)) and values out of range fail the module
        with a message naming the threshold.
    type: dict
    default: {}
    suboptions:
      temperature_margin_c:
        description: Warn when a GPU is this many degrees C (or fewer) below its slowdown temperature. Default 5.
        type: float
      sram_correctable_max:
        description: Lifetime correctable SRAM ECC errors above which a GPU gets a warning. Default 10000.
        type: int
      dram_correctable_max:
        description: Lifetime correctable DRAM ECC errors above which a GPU gets a warning. Default 20000000.
        type: int
      retired_pages_max:
        description: Retired pages (SBE+DBE) at which a pre-Ampere GPU is critical (replace). Default 60.
        type: int
      remapped_rows_uncorrectable_max:
        description: Rows remapped after uncorrectable errors above which a GPU is critical. Default 512.
        type: int
      pcie_width_severity:
        description: Severity of a PCIe link narrower than its maximum. Default C(warning).
        type: str
        choices: [info, warning, critical, ignore]
      pcie_gen_load_pct:
        description: PCIe generation below maximum is judged only at or above this GPU utilisation. Default 50.
        type: int
      persistence_mode_severity:
        description: Severity of persistence mode off. Default C(warning).
        type: str
        choices: [info, warning, critical, ignore]
      hw_slowdown_severity:
        description: Severity of an active HW slowdown, HW thermal slowdown or HW power brake. Default C(critical).
        type: str
        choices: [info, warning, critical, ignore]
      xid_ignore:
        description: Xid codes that are never reported. Each from 0 to 999999; a string is read by Ansible as a
          comma-separated list (C("79") is C([79]), never C([7, 9])).
        type: list
        elements: int
  xid_window_minutes:
    description: Kernel log window for Xid/SXid events, in minutes (1 to 52704000, 100 years).
    type: int
    default: 120
  kernel_log_path:
    description:
      - Read the kernel log from this file instead of C(journalctl -k)/C(dmesg) (tests, the lab, a
        collected log). Only lines dated within the window count; undated lines and lines whose date
        cannot be read never count as recent. The file is read from its end, at most its last 16 MiB.
      - The file must hold kernel messages only (such as C(/var/log/kern.log), in rsyslog's traditional or
        RFC 3339 format, with or without the kernel's own time stamp); a file into which other programs write
        (C(/var/log/syslog)) lets them write lines that look like the kernel's.
      - It must be a regular file; a FIFO, a device or a directory is not read (the Xid check is reported as
        skipped), so it never blocks the module.
    type: path
  sysfs_root:
    description: Root of sysfs, for the PCI device count. A test seam; keep the default on real hosts.
    type: path
    default: /sys
  timeout:
    description:
      - Seconds nvidia-smi may take before it counts as not answering (critical), 1 to 86400; the command and
        everything it started are then killed (coreutils C(timeout), TERM then KILL 5 seconds later).
      - The command's own exit is what counts; a process it left behind holding its output open is killed
        2 seconds after it exited and never makes it count as hung. Output beyond 16 MiB is not kept (nvidia-smi
        output cut there is not judged).
    type: int
    default: 60
  fail_on:
    description:
      - C(never) only reports. C(critical) fails the task when the health status is critical.
        C(warning) fails it on warning, critical or unknown.
    type: str
    choices: [never, warning, critical]
    default: never
notes:
  - The kernel log is often not readable inside a container. The Xid check is then skipped and
    reported as an C(info) finding and in RV(ansible_facts.gpu.health.checks_skipped); it does not
    change the health status.
  - O(ignore:index) follows NVML and nvidia-smi (PCI bus order). The device node is
    C(/dev/nvidia<minor_number>), which can differ from the index.
seealso:
  - name: GPU health checks
    description: Checks, thresholds and severities.
    link: https://github.com/gpucluster/gpucluster.core/blob/main/docs/health-checks.md
'''

EXAMPLES = r'''
- name: Gather GPU facts
  gpucluster.core.gpu_facts:

- name: Fail nodes with fewer than 8 GPUs or any critical finding
  gpucluster.core.gpu_facts:
    expected_count: 8
    fail_on: critical

- name: Looser thermal margin, PCIe width is critical on training nodes
  gpucluster.core.gpu_facts:
    thresholds:
      temperature_margin_c: 8
      pcie_width_severity: critical
      xid_ignore: [94]

- name: Show the verdict
  ansible.builtin.debug:
    msg: "{{ ansible_facts['gpu']['health']['status'] }}: {{ ansible_facts['gpu']['health']['issues'] | map(attribute='message') }}"
'''

RETURN = r'''
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    gpu:
      description: GPU inventory and health.
      returned: always
      type: dict
      contains:
        present:
          description: NVIDIA GPUs on the PCI bus, reported by the driver, or nvidia-smi installed.
          type: bool
          sample: true
        source:
          description: Where the device records came from (C(nvidia-smi) or C(none)).
          type: str
          sample: nvidia-smi
        nvidia_smi_path:
          description: nvidia-smi that was run (or configured), null when none was found.
          type: str
          sample: /usr/bin/nvidia-smi
        driver_version:
          description: NVIDIA driver version.
          type: str
          sample: "590.44.01"
        cuda_version:
          description: Highest CUDA version the driver supports.
          type: str
          sample: "13.1"
        attached_gpus:
          description: GPU count as printed by nvidia-smi in C(attached_gpus).
          type: int
          sample: 2
        count:
          description: GPUs the driver reported (device records; a GPU listed twice is a critical C(gpu_identity) finding).
          type: int
          sample: 2
        expected_count:
          description: O(expected_count), null when unset.
          type: int
          sample: 8
        pci_count:
          description: NVIDIA display controllers on the PCI bus; null when sysfs is not readable.
          type: int
          sample: 2
        pci_devices:
          description: Their PCI addresses (C(dddd:bb:dd.f)).
          type: list
          elements: str
          sample: ["0000:81:00.0", "0000:c1:00.0"]
        numa_nodes_with_cpus:
          description:
            - The NUMA nodes that have CPUs (sysfs C(devices/system/node/has_cpu)); null when there is no NVIDIA
              GPU on the PCI bus or the file cannot be read. The slurm role derives gres.conf's C(Cores=) from it
              and each device's C(numa_node).
          type: list
          elements: int
          sample: [0, 1]
        devices:
          description:
            - One record per GPU ordered by C(index). Keys include C(index), C(minor_number), C(uuid), C(name),
              C(serial), C(pci_bus_id), C(pci_address), C(vbios_version), C(memory_total_mib), C(memory_used_mib),
              C(temperature_c), C(slowdown_temperature_c), C(power_draw_w), C(power_limit_w),
              C(utilization_gpu_pct), C(persistence_mode), C(mig_mode), C(ecc_mode), C(ecc_errors)
              (C(volatile_sbe), C(volatile_dbe), C(aggregate_sbe), C(aggregate_dbe) and the SRAM/DRAM split),
              C(retired_pages) (C(sbe), C(dbe), C(pending)), C(remapped_rows) (C(correctable), C(uncorrectable),
              C(pending), C(failure)), C(pcie) (C(gen_current), C(gen_max), C(width_current), C(width_max)),
              C(clocks_event_reasons_active), C(nvlink), C(mig_devices) (MIG devices with C(index),
              C(gpu_instance_id), C(compute_instance_id), C(memory_total_mib) and their own C(ecc_errors)),
              C(error_states) (fields the driver writes that are in an error state, such as
              C(uuid=[GPU is lost]) or C(memory_total_mib=[N/A]); any entry makes the GPU critical; process names
              and vGPU guest reports are never read), and C(cpu_affinity) where nvidia-smi reports it; C(numa_node) where nvidia-smi or sysfs
              (C(bus/pci/devices/ADDRESS/numa_node), when not negative) reports it.
          type: list
          elements: dict
        xid_window_minutes:
          description: Window of the Xid check.
          type: int
          sample: 120
        kernel_log_source:
          description: C(journalctl), C(dmesg), C(file) or null when no kernel log was readable.
          type: str
          sample: journalctl
        xid_events:
          description: Xid/SXid/bus events in the window, grouped by kind, code and PCI address, with C(count).
          type: list
          elements: dict
        health:
          description: Verdict.
          type: dict
          contains:
            status:
              description: C(ok), C(warning), C(critical) or C(unknown).
              type: str
              sample: ok
            issues:
              description: Findings, each with C(gpu) (index or null), C(check), C(severity) and C(message).
              type: list
              elements: dict
            checks_skipped:
              description: Checks that could not run (for example C(xid) without a readable kernel log).
              type: list
              elements: str
'''

import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpucluster.core.plugins.module_utils.gpu_health import (
    SETTING_LIMITS, ThresholdError, build_facts, merge_thresholds, threshold_argument_spec)
from ansible_collections.gpucluster.core.plugins.module_utils.gpu_probe import collect
from ansible_collections.gpucluster.core.plugins.module_utils.timed_command import run_timed

_THRESHOLD_OPTIONS = threshold_argument_spec()


def _runner(module):
    """``run(argv, timeout) -> (rc, stdout, stderr)``, rc None when the command was killed for time
    (module_utils/timed_command.py: the whole process group is signalled)."""
    def run(argv, timeout):
        if not os.path.exists(argv[0]):
            raise OSError('%s: no such file' % argv[0])
        return run_timed(module, argv, timeout)
    return run


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nvidia_smi_path=dict(type='path'),
            expected_count=dict(type='int'),
            thresholds=dict(type='dict', default={}, options=_THRESHOLD_OPTIONS),
            xid_window_minutes=dict(type='int', default=120),
            kernel_log_path=dict(type='path'),
            sysfs_root=dict(type='path', default='/sys'),
            timeout=dict(type='int', default=60),
            fail_on=dict(type='str', default='never', choices=['never', 'warning', 'critical']),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if params['expected_count'] is not None and not 0 <= params['expected_count'] <= SETTING_LIMITS['expected_count']:
        module.fail_json(msg='expected_count must be >= 0 and <= %d, got %s'
                         % (SETTING_LIMITS['expected_count'], params['expected_count']))
    for name in ('xid_window_minutes', 'timeout'):
        if not 1 <= params[name] <= SETTING_LIMITS[name]:
            module.fail_json(msg='%s must be >= 1 and <= %d, got %s' % (name, SETTING_LIMITS[name], params[name]))
    try:
        thresholds = merge_thresholds(params['thresholds'])
    except ThresholdError as exc:
        module.fail_json(msg='thresholds: %s' % exc)

    snapshot = collect(_runner(module), nvidia_smi_path=params['nvidia_smi_path'], sysfs_root=params['sysfs_root'],
                       kernel_log_path=params['kernel_log_path'], window_minutes=params['xid_window_minutes'],
                       now=time.time(), timeout=params['timeout'])
    smi = snapshot['smi']
    facts = build_facts(snapshot, expected_count=params['expected_count'] or None, thresholds=thresholds,
                        window_minutes=params['xid_window_minutes'])
    if smi.get('xml_error'):
        module.fail_json(msg='could not parse the output of %s -q -x: %s' % (smi['path'], smi['xml_error']),
                         ansible_facts={'gpu': facts})
    status = facts['health']['status']
    failing = {'never': (), 'critical': ('critical',), 'warning': ('warning', 'critical', 'unknown')}
    if status in failing[params['fail_on']]:
        problems = [i['message'] for i in facts['health']['issues'] if i['severity'] in ('warning', 'critical', 'unknown')]
        module.fail_json(msg='GPU health %s: %s' % (status, '; '.join(problems)), ansible_facts={'gpu': facts})
    module.exit_json(changed=False, ansible_facts={'gpu': facts})


if __name__ == '__main__':
    main()
