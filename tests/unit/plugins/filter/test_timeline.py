"""Filter npuops.fleet.timeline_svg: the window's summary (or plan) as an SVG timeline."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from ansible_collections.npuops.fleet.plugins.filter.timeline import FilterModule, timeline_svg

NS = "{http://www.w3.org/2000/svg}"
REASON = 'apt said <no> & "quit"'


def phase(start, end, took):
    return {"started": "2027-01-15T" + start + "Z", "finished": "2027-01-15T" + end + "Z", "duration_s": took}


SUMMARY = {
    "schema_version": 1,
    "run_id": "20270115T080000Z-1",
    "started": "2027-01-15T08:00:00Z",
    "finished": "2027-01-15T08:01:40Z",
    "result": "failed",
    "rollout": "rolling",
    "batch_size": 2,
    "hosts": [
        {
            "host": "n1",
            "status": "upgraded",
            "reason": None,
            "started": "2027-01-15T08:00:00Z",
            "finished": "2027-01-15T08:01:16Z",
            "phases": {
                "finish": phase("08:01:12", "08:01:16", 4.0),
                "install": phase("08:00:46", "08:00:58", 12.0),
                "preflight": phase("08:00:00", "08:00:20", 20.0),
                "prepare": phase("08:00:30", "08:00:46", 16.0),
                "reload": phase("08:00:58", "08:01:08", 10.0),
                "verify": phase("08:01:08", "08:01:12", 4.0),
            },
        },
        {
            "host": "n2",
            "status": "failed",
            "reason": REASON,
            "failed_phase": "install",
            "started": "2027-01-15T08:00:00Z",
            "finished": "2027-01-15T08:01:40Z",
            "phases": {
                "preflight": phase("08:00:00", "08:00:20", 20.0),
                "prepare": phase("08:01:10", "08:01:30", 20.0),
                "install": phase("08:01:30", "08:01:40", 10.0),
            },
        },
        {
            "host": "a1",
            "status": "already-at-target",
            "reason": None,
            "started": "2027-01-15T08:00:00Z",
            "finished": "2027-01-15T08:00:05Z",
            "phases": {},
        },
        {"host": "s1", "status": "skipped", "reason": "skip label <set>", "started": "2027-01-15T08:00:01Z"},
        {"host": "u1", "status": "failed", "reason": "unreachable or no result in the preflight"},
    ],
}


def parse(svg):
    assert svg.startswith('<?xml version="1.0" encoding="UTF-8"?>\n')
    root = ET.fromstring(svg.encode("utf-8"))
    assert root.tag == NS + "svg"
    return root


def rows(root):
    return {g.get("data-host"): g for g in root.iter(NS + "g") if g.get("class") == "host"}


def rects(group, cls):
    return [r for r in group.iter(NS + "rect") if r.get("class") == cls]


def title(el):
    return el.find(NS + "title").text


def test_every_host_has_a_row_in_the_summary_order():
    root = parse(timeline_svg(SUMMARY))
    hosts = [g.get("data-host") for g in root.iter(NS + "g") if g.get("class") == "host"]
    assert hosts == ["n1", "n2", "a1", "s1", "u1"]
    assert [g.get("data-status") for g in rows(root).values()] == [
        "upgraded",
        "failed",
        "already-at-target",
        "skipped",
        "failed",
    ]


def test_phases_are_coloured_bars_in_time_order_and_a_gap_is_hatched_waiting():
    n1 = rows(parse(timeline_svg(SUMMARY)))["n1"]
    assert [(r.get("data-phase"), r.get("fill")) for r in rects(n1, "phase")] == [
        ("preflight", "#9ecae1"),
        ("prepare", "#fdae6b"),
        ("install", "#3182bd"),
        ("reload", "#74c476"),
        ("verify", "#31a354"),
        ("finish", "#e6ab02"),
    ]
    assert [title(r) for r in rects(n1, "phase")][:2] == [
        "preflight 20.0 s (08:00:00 - 08:00:20)",
        "prepare 16.0 s (08:00:30 - 08:00:46)",
    ]
    waits = rects(n1, "wait")
    assert [(r.get("fill"), title(r)) for r in waits] == [
        ("url(#npuops-wait)", "waiting 10.0 s (for a lane or batch; 08:00:20 - 08:00:30)")
    ]
    assert rects(n1, "phase failed") == [] and rects(n1, "mark") == []


def test_the_failed_phase_is_red_with_the_reason_in_its_title():
    svg = timeline_svg(SUMMARY)
    n2 = rows(parse(svg))["n2"]
    assert [(r.get("data-phase"), r.get("fill")) for r in rects(n2, "phase")] == [
        ("preflight", "#9ecae1"),
        ("prepare", "#fdae6b"),
    ]
    (failed,) = rects(n2, "phase failed")
    assert (failed.get("data-phase"), failed.get("fill")) == ("install", "#d62728")
    assert title(failed) == 'install failed after 10.0 s: apt said <no> & "quit"'
    assert [title(r) for r in rects(n2, "wait")] == ["waiting 50.0 s (for a lane or batch; 08:00:20 - 08:01:10)"]
    status = [t for t in n2.iter(NS + "text") if t.get("class") == "status"][0]
    assert (status.text, status.get("fill"), title(status)) == ("failed (install)", "#d62728", REASON)
    # escaped in the document itself, never raw
    assert "apt said &lt;no&gt; &amp; &quot;quit&quot;" in svg and REASON not in svg


def test_a_failure_without_timed_phases_is_a_red_mark():
    u1 = rows(parse(timeline_svg(SUMMARY)))["u1"]
    assert rects(u1, "phase") == [] and rects(u1, "phase failed") == []
    (mark,) = rects(u1, "failure")
    assert mark.get("fill") == "#d62728"
    assert title(mark) == "failed: unreachable or no result in the preflight"


def test_hosts_at_target_and_skipped_are_a_thin_grey_mark_with_their_status():
    r = rows(parse(timeline_svg(SUMMARY)))
    for host, status, tip in (
        ("a1", "already-at-target", "a1: already-at-target"),
        ("s1", "skipped", "s1: skipped - skip label <set>"),
    ):
        (mark,) = rects(r[host], "mark")
        assert (mark.get("fill"), mark.get("height"), title(mark)) == ("#bdbdbd", "4.0", tip)
        assert rects(r[host], "phase") == [] and rects(r[host], "wait") == []
        assert [t.text for t in r[host].iter(NS + "text") if t.get("class") == "status"] == [status]


def test_in_flight_strip_counts_hosts_between_their_first_and_last_phase_after_the_preflight():
    root = parse(timeline_svg(SUMMARY))
    (strip,) = [g for g in root.iter(NS + "g") if g.get("class") == "inflight"]
    assert strip.get("data-max") == "2"
    steps = rects(strip, "inflight-step")
    # n1 08:00:30-08:01:16, n2 08:01:10-08:01:40
    assert [(r.get("data-count"), title(r)) for r in steps] == [
        ("1", "1 in flight (08:00:30 - 08:01:10)"),
        ("2", "2 in flight (08:01:10 - 08:01:16)"),
        ("1", "1 in flight (08:01:16 - 08:01:40)"),
    ]


def test_time_axis_and_legend():
    root = parse(timeline_svg(SUMMARY))
    ticks = [t.text for t in root.iter(NS + "text") if t.get("class") == "tick"]
    assert ticks == ["0s", "10s", "20s", "30s", "40s", "50s", "1m00s", "1m10s", "1m20s", "1m30s", "1m40s"]
    (legend,) = [g for g in root.iter(NS + "g") if g.get("class") == "legend"]
    assert [t.text for t in legend.iter(NS + "text")] == [
        "preflight",
        "prepare (admission, cordon, drain)",
        "install",
        "reload",
        "reboot",
        "verify",
        "finish",
        "waiting",
        "failed",
        "at target / skipped",
    ]


def test_long_windows_tick_in_minutes():
    summary = {"started": "2027-01-15T08:00:00Z", "finished": "2027-01-15T08:40:00Z", "hosts": []}
    ticks = [t.text for t in parse(timeline_svg(summary)).iter(NS + "text") if t.get("class") == "tick"]
    assert ticks == ["0m", "5m", "10m", "15m", "20m", "25m", "30m", "35m", "40m"]


def test_output_is_deterministic_and_says_why_admission_waits_are_not_drawn_apart():
    svg = timeline_svg(SUMMARY)
    assert svg == timeline_svg(SUMMARY)
    assert "Waits for an admission slot and drains held by a PodDisruptionBudget" in svg


def test_an_empty_summary_is_a_valid_svg():
    for summary in ({}, None, {"hosts": []}, {"hosts": None, "run_id": None}):
        root = parse(timeline_svg(summary))
        assert rows(root) == {}
        assert [t.text for t in root.iter(NS + "text") if t.get("class") == "empty"] == ["no hosts"]


def test_odd_text_is_escaped_or_dropped():
    summary = {
        "run_id": "r<1>&",
        "hosts": [{"host": 'h<&>"', "status": "failed", "reason": "bad\x1bbyte -- <b>", "phases": "not a mapping"}],
    }
    root = parse(timeline_svg(summary))
    assert list(rows(root)) == ['h<&>"']
    assert title(root) == "Maintenance window r<1>&"
    (mark,) = rects(rows(root)['h<&>"'], "failure")
    assert title(mark) == "failed: badbyte -- <b>"


def test_a_plan_draws_its_preflight_and_refusals():
    plan = {
        "kind": "plan",
        "run_id": "p1",
        "started": "2027-01-15T08:00:00Z",
        "finished": "2027-01-15T08:00:30Z",
        "would_start": False,
        "hosts": [
            {"host": "n1", "status": "would-upgrade", "reason": None},
            {"host": "n2", "status": "refused", "reason": "no module for kernel <6.8>"},
            {"host": "a1", "status": "already-at-target", "reason": None},
        ],
    }
    root = parse(timeline_svg(plan))
    r = rows(root)
    assert [(x.get("data-phase"), x.get("fill")) for x in rects(r["n1"], "phase")] == [("preflight", "#9ecae1")]
    (refused,) = rects(r["n2"], "phase failed")
    assert (refused.get("fill"), title(refused)) == ("#d62728", "preflight 30.0 s: no module for kernel <6.8>")
    assert len(rects(r["a1"], "mark")) == 1
    assert title(root) == "Maintenance window plan p1"
    (strip,) = [g for g in root.iter(NS + "g") if g.get("class") == "inflight"]
    assert rects(strip, "inflight-step") == []


def test_not_a_summary_is_refused_and_the_filter_is_registered():
    with pytest.raises(ValueError, match="expected the window's summary"):
        timeline_svg(["n1"])
    assert FilterModule().filters() == {"timeline_svg": timeline_svg}


def test_a_long_host_name_is_cut_in_its_label_only():
    name = "gpu-a100-0001.rack-17.zone-b.prod.example.com"
    root = parse(timeline_svg({"hosts": [{"host": name, "status": "skipped", "reason": None}]}))
    (row,) = rows(root).values()
    label = [t for t in row.iter(NS + "text") if t.get("class") == "label"][0]
    assert (row.get("data-host"), label.text, title(label)) == (
        name,
        "gpu-a100-0001.rack-17.zon\u2026",
        name + ": skipped",
    )
