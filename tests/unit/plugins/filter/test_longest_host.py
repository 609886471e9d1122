"""Filter npuops.fleet.longest_host: the host whose window took longest on the wall clock, its waits
included, and its longest phase after the preflight (the summary's "longest host" line)."""

from __future__ import annotations

from ansible_collections.npuops.fleet.plugins.filter.longest_host import FilterModule


def phase(start, end, took):
    return {"started": "2027-01-15T08:" + start + "Z", "finished": "2027-01-15T08:" + end + "Z", "duration_s": took}


# A new user's window on the lab, batch size 1: lab-npu-0 was fourth in line and waited 27 s for its
# batch; its phases add up to about what lab-node-1's do, so only the wall clock tells them apart.
SUMMARY = {"hosts": [
    {"host": "lab-node-1", "phases": {
        "preflight": phase("00:00", "00:07", 6.7), "prepare": phase("00:09", "00:12", 3.4),
        "install": phase("00:12", "00:15", 3.0), "reload": phase("00:15", "00:17", 1.9),
        "verify": phase("00:17", "00:19", 2.2), "finish": phase("00:19", "00:21", 1.9)}},
    {"host": "lab-npu-0", "phases": {
        "preflight": phase("00:00", "00:07", 6.6), "prepare": phase("00:34", "00:38", 4.0),
        "install": phase("00:38", "00:40", 2.3), "reload": phase("00:40", "00:42", 1.4),
        "verify": phase("00:42", "00:44", 2.0), "finish": phase("00:44", "00:45", 1.9)}},
    {"host": "lab-node-0", "status": "already-at-target", "phases": {"preflight": phase("00:00", "00:08", 7.6)}},
    {"host": "lab-node-2", "status": "failed", "reason": "unreachable in the preflight"},
]}


def test_the_host_that_waited_for_its_batch_is_the_longest_and_says_so():
    longest = FilterModule().filters()["longest_host"]
    assert longest(SUMMARY) == {"host": "lab-npu-0", "span_s": 45.0, "waited_s": 27.0,
                                "phase": "prepare", "phase_s": 4.0}


def test_a_host_with_only_its_preflight_names_the_preflight_and_no_timed_host_gives_none():
    longest = FilterModule().filters()["longest_host"]
    only = {"hosts": [SUMMARY["hosts"][2], SUMMARY["hosts"][3]]}
    assert longest(only) == {"host": "lab-node-0", "span_s": 8.0, "waited_s": 0.0,
                             "phase": "preflight", "phase_s": 8.0}
    assert longest({"hosts": [SUMMARY["hosts"][3]]}) is None
    assert longest({}) is None
