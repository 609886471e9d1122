# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action of the host module npu_cdi_refresh: a lost host fails the task where the caller ignores unreachable
results (plugins/plugin_utils/host_action.py)."""

from __future__ import annotations

from ansible_collections.npuops.fleet.plugins.plugin_utils.host_action import HostModuleAction


class ActionModule(HostModuleAction):
    pass
