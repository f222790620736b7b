# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run a command from a module under a time limit that reaches everything the command started.

Shared by the gpu_facts and stack_facts modules (and any module that starts a node tool that can
hang: nvidia-smi on a wedged GPU, rpm on a stuck database lock, a dead NFS mount).
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import threading

# Seconds between the polite TERM and the KILL of a command that overran its time limit.
KILL_AFTER = 5


def run_timed(module, argv, timeout, environ_update=None):
    """``(rc, stdout, stderr)`` of ``argv`` run by ``module.run_command``; rc is None when the
    command was killed for time.

    coreutils ``timeout`` runs the command in a process group of its own and signals the whole
    group (TERM, then KILL after KILL_AFTER seconds), so nothing the command started outlives it.
    Without ``timeout`` on the host a timer kills the command itself. Output is decoded with
    replacement characters: bytes that are not UTF-8 never abort the module.
    """
    timeout_bin = module.get_bin_path('timeout')
    timers = []
    state = {'expired': False}

    def arm(proc):
        def expire():
            state['expired'] = True
            try:
                proc.kill()
            except OSError:
                pass
        timer = threading.Timer(timeout + KILL_AFTER, expire)
        timer.daemon = True
        timer.start()
        timers.append(timer)

    cmd = list(argv)
    if timeout_bin:
        cmd = [timeout_bin, '--kill-after=%d' % KILL_AFTER, str(int(timeout))] + cmd
    try:
        rc, out, err = module.run_command(cmd, environ_update=dict(environ_update or {'LC_ALL': 'C'}),
                                          errors='replace',
                                          before_communicate_callback=None if timeout_bin else arm)
    finally:
        for timer in timers:
            timer.cancel()
    if state['expired'] or (timeout_bin and rc in (124, 137)):
        return None, out, err
    return rc, out, err
