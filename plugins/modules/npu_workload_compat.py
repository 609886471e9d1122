#!/usr/bin/python
# ruff: noqa: E402  (Ansible modules import after DOCUMENTATION/EXAMPLES/RETURN)
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: npu_workload_compat
short_description: Which workloads a planned driver, kernel or OS change leaves without a node, before the window
version_added: 0.1.0
description:
  - For a planned change (nodes -> target driver version, optionally kernel release and OS), predicts
    each node's feature-discovery labels after it (GFD C(nvidia.com/cuda.driver.*) or the vendor
    profile's driver-version labels, NFD C(feature.node.kubernetes.io/kernel-version.*) and
    C(system-os_release.*)), and evaluates every workload's node constraints on the labels now and
    after, as kube-scheduler's NodeAffinity filter does - C(nodeSelector) and required node affinity
    (terms ORed, expressions ANDed; C(In), C(NotIn), C(Exists), C(DoesNotExist), C(Gt), C(Lt) with
    base-10 integers; C(matchFields) on C(metadata.name)).
  - GFD's CUDA labels (C(nvidia.com/cuda.runtime-version.*), C(cuda.runtime.*)) move with the
    driver branch and are predicted from a branch -> CUDA table; for a branch the table does not
    know, a workload reading them gets the verdict C(unpredictable).
  - Workloads are Deployments, StatefulSets, Jobs and CronJobs (judged by their pod template and
    desired pods), bare pods, and pods of other controllers such as a PyTorchJob (judged by every
    distinct constraint among their pods). DaemonSets are left out (their controller places one pod
    per node and follows the labels). Terminal and terminating pods are left out.
  - A node is eligible when its labels admit the workload and its taints and cordon let the pods land
    (the scheduler's TaintToleration and NodeUnschedulable filters - NoSchedule / NoExecute taints need
    a toleration; NotReady nodes carry the node lifecycle controller's taints). The planned nodes are
    uncordoned after the change, as the window uncordons them; their other taints stay.
  - Per workload the report gives the eligible nodes now and after, the planned nodes it loses and
    gains, the replicas that would become unschedulable, and the running pods whose planned node
    would no longer admit them (the window's drain evicts them and they cannot come back there).
  - Resources, preferred affinity and pod (anti-)affinity are other scheduler filters or scores and
    are not evaluated.
  - Nodes, pods, Deployments, ReplicaSets, StatefulSets, Jobs and CronJobs are read with paginated LISTs
    (O(page_size) items per request). Never changes anything (C(changed) is always false).
  - Used by the maintenance window before any cordon (C(maintenance_workload_compat)).
author:
  - npuops maintainers (@npuops)
extends_documentation_fragment:
  - npuops.fleet.k8s_auth
  - npuops.fleet.vendor
options:
  changes:
    description:
      - The planned change, one entry per node (at least one). A node may appear once, and must carry the
        vendor's presence label (C(nvidia.com/gpu.present=true)).
    type: list
    elements: dict
    required: true
    suboptions:
      node:
        description: Node name (C(metadata.name)); it must exist.
        type: str
        required: true
      driver_version:
        description: Target driver version, at least major.minor (C(580.95.05)); its labels are predicted from it.
        type: str
      vendor:
        description: Vendor profile of this node's driver labels; default O(vendor).
        type: str
      kernel_release:
        description: Kernel release the node runs after the change (C(6.8.0-52-generic)).
        type: str
      os_id:
        description: C(ID) of /etc/os-release after the change (C(ubuntu)).
        type: str
      os_version_id:
        description: C(VERSION_ID) of /etc/os-release after the change (C(24.04)).
        type: str
  namespaces:
    description:
      - Namespaces whose workloads are evaluated; default every namespace.
    type: list
    elements: str
  fail_on_stranded:
    description:
      - Fail when a workload with desired pods has eligible nodes now and none after (verdict
        C(stranded)) or reads a label the change makes unknowable (verdict C(unpredictable)). Bare pods
        never count - nothing recreates them, and the drain removes them either way.
    type: bool
    default: false
  page_size:
    description: Items per LIST request (C(limit)).
    type: int
    default: 500
notes:
  - Check mode is supported; the module only reads.
seealso:
  - module: npuops.fleet.npu_matrix_audit
"""

EXAMPLES = r"""
- name: Which workloads lose every node when the GPU nodes move to 580?
  npuops.fleet.npu_workload_compat:
    changes:
      - {node: gpu-0, driver_version: 580.95.05}
      - {node: gpu-1, driver_version: 580.95.05, kernel_release: 6.8.0-52-generic}
  register: compat

- name: Refuse the window when a workload would be stranded (or its labels after it are unknown)
  ansible.builtin.assert:
    that: compat.refusal is none
    fail_msg: "{{ compat.refusal }}"
"""

RETURN = r"""
workloads:
  description:
    - Every workload whose label constraints give another answer after the change (verdict other than
      C(unaffected)), most severe first. C(verdict) is one of C(stranded) (eligible nodes now, none
      after), C(unpredictable) (reads a label whose value after the change cannot be known),
      C(loses-nodes), C(moves-nodes) (loses some, gains others), C(gains-nodes). Workloads with no
      eligible node now or after (C(unschedulable-already)) are only counted in RV(counts). Node and
      pod lists show at most 20 names; the counts are complete.
  returned: always
  type: list
  elements: dict
  sample:
    - {kind: Job, namespace: ml, name: cuda12-job, replicas: 2, verdict: stranded, eligible_now: 3, eligible_after: 0,
       constraints: "affinity (nvidia.com/cuda.driver.major In [550])", unschedulable_replicas: 2,
       nodes_lost: {count: 3, names: [gpu-0, gpu-1, gpu-2]}, nodes_gained: {count: 0, names: []},
       pods_on_unfit_nodes: {count: 2, pods: [{pod: cuda12-job-x7, node: gpu-0}]}}
stranded:
  description:
    - C(Kind namespace/name) of each workload with desired pods that would have no node left (bare
      pods left out).
  returned: always
  type: list
  elements: str
unpredictable:
  description:
    - C(Kind namespace/name) of each workload with desired pods whose constraints read a label the
      change makes unknowable.
  returned: always
  type: list
  elements: str
refusal:
  description: Why a window must not start (stranded or unpredictable workloads, named), or null.
  returned: always
  type: str
lines:
  description: One line per reported workload, for a log or a chat message.
  returned: always
  type: list
  elements: str
counts:
  description: Workloads per verdict, plus C(unconstrained) (no nodeSelector and no required node affinity).
  returned: always
  type: dict
nodes:
  description: Nodes in the cluster.
  returned: always
  type: int
nodes_changed:
  description: Nodes the change names.
  returned: always
  type: int
pods_on_unfit_nodes:
  description: Running pods, all workloads together, whose planned node would no longer admit them.
  returned: always
  type: int
api_requests:
  description: HTTP requests made (paginated LISTs).
  returned: always
  type: int
elapsed:
  description: Seconds from the first LIST to the report.
  returned: always
  type: float
kube_auth:
  description: Where the cluster credentials came from.
  returned: always
  type: dict
"""

import time
import traceback
from typing import Any

from ansible_collections.npuops.fleet.plugins.module_utils.driver.vendor_profiles import (
    PROFILE_ARG_SPEC,
    resolve_profile,
)
from ansible_collections.npuops.fleet.plugins.module_utils.fleet.workload_compat import (
    collect_workloads,
    evaluate,
    refusal,
    summary_lines,
)
from ansible_collections.npuops.fleet.plugins.module_utils.k8s.module import K8sModule
from ansible_collections.npuops.fleet.plugins.module_utils.k8s.paged_list import list_all

CHANGE_SPEC = dict(
    node=dict(type="str", required=True),
    driver_version=dict(type="str"),
    vendor=dict(type="str"),
    kernel_release=dict(type="str"),
    os_id=dict(type="str"),
    os_version_id=dict(type="str"),
)


def argument_spec():
    """The module's own options; K8sModule adds the auth options."""
    spec = dict(PROFILE_ARG_SPEC)
    spec.update(
        changes=dict(type="list", elements="dict", required=True, options=CHANGE_SPEC),
        namespaces=dict(type="list", elements="str"),
        fail_on_stranded=dict(type="bool", default=False),
        page_size=dict(type="int", default=500),
    )
    return spec


class WorkloadCompat:
    def __init__(self, module: K8sModule):
        self.module = module
        self.params = module.params

    def changes(self) -> dict:
        if not self.params["changes"]:
            self.module.fail_json(msg="changes is empty: name at least one node and its target driver version")
        out = {}
        for i, c in enumerate(self.params["changes"]):
            name = (c.get("node") or "").strip()
            if not name:
                self.module.fail_json(msg="changes[%d]: node is empty" % i)
            if name in out:
                self.module.fail_json(msg="changes[%d]: node %s is named twice" % (i, name))
            if not (c.get("driver_version") or c.get("kernel_release") or c.get("os_id") or c.get("os_version_id")):
                self.module.fail_json(
                    msg="changes[%d] (node %s): nothing changes (driver_version, kernel_release, "
                    "os_id or os_version_id)" % (i, name)
                )
            out[name] = {k: v for k, v in c.items() if v is not None and k != "node"}
            out[name].setdefault("vendor", self.params["vendor"])
        return out

    def profiles(self, vendors) -> dict:
        p = self.params
        res = {}
        for v in sorted(set(vendors)):
            # a ProfileError ends the task through the frame (K8sModule.run)
            res[v] = resolve_profile(v, p["vendor_profile"] if v == p["vendor"] else None, p["vendor_profiles"])
        return res

    def list_kind(self, api_client, what):
        from kubernetes import client as k8s

        core, apps, batch = k8s.CoreV1Api(api_client), k8s.AppsV1Api(api_client), k8s.BatchV1Api(api_client)
        calls: dict[str, tuple[Any, Any]] = {
            "nodes": (core.list_node, None),
            "pods": (core.list_pod_for_all_namespaces, core.list_namespaced_pod),
            "deployments": (apps.list_deployment_for_all_namespaces, apps.list_namespaced_deployment),
            "replicasets": (apps.list_replica_set_for_all_namespaces, apps.list_namespaced_replica_set),
            "statefulsets": (apps.list_stateful_set_for_all_namespaces, apps.list_namespaced_stateful_set),
            "jobs": (batch.list_job_for_all_namespaces, batch.list_namespaced_job),
            "cronjobs": (batch.list_cron_job_for_all_namespaces, batch.list_namespaced_cron_job),
        }
        every, per_ns = calls[what]
        namespaces = self.params["namespaces"]
        try:
            if what == "nodes" or not namespaces:
                return list_all(every, self.params["page_size"])
            items, requests = [], 0
            for ns in namespaces:
                got, n = list_all(per_ns, self.params["page_size"], namespace=ns)
                items.extend(got)
                requests += n
            return items, requests
        except Exception as exc:  # ApiException, urllib3 errors: report with context
            status = getattr(exc, "status", None)
            self.module.fail_json(
                msg="listing %s failed%s: %s"
                % (what, " (HTTP %s)" % status if status else "", getattr(exc, "reason", None) or exc),
                exception=traceback.format_exc(),
            )

    def run(self) -> None:
        p = self.params
        if p["page_size"] < 1:
            self.module.fail_json(msg="page_size must be >= 1, got %d" % p["page_size"])
        changes = self.changes()
        profiles = self.profiles(c["vendor"] for c in changes.values())
        api_client = self.module.client()
        t0 = time.monotonic()
        got, requests = {}, 0
        for what in ("nodes", "pods", "deployments", "replicasets", "statefulsets", "jobs", "cronjobs"):
            got[what], n = self.list_kind(api_client, what)
            requests += n
        workloads = collect_workloads(
            got["pods"], got["deployments"], got["statefulsets"], got["jobs"], got["replicasets"], got["cronjobs"]
        )
        # a ChangeError ends the task through the frame, with kube_auth
        report = evaluate(got["nodes"], changes, workloads, profiles)
        lines = summary_lines(report)
        report["refusal"] = refusal(report)
        result = dict(
            changed=False,
            lines=lines,
            api_requests=requests,
            elapsed=round(time.monotonic() - t0, 3),
            **report,
        )
        if p["fail_on_stranded"] and result["refusal"]:
            self.module.fail_json(msg=result["refusal"], **result)
        result["msg"] = "%d workload(s) evaluated on %d node(s), %d planned: %s" % (
            sum(report["counts"].values()),
            report["nodes"],
            report["nodes_changed"],
            ", ".join("%s %d" % (k, v) for k, v in report["counts"].items() if v) or "none",
        )
        self.module.exit_json(**result)


def main():
    module = K8sModule(argument_spec=argument_spec(), supports_check_mode=True)
    module.run(WorkloadCompat(module).run)


if __name__ == "__main__":
    main()
