"""Small helpers shared by the lab tests: polling waits, 404-tolerant deletes, node readiness, GFD
driver labels, and throw-away kwok nodes (a test's own nodes keep other tests' counts untouched)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Optional

import yaml
from kubernetes import client

REPO = Path(__file__).resolve().parents[2]
COLLECTIONS = REPO / "build" / "collections"


def link_collection() -> None:
    """build/collections/ansible_collections/npuops/fleet -> the repo (as scripts/test.sh links it), and
    build/collections on sys.path, so that the collection's Python imports as
    ``ansible_collections.npuops.fleet`` (e.g. the state names of ``plugins/module_utils/upgrade/states.py``)
    also where these helpers are imported outside pytest (tests/faults/run.py, bench/); under pytest
    tests/conftest.py has done the same already."""
    link = COLLECTIONS / "ansible_collections" / "npuops" / "fleet"
    if not link.exists():
        link.parent.mkdir(parents=True, exist_ok=True)
        try:
            link.symlink_to(REPO)
        except FileExistsError:  # a concurrent run made it meanwhile
            pass
    if str(COLLECTIONS) not in sys.path:
        sys.path.insert(0, str(COLLECTIONS))


link_collection()


def container(name: str) -> str:
    """The podman container of lab host ``name``, as tests/lab/hosts/hostctl.py names it: with the
    lab's NPUOPS_LAB_PORT_OFFSET when it has one, so two labs side by side keep apart."""
    offset = int(os.environ.get("NPUOPS_LAB_PORT_OFFSET", "0"))
    return ("npuops-" if offset == 0 else "npuops-o%d-" % offset) + name


def host_of(container_name: str) -> str:
    """The lab host a container of :func:`container` runs (its inverse)."""
    prefix = container("")
    assert container_name.startswith(prefix), (container_name, prefix)
    return container_name[len(prefix):]


DRIVER_LABELS = ("nvidia.com/cuda.driver.major", "nvidia.com/cuda.driver.minor", "nvidia.com/cuda.driver.rev")


def wait(what: str, fn: Callable[[], Any], timeout: float = 60, poll: float = 0.5) -> Any:
    """Poll ``fn`` until it returns something truthy (returned); AssertionError naming ``what`` after ``timeout`` s."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        value = fn()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError("timed out after %ss: %s" % (timeout, what))


def poll(what: str, probe: Callable[[], tuple[bool, Any]], timeout: float = 60, every: float = 0.5) -> Any:
    """Poll ``probe() -> (done, seen)`` until done (returns seen); at the deadline fail the test with
    the last seen."""
    import pytest

    deadline = time.monotonic() + timeout
    while True:
        done, seen = probe()
        if done:
            return seen
        if time.monotonic() > deadline:
            pytest.fail("%s: not after %ss; last seen: %r" % (what, timeout, seen))
        time.sleep(every)


def dry_run_eviction(core_v1: Any, pod: dict[str, Any]) -> tuple[int, str]:
    """(HTTP status, message) of a server-side dry-run eviction of pod dict ``pod`` (``metadata`` with
    name and namespace), as the server answers it: nothing is evicted."""
    meta = pod["metadata"]
    body = {"apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]}}
    try:
        resp = core_v1.create_namespaced_pod_eviction(meta["name"], meta["namespace"], body, dry_run="All",
                                                      _preload_content=False)
        return resp.status, ""
    except client.ApiException as exc:
        return exc.status, (json.loads(exc.body or "{}") or {}).get("message") or ""


def gone(fn: Callable[..., Any], *args: Any) -> None:
    """Call a delete and accept 404 (already gone)."""
    try:
        fn(*args)
    except client.ApiException as exc:
        if exc.status != 404:
            raise


def ready(node: Any) -> bool:
    """The Node (client model) has Ready=True."""
    return any(c.type == "Ready" and c.status == "True" for c in (node.status.conditions or []))


def driver_labels(version: str) -> dict[str, str]:
    """GPU Feature Discovery's labels for an NVIDIA driver version (550.90.07 -> 550 / 90 / 07)."""
    return dict(zip(DRIVER_LABELS, version.split(".")))


def create_kwok_nodes(
    core_v1: Any,
    prefix: str,
    count: int,
    labels: Optional[dict[str, str]] = None,
    capacity: Optional[dict[str, str]] = None,
    taints: Optional[list[dict[str, str]]] = None,
    kwok_type_label: bool = True,
) -> list[str]:
    """Create ``count`` kwok-managed nodes ``<prefix>-<hex>-<i>`` and wait until they are Ready.

    kwok runs (fakes) the pods of nodes annotated kwok.x-k8s.io/node=fake and labelled
    lab.npuops.io/heartbeat=on (tests/lab/lablib/nodes.py). Delete them with :func:`delete_nodes`."""
    sfx = uuid.uuid4().hex[:5]
    names = ["%s-%s-%d" % (prefix, sfx, i) for i in range(count)]
    cap = capacity or {"cpu": "32", "memory": "256Gi", "pods": "110"}
    for name in names:
        meta_labels = {"kubernetes.io/hostname": name, "lab.npuops.io/heartbeat": "on"}
        if kwok_type_label:
            meta_labels["type"] = "kwok"
        meta_labels.update(labels or {})
        body: dict[str, Any] = {
            "metadata": {"name": name, "labels": meta_labels, "annotations": {"kwok.x-k8s.io/node": "fake"}},
            "status": {"capacity": cap, "allocatable": cap},
        }
        if taints:
            body["spec"] = {"taints": taints}
        core_v1.create_node(body)
    wait("kwok nodes %s Ready" % names, lambda: all(ready(core_v1.read_node(n)) for n in names))
    return names


def delete_nodes(core_v1: Any, names: list[str]) -> None:
    """Delete the nodes, first releasing pods on them that a test's finalizer still holds."""
    for name in names:
        for p in core_v1.list_pod_for_all_namespaces(field_selector="spec.nodeName=" + name).items:
            if p.metadata.finalizers:
                core_v1.patch_namespaced_pod(p.metadata.name, p.metadata.namespace, {"metadata": {"finalizers": None}})
        gone(core_v1.delete_node, name)


RBAC_DIR = Path(__file__).resolve().parents[2] / "deploy" / "rbac"
WINDOW_LEASE = "npuops-fleet-maintenance-window"


def shipped_rbac() -> list[dict[str, Any]]:
    """The shipped RBAC objects (ClusterRole + namespaced Roles) from deploy/rbac/*.yaml."""
    docs: list[dict[str, Any]] = []
    for path in sorted(RBAC_DIR.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def run_playbook(
    name: str,
    inventories: list[str],
    extra: tuple[Any, ...],
    kubeconfig: str,
    cwd: Path,
    timeout: int = 1500,
) -> tuple[int, str]:
    """ansible-playbook playbooks/<name> with the repo as the collection, the lab's state dir and
    ``kubeconfig``; ``extra``: ``--flag`` strings as they are, other strings as ``-e k=v``, mappings as
    JSON ``-e``. Returns (rc, stdout + stderr)."""
    cmd, env = playbook_command(name, inventories, extra, kubeconfig)
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, cwd=str(cwd), check=False)
    return p.returncode, p.stdout + p.stderr


def playbook_command(
    name: str, inventories: list[str], extra: tuple[Any, ...], kubeconfig: str
) -> tuple[list[str], dict[str, str]]:
    """The command line and environment :func:`run_playbook` runs (for a test that must kill it)."""
    link_collection()
    env = dict(
        os.environ,
        ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS),
        NPUOPS_LAB_DIR=os.environ.get("NPUOPS_LAB_DIR", "/tmp/npuops-lab"),
        KUBECONFIG=kubeconfig,
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORCE_COLOR="0",
        ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default",
    )
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), str(REPO / "playbooks" / name)]
    for inv in inventories:
        cmd += ["-i", str(inv)]
    cmd += ["-e", f"npuops_fleet_kubeconfig={kubeconfig}"]
    for e in extra:
        cmd += [e] if isinstance(e, str) and e.startswith("--") else ["-e", e if isinstance(e, str) else json.dumps(e)]
    return cmd, env
