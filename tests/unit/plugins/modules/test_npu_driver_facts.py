"""npu_driver_facts against a simulated host: commands and files are answered from dicts."""

from __future__ import annotations

import json
import os

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.npuops.fleet.plugins.module_utils.driver.vendor_profiles import resolve_profile
from ansible_collections.npuops.fleet.plugins.module_utils.host import driver_facts as df
from ansible_collections.npuops.fleet.plugins.modules import npu_driver_facts as mod

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures")


def fixture(name):
    with open(os.path.join(FIX, name)) as f:
        return f.read()


DPKG_QUERY = (
    "nvidia-utils-580-server\t580.159.03-0ubuntu0.22.04.1\tii \n"
    "libnvidia-compute-580-server\t580.159.03-0ubuntu0.22.04.1\tii \n"
    "nvidia-dkms-580-server-open\t580.159.03-0ubuntu0.22.04.1\thi \n"
    "linux-image-5.15.0-177-generic\t5.15.0-177.187\tii \n"
    "linux-modules-5.15.0-177-generic\t5.15.0-177.187\tii \n"
    "linux-image-5.15.0-179-generic\t5.15.0-179.189\tii \n"
    "linux-generic\t5.15.0.179.163\tii \n"
    "unattended-upgrades\t2.8ubuntu1\tii \n"
    "openssl\t3.0.2\tii \n"
)
APT_DUMP = (
    'APT::Periodic::Unattended-Upgrade "1";\n'
    'Unattended-Upgrade::Package-Blacklist "";\nUnattended-Upgrade::Package-Blacklist:: "nvidia-";\n'
)


class Host:
    """The incident host of domain.md: userspace 580.159.03 installed, module 580.126.09 loaded."""

    def __init__(self, smi_out, smi_rc, files, ondisk):
        self.smi_out, self.smi_rc, self.files, self.ondisk = smi_out, smi_rc, files, ondisk
        self.calls = []

    def run(self, args, check=False):
        self.calls.append(args)
        cmd = os.path.basename(args[0])
        if cmd == "uname":
            return 0, "5.15.0-177-generic\n", ""
        if cmd == "modinfo":
            v = self.ondisk.get(args[2])
            return (0, v + "\n", "") if v else (1, "", "modinfo: ERROR: Module nvidia not found.\n")
        if cmd in ("nvidia-smi", "rbln-smi"):
            return self.smi_rc, self.smi_out, ""
        if cmd == "dpkg-query":
            return 0, getattr(self, "dpkg_query", DPKG_QUERY), ""
        if cmd == "dpkg":
            return 0, "nvidia-dkms-580-server-open\thold\nopenssl\tinstall\n", ""
        if cmd == "apt-config":
            return 0, APT_DUMP, ""
        if cmd == "systemctl":
            return (0, "enabled\n", "") if args[1] == "is-enabled" else (0, "active\n", "")
        if cmd in ("dkms", "mokutil", "journalctl"):
            # (rc, stdout, stderr) set by a test; a host that has not been given one prints nothing
            return getattr(self, cmd.replace("-", "_"), (0, "", ""))
        raise AssertionError(args)


def run_module(monkeypatch, host, args, boot=("vmlinuz-5.15.0-177-generic", "vmlinuz-5.15.0-179-generic")):
    monkeypatch.setattr(df.Facts, "run", lambda self, a, check=False: host.run(a, check))
    missing = getattr(host, "missing", ())
    monkeypatch.setattr(df.Facts, "bin", lambda self, name: None if name in missing else "/usr/bin/" + name)
    monkeypatch.setattr(df, "_read", host.files.get)
    monkeypatch.setattr(df, "_read_bytes", host.files.get)
    monkeypatch.setattr(df, "_read_log", lambda path: host.files.get(path, ""))
    real_listdir = os.listdir
    monkeypatch.setattr(df.os, "listdir", lambda p: list(boot) if p == "/boot" else real_listdir(p))
    monkeypatch.setattr(df.os.path, "exists", lambda p: p in host.files)
    monkeypatch.setattr(df.os.path, "isdir", lambda p: False)
    monkeypatch.setattr(df.glob, "glob", lambda p: [])
    monkeypatch.setattr(df.Facts, "sys_modules", lambda self, root="/sys/module": getattr(host, "sys_mods", {}))
    monkeypatch.setattr(df.Facts, "fd_links", lambda self, prefix, proc="/proc": getattr(host, "fd", []))
    monkeypatch.setattr(df.dpkg_lock, "read_cmdline", lambda pid, proc="/proc": getattr(host, "cmdlines", {}).get(pid))
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            mod.main()


def result(capsys):
    return json.loads(capsys.readouterr().out)


def test_incident_host_mismatch(monkeypatch, capsys):
    host = Host(
        fixture("nvidia-smi-nvml-mismatch.txt"),
        18,
        {
            "/proc/driver/nvidia/version": fixture("proc-driver-nvidia-version-open.txt"),
            "/var/log/apt/history.log": fixture("apt-history-unattended.txt"),
            "/var/run/reboot-required": "*** System restart required ***\n",
            "/var/run/reboot-required.pkgs": "linux-image-5.15.0-179-generic\n",
        },
        {"5.15.0-177-generic": "580.126.09", "5.15.0-179-generic": "580.159.03"},
    )
    run_module(monkeypatch, host, {"vendor": "nvidia", "expected_version": "580.159.03"})
    r = result(capsys)
    assert r["changed"] is False
    f = r["ansible_facts"]["npu_driver"]
    assert f["running_kernel"] == "5.15.0-177-generic"
    assert f["boot_kernel"] == "5.15.0-179-generic" and f["kernel_reboot_pending"] is True
    assert f["loaded_version"] == "580.126.09" and f["loaded_source"] == "proc_driver"
    assert f["on_disk_versions"] == {"5.15.0-177-generic": "580.126.09", "5.15.0-179-generic": "580.159.03"}
    assert f["userspace_version"] == "580.159.03"
    assert f["userspace_source"] == "dpkg:nvidia-utils-580-server"
    assert f["smi"]["status"] == "mismatch" and f["smi"]["library_version"] == "580.159"
    assert f["verdict"] == "reload_required"
    assert "module reload or reboot required" in f["verdict_reason"]
    assert f["expected_match"] is False
    assert f["device_count"] is None
    assert f["reboot_required"] is True and f["reboot_required_pkgs"] == ["linux-image-5.15.0-179-generic"]
    assert f["held_packages"] == ["nvidia-dkms-580-server-open"]
    assert set(f["installed_driver_packages"]) == {
        "nvidia-utils-580-server",
        "libnvidia-compute-580-server",
        "nvidia-dkms-580-server-open",
    }
    assert f["booted_kernel_packages"] == ["linux-image-5.15.0-177-generic", "linux-modules-5.15.0-177-generic"]
    assert f["kernel_meta_packages"] == ["linux-generic"]
    uu = f["unattended_upgrades"]
    assert uu["enabled"] is True and uu["blacklist"] == ["nvidia-"]
    assert "libnvidia-*" in uu["uncovered_families"] and "linux-image-*" in uu["uncovered_families"]
    last = f["last_driver_package_change"]
    assert last["unattended"] and last["start"] == "2026-05-21 06:56:07"
    assert r["verdict"] == f["verdict"]  # plain keys too


def test_ok_host_with_query(monkeypatch, capsys):
    host = Host(
        fixture("nvidia-smi-query-ok.txt"),
        0,
        {"/sys/module/nvidia/version": "580.126.09\n"},
        {"5.15.0-177-generic": "580.126.09"},
    )
    run_module(
        monkeypatch,
        host,
        {"vendor": "nvidia", "smi_query_fields": ["index", "driver_version", "name", "memory.total"]},
        boot=("vmlinuz-5.15.0-177-generic",),
    )
    f = result(capsys)["ansible_facts"]["npu_driver"]
    assert f["loaded_source"] == "sys_module"
    assert f["userspace_version"] == "580.126.09" and f["userspace_source"] == "smi"
    assert f["device_count"] == 1 and f["devices"][0]["name"] == "NVIDIA GeForce RTX 5090"
    assert f["verdict"] == "ok" and f["healthy"] is True
    assert f["unattended_upgrades"]["uncovered_families"]  # only nvidia- blacklisted
    assert ["/usr/bin/nvidia-smi", "--query-gpu=index,driver_version,name,memory.total", "--format=csv,noheader"] in (
        host.calls
    )


def test_no_devices(monkeypatch, capsys):
    host = Host(
        fixture("nvidia-smi-no-devices.txt"),
        6,
        {"/sys/module/nvidia/version": "580.159.03\n"},
        {"5.15.0-177-generic": "580.159.03"},
    )
    run_module(monkeypatch, host, {"vendor": "nvidia", "boot_kernel": "5.15.0-177-generic"})
    f = result(capsys)["ansible_facts"]["npu_driver"]
    assert f["boot_kernel_source"] == "param"
    assert f["device_count"] == 0
    assert f["verdict"] == "no_devices"


def test_boot_kernel_without_module_c6(monkeypatch, capsys):
    host = Host(
        fixture("nvidia-smi-query-ok.txt"),
        0,
        {"/sys/module/nvidia/version": "580.126.09\n"},
        {"5.15.0-177-generic": "580.126.09"},
    )
    run_module(monkeypatch, host, {"vendor": "nvidia"})
    f = result(capsys)["ansible_facts"]["npu_driver"]
    assert f["module_present_for_boot_kernel"] is False
    assert f["verdict"] == "rebuild_required"
    assert "5.15.0-179-generic" in f["verdict_reason"]


def test_rebellions(monkeypatch, capsys):
    host = Host(fixture("rbln-smi-two-devices.txt"), 0, {}, {"5.15.0-177-generic": "3.0.0"})
    args = {"vendor": "rebellions", "expected_version": "3.0.0"}
    run_module(monkeypatch, host, args, boot=("vmlinuz-5.15.0-177-generic",))
    f = result(capsys)["ansible_facts"]["npu_driver"]
    assert f["module"] == "rebellions"
    assert f["loaded_version"] == "3.0.0" and f["loaded_source"] == "smi_kmd"
    assert f["device_count"] == 2
    # no rbln package installed in this fake host: expected version is the reference
    assert f["verdict"] == "ok" and f["expected_match"] is True
    prof = f["profile"]
    assert prof["name"] == "rebellions" and prof["main_module"] == "rebellions"
    assert prof["kernel_modules"] == ["rebellions"] and prof["packaging"][0]["packages"] == ["rbln-driver"]
    assert (f["packaging"]["name"], f["packaging"]["build"], f["packaging"]["source"]) == ("rbln", "dkms", "default")
    assert prof["userspace_package"] == "rbln-driver" and prof["services"] == ["rbln-daemon"]
    assert prof["smi_command"] == "rbln-smi" and prof["device_glob"] == "/dev/rbln[0-9]*"


def test_profile_returned_with_overrides(monkeypatch, capsys):
    """The role takes its host-side data from `profile`: overrides and extra vendors must show in it."""
    host = Host(
        fixture("nvidia-smi-query-ok.txt"),
        0,
        {"/sys/module/nvidia/version": "580.126.09\n"},
        {"5.15.0-177-generic": "580.126.09"},
    )
    args = {
        "vendor": "nvidia",
        "vendor_profile": {"services": ["nvidia-persistenced"], "main_module": "nvidia"},
        "boot_kernel": "5.15.0-177-generic",
    }
    run_module(monkeypatch, host, args)
    r = result(capsys)
    prof = r["profile"]
    assert r["ansible_facts"]["npu_driver"]["profile"] == prof
    assert prof["name"] == "nvidia" and prof["services"] == ["nvidia-persistenced"]
    assert prof["kernel_modules"] == ["nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia"]
    assert prof["userspace_package"] == "libnvidia-compute-{branch}-server"
    assert "nvidia-driver-{branch}-server-open" in [p for f in prof["packaging"] for p in f["packages"]]
    assert r["module"] == "nvidia"


def test_main_module_is_the_module_read(monkeypatch, capsys):
    host = Host(fixture("nvidia-smi-query-ok.txt"), 0, {"/sys/module/gpux/version": "580.126.09\n"}, {})
    extra = {"gpux": {"base": "nvidia", "main_module": "gpux", "kernel_modules": ["gpux_uvm", "gpux"]}}
    run_module(monkeypatch, host, {"vendor": "gpux", "vendor_profiles": extra}, boot=("vmlinuz-5.15.0-177-generic",))
    r = result(capsys)
    assert r["module"] == "gpux" and r["loaded_version"] == "580.126.09" and r["loaded_source"] == "sys_module"
    assert r["profile"]["name"] == "gpux" and r["profile"]["packaging"] == resolve_profile("nvidia")["packaging"]


def test_unknown_vendor_fails(monkeypatch, capsys):
    host = Host("", 0, {}, {})
    run_module(monkeypatch, host, {"vendor": "amd"})
    r = result(capsys)
    assert r["failed"] and "unknown vendor 'amd'" in r["msg"]


# target_match / smi_driver_version: each source against expected_version by driver_version's rule


def test_target_match_incident_host(monkeypatch, capsys):
    """Userspace and boot-kernel module moved to 580.159.03, loaded module still 580.126.09, NVML refuses."""
    host = Host(
        fixture("nvidia-smi-nvml-mismatch.txt"),
        18,
        {"/proc/driver/nvidia/version": fixture("proc-driver-nvidia-version-open.txt")},
        {"5.15.0-177-generic": "580.126.09", "5.15.0-179-generic": "580.159.03"},
    )
    run_module(monkeypatch, host, {"vendor": "nvidia", "expected_version": "580.159.03"})
    r = result(capsys)
    f = r["ansible_facts"]["npu_driver"]
    assert f["userspace_version_raw"] == "580.159.03-0ubuntu0.22.04.1"  # revision dropped by the rule, not by ==
    assert f["smi_driver_version"] is None  # NVML mismatch: no device rows
    assert f["target_match"] == {"loaded": False, "userspace": True, "on_disk_boot": True, "smi": False, "all": False}
    assert r["target_match"] == f["target_match"] and r["smi_driver_version"] is None


def test_target_match_ok_host_numeric_components(monkeypatch, capsys):
    """Target written 580.126.9: Jinja == would fail every source, the rule passes them all."""
    host = Host(
        fixture("nvidia-smi-query-ok.txt"),
        0,
        {"/sys/module/nvidia/version": "580.126.09\n"},
        {"5.15.0-177-generic": "580.126.09"},
    )
    fields = ["index", "driver_version", "name", "memory.total"]
    args = {"vendor": "nvidia", "expected_version": "580.126.9", "smi_query_fields": fields}
    run_module(monkeypatch, host, args, boot=("vmlinuz-5.15.0-177-generic",))
    f = result(capsys)["ansible_facts"]["npu_driver"]
    assert f["smi_driver_version"] == "580.126.09"
    assert f["target_match"] == {"loaded": True, "userspace": True, "on_disk_boot": True, "smi": True, "all": True}
    assert f["expected_match"] is True


def test_target_match_ok_host_other_target(monkeypatch, capsys):
    host = Host(
        fixture("nvidia-smi-query-ok.txt"),
        0,
        {"/sys/module/nvidia/version": "580.126.09\n"},
        {"5.15.0-177-generic": "580.126.09"},
    )
    fields = ["index", "driver_version", "name", "memory.total"]
    args = {"vendor": "nvidia", "expected_version": "580", "smi_query_fields": fields}  # a branch is not a version
    run_module(monkeypatch, host, args, boot=("vmlinuz-5.15.0-177-generic",))
    f = result(capsys)["ansible_facts"]["npu_driver"]
    assert f["target_match"] == {"loaded": False, "userspace": False, "on_disk_boot": False, "smi": False, "all": False}


def test_target_match_null_without_expected_version(monkeypatch, capsys):
    host = Host(
        fixture("nvidia-smi-query-ok.txt"),
        0,
        {"/sys/module/nvidia/version": "580.126.09\n"},
        {"5.15.0-177-generic": "580.126.09"},
    )
    run_module(
        monkeypatch,
        host,
        {"vendor": "nvidia", "smi_query_fields": ["index", "driver_version", "name", "memory.total"]},
        boot=("vmlinuz-5.15.0-177-generic",),
    )
    r = result(capsys)
    assert r["target_match"] is None and r["smi_driver_version"] == "580.126.09"


def test_target_match_smi_every_device_must_match(monkeypatch, capsys):
    # second GPU reports another driver (constructed: two rows in the layout of nvidia-smi-query-ok.txt)
    out = fixture("nvidia-smi-query-ok.txt") + "1, 580.159.03, NVIDIA GeForce RTX 5090, 32607 MiB\n"
    host = Host(out, 0, {"/sys/module/nvidia/version": "580.126.09\n"}, {"5.15.0-177-generic": "580.126.09"})
    fields = ["index", "driver_version", "name", "memory.total"]
    args = {"vendor": "nvidia", "expected_version": "580.126.09", "smi_query_fields": fields}
    run_module(monkeypatch, host, args, boot=("vmlinuz-5.15.0-177-generic",))
    f = result(capsys)["ansible_facts"]["npu_driver"]
    assert f["smi_driver_version"] == "580.126.09"
    assert f["target_match"]["smi"] is False and f["target_match"]["loaded"] is True
    assert f["target_match"]["all"] is False


def test_target_match_smi_without_driver_version_field(monkeypatch, capsys):
    host = Host("0, NVIDIA GeForce RTX 5090\n", 0, {"/sys/module/nvidia/version": "580.126.09\n"}, {})
    args = {"vendor": "nvidia", "expected_version": "580.126.09", "smi_query_fields": ["index", "name"]}
    run_module(monkeypatch, host, args, boot=("vmlinuz-5.15.0-177-generic",))
    f = result(capsys)["ansible_facts"]["npu_driver"]
    assert f["smi_driver_version"] is None and f["target_match"]["smi"] is False


class RblnHost(Host):
    """The rebellions fake host with the userspace package installed (Debian revision -1)."""

    def run(self, args, check=False):
        if os.path.basename(args[0]) == "dpkg-query":
            self.calls.append(args)
            return 0, DPKG_QUERY + "rbln-driver\t3.0.0-1\tii \n", ""
        return super().run(args, check)


@pytest.mark.parametrize(
    "expected,match",
    [
        ("3.0.0", {"loaded": True, "userspace": True, "on_disk_boot": True, "smi": True, "all": True}),
        ("2.4.0", {"loaded": False, "userspace": False, "on_disk_boot": False, "smi": False, "all": False}),
    ],
)
def test_target_match_rebellions_kmd(monkeypatch, capsys, expected, match):
    host = RblnHost(fixture("rbln-smi-two-devices.txt"), 0, {}, {"5.15.0-177-generic": "3.0.0"})
    args = {"vendor": "rebellions", "expected_version": expected}
    run_module(monkeypatch, host, args, boot=("vmlinuz-5.15.0-177-generic",))
    f = result(capsys)["ansible_facts"]["npu_driver"]
    assert f["userspace_version_raw"] == "3.0.0-1" and f["userspace_source"] == "dpkg:rbln-driver"
    assert f["smi_driver_version"] == "3.0.0"  # rbln-smi's KMD ver
    assert f["target_match"] == match


def test_target_match_unknown_userspace_is_judged_on_module_and_smi(monkeypatch, capsys):
    """No rbln package on the host: target_match.userspace is false (nothing to compare), and ``all`` is
    decided by the loaded and on-disk module and the smi, as expected_match is."""
    host = Host(fixture("rbln-smi-two-devices.txt"), 0, {}, {"5.15.0-177-generic": "3.0.0"})
    args = {"vendor": "rebellions", "expected_version": "3.0.0"}
    run_module(monkeypatch, host, args, boot=("vmlinuz-5.15.0-177-generic",))
    f = result(capsys)["ansible_facts"]["npu_driver"]
    assert f["userspace_version"] is None and f["expected_match"] is True
    assert f["target_match"] == {"loaded": True, "userspace": False, "on_disk_boot": True, "smi": True, "all": True}


def test_loaded_modules_unload_order_from_holders_rdma_host(monkeypatch, capsys):
    # peermem (RDMA) and uvm use nvidia, drm uses modeset: removed users first, nvidia last;
    # loaded back only what was loaded (no fixed list)
    host = Host(
        fixture("nvidia-smi-query-ok.txt"),
        0,
        {"/sys/module/nvidia/version": "580.126.09\n"},
        {"5.15.0-177-generic": "580.126.09"},
    )
    host.sys_mods = {
        "nvidia": {"holders": ["nvidia_modeset", "nvidia_peermem", "nvidia_uvm"], "refcnt": 40},
        "nvidia_modeset": {"holders": ["nvidia_drm"], "refcnt": 2},
        "nvidia_drm": {"holders": [], "refcnt": 0},
        "nvidia_uvm": {"holders": [], "refcnt": 0},
        "nvidia_peermem": {"holders": [], "refcnt": 0},
        "ib_core": {"holders": ["ib_uverbs", "nvidia_peermem"], "refcnt": 3},
        "ib_uverbs": {"holders": [], "refcnt": 0},
    }
    host.fd = [(1346, "/dev/nvidiactl"), (1346, "/dev/nvidia0")]
    host.cmdlines = {1346: "/usr/bin/nvidia-persistenced --user nvidia-persistenced"}
    run_module(monkeypatch, host, {"vendor": "nvidia", "device_holders": True}, boot=("vmlinuz-5.15.0-177-generic",))
    f = result(capsys)["ansible_facts"]["npu_driver"]
    assert f["unload_order"] == ["nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia_peermem", "nvidia"]
    assert f["load_order"] == ["nvidia", "nvidia_peermem", "nvidia_uvm", "nvidia_modeset", "nvidia_drm"]
    assert f["loaded_modules"]["nvidia"] == ["nvidia_modeset", "nvidia_peermem", "nvidia_uvm"]
    assert "ib_core" not in f["loaded_modules"]
    assert f["module_refcnt"] == 40
    assert f["device_holders"] == [
        {
            "pid": 1346,
            "cmdline": "/usr/bin/nvidia-persistenced --user nvidia-persistenced",
            "devices": ["/dev/nvidia0", "/dev/nvidiactl"],
        }
    ]
    assert f["in_use_reason"] == (
        "module in use: nvidia held by modules nvidia_modeset, nvidia_peermem, nvidia_uvm; "
        "pid 1346 (/usr/bin/nvidia-persistenced --user nvidia-persistenced)"
    )
    assert f["interrupted_packages"] == {}


def test_nothing_loaded_loads_the_profile_set(monkeypatch, capsys):
    host = Host(fixture("nvidia-smi-no-driver.txt"), 9, {}, {"5.15.0-177-generic": "580.126.09"})
    run_module(monkeypatch, host, {"vendor": "nvidia"}, boot=("vmlinuz-5.15.0-177-generic",))
    f = result(capsys)["ansible_facts"]["npu_driver"]
    assert f["unload_order"] == [] and f["loaded_modules"] == {}
    assert f["load_order"] == ["nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm"]
    assert f["device_holders"] == [] and f["in_use_reason"] is None


# DKMS per kernel, Secure Boot, fabric manager (issue 12, item 7)

SB_VAR = "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-e0a9e9d6c3ae"


def test_dkms_secure_boot_fabricmanager(monkeypatch, capsys):
    host = Host(
        fixture("nvidia-smi-query-ok.txt"),
        0,
        {"/sys/module/nvidia/version": "580.126.09\n", SB_VAR: b"\x06\x00\x00\x00\x01"},
        {"5.15.0-177-generic": "580.126.09", "5.15.0-179-generic": "580.159.03"},
    )
    host.dkms = (
        0,
        "nvidia, 580.126.09, 5.15.0-177-generic, x86_64: installed\n"
        "nvidia/580.159.03, 5.15.0-179-generic, x86_64: installed\n",
        "",
    )
    host.dpkg_query = DPKG_QUERY + "nvidia-fabricmanager-580\t580.126.09-1\tii \n"
    run_module(monkeypatch, host, {"vendor": "nvidia"})
    r = result(capsys)
    f = r["ansible_facts"]["npu_driver"]
    assert r["dkms"] == f["dkms"]
    assert f["dkms"]["boot_kernel"] == "5.15.0-179-generic" and f["dkms"]["verdict"] == "installed"
    assert f["dkms"]["boot_kernel_installed"] is True and f["dkms"]["boot_kernel_version"] == "580.159.03"
    assert sorted(f["dkms"]["kernels"]) == ["5.15.0-177-generic", "5.15.0-179-generic"]
    assert f["secure_boot"] == {"state": "enabled", "source": "efivar", "detail": None}
    assert not [c for c in host.calls if c[0].endswith("mokutil")]  # the variable was enough
    fm = f["fabricmanager"]
    assert fm["installed"] is True and fm["version"] == "580.126.09" and fm["matches_driver"] is False
    assert fm["driver_version"] == "580.159.03" and fm["driver_source"] == "dpkg:nvidia-utils-580-server"
    assert fm["message"] == "fabricmanager 580.126.09 != driver 580.159.03"
    assert ["/usr/bin/dkms", "status"] in host.calls


def test_without_dkms_mokutil_journal(monkeypatch, capsys):
    host = Host(fixture("nvidia-smi-query-ok.txt"), 0, {"/sys/module/nvidia/version": "580.126.09\n"}, {})
    host.missing = ("dkms", "mokutil", "journalctl")
    host.dpkg_query = DPKG_QUERY + "nvidia-fabricmanager-580\t580.159.03-0ubuntu1\tii \n"
    run_module(monkeypatch, host, {"vendor": "nvidia"})
    r = result(capsys)
    assert not r.get("failed")  # absent commands are unknown, never a failure
    f = r["ansible_facts"]["npu_driver"]
    assert f["dkms"]["available"] is False and f["dkms"]["verdict"] == "unknown"
    assert f["dkms"]["boot_kernel_installed"] is None
    assert f["secure_boot"] == {"state": "unknown", "source": None, "detail": None}
    assert f["fabricmanager"]["matches_driver"] is True and f["fabricmanager"]["log_mismatch"] == []


def test_mokutil_legacy_bios_and_dkms_build_missing(monkeypatch, capsys):
    host = Host(fixture("nvidia-smi-query-ok.txt"), 0, {"/sys/module/nvidia/version": "580.126.09\n"}, {})
    host.mokutil = (1, "", "EFI variables are not supported on this system\n")
    host.dkms = (0, "nvidia/580.126.09, 5.15.0-177-generic, x86_64: installed\n", "")
    host.journalctl = (0, "", "")
    run_module(monkeypatch, host, {"vendor": "nvidia"})
    f = result(capsys)["ansible_facts"]["npu_driver"]
    assert f["secure_boot"]["state"] == "disabled" and f["secure_boot"]["source"] == "mokutil"
    # built for the running kernel only, the host boots 5.15.0-179-generic next
    assert f["dkms"]["verdict"] == "added-only" and f["dkms"]["boot_kernel_installed"] is False
    assert f["fabricmanager"]["installed"] is False and f["fabricmanager"]["matches_driver"] is None


def test_rebellions_dkms_no_fabricmanager(monkeypatch, capsys):
    host = Host(fixture("rbln-smi-two-devices.txt"), 0, {}, {"5.15.0-177-generic": "3.0.0"})
    host.dkms = (0, "rebellions/3.0.0, 5.15.0-177-generic, x86_64: installed\n", "")
    run_module(monkeypatch, host, {"vendor": "rebellions"}, boot=("vmlinuz-5.15.0-177-generic",))
    f = result(capsys)["ansible_facts"]["npu_driver"]
    assert f["dkms"]["driver_modules"] == ["rebellions"] and f["dkms"]["verdict"] == "installed"
    assert f["fabricmanager"] is None
    assert not [c for c in host.calls if c[0].endswith("journalctl")]


def test_identity_as_the_kubelet_reads_it(monkeypatch, capsys):
    host = Host(
        fixture("nvidia-smi-query-ok.txt"),
        0,
        {
            "/sys/module/nvidia/version": "580.126.09\n",
            "/var/lib/dbus/machine-id": "3d1219c7c4c5404aaa1f6d2a48adfda4\n",  # no /etc/machine-id: dbus's
            "/sys/class/dmi/id/product_uuid": "4C4C4544-0039-4810-8033-B4C04F5A4E32\n",
            "/run/sim/boot_id": "0f5ef7a2-9d0c-4a5e-8f43-2c1d6a3f0b7e\n",
        },
        {"5.15.0-177-generic": "580.126.09"},
    )
    monkeypatch.setattr(df.socket, "gethostname", lambda: "GPU-17")
    run_module(monkeypatch, host, {"vendor": "nvidia", "boot_id_file": "/run/sim/boot_id"},
               boot=("vmlinuz-5.15.0-177-generic",))
    assert result(capsys)["identity"] == {
        "machine_id": "3d1219c7c4c5404aaa1f6d2a48adfda4",
        "system_uuid": "4C4C4544-0039-4810-8033-B4C04F5A4E32",
        "boot_id": "0f5ef7a2-9d0c-4a5e-8f43-2c1d6a3f0b7e",
        "hostname": "gpu-17",
    }


def test_identity_unknown_parts_are_null(monkeypatch, capsys):
    host = Host(fixture("nvidia-smi-query-ok.txt"), 0, {"/etc/machine-id": "\n"}, {"5.15.0-177-generic": "580.126.09"})
    monkeypatch.setattr(df.socket, "gethostname", lambda: "gpu-17")
    run_module(monkeypatch, host, {"vendor": "nvidia"}, boot=("vmlinuz-5.15.0-177-generic",))
    ident = result(capsys)["identity"]
    assert ident == {"machine_id": None, "system_uuid": None, "boot_id": None, "hostname": "gpu-17"}


def test_module_runner_runs_in_the_c_locale():
    """The host modules' runner for driver_facts.gather: run_command with LC_ALL=C, never check_rc."""
    calls = []

    class Module:
        def run_command(self, args, **kw):
            calls.append((args, kw))
            return 1, None, "boom"

        def get_bin_path(self, name):
            return "/usr/sbin/" + name

    runner = df.ModuleRunner(Module())
    assert runner.run(["modinfo", "-k", "x"]) == (1, "", "boom")
    assert calls == [(["modinfo", "-k", "x"], {"environ_update": {"LC_ALL": "C"}})]
    assert runner.bin("modinfo") == "/usr/sbin/modinfo"


def test_packaging_target_and_buildability(monkeypatch, capsys):
    """An Ubuntu DKMS host on 580 with the fabric manager, headers only for the running kernel, Secure
    Boot on and DKMS's key not enrolled; the window plans 590 (a branch change)."""
    host = Host(fixture("nvidia-smi-query-ok.txt"), 0, {
        "/lib/modules/5.15.0-177-generic/build": "",
        "/var/lib/dkms/mok.pub": "",
        "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-e0a9e9d6c3ae": b"\x06\x00\x00\x00\x01",
    }, {})
    host.dpkg_query = DPKG_QUERY + (
        "nvidia-fabricmanager-580\t580.159.03-0ubuntu0.22.04.1\thi \n"
        "libnvidia-nscq-580\t580.159.03-0ubuntu0.22.04.1\tii \n"
        "linux-headers-5.15.0-177-generic\t5.15.0-177.187\tii \n"
        "nvidia-container-toolkit\t1.17.8-1\tii \n"
    )
    host.mokutil = (0, "/var/lib/dkms/mok.pub is not enrolled\n", "")
    run_module(monkeypatch, host, {"vendor": "nvidia", "expected_version": "590.48.01"})
    pk = result(capsys)["packaging"]
    assert (pk["name"], pk["build"], pk["source"]) == ("ubuntu-server-open", "dkms", "detected")
    assert pk["kernel"] == "5.15.0-179-generic"  # the newest installed kernel boots next
    assert pk["target"] == [
        "nvidia-driver-590-server-open", "nvidia-dkms-590-server-open", "nvidia-kernel-common-590-server",
        "libnvidia-compute-590-server",
        "libnvidia-common-590-server", "nvidia-utils-590-server", "nvidia-compute-utils-590-server",
        "nvidia-fabricmanager-590", "libnvidia-nscq-590",
    ]
    assert pk["target_kernel"] == []
    assert pk["leaving"] == [
        "libnvidia-compute-580-server", "libnvidia-nscq-580", "nvidia-dkms-580-server-open",
        "nvidia-fabricmanager-580", "nvidia-utils-580-server",
    ]
    assert pk["kernels"]["5.15.0-177-generic"]["build_dir"] is True
    assert pk["kernels"]["5.15.0-179-generic"] == {
        "build_dir": False, "headers_package": "linux-headers-5.15.0-179-generic", "headers_installed": False}
    assert pk["problems"] == [
        "kernel 5.15.0-179-generic has no build tree for DKMS (/lib/modules/5.15.0-179-generic/build):"
        " install linux-headers-5.15.0-179-generic",
        "Secure Boot is enabled and DKMS's signing key /var/lib/dkms/mok.pub is not enrolled (mokutil --test-key):"
        " the kernel would refuse the module it builds",
    ]
    assert pk["signing"] == {"key": "/var/lib/dkms/mok.pub", "enrolled": False}
    assert ["/usr/bin/mokutil", "--test-key", "/var/lib/dkms/mok.pub"] in host.calls


def test_cuda_repository_host_moving_to_590_gets_branchless_names_and_the_pinning_package(monkeypatch, capsys):
    host = Host(fixture("nvidia-smi-query-ok.txt"), 0, {"/lib/modules/5.15.0-177-generic/build": ""}, {})
    host.dpkg_query = "".join("%s\t%s\tii \n" % kv for kv in (
        ("nvidia-open-580", "580.95.05-1"), ("nvidia-driver-580-open", "580.95.05-0ubuntu1"),
        ("nvidia-dkms-580-open", "580.95.05-0ubuntu1"), ("nvidia-kernel-common-580", "580.95.05-0ubuntu1"),
        ("libnvidia-compute-580", "580.95.05-0ubuntu1"), ("nvidia-utils-580", "580.95.05-0ubuntu1"),
        ("nvidia-compute-utils-580", "580.95.05-0ubuntu1"), ("libnvidia-gl-580", "580.95.05-0ubuntu1"),
        ("nvidia-modprobe", "580.95.05-1"), ("nvidia-driver-pinning-580.95.05", "580.95.05-1"),
        ("nvidia-container-toolkit", "1.17.8-1"), ("linux-image-5.15.0-177-generic", "5.15.0-177.187"),
    ))
    run_module(monkeypatch, host, {"vendor": "nvidia", "expected_version": "590.48.01"},
               boot=("vmlinuz-5.15.0-177-generic",))
    pk = result(capsys)["packaging"]
    assert (pk["name"], pk["branchless"], pk["pinning"]) == ("cuda-repo-open", True, "nvidia-driver-pinning-590.48.01")
    assert pk["target"] == ["nvidia-driver-open", "nvidia-dkms-open", "nvidia-kernel-common", "libnvidia-compute",
                            "nvidia-utils", "nvidia-compute-utils", "nvidia-open"]
    assert pk["leaving"] == [
        "libnvidia-compute-580", "nvidia-compute-utils-580", "nvidia-dkms-580-open", "nvidia-driver-580-open",
        "nvidia-driver-pinning-580.95.05", "nvidia-kernel-common-580", "nvidia-open-580", "nvidia-utils-580"]
    assert pk["counterparts"] == {"libnvidia-gl-580": "libnvidia-gl"}
    assert pk["target_optional"] == ["nvidia-modprobe"]


def test_ubuntu_archive_host_named_ubuntu_open_changes_branch_within_that_flavour(monkeypatch, capsys):
    """Ubuntu's own non-server packages are detected as the CUDA repository's (the same names up to 580);
    named ubuntu-open, a move to 590 is a branch change within it: the old branch's other packages get
    their 590 names, as on any branch change."""
    host = Host(fixture("nvidia-smi-query-ok.txt"), 0, {"/lib/modules/5.15.0-177-generic/build": ""}, {})
    host.dpkg_query = "".join("%s\t%s\tii \n" % kv for kv in (
        ("nvidia-driver-580-open", "580.95.05-0ubuntu0.22.04.1"),
        ("nvidia-dkms-580-open", "580.95.05-0ubuntu0.22.04.1"),
        ("nvidia-kernel-common-580", "580.95.05-0ubuntu0.22.04.1"),
        ("libnvidia-compute-580", "580.95.05-0ubuntu0.22.04.1"), ("nvidia-utils-580", "580.95.05-0ubuntu0.22.04.1"),
        ("nvidia-compute-utils-580", "580.95.05-0ubuntu0.22.04.1"),
        ("libnvidia-gl-580", "580.95.05-0ubuntu0.22.04.1"),
        ("linux-image-5.15.0-177-generic", "5.15.0-177.187"),
    ))
    run_module(monkeypatch, host, {"vendor": "nvidia", "expected_version": "590.48.01", "packaging": "ubuntu-open"},
               boot=("vmlinuz-5.15.0-177-generic",))
    pk = result(capsys)["packaging"]
    assert (pk["name"], pk["branchless"], pk["pinning"], pk["moving"]) == ("ubuntu-open", False, None, False)
    assert pk["target"][:2] == ["nvidia-driver-590-open", "nvidia-dkms-590-open"]
    assert pk["leaving"] == [
        "libnvidia-compute-580", "nvidia-compute-utils-580", "nvidia-dkms-580-open", "nvidia-driver-580-open",
        "nvidia-kernel-common-580", "nvidia-utils-580"]
    assert pk["counterparts"] == {"libnvidia-gl-580": "libnvidia-gl-590"}


def test_packaging_request_the_profile_lacks_is_reported(monkeypatch, capsys):
    host = Host(fixture("nvidia-smi-query-ok.txt"), 0, {}, {})
    run_module(monkeypatch, host, {"vendor": "nvidia", "expected_version": "590.48.01", "packaging": "suse"})
    r = result(capsys)
    assert not r.get("failed")  # reported, the role refuses on it
    pk = r["packaging"]
    assert pk["name"] is None and pk["target"] == [] and "'suse' is not in vendor profile 'nvidia'" in pk["error"]


# modules.dep as the real depmod wrote it on a Debian host (tests/lab/realpkg/FINDINGS.md): Debian's
# DKMS package names the files nvidia-current*.ko; the modules they carry are nvidia, nvidia_uvm ...
DEBIAN_MODULES_DEP = (
    "updates/dkms/nvidia-current.ko:\n"
    "updates/dkms/nvidia-current-modeset.ko: updates/dkms/nvidia-current.ko\n"
    "updates/dkms/nvidia-current-drm.ko: updates/dkms/nvidia-current-modeset.ko updates/dkms/nvidia-current.ko\n"
    "updates/dkms/nvidia-current-uvm.ko: updates/dkms/nvidia-current.ko\n"
    "kernel/drivers/net/dummy.ko:\n"
)


class DebianHost(Host):
    """modinfo as kmod answers there: by module name nothing, by file name and by path the real fields."""

    FILES = {
        "nvidia-current": "nvidia",
        "nvidia-current-modeset": "nvidia_modeset",
        "nvidia-current-drm": "nvidia_drm",
        "nvidia-current-uvm": "nvidia_uvm",
    }

    def run(self, args, check=False):
        if os.path.basename(args[0]) != "modinfo":
            return super().run(args, check)
        self.calls.append(args)
        if args[1:3] == ["-F", "name"]:
            base = args[3].rsplit("/", 1)[-1][: -len(".ko")]
            return (0, self.FILES[base] + "\n", "") if base in self.FILES else (0, base.replace("-", "_") + "\n", "")
        rel, name = args[2], args[-1]
        if name in self.FILES and rel in self.ondisk:
            return 0, self.ondisk[rel] + "\n", ""
        return 1, "", "modinfo: ERROR: Module %s not found.\n" % name


def test_debian_renamed_module_files_are_found_by_their_modinfo_name(monkeypatch, capsys):
    host = DebianHost(
        fixture("nvidia-smi-query-ok.txt"),
        0,
        {
            "/sys/module/nvidia/version": "535.216.03\n",
            "/lib/modules/5.15.0-177-generic/modules.dep": DEBIAN_MODULES_DEP,
            "/lib/modules/5.15.0-179-generic/modules.dep": DEBIAN_MODULES_DEP,
        },
        {"5.15.0-177-generic": "535.216.03", "5.15.0-179-generic": "535.216.03"},
    )
    run_module(monkeypatch, host, {"vendor": "nvidia"})
    f = result(capsys)["ansible_facts"]["npu_driver"]
    assert f["on_disk_versions"] == {"5.15.0-177-generic": "535.216.03", "5.15.0-179-generic": "535.216.03"}
    assert f["module_present_for_boot_kernel"] is True
    assert f["modprobe_names"] == {
        "nvidia": "nvidia-current",
        "nvidia_drm": "nvidia-current-drm",
        "nvidia_modeset": "nvidia-current-modeset",
        "nvidia_uvm": "nvidia-current-uvm",
    }
    assert f["module_file_conflicts"] == {}
    # each file's name read once; a module of another vendor is not read
    paths = [a[3] for a in host.calls if a[0].endswith("modinfo") and a[1:3] == ["-F", "name"]]
    assert len(paths) == len(set(paths)) and not any("dummy" in p for p in paths), paths


def test_two_files_carrying_the_module_are_a_conflict_not_a_guess(monkeypatch, capsys):
    dep = DEBIAN_MODULES_DEP + "extra/nvidia-old.ko:\n"
    host = DebianHost(
        fixture("nvidia-smi-query-ok.txt"),
        0,
        {
            "/sys/module/nvidia/version": "535.216.03\n",
            "/lib/modules/5.15.0-177-generic/modules.dep": dep,
            "/lib/modules/5.15.0-179-generic/modules.dep": DEBIAN_MODULES_DEP,
        },
        {"5.15.0-177-generic": "535.216.03", "5.15.0-179-generic": "535.261.03"},
    )
    host.FILES = dict(DebianHost.FILES, **{"nvidia-old": "nvidia"})
    run_module(monkeypatch, host, {"vendor": "nvidia"})
    f = result(capsys)["ansible_facts"]["npu_driver"]
    assert f["module_file_conflicts"] == {
        "5.15.0-177-generic": {"nvidia": ["extra/nvidia-old.ko", "updates/dkms/nvidia-current.ko"]}
    }
    assert "nvidia" not in f["modprobe_names"] and f["modprobe_names"]["nvidia_uvm"] == "nvidia-current-uvm"
    # the running kernel's version is unknown (the lookup by name fails); the boot kernel's is read
    assert f["on_disk_versions"] == {"5.15.0-177-generic": None, "5.15.0-179-generic": "535.261.03"}


def test_module_named_after_its_file_needs_no_lookup(monkeypatch, capsys):
    host = Host(
        fixture("nvidia-smi-query-ok.txt"),
        0,
        {
            "/sys/module/nvidia/version": "580.126.09\n",
            "/lib/modules/5.15.0-177-generic/modules.dep": "kernel/nvidia-580srv/nvidia.ko:\n"
            "kernel/nvidia-580srv/nvidia-uvm.ko: kernel/nvidia-580srv/nvidia.ko\n",
        },
        {"5.15.0-177-generic": "580.126.09", "5.15.0-179-generic": "580.126.09"},
    )
    run_module(monkeypatch, host, {"vendor": "nvidia"})
    f = result(capsys)["ansible_facts"]["npu_driver"]
    assert f["modprobe_names"] == {"nvidia": "nvidia", "nvidia_uvm": "nvidia_uvm"}
    # only for the modules with no file of their name (drm, modeset): the vendor's two files, once each
    read = [a[3] for a in host.calls if a[0].endswith("modinfo") and a[1:3] == ["-F", "name"]]
    assert sorted(read) == [
        "/lib/modules/5.15.0-177-generic/kernel/nvidia-580srv/nvidia-uvm.ko",
        "/lib/modules/5.15.0-177-generic/kernel/nvidia-580srv/nvidia.ko",
    ]


def pci_bus(tmp_path, devices):
    for addr, dev in devices.items():
        d = tmp_path / addr
        d.mkdir(parents=True)
        for k, v in {"vendor": "0x10de", "device": dev, "class": "0x030200", "subsystem_vendor": "0x10de",
                     "subsystem_device": "0x0000"}.items():
            (d / k).write_text(v + "\n")
    return str(tmp_path)


def gpus_missing_host(journal, loaded=True):
    # the open module refusing every GPU ends its init -ENODEV: nothing stays loaded, nvidia-smi finds no driver
    host = Host(fixture("nvidia-smi-no-devices.txt"), 6,
                {"/proc/driver/nvidia/version": fixture("proc-driver-nvidia-version-open.txt")},
                {"5.15.0-177-generic": "580.126.09", "5.15.0-179-generic": "580.126.09"}) if loaded else \
        Host(fixture("nvidia-smi-no-driver.txt"), 9, {},
             {"5.15.0-177-generic": "580.126.09", "5.15.0-179-generic": "580.126.09"})
    host.journalctl = (0, journal, "")
    return host


def test_gpus_the_open_module_refused_are_named_from_the_kernel_log_e3(monkeypatch, capsys, tmp_path):
    host = gpus_missing_host(fixture("dmesg-open-module-unsupported.txt"), loaded=False)
    root = pci_bus(tmp_path, {"0000:03:00.0": "0x1bb3"})
    run_module(monkeypatch, host, {"vendor": "nvidia", "pci_devices_dir": root})
    f = result(capsys)["ansible_facts"]["npu_driver"]
    assert f["pci_gpus"] == [{"address": "0000:03:00.0", "device_id": "0x1bb3", "subsystem_vendor": "0x10de",
                              "subsystem_device": "0x0000"}]
    assert f["loaded_version"] is None and f["device_count"] is None
    k = f["kernel_log"]
    assert k["reason"] == "module flavour not supported on this GPU" and k["devices"] == ["0000:03:00.0"], k
    assert k["lines"][0].endswith("NVRM: The NVIDIA GPU 0000:03:00.0 (PCI ID: 10de:1bb3)")
    assert ["-k", "-b"] == [a for a in host.calls if a[0].endswith("journalctl")][0][1:3]


def test_only_the_drivers_last_load_is_read_from_the_kernel_log(monkeypatch, capsys, tmp_path):
    # an earlier load in this boot refused the GPU; the last one loaded fine and then lost it
    journal = (fixture("dmesg-open-module-unsupported.txt")
               + "[  301.2] nvidia-nvlink: Nvlink Core is being initialized, major device number 511\n"
               + "[  301.4] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  580.126.09  Tue Jan 13 2026\n"
               + "[  340.0] usb 1-1: new high-speed USB device number 2 using xhci_hcd\n"
               + "[  402.7] NVRM: Xid (PCI:0000:03:00): 79, GPU has fallen off the bus.\n")
    host = gpus_missing_host(journal)
    root = pci_bus(tmp_path, {"0000:03:00.0": "0x20b2"})
    run_module(monkeypatch, host, {"vendor": "nvidia", "pci_devices_dir": root})
    k = result(capsys)["ansible_facts"]["npu_driver"]["kernel_log"]
    assert k["reason"] == "GPU lost (hardware/PCIe)" and k["devices"] == ["0000:03:00"], k
    assert not any("usb" in x for x in k["lines"])


def test_a_gpu_fallen_off_the_bus_is_named_lost_d16(monkeypatch, capsys, tmp_path):
    host = gpus_missing_host(fixture("dmesg-fallen-off-bus.txt"))
    root = pci_bus(tmp_path, {"0000:b3:00.0": "0x2330"})
    run_module(monkeypatch, host, {"vendor": "nvidia", "pci_devices_dir": root})
    k = result(capsys)["ansible_facts"]["npu_driver"]["kernel_log"]
    assert k["reason"] == "GPU lost (hardware/PCIe)" and k["devices"] == ["0000:b3:00.0"], k


def test_the_kernel_log_is_not_read_while_every_gpu_is_seen(monkeypatch, capsys, tmp_path):
    host = Host(fixture("nvidia-smi-query-ok.txt"), 0,
                {"/proc/driver/nvidia/version": fixture("proc-driver-nvidia-version-open.txt")},
                {"5.15.0-177-generic": "580.126.09", "5.15.0-179-generic": "580.126.09"})
    host.journalctl = (0, fixture("dmesg-fallen-off-bus.txt"), "")
    root = pci_bus(tmp_path, {"0000:18:00.0": "0x2330"})
    run_module(monkeypatch, host, {"vendor": "nvidia", "pci_devices_dir": root})
    f = result(capsys)["ansible_facts"]["npu_driver"]
    assert f["device_count"] >= 1 and f["kernel_log"] is None
    assert not [a for a in host.calls if a[0].endswith("journalctl") and "-k" in a]


def test_a_kernel_log_file_is_read_instead_of_the_journal(monkeypatch, capsys, tmp_path):
    host = gpus_missing_host("", loaded=False)
    host.files["/run/sim/kmsg"] = fixture("dmesg-open-module-unsupported.txt")
    root = pci_bus(tmp_path, {"0000:03:00.0": "0x1bb3"})
    run_module(monkeypatch, host, {"vendor": "nvidia", "pci_devices_dir": root, "kernel_log_file": "/run/sim/kmsg"})
    k = result(capsys)["ansible_facts"]["npu_driver"]["kernel_log"]
    assert k["reason"] == "module flavour not supported on this GPU", k
    assert not [a for a in host.calls if a[0].endswith(("journalctl", "dmesg"))]
