"""npu_node_upgrade on the lab (issue 5), run through ansible-playbook with a ServiceAccount bound only
to deploy/rbac/ (ClusterRole npuops-fleet, Roles npuops-fleet-leases and npuops-fleet-events).

Covers the drain scenario of Lab part 1 (trainer x4 with anti-affinity + trainer-pdb), C13-C16, the
skip label, emptyDir / controller-less / DaemonSet pods, operand pause/restore, check mode, and a run
killed mid-drain that is resumed. Every test puts its node back (labels, annotations, schedulability)
and removes what it created, so the file is rerunnable.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from ansible_tasks import COLLECTIONS, run_module
from labhelpers import driver_labels, gone, shipped_rbac, wait
from lablib import nodes as labnodes  # tests/lab on sys.path via conftest.py

from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
NS = "gpu-drv"
STATE = "nvidia.com/gpu-driver-upgrade-state"
SKIP = "nvidia.com/gpu-driver-upgrade.skip"
ANN_PREFIX = "nvidia.com/gpu-driver-upgrade-"
ANN_PREFIXES = ("nvidia.com/gpu-driver-upgrade-", "rebellions.ai/npu-driver-upgrade-")
DEVICE_PLUGIN = "nvidia.com/gpu.deploy.device-plugin"
FAST_DRAIN = {"drain": {"enable": True, "timeoutSeconds": 10}, "maxUnavailable": "100%", "maxParallelUpgrades": 0}


@pytest.fixture
def kubeconfig(sa_kubeconfig):
    """A ServiceAccount bound to exactly the shipped RBAC (deploy/rbac/)."""
    return sa_kubeconfig(shipped=True)


@pytest.fixture
def node_guard(core_v1):
    """Snapshot nodes used by a test and put labels, annotations and schedulability back afterwards."""
    saved = {}

    def guard(name):
        node = core_v1.read_node(name)
        saved[name] = (
            dict(node.metadata.labels or {}),
            dict(node.metadata.annotations or {}),
            bool(node.spec.unschedulable),
        )
        return name

    yield guard
    for name, (labels, anns, unschedulable) in saved.items():
        node = core_v1.read_node(name)
        now_labels, now_ann = node.metadata.labels or {}, node.metadata.annotations or {}
        label_patch = {k: labels.get(k) for k in set(now_labels) | set(labels) if now_labels.get(k) != labels.get(k)}
        ann_patch = {k: None for k in now_ann if k.startswith(ANN_PREFIXES) and k not in anns}
        core_v1.patch_node(
            name,
            {
                "metadata": {"labels": label_patch, "annotations": ann_patch},
                "spec": {"unschedulable": unschedulable or None},
            },
        )


def upgrade(kubeconfig, node, phase, check=False, **kw):
    args = {"node": node, "phase": phase, "vendor": "nvidia"}
    args.update(kw)
    return run_module("npu_node_upgrade", args, kubeconfig, check=check)


def pods_on(core_v1, node, selector=None):
    return [
        p
        for p in core_v1.list_pod_for_all_namespaces(
            field_selector="spec.nodeName=" + node, label_selector=selector
        ).items
        if not p.metadata.deletion_timestamp
    ]


def trainer(replicas=4):
    labels = {"app": "trainer"}
    return {
        "metadata": {"name": "trainer", "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "affinity": {
                        "podAntiAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": [
                                {"labelSelector": {"matchLabels": labels}, "topologyKey": "kubernetes.io/hostname"}
                            ]
                        }
                    },
                    "containers": [{"name": "trainer", "image": "nvcr.io/nvidia/pytorch:24.07-py3"}],
                },
            },
        },
    }


@pytest.fixture
def trainer_with_pdb(core_v1, apps_v1, policy_v1):
    """trainer x4 spread over the 4 nodes and trainer-pdb minAvailable 4 (disruptionsAllowed 0)."""
    assert not core_v1.list_node(field_selector="metadata.name=lab-node-3").items, "spread assumes 4 nodes"
    apps_v1.create_namespaced_deployment(NS, trainer())
    policy_v1.create_namespaced_pod_disruption_budget(
        NS,
        {
            "metadata": {"name": "trainer-pdb"},
            "spec": {"minAvailable": 4, "selector": {"matchLabels": {"app": "trainer"}}},
        },
    )
    try:
        wait(
            "4 trainer pods Running",
            lambda: (
                len(
                    {
                        p.spec.node_name
                        for p in core_v1.list_namespaced_pod(NS, label_selector="app=trainer").items
                        if p.status.phase == "Running"
                    }
                )
                == 4
            ),
        )
        wait(
            "PDB at 0",
            lambda: (
                (s := policy_v1.read_namespaced_pod_disruption_budget("trainer-pdb", NS).status)
                and s.current_healthy == 4
                and s.disruptions_allowed == 0
            ),
        )
        yield
    finally:
        gone(policy_v1.delete_namespaced_pod_disruption_budget, "trainer-pdb", NS)
        gone(apps_v1.delete_namespaced_deployment, "trainer", NS)
        wait("trainer pods gone", lambda: not core_v1.list_namespaced_pod(NS, label_selector="app=trainer").items)


def relax_pdb(policy_v1, min_available=3):
    policy_v1.patch_namespaced_pod_disruption_budget("trainer-pdb", NS, {"spec": {"minAvailable": min_available}})
    wait(
        "PDB allows 1",
        lambda: policy_v1.read_namespaced_pod_disruption_budget("trainer-pdb", NS).status.disruptions_allowed == 1,
    )


@pytest.fixture
def device_plugin(core_v1, apps_v1):
    """An operand DaemonSet selecting nodes by the device-plugin deploy label."""
    ds = {
        "metadata": {"name": "it-device-plugin"},
        "spec": {
            "selector": {"matchLabels": {"app": "it-device-plugin"}},
            "template": {
                "metadata": {"labels": {"app": "it-device-plugin"}},
                "spec": {
                    "nodeSelector": {DEVICE_PLUGIN: "true"},
                    "containers": [{"name": "plugin", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.16.2"}],
                },
            },
        },
    }
    apps_v1.create_namespaced_daemon_set(NS, ds)
    try:
        wait(
            "device plugin on lab-node-1",
            lambda: any(p.status.phase == "Running" for p in pods_on(core_v1, "lab-node-1", "app=it-device-plugin")),
        )
        yield
    finally:
        gone(apps_v1.delete_namespaced_daemon_set, "it-device-plugin", NS)
        wait(
            "plugin pods gone", lambda: not core_v1.list_namespaced_pod(NS, label_selector="app=it-device-plugin").items
        )


def node_events(core_v1, node):
    return [
        e
        for e in core_v1.list_namespaced_event("default", field_selector="involvedObject.name=" + node).items
        if e.reason and e.reason.startswith("DriverUpgrade")
    ]


def test_drain_scenario_pdb_refuses_then_succeeds_and_finish_uncordons(
    core_v1, policy_v1, kubeconfig, node_guard, trainer_with_pdb, device_plugin
):
    node = node_guard("lab-node-1")
    before = core_v1.read_node(node)
    assert not before.spec.unschedulable
    # C13: minAvailable 4 -> refused, names trainer-pdb and the pod; schedulability restored.
    res = upgrade(kubeconfig, node, "prepare", target_version="550.90.07", policy=FAST_DRAIN)
    assert res.get("failed"), res
    assert "trainer-pdb" in res["msg"] and "gpu-drv/trainer-" in res["msg"], res["msg"]
    assert any("trainer-pdb" in p for p in res["blocking_pdbs"])
    after = core_v1.read_node(node)
    assert not after.spec.unschedulable
    assert after.metadata.labels[STATE] == sm.UPGRADE_FAILED
    assert after.metadata.labels[DEVICE_PLUGIN] == "true"
    assert "trainer-pdb" in json.loads(after.metadata.annotations[ANN_PREFIX + "last-transition"])["reason"]

    # minAvailable 3 -> prepare (retry) drains, pauses the operand, ends ready for host work.
    relax_pdb(policy_v1)
    res = upgrade(kubeconfig, node, "prepare", target_version="550.90.07", policy=FAST_DRAIN)
    assert not res.get("failed"), res.get("msg")
    assert res["state"] == sm.POD_RESTART_REQUIRED and res["previous_state"] == sm.UPGRADE_FAILED
    assert res["cordoned_by_upgrade"] and res["host_work_required"]
    assert any(e.startswith("gpu-drv/trainer-") for e in res["evicted"])
    assert [t["to"] for t in res["transitions"]] == [
        sm.UPGRADE_REQUIRED,
        sm.CORDON_REQUIRED,
        sm.WAIT_FOR_JOBS_REQUIRED,
        sm.POD_DELETION_REQUIRED,
        sm.DRAIN_REQUIRED,
        sm.POD_RESTART_REQUIRED,
    ]
    n = core_v1.read_node(node)
    assert n.spec.unschedulable and n.metadata.labels[DEVICE_PLUGIN] == "paused-for-driver-upgrade"
    assert not pods_on(core_v1, node, "app=trainer") and not pods_on(core_v1, node, "app=it-device-plugin")

    # Host work (simulated: GFD publishes the new driver), then finish.
    core_v1.patch_node(node, {"metadata": {"labels": driver_labels("550.90.07")}})
    res = upgrade(kubeconfig, node, "finish", target_version="550.90.07", validation_timeout=60)
    assert not res.get("failed"), res.get("msg")
    assert res["state"] == sm.UPGRADE_DONE and res["at_target"]
    n = core_v1.read_node(node)
    assert not n.spec.unschedulable
    assert n.metadata.labels[DEVICE_PLUGIN] == "true"
    assert [k for k in n.metadata.annotations if k.startswith(ANN_PREFIX)] == [ANN_PREFIX + "last-transition"]
    assert any(p.status.phase == "Running" for p in pods_on(core_v1, node, "app=it-device-plugin"))
    reasons = {e.reason for e in node_events(core_v1, node)}
    assert {"DriverUpgradeStateChanged", "DriverUpgradeFailed"} <= reasons
    # Rerun after success changes nothing.
    res = upgrade(kubeconfig, node, "finish", target_version="550.90.07")
    assert not res["changed"] and res["state"] == sm.UPGRADE_DONE


def test_admin_cordoned_node_stays_cordoned_and_validation_times_out(core_v1, kubeconfig, node_guard):
    node = node_guard("lab-node-2")
    core_v1.patch_node(node, {"spec": {"unschedulable": True}})
    res = upgrade(kubeconfig, node, "prepare", target_version="560.35.03", policy={"maxParallelUpgrades": 0})
    assert not res.get("failed"), res.get("msg")
    assert res["state"] == sm.POD_RESTART_REQUIRED and not res["cordoned_by_upgrade"]
    # C16: validation has a timeout and a reason on the node; the node stays cordoned.
    res = upgrade(kubeconfig, node, "finish", validation_timeout=3)
    assert res.get("failed") and "driver label says 550.90.07, target is 560.35.03" in res["msg"]
    n = core_v1.read_node(node)
    assert n.metadata.labels[STATE] == sm.UPGRADE_FAILED and n.spec.unschedulable
    assert "560.35.03" in json.loads(n.metadata.annotations[ANN_PREFIX + "last-transition"])["reason"]
    # Retry; the driver now reports the target: done, and still cordoned (admin's cordon).
    res = upgrade(kubeconfig, node, "prepare", target_version="560.35.03", policy={"maxParallelUpgrades": 0})
    assert not res.get("failed"), res.get("msg")
    core_v1.patch_node(node, {"metadata": {"labels": driver_labels("560.35.03")}})
    res = upgrade(kubeconfig, node, "finish", target_version="560.35.03")
    assert not res.get("failed"), res.get("msg")
    assert res["state"] == sm.UPGRADE_DONE
    assert core_v1.read_node(node).spec.unschedulable is True


def test_c16_relabelled_required_is_done_only_at_target(core_v1, kubeconfig, node_guard):
    node = node_guard("lab-node-0")  # runs 550.90.07
    core_v1.patch_node(node, {"metadata": {"labels": {STATE: sm.UPGRADE_REQUIRED}}})
    res = upgrade(kubeconfig, node, "prepare", target_version="560.35.03", check=True)
    assert not res.get("failed"), res.get("msg")
    assert sm.UPGRADE_DONE not in [t["to"] for t in res["transitions"]]
    assert res["transitions"][-1]["to"] == sm.POD_RESTART_REQUIRED
    n = core_v1.read_node(node)
    assert n.metadata.labels[STATE] == sm.UPGRADE_REQUIRED and not n.spec.unschedulable  # check mode: no change
    res = upgrade(kubeconfig, node, "prepare", target_version="550.90.07")
    assert res["state"] == sm.UPGRADE_DONE and res["host_work_required"] is False
    assert [t["to"] for t in res["transitions"]] == [sm.UPGRADE_DONE]
    assert not core_v1.read_node(node).spec.unschedulable


def test_skip_label_leaves_node_alone(core_v1, kubeconfig, node_guard):
    node = node_guard("lab-node-0")
    core_v1.patch_node(node, {"metadata": {"labels": {SKIP: "true"}}})
    res = upgrade(kubeconfig, node, "prepare", target_version="560.35.03")
    assert res["skipped"] and SKIP in res["skip_reason"] and not res["changed"]
    n = core_v1.read_node(node)
    assert STATE not in (n.metadata.labels or {}) and not n.spec.unschedulable


def test_invalid_policy_fails_before_any_change(core_v1, kubeconfig, node_guard):
    node = node_guard("lab-node-0")
    res = upgrade(kubeconfig, node, "prepare", target_version="560.35.03", policy={"drain": {"enabled": True}})
    assert res.get("failed") and "policy.drain.enabled" in res["msg"]
    assert STATE not in (core_v1.read_node(node).metadata.labels or {})


def test_c14_emptydir_controllerless_daemonset(core_v1, apps_v1, kubeconfig, node_guard):
    node = node_guard("lab-node-2")
    img = "registry.k8s.io/pause:3.10"
    core_v1.create_namespaced_pod(
        NS,
        {
            "metadata": {"name": "it-bare", "labels": {"app": "it-c14"}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": img}]},
        },
    )
    apps_v1.create_namespaced_deployment(
        NS,
        {
            "metadata": {"name": "it-scratch"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "it-c14"}},
                "template": {
                    "metadata": {"labels": {"app": "it-c14"}},
                    "spec": {
                        "nodeSelector": {"kubernetes.io/hostname": node},
                        "volumes": [{"name": "s", "emptyDir": {}}],
                        "containers": [{"name": "c", "image": img}],
                    },
                },
            },
        },
    )
    apps_v1.create_namespaced_daemon_set(
        NS,
        {
            "metadata": {"name": "it-agent"},
            "spec": {
                "selector": {"matchLabels": {"app": "it-agent"}},
                "template": {
                    "metadata": {"labels": {"app": "it-agent"}},
                    "spec": {
                        "nodeSelector": {"kubernetes.io/hostname": node},
                        "containers": [{"name": "c", "image": img}],
                    },
                },
            },
        },
    )
    try:
        wait(
            "test pods running",
            lambda: (
                len(
                    [
                        p
                        for p in pods_on(core_v1, node)
                        if p.status.phase == "Running" and p.metadata.labels.get("app") in ("it-c14", "it-agent")
                    ]
                )
                == 3
            ),
        )
        policy = {"drain": {"enable": True, "timeoutSeconds": 20}, "maxParallelUpgrades": 0}
        res = upgrade(kubeconfig, node, "prepare", target_version="560.35.03", policy=policy)
        assert res.get("failed"), res
        msg = res["msg"]
        assert "gpu-drv/it-bare" in msg and "drain.force" in msg
        assert "pods with local storage (emptyDir)" in msg and "drain.deleteEmptyDirData" in msg
        assert "it-agent" not in msg
        assert not core_v1.read_node(node).spec.unschedulable  # schedulability restored
        policy["drain"].update(force=True, deleteEmptyDirData=True)
        res = upgrade(kubeconfig, node, "prepare", target_version="560.35.03", policy=policy)
        assert not res.get("failed"), res.get("msg")
        assert "gpu-drv/it-bare" in res["evicted"] and any(e.startswith("gpu-drv/it-scratch-") for e in res["evicted"])
        assert not any("it-agent" in e for e in res["evicted"])
        assert pods_on(core_v1, node, "app=it-agent")  # DaemonSet pods are never evicted
    finally:
        gone(apps_v1.delete_namespaced_deployment, "it-scratch", NS)
        gone(apps_v1.delete_namespaced_daemon_set, "it-agent", NS)
        gone(core_v1.delete_namespaced_pod, "it-bare", NS)
        wait(
            "c14 pods gone",
            lambda: not core_v1.list_namespaced_pod(NS, label_selector="app in (it-c14,it-agent)").items,
        )


def test_check_mode_reports_would_evict(core_v1, kubeconfig, node_guard, trainer_with_pdb):
    node = node_guard("lab-node-1")
    res = upgrade(kubeconfig, node, "prepare", check=True, target_version="550.90.07", policy=FAST_DRAIN)
    assert not res.get("failed"), res.get("msg")
    assert any(p.startswith("gpu-drv/trainer-") for p in res["would_evict"])
    assert any("trainer-pdb" in p for p in res["blocking_pdbs"])
    n = core_v1.read_node(node)
    assert STATE not in (n.metadata.labels or {}) and not n.spec.unschedulable
    status = upgrade(kubeconfig, node, "status", policy=FAST_DRAIN)
    assert any("trainer-pdb" in p for p in status["blocking_pdbs"]) and not status["changed"]


def _start_playbook(kubeconfig, tasks):
    tmp = tempfile.mkdtemp(prefix="npuops-it-")
    pb = Path(tmp) / "play.yml"
    pb.write_text(
        yaml.safe_dump(
            [{"hosts": "localhost", "gather_facts": False, "connection": "local", "tasks": tasks}], sort_keys=False
        )
    )
    env = dict(
        os.environ,
        ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS),
        K8S_AUTH_KUBECONFIG=kubeconfig,
        ANSIBLE_PYTHON_INTERPRETER=sys.executable,
    )
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", str(pb)]
    return subprocess.Popen(
        cmd, cwd=tmp, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )


def descendants(pid):
    """Child processes (recursively) of ``pid``, from /proc (ansible runs the module in its own session)."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path("/proc/%s/stat" % entry).read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def test_killed_mid_drain_then_rerun_resumes(core_v1, policy_v1, kubeconfig, node_guard, trainer_with_pdb):
    node = node_guard("lab-node-1")
    policy = dict(FAST_DRAIN, drain={"enable": True, "timeoutSeconds": 300})
    args = {"node": node, "phase": "prepare", "target_version": "550.90.07", "policy": policy}
    proc = _start_playbook(kubeconfig, [{"npuops.fleet.npu_node_upgrade": args}])
    try:
        wait(
            sm.DRAIN_REQUIRED,
            lambda: (core_v1.read_node(node).metadata.labels or {}).get(STATE) == sm.DRAIN_REQUIRED,
            timeout=90,
        )
        time.sleep(2)  # inside the eviction retry loop (trainer-pdb refuses)
    finally:
        for pid in [proc.pid, *descendants(proc.pid)]:  # only processes this test started
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait()
    n = core_v1.read_node(node)
    assert n.spec.unschedulable and n.metadata.labels[STATE] == sm.DRAIN_REQUIRED
    relax_pdb(policy_v1)
    res = upgrade(kubeconfig, node, "prepare", target_version="550.90.07", policy=FAST_DRAIN)
    assert not res.get("failed"), res.get("msg")
    assert res["previous_state"] == sm.DRAIN_REQUIRED
    assert [t["to"] for t in res["transitions"]] == [sm.POD_RESTART_REQUIRED]
    assert res["cordoned_by_upgrade"]
    res = upgrade(kubeconfig, node, "fail", reason="host work failed (test)")
    assert res["state"] == sm.UPGRADE_FAILED
    assert core_v1.read_node(node).spec.unschedulable  # fail leaves the node cordoned


def test_rbac_role_is_what_the_module_needs():
    """The shipped RBAC (the tests above use only it): node and pod rights cluster-wide, Leases and
    Events namespaced, Lease updates only on the run's names."""
    docs = {d["metadata"]["name"]: d for d in shipped_rbac()}
    role = docs["npuops-fleet"]
    assert role["kind"] == "ClusterRole"
    verbs = {(r["apiGroups"][0], res): set(r["verbs"]) for r in role["rules"] for res in r["resources"]}
    assert verbs[("", "pods/eviction")] == {"create"}
    assert "delete" not in verbs[("", "nodes")] and "update" not in verbs[("", "nodes")]
    assert "delete" not in verbs[("", "pods")]  # pods leave only through the Eviction API
    assert verbs[("policy", "poddisruptionbudgets")] == {"list"}
    # no Lease or Event rights cluster-wide; the workload check only lists pod templates and owners
    assert {g for g, _res in verbs} == {"", "policy", "apps", "batch", "resource.k8s.io"}
    assert verbs[("resource.k8s.io", "resourceclaims")] == {"get"}  # the DRA rule: one GET per claim
    assert {verbs[k] == {"list"} for k in verbs if k[0] in ("apps", "batch")} == {True}
    assert {res for g, res in verbs if g in ("apps", "batch")} == {
        "deployments", "replicasets", "statefulsets", "jobs", "cronjobs"}
    leases = docs["npuops-fleet-leases"]
    assert (leases["kind"], leases["metadata"]["namespace"]) == ("Role", "kube-system")
    named = [r for r in leases["rules"] if r.get("resourceNames")]
    assert {v for r in named for v in r["verbs"]} == {"get", "update", "delete"}
    assert set(named[0]["resourceNames"]) == {
        "npuops-fleet-maintenance-window", "npuops-fleet-admission-nvidia", "npuops-fleet-admission-rebellions"}
    assert [r["verbs"] for r in leases["rules"] if not r.get("resourceNames")] == [["create"]]
    events = docs["npuops-fleet-events"]
    assert (events["kind"], events["metadata"]["namespace"]) == ("Role", "default")
    assert events["rules"] == [{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}]


def test_admission_waits_at_max_unavailable(core_v1, kubeconfig, node_guard):
    node_guard("lab-node-0")
    node = node_guard("lab-node-1")
    core_v1.patch_node("lab-node-0", {"spec": {"unschedulable": True}})  # 1 of 3 GPU nodes unavailable
    res = upgrade(kubeconfig, node, "prepare", target_version="560.35.03", admission_timeout=3)
    assert res.get("failed") and "maxUnavailable 25%" in res["msg"] and "lab-node-0" in res["msg"], res.get("msg")
    n = core_v1.read_node(node)
    assert STATE not in (n.metadata.labels or {}) and not n.spec.unschedulable  # nothing changed


def test_gpu_pod_deletion_and_reboot_path(core_v1, apps_v1, kubeconfig, node_guard):
    node = node_guard("lab-node-2")
    labels = {"app": "it-gpu-job"}
    apps_v1.create_namespaced_deployment(
        NS,
        {
            "metadata": {"name": "it-gpu-job"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "nodeSelector": {"kubernetes.io/hostname": node},
                        "containers": [
                            {
                                "name": "c",
                                "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
                                "resources": {"limits": {"nvidia.com/gpu": "1"}},
                            }
                        ],
                    },
                },
            },
        },
    )
    try:
        wait(
            "gpu job running",
            lambda: any(p.status.phase == "Running" for p in pods_on(core_v1, node, "app=it-gpu-job")),
        )
        res = upgrade(kubeconfig, node, "prepare", target_version="560.35.03", policy={"maxParallelUpgrades": 0})
        assert not res.get("failed"), res.get("msg")
        assert any(d.startswith("gpu-drv/it-gpu-job-") for d in res["deleted"]) and not res["evicted"]
        assert sm.DRAIN_REQUIRED not in [t["to"] for t in res["transitions"]]  # drain disabled by default
        labnodes.set_node_info(core_v1, node, boot_id="it-boot-1")
        assert upgrade(kubeconfig, node, "reboot")["state"] == sm.REBOOT_REQUIRED
        res = upgrade(kubeconfig, node, "finish", validation_timeout=3)  # no reboot seen: same bootID
        assert res.get("failed") and "still reports bootID it-boot-1" in res["msg"], res.get("msg")
        assert core_v1.read_node(node).spec.unschedulable
        res = upgrade(kubeconfig, node, "prepare", target_version="560.35.03", policy={"maxParallelUpgrades": 0})
        assert upgrade(kubeconfig, node, "reboot")["state"] == sm.REBOOT_REQUIRED
        labnodes.set_node_info(core_v1, node, boot_id="it-boot-2")  # the kubelet after the reboot
        core_v1.patch_node(node, {"metadata": {"labels": driver_labels("560.35.03")}})
        res = upgrade(kubeconfig, node, "finish")
        assert not res.get("failed"), res.get("msg")
        assert [t["to"] for t in res["transitions"]] == [
            sm.REBOOT_VALIDATION_REQUIRED,
            sm.VALIDATION_REQUIRED,
            sm.UNCORDON_REQUIRED,
            sm.UPGRADE_DONE,
        ]
        assert not core_v1.read_node(node).spec.unschedulable
    finally:
        gone(apps_v1.delete_namespaced_deployment, "it-gpu-job", NS)
        wait("gpu job gone", lambda: not core_v1.list_namespaced_pod(NS, label_selector="app=it-gpu-job").items)


def test_rebellions_npu_node_prepare_finish(core_v1, kubeconfig, node_guard):
    node = node_guard("lab-npu-0")  # rebellions.ai/driver-version.full 2.4.0
    args = {"vendor": "rebellions", "target_version": "3.0.0"}
    res = upgrade(kubeconfig, node, "prepare", **args)
    assert not res.get("failed"), res.get("msg")
    assert res["driver_version"] == "2.4.0" and res["state"] == sm.POD_RESTART_REQUIRED
    labels = core_v1.read_node(node).metadata.labels
    assert labels["rebellions.ai/npu-driver-upgrade-state"] == sm.POD_RESTART_REQUIRED
    assert labels["rebellions.ai/npu.deploy.device-plugin"] == "paused-for-driver-upgrade"
    assert labels["rebellions.ai/npu.deploy.driver"] == "true"
    core_v1.patch_node(node, {"metadata": {"labels": {"rebellions.ai/driver-version.full": "3.0.0"}}})
    res = upgrade(kubeconfig, node, "finish", **args)
    assert not res.get("failed"), res.get("msg")
    n = core_v1.read_node(node)
    assert res["state"] == sm.UPGRADE_DONE and not n.spec.unschedulable
    assert n.metadata.labels["rebellions.ai/npu.deploy.device-plugin"] == "true"
