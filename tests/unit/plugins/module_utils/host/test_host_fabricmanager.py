"""fabric manager package against the driver (D2, D8); package sets written by hand."""

from __future__ import annotations

import os

from ansible_collections.npuops.fleet.plugins.module_utils.host import fabricmanager as fm

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures")


def pkgs(**kw):
    return {k.replace("_", "-"): {"version": v, "status": "ii"} for k, v in kw.items()}


def test_not_installed():
    res = fm.fabricmanager_facts(pkgs(nvidia_utils_550_server="550.90.07-0ubuntu1"), "550.90.07", "dpkg:x")
    assert res["installed"] is False and res["matches_driver"] is None and res["version"] is None
    assert res["message"] is None and res["packages"] == {}


def test_same_version_matches():
    installed = pkgs(nvidia_fabricmanager_550="550.90.07-1", nvidia_fabricmanager_dev_550="550.90.07-1")
    res = fm.fabricmanager_facts(installed, "550.90.7", "smi")
    assert res["installed"] and res["package"] == "nvidia-fabricmanager-550"
    assert res["packages"] == {"nvidia-fabricmanager-550": "550.90.07-1"}  # -dev is not the service
    assert res["version"] == "550.90.07" and res["version_raw"] == "550.90.07-1"
    assert res["matches_driver"] is True and res["driver_source"] == "smi"


def test_point_release_mismatch_d2():
    res = fm.fabricmanager_facts(pkgs(nvidia_fabricmanager="530.30.02-1"), "530.41.03-0ubuntu1", "dpkg:nvidia-utils")
    assert res["matches_driver"] is False
    assert res["message"] == "fabricmanager 530.30.02 != driver 530.41.03"


def test_exact_no_major_minor_prefix():
    res = fm.fabricmanager_facts(pkgs(nvidia_fabricmanager_570="570.124.06-1"), "570.124", "nvml_mismatch")
    assert res["matches_driver"] is False


def test_transitional_cuda_drivers_package_is_not_preferred_d8():
    installed = pkgs(cuda_drivers_fabricmanager_460="510.85.02-1", nvidia_fabricmanager_510="510.85.02-1")
    res = fm.fabricmanager_facts(installed, "510.85.02", "dpkg:x")
    assert res["package"] == "nvidia-fabricmanager-510" and len(res["packages"]) == 2
    only = fm.fabricmanager_facts(pkgs(cuda_drivers_fabricmanager_535="535.54.03-1"), None)
    assert only["installed"] and only["matches_driver"] is None and only["driver_source"] is None


def test_log_refusal_reported():
    with open(os.path.join(FIX, "fabricmanager-mismatch.log")) as f:
        log = f.read()
    res = fm.fabricmanager_facts(pkgs(nvidia_fabricmanager_550="550.127.05-1"), None, None, log)
    assert [e["fabricmanager"] for e in res["log_mismatch"]] == ["530.30.02", "550.127.05"]
    assert res["message"] == "fabricmanager 550.127.05 != driver 550.120"
