# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
---
module: apt_index
short_description: Refresh apt's package index only when it is older than its validity
version_added: "0.3.0"
description:
  - Decides from a few file times whether apt's package index needs a refresh and runs C(apt-get update) only then.
    A fresh index costs a C(stat) of a handful of paths, and no package cache is opened, unlike
    C(ansible.builtin.apt) with O(ignore:update_cache), which loads the whole cache before it even looks at the
    index's age.
  - The index is fresh when the lists under C(/var/lib/apt/lists) hold at least one package index,
    C(/var/lib/apt/periodic/update-success-stamp) exists, is not dated in the future and is at most O(valid_for)
    seconds old, and no package source (C(/etc/apt/sources.list), a file of C(/etc/apt/sources.list.d) or that
    directory) changed after it (the later of its modification and change times counts). Anything else refreshes.
    Unlike the apt module, it never judges by the time of C(/var/lib/apt/lists) itself, which an image with
    emptied lists may carry from any date.
  - After a refresh that worked, the module touches the stamp (as Ubuntu's update-notifier hook does; Ansible's apt
    module reads the same stamp for O(ignore:cache_valid_time)). A refresh fails the task when C(apt-get update)
    exits non-zero or says a source could not be fetched or verified (an C(E) line, C(W) lines such as
    C(Failed to fetch) or C(GPG error)), and the stamp is then left as it was, so the next run tries again. While another apt or
    dpkg process holds the lock, it waits up to O(lock_timeout) seconds.
  - The index is a cache, not configuration; a refresh is reported as RV(refreshed), never as a change, so an
    idempotent rerun stays C(changed=0) whatever the index's age.
  - In check mode nothing is refreshed or touched; RV(stale) says whether the real run would refresh.
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
  platform:
    description: Target OS/families that can be operated against.
    support: full
    platforms: debian
options:
  valid_for:
    description:
      - Seconds the index stays valid after a refresh that worked. V(0) refreshes on every run.
    type: int
    default: 3600
  force:
    description:
      - Refresh whatever the index's age. Set it from the result of the task that added or changed a package source
        in this run (a source whose file time is later than the stamp is refreshed anyway; this covers a source
        rewritten within the same second as the last refresh).
    type: bool
    default: false
  lock_timeout:
    description:
      - Seconds to wait, while another apt or dpkg process (apt-daily, unattended-upgrades) holds the lock, before
        failing.
    type: int
    default: 120
seealso:
  - module: ansible.builtin.apt
notes:
  - Run it before the C(ansible.builtin.apt) tasks that install from the index, which then leave
    O(ignore:update_cache) unset.
'''

EXAMPLES = r'''
- name: Refresh the package index when it is older than an hour
  gpucluster.core.apt_index:
    valid_for: 3600
  when: ansible_facts['os_family'] == 'Debian'

- name: Fetch a source added in this run now, whatever the age of the others
  gpucluster.core.apt_index:
    force: "{{ __slurm_repo is changed }}"
'''

RETURN = r'''
stale:
  description: Whether the index needed a refresh.
  returned: always
  type: bool
refreshed:
  description: Whether C(apt-get update) ran and worked (never in check mode).
  returned: always
  type: bool
reason:
  description: Why the index was (or would be) refreshed, or its age when it was fresh.
  returned: always
  type: str
  sample: the index is 1210 s old (valid for 3600 s)
age:
  description: Seconds since the last refresh on record before this task, or null when there is none.
  returned: always
  type: int
  sample: 1210
'''

import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native

from ansible_collections.gpucluster.core.plugins.module_utils import apt_index as ai

ENVIRON = dict(LANG='C', LC_ALL='C', LC_MESSAGES='C', DEBIAN_FRONTEND='noninteractive')
LOCK_RETRY_SECONDS = 5
MAX_LINES_SHOWN = 10


def _mtime(path):
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def _changed_at(path):
    """The later of ``path``'s modification and change times, or None when it does not exist."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return max(info.st_mtime, info.st_ctime)


def source_times():
    """(path, time) of the package source files and the sources.list.d directory."""
    found = []
    paths = [ai.SOURCES[0], ai.SOURCES[1]]
    try:
        paths += [os.path.join(ai.SOURCES[1], name) for name in os.listdir(ai.SOURCES[1])]
    except OSError:
        pass
    for path in paths:
        when = _changed_at(path)
        if when is not None:
            found.append((path, when))
    return found


def list_names():
    try:
        return os.listdir(ai.LISTS_DIR)
    except OSError:
        return []


def touch_stamp(when):
    """Date the stamp ``when``: the time the refresh started, so a source changed while it ran counts as newer."""
    directory = os.path.dirname(ai.STAMP)
    if not os.path.isdir(directory):
        os.makedirs(directory, 0o755)
    with open(ai.STAMP, 'a'):
        pass
    os.utime(ai.STAMP, (when, when))


def refresh(module, lock_timeout):
    """Run apt-get update until it works, fails, or the lock stays busy past ``lock_timeout``; returns
    (problems, output)."""
    apt_get = module.get_bin_path('apt-get', required=True)
    deadline = time.monotonic() + lock_timeout
    while True:
        rc, out, err = module.run_command([apt_get, 'update', '-q'], environ_update=ENVIRON)
        output = to_native(out) + '\n' + to_native(err)
        problems = ai.refresh_problems(rc, output)
        if not problems or not ai.lock_busy(problems) or time.monotonic() + LOCK_RETRY_SECONDS > deadline:
            return problems, output
        time.sleep(LOCK_RETRY_SECONDS)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            valid_for=dict(type='int', default=3600),
            force=dict(type='bool', default=False),
            lock_timeout=dict(type='int', default=120),
        ),
        supports_check_mode=True,
    )
    valid_for = module.params['valid_for']
    if valid_for < 0:
        module.fail_json(msg='apt_index: valid_for must be 0 or more seconds, got %d' % valid_for)
    if module.params['lock_timeout'] < 0:
        module.fail_json(msg='apt_index: lock_timeout must be 0 or more seconds, got %d' % module.params['lock_timeout'])
    now = time.time()
    stamp = _mtime(ai.STAMP)
    stale, reason = ai.staleness(now, valid_for, stamp, ai.has_package_index(list_names()), source_times(),
                                 force=module.params['force'])
    age = None if stamp is None else int(now - stamp)
    result = dict(changed=False, stale=stale, refreshed=False, reason=reason, age=age)
    if not stale or module.check_mode:
        module.exit_json(**result)
    problems, output = refresh(module, module.params['lock_timeout'])
    if problems:
        module.fail_json(msg='apt_index: apt-get update did not refresh the index (%s): %s' % (
            reason, ' | '.join(problems[:MAX_LINES_SHOWN])), stale=stale, refreshed=False, reason=reason, age=age,
            output=output[-4000:])
    for line in ai.refresh_warnings(output)[:MAX_LINES_SHOWN]:
        module.warn('apt-get update: %s' % line)
    try:
        touch_stamp(now)
    except (IOError, OSError) as err:
        module.fail_json(msg='apt_index: the index was refreshed but %s cannot be touched: %s' % (ai.STAMP, to_native(err)))
    result['refreshed'] = True
    module.exit_json(**result)


if __name__ == '__main__':
    main()
