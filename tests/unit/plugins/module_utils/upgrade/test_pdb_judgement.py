"""Which PodDisruptionBudget stops which pod, as kube-apiserver's eviction subresource
(pkg/registry/core/pod/storage/eviction.go) judges it: Pending, finished and terminating pods go
without any PDB check (no 429, no multiple-PDB 500); an unready pod goes under AlwaysAllow, or under
IfHealthyBudget (also unset) while currentHealthy >= desiredHealthy > 0.

Every expectation is a literal: the product's answer (drain.blocking_pdbs / multi_pdb_pods, the
status phase and check mode of NodeUpgrade) and the fake apiserver's HTTP status (fake_k8s, its own
table) must both equal it."""

from __future__ import annotations

import json

import pytest
from fake_k8s import FakeCluster, make_node
from kubernetes.client.rest import ApiException
from upgrade_pod_fixtures import GPU, gpu_labels, on, pod

from ansible_collections.npuops.fleet.plugins.module_utils.driver.vendor_profiles import resolve_profile
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import drain, refusals
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.node_upgrade import NodeUpgrade
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.policy import parse_policy

NV = resolve_profile("nvidia")
NS = "gpu-drv"
APP = {"app": "trainer"}


def guard(policy=None, allowed=0, current=1, desired=1, name="guard", generation=None, observed=None):
    """A PDB over app=trainer with the given status (as the disruption controller wrote it)."""
    spec = {"minAvailable": desired, "selector": {"matchLabels": dict(APP)}}
    if policy:
        spec["unhealthyPodEvictionPolicy"] = policy
    body = {
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
        "status": {"disruptionsAllowed": allowed, "currentHealthy": current, "desiredHealthy": desired},
    }
    if generation is not None:
        body["metadata"]["generation"] = generation
        body["status"]["observedGeneration"] = observed
    return body


def trainer(phase="Running", ready=True, deleting=False, name="trainer-1"):
    return on("n1", pod(name, ns=NS, labels=dict(APP), phase=phase, ready=ready, deleting=deleting, resources=GPU))


class PolicyApi:
    def __init__(self, pdbs):
        self.pdbs = pdbs
        self.lists = 0

    def list_pod_disruption_budget_for_all_namespaces(self, _preload_content=True, **_):
        self.lists += 1

        class Resp:
            data = json.dumps({"items": self.pdbs, "metadata": {"resourceVersion": "1"}})

        return Resp()


def fake_status(p, pdbs):
    """HTTP status of the fake apiserver's dry-run eviction of ``p``."""
    c = FakeCluster([make_node("n1")], [p], pdbs)
    try:
        c.create_namespaced_pod_eviction(p["metadata"]["name"], NS, {}, dry_run="All")
    except ApiException as exc:
        return exc.status
    return 201


# (case, pod, pdb, blocked by the PDB?, the apiserver's HTTP status)
CASES = [
    ("running-ready", trainer(), guard(), True, 429),
    ("pending-unready", trainer(phase="Pending", ready=False), guard(current=0), False, 201),
    ("pending-ready-condition", trainer(phase="Pending"), guard(), False, 201),
    ("succeeded", trainer(phase="Succeeded", ready=False), guard(current=0), False, 201),
    ("failed", trainer(phase="Failed", ready=False), guard(current=0), False, 201),
    ("terminating-ready", trainer(deleting=True), guard(), False, 201),
    ("unready-unset-budget-met", trainer(ready=False), guard(current=1, desired=1), False, 201),
    ("unready-ifhealthy-budget-met", trainer(ready=False), guard("IfHealthyBudget", current=2, desired=1), False, 201),
    ("unready-ifhealthy-budget-short", trainer(ready=False), guard("IfHealthyBudget", current=1, desired=2), True, 429),
    ("unready-unset-budget-short", trainer(ready=False), guard(current=0, desired=1), True, 429),
    ("unready-desired-0", trainer(ready=False), guard(current=0, desired=0), True, 429),
    ("unready-ifhealthy-desired-0", trainer(ready=False), guard("IfHealthyBudget", current=0, desired=0), True, 429),
    ("unready-alwaysallow", trainer(ready=False), guard("AlwaysAllow", current=0, desired=2), False, 201),
    ("ready-alwaysallow", trainer(), guard("AlwaysAllow", current=1, desired=1), True, 429),
    ("ready-budget-left", trainer(), guard(allowed=1, current=2, desired=1), False, 201),
    ("ready-stale-generation", trainer(), guard(allowed=1, current=2, desired=1, generation=2, observed=1), True, 429),
    (
        "unready-alwaysallow-stale-generation",
        trainer(ready=False),
        guard("AlwaysAllow", current=0, desired=1, generation=2, observed=1),
        False,
        201,
    ),
]


@pytest.mark.parametrize("case,p,pdb,blocked,status", CASES, ids=[c[0] for c in CASES])
def test_one_pdb_blocks_exactly_where_the_apiserver_refuses(case, p, pdb, blocked, status):
    found = drain.blocking_pdbs(PolicyApi([pdb]), [p])
    assert [(f["pdb"], f["pods"]) for f in found] == ([("gpu-drv/guard", ["gpu-drv/trainer-1"])] if blocked else [])
    assert drain.pdb_refuses(p, pdb) is blocked
    assert drain.eviction_verdict(p, [pdb]) == (("pdb", ["gpu-drv/guard"]) if blocked else ("evict", []))
    assert drain.multi_pdb_pods(PolicyApi([pdb]), [p]) == {}
    assert fake_status(p, [pdb]) == status


TWO = "covered by 2 PodDisruptionBudgets (gpu-drv/guard, gpu-drv/guard-2): the eviction API refuses such pods"
MULTI = [
    ("running-ready", trainer(), {"gpu-drv/trainer-1": TWO}, 500),
    ("running-unready", trainer(ready=False), {"gpu-drv/trainer-1": TWO}, 500),
    ("pending", trainer(phase="Pending", ready=False), {}, 201),
    ("succeeded", trainer(phase="Succeeded", ready=False), {}, 201),
    ("failed", trainer(phase="Failed", ready=False), {}, 201),
    ("terminating", trainer(deleting=True), {}, 201),
]


@pytest.mark.parametrize("case,p,refused,status", MULTI, ids=[m[0] for m in MULTI])
def test_two_pdbs_refuse_only_pods_the_apiserver_judges_by_pdbs(case, p, refused, status):
    # Both PDBs let the pod go on their own (AlwaysAllow, budget left): the overlap alone decides.
    pdbs = [guard("AlwaysAllow", allowed=1, current=2), guard("AlwaysAllow", allowed=1, current=2, name="guard-2")]
    api = PolicyApi(pdbs)
    assert drain.multi_pdb_pods(api, [p]) == refused
    assert drain.eviction_verdict(p, pdbs)[0] == ("multiple" if refused else "evict")
    assert drain.blocking_pdbs(api, [p]) == []
    assert fake_status(p, pdbs) == status
    # Coverage itself is a fact about selectors, whatever the pod's state.
    assert drain.pdbs_covering(api, [p]) == {"gpu-drv/trainer-1": ["gpu-drv/guard", "gpu-drv/guard-2"]}


def test_pdb_free_pods_cost_no_pdb_list():
    api = PolicyApi([guard(), guard(name="guard-2")])
    assert drain.multi_pdb_pods(api, [trainer(phase="Pending", ready=False), trainer(deleting=True)]) == {}
    assert api.lists == 0


def test_a_mixed_node_names_only_the_ready_pod():
    pods = [
        trainer(name="ready"),
        trainer(name="pending", phase="Pending", ready=False),
        trainer(name="done", phase="Succeeded", ready=False),
        trainer(name="unready", ready=False),
        trainer(name="leaving", deleting=True),
    ]
    found = drain.blocking_pdbs(PolicyApi([guard(current=1, desired=1)]), pods)
    assert [(f["pdb"], f["pods"]) for f in found] == [("gpu-drv/guard", ["gpu-drv/ready"])]
    assert found[0]["detail"] == (
        "gpu-drv/guard (minAvailable=1, currentHealthy=1, desiredHealthy=1, disruptionsAllowed=0)"
    )


def test_detail_names_the_policy_and_a_stale_status():
    detail = drain.describe_pdb(guard("AlwaysAllow", allowed=1, current=2, desired=1, generation=3, observed=2))
    assert detail == (
        "gpu-drv/guard (minAvailable=1, unhealthyPodEvictionPolicy=AlwaysAllow, currentHealthy=2, "
        "desiredHealthy=1, disruptionsAllowed=1, status not yet observed for generation 3)"
    )


# --- through NodeUpgrade: the status phase's preflight and check mode name the same PDBs ---
@pytest.fixture
def node_upgrade(one_shot_waits):
    def run(pods, pdbs, phase, policy, check=False):
        nodes = [make_node("n%d" % i, gpu_labels()) for i in range(4)]
        c = FakeCluster(nodes, pods, pdbs)
        up = NodeUpgrade(None, NV, parse_policy(policy), "n1", target_version="550.90.07", check_mode=check,
                         core=c, policy_api=c)
        return up.run(phase, None)

    return run


STEPS = [
    ("status-pod-deletion", "status", {}, False),
    ("status-drain", "status", {"drain": {"enable": True}}, False),
    ("check-pod-deletion", "prepare", {}, True),
    ("check-drain", "prepare", {"drain": {"enable": True}, "npuPodDeletion": {"force": False}}, True),
]
GUARD_DETAIL = "gpu-drv/guard (minAvailable=1, currentHealthy=1, desiredHealthy=1, disruptionsAllowed=0)"


@pytest.mark.parametrize("case,phase,policy,check", STEPS, ids=[s[0] for s in STEPS])
def test_preflight_names_no_pdb_for_a_pending_or_unready_pod_it_would_let_go(node_upgrade, case, phase, policy, check):
    pods = [trainer(name="pending", phase="Pending", ready=False), trainer(name="unready", ready=False)]
    res = node_upgrade(pods, [guard()], phase, policy, check)
    assert res["would_evict"] == ["gpu-drv/pending", "gpu-drv/unready"]
    assert res["blocking_pdbs"] == []
    assert res["refused_evictions"] == {}


def test_status_names_the_pdb_overlap_only_for_the_pod_judged_by_pdbs(node_upgrade):
    pods = [trainer(name="pending", phase="Pending", ready=False), trainer(name="unready", ready=False)]
    res = node_upgrade(pods, [guard(), guard(name="guard-2", current=5, desired=5)], "status", {})
    assert res["blocking_pdbs"] == []
    # Two PDBs: the apiserver's 500 for the unready pod (counted before readiness), none for Pending.
    assert res["refused_evictions"] == {"gpu-drv/unready": TWO}


@pytest.mark.parametrize("case,phase,policy,check", STEPS, ids=[s[0] for s in STEPS])
def test_preflight_names_the_pdb_for_a_ready_pod(node_upgrade, case, phase, policy, check):
    pods = [trainer(name="ready"), trainer(name="pending", phase="Pending", ready=False)]
    res = node_upgrade(pods, [guard()], phase, policy, check)
    assert res["would_evict"] == ["gpu-drv/pending", "gpu-drv/ready"]
    assert res["blocking_pdbs"] == [GUARD_DETAIL]
    assert res["refused_evictions"] == {}


# --- pdbs_at_risk: free now only because not Ready yet; would refuse once Ready (a warning) ---
SHORT = "gpu-drv/guard (minAvailable=1, currentHealthy=0, desiredHealthy=1, disruptionsAllowed=0)"
ONCE_READY = ": refuses its eviction once it is Ready (disruptionsAllowed would stay 0)"

AT_RISK = [
    # budget short without it: once it is Ready, currentHealthy 1 = desiredHealthy 1, still 0 allowed
    ("pending-short", trainer(phase="Pending", ready=False), [guard(current=0)], [SHORT + ONCE_READY]),
    # budget met without it: once Ready there is one disruption to spare
    ("pending-met", trainer(phase="Pending", ready=False), [guard(current=1)], []),
    ("alwaysallow-unready-short", trainer(ready=False), [guard(policy="AlwaysAllow", current=1, desired=2)],
     ["gpu-drv/guard (minAvailable=2, unhealthyPodEvictionPolicy=AlwaysAllow, currentHealthy=1, "
      "desiredHealthy=2, disruptionsAllowed=0)" + ONCE_READY]),
    # refused now already (IfHealthyBudget, budget short): blocking_pdbs names it, not this list
    ("ifhealthy-unready-short", trainer(ready=False), [guard(current=1, desired=2)], []),
    ("succeeded", trainer(phase="Succeeded", ready=False), [guard(current=0)], []),
    ("terminating-unready", trainer(ready=False, deleting=True), [guard(current=0)], []),
    ("ready", trainer(), [guard()], []),
    ("pending-two-pdbs", trainer(phase="Pending", ready=False), [guard(current=1), guard(name="g2", current=1)],
     ["gpu-drv/g2 (minAvailable=1, currentHealthy=1, desiredHealthy=1, disruptionsAllowed=0): covered by 2 "
      "PodDisruptionBudgets: refused (500) once it starts",
      "gpu-drv/guard (minAvailable=1, currentHealthy=1, desiredHealthy=1, disruptionsAllowed=0): covered by 2 "
      "PodDisruptionBudgets: refused (500) once it starts"]),
]


BARE = {"metadata": {"name": "guard", "namespace": NS},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": dict(APP)}},
        # the controller's status over bare pods: their owner has no scale, expectedPods 0, nothing allowed
        "status": {"disruptionsAllowed": 0, "currentHealthy": 2, "desiredHealthy": 0, "expectedPods": 0}}
SYNC_FAILED = {"metadata": {"name": "guard", "namespace": NS},
               "spec": {"maxUnavailable": 1, "selector": {"matchLabels": dict(APP)}},
               "status": {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 1,
                          "conditions": [{"type": "DisruptionAllowed", "status": "False", "reason": "SyncFailed"}]}}
AT_RISK += [
    ("pending-bare-pods-maxunavailable", trainer(phase="Pending", ready=False), [BARE],
     ["gpu-drv/guard (maxUnavailable=1, currentHealthy=2, desiredHealthy=0, disruptionsAllowed=0)" + ONCE_READY]),
    ("pending-sync-failed", trainer(phase="Pending", ready=False), [SYNC_FAILED],
     ["gpu-drv/guard (maxUnavailable=1, currentHealthy=0, desiredHealthy=0, disruptionsAllowed=0)" + ONCE_READY]),
    ("unready-stale-status", trainer(ready=False), [guard(current=1, generation=2, observed=1)],
     ["gpu-drv/guard (minAvailable=1, currentHealthy=1, desiredHealthy=1, disruptionsAllowed=0, status not yet "
      "observed for generation 2): refuses its eviction once it is Ready while its status is not yet observed"]),
]


@pytest.mark.parametrize("case,p,pdbs,details", AT_RISK, ids=[c[0] for c in AT_RISK])
def test_pdbs_at_risk_name_what_would_refuse_once_the_pod_is_ready(case, p, pdbs, details):
    assert [e["detail"] for e in drain.pdbs_at_risk(pdbs, [p])] == details
    assert all(e["pods"] == ["gpu-drv/trainer-1"] for e in drain.pdbs_at_risk(pdbs, [p]))


def test_status_warns_of_a_pending_pod_its_pdb_would_refuse_once_ready(one_shot_waits):
    nodes = [make_node("n%d" % i, gpu_labels()) for i in range(4)]
    c = FakeCluster(nodes, [trainer(phase="Pending", ready=False)], [guard(current=0)])
    up = NodeUpgrade(None, NV, parse_policy({"drain": {"enable": True}}), "n1", target_version="550.90.07",
                     core=c, policy_api=c)
    res = up.run("status", None)
    assert res["blocking_pdbs"] == [] and res["refused_evictions"] == {}
    assert res["pdbs_at_risk"] == [SHORT + ONCE_READY]
    assert up.warnings == [
        "node n1: PodDisruptionBudget gpu-drv/guard lets gpu-drv/trainer-1 go now only because not Ready yet; "
        "once Ready it would refuse the drain's eviction (the drain then waits up to its timeout)"]


def test_a_drain_timeout_judges_the_pods_as_they_are_at_the_timeout():
    """A pod Pending when the step began and Ready by its timeout: the PDB refusing it now is named;
    a pod replaced under the same name (other uid) is not judged; an unreadable node keeps the step's copies."""
    nodes = [make_node("n%d" % i, gpu_labels()) for i in range(4)]
    started = trainer()  # Running and Ready now
    c = FakeCluster(nodes, [started], [guard()])
    up = NodeUpgrade(None, NV, parse_policy({}), "n1", target_version="550.90.07", core=c, policy_api=c)
    seen = {"gpu-drv/trainer-1": trainer(phase="Pending", ready=False)}  # what the step read
    assert seen["gpu-drv/trainer-1"]["metadata"]["uid"] == started["metadata"]["uid"]
    now = refusals.still_there(up.ctx, ["gpu-drv/trainer-1"], seen)
    assert [p["status"]["phase"] for p in now] == ["Running"]
    assert [e["pdb"] for e in drain.blocking_from_items([guard()], now)] == ["gpu-drv/guard"]
    assert drain.blocking_from_items([guard()], list(seen.values())) == []  # the stale copy named none
    other = {"gpu-drv/trainer-1": dict(seen["gpu-drv/trainer-1"], metadata=dict(
        seen["gpu-drv/trainer-1"]["metadata"], uid="another"))}
    assert refusals.still_there(up.ctx, ["gpu-drv/trainer-1"], other) == []

    class Down:
        def list_pod_for_all_namespaces(self, **_):
            raise ApiException(status=403, reason="Forbidden")

    up.ctx.core = Down()
    assert refusals.still_there(up.ctx, ["gpu-drv/trainer-1"], seen) == [seen["gpu-drv/trainer-1"]]
