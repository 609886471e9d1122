# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""When is a node's upgrade valid: the bounded waits of the finish phase (watches via k8s_wait).

``wait_rebooted``: Ready again with a bootID different from the one recorded when the reboot was
announced (a Ready status posted before the host went down does not count).
``wait_validated``: node Ready, its driver-version label the same driver as the target
(driver_version.same_driver_version), and a Running+Ready pod on the node for every operand DaemonSet
recorded before the pause (the validator included).
Each returns None when valid, otherwise the reason, for the upgrade-failed annotation and Event.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping, Optional

from ansible_collections.npuops.fleet.plugins.module_utils.driver.node_labels import node_driver_version
from ansible_collections.npuops.fleet.plugins.module_utils.driver.version import same_driver_version
from ansible_collections.npuops.fleet.plugins.module_utils.k8s import wait as k8s_wait
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import operands
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import record as node_record


def wait_rebooted(
    core: Any,
    name: str,
    boot_id_before: Optional[str],
    timeout: Optional[float],
    heartbeat: Optional[Callable[[], None]] = None,
) -> Optional[str]:
    """``heartbeat``: called while waiting (k8s_wait.wait_for)."""

    def rebooted(items: list[dict[str, Any]]) -> bool:
        return any(
            node_record.node_ready(i) and (not boot_id_before or node_record.boot_id(i) != boot_id_before)
            for i in items
        )

    res = k8s_wait.wait_for(
        core.list_node, rebooted, timeout, field_selector="metadata.name=%s" % name, heartbeat=heartbeat
    )
    if res.ok:
        return None
    now = res.items[0] if res.items else {}
    why = (
        "not Ready" if not node_record.node_ready(now) else "still reports bootID %s (no reboot seen)" % boot_id_before
    )
    return "node %s within %ss after the reboot" % (why, timeout)


def wait_validated(
    core: Any,
    profile: Mapping[str, Any],
    name: str,
    target: Optional[str],
    daemonsets: list[str],
    deadline: Optional[float],
    heartbeat: Optional[Callable[[], None]] = None,
) -> tuple[Optional[str], Optional[str]]:
    """(failure reason or None, driver version seen on the node); ``heartbeat``: called while waiting."""
    seen: dict[str, Any] = {"version": None, "why": None}

    def left() -> Optional[float]:
        return None if deadline is None else max(0.0, deadline - time.monotonic())

    def node_ok(items: list[dict[str, Any]]) -> bool:
        if not items:
            seen["why"] = "node not found"
            return False
        seen["version"] = node_driver_version(profile, node_record.labels(items[0]))
        if not node_record.node_ready(items[0]):
            seen["why"] = "node not Ready"
        elif target and not same_driver_version(seen["version"], target):
            seen["why"] = "driver label says %s, target is %s" % (seen["version"], target)
        else:
            seen["why"] = None
        return seen["why"] is None

    if not k8s_wait.wait_for(
        core.list_node, node_ok, left(), field_selector="metadata.name=%s" % name, heartbeat=heartbeat
    ).ok:
        return seen["why"], seen["version"]

    def operands_ok(items: list[dict[str, Any]]) -> bool:
        missing = operands.missing_operands(daemonsets, items)
        seen["why"] = "operand pods not Running and Ready: %s" % ", ".join(missing) if missing else None
        return not missing

    if (
        daemonsets
        and not k8s_wait.wait_for(
            core.list_pod_for_all_namespaces, operands_ok, left(), field_selector="spec.nodeName=%s" % name,
            heartbeat=heartbeat,
        ).ok
    ):
        return seen["why"], seen["version"]
    return None, seen["version"]


def devices_differ(recorded: Mapping[str, Any], now: Mapping[str, Any]) -> Optional[str]:
    """Why the host's devices ``now`` differ from the ``recorded`` baseline (None when they agree).
    Shapes: ``{"device_count": int, "pci_bus_ids": [str, ...]}``; PCI ids compare when both have them."""
    before_n, now_n = recorded.get("device_count"), now.get("device_count")
    if before_n is not None and now_n != before_n:
        return "host has %s devices, %s before the first upgrade attempt" % (now_n, before_n)
    before_ids = {str(i).lower() for i in recorded.get("pci_bus_ids") or []}
    now_ids = {str(i).lower() for i in now.get("pci_bus_ids") or []}
    if before_ids and now_ids and before_ids != now_ids:
        return "devices missing since the first upgrade attempt: %s" % ", ".join(sorted(before_ids - now_ids) or ["?"])
    return None
