# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The preload callback, enabled as ansible.cfg enables it: a task's worker finds the collection's
modules already imported (inherited from the main process), and without the callback it does not."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import re
import subprocess
import sys

import pytest

from ansible_collections.gpucluster.core.plugins.plugin_utils import preload

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), 'ansible-playbook')

# A filter of the test's own (not the collection's): the names of the collection's modules already in the
# worker's sys.modules when the task's template first runs, and whether ansible-core's builtin lookup
# plugin 'file' is there under the name Ansible's loader gives it.
PROBE = '''
import gc
import inspect
import sys

from ansible.plugins.loader import filter_loader


def loaded(_):
    converged = sys.modules.get('ansible_collections.gpucluster.core.plugins.action.converged')
    return {
        'collection': sorted(n for n in sys.modules if n.startswith('ansible_collections.gpucluster.core.plugins.')),
        'lookup_file': 'ansible_collections.ansible.builtin.plugins.lookup.file' in sys.modules,
        'remembered': sorted(getattr(filter_loader.get_with_context, 'gpucluster_remembered', {})),
        'code_digests': len(getattr(converged, '_CODE_DIGESTS', {})),
        'frozen': gc.get_freeze_count(),
        'module_files': len(getattr(inspect, '_filesbymodname', {})),
    }


class FilterModule(object):
    def filters(self):
        return {'probe_loaded': loaded}
'''

PLAYBOOK = '''---
- name: Probe
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: What the worker has imported
      ansible.builtin.debug:
        msg: "PROBE{{ 0 | probe_loaded | to_json }}PROBE"
'''


def _run(tmp_path, enabled, cache_dir=None):
    config = os.path.join(REPO, 'ansible.cfg')
    if not enabled:
        # The repository's configuration without the callback line.
        with open(config) as handle:
            lines = [line for line in handle if not line.startswith('callbacks_enabled')]
        config = str(tmp_path / 'ansible.cfg')
        with open(config, 'w') as handle:
            handle.writelines(lines)
    (tmp_path / 'filter_plugins').mkdir(exist_ok=True)
    (tmp_path / 'filter_plugins' / 'probe.py').write_text(PROBE)
    (tmp_path / 'play.yml').write_text(PLAYBOOK)
    env = dict(os.environ, ANSIBLE_CONFIG=config, ANSIBLE_NOCOLOR='1', ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, 'collections'),
               ANSIBLE_FILTER_PLUGINS=str(tmp_path / 'filter_plugins'),
               ANSIBLE_INVENTORY_UNPARSED_WARNING='false', ANSIBLE_LOCALHOST_WARNING='false',
               GPUCLUSTER_COMPILE_CACHE_DIR=cache_dir or str(tmp_path / 'compiled'))
    env.pop('ANSIBLE_CALLBACKS_ENABLED', None)
    proc = subprocess.run([ANSIBLE_PLAYBOOK, '-i', 'localhost,', '-vvv', str(tmp_path / 'play.yml')], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    marked = proc.stdout.split('PROBE')
    assert len(marked) >= 3, proc.stdout[-3000:]
    return json.loads(marked[1].replace('\\"', '"')), proc.stdout + proc.stderr


def test_the_ansible_cfg_enables_it():
    with open(os.path.join(REPO, 'ansible.cfg')) as handle:
        assert 'callbacks_enabled = gpucluster.core.preload' in handle.read()


@pytest.mark.parametrize('enabled', [True, False])
def test_a_worker_inherits_the_imports(tmp_path, enabled):
    seen, out = _run(tmp_path, enabled)
    wanted = preload.collection_modules(os.path.join(REPO, 'plugins'), 'gpucluster', 'core')
    if enabled:
        assert sorted(set(wanted) - set(seen['collection'])) == []
        assert seen['lookup_file'] is True
        counted = re.search(r'gpucluster\.core\.preload: (\d+) plugins and modules imported before the first fork', out)
        assert counted and int(counted.group(1)) > len(wanted), out[-3000:]
        assert 'left to the workers that need them' not in out
        # Answered once in the main process: the collection's and Jinja's filter names, the fast path's digest of
        # the code, the files of the imported modules; and the main process's objects kept out of collections.
        assert 'gpucluster.core.input_type_errors' in seen['remembered'] and 'length' in seen['remembered']
        assert seen['code_digests'] == 1
        assert seen['module_files'] > len(wanted)
        assert seen['frozen'] > 10000
    else:
        # The probe's own task imports none of the collection's Python: without the callback it is not there.
        assert [n for n in wanted if n in seen['collection']] == []
        assert seen['lookup_file'] is False
        assert seen['remembered'] == [] and seen['code_digests'] == 0 and seen['frozen'] < 1000


def test_compiled_templates_are_kept_and_used_by_the_next_run(tmp_path):
    first, out = _run(tmp_path, True)
    kept = [name for _d, _s, files in os.walk(str(tmp_path / 'compiled')) for name in files]
    assert kept, out[-3000:]
    assert 'compiled templates kept in %s' % (tmp_path / 'compiled') in out
    second, _out = _run(tmp_path, True)
    # The count of frozen objects differs by a few between two runs (what the main process happened to allocate
    # before freezing): both froze the main process's objects, and everything else the worker saw is the same.
    assert first.pop('frozen') > 10000 and second.pop('frozen') > 10000
    assert second == first
    assert sorted(name for _d, _s, files in os.walk(str(tmp_path / 'compiled')) for name in files) == sorted(kept)


def test_a_cache_directory_others_can_write_is_not_used(tmp_path):
    shared = tmp_path / 'shared'
    shared.mkdir()
    shared.chmod(0o775)
    seen, out = _run(tmp_path, True, str(shared))
    assert seen['lookup_file'] is True
    assert 'compiled templates are not kept this run: %s can be written by other users (mode 0775)' % shared \
        in ' '.join(out.split())
    assert os.listdir(str(shared)) == []
