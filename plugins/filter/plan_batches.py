# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter ``npuops.fleet.plan_batches`` of playbook maintenance_window.

Pure Python in plugins/plugin_utils/maintenance_window.py."""

from __future__ import annotations

from typing import Any

from ansible_collections.npuops.fleet.plugins.plugin_utils.maintenance_window import plan_batches

DOCUMENTATION = r"""
name: plan_batches
short_description: The hosts with work in the order a maintenance window starts them
description:
  - "The canary alone, then batches of the width (rolling, or a width of 0 - one batch whose hosts start as lanes free
    up)."
options:
  _input:
    description: "The hosts in lane order."
    type: list
    elements: str
    required: true
  canary:
    description: "Hosts that run alone first."
    type: int
  width:
    description: "The batch size (0 = all)."
    type: int
  rollout_mode:
    description: "batches or rolling."
    type: str
"""

EXAMPLES = r"""
- name: Show the batches
  ansible.builtin.debug:
    msg: "{{ ['a', 'b', 'c'] | npuops.fleet.plan_batches(1, 1, 'batches') }}"  # [['a'], ['b'], ['c']]
"""

RETURN = r"""
_value:
  description: "The batches, each a list of host names."
  type: list
  elements: list
"""


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"plan_batches": plan_batches}
