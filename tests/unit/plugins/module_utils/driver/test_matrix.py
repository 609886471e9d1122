"""Matrix parsing (incl. malformed lines) and the per-node audit (cases C8, C11)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ansible_collections.npuops.fleet.plugins.module_utils.driver.matrix import (
    MatrixError,
    audit_node,
    from_list,
    load_file,
    parse_csv,
    summarize,
)
from ansible_collections.npuops.fleet.plugins.module_utils.driver.vendor_profiles import resolve_profile

FIX = Path(__file__).resolve().parents[3] / "fixtures" / "driver_matrix"
NV = resolve_profile("nvidia")
RB = resolve_profile("rebellions")


def test_parse_file_whitespace_comments_duplicates_extra_columns():
    m = load_file(str(FIX / "matrix-c8.csv"))
    assert len(m) == 3
    assert ("535", "5.15.0-119-generic", "ubuntu22.04") in m  # stray whitespace stripped
    assert len(m.duplicates) == 1
    assert m.duplicates[0].startswith(str(FIX / "matrix-c8.csv") + ":7: duplicate entry 535,5.15.0-117-generic")


def test_malformed_file_names_file_and_line():
    with pytest.raises(MatrixError, match=r"matrix-bad\.csv:3: column kernel is empty"):
        load_file(str(FIX / "matrix-bad.csv"))


@pytest.mark.parametrize(
    "text,msg",
    [
        ("", "empty matrix"),
        ("# only a comment\n", "empty matrix"),
        ("branch,kernel,os_tag\n", r"m\.csv:1: header .* lacks column\(s\) driver_branch"),
        ("driver_branch,kernel\n550,5.15\n", r"m\.csv:1: .*lacks column\(s\) os_tag"),
        ("driver_branch,kernel,os_tag\n550,5.15.0-1-generic\n", r"m\.csv:2: expected 3 columns .*got 2"),
        ("driver_branch,kernel,os_tag\n550,5.15.0-1-generic,ubuntu22.04,x\n", r"m\.csv:2: expected 3 columns"),
        ("driver_branch,kernel,os_tag\n\n550,5.15 0,ubuntu22.04\n", r"m\.csv:3: column kernel='5.15 0' has characters"),
        ("driver_branch,kernel,os_tag\nr550,5.15.0-1-generic,ubuntu22.04\n", r"m\.csv:2: driver_branch 'r550' is not"),
        ("driver_branch,driver_version,kernel,os_tag\n", "both driver_branch and driver_version"),
        ("driver_branch,kernel,kernel,os_tag\n", "repeats column"),
    ],
)
def test_malformed_text(text, msg):
    with pytest.raises(MatrixError, match=msg):
        parse_csv(text, "m.csv")


def test_column_order_and_driver_version_column():
    m = parse_csv("os_tag,kernel,driver_version\nubuntu22.04,5.15.0-1-generic,550.90.07\n", "x")
    assert ("550", "5.15.0-1-generic", "ubuntu22.04") in m  # NVIDIA: reduced to the branch
    m = parse_csv("driver_version,kernel,os_tag\n3.0.0,6.8.0-90-generic,ubuntu22.04\n", "x", uses_branch=False)
    assert ("3.0.0", "6.8.0-90-generic", "ubuntu22.04") in m


def test_bom_and_crlf():
    m = parse_csv("\ufeffdriver_branch,kernel,os_tag\r\n550,5.15.0-1-generic,ubuntu22.04\r\n", "x")
    assert len(m) == 1


def test_inline_list():
    m = from_list([{"driver_branch": 550, "kernel": "5.15.0-1-generic", "os_tag": "ubuntu22.04", "note": "x"},
                   {"driver_branch": "550", "kernel": " 5.15.0-1-generic ", "os_tag": "ubuntu22.04"}])
    assert len(m) == 1 and len(m.duplicates) == 1
    with pytest.raises(MatrixError, match=r"matrix\[1\]: missing key\(s\) os_tag"):
        from_list([{"driver_branch": "550", "kernel": "k"}])
    with pytest.raises(MatrixError, match=r"matrix\[1\]: expected a dict"):
        from_list(["550-5.15.0-1-generic-ubuntu22.04"])


def _nodes():
    return {n["metadata"]["name"]: n for n in json.loads((FIX / "nodes-c8-c11.json").read_text())["items"]}


def test_c8_audit_reports_missing_build_before_kernel_upgrade():
    m = load_file(str(FIX / "matrix-c8.csv"))
    nodes = _nodes()
    assert audit_node(nodes["gpu-a"], NV, m)["status"] == "OK"
    # planned kernel -118- has no image: MISSING, never another kernel's build
    r = audit_node(nodes["gpu-a"], NV, m, planned_kernel="5.15.0-118-generic")
    assert r["status"] == "MISSING" and r["tag"] == "535-5.15.0-118-generic-ubuntu22.04"
    assert r["planned"] == {"kernel": "5.15.0-118-generic"}
    r = audit_node(nodes["gpu-aws"], NV, m)
    assert r["status"] == "MISSING" and r["tag"] == "535-5.15.0-1075-aws-ubuntu22.04"
    # planned driver 550 on 117: exists
    assert audit_node(nodes["gpu-a"], NV, m, planned_driver="550")["status"] == "OK"


def test_c11_audit_unlabeled_and_stale():
    m = load_file(str(FIX / "matrix-c8.csv"))
    nodes = _nodes()
    r = audit_node(nodes["gpu-nokernel"], NV, m)
    assert r["status"] == "UNLABELED"
    assert r["missing_label"] == "feature.node.kubernetes.io/kernel-version.full"
    assert r["tag"] is None
    r = audit_node(nodes["gpu-stale-os"], NV, m)
    assert r["status"] == "MISSING"  # tag from (stale) labels: ...-ubuntu20.04
    assert len(r["warnings"]) == 2 and all("stale labels" in w for w in r["warnings"])


def test_skipped_and_summary():
    m = load_file(str(FIX / "matrix-c8.csv"))
    results = [audit_node(n, NV, m) for n in _nodes().values()]
    by = {r["name"]: r for r in results}
    assert by["gpu-skip"]["status"] == "SKIPPED"
    s = summarize(sorted(results, key=lambda r: r["name"]))
    assert s["counts"] == {"OK": 1, "MISSING": 2, "UNLABELED": 1, "SKIPPED": 1}
    assert s["missing_text"] == (
        "gpu-aws MISSING 535-5.15.0-1075-aws-ubuntu22.04\ngpu-stale-os MISSING 535-5.15.0-117-generic-ubuntu20.04"
    )
    assert s["unlabeled"][0]["missing_label"] == "feature.node.kubernetes.io/kernel-version.full"
    assert summarize([])["missing_text"] == "OK"


def test_rebellions_audit_uses_full_version():
    m = parse_csv("driver_version,kernel,os_tag\n2.4.0,6.8.0-90-generic,ubuntu22.04\n", "x", uses_branch=False)
    node = {"metadata": {"name": "lab-npu-0", "labels": {
        "rebellions.ai/driver-version.full": "2.4.0",
        "feature.node.kubernetes.io/kernel-version.full": "6.8.0-90-generic",
        "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
        "feature.node.kubernetes.io/system-os_release.VERSION_ID": "22.04"}}}
    assert audit_node(node, RB, m)["status"] == "OK"
    r = audit_node(node, RB, m, planned_driver="3.0.0")
    assert r["status"] == "MISSING" and r["tag"] == "3.0.0-6.8.0-90-generic-ubuntu22.04"


def test_header_without_rows_is_an_error():
    # Every node would be MISSING: the wrong file, not a fleet without builds (found by a new user).
    with pytest.raises(MatrixError, match=r"m.csv: empty matrix \(a header but no rows\)"):
        parse_csv("driver_branch,kernel,os_tag\n\n", "m.csv")
