# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run a command under a time limit that reaches everything the command started, with bounded output.

Shared by the gpu_facts and stack_facts modules (and any module that starts a node tool that can
hang: nvidia-smi on a wedged GPU, rpm on a stuck database lock, a dead NFS mount) and by the node
health program (:func:`run_bounded`; no Ansible imports here).

The command's own exit is what counts, not the end of its output: a child it left behind holding
stdout open (a background job) cannot turn a finished command into a hung one; its output is
drained for at most DRAIN_SECONDS after the command exited, then what is left of the command's
process group is killed. Output is kept up to
OUTPUT_MAX_BYTES per stream (the rest is read and dropped, so the command never blocks on a full
pipe and memory stays bounded); a cut stream is noted on stderr with OUTPUT_CUT_NOTE.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import select
import signal
import subprocess
import time

# Seconds between the polite TERM (coreutils timeout) and the KILL of a command that overran its time limit.
KILL_AFTER = 5
# Seconds the output of a command that exited is still read (a leftover child may hold the pipe open).
DRAIN_SECONDS = 2
# Bytes kept per output stream: nvidia-smi -q -x of 8 GPUs under load is well under 1 MiB.
OUTPUT_MAX_BYTES = 16 * 1024 * 1024
# Appended to stderr when a stream was cut (gpu_probe names the cut output with it).
OUTPUT_CUT_NOTE = 'gpucluster: %s cut after %d bytes (the command printed more)'
_CHUNK = 65536


def _kill_group(proc, sig=signal.SIGKILL):
    try:
        os.killpg(proc.pid, sig)
    except OSError:
        pass


def run_bounded(argv, timeout, env=None, max_bytes=OUTPUT_MAX_BYTES, drain=DRAIN_SECONDS, kill_wait=1.0,
                on_start=None):
    """``(rc, stdout bytes, stderr bytes, state)`` of ``argv`` run in a session of its own.

    ``rc`` is None when the command was still running after ``timeout`` seconds: its whole process group
    then gets SIGKILL. ``state``: ``{'timed_out', 'cut': [stream names, stdout first], 'leftover': True when the
    output was still open DRAIN_SECONDS after the command exited}``. OSError when it cannot start.
    ``on_start(proc)`` is called once the process runs (the health program records the running command).
    Leaving by an exception (the health program's run timeout) kills the command's process group.
    """
    # Not AnsibleModule.run_command: it reads until the end of the output (a leftover child holding it open
    # made a finished command "hung") and keeps all of it in memory; the node health program has no module.
    proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,  # pylint: disable=ansible-bad-function
                            stderr=subprocess.PIPE, env=env, start_new_session=True, close_fds=True)
    if on_start is not None:
        on_start(proc)
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    buffers = {out_fd: [], err_fd: []}
    kept = {out_fd: 0, err_fd: 0}
    names = {out_fd: 'stdout', err_fd: 'stderr'}
    cut = []
    open_fds = set(buffers)
    deadline = time.monotonic() + max(0.0, timeout)
    state = {'timed_out': False, 'cut': cut, 'leftover': False}
    drain_until = None
    try:
        while open_fds:
            now = time.monotonic()
            if proc.poll() is not None:
                if drain_until is None:
                    drain_until = now + drain
                if now >= drain_until:
                    # A child left behind holds the output open: the command itself is done. The child
                    # is part of this run (same process group) and goes with it.
                    state['leftover'] = True
                    _kill_group(proc)
                    break
                wait = drain_until - now
            else:
                if now >= deadline:
                    state['timed_out'] = True
                    _kill_group(proc)
                    drain_until = time.monotonic() + kill_wait
                    try:
                        proc.wait(timeout=kill_wait)
                    except subprocess.TimeoutExpired:
                        pass  # stuck in the driver (D state): not waited for
                    wait = kill_wait
                    deadline = float('inf')
                else:
                    # Wake up now and then to see whether the command exited with its output held open.
                    wait = min(deadline - now, 0.2)
            ready, _w, _x = select.select(list(open_fds), [], [], max(0.0, wait))
            for fd in ready:
                try:
                    chunk = os.read(fd, _CHUNK)
                except OSError:
                    chunk = b''
                if not chunk:
                    open_fds.discard(fd)
                    continue
                room = max_bytes - kept[fd]
                if room > 0:
                    buffers[fd].append(chunk[:room])
                    kept[fd] += min(room, len(chunk))
                if len(chunk) > room and names[fd] not in cut:
                    cut.append(names[fd])
            if state['timed_out'] and drain_until is not None and time.monotonic() >= drain_until:
                break
        if proc.returncode is None and not state['timed_out']:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                state['timed_out'] = True
                _kill_group(proc)
    finally:
        if proc.returncode is None:
            _kill_group(proc)
            try:
                proc.wait(timeout=kill_wait)
            except subprocess.TimeoutExpired:
                pass
        for stream in (proc.stdout, proc.stderr):
            try:
                stream.close()
            except OSError:
                pass
    out = b''.join(buffers[out_fd])
    err = b''.join(buffers[err_fd])
    # stdout first, then stderr, whichever the reads met first (both may be ready at once under load).
    cut.sort(key=('stdout', 'stderr').index)
    for name in cut:
        err += ('\n' + OUTPUT_CUT_NOTE % (name, max_bytes)).encode('ascii')
    rc = None if state['timed_out'] else proc.returncode
    return rc, out, err, state


def run_timed(module, argv, timeout, environ_update=None):
    """``(rc, stdout, stderr)`` of ``argv`` for a module; rc is None when the command was killed for time.

    The command runs in a process group of its own under coreutils ``timeout`` where the host has it
    (TERM, then KILL after KILL_AFTER seconds; a command that cannot start is reported by it with its
    exit code 126/127 and message), and the whole group is killed here when even that overran.
    Output is decoded with replacement characters: bytes that are not UTF-8 never abort the module.
    """
    timeout_bin = module.get_bin_path('timeout')
    cmd = list(argv)
    limit = timeout
    if timeout_bin:
        cmd = [timeout_bin, '--kill-after=%d' % KILL_AFTER, str(int(timeout))] + cmd
        limit = timeout + KILL_AFTER + 1
    env = dict(os.environ)
    env.update(environ_update or {'LC_ALL': 'C'})
    rc, out, err, state = run_bounded(cmd, limit, env=env)
    out = out.decode('utf-8', 'replace')
    err = err.decode('utf-8', 'replace')
    if state['timed_out'] or (timeout_bin and rc in (124, 137)):
        return None, out, err
    return rc, out, err
