# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""Which pods a node upgrade may evict or delete, and which block it (pure functions, pod = API dict).

The rules follow ``kubectl drain``: DaemonSet pods are never evicted (ignored), mirror (static) pods
are skipped, finished pods may always go, pods with ``emptyDir`` volumes block unless
``deleteEmptyDirData`` and pods without a controller block unless ``force``. On top of that: the
vendor's drain-skip label keeps a pod, ``podSelector`` narrows the drain, and the pod-deletion step
only touches accelerator pods. Every blocker class carries the policy option that overrides it, so a
failure can say what to change.

An accelerator pod is one that uses the device, however it got it (:func:`accelerator_rule`, first
match named): a container requests or limits a resource with the vendor's ``resource_prefixes``
(extended resources: ``nvidia.com/gpu``, ``nvidia.com/mig-*``); a ``spec.resourceClaims`` entry names
a ResourceClaim (directly, or made from a ResourceClaimTemplate: ``status.resourceClaimStatuses``)
whose ``status.allocation.devices.results[].driver`` is one of the vendor's ``dra_drivers`` (Dynamic
Resource Allocation, resource.k8s.io/v1); a ``hostPath`` volume under the vendor's
``device_node_prefixes`` (``/dev/nvidia*``, ``/dev/rbln*``; not all of ``/dev`` or ``/``); or one of the
vendor's ``runtime_class_names`` with the ``visible_devices_env`` variable set in a container's env to
a value other than ``none``/``void``/empty (``NVIDIA_VISIBLE_DEVICES=all``: how agents outside the
operator see every GPU). Claims are read by the caller (:func:`claims_to_read`) and passed in as
``claims``: "ns/claim" -> the ResourceClaim dict, or a string saying why it could not be read; a claim
that could not be read counts as allocated by the vendor (the safe side of a driver swap).

Pods that already have a ``metadata.deletionTimestamp`` are not evicted or deleted again, but they
are not ignored either: they may still hold the device until the kubelet has stopped them. Each plan
puts them in ``PodPlan.wait`` (drain: every terminating pod matched by ``drain.podSelector`` that is
neither a DaemonSet nor a mirror pod, drain-skip label or not; pod deletion: terminating accelerator
pods), and the step waits until
they are gone from the node like the pods it removes. :func:`terminating_pods` gives the same list
for any step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional, Union

from ansible_collections.npuops.fleet.plugins.module_utils.k8s import selectors

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


def extended_resource_rule(pod: Mapping[str, Any], profile: Mapping[str, Any]) -> Optional[str]:
    """"extended resource <name>" for the first resource a container or init container requests or
    limits with the vendor's ``resource_prefixes``; else None."""
    spec = pod.get("spec") or {}
    prefixes = tuple(profile["resource_prefixes"])
    for container in list(spec.get("containers") or []) + list(spec.get("initContainers") or []):
        resources = container.get("resources") or {}
        for kind in ("requests", "limits"):
            for name in sorted(resources.get(kind) or {}):
                if name.startswith(prefixes):
                    return "extended resource %s" % name
    return None


def requests_accelerator(pod: Mapping[str, Any], profile: Mapping[str, Any]) -> bool:
    """True when a container or init container requests or limits a resource with the vendor's prefixes."""
    return extended_resource_rule(pod, profile) is not None


# ResourceClaims as passed in by the caller: "ns/claim" -> the claim (dict), or why it could not be read.
Claims = Mapping[str, Union[Mapping[str, Any], str]]


def pod_claim_names(pod: Mapping[str, Any]) -> list[tuple[str, Optional[str]]]:
    """(entry name, ResourceClaim name) for each ``spec.resourceClaims`` entry: ``resourceClaimName``,
    or for a ``resourceClaimTemplateName`` the claim made for the pod as ``status.resourceClaimStatuses``
    names it (None while the claim is not made yet, or none is needed)."""
    made = {
        s.get("name"): s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    out = []
    for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
        name = entry.get("name") or ""
        out.append((name, entry.get("resourceClaimName") or made.get(name)))
    return out


def allocated_drivers(claim: Mapping[str, Any]) -> list[str]:
    """The drivers of a ResourceClaim's allocation (``status.allocation.devices.results[].driver``),
    sorted, each once; [] when not allocated."""
    results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
    return sorted({r.get("driver") for r in results if r.get("driver")})


def claims_to_read(pods: Iterable[Mapping[str, Any]], profile: Mapping[str, Any]) -> list[str]:
    """"ns/claim" of the ResourceClaims :func:`plan_pod_deletion` needs: those named by the pods it
    considers (not DaemonSet or mirror pods, Running or Pending) that no cheaper rule already matched
    (extended resources, hostPath, runtime class); none when the profile names no ``dra_drivers``.
    Sorted, each once: one GET each is the cost of the DRA rule."""
    if not profile.get("dra_drivers"):
        return []
    wanted = set()
    for pod in pods:
        if is_daemonset_pod(pod) or is_mirror_pod(pod) or not is_running_or_pending(pod):
            continue
        if _static_rule(pod, profile):
            continue
        ns = (pod.get("metadata") or {}).get("namespace", "")
        wanted |= {"%s/%s" % (ns, claim) for _entry, claim in pod_claim_names(pod) if claim}
    return sorted(wanted)


def dra_claim_rule(pod: Mapping[str, Any], profile: Mapping[str, Any], claims: Claims) -> Optional[str]:
    """"DRA claim <ns>/<claim> allocated by <driver>" for the first of the pod's ResourceClaims that one
    of the vendor's ``dra_drivers`` allocated, or "DRA claim <ns>/<claim> (could not be read: <why>;
    counted as the vendor's)" for one that ``claims`` has no dict for; else None. A claim not made yet or
    allocated by other drivers only does not count."""
    drivers = set(profile.get("dra_drivers") or [])
    if not drivers:
        return None
    ns = (pod.get("metadata") or {}).get("namespace", "")
    for _entry, name in pod_claim_names(pod):
        if not name:
            continue
        key = "%s/%s" % (ns, name)
        claim = claims.get(key, "not read")
        if not isinstance(claim, Mapping):
            return "DRA claim %s (could not be read: %s; counted as the vendor's)" % (key, claim)
        ours = [d for d in allocated_drivers(claim) if d in drivers]
        if ours:
            return "DRA claim %s allocated by %s" % (key, ", ".join(ours))
    return None


def device_hostpath_rule(pod: Mapping[str, Any], profile: Mapping[str, Any]) -> Optional[str]:
    """"hostPath <path>" for the first ``hostPath`` volume under one of the vendor's
    ``device_node_prefixes`` (``/dev/nvidia0``, ``/dev/nvidiactl``, ``/dev/nvidia-caps``); else None."""
    prefixes = tuple(profile.get("device_node_prefixes") or [])
    if not prefixes:
        return None
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        path = ((volume or {}).get("hostPath") or {}).get("path") or ""
        if path.startswith(prefixes):
            return "hostPath %s" % path
    return None


NO_DEVICES = ("", "none", "void")


def runtime_class_rule(pod: Mapping[str, Any], profile: Mapping[str, Any]) -> Optional[str]:
    """How the vendor's container runtime would give the pod devices without a device request; None
    when nothing in the pod spec says so:

    - ``<VAR>=<value>`` (``visible_devices_env``, a literal ``value`` in a container, init container or
      ephemeral container) other than none/void/empty, whatever the runtime class: where the vendor's
      runtime is the node's default (the GPU Operator without CDI, ``nvidia-ctk --set-as-default``) the
      variable alone gives the pod those devices - NVIDIA's own templates set ``void`` for that reason;
    - ``<VAR> from <source> (value unknown)``: the variable set through ``valueFrom``;
    - ``runtimeClassName <rc>`` (one of ``runtime_class_names``) without the variable in the spec: the
      image's own env decides, which the API cannot see (CUDA images set ``all``), so the pod counts.

    The rule name says which (``runtimeClassName <rc> with <VAR>=<value>`` when both). A pod that sets
    the variable to none/void/empty does not count by this rule."""
    spec = pod.get("spec") or {}
    env_name = profile.get("visible_devices_env")
    runtime = spec.get("runtimeClassName")
    vendor_runtime = bool(runtime) and runtime in (profile.get("runtime_class_names") or [])
    setting = None  # what the spec sets the variable to: a value, "from <source>", or "" for no device
    if env_name:
        containers = (list(spec.get("containers") or []) + list(spec.get("initContainers") or [])
                      + list(spec.get("ephemeralContainers") or []))
        for container in containers:
            for env in container.get("env") or []:
                if env.get("name") != env_name:
                    continue
                if env.get("value") is not None:
                    value = str(env["value"])
                    if value.strip().lower() not in NO_DEVICES:
                        setting = "=%s" % value
                        break
                    setting = setting or ""
                elif env.get("valueFrom"):
                    source = next(iter(env["valueFrom"]), "valueFrom")
                    setting = " from %s (value unknown)" % source
                    break
            if setting:
                break
    if setting:
        return ("runtimeClassName %s with %s%s" % (runtime, env_name, setting) if vendor_runtime
                else "%s%s" % (env_name, setting))
    if vendor_runtime and setting is None:
        return "runtimeClassName %s (%s from the image, not visible to the API)" % (runtime, env_name or "devices")
    return None


def _static_rule(pod: Mapping[str, Any], profile: Mapping[str, Any]) -> Optional[str]:
    return (
        extended_resource_rule(pod, profile)
        or device_hostpath_rule(pod, profile)
        or runtime_class_rule(pod, profile)
    )


def accelerator_rule(
    pod: Mapping[str, Any], profile: Mapping[str, Any], claims: Optional[Claims] = None
) -> Optional[str]:
    """Which rule makes ``pod`` an accelerator pod (see the module docstring), first match in the order
    extended resource, hostPath, runtime class, DRA claim; None when it uses no device of the vendor.
    Without ``claims`` the DRA rule counts every claim the pod names as unread (the safe side)."""
    return _static_rule(pod, profile) or dra_claim_rule(pod, profile, claims or {})


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


@dataclass
class PodPlan:
    """Outcome of classifying a node's pods for one step."""

    remove: list[str] = field(default_factory=list)  # "ns/name" to evict/delete
    wait: list[str] = field(default_factory=list)  # "ns/name" already terminating: wait until gone
    ignored: dict[str, list[str]] = field(default_factory=dict)  # reason -> pods left alone
    blockers: dict[str, list[str]] = field(default_factory=dict)  # blocker class -> pods
    step: str = "drain"
    # "ns/name" -> the rule that put it in the plan (pod deletion: accelerator_rule's text)
    rules: dict[str, str] = field(default_factory=dict)

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
        elif not selectors.matches(labels, drain.pod_selector):
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


def plan_pod_deletion(
    pods: Iterable[Mapping[str, Any]], deletion: Any, profile: Mapping[str, Any], claims: Optional[Claims] = None
) -> PodPlan:
    """Classify the node's accelerator pods for the pod-deletion step (``deletion`` = PodDeletion).

    Only Running/Pending non-DaemonSet, non-mirror pods that :func:`accelerator_rule` matches count
    (``claims``: the ResourceClaims of :func:`claims_to_read`); those with a deletionTimestamp go to
    ``wait``, the others to ``remove`` / ``blockers``; ``rules`` names the rule of each.
    """
    plan = PodPlan(step="pod_deletion")
    for pod in pods:
        if is_daemonset_pod(pod) or is_mirror_pod(pod) or not is_running_or_pending(pod):
            continue
        rule = accelerator_rule(pod, profile, claims)
        if rule is None:
            continue
        plan.rules[pod_ref(pod)] = rule
        if is_terminating(pod):
            plan.wait.append(pod_ref(pod))  # its containers may still hold the device
            continue
        _apply_storage_and_controller(plan, pod, deletion.force, deletion.delete_empty_dir_data)
    return plan


def accelerator_daemonset_pods(
    pods: Iterable[Mapping[str, Any]], profile: Mapping[str, Any], exclude: Iterable[str] = ()
) -> dict[str, str]:
    """"ns/name" -> rule for DaemonSet pods that use the device by a rule that needs no API read
    (extended resource, hostPath, runtime class) and are not operand pods nor in ``exclude`` (the DRA
    kubelet plugin's): no step removes them (their DaemonSet puts them back), so they may still hold
    the device when the module is unloaded. Monitoring agents outside the operator look like this."""
    skip = set(exclude)
    found = {}
    for pod in pods:
        if not is_daemonset_pod(pod) or is_operand_pod(pod, profile) or pod_ref(pod) in skip:
            continue
        if is_terminating(pod) or not is_running_or_pending(pod):
            continue
        rule = _static_rule(pod, profile)
        if rule:
            found[pod_ref(pod)] = rule
    return found


def pods_matching(pods: Iterable[Mapping[str, Any]], selector: str) -> list[str]:
    """Running/Pending pods matched by ``selector`` (the wait-for-jobs step)."""
    return [
        pod_ref(p)
        for p in pods
        if is_running_or_pending(p) and selectors.matches((p.get("metadata") or {}).get("labels"), selector)
    ]
