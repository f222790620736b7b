# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side drift audit: collects gpu_stack facts (hostvars, an explicit mapping or
Ansible's fact cache), builds each host's baseline from the role variables that install the
components, compares (module_utils.drift), writes the reports and fails on drift."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import errno
import glob
import os
import stat
import time

from collections.abc import Mapping

import yaml

from ansible.errors import AnsibleError
from ansible.plugins.action import ActionBase
from ansible.plugins.cache import BaseFileCacheModule
from ansible.plugins.loader import cache_loader
from ansible.utils.display import Display

from ansible_collections.gpucluster.core.plugins.module_utils import drift
from ansible_collections.gpucluster.core.plugins.module_utils.bounded_read import kind_of
from ansible_collections.gpucluster.core.plugins.module_utils.text_bounds import clip, quote
from ansible_collections.gpucluster.core.plugins.plugin_utils import drift_reports

ARGUMENT_SPEC = dict(
    hosts=dict(type='list', elements='str'),
    facts=dict(type='dict'),
    fact_cache=dict(type='path'),
    fact_cache_plugin=dict(type='str', default='ansible.builtin.jsonfile'),
    fact_cache_prefix=dict(type='str', default=''),
    include_cache_hosts=dict(type='bool', default=True),
    baseline=dict(type='dict', default={}),
    baseline_vars=dict(type='dict'),
    role_defaults=dict(type='bool', default=True),
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
# A fact cache entry larger than this is not read (one host's facts are tens of kilobytes).
CACHE_ENTRY_MAX_BYTES = 64 << 20
# The collection's roles: their defaults are the versions a role installs when the inventory sets none.
ROLES_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), 'roles')


def role_default_values(roles_dir=ROLES_DIR):
    """variable -> (value, role) from every role's defaults/main.yml; values that are templates
    (they depend on other variables) are left out: only a literal is a pin."""
    values = {}
    for path in sorted(glob.glob(os.path.join(roles_dir, '*', 'defaults', 'main.yml'))):
        role = os.path.basename(os.path.dirname(os.path.dirname(path)))
        try:
            with open(path) as handle:
                data = yaml.safe_load(handle)
        except (IOError, OSError, yaml.YAMLError) as exc:
            raise AnsibleError('cannot read the defaults of role %s (%s): %s' % (role, path, exc))
        for name, value in (data or {}).items():
            if isinstance(value, str) and '{{' in value:
                continue
            values[name] = (value, role)
    return values


display = Display()


class _HostVarsView(object):
    """A host's variables as the audit reads them (``in``, ``get``): what ``hostvars[host][name]`` gives,
    without templating every value read. A string without ``{`` is a literal (nothing in it for Jinja to
    expand) and is returned as it is; anything else is templated under the host's variables, as hostvars
    does. The pins are literals nearly always: templating each one cost the 10,000-host audit seconds."""

    def __init__(self, variables, templar):
        self._vars = variables
        self._templar = templar
        self._host_templar = None

    def __contains__(self, name):
        return name in self._vars

    def get(self, name, default=None, template_containers=True):
        """``template_containers=False`` returns a list or mapping as it is: a pin is text, so such a value
        is refused anyway, and templating a YAML alias bomb (lists shared nine levels deep) would walk
        billions of elements first."""
        if name not in self._vars:
            return default
        value = self._vars[name]
        if value is None or isinstance(value, (bool, int, float)) or (isinstance(value, str) and '{' not in value):
            return value
        if not template_containers and not isinstance(value, str):
            return value
        if self._host_templar is None:
            self._host_templar = self._templar.copy_with_new_env(available_variables=self._vars)
        return self._host_templar.template(value)


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
        self._check(drift.check_components, list(params['severity']), 'severity', drift.SEVERITY_COMPONENTS)
        for component, level in params['severity'].items():
            if level not in drift.SEVERITIES:
                raise AnsibleError('severity[%s]=%s; accepted: %s'
                                   % (component, quote(level), ', '.join(drift.SEVERITIES)))
        return dict(params['severity'])

    @staticmethod
    def _check(function, *args):
        try:
            return function(*args)
        except drift.BaselineError as exc:
            raise AnsibleError(str(exc))

    def _group_members(self, spec, inventory_groups):
        """groups: a list of inventory group names, or a mapping name -> list of hosts."""
        if isinstance(spec, str):
            spec = [spec]
        if isinstance(spec, dict):
            members = []
            for name, hosts in spec.items():
                if not isinstance(hosts, list):
                    raise AnsibleError('groups[%s] must be a list of host names' % clip(str(name)))
                members.append((str(name), [str(h) for h in hosts]))
            return members
        if isinstance(spec, list):
            return [(str(name), list(inventory_groups.get(name) or [])) for name in spec]
        raise AnsibleError('groups must be a list of inventory group names or a mapping of '
                           'group name to host list, got %s' % type(spec).__name__)

    @staticmethod
    def _read_only(cache):
        """Make the cache plugin unable to change its store.

        A file cache plugin deletes an entry it cannot parse ("corrupt, so erasing") from its
        get(); the audit reads a cache that belongs to someone else and must leave the evidence
        in place, so delete, flush and set of this instance do nothing (the store is untouched;
        the corrupt host is reported unknown with the parse error).
        """
        plugin = getattr(cache, '__wrapped__', cache)
        refused = []

        def delete(key):
            refused.append(key)

        def flush():
            refused.append('*')

        def set_(key, value):
            raise AnsibleError('drift_audit reads the fact cache only; refused to write %s' % key)

        plugin.delete = delete
        plugin.flush = flush
        plugin.set = set_
        return refused

    def _open_cache(self, params):
        path = params['fact_cache']
        if not os.path.isdir(path):
            raise AnsibleError('fact_cache %s is not a directory (expected what '
                               'fact_caching_connection points at)' % path)
        try:
            # Through Ansible's own loader: it wraps the plugin with the schema-qualified keys
            # and the serialized payload of the running ansible-core, so the on-disk format
            # (e.g. 2.21's s1_<host> entries) is never guessed here.
            cache = cache_loader.get(params['fact_cache_plugin'], _uri=path,
                                     _prefix=params['fact_cache_prefix'], _timeout=0)
        except Exception as exc:
            raise AnsibleError('cannot open fact cache %s with %s: %s'
                               % (path, params['fact_cache_plugin'], exc))
        self._read_only(cache)
        return cache

    @staticmethod
    def _cache_get(cache, host, path):
        """(facts, None) or (None, reason): one host's entry, never raising, never changing it."""
        try:
            plugin = getattr(cache, '__wrapped__', cache)
            if isinstance(plugin, BaseFileCacheModule) and hasattr(cache, '_get_key') and hasattr(cache, '_decode'):
                # A file cache: load the entry the way the plugin does, without its get(), which
                # warns "corrupt, so erasing" and deletes the file on a parse error.
                filename = plugin._get_cache_file_name(cache._get_key(host))
                problem = ActionModule._cache_file_problem(filename)
                if problem:
                    return None, 'the fact cache entry cannot be read (left as it is): %s' % problem
                return cache._decode(plugin._load(filename)), None
            return cache.get(host), None
        except (IOError, OSError) as exc:
            if getattr(exc, 'errno', None) == errno.ENOENT:
                return None, 'no entry in the fact cache %s' % path
            return None, ('the fact cache entry cannot be read (left as it is): %s: %s'
                          % (type(exc).__name__, drift.stack_versions.clean_text(str(exc))))
        except KeyError as exc:
            if not exc.args:
                # The plugins' own "no such entry" (or an expired one).
                return None, 'no entry in the fact cache %s' % path
            return None, ('the fact cache entry cannot be read (left as it is): it lacks the key %s'
                          % drift.stack_versions.clean_text(str(exc)))
        except Exception as exc:  # any plugin, any corruption: this host only is unknown
            cause = exc.__cause__ or exc.__context__
            detail = '%s: %s' % (type(cause).__name__, cause) if cause is not None else str(exc)
            if not isinstance(exc, AnsibleError) or cause is None:
                detail = '%s: %s' % (type(exc).__name__, exc)
            return None, ('the fact cache entry cannot be read (left as it is): %s'
                          % drift.stack_versions.clean_text(detail))

    @staticmethod
    def _cache_file_problem(filename):
        """Why a file cache entry is not opened (a FIFO would block the open for ever, a device or a huge
        file would be read without end), or None; a missing entry is left to the plugin."""
        try:
            info = os.stat(filename)
        except OSError:
            return None
        if not stat.S_ISREG(info.st_mode):
            return '%s is %s, not a regular file' % (clip(filename, 4096), kind_of(info.st_mode))
        if info.st_size > CACHE_ENTRY_MAX_BYTES:
            return '%s is larger than %d bytes (%d bytes)' % (clip(filename, 4096), CACHE_ENTRY_MAX_BYTES, info.st_size)
        return None

    # ------------------------------------------------------------ the audit, step by step

    def _audit(self, params, task_vars, result):
        started = time.time()
        inventory_groups = task_vars.get('groups') or {}
        settings = self._settings(params)
        cache, cache_keys = self._cache(params)
        hosts, notes = self._hosts(params, list(inventory_groups.get('all') or []), cache, cache_keys)
        collected = self._collect(params, settings, hosts, set(inventory_groups.get('all') or []),
                                  task_vars.get('hostvars') or {}, cache, cache_keys)
        findings, stats, summary = self._compare(params, settings, hosts, collected, inventory_groups)
        summary['compare_seconds'] = round(time.time() - started, 3)
        notes.extend(self._role_default_notes(settings, collected['from_role_defaults']))
        summary['notes'] = notes
        for note in notes:
            display.warning('drift_audit: %s' % note)
        reports, report_error = self._reports(params, settings, hosts, summary, findings, stats,
                                              collected['from_role_defaults'])
        return self._result(result, params, summary, findings, reports, report_error, stats)

    def _settings(self, params):
        """Checked settings: severity, the component -> variable map, the consistent components,
        the explicit baseline and the pins the roles' defaults give."""
        for option in ('markdown_max_rows', 'findings_returned'):
            if params[option] < 0:
                # A negative limit would slice from the end (rows[:-3]): refused, never guessed.
                raise AnsibleError('%s=%s; accepted: a number of rows of 0 or more' % (option, quote(params[option])))
        baseline_vars = drift.DEFAULT_BASELINE_VARS if params['baseline_vars'] is None else params['baseline_vars']
        consistent = drift.DEFAULT_CONSISTENT if params['consistent'] is None else params['consistent']
        severity = self._severity(params)
        self._check(drift.check_components, list(baseline_vars), 'baseline_vars')
        for component, var in baseline_vars.items():
            if not isinstance(var, str) or not var.strip():
                raise AnsibleError('baseline_vars[%s]=%s; accepted: the name of a variable'
                                   % (component, quote(var)))
        self._check(drift.check_components, list(consistent), 'consistent')
        explicit = self._check(drift.check_baseline, params['baseline'], 'baseline')
        defaults = {}
        if params['role_defaults'] and baseline_vars:
            values = role_default_values()
            for component, var in baseline_vars.items():
                if var not in values or component in drift.BASELINE_INVENTORY_ONLY:
                    continue
                value, role = values[var]
                pin = self._check(drift.check_pin, value, '%s (default of role %s, the pin of %s)'
                                  % (var, role, component))
                if pin is not None:
                    defaults[component] = {'value': pin, 'variable': var, 'role': role}
        return {'severity': severity, 'baseline_vars': baseline_vars, 'consistent': consistent,
                'explicit': explicit, 'defaults': defaults}

    def _cache(self, params):
        if not params['fact_cache']:
            return None, ()
        cache = self._open_cache(params)
        return cache, cache.keys()

    @staticmethod
    def _hosts(params, inventory_hosts, cache, cache_keys):
        """The hosts to audit, in order, and notes on how they were chosen."""
        notes = []
        inventory_set = set(inventory_hosts)
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
        return hosts, notes

    def _baseline_of(self, host, hv, settings, from_role_defaults):
        """One host's pins and their origins: drift_audit_baseline first, then the role variables
        in its hostvars, then the roles' own defaults for variables the inventory does not set
        (counted in ``from_role_defaults``: component -> number of hosts; such a pin applies only
        where the component is installed)."""
        pins = {}
        origins = {}
        for component, var in settings['baseline_vars'].items():
            if hv is not None and var in hv:
                value = hv.get(var, template_containers=False) if isinstance(hv, _HostVarsView) else hv.get(var)
                pin = self._check(drift.check_pin, value, '%s of host %s (the pin of %s)'
                                  % (var, clip(str(host)), component))
                if pin is not None:
                    pins[component] = pin
            elif component in settings['defaults'] and component not in settings['explicit']:
                default = settings['defaults'][component]
                pins[component] = default['value']
                origins[component] = 'default of role %s: %s' % (default['role'], default['variable'])
                from_role_defaults[component] = from_role_defaults.get(component, 0) + 1
        pins.update(settings['explicit'])
        return pins, origins

    def _facts_of(self, host, hv, params, cache, cache_set):
        """(facts, reason): a host's facts from the explicit mapping, the cache or its hostvars."""
        explicit_facts = params['facts'] or {}
        if host in explicit_facts:
            return explicit_facts[host], None
        if cache is not None:
            if host not in cache_set:
                return None, 'no entry in the fact cache %s' % params['fact_cache']
            host_facts, why = self._cache_get(cache, host, params['fact_cache'])
            if why:
                return host_facts, why
            if isinstance(host_facts, dict) and 'gpu_stack' not in host_facts:
                return host_facts, 'the fact cache entry holds no gpu_stack facts (stack_facts never ran)'
            if host_facts is not None and not isinstance(host_facts, dict):
                return host_facts, ('the fact cache entry is a %s, not a mapping of facts'
                                    % type(host_facts).__name__)
            return host_facts, None
        if hv is not None:
            return hv.get('ansible_facts'), None
        return None, 'not in the inventory and no facts given'

    def _collect(self, params, settings, hosts, inventory_set, hostvars, cache, cache_keys):
        """Every host's pins, facts, raw versions, package family, or why it has none."""
        collected = {'facts': {}, 'raw': {}, 'families': {}, 'reasons': {}, 'baselines': {},
                     'origins': {}, 'from_role_defaults': {}, 'unknown': {}, 'swarm': {}}
        now = time.time()
        cache_set = set(cache_keys)
        want_hv = bool(settings['baseline_vars']) or cache is None or bool(params['status_var'])
        for host in hosts:
            hv = self._host_vars(hostvars, host) if host in inventory_set and want_hv else None
            pins, origins = self._baseline_of(host, hv, settings, collected['from_role_defaults'])
            collected['baselines'][host] = pins
            if origins:
                collected['origins'][host] = origins
            host_facts, reason = self._facts_of(host, hv, params, cache, cache_set)
            if reason:
                collected['reasons'][host] = reason
            stack, host_raw, family, why = self._stack_of(host_facts, now, params['max_fact_age'])
            if stack is not None:
                unknown = self._unknown_of(host_facts)
                if unknown:
                    collected['unknown'][host] = unknown
            if stack is None:
                if host not in collected['reasons']:
                    collected['reasons'][host] = (why or self._status_reason(hv, params['status_var'])
                                                  or 'no gpu_stack facts')
                continue
            collected['facts'][host] = stack
            details = host_facts.get('gpu_stack_details')
            if isinstance(details, dict) and 'swarm' in details:
                # Its shape is checked by the audit (a wrong one is an unknown finding of swarm alone).
                collected['swarm'][host] = details['swarm']
            if host_raw:
                collected['raw'][host] = host_raw
            if family:
                collected['families'][host] = family
        return collected

    def _host_vars(self, hostvars, host):
        """One host's variables: a view that templates only what can be a template when ``hostvars`` is
        Ansible's (its raw_get gives the untemplated variables), else the mapping's own entry."""
        raw_get = getattr(hostvars, 'raw_get', None)
        if raw_get is not None:
            raw = raw_get(host)
            if isinstance(raw, Mapping):
                return _HostVarsView(raw, self._templar)
        return hostvars[host]

    def _compare(self, params, settings, hosts, collected, inventory_groups):
        members = self._group_members(params['groups'], inventory_groups)
        findings, stats = drift.audit(
            hosts, collected['facts'], baselines=collected['baselines'], consistent=settings['consistent'],
            groups=drift.partition_hosts(hosts, members), severity=settings['severity'],
            ignore=params['ignore'], unknown_severity=params['unknown_severity'],
            unknown_reasons=collected['reasons'], raw=collected['raw'], families=collected['families'],
            pin_origins=collected['origins'], unknown_components=collected['unknown'], swarm=collected['swarm'])
        unknown = [h for h in hosts if h not in collected['facts']]
        return findings, stats, drift.summarize(hosts, findings, stats, params['fail_on'], unknown)

    @staticmethod
    def _role_default_notes(settings, from_role_defaults):
        """Pins that came from the roles' defaults are reported as such."""
        if not from_role_defaults:
            return []
        parts = []
        for component in sorted(from_role_defaults):
            default = settings['defaults'][component]
            parts.append('%s %s (%s, default of role %s; %d hosts)' % (
                component, default['value'], default['variable'], default['role'], from_role_defaults[component]))
        return ['pinned by role defaults where installed (the inventory sets no version): %s' % '; '.join(parts)]

    @staticmethod
    def _reports(params, settings, hosts, summary, findings, stats, from_role_defaults):
        """(paths written, error text or None)."""
        if not params['report_dir']:
            return {}, None
        generated = time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())
        used = {'explicit': settings['explicit'], 'from_vars': dict(settings['baseline_vars']),
                'from_role_defaults': dict((c, settings['defaults'][c]) for c in sorted(from_role_defaults))}
        try:
            return drift_reports.write_reports(
                params['report_dir'], hosts, summary, findings, stats,
                formats=params['report_formats'], baselines_used=used, generated_at=generated,
                max_rows=params['markdown_max_rows']), None
        except drift_reports.ReportError as exc:
            # The findings are not lost: they are in msg, and the task fails.
            return exc.written, drift.stack_versions.clean_text(
                'drift_audit: the reports were not written (%s); the findings follow' % exc)

    @staticmethod
    def _result(result, params, summary, findings, reports, report_error, stats=None):
        lines = drift.summary_text(summary, findings, stats=stats)
        if report_error:
            lines.insert(0, report_error)
        limit = params['findings_returned']
        brief = dict(summary)
        brief['unknown_hosts'] = summary['unknown_hosts'][:limit]
        result.update(
            changed=False,
            failed=summary['failed'] or report_error is not None,
            msg='\n'.join(lines),
            summary=brief,
            findings=findings[:limit],
            findings_truncated=len(findings) > limit,
            reports=reports,
        )
        if report_error:
            result['report_error'] = report_error
        return result

    @staticmethod
    def _stack_of(host_facts, now, max_age):
        """Return (gpu_stack, raw, family, reason) from a host's facts; (None, None, None,
        reason) when they cannot be audited."""
        if not isinstance(host_facts, dict):
            return None, None, None, None
        stack = host_facts.get('gpu_stack')
        if stack is None:
            return None, None, None, None
        details = host_facts.get('gpu_stack_details')
        details = details if isinstance(details, dict) else {}
        host_raw = details.get('raw')
        problem = drift.check_facts(stack, host_raw) or drift.check_unknown(details.get('unknown'))
        if problem:
            return None, None, None, 'facts of the wrong shape: %s' % problem
        problem = drift.fact_age_problem(details.get('collected_at'), now, max_age)
        if problem:
            return None, None, None, problem
        family = details.get('package_manager')
        return stack, host_raw or None, family if family in ('dpkg', 'rpm') else None, None

    @staticmethod
    def _unknown_of(host_facts):
        """component -> reason for the components stack_facts could not know (checked by _stack_of)."""
        details = host_facts.get('gpu_stack_details')
        unknown = details.get('unknown') if isinstance(details, dict) else None
        return dict(unknown) if isinstance(unknown, dict) else {}

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
