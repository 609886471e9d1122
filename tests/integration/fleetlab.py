"""A fleet of scratch lab hosts for the rollout tests and `make bench-fleet`.

:func:`scratch_fleet` spawns N GPU hosts (old driver 535, the DKMS flavour) behind their own kwok
Nodes, labelled with failure domains, and writes an inventory of them (group gpu_nodes, so the lab's
group_vars apply). :class:`LimitWatcher` samples the vendor's Nodes every 0.1 s while a window runs
and records, independently of the product's admission code, the peak of nodes taken out by an
upgrade (cordoned or in an upgrade state), of nodes in an upgrade, and of nodes not Ready (the lab's
kwok heartbeats can lapse under load: a node that goes NotReady after its admission is outside any
admission's control, so it is reported, not judged), and when each node first entered an upgrade
and was first seen done after it. :func:`recap` reads the PLAY RECAP.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

from labhelpers import REPO, create_kwok_nodes, delete_nodes, run_playbook, wait
from test_host_lost import HOSTCTL, lab_dir
from test_safety import TAKEN

from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm

OLD, NEW = "535.183.06", "550.90.07"
OLD_KERNEL = "5.15.0-107-generic"
GPU_CAPACITY = {"cpu": "4", "memory": "8Gi", "pods": "110", "nvidia.com/gpu": "2"}
STATE = "nvidia.com/gpu-driver-upgrade-state"
# the upgrade states between admission and uncordon, chosen in the tests independently of
# upgrade/states.py's groupings (the watcher must not take its answer from the product); only the
# names are states.py's constants
IN_UPGRADE = TAKEN
ZONE = "topology.kubernetes.io/zone"


def _spawn(name: str) -> None:
    subprocess.run(
        [str(HOSTCTL), "spawn", name, "--node", "--kernel", OLD_KERNEL, "--driver", OLD],
        capture_output=True,
        env=dict(os.environ, NPUOPS_LAB_DIR=str(lab_dir())),
        check=True,
        timeout=900,
    )


@contextlib.contextmanager
def scratch_fleet(core_v1: Any, prefix: str, zones: list[str], workdir: Path) -> Iterator[list[str]]:
    """One scratch host per entry of ``zones`` (its Node labelled topology.kubernetes.io/zone=that);
    yields the names once every Node shows driver 535; writes ``workdir/fleet.yml``; removes all after."""
    names: list[str] = []
    try:
        for zone in zones:
            names += create_kwok_nodes(
                core_v1, prefix, 1, labels={"nvidia.com/gpu.present": "true", ZONE: zone}, capacity=GPU_CAPACITY
            )
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            list(pool.map(_spawn, names))
        wait(
            "%s: driver labels from the node agent" % names,
            lambda: all(
                (core_v1.read_node(n).metadata.labels or {}).get("nvidia.com/cuda.driver.major") == "535" for n in names
            ),
            120,
        )
        hosts = "".join("        %s:\n" % n for n in names)
        (workdir / "fleet.yml").write_text("all:\n  children:\n    gpu_nodes:\n      hosts:\n" + hosts)
        yield names
    finally:
        for n in names:
            subprocess.run(
                [str(HOSTCTL), "rm", n],
                capture_output=True,
                env=dict(os.environ, NPUOPS_LAB_DIR=str(lab_dir())),
                check=False,
            )
        delete_nodes(core_v1, names)


def window(
    workdir: Path, kubeconfig: str, hosts: list[str], *extra: Any, timeout: int = 2400
) -> tuple[int, str, float]:
    """maintenance_window.yml on the lab inventory plus the fleet; (rc, output, wall seconds)."""
    t0 = time.monotonic()
    rc, out = run_playbook(
        "maintenance_window.yml",
        [str(REPO / "inventories" / "lab"), str(workdir / "fleet.yml")],
        (f"maintenance_hosts={','.join(hosts)}", f"maintenance_report_dir={workdir / 'reports'}", *extra),
        kubeconfig,
        workdir,
        timeout=timeout,
    )
    took = time.monotonic() - t0
    n = len(list(workdir.glob("window-*.txt")))
    (workdir / ("window-%d.txt" % n)).write_text(out)  # kept with the test's tmp_path for a failure's reader
    return rc, out, took


def recap(out: str) -> dict[str, dict[str, int]]:
    """PLAY RECAP: host -> {ok, changed, unreachable, failed, skipped, rescued, ignored}."""
    res: dict[str, dict[str, int]] = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) > 2 and parts[1] == ":" and any(p.startswith("ok=") for p in parts):
            res[parts[0]] = {k: int(v) for k, v in (p.split("=", 1) for p in parts[2:] if "=" in p)}
    return res


class LimitWatcher:
    """Samples the nodes labelled ``selector`` every ``every`` s in a thread (start()/stop())."""

    def __init__(self, core_v1: Any, selector: str = "nvidia.com/gpu.present=true", every: float = 0.1) -> None:
        self.core, self.selector, self.every = core_v1, selector, every
        self.peak_unavailable = 0  # cordoned or in an upgrade state
        self.peak_upgrading = 0
        self.peak_not_ready = 0
        self.samples = 0
        self.unavailable_at_peak: list[str] = []
        self.entered: dict[str, float] = {}  # node -> first time seen in an upgrade state or cordoned
        self.left: dict[str, float] = {}  # node -> first time seen upgrade-done after it entered
        self.failed: dict[str, float] = {}  # node -> first time seen upgrade-failed
        self.busy_now: set[str] = set()  # nodes in an upgrade state at the last sample
        self.order: list[str] = []  # nodes in the order they entered
        self.errors = 0
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def _sample(self) -> None:
        nodes = self.core.list_node(label_selector=self.selector).items
        now = time.monotonic()
        unavailable, upgrading, not_ready = [], [], []
        for n in nodes:
            labels = n.metadata.labels or {}
            state = labels.get(STATE, "")
            ready = any(c.type == "Ready" and c.status == "True" for c in (n.status.conditions or []))
            busy = state in IN_UPGRADE
            if busy:
                upgrading.append(n.metadata.name)
            if not ready:
                not_ready.append(n.metadata.name)
            if busy or n.spec.unschedulable:
                unavailable.append(n.metadata.name)
                if n.metadata.name not in self.entered:
                    self.entered[n.metadata.name] = now
                    self.order.append(n.metadata.name)
            elif state == sm.UPGRADE_DONE and n.metadata.name in self.entered:
                self.left[n.metadata.name] = self.left.get(n.metadata.name) or now
            if state == sm.UPGRADE_FAILED:
                self.failed.setdefault(n.metadata.name, now)
        self.busy_now = set(upgrading)
        self.samples += 1
        if len(unavailable) > self.peak_unavailable:
            self.peak_unavailable, self.unavailable_at_peak = len(unavailable), sorted(unavailable)
        self.peak_upgrading = max(self.peak_upgrading, len(upgrading))
        self.peak_not_ready = max(self.peak_not_ready, len(not_ready))

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._sample()
            except Exception:  # noqa: BLE001 - an API hiccup loses one sample, counted
                self.errors += 1
            self._stop.wait(self.every)

    def start(self) -> "LimitWatcher":
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(10)


def held_workload(apps_v1: Any, policy_v1: Any, node: str, ns: str) -> None:
    """One replica pinned to ``node`` (Deployment ``held``) and PDB ``held-pdb`` that allows its
    eviction now, so the preflight passes; a test then holds the drain by patching its maxUnavailable."""
    apps_v1.create_namespaced_deployment(
        ns,
        {
            "metadata": {"name": "held"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "held"}},
                "template": {
                    "metadata": {"labels": {"app": "held"}},
                    "spec": {
                        "nodeSelector": {"kubernetes.io/hostname": node},
                        "tolerations": [{"operator": "Exists"}],
                        "containers": [{"name": "held", "image": "registry.k8s.io/pause:3.10"}],
                    },
                },
            },
        },
    )
    policy_v1.create_namespaced_pod_disruption_budget(
        ns,
        {"metadata": {"name": "held-pdb"}, "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "held"}}}},
    )
    wait_healthy(policy_v1, ns)


def wait_healthy(policy_v1: Any, ns: str, timeout: float = 180) -> None:
    """The held pod Ready behind its PDB (one disruption allowed)."""

    def allowed() -> bool:
        st = policy_v1.read_namespaced_pod_disruption_budget("held-pdb", ns).status
        return bool(st) and st.disruptions_allowed == 1

    wait("held pod Ready behind held-pdb", allowed, timeout)


def dpkg_fails_when_told(host: str) -> None:
    """dpkg on ``host`` refuses to run (exit 1) once /run/npuops-it-go exists there, waiting for it up to
    600 s first (apt's simulation in the preflight does not run dpkg): a failure at install, after the
    node was cordoned and drained, at the moment the test chooses (``touch /run/npuops-it-go``)."""
    from test_host_lost import hx

    hx(
        host,
        "printf '#!/bin/sh\\nfor i in $(seq 3000); do [ -e /run/npuops-it-go ] && exit 1; sleep 0.2; done;"
        " exit 1\\n'"
        " >/usr/local/sbin/npuops-it-fail && chmod +x /usr/local/sbin/npuops-it-fail"
        " && echo 'DPkg::Pre-Invoke {\"/usr/local/sbin/npuops-it-fail\";};' >/etc/apt/apt.conf.d/99npuops-it-fail",
    )
