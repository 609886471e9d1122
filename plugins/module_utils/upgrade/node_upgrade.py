# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""NodeUpgrade: runs one phase (prepare, reboot, finish, fail, status) of a node's driver upgrade on
the Kubernetes API. It builds the call's ``UpgradeContext`` (``context``) and its guarded
writes (``Transitions``, ``transitions``), reads the node, routes the phase through the state
machine (``states.phase_entry``), honours the skip label, and hands the work to the phase
functions: ``prepare`` (with ``start`` and ``pod_removal``), ``reboot``,
``finish`` (finish and fail) and ``status``. The two failure paths (abort before host
work, upgrade-failed and cordoned after it) are in ``transitions``; what is written on the node
(label, annotations, events) in ``record``.
"""

from __future__ import annotations

import uuid
from typing import Any, Callable, Mapping, Optional

from ansible_collections.npuops.fleet.plugins.module_utils.driver.node_labels import node_driver_version
from ansible_collections.npuops.fleet.plugins.module_utils.driver.version import same_driver_version
from ansible_collections.npuops.fleet.plugins.module_utils.fleet import identity
from ansible_collections.npuops.fleet.plugins.module_utils.fleet.caller import CallerWatch
from ansible_collections.npuops.fleet.plugins.module_utils.k8s.lease import LeaseLostError
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import admission, cordon, guards
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import record as node_record
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import validation as upgrade_validation
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.context import UpgradeContext
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.finish import (
    done_without_disruption,
    phase_fail,
    phase_finish,
)
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.policy import UpgradePolicy
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.prepare import phase_prepare
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.reboot import phase_reboot
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.states import (  # noqa: F401 - re-exported
    UpgradeConflict,
    UpgradeFailed,
)
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.status import phase_status
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.transitions import Transitions

try:
    from kubernetes import client as k8s
except ImportError:  # pragma: no cover - reported by the module
    k8s = None  # type: ignore[assignment]

# phase -> its function of (ctx, transitions, entry, reason)
PHASES: dict[str, Callable[[UpgradeContext, Transitions, sm.Entry, Optional[str]], None]] = {
    "prepare": phase_prepare,
    "reboot": phase_reboot,
    "finish": phase_finish,
    "fail": phase_fail,
    "status": phase_status,
}


def lost_lease(exc: BaseException) -> bool:
    """True when ``exc`` (what :meth:`NodeUpgrade.run` raised) is the run's lost Lease: the conflict
    :meth:`UpgradeContext.heartbeat` raised from a LeaseLostError of its keepalive."""
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


class NodeUpgrade:
    """One phase of one node's upgrade. ``run(phase, reason)`` returns the result dict (see the
    module's RETURN) or raises UpgradeFailed (the node already says why) / UpgradeConflict.
    Timeouts in seconds (None: wait forever). ``ctx`` holds the call's state; ``transitions`` its writes."""

    # everything else lives on ctx: an attribute set here by mistake would do nothing
    __slots__ = ("api_client", "ctx", "transitions")

    def __init__(
        self,
        api_client: Any,
        profile: Mapping[str, Any],
        policy: UpgradePolicy,
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
        coord = coord_api or (k8s.CoordinationV1Api(api_client) if api_client is not None else None)
        self.ctx = UpgradeContext(
            name=node_name,
            profile=profile,
            policy=policy,
            target=target_version,
            check=check_mode,
            admission_timeout=admission_timeout,
            operands_timeout=operands_timeout,
            validation_timeout=validation_timeout,
            retry_failed=retry_failed,
            run_id=run_id or None,
            own_run_only=own_run_only,
            reboot_planned=reboot_planned,
            host_at_target=host_at_target,
            baseline=dict(baseline) if baseline else None,
            host_identity=dict(host_identity) if host_identity else None,
            identity_fields=list(identity_fields) if identity_fields is not None else list(identity.FIELDS),
            drain_preview=drain_preview,
            stop_file=stop_file or None,
            caller=caller if caller is not None else CallerWatch(),
            core=core or k8s.CoreV1Api(api_client),
            policy_api=policy_api or k8s.PolicyV1Api(api_client),
            # resource.k8s.io/v1 ResourceClaims (the DRA rule): read_namespaced_resource_claim(name, namespace)
            resource_api=resource_api or (claim_reader(api_client) if api_client is not None else None),
            slots=admission.Slots(coord, profile, admission_namespace) if coord is not None else None,
            keepalive=keepalive,
            token=uuid.uuid4().hex,
        )
        self.transitions = Transitions(self.ctx)

    # ---- what the module reads after run() (or its failure) ---------------------------------------
    @property
    def node(self) -> dict[str, Any]:
        """The Node as last read or written ({} before the first read)."""
        return self.ctx.node

    @property
    def state(self) -> str:
        """The upgrade-state label ("" = none)."""
        return self.ctx.state

    @property
    def result(self) -> dict[str, Any]:
        return self.ctx.result

    @property
    def changed(self) -> bool:
        return self.ctx.changed

    @property
    def warnings(self) -> list[str]:
        return self.ctx.warnings

    # ---- entry point ---------------------------------------------------------------------------
    def run(self, phase: str, reason: Optional[str] = None) -> dict[str, Any]:
        ctx = self.ctx
        if phase in ("prepare", "reboot", "status"):
            ctx.reboot_reason = reason
        ctx.node = node_record.read_node(ctx.core, ctx.name)
        ctx.state = ctx.labels().get(ctx.profile["upgrade_state_label"], "")
        ctx.last_transition_seen = node_record.get_annotation(ctx.profile, ctx.node, node_record.LAST_TRANSITION)
        ctx.result["previous_state"] = ctx.state or None
        if not ctx.target:
            ctx.target = node_record.get_annotation(ctx.profile, ctx.node, node_record.TARGET_VERSION)
            ctx.result["target_version"] = ctx.target
        version = node_driver_version(ctx.profile, ctx.labels())
        ctx.result["driver_version"] = version
        ctx.result["at_target"] = same_driver_version(version, ctx.target)
        recorded = node_record.get_json_annotation(ctx.profile, ctx.node, node_record.DEVICES_BEFORE)
        ctx.result["baseline"] = recorded or ctx.baseline
        if recorded and ctx.baseline and ctx.host_at_target:
            differs = upgrade_validation.devices_differ(recorded, ctx.baseline)
            if differs:
                # A retry compares with the host before the first attempt, not with the broken one.
                ctx.host_at_target = False
                ctx.result["baseline_mismatch"] = differs
        skip_label = ctx.profile["upgrade_skip_label"]
        try:
            if phase in ("prepare", "status") and ctx.host_identity is not None and ctx.identity_fields:
                guards.check_identity(ctx, refuse=phase == "prepare")
            if ctx.labels().get(skip_label) == "true":
                # As in the operators: the skip label is checked before an upgrade starts. A node
                # labelled in the middle of its upgrade is finished (or failed), never left cordoned.
                if phase in ("prepare", "status") and ctx.state in sm.IDLE_STATES:
                    # status says so too: a caller checks the label before it touches the host at all
                    ctx.result["skipped"] = True
                    ctx.result["skip_reason"] = "node is labelled %s=true; its driver is left alone" % skip_label
                    ctx.result["message"] = ctx.result["skip_reason"]
                    if phase == "prepare":
                        return self._finish_result(phase)
                elif phase != "status":
                    ctx.warnings.append(
                        "node %s is labelled %s=true while in %s: the label is honoured only before an upgrade "
                        "starts; this %s goes on" % (ctx.name, skip_label, ctx.state or "(no state)", phase)
                    )
            last = node_record.get_json_annotation(ctx.profile, ctx.node, node_record.LAST_TRANSITION) or {}
            entry = sm.phase_entry(
                phase,
                ctx.state,
                ctx.result["at_target"],
                node_record.has_bookkeeping(ctx.profile, ctx.node),
                ctx.retry_failed,
                ctx.host_at_target,
                admitted=last.get("to") == sm.UPGRADE_REQUIRED,
            )
            if entry.action == "error":
                raise UpgradeFailed("node %s: %s" % (ctx.name, entry.message))
            if entry.action == "noop" and phase in ("prepare", "finish"):
                ctx.result["message"] = entry.message
            elif entry.action == "done_without_disruption":
                done_without_disruption(ctx, self.transitions)
            else:
                PHASES[phase](ctx, self.transitions, entry, reason)
        except sm.UpgradeNotStarted as exc:
            ctx.result["not_started"] = True
            ctx.result["message"] = str(exc)
        except UpgradeFailed as exc:
            ctx.result["message"] = str(exc)
            self._finish_result(phase)
            raise
        return self._finish_result(phase)

    def write_stop(self, reason: str) -> None:
        """Create the stop file with ``reason`` as its first line, unless it exists (the first stays)."""
        guards.write_stop(self.ctx.stop_file, reason)

    def record_failure(self, reason: str, max_failures: int) -> None:
        """Record this node's failure beside the stop file; the stop file when more than
        ``max_failures`` nodes failed (see guards.record_failure). In a shared window the failure also
        counts against the window's budget, which stops every process's admissions; a failure that
        cannot be counted there stops this process (the stop file)."""
        guards.record_failure(self.ctx.stop_file, self.ctx.name, reason, max_failures)
        not_counted = guards.record_window_failure(self.ctx, reason)
        if not_counted:
            guards.write_stop(self.ctx.stop_file, not_counted)

    def _finish_result(self, phase: str) -> dict[str, Any]:
        ctx = self.ctx
        ctx.result["state"] = ctx.state or None
        # The routes, so that callers (the role) never map states themselves.
        ctx.result["route"] = sm.route_from(ctx.state, "none")
        ctx.result["resume_route"] = sm.route_from(ctx.result["previous_state"], "install")
        ctx.result["resumed_from"] = (
            sm.resumed_from(ctx.result["previous_state"], ctx.state)
            if phase == "prepare" and not ctx.result["skipped"] and not ctx.result["not_started"]
            else None
        )
        ctx.result["cordoned_by_upgrade"] = cordon.cordoned_by_upgrade(ctx.profile, ctx.node)
        # Check mode: "changed" says whether the call would change something, as Ansible expects.
        ctx.result["changed"] = ctx.changed or (ctx.check and bool(ctx.result["transitions"]))
        for key in ("would_evict", "waited_for", "evicted", "deleted", "blocking_pdbs"):
            ctx.result[key] = sorted(set(ctx.result[key]))
        if (
            ctx.result["at_target"]
            and ctx.host_at_target is not False
            and ctx.state in sm.IDLE_STATES + (sm.POD_RESTART_REQUIRED,)
        ):
            ctx.result["host_work_required"] = False
        return ctx.result
