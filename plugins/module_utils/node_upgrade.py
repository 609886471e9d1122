# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""NodeUpgrade: runs one phase (prepare, reboot, finish, fail, status) of a node's driver upgrade on
the Kubernetes API. The order of states is in ``upgrade_state_machine``; the steps' work lives in
``cordon``, ``drain`` + ``eviction_rules``, ``operands``, ``admission`` and ``upgrade_validation``;
what is written on the node (label, annotations, events) in ``node_record``.
"""

from __future__ import annotations

import json
import time
from typing import Any, Mapping, Optional

from ansible_collections.npuops.fleet.plugins.module_utils import (
    admission,
    cordon,
    drain,
    eviction_rules,
    k8s_wait,
    node_record,
    operands,
    upgrade_validation,
)
from ansible_collections.npuops.fleet.plugins.module_utils import upgrade_state_machine as sm
from ansible_collections.npuops.fleet.plugins.module_utils.driver_labels import node_driver_version, versions_equal
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade_policy import timeout_or_none
from ansible_collections.npuops.fleet.plugins.module_utils.vendor_profiles import annotation_key

try:
    from kubernetes import client as k8s
except ImportError:  # pragma: no cover - reported by the module
    k8s = None


class UpgradeFailed(RuntimeError):
    """The phase failed; the node's label/annotations already say why (unless check mode)."""


class NodeUpgrade:
    def __init__(
        self,
        api_client: Any,
        profile: Mapping[str, Any],
        policy: Any,
        node_name: str,
        target_version: Optional[str] = None,
        check_mode: bool = False,
        admission_timeout: Optional[float] = 600,
        operands_timeout: Optional[float] = 300,
        validation_timeout: Optional[float] = 600,
        retry_failed: bool = True,
        core: Any = None,
        policy_api: Any = None,
    ) -> None:
        # core / policy_api may be injected (unit tests use in-memory fakes).
        self.core = core or k8s.CoreV1Api(api_client)
        self.policy_api = policy_api or k8s.PolicyV1Api(api_client)
        self.profile = profile
        self.policy = policy
        self.name = node_name
        self.target = target_version
        self.check = check_mode
        self.admission_timeout = admission_timeout
        self.operands_timeout = operands_timeout
        self.validation_timeout = validation_timeout
        self.retry_failed = retry_failed
        self.node: dict[str, Any] = {}
        self.state = ""
        self.changed = False
        self.warnings: list[str] = []
        self.result: dict[str, Any] = {
            "node": node_name,
            "state": None,
            "previous_state": None,
            "transitions": [],
            "skipped": False,
            "skip_reason": None,
            "at_target": False,
            "host_work_required": True,
            "evicted": [],
            "deleted": [],
            "would_evict": [],
            "cordoned_by_upgrade": False,
            "blocking_pdbs": [],
            "message": "",
            "driver_version": None,
            "target_version": target_version,
        }

    # ---- helpers -------------------------------------------------------------------------------
    def _ann(self, suffix: str) -> str:
        return annotation_key(self.profile, suffix)

    def _labels(self) -> dict[str, str]:
        return node_record.labels(self.node)

    def _transition(
        self,
        to: str,
        reason: str,
        labels: Optional[dict] = None,
        annotations: Optional[dict] = None,
        warning: bool = False,
    ) -> None:
        rec = sm.transition_record(self.state, to, reason, node_record.now_iso())
        self.result["transitions"].append(rec)
        if not self.check:
            anns = dict(annotations or {}, **{self._ann(node_record.LAST_TRANSITION): json.dumps(rec)})
            ops = node_record.transition_ops(
                self.node, self.profile["upgrade_state_label"], self.state, to, anns, labels
            )
            try:
                self.node = node_record.patch_node(self.core, self.name, ops)
            except Exception as exc:  # noqa: BLE001
                if getattr(exc, "status", None) not in (409, 422):
                    raise
                now = node_record.labels(node_record.read_node(self.core, self.name)).get(
                    self.profile["upgrade_state_label"]
                )
                raise UpgradeFailed(
                    "node %s: state label changed from %s to %s meanwhile (another run or an admin is working on "
                    "this node); nothing more was changed" % (self.name, self.state or "(none)", now)
                )
            if self._labels().get(self.profile["upgrade_state_label"]) != to:
                raise UpgradeFailed("node %s: state label did not change to %s" % (self.name, to))
            err = node_record.create_event(
                self.core,
                self.node,
                "DriverUpgradeFailed" if warning else "DriverUpgradeStateChanged",
                "%s -> %s: %s" % (rec["from"] or "(none)", to, reason),
                warning=warning,
            )
            if err:
                self.warnings.append(err)
            self.changed = True
        self.state = to

    def _deadline(self, timeout: Optional[float]) -> Optional[float]:
        return None if timeout is None else time.monotonic() + timeout

    def _pods(self) -> list[dict[str, Any]]:
        return drain.list_node_pods(self.core, self.name)

    # ---- entry point ---------------------------------------------------------------------------
    def run(self, phase: str, reason: Optional[str] = None) -> dict[str, Any]:
        self.node = node_record.read_node(self.core, self.name)
        self.state = self._labels().get(self.profile["upgrade_state_label"], "")
        self.result["previous_state"] = self.state or None
        if not self.target:
            self.target = node_record.get_annotation(self.profile, self.node, node_record.TARGET_VERSION)
            self.result["target_version"] = self.target
        version = node_driver_version(self.profile, self._labels())
        self.result["driver_version"] = version
        self.result["at_target"] = versions_equal(version, self.target)
        skip_label = self.profile["upgrade_skip_label"]
        try:
            if self._labels().get(skip_label) == "true":
                self.result["skipped"] = True
                self.result["skip_reason"] = "node is labelled %s=true; its driver is left alone" % skip_label
                self.result["message"] = self.result["skip_reason"]
                if self.state in sm.IN_PROGRESS_STATES:
                    self.result["message"] += " (it stays in %s)" % self.state
                if phase != "status":
                    return self._finish_result()
            entry = sm.phase_entry(
                phase,
                self.state,
                self.result["at_target"],
                node_record.has_bookkeeping(self.profile, self.node),
                self.retry_failed,
            )
            if entry.action == "error":
                raise UpgradeFailed("node %s: %s" % (self.name, entry.message))
            getattr(self, "_phase_" + phase)(entry, reason)
        except UpgradeFailed as exc:
            self.result["message"] = str(exc)
            self._finish_result()
            raise
        return self._finish_result()

    def _finish_result(self) -> dict[str, Any]:
        self.result["state"] = self.state or None
        self.result["cordoned_by_upgrade"] = cordon.cordoned_by_upgrade(self.profile, self.node)
        self.result["changed"] = self.changed
        if self.result["at_target"] and self.state in sm.IDLE_STATES + (sm.POD_RESTART_REQUIRED,):
            self.result["host_work_required"] = False
        return self.result

    # ---- phases --------------------------------------------------------------------------------
    def _phase_status(self, entry: sm.Entry, reason: Optional[str]) -> None:
        pods = self._pods()
        plan = eviction_rules.plan_drain(pods, self.policy.drain, self.profile["drain_skip_label"])
        by_ref = {eviction_rules.pod_ref(p): p for p in pods}
        self.result["would_evict"] = sorted(plan.remove) if self.policy.drain.enable else []
        pdbs = drain.blocking_pdbs(self.policy_api, [by_ref[r] for r in plan.remove])
        self.result["blocking_pdbs"] = [p["detail"] for p in pdbs]
        self.result["drain_blockers"] = plan.blockers
        self.result["message"] = "node %s is in %s" % (self.name, self.state or "(no state label)")

    def _phase_fail(self, entry: sm.Entry, reason: Optional[str]) -> None:
        reason = reason or "upgrade failed (no reason given)"
        last = node_record.get_json_annotation(self.profile, self.node, node_record.LAST_TRANSITION) or {}
        if self.state == sm.UPGRADE_FAILED and last.get("reason") == reason:
            self.result["message"] = "node %s already upgrade-failed: %s" % (self.name, reason)
            return
        self._transition(sm.UPGRADE_FAILED, reason, warning=True)
        self.result["message"] = "node %s marked upgrade-failed (it stays cordoned): %s" % (self.name, reason)

    def _phase_reboot(self, entry: sm.Entry, reason: Optional[str]) -> None:
        if entry.action == "resume":
            self._transition(
                sm.REBOOT_REQUIRED,
                reason or "host reboot planned",
                annotations={self._ann(node_record.BOOT_ID_BEFORE): node_record.boot_id(self.node) or None},
            )
        self.result["message"] = "node %s is in %s" % (self.name, self.state)

    def _phase_prepare(self, entry: sm.Entry, reason: Optional[str]) -> None:
        if entry.action == "noop":
            self.result["message"] = entry.message
            return
        if entry.action == "done_without_disruption":
            self._done_without_disruption()
            return
        if entry.action == "start":
            if not self.target:
                raise UpgradeFailed("node %s: target_version is required to start an upgrade" % self.name)
            self._admit()
            why = "upgrade to driver %s requested (node has %s)" % (
                self.target,
                self.result["driver_version"] or "no driver label",
            )
            if self.state == sm.UPGRADE_FAILED:
                last = node_record.get_json_annotation(self.profile, self.node, node_record.LAST_TRANSITION) or {}
                why = "retry after upgrade-failed (%s); %s" % (last.get("reason", "?"), why)
            self._transition(sm.UPGRADE_REQUIRED, why, annotations={self._ann(node_record.TARGET_VERSION): self.target})
        if entry.action == "resume" and self.state != sm.CORDON_REQUIRED:
            # Past the cordon step the node must be cordoned (an abort killed midway, or someone
            # uncordoned it): cordon again, keeping the record if there is one.
            self.node = cordon.cordon(self.core, self.profile, self.node, self.check)
        while True:
            nxt = sm.prepare_next(self.state, self.policy.drain.enable)
            if nxt is None:
                break
            why = "step done"
            if self.state == sm.UPGRADE_REQUIRED:
                why = "admitted"
            elif self.state == sm.CORDON_REQUIRED:
                was = cordon.is_cordoned(self.node)
                self.node = cordon.cordon(self.core, self.profile, self.node, self.check)
                why = (
                    "node was already cordoned before the upgrade; it stays cordoned afterwards"
                    if (
                        node_record.get_annotation(self.profile, self.node, node_record.UNSCHEDULABLE_BEFORE) == "true"
                        or (self.check and was)
                    )
                    else "node cordoned"
                )
            elif self.state == sm.WAIT_FOR_JOBS_REQUIRED:
                why = self._wait_for_jobs()
            elif self.state == sm.POD_DELETION_REQUIRED:
                nxt, why = self._delete_pods(nxt)
            elif self.state == sm.DRAIN_REQUIRED:
                why = self._drain()
            if nxt == sm.POD_RESTART_REQUIRED:
                why += "; " + self._pause_operands()
            self._transition(nxt, why)
        self.result["message"] = "node %s is ready for host work (%s)" % (self.name, self.state)

    def _phase_finish(self, entry: sm.Entry, reason: Optional[str]) -> None:
        if entry.action == "noop":
            self.result["message"] = entry.message
            return
        if entry.action == "done_without_disruption":
            self._done_without_disruption()
            return
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

    # ---- steps ---------------------------------------------------------------------------------
    def _admit(self) -> None:
        if self.check:
            nodes = k8s_wait.list_raw(self.core.list_node, label_selector="%s=true" % self.profile["presence_label"])
            why = admission.verdict(self.profile, self.policy, self.name, nodes.get("items") or [])
            if why:
                self.warnings.append("check mode: prepare would wait for admission: %s" % why)
            return
        why = admission.wait_admission(self.core, self.profile, self.policy, self.name, self.admission_timeout)
        if why:
            raise UpgradeFailed(
                "node %s not admitted within admission_timeout=%ss: %s (nothing was changed)"
                % (self.name, self.admission_timeout, why)
            )

    def _wait_rebooted(self) -> None:
        limit = timeout_or_none(self.policy.reboot.reboot_timeout_seconds) or self.validation_timeout
        before = node_record.get_annotation(self.profile, self.node, node_record.BOOT_ID_BEFORE)
        if not self.check:
            why = upgrade_validation.wait_rebooted(self.core, self.name, before, limit)
            if why:
                self._fail_validation(why)
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

    def _wait_for_jobs(self) -> str:
        wfc = self.policy.wait_for_completion
        if not wfc.pod_selector:
            return "waitForCompletion.podSelector empty: step skipped"
        if self.check:
            left = eviction_rules.pods_matching(self._pods(), wfc.pod_selector)
            return "would wait for %d job pod(s): %s" % (len(left), ", ".join(left))
        res = k8s_wait.wait_for(
            self.core.list_pod_for_all_namespaces,
            lambda items: not eviction_rules.pods_matching(items, wfc.pod_selector),
            timeout_or_none(wfc.timeout_seconds),
            field_selector="spec.nodeName=%s" % self.name,
        )
        if res.ok:
            return "job pods matching %r finished" % wfc.pod_selector
        left = eviction_rules.pods_matching(res.items, wfc.pod_selector)
        self.warnings.append(
            "waitForCompletion timed out after %ss; going on with %s" % (wfc.timeout_seconds, ", ".join(left))
        )
        return "waitForCompletion timed out after %ss with pods still running: %s" % (
            wfc.timeout_seconds,
            ", ".join(left),
        )

    def _delete_pods(self, nxt: str) -> tuple[str, str]:
        pods = self._pods()
        plan = eviction_rules.plan_pod_deletion(pods, self.policy.pod_deletion, self.profile)
        drain_on = self.policy.drain.enable
        if plan.blockers:
            if drain_on:
                return (
                    sm.DRAIN_REQUIRED,
                    "pod deletion not possible (%s); the drain handles them" % plan.blocker_message(),
                )
            self._abort("pod deletion blocked: %s" % plan.blocker_message())
        by_ref = {eviction_rules.pod_ref(p): p for p in pods}
        victims = [by_ref[r] for r in plan.remove]
        if not victims:
            return nxt, "no accelerator pods on the node"
        if self.check:
            self.result["would_evict"].extend(sorted(plan.remove))
            return nxt, "would delete accelerator pods %s" % ", ".join(sorted(plan.remove))
        timeout = timeout_or_none(self.policy.pod_deletion.timeout_seconds)
        deleted = drain.delete(self.core, victims, self._deadline(timeout))
        self.result["deleted"].extend(deleted)
        left = drain.wait_gone(self.core, self.name, {p["metadata"]["uid"] for p in victims}, timeout)
        if left:
            if drain_on:
                return sm.DRAIN_REQUIRED, "accelerator pods still terminating: %s" % ", ".join(left)
            self._abort(
                "accelerator pods still on the node after podDeletion.timeoutSeconds=%s: %s"
                % (self.policy.pod_deletion.timeout_seconds, ", ".join(left))
            )
        return nxt, "deleted accelerator pods %s" % ", ".join(deleted)

    def _drain(self) -> str:
        pods = self._pods()
        plan = eviction_rules.plan_drain(pods, self.policy.drain, self.profile["drain_skip_label"])
        if plan.blockers:
            self._abort("drain blocked: %s" % plan.blocker_message())
        by_ref = {eviction_rules.pod_ref(p): p for p in pods}
        victims = [by_ref[r] for r in sorted(plan.remove)]
        pdbs = drain.blocking_pdbs(self.policy_api, victims)
        self.result["blocking_pdbs"] = [p["detail"] for p in pdbs]
        if pdbs:
            self.warnings.append(
                "PDBs allowing 0 disruptions now (evictions are retried until drain.timeoutSeconds=%s): %s"
                % (self.policy.drain.timeout_seconds, "; ".join(self.result["blocking_pdbs"]))
            )
        if self.check:
            self.result["would_evict"].extend(sorted(plan.remove))
            return "would evict %s" % (", ".join(sorted(plan.remove)) or "nothing")
        timeout = timeout_or_none(self.policy.drain.timeout_seconds)
        deadline = self._deadline(timeout)
        try:
            evicted = drain.evict(self.core, victims, deadline)
        except drain.DrainError as exc:
            self.result["evicted"].extend(exc.removed)
            pdbs = drain.blocking_pdbs(self.policy_api, [by_ref[r] for r in exc.remaining if r in by_ref])
            self.result["blocking_pdbs"] = [p["detail"] for p in pdbs] or self.result["blocking_pdbs"]
            self._abort(
                "drain failed after drain.timeoutSeconds=%s: PDBs allowing 0 disruptions: %s; pods still on "
                "the node: %s; %s"
                % (
                    self.policy.drain.timeout_seconds,
                    ", ".join(p["pdb"] for p in pdbs) or "none",
                    ", ".join(exc.remaining),
                    exc,
                )
            )
        self.result["evicted"].extend(evicted)
        left = drain.wait_gone(
            self.core,
            self.name,
            {p["metadata"]["uid"] for p in victims},
            None if deadline is None else max(1.0, deadline - time.monotonic()),
        )
        if left:
            self._abort(
                "pods still terminating after drain.timeoutSeconds=%s: %s"
                % (self.policy.drain.timeout_seconds, ", ".join(left))
            )
        return "drained: evicted %s" % (", ".join(evicted) or "nothing")

    def _pause_operands(self) -> str:
        labels = self._labels()
        recorded = node_record.get_json_annotation(self.profile, self.node, node_record.OPERAND_LABELS_BEFORE)
        pods = self._pods()
        annotations: dict[str, str] = {}
        if recorded is None:
            before, changes = operands.pause_plan(self.profile, labels)
            annotations[self._ann(node_record.OPERAND_LABELS_BEFORE)] = json.dumps(before, sort_keys=True)
            annotations[self._ann(node_record.OPERAND_DAEMONSETS)] = json.dumps(
                operands.operand_daemonsets(self.profile, pods)
            )
        else:
            before = recorded
            changes = {
                k: operands.paused_value(v) for k, v in before.items() if labels.get(k) != operands.paused_value(v)
            }
        paused = {k for k, v in before.items() if operands.paused_value(v) != v}
        if self.check:
            return "would pause operands %s" % ", ".join(sorted(changes)) if changes else "no operands to pause"
        if changes or annotations:
            self.node = node_record.patch_node(
                self.core, self.name, {"metadata": {"labels": changes, "annotations": annotations}}
            )
        res = k8s_wait.wait_for(
            self.core.list_pod_for_all_namespaces,
            lambda items: not operands.paused_operand_pods(self.profile, items, paused),
            self.operands_timeout,
            field_selector="spec.nodeName=%s" % self.name,
        )
        if not res.ok:
            self._abort(
                "operand pods did not leave within %ss after pausing: %s"
                % (self.operands_timeout, ", ".join(operands.paused_operand_pods(self.profile, res.items, paused)))
            )
        return "operands paused (%s)" % (", ".join(sorted(paused)) or "none")

    def _restore_operands(self) -> list[str]:
        before = node_record.get_json_annotation(self.profile, self.node, node_record.OPERAND_LABELS_BEFORE)
        if before is None:
            return []
        changes = operands.restore_plan(self._labels(), before)
        if changes and not self.check:
            self.node = node_record.patch_node(self.core, self.name, {"metadata": {"labels": changes}})
        return sorted(changes)

    def _abort(self, reason: str) -> None:
        """Failure before any host change: operands and schedulability back as recorded, upgrade-failed."""
        restored = self._restore_operands()
        annotations = {
            self._ann(node_record.OPERAND_LABELS_BEFORE): None,
            self._ann(node_record.OPERAND_DAEMONSETS): None,
        }
        if not self.check:
            self.node = node_record.patch_node(self.core, self.name, {"metadata": {"annotations": annotations}})
        self.node, uncordoned = cordon.restore(self.core, self.profile, self.node, self.check)
        note = "schedulability restored (%s)" % ("uncordoned" if uncordoned else "left as it was before the upgrade")
        if restored:
            note += "; operand labels restored"
        self._transition(sm.UPGRADE_FAILED, "%s; %s" % (reason, note), warning=True)
        raise UpgradeFailed("node %s: %s; %s" % (self.name, reason, note))

    def _fail_validation(self, reason: str) -> None:
        self._transition(sm.UPGRADE_FAILED, reason + "; node stays cordoned", warning=True)
        raise UpgradeFailed("node %s: %s; node stays cordoned" % (self.name, reason))

    def _validate(self, deadline: Optional[float]) -> str:
        restored = self._restore_operands()
        if self.check:
            return "would restore operands %s and validate" % ", ".join(restored)
        daemonsets = node_record.get_json_annotation(self.profile, self.node, node_record.OPERAND_DAEMONSETS) or []
        why, version = upgrade_validation.wait_validated(
            self.core, self.profile, self.name, self.target, daemonsets, deadline
        )
        if version:
            self.result["driver_version"] = version
        if why:
            self._fail_validation("validation timed out after %ss: %s" % (self.validation_timeout, why))
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
