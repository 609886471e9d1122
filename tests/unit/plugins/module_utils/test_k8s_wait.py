from __future__ import annotations

import itertools

from fake_k8s import Resp

from ansible_collections.npuops.fleet.plugins.module_utils import k8s_wait


def pod(uid, phase):
    return {"metadata": {"uid": uid, "name": uid}, "status": {"phase": phase}}


class FakeWatch:
    streams: list = []
    calls: list = []

    def stream(self, fn, **kw):
        FakeWatch.calls.append(kw)
        yield from (FakeWatch.streams.pop(0) if FakeWatch.streams else [])

    def stop(self):
        pass


def lister(items):
    def list_fn(**kw):
        return Resp({"items": items, "metadata": {"resourceVersion": "7"}})

    return list_fn


def test_watch_events_end_the_wait(monkeypatch):
    monkeypatch.setattr(k8s_wait.k8s_watch, "Watch", FakeWatch)
    FakeWatch.calls = []
    FakeWatch.streams = [
        [{"type": "MODIFIED", "object": pod("a", "Running")}, {"type": "DELETED", "object": pod("a", "Running")}]
    ]
    res = k8s_wait.wait_for(lister([pod("a", "Running")]), lambda items: not items, 30, field_selector="x")
    assert res.ok and res.items == []
    assert FakeWatch.calls[0]["resource_version"] == "7" and FakeWatch.calls[0]["field_selector"] == "x"


def test_predicate_true_after_list_needs_no_watch(monkeypatch):
    monkeypatch.setattr(k8s_wait.k8s_watch, "Watch", FakeWatch)
    FakeWatch.calls = []
    assert k8s_wait.wait_for(lister([]), lambda items: not items, 30).ok
    assert FakeWatch.calls == []


def test_timeout_returns_not_ok(monkeypatch):
    monkeypatch.setattr(k8s_wait.k8s_watch, "Watch", FakeWatch)
    FakeWatch.streams = []
    ticks = itertools.count(0, 5)
    res = k8s_wait.wait_for(lister([pod("a", "Running")]), lambda items: not items, 12, clock=lambda: next(ticks))
    assert not res.ok and len(res.items) == 1
