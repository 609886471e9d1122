"""Modules find the lab through KUBECONFIG alone, and say so in ``kube_auth`` (run via ansible-playbook).

Each run gets HOME = an empty directory (no ~/.kube/config to fall back on), no K8S_AUTH_KUBECONFIG
and no ``kubeconfig`` option. Expected context names are read from the kubeconfig files themselves.
Read-only: the lease module runs in check mode on a lease name nobody uses.
"""

from __future__ import annotations

import uuid

import pytest
import yaml
from ansible_tasks import run_module

pytestmark = pytest.mark.lab

NODE = "lab-node-0"  # a scenario node, so finding it means the lab was reached


def current_context(path: str) -> str:
    return yaml.safe_load(open(path).read())["current-context"]


@pytest.fixture
def empty_home(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    return home


def only_kubeconfig_env(value: str, home) -> dict:
    """Environment for a run whose only credential source is KUBECONFIG=value."""
    return {"KUBECONFIG": value, "HOME": str(home), "K8S_AUTH_KUBECONFIG": None, "K8S_AUTH_CONTEXT": None,
            "K8S_AUTH_HOST": None, "K8S_AUTH_API_KEY": None}


def decoy_kubeconfig(path) -> str:
    """A kubeconfig without current-context whose only cluster is unreachable (port 1)."""
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "decoy", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "decoy", "user": {"token": "decoy"}}],
        "contexts": [{"name": "decoy", "context": {"cluster": "decoy", "user": "decoy"}}],
    }))
    return str(path)


def assert_from_env(res: dict, value: str, context: str) -> None:
    assert not res.get("failed"), res.get("msg")
    assert res["kube_auth"] == {"source": "env KUBECONFIG", "kubeconfig": value, "context": context}


def test_driver_tag_with_kubeconfig_env_only(lab_kubeconfig, empty_home):
    res = run_module("npu_driver_tag", {"node": NODE}, None, env=only_kubeconfig_env(lab_kubeconfig, empty_home))
    assert_from_env(res, lab_kubeconfig, current_context(lab_kubeconfig))
    assert res["node"] == NODE and res["tag"]


def test_driver_tag_with_kubeconfig_list_missing_file_first(lab_kubeconfig, empty_home, tmp_path):
    value = "%s:%s" % (tmp_path / "missing.kubeconfig", lab_kubeconfig)
    res = run_module("npu_driver_tag", {"node": NODE}, None, env=only_kubeconfig_env(value, empty_home))
    assert_from_env(res, value, current_context(lab_kubeconfig))
    assert res["node"] == NODE and res["tag"]


def test_matrix_audit_with_kubeconfig_list_decoy_first(lab_kubeconfig, empty_home, tmp_path):
    # The decoy comes first but sets no current-context, so the merged config uses the lab's.
    value = "%s:%s" % (decoy_kubeconfig(tmp_path / "decoy.kubeconfig"), lab_kubeconfig)
    args = {"matrix": [{"driver_branch": "1", "kernel": "0-none", "os_tag": "ubuntu22.04"}],
            "label_selector": "kubernetes.io/hostname=%s" % NODE, "fail_on_missing": False}
    res = run_module("npu_matrix_audit", args, None, env=only_kubeconfig_env(value, empty_home))
    assert_from_env(res, value, current_context(lab_kubeconfig))
    assert [n["name"] for n in res["nodes"]] == [NODE]


def test_lease_check_mode_with_kubeconfig_env_only(lab_kubeconfig, empty_home):
    args = {"name": "npuops-it-kube-auth-%s" % uuid.uuid4().hex[:8], "holder": "it/kube-auth"}
    res = run_module("npu_upgrade_lease", args, None, check=True, env=only_kubeconfig_env(lab_kubeconfig, empty_home))
    assert_from_env(res, lab_kubeconfig, current_context(lab_kubeconfig))
    assert res["operation"] == "create" and res["changed"] is True


def test_missing_kubeconfig_env_fails_instead_of_using_home_config(lab_kubeconfig, empty_home, tmp_path):
    # ~/.kube/config would reach the lab; a KUBECONFIG naming no file must not fall through to it.
    (empty_home / ".kube").mkdir()
    (empty_home / ".kube" / "config").write_text(open(lab_kubeconfig).read())
    missing = str(tmp_path / "missing.kubeconfig")
    res = run_module("npu_driver_tag", {"node": NODE}, None, env=only_kubeconfig_env(missing, empty_home))
    assert res.get("failed") is True
    assert "KUBECONFIG" in res["msg"] and missing in res["msg"]
    assert "kube_auth" not in res
