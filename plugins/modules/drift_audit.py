# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Documentation only: the audit runs on the controller as the action plugin of the same name.
from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
---
module: drift_audit
short_description: Compare the GPU software stack of every host with the pins and with its group
version_added: 0.1.0
description:
  - Runs on the controller (action plugin). Reads the C(gpu_stack) facts of
    M(gpucluster.core.stack_facts) from the hosts' facts, from an explicit O(facts) mapping, or
    from Ansible's fact cache (O(fact_cache)) without contacting any host.
  - Each host is compared with its baseline, built from the role variables that install the
    components (O(baseline_vars), for example C(nvidia_driver_version) from the inventory) and
    overridden by O(baseline). A pin may be a prefix at a version separator, so V(12.4) matches
    V(12.4.1) and V(2.21.5) matches V(2.21.5-1+cuda12.4), but V(12.4) never matches V(12.40).
  - Versions are ordered by the rules of the node's package family (dpkg or rpm). C(~) marks a
    pre-release, so V(2.21.5~rc1) does not meet a pin V(2.21.5) (Debian's repack suffixes
    V(~ds1), V(~dfsg), V(~repack) do); a pin with an epoch (V(1:2.0)) needs that epoch, a pin
    without one applies to the displayed version; rpm's C(^) snapshot meets the pin it follows.
  - The baseline is validated first; component names in O(baseline), O(baseline_vars),
    O(consistent) and O(severity) must be components of C(gpu_stack), and pins (also those from
    role variables) must be strings, so an unquoted V(12.10) that YAML reads as 12.1 is refused.
  - Components in O(consistent) must also be equal inside a group. A host that differs from the
    version most hosts of its group have is reported; a group split evenly has no majority and
    every side is reported.
  - Each finding has the keys C(host), C(component), C(expected), C(found), C(kind) and
    C(severity) (plus C(group) and C(message)). C(kind) is V(baseline) (pin not met),
    V(missing) (absent where a pin or the majority expects it), V(majority) (differs from the
    group or the group is split) or V(unknown) (the host has no usable facts because it was
    unreachable, gathering failed, it has no cache entry, the entry cannot be read, the facts
    have the wrong shape or are stale). One host's bad facts never stop the audit of the others.
  - The Docker Swarm state that M(gpucluster.core.stack_facts) reads (C(gpu_stack_details.swarm)) is no
    version and is never pinned nor compared for equality. A finding of the component C(swarm) (kind
    V(majority)) is raised for hosts active in another swarm than most active hosts of the audit (another
    cluster id, or workers whose managers are another swarm's; critical), and for hosts in a group that are
    in a swarm while most hosts with docker there are not, or out of it (inactive, locked, error, pending,
    docker not answering) while most are in (warning). When a host has docker, the task output, C(drift.md)
    and C(drift.json) show each host's swarm state.
  - Writes C(drift.json) (findings and summary), C(drift.junit.xml) (one test case per host and
    component, a failure per finding) and C(drift.md) (a table for a merge request) into
    O(report_dir), and fails when a finding reaches O(fail_on). Unknown hosts are JUnit
    C(<error>)s with the reason; characters XML cannot hold are shown escaped. When a report cannot
    be written the task prints the findings, names the paths and fails.
author:
  - gpucluster.core maintainers (@gpucluster)
attributes:
  check_mode:
    support: full
    description: Reads facts only; reports are written on the controller in check mode too.
  diff_mode:
    support: none
    description: Reports are files on the controller, not a diff of the hosts.
  action:
    support: full
    description: Runs as an action plugin on the controller; no module is sent to a host.
  async:
    support: none
    description: Runs in the controller process.
  platform:
    support: full
    platforms: posix
    description: The controller.
options:
  hosts:
    description:
      - Hosts to audit. Default is every host of the inventory and, with O(fact_cache) and
        O(include_cache_hosts), every host found in the cache.
      - A host listed here without facts is V(unknown), never passed.
    type: list
    elements: str
  facts:
    description:
      - Explicit facts per host, a mapping of host name to that host's facts (C(gpu_stack) and
        optionally C(gpu_stack_details)). Takes precedence over the cache and the hosts' facts.
    type: dict
  fact_cache:
    description:
      - Directory of an Ansible fact cache (what C(fact_caching_connection) points at). Read
        through Ansible's own cache plugin loader, so the format of the running ansible-core is
        understood. The directory must exist and be writable (the cache plugin insists).
      - The cache is only read. An entry that cannot be parsed is left as it is (the cache
        plugin's own deletion of corrupt entries is turned off) and its host is V(unknown).
      - When unset, facts come from O(facts) or from the hosts' C(ansible_facts).
    type: path
  fact_cache_plugin:
    description: Cache plugin that wrote O(fact_cache).
    type: str
    default: ansible.builtin.jsonfile
  fact_cache_prefix:
    description: The C(fact_caching_prefix) the cache was written with.
    type: str
    default: ''
  include_cache_hosts:
    description:
      - With O(fact_cache) and no O(hosts), also audit hosts found in the cache that the
        inventory does not list (they get no baseline from role variables, only O(baseline)).
    type: bool
    default: true
  baseline:
    description:
      - Component to pin, applied to every host on top of the pins from role variables.
        A V(null) value removes a pin that a role variable would set.
    type: dict
    default: {}
  baseline_vars:
    description:
      - Component to the name of the role variable whose value (from each host's variables) is
        the pin. Default maps C(nvidia_driver_version) to C(nvidia_driver),
        C(nvidia_driver_loaded) and C(nvidia_fabricmanager) (only where installed),
        C(cuda_toolkit_version) to C(cuda_toolkit), C(cuda_toolkit_cudnn_version) to C(cudnn),
        C(cuda_toolkit_nccl_version) to C(nccl), C(container_runtime_nvidia_toolkit_version) to
        C(nvidia_container_toolkit), C(slurm_version) to C(slurm), C(slurm_munge_version) to
        C(munge) and C(k8s_node_version) to C(kubelet), C(kubeadm) and C(kubectl).
      - V({}) disables pins from role variables.
    type: dict
  consistent:
    description:
      - Components that must be equal across the hosts of a group even without a pin.
      - Default C(kernel), C(nvidia_driver), C(nvidia_driver_loaded), C(cuda_toolkit), C(nccl),
        C(cudnn), C(ofed), C(rdma_core), C(hca_firmware), C(gpu_vbios), C(slurm),
        C(nvidia_container_toolkit), C(kubelet).
    type: list
    elements: str
  groups:
    description:
      - How hosts are grouped for the majority comparison. A list of inventory group names
        (a host belongs to the first listed group that contains it) or a mapping of group name
        to host list. Hosts in no group are compared with each other. Default is one group.
    type: raw
    default: []
  severity:
    description:
      - Component to severity (V(critical), V(warning), V(info)). Defaults are critical for
        kernel, driver (installed and loaded), fabric manager, CUDA, cuDNN, NCCL, OFED,
        rdma-core, Slurm, munge, the container toolkit and kubelet; warning for everything else
        (HCA firmware, VBIOS, OS, container engines, kubeadm, kubectl, DCGM, Python).
      - C(swarm) may be named too; it sets the severity of both swarm findings (default critical for
        hosts in another swarm, warning for hosts in or out of a swarm against their group).
    type: dict
    default: {}
  unknown_severity:
    description: Severity of a host without facts.
    type: str
    choices: [critical, warning, info]
    default: critical
  ignore:
    description:
      - Entries C(component) or C(host:component), shell globs allowed on both sides
        (C(gpu-0*:hca_firmware)). Ignored cells are not checked and not reported.
      - A host that is an IPv6 literal is matched literally, never as a glob; write it in brackets,
        C([::1]:nccl), or C([fe80::1]) alone for every component of that host.
    type: list
    elements: str
    default: []
  fail_on:
    description: Fail the task when a finding has this severity or a higher one.
    type: str
    choices: [critical, warning, info, never]
    default: critical
  max_fact_age:
    description:
      - Seconds. Facts collected longer ago (C(gpu_stack_details.collected_at)) make the host
        V(unknown). V(0) accepts any age.
      - Facts collected more than 300 seconds in the future (a clock ahead on the host or behind on
        the controller) make the host V(unknown) too (C(clock ahead)), never fresh.
    type: int
    default: 0
  status_var:
    description:
      - Name of a variable registered on each host by the C(stack_facts) task; when a host has
        no facts, its failure or unreachable message explains the V(unknown) finding.
    type: str
  report_dir:
    description: Directory for the reports (created when missing). No reports when unset.
    type: path
  report_formats:
    description: Which reports to write.
    type: list
    elements: str
    choices: [json, junit, markdown]
    default: [json, junit, markdown]
  markdown_max_rows:
    description:
      - Findings shown in the Markdown table; the rest are counted and left to drift.json.
      - A negative number is refused.
    type: int
    default: 500
  findings_returned:
    description:
      - Findings (most severe first) kept in the task result; the reports hold all.
      - A negative number is refused.
    type: int
    default: 100
notes:
  - Quote versions in YAML (C("12.4"), not C(12.4)) so they stay strings. A pin that is not text of at
    most 200 characters is refused; the message quotes at most 200 characters of it (a YAML alias bomb
    is never expanded).
  - A fact cache entry that is not a regular file (a FIFO, a device) or is larger than 64 MiB is never
    opened; that host is V(unknown) with the reason.
  - A component whose version C(stack_facts) could not know (C(gpu_stack_details.unknown), because its file was
    a FIFO, too large, on a hung mount) is an V(unknown) finding of that component alone.
  - Host-supplied text is inert in every report (HTML and Markdown escaped, bidi controls shown as
    escapes); the JSON report never holds NaN or Infinity.
seealso:
  - module: gpucluster.core.stack_facts
'''

EXAMPLES = r'''
- name: Audit the facts gathered by stack_facts in an earlier play
  gpucluster.core.drift_audit:
    hosts: "{{ groups['gpu_nodes'] }}"
    groups: [gpu_nodes]
    report_dir: "{{ playbook_dir }}/reports"

- name: Audit a fact cache offline with an explicit CUDA pin, warnings do not fail
  gpucluster.core.drift_audit:
    fact_cache: /var/cache/ansible/facts
    baseline:
      cuda_toolkit: "12.4"
    ignore:
      - "gpu-07:hca_firmware"
    fail_on: critical
    report_dir: /tmp/drift
'''

RETURN = r'''
summary:
  description: Counts and the verdict.
  returned: always
  type: dict
  sample:
    hosts: 3
    hosts_with_findings: 2
    hosts_unknown: 0
    checks: 36
    findings: 2
    by_severity: {critical: 2, warning: 0, info: 0}
    by_kind: {baseline: 1, majority: 1, missing: 0, unknown: 0}
    fail_on: critical
    failing_findings: 2
    failed: true
findings:
  description: The most severe findings (at most O(findings_returned)); the reports hold all.
  returned: always
  type: list
  elements: dict
  sample:
    - {host: host3, component: cuda_toolkit, expected: 12.4.1, found: 12.2.0, kind: baseline,
       severity: critical, group: gpu_nodes, message: "cuda_toolkit 12.2.0, pinned 12.4.1"}
findings_truncated:
  description: True when more findings exist than were returned.
  returned: always
  type: bool
reports:
  description: Paths of the reports written, keyed by format.
  returned: always
  type: dict
  sample: {json: /tmp/drift/drift.json, junit: /tmp/drift/drift.junit.xml, markdown: /tmp/drift/drift.md}
report_error:
  description: Why reports could not be written, naming each path; the task fails and C(msg) still holds the findings.
  returned: when a report could not be written
  type: str
  sample: "drift_audit: the reports were not written (cannot write /tmp/drift/drift.json: Permission denied); the findings follow"
'''
