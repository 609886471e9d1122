"""Lease decision logic and the optimistic-concurrency loop (fake API)."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from ansible_collections.npuops.fleet.plugins.module_utils import lease as L

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
