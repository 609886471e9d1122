# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""What refuses the pod removal steps' evictions, as the failure messages and previews name it: the
pods as they are now, the PodDisruptionBudgets refusing them at a step's timeout (read within 10 s),
the PDBs of the apiserver's multiple-PDB 500, and the structural refusals (several PDBs, an admission
policy, RBAC) found by dry-run evictions. Reads only; the removal itself is in ``pod_removal``.
"""

from __future__ import annotations

import time
from typing import Any, Mapping, Optional

from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import drain, eviction_rules
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.context import UpgradeContext, describe
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.states import UpgradeConflict

# Seconds a failing step may spend reading pods / PDBs for its message (it must not wait out an outage).
READ_BUDGET = 10

Pods = dict[str, Mapping[str, Any]]  # "ns/pod" -> the pod


def still_there(ctx: UpgradeContext, refs: list[str], by_ref: Pods,
                deadline: Optional[float] = None) -> list[Mapping[str, Any]]:
    """The pods ``refs`` as they are now (same uid), so that a pod Pending or unready when the step
    began and Ready by its timeout is judged as the apiserver judges it now; the step's own copies
    when the pods cannot be read (the API down at the timeout). ``deadline``: time.monotonic() seconds."""
    try:
        now = {eviction_rules.pod_ref(p): p for p in drain.list_node_pods(
            ctx.core, ctx.name, deadline=deadline or time.monotonic() + READ_BUDGET)}
    except Exception:  # noqa: BLE001 - any read failure: judge what the step saw
        return [by_ref[r] for r in refs if r in by_ref]
    uid = {r: (by_ref.get(r) or {}).get("metadata", {}).get("uid") for r in refs}
    return [now[r] for r in refs if r in now and now[r]["metadata"].get("uid") == uid[r]]


def refusing_now(ctx: UpgradeContext, refs: list[str], by_ref: Pods) -> Optional[list[dict[str, Any]]]:
    """The PDBs refusing the pods ``refs`` as they are at a step's timeout, within 10 s (the step is
    failing already: its message must not wait out an API outage); None when they cannot be read."""
    deadline = time.monotonic() + READ_BUDGET
    pods = still_there(ctx, refs, by_ref, deadline)
    try:
        return drain.blocking_from_items(drain.list_pdbs(ctx.policy_api, deadline=deadline), pods)
    except Exception:  # noqa: BLE001 - the failure message says they could not be read
        return None


def name_multiple_pdbs(ctx: UpgradeContext, refs: list[str], by_ref: Pods) -> dict[str, str]:
    """For the pods ``refs`` that met the apiserver's multiple-PDB 500 (whose message names no PDB):
    "ns/pod" -> :func:`drain.covering_note` naming every PDB that covers it now (namespace and
    selector), read within 10 s (a failing step's message must not wait out an API outage)."""
    pods = [by_ref[r] for r in refs if r in by_ref]
    try:
        covering: Optional[dict[str, list[str]]] = drain.covering_from_items(
            drain.list_pdbs(ctx.policy_api, deadline=time.monotonic() + READ_BUDGET), pods
        )
    except Exception:  # noqa: BLE001 - the note says they could not be read
        covering = None
    return {r: drain.covering_note(r, None if covering is None else covering.get(r, [])) for r in refs}


def structural_refusals(ctx: UpgradeContext, victims: list[Mapping[str, Any]]) -> dict[str, str]:
    """Pods the Eviction API refuses for a reason no retry changes (several PDBs, an admission
    policy, RBAC): from the PDBs (no write) and a server-side dry-run eviction of each pod.
    "ns/pod" -> why."""
    refused = dict(drain.multi_pdb_pods(ctx.policy_api, victims))
    try:
        rest = [v for v in victims if eviction_rules.pod_ref(v) not in refused]
        probed = drain.probe_evictions(ctx.core, rest, sleep=ctx.sleep)
    except UpgradeConflict:
        raise  # the run-wide Lease was lost in a pause: the caller reports lease_lost
    except Exception as exc:  # noqa: BLE001 - a preflight probe must not fail the read-only phases
        ctx.warnings.append("dry-run evictions not possible: %s" % describe(exc))
        return refused
    # The dry run met the multiple-PDB 500 that the PDB list did not predict (a PDB made since).
    multiple = [r for r, why in probed.items() if drain.is_multiple_pdbs_answer(why)]
    if multiple:  # a PDB LIST only when there is a pod to name its PDBs for
        for ref, note in name_multiple_pdbs(ctx, multiple, {eviction_rules.pod_ref(v): v for v in rest}).items():
            probed[ref] = "%s; %s" % (probed[ref], note)
    refused.update(probed)
    return refused
