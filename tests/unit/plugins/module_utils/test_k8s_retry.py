from __future__ import annotations

import pytest
from kubernetes.client.rest import ApiException

from ansible_collections.npuops.fleet.plugins.module_utils import k8s_retry


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t

    def sleep(self, d):
        self.t += d


def flaky(errors):
    calls = {"n": 0}

    def fn():
        calls["n"] += 1
        if errors:
            raise errors.pop(0)
        return "ok"

    return fn, calls


def test_retries_transient_then_succeeds():
    clock = Clock()
    fn, calls = flaky([ApiException(status=503), ConnectionRefusedError(), ApiException(status=429)])
    assert k8s_retry.call(fn, budget=30, sleep=clock.sleep, clock=clock) == "ok"
    assert calls["n"] == 4 and clock.t == pytest.approx(0.5 + 1 + 2)


def test_non_transient_raises_at_once():
    fn, calls = flaky([ApiException(status=403)])
    with pytest.raises(ApiException):
        k8s_retry.call(fn, budget=30, sleep=lambda d: None)
    assert calls["n"] == 1


def test_budget_bounds_retries():
    clock = Clock()
    fn, calls = flaky([ApiException(status=500)] * 100)
    with pytest.raises(ApiException):
        k8s_retry.call(fn, budget=10, sleep=clock.sleep, clock=clock)
    assert clock.t <= 10 and calls["n"] < 10
