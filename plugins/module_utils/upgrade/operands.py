# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
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

The vendor's DRA kubelet plugin (a DaemonSet whose pods hold the driver, found by the profile's
``dra_kubelet_plugin_selector``) is one more operand: its DaemonSet must select nodes by a deploy label
(nodeSelector ``<prefix><name>: "true"``, e.g. the NVIDIA chart's ``kubeletPlugin.nodeSelector``), which
is then paused, restored and waited for like the others. One that selects by no deploy label cannot be
paused: :func:`unpausable_dra_plugins` names it, and prepare refuses before the cordon. No plugin on
the node: nothing to do.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ansible_collections.npuops.fleet.plugins.module_utils.k8s import selectors
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.eviction_rules import (
    controller_of,
    is_daemonset_pod,
    is_operand_pod,
    is_ready,
    is_terminating,
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


def _controller_name(pod: Mapping[str, Any]) -> str:
    """Name of the controller of a pod the callers already know is owned (operand / DRA DaemonSet pods)."""
    return (controller_of(pod) or {})["name"]


def operand_daemonsets(profile: Mapping[str, Any], pods: list[Mapping[str, Any]]) -> list[str]:
    """``ns/name`` of the DaemonSets whose operand pods are on the node."""
    found = set()
    for pod in pods:
        if is_operand_pod(pod, profile):
            found.add("%s/%s" % (pod["metadata"]["namespace"], _controller_name(pod)))
    return sorted(found)


def paused_operand_pods(profile: Mapping[str, Any], pods: list[Mapping[str, Any]], paused_keys: set) -> list[str]:
    """Operand pods still on the node whose nodeSelector uses a paused deploy label."""
    left = []
    for pod in pods:
        selector = (pod.get("spec") or {}).get("nodeSelector") or {}
        if is_operand_pod(pod, profile) and paused_keys.intersection(selector):
            left.append(pod_ref(pod))
    return sorted(left)


def missing_operands(daemonsets: list[str], pods: Sequence[Mapping[str, Any]]) -> list[str]:
    """Recorded operand DaemonSets without a Running and Ready pod on the node (validation)."""
    ready = set()
    for pod in pods:
        ref = controller_of(pod)
        if ref and ref.get("kind") == "DaemonSet" and is_ready(pod) and not pod["metadata"].get("deletionTimestamp"):
            ready.add("%s/%s" % (pod["metadata"]["namespace"], ref["name"]))
    return [ds for ds in daemonsets if ds not in ready]


def dra_plugin_pods(profile: Mapping[str, Any], pods: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The DaemonSet pods among ``pods`` matched by the profile's ``dra_kubelet_plugin_selector`` (the
    DRA driver's kubelet plugin); [] when the profile names none."""
    selector = profile.get("dra_kubelet_plugin_selector")
    if not selector:
        return []
    return [
        p for p in pods
        if is_daemonset_pod(p) and selectors.matches((p.get("metadata") or {}).get("labels"), selector)
    ]


def dra_plugin_daemonsets(profile: Mapping[str, Any], pods: list[Mapping[str, Any]]) -> list[str]:
    """``ns/name`` of the DaemonSets of the DRA kubelet plugin pods on the node, sorted."""
    return sorted({
        "%s/%s" % (p["metadata"]["namespace"], _controller_name(p)) for p in dra_plugin_pods(profile, pods)
    })


def unpausable_dra_plugins(profile: Mapping[str, Any], pods: list[Mapping[str, Any]]) -> list[str]:
    """"ns/pod (DaemonSet ns/name)" for each DRA kubelet plugin pod on the node (not terminating) whose
    nodeSelector has no deploy label that the pause changes (``…deploy.driver``, ``…deploy.operands``
    and the skip label are never paused): the operands' pause would leave it running, holding the driver."""
    out = []
    for p in dra_plugin_pods(profile, pods):
        selector = (p.get("spec") or {}).get("nodeSelector") or {}
        if is_terminating(p) or operand_label_keys(profile, selector):
            continue
        out.append("%s (DaemonSet %s/%s)" % (pod_ref(p), p["metadata"]["namespace"], _controller_name(p)))
    return sorted(out)
