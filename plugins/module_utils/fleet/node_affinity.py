# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""A pod's node constraints, matched against a node's labels the way kube-scheduler matches them.

Two of the scheduler's filters decide whether a node's labels admit a pod (NodeAffinity plugin,
k8s.io/component-helpers/scheduling/corev1/nodeaffinity):

* ``spec.nodeSelector``: every key present with exactly that value.
* ``spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms``:
  the terms are ORed; inside a term ``matchExpressions`` and ``matchFields`` are ANDed; a term with
  neither matches no node, and so does an empty list of terms. Operators (labels.Requirement):

  ============  ==============================================================================
  In            the key is present and its value is one of ``values``
  NotIn         the key is absent, or its value is none of ``values``
  Exists        the key is present (``values`` must be empty)
  DoesNotExist  the key is absent
  Gt / Lt       the key is present, ``values`` is exactly one integer, and the label's value
                parsed as a base-10 int64 is greater / less than it ("07" is 7; "550.90" is not a
                number, so the node does not match)
  ============  ==============================================================================

  ``matchFields`` supports only ``metadata.name`` with In / NotIn (one value).
  A term whose requirement is malformed (unknown operator, Gt with two values) matches no node, as
  the scheduler's lazy-error selector does.

Both must hold, and so must the TaintToleration and NodeUnschedulable filters: every taint of
effect NoSchedule or NoExecute needs a matching toleration (key equal, or empty with Exists; value
equal for Equal; effect equal or empty), and a cordoned node (``spec.unschedulable``) needs a
toleration of ``node.kubernetes.io/unschedulable:NoSchedule``. NotReady and unreachable nodes carry
such taints (the node lifecycle controller adds them). ``preferredDuringScheduling…`` only ranks
nodes; resources and pod (anti-)affinity are other filters: those are not evaluated here.
Inputs are the API's JSON dicts (camelCase keys), as a
LIST with ``_preload_content=False`` returns them.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Mapping, Optional

# One requirement ({key, operator, values}) is evaluated where every label selector is: k8s/selectors.py.
from ansible_collections.npuops.fleet.plugins.module_utils.k8s.selectors import requirement_matches

UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
_FILTERING_EFFECTS = ("NoSchedule", "NoExecute")


def field_matches(name: str, req: Mapping[str, Any]) -> Optional[bool]:
    """One ``matchFields`` requirement against the node's name; None when it is malformed."""
    values = list(req.get("values") or [])
    if req.get("key") != "metadata.name" or req.get("operator") not in ("In", "NotIn") or len(values) != 1:
        return None
    return (name in values) if req["operator"] == "In" else (name not in values)


def term_matches(labels: Mapping[str, str], name: str, term: Mapping[str, Any]) -> bool:
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not exprs and not fields:
        return False
    for req in exprs:
        if requirement_matches(labels, req) is not True:
            return False
    for req in fields:
        if field_matches(name, req) is not True:
            return False
    return True


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """One toleration against one taint (core/v1 Toleration.ToleratesTaint)."""
    if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
        return False
    if toleration.get("key") and toleration.get("key") != taint.get("key"):
        return False
    op = toleration.get("operator") or "Equal"
    if op == "Exists":
        return True
    return op == "Equal" and (toleration.get("value") or "") == (taint.get("value") or "")


def taints_admit(tolerations: Iterable[Mapping[str, Any]], taints: Iterable[Mapping[str, Any]], cordoned: bool) -> bool:
    """The TaintToleration and NodeUnschedulable filters: True when the pod may land on the node."""
    tols = list(tolerations)
    for taint in taints:
        if taint.get("effect") in _FILTERING_EFFECTS and not any(tolerates(t, taint) for t in tols):
            return False
    return not cordoned or any(tolerates(t, UNSCHEDULABLE_TAINT) for t in tols)


class NodeConstraints:
    """The label part of a pod spec's node constraints: ``nodeSelector`` and the required node
    affinity terms. Built from a pod spec dict (a pod's ``spec`` or a template's ``spec``)."""

    def __init__(self, pod_spec: Optional[Mapping[str, Any]]):
        spec = pod_spec or {}
        self.node_selector: dict[str, str] = dict(spec.get("nodeSelector") or {})
        required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        # None: no required affinity (every node passes); []: required with no terms (none passes)
        self.terms: Optional[list] = None if required is None else list(required.get("nodeSelectorTerms") or [])
        self.tolerations: list = list(spec.get("tolerations") or [])
        # canonical once: the taint filter's cache key, looked up once per node per constraint
        self.tolerations_key: str = json.dumps(self.tolerations, sort_keys=True)
        self._signature: Optional[str] = None

    @property
    def empty(self) -> bool:
        """No label constraint: every node's labels admit the pod (tolerations aside)."""
        return not self.node_selector and self.terms is None

    @property
    def uses_node_name(self) -> bool:
        return any(t.get("matchFields") for t in self.terms or [])

    def label_keys(self) -> set[str]:
        """Every label key the constraints read (the only labels that can change the answer)."""
        keys = set(self.node_selector)
        for term in self.terms or []:
            keys.update(r.get("key") for r in term.get("matchExpressions") or [] if r.get("key"))
        return keys

    def signature(self) -> str:
        """A canonical string: two pods with the same signature are admitted by the same nodes."""
        if self._signature is None:
            self._signature = json.dumps(
                [self.node_selector, self.terms, self.tolerations], sort_keys=True, separators=(",", ":")
            )
        return self._signature

    def matches(self, labels: Mapping[str, str], name: str = "") -> bool:
        for key, value in self.node_selector.items():
            if labels.get(key) != value:
                return False
        if self.terms is None:
            return True
        return any(term_matches(labels, name, t) for t in self.terms)

    def describe(self) -> str:
        """``nodeSelector a=b; affinity (x In [550]) or (y Gt 560)`` for a report line."""
        parts = []
        if self.node_selector:
            parts.append("nodeSelector " + ", ".join("%s=%s" % kv for kv in sorted(self.node_selector.items())))
        if self.terms is not None:
            terms = []
            for t in self.terms:
                reqs = [_describe_req(r) for r in t.get("matchExpressions") or []]
                reqs += [_describe_req(r) for r in t.get("matchFields") or []]
                terms.append("(" + " and ".join(reqs or ["nothing"]) + ")")
            parts.append("affinity " + (" or ".join(terms) if terms else "(no terms)"))
        return "; ".join(parts) or "none"


def _describe_req(req: Mapping[str, Any]) -> str:
    values = list(req.get("values") or [])
    tail = " [%s]" % ", ".join(values) if values else ""
    return "%s %s%s" % (req.get("key"), req.get("operator"), tail)


def project(labels: Mapping[str, str], keys: Iterable[str]) -> tuple:
    """The labels restricted to ``keys``, as a hashable tuple (absent keys left out)."""
    return tuple(sorted((k, labels[k]) for k in keys if k in labels))
