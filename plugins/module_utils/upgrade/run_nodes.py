# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""What a maintenance window's run left on the Nodes, and that merged with the processes' summaries (pure).

Several ansible-playbook processes (AWX job slices) share one window, identified by its run id. Every
transition of a node upgrade writes the last-transition annotation (``annotation_key(profile,
"last-transition")``), a JSON object ``{"from", "to", "reason", "at", "run", "run_id"}``. So the Nodes
say which nodes a run touched and where each one stands, even for a process that died before writing
its summary:

* :func:`run_rows`: the Nodes (raw API dicts) whose last transition belongs to a run id, one row each.
* :func:`merge_rows`: the processes' summaries (their ``hosts`` rows) and those node rows as one table,
  one row per host, with the nodes no summary names added from their node record.

Lives in upgrade/ (not window/, which imports only k8s/ and errors.py): it reads the upgrade-state
names and the vendor profile's keys. Imports no kubernetes client, so filters can use it.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Optional

from ansible_collections.npuops.fleet.plugins.module_utils.driver.vendor_profiles import annotation_key
from ansible_collections.npuops.fleet.plugins.module_utils.errors import FleetError
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states

# record.LAST_TRANSITION; not imported from record.py, which pulls in the kubernetes client.
LAST_TRANSITION = "last-transition"

UPGRADED = "upgraded"
FAILED = "failed"
IN_PROGRESS = "in-progress"
OTHER = "other"
# Every node status run_rows gives, in the order counts list them.
NODE_STATUSES = (UPGRADED, FAILED, IN_PROGRESS, OTHER)
# The slice status that loses to any other for the same host (the window's summary_rows writes it).
NOT_STARTED = "not-started"


class RunNodesError(ValueError, FleetError):
    """A slice summary that is not shaped as the window writes it (message names the slice and row)."""


def node_status(state: Optional[str]) -> str:
    """``upgraded`` (upgrade-done), ``failed`` (upgrade-failed), ``in-progress`` (upgrade-required or a
    state of IN_PROGRESS_STATES) or ``other`` (no label, an unknown one) for an upgrade-state label value."""
    if state == states.UPGRADE_DONE:
        return UPGRADED
    if state == states.UPGRADE_FAILED:
        return FAILED
    if state == states.UPGRADE_REQUIRED or state in states.IN_PROGRESS_STATES:
        return IN_PROGRESS
    return OTHER


def _ready(node: Mapping[str, Any]) -> bool:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def _last_transition(raw: Any) -> Optional[dict[str, Any]]:
    # a hand-edited or truncated annotation says nothing about the run: skipped, not an error
    if not isinstance(raw, str) or not raw:
        return None
    try:
        rec = json.loads(raw)
    except ValueError:
        return None
    return rec if isinstance(rec, dict) else None


def run_rows(items: list[dict], profile: Mapping[str, Any], run_id: str) -> list[dict]:
    """The nodes of ``items`` whose last transition was written by the run ``run_id``.

    ``items``: Node objects as the API's JSON (``metadata.name/labels/annotations``, ``spec.unschedulable``,
    ``status.conditions``). ``profile``: a resolved vendor profile (``upgrade_state_label`` and the
    annotation prefix are read). A node without the annotation, with one that is no JSON object, or of
    another run (its ``run_id`` differs or is absent) is left out; an empty ``run_id`` matches no node.

    Returns rows sorted by node name, each::

        {"node": str, "state": str | None (the state label; None when absent or empty),
         "unschedulable": bool, "ready": bool (Ready condition is "True"),
         "last_transition": dict (the parsed annotation), "status": str (node_status of state)}
    """
    if not run_id:
        return []
    key = annotation_key(profile, LAST_TRANSITION)
    state_label = profile["upgrade_state_label"]
    rows = []
    for node in items:
        meta = node.get("metadata") or {}
        rec = _last_transition((meta.get("annotations") or {}).get(key))
        if rec is None or rec.get("run_id") != run_id:
            continue
        state = (meta.get("labels") or {}).get(state_label) or None
        rows.append(
            {
                "node": meta.get("name") or "",
                "state": state,
                "unschedulable": bool((node.get("spec") or {}).get("unschedulable")),
                "ready": _ready(node),
                "last_transition": rec,
                "status": node_status(state),
            }
        )
    rows.sort(key=lambda r: str(r["node"]))
    return rows


def count_statuses(rows: list[dict]) -> dict[str, int]:
    """Number of ``rows`` (run_rows output) per status; every key of NODE_STATUSES is present."""
    counts = dict.fromkeys(NODE_STATUSES, 0)
    for row in rows:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    return counts


def _slice_rows(slices: list[dict]) -> list[tuple[Any, Mapping[str, Any]]]:
    """``(participant, row)`` for every row of every slice, in order; raises RunNodesError on bad shapes."""
    if not isinstance(slices, list):
        raise RunNodesError("window slices must be a list of summaries, got %s" % type(slices).__name__)
    out = []
    for i, sl in enumerate(slices):
        if not isinstance(sl, Mapping):
            raise RunNodesError("window slice %d must be a dict, got %s" % (i, type(sl).__name__))
        participant = sl.get("participant")
        hosts = sl.get("hosts")
        # a process that recorded no host row yet: nothing to merge from it
        if hosts is None:
            continue
        if not isinstance(hosts, list):
            raise RunNodesError("window slice %s: hosts must be a list, got %s" % (participant, type(hosts).__name__))
        for j, row in enumerate(hosts):
            if not isinstance(row, Mapping) or not row.get("host"):
                raise RunNodesError("window slice %s: hosts[%d] is not a row with a host" % (participant, j))
            out.append((participant, row))
    return out


def merge_rows(slices: list[dict], nodes: list[dict]) -> list[dict]:
    """One row per host of a window run: the processes' summary rows, completed from the Nodes.

    ``slices``: per-process summaries in the order they were written, each ``{"participant": str,
    "hosts": [row, ...]}`` with rows of at least ``host`` and ``status`` (optionally ``node``,
    ``final_state``, ``reason``...; other keys are kept). ``nodes``: :func:`run_rows` output.

    Two rows for one host (a host retried by a later slice): the one whose status is not
    ``not-started`` is kept; when both or neither are, the later one. Each kept row is a copy with
    ``slice`` (its slice's participant) and, when a node row has its ``node`` (else its ``host``) as
    name, ``node_state`` (that node's state, possibly None); without such a node row ``node_state`` is
    absent. Every node row no kept row names becomes::

        {"host": node, "node": node, "status": node status, "final_state": node state,
         "reason": last_transition reason or None, "slice": None, "from_node_record": True}

    Returns the rows sorted by host. Raises RunNodesError when ``slices`` is not a list of dicts, a
    row is not a dict with a non-empty ``host``, or ``nodes`` is not a list of dicts with ``node``.
    The inputs are not changed.
    """
    if not isinstance(nodes, list) or not all(isinstance(n, Mapping) and n.get("node") for n in nodes):
        raise RunNodesError("window nodes must be the run's node rows (a list of dicts with node), as run_rows gives")
    by_node = {n["node"]: n for n in nodes}
    kept: dict[str, dict] = {}
    for participant, row in _slice_rows(slices):
        host = row["host"]
        old = kept.get(host)
        # a host another slice started keeps that row over a later slice's "never started"
        if old is not None and row.get("status") == NOT_STARTED and old.get("status") != NOT_STARTED:
            continue
        kept[host] = dict(row, slice=participant)
    covered = set()
    for row in kept.values():
        name = row.get("node") or row["host"]
        covered.add(name)
        if name in by_node:
            row["node_state"] = by_node[name]["state"]
    out = list(kept.values())
    for name, n in by_node.items():
        if name in covered:
            continue
        out.append(
            {
                "host": name,
                "node": name,
                "status": n["status"],
                "final_state": n["state"],
                "reason": (n.get("last_transition") or {}).get("reason"),
                "slice": None,
                "from_node_record": True,
            }
        )
    out.sort(key=lambda r: r["host"])
    return out
