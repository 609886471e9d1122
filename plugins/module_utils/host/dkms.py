# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""DKMS: ``dkms status`` in every format dkms versions print, and a failed build inside apt (pure).

``dkms status`` lines seen in the field::

    name, version, kernel, arch: state            (dkms 2.x)
    name/version, kernel, arch: state             (dkms 3.x)
    name/version: added     name, version: added  (registered, built for no kernel)
    name/version, kernel, arch: installed (WARNING! Diff between built and installed module!)

dkms can print ``Error! ...`` and still exit 0: the output decides, not the exit code.
"""

from __future__ import annotations

import fnmatch
import re
from typing import Any, Iterable, Mapping, Optional

from ansible_collections.npuops.fleet.plugins.module_utils.driver.version import same_driver_version

# DKMS module names of a driver, keyed by the vendor profile's ``main_module``: the one table of them.
# Ubuntu (nvidia-dkms-*) and NVIDIA's CUDA repository register ``nvidia``; Debian's nvidia-kernel-dkms
# ``nvidia-current`` (tests/lab/realpkg/FINDINGS.md), its Tesla flavours ``nvidia-tesla-<branch>``; some
# distributions' open flavour ``nvidia-open``. A main module not listed here is its own DKMS name.
DRIVER_DKMS_MODULES: dict[str, tuple[str, ...]] = {
    "nvidia": ("nvidia", "nvidia-current", "nvidia-open", "nvidia-tesla-[0-9]*"),
    "rebellions": ("rebellions",),
}

_STATUS_RE = re.compile(r"^(?P<head>[^:]+?):\s*(?P<state>[A-Za-z-]+)\s*(?P<note>.*)$")


def parse_status_line(line: str) -> Optional[dict[str, Any]]:
    """One ``dkms status`` line -> ``{"module", "version", "kernel", "arch", "state", "note"}`` (kernel
    and arch None when not printed, note None without one); None for a line of another kind."""
    s = (line or "").strip()
    if not s or s.startswith(("Error!", "Warning:", "Deprecated")):
        return None
    m = _STATUS_RE.match(s)
    if not m:
        return None
    parts = [p.strip() for p in m.group("head").split(",")]
    if "/" in parts[0]:
        module, version = parts[0].split("/", 1)
        rest = parts[1:]
    elif len(parts) >= 2:
        module, version = parts[0], parts[1]
        rest = parts[2:]
    else:
        return None
    if not module or not version or " " in module:
        return None
    note = m.group("note").strip()
    if note.startswith("(") and note.endswith(")"):
        note = note[1:-1].strip()
    return {
        "module": module,
        "version": version,
        "kernel": rest[0] if rest else None,
        "arch": rest[1] if len(rest) > 1 else None,
        "state": m.group("state"),
        "note": note or None,
    }


def parse_status(text: str, rc: int = 0) -> dict[str, Any]:
    """``dkms status`` output -> ``{"entries": [...], "errors": [...], "ok": bool}``.

    ``errors``: each ``Error!`` line with the lines that follow it up to the next status line
    (``File: ... does not exist.``), joined by a space. ``ok`` is false on any error or a non-zero exit code.
    """
    entries: list[dict[str, Any]] = []
    errors: list[str] = []
    in_error = False
    for line in (text or "").splitlines():
        s = line.strip()
        if not s:
            in_error = False
            continue
        if s.startswith("Error!"):
            errors.append(s)
            in_error = True
            continue
        entry = parse_status_line(s)
        if entry:
            entries.append(entry)
            in_error = False
        elif in_error:
            errors[-1] += " " + s
    return {"entries": entries, "errors": errors, "ok": not errors and rc == 0}


def build_for_kernel(entries: Iterable[dict[str, Any]], module: str, version: str, kernel: str) -> dict[str, Any]:
    """State of ``module``/``version`` for ``kernel``: ``{"state", "note", "built"}``.

    ``state``: dkms's word for that kernel (``installed``, ``built``...), ``added-only`` when the
    version is registered but built for no kernel, ``missing`` when dkms does not know it. ``built`` is
    true for ``installed`` and ``built``: ``added-only`` and ``missing`` are failures for that kernel.
    """
    mine = [e for e in entries if e["module"] == module and same_driver_version(e["version"], version)]
    for e in mine:
        if e["kernel"] == kernel:
            return {"state": e["state"], "note": e["note"], "built": e["state"] in ("installed", "built")}
    if mine:
        return {"state": "added-only", "note": None, "built": False}
    return {"state": "missing", "note": None, "built": False}


def build_failures(text: str) -> list[dict[str, Any]]:
    """Failed DKMS builds in apt / dkms output: ``[{"kernel", "arch", "log", "message"}]``.

    ``Error! Bad return status for module build on kernel: K (arch)`` and the ``Consult <log> for more
    information.`` line after it. The ``ERROR (dkms apport) ...`` line before it is a side effect.
    """
    res: list[dict[str, Any]] = []
    for line in (text or "").splitlines():
        s = line.strip()
        m = re.search(r"Bad return status for module build on kernel:\s*(\S+)(?:\s+\(([^)]+)\))?", s)
        if m:
            res.append({"kernel": m.group(1), "arch": m.group(2), "log": None, "message": None})
            continue
        m = re.match(r"^Consult (\S+) for more information\.?$", s)
        if m and res and res[-1]["log"] is None:
            res[-1]["log"] = m.group(1)
    for f in res:
        f["message"] = "DKMS module build failed for kernel %s%s" % (
            f["kernel"],
            "; see %s" % f["log"] if f["log"] else "",
        )
    return res


def driver_module_patterns(main_module: str, table: Optional[Mapping[str, Iterable[str]]] = None) -> list[str]:
    """fnmatch patterns of the DKMS module names the driver whose kernel module is ``main_module`` may
    be registered under (:data:`DRIVER_DKMS_MODULES`); ``[main_module]`` for one not in the table."""
    table = DRIVER_DKMS_MODULES if table is None else table
    return list(table.get(main_module) or [main_module])


def _is_driver(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def kernel_facts(
    text: Optional[str],
    rc: int,
    main_module: str,
    boot_kernel: str,
    driver_version: Optional[str] = None,
) -> dict[str, Any]:
    """``dkms status`` output -> DKMS state per kernel and the verdict for the boot kernel.

    ``text`` None means dkms is not installed (nothing was run). Returns::

        {"available": bool, "ok": bool or None, "errors": [str],
         "kernels": {kernel: [{"module", "version", "arch", "state", "note"}]},   # every module
         "registered": [{"module", "version"}],      # added, built for no kernel
         "driver_modules": [names],                  # the driver's DKMS names dkms knows
         "boot_kernel": str, "boot_kernel_state": str or None, "boot_kernel_version": str or None,
         "boot_kernel_note": str or None, "boot_kernel_installed": bool or None, "verdict": str}

    ``boot_kernel_state``: dkms's word for the driver's module on the boot kernel (``installed``,
    ``built``...), ``added-only`` when registered but built for no kernel, ``missing`` when dkms does not
    know it (for ``driver_version`` when given: another version built for the kernel is not the driver's).
    ``verdict``: ``installed``, ``installed-with-warning`` (a note such as ``WARNING! Diff between built
    and installed module!``), ``built``, ``added-only``, ``missing``, ``error`` (an ``Error!`` line and no
    build for the boot kernel), or ``unknown`` (no dkms). ``boot_kernel_installed`` is true only for
    ``installed`` (null when unknown).
    """
    res: dict[str, Any] = {
        "available": text is not None,
        "ok": None,
        "errors": [],
        "kernels": {},
        "registered": [],
        "driver_modules": [],
        "boot_kernel": boot_kernel,
        "boot_kernel_state": None,
        "boot_kernel_version": None,
        "boot_kernel_note": None,
        "boot_kernel_installed": None,
        "verdict": "unknown",
    }
    if text is None:
        return res
    parsed = parse_status(text, rc)
    res["ok"], res["errors"] = parsed["ok"], parsed["errors"]
    patterns = driver_module_patterns(main_module)
    for e in parsed["entries"]:
        item = {k: e[k] for k in ("module", "version", "arch", "state", "note")}
        if e["kernel"]:
            kernel_list = res["kernels"].setdefault(e["kernel"], [])
            if item not in kernel_list:
                kernel_list.append(item)
        elif {"module": e["module"], "version": e["version"]} not in res["registered"]:
            res["registered"].append({"module": e["module"], "version": e["version"]})
        if _is_driver(e["module"], patterns) and e["module"] not in res["driver_modules"]:
            res["driver_modules"].append(e["module"])
    mine = [e for e in parsed["entries"] if e["module"] in res["driver_modules"]]
    if driver_version:
        # as build_for_kernel: only the driver's version counts; known but not for this kernel = added-only
        mine = [e for e in mine if same_driver_version(e["version"], driver_version)]
    on_boot = [e for e in mine if e["kernel"] == boot_kernel]
    pick = ([e for e in on_boot if e["state"] == "installed"] or on_boot or [None])[-1]
    if pick:
        state, note, version = pick["state"], pick["note"], pick["version"]
    else:
        state, note, version = ("added-only" if mine else "missing"), None, None
    res["boot_kernel_state"], res["boot_kernel_note"], res["boot_kernel_version"] = state, note, version
    res["boot_kernel_installed"] = state == "installed"
    if state == "installed":
        res["verdict"] = "installed-with-warning" if note else "installed"
    elif state in ("missing", "added-only") and res["errors"]:
        res["verdict"] = "error"
    else:
        res["verdict"] = state
    return res
