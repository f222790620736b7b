# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether an apt install would change nothing: decisions, no I/O.

``ansible.builtin.apt`` with ``state: present`` leaves a spec alone when the package is installed and, for
``NAME=VERSION``, the installed version matches VERSION as an fnmatch pattern (its ``package_status``). The roles
skip the module when that holds for every spec of an install, since the module resolves pins and candidates over
the whole package cache before it finds it has nothing to do (a minute of CPU on a node with NVIDIA's repository).
Two readers: the NVIDIA roles from dpkg-query lines (plugins/filter/nvidia.py ``apt_specs_unsatisfied``), the other
roles from what their converged check observed (plugins/filter/packages.py ``apt_request_installed``).

Whatever cannot be judged the way apt judges it counts as not satisfied, so the install runs: a name apt would read
as a wildcard or with an architecture, ``>=``, an empty version, a version not read. Standard library only.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import fnmatch
import re

# A name as apt takes it in a spec (a version or an architecture follows it, never part of it).
NAME = re.compile(r'^[a-z0-9][a-z0-9+.-]+\Z')


def spec_name(spec):
    """The package name of a spec (the text before ``=``)."""
    return str(spec).partition('=')[0]


def spec_satisfied(spec, versions):
    """True when apt's ``state: present`` would leave ``spec`` (``NAME`` or ``NAME=VERSION-GLOB``) as it is.

    ``versions``: the installed version of each of the name's packages on the node's own architecture (one per
    dpkg line), None for one that is not fully installed; empty or None when the name is not installed. Every one
    must be installed and, where the spec gives a version, match it."""
    if not isinstance(spec, str):
        return False
    name, sep, pattern = spec.partition('=')
    if not NAME.match(name) or (sep and (not pattern or pattern.startswith('='))):
        return False
    if not versions or not isinstance(versions, (list, tuple)):
        return False
    for version in versions:
        if not isinstance(version, str) or not version or (sep and not fnmatch.fnmatchcase(version, pattern)):
            return False
    return True


def request_installed(request, packages):
    """True when every spec of an apt request (a spec or a list of them) is satisfied by ``packages``, the
    converged module's observation (name -> ``{'version': ...}``, version None when not installed). A name that
    was not observed (a virtual package, one the role's fast path does not list), an empty request, or anything
    that is not that shape: False. A newer Debian revision that also matches ``NAME=VER-*`` is therefore not taken
    by a run that skips the install, as the fast path never took it: an upgrade is a change of the pin."""
    if isinstance(request, str):
        request = [request]
    if not isinstance(request, (list, tuple)) or not request or not isinstance(packages, dict):
        return False
    for spec in request:
        seen = packages.get(spec_name(spec)) if isinstance(spec, str) else None
        version = seen.get('version') if isinstance(seen, dict) else None
        if not spec_satisfied(spec, [version]):
            return False
    return True
