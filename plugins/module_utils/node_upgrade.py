# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""NodeUpgrade: runs one phase (prepare, reboot, finish, fail, status) of a node's driver upgrade on
the Kubernetes API. The order of states is in ``upgrade_state_machine``; the steps' work lives in
``cordon``, ``drain`` + ``eviction_rules``, ``operands``, ``admission`` and ``upgrade_validation``;
what is written on the node (label, annotations, events) in ``node_record``.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
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
from ansible_collections.npuops.fleet.plugins.module_utils.driver_labels import node_driver_version
from ansible_collections.npuops.fleet.plugins.module_utils.driver_version import same_driver_version
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade_policy import timeout_or_none
from ansible_collections.npuops.fleet.plugins.module_utils.vendor_profiles import annotation_key

try:
    from kubernetes import client as k8s
except ImportError:  # pragma: no cover - reported by the module
    k8s = None


class UpgradeFailed(RuntimeError):
    """The phase failed; the node's label/annotations already say why (unless check mode)."""


class UpgradeConflict(UpgradeFailed):
    """Another run (or an admin) moved the node meanwhile; this run changed nothing more and must not
    undo anything (the abort path is not taken)."""


def devices_differ(recorded: Mapping[str, Any], now: Mapping[str, Any]) -> Optional[str]:
    """Why the host's devices ``now`` differ from the ``recorded`` baseline (None when they agree).
    Shapes: ``{"device_count": int, "pci_bus_ids": [str, ...]}``; PCI ids compare when both have them."""
    before_n, now_n = recorded.get("device_count"), now.get("device_count")
    if before_n is not None and now_n != before_n:
        return "host has %s devices, %s before the first upgrade attempt" % (now_n, before_n)
    before_ids = {str(i).lower() for i in recorded.get("pci_bus_ids") or []}
    now_ids = {str(i).lower() for i in now.get("pci_bus_ids") or []}
    if before_ids and now_ids and before_ids != now_ids:
        return "devices missing since the first upgrade attempt: %s" % ", ".join(sorted(before_ids - now_ids) or ["?"])
    return None


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
        coord_api: Any = None,
        admission_namespace: str = admission.DEFAULT_NAMESPACE,
        reboot_planned: bool = False,
        host_at_target: Optional[bool] = None,
        baseline: Optional[Mapping[str, Any]] = None,
    ) -> None:
        # core / policy_api / coord_api may be injected (unit tests use in-memory fakes).
        self.core = core or k8s.CoreV1Api(api_client)
        self.policy_api = policy_api or k8s.PolicyV1Api(api_client)
        coord = coord_api or (k8s.CoordinationV1Api(api_client) if api_client is not None else None)
        self.slots = admission.Slots(coord, profile, admission_namespace) if coord is not None else None
        self.token = uuid.uuid4().hex
        self.reboot_planned = reboot_planned
        self.host_at_target = host_at_target
        self.baseline = dict(baseline) if baseline else None
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
            "refused_evictions": {},
            "waited_for": [],
            "full_drain": None,
            "baseline": None,
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
            self._patch_transition(node_record.transition_ops, self.profile["upgrade_state_label"], to, anns, labels)
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

    def _patch_transition(self, make_ops: Any, state_label: str, to: str, anns: dict, labels: Optional[dict]) -> None:
        """Apply a transition guarded by the node's resourceVersion and state label. When the guard
        fails, re-read: the same state and last transition mean someone else's unrelated write (a
        heartbeat), so try again; anything else is another run's move (UpgradeConflict)."""
        last_key = self._ann(node_record.LAST_TRANSITION)
        for _ in range(8):
            ops = make_ops(self.node, state_label, self.state, to, anns, labels)
            try:
                self.node = node_record.patch_node(self.core, self.name, ops)
                return
            except Exception as exc:  # noqa: BLE001
                if getattr(exc, "status", None) not in (409, 422):
                    raise
                fresh = node_record.read_node(self.core, self.name)
                if not node_record.same_transition(fresh, self.node, state_label, last_key):
                    raise UpgradeConflict(
                        "node %s: state label changed from %s to %s meanwhile (another run or an admin is working "
                        "on this node); this run changed nothing more"
                        % (self.name, self.state or "(none)", node_record.labels(fresh).get(state_label) or "(none)")
                    )
                self.node = fresh
        raise UpgradeConflict("node %s: the node kept changing; transition to %s not written" % (self.name, to))

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
        self.result["at_target"] = same_driver_version(version, self.target)
        recorded = node_record.get_json_annotation(self.profile, self.node, node_record.DEVICES_BEFORE)
        self.result["baseline"] = recorded or self.baseline
        if recorded and self.baseline and self.host_at_target:
            differs = devices_differ(recorded, self.baseline)
            if differs:
                # A retry compares with the host before the first attempt, not with the broken one.
                self.host_at_target = False
                self.result["baseline_mismatch"] = differs
        skip_label = self.profile["upgrade_skip_label"]
        try:
            if self._labels().get(skip_label) == "true":
                # As in the operators: the skip label is checked before an upgrade starts. A node
                # labelled in the middle of its upgrade is finished (or failed), never left cordoned.
                if phase == "prepare" and self.state in sm.IDLE_STATES:
                    self.result["skipped"] = True
                    self.result["skip_reason"] = "node is labelled %s=true; its driver is left alone" % skip_label
                    self.result["message"] = self.result["skip_reason"]
                    return self._finish_result()
                if phase != "status":
                    self.warnings.append(
                        "node %s is labelled %s=true while in %s: the label is honoured only before an upgrade "
                        "starts; this %s goes on" % (self.name, skip_label, self.state or "(no state)", phase)
                    )
            entry = sm.phase_entry(
                phase,
                self.state,
                self.result["at_target"],
                node_record.has_bookkeeping(self.profile, self.node),
                self.retry_failed,
                self.host_at_target,
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
        if (
            self.result["at_target"]
            and self.host_at_target is not False
            and self.state in sm.IDLE_STATES + (sm.POD_RESTART_REQUIRED,)
        ):
            self.result["host_work_required"] = False
        return self.result

    # ---- phases --------------------------------------------------------------------------------
    def _phase_status(self, entry: sm.Entry, reason: Optional[str]) -> None:
        pods = self._pods()
        drain_policy = self._drain_policy()
        plan = self._plan_drain(pods, drain_policy)
        by_ref = {eviction_rules.pod_ref(p): p for p in pods}
        self.result["would_evict"] = sorted(plan.remove) if drain_policy.enable else []
        victims = [by_ref[r] for r in plan.remove]
        pdbs = drain.blocking_pdbs(self.policy_api, victims)
        self.result["blocking_pdbs"] = [p["detail"] for p in pdbs]
        self.result["drain_blockers"] = plan.blockers
        self.result["refused_evictions"] = self._structural_refusals(victims)
        self.result["waited_for"] = sorted(plan.wait)
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
            # A reboot kills every pod on the host whatever drain.enable says: drain fully first
            # (PDBs honoured); pods that cannot go stop the reboot, and the node stays cordoned.
            self.reboot_planned = True
            try:
                why = self._drain(after_host_work=True)
            except UpgradeFailed:
                raise
            except Exception as exc:  # noqa: BLE001
                self._fail_after_host_work("refusing to reboot: %s" % self._describe(exc))
            self._transition(
                sm.REBOOT_REQUIRED,
                "%s; %s" % (reason or "host reboot planned", why),
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
            self._start()
        if self.check:
            self._prepare_steps(entry)
            return
        try:
            self._prepare_steps(entry)
        except UpgradeFailed:
            raise  # already aborted, or another run's move (UpgradeConflict): nothing to undo here
        except Exception as exc:  # noqa: BLE001 - every other failure after the start goes through the abort
            reason = "unexpected error in %s: %s" % (self.state or "(no state)", self._describe(exc))
            try:
                self._abort(reason)
            except UpgradeFailed:
                raise
            except Exception as exc2:  # noqa: BLE001
                raise UpgradeFailed(
                    "node %s: %s; the abort could not complete either (%s): the node may still be cordoned in %s; "
                    "rerun prepare, or run phase=fail" % (self.name, reason, self._describe(exc2), self.state)
                ) from exc

    def _start(self) -> None:
        """Admission, then the first transition (upgrade-required), both safe against concurrent runs."""
        claimed = self._admit()
        try:
            why = "upgrade to driver %s requested (node has %s)" % (
                self.target,
                self.result["driver_version"] or "no driver label",
            )
            if self.state == sm.UPGRADE_FAILED:
                last = node_record.get_json_annotation(self.profile, self.node, node_record.LAST_TRANSITION) or {}
                why = "retry after upgrade-failed (%s); %s" % (last.get("reason", "?"), why)
            annotations = {self._ann(node_record.TARGET_VERSION): self.target}
            if self.baseline and not node_record.get_annotation(self.profile, self.node, node_record.DEVICES_BEFORE):
                annotations[self._ann(node_record.DEVICES_BEFORE)] = json.dumps(self.baseline, sort_keys=True)
            self._transition(sm.UPGRADE_REQUIRED, why, annotations=annotations)
        finally:
            if claimed and self.slots is not None and not self.slots.release(self.name, self.token):
                self.warnings.append(
                    "could not remove the admission slot entry of node %s; it expires after %ds"
                    % (self.name, admission.SLOT_GRACE)
                )

    def _prepare_steps(self, entry: sm.Entry) -> None:
        if entry.action == "resume" and self.state != sm.CORDON_REQUIRED:
            # Past the cordon step the node must be cordoned (an abort killed midway, or someone
            # uncordoned it): cordon again, keeping the record if there is one.
            self.node = cordon.cordon(self.core, self.profile, self.node, self.check)
        drain_on = self._drain_policy().enable
        while True:
            nxt = sm.prepare_next(self.state, drain_on)
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
                why = self._drain(after_host_work=False)
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
    def _admit(self) -> bool:
        """Wait for admission; True when a slot entry was claimed (to be released after the start)."""
        if self.check or self.slots is None:
            why = admission.check_admission(self.core, self.slots, self.profile, self.policy, self.name)
            if why:
                if not self.check:
                    raise UpgradeFailed("node %s not admitted: %s (nothing was changed)" % (self.name, why))
                self.warnings.append("check mode: prepare would wait for admission: %s" % why)
            return False
        try:
            why = admission.wait_admission(
                self.core, self.slots, self.profile, self.policy, self.name, self.token, self.admission_timeout
            )
        except admission.AdmissionConflict as exc:
            raise UpgradeConflict("node %s: %s; this run changed nothing" % (self.name, exc))
        if why:
            raise UpgradeFailed(
                "node %s not admitted within admission_timeout=%ss: %s (nothing was changed)"
                % (self.name, self.admission_timeout, why)
            )
        return True

    def _wait_rebooted(self) -> None:
        limit = timeout_or_none(self.policy.reboot.reboot_timeout_seconds) or self.validation_timeout
        before = node_record.get_annotation(self.profile, self.node, node_record.BOOT_ID_BEFORE)
        if not self.check:
            why = upgrade_validation.wait_rebooted(self.core, self.name, before, limit)
            if why:
                self._fail_after_host_work(why)
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

    # ---- pod removal: pod deletion (accelerator pods) and drain -----------------------------------
    def _drain_policy(self) -> Any:
        """The drain that applies: the policy's, or a full one when the host will reboot (a reboot
        takes every pod with it, whatever drain.enable and drain.podSelector say)."""
        if not self.reboot_planned:
            return self.policy.drain
        return dataclasses.replace(self.policy.drain, enable=True, pod_selector="")

    def _plan_drain(self, pods: list[dict[str, Any]], drain_policy: Any) -> eviction_rules.PodPlan:
        plan = eviction_rules.plan_drain(pods, drain_policy, self.profile["drain_skip_label"])
        if self.reboot_planned:
            # A drain-skip label keeps a pod through a drain, not through a reboot: it blocks.
            kept = plan.ignored.pop("labelled %s=true" % self.profile["drain_skip_label"], [])
            if kept:
                plan.blockers.setdefault(
                    "pods labelled %s=true (a reboot would kill them)" % self.profile["drain_skip_label"], []
                ).extend(kept)
        return plan

    def _structural_refusals(self, victims: list[dict[str, Any]]) -> dict[str, str]:
        """Pods the Eviction API refuses for a reason no retry changes (several PDBs, an admission
        policy, RBAC): from the PDBs (no write) and a server-side dry-run eviction of each pod."""
        refused = dict(drain.multi_pdb_pods(self.policy_api, victims))
        try:
            rest = [v for v in victims if eviction_rules.pod_ref(v) not in refused]
            refused.update(drain.probe_evictions(self.core, rest))
        except Exception as exc:  # noqa: BLE001 - a preflight probe must not fail the read-only phases
            self.warnings.append("dry-run evictions not possible: %s" % self._describe(exc))
        return refused

    def _remove_pods(self, victims: list[dict[str, Any]], wait_refs: list[str], pods: list[dict[str, Any]],
                     timeout_key: str, timeout: Optional[float], after_host_work: bool) -> list[str]:
        """Evict ``victims`` (PDBs honoured, 429 retried until the step's timeout), then wait until they
        and the already-terminating pods ``wait_refs`` are gone. Failures end the step with the pods,
        PDBs and the server's message."""
        fail = self._fail_after_host_work if after_host_work else self._abort
        by_ref = {eviction_rules.pod_ref(p): p for p in pods}
        deadline = self._deadline(timeout)
        try:
            evicted = drain.evict(self.core, victims, deadline)
        except drain.DrainError as exc:
            self.result["evicted"].extend(exc.removed)
            if getattr(exc, "kind", "timeout") == "refused":
                fail("eviction refused by the API server (not retried): %s" % exc)
            pdbs = drain.blocking_pdbs(self.policy_api, [by_ref[r] for r in exc.remaining if r in by_ref])
            self.result["blocking_pdbs"] = [p["detail"] for p in pdbs] or self.result["blocking_pdbs"]
            fail(
                "evictions refused until %s=%s: PodDisruptionBudgets allowing 0 disruptions: %s; pods still on "
                "the node: %s; %s"
                % (timeout_key, self._secs(timeout), ", ".join(p["pdb"] for p in pdbs) or "none found now",
                   ", ".join(exc.remaining), exc)
            )
        self.result["evicted"].extend(evicted)
        uids = {p["metadata"]["uid"] for p in victims}
        uids |= {by_ref[r]["metadata"]["uid"] for r in wait_refs if r in by_ref}
        self.result["waited_for"].extend(sorted(set(wait_refs) - set(self.result["waited_for"])))
        left = drain.wait_gone(
            self.core,
            self.name,
            uids,
            None if deadline is None else max(1.0, deadline - time.monotonic()),
        )
        if left:
            fail("pods still on the node after %s=%s: %s" % (timeout_key, self._secs(timeout), ", ".join(left)))
        return evicted

    def _delete_pods(self, nxt: str) -> tuple[str, str]:
        """The pod-deletion step: accelerator pods go through the Eviction API (PDBs honoured), as in
        the operators' upgrade library; already-terminating accelerator pods are waited for."""
        pods = self._pods()
        plan = eviction_rules.plan_pod_deletion(pods, self.policy.pod_deletion, self.profile)
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
            self.result["waited_for"].extend(sorted(plan.wait))
            return nxt, "would evict accelerator pods %s%s" % (
                ", ".join(sorted(plan.remove)) or "none",
                "; would wait for terminating pods %s" % ", ".join(sorted(plan.wait)) if plan.wait else "",
            )
        timeout = timeout_or_none(self.policy.pod_deletion.timeout_seconds)
        evicted = self._remove_pods(
            victims, sorted(plan.wait), pods, "podDeletion.timeoutSeconds", timeout, after_host_work=False
        )
        self.result["deleted"].extend(evicted)
        why = "evicted accelerator pods %s" % (", ".join(evicted) or "none")
        if plan.wait:
            why += "; terminating pods gone: %s" % ", ".join(sorted(plan.wait))
        return nxt, why

    def _drain(self, after_host_work: bool) -> str:
        """Evict the node's pods per the drain policy (or fully before a reboot) and wait until they,
        and every pod already terminating in the drain's scope, are gone."""
        drain_policy = self._drain_policy()
        fail = self._fail_after_host_work if after_host_work else self._abort
        pods = self._pods()
        plan = self._plan_drain(pods, drain_policy)
        if self.reboot_planned and not self.policy.drain.enable:
            self.result["full_drain"] = "the host will reboot: drained fully although drain.enable is false"
        elif self.reboot_planned and self.policy.drain.pod_selector:
            self.result["full_drain"] = "the host will reboot: drained fully, not only drain.podSelector %r" % (
                self.policy.drain.pod_selector
            )
        if plan.blockers:
            fail(("drain before the reboot blocked: %s" if self.reboot_planned else "drain blocked: %s")
                 % plan.blocker_message())
        by_ref = {eviction_rules.pod_ref(p): p for p in pods}
        victims = [by_ref[r] for r in sorted(plan.remove)]
        pdbs = drain.blocking_pdbs(self.policy_api, victims)
        self.result["blocking_pdbs"] = [p["detail"] for p in pdbs]
        if pdbs:
            self.warnings.append(
                "PDBs allowing 0 disruptions now (evictions are retried until drain.timeoutSeconds=%s): %s"
                % (self.policy.drain.timeout_seconds, "; ".join(self.result["blocking_pdbs"]))
            )
        note = " (%s)" % self.result["full_drain"] if self.result["full_drain"] else ""
        if self.check:
            refused = self._structural_refusals(victims)
            self.result["refused_evictions"].update(refused)
            self.result["would_evict"].extend(sorted(plan.remove))
            self.result["waited_for"].extend(sorted(plan.wait))
            if refused:
                fail("the API server refuses to evict %s" % "; ".join("%s: %s" % kv for kv in sorted(refused.items())))
            return "would evict %s%s" % (", ".join(sorted(plan.remove)) or "nothing", note)
        if not victims and not plan.wait:
            return "drained: nothing to evict%s" % note
        timeout = timeout_or_none(self.policy.drain.timeout_seconds)
        evicted = self._remove_pods(
            victims, sorted(plan.wait), pods, "drain.timeoutSeconds", timeout, after_host_work=after_host_work
        )
        return "drained: evicted %s%s" % (", ".join(evicted) or "nothing", note)

    @staticmethod
    def _secs(timeout: Optional[float]) -> str:
        return "0 (forever)" if timeout is None else "%g" % timeout

    @staticmethod
    def _describe(exc: BaseException) -> str:
        status = getattr(exc, "status", None)
        if status:
            body = getattr(exc, "body", None)
            msg = ""
            if body:
                try:
                    msg = json.loads(body).get("message") or ""
                except (ValueError, AttributeError):
                    msg = str(body)[:300]
            return "HTTP %s %s%s" % (status, getattr(exc, "reason", ""), (": " + msg) if msg else "")
        return "%s: %s" % (type(exc).__name__, exc)

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

    def _fail_after_host_work(self, reason: str) -> None:
        """Failure once the host may have changed: upgrade-failed, and the node stays cordoned."""
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
            self._fail_after_host_work("validation timed out after %ss: %s" % (self.validation_timeout, why))
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
