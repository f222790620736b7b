# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one loader of a JSON object read as text: a file the user owns (Docker's daemon.json) or a command's
JSON output (``docker info --format '{{json .}}'``).

Standard library only, no Ansible imports, Python 3.9: the container_runtime filters and module_utils/swarm.py
share it, so that daemon.json is read the same way by both roles that merge keys into it.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json

# What a caller that only merges keys into a file adds to a refusal: the file stays as it is.
LEFT_UNTOUCHED = 'it was left untouched: fix it by hand'


def load_object(text, what, advice=LEFT_UNTOUCHED):
    """The JSON object in ``text``: {} for empty or blank text (a missing file), else ValueError.

    ``what`` names the source in every message (the file's path, or the command); ``advice`` ends the messages
    about its content (what happened to the source and what to do; '' for none). None counts as empty, bytes
    are read as UTF-8; any other type is refused: it is not text, and reading it as empty would hide that.
    """
    if text is None:
        text = ''
    elif isinstance(text, bytes):
        try:
            text = text.decode('utf-8')
        except UnicodeDecodeError as exc:
            raise ValueError(_message('%s is not UTF-8 text (%s)' % (what, exc), advice))
    elif not isinstance(text, str):
        raise ValueError('%s: expected its text, got %s' % (what, type(text).__name__))
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(_message('%s is not valid JSON (%s)' % (what, exc), advice))
    if not isinstance(data, dict):
        raise ValueError(_message('%s must hold a JSON object, found %s' % (what, _json_type(data)), advice))
    return data


def _message(text, advice):
    return '%s; %s' % (text, advice) if advice else text


def _json_type(value):
    """The JSON name of a parsed value's type (array, string, number, true/false, null)."""
    if isinstance(value, list):
        return 'an array'
    if isinstance(value, str):
        return 'a string'
    if isinstance(value, bool):
        return 'a boolean'
    if isinstance(value, (int, float)):
        return 'a number'
    return 'null' if value is None else type(value).__name__
