"""The plan and the summary name the rule that matched each pod taken off a node (pod_rules), rendered
with Jinja as Ansible's template module does (trim_blocks); Ansible's filters the templates use are
stood in for by their plain meaning."""

from __future__ import annotations

import os
from pathlib import Path

import jinja2

TEMPLATES = Path(__file__).resolve().parents[3] / "playbooks" / "templates"


def env() -> jinja2.Environment:
    e = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), trim_blocks=True)
    e.filters["basename"] = os.path.basename
    e.filters["zip"] = lambda a, b: list(zip(a, b))
    return e


def test_plan_names_the_rule_of_each_pod_it_would_evict():
    report = {"run_id": "r", "would_start": True, "batches": [["gpu-0"]], "batch_size": 1, "finished": "x",
              "refused": [], "lease": {"free": True},
              "hosts": [{"host": "gpu-0", "status": "would-upgrade", "transaction": None,
                         "would_evict": ["ml/trainer", "default/web"],
                         "pod_rules": {"ml/trainer": "DRA claim ml/c1 allocated by gpu.nvidia.com"}},
                        {"host": "gpu-1", "status": "would-upgrade", "transaction": None, "would_evict": []}]}
    rows = [line.split(" | ") for line in env().get_template("maintenance_plan.md.j2").render(
        _mw_plan_report=report).splitlines() if line.startswith("| gpu")]
    assert rows[0][5] == "ml/trainer [DRA claim ml/c1 allocated by gpu.nvidia.com], default/web"
    assert rows[1][5] == "-"


def test_summary_lists_the_pods_taken_off_with_their_rules():
    summary = {"run_id": "r1", "result": "ok", "not_upgraded": [], "started": "a", "finished": "b", "duration_s": 1,
               "batch_size": 1, "holder": "h",
               "hosts": [{"host": "gpu-0", "status": "upgraded",
                          "pod_rules": {"ml/trainer": "DRA claim ml/c1 allocated by gpu.nvidia.com",
                                        "default/agent": "hostPath /dev/nvidia0"}},
                         {"host": "gpu-1", "status": "upgraded", "pod_rules": {}},
                         {"host": "gpu-2", "status": "upgraded",
                          "pod_rules": {"a/b": "extended resource nvidia.com/gpu"}}]}
    out = env().get_template("maintenance_summary.md.j2").render(_mw_summary=summary)
    part = out[out.index("Pods taken off before the host work"):].splitlines()
    assert part[1:3] == [
        "- gpu-0: default/agent [hostPath /dev/nvidia0], ml/trainer [DRA claim ml/c1 allocated by gpu.nvidia.com]",
        "- gpu-2: a/b [extended resource nvidia.com/gpu]",
    ]
