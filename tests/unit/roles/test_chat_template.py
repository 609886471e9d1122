"""The window's three chat lines (roles/maintenance_window/templates/maintenance_chat.txt.j2), rendered as Ansible's
template module does (trim_blocks): a reason that begins with its own phase says it once."""

from __future__ import annotations

from pathlib import Path

import jinja2

ROLE = Path(__file__).resolve().parents[3] / "roles" / "maintenance_window"
TEMPLATE = ROLE / "templates" / "maintenance_chat.txt.j2"


def render(summary):
    return jinja2.Environment(trim_blocks=True).from_string(TEMPLATE.read_text()).render(_mw_summary=summary)


def test_a_reason_that_names_its_phase_says_it_once():
    lines = render({"run_id": "R", "result": "failed", "counts": {"upgraded": 1, "failed": 2}, "duration_s": 10,
                    "hosts": [{"host": "a", "status": "upgraded", "old_version": "1", "new_version": "2"},
                              {"host": "b", "status": "failed", "failed_phase": "preflight",
                               "reason": "preflight: the target's open kernel modules cannot drive 2 GPU(s)"},
                              {"host": "c", "status": "not-started", "reason": "not started: workloads: x"},
                              {"host": "d", "status": "failed", "failed_phase": "install", "reason": "apt said no"}]}
                   ).splitlines()
    assert lines == [
        "npuops.fleet window R: FAILED - upgraded 1, failed 2 (10 s)",
        "upgraded: a 1->2",
        "not upgraded: b (preflight: the target's open kernel modules cannot drive 2 GPU(s)); "
        "c (not-started: workloads: x); d (install: apt said no)",
    ]
