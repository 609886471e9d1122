# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""Retry of transient Kubernetes API failures with capped exponential backoff inside a time budget.

Transient: connection refused/reset, timeouts, HTTP 5xx and 429 (API priority and fairness / rate
limiting). A 429 answered to an *eviction* is a PodDisruptionBudget refusal and is handled by
``drain.py`` itself, so eviction calls do not go through :func:`call`.

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
    **kwargs: Any,
) -> Any:
    """Call ``fn`` and retry transient failures until ``deadline`` (monotonic) or ``budget`` seconds
    (``budget=None`` and no deadline: forever), with the 0.5-5 s backoff of :func:`backoff_delays`.

    The last exception is re-raised when the time is up or the error is not transient (see
    :class:`Attempts` for the 401/403 of a restarting apiserver). ``attempts``: pass one to read its
    ``retries`` afterwards (also when the call raised).
    """
    end = deadline if deadline is not None else (clock() + budget if budget else None)
    seen = attempts if attempts is not None else Attempts(clock)
    for delay in backoff_delays():
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - classified below
            if not seen.retryable(exc, is_transient(exc)):
                raise
            if end is not None and clock() + delay > end:
                raise
            seen.retries += 1
            sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover
