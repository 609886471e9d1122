"""Lease decision logic and the optimistic-concurrency loop (fake API)."""

from __future__ import annotations

import datetime as dt
import json

import pytest
import urllib3
from kubernetes.client.rest import ApiException

from ansible_collections.npuops.fleet.plugins.module_utils.k8s import lease as L

NOW = dt.datetime(2026, 11, 29, 9, 30, tzinfo=dt.timezone.utc)


def lease(holder="a/1", renew_ago=10, duration=60, acquire_ago=100, rv="5"):
    return {
        "metadata": {"name": L.DEFAULT_NAME, "namespace": "kube-system", "resourceVersion": rv},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": duration,
            "acquireTime": L.fmt_time(NOW - dt.timedelta(seconds=acquire_ago)),
            "renewTime": L.fmt_time(NOW - dt.timedelta(seconds=renew_ago)),
            "leaseTransitions": 2,
        },
    }


def test_decide_acquire():
    assert L.decide_acquire(None, "a/1", NOW)["action"] == "create"
    assert L.decide_acquire(lease(), "a/1", NOW)["action"] == "renew"
    d = L.decide_acquire(lease(), "b/2", NOW)
    assert d["action"] == "refuse" and d["state"]["holder"] == "a/1" and d["state"]["valid"]
    assert L.decide_acquire(lease(renew_ago=61), "b/2", NOW)["action"] == "take_over"
    assert L.decide_acquire(lease(renew_ago=60), "b/2", NOW)["action"] == "take_over"  # renew+ttl == now: expired
    assert L.decide_acquire(lease(holder=""), "b/2", NOW)["action"] == "acquire_free"


def test_decide_release():
    assert L.decide_release(None, "a/1", NOW)["action"] == "absent"
    assert L.decide_release(lease(), "a/1", NOW)["action"] == "release"
    assert L.decide_release(lease(), "b/2", NOW)["action"] == "not_ours"


def test_new_spec():
    old = lease()
    s = L.new_spec(old, {"action": "renew"}, "a/1", 120, NOW)
    assert s["acquireTime"] == old["spec"]["acquireTime"] and s["renewTime"] == L.fmt_time(NOW)
    assert s["leaseDurationSeconds"] == 120 and s["leaseTransitions"] == 2
    s = L.new_spec(old, {"action": "take_over"}, "b/2", 60, NOW)
    assert s["holderIdentity"] == "b/2" and s["acquireTime"] == L.fmt_time(NOW) and s["leaseTransitions"] == 3
    s = L.new_spec(None, {"action": "create"}, "b/2", 60, NOW)
    assert s["leaseTransitions"] == 0


def test_refuse_message_names_holder_and_since():
    st = L.lease_state(lease(), NOW)
    msg = L.refuse_message(L.DEFAULT_NAME, "kube-system", st, NOW)
    assert "held by a/1 since 2026-11-29T09:28:20.000000Z" in msg and "in 50s" in msg


def test_parse_time_variants():
    assert L.parse_time("2026-11-29T09:30:00Z") == NOW
    assert L.parse_time("2026-11-29T09:30:00.000000Z") == NOW
    assert L.parse_time(None) is None and L.parse_time("garbage") is None


class FakeApiException(Exception):
    def __init__(self, status):
        super().__init__(status)
        self.status = status


class Resp:
    def __init__(self, obj):
        self.data = json.dumps(obj).encode()


class FakeK8s:
    ApiException = FakeApiException

    class V1DeleteOptions:
        def __init__(self, preconditions=None):
            self.preconditions = preconditions

    class V1Preconditions:
        def __init__(self, resource_version=None):
            self.resource_version = resource_version


class FakeApi:
    """In-memory lease store with resourceVersion checks; `interfere` runs before each write."""

    def __init__(self, obj=None):
        self.obj = obj
        self.rv = 10
        self.interfere = None

    def read_namespaced_lease(self, name, ns, **kw):
        if self.obj is None:
            raise FakeApiException(404)
        return Resp(self.obj)

    def _bump(self, body):
        self.rv += 1
        body = json.loads(json.dumps(body))
        body["metadata"]["resourceVersion"] = str(self.rv)
        self.obj = body
        return Resp(body)

    def create_namespaced_lease(self, ns, body, **kw):
        if self.interfere:
            f, self.interfere = self.interfere, None
            f(self)
        if self.obj is not None:
            raise FakeApiException(409)
        return self._bump(body)

    def replace_namespaced_lease(self, name, ns, body, **kw):
        if self.interfere:
            f, self.interfere = self.interfere, None
            f(self)
        if self.obj is None:
            raise FakeApiException(404)
        if body["metadata"]["resourceVersion"] != self.obj["metadata"]["resourceVersion"]:
            raise FakeApiException(409)
        return self._bump(body)

    def delete_namespaced_lease(self, name, ns, body=None, **kw):
        if self.obj is None:
            raise FakeApiException(404)
        if body.preconditions.resource_version != self.obj["metadata"]["resourceVersion"]:
            raise FakeApiException(409)
        self.obj = None


def manager(api):
    m = L.LeaseManager.__new__(L.LeaseManager)
    m.k8s, m.api, m.namespace, m.name, m.labels, m.requests = FakeK8s, api, "kube-system", L.DEFAULT_NAME, {}, 0
    return m


def test_manager_create_renew_release():
    api = FakeApi()
    m = manager(api)
    r = m.acquire("a/1", 60, now_fn=lambda: NOW)
    assert r["action"] == "create" and api.obj["spec"]["holderIdentity"] == "a/1"
    r = m.acquire("a/1", 60, now_fn=lambda: NOW + dt.timedelta(seconds=30))
    assert r["action"] == "renew"
    with pytest.raises(L.LeaseHeldError, match="held by a/1"):
        m.acquire("b/2", 60, now_fn=lambda: NOW + dt.timedelta(seconds=60))
    assert m.release("b/2", now_fn=lambda: NOW)["action"] == "not_ours" and api.obj is not None
    assert m.release("a/1", now_fn=lambda: NOW)["action"] == "release" and api.obj is None
    assert m.release("a/1", now_fn=lambda: NOW)["action"] == "absent"


def test_manager_check_mode_writes_nothing():
    api = FakeApi()
    r = manager(api).acquire("a/1", 60, check_mode=True, now_fn=lambda: NOW)
    assert r["changed"] and api.obj is None


def test_concurrent_create_exactly_one_wins():
    api = FakeApi()

    def other_creates(a):
        a._bump({"metadata": {"name": L.DEFAULT_NAME}, "spec": {
            "holderIdentity": "b/2", "leaseDurationSeconds": 60,
            "acquireTime": L.fmt_time(NOW), "renewTime": L.fmt_time(NOW)}})

    api.interfere = other_creates
    with pytest.raises(L.LeaseHeldError, match="held by b/2"):
        manager(api).acquire("a/1", 60, now_fn=lambda: NOW)
    assert api.obj["spec"]["holderIdentity"] == "b/2"


def test_concurrent_takeover_exactly_one_wins():
    api = FakeApi(lease(holder="old/0", renew_ago=600, rv="10"))

    def other_takes_over(a):
        spec = dict(a.obj["spec"], holderIdentity="b/2", renewTime=L.fmt_time(NOW), acquireTime=L.fmt_time(NOW))
        a._bump({"metadata": dict(a.obj["metadata"]), "spec": spec})

    api.interfere = other_takes_over
    with pytest.raises(L.LeaseHeldError, match="held by b/2"):
        manager(api).acquire("a/1", 60, now_fn=lambda: NOW)


def test_takeover_of_expired():
    api = FakeApi(lease(holder="old/0", renew_ago=600, rv="10"))
    r = manager(api).acquire("a/1", 60, now_fn=lambda: NOW)
    assert r["action"] == "take_over" and r["previous"]["holder"] == "old/0"
    assert api.obj["spec"]["leaseTransitions"] == 3


# --- API server outages: transient errors retried, lost answers recognised as this call's write ---
class RealApiException(ApiException):
    """kubernetes' ApiException (what k8s_retry classifies), built from a status."""

    def __init__(self, status):
        super().__init__(status=status, reason="status %d" % status)


class RealK8s(FakeK8s):
    ApiException = ApiException


class LossyApi(FakeApi):
    """FakeApi whose first ``down`` calls fail with connection refused (the apiserver is down) and
    whose write named by ``lose`` is applied but answered with a connection reset (answer lost)."""

    def __init__(self, obj=None, down=0, lose=None):
        super().__init__(obj)
        self.down, self.lose, self.calls = down, lose, []

    def _gate(self, what):
        self.calls.append(what)
        if self.down:
            self.down -= 1
            raise urllib3.exceptions.MaxRetryError(None, "/leases", ConnectionRefusedError(111, "refused"))

    def _maybe_lose(self, what):
        if self.lose == what:
            self.lose = None
            raise urllib3.exceptions.ProtocolError("Connection aborted.", ConnectionResetError(104, "reset"))

    def read_namespaced_lease(self, name, ns, **kw):
        self._gate("read")
        try:
            return super().read_namespaced_lease(name, ns, **kw)
        except FakeApiException as exc:
            raise RealApiException(exc.status)

    def create_namespaced_lease(self, ns, body, **kw):
        self._gate("create")
        try:
            resp = super().create_namespaced_lease(ns, body, **kw)
        except FakeApiException as exc:
            raise RealApiException(exc.status)
        self._maybe_lose("create")
        return resp

    def replace_namespaced_lease(self, name, ns, body, **kw):
        self._gate("replace")
        try:
            resp = super().replace_namespaced_lease(name, ns, body, **kw)
        except FakeApiException as exc:
            raise RealApiException(exc.status)
        self._maybe_lose("replace")
        return resp

    def delete_namespaced_lease(self, name, ns, body=None, **kw):
        self._gate("delete")
        try:
            super().delete_namespaced_lease(name, ns, body, **kw)
        except FakeApiException as exc:
            raise RealApiException(exc.status)
        self._maybe_lose("delete")


def real_manager(api):
    m = manager(api)
    m.k8s = RealK8s
    return m


def test_acquire_waits_out_an_outage():
    api = LossyApi(down=3)  # 0.5 + 1 + 2 s of refused connections
    r = real_manager(api).acquire("a/1", 60, now_fn=lambda: NOW)
    assert r["action"] == "create" and r["changed"] and api.obj["spec"]["holderIdentity"] == "a/1"
    assert api.calls == ["read"] * 4 + ["create"]


def test_lost_create_answer_is_our_create_not_a_conflict():
    api = LossyApi(lose="create")
    r = real_manager(api).acquire("a/1", 60, now_fn=lambda: NOW)
    # the repeat got 409 AlreadyExists; the lease shows our holder and renewTime: it was our write
    assert r["action"] == "create" and r["changed"]
    assert r["lease"]["spec"]["holderIdentity"] == "a/1" and r["lease"]["spec"]["renewTime"] == L.fmt_time(NOW)
    assert api.calls == ["read", "create", "create", "read"] and api.obj["spec"]["leaseTransitions"] == 0


def test_lost_renew_answer_is_our_renew():
    api = LossyApi(lease(holder="a/1", renew_ago=30, rv="10"), lose="replace")
    api.rv = 10
    r = real_manager(api).acquire("a/1", 60, now_fn=lambda: NOW)
    assert r["action"] == "renew" and r["lease"]["spec"]["renewTime"] == L.fmt_time(NOW)
    assert api.calls == ["read", "replace", "replace", "read"] and api.rv == 11  # written once


def test_conflict_from_another_writer_is_still_decided_again():
    # 409 whose lease shows another holder is not ours: read again and refuse.
    api = LossyApi()

    def other_creates(a):
        a._bump({"metadata": {"name": L.DEFAULT_NAME}, "spec": {
            "holderIdentity": "b/2", "leaseDurationSeconds": 60,
            "acquireTime": L.fmt_time(NOW), "renewTime": L.fmt_time(NOW)}})

    api.interfere = other_creates
    with pytest.raises(L.LeaseHeldError, match="held by b/2"):
        real_manager(api).acquire("a/1", 60, now_fn=lambda: NOW)


def test_lost_delete_answer_is_our_release():
    api = LossyApi(lease(holder="a/1", rv="10"), lose="delete")
    r = real_manager(api).release("a/1", now_fn=lambda: NOW)
    assert r["action"] == "release" and r["changed"] and api.obj is None
    assert api.calls == ["read", "delete", "delete"]


def test_delete_of_a_lease_someone_else_removed_is_absent():
    api = LossyApi(lease(holder="a/1", rv="10"))

    m = real_manager(api)
    original = api.delete_namespaced_lease

    def removed_first(name, ns, body=None, **kw):
        api.obj = None  # removed by an admin between our read and our delete
        return original(name, ns, body, **kw)

    api.delete_namespaced_lease = removed_first
    r = m.release("a/1", now_fn=lambda: NOW)
    assert r["action"] == "absent" and not r["changed"]


def test_written_by_us_compares_holder_and_renew_instant():
    spec = {"holderIdentity": "a/1", "renewTime": "2026-11-29T09:30:00.000000Z"}
    assert L.written_by_us({"spec": {"holderIdentity": "a/1", "renewTime": "2026-11-29T09:30:00Z"}}, spec)
    assert not L.written_by_us({"spec": {"holderIdentity": "b/2", "renewTime": "2026-11-29T09:30:00Z"}}, spec)
    assert not L.written_by_us({"spec": {"holderIdentity": "a/1", "renewTime": "2026-11-29T09:30:01Z"}}, spec)
    assert not L.written_by_us(None, spec)


def test_explicit_take_over_only_from_the_named_holder():
    # a valid lease of a run known to be dead is taken over only when that exact holder is named
    assert L.decide_acquire(lease(), "b/2", NOW, take_over="a/1")["action"] == "take_over"
    assert L.decide_acquire(lease(), "b/2", NOW, take_over="a/9")["action"] == "refuse"
    assert L.decide_acquire(lease(), "b/2", NOW, take_over="")["action"] == "refuse"
    assert L.decide_acquire(lease(), "a/1", NOW, take_over="a/1")["action"] == "renew"
    st = L.lease_state(lease(), NOW)
    assert "take_over=a/1" in L.refuse_message("x", "kube-system", st, NOW)


# --- renewals of a run (renew_only): never re-acquire silently; siblings of one run do not collide ---
def test_renew_only_renews_our_lease():
    api = FakeApi(lease(holder="a/1", renew_ago=10))
    r = manager(api).acquire("a/1", 60, now_fn=lambda: NOW, renew_only=True)
    assert r["action"] == "renew" and api.obj["spec"]["renewTime"] == L.fmt_time(NOW)


def test_renew_only_does_not_recreate_a_deleted_lease():
    api = FakeApi(None)
    with pytest.raises(L.LeaseLostError, match="is gone"):
        manager(api).acquire("a/1", 60, now_fn=lambda: NOW, renew_only=True)
    assert api.obj is None  # nothing created


def test_renew_only_does_not_take_back_a_lease_another_run_took_over():
    # our lease expired while we stalled; b/2 took it over and its lease has itself expired since:
    # a plain acquire would take it over again, a renewal must stop
    api = FakeApi(lease(holder="b/2", renew_ago=600, duration=60))
    with pytest.raises(L.LeaseLostError, match="now held by b/2"):
        manager(api).acquire("a/1", 60, now_fn=lambda: NOW, renew_only=True)
    assert api.obj["spec"]["holderIdentity"] == "b/2"


def test_a_renewal_that_loses_to_a_sibling_renewal_of_the_same_run_counts_as_renewed():
    # the hosts of one run renew together: between this call's read and write another host of the
    # same run renewed (new resourceVersion, later renewTime) - the 409 is not a lost race
    api = FakeApi(lease(holder="a/1", renew_ago=10))
    writes = []

    def sibling_renews(a):
        spec = dict(a.obj["spec"], renewTime=L.fmt_time(NOW + dt.timedelta(seconds=len(writes) + 1)))
        a._bump({"metadata": dict(a.obj["metadata"]), "spec": spec})
        writes.append(a.rv)

    naps = []
    for _renewal in range(20):
        api.interfere = sibling_renews
        r = manager(api).acquire("a/1", 60, now_fn=lambda: NOW + dt.timedelta(seconds=len(writes)), renew_only=True,
                                 sleep=naps.append)
        assert r["action"] == "renew"
    assert len(writes) == 20 and naps == []  # each answered at once, no retry loop
    assert api.obj["spec"]["holderIdentity"] == "a/1"


def test_a_renewal_that_loses_to_another_holder_is_lost():
    api = FakeApi(lease(holder="a/1", renew_ago=10))

    def other_takes_over(a):
        spec = dict(a.obj["spec"], holderIdentity="b/2", renewTime=L.fmt_time(NOW), acquireTime=L.fmt_time(NOW))
        a._bump({"metadata": dict(a.obj["metadata"]), "spec": spec})

    api.interfere = other_takes_over
    with pytest.raises(L.LeaseLostError, match="now held by b/2"):
        manager(api).acquire("a/1", 60, now_fn=lambda: NOW, renew_only=True, sleep=lambda s: None)


def test_last_renewal_is_the_later_of_the_windows_time_and_the_boundaries_stamp(tmp_path):
    import os

    stamp = tmp_path / "lease-renewed"
    assert L.last_renewal(None, None) == 0.0
    assert L.last_renewal(1000.0, str(stamp)) == 1000.0  # no stamp yet
    stamp.touch()
    os.utime(stamp, (2000.0, 2000.0))
    assert L.last_renewal(1000.0, str(stamp)) == 2000.0
    assert L.last_renewal(3000.0, str(stamp)) == 3000.0
    assert L.last_renewal(None, str(stamp)) == 2000.0
