"""dpkg/apt locks: apt's messages (every form of the lock fixture, case D9) and the wait against real
fcntl locks held by another process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ansible_collections.npuops.fleet.plugins.module_utils.host import dpkg_lock

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures")

# Holds a POSIX write lock (F_SETLKW, as apt's and dpkg's F_SETLK) on argv[1] until stdin closes or
# argv[2] seconds pass, whichever comes first.
HOLDER = (
    "import fcntl, os, select, sys\n"
    "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o640)\n"
    "fcntl.lockf(fd, fcntl.LOCK_EX)\n"
    "print('locked', flush=True)\n"
    "select.select([sys.stdin], [], [], float(sys.argv[2]))\n"
)


class FakeClock:
    """``clock``/``sleep`` for wait_for_locks: time moves only when it sleeps; ``at={t: fn}`` runs ``fn``
    once the clock has reached ``t`` (a real lock released at a known point of the wait)."""

    def __init__(self, at=None):
        self.now = 100.0
        self.start = self.now
        self.sleeps = []
        self.at = dict(at or {})

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds
        for t in sorted(self.at):
            if self.now - self.start >= t:
                self.at.pop(t)()


def fixture_blocks():
    with open(os.path.join(FIX, "dpkg-lock-messages.txt")) as f:
        return [b for b in f.read().split("\n\n") if b.strip()]


# The fixture's four forms, in file order, read by eye.
EXPECTED = [
    {"lock": "/var/lib/dpkg/lock-frontend", "pid": 24459, "process": "unattended-upgr"},
    {"lock": "/var/lib/dpkg/lock-frontend", "pid": 8859, "process": "apt-get"},
    {"lock": "/var/lib/dpkg/lock-frontend", "pid": None, "process": None},
    {"lock": "/var/lib/dpkg/lock", "pid": None, "process": None},
]


def test_fixture_has_the_four_forms():
    assert len(fixture_blocks()) == len(EXPECTED)


@pytest.mark.parametrize("index", range(len(EXPECTED)))
def test_every_fixture_form_parses(index):
    block = fixture_blocks()[index]
    assert dpkg_lock.parse_lock_message(block) == EXPECTED[index]
    # Both lines of a two-line form name the same lock: one entry, not two.
    assert dpkg_lock.parse_lock_messages(block) == [EXPECTED[index]]


@pytest.mark.parametrize("index", range(len(EXPECTED)))
def test_each_fixture_line_alone(index):
    # The role may see only the last line of stderr; each line alone still names the lock.
    for line in fixture_blocks()[index].splitlines():
        got = dpkg_lock.parse_lock_message(line)
        assert got is not None and got["lock"] == EXPECTED[index]["lock"], line


def test_whole_fixture_prefers_a_named_holder():
    with open(os.path.join(FIX, "dpkg-lock-messages.txt")) as f:
        text = f.read()
    assert dpkg_lock.parse_lock_message(text) == EXPECTED[0]
    assert dpkg_lock.parse_lock_messages(text) == [EXPECTED[0], EXPECTED[3]]


@pytest.mark.parametrize(
    "text, expected",
    [
        # apt while waiting (apt >= 1.9 with a lock timeout)
        (
            "Waiting for cache lock: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 3301 "
            "(apt)... 12s",
            {"lock": "/var/lib/dpkg/lock-frontend", "pid": 3301, "process": "apt"},
        ),
        # dpkg >= 1.20 itself
        (
            "dpkg: error: dpkg frontend lock was locked by another process with pid 4242\n"
            "Note: removing the lock file is always wrong, and can end up damaging the locked area",
            {"lock": "/var/lib/dpkg/lock-frontend", "pid": 4242, "process": None},
        ),
        (
            "dpkg: error: dpkg database lock was locked by another process with pid 17",
            {"lock": "/var/lib/dpkg/lock", "pid": 17, "process": None},
        ),
        # older dpkg
        (
            "dpkg: error: dpkg status database is locked by another process",
            {"lock": "/var/lib/dpkg/lock", "pid": None, "process": None},
        ),
        (
            "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 77 (apt-get)\n"
            "E: Unable to lock directory /var/lib/apt/lists/",
            {"lock": "/var/lib/apt/lists/lock", "pid": 77, "process": "apt-get"},
        ),
        # not a held lock: no permission (not root), or nothing about locks
        ("E: Could not open lock file /var/lib/dpkg/lock-frontend - open (13: Permission denied)", None),
        ("E: Unable to locate package nvidia-driver-999", None),
        ("", None),
    ],
)
def test_other_message_forms(text, expected):
    assert dpkg_lock.parse_lock_message(text) == expected


def test_parse_proc_locks():
    text = (
        "1: POSIX  ADVISORY  WRITE 30557 fe:00:9979400 0 EOF\n"
        "1: -> POSIX  ADVISORY  WRITE 30600 fe:00:9979400 0 EOF\n"
        "2: OFDLCK ADVISORY  WRITE -1 08:01:1311735 0 EOF\n"
        "garbage\n"
    )
    assert dpkg_lock.parse_proc_locks(text) == [
        {"kind": "POSIX", "access": "WRITE", "pid": 30557, "major": 254, "minor": 0, "inode": 9979400},
        {"kind": "OFDLCK", "access": "WRITE", "pid": None, "major": 8, "minor": 1, "inode": 1311735},
    ]


def test_split_cmdline():
    assert dpkg_lock.split_cmdline(b"/usr/bin/python3\0/usr/bin/unattended-upgrade\0--download-only\0") == (
        "/usr/bin/python3 /usr/bin/unattended-upgrade --download-only"
    )
    assert dpkg_lock.split_cmdline(b"") is None


UU_CMDLINE = "/usr/bin/python3 /usr/bin/unattended-upgrade"


def test_timeout_message_names_everything():
    msg = dpkg_lock.timeout_message(
        [
            {"lock": "/var/lib/dpkg/lock-frontend", "pid": 24459, "cmdline": UU_CMDLINE},
            {"lock": "/var/lib/dpkg/lock", "pid": None, "cmdline": None},
        ],
        30.04,
        30,
    )
    assert "/var/lib/dpkg/lock-frontend held by pid 24459 (/usr/bin/python3 /usr/bin/unattended-upgrade)" in msg
    assert "/var/lib/dpkg/lock held by an unknown process" in msg
    assert "30.0 s" in msg and "Nothing was killed" in msg


# ---- real locks ---------------------------------------------------------------------------------


@pytest.fixture
def holder(tmp_path):
    """A process holding the lock on a temp file, started with a long, distinctive command line."""
    procs = []

    def start(path, seconds=30.0):
        argv = [sys.executable, "-c", HOLDER, str(path), str(seconds), "--marker", "unattended upgrade look-alike"]
        p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        procs.append(p)
        assert p.stdout.readline().strip() == "locked"
        return p, argv

    yield start
    for p in procs:
        if p.poll() is None:
            p.stdin.close()
            p.wait(10)


def test_free_lock_and_missing_file(tmp_path):
    free = tmp_path / "lock"
    free.write_text("")
    missing = tmp_path / "no-such-lock"
    res = dpkg_lock.wait_for_locks([str(free), str(missing)], timeout=0)
    assert res == {"free": True, "waited": res["waited"], "holders": []}
    assert not missing.exists()  # probing never creates a lock file


def test_held_lock_names_pid_and_full_cmdline(tmp_path, holder):
    lock = tmp_path / "lock-frontend"
    other = tmp_path / "lock"
    other.write_text("")
    proc, argv = holder(lock)
    clock = FakeClock()
    # poll and timeout exact in binary: the clock's sum is exact too
    res = dpkg_lock.wait_for_locks([str(lock), str(other)], timeout=0.5, poll=0.125, clock=clock, sleep=clock.sleep)
    # It polled the real lock every 0.125 s of its clock until the whole timeout was spent, then gave up.
    assert res["free"] is False and res["waited"] == 0.5, (res, clock.sleeps)
    assert clock.sleeps == [0.125] * 4, clock.sleeps
    assert res["holders"] == [{"lock": str(lock), "pid": proc.pid, "cmdline": " ".join(argv)}]
    msg = dpkg_lock.timeout_message(res["holders"], res["waited"], 0.5)
    assert str(proc.pid) in msg and " ".join(argv) in msg and str(lock) in msg
    # The holder was not disturbed (nothing killed) and the probe took no lock of its own.
    assert proc.poll() is None


def test_check_once_with_timeout_zero(tmp_path, holder):
    lock = tmp_path / "lock"
    proc, _argv = holder(lock)
    res = dpkg_lock.wait_for_locks([str(lock)], timeout=0, sleep=lambda s: pytest.fail("slept"))
    assert res["free"] is False and res["holders"][0]["pid"] == proc.pid


def test_probe_never_keeps_the_lock(tmp_path):
    lock = tmp_path / "lock"
    lock.write_text("")
    assert dpkg_lock.probe_lock(str(lock)) is None
    # Another process can take the lock without waiting right after a probe.
    code = "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR); fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)"
    subprocess.run([sys.executable, "-c", code, str(lock)], check=True, timeout=10)


def test_wait_returns_free_once_the_holder_exits(tmp_path, holder):
    lock = tmp_path / "lock"
    proc, _argv = holder(lock)

    def release():  # the holder exits (apt finished) half a second into the wait, by the wait's clock
        proc.stdin.close()
        proc.wait(10)

    clock = FakeClock(at={0.5: release})
    res = dpkg_lock.wait_for_locks([str(lock)], timeout=20, poll=0.125, clock=clock, sleep=clock.sleep)
    assert res["free"] is True and res["holders"] == []
    # free on the first pass after the release: it neither returned early nor waited for the timeout
    assert res["waited"] == 0.5 and clock.sleeps == [0.125] * 4, (res, clock.sleeps)


def test_proc_locks_fallback(tmp_path, holder, monkeypatch):
    # Where F_GETLK cannot be used (unreadable lock file, unknown struct layout) /proc/locks names the holder.
    monkeypatch.setattr(dpkg_lock, "_GETLK_USABLE", False)
    lock = tmp_path / "lock"
    proc, argv = holder(lock)
    assert dpkg_lock.probe_lock(str(lock)) == {"lock": str(lock), "pid": proc.pid, "cmdline": " ".join(argv)}
    free = tmp_path / "free"
    free.write_text("")
    assert dpkg_lock.probe_lock(str(free)) is None


def test_own_lock_fcntl_flavour(tmp_path):
    # fcntl.fcntl(F_SETLKW) as a holder too (the flavour apt uses), via a raw struct flock.
    lock = tmp_path / "lock"
    code = (
        "import fcntl, os, struct, sys, select\n"
        "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
        "fcntl.fcntl(fd, fcntl.F_SETLKW, struct.pack('@hhqqi4x', fcntl.F_WRLCK, 0, 0, 0, 0))\n"
        "print('locked', flush=True)\n"
        "select.select([sys.stdin], [], [], 30)\n"
    )
    p = subprocess.Popen([sys.executable, "-c", code, str(lock)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    try:
        assert p.stdout.readline().strip() == "locked"
        h = dpkg_lock.probe_lock(str(lock))
        assert h["pid"] == p.pid and h["cmdline"].startswith(sys.executable + " -c ")
    finally:
        p.stdin.close()
        p.wait(10)
    assert dpkg_lock.probe_lock(str(lock)) is None
