# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter ``npuops.fleet.workload_changes`` of playbook maintenance_window.

Pure Python in plugins/plugin_utils/maintenance_window.py."""

from __future__ import annotations

from typing import Any

from ansible_collections.npuops.fleet.plugins.plugin_utils.maintenance_window import workload_changes

DOCUMENTATION = r"""
name: workload_changes
short_description: The planned change of each host the fleet preflight passed
description:
  - "Per host whose C(driver_upgrade_result) is preflight-ok with a node and a target - its Node to the target driver
    version, and to the kernel it boots when the run reboots it (C(driver_upgrade_kernel_release), or a newer boot
    kernel already installed) - the C(changes) of M(npuops.fleet.npu_workload_compat)."
options:
  _input:
    description: "The hosts."
    type: list
    elements: str
    required: true
  hostvars:
    description: "Host name to its variables."
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Say what the window would change
  ansible.builtin.debug:
    msg: "{{ ansible_play_hosts | npuops.fleet.workload_changes(hostvars) }}"
"""

RETURN = r"""
_value:
  description: "C(node), C(driver_version), C(vendor) and C(kernel_release) (null when the kernel stays) per host."
  type: list
  elements: dict
"""


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"workload_changes": workload_changes}
