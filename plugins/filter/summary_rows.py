# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter ``npuops.fleet.summary_rows`` of playbook maintenance_window.

Pure Python in plugins/plugin_utils/maintenance_window.py."""

from __future__ import annotations

from typing import Any

from ansible_collections.npuops.fleet.plugins.plugin_utils.maintenance_window import summary_rows

DOCUMENTATION = r"""
name: summary_rows
short_description: Per host the record a maintenance window's summary shows
description:
  - "Each host's C(driver_upgrade_result); a host the preflight passed that never started is not-started with why the
    run stopped (its lost Lease, the workload refusal, the first failed host), one without a result is not-started
    too."
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
  lease_lost:
    description: "Why the run lost its Lease (null when it did not)."
    type: str
  workload_refusal:
    description: "The workload check's refusal (empty when none)."
    type: str
  window_stop:
    description: "Why the shared window stopped (another process spent the failure budget; empty when it did not):
      the reason of a host that did not start when this process has no reason of its own."
    type: str
"""

EXAMPLES = r"""
- name: The summary's rows
  ansible.builtin.set_fact:
    rows: "{{ targets | npuops.fleet.summary_rows(hostvars, none, '') }}"
"""

RETURN = r"""
_value:
  description: "One row per host, in the given order."
  type: list
  elements: dict
"""


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"summary_rows": summary_rows}
