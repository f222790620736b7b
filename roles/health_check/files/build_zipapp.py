# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Run on the controller (never installed on a node) by roles/health_check/tasks/install.yml: packs a node
# program into ONE executable archive (a zipapp: `python3 ARCHIVE` runs it, and the package inside imports
# from it), byte for byte the same for the same sources on any controller, so its checksum is stable and a
# rerun copies nothing. Standard library only.
"""Build a reproducible zipapp from a package's modules.

Usage: build_zipapp.py --package NAME --entry MODULE:FUNCTION --module NAME=PATH [--module ...]
                       [--output-dir DIR] [--output-name FILE]

Prints one JSON object: path, dir (the directory it made when --output-dir is absent; the caller removes
it), checksum (SHA-1, what ansible.builtin.copy compares), sha256, size and the archive's entries.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import argparse
import ast
import hashlib
import json
import os
import re
import sys
import tempfile
import zipfile

# Fixed entry metadata: the archive depends only on the names and bytes of its sources, not on file
# times, umask, the order the shell lists them or the controller's zlib (entries are stored uncompressed:
# zlib and zlib-ng compress the same input to different bytes).
EPOCH = (1980, 1, 1, 0, 0, 0)
FILE_MODE = 0o100644
IDENTIFIER = re.compile(r'^[A-Za-z_][A-Za-z0-9_]*$')


class BuildError(Exception):
    pass


def parse_modules(specs):
    modules = {}
    for spec in specs:
        name, sep, path = spec.partition('=')
        if not sep or not IDENTIFIER.match(name) or not path:
            raise BuildError('--module %r: expected NAME=PATH with NAME a Python identifier' % spec)
        if name == '__init__' or name in modules:
            raise BuildError('--module %s: given twice or reserved' % name)
        if not os.path.isfile(path):
            raise BuildError('--module %s: %s is not a file' % (name, path))
        modules[name] = path
    if not modules:
        raise BuildError('no --module given')
    return modules


def relative_imports(source, filename):
    """Names of the package's own modules that SOURCE imports (`from . import x`, `from .x import y`)."""
    try:
        tree = ast.parse(source, filename)
    except SyntaxError as exc:
        raise BuildError('%s does not compile: %s' % (filename, exc))
    names = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or node.level == 0:
            continue
        if node.level > 1:
            raise BuildError('%s: import from outside the package (%s%s)' % (filename, '.' * node.level, node.module or ''))
        if node.module:
            names.add(node.module.split('.')[0])
        else:
            names.update(alias.name for alias in node.names)
    return names


def archive_entries(package, entry, modules):
    """[(name in the archive, bytes)], sorted by name, after checking every relative import is packed."""
    if not IDENTIFIER.match(package):
        raise BuildError('--package %r is not a Python identifier' % package)
    entry_module, sep, entry_function = entry.partition(':')
    if not sep or entry_module not in modules or not IDENTIFIER.match(entry_function):
        raise BuildError('--entry %r: expected MODULE:FUNCTION with MODULE one of the --module names' % entry)
    entries = {}
    for name, path in modules.items():
        with open(path, 'rb') as handle:
            data = handle.read()
        missing = sorted(relative_imports(data, path) - set(modules))
        if missing:
            raise BuildError('%s imports %s from its package, which is not packed (add --module for it)'
                             % (path, ', '.join(missing)))
        entries['%s/%s.py' % (package, name)] = data
    entries['%s/__init__.py' % package] = (
        b'# The package of the node program; its modules are the sources named in __main__.py.\n')
    entries['__main__.py'] = (
        '# Built by gpucluster.core (build_zipapp.py): python3 THIS_ARCHIVE runs %s.%s.\n'
        '# Modules: %s.\n'
        'import sys\n\n'
        'from %s.%s import %s\n\n'
        'sys.exit(%s())\n'
        % (package, entry, ', '.join(sorted(modules)), package, entry_module, entry_function, entry_function)
    ).encode('utf-8')
    return sorted(entries.items())


def write_archive(path, entries):
    with zipfile.ZipFile(path, 'w', zipfile.ZIP_STORED) as archive:
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time=EPOCH)
            info.compress_type = zipfile.ZIP_STORED
            info.create_system = 3
            info.external_attr = FILE_MODE << 16
            archive.writestr(info, data)


def digest(path, algorithm):
    hasher = hashlib.new(algorithm)
    with open(path, 'rb') as handle:
        for block in iter(lambda: handle.read(65536), b''):
            hasher.update(block)
    return hasher.hexdigest()


def build(package, entry, modules, output_dir=None, output_name=None):
    entries = archive_entries(package, entry, modules)
    made = None
    if output_dir is None:
        output_dir = made = tempfile.mkdtemp(prefix='gpucluster-zipapp.')
    path = os.path.join(output_dir, output_name or package + '.pyz')
    try:
        write_archive(path, entries)
    except Exception:
        if made:
            if os.path.exists(path):
                os.remove(path)
            os.rmdir(made)
        raise
    return {'path': path, 'dir': made, 'checksum': digest(path, 'sha1'), 'sha256': digest(path, 'sha256'),
            'size': os.path.getsize(path), 'entries': [name for name, _data in entries]}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--package', required=True)
    parser.add_argument('--entry', required=True, help='MODULE:FUNCTION that __main__.py calls')
    parser.add_argument('--module', action='append', default=[], help='NAME=PATH, once per module')
    parser.add_argument('--output-dir', help='default: a new temporary directory (reported as "dir")')
    parser.add_argument('--output-name', help='default: PACKAGE.pyz')
    args = parser.parse_args(argv)
    try:
        result = build(args.package, args.entry, parse_modules(args.module), args.output_dir, args.output_name)
    except (BuildError, IOError, OSError) as exc:
        sys.stderr.write('build_zipapp: %s\n' % exc)
        return 1
    sys.stdout.write(json.dumps(result, sort_keys=True) + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
