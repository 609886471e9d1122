"""WindowLease (window/run_lease.py) over a real LeaseManager (k8s/lease.py) and the in-memory
CoordinationV1Api of fake_k8s (resourceVersion bumped on every write; 409 on a stale resourceVersion
or an existing create; 404 on a missing Lease)."""

from __future__ import annotations

import time

import pytest
from fake_k8s import FakeLeases
from kubernetes import client as k8s_client

from ansible_collections.npuops.fleet.plugins.module_utils.k8s import lease as L
from ansible_collections.npuops.fleet.plugins.module_utils.window import shared
from ansible_collections.npuops.fleet.plugins.module_utils.window.run_lease import (
    RECORD_MAX_AGE,
    LeaseKeepalive,
    WindowLease,
)

NS = "kube-system"
NV_A = "aaaaaaaaaaaaaaaa"
NV_B = "bbbbbbbbbbbbbbbb"
AMD_C = "cccccccccccccccc"
PROC1 = {"boot_id": "boot-x", "pid": 101, "start": "5000"}


class Clock:
    def __init__(self, t=1000.0):
        self.t = t

    def __call__(self):
        return self.t


def manager(api):
    m = L.LeaseManager.__new__(L.LeaseManager)
    m.k8s, m.api, m.namespace, m.name, m.labels = k8s_client, api, NS, L.DEFAULT_NAME, {}
    m.requests, m.budget = 0, 5
    return m


def stored(api):
    return api.leases.get((NS, L.DEFAULT_NAME))


def rec_of(api):
    return shared.read(stored(api))


def snapshot(api):
    import copy

    return copy.deepcopy(stored(api))


@pytest.fixture
def two():
    """Participants p1 (opened the window, budget 0) and p2 (joined, adding amd) of run R."""
    api, clock = FakeLeases(), Clock()
    a = WindowLease(manager(api), "R", "p1", 60, clock=clock, process=PROC1)
    b = WindowLease(manager(api), "R", "p2", 60, clock=clock)
    ra = a.join({"nvidia": NV_A}, 0)
    rb = b.join({"nvidia": NV_A, "amd": AMD_C}, 5)
    return api, clock, a, b, ra, rb


def test_two_participants_join_the_same_run(two):
    api, _clock, _a, _b, ra, rb = two
    assert ra["action"] == "create" and ra["join"] == "new"
    assert rb["action"] == "renew" and rb["join"] == "join"
    lease = stored(api)
    assert lease["spec"]["holderIdentity"] == "R" and lease["spec"]["leaseDurationSeconds"] == 60
    rec = rec_of(api)
    assert rec["run_id"] == "R" and rec["state"] == "open"
    assert sorted(rec["participants"]) == ["p1", "p2"]
    assert rec["participants"]["p1"]["process"] == PROC1 and "process" not in rec["participants"]["p2"]
    assert rec["participants"]["p2"]["ttl"] == 60
    assert rec["targets"] == {"nvidia": [NV_A], "amd": [AMD_C]}
    assert rec["max_failures"] == 0  # the opener's budget, not the joiner's 5
    assert rb["record"] == rec


def test_a_third_with_another_target_is_refused_and_nothing_changes(two):
    api, clock, *_rest = two
    before = snapshot(api)
    c = WindowLease(manager(api), "R", "p3", 60, clock=clock)
    with pytest.raises(L.LeaseHeldError, match="nvidia") as err:
        c.join({"nvidia": NV_B}, 0)
    assert NV_A in str(err.value) and NV_B in str(err.value)
    assert stored(api) == before


def test_another_run_is_refused_while_the_lease_is_valid(two):
    api, clock, *_rest = two
    before = snapshot(api)
    with pytest.raises(L.LeaseHeldError, match="held by R "):
        WindowLease(manager(api), "R2", "q1", 60, clock=clock).join({"nvidia": NV_A}, 0)
    assert stored(api) == before


def test_a_failure_beyond_the_budget_stops_every_participant(two):
    api, clock, a, b, *_rest = two
    assert b.stop_reason() is None
    a.renew(failure=("n1", "driver did not load"))
    rec = rec_of(api)
    assert rec["state"] == "stopping" and rec["failures"] == {"n1": "driver did not load"}
    assert rec["stop_reason"] == "driver did not load"
    assert a.stop_reason() == "maintenance window R stopped: driver did not load"
    # b read the record when it joined: that read serves for RECORD_MAX_AGE seconds
    clock.t += RECORD_MAX_AGE / 2
    assert b.stop_reason() is None
    clock.t += RECORD_MAX_AGE / 2
    assert b.stop_reason() == "maintenance window R stopped: driver did not load"
    # a later renewal of b keeps the window stopping
    b.renew()
    assert rec_of(api)["state"] == "stopping"


def test_stop_moves_the_window_to_stopping(two):
    api, clock, a, b, *_rest = two
    b.renew(stop="operator refused")
    clock.t += RECORD_MAX_AGE
    assert a.stop_reason() == "maintenance window R stopped: operator refused"
    assert rec_of(api)["state"] == "stopping"


def test_leave_then_close_then_rejoin_rules(two):
    api, clock, a, b, *_rest = two
    r = a.leave()
    assert r["action"] == "leave" and r["changed"] and r["others"] == ["p2"]
    assert stored(api)["spec"]["holderIdentity"] == "R"
    assert sorted(rec_of(api)["participants"]) == ["p2"] and rec_of(api)["state"] == "open"

    r = b.leave()
    assert r["action"] == "close" and r["others"] == []
    lease = stored(api)
    assert not lease["spec"].get("holderIdentity")
    rec = rec_of(api)
    assert rec["state"] == "closed" and rec["closed_by"] == "p2" and rec["closed"]
    assert rec["participants"] == {}

    # a renewal after the close is lost
    with pytest.raises(L.LeaseLostError):
        b.renew()
    with pytest.raises(L.LeaseLostError):
        a.renew()

    # a late participant of the same run is refused: the window was closed
    before = snapshot(api)
    with pytest.raises(L.LeaseHeldError, match="closed"):
        WindowLease(manager(api), "R", "p3", 60, clock=clock).join({"nvidia": NV_A}, 0)
    assert stored(api) == before

    # a new run id opens a window of its own
    r = WindowLease(manager(api), "R2", "q1", 60, clock=clock).join({"nvidia": NV_B}, 1)
    assert r["join"] == "new" and r["action"] == "acquire_free"
    assert stored(api)["spec"]["holderIdentity"] == "R2"
    rec = rec_of(api)
    assert rec["run_id"] == "R2" and rec["state"] == "open" and list(rec["participants"]) == ["q1"]
    assert rec["targets"] == {"nvidia": [NV_B]} and rec["max_failures"] == 1 and rec["closed"] is None
    # the old run's participants see the Lease as not theirs
    clock.t += RECORD_MAX_AGE
    assert "gone or another run's" in a.stop_reason()
    with pytest.raises(L.LeaseLostError, match="held by R2"):
        a.renew()


def test_close_false_keeps_the_window_open(two):
    api, _clock, a, b, *_rest = two
    a.leave()
    r = b.leave(close=False)
    assert r["action"] == "leave" and r["others"] == []
    assert stored(api)["spec"]["holderIdentity"] == "R" and rec_of(api)["state"] == "open"


def test_a_conflicting_write_is_retried_and_both_stamps_survive(two):
    api, _clock, a, b, *_rest = two
    joined = rec_of(api)["participants"]
    original = api.replace_namespaced_lease
    calls = []
    b_stamp = {}

    def b_renews_first(name, namespace, body, _preload_content=True):
        calls.append(body["spec"]["renewTime"])
        if len(calls) == 1:
            # between a's read and a's write, b renews (resourceVersion moves on)
            api.replace_namespaced_lease = original
            time.sleep(0.005)
            b.renew()
            b_stamp.update(b.record["participants"]["p2"])
            api.replace_namespaced_lease = b_renews_first
            time.sleep(0.005)
        return original(name, namespace, body, _preload_content=_preload_content)

    time.sleep(0.005)
    api.replace_namespaced_lease = b_renews_first
    r = a.renew(failure=("n7", "timed out"))
    assert r["action"] == "renew"
    assert len(calls) == 2  # a's first write lost the race (409); a's second, on a fresh read, won
    rec = rec_of(api)
    assert rec["participants"]["p2"] == b_stamp and b_stamp["renewed"] > joined["p2"]["renewed"]
    assert rec["participants"]["p1"]["renewed"] > b_stamp["renewed"]
    assert rec["participants"]["p1"]["process"] == PROC1
    assert rec["failures"] == {"n7": "timed out"} and rec["state"] == "stopping"


def test_two_concurrent_leaves_close_the_window(two):
    # a 409 after another participant's leave must not be taken for this call's own write (the spec is
    # unchanged by a leave): else the leave is lost and nobody closes the window
    api, _clock, a, b, *_rest = two
    original = api.replace_namespaced_lease
    results = {}

    def b_leaves_first(name, namespace, body, _preload_content=True):
        api.replace_namespaced_lease = original
        results["b"] = b.leave()  # b read a as live: it leaves, the window stays open for a
        return original(name, namespace, body, _preload_content=_preload_content)

    api.replace_namespaced_lease = b_leaves_first
    results["a"] = a.leave()
    assert results["b"]["action"] == "leave"
    # a's write was based on the version before b's leave: it must be decided again, and then a is last
    assert results["a"]["action"] == "close"
    rec = rec_of(api)
    assert rec["participants"] == {} and rec["state"] == "closed"
    assert not stored(api)["spec"].get("holderIdentity")


def test_keepalive_renews_through_the_window():
    api, clock = FakeLeases(), Clock()
    a = WindowLease(manager(api), "R", "p1", 60, clock=clock)
    a.join({"nvidia": NV_A}, 0)
    first = rec_of(api)["participants"]["p1"]
    rv = stored(api)["metadata"]["resourceVersion"]
    mono = Clock(50.0)
    ka = LeaseKeepalive(manager(api), "R", 60, clock=mono, window=a)
    time.sleep(0.005)
    ka.tick()
    assert ka.renewals == 1 and stored(api)["metadata"]["resourceVersion"] != rv
    now = rec_of(api)["participants"]["p1"]
    assert now["renewed"] > first["renewed"] and now["joined"] == first["joined"]
    ka.tick()  # not due yet (interval 20 s)
    assert ka.renewals == 1
    # the window closed (p1 was the last and left): the next renewal stops the run
    assert a.leave()["action"] == "close"
    with pytest.raises(L.LeaseLostError):
        ka.tick(force=True)
