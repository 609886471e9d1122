"""NodeUpgrade phases against an in-memory cluster (the waits evaluate their predicate once)."""

from __future__ import annotations

import json

import pytest
from fake_k8s import FakeCluster, make_node
from upgrade_pod_fixtures import EMPTYDIR, gpu_labels, on, pod

from ansible_collections.npuops.fleet.plugins.module_utils.driver.vendor_profiles import resolve_profile
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.node_upgrade import NodeUpgrade, UpgradeFailed
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.policy import parse_policy

NV = resolve_profile("nvidia")
STATE = NV["upgrade_state_label"]
ANN = "nvidia.com/gpu-driver-upgrade-"
DP = "nvidia.com/gpu.deploy.device-plugin"


pytestmark = pytest.mark.usefixtures("one_shot_waits")


def cluster(n1_cordoned=False, pods=(), pdbs=(), **labels):
    nodes = [
        make_node("n0", gpu_labels()),
        make_node("n1", gpu_labels(**labels), unschedulable=n1_cordoned),
        make_node("n2", gpu_labels()),
        make_node("n3", gpu_labels()),
    ]
    return FakeCluster(nodes, pods, pdbs)


def run(c, phase, policy=None, target="550.90.07", check=False, reason=None, **kw):
    up = NodeUpgrade(
        None, NV, parse_policy(policy or {}), "n1", target_version=target, check_mode=check, core=c, policy_api=c, **kw
    )
    return up.run(phase, reason)


def trainer_pods():
    return [
        on("n1", pod("trainer-1", ns="gpu-drv", labels={"app": "trainer"})),
        on("n1", pod("dp-1", ns="gpu-drv", owner="DaemonSet", owner_name="device-plugin", node_selector={DP: "true"})),
    ]


def pdb(min_available, allowed):
    return {
        "metadata": {"name": "trainer-pdb", "namespace": "gpu-drv"},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": "trainer"}}},
        "status": {"disruptionsAllowed": allowed, "currentHealthy": 4, "desiredHealthy": min_available},
    }


def test_prepare_then_finish_happy_path():
    c = cluster(pods=trainer_pods())
    res = run(c, "prepare", {"drain": {"enable": True}})
    assert res["state"] == sm.POD_RESTART_REQUIRED and res["cordoned_by_upgrade"]
    assert res["evicted"] == ["gpu-drv/trainer-1"]
    node = c.nodes["n1"]
    assert node["spec"]["unschedulable"] is True
    assert node["metadata"]["annotations"][ANN + "unschedulable-before"] == "false"
    assert node["metadata"]["labels"][DP] == "paused-for-driver-upgrade"
    assert node["metadata"]["labels"]["nvidia.com/gpu.deploy.driver"] == "true"
    assert json.loads(node["metadata"]["annotations"][ANN + "operand-labels-before"]) == {DP: "true"}
    assert len(c.events) == len(res["transitions"]) == 6
    assert all(e["involvedObject"]["kind"] == "Node" and e["involvedObject"]["name"] == "n1" for e in c.events)
    assert "operands paused (%s)" % DP in res["transitions"][-1]["reason"]
    assert not [p for p in c.pods if p["metadata"]["name"] == "dp-1"]  # the DaemonSet controller removed it

    # Host work done: the driver label now says the target; the operand pod comes back Ready.
    node["metadata"]["labels"].update(
        {
            "nvidia.com/cuda.driver.major": "550",
            "nvidia.com/cuda.driver.minor": "90",
            "nvidia.com/cuda.driver.rev": "07",
        }
    )
    c.ds_controller = False  # dp-2 stands for the pod the DaemonSet brings back after the restore
    c.pods.append(
        on("n1", pod("dp-2", ns="gpu-drv", owner="DaemonSet", owner_name="device-plugin", node_selector={DP: "true"}))
    )
    res = run(c, "finish", target=None)  # target recorded on the node by prepare
    assert res["state"] == sm.UPGRADE_DONE and res["at_target"]
    assert [t["to"] for t in res["transitions"]] == [sm.VALIDATION_REQUIRED, sm.UNCORDON_REQUIRED, sm.UPGRADE_DONE]
    assert not node["spec"].get("unschedulable")
    assert node["metadata"]["labels"][DP] == "true"
    assert [k for k in node["metadata"]["annotations"] if k.startswith(ANN)] == [ANN + "last-transition"]


def test_operand_label_left_paused_by_a_dead_controller_is_restored_to_true():
    # No upgrade in progress (no state label, no record), yet the device plugin is paused; dcgm-exporter
    # is off by the admin.
    dcgm = "nvidia.com/gpu.deploy.dcgm-exporter"
    c = cluster(**{DP: "paused-for-driver-upgrade", dcgm: "false"})
    up = NodeUpgrade(None, NV, parse_policy({}), "n1", target_version="550.90.07", core=c, policy_api=c)
    res = up.run("prepare", None)
    node = c.nodes["n1"]
    assert res["state"] == sm.POD_RESTART_REQUIRED
    assert json.loads(node["metadata"]["annotations"][ANN + "operand-labels-before"]) == {DP: "true", dcgm: "false"}
    assert node["metadata"]["labels"][DP] == "paused-for-driver-upgrade" and node["metadata"]["labels"][dcgm] == "false"
    assert res["transitions"][-1]["reason"].endswith(
        "operands paused (nvidia.com/gpu.deploy.device-plugin); found paused with no upgrade in progress: "
        "nvidia.com/gpu.deploy.device-plugin=paused-for-driver-upgrade recorded as true"
    )
    assert up.warnings == [
        "node n1: operand deploy labels found paused with no upgrade in progress (left by a controller that did "
        "not restore them): nvidia.com/gpu.deploy.device-plugin=paused-for-driver-upgrade recorded as true; finish "
        "restores these values"
    ]

    # Host work done: GFD says the target driver.
    node["metadata"]["labels"].update(
        {
            "nvidia.com/cuda.driver.major": "550",
            "nvidia.com/cuda.driver.minor": "90",
            "nvidia.com/cuda.driver.rev": "07",
        }
    )
    res = run(c, "finish", target=None)
    assert res["state"] == sm.UPGRADE_DONE
    assert node["metadata"]["labels"][DP] == "true"
    assert node["metadata"]["labels"][dcgm] == "false"


def test_operand_pod_that_does_not_leave_aborts_and_restores():
    c = cluster(pods=trainer_pods())
    c.ds_controller = False
    with pytest.raises(UpgradeFailed) as err:
        run(c, "prepare", operands_timeout=5)  # fake: the DaemonSet pod never leaves
    assert "gpu-drv/dp-1" in str(err.value)
    node = c.nodes["n1"]
    assert node["metadata"]["labels"][DP] == "true" and not node["spec"].get("unschedulable")
    assert node["metadata"]["labels"][STATE] == sm.UPGRADE_FAILED


def test_pdb_refusal_names_pdb_and_restores_schedulability_c13():
    pods = [p for p in trainer_pods() if "trainer" in p["metadata"]["name"]]
    c = cluster(pods=pods, pdbs=[pdb(4, 0)])
    with pytest.raises(UpgradeFailed) as err:
        run(c, "prepare", {"drain": {"enable": True, "timeoutSeconds": 1}})
    msg = str(err.value)
    assert "gpu-drv/trainer-pdb" in msg and "gpu-drv/trainer-1" in msg and "uncordoned" in msg
    node = c.nodes["n1"]
    assert not node["spec"].get("unschedulable") and node["metadata"]["labels"][STATE] == sm.UPGRADE_FAILED
    assert ANN + "unschedulable-before" not in node["metadata"]["annotations"]
    assert c.events[-1]["type"] == "Warning"
    # PDB relaxed: prepare retries from upgrade-failed and succeeds.
    c.pdbs = [pdb(3, 1)]
    res = run(c, "prepare", {"drain": {"enable": True, "timeoutSeconds": 1}})
    assert res["state"] == sm.POD_RESTART_REQUIRED and res["previous_state"] == sm.UPGRADE_FAILED
    assert "retry after upgrade-failed" in res["transitions"][0]["reason"]


def two_pdbs_over_the_trainer():
    """Two PDBs whose selectors match gpu-drv/trainer-1 (both allow a disruption), one of the same
    namespace that does not match it and one of another namespace whose {} selector would."""

    def guard(name, selector, ns="gpu-drv"):
        return {
            "metadata": {"name": name, "namespace": ns},
            "spec": {"maxUnavailable": 1, "selector": selector},
            "status": {"disruptionsAllowed": 1, "currentHealthy": 4, "desiredHealthy": 3},
        }

    return [
        guard("pdb-a", {"matchLabels": {"app": "trainer"}}),
        guard("pdb-web", {"matchLabels": {"app": "web"}}),
        guard("total", {}, ns="other"),
        guard("pdb-b", {}),
    ]


def test_eviction_refused_for_two_pdbs_names_them():
    pods = [p for p in trainer_pods() if "trainer" in p["metadata"]["name"]]
    c = cluster(pods=pods, pdbs=two_pdbs_over_the_trainer())
    with pytest.raises(UpgradeFailed) as err:
        run(c, "prepare", {"drain": {"enable": True}})
    msg = str(err.value)
    assert (
        "eviction refused by the API server (not retried): PodDisruptionBudgets covering gpu-drv/trainer-1: "
        "gpu-drv/pdb-a, gpu-drv/pdb-b; eviction of pod gpu-drv/trainer-1 refused: HTTP 500: This pod has more "
        "than one PodDisruptionBudget, which the eviction subresource does not support." in msg
    )
    assert c.nodes["n1"]["metadata"]["labels"][STATE] == sm.UPGRADE_FAILED
    assert [p["metadata"]["name"] for p in c.pods] == ["trainer-1"]


def test_dry_run_refusal_for_two_pdbs_names_them_when_the_pdb_list_did_not_predict_it():
    # A second PDB is made between the PDB list and the dry-run eviction: the dry run meets the 500.
    pdb_a, pdb_web, total, pdb_b = two_pdbs_over_the_trainer()
    c = cluster(pods=trainer_pods(), pdbs=[pdb_a, pdb_web, total])
    evict = c.create_namespaced_pod_eviction

    def racing(*args, **kwargs):
        if pdb_b not in c.pdbs:
            c.pdbs.append(pdb_b)
        return evict(*args, **kwargs)

    c.create_namespaced_pod_eviction = racing
    res = run(c, "status", {"drain": {"enable": True}})
    assert res["refused_evictions"] == {
        "gpu-drv/trainer-1": "This pod has more than one PodDisruptionBudget, which the eviction subresource does "
        "not support. (HTTP 500); PodDisruptionBudgets covering gpu-drv/trainer-1: gpu-drv/pdb-a, gpu-drv/pdb-b"
    }
    assert c.writes == 0


def test_admin_cordoned_node_is_never_uncordoned_c15():
    c = cluster(n1_cordoned=True)
    res = run(c, "prepare")
    assert not res["cordoned_by_upgrade"]
    assert c.nodes["n1"]["metadata"]["annotations"][ANN + "unschedulable-before"] == "true"
    c.nodes["n1"]["metadata"]["labels"].update(
        {
            "nvidia.com/cuda.driver.major": "550",
            "nvidia.com/cuda.driver.minor": "90",
            "nvidia.com/cuda.driver.rev": "07",
        }
    )
    res = run(c, "finish")
    assert res["state"] == sm.UPGRADE_DONE and c.nodes["n1"]["spec"]["unschedulable"] is True
    assert "left cordoned" in res["transitions"][-1]["reason"]


def test_blockers_without_drain_fail_with_options_c14():
    pods = [
        on("n1", pod("bare", owner=None, resources={"limits": {"nvidia.com/gpu": "1"}})),
        on("n1", pod("scratch", volumes=EMPTYDIR, resources={"limits": {"nvidia.com/gpu": "1"}})),
    ]
    c = cluster(pods=pods)
    with pytest.raises(UpgradeFailed) as err:
        run(c, "prepare")
    assert "podDeletion.force" in str(err.value) and "podDeletion.deleteEmptyDirData" in str(err.value)
    assert not c.nodes["n1"]["spec"].get("unschedulable")
    res = run(c, "prepare", {"gpuPodDeletion": {"force": True, "deleteEmptyDirData": True}})
    assert sorted(res["deleted"]) == ["default/bare", "default/scratch"]


def test_at_target_is_done_without_disruption_c16():
    c = cluster()
    c.nodes["n1"]["metadata"]["labels"].update(
        {
            "nvidia.com/cuda.driver.major": "550",
            "nvidia.com/cuda.driver.minor": "90",
            "nvidia.com/cuda.driver.rev": "7",
            STATE: sm.UPGRADE_REQUIRED,
        }
    )
    res = run(c, "prepare")
    assert res["state"] == sm.UPGRADE_DONE and not res["host_work_required"]
    assert not c.nodes["n1"]["spec"].get("unschedulable")
    # Not at target: an upgrade-required label never jumps to done.
    c2 = cluster(**{STATE: sm.UPGRADE_REQUIRED})
    res = run(c2, "prepare", check=True)
    assert res["transitions"][-1]["to"] == sm.POD_RESTART_REQUIRED and res["host_work_required"]


def test_check_mode_changes_nothing():
    c = cluster(pods=trainer_pods(), pdbs=[pdb(4, 0)])
    res = run(c, "prepare", {"drain": {"enable": True}}, check=True)
    assert c.writes == 0 and not c.events
    assert res["changed"]  # check mode says that the call would change something, as Ansible expects
    assert res["would_evict"] == ["gpu-drv/trainer-1"]
    assert res["blocking_pdbs"] and "trainer-pdb" in res["blocking_pdbs"][0]


def test_skip_label():
    c = cluster(**{"nvidia.com/gpu-driver-upgrade.skip": "true"})
    res = run(c, "prepare")
    assert res["skipped"] and c.writes == 0


def test_admission_waits_at_max_unavailable():
    c = cluster()
    c.nodes["n0"]["spec"]["unschedulable"] = True
    with pytest.raises(UpgradeFailed) as err:
        run(c, "prepare", admission_timeout=1)
    assert "maxUnavailable 25%" in str(err.value) and "n0" in str(err.value) and c.writes == 0


def test_reboot_and_fail_phases():
    c = cluster()
    run(c, "prepare")
    res = run(c, "reboot")
    assert res["state"] == sm.REBOOT_REQUIRED
    res = run(c, "fail", reason="reboot timed out")
    assert res["state"] == sm.UPGRADE_FAILED and c.nodes["n1"]["spec"]["unschedulable"] is True
    assert json.loads(c.nodes["n1"]["metadata"]["annotations"][ANN + "last-transition"])["reason"] == "reboot timed out"
    res = run(c, "fail", reason="reboot timed out")
    assert not res["changed"]


def test_a_run_that_lost_its_lease_marks_only_a_node_it_moved_last():
    from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.states import UpgradeConflict

    c = cluster()
    run(c, "prepare", run_id="run-A")
    run(c, "reboot", run_id="run-A")
    last = json.loads(c.nodes["n1"]["metadata"]["annotations"][ANN + "last-transition"])
    assert last["run_id"] == "run-A"
    # run B took the node over (its transition is the last one): A's mark leaves it alone
    ann = c.nodes["n1"]["metadata"]["annotations"][ANN + "last-transition"]
    json_b = json.loads(ann)
    json_b["run_id"] = "run-B"
    c.nodes["n1"]["metadata"]["annotations"][ANN + "last-transition"] = json.dumps(json_b)
    with pytest.raises(UpgradeConflict, match="last moved by run run-B"):
        run(c, "fail", reason="lost its lease", run_id="run-A", own_run_only=True)
    assert c.nodes["n1"]["metadata"]["labels"][STATE] == sm.REBOOT_REQUIRED
    # still A's: marked upgrade-failed, cordoned
    res = run(c, "fail", reason="lost its lease", run_id="run-B", own_run_only=True)
    assert res["state"] == sm.UPGRADE_FAILED and c.nodes["n1"]["spec"]["unschedulable"] is True
    # without a run id nothing can be proven to be ours
    with pytest.raises(UpgradeConflict):
        run(c, "fail", reason="x", own_run_only=True)


def test_finish_before_prepare_is_an_error():
    with pytest.raises(UpgradeFailed) as err:
        run(cluster(), "finish")
    assert "run prepare first" in str(err.value)


def test_finish_validation_timeout_keeps_node_cordoned_c16():
    c = cluster(pods=trainer_pods())
    run(c, "prepare")
    with pytest.raises(UpgradeFailed) as err:
        run(c, "finish", validation_timeout=1)  # driver label still 535.183.06
    assert "driver label says 535.183.06, target is 550.90.07" in str(err.value)
    node = c.nodes["n1"]
    assert node["metadata"]["labels"][STATE] == sm.UPGRADE_FAILED and node["spec"]["unschedulable"] is True


def test_wait_for_jobs_timeout_proceeds_with_a_warning():
    c = cluster(pods=[on("n1", pod("job-1", labels={"job": "train"}))])
    res = run(c, "prepare", {"waitForCompletion": {"podSelector": "job=train", "timeoutSeconds": 1}})
    assert res["state"] == sm.POD_RESTART_REQUIRED
    wait_step = [t for t in res["transitions"] if t["from"] == sm.WAIT_FOR_JOBS_REQUIRED][0]
    assert "timed out" in wait_step["reason"] and "default/job-1" in wait_step["reason"]


def test_transition_ops_guard_the_state_label():
    from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.record import transition_ops

    node = {"metadata": {"labels": {STATE: sm.DRAIN_REQUIRED}, "annotations": {"a/b": "1"}}}
    ops = transition_ops(node, STATE, sm.DRAIN_REQUIRED, sm.POD_RESTART_REQUIRED, {"a/b": None, "x/y": "2"})
    assert ops[0] == {
        "op": "test",
        "path": "/metadata/labels/nvidia.com~1gpu-driver-upgrade-state",
        "value": sm.DRAIN_REQUIRED,
    }
    assert {"op": "remove", "path": "/metadata/annotations/a~1b"} in ops
    assert {"op": "add", "path": "/metadata/annotations/x~1y", "value": "2"} in ops
    bare = transition_ops({"metadata": {"labels": {}}}, STATE, "", sm.UPGRADE_REQUIRED, {"k": "v", "gone": None})
    assert bare[-1] == {"op": "add", "path": "/metadata/annotations", "value": {"k": "v"}}


def test_concurrent_state_change_is_detected():
    c = cluster()
    up = NodeUpgrade(None, NV, parse_policy({}), "n1", target_version="550.90.07", core=c, policy_api=c)
    up.ctx.node = json.loads(json.dumps(c.nodes["n1"]))
    up.ctx.state = sm.DRAIN_REQUIRED  # this run believes drain-required; the node says otherwise
    c.nodes["n1"]["metadata"]["labels"][STATE] = sm.UPGRADE_FAILED
    with pytest.raises(UpgradeFailed) as err:
        up.transitions.transition(sm.POD_RESTART_REQUIRED, "x")
    assert "changed from drain-required to upgrade-failed meanwhile" in str(err.value)
    assert c.nodes["n1"]["metadata"]["labels"][STATE] == sm.UPGRADE_FAILED


def test_resume_past_cordon_recordons_an_uncordoned_node():
    c = cluster(**{STATE: sm.DRAIN_REQUIRED})  # e.g. killed after an abort had already uncordoned
    res = run(c, "prepare", {"drain": {"enable": True}})
    assert res["state"] == sm.POD_RESTART_REQUIRED and res["cordoned_by_upgrade"]
    assert c.nodes["n1"]["spec"]["unschedulable"] is True


def test_reboot_validation_needs_a_new_boot_id():
    c = cluster()
    c.nodes["n1"]["status"]["nodeInfo"] = {"bootID": "boot-1"}
    run(c, "prepare")
    run(c, "reboot")
    assert c.nodes["n1"]["metadata"]["annotations"][ANN + "boot-id-before"] == "boot-1"
    c.nodes["n1"]["metadata"]["labels"].update(
        {
            "nvidia.com/cuda.driver.major": "550",
            "nvidia.com/cuda.driver.minor": "90",
            "nvidia.com/cuda.driver.rev": "07",
        }
    )
    with pytest.raises(UpgradeFailed) as err:
        run(c, "finish", validation_timeout=1)  # Ready, but still the old boot: the reboot was not seen
    assert "still reports bootID boot-1" in str(err.value)
    assert c.nodes["n1"]["spec"]["unschedulable"] is True
    c2 = cluster()
    c2.nodes["n1"]["status"]["nodeInfo"] = {"bootID": "boot-1"}
    run(c2, "prepare")
    run(c2, "reboot")
    c2.nodes["n1"]["status"]["nodeInfo"]["bootID"] = "boot-2"
    c2.nodes["n1"]["metadata"]["labels"].update(
        {
            "nvidia.com/cuda.driver.major": "550",
            "nvidia.com/cuda.driver.minor": "90",
            "nvidia.com/cuda.driver.rev": "07",
        }
    )
    res = run(c2, "finish")
    assert res["state"] == sm.UPGRADE_DONE
    assert ANN + "boot-id-before" not in c2.nodes["n1"]["metadata"]["annotations"]


def test_a_stop_file_ends_the_admission_wait_with_nothing_changed(tmp_path):
    from fake_k8s import FakeLeases

    stop = tmp_path / "stop"
    c = cluster()
    c.nodes["n0"]["spec"]["unschedulable"] = True  # maxUnavailable 25% of 4 reached: n1 waits
    leases = FakeLeases()
    up = NodeUpgrade(None, NV, parse_policy({}), "n1", target_version="550.90.07", core=c, policy_api=c,
                     coord_api=leases, admission_timeout=30, stop_file=str(stop))
    stop.write_text("failure on h0 (install): dpkg refused\n")
    res = up.run("prepare")
    assert res["not_started"] is True and "failure on h0 (install)" in res["message"]
    assert c.writes == 0 and res["transitions"] == [] and not leases.leases
