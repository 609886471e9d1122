#!/usr/bin/python
# ruff: noqa: E402  (Ansible modules import after DOCUMENTATION/EXAMPLES/RETURN)
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: npu_matrix_audit
short_description: Audit every accelerator node's driver image tag against a support matrix
version_added: 0.1.0
description:
  - Lists every node whose vendor presence label (for example C(nvidia.com/gpu.present)) is C(true),
    optionally narrowed by O(label_selector), with one paginated LIST request series (C(limit) /
    C(continue)); never one request per node. Nothing is cached between runs.
  - Computes each node's driver image tag from its labels (see M(npuops.fleet.npu_driver_tag)) and
    looks the C((driver, kernel, os_tag)) combination up in the support matrix.
  - Per node the status is C(OK) (the build exists), C(MISSING) (no build, the node would lose its
    driver), C(UNLABELED) (a label needed for the tag is missing or empty, or the OS is not supported;
    RV(nodes[].missing_label) names the key) or C(SKIPPED) (the vendor's upgrade skip label is C(true)).
  - What-if mode - O(planned_kernel), O(planned_kernels), O(planned_driver_version) - answers "which
    nodes lose their driver after this kernel or driver upgrade" before it happens.
  - Never changes anything (RV(changed) is always false).
author:
  - npuops maintainers (@npuops)
extends_documentation_fragment:
  - npuops.fleet.k8s_auth
  - npuops.fleet.vendor
options:
  matrix_file:
    description:
      - CSV file with the driver builds that exist. Header C(driver_branch,kernel,os_tag); extra
        columns are allowed and ignored, column order is free.
      - The driver column may be named C(driver_version) instead. For a vendor whose tag uses the full
        version (C(rebellions), C(3.0.0)) that is the natural name; for NVIDIA precompiled tags a full
        version is reduced to its branch (C(550.90.07) -> C(550)).
      - Blank lines and lines starting with C(#) are skipped, cells are stripped of whitespace, exact
        duplicates are reported as a warning. Any other malformed line fails the task with
        C(<file>:<line>) and what is wrong, before the cluster is contacted.
      - Mutually exclusive with O(matrix); one of them is required.
    type: path
  matrix:
    description:
      - Inline matrix, a list of dicts with keys C(driver_branch) (or C(driver_version)), C(kernel)
        and C(os_tag). Same rules as O(matrix_file).
    type: list
    elements: dict
  label_selector:
    description:
      - Extra label selector ANDed with C(<presence label>=true), for example C(pool=training).
    type: str
  planned_kernel:
    description:
      - What-if - audit as if every node ran this kernel (C(uname -r) form, for example
        C(5.15.0-122-generic)) instead of its C(feature.node.kubernetes.io/kernel-version.full) label.
    type: str
  planned_kernels:
    description:
      - What-if per node - node name -> planned kernel. Takes precedence over O(planned_kernel) for the
        nodes it names; names not found among the audited nodes give a warning.
    type: dict
  planned_driver_version:
    description:
      - What-if - audit as if every node ran this driver version (C(550) or C(550.90.07) for NVIDIA,
        whose precompiled tag uses the branch; the full version, for example C(3.0.0), for Rebellions).
    type: str
  fail_on_missing:
    description:
      - Fail the task when at least one node is C(MISSING). The full report is still returned.
    type: bool
    default: true
  fail_on_unlabeled:
    description:
      - Fail the task when at least one node is C(UNLABELED) (its tag cannot be computed, so whether it
        keeps its driver is unknown). The full report is still returned.
    type: bool
    default: true
  page_size:
    description:
      - Nodes per LIST page (the API's C(limit)).
    type: int
    default: 500
  os_tag_rules:
    description:
      - Extra or replacement OS tag rules, os-release C(ID) -> C({format, pattern, names}); C(format) is
        a template over the named groups of C(pattern) (a regex matched against C(VERSION_ID)) and
        C({version}); for Talos, key C(talos) with C(format) C(talos{version}).
      - Built in, as the GPU Operator builds the tag (controllers/state_manager.go) - C(ubuntu)
        (C(22.04) -> C(ubuntu22.04)), C(rhel), C(rocky), C(ol) (major only - C(9.4) -> C(rhel9), C(rocky9),
        C(ol9)), C(rhcos) (C(4.15) -> C(rhcos4.15)), C(sles) (C(sles15.6), C(sles15-SP6)), C(sl-micro),
        C(centos) (C(centos8)), C(debian) (C(debian12)). Any other OS makes the node C(UNLABELED) with the reason.
    type: dict
attributes:
  check_mode:
    support: full
    description: Read-only; runs the same in check mode.
  diff_mode:
    support: none
    description: Nothing is changed, so there is no diff.
notes:
  - Needs C(list) on C(nodes) (cluster scope).
  - Runtime is one LIST request per O(page_size) nodes; 5,000 nodes take 10 requests with the default.
seealso:
  - module: npuops.fleet.npu_driver_tag
"""

EXAMPLES = r"""
- name: Audit all GPU nodes against the precompiled driver matrix
  npuops.fleet.npu_matrix_audit:
    matrix_file: files/driver-matrix.csv
  register: audit

- name: Which nodes would lose their driver after the kernel upgrade?
  npuops.fleet.npu_matrix_audit:
    matrix_file: files/driver-matrix.csv
    planned_kernel: 5.15.0-122-generic
    fail_on_missing: false
  register: whatif

- name: Show them
  ansible.builtin.debug:
    msg: "{{ whatif.missing_text }}"

- name: Rebellions fleet, inline matrix, one pool, before a driver upgrade
  npuops.fleet.npu_matrix_audit:
    vendor: rebellions
    label_selector: pool=inference
    planned_driver_version: 3.0.0
    matrix:
      - {driver_version: 3.0.0, kernel: 6.8.0-90-generic, os_tag: ubuntu22.04}
"""

RETURN = r"""
changed:
  description: Always false; the module only reads.
  returned: always
  type: bool
nodes:
  description: One entry per audited node, sorted by name.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: Node name.
      type: str
      sample: lab-node-0
    status:
      description: C(OK), C(MISSING), C(UNLABELED) or C(SKIPPED).
      type: str
      sample: OK
    tag:
      description: The driver image tag the node needs; null for C(UNLABELED) and C(SKIPPED).
      type: str
      sample: 550-5.15.0-119-generic-ubuntu22.04
    driver:
      description: Driver part of the tag (branch for NVIDIA precompiled, full version for Rebellions).
      type: str
      sample: "550"
    kernel:
      description: Kernel part of the tag (planned kernel in what-if mode).
      type: str
      sample: 5.15.0-119-generic
    os_tag:
      description: OS part of the tag.
      type: str
      sample: ubuntu22.04
    missing_label:
      description: For C(UNLABELED) - the missing or empty label key; null when the reason is another
        (for example an unsupported OS).
      type: str
      sample: feature.node.kubernetes.io/kernel-version.full
    reason:
      description: For C(UNLABELED) and C(SKIPPED) - why.
      type: str
    planned:
      description: What-if overrides applied to this node (C(kernel), C(driver_version)).
      type: dict
    warnings:
      description: Stale-label warnings (labels disagree with C(status.nodeInfo)).
      type: list
      elements: str
  sample:
    - {name: lab-node-0, status: OK, tag: 550-5.15.0-119-generic-ubuntu22.04, driver: "550",
       kernel: 5.15.0-119-generic, os_tag: ubuntu22.04}
counts:
  description: Number of nodes per status (all four keys always present).
  returned: always
  type: dict
  sample: {OK: 3, MISSING: 1, UNLABELED: 0, SKIPPED: 0}
missing_text:
  description: One C(<node> MISSING <tag>) line per missing node, or the single line C(OK).
  returned: always
  type: str
  sample: lab-node-3 MISSING 550-6.8.0-52-generic-ubuntu24.04
missing_lines:
  description: RV(missing_text) as a list of lines.
  returned: always
  type: list
  elements: str
  sample: [lab-node-3 MISSING 550-6.8.0-52-generic-ubuntu24.04]
unlabeled:
  description: The C(UNLABELED) nodes with the missing label key and the reason.
  returned: always
  type: list
  elements: dict
  sample: [{name: lab-node-1, missing_label: feature.node.kubernetes.io/kernel-version.full,
            reason: "node lab-node-1: label feature.node.kubernetes.io/kernel-version.full is missing"}]
label_selector:
  description: The label selector used for the LIST.
  returned: always
  type: str
  sample: nvidia.com/gpu.present=true
api_requests:
  description: Number of LIST requests made (pages).
  returned: always
  type: int
  sample: 1
matrix_entries:
  description: Distinct entries in the matrix.
  returned: always
  type: int
  sample: 3
matrix_duplicates:
  description: Duplicate matrix lines (C(<file>:<line>) and the entry), ignored.
  returned: always
  type: list
  elements: str
elapsed:
  description: Seconds spent listing and auditing.
  returned: always
  type: float
  sample: 0.42
kube_auth:
  description:
    - Where the Kubernetes credentials came from, so a run shows which cluster it audited.
  returned: when the client was built (also when listing or the audit fails)
  type: dict
  contains:
    source:
      description: >-
        C(option kubeconfig), C(env K8S_AUTH_KUBECONFIG), C(env KUBECONFIG), C(~/.kube/config),
        C(in-cluster) or C(host+api_key).
      type: str
      sample: env KUBECONFIG
    kubeconfig:
      description: The kubeconfig path or list as given; null for C(in-cluster) and C(host+api_key).
      type: str
      sample: /home/ops/.kube/a:/home/ops/.kube/b
    context:
      description: >-
        Context used - O(context) or E(K8S_AUTH_CONTEXT), else the C(current-context) of the merged
        kubeconfig; null without a kubeconfig.
      type: str
      sample: prod-cluster
"""

import time
import traceback

from ansible_collections.npuops.fleet.plugins.module_utils.driver.matrix import (
    MatrixError,
    audit_node,
    from_list,
    load_file,
    summarize,
)
from ansible_collections.npuops.fleet.plugins.module_utils.driver.vendor_profiles import (
    PROFILE_ARG_SPEC,
    resolve_profile,
)
from ansible_collections.npuops.fleet.plugins.module_utils.k8s.module import K8sModule
from ansible_collections.npuops.fleet.plugins.module_utils.k8s.paged_list import list_nodes_raw

MAX_WARNINGS = 20


def argument_spec():
    """The module's own options; K8sModule adds the auth options."""
    spec = dict(PROFILE_ARG_SPEC)
    spec.update(
        matrix_file={"type": "path"},
        matrix={"type": "list", "elements": "dict"},
        label_selector={"type": "str"},
        planned_kernel={"type": "str"},
        planned_kernels={"type": "dict"},
        planned_driver_version={"type": "str"},
        fail_on_missing={"type": "bool", "default": True},
        fail_on_unlabeled={"type": "bool", "default": True},
        page_size={"type": "int", "default": 500},
        os_tag_rules={"type": "dict"},
    )
    return spec


class MatrixAudit:
    def __init__(self, module: K8sModule):
        self.module = module
        self.params = module.params

    def run(self) -> None:
        p = self.params
        # a ProfileError ends the task through the frame (K8sModule.run)
        profile = resolve_profile(p["vendor"], p["vendor_profile"], p["vendor_profiles"])
        uses_branch = bool(profile.get("tag_uses_branch", True))
        try:
            if p["matrix_file"]:
                matrix = load_file(p["matrix_file"], uses_branch)
            else:
                matrix = from_list(p["matrix"], uses_branch)
        except MatrixError as exc:
            self.module.fail_json(msg="support matrix: %s" % exc)
        if p["page_size"] < 1:
            self.module.fail_json(msg="page_size must be >= 1, got %d" % p["page_size"])

        selector = "%s=true" % profile["presence_label"]
        if p["label_selector"]:
            selector += "," + p["label_selector"].strip()
        t0 = time.monotonic()
        api_client = self.module.client()
        try:
            items, requests = list_nodes_raw(api_client, selector, p["page_size"])
        except Exception as exc:  # ApiException, urllib3 errors: report with context
            status = getattr(exc, "status", None)
            reason = getattr(exc, "reason", None) or str(exc)
            self.module.fail_json(
                msg="listing nodes with label selector %r failed%s: %s"
                % (selector, " (HTTP %s)" % status if status else "", reason),
                exception=traceback.format_exc(),
            )
        planned_kernels = p["planned_kernels"] or {}
        results = []
        warnings = []
        for node in items:
            name = (node.get("metadata") or {}).get("name", "")
            r = audit_node(
                node,
                profile,
                matrix,
                planned_kernel=planned_kernels.get(name) or p["planned_kernel"],
                planned_driver=p["planned_driver_version"],
                os_tag_rules=p["os_tag_rules"],
            )
            warnings.extend(r.get("warnings", []))
            results.append(r)
        results.sort(key=lambda r: r["name"])
        elapsed = round(time.monotonic() - t0, 3)
        seen = {r["name"] for r in results}
        unknown = sorted(set(planned_kernels) - seen)
        if unknown:
            self.module.warn("planned_kernels names node(s) not among the audited nodes: %s" % ", ".join(unknown))
        if matrix.duplicates:
            self.module.warn(
                "support matrix has %d duplicate line(s), ignored: %s"
                % (len(matrix.duplicates), "; ".join(matrix.duplicates[:5]))
            )
        for w in warnings[:MAX_WARNINGS]:
            self.module.warn(w)
        if len(warnings) > MAX_WARNINGS:
            self.module.warn("%d more stale-label warnings (see nodes[].warnings)" % (len(warnings) - MAX_WARNINGS))

        summary = summarize(results)
        result = dict(
            changed=False,
            nodes=results,
            label_selector=selector,
            api_requests=requests,
            matrix_entries=len(matrix),
            matrix_duplicates=matrix.duplicates,
            elapsed=elapsed,
            **summary,
        )
        counts = summary["counts"]
        problems = []
        if p["fail_on_missing"] and counts["MISSING"]:
            problems.append(
                "%d node(s) have no driver build in the matrix:\n%s" % (counts["MISSING"], summary["missing_text"])
            )
        if p["fail_on_unlabeled"] and counts["UNLABELED"]:
            problems.append(
                "%d node(s) lack labels needed for their driver tag: %s"
                % (counts["UNLABELED"], "; ".join(u["reason"] for u in summary["unlabeled"][:10]))
            )
        if problems:
            self.module.fail_json(msg="\n".join(problems), **result)
        result["msg"] = "%d node(s) audited: %s" % (
            len(results),
            ", ".join("%s %d" % (k, v) for k, v in counts.items()),
        )
        self.module.exit_json(**result)


def main():
    module = K8sModule(
        argument_spec=argument_spec(),
        mutually_exclusive=[("matrix_file", "matrix")],
        required_one_of=[("matrix_file", "matrix")],
        supports_check_mode=True,
    )
    module.run(MatrixAudit(module).run)


if __name__ == "__main__":
    main()
