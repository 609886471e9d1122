"""npu_driver_tag / npu_matrix_audit on the lab (issue 4), run through ansible-playbook.

Expected values come from tests/lab/scenario.yaml. Every test restores what it changes (labels,
nodeInfo, lab-node-3) so the file is rerunnable. Label patches are audited right away (hosts with an
agent may rewrite kernel/driver labels every ~2 s); lab-node-3 has no host.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from ansible_tasks import run_module
from kubernetes import client
from lablib import nodes as labnodes  # tests/lab on sys.path via conftest.py

pytestmark = pytest.mark.lab

LABCTL = Path(__file__).resolve().parents[1] / "lab" / "labctl"
KERNEL = "feature.node.kubernetes.io/kernel-version.full"
OS_VERSION = "feature.node.kubernetes.io/system-os_release.VERSION_ID"
TAGS = {
    "lab-node-0": "550-5.15.0-119-generic-ubuntu22.04",
    "lab-node-1": "535-5.15.0-107-generic-ubuntu22.04",
    "lab-node-2": "550-6.8.0-45-generic-ubuntu24.04",
}
JOIN_TAG = "550-6.8.0-52-generic-ubuntu24.04"
# Only the scenario's GPU nodes: other tests (bench, upgrade) may add nodes at the same time.
SELECTOR = "kubernetes.io/hostname in (lab-node-0,lab-node-1,lab-node-2,lab-node-3)"
ROWS = [
    "550,5.15.0-119-generic,ubuntu22.04",
    "535,5.15.0-107-generic,ubuntu22.04",
    "550,6.8.0-45-generic,ubuntu24.04",
]


def write_matrix(path: Path, rows) -> str:
    path.write_text("driver_branch,kernel,os_tag,comment\n" + "".join(r + ",lab\n" for r in rows))
    return str(path)


def audit(kubeconfig, matrix_file, _check=False, **kw):
    args = {"matrix_file": matrix_file, "label_selector": SELECTOR}
    args.update(kw)
    args = {k: v for k, v in args.items() if v is not None}
    return run_module("npu_matrix_audit", args, kubeconfig, check=_check)


def by_name(res):
    return {n["name"]: n for n in res["nodes"]}


def labctl(*args):
    return subprocess.run([str(LABCTL), *args], capture_output=True, text=True, timeout=180, check=False)


@pytest.fixture
def node3(core_v1, lab_kubeconfig):
    """lab-node-3 joined for the test; removed afterwards (also when it was left over)."""
    r = labctl("add-node", "lab-node-3")
    assert r.returncode == 0, r.stderr
    yield "lab-node-3"
    labctl("remove-node", "lab-node-3")


@pytest.fixture
def restore_labels(core_v1):
    """restore_labels(node, keys): remembers the current values; put back at teardown."""
    saved = []

    def remember(node, keys):
        labels = core_v1.read_node(node).metadata.labels or {}
        saved.append((node, {k: labels.get(k) for k in keys}))

    yield remember
    for node, labels in reversed(saved):
        try:
            labnodes.refresh_labels(core_v1, node, labels)
        except client.ApiException as e:
            if e.status != 404:
                raise


def test_driver_tags_of_lab_nodes(lab_kubeconfig):
    for node, tag in TAGS.items():
        r = run_module("npu_driver_tag", {"node": node}, lab_kubeconfig)
        assert not r.get("failed"), r.get("msg")
        assert r["tag"] == tag
        assert r["image"] == "nvcr.io/nvidia/driver:" + tag
        assert r["changed"] is False and r["stale_labels"] == []


def test_driver_tag_what_if_driver_550_on_node_1(lab_kubeconfig):
    r = run_module("npu_driver_tag", {"node": "lab-node-1", "driver_branch": "550"}, lab_kubeconfig)
    assert r["tag"] == "550-5.15.0-107-generic-ubuntu22.04", r.get("msg")
    r = run_module("npu_driver_tag", {"node": "lab-node-1", "driver_version": "550.90.07",
                                      "kernel": "5.15.0-122-generic"}, lab_kubeconfig)
    assert r["tag"] == "550-5.15.0-122-generic-ubuntu22.04"


def test_driver_tag_rebellions_node(lab_kubeconfig):
    r = run_module("npu_driver_tag", {"node": "lab-npu-0", "vendor": "rebellions"}, lab_kubeconfig)
    assert not r.get("failed"), r.get("msg")
    assert r["tag"] == "2.4.0-6.8.0-90-generic-ubuntu22.04"
    assert r["image"] == "rebellions/rbln-driver:2.4.0-6.8.0-90-generic-ubuntu22.04"


def test_driver_tag_unknown_node(lab_kubeconfig):
    r = run_module("npu_driver_tag", {"node": "no-such-node"}, lab_kubeconfig)
    assert r["failed"] and "node no-such-node not found" in r["msg"]


def test_audit_join_row_flap_unlabeled_whatif(lab_kubeconfig, core_v1, node3, restore_labels, tmp_path):
    matrix = write_matrix(tmp_path / "matrix.csv", ROWS)

    # lab-node-3 joined and has no build -> MISSING, task fails, report still in the result
    r = audit(lab_kubeconfig, matrix)
    assert r["failed"] is True
    assert r["missing_text"] == "lab-node-3 MISSING " + JOIN_TAG
    assert r["counts"] == {"OK": 3, "MISSING": 1, "UNLABELED": 0, "SKIPPED": 0}
    assert {n: v["tag"] for n, v in by_name(r).items() if n in TAGS} == TAGS
    assert r["api_requests"] == 1 and r["changed"] is False
    assert "lab-node-3 MISSING" in r["msg"]

    # the row is added -> OK
    matrix = write_matrix(tmp_path / "matrix.csv", ROWS + ["550,6.8.0-52-generic,ubuntu24.04"])
    r = audit(lab_kubeconfig, matrix)
    assert not r.get("failed"), r.get("msg")
    assert r["missing_text"] == "OK" and r["counts"]["OK"] == 4

    # a kernel label changed for a moment -> MISSING right away (no caching), then OK again
    restore_labels("lab-node-3", [KERNEL])
    labnodes.refresh_labels(core_v1, "lab-node-3", {KERNEL: "6.8.0-53-generic"})
    r = audit(lab_kubeconfig, matrix)
    assert r["failed"] and r["missing_text"] == "lab-node-3 MISSING 550-6.8.0-53-generic-ubuntu24.04"
    labnodes.refresh_labels(core_v1, "lab-node-3", {KERNEL: "6.8.0-52-generic"})
    assert audit(lab_kubeconfig, matrix)["missing_text"] == "OK"

    # same on a scenario node: patch and audit immediately, then restore
    restore_labels("lab-node-0", [KERNEL])
    labnodes.refresh_labels(core_v1, "lab-node-0", {KERNEL: "5.15.0-118-generic"})
    r = audit(lab_kubeconfig, matrix, fail_on_missing=False)
    labnodes.refresh_labels(core_v1, "lab-node-0", {KERNEL: "5.15.0-119-generic"})
    assert by_name(r)["lab-node-0"]["status"] == "MISSING"
    assert by_name(r)["lab-node-0"]["tag"] == "550-5.15.0-118-generic-ubuntu22.04"

    # removed label -> UNLABELED naming the key
    restore_labels("lab-node-3", [OS_VERSION])
    labnodes.refresh_labels(core_v1, "lab-node-3", {OS_VERSION: None})
    r = audit(lab_kubeconfig, matrix)
    assert r["failed"] and r["counts"]["UNLABELED"] == 1
    n3 = by_name(r)["lab-node-3"]
    assert n3["status"] == "UNLABELED" and n3["missing_label"] == OS_VERSION and n3["tag"] is None
    assert OS_VERSION in r["msg"] and "lab-node-3" in r["msg"]
    # C11 via npu_driver_tag: error names node and key, never a tag with a hole
    t = run_module("npu_driver_tag", {"node": "lab-node-3"}, lab_kubeconfig)
    assert t["failed"] and t["missing_label"] == OS_VERSION
    assert t["msg"] == "node lab-node-3: label %s is missing" % OS_VERSION
    labnodes.refresh_labels(core_v1, "lab-node-3", {OS_VERSION: "24.04"})

    # C11 stale labels: nodeInfo disagrees with the kernel label -> warning, tag from labels
    labnodes.set_node_info(core_v1, "lab-node-3", kernel_version="6.8.0-60-generic")
    try:
        t = run_module("npu_driver_tag", {"node": "lab-node-3"}, lab_kubeconfig)
        assert t["tag"] == JOIN_TAG
        assert any("stale labels" in w and "6.8.0-60-generic" in w for w in t["stale_labels"])
    finally:
        labnodes.set_node_info(core_v1, "lab-node-3", kernel_version="6.8.0-52-generic")

    # what-if: lab-node-1 planned at driver 550 needs 550-5.15.0-107-generic-ubuntu22.04 (not built)
    r = audit(lab_kubeconfig, matrix, planned_driver_version="550", fail_on_missing=False,
              label_selector="kubernetes.io/hostname=lab-node-1")
    assert not r.get("failed")
    assert r["missing_text"] == "lab-node-1 MISSING 550-5.15.0-107-generic-ubuntu22.04"
    assert by_name(r)["lab-node-1"]["planned"] == {"driver_version": "550"}

    # what-if planned kernel, fleet-wide and per node
    r = audit(lab_kubeconfig, matrix, planned_kernel="6.8.0-45-generic", fail_on_missing=False)
    assert by_name(r)["lab-node-2"]["status"] == "OK"
    assert by_name(r)["lab-node-0"]["tag"] == "550-6.8.0-45-generic-ubuntu22.04"
    r = audit(lab_kubeconfig, matrix, planned_kernels={"lab-node-2": "6.8.0-52-generic"})
    assert not r.get("failed") and by_name(r)["lab-node-2"]["tag"] == "550-6.8.0-52-generic-ubuntu24.04"


def test_audit_check_mode_and_skip_label(lab_kubeconfig, core_v1, restore_labels, tmp_path):
    matrix = write_matrix(tmp_path / "m.csv", ROWS)
    r = audit(lab_kubeconfig, matrix, _check=True)
    assert not r.get("failed"), r.get("msg")
    assert r["changed"] is False and r["missing_text"] == "OK"
    skip = "nvidia.com/gpu-driver-upgrade.skip"
    restore_labels("lab-node-1", [skip])
    labnodes.refresh_labels(core_v1, "lab-node-1", {skip: "true"})
    r = audit(lab_kubeconfig, None, matrix=[
        {"driver_branch": "550", "kernel": "5.15.0-119-generic", "os_tag": "ubuntu22.04"},
        {"driver_branch": "550", "kernel": "6.8.0-45-generic", "os_tag": "ubuntu24.04"},
    ])
    labnodes.refresh_labels(core_v1, "lab-node-1", {skip: None})
    assert not r.get("failed"), r.get("msg")
    assert by_name(r)["lab-node-1"]["status"] == "SKIPPED"
    assert r["counts"] == {"OK": 2, "MISSING": 0, "UNLABELED": 0, "SKIPPED": 1}


def test_audit_malformed_matrix_names_file_and_line(lab_kubeconfig, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("driver_branch,kernel,os_tag\n550,5.15.0-119-generic,ubuntu22.04\n550,5.15.0-119-generic\n")
    r = audit(lab_kubeconfig, str(bad))
    assert r["failed"] and "%s:3: expected 3 columns" % bad in r["msg"]


def test_audit_rebellions(lab_kubeconfig):
    r = run_module("npu_matrix_audit", {
        "vendor": "rebellions",
        "matrix": [{"driver_version": "2.4.0", "kernel": "6.8.0-90-generic", "os_tag": "ubuntu22.04"}],
    }, lab_kubeconfig)
    assert not r.get("failed"), r.get("msg")
    assert r["label_selector"] == "rebellions.ai/npu.present=true"
    assert by_name(r)["lab-npu-0"]["tag"] == "2.4.0-6.8.0-90-generic-ubuntu22.04"
