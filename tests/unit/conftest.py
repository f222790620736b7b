# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Make the checkout importable as ansible_collections.gpucluster.core for plain pytest runs."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, settings

# Property tests must give the same verdict on a loaded CI machine as on an idle one: no per-example
# deadline and no "too slow" health check (both measure this machine's speed, not the code), the same
# examples on every run, and no example database written into the checkout.
settings.register_profile('gpucluster', deadline=None, derandomize=True, database=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile('gpucluster')

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
_COLLECTIONS = os.path.join(REPO, 'collections')
if _COLLECTIONS not in sys.path:
    sys.path.insert(0, _COLLECTIONS)


@pytest.fixture(scope='session')
def real_fixtures_dir():
    """Directory of real recorded tool output (GPUCLUSTER_FIXTURES, default ../shared/fixtures).

    A missing corpus fails the tests that need it, so a green run means they ran; a developer without
    the corpus skips them explicitly with GPUCLUSTER_SKIP_REAL_FIXTURES=1 (CI never sets it).
    """
    path = os.environ.get('GPUCLUSTER_FIXTURES') or os.path.join(REPO, '..', 'shared', 'fixtures')
    if not os.path.isdir(path):
        message = 'real fixture corpus not found at %s (set GPUCLUSTER_FIXTURES)' % path
        if os.environ.get('GPUCLUSTER_SKIP_REAL_FIXTURES') == '1' and os.environ.get('CI') != 'true':
            pytest.skip(message + '; skipped because GPUCLUSTER_SKIP_REAL_FIXTURES=1')
        pytest.fail(message + '; GPUCLUSTER_SKIP_REAL_FIXTURES=1 skips these tests outside CI', pytrace=False)
    return os.path.abspath(path)


@pytest.fixture(scope='session')
def own_fixtures_dir():
    return os.path.join(REPO, 'tests', 'unit', 'fixtures')


@pytest.fixture(scope='session')
def ansible_render():
    """Render a value with Ansible's own templar, as a play would: ``render(variables, value)``.

    Strings are marked trusted (ansible-core 2.19 and later template only trusted strings). Ansible's
    Jinja differs from plain Jinja2 (a backslash pair in a Jinja string stays two characters inside
    ``{{ }}``), so role expressions are checked with this rather than with jinja2 itself.
    """
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar
    try:
        from ansible.template import trust_as_template
    except ImportError:  # pragma: no cover - ansible-core before 2.19 trusts every string
        def trust_as_template(value):
            return value

    def trust(value):
        if isinstance(value, str):
            return trust_as_template(value)
        if isinstance(value, dict):
            return dict((k, trust(v)) for k, v in value.items())
        if isinstance(value, list):
            return [trust(v) for v in value]
        return value

    def render(variables, value):
        return Templar(loader=DataLoader(), variables=trust(variables)).template(trust(value))
    return render


class ModuleExit(Exception):
    """How a module run in-process ended: ``how`` is 'exit' or 'fail', ``result`` its keyword arguments."""

    def __init__(self, how, result):
        super(ModuleExit, self).__init__(how)
        self.how = how
        self.result = result


@pytest.fixture
def run_module():
    """Run a module's ``main`` in this process: ``run_module(main, args, check=False, diff=False) -> (how, result)``."""
    from unittest import mock
    from ansible.module_utils import basic
    from ansible.module_utils.testing import patch_module_args

    def exit_json(self, **kwargs):
        raise ModuleExit('exit', kwargs)

    def fail_json(self, **kwargs):
        raise ModuleExit('fail', kwargs)

    def run(main, args, check=False, diff=False):
        full = dict(args, _ansible_check_mode=check, _ansible_diff=diff)
        with patch_module_args(full), mock.patch.object(basic.AnsibleModule, 'exit_json', exit_json), \
                mock.patch.object(basic.AnsibleModule, 'fail_json', fail_json):
            with pytest.raises(ModuleExit) as caught:
                main()
        return caught.value.how, caught.value.result
    return run


class RenderError(Exception):
    """A template error of the served renderer, with the templar's message."""


@pytest.fixture(scope='module')
def served_render():
    """``render(variables, value)``: ``value`` templated as a play would, with the collection's filters found by name,
    by one child process per test module (tests/unit/roles/k8s_render.py --serve): Ansible's collection loader,
    installed in the test process, would take over the ansible_collections package other tests imported. A template
    error raises ``render.Error`` (RenderError) with the templar's message."""
    proc = subprocess.Popen([sys.executable, os.path.join(REPO, 'tests', 'unit', 'roles', 'k8s_render.py'), '--serve'],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, universal_newlines=True,
                            env=dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg')))

    def run(variables, value):
        proc.stdin.write(json.dumps({'variables': variables, 'value': value}) + '\n')
        proc.stdin.flush()
        while True:
            line = proc.stdout.readline()
            assert line, 'the render process ended'
            if line.startswith('RENDER '):
                reply = json.loads(line[len('RENDER '):])
                if 'error' in reply:
                    raise RenderError(reply['error'])
                return reply['value']
    run.Error = RenderError
    yield run
    proc.stdin.close()
    proc.wait(timeout=60)
