# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
---
module: file_set
short_description: Write a set of related files and their directories in one module call
version_added: "0.1.0"
description:
  - Makes a set of directories and text files on a node what the task says, in one round trip. Each
    directory exists with its owner, group and mode, and each file has exactly the given content, owner,
    group and mode.
  - The roles render the content on the controller (the C(ansible.builtin.template) or
    C(ansible.builtin.file) lookup) and hand the whole set to this module, instead of one
    C(template) or C(copy) task per file, which costs two round trips per file on a rerun (a stat,
    then the module that checks the attributes).
  - The set is written all or nothing as far as validation goes. Every file whose content changes is
    first written to a temporary file beside it, given its owner, group and mode, and checked with its
    O(files[].validate) command. Only when every check has passed are the files moved into place (an
    atomic rename each, so a reader sees the old file or the new one, never half of one). A failed
    check leaves every file of the set as it was and names the file and the checker's output.
  - A file whose content is unchanged is never rewritten; only its attributes are corrected.
  - Returns O(ignore:changed_paths), the directories and files that were (or, in check mode, would be)
    created or changed, so a role can notify a handler for one file of the set only.
  - In check mode nothing is written and no validator runs; the result says what would change, with
    the content diff under C(--diff).
  - A file's content is sent in the module's arguments, so a task that writes secrets sets C(no_log=true)
    and C(diff=false).
author:
  - gpucluster.core maintainers (@gpucluster)
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: full
    details: Content differences of text files, and owner, group or mode changes.
  idempotent:
    description: When run twice in a row outside check mode, with the same arguments, the second invocation indicates no change.
    support: full
options:
  directories:
    description:
      - Directories to create (with any missing parents) or correct, in this order, before the files are written.
      - A file's directory must exist or be listed here. In check mode a missing directory is not an error, since
        an earlier task of the real run (a package install) may create it; the file is reported as new.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Absolute path of the directory.
        type: path
        required: true
      owner:
        description: Owner (name or uid). Unset leaves it as it is.
        type: str
      group:
        description: Group (name or gid). Unset leaves it as it is.
        type: str
      mode:
        description: Mode, octal as a string (C("0750")) or symbolic. Unset leaves it as it is (new directories get the umask's default).
        type: raw
  files:
    description: Files to write.
    type: list
    elements: dict
    default: []
    suboptions:
      dest:
        description: Absolute path of the file. Listed once only.
        type: path
        required: true
      content:
        description: The whole content of the file, text (written as UTF-8).
        type: str
        required: true
      owner:
        description: Owner (name or uid). Unset leaves an existing file's owner and makes a new file the connecting user's.
        type: str
      group:
        description: Group (name or gid). Unset as for O(files[].owner).
        type: str
      mode:
        description:
          - Mode, octal as a string (C("0644")) or symbolic. Unset keeps an existing file's mode and gives a new
            file C(0600).
        type: raw
      validate:
        description:
          - Command that checks the new content before it replaces the file; C(%s) stands for the temporary
            file's path. It runs without a shell, like the C(validate) of C(ansible.builtin.template). A non-zero
            exit fails the task and leaves every file of the set unchanged.
        type: str
  absent:
    description:
      - Files or directories (removed with their content) that must not exist, for example what an earlier
        release installed; removed after the files are in place. Relative paths, C(/) and top-level
        directories (a path that resolves to fewer than two levels below C(/), such as C(/etc)) are refused.
    type: list
    elements: path
    default: []
notes:
  - Symbolic links are not followed; a O(files[].dest) that is a directory fails the task before anything changes.
seealso:
  - module: ansible.builtin.template
  - module: ansible.builtin.copy
'''

EXAMPLES = r'''
- name: Write the kernel parameters and the systemd defaults as one set
  gpucluster.core.file_set:
    directories:
      - {path: /etc/systemd/system.conf.d, owner: root, group: root, mode: "0755"}
    files:
      - dest: /etc/sysctl.d/90-gpucluster.conf
        content: "{{ lookup('ansible.builtin.template', 'etc/sysctl.d/90-gpucluster.conf.j2') }}"
        owner: root
        group: root
        mode: "0644"
      - dest: /etc/systemd/system.conf.d/90-gpucluster.conf
        content: "{{ lookup('ansible.builtin.template', 'etc/systemd/system.conf.d/90-gpucluster.conf.j2') }}"
        owner: root
        group: root
        mode: "0644"
  register: __os_tuning_files
  notify: os_tuning systemd manager configuration changed

- name: A checked configuration file
  gpucluster.core.file_set:
    files:
      - dest: /etc/nftables.d/gpucluster.nft
        content: "{{ lookup('ansible.builtin.template', 'gpucluster.nft.j2') }}"
        mode: "0640"
        validate: nft -c -f %s
'''

RETURN = r'''
changed_paths:
  description:
    - Directories and files created or changed (content or attributes), then the paths removed, in the order of the
      arguments; in check mode, those that would be.
  returned: always
  type: list
  elements: str
  sample: [/etc/systemd/system.conf.d/90-gpucluster.conf]
'''

import os
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes, to_native, to_text
from ansible_collections.gpucluster.core.plugins.module_utils.atomic_file import fsync_directory


def _file_args(module, spec, path):
    return module.load_file_common_arguments(
        {'path': path, 'owner': spec.get('owner'), 'group': spec.get('group'), 'mode': spec.get('mode')})


def _looks_binary(data):
    return b'\x00' in data


class FileSet(object):
    def __init__(self, module):
        self.module = module
        self.check = module.check_mode
        self.changed_paths = []
        self.diffs = []
        self.temps = []

    def fail(self, msg, **kwargs):
        self._remove_temps()
        self.module.fail_json(msg=msg, changed_paths=self.changed_paths, **kwargs)

    def _remove_temps(self):
        for tmp in self.temps:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        self.temps = []

    def _mark(self, path):
        if path not in self.changed_paths:
            self.changed_paths.append(path)

    # Everything that can be known before a change is checked first: bad input changes nothing.
    def preflight(self, directories, files):
        declared = set()
        for spec in directories:
            path = spec['path']
            if not os.path.isabs(path):
                self.fail('file_set: directories[].path must be absolute, got %r' % path)
            if os.path.lexists(path) and not os.path.isdir(path):
                self.fail('file_set: %s is listed as a directory but exists as something else' % path)
            declared.add(os.path.normpath(path))
        seen = set()
        for spec in files:
            dest = spec['dest']
            if not os.path.isabs(dest):
                self.fail('file_set: files[].dest must be absolute, got %r' % dest)
            norm = os.path.normpath(dest)
            if norm in seen:
                self.fail('file_set: %s is listed twice in files' % dest)
            seen.add(norm)
            if os.path.isdir(dest):
                self.fail('file_set: %s is a directory; files[].dest must name a file' % dest)
            if os.path.islink(dest):
                self.fail('file_set: %s is a symbolic link; file_set does not follow links' % dest)
            parent = os.path.dirname(norm)
            # In check mode a missing directory may be made by an earlier task of the real run (a package
            # install): the file is reported as new, as ansible.builtin.template reports it.
            if parent not in declared and not os.path.isdir(parent) and not self.check:
                self.fail('file_set: the directory of %s does not exist and is not listed in directories' % dest)
            validate = spec.get('validate')
            if validate is not None and '%s' not in validate:
                self.fail('file_set: the validate command of %s must contain %%s (the file to check), got %r'
                          % (dest, validate))

    def directory(self, spec):
        path = spec['path']
        if not os.path.isdir(path):
            self._mark(path)
            self.diffs.append({'before_header': path, 'after_header': path,
                               'before': {'path': path, 'state': 'absent'},
                               'after': {'path': path, 'state': 'directory'}})
            if self.check:
                return
            try:
                os.makedirs(path)
            except OSError as exc:
                self.fail('file_set: cannot create %s: %s' % (path, to_native(exc)))
        diff = {'before_header': path, 'after_header': path, 'before': {'path': path}, 'after': {'path': path}}
        if self.module.set_fs_attributes_if_different(_file_args(self.module, spec, path), False, diff=diff):
            self._mark(path)
            if diff['before'] != diff['after']:
                self.diffs.append(diff)

    def prepare(self, spec):
        """For a file whose content must change: writes and checks the new content in a temporary file beside
        it and returns that file's path. None when the content is unchanged, and in check mode."""
        dest = spec['dest']
        new = to_bytes(spec['content'], errors='surrogate_or_strict')
        old = None
        if os.path.exists(dest):
            try:
                with open(dest, 'rb') as handle:
                    old = handle.read()
            except (IOError, OSError) as exc:
                self.fail('file_set: cannot read %s: %s' % (dest, to_native(exc)))
        if old == new:
            return None
        self._mark(dest)
        if self.module._diff:
            if (old is not None and _looks_binary(old)) or _looks_binary(new):
                self.diffs.append({'before_header': dest, 'after_header': dest,
                                   'before': '(binary)', 'after': '(binary, changed)'})
            else:
                self.diffs.append({'before_header': dest, 'after_header': dest,
                                   'before': to_text(old or b'', errors='surrogate_or_replace'),
                                   'after': to_text(new, errors='surrogate_or_replace')})
        if self.check:
            return None
        directory = os.path.dirname(dest)
        try:
            fd, tmp = tempfile.mkstemp(dir=directory, prefix='.%s.' % os.path.basename(dest))
        except OSError as exc:
            self.fail('file_set: cannot write in %s: %s' % (directory, to_native(exc)))
        self.temps.append(tmp)
        try:
            with os.fdopen(fd, 'wb') as handle:
                handle.write(new)
                handle.flush()
                os.fsync(handle.fileno())
        except (IOError, OSError) as exc:
            self.fail('file_set: cannot write the new content of %s: %s' % (dest, to_native(exc)))
        # The temporary file is 0600 from mkstemp; the existing file's attributes are its defaults, so
        # the file never exists with a wider mode or another owner than the task asks for.
        wanted = dict(spec)
        if os.path.exists(dest):
            st = os.stat(dest)
            for key, value in (('owner', str(st.st_uid)), ('group', str(st.st_gid)), ('mode', '0%o' % (st.st_mode & 0o7777))):
                if wanted.get(key) is None:
                    wanted[key] = value
        self.module.set_fs_attributes_if_different(_file_args(self.module, wanted, tmp), False)
        validate = spec.get('validate')
        if validate:
            rc, out, err = self.module.run_command(validate % tmp)
            if rc != 0:
                self.fail('file_set: %s was not written: its validate command %r failed (rc=%d): %s'
                          % (dest, validate, rc, (err or out).strip()),
                          validate_stdout=out, validate_stderr=err, failed_path=dest)
        return tmp

    def attributes(self, spec):
        dest = spec['dest']
        if not os.path.exists(dest):
            return
        diff = {'before_header': dest, 'after_header': dest, 'before': {'path': dest}, 'after': {'path': dest}}
        if self.module.set_fs_attributes_if_different(_file_args(self.module, spec, dest), False, diff=diff):
            self._mark(dest)
            if self.module._diff and diff['before'] != diff['after']:
                self.diffs.append(diff)

    def remove(self, path):
        if not _removable(path):  # checked before anything changed; checked again right before removing
            self.fail('file_set: refusing to remove %r' % path)
        if not os.path.lexists(path):
            return
        self._mark(path)
        self.diffs.append({'before_header': path, 'after_header': path,
                           'before': {'path': path, 'state': 'directory' if os.path.isdir(path) else 'file'},
                           'after': {'path': path, 'state': 'absent'}})
        if self.check:
            return
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        except OSError as exc:
            self.fail('file_set: cannot remove %s: %s' % (path, to_native(exc)))

    def run(self, directories, files, absent=()):
        self.preflight(directories, files)
        for path in absent:
            if not _removable(path):
                self.fail('file_set: absent[] takes absolute paths at least two levels below / (such as '
                          '/usr/local/lib/old), got %r' % path)
        for spec in directories:
            self.directory(spec)
        pending = []
        for spec in files:
            tmp = self.prepare(spec)
            if tmp is not None:
                pending.append((spec['dest'], tmp))
            else:
                self.attributes(spec)
        for dest, tmp in pending:
            try:
                os.rename(tmp, dest)
            except OSError as exc:
                self.fail('file_set: cannot move the new %s into place: %s' % (dest, to_native(exc)))
            self.temps.remove(tmp)
        # SELinux: a file moved into place takes the default context of its path.
        for dest, dummy in pending:
            if self.module.selinux_enabled():
                self.module.set_default_selinux_context(dest, False)
        if pending:
            for directory in sorted(set(os.path.dirname(dest) for dest, dummy in pending)):
                fsync_directory(directory)
        for path in absent:
            self.remove(path)
        result = {'changed': bool(self.changed_paths), 'changed_paths': self.changed_paths}
        if self.module._diff and self.diffs:
            result['diff'] = self.diffs
        return result


def _removable(path):
    """An absent[] path must be absolute and, with every link resolved, at least two levels below /:
    never /, // or a top-level directory such as /etc or /usr."""
    if not path or not os.path.isabs(path):
        return False
    parts = [part for part in os.path.realpath(path).split(os.sep) if part]
    return len(parts) >= 2


def main():
    module = AnsibleModule(
        argument_spec=dict(
            directories=dict(type='list', elements='dict', default=[], options=dict(
                path=dict(type='path', required=True),
                owner=dict(type='str'),
                group=dict(type='str'),
                mode=dict(type='raw'),
            )),
            files=dict(type='list', elements='dict', default=[], options=dict(
                dest=dict(type='path', required=True),
                content=dict(type='str', required=True, no_log=False),
                owner=dict(type='str'),
                group=dict(type='str'),
                mode=dict(type='raw'),
                validate=dict(type='str'),
            )),
            absent=dict(type='list', elements='path', default=[]),
        ),
        supports_check_mode=True,
    )
    params = module.params
    module.exit_json(**FileSet(module).run(params['directories'], params['files'], params['absent']))


if __name__ == '__main__':
    main()
