# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter ``npuops.fleet.workload_record`` of playbook maintenance_window.

Pure Python in plugins/plugin_utils/maintenance_window.py."""

from __future__ import annotations

from typing import Any

from ansible_collections.npuops.fleet.plugins.plugin_utils.maintenance_window import workload_record

DOCUMENTATION = r"""
name: workload_record
short_description: The workload check's result as the window records it
description:
  - "The registered result of M(npuops.fleet.npu_workload_compat) as the summary's C(workload_compat) (null when the
    check was skipped) and the window's refusal (empty unless refuse mode refuses, or the check could not run in
    refuse mode)."
options:
  _input:
    description: "The registered result."
    type: dict
    required: true
  mode:
    description: "maintenance_workload_compat (refuse, warn or skip)."
    type: str
"""

EXAMPLES = r"""
- name: Record the workload check
  ansible.builtin.set_fact:
    compat_record: "{{ compat | npuops.fleet.workload_record('refuse') }}"
"""

RETURN = r"""
_value:
  description: "C(record) (dict or null) and C(refusal) (str)."
  type: dict
"""


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"workload_record": workload_record}
