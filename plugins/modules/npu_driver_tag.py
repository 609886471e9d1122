#!/usr/bin/python
# ruff: noqa: E402  (Ansible modules import after DOCUMENTATION/EXAMPLES/RETURN)
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: npu_driver_tag
short_description: Compute a node's driver image tag from its labels
version_added: 0.1.0
description:
  - Builds the driver image tag a node needs from its parts - driver branch or version, full kernel
    release, OS tag - read from the node's labels (O(node), read from the API) or from a dict of labels
    (O(labels), no cluster needed). The tag is never built by splitting another tag.
  - Formats come from the vendor profile - NVIDIA precompiled C(<branch>-<kernel>-<os_tag>)
    (C(525-5.15.0-69-generic-ubuntu22.04)), NVIDIA regular C(<version>-<os_tag>)
    (O(precompiled=false)), Rebellions C(<version>-<kernel>-<os_tag>)
    (C(3.0.0-6.8.0-90-generic-ubuntu22.04)).
  - Label keys - kernel C(feature.node.kubernetes.io/kernel-version.full), OS
    C(feature.node.kubernetes.io/system-os_release.ID) and C(.VERSION_ID) (NFD); driver NVIDIA
    C(nvidia.com/cuda.driver.major/minor/rev) (GFD; C(550)/C(90)/C(07) -> C(550.90.07), branch
    C(550)), else C(nvidia.com/cuda.driver-version.*); Rebellions the RBLN NPU feature discovery
    label C(rebellions.ai/driver-version.full), else C(rebellions.ai/driver-version.major/.minor/.patch).
    Keys are profile data (C(driver_version_labels), C(driver_version_labels_alt)) and can be overridden.
  - A missing or empty label fails the task with a message naming the node and the label key; an
    unsupported OS fails with the list of supported ones. Labels that disagree with
    C(node.status.nodeInfo) (kernelVersion, osImage) give a "stale labels" warning.
  - What-if - O(driver_version), O(driver_branch), O(kernel) replace the labels they stand for
    ("which tag will this node need after the upgrade").
author:
  - npuops maintainers (@npuops)
extends_documentation_fragment:
  - npuops.fleet.k8s_auth
  - npuops.fleet.vendor
options:
  node:
    description:
      - Name of the node whose labels and C(status.nodeInfo) are read (one GET).
      - Mutually exclusive with O(labels); one of them is required.
    type: str
  labels:
    description:
      - Node labels as a dict; no cluster access.
    type: dict
  node_info:
    description:
      - With O(labels) - the node's C(status.nodeInfo) (C(kernelVersion), C(osImage)) for the
        stale-label check. Ignored with O(node).
    type: dict
  node_name:
    description:
      - With O(labels) - the name used in messages.
    type: str
  driver_version:
    description:
      - Planned full driver version (C(550.90.07), C(3.0.0)); replaces the driver labels. For a
        branch-tagged format the branch is derived from it.
    type: str
  driver_branch:
    description:
      - Planned driver branch (C(550)); replaces the driver labels where the tag format only needs the
        branch. Fails for a format that needs the full version unless O(driver_version) is given too.
    type: str
  kernel:
    description:
      - Planned kernel release (C(uname -r) form, for example C(5.15.0-122-generic)); replaces the
        kernel label.
    type: str
  precompiled:
    description:
      - Use the vendor's precompiled tag format (C(tag_format)); false selects the regular format
        (C(regular_tag_format), NVIDIA C(<version>-<os_tag>)).
    type: bool
    default: true
  image:
    description:
      - Image repository; defaults to the profile's C(image) (C(nvcr.io/nvidia/driver),
        C(rebellions/rbln-driver)).
    type: str
  registry:
    description:
      - Registry (host and optional path, for example C(registry.example.com/mirror)) that replaces the
        image's registry, for mirrored or air-gapped registries.
    type: str
  os_tag_rules:
    description:
      - Extra or replacement OS tag rules; see M(npuops.fleet.npu_matrix_audit).
    type: dict
attributes:
  check_mode:
    support: full
    description: Read-only; runs the same in check mode.
  diff_mode:
    support: none
    description: Nothing is changed, so there is no diff.
notes:
  - With O(node) needs C(get) on C(nodes).
seealso:
  - module: npuops.fleet.npu_matrix_audit
"""

EXAMPLES = r"""
- name: Tag the driver image of a node
  npuops.fleet.npu_driver_tag:
    node: gpu-worker-7
  register: drv

- name: Which image will it need after the kernel upgrade?
  npuops.fleet.npu_driver_tag:
    node: gpu-worker-7
    kernel: 5.15.0-122-generic
    registry: registry.example.com/nvidia
  register: after

- name: From labels only (no cluster), Rebellions
  npuops.fleet.npu_driver_tag:
    vendor: rebellions
    labels:
      rebellions.ai/driver-version.full: 3.0.0
      feature.node.kubernetes.io/kernel-version.full: 6.8.0-90-generic
      feature.node.kubernetes.io/system-os_release.ID: ubuntu
      feature.node.kubernetes.io/system-os_release.VERSION_ID: "22.04"
"""

RETURN = r"""
changed:
  description: Always false.
  returned: always
  type: bool
node:
  description: Node name (or O(node_name) with O(labels)).
  returned: always
  type: str
  sample: lab-node-0
tag:
  description: The driver image tag.
  returned: success
  type: str
  sample: 550-5.15.0-119-generic-ubuntu22.04
image:
  description: Full image reference C(<repository>:<tag>).
  returned: success
  type: str
  sample: nvcr.io/nvidia/driver:550-5.15.0-119-generic-ubuntu22.04
format:
  description: The tag format used.
  returned: success
  type: str
  sample: "{branch}-{kernel}-{os_tag}"
parts:
  description: The parts the tag was built from.
  returned: success
  type: dict
  contains:
    branch:
      description: Driver branch (major version).
      type: str
      sample: "550"
    version:
      description: Full driver version (for a branch-only override, the branch).
      type: str
      sample: 550.90.07
    kernel:
      description: Full kernel release.
      type: str
      sample: 5.15.0-119-generic
    os_tag:
      description: OS tag.
      type: str
      sample: ubuntu22.04
    os_id:
      description: os-release ID.
      type: str
      sample: ubuntu
    os_version_id:
      description: os-release VERSION_ID.
      type: str
      sample: "22.04"
label_keys:
  description: Label keys read, per part (C(driver) is a list); parts given as overrides are absent.
  returned: success
  type: dict
  sample: {driver: [nvidia.com/cuda.driver.major, nvidia.com/cuda.driver.minor, nvidia.com/cuda.driver.rev],
           kernel: feature.node.kubernetes.io/kernel-version.full}
overrides:
  description: What-if overrides applied (C(driver_version), C(driver_branch), C(kernel)).
  returned: success
  type: dict
  sample: {kernel: 5.15.0-122-generic}
stale_labels:
  description: Stale-label warnings (also emitted as task warnings).
  returned: success
  type: list
  elements: str
missing_label:
  description: On failure because of a missing or empty label - its key.
  returned: failure
  type: str
  sample: feature.node.kubernetes.io/kernel-version.full
kube_auth:
  description:
    - Where the Kubernetes credentials came from, so a run shows which cluster it read.
  returned: when O(node) is set and the client was built (also on later failures)
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

from ansible_collections.npuops.fleet.plugins.module_utils.driver.node_labels import LabelError
from ansible_collections.npuops.fleet.plugins.module_utils.driver.tags import TagError, compute_tag, image_ref
from ansible_collections.npuops.fleet.plugins.module_utils.driver.vendor_profiles import (
    PROFILE_ARG_SPEC,
    resolve_profile,
)
from ansible_collections.npuops.fleet.plugins.module_utils.k8s.module import K8sModule


def argument_spec():
    """The module's own options; K8sModule adds the auth options."""
    spec = dict(PROFILE_ARG_SPEC)
    spec.update(
        node={"type": "str"},
        labels={"type": "dict"},
        node_info={"type": "dict"},
        node_name={"type": "str"},
        driver_version={"type": "str"},
        driver_branch={"type": "str"},
        kernel={"type": "str"},
        precompiled={"type": "bool", "default": True},
        image={"type": "str"},
        registry={"type": "str"},
        os_tag_rules={"type": "dict"},
    )
    return spec


def read_node(module: K8sModule, name: str) -> tuple[dict, dict]:
    """GET the node (the collection's one node reader, with its transient-error retry):
    ``(labels, status.nodeInfo)``; fails the task on any error (with kube_auth once the client is built)."""
    api_client = module.client()  # first: it fails the task with the usual message when kubernetes is missing
    from kubernetes import client as k8s

    from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.record import read_node as get_node

    try:
        data = get_node(k8s.CoreV1Api(api_client), name)
    except k8s.ApiException as exc:
        if exc.status == 404:
            module.fail_json(msg="node %s not found" % name, node=name)
        module.fail_json(msg="reading node %s failed (HTTP %s): %s" % (name, exc.status, exc.reason), node=name)
    except Exception as exc:
        module.fail_json(msg="reading node %s failed: %s" % (name, exc), node=name, exception=traceback.format_exc())
    labels = (data.get("metadata") or {}).get("labels") or {}
    return labels, (data.get("status") or {}).get("nodeInfo") or {}


def main():
    # labels given as options need no cluster, nor the kubernetes client: checked when O(node) is read
    module = K8sModule(
        argument_spec=argument_spec(),
        require_kubernetes=False,
        mutually_exclusive=[("node", "labels")],
        required_one_of=[("node", "labels")],
        supports_check_mode=True,
    )
    module.run(lambda: run(module))


def run(module):
    p = module.params
    # a ProfileError ends the task through the frame (K8sModule.run)
    profile = resolve_profile(p["vendor"], p["vendor_profile"], p["vendor_profiles"])
    if p["node"]:
        name = p["node"]
        labels, node_info = read_node(module, name)
    else:
        name = p["node_name"] or ""
        labels = {str(k): ("" if v is None else str(v)) for k, v in p["labels"].items()}
        node_info = p["node_info"] or {}
    try:
        res = compute_tag(
            labels,
            profile,
            name,
            node_info,
            driver_version=p["driver_version"],
            branch=p["driver_branch"],
            kernel=p["kernel"],
            precompiled=p["precompiled"],
            os_tag_rules=p["os_tag_rules"],
        )
    except LabelError as exc:
        module.fail_error(exc, node=name, missing_label=exc.key)
    except TagError as exc:
        module.fail_error(exc, node=name)
    if p["driver_branch"] and not p["driver_version"]:
        res["overrides"].setdefault("driver_branch", p["driver_branch"])
    for w in res["warnings"]:
        module.warn(w)
    repository = p["image"] or profile.get("image") or ""
    module.exit_json(
        changed=False,
        node=name,
        tag=res["tag"],
        image=image_ref(repository, res["tag"], p["registry"]) if repository else None,
        format=res["format"],
        parts=res["parts"],
        label_keys=res["label_keys"],
        overrides=res["overrides"],
        stale_labels=res["warnings"],
    )


if __name__ == "__main__":
    main()
