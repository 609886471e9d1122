# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""The host's pre-window state: recorded on the host before a maintenance window, restored after it.

The record is a JSON file on the host (written atomically, mode 0600) so that it survives a control
node killed mid-window: the next run finds it, keeps it (it still holds the state from before the
first, interrupted run) and restores from it on its way out.

Pure parts: the ``systemctl is-enabled`` / ``is-active`` and ``dpkg-query`` parsers, :func:`new_record`,
:func:`restore_plan`. :class:`HostWindow` runs the commands through one ``run(argv, data=None) ->
(rc, stdout, stderr)`` callable (the module's ``run_command``), the only boundary tests replace.
"""

from __future__ import annotations

import datetime
import json
import os
import time
from typing import Any, Callable, Iterable, Mapping, Optional

from ansible_collections.npuops.fleet.plugins.module_utils.errors import FleetError
from ansible_collections.npuops.fleet.plugins.module_utils.host import atomic_file, dpkg_lock, mig

RECORD_VERSION = 1
DEFAULT_PATH = "/var/lib/npuops-fleet/window.json"
# Stopped for the window (they start apt-daily / apt-daily-upgrade, i.e. unattended-upgrade); a run
# already going on is left alone: the dpkg lock wait covers it.
PAUSE_TIMERS = ("apt-daily.timer", "apt-daily-upgrade.timer")
# Recorded for the report; the window does not change it.
UU_SERVICE = "unattended-upgrades.service"
APT_UNITS = PAUSE_TIMERS + (UU_SERVICE,)

# `systemctl is-enabled` words that mean "starts at boot / on its trigger because it was enabled".
ENABLED_WORDS = ("enabled", "enabled-runtime")
# `systemctl is-active` words of a unit that runs (or is on its way up).
ACTIVE_WORDS = ("active", "reloading", "activating", "refreshing")

Runner = Callable[..., "tuple[int, str, str]"]


def parse_is_enabled(rc: int, out: str, err: str) -> dict[str, Any]:
    """``systemctl is-enabled <unit>`` -> ``{"exists", "enabled", "enabled_state"}``.

    A unit that does not exist is ``Failed to get unit file state for x.service: No such file or
    directory`` on stderr, rc 1 (systemd 252), or ``not-found`` on stdout, rc 4 (newer systemd).
    """
    word = (out or "").strip().splitlines()[0].strip() if (out or "").strip() else None
    missing = word == "not-found" or (
        word is None and ("No such file or directory" in (err or "") or "not found" in (err or "").lower())
    )
    if missing:
        return {"exists": False, "enabled": False, "enabled_state": "not-found"}
    return {"exists": word is not None, "enabled": word in ENABLED_WORDS, "enabled_state": word}


def parse_is_active(rc: int, out: str, err: str) -> dict[str, Any]:
    """``systemctl is-active <unit>`` -> ``{"active", "active_state"}``; state None when systemctl gave no
    answer (no systemd running, no bus), which is not taken for "active"."""
    word = (out or "").strip().splitlines()[0].strip() if (out or "").strip() else None
    return {"active": word in ACTIVE_WORDS, "active_state": word}


def parse_dpkg_status(text: str) -> dict[str, dict[str, Any]]:
    """``dpkg-query -W -f='${Package} ${Status}\\n'`` -> {package: {"want", "status", "held", "installed"}}.

    ``${Status}`` is ``<want> <error flag> <status>``, e.g. ``hold ok installed``. ``installed``: the
    package's files are on the system (not ``not-installed`` nor ``config-files``). An architecture
    suffix is dropped; of a multi-arch package listed twice, held or installed in one line counts.
    """
    res: dict[str, dict[str, Any]] = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        name, want, status = parts[0].split(":", 1)[0], parts[1], parts[-1]
        held = want == "hold"
        installed = status not in ("not-installed", "config-files")
        cur = res.get(name)
        if cur:
            cur["held"] = cur["held"] or held
            cur["installed"] = cur["installed"] or installed
        else:
            res[name] = {"want": want, "status": status, "held": held, "installed": installed}
    return res


def held_packages(status: Mapping[str, Mapping[str, Any]]) -> list[str]:
    return sorted(n for n, s in status.items() if s["held"])


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def new_record(
    run_id: Optional[str],
    created: str,
    services: Mapping[str, Mapping[str, Any]],
    apt_units: Mapping[str, Mapping[str, Any]],
    held: Iterable[str],
    mig_layout: Optional[Mapping[str, Any]] = None,
) -> dict[str, Any]:
    """The record written before the window. ``timers_stopped``: the apt timers this window stops
    (those active now), written before they are stopped so that a kill in between loses nothing.
    ``mig``: the MIG layout (host/mig.py) with the ``smi`` that read it, while a GPU runs in MIG mode;
    else None."""
    return {
        "version": RECORD_VERSION,
        "run_id": run_id,
        "created": created,
        "services": {k: dict(v) for k, v in services.items()},
        "apt_units": {k: dict(v) for k, v in apt_units.items()},
        "held_packages": sorted(set(held)),
        "timers_stopped": [t for t in PAUSE_TIMERS if (apt_units.get(t) or {}).get("active")],
        "mig": dict(mig_layout) if mig_layout is not None and mig.enabled(mig_layout) else None,
    }


def restore_plan(
    record: Mapping[str, Any],
    services_now: Mapping[str, Mapping[str, Any]],
    timers_now: Mapping[str, Mapping[str, Any]],
    dpkg_now: Mapping[str, Mapping[str, Any]],
) -> dict[str, list[str]]:
    """What restoring ``record`` changes, given the state now.

    ``enable``: recorded enabled, not enabled now; ``start``: recorded active, not active now;
    ``hold``: recorded held, installed now and not held; ``start_timers``: apt timers recorded active and
    not active now. A unit recorded as missing is left alone; so is one that is gone now (its package
    removed) or masked now - a person's later decision, not this window's doing - listed in
    ``left_alone`` as ``"<unit> (<state now>)"``.
    """
    enable, start, start_timers, left_alone = [], [], [], []
    for name, was in (record.get("services") or {}).items():
        now = services_now.get(name) or {}
        if not was.get("exists"):
            continue
        if now and (not now.get("exists", True) or now.get("enabled_state") in ("masked", "masked-runtime")):
            if was.get("enabled") or was.get("active"):
                left_alone.append("%s (%s now)" % (name, now.get("enabled_state") or "not-found"))
            continue
        if was.get("enabled") and not now.get("enabled"):
            enable.append(name)
        if was.get("active") and not now.get("active"):
            start.append(name)
    for name in PAUSE_TIMERS:
        was = (record.get("apt_units") or {}).get(name) or {}
        if was.get("active") and not (timers_now.get(name) or {}).get("active"):
            start_timers.append(name)
    hold = [
        p for p in record.get("held_packages") or []
        if (dpkg_now.get(p) or {}).get("installed") and not dpkg_now[p]["held"]
    ]
    return {"enable": enable, "start": start, "hold": hold, "start_timers": start_timers, "left_alone": left_alone}


# ---- record file ----------------------------------------------------------------------------


class RecordError(FleetError):
    pass


def read_record(path: str) -> Optional[dict[str, Any]]:
    """The record at ``path``; None when there is none; :class:`RecordError` when it is not a record."""
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise RecordError("window record %s cannot be read: %s" % (path, e)) from e
    if not isinstance(data, dict) or "services" not in data or "held_packages" not in data:
        raise RecordError("window record %s is not a record of this module" % path)
    return data


def write_record(path: str, record: Mapping[str, Any]) -> None:
    """Write ``record`` atomically and durably, mode 0600 (its folder made 0700 when missing). A
    reader sees the old file or the whole new one, never a part."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), mode=0o700, exist_ok=True)
    # key order kept: services restore in the order given
    atomic_file.write_atomically(path, json.dumps(record, indent=2) + "\n", mode=0o600, durable=True)


def remove_record(path: str) -> None:
    os.unlink(path)
    atomic_file.fsync_dir(os.path.dirname(os.path.abspath(path)))


# ---- host side ------------------------------------------------------------------------------


def _message(*texts: str) -> str:
    """The first non-empty text, on one line (systemctl and dpkg say why on stderr)."""
    for t in texts:
        if (t or "").strip():
            return " ".join(t.split())[:500]
    return ""


class HostWindow:
    """Record and restore through ``run`` (argv list, optional stdin ``data``) -> (rc, out, err).

    ``wait_locks(paths, timeout)``: default :func:`dpkg_lock.wait_for_locks`, polling every second.
    """

    def __init__(
        self,
        run: Runner,
        systemctl: str = "systemctl",
        dpkg: str = "dpkg",
        dpkg_query: str = "dpkg-query",
        wait_locks: Optional[Callable[..., dict[str, Any]]] = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        mig_smi: Optional[str] = None,
    ):
        self.run = run
        self.mig_smi = mig_smi
        self.systemctl, self.dpkg, self.dpkg_query = systemctl, dpkg, dpkg_query
        self.wait_locks = wait_locks or (lambda paths, timeout: dpkg_lock.wait_for_locks(paths, timeout, poll=1.0))
        self.clock, self.sleep = clock, sleep

    # reading
    def unit_state(self, name: str) -> dict[str, Any]:
        res = parse_is_enabled(*self.run([self.systemctl, "is-enabled", name]))
        res.update(parse_is_active(*self.run([self.systemctl, "is-active", name])))
        return res

    def dpkg_status(self) -> dict[str, dict[str, Any]]:
        rc, out, err = self.run([self.dpkg_query, "-W", "-f=${Package} ${Status}\n"])
        if rc != 0:
            raise RecordError("dpkg-query failed (rc %s): %s" % (rc, _message(err, out)))
        return parse_dpkg_status(out)

    def mig_layout(self) -> Optional[dict[str, Any]]:
        """The MIG layout now (with ``smi``), when ``mig_smi`` is set. A driver that does not answer (none
        loaded, or a userspace that does not match it) runs no usable MIG device: nothing is recorded then.
        Any other failure to read it is a :class:`RecordError`: the host work must not start blind."""
        if not self.mig_smi:
            return None
        try:
            return dict(mig.MigTool(self.run, self.mig_smi).read(), smi=self.mig_smi)
        except mig.MigError as e:
            if not e.driver_answered:
                return None
            raise RecordError("the MIG layout cannot be read before the host work: %s" % e) from e

    def snapshot(self, run_id: Optional[str], services: Iterable[str], created: Optional[str] = None):
        services = list(dict.fromkeys(services))
        return new_record(
            run_id,
            created or utc_now(),
            {s: self.unit_state(s) for s in services},
            {u: self.unit_state(u) for u in APT_UNITS},
            held_packages(self.dpkg_status()),
            self.mig_layout(),
        )

    # changing
    def systemctl_do(self, verb: str, name: str, runtime: bool = False) -> Optional[str]:
        """None on success, else systemctl's message."""
        argv = [self.systemctl, verb] + (["--runtime"] if runtime else []) + [name]
        rc, out, err = self.run(argv)
        if rc == 0:
            return None
        return "systemctl %s %s: %s" % (verb, name, _message(err, out) or "exit %s" % rc)

    def stop_timers(self, timers: Iterable[str], check_mode: bool) -> tuple[list[str], list[str]]:
        """Stop the given timers that are active now; (stopped, errors)."""
        stopped, errors = [], []
        for t in timers:
            if not self.unit_state(t)["active"]:
                continue
            if check_mode:
                stopped.append(t)
                continue
            msg = self.systemctl_do("stop", t)
            if msg:
                errors.append(msg)
            else:
                stopped.append(t)
        return stopped, errors

    def hold(self, packages: list[str], lock_timeout: float) -> Optional[str]:
        """Hold ``packages`` with ``dpkg --set-selections`` once dpkg's locks are free (at most
        ``lock_timeout`` seconds, also across a lost race with another dpkg); None or the error."""
        deadline = self.clock() + lock_timeout
        data = "".join("%s hold\n" % p for p in packages)
        while True:
            remaining = max(0.0, deadline - self.clock())
            w = self.wait_locks(dpkg_lock.DPKG_LOCKS, remaining)
            if not w["free"]:
                return dpkg_lock.timeout_message(w["holders"], w["waited"], lock_timeout)
            rc, out, err = self.run([self.dpkg, "--set-selections"], data=data)
            if rc == 0:
                return None
            if dpkg_lock.parse_lock_message(err + "\n" + out) is None or self.clock() >= deadline:
                return "dpkg --set-selections (rc %s): %s" % (rc, _message(err, out))
            self.sleep(min(1.0, max(0.0, deadline - self.clock())))

    @staticmethod
    def empty_restored() -> dict[str, Any]:
        keys = ("mig_reapplied", "services_enabled", "services_started", "holds_reapplied", "timers_started",
                "failed", "services_left_alone")
        return {k: [] for k in keys}

    def restore_mig(self, recorded: Optional[Mapping[str, Any]], check_mode: bool, res: dict[str, Any]) -> None:
        """Make the recorded MIG layout again where the reload or reboot removed it (each GPU back in MIG
        mode with no GPU instance), then check that every MIG GPU has the recorded devices. Fills
        ``res["mig_reapplied"]`` (``"GPU <index> (<bus id>): <names>"``) and ``res["failed"]`` (kind ``mig``)."""
        if not mig.enabled(recorded):
            return
        tool = mig.MigTool(self.run, (recorded or {}).get("smi") or "nvidia-smi")
        try:
            now = tool.read()
            plan = mig.create_plan(recorded, now)
            done = ["GPU %s (%s): %s" % (p["index"], p["pci_bus_id"], ", ".join(p["names"])) for p in plan]
            if check_mode:
                res["mig_reapplied"] = done
                return
            for step in plan:
                tool.create(step)
            problems = mig.compare(recorded, tool.read() if plan else now)
        except mig.MigError as e:
            res["failed"].append({"kind": "mig", "name": "MIG layout", "msg": str(e)})
            return
        res["mig_reapplied"] = done
        if problems:
            res["failed"].append({"kind": "mig", "name": "MIG layout",
                                  "msg": "MIG layout not as before the window: " + "; ".join(problems)})

    def restore(self, record: Mapping[str, Any], lock_timeout: float, check_mode: bool) -> dict[str, Any]:
        """Bring the host back to ``record``. Order: the MIG layout (before the services, which may list
        MIG devices when they start), services (enable, start), package holds, then the apt timers last,
        so that no unattended-upgrade can start before the holds are back; when the holds could not be
        put back the timers stay stopped (the record is kept and the next run retries)."""
        res_mig = self.empty_restored()
        self.restore_mig(record.get("mig"), check_mode, res_mig)
        services_now = {s: self.unit_state(s) for s in (record.get("services") or {})}
        timers_now = {t: self.unit_state(t) for t in PAUSE_TIMERS}
        dpkg_now = self.dpkg_status() if record.get("held_packages") else {}
        plan = restore_plan(record, services_now, timers_now, dpkg_now)
        res = self.empty_restored()
        res["mig_reapplied"], res["failed"] = res_mig["mig_reapplied"], res_mig["failed"]
        res["services_left_alone"] = plan["left_alone"]
        if check_mode:
            res.update(
                services_enabled=plan["enable"], services_started=plan["start"],
                holds_reapplied=plan["hold"], timers_started=plan["start_timers"],
            )
            return res
        for name in plan["enable"]:
            runtime = record["services"][name].get("enabled_state") == "enabled-runtime"
            msg = self.systemctl_do("enable", name, runtime=runtime)
            self._note(res, "services_enabled", "service", name, msg)
        for name in plan["start"]:
            self._note(res, "services_started", "service", name, self.systemctl_do("start", name))
        if plan["hold"]:
            msg = self.hold(plan["hold"], lock_timeout)
            if msg is None:
                after = self.dpkg_status()
                missing = [p for p in plan["hold"] if not (after.get(p) or {}).get("held")]
                res["holds_reapplied"] = [p for p in plan["hold"] if p not in missing]
                if missing:
                    msg = "still not held after dpkg --set-selections: %s" % ", ".join(missing)
            if msg:
                res["failed"].append({"kind": "holds", "name": ", ".join(plan["hold"]), "msg": msg})
                return res
        for name in plan["start_timers"]:
            self._note(res, "timers_started", "timer", name, self.systemctl_do("start", name))
        return res

    @staticmethod
    def _note(res: dict[str, Any], key: str, kind: str, name: str, msg: Optional[str]) -> None:
        if msg:
            res["failed"].append({"kind": kind, "name": name, "msg": msg})
        else:
            res[key].append(name)
