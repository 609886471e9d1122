# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""Whether the ansible-playbook run that started this module process is still there.

A module delegated to the control node runs below Ansible's worker through one or two shells
(``worker -> sh -c ... -> python3``) that Ansible starts in a session of their own: a playbook killed
with SIGKILL takes its workers with it but leaves such a module running, an orphan that would go on
acting for a run that no longer exists (an admission granted minutes later cordons a node no play
will ever finish). :class:`CallerWatch` records the chain of parent processes when the module starts
and says the caller is gone as soon as one of them is no longer the child of the one above it (the
kernel re-parents an orphan to init or to a subreaper).

Linux ``/proc`` only; elsewhere (no ``/proc/<pid>/stat``) it never reports the caller gone.
"""

from __future__ import annotations

import os
from typing import Callable, Optional

Reader = Callable[[int], Optional[int]]


def _stat_fields(pid: int) -> Optional[list[str]]:
    """The fields of /proc/<pid>/stat after the command name, from the state on (None when it is gone
    or unreadable): "pid (comm) state ppid ...", and comm may hold spaces and parentheses, so the
    split is after the last ")"."""
    try:
        with open("/proc/%d/stat" % pid, encoding="utf-8", errors="replace") as fh:
            stat = fh.read()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2 :].split()


def proc_parent(pid: int) -> Optional[int]:
    """The parent pid of ``pid`` from /proc/<pid>/stat (None when it is gone or unreadable)."""
    fields = _stat_fields(pid)
    if fields is None:
        return None
    try:
        return int(fields[1])
    except (IndexError, ValueError):
        return None


def proc_is_playbook(pid: int) -> bool:
    """Whether ``pid`` runs ansible-playbook (its main process or a worker forked from it, which
    keeps its command line): one of its first three arguments is a path whose base name starts with
    ``ansible-playbook``."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as fh:
            args = fh.read().split(b"\0")
    except OSError:
        return False
    # " " excluded: a shell's "-c 'ansible-playbook ...'" is not the playbook itself
    return any(
        os.path.basename(a).startswith(b"ansible-playbook") and b" " not in a for a in args[:3]
    )


class CallerWatch:
    """The parent chain of this process, ``depth`` levels up, stopping at init and at the
    ansible-playbook main process: what started the playbook (a shell, nohup, a job runner) may end
    while the run goes on."""

    def __init__(
        self,
        depth: int = 5,
        reader: Reader = proc_parent,
        pid: Optional[int] = None,
        is_playbook: Callable[[int], bool] = proc_is_playbook,
    ) -> None:
        self.reader = reader
        self.chain: list[tuple[int, int]] = []  # (process, its parent) as at the start
        child = os.getpid() if pid is None else pid
        for _level in range(depth):
            parent = reader(child)
            if parent is None or parent <= 1:
                break
            self.chain.append((child, parent))
            if is_playbook(parent) and not is_playbook(reader(parent) or 0):
                break  # the playbook's main process: its own parent is none of the run's business
            child = parent

    def gone(self) -> Optional[str]:
        """None while every process of the chain still has its parent; else why the caller is gone."""
        for child, parent in self.chain:
            now = self.reader(child)
            if now is None and child != self.chain[0][0]:
                return "process %d between this module and its playbook ended" % child
            if now is not None and now != parent:
                return "the ansible-playbook run that started this call is gone (process %d lost its parent %d)" % (
                    child,
                    parent,
                )
        return None


def proc_start(pid: int) -> Optional[str]:
    """The start time of ``pid`` (clock ticks since boot, /proc/<pid>/stat field 22) as a string, so
    that a pid reused by another process is not taken for the one recorded; None when it is gone."""
    fields = _stat_fields(pid)
    return fields[19] if fields is not None and len(fields) > 19 else None


def boot_id() -> str:
    """This machine's boot id ("" where there is none): a recorded pid means something only in the
    same boot of the same machine."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def pid_namespace() -> str:
    """This process's pid namespace (``pid:[<inode>]``; "" where there is none): containers on one
    machine share its boot id but not its pids, so a recorded pid means something only in the same
    namespace (AWX runs each job in a container of its own)."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def this_process(pid: Optional[int] = None) -> Optional[dict[str, str | int]]:
    """``{"boot_id", "pidns", "pid", "start"}`` of ``pid`` (default this process), or None when it
    cannot be told: what :func:`process_gone` later judges."""
    pid = os.getpid() if pid is None else pid
    start, bid, ns = proc_start(pid), boot_id(), pid_namespace()
    return {"boot_id": bid, "pidns": ns, "pid": pid, "start": start} if start and bid and ns else None


def playbook_process(watch: Optional[CallerWatch] = None) -> Optional[dict[str, str | int]]:
    """:func:`this_process` of the ansible-playbook main process that started this module (the top of
    its parent chain, :class:`CallerWatch`), or None when it cannot be told."""
    watch = watch if watch is not None else CallerWatch()
    for _child, parent in reversed(watch.chain):
        if proc_is_playbook(parent):
            return this_process(parent)
    return None


def process_gone(recorded: object) -> bool:
    """True when ``recorded`` (a :func:`this_process` of this boot of this machine, in this pid
    namespace) has ended: its pid is gone or now another process (another start time). False when it
    runs, or when the record is of another machine, boot or pid namespace (a container of its own:
    not knowable here; its own lease's TTL decides)."""
    if not isinstance(recorded, dict) or not recorded.get("boot_id") or recorded.get("boot_id") != boot_id():
        return False
    if not recorded.get("pidns") or recorded.get("pidns") != pid_namespace():
        return False
    try:
        pid = int(recorded.get("pid") or 0)
    except (TypeError, ValueError):
        return False
    if pid <= 1 or not recorded.get("start"):
        return False
    start = proc_start(pid)
    if start is None:
        # unreadable is not gone: /proc mounted hidepid hides other users' processes
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except OSError:
            return False  # EPERM: it exists
        return False
    return start != recorded.get("start")
