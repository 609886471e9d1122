# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""NodeUpgrade: runs one phase (prepare, reboot, finish, fail, status) of a node's driver upgrade on
the Kubernetes API. The order of states is in ``upgrade_state_machine``; the phases' steps are in
``upgrade_prepare`` (admission, cordon, jobs, operands), ``upgrade_pod_removal`` (pod deletion and
drain, full before a reboot) and ``upgrade_finish`` (validation, uncordon); what is written on the
node (label, annotations, events) in ``node_record``. Here: the transitions (guarded by the node's
resourceVersion), phase dispatch, the skip label, and the two failure paths (abort before host work,
upgrade-failed and cordoned after it).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from typing import Any, Callable, Mapping, Optional

from ansible_collections.npuops.fleet.plugins.module_utils.driver.node_labels import node_driver_version
from ansible_collections.npuops.fleet.plugins.module_utils.driver.vendor_profiles import annotation_key
from ansible_collections.npuops.fleet.plugins.module_utils.driver.version import same_driver_version
from ansible_collections.npuops.fleet.plugins.module_utils.fleet import identity
from ansible_collections.npuops.fleet.plugins.module_utils.fleet.caller import CallerWatch
from ansible_collections.npuops.fleet.plugins.module_utils.k8s import retry as k8s_retry
from ansible_collections.npuops.fleet.plugins.module_utils.k8s import wait as k8s_wait
from ansible_collections.npuops.fleet.plugins.module_utils.k8s.lease import LeaseLostError
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import (
    admission,
    cordon,
    drain,
    eviction_rules,
    operands,
)
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import record as node_record
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import validation as upgrade_validation
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.finish import FinishSteps
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.pod_removal import PodRemovalSteps
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.prepare import PrepareSteps
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.states import (  # noqa: F401 - re-exported
    UpgradeConflict,
    UpgradeFailed,
)

try:
    from kubernetes import client as k8s
except ImportError:  # pragma: no cover - reported by the module
    k8s = None


# Seconds prepare waits for the kubelet to report a new boot id when that is the only difference
# between the host and its Node (the kubelet posts status every 10 s once it runs).
IDENTITY_BOOT_ID_WAIT = 90
# The deploy label the docs suggest for the DRA kubelet plugin's DaemonSet (any <prefix><name> works).
DRA_PLUGIN_OPERAND = "dra-kubelet-plugin"
# beside the stop file: one file per node of the run that failed (NodeUpgrade.record_failure, the role's rescue)
FAILURES_DIR = "failures"


def lost_lease(exc: BaseException) -> bool:
    """True when ``exc`` (what :meth:`NodeUpgrade.run` raised) is the run's lost Lease: the conflict
    :meth:`NodeUpgrade._heartbeat` raised from a LeaseLostError of its keepalive."""
    return isinstance(exc, UpgradeConflict) and isinstance(exc.__cause__, LeaseLostError)


class _RawResourceClaims:
    """read_namespaced_resource_claim for kubernetes clients older than ResourceV1Api (34): a GET of
    /apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}; the response like the
    generated API's with ``_preload_content=False`` (``.data`` JSON)."""

    def __init__(self, api_client: Any) -> None:
        self.api_client = api_client

    def read_namespaced_resource_claim(self, name: str, namespace: str, _preload_content: bool = False) -> Any:
        return self.api_client.call_api(
            "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}",
            "GET",
            path_params={"namespace": namespace, "name": name},
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
            _preload_content=False,
        )


def claim_reader(api_client: Any) -> Any:
    """The client's ResourceV1Api where it has one, else :class:`_RawResourceClaims`."""
    api = getattr(k8s, "ResourceV1Api", None)
    return api(api_client) if api is not None else _RawResourceClaims(api_client)


class NodeUpgrade(PrepareSteps, PodRemovalSteps, FinishSteps):
    """One phase of one node's upgrade. ``run(phase, reason)`` returns the result dict (see the
    module's RETURN) or raises UpgradeFailed (the node already says why) / UpgradeConflict."""

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
        run_id: Optional[str] = None,
        own_run_only: bool = False,
        host_identity: Optional[Mapping[str, Any]] = None,
        identity_fields: Optional[list[str]] = None,
        drain_preview: bool = True,
        stop_file: Optional[str] = None,
        caller: Optional[CallerWatch] = None,
        resource_api: Any = None,
        keepalive: Optional[Callable[[], None]] = None,
    ) -> None:
        # core / policy_api / coord_api / resource_api may be injected (unit tests use in-memory fakes).
        self.core = core or k8s.CoreV1Api(api_client)
        self.policy_api = policy_api or k8s.PolicyV1Api(api_client)
        # resource.k8s.io/v1 ResourceClaims (the DRA rule): read_namespaced_resource_claim(name, namespace)
        self.resource_api = resource_api or (claim_reader(api_client) if api_client is not None else None)
        self.claims_read: dict[str, Any] = {}
        coord = coord_api or (k8s.CoordinationV1Api(api_client) if api_client is not None else None)
        self.slots = admission.Slots(coord, profile, admission_namespace) if coord is not None else None
        self.token = uuid.uuid4().hex
        # The window's run id, written into every transition record: a run that lost its Lease marks
        # upgrade-failed only a node whose last transition is its own (own_run_only).
        self.run_id = run_id or None
        self.own_run_only = own_run_only
        self.reboot_planned = reboot_planned
        self.reboot_reason: Optional[str] = None
        # The last-transition annotation as this run last saw it: the guard that tells another run's
        # transition from an unrelated write when a resourceVersion test fails.
        self.last_transition_seen: Optional[str] = None
        # Slot clock time after which a start must not label the node (its admission claim may be
        # treated as expired by other runs); set only around the first transition.
        self.claim_not_after: Optional[float] = None
        self.host_at_target = host_at_target
        # The machine Ansible reached (npu_driver_facts identity); prepare refuses it, before any
        # change, when it is not the machine behind the Node.
        self.host_identity = dict(host_identity) if host_identity else None
        self.identity_fields = list(identity_fields) if identity_fields is not None else list(identity.FIELDS)
        self.drain_preview = drain_preview
        # A file on the control node whose existence admits no more nodes (the window stopped after a
        # failure); read before every admission decision.
        self.stop_file = stop_file or None
        # an orphan of a killed playbook must not be admitted (see fleet/caller.py)
        self.caller = caller if caller is not None else CallerWatch()
        # Called from every wait (window/run_lease.LeaseKeepalive: renews the run's Lease); see _heartbeat.
        self.keepalive = keepalive
        self.sleep = k8s_wait.pauser(self._heartbeat)
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
            "not_started": False,
            "skip_reason": None,
            "at_target": False,
            "host_work_required": True,
            "evicted": [],
            "deleted": [],
            "would_evict": [],
            "cordoned_by_upgrade": False,
            "blocking_pdbs": [],
            "pdbs_at_risk": [],
            "refused_evictions": {},
            "waited_for": [],
            # "ns/pod" -> the rule that makes the step remove (or wait for) it, e.g. "DRA claim ns/c
            # allocated by gpu.nvidia.com", "extended resource nvidia.com/gpu", "drain.podSelector 'x'"
            "pod_rules": {},
            # GETs of ResourceClaims this call made (the DRA rule's API cost; one per claim, retries not counted)
            "resource_claim_reads": 0,
            # DaemonSet pods using the device that no step removes ("ns/pod" -> rule)
            "accelerator_daemonset_pods": {},
            "full_drain": None,
            "baseline": None,
            "message": "",
            "driver_version": None,
            "target_version": target_version,
        }

    # ---- helpers -------------------------------------------------------------------------------
    def _heartbeat(self) -> None:
        """The keepalive, called from every wait. A lost Lease (LeaseLostError) leaves as UpgradeConflict
        (its cause the LeaseLostError, see :func:`lost_lease`): the node may already be another run's,
        so every step lets it through as it does any conflict - no abort, no failure mark."""
        if self.keepalive is None:
            return
        try:
            self.keepalive()
        except LeaseLostError as exc:
            raise UpgradeConflict(str(exc)) from exc

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
        uncordon: bool = False,
    ) -> None:
        """Move the state label to ``to`` with the reason (annotation + Event), together with ``labels`` /
        ``annotations`` changes (None removes) and, with ``uncordon``, spec.unschedulable=false: one
        JSON patch, so an abort's restore happens only if this run still owns the node."""
        rec = sm.transition_record(self.state, to, reason, node_record.now_iso())
        self.result["transitions"].append(rec)
        if not self.check:
            # The run id lets a retry recognise its own write when the first response was lost.
            record = json.dumps(dict(rec, run=self.token, **({"run_id": self.run_id} if self.run_id else {})))
            anns = dict(annotations or {}, **{self._ann(node_record.LAST_TRANSITION): record})
            self._patch_transition(self.profile["upgrade_state_label"], to, anns, labels, uncordon)
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

    def _patch_transition(
        self, state_label: str, to: str, anns: dict, labels: Optional[dict], uncordon: bool = False
    ) -> None:
        """Apply a transition guarded by the node's resourceVersion and state label. When the guard
        fails, re-read: this very record there means the response was lost (done); otherwise
        :meth:`_check_owned` decides between trying again and UpgradeConflict."""
        last_key = self._ann(node_record.LAST_TRANSITION)

        def write(_attempt: int) -> None:
            if self.claim_not_after is not None and self.slots is not None:
                if self.slots.clock() > self.claim_not_after:
                    raise UpgradeFailed(
                        "node %s: admission claim older than %ds before the node could be labelled (slow API); "
                        "nothing was changed, run prepare again" % (self.name, admission.SLOT_GRACE / 2)
                    )
            ops = node_record.transition_ops(self.node, state_label, self.state, to, anns, labels)
            if uncordon:
                ops.append({"op": "add", "path": "/spec/unschedulable", "value": False})
            self.node = node_record.patch_node(self.core, self.name, ops)
            self.last_transition_seen = node_record.annotations(self.node).get(last_key)

        def conflicted(_exc: BaseException) -> Any:
            # 409: resourceVersion changed; 422: a JSON patch "test" op (the state label) failed
            fresh = node_record.read_node(self.core, self.name)
            if node_record.annotations(fresh).get(last_key) == anns[last_key]:
                self.node, self.last_transition_seen = fresh, anns[last_key]
                return None
            self._check_owned(fresh)
            return k8s_retry.CONFLICT

        def exhausted() -> None:
            raise UpgradeConflict("node %s: the node kept changing; transition to %s not written" % (self.name, to))

        k8s_retry.retry_on_conflict(write, 8, exhausted, statuses=(409, 422), on_conflict=conflicted)

    def _check_owned(self, fresh: dict[str, Any]) -> None:
        """Take ``fresh`` as the node to work on when it shows this run's state and last transition
        (someone else's unrelated write, a heartbeat, came between), or a newer transition this run
        wrote but never saw answered (adopted: the run goes on from that state). Anything else is
        another run's or an admin's move: UpgradeConflict, and nothing more is written."""
        last_key = self._ann(node_record.LAST_TRANSITION)
        seen = node_record.annotations(fresh).get(last_key)
        now = node_record.labels(fresh).get(self.profile["upgrade_state_label"]) or ""
        if seen != self.last_transition_seen:
            try:
                mine = json.loads(seen or "{}").get("run") == self.token
            except (ValueError, AttributeError):
                mine = False
            if mine and (json.loads(seen).get("to") or "") == now:
                self.node, self.state, self.last_transition_seen = fresh, now, seen
                return
        if now != (self.state or "") or seen != self.last_transition_seen:
            raise UpgradeConflict(
                "node %s: state label changed from %s to %s meanwhile (another run or an admin is working "
                "on this node); this run changed nothing more" % (self.name, self.state or "(none)", now or "(none)")
            )
        self.node = fresh

    def _deadline(self, timeout: Optional[float]) -> Optional[float]:
        return None if timeout is None else time.monotonic() + timeout

    def _pods(self) -> list[dict[str, Any]]:
        return drain.list_node_pods(self.core, self.name)

    def _claims(self, pods: list[dict[str, Any]]) -> dict[str, Any]:
        """The ResourceClaims the DRA rule needs for ``pods`` (eviction_rules.claims_to_read): "ns/claim"
        -> the claim (dict) or why it could not be read. One GET each, once per call (kept for later
        steps); transient errors retried for up to 30 s per claim. Counted in resource_claim_reads."""
        for key in eviction_rules.claims_to_read(pods, self.profile):
            if key in self.claims_read:
                continue
            ns, name = key.split("/", 1)
            if self.resource_api is None:
                self.claims_read[key] = "no resource.k8s.io client"
                continue
            self.result["resource_claim_reads"] += 1
            try:
                resp = k8s_retry.call(
                    self.resource_api.read_namespaced_resource_claim, name, ns, budget=30, _preload_content=False
                )
                self.claims_read[key] = json.loads(resp.data)
            except Exception as exc:  # noqa: BLE001 - counted as the vendor's, and said
                self.claims_read[key] = self._describe(exc)
                self.warnings.append(
                    "node %s: ResourceClaim %s could not be read (%s): its pods count as accelerator pods"
                    % (self.name, key, self.claims_read[key])
                )
        return self.claims_read

    def _note_daemonset_users(self, pods: list[dict[str, Any]]) -> None:
        """Say which DaemonSet pods use the device but are neither operands nor the DRA kubelet plugin:
        nothing removes them, so the module unload may find the device held (the host's holder check
        then names the process)."""
        plugin = [eviction_rules.pod_ref(p) for p in operands.dra_plugin_pods(self.profile, pods)]
        found = eviction_rules.accelerator_daemonset_pods(pods, self.profile, exclude=plugin)
        self.result["accelerator_daemonset_pods"] = found
        if found:
            self.warnings.append(
                "node %s: DaemonSet pods using the device stay on the node (a DaemonSet puts them back; they "
                "may hold the device at the unload): %s"
                % (self.name, ", ".join("%s [%s]" % kv for kv in sorted(found.items())))
            )

    # ---- entry point ---------------------------------------------------------------------------
    def run(self, phase: str, reason: Optional[str] = None) -> dict[str, Any]:
        if phase in ("prepare", "reboot", "status"):
            self.reboot_reason = reason
        self.node = node_record.read_node(self.core, self.name)
        self.state = self._labels().get(self.profile["upgrade_state_label"], "")
        self.last_transition_seen = node_record.annotations(self.node).get(self._ann(node_record.LAST_TRANSITION))
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
            differs = upgrade_validation.devices_differ(recorded, self.baseline)
            if differs:
                # A retry compares with the host before the first attempt, not with the broken one.
                self.host_at_target = False
                self.result["baseline_mismatch"] = differs
        skip_label = self.profile["upgrade_skip_label"]
        try:
            if phase in ("prepare", "status") and self.host_identity is not None and self.identity_fields:
                self._check_identity(refuse=phase == "prepare")
            if self._labels().get(skip_label) == "true":
                # As in the operators: the skip label is checked before an upgrade starts. A node
                # labelled in the middle of its upgrade is finished (or failed), never left cordoned.
                if phase in ("prepare", "status") and self.state in sm.IDLE_STATES:
                    # status says so too: a caller checks the label before it touches the host at all
                    self.result["skipped"] = True
                    self.result["skip_reason"] = "node is labelled %s=true; its driver is left alone" % skip_label
                    self.result["message"] = self.result["skip_reason"]
                    if phase == "prepare":
                        return self._finish_result()
                elif phase != "status":
                    self.warnings.append(
                        "node %s is labelled %s=true while in %s: the label is honoured only before an upgrade "
                        "starts; this %s goes on" % (self.name, skip_label, self.state or "(no state)", phase)
                    )
            last = node_record.get_json_annotation(self.profile, self.node, node_record.LAST_TRANSITION) or {}
            entry = sm.phase_entry(
                phase,
                self.state,
                self.result["at_target"],
                node_record.has_bookkeeping(self.profile, self.node),
                self.retry_failed,
                self.host_at_target,
                admitted=last.get("to") == sm.UPGRADE_REQUIRED,
            )
            if entry.action == "error":
                raise UpgradeFailed("node %s: %s" % (self.name, entry.message))
            if entry.action == "noop" and phase in ("prepare", "finish"):
                self.result["message"] = entry.message
            elif entry.action == "done_without_disruption":
                self._done_without_disruption()
            else:
                getattr(self, "_phase_" + phase)(entry, reason)
        except sm.UpgradeNotStarted as exc:
            self.result["not_started"] = True
            self.result["message"] = str(exc)
        except UpgradeFailed as exc:
            self.result["message"] = str(exc)
            self._finish_result()
            raise
        return self._finish_result()

    def write_stop(self, reason: str) -> None:
        """Create the stop file with ``reason`` as its first line, unless it exists (the first stays)."""
        if not self.stop_file:
            return
        try:
            fd = os.open(self.stop_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except OSError:
            return  # there already, or its directory is gone: nothing more to stop
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(reason.replace("\n", " ")[:600] + "\n")

    def record_failure(self, reason: str, max_failures: int) -> None:
        """Record this node's failure in ``failures/`` beside the stop file (one file per node, so a
        node that fails twice counts once) and write the stop file when more than ``max_failures``
        nodes are recorded. Counted at the moment of the failure, after this node's own file is
        written: of two failures at once, the later count sees both. A record that cannot be written
        or counted stops the window (safe side)."""
        if not self.stop_file:
            return
        folder = os.path.join(os.path.dirname(self.stop_file), FAILURES_DIR)
        try:
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, self.name), "w", encoding="utf-8") as fh:
                fh.write(reason.replace("\n", " ")[:600] + "\n")
            count = len(os.listdir(folder))
        except OSError:
            count = max_failures + 1
        if count > max_failures:
            self.write_stop(reason)

    def _stop_reason(self) -> Optional[str]:
        """Why no admission may be granted now: the playbook run that started this call is gone, or the
        stop file exists (its first line, or a default); else None."""
        gone = self.caller.gone()
        if gone:
            return gone
        if not self.stop_file or not os.path.exists(self.stop_file):
            return None
        try:
            with open(self.stop_file, encoding="utf-8") as fh:
                first = fh.readline().strip()
        except OSError:
            first = ""
        return first or "the window stopped (%s exists)" % self.stop_file

    def _check_identity(self, refuse: bool) -> None:
        """Compare the host with the Node's machine; ``refuse``: a different machine fails the call
        (UpgradeConflict: nothing is marked or undone), else the result only reports it."""
        found = identity.compare(self.host_identity, identity.node_identity(self.node), self.identity_fields)
        if refuse and [m["field"] for m in found["mismatches"]] == ["boot_id"]:
            # Everything else is this machine: a host that booted moments ago, whose kubelet has not
            # reported the new boot id yet. Wait for it (bounded) instead of refusing a resumed node.
            want = identity.normalised("boot_id", self.host_identity.get("boot_id"))

            def reported(items: list[dict[str, Any]]) -> bool:
                return any(identity.normalised("boot_id", node_record.boot_id(i)) == want for i in items)

            res = k8s_wait.wait_for(
                self.core.list_node, reported, IDENTITY_BOOT_ID_WAIT, field_selector="metadata.name=%s" % self.name,
                heartbeat=self._heartbeat,
            )
            if res.ok and res.items:
                found = identity.compare(self.host_identity, identity.node_identity(res.items[0]), self.identity_fields)
        found["message"] = identity.refusal(self.host_identity.get("host") or "(host)", self.name, found)
        self.result["identity"] = found
        if refuse and found["message"]:
            raise UpgradeConflict(found["message"])

    def _finish_result(self) -> dict[str, Any]:
        self.result["state"] = self.state or None
        self.result["cordoned_by_upgrade"] = cordon.cordoned_by_upgrade(self.profile, self.node)
        # Check mode: "changed" says whether the call would change something, as Ansible expects.
        self.result["changed"] = self.changed or (self.check and bool(self.result["transitions"]))
        for key in ("would_evict", "waited_for", "evicted", "deleted", "blocking_pdbs"):
            self.result[key] = sorted(set(self.result[key]))
        if (
            self.result["at_target"]
            and self.host_at_target is not False
            and self.state in sm.IDLE_STATES + (sm.POD_RESTART_REQUIRED,)
        ):
            self.result["host_work_required"] = False
        return self.result

    # ---- phases --------------------------------------------------------------------------------
    def _phase_status(self, entry: sm.Entry, reason: Optional[str]) -> None:
        self.result["message"] = "node %s is in %s" % (self.name, self.state or "(no state label)")
        if not self.drain_preview or self.result["skipped"]:
            return  # the node alone (a node left alone has nothing to drain)
        # What prepare would remove with this policy: the accelerator pods of the pod-deletion step,
        # and the drain's pods when the drain runs (drain.enable, or a planned reboot).
        pods = self._pods()
        drain_policy = self._drain_policy()
        deletion = eviction_rules.plan_pod_deletion(pods, self.policy.pod_deletion, self.profile, self._claims(pods))
        plan = self._plan_drain(pods, drain_policy)
        remove = set(deletion.remove) | (set(plan.remove) if drain_policy.enable else set())
        rules = dict(plan.rules) if drain_policy.enable else {}
        rules.update(deletion.rules)  # the pod-deletion step comes first: its rule names the pod
        self.result["pod_rules"] = {r: rules[r] for r in sorted(remove | set(deletion.wait) | set(plan.wait))
                                    if r in rules}
        self._note_daemonset_users(pods)
        unpausable = operands.unpausable_dra_plugins(self.profile, pods)
        if unpausable:
            self.result["dra_plugin_unpausable"] = unpausable
            self.warnings.append(self._unpausable_message(unpausable))
        by_ref = {eviction_rules.pod_ref(p): p for p in pods}
        self.result["would_evict"] = sorted(remove)
        victims = [by_ref[r] for r in sorted(remove)]
        # Judged as the eviction subresource judges them: a Pending, finished or terminating victim, or
        # an unready one its PDB lets go, names no PDB here nor in refused_evictions.
        listed = drain.list_pdbs(self.policy_api) if victims else []
        self.result["blocking_pdbs"] = [p["detail"] for p in drain.blocking_from_items(listed, victims)]
        # Free to go now only because they have not started or are not Ready yet: said, not refused.
        at_risk = drain.pdbs_at_risk(listed, victims)
        self.result["pdbs_at_risk"] = [p["detail"] for p in at_risk]
        for p in at_risk:
            self.warnings.append(
                "node %s: PodDisruptionBudget %s lets %s go now only because not Ready yet; once Ready it "
                "would refuse the drain's eviction (the drain then waits up to its timeout)"
                % (self.name, p["pdb"], ", ".join(p["pods"]))
            )
        self.result["drain_blockers"] = plan.blockers if drain_policy.enable else deletion.blockers
        self.result["refused_evictions"] = self._structural_refusals(victims)
        self.result["waited_for"] = sorted(set(plan.wait) | set(deletion.wait))

    def _phase_fail(self, entry: sm.Entry, reason: Optional[str]) -> None:
        reason = reason or "upgrade failed (no reason given)"
        last = node_record.get_json_annotation(self.profile, self.node, node_record.LAST_TRANSITION) or {}
        if self.own_run_only and (not self.run_id or last.get("run_id") != self.run_id):
            raise UpgradeConflict(
                "node %s was last moved by run %s, not this run (%s): left to that run (state %s)"
                % (self.name, last.get("run_id") or "(unknown)", self.run_id or "(no run id)", self.state or "(none)")
            )
        if self.state == sm.UPGRADE_FAILED and last.get("reason") == reason:
            self.result["message"] = "node %s already upgrade-failed: %s" % (self.name, reason)
            return
        if self.state in (sm.UPGRADE_REQUIRED,) + sm.PREPARE_STATES:
            # Still before host work (a prepare that could not finish its own abort): abort as prepare would.
            note = self._abort_transition(reason)
            self.result["message"] = "node %s marked upgrade-failed: %s; %s" % (self.name, reason, note)
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
            boot = {self._ann(node_record.BOOT_ID_BEFORE): node_record.boot_id(self.node) or None}
            if self.state == sm.POD_RESTART_REQUIRED:
                why = "%s; %s" % (reason or "host reboot planned", why)
                self._transition(sm.REBOOT_REQUIRED, why, annotations=boot)
            elif not self.check:
                # Rebooting again after a killed run: validation must wait for a boot after this one.
                self.node = node_record.patch_node(self.core, self.name, {"metadata": {"annotations": boot}})
        self.result["message"] = "node %s is in %s" % (self.name, self.state)

    # ---- failure paths and messages -----------------------------------------------------------------

    def _unpausable_message(self, plugins: list[str]) -> str:
        return (
            "the DRA kubelet plugin %s selects no %s* deploy label that the pause changes (its driver and "
            "operands labels are never paused), so the upgrade cannot take it off and it would hold the driver at the "
            "unload; give its DaemonSet nodeSelector %s%s: \"true\" (NVIDIA's "
            "chart: kubeletPlugin.nodeSelector) and label the node so, or set vendor_profile."
            "dra_kubelet_plugin_selector if these pods are not the plugin"
            % (", ".join(plugins), self.profile["deploy_label_prefix"], self.profile["deploy_label_prefix"],
               DRA_PLUGIN_OPERAND)
        )

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

    def _abort(self, reason: str) -> None:
        """Failure in prepare: upgrade-failed, with the node put back as recorded in the same guarded
        patch (see :meth:`_abort_transition`); raises UpgradeFailed (or UpgradeConflict)."""
        note = self._abort_transition(reason)
        raise UpgradeFailed("node %s: %s; %s" % (self.name, reason, note))

    def _abort_transition(self, reason: str) -> str:
        """Move to upgrade-failed and, in the same patch guarded like a transition, restore the operand
        labels and the recorded schedulability and drop the bookkeeping - computed from a fresh read, so
        a run that lost the node to another run undoes nothing. Once host work may have started
        (``host-work-started``), the node stays cordoned and keeps its device baseline. Returns the note."""
        if not self.check:
            self._check_owned(node_record.read_node(self.core, self.name))
        touched = bool(node_record.get_annotation(self.profile, self.node, node_record.HOST_WORK_STARTED))
        before = node_record.get_json_annotation(self.profile, self.node, node_record.OPERAND_LABELS_BEFORE)
        labels = operands.restore_plan(self._labels(), before) if before is not None else {}
        recorded = node_record.get_annotation(self.profile, self.node, node_record.UNSCHEDULABLE_BEFORE)
        uncordon = not touched and recorded == "false" and cordon.is_cordoned(self.node)
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
        self._transition(
            sm.UPGRADE_FAILED,
            "%s; %s" % (reason, note),
            labels=labels,
            annotations={self._ann(s): None for s in dropped},
            warning=True,
            uncordon=uncordon,
        )
        return note

    def _fail_after_host_work(self, reason: str) -> None:
        """Failure once the host may have changed: upgrade-failed, and the node stays cordoned."""
        self._transition(sm.UPGRADE_FAILED, reason + "; node stays cordoned", warning=True)
        raise UpgradeFailed("node %s: %s; node stays cordoned" % (self.name, reason))
