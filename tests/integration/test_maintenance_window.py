"""Issue 6 acceptance on the lab: playbooks/maintenance_window.yml (role driver_upgrade) end to end.

Each test runs the real playbook against the lab hosts (inventories/lab), as a ServiceAccount bound to
exactly the shipped RBAC (deploy/rbac/), and checks the summary it
writes (JSON), the Nodes and the hosts. Tests that change a scenario host put it back afterwards
(`hostctl rm` + `hostctl up` recreates it from the scenario; the Node's upgrade labels and
annotations are removed and the Node is made schedulable again).

Order inside the module matters for speed only: the cheap preflight refusal comes first.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from labhelpers import container, run_playbook

from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm

REPO = Path(__file__).resolve().parents[2]
HOSTS = REPO / "tests" / "lab" / "hosts"
HOSTCTL = HOSTS / "hostctl"
PODMAN = HOSTS / "bin" / "podman"
COLLECTIONS = REPO / "build" / "collections"
NS = "gpu-drv"

pytestmark = pytest.mark.lab

GPU_STATE = "nvidia.com/gpu-driver-upgrade-state"
NPU_STATE = "rebellions.ai/npu-driver-upgrade-state"
UPGRADE_PREFIXES = ("nvidia.com/gpu-driver-upgrade", "rebellions.ai/npu-driver-upgrade")
DEPLOY_PREFIXES = ("nvidia.com/gpu.deploy.", "rebellions.ai/npu.deploy.")
PAUSED = "paused-for-driver-upgrade"
# The scenario's host/node names; a private lab started from a renamed scenario (NPUOPS_LAB_SCENARIO)
# sets NPUOPS_MW_PREFIX (e.g. mw -> mw-node-1) and NPUOPS_MW_INVENTORY (an inventory naming those hosts).
PREFIX = os.environ.get("NPUOPS_MW_PREFIX", "lab")
INVENTORY = Path(os.environ.get("NPUOPS_MW_INVENTORY", str(REPO / "inventories" / "lab")))
N0, N1, NPU = f"{PREFIX}-node-0", f"{PREFIX}-node-1", f"{PREFIX}-npu-0"


def lab_dir():
    return Path(os.environ.get("NPUOPS_LAB_DIR", "/tmp/npuops-lab"))


def hostctl(*args, timeout=600):
    r = subprocess.run(
        [str(HOSTCTL), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, NPUOPS_LAB_DIR=str(lab_dir())),
        check=False,
    )
    assert r.returncode == 0, f"hostctl {' '.join(args)} failed:\n{r.stdout}\n{r.stderr}"
    return r.stdout.strip()


def hx(name, script, check=True, timeout=300):
    r = subprocess.run(
        [str(PODMAN), "exec", container(name), "/bin/sh", "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check:
        assert r.returncode == 0, f"{name}: `{script}` -> {r.returncode}\n{r.stdout}"
    return r


def playbook(name, kubeconfig, report_dir, hosts, *extra, timeout=1500):
    """Run playbooks/<name> on the lab inventory; returns (rc, stdout+stderr)."""
    return run_playbook(
        name,
        [str(INVENTORY)],
        (
            f"maintenance_hosts={hosts}",
            f"audit_hosts={hosts}",
            f"maintenance_report_dir={report_dir}",
            f"audit_report_dir={report_dir}",
            *extra,
        ),
        kubeconfig,
        report_dir,
        timeout=timeout,
    )


PHASE_ORDER = ("preflight", "prepare", "install", "reload", "reboot", "verify", "finish")
SCHEMA = json.loads((REPO / "docs" / "maintenance-summary.schema.json").read_text())


def summary(report_dir):
    """latest.json, checked against the published schema (every window of these tests), and by host."""
    import jsonschema

    s = json.loads((Path(report_dir) / "latest.json").read_text())
    jsonschema.Draft202012Validator(SCHEMA).validate(s)
    for h in s["hosts"]:
        phases = [h["phases"][p] for p in PHASE_ORDER if p in h.get("phases", {})]
        times = [t for p in phases for t in (p["started"], p["finished"]) if t]
        assert times == sorted(times), h.get("phases")  # each phase ends before the next one starts
    return s, {h["host"]: h for h in s["hosts"]}


def recap_changed(out):
    """PLAY RECAP: host -> changed count."""
    res = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) > 2 and parts[1] == ":" and any(p.startswith("changed=") for p in parts):
            res[parts[0]] = int([p for p in parts if p.startswith("changed=")][0].split("=")[1])
    return res


def node(core_v1, name):
    return core_v1.read_node(name)


def reset_node(core_v1, name):
    """Remove the upgrade labels/annotations, un-pause operand deploy labels (a failed upgrade leaves
    them paused, as the operators do) and make the Node schedulable."""
    n = core_v1.read_node(name)
    labels = {k: None for k in (n.metadata.labels or {}) if k.startswith(UPGRADE_PREFIXES)}
    for k, v in (n.metadata.labels or {}).items():
        if k.startswith(DEPLOY_PREFIXES) and v.endswith(PAUSED):
            labels[k] = v[: -len(PAUSED)].rstrip("_") or "true"
    ann = {k: None for k in (n.metadata.annotations or {}) if k.startswith(UPGRADE_PREFIXES)}
    core_v1.patch_node(name, {"metadata": {"labels": labels, "annotations": ann}, "spec": {"unschedulable": None}})


def node_driver(n):
    lb = n.metadata.labels or {}
    if "rebellions.ai/driver-version.full" in lb:
        return lb["rebellions.ai/driver-version.full"]
    parts = [lb.get(f"nvidia.com/cuda.driver.{k}") for k in ("major", "minor", "rev")]
    return ".".join(parts) if all(parts) else None


def restore_host(core_v1, name):
    """Recreate the host from the scenario, clear the Node's upgrade state, wait for fresh labels."""
    hostctl("rm", name)
    hostctl("up", timeout=900)
    reset_node(core_v1, name)
    mod = "rebellions" if "npu" in name else "nvidia"
    loaded = hx(name, f"cat /sys/module/{mod}/version").stdout.strip()
    deadline = time.time() + 90
    while node_driver(core_v1.read_node(name)) != loaded:
        assert time.time() < deadline, f"{name}: Node driver labels never showed {loaded}"
        time.sleep(2)
    # the reboot may still turn the Node NotReady once its lease ages past the grace period (~16 s)
    time.sleep(20)
    deadline = time.time() + 90
    while not node_ready(core_v1.read_node(name)):
        assert time.time() < deadline, f"{name}: Node not Ready after restore"
        time.sleep(2)


def node_ready(n):
    return any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])


@pytest.fixture
def kubeconfig(sa_kubeconfig):
    """The windows run as a ServiceAccount bound to exactly the shipped RBAC (deploy/rbac/)."""
    return sa_kubeconfig(shipped=True)


@pytest.fixture
def report_dir(tmp_path):
    d = tmp_path / "reports"
    d.mkdir()
    return d


@pytest.fixture
def restore(core_v1):
    """restore(name): recreate the scenario host now (known start state) and again after the test."""
    touched = []

    def now(name):
        restore_host(core_v1, name)
        touched.append(name)

    yield now
    for name in dict.fromkeys(touched):
        restore_host(core_v1, name)


@pytest.fixture
def trainer(apps_v1, policy_v1, core_v1):
    """Deployment trainer (one replica per node: 4 in the default lab) + PDB trainer-pdb.

    make(spare) -> pods; the PDB's minAvailable is replicas - spare (spare=1: one disruption allowed,
    spare=0: none, as lab part 1's minAvailable 3 / 4)."""
    made = []

    def make(spare):
        replicas = len(core_v1.list_node().items)
        min_available = replicas - spare
        dep = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "trainer", "labels": {"app": "trainer"}},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": "trainer"}},
                "template": {
                    "metadata": {"labels": {"app": "trainer"}},
                    "spec": {
                        "affinity": {
                            "podAntiAffinity": {
                                "requiredDuringSchedulingIgnoredDuringExecution": [
                                    {
                                        "labelSelector": {"matchLabels": {"app": "trainer"}},
                                        "topologyKey": "kubernetes.io/hostname",
                                    }
                                ]
                            }
                        },
                        "tolerations": [{"operator": "Exists"}],
                        "containers": [{"name": "trainer", "image": "nvcr.io/nvidia/pytorch:24.07-py3"}],
                    },
                },
            },
        }
        apps_v1.create_namespaced_deployment(NS, dep)
        made.append("dep")
        policy_v1.create_namespaced_pod_disruption_budget(
            NS,
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": "trainer-pdb"},
                "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": "trainer"}}},
            },
        )
        made.append("pdb")
        deadline = time.time() + 120
        while time.time() < deadline:
            pods = core_v1.list_namespaced_pod(NS, label_selector="app=trainer").items
            pdb = policy_v1.read_namespaced_pod_disruption_budget("trainer-pdb", NS).status
            running = [p for p in pods if p.status.phase == "Running"]
            healthy = pdb and pdb.current_healthy == replicas and pdb.disruptions_allowed == spare
            if len(running) >= replicas and healthy:
                return pods
            time.sleep(2)
        pytest.fail("trainer pods not Running/healthy with the PDB allowing %d disruption(s)" % spare)

    yield make
    from kubernetes import client

    for kind in reversed(made):
        try:
            if kind == "pdb":
                policy_v1.delete_namespaced_pod_disruption_budget("trainer-pdb", NS)
            else:
                apps_v1.delete_namespaced_deployment("trainer", NS)
        except client.ApiException as e:
            if e.status != 404:
                raise


def test_missing_target_is_refused_by_preflight_before_any_cordon(kubeconfig, core_v1, report_dir):
    before = node(core_v1, N1)
    rc, out = playbook(
        "maintenance_window.yml", kubeconfig, report_dir, N1, "driver_upgrade_target_version=999.1.2"
    )
    assert rc != 0, out
    s, hosts = summary(report_dir)
    h = hosts[N1]
    assert s["result"] == "failed"
    assert h["status"] == "failed" and h["failed_phase"] == "preflight", h
    assert f"999.1.2 is not available in the apt sources of {N1}" in h["reason"]
    assert h["final_state"].startswith("unchanged")
    after = node(core_v1, N1)
    assert not after.spec.unschedulable
    assert (after.metadata.labels or {}).get(GPU_STATE) == (before.metadata.labels or {}).get(GPU_STATE)
    # no batch ran: the host never reached prepare
    assert "Prepare the node for the driver upgrade" not in out
    # the summary is also Markdown and the window is closed (a second run could start)
    assert "999.1.2 is not available" in (report_dir / "latest.md").read_text()
    assert "Leave the window (the last live participant closes it)" in out
    assert "changed: [localhost]" in out.split("Leave the window (the last live participant closes it)", 1)[1][:400]


def test_host_mapped_to_another_node_is_refused_before_any_change(kubeconfig, core_v1, coordination_v1, report_dir):
    """An inventory mistake (host lab-node-1 said to be node lab-node-2) is caught by the identity
    check: refused in the preflight naming both machines' values; neither Node nor the host changes."""
    n2 = f"{PREFIX}-node-2"
    host_mid = hx(N1, "cat /etc/machine-id").stdout.strip()
    host_boot = hx(N1, "cat /run/npuops-lab/boot_id").stdout.strip()
    # the lab stands each host behind its own Node as a kubelet would report it
    assert node(core_v1, N1).status.node_info.machine_id == host_mid and host_mid
    assert node(core_v1, N1).status.node_info.boot_id == host_boot and host_boot
    other_mid = node(core_v1, n2).status.node_info.machine_id
    assert other_mid and other_mid != host_mid

    before = world(core_v1, coordination_v1, (N1, n2))
    rc, out = playbook("maintenance_window.yml", kubeconfig, report_dir, N1, f"driver_upgrade_node_name={n2}")
    assert rc != 0, out[-4000:]
    s, hosts = summary(report_dir)
    h = hosts[N1]
    assert h["status"] == "failed" and h["failed_phase"] == "preflight", h
    assert f"host {N1} is not the machine behind node {n2}" in h["reason"], h["reason"]
    assert f"machine_id: host {host_mid}, node {other_mid}" in h["reason"], h["reason"]
    assert f"hostname: host {N1}, node {n2}" in h["reason"], h["reason"]
    assert h["final_state"].startswith("unchanged"), h
    assert "Prepare the node for the driver upgrade" not in out
    assert world(core_v1, coordination_v1, (N1, n2)) == before
    chat = (report_dir / "latest-chat.txt").read_text().splitlines()
    assert len(chat) == 3 and chat[0].startswith(f"npuops.fleet window {s['run_id']}: FAILED - failed 1"), chat
    assert chat[1] == "upgraded: none" and chat[2].startswith(f"not upgraded: {N1} (preflight: host {N1} is not"), chat


def test_skip_label_leaves_the_node_alone_before_any_host_check(kubeconfig, core_v1, report_dir):
    """A node labelled skip is left alone even when its host would be refused (here: a target that is
    not in its apt sources): the window goes on without it."""
    skip = "nvidia.com/gpu-driver-upgrade.skip"
    core_v1.patch_node(N1, {"metadata": {"labels": {skip: "true"}}})
    try:
        rc, out = playbook("maintenance_window.yml", kubeconfig, report_dir, N1,
                           "driver_upgrade_target_version=999.1.2")
        assert rc == 0, out[-4000:]
        s, hosts = summary(report_dir)
        assert s["result"] == "ok" and hosts[N1]["status"] == "skipped", hosts[N1]
        assert f"{skip}=true" in hosts[N1]["reason"], hosts[N1]
        assert hosts[N1].get("verdict_before") is None, hosts[N1]  # the host was not even read
    finally:
        core_v1.patch_node(N1, {"metadata": {"labels": {skip: None}}})


# the scenario's lab-node-1: driver 535.183.06, default (server-open) packaging
OLD_DRIVER = "535.183.06"
OLD_PACKAGES = {p: "535.183.06-0ubuntu1" for p in ("nvidia-driver-535-server-open", "nvidia-utils-535-server")}
NEW_PACKAGES = ("nvidia-driver-550-server-open", "nvidia-utils-550-server")


def scenario_start(core_v1, name):
    """(at the scenario's start state, what was seen) for GPU host ``name``: the 535 driver loaded and
    its package installed, the Node with no upgrade state and schedulable."""
    n = node(core_v1, name)
    seen = {
        "loaded": hx(name, "cat /sys/module/nvidia/version", check=False).stdout.strip(),
        "packages": installed(name, [*OLD_PACKAGES, *NEW_PACKAGES]),
        "state": (n.metadata.labels or {}).get(GPU_STATE),
        "unschedulable": bool(n.spec.unschedulable),
    }
    ok = (seen["loaded"] == OLD_DRIVER and seen["packages"] == OLD_PACKAGES and seen["state"] in (None, "")
          and not seen["unschedulable"])
    return ok, seen


def test_check_mode_is_the_plan_and_changes_nothing(kubeconfig, core_v1, coordination_v1, report_dir):
    """`--check` on the playbook: the plan (no Lease, nothing changed), with the apt transaction.

    The host must be at the scenario's start (535.183.06): every test that upgrades it puts it back
    (the restore fixture), and this one recreates it if it finds it otherwise, so there is exactly one
    right plan."""
    ok, seen = scenario_start(core_v1, N1)
    if not ok:
        print(f"{N1} not at the scenario's start ({seen}): recreating it")
        restore_host(core_v1, N1)
        ok, seen = scenario_start(core_v1, N1)
    assert ok, f"{N1} not at the scenario's start even after restore_host: {seen}"
    before = world(core_v1, coordination_v1, (N1,))
    rc, out = playbook("maintenance_window.yml", kubeconfig, report_dir, N1, "--check")
    assert rc == 0, out[-6000:]
    assert world(core_v1, coordination_v1, (N1,)) == before
    plan = json.loads((report_dir / "latest-plan.json").read_text())
    h = plan["hosts"][0]
    assert (plan["batches"], h["host"], h["node"]) == ([[N1]], N1, N1)
    assert plan["lease"]["free"] is True and plan["would_start"] is True, plan["lease"]
    assert h["status"] == "would-upgrade", h
    assert {i["to"] for i in h["transaction"]["install"]} == {"550.90.07-0ubuntu1"}, h["transaction"]
    assert "nvidia-utils-535-server" in [r["name"] for r in h["transaction"]["remove"]], h["transaction"]


def test_plan_of_a_window_another_run_holds_says_it_would_not_start(kubeconfig, core_v1, coordination_v1, report_dir):
    """The plan reads the window's Lease (one GET, nothing written): held by another live run, the real
    window would be refused, so the plan says it would not start and names the holder."""
    from datetime import datetime, timezone

    name = "npuops-fleet-maintenance-window"
    now = datetime.now(timezone.utc)
    from kubernetes import client

    try:  # a closed window of an earlier test stays as a record
        coordination_v1.delete_namespaced_lease(name, "kube-system")
    except client.ApiException as e:
        if e.status != 404:
            raise
    coordination_v1.create_namespaced_lease("kube-system", {
        "metadata": {"name": name},
        "spec": {"holderIdentity": "ctl-other/run-7", "leaseDurationSeconds": 600, "acquireTime": now,
                 "renewTime": now}})
    try:
        version = coordination_v1.read_namespaced_lease(name, "kube-system").metadata.resource_version
        rc, out = playbook("maintenance_window.yml", kubeconfig, report_dir, N1, "maintenance_mode=plan")
        assert rc != 0, out[-4000:]
        assert "the window would not start" in out and "ctl-other/run-7" in out, out[-4000:]
        plan = json.loads((report_dir / "latest-plan.json").read_text())
        assert plan["would_start"] is False and plan["refused"] == [], plan
        lease = plan["lease"]
        assert (lease["free"], lease["operation"], lease["held_by"]) == (False, "refuse", "ctl-other/run-7"), lease
        assert "ctl-other/run-7" in lease["message"] and lease["expires"], lease
        assert "the Lease: " in (report_dir / "latest-plan.md").read_text()
        assert coordination_v1.read_namespaced_lease(name, "kube-system").metadata.resource_version == version
    finally:
        coordination_v1.delete_namespaced_lease(name, "kube-system")


def test_plan_through_ansible_runner_comes_back_as_job_artifacts(
        kubeconfig, core_v1, coordination_v1, tmp_path, monkeypatch):
    """AWX runs playbooks with ansible-runner: the plan (and a run's summary, the same set_stats)
    comes back in the runner's stats event, so it outlives the job's pod."""
    import ansible_runner

    # the runner looks ansible-playbook up on PATH: this venv's, whatever the caller's PATH says
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))

    before = world(core_v1, coordination_v1, (N1,))
    private = tmp_path / "runner"
    private.mkdir()
    r = ansible_runner.run(
        private_data_dir=str(private),
        playbook=str(REPO / "playbooks" / "maintenance_window.yml"),
        inventory=str(INVENTORY),
        extravars={"maintenance_hosts": N1, "maintenance_mode": "plan", "npuops_fleet_kubeconfig": kubeconfig,
                   "maintenance_report_dir": str(tmp_path / "reports")},
        envvars={"ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS), "NPUOPS_LAB_DIR": str(lab_dir()),
                 "KUBECONFIG": kubeconfig},
        quiet=True,
        timeout=600,
    )
    assert (r.status, r.rc) == ("successful", 0), r.stdout.read()[-4000:]
    stats = [e for e in r.events if e.get("event") == "playbook_on_stats"]
    plan = stats[-1]["event_data"]["artifact_data"]["npuops_fleet_plan"]
    assert plan["kind"] == "plan" and plan["batches"] == [[N1]] and plan["hosts"][0]["host"] == N1, plan
    assert plan == json.loads((tmp_path / "reports" / "latest-plan.json").read_text())
    assert world(core_v1, coordination_v1, (N1,)) == before


def test_window_upgrades_gpu_and_npu_then_rerun_changes_nothing(kubeconfig, core_v1, report_dir, restore):
    restore(N1)
    restore(NPU)
    rc, out = playbook("maintenance_window.yml", kubeconfig, report_dir, f"{N1},{NPU}")
    assert rc == 0, out[-6000:]
    s, hosts = summary(report_dir)
    assert s["result"] == "ok"
    g, n = hosts[N1], hosts[NPU]
    assert (g["old_version"], g["new_version"], g["status"], g["final_state"]) == (
        "535.183.06",
        "550.90.07",
        "upgraded",
        sm.UPGRADE_DONE,
    )
    assert (n["old_version"], n["new_version"], n["status"], n["final_state"]) == (
        "2.4.0",
        "3.0.0",
        "upgraded",
        sm.UPGRADE_DONE,
    )
    for h in (g, n):
        assert {"preflight", "prepare", "install", "reload", "verify", "finish"} <= set(h["durations"]), h
        assert set(h["phases"]) == set(h["durations"]) and h["identity"]["same"] is True, h
    chat = (report_dir / "latest-chat.txt").read_text().splitlines()
    assert chat[0].startswith(f"npuops.fleet window {s['run_id']}: OK - upgraded 2"), chat
    assert chat[1] == f"upgraded: {N1} 535.183.06->550.90.07, {NPU} 2.4.0->3.0.0", chat
    assert chat[2] == "not upgraded: none", chat
    assert hx(N1, "nvidia-smi --query-gpu=driver_version --format=csv,noheader").stdout.split()[0] == "550.90.07"
    assert "KMD ver: 3.0.0" in hx(NPU, "rbln-smi").stdout
    assert "hold" in hx(N1, "dpkg --get-selections nvidia-utils-550-server").stdout
    for name, key in ((N1, GPU_STATE), (NPU, NPU_STATE)):
        nd = node(core_v1, name)
        assert nd.metadata.labels.get(key) == sm.UPGRADE_DONE
        assert not nd.spec.unschedulable
    md = (report_dir / "latest.md").read_text()
    assert "535.183.06 -> 550.90.07" in md and "2.4.0 -> 3.0.0" in md

    rc, out = playbook("maintenance_window.yml", kubeconfig, report_dir, f"{N1},{NPU}")
    assert rc == 0, out[-6000:]
    s, hosts = summary(report_dir)
    assert {h["status"] for h in hosts.values()} == {"already-at-target"}, hosts
    changed = recap_changed(out)
    assert changed.get(N1) == 0 and changed.get(NPU) == 0, changed


def test_reboot_timeout_marks_upgrade_failed_and_stops_later_batches(kubeconfig, core_v1, report_dir, restore):
    restore(N1)
    restore(NPU)
    policy = {
        "driver_upgrade_policy": {
            "maxParallelUpgrades": 1,
            "drain": {"enable": True, "timeoutSeconds": 60},
            "reboot": {"enable": True, "rebootTimeoutSeconds": 20},
        },
        # the host reboots, but Ansible never sees a new boot marker: "did not come back in time"
        "driver_upgrade_boot_time_command": "echo same-boot",
    }
    rc, out = playbook("maintenance_window.yml", kubeconfig, report_dir, f"{N1},{NPU}", policy)
    assert rc != 0, out[-6000:]
    s, hosts = summary(report_dir)
    g, n = hosts[N1], hosts[NPU]
    assert g["status"] == "failed" and g["failed_phase"] == "reboot", g
    assert "timed out" in g["reason"].lower(), g["reason"]
    assert g["final_state"] == sm.UPGRADE_FAILED
    assert n["status"] == "not-started" and N1 in n["reason"], n
    nd = node(core_v1, N1)
    assert nd.metadata.labels.get(GPU_STATE) == sm.UPGRADE_FAILED
    assert nd.spec.unschedulable
    npu = node(core_v1, NPU)
    assert not npu.spec.unschedulable and npu.metadata.labels.get(NPU_STATE) in (None, "", sm.UPGRADE_DONE)
    assert "2.4.0" in hx(NPU, "cat /sys/module/rebellions/version").stdout
    assert N1 in (report_dir / "latest.md").read_text()


def world(core_v1, coordination_v1, names):
    """What a plan must not change: the Nodes' labels, annotations and schedulability, each host's
    packages, holds and loaded driver, and the window's Lease."""
    out = {}
    for name in names:
        nd = node(core_v1, name)
        mod = "rebellions" if "npu" in name else "nvidia"
        out[name] = (nd.metadata.labels, nd.metadata.annotations, nd.spec.unschedulable,
                     hx(name, f"dpkg-query -W -f='${{Package}} ${{Version}} ${{db:Status-Abbrev}}\\n'; "
                              f"cat /sys/module/{mod}/version").stdout)
    leases = coordination_v1.list_namespaced_lease("kube-system").items
    # held window Leases: a closed window stays as a record without a holder (it takes no lock)
    out["leases"] = sorted(lease.metadata.name for lease in leases
                           if lease.metadata.name.startswith("npuops-fleet-m") and lease.spec.holder_identity)
    return out


def installed(name, packages):
    """{package: version} of those of `packages` that dpkg has installed on host `name`."""
    if not packages:
        return {}
    out = hx(name, "dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\\n' " + " ".join(packages),
             check=False).stdout
    return {p: v for p, v, st in (line.split() for line in out.splitlines() if len(line.split()) == 3)
            if st[1] == "i"}


@pytest.mark.parametrize("parallel", [1, 0])
def test_drain_scenario_with_pdb(kubeconfig, core_v1, coordination_v1, report_dir, restore, trainer, parallel):
    """Lab part 1's drain scenario (trainer x4, PDB minAvailable 3) through the window, both batch
    sizes - planned first: the plan changes nothing and lists what the real run then does."""
    restore(N1)
    restore(NPU)
    pods = trainer(1)
    on = {p.spec.node_name for p in pods}
    assert {N1, NPU} <= on, on
    on_node = {p.spec.node_name: f"{NS}/{p.metadata.name}" for p in pods}
    policy = {
        "driver_upgrade_policy": {
            "maxParallelUpgrades": parallel,
            "maxUnavailable": "100%",
            "drain": {"enable": True, "deleteEmptyDirData": True, "timeoutSeconds": 240},
        }
    }
    before = world(core_v1, coordination_v1, (N1, NPU))
    rc, out = playbook("maintenance_window.yml", kubeconfig, report_dir, f"{N1},{NPU}", policy,
                       "maintenance_mode=plan")
    assert rc == 0, out[-6000:]
    assert world(core_v1, coordination_v1, (N1, NPU)) == before
    assert not (report_dir / "latest.json").exists()  # a plan is not a run
    plan = json.loads((report_dir / "latest-plan.json").read_text())
    assert plan["would_start"] is True and plan["refused"] == []
    assert plan["batches"] == ([[N1], [NPU]] if parallel == 1 else [[N1, NPU]])
    planned = {h["host"]: h for h in plan["hosts"]}
    for name in (N1, NPU):
        assert planned[name]["status"] == "would-upgrade", planned[name]
        assert planned[name]["would_evict"] == [on_node[name]], planned[name]
        assert planned[name]["reboot"] is False and planned[name]["blocking_pdbs"] == []
    assert "| would |" in (report_dir / "latest-plan.md").read_text()

    rc, out = playbook("maintenance_window.yml", kubeconfig, report_dir, f"{N1},{NPU}", policy)
    assert rc == 0, out[-6000:]
    s, hosts = summary(report_dir)
    assert s["batch_size"] == parallel == plan["batch_size"]
    for name in (N1, NPU):
        h, p = hosts[name], planned[name]
        assert h["status"] == "upgraded", h
        assert sorted(h["evicted"]) == p["would_evict"], (h["evicted"], p["would_evict"])
        assert h["rebooted"] is p["reboot"]
        # apt did what the simulation said: every planned install at its version, every removal gone
        moved = {i["name"]: i["to"] for i in p["transaction"]["install"]}
        assert moved and installed(name, moved) == moved, (installed(name, moved), moved)
        gone = [r["name"] for r in p["transaction"]["remove"]]
        assert gone or name != N1, p["transaction"]  # 535 -> 550 is a branch change: the old branch goes
        assert installed(name, gone) == {}, gone
        assert not node(core_v1, name).spec.unschedulable


def test_pdb_that_allows_no_disruption_is_refused_before_any_cordon(kubeconfig, core_v1, report_dir, trainer):
    trainer(0)
    policy = {"driver_upgrade_policy": {"drain": {"enable": True, "timeoutSeconds": 30}}}
    rc, out = playbook("maintenance_window.yml", kubeconfig, report_dir, N1, policy)
    assert rc != 0
    s, hosts = summary(report_dir)
    h = hosts[N1]
    assert h["failed_phase"] == "preflight" and "trainer-pdb" in h["reason"], h
    assert not node(core_v1, N1).spec.unschedulable


N2 = f"{PREFIX}-node-2"
K45, K52 = "6.8.0-45-generic", "6.8.0-52-generic"  # lab-node-2 boots 6.8.0-45; the repo has 6.8.0-52


def selections(name):
    """{package: selection} from dpkg on host `name`."""
    return dict(line.split() for line in hx(name, "dpkg --get-selections").stdout.splitlines())


def test_kernel_patch_with_holds_in_place(kubeconfig, core_v1, coordination_v1, report_dir, restore):
    """The kernel patching path: a hardened host (kernel and driver held), driver already at the target,
    patched to a newer kernel in a window - planned first (nothing changes), then run: the driver module
    for the new kernel is on disk before the reboot, the host boots it, every hold is still in place."""
    restore(N2)
    rc, out = playbook("harden.yml", kubeconfig, report_dir, N2, f"harden_hosts={N2}")
    assert rc == 0, out[-4000:]
    held = {p for p, sel in selections(N2).items() if sel == "hold"}
    assert {f"linux-image-{K45}", f"linux-modules-{K45}", "nvidia-dkms-550-server-open"} <= held, held
    patch = f"driver_upgrade_kernel_release={K52}"

    before = world(core_v1, coordination_v1, (N2,))
    rc, out = playbook("maintenance_window.yml", kubeconfig, report_dir, N2, patch, "maintenance_mode=plan")
    assert rc == 0, out[-6000:]
    assert world(core_v1, coordination_v1, (N2,)) == before
    (p,) = json.loads((report_dir / "latest-plan.json").read_text())["hosts"]
    assert p["status"] == "would-upgrade" and p["reboot"] is True, p
    assert p["reboot_why"] == f"kernel patch: {K45} -> {K52}", p["reboot_why"]
    planned = {i["name"]: i["to"] for i in p["transaction"]["install"]}
    assert {f"linux-image-{K52}", f"linux-modules-{K52}", f"linux-headers-{K52}"} <= set(planned), planned
    assert p["transaction"]["remove"] == [], p["transaction"]

    rc, out = playbook("maintenance_window.yml", kubeconfig, report_dir, N2, patch)
    assert rc == 0, out[-6000:]
    s, hosts = summary(report_dir)
    h = hosts[N2]
    assert (h["status"], h["final_state"], h["rebooted"]) == ("upgraded", sm.UPGRADE_DONE, True), h
    assert (h["kernel_before"], h["kernel_after"]) == (K45, K52), h
    assert h["boot_kernel_module"]["kernel"] == K52 and h["boot_kernel_module"]["version"] == "550.90.07", h
    assert installed(N2, planned) == planned  # apt did what the plan said
    # On the host itself: the new kernel runs, the DKMS-built module for it is the target version, and
    # its file is older than the boot (it was in place before the reboot).
    assert hx(N2, "uname -r").stdout.strip() == K52
    ko = f"/lib/modules/{K52}/updates/dkms/nvidia.ko"
    info = dict(line.split("=", 1) for line in hx(N2, f"cat {ko}").stdout.splitlines() if "=" in line)
    assert info["version"] == "550.90.07" and info["vermagic"].split()[0] == K52, info
    built, booted = map(int, hx(N2, f"stat -c %Y {ko} /run/npuops-lab/boot_id").stdout.split())
    assert built <= booted, (built, booted)
    assert hx(N2, "cat /sys/module/nvidia/version").stdout.strip() == "550.90.07"
    # the holds: everything held before still is, and the new kernel's packages are held too
    now = {p for p, sel in selections(N2).items() if sel == "hold"}
    assert held | {f"linux-image-{K52}", f"linux-modules-{K52}", f"linux-headers-{K52}"} <= now, (held, now)
    nd = node(core_v1, N2)
    assert nd.status.node_info.kernel_version == K52
    assert nd.metadata.labels.get(GPU_STATE) == sm.UPGRADE_DONE and not nd.spec.unschedulable

    rc, out = playbook("maintenance_window.yml", kubeconfig, report_dir, N2, patch)
    assert rc == 0, out[-6000:]
    s, hosts = summary(report_dir)
    assert hosts[N2]["status"] == "already-at-target", hosts[N2]
    assert recap_changed(out).get(N2) == 0, out[-3000:]


@pytest.mark.parametrize(
    "release, why",
    [
        ("6.8.0-99-generic", "kernel 6.8.0-99-generic is not available in the apt sources"),
        # the DKMS-built driver needs the new kernel's headers: the lab repo has none for this kernel
        ("6.8.0-60-generic", "no installable version for linux-headers-6.8.0-60-generic"),
        # older than the running one: the newest installed kernel boots by default, not this one
        ("5.15.0-119-generic", f"installed kernel(s) {K45} sort after it and would boot instead"),
    ],
)
def test_kernel_patch_that_cannot_boot_is_refused_before_any_change(kubeconfig, core_v1, report_dir, release, why):
    before = hx(N2, "dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\\n'").stdout
    rc, out = playbook("maintenance_window.yml", kubeconfig, report_dir, N2, f"driver_upgrade_kernel_release={release}")
    assert rc != 0, out[-4000:]
    s, hosts = summary(report_dir)
    h = hosts[N2]
    assert h["failed_phase"] == "preflight" and why in h["reason"], h
    assert not node(core_v1, N2).spec.unschedulable
    assert hx(N2, "dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\\n'").stdout == before


K177, K179 = "5.15.0-177-generic", "5.15.0-179-generic"


def test_incident_audit_flags_then_window_fixes_and_ip_vs_loads(
    kubeconfig, core_v1, report_dir, restore, trainer
):
    """domain.md incident on lab-node-0: u-u upgrades 580 userspace + kernel; the drift monitor's
    mismatch gauge turns 1 and the audit flags it; the window (target 580.159.03) reboots into
    5.15.0-179, verifies, ip_vs loads there, and the gauge is back to 0.

    With the chart's default policy (drain off) and a newer kernel installed, the window must drain the
    node fully before the reboot: the PDB-protected CPU Deployment's pod there is evicted, not killed."""
    name = N0
    restore(name)
    pk = " ".join(
        f"{p}=580.126.09-0ubuntu1"
        for p in (
            "nvidia-driver-580-server-open",
            "nvidia-dkms-580-server-open",
            "nvidia-utils-580-server",
            "nvidia-compute-utils-580-server",
            "libnvidia-compute-580-server",
            "libnvidia-common-580-server",
        )
    )
    hx(
        name,
        "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "
        + pk
        + " linux-generic=5.15.0.177.161 linux-image-generic=5.15.0.177.161 linux-headers-generic=5.15.0.177.161",
    )
    before = hx(name, "cut -d' ' -f22 /proc/1/stat").stdout.strip()
    hx(name, "systemctl reboot", check=False)
    hostctl("wait-boot", name, "--after", before, "--timeout", "180")
    assert hx(name, "uname -r").stdout.strip() == K177
    # between windows, the host reports itself (driver_drift_monitor, the real node_exporter)
    from test_drift_monitor import INTERVAL, MARGIN, wait_metrics
    from test_drift_monitor import playbook as drift_monitor

    drift_monitor(name, report_dir, "-e", f"driver_drift_monitor_interval={INTERVAL}")
    wait_metrics(container(name), {'npu_driver_mismatch{verdict="ok"}': "0"}, INTERVAL + MARGIN)
    hx(name, "unattended-upgrade")
    assert hx(name, "nvidia-smi", check=False).returncode == 18  # NVML mismatch
    wait_metrics(container(name), {'npu_driver_mismatch{verdict="reload_required"}': "1"}, INTERVAL + MARGIN)

    rc, out = playbook("audit.yml", kubeconfig, report_dir, name, timeout=600)
    assert rc != 0, out[-4000:]
    audit = json.loads((report_dir / "audit-latest.json").read_text())
    row = [h for h in audit["hosts"] if h["host"] == name][0]
    assert row["verdict"] == "reload_required" and name in audit["findings"], row
    assert row["identity"]["same"] is True and not any("machine behind" in f for f in row["findings"]), row

    pods = trainer(1)  # one CPU pod per node, PDB allows one disruption
    mine = [p.metadata.name for p in pods if p.spec.node_name == name]
    assert mine, [(p.metadata.name, p.spec.node_name) for p in pods]
    rc, out = playbook(
        "maintenance_window.yml",
        kubeconfig,
        report_dir,
        name,
        "driver_upgrade_target_version=580.159.03",
        "driver_upgrade_kube_proxy_mode=ipvs",
        {"driver_upgrade_policy": {}},  # the charts' defaults: drain.enable false, reboot.enable false
    )
    assert rc == 0, out[-6000:]
    s, hosts = summary(report_dir)
    h = hosts[name]
    assert h["status"] == "upgraded" and h["rebooted"] and h["kernel_after"] == K179, h
    # drained before any host work although the policy is the chart default (drain.enable false)
    assert f"{NS}/{mine[0]}" in h["evicted"], h
    assert "drain.enable is false" in h["full_drain"] and K179 in h["full_drain"], h
    assert h["reboot_planned"] and "boot kernel changes" in h["reboot_planned_why"], h
    assert "Drains the policy did not ask for" in (report_dir / "latest.md").read_text()
    assert h["new_version"] == "580.159.03"
    assert "ip_vs" in hx(name, "lsmod").stdout.split()
    assert hx(name, "nvidia-smi --query-gpu=driver_version --format=csv,noheader").stdout.split()[0] == "580.159.03"
    assert not node(core_v1, name).spec.unschedulable
    # and the window fixed what the host reported
    wait_metrics(container(name), {'npu_driver_mismatch{verdict="ok"}': "0", "npu_driver_reboot_pending": "0",
                                   "npu_driver_drift_check_success": "1"}, INTERVAL + MARGIN)


def test_retry_after_a_lost_gpu_compares_with_the_first_attempts_devices(
    kubeconfig, core_v1, report_dir, restore
):
    """Run 1 fails verification with 7 of 8 devices; run 2 on the same host (7 devices) fails too: the
    device baseline recorded on the Node at the first attempt is kept across the retry, and labels that
    say "at target" never put the node back into service."""
    restore(N1)
    # the simulated boot creates DEVICES device files: one GPU is gone after the next reboot
    hx(N1, "sed -i 's/^DEVICES=.*/DEVICES=7/' /var/lib/npuops-lab/host/hw.conf")
    policy = {
        "driver_upgrade_policy": {"maxUnavailable": "100%", "reboot": {"enable": True, "rebootTimeoutSeconds": 300}}
    }
    for attempt in (1, 2):
        rc, out = playbook("maintenance_window.yml", kubeconfig, report_dir, N1, policy)
        assert rc != 0, out[-4000:]
        s, hosts = summary(report_dir)
        h = hosts[N1]
        assert h["status"] == "failed" and h["failed_phase"] == "verify", (attempt, h)
        assert "devices 7 (before the first attempt 8" in h["reason"], (attempt, h["reason"])
        assert h["baseline"]["device_count"] == 8, (attempt, h)
        n = node(core_v1, N1)
        assert n.metadata.labels.get(GPU_STATE) == sm.UPGRADE_FAILED and n.spec.unschedulable, attempt
    # run 2 saw the host at the target version with 7 devices and still did not take the shortcut
    assert h["baseline_mismatch"] and "7 devices, 8 before" in h["baseline_mismatch"], h


def test_rerun_after_a_kill_in_a_finish_or_reboot_state_goes_on_from_there(
    kubeconfig, core_v1, report_dir, restore
):
    """A run killed after the host work ends as an uninterrupted run would: from uncordon-required the
    rerun verifies and uncordons (it does not mark the node failed), from reboot-required it reboots
    (never a reload waiting for a boot that does not come) and validates the new boot."""
    restore(N1)
    rc, out = playbook("maintenance_window.yml", kubeconfig, report_dir, N1)
    assert rc == 0, out[-4000:]
    ann = "nvidia.com/gpu-driver-upgrade-"

    def left_in(state, **anns):
        # what a run killed right after writing ``state`` leaves behind (cordoned, with our record)
        record = json.dumps({"from": "", "to": state, "reason": "test: killed here", "time": "2026-12-01T00:00:00Z"})
        body_anns = {ann + "last-transition": record, ann + "unschedulable-before": "false"}
        body_anns.update({ann + k: v for k, v in anns.items()})
        core_v1.patch_node(
            N1, {"metadata": {"labels": {GPU_STATE: state}, "annotations": body_anns}, "spec": {"unschedulable": True}}
        )

    left_in(sm.UNCORDON_REQUIRED)
    rc, out = playbook("maintenance_window.yml", kubeconfig, report_dir, N1)
    assert rc == 0, out[-4000:]
    _s, hosts = summary(report_dir)
    h = hosts[N1]
    assert h["status"] == "upgraded" and h["resumed_from"] == sm.UNCORDON_REQUIRED, h
    assert "install" not in h["durations"] and not h["rebooted"], h
    n = node(core_v1, N1)
    assert n.metadata.labels[GPU_STATE] == sm.UPGRADE_DONE and not n.spec.unschedulable

    boot = n.status.node_info.boot_id
    left_in(sm.REBOOT_REQUIRED, **{"boot-id-before": boot, "target-version": "550.90.07"})
    rc, out = playbook("maintenance_window.yml", kubeconfig, report_dir, N1)
    assert rc == 0, out[-4000:]
    _s, hosts = summary(report_dir)
    h = hosts[N1]
    assert h["status"] == "upgraded" and h["rebooted"] and h["resumed_from"] == sm.REBOOT_REQUIRED, h
    assert f"earlier run left the node in {sm.REBOOT_REQUIRED}" in h["reboot_reason"], h
    n = node(core_v1, N1)
    assert n.metadata.labels[GPU_STATE] == sm.UPGRADE_DONE and not n.spec.unschedulable
    assert n.status.node_info.boot_id != boot
