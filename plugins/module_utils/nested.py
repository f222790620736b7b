# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Nested mappings as parsed configuration files are (TOML, YAML, JSON): read a path, merge an overlay.

Standard library only, no Ansible imports, Python 3.9: the containerd filters and the Kubernetes
module_utils share it.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import copy


def get_path(doc, path):
    """The value at ``path`` (a sequence of keys) in nested dicts; None where a key is missing or a step is not a dict."""
    for key in path:
        if not isinstance(doc, dict) or key not in doc:
            return None
        doc = doc[key]
    return doc


def deep_merge(base, over):
    """A copy of ``base`` with ``over`` laid on it: dicts merged key by key, anything else replaced (copied)."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out
