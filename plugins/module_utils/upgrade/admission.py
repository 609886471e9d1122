# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""Admission of a node into an upgrade: ``maxUnavailable`` and ``maxParallelUpgrades`` across the
vendor's nodes (those with the presence label), holding under concurrency — hosts of one batch that
run ``prepare`` at the same moment, and two runs started at once.

A node counts as unavailable when it is cordoned, not Ready, or anywhere between upgrade-required and
uncordon-required (its state label); it counts against ``maxParallelUpgrades`` in those states. Reading
the nodes and then labelling one is check-then-act, so admission also goes through a *slot record*: a
``coordination.k8s.io/v1`` Lease per vendor (``npuops-fleet-admission-<vendor>``) whose annotation
lists the nodes admitted whose state label may not show it yet. A run reads the record, then lists the
nodes, decides, and writes the record back with the resourceVersion it read (optimistic concurrency:
a 409 means another run wrote in between, so it decides again). The winner labels its node
upgrade-required (itself guarded by the node's resourceVersion) and removes its entry; an entry left
by a killed run expires after :data:`SLOT_GRACE` seconds, by which time its node's label says it all.
An entry whose claiming process is known to have ended (its recorded ``process`` ran on this machine,
in this boot and pid namespace: fleet/caller.py) is swept at once - that process had either labelled
its node, which the fresh list of nodes in an upgrade then counts, or changed nothing - so a
participant of a shared window killed mid-claim holds no slot of the others for the grace period.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence

from ansible_collections.npuops.fleet.plugins.module_utils.errors import FleetError
from ansible_collections.npuops.fleet.plugins.module_utils.fleet import caller
from ansible_collections.npuops.fleet.plugins.module_utils.k8s import retry as k8s_retry
from ansible_collections.npuops.fleet.plugins.module_utils.k8s import wait as k8s_wait
from ansible_collections.npuops.fleet.plugins.module_utils.k8s.node_snapshot import MAX_AGE, NodeSnapshot
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.policy import UpgradePolicy, max_unavailable_count
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.record import (
    LAST_TRANSITION,
    get_json_annotation,
    node_ready,
)
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.states import IN_PROGRESS_STATES, UPGRADE_REQUIRED

SLOTS_ANNOTATION = "npuops.io/admitted-nodes"
# Seconds an entry stays valid: far longer than the two API calls between claiming a slot and
# labelling the node (each retried for at most k8s_retry.DEFAULT_BUDGET).
SLOT_GRACE = 300.0
DEFAULT_NAMESPACE = "kube-system"
# Seconds a wait without bound (admission_timeout 0) goes on while no other node is upgrading or
# admitted: the limit is then held by nodes cordoned, NotReady or failed outside any upgrade, which
# no lane of the run frees, so a rolling window would otherwise wait for a person, for ever.
STALLED_TIMEOUT = 600.0


class AdmissionConflict(RuntimeError, FleetError):
    """Another run is admitting the same node right now."""


class AdmissionStopped(RuntimeError, FleetError):
    """The caller's ``stop`` said to admit nothing more (its message is the reason)."""


def slot_lease_name(profile: Mapping[str, Any]) -> str:
    return "npuops-fleet-admission-%s" % profile["name"]


def _name(node: Mapping[str, Any]) -> str:
    return node["metadata"]["name"]


def _taken(node: Mapping[str, Any], profile: Mapping[str, Any]) -> bool:
    """Admitted and not finished. A bare upgrade-required label (an admin's or an operator's request)
    is a request, not an admission: it counts only when an upgrade run wrote it (last-transition), and
    not once the node carries the skip label (prepare will leave it alone)."""
    labels = node["metadata"].get("labels") or {}
    state = labels.get(profile["upgrade_state_label"])
    if state in IN_PROGRESS_STATES:
        return True
    if state != UPGRADE_REQUIRED or labels.get(profile["upgrade_skip_label"]) == "true":
        return False
    return (get_json_annotation(profile, node, LAST_TRANSITION) or {}).get("to") == UPGRADE_REQUIRED


def _unavailable(node: Mapping[str, Any], profile: Mapping[str, Any]) -> bool:
    return bool((node.get("spec") or {}).get("unschedulable")) or not node_ready(node) or _taken(node, profile)


def node_snapshot(core: Any, profile: Mapping[str, Any], fresh: bool = False) -> NodeSnapshot:
    """The vendor's Nodes as admission reads them (k8s/node_snapshot.py): nodes in an upgrade or
    cordoned whole and fresh, the others' readiness at most MAX_AGE old (``fresh``: read now)."""
    return NodeSnapshot(core, profile, IN_PROGRESS_STATES + (UPGRADE_REQUIRED,), max_age=0.0 if fresh else MAX_AGE)


def verdict(
    profile: Mapping[str, Any],
    policy: UpgradePolicy,
    node_name: str,
    nodes: Sequence[Mapping[str, Any]],
    admitted_elsewhere: frozenset[str] | set[str] = frozenset(),
) -> Optional[str]:
    """None when ``node_name`` may start; otherwise the reason it must wait (pure).

    ``nodes``: the vendor's Node dicts; ``admitted_elsewhere``: nodes holding a live slot entry of
    another run (admitted, label maybe not written yet) — they count as unavailable and in progress.
    """
    others = [n for n in nodes if _name(n) != node_name]
    me = [n for n in nodes if _name(n) == node_name]
    unavailable = sorted(_name(n) for n in others if _unavailable(n, profile) or _name(n) in admitted_elsewhere)
    self_unavailable = bool(me) and _unavailable(me[0], profile)
    limit = max_unavailable_count(policy.max_unavailable, len(nodes) or 1)
    if len(unavailable) + (0 if self_unavailable else 1) > limit:
        return "maxUnavailable %s (= %d of %d %s nodes) reached: unavailable now: %s" % (
            policy.max_unavailable,
            limit,
            len(nodes),
            profile["name"],
            ", ".join(unavailable),
        )
    if policy.max_parallel_upgrades:
        busy = sorted(_name(n) for n in others if _taken(n, profile) or _name(n) in admitted_elsewhere)
        if len(busy) >= policy.max_parallel_upgrades:
            return "maxParallelUpgrades %d reached: upgrading now: %s" % (policy.max_parallel_upgrades, ", ".join(busy))
    return None


@dataclass
class SlotRecord:
    """The Lease as read: ``lease`` is None when it does not exist yet."""

    lease: Optional[dict[str, Any]]
    entries: dict[str, dict[str, Any]]


class Slots:
    """Read and write the per-vendor slot record (a Lease) with resourceVersion preconditions."""

    def __init__(
        self,
        coord: Any,
        profile: Mapping[str, Any],
        namespace: str = DEFAULT_NAMESPACE,
        clock: Callable[[], float] = time.time,
        gone: Callable[[Any], bool] = caller.process_gone,
    ) -> None:
        """``gone(process)``: whether an entry's claiming process has ended (fleet/caller.process_gone)."""
        self.gone = gone
        self.coord = coord
        self.namespace = namespace
        self.name = slot_lease_name(profile)
        self.clock = clock

    def read(self) -> SlotRecord:
        try:
            resp = k8s_retry.call(self.coord.read_namespaced_lease, self.name, self.namespace, _preload_content=False)
        except Exception as exc:  # noqa: BLE001
            if getattr(exc, "status", None) == 404:
                return SlotRecord(None, {})
            raise
        lease = json.loads(resp.data)
        raw = ((lease.get("metadata") or {}).get("annotations") or {}).get(SLOTS_ANNOTATION) or "{}"
        try:
            entries = json.loads(raw)
        except ValueError:
            entries = {}
        return SlotRecord(lease, entries if isinstance(entries, dict) else {})

    def live(self, record: SlotRecord, node_names: Optional[set[str]] = None) -> dict[str, dict[str, Any]]:
        """Entries not older than SLOT_GRACE whose claiming process is not known to have ended (and,
        when given, for nodes that still exist)."""
        now = self.clock()
        return {
            n: e
            for n, e in record.entries.items()
            if isinstance(e, dict)
            and now - float(e.get("since") or 0) < SLOT_GRACE
            and (node_names is None or n in node_names)
            and not (e.get("process") and self.gone(e["process"]))
        }

    def write(self, record: SlotRecord, entries: Mapping[str, Any]) -> bool:
        """Write ``entries`` if the record is unchanged since ``record`` was read; False on a conflict."""
        body: dict[str, Any] = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "annotations": {SLOTS_ANNOTATION: json.dumps(dict(entries), sort_keys=True)},
            },
            "spec": {"holderIdentity": "npuops.fleet admission slots"},
        }
        try:
            if record.lease is None:
                k8s_retry.call(self.coord.create_namespaced_lease, self.namespace, body, _preload_content=False)
            else:
                body["metadata"]["resourceVersion"] = record.lease["metadata"]["resourceVersion"]
                k8s_retry.call(
                    self.coord.replace_namespaced_lease, self.name, self.namespace, body, _preload_content=False
                )
        except Exception as exc:  # noqa: BLE001
            if getattr(exc, "status", None) == 409:  # changed meanwhile, or created by another run
                return False
            raise
        return True

    def release(self, node_name: str, token: str, attempts: int = 10) -> bool:
        """Remove this run's entry for ``node_name`` (and expired ones). False when it could not."""

        def step(_attempt: int) -> Any:
            record = self.read()
            entries = self.live(record)
            if (record.entries.get(node_name) or {}).get("token") == token:
                entries.pop(node_name, None)
            elif entries == record.entries:
                return True
            return True if self.write(record, entries) else k8s_retry.CONFLICT

        return k8s_retry.retry_on_conflict(step, attempts, exhausted=lambda: False)


def wait_admission(
    core: Any,
    slots: Slots,
    profile: Mapping[str, Any],
    policy: UpgradePolicy,
    node_name: str,
    token: str,
    timeout: Optional[float],
    sleep: Callable[[float], None] = k8s_wait.pause,
    clock: Callable[[], float] = time.monotonic,
    stop: Optional[Callable[[], Optional[str]]] = None,
    stalled_timeout: float = STALLED_TIMEOUT,
) -> tuple[Optional[float], Optional[str]]:
    """Wait until ``node_name`` is admitted and claim its slot: ``(since, None)`` when claimed (the
    entry's time on the slot clock, for the caller's deadline), ``(None, reason)`` after ``timeout``
    seconds (None = as long as some other node is upgrading or admitted, and ``stalled_timeout``
    seconds after that stopped: nothing of any run would free a lane then). Polls every 1-5 s while
    it must wait.

    ``stop``: asked before every decision; a reason (str) ends the wait without a claim.
    Raises AdmissionConflict when another run holds a live entry for the same node, AdmissionStopped
    when ``stop`` gave a reason.
    """
    stalled_since: Optional[float] = None

    def probe() -> tuple[Any, tuple[Optional[float], Optional[str]]]:
        nonlocal stalled_since
        halt = stop() if stop is not None else None
        if halt:
            raise AdmissionStopped(halt)
        record = slots.read()  # first the record, then the nodes: see the module docstring
        snap = node_snapshot(core, profile)
        nodes = snap.nodes()
        live = slots.live(record, {_name(n) for n in nodes} | {node_name})
        mine = live.get(node_name)
        if mine and mine.get("token") != token:
            left = SLOT_GRACE - (slots.clock() - float(mine.get("since") or 0))
            raise AdmissionConflict(
                "another run (%s) is starting an upgrade of node %s right now (or it was killed: its claim in "
                "Lease %s/%s expires in %ds)" % (mine.get("holder", "?"), node_name, slots.namespace, slots.name, left)
            )
        why = verdict(profile, policy, node_name, nodes, set(live) - {node_name})
        if why is None and snap.from_cache:
            # the cached readiness may only make a host wait, never admit it: decide again on a fresh
            # read, and keep every live entry of a node that read shows (a node labelled since the
            # cached Table: another run's claim on it counts and is written back)
            nodes = node_snapshot(core, profile, fresh=True).nodes()
            live = slots.live(record, {_name(n) for n in nodes} | {node_name})
            why = verdict(profile, policy, node_name, nodes, set(live) - {node_name})
        if why is None:
            since = slots.clock()
            claimed = dict(live)
            claimed[node_name] = {
                "token": token,
                "since": since,
                "holder": "%s/%d" % (socket.gethostname(), os.getpid()),
                # this module process: a later reader on this machine sweeps the entry once it ended
                "process": caller.this_process(),
            }
            if slots.write(record, claimed):
                halt = stop() if stop is not None else None
                if halt:  # the window stopped while this claim was made: give it back
                    slots.release(node_name, token)
                    raise AdmissionStopped(halt)
                return True, (since, None)
            # someone wrote in between: decide again on fresh data
            return k8s_retry.AGAIN, (None, "the admission record kept changing under concurrent runs")
        if timeout is None:
            moving = bool(set(live) - {node_name}) or any(
                _taken(n, profile) for n in nodes if _name(n) != node_name
            )
            stalled_since = None if moving else (clock() if stalled_since is None else stalled_since)
            if stalled_since is not None and clock() - stalled_since >= stalled_timeout:
                stalled = "%s; no other node has been upgrading for %ds, so no lane of any run frees one" % (
                    why,
                    stalled_timeout,
                )
                return True, (None, stalled)
        return False, (None, why)

    return k8s_retry.poll_until(probe, timeout, sleep=sleep, clock=clock)


def check_admission(
    core: Any,
    slots: Optional[Slots],
    profile: Mapping[str, Any],
    policy: UpgradePolicy,
    node_name: str,
    fresh: bool = False,
) -> Optional[str]:
    """Read-only verdict (no slot claimed); slot record read errors count as empty. ``fresh``: the
    nodes read now, not from the snapshot cache."""
    live: dict[str, Any] = {}
    if slots is not None:
        try:
            live = slots.live(slots.read())
        except Exception:  # noqa: BLE001 - check mode must not fail on a missing read right
            live = {}
    return verdict(profile, policy, node_name, node_snapshot(core, profile, fresh).nodes(), set(live) - {node_name})


def wait_verdict(
    core: Any,
    slots: Optional[Slots],
    profile: Mapping[str, Any],
    policy: UpgradePolicy,
    node_name: str,
    timeout: Optional[float],
    sleep: Callable[[float], None] = k8s_wait.pause,
    clock: Callable[[], float] = time.monotonic,
    stop: Optional[Callable[[], Optional[str]]] = None,
) -> Optional[str]:
    """Wait (polling 1-5 s) until :func:`check_admission` admits ``node_name``; None, or the last
    reason after ``timeout`` seconds. Claims nothing: for a node whose label already counts it.
    ``stop``: asked before every decision; a reason ends the wait (AdmissionStopped)."""

    def probe() -> tuple[bool, Optional[str]]:
        halt = stop() if stop is not None else None
        if halt:
            raise AdmissionStopped(halt)
        why = check_admission(core, slots, profile, policy, node_name)
        if why is None:  # admitted on a cached read: only a fresh one may admit
            why = check_admission(core, slots, profile, policy, node_name, fresh=True)
        return why is None, why

    return k8s_retry.poll_until(probe, timeout, sleep=sleep, clock=clock)
