"""Safety paths of NodeUpgrade against the in-memory cluster: transitions guarded by resourceVersion,
admission through the slot record, the abort path for unexpected errors, the skip label in the middle
of an upgrade, the full drain before a reboot, and the device baseline kept across retries.
(The same behaviours run against the real apiserver in tests/integration/test_safety.py.)"""

from __future__ import annotations

import json

import pytest
from fake_k8s import FakeCluster, FakeLeases, make_node
from kubernetes.client.rest import ApiException
from upgrade_pod_fixtures import GPU, gpu_labels, on, pod

from ansible_collections.npuops.fleet.plugins.module_utils.driver.vendor_profiles import resolve_profile
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import admission, prepare
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.node_upgrade import (
    NodeUpgrade,
    UpgradeConflict,
    UpgradeFailed,
)
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.policy import parse_policy
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.validation import devices_differ

NV = resolve_profile("nvidia")
STATE = NV["upgrade_state_label"]
ANN = "nvidia.com/gpu-driver-upgrade-"
DP = "nvidia.com/gpu.deploy.device-plugin"


pytestmark = pytest.mark.usefixtures("one_shot_waits")


def cluster(n=4, pods=(), **n1_labels):
    nodes = [make_node("n%d" % i, gpu_labels(**(n1_labels if i == 1 else {}))) for i in range(n)]
    return FakeCluster(nodes, pods)


def upgrade(c, node="n1", policy=None, check=False, leases=None, **kw):
    return NodeUpgrade(
        None,
        NV,
        parse_policy(policy or {}),
        node,
        target_version=kw.pop("target", "550.90.07"),
        check_mode=check,
        core=c,
        policy_api=c,
        coord_api=leases,
        **kw,
    )


# ---- transitions guarded by resourceVersion ----------------------------------------------------


def test_first_transition_carries_a_resource_version_test():
    c = cluster()
    seen = []
    c.before_patch = lambda cl, name, body: seen.append(body) if isinstance(body, list) else None
    upgrade(c).run("prepare")
    first = seen[0]
    assert {"op": "test", "path": "/metadata/resourceVersion", "value": "102"} == first[0]
    assert not any(op["path"].endswith(STATE.replace("/", "~1")) and op["op"] == "test" for op in first)


def test_two_runs_racing_on_a_fresh_node_exactly_one_starts():
    c = cluster()
    a, b = upgrade(c), upgrade(c)
    # Both read the node (no state label) before either writes.
    for up in (a, b):
        up.ctx.node = json.loads(c.read_node("n1").data)
        up.ctx.state = ""
    a.transitions.transition(sm.UPGRADE_REQUIRED, "a")
    with pytest.raises(UpgradeConflict, match="changed from \\(none\\) to upgrade-required"):
        b.transitions.transition(sm.UPGRADE_REQUIRED, "b")
    assert json.loads(c.nodes["n1"]["metadata"]["annotations"][ANN + "last-transition"])["reason"] == "a"


def test_unrelated_write_between_read_and_transition_is_retried():
    c = cluster()
    up = upgrade(c)
    up.ctx.node = json.loads(c.read_node("n1").data)
    up.ctx.state = ""
    c.bump("n1")  # a heartbeat: same state label and last transition, newer resourceVersion
    up.transitions.transition(sm.UPGRADE_REQUIRED, "start")
    assert c.nodes["n1"]["metadata"]["labels"][STATE] == sm.UPGRADE_REQUIRED


# ---- admission through the slot record ------------------------------------------------------------


def test_concurrent_admissions_never_exceed_max_unavailable():
    """Eight nodes, maxUnavailable 25% (= 2): four runs decide on the same snapshot; the slot record
    lets two through and sends the others round again, where they see the taken slots."""
    c = cluster(n=8)
    leases = FakeLeases()
    policy = parse_policy({"maxUnavailable": "25%", "maxParallelUpgrades": 4})
    slots = admission.Slots(leases, NV)
    records = [slots.read() for _i in range(4)]  # everyone read the empty record first
    nodes = json.loads(c.list_node(label_selector="nvidia.com/gpu.present=true").data)["items"]
    wins = []
    for i, record in enumerate(records):
        name = "n%d" % i
        live = slots.live(record)
        if admission.verdict(NV, policy, name, nodes, set(live) - {name}) is None:
            if slots.write(record, dict(live, **{name: {"token": name, "since": slots.clock()}})):
                wins.append(name)
    assert wins == ["n0"]  # the others lost the compare-and-swap
    # The losers decide again on fresh data: only one more fits.
    for name in ("n1", "n2", "n3"):
        record = slots.read()
        live = slots.live(record)
        if admission.verdict(NV, policy, name, nodes, set(live) - {name}) is None:
            assert slots.write(record, dict(live, **{name: {"token": name, "since": slots.clock()}}))
            wins.append(name)
    assert wins == ["n0", "n1"]
    why = admission.verdict(NV, policy, "n2", nodes, set(slots.live(slots.read())))
    assert why and "maxUnavailable 25% (= 2 of 8 nvidia nodes)" in why and "n0, n1" in why


def test_upgrade_required_counts_as_taken_and_slot_is_released_after_start():
    c = cluster()
    leases = FakeLeases()
    c.nodes["n2"]["metadata"]["labels"][STATE] = sm.UPGRADE_REQUIRED
    c.nodes["n2"]["metadata"]["annotations"][ANN + "last-transition"] = json.dumps({"to": sm.UPGRADE_REQUIRED})
    policy = {"maxParallelUpgrades": 1, "maxUnavailable": "100%"}
    with pytest.raises(UpgradeFailed, match="maxParallelUpgrades 1 reached: upgrading now: n2"):
        upgrade(c, policy=policy, leases=leases, admission_timeout=0.01).run("prepare")
    assert STATE not in c.nodes["n1"]["metadata"]["labels"]
    c.nodes["n2"]["metadata"]["labels"][STATE] = sm.UPGRADE_DONE
    res = upgrade(c, policy=policy, leases=leases).run("prepare")
    assert res["state"] == sm.POD_RESTART_REQUIRED
    lease = leases.leases[("kube-system", "npuops-fleet-admission-nvidia")]
    assert json.loads(lease["metadata"]["annotations"][admission.SLOTS_ANNOTATION]) == {}


def test_a_live_slot_of_another_run_for_the_same_node_is_a_conflict():
    c = cluster()
    leases = FakeLeases()
    slots = admission.Slots(leases, NV)
    assert slots.write(slots.read(), {"n1": {"token": "other", "since": slots.clock(), "holder": "ctl/7"}})
    with pytest.raises(UpgradeConflict, match="another run \\(ctl/7\\) is starting an upgrade of node n1"):
        upgrade(c, leases=leases).run("prepare")
    assert STATE not in c.nodes["n1"]["metadata"]["labels"] and not c.nodes["n1"]["spec"].get("unschedulable")


def test_an_expired_slot_entry_does_not_count():
    leases = FakeLeases()
    slots = admission.Slots(leases, NV, clock=lambda: 10_000.0)
    record = admission.SlotRecord(None, {"n2": {"token": "t", "since": 10_000.0 - admission.SLOT_GRACE - 1}})
    assert slots.live(record) == {}


# ---- the abort path for every failure after the start ------------------------------------------


def test_unexpected_api_error_after_cordon_aborts_and_restores():
    trainer = on("n1", pod("gpu-job", ns="ml", resources=GPU))
    c = cluster(pods=[trainer])

    def forbid_eviction(name, ns, body, _preload_content=True):
        exc = ApiException(status=403, reason="Forbidden")
        exc.body = json.dumps({"message": "pods \"gpu-job\" is forbidden: admission policy deny-gpu-job"})
        raise exc

    c.create_namespaced_pod_eviction = forbid_eviction
    with pytest.raises(UpgradeFailed) as err:
        upgrade(c).run("prepare")
    assert "ml/gpu-job" in str(err.value) and "deny-gpu-job" in str(err.value)
    node = c.nodes["n1"]
    assert node["metadata"]["labels"][STATE] == sm.UPGRADE_FAILED
    assert not node["spec"].get("unschedulable")  # schedulability restored as recorded
    assert any(e["type"] == "Warning" for e in c.events)


def test_non_api_exception_in_a_step_goes_through_the_abort_path(monkeypatch):
    c = cluster()
    up = upgrade(c)

    def boom(*_args):
        raise ValueError("invalid label selector term 'a in ('")

    monkeypatch.setattr(prepare, "wait_for_jobs", boom)
    with pytest.raises(UpgradeFailed, match="unexpected error in wait-for-jobs-required: ValueError"):
        up.run("prepare")
    assert c.nodes["n1"]["metadata"]["labels"][STATE] == sm.UPGRADE_FAILED
    assert not c.nodes["n1"]["spec"].get("unschedulable")


# ---- skip label in the middle of an upgrade -----------------------------------------------------------


def test_skip_label_mid_upgrade_does_not_stop_finish():
    c = cluster()
    upgrade(c).run("prepare")
    c.nodes["n1"]["metadata"]["labels"][NV["upgrade_skip_label"]] = "true"
    c.nodes["n1"]["metadata"]["labels"].update(gpu_labels("550.90.07"))
    up = upgrade(c)
    res = up.run("finish")
    assert res["state"] == sm.UPGRADE_DONE and not res["skipped"]
    assert not c.nodes["n1"]["spec"].get("unschedulable")
    assert any("honoured only before an upgrade starts" in w for w in up.warnings)


def test_skip_label_before_start_leaves_the_node_alone():
    c = cluster(**{NV["upgrade_skip_label"]: "true"})
    res = upgrade(c).run("prepare")
    assert res["skipped"] and STATE not in c.nodes["n1"]["metadata"]["labels"]


# ---- full drain before a reboot ---------------------------------------------------------------------


def test_reboot_planned_drains_fully_with_the_default_policy():
    cpu = on("n1", pod("web-1", ns="shop", labels={"app": "web"}))
    c = cluster(pods=[cpu])
    res = upgrade(c, reboot_planned=True).run("prepare")
    assert res["evicted"] == ["shop/web-1"]
    assert "drain.enable is false" in res["full_drain"]
    assert sm.DRAIN_REQUIRED in [t["to"] for t in res["transitions"]]


def test_reboot_phase_drains_what_prepare_left_and_refuses_drain_skip_pods():
    cpu = on("n1", pod("web-1", ns="shop", labels={"app": "web"}))
    kept = on("n1", pod("ckpt", ns="ml", labels={NV["drain_skip_label"]: "true"}))
    c = cluster(pods=[cpu, kept])
    assert upgrade(c).run("prepare")["evicted"] == []  # drain.enable false: nothing evicted
    with pytest.raises(UpgradeFailed, match="ml/ckpt") as err:
        upgrade(c).run("reboot", "boot kernel changes")
    assert "a reboot would kill them" in str(err.value)
    node = c.nodes["n1"]
    assert node["metadata"]["labels"][STATE] == sm.UPGRADE_FAILED and node["spec"]["unschedulable"]


def test_reboot_phase_evicts_before_marking_reboot_required():
    cpu = on("n1", pod("web-1", ns="shop", labels={"app": "web"}))
    c = cluster(pods=[cpu])
    upgrade(c).run("prepare")
    res = upgrade(c).run("reboot", "module reload impossible")
    assert res["state"] == sm.REBOOT_REQUIRED and res["evicted"] == ["shop/web-1"]
    assert not c.pods


# ---- terminating pods ---------------------------------------------------------------------------------


def test_terminating_gpu_pod_keeps_prepare_from_host_work():
    job = on("n1", pod("ckpt-job", ns="ml", resources=GPU))
    job["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    c = cluster(pods=[job])
    with pytest.raises(UpgradeFailed, match="ml/ckpt-job") as err:
        upgrade(c).run("prepare")
    assert "podDeletion.timeoutSeconds" in str(err.value)
    assert c.nodes["n1"]["metadata"]["labels"][STATE] == sm.UPGRADE_FAILED
    assert not c.nodes["n1"]["spec"].get("unschedulable")


# ---- device baseline ----------------------------------------------------------------------------------


def test_devices_differ():
    assert devices_differ({"device_count": 8}, {"device_count": 8}) is None
    assert devices_differ({"device_count": 8}, {"device_count": 7}) == (
        "host has 7 devices, 8 before the first upgrade attempt"
    )
    before = {"device_count": 2, "pci_bus_ids": ["00000000:1B:00.0", "00000000:44:00.0"]}
    assert "00000000:44:00.0" in devices_differ(before, {"device_count": 2, "pci_bus_ids": ["00000000:1B:00.0", "x"]})
    assert devices_differ(before, {"device_count": 2, "pci_bus_ids": []}) is None


def test_baseline_is_recorded_once_and_a_retry_compares_with_it():
    c = cluster()
    up = upgrade(c, baseline={"device_count": 8})
    up.run("prepare")
    assert json.loads(c.nodes["n1"]["metadata"]["annotations"][ANN + "devices-before"]) == {"device_count": 8}
    upgrade(c).run("fail", "verify failed: 7 devices")
    # The driver label now says the target; the host has 7 devices. The retry keeps 8.
    c.nodes["n1"]["metadata"]["labels"].update(gpu_labels("550.90.07"))
    retry = upgrade(c, baseline={"device_count": 7}, host_at_target=True)
    res = retry.run("prepare")
    assert res["baseline"] == {"device_count": 8}
    assert "7 devices, 8 before" in res["baseline_mismatch"]
    assert res["host_work_required"] and res["state"] == sm.POD_RESTART_REQUIRED
    assert c.nodes["n1"]["spec"]["unschedulable"]  # never back in service on labels alone
    assert json.loads(c.nodes["n1"]["metadata"]["annotations"][ANN + "devices-before"]) == {"device_count": 8}


def test_another_runs_transition_seen_through_a_patch_response_is_a_conflict():
    """This run believes pod-deletion-required; another run already moved the node on, and this run's
    copy of the node (from a label patch's response) shows it. The guard must say conflict at once."""
    c = cluster()
    up = upgrade(c)
    up.run("status")
    up.ctx.state = sm.POD_DELETION_REQUIRED
    c.nodes["n1"]["metadata"]["labels"][STATE] = sm.POD_RESTART_REQUIRED
    c.bump("n1")
    up.ctx.node = json.loads(c.read_node("n1").data)
    with pytest.raises(UpgradeConflict, match="changed from pod-deletion-required to pod-restart-required"):
        up.transitions.transition(sm.POD_RESTART_REQUIRED, "mine")


def test_upgrade_required_written_by_a_run_is_resumed_not_started_again():
    from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm

    assert sm.phase_entry("prepare", sm.UPGRADE_REQUIRED, False, False, admitted=True).action == "resume"
    # an admin's label (operator style) is a request: admission applies
    assert sm.phase_entry("prepare", sm.UPGRADE_REQUIRED, False, False, admitted=False).action == "start"


def test_requested_upgrade_required_labels_are_requests_not_admissions():
    """Operator style: an admin labels three of eight nodes upgrade-required. With maxUnavailable 25%
    (= 2) the requests do not count as taken: two are admitted, the third waits; nobody deadlocks."""
    c = cluster(n=8)
    for name in ("n1", "n2", "n3"):
        c.nodes[name]["metadata"]["labels"][STATE] = sm.UPGRADE_REQUIRED
    leases = FakeLeases()
    policy = {"maxUnavailable": "25%", "maxParallelUpgrades": 0}
    assert upgrade(c, "n1", policy=policy, leases=leases).run("prepare")["state"] == sm.POD_RESTART_REQUIRED
    assert upgrade(c, "n2", policy=policy, leases=leases).run("prepare")["state"] == sm.POD_RESTART_REQUIRED
    with pytest.raises(UpgradeFailed, match="2 of 8 nvidia nodes\\) reached: unavailable now: n1, n2"):
        upgrade(c, "n3", policy=policy, leases=leases, admission_timeout=0.01).run("prepare")
    assert not c.nodes["n3"]["spec"].get("unschedulable")


def test_skip_labelled_admitted_node_does_not_hold_a_slot():
    c = cluster()
    leases = FakeLeases()
    c.nodes["n2"]["metadata"]["labels"].update({STATE: sm.UPGRADE_REQUIRED, NV["upgrade_skip_label"]: "true"})
    c.nodes["n2"]["metadata"]["annotations"][ANN + "last-transition"] = json.dumps({"to": sm.UPGRADE_REQUIRED})
    res = upgrade(c, policy={"maxParallelUpgrades": 1, "maxUnavailable": "100%"}, leases=leases).run("prepare")
    assert res["state"] == sm.POD_RESTART_REQUIRED


def test_a_losing_runs_abort_undoes_nothing():
    """Run B resumed a node run A is driving; B's drain fails, but A moved the node on meanwhile: B's
    abort is one guarded patch, so it fails as a conflict and A's cordon and operand pause stay."""
    c = cluster()
    upgrade(c).run("prepare")  # run A: pod-restart-required, cordoned, operands paused
    b = upgrade(c)
    b.run("status")
    b.ctx.state = sm.DRAIN_REQUIRED  # what B read before A moved on
    node_before = json.loads(json.dumps(c.nodes["n1"]))
    with pytest.raises(UpgradeConflict):
        b.transitions.abort("drain blocked")
    assert c.nodes["n1"]["spec"]["unschedulable"] is True
    assert c.nodes["n1"]["metadata"]["labels"][DP] == "paused-for-driver-upgrade"
    assert c.nodes["n1"]["metadata"]["labels"][STATE] == node_before["metadata"]["labels"][STATE]


def test_a_lost_response_to_our_own_transition_counts_as_done():
    c = cluster()
    up = upgrade(c)
    up.run("status")
    real_patch = c.patch_node
    calls = {"n": 0}

    def lose_first_response(name, body, _preload_content=True):
        calls["n"] += 1
        resp = real_patch(name, body)
        if calls["n"] == 1:  # committed, but the client saw a 504; the retry's test op then fails (422)
            raise ApiException(status=422, reason="test failed")
        return resp

    c.patch_node = lose_first_response
    up.transitions.transition(sm.UPGRADE_REQUIRED, "start")
    assert c.nodes["n1"]["metadata"]["labels"][STATE] == sm.UPGRADE_REQUIRED and up.state == sm.UPGRADE_REQUIRED


def test_an_abort_after_host_work_keeps_the_node_cordoned_and_its_baseline():
    """Run 1 reached host work and failed verification; run 2's prepare fails (a terminating pod):
    the abort must not put the node back into service nor forget the first attempt's devices."""
    c = cluster()
    upgrade(c, baseline={"device_count": 8}).run("prepare")
    upgrade(c).run("fail", "verify: devices 7 (before 8)")
    job = on("n1", pod("ckpt", ns="ml", resources=GPU, deleting=True))
    c.pods.append(job)
    with pytest.raises(UpgradeFailed, match="node stays cordoned"):
        upgrade(c, baseline={"device_count": 7}).run("prepare")
    node = c.nodes["n1"]
    assert node["spec"]["unschedulable"] is True
    assert json.loads(node["metadata"]["annotations"][ANN + "devices-before"]) == {"device_count": 8}


def test_an_abort_before_host_work_drops_the_baseline():
    job = on("n1", pod("ckpt", ns="ml", resources=GPU, deleting=True))
    c = cluster(pods=[job])
    with pytest.raises(UpgradeFailed, match="schedulability restored"):
        upgrade(c, baseline={"device_count": 8}).run("prepare")
    assert ANN + "devices-before" not in c.nodes["n1"]["metadata"]["annotations"]
    assert not c.nodes["n1"]["spec"].get("unschedulable")


def test_an_abort_after_a_lost_response_adopts_the_state_this_run_wrote():
    """The cordon-required -> wait-for-jobs-required write committed but its answer was lost; the step
    then fails: the abort recognises its own record and still restores and marks the node."""
    c = cluster()
    up = upgrade(c)
    up.run("status")
    up.transitions.transition(sm.UPGRADE_REQUIRED, "start")
    up.transitions.transition(sm.CORDON_REQUIRED, "admitted")
    c.nodes["n1"]["spec"]["unschedulable"] = True
    c.nodes["n1"]["metadata"]["annotations"][ANN + "unschedulable-before"] = "false"
    c.bump("n1")
    stale = json.loads(json.dumps(up.node))
    up.transitions.transition(sm.WAIT_FOR_JOBS_REQUIRED, "node cordoned")
    up.ctx.node, up.ctx.state = stale, sm.CORDON_REQUIRED  # as if the answer to that write never arrived
    up.ctx.last_transition_seen = stale["metadata"]["annotations"][ANN + "last-transition"]
    with pytest.raises(UpgradeFailed, match="schedulability restored .uncordoned."):
        up.transitions.abort("step failed")
    assert c.nodes["n1"]["metadata"]["labels"][STATE] == sm.UPGRADE_FAILED
    assert not c.nodes["n1"]["spec"].get("unschedulable")


def test_a_resumed_upgrade_required_node_waits_for_admission_again():
    c = cluster()
    leases = FakeLeases()
    c.nodes["n1"]["metadata"]["labels"][STATE] = sm.UPGRADE_REQUIRED
    c.nodes["n1"]["metadata"]["annotations"][ANN + "last-transition"] = json.dumps({"to": sm.UPGRADE_REQUIRED})
    c.nodes["n2"]["metadata"]["labels"][STATE] = sm.DRAIN_REQUIRED  # admitted while n1 was skip-labelled
    policy = {"maxParallelUpgrades": 1, "maxUnavailable": "100%"}
    with pytest.raises(UpgradeFailed, match="not admitted again.*maxParallelUpgrades 1 reached: upgrading now: n2"):
        upgrade(c, policy=policy, leases=leases, admission_timeout=0.01).run("prepare")
    assert c.nodes["n1"]["metadata"]["labels"][STATE] == sm.UPGRADE_REQUIRED
    assert not c.nodes["n1"]["spec"].get("unschedulable")


def test_a_stop_while_a_resumed_upgrade_required_node_waits_is_not_a_failure(tmp_path):
    # The window stopped (another host failed) while the resumed node waited to be admitted again:
    # nothing was changed, so the node keeps its request and no failure is marked or counted.
    c = cluster()
    c.nodes["n1"]["metadata"]["labels"][STATE] = sm.UPGRADE_REQUIRED
    c.nodes["n1"]["metadata"]["annotations"][ANN + "last-transition"] = json.dumps({"to": sm.UPGRADE_REQUIRED})
    c.nodes["n2"]["metadata"]["labels"][STATE] = sm.DRAIN_REQUIRED
    stop = tmp_path / "stop"
    stop.write_text("failure on h0 (install): dpkg refused\n")
    policy = {"maxParallelUpgrades": 1, "maxUnavailable": "100%"}
    res = upgrade(c, policy=policy, leases=FakeLeases(), admission_timeout=30, stop_file=str(stop)).run("prepare")
    assert res["not_started"] is True and "failure on h0 (install)" in res["message"]
    assert c.nodes["n1"]["metadata"]["labels"][STATE] == sm.UPGRADE_REQUIRED
    assert not c.nodes["n1"]["spec"].get("unschedulable")


def test_fail_from_a_prepare_state_restores_like_an_abort():
    c = cluster()
    up = upgrade(c)
    up.run("status")
    up.transitions.transition(sm.UPGRADE_REQUIRED, "start")
    up.transitions.transition(sm.CORDON_REQUIRED, "admitted")
    c.nodes["n1"]["spec"]["unschedulable"] = True
    c.nodes["n1"]["metadata"]["annotations"][ANN + "unschedulable-before"] = "false"
    res = upgrade(c).run("fail", "prepare could not finish its abort")
    assert res["state"] == sm.UPGRADE_FAILED and "schedulability restored" in res["message"]
    assert not c.nodes["n1"]["spec"].get("unschedulable")


def test_rebooting_again_from_reboot_required_records_the_current_boot():
    c = cluster()
    c.nodes["n1"]["status"]["nodeInfo"] = {"bootID": "boot-0"}
    upgrade(c).run("prepare")
    upgrade(c).run("reboot", "kernel changes")
    c.nodes["n1"]["status"]["nodeInfo"]["bootID"] = "boot-1"  # the killed run's reboot happened
    res = upgrade(c).run("reboot", "resuming")
    assert res["state"] == sm.REBOOT_REQUIRED
    assert c.nodes["n1"]["metadata"]["annotations"][ANN + "boot-id-before"] == "boot-1"


def test_skip_label_set_while_waiting_for_admission_leaves_the_node_alone(monkeypatch):
    """An admin labels the node skip while it waits (hours, in a rolling window) for a lane: once
    admitted it is not cordoned, its state is not written, and its slot is given back."""
    c = cluster()
    leases = FakeLeases()
    real = admission.wait_admission

    def admitted_after_the_label(*a, **kw):
        got = real(*a, **kw)
        c.nodes["n1"]["metadata"]["labels"][NV["upgrade_skip_label"]] = "true"
        return got

    monkeypatch.setattr(admission, "wait_admission", admitted_after_the_label)
    res = upgrade(c, leases=leases).run("prepare")
    assert res["skipped"] and res["not_started"], res
    assert "while it waited for admission" in res["skip_reason"]
    assert STATE not in c.nodes["n1"]["metadata"]["labels"]
    assert not c.nodes["n1"]["spec"].get("unschedulable")
    slots = admission.Slots(leases, NV)
    assert slots.live(slots.read()) == {}


def test_a_state_written_by_someone_else_while_waiting_for_admission_is_theirs(monkeypatch):
    c = cluster()
    leases = FakeLeases()
    real = admission.wait_admission

    def admitted_after_their_write(*a, **kw):
        got = real(*a, **kw)
        c.nodes["n1"]["metadata"]["labels"][STATE] = sm.CORDON_REQUIRED
        return got

    monkeypatch.setattr(admission, "wait_admission", admitted_after_their_write)
    with pytest.raises(UpgradeConflict, match="while it waited for admission"):
        upgrade(c, leases=leases).run("prepare")
    assert c.nodes["n1"]["metadata"]["labels"][STATE] == sm.CORDON_REQUIRED
    assert not c.nodes["n1"]["spec"].get("unschedulable")
    slots = admission.Slots(leases, NV)
    assert slots.live(slots.read()) == {}


def test_failures_are_counted_when_they_happen_and_each_node_once(tmp_path):
    """maintenance_max_failures 1: the first failure writes no stop file, a second node's does (also
    when its call started long before the first failed), and a node failing twice counts once."""
    stop = tmp_path / "stop"
    c = cluster()
    first, second = upgrade(c, "n1", stop_file=str(stop)), upgrade(c, "n2", stop_file=str(stop))
    first.record_failure("failure on n1 (prepare): drain timed out", 1)
    first.record_failure("failure on n1 (fail): again", 1)
    assert not stop.exists() and sorted(p.name for p in (tmp_path / "failures").iterdir()) == ["n1"]
    second.record_failure("failure on n2 (prepare): operands did not leave", 1)
    assert stop.read_text() == "failure on n2 (prepare): operands did not leave\n"
    upgrade(c, "n3", stop_file=str(stop)).record_failure("failure on n3 (prepare): later", 1)
    assert stop.read_text().startswith("failure on n2")  # the first reason stays


def test_a_failure_that_cannot_be_recorded_stops_the_window(tmp_path):
    (tmp_path / "failures").write_text("not a folder")
    stop = tmp_path / "stop"
    upgrade(cluster(), "n1", stop_file=str(stop)).record_failure("failure on n1 (prepare): x", 5)
    assert stop.exists()
