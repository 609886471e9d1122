# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter ``npuops.fleet.plan_rows`` of playbook maintenance_window.

Pure Python in plugins/plugin_utils/maintenance_window.py."""

from __future__ import annotations

from typing import Any

from ansible_collections.npuops.fleet.plugins.plugin_utils.maintenance_window import plan_rows

DOCUMENTATION = r"""
name: plan_rows
short_description: Per host what a maintenance window would do, for its plan
description:
  - "The C(hosts) of the plan (docs/maintenance-summary.schema.json, kind plan) from each host's
    C(driver_upgrade_result) and C(driver_upgrade_preflight); a host without a result is refused."
options:
  _input:
    description: "The target hosts."
    type: list
    elements: str
    required: true
  hostvars:
    description: "Host name to its variables."
    type: dict
    required: true
  workload_refusal:
    description: "The workload check's refusal (empty when none)."
    type: str
"""

EXAMPLES = r"""
- name: Plan each host
  ansible.builtin.set_fact:
    rows: "{{ targets | npuops.fleet.plan_rows(hostvars, '') }}"
"""

RETURN = r"""
_value:
  description: "One row per host, in the given order."
  type: list
  elements: dict
"""


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"plan_rows": plan_rows}
