# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""dpkg / apt locks: who holds them, waiting until they are free, and apt's lock error messages.

apt and dpkg lock with fcntl POSIX write locks (F_SETLK) on fixed files. A lock is tested here with
F_GETLK, which reports the holder's PID without taking the lock: taking it, even for an instant,
could make a concurrent apt fail with "Could not get lock". Where F_GETLK cannot be used (the lock
file is not readable, an unknown ``struct flock`` layout, an OFD lock without a PID) ``/proc/locks``
names the holder. The holder is named by its full ``/proc/<pid>/cmdline``: the kernel's 15-character
``comm`` (``unattended-upgr``) matches no process name a user would type. Nothing is ever killed.

Pure parts: :func:`parse_lock_message`, :func:`parse_lock_messages`, :func:`parse_proc_locks`,
:func:`split_cmdline`, :func:`timeout_message`.
"""

from __future__ import annotations

import os
import re
import struct
import sys
import time
from typing import Any, Callable, Iterable, Optional

try:
    import fcntl
except ImportError:  # not on Linux; /proc/locks is then the only source
    fcntl = None  # type: ignore[assignment]

FRONTEND_LOCK = "/var/lib/dpkg/lock-frontend"
DPKG_LOCK = "/var/lib/dpkg/lock"
LISTS_LOCK = "/var/lib/apt/lists/lock"
ARCHIVES_LOCK = "/var/cache/apt/archives/lock"
# The two locks dpkg itself takes (dpkg --set-selections, dpkg -i).
DPKG_LOCKS = (FRONTEND_LOCK, DPKG_LOCK)
# Everything apt-get install takes: dpkg's locks plus the lists and archives locks.
DEFAULT_LOCKS = (FRONTEND_LOCK, DPKG_LOCK, LISTS_LOCK, ARCHIVES_LOCK)

# struct flock on 64-bit Linux: short l_type, short l_whence, off_t l_start, off_t l_len, pid_t l_pid.
_FLOCK_FMT = "@hhqqi"
_FLOCK_SIZE = (struct.calcsize(_FLOCK_FMT) + 7) // 8 * 8
_GETLK_USABLE = fcntl is not None and sys.platform.startswith("linux") and struct.calcsize("P") == 8

# apt: "Could not get lock <path>. It is held by process <pid> (<comm>)" (apt >= 1.9), or
# "Could not get lock <path> - open (11: Resource temporarily unavailable)" (older); also after
# "Waiting for cache lock: ".
_APT_LOCK = re.compile(
    r"Could not get lock (?P<lock>/\S+?)(?:\.\s+It is held by process (?P<pid>\d+)(?: \((?P<process>[^)]*)\))?"
    r"|\s+-\s+open \(\d+[^)]*\)|\.?(?=\s|$))"
)
# apt's second line: names the lock, but not the holder.
_APT_FRONTEND = re.compile(r"Unable to acquire the dpkg frontend lock \((?P<lock>/[^)]+)\)")
_APT_ADMINDIR = re.compile(r"Unable to lock the administration directory \((?P<dir>/[^)]+)\)")
_APT_LOCK_DIR = re.compile(r"Unable to lock directory (?P<dir>/\S+?)/?(?:\s|$)")
# dpkg >= 1.20: "dpkg: error: dpkg frontend lock was locked by another process with pid 1234";
# older: "dpkg: error: dpkg frontend is locked by another process" / "dpkg status database is locked ...".
_DPKG_LOCK = re.compile(
    r"dpkg (?P<what>frontend lock|frontend|database lock|status database) (?:was|is) locked by another process"
    r"(?: with pid (?P<pid>\d+))?"
)


def _entry(lock: str, pid: Optional[str] = None, process: Optional[str] = None) -> dict[str, Any]:
    return {"lock": lock, "pid": int(pid) if pid else None, "process": process or None}


def parse_lock_messages(text: str) -> list[dict[str, Any]]:
    """Every dpkg/apt lock named in ``text`` (apt or dpkg output), in order, one entry per lock path.

    Each entry is ``{"lock": path, "pid": int or None, "process": str or None}``; ``process`` is what the
    message says (apt prints the 15-character ``comm``, e.g. ``unattended-upgr``), pid and process are
    None when the message form has no holder. Lines about the same lock are merged (apt's "Could not
    get lock" line gives the holder, the next line only the path). "Could not open lock file" (no
    permission) is not a held lock and is not reported.
    """
    found: dict[str, dict[str, Any]] = {}

    def add(lock: str, pid: Optional[str] = None, process: Optional[str] = None) -> None:
        cur = found.get(lock)
        if cur is None:
            found[lock] = _entry(lock, pid, process)
        elif cur["pid"] is None and pid:
            cur.update(_entry(lock, pid, process))

    for line in (text or "").splitlines():
        for m in _APT_LOCK.finditer(line):
            add(m.group("lock"), m.group("pid"), m.group("process"))
        for m in _APT_FRONTEND.finditer(line):
            add(m.group("lock"))
        for m in _APT_ADMINDIR.finditer(line):
            # apt names only the directory; its lock is the directory's "lock" file.
            add(m.group("dir").rstrip("/") + "/lock")
        for m in _APT_LOCK_DIR.finditer(line):
            add(m.group("dir").rstrip("/") + "/lock")
        for m in _DPKG_LOCK.finditer(line):
            add(FRONTEND_LOCK if m.group("what").startswith("frontend") else DPKG_LOCK, m.group("pid"))
    return list(found.values())


def parse_lock_message(text: str) -> Optional[dict[str, Any]]:
    """The first lock named in ``text`` (see :func:`parse_lock_messages`), preferring one whose holder
    is named; None when the text is not about a held dpkg/apt lock."""
    entries = parse_lock_messages(text)
    with_pid = [e for e in entries if e["pid"] is not None]
    return (with_pid or entries)[0] if entries else None


def parse_proc_locks(text: str) -> list[dict[str, Any]]:
    """``/proc/locks`` -> held locks ``{"kind", "access", "pid" (None for OFD locks), "major", "minor",
    "inode"}``; lines of blocked waiters (``->``) are not holders and are left out."""
    res = []
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) < 6 or "->" in parts[:2]:
            continue
        kind, access, pid, ident = parts[1], parts[3], parts[4], parts[5]
        ids = ident.split(":")
        if len(ids) != 3:
            continue
        try:
            major, minor, inode = int(ids[0], 16), int(ids[1], 16), int(ids[2])
            pid_i = int(pid)
        except ValueError:
            continue
        res.append({
            "kind": kind, "access": access, "pid": pid_i if pid_i > 0 else None,
            "major": major, "minor": minor, "inode": inode,
        })
    return res


def split_cmdline(raw: bytes) -> Optional[str]:
    """``/proc/<pid>/cmdline`` bytes (NUL-separated argv) -> the command line joined by spaces;
    None when empty (kernel threads, zombies)."""
    args = [a.decode("utf-8", "replace") for a in (raw or b"").split(b"\0")]
    while args and args[-1] == "":
        args.pop()
    return " ".join(args) if args else None


def read_cmdline(pid: Optional[int], proc: str = "/proc") -> Optional[str]:
    """The full command line of ``pid``, None when it cannot be read (gone, hidden, no pid)."""
    if not pid:
        return None
    try:
        with open(os.path.join(proc, str(pid), "cmdline"), "rb") as f:
            return split_cmdline(f.read())
    except OSError:
        return None


def _getlk(fd: int) -> Optional[int]:
    """None when a write lock could be taken now, else the holder's PID (0 when the kernel gives none)."""
    arg = struct.pack(_FLOCK_FMT, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
    arg += b"\0" * (_FLOCK_SIZE - len(arg))
    res = fcntl.fcntl(fd, fcntl.F_GETLK, arg)
    l_type, _whence, _start, _len, l_pid = struct.unpack_from(_FLOCK_FMT, res)
    if l_type == fcntl.F_UNLCK:
        return None
    return l_pid if l_pid > 0 else 0


def _proc_locks_holder(path: str, proc: str = "/proc") -> tuple[bool, Optional[int]]:
    """(held, pid) of ``path`` from /proc/locks, matched by device and inode."""
    try:
        st = os.stat(path)
        with open(os.path.join(proc, "locks")) as f:
            entries = parse_proc_locks(f.read())
    except OSError:
        return False, None
    major, minor = os.major(st.st_dev), os.minor(st.st_dev)
    hits = [e for e in entries if (e["major"], e["minor"], e["inode"]) == (major, minor, st.st_ino)]
    pids = [e["pid"] for e in hits if e["pid"]]
    return bool(hits), (pids[0] if pids else None)


def probe_lock(path: str, proc: str = "/proc") -> Optional[dict[str, Any]]:
    """None when ``path`` is free (or does not exist), else ``{"lock", "pid", "cmdline"}``.

    Never takes the lock and never creates the file.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        return None
    except OSError:
        fd = None  # not readable (not root): /proc/locks below
    held, pid, known = False, None, False
    if fd is not None:
        try:
            if _GETLK_USABLE:
                got = _getlk(fd)
                held, pid, known = got is not None, got or None, True
        except OSError:
            pass
        finally:
            # Closing drops this process's POSIX locks on the file; it holds none, so nothing is lost.
            os.close(fd)
    if not known or (held and pid is None):
        p_held, p_pid = _proc_locks_holder(path, proc)
        held, pid = held or p_held, pid or p_pid
    if not held:
        return None
    return {"lock": path, "pid": pid, "cmdline": read_cmdline(pid, proc)}


def lock_holders(paths: Iterable[str], proc: str = "/proc") -> list[dict[str, Any]]:
    """The held locks among ``paths``, in the given order."""
    res = []
    for p in paths:
        h = probe_lock(p, proc)
        if h:
            res.append(h)
    return res


def wait_for_locks(
    paths: Iterable[str] = DEFAULT_LOCKS,
    timeout: float = 0,
    poll: float = 1.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    proc: str = "/proc",
) -> dict[str, Any]:
    """Poll until none of ``paths`` is held in one pass, at most ``timeout`` seconds (0: check once).

    Returns ``{"free": bool, "waited": seconds (float), "holders": [{"lock", "pid", "cmdline"}]}``;
    ``holders`` is the last pass's (empty when free).
    """
    paths = list(paths)
    start = clock()
    while True:
        holders = lock_holders(paths, proc)
        waited = max(0.0, clock() - start)
        if not holders:
            return {"free": True, "waited": round(waited, 2), "holders": []}
        if waited >= timeout:
            return {"free": False, "waited": round(waited, 2), "holders": holders}
        sleep(max(0.01, min(poll, timeout - waited)))


def describe_holder(h: dict[str, Any]) -> str:
    if h.get("pid") is None:
        return "%s held by an unknown process" % h["lock"]
    return "%s held by pid %s (%s)" % (h["lock"], h["pid"], h.get("cmdline") or "command line not readable")


def timeout_message(holders: list[dict[str, Any]], waited: float, timeout: float) -> str:
    """The failure message after the bound: every held lock with its holder's PID and full command line."""
    return (
        "dpkg/apt lock still held after waiting %.1f s (timeout %s s): %s. Nothing was killed; let it finish "
        "(an unattended-upgrade run ends by itself) or stop it, then run again."
        % (waited, timeout, "; ".join(describe_holder(h) for h in holders))
    )
