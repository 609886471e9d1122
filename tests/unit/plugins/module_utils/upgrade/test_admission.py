from __future__ import annotations

from ansible_collections.npuops.fleet.plugins.module_utils.driver.vendor_profiles import resolve_profile
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.admission import verdict
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.policy import parse_policy

NV = resolve_profile("nvidia")


def node(name, cordoned=False, ready=True, state=None):
    labels = {NV["upgrade_state_label"]: state} if state else {}
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"unschedulable": cordoned},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def test_admitted_when_below_max_unavailable():
    assert verdict(NV, parse_policy({}), "n1", [node("n0"), node("n1"), node("n2"), node("n3")]) is None


def test_waits_at_max_unavailable_cordoned_or_notready():
    nodes = [node("n0", cordoned=True), node("n1"), node("n2"), node("n3")]
    why = verdict(NV, parse_policy({}), "n1", nodes)
    assert why and "maxUnavailable 25%" in why and "n0" in why
    nodes = [node("n0", ready=False), node("n1"), node("n2"), node("n3")]
    assert verdict(NV, parse_policy({}), "n1", nodes)
    assert verdict(NV, parse_policy({"maxUnavailable": 2, "maxParallelUpgrades": 0}), "n1", nodes) is None


def test_self_already_unavailable_adds_nothing():
    nodes = [node("n0"), node("n1", cordoned=True), node("n2"), node("n3")]
    assert verdict(NV, parse_policy({}), "n1", nodes) is None


def test_max_parallel_upgrades():
    nodes = [node("n0", state=sm.DRAIN_REQUIRED), node("n1"), node("n2")]
    why = verdict(NV, parse_policy({"maxUnavailable": "100%"}), "n1", nodes)
    assert why and "maxParallelUpgrades 1" in why
    assert verdict(NV, parse_policy({"maxUnavailable": "100%", "maxParallelUpgrades": 0}), "n1", nodes) is None
    nodes[0] = node("n0", state=sm.UPGRADE_FAILED)
    assert verdict(NV, parse_policy({"maxUnavailable": "100%"}), "n1", nodes) is None


def test_a_stop_ends_the_wait_before_any_claim():
    import pytest

    from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import admission

    class NoSlots:
        def read(self):
            raise AssertionError("a stopped admission reads nothing")

    with pytest.raises(admission.AdmissionStopped, match="failure on h1"):
        admission.wait_admission(None, NoSlots(), NV, parse_policy({}), "n1", "tok", 10, stop=lambda: "failure on h1")


def test_a_stop_during_the_claim_gives_the_claim_back():
    import pytest
    from fake_k8s import FakeLeases

    from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import admission

    class Core:
        def list_node(self, label_selector=None, _preload_content=True, **kw):
            import json

            class R:
                data = json.dumps({"items": [node("n0"), node("n1"), node("n2"), node("n3")]}).encode()

            return R()

    slots = admission.Slots(FakeLeases(), NV)
    asked = []

    def stop():
        asked.append(1)
        return None if len(asked) == 1 else "failure on h0"

    with pytest.raises(admission.AdmissionStopped, match="failure on h0"):
        admission.wait_admission(Core(), slots, NV, parse_policy({}), "n1", "tok", 10, stop=stop)
    assert slots.live(slots.read()) == {}


class _Snap:
    def __init__(self, nodes, from_cache):
        self._nodes, self.from_cache = nodes, from_cache

    def nodes(self):
        return self._nodes


def _cached_then_fresh(monkeypatch, cached, now):
    from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import admission

    def snapshot(core, profile, fresh=False):
        return _Snap(now if fresh else cached, not fresh)

    monkeypatch.setattr(admission, "node_snapshot", snapshot)
    return admission


def test_another_runs_claim_on_a_node_the_cached_table_lacks_counts_and_stays(monkeypatch):
    """Run B claimed n9, labelled moments ago and missing from this control node's cached Table: the
    fresh read before the claim counts B's entry (maxUnavailable 1 reached) and never drops it."""
    import time

    from fake_k8s import FakeLeases

    cached = [node("n%d" % i) for i in range(4)]
    fresh = cached + [node("n9")]
    admission = _cached_then_fresh(monkeypatch, cached, fresh)
    slots = admission.Slots(FakeLeases(), NV)
    assert slots.write(slots.read(), {"n9": {"token": "run-b", "since": time.time(), "holder": "b/1"}})
    ticks = iter(range(100))
    since, why = admission.wait_admission(
        None, slots, NV, parse_policy({"maxUnavailable": 1}), "n1", "run-a", 2,
        sleep=lambda s: None, clock=lambda: next(ticks),
    )
    assert since is None and "maxUnavailable 1" in why and "n9" in why, why
    assert set(slots.read().entries) == {"n9"}
    # room for both: A claims n1 and writes B's n9 back with it
    since, why = admission.wait_admission(
        None, slots, NV, parse_policy({"maxUnavailable": 2, "maxParallelUpgrades": 2}), "n1", "run-a", 2,
        sleep=lambda s: None, clock=lambda: next(ticks),
    )
    assert why is None and set(slots.read().entries) == {"n1", "n9"}


def test_a_wait_for_a_verdict_admits_only_on_a_fresh_read(monkeypatch):
    cached = [node("n0"), node("n1"), node("n2"), node("n3")]
    fresh = [node("n0", cordoned=True), node("n1"), node("n2"), node("n3")]
    admission = _cached_then_fresh(monkeypatch, cached, fresh)
    ticks = iter(range(100))
    why = admission.wait_verdict(
        None, None, NV, parse_policy({}), "n1", 2, sleep=lambda s: None, clock=lambda: next(ticks)
    )
    assert why and "n0" in why


def test_a_wait_without_bound_gives_up_when_nothing_upgrades_that_could_free_a_lane(monkeypatch):
    """maxUnavailable 1 held by a node a failed upgrade left cordoned: no lane of any run frees it,
    so a rolling lane's unbounded wait ends STALLED_TIMEOUT after nothing else is upgrading; while
    another node upgrades it goes on."""
    from fake_k8s import FakeLeases

    failed = [node("n0", cordoned=True, state=sm.UPGRADE_FAILED), node("n1"), node("n2"), node("n3")]
    admission = _cached_then_fresh(monkeypatch, failed, failed)
    t = [0.0]

    def sleep(s):
        t[0] += s

    since, why = admission.wait_admission(
        None, admission.Slots(FakeLeases(), NV), NV, parse_policy({"maxUnavailable": 1}), "n1", "tok", None,
        sleep=sleep, clock=lambda: t[0], stalled_timeout=60,
    )
    assert since is None and "n0" in why and "no other node has been upgrading for 60s" in why
    assert 60 <= t[0] < 70

    upgrading = [node("n0", cordoned=True, state=sm.DRAIN_REQUIRED), node("n1"), node("n2"), node("n3")]
    admission = _cached_then_fresh(monkeypatch, upgrading, upgrading)
    t[0] = 0.0

    def sleep_until_it_is_done(s):
        t[0] += s
        if t[0] > 300:  # the other upgrade ends after 5 minutes, longer than the stall limit
            upgrading[0] = node("n0", state=sm.UPGRADE_DONE)

    since, why = admission.wait_admission(
        None, admission.Slots(FakeLeases(), NV), NV, parse_policy({"maxUnavailable": 1}), "n1", "tok", None,
        sleep=sleep_until_it_is_done, clock=lambda: t[0], stalled_timeout=60,
    )
    assert why is None and since is not None


def test_a_wait_for_a_verdict_ends_when_the_run_stops(monkeypatch):
    """A resumed node waiting to be admitted again: the stop file (or its playbook gone) ends the
    wait before it could go on to cordon anything."""
    import pytest

    held = [node("n0", cordoned=True), node("n1"), node("n2"), node("n3")]
    admission = _cached_then_fresh(monkeypatch, held, held)
    asked = []

    def stop():
        asked.append(1)
        return "failure on h0 (prepare): drain timed out" if len(asked) > 2 else None

    with pytest.raises(admission.AdmissionStopped, match="failure on h0"):
        admission.wait_verdict(None, None, NV, parse_policy({}), "n1", None, sleep=lambda s: None, stop=stop)
    assert len(asked) == 3


def test_an_entry_whose_claiming_process_ended_is_swept_and_a_live_ones_kept():
    import os
    import subprocess
    import sys

    from fake_k8s import FakeLeases

    from ansible_collections.npuops.fleet.plugins.module_utils.fleet import caller
    from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import admission

    if not os.path.exists("/proc/self/stat"):
        import pytest

        pytest.skip("no /proc")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.2)"])
    dead = caller.this_process(child.pid)
    child.wait()
    alive = caller.this_process()
    elsewhere = dict(dead, boot_id="another-machine")
    container = dict(dead, pidns="pid:[1]")  # another container of this machine: its pids are not ours
    slots = admission.Slots(FakeLeases(), NV)
    now = slots.clock()
    rec = admission.SlotRecord(None, {
        "n0": {"token": "a", "since": now, "process": dead},
        "n1": {"token": "b", "since": now, "process": alive},
        "n2": {"token": "c", "since": now, "process": elsewhere},  # not knowable here: its grace decides
        "n3": {"token": "d", "since": now},
        "n4": {"token": "e", "since": now, "process": container},
    })
    assert sorted(slots.live(rec)) == ["n1", "n2", "n3", "n4"]
