#!/usr/bin/env python
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark: parse time of an 8-GPU nvidia-smi XML (goal < 50 ms) and the gpu_facts module's wall time.

No real 8-GPU -q -x recording exists in the corpus. For this benchmark only, an 8-GPU document is
built IN MEMORY from a real one (its <gpu> element repeated with distinct PCI addresses); it is a
benchmark input, never written to disk or used as a fixture.

  python bench/gpu_facts_bench.py [--fixtures DIR] [--runs N]
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
sys.path.insert(0, os.path.join(REPO, 'collections'))

from ansible_collections.gpucluster.core.plugins.module_utils.gpu_health import build_facts  # noqa: E402
from ansible_collections.gpucluster.core.plugins.module_utils.gpu_smi_xml import parse_nvidia_smi_xml  # noqa: E402

SOURCE = '01_nvidia_smi_xml/telegraf__pro-6000-maxq-blackwell-v13.xml'  # largest single-GPU recording (122 KB)
FALLBACK = os.path.join(REPO, 'lab', 'gpu-standin', 'sample-2gpu-written-here.xml')


def eight_gpu_document(text):
    """Benchmark input: the recording's first <gpu> element repeated 8 times on distinct bus numbers (a recording of
    several GPUs, such as the lab's two-GPU fallback, keeps only its first)."""
    start = text.index('<gpu id=')
    gpu = text[start:text.index('</gpu>', start) + len('</gpu>')]
    end = text.rindex('</gpu>') + len('</gpu>')
    bus_id = gpu.split('"')[1]
    copies = []
    for n in range(8):
        new_bus = '%08X:%02X:00.0' % (0, 0x18 + n * 0x10)
        copies.append(gpu.replace(bus_id, new_bus))
    head = re.sub(r'<attached_gpus>\d+</attached_gpus>', '<attached_gpus>8</attached_gpus>', text[:start])
    return head + '\n'.join(copies) + text[end:]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
    parser.add_argument('--fixtures', default=os.environ.get('GPUCLUSTER_FIXTURES')
                        or os.path.join(REPO, '..', 'shared', 'fixtures'))
    parser.add_argument('--runs', type=int, default=50)
    args = parser.parse_args()

    source = os.path.join(args.fixtures, SOURCE)
    if not os.path.exists(source):
        source = FALLBACK
    with open(source) as handle:
        doc = eight_gpu_document(handle.read())
    parsed = parse_nvidia_smi_xml(doc)
    assert parsed['count'] == 8, parsed['count']

    parse_ms, rules_ms = [], []
    for dummy in range(args.runs):
        t0 = time.perf_counter()
        parsed = parse_nvidia_smi_xml(doc)
        t1 = time.perf_counter()
        build_facts({'smi': {'found': True, 'path': 'x'}, 'parsed': parsed, 'pci_addresses': None,
                     'kernel': {'source': 'file', 'events': [], 'error': None}}, expected_count=8)
        t2 = time.perf_counter()
        parse_ms.append((t1 - t0) * 1000)
        rules_ms.append((t2 - t1) * 1000)
    print('input: 8-GPU benchmark document built in memory from %s (%d KB)'
          % (os.path.basename(source), len(doc) // 1024))
    print('parse 8-GPU XML: median %.2f ms, max %.2f ms over %d runs (goal < 50 ms)'
          % (statistics.median(parse_ms), max(parse_ms), args.runs))
    print('health rules 8 GPUs: median %.3f ms' % statistics.median(rules_ms))

    # Module wall time: ansible localhost -m gpucluster.core.gpu_facts with nvidia-smi printing the document.
    ansible = os.path.join(os.path.dirname(sys.executable), 'ansible')
    if not os.path.exists(ansible):
        print('module wall time: skipped (no ansible next to %s)' % sys.executable)
        return 0
    tmp = tempfile.mkdtemp(prefix='gpu_facts_bench.')
    try:
        xml_path = os.path.join(tmp, 'eight.xml')
        smi = os.path.join(tmp, 'nvidia-smi')
        with open(xml_path, 'w') as handle:
            handle.write(doc)
        with open(smi, 'w') as handle:
            handle.write('#!/bin/sh\ncat "%s"\n' % xml_path)
        os.chmod(smi, 0o755)
        log = os.path.join(tmp, 'kern.log')
        open(log, 'w').close()
        env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, 'collections'),
                   ANSIBLE_STDOUT_CALLBACK='json', ANSIBLE_LOAD_CALLBACK_PLUGINS='1', ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'))
        walls = []
        for dummy in range(3):
            t0 = time.perf_counter()
            proc = subprocess.run([ansible, 'localhost', '-m', 'gpucluster.core.gpu_facts', '-a',
                                   'nvidia_smi_path=%s kernel_log_path=%s expected_count=8' % (smi, log)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, check=False,
                                  universal_newlines=True)
            walls.append(time.perf_counter() - t0)
            if proc.returncode != 0:
                print('module run failed: %s %s' % (proc.stdout[-500:], proc.stderr[-500:]))
                return 1
        print('module wall time (ansible localhost -m gpucluster.core.gpu_facts, 8 GPUs, incl. ansible start-up): '
              'median %.2f s, min %.2f s over %d runs' % (statistics.median(walls), min(walls), len(walls)))
    finally:
        for name in os.listdir(tmp):
            os.unlink(os.path.join(tmp, name))
        os.rmdir(tmp)
    return 0


if __name__ == '__main__':
    sys.exit(main())
