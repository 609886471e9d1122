# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""The prepare phase of NodeUpgrade: admission and the first transition (both safe against
concurrent runs), then cordon, wait for jobs, pod deletion / drain (``upgrade_pod_removal``) and the
operand pause, up to pod-restart-required ("ready for host work"). Any failure after the start goes
through the abort path (operands and schedulability restored, upgrade-failed, an Event).
"""

from __future__ import annotations

import json
from typing import Optional

from ansible_collections.npuops.fleet.plugins.module_utils.k8s import wait as k8s_wait
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import admission, cordon, eviction_rules, operands
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import record as node_record
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.policy import timeout_or_none
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.states import UpgradeConflict, UpgradeFailed


class PrepareSteps:
    """Mixin of NodeUpgrade (uses its node, policy, profile and transition helpers)."""

    def _phase_prepare(self, entry: sm.Entry, reason: Optional[str]) -> None:
        if entry.action == "start":
            if not self.target:
                raise UpgradeFailed("node %s: target_version is required to start an upgrade" % self.name)
            self._refuse_unpausable_dra_plugin()
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
            if not self.check:
                self._recheck_after_admission()
            why = "upgrade to driver %s requested (node has %s)" % (
                self.target,
                self.result["driver_version"] or "no driver label",
            )
            if self.state == sm.UPGRADE_FAILED:
                last = node_record.get_json_annotation(self.profile, self.node, node_record.LAST_TRANSITION) or {}
                why = "retry after upgrade-failed (%s); %s" % (last.get("reason", "?"), why)
            annotations = {self._ann(node_record.TARGET_VERSION): self.target}
            recorded = node_record.get_annotation(self.profile, self.node, node_record.DEVICES_BEFORE)
            if self.baseline and self.baseline.get("device_count") is not None and not recorded:
                annotations[self._ann(node_record.DEVICES_BEFORE)] = json.dumps(self.baseline, sort_keys=True)
            # Other runs treat the claim as expired after SLOT_GRACE: the label must land well before.
            self.claim_not_after = None if claimed is None else claimed + admission.SLOT_GRACE / 2
            self._transition(sm.UPGRADE_REQUIRED, why, annotations=annotations)
        finally:
            self.claim_not_after = None
            if claimed is not None and self.slots is not None:
                try:
                    released = self.slots.release(self.name, self.token)
                except Exception as exc:  # noqa: BLE001 - never hide the outcome of the start itself
                    released = False
                    self.warnings.append("admission slot release failed: %s" % self._describe(exc))
                if not released:
                    self.warnings.append(
                        "could not remove the admission slot entry of node %s; it expires after %ds"
                        % (self.name, admission.SLOT_GRACE)
                    )

    def _refuse_unpausable_dra_plugin(self) -> None:
        """Before admission and cordon: a DRA kubelet plugin on the node that the operand pause cannot
        remove refuses the upgrade (nothing changed). One pod LIST of the node with the profile's
        ``dra_kubelet_plugin_selector`` as label selector; none when the profile names no plugin."""
        selector = self.profile.get("dra_kubelet_plugin_selector")
        if not selector:
            return
        data = k8s_wait.list_raw(
            self.core.list_pod_for_all_namespaces, field_selector="spec.nodeName=%s" % self.name,
            label_selector=selector,
        )
        unpausable = operands.unpausable_dra_plugins(self.profile, data.get("items") or [])
        if unpausable:
            self.result["dra_plugin_unpausable"] = unpausable
            raise UpgradeFailed("node %s: %s (nothing was changed)" % (self.name, self._unpausable_message(unpausable)))

    def _recheck_after_admission(self) -> None:
        """The node as it is once admitted (the wait may have taken hours): a skip label set meanwhile
        leaves it alone, and a state another run or an admin wrote meanwhile is theirs; either way
        nothing is changed and the caller gives the slot back."""
        fresh = node_record.read_node(self.core, self.name)
        labels = node_record.labels(fresh)
        skip_label = self.profile["upgrade_skip_label"]
        if labels.get(skip_label) == "true":
            self.result["skipped"] = True
            self.result["skip_reason"] = (
                "node was labelled %s=true while it waited for admission; its driver is left alone" % skip_label
            )
            raise sm.UpgradeNotStarted("not started: %s (nothing was changed)" % self.result["skip_reason"])
        now = labels.get(self.profile["upgrade_state_label"]) or ""
        if now != (self.state or ""):
            raise UpgradeConflict(
                "node %s: state label changed from %s to %s while it waited for admission (another run or an "
                "admin is working on this node); this run changed nothing"
                % (self.name, self.state or "(none)", now or "(none)")
            )
        self.node = fresh

    def _prepare_steps(self, entry: sm.Entry) -> None:
        if entry.action == "resume" and self.state == sm.UPGRADE_REQUIRED:
            self._wait_readmission()
        if entry.action == "resume" and self.state not in (sm.UPGRADE_REQUIRED, sm.CORDON_REQUIRED):
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
            annotations = None
            if nxt == sm.POD_RESTART_REQUIRED:
                why += "; " + self._pause_operands()
                if not node_record.get_annotation(self.profile, self.node, node_record.HOST_WORK_STARTED):
                    annotations = {self._ann(node_record.HOST_WORK_STARTED): node_record.now_iso()}
            self._transition(nxt, why, annotations=annotations)
        self.result["message"] = "node %s is ready for host work (%s)" % (self.name, self.state)

    def _admit(self) -> Optional[float]:
        """Wait for admission; the claim's time (slot clock) when a slot entry was claimed (released
        after the start), else None."""
        if self.check or self.slots is None:
            why = admission.check_admission(self.core, self.slots, self.profile, self.policy, self.name)
            if why:
                if not self.check:
                    raise UpgradeFailed("node %s not admitted: %s (nothing was changed)" % (self.name, why))
                self.warnings.append("check mode: prepare would wait for admission: %s" % why)
            return None
        try:
            since, why = admission.wait_admission(
                self.core, self.slots, self.profile, self.policy, self.name, self.token, self.admission_timeout,
                stop=self._stop_reason, sleep=self.sleep,
            )
        except admission.AdmissionConflict as exc:
            raise UpgradeConflict("node %s: %s; this run changed nothing" % (self.name, exc))
        except admission.AdmissionStopped as exc:
            raise sm.UpgradeNotStarted(
                "not started: %s (node %s was not admitted; nothing was changed)" % (exc, self.name)
            ) from exc
        if why:
            raise UpgradeFailed("node %s not admitted %s: %s (nothing was changed)" % (self.name, self._within(), why))
        return since

    def _within(self) -> str:
        if self.admission_timeout is None:
            return "(admission_timeout=0: it waited while another node was upgrading)"
        return "within admission_timeout=%ss" % self.admission_timeout

    def _wait_readmission(self) -> None:
        """A resumed upgrade-required node was admitted earlier, but a skip label in between may have
        let another node take its place: wait until the limits hold again with it counted."""
        if self.check:
            return
        try:
            waited = admission.wait_verdict(
                self.core, self.slots, self.profile, self.policy, self.name, self.admission_timeout,
                stop=self._stop_reason, sleep=self.sleep,
            )
        except admission.AdmissionStopped as exc:
            raise sm.UpgradeNotStarted(
                "not started: %s (node %s was not admitted again; nothing was changed)" % (exc, self.name)
            ) from exc
        if waited:
            raise UpgradeFailed(
                "node %s not admitted again %s: %s (nothing was changed)" % (self.name, self._within(), waited)
            )

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
            heartbeat=self._heartbeat,
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

    def _pause_operands(self) -> str:
        labels = self._labels()
        recorded = node_record.get_json_annotation(self.profile, self.node, node_record.OPERAND_LABELS_BEFORE)
        pods = self._pods()
        unpausable = operands.unpausable_dra_plugins(self.profile, pods)
        if unpausable:  # a resumed upgrade, or a plugin that came after the start's check
            self.result["dra_plugin_unpausable"] = unpausable
            self._abort(self._unpausable_message(unpausable))
        self._note_daemonset_users(pods)
        annotations: dict[str, str] = {}
        found = ""
        plugins = operands.dra_plugin_daemonsets(self.profile, pods)
        if plugins:
            found += "; DRA kubelet plugin %s paused with the operands" % ", ".join(plugins)
        if recorded is None:
            before, changes = operands.pause_plan(self.profile, labels)
            annotations[self._ann(node_record.OPERAND_LABELS_BEFORE)] = json.dumps(before, sort_keys=True)
            annotations[self._ann(node_record.OPERAND_DAEMONSETS)] = json.dumps(
                operands.operand_daemonsets(self.profile, pods)
            )
            # Paused with no pause of ours recorded: left so by a controller that died before restoring it.
            stale = ", ".join(
                "%s=%s recorded as %s" % (k, labels[k], v) for k, v in sorted(before.items()) if labels[k] != v
            )
            if stale:
                found += "; found paused with no upgrade in progress: %s" % stale
                self.warnings.append(
                    "node %s: operand deploy labels found paused with no upgrade in progress (left by a controller "
                    "that did not restore them): %s; finish restores these values" % (self.name, stale)
                )
        else:
            before = recorded
            changes = {
                k: operands.paused_value(v) for k, v in before.items() if labels.get(k) != operands.paused_value(v)
            }
        paused = {k for k, v in before.items() if operands.paused_value(v) != v}
        if self.check:
            would = "would pause operands %s" % ", ".join(sorted(changes)) if changes else "no operands to pause"
            return would + found
        if changes or annotations:
            self.node = node_record.patch_node(
                self.core, self.name, {"metadata": {"labels": changes, "annotations": annotations}}
            )
        res = k8s_wait.wait_for(
            self.core.list_pod_for_all_namespaces,
            lambda items: not operands.paused_operand_pods(self.profile, items, paused),
            self.operands_timeout,
            field_selector="spec.nodeName=%s" % self.name,
            heartbeat=self._heartbeat,
        )
        if not res.ok:
            self._abort(
                "operand pods did not leave within %ss after pausing: %s"
                % (self.operands_timeout, ", ".join(operands.paused_operand_pods(self.profile, res.items, paused)))
            )
        return "operands paused (%s)%s" % (", ".join(sorted(paused)) or "none", found)
