# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Bounded quoting for messages: what an error quotes is at most ``limit`` characters.

A message that quotes what it refuses must not cost more than the refusal: ``repr`` of a 20 MB GPU
id, of a YAML alias bomb (lists shared nine levels deep: billions of elements when walked) or of an
integer of 100,000 digits (Python refuses to print more than 4300) takes seconds, gigabytes or a
traceback. :func:`quote` writes the repr-like text lazily and stops at the limit; :func:`clip` cuts
text that is already a string. Both end what they cut with :data:`ELLIPSIS`.

Standard library only, no Ansible imports, Python 3.9: modules, node programs, filters and action
plugins share it.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

from collections.abc import Mapping, Set

LIMIT = 200
ELLIPSIS = '...'
# Characters that change how the text around them is shown without being seen: the Unicode bidi
# controls (U+202A-U+202E embeddings and overrides, U+2066-U+2069 isolates, U+200E/U+200F marks,
# U+061C), zero-width characters, the line and paragraph separators and the BOM. For a regular
# expression character class; reports and task output show them as visible escapes (\u202e), so a
# host named "node1\u202e" can never pass for "node1" nor reorder the text around it.
INVISIBLE_CLASS = u'\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff'
# Containers nested deeper than this are shown as '...' (a 5,000-deep list never recurses).
MAX_DEPTH = 12
# Integers with more bits than this are described, never converted to digits.
MAX_INT_BITS = 4096


def clip(text, limit=LIMIT):
    """``text`` (made a str) cut to ``limit`` characters, ending in '...' when it was longer."""
    if not isinstance(text, str):
        text = '%s' % (text,)
    if len(text) <= limit:
        return text
    return text[:max(limit, 0)] + ELLIPSIS


def _pieces(value, depth, limit):
    """The repr of ``value`` in pieces, produced lazily so the caller can stop at any point."""
    if isinstance(value, bool) or value is None:
        yield repr(value)
    elif isinstance(value, int):
        if value.bit_length() > MAX_INT_BITS:
            yield '<an integer of %d bits>' % value.bit_length()
        else:
            yield repr(int(value))
    elif isinstance(value, float):
        yield repr(float(value))
    elif isinstance(value, str):
        # The repr of a slice: a 20 MB string costs only its first characters (a slice one longer
        # than the limit is always cut, so a cut string never shows its closing quote).
        yield repr(str(value[:limit + 1]))
    elif isinstance(value, (bytes, bytearray)):
        yield repr(bytes(value[:limit + 1]))
    elif depth >= MAX_DEPTH:
        yield ELLIPSIS
    elif isinstance(value, Mapping):
        yield '{'
        first = True
        for key in value:
            if not first:
                yield ', '
            first = False
            yield from _pieces(key, depth + 1, limit)
            yield ': '
            try:
                item = value[key]
            except Exception:  # a mapping that cannot give its item back: say so, never raise
                item = ELLIPSIS
            yield from _pieces(item, depth + 1, limit)
        yield '}'
    elif isinstance(value, (list, tuple, Set)):
        if isinstance(value, list):
            opening, closing = '[', ']'
        elif isinstance(value, tuple):
            opening, closing = '(', ')'
        else:
            opening, closing = '{', '}'
        yield opening
        first = True
        for item in value:
            if not first:
                yield ', '
            first = False
            yield from _pieces(item, depth + 1, limit)
        yield closing
    else:
        try:
            text = repr(value)
        except Exception:  # an object whose repr fails is named by its type
            text = '<%s>' % type(value).__name__
        yield text


def quote(value, limit=LIMIT):
    """A repr-like rendering of ``value`` of at most ``limit`` characters (then '...').

    Lazy: nested containers are walked only until the limit is reached, strings are sliced before
    their repr, containers deeper than :data:`MAX_DEPTH` are '...' and huge integers are described by
    their size. Never raises on content.
    """
    parts = []
    size = 0
    for piece in _pieces(value, 0, limit):
        parts.append(piece)
        size += len(piece)
        if size > limit:
            break
    return clip(''.join(parts), limit)
