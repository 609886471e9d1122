"""Docs that run: the ``docs-run`` blocks of the getting-started and first-window guides
(docs/docsite/rst/), run on the lab in order and as written (tests/integration/docs_blocks.py), so
the guides cannot drift from the code. The getting-started run also renders the window's timeline
(reports/latest.svg) to PNG with rsvg-convert and looks at it: build/docs-run/timeline.png.

Each test puts back what its guide changed: the scenario hosts the windows upgraded (recreated as in
test_maintenance_window.py), the Nodes' upgrade labels, and the ServiceAccount and RBAC objects the
first-window guide creates (only those that were not there before)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from docs_blocks import png_summary, runnable_blocks, script
from test_maintenance_window import reset_node, restore_host

from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm

REPO = Path(__file__).resolve().parents[2]
RST = REPO / "docs" / "docsite" / "rst"
OUT = REPO / "build" / "docs-run"
N0, N1, N2, NPU = "lab-node-0", "lab-node-1", "lab-node-2", "lab-npu-0"

pytestmark = pytest.mark.lab


def _env(lab_kubeconfig, kubectl_bin):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANSIBLE_", "DEMO_", "K8S_AUTH_")) and k != "NPUOPS_REPORT_DIR"}
    env["PATH"] = os.pathsep.join([str(Path(kubectl_bin).parent), str(REPO / ".venv" / "bin"), env.get("PATH", "")])
    env["ANSIBLE_COLLECTIONS_PATH"] = str(REPO / "build" / "collections")
    env["KUBECONFIG"] = lab_kubeconfig
    env["ANSIBLE_FORCE_COLOR"] = "0"
    return env


def _run_guide(name, cwd, env, timeout=1800):
    path = RST / f"{name}.rst"
    assert runnable_blocks(path), f"{path} has no docs-run block"
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{name}.sh").write_text(script(path))
    r = subprocess.run(["bash", str(OUT / f"{name}.sh")], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=timeout, check=False)
    (OUT / f"{name}.log").write_text(r.stdout + r.stderr)
    tail = (r.stdout + r.stderr)[-6000:]
    assert r.returncode == 0, f"{name}.rst's docs-run blocks failed (rc {r.returncode}):\n{tail}"
    return r.stdout


def _summary(report_dir):
    return json.loads((Path(report_dir) / "latest.json").read_text())


def test_getting_started_guide_runs_and_its_timeline_renders(lab_kubeconfig, kubectl_bin, core_v1):
    restore_host(core_v1, N1)
    restore_host(core_v1, NPU)
    reports = REPO / "reports"
    for f in ("latest.json", "latest.md", "latest.svg", "latest-chat.txt"):
        (reports / f).unlink(missing_ok=True)
    t0 = time.time()
    try:
        out = _run_guide("getting_started", REPO, _env(lab_kubeconfig, kubectl_bin))
        # the second `make demo` of the guide: every host at the target, nothing changed
        s = _summary(reports)
        assert s["result"] == "ok", s
        assert {h["status"] for h in s["hosts"]} == {"already-at-target"}, s["hosts"]
        assert sm.UPGRADE_DONE in out
        # the first `make demo`: lab-node-1 and lab-npu-0 upgraded; its run directory keeps its timeline
        runs = [json.loads(p.read_text()) for p in reports.glob("*/summary.json") if p.stat().st_mtime >= t0]
        (first,) = [r for r in runs if r["result"] == "ok" and any(h["status"] == "upgraded" for h in r["hosts"])]
        assert {h["host"] for h in first["hosts"] if h["status"] == "upgraded"} == {N1, NPU}, first["hosts"]
        # each summary links the timeline beside it
        assert "[timeline.svg](timeline.svg)" in (reports / first["run_id"] / "summary.md").read_text()
        assert "[latest.svg](latest.svg)" in (reports / "latest.md").read_text()
        # that window's timeline, as a picture
        png = OUT / "timeline.png"
        svg = reports / first["run_id"] / "timeline.svg"
        assert shutil.which("rsvg-convert"), "rsvg-convert missing (scripts/bootstrap.sh installs librsvg2-bin)"
        subprocess.run(["rsvg-convert", "--background-color=white", "-o", str(png), str(svg)], check=True, timeout=60)
        look = png_summary(png.read_bytes())
        assert look["width"] >= 300 and look["height"] >= 100, look
        assert look["colours"] >= 4 and look["ink"] >= 0.02, f"timeline.png looks blank: {look}"
        (OUT / "timeline.json").write_text(json.dumps(look) + "\n")
    finally:
        restore_host(core_v1, N1)
        restore_host(core_v1, NPU)
        for name in (N0, N2):
            reset_node(core_v1, name)


def _first_window_inventory(work: Path) -> None:
    """inv/: inventories/example's layout with lab-node-1 in gpu_workers, the lab's connection
    settings for accelerator_hosts and the lab's GPU policy for gpu_workers (the guide's note)."""
    inv = work / "inv"
    shutil.copytree(REPO / "inventories" / "example", inv)
    (inv / "hosts.yml").write_text(yaml.safe_dump(
        {"all": {"children": {"accelerator_hosts": {"children": {"gpu_workers": {"hosts": {N1: None}}}}}}}))
    lab = REPO / "inventories" / "lab" / "group_vars"
    conn = [line for line in (lab / "all.yml").read_text().splitlines()
            if not line.startswith("npuops_fleet_kubeconfig")]
    (inv / "group_vars" / "accelerator_hosts" / "connection.yml").write_text("\n".join(conn) + "\n")
    shutil.copy(lab / "gpu_nodes.yml", inv / "group_vars" / "gpu_workers" / "driver.yml")
    shutil.rmtree(inv / "group_vars" / "npu_workers")
    (work / "deploy").symlink_to(REPO / "deploy")


RBAC_MADE = [  # what the guide's Least privilege block creates: (kind, namespace, name)
    ("ServiceAccount", "kube-system", "npuops-fleet"),
    ("ClusterRoleBinding", None, "npuops-fleet"),
    ("RoleBinding", "kube-system", "npuops-fleet-leases"),
    ("RoleBinding", "default", "npuops-fleet-events"),
]


def _shipped_rbac():
    docs = []
    for f in sorted((REPO / "deploy" / "rbac").glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(f.read_text()) if d]
    return [(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]) for d in docs]


def _exists(kubectl, kind, ns, name):
    args = ["get", kind, name] + (["-n", ns] if ns else [])
    return kubectl(*args, check=False).returncode == 0


def test_first_window_guide_runs_on_the_lab(lab_kubeconfig, kubectl_bin, kubectl, core_v1, tmp_path):
    objects = _shipped_rbac() + RBAC_MADE
    before = {o: _exists(kubectl, *o) for o in objects}
    assert not any(before[o] for o in RBAC_MADE), "the guide's ServiceAccount or bindings exist already: %s" % before
    work = tmp_path / "work"
    work.mkdir()
    _first_window_inventory(work)
    restore_host(core_v1, N1)
    try:
        out = _run_guide("first_window", work, _env(lab_kubeconfig, kubectl_bin))
        reports = work / "reports"
        assert (reports / "audit-latest.md").is_file() and (reports / "latest-plan.md").is_file()
        plan = json.loads((reports / "latest-plan.json").read_text())
        assert json.dumps(plan).count(N1) >= 1, plan
        s = _summary(reports)
        assert s["result"] == "ok", s
        (h,) = s["hosts"]
        assert (h["host"], h["old_version"], h["new_version"], h["status"], h["final_state"]) == (
            N1, "535.183.06", "550.90.07", "upgraded", sm.UPGRADE_DONE), h
        assert "yes" in out  # kubectl auth can-i patch nodes, as the ServiceAccount
        assert f"{N1} " in out and sm.UPGRADE_DONE in out
    finally:
        for o in reversed(objects):
            if not before[o]:
                kind, ns, name = o
                kubectl("delete", kind, name, *(["-n", ns] if ns else []), "--ignore-not-found", check=False)
        restore_host(core_v1, N1)
