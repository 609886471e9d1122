"""dkms status formats and failed builds (D3, D4, D5); expected values read off the fixtures by hand."""

from __future__ import annotations

import os

from ansible_collections.npuops.fleet.plugins.module_utils.host import dkms

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures")


def fixture(name):
    with open(os.path.join(FIX, name)) as f:
        return f.read()


def test_every_status_format_d5():
    res = dkms.parse_status(fixture("dkms-status-formats.txt"))
    assert res["ok"] and res["errors"] == []
    got = [(e["module"], e["version"], e["kernel"], e["arch"], e["state"], e["note"]) for e in res["entries"]]
    assert got == [
        ("v4l2loopback", "0.12.5", "5.15.16_1", "x86_64", "installed", None),
        ("v4l2loopback", "0.12.5", "5.15.16_1", "x86_64", "installed", None),
        ("fwts-efi-runtime-dkms", "24.07.00", None, None, "added", None),
        ("nvidia", "390.157", None, None, "added", None),
        ("vboxhost", "7.0.8_OSE", "6.4.1-zen1-1-zen", "x86_64", "installed", None),
        ("vhba-module", "20211218", "6.4.1-zen1-1-zen", "x86_64", "built", None),
        ("nvidia", "550.163.01", None, None, "added", None),
        (
            "nvidia",
            "535.154.05",
            "6.8.0-31-generic",
            "x86_64",
            "installed",
            "WARNING! Diff between built and installed module!",
        ),
    ]


def test_added_only_is_not_built_d5():
    entries = dkms.parse_status(fixture("dkms-status-formats.txt"))["entries"]
    assert dkms.build_for_kernel(entries, "nvidia", "550.163.01", "6.8.0-31-generic") == {
        "state": "added-only",
        "note": None,
        "built": False,
    }
    assert dkms.build_for_kernel(entries, "nvidia", "535.154.05", "6.8.0-31-generic")["built"] is True
    assert dkms.build_for_kernel(entries, "nvidia", "535.154.05", "6.8.0-45-generic")["state"] == "added-only"
    assert dkms.build_for_kernel(entries, "nvidia", "580.126.09", "6.8.0-31-generic")["state"] == "missing"


def test_error_with_rc0_is_an_error_d5():
    res = dkms.parse_status(fixture("dkms-status-error-rc0.txt"), rc=0)
    assert res["ok"] is False and res["entries"] == []
    assert res["errors"] == [
        "Error! Could not locate dkms.conf file. File: /var/lib/dkms/nvidia/535.104.05/source/dkms.conf does not exist."
    ]


def test_secure_boot_host_dkms_says_installed_d3():
    entries = dkms.parse_status(fixture("secureboot-key-rejected.txt"))["entries"]
    assert [e["kernel"] for e in entries] == ["5.15.0-86-generic", "6.2.0-33-generic", "6.2.0-34-generic"]
    assert all(e["state"] == "installed" and e["version"] == "535.113.01" for e in entries)


def test_build_failure_inside_apt_d4():
    (f,) = dkms.build_failures(fixture("apt-dkms-build-fail.txt"))
    assert f["kernel"] == "6.17.9-76061709-generic" and f["arch"] == "x86_64"
    assert f["log"] == "/var/lib/dkms/nvidia/580.119.02/build/make.log"
    assert f["message"] == (
        "DKMS module build failed for kernel 6.17.9-76061709-generic; "
        "see /var/lib/dkms/nvidia/580.119.02/build/make.log"
    )


# kernel_facts: the DKMS state per kernel and the verdict for the boot kernel (issue 12, item 7)

DEBIAN_3X = (
    "nvidia-current/535.216.03, 6.1.0-50-amd64, x86_64: installed\n"
    "nvidia-current/535.216.03, 6.1.0-51-amd64, x86_64: built\n"
)
UBUNTU_2X = (
    "nvidia, 550.90.07, 5.15.0-119-generic, x86_64: installed\n"
    "nvidia, 550.90.07, 5.15.0-122-generic, x86_64: installed (WARNING! Diff between built and installed module!)\n"
    "v4l2loopback, 0.12.5, 5.15.0-119-generic, x86_64: installed\n"
)


def test_driver_module_patterns_are_data():
    assert "nvidia-current" in dkms.driver_module_patterns("nvidia")
    assert dkms.driver_module_patterns("rebellions") == ["rebellions"]
    assert dkms.driver_module_patterns("gpux") == ["gpux"]


def test_debian_nvidia_current_per_kernel():
    res = dkms.kernel_facts(DEBIAN_3X, 0, "nvidia", "6.1.0-50-amd64")
    assert res["available"] and res["ok"]
    assert res["driver_modules"] == ["nvidia-current"]
    assert res["kernels"]["6.1.0-51-amd64"] == [
        {"module": "nvidia-current", "version": "535.216.03", "arch": "x86_64", "state": "built", "note": None}
    ]
    assert res["boot_kernel_installed"] is True and res["verdict"] == "installed"
    assert res["boot_kernel_version"] == "535.216.03"
    built = dkms.kernel_facts(DEBIAN_3X, 0, "nvidia", "6.1.0-51-amd64")
    assert built["boot_kernel_installed"] is False and built["verdict"] == "built"


def test_ubuntu_2x_warning_and_other_modules():
    res = dkms.kernel_facts(UBUNTU_2X, 0, "nvidia", "5.15.0-122-generic")
    assert res["driver_modules"] == ["nvidia"]
    assert res["verdict"] == "installed-with-warning"
    assert res["boot_kernel_note"] == "WARNING! Diff between built and installed module!"
    assert [e["module"] for e in res["kernels"]["5.15.0-119-generic"]] == ["nvidia", "v4l2loopback"]


def test_boot_kernel_without_build_missing_or_added_only():
    res = dkms.kernel_facts(UBUNTU_2X, 0, "nvidia", "6.8.0-45-generic")
    assert res["verdict"] == "added-only" and res["boot_kernel_installed"] is False
    res = dkms.kernel_facts("nvidia/580.95.05: added\n", 0, "nvidia", "6.8.0-45-generic")
    assert res["verdict"] == "added-only" and res["registered"] == [{"module": "nvidia", "version": "580.95.05"}]
    other = "v4l2loopback/0.12.5, 6.8.0-45-generic, x86_64: installed\n"
    res = dkms.kernel_facts(other, 0, "nvidia", "6.8.0-45-generic")
    assert res["verdict"] == "missing" and res["driver_modules"] == []


def test_expected_version_only_counts_that_version():
    res = dkms.kernel_facts(UBUNTU_2X, 0, "nvidia", "5.15.0-119-generic", "550.90.7")
    assert res["verdict"] == "installed"
    res = dkms.kernel_facts(UBUNTU_2X, 0, "nvidia", "5.15.0-119-generic", "570.124.06")
    assert res["verdict"] == "missing" and res["boot_kernel_installed"] is False


def test_error_line_and_no_dkms():
    text = (
        "Error! Could not locate dkms.conf file.\n"
        "File: /var/lib/dkms/nvidia/550.54.14/source/dkms.conf does not exist.\n"
    )
    res = dkms.kernel_facts(text, 0, "nvidia", "6.8.0-45-generic")
    assert res["ok"] is False and res["verdict"] == "error" and len(res["errors"]) == 1
    res = dkms.kernel_facts(None, 0, "nvidia", "6.8.0-45-generic")
    assert res["available"] is False and res["verdict"] == "unknown" and res["boot_kernel_installed"] is None


def test_formats_fixture_each_kernel():
    res = dkms.kernel_facts(fixture("dkms-status-formats.txt"), 0, "nvidia", "6.8.0-31-generic")
    assert sorted(res["kernels"]) == ["5.15.16_1", "6.4.1-zen1-1-zen", "6.8.0-31-generic"]
    assert len(res["kernels"]["5.15.16_1"]) == 1  # the same module printed in both formats
    assert res["verdict"] == "installed-with-warning"
