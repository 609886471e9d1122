"""Workload compatibility of a planned window: the seed scenario (cuda12-job pinned to 550 and
Ubuntu 22.04, cuda13-job needing Gt 560) and the label rules, with expectations written by hand."""

import pytest

from ansible_collections.npuops.fleet.plugins.module_utils.driver.vendor_profiles import BUILTIN_PROFILES
from ansible_collections.npuops.fleet.plugins.module_utils.fleet.workload_compat import (
    ChangeError,
    collect_workloads,
    evaluate,
    labels_after,
    summary_lines,
)

NV = BUILTIN_PROFILES["nvidia"]
RBLN = BUILTIN_PROFILES["rebellions"]
MAJ, MIN, REV = "nvidia.com/cuda.driver.major", "nvidia.com/cuda.driver.minor", "nvidia.com/cuda.driver.rev"
OSV = "feature.node.kubernetes.io/system-os_release.VERSION_ID"
OSID = "feature.node.kubernetes.io/system-os_release.ID"
KFULL = "feature.node.kubernetes.io/kernel-version.full"


def node(name, major="550", minor="90", rev="07", os_version="22.04", **extra):
    labels = {
        MAJ: major,
        MIN: minor,
        REV: rev,
        OSV: os_version,
        OSID: "ubuntu",
        "kubernetes.io/hostname": name,
        "nvidia.com/gpu.present": "true",
    }
    labels.update(extra)
    return {
        "metadata": {"name": name, "labels": labels},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def affinity(*exprs):
    return {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": list(exprs)}]
                }
            }
        },
        "containers": [{"name": "c"}],
    }


CUDA12 = affinity(
    {"key": MAJ, "operator": "In", "values": ["550"]}, {"key": OSV, "operator": "In", "values": ["22.04"]}
)
CUDA13 = affinity({"key": MAJ, "operator": "Gt", "values": ["560"]})


def job(name, spec, parallelism=1, uid=None, **status):
    return {
        "metadata": {"name": name, "namespace": "ml", "uid": uid or "job-" + name},
        "spec": {"parallelism": parallelism, "template": {"spec": spec}},
        "status": status,
    }


def pod(name, node_name, spec, owner=None, phase="Running", ns="ml"):
    meta = {"name": name, "namespace": ns, "uid": "pod-" + name}
    if owner:
        meta["ownerReferences"] = [dict(owner, controller=True)]
    return {"metadata": meta, "spec": dict(spec, nodeName=node_name), "status": {"phase": phase}}


def test_seed_scenario_every_node_to_580():
    nodes = [node("gpu-%d" % i) for i in range(3)]
    changes = {n["metadata"]["name"]: {"driver_version": "580.95.05"} for n in nodes}
    jobs = [job("cuda12-job", CUDA12, parallelism=2), job("cuda13-job", CUDA13)]
    pods = [
        pod("cuda12-job-a", "gpu-0", CUDA12, {"kind": "Job", "name": "cuda12-job", "uid": "job-cuda12-job"}),
        pod("cuda12-job-b", "gpu-1", CUDA12, {"kind": "Job", "name": "cuda12-job", "uid": "job-cuda12-job"}),
    ]
    rep = evaluate(nodes, changes, collect_workloads(pods, jobs=jobs), {"nvidia": NV})
    by = {r["name"]: r for r in rep["workloads"]}
    c12, c13 = by["cuda12-job"], by["cuda13-job"]
    assert (c12["verdict"], c12["eligible_now"], c12["eligible_after"]) == ("stranded", 3, 0)
    assert c12["unschedulable_replicas"] == 2 and c12["nodes_lost"] == {
        "count": 3,
        "names": ["gpu-0", "gpu-1", "gpu-2"],
    }
    assert c12["pods_on_unfit_nodes"] == {
        "count": 2,
        "pods": [{"pod": "cuda12-job-a", "node": "gpu-0"}, {"pod": "cuda12-job-b", "node": "gpu-1"}],
    }
    assert (c13["verdict"], c13["eligible_now"], c13["eligible_after"]) == ("gains-nodes", 0, 3)
    assert c13["unschedulable_replicas"] == 0 and c13["nodes_gained"]["count"] == 3
    assert rep["stranded"] == ["Job ml/cuda12-job"] and rep["pods_on_unfit_nodes"] == 2
    assert summary_lines(rep)[0].startswith(
        "Job ml/cuda12-job (affinity (%s In [550] and %s In [22.04])): stranded, "
        "eligible nodes 3 -> 0, 2 replica(s) would be unschedulable" % (MAJ, OSV)
    )


def test_part_of_the_fleet_loses_nodes_but_is_not_stranded():
    nodes = [node("gpu-0"), node("gpu-1"), node("old", major="535", minor="183", rev="06")]
    rep = evaluate(
        nodes,
        {"gpu-0": {"driver_version": "580.95.05"}},
        collect_workloads([], jobs=[job("cuda12-job", CUDA12)]),
        {"nvidia": NV},
    )
    (r,) = rep["workloads"]
    assert (r["verdict"], r["eligible_now"], r["eligible_after"], r["unschedulable_replicas"]) == (
        "loses-nodes",
        2,
        1,
        0,
    )
    assert rep["stranded"] == []


def test_os_change_and_unaffected_and_already_unschedulable():
    nodes = [node("gpu-0"), node("gpu-1")]
    wl = collect_workloads(
        [], jobs=[job("cuda12-job", CUDA12), job("cuda13-job", CUDA13), job("free", {"containers": []})]
    )
    # same driver branch, OS upgrade to 24.04 on one node
    rep = evaluate(nodes, {"gpu-1": {"driver_version": "550.163.01", "os_version_id": "24.04"}}, wl, {"nvidia": NV})
    # cuda13-job has no node now or after: counted, not listed (the same answer either way)
    assert [(r["name"], r["verdict"], r["eligible_now"], r["eligible_after"]) for r in rep["workloads"]] == [
        ("cuda12-job", "loses-nodes", 2, 1),
    ]
    assert rep["counts"]["unschedulable-already"] == 1
    assert rep["counts"]["unconstrained"] == 1 and rep["stranded"] == []


def test_finished_job_is_reported_but_not_counted_as_stranded():
    # also FailureTarget (the Job is failing for good); and a work-queue Job with a success and no
    # active pod starts none
    for status in ({"conditions": [{"type": "FailureTarget", "status": "True"}]}, {"succeeded": 1, "active": 0}):
        j = job("w", CUDA12, parallelism=4, **status)
        j["spec"].pop("completions", None)
        (w,) = collect_workloads([], jobs=[j])
        assert w["replicas"] == 0, status
    done = job("cuda12-old", CUDA12, conditions=[{"type": "Complete", "status": "True"}], succeeded=1)
    rep = evaluate(
        [node("gpu-0")], {"gpu-0": {"driver_version": "580.95.05"}}, collect_workloads([], jobs=[done]), {"nvidia": NV}
    )
    assert rep["workloads"][0]["verdict"] == "stranded" and rep["workloads"][0]["replicas"] == 0
    assert rep["stranded"] == []


def test_owners_resolved_through_replicasets_and_bare_pods():
    dep = {
        "metadata": {"name": "infer", "namespace": "ml", "uid": "d1"},
        "spec": {"replicas": 3, "template": {"spec": CUDA12}},
    }
    rs = {
        "metadata": {
            "name": "infer-5d8f",
            "namespace": "ml",
            "uid": "rs1",
            "ownerReferences": [{"kind": "Deployment", "name": "infer", "uid": "d1", "controller": True}],
        }
    }
    ds_pod = pod("exporter-x", "gpu-0", CUDA12, {"kind": "DaemonSet", "name": "exporter", "uid": "ds1"})
    p1 = pod("infer-5d8f-a", "gpu-0", CUDA12, {"kind": "ReplicaSet", "name": "infer-5d8f", "uid": "rs1"})
    bare = pod("debug", "gpu-0", CUDA12)
    done = pod("old", "gpu-0", CUDA12, phase="Succeeded")
    custom = pod("train-w0", "gpu-0", CUDA12, {"kind": "PyTorchJob", "name": "train", "uid": "pt1"})
    wl = collect_workloads([ds_pod, p1, bare, done, custom], deployments=[dep], replicasets=[rs])
    assert sorted((w["kind"], w["name"], w["replicas"], len(w["pods"])) for w in wl) == [
        ("Deployment", "infer", 3, 1),
        ("Pod", "debug", 1, 1),
        ("PyTorchJob", "train", 1, 1),
    ]


def test_labels_after_rewrites_present_sets_only():
    lab = {
        MAJ: "550",
        MIN: "90",
        REV: "07",
        KFULL: "5.15.0-119-generic",
        "feature.node.kubernetes.io/kernel-version.major": "5",
        OSV: "22.04",
        OSV + ".major": "22",
        OSV + ".minor": "04",
        "nvidia.com/cuda.driver-version.full": "550.90.07",
    }
    out = labels_after(
        lab, {"driver_version": "580.95.05", "kernel_release": "6.8.0-52-generic", "os_version_id": "24.04"}, NV
    )
    assert out[MAJ] == "580" and out[MIN] == "95" and out[REV] == "05"
    assert out["nvidia.com/cuda.driver-version.full"] == "580.95.05"
    assert "nvidia.com/cuda.driver-version.major" not in out  # not published on this node before
    assert out[KFULL] == "6.8.0-52-generic" and out["feature.node.kubernetes.io/kernel-version.major"] == "6"
    assert "feature.node.kubernetes.io/kernel-version.minor" not in out
    assert (out[OSV], out[OSV + ".major"], out[OSV + ".minor"]) == ("24.04", "24", "04")
    # GFD publishes an empty .rev for a two-part version; a node without driver labels gets every set
    assert labels_after(lab, {"driver_version": "470.57"}, NV)[REV] == ""
    assert labels_after({}, {"driver_version": "580.95.05"}, NV) == {
        MAJ: "580", MIN: "95", REV: "05", "nvidia.com/cuda.driver-version.major": "580",
        "nvidia.com/cuda.driver-version.minor": "95", "nvidia.com/cuda.driver-version.revision": "05",
        "nvidia.com/cuda.driver-version.full": "580.95.05"}  # fmt: skip
    assert labels_after({}, {"driver_version": "3.0.0"}, RBLN) == {
        "rebellions.ai/driver-version.full": "3.0.0",
        "rebellions.ai/driver-version.major": "3",
        "rebellions.ai/driver-version.minor": "0",
        "rebellions.ai/driver-version.patch": "0",
    }


def test_bad_changes_are_refused_naming_the_node():
    with pytest.raises(ChangeError, match="planned node ghost is not a Node"):
        evaluate([node("gpu-0")], {"ghost": {"driver_version": "580.95.05"}}, [], {"nvidia": NV})
    for bad in ("latest", "580"):  # a branch alone says nothing of the minor / rev labels
        with pytest.raises(ChangeError, match="node gpu-0: driver_version '%s' is not a full driver version" % bad):
            evaluate([node("gpu-0")], {"gpu-0": {"driver_version": bad}}, [], {"nvidia": NV})
    npu = node("npu-0")
    del npu["metadata"]["labels"]["nvidia.com/gpu.present"]
    with pytest.raises(ChangeError, match=r"node npu-0 is not a nvidia node \(label nvidia.com/gpu.present is None"):
        evaluate([npu], {"npu-0": {"driver_version": "580.95.05"}}, [], {"nvidia": NV})
    with pytest.raises(ChangeError, match="node gpu-0: unknown vendor 'amd'"):
        evaluate([node("gpu-0")], {"gpu-0": {"driver_version": "580.95.05", "vendor": "amd"}}, [], {"nvidia": NV})
    with pytest.raises(ChangeError, match="node gpu-0: kernel_release 'new'"):
        labels_after({}, {"node": "gpu-0", "kernel_release": "new"}, NV)


def test_cuda_runtime_labels_follow_the_driver_branch_or_are_unpredictable():
    rt = "nvidia.com/cuda.runtime-version.major"
    nodes = [node("gpu-0", **{rt: "12", "nvidia.com/cuda.runtime-version.full": "12.4"})]
    needs12 = {"kind": "Deployment", "namespace": "ml", "name": "cuda12", "replicas": 1, "pods": [],
               "spec": affinity({"key": rt, "operator": "In", "values": ["12"]})}  # fmt: skip
    out = labels_after(nodes[0]["metadata"]["labels"], {"driver_version": "580.95.05"}, NV)
    assert (out[rt], out["nvidia.com/cuda.runtime-version.full"]) == ("13", "13.0")
    rep = evaluate(nodes, {"gpu-0": {"driver_version": "580.95.05"}}, [needs12], {"nvidia": NV})
    assert rep["stranded"] == ["Deployment ml/cuda12"]
    # a branch the table does not know: the CUDA labels after it cannot be known, never "unaffected"
    rep = evaluate(nodes, {"gpu-0": {"driver_version": "590.10.01"}}, [needs12], {"nvidia": NV})
    assert rep["workloads"][0]["verdict"] == "unpredictable" and rep["unpredictable"] == ["Deployment ml/cuda12"]


def test_custom_controller_judged_by_every_pod_not_the_first():
    owner = {"kind": "PyTorchJob", "name": "train", "uid": "pt1"}
    launcher = pod("train-launcher", "gpu-0", {"containers": []}, owner)
    workers = [pod("train-w%d" % i, "gpu-%d" % i, CUDA12, owner) for i in range(2)]
    for order in ([launcher] + workers, workers + [launcher]):
        rep = evaluate([node("gpu-0"), node("gpu-1")], {n: {"driver_version": "580.95.05"} for n in ("gpu-0", "gpu-1")},
                       collect_workloads(order), {"nvidia": NV})  # fmt: skip
        assert rep["stranded"] == ["PyTorchJob ml/train"] and rep["pods_on_unfit_nodes"] == 2, order


def test_cordoned_and_not_ready_nodes_take_no_pods():
    cordoned = node("g2")
    cordoned["spec"] = {"unschedulable": True}
    not_ready = node("g3")  # the node lifecycle controller's taints on a NotReady node
    not_ready["spec"] = {"taints": [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
                                    {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]}  # fmt: skip
    nodes = [node("g0"), node("g1"), cordoned, not_ready]
    wl = collect_workloads([], jobs=[job("cuda12-job", CUDA12)])
    rep = evaluate(nodes, {n: {"driver_version": "580.95.05"} for n in ("g0", "g1")}, wl, {"nvidia": NV})
    (r,) = rep["workloads"]
    assert (r["verdict"], r["eligible_now"], r["eligible_after"]) == ("stranded", 2, 0)
    # a planned node cordoned now (a resumed window) is schedulable after it
    rep = evaluate([node("g0"), cordoned], {"g2": {"driver_version": "550.163.01"}}, wl, {"nvidia": NV})
    assert (rep["workloads"][0]["verdict"], rep["workloads"][0]["eligible_after"]) == ("gains-nodes", 2)


def test_taints_and_tolerations_as_the_scheduler_filters_them():
    tainted = node("g1")
    tainted["spec"] = {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
                                  {"key": "team", "value": "a", "effect": "PreferNoSchedule"}]}  # fmt: skip
    plan = {"g0": {"driver_version": "580.95.05"}}
    wl = collect_workloads([], jobs=[job("cuda12-job", CUDA12)])
    # without a toleration only g0 takes the pods: moving g0 strands the job
    assert evaluate([node("g0"), tainted], plan, wl, {"nvidia": NV})["stranded"] == ["Job ml/cuda12-job"]
    for tol in ({"key": "nvidia.com/gpu", "operator": "Exists"}, {"operator": "Exists"},
                {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}):  # fmt: skip
        spec = dict(CUDA12, tolerations=[tol])
        rep = evaluate(
            [node("g0"), tainted], plan, collect_workloads([], jobs=[job("cuda12-job", spec)]), {"nvidia": NV}
        )
        assert rep["stranded"] == [] and rep["workloads"][0]["eligible_after"] == 1, tol
    wrong = dict(CUDA12, tolerations=[{"key": "nvidia.com/gpu", "value": "absent", "effect": "NoSchedule"}])
    rep = evaluate([node("g0"), tainted], plan, collect_workloads([], jobs=[job("cuda12-job", wrong)]), {"nvidia": NV})
    assert rep["stranded"] == ["Job ml/cuda12-job"]


def test_terminating_and_bare_pods_never_refuse_a_window():
    gone_pod = pod("old", "gpu-0", CUDA12)
    gone_pod["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    bare = pod("debug", "gpu-0", CUDA12)
    wl = collect_workloads([gone_pod, bare])
    assert [w["name"] for w in wl] == ["debug"]
    rep = evaluate([node("gpu-0")], {"gpu-0": {"driver_version": "580.95.05"}}, wl, {"nvidia": NV})
    assert rep["workloads"][0]["verdict"] == "stranded" and rep["stranded"] == []


def test_cronjob_judged_by_its_job_template():
    cj = {"metadata": {"name": "nightly", "namespace": "ml", "uid": "cj1"},
          "spec": {"jobTemplate": {"spec": {"template": {"spec": CUDA12}}}}}  # fmt: skip
    rep = evaluate([node("gpu-0")], {"gpu-0": {"driver_version": "580.95.05"}}, collect_workloads([], cronjobs=[cj]),
                   {"nvidia": NV})  # fmt: skip
    assert rep["stranded"] == ["CronJob ml/nightly"]
    cj["spec"]["suspend"] = True
    (w,) = collect_workloads([], cronjobs=[cj])
    assert w["replicas"] == 0


def test_per_node_pins_are_bounded_by_the_index():
    """1,000 workloads each pinned to one node of 5,000 by hostname: each reads its own node, not 5,000
    (the whole evaluation stays well under a second here; no timing assertion, a count instead)."""
    nodes = [node("n%04d" % i) for i in range(5000)]
    wl = [{"kind": "Deployment", "namespace": "ml", "name": "pin%d" % i, "replicas": 1, "pods": [],
           "spec": affinity({"key": "kubernetes.io/hostname", "operator": "In", "values": ["n%04d" % i]},
                            {"key": MAJ, "operator": "In", "values": ["550"]})} for i in range(1000)]  # fmt: skip
    from ansible_collections.npuops.fleet.plugins.module_utils.fleet import workload_compat as wc

    calls = {"n": 0}
    real = wc.NodeConstraints.matches

    def counting(self, labels, name=""):
        calls["n"] += 1
        return real(self, labels, name)

    wc.NodeConstraints.matches = counting
    try:
        rep = evaluate(nodes, {"n%04d" % i: {"driver_version": "580.95.05"} for i in range(5000)}, wl, {"nvidia": NV})
    finally:
        wc.NodeConstraints.matches = real
    assert len(rep["stranded"]) == 1000
    assert calls["n"] <= 2 * 1000 * 2, calls  # now and after, each workload's one candidate node
