# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""Cordon that remembers who cordoned (C15).

``cordon()`` records the node's ``spec.unschedulable`` from before the upgrade in the
``unschedulable-before`` annotation (only the first time: a resumed run keeps the original record)
and cordons in the same patch. ``restore()`` puts back exactly what was recorded: it uncordons only
when the record says the node was schedulable, so a node an admin had cordoned stays cordoned.
"""

from __future__ import annotations

from typing import Any, Mapping

from ansible_collections.npuops.fleet.plugins.module_utils.driver.vendor_profiles import annotation_key
from ansible_collections.npuops.fleet.plugins.module_utils.errors import FleetError
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import record as node_record


class CordonError(RuntimeError, FleetError):
    pass


def is_cordoned(node: Mapping[str, Any]) -> bool:
    return bool((node.get("spec") or {}).get("unschedulable"))


def cordoned_by_upgrade(profile: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """True when our record says the node was schedulable before the upgrade cordoned it."""
    return node_record.get_annotation(profile, node, node_record.UNSCHEDULABLE_BEFORE) == "false"


def cordon(core: Any, profile: Mapping[str, Any], node: Mapping[str, Any], check_mode: bool) -> dict[str, Any]:
    """Record prior schedulability (once) and cordon; returns the node after the change."""
    key = annotation_key(profile, node_record.UNSCHEDULABLE_BEFORE)
    body: dict[str, Any] = {}
    if key not in node_record.annotations_of(node):
        body["metadata"] = {"annotations": {key: "true" if is_cordoned(node) else "false"}}
    if not is_cordoned(node):
        body["spec"] = {"unschedulable": True}
    if not body or check_mode:
        return dict(node)
    updated = node_record.patch_node(core, node["metadata"]["name"], body)
    if not is_cordoned(updated):
        raise CordonError(
            "node %s: cordon was not applied (spec.unschedulable is still false)" % node["metadata"]["name"]
        )
    return updated


def restore(
    core: Any, profile: Mapping[str, Any], node: Mapping[str, Any], check_mode: bool
) -> tuple[dict[str, Any], bool]:
    """Put schedulability back as recorded and drop the record. Returns (node, uncordoned)."""
    key = annotation_key(profile, node_record.UNSCHEDULABLE_BEFORE)
    recorded = node_record.annotations_of(node).get(key)
    if recorded is None:
        return dict(node), False
    uncordon = recorded == "false" and is_cordoned(node)
    if check_mode:
        return dict(node), uncordon
    body: dict[str, Any] = {"metadata": {"annotations": {key: None}}}
    if uncordon:
        body["spec"] = {"unschedulable": None}
    updated = node_record.patch_node(core, node["metadata"]["name"], body)
    if uncordon and is_cordoned(updated):
        raise CordonError("node %s: uncordon was not applied" % node["metadata"]["name"])
    return updated, uncordon
