"""upgrade/run_nodes.py: the nodes of a window run read from their last-transition annotation, and those
merged with the processes' summaries.

Nodes are literal API dicts; every expected row is written out by hand."""

from __future__ import annotations

import copy
import json

import pytest

from ansible_collections.npuops.fleet.plugins.module_utils.driver.vendor_profiles import resolve_profile
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.run_nodes import (
    RunNodesError,
    count_statuses,
    merge_rows,
    run_rows,
)

NVIDIA = resolve_profile("nvidia")
LAST = "nvidia.com/gpu-driver-upgrade-last-transition"
STATE = "nvidia.com/gpu-driver-upgrade-state"


def transition(run_id, to, reason="step done", frm=""):
    rec = {"from": frm, "to": to, "reason": reason, "at": "2026-12-05T05:21:00Z", "run": "tok-" + to}
    if run_id is not None:
        rec["run_id"] = run_id
    return rec


def gpu_node(name, state=None, last=None, unschedulable=None, ready="True", raw_last=None):
    labels = {"nvidia.com/gpu.present": "true"}
    if state is not None:
        labels[STATE] = state
    annotations = {"other.example/x": "1"}
    if last is not None:
        annotations[LAST] = json.dumps(last)
    if raw_last is not None:
        annotations[LAST] = raw_last
    node = {"metadata": {"name": name, "labels": labels, "annotations": annotations}, "spec": {}, "status": {}}
    if unschedulable is not None:
        node["spec"]["unschedulable"] = unschedulable
    if ready is not None:
        node["status"]["conditions"] = [
            {"type": "MemoryPressure", "status": "False"},
            {"type": "Ready", "status": ready},
        ]
    return node


def test_only_the_runs_nodes_sorted_with_their_state_and_status():
    items = [
        gpu_node("n-c", sm.UPGRADE_FAILED, transition("R1", sm.UPGRADE_FAILED, "validation failed"), True, "False"),
        gpu_node("n-a", sm.UPGRADE_DONE, transition("R1", sm.UPGRADE_DONE, "validated", sm.UNCORDON_REQUIRED)),
        gpu_node("n-other-run", sm.UPGRADE_DONE, transition("R0", sm.UPGRADE_DONE)),
        gpu_node("n-no-run-id", sm.UPGRADE_DONE, transition(None, sm.UPGRADE_DONE)),
        gpu_node("n-never", None, None),
        gpu_node("n-b", sm.DRAIN_REQUIRED, transition("R1", sm.DRAIN_REQUIRED), True, None),
    ]
    assert run_rows(items, NVIDIA, "R1") == [
        {
            "node": "n-a",
            "state": "upgrade-done",
            "unschedulable": False,
            "ready": True,
            "last_transition": {"from": "uncordon-required", "to": "upgrade-done", "reason": "validated",
                                "at": "2026-12-05T05:21:00Z", "run": "tok-upgrade-done", "run_id": "R1"},
            "status": "upgraded",
        },
        {
            "node": "n-b",
            "state": "drain-required",
            "unschedulable": True,
            "ready": False,  # no conditions at all: not known to be Ready
            "last_transition": {"from": "", "to": "drain-required", "reason": "step done",
                                "at": "2026-12-05T05:21:00Z", "run": "tok-drain-required", "run_id": "R1"},
            "status": "in-progress",
        },
        {
            "node": "n-c",
            "state": "upgrade-failed",
            "unschedulable": True,
            "ready": False,
            "last_transition": {"from": "", "to": "upgrade-failed", "reason": "validation failed",
                                "at": "2026-12-05T05:21:00Z", "run": "tok-upgrade-failed", "run_id": "R1"},
            "status": "failed",
        },
    ]


@pytest.mark.parametrize(
    "state, status",
    [
        ("upgrade-required", "in-progress"),
        ("cordon-required", "in-progress"),
        ("wait-for-jobs-required", "in-progress"),
        ("pod-deletion-required", "in-progress"),
        ("drain-required", "in-progress"),
        ("pod-restart-required", "in-progress"),
        ("reboot-required", "in-progress"),
        ("reboot-validation-required", "in-progress"),
        ("validation-required", "in-progress"),
        ("uncordon-required", "in-progress"),
        ("upgrade-done", "upgraded"),
        ("upgrade-failed", "failed"),
        ("someone-elses-state", "other"),
        (None, "other"),
        ("", "other"),
    ],
)
def test_status_of_each_state(state, status):
    rows = run_rows([gpu_node("n1", state, transition("R1", "x"))], NVIDIA, "R1")
    assert [(r["state"], r["status"]) for r in rows] == [(state or None, status)]


def test_the_literal_state_names_are_the_state_machines():
    # the parametrized literals above must be the module's names, or the table tests something else
    assert sm.IN_PROGRESS_STATES + (sm.UPGRADE_REQUIRED, sm.UPGRADE_DONE, sm.UPGRADE_FAILED) == (
        "cordon-required", "wait-for-jobs-required", "pod-deletion-required", "drain-required",
        "pod-restart-required", "reboot-required", "reboot-validation-required", "validation-required",
        "uncordon-required", "upgrade-required", "upgrade-done", "upgrade-failed",
    )


@pytest.mark.parametrize("raw", ["{not json", "", '"a string"', "[1, 2]", "null", '{"run_id": "R2"}'])
def test_unparseable_or_foreign_annotations_are_skipped(raw):
    items = [gpu_node("bad", sm.UPGRADE_DONE, raw_last=raw), gpu_node("good", sm.UPGRADE_DONE, transition("R1", "x"))]
    assert [r["node"] for r in run_rows(items, NVIDIA, "R1")] == ["good"]


def test_the_vendors_own_keys_are_read():
    rbln = resolve_profile("rebellions")
    node = {
        "metadata": {
            "name": "npu-1",
            "labels": {"rebellions.ai/npu-driver-upgrade-state": sm.REBOOT_REQUIRED},
            "annotations": {
                "rebellions.ai/npu-driver-upgrade-last-transition": json.dumps(transition("R1", "reboot-required")),
                # the NVIDIA key on the same node is not this vendor's record
                LAST: json.dumps(transition("R9", "upgrade-done")),
            },
        },
        "spec": {"unschedulable": True},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    rows = run_rows([node], rbln, "R1")
    assert [(r["node"], r["state"], r["status"], r["ready"], r["unschedulable"]) for r in rows] == [
        ("npu-1", "reboot-required", "in-progress", True, True)
    ]
    assert run_rows([node], NVIDIA, "R1") == []
    assert [r["node"] for r in run_rows([node], NVIDIA, "R9")] == ["npu-1"]


def test_an_empty_run_id_matches_nothing():
    node = gpu_node("n1", sm.UPGRADE_DONE, dict(transition(None, "x"), run_id=""))
    assert run_rows([node], NVIDIA, "") == []


def test_counts_have_every_status():
    rows = [{"status": "upgraded"}, {"status": "upgraded"}, {"status": "other"}]
    assert count_statuses(rows) == {"upgraded": 2, "failed": 0, "in-progress": 0, "other": 1}
    assert count_statuses([]) == {"upgraded": 0, "failed": 0, "in-progress": 0, "other": 0}


def node_row(name, state, status, reason="step done"):
    return {"node": name, "state": state, "unschedulable": False, "ready": True,
            "last_transition": {"to": state, "reason": reason, "run_id": "R1"}, "status": status}


def test_merge_keeps_started_rows_over_not_started_and_adds_orphan_nodes():
    slices = [
        {"participant": "p1", "hosts": [
            {"host": "h1", "node": "n1", "status": "upgraded", "final_state": "upgrade-done", "reason": None},
            {"host": "h2", "node": "n2", "status": "failed", "final_state": "upgrade-failed", "reason": "boom"},
            {"host": "h3", "status": "not-started", "final_state": None, "reason": "not started: stopped"},
        ]},
        {"participant": "p2", "hosts": [
            # p1 started h2; p2's "never started" for it must not hide that
            {"host": "h2", "node": "n2", "status": "not-started", "final_state": None, "reason": "not started: x"},
            # p2 retried h3 after p1 gave it up: the later, started row wins
            {"host": "h3", "status": "upgraded", "final_state": "upgrade-done", "reason": None},
        ]},
    ]
    nodes = [
        node_row("h3", "upgrade-done", "upgraded"),
        node_row("n1", "upgrade-done", "upgraded"),
        node_row("n2", "upgrade-failed", "failed"),
        node_row("n9", "drain-required", "in-progress", "draining"),
    ]
    assert merge_rows(slices, nodes) == [
        {"host": "h1", "node": "n1", "status": "upgraded", "final_state": "upgrade-done", "reason": None,
         "slice": "p1", "node_state": "upgrade-done"},
        {"host": "h2", "node": "n2", "status": "failed", "final_state": "upgrade-failed", "reason": "boom",
         "slice": "p1", "node_state": "upgrade-failed"},
        {"host": "h3", "status": "upgraded", "final_state": "upgrade-done", "reason": None,
         "slice": "p2", "node_state": "upgrade-done"},
        {"host": "n9", "node": "n9", "status": "in-progress", "final_state": "drain-required", "reason": "draining",
         "slice": None, "from_node_record": True},
    ]


def test_merge_two_equal_rows_the_later_wins_and_no_node_means_no_node_state():
    slices = [
        {"participant": "p1", "hosts": [{"host": "h1", "status": "not-started", "reason": "first"}]},
        {"participant": "p2", "hosts": [{"host": "h1", "status": "not-started", "reason": "second"}]},
        {"participant": "p3", "hosts": [{"host": "h2", "status": "upgraded", "reason": "a"}]},
        {"participant": "p4", "hosts": [{"host": "h2", "status": "failed", "reason": "b"}]},
    ]
    assert merge_rows(slices, []) == [
        {"host": "h1", "status": "not-started", "reason": "second", "slice": "p2"},
        {"host": "h2", "status": "failed", "reason": "b", "slice": "p4"},
    ]


def test_merge_a_started_row_replaces_an_earlier_not_started_one():
    slices = [
        {"participant": "p1", "hosts": [{"host": "h1", "status": "not-started"}]},
        {"participant": "p2", "hosts": [{"host": "h1", "status": "upgraded"}]},
    ]
    assert merge_rows(slices, []) == [{"host": "h1", "status": "upgraded", "slice": "p2"}]


def test_merge_matches_nodes_on_the_rows_node_name_not_its_host():
    slices = [{"participant": "p1", "hosts": [{"host": "h1", "node": "n1", "status": "upgraded"}]}]
    # a node named like the host but not the row's node is another node: it gets its own row
    nodes = [node_row("n1", "upgrade-done", "upgraded"), node_row("h0", None, "other", "admin")]
    assert merge_rows(slices, nodes) == [
        {"host": "h0", "node": "h0", "status": "other", "final_state": None, "reason": "admin", "slice": None,
         "from_node_record": True},
        {"host": "h1", "node": "n1", "status": "upgraded", "slice": "p1", "node_state": "upgrade-done"},
    ]


def test_merge_only_nodes_and_a_slice_without_hosts():
    slices = [{"participant": "p1", "hosts": None}, {"participant": "p2"}]
    nodes = [node_row("n2", "upgrade-failed", "failed", "validation failed")]
    assert merge_rows(slices, nodes) == [
        {"host": "n2", "node": "n2", "status": "failed", "final_state": "upgrade-failed",
         "reason": "validation failed", "slice": None, "from_node_record": True},
    ]


def test_merge_leaves_its_inputs_alone():
    slices = [{"participant": "p1", "hosts": [{"host": "n1", "status": "upgraded"}]}]
    nodes = [node_row("n1", "upgrade-done", "upgraded")]
    before = copy.deepcopy((slices, nodes))
    merge_rows(slices, nodes)
    assert (slices, nodes) == before


@pytest.mark.parametrize(
    "slices, nodes, words",
    [
        ({"participant": "p1"}, [], "must be a list"),
        (["p1"], [], "slice 0 must be a dict"),
        ([{"participant": "p1", "hosts": {"host": "h1"}}], [], "slice p1: hosts must be a list"),
        ([{"participant": "p1", "hosts": [{"status": "upgraded"}]}], [], "slice p1: hosts[0] is not a row"),
        ([], {"nodes": []}, "window nodes must be"),
        ([], [{"state": "upgrade-done"}], "window nodes must be"),
    ],
)
def test_merge_refuses_misshapen_input(slices, nodes, words):
    with pytest.raises(RunNodesError) as ei:
        merge_rows(slices, nodes)
    assert words in str(ei.value)
