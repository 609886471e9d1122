"""fleet/caller.py: a recorded ansible-playbook process ({boot_id, pid, start}) is known gone only on
this machine in this boot, when its pid ended or now runs another process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ansible_collections.npuops.fleet.plugins.module_utils.fleet import caller

pytestmark = pytest.mark.skipif(
    not os.path.exists("/proc/self/stat") or not os.path.exists("/proc/sys/kernel/random/boot_id"),
    reason="Linux /proc only",
)


def record_of(pid, boot=None):
    return {"boot_id": caller.boot_id() if boot is None else boot, "pidns": os.readlink("/proc/self/ns/pid"),
            "pid": pid, "start": caller.proc_start(pid)}


def test_boot_id_and_start_of_this_process():
    bid = caller.boot_id()
    assert len(bid) == 36 and bid.count("-") == 4  # a UUID
    start = caller.proc_start(os.getpid())
    assert start is not None and start.isdigit()
    assert caller.proc_start(os.getpid()) == start  # stable for the same process


def test_this_process_is_not_gone():
    assert caller.process_gone(record_of(os.getpid())) is False


@pytest.fixture
def exited_child():
    """The record of a child taken while it ran; the child then exited and was waited for."""
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        rec = record_of(child.pid)
        assert rec["start"] is not None and caller.process_gone(rec) is False  # running: not gone
    finally:
        child.stdin.close()
        child.wait(timeout=30)
    return rec


def test_a_child_that_exited_is_gone(exited_child):
    assert caller.proc_start(exited_child["pid"]) is None
    assert caller.process_gone(exited_child) is True


def test_a_pid_now_running_another_process_is_gone():
    rec = dict(record_of(os.getpid()), start="1")  # same pid, another start time: pid reused
    assert caller.process_gone(rec) is True


def test_another_boot_is_not_knowable_here(exited_child):
    assert caller.process_gone(dict(exited_child, boot_id="00000000-0000-0000-0000-000000000000")) is False
    assert caller.process_gone(dict(exited_child, boot_id="")) is False


def test_records_that_say_nothing_are_not_gone():
    assert caller.process_gone(None) is False
    here = {"boot_id": caller.boot_id(), "pidns": caller.pid_namespace()}
    assert caller.process_gone(dict(here, pid="x", start="1")) is False
    assert caller.process_gone(dict(here, pid=1, start="nope")) is False  # init


def test_playbook_process_without_a_playbook_in_the_chain_is_none():
    class Watch:
        chain = [(os.getpid(), os.getppid())]

    # pytest's parent is no ansible-playbook
    assert caller.playbook_process(Watch()) is None


def test_a_process_of_another_pid_namespace_is_never_judged_gone(exited_child):
    # a job in another container of the same machine shares the boot id, not the pids: its pid here
    # means another process, or none
    assert caller.process_gone(dict(exited_child, pidns="pid:[1]")) is False
    assert caller.process_gone(dict(exited_child, pidns="")) is False
    assert caller.process_gone({k: v for k, v in exited_child.items() if k != "pidns"}) is False
    assert caller.process_gone(exited_child) is True


def test_a_record_without_a_start_time_is_not_judged():
    here = {"boot_id": caller.boot_id(), "pidns": caller.pid_namespace(), "pid": os.getpid()}
    assert caller.process_gone(dict(here, start="")) is False
    assert caller.process_gone(here) is False
