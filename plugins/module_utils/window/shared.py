# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""One maintenance window shared by several control-node processes (AWX job slices, or k
ansible-playbook processes with one ``maintenance_run_id``): the *window record* (pure).

The window is the run-wide Lease (``k8s/lease.py``): its holderIdentity is the **run id**, so every
participant renews the same holder and the Lease expires only after the last live participant stopped
renewing it. Its annotation :data:`ANNOTATION` holds the record, a JSON object::

    {"run_id": "R", "state": "open" | "stopping" | "closed", "opened": "<RFC 3339>",
     "targets": {"<vendor>": ["<16 hex: sha256 of a target version + upgradePolicy>", ...]},
     "max_failures": 0, "failures": {"<node>": "<reason>"}, "stop_reason": null | "<why>",
     "participants": {"<participant>": {"renewed": <epoch s>, "ttl": <s>, "joined": "<RFC 3339>",
                                        "process": {"boot_id", "pid", "start"} of its ansible-playbook}},
     "closed": null | "<RFC 3339>", "closed_by": null | "<participant>"}

Participants are records in this one object, each a lease of its own (renewed + ttl), not Lease
objects of their own: RBAC's resourceNames cannot name objects whose names are made at run time, and
one object makes every join, leave, failure and close a single compare-and-swap (resourceVersion) of
the same record - no ordering between two objects to get wrong.

Join rules (:func:`decide_join`), each refusal naming what differs: no record or another run's expired
or released one -> a new window; the same run id, open or stopping, and the same target per vendor
-> join; the same run id with another target or policy for a vendor -> refused; the same run id after
its window closed -> refused; another run's live window -> refused (``k8s/lease.py`` decides that
from the holder, as before). The failure budget is the record's: more than ``max_failures`` failed
nodes in any participant moves the window to ``stopping``, and no participant admits a node after
that (lanes in flight finish).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Callable, Mapping, Optional

ANNOTATION = "npuops.io/window"
OPEN, STOPPING, CLOSED = "open", "stopping", "closed"
STATES = (OPEN, STOPPING, CLOSED)
# characters of a reason kept in the record (the Lease's annotations share the object's 256 KiB)
REASON_MAX = 300
# failed nodes whose reasons the record keeps (about 100 KiB at most); beyond them only a count
FAILURES_KEPT = 300
# seconds: the most a participant's record may hold the Lease (a week; leaseDurationSeconds is an int32)
DURATION_MAX = 7 * 24 * 3600


class WindowRefused(ValueError):
    """A join refused by the window's record; the message names what differs."""


def target_digest(target_version: str, policy: Mapping[str, Any]) -> str:  # one host's
    """16 hex digits of sha256 over the target version and the upgradePolicy (keys sorted): two
    inventories agree on a vendor's target when these agree."""
    blob = json.dumps({"target_version": str(target_version), "policy": policy}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def read(lease: Optional[Mapping[str, Any]]) -> dict[str, Any]:
    """The record of ``lease`` ({} when there is none or it is not a JSON object)."""
    anns = ((lease or {}).get("metadata") or {}).get("annotations") or {}
    try:
        rec = json.loads(anns.get(ANNOTATION) or "{}")
    except ValueError:
        return {}
    return rec if isinstance(rec, dict) else {}


def dump(record: Mapping[str, Any]) -> str:
    return json.dumps(dict(record), sort_keys=True)


def live_participants(record: Mapping[str, Any], now: float, but: Optional[str] = None,
                      gone: Optional[Callable[[Any], bool]] = None) -> list[str]:
    """Participants whose own lease (renewed + ttl) has not passed at ``now`` (epoch s), sorted;
    ``but``: leave this one out (the caller). ``gone(process)``: True when the participant's recorded
    ansible-playbook process is known to have ended (same machine and boot, fleet/caller.py): such a
    participant is dead at once, not only after its TTL."""
    out = []
    for name, p in (record.get("participants") or {}).items():
        if name == but or not isinstance(p, dict):
            continue
        if gone is not None and p.get("process") and gone(p["process"]):
            continue
        try:
            if float(p.get("renewed") or 0) + float(p.get("ttl") or 0) > now:
                out.append(name)
        except (TypeError, ValueError):
            continue
    return sorted(out)


def duration(record: Mapping[str, Any], now: float, floor: int) -> int:
    """leaseDurationSeconds for a write at ``now`` (epoch s): until the latest expiry (renewed + ttl) of
    the record's participants, at least ``floor`` (the writer's own TTL). Participants size their TTL
    from their own hosts' longest wait; the Lease must not lapse under the longest-lived of them."""
    latest = now + floor
    for p in (record.get("participants") or {}).values():
        try:
            latest = max(latest, float(p.get("renewed") or 0) + float(p.get("ttl") or 0))
        except (AttributeError, TypeError, ValueError, OverflowError):
            continue
    # an int32 on the API side; a record that says more is not believed
    return max(1, min(int(min(latest - now, DURATION_MAX) + 0.999), DURATION_MAX))


def digests(value: Any) -> list[str]:
    """A vendor's target digests as a sorted list (one digest given as a string counts as a list of one)."""
    if isinstance(value, str):
        return [value]
    return sorted({str(v) for v in (value or [])})


def new_record(run_id: str, targets: Mapping[str, Any], max_failures: int, now_iso: str) -> dict[str, Any]:
    return {
        "run_id": run_id, "state": OPEN, "opened": now_iso, "targets": {v: digests(d) for v, d in targets.items()},
        "max_failures": int(max_failures), "failures": {}, "stop_reason": None, "participants": {},
        "closed": None, "closed_by": None,
    }


def decide_join(
    record: Mapping[str, Any], run_id: str, targets: Mapping[str, Any], max_failures: int, now_iso: str,
) -> tuple[str, dict[str, Any]]:
    """``(action, record)``: action ``new`` (a window of its own: no record, or the record of another
    run that no longer holds the Lease) or ``join`` (the same run's open or stopping window; vendors new
    to it are added; its failure budget stays the opener's). Raises
    :class:`WindowRefused` for the same run id with another target for a vendor, or a closed window.
    Another run's *live* Lease is refused before this, by the Lease's holder."""
    if not record or record.get("run_id") != run_id:
        return "new", new_record(run_id, targets, max_failures, now_iso)
    if record.get("state") == CLOSED:
        raise WindowRefused(
            "maintenance window %s was closed at %s (by %s): a closed window takes no participant; start a new "
            "window with another maintenance_run_id"
            % (run_id, record.get("closed") or "?", record.get("closed_by") or "?"))
    have = {v: digests(d) for v, d in (record.get("targets") or {}).items()}
    mine = {v: digests(d) for v, d in targets.items()}
    # A vendor's digests: one per target version + upgradePolicy among its hosts (a fleet may run one
    # branch per GPU generation). A slice holds some of the window's (a subset joins); an opener that
    # saw only some of them is widened by a process that brings all of them (a superset); anything else
    # is two inventories that disagree.
    differ = sorted(v for v in set(have) & set(mine)
                    if not set(mine[v]) <= set(have[v]) and not set(have[v]) <= set(mine[v]))
    if differ:
        raise WindowRefused(
            "maintenance window %s runs another target or upgradePolicy for %s (window: %s, this process: %s): "
            "two inventories disagree on the target; nothing was changed"
            % (run_id, ", ".join(differ), ", ".join("%s=%s" % (v, "+".join(have[v])) for v in differ),
               ", ".join("%s=%s" % (v, "+".join(mine[v])) for v in differ)))
    rec = dict(record)
    rec["targets"] = {v: sorted(set(have.get(v, [])) | set(mine.get(v, []))) for v in set(have) | set(mine)}
    rec.setdefault("max_failures", int(max_failures))
    return "join", rec


def stamp(record: Mapping[str, Any], participant: str, ttl: int, now: float, now_iso: str,
          process: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
    """The record with ``participant``'s own lease renewed at ``now`` (epoch s) for ``ttl`` s;
    ``process``: its ansible-playbook process (set when it joins; kept by later renewals)."""
    rec = dict(record)
    parts = dict(rec.get("participants") or {})
    found = parts.get(participant)
    old: dict[str, Any] = found if isinstance(found, dict) else {}
    parts[participant] = {"renewed": round(float(now), 3), "ttl": int(ttl), "joined": old.get("joined") or now_iso}
    if process or old.get("process"):
        parts[participant]["process"] = dict(process or old["process"])
    rec["participants"] = parts
    return rec


def with_failure(record: Mapping[str, Any], node: str, reason: str) -> dict[str, Any]:
    """The record with ``node``'s failure (a node that fails twice counts once); more failed nodes
    than ``max_failures`` moves an open window to ``stopping`` with this reason (the first stays).
    Past :data:`FAILURES_KEPT` nodes only their number grows (``failures_more``): the annotation stays
    small (each node's reason is on the node itself)."""
    rec = dict(record)
    failures = dict(rec.get("failures") or {})
    why = str(reason).replace("\n", " ")[:REASON_MAX]
    if node in failures or len(failures) < FAILURES_KEPT:
        failures[node] = why
    elif node not in (rec.get("failures_past") or []):
        # counted once each; their names only (a few bytes), their reasons are on the nodes
        rec["failures_past"] = list(rec.get("failures_past") or []) + [node]
        rec["failures_more"] = int(rec.get("failures_more") or 0) + 1
    rec["failures"] = failures
    failed = len(failures) + int(rec.get("failures_more") or 0)
    if failed > int(rec.get("max_failures") or 0) and rec.get("state") == OPEN:
        rec["state"] = STOPPING
        rec["stop_reason"] = why
    return rec


def with_stop(record: Mapping[str, Any], reason: str) -> dict[str, Any]:
    """The record moved to ``stopping`` (a refusal: no participant admits a node after it)."""
    rec = dict(record)
    if rec.get("state") == OPEN:
        rec["state"] = STOPPING
        rec["stop_reason"] = str(reason).replace("\n", " ")[:REASON_MAX]
    return rec


def decide_leave(
    record: Mapping[str, Any], participant: str, now: float, now_iso: str, close: bool = True,
    gone: Optional[Callable[[Any], bool]] = None, sweep: tuple[str, ...] = (),
) -> tuple[str, dict[str, Any], list[str]]:
    """``(action, record, others)`` after ``participant`` leaves: ``close`` when no other participant
    is live (and ``close``), the record then ``closed``; else ``leave`` (the window stays with the
    ``others`` that still renew it). Participants found dead (``gone``, see :func:`live_participants`)
    are swept from the record, and so are those named in ``sweep`` (an operator who knows they are dead:
    the close step's ``maintenance_take_over``)."""
    rec = dict(record)
    parts = dict(rec.get("participants") or {})
    for name in (participant, *sweep):
        parts.pop(name, None)
    if gone is not None:
        parts = {n: p for n, p in parts.items()
                 if not (isinstance(p, dict) and p.get("process") and gone(p["process"]))}
    rec["participants"] = parts
    others = live_participants(rec, now)
    if others or not close:
        return "leave", rec, others
    rec.update(state=CLOSED, closed=now_iso, closed_by=participant)
    return "close", rec, []


def stop_message(record: Mapping[str, Any]) -> Optional[str]:
    """Why no participant may admit a node now (the window is stopping or closed), else None."""
    state = record.get("state")
    if state == STOPPING:
        return "maintenance window %s stopped: %s" % (record.get("run_id"), record.get("stop_reason") or "?")
    if state == CLOSED:
        return "maintenance window %s was closed at %s" % (record.get("run_id"), record.get("closed") or "?")
    return None
