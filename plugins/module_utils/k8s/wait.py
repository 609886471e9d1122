# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""The one waiter: list, then watch from the list's resourceVersion until a predicate holds.

``wait_for(list_fn, predicate, timeout, **list_kwargs)`` keeps a cache of the listed objects
(plain API dicts, keyed by uid), applies every watch event to it and evaluates ``predicate(items)``
after the list and after each event. No fixed sleeps: a watch that ends (server timeout, 410 Gone,
transient error) is followed by a fresh list. ``timeout=None`` waits forever (the chart's 0).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from ansible_collections.npuops.fleet.plugins.module_utils.k8s import retry as k8s_retry

try:
    from kubernetes import watch as k8s_watch
except ImportError:  # pragma: no cover - reported by the module
    k8s_watch = None  # type: ignore[assignment]  # the module says kubernetes is missing

WATCH_CHUNK = 50  # seconds per watch request; the server closes it, we relist and go on

# A heartbeat is work that must go on while a module waits (renewing the run's Lease: a
# window/run_lease.LeaseKeepalive, cheap when not due as it rate-limits itself). The caller passes it
# to each wait - called at each list and watch event of wait_for, before each sleep of pauser() - and
# an exception it raises (the Lease is lost) ends the wait.


def pause(seconds: float) -> None:
    """``time.sleep`` for the waits' retry loops (no heartbeat; see :func:`pauser`)."""
    time.sleep(seconds)


def pauser(heartbeat: Optional[Callable[[], None]]) -> Callable[[float], None]:
    """A ``sleep(seconds)`` for the retry loops that calls ``heartbeat`` first (plain sleep without one)."""
    if heartbeat is None:
        return pause

    def sleep(seconds: float) -> None:
        heartbeat()
        time.sleep(seconds)

    return sleep


def _no_heartbeat() -> None:
    return None


@dataclass
class WaitResult:
    ok: bool
    items: list[dict[str, Any]] = field(default_factory=list)
    waited: float = 0.0


def list_raw(list_fn: Callable[..., Any], deadline: Optional[float] = None, **kwargs: Any) -> dict[str, Any]:
    """Call a list API without model deserialisation; returns the JSON dict (items, metadata)."""
    budget = None if deadline is not None else k8s_retry.DEFAULT_BUDGET
    resp = k8s_retry.call(list_fn, budget=budget, deadline=deadline, _preload_content=False, **kwargs)
    data = json.loads(resp.data)
    for item in data.get("items") or []:
        item.setdefault("kind", (data.get("kind") or "").replace("List", "") or None)
    return data


def wait_for(
    list_fn: Callable[..., Any],
    predicate: Callable[[list[dict[str, Any]]], bool],
    timeout: Optional[float],
    clock: Callable[[], float] = time.monotonic,
    heartbeat: Optional[Callable[[], None]] = None,
    **list_kwargs: Any,
) -> WaitResult:
    """Wait until ``predicate(items)`` is true for the objects ``list_fn(**list_kwargs)`` returns.

    ``heartbeat``: called at each list and each watch event (see above); None = nothing to keep alive."""
    if heartbeat is None:
        heartbeat = _no_heartbeat
    start = clock()
    end = None if timeout is None else start + timeout
    cache: dict[str, dict[str, Any]] = {}

    def remaining() -> Optional[float]:
        return None if end is None else end - clock()

    while True:
        heartbeat()
        try:
            data = list_raw(list_fn, deadline=end, **list_kwargs)
        except Exception as exc:  # noqa: BLE001
            if not k8s_retry.is_transient(exc):
                raise
            if end is not None and clock() >= end:
                return WaitResult(False, list(cache.values()), clock() - start)
            continue
        cache = {i["metadata"]["uid"]: i for i in data.get("items") or []}
        if predicate(list(cache.values())):
            return WaitResult(True, list(cache.values()), clock() - start)
        left = remaining()
        if left is not None and left <= 0:
            return WaitResult(False, list(cache.values()), clock() - start)
        chunk = WATCH_CHUNK if left is None else max(1, min(WATCH_CHUNK, int(left + 0.999)))
        watcher = k8s_watch.Watch()
        try:
            for event in watcher.stream(
                list_fn,
                resource_version=data["metadata"].get("resourceVersion"),
                timeout_seconds=chunk,
                deserialize=False,
                _request_timeout=chunk + 10,
                **list_kwargs,
            ):
                heartbeat()
                obj = event.get("object") or {}
                uid = (obj.get("metadata") or {}).get("uid")
                if uid is None:
                    continue
                if event.get("type") == "DELETED":
                    cache.pop(uid, None)
                elif event.get("type") in ("ADDED", "MODIFIED"):
                    cache[uid] = obj
                if predicate(list(cache.values())):
                    watcher.stop()
                    return WaitResult(True, list(cache.values()), clock() - start)
                left = remaining()
                if left is not None and left <= 0:
                    watcher.stop()
                    break
        except Exception as exc:  # noqa: BLE001 - 410 Gone and transient errors -> relist
            if getattr(exc, "status", None) != 410 and not k8s_retry.is_transient(exc):
                raise
            time.sleep(0.2)
        left = remaining()
        if left is not None and left <= 0:
            # One last look so a change that landed at the deadline still counts.
            data = list_raw(list_fn, **list_kwargs)
            items = data.get("items") or []
            return WaitResult(predicate(items), items, clock() - start)
