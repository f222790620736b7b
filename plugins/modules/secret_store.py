# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Documentation only: the store is read and written on the controller by the action plugin of the same name.
from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
---
module: secret_store
short_description: Keep generated secrets in an Ansible Vault-encrypted store inside the inventory
version_added: 0.1.0
description:
  - Runs on the controller (action plugin); nothing on a managed node is read or written.
  - The store (O(store)) is a directory inside the site's inventory, committed with it, so that every checkout
    of the inventory finds the same generated secrets. Files named in O(secret) are encrypted there with Ansible
    Vault; files named in O(public) (certificates) are kept as they are.
  - The working copy (O(cache)) is a directory on this controller, never committed, holding the same files
    decrypted (secrets mode 0600, public files 0644, directories 0700) for the tasks that need files.
  - O(mode=pull) copies every listed file the store has into the working copy, decrypting it with the vault
    secrets of this run; a secret found unencrypted in the store is reported, never used.
  - O(mode=plan) decides, for each shared secret in O(shared), whether this run uses the store's, takes the
    working copy's into the store, generates a new one, replaces it (O(rotate)), or must stop because the
    cluster already holds one this checkout does not have (O(held), what the nodes hold).
  - O(mode=push) generates the passwords named in O(generate) that the working copy lacks and writes every
    listed file that is new or changed into the store, encrypting secrets with this run's vault secret
    (O(vault_id), else C(vault_encrypt_identity), else the only vault id given). Unchanged files are not
    rewritten, so a rerun leaves the inventory repository as it is.
  - The vault secrets are the ones this run was given (C(--vault-id), C(--vault-password-file),
    C(ANSIBLE_VAULT_PASSWORD_FILE) or C(vault_password_file) in C(ansible.cfg)).
  - No result holds a secret or a digest of one. Expected problems are returned in RV(problems) (the tasks using
    this run with C(no_log), which would hide a failure's message); the caller asserts on them.
author:
  - gpucluster.core maintainers (@gpucluster)
attributes:
  check_mode:
    description: The store and the working copy are controller files; the tasks that use this plugin run with
      C(check_mode=false), like the role's other controller-side tasks.
    support: none
  diff_mode:
    description: Secrets are never shown.
    support: none
  idempotent:
    description: A second push with nothing new writes nothing.
    support: full
options:
  mode:
    description: V(pull), V(plan) or V(push), as described above.
    type: str
    required: true
    choices: [pull, plan, push]
  store:
    description: The store directory inside the inventory (committed; encrypted secrets).
    type: path
    required: true
  cache:
    description: The controller's working copy (never committed; decrypted, 0600).
    type: path
    required: true
  secret:
    description: Relative names of the secret files (the same under O(store) and O(cache)).
    type: list
    elements: str
    default: []
  public:
    description: Relative names of files that are not secret (certificates), kept unencrypted in the store.
    type: list
    elements: str
    default: []
  directories:
    description: With O(mode=pull), relative names of directories of the working copy to keep present with mode
      0700 (made, or their mode set back), such as the directory the certificates are made in; nothing is made
      when the pull reports a problem. A file in the place of one is an error.
    type: list
    elements: str
    default: []
  generate:
    description: With O(mode=push), secret files (in O(secret)) to generate as a random password of 32 letters and
      digits when the working copy has none.
    type: list
    elements: str
    default: []
  shared:
    description:
      - With O(mode=plan), the secrets one cluster shares. Each entry has C(name) (the key in RV(actions)), C(label)
        (for messages), C(kind) (V(certificate) compared by fingerprint, or V(password)), C(files) (relative names),
        C(compare) (the file compared with the nodes' copy; default the first), C(node_path) (where a node holds
        its copy), optionally C(node_marker_path) and C(node_marker) (a node whose file at C(node_marker_path)
        contains C(node_marker) holds one that cannot be compared), C(instead) (the variables that provide it
        instead, for messages) and C(rotatable).
    type: list
    elements: dict
    default: []
  held:
    description: With O(mode=plan), what the nodes hold, per host a mapping of node path to content (or null).
    type: dict
    default: {}
  rotate:
    description: With O(mode=plan), the SHA-256 fingerprint of a rotatable certificate to replace with a new one.
    type: str
    default: ""
  vault_id:
    description: The vault id to encrypt new store files with; empty for C(vault_encrypt_identity) or the only one.
    type: str
    default: ""
seealso:
  - module: gpucluster.core.file_read
'''

EXAMPLES = r'''
- name: Bring the store's secrets into the working copy
  gpucluster.core.secret_store:
    mode: pull
    store: "{{ inventory_dir }}/.secrets"
    cache: "{{ inventory_dir }}/.credentials"
    secret: [monitoring-pki/ca.key, monitoring_scrape_password]
    public: [monitoring-pki/ca.crt]
  delegate_to: localhost
  run_once: true
  check_mode: false
  no_log: true
  register: pulled

- name: Stop on a store this run cannot read
  ansible.builtin.assert:
    that: pulled.problems | length == 0
    fail_msg: "{{ pulled.problems | join(' ') }}"
'''

RETURN = r'''
files:
  description: With O(mode=pull), per relative name whether the store and the working copy have it (after the pull).
  returned: mode pull
  type: dict
  sample: {monitoring-pki/ca.key: {store: true, cache: true}, monitoring_scrape_password: {store: false, cache: false}}
refreshed:
  description: With O(mode=pull), the names whose working copy was (re)written from the store.
  returned: mode pull
  type: list
  elements: str
directories:
  description: With O(mode=pull), the names of O(directories) that were made or had their mode set back to 0700.
  returned: mode pull
  type: list
  elements: str
actions:
  description: With O(mode=plan), per shared secret one of V(store), V(import), V(generate), V(rotate), V(stop).
  returned: mode plan
  type: dict
  sample: {ca: store, scrape_password: generate}
messages:
  description: With O(mode=plan), per shared secret why (names, paths, hosts and fingerprints only).
  returned: mode plan
  type: dict
stop:
  description: With O(mode=plan), the messages of the secrets that stop the run.
  returned: mode plan
  type: list
  elements: str
written:
  description: With O(mode=push), the store files written (to be committed with the inventory).
  returned: mode push
  type: list
  elements: str
generated:
  description: With O(mode=push), the names of the passwords generated.
  returned: mode push
  type: list
  elements: str
missing:
  description:
    - With O(mode=push), the listed names the working copy does not hold, so nothing was written for them (for
      example the key of a node this run did not reach). The store keeps what it had for them.
  returned: mode push
  type: list
  elements: str
problems:
  description: What kept a file from being read or written, naming the file and what to do.
  returned: modes pull and push
  type: list
  elements: str
'''
