# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The checkpoint backup's scan, text and settings under hostile and careless input (issue 27's "checkpoints
silently not backed up" and issue 32): user names no regex expected, files where directories are expected,
FIFOs and symlinks where files are expected, markers that lie, names that forge journal lines or metric
labels, trees too deep or too wide, settings of the wrong type.

Every case states its exact outcome, one of:
  backed-up   the checkpoint is complete and goes to restic;
  reported    not backed up, with its reason (an incomplete decision, counted in the metrics);
  skipped     a top-level entry that is not a user's directory, or one that cannot be read, named with why;
  refused     a setting or request refused with a message naming it;
  escaped     text from the file system reaches the journal / a metric label as one escaped line.
Plus a hypothesis property: the scan of any small tree of such entries never raises, never hangs, decides
every user's entries and gives only declared reasons.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ansible_collections.gpucluster.core.plugins.module_utils import checkpoint_backup as cb
from ansible_collections.gpucluster.core.plugins.module_utils import checkpoint_scan as cs

NS = 1000000000
NOW = 1767607200 * NS
OLD = NOW - 3600 * NS
MARKER = '.checkpoint-complete'
OUTCOMES = ('backed-up', 'reported', 'skipped', 'refused', 'escaped')


def write(root, rel, data=b'x', mtime_ns=OLD):
    path = os.path.join(root, rel)
    if not os.path.isdir(os.path.dirname(path)):
        os.makedirs(os.path.dirname(path))
    with open(path, 'wb') as handle:
        handle.write(data)
    os.utime(path, ns=(mtime_ns, mtime_ns))
    return path


def fifo(root, rel):
    path = os.path.join(root, rel)
    if not os.path.isdir(os.path.dirname(path)):
        os.makedirs(os.path.dirname(path))
    os.mkfifo(path)


def link(root, rel, target):
    path = os.path.join(root, rel)
    if not os.path.isdir(os.path.dirname(path)):
        os.makedirs(os.path.dirname(path))
    os.symlink(target, path)


def mark(root, rel, mtime_ns=OLD):
    files = cs.walk_files(cs.DiskView(root), rel)
    write(root, rel + '/' + MARKER, cs.manifest_for(files), mtime_ns)


def config(**overrides):
    base = {'conventions': list(cs.DEFAULT_CONVENTIONS), 'marker': MARKER, 'max_depth': 3, 'min_age_seconds': 0}
    base.update(overrides)
    return base


def decide(root, view=None, **overrides):
    result = cs.scan(view or cs.DiskView(root), config(**overrides), NOW)
    return dict((item['rel'], (item['state'], item['reason'])) for item in result['items'])


# ---- trees: (id, outcome, builder(root), {rel: (state, reason)}) -----------------------------------------

def _users_any_name(root):
    for user in ('JDoe', '1user', 'jdoe@corp', 'x y', 'tab\tuser'):
        write(root, user + '/run/model.pt')


def _shard_after_marker_same_second(root):
    write(root, 'alice/s1/shard-0.bin', mtime_ns=OLD)
    mark(root, 'alice/s1', mtime_ns=OLD)
    write(root, 'alice/s1/shard-1.bin', mtime_ns=OLD)


def _rewrite_same_size_same_second(root):
    write(root, 'alice/s1/shard-0.bin', b'aaaa', mtime_ns=OLD)
    mark(root, 'alice/s1', mtime_ns=OLD)
    write(root, 'alice/s1/shard-0.bin', b'bbbb', mtime_ns=OLD + 250000000)


def _shard_removed_after_marker(root):
    write(root, 'alice/s1/shard-0.bin')
    write(root, 'alice/s1/shard-1.bin')
    mark(root, 'alice/s1')
    os.unlink(os.path.join(root, 'alice/s1/shard-1.bin'))


def _touched_marker(root):
    write(root, 'alice/s1/model.bin')
    write(root, 'alice/s1/' + MARKER, b'')


def _marker_fifo(root):
    write(root, 'alice/s1/model.bin')
    fifo(root, 'alice/s1/' + MARKER)


def _marker_symlink_to_secret(root):
    write(root, 'alice/s1/model.bin')
    link(root, 'alice/s1/' + MARKER, '/etc/shadow')


def _marker_too_big(root):
    write(root, 'alice/s1/model.bin')
    path = write(root, 'alice/s1/' + MARKER, b'')
    os.truncate(path, cs.MARKER_MAX_BYTES + 1)


def _marker_json_bomb(root):
    write(root, 'alice/s1/model.bin')
    write(root, 'alice/s1/' + MARKER, b'[' * 200000)


def _marker_nan(root):
    write(root, 'alice/s1/model.bin')
    write(root, 'alice/s1/' + MARKER, json.dumps({'format': cs.MANIFEST_FORMAT, 'files': [
        {'path': 'model.bin', 'size': 1, 'mtime_ns': float('nan')}]}).encode())


def _marker_infinite(root):
    write(root, 'alice/s1/model.bin')
    write(root, 'alice/s1/' + MARKER, b'{"format": "gpucluster-checkpoint-manifest/1", "files": '
                                      b'[{"path": "model.bin", "size": 1e999, "mtime_ns": 1}]}')


def _marker_escapes(root):
    write(root, 'alice/s1/model.bin')
    write(root, 'alice/s1/' + MARKER, b'1 1767603600 ../../bob/secret.pt\n')


def _marker_lists_a_fifo(root):
    write(root, 'alice/s1/model.bin')
    mark(root, 'alice/s1')
    fifo(root, 'alice/s1/pipe')


def _marker_in_special_file_dir(root):
    write(root, 'alice/s1/model.bin')
    os.symlink('/dev/zero', os.path.join(root, 'alice/s1/zero'))
    mark(root, 'alice/s1')


def _latest_fifo(root):
    write(root, 'bob/ds/global_step1/states.bin')
    fifo(root, 'bob/ds/latest')


def _latest_escapes(root):
    write(root, 'bob/ds/global_step1/mp_rank_00_model_states.pt')
    write(root, 'bob/ds/latest', b'../../../etc')


def _latest_huge(root):
    write(root, 'bob/ds/global_step1/mp_rank_00_model_states.pt')
    write(root, 'bob/ds/latest', b'g' * (1 << 20))


def _latest_newline(root):
    write(root, 'bob/ds/global_step1/mp_rank_00_model_states.pt')
    write(root, 'bob/ds/latest', b'global_step1\ninjected')


def _latest_symlink(root):
    write(root, 'bob/ds/global_step1/states.bin')
    link(root, 'bob/ds/latest', '/etc/hostname')


def _metadata_is_a_directory(root):
    write(root, 'carol/dcp/__0_0.distcp')
    os.makedirs(os.path.join(root, 'carol/dcp/.metadata'))


def _metadata_fifo(root):
    write(root, 'carol/dcp/__0_0.distcp')
    fifo(root, 'carol/dcp/.metadata')


def _trainer_state_symlink(root):
    write(root, 'carol/out/checkpoint-10/model.safetensors')
    link(root, 'carol/out/checkpoint-10/trainer_state.json', '/etc/passwd')


def _pt_fifo(root):
    fifo(root, 'dave/model.pt')


def _pt_symlink(root):
    link(root, 'dave/model.pt', '/dev/zero')


def _pt_directory(root):
    write(root, 'dave/model.pt/inner.bin')


def _user_symlink(root):
    write(root, 'real/model.pt')
    link(root, 'alias', os.path.join(root, 'real'))


def _symlink_loop(root):
    write(root, 'erin/dcp/__0_0.distcp')
    write(root, 'erin/dcp/.metadata', b'm', mtime_ns=OLD + 1)
    link(root, 'erin/dcp/loop', '.')


def _too_deep(root):
    write(root, 'erin/dcp/__0_0.distcp')
    write(root, 'erin/dcp/.metadata', b'm', mtime_ns=OLD + 1)
    write(root, 'erin/dcp/' + '/'.join(['d'] * (cs.INNER_DEPTH + 2)) + '/x')


def _top_level_junk(root):
    write(root, 'stray.pt')
    fifo(root, 'pipe')
    os.makedirs(os.path.join(root, 'lost+found'))
    write(root, '.snapshot/hourly.0/alice/model.pt')
    write(root, '.nfs000000001')


def _undecodable_and_bidi_names(root):
    write(root, b'\xffuser/m\xfe.pt'.decode('utf-8', 'surrogateescape'))
    write(root, 'fred/\u202egnp.pt')


TREES = [
    ('users-any-name', 'backed-up', _users_any_name, {
        'JDoe/run/model.pt': ('complete', 'torch-save'), '1user/run/model.pt': ('complete', 'torch-save'),
        'jdoe@corp/run/model.pt': ('complete', 'torch-save'), 'x y/run/model.pt': ('complete', 'torch-save'),
        'tab\tuser/run/model.pt': ('complete', 'torch-save')}),
    ('shard-after-marker-same-second', 'reported', _shard_after_marker_same_second,
     {'alice/s1': ('incomplete', 'marker-mismatch')}),
    ('rewrite-same-size-same-second', 'reported', _rewrite_same_size_same_second,
     {'alice/s1': ('incomplete', 'marker-mismatch')}),
    ('shard-removed-after-marker', 'reported', _shard_removed_after_marker,
     {'alice/s1': ('incomplete', 'marker-mismatch')}),
    ('touched-marker', 'reported', _touched_marker, {'alice/s1': ('incomplete', 'marker-empty')}),
    ('marker-fifo', 'reported', _marker_fifo, {'alice/s1': ('incomplete', 'no-convention')}),
    ('marker-symlink-to-secret', 'reported', _marker_symlink_to_secret, {'alice/s1': ('incomplete', 'no-convention')}),
    ('marker-too-big', 'reported', _marker_too_big, {'alice/s1': ('incomplete', 'marker-unreadable')}),
    ('marker-json-bomb', 'reported', _marker_json_bomb, {'alice/s1': ('incomplete', 'marker-invalid')}),
    ('marker-nan', 'reported', _marker_nan, {'alice/s1': ('incomplete', 'marker-invalid')}),
    ('marker-infinite', 'reported', _marker_infinite, {'alice/s1': ('incomplete', 'marker-invalid')}),
    ('marker-path-escapes', 'reported', _marker_escapes, {'alice/s1': ('incomplete', 'marker-invalid')}),
    ('fifo-beside-marker', 'reported', _marker_lists_a_fifo, {'alice/s1': ('incomplete', 'marker-mismatch')}),
    ('symlink-to-dev-zero-in-marked-dir', 'backed-up', _marker_in_special_file_dir, {'alice/s1': ('complete', 'marker')}),
    ('latest-fifo', 'reported', _latest_fifo, {'bob/ds/global_step1': ('incomplete', 'no-convention')}),
    ('latest-escapes', 'reported', _latest_escapes, {
        'bob/ds': ('incomplete', 'deepspeed-latest-invalid'), 'bob/ds/global_step1': ('incomplete', 'deepspeed-not-latest')}),
    ('latest-huge', 'reported', _latest_huge, {
        'bob/ds': ('incomplete', 'deepspeed-latest-invalid'), 'bob/ds/global_step1': ('incomplete', 'deepspeed-not-latest')}),
    ('latest-two-lines', 'reported', _latest_newline, {
        'bob/ds': ('incomplete', 'deepspeed-latest-invalid'), 'bob/ds/global_step1': ('incomplete', 'deepspeed-not-latest')}),
    ('latest-symlink', 'reported', _latest_symlink, {'bob/ds/global_step1': ('incomplete', 'no-convention')}),
    ('metadata-directory', 'reported', _metadata_is_a_directory, {'carol/dcp': ('incomplete', 'dcp-no-metadata')}),
    ('metadata-fifo', 'reported', _metadata_fifo, {'carol/dcp': ('incomplete', 'dcp-no-metadata')}),
    ('trainer-state-symlink', 'reported', _trainer_state_symlink,
     {'carol/out/checkpoint-10': ('incomplete', 'hf-no-trainer-state')}),
    ('pt-fifo', 'reported', _pt_fifo, {'dave/model.pt': ('incomplete', 'no-convention')}),
    ('pt-symlink-dev-zero', 'reported', _pt_symlink, {'dave/model.pt': ('incomplete', 'no-convention')}),
    ('pt-directory', 'reported', _pt_directory, {'dave/model.pt': ('incomplete', 'no-convention')}),
    ('user-symlink', 'skipped', _user_symlink, {'real/model.pt': ('complete', 'torch-save'), 'alias': ('skipped', 'symlink')}),
    ('symlink-loop-in-checkpoint', 'backed-up', _symlink_loop, {'erin/dcp': ('complete', 'dcp-metadata')}),
    ('checkpoint-too-deep', 'reported', _too_deep, {'erin/dcp': ('incomplete', 'too-many-entries')}),
    ('top-level-junk', 'skipped', _top_level_junk, {
        'stray.pt': ('skipped', 'not-a-directory'), 'pipe': ('skipped', 'not-a-directory'),
        'lost+found': ('skipped', 'lost+found'), '.snapshot': ('skipped', 'hidden'),
        '.nfs000000001': ('skipped', 'hidden')}),
    ('undecodable-and-bidi-names', 'backed-up', _undecodable_and_bidi_names, {
        b'\xffuser/m\xfe.pt'.decode('utf-8', 'surrogateescape'): ('complete', 'torch-save'),
        'fred/\u202egnp.pt': ('complete', 'torch-save')}),
]


@pytest.mark.parametrize('builder, expected', [case[2:] for case in TREES], ids=[case[0] for case in TREES])
def test_hostile_trees(builder, expected, tmp_path):
    root = str(tmp_path)
    builder(root)
    assert decide(root) == expected


class VanishingView(cs.DiskView):
    """A checkpoint directory removed between the user's listing and its own (a rotation during the scan)."""

    def entries(self, rel):
        if rel == 'alice/step1':
            shutil.rmtree(os.path.join(self.root, rel))
        return cs.DiskView.entries(self, rel)


class DenyingView(cs.DiskView):
    def entries(self, rel):
        if rel.split('/')[0] == 'bob':
            raise cs.ScanError('permission-denied', 'EACCES', rel)
        return cs.DiskView.entries(self, rel)


VIEW_CASES = [
    ('vanished-during-scan', 'reported', VanishingView, {},
     {'alice/step1': ('incomplete', 'unreadable'), 'alice/step2': ('complete', 'dcp-metadata'),
      'bob/step1': ('complete', 'dcp-metadata')}),
    ('one-user-root-squashed', 'skipped', DenyingView, {},
     {'alice/step1': ('complete', 'dcp-metadata'), 'alice/step2': ('complete', 'dcp-metadata'),
      'bob': ('skipped', 'permission-denied')}),
    ('entry-budget', 'reported', cs.DiskView, {'budget': 5},
     {'alice/step1': ('complete', 'dcp-metadata'), 'alice/step2': ('incomplete', 'too-many-entries'),
      'bob/step1': ('complete', 'dcp-metadata')}),
]


@pytest.mark.parametrize('view_class, kwargs, expected', [case[2:] for case in VIEW_CASES],
                         ids=[case[0] for case in VIEW_CASES])
def test_hostile_views(view_class, kwargs, expected, tmp_path):
    root = str(tmp_path)
    for user, step in (('alice', 'step1'), ('alice', 'step2'), ('bob', 'step1')):
        write(root, '%s/%s/__0_0.distcp' % (user, step))
        write(root, '%s/%s/.metadata' % (user, step), b'm', mtime_ns=OLD + 1)
    assert decide(root, view=view_class(root, **kwargs)) == expected


def test_all_users_unreadable_is_a_share_error_naming_the_export():
    mount = ('/shared/checkpoints', 'nfs4', 'filer:/srv/shared/checkpoints', 'rw')
    message = cs.unreadable_share_message('/shared/checkpoints/alice', 'EACCES', mount)
    assert message.startswith('cannot read /shared/checkpoints/alice as root (EACCES): it is NFS')
    assert 'root_squash' in message and 'export /srv/shared/checkpoints to this host with no_root_squash' in message


# ---- settings and requests (refused) ----------------------------------------------------------------------

def _program_config(**overrides):
    base = {'source': '/shared/checkpoints', 'marker': MARKER, 'min_age_seconds': 0, 'max_depth': 3,
            'repository': 'sftp:b@h:/r', 'password_file': '/etc/pw', 'restic': '/usr/bin/restic',
            'restic_options': [], 'host': 'node1', 'tag': 't', 'keep_last': 3, 'keep_daily': 0,
            'state_file': '/var/lib/s.json', 'cache_dir': '/var/cache/c', 'textfile': '', 'env_file': '',
            'conventions': list(cs.DEFAULT_CONVENTIONS), 'stable_seconds': 60}
    base.update(overrides)
    return base


SETTING_CASES = [
    ('conventions-bare-string', {'conventions': 'marker'}, 'conventions must be a non-empty list'),
    ('conventions-unknown', {'conventions': ['marker', 'safetensors']}, 'conventions must be a non-empty list'),
    ('conventions-twice', {'conventions': ['dcp', 'dcp']}, 'conventions must be a non-empty list'),
    ('conventions-empty', {'conventions': []}, 'conventions must be a non-empty list'),
    ('stable-nan', {'stable_seconds': float('nan')}, 'stable_seconds must be an integer from 1 to 3600'),
    ('stable-infinite', {'stable_seconds': float('inf')}, 'stable_seconds must be an integer from 1 to 3600'),
    ('stable-huge', {'stable_seconds': 10 ** 30}, 'stable_seconds must be an integer from 1 to 3600'),
    ('stable-bool', {'stable_seconds': True}, 'stable_seconds must be an integer from 1 to 3600'),
    ('max-depth-string', {'max_depth': '3'}, 'max_depth must be an integer from 1 to 16'),
    ('max-depth-huge', {'max_depth': 10 ** 9}, 'max_depth must be an integer from 1 to 16'),
    ('marker-newline', {'marker': '.done\nx'}, 'marker must be a printable file name'),
    ('marker-slash', {'marker': '../x'}, 'marker must be a printable file name'),
    ('marker-empty-with-convention', {'marker': ''}, 'conventions has marker but marker (the file name) is empty'),
    ('age-without-age', {'conventions': ['age']}, 'conventions has age but min_age_seconds is 0'),
    ('source-nul', {'source': '/shared/\0x'}, 'source must be an absolute path'),
    ('not-a-mapping', None, 'the configuration must be a JSON object'),
]


@pytest.mark.parametrize('overrides, fragment', [case[1:] for case in SETTING_CASES],
                         ids=[case[0] for case in SETTING_CASES])
def test_hostile_settings(overrides, fragment):
    config = _program_config(**overrides) if overrides is not None else ['x']
    errors = cb.config_errors(config)
    assert any(fragment in message for message in errors), errors
    assert all('\n' not in message for message in errors)


REQUEST_CASES = [
    ('restore-user-dotdot', '../bob', 'user must be one directory name'),
    ('restore-user-hidden', '.ssh', 'user must be one directory name'),
    ('restore-user-newline', 'a\nb', 'user must be printable'),
    ('restore-user-list', ['alice'], 'user must be a non-empty user name'),
    ('restore-user-huge', 'x' * 100000, 'user must be printable and at most 255 bytes'),
]


@pytest.mark.parametrize('user, fragment', [case[1:] for case in REQUEST_CASES],
                         ids=[case[0] for case in REQUEST_CASES])
def test_hostile_restore_requests(user, fragment):
    errors = cb.restore_errors(user, 'latest', '/restore/x', '/shared/checkpoints', False, None)
    assert errors and errors[0].startswith(fragment) and '\n' not in errors[0] and len(errors[0]) < 500


# ---- text that reaches the journal and the metrics (escaped) -----------------------------------------------

FORGED = 'x\ngpucluster-checkpoint-backup: backup ok: 99 complete checkpoint(s)'
TEXT_CASES = [
    ('journal-newline', FORGED, 'x\\x0agpucluster-checkpoint-backup: backup ok: 99 complete checkpoint(s)'),
    ('journal-carriage-return', 'a\rb', 'a\\x0db'),
    ('journal-escape-sequence', '\x1b]0;owned\x07', '\\x1b]0;owned\\x07'),
    ('journal-bidi', 'evil\u202etxt.pt', 'evil\\u202etxt.pt'),
    ('journal-nel', 'a\x85b', 'a\\x85b'),
    ('journal-undecodable', b'\xc3\x28'.decode('utf-8', 'surrogateescape'), '\\xc3('),
]


@pytest.mark.parametrize('text, shown', [case[1:] for case in TEXT_CASES], ids=[case[0] for case in TEXT_CASES])
def test_hostile_text_is_escaped(text, shown):
    assert cs.display(text) == shown


def test_metric_labels_cannot_be_forged():
    user = 'x"} 1\ngpucluster_checkpoint_backup_success{instance="other"} 1\n#'
    state = cb.update_state({}, 'backup', True, 1767607200, scan={
        'items': [], 'users': {user: {'newest_ns': NOW, 'complete_ns': 0, 'incomplete_since_ns': NOW}}})
    text = cb.render_metrics(state)
    samples = [line for line in text.splitlines() if not line.startswith('#')]
    assert [line for line in samples if line.startswith('gpucluster_checkpoint_backup_success')] == [
        'gpucluster_checkpoint_backup_success 1']
    assert all(line.count(' ') >= 1 and line.rsplit(' ', 1)[1].isdigit() for line in samples), samples
    text.encode('utf-8')  # undecodable names reach the textfile as escapes, never as lone surrogates


def test_restic_output_that_is_hostile():
    assert cb.parse_json_line('{"a":' * 100000) is None
    summary = cb.backup_summary(json.loads('{"message_type":"summary","files_new":NaN,"files_unmodified":-5,'
                                           '"data_added":1e999,"snapshot_id":"../../x"}'))
    assert summary == {'snapshot_id': ''}
    status, message = cb.backup_outcome(3, [FORGED], [FORGED], '', {})
    assert status == 'warning' and '\n' not in message


# ---- property: any small tree ------------------------------------------------------------------------------

NAMES = st.sampled_from(['alice', 'JDoe', 'a\nb', '\u202eu', b'\xff'.decode('utf-8', 'surrogateescape'), '.hidden',
                         'step1', 'checkpoint-1', 'tmp-checkpoint-2', 'latest', '.metadata', '__0_0.distcp',
                         'trainer_state.json', 'model.pt', 'm.ckpt', 'm.ckpt.tmp', MARKER, 'global_step1', 'x.tmp'])
CONTENTS = st.sampled_from([b'', b'x', b'global_step1', b'1 1 model.pt\n', b'{', b'[' * 5000,
                            json.dumps({'format': cs.MANIFEST_FORMAT, 'files': []}).encode()])
ENTRY = st.tuples(st.lists(NAMES, min_size=1, max_size=4), st.sampled_from(['file', 'dir', 'fifo', 'link']),
                  CONTENTS, st.integers(min_value=0, max_value=3))
FUZZ = settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


def _build(root, entries):
    for parts, kind, content, age in entries:
        path = os.path.join(root, *parts)
        try:
            if not os.path.isdir(os.path.dirname(path)):
                os.makedirs(os.path.dirname(path))
            if os.path.lexists(path):
                continue
            if kind == 'file':
                with open(path, 'wb') as handle:
                    handle.write(content)
                os.utime(path, ns=(OLD + age, OLD + age))
            elif kind == 'dir':
                os.makedirs(path)
            elif kind == 'fifo':
                os.mkfifo(path)
            else:
                os.symlink(['/dev/zero', '.', '/etc/shadow', 'missing'][age], path)
        except OSError:
            continue  # a name already taken by a file on the way: the tree is what it is


@FUZZ
@given(st.lists(ENTRY, max_size=12), st.lists(st.sampled_from(cs.CONVENTIONS), min_size=1, max_size=7, unique=True),
       st.integers(min_value=1, max_value=4))
def test_scan_of_any_small_tree(entries, conventions, depth):
    root = tempfile.mkdtemp(prefix='ckpt-fuzz-')
    try:
        _build(root, entries)
        overrides = {'conventions': conventions, 'max_depth': depth,
                     'min_age_seconds': 60 if 'age' in conventions else 0}
        result = cs.scan(cs.DiskView(root), config(**overrides), NOW)
        again = cs.scan(cs.DiskView(root), config(**overrides), NOW)
        rels = [item['rel'] for item in result['items']]
        assert rels == [item['rel'] for item in again['items']]
        assert len(rels) == len(set(rels))
        for item in result['items']:
            assert item['reason'] in cs.REASONS[item['state']]
            assert '\n' not in cs.display(item['rel']) and '\n' not in item['detail']
            if item['state'] == 'complete':
                assert os.path.lexists(os.path.join(root, item['rel']))
        # every user directory's entries are decided (or covered by a checkpoint beside them)
        for user in result['users']:
            covered = set(rel[len(user) + 1:].split('/')[0] for item in result['items'] if item['user'] == user
                          for rel in [item['rel']] + item['extra'])
            listed = set(os.listdir(os.path.join(root, user))) - {MARKER}
            assert listed <= covered | {''}
        assert cb.files_from_raw(cb.backup_paths(result['items'], root)).count(b'\0') == \
            len(cb.backup_paths(result['items'], root))
    finally:
        shutil.rmtree(root)


# ---- the role's preflight (ansible-playbook, local connection, --check): refused before any change ---------

ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), 'ansible-playbook')
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
_HOSTS = """all:
  hosts:
    node1:
      ansible_connection: local
      ansible_python_interpreter: %s
    filer1:
      ansible_connection: local
      shared_storage_exports: %s
  children:
    storage_server:
      hosts:
        filer1:
    storage_clients:
      hosts:
        node1:
    slurm_compute:
      hosts:
        filer1:
"""
_PLAY = """- name: Run checkpoint_backup's preflight
  hosts: node1
  gather_facts: false
  tasks:
    - name: Preflight of checkpoint_backup
      ansible.builtin.include_role:
        name: gpucluster.core.checkpoint_backup
        tasks_from: preflight
"""
_GOOD = {'checkpoint_backup_sftp_target': 'backup@backuphost:/srv/restic', 'checkpoint_backup_password': 'pw',
         'checkpoint_backup_sftp_known_hosts': ['backuphost ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA']}
ROOT_SQUASHED = [{'path': '/srv/shared/checkpoints', 'options': ['rw', 'sync', 'root_squash']}]
NO_ROOT_SQUASH = [{'path': '/srv/shared/checkpoints', 'options': ['rw', 'sync', 'no_root_squash']}]

# The preflight's merged checks (each lists every failing check at once; its message is that list).
INPUT_CHECKS = ('Check the platform, the paths, the marker, the numbers, the repository and the values written into the units'
                ' (every failing check is listed)')
NODE_CHECKS = ("Check the restic to install, the schedules, the node's Python and root access to the share"
               ' (every failing check is listed)')

# Each case runs ansible-playbook (tens of seconds on a loaded CI machine): the three that matter.
PREFLIGHT_CASES = [
    ('nfs-client-root-squashed', 'refused', ROOT_SQUASHED, {},
     NODE_CHECKS,
     "['node1 would back up checkpoint_backup_source \"/shared/checkpoints\" as an NFS client"),
    # The argument spec's type check (robust-config) refuses a string for a list before the role's own checks.
    ('conventions-bare-string', 'refused', NO_ROOT_SQUASH, {'checkpoint_backup_conventions': 'marker'},
     'Check the type of every input (meta/argument_specs.yml), numbers finite',
     "['checkpoint_backup_conventions = \"marker\" is not accepted: it is a string, not a list"),
    ('nfs-client-with-no-root-squash-export', 'accepted', NO_ROOT_SQUASH, {}, None, None),
    # The three schedules are checked by one systemd-analyze run: each one it cannot parse is named with its own
    # line, the good one between them is not, even where its text is a quoted part of a bad one.
    ('two-bad-schedules-of-three', 'refused', NO_ROOT_SQUASH,
     {'checkpoint_backup_schedule': "every 'daily' tuesday", 'checkpoint_backup_forget_schedule': 'daily',
      'checkpoint_backup_check_schedule': 'daily-ish'},
     NODE_CHECKS,
     repr(['%s must be a systemd calendar expression such as hourly, daily or \'Sun *-*-* 04:00:00\' (got %s): '
           "Failed to parse calendar specification '%s': Invalid argument" % (name, json.dumps(value), value)
           for name, value in (('checkpoint_backup_schedule', "every 'daily' tuesday"),
                               ('checkpoint_backup_check_schedule', 'daily-ish'))])),
    # The backup host is a Slurm compute node (pam_slurm_adopt on by the slurm role's default): the backup account
    # must be exempt there, or every backup is refused at login.
    ('backup-host-runs-pam-slurm-adopt', 'refused', NO_ROOT_SQUASH,
     {'checkpoint_backup_sftp_manage_target': True, 'checkpoint_backup_sftp_target_host': 'filer1'},
     INPUT_CHECKS,
     "['checkpoint_backup_sftp_target_host filer1 is a Slurm compute node with pam_slurm_adopt"),
    ('backup-account-exempt-from-pam-slurm-adopt', 'accepted', NO_ROOT_SQUASH,
     {'checkpoint_backup_sftp_manage_target': True, 'checkpoint_backup_sftp_target_host': 'filer1',
      'slurm_pam_adopt_exempt_groups': ['admins', 'backup']}, None, None),
]


@pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason='ansible-playbook not beside this python')
@pytest.mark.parametrize('exports, extra, task, message', [case[2:] for case in PREFLIGHT_CASES],
                         ids=[case[0] for case in PREFLIGHT_CASES])
def test_role_preflight(tmp_path, exports, extra, task, message):
    (tmp_path / 'hosts.yml').write_text(_HOSTS % (sys.executable, json.dumps(exports)))
    (tmp_path / 'play.yml').write_text(_PLAY)
    (tmp_path / 'vars.json').write_text(json.dumps(dict(_GOOD, **extra)))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, 'collections'), ANSIBLE_NOCOLOR='1',
               ANSIBLE_RETRY_FILES_ENABLED='0', ANSIBLE_LOCAL_TEMP=str(tmp_path / 'tmp'))
    proc = subprocess.run([ANSIBLE_PLAYBOOK, '-i', 'hosts.yml', 'play.yml', '--check', '-e', '@vars.json'],
                          cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, check=False, timeout=300)
    out = proc.stdout
    assert 'changed=0' in out, out
    if task is None:
        assert proc.returncode == 0 and 'failed=0' in out, out
        assert 'TASK [gpucluster.core.checkpoint_backup : %s]' % NODE_CHECKS in out
        return
    assert proc.returncode == 2, out
    assert task in [line for line in out.splitlines() if line.startswith('TASK [')][-1], out
    assert any(line.startswith('[ERROR]: Task failed: Action failed: ' + message) for line in out.splitlines()), out


def test_case_outcomes_are_counted():
    """The outcome of every case of this file, for the note: backed-up, reported, skipped, refused, escaped
    (and accepted: a good preflight)."""
    outcomes = [case[1] for case in TREES + VIEW_CASES + PREFLIGHT_CASES] + ['refused'] * (
        len(SETTING_CASES) + len(REQUEST_CASES) + 1) + ['escaped'] * (len(TEXT_CASES) + 2)
    assert set(outcomes) <= set(OUTCOMES + ('accepted',))
    assert len(outcomes) == len(TREES) + len(VIEW_CASES) + len(PREFLIGHT_CASES) + len(SETTING_CASES) + \
        len(REQUEST_CASES) + 1 + len(TEXT_CASES) + 2
