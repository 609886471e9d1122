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
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional

from ansible_collections.npuops.fleet.plugins.module_utils.k8s import retry as k8s_retry
from ansible_collections.npuops.fleet.plugins.module_utils.k8s.lease import LeaseHeldError, LeaseLostError


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

    def tick(self, force: bool = False) -> None:
        """Renew when due; raise ``LeaseLostError`` when the Lease is gone to another run."""
        now = self.clock()
        if not force and self.last_try is not None and now - self.last_try < self.interval:
            return
        self.last_try = now
        try:
            self.manager.acquire(self.holder, self.ttl, renew_only=True)
        except LeaseHeldError as exc:
            raise LeaseLostError("the run's maintenance Lease is no longer ours: %s" % exc, exc.lease) from exc
        except Exception as exc:  # noqa: BLE001 - transient ones are retried at the next tick
            if not k8s_retry.is_transient(exc):
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
