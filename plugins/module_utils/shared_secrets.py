# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where a secret the roles generate comes from, and when a run must stop instead of making a new one.

Some secrets are generated once per cluster (the monitoring CA, the scrape and Grafana passwords) and
kept, encrypted with Ansible Vault, in a store inside the site's inventory, so that every checkout of
the inventory finds the same ones. A checkout whose store lacks one must never generate a new one
while the cluster already holds one: that would replace the CA or a password under the running
cluster. The munge key lives on the Slurm controller host, and each node records which key it was
given as the cluster's, so that a controller host that was reinstalled (and has no key, or a new
one) is noticed before its key is copied over the cluster's.

Standard library only; no Ansible imports. The action plugin secret_store and the munge_key_plan
filter adapt these functions.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import base64
import binascii
import hashlib
import re

# What a run does with one shared secret.
STORE = 'store'        # the store has it: use it
IMPORT = 'import'      # not in the store, but this controller's working copy has it and no node holds another
GENERATE = 'generate'  # nowhere yet: a new cluster (or a new server), make it
ROTATE = 'rotate'      # the operator named the current one (its fingerprint) to be replaced
STOP = 'stop'          # the cluster holds one that this checkout does not have: stop, say where it is
ACTIONS = (STORE, IMPORT, GENERATE, ROTATE, STOP)
KINDS = ('certificate', 'password')

_PEM_CERTIFICATE = re.compile(r'-----BEGIN CERTIFICATE-----\s*(.*?)\s*-----END CERTIFICATE-----', re.S)
_FINGERPRINT_PREFIX = re.compile(r'^\s*(sha-?256\s+)?(fingerprint\s*=\s*)?', re.I)


def certificate_fingerprint(pem):
    """SHA-256 fingerprint of the first certificate in PEM text, as openssl prints it ('AB:CD:...');
    '' when the text holds no certificate that decodes."""
    if not isinstance(pem, str):
        return ''
    match = _PEM_CERTIFICATE.search(pem)
    if not match:
        return ''
    try:
        der = base64.b64decode(''.join(match.group(1).split()), validate=True)
    except (ValueError, binascii.Error):
        return ''
    if not der:
        return ''
    digest = hashlib.sha256(der).hexdigest().upper()
    return ':'.join(digest[i:i + 2] for i in range(0, len(digest), 2))


def normalize_fingerprint(text):
    """A SHA-256 fingerprint as an operator may give it ('AB:CD:..', 'abcd..', openssl's
    'sha256 Fingerprint=AB:..') in the colon form; '' when it is not 32 bytes of hex."""
    if not isinstance(text, str):
        return ''
    digits = re.sub(r'[\s:]', '', _FINGERPRINT_PREFIX.sub('', text)).upper()
    if not re.match(r'^[0-9A-F]{64}\Z', digits):
        return ''
    return ':'.join(digits[i:i + 2] for i in range(0, 64, 2))


def _same(kind, held, candidate):
    if kind == 'certificate':
        mine = certificate_fingerprint(candidate)
        return mine != '' and certificate_fingerprint(held) == mine
    # Generated passwords are letters and digits; files written by earlier releases end with a newline.
    return held.strip() == candidate.strip()


def _comparable(kind, value):
    """A node's copy that can be compared with this checkout's (a certificate that decodes, a password)."""
    if not isinstance(value, str) or value.strip() == '':
        return False
    return kind != 'certificate' or certificate_fingerprint(value) != ''


def _names(items):
    items = list(items)
    return ', '.join(items) if items else 'none'


def plan_secret(label, kind, store_files, store_present, cache_files, cache_present, candidate, held,
                node_path='', instead='', rotate='', rotatable=False, rotate_variable='monitoring_ca_rotate'):
    """What this run does with one shared secret, and why: {'action': one of ACTIONS, 'message': text}.

    label          what it is, for messages ('the monitoring CA')
    kind           'certificate' (compared by fingerprint) or 'password' (compared as text)
    store_files    the secret's files in the inventory's store (paths, for messages)
    store_present  how many of them exist there
    cache_files    the same files in this controller's working copy (paths, for messages)
    cache_present  whether all of them exist there
    candidate      the value this run would use from the working copy: the certificate's PEM or the
                   password ('' when the working copy has none)
    held           [(host, value)]: what the nodes hold at node_path; value is the node's copy
                   (PEM or password text), or True when the node holds one that cannot be compared
    instead        the variable(s) that provide the secret instead of the store, for messages
    rotate         the fingerprint the operator named to replace (certificates only, '' for none)
    No message holds a secret: only names, paths, hosts and certificate fingerprints.
    """
    if kind not in KINDS:
        raise ValueError('kind must be one of %s, got %r' % (', '.join(KINDS), kind))
    store_files = list(store_files)
    holders = [host for host, value in held if value is True or (isinstance(value, str) and value.strip())]
    rotate_fp = normalize_fingerprint(rotate) if rotatable else ''
    if rotatable and rotate and not rotate_fp:
        return {'action': STOP, 'message': (
            '%s=%r is not a SHA-256 fingerprint: give the fingerprint of the CA to replace, as '
            'openssl x509 -noout -fingerprint -sha256 -in <its ca.crt> prints it.' % (rotate_variable, rotate))}
    held_fps = sorted(set(certificate_fingerprint(value) for _host, value in held
                          if kind == 'certificate' and _comparable(kind, value)))
    mine_fp = certificate_fingerprint(candidate) if kind == 'certificate' and cache_present else ''

    if store_present == len(store_files):
        if rotate_fp and rotate_fp == mine_fp:
            return {'action': ROTATE, 'message': (
                '%s %s is replaced as %s asks: a new one is generated and written to %s.'
                % (label, mine_fp, rotate_variable, _names(store_files)))}
        return {'action': STORE, 'message': '%s comes from %s.' % (label, _names(store_files))}

    if store_present > 0:
        return {'action': STOP, 'message': (
            '%s is incomplete in the store: it needs all of %s, and only %d of them exist. Restore the missing '
            'file(s) from the inventory repository (git log -- <file>) or from the checkout that made them; '
            'nothing was changed.' % (label, _names(store_files), store_present))}

    if rotate_fp and rotate_fp in held_fps:
        return {'action': ROTATE, 'message': (
            '%s %s (held by %s) is replaced as %s asks: a new one is generated and written to %s.'
            % (label, rotate_fp, _names(holders), rotate_variable, _names(store_files)))}

    if cache_present:
        differ = [host for host, value in held if _comparable(kind, value) and not _same(kind, value, candidate)]
        if differ:
            return {'action': STOP, 'message': (
                '%s in this controller\'s working copy (%s) is not in the store (%s), and it is not the one %s '
                'hold%s at %s: using it would replace the cluster\'s under the running cluster, so nothing was '
                'changed. Get the one the cluster uses into the store (pull the commit that added %s, or run once '
                'from the checkout whose working copy has it), or set %s; remove the stale working copy.'
                % (label, _names(cache_files), _names(store_files), _names(differ), '' if len(differ) > 1 else 's',
                   node_path, _names(store_files), instead))}
        return {'action': IMPORT, 'message': (
            '%s is taken from this controller\'s working copy (%s) into the store (%s).'
            % (label, _names(cache_files), _names(store_files)))}

    if holders:
        message = (
            '%s is not in this checkout\'s store (%s), but the cluster already has one: %s hold%s %s. Generating '
            'a new one would replace it under the running cluster, so nothing was changed. Bring the existing '
            'one to this checkout: pull the commit that added %s (the checkout that made it wrote it there and '
            'must commit it), or, for secrets made by a release before the store, run once from the checkout '
            'whose working copy (%s) has it, which encrypts it into the store; or set %s.'
            % (label, _names(store_files), _names(holders), '' if len(holders) > 1 else 's', node_path,
               _names(store_files), _names(cache_files), instead))
        if kind == 'password':
            message += ' Its current value is in %s on %s.' % (node_path, _names(holders))
        if rotatable:
            if len(held_fps) == 1:
                named = held_fps[0]
            elif held_fps:
                named = '<one of %s>' % ', '.join(held_fps)
            else:
                named = '<the SHA-256 fingerprint of its certificate>'
            message += (' To replace it on purpose with a new one (every node certificate is reissued, and '
                        'clients must then trust the new CA), run once with -e %s=%s.' % (rotate_variable, named))
        return {'action': STOP, 'message': message}

    return {'action': GENERATE, 'message': '%s is new: it is generated and written to %s.' % (label, _names(store_files))}


def munge_key_plan(controller, key_path, controller_key, controller_record, records=None):
    """Whether the munge key on the Slurm controller host may be the cluster's key.

    controller         the controller host
    key_path           where munge keeps the key (for messages)
    controller_key     SHA-256 of the controller host's key file ('' when it has none)
    controller_record  the SHA-256 recorded on the controller host as the cluster key's ('' none)
    records            None before the other nodes were read; then [(host, recorded SHA-256 or '')]
    Returns {'action': 'use' | 'create' | 'read' | 'stop', 'message': text}: 'read' asks for the nodes'
    records (the controller host's key is not the one recorded there); 'create' makes the first key of
    a new cluster. The checksums are of the key, never the key; no message names one.
    """
    if controller_key and controller_key == controller_record:
        return {'action': 'use', 'message': 'the munge key on %s is the cluster key it recorded.' % controller}
    if records is None:
        return {'action': 'read', 'message': (
            'the munge key on %s is not recorded there as the cluster key: reading what the nodes recorded.'
            % controller)}
    recorded = {}
    for host, value in records:
        if host != controller and value:
            recorded.setdefault(value.strip(), []).append(host)
    if not recorded:
        if controller_key:
            return {'action': 'use', 'message': (
                'no node has recorded a cluster munge key yet: the key on %s becomes the cluster key.' % controller)}
        return {'action': 'create', 'message': (
            'no node has a cluster munge key yet: one is created on %s and copied to every node.' % controller)}
    if list(recorded) == [controller_key]:
        return {'action': 'use', 'message': 'the munge key on %s is the one the nodes recorded.' % controller}
    if len(recorded) > 1:
        groups = '; '.join('%s hold one key' % _names(hosts) for hosts in sorted(sorted(h) for h in recorded.values()))
        return {'action': 'stop', 'message': (
            'the nodes were given different cluster munge keys (%s): munge on one group refuses the other\'s '
            'credentials. Nothing was changed. Choose the cluster\'s key, copy it to %s:%s (mode 0400, owner '
            'munge) or set slurm_munge_key (from Vault) to it, and rerun.' % (groups, controller, key_path))}
    hosts = sorted(list(recorded.values())[0])
    if controller_key:
        state = ('holds a munge key (%s) that is not the cluster key the other nodes were given (it was '
                 'reinstalled, or its key was replaced by hand)' % key_path)
        would = 'Copying it to every node'
    else:
        state = 'has no munge key (%s)' % key_path
        would = 'Creating one there and copying it to every node'
    message = ('the Slurm controller host %s %s, while %s hold%s the cluster key, recorded by an earlier run. %s '
               'would replace the key under the running cluster (munge would refuse every node\'s credentials), so '
               'nothing was changed. Copy %s from %s to %s (mode 0400, owner munge), or set slurm_munge_key (from '
               'Vault) to the cluster key, and rerun.')
    return {'action': 'stop', 'message': message % (controller, state, _names(hosts), '' if len(hosts) > 1 else 's',
                                                    would, key_path, hosts[0], controller)}
