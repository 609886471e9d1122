# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""Pure parsers for what accelerator tools print (nvidia-smi, rbln-smi, /proc/driver/nvidia/version,
kernel log lines). No I/O here: every function takes text and returns plain data, so the unit tests
can feed them the real outputs kept under tests/unit/fixtures/. Comparing the versions they return is
driver/version.same_driver_version's job, not this module's.
"""

from __future__ import annotations

import re
from typing import Any, Optional

from ansible_collections.npuops.fleet.plugins.module_utils.driver.version import na_to_none

_VERSION_RE = r"\d+(?:\.\d+)+"


def parse_proc_driver_nvidia_version(text: str) -> Optional[str]:
    """Loaded module version from ``/proc/driver/nvidia/version`` (legacy and open kernel module).

    ``NVRM version: NVIDIA UNIX x86_64 Kernel Module  520.56.06  Thu Oct ...`` -> ``520.56.06``;
    ``NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.126.09  Release Build ...``.
    """
    for line in (text or "").splitlines():
        if not line.startswith("NVRM version:"):
            continue
        v = kernel_module_version(line)
        if v:
            return v
        m = re.search(r"\s(" + _VERSION_RE + r")\s", line + " ")
        if m:
            return m.group(1)
    return None


def kernel_module_version(line: str) -> Optional[str]:
    """The version after ``... Kernel Module [for <arch>]`` in one line: the banner the module prints
    in ``/proc/driver/nvidia/version`` and, as ``NVRM: loading NVIDIA UNIX ...``, in the kernel log."""
    m = re.search(r"Kernel Module(?:\s+for\s+\S+)?\s+(" + _VERSION_RE + r")\b", line or "")
    return m.group(1) if m else None


def parse_nvrm_api_mismatch(text: str) -> Optional[dict[str, str]]:
    """The kernel's ``NVRM: API mismatch`` message (case C3), also as syslog writes it with ``#012``.

    Returns ``{"client_version": "535.54.03", "kernel_version": "530.30.02"}`` or None.
    """
    text = (text or "").replace("#012", "\n")
    m = re.search(
        r"NVRM: API mismatch: the client has the version (" + _VERSION_RE + r"),\s*but\s*"
        r"(?:NVRM:\s*)?this kernel module has the version (" + _VERSION_RE + r")",
        text,
    )
    if not m:
        return None
    return {"client_version": m.group(1), "kernel_version": m.group(2)}


NVIDIA_SMI_DEFAULT_FIELDS = ("index", "driver_version", "name", "memory.total", "pci.bus_id")


def _field_key(field: str) -> str:
    return field.strip().replace(".", "_")


def classify_nvidia_smi(output: str, rc: int = 0) -> dict[str, Any]:
    """Status of an ``nvidia-smi`` run from its output and exit code (case C17).

    Returns ``{"status": ..., "message": ..., "library_version": ...}`` where status is ``ok``,
    ``no_devices`` (``No devices were found``), ``no_driver`` (cannot talk to the driver),
    ``mismatch`` (``Failed to initialize NVML: Driver/library version mismatch``; library_version
    from the ``NVML library version:`` line when printed) or ``error``.
    """
    text = (output or "").strip()
    low = text.lower()
    res: dict[str, Any] = {"status": "ok", "message": None, "library_version": None}
    m = re.search(r"NVML library version:\s*(" + _VERSION_RE + r")", text)
    if m:
        res["library_version"] = m.group(1)
    first = text.splitlines()[0].strip() if text else ""
    if "driver/library version mismatch" in low:
        res.update(status="mismatch", message=first)
    elif "no devices were found" in low:
        res.update(status="no_devices", message=first)
    elif "couldn't communicate with the nvidia driver" in low or "nvidia-smi has failed" in low:
        res.update(status="no_driver", message=first)
    elif low.startswith("failed to initialize nvml") or rc != 0:
        res.update(status="error", message=first or "exit code %s" % rc)
    return res


def parse_nvidia_smi_query(output: str, fields=NVIDIA_SMI_DEFAULT_FIELDS) -> list[dict[str, Any]]:
    """Rows of ``nvidia-smi --query-gpu=<fields> --format=csv,noheader`` as dicts.

    Keys are the field names with dots as underscores (``memory.total`` -> ``memory_total``);
    N/A-style values become None; extra or missing columns never raise (missing -> None). Lines that
    are not CSV rows (an error message) are skipped: run :func:`classify_nvidia_smi` first.
    """
    keys = [_field_key(f) for f in fields]
    rows = []
    for line in (output or "").splitlines():
        if not line.strip() or "," not in line and len(keys) > 1:
            continue
        cols = [c.strip() for c in line.split(",")]
        # a name could contain a comma: fold surplus columns into the "name" column when present
        if len(cols) > len(keys) and "name" in keys:
            i = keys.index("name")
            extra = len(cols) - len(keys)
            cols[i : i + extra + 1] = [", ".join(cols[i : i + extra + 1])]
        row: dict[str, Any] = {}
        for i, key in enumerate(keys):
            row[key] = na_to_none(cols[i]) if i < len(cols) else None
        if "index" in row and row["index"] is not None:
            try:
                row["index"] = int(row["index"])
            except ValueError:
                pass
        rows.append(row)
    return rows


def parse_rbln_smi(output: str) -> dict[str, Any]:
    """``rbln-smi`` table: ``{"kmd_version": "3.0.0", "devices": [...]}``.

    Each device: npu (int), name, device, pci_bus_id, temp, power, perf, memory_used,
    memory_total, util — blank cells and N/A-style values are None.
    """
    text = output or ""
    res: dict[str, Any] = {"kmd_version": None, "devices": []}
    m = re.search(r"KMD ver(?:sion)?\s*:\s*(\S+)", text)
    if m:
        res["kmd_version"] = m.group(1).strip("|")
    header: Optional[list[str]] = None
    for line in text.splitlines():
        s = line.strip()
        if not s.startswith("|") or not s.endswith("|"):
            continue
        cells = [c.strip() for c in s.strip("|").split("|")]
        if len(cells) < 2:
            continue
        if header is None:
            if cells[0].upper() == "NPU":
                header = [_rbln_key(c) for c in cells]
            continue
        if not cells[0].isdigit():
            continue
        raw = dict(zip(header, cells))
        dev: dict[str, Any] = {"npu": int(cells[0])}
        for key, value in raw.items():
            if key == "npu":
                continue
            if key == "memory":
                used, _sep, total = (value or "").partition("/")
                dev["memory_used"] = na_to_none(used)
                dev["memory_total"] = na_to_none(total)
            else:
                dev[key] = na_to_none(value)
        res["devices"].append(dev)
    return res


def _rbln_key(cell: str) -> str:
    key = cell.split("(")[0].strip().lower().replace(" ", "_")
    return {"pci_bus_id": "pci_bus_id"}.get(key, key)
