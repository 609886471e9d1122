from __future__ import annotations

from upgrade_pod_fixtures import pod

from ansible_collections.npuops.fleet.plugins.module_utils.driver.vendor_profiles import resolve_profile
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import operands

NV = resolve_profile("nvidia")
RB = resolve_profile("rebellions")


def test_paused_values_as_the_operators_write_them():
    assert operands.paused_value("true") == "paused-for-driver-upgrade"
    assert operands.paused_value("false") == "false"
    assert operands.paused_value("pre-installed") == "pre-installed_paused-for-driver-upgrade"
    assert operands.paused_value("paused-for-driver-upgrade") == "paused-for-driver-upgrade"


def test_a_paused_value_stands_for_the_deployed_one():
    assert operands.deployed_value("paused-for-driver-upgrade") == "true"
    assert operands.deployed_value("pre-installed_paused-for-driver-upgrade") == "pre-installed"
    assert operands.deployed_value("true") == "true"
    assert operands.deployed_value("false") == "false"
    assert operands.deployed_value("pre-installed") == "pre-installed"


def test_pause_plan_records_labels_found_paused_as_deployed():
    # A controller died before restoring them; the admin's false is still false.
    labels = {
        "nvidia.com/gpu.deploy.device-plugin": "paused-for-driver-upgrade",
        "nvidia.com/gpu.deploy.operator-validator": "custom_paused-for-driver-upgrade",
        "nvidia.com/gpu.deploy.dcgm-exporter": "false",
        "nvidia.com/gpu.deploy.gpu-feature-discovery": "true",
    }
    before, changes = operands.pause_plan(NV, labels)
    assert before == {
        "nvidia.com/gpu.deploy.device-plugin": "true",
        "nvidia.com/gpu.deploy.operator-validator": "custom",
        "nvidia.com/gpu.deploy.dcgm-exporter": "false",
        "nvidia.com/gpu.deploy.gpu-feature-discovery": "true",
    }
    assert changes == {"nvidia.com/gpu.deploy.gpu-feature-discovery": "paused-for-driver-upgrade"}
    assert operands.restore_plan(dict(labels, **changes), before) == {
        "nvidia.com/gpu.deploy.device-plugin": "true",
        "nvidia.com/gpu.deploy.operator-validator": "custom",
        "nvidia.com/gpu.deploy.gpu-feature-discovery": "true",
    }


def test_pause_plan_keeps_driver_and_skip_labels():
    labels = {
        "nvidia.com/gpu.deploy.driver": "true",
        "nvidia.com/gpu.deploy.device-plugin": "true",
        "nvidia.com/gpu.deploy.dcgm-exporter": "false",
        "nvidia.com/gpu.deploy.operator-validator": "custom",
        "nvidia.com/gpu.deploy.operands": "true",
        "other": "x",
    }
    before, changes = operands.pause_plan(NV, labels)
    assert set(before) == {
        "nvidia.com/gpu.deploy.device-plugin",
        "nvidia.com/gpu.deploy.dcgm-exporter",
        "nvidia.com/gpu.deploy.operator-validator",
    }
    assert changes == {
        "nvidia.com/gpu.deploy.device-plugin": "paused-for-driver-upgrade",
        "nvidia.com/gpu.deploy.operator-validator": "custom_paused-for-driver-upgrade",
    }
    paused = dict(labels, **changes)
    assert operands.restore_plan(paused, before) == {
        "nvidia.com/gpu.deploy.device-plugin": "true",
        "nvidia.com/gpu.deploy.operator-validator": "custom",
    }


def test_rebellions_skip_label_is_not_an_operand():
    before, _changes = operands.pause_plan(
        RB, {"rebellions.ai/npu.deploy.skip": "false", "rebellions.ai/npu.deploy.device-plugin": "true"}
    )
    assert list(before) == ["rebellions.ai/npu.deploy.device-plugin"]


def test_operand_pods_and_validation():
    dp = pod(
        "dp-1",
        ns="gpu-operator",
        owner="DaemonSet",
        owner_name="nvidia-device-plugin",
        node_selector={"nvidia.com/gpu.deploy.device-plugin": "true"},
    )
    val = pod(
        "val-1",
        ns="gpu-operator",
        owner="DaemonSet",
        owner_name="nvidia-validator",
        ready=False,
        node_selector={"nvidia.com/gpu.deploy.operator-validator": "true"},
    )
    other_ds = pod("proxy", ns="kube-system", owner="DaemonSet", owner_name="kube-proxy")
    pods = [dp, val, other_ds]
    assert operands.operand_daemonsets(NV, pods) == [
        "gpu-operator/nvidia-device-plugin",
        "gpu-operator/nvidia-validator",
    ]
    assert operands.paused_operand_pods(NV, pods, {"nvidia.com/gpu.deploy.device-plugin"}) == ["gpu-operator/dp-1"]
    assert operands.missing_operands(operands.operand_daemonsets(NV, pods), pods) == ["gpu-operator/nvidia-validator"]
