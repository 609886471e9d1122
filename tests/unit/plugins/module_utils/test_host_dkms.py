"""dkms status formats and failed builds (D3, D4, D5); expected values read off the fixtures by hand."""

from __future__ import annotations

import os

from ansible_collections.npuops.fleet.plugins.module_utils.host import dkms

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures")


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
