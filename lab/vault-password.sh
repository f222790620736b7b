#!/bin/sh
# The lab's Ansible Vault password, for make lab, make bench and the molecule scenarios only: Ansible runs
# this file (ANSIBLE_VAULT_PASSWORD_FILE, set by lab/lab.sh, bench/run.sh and .config/molecule/config.yml)
# and reads the password it prints. The password is random, made on first use for this lab on this
# machine and never committed: in molecule's ephemeral directory for a scenario (removed with it, as is the
# scenario's store), else in .lab/ (git-ignored; make lab-down removes it with the lab's store,
# inventories/lab/.secrets). A site uses its own vault password (--vault-id, ANSIBLE_VAULT_PASSWORD_FILE).
set -eu
if [ -n "${MOLECULE_EPHEMERAL_DIRECTORY:-}" ]; then
  dir=$MOLECULE_EPHEMERAL_DIRECTORY
else
  dir=$(cd "$(dirname "$0")/.." && pwd)/.lab
fi
file=$dir/vault-password
if [ ! -s "$file" ]; then
  mkdir -p "$dir"
  umask 077
  tmp=$(mktemp "$dir/.vault-password.XXXXXX")
  head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp"
  # Runs that start together (ansible-playbook and its forks, parallel scenarios): the first link wins.
  ln "$tmp" "$file" 2>/dev/null || true
  rm -f "$tmp"
fi
cat "$file"
