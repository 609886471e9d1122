from __future__ import annotations

import functools
import itertools

import urllib3
from fake_k8s import Resp
from kubernetes.client.rest import ApiException

from ansible_collections.npuops.fleet.plugins.module_utils.k8s import wait as k8s_wait


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


def test_an_apiserver_restart_mid_watch_relists_and_goes_on(monkeypatch):
    """The watch breaks (connection reset), the relist is refused three times (0.5+1+2 s of backoff),
    then a 403 of the restarted apiserver's unsynced RBAC, then the list answers: the wait goes on from
    the fresh list and ends when the pod is gone."""
    pauses, slept = [], []
    monkeypatch.setattr(k8s_wait.time, "sleep", pauses.append)  # the pause before a relist
    monkeypatch.setattr(
        k8s_wait.k8s_retry, "call", functools.partial(k8s_wait.k8s_retry.call, sleep=slept.append)
    )

    def broken(**kw):
        yield {"type": "MODIFIED", "object": pod("a", "Running")}
        raise urllib3.exceptions.ProtocolError("Connection broken", ConnectionResetError(104, "reset"))

    class BreakingWatch(FakeWatch):
        def stream(self, fn, **kw):
            FakeWatch.calls.append(kw)
            if len(FakeWatch.calls) == 1:
                yield from broken()
            else:
                yield {"type": "DELETED", "object": pod("a", "Running")}

    monkeypatch.setattr(k8s_wait.k8s_watch, "Watch", BreakingWatch)
    FakeWatch.calls = []
    answers = [
        Resp({"items": [pod("a", "Running")], "metadata": {"resourceVersion": "7"}}),
        urllib3.exceptions.MaxRetryError(None, "/pods", ConnectionRefusedError(111, "refused")),
        urllib3.exceptions.MaxRetryError(None, "/pods", ConnectionRefusedError(111, "refused")),
        urllib3.exceptions.MaxRetryError(None, "/pods", ConnectionRefusedError(111, "refused")),
        ApiException(status=403, reason="Forbidden"),
        Resp({"items": [pod("a", "Running")], "metadata": {"resourceVersion": "9"}}),
    ]

    def list_fn(**kw):
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    res = k8s_wait.wait_for(list_fn, lambda items: not items, 300, field_selector="x")
    assert res.ok and res.items == [] and answers == []
    assert [c["resource_version"] for c in FakeWatch.calls] == ["7", "9"]
    assert slept == [0.5, 1.0, 2.0, 4.0] and pauses == [0.2]
