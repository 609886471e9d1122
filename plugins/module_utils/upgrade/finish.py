# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""The phases after host work. finish: reboot validation (a new bootID), operand labels restored,
validation (node Ready, driver label == target, operand pods Ready), uncordon as recorded, upgrade-done;
and the "already at target" path, which never uncordons a node whose host check has not passed.
fail: the caller's (the role's rescue) upgrade-failed mark - an abort before host work, cordoned after
it, refused for a node another run moved last when ``own_run_only``. Functions of (ctx, transitions).
"""

from __future__ import annotations

from typing import Optional

from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import cordon, operands
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import record as node_record
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import validation as upgrade_validation
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.context import UpgradeContext, deadline
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.policy import timeout_or_none
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.states import UpgradeConflict
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.transitions import Transitions


def phase_finish(ctx: UpgradeContext, tr: Transitions, entry: sm.Entry, reason: Optional[str]) -> None:
    """From the node's state on up to upgrade-done; the whole validation within validation_timeout."""
    until = deadline(ctx.validation_timeout)
    while ctx.state != sm.UPGRADE_DONE:
        if ctx.state == sm.REBOOT_REQUIRED:
            tr.transition(sm.REBOOT_VALIDATION_REQUIRED, reason or "host rebooted")
        elif ctx.state == sm.REBOOT_VALIDATION_REQUIRED:
            wait_rebooted(ctx, tr)
        elif ctx.state == sm.POD_RESTART_REQUIRED:
            tr.transition(sm.VALIDATION_REQUIRED, reason or "host work finished")
        elif ctx.state == sm.VALIDATION_REQUIRED:
            tr.transition(sm.UNCORDON_REQUIRED, validate(ctx, tr, until))
        elif ctx.state == sm.UNCORDON_REQUIRED:
            uncordon_and_done(ctx, tr)
    ctx.result["message"] = "node %s upgrade done (driver %s)" % (ctx.name, ctx.result["driver_version"])


def wait_rebooted(ctx: UpgradeContext, tr: Transitions) -> None:
    """Wait (reboot.rebootTimeoutSeconds, else validation_timeout) for the node Ready with a bootID
    other than the one recorded before the reboot."""
    limit = timeout_or_none(ctx.policy.reboot.reboot_timeout_seconds) or ctx.validation_timeout
    before = node_record.get_annotation(ctx.profile, ctx.node, node_record.BOOT_ID_BEFORE)
    if not ctx.check:
        why = upgrade_validation.wait_rebooted(ctx.core, ctx.name, before, limit, heartbeat=ctx.heartbeat)
        if why:
            tr.fail_after_host_work(why)
    tr.transition(sm.VALIDATION_REQUIRED, "node Ready after reboot (bootID changed)" if before else "node Ready")


def done_without_disruption(ctx: UpgradeContext, tr: Transitions) -> None:
    """The driver is already at target: upgrade-done, or, after a half-done attempt, finish's path."""
    ctx.result["host_work_required"] = False
    if node_record.has_bookkeeping(ctx.profile, ctx.node):
        # A half-done earlier attempt: restore operands, validate, uncordon as finish would.
        tr.transition(
            sm.VALIDATION_REQUIRED, "driver already at target %s; undoing the earlier attempt" % ctx.target
        )
        phase_finish(ctx, tr, sm.Entry("resume"), None)
    elif ctx.state != sm.UPGRADE_DONE:
        tr.transition(sm.UPGRADE_DONE, "driver already at target %s; done without disruption" % ctx.target)
    ctx.result["message"] = "node %s already runs driver %s: nothing to do" % (ctx.name, ctx.target)


def restore_operands(ctx: UpgradeContext) -> list[str]:
    """Put back the operand deploy labels recorded before the pause; the label keys changed."""
    before = node_record.get_json_annotation(ctx.profile, ctx.node, node_record.OPERAND_LABELS_BEFORE)
    if before is None:
        return []
    changes = operands.restore_plan(ctx.labels(), before)
    if changes and not ctx.check:
        ctx.node = node_record.patch_node(ctx.core, ctx.name, {"metadata": {"labels": changes}})
    return sorted(changes)


def validate(ctx: UpgradeContext, tr: Transitions, until: Optional[float]) -> str:
    """Restore the operands, then wait until ``until`` (time.monotonic() seconds) for the node Ready,
    the driver label at target and the recorded operand DaemonSets' pods Ready. Returns the reason."""
    restored = restore_operands(ctx)
    if ctx.check:
        return "would restore operands %s and validate" % ", ".join(restored)
    daemonsets = node_record.get_json_annotation(ctx.profile, ctx.node, node_record.OPERAND_DAEMONSETS) or []
    why, version = upgrade_validation.wait_validated(
        ctx.core, ctx.profile, ctx.name, ctx.target, daemonsets, until, heartbeat=ctx.heartbeat
    )
    if version:
        ctx.result["driver_version"] = version
    if why:
        tr.fail_after_host_work("validation timed out after %ss: %s" % (ctx.validation_timeout, why))
    ctx.result["at_target"] = bool(ctx.target)
    return "validated: node Ready, driver %s, operands ready (%s)" % (
        version,
        ", ".join(daemonsets) or "none recorded",
    )


def uncordon_and_done(ctx: UpgradeContext, tr: Transitions) -> None:
    """Restore schedulability as recorded before the cordon, drop the bookkeeping, upgrade-done."""
    ctx.node, uncordoned = cordon.restore(ctx.core, ctx.profile, ctx.node, ctx.check)
    cleared = {ctx.ann(s): None for s in node_record.BOOKKEEPING}
    why = (
        "uncordoned"
        if uncordoned
        else "left cordoned (it was cordoned before the upgrade)"
        if cordon.is_cordoned(ctx.node)
        else "schedulable"
    )
    tr.transition(sm.UPGRADE_DONE, "upgrade done; node %s" % why, annotations=cleared)


def phase_fail(ctx: UpgradeContext, tr: Transitions, entry: sm.Entry, reason: Optional[str]) -> None:
    """Mark the node upgrade-failed for ``reason`` (the caller's): aborted as prepare would while
    still before host work, else cordoned; a node already failed for the same reason is left."""
    reason = reason or "upgrade failed (no reason given)"
    last = node_record.get_json_annotation(ctx.profile, ctx.node, node_record.LAST_TRANSITION) or {}
    if ctx.own_run_only and (not ctx.run_id or last.get("run_id") != ctx.run_id):
        raise UpgradeConflict(
            "node %s was last moved by run %s, not this run (%s): left to that run (state %s)"
            % (ctx.name, last.get("run_id") or "(unknown)", ctx.run_id or "(no run id)", ctx.state or "(none)")
        )
    if ctx.state == sm.UPGRADE_FAILED and last.get("reason") == reason:
        ctx.result["message"] = "node %s already upgrade-failed: %s" % (ctx.name, reason)
        return
    if ctx.state in (sm.UPGRADE_REQUIRED,) + sm.PREPARE_STATES:
        # Still before host work (a prepare that could not finish its own abort): abort as prepare would.
        note = tr.abort_transition(reason)
        ctx.result["message"] = "node %s marked upgrade-failed: %s; %s" % (ctx.name, reason, note)
        return
    tr.transition(sm.UPGRADE_FAILED, reason, warning=True)
    ctx.result["message"] = "node %s marked upgrade-failed (it stays cordoned): %s" % (ctx.name, reason)
