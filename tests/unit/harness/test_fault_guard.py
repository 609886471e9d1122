"""The fault suite's PDB guard (tests/faults/run.py GuardWatch): a guard pod removed while its watch
was down is judged from what was seen before and after the gap, never passed unseen."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "faults"))
run = pytest.importorskip("run")


def pod(uid, node, ready=True, terminating=False):
    cond = [SimpleNamespace(type="Ready", status="True" if ready else "False")]
    return SimpleNamespace(
        metadata=SimpleNamespace(uid=uid, name="faults-guard-" + uid, deletion_timestamp="t" if terminating else None),
        spec=SimpleNamespace(node_name=node), status=SimpleNamespace(phase="Running", conditions=cond))


def guard(*pods):
    g = run.GuardWatch((None, SimpleNamespace()), 1)
    for p in pods:
        g._see("ADDED", p)
    return g


def test_a_ready_pod_gone_in_a_gap_while_the_other_stayed_ready_is_safe():
    g = guard(pod("a", "lab-node-1"), pod("b", "lab-node-0"))
    g._across_gap([pod("b", "lab-node-0"), pod("c", "lab-node-0", ready=False)])
    assert g.violations == [] and g.gaps == 1
    assert g.removed == ["uid a (on lab-node-1, removed while the watch was down)"]


def test_both_gone_in_a_gap_is_a_violation():
    g = guard(pod("a", "lab-node-1"), pod("b", "lab-node-0"))
    g._across_gap([pod("c", "lab-node-0", ready=False)])
    assert g.gaps == 2 and len(g.violations) == 2, g.violations
    assert "only 0 other guard pod(s) Ready before and after the gap < minAvailable 1" in g.violations[0]


def test_the_other_pod_unready_after_the_gap_cannot_show_it_safe():
    g = guard(pod("a", "lab-node-1"), pod("b", "lab-node-0"))
    g._across_gap([pod("b", "lab-node-0", ready=False)])
    assert len(g.violations) == 1 and g.violations[0].startswith("uid a (on lab-node-1"), g.violations


def test_a_pod_seen_terminating_before_the_gap_was_judged_then():
    g = guard(pod("a", "lab-node-1"), pod("b", "lab-node-0"))
    g._see("MODIFIED", pod("a", "lab-node-1", terminating=True))  # b Ready: a removal within the budget
    g._across_gap([pod("b", "lab-node-0")])
    assert g.violations == [] and g.gaps == 1, g.violations
    assert g.removed[0].startswith("faults-guard-a (uid a, on lab-node-1)"), g.removed
