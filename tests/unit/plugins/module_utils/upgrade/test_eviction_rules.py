from __future__ import annotations

import pytest
from upgrade_pod_fixtures import EMPTYDIR, GPU, pod

from ansible_collections.npuops.fleet.plugins.module_utils.driver.vendor_profiles import resolve_profile
from ansible_collections.npuops.fleet.plugins.module_utils.k8s import selectors
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import eviction_rules as er
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.policy import parse_policy

NV = resolve_profile("nvidia")
SKIP = NV["drain_skip_label"]


def node_pods():
    return [
        pod("trainer-1", labels={"app": "trainer"}, resources=GPU),
        pod("web-1", labels={"app": "web"}),
        pod("scratch-1", volumes=EMPTYDIR),
        pod("bare", owner=None),
        pod("bare-done", owner=None, phase="Succeeded"),
        pod(
            "dp-abc",
            ns="gpu-operator",
            owner="DaemonSet",
            node_selector={"nvidia.com/gpu.deploy.device-plugin": "true"},
        ),
        pod("kube-apiserver-n1", ns="kube-system", owner="Node", annotations={er.MIRROR_ANNOTATION: "x"}),
        pod("keep-me", labels={SKIP: "true"}),
        pod("going", deleting=True),
    ]


def test_drain_defaults_block_on_emptydir_and_controllerless_c14():
    plan = er.plan_drain(node_pods(), parse_policy({"drain": {"enable": True}}).drain, SKIP)
    assert plan.blockers == {er.BLOCKER_EMPTYDIR: ["default/scratch-1"], er.BLOCKER_NO_CONTROLLER: ["default/bare"]}
    assert sorted(plan.remove) == ["default/bare-done", "default/trainer-1", "default/web-1"]
    msg = plan.blocker_message()
    assert "drain.deleteEmptyDirData" in msg and "drain.force" in msg and "default/bare" in msg
    ignored = {r for refs in plan.ignored.values() for r in refs}
    assert {"gpu-operator/dp-abc", "kube-system/kube-apiserver-n1", "default/keep-me"} == ignored
    assert plan.wait == ["default/going"]  # terminating: not evicted again, but waited for


def test_drain_overrides():
    drain = parse_policy({"drain": {"enable": True, "force": True, "deleteEmptyDirData": True}}).drain
    plan = er.plan_drain(node_pods(), drain, SKIP)
    assert not plan.blockers
    assert "default/scratch-1" in plan.remove and "default/bare" in plan.remove
    assert "gpu-operator/dp-abc" not in plan.remove  # DaemonSet pods never evicted


def test_drain_pod_selector():
    drain = parse_policy({"drain": {"podSelector": "app in (trainer,web)"}}).drain
    plan = er.plan_drain(node_pods(), drain, SKIP)
    assert sorted(plan.remove) == ["default/trainer-1", "default/web-1"]


def test_pod_deletion_only_accelerator_pods():
    pods = node_pods() + [
        pod("gpu-bare", owner=None, resources=GPU),
        pod("gpu-pending", phase="Pending", resources=GPU),
        pod("gpu-done", phase="Succeeded", resources=GPU),
    ]
    plan = er.plan_pod_deletion(pods, parse_policy({}).pod_deletion, NV)
    assert plan.remove == ["default/trainer-1", "default/gpu-pending"]
    assert plan.blockers == {er.BLOCKER_NO_CONTROLLER: ["default/gpu-bare"]}
    assert "podDeletion.force" in plan.blocker_message()
    forced = er.plan_pod_deletion(pods, parse_policy({"gpuPodDeletion": {"force": True}}).pod_deletion, NV)
    assert "default/gpu-bare" in forced.remove and not forced.blockers


def test_accelerator_prefixes_per_vendor():
    rb = resolve_profile("rebellions")
    npu = pod("npu", resources={"requests": {"rebellions.ai/ATOM": "1"}})
    assert er.requests_accelerator(npu, rb) and not er.requests_accelerator(npu, NV)
    assert er.requests_accelerator(pod("mig", resources={"limits": {"nvidia.com/mig-1g.10gb": "1"}}), NV)


@pytest.mark.parametrize(
    "selector,labels,expected",
    [
        ("", {}, True),
        ("app=trainer", {"app": "trainer"}, True),
        ("app==trainer", {"app": "web"}, False),
        ("app!=trainer", {"app": "web"}, True),
        ("app!=trainer", {}, True),
        ("app in (a, b)", {"app": "b"}, True),
        ("app notin (a,b)", {"app": "b"}, False),
        ("app", {"app": ""}, True),
        ("!app", {"app": "x"}, False),
        ("app=trainer,tier=gpu", {"app": "trainer"}, False),
    ],
)
def test_matches_selector(selector, labels, expected):
    assert selectors.matches(labels, selector) is expected


def test_label_selector_object():
    sel = {
        "matchLabels": {"app": "trainer"},
        "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["x"]}],
    }
    assert selectors.matches_object({"app": "trainer"}, sel)
    assert not selectors.matches_object({"app": "trainer", "tier": "x"}, sel)
    assert selectors.matches_object({"a": "b"}, {})  # policy/v1: empty selector = all pods
    assert not selectors.matches_object({"a": "b"}, None)


def test_jobs_matching_ignore_finished():
    pods = [pod("j1", labels={"job": "x"}), pod("j2", labels={"job": "x"}, phase="Succeeded")]
    assert er.pods_matching(pods, "job=x") == ["default/j1"]


def terminating_mix():
    return [
        pod("going", deleting=True),
        pod("gpu-going", deleting=True, resources=GPU),
        pod("gpu-done-going", deleting=True, resources=GPU, phase="Succeeded"),
        pod("ds-going", ns="gpu-operator", owner="DaemonSet", deleting=True, resources=GPU),
        pod("static-going", ns="kube-system", owner="Node", annotations={er.MIRROR_ANNOTATION: "x"}, deleting=True),
        pod("kept-going", labels={SKIP: "true"}, deleting=True),
        pod("web-1", labels={"app": "web"}),
    ]


def test_terminating_pods_helper():
    pods = terminating_mix()
    assert er.terminating_pods(pods) == [
        "default/going",
        "default/gpu-going",
        "default/gpu-done-going",
        "default/kept-going",
    ]
    assert "gpu-operator/ds-going" in er.terminating_pods(pods, include_daemonsets=True)
    assert "kube-system/static-going" not in er.terminating_pods(pods, include_daemonsets=True)
    assert er.terminating_pods([pod("web-1")]) == []


def test_drain_waits_for_terminating_pods_in_its_scope():
    plan = er.plan_drain(terminating_mix(), parse_policy({"drain": {"enable": True}}).drain, SKIP)
    # The drain-skip label keeps a pod from being evicted, not from leaving: kept-going is waited for.
    assert plan.wait == ["default/going", "default/gpu-going", "default/gpu-done-going", "default/kept-going"]
    assert plan.remove == ["default/web-1"] and not plan.blockers
    ignored = {r for refs in plan.ignored.values() for r in refs}
    assert {"gpu-operator/ds-going", "kube-system/static-going"} == ignored
    # Outside drain.podSelector: not the drain's business.
    narrow = er.plan_drain(terminating_mix(), parse_policy({"drain": {"podSelector": "app=web"}}).drain, SKIP)
    assert narrow.wait == [] and narrow.remove == ["default/web-1"]


def test_pod_deletion_waits_for_terminating_accelerator_pods():
    pods = terminating_mix() + [pod("trainer-1", resources=GPU)]
    plan = er.plan_pod_deletion(pods, parse_policy({}).pod_deletion, NV)
    assert plan.wait == ["default/gpu-going"]  # finished, DaemonSet, mirror and non-GPU pods: not waited for
    assert plan.remove == ["default/trainer-1"]
