# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Properties (hypothesis) of file_set, file_read, the reports and the certificate reason:

- file_set plans deterministically (two check-mode runs agree and change nothing) and never writes
  outside the paths it is given (no temporary file left, nothing else touched), whatever the names;
- file_read never reads past max_bytes and refuses exactly the files larger than it;
- no report ever holds a raw ``<`` or a bidi control that came from a host string;
- the certificate reason is never '' while the CA has expired or ends inside the window.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import datetime
import os
import re
import shutil
import stat
import tempfile
import xml.etree.ElementTree as ET

import pytest
from hypothesis import given, settings, strategies as st
from unittest import mock

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpucluster.core.plugins.filter.certificate import certificate_renewal_reason
from ansible_collections.gpucluster.core.plugins.module_utils import drift
from ansible_collections.gpucluster.core.plugins.modules import file_read, file_set
from ansible_collections.gpucluster.core.plugins.plugin_utils import drift_reports, reports

# File system examples are slower than pure ones: fewer of them.
FS = settings(max_examples=40, deadline=None, derandomize=True)
PURE = settings(max_examples=100, deadline=None, derandomize=True)


class _Ended(Exception):
    pass


def _run(main, args, check=False, diff=False):
    def end(how):
        def raise_(self, **kwargs):
            raise _Ended(how, kwargs)
        return raise_
    with patch_module_args(dict(args, _ansible_check_mode=check, _ansible_diff=diff)), \
            mock.patch.object(basic.AnsibleModule, 'exit_json', end('exit')), \
            mock.patch.object(basic.AnsibleModule, 'fail_json', end('fail')):
        try:
            main()
        except _Ended as ended:
            return ended.args
    raise AssertionError('the module ended without exit_json or fail_json')


def _tree(root):
    out = {}
    for base, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(base, name)
            info = os.lstat(path)
            if stat.S_ISREG(info.st_mode):
                with open(path, 'rb') as handle:
                    out[path] = (handle.read(), stat.S_IMODE(info.st_mode))
            else:
                out[path] = ('dir', stat.S_IMODE(info.st_mode))
    return out


# Names with the characters a shell or a format string would misread.
NAMES = st.text(alphabet="abc.-_ '\"$`;%*?[]()&|\\\u00e9\u202e", min_size=1, max_size=12).filter(
    lambda n: n not in ('.', '..'))
CONTENT = st.text(alphabet=st.characters(blacklist_categories=('Cs',)), max_size=40)
MODES = st.sampled_from([None, '0600', '0644', '0640', 'u=rw,g=r,o='])


@FS
@given(files=st.dictionaries(NAMES, st.tuples(CONTENT, MODES, st.booleans()), min_size=1, max_size=4),
       subdir=st.booleans(), validate=st.booleans())
def test_file_set_plans_deterministically_and_writes_only_its_paths(files, subdir, validate):
    root = tempfile.mkdtemp(prefix='fileset-prop-')
    try:
        base = os.path.join(root, 'conf.d') if subdir else root
        if not subdir:
            os.makedirs(os.path.join(root, 'other'))
            with open(os.path.join(root, 'other', 'keep'), 'w') as handle:
                handle.write('keep')
        specs = []
        for name, (content, mode, exists) in sorted(files.items()):
            dest = os.path.join(base, name)
            if exists and not subdir:
                with open(dest, 'w') as handle:
                    handle.write('old content')
            spec = {'dest': dest, 'content': content}
            if mode:
                spec['mode'] = mode
            if validate:
                spec['validate'] = 'test -f %s'
            specs.append(spec)
        args = {'files': specs, 'directories': [{'path': base, 'mode': '0750'}] if subdir else []}
        before = _tree(root)
        first = _run(file_set.main, args, check=True, diff=True)
        second = _run(file_set.main, args, check=True, diff=True)
        assert first == second and first[0] == 'exit'
        assert _tree(root) == before
        how, result = _run(file_set.main, args)
        assert how == 'exit', result
        assert result['changed_paths'] == first[1]['changed_paths']
        after = _tree(root)
        allowed = set(before) | set(s['dest'] for s in specs) | ({base} if subdir else set())
        assert set(after) <= allowed, set(after) - allowed
        for path in set(before) - set(s['dest'] for s in specs) - {base}:
            assert after[path] == before[path]
        for spec in specs:
            assert after[spec['dest']][0] == spec['content'].encode('utf-8')
        assert _run(file_set.main, args)[1]['changed'] is False
    finally:
        shutil.rmtree(root)


@FS
@given(size=st.integers(min_value=0, max_value=5000), max_bytes=st.integers(min_value=1, max_value=5000))
def test_file_read_never_reads_past_max_bytes(size, max_bytes):
    root = tempfile.mkdtemp(prefix='fileread-prop-')
    try:
        path = os.path.join(root, 'f')
        with open(path, 'wb') as handle:
            handle.write(b'a' * size)
        asked = []
        real_fdopen = os.fdopen

        def fdopen(fd, mode='r', *args, **kwargs):
            handle = real_fdopen(fd, mode, *args, **kwargs)
            real_read = handle.read

            class Counting(object):
                def read(self, n=-1):
                    assert n is not None and n >= 0, 'an unbounded read'
                    asked.append(n)
                    return real_read(n)

                def __enter__(self):
                    return self

                def __exit__(self, *exc):
                    handle.close()
            return Counting()
        with mock.patch.object(file_read.os, 'fdopen', fdopen):
            how, result = _run(file_read.main, {'paths': [path], 'max_bytes': max_bytes})
        assert all(n <= max_bytes + 1 for n in asked)
        if size > max_bytes:
            assert (how, result['msg']) == ('fail', 'file_read: %s is larger than max_bytes=%d' % (path, max_bytes))
        else:
            assert how == 'exit' and result['contents'] == {path: 'a' * size}
    finally:
        shutil.rmtree(root)


BIDI = re.compile('[\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]')
HOSTILE = st.text(alphabet=st.sampled_from(list('<>&*_`[]|~#!\\\n\r\t x1') + ['\u202e', '\u2066', '\u2069', '\u200f',
                                                                              '\x1b', '\x00', '\x85']),
                  min_size=1, max_size=20)


@PURE
@given(host=HOSTILE, version=HOSTILE, message=HOSTILE)
def test_no_report_holds_a_raw_angle_bracket_or_bidi_control_from_a_host(host, version, message):
    finding = {'host': host, 'component': 'nccl', 'expected': '2.21.5', 'found': version, 'kind': 'majority',
               'severity': 'critical', 'group': 'g', 'message': message}
    unknown = {'host': host + 'u', 'component': 'kernel', 'expected': None, 'found': None, 'kind': 'unknown',
               'severity': 'critical', 'group': 'g', 'message': message}
    stats = {'checks': {host: ['nccl'], host + 'u': ['kernel']}, 'distribution': {}, 'members': {}}
    summary = drift.summarize([host, host + 'u'], [finding, unknown], stats, 'critical', [host + 'u'])
    summary['notes'] = [message]
    report = drift_reports.build_report([host, host + 'u'], summary, [finding, unknown], stats)
    markdown = report.render_markdown()
    assert '<' not in markdown and '>' not in markdown.replace('&gt;', '')
    assert not BIDI.search(markdown)
    junit = report.render_junit()
    assert not BIDI.search(junit)
    ET.fromstring(junit)
    assert not BIDI.search(report.render_json())
    for line in drift.summary_text(summary, [finding, unknown]):
        assert not BIDI.search(line)
    cell = reports.md_cell(host)
    assert '<' not in cell and '\n' not in cell


NOW = datetime.datetime(2026, 12, 2, 12, 0, tzinfo=datetime.timezone.utc)


@pytest.fixture(scope='module')
def keys():
    from cryptography.hazmat.primitives.asymmetric import ec
    return ec.generate_private_key(ec.SECP384R1()), ec.generate_private_key(ec.SECP384R1())


def _pki(directory, keys, ca_end_days, node_end_days):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    ca_key, key = keys
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, 'CA')])
    ca = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(ca_key.public_key())
          .serial_number(1).not_valid_before(NOW - datetime.timedelta(days=4000))
          .not_valid_after(NOW + datetime.timedelta(days=ca_end_days))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True).sign(ca_key, hashes.SHA256()))
    node = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, 'n1')]))
            .issuer_name(name).public_key(key.public_key()).serial_number(2)
            .not_valid_before(NOW - datetime.timedelta(days=1)).not_valid_after(NOW + datetime.timedelta(days=node_end_days))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName('n1')]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=False).sign(ca_key, hashes.SHA256()))
    for filename, data, mode in (
            ('ca.crt', ca.public_bytes(serialization.Encoding.PEM), 0o644),
            ('n1.crt', node.public_bytes(serialization.Encoding.PEM), 0o644),
            ('n1.key', key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                         serialization.NoEncryption()), 0o600)):
        path = os.path.join(directory, filename)
        with open(path, 'wb') as handle:
            handle.write(data)
        os.chmod(path, mode)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(ca_end_days=st.floats(min_value=-3000, max_value=60, allow_nan=False),
       node_end_days=st.floats(min_value=31, max_value=800, allow_nan=False),
       renew_days=st.integers(min_value=0, max_value=60))
def test_the_reason_is_never_empty_while_the_ca_is_expired_or_inside_the_window(
        keys, ca_end_days, node_end_days, renew_days):
    directory = tempfile.mkdtemp(prefix='cert-prop-')
    try:
        _pki(directory, keys, ca_end_days, node_end_days)
        reason = certificate_renewal_reason(os.path.join(directory, 'n1.crt'), os.path.join(directory, 'n1.key'),
                                            os.path.join(directory, 'ca.crt'), 'n1', ['DNS:n1'], renew_days, now=NOW)
        # Certificates keep whole seconds: compare with the CA's end as written.
        ca_left = datetime.timedelta(days=ca_end_days)
        node_left = datetime.timedelta(days=node_end_days)
        if ca_left <= datetime.timedelta(days=renew_days) - datetime.timedelta(seconds=1):
            assert reason != '' and 'renew the CA first' in reason
        elif ca_left > datetime.timedelta(days=renew_days, seconds=1) and node_left > datetime.timedelta(days=renew_days, seconds=1):
            assert reason == ''
    finally:
        shutil.rmtree(directory)
