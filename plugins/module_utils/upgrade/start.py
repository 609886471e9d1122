# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""The start of an upgrade (the first part of prepare): the refusal of a DRA kubelet plugin the
operand pause cannot remove, admission (maxParallelUpgrades / maxUnavailable through the slot record,
the stop file), the re-check of the node once admitted, and the first transition (upgrade-required) -
all safe against concurrent runs, and all changing nothing when they refuse. Also the re-admission of
a resumed upgrade-required node. Functions of (ctx, transitions).
"""

from __future__ import annotations

import functools
import json
from typing import Optional

from ansible_collections.npuops.fleet.plugins.module_utils.k8s import wait as k8s_wait
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import admission, operands
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import record as node_record
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.context import UpgradeContext, describe
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.guards import stop_reason
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.states import UpgradeConflict, UpgradeFailed
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.transitions import Transitions

# The deploy label the docs suggest for the DRA kubelet plugin's DaemonSet (any <prefix><name> works).
DRA_PLUGIN_OPERAND = "dra-kubelet-plugin"


def unpausable_message(ctx: UpgradeContext, plugins: list[str]) -> str:
    """Why the DRA kubelet plugin pods ``plugins`` ("ns/pod (DaemonSet ns/name)") stop an upgrade."""
    return (
        "the DRA kubelet plugin %s selects no %s* deploy label that the pause changes (its driver and "
        "operands labels are never paused), so the upgrade cannot take it off and it would hold the driver at the "
        "unload; give its DaemonSet nodeSelector %s%s: \"true\" (NVIDIA's "
        "chart: kubeletPlugin.nodeSelector) and label the node so, or set vendor_profile."
        "dra_kubelet_plugin_selector if these pods are not the plugin"
        % (", ".join(plugins), ctx.profile["deploy_label_prefix"], ctx.profile["deploy_label_prefix"],
           DRA_PLUGIN_OPERAND)
    )


def start(ctx: UpgradeContext, tr: Transitions) -> None:
    """Admission, then the first transition (upgrade-required), both safe against concurrent runs."""
    claimed = admit(ctx)
    try:
        if not ctx.check:
            recheck_after_admission(ctx)
        why = "upgrade to driver %s requested (node has %s)" % (
            ctx.target,
            ctx.result["driver_version"] or "no driver label",
        )
        if ctx.state == sm.UPGRADE_FAILED:
            last = node_record.get_json_annotation(ctx.profile, ctx.node, node_record.LAST_TRANSITION) or {}
            why = "retry after upgrade-failed (%s); %s" % (last.get("reason", "?"), why)
        annotations = {ctx.ann(node_record.TARGET_VERSION): ctx.target}
        recorded = node_record.get_annotation(ctx.profile, ctx.node, node_record.DEVICES_BEFORE)
        if ctx.baseline and ctx.baseline.get("device_count") is not None and not recorded:
            annotations[ctx.ann(node_record.DEVICES_BEFORE)] = json.dumps(ctx.baseline, sort_keys=True)
        # Other runs treat the claim as expired after SLOT_GRACE: the label must land well before.
        ctx.claim_not_after = None if claimed is None else claimed + admission.SLOT_GRACE / 2
        tr.transition(sm.UPGRADE_REQUIRED, why, annotations=annotations)
    finally:
        ctx.claim_not_after = None
        if claimed is not None and ctx.slots is not None:
            try:
                released = ctx.slots.release(ctx.name, ctx.token)
            except Exception as exc:  # noqa: BLE001 - never hide the outcome of the start itself
                released = False
                ctx.warnings.append("admission slot release failed: %s" % describe(exc))
            if not released:
                ctx.warnings.append(
                    "could not remove the admission slot entry of node %s; it expires after %ds"
                    % (ctx.name, admission.SLOT_GRACE)
                )


def refuse_unpausable_dra_plugin(ctx: UpgradeContext) -> None:
    """Before admission and cordon: a DRA kubelet plugin on the node that the operand pause cannot
    remove refuses the upgrade (nothing changed). One pod LIST of the node with the profile's
    ``dra_kubelet_plugin_selector`` as label selector; none when the profile names no plugin."""
    selector = ctx.profile.get("dra_kubelet_plugin_selector")
    if not selector:
        return
    data = k8s_wait.list_raw(
        ctx.core.list_pod_for_all_namespaces, field_selector="spec.nodeName=%s" % ctx.name,
        label_selector=selector,
    )
    unpausable = operands.unpausable_dra_plugins(ctx.profile, data.get("items") or [])
    if unpausable:
        ctx.result["dra_plugin_unpausable"] = unpausable
        raise UpgradeFailed("node %s: %s (nothing was changed)" % (ctx.name, unpausable_message(ctx, unpausable)))


def recheck_after_admission(ctx: UpgradeContext) -> None:
    """The node as it is once admitted (the wait may have taken hours): a skip label set meanwhile
    leaves it alone, and a state another run or an admin wrote meanwhile is theirs; either way
    nothing is changed and the caller gives the slot back."""
    fresh = node_record.read_node(ctx.core, ctx.name)
    labels = node_record.labels(fresh)
    skip_label = ctx.profile["upgrade_skip_label"]
    if labels.get(skip_label) == "true":
        ctx.result["skipped"] = True
        ctx.result["skip_reason"] = (
            "node was labelled %s=true while it waited for admission; its driver is left alone" % skip_label
        )
        raise sm.UpgradeNotStarted("not started: %s (nothing was changed)" % ctx.result["skip_reason"])
    now = labels.get(ctx.profile["upgrade_state_label"]) or ""
    if now != (ctx.state or ""):
        raise UpgradeConflict(
            "node %s: state label changed from %s to %s while it waited for admission (another run or an "
            "admin is working on this node); this run changed nothing"
            % (ctx.name, ctx.state or "(none)", now or "(none)")
        )
    ctx.node = fresh


def admit(ctx: UpgradeContext) -> Optional[float]:
    """Wait for admission; the claim's time (slot clock, seconds) when a slot entry was claimed
    (released after the start), else None."""
    if ctx.check or ctx.slots is None:
        why = admission.check_admission(ctx.core, ctx.slots, ctx.profile, ctx.policy, ctx.name)
        if why:
            if not ctx.check:
                raise UpgradeFailed("node %s not admitted: %s (nothing was changed)" % (ctx.name, why))
            ctx.warnings.append("check mode: prepare would wait for admission: %s" % why)
        return None
    try:
        since, why = admission.wait_admission(
            ctx.core, ctx.slots, ctx.profile, ctx.policy, ctx.name, ctx.token, ctx.admission_timeout,
            stop=functools.partial(stop_reason, ctx), sleep=ctx.sleep,
        )
    except admission.AdmissionConflict as exc:
        raise UpgradeConflict("node %s: %s; this run changed nothing" % (ctx.name, exc))
    except admission.AdmissionStopped as exc:
        raise sm.UpgradeNotStarted(
            "not started: %s (node %s was not admitted; nothing was changed)" % (exc, ctx.name)
        ) from exc
    if why:
        raise UpgradeFailed("node %s not admitted %s: %s (nothing was changed)" % (ctx.name, within(ctx), why))
    return since


def within(ctx: UpgradeContext) -> str:
    """The admission timeout as the refusal says it."""
    if ctx.admission_timeout is None:
        return "(admission_timeout=0: it waited while another node was upgrading)"
    return "within admission_timeout=%ss" % ctx.admission_timeout


def wait_readmission(ctx: UpgradeContext) -> None:
    """A resumed upgrade-required node was admitted earlier, but a skip label in between may have
    let another node take its place: wait until the limits hold again with it counted."""
    if ctx.check:
        return
    try:
        waited = admission.wait_verdict(
            ctx.core, ctx.slots, ctx.profile, ctx.policy, ctx.name, ctx.admission_timeout,
            stop=functools.partial(stop_reason, ctx), sleep=ctx.sleep,
        )
    except admission.AdmissionStopped as exc:
        raise sm.UpgradeNotStarted(
            "not started: %s (node %s was not admitted again; nothing was changed)" % (exc, ctx.name)
        ) from exc
    if waited:
        raise UpgradeFailed(
            "node %s not admitted again %s: %s (nothing was changed)" % (ctx.name, within(ctx), waited)
        )
