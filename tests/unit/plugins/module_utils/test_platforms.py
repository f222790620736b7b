# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The platform table (module_utils/platforms.py, cited in docs/platforms.md) and node_exporter's web option:
Ubuntu 22.04's archive offers node_exporter 1.3.1, which reads --web.config; 1.5.0 and later read
--web.config.file. The monitoring role writes the option its node's node_exporter knows."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import re
import subprocess
import sys

import pytest
import yaml

from ansible_collections.gpucluster.core.plugins.filter.platforms import FilterModule
from ansible_collections.gpucluster.core.plugins.module_utils import platforms

REPO = os.path.join(os.path.dirname(__file__), '..', '..', '..', '..')


@pytest.mark.parametrize('distribution, version, expected', [
    ('Debian', '12', '1.5.0'), ('Debian', '12.7', '1.5.0'), ('Debian', '13', '1.9.0'),
    ('Ubuntu', '22.04', '1.3.1'), ('Ubuntu', '24.04', ''), ('Rocky', '9.4', ''), ('', '', ''),
])
def test_archive_versions(distribution, version, expected):
    assert platforms.archive_version(distribution, version, 'prometheus-node-exporter') == expected


@pytest.mark.parametrize('version, flag', [
    ('1.3.1', '--web.config'), ('1.4.1', '--web.config'), ('1.5.0', '--web.config.file'),
    ('1.9.1', '--web.config.file'), ('v1.10.2', '--web.config.file'), ('', '--web.config.file'),
    ('unknown', '--web.config.file'),
])
def test_node_exporter_web_flag(version, flag):
    assert platforms.node_exporter_web_flag(version) == flag


def test_every_archive_row_is_cited_in_docs_platforms():
    with open(os.path.join(REPO, 'docs', 'platforms.md')) as handle:
        doc = handle.read()
    for (distribution, release), packages in platforms.ARCHIVE.items():
        for package, version in packages.items():
            row = re.search(r'^\| %s %s [^|]*\| %s \| %s[ (][^|]*\| https://\S+' % (
                re.escape(distribution), re.escape(release), re.escape(package), re.escape(version)), doc, re.M)
            assert row, 'docs/platforms.md has no cited row for %s %s %s %s' % (distribution, release, package, version)


RENDER = os.path.join(REPO, 'tests', 'unit', 'roles', 'k8s_render.py')


def test_the_role_writes_the_option_its_node_exporter_knows():
    # Rendered by Ansible's templar in a process of its own (tests/unit/roles/k8s_render.py: the collection's
    # filters found by name, the role's defaults and vars loaded), as in a play.
    cases = [('package', 'Ubuntu', '22.04', '--web.config'), ('package', 'Debian', '12', '--web.config.file'),
             ('package', 'Ubuntu', '24.04', '--web.config.file'), ('binary', 'Ubuntu', '22.04', '--web.config.file')]
    # The role loads its OS file (vars/Debian.yml on Debian and Ubuntu) before these are read.
    with open(os.path.join(REPO, 'roles', 'monitoring', 'vars', 'Debian.yml')) as handle:
        packages = yaml.safe_load(handle)['__monitoring_packages']
    jobs = []
    for method, distribution, version, _flag in cases:
        for tls in (True, False):
            jobs.append({'role': 'monitoring', 'expression': '{{ __monitoring_node_exporter_web_args }}',
                         'variables': {'monitoring_install_method': method, 'monitoring_tls': tls,
                                       'ansible_facts': {'distribution': distribution, 'distribution_version': version},
                                       '__monitoring_packages': packages,
                                       '__monitoring_web_config': '/etc/gpucluster-monitoring/web.yml'}})
    proc = subprocess.run([sys.executable, RENDER], input=json.dumps(jobs), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout)
    for index, (_method, _distribution, _version, flag) in enumerate(cases):
        assert results[2 * index] == [flag + '=/etc/gpucluster-monitoring/web.yml'], cases[index]
        assert results[2 * index + 1] == [], cases[index]


def test_filters_name_themselves_on_malformed_input():
    with pytest.raises(Exception, match='platform_archive_version: malformed input'):
        FilterModule().filters()['platform_archive_version']('Debian')
