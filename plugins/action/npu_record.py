# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action npu_record: one step's outcome in a host's upgrade record - facts set as set_fact sets them,
the step's refusal when it has one, the record written on the control node (the module file holds
its documentation). Never reaches the host."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase
from ansible.plugins.filter.core import to_nice_json

from ansible_collections.npuops.fleet.plugins.module_utils.host import atomic_file
from ansible_collections.npuops.fleet.plugins.plugin_utils.facts import set_like_set_fact

SPEC = {
    "facts": {"type": "dict", "default": {}},
    "fail_msg": {"type": "str", "default": ""},
    "write_path": {"type": "path"},
    "write_key": {"type": "str"},
    "copies": {"type": "dict", "default": {}},
    "files": {
        "type": "list",
        "elements": "dict",
        "default": [],
        "options": {"path": {"type": "path", "required": True}, "content": {"type": "str", "required": True}},
    },
}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        res = super().run(tmp, task_vars or {})
        try:
            checked = ArgumentSpecValidator(SPEC).validate(self._task.args)
            if checked.error_messages:
                raise AnsibleActionFail("npu_record: %s" % "; ".join(checked.error_messages))
            a = checked.validated_parameters
            if bool(a["write_path"]) != bool(a["write_key"]):
                raise AnsibleActionFail("npu_record: write_path and write_key go together (got write_path=%r, "
                                        "write_key=%r)" % (a["write_path"], a["write_key"]))
            if a["write_key"] and a["write_key"] not in a["facts"]:
                raise AnsibleActionFail("npu_record: write_key %r names no key of facts (%s)"
                                        % (a["write_key"], ", ".join(sorted(a["facts"])) or "none"))
            missing = sorted(str(key) for key in a["copies"].values() if key not in a["facts"])
            if missing:
                raise AnsibleActionFail("npu_record: copies name no key of facts: %s" % ", ".join(missing))
            # the same object under both names: a now() in the value is templated once
            facts = dict(a["facts"], **{name: a["facts"][key] for name, key in a["copies"].items()})
            set_like_set_fact(self, facts)
            res.update(changed=False, ansible_facts=facts)
            writes = [(f["path"], f["content"]) for f in a["files"]]
            if a["write_path"]:
                try:  # as the copy of "{{ value | to_nice_json }}\n" it replaces wrote it
                    text = to_nice_json(facts[a["write_key"]]) + "\n"
                except (TypeError, ValueError) as exc:
                    raise AnsibleActionFail("npu_record: cannot write %s: %s" % (a["write_path"], exc))
                writes.insert(0, (a["write_path"], text))
            if writes and not self._task.check_mode:
                for path, text in writes:
                    try:
                        atomic_file.write_atomically(path, text)
                    except OSError as exc:
                        raise AnsibleActionFail("npu_record: cannot write %s: %s" % (path, exc))
                res["written"] = [path for path, _text in writes]
            if a["fail_msg"]:
                # Ansible sets no facts of a failed task: they stay in this result's ansible_facts
                res.update(failed=True, msg=a["fail_msg"])
        except AnsibleActionFail as exc:
            res.update(failed=True, changed=False, msg=exc.message)
        return res
