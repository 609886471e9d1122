"""A host lost over SSH in the middle of the window (lab part 2 hosts, real ssh, real playbook).

Over SSH a stopped host is UNREACHABLE, which Ansible's block/rescue never catches; a batch made only
of unreachable hosts would end the whole playbook (no summary, Lease kept, node not marked). The
window must instead mark the node upgrade-failed with a reason naming the host and the step, keep it
cordoned, write the summary, release its Lease and exit non-zero; once the host is back, a rerun
finishes the upgrade and restores the host's pre-window state.

A scratch host behind its own kwok Node is used (the scenario hosts are left to other tests), with
its own Lease name and a policy that admits it whatever else is being upgraded on the lab.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from labhelpers import container, create_kwok_nodes, delete_nodes, wait

from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
HOSTCTL = REPO / "tests" / "lab" / "hosts" / "hostctl"
PODMAN = REPO / "tests" / "lab" / "hosts" / "bin" / "podman"
COLLECTIONS = REPO / "build" / "collections"
STATE = "nvidia.com/gpu-driver-upgrade-state"
DRIVER_MAJOR = "nvidia.com/cuda.driver.major"
OLD, TARGET = "535.183.06", "550.90.07"
KERNEL = "5.15.0-107-generic"


def lab_dir() -> Path:
    return Path(os.environ.get("NPUOPS_LAB_DIR", "/tmp/npuops-lab"))


def hostctl(*args: str, timeout: int = 600) -> str:
    r = subprocess.run([str(HOSTCTL), *args], capture_output=True, text=True, timeout=timeout,
                       env=dict(os.environ, NPUOPS_LAB_DIR=str(lab_dir())), check=False)
    assert r.returncode == 0, f"hostctl {' '.join(args)}: {r.stdout[-2000:]}{r.stderr[-2000:]}"
    return r.stdout


def hx(name: str, script: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(PODMAN), "exec", container(name), "/bin/sh", "-c", script],
                          capture_output=True, text=True, timeout=120, check=False)


@contextlib.contextmanager
def scratch_gpu_hosts(core_v1, prefix: str, count: int):
    """``count`` scratch GPU hosts (driver OLD), each behind its own kwok Node with the GPU presence
    label, removed with their Nodes on the way out."""
    names = create_kwok_nodes(core_v1, prefix, count, labels={"nvidia.com/gpu.present": "true"},
                              capacity={"cpu": "4", "memory": "8Gi", "pods": "110", "nvidia.com/gpu": "2"})
    try:
        for name in names:
            hostctl("spawn", name, "--node", "--kernel", KERNEL, "--driver", OLD)
        for name in names:
            wait(f"{name}: driver labels from the node agent",
                 lambda n=name: (core_v1.read_node(n).metadata.labels or {}).get(DRIVER_MAJOR) == "535", 90)
        yield names
    finally:
        for name in names:
            subprocess.run([str(HOSTCTL), "rm", name], capture_output=True,
                           env=dict(os.environ, NPUOPS_LAB_DIR=str(lab_dir())), check=False)
        delete_nodes(core_v1, names)


@pytest.fixture
def gpu_host(core_v1, lab_kubeconfig):
    """A scratch GPU host (driver OLD) behind its own kwok Node with the GPU presence label."""
    with scratch_gpu_hosts(core_v1, "lab-lost", 1) as (name,):
        yield name


# A lab host's boot is done when systemd says running, or degraded only by the unit every lab host
# fails (its machine-id is bind-mounted read-only, so there is nothing to commit).
HARMLESS_FAILED = {"systemd-machine-id-commit.service"}


def boot_state(name: str) -> dict:
    """What the host says of its boot: the kernel release boot.sh writes once per boot (absent until
    then), systemd's overall state and, when it is not running, its failed units."""
    r = hx(name, "cat /run/npuops-lab/kernel-release 2>/dev/null || echo '(absent)'; "
                 "systemctl is-system-running 2>&1; systemctl --failed --no-legend --plain 2>&1 | head -5")
    lines = r.stdout.splitlines()
    return {"exec_rc": r.returncode, "kernel_release": lines[0].strip() if lines else None,
            "system": lines[1].strip() if len(lines) > 1 else None,
            "failed_units": sorted(line.split()[0] for line in lines[2:] if line.strip()),
            "stderr": r.stderr.strip()[-300:]}


def boot_done(seen: dict) -> bool:
    if seen["exec_rc"] != 0 or seen["kernel_release"] in (None, "", "(absent)"):
        return False
    if seen["system"] == "running":
        return True
    return seen["system"] == "degraded" and set(seen["failed_units"]) <= HARMLESS_FAILED


def wait_booted(name: str, timeout: float) -> dict:
    """Poll until the host's boot is done (:func:`boot_done`: kernel release written, systemd running
    or degraded only by HARMLESS_FAILED); at the deadline fail with what the host said last."""
    deadline = time.monotonic() + timeout
    while True:
        seen = boot_state(name)
        if boot_done(seen):
            return seen
        if time.monotonic() > deadline:
            pytest.fail(f"{name} not booted after {timeout}s; last seen: {seen}")
        time.sleep(0.5)


def window(name: str, kubeconfig: str, report_dir: Path, lease: str,
           extra: list[str] | None = None) -> subprocess.Popen:
    """The maintenance window over ``name`` (one host, or several joined by commas), with ``extra``
    ansible-playbook arguments after the test's own (later -e values win)."""
    link = COLLECTIONS / "ansible_collections" / "npuops" / "fleet"
    if not link.exists():
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(REPO)
    inv = report_dir / "hosts.yml"
    hosts = "".join(f"        {h}:\n" for h in name.split(","))
    inv.write_text("all:\n  children:\n    gpu_nodes:\n      hosts:\n" + hosts)
    policy = {"driver_upgrade_policy": {"maxParallelUpgrades": 0, "maxUnavailable": "100%",
                                        "drain": {"enable": False}, "reboot": {"enable": False}},
              "driver_upgrade_target_version": TARGET, "driver_upgrade_connection_timeout": 10,
              "driver_upgrade_reboot_allowed": False}
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS), NPUOPS_LAB_DIR=str(lab_dir()),
               KUBECONFIG=kubeconfig, ANSIBLE_NOCOLOR="1", ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default")
    env.pop("CONTAINERS_CONF", None)
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), str(REPO / "playbooks" / "maintenance_window.yml"),
           "-i", str(REPO / "inventories" / "lab"), "-i", str(inv),
           "-e", f"maintenance_hosts={name}", "-e", f"maintenance_report_dir={report_dir}",
           "-e", f"maintenance_lease_name={lease}", "-e", f"npuops_fleet_kubeconfig={kubeconfig}",
           "-e", json.dumps(policy), *(extra or [])]
    log = open(report_dir / f"run-{time.time():.0f}.log", "w")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(report_dir), text=True)


def output(report_dir: Path) -> str:
    logs = sorted(report_dir.glob("run-*.log"))
    return logs[-1].read_text()[-5000:] if logs else ""


def test_host_lost_during_host_work_is_recorded_and_the_rerun_finishes(core_v1, coordination_v1, gpu_host,
                                                                       lab_kubeconfig, tmp_path):
    name = gpu_host
    report_dir = tmp_path / "reports"
    report_dir.mkdir()
    lease = f"lost-test-{uuid.uuid4().hex[:5]}"
    held_before = set(hx(name, "apt-mark showhold").stdout.split())

    run = window(name, lab_kubeconfig, report_dir, lease)
    # the node is drained and paused for host work: the host goes away (power, kernel hang, network)
    wait(sm.POD_RESTART_REQUIRED, lambda: run.poll() is not None
         or (core_v1.read_node(name).metadata.labels or {}).get(STATE) == sm.POD_RESTART_REQUIRED, 300)
    assert run.poll() is None, output(report_dir)
    subprocess.run([str(PODMAN), "stop", "-t", "0", container(name)], capture_output=True, check=True, timeout=60)
    rc = run.wait(timeout=600)
    out = output(report_dir)
    assert rc != 0, out

    # the summary was written and names the host, the step and ssh's own reason
    summary = json.loads((report_dir / "latest.json").read_text())
    row = {h["host"]: h for h in summary["hosts"]}[name]
    assert summary["result"] == "failed" and row["status"] == "failed", row
    assert f"host {name} unreachable during" in row["reason"], row["reason"]
    assert row["host_lost"] is True, row
    assert "deserialization" not in row["reason"], row["reason"]
    # the node is marked and stays cordoned; the run released its Lease
    n = core_v1.read_node(name)
    assert n.metadata.labels[STATE] == sm.UPGRADE_FAILED and n.spec.unschedulable, n.metadata.labels
    last = json.loads(n.metadata.annotations["nvidia.com/gpu-driver-upgrade-last-transition"])
    assert name in last["reason"] and "unreachable" in last["reason"], last
    # closed: no holder, its record says closed (kept to refuse a late process of the same run)
    closed = coordination_v1.read_namespaced_lease(lease, "kube-system")
    assert not closed.spec.holder_identity, closed.spec
    assert json.loads(closed.metadata.annotations["npuops.io/window"])["state"] == "closed"

    # the host comes back; the rerun upgrades it, uncordons and restores the pre-window state
    subprocess.run([str(PODMAN), "start", container(name)], capture_output=True, check=True, timeout=60)
    booted = wait_booted(name, 120)
    assert booted["kernel_release"] == KERNEL, booted
    run = window(name, lab_kubeconfig, report_dir, lease)
    rc = run.wait(timeout=900)
    out = output(report_dir)
    assert rc == 0, out
    row = {h["host"]: h for h in json.loads((report_dir / "latest.json").read_text())["hosts"]}[name]
    assert row["status"] == "upgraded" and row["new_version"] == TARGET, row
    n = core_v1.read_node(name)
    assert n.metadata.labels[STATE] == sm.UPGRADE_DONE and not n.spec.unschedulable
    assert hx(name, "cat /sys/module/nvidia/version").stdout.strip() == TARGET
    assert hx(name, "test -e /var/lib/npuops-fleet/window.json; echo $?").stdout.strip() == "1"
    held_after = set(hx(name, "apt-mark showhold").stdout.split())
    assert held_before <= held_after, (held_before, held_after)


@pytest.fixture
def two_gpu_hosts(core_v1, lab_kubeconfig):
    """Two scratch GPU hosts (driver OLD), each behind its own kwok Node with the GPU presence label."""
    with scratch_gpu_hosts(core_v1, "lab-lane", 2) as names:
        yield names


def test_a_lane_whose_host_is_lost_after_an_admin_set_the_skip_label_leaves_the_node_alone(
        core_v1, two_gpu_hosts, lab_kubeconfig, tmp_path):
    """A rolling window of width 1 on one fork: the second host's lane goes on from the fleet
    preflight, which found no skip label. While the first lane runs, an admin labels the second node
    skip and its host goes away. The lane reads the label again before its host check: the node is left
    alone as the label asks (status skipped, not failed: no failure counted, no upgrade-failed mark,
    never cordoned), and the first host's upgrade is not disturbed."""
    skip = "nvidia.com/gpu-driver-upgrade.skip"
    report_dir = tmp_path / "reports"
    report_dir.mkdir()
    lease = f"lane-skip-{uuid.uuid4().hex[:5]}"
    first, second = None, None
    run = window(",".join(two_gpu_hosts), lab_kubeconfig, report_dir, lease,
                 extra=["-e", "maintenance_rollout=rolling", "--forks=1",
                        "-e", json.dumps({"driver_upgrade_policy": {"maxParallelUpgrades": 1, "maxUnavailable": "100%",
                                                                    "drain": {"enable": False},
                                                                    "reboot": {"enable": False}}})])
    try:
        def started() -> bool:
            nonlocal first
            for name in two_gpu_hosts:
                if (core_v1.read_node(name).metadata.labels or {}).get(STATE) not in (None, "", sm.UPGRADE_REQUIRED):
                    first = name
            return run.poll() is not None or first is not None

        wait("the first lane's prepare", started, 300)
        assert run.poll() is None and first, output(report_dir)
        second = next(n for n in two_gpu_hosts if n != first)
        core_v1.patch_node(second, {"metadata": {"labels": {skip: "true"}}})
        subprocess.run([str(PODMAN), "stop", "-t", "0", container(second)], capture_output=True, check=True, timeout=60)
        rc = run.wait(timeout=900)
    finally:
        if run.poll() is None:
            run.kill()
    out = output(report_dir)
    summary = json.loads((report_dir / "latest.json").read_text())
    rows = {h["host"]: h for h in summary["hosts"]}
    assert rows[first]["status"] == "upgraded", rows[first]
    row = rows[second]
    assert row["status"] == "skipped", (row, out)
    assert f"{skip}=true" in row["reason"], row["reason"]
    assert row.get("restored") is None, row  # a node left alone: its host is not touched on the way out
    assert rc == 0 and summary["result"] == "ok", (summary["result"], out)
    n = core_v1.read_node(second)
    labels = n.metadata.labels or {}
    assert not n.spec.unschedulable and labels.get(STATE) in (None, "", sm.UPGRADE_REQUIRED), labels
    assert not list(report_dir.glob("*/failures/*")), "a skipped node was counted as a failure"
    n = core_v1.read_node(first)
    assert n.metadata.labels[STATE] == sm.UPGRADE_DONE and not n.spec.unschedulable, n.metadata.labels
