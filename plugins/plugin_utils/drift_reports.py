# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of the drift audit: writes the reports that module_utils/drift.py renders.

Runs in the action plugin (and the benchmark) on the controller only; nothing here reaches a node.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os

from ansible_collections.gpucluster.core.plugins.module_utils import drift
from ansible_collections.gpucluster.core.plugins.module_utils.atomic_file import write_atomic

REPORT_FILES = (('json', 'drift.json'), ('junit', 'drift.junit.xml'), ('markdown', 'drift.md'))


class ReportError(Exception):
    """Reports that could not be written: ``failures`` maps path -> error text, ``written``
    the reports that were."""

    def __init__(self, failures, written):
        self.failures = failures
        self.written = written
        super(ReportError, self).__init__('; '.join(
            'cannot write %s: %s' % (path, error) for path, error in failures.items()))


def write_reports(report_dir, hosts, summary, findings, stats, formats=('json', 'junit', 'markdown'),
                  baselines_used=None, generated_at=None, max_rows=500):
    """Write the chosen reports into ``report_dir`` (created if needed); returns their paths.

    Each report is written on its own with the collection's atomic writer (a reader never sees half
    a report); when one or more cannot be written, :class:`ReportError` names every path that
    failed and why, after the others were written.
    """
    written = {}
    try:
        if not os.path.isdir(report_dir):
            os.makedirs(report_dir)
    except OSError as exc:
        raise ReportError({report_dir: exc.strerror or str(exc)}, written)
    renderers = {
        'json': lambda: drift.render_json(summary, findings, stats, baselines_used, generated_at),
        'junit': lambda: drift.render_junit(hosts, findings, stats),
        'markdown': lambda: drift.render_markdown(summary, findings, stats, max_rows),
    }
    failures = {}
    for name, filename in REPORT_FILES:
        if name not in formats:
            continue
        path = os.path.join(report_dir, filename)
        try:
            write_atomic(path, renderers[name](), prefix='.drift-')
        except (OSError, UnicodeError) as exc:
            failures[path] = getattr(exc, 'strerror', None) or str(exc)
        else:
            written[name] = path
    if failures:
        raise ReportError(failures, written)
    return written
