# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Workload compatibility of a planned change: which workloads lose or gain nodes they can run on.

A planned change moves nodes to another driver version (and optionally kernel release and OS). The
nodes' feature-discovery labels change with it - GFD's ``nvidia.com/cuda.driver.*`` (or the vendor
profile's driver-version labels), NFD's ``feature.node.kubernetes.io/kernel-version.*`` and
``system-os_release.*`` - and a workload that pins the old driver with required node affinity
(``nvidia.com/cuda.driver.major In [550]``) has fewer or no nodes left, while one that needs a newer
driver (``Gt 560``) gains them. Pure functions over the API's JSON dicts; node_affinity.py matches.

Labels after the change (:func:`labels_after`): the label keys the node already has are rewritten
(feature discovery publishes on the node what it published before); a node without
any of the vendor's driver-version labels gets the profile's primary set, as feature discovery
starts publishing once a driver runs. Kernel and OS keys are rewritten only where present.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, Optional

from ansible_collections.npuops.fleet.plugins.module_utils.fleet.node_affinity import NodeConstraints, project
from ansible_collections.npuops.fleet.plugins.module_utils.node_facts import FACT_LABELS

# NFD's kernel and OS labels besides the ones node_facts reads (same prefix, published together)
_NFD = "feature.node.kubernetes.io/"
KERNEL_PART_LABELS = {p: _NFD + "kernel-version." + p for p in ("major", "minor", "revision")}
OS_VERSION_PART_LABELS = {p: FACT_LABELS["os_version_id"] + "." + p for p in ("major", "minor")}
VERDICTS = ("stranded", "loses-nodes", "gains-nodes", "moves-nodes", "unschedulable-already", "unaffected")
_TERMINAL = ("Succeeded", "Failed")
NAMES_SHOWN = 20  # node and pod names listed per workload; the counts are always complete


class ChangeError(ValueError):
    """A planned change that cannot be applied (names the node and the key)."""


def _set_version(labels: dict, keys: Mapping[str, str], version: str, only_present: bool) -> None:
    parts = version.split(".")
    for part, key in keys.items():
        if only_present and key not in labels:
            continue
        if part == "full":
            labels[key] = version
        elif part == "major":
            labels[key] = parts[0]
        elif part == "minor":
            if len(parts) > 1:
                labels[key] = parts[1]
            else:
                labels.pop(key, None)
        elif part in ("rev", "revision", "patch"):
            # GFD publishes no .rev for a two-part version (470.57)
            if len(parts) > 2:
                labels[key] = ".".join(parts[2:])
            else:
                labels.pop(key, None)


def labels_after(labels: Mapping[str, str], change: Mapping[str, Any], profile: Mapping[str, Any]) -> dict[str, str]:
    """The node's labels once ``change`` (``driver_version``, optional ``kernel_release``, ``os_id``,
    ``os_version_id``) is done and feature discovery has relabelled it. Raises ChangeError."""
    node = change.get("node") or "<node>"
    out = dict(labels)
    version = change.get("driver_version")
    if version:
        if not re.match(r"^[0-9]+(\.[0-9A-Za-z]+)*$", str(version)):
            raise ChangeError("node %s: driver_version %r is not a driver version (550.90.07)" % (node, version))
        sets = [s for s in (profile.get("driver_version_labels"), profile.get("driver_version_labels_alt")) if s]
        present = [s for s in sets if any(k in labels for k in s.values())]
        for keys in present:
            _set_version(out, keys, str(version), only_present=True)
        if not present and sets:
            _set_version(out, sets[0], str(version), only_present=False)
    kernel = change.get("kernel_release")
    if kernel:
        m = re.match(r"^([0-9]+)\.([0-9]+)\.([0-9]+)", str(kernel))
        if not m:
            raise ChangeError("node %s: kernel_release %r is not a kernel release (6.8.0-52-generic)" % (node, kernel))
        if FACT_LABELS["kernel"] in labels:
            out[FACT_LABELS["kernel"]] = str(kernel)
        for i, part in enumerate(("major", "minor", "revision")):
            if KERNEL_PART_LABELS[part] in labels:
                out[KERNEL_PART_LABELS[part]] = m.group(i + 1)
    if change.get("os_id") and FACT_LABELS["os_id"] in labels:
        out[FACT_LABELS["os_id"]] = str(change["os_id"])
    os_version = change.get("os_version_id")
    if os_version:
        os_version = str(os_version)
        if FACT_LABELS["os_version_id"] in labels:
            out[FACT_LABELS["os_version_id"]] = os_version
        parts = os_version.split(".")
        for i, part in enumerate(("major", "minor")):
            key = OS_VERSION_PART_LABELS[part]
            if key in labels:
                if len(parts) > i:
                    out[key] = parts[i]
                else:
                    out.pop(key, None)
    return out


# --- workloads -------------------------------------------------------------------------------------


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _controller(obj: Mapping[str, Any]) -> Optional[Mapping[str, Any]]:
    for ref in _meta(obj).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref
    return None


def _job_replicas(job: Mapping[str, Any]) -> int:
    spec, status = job.get("spec") or {}, job.get("status") or {}
    if spec.get("suspend"):
        return 0
    for cond in status.get("conditions") or []:
        if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True":
            return 0
    parallelism = spec.get("parallelism", 1)
    completions = spec.get("completions")
    if completions is not None:
        parallelism = min(parallelism, max(completions - (status.get("succeeded") or 0), 0))
    return int(parallelism)


def collect_workloads(
    pods: Iterable[Mapping[str, Any]],
    deployments: Iterable[Mapping[str, Any]] = (),
    statefulsets: Iterable[Mapping[str, Any]] = (),
    jobs: Iterable[Mapping[str, Any]] = (),
    replicasets: Iterable[Mapping[str, Any]] = (),
) -> list[dict[str, Any]]:
    """One entry per workload: ``{kind, namespace, name, replicas, spec, pods}``.

    Deployments, StatefulSets and Jobs are judged by their pod template and desired pods (``replicas``:
    spec.replicas, default 1; a Job's pods still to run: parallelism capped by the completions left, 0
    when finished or suspended). A pod belongs to its controller (ReplicaSet -> Deployment through the
    ReplicaSets' owners); a pod without one is a bare pod (replicas 1); a pod owned by another kind
    (a custom controller) makes that owner a workload judged by its pods. DaemonSet pods are left out:
    their controller places one per node and follows the labels itself. Terminal pods are left out.
    """
    work: dict[tuple, dict[str, Any]] = {}
    by_uid: dict[str, tuple] = {}

    def add(kind: str, obj: Mapping[str, Any], replicas: int, spec: Optional[Mapping[str, Any]]) -> tuple:
        meta = _meta(obj)
        key = (kind, meta.get("namespace") or "", meta.get("name") or "")
        work[key] = {"kind": kind, "namespace": key[1], "name": key[2], "replicas": replicas, "spec": spec, "pods": []}
        if meta.get("uid"):
            by_uid[meta["uid"]] = key
        return key

    for kind, objs in (("Deployment", deployments), ("StatefulSet", statefulsets)):
        for obj in objs:
            spec = obj.get("spec") or {}
            add(kind, obj, int(spec.get("replicas", 1)), (spec.get("template") or {}).get("spec"))
    for obj in jobs:
        add("Job", obj, _job_replicas(obj), ((obj.get("spec") or {}).get("template") or {}).get("spec"))
    rs_owner: dict[str, Optional[tuple]] = {}
    for rs in replicasets:
        ref = _controller(rs)
        uid = _meta(rs).get("uid")
        if ref and ref.get("uid") in by_uid:
            rs_owner[uid] = by_uid[ref["uid"]]
        elif not ref:
            spec = rs.get("spec") or {}
            rs_owner[uid] = add(
                "ReplicaSet", rs, int(spec.get("replicas", 1)), (spec.get("template") or {}).get("spec")
            )
    for pod in pods:
        meta = _meta(pod)
        if (pod.get("status") or {}).get("phase") in _TERMINAL:
            continue
        ref = _controller(pod)
        key = None
        if ref is None:
            key = add("Pod", pod, 1, pod.get("spec"))
        elif ref.get("kind") == "DaemonSet":
            continue
        elif ref.get("uid") in rs_owner:
            key = rs_owner[ref["uid"]]
        elif ref.get("uid") in by_uid:
            key = by_uid[ref["uid"]]
        else:
            key = (ref.get("kind") or "Unknown", meta.get("namespace") or "", ref.get("name") or "")
            if key not in work:
                work[key] = {
                    "kind": key[0],
                    "namespace": key[1],
                    "name": key[2],
                    "replicas": 0,
                    "spec": pod.get("spec"),
                    "pods": [],
                }
                if ref.get("uid"):
                    by_uid[ref["uid"]] = key
            work[key]["replicas"] += 1
        if key is not None:
            work[key]["pods"].append(pod)
    return list(work.values())


# --- evaluation ------------------------------------------------------------------------------------


class _NodeIndex:
    """Nodes grouped by their labels projected onto the keys the constraints read, so that each
    distinct constraint is matched once per label class, not once per node (5,000 nodes x thousands
    of workloads)."""

    def __init__(self, labels_by_node: Mapping[str, Mapping[str, str]], keys: set[str]):
        self.labels = labels_by_node
        self.classes: dict[tuple, list[str]] = {}
        self.class_of: dict[str, tuple] = {}
        for name, labels in labels_by_node.items():
            cls = project(labels, keys)
            self.classes.setdefault(cls, []).append(name)
            self.class_of[name] = cls

    def fits(self, c: NodeConstraints, cache: dict, name: str) -> bool:
        if c.uses_node_name:
            return c.matches(self.labels[name], name)
        cls = self.class_of[name]
        key = (c.signature(), cls)
        if key not in cache:
            cache[key] = c.matches(dict(cls))
        return cache[key]

    def count(self, c: NodeConstraints, cache: dict) -> int:
        if c.uses_node_name:
            return sum(1 for n, lab in self.labels.items() if c.matches(lab, n))
        total = 0
        sig = c.signature()
        for cls, names in self.classes.items():
            key = (sig, cls)
            if key not in cache:
                cache[key] = c.matches(dict(cls))
            if cache[key]:
                total += len(names)
        return total


def _node_labels(node: Mapping[str, Any]) -> dict[str, str]:
    return dict(_meta(node).get("labels") or {})


def evaluate(
    nodes: Iterable[Mapping[str, Any]],
    changes: Mapping[str, Mapping[str, Any]],
    workloads: Iterable[Mapping[str, Any]],
    profiles: Mapping[str, Mapping[str, Any]],
) -> dict[str, Any]:
    """Report of a planned change. ``changes``: node name -> change (``vendor`` selects the profile in
    ``profiles``); ``workloads``: :func:`collect_workloads`. Raises ChangeError (unknown node, vendor).

    Returns ``{"workloads": [...], "stranded": ["Kind ns/name", ...], "counts": {verdict: n},
    "nodes": n, "nodes_changed": n, "pods_on_unfit_nodes": n}``; per workload (only those whose
    constraints read a label and whose verdict is not ``unaffected``): ``kind, namespace, name,
    replicas, constraints`` (text), ``eligible_now, eligible_after`` (node counts), ``nodes_lost,
    nodes_gained`` (changed nodes that stop / start fitting: count and up to 20 names),
    ``unschedulable_replicas`` (desired pods with no node left), ``pods_on_unfit_nodes`` (running pods
    whose planned node would no longer admit them: the drain evicts them and they cannot come back),
    ``verdict`` (one of VERDICTS: stranded = nodes now, none after).
    """
    now = {}
    for node in nodes:
        now[_meta(node).get("name")] = _node_labels(node)
    after = dict(now)
    for name, change in changes.items():
        if name not in now:
            raise ChangeError("planned node %s is not a Node of the cluster" % name)
        vendor = change.get("vendor") or "nvidia"
        if vendor not in profiles:
            raise ChangeError("node %s: unknown vendor %r (profiles: %s)" % (name, vendor, ", ".join(sorted(profiles))))
        after[name] = labels_after(now[name], dict(change, node=name), profiles[vendor])

    loaded = [(w, NodeConstraints(w.get("spec"))) for w in workloads]
    keys: set[str] = set()
    for _w, c in loaded:
        keys |= c.label_keys()
    idx_now, idx_after = _NodeIndex(now, keys), _NodeIndex(after, keys)
    cache_now: dict = {}
    cache_after: dict = {}
    changed = sorted(changes)
    rows: list[dict[str, Any]] = []
    counts = {v: 0 for v in VERDICTS}
    counts["unconstrained"] = 0
    pods_unfit_total = 0
    per_sig: dict[str, tuple] = {}
    for w, c in loaded:
        if c.empty:
            counts["unconstrained"] += 1
            continue
        sig = c.signature()
        if sig not in per_sig:
            lost = [n for n in changed if idx_now.fits(c, cache_now, n) and not idx_after.fits(c, cache_after, n)]
            gained = [n for n in changed if not idx_now.fits(c, cache_now, n) and idx_after.fits(c, cache_after, n)]
            per_sig[sig] = (idx_now.count(c, cache_now), idx_after.count(c, cache_after), lost, gained)
        n_now, n_after, lost, gained = per_sig[sig]
        unfit = []
        for pod in w.get("pods") or []:
            node = (pod.get("spec") or {}).get("nodeName")
            if node in changes:
                pc = NodeConstraints(pod.get("spec"))
                if not pc.empty and not idx_after.fits(pc, cache_after, node):
                    unfit.append({"pod": _meta(pod).get("name"), "node": node})
        replicas = int(w.get("replicas") or 0)
        if n_after == 0 and n_now == 0:
            verdict = "unschedulable-already"
        elif n_after == 0:
            verdict = "stranded"
        elif lost and gained:
            verdict = "moves-nodes"
        elif lost:
            verdict = "loses-nodes"
        elif gained:
            verdict = "gains-nodes"
        else:
            verdict = "unaffected"
        if unfit and verdict == "unaffected":
            verdict = "moves-nodes"  # the pods' own spec differs from the template (a rollout)
        counts[verdict] += 1
        pods_unfit_total += len(unfit)
        if verdict == "unaffected":
            continue
        rows.append(
            {
                "kind": w["kind"],
                "namespace": w["namespace"],
                "name": w["name"],
                "replicas": replicas,
                "constraints": c.describe(),
                "eligible_now": n_now,
                "eligible_after": n_after,
                "nodes_lost": {"count": len(lost), "names": lost[:NAMES_SHOWN]},
                "nodes_gained": {"count": len(gained), "names": gained[:NAMES_SHOWN]},
                "unschedulable_replicas": replicas if verdict == "stranded" else 0,
                "pods_on_unfit_nodes": {"count": len(unfit), "pods": unfit[:NAMES_SHOWN]},
                "verdict": verdict,
            }
        )
    order = {v: i for i, v in enumerate(VERDICTS)}
    rows.sort(key=lambda r: (order[r["verdict"]], r["namespace"], r["kind"], r["name"]))
    stranded = [
        "%s %s/%s" % (r["kind"], r["namespace"], r["name"])
        for r in rows
        if r["verdict"] == "stranded" and r["replicas"] > 0
    ]
    return {
        "workloads": rows,
        "stranded": stranded,
        "counts": counts,
        "nodes": len(now),
        "nodes_changed": len(changes),
        "pods_on_unfit_nodes": pods_unfit_total,
    }


def summary_lines(report: Mapping[str, Any]) -> list[str]:
    """One line per reported workload, for the playbook's output and the plan."""
    lines = []
    for r in report.get("workloads") or []:
        line = "%s %s/%s (%s): %s, eligible nodes %d -> %d" % (
            r["kind"],
            r["namespace"],
            r["name"],
            r["constraints"],
            r["verdict"],
            r["eligible_now"],
            r["eligible_after"],
        )
        if r["unschedulable_replicas"]:
            line += ", %d replica(s) would be unschedulable" % r["unschedulable_replicas"]
        if r["pods_on_unfit_nodes"]["count"]:
            line += ", %d running pod(s) on nodes they would no longer fit" % r["pods_on_unfit_nodes"]["count"]
        lines.append(line)
    return lines
