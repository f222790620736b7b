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
        description:
          - Mode, octal as a string (C("0750")) or symbolic. Unset leaves it as it is (new directories get the umask's default).
          - A number is refused (see O(files[].mode)).
        type: raw
  files:
    description: Files to write.
    type: list
    elements: dict
    default: []
    suboptions:
      dest:
        description:
          - Absolute path of the file. Listed once only.
          - Where something exists there, it must be a regular file. A FIFO, a device (such as C(/dev/zero)), a socket,
            a directory or a symbolic link fails the task naming the path, in check mode too, before anything changes;
            it is never opened, so it cannot block the task or feed it without end.
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
          - A number is refused, naming the path. YAML reads an unquoted C(644) as the decimal number 644, which
            C(ansible.builtin.file) applies as it is (mode C(01204); its documentation warns that such a number gives
            unexpected results), and an unquoted C(0644) as 420. file_set does not guess which was meant, so quote the mode.
        type: raw
      validate:
        description:
          - Command that checks the new content before it replaces the file; C(%s) stands for the temporary
            file's path. It runs without a shell, like the C(validate) of C(ansible.builtin.template). A non-zero
            exit fails the task and leaves every file of the set unchanged.
          - C(%s) must appear exactly once; C(%%) is a literal C(%); any other C(%) directive (C(%a), C(%d)) is refused
            before anything changes.
          - The command is split into its arguments (as a shell would split it) before the path is put in, so an
            apostrophe, a space or any other character in O(files[].dest) reaches the command unchanged.
        type: str
  absent:
    description:
      - Files or directories (removed with their content) that must not exist, for example what an earlier
        release installed; removed after the files are in place. Relative paths, C(/) and top-level
        directories (a path that resolves to fewer than two levels below C(/), such as C(/etc)) are refused.
      - A path that this call writes (a O(files[].dest) or O(directories[].path)), or a directory holding one, is
        refused before anything changes (a path is either written or removed, never both).
    type: list
    elements: path
    default: []
notes:
  - Symbolic links are not followed; a O(files[].dest) that is a directory fails the task before anything changes.
  - Outside check mode, an O(files[].owner) or O(files[].group) name the node does not know fails the task before
    anything changes. Whatever ends a run, no temporary file is left beside a destination.
  - Messages cut what they quote (a path at 4096 characters, a value at 200).
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

import grp
import os
import pwd
import shlex
import shutil
import stat
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes, to_native, to_text
from ansible_collections.gpucluster.core.plugins.module_utils.atomic_file import fsync_directory
from ansible_collections.gpucluster.core.plugins.module_utils.bounded_read import kind_of
from ansible_collections.gpucluster.core.plugins.module_utils.text_bounds import clip, quote

# An existing file larger than this is compared by size and content but not shown in a diff.
DIFF_MAX_BYTES = 1 << 20
# Linux's PATH_MAX: a longer path is no file's name, and messages cut what they quote there.
PATH_LIMIT = 4096


def _file_args(module, spec, path):
    return module.load_file_common_arguments(
        {'path': path, 'owner': spec.get('owner'), 'group': spec.get('group'), 'mode': spec.get('mode')})


def _looks_binary(data):
    return b'\x00' in data


def _name(path):
    return clip(path, PATH_LIMIT)


def mode_problem(mode):
    """Why ``mode`` is refused, or None. Only text is a mode: YAML reads an unquoted ``644`` as the decimal
    number 644, which ansible.builtin.file applies as it is (mode 01204, its documentation warns of such
    "unexpected results"), and an unquoted ``0644`` as 420; file_set refuses every number instead of guessing
    which one was meant."""
    if mode is None or isinstance(mode, str):
        return None
    if isinstance(mode, bool) or not isinstance(mode, (int, float)):
        return 'is %s, not a mode' % quote(mode, 60)
    if isinstance(mode, int) and 0 <= mode <= 0o7777:
        return ('is the number %d, not text: YAML reads an unquoted 644 as the decimal number 644 (which '
                'ansible.builtin.file would apply as mode %04o) and an unquoted 0644 as 420; write the mode '
                'quoted, such as "0644"' % (mode, mode))
    return 'is the number %s, not text: write the mode quoted, such as "0644"' % quote(mode, 60)


def validate_argv(validate, path):
    """The argv of a validate command with ``%s`` replaced by ``path``: the command is split like a shell
    line once, before the path is put in, so no character of the path (an apostrophe, a space, ``$``)
    is ever read by a shell or by the splitting. ``%%`` is a literal ``%``."""
    argv = []
    for word in shlex.split(validate):
        argv.append('%'.join(part.replace('%s', path) for part in word.split('%%')))
    return argv


def validate_problem(validate):
    """Why a validate command is refused, or None: it must split like a shell line and hold ``%s`` (the
    file to check) exactly once; ``%%`` is a literal ``%``, any other ``%`` directive is refused."""
    count = 0
    index = 0
    while True:
        index = validate.find('%', index)
        if index < 0:
            break
        directive = validate[index + 1:index + 2]
        if directive == 's':
            count += 1
        elif directive != '%':
            return ('holds %s: the only directive is %%s (the file to check); write %%%% for a literal %%'
                    % quote('%' + directive))
        index += 2
    if count != 1:
        return 'must contain %%s (the file to check) exactly once, found it %d times' % count
    try:
        words = shlex.split(validate)
    except ValueError as exc:
        return 'cannot be split into a command and its arguments (%s)' % exc
    if not words or '%s' in words[0].replace('%%', ''):
        return 'must start with the checking command, not with %s'
    return None


def _kind(path):
    """What exists at ``path`` ('a FIFO', 'a regular file', ...), without following a link; None if nothing."""
    try:
        return kind_of(os.lstat(path).st_mode)
    except OSError:
        return None


def _inside(path, parent):
    """True when ``path`` is ``parent`` or below it."""
    return path == parent or path.startswith(parent.rstrip(os.sep) + os.sep)


def _owner_problem(owner, group):
    for value, lookup, what in ((owner, pwd.getpwnam, 'user'), (group, grp.getgrnam, 'group')):
        if value is None or str(value).isdigit():
            continue
        try:
            lookup(value)
        except (KeyError, ValueError):
            return 'names the %s %s, which this node does not have' % (what, quote(value, 80))
    return None


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
    def preflight(self, directories, files, absent=()):
        declared = set()
        for spec in directories:
            path = spec['path']
            self._check_path(path, 'directories[].path')
            if os.path.lexists(path) and not os.path.isdir(path):
                self.fail('file_set: %s is listed as a directory but exists as something else' % _name(path))
            self._check_attributes(spec, path, 'directories[]')
            declared.add(os.path.normpath(path))
        seen = set()
        for spec in files:
            dest = spec['dest']
            self._check_path(dest, 'files[].dest')
            norm = os.path.normpath(dest)
            if norm in seen:
                self.fail('file_set: %s is listed twice in files' % _name(dest))
            seen.add(norm)
            if os.path.isdir(dest):
                self.fail('file_set: %s is a directory; files[].dest must name a file' % _name(dest))
            if os.path.islink(dest):
                self.fail('file_set: %s is a symbolic link; file_set does not follow links' % _name(dest))
            kind = _kind(dest)
            if kind not in (None, 'a regular file'):
                # A FIFO would block the read of the old content (check mode too), a device such as
                # /dev/zero never ends: neither is ever opened.
                self.fail('file_set: %s is %s; files[].dest must be a regular file or not exist'
                          % (_name(dest), kind))
            parent = os.path.dirname(norm)
            # In check mode a missing directory may be made by an earlier task of the real run (a package
            # install): the file is reported as new, as ansible.builtin.template reports it.
            if parent not in declared and not os.path.isdir(parent) and not self.check:
                self.fail('file_set: the directory of %s does not exist and is not listed in directories'
                          % _name(dest))
            validate = spec.get('validate')
            if validate is not None:
                problem = validate_problem(validate)
                if problem:
                    self.fail('file_set: the validate command of %s %s; got %s' % (_name(dest), problem, quote(validate)))
            self._check_attributes(spec, dest, 'files[]')
        written = [os.path.normpath(p) for p in list(declared) + list(seen)]
        written_real = [os.path.realpath(p) for p in written]
        for path in absent:
            self._check_path(path or '', 'absent[]', absolute=False)
            if not _removable(path):
                self.fail('file_set: absent[] takes absolute paths at least two levels below / (such as '
                          '/usr/local/lib/old), got %s' % quote(path))
            for form, targets in ((os.path.normpath(path), written), (os.path.realpath(path), written_real)):
                for target in targets:
                    if _inside(target, form):
                        self.fail('file_set: absent[] lists %s, which holds %s that this call writes: a path is '
                                  'either written or removed, never both' % (_name(path), _name(target)))

    def _check_path(self, path, what, absolute=True):
        if '\x00' in path:
            self.fail('file_set: %s holds a NUL byte, which no file name has: %s' % (what, quote(path)))
        if absolute and not os.path.isabs(path):
            self.fail('file_set: %s must be absolute, got %s' % (what, quote(path)))

    def _check_attributes(self, spec, path, what):
        problem = mode_problem(spec.get('mode'))
        if problem:
            self.fail('file_set: the mode of %s (%s) %s' % (_name(path), what, problem))
        # A name the node does not know would fail half way through the set (after directories were
        # made); in check mode an earlier task of the real run may still create the user or group.
        problem = None if self.check else _owner_problem(spec.get('owner'), spec.get('group'))
        if problem:
            self.fail('file_set: %s (%s) %s' % (_name(path), what, problem))

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
                self.fail('file_set: cannot create %s: %s' % (_name(path), to_native(exc)))
        diff = {'before_header': path, 'after_header': path, 'before': {'path': path}, 'after': {'path': path}}
        if self._set_attributes(spec, path, path, diff=diff):
            self._mark(path)
            if diff['before'] != diff['after']:
                self.diffs.append(diff)

    def prepare(self, spec):
        """For a file whose content must change: writes and checks the new content in a temporary file beside
        it and returns that file's path. None when the content is unchanged, and in check mode."""
        dest = spec['dest']
        new = to_bytes(spec['content'], errors='surrogate_or_strict')
        old, same = self._old_content(dest, new)
        if same:
            return None
        self._mark(dest)
        if self.module._diff:
            if old is False:
                self.diffs.append({'before_header': dest, 'after_header': dest,
                                   'before': '(more than %d bytes, not shown)' % DIFF_MAX_BYTES,
                                   'after': to_text(new, errors='surrogate_or_replace')})
            elif (old is not None and _looks_binary(old)) or _looks_binary(new):
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
            # The name's head only: a long file name plus mkstemp's suffix must stay a valid name.
            fd, tmp = tempfile.mkstemp(dir=directory, prefix='.%s.' % os.path.basename(dest)[:100])
        except OSError as exc:
            self.fail('file_set: cannot write in %s: %s' % (_name(directory), to_native(exc)))
        self.temps.append(tmp)
        try:
            with os.fdopen(fd, 'wb') as handle:
                handle.write(new)
                handle.flush()
                os.fsync(handle.fileno())
        except (IOError, OSError) as exc:
            self.fail('file_set: cannot write the new content of %s: %s' % (_name(dest), to_native(exc)))
        # The temporary file is 0600 from mkstemp; the existing file's attributes are its defaults, so
        # the file never exists with a wider mode or another owner than the task asks for.
        wanted = dict(spec)
        if os.path.exists(dest):
            st = os.stat(dest)
            for key, value in (('owner', str(st.st_uid)), ('group', str(st.st_gid)), ('mode', '0%o' % (st.st_mode & 0o7777))):
                if wanted.get(key) is None:
                    wanted[key] = value
        self._set_attributes(wanted, tmp, dest)
        validate = spec.get('validate')
        if validate:
            # An argv, never a shell line: the path goes in after the command was split.
            rc, out, err = self.module.run_command(validate_argv(validate, tmp))
            if rc != 0:
                self.fail('file_set: %s was not written: its validate command %s failed (rc=%d): %s'
                          % (_name(dest), quote(validate), rc, clip((err or out).strip(), 2000)),
                          validate_stdout=out, validate_stderr=err, failed_path=dest)
        return tmp

    def _old_content(self, dest, new):
        """(old, same): whether the existing content equals ``new``, and that content for the diff (None when
        there is no file or no diff is asked for, False when it is too large to show). The file is opened
        without blocking and checked to be a regular file again (it may have changed since the preflight);
        what is read is bounded by the new content's size, or by DIFF_MAX_BYTES for a diff."""
        try:
            fd = os.open(dest, os.O_RDONLY | os.O_NONBLOCK | getattr(os, 'O_NOCTTY', 0) | getattr(os, 'O_NOFOLLOW', 0))
        except (IOError, OSError) as exc:
            if not os.path.lexists(dest):
                return None, False
            self.fail('file_set: cannot read %s: %s' % (_name(dest), to_native(exc)))
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                self.fail('file_set: %s is %s; files[].dest must be a regular file or not exist'
                          % (_name(dest), kind_of(info.st_mode)))
            if info.st_size == len(new):
                limit = len(new) + 1
            elif not self.module._diff:
                return None, False
            elif info.st_size > DIFF_MAX_BYTES:
                return False, False
            else:
                limit = info.st_size + 1
            chunks = []
            while limit > 0:
                chunk = os.read(fd, min(limit, 65536))
                if not chunk:
                    break
                chunks.append(chunk)
                limit -= len(chunk)
        except (IOError, OSError) as exc:
            self.fail('file_set: cannot read %s: %s' % (_name(dest), to_native(exc)))
        finally:
            os.close(fd)
        old = b''.join(chunks)
        return old, old == new

    def _set_attributes(self, spec, path, shown, diff=None):
        """AnsibleModule's owner, group and mode change; an OSError it lets through (EPERM on chmod, a
        read-only file system) fails the task naming ``shown`` instead of a traceback."""
        try:
            return self.module.set_fs_attributes_if_different(_file_args(self.module, spec, path), False, diff=diff)
        except (IOError, OSError) as exc:
            self.fail('file_set: cannot give the new %s its owner, group or mode: %s' % (_name(shown), to_native(exc)))

    def attributes(self, spec):
        dest = spec['dest']
        if not os.path.exists(dest):
            return
        diff = {'before_header': dest, 'after_header': dest, 'before': {'path': dest}, 'after': {'path': dest}}
        if self._set_attributes(spec, dest, dest, diff=diff):
            self._mark(dest)
            if self.module._diff and diff['before'] != diff['after']:
                self.diffs.append(diff)

    def remove(self, path):
        if not _removable(path):  # checked before anything changed; checked again right before removing
            self.fail('file_set: refusing to remove %s' % quote(path))
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
            self.fail('file_set: cannot remove %s: %s' % (_name(path), to_native(exc)))

    def run(self, directories, files, absent=()):
        # Whatever ends the run (a failed owner or mode change ends it inside AnsibleModule, with
        # SystemExit), no temporary file is left beside a destination.
        try:
            return self._run(directories, files, absent)
        except BaseException:
            self._remove_temps()
            raise

    def _run(self, directories, files, absent):
        self.preflight(directories, files, absent)
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
                self.fail('file_set: cannot move the new %s into place: %s' % (_name(dest), to_native(exc)))
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
