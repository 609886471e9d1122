from __future__ import annotations

import os

from ansible_collections.npuops.fleet.plugins.module_utils.host import apt_state
from ansible_collections.npuops.fleet.plugins.module_utils.host.kmod_versions import (
    kernel_package_names,
    kernels_from_boot_listing,
    next_boot_kernel,
    parse_modinfo_version,
    parse_sys_module_version,
)

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures")

DRIVER_FAMILIES = ["nvidia-*", "libnvidia-*", "cuda-*", "xserver-xorg-video-nvidia-*", "linux-modules-nvidia-*"]


def fixture(name):
    with open(os.path.join(FIX, name)) as f:
        return f.read()


def test_history_unattended_fixture():
    entries = apt_state.parse_apt_history(fixture("apt-history-unattended.txt"))
    assert len(entries) == 2
    first, second = entries
    assert first["unattended"] and first["commandline"] == "/usr/bin/unattended-upgrade"
    assert first["start"] == "2026-05-21 06:52:45"
    assert len(first["packages"]) == 5
    p = first["packages"][0]
    assert p == {
        "action": "upgrade",
        "name": "libnvidia-common-580-server",
        "arch": "amd64",
        "from": "580.126.09-0ubuntu0.22.04.1",
        "to": "580.159.03-0ubuntu0.22.04.1",
        "automatic": False,
    }
    installs = [x for x in second["packages"] if x["action"] == "install"]
    assert [x["name"] for x in installs] == [
        "linux-image-5.15.0-179-generic",
        "linux-headers-5.15.0-179-generic",
        "linux-modules-5.15.0-179-generic",
    ]
    assert installs[0]["automatic"] and installs[0]["to"] == "5.15.0-179.189"
    meta = [x for x in second["packages"] if x["action"] == "upgrade"][0]
    assert meta["name"] == "linux-generic" and meta["to"] == "5.15.0.179.163"


def test_last_entry_touching_driver_and_kernel():
    entries = apt_state.parse_apt_history(fixture("apt-history-unattended.txt"))
    last = apt_state.last_entry_touching(entries, DRIVER_FAMILIES + list(apt_state.KERNEL_FAMILIES))
    assert last["start"] == "2026-05-21 06:56:07" and last["unattended"]
    assert len(last["packages"]) == 4 and last["total_packages"] == 4
    drv = apt_state.last_entry_touching(entries, DRIVER_FAMILIES)
    assert drv["end"] == "2026-05-21 06:55:58"
    assert {p["name"] for p in drv["packages"]} >= {"nvidia-utils-580-server", "libnvidia-compute-580-server"}
    assert apt_state.last_entry_touching(entries, ["rbln-*"]) is None


def test_history_manual_entry_not_unattended():
    text = (
        "Start-Date: 2026-05-22  10:00:00\nCommandline: apt-get install nvidia-driver-550\n"
        "Requested-By: ops (1000)\nInstall: nvidia-driver-550:amd64 (550.90.07-0ubuntu1)\n"
        "Remove: nvidia-driver-535:amd64 (535.183.06-0ubuntu1)\nEnd-Date: 2026-05-22  10:01:00\n"
    )
    (e,) = apt_state.parse_apt_history(text)
    assert not e["unattended"] and e["requested_by"] == "ops (1000)"
    assert e["packages"][1] == {
        "action": "remove",
        "name": "nvidia-driver-535",
        "arch": "amd64",
        "from": "535.183.06-0ubuntu1",
        "to": None,
        "automatic": False,
    }


APT_DUMP = """APT "";
APT::Periodic "";
APT::Periodic::Update-Package-Lists "1";
APT::Periodic::Unattended-Upgrade "0";
Unattended-Upgrade "";
Unattended-Upgrade::Origins-Pattern "";
Unattended-Upgrade::Origins-Pattern:: "origin=NpuopsLab,label=NpuopsLab,suite=lab";
Unattended-Upgrade::Package-Blacklist "";
Unattended-Upgrade::Package-Blacklist:: "nvidia-";
Unattended-Upgrade::Package-Blacklist:: "libnvidia-";
Unattended-Upgrade::Automatic-Reboot "false";
"""


def test_apt_config_dump():
    cfg = apt_state.parse_apt_config_dump(APT_DUMP)
    assert cfg["APT::Periodic::Unattended-Upgrade"] == "0"
    assert apt_state.apt_list(cfg, apt_state.BLACKLIST_KEY) == ["nvidia-", "libnvidia-"]
    assert apt_state.apt_list(cfg, "Unattended-Upgrade::Origins-Pattern") == [
        "origin=NpuopsLab,label=NpuopsLab,suite=lab"
    ]
    assert apt_state.apt_list(cfg, "Nope") == []
    assert cfg["Unattended-Upgrade::Automatic-Reboot"] == "false"


def test_periodic_enabled():
    assert apt_state.periodic_enabled("1") is True
    assert apt_state.periodic_enabled("0") is False
    assert apt_state.periodic_enabled("always") is True
    assert apt_state.periodic_enabled(None) is None


def test_blacklist_coverage_c1_c4():
    # C1: the admin pinned nvidia-* only; libnvidia-common moved anyway
    assert not apt_state.blacklisted("libnvidia-common-460", ["nvidia-"])
    assert apt_state.uncovered_families(["nvidia-"], DRIVER_FAMILIES)[0] == "libnvidia-*"
    full = [apt_state.family_to_blacklist(f) for f in DRIVER_FAMILIES + list(apt_state.KERNEL_FAMILIES)]
    assert apt_state.uncovered_families(full, DRIVER_FAMILIES + list(apt_state.KERNEL_FAMILIES)) == []
    # C4 packages
    for name in ("nvidia-headless-580-server", "libnvidia-compute-580-server", "cuda-drivers-580",
                 "xserver-xorg-video-nvidia-580", "linux-image-5.15.0-179-generic", "linux-generic",
                 "linux-modules-nvidia-580-server-open-5.15.0-179-generic"):
        assert apt_state.blacklisted(name, full), name
    assert not apt_state.blacklisted("openssl", full)
    assert not apt_state.blacklisted("libcurl4", full)


def test_family_to_blacklist_escapes():
    assert apt_state.family_to_blacklist("libnvidia-*") == "libnvidia-"
    assert apt_state.family_to_blacklist("linux-modules-nvidia-*-generic") == "linux-modules-nvidia-.*-generic"
    assert apt_state.family_to_blacklist("rbln-*") == "rbln-"
    assert apt_state.family_to_blacklist("libstdc++*") == "libstdc\\+\\+"


def test_dpkg_selections_and_query():
    sel = "linux-image-5.15.0-107-generic\thold\nnvidia-driver-535:amd64\t\t\thold\nopenssl\tinstall\n"
    assert apt_state.held_packages(sel) == ["linux-image-5.15.0-107-generic", "nvidia-driver-535"]
    q = (
        "nvidia-driver-535\t535.183.06-0ubuntu1\thi \nold-pkg\t1.0\trc \n"
        "libnvidia-compute-535:amd64\t535.183.06-0ubuntu1\tii \n"
    )
    inst = apt_state.parse_dpkg_query(q)
    assert set(inst) == {"nvidia-driver-535", "libnvidia-compute-535"}
    assert apt_state.match_families(inst, ["libnvidia-*"]) == ["libnvidia-compute-535"]


def test_reboot_required_pkgs():
    assert apt_state.parse_reboot_required_pkgs("linux-image-5.15.0-179-generic\nlinux-base\nlinux-base\n") == [
        "linux-image-5.15.0-179-generic",
        "linux-base",
    ]


def test_kernels_and_boot_kernel():
    listing = ["vmlinuz-5.15.0-99-generic", "vmlinuz-5.15.0-179-generic", "vmlinuz", "initrd.img-5.15.0-179-generic",
               "vmlinuz.old", "config-5.15.0-99-generic"]
    rels = kernels_from_boot_listing(listing)
    assert rels == ["5.15.0-99-generic", "5.15.0-179-generic"]
    assert next_boot_kernel(rels) == "5.15.0-179-generic"
    assert next_boot_kernel(["6.8.0-45-generic", "5.15.0-179-generic"]) == "6.8.0-45-generic"
    assert next_boot_kernel([]) is None


def test_modinfo_and_sys_module():
    assert parse_modinfo_version("550.90.07\n") == "550.90.07"
    assert parse_modinfo_version("filename:  /lib/modules/x/nvidia.ko\nversion:        595.80\n") == "595.80"
    assert parse_modinfo_version("") is None
    assert parse_sys_module_version("3.0.0\n") == "3.0.0"
    assert parse_sys_module_version("") is None
    assert kernel_package_names("5.15.0-107-generic")[0] == "linux-image-5.15.0-107-generic"
