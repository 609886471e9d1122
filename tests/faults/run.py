"""Fault-injection suite: the maintenance window against real process, host and API server faults.

Each case brings one lab host/node to the baseline (old driver, clean Node, uncordoned, a
PDB-protected pod on it), starts playbooks/maintenance_window.yml on that ONE host, injects one
fault (SIGKILL of the ansible-playbook process group when the Node's state label first reaches a
state; the host container stopped; kube-apiserver down for 15 s; dpkg's lock held; two windows at
once; a stale Lease), reruns the window where the case needs it and checks the invariants. The
result is a table (case x invariant -> ok / FAIL + detail), printed and written to
tests/faults/last-result.md; the exit status is 1 when any invariant failed.

  tests/faults/run.py --list                      # the cases
  tests/faults/run.py --all                       # the full sweep (make faults)
  tests/faults/run.py --cases 2                   # the 2 cases run least recently (scripts/test.sh faults)
  tests/faults/run.py --cases 2 --seed 5          # slice 5 of the case list instead
  tests/faults/run.py --case kill-drain-required  # one case (repeatable)
  tests/faults/run.py --cases 2 --dry-run         # print the selection only (no lab needed)

Needs the lab (make lab-up; NPUOPS_LAB_DIR, default /tmp/npuops-lab) with its hosts. Environment:
FAULTS_NODE (default lab-node-1), FAULTS_OUT (artifacts: per case and run the ansible log and the
report directory; default /tmp/npuops-faults/<time>), FAULTS_RESULT (table file).
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Optional

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration"))
sys.path.insert(0, str(REPO / "tests" / "lab"))

import rotation  # noqa: E402  the record of when each case last ran
import test_maintenance_window as mw  # noqa: E402  restore_host, reset_node, node_driver, hx, ...
from labhelpers import container  # noqa: E402  a lab host's podman container

# build/collections is on sys.path once labhelpers is imported (labhelpers.link_collection)
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm  # noqa: E402

LAB = REPO / "tests" / "lab"
LABCTL = LAB / "labctl"
HOSTCTL = LAB / "hosts" / "hostctl"
PODMAN = LAB / "hosts" / "bin" / "podman"
INVENTORY = mw.INVENTORY
PLAYBOOK = REPO / "playbooks" / "maintenance_window.yml"
COLLECTIONS = REPO / "build" / "collections"

TARGET = os.environ.get("FAULTS_NODE", mw.N1)
OTHER = os.environ.get("FAULTS_OTHER_NODE", mw.N0)  # where the guard's second replica runs
OLD, NEW = "535.183.06", "550.90.07"
STATE = mw.GPU_STATE
ANN = "nvidia.com/gpu-driver-upgrade-"
NS = mw.NS
LEASE_NS, LEASE_NAME = "kube-system", "npuops-fleet-maintenance-window"
ADMISSION_LEASE = "npuops-fleet-admission-nvidia"
RECORD = "/var/lib/npuops-fleet/window.json"
SERVICES = ["nvidia-persistenced", "nvidia-fabricmanager", "nvidia-dcgm", "dcgm"]  # the nvidia profile's
GUARD = "faults-guard"
LAB_HOSTS = [h for g in yaml.safe_load((INVENTORY / "hosts.yml").read_text())["all"]["children"].values()
             for h in (g.get("hosts") or {})]
ORDER = [
    sm.UPGRADE_REQUIRED,
    sm.CORDON_REQUIRED,
    sm.WAIT_FOR_JOBS_REQUIRED,
    sm.POD_DELETION_REQUIRED,
    sm.DRAIN_REQUIRED,
    sm.POD_RESTART_REQUIRED,
    sm.REBOOT_REQUIRED,
    sm.VALIDATION_REQUIRED,
    sm.UNCORDON_REQUIRED,
]
RUN_TIMEOUT = 1200
INVARIANTS = ["final", "schedulable", "pdb", "services", "holds", "operands", "summaries", "lease", "record",
              "expect"]

# name -> what the case does (see run_case); the order is the rotation order of --cases.
CASES: dict[str, dict[str, Any]] = {}
for _s in (sm.UPGRADE_REQUIRED, sm.CORDON_REQUIRED, sm.DRAIN_REQUIRED, sm.POD_RESTART_REQUIRED,
           sm.REBOOT_REQUIRED, sm.VALIDATION_REQUIRED, sm.UNCORDON_REQUIRED):
    CASES["kill-" + _s] = {"kind": "kill", "at": _s, "reboot": _s == sm.REBOOT_REQUIRED}
CASES.update({
    "host-lost-install": {"kind": "host_lost", "at": sm.POD_RESTART_REQUIRED, "step": "install"},
    # lost at the first host step of the reload phase (the boundary before it found the host answering)
    "host-lost-reload": {"kind": "host_lost", "at_task": "Read the host's driver state after the install",
                         "step": "reload"},
    # announced (reboot-required), then the host reboots without sshd: it never answers again
    "host-down-reboot": {"kind": "host_lost", "at": sm.REBOOT_REQUIRED, "step": "reboot", "reboot": True,
                         "reboot_timeout": 60, "no_ssh_after_boot": True},
    "apiserver-down-drain": {"kind": "api", "at": sm.DRAIN_REQUIRED},
    "apiserver-down-validation": {"kind": "api", "at": sm.VALIDATION_REQUIRED},
    # down while the host's state is restored, so the kube-proxy wait and the uncordon meet the outage
    "apiserver-down-verify": {"kind": "api",
                              "at_task": "Restore the host's pre-window state before the uncordon",
                              "expect_retry": "Wait for kube-proxy on the node to be Running"},
    "dpkg-lock": {"kind": "dpkg", "at": sm.CORDON_REQUIRED},
    "two-windows": {"kind": "two"},
    "stale-lease": {"kind": "stale", "at": sm.POD_RESTART_REQUIRED},
    # another run takes the window's Lease over while this one works (its own stalled past the TTL)
    "lease-stolen": {"kind": "stolen", "at": sm.POD_RESTART_REQUIRED},
})


def log(msg: str) -> None:
    print("[faults %s] %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


# ------------------------------------------------------------------ selection
def parse_seed(raw: str) -> int:
    if raw == "head":
        raw = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                             check=False).stdout.strip() or "0"
    try:
        return int(raw)
    except ValueError:
        return int(hashlib.sha256(raw.encode()).hexdigest()[:12], 16)


def select(names: list[str], count: int, seed: int) -> list[str]:
    """``count`` cases starting at slice ``seed`` of the rotation (wrapping around)."""
    if count >= len(names):
        return list(names)
    start = (seed * count) % len(names)
    return [names[(start + i) % len(names)] for i in range(count)]


# ------------------------------------------------------------------ kubernetes
def kube():
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=kubeconfig())
    return client, client.CoreV1Api(api), client.AppsV1Api(api), client.PolicyV1Api(api), \
        client.CoordinationV1Api(api)


def kubeconfig() -> str:
    return os.environ.get("KUBECONFIG") or str(mw.lab_dir() / "kubeconfig")


def retry(fn: Callable[[], Any], what: str, timeout: float = 90) -> Any:
    """Call ``fn`` until it does not raise a transient error (the API server may be restarting);
    an answer of the API server such as 404 or 409 is raised at once."""
    t0 = time.monotonic()
    while True:
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - connection errors, 5xx and 429 are retried
            status = getattr(e, "status", None)
            if (status and 400 <= status < 500 and status != 429) or time.monotonic() - t0 > timeout:
                raise
            time.sleep(1)


# ------------------------------------------------------------------ processes
def podman(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([str(PODMAN), *args], capture_output=True, text=True, timeout=timeout, check=False)


def hx(script: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([str(PODMAN), "exec", container(TARGET), "/bin/sh", "-c", script],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout, check=False)


def container_running(name: str = TARGET) -> bool:
    r = podman("container", "inspect", "-f", "{{.State.Running}}", container(name))
    return r.returncode == 0 and r.stdout.strip() == "true"


def session_pids(sid: int) -> list[int]:
    """Processes whose session id is ``sid`` (what ansible-playbook started in its own session)."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if len(fields) > 3 and int(fields[3]) == sid:
            pids.append(int(d.name))
    return pids


class Run:
    """One ansible-playbook run of the maintenance window in its own session and report directory."""

    def __init__(self, case_dir: Path, label: str, extra: list[Any], hosts: str = TARGET):
        self.label = label
        self.dir = case_dir / label
        self.dir.mkdir(parents=True, exist_ok=True)
        self.logpath = self.dir / "ansible.log"
        self.extra = extra
        self.killed = False
        self.killed_at: Optional[str] = None
        self.hung = False
        self.rc: Optional[int] = None
        self.t0 = time.monotonic()
        self.duration = 0.0
        link = COLLECTIONS / "ansible_collections" / "npuops" / "fleet"
        if not link.exists():
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(REPO)
        env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS), NPUOPS_LAB_DIR=str(mw.lab_dir()),
                   KUBECONFIG=kubeconfig(), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", PYTHONUNBUFFERED="1",
                   ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default")
        self.cmd = [str(Path(sys.executable).parent / "ansible-playbook"), str(PLAYBOOK), "-i", str(INVENTORY),
                    "-e", "maintenance_hosts=" + hosts, "-e", "maintenance_report_dir=%s" % self.dir,
                    "-e", "npuops_fleet_kubeconfig=" + kubeconfig()]
        for e in extra:
            self.cmd += ["-e", e if isinstance(e, str) else json.dumps(e)]
        (self.dir / "cmd.json").write_text(json.dumps(self.cmd, indent=1))
        self._log = open(self.logpath, "w")
        self.proc = subprocess.Popen(self.cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=str(self.dir),
                                     start_new_session=True)
        log("%s: started ansible-playbook pid %d (%s)" % (label, self.proc.pid, " ".join(
            e if isinstance(e, str) else json.dumps(e) for e in extra) or "defaults"))

    def kill9(self, why: str) -> None:
        if self.proc.poll() is not None:
            log("%s: kill -9 (%s) too late: already exited rc=%s" % (self.label, why, self.proc.returncode))
            return
        self.killed, self.killed_at = True, why
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for pid in session_pids(self.proc.pid):  # anything of the run that left the group
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        log("%s: kill -9 of process group %d (%s)" % (self.label, self.proc.pid, why))

    def wait(self, timeout: float = RUN_TIMEOUT) -> int:
        try:
            self.rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill9("harness timeout %ss" % timeout)
            self.killed = False  # not a fault of the case: a hang
            self.rc = self.proc.wait()
            self.hung = True
        self._log.close()
        self.duration = time.monotonic() - self.t0
        log("%s: rc=%s after %.0fs%s" % (self.label, self.rc, self.duration, " (killed)" if self.killed else ""))
        return self.rc

    @property
    def out(self) -> str:
        return self.logpath.read_text(errors="replace")

    def summary(self) -> Optional[dict]:
        p = self.dir / "latest.json"
        try:
            return json.loads(p.read_text())
        except (OSError, ValueError):
            return None

    def row(self) -> Optional[dict]:
        s = self.summary() or {}
        return {h["host"]: h for h in s.get("hosts", [])}.get(TARGET)

    def refused(self) -> bool:
        return self.rc != 0 and "is held by" in self.out and self.summary() is None


# ------------------------------------------------------------------ watchers
class NodeWatch(threading.Thread):
    """Watches the Node's state label; ``on(state, fn)`` calls fn once when the label first shows
    ``state`` or a later state of ORDER (a watch sees every write of the object)."""

    def __init__(self, k):
        super().__init__(daemon=True)
        self.client, self.core = k[0], k[1]
        self.seen: list[tuple[float, Optional[str], bool]] = []
        self.first: dict[str, float] = {}
        self.hooks: list[list[Any]] = []
        self.stop = threading.Event()
        self.t0 = time.monotonic()
        self.lock = threading.Lock()

    def on(self, state: str, fn: Callable[[str], None]) -> None:
        self.hooks.append([state, fn, False])

    def _see(self, n) -> None:
        st = (n.metadata.labels or {}).get(STATE)
        cordoned = bool(n.spec.unschedulable)
        with self.lock:
            if self.seen and self.seen[-1][1:] == (st, cordoned):
                return
            self.seen.append((round(time.monotonic() - self.t0, 1), st, cordoned))
            self.first.setdefault(st or "", time.monotonic())
            fire = []
            for h in self.hooks:
                if h[2] or st not in ORDER:
                    continue
                if ORDER.index(st) >= ORDER.index(h[0]):
                    h[2] = True
                    fire.append((h[1], st))
        for fn, s in fire:
            threading.Thread(target=fn, args=(s,), daemon=True).start()

    def run(self) -> None:
        from kubernetes import watch

        while not self.stop.is_set():
            try:
                n = self.core.read_node(TARGET, _request_timeout=10)
                self._see(n)
                w = watch.Watch()
                for ev in w.stream(self.core.list_node, field_selector="metadata.name=" + TARGET,
                                   resource_version=n.metadata.resource_version, timeout_seconds=20,
                                   _request_timeout=30):
                    if ev["type"] in ("ADDED", "MODIFIED"):
                        self._see(ev["object"])
                    if self.stop.is_set():
                        w.stop()
                        break
            except Exception:  # noqa: BLE001 - API server restarts: read again and watch again
                time.sleep(0.3)

    def states(self) -> str:
        return " > ".join("%s%s@%ss" % (s or "-", "(c)" if c else "", t) for t, s, c in self.seen)


class LogWatch(threading.Thread):
    """Calls fn once when ``needle`` shows up in the run's ansible log."""

    def __init__(self, run: Run, needle: str, fn: Callable[[str], None]):
        super().__init__(daemon=True)
        self.run_, self.needle, self.fn = run, needle, fn
        self.fired = False

    def run(self) -> None:
        # the fleet preflight play lists tasks of the role too: look in the upgrade play only
        play = "PLAY [Maintenance window - upgrade the hosts"
        while self.run_.proc.poll() is None:
            out = self.run_.out
            if play in out and self.needle in out[out.index(play):]:
                self.fired = True
                self.fn(self.needle)
                return
            time.sleep(0.2)


class GuardWatch(threading.Thread):
    """Watches the guard pods: a pod that starts terminating while fewer than the PDB's minAvailable
    other guard pods are ready was removed against its PodDisruptionBudget."""

    def __init__(self, k, min_available: int):
        super().__init__(daemon=True)
        self.core = k[1]
        self.min_available = min_available
        self.pods: dict[str, dict[str, Any]] = {}
        self.violations: list[str] = []
        self.removed: list[str] = []
        self.removed_on: list[Optional[str]] = []  # the node of each removal, for "was one seen at all"
        self.stop = threading.Event()
        self.gaps = 0

    @staticmethod
    def _ready(p) -> bool:
        return p.status.phase == "Running" and any(
            c.type == "Ready" and c.status == "True" for c in (p.status.conditions or []))

    def _see(self, etype: str, p) -> None:
        uid = p.metadata.uid
        was = self.pods.get(uid)
        terminating = etype == "DELETED" or p.metadata.deletion_timestamp is not None
        if terminating and not (was and was["terminating"]):
            others = sum(1 for u, v in self.pods.items() if u != uid and v["ready"] and not v["terminating"])
            what = "%s (uid %s, on %s)" % (p.metadata.name, uid[:8], p.spec.node_name)
            self.removed.append(what)
            self.removed_on.append(p.spec.node_name)
            if was is not None and was["ready"] and others < self.min_available:
                self.violations.append("%s removed while %d other guard pod(s) ready < minAvailable %d"
                                       % (what, others, self.min_available))
        if etype == "DELETED":
            self.pods.pop(uid, None)
        else:
            self.pods[uid] = {"ready": self._ready(p), "terminating": terminating, "node": p.spec.node_name}

    def _across_gap(self, items) -> None:
        """Judge the pods that went away while the watch was down (the API server stopped, a watch
        that expired): one last seen Ready and not terminating was removed safely only if at least
        minAvailable OTHER guard pods were Ready then and are still there, the same pods, Ready now;
        anything less cannot be shown safe and counts as a violation. (It assumes those pods did not
        flap unready inside the gap: the guard's pods are only ever evicted, never made unready. A
        pod already unready or terminating at the last sight needs no judgement here.)"""
        now = {p.metadata.uid: p for p in items}
        for uid in [u for u in self.pods if u not in now]:
            was = self.pods.pop(uid)
            self.gaps += 1
            what = "uid %s (on %s, removed while the watch was down)" % (uid[:8], was["node"])
            self.removed.append(what)
            self.removed_on.append(was["node"])
            if not was["ready"] or was["terminating"]:
                continue  # already judged when it started terminating, or not counted by the PDB
            kept = sum(1 for u, v in self.pods.items() if v["ready"] and not v["terminating"] and u in now
                       and self._ready(now[u]) and not now[u].metadata.deletion_timestamp)
            if kept < self.min_available:
                self.violations.append("%s: only %d other guard pod(s) Ready before and after the gap < "
                                       "minAvailable %d" % (what, kept, self.min_available))

    def finish(self) -> Optional[str]:
        """Stop the watch and judge what it may have missed since its last event with one more list
        (the last gap); -> why the guard could not be judged, or None."""
        self.stop.set()
        self.join(timeout=45)
        if self.is_alive():
            return "the guard's watch did not stop within 45 s"
        try:
            lst = retry(lambda: self.core.list_namespaced_pod(NS, label_selector="app=" + GUARD,
                                                              _request_timeout=10), "guard pods")
        except Exception as e:  # noqa: BLE001
            return "the guard pods could not be listed after the case: %s" % e
        self._across_gap(lst.items)
        for p in lst.items:
            self._see("MODIFIED", p)
        return None

    def run(self) -> None:
        from kubernetes import watch

        while not self.stop.is_set():
            try:
                lst = self.core.list_namespaced_pod(NS, label_selector="app=" + GUARD, _request_timeout=10)
                self._across_gap(lst.items)
                for p in lst.items:
                    self._see("MODIFIED", p)
                w = watch.Watch()
                for ev in w.stream(self.core.list_namespaced_pod, NS, label_selector="app=" + GUARD,
                                   resource_version=lst.metadata.resource_version, timeout_seconds=20,
                                   _request_timeout=30):
                    self._see(ev["type"], ev["object"])
                    if self.stop.is_set():
                        w.stop()
                        break
            except Exception:  # noqa: BLE001
                time.sleep(0.3)


# ------------------------------------------------------------------ lab state
def gpu_policy(reboot: bool = False, reboot_timeout: int = 300) -> dict:
    pol = yaml.safe_load((INVENTORY / "group_vars" / "gpu_nodes.yml").read_text())["driver_upgrade_policy"]
    pol = copy.deepcopy(pol)
    if reboot:
        pol["reboot"] = {"enable": True, "rebootTimeoutSeconds": reboot_timeout}
    return {"driver_upgrade_policy": pol}


def read_lease(k) -> Optional[dict]:
    client, coord = k[0], k[4]
    try:
        le = retry(lambda: coord.read_namespaced_lease(LEASE_NAME, LEASE_NS), "lease")
    except client.ApiException as e:
        if e.status == 404:
            return None
        raise
    s = le.spec
    renew = s.renew_time or s.acquire_time
    exp = renew + dt.timedelta(seconds=s.lease_duration_seconds or 0) if renew else None
    return {"holder": s.holder_identity or "", "expires": exp,
            "valid": bool(s.holder_identity) and exp is not None and exp > dt.datetime.now(dt.timezone.utc)}


def delete_leases(k) -> list[str]:
    """Remove the window's Lease when no run holds it validly (a killed case's leftover). The admission
    record (ADMISSION_LEASE) is shared with every other nvidia upgrade on the lab and is left alone."""
    client, coord = k[0], k[4]
    le = read_lease(k)
    if le is None or le["valid"]:
        return []
    try:
        coord.delete_namespaced_lease(LEASE_NAME, LEASE_NS)
    except client.ApiException as e:
        if e.status != 404:
            raise
    return [LEASE_NAME]


def host_snapshot() -> dict:
    """Services of the nvidia profile (is-active) and the held packages of the target host."""
    svc = hx("for s in %s; do printf '%%s=' $s; systemctl is-active $s; done" % " ".join(SERVICES))
    services = dict(line.split("=", 1) for line in svc.stdout.split() if "=" in line)
    holds = sorted(hx("apt-mark showhold").stdout.split())
    return {"services": services, "holds": holds}


def hold_baseline() -> None:
    """Hold what a hardened host holds (the harden playbook's package_holds): every installed nvidia /
    libnvidia package and the booted kernel's image and modules, after releasing any other hold, so
    that the holds invariant compares against a host that has holds to lose."""
    r = hx("apt-mark showhold | xargs -r apt-mark unhold >/dev/null; "
           "k=$(cat /run/npuops-lab/kernel-release); "
           "pkgs=$(dpkg-query -W -f '${db:Status-Abbrev} ${Package}\\n' | awk '$1 == \"ii\" && $2 ~ /^(lib)?nvidia-/ "
           "{print $2}'; for p in linux-image-$k linux-modules-$k; do dpkg-query -W $p >/dev/null 2>&1 && echo $p; "
           "done); apt-mark hold $pkgs >/dev/null && apt-mark showhold")
    if r.returncode != 0 or not r.stdout.split():
        raise RuntimeError("baseline: holding the driver and kernel packages failed (%d): %s"
                           % (r.returncode, (r.stdout + r.stderr)[-300:]))


def norm_holds(holds: list[str]) -> list[str]:
    """Driver packages carry their branch in the name (nvidia-utils-535-server): compare by family."""
    import re

    return sorted({re.sub(r"-(\d{3})(-|$)", r"-B\2", h) if h.startswith(("nvidia-", "libnvidia-")) else h
                   for h in holds})


def host_driver() -> tuple[Optional[str], str]:
    r = hx("nvidia-smi --query-gpu=driver_version --format=csv,noheader")
    v = r.stdout.split()[0] if r.returncode == 0 and r.stdout.split() else None
    return v, r.stdout.strip()[:160]


def at_baseline(core) -> Optional[str]:
    """None when the target is at the baseline already (saves recreating it), else why not."""
    if not container_running():
        return "container not running"
    n = core.read_node(TARGET)
    lb, an = n.metadata.labels or {}, n.metadata.annotations or {}
    if n.spec.unschedulable or any(k.startswith(mw.UPGRADE_PREFIXES) for k in list(lb) + list(an)):
        return "node has upgrade labels/annotations or is cordoned"
    if any(k.startswith(mw.DEPLOY_PREFIXES) and v.endswith(mw.PAUSED) for k, v in lb.items()):
        return "operands paused"
    r = hx("cat /sys/module/nvidia/version; readlink /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1; "
           "test -e %s && echo RECORD; test -e /var/run/reboot-required && echo REBOOT; dpkg --audit; "
           "pgrep -f fcntl[.]lockf >/dev/null && echo LOCKER" % RECORD)
    out = r.stdout
    if OLD not in out.splitlines()[0:1] or ("libnvidia-ml.so." + OLD) not in out:
        return "driver not at %s: %s" % (OLD, out[:120])
    for bad in ("RECORD", "REBOOT", "LOCKER"):
        if bad in out:
            return "host has " + bad
    if mw.node_driver(n) != OLD or not mw.node_ready(n):
        return "node labels/Ready not at baseline"
    return None


def remove_guard(k) -> None:
    """Delete the guard Deployment and its PDB (404s ignored): a PDB left behind would refuse later
    windows on the node (0 disruptions allowed while its other pod is Pending)."""
    client, apps, policy = k[0], k[2], k[3]
    for fn, args in ((apps.delete_namespaced_deployment, (GUARD, NS)),
                     (policy.delete_namespaced_pod_disruption_budget, (GUARD, NS))):
        try:
            retry(lambda f=fn, a=args: f(*a), "delete " + GUARD)
        except client.ApiException as e:
            if e.status != 404:
                raise


def ensure_guard(k) -> None:
    """Deployment faults-guard: 2 replicas, one on TARGET and one on OTHER (affinity + anti-affinity),
    PDB minAvailable 1 (one disruption allowed, so the preflight passes; the evicted pod stays
    Pending while TARGET is cordoned)."""
    core, apps, policy = k[1], k[2], k[3]
    remove_guard(k)
    mw_wait("old guard pods gone", lambda: not core.list_namespaced_pod(NS, label_selector="app=" + GUARD).items)
    sel = {"app": GUARD}
    apps.create_namespaced_deployment(NS, {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": GUARD, "labels": sel},
        "spec": {"replicas": 2, "selector": {"matchLabels": sel}, "template": {
            "metadata": {"labels": sel},
            "spec": {
                "affinity": {
                    "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                               "values": [TARGET, OTHER]}]}]}},
                    "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": {"matchLabels": sel}, "topologyKey": "kubernetes.io/hostname"}]}},
                "containers": [{"name": "guard", "image": "registry.k8s.io/pause:3.10"}]}}}})
    policy.create_namespaced_pod_disruption_budget(NS, {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": GUARD},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": sel}}})

    def healthy():
        pods = [p for p in core.list_namespaced_pod(NS, label_selector="app=" + GUARD).items
                if GuardWatch._ready(p) and not p.metadata.deletion_timestamp]
        st = policy.read_namespaced_pod_disruption_budget(GUARD, NS).status
        return len(pods) == 2 and {p.spec.node_name for p in pods} == {TARGET, OTHER} and st \
            and st.disruptions_allowed == 1 and pods
    return mw_wait("guard pods Ready on %s and %s, PDB allows 1" % (TARGET, OTHER), healthy, 120)


def mw_wait(what: str, fn: Callable[[], Any], timeout: float = 60) -> Any:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        v = fn()
        if v:
            return v
        time.sleep(1)
    raise RuntimeError("timed out after %ss: %s" % (timeout, what))


def baseline(ctx: "Case") -> None:
    k = ctx.k
    if not container_running():
        podman("start", container(TARGET))
    gone = delete_leases(k)
    if gone:
        ctx.note("baseline: deleted stale lease(s) %s" % ", ".join(gone))
    le = read_lease(k)
    if le and le["valid"]:
        raise RuntimeError("the window's Lease is held by %s (a live run?): not starting" % le["holder"])
    why = at_baseline(k[1])
    if why:
        log("%s: baseline: recreating the host (%s)" % (ctx.name, why))
        mw.restore_host(k[1], TARGET)
    else:
        log("%s: baseline: host and node already at the baseline" % ctx.name)
    ensure_guard(k)
    hold_baseline()
    ctx.before = host_snapshot()
    if not ctx.before["holds"]:
        raise RuntimeError("baseline: no package held on %s after hold_baseline()" % TARGET)
    ctx.guard = GuardWatch(k, 1)
    ctx.guard.start()
    ctx.watch = NodeWatch(k)
    ctx.watch.start()


# ------------------------------------------------------------------ a case
class Case:
    def __init__(self, name: str, spec: dict, out: Path, k):
        self.name, self.spec, self.k = name, spec, k
        self.dir = out / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.runs: list[Run] = []
        self.expect: list[tuple[bool, str]] = []
        self.notes: list[str] = []
        self.mid: dict[str, list[str]] = {"schedulable": [], "lease": []}
        self.before: dict = {}
        self.stale_holders: set[str] = set()
        self.watch: Optional[NodeWatch] = None
        self.guard: Optional[GuardWatch] = None
        self.result: dict[str, tuple[Optional[bool], str]] = {}
        self.duration = 0.0

    def note(self, msg: str) -> None:
        log("%s: %s" % (self.name, msg))
        self.notes.append(msg)

    def check(self, ok: bool, what: str) -> bool:
        self.expect.append((bool(ok), what))
        log("%s: expect %s: %s" % (self.name, "ok" if ok else "FAIL", what))
        return bool(ok)

    def start(self, label: str, *extra: Any) -> Run:
        r = Run(self.dir, label, list(extra))
        self.runs.append(r)
        return r

    def after_run(self, r: Run) -> None:
        """Checks that hold after every run: no schedulable node with a wrong driver; a Lease held
        only by a live run (a killed run's Lease is stale by design until taken over)."""
        bad = schedulable_mismatches(self.k)
        if bad:
            self.mid["schedulable"].append("after %s: %s" % (r.label, "; ".join(bad)))
        le = read_lease(self.k)
        if r.killed:
            if le and le["valid"]:
                self.stale_holders.add(le["holder"])
        elif le and le["valid"] and le["holder"] not in self.stale_holders and not any(
                o.proc.poll() is None for o in self.runs if o is not r):  # a live run may hold it
            self.mid["lease"].append("after %s: still held by %s until %s" % (r.label, le["holder"], le["expires"]))

    def finished(self, r: Run) -> None:
        r.wait()
        self.after_run(r)

    def rerun(self, killed: Run, label: str = "rerun", *extra: Any) -> Run:
        """Rerun after ``killed``: with maintenance_take_over=<its holder> when its Lease is still valid.
        A refusal despite that is recorded, and the run is repeated as the killed run itself
        (maintenance_run_id: same holder, so the Lease is renewed) to check the resume anyway."""
        le = read_lease(self.k)
        if not (le and le["valid"]):
            r = self.start(label, *extra)
            self.finished(r)
            return r
        holder = le["holder"]
        r = self.start(label, "maintenance_take_over=" + holder, *extra)
        self.finished(r)
        if r.refused():
            self.check(False, "maintenance_take_over=%s refused: %s" % (holder, refusal(r)))
            r = self.start(label + "-as-same-run", "maintenance_run_id=" + holder.split("/", 1)[-1], *extra)
            self.finished(r)
        else:
            s = r.summary() or {}
            self.check(s.get("previous_run") == holder,
                       "take-over summary names the previous run: previous_run=%r" % s.get("previous_run"))
        return r

    def expect_done(self, r: Run) -> None:
        row = r.row() or {}
        self.check(r.rc == 0 and row.get("final_state") == sm.UPGRADE_DONE,
                   "%s finished: rc=%s status=%s final_state=%s reason=%s"
                   % (r.label, r.rc, row.get("status"), row.get("final_state"), (row.get("reason") or "")[:200]))

    def expect_killed(self, r: Run, at: str) -> None:
        self.check(r.killed, "%s killed at %s (states: %s)" % (r.label, at, self.watch.states()))


def refusal(r: Run) -> str:
    for line in r.out.splitlines():
        if "is held by" in line:
            i = line.find("lease ")
            return line[i:i + 220] if i >= 0 else line[:220]
    return "(no refusal line)"


def schedulable_mismatches(k) -> list[str]:
    """Schedulable lab nodes whose host's driver is missing or not the one the Node's labels show."""
    bad = []
    core = k[1]
    for n in retry(lambda: core.list_node(label_selector="type=kwok").items, "nodes"):
        name = n.metadata.name
        if name not in LAB_HOSTS:
            continue  # scratch nodes of other tests
        if n.spec.unschedulable or not container_running(name):
            continue
        if podman("container", "inspect", container(name)).returncode != 0:
            continue  # no lab host behind this node
        labelled = mw.node_driver(n)
        if "npu" in name:
            r = podman("exec", container(name), "rbln-smi")
            have = r.stdout.split("KMD ver:")[1].split()[0] if r.returncode == 0 and "KMD ver:" in r.stdout else None
        else:
            r = podman("exec", container(name), "nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader")
            have = r.stdout.split()[0] if r.returncode == 0 and r.stdout.split() else None
        if have is None or have != labelled:
            bad.append("%s schedulable, host driver %s, node labels %s (%s)"
                       % (name, have or "MISSING", labelled, (r.stdout + r.stderr).strip()[:100]))
    return bad


def run_case(ctx: Case) -> None:
    sp, kind = ctx.spec, ctx.spec["kind"]
    pol = gpu_policy(sp.get("reboot", False), sp.get("reboot_timeout", 300))
    baseline(ctx)
    w = ctx.watch

    if kind == "kill":
        a = ctx.start("window", pol)
        w.on(sp["at"], lambda s: a.kill9("state %s" % s))
        ctx.finished(a)
        ctx.expect_killed(a, sp["at"])
        ctx.expect_done(ctx.rerun(a, "rerun", pol))

    elif kind == "host_lost":
        a_box: list[Run] = []
        keep = threading.Event()

        def lose(why):
            keep.set()
            if sp.get("no_ssh_after_boot"):
                # a lab reboot takes ~2 s, too fast to stop from outside: the host boots without sshd
                # (masked; the running one keeps serving until the reboot), so it never answers again
                ctx.note("at %s: ssh masked on npuops-%s, it does not come back from the reboot" % (why, TARGET))
                hx("systemctl mask ssh.service ssh.socket >/dev/null 2>&1; true")
                return
            ctx.note("host lost at %s: podman stop npuops-%s" % (why, TARGET))
            podman("stop", "-t", "5", container(TARGET))
            while sp.get("keep_down") and a_box[0].proc.poll() is None:
                if container_running():  # the reboot's restart brings it back: keep it down at once
                    podman("kill", container(TARGET))
                time.sleep(0.2)

        a = ctx.start("window", pol)
        a_box.append(a)
        if sp.get("at_task"):
            LogWatch(a, "TASK [npuops.fleet.driver_upgrade : %s" % sp["at_task"], lose).start()
        else:
            w.on(sp["at"], lose)
        ctx.finished(a)
        ctx.check(keep.is_set(), "host stopped during %s (states: %s)" % (sp["step"], w.states()))
        row, s = a.row() or {}, a.summary()
        reason = row.get("reason") or ""
        ctx.check(a.rc != 0, "faulted run rc != 0: rc=%s" % a.rc)
        ctx.check(s is not None, "faulted run wrote its summary")
        ctx.check(row.get("status") == "failed" and row.get("failed_phase") == sp["step"],
                  "failed in step %s: status=%s failed_phase=%s" % (sp["step"], row.get("status"),
                                                                    row.get("failed_phase")))
        ctx.check(TARGET in reason and sp["step"] in reason,
                  "reason names host and step: %r" % reason[:300])
        n = retry(lambda: ctx.k[1].read_node(TARGET), "node")
        ctx.check((n.metadata.labels or {}).get(STATE) == sm.UPGRADE_FAILED and n.spec.unschedulable,
                  "node %s and cordoned: state=%s unschedulable=%s"
                  % (sm.UPGRADE_FAILED, (n.metadata.labels or {}).get(STATE), n.spec.unschedulable))
        le = read_lease(ctx.k)
        ctx.check(not (le and le["valid"]), "Lease released after the failure: %s" % (le or "absent"))
        if sp.get("no_ssh_after_boot"):
            hx("systemctl unmask ssh.service ssh.socket; systemctl start ssh.service")
        podman("start", container(TARGET))
        subprocess.run([str(HOSTCTL), "wait-boot", TARGET, "--timeout", "180"], capture_output=True, text=True,
                       env=dict(os.environ, NPUOPS_LAB_DIR=str(mw.lab_dir())), check=False)
        wait_ssh()
        mw_wait("node %s Ready" % TARGET, lambda: mw.node_ready(ctx.k[1].read_node(TARGET)), 120)
        ctx.expect_done(ctx.rerun(a, "rerun", pol))

    elif kind == "api":
        a = ctx.start("window", pol)
        outage: dict[str, str] = {}

        def down(s):
            p = subprocess.run([str(LABCTL), "restart", "kube-apiserver", "--down", "15"], capture_output=True,
                               text=True, env=dict(os.environ, NPUOPS_LAB_DIR=str(mw.lab_dir())), check=False)
            outage["out"] = ("at %s: " % s) + (p.stdout + p.stderr).strip()[-300:]
            outage["rc"] = str(p.returncode)

        if sp.get("at_task"):
            LogWatch(a, "TASK [npuops.fleet.driver_upgrade : %s" % sp["at_task"], down).start()
        else:
            w.on(sp["at"], down)
        ctx.finished(a)
        mw_wait("labctl restart finished", lambda: "rc" in outage, 120)
        ctx.check(outage.get("rc") == "0", "kube-apiserver down 15 s %s" % outage.get("out"))
        row = a.row() or {}
        ok = ctx.check(a.rc == 0 and row.get("final_state") == sm.UPGRADE_DONE,
                       "window survived the outage: rc=%s status=%s reason=%s"
                       % (a.rc, row.get("status"), (row.get("reason") or "")[:300]))
        if sp.get("expect_retry"):
            retried = [ln for ln in a.out.splitlines() if "FAILED - RETRYING" in ln and sp["expect_retry"] in ln]
            ctx.check(bool(retried), "the outage met %r: %s"
                      % (sp["expect_retry"], (retried or ["no retry logged"])[0]))
        if not ok:
            ctx.expect_done(ctx.rerun(a, "rerun", pol))

    elif kind == "dpkg":
        holder: dict[str, str] = {}

        def lock(s):
            podman("exec", "-d", container(TARGET), "python3", "-c",
                   "import fcntl,time; f=open('/var/lib/dpkg/lock-frontend','w'); "
                   "fcntl.lockf(f, fcntl.LOCK_EX); time.sleep(600)")
            time.sleep(1)
            pids = hx("pgrep -f fcntl[.]lockf").stdout.split()
            holder["pid"] = pids[0] if pids else ""
            ctx.note("dpkg lock-frontend held at %s by pid %s" % (s, holder["pid"]))

        a = ctx.start("window", pol, "driver_upgrade_dpkg_lock_timeout=20")
        w.on(sp["at"], lock)
        ctx.finished(a)
        row = a.row() or {}
        reason = row.get("reason") or ""
        ctx.check(a.rc != 0 and row.get("status") == "failed", "faulted run failed: rc=%s status=%s phase=%s"
                  % (a.rc, row.get("status"), row.get("failed_phase")))
        ctx.check(bool(holder.get("pid")) and holder["pid"] in reason and "fcntl" in reason,
                  "reason names holder pid %s and its command line: %r" % (holder.get("pid"), reason[:300]))
        snap = host_snapshot()
        ctx.check(snap == ctx.before, "holds and services after the failure as before: %s"
                  % ("same" if snap == ctx.before else json.dumps({"before": ctx.before, "after": snap})))
        hx("pkill -f fcntl[.]lockf")
        ctx.expect_done(ctx.rerun(a, "rerun", pol, "driver_upgrade_dpkg_lock_timeout=20"))

    elif kind == "two":
        a = ctx.start("window-a", pol)
        b = ctx.start("window-b", pol)
        ctx.finished(a)
        ctx.finished(b)
        runs = [a, b]
        winners = [r for r in runs if r.rc == 0]
        losers = [r for r in runs if r.rc != 0]
        ctx.check(len(winners) == 1 and len(losers) == 1, "exactly one proceeded: rc a=%s b=%s" % (a.rc, b.rc))
        if len(winners) == 1 and losers:
            holder = (winners[0].summary() or {}).get("holder", "?")
            ctx.check(holder in losers[0].out and "is held by" in losers[0].out,
                      "%s refused naming the holder %s: %s" % (losers[0].label, holder, refusal(losers[0])))
            ctx.check(not (losers[0].dir / ("%s.json" % TARGET)).exists() and
                      "Prepare the node for the driver upgrade" not in losers[0].out,
                      "%s touched no node" % losers[0].label)
        n = hx("grep -c '^Commandline:.*%s' /var/log/apt/history.log" % NEW.replace(".", "\\.")).stdout.strip()
        ctx.check(n == "1", "driver installed once (apt history: %s install command(s) of %s)" % (n, NEW))

    elif kind == "stale":
        a = ctx.start("window", pol)
        w.on(sp["at"], lambda s: a.kill9("state %s" % s))
        ctx.finished(a)
        ctx.expect_killed(a, sp["at"])
        le = read_lease(ctx.k) or {}
        holder = le.get("holder", "")
        ctx.check(bool(le.get("valid")), "killed run left a valid Lease held by %r" % holder)
        b = ctx.start("no-take-over", pol)
        ctx.finished(b)
        ctx.check(b.rc != 0 and holder and holder in b.out, "refused naming the holder: rc=%s %s"
                  % (b.rc, refusal(b)))
        c = ctx.start("take-over", pol, "maintenance_take_over=" + holder)
        ctx.finished(c)
        s = c.summary() or {}
        if ctx.check(not c.refused(), "maintenance_take_over=%s proceeds (%s)" % (holder, refusal(c) if c.refused()
                                                                                  else "rc=%s" % c.rc)):
            ctx.check(s.get("previous_run") == holder, "summary names the previous run: %r" % s.get("previous_run"))
            fu = s.get("found_unfinished") or {}
            ctx.check(fu.get(TARGET) == sp["at"], "summary names %s found unfinished (%s): %r"
                      % (TARGET, sp["at"], fu))
            ctx.expect_done(c)
        else:
            d = ctx.start("as-same-run", pol, "maintenance_run_id=" + holder.split("/", 1)[-1])
            ctx.finished(d)
            ctx.expect_done(d)
    elif kind == "stolen":
        thief = "thief/20250101T000000Z-1"

        def steal(s):
            coord = ctx.k[4]
            le = retry(lambda: coord.read_namespaced_lease(LEASE_NAME, LEASE_NS), "lease")
            now = dt.datetime.now(dt.timezone.utc)
            le.spec.holder_identity, le.spec.renew_time, le.spec.acquire_time = thief, now, now
            le.spec.lease_duration_seconds = 900
            retry(lambda: coord.replace_namespaced_lease(LEASE_NAME, LEASE_NS, le), "lease")
            ctx.note("Lease taken over by %s at %s" % (thief, s))

        ctx.stale_holders.add(thief)
        a = ctx.start("window", pol)
        w.on(sp["at"], steal)
        ctx.finished(a)
        row = a.row() or {}
        reason = row.get("reason") or ""
        ctx.check(a.rc != 0 and row.get("status") == "failed", "run that lost its Lease failed: rc=%s status=%s"
                  % (a.rc, row.get("status")))
        ctx.check(thief in reason, "reason names the run that holds the Lease now: %r" % reason[:250])
        n = retry(lambda: ctx.k[1].read_node(TARGET), "node")
        ctx.check((n.metadata.labels or {}).get(STATE) == sm.UPGRADE_FAILED and bool(n.spec.unschedulable),
                  "its node marked %s and cordoned (state %s)"
                  % (sm.UPGRADE_FAILED, (n.metadata.labels or {}).get(STATE)))
        le = read_lease(ctx.k) or {}
        ctx.check(le.get("holder") == thief, "the other run's Lease left alone: holder %r" % le.get("holder"))
        delete_leases(ctx.k)  # that run ends
        ctx.expect_done(ctx.rerun(a, "rerun", pol))
    else:
        raise ValueError(kind)


def wait_ssh(timeout: float = 120) -> None:
    port = json.loads((mw.lab_dir() / "ssh" / "ports.json").read_text()).get(TARGET)
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            with socket.create_connection(("127.0.0.1", int(port)), timeout=3) as s:
                if s.recv(16).startswith(b"SSH-"):
                    return
        except (OSError, TypeError):
            pass
        time.sleep(1)


def invariants(ctx: Case) -> dict[str, tuple[Optional[bool], str]]:
    """invariant -> (True ok / False FAIL / None not applicable: nothing to judge in this case, detail)."""
    k = ctx.k
    core = k[1]
    res: dict[str, tuple[Optional[bool], str]] = {}
    n = retry(lambda: core.read_node(TARGET), "node")
    lb, an = n.metadata.labels or {}, n.metadata.annotations or {}
    st = lb.get(STATE)
    done = st == sm.UPGRADE_DONE
    if done:
        v, raw = host_driver()
        ok = v == NEW and not n.spec.unschedulable
        where = "uncordoned" if not n.spec.unschedulable else "CORDONED"
        res["final"] = (ok, "%s, nvidia-smi %s, %s" % (sm.UPGRADE_DONE, v or raw, where))
    elif st == sm.UPGRADE_FAILED:
        try:
            reason = json.loads(an.get(ANN + "last-transition", "{}")).get("reason", "")
        except ValueError:
            reason = ""
        res["final"] = (bool(reason) and bool(n.spec.unschedulable),
                        "%s, %s, reason: %s" % (sm.UPGRADE_FAILED, "cordoned" if n.spec.unschedulable else "UNCORDONED",
                                                reason[:150] or "NONE"))
    else:
        res["final"] = (False, "state %r (cordoned=%s)" % (st, n.spec.unschedulable))
    bad = ctx.mid["schedulable"] + schedulable_mismatches(k)
    res["schedulable"] = (not bad, "; ".join(bad) or "no schedulable node with a wrong driver")
    g = ctx.guard
    if g:
        unjudged = g.finish()
        if unjudged or g.violations:
            res["pdb"] = (False, "; ".join(([unjudged] if unjudged else []) + g.violations))
        elif done and TARGET not in g.removed_on:
            # the window's policy drains (drain.enable): an upgraded node had its guard pod evicted
            res["pdb"] = (False, f"the node ended {sm.UPGRADE_DONE} but no removal of its guard pod was seen")
        elif g.removed:
            res["pdb"] = (True, "removed: %s%s" % (", ".join(g.removed), " (%d judged across a watch gap)" % g.gaps
                                                   if g.gaps else ""))
        else:  # nothing was removed: nothing to judge
            res["pdb"] = (None, "no guard pod removed")
    if not container_running():
        # only a case that takes the host away may end with it down; then nothing on it can be compared
        down = (None, "host down (the case's fault)") if ctx.spec["kind"] == "host_lost" else (
            False, "host container not running after a %s case" % ctx.spec["kind"])
        res["services"] = res["holds"] = down
        after = None
    else:
        after = host_snapshot()
    if after is not None:
        res["services"] = (after["services"] == ctx.before.get("services"),
                           "%s" % after["services"] if after["services"] == ctx.before.get("services")
                           else "before %s after %s" % (ctx.before.get("services"), after["services"]))
        hb, ha = ctx.before.get("holds") or [], after["holds"] or []
        # a done node keeps every hold it had (driver packages by family) plus the ones the window sets
        # (driver_upgrade_hold_packages); any other end keeps exactly the holds it had
        same = set(norm_holds(hb)) <= set(norm_holds(ha)) if done else hb == ha
        added = sorted(set(norm_holds(ha)) - set(norm_holds(hb)))
        res["holds"] = ((bool(hb) and same, ("kept %d, added by the window: %s" % (len(hb), ", ".join(added) or "none"))
                         if same and hb else "before %s after %s" % (hb, ha)))
    paused = [key for key, v in lb.items() if key.startswith(mw.DEPLOY_PREFIXES) and v.endswith(mw.PAUSED)]
    # a done node has every operand back; a failed one may keep them paused (it stays cordoned)
    res["operands"] = ((not paused, "paused: %s" % (", ".join(paused) or "none")) if done
                       else (None, "node %s, paused: %s" % (st, ", ".join(paused) or "none")))
    missing, extra = [], []
    for r in ctx.runs:
        has = (r.dir / "latest.json").exists()
        if r.killed and has:
            extra.append("%s (killed) has one" % r.label)
        elif not r.killed and not has and not r.refused():
            missing.append("%s (rc %s)" % (r.label, r.rc))
    res["summaries"] = (not missing and not extra,
                        "; ".join((["no summary: " + ", ".join(missing)] if missing else []) + extra)
                        or "%d run(s), %d killed, %d refused at the lease (no summary: it would replace the holder's)"
                        % (len(ctx.runs), sum(r.killed for r in ctx.runs), sum(r.refused() for r in ctx.runs)))
    le = read_lease(k)
    live = le and le["valid"]
    res["lease"] = (not live and not ctx.mid["lease"], "; ".join(ctx.mid["lease"] + (
        ["held by %s (no run alive)" % le["holder"]] if live else [])) or ("free" if le else "absent"))
    if done and container_running():
        rec = hx("test -e %s && cat %s" % (RECORD, RECORD))
        res["record"] = (rec.returncode != 0, "left: " + rec.stdout[:150] if rec.returncode == 0 else "none")
    else:
        res["record"] = (None, "node %s, no window record expected" % st) if container_running() else res["holds"]
    bad_e = [d for ok, d in ctx.expect if not ok]
    res["expect"] = ((not bad_e, "; ".join(bad_e) or "%d check(s)" % len(ctx.expect)) if ctx.expect
                     else (None, "the case checks nothing of its own"))
    return res


def cleanup(ctx: Case) -> None:
    for r in ctx.runs:
        if r.proc.poll() is None:
            r.kill9("case cleanup")
            r.proc.wait()
    if ctx.watch:
        ctx.watch.stop.set()
    if ctx.guard:
        ctx.guard.stop.set()
    if not container_running():
        podman("start", container(TARGET))
    hx("pkill -f fcntl[.]lockf || true")


# ------------------------------------------------------------------ report
def cell(ok_detail: Optional[tuple[Optional[bool], str]], width: int = 70) -> str:
    """ok, n/a (the invariant had nothing to judge in this case) or FAIL: detail."""
    if ok_detail is None:
        return "-"
    ok, detail = ok_detail
    if ok is None:
        return "n/a"
    if ok:
        return "ok"
    d = detail.replace("|", "/").replace("\n", " ")
    return "FAIL: " + (d[:width] + "..." if len(d) > width else d)


def report(cases: list[Case], how: str, selected: list[str], path: Path, artifacts: Path) -> str:
    head = "| case | " + " | ".join(INVARIANTS) + " | duration |"
    lines = ["Fault-injection sweep on %s (%s; `%s`), %s" % (
        TARGET, how, " ".join(selected), time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())), "",
        head, "|" + "---|" * (len(INVARIANTS) + 2)]
    for c in cases:
        lines.append("| %s | %s | %ds |" % (c.name, " | ".join(cell(c.result.get(i)) for i in INVARIANTS),
                                            c.duration))
    lines += ["", "Details (artifacts: %s):" % artifacts, ""]
    for c in cases:
        lines.append("- **%s** (%ds): node states %s" % (c.name, c.duration, c.watch.states() if c.watch else "-"))
        for r in c.runs:
            killed = ", killed at " + r.killed_at if r.killed else ""
            lines.append("  - run %s: rc %s, %ds%s" % (r.label, r.rc, r.duration, killed))
        for i in INVARIANTS:
            if i in c.result:
                ok, d = c.result[i]
                lines.append("  - %s: %s — %s" % (i, "n/a" if ok is None else "ok" if ok else "FAIL", d))
        for nt in c.notes:
            lines.append("  - note: %s" % nt)
    text = "\n".join(lines) + "\n"
    path.write_text(text)
    return text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--list", action="store_true", help="list the cases")
    ap.add_argument("--all", action="store_true", help="every case (the full sweep)")
    ap.add_argument("--cases", default=os.environ.get("FAULTS_CASES", "2"),
                    help="how many cases of the rotation (FAULTS_CASES, default 2; 'all' = every case)")
    ap.add_argument("--seed", default=os.environ.get("FAULTS_SEED"),
                    help="take slice SEED of the case list (FAULTS_SEED; 'head' = git HEAD); default: the "
                         "cases run least recently on this machine (tests/integration/rotation.py's record)")
    ap.add_argument("--case", action="append", default=[], help="run this case (repeatable)")
    ap.add_argument("--dry-run", action="store_true", help="print the selection and exit")
    ap.add_argument("--result", default=os.environ.get("FAULTS_RESULT", str(Path(__file__).parent / "last-result.md")))
    a = ap.parse_args()
    names = list(CASES)
    if a.list:
        for n in names:
            print(n, json.dumps(CASES[n]))
        return 0
    record = rotation.load()
    counter = rotation.counter_now()
    seed = parse_seed(a.seed) if a.seed not in (None, "") else None
    if a.case:
        unknown = [c for c in a.case if c not in CASES]
        if unknown:
            ap.error("unknown case(s) %s; --list shows them" % ", ".join(unknown))
        selected = a.case
    elif a.all or str(a.cases) == "all":
        selected = names
    elif seed is not None:
        selected = select(names, int(a.cases), seed)
    else:
        seen = record.get("faults") or {}
        again = [c for c in rotation.failing(seen) if c in CASES]
        chosen = set(rotation.stalest(names, int(a.cases), seen, counter)) | set(again)
        selected = [c for c in names if c in chosen]
    how = ("seed %d (FAULTS_SEED=%d repeats this selection)" % (seed, seed) if seed is not None
           else "the cases run least recently on this machine%s (record %s)"
           % (", and again the ones that failed last" if a.cases != "all" else "", rotation.record_path()))
    log("%s; %d of %d case(s): %s" % (how, len(selected), len(names), " ".join(selected)))
    if a.dry_run:
        return 0
    out = Path(os.environ.get("FAULTS_OUT") or "/tmp/npuops-faults/%s" % time.strftime("%Y%m%dT%H%M%S"))
    out.mkdir(parents=True, exist_ok=True)
    k = kube()
    try:
        if not k[1].list_node(label_selector="type=kwok", limit=1, _request_timeout=5).items:
            raise RuntimeError("no type=kwok nodes: not the lab")
    except Exception as e:  # noqa: BLE001
        log("lab not reachable via %s: %s (make lab-up)" % (kubeconfig(), e))
        return 2
    done: list[Case] = []
    for name in selected:
        ctx = Case(name, CASES[name], out, k)
        t0 = time.monotonic()
        log("=== %s %s" % (name, json.dumps(CASES[name])))
        try:
            run_case(ctx)
        except Exception as e:  # noqa: BLE001 - a harness error fails the case, the sweep goes on
            ctx.check(False, "harness error: %s: %s" % (type(e).__name__, str(e)[:300]))
            (ctx.dir / "harness-error.txt").write_text(traceback.format_exc())
        try:
            ctx.result = invariants(ctx)
        except Exception as e:  # noqa: BLE001
            ctx.result = {"expect": (False, "invariant check error: %s: %s" % (type(e).__name__, str(e)[:300]))}
            (ctx.dir / "invariants-error.txt").write_text(traceback.format_exc())
        cleanup(ctx)
        ctx.duration = time.monotonic() - t0
        bad = [i for i, (ok, _d) in ctx.result.items() if ok is False]
        log("=== %s: %s in %.0fs" % (name, "FAIL (%s)" % ", ".join(bad) if bad else "ok", ctx.duration))
        done.append(ctx)
        report(done, how, selected, Path(a.result), out)
        with rotation.updating() as data:
            rotation.note_result(data, "faults", name, "failed" if any(ok is False for ok, _d in ctx.result.values())
                                 else "passed", time.time(), rotation.head(), "case")
        (out / "result.json").write_text(json.dumps(
            [{"case": c.name, "duration_s": round(c.duration), "runs": [
                {"label": r.label, "rc": r.rc, "killed": r.killed_at, "dir": str(r.dir)} for r in c.runs],
              "states": c.watch.states() if c.watch else None,
              "result": {i: {"ok": ok, "detail": d} for i, (ok, d) in c.result.items()}, "notes": c.notes}
             for c in done], indent=1))
    try:
        remove_guard(k)  # the lab is left as the cases found it for whatever runs next
    except Exception as e:  # noqa: BLE001
        log("could not remove the %s Deployment/PDB: %s" % (GUARD, e))
    print(report(done, how, selected, Path(a.result), out))
    failed = [c.name for c in done if any(ok is False for ok, _d in c.result.values())]
    with rotation.updating() as data:
        rotation.note_run(data, {"when": rotation.now_iso(time.time()), "kind": "faults", "rotation": "%d of %d" % (
            len(selected), len(names)), "commit": rotation.head(), "ran": len(done),
            "passed": len(done) - len(failed), "failed": len(failed)})
        rendered = rotation.render(data, 3)
    (REPO / "tests" / "integration" / "last-rotations.md").write_text(rendered)
    names_failed = ": " + " ".join(failed) if failed else ""
    log("%d case(s), %d failed%s; table: %s" % (len(done), len(failed), names_failed, a.result))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
