# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""What the upgrade writes on the Node: the state label, the bookkeeping annotations and an Event per
transition (core/v1 Event, involvedObject = the Node, shown by ``kubectl describe node``).

Annotation keys (``annotation_key(profile, suffix)``, e.g. ``nvidia.com/gpu-driver-upgrade-<suffix>``):
``last-transition`` (JSON from/to/reason/time, kept), ``unschedulable-before`` (spec.unschedulable
before our cordon), ``operand-labels-before`` (JSON deploy labels before the pause),
``operand-daemonsets`` (JSON operand DaemonSets seen on the node), ``target-version``,
``boot-id-before`` (status.nodeInfo.bootID when the reboot was announced).
"""

from __future__ import annotations

import datetime
import json
import socket
from typing import Any, Mapping, Optional

from ansible_collections.npuops.fleet.plugins.module_utils.driver.vendor_profiles import annotation_key
from ansible_collections.npuops.fleet.plugins.module_utils.k8s import retry as k8s_retry

LAST_TRANSITION = "last-transition"
UNSCHEDULABLE_BEFORE = "unschedulable-before"
OPERAND_LABELS_BEFORE = "operand-labels-before"
OPERAND_DAEMONSETS = "operand-daemonsets"
TARGET_VERSION = "target-version"
BOOT_ID_BEFORE = "boot-id-before"
# Devices seen before the first attempt ({"device_count": N, "pci_bus_ids": [...]}): kept across
# retries after upgrade-failed, so a retry compares with the healthy host, not with the broken one.
DEVICES_BEFORE = "devices-before"
# Set when the node first reaches pod-restart-required (host work may start), cleared at upgrade-done:
# from then on an abort never uncordons the node nor drops its device baseline.
HOST_WORK_STARTED = "host-work-started"
BOOKKEEPING = (
    UNSCHEDULABLE_BEFORE,
    OPERAND_LABELS_BEFORE,
    OPERAND_DAEMONSETS,
    TARGET_VERSION,
    BOOT_ID_BEFORE,
    DEVICES_BEFORE,
    HOST_WORK_STARTED,
)
EVENT_NAMESPACE = "default"
COMPONENT = "npuops.fleet/npu_node_upgrade"


def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def annotations_of(node: Mapping[str, Any]) -> dict[str, str]:
    return dict((node.get("metadata") or {}).get("annotations") or {})


def labels(node: Mapping[str, Any]) -> dict[str, str]:
    return dict((node.get("metadata") or {}).get("labels") or {})


def get_annotation(profile: Mapping[str, Any], node: Mapping[str, Any], suffix: str) -> Optional[str]:
    return annotations_of(node).get(annotation_key(profile, suffix))


def get_json_annotation(profile: Mapping[str, Any], node: Mapping[str, Any], suffix: str) -> Any:
    raw = get_annotation(profile, node, suffix)
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


def has_bookkeeping(profile: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    anns = annotations_of(node)
    return any(annotation_key(profile, s) in anns for s in (UNSCHEDULABLE_BEFORE, OPERAND_LABELS_BEFORE))


def _pointer(*parts: str) -> str:
    return "/" + "/".join(p.replace("~", "~0").replace("/", "~1") for p in parts)


def transition_ops(
    node: Mapping[str, Any],
    state_label: str,
    frm: str,
    to: str,
    annotations: Mapping[str, Optional[str]],
    labels: Optional[Mapping[str, Optional[str]]] = None,
) -> list[dict[str, Any]]:
    """JSON patch for a state transition: ``test`` ops that the node's resourceVersion is still the one
    read (so two runs cannot both move it, including the first transition from no label) and that the
    state label still says ``frm``; then the label and annotation changes (None = remove)."""
    ops: list[dict[str, Any]] = []
    meta = node.get("metadata") or {}
    current_labels, current_anns = meta.get("labels"), meta.get("annotations")
    if meta.get("resourceVersion"):
        ops.append({"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]})
    if frm:
        ops.append({"op": "test", "path": _pointer("metadata", "labels", state_label), "value": frm})
    for section, current, changes in (
        ("labels", current_labels, dict(labels or {}, **{state_label: to})),
        ("annotations", current_anns, annotations),
    ):
        if current is None:
            values = {k: v for k, v in changes.items() if v is not None}
            if values:
                ops.append({"op": "add", "path": _pointer("metadata", section), "value": values})
            continue
        for key, value in changes.items():
            if value is None:
                if key in current:
                    ops.append({"op": "remove", "path": _pointer("metadata", section, key)})
            else:
                ops.append({"op": "add", "path": _pointer("metadata", section, key), "value": value})
    return ops


def patch_node(core: Any, name: str, body: Any) -> dict[str, Any]:
    """Patch the node (a dict = strategic merge patch, a list = JSON patch); returns the node as a dict."""
    resp = k8s_retry.call(core.patch_node, name, body, _preload_content=False)
    return json.loads(resp.data)


def read_node(core: Any, name: str) -> dict[str, Any]:
    """The one node reader: GET with the transient-error retry of :func:`k8s_retry.call`."""
    resp = k8s_retry.call(core.read_node, name, _preload_content=False)
    return json.loads(resp.data)


def boot_id(node: Mapping[str, Any]) -> str:
    return ((node.get("status") or {}).get("nodeInfo") or {}).get("bootID") or ""


def node_ready(node: Mapping[str, Any]) -> bool:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def create_event(core: Any, node: Mapping[str, Any], reason: str, message: str, warning: bool = False) -> Optional[str]:
    """Record an Event on the node; returns an error text instead of raising (events are best effort)."""
    meta = node.get("metadata") or {}
    stamp = now_iso()
    body = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": "%s." % meta.get("name"), "namespace": EVENT_NAMESPACE},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": meta.get("name"), "uid": meta.get("uid")},
        "reason": reason,
        "message": message[:1024],
        "type": "Warning" if warning else "Normal",
        "source": {"component": COMPONENT, "host": socket.gethostname()},
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
    try:
        k8s_retry.call(core.create_namespaced_event, EVENT_NAMESPACE, body, budget=10, _preload_content=False)
    except Exception as exc:  # noqa: BLE001 - an event must not fail the upgrade
        return "could not record event %s on node %s: %s" % (reason, meta.get("name"), exc)
    return None
