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


# --- call(classify=...): a caller's own idea of what is worth another attempt ---


def test_classify_replaces_the_transient_rule():
    clock = Clock()
    refused = ApiException(status=429)
    fn, calls = flaky([refused, refused, ApiException(status=503)])
    with pytest.raises(ApiException) as err:
        k8s_retry.call(fn, budget=None, sleep=clock.sleep, clock=clock, classify=lambda e: e.status == 429)
    # two 429s retried (0.5 s, 1 s), the 503 is not this caller's transient error
    assert err.value.status == 503 and calls["n"] == 3 and clock.t == pytest.approx(1.5)


def test_first_and_cap_shape_the_backoff_and_the_deadline_stops_before_a_pause_past_it():
    clock = Clock()
    fn, calls = flaky([ValueError()] * 10)
    with pytest.raises(ValueError):
        k8s_retry.call(fn, deadline=9.0, sleep=clock.sleep, clock=clock, first=1.0, cap=2.0,
                       classify=lambda e: isinstance(e, ValueError))
    # pauses 1, 2, 2, 2, 2 (a pause ending exactly at the deadline is taken); the next would end at 11
    assert clock.t == pytest.approx(9.0) and calls["n"] == 6


# --- poll_until ---


def test_poll_until_returns_the_final_answer_after_1_2_4_s_pauses():
    clock = Clock()
    answers = iter([(False, "a"), (False, "b"), (False, "c"), (True, "done")])
    assert k8s_retry.poll_until(lambda: next(answers), 60, sleep=clock.sleep, clock=clock) == "done"
    assert clock.t == pytest.approx(1 + 2 + 4)


def test_poll_until_gives_the_last_answer_at_the_deadline_and_never_sleeps_past_it():
    clock = Clock()
    seen = []

    def probe():
        seen.append(clock.t)
        return False, "still %d" % len(seen)

    assert k8s_retry.poll_until(probe, 10, sleep=clock.sleep, clock=clock) == "still 5"
    assert seen == [0, 1, 3, 7, 10]  # the last pause is cut to the deadline (3 s, not 5)


def test_poll_until_probes_at_least_once_with_a_zero_timeout():
    clock = Clock()
    assert k8s_retry.poll_until(lambda: (False, "why"), 0, sleep=clock.sleep, clock=clock) == "why"
    assert clock.t == 0


def test_poll_until_again_skips_the_pause():
    clock = Clock()
    answers = iter([(k8s_retry.AGAIN, None), (k8s_retry.AGAIN, None), (True, "ok")])
    assert k8s_retry.poll_until(lambda: next(answers), None, sleep=clock.sleep, clock=clock) == "ok"
    assert clock.t == 0


def test_poll_until_without_timeout_keeps_going_at_the_cap():
    clock = Clock()
    answers = iter([(False, None)] * 6 + [(True, "ok")])
    assert k8s_retry.poll_until(lambda: next(answers), None, sleep=clock.sleep, clock=clock) == "ok"
    assert clock.t == pytest.approx(1 + 2 + 4 + 5 + 5 + 5)


# --- retry_on_conflict ---


def test_retry_on_conflict_steps_again_after_a_409_only():
    steps = []

    def step(attempt):
        steps.append(attempt)
        if attempt < 2:
            raise ApiException(status=409)
        return "written"

    assert k8s_retry.retry_on_conflict(step, 5, exhausted=lambda: "gave up") == "written"
    assert steps == [0, 1, 2]

    def fails(attempt):
        steps.append(attempt)
        raise ApiException(status=500)

    steps.clear()
    with pytest.raises(ApiException):
        k8s_retry.retry_on_conflict(fails, 5, lambda: None)
    assert steps == [0]  # not a conflict: raised at once


def test_retry_on_conflict_gives_up_after_the_attempts():
    steps = []

    def step(attempt):
        steps.append(attempt)
        return k8s_retry.CONFLICT

    assert k8s_retry.retry_on_conflict(step, 3, exhausted=lambda: "gave up") == "gave up"
    assert steps == [0, 1, 2]


def test_on_conflict_may_end_with_a_result_or_go_on():
    answers = iter([k8s_retry.CONFLICT, "it landed"])

    def step(attempt):
        raise ApiException(status=422)

    got = k8s_retry.retry_on_conflict(
        step, 5, lambda: "gave up", statuses=(409, 422), on_conflict=lambda e: next(answers)
    )
    assert got == "it landed"
