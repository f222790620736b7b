# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fingerprints of OpenPGP public keys, so a repository key is checked before it is trusted.

The roles fetch a vendor's signing key (``uri`` with ``return_content``), hand the text here and
compare the primary keys' fingerprints with the published value held in a variable; only then is
the key written where apt or rpm trust it. Pure Python (no gpg on the controller or the node):
ASCII armour (RFC 4880 section 6, CRC-24 checked when present), old and new packet headers, and
the fingerprint of version 4 (SHA-1), 5 and 6 (SHA-256) public-key packets (RFC 4880 12.2,
RFC 9580 5.5.4). Subkeys are not reported: a key is trusted through its primary key.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import base64
import binascii
import hashlib
import re

from ansible_collections.gpucluster.core.plugins.module_utils.text_bounds import quote

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - only without ansible-core installed
    class AnsibleFilterError(Exception):
        pass


ARMOR_RE = re.compile(
    r'-----BEGIN PGP PUBLIC KEY BLOCK-----[ \t]*\r?\n(?P<body>.*?)\r?\n-----END PGP PUBLIC KEY BLOCK-----',
    re.DOTALL)
FINGERPRINT_RE = re.compile(r'^(?:[0-9A-F]{40}|[0-9A-F]{64})\Z')
TAG_PUBLIC_KEY = 6
CRC24_INIT = 0xB704CE
CRC24_POLY = 0x1864CFB


class OpenPGPError(ValueError):
    """The text is not an OpenPGP public key this module can read."""


def _crc24(data):
    crc = CRC24_INIT
    for octet in bytearray(data):
        crc ^= octet << 16
        for _bit in range(8):
            crc <<= 1
            if crc & 0x1000000:
                crc ^= CRC24_POLY
    return crc & 0xFFFFFF


def _dearmor(body):
    """Decode one armoured block's body (headers, base64 lines, optional =CRC line)."""
    lines = [line.strip() for line in body.splitlines()]
    # Armour headers ("Version: ...", "Comment: ...") end at the first blank line.
    if '' in lines and all(':' in line for line in lines[:lines.index('')]):
        lines = lines[lines.index('') + 1:]
    checksum = None
    if lines and lines[-1].startswith('=') and len(lines[-1]) == 5:
        checksum = lines.pop()[1:]
    try:
        data = base64.b64decode(''.join(lines).encode('ascii'), validate=True)
    except (binascii.Error, ValueError, UnicodeEncodeError):
        raise OpenPGPError('the armoured key is not valid base64')
    if checksum is not None:
        try:
            expected = bytearray(base64.b64decode(checksum.encode('ascii'), validate=True))
        except (binascii.Error, ValueError, UnicodeEncodeError):
            raise OpenPGPError('the armour checksum line is not valid base64')
        if len(expected) != 3 or _crc24(data) != (expected[0] << 16 | expected[1] << 8 | expected[2]):
            raise OpenPGPError('the armour checksum does not match the key data (damaged or altered download)')
    return data


def _packets(data):
    """Yield (tag, body) for each packet of a binary OpenPGP message."""
    data = bytearray(data)
    pos = 0
    while pos < len(data):
        header = data[pos]
        if not header & 0x80:
            raise OpenPGPError('byte %d is not an OpenPGP packet header' % pos)
        if header & 0x40:  # new format
            tag = header & 0x3F
            pos += 1
            if pos >= len(data):
                raise OpenPGPError('truncated packet header')
            first = data[pos]
            if first < 192:
                length, pos = first, pos + 1
            elif first < 224:
                if pos + 1 >= len(data):
                    raise OpenPGPError('truncated packet length')
                length, pos = ((first - 192) << 8) + data[pos + 1] + 192, pos + 2
            elif first == 255:
                if pos + 4 >= len(data):
                    raise OpenPGPError('truncated packet length')
                length = int(binascii.hexlify(bytes(data[pos + 1:pos + 5])), 16)
                pos += 5
            else:
                raise OpenPGPError('partial body lengths are not allowed in a key')
        else:  # old format
            tag = (header >> 2) & 0x0F
            length_type = header & 0x03
            pos += 1
            if length_type == 3:
                length = len(data) - pos
            else:
                size = 1 << length_type
                if pos + size > len(data):
                    raise OpenPGPError('truncated packet length')
                length = int(binascii.hexlify(bytes(data[pos:pos + size])), 16)
                pos += size
        if pos + length > len(data):
            raise OpenPGPError('truncated packet (tag %d)' % tag)
        yield tag, bytes(data[pos:pos + length])
        pos += length


def _fingerprint(body):
    version = bytearray(body[:1])[0] if body else 0
    if version == 4:
        return hashlib.sha1(b'\x99' + bytearray([len(body) >> 8 & 0xFF, len(body) & 0xFF]) + body).hexdigest().upper()
    if version in (5, 6):
        prefix = b'\x9a' if version == 5 else b'\x9b'
        size = bytearray([len(body) >> 24 & 0xFF, len(body) >> 16 & 0xFF, len(body) >> 8 & 0xFF, len(body) & 0xFF])
        return hashlib.sha256(prefix + size + body).hexdigest().upper()
    raise OpenPGPError('public key packet version %d is not supported (only 4, 5 and 6)' % version)


def primary_fingerprints(text):
    """Fingerprints (upper-case hex, in file order) of every primary key in armoured text."""
    if not isinstance(text, str):
        raise OpenPGPError('expected the armoured key as text, got %s' % type(text).__name__)
    blocks = ARMOR_RE.findall(text)
    if not blocks:
        raise OpenPGPError('no "-----BEGIN PGP PUBLIC KEY BLOCK-----" block found (an ASCII-armoured key is expected)')
    found = []
    for block in blocks:
        for tag, body in _packets(_dearmor(block)):
            if tag == TAG_PUBLIC_KEY:
                found.append(_fingerprint(body))
    if not found:
        raise OpenPGPError('the armoured block holds no public key packet')
    return found


def normalize_fingerprint(value):
    """Upper-case hex without spaces, or None when it is not a v4/v6 fingerprint."""
    if not isinstance(value, str):
        return None
    value = re.sub(r'\s+', '', value).upper()
    if value.startswith('0X'):
        value = value[2:]
    return value if FINGERPRINT_RE.match(value) else None


def openpgp_fingerprints(text):
    """Filter: primary key fingerprints of an armoured public key (errors become filter errors)."""
    try:
        return primary_fingerprints(text)
    except OpenPGPError as exc:
        raise AnsibleFilterError('openpgp_fingerprints: %s' % exc)


def openpgp_key_errors(text, expected, variable, source):
    """Filter: why ``text`` must not be trusted as the key ``variable`` names ([] when it may).

    ``expected`` is the published fingerprint (spaces allowed). The key file must hold that
    primary key and no other, so a file that also carries an unknown key is refused.
    """
    want = normalize_fingerprint(expected)
    if want is None:
        return ['%s must be the key\'s full fingerprint, 40 (v4) or 64 (v6) hex digits (got %s)' % (variable, quote(expected))]
    try:
        found = primary_fingerprints(text)
    except OpenPGPError as exc:
        return ['%s: the key downloaded from %s cannot be read: %s' % (variable, source, exc)]
    if found != [want]:
        return ['the key downloaded from %s has fingerprint %s; %s expects %s. Nothing was trusted or written. '
                'Check the vendor\'s published fingerprint; if the vendor rotated its key, set %s to the new one.'
                % (source, ', '.join(found), variable, want, variable)]
    return []


class FilterModule(object):
    def filters(self):
        return {
            'openpgp_fingerprints': openpgp_fingerprints,
            'openpgp_key_errors': openpgp_key_errors,
        }
