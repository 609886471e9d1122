# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""Kernel modules and what holds them: unload order from the kernel, rmmod / lsof output (pure).

The unload order comes from ``/sys/module/<m>/holders/*`` of what is loaded now, not from a fixed
list: hosts load different sets (``nvidia_peermem`` or ``nv_peer_mem`` on RDMA nodes, ``nvidia_fs``,
``gdrdrv``), and a module can only go after every module that uses it. Loading back takes only what
was loaded before, so a module the host did not have stays unloaded.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, Optional, Sequence

MODULE_IN_USE = "module in use"
HELD_BY_PROCESS = "held by a process"


def users_of(loaded: Mapping[str, Iterable[str]], module: str) -> list[str]:
    """Every loaded module that uses ``module`` directly or through others (holders, transitively)."""
    seen: list[str] = []
    todo = [h for h in loaded.get(module) or [] if h in loaded]
    while todo:
        m = todo.pop(0)
        if m in seen or m == module:
            continue
        seen.append(m)
        todo.extend(h for h in loaded.get(m) or [] if h in loaded)
    return seen


def unload_order(loaded: Mapping[str, Iterable[str]], main_module: str, known: Sequence[str] = ()) -> list[str]:
    """Modules to remove, users first, ``main_module`` last.

    ``loaded``: {module: [modules that hold it]} of what is loaded (``/sys/module/<m>/holders``). The
    set is the main module, every loaded module that uses it (transitively) and the loaded ones of
    ``known`` (the profile's list) with their users. A module comes only after all its holders; among
    modules free at the same time the profile's order (``known``) decides, then the name. Only
    loaded modules appear; an empty list when none of them is loaded.
    """
    wanted: list[str] = []
    for root in [main_module] + [k for k in known if k != main_module]:
        if root in loaded:
            for m in users_of(loaded, root) + [root]:
                if m not in wanted:
                    wanted.append(m)
    rank = {m: i for i, m in enumerate(known)}

    def key(m: str) -> tuple:
        return (m == main_module, rank.get(m, len(rank)), m)

    order: list[str] = []
    left = set(wanted)
    while left:
        free = [m for m in left if not any(h in left for h in loaded.get(m) or [] if h != m)]
        if not free:  # a cycle cannot happen in the kernel; never loop on bad input
            free = list(left)
        nxt = sorted(free, key=key)[0]
        order.append(nxt)
        left.discard(nxt)
    return order


def load_order(unloaded: Sequence[str], fallback: Sequence[str] = ()) -> list[str]:
    """What to load back: exactly the modules that were unloaded, in reverse (main module first).
    ``fallback`` (the profile's unload-order list) when nothing was loaded before, reversed too."""
    return list(reversed(unloaded or fallback))


_RMMOD_RE = re.compile(
    r"(?:rmmod|modprobe): (?:ERROR|FATAL): Module (?P<module>\S+) is "
    r"(?P<what>in use(?: by: (?P<by>.*?))?|not currently loaded|builtin)\.?\s*$"
)


def parse_rmmod(text: str) -> list[dict[str, Any]]:
    """rmmod / modprobe -r refusals: ``[{"module", "in_use", "holders": [modules], "not_loaded"}]``.

    ``rmmod: ERROR: Module nvidia is in use by: nvidia_modeset`` names holder modules;
    ``... is in use`` (no ``by:``) and ``modprobe: FATAL: Module nvidia is in use.`` mean a process.
    """
    res = []
    for line in (text or "").splitlines():
        m = _RMMOD_RE.search(line.strip())
        if not m:
            continue
        what = m.group("what")
        res.append(
            {
                "module": m.group("module"),
                "in_use": what.startswith("in use"),
                "holders": (m.group("by") or "").split(),
                "not_loaded": what == "not currently loaded",
            }
        )
    return res


def parse_lsof(text: str) -> list[dict[str, Any]]:
    """``lsof`` rows: ``[{"command", "pid", "user", "fd", "name"}]`` (header and warnings skipped).

    ``command`` is lsof's name, cut to 9 characters (``nvidia-pe``): name a holder by
    ``/proc/<pid>/cmdline`` instead (:func:`describe_processes`).
    """
    res = []
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) < 5 or not parts[1].isdigit():
            continue
        res.append({"command": parts[0], "pid": int(parts[1]), "user": parts[2], "fd": parts[3], "name": parts[-1]})
    return res


def device_users(fd_links: Iterable[tuple[int, str]], prefix: str) -> dict[int, list[str]]:
    """{pid: [device files under ``prefix`` it has open]} from (pid, readlink of /proc/<pid>/fd/N) pairs."""
    res: dict[int, list[str]] = {}
    for pid, target in fd_links:
        if target and target.startswith(prefix):
            files = res.setdefault(int(pid), [])
            if target not in files:
                files.append(target)
    return res


def describe_processes(
    users: Mapping[int, Iterable[str]], cmdlines: Mapping[int, Optional[str]]
) -> list[dict[str, Any]]:
    """``[{"pid", "cmdline", "devices"}]`` sorted by PID; cmdline is the full command line (None when
    the process is gone or unreadable)."""
    return [{"pid": pid, "cmdline": cmdlines.get(pid), "devices": sorted(users[pid])} for pid in sorted(users)]


def in_use_reason(
    module: str,
    refcnt: Optional[int],
    holder_modules: Iterable[str],
    processes: Iterable[Mapping[str, Any]] = (),
) -> Optional[str]:
    """Why ``module`` cannot be unloaded, naming each holder, or None when nothing holds it.

    e.g. ``module in use: nvidia held by module nvidia_modeset; pid 1346 (/usr/bin/nvidia-persistenced
    --user nvidia-persistenced)``; a use count above 0 with no holder module and no process found is
    ``held by a process`` (the kernel says so, the process was not found).
    """
    mods = list(holder_modules)
    procs = list(processes)
    parts = []
    if mods:
        parts.append("held by module%s %s" % ("s" if len(mods) > 1 else "", ", ".join(mods)))
    for p in procs:
        parts.append("pid %s (%s)" % (p["pid"], p.get("cmdline") or "command line not readable"))
    if not parts and refcnt:
        parts.append("%s (use count %s)" % (HELD_BY_PROCESS, refcnt))
    if not parts:
        return None
    return "%s: %s %s" % (MODULE_IN_USE, module, "; ".join(parts))
