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


def test_without_a_record_the_commit_count_picks_the_slot():
    assert [rotation.choose(IDS, 3, {}, c) for c in (0, 1, 2, 3, 4)] == [0, 1, 2, 0, 1]


def test_the_slot_with_the_test_run_least_recently_comes_first():
    seen = {i: {"ran_ts": 1000.0} for i in IDS}
    one = next(i for i in IDS if rotation.slot(i, 3) == 2)
    seen[one] = {"ran_ts": 10.0}
    assert rotation.choose(IDS, 3, seen, counter=0) == 2
    # a test never seen (new, or renamed) is staler than any
    new = next("tests/integration/test_new.py::t%d" % k for k in range(50)
               if rotation.slot("tests/integration/test_new.py::t%d" % k, 3) == 1)
    assert rotation.choose(IDS + [new], 3, seen, counter=0) == 1


def test_three_runs_recorded_in_turn_cover_every_test():
    seen: dict = {}
    ran = set()
    for t, counter in ((100.0, 7), (200.0, 7), (300.0, 7)):  # the same commit count: the record decides
        r = rotation.choose(IDS, 3, seen, counter)
        for i in IDS:
            if rotation.slot(i, 3) == r:
                seen[i] = {"ran_ts": t}
                ran.add(i)
    assert ran == set(IDS)


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
    assert data == {"lab": {}, "faults": {}, "runs": []}
    rotation.note_result(data, "lab", "t.py::x", "failed", 0.0, "abc", "1/3")
    rotation.note_result(data, "lab", "t.py::y", "passed", 86400.0, "abc", "1/3")
    rotation.note_run(data, {"when": "w", "kind": "lab", "rotation": "1/3", "commit": "abc", "ran": 2,
                             "passed": 1, "failed": 1})
    rotation.save(data, path)
    back = rotation.load(path)
    assert back["lab"]["t.py::y"]["passed"] == "1970-01-02 00:00 UTC"
    assert "passed" not in back["lab"]["t.py::x"] and back["lab"]["t.py::x"]["outcome"] == "failed"
    md = rotation.render(back, 3)
    assert "| `t.py::x` | %d | 1970-01-01 00:00 UTC | failed | 1/3 | abc | never |" % rotation.slot("t.py::x", 3) in md
    assert "| w | lab | 1/3 | abc | 2 | 1 | 1 |" in md


@pytest.mark.parametrize("text", ["", "[]", "{not json", '{"lab": [], "runs": {}}'])
def test_a_broken_record_reads_as_empty(tmp_path, text):
    path = tmp_path / "rec.json"
    path.write_text(text)
    assert rotation.load(path) == {"lab": {}, "faults": {}, "runs": []}
