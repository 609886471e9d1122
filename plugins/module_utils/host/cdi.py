# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""CDI specifications that must follow the driver (case E4).

With the NVIDIA Container Toolkit in CDI mode, a container runtime reads the vendor's Container Device
Interface spec (``/etc/cdi/nvidia.yaml``, or ``/var/run/cdi/nvidia.yaml`` written by the toolkit's
``nvidia-cdi-refresh.service``): every driver file a container gets, by full versioned path
(``/usr/lib/x86_64-linux-gnu/libcuda.so.535.183.06``), and the device nodes. After a driver upgrade a
stale spec makes every GPU container fail to start (``crun: error stat'ing file
/lib/x86_64-linux-gnu/libEGL_nvidia.so.535.161.07: No such file or directory``), and the toolkit's
refresh unit does not run on a module reload.

A spec here: a ``*.yaml`` / ``*.json`` file in the CDI directories (the runtimes read no other) whose
``kind`` has the vendor ``nvidia.com`` and whose name has no infix (``nvidia.yaml``, not the
``nvidia.coherent.yaml`` nvidia-ctk writes beside it): the host's own spec, as ``nvidia-ctk cdi generate``
or the toolkit's refresh unit write it. Specs of other NVIDIA vendors (``management.nvidia.com`` of the
GPU Operator's toolkit, ``k8s.device-plugin.nvidia.com``, ``k8s.gpu.nvidia.com`` of the DRA driver) belong
to the components that write them; they are listed as ``others`` and never rewritten here.
What a spec needs on the host: each ``hostPath`` of ``containerEdits.mounts`` and
``containerEdits.deviceNodes`` (a device node without ``hostPath`` uses its ``path``), and each hook's
``path``, at the top level and in every device.

YAML is read with PyYAML when the host has it; without it, the ``hostPath:`` lines (the toolkit writes one
per mount and per device node) stand in. Pure functions; the module runs the commands.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Callable, Iterable, Optional

from ansible_collections.npuops.fleet.plugins.module_utils.errors import FleetError

try:
    import yaml  # python3-yaml; not on every host
except ImportError:  # pragma: no cover - exercised through the fallback test
    yaml = None  # type: ignore[assignment]  # None: no PyYAML here, load() falls back to its own reader

DEFAULT_DIRS = ("/etc/cdi", "/var/run/cdi")
REFRESH_OUTPUT = "/var/run/cdi/nvidia.yaml"  # nvidia-cdi-refresh.service's NVIDIA_CTK_CDI_OUTPUT_FILE_PATH
REFRESH_ENV = "/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env"  # the unit's EnvironmentFile
_EXTS = (".yaml", ".json")
_KIND = re.compile(r"""^kind:\s*["']?([^\s"']+)""", re.M)
_HOSTPATH = re.compile(r"""^\s*(?:-\s*)?hostPath:\s*["']?([^\s"']+)""", re.M)
_HOOKPATH = re.compile(r"""^\s*(?:-\s*)?hookName:.*\n\s*path:\s*["']?([^\s"']+)""", re.M)
_NODEPATH = re.compile(r"""^\s*-\s*path:\s*["']?(/dev/[^\s"']+)""", re.M)


class SpecError(FleetError):
    """A spec file that cannot be read or parsed; the message names the file."""


def nvidia_kind(kind: Optional[str]) -> bool:
    vendor = (kind or "").split("/", 1)[0]
    return "/" in (kind or "") and (vendor == "nvidia.com" or vendor.endswith(".nvidia.com"))


def owned(path: str, kind: Optional[str]) -> bool:
    """The host's own spec: vendor ``nvidia.com`` and a file name without infix."""
    return (kind or "").split("/", 1)[0] == "nvidia.com" and os.path.basename(path).count(".") == 1


def load(path: str, text: str, use_yaml: bool = True) -> dict[str, Any]:
    """``{"kind", "host_paths", "device_nodes"}`` of a spec's text (``device_nodes``: the container paths
    of its device nodes). :class:`SpecError` for text that is no spec."""
    if path.endswith(".json") or (use_yaml and yaml is not None):
        try:
            data = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
        except Exception as e:  # json / yaml errors, named with the file
            raise SpecError("CDI spec %s cannot be parsed: %s" % (path, " ".join(str(e).split())[:200])) from e
        if not isinstance(data, dict):
            raise SpecError("CDI spec %s is not a mapping" % path)
        return {"kind": data.get("kind"), "host_paths": host_paths(data), "device_nodes": device_nodes(data)}
    m = _KIND.search(text)
    paths = _HOSTPATH.findall(text) + _HOOKPATH.findall(text)
    return {"kind": m.group(1) if m else None, "host_paths": list(dict.fromkeys(paths)),
            "device_nodes": sorted(set(_NODEPATH.findall(text)))}


def _edits(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [spec.get("containerEdits") or {}] + [
        (d or {}).get("containerEdits") or {} for d in spec.get("devices") or [] if isinstance(d, dict)]


def host_paths(spec: dict[str, Any]) -> list[str]:
    """Every host path the spec mounts, gives as a device node or runs as a hook, in order, once each."""
    out: list[str] = []
    for e in _edits(spec):
        for m in e.get("mounts") or []:
            if isinstance(m, dict) and m.get("hostPath"):
                out.append(str(m["hostPath"]))
        for n in e.get("deviceNodes") or []:
            if isinstance(n, dict) and (n.get("hostPath") or n.get("path")):
                out.append(str(n.get("hostPath") or n["path"]))
        for h in e.get("hooks") or []:
            if isinstance(h, dict) and h.get("path"):
                out.append(str(h["path"]))
    return list(dict.fromkeys(out))


def device_nodes(spec: dict[str, Any]) -> list[str]:
    """The container paths of the spec's device nodes, sorted, once each."""
    return sorted({str(n["path"]) for e in _edits(spec) for n in e.get("deviceNodes") or []
                   if isinstance(n, dict) and n.get("path")})


def lost_nodes(before: list[str], after: list[str]) -> list[str]:
    """Device nodes the spec gave before and no longer gives (``/dev/nvidia-uvm`` left out when it did not
    exist at generation time). MIG capability nodes (``/dev/nvidia-caps/``) follow the re-made instances
    and are not compared."""
    return sorted(set(n for n in before if not n.startswith("/dev/nvidia-caps/")) - set(after))


def find_specs(dirs: Iterable[str], read: Callable[[str], str]) -> list[dict[str, Any]]:
    """The NVIDIA specs in ``dirs`` (each file once, by real path, in name order):
    ``[{"path", "kind", "format", "host_paths", "device_nodes", "owned", "error"}]``; a file named
    ``nvidia*`` that does not parse is listed with its ``error`` and no kind (it may be the host's own: it
    is not skipped silently). ``owned``: :func:`owned`."""
    seen: set[str] = set()
    out: list[dict[str, Any]] = []
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
                if n.startswith("nvidia."):
                    out.append({"path": path, "kind": None, "format": _fmt(n), "host_paths": [], "device_nodes": [],
                                "owned": True, "error": str(e)})
                continue
            if nvidia_kind(spec["kind"]):
                out.append(dict(spec, path=path, format=_fmt(n), owned=owned(path, spec["kind"]), error=None))
    return out


def _fmt(name: str) -> str:
    return "json" if name.endswith(".json") else "yaml"


def parse_env_file(text: str) -> dict[str, str]:
    """``KEY=VALUE`` lines of a systemd EnvironmentFile (comments and blanks skipped, one level of quotes
    removed)."""
    out = {}
    for line in (text or "").splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")) or "=" not in line:
            continue
        k, v = line.split("=", 1)
        out[k.strip()] = v.strip().strip('"').strip("'")
    return out


def stale(spec_text: str, host_paths_: list[str], old_version: Optional[str],
          exists: Callable[[str], bool] = os.path.exists) -> dict[str, Any]:
    """``{"missing": [host paths not on the host], "old_version_found": bool}``: what keeps a spec from
    following the driver. ``old_version`` (the driver before the upgrade) must not appear in the text."""
    old = (old_version or "").strip()
    return {"missing": [p for p in host_paths_ if not exists(p)],
            "old_version_found": bool(old) and re.search(r"(?<![0-9])" + re.escape(old) + r"(?![0-9]|\.[0-9])",
                                                         spec_text) is not None}
