"""Host-to-Node identity (module_utils/fleet/identity.py) and its use by NodeUpgrade's prepare."""

from __future__ import annotations

import copy

import pytest
from fake_k8s import FakeCluster, make_node
from upgrade_pod_fixtures import gpu_labels

from ansible_collections.npuops.fleet.plugins.module_utils.driver.vendor_profiles import resolve_profile
from ansible_collections.npuops.fleet.plugins.module_utils.fleet import identity
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.node_upgrade import NodeUpgrade, UpgradeConflict
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.policy import parse_policy

NV = resolve_profile("nvidia")
MID = "3d1219c7c4c5404aaa1f6d2a48adfda4"
UUID = "4C4C4544-0039-4810-8033-B4C04F5A4E32"
BOOT = "0f5ef7a2-9d0c-4a5e-8f43-2c1d6a3f0b7e"

pytestmark = pytest.mark.usefixtures("one_shot_waits")


def node(name="gpu-17", hostname=None, machine_id=MID, system_uuid=UUID, boot_id=BOOT):
    n = make_node(name, gpu_labels())
    n["metadata"]["labels"]["kubernetes.io/hostname"] = hostname or name
    n["status"]["nodeInfo"] = {"machineID": machine_id, "systemUUID": system_uuid, "bootID": boot_id}
    return n


def host(**over):
    h = {"host": "gpu-17", "machine_id": MID, "system_uuid": UUID.lower(), "boot_id": BOOT, "hostname": "gpu-17"}
    h.update(over)
    return h


def test_node_identity_reads_node_info_and_hostname_label():
    assert identity.node_identity(node()) == {
        "machine_id": MID, "system_uuid": UUID, "boot_id": BOOT, "hostname": "gpu-17"}
    empty = make_node("x")
    empty["status"]["nodeInfo"] = {"machineID": "", "systemUUID": "", "bootID": ""}
    assert identity.node_identity(empty) == dict.fromkeys(identity.FIELDS)


def test_same_machine_matches_with_uuid_case_and_dashes_ignored():
    r = identity.compare(host(), identity.node_identity(node()))
    assert r["same"] and r["compared"] == list(identity.FIELDS) and r["mismatches"] == []
    assert identity.refusal("gpu-17", "gpu-17", r) is None


@pytest.mark.parametrize("h,label,same", [
    ("gpu-17", "gpu-17.dc1.example.com", True),     # kubelet saw the FQDN, the host says its short name
    ("gpu-17.dc1.example.com", "gpu-17", True),
    ("gpu-17.dc1.example.com", "gpu-17.dc2.example.com", False),
    ("gpu-17", "gpu-170", False),
    ("gpu-1", "gpu-17", False),
])
def test_hostname_short_and_fqdn_of_one_name(h, label, same):
    r = identity.compare({"hostname": h}, {"hostname": label}, ["hostname"])
    assert r["same"] is same


def test_a_different_machine_is_refused_naming_both_values():
    other = node(machine_id="9a0e6f3c2b1d4e5f8a7b6c5d4e3f2a1b", hostname="gpu-18",
                 boot_id="11111111-2222-3333-4444-555555555555")
    r = identity.compare(host(), identity.node_identity(other))
    assert not r["same"]
    assert {m["field"] for m in r["mismatches"]} == {"machine_id", "boot_id", "hostname"}
    msg = identity.refusal("gpu-17", "gpu-18", r)
    assert "host gpu-17 is not the machine behind node gpu-18" in msg
    assert "machine_id: host %s, node 9a0e6f3c2b1d4e5f8a7b6c5d4e3f2a1b" % MID in msg
    assert "hostname: host gpu-17, node gpu-18" in msg
    assert "nothing was changed" in msg
    assert "rebooted moments ago" not in msg and "hostname-override" not in msg  # not with other differences


def test_cloned_image_same_machine_id_is_told_apart_by_system_uuid():
    r = identity.compare(host(system_uuid="4c4c4544-0039-4810-8033-b4c04f5a4e99"), identity.node_identity(node()))
    assert [m["field"] for m in r["mismatches"]] == ["system_uuid"]


def test_fields_known_on_one_side_only_are_not_compared():
    r = identity.compare(host(system_uuid=None), identity.node_identity(node(boot_id="")))
    assert r["same"] and set(r["unknown"]) == {"system_uuid", "boot_id"}


def test_nothing_comparable_refuses():
    r = identity.compare({"hostname": "a"}, {"machine_id": MID}, ["machine_id", "hostname"])
    assert not r["same"] and r["compared"] == []
    assert "no identity field is known on both sides" in identity.refusal("a", "b", r)


def test_unknown_field_is_an_error():
    with pytest.raises(ValueError, match="unknown identity field"):
        identity.compare({}, {}, ["serial"])


def test_boot_id_mismatch_says_what_else_it_can_mean():
    r = identity.compare(host(boot_id="22222222-2222-3333-4444-555555555555"), identity.node_identity(node()))
    assert "wait until its kubelet reports the new boot id" in identity.refusal("gpu-17", "gpu-17", r)


def _prepare(c, name, check, **kw):
    up = NodeUpgrade(None, NV, parse_policy({}), name, target_version="550.90.07", check_mode=check,
                     core=c, policy_api=c, **kw)
    return up, up.run("prepare")


@pytest.mark.parametrize("check", [True, False])
def test_prepare_refuses_another_machine_before_any_change(check):
    c = FakeCluster([node("gpu-17"), node("gpu-18", machine_id="9a0e6f3c2b1d4e5f8a7b6c5d4e3f2a1b")])
    before = copy.deepcopy(c.nodes)
    up = NodeUpgrade(None, NV, parse_policy({}), "gpu-18", target_version="550.90.07", check_mode=check,
                     core=c, policy_api=c, host_identity=host())
    with pytest.raises(UpgradeConflict, match="host gpu-17 is not the machine behind node gpu-18"):
        up.run("prepare")
    assert c.writes == 0 and c.events == [] and c.nodes == before
    assert up.result["identity"]["mismatches"][0]["field"] == "machine_id"
    assert "is not the machine behind node gpu-18" in up.result["identity"]["message"]


def test_prepare_goes_on_for_the_same_machine_and_without_identity():
    c = FakeCluster([node("gpu-17")])
    _up, res = _prepare(c, "gpu-17", False, host_identity=host())
    assert res["state"] == sm.POD_RESTART_REQUIRED and res["identity"]["same"]
    c2 = FakeCluster([node("gpu-17", machine_id="other")])
    _up, res2 = _prepare(c2, "gpu-17", False)  # no host_identity: no check (module callers without a host)
    assert res2["state"] == sm.POD_RESTART_REQUIRED and "identity" not in res2


def test_identity_fields_narrow_the_check():
    c = FakeCluster([node("gpu-17", hostname="ip-10-0-0-17.ec2.internal")])
    with pytest.raises(UpgradeConflict):
        _prepare(c, "gpu-17", True, host_identity=host())
    _up, res = _prepare(c, "gpu-17", True, host_identity=host(), identity_fields=["machine_id", "boot_id"])
    assert res["identity"]["compared"] == ["machine_id", "boot_id"]


def test_status_reports_a_mismatch_without_failing():
    c = FakeCluster([node("gpu-17", machine_id="9a0e6f3c2b1d4e5f8a7b6c5d4e3f2a1b")])
    up = NodeUpgrade(None, NV, parse_policy({}), "gpu-17", core=c, policy_api=c, host_identity=host())
    res = up.run("status")
    assert res["identity"]["same"] is False and "machine_id: host" in res["identity"]["message"]
    assert c.writes == 0


def test_empty_identity_fields_turn_the_check_off():
    c = FakeCluster([node("gpu-17", machine_id="9a0e6f3c2b1d4e5f8a7b6c5d4e3f2a1b")])
    _up, res = _prepare(c, "gpu-17", True, host_identity=host(), identity_fields=[])
    assert "identity" not in res and res["transitions"]


def test_a_boot_id_not_reported_yet_is_waited_for(monkeypatch):
    """Only the boot id differs (the host booted moments ago): prepare waits for the kubelet's report."""
    from ansible_collections.npuops.fleet.plugins.module_utils.k8s import wait as k8s_wait

    c = FakeCluster([node("gpu-17", boot_id="old-boot-0000")])
    waited = []

    def wait_for(list_fn, predicate, timeout, heartbeat=None, **kw):
        waited.append(timeout)
        c.nodes["gpu-17"]["status"]["nodeInfo"]["bootID"] = BOOT  # the kubelet posts its status
        items = k8s_wait.list_raw(list_fn, **kw).get("items") or []
        return k8s_wait.WaitResult(predicate(items), items, 1.0)

    monkeypatch.setattr(k8s_wait, "wait_for", wait_for)
    _up, res = _prepare(c, "gpu-17", False, host_identity=host())
    assert waited[0] == 90 and res["identity"]["same"] and res["state"] == sm.POD_RESTART_REQUIRED


def test_a_boot_id_that_never_comes_is_refused():
    c = FakeCluster([node("gpu-17", boot_id="old-boot-0000")])
    with pytest.raises(UpgradeConflict, match="boot_id: host %s, node old-boot-0000 .or a host that rebooted" % BOOT):
        _prepare(c, "gpu-17", True, host_identity=host())
    assert c.writes == 0


def test_no_wait_when_more_than_the_boot_id_differs(monkeypatch):
    from ansible_collections.npuops.fleet.plugins.module_utils.k8s import wait as k8s_wait

    monkeypatch.setattr(k8s_wait, "wait_for", lambda *a, **k: pytest.fail("must not wait"))
    c = FakeCluster([node("gpu-17", boot_id="old-boot-0000", machine_id="9a0e6f3c2b1d4e5f8a7b6c5d4e3f2a1b")])
    with pytest.raises(UpgradeConflict):
        _prepare(c, "gpu-17", True, host_identity=host())
