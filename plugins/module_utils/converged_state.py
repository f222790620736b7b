# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The converged-state fast path: decisions, no I/O.

A role's run on a node is skipped as a block when two things hold (docs/performance.md, "Fast path"):

1. The fingerprint of everything the role would apply is the one recorded on the node by the last
   run that went through the role's full path and finished. The controller computes it
   (plugins/action/converged.py) from named parts: the role's code and the collection's plugins,
   the role's own variables (the keys of its defaults) and the site switches, the facts the role
   reads, and the inputs the role declares (what it reads of other hosts, derived values).
2. Everything the role manages on the node is as that run left it: files (content, mode, owner),
   packages (version and hold), services (enabled and active), device globs, and probes (a
   command's exit status and output). The node module observes them; ``compare`` decides.

Anything different, missing or unreadable gives a reason and the full path. Pure functions over
dicts: standard library only, Python 3.9+.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import hashlib
import json
import math

# The format of the record a node keeps. A record of another format (an older or newer collection)
# is never trusted: the full path runs and writes the current one.
RECORD_FORMAT = 1
PARTS = ('code', 'variables', 'facts', 'inputs')
MANAGED_KINDS = ('files', 'packages', 'services', 'globs', 'probes')
# How many names a reason lists before "and N more".
REASON_NAMES = 8
# Nesting beyond this in a variable or fact is not a configuration a role applies; it is refused,
# never walked without bound.
MAX_DEPTH = 64


# Facts the collection's own modules set during a run (gpu_facts, stack_facts, rdma_facts, package_facts,
# getent). Whether they exist when a role's check runs depends on which roles ran before it in this run,
# so they count only for a role that gathers them itself before its check and names them.
PRODUCED_FACTS = frozenset(('gpu', 'gpu_stack', 'rdma', 'packages', 'getent_passwd', 'getent_group', 'services'))
# Interfaces that come and go with containers and virtual networks, not with the machine.
EPHEMERAL_INTERFACES = ('veth', 'docker', 'br-', 'cali', 'flannel', 'cni', 'vxlan', 'tunl', 'virbr', 'tap', 'lxc')
# Parts of the GPU and RDMA facts that describe the machine; readings (temperature, clocks, counters,
# utilisation) change every run and are not what a role applies.
GPU_DEVICE_KEYS = ('index', 'uuid', 'pci_bus_id', 'name', 'memory_total_mib', 'serial', 'vbios_version')
GPU_TOP_KEYS = ('present', 'count', 'driver_version', 'cuda_version')


class FingerprintError(ValueError):
    pass


def stable_fact(name, value):
    """The part of fact ``name`` that describes the machine, for the fingerprint."""
    if name == 'interfaces' and isinstance(value, list):
        return sorted(str(i) for i in value if not str(i).startswith(EPHEMERAL_INTERFACES))
    if name == 'gpu' and isinstance(value, dict):
        devices = value.get('devices') if isinstance(value.get('devices'), list) else []
        return {
            'top': dict((k, value.get(k)) for k in GPU_TOP_KEYS),
            'status': (value.get('health') or {}).get('status') if isinstance(value.get('health'), dict) else None,
            'devices': [dict((k, d.get(k)) for k in GPU_DEVICE_KEYS) for d in devices if isinstance(d, dict)],
        }
    return value


def _plain(value, depth=0):
    """``value`` as JSON-able data with a stable form: mapping keys as text, sorted on dump; sets
    sorted; floats that are not finite as text (json would write NaN, which is not JSON)."""
    if depth > MAX_DEPTH:
        raise FingerprintError('a value is nested more than %d levels deep' % MAX_DEPTH)
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode('utf-8', 'replace')
    if isinstance(value, dict):
        return dict((str(k), _plain(v, depth + 1)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [_plain(v, depth + 1) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((_plain(v, depth + 1) for v in value), key=lambda v: json.dumps(v, sort_keys=True))
    return str(value)


def digest(value):
    """sha256 of the canonical JSON of ``value`` (sorted keys, no spaces, ASCII)."""
    text = json.dumps(_plain(value), sort_keys=True, separators=(',', ':'), ensure_ascii=True)
    return hashlib.sha256(text.encode('ascii')).hexdigest()


def fingerprint(parts):
    """The fingerprint record of ``parts`` ({'code': ..., 'variables': {...}, 'facts': {...},
    'inputs': {...}}): the whole digest, each part's digest, and one digest per name inside the
    named parts, so that a mismatch can say what changed. Digests only: no value is kept."""
    names = {}
    part_digests = {}
    for part in PARTS:
        value = parts.get(part)
        part_digests[part] = digest(value)
        if part != 'code' and isinstance(value, dict):
            names[part] = dict((str(k), digest(v)[:16]) for k, v in value.items())
    return {'digest': digest(part_digests), 'parts': part_digests, 'names': names}


def _names(items):
    items = sorted(items)
    if len(items) > REASON_NAMES:
        return '%s and %d more' % (', '.join(items[:REASON_NAMES]), len(items) - REASON_NAMES)
    return ', '.join(items)


def fingerprint_reasons(recorded, current):
    """Why the recorded fingerprint is not the current one: one reason per changed part, naming the
    variables, facts or inputs that changed, appeared or went away."""
    if not isinstance(recorded, dict) or not isinstance(recorded.get('parts'), dict):
        return ['the record holds no fingerprint']
    if recorded.get('digest') == current['digest']:
        return []
    reasons = []
    for part in PARTS:
        if recorded['parts'].get(part) == current['parts'][part]:
            continue
        if part == 'code':
            reasons.append("the role's code or the collection's plugins changed")
            continue
        old = (recorded.get('names') or {}).get(part) or {}
        new = current['names'].get(part) or {}
        changed = [k for k in new if k in old and old[k] != new[k]]
        added = [k for k in new if k not in old]
        removed = [k for k in old if k not in new]
        bits = []
        if changed:
            bits.append('changed: ' + _names(changed))
        if added:
            bits.append('new: ' + _names(added))
        if removed:
            bits.append('gone: ' + _names(removed))
        reasons.append('%s %s' % (part, '; '.join(bits) if bits else 'changed'))
    return reasons or ['the fingerprint changed']


def normalize_manages(manages):
    """The managed-state declaration as lists of sorted, unique entries; ValueError names a bad key.

    ``files``, ``packages``, ``services``, ``globs``: lists of strings (paths must be absolute);
    ``probes``: a list of {name, argv} with argv a non-empty list of strings."""
    if manages is None:
        manages = {}
    if not isinstance(manages, dict):
        raise ValueError('manages must be a mapping of %s' % ', '.join(MANAGED_KINDS))
    unknown = sorted(set(manages) - set(MANAGED_KINDS))
    if unknown:
        raise ValueError('manages has unknown keys %s; accepted: %s' % (', '.join(unknown), ', '.join(MANAGED_KINDS)))
    out = {}
    for kind in ('files', 'packages', 'services', 'globs'):
        values = manages.get(kind) or []
        if isinstance(values, str) or not isinstance(values, list):
            raise ValueError('manages.%s must be a list of strings' % kind)
        for value in values:
            if not isinstance(value, str) or not value or '\0' in value:
                raise ValueError('manages.%s holds %r; accepted: non-empty strings' % (kind, str(value)[:80]))
            if kind in ('files', 'globs') and not value.startswith('/'):
                raise ValueError('manages.%s holds %r; accepted: absolute paths' % (kind, value[:80]))
        out[kind] = sorted(set(values))
    probes = manages.get('probes') or []
    if not isinstance(probes, list):
        raise ValueError('manages.probes must be a list of {name, argv}')
    seen = {}
    for probe in probes:
        if (not isinstance(probe, dict) or not isinstance(probe.get('name'), str) or not probe['name']
                or not isinstance(probe.get('argv'), list) or not probe['argv']
                or not all(isinstance(a, str) for a in probe['argv'])):
            raise ValueError('manages.probes holds %r; accepted: {name: text, argv: [text, ...]}' % (str(probe)[:80],))
        seen[probe['name']] = list(probe['argv'])
    out['probes'] = [{'name': name, 'argv': seen[name]} for name in sorted(seen)]
    return out


def _describe(kind, name, old, new):
    if kind == 'files' and (old.get('type') == 'pattern' or new.get('type') == 'pattern'):
        old_m, new_m = old.get('matches') or {}, new.get('matches') or {}
        if sorted(old_m) != sorted(new_m):
            return 'the files matching %s are now %s (were %s)' % (name, _names(new_m) or 'none', _names(old_m) or 'none')
        return '; '.join(_describe('files', m, old_m[m] or {}, new_m[m] or {})
                         for m in sorted(new_m) if old_m[m] != new_m[m])
    if kind == 'files':
        if new is None or new.get('type') == 'missing':
            return 'file %s is gone' % name
        if old.get('type') != new.get('type'):
            return 'file %s is now a %s (was a %s)' % (name, new.get('type'), old.get('type'))
        what = [k for k in ('content', 'mode', 'uid', 'gid', 'target') if old.get(k) != new.get(k)]
        return 'file %s changed (%s)' % (name, ', '.join(what) or 'attributes')
    if kind == 'packages':
        def show(p):
            if not p or not p.get('version'):
                return 'not installed'
            return '%s%s' % (p['version'], ' held' if p.get('held') else '')
        return 'package %s is %s (was %s)' % (name, show(new), show(old))
    if kind == 'services':
        def show(s):
            s = s or {}
            return '%s/%s' % (s.get('enabled', '?'), s.get('active', '?'))
        return 'service %s is %s (was %s; enabled/active)' % (name, show(new), show(old))
    if kind == 'globs':
        return 'the paths matching %s changed' % name
    return 'probe %s answers differently' % name


def compare_state(recorded, observed):
    """Reasons the observed managed state differs from the recorded one (both {kind: {name: value}})."""
    reasons = []
    recorded = recorded if isinstance(recorded, dict) else {}
    for kind in MANAGED_KINDS:
        old_kind = recorded.get(kind) if isinstance(recorded.get(kind), dict) else {}
        new_kind = observed.get(kind) or {}
        if sorted(old_kind) != sorted(new_kind):
            added = sorted(set(new_kind) - set(old_kind))
            gone = sorted(set(old_kind) - set(new_kind))
            bits = []
            if added:
                bits.append('now also ' + _names(added))
            if gone:
                bits.append('no longer ' + _names(gone))
            reasons.append('the managed %s differ from the record (%s)' % (kind, '; '.join(bits)))
            continue
        for name in sorted(new_kind):
            if old_kind[name] != new_kind[name]:
                reasons.append(_describe(kind, name, old_kind[name] or {}, new_kind[name]))
    return reasons


def record_document(role, fingerprint_record, observed, outputs=None):
    """The JSON document a node keeps for ``role`` after a finished full run: the fingerprint (digests
    only), the managed state as observed then, and the outputs the role reported to the play."""
    return {'format': RECORD_FORMAT, 'role': role, 'fingerprint': fingerprint_record, 'state': observed,
            'outputs': _plain(outputs or {})}


def decide(role, record, fingerprint_record, observed):
    """(converged, reasons) for ``role`` from the node's record (the parsed JSON, or None when there is
    none, or an Exception/str when it could not be read or parsed) and what was observed now."""
    if record is None:
        return False, ['no record of a finished full run of %s on this node (first run, the fast path was '
                       'off, or the last run did not finish)' % role]
    if isinstance(record, (Exception, str)):
        return False, ['the record of %s cannot be used: %s' % (role, str(record)[:200])]
    if not isinstance(record, dict) or record.get('format') != RECORD_FORMAT:
        found = record.get('format') if isinstance(record, dict) else type(record).__name__
        return False, ['the record of %s has format %r, this collection writes %d (written by another '
                       'version of the collection)' % (role, found, RECORD_FORMAT)]
    if record.get('role') != role:
        return False, ['the record is of role %r, not %s' % (str(record.get('role'))[:40], role)]
    reasons = fingerprint_reasons(record.get('fingerprint'), fingerprint_record)
    reasons.extend(compare_state(record.get('state'), observed))
    return not reasons, reasons
