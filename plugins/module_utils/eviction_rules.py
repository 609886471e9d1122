# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which pods a node upgrade may evict or delete, and which block it (pure functions, pod = API dict).

The rules follow ``kubectl drain``: DaemonSet pods are never evicted (ignored), mirror (static) pods
are skipped, finished pods may always go, pods with ``emptyDir`` volumes block unless
``deleteEmptyDirData`` and pods without a controller block unless ``force``. On top of that: the
vendor's drain-skip label keeps a pod, ``podSelector`` narrows the drain, and the pod-deletion step
only touches accelerator pods (a container requests a resource with the vendor's prefixes).
Every blocker class carries the policy option that overrides it, so a failure can say what to change.

Pods that already have a ``metadata.deletionTimestamp`` are not evicted or deleted again, but they
are not ignored either: they may still hold the device until the kubelet has stopped them. Each plan
puts them in ``PodPlan.wait`` (drain: every terminating pod matched by ``drain.podSelector`` that is
neither a DaemonSet nor a mirror pod, drain-skip label or not; pod deletion: terminating accelerator
pods), and the step waits until
they are gone from the node like the pods it removes. :func:`terminating_pods` gives the same list
for any step.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from ansible_collections.npuops.fleet.plugins.module_utils.upgrade_policy import split_selector

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"

# Blocker class -> (drain option, pod-deletion option) that overrides it.
BLOCKER_EMPTYDIR = "pods with local storage (emptyDir)"
BLOCKER_NO_CONTROLLER = "pods without a controller"
OVERRIDES = {
    "drain": {BLOCKER_EMPTYDIR: "drain.deleteEmptyDirData", BLOCKER_NO_CONTROLLER: "drain.force"},
    "pod_deletion": {BLOCKER_EMPTYDIR: "podDeletion.deleteEmptyDirData", BLOCKER_NO_CONTROLLER: "podDeletion.force"},
}


def pod_ref(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return "%s/%s" % (meta.get("namespace", ""), meta.get("name", ""))


def controller_of(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref
    return None


def is_daemonset_pod(pod: Mapping[str, Any]) -> bool:
    ref = controller_of(pod)
    return bool(ref and ref.get("kind") == "DaemonSet")


def is_mirror_pod(pod: Mapping[str, Any]) -> bool:
    return MIRROR_ANNOTATION in ((pod.get("metadata") or {}).get("annotations") or {})


def is_finished(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def is_terminating(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def terminating_pods(pods: Iterable[Mapping[str, Any]], include_daemonsets: bool = False) -> list[str]:
    """Refs ("ns/name", in input order) of the pods with a ``metadata.deletionTimestamp``, mirror pods
    excluded (the API cannot delete them; the kubelet owns them), DaemonSet pods only when
    ``include_daemonsets`` (e.g. operand pods a paused DaemonSet is removing)."""
    return [
        pod_ref(p)
        for p in pods
        if is_terminating(p) and not is_mirror_pod(p) and (include_daemonsets or not is_daemonset_pod(p))
    ]


def uses_empty_dir(pod: Mapping[str, Any]) -> bool:
    return any("emptyDir" in (v or {}) for v in (pod.get("spec") or {}).get("volumes") or [])


def requests_accelerator(pod: Mapping[str, Any], profile: Mapping[str, Any]) -> bool:
    """True when a container or init container requests or limits a resource with the vendor's prefixes."""
    spec = pod.get("spec") or {}
    prefixes = tuple(profile["resource_prefixes"])
    for container in list(spec.get("containers") or []) + list(spec.get("initContainers") or []):
        resources = container.get("resources") or {}
        for kind in ("requests", "limits"):
            if any(name.startswith(prefixes) for name in (resources.get(kind) or {})):
                return True
    return False


def is_operand_pod(pod: Mapping[str, Any], profile: Mapping[str, Any]) -> bool:
    """An operand pod (device plugin, feature discovery, validator, ...) is a DaemonSet pod whose
    nodeSelector uses one of the vendor's deploy labels (the DaemonSet copies it into the pod)."""
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    return is_daemonset_pod(pod) and any(k.startswith(profile["deploy_label_prefix"]) for k in selector)


def is_running_or_pending(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Running", "Pending")


def is_ready(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


# --- label selectors (the subset kubectl accepts: =, ==, !=, in, notin, exists, !exists) ---
_SET_TERM = re.compile(r"^\s*([A-Za-z0-9./_-]+)\s+(in|notin)\s*\((.*)\)\s*$")
_EQ_TERM = re.compile(r"^\s*([A-Za-z0-9./_-]+)\s*(==|=|!=)\s*([A-Za-z0-9._-]*)\s*$")
_EXISTS_TERM = re.compile(r"^\s*(!?)\s*([A-Za-z0-9./_-]+)\s*$")


def matches_selector(labels: Mapping[str, str] | None, selector: str) -> bool:
    """Evaluate a label selector string against ``labels``; "" matches everything."""
    labels = labels or {}
    for term in split_selector(selector or ""):
        m = _SET_TERM.match(term)
        if m:
            values = {v.strip() for v in m.group(3).split(",") if v.strip()}
            present = m.group(1) in labels and labels[m.group(1)] in values
            if (m.group(2) == "in") != present:
                return False
            continue
        m = _EQ_TERM.match(term)
        if m:
            equal = labels.get(m.group(1)) == m.group(3)
            if (m.group(2) == "!=") == equal:
                return False
            continue
        m = _EXISTS_TERM.match(term)
        if m:
            if (m.group(1) == "!") == (m.group(2) in labels):
                return False
            continue
        raise ValueError("invalid label selector term %r" % term)
    return True


def matches_label_selector_object(labels: Mapping[str, str] | None, selector: Mapping[str, Any] | None) -> bool:
    """Evaluate a metav1.LabelSelector (matchLabels/matchExpressions). An empty selector matches all
    pods, as for a policy/v1 PDB; a missing one matches none."""
    if selector is None:
        return False
    labels = labels or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), set(expr.get("values") or [])
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


@dataclass
class PodPlan:
    """Outcome of classifying a node's pods for one step."""

    remove: list[str] = field(default_factory=list)  # "ns/name" to evict/delete
    wait: list[str] = field(default_factory=list)  # "ns/name" already terminating: wait until gone
    ignored: dict[str, list[str]] = field(default_factory=dict)  # reason -> pods left alone
    blockers: dict[str, list[str]] = field(default_factory=dict)  # blocker class -> pods
    step: str = "drain"

    def _add(self, bucket: dict[str, list[str]], reason: str, pod: Mapping[str, Any]) -> None:
        bucket.setdefault(reason, []).append(pod_ref(pod))

    def blocker_message(self) -> str:
        parts = []
        for cls, pods in sorted(self.blockers.items()):
            option = OVERRIDES[self.step].get(cls, "?")
            parts.append("%s: %s (set %s: true to remove them)" % (cls, ", ".join(sorted(pods)), option))
        return "; ".join(parts)


def _apply_storage_and_controller(plan: PodPlan, pod: Mapping[str, Any], force: bool, empty_dir_ok: bool) -> None:
    if is_finished(pod):
        plan.remove.append(pod_ref(pod))
        return
    blocked = False
    if uses_empty_dir(pod) and not empty_dir_ok:
        plan._add(plan.blockers, BLOCKER_EMPTYDIR, pod)
        blocked = True
    if controller_of(pod) is None and not force:
        plan._add(plan.blockers, BLOCKER_NO_CONTROLLER, pod)
        blocked = True
    if not blocked:
        plan.remove.append(pod_ref(pod))


def plan_drain(pods: Iterable[Mapping[str, Any]], drain: Any, drain_skip_label: str) -> PodPlan:
    """Classify the node's pods for a drain (``drain`` = upgrade_policy.Drain).

    In this order: DaemonSet and mirror pods and pods outside ``drain.podSelector`` -> ``ignored``;
    terminating pods -> ``wait`` (also when labelled with the drain-skip label); pods with the
    drain-skip label -> ``ignored``; the rest -> ``remove`` or ``blockers``.
    """
    plan = PodPlan(step="drain")
    for pod in pods:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if is_daemonset_pod(pod):
            plan._add(plan.ignored, "DaemonSet pods (never evicted)", pod)
        elif is_mirror_pod(pod):
            plan._add(plan.ignored, "mirror (static) pods", pod)
        elif not matches_selector(labels, drain.pod_selector):
            plan._add(plan.ignored, "not matched by drain.podSelector %r" % drain.pod_selector, pod)
        elif is_terminating(pod):
            # Nothing to evict, but it may still hold the device: the drain waits for it. Checked
            # before the drain-skip label, which keeps a pod from being evicted, not from leaving.
            plan.wait.append(pod_ref(pod))
        elif labels.get(drain_skip_label) == "true":
            plan._add(plan.ignored, "labelled %s=true" % drain_skip_label, pod)
        else:
            _apply_storage_and_controller(plan, pod, drain.force, drain.delete_empty_dir_data)
    return plan


def plan_pod_deletion(pods: Iterable[Mapping[str, Any]], deletion: Any, profile: Mapping[str, Any]) -> PodPlan:
    """Classify the node's accelerator pods for the pod-deletion step (``deletion`` = PodDeletion).

    Only Running/Pending non-DaemonSet, non-mirror pods requesting an accelerator count; those with
    a deletionTimestamp go to ``wait``, the others to ``remove`` / ``blockers``.
    """
    plan = PodPlan(step="pod_deletion")
    for pod in pods:
        if is_daemonset_pod(pod) or is_mirror_pod(pod):
            continue
        if not (is_running_or_pending(pod) and requests_accelerator(pod, profile)):
            continue
        if is_terminating(pod):
            plan.wait.append(pod_ref(pod))  # its containers may still hold the device
            continue
        _apply_storage_and_controller(plan, pod, deletion.force, deletion.delete_empty_dir_data)
    return plan


def pods_matching(pods: Iterable[Mapping[str, Any]], selector: str) -> list[str]:
    """Running/Pending pods matched by ``selector`` (the wait-for-jobs step)."""
    return [
        pod_ref(p)
        for p in pods
        if is_running_or_pending(p) and matches_selector((p.get("metadata") or {}).get("labels"), selector)
    ]
