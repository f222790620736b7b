# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Documentation only: the action plugin of the same name runs on the controller.
from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
---
module: checks
short_description: Fail with every message of a gathered list of input checks, or pass when it is empty
version_added: 0.3.0
description:
  - Runs on the controller (action plugin); nothing on a managed node is read or written.
  - The roles gather each group of input checks into one list of messages, each naming the variable and what is
    accepted, so that a failing run lists every problem at once. This task fails with that list as its message,
    or passes when the list is empty.
  - Equivalent to M(ansible.builtin.assert) that the list is empty, with the list as its failure message, except
    that the list is templated once instead of twice (Ansible templates an assertion's failure message even when
    it passes).
author:
  - gpucluster.core maintainers (@gpucluster)
attributes:
  check_mode:
    description: Reads only the task's arguments; runs the same in check mode.
    support: full
  diff_mode:
    description: Nothing to show.
    support: none
  idempotent:
    description: Changes nothing.
    support: full
options:
  errors:
    description: The messages of the checks that failed (a list of strings, or one string); empty when every
      check passed.
    type: raw
    required: true
'''

EXAMPLES = r'''
- name: Check the inputs (every failing check is listed)
  gpucluster.core.checks:
    errors: "{{ __example_errors }}"
  vars:
    __example_errors: >-
      {{ ([] if example_port is integer and 0 < example_port < 65536
          else ['example_port = ' ~ (example_port | to_json) ~ ' is not accepted: a whole number from 1 to 65535.']) }}
'''

RETURN = r'''
msg:
  description: C(every check passed), or the list of messages when a check failed.
  returned: always
  type: raw
  sample: every check passed
'''
