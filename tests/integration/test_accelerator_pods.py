"""Every pod that uses the accelerator is an accelerator pod, on the lab's real apiserver (issue 24,
item 1): a pod bound to a kwok node through a DRA ResourceClaim (resource.k8s.io/v1 DeviceClass and
ResourceClaim, its allocation written by the test as the vendor's DRA driver would) and a pod that
mounts /dev/nvidia0 through hostPath are both removed by the pod-deletion step under the charts'
default policy (drain off) before the node is ready for host work; the DRA kubelet plugin is paused
and restored like an operand, and refused before the cordon when its DaemonSet selects no deploy label.

Each test checks the node afterwards (schedulability, state label, the pod's uid gone from the node),
runs as a ServiceAccount bound only to the shipped RBAC, and removes what it made.
"""

from __future__ import annotations

import pytest
import test_node_upgrade
from labhelpers import driver_labels, gone, wait
from test_node_upgrade import NS, STATE, pods_on, upgrade

from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm

# the node upgrade tests' fixtures: the shipped-RBAC ServiceAccount and the node put back afterwards
kubeconfig = test_node_upgrade.kubeconfig
node_guard = test_node_upgrade.node_guard

pytestmark = pytest.mark.lab

NODE = "lab-node-2"
DRIVER = "gpu.nvidia.com"
CLASS = "it-gpu.nvidia.com"
CLAIM = "it-dra-gpu"
TARGET = "560.35.03"
PLUGIN_LABEL = "nvidia.com/gpu.deploy.dra-kubelet-plugin"
PLUGIN_NS = "gpu-drv"


@pytest.fixture
def resource_v1(api_client):
    from kubernetes import client

    return client.ResourceV1Api(api_client)


def deployment(name, pod_spec):
    labels = {"app": name}
    spec = dict(pod_spec, nodeSelector={"kubernetes.io/hostname": NODE})
    spec.setdefault("containers", [{"name": "c", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"}])
    return {"metadata": {"name": name},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": spec}}}


def running_pod(core_v1, app):
    """The Running pod of Deployment ``app`` on NODE (waited for)."""
    return wait("%s Running on %s" % (app, NODE), lambda: next(
        (p for p in pods_on(core_v1, NODE, "app=" + app) if p.status.phase == "Running"), None), timeout=90)


def finish_at_target(core_v1, kubeconfig, node):
    """The host work done: the driver label says the target; finish validates and uncordons."""
    core_v1.patch_node(node, {"metadata": {"labels": driver_labels(TARGET)}})
    res = upgrade(kubeconfig, node, "finish")
    assert not res.get("failed"), res.get("msg")
    return res


def assert_ready_for_host_work(core_v1, node, res, gone_uid, app):
    assert not res.get("failed"), res.get("msg")
    n = core_v1.read_node(node)
    assert n.spec.unschedulable and n.metadata.labels[STATE] == sm.POD_RESTART_REQUIRED
    assert sm.DRAIN_REQUIRED not in [t["to"] for t in res["transitions"]]  # the default policy: drain off
    assert gone_uid not in {p.metadata.uid for p in core_v1.list_pod_for_all_namespaces(
        field_selector="spec.nodeName=" + node).items}, "the %s pod is still on the node at host work" % app


@pytest.fixture
def dra_workload(api_client, core_v1, apps_v1, resource_v1):
    """DeviceClass + ResourceClaim allocated by gpu.nvidia.com (status written as the driver would)
    and a Deployment whose pod uses the claim, Running on NODE; all removed afterwards."""
    resource_v1.create_device_class({
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": CLASS},
        "spec": {"selectors": [{"cel": {"expression": 'device.driver == "%s"' % DRIVER}}]},
    })
    try:
        resource_v1.create_namespaced_resource_claim(NS, {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": CLAIM},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": CLASS}}]}},
        })
        # What the allocation writes: one device of the driver's pool on NODE, only usable there.
        resource_v1.patch_namespaced_resource_claim_status(CLAIM, NS, {"status": {"allocation": {
            "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": NODE, "device": "gpu-0"}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [NODE]}]}]},
        }}})
        apps_v1.create_namespaced_deployment(NS, deployment("it-dra-job", {
            "resourceClaims": [{"name": "gpu", "resourceClaimName": CLAIM}],
            "containers": [{"name": "c", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
                            "resources": {"claims": [{"name": "gpu"}]}}],
        }))
        yield running_pod(core_v1, "it-dra-job")
    finally:
        gone(apps_v1.delete_namespaced_deployment, "it-dra-job", NS)
        wait("dra job gone", lambda: not core_v1.list_namespaced_pod(NS, label_selector="app=it-dra-job").items)
        gone(resource_v1.delete_namespaced_resource_claim, CLAIM, NS)
        gone(resource_v1.delete_device_class, CLASS)


def test_dra_claim_pod_removed_before_host_work_under_default_policy(core_v1, resource_v1, kubeconfig,
                                                                     node_guard, dra_workload):
    node = node_guard(NODE)
    pod = dra_workload
    ref = "%s/%s" % (NS, pod.metadata.name)
    assert not (pod.spec.containers[0].resources.limits or {})  # no extended resource: only the claim
    rule = "DRA claim %s/%s allocated by %s" % (NS, CLAIM, DRIVER)
    preview = upgrade(kubeconfig, node, "status")
    assert ref in preview["would_evict"] and preview["pod_rules"][ref] == rule, preview
    assert preview["resource_claim_reads"] == 1

    res = upgrade(kubeconfig, node, "prepare", target_version=TARGET, policy={"maxParallelUpgrades": 0})
    assert_ready_for_host_work(core_v1, node, res, pod.metadata.uid, "DRA")
    assert res["deleted"] == [ref] and res["pod_rules"] == {ref: rule}
    assert any("%s [%s]" % (ref, rule) in t["reason"] for t in res["transitions"])

    res = finish_at_target(core_v1, kubeconfig, node)
    n = core_v1.read_node(node)
    assert res["state"] == sm.UPGRADE_DONE and n.metadata.labels[STATE] == sm.UPGRADE_DONE and not n.spec.unschedulable


def test_device_hostpath_pod_removed_before_host_work_under_default_policy(core_v1, apps_v1, kubeconfig,
                                                                           node_guard):
    node = node_guard(NODE)
    apps_v1.create_namespaced_deployment(NS, deployment("it-smi-agent", {
        "volumes": [{"name": "dev", "hostPath": {"path": "/dev/nvidia0"}}],
        "containers": [{"name": "c", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
                        "volumeMounts": [{"name": "dev", "mountPath": "/dev/nvidia0"}]}],
    }))
    try:
        pod = running_pod(core_v1, "it-smi-agent")
        ref = "%s/%s" % (NS, pod.metadata.name)
        res = upgrade(kubeconfig, node, "prepare", target_version=TARGET, policy={"maxParallelUpgrades": 0})
        assert_ready_for_host_work(core_v1, node, res, pod.metadata.uid, "hostPath")
        assert res["deleted"] == [ref] and res["pod_rules"] == {ref: "hostPath /dev/nvidia0"}
        assert res["resource_claim_reads"] == 0
        res = finish_at_target(core_v1, kubeconfig, node)
        assert res["state"] == sm.UPGRADE_DONE and not core_v1.read_node(node).spec.unschedulable
    finally:
        gone(apps_v1.delete_namespaced_deployment, "it-smi-agent", NS)
        wait("agent gone", lambda: not core_v1.list_namespaced_pod(NS, label_selector="app=it-smi-agent").items)


def plugin_daemonset(node_selector):
    labels = {"app": "it-dra-plugin", "nvidia-dra-driver-gpu-component": "kubelet-plugin"}
    return {"metadata": {"name": "it-dra-plugin"},
            "spec": {"selector": {"matchLabels": {"app": "it-dra-plugin"}},
                     "template": {"metadata": {"labels": labels}, "spec": {
                         "nodeSelector": node_selector,
                         "containers": [{"name": "plugin", "image": "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.8.0"}]}}}}


def remove_plugin(core_v1, apps_v1):
    gone(apps_v1.delete_namespaced_daemon_set, "it-dra-plugin", PLUGIN_NS)
    wait("plugin gone", lambda: not core_v1.list_namespaced_pod(PLUGIN_NS, label_selector="app=it-dra-plugin").items)


def test_dra_kubelet_plugin_paused_and_restored_like_an_operand(core_v1, apps_v1, kubeconfig,
                                                                node_guard):
    node = node_guard(NODE)
    core_v1.patch_node(node, {"metadata": {"labels": {PLUGIN_LABEL: "true"}}})
    apps_v1.create_namespaced_daemon_set(PLUGIN_NS, plugin_daemonset({PLUGIN_LABEL: "true"}))
    try:
        before = running_pod(core_v1, "it-dra-plugin")
        res = upgrade(kubeconfig, node, "prepare", target_version=TARGET, policy={"maxParallelUpgrades": 0})
        assert not res.get("failed"), res.get("msg")
        n = core_v1.read_node(node)
        assert n.spec.unschedulable and n.metadata.labels[STATE] == sm.POD_RESTART_REQUIRED
        assert n.metadata.labels[PLUGIN_LABEL] == "paused-for-driver-upgrade"
        assert not pods_on(core_v1, node, "app=it-dra-plugin")  # off the node before the unload
        assert "DRA kubelet plugin %s/it-dra-plugin paused" % PLUGIN_NS in res["transitions"][-1]["reason"]
        res = finish_at_target(core_v1, kubeconfig, node)  # validation waits for the plugin's pod
        n = core_v1.read_node(node)
        assert n.metadata.labels[PLUGIN_LABEL] == "true" and not n.spec.unschedulable
        after = running_pod(core_v1, "it-dra-plugin")
        assert after.metadata.uid != before.metadata.uid
        assert "%s/it-dra-plugin" % PLUGIN_NS in res["transitions"][-2]["reason"]
    finally:
        remove_plugin(core_v1, apps_v1)


def test_dra_kubelet_plugin_without_deploy_label_refused_before_cordon(core_v1, apps_v1, kubeconfig,
                                                                       node_guard):
    node = node_guard(NODE)
    apps_v1.create_namespaced_daemon_set(PLUGIN_NS, plugin_daemonset({"kubernetes.io/hostname": NODE}))
    try:
        plugin = running_pod(core_v1, "it-dra-plugin")
        res = upgrade(kubeconfig, node, "prepare", target_version=TARGET, policy={"maxParallelUpgrades": 0})
        assert res.get("failed") and "nothing was changed" in res["msg"], res
        assert "%s/%s (DaemonSet %s/it-dra-plugin)" % (PLUGIN_NS, plugin.metadata.name, PLUGIN_NS) in res["msg"]
        n = core_v1.read_node(node)
        assert not n.spec.unschedulable and STATE not in (n.metadata.labels or {})
        assert plugin.metadata.uid in {p.metadata.uid for p in pods_on(core_v1, node, "app=it-dra-plugin")}
    finally:
        remove_plugin(core_v1, apps_v1)
