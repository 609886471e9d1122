# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""The status phase: the node's state and, with ``drain_preview``, what prepare would remove with
this policy (the pod-deletion step's accelerator pods and the drain's pods), the rule behind each pod,
the PodDisruptionBudgets that would refuse or are at risk, and the evictions the apiserver refuses
for good (dry run). Reads only; nothing is written.
"""

from __future__ import annotations

from typing import Optional

from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import drain, eviction_rules, operands, pod_removal
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.context import UpgradeContext
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.refusals import structural_refusals
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.start import unpausable_message
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.transitions import Transitions


def phase_status(ctx: UpgradeContext, tr: Transitions, entry: sm.Entry, reason: Optional[str]) -> None:
    """The node's state in the message; the drain preview in the result (would_evict, pod_rules,
    blocking_pdbs, pdbs_at_risk, drain_blockers, refused_evictions, waited_for)."""
    ctx.result["message"] = "node %s is in %s" % (ctx.name, ctx.state or "(no state label)")
    if not ctx.drain_preview or ctx.result["skipped"]:
        return  # the node alone (a node left alone has nothing to drain)
    # What prepare would remove with this policy: the accelerator pods of the pod-deletion step,
    # and the drain's pods when the drain runs (drain.enable, or a planned reboot).
    pods = ctx.pods()
    drain_policy = pod_removal.drain_policy(ctx)
    deletion = eviction_rules.plan_pod_deletion(
        pods, ctx.policy.pod_deletion, ctx.profile, pod_removal.claims(ctx, pods)
    )
    plan = pod_removal.plan_drain(ctx, pods, drain_policy)
    remove = set(deletion.remove) | (set(plan.remove) if drain_policy.enable else set())
    rules = dict(plan.rules) if drain_policy.enable else {}
    rules.update(deletion.rules)  # the pod-deletion step comes first: its rule names the pod
    ctx.result["pod_rules"] = {r: rules[r] for r in sorted(remove | set(deletion.wait) | set(plan.wait))
                               if r in rules}
    pod_removal.note_daemonset_users(ctx, pods)
    unpausable = operands.unpausable_dra_plugins(ctx.profile, pods)
    if unpausable:
        ctx.result["dra_plugin_unpausable"] = unpausable
        ctx.warnings.append(unpausable_message(ctx, unpausable))
    by_ref = {eviction_rules.pod_ref(p): p for p in pods}
    ctx.result["would_evict"] = sorted(remove)
    victims = [by_ref[r] for r in sorted(remove)]
    # Judged as the eviction subresource judges them: a Pending, finished or terminating victim, or
    # an unready one its PDB lets go, names no PDB here nor in refused_evictions.
    listed = drain.list_pdbs(ctx.policy_api) if victims else []
    ctx.result["blocking_pdbs"] = [p["detail"] for p in drain.blocking_from_items(listed, victims)]
    # Free to go now only because they have not started or are not Ready yet: said, not refused.
    at_risk = drain.pdbs_at_risk(listed, victims)
    ctx.result["pdbs_at_risk"] = [p["detail"] for p in at_risk]
    for p in at_risk:
        ctx.warnings.append(
            "node %s: PodDisruptionBudget %s lets %s go now only because not Ready yet; once Ready it "
            "would refuse the drain's eviction (the drain then waits up to its timeout)"
            % (ctx.name, p["pdb"], ", ".join(p["pods"]))
        )
    ctx.result["drain_blockers"] = plan.blockers if drain_policy.enable else deletion.blockers
    ctx.result["refused_evictions"] = structural_refusals(ctx, victims)
    ctx.result["waited_for"] = sorted(set(plan.wait) | set(deletion.wait))
