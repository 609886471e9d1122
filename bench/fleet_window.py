#!/usr/bin/env python
"""Benchmark (make bench-fleet): the maintenance window over a mixed fleet of scratch lab hosts,
strict batches against the rolling window in one run, and what each host costs.

The fleet (tests/integration/fleetlab.py, real systemd hosts over SSH behind kwok Nodes):
BENCH_RELOAD (default 5) hosts 535 -> 550 by module reload, BENCH_REBOOT (2) the same with
reboot.enable (a reboot), one whose drain a PodDisruptionBudget holds for BENCH_HOLD_S (30) s after
its cordon, BENCH_AT_TARGET (2) already at 550 with upgrade-done. Width BENCH_WIDTH (2) =
maxParallelUpgrades; maxUnavailable = width + 1 (the hosts' own nodes only are at risk).

Runs, each measured with the callback bench/callback_plugins/npuops_costs.py (every task execution
per host with its times) and a watcher that samples the Nodes every 0.1 s (peaks of nodes cordoned or
in an upgrade, and in an upgrade):
  1. batches: -e maintenance_rollout=batches (Ansible's default forks)
  2. the fleet rebuilt to the same start, then rolling: --forks width+1
  3. a no-op rerun (rolling) over the finished fleet
  4. BENCH_LAB_NOOP=1 (default): the 4-host lab window twice (the second a no-op), scenario hosts restored after

Per host: task executions (ok + skipped, as the PLAY RECAP counts them), wall time in the upgrade
play, of it "unavoidable" (apt's install, the module unload/load or the reboot, and npu_node_upgrade's
prepare/finish calls, which hold the cluster waits: drain, validation) and the rest, overhead.
The ideal schedule = sum of the hosts' unavoidable time / width. How well rolling packs its lanes,
whatever a lane costs: the lanes' span (first lane's start to last lane's end) against the sum of the
lanes' lengths / width; the rest of the rolling wall time is the window's fixed cost. A model of 1,000 and 10,000 hosts
at width 1, 10, 50 follows from the measured per-host costs (said to be a model in its output).
Writes build/bench/fleet-<run>.json and build/bench/fleet-summary.json; prints a Markdown table.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

from kubernetes import client, config

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))
import fleetlab  # noqa: E402
from labhelpers import run_playbook  # noqa: E402

# build/collections is on sys.path once labhelpers is imported (labhelpers.link_collection)
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm  # noqa: E402

OUT = REPO / "build" / "bench"
WORK = Path(os.environ.get("BENCH_WORKDIR", "/tmp/npuops-bench-fleet"))
N_RELOAD = int(os.environ.get("BENCH_RELOAD", "5"))
N_REBOOT = int(os.environ.get("BENCH_REBOOT", "2"))
N_AT = int(os.environ.get("BENCH_AT_TARGET", "2"))
HOLD_S = float(os.environ.get("BENCH_HOLD_S", "30"))
WIDTH = int(os.environ.get("BENCH_WIDTH", "2"))
NS = "bench-fleet-%d" % os.getpid()  # a deleted namespace lingers while kwok's pods go
UNAVOIDABLE = (
    "Install the resolved package set",
    "Unload and load back the kernel modules",
    "Reboot the host",
    "Prepare the node for the driver upgrade",
    "Finish the upgrade of node",
    "Wait for kube-proxy",
)
UPGRADE_PLAY = "Maintenance window - upgrade"


def policy(reboot: bool) -> dict:
    return {
        "autoUpgrade": True,
        "maxParallelUpgrades": WIDTH,
        "maxUnavailable": WIDTH + 1,
        "waitForCompletion": {"timeoutSeconds": 0, "podSelector": ""},
        "gpuPodDeletion": {"force": False, "timeoutSeconds": 300, "deleteEmptyDirData": False},
        "drain": {"enable": True, "force": False, "deleteEmptyDirData": True, "podSelector": "", "timeoutSeconds": 600},
        "reboot": {"enable": reboot, "rebootTimeoutSeconds": 300},
    }


def spawn(core, names, at_target):
    def one(name):
        drv = fleetlab.NEW if name in at_target else fleetlab.OLD
        subprocess.run(
            [str(fleetlab.HOSTCTL), "spawn", name, "--node", "--kernel", fleetlab.OLD_KERNEL, "--driver", drv],
            capture_output=True,
            check=True,
            timeout=900,
        )

    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(one, names))
    want = {n: ("550" if n in at_target else "535") for n in names}
    deadline = time.time() + 180
    while time.time() < deadline:
        got = {n: (core.read_node(n).metadata.labels or {}).get("nvidia.com/cuda.driver.major") for n in names}
        if got == want:
            break
        time.sleep(1)
    else:
        raise RuntimeError("driver labels never showed %s" % want)
    for n in names:
        labels = {
            k: None for k in (core.read_node(n).metadata.labels or {}) if k.startswith("nvidia.com/gpu-driver-upgrade")
        }
        if n in at_target:
            labels[fleetlab.STATE] = sm.UPGRADE_DONE  # what the run that upgraded them left
        core.patch_node(n, {"metadata": {"labels": labels}, "spec": {"unschedulable": None}})


def rebuild(core, names, at_target):
    for n in names:
        subprocess.run([str(fleetlab.HOSTCTL), "rm", n], capture_output=True, check=False)
    spawn(core, names, at_target)


def inventory(path: Path, names, reboot):
    lines = ["all:", "  children:", "    gpu_nodes:", "      hosts:"]
    for n in names:
        lines.append("        %s:" % n)
        lines.append("          driver_upgrade_policy: %s" % json.dumps(policy(n in reboot)))
    path.write_text("\n".join(lines) + "\n")


def hold_thread(core, pol, node):
    def run():
        end = time.monotonic() + 1800
        while time.monotonic() < end and not core.read_node(node).spec.unschedulable:
            time.sleep(0.1)
        pol.patch_namespaced_pod_disruption_budget("held-pdb", NS, {"spec": {"maxUnavailable": 0}})
        time.sleep(HOLD_S)  # the scenario: a drain a PDB holds this long
        pol.patch_namespaced_pod_disruption_budget("held-pdb", NS, {"spec": {"maxUnavailable": 1}})

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def costs(path: Path, hosts) -> dict:
    data = json.loads(path.read_text())
    per = {}
    for h in hosts:
        rows = [r for r in data["tasks"] if r["host"] == h]
        up = [r for r in rows if r["play"].startswith(UPGRADE_PLAY)]
        execs = len([r for r in rows if r["status"] in ("ok", "skipped", "failed")])
        # a role's task is named "<role> : <name>"
        unavoidable = sum(
            r["end"] - r["start"]
            for r in up
            if r["task"].split(" : ", 1)[-1].startswith(UNAVOIDABLE) and r["status"] == "ok"
        )
        lane = (max(r["end"] for r in up) - min(r["start"] for r in up)) if up else 0.0
        per[h] = {
            "task_executions": execs,
            "task_executions_upgrade_play": len([r for r in up if r["status"] in ("ok", "skipped", "failed")]),
            "lane_s": round(lane, 1),
            # epoch seconds: the rolling schedule's span is the first lane's start to the last lane's end
            "lane_start": min(r["start"] for r in up) if up else None,
            "lane_end": max(r["end"] for r in up) if up else None,
            "unavoidable_s": round(unavoidable, 1),
            "overhead_s": round(max(0.0, lane - unavoidable), 1),
            "module_calls": len(
                [
                    r
                    for r in rows
                    if r["status"] == "ok"
                    and not r["action"].startswith(
                        (
                            "ansible.builtin.set_fact",
                            "set_fact",
                            "ansible.builtin.include_tasks",
                            "ansible.builtin.assert",
                            "ansible.builtin.debug",
                            "ansible.builtin.meta",
                        )
                    )
                ]
            ),
        }
    return {"wall_s": round(data["ended"] - data["started"], 1), "hosts": per}


def run_window(name, inv, hosts, extra, core):
    costs_file = WORK / ("costs-%s.json" % name)
    os.environ.update(
        ANSIBLE_CALLBACK_PLUGINS=str(REPO / "bench" / "callback_plugins"),
        ANSIBLE_CALLBACKS_ENABLED="npuops_costs",
        NPUOPS_COSTS_FILE=str(costs_file),
    )
    watcher = fleetlab.LimitWatcher(core).start()
    t0 = time.monotonic()
    kubeconfig = os.environ.get("KUBECONFIG") or str(
        Path(os.environ.get("NPUOPS_LAB_DIR", "/tmp/npuops-lab")) / "kubeconfig"
    )
    rc, out = run_playbook(
        "maintenance_window.yml",
        [str(REPO / "inventories" / "lab"), str(inv)],
        (f"maintenance_hosts={','.join(hosts)}", f"maintenance_report_dir={WORK / 'reports'}", *extra),
        kubeconfig,
        WORK,
        timeout=3600,
    )
    wall = time.monotonic() - t0
    watcher.stop()
    (WORK / ("out-%s.txt" % name)).write_text(out)
    res = costs(costs_file, hosts)
    summary = json.loads((WORK / "reports" / "latest.json").read_text())
    res.update(
        rc=rc,
        wall_s=round(wall, 1),
        result=summary["result"],
        statuses={h["host"]: h["status"] for h in summary["hosts"]},
        peak_unavailable=watcher.peak_unavailable,
        peak_upgrading=watcher.peak_upgrading,
        peak_not_ready=watcher.peak_not_ready,
        samples=watcher.samples,
    )
    (OUT / ("fleet-%s.json" % name)).write_text(json.dumps(res, indent=2) + "\n")
    print("%s: rc %d, %.1f s, %s" % (name, rc, wall, res["statuses"]), flush=True)
    return res


def model(per_host_work: list[float], overhead_s: float, execs: float, exec_cost_s: float = 0.022) -> dict:
    """A model, not a measurement: hosts drawn from the measured mix; strict batches wait for their
    slowest host, a rolling window starts a host as soon as a lane frees; the control node's main
    process spends execs x exec_cost_s per host (serial across lanes), which caps the hosts per hour."""
    rng = random.Random(7)
    out = {}
    for n in (1000, 10000):
        work = [rng.choice(per_host_work) + overhead_s for _attempt in range(n)]
        for w in (1, 10, 50):
            strict = sum(max(work[i : i + w]) for i in range(0, n, w))
            lanes = [0.0] * w
            for x in work:
                lanes[lanes.index(min(lanes))] += x
            rolling = max(lanes)
            cpu = n * execs * exec_cost_s  # the main process is one core
            out["%d hosts, width %d" % (n, w)] = {
                "strict_h": round(max(strict, cpu) / 3600, 2),
                "rolling_h": round(max(rolling, cpu) / 3600, 2),
            }
    out["control_node_cap_hosts_per_hour"] = round(3600 / (execs * exec_cost_s))
    return out


def lab_noop(core) -> dict:
    """The 4-host lab window twice; the second run is the no-op docs/docsite/rst/scale.rst quotes."""
    inv_dir = REPO / "inventories" / "lab"
    kubeconfig = os.environ.get("KUBECONFIG") or str(
        Path(os.environ.get("NPUOPS_LAB_DIR", "/tmp/npuops-lab")) / "kubeconfig"
    )
    res = {}
    for name in ("lab-first", "lab-noop"):
        costs_file = WORK / ("costs-%s.json" % name)
        os.environ["NPUOPS_COSTS_FILE"] = str(costs_file)
        t0 = time.monotonic()
        rc, out = run_playbook(
            "maintenance_window.yml",
            [str(inv_dir)],
            (f"maintenance_report_dir={WORK / 'reports'}",),
            kubeconfig,
            WORK,
            timeout=3600,
        )
        r = costs(costs_file, ["lab-node-0", "lab-node-1", "lab-node-2", "lab-npu-0"])
        r.update(rc=rc, wall_s=round(time.monotonic() - t0, 1))
        res[name] = r
        print("%s: rc %d, %.1f s" % (name, rc, r["wall_s"]), flush=True)
    # the scenario hosts back to their start (as the tests' restore fixture)
    sys.path.insert(0, str(REPO / "tests" / "integration"))
    from test_maintenance_window import restore_host

    for n in ("lab-node-1", "lab-npu-0"):
        restore_host(core, n)
    (OUT / "fleet-lab-noop.json").write_text(json.dumps(res, indent=2) + "\n")
    return res


def main() -> int:
    config.load_kube_config()
    core, apps, pol = client.CoreV1Api(), client.AppsV1Api(), client.PolicyV1Api()
    OUT.mkdir(parents=True, exist_ok=True)
    WORK.mkdir(parents=True, exist_ok=True)
    zones = ["zone-a", "zone-b", "zone-c"]
    total = N_RELOAD + N_REBOOT + 1 + N_AT
    names = []
    for i in range(total):
        names += fleetlab.create_kwok_nodes(
            core,
            "bench-fl",
            1,
            capacity=fleetlab.GPU_CAPACITY,
            labels={"nvidia.com/gpu.present": "true", fleetlab.ZONE: zones[i % 3]},
        )
    held = names[0]
    reboot = set(names[1 : 1 + N_REBOOT])
    at_target = set(names[total - N_AT :])
    inv = WORK / "fleet.yml"
    inventory(inv, names, reboot)
    results = {}
    try:
        core.create_namespace({"metadata": {"name": NS}})
        # the held pod after its host: a Node taken over by the lab's node agent restarts its pods' view
        spawn(core, names, at_target)
        fleetlab.held_workload(apps, pol, held, NS)
        t = hold_thread(core, pol, held)
        results["batches"] = run_window("batches", inv, names, ("maintenance_rollout=batches",), core)
        t.join(60)
        apps.delete_namespaced_deployment("held", NS)
        pol.delete_namespaced_pod_disruption_budget("held-pdb", NS)
        rebuild(core, names, at_target)
        fleetlab.held_workload(apps, pol, held, NS)
        t = hold_thread(core, pol, held)
        results["rolling"] = run_window(
            "rolling", inv, names, ("maintenance_rollout=rolling", "--forks=%d" % (WIDTH + 1)), core
        )
        t.join(60)
        results["noop"] = run_window(
            "noop", inv, names, ("maintenance_rollout=rolling", "--forks=%d" % (WIDTH + 1)), core
        )
    finally:
        for n in names:
            subprocess.run([str(fleetlab.HOSTCTL), "rm", n], capture_output=True, check=False)
        fleetlab.delete_nodes(core, names)
        try:
            core.delete_namespace(NS)
        except client.ApiException:
            pass
    if os.environ.get("BENCH_LAB_NOOP", "1") == "1":
        results["lab"] = lab_noop(core)

    return summarize(results, names)


def summarize(results: dict, names: list[str]) -> int:
    """The summary of one bench run (names in inventory order: the held host, the reboot hosts, ...,
    the hosts at target last), from the per-host costs; also `fleet_window.py --summarize`, which
    reads the run's files again."""
    total = len(names)
    held = names[0]
    reboot = set(names[1 : 1 + N_REBOOT])
    at_target = set(names[total - N_AT :])
    work_hosts = [n for n in names if n not in at_target]
    roll = results["rolling"]["hosts"]
    # per host from the batches run: there no host queues for admission inside prepare (each batch
    # fits the limits), so prepare's time is its drain and cluster waits alone
    strict = results["batches"]["hosts"]
    unavoidable = [strict[h]["unavoidable_s"] for h in work_hosts]
    ideal = sum(unavoidable) / WIDTH
    reload_hosts = [h for h in work_hosts if h not in reboot and h != held]
    upgraded_execs = sum(roll[h]["task_executions"] for h in work_hosts) / len(work_hosts)
    at_execs = max(results["noop"]["hosts"][h]["task_executions"] for h in names)
    overhead_reload = sum(strict[h]["overhead_s"] for h in reload_hosts) / max(1, len(reload_hosts))
    # How well the rolling window packs its lanes, whatever each lane costs: the rolling lanes' span
    # against the sum of the lanes' lengths / width (1.0 = the width in flight from the first lane's start to the
    # last one's end); the rest of the wall time is the window's fixed cost (Lease, fleet preflight, summary).
    spans = [(roll[h]["lane_start"], roll[h]["lane_end"]) for h in work_hosts if roll[h].get("lane_start")]
    span = (max(e for _s, e in spans) - min(st for st, _e in spans)) if spans else 0.0
    # a lane's length from the batches run, where no lane queues for admission inside prepare
    packed = sum(strict[h]["lane_s"] for h in work_hosts) / WIDTH
    summary = {
        "fleet": {
            "hosts": total,
            "reload": N_RELOAD,
            "reboot": N_REBOOT,
            "pdb_held": 1,
            "at_target": N_AT,
            "width": WIDTH,
            "hold_s": HOLD_S,
        },
        "wall_s": {k: results[k]["wall_s"] for k in ("batches", "rolling", "noop")},
        "ideal_schedule_s": round(ideal, 1),
        "rolling_vs_ideal": round(results["rolling"]["wall_s"] / ideal, 2) if ideal else None,
        "rolling_vs_batches": round(results["rolling"]["wall_s"] / results["batches"]["wall_s"], 2),
        "rolling_lanes_span_s": round(span, 1),
        "rolling_lanes_vs_packed": round(span / packed, 2) if packed else None,
        "rolling_fixed_s": round(results["rolling"]["wall_s"] - span, 1),
        "task_executions_per_upgraded_host": round(upgraded_execs, 1),
        "task_executions_per_host_at_target": at_execs,
        "overhead_s_per_reload_host": round(overhead_reload, 1),
        "peaks": {
            k: {"unavailable": results[k]["peak_unavailable"], "upgrading": results[k]["peak_upgrading"]}
            for k in ("batches", "rolling")
        },
        "limits": {"maxUnavailable": WIDTH + 1, "maxParallelUpgrades": WIDTH},
        "lab_noop_s": results.get("lab", {}).get("lab-noop", {}).get("wall_s"),
        "model (not a measurement)": model(
            [strict[h]["unavoidable_s"] for h in work_hosts], overhead_reload, upgraded_execs
        ),
    }
    (OUT / "fleet-summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    ok = all(
        summary["peaks"][k]["unavailable"] <= WIDTH + 1 and summary["peaks"][k]["upgrading"] <= WIDTH
        for k in summary["peaks"]
    )
    return 0 if ok and results["rolling"]["result"] == "ok" else 1


def resummarize() -> int:
    """Recompute the per-host costs and the summary from the files of the last run in WORK."""
    names = [
        ln.strip().rstrip(":")
        for ln in (WORK / "fleet.yml").read_text().splitlines()
        if ln.startswith("        ") and not ln.startswith("          ")
    ]
    results = {}
    for name in ("batches", "rolling", "noop"):
        res = json.loads((OUT / ("fleet-%s.json" % name)).read_text())
        res.update(costs(WORK / ("costs-%s.json" % name), names))
        (OUT / ("fleet-%s.json" % name)).write_text(json.dumps(res, indent=2) + "\n")
        results[name] = res
    if (OUT / "fleet-lab-noop.json").exists():
        results["lab"] = json.loads((OUT / "fleet-lab-noop.json").read_text())
    return summarize(results, names)


if __name__ == "__main__":
    sys.exit(resummarize() if sys.argv[1:] == ["--summarize"] else main())
