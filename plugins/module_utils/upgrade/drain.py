# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""Removing pods from a node: PDB preflight, evictions with PDB-refusal retry, deletions, and the
wait until the pods are really gone. Which pods may go is decided in ``eviction_rules.py``.

Evictions go through the Eviction API (policy/v1, ``POST .../pods/<name>/eviction``). Its answers
are sorted into three classes (:func:`classify_eviction_error`):

* done: 404 (the pod is gone) and 409 (the uid precondition failed: the name now belongs to a
  replacement pod), and a pod that already has a ``deletionTimestamp`` (nothing left to evict, the
  caller still waits for it);
* retried: 429 (a PodDisruptionBudget refusal, retried with backoff until the step's deadline and
  never turned into a delete, C13), transport errors (connection refused/reset, timeouts) and the
  transient 5xx answers 502, 503, 504 and 500 -- except the apiserver's deterministic 500 for a pod
  covered by more than one PDB (:data:`MULTIPLE_PDBS_MESSAGE`, pkg/registry/core/pod/storage/eviction.go);
* refused: everything else (403 from RBAC or an admission policy/webhook, 400, 401, 422, the
  multiple-PDB 500, ...). Retrying cannot change such an answer, so the step ends at once, also
  when the deadline is None (``timeoutSeconds: 0`` = wait forever).

A step that ends raises :class:`DrainError` with ``kind`` = :data:`KIND_REFUSED`,
:data:`KIND_TIMEOUT` (PDB refusals outlasted the deadline) or :data:`KIND_UNAVAILABLE` (transient
errors outlasted it). :func:`probe_evictions` asks the same API with a server-side dry run, and
:func:`multi_pdb_pods` finds pods covered by two PDBs from a PDB list alone, so check mode and
status can name structural blockers without any write.

Which PDB stops which pod is judged as the eviction subresource judges it (:func:`eviction_verdict`):
Pending, finished and terminating pods go without any PDB check (neither a PDB at 0 nor an overlap of
PDBs stops them), and an unready pod covered by one PDB may go although it allows 0 disruptions
(``unhealthyPodEvictionPolicy``).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Optional

from ansible_collections.npuops.fleet.plugins.module_utils.errors import FleetError
from ansible_collections.npuops.fleet.plugins.module_utils.k8s import retry as k8s_retry
from ansible_collections.npuops.fleet.plugins.module_utils.k8s import selectors
from ansible_collections.npuops.fleet.plugins.module_utils.k8s import wait as k8s_wait
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.eviction_rules import (
    is_terminating,
    pod_ref,
)

try:
    from kubernetes.client.rest import ApiException
except ImportError:  # pragma: no cover
    ApiException = Exception  # type: ignore[misc,assignment]

# The apiserver's answer (HTTP 500, reason InternalError) when a pod is covered by more than one PDB;
# it does not depend on time or load, so retrying it would only hang the drain.
MULTIPLE_PDBS_MESSAGE = (
    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
)
_MULTIPLE_PDBS_MARK = "more than one PodDisruptionBudget"
RETRYABLE_5XX = frozenset({500, 502, 503, 504})

# DrainError.kind values.
KIND_REFUSED = "refused"  # deterministic answer (403, 400, 422, multiple-PDB 500, ...): retrying cannot help
KIND_TIMEOUT = "timeout"  # PDB refusals (429) until the deadline
KIND_UNAVAILABLE = "unavailable"  # transport errors / transient 5xx until the deadline

# classify_eviction_error() results.
OUTCOME_DONE = "done"
OUTCOME_PDB = "pdb"
OUTCOME_RETRY = "retry"
OUTCOME_REFUSED = "refused"


class DrainError(RuntimeError, FleetError):
    """A removal step that cannot finish.

    ``removed``: refs ("ns/name") already evicted/deleted (or found gone) before the error;
    ``remaining``: refs not yet removed; ``pdbs``: "ns/name" of the PDBs involved, when known;
    ``kind``: :data:`KIND_REFUSED`, :data:`KIND_TIMEOUT` or :data:`KIND_UNAVAILABLE`;
    ``pod``: the ref whose answer ended the step (None for a timeout over several pods);
    ``status``: that answer's HTTP status (None for transport errors);
    ``server_message``: the server's ``message`` (or the transport error text);
    ``refusals``: ref -> last 429 message, for every pod a PDB refused.
    """

    def __init__(
        self,
        msg: str,
        removed: Optional[list[str]] = None,
        remaining: Optional[list[str]] = None,
        pdbs: Optional[list[str]] = None,
        kind: str = KIND_REFUSED,
        pod: Optional[str] = None,
        status: Optional[int] = None,
        server_message: str = "",
        refusals: Optional[dict[str, str]] = None,
    ) -> None:
        super().__init__(msg)
        self.removed = removed or []
        self.remaining = remaining or []
        self.pdbs = pdbs or []
        self.kind = kind
        self.pod = pod
        self.status = status
        self.server_message = server_message
        self.refusals = refusals or {}


@dataclass
class RemoveResult:
    removed: list[str] = field(default_factory=list)


def list_node_pods(core: Any, node_name: str, deadline: Optional[float] = None) -> list[dict[str, Any]]:
    """The pods bound to ``node_name`` (dicts); transient errors retried until ``deadline`` (monotonic
    seconds; None: the default retry budget)."""
    data = k8s_wait.list_raw(core.list_pod_for_all_namespaces, deadline=deadline,
                             field_selector="spec.nodeName=%s" % node_name)
    return data.get("items") or []


def describe_pdb(pdb: Mapping[str, Any]) -> str:
    spec, status = pdb.get("spec") or {}, pdb.get("status") or {}
    limit = (
        "minAvailable=%s" % spec["minAvailable"]
        if "minAvailable" in spec
        else "maxUnavailable=%s" % spec.get("maxUnavailable")
    )
    if spec.get("unhealthyPodEvictionPolicy"):
        limit += ", unhealthyPodEvictionPolicy=%s" % spec["unhealthyPodEvictionPolicy"]
    stale = ""
    generation = (pdb.get("metadata") or {}).get("generation")
    if int(status.get("observedGeneration") or 0) < int(generation or 0):
        # The apiserver refuses every eviction it judges by this PDB until the controller catches up.
        stale = ", status not yet observed for generation %s" % generation
    return "%s/%s (%s, currentHealthy=%s, desiredHealthy=%s, disruptionsAllowed=%s%s)" % (
        pdb["metadata"]["namespace"],
        pdb["metadata"]["name"],
        limit,
        status.get("currentHealthy"),
        status.get("desiredHealthy"),
        status.get("disruptionsAllowed", 0),
        stale,
    )


def _pdb_covers(pdb: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    # policy/v1: selector {} covers every pod of the namespace, a missing selector none (D13), whatever
    # status.expectedPods says.
    return pod["metadata"].get("namespace") == pdb["metadata"]["namespace"] and selectors.matches_object(
        pod["metadata"].get("labels"), (pdb.get("spec") or {}).get("selector")
    )


# --- How the eviction subresource judges PDBs (kube-apiserver pkg/registry/core/pod/storage/eviction.go) ---
# eviction_verdict() results.
VERDICT_EVICT = "evict"  # accepted: no PDB looked at, none covers the pod, or the one PDB lets it go
VERDICT_PDB = "pdb"  # 429: the one covering PDB allows no disruption now (retried until the timeout)
VERDICT_MULTIPLE = "multiple"  # 500: more than one PDB covers the pod (deterministic, never retried)

_PDB_FREE_PHASES = ("Pending", "Succeeded", "Failed")
ALWAYS_ALLOW = "AlwaysAllow"


def _ref(obj: Mapping[str, Any]) -> str:
    return "%s/%s" % (obj["metadata"]["namespace"], obj["metadata"]["name"])


def pdbs_apply(pod: Mapping[str, Any]) -> bool:
    """Whether the eviction subresource looks at PodDisruptionBudgets for ``pod`` at all.

    False for a pod in phase Pending, Succeeded or Failed or with a ``deletionTimestamp``: the
    apiserver deletes it at once, before it lists the PDBs, so neither a PDB at 0 nor the "more than
    one PodDisruptionBudget" 500 can stop it (canIgnorePDB in eviction.go).
    """
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    return status.get("phase") not in _PDB_FREE_PHASES and not meta.get("deletionTimestamp")


def _pod_ready(pod: Mapping[str, Any]) -> bool:
    # The apiserver's "healthy" is the PodReady condition alone, whatever the phase.
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def pdb_refuses(pod: Mapping[str, Any], pdb: Mapping[str, Any]) -> bool:
    """Whether ``pdb``, as the only PDB covering ``pod``, makes the eviction of ``pod`` fail now (429).

    In the apiserver's order: a pod the PDBs do not apply to (:func:`pdbs_apply`) goes. An unready
    pod (PodReady not True) goes under ``spec.unhealthyPodEvictionPolicy: AlwaysAllow``, and under
    IfHealthyBudget (also when unset) when ``status.currentHealthy >= status.desiredHealthy`` and
    ``desiredHealthy > 0`` (the budget is met without it). Everything else is refused while
    ``status.observedGeneration < metadata.generation`` (the controller has not judged the current
    spec yet) or ``status.disruptionsAllowed <= 0`` (the apiserver answers a negative value with 403;
    the controller never writes one). Coverage (namespace, selector) is the caller's.
    """
    if not pdbs_apply(pod):
        return False
    spec, status = pdb.get("spec") or {}, pdb.get("status") or {}
    if not _pod_ready(pod):
        if spec.get("unhealthyPodEvictionPolicy") == ALWAYS_ALLOW:
            return False
        desired = int(status.get("desiredHealthy") or 0)
        if desired > 0 and int(status.get("currentHealthy") or 0) >= desired:
            return False
    if int(status.get("observedGeneration") or 0) < int((pdb.get("metadata") or {}).get("generation") or 0):
        return True
    return int(status.get("disruptionsAllowed") or 0) <= 0


def eviction_verdict(pod: Mapping[str, Any], pdbs: Iterable[Mapping[str, Any]]) -> tuple[str, list[str]]:
    """What the eviction subresource answers for ``pod`` given every PDB of the cluster (``pdbs``).

    Returns (VERDICT_EVICT, []), (VERDICT_PDB, ["ns/pdb"]) or (VERDICT_MULTIPLE, sorted ["ns/pdb", ...]),
    as kube-apiserver's eviction subresource (pkg/registry/core/pod/storage/eviction.go) decides it:
    first :func:`pdbs_apply`, then the number of covering PDBs, then :func:`pdb_refuses`.
    Authorization, admission and transport errors are not judged here (:func:`probe_evictions`).
    """
    if not pdbs_apply(pod):
        return VERDICT_EVICT, []
    covering = [pdb for pdb in pdbs if _pdb_covers(pdb, pod)]
    if len(covering) > 1:
        return VERDICT_MULTIPLE, sorted(_ref(p) for p in covering)
    if covering and pdb_refuses(pod, covering[0]):
        return VERDICT_PDB, [_ref(covering[0])]
    return VERDICT_EVICT, []


def list_pdbs(policy_api: Any, deadline: Optional[float] = None) -> list[dict[str, Any]]:
    """Every PodDisruptionBudget of the cluster as dicts (one LIST); transient errors retried until
    ``deadline`` (monotonic seconds; None: the default retry budget)."""
    return k8s_wait.list_raw(policy_api.list_pod_disruption_budget_for_all_namespaces,
                             deadline=deadline).get("items") or []


def blocking_pdbs(policy_api: Any, pods: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every PDB that covers one of ``pods`` and refuses its eviction now (:func:`pdb_refuses`; the
    C13 preflight). One PDB list call.

    Returns [{"pdb": "ns/name", "detail": describe_pdb(), "pods": ["ns/pod", ...]}]. A Pending,
    finished or terminating pod, or an unready pod the PDB lets go, makes no PDB blocking. A pod covered
    by several PDBs (a structural refusal, :func:`multi_pdb_pods`) is judged against each of them as if it
    were the only one: what the apiserver answers once the overlap is gone.
    """
    pods = list(pods)
    if not pods:
        return []
    return blocking_from_items(list_pdbs(policy_api), pods)


def blocking_from_items(pdbs: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Pure form of :func:`blocking_pdbs` over PDB dicts already listed."""
    pods = list(pods)
    found = []
    for pdb in pdbs:
        refused = [pod_ref(p) for p in pods if _pdb_covers(pdb, p) and pdb_refuses(p, pdb)]
        if refused:
            found.append({"pdb": _ref(pdb), "detail": describe_pdb(pdb), "pods": refused})
    return found


def _sync_failed(pdb: Mapping[str, Any]) -> bool:
    """The disruption controller could not compute the budget (e.g. a pod owner without a scale
    subresource) and holds disruptionsAllowed at 0: condition DisruptionAllowed=False, SyncFailed."""
    return any(c.get("type") == "DisruptionAllowed" and c.get("reason") == "SyncFailed"
               for c in (pdb.get("status") or {}).get("conditions") or [])


def _as_ready(pod: Mapping[str, Any], pdb: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``pod`` Running and Ready, and ``pdb``'s status as the disruption controller would write it
    then (pkg/controller/disruption/disruption.go, updatePdbStatus): one more healthy pod when it was
    not counted healthy yet, so disruptionsAllowed = max(0, currentHealthy - desiredHealthy) - but 0
    while the controller counts no expected pod (status.expectedPods <= 0: bare pods under
    maxUnavailable or a percentage) or could not sync at all (SyncFailed)."""
    started = dict(pod, status=dict(pod.get("status") or {}, phase="Running",
                                    conditions=[{"type": "Ready", "status": "True"}]))
    status = dict(pdb.get("status") or {})
    current = int(status.get("currentHealthy") or 0) + (0 if _pod_ready(pod) else 1)
    expected = status.get("expectedPods")
    stuck = _sync_failed(pdb) or (expected is not None and int(expected) <= 0)
    allowed = 0 if stuck else max(0, current - int(status.get("desiredHealthy") or 0))
    status.update(currentHealthy=current, disruptionsAllowed=allowed)
    return started, dict(pdb, status=status)


def pdbs_at_risk(pdbs: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """PDBs that let a pod go now only because it has not started or is not Ready yet, and would refuse
    its eviction (429, or the 500 of two PDBs) once it is Ready - as it may be by the time the drain
    reaches it, after the cordon. A warning for the preflight and the plan, not a refusal: a pod stuck
    Pending or unready (a broken driver keeps GPU pods in ContainerCreating) does go at the drain.

    Only Pending pods and Running pods that are not Ready are judged (finished and terminating pods
    never start again; a Running, Ready pod is judged as it is by :func:`blocking_pdbs`), and only
    those the apiserver would evict now; the projection is :func:`_as_ready`. Returns [{"pdb":
    "ns/name", "detail": describe_pdb() + why, "pods": ["ns/pod", ...]}] (two PDBs over one pod: one
    entry per PDB)."""
    pdbs = list(pdbs)
    found: dict[str, dict[str, Any]] = {}
    for pod in pods:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        phase = status.get("phase")
        if meta.get("deletionTimestamp") or phase not in ("Pending", "Running") or (
                phase == "Running" and _pod_ready(pod)):
            continue
        if eviction_verdict(pod, pdbs)[0] != VERDICT_EVICT:
            continue  # refused now already: blocking_pdbs / multi_pdb_pods name it
        covering = [pdb for pdb in pdbs if _pdb_covers(pdb, pod)]
        if len(covering) > 1:
            risky = [(pdb, "covered by %d PodDisruptionBudgets: refused (500) once it starts" % len(covering))
                     for pdb in covering]
        else:
            risky = []
            for pdb in covering:
                if not pdb_refuses(*_as_ready(pod, pdb)):
                    continue
                generation = int((pdb.get("metadata") or {}).get("generation") or 0)
                if int((pdb.get("status") or {}).get("observedGeneration") or 0) < generation:
                    why = "refuses its eviction once it is Ready while its status is not yet observed"
                else:
                    why = "refuses its eviction once it is Ready (disruptionsAllowed would stay 0)"
                risky.append((pdb, why))
        for pdb, why in risky:
            entry = found.setdefault(_ref(pdb), {"pdb": _ref(pdb), "detail": "%s: %s" % (describe_pdb(pdb), why),
                                                 "pods": []})
            entry["pods"].append(pod_ref(pod))
    return [found[k] for k in sorted(found)]


def pdbs_covering(policy_api: Any, pods: Iterable[Mapping[str, Any]]) -> dict[str, list[str]]:
    """For each of ``pods`` covered by at least one PDB: "ns/pod" -> sorted ["ns/pdb", ...] (one list call).

    Coverage only (namespace and selector): whether the apiserver looks at these PDBs for the pod is
    :func:`pdbs_apply`'s.
    """
    pods = list(pods)
    if not pods:
        return {}
    return covering_from_items(list_pdbs(policy_api), pods)


def covering_from_items(pdbs: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]) -> dict[str, list[str]]:
    """Pure form of :func:`pdbs_covering` over PDB dicts already listed."""
    pdbs = list(pdbs)
    out: dict[str, list[str]] = {}
    for pod in pods:
        names = sorted(_ref(pdb) for pdb in pdbs if _pdb_covers(pdb, pod))
        if names:
            out[pod_ref(pod)] = names
    return out


def multiple_pdb_reason(pdbs: list[str]) -> str:
    return "covered by %d PodDisruptionBudgets (%s): the eviction API refuses such pods" % (len(pdbs), ", ".join(pdbs))


def is_multiple_pdbs_answer(message: str) -> bool:
    """Whether ``message`` (the server's, or a refusal text that quotes it) is the apiserver's answer for a
    pod covered by more than one PDB (:data:`MULTIPLE_PDBS_MESSAGE`), which names no PDB."""
    return _MULTIPLE_PDBS_MARK in message


def covering_note(ref: str, pdbs: Optional[list[str]]) -> str:
    """The PDBs covering the pod ``ref``, for a message that quotes the multiple-PDB 500 (which names none):
    "PodDisruptionBudgets covering ns/pod: ns/a, ns/b"; ``pdbs`` from :func:`covering_from_items`, None
    when they could not be read."""
    names = "(could not be read)" if pdbs is None else ", ".join(pdbs) or "none found now"
    return "PodDisruptionBudgets covering %s: %s" % (ref, names)


def multi_pdb_pods(policy_api: Any, pods: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Pods the Eviction API will refuse because more than one PDB covers them, found without any write
    (:func:`eviction_verdict` = VERDICT_MULTIPLE; a Pending, finished or terminating pod is deleted
    before the apiserver counts PDBs, so it is never named).

    Returns {"ns/pod": "covered by 2 PodDisruptionBudgets (ns/a, ns/b): the eviction API refuses such
    pods"} -- the same shape as :func:`probe_evictions`, so the two can be merged.
    """
    pods = [p for p in pods if pdbs_apply(p)]
    if not pods:
        return {}
    items = list_pdbs(policy_api)
    out: dict[str, str] = {}
    for pod in pods:
        verdict, names = eviction_verdict(pod, items)
        if verdict == VERDICT_MULTIPLE:
            out[pod_ref(pod)] = multiple_pdb_reason(names)
    return out


def _split(ref: str) -> tuple[str, str]:
    ns, name = ref.split("/", 1)
    return ns, name


def _reason(exc: Any) -> str:
    """The server's ``message`` from a Status body, else the body, else "<status> <reason>"."""
    body = getattr(exc, "body", None)
    if body:
        if isinstance(body, bytes):
            body = body.decode("utf-8", "replace")
        try:
            return json.loads(body).get("message") or str(body)
        except (ValueError, AttributeError):
            return str(body)
    status = getattr(exc, "status", None)
    if status is None:
        return "%s: %s" % (type(exc).__name__, exc)
    return "%s %s" % (status, getattr(exc, "reason", exc))


def classify_eviction_error(exc: BaseException) -> str:
    """Sort an error raised by an eviction call into OUTCOME_DONE / _PDB / _RETRY / _REFUSED.

    Only API answers (ApiException with a status) and transport errors are classified; anything
    else is OUTCOME_REFUSED too, but :func:`evict` re-raises such programming errors unchanged.
    """
    status = getattr(exc, "status", None)
    if isinstance(exc, ApiException) and status:
        if status == 404:
            return OUTCOME_DONE
        if status == 409:
            # The uid precondition failed: the name now belongs to a replacement pod. Any other 409
            # (the apiserver ran out of retries on a PDB update conflict) says nothing was evicted.
            return OUTCOME_DONE if "precondition" in _reason(exc).lower() else OUTCOME_RETRY
        if status == 429:
            return OUTCOME_PDB
        if status == 500 and _MULTIPLE_PDBS_MARK in _reason(exc):
            return OUTCOME_REFUSED
        return OUTCOME_RETRY if status in RETRYABLE_5XX else OUTCOME_REFUSED
    # Status 0 (the client's own SSL/transport failure) and urllib3/socket errors.
    return OUTCOME_RETRY if k8s_retry.is_transient(exc) else OUTCOME_REFUSED


def _eviction_body(pod: Mapping[str, Any]) -> dict[str, Any]:
    meta = pod["metadata"]
    return {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
        # Precondition on uid: never evict a replacement pod that reuses the name.
        "deleteOptions": {"preconditions": {"uid": meta.get("uid")}},
    }


def evict(
    core: Any,
    pods: list[Mapping[str, Any]],
    deadline: Optional[float],
    on_refusal: Optional[Callable[[str, str], None]] = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = k8s_wait.pause,
) -> list[str]:
    """Evict ``pods`` (pod dicts); retry PDB refusals (429) with backoff until ``deadline``.

    ``deadline``: ``clock()`` value (monotonic seconds) after which no retry starts; None = no limit.
    ``on_refusal(ref, message)`` is called for each 429. Returns the refs that need no further
    eviction: accepted, already gone (404), replaced (409) or already terminating (no call made).
    The caller waits for all of them to leave the node (:func:`wait_gone` with their uids).

    Raises DrainError (``removed`` = refs done so far, ``remaining`` = the others) with
    ``kind=KIND_REFUSED`` at the first deterministic refusal (after exactly one call for that pod),
    ``kind=KIND_TIMEOUT`` when PDB refusals outlast the deadline and ``kind=KIND_UNAVAILABLE`` when
    transport errors / transient 5xx do.
    """
    pending: dict[str, Mapping[str, Any]] = {}
    done: list[str] = []
    for pod in pods:
        # Already being deleted: an eviction would only delete it again (the apiserver skips the PDB
        # check for such pods), so there is nothing to evict; the caller's wait covers it.
        if is_terminating(pod):
            done.append(pod_ref(pod))
        else:
            pending[pod_ref(pod)] = pod
    refusals: dict[str, str] = {}

    def one_round() -> Optional[DrainError]:
        """One eviction call per pending pod; raises _StillRefused while PDBs refuse some (retried by
        k8s_retry.call), returns the DrainError that ends the drain (not raised: it is no retry's)."""
        for ref in list(pending):
            ns, name = _split(ref)
            try:
                _evict_once(core, name, ns, _eviction_body(pending[ref]), deadline, clock=clock, sleep=sleep)
            except Exception as exc:  # noqa: BLE001 - classified below
                outcome = classify_eviction_error(exc)
                if not isinstance(exc, ApiException) and outcome == OUTCOME_REFUSED:
                    raise  # not an API answer nor a transport error: a bug, keep its traceback
                if outcome == OUTCOME_PDB:
                    refusals[ref] = _reason(exc)
                    if on_refusal:
                        on_refusal(ref, refusals[ref])
                    continue
                if outcome != OUTCOME_DONE:
                    # RETRY here means _evict_once gave up at the deadline.
                    kind = KIND_UNAVAILABLE if outcome == OUTCOME_RETRY else KIND_REFUSED
                    message = _reason(exc)
                    status = getattr(exc, "status", None) or None
                    failure = DrainError(
                        "eviction of pod %s %s: %s%s"
                        % (
                            ref,
                            "refused" if kind == KIND_REFUSED else "failed until the timeout",
                            "HTTP %s: " % status if status else "",
                            message,
                        ),
                        removed=done,
                        remaining=sorted(pending),
                        kind=kind,
                        pod=ref,
                        status=status,
                        server_message=message,
                        refusals=refusals,
                    )
                    failure.__context__ = exc  # raised by the caller, outside this handler
                    return failure
            done.append(ref)
            pending.pop(ref)
        if pending:
            raise _StillRefused()
        return None

    try:
        # PDB refusals are retried with a 1-5 s backoff; no round starts whose pause ends past the deadline.
        failure = k8s_retry.call(
            one_round, budget=None, deadline=deadline, sleep=sleep, clock=clock, first=1.0, cap=5.0,
            classify=lambda exc: isinstance(exc, _StillRefused),
        )
    except _StillRefused:
        raise DrainError(
            "evictions refused until the timeout: %s"
            % "; ".join("%s: %s" % (r, refusals.get(r, "?")) for r in sorted(pending)),
            removed=done,
            remaining=sorted(pending),
            kind=KIND_TIMEOUT,
            pod=sorted(pending)[0] if len(pending) == 1 else None,
            status=429,
            server_message=refusals.get(sorted(pending)[0], ""),
            refusals=refusals,
        ) from None
    if failure is not None:
        raise failure
    return done


class _StillRefused(Exception):
    """Some evictions of a round were refused by a PodDisruptionBudget (429): try another round."""


def _evict_once(
    core: Any,
    name: str,
    ns: str,
    body: Mapping[str, Any],
    deadline: Optional[float],
    dry_run: bool = False,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = k8s_wait.pause,
    min_budget: float = k8s_retry.DEFAULT_BUDGET,
) -> None:
    """One eviction call; retries only OUTCOME_RETRY errors (transport, transient 5xx) -- and the
    401/403 of an apiserver coming back from an outage (:class:`k8s_retry.Attempts`) -- until
    ``deadline`` or ``min_budget`` seconds from now, whichever is later (``deadline`` None =
    forever): an API server restart near the end of the step does not end it. Everything else --
    429 included, it is the caller's -- is raised.

    An eviction whose answer was lost is safe to send again: the pod is then terminating (the
    apiserver accepts the repeat without a PDB check), gone (404) or replaced (409 on the uid
    precondition), all OUTCOME_DONE.
    """
    kwargs: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
    end = None if deadline is None else max(deadline, clock() + min_budget)
    k8s_retry.call(
        core.create_namespaced_pod_eviction, name, ns, body,
        budget=None, deadline=end, sleep=sleep, clock=clock,
        classify=lambda exc: classify_eviction_error(exc) == OUTCOME_RETRY,
        _preload_content=False, **kwargs,
    )


def probe_evictions(
    core: Any,
    pods: Iterable[Mapping[str, Any]],
    budget: float = k8s_retry.DEFAULT_BUDGET,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = k8s_wait.pause,
) -> dict[str, str]:
    """Read-only preflight: ask the Eviction API with server-side dry run (``dryRun=All``) for each pod.

    Returns {"ns/pod": "<server's message> (HTTP <status>)"} for the pods the API refuses for a
    structural reason (OUTCOME_REFUSED: RBAC or admission 403, the multiple-PDB 500, 400, 422, ...).
    A 429 (PDB allows 0 disruptions now) is not structural -- :func:`blocking_pdbs` reports it --
    nor are 404/409 or transient errors (each pod's transient errors are retried for ``budget``
    seconds, then the pod is left out). Terminating pods are not asked. Nothing is evicted: the
    server runs authorization, admission and the PDB checks, then persists nothing.
    """
    refused: dict[str, str] = {}
    for pod in pods:
        if is_terminating(pod):
            continue
        ref = pod_ref(pod)
        ns, name = _split(ref)
        try:
            _evict_once(
                core, name, ns, _eviction_body(pod), clock() + budget, dry_run=True, clock=clock, sleep=sleep,
                min_budget=0.0,
            )
        except Exception as exc:  # noqa: BLE001 - classified below
            if classify_eviction_error(exc) != OUTCOME_REFUSED:
                continue
            if not isinstance(exc, ApiException):
                raise
            if exc.status == 400 and any(m in _reason(exc).lower() for m in ("dry run", "dryrun", "dry-run")):
                # A webhook with side effects refuses every dry run: that says nothing about the real
                # eviction, so the probe cannot tell; the real step will.
                continue
            refused[ref] = "%s (HTTP %s)" % (_reason(exc), exc.status)
    return refused


def why_left(pod: Mapping[str, Any]) -> str:
    """Why a pod is still on its node, for messages: "terminating, deletionTimestamp <RFC 3339>, grace
    <N>s[, finalizers a, b]" or "not terminating, phase <phase>"."""
    meta = pod.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        # deletionTimestamp is the time the kubelet's grace period ends, not when deletion began.
        why = "terminating, deletionTimestamp %s, grace %ss" % (
            meta["deletionTimestamp"],
            meta.get("deletionGracePeriodSeconds", "?"),
        )
        if meta.get("finalizers"):
            why += ", finalizers %s" % ", ".join(meta["finalizers"])
        return why
    return "not terminating, phase %s" % ((pod.get("status") or {}).get("phase") or "?")


def pods_left(items: Iterable[Mapping[str, Any]], uids: set[str]) -> dict[str, str]:
    """{"ns/pod": why_left()} for the pods in ``items`` (the node's pods) whose uid is in ``uids``.

    A pod counts as gone when its uid is no longer on the node -- including when the name now
    belongs to a pod with another uid, no node or another node (a StatefulSet replacement, D11).
    """
    return {pod_ref(i): why_left(i) for i in items if i["metadata"]["uid"] in uids}


def wait_gone(
    core: Any,
    node_name: str,
    uids: set[str],
    timeout: Optional[float],
    heartbeat: Optional[Callable[[], None]] = None,
) -> list[str]:
    """Wait (list + watch of the node's pods) until no pod with one of ``uids`` is left on the node.

    ``timeout``: seconds, None = forever; ``heartbeat``: called while waiting (k8s_wait.wait_for). Pods
    with a deletionTimestamp keep the wait going (they may still hold the device). Returns the pods left
    at the timeout, sorted, each as "ns/pod (<why_left()>)", e.g. "ns1/db-0 (terminating,
    deletionTimestamp 2026-01-01T00:15:00Z, grace 900s)"; the ref is the text before the first " (".
    """
    if not uids:
        return []
    result = k8s_wait.wait_for(
        core.list_pod_for_all_namespaces,
        lambda items: not any(i["metadata"]["uid"] in uids for i in items),
        timeout,
        field_selector="spec.nodeName=%s" % node_name,
        heartbeat=heartbeat,
    )
    return ["%s (%s)" % (ref, why) for ref, why in sorted(pods_left(result.items, uids).items())]
