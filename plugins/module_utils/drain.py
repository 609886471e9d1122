# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Removing pods from a node: PDB preflight, evictions with PDB-refusal retry, deletions, and the
wait until the pods are really gone. Which pods may go is decided in ``eviction_rules.py``.

Evictions go through the Eviction API (policy/v1). A 429 answer is a PodDisruptionBudget refusal:
it is retried with backoff until the step's deadline, never turned into a delete (C13). When the
deadline passes, :class:`DrainError` names the PDBs that allow 0 disruptions and the pods still there.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Optional

from ansible_collections.npuops.fleet.plugins.module_utils import k8s_retry, k8s_wait
from ansible_collections.npuops.fleet.plugins.module_utils.eviction_rules import (
    matches_label_selector_object,
    pod_ref,
)

try:
    from kubernetes.client.rest import ApiException
except ImportError:  # pragma: no cover
    ApiException = Exception  # type: ignore[misc,assignment]


class DrainError(RuntimeError):
    def __init__(
        self,
        msg: str,
        removed: Optional[list[str]] = None,
        remaining: Optional[list[str]] = None,
        pdbs: Optional[list[str]] = None,
    ) -> None:
        super().__init__(msg)
        self.removed = removed or []
        self.remaining = remaining or []
        self.pdbs = pdbs or []


@dataclass
class RemoveResult:
    removed: list[str] = field(default_factory=list)


def list_node_pods(core: Any, node_name: str) -> list[dict[str, Any]]:
    data = k8s_wait.list_raw(core.list_pod_for_all_namespaces, field_selector="spec.nodeName=%s" % node_name)
    return data.get("items") or []


def describe_pdb(pdb: Mapping[str, Any]) -> str:
    spec, status = pdb.get("spec") or {}, pdb.get("status") or {}
    limit = (
        "minAvailable=%s" % spec["minAvailable"]
        if "minAvailable" in spec
        else "maxUnavailable=%s" % spec.get("maxUnavailable")
    )
    return "%s/%s (%s, currentHealthy=%s, desiredHealthy=%s, disruptionsAllowed=%s)" % (
        pdb["metadata"]["namespace"],
        pdb["metadata"]["name"],
        limit,
        status.get("currentHealthy"),
        status.get("desiredHealthy"),
        status.get("disruptionsAllowed", 0),
    )


def blocking_pdbs(policy_api: Any, pods: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every PDB that covers one of ``pods`` and now allows 0 disruptions (the C13 preflight).

    Returns [{"pdb": "ns/name", "detail": describe_pdb(), "pods": ["ns/pod", ...]}].
    """
    pods = list(pods)
    if not pods:
        return []
    data = k8s_wait.list_raw(policy_api.list_pod_disruption_budget_for_all_namespaces)
    found = []
    for pdb in data.get("items") or []:
        ns = pdb["metadata"]["namespace"]
        covered = [
            pod_ref(p)
            for p in pods
            if p["metadata"].get("namespace") == ns
            and matches_label_selector_object(p["metadata"].get("labels"), (pdb.get("spec") or {}).get("selector"))
        ]
        if covered and int((pdb.get("status") or {}).get("disruptionsAllowed") or 0) <= 0:
            found.append({"pdb": "%s/%s" % (ns, pdb["metadata"]["name"]), "detail": describe_pdb(pdb), "pods": covered})
    return found


def _split(ref: str) -> tuple[str, str]:
    ns, name = ref.split("/", 1)
    return ns, name


def evict(
    core: Any,
    pods: list[Mapping[str, Any]],
    deadline: Optional[float],
    on_refusal: Optional[Callable[[str, str], None]] = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> list[str]:
    """Evict ``pods`` (dicts); retry PDB refusals (429) with backoff until ``deadline``.

    Returns the refs whose eviction was accepted (or that were already gone). Raises DrainError
    with the refused pods and the server's last refusal message when the deadline passes.
    """
    pending = {pod_ref(p): p for p in pods}
    done: list[str] = []
    refusals: dict[str, str] = {}
    delays = k8s_retry.backoff_delays(first=1.0, cap=5.0)
    while pending:
        for ref in list(pending):
            ns, name = _split(ref)
            body = {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": name, "namespace": ns},
                # Precondition on uid: never evict a replacement pod that reuses the name.
                "deleteOptions": {"preconditions": {"uid": pending[ref]["metadata"].get("uid")}},
            }
            try:
                _evict_once(core, name, ns, body, deadline)
                done.append(ref)
                pending.pop(ref)
            except ApiException as exc:
                if exc.status in (404, 409):  # gone, or replaced (uid precondition failed)
                    done.append(ref)
                    pending.pop(ref)
                elif exc.status == 429:
                    refusals[ref] = _reason(exc)
                    if on_refusal:
                        on_refusal(ref, refusals[ref])
                else:
                    raise DrainError(
                        "eviction of pod %s failed: %s" % (ref, _reason(exc)), removed=done, remaining=sorted(pending)
                    )
        if not pending:
            break
        delay = next(delays)
        if deadline is not None and clock() + delay > deadline:
            raise DrainError(
                "evictions refused until the timeout: %s"
                % "; ".join("%s: %s" % (r, refusals.get(r, "?")) for r in sorted(pending)),
                removed=done,
                remaining=sorted(pending),
            )
        sleep(delay)
    return done


def _evict_once(core: Any, name: str, ns: str, body: Mapping[str, Any], deadline: Optional[float]) -> None:
    """One eviction, retrying only transport errors and 5xx (a 429 is a PDB refusal: the caller's)."""
    for delay in k8s_retry.backoff_delays():
        try:
            core.create_namespaced_pod_eviction(name, ns, body, _preload_content=False)
            return
        except Exception as exc:  # noqa: BLE001
            status = getattr(exc, "status", None)
            transient = k8s_retry.is_transient(exc) and status != 429
            if not transient or (deadline is not None and time.monotonic() + delay > deadline):
                raise
            time.sleep(delay)


def delete(core: Any, pods: list[Mapping[str, Any]], deadline: Optional[float]) -> list[str]:
    """Delete ``pods`` (the pod-deletion step: no PDB involved, as in the operators)."""
    done = []
    for pod in pods:
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        try:
            k8s_retry.call(
                core.delete_namespaced_pod,
                name,
                ns,
                body={"preconditions": {"uid": pod["metadata"].get("uid")}},
                deadline=deadline,
                _preload_content=False,
            )
        except ApiException as exc:
            if exc.status not in (404, 409):
                raise DrainError("deletion of pod %s failed: %s" % (pod_ref(pod), _reason(exc)), removed=done)
        done.append(pod_ref(pod))
    return done


def wait_gone(core: Any, node_name: str, uids: set[str], timeout: Optional[float]) -> list[str]:
    """Wait (watch) until no pod with one of ``uids`` is left on the node; returns the refs left."""
    if not uids:
        return []
    result = k8s_wait.wait_for(
        core.list_pod_for_all_namespaces,
        lambda items: not any(i["metadata"]["uid"] in uids for i in items),
        timeout,
        field_selector="spec.nodeName=%s" % node_name,
    )
    return sorted(pod_ref(i) for i in result.items if i["metadata"]["uid"] in uids)


def _reason(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if body:
        try:
            return json.loads(body).get("message") or str(body)
        except (ValueError, AttributeError):
            return str(body)
    return "%s %s" % (getattr(exc, "status", ""), getattr(exc, "reason", exc))
