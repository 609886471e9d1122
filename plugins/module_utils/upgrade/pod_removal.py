# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""Pod removal steps of an upgrade: the pod-deletion step (accelerator pods) and the drain, both
through the Eviction API with PodDisruptionBudgets honoured; already-terminating pods are waited for;
before a reboot the drain is full whatever the policy says, and pods that cannot go stop it.
Which pods go is decided in ``eviction_rules``; the API calls are in ``drain``; what refuses them is
named by ``refusals``. Functions of (ctx, transitions); failures end through the abort path
before host work, upgrade-failed (cordoned) after it.
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any, Callable, Mapping, NoReturn, Optional

from ansible_collections.npuops.fleet.plugins.module_utils.k8s import retry as k8s_retry
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import drain, eviction_rules, operands
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.context import (
    UpgradeContext,
    describe,
    secs,
)
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.context import (
    deadline as deadline_in,
)
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.policy import Drain, timeout_or_none
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.refusals import (
    name_multiple_pdbs,
    refusing_now,
    structural_refusals,
)
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.transitions import Transitions

# Seconds each ResourceClaim GET is retried on transient errors.
CLAIM_READ_BUDGET = 30


def drain_policy(ctx: UpgradeContext) -> Drain:
    """The drain that applies: the policy's, or a full one when the host will reboot (a reboot
    takes every pod with it, whatever drain.enable and drain.podSelector say)."""
    if not ctx.reboot_planned:
        return ctx.policy.drain
    return dataclasses.replace(ctx.policy.drain, enable=True, pod_selector="")


def drain_rule(ctx: UpgradeContext, policy: Drain) -> str:
    """The rule that puts a pod in the drain, as the preview and summary name it."""
    if ctx.reboot_planned:
        return "drain before the reboot (every pod)"
    if policy.pod_selector:
        return "drain.podSelector %r" % policy.pod_selector
    return "drain (drain.enable: every pod)"


def plan_drain(ctx: UpgradeContext, pods: list[Mapping[str, Any]], policy: Drain) -> eviction_rules.PodPlan:
    """The drain's plan for ``pods`` (remove / wait / blockers / rules, "ns/pod" refs)."""
    plan = eviction_rules.plan_drain(pods, policy, ctx.profile["drain_skip_label"])
    rule = drain_rule(ctx, policy)
    plan.rules = {r: rule for r in plan.remove + plan.wait}
    if ctx.reboot_planned:
        # A drain-skip label keeps a pod through a drain, not through a reboot: it blocks.
        finished = {eviction_rules.pod_ref(p) for p in pods if eviction_rules.is_finished(p)}
        kept = [
            r for r in plan.ignored.pop("labelled %s=true" % ctx.profile["drain_skip_label"], [])
            if r not in finished
        ]
        if kept:
            plan.blockers.setdefault(
                "pods labelled %s=true (a reboot would kill them)" % ctx.profile["drain_skip_label"], []
            ).extend(kept)
    return plan


def claims(ctx: UpgradeContext, pods: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The ResourceClaims the DRA rule needs for ``pods`` (eviction_rules.claims_to_read): "ns/claim"
    -> the claim (dict) or why it could not be read. One GET each, once per call (kept for later
    steps); transient errors retried for up to 30 s per claim. Counted in resource_claim_reads."""
    for key in eviction_rules.claims_to_read(pods, ctx.profile):
        if key in ctx.claims_read:
            continue
        ns, name = key.split("/", 1)
        if ctx.resource_api is None:
            ctx.claims_read[key] = "no resource.k8s.io client"
            continue
        ctx.result["resource_claim_reads"] += 1
        try:
            resp = k8s_retry.call(
                ctx.resource_api.read_namespaced_resource_claim, name, ns, budget=CLAIM_READ_BUDGET,
                _preload_content=False,
            )
            ctx.claims_read[key] = json.loads(resp.data)
        except Exception as exc:  # noqa: BLE001 - counted as the vendor's, and said
            ctx.claims_read[key] = describe(exc)
            ctx.warnings.append(
                "node %s: ResourceClaim %s could not be read (%s): its pods count as accelerator pods"
                % (ctx.name, key, ctx.claims_read[key])
            )
    return ctx.claims_read


def note_daemonset_users(ctx: UpgradeContext, pods: list[Mapping[str, Any]]) -> None:
    """Say which DaemonSet pods use the device but are neither operands nor the DRA kubelet plugin:
    nothing removes them, so the module unload may find the device held (the host's holder check
    then names the process)."""
    plugin = [eviction_rules.pod_ref(p) for p in operands.dra_plugin_pods(ctx.profile, pods)]
    found = eviction_rules.accelerator_daemonset_pods(pods, ctx.profile, exclude=plugin)
    ctx.result["accelerator_daemonset_pods"] = found
    if found:
        ctx.warnings.append(
            "node %s: DaemonSet pods using the device stay on the node (a DaemonSet puts them back; they "
            "may hold the device at the unload): %s"
            % (ctx.name, ", ".join("%s [%s]" % kv for kv in sorted(found.items())))
        )


def failure_path(tr: Transitions, after_host_work: bool) -> Callable[[str], NoReturn]:
    """How a removal step fails: the abort before host work, upgrade-failed (cordoned) after it."""
    return tr.fail_after_host_work if after_host_work else tr.abort


def remove_pods(
    ctx: UpgradeContext,
    tr: Transitions,
    victims: list[Mapping[str, Any]],
    wait_refs: list[str],
    pods: list[Mapping[str, Any]],
    timeout_key: str,
    timeout: Optional[float],
    after_host_work: bool,
    result_key: str = "evicted",
) -> list[str]:
    """Evict ``victims`` (PDBs honoured, 429 retried until the step's ``timeout`` seconds), then wait
    until they and the already-terminating pods ``wait_refs`` are gone; the removed pods ("ns/pod") are
    added to ``result[result_key]`` ("evicted" for the drain, "deleted" for the pod-deletion step) and
    returned. Failures end the step with the pods, PDBs and the server's message."""
    fail = failure_path(tr, after_host_work)
    by_ref = {eviction_rules.pod_ref(p): p for p in pods}
    deadline = deadline_in(timeout)
    try:
        evicted = drain.evict(ctx.core, victims, deadline, sleep=ctx.sleep)
    except drain.DrainError as exc:
        ctx.result[result_key].extend(exc.removed)
        if exc.kind == drain.KIND_REFUSED:
            note = ""
            if exc.pod and drain.is_multiple_pdbs_answer(exc.server_message):
                note = "%s; " % name_multiple_pdbs(ctx, [exc.pod], by_ref)[exc.pod]
            fail("eviction refused by the API server (not retried): %s%s" % (note, exc))
        if exc.kind == drain.KIND_UNAVAILABLE:
            fail(
                "the API server did not accept evictions until %s=%s (transport errors or 5xx): %s"
                % (timeout_key, secs(timeout), exc)
            )
        pdbs = refusing_now(ctx, exc.remaining, by_ref)
        if pdbs is not None:
            ctx.result["blocking_pdbs"] = [p["detail"] for p in pdbs]
        fail(
            "evictions refused until %s=%s: PodDisruptionBudgets refusing them now: %s; pods still on "
            "the node: %s; %s"
            % (timeout_key, secs(timeout),
               "(could not be read)" if pdbs is None else ", ".join(p["pdb"] for p in pdbs) or "none found now",
               ", ".join(exc.remaining), exc)
        )
    ctx.result[result_key].extend(evicted)
    uids = {p["metadata"]["uid"] for p in victims}
    uids |= {by_ref[r]["metadata"]["uid"] for r in wait_refs if r in by_ref}
    ctx.result["waited_for"].extend(sorted(set(wait_refs) - set(ctx.result["waited_for"])))
    left = drain.wait_gone(
        ctx.core,
        ctx.name,
        uids,
        None if deadline is None else max(1.0, deadline - time.monotonic()),
        heartbeat=ctx.heartbeat,
    )
    if left:
        fail("pods still on the node after %s=%s: %s" % (timeout_key, secs(timeout), ", ".join(left)))
    return evicted


def with_rules(refs: list[str], rules: Mapping[str, str]) -> str:
    """"ns/a [rule], ns/b [rule]": the pods with the rule that matched each."""
    return ", ".join("%s [%s]" % (r, rules[r]) if r in rules else r for r in refs)


def delete_pods(ctx: UpgradeContext, tr: Transitions, nxt: str) -> tuple[str, str]:
    """The pod-deletion step: accelerator pods go through the Eviction API (PDBs honoured), as in
    the operators' upgrade library; already-terminating accelerator pods are waited for. Returns
    (the next state, the transition's reason)."""
    pods = ctx.pods()
    plan = eviction_rules.plan_pod_deletion(pods, ctx.policy.pod_deletion, ctx.profile, claims(ctx, pods))
    ctx.result["pod_rules"].update(plan.rules)
    drain_on = drain_policy(ctx).enable
    if plan.blockers:
        if drain_on:
            return (
                sm.DRAIN_REQUIRED,
                "pod deletion not possible (%s); the drain handles them" % plan.blocker_message(),
            )
        tr.abort("pod deletion blocked: %s" % plan.blocker_message())
    by_ref = {eviction_rules.pod_ref(p): p for p in pods}
    victims = [by_ref[r] for r in sorted(plan.remove)]
    if not victims and not plan.wait:
        return nxt, "no accelerator pods on the node"
    if ctx.check:
        ctx.result["would_evict"].extend(sorted(plan.remove))
        ctx.result["refused_evictions"].update(structural_refusals(ctx, victims))
        # These pods are evicted, so a PDB refusing them blocks this step too: the preflight must see it.
        pdbs = drain.blocking_pdbs(ctx.policy_api, victims)
        ctx.result["blocking_pdbs"].extend(p["detail"] for p in pdbs)
        ctx.result["waited_for"].extend(sorted(plan.wait))
        return nxt, "would evict accelerator pods %s%s" % (
            with_rules(sorted(plan.remove), plan.rules) or "none",
            "; would wait for terminating pods %s" % with_rules(sorted(plan.wait), plan.rules)
            if plan.wait else "",
        )
    timeout = timeout_or_none(ctx.policy.pod_deletion.timeout_seconds)
    evicted = remove_pods(
        ctx,
        tr,
        victims,
        sorted(plan.wait),
        pods,
        "podDeletion.timeoutSeconds",
        timeout,
        after_host_work=False,
        result_key="deleted",
    )
    why = "evicted accelerator pods %s" % (with_rules(evicted, plan.rules) or "none")
    if plan.wait:
        why += "; terminating pods gone: %s" % with_rules(sorted(plan.wait), plan.rules)
    return nxt, why


def drain_node(ctx: UpgradeContext, tr: Transitions, after_host_work: bool) -> str:
    """Evict the node's pods per the drain policy (or fully before a reboot) and wait until they,
    and every pod already terminating in the drain's scope, are gone. Returns the transition's reason."""
    policy = drain_policy(ctx)
    fail = failure_path(tr, after_host_work)
    pods = ctx.pods()
    plan = plan_drain(ctx, pods, policy)
    why = "the host will reboot (%s)" % ctx.reboot_reason if ctx.reboot_reason else "the host will reboot"
    if ctx.reboot_planned and not ctx.policy.drain.enable:
        ctx.result["full_drain"] = "%s: drained fully although drain.enable is false" % why
    elif ctx.reboot_planned and ctx.policy.drain.pod_selector:
        ctx.result["full_drain"] = "%s: drained fully, not only drain.podSelector %r" % (
            why,
            ctx.policy.drain.pod_selector,
        )
    for ref, rule in plan.rules.items():
        ctx.result["pod_rules"].setdefault(ref, rule)
    by_ref = {eviction_rules.pod_ref(p): p for p in pods}
    victims = [by_ref[r] for r in sorted(plan.remove)]
    pdbs = drain.blocking_pdbs(ctx.policy_api, victims)
    ctx.result["blocking_pdbs"] = sorted(set(ctx.result["blocking_pdbs"]) | {p["detail"] for p in pdbs})
    refused: dict[str, str] = {}
    if ctx.check:
        # A preview names every blocker at once: blocked pods, PDBs at 0 and refused evictions.
        refused = structural_refusals(ctx, victims)
        ctx.result["refused_evictions"].update(refused)
        ctx.result["would_evict"].extend(sorted(plan.remove))
        ctx.result["waited_for"].extend(sorted(plan.wait))
    problems = []
    if plan.blockers:
        problems.append(plan.blocker_message())
    if refused:
        refusals = "; ".join("%s: %s" % kv for kv in sorted(refused.items()))
        problems.append("the API server refuses to evict %s" % refusals)
    if problems:
        if pdbs:
            problems.append("PDBs refusing evictions now: %s" % "; ".join(p["detail"] for p in pdbs))
        fail(("drain before the reboot blocked: %s" if ctx.reboot_planned else "drain blocked: %s")
             % "; ".join(problems))
    if pdbs:
        ctx.warnings.append(
            "PDBs refusing evictions now (evictions are retried until drain.timeoutSeconds=%s): %s"
            % (
                secs(timeout_or_none(ctx.policy.drain.timeout_seconds)),
                "; ".join(ctx.result["blocking_pdbs"]),
            )
        )
    note = " (%s)" % ctx.result["full_drain"] if ctx.result["full_drain"] else ""
    if ctx.check:
        return "would evict %s%s" % (", ".join(sorted(plan.remove)) or "nothing", note)
    if not victims and not plan.wait:
        return "drained: nothing to evict%s" % note
    timeout = timeout_or_none(ctx.policy.drain.timeout_seconds)
    evicted = remove_pods(
        ctx, tr, victims, sorted(plan.wait), pods, "drain.timeoutSeconds", timeout, after_host_work=after_host_work
    )
    return "drained: evicted %s%s" % (", ".join(evicted) or "nothing", note)
