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


def proc_parent(pid: int) -> Optional[int]:
    """The parent pid of ``pid`` from /proc/<pid>/stat (None when it is gone or unreadable)."""
    try:
        with open("/proc/%d/stat" % pid, encoding="utf-8", errors="replace") as fh:
            stat = fh.read()
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last ")"
    fields = stat[stat.rfind(")") + 2 :].split()
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
