# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""CDI specifications that must follow the driver (case E4).

With the NVIDIA Container Toolkit in CDI mode, a container runtime reads the vendor's Container Device
Interface spec (``/etc/cdi/nvidia.yaml``, or ``/var/run/cdi/nvidia.yaml`` written by the toolkit's
``nvidia-cdi-refresh.service``): every driver file a container gets, by full versioned path
(``/usr/lib/x86_64-linux-gnu/libcuda.so.535.183.06``), and the device nodes. After a driver upgrade a
stale spec makes every GPU container fail to start (``crun: error stat'ing file
/lib/x86_64-linux-gnu/libEGL_nvidia.so.535.161.07: No such file or directory``), and the toolkit's
refresh unit does not run on a module reload.

A spec here: a ``*.yaml`` / ``*.yml`` / ``*.json`` file in the CDI directories whose ``kind`` is
``<vendor>/<class>`` with vendor ``nvidia.com`` or a ``*.nvidia.com`` one (``management.nvidia.com``).
What a spec needs on the host: each ``hostPath`` of ``containerEdits.mounts`` and
``containerEdits.deviceNodes`` (a device node without ``hostPath`` uses its ``path``), at the top level
and in every device. Hooks are the toolkit's own binaries, not the driver's, and are not checked.

YAML is read with PyYAML when the host has it; without it, the ``hostPath:`` lines (the toolkit writes one
per mount and per device node) stand in. Pure functions; the module runs the commands.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Callable, Iterable, Optional

try:
    import yaml  # python3-yaml; not on every host
except ImportError:  # pragma: no cover - exercised through the fallback test
    yaml = None

DEFAULT_DIRS = ("/etc/cdi", "/var/run/cdi")
REFRESH_OUTPUT = "/var/run/cdi/nvidia.yaml"  # nvidia-cdi-refresh.service's NVIDIA_CTK_CDI_OUTPUT_FILE_PATH
_EXTS = (".yaml", ".yml", ".json")
_KIND = re.compile(r"""^kind:\s*["']?([^\s"']+)""", re.M)
_HOSTPATH = re.compile(r"""^\s*(?:-\s*)?hostPath:\s*["']?([^\s"']+)""", re.M)


class SpecError(Exception):
    """A spec file that cannot be read or parsed; the message names the file."""


def nvidia_kind(kind: Optional[str]) -> bool:
    vendor = (kind or "").split("/", 1)[0]
    return "/" in (kind or "") and (vendor == "nvidia.com" or vendor.endswith(".nvidia.com"))


def load(path: str, text: str, use_yaml: bool = True) -> dict[str, Any]:
    """``{"kind", "host_paths"}`` of a spec's text. :class:`SpecError` for text that is no spec."""
    if path.endswith(".json") or (use_yaml and yaml is not None):
        try:
            data = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
        except Exception as e:  # json / yaml errors, named with the file
            raise SpecError("CDI spec %s cannot be parsed: %s" % (path, " ".join(str(e).split())[:200])) from e
        if not isinstance(data, dict):
            raise SpecError("CDI spec %s is not a mapping" % path)
        return {"kind": data.get("kind"), "host_paths": host_paths(data)}
    m = _KIND.search(text)
    return {"kind": m.group(1) if m else None, "host_paths": list(dict.fromkeys(_HOSTPATH.findall(text)))}


def host_paths(spec: dict[str, Any]) -> list[str]:
    """Every host path the spec mounts or gives as a device node, in order, once each."""
    edits = [spec.get("containerEdits") or {}] + [
        (d or {}).get("containerEdits") or {} for d in spec.get("devices") or [] if isinstance(d, dict)]
    out: list[str] = []
    for e in edits:
        for m in e.get("mounts") or []:
            if isinstance(m, dict) and m.get("hostPath"):
                out.append(str(m["hostPath"]))
        for n in e.get("deviceNodes") or []:
            if isinstance(n, dict) and (n.get("hostPath") or n.get("path")):
                out.append(str(n.get("hostPath") or n["path"]))
    return list(dict.fromkeys(out))


def find_specs(dirs: Iterable[str], read: Callable[[str], str]) -> list[dict[str, Any]]:
    """The NVIDIA specs in ``dirs`` (each file once, by real path, in name order):
    ``[{"path", "kind", "format", "host_paths", "error"}]``; a file that does not parse is listed with its
    ``error`` and no kind (it may be the vendor's: it is not skipped silently)."""
    seen: set[str] = set()
    out = []
    for d in dirs:
        try:
            names = sorted(os.listdir(d))
        except OSError:
            continue
        for n in names:
            path = os.path.join(d, n)
            real = os.path.realpath(path)
            if not n.endswith(_EXTS) or real in seen or not os.path.isfile(path):
                continue
            seen.add(real)
            try:
                text = read(path)
                spec = load(path, text)
            except (OSError, SpecError) as e:
                if "nvidia" in n:
                    out.append({"path": path, "kind": None, "format": _fmt(n), "host_paths": [], "error": str(e)})
                continue
            if nvidia_kind(spec["kind"]):
                out.append({"path": path, "kind": spec["kind"], "format": _fmt(n), "host_paths": spec["host_paths"],
                            "error": None})
    return out


def _fmt(name: str) -> str:
    return "json" if name.endswith(".json") else "yaml"


def stale(spec_text: str, host_paths_: list[str], old_version: Optional[str],
          exists: Callable[[str], bool] = os.path.exists) -> dict[str, Any]:
    """``{"missing": [host paths not on the host], "old_version_found": bool}``: what keeps a spec from
    following the driver. ``old_version`` (the driver before the upgrade) must not appear in the text."""
    old = (old_version or "").strip()
    return {"missing": [p for p in host_paths_ if not exists(p)],
            "old_version_found": bool(old) and re.search(r"(?<![0-9.])" + re.escape(old) + r"(?![0-9])", spec_text)
            is not None}
