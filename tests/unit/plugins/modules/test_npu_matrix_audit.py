"""npu_matrix_audit main(): argspec, fail_on_missing after reporting, never changed (API faked)."""

from __future__ import annotations

import json

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.npuops.fleet.plugins.module_utils.k8s import module as k8s_module
from ansible_collections.npuops.fleet.plugins.modules import npu_matrix_audit as mod


def node(name, kernel="5.15.0-119-generic", major="550"):
    return {"metadata": {"name": name, "labels": {
        "nvidia.com/cuda.driver.major": major, "nvidia.com/cuda.driver.minor": "90", "nvidia.com/cuda.driver.rev": "07",
        "feature.node.kubernetes.io/kernel-version.full": kernel,
        "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
        "feature.node.kubernetes.io/system-os_release.VERSION_ID": "22.04"}}, "status": {}}


KUBE_AUTH = {"source": "env KUBECONFIG", "kubeconfig": "/k/a:/k/b", "context": "ctx-b"}


@pytest.fixture
def fake_api(monkeypatch):
    calls = []

    def fake_list(api_client, selector, page_size):
        calls.append((selector, page_size))
        return [node("b", "5.15.0-120-generic"), node("a")], 1

    monkeypatch.setattr(k8s_module, "get_api_client_and_source", lambda p, **kw: (object(), dict(KUBE_AUTH)))
    monkeypatch.setattr(mod, "list_nodes_raw", fake_list)
    return calls


def run(args, capsys):
    with patch_module_args(args), pytest.raises(SystemExit) as ei:
        mod.main()
    return ei.value.code, json.loads(capsys.readouterr().out)


MATRIX = [{"driver_branch": "550", "kernel": "5.15.0-119-generic", "os_tag": "ubuntu22.04"}]


def test_missing_fails_after_reporting(fake_api, capsys):
    rc, res = run({"matrix": MATRIX, "label_selector": "pool=a"}, capsys)
    assert rc == 1 and res["failed"] and res["changed"] is False
    assert res["missing_text"] == "b MISSING 550-5.15.0-120-generic-ubuntu22.04"
    assert [n["name"] for n in res["nodes"]] == ["a", "b"]
    assert res["counts"] == {"OK": 1, "MISSING": 1, "UNLABELED": 0, "SKIPPED": 0}
    assert fake_api == [("nvidia.com/gpu.present=true,pool=a", 500)]
    assert res["kube_auth"] == KUBE_AUTH


def test_no_fail_and_what_if(fake_api, capsys):
    rc, res = run({"matrix": MATRIX, "fail_on_missing": False, "planned_kernels": {"b": "5.15.0-119-generic",
                                                                                   "zz": "x"}}, capsys)
    assert rc == 0 and res["missing_text"] == "OK"
    assert res["kube_auth"] == KUBE_AUTH
    assert "zz" in json.dumps(res["warnings"])


def test_matrix_file_errors_before_cluster(fake_api, capsys, tmp_path):
    f = tmp_path / "m.csv"
    f.write_text("driver_branch,kernel,os_tag\n550,,ubuntu22.04\n")
    rc, res = run({"matrix_file": str(f)}, capsys)
    assert rc == 1 and res["msg"] == "support matrix: %s:2: column kernel is empty" % f
    assert fake_api == []


def test_matrix_and_file_are_exclusive(capsys):
    rc, res = run({"matrix": MATRIX, "matrix_file": "/x"}, capsys)
    assert rc == 1 and "mutually exclusive" in res["msg"]
