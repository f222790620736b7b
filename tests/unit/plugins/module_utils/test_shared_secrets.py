# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""shared_secrets: where a generated secret comes from, and when a checkout must stop instead of making one."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import datetime
import hashlib

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from cryptography.x509.oid import NameOID
from hypothesis import given, settings, strategies as st

from ansible_collections.gpucluster.core.plugins.module_utils import shared_secrets as ss

STORE = ['/inv/.secrets/monitoring-pki/ca.key', '/inv/.secrets/monitoring-pki/ca.crt']
CACHE = ['/inv/.credentials/monitoring-pki/ca.key', '/inv/.credentials/monitoring-pki/ca.crt']
NODE_CA = '/etc/gpucluster-monitoring/tls/ca.crt'
NOW = datetime.datetime(2026, 12, 2, tzinfo=datetime.timezone.utc)


def _ca_pem(cn):
    # Ed25519 signatures are deterministic: the same certificate (and test ids) in every pytest worker.
    key = ed25519.Ed25519PrivateKey.from_private_bytes(hashlib.sha256(cn.encode()).digest())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(NOW).not_valid_after(NOW + datetime.timedelta(days=3650))
            .sign(key, None))
    return cert, cert.public_bytes(serialization.Encoding.PEM).decode()


CA_A, PEM_A = _ca_pem('A')
CA_B, PEM_B = _ca_pem('B')
FP_A = ':'.join('%02X' % b for b in CA_A.fingerprint(hashes.SHA256()))
FP_B = ':'.join('%02X' % b for b in CA_B.fingerprint(hashes.SHA256()))


def test_certificate_fingerprint_is_openssls():
    assert ss.certificate_fingerprint(PEM_A) == FP_A
    assert ss.certificate_fingerprint('junk before\n' + PEM_B + 'junk after') == FP_B
    assert ss.certificate_fingerprint(PEM_A + PEM_B) == FP_A   # the first certificate of a bundle


@pytest.mark.parametrize('text', [
    '', None, 42, 'no certificate here', '-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n',
    '-----BEGIN CERTIFICATE-----\nnot*base64!\n-----END CERTIFICATE-----\n',
    '-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n',
])
def test_certificate_fingerprint_of_no_certificate_is_empty(text):
    assert ss.certificate_fingerprint(text) == ''


@pytest.mark.parametrize('given_, expected', [
    (FP_A, FP_A),
    (FP_A.lower(), FP_A),
    (FP_A.replace(':', ''), FP_A),
    ('sha256 Fingerprint=' + FP_A, FP_A),              # openssl x509 -noout -fingerprint -sha256
    ('SHA256 Fingerprint=' + FP_A + '\n', FP_A),
    (FP_A[:-3], ''),                                    # 31 bytes
    (FP_A + ':00', ''),                                 # 33 bytes
    ('ZZ' + FP_A[2:], ''),
    ('true', ''),
    ('', ''),
    (None, ''),
])
def test_normalize_fingerprint(given_, expected):
    assert ss.normalize_fingerprint(given_) == expected


def _plan(store_present=0, cache_present=False, candidate='', held=(), kind='certificate', rotate='', rotatable=True):
    return ss.plan_secret('the monitoring CA', kind, STORE, store_present, CACHE, cache_present, candidate, list(held),
                          node_path=NODE_CA, instead='monitoring_tls_ca_cert and monitoring_tls_ca_key',
                          rotate=rotate, rotatable=rotatable)


# (store files present, working copy present, working copy's CA, what nodes hold, rotate) -> action
CA_TABLE = [
    # The store has it: used, whatever a node holds (the store is the cluster's record).
    (2, True, PEM_A, [], '', ss.STORE),
    (2, True, PEM_A, [('node1', PEM_B)], '', ss.STORE),
    # A new cluster: nothing anywhere.
    (0, False, '', [], '', ss.GENERATE),
    (0, False, '', [('node1', None), ('node2', '')], '', ss.GENERATE),
    # A checkout without the store while the cluster holds a CA: stop.
    (0, False, '', [('node2', PEM_A)], '', ss.STOP),
    (0, False, '', [('node2', 'garbled, not PEM')], '', ss.STOP),
    (0, False, '', [('node1', True)], '', ss.STOP),
    # The store is half there: stop (never generate the other half).
    (1, True, PEM_A, [], '', ss.STOP),
    (1, False, '', [], '', ss.STOP),
    # An earlier release's working copy: taken into the store when no node holds another.
    (0, True, PEM_A, [], '', ss.IMPORT),
    (0, True, PEM_A, [('node1', PEM_A), ('node2', PEM_A)], '', ss.IMPORT),
    (0, True, PEM_A, [('node1', True)], '', ss.IMPORT),
    (0, True, PEM_A, [('node1', 'garbled')], '', ss.IMPORT),
    (0, True, PEM_A, [('node1', PEM_A), ('node3', PEM_B)], '', ss.STOP),
    # Rotation on purpose: only the CA in use, named by its fingerprint.
    (2, True, PEM_A, [], FP_A, ss.ROTATE),
    (2, True, PEM_A, [], FP_A.lower().replace(':', ''), ss.ROTATE),
    (2, True, PEM_A, [], FP_B, ss.STORE),                 # already rotated: a value left set does nothing
    (0, False, '', [('node1', PEM_A)], FP_A, ss.ROTATE),  # the key is lost everywhere: replace what nodes hold
    (0, False, '', [('node1', PEM_A)], FP_B, ss.STOP),    # names no CA the nodes hold
    (0, True, PEM_B, [('node1', PEM_A)], FP_A, ss.ROTATE),
    (2, True, PEM_A, [], 'true', ss.STOP),                # not a fingerprint: said, never guessed
]


@pytest.mark.parametrize('store_present, cache_present, candidate, held, rotate, action', CA_TABLE)
def test_ca_plan(store_present, cache_present, candidate, held, rotate, action):
    assert _plan(store_present, cache_present, candidate, held, rotate=rotate)['action'] == action


def test_stop_for_a_clone_without_the_store_names_the_files_the_hosts_and_the_rotation():
    message = _plan(held=[('node2', PEM_A), ('node3', PEM_A), ('node1', None)])['message']
    for part in STORE + CACHE + ['node2, node3 hold', NODE_CA, 'monitoring_tls_ca_cert and monitoring_tls_ca_key',
                                 'nothing was changed', '-e monitoring_ca_rotate=' + FP_A]:
        assert part in message, part
    assert 'node1' not in message


def test_stop_lists_every_ca_the_nodes_hold_when_they_differ():
    message = _plan(held=[('node1', PEM_A), ('node2', PEM_B)])['message']
    assert FP_A in message and FP_B in message


def test_stop_for_a_stale_working_copy_names_the_nodes_that_differ():
    decision = _plan(cache_present=True, candidate=PEM_B, held=[('node1', PEM_A), ('node2', PEM_B)])
    assert decision['action'] == ss.STOP
    assert 'node1 holds' in decision['message'] and 'node2' not in decision['message']


def test_password_stop_names_where_the_value_is_and_never_the_value():
    decision = ss.plan_secret('the scrape password', 'password', ['/inv/.secrets/monitoring_scrape_password'], 0,
                              ['/inv/.credentials/monitoring_scrape_password'], False, '',
                              [('node1', 'Sup3rSecretValue0000000000000000')],
                              node_path='/etc/gpucluster-monitoring/scrape.password',
                              instead='monitoring_scrape_password (from Vault)')
    assert decision['action'] == ss.STOP
    assert 'Sup3rSecretValue' not in decision['message']
    assert 'is in /etc/gpucluster-monitoring/scrape.password on node1' in decision['message']
    assert 'monitoring_scrape_password (from Vault)' in decision['message']
    assert 'monitoring_ca_rotate' not in decision['message']


@pytest.mark.parametrize('candidate, held, action', [
    ('pw0123', [('node1', 'pw0123')], ss.IMPORT),
    ('pw0123\n', [('node1', 'pw0123')], ss.IMPORT),      # an earlier release's file ends with a newline
    ('pw0123', [('node1', 'pw0124')], ss.STOP),
    ('pw0123', [('node1', True)], ss.IMPORT),             # a web config naming the user: nothing to compare
])
def test_password_import_compares_with_the_server(candidate, held, action):
    decision = ss.plan_secret('the scrape password', 'password', ['/s/p'], 0, ['/c/p'], True, candidate, held)
    assert decision['action'] == action
    assert 'pw0123' not in decision['message'] and 'pw0124' not in decision['message']


def test_passwords_are_never_rotated():
    decision = ss.plan_secret('the scrape password', 'password', ['/s/p'], 1, ['/c/p'], True, 'x', [], rotate=FP_A)
    assert decision['action'] == ss.STORE


def test_unknown_kind_is_refused():
    with pytest.raises(ValueError, match='kind'):
        ss.plan_secret('x', 'token', ['/s/x'], 0, ['/c/x'], False, '', [])


@settings(max_examples=60)
@given(store=st.integers(0, 2), cache=st.booleans(), candidate=st.sampled_from(['', PEM_A, PEM_B]),
       held=st.lists(st.tuples(st.sampled_from(['node1', 'node2']), st.sampled_from([None, '', True, PEM_A, PEM_B])),
                     max_size=3),
       rotate=st.sampled_from(['', FP_A, FP_B]))
def test_a_ca_the_nodes_hold_is_never_replaced_unless_named(store, cache, candidate, held, rotate):
    """The property the issue asks for: without the store, a CA some node holds is only replaced by the
    working copy's identical one, or on purpose (its fingerprint named)."""
    decision = _plan(store, cache, candidate if cache else '', held, rotate=rotate)
    assert decision['action'] in ss.ACTIONS
    node_fps = set(ss.certificate_fingerprint(v) for _h, v in held if isinstance(v, str) and v)
    holds = any(v is True or (isinstance(v, str) and v) for _h, v in held)
    if store < 2 and holds and decision['action'] in (ss.GENERATE, ss.IMPORT, ss.ROTATE):
        named = rotate and decision['action'] == ss.ROTATE and rotate in node_fps | {ss.certificate_fingerprint(candidate)}
        same = decision['action'] == ss.IMPORT and node_fps - {''} <= {ss.certificate_fingerprint(candidate)}
        assert named or same, (store, cache, held, rotate, decision)
    if store < 2:
        assert decision['action'] != ss.STORE


KEY_A, KEY_B = 'a' * 64, 'b' * 64


@pytest.mark.parametrize('key, record, records, action', [
    # The normal rerun: the controller host's key is the one it recorded; no node is read.
    (KEY_A, KEY_A, None, 'use'),
    (KEY_A, KEY_A + '\n', None, 'read'),                          # the filter strips; the function compares exactly
    # Anything else reads the nodes' records first.
    (KEY_A, '', None, 'read'),
    ('', '', None, 'read'),
    (KEY_B, KEY_A, None, 'read'),
    # A new cluster, or the first run of this release on a running one (nothing recorded yet).
    (KEY_A, '', [('ctl', ''), ('node2', '')], 'use'),
    ('', '', [('ctl', ''), ('node2', '')], 'create'),
    ('', '', [], 'create'),
    # The controller host lost its record but holds the cluster key.
    (KEY_A, '', [('ctl', ''), ('node2', KEY_A), ('node3', KEY_A)], 'use'),
    # Reinstalled controller host: a new key, or none, while the nodes recorded the cluster's.
    (KEY_B, '', [('ctl', ''), ('node2', KEY_A)], 'stop'),
    ('', '', [('ctl', ''), ('node2', KEY_A)], 'stop'),
    (KEY_B, KEY_A, [('ctl', KEY_A), ('node2', KEY_A)], 'stop'),    # its key replaced by hand
    # Nodes disagree: never pick one.
    (KEY_A, '', [('node2', KEY_A), ('node3', KEY_B)], 'stop'),
    # The controller's own record is not evidence about the cluster.
    (KEY_B, KEY_A, [('ctl', KEY_A)], 'use'),
])
def test_munge_key_plan(key, record, records, action):
    assert ss.munge_key_plan('ctl', '/etc/munge/munge.key', key, record, records)['action'] == action


def test_munge_stop_names_the_host_to_copy_from_and_the_variable():
    message = ss.munge_key_plan('ctl', '/etc/munge/munge.key', '', '', [('node3', KEY_A), ('node2', KEY_A)])['message']
    for part in ('ctl has no munge key', 'node2, node3 hold the cluster key', 'Copy /etc/munge/munge.key from node2 to ctl',
                 'slurm_munge_key', 'nothing was changed'):
        assert part in message, part
    message = ss.munge_key_plan('ctl', '/etc/munge/munge.key', KEY_B, '', [('node2', KEY_A)])['message']
    assert 'not the cluster key' in message and 'Copying it to every node' in message
    assert KEY_A not in message and KEY_B not in message
    message = ss.munge_key_plan('ctl', '/k', KEY_A, '', [('node2', KEY_A), ('node3', KEY_B), ('node4', KEY_B)])['message']
    assert 'node2 hold one key' in message and 'node3, node4 hold one key' in message
