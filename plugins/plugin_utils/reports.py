# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one report writer of the collection's controller-side checks (drift audit, validate).

A report is a neutral model: a title and a verdict word, the JSON document (the machine-readable
content, whatever its shape), JUnit suites of cases (``passed``, ``failed``, ``error`` or
``skipped``, each with a message and an optional body) and Markdown blocks (paragraphs, headings,
bullet lists, tables). :class:`Report` renders it as JSON, JUnit XML and Markdown and writes the
chosen renderings with the collection's atomic writer. Characters a format cannot hold are shown as
visible escapes (``\\x1b``) rather than producing a file its readers refuse.

Controller only; standard library plus the atomic writer, no Ansible imports.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import os
import re
from xml.sax.saxutils import escape, quoteattr

from ansible_collections.gpucluster.core.plugins.module_utils.atomic_file import write_atomic

CASE_STATUSES = ('passed', 'failed', 'error', 'skipped')
FORMATS = ('json', 'junit', 'markdown')

# Characters XML 1.0 does not allow at all (C0 controls but tab, newline and carriage return,
# lone surrogates, U+FFFE and U+FFFF): a JUnit file holding one is unreadable to every consumer.
_XML_ILLEGAL = re.compile(u'[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]')
# In one line of text (a Markdown cell or list item) every control character is shown escaped.
_UNPRINTABLE_LINE = re.compile(u'[\x00-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]')
_UNPRINTABLE_TEXT = re.compile(u'[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff\ufffe\uffff]')
# JSON represents every character but lone surrogates, which strict parsers refuse.
_SURROGATE = re.compile(u'[\ud800-\udfff]')


class ReportError(Exception):
    """Reports that could not be written: ``failures`` maps path -> error text, ``written`` the
    reports (format -> path) that were."""

    def __init__(self, failures, written):
        self.failures = failures
        self.written = written
        super(ReportError, self).__init__('; '.join(
            'cannot write %s: %s' % (path, error) for path, error in failures.items()))


def _escape_char(match):
    code = ord(match.group(0))
    return '\\x%02x' % code if code < 0x100 else '\\u%04x' % code


def escape_unsafe(text, pattern=_UNPRINTABLE_LINE):
    """``text`` with the characters ``pattern`` matches shown as visible escapes."""
    return pattern.sub(_escape_char, text)


def _text(value):
    return u'' if value is None else u'%s' % (value,)


def _safe_data(value):
    if isinstance(value, str):
        return escape_unsafe(value, _SURROGATE)
    if isinstance(value, dict):
        return dict((_safe_data(k), _safe_data(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [_safe_data(v) for v in value]
    return value


def _xml(value):
    return escape_unsafe(_text(value), _XML_ILLEGAL)


def md_cell(value):
    """A Markdown table cell: one line, pipes and backslashes escaped."""
    text = _text(value).replace('\r', ' ').replace('\n', ' ')
    return escape_unsafe(text.replace('\\', '\\\\').replace('|', '\\|'))


def md_line(value):
    """One line of Markdown prose (a list item): whitespace runs (newlines too) made one space."""
    return escape_unsafe(' '.join(_text(value).split()))


def case(name, status, message='', body=None, kind=None):
    """A JUnit test case. ``kind`` is the failure/error ``type``; ``body`` its text (a passed case's
    body is its ``system-out``)."""
    if status not in CASE_STATUSES:
        raise ValueError('case %r: status must be one of %s, got %r' % (name, ', '.join(CASE_STATUSES), status))
    return {'name': name, 'status': status, 'message': message or '', 'body': body, 'kind': kind}


class Report(object):
    """A report: see the module's description. Build it, then :meth:`render` or :meth:`write`."""

    def __init__(self, title, verdict, document, suite_name, json_indent=1):
        self.title = title
        self.verdict = verdict
        self.document = document
        self.suite_name = suite_name
        self.json_indent = json_indent
        self.suites = []
        self.blocks = []

    # ------------------------------------------------------------------ building

    def suite(self, name, classname=None):
        """A new JUnit suite; returns its list of cases to append :func:`case` results to."""
        cases = []
        self.suites.append((name, classname or name, cases))
        return cases

    def heading(self, text):
        self.blocks.append(('heading', text))

    def paragraph(self, text):
        self.blocks.append(('paragraph', text))

    def bullets(self, items):
        self.blocks.append(('bullets', list(items)))

    def table(self, headers, rows):
        self.blocks.append(('table', list(headers), [list(row) for row in rows]))

    # ------------------------------------------------------------------ rendering

    def render_json(self):
        return json.dumps(_safe_data(self.document), indent=self.json_indent, sort_keys=True) + '\n'

    def render_junit(self):
        """JUnit XML as Jenkins, GitLab, GitHub test reporters and Azure read it: one
        ``<testsuite>`` per suite, a ``<failure>``, ``<error>`` or ``<skipped>`` per case that did
        not pass."""
        def counts(cases):
            return (len(cases), sum(c['status'] == 'failed' for c in cases),
                    sum(c['status'] == 'error' for c in cases), sum(c['status'] == 'skipped' for c in cases))

        every = [c for dummy, dummy2, cases in self.suites for c in cases]
        parts = ['<?xml version="1.0" encoding="UTF-8"?>\n',
                 '<testsuites name=%s tests="%d" failures="%d" errors="%d" skipped="%d" time="0">\n'
                 % ((quoteattr(_xml(self.suite_name)),) + counts(every))]
        for name, classname, cases in self.suites:
            parts.append('  <testsuite name=%s tests="%d" failures="%d" errors="%d" skipped="%d" time="0">\n'
                         % ((quoteattr(_xml(name)),) + counts(cases)))
            for item in cases:
                head = '    <testcase classname=%s name=%s time="0"' % (
                    quoteattr(_xml(classname)), quoteattr(_xml(item['name'])))
                status = item['status']
                if status == 'passed':
                    parts.append(head + ('>\n      <system-out>%s</system-out>\n    </testcase>\n'
                                         % escape(_xml(item['body'])) if item['body'] else '/>\n'))
                elif status == 'skipped':
                    parts.append(head + '>\n      <skipped message=%s/>\n    </testcase>\n'
                                 % quoteattr(_xml(item['message'])))
                else:
                    tag = 'failure' if status == 'failed' else 'error'
                    kind = ' type=%s' % quoteattr(_xml(item['kind'])) if item['kind'] else ''
                    parts.append(head + '>\n      <%s message=%s%s>%s</%s>\n    </testcase>\n' % (
                        tag, quoteattr(_xml(item['message'])), kind,
                        escape(_xml(item['message'] if item['body'] is None else item['body'])), tag))
            parts.append('  </testsuite>\n')
        parts.append('</testsuites>\n')
        return ''.join(parts)

    def render_markdown(self):
        lines = ['# %s: %s' % (md_line(self.title), md_line(self.verdict))]
        for block in self.blocks:
            lines.append('')
            if block[0] == 'heading':
                lines.append('## %s' % md_line(block[1]))
            elif block[0] == 'paragraph':
                lines.append(_text(block[1]))
            elif block[0] == 'bullets':
                lines.extend('- %s' % md_line(item) for item in block[1])
            else:
                headers, rows = block[1], block[2]
                lines.append('| %s |' % ' | '.join(md_cell(h) for h in headers))
                lines.append('|%s' % ('---|' * len(headers)))
                lines.extend('| %s |' % ' | '.join(md_cell(c) for c in row) for row in rows)
        return escape_unsafe('\n'.join(lines), _UNPRINTABLE_TEXT) + '\n'

    def render(self, fmt):
        if fmt not in FORMATS:
            raise ValueError('report format must be one of %s, got %r' % (', '.join(FORMATS), fmt))
        return getattr(self, 'render_' + fmt)()

    # ------------------------------------------------------------------ writing

    def write(self, report_dir, filenames, formats=FORMATS, prefix=None):
        """Write the chosen ``formats`` into ``report_dir`` (created if needed) under
        ``filenames`` (format -> file name); returns format -> path.

        Each file is written on its own with the atomic writer (a reader sees the old report or the
        new one, never half of one); when some cannot be written, :class:`ReportError` names every
        path that failed and why, after the others were written.
        """
        unknown = [f for f in formats if f not in FORMATS]
        if unknown:
            raise ValueError('report formats must be among %s, got %s' % (', '.join(FORMATS), ', '.join(unknown)))
        written = {}
        try:
            if not os.path.isdir(report_dir):
                os.makedirs(report_dir)
        except OSError as exc:
            raise ReportError({report_dir: exc.strerror or str(exc)}, written)
        failures = {}
        for fmt in FORMATS:
            if fmt not in formats:
                continue
            path = os.path.join(report_dir, filenames[fmt])
            try:
                write_atomic(path, self.render(fmt), prefix=prefix)
            except (OSError, UnicodeError) as exc:
                failures[path] = getattr(exc, 'strerror', None) or str(exc)
            else:
                written[fmt] = path
        if failures:
            raise ReportError(failures, written)
        return written
