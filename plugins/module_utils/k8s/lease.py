# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""Run-wide maintenance lock as a ``coordination.k8s.io/v1`` Lease.

``decide_acquire`` / ``decide_release`` are pure (lease dict + holder + now -> decision);
``LeaseManager`` applies a decision with optimistic concurrency: create (409 if someone created it
first) or replace with the ``resourceVersion`` that was read (409 if someone wrote in between), and a
delete with a resourceVersion precondition. On a conflict the lease is read again and decided again,
so of two concurrent acquirers exactly one wins.

Every call goes through the transient-error retry of ``k8s_retry.call`` (``budget`` seconds each,
60 by default), so an API server restart does not fail the module. A write whose answer is lost is
sent again, and the repeat then fails its precondition (409: the lease exists / has a newer
resourceVersion; 404: it is already deleted). Such an answer is checked before it counts as a
conflict: a lease that now carries exactly the holder and renewTime this call wrote
(:func:`written_by_us`) is this call's own write; a 404 after a retried delete is this call's own
delete.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import time
from typing import Any, Mapping, Optional

from ansible_collections.npuops.fleet.plugins.module_utils.errors import FleetError
from ansible_collections.npuops.fleet.plugins.module_utils.k8s import retry as k8s_retry

DEFAULT_NAMESPACE = "kube-system"
DEFAULT_NAME = "npuops-fleet-maintenance-window"
MAX_CONFLICT_RETRIES = 5


def last_renewal(renewed_at: Optional[float], stamp: Optional[str]) -> float:
    """Epoch seconds of a run's last renewal known on this control node: the later of ``renewed_at``
    (the window's own) and the modification time of ``stamp``, the file a phase boundary touches after
    each renewal (npu_phase); 0.0 when neither says. A stamp that cannot be read counts as absent."""
    last = float(renewed_at or 0.0)
    if stamp:
        try:
            last = max(last, os.stat(stamp).st_mtime)
        except OSError:
            pass
    return last


class LeaseHeldError(FleetError):
    """Another holder's lease is still valid. ``lease``: the Lease as read ({} when unknown)."""

    def __init__(self, msg: str, lease: Optional[Mapping[str, Any]] = None):
        super().__init__(msg)
        self.lease = lease if lease is not None else {}


class LeaseConflictError(RuntimeError, FleetError):
    """MAX_CONFLICT_RETRIES writes in a row lost their race (many writers of one Lease at once): nothing
    is known to be wrong with the Lease; a keepalive retries at its next tick (window/run_lease.py)."""


class LeaseLostError(LeaseHeldError):
    """The run no longer holds its Lease: a renewal (``renew_only``) found it deleted or held by another
    run (it expired and was taken over), or the run's keepalive (window/run_lease.py) could not renew it
    within 2/3 of its TTL. The run is no longer exclusive and must stop, changing nothing more.

    The one lease-lost exception of the collection: npu_upgrade_lease and npu_phase report it, and a node
    upgrade treats it as its conflict (upgrade/node_upgrade.py: no abort, no failure mark on the Node)."""


def lost_message(name: str, namespace: str, holder: str, lease: Optional[Mapping[str, Any]],
                 now: dt.datetime) -> str:
    if lease is None:
        return ("lease %s/%s of %s is gone (deleted, or released after it expired): this run is no longer "
                "the only one in its maintenance window and stops" % (namespace, name, holder))
    st = lease_state(lease, now)
    return ("lease %s/%s is now held by %s (acquired %s), not %s: another run took it over; this run is no "
            "longer the only one in its maintenance window and stops"
            % (namespace, name, st["holder"] or "nobody", st["acquire_time"], holder))


def now_utc() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def fmt_time(t: dt.datetime) -> str:
    """MicroTime as the API serialises it: RFC 3339 with microseconds, UTC ``Z``."""
    return t.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: Optional[str]) -> Optional[dt.datetime]:
    if not value:
        return None
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)
    v = str(value).strip().replace("Z", "+00:00")
    try:
        return dt.datetime.fromisoformat(v)
    except ValueError:
        return None


def lease_state(lease: Optional[Mapping[str, Any]], now: dt.datetime) -> dict[str, Any]:
    """Holder, times and whether the lease is still valid (renewTime + leaseDurationSeconds > now).

    A lease with no holder, or no renew/acquire time, is free. Expiry uses renewTime (falling back to
    acquireTime) as the Kubernetes leader-election code does.
    """
    spec = (lease or {}).get("spec") or {}
    holder = spec.get("holderIdentity") or ""
    duration = spec.get("leaseDurationSeconds") or 0
    acquire = parse_time(spec.get("acquireTime"))
    renew = parse_time(spec.get("renewTime")) or acquire
    expires = renew + dt.timedelta(seconds=int(duration)) if renew and duration else None
    valid = bool(holder) and expires is not None and expires > now
    return {
        "holder": holder,
        "acquire_time": spec.get("acquireTime"),
        "renew_time": spec.get("renewTime"),
        "duration": duration,
        "expires": fmt_time(expires) if expires else None,
        "valid": valid,
        "transitions": spec.get("leaseTransitions") or 0,
    }


def decide_acquire(
    lease: Optional[Mapping[str, Any]], holder: str, now: dt.datetime, take_over: Optional[str] = None
) -> dict[str, Any]:
    """``{action, ...}`` with action create | renew | take_over | acquire_free | refuse.

    ``take_over``: the holder whose still-valid lease may be taken (an operator who knows that run
    is dead, e.g. its ansible-playbook was killed); any other valid holder is refused.
    """
    if lease is None:
        return {"action": "create"}
    st = lease_state(lease, now)
    if st["holder"] == holder:
        return {"action": "renew", "state": st}
    if not st["holder"]:
        return {"action": "acquire_free", "state": st}
    if st["valid"] and not (take_over and st["holder"] == take_over):
        return {"action": "refuse", "state": st}
    return {"action": "take_over", "state": st}


def decide_release(lease: Optional[Mapping[str, Any]], holder: str, now: dt.datetime) -> dict[str, Any]:
    """``{action}`` with action absent | release | not_ours (another holder; never deleted)."""
    if lease is None:
        return {"action": "absent"}
    st = lease_state(lease, now)
    if st["holder"] == holder:
        return {"action": "release", "state": st}
    return {"action": "not_ours", "state": st}


def new_spec(
    lease: Optional[Mapping[str, Any]], decision: Mapping[str, Any], holder: str, ttl: int, now: dt.datetime
) -> dict[str, Any]:
    """Spec to write for an acquire decision; renew keeps acquireTime, a new holder bumps transitions."""
    spec = dict((lease or {}).get("spec") or {})
    ts = fmt_time(now)
    if decision["action"] == "renew":
        spec.update(renewTime=ts, leaseDurationSeconds=int(ttl))
        spec.setdefault("acquireTime", ts)
        return spec
    spec.update(holderIdentity=holder, leaseDurationSeconds=int(ttl), acquireTime=ts, renewTime=ts)
    if decision["action"] in ("take_over", "acquire_free"):
        spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
    else:
        spec.setdefault("leaseTransitions", 0)
    return spec


def written_by_us(lease: Optional[Mapping[str, Any]], spec: Mapping[str, Any]) -> bool:
    """True when ``lease`` (as read now) carries the holderIdentity and renewTime of ``spec`` (the spec
    this call wrote): renewTime has microseconds and comes from this call's clock, so no other writer
    produces the same pair. Times are compared as instants (the API may reformat them)."""
    have = (lease or {}).get("spec") or {}
    if not have.get("holderIdentity") or have.get("holderIdentity") != spec.get("holderIdentity"):
        return False
    mine, now = parse_time(spec.get("renewTime")), parse_time(have.get("renewTime"))
    return mine is not None and mine == now


def renewed_since(now: Optional[Mapping[str, Any]], read: Optional[Mapping[str, Any]], holder: str) -> bool:
    """True when ``now`` is still ``holder``'s lease with a later renewTime than ``read`` (the version
    a renewal was based on): another renewal of the same holder won the race, which renews it too."""
    have, old = (now or {}).get("spec") or {}, (read or {}).get("spec") or {}
    if have.get("holderIdentity") != holder:
        return False
    t_now, t_old = parse_time(have.get("renewTime")), parse_time(old.get("renewTime"))
    return t_now is not None and (t_old is None or t_now > t_old)


def refuse_message(name: str, namespace: str, st: Optional[Mapping[str, Any]], now: dt.datetime) -> str:
    st = st or {}
    exp = parse_time(st.get("expires"))
    left = int((exp - now).total_seconds()) if exp else 0
    return (
        "lease %s/%s is held by %s since %s (renewed %s, expires %s, in %ds); another run is in its "
        "maintenance window. Wait, or release it from that run (state=absent with its holder); if that "
        "run is dead (killed), take the lease over explicitly with take_over=%s"
        % (namespace, name, st["holder"], st["acquire_time"], st["renew_time"], st["expires"], left, st["holder"])
    )


class LeaseManager:
    """Applies decisions against the API (CoordinationV1Api) with resourceVersion preconditions."""

    def __init__(
        self,
        api_client: Any,
        namespace: str,
        name: str,
        labels: Optional[Mapping[str, str]] = None,
        budget: float = k8s_retry.DEFAULT_BUDGET,
    ):
        """``budget``: seconds each API call may spend retrying transient errors (k8s_retry.call)."""
        from kubernetes import client as k8s

        self.k8s = k8s
        self.api = k8s.CoordinationV1Api(api_client)
        self.namespace = namespace
        self.name = name
        self.labels = dict(labels or {})
        self.requests = 0
        self.budget = budget

    def _call(self, fn: Any, *args: Any, attempts: Optional[k8s_retry.Attempts] = None, **kwargs: Any) -> Any:
        """One API call with the transient-error retry (``self.budget`` seconds)."""
        self.requests += 1
        return k8s_retry.call(fn, *args, budget=getattr(self, "budget", k8s_retry.DEFAULT_BUDGET),
                              attempts=attempts, **kwargs)

    def read(self) -> Optional[dict[str, Any]]:
        try:
            resp = self._call(self.api.read_namespaced_lease, self.name, self.namespace, _preload_content=False)
        except self.k8s.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return json.loads(resp.data)

    def _write(self, lease: Optional[Mapping[str, Any]], spec: Mapping[str, Any],
               annotations: Optional[Mapping[str, str]] = None) -> dict[str, Any]:
        """Create (``lease`` None) or replace with ``lease``'s resourceVersion; ``annotations``: set
        these (the others are kept). A 409 whose lease now shows this very ``spec``
        (:func:`written_by_us`: the answer to an earlier attempt was lost) returns that lease; any other
        409 is raised for the caller's read-and-decide-again."""
        try:
            return self._send(lease, spec, annotations)
        except self.k8s.ApiException as exc:
            if exc.status != 409:
                raise
            now = self.read()
            if now is not None and written_by_us(now, spec):
                return now
            raise

    def _send(self, lease: Optional[Mapping[str, Any]], spec: Mapping[str, Any],
              annotations: Optional[Mapping[str, str]] = None) -> dict[str, Any]:
        if lease is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace, "labels": self.labels,
                             **({"annotations": dict(annotations)} if annotations else {})},
                "spec": dict(spec),
            }
            resp = self._call(self.api.create_namespaced_lease, self.namespace, body, _preload_content=False)
        else:
            meta = dict(lease.get("metadata") or {})
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": self.name,
                    "namespace": self.namespace,
                    "resourceVersion": meta.get("resourceVersion"),
                    "labels": meta.get("labels") or self.labels,
                    "annotations": dict(meta.get("annotations") or {}, **dict(annotations or {})),
                },
                "spec": dict(spec),
            }
            resp = self._call(
                self.api.replace_namespaced_lease, self.name, self.namespace, body, _preload_content=False
            )
        return json.loads(resp.data)

    def acquire(
        self,
        holder: str,
        ttl: int,
        check_mode: bool = False,
        now_fn=now_utc,
        take_over: Optional[str] = None,
        renew_only: bool = False,
        sleep: Any = time.sleep,
        annotate: Optional[Any] = None,
        renewed_by_peer: Optional[Any] = None,
    ) -> dict[str, Any]:
        """Returns ``{action, changed, taken_over, previous, lease}``; raises LeaseHeldError.

        ``annotate(lease, decision, now)``: annotations to write with the same compare-and-swap (the
        shared window's record, window/run_lease.py) - a dict, or ``(dict, duration)`` to write that
        leaseDurationSeconds instead of ``ttl`` - or raises LeaseHeldError to refuse; called again on
        every read after a conflict. ``renewed_by_peer(now, read)``: with ``annotate``, whether a
        renewal that lost its race counts as made anyway (another lane of the same participant renewed).

        ``take_over``: see :func:`decide_acquire`. ``renew_only``: the caller holds the lease already
        (a run renewing it); anything but a renewal - the lease gone, or another holder's - raises
        :class:`LeaseLostError` instead of creating or taking it over again, as client-go's leader
        election never silently re-acquires a lease it lost. A 409 on a renewal whose re-read shows
        this holder renewed it meanwhile (the hosts of one run renew it together) counts as renewed.
        """

        def step(attempt: int) -> Any:
            lease = self.read()
            now = now_fn()
            decision = decide_acquire(lease, holder, now, take_over=take_over)
            previous = decision.get("state")
            if renew_only and decision["action"] != "renew":
                raise LeaseLostError(lost_message(self.name, self.namespace, holder, lease, now), lease or {})
            if decision["action"] == "refuse":
                raise LeaseHeldError(refuse_message(self.name, self.namespace, previous, now), lease or {})
            spec = new_spec(lease, decision, holder, ttl, now)
            anns = annotate(lease, decision, now) if annotate is not None else None
            if isinstance(anns, tuple):
                anns, duration = anns
                spec["leaseDurationSeconds"] = int(duration)
            if check_mode:
                meta = dict((lease or {}).get("metadata") or {})
                meta["annotations"] = dict(meta.get("annotations") or {}, **dict(anns or {}))
                return {"action": decision["action"], "changed": True, "previous": previous,
                        "lease": dict(lease or {}, spec=spec, metadata=meta)}
            try:
                written = self._write(lease, spec, anns)
            except self.k8s.ApiException as exc:
                if exc.status != 409:
                    raise
                # a renewal another host of the run made meanwhile renews this one too, unless this one
                # carries a record of its own to write
                if decision["action"] == "renew" and (annotate is None or renewed_by_peer is not None):
                    again = self.read()
                    if renewed_since(again, lease, holder) and (
                            renewed_by_peer is None or renewed_by_peer(again, lease)):
                        return {"action": "renew", "changed": True, "previous": previous, "lease": again}
                # lost a race: read again, decide again (spread out writers of one run)
                sleep(random.uniform(0.05, 0.25) * (attempt + 1))
                return k8s_retry.CONFLICT
            return {"action": decision["action"], "changed": True, "previous": previous, "lease": written}

        return k8s_retry.retry_on_conflict(step, MAX_CONFLICT_RETRIES, self._conflicts_exhausted)

    def _conflicts_exhausted(self) -> Any:
        raise LeaseConflictError(
            "lease %s/%s: %d conflicting writes in a row; giving up" % (self.namespace, self.name, MAX_CONFLICT_RETRIES)
        )

    def release(self, holder: str, check_mode: bool = False, now_fn=now_utc) -> dict[str, Any]:
        """Delete the lease if ``holder`` holds it (resourceVersion precondition; on a 409 it is read and
        decided again). Returns ``{action, changed, previous, lease}``."""

        def step(_attempt: int) -> Any:
            lease = self.read()
            decision = decide_release(lease, holder, now_fn())
            if decision["action"] != "release":
                return {"action": decision["action"], "changed": False, "previous": decision.get("state"),
                        "lease": lease}
            if check_mode:
                return {"action": "release", "changed": True, "previous": decision["state"], "lease": lease}
            rv = ((lease or {}).get("metadata") or {}).get("resourceVersion")
            attempts = k8s_retry.Attempts()
            try:
                self._call(
                    self.api.delete_namespaced_lease, self.name, self.namespace,
                    body=self.k8s.V1DeleteOptions(preconditions=self.k8s.V1Preconditions(resource_version=rv)),
                    attempts=attempts,
                )
            except self.k8s.ApiException as exc:
                if exc.status == 404 and attempts.retries:
                    # An earlier attempt of this very delete went through; its answer was lost.
                    return {"action": "release", "changed": True, "previous": decision["state"], "lease": None}
                if exc.status == 404:
                    return {"action": "absent", "changed": False, "previous": decision["state"], "lease": None}
                raise  # a 409 among them: retry_on_conflict reads and decides again
            return {"action": "release", "changed": True, "previous": decision["state"], "lease": None}

        return k8s_retry.retry_on_conflict(step, MAX_CONFLICT_RETRIES, self._conflicts_exhausted)
