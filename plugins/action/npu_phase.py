# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action npu_phase: a phase boundary of a host's upgrade at one reading of the clock (the module file
holds its documentation). Controller side only; nothing runs on the host."""

from __future__ import annotations

import copy
import time
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase, VariableLayer

SPEC = {
    "result": {"type": "dict", "required": True},
    "phase": {"type": "str", "required": True},
    "start": {"type": "float", "required": True},
    "started": {"type": "str"},
    "next": {"type": "str", "required": True},
    "prefix": {"type": "str", "default": "_driver_upgrade_"},
}


def boundary(
    result: dict[str, Any], phase: str, start: float, started: str | None, next_phase: str, now: float
) -> dict[str, Any]:
    """The closed ``phase`` recorded in a copy of ``result`` and the next phase's start, all at ``now``
    (epoch seconds): ``{"result", "phase", "phase_start", "phase_started", "phase_end"}``."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
    took = round(now - float(start), 1)
    out = copy.deepcopy(result)
    out.setdefault("durations", {})[phase] = took
    out.setdefault("phases", {})[phase] = {"started": started, "finished": stamp, "duration_s": took}
    return {"result": out, "phase": next_phase, "phase_start": now, "phase_started": stamp, "phase_end": now}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        res = super().run(tmp, task_vars)
        checked = ArgumentSpecValidator(SPEC).validate(self._task.args)
        if checked.error_messages:
            raise AnsibleActionFail("npu_phase: %s" % "; ".join(checked.error_messages))
        a = checked.validated_parameters
        b = boundary(a["result"], a["phase"], a["start"], a["started"], a["next"], time.time())
        facts = {a["prefix"] + k: v for k, v in b.items()}
        # as set_fact sets them: host variables of this run, not cached facts
        self.register_host_variables({}, VariableLayer.CACHEABLE_FACT)
        self.register_host_variables(facts, VariableLayer.EPHEMERAL_FACT)
        res.update(changed=False, ansible_facts=facts)
        return res
