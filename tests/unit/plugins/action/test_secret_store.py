# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""secret_store's file handling without a playbook: the store and the working copy in a temporary directory,
the run's vault secrets given as the loader holds them."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import stat

import pytest

from ansible.parsing.vault import VaultLib, VaultSecret, is_encrypted
from ansible_collections.gpucluster.core.plugins.action import secret_store
from ansible_collections.gpucluster.core.plugins.action.secret_store import ActionModule, check_names


class _Loader(object):
    def __init__(self, secrets):
        self._vault = VaultLib(secrets)


def _action(monkeypatch, secrets):
    # Only the vault secrets this run holds matter here: none from the CLI context, these from the loader.
    monkeypatch.setattr(secret_store, 'VaultSecretsContext', None)
    action = ActionModule.__new__(ActionModule)
    action._loader = _Loader(secrets)
    return action


def _params(tmp_path, **extra):
    params = dict(store=str(tmp_path / 'store'), cache=str(tmp_path / 'cache'), secret=['pki/ca.key', 'pw'],
                  public=['pki/ca.crt'], directories=[], generate=[], shared=[], held={}, rotate='', vault_id='')
    params.update(extra)
    return params


SITE = [('site', VaultSecret(b'site-password'))]


def _mode(path):
    return stat.S_IMODE(os.stat(str(path)).st_mode)


def test_push_encrypts_secrets_keeps_certificates_and_pull_restores_a_fresh_working_copy(tmp_path, monkeypatch):
    action = _action(monkeypatch, SITE)
    (tmp_path / 'cache' / 'pki').mkdir(parents=True)
    (tmp_path / 'cache' / 'pki' / 'ca.key').write_text('KEY MATERIAL\n')
    (tmp_path / 'cache' / 'pki' / 'ca.crt').write_text('-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n')
    result = action._push(_params(tmp_path, generate=['pw']))
    assert result['problems'] == [] and result['changed']
    assert result['generated'] == ['pw']
    store = tmp_path / 'store'
    assert sorted(result['written']) == sorted(str(store / n) for n in ('pki/ca.key', 'pki/ca.crt', 'pw'))
    key = (store / 'pki' / 'ca.key').read_bytes()
    assert is_encrypted(key) and key.startswith(b'$ANSIBLE_VAULT;1.2;AES256;site\n')   # the vault id in the header
    assert VaultLib(SITE).decrypt(key) == b'KEY MATERIAL\n'
    assert (store / 'pki' / 'ca.crt').read_text().startswith('-----BEGIN CERTIFICATE-----')
    password = (tmp_path / 'cache' / 'pw').read_text()
    assert len(password) == 32 and password.isalnum() and _mode(tmp_path / 'cache' / 'pw') == 0o600
    assert 'KEY MATERIAL' not in json.dumps(result) and password not in json.dumps(result)

    # Nothing new: nothing written (an encryption is salted, so a rewrite would change every file).
    again = action._push(_params(tmp_path, generate=['pw']))
    assert again == {'changed': False, 'written': [], 'generated': [], 'missing': [], 'problems': []}
    assert (store / 'pki' / 'ca.key').read_bytes() == key

    # A fresh checkout: the store alone gives the same working copy, modes included.
    fresh = tmp_path / 'fresh'
    os.rename(str(store), str(tmp_path / 'kept'))
    fresh.mkdir()
    os.rename(str(tmp_path / 'kept'), str(fresh / 'store'))
    pulled = action._pull(_params(fresh))
    assert pulled['problems'] == [] and pulled['changed'] is False
    assert sorted(pulled['refreshed']) == ['pki/ca.crt', 'pki/ca.key', 'pw']
    assert pulled['files'] == {n: {'store': True, 'cache': True} for n in ('pki/ca.key', 'pw', 'pki/ca.crt')}
    assert (fresh / 'cache' / 'pki' / 'ca.key').read_text() == 'KEY MATERIAL\n'
    assert (fresh / 'cache' / 'pw').read_text() == password
    assert _mode(fresh / 'cache' / 'pki' / 'ca.key') == 0o600 and _mode(fresh / 'cache' / 'pki' / 'ca.crt') == 0o644
    assert _mode(fresh / 'cache' / 'pki') == 0o700
    assert action._pull(_params(fresh))['refreshed'] == []


def test_pull_keeps_the_listed_directories_present_and_private(tmp_path, monkeypatch):
    action = _action(monkeypatch, SITE)
    # A new working copy: made, 0700, and named once; a rerun makes nothing.
    first = action._pull(_params(tmp_path, directories=['monitoring-pki']))
    assert first['directories'] == ['monitoring-pki'] and first['changed'] is False
    assert _mode(tmp_path / 'cache' / 'monitoring-pki') == 0o700
    assert action._pull(_params(tmp_path, directories=['monitoring-pki']))['directories'] == []
    # A mode opened by hand is set back.
    os.chmod(str(tmp_path / 'cache' / 'monitoring-pki'), 0o755)
    assert action._pull(_params(tmp_path, directories=['monitoring-pki']))['directories'] == ['monitoring-pki']
    assert _mode(tmp_path / 'cache' / 'monitoring-pki') == 0o700
    # A pull that reports a problem (a secret it could not write encrypted: no vault password) makes nothing.
    bare = _action(monkeypatch, [])
    stopped = bare._pull(_params(tmp_path, directories=['elsewhere']))
    assert stopped['problems'] and stopped['directories'] == [] and not (tmp_path / 'cache' / 'elsewhere').exists()
    # A file in its place is an error naming it.
    (tmp_path / 'cache' / 'other').write_text('x')
    with pytest.raises(secret_store.AnsibleError, match='cache/other should be a directory of the working copy'):
        action._pull(_params(tmp_path, directories=['other']))


def test_pull_takes_the_store_over_a_stale_working_copy_and_a_changed_working_copy_is_pushed(tmp_path, monkeypatch):
    action = _action(monkeypatch, SITE)
    (tmp_path / 'cache').mkdir()
    (tmp_path / 'cache' / 'pw').write_text('committed')
    action._push(_params(tmp_path, secret=['pw'], public=[]))
    (tmp_path / 'cache' / 'pw').write_text('stale')
    assert action._pull(_params(tmp_path, secret=['pw'], public=[]))['refreshed'] == ['pw']
    assert (tmp_path / 'cache' / 'pw').read_text() == 'committed'
    (tmp_path / 'cache' / 'pw').write_text('renewed')       # what a task generated this run
    result = action._push(_params(tmp_path, secret=['pw'], public=[]))
    assert result['written'] == [str(tmp_path / 'store' / 'pw')]
    assert VaultLib(SITE).decrypt((tmp_path / 'store' / 'pw').read_bytes()) == b'renewed'


def test_pull_reports_what_each_place_has_and_a_secret_it_cannot_write(tmp_path, monkeypatch):
    action = _action(monkeypatch, [])
    (tmp_path / 'cache').mkdir()
    (tmp_path / 'cache' / 'pw').write_text('from an earlier release')
    result = action._pull(_params(tmp_path))
    assert result['files'] == {'pki/ca.key': {'store': False, 'cache': False}, 'pw': {'store': False, 'cache': True},
                               'pki/ca.crt': {'store': False, 'cache': False}}
    assert len(result['problems']) == 1
    assert 'pki/ca.key, pw are not in the store' in result['problems'][0]
    assert 'this run has no vault password' in result['problems'][0]


@pytest.mark.parametrize('secrets, vault_id, encrypt_identity, expect', [
    ([('default', VaultSecret(b'a'))], '', None, None),
    ([('prod', VaultSecret(b'a')), ('dev', VaultSecret(b'b'))], '', None, 'several vault ids (prod, dev)'),
    ([('prod', VaultSecret(b'a')), ('dev', VaultSecret(b'b'))], 'dev', None, 'dev'),
    ([('prod', VaultSecret(b'a')), ('dev', VaultSecret(b'b'))], '', 'prod', 'prod'),
    ([('prod', VaultSecret(b'a'))], 'lab', None, "vault id 'lab' to encrypt with is not among this run's vault ids (prod)"),
    ([], '', None, 'no vault password'),
])
def test_the_vault_secret_to_encrypt_with(monkeypatch, secrets, vault_id, encrypt_identity, expect):
    monkeypatch.setattr(secret_store.C, 'DEFAULT_VAULT_ENCRYPT_IDENTITY', encrypt_identity)
    found = _action(monkeypatch, secrets)._encryptor(vault_id)
    if expect is None:
        assert found[2] is None                          # 'default' is not written into the header
    elif isinstance(found, str):
        assert expect in found
    else:
        assert found[2] == expect


def test_a_store_file_this_run_cannot_decrypt_is_named(tmp_path, monkeypatch):
    _action(monkeypatch, SITE)._push(_params(tmp_path, secret=['pw'], public=[], generate=['pw']))
    (tmp_path / 'cache' / 'pw').unlink()
    result = _action(monkeypatch, [('other', VaultSecret(b'wrong'))])._pull(_params(tmp_path, secret=['pw'], public=[]))
    assert result['problems'] == ['%s does not decrypt with the vault secrets of this run (vault ids: other): give '
                                  'the inventory\'s vault password' % (tmp_path / 'store' / 'pw')]
    assert not (tmp_path / 'cache' / 'pw').exists()


@pytest.mark.parametrize('name, ok', [
    ('monitoring-pki/ca.key', True), ('node1/grafana_admin_password', True), ('a', True),
    ('/etc/passwd', False), ('../outside', False), ('a/../../b', False), ('a//b', False), ('./a', False), ('', False),
    ('.store-state.json', False),
])
def test_store_names(name, ok):
    assert (check_names([name]) == []) is ok


def test_push_reports_a_listed_file_the_working_copy_lacks_and_keeps_the_store_copy(tmp_path, monkeypatch):
    action = _action(monkeypatch, SITE)
    (tmp_path / 'cache' / 'pki').mkdir(parents=True)
    (tmp_path / 'cache' / 'pki' / 'ca.crt').write_text('CERT\n')
    (tmp_path / 'store').mkdir()
    (tmp_path / 'store' / 'pw').write_bytes(VaultLib(SITE).encrypt(b'kept', SITE[0][1], 'site'))
    before = (tmp_path / 'store' / 'pw').read_bytes()
    result = action._push(_params(tmp_path))
    assert result['missing'] == ['pki/ca.key', 'pw'] and result['problems'] == []
    assert result['written'] == [str(tmp_path / 'store' / 'pki' / 'ca.crt')]
    assert (tmp_path / 'store' / 'pw').read_bytes() == before and not (tmp_path / 'store' / 'pki' / 'ca.key').exists()
