# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
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

import json
import re
from typing import Any, Iterable, Mapping, Optional, cast

from ansible_collections.npuops.fleet.plugins.module_utils.driver.node_labels import FACT_LABELS
from ansible_collections.npuops.fleet.plugins.module_utils.errors import FleetError
from ansible_collections.npuops.fleet.plugins.module_utils.fleet.node_affinity import (
    UNSCHEDULABLE_TAINT,
    NodeConstraints,
    project,
    taints_admit,
)

# NFD's kernel and OS labels besides the ones node_facts reads (same prefix, published together)
_NFD = "feature.node.kubernetes.io/"
KERNEL_PART_LABELS = {p: _NFD + "kernel-version." + p for p in ("major", "minor", "revision")}
OS_VERSION_PART_LABELS = {p: FACT_LABELS["os_version_id"] + "." + p for p in ("major", "minor")}
# severity order: the first ones stop a window in refuse mode
VERDICTS = (
    "stranded",
    "unpredictable",
    "loses-nodes",
    "moves-nodes",
    "gains-nodes",
    "unschedulable-already",
    "unaffected",
)
_TERMINAL = ("Succeeded", "Failed")
# GFD's CUDA labels: the CUDA version the driver supports (cudaDriverGetVersion), which moves with the
# driver branch. Branch -> CUDA major.minor from NVIDIA's CUDA Toolkit release notes (table "CUDA
# Toolkit and Corresponding Driver Versions"); a branch not listed makes these labels unpredictable.
CUDA_RUNTIME_LABELS = {
    "nvidia.com/cuda.runtime.major": "major",
    "nvidia.com/cuda.runtime.minor": "minor",
    "nvidia.com/cuda.runtime-version.major": "major",
    "nvidia.com/cuda.runtime-version.minor": "minor",
    "nvidia.com/cuda.runtime-version.full": "full",
}
CUDA_BY_BRANCH = {
    "450": "11.0", "455": "11.1", "460": "11.2", "465": "11.3", "470": "11.4", "495": "11.5",
    "510": "11.6", "515": "11.7", "520": "11.8", "525": "12.0", "530": "12.1", "535": "12.2",
    "545": "12.3", "550": "12.4", "555": "12.5", "560": "12.6", "565": "12.7", "570": "12.8",
    "575": "12.9", "580": "13.0",
}  # fmt: skip
_JOB_DONE = ("Complete", "Failed", "FailureTarget", "SuccessCriteriaMet")
NAMES_SHOWN = 20  # node and pod names listed per workload; the counts are always complete


class ChangeError(ValueError, FleetError):
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
            # GFD publishes an empty .rev for a two-part version (470.57)
            labels[key] = ".".join(parts[2:])


def unpredictable_keys(labels: Mapping[str, str], change: Mapping[str, Any]) -> set[str]:
    """Label keys of the node whose value after ``change`` cannot be known: GFD's CUDA labels for a
    driver branch that CUDA_BY_BRANCH does not list."""
    version = change.get("driver_version")
    if not version or str(version).split(".", maxsplit=1)[0] in CUDA_BY_BRANCH:
        return set()
    return {k for k in CUDA_RUNTIME_LABELS if k in labels}


def labels_after(labels: Mapping[str, str], change: Mapping[str, Any], profile: Mapping[str, Any]) -> dict[str, str]:
    """The node's labels once ``change`` (``driver_version``, optional ``kernel_release``, ``os_id``,
    ``os_version_id``) is done and feature discovery has relabelled it: the driver-version labels
    and GFD's CUDA labels (CUDA_BY_BRANCH), NFD's kernel and OS labels. Raises ChangeError."""
    node = change.get("node") or "<node>"
    out = dict(labels)
    version = change.get("driver_version")
    if version:
        if not re.match(r"^[0-9]+(\.[0-9A-Za-z]+)+$", str(version)):
            raise ChangeError(
                "node %s: driver_version %r is not a full driver version (for example 550.90.07)" % (node, version)
            )
        sets = [s for s in (profile.get("driver_version_labels"), profile.get("driver_version_labels_alt")) if s]
        present = [s for s in sets if any(k in labels for k in s.values())]
        for keys in present:
            _set_version(out, keys, str(version), only_present=True)
        # a node without them: feature discovery publishes every set once the driver runs
        for keys in sets if not present else ():
            _set_version(out, keys, str(version), only_present=False)
        cuda = CUDA_BY_BRANCH.get(str(version).split(".", maxsplit=1)[0])
        for key, part in CUDA_RUNTIME_LABELS.items():
            if key in labels and cuda:
                out[key] = cuda if part == "full" else cuda.split(".")[0 if part == "major" else 1]
    kernel = change.get("kernel_release")
    if kernel:
        m = re.match(r"^([0-9]+)\.([0-9]+)\.([0-9]+)", str(kernel))
        if not m:
            raise ChangeError(
                "node %s: kernel_release %r is not a kernel release (for example 6.8.0-52-generic)" % (node, kernel)
            )
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
        if cond.get("type") in _JOB_DONE and cond.get("status") == "True":
            return 0
    parallelism = spec.get("parallelism", 1)
    completions = spec.get("completions")
    if completions is not None:
        parallelism = min(parallelism, max(completions - (status.get("succeeded") or 0), 0))
    elif status.get("succeeded"):
        # a work-queue Job (no completions) starts no pod once one succeeded: only the active ones
        parallelism = min(parallelism, status.get("active") or 0)
    return int(parallelism)


def collect_workloads(
    pods: Iterable[Mapping[str, Any]],
    deployments: Iterable[Mapping[str, Any]] = (),
    statefulsets: Iterable[Mapping[str, Any]] = (),
    jobs: Iterable[Mapping[str, Any]] = (),
    replicasets: Iterable[Mapping[str, Any]] = (),
    cronjobs: Iterable[Mapping[str, Any]] = (),
) -> list[dict[str, Any]]:
    """One entry per workload: ``{kind, namespace, name, replicas, spec, pods, by_pods}``.

    Deployments, StatefulSets and Jobs are judged by their pod template and desired pods (``replicas``:
    spec.replicas, default 1; a Job's pods still to run: parallelism capped by the completions left, 0
    when finished or suspended). A pod belongs to its controller (ReplicaSet -> Deployment through the
    ReplicaSets' owners); a pod without one is a bare pod (replicas 1); a pod owned by another kind
    (a custom controller) makes that owner a workload judged by its pods (``by_pods``: every distinct
    constraint among them). A CronJob is judged by its job template (1 pod per run unless parallelism
    says more; 0 when suspended). DaemonSet pods are left out: their controller places one per node
    and follows the labels itself. Terminal and terminating pods are left out.
    """
    work: dict[tuple, dict[str, Any]] = {}
    by_uid: dict[str, tuple] = {}

    def add(kind: str, obj: Mapping[str, Any], replicas: int, spec: Optional[Mapping[str, Any]]) -> tuple:
        meta = _meta(obj)
        key = (kind, meta.get("namespace") or "", meta.get("name") or "")
        work[key] = {
            "kind": kind,
            "namespace": key[1],
            "name": key[2],
            "replicas": replicas,
            "spec": spec,
            "pods": [],
            "by_pods": kind == "Pod",
        }
        if meta.get("uid"):
            by_uid[meta["uid"]] = key
        return key

    for kind, objs in (("Deployment", deployments), ("StatefulSet", statefulsets)):
        for obj in objs:
            spec = obj.get("spec") or {}
            add(kind, obj, int(spec.get("replicas", 1)), (spec.get("template") or {}).get("spec"))
    for obj in jobs:
        add("Job", obj, _job_replicas(obj), ((obj.get("spec") or {}).get("template") or {}).get("spec"))
    for obj in cronjobs:
        spec = obj.get("spec") or {}
        job_spec = (spec.get("jobTemplate") or {}).get("spec") or {}
        runs = 0 if spec.get("suspend") else int(job_spec.get("parallelism", 1))
        add("CronJob", obj, runs, (job_spec.get("template") or {}).get("spec"))
    rs_owner: dict[Optional[str], Optional[tuple]] = {}  # a ReplicaSet without a uid goes by None
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
        if (pod.get("status") or {}).get("phase") in _TERMINAL or meta.get("deletionTimestamp"):
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
                    "by_pods": True,
                }
                if ref.get("uid"):
                    by_uid[ref["uid"]] = key
            work[key]["replicas"] += 1
        if key is not None:
            work[key]["pods"].append(pod)
    return list(work.values())


# --- evaluation ------------------------------------------------------------------------------------


def _node_labels(node: Mapping[str, Any]) -> dict[str, str]:
    return dict(_meta(node).get("labels") or {})


class _Fleet:
    """One side of the change (now or after): each node's labels and taints (and cordon), and two ways
    to find a constraint's nodes without matching it against every node - an index of (key, value) ->
    nodes for constraints bounded by In / nodeSelector / matchFields (a hostname pin reads one node,
    not 5,000), else nodes grouped by their values of the constraint's own keys (a driver-branch pin is
    matched once per distinct label combination). Taints are judged once per distinct taint set."""

    def __init__(self, labels_by_node: Mapping[str, Mapping[str, str]], taints_by_node: Mapping[str, tuple]):
        self.labels = labels_by_node
        self.taints = taints_by_node  # name -> (taints as canonical JSON, cordoned)
        self.index: dict[tuple, set[str]] = {}
        for name, labels in labels_by_node.items():
            for kv in labels.items():
                self.index.setdefault(kv, set()).add(name)
        self._groups: dict[frozenset, dict[tuple, list[str]]] = {}
        self._fits: dict[tuple, bool] = {}
        self._admits: dict[tuple, bool] = {}
        self._eligible: dict[str, frozenset] = {}

    def admits(self, c: NodeConstraints, name: str) -> bool:
        """The node's taints and cordon let the pod land (TaintToleration, NodeUnschedulable)."""
        taints, cordoned = self.taints[name]
        key = (c.tolerations_key, taints, cordoned)
        if key not in self._admits:
            self._admits[key] = taints_admit(c.tolerations, json.loads(taints), cordoned)
        return self._admits[key]

    def _bound(self, c: NodeConstraints) -> Optional[set[str]]:
        """A superset of the nodes the constraint admits, or None when nothing bounds it."""
        bound: Optional[set[str]] = None
        for kv in c.node_selector.items():
            nodes = self.index.get(kv, set())
            bound = set(nodes) if bound is None else bound & nodes
        if c.terms is not None:
            union: set[str] = set()
            unbounded = False  # a term with no In requirement: any node may match it
            for term in c.terms:
                t: Optional[set[str]] = None
                for r in term.get("matchExpressions") or []:
                    if r.get("operator") == "In" and r.get("values"):
                        nodes = set().union(*(self.index.get((r.get("key"), v), set()) for v in r["values"]))
                        t = nodes if t is None else t & nodes
                for r in term.get("matchFields") or []:
                    if r.get("key") == "metadata.name" and r.get("operator") == "In":
                        nodes = {v for v in r.get("values") or [] if v in self.labels}
                        t = nodes if t is None else t & nodes
                if t is None:
                    unbounded = True
                    break
                union |= t
            if not unbounded:
                bound = union if bound is None else bound & union
        return bound

    def fits(self, c: NodeConstraints, name: str) -> bool:
        """The node's labels admit the constraint (schedulability aside)."""
        if c.uses_node_name:
            return c.matches(self.labels[name], name)
        key = (c.signature(), project(self.labels[name], c.label_keys()))
        if key not in self._fits:
            self._fits[key] = c.matches(dict(key[1]))
        return self._fits[key]

    def eligible(self, c: NodeConstraints) -> frozenset:
        """The nodes whose labels admit the constraint and whose taints and cordon let the pod land."""
        sig = c.signature()
        if sig in self._eligible:
            return self._eligible[sig]
        bound = self._bound(c)
        if bound is not None:
            res = frozenset(n for n in bound if self.fits(c, n) and self.admits(c, n))
        elif c.uses_node_name:
            res = frozenset(n for n in self.labels if c.matches(self.labels[n], n) and self.admits(c, n))
        else:
            keys = frozenset(c.label_keys())
            if keys not in self._groups:
                groups: dict[tuple, list[str]] = {}
                for n in self.labels:
                    groups.setdefault(project(self.labels[n], keys), []).append(n)
                self._groups[keys] = groups
            res = frozenset(n for cls, names in self._groups[keys].items() if c.matches(dict(cls)) for n in names)
        self._eligible[sig] = res
        return res


def _judge(c: NodeConstraints, now: _Fleet, after: _Fleet, unknown: set[str]) -> dict[str, Any]:
    e_now, e_after = now.eligible(c), after.eligible(c)
    lost, gained = sorted(e_now - e_after), sorted(e_after - e_now)
    if c.label_keys() & unknown:
        verdict = "unpredictable"
    elif not e_now and not e_after:
        verdict = "unschedulable-already"
    elif not e_after:
        verdict = "stranded"
    elif lost and gained:
        verdict = "moves-nodes"
    elif lost:
        verdict = "loses-nodes"
    elif gained:
        verdict = "gains-nodes"
    else:
        verdict = "unaffected"
    return {"c": c, "now": len(e_now), "after": len(e_after), "lost": lost, "gained": gained, "verdict": verdict}


def evaluate(
    nodes: Iterable[Mapping[str, Any]],
    changes: Mapping[str, Mapping[str, Any]],
    workloads: Iterable[Mapping[str, Any]],
    profiles: Mapping[str, Mapping[str, Any]],
) -> dict[str, Any]:
    """Report of a planned change. ``changes``: node name -> change (``vendor`` selects the profile in
    ``profiles``); ``workloads``: :func:`collect_workloads`. Raises ChangeError (unknown node, vendor).

    Eligible nodes are the nodes whose labels admit the workload and whose taints and cordon let its
    pods land (node_affinity.taints_admit; NotReady nodes carry the lifecycle controller's taints).
    After the change the planned nodes are uncordoned (the window uncordons them, and drops the
    ``node.kubernetes.io/unschedulable`` taint with the cordon); every other taint stays.

    Returns ``{"workloads": [...], "stranded": [...], "unpredictable": [...], "counts": {verdict: n},
    "nodes": n, "nodes_changed": n, "pods_on_unfit_nodes": n}``. ``stranded`` / ``unpredictable``:
    ``Kind ns/name`` of workloads with desired pods (bare pods left out: nothing recreates them, the
    drain removes them either way) that would have no node left / whose constraints read a label
    the change makes unknowable (unpredictable_keys). Per workload (only those whose verdict is not
    ``unaffected``): ``kind, namespace, name, replicas, constraints`` (text), ``eligible_now,
    eligible_after`` (node counts), ``nodes_lost, nodes_gained`` (count and up to 20 names),
    (``unschedulable-already`` ones are only counted: no node now or after),
    ``unschedulable_replicas`` (desired pods with no node left), ``pods_on_unfit_nodes`` (running pods
    whose planned node would no longer admit them: the drain evicts them and they cannot come back),
    ``verdict`` (VERDICTS, most severe first; a workload judged by its pods takes its worst).
    """
    now: dict[str, dict] = {}
    taints_now: dict[str, tuple] = {}
    taints_after: dict[str, tuple] = {}
    for node in nodes:
        name = cast(str, _meta(node).get("name"))  # the API server names every Node
        now[name] = _node_labels(node)
        spec = node.get("spec") or {}
        taints = [{k: t.get(k) or "" for k in ("key", "value", "effect")} for t in spec.get("taints") or []]
        taints_now[name] = (json.dumps(taints, sort_keys=True), bool(spec.get("unschedulable")))
        uncordoned = [t for t in taints if t["key"] != UNSCHEDULABLE_TAINT["key"]]
        taints_after[name] = (json.dumps(uncordoned, sort_keys=True), False)
    after = dict(now)
    unknown: set[str] = set()
    for name, change in changes.items():
        if name not in now:
            raise ChangeError("planned node %s is not a Node of the cluster" % name)
        vendor = change.get("vendor") or "nvidia"
        if vendor not in profiles:
            raise ChangeError("node %s: unknown vendor %r (profiles: %s)" % (name, vendor, ", ".join(sorted(profiles))))
        presence = profiles[vendor].get("presence_label")
        if presence and now[name].get(presence) != "true":
            raise ChangeError(
                'node %s is not a %s node (label %s is %r, not "true")'
                % (name, vendor, presence, now[name].get(presence))
            )
        after[name] = labels_after(now[name], dict(change, node=name), profiles[vendor])
        unknown |= unpredictable_keys(now[name], change)
    f_now = _Fleet(now, taints_now)
    f_after = _Fleet(after, {n: taints_after[n] if n in changes else taints_now[n] for n in now})
    judged: dict[str, dict] = {}
    rows: list[dict[str, Any]] = []
    counts = {v: 0 for v in VERDICTS}
    counts["unconstrained"] = 0
    order = {v: i for i, v in enumerate(VERDICTS)}
    pods_unfit_total = 0
    for w in workloads:
        specs = [p.get("spec") for p in w.get("pods") or []] if w.get("by_pods") else [w.get("spec")]
        constraints: dict[str, NodeConstraints] = {}
        for spec in specs or [None]:
            c = NodeConstraints(spec)
            constraints.setdefault(c.signature(), c)
        results = []
        for sig, c in constraints.items():
            if not c.empty:
                if sig not in judged:
                    judged[sig] = _judge(c, f_now, f_after, unknown)
                results.append(judged[sig])
        unfit = []
        for pod in w.get("pods") or []:
            node_name = (pod.get("spec") or {}).get("nodeName")
            if node_name is not None and node_name in changes:
                pc = NodeConstraints(pod.get("spec"))
                # fits there now and not after: a pod that already does not match (labels changed
                # under it, IgnoredDuringExecution) is not the change's doing
                if not pc.empty and f_now.fits(pc, node_name) and not f_after.fits(pc, node_name):
                    unfit.append({"pod": _meta(pod).get("name"), "node": node_name})
        if not results:
            counts["unconstrained"] += 1
            if not unfit:
                continue
            # the template reads no label, but pods of an earlier revision do
            results = [{"c": NodeConstraints(None), "now": 0, "after": 0, "lost": [], "gained": [],
                        "verdict": "unaffected"}]  # fmt: skip
        r = min(results, key=lambda x: order[x["verdict"]])
        verdict = r["verdict"]
        if unfit and verdict == "unaffected":
            verdict = "moves-nodes"  # the pods' own spec differs from the template (a rollout)
        counts[verdict] += 1
        pods_unfit_total += len(unfit)
        if verdict in ("unaffected", "unschedulable-already"):
            continue  # the same answer after the change (no node either way): counted, not listed
        replicas = int(w.get("replicas") or 0)
        rows.append(
            {
                "kind": w["kind"],
                "namespace": w["namespace"],
                "name": w["name"],
                "replicas": replicas,
                "constraints": r["c"].describe(),
                "eligible_now": r["now"],
                "eligible_after": r["after"],
                "nodes_lost": {"count": len(r["lost"]), "names": r["lost"][:NAMES_SHOWN]},
                "nodes_gained": {"count": len(r["gained"]), "names": r["gained"][:NAMES_SHOWN]},
                "unschedulable_replicas": replicas if verdict == "stranded" else 0,
                "pods_on_unfit_nodes": {"count": len(unfit), "pods": unfit[:NAMES_SHOWN]},
                "verdict": verdict,
            }
        )
    rows.sort(key=lambda r: (order[r["verdict"]], r["namespace"], r["kind"], r["name"]))

    def named(verdict):
        return [
            "%s %s/%s" % (r["kind"], r["namespace"], r["name"])
            for r in rows
            if r["verdict"] == verdict and r["replicas"] > 0 and r["kind"] != "Pod"
        ]

    return {
        "workloads": rows,
        "stranded": named("stranded"),
        "unpredictable": named("unpredictable"),
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


def refusal(report: Mapping[str, Any]) -> Optional[str]:
    """Why a window must not start (stranded or unpredictable workloads), or None."""
    parts = []
    lines = summary_lines(report)
    if report.get("stranded"):
        parts.append(
            "%d workload(s) would have no node left after the change: %s"
            % (len(report["stranded"]), "; ".join(x for x in lines if ": stranded," in x and not x.startswith("Pod ")))
        )
    if report.get("unpredictable"):
        parts.append(
            "%d workload(s) read labels whose value after the change is unknown (a driver branch the "
            "CUDA table does not list): %s" % (len(report["unpredictable"]), ", ".join(report["unpredictable"]))
        )
    return "; ".join(parts) or None
