"""Workload compatibility of a planned window on the lab, judged by the real kube-scheduler.

Seed scenario: ``cuda12-job`` (nvidia.com/cuda.driver.major In [550], VERSION_ID In [22.04]) and
``cuda13-job`` (driver.major Gt 560) on three kwok GPU nodes at 550.90.07. npu_workload_compat plans
every node to 580 and predicts cuda12-job stranded and cuda13-job gaining the nodes; then the nodes
get the labels GPU Feature Discovery publishes for 580.95.05 and the scheduler decides: cuda13-job's
pods are scheduled, cuda12-job's replacement pods (its running pods evicted, as a drain would) stay
Pending as Unschedulable. Both workloads also name a label of this test, so the lab's other nodes
never match them.

The window test: a Deployment pinned to lab-node-1's current driver branch makes the maintenance
window refuse before any cordon (summary workload_compat, Node untouched).
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
from ansible_tasks import run_tasks
from labhelpers import WINDOW_LEASE, create_kwok_nodes, delete_nodes, driver_labels, gone, wait
from test_maintenance_window import GPU_STATE, N1, node_driver, playbook, recap_changed, summary

pytestmark = pytest.mark.lab

OSV = "feature.node.kubernetes.io/system-os_release.VERSION_ID"
MAJ = "nvidia.com/cuda.driver.major"


def _affinity(*exprs):
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": list(exprs)}]}
        }
    }


def _workload(name, replicas, affinity):
    # kwok completes a Job's pods at once (its pod-complete stage), so the lab seeds the two "jobs" as
    # Deployments: the scheduler places their pods by the same constraints (the Job kind: unit tests)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"job": name}},
            "template": {
                "metadata": {"labels": {"job": name}},
                "spec": {
                    "affinity": affinity,
                    "containers": [{"name": "c", "image": "registry.invalid/cuda:12"}],
                },
            },
        },
    }


@pytest.fixture
def shipped_kubeconfig(sa_kubeconfig):
    """The window runs as a ServiceAccount bound to exactly the shipped RBAC (deploy/rbac/)."""
    return sa_kubeconfig(shipped=True)


@pytest.fixture
def ns(core_v1):
    name = "compat-" + uuid.uuid4().hex[:5]
    core_v1.create_namespace({"metadata": {"name": name}})
    yield name
    gone(core_v1.delete_namespace, name)


def _pods(core_v1, ns, job):
    return [
        p
        for p in core_v1.list_namespaced_pod(ns, label_selector="job=" + job).items
        if not p.metadata.deletion_timestamp
    ]


def _unschedulable(p):
    return p.spec.node_name is None and any(
        c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
        for c in p.status.conditions or []
    )


def _scheduled_message(p):
    return next((c.message or "" for c in p.status.conditions or [] if c.type == "PodScheduled"), "")


def test_seed_scenario_prediction_matches_the_scheduler(lab_kubeconfig, apps_v1, core_v1, ns):
    tag = uuid.uuid4().hex[:6]
    mine = {"key": "lab.npuops.io/compat-test", "operator": "In", "values": [tag]}
    labels = dict(
        driver_labels("550.90.07"), **{OSV: "22.04", "lab.npuops.io/compat-test": tag, "nvidia.com/gpu.present": "true"}
    )
    nodes = create_kwok_nodes(core_v1, "compat", 3, labels=labels)
    try:
        apps_v1.create_namespaced_deployment(
            ns,
            _workload(
                "cuda12-job",
                2,
                _affinity(
                    {"key": MAJ, "operator": "In", "values": ["550"]},
                    {"key": OSV, "operator": "In", "values": ["22.04"]},
                    mine,
                ),
            ),
        )
        apps_v1.create_namespaced_deployment(
            ns, _workload("cuda13-job", 1, _affinity({"key": MAJ, "operator": "Gt", "values": ["560"]}, mine))
        )
        running = wait(
            "cuda12-job pods scheduled on the test nodes",
            lambda: (
                len([p for p in _pods(core_v1, ns, "cuda12-job") if p.spec.node_name in nodes]) == 2
                and _pods(core_v1, ns, "cuda12-job")
            ),
        )
        wait(
            "cuda13-job pod Unschedulable now", lambda: any(_unschedulable(p) for p in _pods(core_v1, ns, "cuda13-job"))
        )

        (res,) = run_tasks(
            [
                {
                    "npuops.fleet.npu_workload_compat": {
                        "changes": [{"node": n, "driver_version": "580.95.05"} for n in nodes],
                        "namespaces": [ns],
                    }
                }
            ],
            lab_kubeconfig,
        )
        assert not res.get("failed"), res
        by = {w["name"]: w for w in res["workloads"]}
        c12, c13 = by["cuda12-job"], by["cuda13-job"]
        assert (c12["verdict"], c12["eligible_now"], c12["eligible_after"], c12["unschedulable_replicas"]) == (
            "stranded",
            3,
            0,
            2,
        ), c12
        assert c12["pods_on_unfit_nodes"]["count"] == 2
        assert sorted(p["pod"] for p in c12["pods_on_unfit_nodes"]["pods"]) == sorted(p.metadata.name for p in running)
        assert (c13["verdict"], c13["eligible_now"], c13["eligible_after"]) == ("gains-nodes", 0, 3), c13
        assert res["stranded"] == ["Deployment %s/cuda12-job" % ns] and res["nodes_changed"] == 3
        assert res["api_requests"] >= 6  # one LIST series per kind

        # the window, as it treats each node: cordon, drain (the running cuda12 pods evicted), driver
        # upgrade (GFD relabels the node for 580), uncordon
        for n in nodes:
            core_v1.patch_node(n, {"spec": {"unschedulable": True}})
        time.sleep(3)  # the scheduler sees the cordon before the evictions, as in a window (seconds apart)
        for p in running:
            core_v1.delete_namespaced_pod(p.metadata.name, ns, grace_period_seconds=0)
        for n in nodes:
            core_v1.patch_node(n, {"metadata": {"labels": driver_labels("580.95.05")}, "spec": {"unschedulable": None}})

        wait(
            "cuda13-job pod scheduled on a test node",
            lambda: any(p.spec.node_name in nodes for p in _pods(core_v1, ns, "cuda13-job")),
            timeout=90,
        )
        old = {r.metadata.name for r in running}

        def replacements_refused():
            pods = [p for p in _pods(core_v1, ns, "cuda12-job") if p.metadata.name not in old]
            # the scheduler's own verdict after the uncordon: the node affinity, not the cordon
            return len(pods) == 2 and all(
                _unschedulable(p)
                and "didn't match Pod's node affinity" in _scheduled_message(p)
                and "were unschedulable" not in _scheduled_message(p)
                for p in pods
            )

        wait("cuda12-job's replacement pods Unschedulable by node affinity", replacements_refused, timeout=90)
        assert not any(p.spec.node_name for p in _pods(core_v1, ns, "cuda12-job"))
    finally:
        delete_nodes(core_v1, nodes)


def test_window_refuses_before_any_cordon_when_a_workload_would_have_no_node(
    shipped_kubeconfig, core_v1, apps_v1, ns, tmp_path
):
    report_dir = tmp_path / "reports"
    report_dir.mkdir()
    before = core_v1.read_node(N1)
    branch = node_driver(before).split(".")[0]
    apps_v1.create_namespaced_deployment(
        ns,
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "pinned-inference"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "pinned"}},
                "template": {
                    "metadata": {"labels": {"app": "pinned"}},
                    "spec": {
                        "affinity": _affinity(
                            {"key": MAJ, "operator": "In", "values": [branch]},
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": [N1]},
                        ),
                        "containers": [{"name": "c", "image": "registry.invalid/infer:1"}],
                    },
                },
            },
        },
    )
    # the plan says so first (warn mode: it would start and lists the workload)
    rc, out = playbook("maintenance_window.yml", shipped_kubeconfig, report_dir, N1, "maintenance_mode=plan")
    assert rc != 0, out[-3000:]
    plan = json.loads((report_dir / "latest-plan.json").read_text())
    assert plan["would_start"] is False and "pinned-inference" in plan["workload_refusal"], plan
    assert "workloads: 1 workload(s) would have no node left" in (report_dir / "latest-plan.md").read_text()
    rc, out = playbook(
        "maintenance_window.yml",
        shipped_kubeconfig,
        report_dir,
        N1,
        "maintenance_mode=plan",
        "maintenance_workload_compat=warn",
    )
    plan = json.loads((report_dir / "latest-plan.json").read_text())
    assert rc == 0 and plan["would_start"] is True and plan["workload_refusal"] is None, out[-3000:]
    assert plan["workload_compat"]["stranded"] == ["Deployment %s/pinned-inference" % ns]

    rc, out = playbook("maintenance_window.yml", shipped_kubeconfig, report_dir, N1)
    assert rc != 0, out[-3000:]
    s, hosts = summary(report_dir)
    wc = s["workload_compat"]
    assert wc["mode"] == "refuse" and wc["stranded"] == ["Deployment %s/pinned-inference" % ns], wc
    (row,) = [w for w in wc["workloads"] if w["name"] == "pinned-inference"]
    assert (row["verdict"], row["eligible_now"], row["eligible_after"]) == ("stranded", 1, 0)
    h = hosts[N1]
    assert s["result"] == "failed" and h["status"] == "not-started", h
    assert "would have no node left after the change" in h["reason"] and "pinned-inference" in h["reason"], h
    assert recap_changed(out)[N1] == 0, out[-2000:]  # nothing changed on the host
    upgrade_play = out.split("PLAY [Maintenance window - upgrade the hosts")[1].split("PLAY [")[0]
    assert "TASK [npuops.fleet.driver_upgrade" not in upgrade_play, upgrade_play  # no lane started
    after = core_v1.read_node(N1)
    assert not after.spec.unschedulable
    assert (after.metadata.labels or {}).get(GPU_STATE) == (before.metadata.labels or {}).get(GPU_STATE)
    assert node_driver(after) == node_driver(before)
    assert "pinned-inference" in (report_dir / "latest.md").read_text()


def test_window_whose_workload_check_cannot_run_refuses_and_still_writes_its_summary(
    sa_kubeconfig, core_v1, coordination_v1, tmp_path
):
    """A ClusterRole from before the workload check (no apps / batch list): the check answers 403, the
    window refuses before any cordon, writes its summary and releases its Lease."""
    report_dir = tmp_path / "reports"
    report_dir.mkdir()
    kubeconfig = sa_kubeconfig(shipped=True, without_api_groups=["apps", "batch"])
    rc, out = playbook("maintenance_window.yml", kubeconfig, report_dir, N1)
    assert rc != 0, out[-3000:]
    s, hosts = summary(report_dir)
    wc = s["workload_compat"]
    assert wc["error"] and "403" in wc["error"] and "deployments" in wc["error"], wc
    assert "the workload check could not run" in hosts[N1]["reason"] and hosts[N1]["status"] == "not-started"
    assert not core_v1.read_node(N1).spec.unschedulable
    assert "Leave the window (the last live participant closes it)" in out
    # closed: no holder (another run may open one), the record says closed
    closed = coordination_v1.read_namespaced_lease(WINDOW_LEASE, "kube-system")
    assert not closed.spec.holder_identity
    assert json.loads(closed.metadata.annotations["npuops.io/window"])["state"] == "closed"
