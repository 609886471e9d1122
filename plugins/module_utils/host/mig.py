# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""MIG layouts: what ``nvidia-smi`` says of them, and how one is put back after a reload or reboot (case E5).

On a MIG-capable GPU (A100, A30, H100, H200, B200) the MIG *mode* is a setting of the GPU and survives
a reboot; its GPU instances (GIs) and their compute instances (CIs) live in the driver and are gone
after the kernel module is unloaded or the host reboots. A host that ran MIG devices before the window
must run the same ones after it, or its pods find no ``nvidia.com/mig-*`` resource.

A layout, as recorded and compared here::

    {"gpus": [{"index": 0, "pci_bus_id": "00000000:18:00.0", "mode": "Enabled", "pending": "Enabled",
               "instances": [{"name": "MIG 3g.40gb", "profile_id": 9, "placement": "0:4",
                              "compute": ["MIG 3g.40gb"]}, ...]}, ...]}

GPUs are matched by PCI bus id (indexes can change across a reboot). ``instances`` lists GIs in
placement order; ``compute`` the names of each GI's compute instances (a GI made with ``-C`` has one,
named as the GI). The put-back is the host's own tool: ``nvidia-smi mig -i <gpu> -cgi <ids> -C``.
Only default compute instances are re-made that way; a GI with other compute instances is refused
before any change (:func:`restore_refusals`), as is a GPU whose mode changes at the next reset
(``mig.mode.pending`` differs from ``mig.mode.current``).

Pure parsers and comparisons; :class:`MigTool` runs ``nvidia-smi`` through a ``run(argv) -> (rc, out,
err)`` callable (the module's ``run_command``), the boundary tests replace.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Mapping, Optional

from ansible_collections.npuops.fleet.plugins.module_utils.errors import FleetError
from ansible_collections.npuops.fleet.plugins.module_utils.host import smi_parsers

MODE_QUERY_FIELDS = ("index", "pci.bus_id", "mig.mode.current", "mig.mode.pending")

# `nvidia-smi mig -lgi` table row: |   0  MIG 1g.10gb          19        7          4:1     |
_GI_ROW = re.compile(r"^\|\s*(\d+)\s+(MIG\s+\S+)\s+(\d+)\s+(\d+)\s+(\d+:\d+)\s*\|")
# `nvidia-smi mig -lci` table row: |   0      7       MIG 1g.10gb          0         0          0:1     |
_CI_ROW = re.compile(r"^\|\s*(\d+)\s+(\d+)\s+(MIG\s+\S+)\s+(\d+)\s+(\d+)\s+(\d+:\d+)\s*\|")
# what nvidia-smi prints, rc 6 (NVML "not found"), when there is nothing to list
_NOTHING = ("no gpu instances found", "no compute instances found", "no mig-enabled devices found")


class MigError(FleetError):
    """nvidia-smi could not say or do what was asked; the message quotes it. ``driver_answered`` is False
    when nvidia-smi said that no driver answers (none loaded, or a userspace that does not match the loaded
    module): no MIG device is usable then, and none can be read."""

    def __init__(self, msg: str, driver_answered: bool = True) -> None:
        super().__init__(msg)
        self.driver_answered = driver_answered


def _norm_mode(value: Optional[str]) -> Optional[str]:
    v = (value or "").strip()
    return None if not v or v.startswith("[") or v.upper() == "N/A" else v


def parse_mode_query(out: str) -> list[dict[str, Any]]:
    """``nvidia-smi --query-gpu=index,pci.bus_id,mig.mode.current,mig.mode.pending --format=csv,noheader``
    -> ``[{"index", "pci_bus_id", "mode", "pending"}]``; a GPU without MIG says ``[N/A]`` (mode None)."""
    rows = []
    for line in (out or "").splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) != 4 or not cols[0].isdigit():
            continue
        rows.append({"index": int(cols[0]), "pci_bus_id": cols[1], "mode": _norm_mode(cols[2]),
                     "pending": _norm_mode(cols[3])})
    return rows


def _nothing_listed(rc: int, out: str, err: str) -> bool:
    text = ((out or "") + "\n" + (err or "")).lower()
    return any(w in text for w in _NOTHING)


def _first_line(*texts: str) -> str:
    for t in texts:
        if (t or "").strip():
            return " ".join(t.strip().splitlines()[0].split())[:300]
    return ""


def _no_rows(what: str, rc: int, out: str, err: str) -> None:
    """A read without a row is "none exist" only when nvidia-smi says so; a failure, or output that is
    not the table (a format this parser does not know), is an error: never taken for an empty layout."""
    if _nothing_listed(rc, out, err):
        return
    if rc != 0:
        raise MigError("nvidia-smi mig %s failed (rc %s): %s" % (what, rc, _first_line(err, out)))
    if (out or "").strip():
        raise MigError("nvidia-smi mig %s printed no row this collection can read: %s" % (what, _first_line(out)))


def _failure_line(*texts: str) -> str:
    """nvidia-smi's reason in a failed run's output: the first line saying "Unable"/"fail"/"error" (a run
    that made some instances says so first), else the last line."""
    lines = [ln.strip() for t in texts for ln in (t or "").splitlines() if ln.strip()]
    said = next((ln for ln in lines if re.search(r"unable|fail|error", ln, re.I)), lines[-1] if lines else "")
    return " ".join(said.split())[:300]


def parse_gpu_instances(rc: int, out: str, err: str = "") -> list[dict[str, Any]]:
    """``nvidia-smi mig -lgi`` -> ``[{"gpu", "name", "profile_id", "gi_id", "placement"}]``; ``[]`` when
    it says none exist (rc 6); :class:`MigError` for any other failure or output without a table row."""
    rows = [m.groups() for m in map(_GI_ROW.match, (out or "").splitlines()) if m]
    if not rows:
        _no_rows("-lgi", rc, out, err)
    return [{"gpu": int(g), "name": " ".join(n.split()), "profile_id": int(p), "gi_id": int(i), "placement": pl}
            for g, n, p, i, pl in rows]


def parse_compute_instances(rc: int, out: str, err: str = "") -> list[dict[str, Any]]:
    """``nvidia-smi mig -lci`` -> ``[{"gpu", "gi_id", "name", "profile_id", "ci_id", "placement"}]``;
    ``[]`` when it says none exist; :class:`MigError` otherwise."""
    rows = [m.groups() for m in map(_CI_ROW.match, (out or "").splitlines()) if m]
    if not rows:
        _no_rows("-lci", rc, out, err)
    return [{"gpu": int(g), "gi_id": int(gi), "name": " ".join(n.split()), "profile_id": int(p), "ci_id": int(c),
             "placement": pl} for g, gi, n, p, c, pl in rows]


def _placement_key(placement: str) -> tuple[int, int]:
    start, size = (placement.split(":", 1) + [""])[:2]
    return (int(start), int(size)) if start.isdigit() and size.isdigit() else (1 << 30, 0)


def build_layout(modes: list[dict[str, Any]], gis: list[dict[str, Any]], cis: list[dict[str, Any]]) -> dict[str, Any]:
    """The layout (module docstring) from the three parsed reads."""
    gpus = []
    for m in sorted(modes, key=lambda r: r["index"]):
        instances = []
        for gi in sorted((g for g in gis if g["gpu"] == m["index"]), key=lambda g: _placement_key(g["placement"])):
            compute = [c["name"] for c in cis if c["gpu"] == m["index"] and c["gi_id"] == gi["gi_id"]]
            instances.append({"name": gi["name"], "profile_id": gi["profile_id"], "placement": gi["placement"],
                              "compute": sorted(compute)})
        gpus.append(dict(m, instances=instances))
    return {"gpus": gpus}


def enabled(layout: Optional[Mapping[str, Any]]) -> bool:
    """Whether any GPU of ``layout`` runs in MIG mode."""
    return any(g.get("mode") == "Enabled" for g in (layout or {}).get("gpus") or [])


def _gpu_label(g: Mapping[str, Any]) -> str:
    return "GPU %s (%s)" % (g.get("index"), g.get("pci_bus_id"))


def describe(layout: Optional[Mapping[str, Any]]) -> list[str]:
    """One line per GPU in MIG mode: ``"GPU <index> (<bus id>): <GPU instance names, or none>"``."""
    gpus = (layout or {}).get("gpus") or []
    return ["%s: %s" % (_gpu_label(g), _profiles(g)) for g in gpus if g.get("mode") == "Enabled"]


_BASE = re.compile(r"^MIG (\d+g\.\d+gb)")


def default_compute(gi: Mapping[str, Any]) -> bool:
    """Whether a GPU instance has exactly its default compute instance (what ``-cgi ... -C`` makes). That
    one is named after the GPU instance's slices and memory without the profile's attributes: a
    ``MIG 1g.10gb+me`` GPU instance's default compute instance is ``MIG 1g.10gb``."""
    m = _BASE.match(gi.get("name") or "")
    return m is not None and gi.get("compute") == ["MIG " + m.group(1)]


def restore_refusals(layout: Optional[Mapping[str, Any]]) -> list[str]:
    """Why this layout could not be put back after a reload or reboot, one sentence each; ``[]`` when
    it can. Checked before the cordon."""
    out = []
    for g in (layout or {}).get("gpus") or []:
        if g.get("mode") and g.get("pending") and g["pending"] != g["mode"]:
            out.append("%s: MIG mode %s now, %s after the next GPU reset or reboot (a mode change is pending): "
                       "finish or undo it (nvidia-smi -i %s -mig) before the window"
                       % (_gpu_label(g), g["mode"], g["pending"], g.get("index")))
        for gi in g.get("instances") or []:
            if not default_compute(gi):
                out.append("%s: GPU instance %s (%s) has compute instances %s; only one default compute instance "
                           "per GPU instance is re-made after the reload (nvidia-smi mig -cgi ... -C): make the "
                           "layout so, or move it to mig-parted before the window"
                           % (_gpu_label(g), gi["name"], gi["placement"], ", ".join(gi.get("compute") or []) or "none"))
    return out


def _signature(g: Mapping[str, Any]) -> list[tuple[int, int]]:
    # placements are the driver's choice on re-creation: the same devices = the same profiles, each with
    # its one default compute instance
    return sorted((gi["profile_id"], len(gi.get("compute") or [])) for gi in g.get("instances") or [])


def _profiles(g: Mapping[str, Any]) -> str:
    return ", ".join(gi["name"] for gi in g.get("instances") or []) or "none"


def compare(recorded: Optional[Mapping[str, Any]], now: Mapping[str, Any]) -> list[str]:
    """How ``now`` differs from ``recorded``, one sentence per GPU; ``[]`` when every recorded MIG GPU
    has its mode and the same GPU instances (profiles, each with one compute instance) again."""
    by_bus = {(g.get("pci_bus_id") or "").lower(): g for g in now.get("gpus") or []}
    out = []
    for g in (recorded or {}).get("gpus") or []:
        if g.get("mode") != "Enabled":
            continue
        cur = by_bus.get((g.get("pci_bus_id") or "").lower())
        if cur is None:
            out.append("%s: not listed by nvidia-smi now (it ran MIG devices %s)" % (_gpu_label(g), _profiles(g)))
        elif cur.get("mode") != "Enabled":
            out.append("%s: MIG mode %s now, Enabled before the window" % (_gpu_label(cur), cur.get("mode")))
        elif _signature(cur) != _signature(g):
            out.append("%s: MIG devices %s now, %s before the window" % (_gpu_label(cur), _profiles(cur), _profiles(g)))
    return out


def create_plan(recorded: Optional[Mapping[str, Any]], now: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The GPUs to re-make: each recorded MIG GPU in MIG mode now whose GPU instances are missing - all of
    them, or some (a run stopped halfway) - as ``[{"index" (now), "pci_bus_id", "profile_ids", "names",
    "sizes", "fresh"}]``, the missing ones in the recorded placement order; ``fresh``: the GPU had no
    instance before this step. A GPU with any instance that is not in the record is never touched
    (someone made it: :func:`compare` then says how it differs)."""
    by_bus = {(g.get("pci_bus_id") or "").lower(): g for g in now.get("gpus") or []}
    plan = []
    for g in (recorded or {}).get("gpus") or []:
        cur = by_bus.get((g.get("pci_bus_id") or "").lower())
        if g.get("mode") != "Enabled" or not g.get("instances") or cur is None or cur.get("mode") != "Enabled":
            continue
        have = [gi["profile_id"] for gi in cur.get("instances") or []]
        missing = []
        for gi in g["instances"]:
            if gi["profile_id"] in have:
                have.remove(gi["profile_id"])
            else:
                missing.append(gi)
        if have or not missing or not all(default_compute(gi) for gi in cur.get("instances") or []):
            continue
        plan.append({"index": cur["index"], "pci_bus_id": cur["pci_bus_id"],
                     "profile_ids": [gi["profile_id"] for gi in missing], "names": [gi["name"] for gi in missing],
                     "sizes": [_placement_key(gi["placement"])[1] for gi in missing],
                     "fresh": not cur.get("instances")})
    return plan


def create_orders(step: Mapping[str, Any]) -> list[list[int]]:
    """The orders to try a step's profiles in: the recorded placement order, then largest first (the
    driver chooses each placement as the instance is made, so one order can find no room where another
    does, as mig-parted also finds). Each order once."""
    first = list(step["profile_ids"])
    sizes = step.get("sizes") or [0] * len(first)
    largest = [p for _s, _i, p in sorted(zip(sizes, range(len(first)), first), key=lambda t: (-t[0], t[1]))]
    return [first] + ([largest] if largest != first else [])


Runner = Callable[[list], "tuple[int, str, str]"]


class MigTool:
    """Reads and re-makes MIG layouts with ``nvidia-smi`` (path ``smi``) through ``run``."""

    def __init__(self, run: Runner, smi: str = "nvidia-smi") -> None:
        self.run, self.smi = run, smi

    def read(self) -> dict[str, Any]:
        """The layout now; GPU and compute instances are listed only when some GPU is in MIG mode.
        :class:`MigError` when nvidia-smi fails (the driver not loaded, say)."""
        rc, out, err = self.run([self.smi, "--query-gpu=%s" % ",".join(MODE_QUERY_FIELDS), "--format=csv,noheader"])
        if rc != 0:
            said = smi_parsers.classify_nvidia_smi(out + "\n" + err, rc)["status"]
            raise MigError("nvidia-smi --query-gpu failed (rc %s): %s" % (rc, _first_line(out, err)),
                           driver_answered=said not in ("no_driver", "mismatch"))
        modes = parse_mode_query(out)
        if not any(m["mode"] == "Enabled" for m in modes):
            return build_layout(modes, [], [])
        gis = parse_gpu_instances(*self.run([self.smi, "mig", "-lgi"]))
        cis = parse_compute_instances(*self.run([self.smi, "mig", "-lci"])) if gis else []
        return build_layout(modes, gis, cis)

    def create(self, step: Mapping[str, Any]) -> None:
        """Make one plan step's GPU instances, each with its default compute instance, trying
        :func:`create_orders` in turn. nvidia-smi makes them one by one, so a failure can leave some: on
        a GPU that had none before the step (``fresh``) they are destroyed before the next order and after
        the last, so no later run finds a half-made GPU it must not touch."""
        gpu = str(step["index"])
        errors = []
        for order in create_orders(step):
            argv = [self.smi, "mig", "-i", gpu, "-cgi", ",".join(str(p) for p in order), "-C"]
            rc, out, err = self.run(argv)
            if rc == 0:
                return
            errors.append("%s failed (rc %s): %s" % (" ".join(argv[1:]), rc, _failure_line(err, out)))
            if not step.get("fresh"):
                break
            for what in ("-dci", "-dgi"):  # compute instances first: a GPU instance with one is not destroyed
                rc, out, err = self.run([self.smi, "mig", "-i", gpu, what])
                if rc != 0 and not _nothing_listed(rc, out, err):
                    errors.append("mig -i %s %s failed (rc %s): %s" % (gpu, what, rc, _failure_line(err, out)))
                    raise MigError("; ".join(errors))
        raise MigError("; ".join(errors))
