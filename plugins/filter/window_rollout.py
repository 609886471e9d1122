# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter ``npuops.fleet.window_rollout`` of playbook maintenance_window.

Pure Python in plugins/plugin_utils/maintenance_window.py."""

from __future__ import annotations

from typing import Any

from ansible_collections.npuops.fleet.plugins.plugin_utils.maintenance_window import rollout

DOCUMENTATION = r"""
name: window_rollout
short_description: The maintenance window's rollout after its fleet preflight
description:
  - "For the hosts still in the fleet preflight's play - the width (the smallest positive maxParallelUpgrades, 0 = all
    at once), the hosts with work in lane order (plugins/filter/rollout.py), the upgrade play's serial batches, the
    Lease TTL sized for the longest wait and the nodes an earlier run left unfinished."
options:
  _input:
    description: "The hosts (C(ansible_play_hosts))."
    type: list
    elements: str
    required: true
  hostvars:
    description: "Host name to its variables - C(driver_upgrade_result), C(driver_upgrade_preflight),
                 C(_mw_parallel_one)."
    type: dict
    required: true
  rolling:
    description: "The window runs rolling lanes (one batch of 100%)."
    type: bool
  canary:
    description: "Hosts that run alone first."
    type: int
  lease_ttl:
    description: "The smallest Lease TTL in seconds (maintenance_lease_ttl)."
    type: int
"""

EXAMPLES = r"""
- name: Size the rollout
  ansible.builtin.set_fact:
    rollout: "{{ ansible_play_hosts | npuops.fleet.window_rollout(hostvars, false, 0, 1800) }}"
"""

RETURN = r"""
_value:
  description: "C(parallel) (int), C(lanes) (host names), C(serial) (the play keyword's list), C(lease_ttl) (int) and
               C(found_unfinished) (host -> state)."
  type: dict
"""


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"window_rollout": rollout}
