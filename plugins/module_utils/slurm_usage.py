# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Slurm controller's usage metrics (node_exporter textfile) from squeue, sinfo and sshare.

The slurm role's timer on the controller (gpucluster-slurm-metrics, roles/slurm) runs the three
commands this module names, each bounded in time, and writes ``gpucluster_slurm.prom``:

* jobs pending and running by partition, state and reason, and the GPUs they hold or ask for;
* per node: GPUs, GPUs allocated, GPUs idle (free on a node that takes jobs), its state;
* per user and account: jobs and GPUs; per account and user: the fair-share values of sshare;
* the pending jobs that the idle GPUs of their partitions could run (the "waiting while GPUs sit
  idle" decision, made here: see pending_fits);
* ``gpucluster_slurm_scrape_failed{command}`` (1 when a command failed or ran out of time): the
  families that come from a failed command are left out of the file, never kept from an earlier run.

Command output is read as the documented ``--Format``/``--parsable2`` shapes (fields separated by
SEP, width 0: never cut, never padded). A line that does not have the expected fields is counted in
``gpucluster_slurm_scrape_refused_lines{command}`` and left out. Label values are Slurm's names, made
printable and bounded (gpu_jobs.clean_label) and escaped by prom_text.

Pure code, standard library only, Python 3.9, no Ansible imports (packed into the slurm role's usage
archive).
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import math
import re

from .gpu_jobs import RecordError, clean_label
from .prom_text import render_samples

SEP = '|'
COMMANDS = ('squeue', 'sinfo', 'sshare')
SQUEUE_FIELDS = ('jobid', 'partition', 'state', 'reason', 'username', 'account', 'numnodes', 'tres-alloc')
SINFO_FIELDS = ('nodelist', 'partitionname', 'statelong', 'gres', 'gresused')
SSHARE_FIELDS = ('Account', 'User', 'RawShares', 'NormShares', 'RawUsage', 'EffectvUsage', 'LevelFS', 'FairShare')
# Job states asked of squeue (a completing or configuring job holds its GPUs too: it counts as running).
SQUEUE_STATES = 'PENDING,RUNNING,CONFIGURING,COMPLETING,SUSPENDED'
STATE_NAMES = {'PENDING': 'pending', 'RUNNING': 'running', 'CONFIGURING': 'running', 'COMPLETING': 'running',
               'SUSPENDED': 'suspended'}
# The pending reason of a job that waits for resources (squeue's REASON CODES).
RESOURCE_REASONS = ('Resources',)
# Node base states (sinfo statelong, flags stripped) that take jobs, and the flag that keeps one usable
# (backfill's "planned"); every other flag (* not responding, ~ powered off, # powering up, ! % powering down,
# $ maintenance, @ ^ reboot) makes a node unusable for now.
USABLE_STATES = ('idle', 'mixed', 'allocated', 'completing', 'planned')
USABLE_FLAGS = ('-',)
_STATE_RE = re.compile(r'^([a-z_]+)([*~#!%$@^+-]*)\Z')
TEXTFILE_NAME = 'gpucluster_slurm.prom'
# Lines read from one command's output: a larger answer is cut there (and the cut counted as refused).
MAX_LINES = 200000

METRICS = (
    ('gpucluster_slurm_scrape_failed', 'gauge',
     'Whether the command failed or ran out of time in the last run (1) or answered (0); its families are left out.'),
    ('gpucluster_slurm_scrape_refused_lines', 'gauge', 'Lines of the command output that did not have the expected fields.'),
    ('gpucluster_slurm_scrape_duration_seconds', 'gauge', 'Seconds the last run of the Slurm metrics took.'),
    ('gpucluster_slurm_scrape_timestamp_seconds', 'gauge', 'Unix time of the last run of the Slurm metrics.'),
    ('gpucluster_slurm_jobs', 'gauge', 'Jobs by partition, state (pending, running, suspended) and reason.'),
    ('gpucluster_slurm_job_gpus', 'gauge', 'GPUs held (running) or asked for (pending) by partition and state.'),
    ('gpucluster_slurm_pending_jobs_fit_idle_gpus', 'gauge',
     'Jobs pending for resources that the idle GPUs of usable nodes of their partition could hold.'),
    ('gpucluster_slurm_node_gpus', 'gauge', 'GPUs of the node (gres).'),
    ('gpucluster_slurm_node_gpus_allocated', 'gauge', 'GPUs of the node allocated to jobs.'),
    ('gpucluster_slurm_node_gpus_idle', 'gauge', 'GPUs of the node free while the node takes jobs (0 on a node that does not).'),
    ('gpucluster_slurm_node_state', 'gauge', "The node's state (value 1), flags stripped; usable 1 when it takes jobs."),
    ('gpucluster_slurm_node_partition_info', 'gauge', 'The partitions of the node (value 1).'),
    ('gpucluster_slurm_user_jobs', 'gauge', 'Jobs by user and state.'),
    ('gpucluster_slurm_user_gpus', 'gauge', 'GPUs held (running) or asked for (pending) by user and state.'),
    ('gpucluster_slurm_account_gpus', 'gauge', 'GPUs held (running) or asked for (pending) by account and state.'),
    ('gpucluster_slurm_account_shares_normalized', 'gauge', "The account's normalized shares (sshare NormShares)."),
    ('gpucluster_slurm_account_usage_effective', 'gauge', "The account's effective usage (sshare EffectvUsage)."),
    ('gpucluster_slurm_account_level_fairshare', 'gauge', "The account's level fair share (sshare LevelFS, fair tree)."),
    ('gpucluster_slurm_account_fairshare', 'gauge', "The account's fair-share factor (sshare FairShare, classic)."),
    ('gpucluster_slurm_user_fairshare', 'gauge', "The user's fair-share factor in the account (sshare FairShare)."),
)
METRIC_NAMES = tuple(name for name, _kind, _help in METRICS)


def squeue_argv(squeue='squeue'):
    """Every job array element on its own line (--array), hidden partitions too (--all)."""
    return [squeue, '--all', '--array', '--noheader', '--states=' + SQUEUE_STATES, '--Format=' + _long_format(SQUEUE_FIELDS)]


def sinfo_argv(sinfo='sinfo'):
    """One line per node and partition."""
    return [sinfo, '--all', '--Node', '--noheader', '--Format=' + _long_format(SINFO_FIELDS)]


def sshare_argv(sshare='sshare'):
    return [sshare, '--all', '--noheader', '--parsable2', '--format=' + ','.join(SSHARE_FIELDS)]


def _long_format(fields):
    """squeue/sinfo --Format: width 0 prints a value whole and unpadded; SEP follows every field but the last."""
    return ','.join('%s:0%s' % (field, SEP if i < len(fields) - 1 else '') for i, field in enumerate(fields))


def _lines(text):
    lines = (text or '').splitlines()
    return [line for line in lines[:MAX_LINES] if line.strip()], max(len(lines) - MAX_LINES, 0)


def _fields(line, count):
    parts = line.split(SEP)
    return [p.strip() for p in parts] if len(parts) == count else None


def _whole(text):
    return int(text) if re.match(r'^[0-9]{1,9}\Z', text or '') else None


def tres_gpus(tres):
    """GPUs in a TRES string ('cpu=4,mem=8G,node=1,billing=4,gres/gpu=2'); 0 without gres/gpu. Typed entries
    (gres/gpu:a100=2) repeat the count and are not added."""
    for item in (tres or '').split(','):
        key, _sep, value = item.strip().partition('=')
        if key == 'gres/gpu':
            count = _whole(value)
            return count if count is not None else 0
    return 0


def _split_gres(text):
    """Entries of a gres string split at the commas outside parentheses."""
    entries, depth, current = [], 0, ''
    for char in text:
        if char == '(':
            depth += 1
        elif char == ')':
            depth = max(depth - 1, 0)
        if char == ',' and depth == 0:
            entries.append(current)
            current = ''
        else:
            current += char
    entries.append(current)
    return [e.strip() for e in entries if e.strip()]


_GRES_RE = re.compile(r'^(?P<name>[^:()]+)(?::(?P<type>\(null\)|[^:()]*))?(?::(?P<count>[0-9]+))?(?P<rest>\(.*\))?\Z')


def gres_gpus(gres):
    """GPUs in a node's gres or gresused string: 'gpu:a100:4(S:0-1)', 'gpu:8', 'gpu:(null):0(IDX:N/A)',
    'gpu:a100:2(IDX:0-1),gpu:h100:1(IDX:4)', '(null)'. None when it cannot be read."""
    text = (gres or '').strip()
    if text in ('', '(null)', 'N/A'):
        return 0
    total = 0
    for entry in _split_gres(text):
        match = _GRES_RE.match(entry)
        if not match:
            return None
        if match.group('name') != 'gpu':
            continue
        count, kind = match.group('count'), match.group('type')
        if count is None and kind is not None and kind.isdigit():
            count = kind
        if count is None:
            count = '1' if kind is None else None
        if count is None:
            return None
        total += int(count)
    return total


def parse_squeue(text):
    """([job], refused lines) of squeue_argv() output. A job: {job_id, partition, partitions, state, reason, user,
    account, nodes, gpus}."""
    lines, cut = _lines(text)
    jobs, refused = [], cut
    for line in lines:
        fields = _fields(line, len(SQUEUE_FIELDS))
        nodes = _whole(fields[6]) if fields else None
        state = STATE_NAMES.get(fields[2]) if fields else None
        if fields is None or nodes is None or state is None or not fields[0]:
            refused += 1
            continue
        job_id, partition, _state, reason, user, account, _nodes, tres = fields
        try:
            jobs.append({'job_id': clean_label(job_id), 'partition': clean_label(partition),
                         'partitions': [p for p in partition.split(',') if p],
                         'state': state, 'reason': clean_label(reason), 'user': clean_label(user),
                         'account': clean_label(account), 'nodes': nodes, 'gpus': tres_gpus(tres)})
        except RecordError:
            refused += 1
    return jobs, refused


def node_state(text):
    """(base state, flags, usable) of sinfo's statelong ('mixed', 'drained*', 'idle~', 'mixed-')."""
    match = _STATE_RE.match((text or '').strip().lower())
    if not match:
        return None, '', False
    base, flags = match.group(1), match.group(2)
    return base, flags, base in USABLE_STATES and all(f in USABLE_FLAGS for f in flags)


def parse_sinfo(text):
    """({node: {partitions, state, flags, usable, gpus, gpus_used}}, refused lines) of sinfo_argv() output."""
    lines, cut = _lines(text)
    nodes, refused = {}, cut
    for line in lines:
        fields = _fields(line, len(SINFO_FIELDS))
        if fields is None or not fields[0]:
            refused += 1
            continue
        name, partition, state_text, gres, used = fields
        base, flags, usable = node_state(state_text)
        total, allocated = gres_gpus(gres), gres_gpus(used)
        if base is None or total is None or allocated is None:
            refused += 1
            continue
        name = clean_label(name)
        node = nodes.setdefault(name, {'partitions': [], 'state': base, 'flags': flags, 'usable': usable,
                                       'gpus': total, 'gpus_used': allocated})
        partition = clean_label(partition.rstrip('*'))
        if partition and partition not in node['partitions']:
            node['partitions'].append(partition)
    return nodes, refused


def _number(text):
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def parse_sshare(text):
    """({account: {shares_normalized, usage_effective, level_fairshare, fairshare}}, {(account, user): fairshare},
    refused lines) of sshare_argv() output (account names lose the indentation of the tree)."""
    lines, cut = _lines(text)
    accounts, users, refused = {}, {}, cut
    for line in lines:
        parts = line.split(SEP)
        if len(parts) != len(SSHARE_FIELDS) or not parts[0].strip():
            refused += 1
            continue
        account, user = clean_label(parts[0].strip()), clean_label(parts[1].strip())
        values = dict(zip(SSHARE_FIELDS, (_number(p.strip()) for p in parts)))
        if user:
            if values['FairShare'] is not None:
                users[(account, user)] = values['FairShare']
        else:
            accounts[account] = {'shares_normalized': values['NormShares'], 'usage_effective': values['EffectvUsage'],
                                 'level_fairshare': values['LevelFS'], 'fairshare': values['FairShare']}
    return accounts, users, refused


def idle_gpus(node):
    """GPUs of a node free for a job now: 0 on a node that does not take jobs."""
    return max(node['gpus'] - node['gpus_used'], 0) if node['usable'] else 0


def pending_fits(jobs, nodes):
    """{partition: jobs pending for resources that idle GPUs could hold}. A job asking for G GPUs on N nodes
    fits when at least N usable nodes of its partitions each have ceil(G / N) idle GPUs: Slurm would then be
    waiting on something else than GPUs (CPUs, memory, a reservation) or on its next scheduling pass."""
    members = {}
    for name, node in nodes.items():
        for partition in node['partitions']:
            members.setdefault(partition, []).append(name)
    fits = {}
    for job in jobs:
        if job['state'] != 'pending' or job['reason'] not in RESOURCE_REASONS or job['gpus'] < 1:
            continue
        count = max(job['nodes'], 1)
        per_node = -(-job['gpus'] // count)
        candidates = set()
        for partition in job['partitions']:
            candidates.update(members.get(partition, []))
        if sum(1 for name in candidates if idle_gpus(nodes[name]) >= per_node) >= count:
            fits[job['partition']] = fits.get(job['partition'], 0) + 1
    return fits


def _count(samples, metric, key_labels, table):
    for key in sorted(table):
        samples.append((metric, list(zip(key_labels, key)), table[key]))


def samples(results, now, duration):
    """[(metric, labels, value)] of one run. ``results``: {command: {'ok': bool, 'text': output}} for the commands
    that ran (sshare absent when accounting is off)."""
    out = []
    parsed = {}
    refused = {}
    for command in COMMANDS:
        if command not in results:
            continue
        result = results[command]
        out.append(('gpucluster_slurm_scrape_failed', [('command', command)], 0 if result['ok'] else 1))
        if result['ok']:
            value = {'squeue': parse_squeue, 'sinfo': parse_sinfo, 'sshare': parse_sshare}[command](result['text'])
            parsed[command] = value
            refused[command] = value[-1]
    for command in sorted(refused):
        out.append(('gpucluster_slurm_scrape_refused_lines', [('command', command)], refused[command]))
    out.append(('gpucluster_slurm_scrape_duration_seconds', [], round(float(duration), 3)))
    out.append(('gpucluster_slurm_scrape_timestamp_seconds', [], int(now)))
    jobs = parsed['squeue'][0] if 'squeue' in parsed else None
    nodes = parsed['sinfo'][0] if 'sinfo' in parsed else None
    if jobs is not None:
        by_partition, gpus_partition, by_user, gpus_user, gpus_account = {}, {}, {}, {}, {}
        for job in jobs:
            key = (job['partition'], job['state'], job['reason'])
            by_partition[key] = by_partition.get(key, 0) + 1
            for table, labels in ((gpus_partition, (job['partition'], job['state'])),
                                  (gpus_user, (job['user'], job['state'])),
                                  (gpus_account, (job['account'], job['state']))):
                table[labels] = table.get(labels, 0) + job['gpus']
            by_user[(job['user'], job['state'])] = by_user.get((job['user'], job['state']), 0) + 1
        _count(out, 'gpucluster_slurm_jobs', ('partition', 'state', 'reason'), by_partition)
        _count(out, 'gpucluster_slurm_job_gpus', ('partition', 'state'), gpus_partition)
        _count(out, 'gpucluster_slurm_user_jobs', ('user', 'state'), by_user)
        _count(out, 'gpucluster_slurm_user_gpus', ('user', 'state'), gpus_user)
        _count(out, 'gpucluster_slurm_account_gpus', ('account', 'state'), gpus_account)
    if jobs is not None and nodes is not None:
        fits = pending_fits(jobs, nodes)
        partitions = set(p for node in nodes.values() for p in node['partitions']) | set(fits)
        for partition in sorted(partitions):
            out.append(('gpucluster_slurm_pending_jobs_fit_idle_gpus', [('partition', partition)], fits.get(partition, 0)))
    if nodes is not None:
        for name in sorted(nodes):
            node = nodes[name]
            out.append(('gpucluster_slurm_node_gpus', [('node', name)], node['gpus']))
            out.append(('gpucluster_slurm_node_gpus_allocated', [('node', name)], node['gpus_used']))
            out.append(('gpucluster_slurm_node_gpus_idle', [('node', name)], idle_gpus(node)))
            out.append(('gpucluster_slurm_node_state', [('node', name), ('state', node['state']),
                                                        ('usable', '1' if node['usable'] else '0')], 1))
            for partition in node['partitions']:
                out.append(('gpucluster_slurm_node_partition_info', [('node', name), ('partition', partition)], 1))
    if 'sshare' in parsed:
        accounts, users, _refused = parsed['sshare']
        for account in sorted(accounts):
            for key in ('shares_normalized', 'usage_effective', 'level_fairshare', 'fairshare'):
                value = accounts[account][key]
                if value is not None:
                    metric = {'shares_normalized': 'gpucluster_slurm_account_shares_normalized',
                              'usage_effective': 'gpucluster_slurm_account_usage_effective',
                              'level_fairshare': 'gpucluster_slurm_account_level_fairshare',
                              'fairshare': 'gpucluster_slurm_account_fairshare'}[key]
                    out.append((metric, [('account', account)], value))
        for account, user in sorted(users):
            out.append(('gpucluster_slurm_user_fairshare', [('account', account), ('user', user)], users[(account, user)]))
    return out


def render(results, now, duration):
    """The text of gpucluster_slurm.prom for one run."""
    return render_samples(METRICS, samples(results, now, duration))
