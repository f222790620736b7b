# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's node programs built for tests exactly as their roles build them.

Both ship the same one way: roles/health_check/files/build_zipapp.py packs a front end (a role's
files/) and the module_utils its role's vars/main.yml names into one zipapp. Tests run the archive
(``python3 ARCHIVE``) or import the front end from it, never a loose copy of the sources.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import importlib
import json
import os
import subprocess
import sys

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
MODULE_UTILS = os.path.join(REPO, 'plugins', 'module_utils')
BUILDER = os.path.join(REPO, 'roles', 'health_check', 'files', 'build_zipapp.py')

# program: (role, package, front end in the role's files/, archive name, vars key of the module list)
PROGRAMS = {
    'health': ('health_check', 'gpucluster_health', 'gpucluster_health_cli.py', 'gpucluster-health.pyz',
               '__health_check_modules'),
    'slurm_healthcheck': ('slurm', 'gpucluster_slurm_healthcheck', 'gpucluster_slurm_healthcheck.py',
                          'gpucluster-slurm-healthcheck.pyz', '__slurm_healthcheck_modules'),
    'usage': ('slurm', 'gpucluster_usage', 'gpucluster_usage_cli.py', 'gpucluster-slurm-usage.pyz', '__slurm_usage_modules'),
}


def role_modules(program):
    role, _package, _front, _name, key = PROGRAMS[program]
    with open(os.path.join(REPO, 'roles', role, 'vars', 'main.yml')) as handle:
        return yaml.safe_load(handle)[key]


def build(program, out_dir):
    """Path of ``program``'s archive in ``out_dir``, built with the arguments its role passes."""
    role, package, front, name, _key = PROGRAMS[program]
    argv = [sys.executable, BUILDER, '--package', package, '--entry', 'cli:main', '--output-name', name,
            '--output-dir', str(out_dir), '--module', 'cli=' + os.path.join(REPO, 'roles', role, 'files', front)]
    argv += ['--module=%s=%s' % (mod[:-len('.py')], os.path.join(MODULE_UTILS, mod)) for mod in role_modules(program)]
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError('build_zipapp.py (%s) failed: %s' % (program, proc.stderr.strip()))
    return json.loads(proc.stdout)['path']


def import_front_end(program, out_dir):
    """The front end module (``<package>.cli``) imported from a freshly built archive."""
    package = PROGRAMS[program][1]
    path = build(program, out_dir)
    for loaded in [m for m in sys.modules if m == package or m.startswith(package + '.')]:
        del sys.modules[loaded]
    sys.path.insert(0, path)
    try:
        return importlib.import_module(package + '.cli')
    finally:
        sys.path.remove(path)
