# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Prometheus text exposition format as node_exporter's textfile collector reads it: label sets,
sample values and metric families with their HELP and TYPE lines.

Shared by every program of this collection that writes a .prom file (the node health program and its
GPU, fabric and RDMA families; the checkpoint backup), and packed into their archives with them.
Pure code, standard library only.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import functools
import hashlib

# Characters of a label value written; a longer value (a hostile or broken field) is cut and ends with a
# digest of the whole value, so two different values never become the same series.
LABEL_MAX = 256


def bound_label_value(value):
    """``str(value)``, at most LABEL_MAX characters (a cut value ends with '...' and 12 hex digits of its SHA-256)."""
    text = str(value)
    if len(text) <= LABEL_MAX:
        return text
    return _cut_label(text)


@functools.lru_cache(maxsize=64)
def _cut_label(text):
    # Cached: one long value (a GPU's UUID) is a label of every metric of that GPU.
    digest = hashlib.sha256(text.encode('utf-8', 'surrogatepass')).hexdigest()[:12]
    return '%s...%s' % (text[:LABEL_MAX - 15], digest)


def escape_label_value(value):
    """A label value (bounded, see bound_label_value) with backslash, newline and double quote escaped."""
    return bound_label_value(value).replace('\\', '\\\\').replace('\n', '\\n').replace('"', '\\"')


def format_labels(labels):
    """'{k="v",...}' of (name, value) pairs in their order; '' for none."""
    if not labels:
        return ''
    return '{%s}' % ','.join('%s="%s"' % (k, escape_label_value(v)) for k, v in labels)


def format_number(value):
    """A sample value: booleans as 1/0, integers exactly, anything else as a float."""
    if isinstance(value, bool):
        return '1' if value else '0'
    if isinstance(value, int):
        return str(value)
    return repr(float(value))


def render_samples(metrics, samples):
    """Exposition text of (name, labels, value) samples: HELP and TYPE once per metric that has
    samples, metrics in the order of `metrics` ((name, type, help) triples), samples of one metric
    in the order given."""
    lines = []
    for metric, kind, help_text in metrics:
        mine = [s for s in samples if s[0] == metric]
        if not mine:
            continue
        lines.append('# HELP %s %s' % (metric, help_text))
        lines.append('# TYPE %s %s' % (metric, kind))
        for _name, labels, value in mine:
            lines.append('%s%s %s' % (metric, format_labels(labels), format_number(value)))
    return '\n'.join(lines) + ('\n' if lines else '')
