# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pausing and restoring the vendor's operands on a node (device plugin, feature discovery,
metrics exporter, validator, ...) through their ``<prefix><operand>`` deploy labels, as the
operators' driver manager does.

Pause: ``true`` -> ``paused-for-driver-upgrade``, ``false`` unchanged, any other value X ->
``X_paused-for-driver-upgrade``; the values from before are recorded (JSON annotation) so that
restore puts back exactly those. A label found paused before any pause of ours (a controller died
before restoring it) is recorded as the value it stands for (:func:`deployed_value`), so restore
deploys the operand again, as the driver manager's restore does. The ``driver`` operand is not
paused (the host work replaces the driver itself), nor are the deploy skip labels
(``…deploy.operands``, ``…deploy.skip``).
"""

from __future__ import annotations

from typing import Any, Mapping

from ansible_collections.npuops.fleet.plugins.module_utils.eviction_rules import (
    controller_of,
    is_operand_pod,
    is_ready,
    pod_ref,
)

PAUSED = "paused-for-driver-upgrade"
NOT_PAUSED_OPERANDS = ("driver", "operands", "skip")


def paused_value(value: str) -> str:
    if value == "false" or value.endswith(PAUSED):
        return value
    if value == "true":
        return PAUSED
    return "%s_%s" % (value, PAUSED)


def deployed_value(value: str) -> str:
    """What a deploy label found paused stands for: ``paused-for-driver-upgrade`` -> ``true``,
    ``X_paused-for-driver-upgrade`` -> ``X``; any other value (``true``, ``false``, ...) unchanged.
    The NVIDIA driver manager restores paused labels the same way (k8s-driver-manager, maybeSetTrue)."""
    if value == PAUSED:
        return "true"
    if value.endswith("_" + PAUSED):
        return value[: -len("_" + PAUSED)]
    return value


def operand_label_keys(profile: Mapping[str, Any], labels: Mapping[str, str]) -> list[str]:
    prefix = profile["deploy_label_prefix"]
    skip = {prefix + op for op in NOT_PAUSED_OPERANDS}
    if profile.get("deploy_skip_label"):
        skip.add(profile["deploy_skip_label"])
    return sorted(k for k in labels if k.startswith(prefix) and k not in skip)


def pause_plan(profile: Mapping[str, Any], labels: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(values before, label changes) for pausing the node's operands, with no pause of ours recorded:
    a label found paused is recorded as :func:`deployed_value` (and needs no change)."""
    before = {k: deployed_value(labels[k]) for k in operand_label_keys(profile, labels)}
    changes = {k: paused_value(v) for k, v in before.items() if paused_value(v) != labels[k]}
    return before, changes


def restore_plan(labels: Mapping[str, str], before: Mapping[str, str]) -> dict[str, str]:
    """Label changes that put back the recorded values."""
    return {k: v for k, v in before.items() if labels.get(k) != v}


def operand_daemonsets(profile: Mapping[str, Any], pods: list[Mapping[str, Any]]) -> list[str]:
    """``ns/name`` of the DaemonSets whose operand pods are on the node."""
    found = set()
    for pod in pods:
        if is_operand_pod(pod, profile):
            found.add("%s/%s" % (pod["metadata"]["namespace"], controller_of(pod)["name"]))
    return sorted(found)


def paused_operand_pods(profile: Mapping[str, Any], pods: list[Mapping[str, Any]], paused_keys: set) -> list[str]:
    """Operand pods still on the node whose nodeSelector uses a paused deploy label."""
    left = []
    for pod in pods:
        selector = (pod.get("spec") or {}).get("nodeSelector") or {}
        if is_operand_pod(pod, profile) and paused_keys.intersection(selector):
            left.append(pod_ref(pod))
    return sorted(left)


def missing_operands(daemonsets: list[str], pods: list[Mapping[str, Any]]) -> list[str]:
    """Recorded operand DaemonSets without a Running and Ready pod on the node (validation)."""
    ready = set()
    for pod in pods:
        ref = controller_of(pod)
        if ref and ref.get("kind") == "DaemonSet" and is_ready(pod) and not pod["metadata"].get("deletionTimestamp"):
            ready.add("%s/%s" % (pod["metadata"]["namespace"], ref["name"]))
    return [ds for ds in daemonsets if ds not in ready]
