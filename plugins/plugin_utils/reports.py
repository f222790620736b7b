# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one report writer of the collection's controller-side checks (drift audit, validate).

A report is a neutral model: a title and a verdict word, the JSON document (the machine-readable
content, whatever its shape), JUnit suites of cases (``passed``, ``failed``, ``error`` or
``skipped``, each with a message and an optional body) and Markdown blocks (paragraphs, headings,
bullet lists, tables). :class:`Report` renders it as JSON, JUnit XML and Markdown and writes the
chosen renderings with the collection's atomic writer. Characters a format cannot hold are shown as
visible escapes (``\\x1b``) rather than producing a file its readers refuse.

Every text a host supplies (names, versions, messages) is inert in every format: in Markdown, raw HTML
(``<``, ``>``, ``&``) becomes entities and Markdown's own markup characters are backslash-escaped
(:func:`md_line`, :func:`md_cell`); bidi controls and other invisible formatting characters (U+202A to
U+202E, U+2066 to U+2069, zero-width characters) are shown as visible escapes (``\\u202e``) in
Markdown, JUnit and task output, never passed on to reorder what a reader sees (escaped rather than
removed: a host named ``node1`` plus U+202E stays distinguishable from ``node1``). JSON never holds
NaN or Infinity: such a number is written as null, and the report names where (``non_finite_values``
in JSON, a paragraph in Markdown, an error case in JUnit).

Controller only; standard library plus the atomic writer, no Ansible imports.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
import math
import os
import re
from xml.sax.saxutils import escape, quoteattr

from ansible_collections.gpucluster.core.plugins.module_utils.atomic_file import write_atomic
from ansible_collections.gpucluster.core.plugins.module_utils.text_bounds import INVISIBLE_CLASS, quote

CASE_STATUSES = ('passed', 'failed', 'error', 'skipped')
FORMATS = ('json', 'junit', 'markdown')

# Characters XML 1.0 does not allow at all (C0 controls but tab, newline and carriage return,
# lone surrogates, U+FFFE and U+FFFF): a JUnit file holding one is unreadable to every consumer.
# Bidi controls and invisible formatting characters are shown escaped too (they are legal XML).
_XML_ILLEGAL = re.compile(u'[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]|[\x7f-\x9f%s]' % INVISIBLE_CLASS)
# In one line of text (a Markdown cell or list item) every control character is shown escaped.
_UNPRINTABLE_LINE = re.compile(u'[\x00-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff%s]' % INVISIBLE_CLASS)
_UNPRINTABLE_TEXT = re.compile(u'[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff%s]'
                               % INVISIBLE_CLASS)
# Markdown: raw HTML becomes entities; the characters of inline markup are backslash-escaped (an
# underscore inside a word, as in nvidia_driver, is no markup in CommonMark and stays as it is).
_HTML = {'&': '&amp;', '<': '&lt;', '>': '&gt;'}
_MD_MARKUP = re.compile(r'[\\`*\[\]|~]|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])')
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


def _xml(value):
    return escape_unsafe(_text(value), _XML_ILLEGAL)


class Markup(str):
    """Markdown written by a report's own code (``0.20 **low**``), put in a table cell or a line as it is;
    any host-supplied part of it must already have gone through :func:`md_text`."""


def md_text(value):
    """Text shown as it is in Markdown: raw HTML as entities, inline markup (backslash, backtick, ``*``,
    ``_`` at a word's edge, brackets, pipe, ``~``) backslash-escaped, control and bidi characters as
    visible escapes. A :class:`Markup` value is the report's own markup and is kept (its control and
    bidi characters are still escaped)."""
    if isinstance(value, Markup):
        return escape_unsafe(' '.join(value.split()))
    text = _MD_MARKUP.sub(lambda m: '\\' + m.group(0), _text(value))
    text = re.sub('[&<>]', lambda m: _HTML[m.group(0)], text)
    return escape_unsafe(text)


def md_cell(value):
    """A Markdown table cell: one line, shown as it is (:func:`md_text`; pipes are escaped too)."""
    if isinstance(value, Markup):
        return md_text(value)
    return md_text(_text(value).replace('\r', ' ').replace('\n', ' '))


def md_line(value):
    """One line of Markdown prose (a list item, a heading), shown as it is (:func:`md_text`): whitespace
    runs (newlines too) made one space."""
    if isinstance(value, Markup):
        return md_text(value)
    return md_text(' '.join(_text(value).split()))


def _trail_text(trail):
    text = ''
    for key in trail:
        text += '[%d]' % key if isinstance(key, int) and not isinstance(key, bool) else ('.%s' % (key,) if text else '%s' % (key,))
    return text or '(the document)'


def _clean(value, trail, found):
    """``value`` ready for strict JSON: lone surrogates shown as escapes, every float that is NaN or
    infinite made None (its path, built only then, added to ``found``). One walk, no path text for
    the values that are fine (a 10,000-host document stays fast)."""
    if isinstance(value, str):
        return escape_unsafe(value, _SURROGATE)
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        found.append(_trail_text(trail))
        return None
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            trail.append(key)
            clean_key = str(key) if isinstance(key, float) and not math.isfinite(key) else _clean(key, [], [])
            out[clean_key] = _clean(item, trail, found)
            trail.pop()
        return out
    if isinstance(value, (list, tuple)):
        out = []
        for index, item in enumerate(value):
            trail.append(index)
            out.append(_clean(item, trail, found))
            trail.pop()
        return out
    return value


def case(name, status, message='', body=None, kind=None):
    """A JUnit test case. ``kind`` is the failure/error ``type``; ``body`` its text (a passed case's
    body is its ``system-out``)."""
    if status not in CASE_STATUSES:
        raise ValueError('case %s: status must be one of %s, got %s' % (quote(name), ', '.join(CASE_STATUSES), quote(status)))
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
        self._clean = None

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

    def non_finite(self):
        """(the document ready for strict JSON, the JSON paths of the NaN and infinite numbers made null).
        Computed once: the document is not changed after the report is built."""
        if self._clean is None:
            found = []
            self._clean = (_clean(self.document, [], found), found)
        return self._clean

    def render_json(self):
        document, found = self.non_finite()
        if found and isinstance(document, dict):
            document = dict(document, non_finite_values=found)
        # allow_nan=False: a NaN or Infinity left anywhere fails here instead of writing invalid JSON.
        return json.dumps(document, indent=self.json_indent, sort_keys=True, allow_nan=False) + '\n'

    def render_junit(self):
        """JUnit XML as Jenkins, GitLab, GitHub test reporters and Azure read it: one
        ``<testsuite>`` per suite, a ``<failure>``, ``<error>`` or ``<skipped>`` per case that did
        not pass."""
        def counts(cases):
            return (len(cases), sum(c['status'] == 'failed' for c in cases),
                    sum(c['status'] == 'error' for c in cases), sum(c['status'] == 'skipped' for c in cases))

        suites = list(self.suites)
        dummy, found = self.non_finite()
        if found:
            suites.append(('report', 'report', [case(
                'finite values', 'error', '%d values are not finite numbers (NaN or infinite), written as null in '
                'the JSON report' % len(found), '\n'.join(found), 'report:non_finite')]))
        every = [c for dummy, dummy2, cases in suites for c in cases]
        parts = ['<?xml version="1.0" encoding="UTF-8"?>\n',
                 '<testsuites name=%s tests="%d" failures="%d" errors="%d" skipped="%d" time="0">\n'
                 % ((quoteattr(_xml(self.suite_name)),) + counts(every))]
        for name, classname, cases in suites:
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
        dummy, found = self.non_finite()
        if found:
            lines.extend(['', '**%d values are not finite numbers** (NaN or infinite; null in the JSON report): %s.'
                          % (len(found), ', '.join(md_text(path) for path in found[:20])
                             + (' and %d more' % (len(found) - 20) if len(found) > 20 else ''))])
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
            raise ValueError('report format must be one of %s, got %s' % (', '.join(FORMATS), quote(fmt)))
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
