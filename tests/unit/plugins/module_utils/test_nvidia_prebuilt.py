# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Canonical's prebuilt NVIDIA modules: kernel flavour, platform refusal, the package plan, the version check
and what the drift audit reads back from a node that runs them."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.gpucluster.core.plugins.filter import nvidia
from ansible_collections.gpucluster.core.plugins.filter import nvidia_prebuilt as prebuilt_filter
from ansible_collections.gpucluster.core.plugins.module_utils import nvidia_prebuilt as nb
from ansible_collections.gpucluster.core.plugins.module_utils import stack_versions as sv

VERSION = '535.183.01'


def _dkms_plan(flavour='proprietary', fabricmanager=False, version=VERSION, override=None):
    return nvidia.nvidia_driver_plan(version, 'distro', 'Ubuntu', '22', flavour, headless=True,
                                     fabricmanager=fabricmanager, packages_override=override)


def _plan(kernel='5.15.0-112-generic', flavour='proprietary', **kwargs):
    fabricmanager = kwargs.pop('fabricmanager', False)
    return nb.plan(_dkms_plan(flavour, fabricmanager), 'prebuilt', VERSION, kernel, flavour,
                   fabricmanager=fabricmanager, **kwargs)


@pytest.mark.parametrize('kernel,flavour', [
    ('5.15.0-112-generic', 'generic'),
    ('6.8.0-1013-nvidia', 'nvidia'),
    ('6.8.0-1013-nvidia-64k', 'nvidia-64k'),
    ('6.5.0-1024-aws', 'aws'),
    ('6.8.0-45-lowlatency', 'lowlatency'),
    (' 6.8.0-45-generic\n', 'generic'),
])
def test_kernel_flavour(kernel, flavour):
    assert nb.kernel_flavour(kernel) == flavour


@pytest.mark.parametrize('kernel', ['', None, '6.1.0-21-amd64-', '5.14.0-427.el9.x86_64', '6.8.0-generic', 'generic'])
def test_kernel_flavour_refuses_other_releases(kernel):
    with pytest.raises(nb.PrebuiltError, match='nvidia_driver_prebuilt_kernel_flavour'):
        nb.kernel_flavour(kernel)


def test_refusal_accepts_dkms_everywhere_and_prebuilt_on_ubuntu_distro():
    for distribution in ('Ubuntu', 'Debian', 'RedHat'):
        for source in ('distro', 'cuda_repo', 'runfile'):
            assert nb.refusal('dkms', source, distribution) == ''
    assert nb.refusal('prebuilt', 'distro', 'Ubuntu') == ''


@pytest.mark.parametrize('distribution,source', [
    ('Debian', 'distro'), ('Ubuntu', 'cuda_repo'), ('Ubuntu', 'runfile'), ('RedHat', 'cuda_repo'),
])
def test_refusal_names_variable_platform_and_accepted(distribution, source):
    message = nb.refusal('prebuilt', source, distribution)
    assert 'nvidia_driver_kernel_modules' in message
    assert distribution in message and "'%s'" % source in message
    assert "only 'dkms' is accepted" in message
    assert "nvidia_driver_source 'distro' on Ubuntu" in message


def test_refusal_of_unknown_mode_and_desktop_set():
    assert 'dkms, prebuilt' in nb.refusal('signed', 'distro', 'Ubuntu')
    assert 'nvidia_driver_headless: true' in nb.refusal('prebuilt', 'distro', 'Ubuntu', headless=False)


def test_dkms_plan_is_unchanged():
    dkms = _dkms_plan()
    plan = nb.plan(dkms, 'dkms', VERSION, '5.15.0-112-generic', 'proprietary')
    assert plan['kernel_modules'] == 'dkms' and plan['modules_package'] == ''
    assert dict((k, v) for k, v in plan.items() if k in dkms) == dkms


@pytest.mark.parametrize('kernel,flavour,modules,userspace', [
    ('5.15.0-112-generic', 'proprietary', 'linux-modules-nvidia-535-server-generic', 'nvidia-headless-no-dkms-535-server'),
    ('6.8.0-1013-nvidia', 'open', 'linux-modules-nvidia-535-server-open-nvidia',
     'nvidia-headless-no-dkms-535-server-open'),
])
def test_prebuilt_plan_packages(kernel, flavour, modules, userspace):
    plan = _plan(kernel, flavour)
    assert plan['packages'] == [modules, userspace, 'nvidia-utils-535-server', 'nvidia-compute-utils-535-server']
    assert plan['kernel_modules'] == 'prebuilt' and plan['modules_package'] == modules
    # No DKMS package, no kernel source: nothing is compiled on the node.
    assert not [n for n in plan['packages'] if 'dkms' in n and 'no-dkms' not in n or 'kernel-source' in n]
    # The userspace is pinned to the driver; the module metapackage has the kernel's version.
    assert plan['unpinned'] == [modules]
    assert plan['install'] == ['%s=%s-*' % (n, VERSION) for n in plan['packages'][1:]] + [modules]
    assert plan['carrier'] == 'nvidia-utils-535-server'


def test_prebuilt_plan_holds_the_module_only_with_the_kernel():
    assert _plan()['hold'] == ['nvidia-headless-no-dkms-535-server', 'nvidia-utils-535-server',
                               'nvidia-compute-utils-535-server']
    held = _plan(hold_kernel=True)
    assert held['hold'] == held['packages']


def test_prebuilt_plan_flavour_override_and_fabric_manager():
    plan = _plan(flavour_override='generic-hwe-22.04', fabricmanager=True)
    assert plan['modules_package'] == 'linux-modules-nvidia-535-server-generic-hwe-22.04'
    assert plan['kernel_flavour'] == 'generic-hwe-22.04'
    assert plan['packages'][-2:] == ['nvidia-fabricmanager-535', 'libnvidia-nscq-535']
    with pytest.raises(nb.PrebuiltError, match='not a kernel flavour'):
        _plan(flavour_override='generic hwe')


def test_prebuilt_plan_with_package_override():
    names = ['nvidia-headless-no-dkms-535-server', 'linux-modules-nvidia-535-server-aws', 'nvidia-utils-535-server']
    plan = nb.plan(_dkms_plan(override=names), 'prebuilt', VERSION, '6.5.0-1024-aws', 'proprietary',
                   packages_override=names)
    assert plan['packages'] == names
    assert plan['unpinned'] == ['linux-modules-nvidia-535-server-aws']
    assert plan['carrier'] == names[0]


@pytest.mark.parametrize('flavour', ['open', 'proprietary'])
def test_prebuilt_obsolete_names(flavour):
    regex = re.compile(_plan(flavour=flavour)['obsolete_re'])
    suffix = '-server-open' if flavour == 'open' else '-server'
    other = '-server' if flavour == 'open' else '-server-open'
    replaced = [
        'nvidia-dkms-535-server', 'nvidia-dkms-535-server-open', 'nvidia-headless-535-server',
        'nvidia-headless-535-server-open', 'nvidia-kernel-source-535-server', 'nvidia-headless-no-dkms-535' + other,
        'nvidia-utils-550-server', 'linux-modules-nvidia-550-server-generic', 'linux-modules-nvidia-535%s-generic' % other,
        'linux-modules-nvidia-535%s-5.15.0-112-generic' % other, 'linux-modules-nvidia-550-server-5.15.0-112-generic',
    ]
    kept = [
        'nvidia-headless-no-dkms-535' + suffix, 'nvidia-utils-535-server', 'nvidia-kernel-common-535-server',
        'linux-modules-nvidia-535%s-generic' % suffix, 'linux-modules-nvidia-535%s-5.15.0-112-generic' % suffix,
        'linux-modules-nvidia-535%s-generic-hwe-22.04' % suffix, 'linux-image-generic', 'nvidia-fabricmanager-535',
    ]
    assert [n for n in replaced if not regex.search(n)] == []
    assert [n for n in kept if regex.search(n)] == []


def test_prebuilt_plan_refuses_bad_inputs():
    with pytest.raises(nb.PrebuiltError, match='dkms, prebuilt'):
        nb.plan(_dkms_plan(), 'signed', VERSION, '5.15.0-112-generic', 'open')
    with pytest.raises(nb.PrebuiltError, match='apt plan'):
        nb.plan({'manager': 'dnf'}, 'prebuilt', VERSION, '5.15.0-112-generic', 'open')
    with pytest.raises(nb.PrebuiltError, match='kernel release'):
        _plan(kernel='5.14.0-427.el9.x86_64')


def test_module_version_check_match():
    verdict = nb.module_version_check(VERSION, '5.15.0-113-generic', 0, VERSION + '\n')
    assert verdict['ok'] and verdict['state'] == 'match' and verdict['found'] == VERSION


def test_module_version_check_mismatch_names_both_versions_and_the_ways_out():
    verdict = nb.module_version_check(VERSION, '5.15.0-113-generic', 0, '535.161.08\n',
                                      modules_package='linux-modules-nvidia-535-server-generic')
    assert not verdict['ok'] and verdict['state'] == 'mismatch' and verdict['found'] == '535.161.08'
    for words in (VERSION, '535.161.08', '5.15.0-113-generic', 'linux-modules-nvidia-535-server-generic',
                  'nvidia_driver_version: "535.161.08"', 'nvidia_driver_kernel_modules: dkms'):
        assert words in verdict['msg']


def test_module_version_check_missing():
    verdict = nb.module_version_check(VERSION, '6.8.0-1013-nvidia', 1,
                                      'modinfo: ERROR: Module nvidia not found.')
    assert not verdict['ok'] and verdict['state'] == 'missing'
    assert 'nvidia_driver_kernel_modules: dkms' in verdict['msg'] and 'Module nvidia not found' in verdict['msg']


def test_module_version_check_in_check_mode_before_the_install_does_not_fail():
    verdict = nb.module_version_check(VERSION, '5.15.0-113-generic', 1, '', pending=True)
    assert verdict['ok'] and verdict['state'] == 'pending' and 'check mode' in verdict['msg']
    # With nothing left to install, check mode compares what is there.
    assert not nb.module_version_check(VERSION, '5.15.0-113-generic', 0, '535.161.08', pending=False)['ok']


def test_filters():
    filters = prebuilt_filter.FilterModule().filters()
    assert filters['nvidia_kernel_modules_refusal']('prebuilt', 'distro', 'Ubuntu', True) == ''
    plan = filters['nvidia_kernel_modules_plan'](_dkms_plan(), 'prebuilt', VERSION, '6.8.0-1013-nvidia', 'open')
    assert plan['modules_package'] == 'linux-modules-nvidia-535-server-open-nvidia'
    verdict = filters['nvidia_prebuilt_module_check']({'rc': 0, 'stdout': VERSION}, VERSION, '6.8.0-1013-nvidia')
    assert verdict['ok']
    assert not filters['nvidia_prebuilt_module_check']({'skipped': True}, VERSION, '6.8.0-1013-nvidia')['ok']
    missing = filters['nvidia_prebuilt_module_check'](
        {'rc': 1, 'stdout': '', 'stderr': 'modinfo: ERROR: Module nvidia not found.'}, VERSION, '6.8.0-1013-nvidia')
    assert missing['state'] == 'missing' and 'Module nvidia not found' in missing['msg']
    with pytest.raises(AnsibleFilterError, match='^nvidia_kernel_modules_plan: .*kernel release'):
        filters['nvidia_kernel_modules_plan'](_dkms_plan(), 'prebuilt', VERSION, 'bad', 'open')


@pytest.mark.parametrize('flavour', ['open', 'proprietary'])
def test_drift_audit_reads_the_driver_version_of_a_prebuilt_node(flavour):
    """The module metapackage carries the kernel's version (5.15.0.112.112): the audit must read the
    driver's from the userspace, also where nvidia-utils is not installed."""
    plan = _plan(flavour=flavour)
    packages = dict((n, '%s-0ubuntu0.22.04.1' % VERSION) for n in plan['packages'])
    packages[plan['modules_package']] = '5.15.0-112.122+1'
    packages['linux-modules-nvidia-535%s-5.15.0-112-generic' % ('-server-open' if flavour == 'open' else '-server')] = \
        '5.15.0-112.122+1'
    stack, _toolkits, details = sv.build_stack({'packages': packages, 'package_manager': 'dpkg'})
    assert details['sources']['nvidia_driver'] == 'package:nvidia-utils-535-server'
    assert nvidia.nvidia_upstream_version(stack['nvidia_driver']) == VERSION
    del packages['nvidia-utils-535-server']
    stack, _toolkits, details = sv.build_stack({'packages': packages, 'package_manager': 'dpkg'})
    assert details['sources']['nvidia_driver'] == 'package:%s' % plan['packages'][1]
    assert nvidia.nvidia_upstream_version(stack['nvidia_driver']) == VERSION


def test_installed_matches_a_prebuilt_node():
    """The role's comparison of installed packages with the plan: the module metapackage at its kernel
    version is neither stale nor missing; a DKMS package left from before is obsolete."""
    plan = _plan()
    installed = dict((n, [{'version': '%s-0ubuntu0.22.04.1' % VERSION, 'arch': 'amd64'}]) for n in plan['packages'])
    installed[plan['modules_package']] = [{'version': '5.15.0-112.122+1', 'arch': 'amd64'}]
    state = nvidia.nvidia_installed_matches(installed, plan, 'x86_64')
    assert state['current'] and state['installed_version'] == VERSION
    installed['nvidia-dkms-535-server'] = [{'version': '%s-0ubuntu0.22.04.1' % VERSION, 'arch': 'amd64'}]
    state = nvidia.nvidia_installed_matches(installed, plan, 'x86_64')
    assert not state['current'] and state['obsolete'] == ['nvidia-dkms-535-server']
