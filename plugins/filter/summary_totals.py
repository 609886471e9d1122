# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter ``npuops.fleet.summary_totals`` of playbook maintenance_window.

Pure Python in plugins/plugin_utils/maintenance_window.py."""

from __future__ import annotations

from typing import Any

from ansible_collections.npuops.fleet.plugins.plugin_utils.maintenance_window import summary_totals

DOCUMENTATION = r"""
name: summary_totals
short_description: A maintenance window's result from its summary rows
description:
  - "The hosts not upgraded (failed or not started), the run's result (failed when there are any, or the run lost its
    Lease) and the count per status."
options:
  _input:
    description: "The summary's rows."
    type: list
    elements: dict
    required: true
  lease_lost:
    description: "Why the run lost its Lease (null when it did not)."
    type: str
"""

EXAMPLES = r"""
- name: Total the run
  ansible.builtin.debug:
    msg: "{{ rows | npuops.fleet.summary_totals }}"
"""

RETURN = r"""
_value:
  description: "C(not_upgraded) (host names), C(result) (ok or failed) and C(counts) (status -> hosts)."
  type: dict
"""


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"summary_totals": summary_totals}
