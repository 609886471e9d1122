"""In-memory stand-ins for CoreV1Api / PolicyV1Api: just what npu_node_upgrade calls, with the
``_preload_content=False`` response shape (``.data`` JSON) and merge-patch semantics.

The eviction follows kube-apiserver's eviction subresource (pkg/registry/core/pod/storage/eviction.go)
with its own selector matcher and table, on purpose independent of the product's helpers."""

from __future__ import annotations

import copy
import json
from typing import Any

from kubernetes.client.rest import ApiException


class Resp:
    def __init__(self, obj: Any) -> None:
        self.data = json.dumps(obj)


def merge(dst: dict, patch: dict) -> None:
    for k, v in patch.items():
        if v is None:
            dst.pop(k, None)
        elif isinstance(v, dict) and isinstance(dst.get(k), dict):
            merge(dst[k], v)
        else:
            dst[k] = copy.deepcopy(v)


def _unpointer(path: str) -> list[str]:
    return [p.replace("~1", "/").replace("~0", "~") for p in path.lstrip("/").split("/")]


def json_patch(obj: dict, ops: list) -> None:
    """The JSON patch subset transition_ops() emits; a failed ``test`` raises 422 like the apiserver."""
    work = copy.deepcopy(obj)
    for op in ops:
        *parents, key = _unpointer(op["path"])
        target = work
        for part in parents:
            target = target[part]
        if op["op"] == "test" and target.get(key) != op["value"]:
            raise ApiException(status=422, reason="Unprocessable Entity: test failed")
        if op["op"] == "add":
            target[key] = copy.deepcopy(op["value"])
        elif op["op"] == "remove":
            del target[key]
    obj.clear()
    obj.update(work)


def selector_matches(selector, labels) -> bool:
    """metav1.LabelSelector -> labels: None matches nothing, {} everything (policy/v1 PDBs); the four
    matchExpressions operators; an unknown operator is an invalid selector, which matches nothing."""
    if selector is None:
        return False
    labels = labels or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }.get(op, False)
        if not ok:
            return False
    return True


# Phases whose pods the eviction subresource deletes without looking at PDBs (canIgnorePDB).
NO_PDB_CHECK_PHASES = {"Pending": True, "Succeeded": True, "Failed": True, "Running": False, "Unknown": False}


def eviction_answer(pod: dict, pdbs: list) -> int:
    """HTTP status of the eviction of ``pod`` given its namespace's ``pdbs``: 201 (evicted), 429 (PDB
    refusal), 403 (negative disruptionsAllowed) or 500 (several PDBs)."""
    meta, pod_status = pod["metadata"], pod.get("status", {})
    if NO_PDB_CHECK_PHASES.get(pod_status.get("phase"), False) or meta.get("deletionTimestamp"):
        return 201
    covering = [p for p in pdbs if selector_matches(p.get("spec", {}).get("selector"), meta.get("labels"))]
    if len(covering) > 1:
        return 500
    if not covering:
        return 201
    spec, status = covering[0].get("spec", {}), covering[0].get("status", {})
    ready = {c.get("type"): c.get("status") for c in pod_status.get("conditions", [])}.get("Ready") == "True"
    if not ready:
        if spec.get("unhealthyPodEvictionPolicy") == "AlwaysAllow":
            return 201
        desired = status.get("desiredHealthy", 0)
        if desired > 0 and status.get("currentHealthy", 0) >= desired:
            return 201
    if status.get("observedGeneration", 0) < covering[0]["metadata"].get("generation", 0):
        return 429  # the disruption controller has not judged the current spec yet
    allowed = status.get("disruptionsAllowed", 0)
    return 403 if allowed < 0 else 429 if allowed == 0 else 201


def make_node(name: str, labels=None, unschedulable=False, ready=True) -> dict:
    return {
        "metadata": {"name": name, "uid": "uid-" + name, "labels": dict(labels or {}), "annotations": {}},
        "spec": {"unschedulable": True} if unschedulable else {},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


class FakeCluster:
    def __init__(self, nodes, pods=(), pdbs=()):
        self.nodes = {n["metadata"]["name"]: n for n in nodes}
        self.pods = list(pods)
        self.pdbs = list(pdbs)
        self.events: list[dict] = []
        self.calls: list[str] = []
        self.writes = 0
        self.ds_controller = True  # remove DaemonSet pods whose nodeSelector no longer matches
        self.before_patch = None  # hook(cluster, name, body): simulate a concurrent writer or an error
        self.rv = 100
        for node in self.nodes.values():
            self.bump(node["metadata"]["name"])

    def bump(self, name):
        """Every write moves the node's resourceVersion, as etcd does."""
        self.rv += 1
        self.nodes[name]["metadata"]["resourceVersion"] = str(self.rv)

    # -- CoreV1Api --
    def read_node(self, name, _preload_content=True):
        self.calls.append("read_node")
        return Resp(self.nodes[name])

    def patch_node(self, name, body, _preload_content=True):
        self.calls.append("patch_node")
        self.writes += 1
        if self.before_patch:
            self.before_patch(self, name, body)
        if isinstance(body, list):
            json_patch(self.nodes[name], body)
        else:
            merge(self.nodes[name], body)
        self.bump(name)
        if not self.nodes[name]["spec"].get("unschedulable"):
            self.nodes[name]["spec"].pop("unschedulable", None)
        if self.ds_controller:
            labels = self.nodes[name]["metadata"]["labels"]
            self.pods = [
                p
                for p in self.pods
                if p["spec"].get("nodeName") != name
                or all(labels.get(k) == v for k, v in (p["spec"].get("nodeSelector") or {}).items())
            ]
        return Resp(self.nodes[name])

    def list_node(self, label_selector=None, field_selector=None, _preload_content=True, **_):
        self.calls.append("list_node")
        items = list(self.nodes.values())
        if field_selector:
            items = [n for n in items if n["metadata"]["name"] == field_selector.split("=", 1)[1]]
        if label_selector:
            key, value = label_selector.split("=", 1)
            items = [n for n in items if n["metadata"]["labels"].get(key) == value]
        return Resp({"items": items, "metadata": {"resourceVersion": "1"}})

    def list_pod_for_all_namespaces(self, field_selector=None, _preload_content=True, **_):
        self.calls.append("list_pod")
        node = field_selector.split("=", 1)[1]
        return Resp(
            {"items": [p for p in self.pods if p["spec"].get("nodeName") == node], "metadata": {"resourceVersion": "1"}}
        )

    def create_namespaced_event(self, namespace, body, _preload_content=True):
        self.events.append(body)
        return Resp(body)

    def _remove(self, name, ns):
        before = len(self.pods)
        self.pods = [p for p in self.pods if (p["metadata"]["name"], p["metadata"]["namespace"]) != (name, ns)]
        if len(self.pods) == before:
            raise ApiException(status=404, reason="Not Found")

    def delete_namespaced_pod(self, name, ns, body=None, _preload_content=True):
        self.writes += 1
        self._remove(name, ns)
        return Resp({})

    def create_namespaced_pod_eviction(self, name, ns, body, _preload_content=True, dry_run=None):
        """As the eviction subresource: 404 for a missing pod; Pending/finished/terminating pods go
        without any PDB check; 500 when more than one PDB covers the pod; an unready pod goes under
        AlwaysAllow or while currentHealthy >= desiredHealthy > 0; else 429 while the PDB's status is
        older than its spec or allows 0 disruptions. disruptionsAllowed is not decremented."""
        pod = next((p for p in self.pods if (p["metadata"]["name"], p["metadata"]["namespace"]) == (name, ns)), None)
        if pod is None:
            raise ApiException(status=404, reason="Not Found")
        verdict = eviction_answer(pod, [p for p in self.pdbs if p["metadata"]["namespace"] == ns])
        if verdict == 500:
            exc = ApiException(status=500, reason="Internal Server Error")
            exc.body = json.dumps(
                {
                    "message": "This pod has more than one PodDisruptionBudget, which the eviction "
                    "subresource does not support."
                }
            )
            raise exc
        if verdict == 403:
            exc = ApiException(status=403, reason="Forbidden")
            exc.body = json.dumps({"message": "pdb disruptions allowed is negative"})
            raise exc
        if verdict == 429:
            exc = ApiException(status=429, reason="Too Many Requests")
            exc.body = json.dumps({"message": "Cannot evict pod as it would violate the pod's disruption budget."})
            raise exc
        if dry_run:
            return Resp({})
        self.writes += 1
        self._remove(name, ns)
        return Resp({})

    # -- PolicyV1Api --
    def list_pod_disruption_budget_for_all_namespaces(self, _preload_content=True, **_):
        return Resp({"items": self.pdbs, "metadata": {"resourceVersion": "1"}})


class FakeLeases:
    """CoordinationV1Api for Leases with the apiserver's optimistic concurrency: create answers 409
    when the Lease exists, replace answers 409 when metadata.resourceVersion is not the current one."""

    def __init__(self):
        self.leases: dict = {}
        self.rv = 0

    def read_namespaced_lease(self, name, namespace, _preload_content=True):
        if (namespace, name) not in self.leases:
            raise ApiException(status=404, reason="Not Found")
        return Resp(self.leases[(namespace, name)])

    def create_namespaced_lease(self, namespace, body, _preload_content=True):
        key = (namespace, body["metadata"]["name"])
        if key in self.leases:
            raise ApiException(status=409, reason="AlreadyExists")
        self.rv += 1
        obj = copy.deepcopy(body)
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.leases[key] = obj
        return Resp(obj)

    def replace_namespaced_lease(self, name, namespace, body, _preload_content=True):
        cur = self.leases.get((namespace, name))
        if cur is None:
            raise ApiException(status=404, reason="Not Found")
        if body["metadata"].get("resourceVersion") != cur["metadata"]["resourceVersion"]:
            raise ApiException(status=409, reason="Conflict")
        self.rv += 1
        obj = copy.deepcopy(body)
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.leases[(namespace, name)] = obj
        return Resp(obj)
