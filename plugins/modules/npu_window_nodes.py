#!/usr/bin/python
# ruff: noqa: E402  (Ansible modules import after DOCUMENTATION/EXAMPLES/RETURN)
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: npu_window_nodes
short_description: The nodes a maintenance window run touched, read from the Nodes
version_added: 0.1.0
description:
  - Lists the vendor's nodes (label C(<presence label>=true), for example C(nvidia.com/gpu.present=true))
    with one paginated LIST request series (C(limit) / C(continue)) and returns those whose
    last-transition annotation (for example C(nvidia.com/gpu-driver-upgrade-last-transition)) was
    written by the run O(run_id).
  - Several ansible-playbook processes (AWX job slices) share one window; the Nodes show every node the
    run touched, also those of a process that died before writing its summary. The filter
    P(npuops.fleet.window_close_rows#filter) merges this result with the processes' summaries.
  - "Per node the status is C(upgraded) (state C(upgrade-done)), C(failed) (C(upgrade-failed)),
    C(in-progress) (C(upgrade-required) or a state between it and C(upgrade-done)) or C(other)."
  - An annotation that is not a JSON object is skipped. Never changes anything (RV(changed) is always false).
author:
  - npuops maintainers (@npuops)
extends_documentation_fragment:
  - npuops.fleet.k8s_auth
  - npuops.fleet.vendor
options:
  run_id:
    description:
      - The maintenance window's run id, as the upgrade wrote it in the annotation's C(run_id).
    type: str
    required: true
  page_size:
    description:
      - Nodes per LIST page (the API's C(limit)).
    type: int
    default: 500
attributes:
  check_mode:
    support: full
    description: Read-only; runs the same in check mode.
  diff_mode:
    support: none
    description: Nothing is changed, so there is no diff.
notes:
  - Needs C(list) on C(nodes) (cluster scope).
seealso:
  - module: npuops.fleet.npu_node_upgrade
  - module: npuops.fleet.npu_upgrade_lease
"""

EXAMPLES = r"""
- name: The nodes this window run touched
  npuops.fleet.npu_window_nodes:
    run_id: "{{ maintenance_run_id }}"
  register: run_nodes

- name: Merge them with the slices' summaries
  ansible.builtin.set_fact:
    window_rows: "{{ slice_summaries | npuops.fleet.window_close_rows(run_nodes.nodes) }}"
"""

RETURN = r"""
changed:
  description: Always false; the module only reads.
  returned: always
  type: bool
nodes:
  description: One entry per node whose last transition belongs to O(run_id), sorted by name.
  returned: success
  type: list
  elements: dict
  contains:
    node:
      description: Node name.
      type: str
      sample: lab-node-0
    state:
      description: The upgrade-state label; null when the node has none.
      type: str
      sample: upgrade-done
    unschedulable:
      description: C(spec.unschedulable) (cordoned).
      type: bool
    ready:
      description: Whether the node's C(Ready) condition is C(True).
      type: bool
    last_transition:
      description: The parsed last-transition annotation.
      type: dict
      sample: {from: uncordon-required, to: upgrade-done, reason: validated, at: "2026-12-05T05:21:00Z",
               run: a1b2, run_id: w-2026-12-05}
    status:
      description: C(upgraded), C(failed), C(in-progress) or C(other).
      type: str
      sample: upgraded
counts:
  description: Number of RV(nodes) per status (all four keys always present).
  returned: success
  type: dict
  sample: {upgraded: 3, failed: 1, in-progress: 0, other: 0}
requests:
  description: Number of HTTP LIST requests made (pages, a restart after an expired continue token included).
  returned: success
  type: int
  sample: 2
run_id:
  description: O(run_id), stripped of surrounding whitespace.
  returned: always, failures included, once the arguments were accepted
  type: str
  sample: w-2026-12-05
label_selector:
  description: The label selector of the LIST.
  returned: when the vendor profile was resolved
  type: str
  sample: nvidia.com/gpu.present=true
kube_auth:
  description:
    - Where the Kubernetes credentials came from, so a run shows which cluster it read.
  returned: when the client was built (also when listing fails)
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

import traceback

from ansible_collections.npuops.fleet.plugins.module_utils.driver.vendor_profiles import (
    PROFILE_ARG_SPEC,
    resolve_profile,
)
from ansible_collections.npuops.fleet.plugins.module_utils.errors import FleetError
from ansible_collections.npuops.fleet.plugins.module_utils.k8s.module import K8sModule
from ansible_collections.npuops.fleet.plugins.module_utils.k8s.paged_list import list_nodes_raw
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.run_nodes import count_statuses, run_rows


def argument_spec() -> dict:
    """The module's own options; K8sModule adds the auth options."""
    spec = dict(PROFILE_ARG_SPEC)
    spec.update(
        run_id={"type": "str", "required": True},
        page_size={"type": "int", "default": 500},
    )
    return spec


def run(module: K8sModule) -> None:
    """List the vendor's nodes and exit with the run's rows; every failure names the run id."""
    p = module.params
    run_id = (p["run_id"] or "").strip()
    if not run_id:
        module.fail_json(msg="run_id must not be empty", changed=False, run_id=p["run_id"])
    if p["page_size"] < 1:
        module.fail_json(
            msg="window run %s: page_size must be >= 1, got %d" % (run_id, p["page_size"]), changed=False, run_id=run_id
        )
    try:
        profile = resolve_profile(p["vendor"], p["vendor_profile"], p["vendor_profiles"])
        selector = "%s=true" % profile["presence_label"]
        # a K8sAuthError (no kubeconfig...) is a FleetError too: it names the run like the others
        api_client = module.client()
    except FleetError as exc:
        result = dict(exc.result or {}, changed=False, run_id=run_id)
        module.fail_json(msg="window run %s: %s" % (run_id, exc.message), **result)
    try:
        items, requests = list_nodes_raw(api_client, selector, p["page_size"])
    except Exception as exc:  # ApiException, urllib3 errors: report with the run and the selector
        status = getattr(exc, "status", None)
        reason = getattr(exc, "reason", None) or str(exc)
        module.fail_json(
            msg="window run %s: listing nodes with label selector %r failed%s: %s"
            % (run_id, selector, " (HTTP %s)" % status if status else "", reason),
            changed=False,
            run_id=run_id,
            label_selector=selector,
            exception=traceback.format_exc(),
        )
    rows = run_rows(items, profile, run_id)
    counts = count_statuses(rows)
    module.exit_json(
        changed=False,
        run_id=run_id,
        label_selector=selector,
        nodes=rows,
        counts=counts,
        requests=requests,
        msg="window run %s: %d node(s) - %s"
        % (run_id, len(rows), ", ".join("%s %d" % (k, v) for k, v in counts.items())),
    )


def main() -> None:
    module = K8sModule(argument_spec=argument_spec(), supports_check_mode=True)
    module.run(lambda: run(module))


if __name__ == "__main__":
    main()
