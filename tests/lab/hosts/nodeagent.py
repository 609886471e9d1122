#!/usr/bin/env python3
"""Lab node agent: makes each lab host stand behind its kwok Node (started by `hostctl up`).

Every ~2 s, per host (host name = Node name):
  * host down (container stopped, or booting / shutting down: no ready marker) -> the Node's
    heartbeat stops (set_node_online False) -> NotReady after the node-monitor grace period;
  * host up after a reboot (boot marker changed) -> the Node stays offline until the control plane
    has marked it NotReady and it has stayed so for MIN_NOTREADY_S (at most NOTREADY_WAIT_S in
    all), as a kubelet that was down for the reboot would be seen; labels + nodeInfo are refreshed
    at once and the heartbeat resumes after that;
  * while up, labels follow the host's simulated state whenever it changes (NFD/GFD relabel):
      feature.node.kubernetes.io/kernel-version.full            booted kernel
      feature.node.kubernetes.io/system-os_release.ID/VERSION_ID /etc/os-release
      nvidia.com/cuda.driver.major/minor/rev                   LOADED nvidia module, only when
                       NVML would initialise (userspace == module), like GFD; stale otherwise
      rebellions.ai/driver-version.full/major/minor/patch      LOADED rebellions module
    and status.nodeInfo kernelVersion / osImage / bootID / machineID.
State is read from the host side: $NPUOPS_LAB_DIR/hosts/<name>/{ready,kernel-release,os-release,
boot-id,machine-id,sysmodule/} and the container's root filesystem (libnvidia-ml.so.1 link) via podman inspect.
"""
import json
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # tests/lab -> lablib
os.environ.setdefault("CONTAINERS_CONF", os.path.join(HERE, "containers.conf"))
from lablib import nodes as labnodes  # noqa: E402

STATE = os.path.abspath(os.environ.get("NPUOPS_LAB_DIR", "/tmp/npuops-lab"))
POLL_S = float(os.environ.get("NPUOPS_AGENT_POLL_S", "2"))
NOTREADY_WAIT_S = float(os.environ.get("NPUOPS_AGENT_NOTREADY_WAIT_S", "60"))
MIN_NOTREADY_S = float(os.environ.get("NPUOPS_AGENT_MIN_NOTREADY_S", "6"))
# Container names carry the lab's port offset when it has one: two labs side by side (two
# NPUOPS_LAB_DIRs, two offsets) never name - and so never replace or remove - each other's hosts.
_LAB_OFFSET = int(os.environ.get("NPUOPS_LAB_PORT_OFFSET", "0"))
PREFIX = "npuops-" if _LAB_OFFSET == 0 else "npuops-o%d-" % _LAB_OFFSET
NVML_LINK = "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"


def log(msg):
    print("[nodeagent %s] %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


def readf(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def agent_containers():
    """{host name: running?} for this lab's hosts that stand behind a Node."""
    r = subprocess.run(["podman", "ps", "-a", "--filter", "label=npuops-lab-agent=" + STATE,
                        "--format", "json"], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        return None
    out = {}
    for c in json.loads(r.stdout or "[]"):
        for n in c.get("Names") or []:
            if n.startswith(PREFIX):
                out[n[len(PREFIX):]] = c.get("State") == "running"
    return out


def resolve_in_root(root, path, hops=10):
    """The target ``path`` finally points to inside the host's root filesystem ``root`` (absolute links
    taken inside it, as Debian's /etc/alternatives chain is), or None when a link is broken."""
    for _ in range(hops):
        try:
            target = os.readlink(os.path.join(root, path.lstrip("/")))
        except OSError:
            return path if os.path.exists(os.path.join(root, path.lstrip("/"))) else None
        path = target if target.startswith("/") else os.path.join(os.path.dirname(path), target)
    return None


def merged_dir(name):
    r = subprocess.run(["podman", "inspect", "-f", "{{.GraphDriver.Data.MergedDir}}",
                        PREFIX + name], capture_output=True, text=True, check=False)
    return r.stdout.strip() if r.returncode == 0 else None


def os_release(d):
    out = {}
    for line in (readf(os.path.join(d, "os-release")) or "").splitlines():
        if "=" in line and not line.startswith("#"):
            k, v = line.split("=", 1)
            out[k] = v.strip().strip('"')
    return out


class Host:
    def __init__(self, name):
        self.name = name
        self.dir = os.path.join(STATE, "hosts", name)
        self.marker = None       # boot marker last seen up
        self.online = None       # what we last set
        self.offline_since = None
        self.notready_seen = None
        self.labels = None       # last labels pushed
        self.info = None
        self.rootfs = None
        self.driver_labels = {}  # sticky (GFD keeps old labels while NVML fails)

    def state_labels(self):
        d = self.dir
        labels = {}
        kern = readf(os.path.join(d, "kernel-release"))
        if kern:
            labels["feature.node.kubernetes.io/kernel-version.full"] = kern
        osr = os_release(d)
        if osr.get("ID"):
            labels["feature.node.kubernetes.io/system-os_release.ID"] = osr["ID"]
        if osr.get("VERSION_ID"):
            labels["feature.node.kubernetes.io/system-os_release.VERSION_ID"] = osr["VERSION_ID"]
        nv = readf(os.path.join(d, "sysmodule", "nvidia", "version"))
        if nv:
            if self.rootfs is None:
                self.rootfs = merged_dir(self.name)
            lib = resolve_in_root(self.rootfs, NVML_LINK) if self.rootfs else None
            if lib and lib.endswith(".so." + nv):
                p = nv.split(".") + ["", "", ""]
                self.driver_labels = {"nvidia.com/cuda.driver.major": p[0],
                                      "nvidia.com/cuda.driver.minor": p[1],
                                      "nvidia.com/cuda.driver.rev": p[2]}
        rb = readf(os.path.join(d, "sysmodule", "rebellions", "version"))
        if rb:
            p = rb.split(".") + ["", "", ""]
            self.driver_labels = {"rebellions.ai/driver-version.full": rb,
                                  "rebellions.ai/driver-version.major": p[0],
                                  "rebellions.ai/driver-version.minor": p[1],
                                  "rebellions.ai/driver-version.patch": p[2]}
        labels.update(self.driver_labels)
        # bootID / machineID as a kubelet on the host reads them (published by the lab's boot.sh)
        info = {"kernel_version": kern, "os_image": osr.get("PRETTY_NAME"),
                "boot_id": readf(os.path.join(d, "boot-id")),
                "machine_id": readf(os.path.join(d, "machine-id"))}
        return labels, info

    def step(self, api, running):
        up_marker = readf(os.path.join(self.dir, "ready")) if running else None
        if not up_marker:
            if self.marker is None and self.online is None:
                return  # first sight of a host that is still booting: wait for it
            if self.online is not False:
                labnodes.set_node_online(api, self.name, False)
                log("%s: host down -> node offline" % self.name)
                self.online = False
                self.offline_since = time.monotonic()
            self.rootfs = None
            return
        rebooted = self.marker is not None and up_marker != self.marker
        if rebooted:
            log("%s: host rebooted (boot marker %s -> %s)" % (self.name, self.marker, up_marker))
            self.rootfs = None
            if self.online is not False:
                labnodes.set_node_online(api, self.name, False)
                self.online = False
                self.offline_since = time.monotonic()
        self.marker = up_marker
        labels, info = self.state_labels()
        if labels != self.labels or info != self.info:
            labnodes.refresh_labels(api, self.name, labels)
            labnodes.set_node_info(api, self.name, **info)
            log("%s: labels %s" % (self.name, labels))
            self.labels, self.info = labels, info
        if self.online is not True:
            if self.online is False and self.offline_since is not None:
                now = time.monotonic()
                if now - self.offline_since < NOTREADY_WAIT_S:
                    # let the control plane notice the outage first, and keep the Node NotReady
                    # for a few seconds (a kubelet needs a moment after boot) so it is observable
                    if self.notready_seen is None:
                        if labnodes.is_ready(api.read_node(self.name)):
                            return
                        self.notready_seen = now
                    if now - self.notready_seen < MIN_NOTREADY_S:
                        return
            labnodes.set_node_online(api, self.name, True)
            log("%s: host up -> node online" % self.name)
            self.online = True
            self.offline_since = None
            self.notready_seen = None


def main():
    from kubernetes import client, config
    from kubernetes.client.rest import ApiException
    config.load_kube_config(os.environ.get("KUBECONFIG", os.path.join(STATE, "kubeconfig")))
    api = client.CoreV1Api()
    hosts = {}
    stop = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    log("watching hosts labelled npuops-lab-agent=%s" % STATE)
    while not stop:
        seen = agent_containers()
        if seen is not None:
            for name in list(hosts):
                if name not in seen:
                    log("%s: host removed, no longer watched" % name)
                    del hosts[name]
            for name, running in sorted(seen.items()):
                h = hosts.get(name)
                if h is None:
                    try:
                        api.read_node(name)
                    except ApiException as e:
                        if e.status != 404:
                            log("%s: error: %s" % (name, e))
                        continue  # no Node (yet) for this host
                    h = hosts[name] = Host(name)
                    log("%s: watching" % name)
                try:
                    h.step(api, running)
                except Exception as e:  # noqa: BLE001 - keep the agent alive
                    log("%s: error: %s" % (name, e))
        for _tick in range(int(POLL_S * 10)):
            if stop:
                break
            time.sleep(0.1)
    log("stopped")


if __name__ == "__main__":
    main()
