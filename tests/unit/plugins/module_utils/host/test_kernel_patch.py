from __future__ import annotations

import pytest

from ansible_collections.npuops.fleet.plugins.module_utils.host.kmod_versions import kernel_patch_check

JAMMY = ["5.15.0-107-generic", "5.15.0-99-generic"]


def test_a_newer_kernel_not_installed_yet_boots_next():
    r = kernel_patch_check(JAMMY, "5.15.0-107-generic", "5.15.0-119-generic")
    assert r == {
        "release": "5.15.0-119-generic",
        "running": "5.15.0-107-generic",
        "needed": True,
        "installed": False,
        "boots_next": True,
        "newer_installed": [],
    }


def test_the_running_kernel_needs_no_patch():
    r = kernel_patch_check(JAMMY, "5.15.0-107-generic", "5.15.0-107-generic")
    assert (r["needed"], r["installed"], r["boots_next"]) == (False, True, True)


@pytest.mark.parametrize(
    "installed, release, newer",
    [
        # numeric, not string, order: 179 is newer than 119 (a string sort says the opposite)
        (JAMMY + ["5.15.0-179-generic"], "5.15.0-119-generic", ["5.15.0-179-generic"]),
        # a HWE kernel installed beside the GA one boots first
        (JAMMY + ["6.8.0-45-generic", "6.8.0-52-generic"], "5.15.0-119-generic",
         ["6.8.0-45-generic", "6.8.0-52-generic"]),
    ],
)
def test_an_installed_newer_kernel_would_boot_instead(installed, release, newer):
    r = kernel_patch_check(installed, "5.15.0-107-generic", release)
    assert r["boots_next"] is False
    assert r["newer_installed"] == newer


def test_a_downgrade_to_an_installed_older_kernel_does_not_boot_next():
    r = kernel_patch_check(JAMMY, "5.15.0-107-generic", "5.15.0-99-generic")
    assert (r["needed"], r["installed"], r["boots_next"]) == (True, True, False)
    assert r["newer_installed"] == ["5.15.0-107-generic"]


def test_module_dep_files_and_candidates():
    from ansible_collections.npuops.fleet.plugins.module_utils.host import kmod_versions as kv

    dep = (
        "updates/dkms/nvidia-current.ko:\n"
        "updates/dkms/nvidia-current-uvm.ko: updates/dkms/nvidia-current.ko\n"
        "kernel/drivers/video/nvidia-tesla-535.ko.zst:\n"
        "kernel/nvidia-580srv/nvidia.ko:\n"
        "kernel/drivers/net/dummy.ko:\n"
        "/opt/vendor/modules/rebellions.ko:\n"
        "updates/zfs.ko:\n"
        "not a module line\n"
    )
    files = kv.module_dep_files(dep)
    assert files == {
        "nvidia_current": "updates/dkms/nvidia-current.ko",
        "nvidia_current_uvm": "updates/dkms/nvidia-current-uvm.ko",
        "nvidia_tesla_535": "kernel/drivers/video/nvidia-tesla-535.ko.zst",
        "nvidia": "kernel/nvidia-580srv/nvidia.ko",
        "dummy": "kernel/drivers/net/dummy.ko",
        "rebellions": "/opt/vendor/modules/rebellions.ko",
        "zfs": "updates/zfs.ko",
    }
    # the vendor stem, not every out-of-tree file (zfs in updates/ is never read)
    assert kv.module_file_candidates(files, "nvidia_uvm") == [
        "kernel/drivers/video/nvidia-tesla-535.ko.zst",
        "kernel/nvidia-580srv/nvidia.ko",
        "updates/dkms/nvidia-current-uvm.ko",
        "updates/dkms/nvidia-current.ko",
    ]
    assert kv.module_file_candidates(files, "rebellions") == ["/opt/vendor/modules/rebellions.ko"]
    assert kv.module_file_candidates(files, "gdrdrv") == []
