# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
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


class CallerWatch:
    """The parent chain of this process, ``depth`` levels up (stopping at init)."""

    def __init__(self, depth: int = 4, reader: Reader = proc_parent, pid: Optional[int] = None) -> None:
        self.reader = reader
        self.chain: list[tuple[int, int]] = []  # (process, its parent) as at the start
        child = os.getpid() if pid is None else pid
        for _level in range(depth):
            parent = reader(child)
            if parent is None or parent <= 1:
                break
            self.chain.append((child, parent))
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
