"""The lab-test rotation (tests/integration/rotation.py): slots by identity, the stalest slot first,
the record and its Markdown. Expectations are literal or counted here, never from rotation.py."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "integration"))
import rotation  # noqa: E402

IDS = ["tests/integration/test_a.py::test_%d" % i for i in range(60)]


def test_slot_is_sha256_of_the_salted_id_modulo_n():
    ident = "tests/integration/test_safety.py::test_x"
    assert rotation.slot(ident, 3) == int(hashlib.sha256(b"152:" + ident.encode()).hexdigest()[:12], 16) % 3
    # literal values pinned once, so a changed hash (which would reshuffle every test) fails here
    assert rotation.slot("tests/integration/test_lease.py::test_acquire", 3) == 2
    assert rotation.slot("tests/integration/test_lease.py::test_acquire", 7) == 5


def test_adding_or_removing_tests_moves_no_other_test():
    before = {i: rotation.slot(i, 3) for i in IDS}
    grown = IDS[:10] + ["tests/integration/test_new.py::test_%d" % k for k in range(7)] + IDS[20:]
    assert {i: rotation.slot(i, 3) for i in grown if i in before} == {i: before[i] for i in grown if i in before}


def test_every_slot_gets_a_share():
    counts = [sum(rotation.slot(i, 3) == s for i in IDS) for s in range(3)]
    assert sum(counts) == 60 and min(counts) >= 10, counts


def test_without_a_record_the_counter_picks_the_slot():
    assert [rotation.choose(3, {0, 1, 2}, {}, c) for c in (0, 1, 2, 3, 4)] == [0, 1, 2, 0, 1]


def test_the_slot_attempted_longest_ago_comes_first_and_a_never_attempted_one_before_it():
    assert rotation.choose(3, {0, 1, 2}, {"0": 300.0, "1": 100.0, "2": 200.0}, counter=0) == 1
    assert rotation.choose(3, {0, 1, 2}, {"0": 300.0, "2": 200.0}, counter=0) == 1
    # an empty slot (no test hashes to it) is never chosen
    assert rotation.choose(3, {0, 2}, {"0": 300.0, "2": 200.0}, counter=1) == 2


def test_three_attempts_cover_every_test_and_new_tests_do_not_stall_the_rotation():
    slots: dict = {}
    ids = list(IDS)
    ran = set()
    picks = []
    for t in (100.0, 200.0, 300.0, 400.0, 500.0, 600.0):
        r = rotation.choose(3, {rotation.slot(i, 3) for i in ids}, slots, counter=7)
        picks.append(r)
        ran |= {i for i in ids if rotation.slot(i, 3) == r}
        slots[str(r)] = t
        # every landing adds a test to slot 0: the rotation moves on all the same
        ids.append(next("tests/integration/test_new.py::t%d" % k for k in range(500)
                        if rotation.slot("tests/integration/test_new.py::t%d" % k, 3) == 0
                        and "tests/integration/test_new.py::t%d" % k not in ids))
    assert ran >= set(IDS)
    assert sorted(picks[:3]) == [0, 1, 2] and picks[3:] == picks[:3], picks


def test_failing_lists_the_tests_whose_last_outcome_was_a_failure_or_an_error():
    seen = {"a": {"outcome": "passed"}, "b": {"outcome": "failed"}, "c": {"outcome": "error"},
            "d": {"outcome": "skipped"}, "e": {}}
    assert rotation.failing(seen) == ["b", "c"]


def test_the_record_is_updated_under_a_lock(tmp_path):
    path = tmp_path / "rec.json"
    with rotation.updating(path) as data:
        rotation.note_result(data, "faults", "dpkg-lock", "passed", 10.0, "abc", "case")
    with rotation.updating(path) as data:
        rotation.note_slot(data, 3, 2, 20.0)
    back = rotation.load(path)
    assert back["faults"]["dpkg-lock"]["ran_ts"] == 10.0 and back["slots"] == {"3": {"2": 20.0}}
    assert (tmp_path / "rec.json.lock").exists()


def test_stalest_cases_never_run_first_then_oldest():
    names = ["a", "b", "c", "d", "e"]
    assert rotation.stalest(names, 2, {}, 0) == ["a", "b"]
    assert rotation.stalest(names, 2, {}, 1) == ["c", "d"]
    seen = {"a": {"ran_ts": 5}, "b": {"ran_ts": 5}, "c": {"ran_ts": 1}, "d": {"ran_ts": 9}, "e": {"ran_ts": 9}}
    assert rotation.stalest(names, 2, seen, 0) == ["a", "c"]
    assert rotation.stalest(names, 9, seen, 0) == names


def test_record_round_trip_and_markdown(tmp_path):
    path = tmp_path / "rec.json"
    data = rotation.load(path)
    assert data == {"lab": {}, "faults": {}, "runs": [], "slots": {}}
    rotation.note_result(data, "lab", "t.py::x", "failed", 0.0, "abc", "1/3")
    rotation.note_result(data, "lab", "t.py::y", "passed", 86400.0, "abc", "1/3")
    rotation.note_result(data, "lab", "t.py::z", "error", 86400.0, "abc", "1/3")
    rotation.note_slot(data, 3, 1, 86400.0)
    data["lab_ids"] = ["t.py::x", "t.py::y", "t.py::z", "t.py::new"]
    rotation.note_run(data, {"when": "w", "kind": "lab", "rotation": "1/3", "commit": "abc", "ran": 2,
                             "passed": 1, "failed": 2})
    rotation.save(data, path)
    back = rotation.load(path)
    assert back["lab"]["t.py::y"]["passed"] == "1970-01-02 00:00 UTC"
    assert "passed" not in back["lab"]["t.py::x"] and back["lab"]["t.py::x"]["outcome"] == "failed"
    assert "ran_ts" not in back["lab"]["t.py::z"]  # a setup error did not run the test
    assert back["slots"] == {"3": {"1": 86400.0}}
    md = rotation.render(back, 3)
    assert "| `t.py::x` | %d | 1970-01-01 00:00 UTC | failed | 1/3 | abc | never |" % rotation.slot("t.py::x", 3) in md
    assert "| `t.py::new` | %d | never | - | - | - | never |" % rotation.slot("t.py::new", 3) in md
    assert "| `t.py::z` | %d | never | error | 1/3 | abc | never |" % rotation.slot("t.py::z", 3) in md
    assert "Slots, last attempted: 0: never, 1: 1970-01-02 00:00 UTC, 2: never." in md
    assert "4 lab tests known, 3 never passed on this machine: `t.py::new`, `t.py::x`, `t.py::z`" in md
    assert "| w | lab | 1/3 | abc | 2 | 1 | 2 |" in md


@pytest.mark.parametrize("text", ["", "[]", "{not json", '{"lab": [], "runs": {}}'])
def test_a_broken_record_reads_as_empty(tmp_path, text):
    path = tmp_path / "rec.json"
    path.write_text(text)
    assert rotation.load(path) == {"lab": {}, "faults": {}, "runs": [], "slots": {}}
