# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""Which kernel-module flavour of a driver can drive which GPU (case E3).

NVIDIA ships with every driver its own table of the GPUs it supports, ``supported-gpus.json``
(``{"chips": [{"devid": "0x2330", "subdevid"?, "subvendorid"?, "name", "features": [...],
"legacybranch"?}]}``). Per chip, as NVIDIA's own tools read it:

* ``legacybranch`` (``"470.xx"``): only that legacy branch drives it, not this driver;
* ``kernelopen`` in ``features``: the open kernel modules drive it;
* no ``kernelopen``: the proprietary modules only (Maxwell, Pascal, Volta);
* from branch 560 on the table also marks ``gsp_proprietary_supported``: ``kernelopen`` with it, both
  flavours; ``kernelopen`` without it, the open modules only (Blackwell and newer). A table that marks no
  chip so (the 515-555 tables) predates open-only GPUs: there the proprietary modules drive every
  ``kernelopen`` chip too.

A GPU the table does not list is not judged (NVIDIA's own tools take an unknown id for a GPU newer than
their copy of the table); it is reported as unlisted.

The host's side is the PCI bus: NVIDIA devices (vendor ``0x10de``) of class VGA (``0x0300``) or 3D
controller (``0x0302``), as the kernel lists them under ``/sys/bus/pci/devices``. NVSwitches and
bridges are other classes and are not GPUs; a GPU bound to ``vfio-pci`` or ``pci-stub`` is passed
through to a virtual machine and never driven by the host's driver.

:func:`read_pci_gpus` reads sysfs and :func:`table_from_debs` the target's packages (the I/O here);
:func:`parse_supported_gpus` and :func:`judge` are pure.
"""

from __future__ import annotations

import fnmatch
import json
import os
import subprocess
import tarfile
import threading
from typing import Any, Iterable, Mapping, Optional, Sequence

from ansible_collections.npuops.fleet.plugins.module_utils.driver.vendor_profiles import MODULE_FLAVOURS

NVIDIA_VENDOR = "0x10de"
GPU_CLASSES = ("0x0300", "0x0302")
PASSTHROUGH_DRIVERS = ("vfio-pci", "pci-stub")
# seconds one package may take to stream through dpkg-deb
DEB_READ_TIMEOUT = 120


def _hex(value: Any) -> str:
    """``"0x2330"``, ``"2330"``, ``0x2330`` -> ``"0x2330"`` (lower case, 4 digits); "" when unreadable."""
    text = str(value if value is not None else "").strip().lower()
    if text.startswith("0x"):
        text = text[2:]
    try:
        return "0x%04x" % int(text, 16)
    except ValueError:
        return ""


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return ""


def read_pci_gpus(root: str = "/sys/bus/pci/devices", vendor: str = NVIDIA_VENDOR) -> list[dict[str, str]]:
    """The GPUs of ``vendor`` on the PCI bus, sorted by address: ``[{"address": "0000:18:00.0",
    "device_id": "0x2330", "subsystem_vendor": "0x10de", "subsystem_device": "0x16c1"}]``. A missing
    ``root`` (no PCI bus, a container) gives ``[]``."""
    try:
        entries = sorted(os.listdir(root))
    except OSError:
        return []
    want = _hex(vendor)
    out = []
    for address in entries:
        d = os.path.join(root, address)
        if _hex(_read(os.path.join(d, "vendor"))) != want:
            continue
        # class is 0xCCSSPP (class, subclass, programming interface): the first two bytes decide
        cls = _read(os.path.join(d, "class")).lower()
        if cls[:6] not in GPU_CLASSES:
            continue
        if os.path.basename(os.path.realpath(os.path.join(d, "driver"))) in PASSTHROUGH_DRIVERS:
            continue
        out.append({
            "address": address.lower(),
            "device_id": _hex(_read(os.path.join(d, "device"))),
            "subsystem_vendor": _hex(_read(os.path.join(d, "subsystem_vendor"))),
            "subsystem_device": _hex(_read(os.path.join(d, "subsystem_device"))),
        })
    return out


def _kill_late(proc: "subprocess.Popen[bytes]", late: list) -> None:
    late.append(True)
    proc.kill()


def table_from_debs(debs: Iterable[str], members: Iterable[str], dpkg_deb: str = "dpkg-deb",
                    max_bytes: int = 16 << 20, timeout: float = DEB_READ_TIMEOUT) -> Optional[tuple[str, str, str]]:
    """The first member of the packages' data matching one of ``members`` (globs such as
    ``usr/share/doc/*/supported-gpus.json``, matched without the leading ``./``), read without
    unpacking the packages: ``(text, deb path, member)``, or None when no package has one.

    Each ``.deb`` is streamed through ``dpkg-deb --fsys-tarfile`` (whatever its compression, zstd
    included) and read until the member, smallest package first (the table travels in the small
    common packages, not in the libraries). Raises OSError when dpkg-deb cannot read a package, naming
    it and dpkg-deb's words; so do a member over ``max_bytes`` and a package that takes more than
    ``timeout`` seconds (dpkg-deb is killed)."""
    globs = list(members)
    for deb in sorted(debs, key=lambda d: (os.path.getsize(d) if os.path.exists(d) else 0, d)):
        # streamed, not run_command: that would hold a library package's whole data (hundreds of MB)
        proc = subprocess.Popen(  # pylint: disable=ansible-bad-function
            [dpkg_deb, "--fsys-tarfile", deb], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        found = None
        late: list[bool] = []
        timer = threading.Timer(timeout, _kill_late, (proc, late))
        timer.start()
        broken = oversize = None
        try:
            with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
                for info in tar:
                    name = info.name[2:] if info.name.startswith("./") else info.name
                    if info.isfile() and any(fnmatch.fnmatchcase(name, g) for g in globs):
                        if info.size > max_bytes:
                            oversize = "%s is %d bytes, more than a GPU table" % (name, info.size)
                            break
                        f = tar.extractfile(info)
                        found = (f.read().decode("utf-8", "replace") if f else "", deb, name)
                        break
        except tarfile.TarError as e:
            broken = str(e)
        finally:
            if found is not None or broken is not None or oversize is not None:
                proc.kill()  # stopped reading early: the rest of the package is not wanted
            elif proc.stdout is not None:  # always: stdout=PIPE
                proc.stdout.read()  # dpkg-deb writes the archive's padding after its end marker
            err_text = proc.communicate()[1].decode("utf-8", "replace").strip()
            timer.cancel()
        if late:
            raise OSError("dpkg-deb --fsys-tarfile %s: no answer within %d s" % (deb, timeout))
        if oversize:
            raise OSError("%s: %s" % (deb, oversize))
        if found:
            return found
        if broken is not None or proc.returncode:
            raise OSError("dpkg-deb --fsys-tarfile %s: %s" % (deb, err_text or broken or "exit %d" % proc.returncode))
    return None


def parse_supported_gpus(text: str) -> list[dict[str, Any]]:
    """``supported-gpus.json`` -> its chips, each ``{"devid", "subdevid", "subvendorid" (lower-case hex
    or None), "name", "features" (lower case), "legacybranch" (or None)}``.

    Raises ValueError when the text is not that table (not JSON, no ``chips`` list, a chip without
    ``devid``), naming what is wrong."""
    try:
        data = json.loads(text)
    except ValueError as e:
        raise ValueError("not JSON: %s" % e) from None
    chips = data.get("chips") if isinstance(data, Mapping) else None
    if not isinstance(chips, list):
        raise ValueError("no 'chips' list at the top level")
    out = []
    for i, chip in enumerate(chips):
        if not isinstance(chip, Mapping) or not _hex(chip.get("devid")):
            raise ValueError("chips[%d] has no hexadecimal devid: %r" % (i, chip))
        out.append({
            "devid": _hex(chip["devid"]),
            "subdevid": _hex(chip["subdevid"]) if chip.get("subdevid") else None,
            "subvendorid": _hex(chip["subvendorid"]) if chip.get("subvendorid") else None,
            "name": str(chip.get("name") or ""),
            "features": [str(f).lower() for f in chip.get("features") or []],
            "legacybranch": str(chip["legacybranch"]) if chip.get("legacybranch") else None,
        })
    return out


def _chip_for(gpu: Mapping[str, str], chips: Iterable[Mapping[str, Any]]) -> Optional[Mapping[str, Any]]:
    """The table's entry for this GPU: the one naming its subsystem ids, else the one for its device id
    alone, else any with its device id."""
    same = [c for c in chips if c["devid"] == gpu.get("device_id")]
    for c in same:
        if c["subdevid"] and c["subdevid"] == gpu.get("subsystem_device") \
                and (not c["subvendorid"] or c["subvendorid"] == gpu.get("subsystem_vendor")):
            return c
    return next((c for c in same if not c["subdevid"]), same[0] if same else None)


def marks_proprietary(chips: Iterable[Mapping[str, Any]]) -> bool:
    """Whether the table says which chips the proprietary modules drive (``gsp_proprietary_supported``,
    from branch 560 on)."""
    return any("gsp_proprietary_supported" in (c.get("features") or []) for c in chips)


def flavours_for(chip: Mapping[str, Any], marked: bool = True) -> list[str]:
    """The module flavours of this driver that drive ``chip`` (``[]`` for a legacy-branch chip);
    ``marked``: the table marks ``gsp_proprietary_supported`` (:func:`marks_proprietary`)."""
    if chip.get("legacybranch"):
        return []
    feats = chip.get("features") or []
    if "kernelopen" not in feats:
        return ["proprietary"]
    return ["open", "proprietary"] if "gsp_proprietary_supported" in feats or not marked else ["open"]


def judge(gpus: Iterable[Mapping[str, str]], chips: Sequence[Mapping[str, Any]], modules: str) -> dict[str, list]:
    """The GPUs the ``modules`` flavour (``open`` / ``proprietary``) of the driver whose table is
    ``chips`` cannot drive, and those the table does not list: ``{"unsupported": [{"address",
    "device_id", "name", "works_with": [flavours] or ["legacy branch 470.xx"], "why"}], "unlisted":
    [{"address", "device_id"}]}``."""
    if modules not in MODULE_FLAVOURS:
        raise ValueError("kernel modules must be one of %s, not %r" % (", ".join(MODULE_FLAVOURS), modules))
    marked = marks_proprietary(chips)
    bad, unlisted = [], []
    for gpu in gpus:
        chip = _chip_for(gpu, chips)
        if chip is None:
            unlisted.append({"address": gpu.get("address"), "device_id": gpu.get("device_id")})
            continue
        works = flavours_for(chip, marked)
        if modules in works:
            continue
        if chip["legacybranch"]:
            works = ["legacy branch %s" % chip["legacybranch"]]
        entry = dict(address=gpu.get("address"), device_id=gpu.get("device_id"), name=chip["name"], works_with=works)
        bad.append(dict(entry, why=describe([entry])))
    return {"unsupported": bad, "unlisted": unlisted}


def describe(unsupported: Iterable[Mapping[str, Any]]) -> str:
    """:func:`judge`'s unsupported GPUs in a sentence, GPUs of one kind said once: ``0000:18:00.0,
    0000:28:00.0 (2 GPUs, PCI ID 10de:1bb3, Tesla P4) run only with the proprietary kernel modules``."""
    groups: dict[tuple, list[str]] = {}
    for b in unsupported:
        groups.setdefault((b.get("device_id"), b.get("name"), tuple(b.get("works_with") or [])), []).append(
            str(b.get("address")))
    parts = []
    for (dev, name, works), addrs in groups.items():
        many = len(addrs) > 1
        count = "%d GPUs, " % len(addrs) if many else ""
        label = "%s (%sPCI ID 10de:%s, %s)" % (", ".join(addrs), count, (dev or "0x?")[2:], name or "unnamed")
        if works and works[0].startswith("legacy branch "):
            parts.append("%s %s driven only by the %s" % (label, "are" if many else "is", works[0]))
        else:
            parts.append("%s %s only with the %s kernel modules" % (label, "run" if many else "runs",
                                                                    works[0] if works else "?"))
    return "; ".join(parts)
