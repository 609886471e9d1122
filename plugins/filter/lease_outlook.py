# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter ``npuops.fleet.lease_outlook`` of playbook maintenance_window.

Pure Python in plugins/plugin_utils/maintenance_window.py."""

from __future__ import annotations

from typing import Any

from ansible_collections.npuops.fleet.plugins.plugin_utils.maintenance_window import lease_outlook

DOCUMENTATION = r"""
name: lease_outlook
short_description: What a maintenance window's Lease acquisition would answer
description:
  - "The plan's C(lease) from the check-mode result of M(npuops.fleet.npu_upgrade_lease) - free unless it failed; the
    holder, and of another run's valid Lease its expiry and the refusal."
options:
  _input:
    description: "The registered check-mode result."
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Would the window get its Lease
  ansible.builtin.debug:
    msg: "{{ lease_check | npuops.fleet.lease_outlook }}"
"""

RETURN = r"""
_value:
  description: "C(free), C(operation), C(held_by), C(expires) and C(message)."
  type: dict
"""


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"lease_outlook": lease_outlook}
