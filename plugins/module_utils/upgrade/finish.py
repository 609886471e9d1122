# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""The finish phase of NodeUpgrade: reboot validation (a new bootID), operand labels restored,
validation (node Ready, driver label == target, operand pods Ready), uncordon as recorded, upgrade-done;
and the "already at target" path, which never uncordons a node whose host check has not passed.
"""

from __future__ import annotations

from typing import Optional

from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import cordon, operands
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import record as node_record
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import validation as upgrade_validation
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.policy import timeout_or_none


class FinishSteps:
    """Mixin of NodeUpgrade (uses its node, policy, profile and transition helpers)."""

    def _phase_finish(self, entry: sm.Entry, reason: Optional[str]) -> None:
        deadline = self._deadline(self.validation_timeout)
        while self.state != sm.UPGRADE_DONE:
            if self.state == sm.REBOOT_REQUIRED:
                self._transition(sm.REBOOT_VALIDATION_REQUIRED, reason or "host rebooted")
            elif self.state == sm.REBOOT_VALIDATION_REQUIRED:
                self._wait_rebooted()
            elif self.state == sm.POD_RESTART_REQUIRED:
                self._transition(sm.VALIDATION_REQUIRED, reason or "host work finished")
            elif self.state == sm.VALIDATION_REQUIRED:
                self._transition(sm.UNCORDON_REQUIRED, self._validate(deadline))
            elif self.state == sm.UNCORDON_REQUIRED:
                self._uncordon_and_done()
        self.result["message"] = "node %s upgrade done (driver %s)" % (self.name, self.result["driver_version"])

    def _wait_rebooted(self) -> None:
        limit = timeout_or_none(self.policy.reboot.reboot_timeout_seconds) or self.validation_timeout
        before = node_record.get_annotation(self.profile, self.node, node_record.BOOT_ID_BEFORE)
        if not self.check:
            why = upgrade_validation.wait_rebooted(self.core, self.name, before, limit, heartbeat=self._heartbeat)
            if why:
                self._fail_after_host_work(why)
        self._transition(sm.VALIDATION_REQUIRED, "node Ready after reboot (bootID changed)" if before else "node Ready")

    def _done_without_disruption(self) -> None:
        self.result["host_work_required"] = False
        if node_record.has_bookkeeping(self.profile, self.node):
            # A half-done earlier attempt: restore operands, validate, uncordon as finish would.
            self._transition(
                sm.VALIDATION_REQUIRED, "driver already at target %s; undoing the earlier attempt" % self.target
            )
            self._phase_finish(sm.Entry("resume"), None)
        elif self.state != sm.UPGRADE_DONE:
            self._transition(sm.UPGRADE_DONE, "driver already at target %s; done without disruption" % self.target)
        self.result["message"] = "node %s already runs driver %s: nothing to do" % (self.name, self.target)

    def _restore_operands(self) -> list[str]:
        before = node_record.get_json_annotation(self.profile, self.node, node_record.OPERAND_LABELS_BEFORE)
        if before is None:
            return []
        changes = operands.restore_plan(self._labels(), before)
        if changes and not self.check:
            self.node = node_record.patch_node(self.core, self.name, {"metadata": {"labels": changes}})
        return sorted(changes)

    def _validate(self, deadline: Optional[float]) -> str:
        restored = self._restore_operands()
        if self.check:
            return "would restore operands %s and validate" % ", ".join(restored)
        daemonsets = node_record.get_json_annotation(self.profile, self.node, node_record.OPERAND_DAEMONSETS) or []
        why, version = upgrade_validation.wait_validated(
            self.core, self.profile, self.name, self.target, daemonsets, deadline, heartbeat=self._heartbeat
        )
        if version:
            self.result["driver_version"] = version
        if why:
            self._fail_after_host_work("validation timed out after %ss: %s" % (self.validation_timeout, why))
        self.result["at_target"] = bool(self.target)
        return "validated: node Ready, driver %s, operands ready (%s)" % (
            version,
            ", ".join(daemonsets) or "none recorded",
        )

    def _uncordon_and_done(self) -> None:
        self.node, uncordoned = cordon.restore(self.core, self.profile, self.node, self.check)
        cleared = {self._ann(s): None for s in node_record.BOOKKEEPING}
        why = (
            "uncordoned"
            if uncordoned
            else "left cordoned (it was cordoned before the upgrade)"
            if cordon.is_cordoned(self.node)
            else "schedulable"
        )
        self._transition(sm.UPGRADE_DONE, "upgrade done; node %s" % why, annotations=cleared)
