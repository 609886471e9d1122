# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Retry of transient Kubernetes API failures with capped exponential backoff inside a time budget.

Transient: connection refused/reset, timeouts, HTTP 5xx and 429 (API priority and fairness / rate
limiting). A 429 answered to an *eviction* is a PodDisruptionBudget refusal and is handled by
``drain.py`` itself, so eviction calls do not go through :func:`call`.
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


def call(
    fn: Callable[..., Any],
    *args: Any,
    budget: Optional[float] = DEFAULT_BUDGET,
    deadline: Optional[float] = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    **kwargs: Any,
) -> Any:
    """Call ``fn`` and retry transient failures until ``deadline`` (monotonic) or ``budget`` seconds.

    The last exception is re-raised when the time is up or the error is not transient.
    """
    end = deadline if deadline is not None else (clock() + budget if budget else None)
    for delay in backoff_delays():
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - classified below
            if not is_transient(exc):
                raise
            if end is not None and clock() + delay > end:
                raise
            sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover
