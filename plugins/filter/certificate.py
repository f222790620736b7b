# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether a node certificate the controller issued is still what the monitoring role would issue.

The monitoring role keeps a key and a certificate per node on the controller, signed by the cluster's
CA. Making the signing request, reading the certificate's dates and asking community.crypto to sign
costs four module runs per node on every run. This filter reads the files on the controller (in the
play's own process, no module run) and says why the certificate must be (re)made, or '' when it is
current: then those tasks are skipped. It only ever decides to skip when every property the tasks set
holds; anything it cannot read or does not recognise is a reason, and the community.crypto tasks run
as before and report any real problem themselves.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import datetime
import ipaddress
import os
import stat

try:
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    HAS_CRYPTOGRAPHY = True
except ImportError:  # pragma: no cover - the controller requirements install it
    HAS_CRYPTOGRAPHY = False

from ansible_collections.gpucluster.core.plugins.module_utils.text_bounds import quote

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - only without ansible-core installed
    class AnsibleFilterError(Exception):
        pass


def _name(entry):
    """'DNS:x' or 'IP:<canonical address>' for a wanted name or a certificate's GeneralName."""
    if isinstance(entry, str):
        kind, _sep, value = entry.partition(':')
        if kind == 'IP':
            return 'IP:' + str(ipaddress.ip_address(value))
        return kind + ':' + value
    if isinstance(entry, x509.DNSName):
        return 'DNS:' + entry.value
    if isinstance(entry, x509.IPAddress):
        return 'IP:' + str(entry.value)
    return 'other:' + repr(entry)


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


# A PEM key or certificate is a few kilobytes; a larger file is no certificate of this role.
MAX_PEM_BYTES = 1 << 20


def _read(path):
    with open(path, 'rb') as handle:
        data = handle.read(MAX_PEM_BYTES + 1)
    if len(data) > MAX_PEM_BYTES:
        raise ValueError('larger than %d bytes' % MAX_PEM_BYTES)
    return data


def ca_renewal_reason(ca, ca_cert_path, renew_days, now):
    """Why the CA certificate itself must be renewed before any node certificate is current, or ''.

    A CA that has expired, is not valid yet, or ends within ``renew_days`` makes every certificate it
    signed fail (or soon fail) verification, however long the node certificate itself still runs: the
    CA is renewed first, then the node certificates are issued again under it.
    """
    ends = ca.not_valid_after_utc
    if ca.not_valid_before_utc > now:
        return ('the CA certificate %s is not valid yet (from %s): renew the CA first, then this node certificate'
                % (ca_cert_path, ca.not_valid_before_utc.strftime('%Y-%m-%d %H:%M UTC')))
    if ends <= now:
        return ('the CA certificate %s has expired (%s): renew the CA first, then this node certificate'
                % (ca_cert_path, ends.strftime('%Y-%m-%d %H:%M UTC')))
    if ends - now <= datetime.timedelta(days=renew_days):
        return ('the CA certificate %s ends within %d days (%s): renew the CA first, then this node certificate'
                % (ca_cert_path, renew_days, ends.strftime('%Y-%m-%d %H:%M UTC')))
    return ''


def _extension(cert, oid_class):
    try:
        return cert.extensions.get_extension_for_class(oid_class).value
    except x509.ExtensionNotFound:
        return None


def certificate_renewal_reason(cert_path, key_path, ca_cert_path, common_name, names, renew_days=30, now=None):
    """Filter: why the node certificate at ``cert_path`` must be (re)made; '' when it is current.

    Current means: the key (ECC secp384r1, mode 0600) and the certificate (mode 0644) exist, the
    certificate holds that key's public key, names exactly ``common_name`` as its subject and exactly
    ``names`` ('DNS:...', 'IP:...') as its alternative names, is for server and client use and not a CA,
    was signed by the CA certificate at ``ca_cert_path`` and is valid for more than ``renew_days``, and
    the CA certificate itself is valid for more than ``renew_days`` (:func:`ca_renewal_reason`: a CA that
    has expired or ends inside the window is a reason, which says the CA must be renewed first).
    """
    if not isinstance(renew_days, int) or isinstance(renew_days, bool) or renew_days < 0:
        raise AnsibleFilterError('certificate_renewal_reason: renew_days must be a whole number of days >= 0, got %s'
                                 % (quote(renew_days),))
    if not HAS_CRYPTOGRAPHY:
        return 'the controller has no Python cryptography library to read it'
    for path, what in ((key_path, 'key'), (cert_path, 'certificate'), (ca_cert_path, 'CA certificate')):
        if not os.path.isfile(path):
            return 'no %s at %s' % (what, path)
    try:
        wanted = sorted(set(_name(n) for n in names))
    except ValueError as exc:
        raise AnsibleFilterError('certificate_renewal_reason: a wanted name is not valid: %s' % exc)
    if _mode(key_path) != 0o600:
        return 'the key %s has mode %04o, not 0600' % (key_path, _mode(key_path))
    if _mode(cert_path) != 0o644:
        return 'the certificate %s has mode %04o, not 0644' % (cert_path, _mode(cert_path))
    try:
        key = serialization.load_pem_private_key(_read(key_path), password=None)
        cert = x509.load_pem_x509_certificate(_read(cert_path))
        ca = x509.load_pem_x509_certificate(_read(ca_cert_path))
    except (ValueError, TypeError, IOError, OSError) as exc:
        return 'cannot read the key or the certificates: %s' % (exc.__class__.__name__,)
    now = now or datetime.datetime.now(datetime.timezone.utc)
    reason = ca_renewal_reason(ca, ca_cert_path, renew_days, now)
    if reason:
        return reason
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name != 'secp384r1':
        return 'the key is not an ECC secp384r1 key'
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    if (cert.public_key().public_bytes(serialization.Encoding.DER, spki)
            != key.public_key().public_bytes(serialization.Encoding.DER, spki)):
        return 'the certificate is not for the key'
    if cert.issuer != ca.subject:
        return 'the certificate was issued by another CA'
    try:
        cert.verify_directly_issued_by(ca)
    except InvalidSignature:
        return 'the CA did not sign the certificate (its signature does not verify)'
    except (ValueError, TypeError) as exc:
        return 'the CA did not sign the certificate: %s' % (exc,)
    if cert.not_valid_before_utc > now:
        return 'the certificate is not valid yet'
    if cert.not_valid_after_utc <= now:
        return 'the certificate has expired'
    if cert.not_valid_after_utc - now <= datetime.timedelta(days=renew_days):
        return 'the certificate ends within %d days' % renew_days
    if cert.subject != x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]):
        return 'the certificate names %s, not CN=%s' % (cert.subject.rfc4514_string(), common_name)
    san = _extension(cert, x509.SubjectAlternativeName)
    found = sorted(set(_name(n) for n in san)) if san is not None else []
    if found != wanted:
        return 'the certificate is for %s, not %s' % (', '.join(found) or 'no names', ', '.join(wanted))
    usage = _extension(cert, x509.ExtendedKeyUsage)
    if usage is None or set(usage) != {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}:
        return 'the certificate is not for server and client use only'
    constraints = _extension(cert, x509.BasicConstraints)
    if constraints is None or constraints.ca:
        return 'the certificate does not say it is not a CA'
    return ''


def certificate_ca_renewal_reason(ca_cert_path, renew_days=30, now=None):
    """Filter: why the CA certificate at ``ca_cert_path`` must be renewed (expired, not valid yet, or ending
    within ``renew_days``), or '' when it is current or there is none yet (a new cluster makes one)."""
    if not isinstance(renew_days, int) or isinstance(renew_days, bool) or renew_days < 0:
        raise AnsibleFilterError('certificate_ca_renewal_reason: renew_days must be a whole number of days >= 0, got %s'
                                 % (quote(renew_days),))
    if not HAS_CRYPTOGRAPHY or not os.path.isfile(ca_cert_path):
        return ''
    try:
        ca = x509.load_pem_x509_certificate(_read(ca_cert_path))
    except (ValueError, TypeError, IOError, OSError) as exc:
        return 'cannot read the CA certificate %s: %s' % (ca_cert_path, exc.__class__.__name__)
    return ca_renewal_reason(ca, ca_cert_path, renew_days, now or datetime.datetime.now(datetime.timezone.utc))


class FilterModule(object):
    def filters(self):
        return {'certificate_renewal_reason': certificate_renewal_reason,
                'certificate_ca_renewal_reason': certificate_ca_renewal_reason}
