#!/usr/bin/python
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: npu_record
short_description: Record one step's outcome in a host's upgrade record, refuse with the step's reason, write the record
version_added: 0.4.0
description:
  - Runs on the control node (an action); never reaches the host. The driver_upgrade role calls it where a
    step's outcome is recorded and, in the same task, judged - what a C(set_fact) followed by an
    C(assert) did in two task executions - and to close and write the per-host result.
  - Sets O(facts) as C(ansible.builtin.set_fact) sets them (host variables of this run, not cached facts).
  - With O(fail_msg) not empty, the task then fails with it. Ansible sets no facts of a failed task, so they
    are then only in the result's C(ansible_facts); the role's rescue takes the record from there, so a
    refusal still reports what the step recorded.
  - With O(write_path), writes the value of O(facts)[O(write_key)] there as indented JSON with a final
    newline, and each of O(files) with its content - in that order, each through a temporary file in its
    folder renamed over it (mode 0644), so a reader never sees half a file. Not in check mode, as
    C(ansible.builtin.copy) would not (a task with C(check_mode=false) writes).
  - The maintenance window writes its summary, plan and chat files with it (one task instead of a
    C(copy) or C(template) module call per file).
options:
  facts:
    description: The host variables to set, names as given.
    type: dict
    default: {}
  fail_msg:
    description: The step's refusal; empty when the step passed.
    type: str
    default: ""
  write_path:
    description:
      - A file on the control node to write O(facts)[O(write_key)] to; its folder must exist. Needs O(write_key).
    type: path
  write_key:
    description: The key of O(facts) whose value O(write_path) receives. Needs O(write_path).
    type: str
  copies:
    description:
      - More facts, each set to the value of a key of O(facts) (new name -> key), the very value that
        key gets - a private record published under a public name without templating it twice.
    type: dict
    default: {}
  files:
    description: Text files to write on the control node; their folders must exist.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: The file.
        type: path
        required: true
      content:
        description: Its whole content, as given.
        type: str
        required: true
attributes:
  check_mode:
    support: full
    description: Sets the facts and fails as outside check mode; writes nothing.
  diff_mode:
    support: none
    description: Nothing on the host is changed.
  action:
    support: full
    description: Runs on the control node only.
author:
  - npuops maintainers (@npuops)
"""

EXAMPLES = r"""
- name: Record the state after the upgrade and verify it
  npuops.fleet.npu_record:
    facts:
      _driver_upgrade_result: "{{ _driver_upgrade_result | combine({'new_version': after.loaded_version}) }}"
    fail_msg: >-
      {{ '' if after.loaded_version == target else 'loaded ' ~ after.loaded_version ~ ', expected ' ~ target }}

- name: Close and write the per-host result
  npuops.fleet.npu_record:
    facts:
      _driver_upgrade_result: >-
        {{ _driver_upgrade_result | combine({'finished': now(utc=true, fmt='%Y-%m-%dT%H:%M:%SZ')}) }}
    write_path: "{{ result_dir }}/{{ inventory_hostname }}.json"
    write_key: _driver_upgrade_result

- name: Write the summary twice
  npuops.fleet.npu_record:
    files:
      - {path: "{{ run_dir }}/summary.md", content: "{{ lookup('ansible.builtin.template', 'summary.md.j2') }}"}
      - {path: "{{ report_dir }}/latest.md", content: "{{ lookup('ansible.builtin.template', 'summary.md.j2') }}"}
"""

RETURN = r"""
ansible_facts:
  description: O(facts), as set (or, when the task failed, as they would have been set).
  returned: always
  type: dict
written:
  description: The files written, in order.
  returned: when files were written
  type: list
  elements: str
"""
