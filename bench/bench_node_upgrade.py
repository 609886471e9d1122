#!/usr/bin/env python
"""Benchmark: Kubernetes API requests and wall time of one node's driver upgrade (npu_node_upgrade, issue 5).

On the lab: a 3-replica Deployment with a PDB (maxUnavailable 1) and an operand DaemonSet on the
device-plugin deploy label, then on one GPU node `prepare` (cordon, drain through the Eviction API,
operands paused), the host work simulated by publishing the target driver labels (as GFD would),
and `finish` (validation, operands back, uncordon) - each phase through ansible-playbook.
Counts: the module's own `api_requests` (every request its client sent, by method), and the
apiserver's `apiserver_request_total` before/after (all clients - controllers and kwok too - so an
upper bound; reported for comparison). The node and the objects are put back afterwards.
Exit 0 when the upgrade succeeds and the module needs <= BENCH_MAX_REQUESTS (default 80) requests.
Env: BENCH_NODE (lab-node-0), BENCH_TARGET (560.35.03), BENCH_MAX_REQUESTS, KUBECONFIG.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

from kubernetes import client, config

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))
from ansible_tasks import run_module  # noqa: E402

LAB_DIR = Path(os.environ.get("NPUOPS_LAB_DIR", "/tmp/npuops-lab"))
KUBECONFIG = os.environ.get("KUBECONFIG") or str(LAB_DIR / "kubeconfig")
NODE = os.environ.get("BENCH_NODE", "lab-node-0")
TARGET = os.environ.get("BENCH_TARGET", "560.35.03")
MAX_REQUESTS = int(os.environ.get("BENCH_MAX_REQUESTS", "80"))
NS = "gpu-drv"
DP = "nvidia.com/gpu.deploy.device-plugin"
DRIVER = ("nvidia.com/cuda.driver.major", "nvidia.com/cuda.driver.minor", "nvidia.com/cuda.driver.rev")
PREFIX = "nvidia.com/gpu-driver-upgrade"


def apiserver_requests(api: client.ApiClient) -> int:
    """Sum of apiserver_request_total over all series (client-certificate auth of the admin kubeconfig)."""
    resp = api.call_api("GET", api.configuration.host + "/metrics")
    resp.read()
    total = 0.0
    for line in resp.data.decode().splitlines():
        if line.startswith("apiserver_request_total{"):
            total += float(re.split(r"\s+", line)[-1])
    return int(total)


def wait(what, fn, timeout=90):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if fn():
            return
        time.sleep(0.5)
    raise RuntimeError("timed out: " + what)


def main() -> int:
    api = config.new_client_from_config(config_file=KUBECONFIG)
    core, apps, pol = client.CoreV1Api(api), client.AppsV1Api(api), client.PolicyV1Api(api)
    saved = core.read_node(NODE)
    labels0, ann0, unsched0 = (
        dict(saved.metadata.labels),
        dict(saved.metadata.annotations or {}),
        saved.spec.unschedulable,
    )
    app = {"app": "bench-upgrade"}
    apps.create_namespaced_deployment(
        NS,
        {
            "metadata": {"name": "bench-upgrade"},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": app},
                "template": {
                    "metadata": {"labels": app},
                    "spec": {
                        "affinity": {
                            "nodeAffinity": {
                                "preferredDuringSchedulingIgnoredDuringExecution": [
                                    {
                                        "weight": 100,
                                        "preference": {
                                            "matchExpressions": [
                                                {"key": "kubernetes.io/hostname", "operator": "In", "values": [NODE]}
                                            ]
                                        },
                                    }
                                ]
                            }
                        },
                        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
                    },
                },
            },
        },
    )
    pol.create_namespaced_pod_disruption_budget(
        NS, {"metadata": {"name": "bench-upgrade"}, "spec": {"maxUnavailable": 1, "selector": {"matchLabels": app}}}
    )
    apps.create_namespaced_daemon_set(
        NS,
        {
            "metadata": {"name": "bench-dp"},
            "spec": {
                "selector": {"matchLabels": {"app": "bench-dp"}},
                "template": {
                    "metadata": {"labels": {"app": "bench-dp"}},
                    "spec": {
                        "nodeSelector": {DP: "true"},
                        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
                    },
                },
            },
        },
    )
    phases: dict[str, dict] = {}
    ok = False
    try:
        wait(
            "bench pods running",
            lambda: (
                len(
                    [
                        p
                        for p in core.list_namespaced_pod(NS, label_selector="app=bench-upgrade").items
                        if p.status.phase == "Running"
                    ]
                )
                == 3
            ),
        )
        before = apiserver_requests(api)
        t_all = time.monotonic()
        policy = {"drain": {"enable": True, "timeoutSeconds": 120}, "maxUnavailable": "100%", "maxParallelUpgrades": 0}
        for phase, args in (("prepare", {"policy": policy}), ("finish", {})):
            if phase == "finish":
                core.patch_node(NODE, {"metadata": {"labels": dict(zip(DRIVER, TARGET.split(".")))}})
            t0 = time.monotonic()
            res = run_module(
                "npu_node_upgrade", dict(node=NODE, phase=phase, target_version=TARGET, **args), KUBECONFIG
            )
            phases[phase] = {
                "seconds": round(time.monotonic() - t0, 2),
                "api_requests": res.get("api_requests"),
                "state": res.get("state"),
                "failed": bool(res.get("failed")),
                "msg": res.get("msg"),
            }
            if res.get("failed"):
                raise RuntimeError("%s failed: %s" % (phase, res.get("msg")))
        total_s = round(time.monotonic() - t_all, 2)
        after = apiserver_requests(api)
        module_total = sum(sum((p["api_requests"] or {}).values()) for p in phases.values())
        by_method: dict[str, int] = {}
        for p in phases.values():
            for m, n in (p["api_requests"] or {}).items():
                by_method[m] = by_method.get(m, 0) + n
        result = {
            "bench": "node_upgrade",
            "node": NODE,
            "phases": phases,
            "seconds_total": total_s,
            "module_api_requests": module_total,
            "module_api_requests_by_method": by_method,
            "apiserver_request_total_delta_all_clients": after - before,
            "target_max": MAX_REQUESTS,
        }
        ok = module_total <= MAX_REQUESTS
        result["ok"] = ok
        print(json.dumps(result, indent=2))
        out = REPO / "build" / "bench"
        out.mkdir(parents=True, exist_ok=True)
        (out / "node_upgrade.json").write_text(json.dumps(result, indent=2))
        print(
            "node upgrade (%s): %d API requests by the module (%s), %ss end to end; apiserver saw %d requests "
            "from all clients meanwhile" % (NODE, module_total, by_method, total_s, after - before)
        )
    except Exception as exc:  # noqa: BLE001
        print("bench failed: %s; phases: %s" % (exc, json.dumps(phases)))
    finally:
        for fn, name in (
            (apps.delete_namespaced_deployment, "bench-upgrade"),
            (apps.delete_namespaced_daemon_set, "bench-dp"),
            (pol.delete_namespaced_pod_disruption_budget, "bench-upgrade"),
        ):
            try:
                fn(name, NS)
            except client.ApiException:
                pass
        node = core.read_node(NODE)
        now = node.metadata.labels or {}
        lp = {k: labels0.get(k) for k in set(now) | set(labels0) if now.get(k) != labels0.get(k)}
        ap = {k: None for k in (node.metadata.annotations or {}) if k.startswith(PREFIX) and k not in ann0}
        core.patch_node(
            NODE, {"metadata": {"labels": lp, "annotations": ap}, "spec": {"unschedulable": unsched0 or None}}
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
