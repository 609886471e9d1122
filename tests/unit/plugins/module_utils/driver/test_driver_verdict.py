from __future__ import annotations

import os

from ansible_collections.npuops.fleet.plugins.module_utils.driver.verdict import driver_verdict
from ansible_collections.npuops.fleet.plugins.module_utils.host.smi_parsers import (
    classify_nvidia_smi,
    parse_nvrm_api_mismatch,
    parse_proc_driver_nvidia_version,
    parse_rbln_smi,
)

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures")


def fixture(name):
    with open(os.path.join(FIX, name)) as f:
        return f.read()


def test_c1_userspace_upgraded_module_loaded_old():
    v = driver_verdict("460.56", "460.73.01", "460.73.01", boot_kernel="5.4.0-70-generic", device_count=None)
    assert v["verdict"] == "reload_required"
    assert "module reload or reboot required" in v["reason"]
    assert "460.56" in v["reason"] and "460.73.01" in v["reason"]


def test_c2_reboot_will_not_fix():
    loaded = parse_proc_driver_nvidia_version(fixture("proc-driver-nvidia-version-legacy.txt"))
    v = driver_verdict(loaded, "520.56.06", "525.85.12-1", boot_kernel="6.1.0-18-amd64")
    assert v["verdict"] == "rebuild_required"
    assert "a reboot will not fix this: the installed module is 520.56.06" in v["reason"]
    assert "reboot required" not in v["reason"].replace("a reboot will not fix", "")
    assert v["userspace"] == "525.85.12"


def test_c2_on_disk_new_only_reload():
    v = driver_verdict("520.56.06", "525.85.12", "525.85.12-1")
    assert v["verdict"] == "reload_required"


def test_c3_api_mismatch_syslog_loaded_differs_only():
    m = parse_nvrm_api_mismatch(
        "NVRM: API mismatch: the client has the version 535.54.03, but#012NVRM: this kernel module has the "
        "version 530.30.02.  Please make sure"
    )
    v = driver_verdict(m["kernel_version"], "535.54.03", m["client_version"])
    assert v["verdict"] == "reload_required"
    assert "reboot" in v["reason"]


def test_c3_dkms_built_stale_source():
    v = driver_verdict("595.80", "595.80", "595.84", boot_kernel="6.8.0-90-generic")
    assert v["verdict"] == "rebuild_required"
    assert "module build/install is wrong" in v["reason"]
    assert "595.80" in v["reason"]


def test_c3_on_disk_differs_loaded_differs_too():
    v = driver_verdict("595.70", "595.80", "595.84")
    assert v["verdict"] == "rebuild_required"
    assert "module build/install is wrong" in v["reason"]


def test_c6_no_module_for_boot_kernel():
    v = driver_verdict("550.90.07", None, "550.90.07", boot_kernel="5.15.0-179-generic")
    assert v["verdict"] == "rebuild_required"
    assert "5.15.0-179-generic" in v["reason"]


def test_c17_mismatch_line_gives_userspace_major_minor():
    smi = classify_nvidia_smi(fixture("nvidia-smi-nvml-mismatch.txt"), 18)
    # incident of domain.md: loaded 580.126.09, new userspace 580.159(.03) on disk for the new kernel
    v = driver_verdict("580.126.09", "580.159.03", smi["library_version"], smi_status=smi["status"])
    assert v["verdict"] == "reload_required"
    assert "580.126.09" in v["reason"] and "580.159" in v["reason"]


def test_c17_no_devices_is_a_failure():
    v = driver_verdict("550.90.07", "550.90.07", "550.90.07", device_count=0, smi_status="no_devices")
    assert v["verdict"] == "no_devices"
    assert not v["healthy"]


def test_no_driver():
    v = driver_verdict(None, None, None)
    assert v["verdict"] == "no_driver"


def test_not_loaded_but_installed():
    v = driver_verdict(None, "550.90.07", "550.90.07")
    assert v["verdict"] == "reload_required"


def test_ok_and_expected():
    v = driver_verdict("550.90.07", "550.90.07", "550.90.07-0ubuntu1", device_count=8, expected="550.90.07")
    assert v["verdict"] == "ok" and v["healthy"]
    assert v["expected_match"] is True
    v = driver_verdict("535.183.06", "535.183.06", "535.183.06", device_count=8, expected="550.90.07")
    assert v["verdict"] == "ok"
    assert v["expected_match"] is False
    assert driver_verdict("1.0.0", "1.0.0", "1.0.0")["expected_match"] is None


def test_expected_is_reference_without_userspace():
    v = driver_verdict("2.4.0", "3.0.0", None, expected="3.0.0")
    assert v["verdict"] == "reload_required"


def test_rbln_kmd_vs_package():
    kmd = parse_rbln_smi(fixture("rbln-smi-two-devices.txt"))["kmd_version"]
    v = driver_verdict(kmd, "3.0.0", "3.0.0", device_count=2, expected="3.0.0")
    assert v["verdict"] == "ok" and v["expected_match"]
