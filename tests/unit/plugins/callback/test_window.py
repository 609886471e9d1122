"""Stdout callback npuops.fleet.window driven with fabricated task results; the printed lines are
compared literally (times: T = 1800000000 = 2027-01-15T08:00:00Z)."""

from __future__ import annotations

import importlib

import pytest
from ansible import context
from ansible.module_utils import _internal as module_utils_internal

from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm

T = 1800000000.0
NODE_UPGRADE = "npuops.fleet.npu_node_upgrade"


class Host:
    def __init__(self, name):
        self.name = name

    def get_name(self):
        return self.name


class Task:
    def __init__(self, name, action="ansible.builtin.set_fact", args=None, check_mode=False):
        self.name = name
        self.action = action
        self.args = args or {}
        self.check_mode = check_mode
        self._uuid = "uuid-" + name

    def get_name(self):
        return self.name


class Result:
    def __init__(self, host, task, result):
        self.host = self._host = Host(host)
        self.task = self._task = task
        self.result = self._result = result


class Stats:
    def __init__(self, per_host):
        self.processed = dict.fromkeys(per_host, 1)
        self._per_host = per_host

    def summarize(self, host):
        return self._per_host[host]


class Play:
    def __init__(self, name):
        self.name = name

    def get_name(self):
        return self.name


@pytest.fixture(scope="module")
def window():
    """The plugin, imported here and not at the top: importing Ansible's controller code (a callback
    plugin's base, ansible._internal) switches module_utils to controller mode for the whole process -
    module warnings then go to the controller's Display instead of the module's result - and pytest
    imports every test file before it runs any. The switch is undone after this file's tests, so the
    module tests that run later in the same process see the target side as Ansible runs them."""
    saved = (
        module_utils_internal.is_controller,
        module_utils_internal.get_controller_serialize_map,
        module_utils_internal.import_controller_module,
    )
    try:
        yield importlib.import_module("ansible_collections.npuops.fleet.plugins.callback.window")
    finally:
        (
            module_utils_internal.is_controller,
            module_utils_internal.get_controller_serialize_map,
            module_utils_internal.import_controller_module,
        ) = saved


@pytest.fixture
def cb(monkeypatch, window):
    monkeypatch.setattr(context, "CLIARGS", {})
    plugin = window.CallbackModule()
    lines = []
    monkeypatch.setattr(plugin._display, "display", lambda msg, **kw: lines.append(msg))
    monkeypatch.setattr(plugin._display, "verbosity", 0)
    clock = [T]
    plugin._clock = lambda: clock[0]
    plugin.v2_playbook_on_start(object())
    return plugin, lines, clock


def facts(cb, host, at=None, task="set_fact", **values):
    plugin, _lines, clock = cb
    if at is not None:
        clock[0] = T + at
    plugin.v2_runner_on_ok(Result(host, Task(task), {"ansible_facts": values, "changed": False}))


def phase(cb, host, name, at, status="running"):
    facts(
        cb,
        host,
        at=at,
        _driver_upgrade_phase=name,
        _driver_upgrade_phase_start=T + at,
        _driver_upgrade_result={"host": host, "status": status},
    )


def status(cb, host, value, finished, at=None, reason=None):
    facts(
        cb,
        host,
        at=at,
        _driver_upgrade_result={"host": host, "status": value, "finished": finished, "reason": reason},
    )


def next_task(cb, at, name="next"):
    plugin, _lines, clock = cb
    clock[0] = T + at
    plugin.v2_playbook_on_task_start(Task(name), False)


def module(cb, host, phase_arg, transitions, at, check_mode=False, failed=False):
    plugin, _lines, clock = cb
    clock[0] = T + at
    res = {"changed": True, "transitions": transitions, "state": transitions[-1]["to"] if transitions else None}
    task = Task("npu_node_upgrade " + phase_arg, NODE_UPGRADE, {"phase": phase_arg}, check_mode)
    if failed:
        plugin.v2_runner_on_failed(Result(host, task, dict(res, failed=True, msg="failed")))
    else:
        plugin.v2_runner_on_ok(Result(host, task, res))


def tr(frm, to, time):
    return {"from": frm, "to": to, "reason": "r", "time": time}


def preflight(cb):
    """n1 and n2 pass the fleet preflight, a1 is at the target; the width is 1."""
    phase(cb, "n1", "preflight", 1)
    phase(cb, "n2", "preflight", 1)
    status(cb, "a1", "already-at-target", "2027-01-15T08:00:02Z", at=2)
    next_task(cb, 3)
    status(cb, "n1", "preflight-ok", "2027-01-15T08:00:20Z", at=20)
    status(cb, "n2", "preflight-ok", "2027-01-15T08:00:20Z", at=20)
    facts(cb, "n1", at=20, _mw_targets=["a1", "n1", "n2"], _mw_lanes=["n1", "n2"], _mw_parallel=1, _mw_plan=False)
    next_task(cb, 21)


def test_one_host_through_the_window_with_fleet_lines_and_eta(cb):
    _plugin, lines, _clock = cb
    preflight(cb)
    assert lines == [
        "n1  - -> preflight",
        "n2  - -> preflight",
        "a1  - -> already-at-target",
        "done 0 / in flight 0 / waiting 0 / failed 0 / at target 1 / in preflight 2 - elapsed 3s",
        "n1  preflight -> preflight-ok  (19.0 s)",
        "n2  preflight -> preflight-ok  (19.0 s)",
        "done 0 / in flight 0 / waiting 2 / failed 0 / at target 1 - elapsed 21s, about ? left",
    ]
    del lines[:]

    # rolling, width 1: both lanes enter prepare; the one that started later waits for the slot
    phase(cb, "n1", "prepare", 30)
    phase(cb, "n2", "prepare", 31)
    next_task(cb, 32)
    module(
        cb,
        "n1",
        "prepare",
        [
            tr("", sm.UPGRADE_REQUIRED, "2027-01-15T08:00:33Z"),
            tr(sm.UPGRADE_REQUIRED, sm.CORDON_REQUIRED, "2027-01-15T08:00:33Z"),
            tr(sm.CORDON_REQUIRED, sm.DRAIN_REQUIRED, "2027-01-15T08:00:34Z"),
            tr(sm.DRAIN_REQUIRED, sm.POD_RESTART_REQUIRED, "2027-01-15T08:00:46Z"),
        ],
        at=46,
    )
    phase(cb, "n1", "install", 46.5)
    next_task(cb, 47)
    phase(cb, "n1", "reload", 58.5)
    phase(cb, "n1", "verify", 68)
    phase(cb, "n1", "finish", 72)
    module(
        cb,
        "n1",
        "finish",
        [
            tr(sm.POD_RESTART_REQUIRED, sm.VALIDATION_REQUIRED, "2027-01-15T08:01:13Z"),
            tr(sm.VALIDATION_REQUIRED, sm.UNCORDON_REQUIRED, "2027-01-15T08:01:14Z"),
            tr(sm.UNCORDON_REQUIRED, sm.UPGRADE_DONE, "2027-01-15T08:01:15Z"),
        ],
        at=75,
    )
    phase(cb, "n1", "done", 75.5)
    status(cb, "n1", "upgraded", "2027-01-15T08:01:16Z", at=76)
    next_task(cb, 80)
    assert lines == [
        "n1  preflight-ok -> prepare  (10.0 s)",
        "n2  preflight-ok -> prepare  (11.0 s)",
        "done 0 / in flight 1 / waiting 1 / failed 0 / at target 1 - elapsed 32s, about ? left",
        "n1  prepare -> upgrade-required  (3.0 s)",
        "n1  upgrade-required -> cordon-required  (0.0 s)",
        "n1  cordon-required -> drain-required  (1.0 s)",
        "n1  drain-required -> pod-restart-required  (12.0 s)",
        "n1  pod-restart-required -> install  (0.5 s)",
        "done 0 / in flight 1 / waiting 1 / failed 0 / at target 1 - elapsed 47s, about ? left",
        "n1  install -> reload  (12.0 s)",
        "n1  reload -> verify  (9.5 s)",
        "n1  verify -> finish  (4.0 s)",
        "n1  finish -> validation-required  (1.0 s)",
        "n1  validation-required -> uncordon-required  (1.0 s)",
        "n1  uncordon-required -> upgrade-done  (1.0 s)",
        "n1  upgrade-done -> upgraded  (1.0 s)",
        # n1 took 43 s from admission (08:00:33) to the end (08:01:16): 43 s x 1 host left / width 1
        "done 1 / in flight 1 / waiting 0 / failed 0 / at target 1 - elapsed 1m, about 43s left",
    ]


def test_a_failure_prints_the_task_message_the_reason_and_counts_failed(cb):
    plugin, lines, clock = cb
    preflight(cb)
    del lines[:]
    phase(cb, "n2", "prepare", 30)
    module(cb, "n2", "prepare", [tr("", sm.UPGRADE_REQUIRED, "2027-01-15T08:00:33Z")], at=34)
    phase(cb, "n2", "install", 34)
    clock[0] = T + 39
    task = Task("Install the target driver packages", "npuops.fleet.npu_apt_install")
    plugin.v2_runner_on_failed(
        Result("n2", task, {"failed": True, "msg": "apt: E: Version '550.90.07' for 'nvidia-driver' was not found"})
    )
    status(
        cb,
        "n2",
        "failed",
        "2027-01-15T08:00:39Z",
        at=39,
        reason="apt: E: Version '550.90.07' for 'nvidia-driver' was not found",
    )
    module(cb, "n2", "fail", [tr(sm.POD_RESTART_REQUIRED, sm.UPGRADE_FAILED, "2027-01-15T08:00:40Z")], at=40)
    next_task(cb, 90)
    assert lines == [
        "n2  preflight-ok -> prepare  (10.0 s)",
        "n2  prepare -> upgrade-required  (3.0 s)",
        "n2  upgrade-required -> install  (1.0 s)",
        "FAILED  n2  task \"Install the target driver packages\": apt: E: Version '550.90.07' for 'nvidia-driver' "
        "was not found",
        "n2  install -> failed  (5.0 s)",
        "n2  reason: apt: E: Version '550.90.07' for 'nvidia-driver' was not found",
        "n2  failed -> upgrade-failed  (1.0 s)",
        "done 0 / in flight 0 / waiting 1 / failed 1 / at target 1 - elapsed 1m, about ? left",
    ]


def test_unreachable_and_ignored_failures_and_loop_items_are_printed_in_full(cb):
    plugin, lines, _clock = cb
    ping = Task("Check the host at the start of the next phase", "ansible.builtin.wait_for_connection")
    plugin.v2_runner_on_unreachable(
        Result("n3", ping, {"unreachable": True, "msg": "Failed to connect to the host via ssh: timed out"})
    )
    lease = Task("Take the maintenance lease (refuses while another run holds it)", NODE_UPGRADE)
    plugin.v2_runner_on_failed(
        Result("localhost", lease, {"failed": True, "msg": "lease held by ctl/run-1 <since 08:00>"}),
        ignore_errors=True,
    )
    loop = Task("Record the failure beside the stop file", "ansible.builtin.copy")
    plugin.v2_runner_item_on_failed(
        Result("n1", loop, {"failed": True, "msg": "Permission denied", "_ansible_item_label": "a"})
    )
    plugin.v2_runner_on_failed(Result("n1", loop, {"failed": True, "msg": "One or more items failed"}))
    assert lines == [
        'UNREACHABLE  n3  task "Check the host at the start of the next phase": '
        "Failed to connect to the host via ssh: timed out",
        'FAILED (ignored)  localhost  task "Take the maintenance lease (refuses while another run holds it)": '
        "lease held by ctl/run-1 <since 08:00>",
        'FAILED  n1  task "Record the failure beside the stop file (item a)": Permission denied',
    ]


def test_check_mode_previews_are_no_state_changes_and_the_plan_has_no_eta(cb, monkeypatch):
    plugin, lines, clock = cb
    monkeypatch.setattr(context, "CLIARGS", {"check": True})
    plugin.v2_playbook_on_play_start(Play("Maintenance window - fleet preflight (no change anywhere)"))
    phase(cb, "n1", "preflight", 1)
    module(cb, "n1", "prepare", [tr("", sm.UPGRADE_REQUIRED, "2027-01-15T08:00:02Z")], at=2, check_mode=True)
    status(cb, "n1", "preflight-ok", "2027-01-15T08:00:20Z", at=20)
    facts(cb, "localhost", at=20, _mw_plan=True, _mw_targets=["n1"], _mw_parallel=1)
    plugin.v2_runner_on_ok(
        Result(
            "localhost", Task("Print the plan", "ansible.builtin.debug"), {"msg": ["# Maintenance window plan", "- x"]}
        )
    )
    next_task(cb, 125)
    assert lines == [
        "PLAY [Maintenance window - fleet preflight (no change anywhere)] (check mode)",
        "n1  - -> preflight",
        "n1  preflight -> preflight-ok  (19.0 s)",
        "# Maintenance window plan",
        "- x",
        "done 0 / in flight 0 / waiting 1 / failed 0 / at target 0 - elapsed 2m; plan mode, nothing is changed",
    ]


def test_the_summary_names_hosts_that_never_started(cb):
    _plugin, lines, _clock = cb
    preflight(cb)
    del lines[:]
    summary = {
        "hosts": [
            {"host": "a1", "status": "already-at-target", "reason": None, "finished": "2027-01-15T08:00:02Z"},
            {"host": "n1", "status": "not-started", "reason": "not started: failure on n9", "finished": None},
            {"host": "n2", "status": "not-started", "reason": "not started: failure on n9", "finished": None},
        ]
    }
    facts(cb, "localhost", at=95, _mw_summary=summary)
    next_task(cb, 95)
    assert lines == [
        "n1  preflight-ok -> not-started  (75.0 s)",
        "n1  reason: not started: failure on n9",
        "n2  preflight-ok -> not-started  (75.0 s)",
        "n2  reason: not started: failure on n9",
        "done 0 / in flight 0 / waiting 0 / failed 0 / at target 1 / not started 2 - elapsed 1m",
    ]


def test_recap_and_a_last_fleet_line_at_the_end(cb):
    plugin, lines, clock = cb
    status(cb, "a1", "already-at-target", "2027-01-15T08:00:02Z", at=2)
    clock[0] = T + 3725
    plugin.v2_playbook_on_stats(
        Stats(
            {
                "localhost": {
                    "ok": 30,
                    "changed": 2,
                    "unreachable": 0,
                    "failures": 0,
                    "skipped": 4,
                    "rescued": 0,
                    "ignored": 1,
                },
                "a1": {
                    "ok": 7,
                    "changed": 0,
                    "unreachable": 0,
                    "failures": 0,
                    "skipped": 3,
                    "rescued": 0,
                    "ignored": 0,
                },
            }
        )
    )
    assert lines == [
        "a1  - -> already-at-target",
        "done 0 / in flight 0 / waiting 0 / failed 0 / at target 1 - elapsed 1h02m",
        "PLAY RECAP",
        "a1        : ok=7 changed=0 unreachable=0 failed=0 skipped=3 rescued=0 ignored=0",
        "localhost : ok=30 changed=2 unreachable=0 failed=0 skipped=4 rescued=0 ignored=1",
    ]


def test_task_names_only_with_v(cb, monkeypatch):
    plugin, lines, _clock = cb
    plugin.v2_playbook_on_task_start(Task("Preflight this host"), False)
    monkeypatch.setattr(plugin._display, "verbosity", 1)
    plugin.v2_playbook_on_task_start(Task("Keep the preflight result"), False)
    plugin.v2_playbook_on_task_start(Task("Keep the preflight result"), False)  # free strategy: once per host
    assert lines == ["TASK [Keep the preflight result]"]


def test_hooks_never_raise(cb):
    plugin, lines, _clock = cb

    class Broken:
        @property
        def result(self):
            raise RuntimeError("no result")

    plugin.v2_runner_on_ok(Broken())
    plugin.v2_runner_on_failed(Broken())
    plugin.v2_runner_on_unreachable(Broken())
    plugin.v2_playbook_on_stats(object())
    plugin.v2_playbook_on_play_start(None)
    plugin.v2_runner_on_ok(Result("n1", Task("odd"), {"ansible_facts": {"_driver_upgrade_result": "not a dict"}}))
    plugin.v2_runner_on_ok(Result("n1", Task("odd", NODE_UPGRADE), {"transitions": ["x", {"to": None}]}))
    assert lines == ["PLAY []"]


def test_debug_output_can_be_turned_off(cb):
    plugin, lines, _clock = cb
    show = Result("localhost", Task("Print the summary", "ansible.builtin.debug"), {"msg": "# Maintenance window r1"})
    plugin.v2_runner_on_ok(show)
    plugin._plugin_options = {"show_debug": False}
    plugin.v2_runner_on_ok(show)
    assert lines == ["# Maintenance window r1"]


def test_module_warnings_are_printed_at_default_verbosity(cb):
    plugin, lines, _clock = cb
    res = {"changed": False, "warnings": ["dry-run evictions not possible: 503"]}
    plugin.v2_runner_on_ok(Result("n1", Task("Preflight the node"), res))
    assert "n1  warning: dry-run evictions not possible: 503" in lines


def test_the_estimate_counts_what_a_host_in_flight_already_spent(cb):
    _plugin, lines, _clock = cb
    preflight(cb)
    # n1: admitted 08:00:30, upgraded 08:01:10 - 40 s
    phase(cb, "n1", "prepare", 29)
    module(cb, "n1", "prepare", [tr("", sm.UPGRADE_REQUIRED, "2027-01-15T08:00:30Z")], at=30)
    phase(cb, "n1", "done", 70)
    status(cb, "n1", "upgraded", "2027-01-15T08:01:10Z", at=70)
    # n2: admitted 08:01:15; at 08:01:45 it has spent 30 of the 40 s a host takes here
    phase(cb, "n2", "prepare", 71)
    module(cb, "n2", "prepare", [tr("", sm.UPGRADE_REQUIRED, "2027-01-15T08:01:15Z")], at=75)
    del lines[:]
    next_task(cb, 105)
    assert lines[-1] == "done 1 / in flight 1 / waiting 0 / failed 0 / at target 1 - elapsed 1m, about 10s left"
