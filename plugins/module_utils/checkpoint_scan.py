# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which training checkpoints below SOURCE/<user>/ are complete, decided per directory by the conventions
training code really writes, each decision with its reason.

Shipped to nodes verbatim inside the gpucluster-checkpoint-backup archive (roles/checkpoint_backup) with
checkpoint_backup.py; unit-tested in tests/unit/plugins/module_utils/test_checkpoint_scan.py and
tests/unit/robustness/test_checkpoint_robustness.py. Standard library only, Python 3.9+.

The decisions are pure: they read the tree through a view (`DiskView`, the thin adapter: os.scandir,
lstat, bounded reads of small regular files, never following a symlink, never opening anything that is
not a regular file) and return items. Conventions (names in CONVENTIONS, chosen by a setting):

  marker      a directory holding the project's marker file whose CONTENT lists every regular file below
              it with its size and modification time (nanoseconds; see parse_manifest): complete when the
              tree is exactly that. A file written after the marker, even within the same second, is
              either not listed or has another mtime/size.
  dcp         torch.distributed.checkpoint: a directory of *.distcp shards; complete when `.metadata`
              (written last, by rename, after every rank finished) is there and no shard is newer.
  deepspeed   a save_dir with a `latest` file naming a tag directory: that tag is complete (with no file
              in it written after `latest`); other tags beside it are not (nothing says they finished).
  hf_trainer  Hugging Face Trainer's `checkpoint-N` with `trainer_state.json`; `tmp-checkpoint-N` is a
              staging directory, never complete.
  lightning   `*.ckpt` files (`*.ckpt.tmp` and other temporary names never complete).
  torch_save  plain torch.save files (`*.pt`, `*.pth`).
  age         (legacy) a top-level entry of the user's directory in which nothing changed for
              min_age_seconds.

Conventions whose completion is not one atomic step (deepspeed: other ranks may still write when rank 0
writes `latest`; hf_trainer: older Trainers write rng_state after trainer_state.json; lightning and
torch_save: a file may still grow) need a SECOND LOOK: the checkpoint's fingerprint (every file's size,
mtime, ctime and inode) must be the same twice, stable_seconds apart, or equal to the fingerprint it had
when the previous run backed it up. Comparing two looks of the same server's timestamps, not timestamps
with this host's clock, keeps a skewed clock from making a growing file look old.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import errno as errno_names
import hashlib
import json
import os
import re
import stat

CONVENTIONS = ('marker', 'dcp', 'deepspeed', 'hf_trainer', 'lightning', 'torch_save', 'age')
DEFAULT_CONVENTIONS = ('marker', 'dcp', 'deepspeed', 'hf_trainer', 'lightning', 'torch_save')
# Conventions whose candidates need the second look (see the module's doc).
SECOND_LOOK = ('deepspeed', 'hf_trainer', 'lightning', 'torch_save')
STATES = ('complete', 'incomplete', 'skipped')

# Every reason a decision can give, by state; the metric label values are exactly these.
REASONS = {
    'complete': ('marker', 'dcp-metadata', 'deepspeed-latest', 'hf-trainer-state', 'lightning-ckpt',
                 'torch-save', 'age'),
    'incomplete': ('marker-empty', 'marker-invalid', 'marker-unreadable', 'marker-mismatch', 'dcp-no-metadata',
                   'dcp-shard-newer', 'deepspeed-latest-invalid', 'deepspeed-latest-missing',
                   'deepspeed-written-after-latest', 'deepspeed-not-latest', 'hf-no-trainer-state', 'hf-staging',
                   'temporary-file', 'still-changing', 'too-young', 'age-too-young', 'no-convention',
                   'unreadable', 'too-many-entries'),
    'skipped': ('hidden', 'lost+found', 'symlink', 'not-a-directory', 'permission-denied', 'unreadable',
                'too-many-entries'),
}

MARKER_MAX_BYTES = 16 * 1024 * 1024
MANIFEST_FORMAT = 'gpucluster-checkpoint-manifest/1'
LATEST_MAX_BYTES = 4096
# How deep the files of one checkpoint directory are read, and how many entries one user's scan may list.
INNER_DEPTH = 16
MAX_ENTRIES_PER_USER = 2000000
TORCH_SAVE_SUFFIXES = ('.pt', '.pth')
LIGHTNING_SUFFIX = '.ckpt'
TEMPORARY_SUFFIXES = ('.tmp', '.temp', '.partial')
HF_CHECKPOINT = re.compile(r'^checkpoint-[0-9]+$')
HF_STAGING = re.compile(r'^tmp-checkpoint-[0-9]+$')
DCP_METADATA = '.metadata'
DCP_SUFFIX = '.distcp'
HF_TRAINER_STATE = 'trainer_state.json'
DEEPSPEED_LATEST = 'latest'
# Files DeepSpeed writes into a tag directory (mp_rank_00_model_states.pt, zero_pp_rank_0_mp_rank_00_optim_states.pt).
DEEPSPEED_FILE_SUFFIXES = ('model_states.pt', 'optim_states.pt')
BIDI = frozenset([0x061C, 0x200E, 0x200F, 0x202A, 0x202B, 0x202C, 0x202D, 0x202E, 0x2066, 0x2067, 0x2068,
                  0x2069, 0x2028, 0x2029, 0xFEFF])
DISPLAY_LIMIT = 300
NS = 1000000000


class ScanError(Exception):
    """A directory or file of the tree could not be read: REASON (a REASONS value), DETAIL (errno name or words)."""

    def __init__(self, reason, detail, path=''):
        Exception.__init__(self, '%s: %s' % (reason, detail))
        self.reason = reason
        self.detail = detail
        self.path = path


def display(text, limit=DISPLAY_LIMIT):
    """TEXT (a str, possibly with surrogate-escaped bytes from the file system, or bytes) as one printable
    line: backslash, control characters (newline included), C1 controls, bidi and line-separator characters
    and undecodable bytes escaped as \\xNN / \\uNNNN; longer than LIMIT characters: cut, saying how much."""
    if isinstance(text, bytes):
        text = text.decode('utf-8', 'surrogateescape')
    text = str(text)
    if not (text.isprintable() and '\\' not in text and not any(ord(ch) in BIDI for ch in text)):
        out = []
        for ch in text:
            code = ord(ch)
            if ch == '\\':
                out.append('\\\\')
            elif 0xDC80 <= code <= 0xDCFF:
                out.append('\\x%02x' % (code - 0xDC00))
            elif code < 0x20 or 0x7F <= code < 0xA0:
                out.append('\\x%02x' % code)
            elif code in BIDI or 0xD800 <= code <= 0xDFFF or not ch.isprintable():
                out.append('\\u%04x' % code)
            else:
                out.append(ch)
        text = ''.join(out)
    if len(text) > limit:
        text = '%s...(%d more characters)' % (text[:limit], len(text) - limit)
    return text


class Stat(object):
    """What a scan keeps of an lstat: kind (file, dir, link, other), size, mtime_ns, ctime_ns, ino."""
    __slots__ = ('kind', 'size', 'mtime_ns', 'ctime_ns', 'ino')

    def __init__(self, kind, size, mtime_ns, ctime_ns, ino):
        self.kind = kind
        self.size = size
        self.mtime_ns = mtime_ns
        self.ctime_ns = ctime_ns
        self.ino = ino

    @classmethod
    def of(cls, st):
        mode = st.st_mode
        if stat.S_ISREG(mode):
            kind = 'file'
        elif stat.S_ISDIR(mode):
            kind = 'dir'
        elif stat.S_ISLNK(mode):
            kind = 'link'
        else:
            kind = 'other'
        return cls(kind, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)

    def key(self):
        return (self.kind, self.size, self.mtime_ns, self.ctime_ns, self.ino)


def _errno_name(exc):
    return errno_names.errorcode.get(getattr(exc, 'errno', None) or 0, type(exc).__name__)


class DiskView(object):
    """The I/O adapter: lists directories (lstat of every entry, no symlink followed), reads small regular
    files (O_NONBLOCK|O_NOFOLLOW, checked regular after open, size-bounded). Paths are relative to ROOT.
    Counts entries against BUDGET (per user: reset_budget)."""

    def __init__(self, root, budget=MAX_ENTRIES_PER_USER):
        self.root = root
        self.budget = budget
        self.left = budget

    def reset_budget(self):
        self.left = self.budget

    def path(self, rel):
        return os.path.join(self.root, rel) if rel else self.root

    def lstat(self, rel):
        try:
            return Stat.of(os.lstat(self.path(rel)))
        except OSError as exc:
            raise ScanError('unreadable', _errno_name(exc), rel)

    def entries(self, rel):
        """{name: Stat} of directory REL; raises ScanError."""
        found = {}
        try:
            with os.scandir(self.path(rel)) as listing:
                for entry in listing:
                    self.left -= 1
                    if self.left < 0:
                        raise ScanError('too-many-entries', 'more than %d entries' % self.budget, rel)
                    try:
                        found[entry.name] = Stat.of(entry.stat(follow_symlinks=False))
                    except OSError as exc:
                        if exc.errno == errno_names.ENOENT:
                            continue  # removed between the listing and the lstat
                        raise ScanError('unreadable', _errno_name(exc), os.path.join(rel, entry.name))
        except OSError as exc:
            reason = 'permission-denied' if exc.errno in (errno_names.EACCES, errno_names.EPERM) else 'unreadable'
            raise ScanError(reason, _errno_name(exc), rel)
        return found

    def read_small(self, rel, limit):
        """The bytes of regular file REL, at most LIMIT (more: ScanError)."""
        flags = os.O_RDONLY | getattr(os, 'O_NONBLOCK', 0) | getattr(os, 'O_NOFOLLOW', 0) | getattr(os, 'O_NOCTTY', 0)
        try:
            fd = os.open(self.path(rel), flags)
        except OSError as exc:
            raise ScanError('unreadable', _errno_name(exc), rel)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ScanError('unreadable', 'not a regular file', rel)
            chunks = []
            size = 0
            while True:
                chunk = os.read(fd, min(1 << 20, limit + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
                if size > limit:
                    raise ScanError('unreadable', 'larger than %d bytes' % limit, rel)
            return b''.join(chunks)
        except OSError as exc:
            raise ScanError('unreadable', _errno_name(exc), rel)
        finally:
            os.close(fd)


def _join(rel, name):
    return rel + '/' + name if rel else name


def walk_files(view, rel, depth=INNER_DEPTH, top=None):
    """{path below REL: Stat} of everything below directory REL (directories included), at most DEPTH levels
    deep (deeper: ScanError too-many-entries). TOP: REL's entries when the caller has listed them already."""
    found = {}
    stack = [('', depth)]
    while stack:
        sub, left = stack.pop()
        listing = top if (top is not None and sub == '') else view.entries(_join(rel, sub))
        for name, st in listing.items():
            path = _join(sub, name)
            found[path] = st
            if st.kind == 'dir':
                if left <= 0:
                    raise ScanError('too-many-entries', 'deeper than %d levels' % depth, _join(rel, path))
                stack.append((path, left - 1))
    return found


def fingerprint(files):
    """A short digest of FILES ({path: Stat}): every entry's path, kind, size, mtime, ctime and inode."""
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(path.encode('utf-8', 'surrogateescape') + b'\0')
        digest.update(('%s %d %d %d %d\n' % files[path].key()).encode('ascii'))
    return digest.hexdigest()[:32]


def _newest(files):
    return max([st.mtime_ns for st in files.values() if st.kind == 'file'] or [0])


# ---- the project's marker ---------------------------------------------------------------------------------

def _manifest_path_ok(path):
    parts = path.split('/')
    return bool(path) and '\0' not in path and not path.startswith('/') and '' not in parts \
        and '.' not in parts and '..' not in parts


def _mtime_text(text):
    """(value, digits) of a decimal SECONDS[.FRACTION] mtime as find -printf %T@ writes it: VALUE in units of
    10**-DIGITS seconds, DIGITS the fraction's digits kept (at most 9: nanoseconds)."""
    match = re.match(r'^([0-9]{1,12})(?:\.([0-9]{1,20}))?$', text)
    if not match:
        raise ValueError('mtime %s is not SECONDS[.FRACTION]' % display(text, 40))
    fraction = (match.group(2) or '')[:9]
    return int(match.group(1) + fraction), len(fraction)


def parse_manifest(content):
    """{relative path: (size, mtime, digits)} listed by a marker's CONTENT (bytes). Two forms:
      JSON  {"format": "gpucluster-checkpoint-manifest/1",
             "files": [{"path": "model.pt", "size": 123, "mtime_ns": 1767607200123456789}, ...]}
      text  one line per file, as `find . -type f ! -name '.checkpoint-complete*' -printf '%s %T@ %P\\n'`
            writes it: SIZE SECONDS.FRACTION PATH (the fraction compared to the digits given, ns at most).
    Empty content raises ValueError('empty'); anything else not of these forms ValueError(why)."""
    if not content.strip():
        raise ValueError('empty')
    try:
        text = content.decode('utf-8', 'surrogateescape')
    except UnicodeDecodeError:  # pragma: no cover - surrogateescape decodes any bytes
        raise ValueError('not text')
    listed = {}
    if text.lstrip().startswith('{'):
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ValueError('not valid JSON (%s)' % display(str(exc), 80))
        except RecursionError:
            raise ValueError('not valid JSON (nested too deep)')
        if not isinstance(data, dict) or data.get('format') != MANIFEST_FORMAT or not isinstance(data.get('files'), list):
            raise ValueError('JSON without "format": "%s" and a "files" list' % MANIFEST_FORMAT)
        for entry in data['files']:
            if not isinstance(entry, dict):
                raise ValueError('a "files" entry is not an object')
            path, size, mtime = entry.get('path'), entry.get('size'), entry.get('mtime_ns')
            if not isinstance(path, str) or not _manifest_path_ok(path):
                raise ValueError('a path is not relative inside the checkpoint: %s' % display(repr(path), 80))
            for name, value in (('size', size), ('mtime_ns', mtime)):
                if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                    raise ValueError('%s of %s is not an integer >= 0' % (name, display(path, 80)))
            if path in listed:
                raise ValueError('%s is listed twice' % display(path, 80))
            listed[path] = (size, mtime, 9)
        return listed
    for number, line in enumerate(text.split('\n'), 1):
        if not line:
            continue
        parts = line.split(' ', 2)
        if len(parts) != 3 or not parts[0].isdigit() or not parts[0].isascii():
            raise ValueError('line %d is not "SIZE SECONDS.FRACTION PATH"' % number)
        mtime, digits = _mtime_text(parts[1])
        path = parts[2][2:] if parts[2].startswith('./') else parts[2]
        if not _manifest_path_ok(path):
            raise ValueError('line %d: the path is not relative inside the checkpoint' % number)
        if path in listed:
            raise ValueError('%s is listed twice' % display(path, 80))
        listed[path] = (int(parts[0]), mtime, digits)
    return listed


def manifest_for(files):
    """The JSON manifest (bytes) that lists FILES ({path: Stat}) exactly: the marker's content as a job writes it
    (docs/storage.md shows the same in a few lines of Python, and the find form)."""
    entries = [{'path': path, 'size': st.size, 'mtime_ns': st.mtime_ns}
               for path, st in sorted(files.items()) if st.kind == 'file']
    return (json.dumps({'format': MANIFEST_FORMAT, 'files': entries}, indent=1, sort_keys=True) + '\n').encode('ascii')


def check_manifest(listed, files, marker):
    """(ok, detail) of a marker's listing against the directory's FILES ({path: Stat}; the marker itself and
    directories and symlinks are not listed)."""
    present = dict((path, st) for path, st in files.items()
                   if st.kind not in ('dir', 'link') and path != marker)
    for path in sorted(present):
        st = present[path]
        if st.kind != 'file':
            return False, '%s is not a regular file' % display(path)
        if path not in listed:
            return False, '%s is not listed in the marker (written after it?)' % display(path)
    for path in sorted(listed):
        size, mtime, digits = listed[path]
        st = present.get(path)
        if st is None:
            return False, '%s is listed in the marker but not there' % display(path)
        if st.size != size:
            return False, '%s has %d bytes, the marker says %d' % (display(path), st.size, size)
        if st.mtime_ns // (10 ** (9 - digits)) != mtime:
            return False, '%s was modified after the marker was written' % display(path)
    return True, '%d file(s) as the marker lists them' % len(listed)


# ---- the decisions ----------------------------------------------------------------------------------------

def _item(user, rel, convention, state, reason, detail, files=None, extra=(), look=False):
    files = files or {}
    return {'user': user, 'rel': rel, 'convention': convention, 'state': state, 'reason': reason,
            'detail': detail, 'newest_ns': _newest(files), 'fingerprint': fingerprint(files) if files else '',
            'extra': list(extra), 'look': look, 'files': files}


def _temporary(name):
    lowered = name.lower()
    return any(lowered.endswith(suffix) for suffix in TEMPORARY_SUFFIXES)


def _file_item(user, rel, name, st, conventions):
    """An item for checkpoint file NAME (Stat ST) in directory REL, or None when no convention knows it."""
    lowered = name.lower()
    path = _join(rel, name)
    files = {'': st}
    if _temporary(name):
        stem = lowered.rsplit('.', 1)[0]
        if 'lightning' in conventions and stem.endswith(LIGHTNING_SUFFIX):
            return _item(user, path, 'lightning', 'incomplete', 'temporary-file',
                         'a temporary name: the save has not been renamed into place', files)
        if 'torch_save' in conventions and stem.endswith(TORCH_SAVE_SUFFIXES):
            return _item(user, path, 'torch_save', 'incomplete', 'temporary-file',
                         'a temporary name: the save has not been renamed into place', files)
        return None
    if st.kind != 'file':
        return None
    if 'lightning' in conventions and lowered.endswith(LIGHTNING_SUFFIX):
        return _item(user, path, 'lightning', 'complete', 'lightning-ckpt', 'a .ckpt file', files, look=True)
    if 'torch_save' in conventions and lowered.endswith(TORCH_SAVE_SUFFIXES):
        return _item(user, path, 'torch_save', 'complete', 'torch-save', 'a torch.save file', files, look=True)
    return None


def _dir_item(view, user, rel, name, listing, config):
    """An item for checkpoint directory REL (named NAME, its entries LISTING), or None when it is not one."""
    conventions = config['conventions']
    marker = config.get('marker', '')
    if 'marker' in conventions and marker and marker in listing and listing[marker].kind == 'file':
        files = walk_files(view, rel, top=listing)
        try:
            listed = parse_manifest(view.read_small(_join(rel, marker), MARKER_MAX_BYTES))
        except ScanError as exc:
            return _item(user, rel, 'marker', 'incomplete', 'marker-unreadable', exc.detail, files)
        except ValueError as exc:
            if str(exc) == 'empty':
                return _item(user, rel, 'marker', 'incomplete', 'marker-empty',
                             'the marker lists no files (touched, not written): write the file list into it',
                             files)
            return _item(user, rel, 'marker', 'incomplete', 'marker-invalid', str(exc), files)
        ok, detail = check_manifest(listed, files, marker)
        if ok:
            return _item(user, rel, 'marker', 'complete', 'marker', detail, files)
        return _item(user, rel, 'marker', 'incomplete', 'marker-mismatch', detail, files)
    if 'hf_trainer' in conventions and HF_STAGING.match(name):
        return _item(user, rel, 'hf_trainer', 'incomplete', 'hf-staging',
                     'the Trainer renames it to checkpoint-N when the save is done', walk_files(view, rel, top=listing))
    if 'hf_trainer' in conventions and HF_CHECKPOINT.match(name):
        files = walk_files(view, rel, top=listing)
        state = listing.get(HF_TRAINER_STATE)
        if state is None or state.kind != 'file' or state.size == 0:
            return _item(user, rel, 'hf_trainer', 'incomplete', 'hf-no-trainer-state',
                         'no %s yet' % HF_TRAINER_STATE, files)
        return _item(user, rel, 'hf_trainer', 'complete', 'hf-trainer-state', HF_TRAINER_STATE, files, look=True)
    shards = [n for n, st in listing.items() if n.endswith(DCP_SUFFIX) and st.kind == 'file']
    if 'dcp' in conventions and (shards or DCP_METADATA in listing):
        files = walk_files(view, rel, top=listing)
        metadata = listing.get(DCP_METADATA)
        if metadata is None or metadata.kind != 'file' or metadata.size == 0:
            return _item(user, rel, 'dcp', 'incomplete', 'dcp-no-metadata',
                         'no %s: the save did not finish' % DCP_METADATA, files)
        newer = sorted(n for n in shards if listing[n].mtime_ns > metadata.mtime_ns)
        if newer:
            return _item(user, rel, 'dcp', 'incomplete', 'dcp-shard-newer',
                         '%s is newer than %s (a save is writing over it)' % (display(newer[0]), DCP_METADATA), files)
        return _item(user, rel, 'dcp', 'complete', 'dcp-metadata', '%s and %d shard(s)' % (DCP_METADATA, len(shards)),
                     files)
    return None


def _is_deepspeed_tag(files):
    """FILES ({path: Stat} of a directory) hold DeepSpeed's own files at their top (a tag directory)."""
    return any('/' not in path and path.endswith(DEEPSPEED_FILE_SUFFIXES) for path, st in files.items()
               if st.kind == 'file')


def _deepspeed_items(view, user, rel, listing):
    """(items, other subdirectories) of DeepSpeed save_dir REL (its entries LISTING hold the `latest` file): the
    tag directories (DeepSpeed's *model_states.pt / *optim_states.pt in them, or the one `latest` names) are
    decided here; the other subdirectories are the caller's to decide like any directory."""
    items = []
    others = []
    subdirs = sorted(n for n, st in listing.items() if st.kind == 'dir')
    extras = sorted(_join(rel, n) for n, st in listing.items() if st.kind == 'file')
    latest = listing[DEEPSPEED_LATEST]
    trees = {}
    for name in subdirs:
        try:
            trees[name] = walk_files(view, _join(rel, name))
        except ScanError as exc:
            trees[name] = exc
    if not any(isinstance(files, dict) and _is_deepspeed_tag(files) for files in trees.values()):
        return None, None  # a `latest` file beside directories that are not DeepSpeed's: not a save_dir
    try:
        tag = view.read_small(_join(rel, DEEPSPEED_LATEST), LATEST_MAX_BYTES).decode('utf-8', 'surrogateescape').strip()
        problem = None
        if not tag:
            problem = '`latest` is empty (being written?)'
        elif '/' in tag or tag in ('.', '..') or not tag.isprintable():
            problem = '`latest` holds %s, not a tag directory name' % display(tag, 80)
    except ScanError as exc:
        tag, problem = '', '`latest` cannot be read: %s' % exc.detail
    if problem:
        items.append(_item(user, rel, 'deepspeed', 'incomplete', 'deepspeed-latest-invalid', problem))
    elif tag not in subdirs or not (isinstance(trees[tag], ScanError) or _is_deepspeed_tag(trees[tag])):
        items.append(_item(user, _join(rel, tag), 'deepspeed', 'incomplete', 'deepspeed-latest-missing',
                           '`latest` names %s, which is not a tag directory here' % display(tag, 80)))
    for name in subdirs:
        path = _join(rel, name)
        files = trees[name]
        if isinstance(files, ScanError):
            items.append(_unreadable_item(user, path, files))
            continue
        if not _is_deepspeed_tag(files):
            others.append(name)
            continue
        if name != tag or problem:
            items.append(_item(user, path, 'deepspeed', 'incomplete', 'deepspeed-not-latest',
                               '`latest` names %s' % (display(tag, 80) if not problem else 'no valid tag'), files))
            continue
        after = sorted(p for p, st in files.items() if st.kind == 'file' and st.mtime_ns > latest.mtime_ns)
        if after:
            items.append(_item(user, path, 'deepspeed', 'incomplete', 'deepspeed-written-after-latest',
                               '%s was written after `latest` (a rank still saving)' % display(after[0]), files))
            continue
        items.append(_item(user, path, 'deepspeed', 'complete', 'deepspeed-latest', 'the tag `latest` names',
                           files, extra=extras, look=True))
    return items, others


def _is_deepspeed_dir(listing):
    latest = listing.get(DEEPSPEED_LATEST)
    return latest is not None and latest.kind == 'file' and any(st.kind == 'dir' for st in listing.values())


def _unreadable_item(user, rel, exc):
    reason = exc.reason if exc.reason in REASONS['incomplete'] else 'unreadable'
    where = display(exc.path) if exc.path and exc.path != rel else ''
    return _item(user, rel, '', 'incomplete', reason, (where + ': ' if where else '') + display(exc.detail))


def _no_convention(user, rel, config):
    return _item(user, rel, '', 'incomplete', 'no-convention',
                 'no checkpoint convention (%s) matches down to depth %d'
                 % (', '.join(config['conventions']), config['max_depth']))


def _walk(view, user, rel, depth, listing, config, out, seen_files):
    """Decide the entries of directory REL (depth DEPTH below the user's directory, its entries LISTING),
    appending items to OUT and the Stat of every regular file met to SEEN_FILES."""
    conventions = config['conventions']
    if 'deepspeed' in conventions and _is_deepspeed_dir(listing):
        items, others = _deepspeed_items(view, user, rel, listing)
        if items is not None:
            seen_files.extend(st for st in listing.values() if st.kind == 'file')
            for item in items:
                out.append(item)
                seen_files.extend(st for st in item['files'].values() if st.kind == 'file')
            for name in others:
                _entry(view, user, rel, name, listing[name], depth, config, out, seen_files)
            return
    if depth >= config['max_depth']:
        return  # reached only to look for a DeepSpeed save_dir: nothing deeper is decided
    for name in sorted(listing):
        _entry(view, user, rel, name, listing[name], depth, config, out, seen_files)


def _entry(view, user, rel, name, st, depth, config, out, seen_files):
    """Decide entry NAME (Stat ST) of directory REL (at DEPTH)."""
    conventions = config['conventions']
    path = _join(rel, name)
    if st.kind == 'file':
        seen_files.append(st)
    if st.kind == 'dir' and _temporary(name):
        out.append(_item(user, path, '', 'incomplete', 'temporary-file',
                         'a temporary name: the save has not been renamed into place'))
        return
    if st.kind != 'dir':
        item = _file_item(user, rel, name, st, conventions)
        if item:
            out.append(item)
        return
    try:
        child = view.entries(path)
        item = _dir_item(view, user, path, name, child, config)
    except ScanError as exc:
        out.append(_unreadable_item(user, path, exc))
        return
    if item:
        out.append(item)
        seen_files.extend(s for s in item['files'].values() if s.kind == 'file')
        return
    before = len(out)
    deeper = depth + 1 < config['max_depth']
    if deeper or (depth + 1 == config['max_depth'] and 'deepspeed' in conventions and _is_deepspeed_dir(child)):
        try:
            _walk(view, user, path, depth + 1, child, config, out, seen_files)
        except ScanError as exc:
            out.append(_unreadable_item(user, path, exc))
    else:
        seen_files.extend(s for s in child.values() if s.kind == 'file')
    if len(out) == before:
        # Nothing below it is a checkpoint (a save killed before its marker, logs, a convention not enabled).
        out.append(_no_convention(user, path, config))


def _age_item(view, user, rel, config, now_ns):
    try:
        st = view.lstat(rel)
        files = walk_files(view, rel) if st.kind == 'dir' else {'': st}
    except ScanError as exc:
        return _unreadable_item(user, rel, exc)
    newest = max(_newest(files), st.mtime_ns)
    min_age = config['min_age_seconds']
    if now_ns - newest >= min_age * NS:
        return _item(user, rel, 'age', 'complete', 'age', 'unchanged for %d s' % min_age, files)
    return _item(user, rel, 'age', 'incomplete', 'age-too-young', 'modified in the last %d s' % min_age, files)


def scan_user(view, user, config, now_ns):
    """Items (dicts: user, rel, convention, state, reason, detail, newest_ns, fingerprint, extra, look, files)
    for the user directory USER (relative to the view's root) and the per-user figures:
    {'items': [...], 'newest_ns': newest file, 'complete_ns': newest complete checkpoint's newest file,
     'incomplete_since_ns': oldest file newer than that (0: none)}. A user directory that cannot be listed
    raises ScanError (the caller reports the user as skipped)."""
    view.reset_budget()
    listing = view.entries(user)
    items = []
    seen = []
    _walk(view, user, user, 0, listing, config, items, seen)
    # The top-level entries some item covers (a checkpoint, or a file it is backed up with); the others (files
    # no convention knows) are reported too.
    tops = set(rel[len(user) + 1:].split('/')[0] for item in items for rel in [item['rel']] + item['extra'])
    for name in sorted(listing):
        if name not in tops and not (name == config.get('marker') and 'marker' in config['conventions']):
            items.append(_no_convention(user, _join(user, name), config))
    if 'age' in config['conventions']:
        # The legacy rule decides each top-level entry of the user's directory no other convention knows.
        items = [_age_item(view, user, item['rel'], config, now_ns)
                 if item['reason'] == 'no-convention' and item['rel'].count('/') == 1 else item for item in items]
    min_age = config.get('min_age_seconds', 0)
    for item in items:
        if item['state'] == 'complete' and item['convention'] != 'age' and min_age and \
                now_ns - item['newest_ns'] < min_age * NS:
            item.update(state='incomplete', reason='too-young', look=False,
                        detail='modified in the last %d s (min_age_seconds)' % min_age)
    items.sort(key=lambda item: item['rel'])
    found = {'items': items, 'mtimes': [st.mtime_ns for st in seen]}
    found.update(user_figures(items, found['mtimes']))
    return found


def user_figures(items, mtimes):
    """The user's figures for the alert on files changing with no complete checkpoint: newest_ns (newest file),
    complete_ns (the newest file of the newest complete checkpoint among ITEMS, 0: none), incomplete_since_ns
    (the oldest of MTIMES newer than that, 0: none)."""
    complete_ns = max([item['newest_ns'] for item in items if item['state'] == 'complete'] or [0])
    after = [m for m in mtimes if m > complete_ns]
    return {'newest_ns': max(mtimes or [0]), 'complete_ns': complete_ns, 'incomplete_since_ns': min(after) if after else 0}


def refresh_user_figures(result):
    """RESULT (scan's) with every user's figures computed again from the items' states now (after second looks)."""
    for user, figures in result['users'].items():
        figures.update(user_figures([item for item in result['items'] if item['user'] == user], figures['mtimes']))
    return result


def user_skip_reason(name, st):
    """Why entry NAME (Stat ST) of the checkpoint directory is not a user's directory, or None when it is."""
    if name.startswith('.'):
        return 'hidden'
    if name == 'lost+found':
        return 'lost+found'
    if st.kind == 'link':
        return 'symlink'
    if st.kind != 'dir':
        return 'not-a-directory'
    return None


def scan(view, config, now_ns):
    """Every decision below the view's root: {'items': [...], 'users': {user: figures}, 'skipped': [...],
    'unreadable_users': n, 'readable_users': n}. Skipped entries are items of state skipped. The root
    itself not listable raises ScanError (the share is not readable at all)."""
    top = view.entries('')
    result = {'items': [], 'users': {}, 'readable_users': 0, 'unreadable_users': 0}
    for name in sorted(top):
        reason = user_skip_reason(name, top[name])
        if reason:
            result['items'].append(_item(name, name, '', 'skipped', reason, 'not a user directory'))
            continue
        try:
            found = scan_user(view, name, config, now_ns)
        except ScanError as exc:
            result['unreadable_users'] += 1
            reason = exc.reason if exc.reason in REASONS['skipped'] else 'unreadable'
            result['items'].append(_item(name, name, '', 'skipped', reason,
                                         'the user directory cannot be read: %s' % display(exc.detail)))
            continue
        result['readable_users'] += 1
        result['items'].extend(found.pop('items'))
        result['users'][name] = found
    result['items'].sort(key=lambda item: item['rel'])
    return result


def needs_second_look(item, previous):
    """True when ITEM (complete by a convention that needs two looks) was not backed up by the previous run
    with the same fingerprint (PREVIOUS: {rel: fingerprint})."""
    return item['state'] == 'complete' and item['look'] and previous.get(item['rel']) != item['fingerprint']


def second_look(item, files):
    """ITEM decided again with its FILES read a second time ({path: Stat}, or None: gone)."""
    if files is None:
        item.update(state='incomplete', reason='still-changing', detail='gone at the second look')
    elif fingerprint(files) != item['fingerprint']:
        item.update(state='incomplete', reason='still-changing',
                    detail='changed between two looks (size, mtime, ctime or inode)')
    item['look'] = False
    return item


def look_again(view, item):
    """The files of ITEM read again for its second look (None: gone or unreadable now)."""
    view.reset_budget()
    try:
        st = view.lstat(item['rel'])
        return walk_files(view, item['rel']) if st.kind == 'dir' else {'': st}
    except ScanError:
        return None


def counts(items):
    """{(state, reason): n} of ITEMS."""
    found = {}
    for item in items:
        key = (item['state'], item['reason'])
        found[key] = found.get(key, 0) + 1
    return found


def parse_mountinfo(text):
    """[(mount point, fstype, source, super options)] of /proc/self/mountinfo TEXT (octal escapes decoded)."""
    mounts = []

    def unescape(value):
        return re.sub(r'\\([0-7]{3})', lambda m: chr(int(m.group(1), 8)), value)

    for line in text.splitlines():
        fields = line.split(' ')
        if '-' not in fields[6:]:
            continue
        dash = fields.index('-', 6)
        if len(fields) < dash + 4:
            continue
        mounts.append((unescape(fields[4]), fields[dash + 1], unescape(fields[dash + 2]), fields[dash + 3]))
    return mounts


def mount_for(path, mounts):
    """The (mount point, fstype, source, options) of MOUNTS that holds PATH (the longest mount point), or None."""
    path = os.path.normpath(path)
    best = None
    for mount in mounts:
        point = mount[0]
        if path == point or path.startswith(point.rstrip('/') + '/') or point == '/':
            if best is None or len(point) > len(best[0]):
                best = mount
    return best


def unreadable_share_message(path, detail, mount):
    """Why the backup cannot read the checkpoint directory PATH (DETAIL: errno name), naming what blocks it."""
    text = 'cannot read %s as root (%s)' % (display(path), display(detail))
    if mount and mount[1].startswith('nfs'):
        export = mount[2]
        return ('%s: it is NFS (%s %s mounted at %s), and the export squashes root (root_squash, the NFS default): '
                'root on this client is nobody on the server and cannot list the users\' 0700 directories. Run the '
                'backup on the NFS server (shared_storage_mode: server), or export %s to this host with '
                'no_root_squash (shared_storage_exports, shared_storage_allow_no_root_squash: true) and set '
                'checkpoint_backup_nfs_root_access: true'
                % (text, display(mount[1]), display(export), display(mount[0]), display(export.split(':', 1)[-1])))
    if mount:
        return '%s (%s %s mounted at %s): check the directory\'s owner, mode and ACLs' % (
            text, display(mount[1]), display(mount[2]), display(mount[0]))
    return text


def user_name_errors(name):
    """Messages for a user name that cannot be a directory of the checkpoint directory (empty list: fine)."""
    if not isinstance(name, str) or not name:
        return ['user must be a non-empty user name (got %s)' % display(repr(name), 80)]
    if '/' in name or '\0' in name or name in ('.', '..') or name.startswith('.') or name == 'lost+found':
        return ['user must be one directory name below the checkpoint directory, not hidden (got %s)'
                % display(name, 80)]
    if display(name) != name or len(name.encode('utf-8', 'surrogateescape')) > 255:
        return ['user must be printable and at most 255 bytes (got %s)' % display(name, 80)]
    return []
