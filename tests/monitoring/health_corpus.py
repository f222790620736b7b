# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run the node health program, packed as roles/health_check packs it, on every real recording.

The program is the zipapp that roles/health_check/tasks/install.yml builds (tests/node_programs.py:
files/build_zipapp.py with the modules of vars/main.yml); nvidia-smi is a script that prints one recording and exits as the
recorded tool did. Recordings (from the corpus, $GPUCLUSTER_FIXTURES or ../shared/fixtures):

  - every ``nvidia-smi -q -x`` XML file (exit 0; an empty kernel log);
  - every kernel log of 05_xid_kernel_log, beside a healthy two-GPU XML of this checkout, read with a
    window wide enough that the recorded (dated) lines count;
  - every recorded nvidia-smi failure message (03_nvidia_smi_text/*FAILED*; exit 9, "the driver
    could not be reached", as nvidia-smi exits for most of them);
  - every RDMA recording (ibstat, ibstatus, ibv_devinfo) as the /sys/class/infiniband tree it describes
    (the tree writer of tests/unit/plugins/module_utils/test_rdma_sysfs.py), beside the healthy XML, with
    ``rdma.expect_present``; and the same setting on a node without any adapter;
  - an NVSwitch node: a real two-GPU XML whose fabric fields read one GPU registered and one not, four
    NVSwitches on the PCI bus and Fabric Manager failed (no recording shows an NVSwitch node's fabric
    in XML; the states are those the ``nvidia-smi -q`` texts of HGX H100 nodes show).

Used by tests/monitoring/promtool.sh (``promtool check metrics`` on every textfile) and by
tests/unit/roles/slurm/test_healthcheck_corpus.py (the Slurm wrapper's decision on every verdict).

    python tests/monitoring/health_corpus.py --textfiles DIR    write DIR/<recording>.prom, list them
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import argparse
import glob
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
sys.path.insert(0, os.path.join(REPO, 'tests'))
import node_programs  # noqa: E402  (the node programs built as their roles build them)

HEALTHY_XML = os.path.join(REPO, 'tests', 'unit', 'fixtures', 'gpu', 'two_gpus_v13_out_of_order.xml')
TEXTFILE_NAME = 'gpucluster_health.prom'
# Minutes in 40 years: every dated line of the recorded kernel logs (2014 onwards) is in the window.
WIDE_WINDOW_MINUTES = 40 * 366 * 24 * 60
FAILED_SMI_EXIT = 9
RDMA_TREES = os.path.join(REPO, 'tests', 'unit', 'plugins', 'module_utils', 'test_rdma_sysfs.py')
NO_ADAPTER = 'rdma: no adapter, expect_present'
NVSWITCH_XML = os.path.join('01_nvidia_smi_xml', 'telegraf__dual_a5000-v13.xml')
NVSWITCH_NODE = 'nvswitch: fabric not ready on one GPU, Fabric Manager failed'
NVSWITCH_FABRIC = (('In Progress', 'N/A'), ('Completed', 'Success'))
_TREES = []


def rdma_trees():
    """The RDMA recording parsers and sysfs tree writer of the rdma_sysfs tests, loaded once by path."""
    if not _TREES:
        collections = os.path.join(REPO, 'collections')
        if collections not in sys.path:
            sys.path.insert(0, collections)
        spec = importlib.util.spec_from_file_location('rdma_tree_builders', RDMA_TREES)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _TREES.append(module)
    return _TREES[0]


def fixtures_dir():
    path = os.environ.get('GPUCLUSTER_FIXTURES') or os.path.join(REPO, '..', 'shared', 'fixtures')
    if not os.path.isdir(path):
        raise SystemExit('health_corpus: real fixture corpus not found at %s (set GPUCLUSTER_FIXTURES)' % path)
    return os.path.abspath(path)


def build_archive(out_dir):
    """Path of the health program's zipapp, built with the arguments install.yml passes."""
    return node_programs.build('health', out_dir)


def recordings(root):
    """[{name, smi, smi_rc, kernel_log, rdma, rdma_recording}] for every recording the program can be run on.

    rdma: the program's ``rdma`` setting (None: not set); rdma_recording: the RDMA recording whose sysfs tree
    the run gets (None: no /sys/class/infiniband)."""
    found = []

    def add(name, smi, smi_rc=0, kernel_log=None, rdma=None, rdma_recording=None, nvswitch=None):
        found.append({'name': name, 'smi': smi, 'smi_rc': smi_rc, 'kernel_log': kernel_log, 'rdma': rdma,
                      'rdma_recording': rdma_recording, 'nvswitch': nvswitch})

    for path in sorted(glob.glob(os.path.join(root, '**', '*.xml'), recursive=True)):
        add(os.path.relpath(path, root), path)
    for path in sorted(glob.glob(os.path.join(root, '05_xid_kernel_log', '**', '*'), recursive=True)):
        if os.path.isfile(path):
            add(os.path.relpath(path, root), HEALTHY_XML, kernel_log=path)
    for path in sorted(glob.glob(os.path.join(root, '03_nvidia_smi_text', '**', '*FAILED*'), recursive=True)):
        add(os.path.relpath(path, root), path, smi_rc=FAILED_SMI_EXIT)
    for _name, _kind, path in rdma_trees().real_recordings(root):
        add(os.path.relpath(path, root), HEALTHY_XML, rdma={'expect_present': True}, rdma_recording=path)
    add(NO_ADAPTER, HEALTHY_XML, rdma={'expect_present': True})
    add(NVSWITCH_NODE, os.path.join(root, NVSWITCH_XML), nvswitch={'fabric': NVSWITCH_FABRIC, 'manager': 'failed'})
    return found


def _nvswitch_node(work, recording):
    """Turn the run's node into an NVSwitch node; returns (nvidia-smi XML path, environment)."""
    with open(recording['smi']) as handle:
        head, *blocks = handle.read().split('<fabric>')
    states = recording['nvswitch']['fabric']
    if len(blocks) != len(states):
        raise SystemExit('health_corpus: %s has %d fabric sections, expected %d'
                         % (recording['smi'], len(blocks), len(states)))
    xml = os.path.join(work, 'nvswitch-node.xml')
    with open(xml, 'w') as handle:
        handle.write(head + ''.join(
            '<fabric>' + block.replace('<state>N/A</state>', '<state>%s</state>' % state, 1).replace(
                '<status>N/A</status>', '<status>%s</status>' % status, 1)
            for block, (state, status) in zip(blocks, states)))
    for number in range(4):
        device = os.path.join(work, 'sys', 'bus', 'pci', 'devices', '0000:%02x:00.0' % (5 + number))
        os.makedirs(device)
        for name, value in (('vendor', '0x10de'), ('class', '0x068000')):
            with open(os.path.join(device, name), 'w') as handle:
                handle.write(value + '\n')
    bindir = os.path.join(work, 'bin')
    os.makedirs(bindir)
    manager = recording['nvswitch']['manager']
    with open(os.path.join(bindir, 'systemctl'), 'w') as handle:
        handle.write('#!/bin/sh\necho %s\n[ %s = active ]\n' % (manager, manager))
    os.chmod(os.path.join(bindir, 'systemctl'), 0o755)
    return xml, dict(os.environ, PATH=bindir + os.pathsep + os.environ.get('PATH', ''))


def slug(name):
    return re.sub(r'[^A-Za-z0-9_.-]+', '_', name)


def run_program(archive, recording, work_dir, textfile_dir=None):
    """(exit code, stdout, textfile text or None) of ``python3 ARCHIVE`` on one recording.

    The PCI bus (sysfs) holds no GPU, so the GPU count on the PCI bus is 0: the corpus has no sysfs of GPUs.
    An RDMA recording becomes the /sys/class/infiniband tree (and the adapters' PCI devices) it describes."""
    work = os.path.join(work_dir, slug(recording['name']))
    os.makedirs(os.path.join(work, 'sys', 'bus', 'pci', 'devices'))
    if recording.get('rdma_recording'):
        trees = rdma_trees()
        trees.write_tree(os.path.join(work, 'sys'), trees.recording_model(recording['rdma_recording']))
    output, env = recording['smi'], None
    if recording.get('nvswitch'):
        output, env = _nvswitch_node(work, recording)
    smi = os.path.join(work, 'nvidia-smi')
    with open(smi, 'w') as handle:
        handle.write('#!/bin/sh\ncat "%s"\nexit %d\n' % (output, recording['smi_rc']))
    os.chmod(smi, 0o755)
    log = recording['kernel_log']
    if log is None:
        log = os.path.join(work, 'kern.log')
        open(log, 'w').close()
    config = os.path.join(work, 'health.json')
    settings = {'nvidia_smi_path': smi, 'kernel_log_path': log, 'sysfs_root': os.path.join(work, 'sys'),
                'xid_window_minutes': WIDE_WINDOW_MINUTES}
    if recording.get('rdma') is not None:
        settings['rdma'] = recording['rdma']
    with open(config, 'w') as handle:
        json.dump(settings, handle)
    textfile = textfile_dir or os.path.join(work, 'textfile')
    if not os.path.isdir(textfile):
        os.makedirs(textfile)
    proc = subprocess.run([sys.executable, archive, '--config', config, '--textfile', textfile],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False,
                          env=env)
    prom = os.path.join(textfile, TEXTFILE_NAME)
    text = None
    if os.path.exists(prom):
        with open(prom) as handle:
            text = handle.read()
    return proc.returncode, proc.stdout, text


def run_all(root=None):
    """[(recording, exit code, stdout, textfile text)] for every recording."""
    root = root or fixtures_dir()
    work = tempfile.mkdtemp(prefix='health-corpus-')
    try:
        archive = build_archive(work)
        # Each run is a process of its own: a few at a time (the controller's cores), results in order.
        with ThreadPoolExecutor(max_workers=max(2, min(8, os.cpu_count() or 2))) as pool:
            results = list(pool.map(lambda rec: run_program(archive, rec, work), recordings(root)))
        return [(rec,) + result for rec, result in zip(recordings(root), results)]
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
    parser.add_argument('--textfiles', required=True, metavar='DIR',
                        help='write the textfile of every recording as DIR/<recording>.prom; print the paths')
    args = parser.parse_args()
    if not os.path.isdir(args.textfiles):
        os.makedirs(args.textfiles)
    missing = []
    for rec, code, _out, text in run_all():
        if text is None:
            missing.append('%s (exit %s)' % (rec['name'], code))
            continue
        path = os.path.join(args.textfiles, slug(rec['name']) + '.prom')
        with open(path, 'w') as handle:
            handle.write(text)
        print(path)
    if missing:
        sys.stderr.write('health_corpus: no textfile written for: %s\n' % ', '.join(missing))
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
