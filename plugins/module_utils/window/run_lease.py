# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""Keep the run-wide maintenance Lease alive while a module waits.

A step of the upgrade may wait without bound (the chart's ``timeoutSeconds: 0``). The run's Lease
(``lease.py``) must stay valid for as long as the run works, or a second run could take over an
"expired" lease of a live one. :class:`LeaseKeepalive` is called from every wait loop (``tick``);
it renews at most every ``interval`` seconds (a third of the TTL by default) and raises
``lease.LeaseLostError`` when another run now holds the Lease, or when no renewal succeeded for two
thirds of the TTL: as client-go's leader election gives up at its RenewDeadline, before the lease can
expire for others (clocks of two controllers may differ), a run stops before anyone may take over.

The keepalive is handed to the work that waits (a NodeUpgrade's ``keepalive``), which calls it from its
waits; what a lost Lease means for that work (a node upgrade: a conflict, nothing undone) is decided
there, not here.

:class:`WindowLease` is the same Lease as a window shared by several processes (``shared.py``): the
holder is the run id, and each process's renewal also renews its own participant record; join, the
failure budget, a stop and leave/close are compare-and-swaps of the record.
"""

from __future__ import annotations

import random
import time
from typing import Any, Callable, Mapping, Optional

from ansible_collections.npuops.fleet.plugins.module_utils.k8s import retry as k8s_retry
from ansible_collections.npuops.fleet.plugins.module_utils.k8s.lease import (
    MAX_CONFLICT_RETRIES,
    LeaseConflictError,
    LeaseHeldError,
    LeaseLostError,
    fmt_time,
    lease_state,
    now_utc,
)
from ansible_collections.npuops.fleet.plugins.module_utils.window import shared

# seconds a read of the window's record serves stop checks (admission polls every 1-5 s)
RECORD_MAX_AGE = 2.0
# rounds of a failure's or a stop's write after lost races (each MAX_CONFLICT_RETRIES tries)
RECORD_ROUNDS = 4


class WindowLease:
    """The run-wide Lease of ``manager`` (a ``lease.LeaseManager``) as a window shared by the processes
    of run ``run_id``; ``participant``: this process's name in the record (AWX job id, else host and a
    random suffix). Every method raises ``LeaseHeldError`` (another run's live window, a join refused
    by the record: ``shared.WindowRefused`` is turned into it) or ``LeaseLostError`` (a renewal found the
    window gone, another run's, or closed)."""

    def __init__(self, manager: Any, run_id: str, participant: str, ttl: int,
                 clock: Callable[[], float] = time.time, process: Optional[Mapping[str, Any]] = None,
                 gone: Optional[Callable[[Any], bool]] = None) -> None:
        """``process``: this participant's ansible-playbook process (fleet/caller.playbook_process),
        recorded when it joins; ``gone``: fleet/caller.process_gone, to sweep participants on this
        machine whose process ended (their own lease would otherwise count them for its whole TTL)."""
        self.process = dict(process) if process else None
        self.gone = gone
        self.manager = manager
        self.run_id = run_id
        self.participant = participant
        self.ttl = int(ttl)
        self.clock = clock
        self.record: dict[str, Any] = {}
        self._read_at = -1e18

    def _annotate(self, make: Callable[[dict[str, Any], dict[str, Any], Any], dict[str, Any]]) -> Callable[..., Any]:
        def annotate(lease: Optional[Mapping[str, Any]], decision: Mapping[str, Any], now: Any) -> Any:
            rec = make(shared.read(lease), dict(decision), now)
            rec = shared.stamp(rec, self.participant, self.ttl, now.timestamp(), fmt_time(now), self.process)
            self.record = rec
            # the Lease lasts as long as its longest-lived participant, not the TTL of whoever wrote last
            return {shared.ANNOTATION: shared.dump(rec)}, shared.duration(rec, now.timestamp(), self.ttl)
        return annotate

    def _peer_renewed(self, now: Optional[Mapping[str, Any]], read: Optional[Mapping[str, Any]]) -> bool:
        """Whether ``now`` shows this participant renewed since ``read`` (another lane of this process)."""
        def renewed(lease: Optional[Mapping[str, Any]]) -> float:
            p = (shared.read(lease).get("participants") or {}).get(self.participant)
            return float(p.get("renewed") or 0) if isinstance(p, dict) else 0.0
        return renewed(now) > renewed(read)

    def join(self, targets: Mapping[str, str], max_failures: int, take_over: Optional[str] = None,
             check_mode: bool = False) -> dict[str, Any]:
        """Open the window, or join the same run's: ``manager.acquire``'s result plus ``join``
        (``new`` or ``join``) and ``record``."""
        how: dict[str, str] = {}

        def make(rec: dict[str, Any], _decision: dict[str, Any], now: Any) -> dict[str, Any]:
            # another run's record (expired, released or taken over) is replaced by a new one; the same
            # run's stands, also when its Lease lapsed (a rerun of a slice after all its peers died)
            try:
                how["join"], out = shared.decide_join(rec, self.run_id, targets, max_failures, fmt_time(now))
            except shared.WindowRefused as exc:
                raise LeaseHeldError(str(exc), {}) from exc
            return out

        res = self.manager.acquire(self.run_id, self.ttl, check_mode, take_over=take_over,
                                   annotate=self._annotate(make))
        self._read_at = self.clock()
        return dict(res, join=how.get("join", "new"), record=self.record)

    def renew(self, failure: Optional[tuple[str, str]] = None, stop: Optional[str] = None) -> dict[str, Any]:
        """Renew the window and this participant (``failure``: (node, reason) counted against the
        budget; ``stop``: move the window to stopping). A closed window is lost."""

        def make(rec: dict[str, Any], _decision: dict[str, Any], now: Any) -> dict[str, Any]:
            if rec.get("state") == shared.CLOSED:
                raise LeaseLostError(shared.stop_message(rec) or "the window was closed", {})
            if failure:
                rec = shared.with_failure(rec, failure[0], failure[1])
            if stop:
                rec = shared.with_stop(rec, stop)
            return rec

        # a plain renewal that loses its race to another lane of this process counts as made; one that
        # carries a failure or a stop must land itself, so it tries again after lost races (a few rounds of
        # MAX_CONFLICT_RETRIES: many lanes of many processes may write at once)
        peer = self._peer_renewed if not failure and not stop else None
        rounds = 1 if peer is not None else RECORD_ROUNDS
        try:
            for attempt in range(rounds):
                try:
                    res = self.manager.acquire(self.run_id, self.ttl, renew_only=True,
                                               annotate=self._annotate(make), renewed_by_peer=peer)
                    break
                except LeaseConflictError:
                    if attempt == rounds - 1:
                        raise
                    time.sleep(random.uniform(0.2, 1.0))
        except LeaseLostError as exc:
            rec = shared.read(exc.lease)
            if rec.get("run_id") == self.run_id and rec.get("state") == shared.CLOSED:
                # closed: the holder is cleared, which the Lease alone would call a take-over
                raise LeaseLostError(shared.stop_message(rec) or str(exc), exc.lease) from exc
            raise
        if res.get("lease"):  # the record as written, or as another lane's renewal left it
            self.record = shared.read(res["lease"])
        self._read_at = self.clock()
        return dict(res, record=self.record)

    def stop_reason(self) -> Optional[str]:
        """Why no node may be admitted now (the window stopping or closed, read at most every
        RECORD_MAX_AGE seconds), else None. A read that fails keeps the last record."""
        if self.clock() - self._read_at >= RECORD_MAX_AGE:
            try:
                lease = self.manager.read()
            except Exception as exc:  # noqa: BLE001 - transient: the renewal's deadline decides
                if not k8s_retry.is_transient(exc):
                    raise
            else:
                self._read_at = self.clock()
                if lease is None or lease_state(lease, now_utc())["holder"] != self.run_id:
                    return "maintenance window %s: its Lease is gone or another run's" % self.run_id
                self.record = shared.read(lease)
        return shared.stop_message(self.record)

    def leave(self, close: bool = True, check_mode: bool = False, sweep: tuple[str, ...] = ()) -> dict[str, Any]:
        """Take this participant out of the record; ``close`` and no other participant live: the
        window is closed (record ``closed``, the Lease's holder cleared so that another run may open
        one; the record stays to refuse a late participant). ``sweep``: participants to take out as
        dead (see shared.decide_leave). ``{action, changed, others, record}``
        with action ``close``, ``leave`` or ``not_ours`` (the Lease is gone or another run's)."""
        mgr = self.manager

        def step(_attempt: int) -> Any:
            lease = mgr.read()
            now = now_utc()
            if lease is None or lease_state(lease, now)["holder"] != self.run_id:
                rec = shared.read(lease)
                if rec.get("run_id") == self.run_id and rec.get("closed_by") == self.participant:
                    # this call's own close, whose answer was lost
                    return {"action": "close", "changed": True, "others": [], "record": rec}
                return {"action": "not_ours", "changed": False, "others": [], "record": rec}
            action, rec, others = shared.decide_leave(shared.read(lease), self.participant, now.timestamp(),
                                                      fmt_time(now), close, self.gone, tuple(sweep))
            self.record = rec
            if action == "leave" and rec == shared.read(lease):
                return {"action": action, "changed": False, "others": others, "record": rec}  # nothing to write
            if check_mode:
                return {"action": action, "changed": True, "others": others, "record": rec}
            spec = dict(lease.get("spec") or {})
            if action == "close":
                spec.update(holderIdentity=None, renewTime=fmt_time(now))
            elif others:  # as long as the longest-lived of those who stay
                spec.update(renewTime=fmt_time(now), leaseDurationSeconds=shared.duration(rec, now.timestamp(), 1))
            try:
                # _send, not _write: a leave keeps the spec, so a 409 from another participant's write
                # would look like this call's own; every conflict is decided again on a fresh read
                mgr._send(lease, spec, {shared.ANNOTATION: shared.dump(rec)})
            except mgr.k8s.ApiException as exc:
                if exc.status != 409:
                    raise
                return k8s_retry.CONFLICT
            return {"action": action, "changed": True, "others": others, "record": rec}

        return k8s_retry.retry_on_conflict(step, MAX_CONFLICT_RETRIES, mgr._conflicts_exhausted)


class LeaseKeepalive:
    """Renews ``holder``'s Lease through ``manager`` (a ``lease.LeaseManager``) while waits run.

    ``ttl``: seconds, the Lease's leaseDurationSeconds. ``interval``: seconds between renewals
    (default ttl / 3, at least 1). ``clock``: monotonic seconds. ``renewed_age``: seconds since the
    caller's last successful renewal before this process started (the control node renews at most
    every ttl/3): the give-up deadline counts from that renewal, not from this process's start.
    """

    def __init__(
        self,
        manager: Any,
        holder: str,
        ttl: int,
        interval: Optional[float] = None,
        clock: Callable[[], float] = time.monotonic,
        renewed_age: float = 0.0,
        window: Optional[WindowLease] = None,
    ):
        self.manager = manager
        self.holder = holder
        self.ttl = int(ttl)
        self.interval = float(interval) if interval else max(1.0, self.ttl / 3.0)
        self.renew_deadline = self.ttl * 2.0 / 3.0
        self.clock = clock
        self.last_ok = clock() - max(0.0, float(renewed_age))
        self.last_try: Optional[float] = None
        self.renewals = 0
        # a shared window: renewals also renew this process's participant record
        self.window = window

    def tick(self, force: bool = False) -> None:
        """Renew when due; raise ``LeaseLostError`` when the Lease is gone to another run."""
        now = self.clock()
        if not force and self.last_try is not None and now - self.last_try < self.interval:
            return
        self.last_try = now
        try:
            if self.window is not None:
                self.window.renew()
            else:
                self.manager.acquire(self.holder, self.ttl, renew_only=True)
        except LeaseHeldError as exc:
            raise LeaseLostError("the run's maintenance Lease is no longer ours: %s" % exc, exc.lease) from exc
        except Exception as exc:  # noqa: BLE001 - transient ones are retried at the next tick
            if not (k8s_retry.is_transient(exc) or isinstance(exc, LeaseConflictError)):
                raise
            if now - self.last_ok >= self.renew_deadline:
                raise LeaseLostError(
                    "could not renew the run's maintenance Lease for %d s (2/3 of its %d s TTL): %s"
                    % (now - self.last_ok, self.ttl, exc)
                ) from exc
            return
        self.last_ok = now
        self.renewals += 1

    __call__ = tick
