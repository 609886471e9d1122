# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# ruff: noqa: E402  (Ansible plugins import after DOCUMENTATION)
"""Stdout callback ``npuops.fleet.window``: the maintenance window as host state changes, not task lines.

Where the states come from (nothing is asked of the cluster; only task results are read):

* role ``driver_upgrade``'s facts (``result['ansible_facts']`` of its set_fact and npu_phase tasks): the phase
  ``_driver_upgrade_phase`` (preflight, prepare, install, reload, reboot, verify, finish, done) with the
  boundary's time ``_driver_upgrade_phase_start`` (``_phase_done.yml``), and ``_driver_upgrade_result``
  whose ``status`` is preflight-ok, upgraded, already-at-target, skipped, failed or not-started at the
  end (running meanwhile) with its ``reason``;
* ``npuops.fleet.npu_node_upgrade`` results (not check mode: the preflight's previews are not state
  changes): ``transitions``, each ``{from, to, reason, time}``, the node's upgrade-state label moves;
* the window's own facts: ``_mw_targets``, ``_mw_lanes``, ``_mw_parallel`` (the width, 0 = all at once),
  ``_mw_plan`` and at the end ``_mw_summary`` (every host's final status, also the hosts that never
  started).

Waiting: admission (``module_utils/upgrade/admission.py``) happens inside npu_node_upgrade's prepare call,
together with cordon and drain, so a host in phase prepare without a transition yet is either waiting
for an admission slot or already draining. The run admits at most the width at a time: such hosts
count as in flight while fewer than the width are admitted, the ones that started prepare later as
waiting. Hosts that passed the preflight and have not started count as waiting too.

ETA: mean time of the hosts upgraded in this window (admission - the upgrade-required transition, or
the start of prepare for a node that resumes - to the end) x hosts left (in flight + waiting) / width;
"about ?" before the first host finished.

Every hook is wrapped: an error in this plugin never stops a run (it shows at -vvv only). Output goes
through ``self._display`` only, so ansible-runner's awx_display (which subclasses the stdout callback
named in ANSIBLE_STDOUT_CALLBACK) captures every line with its event.
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: window
type: stdout
short_description: Maintenance window progress - host state changes, fleet counts and ETA
version_added: 0.1.0
description:
  - Instead of a line per task and host, prints one line per host state change, for example
    C(lab-node-1  drain-required -> pod-restart-required  (12.3 s)) (the time is how long the host was
    in the state it left), then a fleet line
    C(done 12 / in flight 3 / waiting 2 / failed 0 / at target 180 - elapsed 14m, about 9m left) (skipped,
    not started and in preflight are added when there are any; several changes reported by one task
    share one fleet line, printed when the next task starts).
  - States are the role's phases (preflight, prepare, install, reload, reboot, verify, finish), the node's
    upgrade-state labels as npuops.fleet.npu_node_upgrade moves them (upgrade-required ... upgrade-done,
    upgrade-failed) and the host's final status (preflight-ok, upgraded, already-at-target, skipped,
    failed, not-started; the reason on the next line).
  - A host in the prepare phase before its first transition counts as in flight while fewer hosts than
    the window's width (the smallest maxParallelUpgrades) are admitted, otherwise as waiting for an
    admission slot; hosts that passed the preflight and have not started count as waiting.
  - The time left is the mean time of the hosts upgraded in this window (admission to the end) times the
    hosts in flight and waiting, divided by the width; C(about ?) until a host has finished. Plan mode
    (C(--check) or C(-e maintenance_mode=plan)) shows no estimate.
  - Every task failure and unreachable host is printed in full (host, task name, message; C((ignored))
    when the task ignores errors), and so is the C(msg) of every C(debug) task (the summary, the plan).
    Module warnings are printed too (one line each). Play headers are one line; the PLAY RECAP is printed
    at the end. With C(-v) the task names are printed as well.
  - Meant for C(npuops.fleet.maintenance_window); other playbooks show their play headers, failures,
    debug output and the recap.
author:
  - npuops maintainers (@npuops)
requirements:
  - Set as the stdout callback (see notes).
options:
  show_debug:
    description:
      - Print the C(msg) of C(debug) tasks (the window prints its summary and plan with them).
    type: bool
    default: true
    env:
      - name: NPUOPS_WINDOW_SHOW_DEBUG
    ini:
      - section: callback_npuops_window
        key: show_debug
notes:
  - "Enable it in C(ansible.cfg): C([defaults]) C(stdout_callback = npuops.fleet.window), or for one run
    C(ANSIBLE_STDOUT_CALLBACK=npuops.fleet.window ansible-playbook npuops.fleet.maintenance_window ...)."
  - "ansible-runner and AWX: runner keeps the stdout callback it is given in C(ANSIBLE_STDOUT_CALLBACK) as
    C(ORIGINAL_STDOUT_CALLBACK) and its C(awx_display) callback subclasses it, so set
    C(ANSIBLE_STDOUT_CALLBACK=npuops.fleet.window) in runner's C(env/envvars) (or C(envvars=) of
    C(ansible_runner.run)), in the project's C(ansible.cfg), or as an extra environment variable of the AWX
    job (Settings - Jobs - Extra Environment Variables). The collection must be installed in the execution
    environment. Job events are captured as with the default callback; the lines above are their stdout."
  - Reads only task results; nothing is asked of the cluster. Times of node transitions are whole seconds.
"""

import functools
import time
from typing import Any, Callable, Mapping, Optional

from ansible import constants as C
from ansible import context
from ansible.plugins.callback import CallbackBase

from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.states import UPGRADE_FAILED, UPGRADE_REQUIRED
from ansible_collections.npuops.fleet.plugins.plugin_utils.window_record import PHASES, epoch, number

FINAL = ("preflight-ok", "upgraded", "already-at-target", "skipped", "failed", "not-started")
WITH_REASON = ("failed", "skipped", "not-started")
NODE_UPGRADE = "npu_node_upgrade"


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "1", "on")
    return bool(value)


def _span(seconds: float) -> str:
    """Elapsed and left: 45s, 14m, 2h05m."""
    s = int(round(max(0.0, seconds)))
    if s < 60:
        return "%ds" % s
    if s < 3600:
        return "%dm" % (s // 60)
    return "%dh%02dm" % (s // 3600, (s % 3600) // 60)


def _quiet(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A callback hook that never raises: a progress view must not stop a maintenance window."""

    @functools.wraps(fn)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            fn(self, *args, **kwargs)
        except Exception as exc:  # noqa: BLE001
            try:
                self._display.vvv("npuops.fleet.window: %s failed: %r" % (fn.__name__, exc))
            except Exception:  # noqa: BLE001
                pass

    return wrapper


class _Host:
    __slots__ = ("state", "since", "status", "phase", "phase_at", "admitted", "admitted_at", "upgrade_s")

    def __init__(self) -> None:
        self.state: Optional[str] = None
        self.since: Optional[float] = None
        self.status: Optional[str] = None
        self.phase: Optional[str] = None
        self.phase_at: Optional[float] = None
        self.admitted = False
        self.admitted_at: Optional[float] = None
        self.upgrade_s: Optional[float] = None


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "npuops.fleet.window"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._clock: Callable[[], float] = time.time
        self._reset()

    def _reset(self) -> None:
        self._t0: Optional[float] = None
        self._hosts: dict[str, _Host] = {}
        self._targets: Optional[list[str]] = None
        self._width: Optional[int] = None
        self._plan = False
        self._pending = False
        self._last_task: Optional[str] = None
        self._items_failed: set[tuple[str, str]] = set()

    # ---- reading results ----------------------------------------------------------------------
    @staticmethod
    def _parts(result: Any) -> tuple[str, Any, Mapping[str, Any]]:
        host = getattr(result, "host", None) or getattr(result, "_host", None)
        task = getattr(result, "task", None) or getattr(result, "_task", None)
        res = getattr(result, "result", None)
        if res is None:
            res = getattr(result, "_result", None)
        name = None
        if host is not None:
            name = host.get_name() if hasattr(host, "get_name") else getattr(host, "name", None)
        return str(name or host or "?"), task, res if isinstance(res, Mapping) else {}

    @staticmethod
    def _task_name(task: Any) -> str:
        if task is None:
            return "?"
        try:
            return str(task.get_name()).strip() or str(getattr(task, "action", "?"))
        except Exception:  # noqa: BLE001
            return str(getattr(task, "name", None) or getattr(task, "action", "?"))

    @staticmethod
    def _task_key(task: Any) -> str:
        return str(getattr(task, "_uuid", None) or id(task))

    def _check_mode(self, task: Any) -> bool:
        if getattr(task, "check_mode", None) is True:
            return True
        try:
            return bool((context.CLIARGS or {}).get("check"))
        except Exception:  # noqa: BLE001
            return False

    def _now(self) -> float:
        now = self._clock()
        if self._t0 is None:
            self._t0 = now
        return now

    def _host(self, name: str) -> _Host:
        if name not in self._hosts:
            self._hosts[name] = _Host()
        return self._hosts[name]

    def _say(self, msg: str, color: Optional[str] = None) -> None:
        if color:
            self._display.display(msg, color=color)
        else:
            self._display.display(msg)

    def _change(self, name: str, new: str, at: float, reason: Any = None) -> None:
        h = self._host(name)
        if new == h.state:
            return
        line = "%s  %s -> %s" % (name, h.state or "-", new)
        if h.since is not None:
            line += "  (%.1f s)" % max(0.0, at - h.since)
        color = C.COLOR_ERROR if new in ("failed", UPGRADE_FAILED) else None
        self._say(line, color)
        if reason and new in WITH_REASON:
            self._say("%s  reason: %s" % (name, reason), color)
        h.state = new
        h.since = at
        self._pending = True

    def _absorb(self, name: str, task: Any, res: Mapping[str, Any]) -> None:
        now = self._now()
        facts = res.get("ansible_facts")
        facts = facts if isinstance(facts, Mapping) else {}
        if "_mw_plan" in facts:
            self._plan = _truthy(facts["_mw_plan"])
        if isinstance(facts.get("_mw_targets"), (list, tuple)):
            self._targets = [str(t) for t in facts["_mw_targets"]]
        if "_mw_parallel" in facts:
            width = number(facts["_mw_parallel"])
            self._width = int(width) if width is not None else None

        action = str(getattr(task, "action", "") or "")
        if action.endswith(NODE_UPGRADE) and not self._check_mode(task):
            for tr in res.get("transitions") or []:
                if not isinstance(tr, Mapping) or not tr.get("to"):
                    continue
                h = self._host(name)
                at = epoch(tr.get("time"))
                at = now if at is None else at
                if tr["to"] == UPGRADE_REQUIRED:
                    h.admitted_at = at
                h.admitted = True
                self._change(name, str(tr["to"]), at)
            if (
                task is not None
                and (getattr(task, "args", None) or {}).get("phase") == "prepare"
                and not res.get("failed")
                and not res.get("not_started")
            ):
                self._host(name).admitted = True  # a resumed node: admitted in an earlier run

        phase = facts.get("_driver_upgrade_phase")
        if phase is not None:
            h = self._host(name)
            at = number(facts.get("_driver_upgrade_phase_start"))
            at = now if at is None else at
            if str(phase) != h.phase:
                h.phase = str(phase)
                h.phase_at = at
                if h.phase in PHASES:
                    if h.phase in ("preflight", "prepare"):
                        h.admitted = False
                    self._change(name, h.phase, at)

        result = facts.get("_driver_upgrade_result")
        if isinstance(result, Mapping):
            self._status(name, result, now)

        summary = facts.get("_mw_summary")
        if isinstance(summary, Mapping):
            for row in summary.get("hosts") or []:
                if isinstance(row, Mapping) and row.get("host"):
                    self._status(str(row["host"]), row, now)

    def _status(self, name: str, result: Mapping[str, Any], now: float) -> None:
        status = result.get("status")
        if not status:
            return
        h = self._host(name)
        status = str(status)
        if status == h.status:
            return
        h.status = status
        if status not in FINAL:
            return
        at = epoch(result.get("finished"))
        at = now if at is None or (h.since is not None and at < h.since - 1.0) else at
        if status == "upgraded":
            start = h.admitted_at if h.admitted_at is not None else (h.phase_at if h.phase == "prepare" else None)
            if start is None:
                start = self._prepare_start(result)
            if start is not None:
                h.upgrade_s = max(0.0, at - start)
        self._change(name, status, at, result.get("reason"))

    @staticmethod
    def _prepare_start(result: Mapping[str, Any]) -> Optional[float]:
        phases = result.get("phases")
        prep = phases.get("prepare") if isinstance(phases, Mapping) else None
        return epoch(prep.get("started")) if isinstance(prep, Mapping) else None

    # ---- the fleet line -------------------------------------------------------------------------
    def _counts(self) -> dict[str, int]:
        keys = ("done", "in flight", "waiting", "failed", "at target", "skipped", "not started", "in preflight")
        c: dict[str, int] = {k: 0 for k in keys}
        candidates: list[tuple[float, str]] = []
        admitted = 0
        names = set(self._hosts) | set(self._targets or [])
        for name in names:
            h = self._hosts.get(name)
            status = h.status if h else None
            if status == "upgraded":
                c["done"] += 1
            elif status == "already-at-target":
                c["at target"] += 1
            elif status == "failed":
                c["failed"] += 1
            elif status == "skipped":
                c["skipped"] += 1
            elif status == "not-started":
                c["not started"] += 1
            elif status == "preflight-ok":
                c["waiting"] += 1
            elif h is not None and status == "running" and h.phase not in (None, "preflight"):
                if h.phase == "prepare" and not h.admitted:
                    candidates.append((h.phase_at or 0.0, name))
                else:
                    admitted += 1
            elif h is not None and h.phase is not None:
                c["in preflight"] += 1
            elif self._targets is not None and name in self._targets:
                c["not started"] += 1  # a target without any result of its preflight (unreachable)
        c["in flight"] += admitted
        free = len(candidates) if not self._width else max(0, self._width - admitted)
        for n, _cand in enumerate(sorted(candidates)):
            c["in flight" if n < free else "waiting"] += 1
        return c

    def _eta(self, c: Mapping[str, int]) -> str:
        left = c["in flight"] + c["waiting"]
        if left == 0:
            return ""
        times = [h.upgrade_s for h in self._hosts.values() if h.status == "upgraded" and h.upgrade_s is not None]
        if not times:
            return ", about ? left"
        width = self._width if self._width and self._width > 0 else left
        mean = sum(times) / len(times)
        # what the admitted hosts in flight already spent of it counts as done
        now = self._now()
        spent = sum(
            min(max(now - h.admitted_at, 0.0), mean)
            for h in self._hosts.values()
            if h.status == "running" and h.admitted_at is not None
        )
        return ", about %s left" % _span(max(mean * left - spent, 0.0) / width)

    def _fleet(self) -> None:
        self._pending = False
        c = self._counts()
        parts = ["%s %d" % (k, c[k]) for k in ("done", "in flight", "waiting", "failed", "at target")]
        parts += ["%s %d" % (k, c[k]) for k in ("skipped", "not started", "in preflight") if c[k]]
        line = " / ".join(parts) + " - elapsed %s" % _span(self._now() - (self._t0 or self._now()))
        if self._plan or self._check_mode(None):
            line += "; plan mode, nothing is changed"
        else:
            line += self._eta(c)
        self._say(line)

    def _flush(self) -> None:
        if self._pending:
            self._fleet()

    # ---- playbook events ------------------------------------------------------------------------
    @_quiet
    def v2_playbook_on_start(self, playbook: Any) -> None:
        self._reset()
        self._t0 = self._clock()

    @_quiet
    def v2_playbook_on_play_start(self, play: Any) -> None:
        self._flush()
        self._now()
        name = str(play.get_name() if hasattr(play, "get_name") else getattr(play, "name", "")).strip()
        self._say("PLAY [%s]%s" % (name, " (check mode)" if self._check_mode(None) else ""), C.COLOR_HIGHLIGHT)

    @_quiet
    def v2_playbook_on_task_start(self, task: Any, is_conditional: bool) -> None:
        self._flush()
        if self._display.verbosity >= 1:
            name = self._task_name(task)
            if name != self._last_task:
                self._last_task = name
                self._say("TASK [%s]" % name)

    @_quiet
    def v2_playbook_on_handler_task_start(self, task: Any) -> None:
        self._flush()

    @_quiet
    def v2_runner_on_ok(self, result: Any) -> None:
        name, task, res = self._parts(result)
        self._absorb(name, task, res)
        self._debug_msg(name, task, res)
        self._warnings(name, res)

    @_quiet
    def v2_runner_item_on_ok(self, result: Any) -> None:
        name, task, res = self._parts(result)
        self._absorb(name, task, res)

    @_quiet
    def v2_runner_on_failed(self, result: Any, ignore_errors: bool = False) -> None:
        name, task, res = self._parts(result)
        self._absorb(name, task, res)
        if (name, self._task_key(task)) in self._items_failed:
            return  # each failed item was printed by v2_runner_item_on_failed
        self._failure("FAILED", name, task, res, ignore_errors)

    @_quiet
    def v2_runner_item_on_failed(self, result: Any) -> None:
        name, task, res = self._parts(result)
        self._absorb(name, task, res)
        self._items_failed.add((name, self._task_key(task)))
        label = res.get("_ansible_item_label", res.get("item"))
        self._failure("FAILED", name, task, res, bool(getattr(task, "ignore_errors", False)), label)

    @_quiet
    def v2_runner_on_unreachable(self, result: Any) -> None:
        name, task, res = self._parts(result)
        self._failure("UNREACHABLE", name, task, res, False)

    @_quiet
    def v2_runner_on_async_failed(self, result: Any) -> None:
        name, task, res = self._parts(result)
        self._failure("FAILED", name, task, res, False)

    @_quiet
    def v2_runner_retry(self, result: Any) -> None:
        if self._display.verbosity >= 1:
            name, task, res = self._parts(result)
            self._say(
                '%s  retrying "%s" (%s of %s)'
                % (name, self._task_name(task), res.get("attempts", "?"), res.get("retries", "?"))
            )

    @_quiet
    def v2_playbook_on_stats(self, stats: Any) -> None:
        if self._pending or self._hosts:
            self._fleet()
        hosts = sorted(stats.processed.keys())
        self._say("PLAY RECAP", C.COLOR_HIGHLIGHT)
        width = max((len(h) for h in hosts), default=0)
        for h in hosts:
            t = stats.summarize(h)
            self._say(
                "%s : ok=%d changed=%d unreachable=%d failed=%d skipped=%d rescued=%d ignored=%d"
                % (
                    h.ljust(width),
                    t.get("ok", 0),
                    t.get("changed", 0),
                    t.get("unreachable", 0),
                    t.get("failures", 0),
                    t.get("skipped", 0),
                    t.get("rescued", 0),
                    t.get("ignored", 0),
                ),
                C.COLOR_ERROR if t.get("failures") or t.get("unreachable") else None,
            )

    # ---- output helpers -------------------------------------------------------------------------
    def _failure(
        self, kind: str, name: str, task: Any, res: Mapping[str, Any], ignored: bool, item: Any = None
    ) -> None:
        msg = res.get("msg") or res.get("censored") or res.get("stderr") or res.get("stdout")
        if not msg and res.get("exception"):
            msg = str(res["exception"]).strip().splitlines()[-1]
        where = self._task_name(task) + (" (item %s)" % item if item is not None else "")
        self._say(
            '%s%s  %s  task "%s": %s' % (kind, " (ignored)" if ignored else "", name, where, msg or "no message"),
            C.COLOR_SKIP if ignored else C.COLOR_ERROR,
        )

    def _debug_msg(self, name: str, task: Any, res: Mapping[str, Any]) -> None:
        action = str(getattr(task, "action", "") or "")
        if action not in ("debug", "ansible.builtin.debug", "ansible.legacy.debug") or "msg" not in res:
            return
        try:
            if not self.get_option("show_debug"):
                return
        except KeyError:
            pass  # options not loaded (instantiated outside Ansible's plugin loader): the default
        msg = res["msg"]
        lines = [str(m) for m in msg] if isinstance(msg, (list, tuple)) else str(msg).splitlines()
        for line in lines:
            self._say(line)

    def _warnings(self, name: str, res: Mapping[str, Any]) -> None:
        # always: a module's warning says what a check could not do (a dry-run eviction not possible)
        for w in res.get("warnings") or []:
            self._say("%s  warning: %s" % (name, w), C.COLOR_WARN)
