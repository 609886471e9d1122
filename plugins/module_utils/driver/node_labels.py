# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""Driver, kernel and OS facts of a node, read from its labels (NFD + the vendor's discovery).

``node_driver_version`` is the driver version a node advertises (GFD / NPU feature discovery), or None.

Every reader raises :class:`LabelError` naming the node and the label key when a label is missing
or empty - never a value with a hole in it. ``stale_label_warnings`` compares the labels with
``node.status.nodeInfo`` (kubelet's view) and returns "stale labels" warnings.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Optional

from ansible_collections.npuops.fleet.plugins.module_utils.driver.os_tags import os_image_matches
from ansible_collections.npuops.fleet.plugins.module_utils.errors import FleetError

# Node Feature Discovery label keys (the same for every vendor).
KERNEL_LABEL = "feature.node.kubernetes.io/kernel-version.full"
OS_ID_LABEL = "feature.node.kubernetes.io/system-os_release.ID"
OS_VERSION_LABEL = "feature.node.kubernetes.io/system-os_release.VERSION_ID"
FACT_LABELS = {"kernel": KERNEL_LABEL, "os_id": OS_ID_LABEL, "os_version_id": OS_VERSION_LABEL}


class LabelError(ValueError, FleetError):
    """A label needed for a fact is missing or empty; ``key`` is the label key."""

    def __init__(self, node: str, key: str, why: str = "missing"):
        self.node = node
        self.key = key
        self.why = why
        super().__init__("node %s: label %s is %s" % (node or "<labels>", key, why))


def fact_labels(overrides: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """FACT_LABELS with per-key overrides (unknown keys are rejected)."""
    keys = dict(FACT_LABELS)
    for k, v in (overrides or {}).items():
        if k not in keys:
            raise ValueError("unknown fact label %r; known: %s" % (k, ", ".join(sorted(keys))))
        keys[k] = v
    return keys


def read_label(labels: Mapping[str, Any], key: str, node: str) -> str:
    """The stripped value of ``key``; LabelError when it is absent, empty or blank."""
    if key not in labels or labels[key] is None:
        raise LabelError(node, key, "missing")
    value = str(labels[key]).strip()
    if not value:
        raise LabelError(node, key, "empty")
    return value


def _version_from_set(labels: Mapping[str, Any], keys: Mapping[str, str], node: str) -> tuple[str, list[str]]:
    """Version from one label set: ``full`` when present, else major.minor[.rev]."""
    if keys.get("full") and labels.get(keys["full"]):
        return read_label(labels, keys["full"], node), [keys["full"]]
    parts, used = [], []
    for part in ("major", "minor", "rev", "patch"):
        key = keys.get(part)
        if not key:
            continue
        if part in ("rev", "patch") and key not in labels:
            # GFD omits .rev for two-part versions (e.g. 470.57); treat as absent.
            continue
        parts.append(read_label(labels, key, node))
        used.append(key)
    if not parts:
        raise LabelError(node, keys.get("full") or keys.get("major") or "<driver version label>")
    return ".".join(parts), used


def _has_any(labels: Mapping[str, Any], keys: Mapping[str, str]) -> bool:
    return any(k and k in labels for k in keys.values())


def read_driver_version(labels: Mapping[str, Any], profile: Mapping[str, Any], node: str) -> dict[str, Any]:
    """Driver version from the profile's labels: ``{version, branch, label_keys}``.

    The primary set (``driver_version_labels``) is used when any of its keys is present, else the
    alternative set (``driver_version_labels_alt``); when neither is present the LabelError names
    the primary key. ``branch`` is the major version (``550`` for ``550.90.07``).
    """
    primary = profile.get("driver_version_labels") or {}
    alt = profile.get("driver_version_labels_alt") or {}
    keys = primary
    if not _has_any(labels, primary) and alt and _has_any(labels, alt):
        keys = alt
    version, used = _version_from_set(labels, keys, node)
    if not re.match(r"^[0-9A-Za-z][0-9A-Za-z.+~_-]*$", version):
        raise LabelError(node, used[0], "not a version (%r)" % version)
    return {"version": version, "branch": driver_branch(version), "label_keys": used}


def driver_branch(version: str) -> str:
    """Branch of a driver version: the part before the first dot (550.90.07 -> 550)."""
    return str(version).strip().split(".", 1)[0]


def stale_label_warnings(
    node: str,
    labels: Mapping[str, Any],
    node_info: Optional[Mapping[str, Any]],
    keys: Optional[Mapping[str, str]] = None,
    os_tag_rules: Optional[Mapping[str, Any]] = None,
) -> list[str]:
    """'stale labels' warnings where labels disagree with nodeInfo.kernelVersion / osImage."""
    if not node_info:
        return []
    node = node or "<labels>"
    keys = keys or FACT_LABELS
    out = []
    kernel_label = str(labels.get(keys["kernel"]) or "").strip()
    kernel_info = str(node_info.get("kernelVersion") or node_info.get("kernel_version") or "").strip()
    if kernel_label and kernel_info and kernel_label != kernel_info:
        out.append(
            "node %s: stale labels: %s=%s but the kubelet reports kernelVersion %s"
            % (node, keys["kernel"], kernel_label, kernel_info)
        )
    os_id = str(labels.get(keys["os_id"]) or "").strip()
    os_ver = str(labels.get(keys["os_version_id"]) or "").strip()
    os_image = str(node_info.get("osImage") or node_info.get("os_image") or "").strip()
    if os_image_matches(os_id, os_ver, os_image, os_tag_rules) is False:
        out.append(
            "node %s: stale labels: %s=%s, %s=%s but the kubelet reports osImage %r"
            % (node, keys["os_id"], os_id, keys["os_version_id"], os_ver, os_image)
        )
    return out


def node_driver_version(profile: Mapping[str, Any], labels: Optional[Mapping[str, str]]) -> Optional[str]:
    """``550.90.07`` from the profile's driver-version labels (same rule as the audit:
    read_driver_version); None when the node does not advertise a usable version."""
    try:
        return read_driver_version(labels or {}, profile, "<node>")["version"]
    except LabelError:
        return None
