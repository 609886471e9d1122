"""The routes NodeUpgrade returns (route, resume_route, resumed_from) against an in-memory cluster:
what the role's prepare boundary and its preflight plan read instead of mapping states themselves."""

from __future__ import annotations

import pytest
from fake_k8s import FakeCluster, FakeLeases, make_node
from upgrade_pod_fixtures import gpu_labels

from ansible_collections.npuops.fleet.plugins.module_utils.driver.vendor_profiles import resolve_profile
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.node_upgrade import NodeUpgrade, UpgradeFailed
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.policy import parse_policy

NV = resolve_profile("nvidia")
STATE = NV["upgrade_state_label"]
AT_TARGET = {
    "nvidia.com/cuda.driver.major": "550",
    "nvidia.com/cuda.driver.minor": "90",
    "nvidia.com/cuda.driver.rev": "07",
}

pytestmark = pytest.mark.usefixtures("one_shot_waits")


def cluster(state=None, cordoned=False, **labels):
    if state:
        labels[STATE] = state
    nodes = [make_node("n%d" % i, gpu_labels()) for i in (0, 2, 3)]
    nodes.insert(1, make_node("n1", gpu_labels(**labels), unschedulable=cordoned))
    return FakeCluster(nodes, (), ())


def run(c, phase="prepare", check=False, host_at_target=False, **kw):
    up = NodeUpgrade(
        None,
        NV,
        parse_policy({}),
        "n1",
        target_version="550.90.07",
        check_mode=check,
        core=c,
        policy_api=c,
        host_at_target=host_at_target,
        **kw,
    )
    return up.run(phase, None)


def routes(res):
    return res["state"], res["route"], res["resume_route"], res["resumed_from"]


@pytest.mark.parametrize("check", [False, True])
def test_a_fresh_start_goes_through_the_install(check):
    res = run(cluster(), check=check)
    assert routes(res) == ("pod-restart-required", "install", "install", None)


@pytest.mark.parametrize("previous", ["upgrade-done", "upgrade-failed"])
def test_a_restart_after_done_or_failed_is_no_resume(previous):
    res = run(cluster(previous, cordoned=previous == "upgrade-failed"))
    assert routes(res) == ("pod-restart-required", "install", "install", None)


@pytest.mark.parametrize("previous", ["upgrade-required", "cordon-required", "drain-required"])
def test_a_resumed_prepare_says_where_it_resumed_from(previous):
    res = run(cluster(previous, cordoned=previous != "upgrade-required"))
    assert routes(res) == ("pod-restart-required", "install", "install", previous)


@pytest.mark.parametrize(
    "previous, route",
    [
        ("pod-restart-required", "install"),
        ("reboot-required", "reboot"),
        ("reboot-validation-required", "finish"),
        ("validation-required", "finish"),
        ("uncordon-required", "finish"),
    ],
)
@pytest.mark.parametrize("check", [False, True])
def test_prepare_past_its_end_goes_on_on_that_states_route(previous, route, check):
    res = run(cluster(previous, cordoned=True), check=check)
    assert routes(res) == (previous, route, route, previous)
    assert res["transitions"] == []


def test_done_without_disruption_has_no_route():
    res = run(cluster("upgrade-required", **AT_TARGET), host_at_target=True)
    assert routes(res) == ("upgrade-done", "none", "install", None)


def test_the_preflight_of_a_node_left_in_reboot_required_plans_the_reboot():
    # what the preflight's plan shows: the route from the state the run finds (check mode changes nothing)
    c = cluster("reboot-required", cordoned=True)
    res = run(c, check=True)
    assert res["resume_route"] == "reboot" and c.writes == 0


def test_a_node_left_alone_has_no_route_and_no_resume():
    res = run(cluster(**{"nvidia.com/gpu-driver-upgrade.skip": "true"}))
    assert res["skipped"] and routes(res) == (None, "none", "install", None)


def test_a_node_not_admitted_before_the_stop_is_no_resume(tmp_path):
    stop = tmp_path / "stop"
    stop.write_text("failure on h0 (install): dpkg refused\n")
    c = cluster("upgrade-required")
    c.nodes["n0"]["spec"]["unschedulable"] = True  # maxUnavailable reached: n1 waits, then sees the stop
    last = '{"from": "", "to": "upgrade-required", "reason": "admitted", "time": "t"}'
    c.nodes["n1"]["metadata"].setdefault("annotations", {})["nvidia.com/gpu-driver-upgrade-last-transition"] = last
    res = run(c, coord_api=FakeLeases(), admission_timeout=30, stop_file=str(stop))
    assert res["not_started"] and routes(res) == ("upgrade-required", "none", "install", None)


def test_a_failed_prepare_says_no_resume():
    c = cluster()
    c.nodes["n0"]["spec"]["unschedulable"] = True
    up = NodeUpgrade(
        None, NV, parse_policy({}), "n1", target_version="550.90.07", core=c, policy_api=c, admission_timeout=1
    )
    with pytest.raises(UpgradeFailed):
        up.run("prepare", None)
    assert routes(up.result) == (None, "none", "install", None)


def test_other_phases_never_say_resumed():
    c = cluster("pod-restart-required", cordoned=True)
    res = run(c, "reboot")
    assert routes(res) == ("reboot-required", "reboot", "install", None)
    res = run(c, "status")
    assert routes(res) == ("reboot-required", "reboot", "reboot", None)
