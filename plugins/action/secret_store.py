# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of the generated secrets: an encrypted store inside the inventory, committed by the site,
and the controller's working copy the roles' tasks read (community.crypto and the certificate filter need
files). Encryption uses the vault secrets of this very run (--vault-id, --vault-password-file,
ANSIBLE_VAULT_PASSWORD_FILE, ansible.cfg), which neither ansible-vault run from a task nor the vault filter
can reach. The decisions are module_utils.shared_secrets; this plugin only reads, writes and reports.

No result holds a secret or a digest of one: only relative names, paths and booleans. Expected problems
(an unencrypted secret in the store, no vault password, a file that does not decrypt) are returned in
``problems`` instead of failing, because the tasks run with no_log and a failure's message would be hidden;
the role asserts on them and prints them.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import hashlib
import json
import os
import secrets
import string

from ansible import constants as C
from ansible.errors import AnsibleError
from ansible.module_utils.common.text.converters import to_bytes, to_text
from ansible.parsing.vault import VaultLib, is_encrypted
from ansible.plugins.action import ActionBase

from ansible_collections.gpucluster.core.plugins.module_utils import shared_secrets
from ansible_collections.gpucluster.core.plugins.module_utils.atomic_file import write_atomic

try:  # ansible-core >= 2.19: the secrets the CLI loaded, also in a worker process
    from ansible.parsing.vault import VaultSecretsContext
except ImportError:  # pragma: no cover - older ansible-core reads them from the loader below
    VaultSecretsContext = None

ARGUMENT_SPEC = dict(
    mode=dict(type='str', required=True, choices=['pull', 'plan', 'push']),
    store=dict(type='path', required=True),
    cache=dict(type='path', required=True),
    secret=dict(type='list', elements='str', default=[]),
    public=dict(type='list', elements='str', default=[]),
    directories=dict(type='list', elements='str', default=[]),
    generate=dict(type='list', elements='str', default=[]),
    shared=dict(type='list', elements='dict', default=[]),
    held=dict(type='dict', default={}),
    rotate=dict(type='str', default=''),
    vault_id=dict(type='str', default=''),
)

SHARED_KEYS = ('name', 'label', 'kind', 'files', 'compare', 'node_path', 'node_marker_path', 'node_marker',
               'instead', 'rotatable')
# Digests of what the last pull or push left in the working copy and the store, so that a rerun decrypts
# and compares only files that changed since (one vault decryption costs milliseconds per file).
STATE_FILE = '.store-state.json'
PASSWORD_CHARS = string.ascii_letters + string.digits
PASSWORD_LENGTH = 32


def _sha256(data):
    return hashlib.sha256(data).hexdigest()


def _read(path):
    with open(path, 'rb') as handle:
        return handle.read()


def check_names(names):
    """Problems with relative names of store files (absolute, empty, '.' or '..' parts, the state file)."""
    problems = []
    for name in names:
        parts = name.split('/')
        if not name or os.path.isabs(name) or any(p in ('', '.', '..') for p in parts) or name == STATE_FILE:
            problems.append('secret_store: %r is not a relative path inside the store' % (name,))
    return problems


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        dummy, params = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        problems = check_names(params['secret'] + params['public'] + params['generate'] + params['directories'])
        overlap = sorted(set(params['secret']) & set(params['public']))
        if overlap:
            problems.append('secret_store: %s listed as both secret and public' % ', '.join(overlap))
        unlisted = sorted(set(params['generate']) - set(params['secret']))
        if unlisted:
            problems.append('secret_store: generate names %s, which is not in secret' % ', '.join(unlisted))
        if problems:
            result.update(failed=True, msg=' '.join(problems))
            return result
        try:
            handler = getattr(self, '_' + params['mode'])
            result.update(handler(params))
        except (AnsibleError, OSError, IOError, ValueError) as exc:
            # Names and paths only: the exceptions raised here never carry file content.
            result.update(failed=True, msg='secret_store (%s): %s' % (params['mode'], to_text(exc)))
        return result

    # ------------------------------------------------------------ vault

    def _vault_secrets(self):
        context = VaultSecretsContext.current(optional=True) if VaultSecretsContext is not None else None
        found = list(context.secrets) if context is not None and context.secrets else []
        return found or list(self._loader._vault.secrets or [])

    def _encryptor(self, vault_id):
        """(VaultLib, secret, vault id for the header) to encrypt with, or a problem (str)."""
        found = self._vault_secrets()
        if not found:
            return ('this run has no vault password, and the store\'s secrets are encrypted with Ansible Vault: '
                    'run with --vault-id <id>@<password file or client script> (or --vault-password-file), or set '
                    'ANSIBLE_VAULT_PASSWORD_FILE or vault_password_file in ansible.cfg')
        wanted = vault_id or C.DEFAULT_VAULT_ENCRYPT_IDENTITY
        ids = []
        for name, dummy in found:
            if name not in ids:
                ids.append(name)
        if wanted:
            matches = [(name, secret) for name, secret in found if name == wanted]
            if not matches:
                return ('the vault id %r to encrypt with is not among this run\'s vault ids (%s)'
                        % (wanted, ', '.join(ids)))
            name, secret = matches[0]
        elif len(ids) > 1:
            return ('this run has several vault ids (%s): name the one the store\'s files are encrypted with '
                    '(the role variable ending in _secrets_vault_id, or vault_encrypt_identity / '
                    'ANSIBLE_VAULT_ENCRYPT_IDENTITY)' % ', '.join(ids))
        else:
            name, secret = found[0]
        header_id = name if name and name != C.DEFAULT_VAULT_IDENTITY else None
        return VaultLib(found), secret, header_id

    def _decrypt(self, data, path):
        """Plain bytes of a store file; raises AnsibleError naming the file."""
        if not is_encrypted(data):
            return data
        found = self._vault_secrets()
        if not found:
            raise AnsibleError('%s is encrypted with Ansible Vault and this run has no vault password: run with '
                               '--vault-id or --vault-password-file, or set ANSIBLE_VAULT_PASSWORD_FILE' % path)
        try:
            return VaultLib(found).decrypt(data)
        except AnsibleError:
            raise AnsibleError('%s does not decrypt with the vault secrets of this run (vault ids: %s): give the '
                               'inventory\'s vault password' % (path, ', '.join(sorted(set(n for n, s in found)))))

    # ------------------------------------------------------------ files

    @staticmethod
    def _state(cache):
        try:
            with open(os.path.join(cache, STATE_FILE)) as handle:
                state = json.load(handle)
            return state if isinstance(state, dict) else {}
        except (IOError, OSError, ValueError):
            return {}

    @staticmethod
    def _save_state(cache, state):
        os.makedirs(cache, mode=0o700, exist_ok=True)
        write_atomic(os.path.join(cache, STATE_FILE), json.dumps(state, sort_keys=True, indent=1) + '\n', mode=0o600)

    @staticmethod
    def _write(path, data, mode, dir_mode=0o700):
        directory = os.path.dirname(path)
        if not os.path.isdir(directory):
            os.makedirs(directory, mode=dir_mode)
        write_atomic(path, to_text(data, errors='surrogate_or_strict'), mode=mode)

    @staticmethod
    def _same_file(path, data, mode):
        try:
            return _read(path) == data and (os.stat(path).st_mode & 0o777) == mode
        except (IOError, OSError):
            return False

    def _pull(self, params):
        """Store -> working copy for every listed file the store has; report what each place has."""
        store, cache = params['store'], params['cache']
        state = self._state(cache)
        files, refreshed, problems, dirty = {}, [], [], False
        for name in params['secret'] + params['public']:
            secret = name in params['secret']
            store_path, cache_path = os.path.join(store, name), os.path.join(cache, name)
            mode = 0o600 if secret else 0o644
            if not os.path.isfile(store_path):
                files[name] = {'store': False, 'cache': os.path.isfile(cache_path)}
                continue
            data = _read(store_path)
            if secret and not is_encrypted(data):
                problems.append('%s is a secret but is not encrypted with Ansible Vault: encrypt it before it is '
                                'committed (ansible-vault encrypt %s), and if an unencrypted copy was ever pushed, '
                                'replace the secret.' % (store_path, store_path))
                files[name] = {'store': True, 'cache': os.path.isfile(cache_path)}
                continue
            known = state.get(name) or {}
            if (known.get('store') == _sha256(data) and os.path.isfile(cache_path)
                    and known.get('plain') == _sha256(_read(cache_path))
                    and (os.stat(cache_path).st_mode & 0o777) == mode):
                files[name] = {'store': True, 'cache': True}
                continue
            try:
                plain = self._decrypt(data, store_path)
            except AnsibleError as exc:
                problems.append(to_text(exc))
                files[name] = {'store': True, 'cache': os.path.isfile(cache_path)}
                continue
            if not self._same_file(cache_path, plain, mode):
                self._write(cache_path, plain, mode)
                refreshed.append(name)
            if state.get(name) != {'store': _sha256(data), 'plain': _sha256(plain)}:
                state[name] = {'store': _sha256(data), 'plain': _sha256(plain)}
                dirty = True
            files[name] = {'store': True, 'cache': True}
        if dirty:
            self._save_state(cache, state)
        # A secret the store lacks is written there, encrypted, later in this run: say now, before anything
        # is generated, when this run could not encrypt it.
        absent = [name for name in params['secret'] if not files[name]['store']]
        if absent:
            encryptor = self._encryptor(params['vault_id'])
            if isinstance(encryptor, str):
                named = ', '.join(absent[:5]) + (' and %d more' % (len(absent) - 5) if len(absent) > 5 else '')
                problems.append('%s %s not in the store %s yet, and this run could not write %s encrypted: %s.'
                                % (named, 'is' if len(absent) == 1 else 'are', store,
                                   'it' if len(absent) == 1 else 'them', encryptor))
        # The directories are made only when the run goes on (a problem stops it before anything is made).
        made = [] if problems else self._directories(cache, params['directories'])
        # Bringing the working copy in line with the committed store changes nothing on the cluster or in
        # the store: not a change (a fresh checkout's first run reports changed=0 when nothing else changes).
        return {'changed': False, 'files': files, 'refreshed': refreshed, 'directories': made, 'problems': problems}

    @staticmethod
    def _directories(cache, names):
        """Each named directory of the working copy present with mode 0700 (made, or its mode set back): the
        names of those made or corrected. A file in a directory's place is an error naming it."""
        made = []
        for name in names:
            path = os.path.join(cache, name)
            if os.path.lexists(path) and not os.path.isdir(path):
                raise AnsibleError('%s should be a directory of the working copy and is not: move it away' % path)
            if not os.path.isdir(path):
                os.makedirs(path, mode=0o700)
                os.chmod(path, 0o700)
                made.append(name)
            elif (os.stat(path).st_mode & 0o777) != 0o700:
                os.chmod(path, 0o700)
                made.append(name)
        return made

    def _plan(self, params):
        """Per shared secret: where it comes from this run (module_utils.shared_secrets.plan_secret)."""
        store, cache = params['store'], params['cache']
        actions, messages, stop = {}, {}, []
        for spec in params['shared']:
            unknown = sorted(set(spec) - set(SHARED_KEYS))
            if unknown or not spec.get('name') or not spec.get('files'):
                raise AnsibleError('shared entries need name and files (keys: %s); got %s'
                                   % (', '.join(SHARED_KEYS), ', '.join(sorted(spec))))
            names = list(spec['files'])
            store_paths = [os.path.join(store, name) for name in names]
            cache_paths = [os.path.join(cache, name) for name in names]
            cache_present = all(os.path.isfile(path) for path in cache_paths)
            compare = os.path.join(cache, spec.get('compare') or names[0])
            candidate = to_text(_read(compare), errors='surrogate_or_strict') if cache_present else ''
            held = []
            for host in sorted(params['held']):
                contents = params['held'][host] or {}
                value = contents.get(spec.get('node_path') or '')
                if isinstance(value, str) and value.strip():
                    held.append((host, value))
                elif spec.get('node_marker') and spec['node_marker'] in (contents.get(spec.get('node_marker_path') or '') or ''):
                    held.append((host, True))
            decision = shared_secrets.plan_secret(
                spec.get('label') or spec['name'], spec.get('kind') or 'password', store_paths,
                sum(1 for path in store_paths if os.path.isfile(path)), cache_paths, cache_present, candidate, held,
                node_path=spec.get('node_path') or '', instead=spec.get('instead') or 'the variable that provides it',
                rotate=params['rotate'], rotatable=bool(spec.get('rotatable')))
            actions[spec['name']] = decision['action']
            messages[spec['name']] = decision['message']
            if decision['action'] == shared_secrets.STOP:
                stop.append(decision['message'])
        return {'changed': False, 'actions': actions, 'messages': messages, 'stop': stop}

    def _push(self, params):
        """Working copy -> store for every listed file that is new or changed; generate passwords asked for."""
        store, cache = params['store'], params['cache']
        state = self._state(cache)
        written, generated, missing, problems, dirty = [], [], [], [], False
        for name in params['generate']:
            path = os.path.join(cache, name)
            if not os.path.isfile(path):
                password = ''.join(secrets.choice(PASSWORD_CHARS) for dummy in range(PASSWORD_LENGTH))
                self._write(path, password, 0o600)
                generated.append(name)
        encryptor = None
        for name in params['secret'] + params['public']:
            secret = name in params['secret']
            store_path, cache_path = os.path.join(store, name), os.path.join(cache, name)
            if not os.path.isfile(cache_path):
                # Listed, not in the working copy (a node whose key this run did not make): reported, not written.
                missing.append(name)
                continue
            plain = _read(cache_path)
            known = state.get(name) or {}
            if os.path.isfile(store_path):
                data = _read(store_path)
                if known.get('store') == _sha256(data) and known.get('plain') == _sha256(plain):
                    continue
                if not secret or is_encrypted(data):
                    try:
                        if self._decrypt(data, store_path) == plain:
                            state[name] = {'store': _sha256(data), 'plain': _sha256(plain)}
                            dirty = True
                            continue
                    except AnsibleError:
                        pass  # replaced below, with this run's vault secret
            if secret:
                if encryptor is None:
                    encryptor = self._encryptor(params['vault_id'])
                if isinstance(encryptor, str):
                    problems.append('%s was not written: %s.' % (store_path, encryptor))
                    continue
                vault, vault_secret, header_id = encryptor
                data = vault.encrypt(plain, vault_secret, header_id)
                self._write(store_path, data, 0o600, dir_mode=0o755)
            else:
                data = plain
                self._write(store_path, data, 0o644, dir_mode=0o755)
            state[name] = {'store': _sha256(to_bytes(data)), 'plain': _sha256(plain)}
            dirty = True
            written.append(store_path)
        if dirty:
            self._save_state(cache, state)
        return {'changed': bool(written or generated), 'written': written, 'generated': generated,
                'missing': missing, 'problems': problems}
