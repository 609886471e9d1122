# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""The per-node upgrade state machine as data: which state follows which, per phase (pure).

A state label names the step that is *pending*: the module does that step's work and moves the
label on only once the effect is confirmed, so a rerun resumes exactly where a killed run stopped.

prepare: upgrade-required -> cordon-required -> wait-for-jobs-required -> pod-deletion-required
         -> drain-required (drain.enable) -> pod-restart-required ("ready for host work")
reboot:  pod-restart-required -> reboot-required
finish:  reboot-required -> reboot-validation-required -> validation-required
         pod-restart-required -> validation-required -> uncordon-required -> upgrade-done
fail:    any -> upgrade-failed
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from ansible_collections.npuops.fleet.plugins.module_utils.errors import FleetError

UPGRADE_REQUIRED = "upgrade-required"
CORDON_REQUIRED = "cordon-required"
WAIT_FOR_JOBS_REQUIRED = "wait-for-jobs-required"
POD_DELETION_REQUIRED = "pod-deletion-required"
DRAIN_REQUIRED = "drain-required"
POD_RESTART_REQUIRED = "pod-restart-required"
REBOOT_REQUIRED = "reboot-required"
REBOOT_VALIDATION_REQUIRED = "reboot-validation-required"
VALIDATION_REQUIRED = "validation-required"
UNCORDON_REQUIRED = "uncordon-required"
UPGRADE_DONE = "upgrade-done"
UPGRADE_FAILED = "upgrade-failed"

PHASES = ("prepare", "reboot", "finish", "fail", "status")

# States from which prepare starts a new upgrade ("" = no label yet).
IDLE_STATES = ("", UPGRADE_REQUIRED, UPGRADE_DONE, UPGRADE_FAILED)
PREPARE_STATES = (CORDON_REQUIRED, WAIT_FOR_JOBS_REQUIRED, POD_DELETION_REQUIRED, DRAIN_REQUIRED)
HOST_WORK_STATES = (POD_RESTART_REQUIRED, REBOOT_REQUIRED)
FINISH_STATES = (REBOOT_VALIDATION_REQUIRED, VALIDATION_REQUIRED, UNCORDON_REQUIRED)
# A node in one of these is being upgraded (a resume, not a new start).
IN_PROGRESS_STATES = PREPARE_STATES + HOST_WORK_STATES + FINISH_STATES
# Admission counts these as taken (maxParallelUpgrades) and unavailable (maxUnavailable), and
# upgrade-required too when an upgrade run wrote it (admission.py): from admission to uncordon.


class UpgradeFailed(RuntimeError, FleetError):
    """The phase failed; the node's label/annotations already say why (unless check mode)."""


class UpgradeNotStarted(RuntimeError, FleetError):
    """The window stopped (its stop file appeared) while this node waited for admission; nothing was
    changed and the node was never admitted."""


class UpgradeConflict(UpgradeFailed):
    """Another run (or an admin) moved the node meanwhile; this run changed nothing more and must not
    undo anything (the abort path is not taken)."""


def prepare_next(state: str, drain_enabled: bool) -> Optional[str]:
    """The state prepare moves to after finishing ``state``'s work; None when prepare is done."""
    return {
        UPGRADE_REQUIRED: CORDON_REQUIRED,
        CORDON_REQUIRED: WAIT_FOR_JOBS_REQUIRED,
        WAIT_FOR_JOBS_REQUIRED: POD_DELETION_REQUIRED,
        POD_DELETION_REQUIRED: DRAIN_REQUIRED if drain_enabled else POD_RESTART_REQUIRED,
        DRAIN_REQUIRED: POD_RESTART_REQUIRED,
    }.get(state)


# The route the host work takes from the state prepare leaves (or finds) the node in: each state has
# one way forward, so a run killed anywhere ends as an uninterrupted run would. install: the packages,
# then a reload or reboot; reboot: the reboot (drain checked again) and its validation; finish: the
# host work was done, only the checks and the uncordon are left.
ROUTES = {
    POD_RESTART_REQUIRED: "install",
    REBOOT_REQUIRED: "reboot",
    REBOOT_VALIDATION_REQUIRED: "finish",
    VALIDATION_REQUIRED: "finish",
    UNCORDON_REQUIRED: "finish",
}


def route_from(state: Optional[str], default: Optional[str] = None) -> Optional[str]:
    """The route (install, reboot, finish) from ``state``; ``default`` for a state no route starts from."""
    return ROUTES.get(state or "", default)


def resumed_from(previous_state: Optional[str], state: Optional[str]) -> Optional[str]:
    """``previous_state`` when a prepare that found the node there and left it in ``state`` (a route's
    start) went on with an upgrade already under way, else None. Only no label, upgrade-done and
    upgrade-failed start afresh: upgrade-required counts, as an earlier run's admission (or an admin)
    asked for this upgrade before the call."""
    if route_from(state) is None or (previous_state or "") in ("", UPGRADE_DONE, UPGRADE_FAILED):
        return None
    return previous_state


def finish_next(state: str) -> Optional[str]:
    return {
        REBOOT_REQUIRED: REBOOT_VALIDATION_REQUIRED,
        REBOOT_VALIDATION_REQUIRED: VALIDATION_REQUIRED,
        POD_RESTART_REQUIRED: VALIDATION_REQUIRED,
        VALIDATION_REQUIRED: UNCORDON_REQUIRED,
        UNCORDON_REQUIRED: UPGRADE_DONE,
    }.get(state)


@dataclass
class Entry:
    """What a phase does with the node's current state."""

    action: str  # start | resume | noop | done_without_disruption | error
    message: str = ""


def phase_entry(
    phase: str,
    state: str,
    at_target: bool,
    has_bookkeeping: bool,
    retry_failed: bool = True,
    host_at_target: Optional[bool] = None,
    admitted: bool = False,
) -> Entry:
    """Decide how ``phase`` begins from ``state``.

    A node whose label says upgrade-required (even one relabelled from upgrade-failed) is only done
    without disruption when its driver label really equals the target (``at_target``) and the host
    check, when the caller made one (``host_at_target``), agrees. A node that an earlier attempt left
    cordoned (``has_bookkeeping``) is only put back into service that way when the host check passed
    (``host_at_target is True``): labels alone never uncordon it.

    ``admitted``: the upgrade-required label was written by an upgrade run (the last-transition
    annotation says so), not by an admin. Such a node is resumed, not started again: a second run
    must not count it as new, and its first transition is the one that decides between runs.
    """
    state = state or ""
    if phase == "status":
        return Entry("noop", "read-only")
    if phase == "fail":
        return Entry("resume")
    if phase == "prepare":
        if state == UPGRADE_FAILED and not retry_failed:
            return Entry("error", "node is upgrade-failed and retry_failed is false; fix the node, then relabel it")
        if state in IDLE_STATES:
            if _done_without_disruption(at_target, has_bookkeeping, host_at_target):
                return Entry("done_without_disruption", "driver already at the target version")
            if state == UPGRADE_REQUIRED and admitted:
                return Entry("resume")
            return Entry("start")
        if state in PREPARE_STATES:
            return Entry("resume")
        return Entry("noop", "prepare already completed; node is in %s" % state)
    if phase == "reboot":
        # From reboot-required too (a run killed before its reboot): the drain is checked again.
        if state in (POD_RESTART_REQUIRED, REBOOT_REQUIRED):
            return Entry("resume")
        if state == REBOOT_VALIDATION_REQUIRED:
            return Entry("noop", "reboot already done, being validated")
        return Entry(
            "error", "reboot needs a node in %s (run prepare first); node is in %r" % (POD_RESTART_REQUIRED, state)
        )
    if phase == "finish":
        if state in HOST_WORK_STATES + FINISH_STATES:
            return Entry("resume")
        if state == UPGRADE_DONE:
            return Entry("noop", "upgrade already done")
        if state in ("", UPGRADE_REQUIRED) and at_target and not has_bookkeeping and host_at_target is not False:
            return Entry("done_without_disruption", "driver already at the target version")
        return Entry(
            "error",
            "finish needs a prepared node (state %s or later); node is in %r: run prepare first"
            % (POD_RESTART_REQUIRED, state),
        )
    raise ValueError("unknown phase %r" % phase)


def _done_without_disruption(at_target: bool, has_bookkeeping: bool, host_at_target: Optional[bool]) -> bool:
    if not at_target or host_at_target is False:
        return False
    return host_at_target is True or not has_bookkeeping


def transition_record(frm: str, to: str, reason: str, time: str) -> dict[str, Any]:
    return {"from": frm or "", "to": to, "reason": reason, "time": time}
