"""npu_host_window as a module: the host is faked at run_command only (systemctl,
dpkg, dpkg-query answered from a small state machine); the record file and the locks are real."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.testing import patch_module_args

from ansible_collections.npuops.fleet.plugins.module_utils.host import dpkg_lock
from ansible_collections.npuops.fleet.plugins.modules import npu_host_window

NOT_FOUND = "Failed to get unit file state for %s: No such file or directory\n"


class FakeHost:
    """systemd units {name: [enabled word, active word]} and dpkg packages {name: [want, status]}."""

    def __init__(self, units, packages):
        self.units = {k: list(v) for k, v in units.items()}
        self.packages = {k: list(v) for k, v in packages.items()}
        self.calls = []
        self.fail_start = {}
        self.dpkg_lock_failures = 0
        self.smi = None  # nvidia-smi: a callable(args) -> (rc, out, err)

    def run_command(self, argv, data=None, **_kw):
        self.calls.append((os.path.basename(argv[0]),) + tuple(argv[1:]))
        cmd = os.path.basename(argv[0])
        if cmd == "systemctl":
            verb, name = argv[1], argv[-1]
            u = self.units.get(name)
            if verb == "is-enabled":
                return (1, "", NOT_FOUND % name) if u is None else (0 if u[0] == "enabled" else 1, u[0] + "\n", "")
            if verb == "is-active":
                state = "inactive" if u is None else u[1]
                return (0 if state == "active" else 3), state + "\n", ""
            if u is None:
                return 5, "", "Failed to %s %s: Unit %s not found.\n" % (verb, name, name)
            if verb == "start":
                if name in self.fail_start:
                    return 1, "", self.fail_start[name]
                u[1] = "active"
            elif verb == "stop":
                u[1] = "inactive"
            elif verb == "enable":
                u[0] = "enabled"
            else:
                raise AssertionError(argv)
            return 0, "", ""
        if cmd == "nvidia-smi" and self.smi is not None:
            return self.smi(argv[1:])
        if cmd == "dpkg-query":
            assert argv[1:] == ["-W", "-f=${Package} ${Status}\n"]
            return 0, "".join("%s %s ok %s\n" % (n, w, s) for n, (w, s) in self.packages.items()), ""
        if cmd == "dpkg" and argv[1:] == ["--set-selections"]:
            if self.dpkg_lock_failures:
                self.dpkg_lock_failures -= 1
                return 2, "", "dpkg: error: dpkg frontend lock was locked by another process with pid 999\n"
            for line in data.splitlines():
                name, want = line.split()
                self.packages[name][0] = want
            return 0, "", ""
        raise AssertionError(argv)


def incident_host():
    return FakeHost(
        {
            "nvidia-persistenced": ["enabled", "active"],
            "nvidia-fabricmanager": ["enabled", "active"],
            "nvidia-dcgm": ["disabled", "inactive"],
            "apt-daily.timer": ["enabled", "active"],
            "apt-daily-upgrade.timer": ["enabled", "active"],
            "unattended-upgrades.service": ["enabled", "active"],
        },
        {
            "nvidia-dkms-535-server-open": ["hold", "installed"],
            "nvidia-utils-535-server": ["hold", "installed"],
            "linux-image-5.15.0-177-generic": ["hold", "installed"],
            "openssl": ["install", "installed"],
        },
    )


SERVICES = ["nvidia-persistenced", "nvidia-fabricmanager", "nvidia-dcgm", "dcgm"]


def run(monkeypatch, capsys, module, host, args, check=False):
    if host is not None:
        monkeypatch.setattr(AnsibleModule, "run_command", lambda self, argv, **kw: host.run_command(argv, **kw))
        monkeypatch.setattr(AnsibleModule, "get_bin_path", lambda self, name, required=False, **kw: "/usr/bin/" + name)
    if check:
        args = dict(args, _ansible_check_mode=True)
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            module.main()
    return json.loads(capsys.readouterr().out)


def window(monkeypatch, capsys, host, path, check=False, **args):
    return run(monkeypatch, capsys, npu_host_window, host, dict(args, path=str(path)), check)


def test_present_records_atomically_and_pauses_the_timers(monkeypatch, capsys, tmp_path):
    host, path = incident_host(), tmp_path / "npuops" / "window.json"
    r = window(monkeypatch, capsys, host, path, services=SERVICES, run_id="run-1")
    assert r["changed"] is True and r["resumed"] is False and r["previous_run_id"] is None
    rec = json.loads(path.read_text())
    assert rec == r["record"]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert rec["run_id"] == "run-1" and rec["created"].endswith("Z")
    assert rec["services"]["nvidia-persistenced"] == {
        "exists": True, "enabled": True, "enabled_state": "enabled", "active": True, "active_state": "active"}
    assert rec["services"]["nvidia-dcgm"]["enabled"] is False and rec["services"]["nvidia-dcgm"]["active"] is False
    assert rec["services"]["dcgm"]["exists"] is False
    assert rec["held_packages"] == [
        "linux-image-5.15.0-177-generic", "nvidia-dkms-535-server-open", "nvidia-utils-535-server"]
    assert set(rec["apt_units"]) == {"apt-daily.timer", "apt-daily-upgrade.timer", "unattended-upgrades.service"}
    assert rec["timers_stopped"] == r["timers_stopped"] == ["apt-daily.timer", "apt-daily-upgrade.timer"]
    # Stopped, not disabled or masked; unattended-upgrades itself untouched.
    changes = [c for c in host.calls if c[0] == "systemctl" and c[1] not in ("is-enabled", "is-active")]
    assert changes == [("systemctl", "stop", "apt-daily.timer"), ("systemctl", "stop", "apt-daily-upgrade.timer")]
    assert host.units["apt-daily.timer"] == ["enabled", "inactive"]
    assert host.units["unattended-upgrades.service"] == ["enabled", "active"]

    # Same run again: nothing to do.
    r2 = window(monkeypatch, capsys, host, path, services=SERVICES, run_id="run-1")
    assert r2["changed"] is False and r2["resumed"] is True and r2["timers_stopped"] == []


def test_present_after_a_killed_run_keeps_the_record(monkeypatch, capsys, tmp_path):
    host, path = incident_host(), tmp_path / "window.json"
    window(monkeypatch, capsys, host, path, services=SERVICES, run_id="run-1")
    before = path.read_bytes()
    # The killed run had stopped services and unheld packages; someone restarted a timer.
    host.units["nvidia-persistenced"][1] = "inactive"
    host.packages["nvidia-dkms-535-server-open"][0] = "install"
    host.units["apt-daily.timer"][1] = "active"
    r = window(monkeypatch, capsys, host, path, services=["rbln-daemon"], run_id="run-2")
    assert path.read_bytes() == before
    assert r["resumed"] is True and r["previous_run_id"] == "run-1" and r["record"]["run_id"] == "run-1"
    assert r["record"]["services"]["nvidia-persistenced"]["active"] is True
    assert "nvidia-dkms-535-server-open" in r["record"]["held_packages"]
    assert r["timers_stopped"] == ["apt-daily.timer"] and r["changed"] is True


def test_present_check_mode_touches_nothing(monkeypatch, capsys, tmp_path):
    host, path = incident_host(), tmp_path / "window.json"
    r = window(monkeypatch, capsys, host, path, check=True, services=SERVICES, run_id="run-1")
    assert r["changed"] is True and r["timers_stopped"] == ["apt-daily.timer", "apt-daily-upgrade.timer"]
    assert r["record"]["held_packages"] and not path.exists()
    assert all(c[1] in ("is-enabled", "is-active", "-W") for c in host.calls)


def simulate_window(host):
    """What the upgrade did: services stopped, one disabled, packages unheld, old driver replaced."""
    host.units["nvidia-persistenced"][1] = "inactive"
    host.units["nvidia-fabricmanager"] = ["disabled", "inactive"]
    host.units["nvidia-dcgm"][1] = "inactive"
    del host.packages["nvidia-dkms-535-server-open"]
    host.packages["nvidia-utils-535-server"] = ["install", "config-files"]
    host.packages["linux-image-5.15.0-177-generic"][0] = "install"
    host.packages["nvidia-dkms-550-server-open"] = ["install", "installed"]


def test_absent_restores_exactly_the_recorded_state(monkeypatch, capsys, tmp_path):
    host, path = incident_host(), tmp_path / "window.json"
    window(monkeypatch, capsys, host, path, services=SERVICES, run_id="run-1")
    simulate_window(host)
    host.calls.clear()
    monkeypatch.setattr(dpkg_lock, "DPKG_LOCKS", (str(tmp_path / "lock-frontend"), str(tmp_path / "lock")))
    r = window(monkeypatch, capsys, host, path, state="absent")
    assert r["changed"] is True and r["removed"] is True and not path.exists()
    assert r["restored"] == {
        "mig_reapplied": [],
        "services_enabled": ["nvidia-fabricmanager"],
        "services_started": ["nvidia-persistenced", "nvidia-fabricmanager"],
        "holds_reapplied": ["linux-image-5.15.0-177-generic"],
        "timers_started": ["apt-daily.timer", "apt-daily-upgrade.timer"],
        "failed": [],
        "services_left_alone": [],
    }
    assert host.units["nvidia-dcgm"] == ["disabled", "inactive"]  # was neither enabled nor active
    assert host.packages["linux-image-5.15.0-177-generic"][0] == "hold"
    assert host.packages["nvidia-dkms-550-server-open"][0] == "install"  # never taken or added
    changes = [c for c in host.calls if c[1] not in ("is-enabled", "is-active", "-W")]
    assert changes == [
        ("systemctl", "enable", "nvidia-fabricmanager"),
        ("systemctl", "start", "nvidia-persistenced"),
        ("systemctl", "start", "nvidia-fabricmanager"),
        ("dpkg", "--set-selections"),
        # timers last: no unattended-upgrade before the holds are back
        ("systemctl", "start", "apt-daily.timer"),
        ("systemctl", "start", "apt-daily-upgrade.timer"),
    ]

    # No record: nothing to do.
    r2 = window(monkeypatch, capsys, host, path, state="absent")
    assert r2["changed"] is False and r2["record"] is None and r2["removed"] is False


def test_absent_check_mode(monkeypatch, capsys, tmp_path):
    host, path = incident_host(), tmp_path / "window.json"
    window(monkeypatch, capsys, host, path, services=SERVICES)
    simulate_window(host)
    host.calls.clear()
    r = window(monkeypatch, capsys, host, path, check=True, state="absent")
    assert r["changed"] is True and path.exists()
    assert r["restored"]["services_started"] == ["nvidia-persistenced", "nvidia-fabricmanager"]
    assert r["restored"]["holds_reapplied"] == ["linux-image-5.15.0-177-generic"]
    assert all(c[1] in ("is-enabled", "is-active", "-W") for c in host.calls)


def test_absent_service_failure_reported_not_fatal_unless_strict(monkeypatch, capsys, tmp_path):
    host, path = incident_host(), tmp_path / "window.json"
    window(monkeypatch, capsys, host, path, services=SERVICES)
    simulate_window(host)
    msg = "Job for nvidia-fabricmanager.service failed because the control process exited with error code.\n"
    host.fail_start["nvidia-fabricmanager"] = msg
    monkeypatch.setattr(dpkg_lock, "DPKG_LOCKS", (str(tmp_path / "lock-frontend"),))

    r = window(monkeypatch, capsys, host, path, state="absent", strict=True)
    assert r["failed"] is True and path.exists() and r["removed"] is False
    assert "nvidia-fabricmanager" in r["msg"] and "control process exited" in r["msg"]
    # Everything else was put back all the same.
    assert r["restored"]["timers_started"] == ["apt-daily.timer", "apt-daily-upgrade.timer"]
    assert r["restored"]["services_started"] == ["nvidia-persistenced"]

    r = window(monkeypatch, capsys, host, path, state="absent")
    assert r.get("failed") is not True and not path.exists()
    assert r["restored"]["failed"] == [{
        "kind": "service", "name": "nvidia-fabricmanager",
        "msg": "systemctl start nvidia-fabricmanager: " + msg.strip()}]
    assert r["restored"]["timers_started"] == [] and r["restored"]["services_started"] == []


def test_absent_hold_waits_for_the_real_dpkg_lock_and_names_the_holder(monkeypatch, capsys, tmp_path):
    host, path = incident_host(), tmp_path / "window.json"
    window(monkeypatch, capsys, host, path, services=SERVICES)
    simulate_window(host)
    lock = tmp_path / "lock-frontend"
    monkeypatch.setattr(dpkg_lock, "DPKG_LOCKS", (str(lock),))
    code = "import fcntl,os,sys; fd=os.open(sys.argv[1], os.O_RDWR|os.O_CREAT); fcntl.lockf(fd, fcntl.LOCK_EX); " \
           "print('locked', flush=True); sys.stdin.read()"
    argv = [sys.executable, "-c", code, str(lock), "/usr/bin/unattended-upgrade"]
    holder = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        r = window(monkeypatch, capsys, host, path, state="absent", lock_timeout=0)
    finally:
        holder.stdin.close()
        holder.wait(10)
    assert r["failed"] is True and path.exists()  # holds not back: the record stays for the next run
    assert "pid %d (%s)" % (holder.pid, " ".join(argv)) in r["msg"]
    assert host.packages["linux-image-5.15.0-177-generic"][0] == "install"
    assert ("dpkg", "--set-selections") not in host.calls
    # No automatic upgrade before the holds are back: the timers stay stopped.
    assert r["restored"]["timers_started"] == [] and host.units["apt-daily.timer"][1] == "inactive"
    # The lock is free now: the rerun puts the holds back and removes the record.
    r = window(monkeypatch, capsys, host, path, state="absent", lock_timeout=0)
    assert r["restored"]["holds_reapplied"] == ["linux-image-5.15.0-177-generic"] and not path.exists()
    assert r["restored"]["timers_started"] == ["apt-daily.timer", "apt-daily-upgrade.timer"]


def test_absent_hold_retries_a_lost_lock_race(monkeypatch, capsys, tmp_path):
    host, path = incident_host(), tmp_path / "window.json"
    window(monkeypatch, capsys, host, path, services=SERVICES)
    simulate_window(host)
    host.dpkg_lock_failures = 1
    monkeypatch.setattr(dpkg_lock, "DPKG_LOCKS", (str(tmp_path / "lock-frontend"),))
    r = window(monkeypatch, capsys, host, path, state="absent", lock_timeout=5)
    assert r["restored"]["holds_reapplied"] == ["linux-image-5.15.0-177-generic"]
    assert host.calls.count(("dpkg", "--set-selections")) == 2


def test_corrupt_record_fails_without_touching_the_host(monkeypatch, capsys, tmp_path):
    host, path = incident_host(), tmp_path / "window.json"
    path.write_text("{trunc")
    r = window(monkeypatch, capsys, host, path, state="absent")
    assert r["failed"] is True and "window.json" in r["msg"] and host.calls == []


def test_a_mig_layout_not_made_again_keeps_the_record_even_when_not_strict(monkeypatch, capsys, tmp_path):
    """The record is the layout's only copy: a driver that finds no room fails the restore, strict or not."""
    host, path = incident_host(), tmp_path / "window.json"
    gis = ["|   0  MIG 3g.40gb          9        1          0:4     |",
           "|   0  MIG 3g.40gb          9        2          4:4     |"]

    def smi(args):
        if args[0].startswith("--query-gpu="):
            return 0, "0, 00000000:18:00.0, Enabled, Enabled\n", ""
        if args == ["mig", "-lgi"]:
            return (0, "\n".join(gis) + "\n", "") if gis else (6, "No GPU instances found: Not Found\n", "")
        if args == ["mig", "-lci"]:
            return 0, "".join("|   0      %d       MIG 3g.40gb          2         0          0:4     |\n" % i
                              for i in range(1, len(gis) + 1)), ""
        if "-cgi" in args:
            return 2, "Unable to create a GPU instance on GPU  0 using profile 9: Insufficient Resources\n", ""
        if "-dci" in args or "-dgi" in args:
            return 6, "No GPU instances found: Not Found\n", ""
        raise AssertionError(args)

    host.smi = smi
    r = window(monkeypatch, capsys, host, path, services=SERVICES, mig_smi="nvidia-smi")
    assert [len(g["instances"]) for g in r["record"]["mig"]["gpus"]] == [2]
    gis.clear()  # the module reload
    monkeypatch.setattr(dpkg_lock, "DPKG_LOCKS", (str(tmp_path / "lock-frontend"), str(tmp_path / "lock")))
    r = window(monkeypatch, capsys, host, path, state="absent", strict=False)
    assert r["failed"] is True and r["removed"] is False and path.exists()
    assert "Insufficient Resources" in r["msg"] and r["restored"]["failed"][0]["kind"] == "mig"
