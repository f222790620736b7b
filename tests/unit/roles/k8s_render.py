# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Render role templates and expressions with Ansible's own templar, in a process of its own.

test_k8s_roles.py (and test_platforms.py, for the monitoring role) run this file with the interpreter of the tests: Ansible's collection loader must be set up
before anything imports ``ansible_collections.gpucluster.core`` (the collection's filters are then found by
name, as in a play), which the test process cannot promise once other test modules imported the collection
directly. Reads a JSON list of jobs on stdin, each {"role", "variables", "template" or "expression"}, with the
role's defaults and vars/main.yml under the job's variables; writes the list of results as JSON.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import sys

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
COLLECTIONS = os.path.join(REPO, 'collections')


def templar_factory():
    """(make_templar(variables), trust) with the collection's filters found by name, as in a play."""
    from ansible.plugins.loader import init_plugin_loader
    init_plugin_loader([COLLECTIONS])
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

    def make(variables):
        return Templar(loader=DataLoader(), variables=trust(variables))
    return make, trust


def main():
    make, trust = templar_factory()
    results = []
    for job in json.load(sys.stdin):
        variables = {}
        for part in ('defaults', 'vars'):
            with open(os.path.join(REPO, 'roles', job['role'], part, 'main.yml')) as handle:
                variables.update(yaml.safe_load(handle) or {})
        variables.update(job['variables'])
        templar = make(variables)
        if 'template' in job:
            with open(os.path.join(REPO, 'roles', job['role'], 'templates', job['template'])) as handle:
                results.append(templar.template(trust(handle.read())))
        else:
            results.append(templar.template(trust(job['expression'])))
    json.dump(results, sys.stdout)


def serve():
    """One JSON line per request on stdin, {"variables", "value"}; one line per reply, ``RENDER {"value"}`` or
    ``RENDER {"error"}`` (for many expressions in one process: tests/unit/playbooks/test_swarm_day2.py)."""
    make, trust = templar_factory()
    for line in sys.stdin:
        request = json.loads(line)
        try:
            reply = {'value': make(request['variables']).template(trust(request['value']))}
        except Exception as exc:  # pylint: disable=broad-except  # reported to the test, which fails with it
            reply = {'error': '%s: %s' % (type(exc).__name__, exc)}
        sys.stdout.write('RENDER ' + json.dumps(reply, default=str) + '\n')
        sys.stdout.flush()


if __name__ == '__main__':
    if sys.argv[1:] == ['--serve']:
        serve()
    else:
        main()
