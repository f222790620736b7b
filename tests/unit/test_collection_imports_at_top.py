# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every test module imports the collection's code at its top, never inside a test or fixture.

pytest imports every test module before the first test runs; a test that imports a plugin later may find that
another module's test has installed Ansible's collection finder in the meantime, and the import then fails with
"collection metadata was not loaded" - or passes, depending on the order the tests ran in (one CI-style run with
pytest-xdist's loadscope failed so, docs/DEVELOPING.md)."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import ast
import glob
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def _late_imports(path):
    with open(path) as handle:
        tree = ast.parse(handle.read(), path)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for inner in ast.walk(node):
            names = []
            if isinstance(inner, ast.ImportFrom) and inner.module:
                names = [inner.module]
            elif isinstance(inner, ast.Import):
                names = [alias.name for alias in inner.names]
            found.extend('%s:%d %s' % (os.path.relpath(path, HERE), inner.lineno, name)
                         for name in names if name.startswith('ansible_collections.gpucluster'))
    return found


def test_no_test_imports_the_collection_inside_a_function():
    paths = glob.glob(os.path.join(HERE, '**', '*.py'), recursive=True)
    assert len(paths) > 100
    late = sorted(set(item for path in paths for item in _late_imports(path)))
    assert late == []


def test_the_check_finds_an_import_inside_a_test(tmp_path):
    sample = tmp_path / 'test_sample.py'
    sample.write_text('import os\n\n\ndef test_x():\n    from ansible_collections.gpucluster.core.plugins.filter import slurm\n')
    assert [line.split(' ', 1)[1] for line in _late_imports(str(sample))] == ['ansible_collections.gpucluster.core.plugins.filter']
