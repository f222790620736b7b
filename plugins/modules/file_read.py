# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
---
module: file_read
short_description: Read a set of text files of a node in one module call
version_added: "0.1.0"
description:
  - Returns the content of each listed file, or that it does not exist, in one round trip. The roles use it
    where they read the current version of several related files (the Slurm configuration files) before they
    decide what to write, instead of a C(stat) and a C(slurp) task per file.
  - Nothing on the node changes; the module runs in check mode as it does otherwise.
  - Content is decoded as UTF-8; a byte that is not UTF-8 becomes U+FFFD. The files are configuration text;
    C(ansible.builtin.slurp) is the module for binary content.
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
options:
  paths:
    description:
      - Absolute paths of the files to read. A symbolic link is followed. A path that does not exist is reported
        as missing; one that is a directory, a FIFO, a device or anything but a regular file (never waited on), holds
        a NUL byte, or cannot be read, fails the task and names the path.
    type: list
    elements: path
    required: true
  max_bytes:
    description:
      - Largest file read, in bytes, from 1 to 1073741824 (1 GiB). A larger file fails the task instead of being
        sent to the controller; no more than O(max_bytes) bytes of a file are ever read.
    type: int
    default: 4194304
seealso:
  - module: ansible.builtin.slurp
  - module: gpucluster.core.file_set
'''

EXAMPLES = r'''
- name: Read the current Slurm configuration files
  gpucluster.core.file_read:
    paths:
      - /etc/slurm/slurm.conf
      - /etc/slurm/gres.conf
  register: __slurm_conf_old

- name: Use slurm.conf when it exists
  ansible.builtin.debug:
    msg: "{{ __slurm_conf_old.contents['/etc/slurm/slurm.conf'] | default('', true) | length }} characters"
'''

RETURN = r'''
contents:
  description: Each path as given, with the file's content as text, or null where the file does not exist.
  returned: always
  type: dict
  sample: {/etc/slurm/slurm.conf: "ClusterName=gpu\n", /etc/slurm/gres.conf: null}
missing:
  description: The paths that do not exist, in the order given.
  returned: always
  type: list
  elements: str
  sample: [/etc/slurm/gres.conf]
'''

import errno
import os
import stat

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native
from ansible_collections.gpucluster.core.plugins.module_utils.bounded_read import kind_of
from ansible_collections.gpucluster.core.plugins.module_utils.text_bounds import clip, quote

# The largest max_bytes: a file read is sent to the controller whole.
MAX_BYTES_LIMIT = 1 << 30
# Linux's PATH_MAX: a longer path is no file's name.
PATH_LIMIT = 4096


def _kind(path):
    try:
        return kind_of(os.stat(path).st_mode)
    except (OSError, ValueError):
        return None


def read_files(paths, max_bytes):
    """(contents, missing, error): contents maps each path to its text or None; error names the first failure."""
    contents = {}
    missing = []
    for path in paths:
        if '\x00' in path:
            return None, None, 'file_read: paths[] holds a path with a NUL byte, which no file has: %s' % quote(path)
        if not os.path.isabs(path):
            return None, None, 'file_read: paths[] must be absolute, got %s' % quote(path)
        try:
            # Non-blocking open: a FIFO or device in the list is refused, never waited on.
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, 'O_NOCTTY', 0))
        except (IOError, OSError) as err:
            if err.errno == errno.ENOENT:
                contents[path] = None
                missing.append(path)
                continue
            kind = _kind(path)
            if kind not in (None, 'a regular file', 'a directory'):
                # A socket cannot be opened at all (ENXIO): name what it is.
                return None, None, 'file_read: %s is not a regular file (it is %s)' % (path, kind)
            # A name too long for the system is cut where it is quoted.
            return None, None, 'file_read: cannot read %s: %s' % (clip(path, PATH_LIMIT), to_native(err))
        info = os.fstat(fd)
        problem = None
        if stat.S_ISDIR(info.st_mode):
            problem = 'file_read: %s is a directory, not a file' % path
        elif not stat.S_ISREG(info.st_mode):
            problem = 'file_read: %s is not a regular file (it is %s)' % (path, kind_of(info.st_mode))
        elif info.st_size > max_bytes:
            problem = 'file_read: %s is larger than max_bytes=%d' % (path, max_bytes)
        if problem:
            os.close(fd)
            return None, None, problem
        with os.fdopen(fd, 'rb') as handle:
            try:
                data = handle.read(max_bytes + 1)
            except (IOError, OSError) as err:
                return None, None, 'file_read: cannot read %s: %s' % (path, to_native(err))
        if len(data) > max_bytes:
            return None, None, 'file_read: %s is larger than max_bytes=%d' % (path, max_bytes)
        contents[path] = data.decode('utf-8', 'replace')
    return contents, missing, None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            paths=dict(type='list', elements='path', required=True),
            max_bytes=dict(type='int', default=4194304),
        ),
        supports_check_mode=True,
    )
    max_bytes = module.params['max_bytes']
    if not 1 <= max_bytes <= MAX_BYTES_LIMIT:
        module.fail_json(msg='file_read: max_bytes must be a whole number of bytes from 1 to %d, got %s'
                         % (MAX_BYTES_LIMIT, quote(max_bytes)))
    contents, missing, error = read_files(module.params['paths'], module.params['max_bytes'])
    if error:
        module.fail_json(msg=error)
    module.exit_json(changed=False, contents=contents, missing=missing)


if __name__ == '__main__':
    main()
