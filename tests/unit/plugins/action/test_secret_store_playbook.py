# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The monitoring role's generated secrets (tasks/secrets.yml) end to end with ansible-playbook: two
inventory hosts on local connections, the site's inventory checked out more than once, and the nodes'
files (what the cluster holds) in one directory that every checkout's run reads, named by extra vars.

The issue's cases: a first run generates the secrets and writes them encrypted into the inventory's store;
a second checkout with the store finds the same values and changes nothing; a checkout without the store
while the cluster holds a CA stops, naming the file; the CA is replaced only when its fingerprint is named."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import datetime
import os
import re
import shutil
import stat
import subprocess
import sys

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), 'ansible-playbook')
VAULT = '$ANSIBLE_VAULT;'
SHARED_SECRETS = ['monitoring-pki/ca.key', 'monitoring_scrape_password', 'node1/grafana_admin_password']

pytestmark = pytest.mark.skipif(not os.path.exists(ANSIBLE_PLAYBOOK), reason='ansible-playbook not beside this python')

HOSTS = '''all:
  vars:
    ansible_connection: local
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
  children:
    gpucluster:
      hosts:
        node1:
        node2:
    monitoring:
      hosts:
        node1:
'''
PLAY = '''- name: The monitoring role's generated secrets
  hosts: gpucluster
  gather_facts: false
  tasks:
    - name: Bring, check and generate them
      ansible.builtin.include_role:
        name: gpucluster.core.monitoring
        tasks_from: secrets.yml
'''


def checkout(root, name, store_from=None, cache_from=None):
    """A checkout of the site's inventory; its store (and an earlier release's working copy) copied in."""
    inv = root / name / 'inv'
    inv.mkdir(parents=True)
    (inv / 'hosts.yml').write_text(HOSTS)
    (root / name / 'play.yml').write_text(PLAY)
    if store_from is not None:
        shutil.copytree(str(store_from / 'inv' / '.secrets'), str(inv / '.secrets'))
    if cache_from is not None:
        shutil.copytree(str(cache_from / 'inv' / '.credentials'), str(inv / '.credentials'))
    return root / name


def cluster(root):
    """The files the nodes hold, as extra vars pointing the role's node paths into root/cluster."""
    node = root / 'cluster'
    (node / 'tls').mkdir(parents=True, exist_ok=True)
    extra = root / 'cluster.yml'
    extra.write_text('__monitoring_tls_dir: %s\n__monitoring_web_config: %s\n__monitoring_scrape_password_path: %s\n'
                     '__monitoring_grafana_password_path: %s\n'
                     % (node / 'tls', node / 'web.yml', node / 'scrape.password', node / 'grafana.password'))
    return node, extra


def run(path, extra, vault='env', args=()):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, 'collections'), ANSIBLE_NOCOLOR='1')
    env.pop('ANSIBLE_VAULT_PASSWORD_FILE', None)
    password = path.parent / 'vault-password'
    if not password.exists():
        password.write_text('lab-only-vault-password\n')
    argv = [ANSIBLE_PLAYBOOK, '-i', str(path / 'inv'), str(path / 'play.yml'), '-e', '@%s' % extra] + list(args)
    if vault == 'env':
        env['ANSIBLE_VAULT_PASSWORD_FILE'] = str(password)
    elif vault == 'vault-id':
        argv += ['--vault-id', 'site@%s' % password]
    proc = subprocess.run(argv, cwd=str(path), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, check=False)
    return proc.returncode, proc.stdout


def changed(out):
    return sum(int(n) for n in re.findall(r'^\S+\s+: ok=\d+\s+changed=(\d+)', out, re.M))


def text(path):
    return path.read_text()


def fingerprint(pem):
    cert = x509.load_pem_x509_certificate(pem.encode())
    return ':'.join('%02X' % b for b in cert.fingerprint(hashes.SHA256()))


def a_ca_pem():
    key = ec.generate_private_key(ec.SECP384R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, 'another monitoring CA')])
    now = datetime.datetime.now(datetime.timezone.utc)
    return (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(7).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=30))
            .sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM).decode())


def test_first_run_writes_encrypted_files_a_second_checkout_finds_the_same_and_rotation_is_named(tmp_path):
    node, extra = cluster(tmp_path)
    first = checkout(tmp_path, 'admin1')
    rc, out = run(first, extra)
    assert rc == 0, out
    store, cache = first / 'inv' / '.secrets', first / 'inv' / '.credentials'
    for name in SHARED_SECRETS:
        assert text(store / name).startswith(VAULT), name            # encrypted in the store
        assert not text(cache / name).startswith(VAULT), name        # decrypted in the working copy
        assert stat.S_IMODE(os.stat(str(cache / name)).st_mode) == 0o600, name
    assert text(store / 'monitoring-pki' / 'ca.crt') == text(cache / 'monitoring-pki' / 'ca.crt')
    assert text(store / 'monitoring-pki' / 'ca.crt').startswith('-----BEGIN CERTIFICATE-----')
    assert len(text(cache / 'monitoring_scrape_password')) == 32
    assert 'Commit them with the inventory' in out and str(store / 'monitoring-pki' / 'ca.key') in out
    for name in SHARED_SECRETS:                                       # no secret in the output
        assert text(cache / name).strip()[:40] not in out

    rc, out = run(first, extra)
    assert rc == 0 and changed(out) == 0, out
    assert 'Commit them' not in out

    # Another administrator: a fresh checkout with the committed store, the vault password by --vault-id.
    second = checkout(tmp_path, 'admin2', store_from=first)
    rc, out = run(second, extra, vault='vault-id')
    assert rc == 0 and changed(out) == 0, out
    for name in SHARED_SECRETS + ['monitoring-pki/ca.crt']:
        assert text(second / 'inv' / '.credentials' / name) == text(cache / name), name
        assert text(second / 'inv' / '.secrets' / name) == text(store / name), name   # the store is not rewritten

    # The CA is replaced only when its fingerprint is named; the value left set does nothing afterwards.
    old = text(store / 'monitoring-pki' / 'ca.crt')
    rotate = ['-e', 'monitoring_ca_rotate=' + fingerprint(old).lower()]
    rc, out = run(second, extra, vault='vault-id', args=rotate)
    assert rc == 0, out
    new = text(second / 'inv' / '.secrets' / 'monitoring-pki' / 'ca.crt')
    assert new != old and fingerprint(new) != fingerprint(old)
    assert text(second / 'inv' / '.credentials' / 'monitoring-pki' / 'ca.crt') == new
    assert text(second / 'inv' / '.secrets' / 'monitoring-pki' / 'ca.key') != text(store / 'monitoring-pki' / 'ca.key')
    assert text(second / 'inv' / '.credentials' / 'monitoring_scrape_password') == text(cache / 'monitoring_scrape_password')
    assert 'Commit them' in out
    rc, out = run(second, extra, vault='vault-id', args=rotate)
    assert rc == 0 and changed(out) == 0, out
    assert text(second / 'inv' / '.secrets' / 'monitoring-pki' / 'ca.crt') == new


def test_a_checkout_without_the_store_stops_when_the_cluster_holds_them(tmp_path):
    node, extra = cluster(tmp_path)
    pem = a_ca_pem()
    (node / 'tls' / 'ca.crt').write_text(pem)
    (node / 'scrape.password').write_text('TheServersScrapePassword0123456')
    fresh = checkout(tmp_path, 'fresh')
    rc, out = run(fresh, extra)
    assert rc != 0, out
    store = fresh / 'inv' / '.secrets'
    assert 'the monitoring CA is not in this checkout\'s store (%s' % (store / 'monitoring-pki' / 'ca.key') in out
    assert '-e monitoring_ca_rotate=' + fingerprint(pem) in out
    assert 'the scrape password is not in this checkout\'s store (%s)' % (store / 'monitoring_scrape_password') in out
    assert 'Its current value is in %s' % (node / 'scrape.password') in out
    assert 'TheServersScrapePassword' not in out
    # Stopped before anything was made: no store, no CA.
    assert not store.exists()
    assert not (fresh / 'inv' / '.credentials' / 'monitoring-pki' / 'ca.key').exists()

    # --limit leaves the monitoring server out: its password file is still read (delegated), and the run stops.
    (node / 'tls' / 'ca.crt').unlink()
    rc, out = run(fresh, extra, args=['--limit', 'node2'])
    assert rc != 0, out
    assert 'the scrape password is not in this checkout\'s store' in out
    assert 'node1 holds %s' % (node / 'scrape.password') in out
    assert 'the monitoring CA' not in out.split('fatal:')[-1]      # nothing holds a CA now: only the password stops
    assert not store.exists()


def test_secrets_of_an_earlier_release_are_taken_into_the_store(tmp_path):
    node, extra = cluster(tmp_path)
    earlier = checkout(tmp_path, 'earlier')
    rc, out = run(earlier, extra)
    assert rc == 0, out
    shutil.rmtree(str(earlier / 'inv' / '.secrets'))                  # an earlier release had no store
    cache = earlier / 'inv' / '.credentials'
    (node / 'tls' / 'ca.crt').write_text(text(cache / 'monitoring-pki' / 'ca.crt'))
    (node / 'scrape.password').write_text(text(cache / 'monitoring_scrape_password'))
    (node / 'web.yml').write_text('basic_auth_users:\n  "gpucluster-scrape": "$2b$10$abc"\n')
    upgraded = checkout(tmp_path, 'upgraded', cache_from=earlier)
    os.remove(str(upgraded / 'inv' / '.credentials' / '.store-state.json'))
    rc, out = run(upgraded, extra)
    assert rc == 0, out
    assert 'is taken from this controller\'s working copy' in out and 'Commit them' in out
    for name in SHARED_SECRETS:
        assert text(upgraded / 'inv' / '.secrets' / name).startswith(VAULT), name
        assert text(upgraded / 'inv' / '.credentials' / name) == text(cache / name), name


def test_no_vault_password_and_an_unencrypted_secret_are_said_before_anything_changes(tmp_path):
    node, extra = cluster(tmp_path)
    site = checkout(tmp_path, 'site')
    rc, out = run(site, extra, vault=None)
    assert rc != 0, out
    assert 'this run has no vault password' in out and '--vault-id' in out
    assert 'monitoring-pki/ca.key' in out and 'could not write them encrypted' in out
    # Said before anything was generated.
    assert not (site / 'inv' / '.secrets').exists() and not (site / 'inv' / '.credentials' / 'monitoring-pki').exists()

    leaked = checkout(tmp_path, 'leaked')
    (leaked / 'inv' / '.secrets').mkdir()
    (leaked / 'inv' / '.secrets' / 'monitoring_scrape_password').write_text('PlainTextPassword0123456789abcdef')
    rc, out = run(leaked, extra)
    assert rc != 0, out
    assert 'is a secret but is not encrypted with Ansible Vault' in out and 'ansible-vault encrypt' in out
    assert 'PlainTextPassword' not in out
    assert not (leaked / 'inv' / '.credentials' / 'monitoring_scrape_password').exists()
