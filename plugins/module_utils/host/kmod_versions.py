# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""Kernel releases and kernel-module versions: pure helpers (no I/O)."""

from __future__ import annotations

import re
from typing import Iterable, Optional


def version_sort_key(release: str) -> tuple:
    """Sort key that orders kernel releases like ``sort -V`` (numbers compare as numbers).

    ``5.15.0-99-generic`` < ``5.15.0-179-generic``; ``6.8.0-45-generic`` > ``5.15.0-179-generic``.
    """
    parts = re.findall(r"\d+|[^\d]+", release or "")
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in parts)


def kernels_from_boot_listing(names: Iterable[str]) -> list[str]:
    """Kernel releases from the file names in /boot (``vmlinuz-<release>``), oldest first."""
    rels = set()
    for name in names:
        if name.startswith("vmlinuz-"):
            rel = name[len("vmlinuz-") :]
            if rel and not rel.endswith((".old", ".bak", ".dpkg-tmp", ".dpkg-new")):
                rels.add(rel)
    return sorted(rels, key=version_sort_key)


def next_boot_kernel(installed: Iterable[str]) -> Optional[str]:
    """The kernel the host boots next by default: the newest installed release (grub's default order)."""
    rels = sorted(set(installed), key=version_sort_key)
    return rels[-1] if rels else None


def kernel_patch_check(installed: Iterable[str], running: str, release: str) -> dict:
    """What patching to kernel ``release`` means on a host that has ``installed`` and runs ``running``.

    Returns ``{release, running, needed, installed, boots_next, newer_installed}``: ``needed`` when the
    host does not run it yet; ``boots_next`` when, once it is installed, it is the kernel the host boots
    by default (:func:`next_boot_kernel`: the newest installed); ``newer_installed`` the installed
    releases that sort after it and would boot instead (newest last).
    """
    have = set(installed)
    key = version_sort_key(release)
    return {
        "release": release,
        "running": running,
        "needed": release != running,
        "installed": release in have,
        "boots_next": next_boot_kernel(have | {release}) == release,
        "newer_installed": sorted((k for k in have if version_sort_key(k) > key), key=version_sort_key),
    }


def parse_modinfo_version(output: str) -> Optional[str]:
    """Version from ``modinfo -F version`` (one line) or full ``modinfo`` output (``version: X``)."""
    for line in (output or "").splitlines():
        s = line.strip()
        if not s:
            continue
        m = re.match(r"^version:\s*(\S+)", s)
        if m:
            return m.group(1)
        if ":" not in s and " " not in s:
            return s
    return None


def module_dep_files(modules_dep: str) -> dict[str, str]:
    """``/lib/modules/<k>/modules.dep`` text -> {file's module name: path}.

    The path is relative to that directory, or absolute for a depmod.d ``external`` directory. The
    file's module name is its basename without ``.ko[.xz|.zst|.gz]``, ``-`` as ``_`` (how modprobe and
    modinfo look a name up); depmod writes one line per name (it drops the lower-priority duplicate)."""
    res: dict[str, str] = {}
    for line in (modules_dep or "").splitlines():
        path = line.split(":", 1)[0].strip()
        if not path or ".ko" not in path:
            continue
        name = path.rsplit("/", 1)[-1].split(".ko", 1)[0].replace("-", "_")
        res.setdefault(name, path)
    return res


def module_file_candidates(files: dict[str, str], module: str) -> list[str]:
    """Paths of ``module_dep_files`` that may carry kernel module ``module`` under another file name
    (Debian's DKMS packages rename ``nvidia.ko`` to ``nvidia-current.ko``, ``nvidia-tesla-535.ko``...):
    those whose file name starts with the module's vendor stem (``nvidia`` for ``nvidia_uvm``). The
    caller reads each one's ``modinfo -F name``; a file named after the module needs no lookup."""
    stem = module.replace("-", "_").split("_", 1)[0]
    return sorted(path for name, path in files.items() if name == stem or name.startswith(stem + "_"))


def parse_sys_module_version(text: str) -> Optional[str]:
    """Content of ``/sys/module/<mod>/version`` -> version string or None."""
    s = (text or "").strip()
    return s.splitlines()[0].strip() if s else None


def kernel_package_names(release: str) -> list[str]:
    """Debian/Ubuntu packages that carry one kernel release (holding these pins the booted kernel)."""
    return [
        "linux-image-%s" % release,
        "linux-image-unsigned-%s" % release,
        "linux-modules-%s" % release,
        "linux-modules-extra-%s" % release,
        "linux-headers-%s" % release,
    ]


# Meta packages that pull a newer kernel in (Ubuntu flavours and Debian's arch metas).
KERNEL_META_PATTERNS = (
    "linux-generic",
    "linux-generic-hwe-*",
    "linux-image-generic",
    "linux-image-generic-hwe-*",
    "linux-headers-generic",
    "linux-headers-generic-hwe-*",
    "linux-virtual",
    "linux-virtual-hwe-*",
    "linux-image-virtual",
    "linux-image-virtual-hwe-*",
    "linux-headers-virtual",
    "linux-headers-virtual-hwe-*",
    "linux-aws",
    "linux-image-aws",
    "linux-headers-aws",
    "linux-gcp",
    "linux-image-gcp",
    "linux-azure",
    "linux-image-azure",
    "linux-oracle",
    "linux-image-oracle",
    "linux-image-amd64",
    "linux-headers-amd64",
    "linux-image-arm64",
    "linux-headers-arm64",
    "linux-image-cloud-amd64",
    "linux-modules-nvidia-*-generic",
    "linux-modules-nvidia-*-generic-hwe-*",
)
