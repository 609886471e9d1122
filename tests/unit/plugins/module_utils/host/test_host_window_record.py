"""Pre-window record: parsers against outputs captured from systemctl 252 and dpkg 1.21 (Debian 12),
the restore plan, and the atomic record file."""

from __future__ import annotations

import json
import os
import stat

import pytest

from ansible_collections.npuops.fleet.plugins.module_utils.host import window_record as wr

# `systemctl is-enabled <unit>; echo rc=$?` on Debian 12 (systemd 252), systemd not running as PID 1.
IS_ENABLED_CAPTURED = [
    ((0, "enabled\n", ""), {"exists": True, "enabled": True, "enabled_state": "enabled"}),
    (
        (1, "", "Failed to get unit file state for ssh.service: No such file or directory\n"),
        {"exists": False, "enabled": False, "enabled_state": "not-found"},
    ),
]
# Words systemctl(1) documents for is-enabled; "not-found" with rc 4 is newer systemd's missing unit.
IS_ENABLED_DOCUMENTED = [
    ((1, "disabled\n", ""), {"exists": True, "enabled": False, "enabled_state": "disabled"}),
    ((0, "static\n", ""), {"exists": True, "enabled": False, "enabled_state": "static"}),
    ((1, "masked\n", ""), {"exists": True, "enabled": False, "enabled_state": "masked"}),
    ((0, "enabled-runtime\n", ""), {"exists": True, "enabled": True, "enabled_state": "enabled-runtime"}),
    ((4, "not-found\n", ""), {"exists": False, "enabled": False, "enabled_state": "not-found"}),
]


@pytest.mark.parametrize("args, expected", IS_ENABLED_CAPTURED + IS_ENABLED_DOCUMENTED)
def test_parse_is_enabled(args, expected):
    assert wr.parse_is_enabled(*args) == expected


@pytest.mark.parametrize(
    "args, expected",
    [
        ((0, "active\n", ""), {"active": True, "active_state": "active"}),
        ((3, "inactive\n", ""), {"active": False, "active_state": "inactive"}),
        ((3, "failed\n", ""), {"active": False, "active_state": "failed"}),
        ((0, "activating\n", ""), {"active": True, "active_state": "activating"}),
        # captured: no systemd as PID 1 (a container) - no answer, not "active"
        (
            (1, "", "System has not been booted with systemd as init system (PID 1). Can't operate.\n"
                    "Failed to connect to bus: Host is down\n"),
            {"active": False, "active_state": None},
        ),
    ],
)
def test_parse_is_active(args, expected):
    assert wr.parse_is_active(*args) == expected


# `dpkg-query --admindir=<copy> -W -f='${Package} ${Status}\n'` after `dpkg --set-selections` of
# "adduser hold" / "bash hold" and one package left as config-files (removed).
DPKG_QUERY_CAPTURED = (
    "adduser hold ok installed\n"
    "alsa-topology-conf deinstall ok config-files\n"
    "alsa-ucm-conf install ok installed\n"
    "apt install ok installed\n"
    "bash hold ok installed\n"
    "libc6 install ok installed\n"
)


def test_parse_dpkg_status_captured():
    got = wr.parse_dpkg_status(DPKG_QUERY_CAPTURED)
    assert wr.held_packages(got) == ["adduser", "bash"]
    assert got["adduser"] == {"want": "hold", "status": "installed", "held": True, "installed": True}
    assert got["alsa-topology-conf"]["installed"] is False
    assert got["apt"] == {"want": "install", "status": "installed", "held": False, "installed": True}


def test_parse_dpkg_status_multiarch_and_garbage():
    got = wr.parse_dpkg_status("libfoo:amd64 install ok installed\nlibfoo:i386 hold ok installed\nbroken\n")
    assert list(got) == ["libfoo"] and got["libfoo"]["held"] is True


def unit(exists=True, enabled=True, active=True):
    return {"exists": exists, "enabled": enabled, "active": active}


def test_restore_plan_starts_exactly_what_was_active():
    record = {
        "services": {
            "nvidia-persistenced": unit(),
            "nvidia-fabricmanager": unit(enabled=True, active=False),
            "nvidia-dcgm": unit(enabled=False, active=True),
            "dcgm": unit(exists=False, enabled=False, active=False),
        },
        "apt_units": {"apt-daily.timer": unit(), "apt-daily-upgrade.timer": unit(active=False)},
        "held_packages": ["nvidia-dkms-550-server-open", "nvidia-dkms-535-server-open", "linux-image-x"],
    }
    now = {
        "nvidia-persistenced": unit(active=False),
        "nvidia-fabricmanager": unit(enabled=False, active=False),
        "nvidia-dcgm": unit(enabled=False, active=True),
        "dcgm": unit(exists=False, enabled=False, active=False),
    }
    timers = {"apt-daily.timer": unit(active=False), "apt-daily-upgrade.timer": unit(active=False)}
    dpkg = {
        "nvidia-dkms-550-server-open": {"held": False, "installed": True},
        "nvidia-dkms-535-server-open": {"held": False, "installed": False},  # replaced by the upgrade
        "linux-image-x": {"held": True, "installed": True},
    }
    assert wr.restore_plan(record, now, timers, dpkg) == {
        "enable": ["nvidia-fabricmanager"],
        "start": ["nvidia-persistenced"],
        "hold": ["nvidia-dkms-550-server-open"],
        "start_timers": ["apt-daily.timer"],
        "left_alone": [],
    }


def test_restore_plan_leaves_alone_a_unit_removed_or_masked_since_the_record():
    # an admin removed fabricmanager and masked dcgm after a failed window: a later window's restore
    # of that old record must not fail on them, nor unmask/re-enable them; it says so
    record = {"services": {"nvidia-fabricmanager": unit(), "nvidia-dcgm": unit(), "nvidia-persistenced": unit()}}
    now = {
        "nvidia-fabricmanager": {"exists": False, "enabled": False, "enabled_state": "not-found", "active": False},
        "nvidia-dcgm": {"exists": True, "enabled": False, "enabled_state": "masked", "active": False},
        "nvidia-persistenced": unit(active=False),
    }
    plan = wr.restore_plan(record, now, {}, {})
    assert plan["enable"] == [] and plan["start"] == ["nvidia-persistenced"]
    assert plan["left_alone"] == ["nvidia-fabricmanager (not-found now)", "nvidia-dcgm (masked now)"]


def test_new_record_lists_the_timers_it_will_stop():
    rec = wr.new_record(
        "run-1", "2025-06-01T02:00:00Z", {"rbln-daemon": unit()},
        {"apt-daily.timer": unit(), "apt-daily-upgrade.timer": unit(active=False), wr.UU_SERVICE: unit()},
        ["b", "a", "a"],
    )
    assert rec["timers_stopped"] == ["apt-daily.timer"]
    assert rec["held_packages"] == ["a", "b"] and rec["run_id"] == "run-1" and rec["version"] == 1


def test_write_record_atomic(tmp_path, monkeypatch):
    path = tmp_path / "sub" / "window.json"
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(wr.os, "fsync", lambda fd: (events.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(wr.os, "replace", lambda a, b: (events.append("replace"), real_replace(a, b))[1])
    wr.write_record(str(path), {"services": {}, "held_packages": ["x"]})
    assert events[:2] == ["fsync", "replace"]  # data on disk before the rename makes it visible
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    assert json.loads(path.read_text()) == {"services": {}, "held_packages": ["x"]}
    assert wr.read_record(str(path)) == {"services": {}, "held_packages": ["x"]}
    assert os.listdir(path.parent) == ["window.json"]


def test_write_record_failure_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "window.json"
    wr.write_record(str(path), {"services": {}, "held_packages": ["old"]})

    def boom(a, b):
        raise OSError("disk full")

    monkeypatch.setattr(wr.os, "replace", boom)
    with pytest.raises(OSError):
        wr.write_record(str(path), {"services": {}, "held_packages": ["new"]})
    assert wr.read_record(str(path))["held_packages"] == ["old"]
    assert os.listdir(tmp_path) == ["window.json"]  # no temp file left behind


def test_read_record_missing_and_corrupt(tmp_path):
    assert wr.read_record(str(tmp_path / "none.json")) is None
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(wr.RecordError, match="bad.json"):
        wr.read_record(str(bad))
    bad.write_text("[]")
    with pytest.raises(wr.RecordError, match="not a record"):
        wr.read_record(str(bad))
