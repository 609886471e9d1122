#!/usr/bin/env python
"""Benchmark: npu_workload_compat on 5,000 GPU nodes and 20,000 pods (a whole-fleet window plan).

1. Creates N (default 5,000) GPU nodes with the labels NFD/GFD set (bench_audit.node_body: 550.90.07
   and 535.183.06, Ubuntu 22.04 and 24.04, no kwok heartbeat) and P (default 20,000) pods bound to
   them (spec.nodeName: no scheduler, no kubelet; they stay Pending, which the check reads the same),
   in parallel through the Python client, owned by 200 training jobs of a custom controller (100 pods
   each): 40 % pinned like cuda12-job (driver.major In [550], VERSION_ID In [22.04]), 20 % needing
   Gt 560 like cuda13-job, 40 % unconstrained; plus 100 Deployments with 0 replicas whose templates
   carry the same constraints.
2. Runs npu_workload_compat through ansible-playbook with every node planned to 580.95.05, twice
   (the first run warms the page cache; the second is measured), and once with a namespace holding
   nothing (Ansible's start-up and the node LIST: the baseline of the same run).
3. Deletes the pods, Deployments, namespace and nodes, also on failure / Ctrl-C.

Exit 0 when the module's own time (its ``elapsed``: every paginated LIST plus the evaluation) is
< 10 s and it reported every pinned training job as stranded. Env: BENCH_NODES (5000), BENCH_PODS (20000),
BENCH_THREADS (16), KUBECONFIG.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml
from bench_audit import KUBECONFIG, REPO, delete_nodes, node_body, settle
from kubernetes import client, config

N = int(os.environ.get("BENCH_NODES", "5000"))
P = int(os.environ.get("BENCH_PODS", "20000"))
THREADS = int(os.environ.get("BENCH_THREADS", "16"))
NS, EMPTY_NS = "bench-compat", "bench-compat-empty"
TARGET_S = 10.0
MAJ, OSV = "nvidia.com/cuda.driver.major", "feature.node.kubernetes.io/system-os_release.VERSION_ID"
# every constrained workload also names the bench nodes' label: the lab's own nodes never match
BENCH = {"key": "npuops.io/bench", "operator": "In", "values": ["audit"]}
CUDA12 = [{"key": MAJ, "operator": "In", "values": ["550"]}, {"key": OSV, "operator": "In", "values": ["22.04"]}, BENCH]
CUDA13 = [{"key": MAJ, "operator": "Gt", "values": ["560"]}, BENCH]
OWNERS = 200  # the pods belong to 200 training jobs of a custom controller (100 pods each)


def _affinity(exprs):
    if not exprs:
        return None
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": exprs}]}
        }
    }


def kind_of(i: int) -> tuple[str, list]:
    r = i % 10
    return ("cuda12", CUDA12) if r < 4 else ("cuda13", CUDA13) if r < 6 else ("free", [])


def owner_body(j: int) -> dict:
    # A ConfigMap stands in for a custom controller's object (a PyTorchJob): the garbage collector
    # keeps pods whose controller exists, and the check judges such a workload by its pods.
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "train-%03d" % j}}


def pod_body(i: int, owners: dict) -> dict:
    j = i % OWNERS
    kind, exprs = kind_of(j)
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "train-%03d" % j, "uid": owners[j], "controller": True}
    spec = {
        "nodeName": "bench-gpu-%05d" % (i % N),
        "containers": [{"name": "c", "image": "registry.invalid/x:1"}],
        "tolerations": [{"operator": "Exists"}],
    }
    if exprs:
        spec["affinity"] = _affinity(exprs)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "%s-%05d" % (kind, i), "labels": {"k": kind}, "ownerReferences": [ref]},
        "spec": spec,
    }


def deployment_body(i: int) -> dict:
    kind, exprs = kind_of(i)
    tmpl = {"containers": [{"name": "c", "image": "registry.invalid/x:1"}]}
    if exprs:
        tmpl["affinity"] = _affinity(exprs)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "dep-%s-%03d" % (kind, i)},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"d": str(i)}},
            "template": {"metadata": {"labels": {"d": str(i)}}, "spec": tmpl},
        },
    }


def parallel(fn, items) -> float:
    t0 = time.monotonic()

    def one(x):
        for attempt in range(6):
            try:
                fn(x)
                return
            except client.ApiException as e:
                if e.status == 409:
                    return
                if e.status in (429, 500, 503, 504) and attempt < 5:
                    time.sleep(0.2 * (attempt + 1))
                    continue
                raise

    with ThreadPoolExecutor(THREADS) as ex:
        list(ex.map(one, items))
    return time.monotonic() - t0


def run_check(namespaces: list[str]) -> tuple[float, dict]:
    changes = [{"node": "bench-gpu-%05d" % i, "driver_version": "580.95.05"} for i in range(N)]
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "connection": "local",
            "tasks": [
                {
                    "name": "compat",
                    "npuops.fleet.npu_workload_compat": {
                        "changes": changes,
                        "namespaces": namespaces,
                        "kubeconfig": KUBECONFIG,
                    },
                }
            ],
        }
    ]
    with tempfile.TemporaryDirectory() as tmp:
        pb = Path(tmp) / "compat.yml"
        pb.write_text(yaml.safe_dump(play))
        env = dict(
            os.environ,
            ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
            ANSIBLE_COLLECTIONS_PATH=str(REPO / "build" / "collections"),
            ANSIBLE_PYTHON_INTERPRETER=sys.executable,
            ANSIBLE_LOCALHOST_WARNING="False",
        )
        t0 = time.monotonic()
        p = subprocess.run(
            [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", str(pb)],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        wall = time.monotonic() - t0
    out = json.loads(p.stdout[p.stdout.index("{") :])
    res = out["plays"][0]["tasks"][0]["hosts"]["localhost"]
    if res.get("failed"):
        raise SystemExit("bench: npu_workload_compat failed: %s" % res.get("msg"))
    return wall, res


def wait_namespaces_gone(core: client.CoreV1Api, timeout: float = 600) -> None:
    """Deleting 20,000 pods takes the namespace controller minutes: a rerun waits for the last run's."""
    t0 = time.monotonic()
    while any(ns.metadata.name in (NS, EMPTY_NS) for ns in core.list_namespace().items):
        if time.monotonic() - t0 > timeout:
            raise SystemExit("bench: namespaces %s, %s still terminating after %.0f s" % (NS, EMPTY_NS, timeout))
        time.sleep(2)


def cleanup(core: client.CoreV1Api, apps: client.AppsV1Api) -> None:
    for ns in (NS, EMPTY_NS):
        for call, args in (
            (core.delete_collection_namespaced_pod, {"grace_period_seconds": 0}),
            (apps.delete_collection_namespaced_deployment, {}),
            (core.delete_collection_namespaced_config_map, {}),
            (core.delete_namespace, {}),
        ):
            try:
                call(ns, _preload_content=False, **args)
            except client.ApiException as e:
                # 404: gone; 504: a collection delete that outlives the request goes on server-side
                if e.status not in (404, 504):
                    raise
    delete_nodes(core)  # the namespaces go on terminating; a rerun waits for them at its start


def main() -> int:
    api = config.new_client_from_config(config_file=KUBECONFIG)
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    result: dict = {"nodes": N, "pods": P}
    wait_namespaces_gone(core)
    try:
        for ns in (NS, EMPTY_NS):
            try:
                core.create_namespace({"metadata": {"name": ns}})
            except client.ApiException as e:
                if e.status != 409:
                    raise
        result["create_nodes_s"] = round(
            parallel(lambda i: core.create_node(node_body(i), _preload_content=False), range(N)), 1
        )
        owners = {j: core.create_namespaced_config_map(NS, owner_body(j)).metadata.uid for j in range(OWNERS)}
        result["create_pods_s"] = round(
            parallel(lambda i: core.create_namespaced_pod(NS, pod_body(i, owners), _preload_content=False), range(P)), 1
        )
        parallel(
            lambda i: apps.create_namespaced_deployment(NS, deployment_body(i), _preload_content=False), range(100)
        )
        print(
            "created %d nodes in %.1f s, %d pods in %.1f s (%d threads)"
            % (N, result["create_nodes_s"], P, result["create_pods_s"], THREADS)
        )
        print("apiserver settled after %.0f s" % settle(api))
        run_check([NS])  # warm-up, not measured
        base_wall, base = run_check([EMPTY_NS])
        wall, res = run_check([NS])
    finally:
        cleanup(core, apps)
        print("deleted the bench objects")

    pinned = sum(1 for j in range(OWNERS) if kind_of(j)[0] == "cuda12")
    stranded_jobs = len(res["stranded"])
    result.update(
        wall_s=round(wall, 2),
        module_elapsed_s=res["elapsed"],
        api_requests=res["api_requests"],
        baseline_wall_s=round(base_wall, 2),
        baseline_module_elapsed_s=base["elapsed"],
        counts=res["counts"],
        stranded_jobs=stranded_jobs,
        pinned_jobs=pinned,
        pods_on_unfit_nodes=res["pods_on_unfit_nodes"],
        module_cost_over_baseline=round(res["elapsed"] / max(base["elapsed"], 0.001), 1),
        target_s=TARGET_S,
    )
    print()
    print("npu_workload_compat, %d nodes planned to 580.95.05, %d pods (+100 Deployments)" % (N, P))
    print("  module elapsed (every LIST page + evaluation)  %7.2f s   (target < %.0f s)" % (res["elapsed"], TARGET_S))
    print("  wall time (ansible-playbook end to end)        %7.2f s" % wall)
    print(
        "  baseline: same task, empty namespace (nodes LIST only): module %.2f s, wall %.2f s"
        % (base["elapsed"], base_wall)
    )
    print("  API requests %d; counts %s" % (res["api_requests"], res["counts"]))
    print(
        "  stranded training jobs %d of %d pinned; pods on nodes they would no longer fit %d"
        % (stranded_jobs, pinned, res["pods_on_unfit_nodes"])
    )
    out = REPO / "build" / "bench" / "workload_compat.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    ok = res["elapsed"] < TARGET_S and stranded_jobs == pinned
    print("bench: %s (%s)" % ("OK" if ok else "FAILED", out))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
