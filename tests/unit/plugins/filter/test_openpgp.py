# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The repository key check: fingerprints computed here must equal what gpg prints.

The two keys below were generated for this test with GnuPG 2 (``gpg --quick-gen-key``, one ed25519
key, one RSA 2048 key with an RSA encryption subkey), exported with ``gpg --armor --export``; the
expected fingerprints are the ``fpr`` lines of ``gpg --with-colons --list-keys`` for them.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import base64
import re

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.gpucluster.core.plugins.filter import openpgp

ED25519_KEY = """-----BEGIN PGP PUBLIC KEY BLOCK-----

mDMEaw4XyxYJKwYBBAHaRw8BAQdAr1OHQIxmgZJEgbCrOApJyf9pH2v0wt32B9z2
VWdVH6K0KmdwdWNsdXN0ZXIgdGVzdCBrZXkgPHRlc3RAZXhhbXBsZS5pbnZhbGlk
PoiQBBMWCAA4FiEEJK753a+WFVBZNPgo820ZVaFUhcMFAmsOF8sCGwMFCwkIBwIG
FQoJCAsCBBYCAwECHgECF4AACgkQ820ZVaFUhcMGsgD+Nq3j64mr1BEVkKDnbzej
hrYvb6+f/c2oeF9ChZqLeFMBAJcUVGUQEIUmGRoHDnOIaXIvZgbInRAZ4jSNBTqK
XyEC
=Pk1f
-----END PGP PUBLIC KEY BLOCK-----
"""
ED25519_FPR = '24AEF9DDAF9615505934F828F36D1955A15485C3'
RSA_KEY = """-----BEGIN PGP PUBLIC KEY BLOCK-----

mQENBGsOF8sBCAC6XTS17z+KgtUyvFJagbaR++3YFW+CDBAGeflk3RIwuDfzjnyI
L4wXeRZQVzcG99SzLaKO1KXuxfTFUlmkNkQK/C8AjlSZlQxP4A/FnevnK4rlKoA0
4r93MJr6tXEBvk4r5zhToCDbSG4CtcPx0aH8prCJpCsTjsOXTR5db44YQ69OvEi2
hN09MKrl86y7gQDYXwS9N7mVi7o9r6/gCHmuYXr7VPHktmGynNnxmplKRWjxqkMi
ySW3E2hQs4aNA4c60RqQlgPKdQHo0LjBAGWbWS3aogQ0AA03gJmxmWcGNPJ6N8S4
yvyMk2bKiS3dIKtZstKueb5zRPJ9uxa8ZgDXABEBAAG0LmdwdWNsdXN0ZXIgc2Vj
b25kIGtleSA8c2Vjb25kQGV4YW1wbGUuaW52YWxpZD6JAU4EEwEKADgWIQSz6CLk
xRchyykq1T8J5J+FSDKkcwUCaw4XywIbAwULCQgHAgYVCgkICwIEFgIDAQIeAQIX
gAAKCRAJ5J+FSDKkc+PqB/0UJNPuS1xOefnZYg6cbaWHqVJcDIDBQU+IcfkZLgMh
ks/k9OtfMVksbgLBcFWfIPCVJhE8Xh6use3r6U6DZsBtC1XC6aM1HaXCXO7UK16c
ZBAgg6XE6/ArAEH2x+P7Mm0a8bzxKHX20MU0fU8QJGY7JnRC03KRM+eHYD5cZZFe
kQfbQ3RgWviTvq5sDBvr7doUzOCcmLkz9UJ8/6usW2Cb71SjJly/UFAqp1sl8der
x0dBq5VtWABNv48utNAVsvIJhU1MzXGPg6Xro5pBmUCTjWTHwswWGlHrkEIl6ZyG
0DcZznMXHUmEi+weDaXLCEzIKIQuna6nIDEFU2q6OR7tuQENBGsOF84BCACigF3L
lCU7hfSLt2rKrHi/CRzaNjjlJdXKF43WF/aDCGVTX5tJp1PAGoKNhb7Ix0+O8HJ7
5/Q1TLcgRSlBZrfj3C++V2Q1GGoym1YeXAnPBEVekt3hqLhoKwCULxqa1Y9Cb8c2
m6cIk01dxhaZwLGqSvKm3UcEYqNISH2/2lDOmGGOLKZySAJws7uYVD7Et/gd2fEF
mSNa+bPG/wOMdX4zqqg1goHOC3DcEUaH/ywZXy7iGNOyEL+JqSyO7dLzDn4KNpIJ
xF0qjOV6m8hVIZ87+FlUry+NDsP13S0Scg6V7V5cf+epLlMGfrbeD5KKk7qboftX
fTlNIieS7QQkOenFABEBAAGJATYEGAEKACAWIQSz6CLkxRchyykq1T8J5J+FSDKk
cwUCaw4XzgIbDAAKCRAJ5J+FSDKkc4MmCACqH3CSqy2yE7RPpei3Xuolw/36Ha30
EpWnc/QpNz2dhVSXuteIu6AsZijRS+/IHdYw2uoKKwD0t//LgeMBZbaADUpHqaYE
t2eI+vKirPYePErfTlG9i9x8qpXzGgTPwvLYaHv7TUfLF+FCHbbChAfXRWy617fH
KPP77KH8XsZxidzKYHDIFUuCB52kYXUVicQkzx3a/kuLQk2+/AFUiilU7Xz9gAai
sj4nEdbs3ncCNMUTkGIK8fiq9W+O1lNNGi7it62IiWqzNR0IhWpHznh5CouLNOSS
3tXps0NcP5xdvpHh8r41Os/8iCfAIWvsugJ5KGRQi9w7ER6LC73ttdQR
=txwz
-----END PGP PUBLIC KEY BLOCK-----
"""
RSA_FPR = 'B3E822E4C51721CB292AD53F09E49F854832A473'
RSA_SUBKEY_FPR = 'B4A30C0B5BE6A4C4E7D1564A35C2700D88ABB13A'


def _body(armoured):
    """The base64 payload lines of an armoured key (between the blank line and the checksum)."""
    lines = armoured.strip().splitlines()
    return [line for line in lines[2:-1] if not line.startswith('=')]


def _rearmour(data, checksum=True):
    b64 = base64.b64encode(data).decode('ascii')
    lines = [b64[i:i + 64] for i in range(0, len(b64), 64)]
    tail = []
    if checksum:
        crc = openpgp._crc24(data)
        tail = ['=' + base64.b64encode(bytes(bytearray([crc >> 16 & 0xFF, crc >> 8 & 0xFF, crc & 0xFF]))).decode('ascii')]
    return '\n'.join(['-----BEGIN PGP PUBLIC KEY BLOCK-----', 'Comment: test', ''] + lines + tail
                     + ['-----END PGP PUBLIC KEY BLOCK-----', ''])


def test_fingerprints_match_gpg():
    assert openpgp.openpgp_fingerprints(ED25519_KEY) == [ED25519_FPR]
    # The encryption subkey is not a primary key: only the primary fingerprint is reported.
    assert openpgp.openpgp_fingerprints(RSA_KEY) == [RSA_FPR]
    assert RSA_SUBKEY_FPR not in openpgp.openpgp_fingerprints(RSA_KEY)


def test_two_blocks_and_crlf():
    both = ED25519_KEY + '\n' + RSA_KEY
    assert openpgp.openpgp_fingerprints(both) == [ED25519_FPR, RSA_FPR]
    assert openpgp.openpgp_fingerprints(RSA_KEY.replace('\n', '\r\n')) == [RSA_FPR]


def test_armour_headers_and_missing_checksum_are_accepted():
    data = base64.b64decode(''.join(_body(RSA_KEY)))
    assert openpgp.openpgp_fingerprints(_rearmour(data)) == [RSA_FPR]
    assert openpgp.openpgp_fingerprints(_rearmour(data, checksum=False)) == [RSA_FPR]


def test_old_format_packet_header_gives_the_same_fingerprint():
    data = bytearray(base64.b64decode(''.join(_body(ED25519_KEY))))
    # gpg writes the ed25519 key packet with an old-format header (0x98 = tag 6, 1-byte length).
    assert data[0] == 0x98
    length = data[1]
    new_format = bytearray([0xC6, length]) + data[2:]
    assert openpgp.openpgp_fingerprints(_rearmour(bytes(new_format))) == [ED25519_FPR]


@pytest.mark.parametrize('text, message', [
    ('', 'no "-----BEGIN PGP PUBLIC KEY BLOCK-----" block'),
    ('<html>404 Not Found</html>', 'no "-----BEGIN PGP PUBLIC KEY BLOCK-----" block'),
    ('-----BEGIN PGP PUBLIC KEY BLOCK-----\n\n!!!!\n-----END PGP PUBLIC KEY BLOCK-----', 'not valid base64'),
])
def test_unreadable_text_is_a_clear_filter_error(text, message):
    with pytest.raises(AnsibleFilterError, match=re.escape(message)):
        openpgp.openpgp_fingerprints(text)


def test_altered_key_fails_the_armour_checksum():
    lines = ED25519_KEY.splitlines()
    # Flip one character of the first base64 line (after the BEGIN line and the blank line).
    line = lines[2]
    lines[2] = line[:10] + ('A' if line[10] != 'A' else 'B') + line[11:]
    with pytest.raises(AnsibleFilterError, match='checksum does not match'):
        openpgp.openpgp_fingerprints('\n'.join(lines))


def test_truncated_key_is_refused():
    data = base64.b64decode(''.join(_body(RSA_KEY)))
    with pytest.raises(AnsibleFilterError, match='truncated'):
        openpgp.openpgp_fingerprints(_rearmour(data[:100]))


def test_key_errors_accept_the_published_fingerprint_with_spaces():
    spaced = ' '.join(RSA_FPR[i:i + 4] for i in range(0, 40, 4)).lower()
    assert openpgp.openpgp_key_errors(RSA_KEY, spaced, 'some_fingerprint', 'https://example.invalid/key') == []


def test_key_errors_name_the_variable_and_both_fingerprints():
    errors = openpgp.openpgp_key_errors(RSA_KEY, ED25519_FPR, 'container_runtime_nvidia_toolkit_gpgkey_fingerprint',
                                        'https://example.invalid/gpgkey')
    assert len(errors) == 1
    assert 'container_runtime_nvidia_toolkit_gpgkey_fingerprint' in errors[0]
    assert RSA_FPR in errors[0] and ED25519_FPR in errors[0]
    assert 'https://example.invalid/gpgkey' in errors[0]


def test_key_errors_refuse_a_file_with_an_extra_key():
    errors = openpgp.openpgp_key_errors(ED25519_KEY + RSA_KEY, ED25519_FPR, 'v', 'u')
    assert len(errors) == 1 and RSA_FPR in errors[0]


@pytest.mark.parametrize('expected', ['', 'F796ECB0', 'DDCAE044F796ECB0', 'xyz', None, 42])
def test_key_errors_refuse_short_or_malformed_fingerprints(expected):
    errors = openpgp.openpgp_key_errors(RSA_KEY, expected, 'nvidia_driver_cuda_repo_key_fingerprints', 'u')
    assert len(errors) == 1
    assert 'nvidia_driver_cuda_repo_key_fingerprints must be the key\'s full fingerprint' in errors[0]


def test_key_errors_report_unreadable_downloads():
    errors = openpgp.openpgp_key_errors('<html></html>', RSA_FPR, 'v', 'https://example.invalid/k')
    assert len(errors) == 1 and 'cannot be read' in errors[0] and 'https://example.invalid/k' in errors[0]


def test_v6_fingerprint_is_sha256_over_the_v6_prefix():
    # A version 6 key packet body: version, creation time, algorithm 27 (Ed25519), key length, key.
    body = bytes(bytearray([6, 0x63, 0x87, 0x7f, 0xe3, 27, 0, 0, 0, 32]) + bytearray(range(32)))
    packet = bytes(bytearray([0xC6, len(body)])) + body
    import hashlib
    want = hashlib.sha256(b'\x9b' + bytes(bytearray([0, 0, 0, len(body)])) + body).hexdigest().upper()
    assert openpgp.openpgp_fingerprints(_rearmour(packet)) == [want]
    assert len(want) == 64


def test_v3_keys_are_refused():
    body = bytes(bytearray([3, 0, 0, 0, 0, 0, 0, 1]))
    with pytest.raises(AnsibleFilterError, match='version 3 is not supported'):
        openpgp.openpgp_fingerprints(_rearmour(bytes(bytearray([0xC6, len(body)])) + body))
