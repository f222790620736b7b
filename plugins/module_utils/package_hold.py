# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Package holds: decisions, no I/O (the module gpucluster.core.package_hold adapts them).

A role holds the packages it installed at their pin in one call: the module reads the holds of the named
packages once (dpkg's selections, or the dnf versionlock list and the installed versions), these functions
decide which names differ from the wanted state, and the module writes only those.

apt (dpkg): a package is held when its selection is ``hold``. Holding sets ``hold`` on every installed
instance of the name (``libfoo:amd64`` and ``libfoo:i386`` on a multiarch node); releasing sets ``install``
on an installed instance, and ``deinstall`` on one that is not installed (``install`` would ask dpkg to
install it).

dnf (versionlock plugin of dnf 4): a package is held when the lock list names exactly its installed
versions, in the plugin's own form ``name-EPOCH:VERSION-RELEASE.*`` (what ``dnf versionlock add`` writes).
Holding replaces the name's other entries (the lock of a previous pin) with those; releasing removes every
entry of the name. Exclude entries (``!name-...``), comments and other names' lines stay as they are.

Holding a package that is not installed is an error: every caller installs first, so a missing package means
the install did not do what the role expected. Two exceptions, both reported in ``not_installed``: check mode,
where the install before the hold was only simulated (the name is reported as to be held), and
``skip_missing`` (the kernel hold names a set of kernel packages of which a node has some). Standard library
only, Python 3.9+.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import re

STATES = ('held', 'unheld')
MANAGERS = ('apt', 'dnf')
# A package name of either family; no version, no architecture qualifier, no option-like leading dash.
NAME_RE = re.compile(r'^[A-Za-z0-9][A-Za-z0-9+._-]*\Z')
# dpkg states of a package whose files are not on the node.
ABSENT_STATUSES = frozenset(('not-installed', 'config-files'))
# The part of a lock entry after "name-": [EPOCH:]VERSION-RELEASE[.ARCH or .*]; a version without an epoch
# starts with a digit, so that "foo-bar-1.0-1" is never taken for an entry of "foo".
_LOCK_TAIL = re.compile(r'^(?:[0-9]+:[^-\s]+|[0-9][^-\s]*)-[^-\s]+\Z')
MAX_NAMES_SHOWN = 12

# The dpkg-query format the module reads: the plain name, the name with its architecture where dpkg needs it
# to tell instances apart (${binary:Package}), and the status triple (want, error flag, state).
DPKG_QUERY_FORMAT = '${Package}\\t${binary:Package}\\t${Status}\\n'
RPM_QUERY_FORMAT = '%{NAME}\\t%{EPOCHNUM}:%{VERSION}-%{RELEASE}\\n'


class HoldError(ValueError):
    pass


def _shown(names):
    names = list(names)
    if len(names) > MAX_NAMES_SHOWN:
        return '%s and %d more' % (', '.join(names[:MAX_NAMES_SHOWN]), len(names) - MAX_NAMES_SHOWN)
    return ', '.join(names)


def check_names(names):
    """The names, in the order given, each once; HoldError names the first bad one and what is accepted."""
    if names is None:
        return []
    if isinstance(names, (str, bytes)) or not isinstance(names, (list, tuple)):
        raise HoldError('name must be a list of package names, got %s' % type(names).__name__)
    out = []
    for name in names:
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise HoldError('name holds %r; accepted: package names (letters, digits and + . _ -, starting with a '
                            'letter or digit), without a version or an architecture' % (str(name)[:80],))
        if name not in out:
            out.append(name)
    return out


def check_state(state):
    if state not in STATES:
        raise HoldError('state is %r; accepted: %s' % (state, ', '.join(STATES)))
    return state


# ---------------------------------------------------------------------------------------------------------
# apt (dpkg selections)
# ---------------------------------------------------------------------------------------------------------

def parse_dpkg_query(text, names):
    """Instances of the named packages from ``dpkg-query -W -f DPKG_QUERY_FORMAT`` output:
    {name: [{'instance': 'libfoo:i386', 'want': 'hold', 'status': 'installed'}, ...]}. A name dpkg does not
    know has no entry; lines of other names and malformed lines are ignored."""
    wanted = set(names)
    found = {}
    for line in (text or '').splitlines():
        fields = line.split('\t')
        if len(fields) != 3 or fields[0] not in wanted:
            continue
        status = fields[2].split()
        if len(status) != 3:
            continue
        instance = fields[1].strip() or fields[0]
        found.setdefault(fields[0], []).append({'instance': instance, 'want': status[0], 'status': status[2]})
    return found


def _present(entry):
    return entry['status'] not in ABSENT_STATUSES


def apt_plan(state, names, instances, check_mode=False, skip_missing=False):
    """What to change in dpkg's selections.

    Returns {'lines': [(instance, selection), ...] to give ``dpkg --set-selections`` (in name order),
    'changed': [names whose hold changes (or would, in check mode)], 'not_installed': [names not installed],
    'before': {instance: selection}, 'after': {instance: selection}}. HoldError when a package to hold is not
    installed (outside check mode and without ``skip_missing``)."""
    check_state(state)
    not_installed = [n for n in names if not any(_present(e) for e in instances.get(n) or [])]
    if state == 'held' and not_installed and not check_mode and not skip_missing:
        raise HoldError(_not_installed_message(not_installed, instances))
    lines, changed = [], []
    before, after = {}, {}
    for name in names:
        entries = instances.get(name) or []
        if state == 'held':
            if name in not_installed:
                # Check mode: the install before this task was simulated; the real run holds the package.
                if check_mode and not skip_missing:
                    changed.append(name)
                continue
            todo = [e for e in entries if _present(e) and e['want'] != 'hold']
        else:
            todo = [e for e in entries if e['want'] == 'hold']
        for entry in todo:
            if state == 'held':
                selection = 'hold'
            else:
                # install would ask dpkg to install a package that is not there.
                selection = 'install' if _present(entry) else 'deinstall'
            lines.append((entry['instance'], selection))
            before[entry['instance']] = entry['want']
            after[entry['instance']] = selection
        if todo:
            changed.append(name)
    return {'lines': lines, 'changed': changed, 'not_installed': not_installed, 'before': before, 'after': after}


def _not_installed_message(missing, instances):
    def known(name):
        entries = instances.get(name) or []
        if not entries:
            return '%s (unknown to dpkg)' % name
        return '%s (%s)' % (name, ', '.join('%s %s' % (e['instance'], e['status']) for e in entries))
    return ('cannot hold %s: not installed. Holding is for installed packages: the task that installs them must '
            'run first (and succeed), or the name is wrong' % _shown(known(n) for n in missing))


def selections_text(lines):
    """The input of ``dpkg --set-selections`` for ``lines``."""
    return ''.join('%s %s\n' % (instance, selection) for instance, selection in lines)


def apt_unapplied(lines, instances_after):
    """The (instance, selection) pairs dpkg did not take, from a second read after ``dpkg --set-selections``
    (dpkg warns about a name it does not know and still exits 0)."""
    seen = {}
    for entries in instances_after.values():
        for entry in entries:
            seen[entry['instance']] = entry['want']
    return [(i, s) for i, s in lines if seen.get(i) != s]


def apt_diff(plan):
    def text(values):
        return ''.join('%s %s\n' % (i, values[i]) for i in sorted(values))
    return {'before': text(plan['before']), 'after': text(plan['after']), 'before_header': 'dpkg selections',
            'after_header': 'dpkg selections'}


# ---------------------------------------------------------------------------------------------------------
# dnf (versionlock plugin)
# ---------------------------------------------------------------------------------------------------------

def parse_rpm_query(text, names):
    """Installed versions of the named packages from ``rpm -q --qf RPM_QUERY_FORMAT``: {name: [EPOCH:VERSION-RELEASE,
    ...]} sorted and unique; a name that is not installed has no entry ("package x is not installed" lines
    are ignored)."""
    wanted = set(names)
    found = {}
    for line in (text or '').splitlines():
        fields = line.split('\t')
        if len(fields) != 2 or fields[0] not in wanted or not fields[1].strip():
            continue
        evr = fields[1].strip()
        if evr.startswith('(none):'):
            evr = '0:' + evr[len('(none):'):]
        found.setdefault(fields[0], set()).add(evr)
    return dict((name, sorted(evrs)) for name, evrs in found.items())


def lock_spec(name, evr):
    """The lock entry of one installed version, as ``dnf versionlock add`` writes it (architecture ignored)."""
    if ':' not in evr:
        evr = '0:' + evr
    return '%s-%s.*' % (name, evr)


def lock_owner(entry, names):
    """The name among ``names`` that lock entry ``entry`` (a stripped line, not a comment) locks, or None.
    Exclude entries (``!...``) belong to nobody here: they are left as they are."""
    if not entry or entry.startswith('!') or entry.startswith('#'):
        return None
    best = None
    for name in names:
        if entry.startswith(name + '-') and _LOCK_TAIL.match(entry[len(name) + 1:]):
            if best is None or len(name) > len(best):
                best = name
    return best


def parse_versionlock_conf(text):
    """(enabled, locklist path or None) from the plugin's versionlock.conf ([main] enabled, locklist)."""
    enabled, locklist, section = True, None, None
    for raw in (text or '').splitlines():
        line = raw.strip()
        if not line or line[0] in '#;':
            continue
        if line.startswith('[') and line.endswith(']'):
            section = line[1:-1].strip()
            continue
        if section != 'main' or '=' not in line:
            continue
        key, _sep, value = line.partition('=')
        key, value = key.strip().lower(), value.strip()
        if key == 'enabled':
            enabled = value.lower() in ('1', 'true', 'yes', 'on')
        elif key == 'locklist':
            locklist = value or None
    return enabled, locklist


def dnf_plan(state, names, installed, locklist_text, check_mode=False, skip_missing=False):
    """What to change in the versionlock list.

    ``installed``: parse_rpm_query's result. Returns {'text': the new list text, 'changed': [names],
    'not_installed': [names], 'removed': [entries], 'added': [entries]}; ``text`` equals ``locklist_text`` when
    nothing changes. HoldError when a package to hold is not installed (outside check mode and without
    ``skip_missing``)."""
    check_state(state)
    lines = (locklist_text or '').splitlines()
    current = {}
    for index, line in enumerate(lines):
        owner = lock_owner(line.strip(), names)
        if owner is not None:
            current.setdefault(owner, []).append(index)
    not_installed = [n for n in names if not installed.get(n)]
    if state == 'held' and not_installed and not check_mode and not skip_missing:
        raise HoldError('cannot lock %s: not installed (rpm -q knows no installed version). Version locks are for '
                        'installed packages: the task that installs them must run first (and succeed), or the name '
                        'is wrong' % _shown(not_installed))
    drop, added, changed = set(), [], []
    for name in names:
        have = [lines[i].strip() for i in current.get(name, [])]
        if state == 'held':
            if not installed.get(name):
                if check_mode and not skip_missing:
                    changed.append(name)
                continue
            want = [lock_spec(name, evr) for evr in installed[name]]
            if sorted(set(have)) == sorted(want) and len(have) == len(want):
                continue
            drop.update(current.get(name, []))
            added.extend(want)
            changed.append(name)
        elif have:
            drop.update(current.get(name, []))
            changed.append(name)
    if not drop and not added:
        return {'text': locklist_text or '', 'changed': changed, 'not_installed': not_installed,
                'removed': [], 'added': []}
    kept = [line for i, line in enumerate(lines) if i not in drop]
    text = ''.join(line + '\n' for line in kept + added)
    return {'text': text, 'changed': changed, 'not_installed': not_installed,
            'removed': [lines[i].strip() for i in sorted(drop)], 'added': added}
