# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters over module_utils.shared_secrets (the decisions live there).

``munge_key_plan``: whether the munge key on the Slurm controller host may be the cluster's key::

    {{ slurm_controller_host | gpucluster.core.munge_key_plan(key_path, controller_key_sha256,
                                                              controller_record, records) }}

``records`` is omitted (or null) before the nodes' records are read, then a list of [host, recorded
SHA-256]. The result is a dict with ``action`` (use, create, read or stop) and ``message``.

``certificate_fingerprint``: the SHA-256 fingerprint of a PEM certificate as openssl prints it
(``AB:CD:...``), '' when the text holds none; the value monitoring_ca_rotate takes.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.gpucluster.core.plugins.module_utils import shared_secrets


def _text(value, name):
    if value is None:
        return ''
    if not isinstance(value, str):
        raise AnsibleFilterError('munge_key_plan: %s must be a string, got %r' % (name, type(value).__name__))
    return value.strip()


def munge_key_plan(controller, key_path, controller_key, controller_record, records=None):
    if not isinstance(controller, str) or not controller:
        raise AnsibleFilterError('munge_key_plan: the controller host must be a non-empty name, got %r' % (controller,))
    pairs = None
    if records is not None:
        if isinstance(records, Mapping):
            records = list(records.items())
        pairs = []
        for entry in records:
            if isinstance(entry, (str, bytes)) or len(entry) != 2:
                raise AnsibleFilterError('munge_key_plan: records must be [host, recorded SHA-256] pairs, got %r' % (entry,))
            pairs.append((str(entry[0]), _text(entry[1], 'a record')))
    return shared_secrets.munge_key_plan(controller, _text(key_path, 'key_path'), _text(controller_key, 'controller_key'),
                                         _text(controller_record, 'controller_record'), pairs)


def certificate_fingerprint(pem):
    return shared_secrets.certificate_fingerprint(pem if isinstance(pem, str) else '')


class FilterModule(object):
    def filters(self):
        return {'munge_key_plan': munge_key_plan, 'certificate_fingerprint': certificate_fingerprint}
