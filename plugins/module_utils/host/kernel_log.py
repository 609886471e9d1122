# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""Kernel log and service log messages about the accelerator driver: pure parsers (no I/O).

* :func:`gpu_lost` - a GPU that has fallen off the bus (the three-line NVRM form, ``Xid ... 79``,
  nvidia-smi's ``Unable to determine the device handle``) or a failed probe: hardware / PCIe, not the
  driver version;
* :func:`module_flavour_unsupported` - the driver refused a GPU: the open module one without GSP (``not
  supported by open nvidia.ko because it does not include the required GPU System Processor``), the
  proprietary module one that needs the open modules, a release one it does not support; the
  ``probe routine failed`` line that follows is explained by it, so :func:`gpu_lost` does not fire;
* :func:`loaded_version` - the version from ``NVRM: loading NVIDIA UNIX ... Kernel Module`` lines;
* :func:`module_refused` - the kernel refused the module's signature (Secure Boot);
* :func:`fabricmanager_mismatch` - nv-fabricmanager and the driver from different releases.
"""

from __future__ import annotations

import re
from typing import Any, Optional

from ansible_collections.npuops.fleet.plugins.module_utils.host.smi_parsers import kernel_module_version

GPU_LOST = "GPU lost (hardware/PCIe)"
FLAVOUR_UNSUPPORTED = "module flavour not supported on this GPU"
RELEASE_UNSUPPORTED = "GPU not supported by this driver release"
MODULE_REFUSED = "module present but refused by the kernel (signature / Secure Boot)"

_TS_RE = re.compile(r"^\s*(?:\[\s*\d+\.\d+\]\s*)?")
_SECURE_BOOT_MARKERS = (
    "Key was rejected by service",
    "Required key not available",
    "Loading of module with unavailable key is rejected",
)


def _strip(line: str) -> str:
    """A kernel log line without its timestamp and ``NVRM:`` prefix."""
    s = _TS_RE.sub("", line)
    return re.sub(r"^NVRM:\s*", "", s.strip())


def gpu_lost(text: str) -> dict[str, Any]:
    """-> ``{"lost": bool, "devices": [PCI addresses, lower case], "probe_failed": n or None,
    "lines": [matching lines], "reason": GPU_LOST or None}``.

    The NVRM message spans lines (``The NVIDIA GPU <pci>`` / ``(PCI ID: ...) installed in this system
    has`` / ``fallen off the bus and is not responding to commands.``), so lines are joined first.
    """
    lines = (text or "").splitlines()
    joined = " ".join(_strip(x) for x in lines)
    devices: list[str] = []

    def add(pci: str) -> None:
        pci = pci.lower().rstrip(":")
        if pci not in devices:
            devices.append(pci)

    for m in re.finditer(
        r"The NVIDIA GPU (\S+)\s+\(PCI ID: [0-9a-fA-F:]+\) installed in this system has\s+fallen off the bus", joined
    ):
        add(m.group(1))
    for m in re.finditer(r"Xid \(PCI:([0-9a-fA-F:.]+)\): 79\b", joined):
        add(m.group(1))
    for m in re.finditer(r"Unable to determine the device handle for GPU\s*([0-9a-fA-F:.]+): Unknown Error", joined):
        add(m.group(1))
    probe = re.search(r"The NVIDIA probe routine failed for (\d+) device", joined)
    hits = [
        x.strip()
        for x in lines
        if re.search(r"fallen off the bus|probe routine failed|Xid \(PCI:[^)]*\): 79\b|device handle for GPU", x)
    ]
    # a probe that failed only for GPUs the open module refuses is that refusal, not a lost GPU
    unexplained = int(probe.group(1)) - len(module_flavour_unsupported(text)["devices"]) if probe else 0
    lost = bool(devices or unexplained > 0 or "fallen off the bus" in joined)
    return {
        "lost": lost,
        "devices": devices,
        "probe_failed": int(probe.group(1)) if probe else None,
        "lines": hits,
        "reason": GPU_LOST if lost else None,
    }


# The driver's refusals of a GPU it will not drive (nv.c), each after "The NVIDIA GPU <pci> (PCI ID: 10de:xxxx)":
# the open module and a GPU without GSP, the proprietary module and a GPU that needs the open one
# (Blackwell), a release that does not support the GPU at all (a legacy-branch GPU).
_REFUSALS = (
    (r"is not\s+supported by open\s+nvidia\.ko", FLAVOUR_UNSUPPORTED),
    (r"requires use of the\s+NVIDIA open kernel modules", FLAVOUR_UNSUPPORTED),
    (r"is not supported by the\s+NVIDIA [0-9.]+ driver release", RELEASE_UNSUPPORTED),
)


def module_flavour_unsupported(text: str) -> dict[str, Any]:
    """-> ``{"unsupported": bool, "devices": [{"address" (lower case), "pci_id" ("10de:1bb3"), "reason"}],
    "lines": [the kernel's lines, as logged], "reason": the first device's reason or None}``.

    The driver's refusal of a GPU it will not drive spans lines (``The NVIDIA GPU <pci> (PCI ID:
    10de:1bb3)`` / ``installed in this system is not supported by open`` / ``nvidia.ko because it does
    not include the required GPU`` / ``System Processor (GSP).``; or ``... installed in this system
    requires use of the NVIDIA open kernel modules.``; or ``... is not supported by the NVIDIA <version>
    driver release.``), so lines are joined first. Reasons: FLAVOUR_UNSUPPORTED for the open module and
    a GPU without GSP or the proprietary module and a GPU that needs the open one, RELEASE_UNSUPPORTED for
    a GPU this release does not drive at all."""
    lines = (text or "").splitlines()
    joined = " ".join(_strip(x) for x in lines)
    devices: list[dict[str, str]] = []
    # the refusal's words read by a lookahead, so that the next GPU's header is not consumed
    for m in re.finditer(r"The NVIDIA GPU (\S+)\s+\(PCI ID: ([0-9a-fA-F]{4}:[0-9a-fA-F]{4})\)"
                         r"\s+installed in this system\s+(?=(.{0,120}))", joined):
        reason = next((why for pat, why in _REFUSALS if re.match(pat, m.group(3))), None)
        if not reason:
            continue
        dev = {"address": m.group(1).lower().rstrip(":"), "pci_id": m.group(2).lower(), "reason": reason}
        if dev not in devices:
            devices.append(dev)
    hits = [
        x.strip() for x in lines
        if devices and re.search(r"supported by open|nvidia\.ko because it does not include|System Processor \(GSP\)"
                                 r"|The NVIDIA GPU \S+\s+\(PCI ID|requires use of the|driver release\.", x)
    ]
    return {
        "unsupported": bool(devices),
        "devices": devices,
        "lines": hits,
        "reason": devices[0]["reason"] if devices else None,
    }


def loaded_version(text: str) -> Optional[str]:
    """Version from the last ``loading NVIDIA UNIX ... Kernel Module ... <version>`` line (the one
    that loaded last), also when the log says nothing else usable."""
    found = None
    for line in (text or "").splitlines():
        if "loading NVIDIA UNIX" in line:
            found = kernel_module_version(line) or found
    return found


def module_refused(text: str) -> dict[str, Any]:
    """-> ``{"refused": bool, "module": name or None, "lines": [...], "reason": MODULE_REFUSED or None}``.

    ``modprobe: ERROR: could not insert 'nvidia': Key was rejected by service`` (newer kernels),
    ``... Required key not available`` (older), dmesg ``Loading of module with unavailable key is rejected``.
    """
    hits = [x.strip() for x in (text or "").splitlines() if any(k in x for k in _SECURE_BOOT_MARKERS)]
    module = None
    for x in hits:
        m = re.search(r"could not insert '([^']+)'", x)
        if m:
            module = m.group(1)
            break
    return {"refused": bool(hits), "module": module, "lines": hits, "reason": MODULE_REFUSED if hits else None}


def fabricmanager_mismatch(text: str) -> list[dict[str, str]]:
    """nv-fabricmanager's refusal to start: ``[{"fabricmanager", "driver", "message"}]``, message e.g.
    ``fabricmanager 530.30.02 != driver 530.41.03``; one entry per distinct pair."""
    res: list[dict[str, str]] = []
    for m in re.finditer(
        r"fabric manager NVIDIA GPU driver interface version (\S+) don'?t match with driver version (\S+?)\.?(?:\s|$)",
        text or "",
    ):
        entry = {
            "fabricmanager": m.group(1),
            "driver": m.group(2),
            "message": "fabricmanager %s != driver %s" % (m.group(1), m.group(2)),
        }
        if entry not in res:
            res.append(entry)
    return res
