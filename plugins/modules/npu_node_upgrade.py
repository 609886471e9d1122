#!/usr/bin/python
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: npu_node_upgrade
short_description: The Kubernetes side of one node's GPU/NPU driver upgrade, PDB-aware and resumable
description:
  - Runs the GPU/NPU operators' per-node upgrade state machine on the node's
    C(<vendor>/...-driver-upgrade-state) label, in phases around the host work that Ansible does.
  - C(prepare) resumes from the node's state label; upgrade-required, cordon-required (the prior
    C(spec.unschedulable) is recorded in an annotation), wait-for-jobs-required, pod-deletion-required,
    drain-required (when O(policy) enables it), operand deploy labels paused; it ends in
    C(pod-restart-required), "ready for host work". A node already at O(target_version) is marked
    upgrade-done without disruption.
  - On a pod-deletion, drain or operand failure before any host change, schedulability and operand
    labels are restored exactly as recorded, the node goes to C(upgrade-failed) with the reason
    (naming PDBs and pods) and the task fails.
  - C(reboot) marks C(reboot-required). C(finish) validates (node Ready, operand labels restored to their
    exact previous values, operand pods Running and Ready, driver label equal to the target), uncordons
    only when the upgrade cordoned the node, and ends in C(upgrade-done). C(fail) sets C(upgrade-failed)
    with O(reason); the node stays cordoned. C(status) is read-only and reports the drain preflight.
  - Every transition writes an annotation C(<prefix>-last-transition) (reason and time) and an Event on
    the node. Waits are watches with bounded timeouts; transient API errors are retried with backoff.
  - The vendor's skip label (C(nvidia.com/gpu-driver-upgrade.skip=true)) leaves the node alone when an
    upgrade would start; a node labelled in the middle of its upgrade is still finished, failed or aborted
    (never left cordoned with its operands paused), as the operators check the label only before a start.
version_added: 0.1.0
author:
  - npuops maintainers (@npuops)
extends_documentation_fragment:
  - npuops.fleet.k8s_auth
  - npuops.fleet.vendor
options:
  node:
    description: Name of the Kubernetes node.
    type: str
    required: true
  phase:
    description: Which part of the upgrade to run.
    type: str
    choices: [prepare, reboot, finish, fail, status]
    default: status
  target_version:
    description:
      - Driver version the host will run after the upgrade, for example C(550.90.07); compared with the
        node's driver-version labels. Required to start an upgrade; recorded on the node for O(phase=finish).
    type: str
  policy:
    description:
      - The operators' C(upgradePolicy) block as in Helm values (camelCase) or snake_case -
        C(maxParallelUpgrades), C(maxUnavailable), C(waitForCompletion), C(npuPodDeletion)/C(gpuPodDeletion),
        C(drain), C(reboot). Chart defaults apply. Unknown keys or invalid values fail before any change.
      - C(podDeletion) (ClusterPolicy) is accepted for C(npuPodDeletion)/C(gpuPodDeletion), and
        C(deleteEmptyDir) (NVIDIA's spelling) for C(deleteEmptyDirData).
    type: dict
    default: {}
  reason:
    description: Failure reason for O(phase=fail), or the reason recorded for a reboot/finish transition.
    type: str
  admission_timeout:
    description: Seconds prepare waits while the vendor's unavailable nodes are at C(maxUnavailable)
      or C(maxParallelUpgrades) nodes are upgrading. 0 waits without bound while another node is
      upgrading or admitted (its lane may free one), and gives up 600 s after that stopped (the
      limit is then held by nodes cordoned, NotReady or failed outside any upgrade, which only a
      person frees).
    type: int
    default: 600
  operands_timeout:
    description: Seconds to wait for paused operand pods to leave the node. 0 waits forever.
    type: int
    default: 300
  validation_timeout:
    description: Seconds finish waits for validation (node Ready, driver label, operand pods). 0 waits forever.
    type: int
    default: 600
  retry_failed:
    description: Whether prepare restarts a node in C(upgrade-failed) from C(upgrade-required).
    type: bool
    default: true
  reboot_planned:
    description:
      - The host work will (or may) reboot the host. A reboot ends every pod on it, so C(prepare) then
        drains fully through the Eviction API (PodDisruptionBudgets honoured) whatever C(drain.enable)
        and C(drain.podSelector) say; pods that cannot go (drain-skip label, no controller without
        C(drain.force), emptyDir without C(drain.deleteEmptyDirData)) stop the upgrade, named.
        RV(full_drain) says why a drain ran.
      - O(phase=reboot) always does this drain before it marks C(reboot-required); if pods cannot go,
        the node ends C(upgrade-failed) and stays cordoned, and the reboot must not happen.
    type: bool
    default: false
  failure_domain_label:
    description:
      - Node label whose value is the node's failure domain (zone, rack), returned as RV(failure_domain);
        the maintenance window orders its lanes by it so that consecutive lanes do not drain one domain.
    type: str
    default: topology.kubernetes.io/zone
  host_at_target:
    description:
      - The caller's check of the host's driver (loaded == userspace == on-disk module == target).
        V(false) stops the "already at target" shortcut that labels alone would take; a node that an
        earlier attempt left cordoned is put back into service without host work only when this is
        V(true). Unset = unknown (labels decide, but never uncordon such a node).
      - The module also counts it as V(false) when O(baseline) differs from the devices recorded at the
        first attempt (RV(baseline_mismatch)).
    type: bool
  baseline:
    description:
      - The host's devices now, a dict with C(device_count) (int) and C(pci_bus_ids) (list of str).
      - Recorded on the node (annotation C(<prefix>-devices-before)) when an upgrade starts and none is
        recorded yet; kept across retries after C(upgrade-failed) until C(upgrade-done), so a retry
        compares with the healthy host, not with the broken one. RV(baseline) returns the recorded value.
    type: dict
  host_identity:
    description:
      - O(phase=prepare) (check mode too) and O(phase=status) - the identity of the machine the caller reached, as
        M(npuops.fleet.npu_driver_facts) returns it in RV(npuops.fleet.npu_driver_facts#module:identity).
        Before anything else, each field of O(identity_fields) that both sides know is compared with the
        Node - C(machine_id) with C(status.nodeInfo.machineID), C(system_uuid) with C(systemUUID)
        (case-insensitive), C(boot_id) with C(bootID), C(hostname) with the C(kubernetes.io/hostname)
        label (short name and FQDN of one name match). When the boot id is the only difference (a host
        that booted moments ago) the call first waits up to 90 seconds for the kubelet to report it.
        A difference, or no field known on both sides,
        fails the call with RV(conflict) and RV(identity_mismatch) and changes nothing, so that a wrong
        inventory mapping never cordons one machine's node while the driver is reinstalled on another.
        O(phase=status) only reports the comparison in RV(identity).
      - Unset - no identity check.
    type: dict
    suboptions:
      host:
        description: The inventory name of the host, used in the message.
        type: str
      machine_id:
        description: C(/etc/machine-id).
        type: str
      system_uuid:
        description: C(/sys/class/dmi/id/product_uuid).
        type: str
      boot_id:
        description: The kernel's boot id.
        type: str
      hostname:
        description: The kernel host name.
        type: str
  drain_preview:
    description:
      - O(phase=status) only - also compute the drain preview (RV(would_evict), RV(blocking_pdbs),
        RV(refused_evictions), one pod list, one PodDisruptionBudget list and a server-side dry-run
        eviction per pod). V(false) reads the node only (one GET) - its state and whether the skip label
        leaves it alone (RV(skipped)).
    type: bool
    default: true
  nodes:
    description:
      - Only with O(phase=status) and O(drain_preview=false) - read several nodes in this one call (one GET
        each, one process - what a per-node call costs in module start-up is paid once). Each entry holds
        the per-node options below, each as the option of that name with its default when unset (the
        call's own per-node options do not carry over); the call's client options (O(kubeconfig),
        O(context), ...) serve every entry. O(node) is still required and names the call in its messages.
      - RV(nodes) returns, per entry's O(nodes[].key), what the single-node call would return (without
        RV(api_requests) and RV(kube_auth), which the call returns once at the top level, beside RV(nodes)
        and C(changed) - the other return values are not returned at the top level). An entry that fails
        (bad input, node not found, an API error after its retries, an unexpected error with its
        C(exception)) returns C(failed) and C(msg) there and does not fail the other entries. After an
        outage the retries gave up on, or a 401/403, no later entry is read (each says C(not read)), so an
        API server that is down costs one read's retry budget, not one per node. The call itself fails
        only on its own input (a client that cannot be built, an entry without O(nodes[].key) or
        O(nodes[].node)).
      - Used by the maintenance window's fleet preflight to read every target host's node at once.
    type: list
    elements: dict
    suboptions:
      key:
        description: Names the entry in RV(nodes) (the inventory host name).
        type: str
        required: true
      node:
        description: Name of the Kubernetes node.
        type: str
        required: true
      target_version:
        description: As O(target_version).
        type: str
      policy:
        description: As O(policy) (a mapping; anything else fails this entry only).
        type: raw
      vendor:
        description: As O(vendor).
        type: str
        default: nvidia
      vendor_profile:
        description: As O(vendor_profile) (a mapping; anything else fails this entry only).
        type: raw
      vendor_profiles:
        description: As O(vendor_profiles) (a mapping; anything else fails this entry only).
        type: raw
      failure_domain_label:
        description: As O(failure_domain_label).
        type: str
        default: topology.kubernetes.io/zone
  identity_fields:
    description:
      - The fields of O(host_identity) to compare. Leave out C(hostname) where kubelets run with
        C(--hostname-override); an empty list turns the check off (no RV(identity) is returned).
    type: list
    elements: str
    choices: [machine_id, system_uuid, boot_id, hostname]
    default: [machine_id, system_uuid, boot_id, hostname]
  run_id:
    description:
      - The maintenance window's run id, written into every transition record (annotation
        C(<prefix>-last-transition), key C(run_id)) so that later calls can tell this run's transitions
        from another run's.
    type: str
  own_run_only:
    description:
      - O(phase=fail) only - mark the node only when its last transition was written by O(run_id); a node
        last moved by another run (or before run ids) fails with RV(conflict) and is left alone. For a run
        that lost its Lease - another run may be working on the node now.
    type: bool
    default: false
  stop_file:
    description:
      - A file on the control node (the maintenance window's C(<run dir>/stop)). Once it exists,
        O(phase=prepare) admits this node no more; a call still waiting for admission returns
        RV(not_started) (its first line as the reason) without any change, not failed.
    type: path
  max_failures:
    description:
      - With O(stop_file), a failure of this call records the node in C(failures/) beside O(stop_file)
        (one file per node; the role's rescue records there too) and writes O(stop_file), when it does
        not exist yet, once more than this many nodes are recorded, with the node, the phase and the
        reason as its first line. Counted at the moment of the failure, so that a slot that
        C(prepare)'s abort frees is never taken by a host of the same run after one failure too many,
        and two failures at once both count. Unset = no record.
    type: int
  admission_namespace:
    description:
      - Namespace of the admission slot record, the Lease C(npuops-fleet-admission-<vendor>) through which
        concurrent C(prepare) calls (hosts of one batch, two runs) agree on C(maxUnavailable) and
        C(maxParallelUpgrades).
    type: str
    default: kube-system
  run_lease:
    description:
      - The run-wide maintenance Lease (as M(npuops.fleet.npu_upgrade_lease) holds it) to renew while this
        call waits - admission, jobs, pod deletion, drain, validation - so a wait without bound
        (C(timeoutSeconds) 0) never outlives the Lease. Renewed at most every O(run_lease.ttl)/3 seconds.
      - When the Lease is found held by another run, or could not be renewed for its whole TTL, the wait
        stops and the step fails (before host work through the abort, which restores the node).
      - Omitted (the default) - nothing is renewed. Ignored in check mode.
    type: dict
    suboptions:
      name:
        description: Lease name.
        type: str
        default: npuops-fleet-maintenance-window
      namespace:
        description: Lease namespace.
        type: str
        default: kube-system
      holder:
        description: This run's holder identity.
        type: str
        required: true
      ttl:
        description: Seconds, the Lease's C(leaseDurationSeconds) written at each renewal.
        type: int
        default: 900
      renewed_at:
        description:
          - When the caller last renewed the Lease, in seconds since the epoch (this control node's clock);
            the 2/3-of-TTL give-up deadline counts from then, but from at most a third of the TTL before this
            call (renewals made inside other calls' waits are not known to the caller). Unset - from this call's start.
        type: float
      stamp:
        description:
          - A file on the control node whose modification time is the last renewal of the Lease at a phase
            boundary (M(npuops.fleet.npu_phase)); the later of it and O(run_lease.renewed_at) counts.
        type: path
      participant:
        description:
          - This process's name in a window shared by several processes (the C(participant) of
            M(npuops.fleet.npu_upgrade_lease)); each renewal renews its record too, a failure
            with O(max_failures) counts against the window's budget, and O(phase=prepare) admits no node once
            the window is stopping or closed.
        type: str
attributes:
  check_mode:
    support: full
    description: Reports the transitions and the pods that would be evicted; changes nothing.
notes:
  - C(deploy/rbac/) lists exactly the API access needed - the ClusterRole C(npuops-fleet) (nodes, pods,
    evictions, PodDisruptionBudgets) and the Roles C(npuops-fleet-leases) (kube-system, the admission
    record by name) and C(npuops-fleet-events) (default).
"""

EXAMPLES = r"""
- name: Cordon, drain and pause operands of the node (delegated to the control host)
  npuops.fleet.npu_node_upgrade:
    node: "{{ inventory_hostname }}"
    vendor: nvidia
    phase: prepare
    target_version: "550.90.07"
    policy:
      drain: {enable: true, deleteEmptyDirData: true, timeoutSeconds: 600}
      maxUnavailable: "25%"
  delegate_to: localhost
  register: prep

- name: Validate and uncordon after the host work
  npuops.fleet.npu_node_upgrade:
    node: "{{ inventory_hostname }}"
    phase: finish
    target_version: "550.90.07"
  delegate_to: localhost
  when: prep.host_work_required or prep.state != 'upgrade-done'
"""

RETURN = r"""
node: {description: Node name., returned: always, type: str}
state: {description: State label value after the call., returned: always, type: str}
previous_state: {description: State label value before the call., returned: always, type: str}
route:
  description:
    - The route the host work takes from RV(state) - C(install) from C(pod-restart-required), C(reboot) from
      C(reboot-required), C(finish) (the host work was done) from C(reboot-validation-required),
      C(validation-required) or C(uncordon-required) - or C(none) for a state no route starts from.
    - After O(phase=prepare), the way the upgrade goes on from the state prepare left (or found) the node in.
  returned: always
  type: str
  sample: install
resume_route:
  description:
    - The route (as RV(route)) from RV(previous_state), C(install) where none starts there - the route a
      check-mode O(phase=prepare) (a preflight's plan) expects, as a node an earlier run left ready for host
      work goes on from there and any other goes through the install.
  returned: always
  type: str
  sample: install
resumed_from:
  description:
    - O(phase=prepare) - RV(previous_state) when the call went on with an upgrade already under way (a state
      other than none, C(upgrade-done) or C(upgrade-failed)) and left the node where a RV(route) starts.
    - Null for a fresh start, a node left alone (RV(skipped)) or not admitted (RV(not_started)), and in the
      other phases.
  returned: always
  type: str
  sample: reboot-required
transitions:
  description: Transitions made (or, in check mode, that would be made), each with from, to, reason, time.
  returned: always
  type: list
  elements: dict
skipped:
  description:
    - True when prepare left the node alone because of the vendor's upgrade skip label, or (O(phase=status))
      would leave it alone (Ansible then shows the task as skipped).
  returned: when the node was left alone
  type: bool
skip_reason: {description: Why the node was left alone., returned: always, type: str}
drain_blockers:
  description: O(phase=status) - pods that would block the drain (or the pod-deletion step), by class.
  returned: with O(phase=status)
  type: dict
at_target: {description: The node's driver-version label equals the target., returned: always, type: bool}
not_started:
  description: O(stop_file) appeared while the node waited for admission; nothing was changed.
  returned: always
  type: bool
failure_domain:
  description: The node's O(failure_domain_label) value (null without it).
  returned: when the node was read
  type: str
host_work_required:
  description: False when the node is already at the target (it was marked upgrade-done without disruption).
  returned: always
  type: bool
evicted: {description: Pods evicted ("ns/name")., returned: always, type: list, elements: str}
deleted:
  description: Accelerator pods removed by the pod-deletion step (through the Eviction API, as the operators do).
  returned: always
  type: list
  elements: str
would_evict:
  description: Pods that would be evicted or deleted (check mode, status).
  returned: always
  type: list
  elements: str
pod_rules:
  description:
    - >-
      For each pod the call removed, would remove or waited for ("ns/name"), the rule that matched it -
      C(extended resource nvidia.com/gpu), C(DRA claim ns/claim allocated by gpu.nvidia.com), C(DRA claim
      ns/claim (could not be read ...; counted as the vendor's)), C(hostPath /dev/nvidia0), C(runtimeClassName
      nvidia with NVIDIA_VISIBLE_DEVICES=all) (the pod-deletion step's accelerator pods), or the drain's
      (C(drain (drain.enable: every pod)), C(drain.podSelector 'x'), C(drain before the reboot (every pod))).
  returned: always
  type: dict
resource_claim_reads:
  description:
    - ResourceClaims read (one namespaced GET each, retries not counted) to decide whether a pod with
      C(spec.resourceClaims) holds a device allocated by the vendor's DRA driver; 0 when no pod on the node
      that another rule does not already match names a claim.
  returned: always
  type: int
accelerator_daemonset_pods:
  description:
    - DaemonSet pods using the device (extended resource, hostPath, runtime class) that are neither
      operands nor the DRA kubelet plugin ("ns/name" -> rule); nothing removes them, so the module unload
      may find the device held. Also a warning. Filled by O(phase=status) and by the operand pause.
  returned: always
  type: dict
dra_plugin_unpausable:
  description:
    - The DRA kubelet plugin pods (the profile's C(dra_kubelet_plugin_selector)) whose DaemonSet selects
      no deploy label, so the operand pause cannot remove them; prepare refuses before the cordon.
  returned: when found
  type: list
  elements: str
cordoned_by_upgrade:
  description: The node was schedulable before and the upgrade cordoned it (our record is on the node).
  returned: always
  type: bool
blocking_pdbs:
  description:
    - PDBs that refuse (HTTP 429) the eviction of a pod the step would remove, judged as the API server's
      eviction subresource judges them - a PDB allowing 0 disruptions (or whose status the disruption
      controller has not updated for its current spec yet) over a Ready pod, or over an unready one while
      the budget is not met (unhealthyPodEvictionPolicy IfHealthyBudget, the default, and not
      currentHealthy >= desiredHealthy > 0).
    - Pending, Succeeded, Failed and terminating pods, and unready pods under AlwaysAllow, make no PDB
      blocking (see RV(pdbs_at_risk) for those that would block once Ready). A pod under two PDBs is judged
      against each as if it were the only one; the 500 the apiserver answers for it is in
      RV(refused_evictions).
    - Each entry is "ns/name (<limit>[, unhealthyPodEvictionPolicy=P], currentHealthy=N, desiredHealthy=N,
      disruptionsAllowed=N[, status not yet observed for generation G])".
  returned: always
  type: list
  elements: str
pdbs_at_risk:
  description:
    - O(phase=status) only - PDBs that let a pod go now only because it is Pending or not Ready yet, and
      would refuse its eviction once it is Ready (its PDB's disruptionsAllowed stays 0 with it healthy, or
      two PDBs cover it) - as it may be by the time the drain reaches it. A warning, not a refusal - the
      preflight goes on (a pod stuck Pending or unready still goes at the drain); each is also a module
      warning. Entries as RV(blocking_pdbs) with the reason appended.
  returned: always
  type: list
  elements: str
refused_evictions:
  description:
    - Pods the Eviction API refuses for a reason no retry changes ("ns/pod" -> the server's message), found
      by the PDBs (a pod covered by more than one) and a server-side dry-run eviction (status, check mode).
  returned: always
  type: dict
waited_for:
  description: Pods that were already terminating and were waited for (they may still hold the device).
  returned: always
  type: list
  elements: str
full_drain:
  description: Why the node was drained fully although the policy did not ask for it (a planned reboot); null otherwise.
  returned: always
  type: str
baseline:
  description: The devices recorded on the node at the first attempt (or O(baseline) when none is recorded yet).
  returned: always
  type: dict
identity:
  description:
    - The host-to-Node identity check of O(host_identity) - the fields C(compared), those C(unknown) on
      one side, the C(mismatches) (each with C(field), the C(host) value and the C(node) value) and
      whether the host is the Node's machine (C(same)), and the refusal C(message) (null when the same).
  returned: when O(host_identity) is set and O(phase=prepare) or O(phase=status)
  type: dict
  sample: {compared: [machine_id, hostname], unknown: [system_uuid, boot_id], same: false,
           mismatches: [{field: machine_id, host: 1c4f..., node: 9a0e...}]}
identity_mismatch:
  description: The call failed because the host is not the machine behind the Node (nothing was changed).
  returned: on failure
  type: bool
baseline_mismatch:
  description: How O(baseline) differs from the recorded devices (for example C(host has 7 devices, 8 before ...)).
  returned: when they differ
  type: str
kube_auth:
  description: Where the Kubernetes credentials came from, so a run shows which cluster it changed.
  returned: when the client was built
  type: dict
  contains:
    source:
      description: >-
        C(option kubeconfig), C(env K8S_AUTH_KUBECONFIG), C(env KUBECONFIG), C(~/.kube/config),
        C(in-cluster) or C(host+api_key).
      type: str
    kubeconfig:
      description: The kubeconfig path or list as given; null for C(in-cluster) and C(host+api_key).
      type: str
    context:
      description: The context used; null without a kubeconfig.
      type: str
driver_version: {description: Driver version from the node's labels., returned: always, type: str}
api_requests:
  description: Kubernetes API requests made by this call, by HTTP method (watches count once).
  returned: always
  type: dict
message: {description: What happened., returned: always, type: str}
nodes:
  description:
    - With O(nodes) - per entry's key, the result the single-node call would return (C(node), C(state),
      C(previous_state), C(driver_version), C(at_target), C(skipped), C(skip_reason), C(failure_domain), ...),
      or C(failed) and C(msg) for an entry that failed.
  returned: with O(nodes)
  type: dict
conflict:
  description:
    - On failure - true when another run (or an admin) moved the node meanwhile; this call then changed
      nothing more and undid nothing, and the caller must not mark the node failed.
  returned: on failure
  type: bool
lease_lost:
  description:
    - On failure - true when the run's Lease (O(run_lease)) is now another run's, or could not be renewed
      for 2/3 of its TTL; a conflict too (nothing undone, node not to be marked by this run).
  returned: on failure
  type: bool
"""

import re  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402

from ansible_collections.npuops.fleet.plugins.module_utils.driver.vendor_profiles import (  # noqa: E402
    PROFILE_ARG_SPEC,
    ProfileError,
    resolve_profile,
)
from ansible_collections.npuops.fleet.plugins.module_utils.errors import FleetError  # noqa: E402
from ansible_collections.npuops.fleet.plugins.module_utils.fleet.identity import FIELDS as IDENTITY_FIELDS  # noqa: E402
from ansible_collections.npuops.fleet.plugins.module_utils.k8s import retry as k8s_retry  # noqa: E402
from ansible_collections.npuops.fleet.plugins.module_utils.k8s.client import K8sAuthError  # noqa: E402
from ansible_collections.npuops.fleet.plugins.module_utils.k8s.module import K8sModule  # noqa: E402
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.policy import PolicyError, parse_policy  # noqa: E402


class InputError(FleetError):
    """Bad module input; nothing was changed (the message says so)."""


def check_inputs(p):
    """The parsed policy and resolved vendor profile of the options ``p``, or InputError naming the
    option that is wrong."""
    try:
        policy = parse_policy(p["policy"])
        profile = resolve_profile(p["vendor"], p["vendor_profile"], p["vendor_profiles"])
    except (PolicyError, ProfileError) as exc:
        raise InputError("invalid input, nothing was changed: %s" % exc) from exc
    if p["phase"] == "fail" and not p["reason"]:
        raise InputError("phase=fail needs a reason")
    problems = [k for k in ("admission_timeout", "operands_timeout", "validation_timeout") if p[k] < 0]
    if problems:
        raise InputError("invalid input, nothing was changed: %s must be >= 0 (0 waits forever)" % ", ".join(problems))
    if not p["node"].strip():
        raise InputError("invalid input, nothing was changed: node is empty")
    if p["target_version"] is not None and not re.match(r"^[0-9][0-9A-Za-z.+~-]*$", p["target_version"]):
        raise InputError("invalid input, nothing was changed: target_version %r is not a driver version "
                         "such as 550.90.07" % p["target_version"])
    return policy, profile


def new_upgrade(node_upgrade, api_client, p, profile, policy, check_mode, keepalive=None):
    """The NodeUpgrade of the options ``p`` (timeouts of 0 wait forever: None); ``keepalive``: the run
    Lease's, called from its waits."""

    def secs(value):
        return None if not value else value

    return node_upgrade(
        api_client,
        profile,
        policy,
        p["node"],
        target_version=p["target_version"],
        check_mode=check_mode,
        admission_timeout=secs(p["admission_timeout"]),
        operands_timeout=secs(p["operands_timeout"]),
        validation_timeout=secs(p["validation_timeout"]),
        retry_failed=p["retry_failed"],
        admission_namespace=p["admission_namespace"],
        reboot_planned=p["reboot_planned"],
        host_at_target=p["host_at_target"],
        baseline=p["baseline"],
        run_id=p["run_id"],
        own_run_only=p["own_run_only"],
        host_identity=p["host_identity"],
        identity_fields=p["identity_fields"],
        drain_preview=p["drain_preview"],
        stop_file=p["stop_file"],
        keepalive=keepalive,
    )


def api_error_message(exc, upgrade, p):
    """What a call that ended in a Kubernetes API error (after its retries) says, with the RBAC hint on 403."""
    status = getattr(exc, "status", None)
    detail = "HTTP %s %s" % (status, getattr(exc, "reason", "")) if status else str(exc)
    if status == 403:
        detail += (
            " (deploy/rbac/: ClusterRole npuops-fleet, Roles npuops-fleet-leases and npuops-fleet-events"
            " list the access needed)"
        )
    if status == 404 and upgrade.state == "" and not upgrade.node:
        detail = "node %s not found" % p["node"]
    return "node %s, phase %s, state %s: Kubernetes API error: %s" % (
        p["node"], p["phase"], upgrade.state or "(none)", detail)


def failure_domain(upgrade, p):
    return ((upgrade.node.get("metadata") or {}).get("labels") or {}).get(p["failure_domain_label"])


ENTRY_OPTIONS = (
    "node",
    "target_version",
    "policy",
    "vendor",
    "vendor_profile",
    "vendor_profiles",
    "failure_domain_label",
)
ENTRY_DEFAULTS = {"vendor": "nvidia", "failure_domain_label": "topology.kubernetes.io/zone"}


def read_many(node_upgrade, upgrade_failed, api_client, p, check_mode, keepalive=None):
    """O(nodes): each entry's status read (phase=status, no drain preview) with the entry's per-node
    options, by the entry's key. An entry that fails says so in its own result (failed, msg): bad input,
    ``upgrade_failed`` (the state machine's refusal), a node not found, or an API error after its
    retries - after which, when the error holds for every node (an outage the retries gave up on,
    401/403), no later entry is read (each says not read), so that an API server that is down costs
    one read's retry budget, not one per node."""
    out = {}
    api_down = None
    for entry in p["nodes"]:
        # the entry's per-node options only, never the call's (the first host's); unset is the default
        q = dict(p, nodes=None, **{k: entry.get(k) for k in ENTRY_OPTIONS})
        q.update({k: v for k, v in ENTRY_DEFAULTS.items() if q[k] is None})
        upgrade = None
        try:
            if api_down:
                raise InputError("not read: %s" % api_down)
            # parse_policy refuses a policy that is no mapping; resolve_profile expects mappings
            for name in ("vendor_profile", "vendor_profiles"):
                if q[name] is not None and not isinstance(q[name], dict):
                    raise InputError(
                        "invalid input, nothing was changed: %s must be a mapping, got %s"
                        % (name, type(q[name]).__name__)
                    )
            policy, profile = check_inputs(q)
            upgrade = new_upgrade(node_upgrade, api_client, q, profile, policy, check_mode, keepalive)
            result = upgrade.run("status")
            result["failure_domain"] = failure_domain(upgrade, q)
            if upgrade.warnings:
                result["warnings"] = list(upgrade.warnings)
        except InputError as exc:
            result = {"failed": True, "msg": str(exc)}
        except upgrade_failed as exc:
            result = dict(upgrade.result if upgrade is not None else {}, failed=True, msg=str(exc))
            result.pop("message", None)
        except Exception as exc:  # noqa: BLE001 - this entry's error; the others go on, or say not read
            result = dict(upgrade.result) if upgrade is not None else {}
            result.pop("message", None)
            # an outage (what the retries gave up on) or a refusal of the credentials holds for every
            # node: no more reads; anything else (a node not found, an odd object) is this node's alone
            cluster_wide = k8s_retry.is_transient(exc) or getattr(exc, "status", None) in (401, 403)
            if upgrade is not None and (cluster_wide or getattr(exc, "status", None) is not None):
                msg = api_error_message(exc, upgrade, q)
            else:
                msg = "node %s, phase status: %s: %s" % (q["node"], type(exc).__name__, exc)
                result["exception"] = traceback.format_exc()
            result.update(failed=True, msg=msg)
            if cluster_wide:
                api_down = "an earlier node's read ended in an API error (%s)" % msg
        out[entry["key"]] = result
    return out


def main():
    argument_spec = dict(
        node=dict(type="str", required=True),
        phase=dict(type="str", default="status", choices=["prepare", "reboot", "finish", "fail", "status"]),
        target_version=dict(type="str"),
        policy=dict(type="dict", default={}),
        reason=dict(type="str"),
        admission_timeout=dict(type="int", default=600),
        operands_timeout=dict(type="int", default=300),
        validation_timeout=dict(type="int", default=600),
        retry_failed=dict(type="bool", default=True),
        reboot_planned=dict(type="bool", default=False),
        host_at_target=dict(type="bool"),
        failure_domain_label=dict(type="str", default="topology.kubernetes.io/zone"),
        baseline=dict(type="dict"),
        run_id=dict(type="str"),
        own_run_only=dict(type="bool", default=False),
        host_identity=dict(
            type="dict",
            options=dict(host=dict(type="str"), **{field: dict(type="str") for field in IDENTITY_FIELDS}),
        ),
        drain_preview=dict(type="bool", default=True),
        nodes=dict(
            type="list",
            elements="dict",
            options=dict(
                key=dict(type="str", required=True, no_log=False),
                node=dict(type="str", required=True),
                target_version=dict(type="str"),
                # raw: a wrong type fails its entry (check_inputs), not the call
                policy=dict(type="raw"),
                vendor=dict(type="str", default=ENTRY_DEFAULTS["vendor"]),
                vendor_profile=dict(type="raw"),
                vendor_profiles=dict(type="raw"),
                failure_domain_label=dict(type="str", default=ENTRY_DEFAULTS["failure_domain_label"]),
            ),
        ),
        identity_fields=dict(
            type="list",
            elements="str",
            choices=list(IDENTITY_FIELDS),
            default=list(IDENTITY_FIELDS),
        ),
        admission_namespace=dict(type="str", default="kube-system"),
        stop_file=dict(type="path"),
        max_failures=dict(type="int"),
        run_lease=dict(
            type="dict",
            options=dict(
                name=dict(type="str", default="npuops-fleet-maintenance-window"),
                namespace=dict(type="str", default="kube-system"),
                holder=dict(type="str", required=True),
                ttl=dict(type="int", default=900),
                renewed_at=dict(type="float"),
                stamp=dict(type="path"),
                participant=dict(type="str"),
            ),
        ),
    )
    argument_spec.update(PROFILE_ARG_SPEC)
    module = K8sModule(argument_spec=argument_spec, supports_check_mode=True)
    module.run(lambda: run(module))


def keepalive_of(module, api_client):
    """The run Lease's keepalive (O(run_lease), not in check mode), else None."""
    p = module.params
    if not p["run_lease"] or module.check_mode:
        return None
    from ansible_collections.npuops.fleet.plugins.module_utils.k8s.lease import LeaseManager, last_renewal
    from ansible_collections.npuops.fleet.plugins.module_utils.window.run_lease import LeaseKeepalive, WindowLease

    rl = p["run_lease"]
    if rl["ttl"] < 1:
        module.fail_json(msg="invalid input, nothing was changed: run_lease.ttl must be >= 1 second", node=p["node"])
    # At most a third of the TTL: renewals a module made in its own waits are not known here, and a
    # first transient error must not end a call that starts right after a long in-module wait.
    # a phase boundary's renewal (npu_phase, its stamp) since the caller's counts too
    renewed_at = last_renewal(rl.get("renewed_at"), rl.get("stamp"))
    age = min(max(0.0, time.time() - renewed_at), rl["ttl"] / 3.0) if renewed_at else 0.0
    mgr = LeaseManager(api_client, rl["namespace"], rl["name"], budget=10)
    # a shared window: the renewals renew this process's participant record too, and the window's
    # stop (its failure budget spent in any participant) ends admission here
    window = WindowLease(mgr, rl["holder"], rl["participant"], rl["ttl"]) if rl.get("participant") else None
    return LeaseKeepalive(mgr, rl["holder"], rl["ttl"], renewed_age=age, window=window)


def run(module):
    from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.node_upgrade import (
        NodeUpgrade,
        UpgradeConflict,
        UpgradeFailed,
        lost_lease,
    )

    p = module.params
    if p["nodes"] is not None and (p["phase"] != "status" or p["drain_preview"]):
        module.fail_json(msg="invalid input, nothing was changed: nodes is for phase=status with drain_preview=false",
                         node=p["node"])
    try:
        # with nodes, each entry's own inputs are checked, and a bad one fails that entry only
        policy, profile = check_inputs(p) if p["nodes"] is None else (None, None)
    except InputError as exc:
        module.fail_error(exc, node=p["node"])
    try:
        api_client = module.client()
    except K8sAuthError as exc:
        module.fail_error(exc, node=p["node"])
    counts = module.api_requests
    keepalive = keepalive_of(module, api_client)

    if p["nodes"] is not None:
        module.exit_json(changed=False, api_requests=counts,
                         nodes=read_many(NodeUpgrade, UpgradeFailed, api_client, p, module.check_mode, keepalive))
    upgrade = new_upgrade(NodeUpgrade, api_client, p, profile, policy, module.check_mode, keepalive)
    try:
        result = upgrade.run(p["phase"], p["reason"])
    except UpgradeFailed as exc:
        if p["max_failures"] is not None and not module.check_mode:
            upgrade.record_failure("failure on %s (%s): %s" % (p["node"], p["phase"], exc), p["max_failures"])
        result = dict(upgrade.result, api_requests=counts, changed=upgrade.changed)
        result["conflict"] = isinstance(exc, UpgradeConflict)
        result["lease_lost"] = lost_lease(exc)
        result["identity_mismatch"] = bool(result.get("identity")) and not result["identity"].get("same")
        result.pop("message", None)
        for warning in upgrade.warnings:
            module.warn(warning)
        module.fail_json(msg=str(exc), **result)
    except Exception as exc:  # noqa: BLE001 - API errors after retries, with context
        result = dict(upgrade.result, api_requests=counts, changed=upgrade.changed)
        result.pop("message", None)
        module.fail_json(msg=api_error_message(exc, upgrade, p), exception=traceback.format_exc(), **result)
    for warning in upgrade.warnings:
        module.warn(warning)
    result["failure_domain"] = failure_domain(upgrade, p)
    result["api_requests"] = counts
    module.exit_json(**result)


if __name__ == "__main__":
    main()
