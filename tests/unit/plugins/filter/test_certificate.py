# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""certificate_renewal_reason: a node certificate is skipped only while everything about it holds."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import datetime
import ipaddress
import os

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ansible.errors import AnsibleFilterError
from ansible_collections.gpucluster.core.plugins.filter.certificate import certificate_renewal_reason

NOW = datetime.datetime(2026, 12, 2, 12, 0, tzinfo=datetime.timezone.utc)
NAMES = ['IP:10.20.0.11', 'DNS:node1.cluster', 'DNS:node1']


def _ec():
    return ec.generate_private_key(ec.SECP384R1())


def _ca(key, cn='gpucluster monitoring CA'):
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    return (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(NOW - datetime.timedelta(days=10))
            .not_valid_after(NOW + datetime.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .sign(key, hashes.SHA256()))


def _node(key, ca_cert, ca_key, cn='node1', names=None, days=(-1, 730), usages=None, ca_flag=False,
          constraints=True):
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
               .issuer_name(ca_cert.subject).public_key(key.public_key()).serial_number(2)
               .not_valid_before(NOW + datetime.timedelta(days=days[0]))
               .not_valid_after(NOW + datetime.timedelta(days=days[1])))
    general = []
    for entry in (NAMES if names is None else names):
        kind, value = entry.split(':', 1)
        general.append(x509.IPAddress(ipaddress.ip_address(value)) if kind == 'IP' else x509.DNSName(value))
    if general:
        builder = builder.add_extension(x509.SubjectAlternativeName(general), critical=False)
    builder = builder.add_extension(
        x509.ExtendedKeyUsage(usages or [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
        critical=False)
    if constraints:
        builder = builder.add_extension(x509.BasicConstraints(ca=ca_flag, path_length=None), critical=False)
    return builder.sign(ca_key, hashes.SHA256())


def _write(path, data, mode):
    path.write_bytes(data)
    os.chmod(str(path), mode)


def _key_pem(key):
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _cert_pem(cert):
    return cert.public_bytes(serialization.Encoding.PEM)


@pytest.fixture
def pki(tmp_path):
    """A CA and node1's current key and certificate, as the role leaves them; ``check()`` asks the filter."""
    ca_key = _ec()
    ca_cert = _ca(ca_key)
    key = _ec()
    _write(tmp_path / 'ca.crt', _cert_pem(ca_cert), 0o644)
    _write(tmp_path / 'node1.key', _key_pem(key), 0o600)

    def issue(**kwargs):
        _write(tmp_path / 'node1.crt', _cert_pem(_node(kwargs.pop('key', key), ca_cert, kwargs.pop('ca_key', ca_key),
                                                       **kwargs)), 0o644)

    def check(names=None, cn='node1', renew_days=30):
        return certificate_renewal_reason(str(tmp_path / 'node1.crt'), str(tmp_path / 'node1.key'),
                                          str(tmp_path / 'ca.crt'), cn, NAMES if names is None else names,
                                          renew_days, now=NOW)

    issue()
    check.issue = issue
    check.dir = tmp_path
    check.key = key
    check.ca_cert = ca_cert
    return check


def test_a_current_certificate_has_no_reason(pki):
    assert pki() == ''
    # The same names in another order or spelling are the same set.
    assert pki(names=['DNS:node1', 'DNS:node1.cluster', 'IP:10.20.0.11', 'DNS:node1']) == ''


def test_an_ipv6_address_is_compared_in_its_canonical_form(pki):
    pki.issue(names=['IP:2001:db8::11', 'DNS:node1'])
    assert pki(names=['IP:2001:0db8:0:0::0011', 'DNS:node1']) == ''


@pytest.mark.parametrize('name, what', [('node1.crt', 'certificate'), ('node1.key', 'key'),
                                        ('ca.crt', 'CA certificate')])
def test_a_missing_file_is_a_reason(pki, name, what):
    os.remove(str(pki.dir / name))
    assert pki() == 'no %s at %s' % (what, pki.dir / name)


def test_modes_the_role_sets_are_checked(pki):
    os.chmod(str(pki.dir / 'node1.key'), 0o640)
    assert pki() == 'the key %s has mode 0640, not 0600' % (pki.dir / 'node1.key')
    os.chmod(str(pki.dir / 'node1.key'), 0o600)
    os.chmod(str(pki.dir / 'node1.crt'), 0o600)
    assert pki() == 'the certificate %s has mode 0600, not 0644' % (pki.dir / 'node1.crt')


def test_a_key_of_another_kind_is_a_reason(pki):
    other = ec.generate_private_key(ec.SECP256R1())
    _write(pki.dir / 'node1.key', _key_pem(other), 0o600)
    pki.issue(key=other)
    assert pki() == 'the key is not an ECC secp384r1 key'
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write(pki.dir / 'node1.key', _key_pem(rsa_key), 0o600)
    assert pki() == 'the key is not an ECC secp384r1 key'


def test_unreadable_files_are_a_reason_not_an_error(pki):
    _write(pki.dir / 'node1.crt', b'-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n', 0o644)
    assert pki() == 'cannot read the key or the certificates: ValueError'


def test_a_certificate_for_another_key(pki):
    pki.issue(key=_ec())
    assert pki() == 'the certificate is not for the key'


def test_a_certificate_from_another_ca(pki):
    other_key = _ec()
    pki.issue(ca_key=other_key)
    assert pki() == 'the CA did not sign the certificate (its signature does not verify)'
    other_ca = _ca(other_key, cn='another CA')
    _write(pki.dir / 'ca.crt', _cert_pem(other_ca), 0o644)
    assert pki() == 'the certificate was issued by another CA'


@pytest.mark.parametrize('days, renew, reason', [
    ((-1, 31), 30, ''),
    ((-1, 30), 30, 'the certificate ends within 30 days'),
    ((-1, 5), 0, ''),
    ((-800, -1), 0, 'the certificate has expired'),
    ((1, 700), 30, 'the certificate is not valid yet'),
])
def test_the_renewal_window(pki, days, renew, reason):
    pki.issue(days=days)
    assert pki(renew_days=renew) == reason


def test_names_must_match_exactly(pki):
    assert pki(cn='node1.cluster') == 'the certificate names CN=node1, not CN=node1.cluster'
    assert pki(names=NAMES + ['DNS:grafana.cluster']) == (
        'the certificate is for DNS:node1, DNS:node1.cluster, IP:10.20.0.11, not DNS:grafana.cluster, DNS:node1, '
        'DNS:node1.cluster, IP:10.20.0.11')
    assert pki(names=['IP:10.20.0.12', 'DNS:node1', 'DNS:node1.cluster']).startswith('the certificate is for ')
    pki.issue(names=[])
    assert pki() == ('the certificate is for no names, not DNS:node1, DNS:node1.cluster, IP:10.20.0.11')


def test_usage_and_constraints(pki):
    pki.issue(usages=[ExtendedKeyUsageOID.SERVER_AUTH])
    assert pki() == 'the certificate is not for server and client use only'
    pki.issue(ca_flag=True)
    assert pki() == 'the certificate does not say it is not a CA'
    pki.issue(constraints=False)
    assert pki() == 'the certificate does not say it is not a CA'


@pytest.mark.parametrize('renew', [-1, '30', True, 1.5])
def test_bad_renew_days_is_an_error(pki, renew):
    with pytest.raises(AnsibleFilterError, match='renew_days must be a whole number of days >= 0'):
        pki(renew_days=renew)


def test_a_wanted_name_that_is_not_an_address_is_an_error(pki):
    with pytest.raises(AnsibleFilterError, match='a wanted name is not valid'):
        pki(names=['IP:node1'])
