# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
---
module: converged
short_description: Decide in one round trip whether a role's node is still as its last full run left it
version_added: "0.3.0"
description:
  - The converged-state fast path of the collection's roles (docs/performance.md, "Fast path"). With
    O(state=check), compares the role's fingerprint, computed on the controller by the action plugin of the same
    name, with the one recorded on the node by the last full run that finished, and observes in the same call
    everything the role manages (files, packages, services, device globs, probes). Equal and unchanged gives
    RV(converged=true) and the role skips its remaining tasks as a block. Anything different, missing or
    unreadable gives RV(converged=false) with the reasons, and the record is removed (outside check mode) so that
    only a full run that finishes can write it again.
  - With O(state=record), observes the same managed state and writes the record, C(<record_dir>/<role>.json),
    mode 0600 in a 0700 directory. It holds digests only, never a variable's value.
  - The action plugin computes the fingerprint from the role's code and the collection's plugins, the role's own
    variables, the site switches, the facts the role reads and the inputs it declares; it sends only digests.
    C(gpucluster_fast_path=false) turns the comparison off (the full path runs; the record is still written).
  - With O(state=check) the result also holds RV(packages), the installed versions of the role's packages as
    observed, so that the full path can leave out an install that would change nothing (apt's
    C(state=present) of names already at their pins; the filter C(gpucluster.core.apt_request_installed)).
author:
  - gpucluster.core maintainers (@gpucluster)
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
  idempotent:
    description: When run twice in a row outside check mode, with the same arguments, the second invocation indicates no change.
    support: full
  action:
    description: Indicates this has a corresponding action plugin so some parts of the options can be executed on the controller.
    support: full
options:
  role:
    description: The role whose state is compared or recorded (the record's file name).
    type: str
    required: true
  instance:
    description:
      - Tells apart two uses of the same role on one node (shared_storage as NFS server and as client); the
        record is C(<role>.<instance>.json).
    type: str
    default: ''
  state:
    description: C(check) compares, C(record) writes the record after a finished full run.
    type: str
    choices: [check, record]
    default: check
  fingerprint:
    description:
      - The fingerprint record (digest, part digests, per-name digests). Set by the action plugin, which computes it
        for both states (for O(state=record) again after the full path, from the same O(inputs) and O(facts)).
    type: dict
  inputs:
    description:
      - Values the role reads besides its own variables and this node's facts (other hosts' addresses and shapes,
        derived values), as a mapping; the action plugin folds their digests into the fingerprint and removes them
        before the module runs.
    type: dict
  facts:
    description:
      - Fact names the role reads that its files do not name as C(ansible_facts['NAME']) (for example facts a filter
        reads from the whole C(ansible_facts)); the action plugin adds them to the ones it finds in the role's files.
    type: list
    elements: str
  manages:
    description:
      - What the role manages on the node and the fast path verifies (C(outputs), a list of the role's reported
        variables, is read by the action plugin). Keys C(files) (absolute paths; content,
        mode, owner and group, or a link's target), C(packages) (installed version and hold), C(services) (unit
        enabled and active; a pattern with C(*) stands for every file it matches), C(globs) (the set of matching
        paths, for device nodes) and C(probes) (a list of
        C(name) and C(argv); the command's exit status and output, for runtime state no file shows).
    type: dict
  outputs:
    description:
      - With O(state=record), values the role reports to the play (its reboot request), kept in the record and
        returned as RV(outputs) by a check that finds the node converged, so that a skipped role still reports
        them. The action plugin sets it from C(manages.outputs), a list of variable names whose values it takes
        from the play; those variables are never part of the fingerprint. Stored on the node in the clear, so
        never a secret.
    type: dict
  compare:
    description:
      - With O(state=check), V(false) observes the packages only and compares nothing (the action plugin sets it when
        C(gpucluster_fast_path) is false). RV(converged) is then false and the record stays as it is (the full path's
        O(state=record) writes it again only where it differs, so a full run of a converged node changes nothing).
    type: bool
    default: true
  record_dir:
    description: Directory of the records.
    type: path
    default: /var/lib/gpucluster/converged
  probe_timeout:
    description: Seconds a probe may run; a probe that takes longer counts as changed.
    type: int
    default: 10
seealso:
  - module: gpucluster.core.file_set
notes:
  - The record is written only by a run without C(--tags) and without a C(--skip-tags) naming a tag of the
    role (the action plugin says so in RV(recordable)), since a run that applied part of a role must not stand for a
    full one.
'''

EXAMPLES = r'''
- name: Compare the node with the state the last full run of os_tuning left
  gpucluster.core.converged:
    role: os_tuning
    manages: "{{ __os_tuning_fast_path }}"
  register: __os_tuning_converged

- name: Apply the role's tasks when something differs
  ansible.builtin.include_tasks: converge.yml
  when: not __os_tuning_converged.converged

- name: Record the converged state after a finished full run
  gpucluster.core.converged:
    role: os_tuning
    state: record
    manages: "{{ __os_tuning_fast_path }}"
  when: not __os_tuning_converged.converged and __os_tuning_converged.recordable
'''

RETURN = r'''
converged:
  description: With O(state=check), whether the fingerprint and the managed state are those of the record.
  returned: always
  type: bool
reasons:
  description: Why the node is not converged (empty when it is).
  returned: always
  type: list
  elements: str
  sample: ["variables changed: slurm_version", "file /etc/slurm/slurm.conf changed (content)"]
fingerprint:
  description: The fingerprint record (digests only) the check compared.
  returned: with O(state=check)
  type: dict
recordable:
  description: Whether this run may record the state once the full path has finished (not in check mode, no
    C(--tags), no C(--skip-tags) naming a tag of the role, and the fingerprint could be computed).
  returned: with O(state=check)
  type: bool
outputs:
  description: With O(state=check), the outputs of the last full run when the node is converged, else empty.
  returned: with O(state=check)
  type: dict
invalidated:
  description: Whether the check removed a record that no longer holds.
  returned: with O(state=check)
  type: bool
record_path:
  description: The record's path on the node.
  returned: always
  type: str
packages:
  description:
    - With O(state=check), each package of C(manages.packages) as observed now, C(version) (None when it is not
      installed) and C(held); empty when the fingerprint could not be computed (nothing was observed).
  returned: with O(state=check)
  type: dict
  sample: {restic: {version: 0.14.0-1+b5, held: true}}
'''

import errno
import glob
import hashlib
import json
import os
import stat

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native

from ansible_collections.gpucluster.core.plugins.module_utils import atomic_file
from ansible_collections.gpucluster.core.plugins.module_utils import converged_state as cs
from ansible_collections.gpucluster.core.plugins.module_utils import timed_command

# A larger managed file is compared by size, modification and change time instead of its bytes
# (program archives and binaries: reading them on every run would cost more than the run saves).
HASH_MAX_BYTES = 8 * 1024 * 1024
RECORD_MAX_BYTES = 4 * 1024 * 1024
PROBE_MAX_BYTES = 1024 * 1024
GLOB_MAX = 4096


def observe_file(path):
    try:
        info = os.lstat(path)
    except OSError as err:
        if err.errno in (errno.ENOENT, errno.ENOTDIR):
            return {'type': 'missing'}
        return {'type': 'unreadable', 'error': err.errno}
    out = {'mode': '%04o' % stat.S_IMODE(info.st_mode), 'uid': info.st_uid, 'gid': info.st_gid}
    if stat.S_ISLNK(info.st_mode):
        out.update(type='link', target=os.readlink(path))
    elif stat.S_ISDIR(info.st_mode):
        out['type'] = 'directory'
    elif not stat.S_ISREG(info.st_mode):
        out['type'] = 'special'
    elif info.st_size > HASH_MAX_BYTES:
        out.update(type='file', content='size=%d mtime=%d ctime=%d' % (info.st_size, info.st_mtime_ns, info.st_ctime_ns))
    else:
        out['type'] = 'file'
        sha = hashlib.sha256()
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            with os.fdopen(fd, 'rb') as handle:
                for chunk in iter(lambda: handle.read(1 << 16), b''):
                    sha.update(chunk)
        except (IOError, OSError) as err:
            return {'type': 'unreadable', 'error': err.errno}
        out['content'] = sha.hexdigest()
    return out


def _run(module, argv, timeout):
    """(rc, stdout bytes) of argv with a time limit (module_utils/timed_command.py: the command's process group
    is killed when it overruns); rc None when it could not run or timed out."""
    try:
        rc, out, _err, _state = timed_command.run_bounded(argv, timeout, max_bytes=PROBE_MAX_BYTES)
    except (OSError, ValueError):
        return None, b''
    return rc, out[:PROBE_MAX_BYTES]


def observe_packages(module, names, timeout):
    if not names:
        return {}
    found = dict((name, {'version': None, 'held': False}) for name in names)
    dpkg = module.get_bin_path('dpkg-query')
    if dpkg:
        _rc, out = _run(module, [dpkg, '-W', '-f', '${Package}\\t${Version}\\t${Status}\\n', '--'] + names, timeout)
        for line in to_native(out, errors='surrogate_or_replace').splitlines():
            fields = line.split('\t')
            if len(fields) != 3 or fields[0] not in found:
                continue
            status = fields[2].split()
            if status and status[-1] == 'installed':
                found[fields[0]] = {'version': fields[1], 'held': status[0] == 'hold'}
        return found
    rpm = module.get_bin_path('rpm')
    if rpm:
        _rc, out = _run(module, [rpm, '-q', '--qf', '%{NAME}\\t%{EPOCHNUM}:%{VERSION}-%{RELEASE}.%{ARCH}\\n'] + names,
                        timeout)
        for line in to_native(out, errors='surrogate_or_replace').splitlines():
            fields = line.split('\t')
            if len(fields) == 2 and fields[0] in found:
                versions = sorted(filter(None, [found[fields[0]]['version'], fields[1]]))
                # dnf holds are the versionlock list, a file the role names under files.
                found[fields[0]] = {'version': ' '.join(versions), 'held': False}
        return found
    return dict((name, {'version': 'no package database', 'held': False}) for name in names)


def observe_services(module, names, timeout):
    if not names:
        return {}
    systemctl = module.get_bin_path('systemctl')
    if not systemctl:
        return dict((name, {'enabled': 'no systemctl', 'active': 'no systemctl'}) for name in names)
    rc, out = _run(module, [systemctl, 'show', '--property=Id,ActiveState,UnitFileState', '--'] + names, timeout)
    blocks = [b for b in to_native(out, errors='surrogate_or_replace').split('\n\n') if b.strip()]
    if rc is None or len(blocks) != len(names):
        return dict((name, {'enabled': 'unknown', 'active': 'unknown'}) for name in names)
    found = {}
    for name, block in zip(names, blocks):
        props = dict(line.split('=', 1) for line in block.splitlines() if '=' in line)
        active = props.get('ActiveState', '')
        # A service restarting on its own passes through activating: only a settled state counts as active.
        active = 'active' if active in ('active', 'reloading') else ('failed' if active == 'failed' else 'inactive')
        found[name] = {'enabled': props.get('UnitFileState', '') or 'none', 'active': active}
    return found


def observe_globs(patterns):
    found = {}
    for pattern in patterns:
        matches = sorted(glob.glob(pattern))
        found[pattern] = matches[:GLOB_MAX] + (['... %d more' % (len(matches) - GLOB_MAX)] if len(matches) > GLOB_MAX else [])
    return found


def observe_probes(module, probes, timeout):
    found = {}
    for probe in probes:
        rc, out = _run(module, probe['argv'], timeout)
        found[probe['name']] = 'timeout or not runnable' if rc is None else '%d %s' % (rc, hashlib.sha256(out).hexdigest())
    return found


def observe_files(paths):
    """Each path's state; a pattern (with *, ? or [) stands for every path it matches, each observed."""
    found = {}
    for path in paths:
        if glob.has_magic(path):
            matches = sorted(glob.glob(path))[:GLOB_MAX]
            found[path] = {'type': 'pattern', 'matches': dict((m, observe_file(m)) for m in matches)}
        else:
            found[path] = observe_file(path)
    return found


def observe(module, manages, timeout):
    return {
        'files': observe_files(manages['files']),
        'packages': observe_packages(module, manages['packages'], timeout),
        'services': observe_services(module, manages['services'], timeout),
        'globs': observe_globs(manages['globs']),
        'probes': observe_probes(module, manages['probes'], timeout),
    }


def read_record(path):
    """The parsed record, None when there is none, or an Exception saying why it cannot be used."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as err:
        if err.errno == errno.ENOENT:
            return None
        return err
    with os.fdopen(fd, 'rb') as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return ValueError('%s is not a regular file' % path)
        data = handle.read(RECORD_MAX_BYTES + 1)
    if len(data) > RECORD_MAX_BYTES:
        return ValueError('%s is larger than %d bytes' % (path, RECORD_MAX_BYTES))
    try:
        return json.loads(data.decode('utf-8'))
    except ValueError as err:
        return ValueError('%s is not JSON (%s)' % (path, err))


def record_text(document):
    return json.dumps(document, sort_keys=True, indent=1) + '\n'


def main():
    module = AnsibleModule(
        argument_spec=dict(
            role=dict(type='str', required=True),
            instance=dict(type='str', default=''),
            state=dict(type='str', choices=['check', 'record'], default='check'),
            fingerprint=dict(type='dict'),
            inputs=dict(type='dict'),
            facts=dict(type='list', elements='str'),
            manages=dict(type='dict'),
            outputs=dict(type='dict'),
            compare=dict(type='bool', default=True),
            record_dir=dict(type='path', default='/var/lib/gpucluster/converged'),
            probe_timeout=dict(type='int', default=10),
        ),
        supports_check_mode=True,
    )
    role = module.params['role']
    if not role or not role.replace('_', '').isalnum() or not role.isascii():
        module.fail_json(msg='converged: role must be a role name (letters, digits, _), got %r' % role[:80])
    fingerprint = module.params['fingerprint']
    if not isinstance(fingerprint, dict) or not isinstance(fingerprint.get('digest'), str):
        module.fail_json(msg='converged: fingerprint is missing; it comes from the action plugin (state=check) '
                             'or from the check task\'s result (state=record)')
    try:
        manages = cs.normalize_manages(module.params['manages'])
    except ValueError as err:
        module.fail_json(msg='converged: %s (role %s)' % (err, role))
    timeout = module.params['probe_timeout']
    instance = module.params['instance']
    if instance and (not instance.replace('_', '').replace('-', '').isalnum() or not instance.isascii()):
        module.fail_json(msg='converged: instance must be letters, digits, - and _, got %r' % instance[:80])
    path = os.path.join(module.params['record_dir'], role + ('.' + instance if instance else '') + '.json')
    observed = observe(module, manages, timeout)

    if module.params['state'] == 'check':
        if module.params['compare']:
            record = read_record(path)
            converged, reasons = cs.decide(role, record, fingerprint, observed)
            if record is not None and not isinstance(record, dict):
                module.warn('converged: %s' % reasons[0])
        else:
            record, converged, reasons = None, False, ['gpucluster_fast_path is false: the full path runs']
        invalidated = False
        if not converged and module.params['compare'] and not module.check_mode and os.path.lexists(path):
            try:
                os.unlink(path)
                invalidated = True
            except OSError as err:
                module.fail_json(msg='converged: cannot remove the record %s that no longer holds: %s'
                                     % (path, to_native(err)), reasons=reasons)
        outputs = (record.get('outputs') or {}) if converged else {}
        module.exit_json(changed=False, converged=converged, reasons=reasons, fingerprint=fingerprint,
                         invalidated=invalidated, record_path=path, outputs=outputs, packages=observed['packages'])

    text = record_text(cs.record_document(role, fingerprint, observed, module.params['outputs']))
    current = read_record(path)
    changed = current is None or isinstance(current, Exception) or record_text(current) != text
    if changed and not module.check_mode:
        try:
            os.makedirs(module.params['record_dir'], mode=0o700, exist_ok=True)
            os.chmod(module.params['record_dir'], 0o700)
            atomic_file.write_atomic(path, text, mode=0o600)
        except (IOError, OSError) as err:
            module.fail_json(msg='converged: cannot write the record %s: %s' % (path, to_native(err)))
    module.exit_json(changed=changed, converged=True, reasons=[], record_path=path)


if __name__ == '__main__':
    main()
