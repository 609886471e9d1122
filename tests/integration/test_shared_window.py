"""One maintenance window shared by several ansible-playbook processes (one run id, disjoint slices
of scratch hosts, tests/integration/fleetlab.py): the limits hold fleet-wide at every moment (sampled
every 0.1 s by a watcher that does not use the product's admission code), a killed process's node is
resumed by a rerun of its slice, the close step's one summary lists every host of all slices, a
failure in one slice stops new starts in the others, and the join rules refuse another run and
another target.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid

import pytest
from fleetlab import STATE, LimitWatcher, dpkg_fails_when_told, scratch_fleet
from labhelpers import REPO, playbook_command

# the rolling window's policy of the rollout tests: maxParallelUpgrades 2, maxUnavailable 2, forks 3
from test_rollout import ROLLING, WINDOW_LEASE

from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm

ANNOTATION = "npuops.io/window"


@pytest.fixture
def kubeconfig(sa_kubeconfig):
    return sa_kubeconfig(shipped=True)


@pytest.fixture
def run_id(coordination_v1):
    """A run id of the test's own; a window it left open (a failed test) is deleted afterwards, so that
    the next test's window is not refused."""
    rid = "it-sw-" + uuid.uuid4().hex[:6]
    yield rid
    try:
        lease, rec = record(coordination_v1)
    except Exception:  # noqa: BLE001 - gone already
        return
    if rec.get("run_id") == rid and lease.spec.holder_identity:
        coordination_v1.delete_namespaced_lease(WINDOW_LEASE, "kube-system")


def start(tmp_path, kubeconfig, hosts, run_id, step, log_name, *extra, reports="reports"):
    """One process of the window, started in a session of its own (so that a SIGKILL takes its forks).
    ``reports``: its report directory (one per process: control nodes of their own share nothing)."""
    cmd, env = playbook_command(
        "maintenance_window.yml",
        [str(REPO / "inventories" / "lab"), str(tmp_path / "fleet.yml")],
        (f"maintenance_hosts={','.join(hosts) or 'localhost'}", f"maintenance_report_dir={tmp_path / reports}",
         f"maintenance_run_id={run_id}", f"maintenance_step={step}", *ROLLING, *extra),
        kubeconfig,
    )
    log = open(tmp_path / log_name, "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(tmp_path),
                            start_new_session=True)
    proc.log_path, proc.log_file = tmp_path / log_name, log
    return proc


def finish(proc, timeout=2400):
    rc = proc.wait(timeout)
    proc.log_file.close()
    return rc, proc.log_path.read_text()


def record(coordination_v1):
    lease = coordination_v1.read_namespaced_lease(WINDOW_LEASE, "kube-system")
    return lease, json.loads((lease.metadata.annotations or {}).get(ANNOTATION) or "{}")


def slices(tmp_path, run_id):
    """The processes' own summaries, from every report directory of the test."""
    return {p.stem: json.loads(p.read_text()) for p in tmp_path.glob(f"reports*/{run_id}/slices/*.json")}


def test_three_processes_share_one_window_within_the_limits_survive_a_kill_and_close_with_one_summary(
    kubeconfig, core_v1, coordination_v1, tmp_path, run_id
):
    zones = ["zone-a", "zone-b", "zone-c"] * 3
    with scratch_fleet(core_v1, "lab-swin", zones, tmp_path) as names:
        names = sorted(names)
        parts = [names[k::3] for k in range(3)]  # the stride split of the sorted inventory
        watcher = LimitWatcher(core_v1).start()
        procs = [start(tmp_path, kubeconfig, part, run_id, "slice", f"slice-{k}.txt") for k, part in enumerate(parts)]
        killed = procs[0]
        try:
            # SIGKILL process 0 (ansible-playbook, its forks, its modules) while one of its nodes is in an upgrade
            end = time.monotonic() + 1200
            while time.monotonic() < end and not (watcher.busy_now & set(parts[0])) and killed.poll() is None:
                time.sleep(0.1)
            time.sleep(2)
            assert killed.poll() is None, "slice 0 ended before any of its nodes was in flight"
            in_flight = sorted(watcher.busy_now & set(parts[0]))
            os.killpg(killed.pid, signal.SIGKILL)
            killed.wait(30)
            killed.log_file.close()
            _lease, rec = record(coordination_v1)
            # the killed process is still a participant (a slice that ended before the kill has left)
            assert rec["run_id"] == run_id and rec["state"] == "open" and rec["participants"], rec
            assert in_flight, "no node of slice 0 was in flight at the kill"
            states = {n: (core_v1.read_node(n).metadata.labels or {}).get(STATE) for n in parts[0]}
            assert any(states[n] not in (None, sm.UPGRADE_DONE) for n in in_flight), states
            # its nodes in flight keep counting against the limits (the watcher) until a rerun of the
            # slice, started at once as an operator would, joins the same window and resumes them
            procs.append(start(tmp_path, kubeconfig, parts[0], run_id, "slice", "slice-0-rerun.txt"))
            outs = [finish(p) for p in procs[1:]]
            for rc, out in outs:
                assert rc == 0, out[-6000:]
            # the window stays open after the slices (a slice never closes it)
            _lease, rec = record(coordination_v1)
            assert rec["state"] == "open", rec
        finally:
            watcher.stop()
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
        assert watcher.peak_upgrading <= 2 and watcher.peak_unavailable <= 2, vars(watcher)
        for n in names:
            node = core_v1.read_node(n)
            assert (node.metadata.labels or {}).get(STATE) == sm.UPGRADE_DONE and not node.spec.unschedulable, n

        # the close step: the killed process (same machine, its ansible-playbook gone) is swept at once
        t0 = time.monotonic()
        rc, out = finish(start(tmp_path, kubeconfig, [], run_id, "close", "close.txt"), timeout=600)
        assert rc == 0, out[-6000:]
        assert time.monotonic() - t0 < 300, "the close step waited for the killed participant's TTL"
        summary = json.loads((tmp_path / "reports" / run_id / "window.json").read_text())
        rows = {h["host"]: h for h in summary["hosts"]}
        assert summary["closed"] is True and set(rows) >= set(names), summary
        assert all(rows[n]["status"] == "upgraded" for n in names), rows
        assert len(slices(tmp_path, run_id)) == 3  # two slices and the rerun wrote their own rows
        lease, rec = record(coordination_v1)
        assert rec["state"] == "closed" and not lease.spec.holder_identity, rec
        # a closed window takes no participant
        rc, out = finish(start(tmp_path, kubeconfig, parts[1], run_id, "slice", "late.txt"), timeout=600)
        assert rc != 0 and "closed" in out, out[-3000:]


def test_a_failure_in_one_slice_stops_new_starts_in_the_other_and_those_in_flight_finish(
    kubeconfig, core_v1, coordination_v1, tmp_path, run_id
):
    from test_host_lost import hx

    zones = ["zone-a", "zone-b", "zone-c", "zone-a", "zone-b", "zone-c"]
    with scratch_fleet(core_v1, "lab-sbud", zones, tmp_path) as names:
        names = sorted(names)
        # slice 0: the failing host alone, started first so that it holds a lane; slice 1: the others,
        # started once it does
        parts = [names[:1], names[1:]]
        bad = parts[0][0]
        # dpkg refuses on this host once a node of the other slice is in flight: the failure comes at
        # install, after its node was cordoned and drained, while slice 1 still has hosts to start
        dpkg_fails_when_told(bad)
        watcher = LimitWatcher(core_v1).start()
        # report directories of their own: no stop file shared on the control node, only the window's record
        procs = []
        try:
            for k, part in enumerate(parts):
                procs.append(start(tmp_path, kubeconfig, part, run_id, "slice", f"slice-{k}.txt",
                                   "maintenance_max_failures=0", reports=f"reports-{k}"))
                end = time.monotonic() + 1200
                while time.monotonic() < end and not (watcher.busy_now & set(part)) and procs[-1].poll() is None:
                    time.sleep(0.1)
                assert watcher.busy_now & set(part), f"slice {k} put no node in flight"
            hx(bad, "touch /run/npuops-it-go")
            outs = [finish(p) for p in procs]
        finally:
            watcher.stop()
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
        assert outs[0][0] != 0, outs[0][1][-3000:]
        failed_at = watcher.failed[bad]
        late = {n: round(t - failed_at, 1) for n, t in watcher.entered.items() if n != bad and t > failed_at}
        assert not late, ("a node entered an upgrade after the failure", late)
        started = [n for n in names if n in watcher.entered and n != bad]
        assert started, watcher.entered
        for n in started:
            assert (core_v1.read_node(n).metadata.labels or {}).get(STATE) == sm.UPGRADE_DONE, n
        not_started = [n for n in parts[1] if n not in watcher.entered]
        assert not_started, ("every host of the other slice started before the failure", watcher.entered, failed_at)
        rows = {h["host"]: h for s in slices(tmp_path, run_id).values() for h in s["hosts"]}
        for n in not_started:
            assert rows[n]["status"] == "not-started" and bad in rows[n]["reason"], rows[n]
            node = core_v1.read_node(n)
            assert (node.metadata.labels or {}).get(STATE) is None and not node.spec.unschedulable
        _lease, rec = record(coordination_v1)
        assert rec["state"] == "stopping" and bad in rec["stop_reason"] and set(rec["failures"]) == {bad}, rec
        assert watcher.peak_upgrading <= 2 and watcher.peak_unavailable <= 2, vars(watcher)
        rc, out = finish(start(tmp_path, kubeconfig, [], run_id, "close", "close.txt"), timeout=600)
        assert rc != 0 and "not upgraded" in out, out[-3000:]  # the window closes, and says who failed
        assert record(coordination_v1)[1]["state"] == "closed"


def test_join_refusals_name_what_differs(kubeconfig, core_v1, coordination_v1, tmp_path, run_id):
    (tmp_path / "fleet.yml").write_text("all:\n  hosts: {}\n")
    rc, out = finish(start(tmp_path, kubeconfig, [], run_id, "open", "open.txt"), timeout=600)
    assert rc == 0, out[-3000:]
    lease, rec = record(coordination_v1)
    assert lease.spec.holder_identity == run_id and rec["state"] == "open" and rec["participants"] == {}, rec
    try:
        # another run id while this window is live
        rc, out = finish(start(tmp_path, kubeconfig, [], run_id + "-other", "open", "other.txt"), timeout=600)
        assert rc != 0 and f"held by {run_id}" in out, out[-3000:]
        # the same run id with another target version
        rc, out = finish(start(tmp_path, kubeconfig, [], run_id, "open", "target.txt",
                               "driver_upgrade_target_version=999.1.2"), timeout=600)
        assert rc != 0 and "another target or upgradePolicy for nvidia" in out, out[-3000:]
        assert record(coordination_v1)[1] == rec  # a refusal changes nothing
    finally:
        rc, out = finish(start(tmp_path, kubeconfig, [], run_id, "close", "close.txt"), timeout=600)
    assert rc == 0, out[-3000:]
    assert record(coordination_v1)[1]["state"] == "closed"
    rc, out = finish(start(tmp_path, kubeconfig, [], run_id, "open", "reopen.txt"), timeout=600)
    assert rc != 0 and "was closed" in out, out[-3000:]
