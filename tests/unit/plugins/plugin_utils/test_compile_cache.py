# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The compiled-template cache of the preload callback (plugins/plugin_utils/compile_cache.py): its entries,
its directory checks and pruning here; with ansible-core's own templating in a child process (the cache is
installed on ansible-core's environment class, which must not leak into other tests): the same results
with and without it, entries reused by a later process, a corrupt entry compiled again, a filter that
changed how Jinja calls it compiled again, an unknown filter failing as without the cache."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import stat
import subprocess
import sys

import jinja2
import pytest

from ansible_collections.gpucluster.core.plugins.plugin_utils import compile_cache

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
COLLECTIONS = os.path.join(REPO, 'collections')


def _code(text='x = 1'):
    return compile(text, '<template>', 'exec')


def test_an_entry_round_trips():
    refs = (('filters', 'default', None), ('tests', 'defined', None), ('filters', 'map', 'context'))
    decoded = compile_cache.decode(compile_cache.encode(refs, _code()))
    assert decoded is not None
    assert decoded[0] == refs
    namespace = {}
    exec(decoded[1], namespace)  # pylint: disable=exec-used
    assert namespace['x'] == 1


@pytest.mark.parametrize('damage', [
    lambda data: data[:-1],                                       # truncated
    lambda data: data[:-5] + bytes([data[-5] ^ 1]) + data[-4:],   # one bit of the payload flipped
    lambda data: data.replace(b'cache 1', b'cache 9', 1),         # another format
    lambda data: b'',                                             # empty
    lambda data: data[:len(compile_cache.FORMAT) + compile_cache.DIGEST_SIZE],  # header alone
])
def test_a_damaged_entry_is_a_miss(damage):
    assert compile_cache.decode(damage(compile_cache.encode((), _code()))) is None


def test_a_payload_that_does_not_match_its_digest_is_a_miss():
    head = len(compile_cache.FORMAT) + compile_cache.DIGEST_SIZE
    kept = compile_cache.encode((), _code('x = 1'))
    other = compile_cache.encode((), _code('x = 2'))
    assert compile_cache.decode(kept[:head] + other[head:]) is None
    assert compile_cache.decode(other) is not None


def test_an_entry_that_is_not_code_is_a_miss():
    import hashlib
    import marshal
    payload = marshal.dumps(((), 'not code'))
    data = compile_cache.FORMAT + hashlib.sha256(payload).digest() + payload
    assert compile_cache.decode(data) is None


def test_store_and_load(tmp_path):
    assert compile_cache.store(str(tmp_path), 'k', (), _code())
    assert stat.S_IMODE(os.stat(str(tmp_path / 'k')).st_mode) == 0o600
    assert compile_cache.load(str(tmp_path), 'k')[0] == ()
    assert compile_cache.load(str(tmp_path), 'missing') is None
    assert [p.name for p in tmp_path.iterdir()] == ['k']  # no temporary file left


def test_the_directory_is_made_private(tmp_path):
    root = str(tmp_path / 'cache')
    assert compile_cache.check_directory(root) is None
    assert stat.S_IMODE(os.stat(root).st_mode) == 0o700


def test_a_directory_others_can_write_is_refused(tmp_path):
    root = tmp_path / 'cache'
    root.mkdir(mode=0o700)
    root.chmod(0o775)
    assert compile_cache.check_directory(str(root)) == '%s can be written by other users (mode 0775)' % root


def test_a_directory_in_a_directory_everyone_can_write_is_refused(tmp_path):
    shared = tmp_path / 'shared'
    shared.mkdir()
    shared.chmod(0o777)
    assert compile_cache.check_directory(str(shared / 'cache')) == '%s can be written by everyone (mode 0777)' % shared


@pytest.mark.parametrize('mode', [0o1777, 0o775, 0o755])
def test_a_sticky_or_group_writable_parent_is_accepted(tmp_path, mode):
    parent = tmp_path / 'parent'
    parent.mkdir()
    parent.chmod(mode)
    assert compile_cache.check_directory(str(parent / 'cache')) is None


def test_a_link_is_refused(tmp_path):
    (tmp_path / 'real').mkdir(mode=0o700)
    (tmp_path / 'link').symlink_to(tmp_path / 'real')
    assert compile_cache.check_directory(str(tmp_path / 'link')) == \
        '%s is not a directory (a link is not followed)' % (tmp_path / 'link')


def test_a_directory_of_another_user_is_refused(tmp_path):
    why = compile_cache.check_directory(str(tmp_path), uid=os.getuid() + 1)
    assert why == '%s is owned by uid %d, not by this user (uid %d)' % (tmp_path, os.getuid(), os.getuid() + 1)


def test_plugin_references_of_generated_source():
    source = jinja2.Environment().compile('{{ x | default(1) | int }}{% if y is defined %}{{ y | join(",") | int }}{% endif %}',
                                          raw=True)
    expected = [('filters', 'default'), ('filters', 'int'), ('filters', 'join'), ('tests', 'defined')]
    assert compile_cache.plugin_references(source) == expected


def test_pass_arg():
    assert compile_cache.pass_arg(jinja2.pass_context(lambda ctx, v: v)) == 'context'
    assert compile_cache.pass_arg(jinja2.pass_environment(lambda env, v: v)) == 'environment'
    assert compile_cache.pass_arg(lambda v: v) is None


def test_environment_settings():
    plain = jinja2.Environment(optimized=False)
    assert compile_cache.environment_settings(plain, False) == compile_cache.environment_settings(jinja2.Environment(optimized=False), False)
    assert compile_cache.environment_settings(plain, False) != compile_cache.environment_settings(plain, True)
    other = jinja2.Environment(optimized=False, variable_start_string='[[', variable_end_string=']]')
    assert compile_cache.environment_settings(plain, False) != compile_cache.environment_settings(other, False)
    assert compile_cache.environment_settings(plain.overlay(trim_blocks=True), False) != \
        compile_cache.environment_settings(plain, False)
    # Constant folding may call filters while compiling; autoescape by a function depends on the name: not served.
    assert compile_cache.environment_settings(jinja2.Environment(), False) is None
    assert compile_cache.environment_settings(jinja2.Environment(optimized=False, autoescape=lambda name: True), False) is None


def test_entry_keys_differ_by_kind_text_and_settings():
    settings = compile_cache.environment_settings(jinja2.Environment(optimized=False), False)
    keys = {compile_cache.entry_key('T', '{{ x }}', None, None, False, settings),
            compile_cache.entry_key('E', '{{ x }}', None, None, False, settings),
            compile_cache.entry_key('T', '{{ y }}', None, None, False, settings),
            compile_cache.entry_key('T', '{{ x }}', None, None, True, settings),
            compile_cache.entry_key('T', '{{ x }}', None, None, False, settings[:-1] + (True,))}
    assert len(keys) == 5


def test_prune_removes_stale_other_versions_and_an_overfull_current(tmp_path):
    root = tmp_path / 'cache'
    current, recent, stale = root / 'current', root / 'recent', root / 'stale'
    for directory in (current, recent, stale):
        directory.mkdir(parents=True)
    for index in range(3):
        (current / ('c%d' % index)).write_bytes(b'x')
        (stale / ('s%d' % index)).write_bytes(b'x')
    (recent / 'r').write_bytes(b'x')
    now = os.stat(str(recent)).st_mtime + 100
    os.utime(str(stale), (now - 30 * 86400, now - 30 * 86400))
    assert compile_cache.prune(str(root), str(current), now=now, max_entries=5) == 3
    assert sorted(p.name for p in root.iterdir()) == ['current', 'recent']
    assert compile_cache.prune(str(root), str(current), now=now, max_entries=2) == 3
    assert list(current.iterdir()) == []


# Templates and expressions through ansible-core's own Templar, in a child process. Each job is
# [kind, text]; the child prints each result (or the error's type and message) and the cache's counters.
_CHILD = r"""
import json, os, sys
sys.path.insert(0, sys.argv[1])
from ansible.plugins.loader import init_plugin_loader
init_plugin_loader([sys.argv[1]])
from ansible_collections.gpucluster.core.plugins.plugin_utils import compile_cache
cache = None
if sys.argv[2] != 'off':
    cache, why = compile_cache.install(sys.argv[2])
    assert cache is not None, why
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
variables = {'names': ['a', 'b'], 'port': '9100', 'path': 'C:\\new', 'nested': trust_as_template('{{ port | int + 1 }}')}
out = []
for kind, text in json.load(sys.stdin):
    templar = Templar(loader=DataLoader(), variables=variables)
    try:
        if kind == 'template':
            value = templar.template(trust_as_template(text))
        else:
            value = templar.evaluate_expression(trust_as_template(text))
        out.append(['ok', value])
    except Exception as exc:
        out.append(['error', type(exc).__name__, str(exc).splitlines()[0]])
print(json.dumps({'results': out, 'hits': cache.hits if cache else 0, 'misses': cache.misses if cache else 0,
                  'stored': cache.stored if cache else 0}))
"""

JOBS = [
    ['template', '{{ names | join(",") }} on {{ port | int }}'],
    ['template', '{{ names | map("upper") | list | to_json }}'],
    ['template', '{{ nested }}'],
    ['template', '{% for n in names %}{{ n }}{% if not loop.last %}-{% endif %}{% endfor %}'],
    ['template', '{{ path }} and "\\n" stays'],
    ['expression', 'names | length == 2 and port is match("^[0-9]+$")'],
    ['expression', 'names | to_json'],
    ['expression', 'names | no_such_filter_anywhere'],
    ['template', '{{ names | no_such_filter_anywhere }}'],
]


# A filter plugin whose filter asks Jinja for the context when PROBE_CONTEXT is set: the same name, called
# another way (Jinja decides the call's arguments when it compiles).
_PROBE = '''
import os
import jinja2


def probe(value):
    return 'plain %s' % (value,)


def probe_with_context(context, value):
    return 'with context %s' % (value,)


class FilterModule(object):
    def filters(self):
        if os.environ.get('PROBE_CONTEXT'):
            return {'gpucluster_probe': jinja2.pass_context(probe_with_context)}
        return {'gpucluster_probe': probe}
'''


def _child(cache_dir, jobs=None, filter_dir=None, changed_filter=False):
    argv = [sys.executable, '-c', _CHILD, COLLECTIONS, cache_dir]
    env = dict(os.environ)
    if filter_dir:
        env['ANSIBLE_FILTER_PLUGINS'] = filter_dir
    if changed_filter:
        env['PROBE_CONTEXT'] = '1'
    proc = subprocess.run(argv, input=json.dumps(jobs or JOBS), capture_output=True, text=True, timeout=300, check=False,
                          env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _entries(root):
    return [os.path.join(d, f) for d, _dirs, files in os.walk(root) for f in files]


def test_ansible_results_are_the_same_with_the_cache_and_a_later_process_reuses_it(tmp_path):
    root = str(tmp_path / 'cache')
    without = _child('off')
    first = _child(root)
    second = _child(root)
    assert first['results'] == without['results'] == second['results']
    assert without['results'][0] == ['ok', 'a,b on 9100']
    assert without['results'][2] == ['ok', 9101]
    assert without['results'][7][0] == 'error' and 'no_such_filter_anywhere' in without['results'][7][2]
    # The first process compiles and keeps what compiles (not the unknown filter's); the second reads it.
    assert first['hits'] == 0 and first['stored'] >= 7
    assert second['hits'] >= 7 and second['stored'] == 0
    assert len(_entries(root)) == first['stored']


def test_a_corrupt_entry_is_compiled_again_and_replaced(tmp_path):
    root = str(tmp_path / 'cache')
    job = [JOBS[0]]
    assert _child(root, job)['stored'] == 1
    entry, = _entries(root)
    with open(entry, 'rb') as handle:
        data = handle.read()
    with open(entry, 'wb') as handle:
        handle.write(data[:-3] + bytes(byte ^ 0xff for byte in data[-3:]))
    again = _child(root, job)
    assert again['results'] == [['ok', 'a,b on 9100']]
    assert (again['hits'], again['stored']) == (0, 1)
    assert _child(root, job)['hits'] == 1


def test_a_filter_jinja_now_calls_another_way_is_compiled_again(tmp_path):
    root = str(tmp_path / 'cache')
    (tmp_path / 'filters').mkdir()
    (tmp_path / 'filters' / 'probe.py').write_text(_PROBE)
    filters = str(tmp_path / 'filters')
    job = [['expression', 'port | gpucluster_probe']]
    assert _child(root, job, filters) == {'results': [['ok', 'plain 9100']], 'hits': 0, 'misses': 1, 'stored': 1}
    assert _child(root, job, filters)['hits'] == 1
    changed = _child(root, job, filters, changed_filter=True)
    assert changed == {'results': [['ok', 'with context 9100']], 'hits': 0, 'misses': 1, 'stored': 1}
    assert _child(root, job, filters, changed_filter=True)['hits'] == 1


def test_install_marks_its_directory_used_and_prunes_stale_ones(tmp_path):
    root = tmp_path / 'cache'
    stale = root / 'another-version'
    stale.mkdir(parents=True, mode=0o700)
    (stale / 'entry').write_bytes(b'x')
    os.utime(str(stale), (1, 1))
    script = ('import os, sys; sys.path.insert(0, %r)\n'
              'from ansible_collections.gpucluster.core.plugins.plugin_utils import compile_cache\n'
              'cache, why = compile_cache.install(%r)\n'
              'print(cache.directory, why, os.stat(cache.directory).st_mtime > 1)\n'
              'os.utime(cache.directory, (1, 1))\n') % (COLLECTIONS, str(root))
    runs = [subprocess.run([sys.executable, '-c', script], capture_output=True, text=True, timeout=120, check=False)
            for dummy in range(2)]
    # The second run finds its directory as the first left it, a year-old mtime, and marks it used again.
    assert [run.stdout.split()[1:] for run in runs] == [['None', 'True'], ['None', 'True']], runs[-1].stderr
    assert [str(p) for p in root.iterdir()] == [runs[0].stdout.split()[0]]


def test_install_refuses_an_unsafe_directory_and_changes_nothing(tmp_path):
    root = tmp_path / 'cache'
    root.mkdir()
    root.chmod(0o777)
    script = ('import sys; sys.path.insert(0, %r)\n'
              'from ansible._internal._templating import _jinja_bits as b\n'
              'from ansible_collections.gpucluster.core.plugins.plugin_utils import compile_cache\n'
              'before = b.AnsibleEnvironment.compile\n'
              'cache, why = compile_cache.install(%r)\n'
              'print(cache, why, b.AnsibleEnvironment.compile is before)\n') % (COLLECTIONS, str(root))
    proc = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True, timeout=120, check=False)
    assert proc.stdout.strip() == 'None %s can be written by other users (mode 0777) True' % root, proc.stderr
