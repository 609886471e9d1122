# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""Driver mismatch verdict (cases C1, C2, C3, C6, C17): three versions compared, one answer.

Inputs: the loaded kernel module version, the version of the module on disk for the kernel the host
boots next, and the userspace version (nvidia-smi / NVML / the utils package). Every comparison is
driver_version.same_driver_version (revision dropped, 07 == 7, NVML's major.minor matches). Verdicts:

* ``no_driver``        — no module loaded, none on disk for the boot kernel, no userspace.
* ``rebuild_required`` — the module on disk for the boot kernel is missing or differs from the
  userspace (or expected) version: a reboot will not fix it; the module build/install is wrong.
* ``reload_required``  — only the loaded module differs (or none is loaded): module reload or reboot.
* ``no_devices``       — versions agree but no device is visible (zero devices is a failure).
* ``ok``               — all three agree and devices are present.
"""

from __future__ import annotations

from typing import Any, Optional

from ansible_collections.npuops.fleet.plugins.module_utils.driver.version import normalize_version, same_driver_version

VERDICTS = ("ok", "reload_required", "rebuild_required", "no_driver", "no_devices")


def driver_verdict(
    loaded: Optional[str],
    on_disk_boot: Optional[str],
    userspace: Optional[str],
    boot_kernel: Optional[str] = None,
    device_count: Optional[int] = None,
    expected: Optional[str] = None,
    smi_status: Optional[str] = None,
) -> dict[str, Any]:
    """Return ``{"verdict", "reason", "healthy", "expected_match", "loaded", "on_disk_boot", "userspace"}``.

    ``expected`` (optional) is the version the host should run: it becomes the reference the on-disk
    and loaded modules are compared with when the userspace is unknown, and ``expected_match`` says
    whether all known versions equal it. ``smi_status`` ``no_devices`` (nvidia-smi said so) counts as
    zero devices.
    """
    loaded_n = normalize_version(loaded)
    disk_n = normalize_version(on_disk_boot)
    user_n = normalize_version(userspace)
    reference = user_n or normalize_version(expected)
    kernel = boot_kernel or "the boot kernel"
    res: dict[str, Any] = {
        "loaded": loaded_n,
        "on_disk_boot": disk_n,
        "userspace": user_n,
        "expected": normalize_version(expected),
        "boot_kernel": boot_kernel,
    }

    def done(verdict: str, reason: str) -> dict[str, Any]:
        res["verdict"] = verdict
        res["reason"] = reason
        res["healthy"] = verdict == "ok"
        exp = normalize_version(expected)
        known = [v for v in (loaded_n, disk_n, user_n) if v]
        # loaded and on-disk must be known and equal to it; the userspace only when it is known
        res["expected_match"] = (
            None if not exp else bool(loaded_n and disk_n) and all(same_driver_version(v, exp) for v in known)
        )
        return res

    if not loaded_n and not disk_n and not user_n:
        return done("no_driver", "no driver: no kernel module loaded, none installed for %s, no userspace" % kernel)

    if reference and not disk_n:
        return done(
            "rebuild_required",
            "a reboot will not fix this: no driver module is installed for %s (userspace is %s); "
            "module build/install is wrong" % (kernel, reference),
        )
    if reference and disk_n and not same_driver_version(disk_n, reference):
        if loaded_n and same_driver_version(loaded_n, disk_n):
            reason = (
                "a reboot will not fix this: the installed module is %s (for %s), userspace is %s; "
                "module build/install is wrong" % (disk_n, kernel, reference)
            )
        else:
            reason = "module build/install is wrong: the module on disk for %s is %s, userspace is %s%s" % (
                kernel,
                disk_n,
                reference,
                ", loaded module is %s" % loaded_n if loaded_n else "",
            )
        return done("rebuild_required", reason)

    if not loaded_n:
        return done(
            "reload_required",
            "module reload or reboot required: no module loaded, the module for %s is %s" % (kernel, disk_n),
        )
    ref = reference or disk_n
    if not same_driver_version(loaded_n, ref):
        return done(
            "reload_required",
            "module reload or reboot required: kernel module %s vs userspace %s" % (loaded_n, ref),
        )
    if device_count == 0 or smi_status == "no_devices":
        return done("no_devices", "driver %s is loaded but no devices were found" % loaded_n)
    return done("ok", "driver %s: loaded module, module on disk for %s and userspace agree" % (loaded_n, kernel))
