"""API server outages: the modules ride out a 15 s kube-apiserver restart inside their step budget,
without losing their place (no duplicate transition, no second eviction, no failure).

The restart is ``tests/lab/labctl restart kube-apiserver --down 15`` run in the background while the
module call runs (ansible-playbook, as a ServiceAccount bound to the shipped ClusterRole -- a restarted
apiserver answers 403 to ServiceAccounts for a moment before its RBAC caches sync, which admin
certificates never see). The lab restarted is the one the tests' kubeconfig points at: its state dir
must hold that kubeconfig and the kube-apiserver pid record with the same port, else the tests skip.

Each test makes its own kwok nodes (``it-outage-*``) with a presence label of their own.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml
from ansible_tasks import run_module, run_tasks
from kubernetes import client
from labhelpers import create_kwok_nodes, delete_nodes, driver_labels, wait

from ansible_collections.npuops.fleet.plugins.module_utils.k8s import retry as k8s_retry
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
LABCTL = REPO / "tests" / "lab" / "labctl"
NS = "gpu-drv"
PRESENT = "it.npuops.io/outage.present"
STATE = "nvidia.com/gpu-driver-upgrade-state"
LAST = "nvidia.com/gpu-driver-upgrade-last-transition"
PROFILE = {"presence_label": PRESENT}
DOWN = 15  # seconds the apiserver stays down
LEASES = tuple("npuops-outage-" + uuid.uuid4().hex[:6] for _i in range(2))  # the lease test's held, fresh


class Restart:
    """``labctl restart kube-apiserver --down N`` in a subprocess; ``wait_down()`` returns once the
    apiserver port refuses connections, ``join()`` once it is ready again (labctl's /readyz)."""

    def __init__(self, lab_dir: Path, port: int, down: float = DOWN) -> None:
        self.port = port
        env = dict(os.environ, NPUOPS_LAB_DIR=str(lab_dir))
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(
            [str(LABCTL), "restart", "kube-apiserver", "--down", str(down)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def listening(self) -> bool:
        with socket.socket() as s:
            s.settimeout(0.5)
            return s.connect_ex(("127.0.0.1", self.port)) == 0

    def wait_down(self, timeout: float = 30) -> None:
        wait("kube-apiserver down", lambda: not self.listening(), timeout, poll=0.05)

    def join(self, timeout: float = 180) -> str:
        out, _err = self.proc.communicate(timeout=timeout)
        assert self.proc.returncode == 0, out
        return out.strip()


@pytest.fixture
def restart_apiserver(lab_kubeconfig):
    """Factory: start a background restart of the lab's kube-apiserver (see :class:`Restart`)."""
    lab_dir = Path(lab_kubeconfig).resolve().parent
    rec_file = lab_dir / "pids" / "kube-apiserver.json"
    server = yaml.safe_load(Path(lab_kubeconfig).read_text())["clusters"][0]["cluster"]["server"]
    port = urlparse(server).port
    if not rec_file.exists() or json.loads(rec_file.read_text()).get("port") != port:
        pytest.skip("the kubeconfig %s is not in a labctl state dir with its kube-apiserver" % lab_kubeconfig)
    started: list[Restart] = []

    def make(down: float = DOWN) -> Restart:
        r = Restart(lab_dir, port, down)
        started.append(r)
        return r

    yield make
    for r in started:  # never leave the lab without its apiserver
        if r.proc.poll() is None:
            r.proc.communicate(timeout=180)
    if started:
        controllers_recovered(lab_kubeconfig)


def controllers_recovered(kubeconfig_path: str, timeout: float = 420) -> None:
    """Wait until a new Deployment gets a Running pod again. A restarted apiserver answers 403 to the
    controllers' own identities until its RBAC cache is loaded, and their informers then back off
    (measured: no pods for a new Deployment for more than 60 s): later tests must not inherit that."""
    from kubernetes import config

    api = config.new_client_from_config(config_file=kubeconfig_path)
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    name = "it-outage-probe-%s" % uuid.uuid4().hex[:5]
    labels = {"app": name}
    apps.create_namespaced_deployment(NS, {
        "metadata": {"name": name, "labels": labels},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels},
                              "spec": {"nodeSelector": {"type": "kwok"}, "terminationGracePeriodSeconds": 0,
                                       "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}}})
    try:
        wait("the control plane's controllers after the apiserver restart (a probe pod Running)",
             lambda: any(p.status.phase == "Running"
                         for p in core.list_namespaced_pod(NS, label_selector="app=" + name).items), timeout, poll=2)
    finally:
        apps.delete_namespaced_deployment(name, NS)
        api.close()


@pytest.fixture
def kubeconfig(sa_kubeconfig):
    """Exactly the shipped RBAC (deploy/rbac/), with this module's Lease names as the window's."""
    return sa_kubeconfig(shipped=True, window_leases=LEASES)


@pytest.fixture
def outage_node(core_v1):
    """One fresh Ready kwok GPU node (driver 535.183.06) with this module's presence label."""
    labels = {PRESENT: "true", **driver_labels("535.183.06")}
    cap = {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"}
    names = create_kwok_nodes(core_v1, "it-outage", 1, labels=labels, capacity=cap)
    yield names[0]
    delete_nodes(core_v1, names)


def upgrade(kubeconfig, node, phase, **kw):
    args = {"node": node, "phase": phase, "vendor": "nvidia", "vendor_profile": PROFILE}
    args.update(kw)
    return run_module("npu_node_upgrade", args, kubeconfig)


def patient(fn, *args, **kw):
    """Call an admin API while the apiserver may be down: retry transient errors for up to 90 s."""
    t0 = time.monotonic()
    while True:
        try:
            return fn(*args, **kw)
        except Exception as exc:  # noqa: BLE001 - connection refused while it restarts
            if not k8s_retry.is_transient(exc) or time.monotonic() - t0 > 90:
                raise
            time.sleep(0.5)


def state_events(core_v1, node):
    """'from -> to' of the node's DriverUpgrade* Events, oldest first."""
    items = core_v1.list_namespaced_event("default", field_selector="involvedObject.name=" + node).items
    return [
        e.message.split(":", 1)[0]
        for e in sorted(items, key=lambda e: e.first_timestamp or e.event_time)
        if (e.reason or "").startswith("DriverUpgrade")
    ]


def test_drain_waiting_on_a_pdb_survives_an_apiserver_restart(
    core_v1, apps_v1, policy_v1, kubeconfig, outage_node, restart_apiserver
):
    node = outage_node
    app = "it-outage-web-" + uuid.uuid4().hex[:4]
    labels = {"app": app}
    apps_v1.create_namespaced_deployment(
        NS,
        {
            "metadata": {"name": app},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "nodeSelector": {"kubernetes.io/hostname": node},
                        "tolerations": [{"operator": "Exists"}],
                        "terminationGracePeriodSeconds": 1,
                        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
                    },
                },
            },
        },
    )
    # minAvailable 2 for one replica: a budget already short of healthy pods. The restart can turn
    # the node NotReady for a moment (its lease ages past the lab's 16 s grace), which marks the pod
    # unready; with minAvailable 1 Kubernetes then lets the unready pod go (IfHealthyBudget: the
    # PDB's stale status still says currentHealthy 1 >= desiredHealthy 1). With desiredHealthy 2 no
    # eviction passes whatever the pod's readiness, so the test sees the drain wait, not that race.
    policy_v1.create_namespaced_pod_disruption_budget(
        NS, {"metadata": {"name": app}, "spec": {"minAvailable": 2, "selector": {"matchLabels": labels}}}
    )
    try:
        (pod,) = wait(
            "%s Running" % app,
            lambda: [
                p for p in core_v1.list_namespaced_pod(NS, label_selector="app=" + app).items
                if p.status.phase == "Running"
            ],
        )
        wait(
            "PDB allows 0",
            lambda: (s := policy_v1.read_namespaced_pod_disruption_budget(app, NS).status)
            and s.current_healthy == 1
            and s.desired_healthy == 2
            and s.disruptions_allowed == 0,
        )
        policy = {"drain": {"enable": True, "timeoutSeconds": 240}, "maxUnavailable": "100%"}
        out: dict = {}
        call = threading.Thread(
            target=lambda: out.update(
                res=upgrade(kubeconfig, node, "prepare", target_version="550.90.07", policy=policy)
            )
        )
        t0 = time.monotonic()
        call.start()
        wait(
            f"node in {sm.DRAIN_REQUIRED}",
            lambda: core_v1.read_node(node).metadata.labels.get(STATE) == sm.DRAIN_REQUIRED,
            timeout=120,
        )
        time.sleep(3)  # the drain is now retrying the PDB's 429s
        restart = restart_apiserver()
        restart.wait_down()
        timing = restart.join()
        assert call.is_alive(), "the module call ended during the outage: %s" % out
        # Lift the budget by deleting it: a pod the restart left unready (kwok does not make it
        # ready again) cannot be evicted under minAvailable 0 either (desiredHealthy 0).
        patient(policy_v1.delete_namespaced_pod_disruption_budget, app, NS)
        call.join(timeout=300)
        res = out["res"]
        assert not res.get("failed"), res.get("msg")
        assert res["state"] == sm.POD_RESTART_REQUIRED, res
        assert res["evicted"] == ["%s/%s" % (NS, pod.metadata.name)], res["evicted"]
        # the original pod is gone (evicted once; its replacement is Pending on the cordoned node)
        left = core_v1.list_namespaced_pod(NS, label_selector="app=" + app).items
        assert pod.metadata.uid not in [p.metadata.uid for p in left]
        # every transition written once, by this one run
        tos = [t["to"] for t in res["transitions"]]
        assert len(tos) == len(set(tos)) and tos[-1] == sm.POD_RESTART_REQUIRED, tos
        n = core_v1.read_node(node)
        last = json.loads(n.metadata.annotations[LAST])
        assert last["to"] == sm.POD_RESTART_REQUIRED and last.get("run")
        assert n.spec.unschedulable
        seen = state_events(core_v1, node)
        assert len(seen) == len(set(seen)), seen
        print("drain across the restart: %.1fs in all; %s" % (time.monotonic() - t0, timing), file=sys.stderr)
    finally:
        if policy_v1.list_namespaced_pod_disruption_budget(NS, field_selector="metadata.name=" + app).items:
            patient(policy_v1.delete_namespaced_pod_disruption_budget, app, NS)
        patient(apps_v1.delete_namespaced_deployment, app, NS)


def test_finish_with_the_apiserver_down_at_its_start(core_v1, kubeconfig, outage_node, restart_apiserver):
    node = outage_node
    res = upgrade(kubeconfig, node, "prepare", target_version="550.90.07", policy={"maxUnavailable": "100%"})
    assert not res.get("failed"), res.get("msg")
    assert res["state"] == sm.POD_RESTART_REQUIRED
    assert core_v1.read_node(node).spec.unschedulable
    # the host work: the new driver's labels
    core_v1.patch_node(node, {"metadata": {"labels": driver_labels("550.90.07")}})
    restart = restart_apiserver()
    restart.wait_down()
    down_at_start = not restart.listening()
    t0 = time.monotonic()
    res = upgrade(kubeconfig, node, "finish", validation_timeout=240)
    elapsed = time.monotonic() - t0
    timing = restart.join()
    assert not res.get("failed"), res.get("msg")
    assert res["state"] == sm.UPGRADE_DONE, res
    n = patient(core_v1.read_node, node)
    assert n.metadata.labels[STATE] == sm.UPGRADE_DONE and not n.spec.unschedulable
    tos = [t["to"] for t in res["transitions"]]
    assert tos == [sm.VALIDATION_REQUIRED, sm.UNCORDON_REQUIRED, sm.UPGRADE_DONE], tos
    assert json.loads(n.metadata.annotations[LAST])["to"] == sm.UPGRADE_DONE
    # it really ran into the outage: the port refused connections as the call began (an event, not a duration)
    assert down_at_start
    print("finish across the restart: %.1fs; %s" % (elapsed, timing), file=sys.stderr)


def test_lease_acquire_renew_and_release_across_an_outage(api_client, kubeconfig, restart_apiserver):
    coord = client.CoordinationV1Api(api_client)
    held, fresh = LEASES
    base = {"namespace": "kube-system", "ttl": 300}
    try:
        r = run_module("npu_upgrade_lease", dict(base, name=held, holder="run-a/1"), kubeconfig)
        assert not r.get("failed"), r.get("msg")
        acquired = r["acquire_time"]
        restart = restart_apiserver()
        restart.wait_down()
        down_at_start = not restart.listening()
        t0 = time.monotonic()
        renew, create = run_tasks(
            [
                {"name": "renew", "npuops.fleet.npu_upgrade_lease": dict(base, name=held, holder="run-a/1"),
                 "ignore_errors": True},
                {"name": "create", "npuops.fleet.npu_upgrade_lease": dict(base, name=fresh, holder="run-b/2"),
                 "ignore_errors": True},
            ],
            kubeconfig,
        )
        elapsed = time.monotonic() - t0
        timing = restart.join()
        assert not renew.get("failed"), renew.get("msg")
        assert renew["operation"] == "renew" and renew["acquire_time"] == acquired and renew["changed"]
        assert not create.get("failed"), create.get("msg")
        assert create["operation"] == "create" and create["holder"] == "run-b/2"
        assert coord.read_namespaced_lease(held, "kube-system").spec.holder_identity == "run-a/1"
        assert coord.read_namespaced_lease(fresh, "kube-system").spec.holder_identity == "run-b/2"
        # release, again across an outage
        restart = restart_apiserver()
        restart.wait_down()
        r = run_module("npu_upgrade_lease", dict(base, name=fresh, holder="run-b/2", state="absent"), kubeconfig)
        restart.join()
        assert not r.get("failed"), r.get("msg")
        assert r["operation"] == "release" and r["changed"]
        assert not coord.list_namespaced_lease("kube-system", field_selector="metadata.name=" + fresh).items
        assert down_at_start  # the renew and create began while the apiserver refused connections
        print("lease renew+create across the restart: %.1fs; %s" % (elapsed, timing), file=sys.stderr)
    finally:
        for name in (held, fresh):
            try:
                patient(coord.delete_namespaced_lease, name, "kube-system")
            except client.ApiException as exc:
                if exc.status != 404:
                    raise
