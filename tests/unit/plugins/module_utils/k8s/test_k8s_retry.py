from __future__ import annotations

import pytest
from kubernetes.client.rest import ApiException

from ansible_collections.npuops.fleet.plugins.module_utils.k8s import retry as k8s_retry


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


def test_a_403_after_an_outage_is_retried_for_the_startup_grace():
    # A restarted apiserver answers 403 until its RBAC caches have synced.
    clock = Clock()
    fn, calls = flaky([ConnectionRefusedError(), ApiException(status=403), ApiException(status=401)])
    attempts = k8s_retry.Attempts(clock)
    assert k8s_retry.call(fn, budget=60, sleep=clock.sleep, clock=clock, attempts=attempts) == "ok"
    assert calls["n"] == 4 and attempts.retries == 3 and attempts.outage


def test_a_lasting_403_after_an_outage_is_raised_after_the_grace():
    clock = Clock()
    fn, calls = flaky([ConnectionRefusedError()] + [ApiException(status=403)] * 50)
    with pytest.raises(ApiException) as err:
        k8s_retry.call(fn, budget=120, sleep=clock.sleep, clock=clock)
    assert err.value.status == 403
    # first 403 at t=0.5; retried while less than 10 s had passed since it
    assert 10.5 <= clock.t <= 10.5 + 5 and calls["n"] < 8


def test_a_15s_outage_fits_the_default_budget():
    clock = Clock()
    fn, calls = flaky([ConnectionRefusedError()] * 7)  # 0.5+1+2+4+5+5+5 = 22.5 s of refusals
    assert k8s_retry.call(fn, sleep=clock.sleep, clock=clock) == "ok"
    assert clock.t == pytest.approx(22.5) and k8s_retry.DEFAULT_BUDGET >= 60


def test_attempts_counts_no_retry_for_a_first_answer():
    attempts = k8s_retry.Attempts()
    fn, calls = flaky([ApiException(status=404)])
    with pytest.raises(ApiException):
        k8s_retry.call(fn, sleep=lambda d: None, attempts=attempts)
    assert attempts.retries == 0 and not attempts.outage
