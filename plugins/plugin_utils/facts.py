# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Facts an action sets as ansible.builtin.set_fact sets them (npu_phase, npu_record)."""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase, VariableLayer


def set_like_set_fact(action: ActionBase, facts: dict[str, Any]) -> None:
    """Register ``facts`` for the action's host as host variables of this run, as set_fact does. The
    empty cacheable layer matters: without it ansible-core takes an action's ``ansible_facts`` as
    cached facts, whose precedence is below an earlier set_fact of the same name, which would win."""
    action.register_host_variables({}, VariableLayer.CACHEABLE_FACT)
    action.register_host_variables(facts, VariableLayer.EPHEMERAL_FACT)
