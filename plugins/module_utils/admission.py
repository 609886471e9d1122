# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Admission of a node into an upgrade: ``maxUnavailable`` and ``maxParallelUpgrades`` across the
vendor's nodes (those with the presence label), so the limits hold across batches and across
concurrent runs. A node is unavailable when it is cordoned or not Ready."""

from __future__ import annotations

from typing import Any, Mapping, Optional

from ansible_collections.npuops.fleet.plugins.module_utils import k8s_wait
from ansible_collections.npuops.fleet.plugins.module_utils.node_record import node_ready
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade_policy import max_unavailable_count
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade_state_machine import IN_PROGRESS_STATES


def verdict(profile: Mapping[str, Any], policy: Any, node_name: str, nodes: list[Mapping[str, Any]]) -> Optional[str]:
    """None when ``node_name`` may start; otherwise the reason it must wait."""
    others = [n for n in nodes if n["metadata"]["name"] != node_name]
    me = [n for n in nodes if n["metadata"]["name"] == node_name]
    unavailable = sorted(
        n["metadata"]["name"] for n in others if (n.get("spec") or {}).get("unschedulable") or not node_ready(n)
    )
    self_unavailable = bool(me) and (bool((me[0].get("spec") or {}).get("unschedulable")) or not node_ready(me[0]))
    limit = max_unavailable_count(policy.max_unavailable, len(nodes) or 1)
    if len(unavailable) + (0 if self_unavailable else 1) > limit:
        return "maxUnavailable %s (= %d of %d %s nodes) reached: unavailable now: %s" % (
            policy.max_unavailable,
            limit,
            len(nodes),
            profile["name"],
            ", ".join(unavailable),
        )
    if policy.max_parallel_upgrades:
        state_label = profile["upgrade_state_label"]
        busy = sorted(
            n["metadata"]["name"]
            for n in others
            if ((n["metadata"].get("labels") or {}).get(state_label) in IN_PROGRESS_STATES)
        )
        if len(busy) >= policy.max_parallel_upgrades:
            return "maxParallelUpgrades %d reached: upgrading now: %s" % (policy.max_parallel_upgrades, ", ".join(busy))
    return None


def wait_admission(
    core: Any, profile: Mapping[str, Any], policy: Any, node_name: str, timeout: Optional[float]
) -> Optional[str]:
    """Wait (watch on the vendor's nodes) until admitted; returns None or the last reason after ``timeout``."""
    last: dict[str, Optional[str]] = {"why": None}

    def admitted(items: list[dict[str, Any]]) -> bool:
        last["why"] = verdict(profile, policy, node_name, items)
        return last["why"] is None

    result = k8s_wait.wait_for(core.list_node, admitted, timeout, label_selector="%s=true" % profile["presence_label"])
    return None if result.ok else last["why"]
