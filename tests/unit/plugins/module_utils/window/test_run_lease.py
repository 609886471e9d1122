"""LeaseKeepalive: renews on schedule, stops the run when another run holds the Lease."""

from __future__ import annotations

import pytest

from ansible_collections.npuops.fleet.plugins.module_utils.k8s.lease import LeaseHeldError, LeaseLostError
from ansible_collections.npuops.fleet.plugins.module_utils.window.run_lease import LeaseKeepalive


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


class Manager:
    """Records acquire calls; ``answers`` is a list of exceptions (or None for success) in order."""

    def __init__(self, answers=None):
        self.calls = []
        self.answers = list(answers or [])

    def acquire(self, holder, ttl, renew_only=False):
        assert renew_only, "a keepalive only renews: it never re-creates or takes over the Lease"
        self.calls.append((holder, ttl))
        answer = self.answers.pop(0) if self.answers else None
        if answer is not None:
            raise answer
        return {"action": "renew"}


def test_renews_every_third_of_the_ttl():
    clock, mgr = Clock(), Manager()
    ka = LeaseKeepalive(mgr, "ctl/run-1", 90, clock=clock)
    ka.tick()
    assert mgr.calls == [("ctl/run-1", 90)]
    clock.t += 29
    ka.tick()
    assert len(mgr.calls) == 1  # not due before 30 s
    clock.t += 1
    ka.tick()
    assert len(mgr.calls) == 2
    ka.tick(force=True)
    assert len(mgr.calls) == 3


def test_another_holder_stops_the_run():
    mgr = Manager([LeaseHeldError("lease kube-system/x is held by other/run-2", {})])
    with pytest.raises(LeaseLostError, match="other/run-2"):
        LeaseKeepalive(mgr, "ctl/run-1", 90, clock=Clock()).tick()


def test_transient_errors_are_tolerated_until_two_thirds_of_the_ttl():
    clock = Clock()
    mgr = Manager([ConnectionRefusedError("connection refused")] * 10)
    ka = LeaseKeepalive(mgr, "ctl/run-1", 60, interval=10, clock=clock)
    for _step in range(4):  # 0..30 s without a renewal: still ours for sure
        ka.tick()
        clock.t += 10
    # 40 s = 2/3 of the 60 s TTL: stop before another run (another clock) may see it expired
    with pytest.raises(LeaseLostError, match="40 s"):
        ka.tick()


def test_the_deadline_counts_from_the_control_nodes_last_renewal():
    """The control node renewed 20 s before this module started (it renews at most every ttl/3):
    with the API down, the module gives up 20 s sooner than a fresh count would."""
    clock = Clock()
    mgr = Manager([ConnectionRefusedError("connection refused")] * 10)
    ka = LeaseKeepalive(mgr, "ctl/run-1", 60, interval=10, clock=clock, renewed_age=20)
    ka.tick()
    clock.t += 10
    ka.tick()  # 30 s since the renewal
    clock.t += 10
    with pytest.raises(LeaseLostError, match="40 s"):
        ka.tick()


def test_a_lost_lease_is_the_one_lease_lost_error():
    # what a node upgrade makes of it (a conflict: nothing undone) is upgrade/test_lease_lost.py's
    mgr = Manager([LeaseLostError("lease kube-system/x is gone", {})])
    with pytest.raises(LeaseLostError, match="is gone") as err:
        LeaseKeepalive(mgr, "ctl/run-1", 60, clock=Clock()).tick()
    assert isinstance(err.value.__cause__, LeaseLostError)


def test_other_errors_propagate():
    mgr = Manager([ValueError("bad")])
    with pytest.raises(ValueError):
        LeaseKeepalive(mgr, "ctl/run-1", 60, clock=Clock()).tick()
