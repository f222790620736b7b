# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of gpucluster.core.checks (documentation: plugins/modules/checks.py).

The roles gather each group of input checks into one list of messages; this plugin fails with all of them or
passes on an empty list. It decides nothing else. Unlike ``assert`` with ``that: errors | length == 0`` and
``fail_msg: "{{ errors }}"``, the list is templated once, not twice (Ansible templates a task's failure
message even when the assertion passes), which halves what a passing check costs the controller.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

from collections.abc import Mapping

from ansible.plugins.action import ActionBase

PASSED = 'every check passed'


def outcome(errors):
    """(failed, msg) for the ``errors`` a task passed: a list (or tuple) of messages, or one message as a
    string; empty means every check passed. Anything else is the calling role's mistake, said as such."""
    if isinstance(errors, str):
        errors = [errors] if errors else []
    if isinstance(errors, Mapping) or not isinstance(errors, (list, tuple)):
        return True, ('gpucluster.core.checks: errors must be a list of messages (or one message), got %s'
                      % type(errors).__name__)
    if not errors:
        return False, PASSED
    return True, [message if isinstance(message, str) else str(message) for message in errors]


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False
    _VALID_ARGS = frozenset(('errors',))

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        if 'errors' not in self._task.args:
            result.update(failed=True, msg='gpucluster.core.checks: the errors option is required')
            return result
        failed, msg = outcome(self._task.args['errors'])
        result.update(changed=False, msg=msg)
        if failed:
            result['failed'] = True
        return result
