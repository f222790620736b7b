#!/usr/bin/python
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
---
module: stack_facts
short_description: Installed and loaded versions of the GPU software stack as facts
version_added: 0.1.0
description:
  - Returns C(ansible_facts.gpu_stack), a flat mapping from component name to version string
    (V(null) when the component is absent), for the drift audit and for reports.
  - Reads the package database with one C(dpkg-query) or one C(rpm -qa) call and a handful of
    small files (C(/proc/driver/nvidia/version), C(/proc/driver/nvidia/gpus/*/information),
    C(/usr/local/cuda*/version.json), C(cudnn_version.h), C(nccl.h),
    C(/sys/class/infiniband/*/fw_ver), C(/etc/os-release)). It starts no GPU tool
    (no C(nvidia-smi), no NVML), so it runs in well under a second and works while the driver
    is broken.
  - Package versions are reported as the package manager has them without the epoch
    (V(535.216.01-1~deb12u1), V(2.21.5-1+cuda12.4)), so a rebuilt package with the same
    upstream version is still drift. A pin in the audit may be a prefix (V(2.21.5)).
  - C(nvidia_driver) is the installed driver package, C(nvidia_driver_loaded) the kernel module
    that runs now; they differ after a driver upgrade without a reboot.
  - Where a C(docker) CLI is on the PATH, the node's Docker Swarm state is read with one
    C(docker info --format '{{json .}}') and, on a swarm manager only, one
    C(docker node inspect self --format '{{json .}}'), into C(gpu_stack_details.swarm) and its short
    form C(gpu_stack.swarm). A docker that fails or does not answer within O(command_timeout) is
    reported there (state V(unknown) with the reason in C(error)), never a failure of the module.
author:
  - gpucluster.core maintainers (@gpucluster)
attributes:
  check_mode:
    support: full
    description: Read-only; runs the same in check mode.
  diff_mode:
    support: none
    description: Changes nothing, so there is nothing to diff.
  facts:
    support: full
    description: Sets C(gpu_stack), C(gpu_stack_cuda_toolkits) and C(gpu_stack_details).
options:
  package_manager:
    description:
      - Which package database to read. V(auto) picks C(dpkg) where C(dpkg-query) and the dpkg
        database exist, else C(rpm).
      - V(none) reads files only (images without a package database).
    type: str
    choices: [auto, dpkg, rpm, none]
    default: auto
  command_timeout:
    description:
      - Seconds the package query (C(dpkg-query) or C(rpm)) may run. A query still running then
        (a hung NFS mount, a stuck rpm database lock) is killed with its whole process group
        (coreutils C(timeout), TERM then KILL 5 seconds later) and the module fails with a
        message that says so; the drift audit reports the host as V(unknown) with that message.
        Must be at least 1.
      - Each C(docker) command gets the same time; one that overruns it (a hung dockerd) is killed
        the same way, and the swarm state is V(unknown) with that reason while the module goes on.
    type: int
    default: 60
notes:
  - Components in C(gpu_stack) (always all keys) are C(os), C(kernel), C(nvidia_driver),
    C(nvidia_driver_loaded), C(nvidia_fabricmanager), C(cuda_toolkit), C(cudnn), C(nccl),
    C(nvidia_container_toolkit), C(containerd), C(docker), C(rdma_core), C(ofed),
    C(hca_firmware), C(gpu_vbios), C(slurm), C(munge), C(kubelet), C(kubeadm), C(kubectl), C(dcgm), C(python),
    and C(swarm).
  - C(swarm) is no version but the short form of the Docker Swarm state, V(active/manager/active)
    (state, role, availability; V(active/worker) on a worker, which cannot read its availability), or the state
    alone (V(inactive), V(pending), V(error), V(locked), V(unknown)); V(null) without a docker CLI. The
    drift audit never pins it nor compares it as a version; it applies its own swarm rules to
    C(gpu_stack_details.swarm).
  - C(hca_firmware) and C(gpu_vbios) are the distinct values of all devices joined with a comma,
    so a node whose adapters run different firmware differs from one where they agree.
  - C(python) is the interpreter Ansible uses on the node.
  - Output and files that are not UTF-8 are decoded with U+FFFD for the bad bytes, so the facts
    are always valid text (no surrogates that would break the fact cache or the audit).
  - Only regular files are read, opened without blocking, at most 64 KiB each (C(ofed_info) its first
    4 KiB), each within 10 seconds. A file that is a FIFO or a device, is larger, nests its JSON deeper
    than 32 levels, or sits on a mount that does not answer (a hung NFS server) is listed in
    C(gpu_stack_details.unreadable) with the reason, and a component that cannot be known without it is
    V(null) in C(gpu_stack) and listed with that reason in C(gpu_stack_details.unknown), and the drift audit
    reports it as V(unknown), never as absent. Nothing more under a mount that did not answer is tried.
seealso:
  - module: gpucluster.core.drift_audit
'''

EXAMPLES = r'''
- name: Collect the versions of the GPU stack
  gpucluster.core.stack_facts:

- name: Show the loaded and the installed driver
  ansible.builtin.debug:
    msg: >-
      installed {{ ansible_facts['gpu_stack']['nvidia_driver'] }},
      loaded {{ ansible_facts['gpu_stack']['nvidia_driver_loaded'] }}
'''

RETURN = r'''
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    gpu_stack:
      description: Component name to version string, V(null) when the component is absent.
      returned: always
      type: dict
      sample:
        os: debian 12.7
        kernel: 6.1.0-25-amd64
        nvidia_driver: 550.54.15-1
        nvidia_driver_loaded: 550.54.15
        nvidia_fabricmanager: 550.54.15-1
        cuda_toolkit: 12.4.1
        cudnn: 9.1.0.70-1
        nccl: 2.21.5-1+cuda12.4
        nvidia_container_toolkit: 1.16.2-1
        containerd: 1.7.22-1
        docker: null
        rdma_core: 2404mlnx51-1.2404066
        ofed: 24.04-0.6.6.0
        hca_firmware: 28.39.1002
        gpu_vbios: 96.00.89.00.01
        slurm: 23.11.10-1
        munge: 0.5.15-2
        kubelet: null
        kubeadm: null
        kubectl: null
        dcgm: 3.3.8
        python: 3.11.2
        swarm: active/worker
    gpu_stack_cuda_toolkits:
      description: Every installed CUDA toolkit, sorted by version.
      returned: always
      type: list
      elements: dict
      sample: [{version: 12.2.2, path: /usr/local/cuda-12.2, source: file:/usr/local/cuda-12.2/version.json}]
    gpu_stack_details:
      description:
        - Where each value came from (C(sources)), raw package versions with epoch where they
          differ (C(raw)), packages left half-installed (C(broken_packages)), per-GPU VBIOS
          (C(gpus)), per-HCA firmware (C(hcas)), the kernel module flavour
          (C(nvidia_kernel_module), V(open) or V(proprietary)), the package manager read, and
          C(collected_at) (seconds since the epoch) which the audit uses to refuse stale facts.
        - C(unreadable) maps each file (or CUDA directory) that could not be read to the reason;
          C(unknown) maps each component whose version cannot be known to the reason (its version in
          C(gpu_stack) is V(null)).
        - In C(gpu_stack_cuda_toolkits), a toolkit directory whose version cannot be read (and that no
          package names) has V(null) as its version and the reason in C(unknown).
        - C(swarm) is the Docker Swarm state of the node (see RV(ansible_facts.gpu_stack_details.swarm)).
      returned: always
      type: dict
      contains:
        swarm:
          description:
            - The node's Docker Swarm state from C(docker info) and, on a manager, C(docker node inspect self).
            - C(state) is V(inactive), V(pending), V(active), V(error) or V(locked) as the engine reports it,
              V(unknown) when docker did not answer (the daemon is down or hung, the socket is not
              accessible; the reason is in C(error)), V(absent) when no docker CLI is on the PATH.
            - C(role) is V(manager), V(worker) or empty (not active). C(availability) (V(active), V(pause),
              V(drain)), C(status) (V(ready), V(down)), C(reachability) and C(leader) are known on managers
              only (a worker cannot inspect itself), empty and V(false) elsewhere.
            - C(cluster_id) is the swarm's cluster id (managers only), C(managers) the managers the node knows
              (C(RemoteManagers), each a C(node_id) and an C(addr)), C(error) what docker reported (its
              C(Swarm.Error), a failed command).
          returned: always
          type: dict
          sample:
            state: active
            role: manager
            availability: active
            status: ready
            reachability: reachable
            leader: true
            node_id: 4vzgkl1ovjh5bfmd3hmk5o1xq
            node_addr: 10.0.0.1
            cluster_id: w2s0d6tfqcgu8m2mjlsd5ca0r
            managers: [{node_id: 4vzgkl1ovjh5bfmd3hmk5o1xq, addr: "10.0.0.1:2377"}]
            error: ''
'''

import glob
import os
import platform
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpucluster.core.plugins.module_utils import stack_versions as sv
from ansible_collections.gpucluster.core.plugins.module_utils import swarm_report
from ansible_collections.gpucluster.core.plugins.module_utils.bounded_read import (
    TimedOut, Unreadable, call_with_timeout, read_regular)
from ansible_collections.gpucluster.core.plugins.module_utils.timed_command import run_timed

# Where the module reads; a test points this at a fake root.
ROOT = '/'

CUDA_DIRS = 'usr/local/cuda-*'
CUDA_LINK = 'usr/local/cuda'
CUDNN_HEADERS = (
    'usr/include/cudnn_version.h', 'usr/include/x86_64-linux-gnu/cudnn_version.h',
    'usr/include/aarch64-linux-gnu/cudnn_version.h', 'usr/local/cuda/include/cudnn_version.h',
)
NCCL_HEADERS = ('usr/include/nccl.h', 'usr/local/cuda/include/nccl.h')
OFED_INFO = 'usr/bin/ofed_info'
# ofed_info is a generated shell script of a few hundred lines: read its head, never run it.
OFED_INFO_BYTES = 4096
# Every file read is a regular file of at most this size (version.json is about 2 KB, a header 4 KB).
FILE_MAX_BYTES = 65536
# Seconds one file (or one CUDA directory) may take to answer: a stat or a read on a hung NFS mount
# never returns; the path is reported unreadable and the module goes on.
FILE_TIMEOUT = 10
# The files each component is read from (besides the package database): a component absent
# everywhere whose file could not be read is unknown, with the reason, never absent.
COMPONENT_FILES = {
    'os': ('/etc/os-release', '/usr/lib/os-release'),
    'nvidia_driver_loaded': ('/proc/driver/nvidia/version',),
    'cudnn': tuple('/' + h for h in CUDNN_HEADERS),
    'nccl': tuple('/' + h for h in NCCL_HEADERS),
    'ofed': ('/' + OFED_INFO,),
    'gpu_vbios': ('/proc/driver/nvidia/gpus/*/information',),
    'hca_firmware': ('/sys/class/infiniband/*/fw_ver',),
}


def _path(relative):
    return os.path.join(ROOT, relative)


def _relative(path):
    return '/' + os.path.relpath(path, ROOT)


def _glob(pattern):
    return sorted(glob.glob(_path(pattern)))


class Reader(object):
    """Reads the node's files: regular files only (a FIFO or a device is never waited on), at most
    FILE_MAX_BYTES, each within FILE_TIMEOUT seconds. Why a file was not read is kept in
    ``unreadable`` (node path -> reason); after one timeout, nothing more under that path is tried."""

    def __init__(self, timeout=None):
        self.timeout = FILE_TIMEOUT if timeout is None else timeout
        self.unreadable = {}
        self._hung = []

    def _hung_under(self, node_path):
        for hung in self._hung:
            if node_path == hung or node_path.startswith(hung.rstrip('/') + '/'):
                return hung
        return None

    def call(self, node_path, function, *args):
        """(value, reason): ``function(*args)`` on ``node_path`` within the time limit."""
        hung = self._hung_under(node_path)
        if hung:
            return None, 'not read: %s did not answer before' % hung
        try:
            return call_with_timeout(function, self.timeout, *args), None
        except TimedOut:
            self._hung.append(node_path)
            return None, 'no answer within %s s (a hung mount?)' % self.timeout
        except Unreadable as exc:
            return None, str(exc)
        except (IOError, OSError) as exc:
            return None, exc.strerror or str(exc)

    def text(self, relative, limit=FILE_MAX_BYTES, head=False):
        """The file's text, None when it does not exist or cannot be read (then recorded)."""
        node_path = '/' + relative.lstrip('/')
        data, reason = self.call(node_path, read_regular, _path(relative), limit, head)
        if reason:
            self.unreadable[node_path] = reason
            return None
        return None if data is None else data.decode('utf-8', 'replace')


class QueryTimeout(Exception):
    pass


def run_query(module, argv, timeout):
    """Run a package query under a time limit (module_utils/timed_command.py: the whole process
    group is signalled); returns (rc, stdout, stderr) as text, bytes that are not UTF-8 as U+FFFD.
    Raises :class:`QueryTimeout` when the query was killed for time.
    """
    rc, out, err = run_timed(module, argv, timeout, environ_update={'LC_ALL': 'C', 'LANG': 'C'})
    if rc is None:
        raise QueryTimeout()
    return rc, sv.decode_output(out), sv.decode_output(err)


def read_packages(module, manager):
    if manager == 'none':
        return 'none', {}, {}
    dpkg = module.get_bin_path('dpkg-query')
    rpm = module.get_bin_path('rpm')
    if manager == 'auto':
        if dpkg and os.path.exists(_path('var/lib/dpkg/status')):
            manager = 'dpkg'
        elif rpm:
            manager = 'rpm'
        else:
            return 'none', {}, {}
    if manager == 'dpkg':
        if not dpkg:
            module.fail_json(msg='package_manager=dpkg but dpkg-query is not on this node')
        argv = [dpkg, '-W', '-f', sv.DPKG_QUERY_FORMAT]
        parser = sv.parse_dpkg_query
    else:
        if not rpm:
            module.fail_json(msg='package_manager=rpm but rpm is not on this node')
        argv = [rpm, '-qa', '--qf', sv.RPM_QUERY_FORMAT]
        parser = sv.parse_rpm_query
    timeout = module.params['command_timeout']
    try:
        rc, out, err = run_query(module, argv, timeout)
    except QueryTimeout:
        module.fail_json(msg='reading the %s package database timed out: %s did not finish within '
                             'command_timeout=%d s and was killed with its process group (a locked '
                             'or hung package database?)' % (manager, os.path.basename(argv[0]), timeout))
    if rc != 0:
        module.fail_json(msg='reading the %s package database failed (rc=%s): %s' % (manager, rc, err.strip()))
    installed, broken = parser(out)
    return manager, installed, broken


def _docker(module, docker, args):
    """(output, '') of one docker command, or ('', why it failed): never a module failure."""
    what = ' '.join(('docker',) + tuple(args[:list(args).index('--format')]))
    timeout = module.params['command_timeout']
    try:
        rc, out, err = run_query(module, [docker] + list(args), timeout)
    except QueryTimeout:
        return '', ('%s did not finish within command_timeout=%d s and was killed with its process group '
                    '(a hung dockerd?)' % (what, timeout))
    except OSError as exc:
        return '', '%s could not start: %s' % (what, exc.strerror or exc)
    if rc != 0:
        return '', '%s failed (rc=%s): %s' % (what, rc, ' '.join(err[:4000].split()) or 'no message')
    return out, ''


def read_swarm(module):
    """The node's swarm report (module_utils/swarm_report.py): docker info, and on a manager docker node
    inspect self; the report of state absent without a docker CLI."""
    docker = module.get_bin_path('docker')
    if not docker:
        return swarm_report.absent()
    out, error = _docker(module, docker, swarm_report.INFO_ARGS)
    report = swarm_report.from_info(out, error)
    if swarm_report.needs_node_inspect(report):
        out, error = _docker(module, docker, swarm_report.NODE_ARGS)
        report = swarm_report.with_node(report, out, error)
    return report


def _cuda_directory(reader, directory):
    """The version files of one CUDA directory, read within the time limit; None when it is no
    directory of its own (a link, a file)."""
    node_dir = _relative(directory)
    is_dir, reason = reader.call(node_dir, lambda: os.path.isdir(directory) and not os.path.islink(directory))
    if reason:
        return {'json': None, 'txt': None, 'problems': {node_dir: reason}}
    if not is_dir:
        return None
    rel = node_dir.lstrip('/')
    files = {'json': reader.text(rel + '/version.json'), 'txt': reader.text(rel + '/version.txt')}
    problems = dict((path, why) for path, why in reader.unreadable.items() if path.startswith(node_dir + '/'))
    if problems:
        files['problems'] = problems
    return files


def read_inputs(module, reader=None):
    reader = reader or Reader()
    manager, packages, broken = read_packages(module, module.params['package_manager'])
    inputs = {
        'package_manager': manager,
        'packages': packages,
        'broken_packages': broken,
        'os_release': reader.text('etc/os-release') or reader.text('usr/lib/os-release'),
        'debian_version': reader.text('etc/debian_version'),
        'kernel': platform.release(),
        'python': platform.python_version(),
        'proc_driver_version': reader.text('proc/driver/nvidia/version'),
        'ofed_info': reader.text(OFED_INFO, OFED_INFO_BYTES, head=True),
    }

    gpus = {}
    for info in _glob('proc/driver/nvidia/gpus/*/information'):
        gpus[os.path.basename(os.path.dirname(info))] = reader.text(_relative(info).lstrip('/'))
    inputs['gpu_information'] = gpus

    version_files = {}
    for directory in _glob(CUDA_DIRS):
        files = _cuda_directory(reader, directory)
        if files is not None:
            version_files[_relative(directory)] = files
    inputs['cuda_version_files'] = version_files
    link = _path(CUDA_LINK)
    target, reason = reader.call('/' + CUDA_LINK, lambda: os.path.realpath(link) if os.path.exists(link) else None)
    if reason:
        version_files['/' + CUDA_LINK] = {'json': None, 'txt': None, 'problems': {'/' + CUDA_LINK: reason}}
        inputs['cuda_default_path'] = '/' + CUDA_LINK
    elif target is not None:
        inputs['cuda_default_path'] = _relative(target)
        if inputs['cuda_default_path'] not in version_files and not os.path.islink(link):
            # A plain directory /usr/local/cuda (runfile installs without the versioned dir).
            files = _cuda_directory(reader, link)
            if files is not None:
                version_files['/' + CUDA_LINK] = files

    for key, headers in (('cudnn_headers', CUDNN_HEADERS), ('nccl_headers', NCCL_HEADERS)):
        found = {}
        for header in headers:
            text = reader.text(header)
            if text is not None:
                found['/' + header] = text
        inputs[key] = found

    hcas = {}
    for fw in _glob('sys/class/infiniband/*/fw_ver'):
        device_dir = os.path.dirname(fw)
        # Software devices (rxe, siw) have no PCI device behind them and no firmware.
        if not os.path.exists(os.path.join(device_dir, 'device')):
            continue
        hcas[os.path.basename(device_dir)] = reader.text(_relative(fw).lstrip('/'))
    inputs['hca_fw'] = hcas
    inputs['unreadable'] = dict(reader.unreadable)
    inputs['component_files'] = COMPONENT_FILES
    return inputs


def main():
    module = AnsibleModule(
        argument_spec=dict(
            package_manager=dict(type='str', default='auto', choices=['auto', 'dpkg', 'rpm', 'none']),
            command_timeout=dict(type='int', default=60),
        ),
        supports_check_mode=True,
    )
    if module.params['command_timeout'] < 1:
        module.fail_json(msg='command_timeout=%d; accepted: a number of seconds of at least 1'
                             % module.params['command_timeout'])
    started = time.time()
    inputs = read_inputs(module)
    stack, toolkits, details = sv.build_stack(inputs)
    details['swarm'] = read_swarm(module)
    stack['swarm'] = swarm_report.summary(details['swarm'])
    details['collected_at'] = round(time.time(), 3)
    details['duration_s'] = round(time.time() - started, 3)
    # File names, uname and file contents may hold bytes that are not UTF-8.
    module.exit_json(changed=False, ansible_facts=sv.clean_facts(dict(
        gpu_stack=stack,
        gpu_stack_cuda_toolkits=toolkits,
        gpu_stack_details=details,
    )))


if __name__ == '__main__':
    main()
