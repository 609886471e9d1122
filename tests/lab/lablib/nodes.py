"""What a real node's agents do, for kwok fake nodes: the kubelet heartbeat (online/offline),
Node Feature Discovery / GPU Feature Discovery labels, and the kubelet's status.nodeInfo.

Used by the lab host agent (tests/lab/hosts) and by tests. All functions take a
kubernetes.client.CoreV1Api. Mechanism (verified against kwok v0.8.0, see tests/lab/README.md):
kwok manages (heartbeats, renews the Lease of, runs pods on) only nodes annotated
kwok.x-k8s.io/node=fake AND labelled lab.npuops.io/heartbeat=on. Setting the label to "off" makes
the node silent like a dead kubelet (kwok's server-side label-selector watch drops it); the
node-lifecycle controller marks it Ready=Unknown (NotReady) after --node-monitor-grace-period (16 s)
and taints it node.kubernetes.io/unreachable. Back to "on": kwok takes it over again, Ready=True
within seconds, and the controller lifts the taints. (Removing only the annotation does NOT work:
kwok filters annotations client-side and keeps managing a node that stops matching.)
"""
import time

HEARTBEAT_LABEL = "lab.npuops.io/heartbeat"


def is_ready(node):
    """True if the Node's Ready condition is True (False for False/Unknown/missing)."""
    for c in (node.status.conditions or []) if node.status else []:
        if c.type == "Ready":
            return c.status == "True"
    return False


def is_online(core_v1, name):
    """Whether the node is currently heartbeating (managed by kwok)."""
    return (core_v1.read_node(name).metadata.labels or {}).get(HEARTBEAT_LABEL) == "on"


def set_node_online(core_v1, name, online: bool):
    """Start (online) or stop (offline) the node's heartbeat. Returns immediately; use
    wait_node_ready() to wait for the resulting Ready/NotReady transition."""
    core_v1.patch_node(name, {"metadata": {"labels": {HEARTBEAT_LABEL: "on" if online else "off"}}})


def wait_node_ready(core_v1, name, ready: bool = True, timeout: float = 60, poll: float = 1):
    """Wait until the node's Ready condition is (ready=True) True or (ready=False) not True.
    Returns the seconds waited; raises TimeoutError."""
    t0 = time.monotonic()
    while True:
        if is_ready(core_v1.read_node(name)) == ready:
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"node {name} not {'Ready' if ready else 'NotReady'} after {timeout}s")
        time.sleep(poll)


def refresh_labels(core_v1, name, labels: dict):
    """Set node labels the way NFD/GFD would (value None removes a label). Values are strings."""
    body = {k: (None if v is None else str(v)) for k, v in labels.items()}
    core_v1.patch_node(name, {"metadata": {"labels": body}})


def set_node_info(core_v1, name, kernel_version=None, os_image=None, boot_id=None,
                  kubelet_version=None, machine_id=None):
    """Patch status.nodeInfo (what the kubelet reports). kwok keeps these: its heartbeat only
    rewrites conditions/addresses, and its node-initialize stage keeps a nodeInfo already set.
    Change boot_id after a simulated reboot, as a real kubelet would."""
    info = {"kernelVersion": kernel_version, "osImage": os_image, "bootID": boot_id,
            "kubeletVersion": kubelet_version, "machineID": machine_id}
    info = {k: v for k, v in info.items() if v is not None}
    if info:
        core_v1.patch_node_status(name, {"status": {"nodeInfo": info}})
