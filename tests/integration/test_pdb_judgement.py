"""drain.blocking_pdbs / drain.multi_pdb_pods against the lab's real kube-apiserver and
kube-controller-manager: they name a PodDisruptionBudget exactly where a dry-run eviction
(``dryRun=All``) is refused, as the eviction subresource (pkg/registry/core/pod/storage/eviction.go)
judges it.

Each group is one PDB allowing 0 disruptions (its status written by the real disruption controller)
over one or two bare pods: a Pending pod (phase patched on the node, and a scheduling-gated pod that
never had one), a Succeeded and a Failed pod, a terminating pod (finalizer + delete) - all evicted
without a PDB check - and an unready pod (Running, Ready=False) whose fate depends on
``unhealthyPodEvictionPolicy`` (unset, IfHealthyBudget, AlwaysAllow) and on currentHealthy /
desiredHealthy; the Ready companions are refused (429). One more group puts a Pending pod and a Ready
one under two PDBs: the Pending pod goes, the Ready one gets the multiple-PDB 500.

kwok makes every pod on a node it manages Running and Ready at once; the other states are written
to the status subresource afterwards (kwok's stages leave them alone: pod-ready only picks Pending
pods whose Ready is not True). Everything lives in a namespace and on a kwok node of this module's
own (tainted NoSchedule, without type=kwok), both removed at teardown.
"""

from __future__ import annotations

import copy
import json
import time
import uuid
from typing import Any, Optional

import pytest
from kubernetes import client
from labhelpers import create_kwok_nodes, delete_nodes, dry_run_eviction, gone, wait

from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import drain

pytestmark = pytest.mark.lab

TAINT = "lab.npuops.io/it-pdbj"
HOLD = "lab.npuops.io/hold"
EVICTED = 201  # the eviction subresource's answer when it accepts (dry run or not): 201 Created
DEADLINE = 90  # seconds for kwok / the disruption controller to catch up


def _pol(policy: Optional[str]) -> str:
    return {None: "unset", "IfHealthyBudget": "ifhealthy", "AlwaysAllow": "always"}[policy]


def _groups() -> list[dict[str, Any]]:
    """Each: name, policy, minAvailable, pods {role: state}, the PDB status the controller must reach
    (currentHealthy, desiredHealthy; disruptionsAllowed is 0 everywhere) and the apiserver's expected
    HTTP status for each pod's dry-run eviction."""
    groups = []
    for policy in (None, "AlwaysAllow"):
        # Phase Pending on the node keeps Ready=True (else kwok makes it Running again), so it counts healthy.
        for state, current in (("pending", 1), ("gated", 0), ("succeeded", 0), ("failed", 0), ("terminating", 0)):
            groups.append(dict(name="%s-%s" % (state, _pol(policy)), policy=policy, min_available=1,
                               pods={"subject": state}, status=(current, 1), expect={"subject": EVICTED}))
    for policy in (None, "IfHealthyBudget", "AlwaysAllow"):
        always = policy == "AlwaysAllow"
        groups += [
            # currentHealthy 1 >= desiredHealthy 1 > 0: the unready pod goes under every policy.
            dict(name="met-%s" % _pol(policy), policy=policy, min_available=1,
                 pods={"subject": "unready", "companion": "ready"}, status=(1, 1),
                 expect={"subject": EVICTED, "companion": 429}),
            # currentHealthy 1 < desiredHealthy 2: only AlwaysAllow lets the unready pod go.
            dict(name="short-%s" % _pol(policy), policy=policy, min_available=2,
                 pods={"subject": "unready", "companion": "ready"}, status=(1, 2),
                 expect={"subject": EVICTED if always else 429, "companion": 429}),
            # desiredHealthy 0: the IfHealthyBudget shortcut needs desiredHealthy > 0, so 429 unless AlwaysAllow.
            dict(name="zero-%s" % _pol(policy), policy=policy, min_available=0,
                 pods={"subject": "unready"}, status=(0, 0), expect={"subject": EVICTED if always else 429}),
        ]
    return groups


GROUPS = _groups()
MULTI = "multi-pending"  # two PDBs (each allowing disruptions) over a Pending pod and a Ready one


def _pod_body(name: str, group: str, node: str, state: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {"group": group}}
    spec: dict[str, Any] = {
        "tolerations": [{"key": TAINT, "operator": "Exists"}],
        "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
    }
    if state == "gated":
        spec["schedulingGates"] = [{"name": HOLD}]  # never scheduled: Pending with no Ready condition
    else:
        spec["nodeName"] = node  # pinned: no scheduler, never another test's node
    if state == "terminating":
        meta["finalizers"] = [HOLD]
    return {"metadata": meta, "spec": spec}


def _read(core: Any, ns: str, name: str) -> dict[str, Any]:
    return json.loads(core.read_namespaced_pod(name, ns, _preload_content=False).data)


def _ready(p: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])


def _set_status(core: Any, ns: str, name: str, state: str) -> None:
    """Write ``state`` to the pod's status subresource (read-modify-replace, retried on conflict)."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for _attempt in range(5):
        p = _read(core, ns, name)
        status = copy.deepcopy(p["status"])
        if state == "pending":
            status["phase"] = "Pending"  # Ready stays True: kwok's pod-ready stage would undo it otherwise
        else:
            for c in status.get("conditions") or []:
                if c["type"] in ("Ready", "ContainersReady"):
                    c.update(status="False", lastTransitionTime=now)
            for cs in status.get("containerStatuses") or []:
                cs["ready"] = False
            if state in ("succeeded", "failed"):
                status["phase"] = "Succeeded" if state == "succeeded" else "Failed"
                code, reason = (0, "Completed") if state == "succeeded" else (1, "Error")
                for cs in status.get("containerStatuses") or []:
                    started = (cs.get("state") or {}).get("running", {}).get("startedAt", now)
                    cs["state"] = {"terminated": {"exitCode": code, "reason": reason, "startedAt": started,
                                                  "finishedAt": now}}
        p["status"] = status
        try:
            core.replace_namespaced_pod_status(name, ns, p)
            return
        except client.ApiException as exc:
            if exc.status != 409:
                raise
    raise AssertionError("status of pod %s/%s kept conflicting" % (ns, name))


def _state_now(p: dict[str, Any]) -> str:
    if p["metadata"].get("deletionTimestamp"):
        return "terminating"
    phase = p["status"].get("phase")
    if phase == "Pending":
        return "gated" if not p["spec"].get("nodeName") else "pending"
    if phase in ("Succeeded", "Failed"):
        return phase.lower()
    return "ready" if _ready(p) else "unready"


def _wait_seen(what: str, fn: Any, timeout: float = DEADLINE) -> Any:
    """Poll ``fn`` -> (ok, seen) until ok; the failure names what was seen last."""
    t0, seen = time.monotonic(), None
    while time.monotonic() - t0 < timeout:
        ok, seen = fn()
        if ok:
            return seen
        time.sleep(0.5)
    raise AssertionError("timed out after %ss waiting for %s; last seen: %s" % (timeout, what, seen))


@pytest.fixture(scope="module")
def judged(core_v1, policy_v1):
    """Build every group, bring each pod to its state and each PDB's status to the expected one.

    Returns {"ns": ns, "pods": {(group, role): pod dict as read last}}."""
    core, policy = core_v1, policy_v1
    ns = "it-pdbj-%s" % uuid.uuid4().hex[:6]
    (node,) = create_kwok_nodes(
        core, "it-pdbj", 1, labels={"kubernetes.io/os": "linux"},
        taints=[{"key": TAINT, "value": "true", "effect": "NoSchedule"}], kwok_type_label=False,
    )
    core.create_namespace({"metadata": {"name": ns}})
    names: dict[tuple[str, str], str] = {}
    states: dict[tuple[str, str], str] = {}
    try:
        wait("default ServiceAccount in %s" % ns, lambda: core.list_namespaced_service_account(ns).items)
        pdbs: dict[str, tuple[int, int]] = {}
        for g in GROUPS:
            selector = {"matchLabels": {"group": g["name"]}}
            spec: dict[str, Any] = {"minAvailable": g["min_available"], "selector": selector}
            if g["policy"]:
                spec["unhealthyPodEvictionPolicy"] = g["policy"]
            policy.create_namespaced_pod_disruption_budget(ns, {"metadata": {"name": g["name"]}, "spec": spec})
            pdbs[g["name"]] = g["status"]
            for role, state in g["pods"].items():
                names[(g["name"], role)], states[(g["name"], role)] = "%s-%s" % (g["name"], role), state
        for pdb_name in ("%s-a" % MULTI, "%s-b" % MULTI):
            # minAvailable 0 allows every disruption (maxUnavailable over bare pods would fail the
            # controller's sync: no controller to count from), so only the overlap can refuse.
            spec = {"minAvailable": 0, "selector": {"matchLabels": {"group": MULTI}}}
            policy.create_namespaced_pod_disruption_budget(ns, {"metadata": {"name": pdb_name}, "spec": spec})
        for role, state in (("subject", "pending"), ("companion", "ready")):
            names[(MULTI, role)], states[(MULTI, role)] = "%s-%s" % (MULTI, role), state
        for (group, _role), name in names.items():
            core.create_namespaced_pod(ns, _pod_body(name, group, node, states[(group, _role)]))

        on_node = [k for k in names if states[k] != "gated"]

        def all_running():
            pods = {k: _read(core, ns, names[k]) for k in on_node}
            seen = {names[k]: _state_now(p) for k, p in pods.items()}
            return all(s == "ready" for s in seen.values()), seen

        _wait_seen("the %d pods on %s Running and Ready (kwok)" % (len(on_node), node), all_running)
        for k in on_node:
            if states[k] in ("pending", "unready", "succeeded", "failed"):
                _set_status(core, ns, names[k], states[k])
            elif states[k] == "terminating":
                core.delete_namespaced_pod(names[k], ns)

        def pdbs_settled():
            seen, ok = {}, True
            for item in json.loads(
                policy.list_namespaced_pod_disruption_budget(ns, _preload_content=False).data
            )["items"]:
                st, name = item.get("status") or {}, item["metadata"]["name"]
                seen[name] = (st.get("observedGeneration"), item["metadata"]["generation"], st.get("currentHealthy"),
                              st.get("desiredHealthy"), st.get("disruptionsAllowed"))
                if name in pdbs:
                    want = (item["metadata"]["generation"], item["metadata"]["generation"]) + pdbs[name] + (0,)
                    ok = ok and seen[name] == want
            return ok and set(pdbs) <= set(seen), seen

        _wait_seen("PDB status (observedGeneration, generation, currentHealthy, desiredHealthy, "
                   "disruptionsAllowed) as expected", pdbs_settled)

        def states_held():
            pods = {k: _read(core, ns, names[k]) for k in names}
            seen = {names[k]: _state_now(p) for k, p in pods.items()}
            return all(seen[names[k]] == states[k] for k in names), (pods, seen)

        pods, _seen = _wait_seen("every pod in its state (%s)" % {names[k]: states[k] for k in names}, states_held)
        yield {"ns": ns, "pods": pods}
    finally:
        for name in names.values():
            try:
                core.patch_namespaced_pod(name, ns, {"metadata": {"finalizers": None}})
            except client.ApiException as exc:
                if exc.status != 404:
                    raise
        gone(core.delete_namespace, ns)
        wait("pods of %s gone" % ns, lambda: not core.list_namespaced_pod(ns).items, timeout=DEADLINE)
        delete_nodes(core, [node])


CASES = [(g["name"], role, status) for g in GROUPS for role, status in g["expect"].items()]


@pytest.mark.parametrize("group,role,status", CASES, ids=["%s/%s" % c[:2] for c in CASES])
def test_blocking_pdbs_agree_with_the_apiserver(judged, core_v1, policy_v1, group, role, status):
    ns, p = judged["ns"], judged["pods"][(group, role)]
    ref = "%s/%s" % (ns, p["metadata"]["name"])
    code, message = dry_run_eviction(core_v1, p)
    assert code == status, (code, message, p["status"].get("phase"), p["status"].get("conditions"))
    found = drain.blocking_pdbs(policy_v1, [p])
    expected = [("%s/%s" % (ns, group), [ref])] if status == 429 else []
    assert [(f["pdb"], f["pods"]) for f in found] == expected
    assert drain.multi_pdb_pods(policy_v1, [p]) == {}


def test_a_pending_pod_under_two_pdbs_goes_and_is_not_named(judged, core_v1, policy_v1):
    ns, pods = judged["ns"], judged["pods"]
    pending, ready = pods[(MULTI, "subject")], pods[(MULTI, "companion")]
    assert dry_run_eviction(core_v1, pending) == (EVICTED, "")
    assert dry_run_eviction(core_v1, ready) == (
        500, "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.")
    ref = "%s/%s" % (ns, ready["metadata"]["name"])
    assert drain.multi_pdb_pods(policy_v1, [pending, ready]) == {
        ref: "covered by 2 PodDisruptionBudgets (%s/%s-a, %s/%s-b): the eviction API refuses such pods"
        % (ns, MULTI, ns, MULTI)
    }
    assert drain.blocking_pdbs(policy_v1, [pending, ready]) == []
    # The dry runs changed nothing.
    assert {_state_now(_read(core_v1, ns, p["metadata"]["name"])) for p in (pending, ready)} == {"pending", "ready"}
