# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side drift audit: collects gpu_stack facts (hostvars, an explicit mapping or
Ansible's fact cache), builds each host's baseline from the role variables that install the
components, compares (module_utils.drift), writes the reports and fails on drift."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import time

from ansible.errors import AnsibleError
from ansible.plugins.action import ActionBase
from ansible.plugins.loader import cache_loader
from ansible.utils.display import Display

from ansible_collections.gpucluster.core.plugins.module_utils import drift

ARGUMENT_SPEC = dict(
    hosts=dict(type='list', elements='str'),
    facts=dict(type='dict'),
    fact_cache=dict(type='path'),
    fact_cache_plugin=dict(type='str', default='ansible.builtin.jsonfile'),
    fact_cache_prefix=dict(type='str', default=''),
    include_cache_hosts=dict(type='bool', default=True),
    baseline=dict(type='dict', default={}),
    baseline_vars=dict(type='dict'),
    consistent=dict(type='list', elements='str'),
    groups=dict(type='raw', default=[]),
    severity=dict(type='dict', default={}),
    unknown_severity=dict(type='str', default='critical', choices=list(drift.SEVERITIES)),
    ignore=dict(type='list', elements='str', default=[]),
    fail_on=dict(type='str', default='critical', choices=['critical', 'warning', 'info', 'never']),
    max_fact_age=dict(type='int', default=0),
    status_var=dict(type='str'),
    report_dir=dict(type='path'),
    report_formats=dict(type='list', elements='str', default=['json', 'junit', 'markdown'],
                        choices=['json', 'junit', 'markdown']),
    markdown_max_rows=dict(type='int', default=500),
    findings_returned=dict(type='int', default=100),
)

CONTROLLER_NAMES = ('localhost', '127.0.0.1', '::1')

display = Display()


class ActionModule(ActionBase):

    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp

        dummy, params = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        try:
            return self._audit(params, task_vars, result)
        except AnsibleError as exc:
            result.update(failed=True, msg='drift_audit: %s' % exc)
            return result

    # ------------------------------------------------------------ inputs

    def _severity(self, params):
        for component, level in params['severity'].items():
            if level not in drift.SEVERITIES:
                raise AnsibleError('severity[%s]=%r; accepted: %s'
                                   % (component, level, ', '.join(drift.SEVERITIES)))
        return dict(params['severity'])

    def _group_members(self, spec, inventory_groups):
        """groups: a list of inventory group names, or a mapping name -> list of hosts."""
        if isinstance(spec, str):
            spec = [spec]
        if isinstance(spec, dict):
            members = []
            for name, hosts in spec.items():
                if not isinstance(hosts, list):
                    raise AnsibleError('groups[%s] must be a list of host names' % name)
                members.append((str(name), [str(h) for h in hosts]))
            return members
        if isinstance(spec, list):
            return [(str(name), list(inventory_groups.get(name) or [])) for name in spec]
        raise AnsibleError('groups must be a list of inventory group names or a mapping of '
                           'group name to host list, got %s' % type(spec).__name__)

    def _open_cache(self, params):
        path = params['fact_cache']
        if not os.path.isdir(path):
            raise AnsibleError('fact_cache %s is not a directory (expected what '
                               'fact_caching_connection points at)' % path)
        try:
            # Through Ansible's own loader: it wraps the plugin with the schema-qualified keys
            # and the serialized payload of the running ansible-core, so the on-disk format
            # (e.g. 2.21's s1_<host> entries) is never guessed here.
            return cache_loader.get(params['fact_cache_plugin'], _uri=path,
                                    _prefix=params['fact_cache_prefix'], _timeout=0)
        except Exception as exc:
            raise AnsibleError('cannot open fact cache %s with %s: %s'
                               % (path, params['fact_cache_plugin'], exc))

    def _audit(self, params, task_vars, result):
        started = time.time()
        inventory_groups = task_vars.get('groups') or {}
        inventory_hosts = list(inventory_groups.get('all') or [])
        inventory_set = set(inventory_hosts)
        hostvars = task_vars.get('hostvars') or {}
        severity = self._severity(params)
        baseline_vars = drift.DEFAULT_BASELINE_VARS if params['baseline_vars'] is None else params['baseline_vars']
        consistent = drift.DEFAULT_CONSISTENT if params['consistent'] is None else params['consistent']
        explicit = dict((str(k), None if v is None else str(v)) for k, v in params['baseline'].items())

        cache = None
        cache_keys = ()
        if params['fact_cache']:
            cache = self._open_cache(params)
            cache_keys = cache.keys()

        notes = []
        if params['hosts'] is not None:
            hosts = list(dict.fromkeys(params['hosts']))
        else:
            hosts = list(inventory_hosts)
            if cache is not None:
                cache_set = set(cache_keys)
                # The controller in an offline run is not a cluster node unless it has facts.
                hosts = [h for h in hosts if h in cache_set or h not in CONTROLLER_NAMES]
                if hosts and cache_set and not any(h in cache_set for h in hosts):
                    # An inventory that shares no host with the cache describes another
                    # cluster (the default lab inventory against a production cache): audit the
                    # cache alone and say so, instead of calling every inventory host unknown.
                    notes.append('none of the %d inventory hosts has an entry in the fact cache; '
                                 'audited the %d hosts of the cache only (pass drift_audit_hosts '
                                 'to audit inventory hosts)' % (len(hosts), len(cache_set)))
                    hosts = []
                if not hosts:
                    hosts = sorted(cache_set)
                elif params['include_cache_hosts']:
                    hosts.extend(sorted(h for h in cache_set if h not in inventory_set))
            elif params['facts'] is not None:
                hosts.extend(sorted(h for h in params['facts'] if h not in inventory_set))
        if not hosts:
            raise AnsibleError('no hosts to audit: the host list, the inventory and the fact '
                               'cache are all empty')

        now = time.time()
        max_age = params['max_fact_age']
        facts = {}
        raw = {}
        reasons = {}
        baselines = {}
        explicit_facts = params['facts'] or {}
        cache_set = set(cache_keys)
        for host in hosts:
            in_inventory = host in inventory_set
            hv = hostvars[host] if in_inventory and (baseline_vars or cache is None or params['status_var']) else None
            pins = {}
            if hv is not None:
                for component, var in baseline_vars.items():
                    value = hv.get(var)
                    if value is not None and str(value).strip():
                        pins[component] = str(value).strip()
            pins.update(explicit)
            baselines[host] = pins

            host_facts = None
            if host in explicit_facts:
                host_facts = explicit_facts[host]
            elif cache is not None:
                if host in cache_set:
                    try:
                        host_facts = cache.get(host)
                    except KeyError:
                        host_facts = None
                    else:
                        if host_facts is not None and 'gpu_stack' not in host_facts:
                            reasons[host] = 'the fact cache entry holds no gpu_stack facts (stack_facts never ran)'
                else:
                    reasons[host] = 'no entry in the fact cache %s' % params['fact_cache']
            elif hv is not None:
                host_facts = hv.get('ansible_facts')
            else:
                reasons[host] = 'not in the inventory and no facts given'

            stack, host_raw, why = self._stack_of(host_facts, now, max_age)
            if stack is None:
                if host not in reasons:
                    reasons[host] = why or self._status_reason(hv, params['status_var']) or 'no gpu_stack facts'
                continue
            facts[host] = stack
            if host_raw:
                raw[host] = host_raw

        members = self._group_members(params['groups'], inventory_groups)
        grouping = drift.partition_hosts(hosts, members)
        findings, stats = drift.audit(
            hosts, facts, baselines=baselines, consistent=consistent, groups=grouping,
            severity=severity, ignore=params['ignore'], unknown_severity=params['unknown_severity'],
            unknown_reasons=reasons, raw=raw)
        unknown = [h for h in hosts if h not in facts]
        summary = drift.summarize(hosts, findings, stats, params['fail_on'], unknown)
        summary['compare_seconds'] = round(time.time() - started, 3)
        summary['notes'] = notes
        for note in notes:
            display.warning('drift_audit: %s' % note)

        reports = {}
        if params['report_dir']:
            generated = time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())
            used = {'explicit': explicit, 'from_vars': dict(baseline_vars)}
            reports = drift.write_reports(
                params['report_dir'], hosts, summary, findings, stats,
                formats=params['report_formats'], baselines_used=used, generated_at=generated,
                max_rows=params['markdown_max_rows'])

        lines = drift.summary_text(summary, findings)
        limit = params['findings_returned']
        brief = dict(summary)
        brief['unknown_hosts'] = summary['unknown_hosts'][:limit]
        result.update(
            changed=False,
            failed=summary['failed'],
            msg='\n'.join(lines),
            summary=brief,
            findings=findings[:limit],
            findings_truncated=len(findings) > limit,
            reports=reports,
        )
        return result

    @staticmethod
    def _stack_of(host_facts, now, max_age):
        """Return (gpu_stack, raw, reason) from a host's facts."""
        if not isinstance(host_facts, dict):
            return None, None, None
        stack = host_facts.get('gpu_stack')
        if not isinstance(stack, dict):
            return None, None, None
        details = host_facts.get('gpu_stack_details')
        details = details if isinstance(details, dict) else {}
        if max_age > 0:
            collected = details.get('collected_at')
            try:
                age = now - float(collected)
            except (TypeError, ValueError):
                return None, None, 'gpu_stack facts carry no collected_at; max_fact_age cannot be checked'
            if age > max_age:
                return None, None, 'gpu_stack facts are %d s old (max_fact_age %d s)' % (age, max_age)
        host_raw = details.get('raw')
        return stack, host_raw if isinstance(host_raw, dict) else None, None

    @staticmethod
    def _status_reason(hv, status_var):
        if hv is None or not status_var:
            return None
        status = hv.get(status_var)
        if not isinstance(status, dict):
            return None
        if status.get('unreachable'):
            return 'unreachable: %s' % (status.get('msg') or 'no connection')
        if status.get('failed'):
            return 'stack_facts failed: %s' % (status.get('msg') or 'no message')
        if status.get('skipped'):
            return 'stack_facts was skipped on this host'
        return None
