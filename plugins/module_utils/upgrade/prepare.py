# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""The prepare phase: the start (``start``: admission and the first transition, both safe
against concurrent runs), then cordon, wait for jobs, pod deletion / drain (``pod_removal``)
and the operand pause, up to pod-restart-required ("ready for host work"). Any failure after the start
goes through the abort path (operands and schedulability restored, upgrade-failed, an Event).
Functions of (ctx, transitions).
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Optional

from ansible_collections.npuops.fleet.plugins.module_utils.k8s import wait as k8s_wait
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import cordon, eviction_rules, operands, pod_removal
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import record as node_record
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import start as upgrade_start
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.context import UpgradeContext, describe
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.policy import timeout_or_none
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.states import UpgradeFailed
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.transitions import Transitions


def phase_prepare(ctx: UpgradeContext, tr: Transitions, entry: sm.Entry, reason: Optional[str]) -> None:
    """Start (entry "start") or resume the upgrade and run its steps up to pod-restart-required."""
    if entry.action == "start":
        if not ctx.target:
            raise UpgradeFailed("node %s: target_version is required to start an upgrade" % ctx.name)
        upgrade_start.refuse_unpausable_dra_plugin(ctx)
        upgrade_start.start(ctx, tr)
    if ctx.check:
        prepare_steps(ctx, tr, entry)
        return
    try:
        prepare_steps(ctx, tr, entry)
    except (UpgradeFailed, sm.UpgradeNotStarted):
        # already aborted, another run's move (UpgradeConflict), or a stop before re-admission (nothing
        # changed): nothing to undo here
        raise
    except Exception as exc:  # noqa: BLE001 - every other failure after the start goes through the abort
        reason = "unexpected error in %s: %s" % (ctx.state or "(no state)", describe(exc))
        try:
            tr.abort(reason)
        except UpgradeFailed:
            raise
        except Exception as exc2:  # noqa: BLE001
            raise UpgradeFailed(
                "node %s: %s; the abort could not complete either (%s): the node may still be cordoned in %s; "
                "rerun prepare, or run phase=fail" % (ctx.name, reason, describe(exc2), ctx.state)
            ) from exc


def prepare_steps(ctx: UpgradeContext, tr: Transitions, entry: sm.Entry) -> None:
    """The steps from the node's state on, each ending in its transition (sm.prepare_next's order)."""
    if entry.action == "resume" and ctx.state == sm.UPGRADE_REQUIRED:
        upgrade_start.wait_readmission(ctx)
    if entry.action == "resume" and ctx.state not in (sm.UPGRADE_REQUIRED, sm.CORDON_REQUIRED):
        # Past the cordon step the node must be cordoned (an abort killed midway, or someone
        # uncordoned it): cordon again, keeping the record if there is one.
        ctx.node = cordon.cordon(ctx.core, ctx.profile, ctx.node, ctx.check)
    drain_on = pod_removal.drain_policy(ctx).enable
    while True:
        nxt = sm.prepare_next(ctx.state, drain_on)
        if nxt is None:
            break
        why = "step done"
        if ctx.state == sm.UPGRADE_REQUIRED:
            why = "admitted"
        elif ctx.state == sm.CORDON_REQUIRED:
            was = cordon.is_cordoned(ctx.node)
            ctx.node = cordon.cordon(ctx.core, ctx.profile, ctx.node, ctx.check)
            why = (
                "node was already cordoned before the upgrade; it stays cordoned afterwards"
                if (
                    node_record.get_annotation(ctx.profile, ctx.node, node_record.UNSCHEDULABLE_BEFORE) == "true"
                    or (ctx.check and was)
                )
                else "node cordoned"
            )
        elif ctx.state == sm.WAIT_FOR_JOBS_REQUIRED:
            why = wait_for_jobs(ctx)
        elif ctx.state == sm.POD_DELETION_REQUIRED:
            nxt, why = pod_removal.delete_pods(ctx, tr, nxt)
        elif ctx.state == sm.DRAIN_REQUIRED:
            why = pod_removal.drain_node(ctx, tr, after_host_work=False)
        annotations = None
        if nxt == sm.POD_RESTART_REQUIRED:
            why += "; " + pause_operands(ctx, tr)
            if not node_record.get_annotation(ctx.profile, ctx.node, node_record.HOST_WORK_STARTED):
                annotations = {ctx.ann(node_record.HOST_WORK_STARTED): node_record.now_iso()}
        tr.transition(nxt, why, annotations=annotations)
    ctx.result["message"] = "node %s is ready for host work (%s)" % (ctx.name, ctx.state)


def wait_for_jobs(ctx: UpgradeContext) -> str:
    """Wait (waitForCompletion.timeoutSeconds) until no pod matching waitForCompletion.podSelector is
    on the node; a timeout is a warning, not a failure. Returns the transition's reason."""
    wfc = ctx.policy.wait_for_completion
    if not wfc.pod_selector:
        return "waitForCompletion.podSelector empty: step skipped"
    if ctx.check:
        left = eviction_rules.pods_matching(ctx.pods(), wfc.pod_selector)
        return "would wait for %d job pod(s): %s" % (len(left), ", ".join(left))
    res = k8s_wait.wait_for(
        ctx.core.list_pod_for_all_namespaces,
        lambda items: not eviction_rules.pods_matching(items, wfc.pod_selector),
        timeout_or_none(wfc.timeout_seconds),
        field_selector="spec.nodeName=%s" % ctx.name,
        heartbeat=ctx.heartbeat,
    )
    if res.ok:
        return "job pods matching %r finished" % wfc.pod_selector
    left = eviction_rules.pods_matching(res.items, wfc.pod_selector)
    ctx.warnings.append(
        "waitForCompletion timed out after %ss; going on with %s" % (wfc.timeout_seconds, ", ".join(left))
    )
    return "waitForCompletion timed out after %ss with pods still running: %s" % (
        wfc.timeout_seconds,
        ", ".join(left),
    )


def pause_operands(ctx: UpgradeContext, tr: Transitions) -> str:
    """Set the operand deploy labels to their paused values (the values before recorded once, in
    ``operand-labels-before``) and wait (operands_timeout) until their pods have left; a DRA kubelet
    plugin the pause cannot remove aborts. Returns the transition's reason."""
    labels = ctx.labels()
    recorded = node_record.get_json_annotation(ctx.profile, ctx.node, node_record.OPERAND_LABELS_BEFORE)
    pods = ctx.pods()
    unpausable = operands.unpausable_dra_plugins(ctx.profile, pods)
    if unpausable:  # a resumed upgrade, or a plugin that came after the start's check
        ctx.result["dra_plugin_unpausable"] = unpausable
        tr.abort(upgrade_start.unpausable_message(ctx, unpausable))
    pod_removal.note_daemonset_users(ctx, pods)
    annotations: dict[str, str] = {}
    found = ""
    plugins = operands.dra_plugin_daemonsets(ctx.profile, pods)
    if plugins:
        found += "; DRA kubelet plugin %s paused with the operands" % ", ".join(plugins)
    if recorded is None:
        before, changes = operands.pause_plan(ctx.profile, labels)
        annotations[ctx.ann(node_record.OPERAND_LABELS_BEFORE)] = json.dumps(before, sort_keys=True)
        annotations[ctx.ann(node_record.OPERAND_DAEMONSETS)] = json.dumps(
            operands.operand_daemonsets(ctx.profile, pods)
        )
        # Paused with no pause of ours recorded: left so by a controller that died before restoring it.
        stale = ", ".join(
            "%s=%s recorded as %s" % (k, labels[k], v) for k, v in sorted(before.items()) if labels[k] != v
        )
        if stale:
            found += "; found paused with no upgrade in progress: %s" % stale
            ctx.warnings.append(
                "node %s: operand deploy labels found paused with no upgrade in progress (left by a controller "
                "that did not restore them): %s; finish restores these values" % (ctx.name, stale)
            )
    else:
        before = recorded
        changes = {
            k: operands.paused_value(v) for k, v in before.items() if labels.get(k) != operands.paused_value(v)
        }
    paused = {k for k, v in before.items() if operands.paused_value(v) != v}
    if ctx.check:
        would = "would pause operands %s" % ", ".join(sorted(changes)) if changes else "no operands to pause"
        return would + found
    if changes or annotations:
        ctx.node = node_record.patch_node(
            ctx.core, ctx.name, {"metadata": {"labels": changes, "annotations": annotations}}
        )

    def left(items: list[Mapping[str, Any]]) -> list[str]:
        return operands.paused_operand_pods(ctx.profile, items, paused)

    res = k8s_wait.wait_for(
        ctx.core.list_pod_for_all_namespaces,
        lambda items: not left(list(items)),
        ctx.operands_timeout,
        field_selector="spec.nodeName=%s" % ctx.name,
        heartbeat=ctx.heartbeat,
    )
    if not res.ok:
        tr.abort(
            "operand pods did not leave within %ss after pausing: %s"
            % (ctx.operands_timeout, ", ".join(left(list(res.items))))
        )
    return "operands paused (%s)%s" % (", ".join(sorted(paused)) or "none", found)
