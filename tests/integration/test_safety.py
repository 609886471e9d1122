"""Safety of npu_node_upgrade on the real apiserver: terminating pods, evictions in the pod-deletion
step, admission under concurrency, races on one node, admission-policy refusals, the skip label in the
middle of an upgrade, the device baseline across retries.

Each test makes its own kwok nodes (``it-safe-*``) with a presence label of their own, so the lab's
GPU nodes and other tests' admission counts are untouched; the modules run through ansible-playbook
as a ServiceAccount bound only to the shipped ClusterRole.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path

import pytest
from ansible_tasks import run_module
from kubernetes import client
from labhelpers import create_kwok_nodes, delete_nodes, driver_labels, dry_run_eviction, poll, ready, wait

from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
NS = "gpu-drv"
PRESENT = "it.npuops.io/gpu.present"
STATE = "nvidia.com/gpu-driver-upgrade-state"
SKIP = "nvidia.com/gpu-driver-upgrade.skip"
ANN = "nvidia.com/gpu-driver-upgrade-"
# the states that count as taken by an upgrade (admission to uncordon): the tests' own choice, not
# states.py's IN_PROGRESS_STATES; only the names are states.py's constants
TAKEN = {
    sm.UPGRADE_REQUIRED,
    sm.CORDON_REQUIRED,
    sm.WAIT_FOR_JOBS_REQUIRED,
    sm.POD_DELETION_REQUIRED,
    sm.DRAIN_REQUIRED,
    sm.POD_RESTART_REQUIRED,
    sm.REBOOT_REQUIRED,
    sm.REBOOT_VALIDATION_REQUIRED,
    sm.VALIDATION_REQUIRED,
    sm.UNCORDON_REQUIRED,
}
# The nodes of these tests are a "vendor" of their own: nvidia's labels, another presence label.
PROFILE = {"presence_label": PRESENT}


@pytest.fixture
def kubeconfig(sa_kubeconfig):
    """A ServiceAccount bound to exactly the shipped RBAC (deploy/rbac/)."""
    return sa_kubeconfig(shipped=True)


@pytest.fixture
def kwok_nodes(core_v1):
    """make(n) -> names of n fresh Ready kwok GPU nodes (driver 535.183.06, 8 GPUs), deleted afterwards."""
    made = []

    def make(n):
        labels = {PRESENT: "true", "nvidia.com/gpu.deploy.device-plugin": "true", **driver_labels("535.183.06")}
        cap = {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"}
        names = create_kwok_nodes(core_v1, "it-safe", n, labels=labels, capacity=cap)
        made.extend(names)
        return names

    yield make
    delete_nodes(core_v1, made)


def upgrade(kubeconfig, node, phase, check=False, **kw):
    args = {"node": node, "phase": phase, "vendor": "nvidia", "vendor_profile": PROFILE}
    args.update(kw)
    return run_module("npu_node_upgrade", args, kubeconfig, check=check)


def gpu_pod(name, node, finalizer=False, grace=30, labels=None):
    meta = {"name": name, "labels": labels or {"app": name}}
    if finalizer:
        meta["finalizers"] = ["npuops.io/it-hold"]
    return {
        "metadata": meta,
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": grace,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {"name": "c", "image": "cuda:12", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ],
        },
    }


def rs_owned(core_v1, apps_v1, name, node, replicas=1):
    """A Deployment whose pods run on ``node`` (so they have a controller and may be evicted)."""
    labels = {"app": name}
    apps_v1.create_namespaced_deployment(
        NS,
        {
            "metadata": {"name": name},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "nodeSelector": {"kubernetes.io/hostname": node},
                        "tolerations": [{"operator": "Exists"}],
                        "containers": [
                            {"name": "c", "image": "cuda:12", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
                        ],
                    },
                },
            },
        },
    )
    return wait(
        "%s Running" % name,
        lambda: [
            p
            for p in core_v1.list_namespaced_pod(NS, label_selector="app=" + name).items
            if p.status.phase == "Running"
        ],
    )


def iso_seconds(stamp):
    """Seconds since the epoch of a transition record's time (``%Y-%m-%dT%H:%M:%SZ``)."""
    from datetime import datetime, timezone

    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()


def policy_denials(api_client, policy):
    """How many requests the apiserver has denied through ValidatingAdmissionPolicy ``policy`` so far
    (its own counter, apiserver_validating_admission_policy_check_total, enforcement_action=deny)."""
    cfg = api_client.configuration
    headers = {a["key"]: a["value"] for a in cfg.auth_settings().values() if a.get("in") == "header" and a.get("value")}
    resp = api_client.call_api("GET", cfg.host + "/metrics", header_params=headers)
    resp.read()
    assert resp.status == 200, (resp.status, resp.data[:500])
    total = 0.0
    for line in resp.data.decode().splitlines():
        if (line.startswith("apiserver_validating_admission_policy_check_total{")
                and 'policy="%s"' % policy in line and 'enforcement_action="deny"' in line):
            total += float(line.rsplit(" ", 1)[1])
    return int(total)


def events(core_v1, node):
    return [
        e
        for e in core_v1.list_namespaced_event("default", field_selector="involvedObject.name=" + node).items
        if (e.reason or "").startswith("DriverUpgrade")
    ]


def test_terminating_gpu_pod_blocks_host_work_until_timeout(core_v1, kubeconfig, kwok_nodes):
    (node,) = kwok_nodes(1)
    core_v1.create_namespaced_pod(NS, gpu_pod("ckpt-writer", node, finalizer=True, grace=900))
    wait("pod Running", lambda: core_v1.read_namespaced_pod("ckpt-writer", NS).status.phase == "Running")
    core_v1.delete_namespaced_pod("ckpt-writer", NS)  # terminating; its finalizer keeps it on the node
    policy = {"npuPodDeletion": {"timeoutSeconds": 6}, "maxUnavailable": "100%"}
    t0 = time.monotonic()
    res = upgrade(kubeconfig, node, "prepare", target_version="550.90.07", policy=policy)
    took = time.monotonic() - t0
    assert res.get("failed"), res
    assert res.get("state") != sm.POD_RESTART_REQUIRED
    assert "gpu-drv/ckpt-writer" in res["msg"] and "podDeletion.timeoutSeconds=6" in res["msg"], res["msg"]
    assert "terminating" in res["msg"]
    # The module's own record of the wait: it entered the pod-deletion step, waited there for the
    # timeout (its transition times, whole seconds) and then failed -- not at once, and not past a
    # retry of the step. The pod's 900 s grace is not what ended it: the pod is still there, terminating.
    steps = [(t["from"], t["to"]) for t in res["transitions"]]
    assert steps[-2:] == [
        (steps[-2][0], sm.POD_DELETION_REQUIRED),
        (sm.POD_DELETION_REQUIRED, sm.UPGRADE_FAILED),
    ], steps
    entered, failed = (iso_seconds(t["time"]) for t in res["transitions"][-2:])
    assert failed - entered >= 6 - 1, res["transitions"]
    held = core_v1.read_namespaced_pod("ckpt-writer", NS)
    assert held.metadata.deletion_timestamp and held.metadata.finalizers == ["npuops.io/it-hold"], held.metadata
    print("terminating pod: the step waited %.0fs by its transitions; whole run %.1fs" % (failed - entered, took))
    n = core_v1.read_node(node)
    assert n.metadata.labels[STATE] == sm.UPGRADE_FAILED and not n.spec.unschedulable
    # once the pod is really gone, the retry goes on to host work
    core_v1.patch_namespaced_pod("ckpt-writer", NS, {"metadata": {"finalizers": None}})
    wait("pod gone", lambda: not core_v1.list_namespaced_pod(NS, field_selector="metadata.name=ckpt-writer").items)
    res = upgrade(kubeconfig, node, "prepare", target_version="550.90.07", policy=policy)
    assert not res.get("failed"), res.get("msg")
    assert res["state"] == sm.POD_RESTART_REQUIRED


def test_pod_deletion_evicts_and_honours_a_pdb(core_v1, apps_v1, policy_v1, kubeconfig, kwok_nodes):
    (node,) = kwok_nodes(1)
    name = "gpu-infer-" + uuid.uuid4().hex[:4]
    pods = rs_owned(core_v1, apps_v1, name, node)
    uid = pods[0].metadata.uid
    policy_v1.create_namespaced_pod_disruption_budget(
        NS, {"metadata": {"name": name}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": name}}}}
    )
    try:
        wait(
            "PDB allows 0",
            lambda: (s := policy_v1.read_namespaced_pod_disruption_budget(name, NS).status)
            and s.current_healthy == 1
            and s.disruptions_allowed == 0,
        )
        policy = {"npuPodDeletion": {"timeoutSeconds": 5}, "maxUnavailable": "100%"}
        res = upgrade(kubeconfig, node, "prepare", target_version="550.90.07", policy=policy)
        assert res.get("failed"), res
        assert "%s/%s" % (NS, name) in res["msg"], res["msg"]
        assert any(name in p for p in res["blocking_pdbs"]), res["blocking_pdbs"]
        # not deleted: the same pod (uid) is still there and Running
        still = list(core_v1.list_namespaced_pod(NS, label_selector="app=" + name).items)
        assert [p.metadata.uid for p in still] == [uid] and not still[0].metadata.deletion_timestamp
        assert not core_v1.read_node(node).spec.unschedulable
        # with the PDB relaxed the step evicts it (Eviction API, not a plain delete)
        policy_v1.patch_namespaced_pod_disruption_budget(name, NS, {"spec": {"minAvailable": 0}})
        wait(
            "PDB allows 1",
            lambda: policy_v1.read_namespaced_pod_disruption_budget(name, NS).status.disruptions_allowed == 1,
        )
        res = upgrade(kubeconfig, node, "prepare", target_version="550.90.07", policy=policy)
        assert not res.get("failed"), res.get("msg")
        assert res["deleted"] and res["deleted"][0].startswith("%s/%s-" % (NS, name))
    finally:
        policy_v1.delete_namespaced_pod_disruption_budget(name, NS)
        apps_v1.delete_namespaced_deployment(name, NS)


def test_concurrent_prepares_never_exceed_max_unavailable(core_v1, kubeconfig, kwok_nodes):
    """8 nodes, maxUnavailable 25% (2 of 8), maxParallelUpgrades 4, four prepare calls at once."""
    nodes = kwok_nodes(8)
    targets = nodes[:4]
    policy = {"maxUnavailable": "25%", "maxParallelUpgrades": 4}
    seen = {"max": 0, "samples": 0, "over": []}
    stop = threading.Event()

    def watcher():
        while not stop.is_set():
            items = core_v1.list_node(label_selector=PRESENT + "=true").items
            down = sorted(
                n.metadata.name
                for n in items
                if n.spec.unschedulable or not ready(n) or (n.metadata.labels or {}).get(STATE) in TAKEN
            )
            seen["samples"] += 1
            seen["max"] = max(seen["max"], len(down))
            if len(down) > 2:
                seen["over"].append(down)
            time.sleep(0.1)

    results = {}

    def prepare(name):
        results[name] = upgrade(
            kubeconfig, name, "prepare", target_version="550.90.07", policy=policy, admission_timeout=240
        )

    w = threading.Thread(target=watcher, daemon=True)
    w.start()
    threads = [threading.Thread(target=prepare, args=(n,)) for n in targets]
    for t in threads:
        t.start()
    finished = set()
    deadline = time.monotonic() + 400
    # The test plays the host work: a node that reached host work gets the new driver label, then finish.
    while len(finished) < 4:
        assert time.monotonic() < deadline, (results, seen)
        for name in targets:
            if name in finished:
                continue
            labels = core_v1.read_node(name).metadata.labels or {}
            if labels.get(STATE) == sm.POD_RESTART_REQUIRED:
                core_v1.patch_node(name, {"metadata": {"labels": driver_labels("550.90.07")}})
                res = upgrade(kubeconfig, name, "finish", target_version="550.90.07", validation_timeout=60)
                assert not res.get("failed"), res.get("msg")
                finished.add(name)
        time.sleep(0.5)
    for t in threads:
        t.join(timeout=300)
    stop.set()
    w.join()
    assert not seen["over"], seen["over"][:3]
    assert 1 <= seen["max"] <= 2 and seen["samples"] > 20, seen
    for name in targets:
        assert not results[name].get("failed"), results[name].get("msg")
        n = core_v1.read_node(name)
        assert n.metadata.labels[STATE] == sm.UPGRADE_DONE and not n.spec.unschedulable
    # the slot record is empty again once every start was written
    lease = client.CoordinationV1Api(core_v1.api_client).read_namespaced_lease(
        "npuops-fleet-admission-nvidia", "kube-system"
    )
    entries = json.loads((lease.metadata.annotations or {}).get("npuops.io/admitted-nodes") or "{}")
    assert not set(entries) & set(nodes), entries


def test_two_prepares_racing_on_one_fresh_node_exactly_one_starts(core_v1, kubeconfig, kwok_nodes):
    (node,) = kwok_nodes(1)
    policy = {"maxUnavailable": "100%", "maxParallelUpgrades": 0}
    results = []

    def prepare():
        results.append(upgrade(kubeconfig, node, "prepare", target_version="550.90.07", policy=policy))

    threads = [threading.Thread(target=prepare) for _i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    started = [r for r in results if any(t["to"] == sm.UPGRADE_REQUIRED for t in r.get("transitions") or [])]
    assert len(started) == 1, results
    # The other call either found the node already prepared or lost a transition to the first one:
    # then it failed naming the other run and undid nothing.
    failed = [r for r in results if r.get("failed")]
    assert len(failed) <= 1, results
    for r in failed:
        assert "another run" in r["msg"], r["msg"]
    starts = [e for e in events(core_v1, node) if f"-> {sm.UPGRADE_REQUIRED}" in (e.message or "")]
    assert len(starts) == 1, [e.message for e in starts]
    n = core_v1.read_node(node)
    assert n.metadata.labels[STATE] == sm.POD_RESTART_REQUIRED and n.spec.unschedulable


def test_admission_policy_refusing_an_eviction_aborts_and_restores(
    core_v1, apps_v1, api_client, kubeconfig, kwok_nodes
):
    (node,) = kwok_nodes(1)
    name = "protected-" + uuid.uuid4().hex[:4]
    rs_owned(core_v1, apps_v1, name, node)
    adm = client.AdmissionregistrationV1Api(api_client)
    vap = {
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods/eviction"]}
                ]
            },
            "validations": [
                {
                    "expression": "!object.metadata.name.startsWith('%s')" % name,
                    "message": "%s must not be evicted by automation" % name,
                }
            ],
        },
    }
    binding = {
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NS}}},
        },
    }
    adm.create_validating_admission_policy(vap)
    adm.create_validating_admission_policy_binding(binding)
    try:
        # the apiserver loads policies asynchronously: in force once a dry-run eviction is denied by it
        (pod,) = [p.metadata.name for p in core_v1.list_namespaced_pod(NS, label_selector="app=" + name).items]

        def denied():
            r = dry_run_eviction(core_v1, {"metadata": {"name": pod, "namespace": NS}})
            return r[0] >= 400 and "must not be evicted by automation" in (r[1] or ""), r

        poll("policy %s in force (dry-run eviction of %s denied)" % (name, pod), denied, timeout=60)
        policy = {"npuPodDeletion": {"timeoutSeconds": 0}, "maxUnavailable": "100%"}
        # check mode names the refusal before anything happens (server-side dry-run eviction)
        res = upgrade(kubeconfig, node, "status", policy={"drain": {"enable": True}})
        assert any(name in k for k in res["refused_evictions"]), res
        # timeoutSeconds 0 = forever, yet a refusal is not retried: the step asks the Eviction API
        # exactly once (the policy's own deny counter in the apiserver), then fails. A retrying step
        # would never end: watch the counter while it runs and fail at the second denial.
        before = policy_denials(api_client, name)
        out = {}
        t0 = time.monotonic()
        call = threading.Thread(target=lambda: out.update(
            res=upgrade(kubeconfig, node, "prepare", target_version="550.90.07", policy=policy)), daemon=True)
        call.start()

        def ended_or_retried():
            n = policy_denials(api_client, name) - before
            return not call.is_alive() or n > 1, n

        seen = poll("prepare ended after one denied eviction", ended_or_retried, timeout=300, every=0.2)
        assert seen <= 1 and not call.is_alive(), "the refused eviction was retried: %d denials so far" % seen
        call.join()
        assert policy_denials(api_client, name) - before == 1, "eviction calls denied by %s: want exactly 1" % name
        print("refused eviction: 1 call, prepare ended after %.1fs" % (time.monotonic() - t0))
        assert "res" in out, "the prepare call raised instead of returning a result"
        res = out["res"]
        assert res.get("failed"), res
        assert "not retried" in res["msg"], res["msg"]
        assert "must not be evicted by automation" in res["msg"] and name in res["msg"], res["msg"]
        n = core_v1.read_node(node)
        assert n.metadata.labels[STATE] == sm.UPGRADE_FAILED
        assert not n.spec.unschedulable
        assert n.metadata.labels["nvidia.com/gpu.deploy.device-plugin"] == "true"
        assert any(e.type == "Warning" and e.reason == "DriverUpgradeFailed" for e in events(core_v1, node))
    finally:
        adm.delete_validating_admission_policy_binding(name)
        adm.delete_validating_admission_policy(name)
        apps_v1.delete_namespaced_deployment(name, NS)


def test_skip_label_set_mid_upgrade_does_not_strand_the_node(core_v1, kubeconfig, kwok_nodes):
    (node,) = kwok_nodes(1)
    policy = {"maxUnavailable": "100%"}
    res = upgrade(kubeconfig, node, "prepare", target_version="550.90.07", policy=policy)
    assert res["state"] == sm.POD_RESTART_REQUIRED, res.get("msg")
    core_v1.patch_node(node, {"metadata": {"labels": {SKIP: "true", **driver_labels("550.90.07")}}})
    res = upgrade(kubeconfig, node, "finish", target_version="550.90.07", validation_timeout=60)
    assert not res.get("failed"), res.get("msg")
    assert res["state"] == sm.UPGRADE_DONE
    n = core_v1.read_node(node)
    assert not n.spec.unschedulable and n.metadata.labels["nvidia.com/gpu.deploy.device-plugin"] == "true"
    # before the next upgrade starts, the label is honoured
    res = upgrade(kubeconfig, node, "prepare", target_version="560.35.03", policy=policy)
    assert res["skipped"] and not res["changed"]


def test_retry_keeps_the_first_runs_device_baseline(core_v1, kubeconfig, kwok_nodes):
    """Run 1 fails verification with 7 of 8 devices; run 2 on the same host (7 devices) fails too."""
    (node,) = kwok_nodes(1)
    policy = {"maxUnavailable": "100%"}
    res = upgrade(
        kubeconfig, node, "prepare", target_version="550.90.07", policy=policy, baseline={"device_count": 8},
        host_at_target=False,
    )
    assert res["state"] == sm.POD_RESTART_REQUIRED, res.get("msg")
    core_v1.patch_node(node, {"metadata": {"labels": driver_labels("550.90.07")}})
    res = upgrade(kubeconfig, node, "fail", reason="verify: devices 7 (before 8)")
    assert res["state"] == sm.UPGRADE_FAILED
    # Run 2: GFD says 550.90.07, the host check passes on versions, but the host has 7 devices.
    res = upgrade(
        kubeconfig, node, "prepare", target_version="550.90.07", policy=policy, baseline={"device_count": 7},
        host_at_target=True,
    )
    assert not res.get("failed"), res.get("msg")
    assert res["baseline"] == {"device_count": 8}
    assert res["host_work_required"] and res["state"] == sm.POD_RESTART_REQUIRED
    assert "7 devices, 8 before" in res["baseline_mismatch"]
    n = core_v1.read_node(node)
    assert n.spec.unschedulable  # never put back into service on labels alone
    assert json.loads(n.metadata.annotations[ANN + "devices-before"]) == {"device_count": 8}
