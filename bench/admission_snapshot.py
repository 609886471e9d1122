#!/usr/bin/env python
"""Benchmark: what one admission decision reads from the API server, at 1,000 and 10,000 Nodes.

Creates BENCH_NODES (default "1000,10000") Node objects of the vendor (nvidia.com/gpu.present=true),
each padded to a realistic size (BENCH_NODE_KB, default 20: NFD/GFD labels, annotations, a status
with images and addresses). They are plain Node objects, not kwok-managed: no heartbeats load the
machine (their Ready state does not matter to what is measured). For every size:

* the full LIST of the vendor's Nodes (what admission read per decision before): bytes, seconds;
* the compact snapshot (plugins/module_utils/k8s/node_snapshot.py): the server-side Table LIST,
  and the two exact lists (nodes in an upgrade, cordoned nodes), bytes and seconds;
* the slot Lease read: bytes;
* one admission decision (admission.check_admission) in a fresh Python process, in both ways (the
  snapshot, and the full LIST through NodeSnapshot.full): peak resident memory (ru_maxrss) minus
  the same process's before the call, and the bytes it read.

Bytes per decision = slot Lease + exact lists (+ the Table once per MAX_AGE, shared by the lanes of
a control node). Writes build/bench/admission-snapshot.json. Exit 0 when a decision's bytes at the
largest size are within 2x of the smallest (the Table read amortised, as in a window) and far below
the full LIST. The nodes are deleted at the end (one deletecollection).
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from kubernetes import client, config

REPO = Path(__file__).resolve().parents[1]
COLL = REPO / "build" / "collections"
sys.path.insert(0, str(COLL))
LABEL = "npuops.io/bench-admission"
SIZES = [int(x) for x in os.environ.get("BENCH_NODES", "1000,10000").split(",")]
NODE_KB = int(os.environ.get("BENCH_NODE_KB", "20"))
PRESENCE = "nvidia.com/gpu.present"


def padded_node(name: str) -> dict:
    labels = {PRESENCE: "true", LABEL: "1", "kubernetes.io/hostname": name}
    for i in range(60):  # NFD's feature labels are of this order
        labels["feature.node.kubernetes.io/bench-%02d" % i] = "true"
    # annotations (flannel/calico, NFD's extended resources, cloud providers) fill the rest
    pad = "x" * max(0, NODE_KB * 1024 - 4000)
    return {
        "metadata": {"name": name, "labels": labels, "annotations": {"bench.npuops.io/pad": pad}},
        "status": {"capacity": {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": "8"}},
    }


def create(core: client.CoreV1Api, n: int, have: int) -> None:
    names = ["bench-adm-%05d" % i for i in range(have, n)]

    def one(name: str) -> None:
        for _attempt in range(5):
            try:
                core.create_node(padded_node(name))
                return
            except client.ApiException as e:
                if e.status == 409:
                    return
                time.sleep(1)

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(one, names))


DECIDE = r"""
import json, resource, sys, time
sys.path.insert(0, %(coll)r)
from kubernetes import client, config
config.load_kube_config()
core = client.CoreV1Api()
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import admission
from ansible_collections.npuops.fleet.plugins.module_utils.k8s import node_snapshot
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.policy import parse_policy
from ansible_collections.npuops.fleet.plugins.module_utils.driver.vendor_profiles import resolve_profile
prof = resolve_profile("nvidia")
mode = sys.argv[1]
read = []
orig = node_snapshot.NodeSnapshot.nodes
def nodes(self):
    out = self.full() if mode == "full" else orig(self)
    read.append(self.bytes)
    return out
node_snapshot.NodeSnapshot.nodes = nodes
if mode == "full":
    def full(self):
        resp = core.list_node(label_selector=self.selector, _preload_content=False)
        self.bytes += len(resp.data)
        return json.loads(resp.data).get("items") or []
    node_snapshot.NodeSnapshot.full = full
import tracemalloc
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
tracemalloc.start()
t0 = time.monotonic()
why = admission.check_admission(core, None, prof, parse_policy({"maxUnavailable": "100%%"}), "bench-adm-00000")
took = time.monotonic() - t0
peak = tracemalloc.get_traced_memory()[1]
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"rss_kib": after - before,
                  "python_peak_kib": peak // 1024, "seconds": round(took, 3), "bytes": sum(read), "verdict": why}))
"""


def decide(mode: str, cache_dir: str) -> dict:
    env = dict(os.environ, TMPDIR=cache_dir)
    out = subprocess.run(
        [sys.executable, "-c", DECIDE % {"coll": str(COLL)}, mode],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=600,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def measure(core: client.CoreV1Api, coord: client.CoordinationV1Api, n: int) -> dict:
    from ansible_collections.npuops.fleet.plugins.module_utils.driver.vendor_profiles import resolve_profile
    from ansible_collections.npuops.fleet.plugins.module_utils.k8s.node_snapshot import NodeSnapshot
    from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import admission

    prof = resolve_profile("nvidia")
    t0 = time.monotonic()
    full = core.list_node(label_selector=PRESENCE + "=true", _preload_content=False).data
    full_s = time.monotonic() - t0
    snap = NodeSnapshot(
        core, prof, admission.IN_PROGRESS_STATES + (admission.UPGRADE_REQUIRED,), cache_dir="/nonexistent"
    )
    t0 = time.monotonic()
    rows = snap._read_table()
    table_s, table_b = time.monotonic() - t0, snap.bytes
    snap.bytes = 0
    t0 = time.monotonic()
    snap._list(label_selector=snap.busy_selector)
    snap._list(label_selector=snap.selector, field_selector="spec.unschedulable=true")
    exact_s, exact_b = time.monotonic() - t0, snap.bytes
    try:
        lease_b = len(
            coord.read_namespaced_lease("npuops-fleet-admission-nvidia", "kube-system", _preload_content=False).data
        )
    except client.ApiException:
        lease_b = 0
    cache = "/tmp/npuops-bench-adm-cache"
    subprocess.run(["rm", "-rf", cache], check=False)
    os.makedirs(cache)
    cold = decide("snapshot", cache)  # reads the Table
    warm = decide("snapshot", cache)  # within MAX_AGE: the Table from the shared cache
    whole = decide("full", cache)
    return {
        "nodes": n,
        "vendor_nodes_listed": len(rows),
        "full_list": {"bytes": len(full), "seconds": round(full_s, 3)},
        "table": {
            "bytes": table_b,
            "seconds": round(table_s, 3),
            "bytes_per_node": round(table_b / max(1, len(rows)), 1),
        },
        "exact_lists": {"bytes": exact_b, "seconds": round(exact_s, 3)},
        "slot_lease_bytes": lease_b,
        "decision_bytes_warm": warm["bytes"] + lease_b,
        "decision_bytes_cold": cold["bytes"] + lease_b,
        # peak resident growth of the process, and the peak of Python allocations during the decision
        "decision_memory_kib": {
            "snapshot_cold": cold["rss_kib"],
            "snapshot_warm": warm["rss_kib"],
            "full_list": whole["rss_kib"],
        },
        "decision_python_peak_kib": {
            "snapshot_cold": cold["python_peak_kib"],
            "snapshot_warm": warm["python_peak_kib"],
            "full_list": whole["python_peak_kib"],
        },
        "decision_seconds": {
            "snapshot_cold": cold["seconds"],
            "snapshot_warm": warm["seconds"],
            "full_list": whole["seconds"],
        },
        "full_list_decision_bytes": whole["bytes"],
    }


def main() -> int:
    config.load_kube_config()
    core, coord = client.CoreV1Api(), client.CoordinationV1Api()
    results, have = [], 0
    try:
        for n in sorted(SIZES):
            t0 = time.monotonic()
            create(core, n, have)
            have = n
            print("created %d nodes in %.0f s" % (n, time.monotonic() - t0), flush=True)
            r = measure(core, coord, n)
            print(json.dumps(r), flush=True)
            results.append(r)
    finally:
        core.delete_collection_node(label_selector=LABEL + "=1")
    lo, hi = results[0], results[-1]
    ratio = hi["decision_bytes_warm"] / max(1, lo["decision_bytes_warm"])
    out = {"node_kib": NODE_KB, "sizes": results, "warm_decision_bytes_ratio_largest_vs_smallest": round(ratio, 2)}
    dest = REPO / "build" / "bench" / "admission-snapshot.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(out, indent=2) + "\n")
    print("wrote", dest)
    ok = ratio <= 2.0 and hi["decision_bytes_warm"] * 100 < hi["full_list"]["bytes"]
    print(
        "decision bytes (warm) %d -> %d nodes: %s -> %s (x%.2f); full LIST at %d: %s bytes"
        % (
            lo["nodes"],
            hi["nodes"],
            lo["decision_bytes_warm"],
            hi["decision_bytes_warm"],
            ratio,
            hi["nodes"],
            hi["full_list"]["bytes"],
        )
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
