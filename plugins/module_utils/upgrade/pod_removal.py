# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""Pod removal steps of NodeUpgrade: the pod-deletion step (accelerator pods) and the drain, both
through the Eviction API with PodDisruptionBudgets honoured; already-terminating pods are waited for;
before a reboot the drain is full whatever the policy says, and pods that cannot go stop it.
Which pods go is decided in ``eviction_rules``; the API calls are in ``drain``.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Optional

from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import drain, eviction_rules
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.policy import timeout_or_none


class PodRemovalSteps:
    """Mixin of NodeUpgrade (uses its node, policy, profile, result and failure paths)."""

    def _drain_policy(self) -> Any:
        """The drain that applies: the policy's, or a full one when the host will reboot (a reboot
        takes every pod with it, whatever drain.enable and drain.podSelector say)."""
        if not self.reboot_planned:
            return self.policy.drain
        return dataclasses.replace(self.policy.drain, enable=True, pod_selector="")

    def _drain_rule(self, drain_policy: Any) -> str:
        """The rule that puts a pod in the drain, as the preview and summary name it."""
        if self.reboot_planned:
            return "drain before the reboot (every pod)"
        if drain_policy.pod_selector:
            return "drain.podSelector %r" % drain_policy.pod_selector
        return "drain (drain.enable: every pod)"

    def _plan_drain(self, pods: list[dict[str, Any]], drain_policy: Any) -> eviction_rules.PodPlan:
        plan = eviction_rules.plan_drain(pods, drain_policy, self.profile["drain_skip_label"])
        rule = self._drain_rule(drain_policy)
        plan.rules = {r: rule for r in plan.remove + plan.wait}
        if self.reboot_planned:
            # A drain-skip label keeps a pod through a drain, not through a reboot: it blocks.
            finished = {eviction_rules.pod_ref(p) for p in pods if eviction_rules.is_finished(p)}
            kept = [
                r for r in plan.ignored.pop("labelled %s=true" % self.profile["drain_skip_label"], [])
                if r not in finished
            ]
            if kept:
                plan.blockers.setdefault(
                    "pods labelled %s=true (a reboot would kill them)" % self.profile["drain_skip_label"], []
                ).extend(kept)
        return plan

    def _still_there(self, refs: list[str], by_ref: dict[str, dict[str, Any]],
                     deadline: Optional[float] = None) -> list[dict[str, Any]]:
        """The pods ``refs`` as they are now (same uid), so that a pod Pending or unready when the step
        began and Ready by its timeout is judged as the apiserver judges it now; the step's own copies
        when the pods cannot be read (the API down at the timeout)."""
        try:
            now = {eviction_rules.pod_ref(p): p for p in drain.list_node_pods(
                self.core, self.name, deadline=deadline or time.monotonic() + 10)}
        except Exception:  # noqa: BLE001 - any read failure: judge what the step saw
            return [by_ref[r] for r in refs if r in by_ref]
        uid = {r: (by_ref.get(r) or {}).get("metadata", {}).get("uid") for r in refs}
        return [now[r] for r in refs if r in now and now[r]["metadata"].get("uid") == uid[r]]

    def _refusing_now(self, refs: list[str], by_ref: dict[str, dict[str, Any]]) -> Optional[list[dict[str, Any]]]:
        """The PDBs refusing the pods ``refs`` as they are at a step's timeout, within 10 s (the step is
        failing already: its message must not wait out an API outage); None when they cannot be read."""
        deadline = time.monotonic() + 10
        pods = self._still_there(refs, by_ref, deadline)
        try:
            return drain.blocking_from_items(drain.list_pdbs(self.policy_api, deadline=deadline), pods)
        except Exception:  # noqa: BLE001 - the failure message says they could not be read
            return None

    def _name_multiple_pdbs(self, refs: list[str], by_ref: dict[str, dict[str, Any]]) -> dict[str, str]:
        """For the pods ``refs`` that met the apiserver's multiple-PDB 500 (whose message names no PDB):
        "ns/pod" -> :func:`drain.covering_note` naming every PDB that covers it now (namespace and
        selector), read within 10 s (a failing step's message must not wait out an API outage)."""
        pods = [by_ref[r] for r in refs if r in by_ref]
        try:
            covering: Optional[dict[str, list[str]]] = drain.covering_from_items(
                drain.list_pdbs(self.policy_api, deadline=time.monotonic() + 10), pods
            )
        except Exception:  # noqa: BLE001 - the note says they could not be read
            covering = None
        return {r: drain.covering_note(r, None if covering is None else covering.get(r, [])) for r in refs}

    def _structural_refusals(self, victims: list[dict[str, Any]]) -> dict[str, str]:
        """Pods the Eviction API refuses for a reason no retry changes (several PDBs, an admission
        policy, RBAC): from the PDBs (no write) and a server-side dry-run eviction of each pod."""
        refused = dict(drain.multi_pdb_pods(self.policy_api, victims))
        try:
            rest = [v for v in victims if eviction_rules.pod_ref(v) not in refused]
            probed = drain.probe_evictions(self.core, rest, sleep=self.sleep)
        except Exception as exc:  # noqa: BLE001 - a preflight probe must not fail the read-only phases
            self.warnings.append("dry-run evictions not possible: %s" % self._describe(exc))
            return refused
        # The dry run met the multiple-PDB 500 that the PDB list did not predict (a PDB made since).
        multiple = [r for r, why in probed.items() if drain.is_multiple_pdbs_answer(why)]
        if multiple:  # a PDB LIST only when there is a pod to name its PDBs for
            for ref, note in self._name_multiple_pdbs(multiple, {eviction_rules.pod_ref(v): v for v in rest}).items():
                probed[ref] = "%s; %s" % (probed[ref], note)
        refused.update(probed)
        return refused

    def _remove_pods(
        self,
        victims: list[dict[str, Any]],
        wait_refs: list[str],
        pods: list[dict[str, Any]],
        timeout_key: str,
        timeout: Optional[float],
        after_host_work: bool,
        result_key: str = "evicted",
    ) -> list[str]:
        """Evict ``victims`` (PDBs honoured, 429 retried until the step's timeout), then wait until they
        and the already-terminating pods ``wait_refs`` are gone; the removed pods are added to
        ``result[result_key]`` ("evicted" for the drain, "deleted" for the pod-deletion step). Failures
        end the step with the pods, PDBs and the server's message."""
        fail = self._fail_after_host_work if after_host_work else self._abort
        by_ref = {eviction_rules.pod_ref(p): p for p in pods}
        deadline = self._deadline(timeout)
        try:
            evicted = drain.evict(self.core, victims, deadline, sleep=self.sleep)
        except drain.DrainError as exc:
            self.result[result_key].extend(exc.removed)
            if exc.kind == drain.KIND_REFUSED:
                note = ""
                if exc.pod and drain.is_multiple_pdbs_answer(exc.server_message):
                    note = "%s; " % self._name_multiple_pdbs([exc.pod], by_ref)[exc.pod]
                fail("eviction refused by the API server (not retried): %s%s" % (note, exc))
            if exc.kind == drain.KIND_UNAVAILABLE:
                fail(
                    "the API server did not accept evictions until %s=%s (transport errors or 5xx): %s"
                    % (timeout_key, self._secs(timeout), exc)
                )
            pdbs = self._refusing_now(exc.remaining, by_ref)
            if pdbs is not None:
                self.result["blocking_pdbs"] = [p["detail"] for p in pdbs]
            fail(
                "evictions refused until %s=%s: PodDisruptionBudgets refusing them now: %s; pods still on "
                "the node: %s; %s"
                % (timeout_key, self._secs(timeout),
                   "(could not be read)" if pdbs is None else ", ".join(p["pdb"] for p in pdbs) or "none found now",
                   ", ".join(exc.remaining), exc)
            )
        self.result[result_key].extend(evicted)
        uids = {p["metadata"]["uid"] for p in victims}
        uids |= {by_ref[r]["metadata"]["uid"] for r in wait_refs if r in by_ref}
        self.result["waited_for"].extend(sorted(set(wait_refs) - set(self.result["waited_for"])))
        left = drain.wait_gone(
            self.core,
            self.name,
            uids,
            None if deadline is None else max(1.0, deadline - time.monotonic()),
            heartbeat=self._heartbeat,
        )
        if left:
            fail("pods still on the node after %s=%s: %s" % (timeout_key, self._secs(timeout), ", ".join(left)))
        return evicted

    def _delete_pods(self, nxt: str) -> tuple[str, str]:
        """The pod-deletion step: accelerator pods go through the Eviction API (PDBs honoured), as in
        the operators' upgrade library; already-terminating accelerator pods are waited for."""
        pods = self._pods()
        plan = eviction_rules.plan_pod_deletion(pods, self.policy.pod_deletion, self.profile, self._claims(pods))
        self.result["pod_rules"].update(plan.rules)
        drain_on = self._drain_policy().enable
        if plan.blockers:
            if drain_on:
                return (
                    sm.DRAIN_REQUIRED,
                    "pod deletion not possible (%s); the drain handles them" % plan.blocker_message(),
                )
            self._abort("pod deletion blocked: %s" % plan.blocker_message())
        by_ref = {eviction_rules.pod_ref(p): p for p in pods}
        victims = [by_ref[r] for r in sorted(plan.remove)]
        if not victims and not plan.wait:
            return nxt, "no accelerator pods on the node"
        if self.check:
            self.result["would_evict"].extend(sorted(plan.remove))
            self.result["refused_evictions"].update(self._structural_refusals(victims))
            # These pods are evicted, so a PDB refusing them blocks this step too: the preflight must see it.
            pdbs = drain.blocking_pdbs(self.policy_api, victims)
            self.result["blocking_pdbs"].extend(p["detail"] for p in pdbs)
            self.result["waited_for"].extend(sorted(plan.wait))
            return nxt, "would evict accelerator pods %s%s" % (
                self._with_rules(sorted(plan.remove), plan.rules) or "none",
                "; would wait for terminating pods %s" % self._with_rules(sorted(plan.wait), plan.rules)
                if plan.wait else "",
            )
        timeout = timeout_or_none(self.policy.pod_deletion.timeout_seconds)
        evicted = self._remove_pods(
            victims,
            sorted(plan.wait),
            pods,
            "podDeletion.timeoutSeconds",
            timeout,
            after_host_work=False,
            result_key="deleted",
        )
        why = "evicted accelerator pods %s" % (self._with_rules(evicted, plan.rules) or "none")
        if plan.wait:
            why += "; terminating pods gone: %s" % self._with_rules(sorted(plan.wait), plan.rules)
        return nxt, why

    @staticmethod
    def _with_rules(refs: list[str], rules: dict[str, str]) -> str:
        """"ns/a [rule], ns/b [rule]": the pods with the rule that matched each."""
        return ", ".join("%s [%s]" % (r, rules[r]) if r in rules else r for r in refs)

    def _drain(self, after_host_work: bool) -> str:
        """Evict the node's pods per the drain policy (or fully before a reboot) and wait until they,
        and every pod already terminating in the drain's scope, are gone."""
        drain_policy = self._drain_policy()
        fail = self._fail_after_host_work if after_host_work else self._abort
        pods = self._pods()
        plan = self._plan_drain(pods, drain_policy)
        why = "the host will reboot (%s)" % self.reboot_reason if self.reboot_reason else "the host will reboot"
        if self.reboot_planned and not self.policy.drain.enable:
            self.result["full_drain"] = "%s: drained fully although drain.enable is false" % why
        elif self.reboot_planned and self.policy.drain.pod_selector:
            self.result["full_drain"] = "%s: drained fully, not only drain.podSelector %r" % (
                why,
                self.policy.drain.pod_selector,
            )
        for ref, rule in plan.rules.items():
            self.result["pod_rules"].setdefault(ref, rule)
        by_ref = {eviction_rules.pod_ref(p): p for p in pods}
        victims = [by_ref[r] for r in sorted(plan.remove)]
        pdbs = drain.blocking_pdbs(self.policy_api, victims)
        self.result["blocking_pdbs"] = sorted(set(self.result["blocking_pdbs"]) | {p["detail"] for p in pdbs})
        refused: dict[str, str] = {}
        if self.check:
            # A preview names every blocker at once: blocked pods, PDBs at 0 and refused evictions.
            refused = self._structural_refusals(victims)
            self.result["refused_evictions"].update(refused)
            self.result["would_evict"].extend(sorted(plan.remove))
            self.result["waited_for"].extend(sorted(plan.wait))
        problems = []
        if plan.blockers:
            problems.append(plan.blocker_message())
        if refused:
            refusals = "; ".join("%s: %s" % kv for kv in sorted(refused.items()))
            problems.append("the API server refuses to evict %s" % refusals)
        if problems:
            if pdbs:
                problems.append("PDBs refusing evictions now: %s" % "; ".join(p["detail"] for p in pdbs))
            fail(("drain before the reboot blocked: %s" if self.reboot_planned else "drain blocked: %s")
                 % "; ".join(problems))
        if pdbs:
            self.warnings.append(
                "PDBs refusing evictions now (evictions are retried until drain.timeoutSeconds=%s): %s"
                % (
                    self._secs(timeout_or_none(self.policy.drain.timeout_seconds)),
                    "; ".join(self.result["blocking_pdbs"]),
                )
            )
        note = " (%s)" % self.result["full_drain"] if self.result["full_drain"] else ""
        if self.check:
            return "would evict %s%s" % (", ".join(sorted(plan.remove)) or "nothing", note)
        if not victims and not plan.wait:
            return "drained: nothing to evict%s" % note
        timeout = timeout_or_none(self.policy.drain.timeout_seconds)
        evicted = self._remove_pods(
            victims, sorted(plan.wait), pods, "drain.timeoutSeconds", timeout, after_host_work=after_host_work
        )
        return "drained: evicted %s%s" % (", ".join(evicted) or "nothing", note)
