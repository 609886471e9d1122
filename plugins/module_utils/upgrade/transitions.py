# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""Transitions: the guarded writes of the upgrade-state label. Every transition is one JSON patch
tested against the node's resourceVersion and state label and retried through
``k8s.retry.retry_on_conflict``; a lost response is recognised by its own record, another run's or an
admin's move is UpgradeConflict (nothing more written, no abort mark). Also the two failure paths:
the abort before host work (operands and schedulability restored in the same guarded patch) and
upgrade-failed after it (the node stays cordoned). In check mode a transition is only recorded.
"""

from __future__ import annotations

import json
from typing import Any, NoReturn, Optional

from ansible_collections.npuops.fleet.plugins.module_utils.k8s import retry as k8s_retry
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import admission, cordon, operands
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import record as node_record
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.context import UpgradeContext
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.states import UpgradeConflict, UpgradeFailed

# Attempts of one transition patch while the node keeps changing under it (409 / 422 each time).
PATCH_ATTEMPTS = 8


class Transitions:
    """The state-label writes of one call, on ``ctx`` (its node, state, result and warnings follow
    every write)."""

    def __init__(self, ctx: UpgradeContext) -> None:
        self.ctx = ctx

    def transition(
        self,
        to: str,
        reason: str,
        labels: Optional[dict[str, Any]] = None,
        annotations: Optional[dict[str, Any]] = None,
        warning: bool = False,
        uncordon: bool = False,
    ) -> None:
        """Move the state label to ``to`` with the reason (annotation + Event), together with ``labels`` /
        ``annotations`` changes (None removes) and, with ``uncordon``, spec.unschedulable=false: one
        JSON patch, so an abort's restore happens only if this run still owns the node."""
        ctx = self.ctx
        rec = sm.transition_record(ctx.state, to, reason, node_record.now_iso())
        ctx.result["transitions"].append(rec)
        if not ctx.check:
            # The run id lets a retry recognise its own write when the first response was lost.
            record = json.dumps(dict(rec, run=ctx.token, **({"run_id": ctx.run_id} if ctx.run_id else {})))
            anns = dict(annotations or {}, **{ctx.ann(node_record.LAST_TRANSITION): record})
            self._patch(ctx.profile["upgrade_state_label"], to, anns, labels, uncordon)
            if ctx.labels().get(ctx.profile["upgrade_state_label"]) != to:
                raise UpgradeFailed("node %s: state label did not change to %s" % (ctx.name, to))
            err = node_record.create_event(
                ctx.core,
                ctx.node,
                "DriverUpgradeFailed" if warning else "DriverUpgradeStateChanged",
                "%s -> %s: %s" % (rec["from"] or "(none)", to, reason),
                warning=warning,
            )
            if err:
                ctx.warnings.append(err)
            ctx.changed = True
        ctx.state = to

    def _patch(
        self, state_label: str, to: str, anns: dict[str, Any], labels: Optional[dict[str, Any]], uncordon: bool = False
    ) -> None:
        """Apply a transition guarded by the node's resourceVersion and state label. When the guard
        fails, re-read: this very record there means the response was lost (done); otherwise
        :meth:`check_owned` decides between trying again and UpgradeConflict."""
        ctx = self.ctx
        last_key = ctx.ann(node_record.LAST_TRANSITION)

        def write(_attempt: int) -> None:
            if ctx.claim_not_after is not None and ctx.slots is not None:
                if ctx.slots.clock() > ctx.claim_not_after:
                    raise UpgradeFailed(
                        "node %s: admission claim older than %ds before the node could be labelled (slow API); "
                        "nothing was changed, run prepare again" % (ctx.name, admission.SLOT_GRACE / 2)
                    )
            ops = node_record.transition_ops(ctx.node, state_label, ctx.state, to, anns, labels)
            if uncordon:
                ops.append({"op": "add", "path": "/spec/unschedulable", "value": False})
            ctx.node = node_record.patch_node(ctx.core, ctx.name, ops)
            ctx.last_transition_seen = node_record.get_annotation(ctx.profile, ctx.node, node_record.LAST_TRANSITION)

        def conflicted(_exc: BaseException) -> Any:
            # 409: resourceVersion changed; 422: a JSON patch "test" op (the state label) failed
            fresh = node_record.read_node(ctx.core, ctx.name)
            if node_record.get_annotation(ctx.profile, fresh, node_record.LAST_TRANSITION) == anns[last_key]:
                ctx.node, ctx.last_transition_seen = fresh, anns[last_key]
                return None
            self.check_owned(fresh)
            return k8s_retry.CONFLICT

        def exhausted() -> None:
            raise UpgradeConflict("node %s: the node kept changing; transition to %s not written" % (ctx.name, to))

        k8s_retry.retry_on_conflict(write, PATCH_ATTEMPTS, exhausted, statuses=(409, 422), on_conflict=conflicted)

    def check_owned(self, fresh: dict[str, Any]) -> None:
        """Take ``fresh`` as the node to work on when it shows this run's state and last transition
        (someone else's unrelated write, a heartbeat, came between), or a newer transition this run
        wrote but never saw answered (adopted: the run goes on from that state). Anything else is
        another run's or an admin's move: UpgradeConflict, and nothing more is written."""
        ctx = self.ctx
        seen = node_record.get_annotation(ctx.profile, fresh, node_record.LAST_TRANSITION)
        now = node_record.labels(fresh).get(ctx.profile["upgrade_state_label"]) or ""
        if seen != ctx.last_transition_seen:
            try:
                mine = json.loads(seen or "{}").get("run") == ctx.token
            except (ValueError, AttributeError):
                mine = False
            if mine and (json.loads(seen or "{}").get("to") or "") == now:
                ctx.node, ctx.state, ctx.last_transition_seen = fresh, now, seen
                return
        if now != (ctx.state or "") or seen != ctx.last_transition_seen:
            raise UpgradeConflict(
                "node %s: state label changed from %s to %s meanwhile (another run or an admin is working "
                "on this node); this run changed nothing more" % (ctx.name, ctx.state or "(none)", now or "(none)")
            )
        ctx.node = fresh

    def abort(self, reason: str) -> NoReturn:
        """Failure in prepare: upgrade-failed, with the node put back as recorded in the same guarded
        patch (see :meth:`abort_transition`); raises UpgradeFailed (or UpgradeConflict)."""
        note = self.abort_transition(reason)
        raise UpgradeFailed("node %s: %s; %s" % (self.ctx.name, reason, note))

    def abort_transition(self, reason: str) -> str:
        """Move to upgrade-failed and, in the same patch guarded like a transition, restore the operand
        labels and the recorded schedulability and drop the bookkeeping - computed from a fresh read, so
        a run that lost the node to another run undoes nothing. Once host work may have started
        (``host-work-started``), the node stays cordoned and keeps its device baseline. Returns the note."""
        ctx = self.ctx
        if not ctx.check:
            self.check_owned(node_record.read_node(ctx.core, ctx.name))
        touched = bool(node_record.get_annotation(ctx.profile, ctx.node, node_record.HOST_WORK_STARTED))
        before = node_record.get_json_annotation(ctx.profile, ctx.node, node_record.OPERAND_LABELS_BEFORE)
        labels = operands.restore_plan(ctx.labels(), before) if before is not None else {}
        recorded = node_record.get_annotation(ctx.profile, ctx.node, node_record.UNSCHEDULABLE_BEFORE)
        uncordon = not touched and recorded == "false" and cordon.is_cordoned(ctx.node)
        dropped = [node_record.OPERAND_LABELS_BEFORE, node_record.OPERAND_DAEMONSETS]
        if not touched:
            dropped += [node_record.UNSCHEDULABLE_BEFORE, node_record.DEVICES_BEFORE, node_record.TARGET_VERSION]
        if touched:
            note = "node stays cordoned (an earlier attempt's host work may have changed the host)"
        else:
            note = "schedulability restored (%s)" % (
                "uncordoned" if uncordon else "left as it was before the upgrade"
            )
        if labels:
            note += "; operand labels restored"
        self.transition(
            sm.UPGRADE_FAILED,
            "%s; %s" % (reason, note),
            labels=labels,
            annotations={ctx.ann(s): None for s in dropped},
            warning=True,
            uncordon=uncordon,
        )
        return note

    def fail_after_host_work(self, reason: str) -> NoReturn:
        """Failure once the host may have changed: upgrade-failed, and the node stays cordoned."""
        self.transition(sm.UPGRADE_FAILED, reason + "; node stays cordoned", warning=True)
        raise UpgradeFailed("node %s: %s; node stays cordoned" % (self.ctx.name, reason))
