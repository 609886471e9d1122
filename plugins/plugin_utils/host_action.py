# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of the collection's host modules: a lost host is a failure where the caller said so.

Private to this collection. Over SSH a host that stops answering makes a task "unreachable", which a
block's rescue never sees. The driver_upgrade role therefore runs its host steps with
``ignore_unreachable: true`` and needed a "fail when the host did not answer" task after each. With
this action in front of a host module, a task that ignores unreachable results gets an ordinary
failure instead, naming the host, the phase and the step, so the rescue records it - one task, not
two. A task that does not ignore unreachable results behaves as Ansible's own ``normal`` action.
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleConnectionFailure
from ansible.plugins.action import ActionBase
from ansible.utils.vars import merge_hash


def lost_message(host: str, phase: str | None, step: str | None, error: str) -> str:
    """``host H unreachable during PHASE (STEP): ERROR`` - the words the role's rescue (failed.yml)
    and the summary's reason read; PHASE and STEP are left out when unknown."""
    during = " during %s" % phase if phase else ""
    what = " (%s)" % step if step else ""
    return "host %s unreachable%s%s: %s" % (host, during, what, error)


class HostModuleAction(ActionBase):
    """Runs the module of the same name on the host, as ``normal`` does (check mode, async)."""

    _supports_check_mode = True
    _supports_async = True

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars or {}
        try:
            result = super().run(tmp, task_vars)
            wrap_async = self._task.async_val
            result = merge_hash(result, self._execute_module(task_vars=task_vars, wrap_async=wrap_async))
            if not wrap_async:
                self._remove_tmp_path(self._connection._shell.tmpdir)
            return result
        except AnsibleConnectionFailure as e:
            if not self._task.ignore_unreachable:
                raise
            host = task_vars.get("inventory_hostname") or self._play_context.remote_addr or "?"
            return {
                "failed": True,
                "changed": False,
                "host_lost": True,
                "msg": lost_message(host, task_vars.get("_driver_upgrade_phase"), self._task.name, str(e).strip()),
            }
