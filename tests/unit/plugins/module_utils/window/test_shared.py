"""The shared maintenance window's record (window/shared.py): pure rules, hand-written expectations."""

from __future__ import annotations

import pytest

from ansible_collections.npuops.fleet.plugins.module_utils.window import shared

NV_A = "aaaaaaaaaaaaaaaa"
NV_B = "bbbbbbbbbbbbbbbb"
AMD_C = "cccccccccccccccc"
T0 = "2026-11-29T09:00:00.000000Z"
T1 = "2026-11-29T09:05:00.000000Z"
PROC = {"boot_id": "boot-1", "pid": 4242, "start": "123456"}


def record(**kw):
    rec = {
        "run_id": "R", "state": "open", "opened": T0, "targets": {"nvidia": NV_A},
        "max_failures": 0, "failures": {}, "stop_reason": None,
        "participants": {"p1": {"renewed": 1000.0, "ttl": 60, "joined": T0, "process": dict(PROC)}},
        "closed": None, "closed_by": None,
    }
    rec.update(kw)
    return rec


# --- join rules ---
def test_no_record_opens_a_new_window():
    action, rec = shared.decide_join({}, "R", {"nvidia": NV_A}, 2, T0)
    assert action == "new"
    assert rec == {
        "run_id": "R", "state": "open", "opened": T0, "targets": {"nvidia": [NV_A]},
        "max_failures": 2, "failures": {}, "stop_reason": None, "participants": {},
        "closed": None, "closed_by": None,
    }


def test_same_run_same_targets_joins_and_keeps_the_record():
    old = record(max_failures=3, failures={"n1": "boom"})
    action, rec = shared.decide_join(old, "R", {"nvidia": NV_A, "amd": AMD_C}, 0, T1)
    assert action == "join"
    # the opener's record stands: opened, budget, failures, participants; the new vendor is added
    assert rec["opened"] == T0 and rec["max_failures"] == 3 and rec["failures"] == {"n1": "boom"}
    assert rec["participants"] == {"p1": {"renewed": 1000.0, "ttl": 60, "joined": T0, "process": PROC}}
    assert rec["targets"] == {"nvidia": [NV_A], "amd": [AMD_C]}
    assert rec["state"] == "open"
    assert old["targets"] == {"nvidia": NV_A}  # the input is not changed


def test_same_run_stopping_window_may_still_be_joined():
    action, rec = shared.decide_join(record(state="stopping", stop_reason="n1 failed"), "R", {"nvidia": NV_A}, 0, T1)
    assert action == "join" and rec["state"] == "stopping" and rec["stop_reason"] == "n1 failed"


def test_same_run_another_digest_is_refused_naming_vendor_and_both_digests():
    old = record(targets={"nvidia": NV_A, "amd": AMD_C})
    with pytest.raises(shared.WindowRefused) as err:
        shared.decide_join(old, "R", {"nvidia": NV_B, "amd": AMD_C}, 0, T1)
    msg = str(err.value)
    assert "for nvidia " in msg
    assert "window: nvidia=%s" % NV_A in msg and "this process: nvidia=%s" % NV_B in msg
    assert "amd" not in msg  # only what differs is named


def test_same_run_closed_window_is_refused():
    old = record(state="closed", closed=T1, closed_by="p1", participants={})
    with pytest.raises(shared.WindowRefused, match="closed") as err:
        shared.decide_join(old, "R", {"nvidia": NV_A}, 0, T1)
    assert T1 in str(err.value) and "(by p1)" in str(err.value)


def test_another_runs_record_is_replaced_by_a_new_window():
    old = record(run_id="OLD", state="closed", closed=T0, closed_by="p1", failures={"n1": "x"})
    action, rec = shared.decide_join(old, "R", {"nvidia": NV_B}, 1, T1)
    assert action == "new"
    assert rec["run_id"] == "R" and rec["state"] == "open" and rec["opened"] == T1
    assert rec["targets"] == {"nvidia": [NV_B]} and rec["participants"] == {} and rec["failures"] == {}
    assert rec["closed"] is None and rec["closed_by"] is None and rec["max_failures"] == 1


# --- the failure budget ---
def test_budget_zero_first_failure_stops():
    rec = shared.with_failure(record(max_failures=0), "n1", "driver did not load")
    assert rec["state"] == "stopping" and rec["stop_reason"] == "driver did not load"
    assert rec["failures"] == {"n1": "driver did not load"}


def test_budget_one_second_distinct_node_stops():
    rec = shared.with_failure(record(max_failures=1), "n1", "first")
    assert rec["state"] == "open" and rec["stop_reason"] is None
    rec = shared.with_failure(rec, "n2", "second")
    assert rec["state"] == "stopping" and rec["stop_reason"] == "second"
    assert rec["failures"] == {"n1": "first", "n2": "second"}


def test_same_node_twice_counts_once():
    rec = shared.with_failure(record(max_failures=1), "n1", "first")
    rec = shared.with_failure(rec, "n1", "again")
    assert rec["state"] == "open" and rec["failures"] == {"n1": "again"}


def test_stopping_keeps_the_first_reason():
    rec = shared.with_failure(record(max_failures=0), "n1", "first")
    rec = shared.with_failure(rec, "n2", "second")
    assert rec["state"] == "stopping" and rec["stop_reason"] == "first"
    assert set(rec["failures"]) == {"n1", "n2"}
    rec = shared.with_stop(rec, "operator stop")
    assert rec["stop_reason"] == "first"


def test_failure_reason_is_one_line_and_bounded():
    rec = shared.with_failure(record(), "n1", "line one\nline two" + "x" * 1000)
    assert rec["failures"]["n1"].startswith("line one line two") and len(rec["failures"]["n1"]) == 300


def test_with_stop_moves_an_open_window_to_stopping():
    rec = shared.with_stop(record(), "refused by operator")
    assert rec["state"] == "stopping" and rec["stop_reason"] == "refused by operator"
    assert shared.with_stop(record(state="closed"), "late")["state"] == "closed"


# --- leave / close ---
def parts(**renewed):
    return {name: {"renewed": t, "ttl": 60, "joined": T0} for name, t in renewed.items()}


def test_last_live_participant_closes():
    action, rec, others = shared.decide_leave(record(participants=parts(p1=1000.0)), "p1", 1010.0, T1)
    assert action == "close" and others == []
    assert rec["state"] == "closed" and rec["closed"] == T1 and rec["closed_by"] == "p1"
    assert rec["participants"] == {}


def test_another_live_participant_keeps_the_window_open():
    action, rec, others = shared.decide_leave(record(participants=parts(p1=1000.0, p2=1005.0)), "p1", 1010.0, T1)
    assert action == "leave" and others == ["p2"]
    assert rec["state"] == "open" and rec["closed"] is None and list(rec["participants"]) == ["p2"]


def test_close_false_leaves_the_window_open():
    action, rec, others = shared.decide_leave(record(participants=parts(p1=1000.0)), "p1", 1010.0, T1, close=False)
    assert action == "leave" and others == [] and rec["state"] == "open"


def test_an_expired_participant_does_not_count():
    # p2 renewed at 900 with a 60 s lease: expired at 960 < 1010
    action, rec, others = shared.decide_leave(record(participants=parts(p1=1000.0, p2=900.0)), "p1", 1010.0, T1)
    assert action == "close" and others == [] and rec["closed_by"] == "p1"


def test_a_participant_whose_process_ended_is_swept():
    ps = parts(p1=1000.0, p2=1005.0, p3=1005.0)
    ps["p2"]["process"] = {"boot_id": "b", "pid": 7, "start": "1"}
    ps["p3"]["process"] = {"boot_id": "b", "pid": 8, "start": "1"}
    seen = []

    def gone(process):
        seen.append(process["pid"])
        return process["pid"] == 7

    action, rec, others = shared.decide_leave(record(participants=ps), "p1", 1010.0, T1, gone=gone)
    assert action == "leave" and others == ["p3"] and sorted(rec["participants"]) == ["p3"]
    assert sorted(seen) == [7, 8]
    # with only the dead one left, the leaver closes
    ps = parts(p1=1000.0, p2=1005.0)
    ps["p2"]["process"] = {"boot_id": "b", "pid": 7, "start": "1"}
    action, rec, _others = shared.decide_leave(record(participants=ps), "p1", 1010.0, T1, gone=gone)
    assert action == "close" and rec["participants"] == {}


def test_live_participants_with_but_and_expiry():
    rec = record(participants=dict(parts(b=1000.0, a=1000.0, old=900.0), weird="x"))
    assert shared.live_participants(rec, 1010.0) == ["a", "b"]
    assert shared.live_participants(rec, 1010.0, but="a") == ["b"]
    assert shared.live_participants(rec, 1060.0) == []  # renewed + ttl == now: expired
    assert shared.live_participants(rec, 1059.9) == ["a", "b"]


# --- stamp ---
def test_stamp_keeps_joined_and_process():
    rec = shared.stamp(record(), "p1", 90, 2000.1234, T1)
    assert rec["participants"]["p1"] == {"renewed": 2000.123, "ttl": 90, "joined": T0, "process": PROC}


def test_stamp_of_a_new_participant():
    rec = shared.stamp(record(), "p2", 60, 2000.0, T1, process={"boot_id": "b", "pid": 9, "start": "5"})
    assert rec["participants"]["p2"] == {"renewed": 2000.0, "ttl": 60, "joined": T1,
                                         "process": {"boot_id": "b", "pid": 9, "start": "5"}}
    assert rec["participants"]["p1"]["renewed"] == 1000.0  # the others are untouched
    rec = shared.stamp(record(), "p3", 60, 2000.0, T1)
    assert "process" not in rec["participants"]["p3"]


# --- stop message, digest, record I/O ---
def test_stop_message():
    assert shared.stop_message(record()) is None
    assert shared.stop_message(record(state="stopping", stop_reason="n1: no driver")) == (
        "maintenance window R stopped: n1: no driver")
    assert shared.stop_message(record(state="closed", closed=T1)) == "maintenance window R was closed at %s" % T1


def test_target_digest():
    pol = {"maxUnavailable": 1, "drain": {"enable": True, "timeoutSeconds": 300}}
    same = {"drain": {"timeoutSeconds": 300, "enable": True}, "maxUnavailable": 1}
    d = shared.target_digest("550.90.07", pol)
    assert len(d) == 16 and int(d, 16) >= 0
    assert shared.target_digest("550.90.07", same) == d
    assert shared.target_digest("550.90.12", pol) != d
    assert shared.target_digest("550.90.07", dict(pol, maxUnavailable=2)) != d
    assert shared.target_digest("550.90.07", {"drain": {"enable": False, "timeoutSeconds": 300},
                                              "maxUnavailable": 1}) != d


def test_read_tolerates_missing_and_garbage():
    assert shared.read(None) == {}
    assert shared.read({"metadata": {"annotations": {shared.ANNOTATION: "not json"}}}) == {}
    assert shared.read({"metadata": {"annotations": {shared.ANNOTATION: "[1, 2]"}}}) == {}
    assert shared.read({"metadata": {"annotations": {shared.ANNOTATION: '{"run_id": "R"}'}}}) == {"run_id": "R"}


def test_a_vendor_with_several_targets_joins_by_subset_widens_by_superset_and_refuses_a_disjoint_set():
    win = shared.decide_join({}, "R", {"nvidia": [NV_A, NV_B]}, 0, T0)[1]
    # a slice with some of the window's branches joins; the record keeps all of them
    want = ("join", dict(win, targets={"nvidia": [NV_A, NV_B]}))
    assert shared.decide_join(win, "R", {"nvidia": [NV_B]}, 0, T1) == want
    # an opener that saw one branch is widened by a process that brings it and another
    one = shared.decide_join({}, "R", {"nvidia": NV_A}, 0, T0)[1]
    assert shared.decide_join(one, "R", {"nvidia": [NV_A, NV_B]}, 0, T1)[1]["targets"] == {"nvidia": [NV_A, NV_B]}
    # neither holds the other: two inventories that disagree
    with pytest.raises(shared.WindowRefused, match="nvidia"):
        shared.decide_join(one, "R", {"nvidia": [NV_B]}, 0, T1)


def test_past_the_kept_reasons_only_the_count_grows_and_still_spends_the_budget():
    rec = dict(shared.new_record("R", {}, 1000, T0), failures={"n%d" % i: "x" for i in range(shared.FAILURES_KEPT)})
    rec = shared.with_failure(rec, "late", "y")
    assert len(rec["failures"]) == 300 and "late" not in rec["failures"] and rec["failures_more"] == 1
    rec = shared.with_failure(dict(rec, max_failures=300), "later", "z")
    assert rec["failures_more"] == 2 and rec["state"] == "stopping" and rec["stop_reason"] == "z"


def test_the_lease_lasts_as_long_as_its_longest_lived_participant_and_no_longer_than_a_week():
    rec = {"participants": {"a": {"renewed": 1000.0, "ttl": 4320}, "b": {"renewed": 1500.0, "ttl": 1800},
                            "dead": {"renewed": 0.0, "ttl": 60}, "junk": {"renewed": "x"}}}
    # at 1,600 s: a lasts until 5,320, b until 3,300: 3,720 s from now, more than the writer's own 1,800
    assert shared.duration(rec, 1600.0, 1800) == 3720
    assert shared.duration({}, 1600.0, 1800) == 1800
    huge = {"participants": {"x": {"renewed": 1600.0, "ttl": 1e300}, "y": {"renewed": 1600.0, "ttl": float("inf")}}}
    assert shared.duration(huge, 1600.0, 60) == 7 * 24 * 3600


def test_a_node_past_the_kept_reasons_that_fails_again_counts_once():
    rec = dict(shared.new_record("R", {}, 1000, T0), failures={"n%d" % i: "x" for i in range(shared.FAILURES_KEPT)})
    rec = shared.with_failure(shared.with_failure(rec, "late", "y"), "late", "y again")
    assert rec["failures_more"] == 1 and rec["failures_past"] == ["late"]
