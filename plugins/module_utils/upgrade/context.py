# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""UpgradeContext: everything one call of NodeUpgrade reads and writes - the node and its state, the
inputs (vendor profile, typed policy, check mode, timeouts, run identity), the clients, the keepalive,
and the result being built - declared in one place, handed to the phase functions (``prepare``,
``pod_removal``, ``finish``...) together with the guarded writes (``transitions``).
Also the small helpers every step uses: the annotation key, the node's labels, its pods, a deadline,
and how an exception or a timeout is said in a message.
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any, Callable, Mapping, Optional

from ansible_collections.npuops.fleet.plugins.module_utils.driver.vendor_profiles import annotation_key
from ansible_collections.npuops.fleet.plugins.module_utils.fleet.caller import CallerWatch
from ansible_collections.npuops.fleet.plugins.module_utils.k8s import wait as k8s_wait
from ansible_collections.npuops.fleet.plugins.module_utils.k8s.lease import LeaseLostError
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import admission, drain
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import record as node_record
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.policy import UpgradePolicy
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.states import UpgradeConflict


def new_result(node_name: str, target_version: Optional[str]) -> dict[str, Any]:
    """The result dict of one call before any step ran (the module's RETURN; steps fill it in). Keys
    added by some paths only: ``identity``, ``dra_plugin_unpausable``, ``baseline_mismatch``,
    ``drain_blockers``, ``changed`` (set at the end)."""
    return {
        "node": node_name,
        "state": None,
        "previous_state": None,
        # set at the end from state / previous_state (states.route_from, states.resumed_from)
        "route": "none",
        "resume_route": "install",
        "resumed_from": None,
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


@dataclasses.dataclass
class UpgradeContext:
    """One call's inputs and working state. Times: timeouts in seconds (None: wait forever);
    ``claim_not_after`` on the admission Slots' clock (seconds); pods and nodes as API JSON dicts."""

    # ---- inputs ----
    name: str  # the Node's name
    profile: Mapping[str, Any]  # the resolved vendor profile (labels, annotation prefix, operands)
    policy: UpgradePolicy
    target: Optional[str]  # the driver version to reach; read from the node's target-version when not given
    check: bool  # check mode: compute and say, write nothing
    admission_timeout: Optional[float]
    operands_timeout: Optional[float]
    validation_timeout: Optional[float]
    retry_failed: bool  # prepare may restart a node in upgrade-failed
    # The window's run id, written into every transition record: a run that lost its Lease marks
    # upgrade-failed only a node whose last transition is its own (own_run_only).
    run_id: Optional[str]
    own_run_only: bool
    reboot_planned: bool  # the host will reboot: the drain is full whatever the policy says
    host_at_target: Optional[bool]  # the host's own check (None: not known)
    baseline: Optional[dict[str, Any]]  # devices seen on the host ({"device_count": N, "pci_bus_ids": [...]})
    # The machine Ansible reached (npu_driver_facts identity); prepare refuses it, before any
    # change, when it is not the machine behind the Node.
    host_identity: Optional[dict[str, Any]]
    identity_fields: list[str]
    drain_preview: bool  # status lists what prepare would remove
    # A file on the control node whose existence admits no more nodes (the window stopped after a
    # failure); read before every admission decision.
    stop_file: Optional[str]
    caller: CallerWatch  # an orphan of a killed playbook must not be admitted (see fleet/caller.py)
    # ---- clients ----
    core: Any  # CoreV1Api (or a fake)
    policy_api: Any  # PolicyV1Api: PDBs and evictions
    resource_api: Any  # read_namespaced_resource_claim(name, namespace), or None
    slots: Optional[admission.Slots]  # the admission slot record (a Lease); None without a coordination client
    # Called from every wait (window/run_lease.LeaseKeepalive: renews the run's Lease); see heartbeat.
    keepalive: Optional[Callable[[], None]]
    token: str  # this call's id in transition records and slot entries
    # ---- working state ----
    node: dict[str, Any] = dataclasses.field(default_factory=dict)  # the Node as last read or patched
    state: str = ""  # the upgrade-state label ("" = none)
    # The last-transition annotation as this run last saw it: the guard that tells another run's
    # transition from an unrelated write when a resourceVersion test fails.
    last_transition_seen: Optional[str] = None
    # Slot clock time after which a start must not label the node (its admission claim may be
    # treated as expired by other runs); set only around the first transition.
    claim_not_after: Optional[float] = None
    reboot_reason: Optional[str] = None  # the caller's reason of a prepare/reboot/status (why the host reboots)
    claims_read: dict[str, Any] = dataclasses.field(default_factory=dict)  # "ns/claim" -> claim or why not read
    # ---- the result ----
    changed: bool = False  # something was written
    warnings: list[str] = dataclasses.field(default_factory=list)
    result: dict[str, Any] = dataclasses.field(default_factory=dict)  # see new_result
    sleep: Callable[[float], None] = dataclasses.field(init=False)  # pauses of retries, with the keepalive

    def __post_init__(self) -> None:
        if not self.result:
            self.result = new_result(self.name, self.target)
        self.sleep = k8s_wait.pauser(self.heartbeat)

    def heartbeat(self) -> None:
        """The keepalive, called from every wait. A lost Lease (LeaseLostError) leaves as UpgradeConflict
        (its cause the LeaseLostError, see node_upgrade.lost_lease): the node may already be another
        run's, so every step lets it through as it does any conflict - no abort, no failure mark."""
        if self.keepalive is None:
            return
        try:
            self.keepalive()
        except LeaseLostError as exc:
            raise UpgradeConflict(str(exc)) from exc

    def ann(self, suffix: str) -> str:
        """The profile's annotation key of ``suffix`` (record.LAST_TRANSITION...)."""
        return annotation_key(self.profile, suffix)

    def labels(self) -> dict[str, str]:
        return node_record.labels(self.node)

    def pods(self) -> list[Mapping[str, Any]]:
        """The node's pods now (one paged LIST)."""
        return list(drain.list_node_pods(self.core, self.name))


def deadline(timeout: Optional[float]) -> Optional[float]:
    """time.monotonic() seconds ``timeout`` from now; None (no deadline) for None."""
    return None if timeout is None else time.monotonic() + timeout


def secs(timeout: Optional[float]) -> str:
    """A timeout as messages say it: seconds, or "0 (forever)" for None."""
    return "0 (forever)" if timeout is None else "%g" % timeout


def describe(exc: BaseException) -> str:
    """An exception in one line: "HTTP <status> <reason>: <server message>" for API errors, else
    "<type>: <text>"."""
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
