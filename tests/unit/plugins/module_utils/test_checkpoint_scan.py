# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The completeness conventions of checkpoint_scan.py, each on small trees written in tmp_path as the
training code writes them, complete and half-written."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import re

import pytest

from ansible_collections.gpucluster.core.plugins.module_utils import checkpoint_scan as cs

NS = 1000000000
NOW = 1767607200 * NS
OLD = NOW - 3600 * NS


def write(root, rel, data=b'x', mtime_ns=OLD):
    path = os.path.join(str(root), rel)
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        os.makedirs(directory)
    with open(path, 'wb') as handle:
        handle.write(data)
    os.utime(path, ns=(mtime_ns, mtime_ns))
    return path


def config(**overrides):
    base = {'conventions': list(cs.DEFAULT_CONVENTIONS), 'marker': '.checkpoint-complete', 'max_depth': 3,
            'min_age_seconds': 0}
    base.update(overrides)
    return base


def decide(root, **overrides):
    """{rel: (state, reason)} of a scan of ROOT."""
    result = cs.scan(cs.DiskView(str(root)), config(**overrides), NOW)
    return dict((item['rel'], (item['state'], item['reason'])) for item in result['items'])


def mark(root, rel, marker='.checkpoint-complete', mtime_ns=OLD):
    """Write the project's marker listing the directory as it is now (what a job does as its last step)."""
    files = cs.walk_files(cs.DiskView(str(root)), rel)
    return write(root, rel + '/' + marker, cs.manifest_for(files), mtime_ns)


# ---- each convention: complete, and the ways it is not --------------------------------------------------

def test_marker_lists_the_files_and_decides_from_them(tmp_path):
    write(tmp_path, 'alice/run1/step100/model.pt', b'weights')
    write(tmp_path, 'alice/run1/step100/shards/optim-0.pt', b'optim')
    mark(tmp_path, 'alice/run1/step100')
    write(tmp_path, 'alice/run1/step200/model.pt', b'weights')
    mark(tmp_path, 'alice/run1/step200')
    # a shard written after the marker, within the same second (the marker is OLD too): not listed
    write(tmp_path, 'alice/run1/step200/shards/optim-1.pt', b'late', mtime_ns=OLD)
    write(tmp_path, 'alice/run1/step300/model.pt', b'weights')
    mark(tmp_path, 'alice/run1/step300')
    # rewritten after the marker with the same size, 1 ns later
    write(tmp_path, 'alice/run1/step300/model.pt', b'WEIGHTS', mtime_ns=OLD + 1)
    write(tmp_path, 'alice/run1/step400/model.pt', b'weights')
    write(tmp_path, 'alice/run1/step400/.checkpoint-complete', b'')
    # killed before its marker: reported, not left out silently beside the complete ones
    write(tmp_path, 'alice/run1/step500/model.bin', b'weights')
    assert decide(tmp_path) == {
        'alice/run1/step500': ('incomplete', 'no-convention'),
        'alice/run1/step100': ('complete', 'marker'),
        'alice/run1/step200': ('incomplete', 'marker-mismatch'),
        'alice/run1/step300': ('incomplete', 'marker-mismatch'),
        'alice/run1/step400': ('incomplete', 'marker-empty'),
    }


@pytest.mark.parametrize('content, listed', [
    (b'7 1767603600.1234567890 model.pt\n5 1767603600 ./shards/optim-0.pt\n',
     {'model.pt': (7, 1767603600123456789, 9), 'shards/optim-0.pt': (5, 1767603600, 0)}),
    (b'3 1767603600.5 a b.pt\n', {'a b.pt': (3, 17676036005, 1)}),
    (json.dumps({'format': cs.MANIFEST_FORMAT, 'files': [{'path': 'm.pt', 'size': 1, 'mtime_ns': 5}]}).encode(),
     {'m.pt': (1, 5, 9)}),
])
def test_parse_manifest_forms(content, listed):
    assert cs.parse_manifest(content) == listed


@pytest.mark.parametrize('content, message', [
    (b'', 'empty'),
    (b'\n  \n', 'empty'),
    (b'{"files": []}', 'JSON without "format"'),
    (b'{"format": "gpucluster-checkpoint-manifest/1", "files": [{"path": "../x", "size": 1, "mtime_ns": 1}]}',
     'not relative'),
    (b'{"format": "gpucluster-checkpoint-manifest/1", "files": [{"path": "x", "size": true, "mtime_ns": 1}]}',
     'size of x is not an integer'),
    (b'{"format": "gpucluster-checkpoint-manifest/1", "files": [{"path": "x", "size": 1, "mtime_ns": -1}]}',
     'mtime_ns of x'),
    (b'{"format": "gpucluster-checkpoint-manifest/1", "files": ["x"]}', 'not an object'),
    (b'{not json', 'not valid JSON'),
    (b'7 1767603600 /etc/passwd\n', 'line 1: the path is not relative'),
    (b'7 NaN model.pt\n', 'mtime NaN is not SECONDS'),
    (b'7 1e9 model.pt\n', 'mtime 1e9 is not SECONDS'),
    (b'seven 1 model.pt\n', 'line 1 is not "SIZE'),
    ('\u0663 1 model.pt\n'.encode(), 'line 1 is not "SIZE'),
    (b'1 1 a\n1 1 ./a\n', 'a is listed twice'),
])
def test_parse_manifest_refusals(content, message):
    with pytest.raises(ValueError) as raised:
        cs.parse_manifest(content)
    assert message in str(raised.value)


def test_dcp_metadata_written_last(tmp_path):
    for step in ('100', '200', '300'):
        write(tmp_path, 'alice/dcp/step%s/__0_0.distcp' % step)
        write(tmp_path, 'alice/dcp/step%s/__1_0.distcp' % step)
    write(tmp_path, 'alice/dcp/step100/.metadata', b'pickled', mtime_ns=OLD + 5)
    # killed before .metadata: the shards only
    # step300: a save writing over a finished one (a shard newer than .metadata)
    write(tmp_path, 'alice/dcp/step300/.metadata', b'pickled', mtime_ns=OLD)
    write(tmp_path, 'alice/dcp/step300/__1_0.distcp', mtime_ns=OLD + 1)
    write(tmp_path, 'alice/dcp/step400/.metadata', b'')
    assert decide(tmp_path) == {
        'alice/dcp/step100': ('complete', 'dcp-metadata'),
        'alice/dcp/step200': ('incomplete', 'dcp-no-metadata'),
        'alice/dcp/step300': ('incomplete', 'dcp-shard-newer'),
        'alice/dcp/step400': ('incomplete', 'dcp-no-metadata'),
    }


def test_deepspeed_latest_names_the_finished_tag(tmp_path):
    write(tmp_path, 'bob/ds/global_step10/mp_rank_00_model_states.pt')
    write(tmp_path, 'bob/ds/global_step20/mp_rank_00_model_states.pt')
    write(tmp_path, 'bob/ds/latest', b'global_step20\n', mtime_ns=OLD + 10)
    write(tmp_path, 'bob/ds/zero_to_fp32.py', b'# script')
    result = cs.scan(cs.DiskView(str(tmp_path)), config(), NOW)
    found = dict((item['rel'], item) for item in result['items'])
    assert (found['bob/ds/global_step20']['state'], found['bob/ds/global_step20']['reason']) == \
        ('complete', 'deepspeed-latest')
    assert found['bob/ds/global_step20']['extra'] == ['bob/ds/latest', 'bob/ds/zero_to_fp32.py']
    assert found['bob/ds/global_step20']['look'] is True
    assert found['bob/ds/global_step10']['reason'] == 'deepspeed-not-latest'
    assert 'bob/ds/latest' not in found and 'bob/ds' not in found


@pytest.mark.parametrize('latest, expected', [
    (b'global_step30', {'bob/ds/global_step30': ('incomplete', 'deepspeed-latest-missing'),
                        'bob/ds/global_step10': ('incomplete', 'deepspeed-not-latest')}),
    (b'', {'bob/ds': ('incomplete', 'deepspeed-latest-invalid'),
           'bob/ds/global_step10': ('incomplete', 'deepspeed-not-latest')}),
    (b'../../etc', {'bob/ds': ('incomplete', 'deepspeed-latest-invalid'),
                    'bob/ds/global_step10': ('incomplete', 'deepspeed-not-latest')}),
    (b'x' * 5000, {'bob/ds': ('incomplete', 'deepspeed-latest-invalid'),
                   'bob/ds/global_step10': ('incomplete', 'deepspeed-not-latest')}),
])
def test_deepspeed_latest_that_names_no_finished_tag(tmp_path, latest, expected):
    write(tmp_path, 'bob/ds/global_step10/mp_rank_00_model_states.pt')
    write(tmp_path, 'bob/ds/latest', latest)
    assert decide(tmp_path) == expected


def test_a_latest_file_that_is_not_deepspeeds(tmp_path):
    """A user's own `latest` pointer beside runs that are not DeepSpeed's: the runs are decided as usual."""
    write(tmp_path, 'hana/latest', b'run2')
    write(tmp_path, 'hana/run1/checkpoint-5/trainer_state.json', b'{}')
    write(tmp_path, 'hana/run2/model.pt')
    write(tmp_path, 'hana/ds/global_step3/mp_rank_00_model_states.pt')
    write(tmp_path, 'hana/ds/latest', b'global_step3')
    write(tmp_path, 'hana/ds/logs/events.txt')
    assert decide(tmp_path) == {
        'hana/run1/checkpoint-5': ('complete', 'hf-trainer-state'), 'hana/run2/model.pt': ('complete', 'torch-save'),
        'hana/ds/global_step3': ('complete', 'deepspeed-latest'), 'hana/ds/logs': ('incomplete', 'no-convention'),
        'hana/latest': ('incomplete', 'no-convention')}


def test_deepspeed_rank_writing_after_latest(tmp_path):
    write(tmp_path, 'bob/ds/global_step10/mp_rank_00_model_states.pt')
    write(tmp_path, 'bob/ds/latest', b'global_step10', mtime_ns=OLD)
    write(tmp_path, 'bob/ds/global_step10/zero_pp_rank_1_mp_rank_00_optim_states.pt', mtime_ns=OLD + 1)
    assert decide(tmp_path) == {'bob/ds/global_step10': ('incomplete', 'deepspeed-written-after-latest')}


def test_hf_trainer_checkpoints(tmp_path):
    write(tmp_path, 'carol/out/checkpoint-500/model.safetensors')
    write(tmp_path, 'carol/out/checkpoint-500/trainer_state.json', b'{"global_step": 500}')
    write(tmp_path, 'carol/out/checkpoint-1000/model.safetensors')
    write(tmp_path, 'carol/out/checkpoint-1500/trainer_state.json', b'')
    write(tmp_path, 'carol/out/tmp-checkpoint-2000/model.safetensors')
    write(tmp_path, 'carol/out/runs/events.out.tfevents')
    assert decide(tmp_path) == {
        'carol/out/checkpoint-500': ('complete', 'hf-trainer-state'),
        'carol/out/checkpoint-1000': ('incomplete', 'hf-no-trainer-state'),
        'carol/out/checkpoint-1500': ('incomplete', 'hf-no-trainer-state'),
        'carol/out/tmp-checkpoint-2000': ('incomplete', 'hf-staging'),
        'carol/out/runs': ('incomplete', 'no-convention'),
    }


def test_lightning_and_torch_save_files(tmp_path):
    write(tmp_path, 'dave/lit/epoch=3-step=300.ckpt')
    write(tmp_path, 'dave/lit/epoch=4-step=400.ckpt.tmp')
    write(tmp_path, 'dave/lit/.epoch=5.ckpt.partial')
    write(tmp_path, 'dave/plain/model_100.pt')
    write(tmp_path, 'dave/plain/model_200.pth.tmp')
    write(tmp_path, 'dave/plain/notes.txt')
    write(tmp_path, 'dave/stage.tmp/model.pt')
    assert decide(tmp_path) == {
        'dave/lit/epoch=3-step=300.ckpt': ('complete', 'lightning-ckpt'),
        'dave/lit/epoch=4-step=400.ckpt.tmp': ('incomplete', 'temporary-file'),
        'dave/lit/.epoch=5.ckpt.partial': ('incomplete', 'temporary-file'),
        'dave/plain/model_100.pt': ('complete', 'torch-save'),
        'dave/plain/model_200.pth.tmp': ('incomplete', 'temporary-file'),
        'dave/stage.tmp': ('incomplete', 'temporary-file'),
    }


def test_torch_save_file_still_growing_fails_the_second_look(tmp_path):
    path = write(tmp_path, 'erin/model.pt', b'a' * 10)
    view = cs.DiskView(str(tmp_path))
    item = cs.scan(view, config(), NOW)['items'][0]
    assert cs.needs_second_look(item, {})
    with open(path, 'ab') as handle:
        handle.write(b'b' * 10)
    cs.second_look(item, cs.look_again(view, item))
    assert (item['state'], item['reason']) == ('incomplete', 'still-changing')
    item = cs.scan(view, config(), NOW)['items'][0]
    cs.second_look(item, cs.look_again(view, item))
    assert (item['state'], item['reason']) == ('complete', 'torch-save')
    # backed up with this fingerprint by the previous run: no second look, no wait
    assert not cs.needs_second_look(item, {'erin/model.pt': item['fingerprint']})
    os.unlink(path)
    cs.second_look(item, cs.look_again(view, item))
    assert (item['state'], item['reason']) == ('incomplete', 'still-changing')


def test_second_look_sees_a_rewrite_that_keeps_size_and_mtime(tmp_path):
    """A file replaced by rename keeps nothing but its name: the inode and ctime differ."""
    path = write(tmp_path, 'erin/run/checkpoint-7/trainer_state.json', b'{}')
    view = cs.DiskView(str(tmp_path))
    item = cs.scan(view, config(), NOW)['items'][0]
    write(tmp_path, 'erin/run/checkpoint-7/new', b'{}')
    os.rename(path[:-len('trainer_state.json')] + 'new', path)
    os.utime(path, ns=(OLD, OLD))
    cs.second_look(item, cs.look_again(view, item))
    assert item['reason'] == 'still-changing'


def test_which_conventions_apply_is_a_setting(tmp_path):
    write(tmp_path, 'f/model.pt')
    write(tmp_path, 'f/dcp/__0_0.distcp')
    write(tmp_path, 'f/dcp/.metadata', b'm')
    write(tmp_path, 'f/m/x.bin')
    mark(tmp_path, 'f/m')
    assert decide(tmp_path, conventions=['marker']) == {
        'f/dcp': ('incomplete', 'no-convention'), 'f/m': ('complete', 'marker'),
        'f/model.pt': ('incomplete', 'no-convention')}
    assert decide(tmp_path, conventions=['dcp', 'torch_save']) == {
        'f/dcp': ('complete', 'dcp-metadata'), 'f/m': ('incomplete', 'no-convention'),
        'f/model.pt': ('complete', 'torch-save')}


def test_age_convention_and_min_age(tmp_path):
    write(tmp_path, 'g/old/a.bin', mtime_ns=NOW - 7200 * NS)
    os.utime(os.path.join(str(tmp_path), 'g', 'old'), ns=(NOW - 7200 * NS, NOW - 7200 * NS))
    write(tmp_path, 'g/busy/a.bin', mtime_ns=NOW - 5 * NS)
    assert decide(tmp_path, conventions=['age'], min_age_seconds=3600) == {
        'g/old': ('complete', 'age'), 'g/busy': ('incomplete', 'age-too-young')}
    write(tmp_path, 'h/fresh.pt', mtime_ns=NOW - 5 * NS)
    assert decide(tmp_path, min_age_seconds=60)['h/fresh.pt'] == ('incomplete', 'too-young')


def test_max_depth(tmp_path):
    write(tmp_path, 'i/a/b/c/step/__0_0.distcp')
    write(tmp_path, 'i/a/b/c/step/.metadata', b'm')
    assert decide(tmp_path, max_depth=3) == {'i/a/b/c': ('incomplete', 'no-convention')}
    assert decide(tmp_path, max_depth=1) == {'i/a': ('incomplete', 'no-convention')}
    assert decide(tmp_path, max_depth=4) == {'i/a/b/c/step': ('complete', 'dcp-metadata')}


# ---- the share and its users ------------------------------------------------------------------------------

def test_user_directories_any_name_and_skips_named(tmp_path):
    for user in ('JDoe', '1user', 'jdoe@corp', 'née'):
        write(tmp_path, user + '/model.pt')
    write(tmp_path, '.snapshot/x/model.pt')
    write(tmp_path, 'stray-file.pt')
    os.makedirs(os.path.join(str(tmp_path), 'lost+found'))
    os.symlink('/etc', os.path.join(str(tmp_path), 'elsewhere'))
    assert decide(tmp_path) == {
        'JDoe/model.pt': ('complete', 'torch-save'), '1user/model.pt': ('complete', 'torch-save'),
        'jdoe@corp/model.pt': ('complete', 'torch-save'), 'née/model.pt': ('complete', 'torch-save'),
        '.snapshot': ('skipped', 'hidden'), 'stray-file.pt': ('skipped', 'not-a-directory'),
        'lost+found': ('skipped', 'lost+found'), 'elsewhere': ('skipped', 'symlink')}


@pytest.mark.skipif(os.geteuid() == 0, reason='root reads a 0700 directory on a local file system')
def test_one_unreadable_user_is_reported_and_the_rest_scanned(tmp_path):
    write(tmp_path, 'alice/model.pt')
    write(tmp_path, 'bob/model.pt')
    os.chmod(os.path.join(str(tmp_path), 'bob'), 0)
    try:
        result = cs.scan(cs.DiskView(str(tmp_path)), config(), NOW)
    finally:
        os.chmod(os.path.join(str(tmp_path), 'bob'), 0o700)
    assert [(i['rel'], i['state'], i['reason']) for i in result['items']] == [
        ('alice/model.pt', 'complete', 'torch-save'), ('bob', 'skipped', 'permission-denied')]
    assert (result['readable_users'], result['unreadable_users']) == (1, 1)


class DenyingView(cs.DiskView):
    """The view a root-squashed NFS client has of users' 0700 directories (root is nobody there)."""

    def __init__(self, root, denied):
        cs.DiskView.__init__(self, root)
        self.denied = denied

    def entries(self, rel):
        if rel.split('/')[0] in self.denied or (rel == '' and '' in self.denied):
            raise cs.ScanError('permission-denied', 'EACCES', rel)
        return cs.DiskView.entries(self, rel)


def test_denied_users_are_skipped_by_reason(tmp_path):
    write(tmp_path, 'alice/model.pt')
    write(tmp_path, 'bob/model.pt')
    result = cs.scan(DenyingView(str(tmp_path), ['bob']), config(), NOW)
    assert [(i['rel'], i['state'], i['reason']) for i in result['items']] == [
        ('alice/model.pt', 'complete', 'torch-save'), ('bob', 'skipped', 'permission-denied')]
    with pytest.raises(cs.ScanError):
        cs.scan(DenyingView(str(tmp_path), ['']), config(), NOW)


def test_per_user_figures_for_the_stale_alert(tmp_path):
    write(tmp_path, 'alice/a/step1/model.pt', mtime_ns=NOW - 10 * 3600 * NS)
    mark(tmp_path, 'alice/a/step1', mtime_ns=NOW - 10 * 3600 * NS)
    write(tmp_path, 'alice/a/step2/model.bin', mtime_ns=NOW - 8 * 3600 * NS)
    write(tmp_path, 'alice/a/step2/model2.bin', mtime_ns=NOW - 600 * NS)
    write(tmp_path, 'bob/logs.txt', mtime_ns=NOW - 60 * NS)
    write(tmp_path, 'carol/old.bin', mtime_ns=NOW - 9 * 3600 * NS)
    write(tmp_path, 'carol/model.pt', mtime_ns=NOW - 60 * NS)
    result = cs.scan(cs.DiskView(str(tmp_path)), config(), NOW)
    figures = dict((user, dict((k, v) for k, v in found.items() if k != 'mtimes'))
                   for user, found in result['users'].items())
    assert figures['alice'] == {'newest_ns': NOW - 600 * NS, 'complete_ns': NOW - 10 * 3600 * NS,
                                'incomplete_since_ns': NOW - 8 * 3600 * NS}
    assert figures['bob'] == {'newest_ns': NOW - 60 * NS, 'complete_ns': 0, 'incomplete_since_ns': NOW - 60 * NS}
    # carol's torch.save file is complete at the first look; still growing at the second, it is not, and her
    # figures say so
    assert figures['carol'] == {'newest_ns': NOW - 60 * NS, 'complete_ns': NOW - 60 * NS, 'incomplete_since_ns': 0}
    item = [i for i in result['items'] if i['rel'] == 'carol/model.pt'][0]
    cs.second_look(item, None)
    carol = cs.refresh_user_figures(result)['users']['carol']
    assert (carol['complete_ns'], carol['incomplete_since_ns']) == (0, NOW - 9 * 3600 * NS)


def test_counts_and_fingerprint():
    items = [{'state': 'complete', 'reason': 'marker'}, {'state': 'complete', 'reason': 'marker'},
             {'state': 'skipped', 'reason': 'hidden'}]
    assert cs.counts(items) == {('complete', 'marker'): 2, ('skipped', 'hidden'): 1}
    a = {'x': cs.Stat('file', 1, 2, 3, 4)}
    assert cs.fingerprint(a) == cs.fingerprint({'x': cs.Stat('file', 1, 2, 3, 4)})
    for changed in (cs.Stat('file', 2, 2, 3, 4), cs.Stat('file', 1, 3, 3, 4), cs.Stat('file', 1, 2, 4, 4),
                    cs.Stat('file', 1, 2, 3, 5)):
        assert cs.fingerprint({'x': changed}) != cs.fingerprint(a)


def test_every_reason_is_declared():
    """The reasons the scan gives are the metric's label values: all declared, none twice."""
    declared = [reason for state in cs.STATES for reason in cs.REASONS[state]]
    assert len(declared) == len(set((s, r) for s in cs.STATES for r in cs.REASONS[s]))
    with open(cs.__file__) as handle:
        source = handle.read()
    used = set(re.findall(r"'(complete|incomplete|skipped)', '([a-z0-9+-]+)'", source))
    used = set((state, reason) for state, reason in used if reason not in cs.STATES)
    assert len(used) > 20
    assert [pair for pair in used if pair[1] not in cs.REASONS[pair[0]]] == []


# ---- journal and label text, the share's mount ------------------------------------------------------------

@pytest.mark.parametrize('text, shown', [
    ('alice', 'alice'),
    ('jdoe@corp', 'jdoe@corp'),
    ('née', 'née'),
    ('a\nb', 'a\\x0ab'),
    ('a\r\x1b[2Jb', 'a\\x0d\\x1b[2Jb'),
    ('back\\slash', 'back\\\\slash'),
    ('\u202eevil', '\\u202eevil'),
    ('x\u2028y', 'x\\u2028y'),
    ('\x85', '\\x85'),
    (b'\xff\xfeab'.decode('utf-8', 'surrogateescape'), '\\xff\\xfeab'),
    (b'caf\xc3\xa9', 'café'),
])
def test_display(text, shown):
    assert cs.display(text) == shown
    assert '\n' not in cs.display(text)


def test_display_bounds_what_it_quotes():
    shown = cs.display('x' * 100000)
    assert len(shown) < 400 and shown.endswith('...(99700 more characters)')


MOUNTINFO = '\n'.join([
    '22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw',
    '40 22 0:40 / /shared rw,relatime shared:7 - ext4 /dev/sdb1 rw',
    '41 40 0:41 / /shared/checkpoints rw,noatime - nfs4 filer:/srv/shared/checkpoints rw,vers=4.2,sec=sys',
    '42 22 0:42 / /mnt/with\\040space rw - nfs filer2:/a\\040b rw',
    'garbage line',
])


def test_mount_for():
    mounts = cs.parse_mountinfo(MOUNTINFO)
    assert cs.mount_for('/shared/checkpoints/', mounts)[1:3] == ('nfs4', 'filer:/srv/shared/checkpoints')
    assert cs.mount_for('/shared/checkpoints/alice', mounts)[0] == '/shared/checkpoints'
    assert cs.mount_for('/shared/checkpointsX', mounts)[0] == '/shared'
    assert cs.mount_for('/mnt/with space/x', mounts)[2] == 'filer2:/a b'
    assert cs.mount_for('/srv', mounts)[0] == '/'
    assert cs.mount_for('/srv', []) is None


def test_unreadable_share_message_names_the_path_and_the_export_option():
    mounts = cs.parse_mountinfo(MOUNTINFO)
    message = cs.unreadable_share_message('/shared/checkpoints', 'EACCES',
                                          cs.mount_for('/shared/checkpoints', mounts))
    for part in ('cannot read /shared/checkpoints as root (EACCES)', 'filer:/srv/shared/checkpoints',
                 'root_squash', 'no_root_squash', 'export /srv/shared/checkpoints to this host',
                 'checkpoint_backup_nfs_root_access'):
        assert part in message
    local = cs.unreadable_share_message('/shared', 'EACCES', cs.mount_for('/shared', mounts))
    assert 'root_squash' not in local and "owner, mode and ACLs" in local


@pytest.mark.parametrize('name, ok', [
    ('alice', True), ('JDoe', True), ('jdoe@corp', True), ('1user', True), ('née', True),
    ('', False), ('.', False), ('..', False), ('.hidden', False), ('a/b', False), ('a\nb', False),
    ('lost+found', False), ('x' * 256, False), (None, False), (['alice'], False),
])
def test_user_name_errors(name, ok):
    assert (cs.user_name_errors(name) == []) is ok
