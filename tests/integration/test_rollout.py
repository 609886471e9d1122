"""The rolling window on scratch hosts (tests/integration/fleetlab.py): lanes pass a drain that a
PodDisruptionBudget holds, the limits hold at every moment (sampled every 0.1 s by a watcher that
does not use the product's admission code), a rerun over the finished hosts touches no host beyond
the preflight, and a failure starts no new host while the hosts in flight finish.
"""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest
from fleetlab import NEW, STATE, LimitWatcher, dpkg_fails_when_told, held_workload, recap, scratch_fleet, window
from kubernetes import client, watch

from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm

WINDOW_LEASE = "npuops-fleet-maintenance-window"
POLICY = {
    "autoUpgrade": True,
    "maxParallelUpgrades": 2,
    "maxUnavailable": 2,
    "waitForCompletion": {"timeoutSeconds": 0, "podSelector": ""},
    "gpuPodDeletion": {"force": False, "timeoutSeconds": 300, "deleteEmptyDirData": False},
    "drain": {"enable": True, "force": False, "deleteEmptyDirData": True, "podSelector": "", "timeoutSeconds": 300},
    "reboot": {"enable": False, "rebootTimeoutSeconds": 300},
}
ROLLING = ("maintenance_rollout=rolling", "--forks=3", {"driver_upgrade_policy": POLICY})


@pytest.fixture
def kubeconfig(sa_kubeconfig):
    return sa_kubeconfig(shipped=True)


@pytest.fixture
def namespace(core_v1):
    ns = "rollout-it-" + uuid.uuid4().hex[:5]  # a deleted namespace lingers while kwok's pods go
    core_v1.create_namespace({"metadata": {"name": ns}})
    yield ns
    core_v1.delete_namespace(ns)


def ran(out, task):
    """Result lines other than "skipping" under every TASK header that names ``task``."""
    lines = []
    for block in out.split("TASK [")[1:]:
        head, _sep, body = block.partition("\n")
        if task in head:
            lines += [ln for ln in body.splitlines() if ln.startswith(("ok:", "changed:", "failed:", "fatal:"))]
    return lines


def summary(workdir):
    s = json.loads((workdir / "reports" / "latest.json").read_text())
    return s, {h["host"]: h for h in s["hosts"]}


def test_rolling_lanes_pass_a_drain_held_by_a_pdb_and_a_rerun_touches_no_host(
    kubeconfig, core_v1, apps_v1, policy_v1, coordination_v1, namespace, tmp_path
):
    zones = ["zone-a", "zone-b", "zone-c", "zone-a", "zone-b", "zone-c"]
    with scratch_fleet(core_v1, "lab-roll", zones, tmp_path) as names:
        held = names[0]
        held_workload(apps_v1, policy_v1, held, namespace)
        watcher = LimitWatcher(core_v1).start()
        hold = {}

        def hold_the_drain():
            # once the held node is cordoned its PDB allows nothing, until two other hosts are done
            end = time.monotonic() + 900
            while time.monotonic() < end and not core_v1.read_node(held).spec.unschedulable:
                time.sleep(0.1)
            policy_v1.patch_namespaced_pod_disruption_budget("held-pdb", namespace, {"spec": {"maxUnavailable": 0}})
            hold["from"] = time.monotonic()
            while (
                time.monotonic() < end
                and len([n for n, t in watcher.left.items() if n != held and t > hold["from"]]) < 2
            ):
                time.sleep(0.2)
            policy_v1.patch_namespaced_pod_disruption_budget("held-pdb", namespace, {"spec": {"maxUnavailable": 1}})
            hold["until"] = time.monotonic()

        holder = threading.Thread(target=hold_the_drain, daemon=True)
        holder.start()
        try:
            rc, out, _took = window(tmp_path, kubeconfig, names, *ROLLING)
        finally:
            watcher.stop()
            holder.join(30)
        assert rc == 0, out[-6000:]
        s, hosts = summary(tmp_path)
        assert (s["rollout"], s["batch_size"], s["result"]) == ("rolling", 2, "ok")
        assert {h: (hosts[h]["status"], hosts[h]["new_version"]) for h in names} == {
            h: ("upgraded", NEW) for h in names
        }
        # the limits, as an independent watcher saw the nodes
        assert watcher.samples > 100 and watcher.peak_upgrading <= 2, vars(watcher)
        assert watcher.peak_unavailable <= 2, (watcher.peak_unavailable, watcher.unavailable_at_peak)
        print(
            "watcher:",
            watcher.samples,
            "samples, peaks: unavailable",
            watcher.peak_unavailable,
            "upgrading",
            watcher.peak_upgrading,
            "not ready",
            watcher.peak_not_ready,
        )
        assert watcher.peak_upgrading == 2, "two lanes never ran at once"
        # the other lanes passed the held drain: two hosts finished while it was held, and it after
        assert {"from", "until"} <= set(hold), hold
        passed = [n for n, t in watcher.left.items() if n != held and hold["from"] < t <= hold["until"]]
        assert len(passed) >= 2, (passed, watcher.left, hold)
        assert watcher.left[held] > hold["until"]
        # lanes spread by zone: no two hosts in a row from one zone (the order they were offered to
        # admission; which of two waiting hosts a decision takes first is admission's)
        zone = dict(zip(names, zones))
        seq = [zone[n] for n in s["lanes"]]
        assert sorted(s["lanes"]) == sorted(names) and all(a != b for a, b in zip(seq, seq[1:])), s["lanes"]

        # a rerun over the finished hosts: the preflight and nothing more
        before = {n: core_v1.read_node(n).metadata.resource_version for n in names}
        writes = []

        def count_lease_writes():
            # until the window is closed (its holder cleared after this run held it); the first event of
            # a Lease that exists already (closed by an earlier window) is the watch's own ADDED
            w = watch.Watch()
            held = False
            for ev in w.stream(
                coordination_v1.list_namespaced_lease,
                "kube-system",
                field_selector="metadata.name=" + WINDOW_LEASE,
                timeout_seconds=900,
            ):
                holder = ev["object"].spec.holder_identity
                writes.append((ev["type"], holder))
                held = held or bool(holder)
                if ev["type"] == "DELETED" or (held and not holder):
                    w.stop()

        counter = threading.Thread(target=count_lease_writes, daemon=True)
        counter.start()
        time.sleep(1)  # the watch is established before the run takes its Lease
        rc, out, _took = window(tmp_path, kubeconfig, names, *ROLLING)
        counter.join(60)
        assert rc == 0, out[-6000:]
        s, hosts = summary(tmp_path)
        assert {hosts[h]["status"] for h in names} == {"already-at-target"}, hosts
        assert ran(out, "Prepare the node for the driver upgrade") == []
        upgrade_play = out.split("PLAY [Maintenance window - upgrade", 1)[1].split("PLAY [", 1)[0]
        assert "skipping: no hosts matched" in upgrade_play, upgrade_play[:2000]
        assert {n: core_v1.read_node(n).metadata.resource_version for n in names} == before
        # taken, renewed once with the window's TTL, closed: not one write per host
        taken = next(i for i, (_t, h) in enumerate(writes) if h)
        assert len(writes[taken:]) <= 3 and writes[-1][1] is None, writes
        r = recap(out)
        cost = {n: r[n]["ok"] + r[n]["skipped"] for n in names}
        print("task executions per host at target:", cost)
        # the short route: a node read, a host read, a check-mode prepare, a decision and the play's own
        # few; one host also carries the run_once tasks of the preflight play
        assert all(c <= 10 for c in sorted(cost.values())[:-1]), cost


def test_a_failure_in_a_rolling_window_starts_no_new_host_and_finishes_those_in_flight(
    kubeconfig, core_v1, namespace, tmp_path
):
    from test_host_lost import hx

    zones = ["zone-a", "zone-b", "zone-c", "zone-a", "zone-b"]
    with scratch_fleet(core_v1, "lab-rfail", zones, tmp_path) as names:
        bad = names[0]
        # dpkg refuses to run on this host (apt's simulation in the preflight does not run dpkg), once
        # another host is in flight: so the failure comes at install, after its node was cordoned and
        # drained, while a lane of another host is in the middle of its upgrade
        dpkg_fails_when_told(bad)
        watcher = LimitWatcher(core_v1).start()

        def go_when_another_is_in_flight():
            end = time.monotonic() + 900
            while time.monotonic() < end and not (watcher.busy_now - {bad}):
                time.sleep(0.1)
            hx(bad, "touch /run/npuops-it-go")

        gate = threading.Thread(target=go_when_another_is_in_flight, daemon=True)
        gate.start()
        try:
            rc, out, _took = window(tmp_path, kubeconfig, names, *ROLLING)
        finally:
            watcher.stop()
            gate.join(30)
        assert rc != 0
        s, hosts = summary(tmp_path)
        assert hosts[bad]["status"] == "failed" and hosts[bad]["failed_phase"] == "install", hosts[bad]
        failed_at = watcher.failed[bad]
        # no host entered an upgrade after the failure; those that had, finished
        late = {n: round(t - failed_at, 1) for n, t in watcher.entered.items() if n != bad and t > failed_at}
        assert not late, late
        started = [n for n in names if n in watcher.entered and n != bad]
        assert started and all(hosts[n]["status"] == "upgraded" for n in started), hosts
        not_started = [n for n in names if n not in watcher.entered]
        assert not_started, ("every host started before the failure", hosts, watcher.entered, failed_at)
        for n in not_started:
            assert hosts[n]["status"] == "not-started" and f"failure on {bad}" in hosts[n]["reason"], hosts[n]
            node = core_v1.read_node(n)
            assert (node.metadata.labels or {}).get(STATE) is None and not node.spec.unschedulable, node.metadata.labels
        assert watcher.peak_unavailable <= 2 and watcher.peak_upgrading <= 2, vars(watcher)
        assert (tmp_path / "reports" / s["run_id"] / "stop").read_text().startswith(f"failure on {bad}")
        # the admission record holds no entry for these nodes
        lease = client.CoordinationV1Api(core_v1.api_client).read_namespaced_lease(
            "npuops-fleet-admission-nvidia", "kube-system"
        )
        entries = json.loads((lease.metadata.annotations or {}).get("npuops.io/admitted-nodes") or "{}")
        assert not set(entries) & set(names), entries


def test_a_rolling_window_killed_mid_upgrade_is_resumed_by_a_rerun_and_leaks_no_slot(
    kubeconfig, core_v1, coordination_v1, namespace, tmp_path
):
    import os
    import signal
    import subprocess

    from labhelpers import REPO, playbook_command

    zones = ["zone-a", "zone-b", "zone-c"]
    with scratch_fleet(core_v1, "lab-rkill", zones, tmp_path) as names:
        cmd, env = playbook_command(
            "maintenance_window.yml",
            [str(REPO / "inventories" / "lab"), str(tmp_path / "fleet.yml")],
            (f"maintenance_hosts={','.join(names)}", f"maintenance_report_dir={tmp_path / 'reports'}", *ROLLING),
            kubeconfig,
        )
        watcher = LimitWatcher(core_v1).start()
        log = open(tmp_path / "killed.txt", "w")
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(tmp_path), start_new_session=True
        )
        try:
            # SIGKILL the whole run (ansible-playbook, its forks, the modules) while two lanes are in
            # the middle of their upgrade
            end = time.monotonic() + 900
            while time.monotonic() < end and len(watcher.busy_now & set(names)) < 2 and proc.poll() is None:
                time.sleep(0.1)
            time.sleep(3)
            assert proc.poll() is None, "the window ended before two lanes were in flight"
            in_flight = sorted(watcher.busy_now & set(names))
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
        finally:
            log.close()
        assert in_flight, "no lane was in flight at the kill"
        lease = coordination_v1.read_namespaced_lease(WINDOW_LEASE, "kube-system")
        holder = lease.spec.holder_identity
        states = {n: (core_v1.read_node(n).metadata.labels or {}).get(STATE) for n in names}
        assert any(states[n] not in (None, sm.UPGRADE_DONE) for n in in_flight), states

        rc, out, _took = window(tmp_path, kubeconfig, names, *ROLLING, f"maintenance_take_over={holder}")
        watcher.stop()
        assert rc == 0, out[-6000:]
        s, hosts = summary(tmp_path)
        assert {h: hosts[h]["status"] for h in names} == {h: "upgraded" for h in names}, hosts
        assert s["previous_run"] == holder and set(s["found_unfinished"]) >= {
            n for n in in_flight if states[n] not in (None, sm.UPGRADE_DONE)
        }
        for n in names:
            node = core_v1.read_node(n)
            assert (node.metadata.labels or {}).get(STATE) == sm.UPGRADE_DONE and not node.spec.unschedulable
        assert watcher.peak_unavailable <= 2 and watcher.peak_upgrading <= 2, vars(watcher)
        adm = coordination_v1.read_namespaced_lease("npuops-fleet-admission-nvidia", "kube-system")
        entries = json.loads((adm.metadata.annotations or {}).get("npuops.io/admitted-nodes") or "{}")
        assert not set(entries) & set(names), entries


def test_a_host_refused_in_the_preflight_stops_every_lane_before_any_cordon(kubeconfig, core_v1, namespace, tmp_path):
    from test_host_lost import hx

    with scratch_fleet(core_v1, "lab-rref", ["zone-a", "zone-b", "zone-c"], tmp_path) as names:
        refused = names[1]
        # this host's apt sources lose the lab repository: its target is not installable
        hx(refused, "rm -f /etc/apt/sources.list.d/npuops-lab.list && apt-get update -qq")
        watcher = LimitWatcher(core_v1).start()
        try:
            rc, out, _took = window(tmp_path, kubeconfig, names, *ROLLING)
        finally:
            watcher.stop()
        assert rc != 0
        s, hosts = summary(tmp_path)
        assert hosts[refused]["status"] == "failed" and hosts[refused]["failed_phase"] == "preflight", hosts[refused]
        assert {h: hosts[h]["status"] for h in names if h != refused} == {
            h: "not-started" for h in names if h != refused
        }
        assert watcher.entered == {}, watcher.entered  # no node cordoned or labelled
        for n in names:
            assert (core_v1.read_node(n).metadata.labels or {}).get(STATE) is None
