# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
---
module: package_hold
short_description: Hold or release a set of installed packages in one module call (dpkg selections or dnf versionlock)
version_added: "0.3.0"
description:
  - Reads the holds of the named packages once, changes only the names whose hold differs from O(state), and says
    which names it changed. The roles call it once per set of packages instead of one
    C(ansible.builtin.dpkg_selections) call per package or a C(community.general.dnf_versionlock) call per state.
  - B(apt) (dpkg). One C(dpkg-query) reads the selection and state of every named package. O(state=held) sets the
    selection C(hold) on each installed instance of a name whose selection is not C(hold) (on a multiarch node,
    C(libfoo:amd64) and C(libfoo:i386) both); O(state=unheld) sets C(install) on each held instance that is
    installed, and C(deinstall) on a held one that is not (C(install) would ask dpkg to install it). The changed
    lines only go to one C(dpkg --set-selections), and a second C(dpkg-query) proves dpkg took them (dpkg only
    warns about a name it does not know).
  - B(dnf) (the versionlock plugin of dnf 4, RHEL and Rocky 8 and 9). One C(rpm -q) reads the installed versions
    and the lock list named by the plugin's configuration is read as a file (no C(dnf) run). A name is held when
    the list names exactly its installed versions, in the form C(dnf versionlock add) writes,
    C(name-EPOCH:VERSION-RELEASE.*). O(state=held) replaces the name's other entries (the lock of a previous pin)
    with those; O(state=unheld) removes every entry of the name. Exclude entries (C(!name-...)), comments and the
    entries of other names are kept as they are. The list is replaced atomically, keeping its owner, mode and
    SELinux context.
  - Holding a package that is not installed is an error that names it; every caller installs the packages first,
    so a missing one means the install did not do what the role expected, or the name is wrong. Releasing a
    package that is not installed and not held changes nothing.
  - In check mode nothing is written. A package to hold that is not installed yet is taken as one the simulated
    install before this task would install; it is reported as to be held (changed) and listed in
    RV(not_installed), and the real run fails if it is still missing then.
author:
  - gpucluster.core maintainers (@gpucluster)
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: full
  idempotent:
    description: When run twice in a row outside check mode, with the same arguments, the second invocation indicates no change.
    support: full
  platform:
    description: Target OS/families that can be operated against.
    support: full
    platforms: debian, rhel
options:
  name:
    description:
      - Package names (no version, no architecture qualifier). An empty list changes nothing.
      - On dnf the installed version of each name is what gets locked, so the task that installed the pinned version
        must run first.
    type: list
    elements: str
    required: true
  state:
    description:
      - V(held) holds every named package; V(unheld) releases them (before an upgrade or removal).
    type: str
    choices: [held, unheld]
    default: held
  manager:
    description:
      - Which package manager's holds to set. V(auto) takes apt where C(dpkg-query) exists, else dnf where C(rpm)
        exists.
    type: str
    choices: [auto, apt, dnf]
    default: auto
  skip_missing:
    description:
      - With O(state=held), hold only the named packages that are installed and list the others in RV(not_installed)
        instead of failing. For a list that names a family of packages of which a node has some (the kernel packages
        held with the driver); a role that installs what it holds leaves it false.
    type: bool
    default: false
  versionlock_conf:
    description:
      - The dnf versionlock plugin's configuration, which names the lock list (C(locklist)) and whether the plugin is
        enabled. Missing, disabled or without C(locklist), the task fails (outside check mode), since a lock the plugin does
        not apply would hold nothing.
    type: path
    default: /etc/dnf/plugins/versionlock.conf
seealso:
  - module: ansible.builtin.dpkg_selections
  - module: community.general.dnf_versionlock
notes:
  - The dnf side supports the dnf 4 versionlock plugin (C(python3-dnf-plugin-versionlock)); install it before the first
    hold, as the roles do.
'''

EXAMPLES = r'''
- name: Hold the driver packages at the installed pin
  gpucluster.core.package_hold:
    name: [nvidia-driver-550, libnvidia-compute-550]
    state: held

- name: Release the holds of the packages an upgrade replaces
  gpucluster.core.package_hold:
    name: "{{ __nvidia_driver_state.stale }}"
    state: unheld

- name: Hold whichever of the kernel packages are installed
  gpucluster.core.package_hold:
    name: [linux-image-amd64, linux-headers-amd64]
    skip_missing: true
'''

RETURN = r'''
changed_names:
  description: The names whose hold changed (or, in check mode, would change), in the order given.
  returned: always
  type: list
  elements: str
  sample: [libnvidia-compute-550]
not_installed:
  description:
    - The named packages that are not installed. With O(state=held) they are skipped with O(skip_missing) and in check
      mode (where they count as to be held); otherwise the task fails before this is returned.
  returned: always
  type: list
  elements: str
  sample: []
manager:
  description: The package manager whose holds were read, V(apt) or V(dnf).
  returned: always
  type: str
  sample: apt
locklist:
  description: The dnf versionlock list the module read (and wrote when something changed).
  returned: when the manager is dnf
  type: str
  sample: /etc/dnf/plugins/versionlock.list
'''

import errno
import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native

from ansible_collections.gpucluster.core.plugins.module_utils import package_hold as ph

C_LOCALE = dict(LANG='C', LC_ALL='C', LC_MESSAGES='C')
DEFAULT_LOCKLIST = '/etc/dnf/plugins/versionlock.list'
MAX_LIST_BYTES = 4 * 1024 * 1024


def _fail(module, msg, **extra):
    module.fail_json(msg='package_hold: %s' % msg, **extra)


def read_dpkg(module, names):
    query = module.get_bin_path('dpkg-query', required=True)
    rc, out, err = module.run_command([query, '-W', '-f', ph.DPKG_QUERY_FORMAT] + names,
                                      environ_update=C_LOCALE)
    # dpkg-query exits 1 when a name is unknown to it: that package is simply not installed.
    if rc not in (0, 1):
        _fail(module, 'dpkg-query failed (rc %d): %s' % (rc, to_native(err).strip()[:500]))
    return ph.parse_dpkg_query(out, names)


def run_apt(module, names, state, skip_missing):
    instances = read_dpkg(module, names)
    try:
        plan = ph.apt_plan(state, names, instances, check_mode=module.check_mode, skip_missing=skip_missing)
    except ph.HoldError as err:
        _fail(module, str(err))
    if plan['lines'] and not module.check_mode:
        dpkg = module.get_bin_path('dpkg', required=True)
        rc, _out, err = module.run_command([dpkg, '--set-selections'], data=ph.selections_text(plan['lines']),
                                           binary_data=True, environ_update=C_LOCALE)
        if rc != 0:
            _fail(module, 'dpkg --set-selections failed (rc %d): %s' % (rc, to_native(err).strip()[:500]))
        unapplied = ph.apt_unapplied(plan['lines'], read_dpkg(module, names))
        if unapplied:
            _fail(module, 'dpkg did not take the selections %s' % ', '.join('%s %s' % p for p in unapplied))
    result = dict(changed=bool(plan['changed']), changed_names=plan['changed'], not_installed=plan['not_installed'],
                  manager='apt')
    if module._diff and plan['lines']:
        result['diff'] = ph.apt_diff(plan)
    return result


def _read_text(module, path, what):
    """The text of ``path``, or None when it does not exist."""
    try:
        with open(path, 'rb') as handle:
            data = handle.read(MAX_LIST_BYTES + 1)
    except (IOError, OSError) as err:
        if err.errno == errno.ENOENT:
            return None
        _fail(module, 'cannot read %s %s: %s' % (what, path, to_native(err)))
    if len(data) > MAX_LIST_BYTES:
        _fail(module, '%s %s is larger than %d bytes' % (what, path, MAX_LIST_BYTES))
    return data.decode('utf-8', 'replace')


def _write_list(module, path, text):
    directory = os.path.dirname(path) or '/'
    fd, tmp = tempfile.mkstemp(dir=directory, prefix='.%s.' % os.path.basename(path))
    try:
        with os.fdopen(fd, 'w') as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        if not os.path.exists(path):
            os.chmod(tmp, 0o644)
        # atomic_move keeps an existing list's owner, mode and SELinux context.
        module.atomic_move(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def locklist_path(module):
    conf_path = module.params['versionlock_conf']
    conf = _read_text(module, conf_path, 'the versionlock configuration')
    if conf is None:
        if module.check_mode:
            # Check mode on a node where the task that installs the plugin was only simulated.
            return DEFAULT_LOCKLIST
        _fail(module, '%s does not exist: the dnf versionlock plugin is not installed (python3-dnf-plugin-versionlock); '
                      'install it before the first hold' % conf_path)
    enabled, locklist = ph.parse_versionlock_conf(conf)
    if not enabled:
        _fail(module, 'the dnf versionlock plugin is disabled in %s (enabled=0): a lock would hold nothing; enable it'
              % conf_path)
    if not locklist:
        _fail(module, '%s names no locklist under [main]; accepted: locklist=/etc/dnf/plugins/versionlock.list' % conf_path)
    if not os.path.isabs(locklist):
        _fail(module, '%s names locklist=%s; accepted: an absolute path' % (conf_path, locklist))
    return locklist


def run_dnf(module, names, state, skip_missing):
    rpm = module.get_bin_path('rpm', required=True)
    rc, out, err = module.run_command([rpm, '-q', '--qf', ph.RPM_QUERY_FORMAT] + names,
                                      environ_update=C_LOCALE)
    # rpm -q exits with the number of names that are not installed, saying so on stdout; anything on stderr
    # is a failure to read the package database.
    if rc != 0 and to_native(err).strip():
        _fail(module, 'rpm -q failed (rc %d): %s' % (rc, to_native(err).strip()[:500]))
    installed = ph.parse_rpm_query(out, names)
    path = locklist_path(module)
    old = _read_text(module, path, 'the versionlock list')
    try:
        plan = ph.dnf_plan(state, names, installed, old or '', check_mode=module.check_mode, skip_missing=skip_missing)
    except ph.HoldError as err:
        _fail(module, str(err))
    differs = plan['text'] != (old or '')
    if differs and not module.check_mode:
        try:
            _write_list(module, path, plan['text'])
        except (IOError, OSError) as err:
            _fail(module, 'cannot write %s: %s' % (path, to_native(err)))
    result = dict(changed=bool(plan['changed']), changed_names=plan['changed'], not_installed=plan['not_installed'],
                  manager='dnf', locklist=path)
    if module._diff and differs:
        result['diff'] = {'before': old or '', 'after': plan['text'], 'before_header': path, 'after_header': path}
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type='list', elements='str', required=True),
            state=dict(type='str', choices=list(ph.STATES), default='held'),
            manager=dict(type='str', choices=['auto'] + list(ph.MANAGERS), default='auto'),
            skip_missing=dict(type='bool', default=False),
            versionlock_conf=dict(type='path', default='/etc/dnf/plugins/versionlock.conf'),
        ),
        supports_check_mode=True,
    )
    try:
        names = ph.check_names(module.params['name'])
    except ph.HoldError as err:
        _fail(module, str(err))
    manager = module.params['manager']
    if manager == 'auto':
        if module.get_bin_path('dpkg-query'):
            manager = 'apt'
        elif module.get_bin_path('rpm'):
            manager = 'dnf'
        else:
            _fail(module, 'neither dpkg-query nor rpm is on this node: no package manager to hold packages with')
    if not names:
        module.exit_json(changed=False, changed_names=[], not_installed=[], manager=manager)
    if manager == 'apt':
        result = run_apt(module, names, module.params['state'], module.params['skip_missing'])
    else:
        result = run_dnf(module, names, module.params['state'], module.params['skip_missing'])
    module.exit_json(**result)


if __name__ == '__main__':
    main()
