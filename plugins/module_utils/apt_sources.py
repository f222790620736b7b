# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""APT's package sources as a node has them: the one-line format (sources.list, *.list) and deb822
(*.sources), as sources.list(5) describes both. Pure functions, no Ansible imports, Python 3.9+.

Used to take a Debian node's own mirror for the components a role adds (a site's internal mirror,
often plain http: apt authenticates what it fetches by the archive's signed Release files, not by
the transport) and to see whether a component is already enabled.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re

# A one-line entry: type, optional [options], URI, suite, components.
_ONE_LINE = re.compile(r'^\s*(deb|deb-src)\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)(?:\s+(.*?))?\s*$')
_FIELD = re.compile(r'^([A-Za-z][A-Za-z0-9-]*):\s*(.*?)\s*$')
# A mirror another sources file can name: http or https (a file:, cdrom: or mirror+file: source is none).
_MIRROR_URI = re.compile(r'^https?://\S+$')


def _words(text):
    return [w for w in (text or '').split() if w]


def _strip_comment(line):
    return line.split('#', 1)[0].rstrip()


def _deb822(text):
    """The stanzas of a deb822 file as lists of ``(field, value)``; comments and continuation lines handled."""
    stanzas, fields, last = [], [], None
    for raw in text.splitlines() + ['']:
        if raw.startswith('#'):
            continue
        if not raw.strip():
            if fields:
                stanzas.append(fields)
            fields, last = [], None
            continue
        if raw[:1] in (' ', '\t') and last is not None:
            fields[last] = (fields[last][0], (fields[last][1] + ' ' + _strip_comment(raw).strip()).strip())
            continue
        match = _FIELD.match(_strip_comment(raw))
        if match:
            fields.append((match.group(1).lower(), match.group(2)))
            last = len(fields) - 1
    return stanzas


def parse_sources(text, deb822=False):
    """Enabled entries of one sources file: ``[{'types', 'uris', 'suites', 'components'}]``.

    ``deb822``: the file is a ``.sources`` file; otherwise the one-line format. Disabled stanzas
    (``Enabled: no``), commented lines and lines that are not entries are left out."""
    entries = []
    if not isinstance(text, str):
        return entries
    if deb822:
        for stanza in _deb822(text):
            fields = dict(stanza)
            if fields.get('enabled', 'yes').strip().lower() == 'no':
                continue
            entry = {'types': _words(fields.get('types')), 'uris': _words(fields.get('uris')),
                     'suites': _words(fields.get('suites')), 'components': _words(fields.get('components'))}
            if entry['types'] and entry['uris'] and entry['suites']:
                entries.append(entry)
        return entries
    for line in text.splitlines():
        match = _ONE_LINE.match(_strip_comment(line))
        if match:
            entries.append({'types': [match.group(1)], 'uris': [match.group(2)], 'suites': [match.group(3)],
                            'components': _words(match.group(4))})
    return entries


def node_sources(files):
    """Every enabled entry of a node's sources, from ``{path: content}`` (the files read from
    /etc/apt/sources.list and /etc/apt/sources.list.d/, content None where missing): ``.sources``
    files are deb822, the others the one-line format. Files are taken in sorted order, as apt reads them."""
    entries = []
    for path in sorted(files or {}):
        entries.extend(parse_sources((files or {})[path], deb822=str(path).endswith('.sources')))
    return entries


def has_component(entries, component):
    """Whether a binary (``deb``) entry enables ``component``."""
    return any('deb' in e['types'] and component in e['components'] for e in entries or [])


def archive_uri(entries, suite):
    """The URI of the first binary entry that carries ``suite`` (e.g. bookworm, bookworm-security), or ''.

    Only http(s) URIs are taken (_MIRROR_URI)."""
    for entry in entries or []:
        if 'deb' not in entry['types'] or suite not in entry['suites']:
            continue
        for uri in entry['uris']:
            if _MIRROR_URI.match(uri):
                return uri.rstrip('/')
    return ''


_WORD = re.compile(r'^[A-Za-z0-9][A-Za-z0-9._+~/-]*$')
_KEY_BLOCK = '-----BEGIN PGP PUBLIC KEY BLOCK-----'
SITE_REPOSITORY_KEYS = ('name', 'uris', 'suites', 'components', 'signed_by')


def _as_list(value):
    if isinstance(value, str):
        return value.split()
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return list(value)
    return None


def site_repository_errors(repository, variable):
    """Why ``repository`` (a site's package repository, as options of ansible.builtin.deb822_repository: name,
    uris, suites, components, signed_by) cannot be added ([] when it can; an empty mapping is no repository).

    uris: http or https (apt checks what it fetches against the repository's signed Release file, whatever the
    transport); signed_by is required (a repository apt cannot authenticate is never added): an absolute path of
    a keyring on the node, an https URL of the key, or the armored key block itself."""
    if repository is None or repository == {}:
        return []
    if not isinstance(repository, dict):
        return ['%s must be a mapping (name, uris, suites, components, signed_by) or {} for none, got %s'
                % (variable, type(repository).__name__)]
    errors = []
    unknown = sorted(str(k) for k in repository if k not in SITE_REPOSITORY_KEYS)
    if unknown:
        errors.append('%s has keys it does not take: %s (accepted: %s)'
                      % (variable, ', '.join(unknown), ', '.join(SITE_REPOSITORY_KEYS)))
    name = repository.get('name', 'slurm')
    if not isinstance(name, str) or not re.match(r'^[A-Za-z0-9][A-Za-z0-9_.-]*$', name):
        errors.append('%s.name must be a word of letters, digits, ".", "_" and "-" (the sources file\'s name), got %r'
                      % (variable, name))
    uris = _as_list(repository.get('uris'))
    if not uris or not all(_MIRROR_URI.match(u) for u in uris):
        errors.append('%s.uris must be one or more http:// or https:// URLs, got %r' % (variable, repository.get('uris')))
    suites = _as_list(repository.get('suites'))
    if not suites or not all(_WORD.match(s) for s in suites):
        errors.append('%s.suites must name one or more suites (such as jammy), got %r'
                      % (variable, repository.get('suites')))
    if 'components' in repository:
        components = _as_list(repository.get('components'))
        if components is None or not all(_WORD.match(c) for c in components):
            errors.append('%s.components must be a list of component names (such as [main]), got %r'
                          % (variable, repository.get('components')))
    signed_by = repository.get('signed_by')
    if not isinstance(signed_by, str) or not (
            (signed_by.startswith('/') and not re.search(r'\s', signed_by))
            or re.match(r'^https://\S+$', signed_by) or signed_by.strip().startswith(_KEY_BLOCK)):
        errors.append('%s.signed_by must be the repository\'s signing key: an absolute path of a keyring on the node, '
                      'an https:// URL of the key, or the armored key block (%s...); got %r'
                      % (variable, _KEY_BLOCK, signed_by if not isinstance(signed_by, str) else signed_by[:60]))
    return errors
