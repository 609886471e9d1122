# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark callback (bench/fleet_window.py): per host and play, every task execution with its
start, end and status, written as JSON to $NPUOPS_COSTS_FILE at the end of the run.

A task execution is what the PLAY RECAP counts as ok (changed included), failed or skipped; an
include counts like any other task. Loop items are one execution of their task."""

from __future__ import annotations

import json
import os
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = r"""
name: npuops_costs
type: aggregate
short_description: per-host task executions and their times (npuops.fleet benchmark)
description: Writes every task execution per host and play to the file in NPUOPS_COSTS_FILE.
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "npuops_costs"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self.play = ""
        self.started: dict[tuple[str, str], float] = {}
        self.rows: list[dict] = []
        self.t0 = time.time()

    def v2_playbook_on_play_start(self, play) -> None:
        self.play = play.get_name()

    def v2_runner_on_start(self, host, task) -> None:
        self.started[(host.get_name(), task._uuid)] = time.time()

    def _end(self, result, status: str) -> None:
        host = result._host.get_name()
        task = result._task
        start = self.started.pop((host, task._uuid), None)
        now = time.time()
        self.rows.append(
            {
                "host": host,
                "play": self.play,
                "task": task.get_name(),
                "action": task.action,
                "status": status,
                "start": start if start is not None else now,
                "end": now,
            }
        )

    def v2_runner_on_ok(self, result, **kwargs) -> None:
        self._end(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False) -> None:
        self._end(result, "failed")

    def v2_runner_on_skipped(self, result) -> None:
        self._end(result, "skipped")

    def v2_runner_on_unreachable(self, result) -> None:
        self._end(result, "unreachable")

    def v2_playbook_on_stats(self, stats) -> None:
        path = os.environ.get("NPUOPS_COSTS_FILE")
        if path:
            with open(path, "w", encoding="utf-8") as fh:
                json.dump({"started": self.t0, "ended": time.time(), "tasks": self.rows}, fh)
