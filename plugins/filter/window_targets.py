# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter ``npuops.fleet.window_targets``: per vendor, the digest of the target version and
upgradePolicy of a window's hosts (the shared window's join rule, module_utils/window/shared.py)."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from ansible_collections.npuops.fleet.plugins.module_utils.window.shared import target_digest

DOCUMENTATION = r"""
name: window_targets
short_description: Per vendor, the digest of the target version and upgradePolicy of a window's hosts
description:
  - "For the hosts given, grouped by C(driver_upgrade_vendor) (default C(nvidia)): 16 hex digits of sha256 over
    C(driver_upgrade_target_version) and C(driver_upgrade_policy), one per distinct pair among its hosts,
    sorted. A process joins a window whose digests for each vendor hold its own (or are held by them)."
options:
  _input:
    description: "Inventory host names."
    type: list
    elements: str
    required: true
  hostvars:
    description: "The play's C(hostvars)."
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: The targets a window's process brings
  ansible.builtin.debug:
    msg: "{{ query('ansible.builtin.inventory_hostnames', 'all') | npuops.fleet.window_targets(hostvars) }}"
"""

RETURN = r"""
_value:
  description: "Vendor -> sorted list of 16 hex digits."
  type: dict
"""


def window_targets(hosts: Iterable[str], hostvars: Mapping[str, Any]) -> dict[str, list[str]]:
    per_vendor: dict[str, set[str]] = {}
    for host in hosts:
        hv = hostvars[host]
        vendor = str(hv.get("driver_upgrade_vendor") or "nvidia")
        target = str(hv.get("driver_upgrade_target_version") or "")
        per_vendor.setdefault(vendor, set()).add(target_digest(target, hv.get("driver_upgrade_policy") or {}))
    return {vendor: sorted(found) for vendor, found in per_vendor.items()}


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"window_targets": window_targets}
