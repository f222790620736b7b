# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Search the lab's verbose Ansible output for every secret's value; exit 1 when one appears.

Usage: secret_grep.py LOG MOLECULE_YML CREDENTIALS_DIR

LOG is the ANSIBLE_LOG_PATH of the scenario's runs (create to verify, each with -vvv --diff and
CI=true). The secrets are the values the lab uses: the basic-auth passwords and Slack URLs of the
scenario's inventory (MOLECULE_YML), and everything the role generated on the controller under
CREDENTIALS_DIR: passwords (whole file) and private keys (each line of their base64 body). Only
names and line numbers are printed, never a value.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import sys

import yaml

# A base64 line of a PEM body is 64 characters; shorter pieces would match by chance.
MIN_LENGTH = 12


def inventory_secrets(molecule_yml):
    with open(molecule_yml) as handle:
        config = yaml.safe_load(handle)
    group_vars = config['provisioner']['inventory']['group_vars']['gpucluster']
    secrets = {}
    for user, password in sorted((group_vars.get('monitoring_basic_auth_users') or {}).items()):
        secrets['basic-auth password of %s' % user] = str(password)
    for receiver in group_vars.get('monitoring_alertmanager_receivers') or []:
        for number, slack in enumerate(receiver.get('slack_configs') or []):
            secrets['Slack URL of receiver %s #%d' % (receiver['name'], number)] = slack['api_url']
    return secrets


def credential_secrets(directory):
    secrets = {}
    for root, _dirs, files in os.walk(directory):
        for name in sorted(files):
            path = os.path.join(root, name)
            relative = os.path.relpath(path, directory)
            with open(path) as handle:
                text = handle.read()
            if '-----BEGIN' in text:
                if 'PRIVATE KEY-----' not in text:
                    continue  # certificates are public
                # A short last line (padding) could match by chance; the full lines cover the key.
                body = [line for line in text.splitlines() if len(line) >= MIN_LENGTH and not line.startswith('-----')]
                for number, line in enumerate(body):
                    secrets['%s (body line %d)' % (relative, number + 1)] = line
            else:
                secrets[relative] = text.strip()
    return secrets


def main(argv):
    if len(argv) != 4:
        sys.stderr.write(__doc__)
        return 2
    log, molecule_yml, credentials = argv[1:]
    secrets = inventory_secrets(molecule_yml)
    generated = credential_secrets(credentials)
    secrets.update(generated)
    short = sorted(name for name, value in secrets.items() if len(value) < MIN_LENGTH)
    if short:
        print('secrets too short to search for reliably: %s' % ', '.join(short))
        return 1
    # The test must not pass on nothing: the role's generated password, the CA key and a node key are
    # expected, and the log must be the verbose, diffing output of a converge of this role.
    expected = ['monitoring_scrape_password', 'monitoring-pki/ca.key (body line 1)']
    missing = [name for name in expected if name not in secrets]
    with open(log, errors='replace') as handle:
        lines = handle.read().splitlines()
    text = '\n'.join(lines)
    markers = {
        'a -vvv connection line': 'ESTABLISH SSH CONNECTION',
        'a --diff of a changed file': '+++ after',
        "the role's web config task": 'Write the web config',
    }
    absent = [what for what, marker in markers.items() if marker not in text]
    if missing or absent:
        print('nothing to check: missing secrets %s, log %s lacks %s' % (missing, log, absent))
        return 1
    found = []
    for name, value in sorted(secrets.items()):
        hits = [number + 1 for number, line in enumerate(lines) if value in line]
        if hits:
            found.append('%s: log lines %s' % (name, ', '.join(str(hit) for hit in hits[:10])))
    print('searched %d lines of verbose output for %d secret values (%d generated on the controller)'
          % (len(lines), len(secrets), len(generated)))
    for line in found:
        print('SECRET IN OUTPUT: ' + line)
    return 1 if found else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
