# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""The one retry, the one poll and the one resourceVersion-conflict loop of the Kubernetes calls.

* :func:`call`: retry an API call's transient failures with capped exponential backoff inside a time
  budget. Transient (:func:`is_transient`): connection refused/reset, timeouts, HTTP 5xx and 429 (API
  priority and fairness / rate limiting). A caller with other rules passes its own ``classify``: an
  eviction's 429 is a PodDisruptionBudget refusal, not a transient error (``drain.py``).
* :func:`poll_until`: ask again every 1-5 s until an answer is final or a deadline passes (for what
  a watch cannot wait on, such as a decision over several objects).
* :func:`retry_on_conflict`: read, decide and write with the resourceVersion that was read, again on
  a 409 Conflict (someone wrote in between), a bounded number of times (client-go's RetryOnConflict).

All times are seconds; deadlines are ``clock()`` values (``time.monotonic`` unless a test passes one).

A restarted kube-apiserver serves requests before its RBAC informers have synced: for a moment
(measured on the lab: ~0.1 s) it answers 403 to a ServiceAccount the role allows. So a 401/403 that
follows a transient error *within the same call* is retried for :data:`STARTUP_GRACE` seconds
(:class:`Attempts`); a 401/403 without an outage before it is final, as always.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional

try:
    from kubernetes.client.rest import ApiException
except ImportError:  # pragma: no cover - reported by the module
    ApiException = Exception  # type: ignore[misc,assignment]

try:
    import urllib3.exceptions as _u3

    _NETWORK_ERRORS: tuple = (_u3.HTTPError, ConnectionError, TimeoutError, OSError)
except ImportError:  # pragma: no cover
    _NETWORK_ERRORS = (ConnectionError, TimeoutError, OSError)

TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})
DEFAULT_BUDGET = 60.0
# Answers of an apiserver that has just come back (authn/RBAC caches not synced yet) ...
STARTUP_REFUSALS = frozenset({401, 403})
# ... retried for this many seconds (from the first one) when a transient error came before them.
STARTUP_GRACE = 10.0


def is_transient(exc: BaseException) -> bool:
    status = getattr(exc, "status", None)
    if isinstance(exc, ApiException) and status is not None:
        return status in TRANSIENT_STATUS or status == 0
    return isinstance(exc, _NETWORK_ERRORS)


def backoff_delays(first: float = 0.5, cap: float = 5.0):
    """0.5, 1, 2, 4, 5, 5, ... seconds."""
    delay = first
    while True:
        yield delay
        delay = min(cap, delay * 2)


class Attempts:
    """What one call has seen so far: ``retries`` (failed attempts that were retried), ``outage``
    (a transient error came), and since when (``clock()`` seconds) 401/403 answers follow it.

    A caller that passes its own ``Attempts`` to :func:`call` learns afterwards whether a retry
    happened -- i.e. whether an earlier attempt may have been applied with its response lost.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.retries = 0
        self.outage = False
        self.refused_since: Optional[float] = None

    def retryable(self, exc: BaseException, transient: bool) -> bool:
        """True when ``exc`` should be retried: it is ``transient``, or a 401/403 at most
        :data:`STARTUP_GRACE` seconds into such answers after a transient error of this call."""
        if transient:
            self.outage = True
            return True
        if self.outage and getattr(exc, "status", None) in STARTUP_REFUSALS:
            now = self.clock()
            if self.refused_since is None:
                self.refused_since = now
            return now - self.refused_since < STARTUP_GRACE
        return False


def call(
    fn: Callable[..., Any],
    *args: Any,
    budget: Optional[float] = DEFAULT_BUDGET,
    deadline: Optional[float] = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    attempts: Optional[Attempts] = None,
    classify: Callable[[BaseException], bool] = is_transient,
    first: float = 0.5,
    cap: float = 5.0,
    **kwargs: Any,
) -> Any:
    """Call ``fn(*args, **kwargs)`` and retry the failures ``classify`` calls retryable until ``deadline``
    (a ``clock()`` value) or ``budget`` seconds from now (``budget=None`` and no deadline: forever), with
    the backoff of :func:`backoff_delays` (``first``, doubling, at most ``cap`` seconds: 0.5-5 s by
    default). No retry starts whose pause would end past the deadline.

    ``classify(exc)``: True when ``exc`` is worth another attempt; :func:`is_transient` by default.
    The last exception is re-raised when the time is up or the error is not retryable (see
    :class:`Attempts` for the 401/403 of a restarting apiserver, retried after a retryable error
    whatever ``classify`` says). ``attempts``: pass one to read its ``retries`` afterwards (also when
    the call raised). Returns what ``fn`` returned.
    """
    end = deadline if deadline is not None else (clock() + budget if budget else None)
    seen = attempts if attempts is not None else Attempts(clock)
    for delay in backoff_delays(first, cap):
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - classified below
            if not seen.retryable(exc, classify(exc)):
                raise
            if end is not None and clock() + delay > end:
                raise
            seen.retries += 1
            sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover


# poll_until's probe answers "not yet, but ask again at once" with this (see there).
AGAIN = object()


def poll_until(
    probe: Callable[[], tuple[Any, Any]],
    timeout: Optional[float],
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    first: float = 1.0,
    cap: float = 5.0,
) -> Any:
    """Call ``probe()`` until its answer is final or ``timeout`` seconds have passed (None: no bound).

    ``probe()`` returns ``(done, value)``: ``done`` True ends the poll with ``value``; False means not
    yet, with ``value`` the answer should the deadline have passed; :data:`AGAIN` means not yet, probe
    again at once without a pause (a write lost a race: decide again on fresh data). The deadline is
    checked after each answer that is not final, so ``probe`` runs at least once. Between probes it
    pauses along :func:`backoff_delays` (``first``, doubling, at most ``cap`` seconds: 1-5 s by
    default), never past the deadline. ``sleep``: the pause (pass ``wait.pause`` to keep heartbeats
    going). Returns the last ``value``.
    """
    end = None if timeout is None else clock() + timeout
    delays = backoff_delays(first, cap)
    while True:
        done, value = probe()
        if done is True or (end is not None and clock() >= end):
            return value
        if done is AGAIN:
            continue
        delay = next(delays)
        sleep(delay if end is None else max(0.0, min(delay, end - clock())))


# A retry_on_conflict step's or on_conflict's answer: "lost a race, read and decide again".
CONFLICT = object()
CONFLICT_STATUSES = (409,)


def retry_on_conflict(
    step: Callable[[int], Any],
    attempts: int,
    exhausted: Callable[[], Any],
    statuses: tuple[int, ...] = CONFLICT_STATUSES,
    on_conflict: Optional[Callable[[BaseException], Any]] = None,
) -> Any:
    """Optimistic concurrency: ``step(attempt)`` (attempt 0, 1, ...) reads the object, decides and writes
    with the resourceVersion it read, and returns the result. A write that lost a race -- an error
    whose HTTP ``status`` is in ``statuses`` (409 Conflict; a JSON patch's failed ``test`` is 422), or
    ``step`` returning :data:`CONFLICT` -- is followed by another step, at most ``attempts`` steps in
    all; then ``exhausted()`` is returned (it may raise instead).

    ``on_conflict(exc)``: called with such an error before the next step; it returns :data:`CONFLICT`
    to go on, anything else to end with that result (an earlier attempt's write turns out to have
    landed, its answer lost), or raises (someone else's move: stop). Other errors are raised as they are.
    """
    for attempt in range(attempts):
        try:
            result = step(attempt)
        except Exception as exc:  # noqa: BLE001 - only conflicts are taken here
            if getattr(exc, "status", None) not in statuses:
                raise
            result = on_conflict(exc) if on_conflict is not None else CONFLICT
        if result is not CONFLICT:
            return result
    return exhausted()
