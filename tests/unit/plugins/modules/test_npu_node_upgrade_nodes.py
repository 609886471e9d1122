"""npu_node_upgrade with O(nodes): several nodes' status in one call, each as its own call would say,
an entry's failure kept to that entry. The cluster is a dict of literal Node objects."""

from __future__ import annotations

import json

import pytest
from ansible.module_utils.testing import patch_module_args
from kubernetes.client.rest import ApiException

from ansible_collections.npuops.fleet.plugins.module_utils.k8s import module as k8s_module
from ansible_collections.npuops.fleet.plugins.module_utils.k8s import retry as k8s_retry
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import node_upgrade
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm
from ansible_collections.npuops.fleet.plugins.modules import npu_node_upgrade as mod


def gpu_node(name, major, minor, rev, **labels):
    return {
        "metadata": {
            "name": name,
            "resourceVersion": "7",
            "labels": {
                "nvidia.com/gpu.present": "true",
                "nvidia.com/cuda.driver.major": major,
                "nvidia.com/cuda.driver.minor": minor,
                "nvidia.com/cuda.driver.rev": rev,
                **labels,
            },
            "annotations": {},
        },
        "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


class Resp:
    def __init__(self, obj):
        self.data = json.dumps(obj)


class Core:
    """read_node only: what a status read without drain preview may call; anything else fails the test."""

    def __init__(self, nodes):
        self.nodes = {n["metadata"]["name"]: n for n in nodes}
        self.reads = []

    def read_node(self, name, _preload_content=True):
        self.reads.append(name)
        if name == "broken":
            raise ApiException(status=500, reason="Internal Server Error")
        if name == "denied":
            raise ApiException(status=403, reason="Forbidden")
        if name == "odd":
            return Resp(["not", "a", "node"])
        if name not in self.nodes:
            raise ApiException(status=404, reason="Not Found")
        return Resp(self.nodes[name])


class Rest:
    def request(self, *args, **kwargs):
        raise AssertionError("no raw request expected")


class Client:
    rest_client = Rest()


@pytest.fixture
def cluster(monkeypatch):
    core = Core(
        [
            gpu_node("done", "550", "90", "07", **{"nvidia.com/gpu-driver-upgrade-state": sm.UPGRADE_DONE}),
            gpu_node("old", "535", "183", "06"),
            gpu_node(
                "skipme",
                "535",
                "183",
                "06",
                **{"nvidia.com/gpu-driver-upgrade.skip": "true", "topology.kubernetes.io/zone": "z1", "rack": "r9"},
            ),
        ]
    )
    for api in ("CoreV1Api", "PolicyV1Api", "CoordinationV1Api", "ResourceV1Api"):
        monkeypatch.setattr(node_upgrade.k8s, api, lambda _client, _core=core: _core, raising=False)
    monkeypatch.setattr(k8s_module, "get_api_client_and_source", lambda p, **kw: (Client(), {"source": "test"}))
    # one attempt per read: the retries' budget is the retry helper's, tested on its own
    once = k8s_retry.call
    monkeypatch.setattr(k8s_retry, "call", lambda fn, *a, **kw: once(fn, *a, **dict(kw, budget=0.001)))
    return core


def call(args, capsys):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            mod.main()
    return json.loads(capsys.readouterr().out)


def entry(key, node, **kw):
    return {"key": key, "node": node, "target_version": "550.90.07", **kw}


def read(capsys, nodes, **call_options):
    """One status call without drain preview for ``nodes``; the call's own node is the first entry's."""
    args = {"node": nodes[0]["node"], "phase": "status", "drain_preview": False, "nodes": nodes, **call_options}
    return call(args, capsys)


def test_each_node_answers_as_its_own_status_call_would(cluster, capsys):
    out = read(capsys, [entry("h-done", "done"), entry("h-old", "old"), entry("h-skip", "skipme")])
    assert not out.get("failed") and out["changed"] is False
    got = out["nodes"]
    assert set(got) == {"h-done", "h-old", "h-skip"}
    assert (got["h-done"]["at_target"], got["h-done"]["previous_state"]) == (True, sm.UPGRADE_DONE)
    assert got["h-done"]["driver_version"] == "550.90.07"
    assert (got["h-old"]["at_target"], got["h-old"]["previous_state"]) == (False, None)
    assert not got["h-old"].get("skipped")
    assert got["h-skip"]["skipped"] is True and "skip=true" in got["h-skip"]["skip_reason"]
    assert got["h-skip"]["failure_domain"] == "z1"
    # one GET per node, in one process
    assert cluster.reads == ["done", "old", "skipme"]
    # and the same as a single call for one of them
    single = call({"node": "skipme", "phase": "status", "drain_preview": False, "target_version": "550.90.07"}, capsys)
    for key in ("at_target", "previous_state", "skipped", "skip_reason", "driver_version", "failure_domain"):
        assert single[key] == got["h-skip"][key], key


def test_a_failed_entry_fails_alone_and_says_why(cluster, capsys):
    out = read(
        capsys,
        [
            entry("h-gone", "gone"),
            entry("h-bad", "old", policy={"maxUnavailable": "lots"}),
            entry("h-notdict", "old", policy="drain"),
            entry("h-badver", "old", target_version="latest"),
            entry("h-old", "old"),
        ],
    )
    assert not out.get("failed")
    got = out["nodes"]
    assert got["h-gone"]["failed"] is True and "node gone not found" in got["h-gone"]["msg"]
    assert got["h-bad"]["failed"] is True and "maxUnavailable" in got["h-bad"]["msg"]
    assert got["h-notdict"]["failed"] is True
    assert "policy must be a mapping (the upgradePolicy block), got str" in got["h-notdict"]["msg"]
    assert got["h-badver"]["failed"] is True and "'latest' is not a driver version" in got["h-badver"]["msg"]
    assert got["h-old"].get("failed") is None and got["h-old"]["at_target"] is False


@pytest.mark.parametrize("extra", [{"phase": "prepare"}, {"drain_preview": True}])
def test_nodes_only_for_a_status_read_without_drain_preview(cluster, capsys, extra):
    args = {"node": "old", "phase": "status", "drain_preview": False, "nodes": [entry("h", "old")], **extra}
    out = call(args, capsys)
    assert out["failed"] is True and "nodes is for phase=status with drain_preview=false" in out["msg"]
    assert cluster.reads == []


def test_an_entry_never_takes_another_nodes_options(cluster, capsys):
    # the call's own options are the first host's: an entry that leaves its profile and failure-domain
    # label unset gets the defaults (skip label nvidia.com/gpu-driver-upgrade.skip, the zone label),
    # not the call's
    renamed = {"upgrade_skip_label": "example.com/leave-alone"}
    out = read(capsys, [entry("h-skip", "skipme")], vendor_profile=renamed, failure_domain_label="rack")
    got = out["nodes"]["h-skip"]
    assert got["skipped"] is True
    assert got["failure_domain"] == "z1"


def test_after_an_api_error_no_later_node_is_read(cluster, capsys):
    out = read(capsys, [entry("h-old", "old"), entry("h-broken", "broken"), entry("h-done", "done")])
    got = out["nodes"]
    assert got["h-old"]["at_target"] is False and not got["h-old"].get("failed")
    assert got["h-broken"]["failed"] is True and "HTTP 500" in got["h-broken"]["msg"]
    assert got["h-done"]["failed"] is True and got["h-done"]["msg"].startswith("not read: ")
    assert "done" not in cluster.reads[cluster.reads.index("broken") :]


def test_a_refused_credential_also_ends_the_reading(cluster, capsys):
    got = read(capsys, [entry("h-denied", "denied"), entry("h-old", "old")])["nodes"]
    assert got["h-denied"]["failed"] is True and "HTTP 403" in got["h-denied"]["msg"]
    assert got["h-old"]["msg"].startswith("not read: ") and cluster.reads == ["denied"]


def test_an_odd_object_fails_its_entry_only_and_says_what_broke(cluster, capsys):
    got = read(capsys, [entry("h-odd", "odd"), entry("h-old", "old")])["nodes"]
    assert got["h-odd"]["failed"] is True
    assert got["h-odd"]["msg"].startswith("node odd, phase status: ") and "API error" not in got["h-odd"]["msg"]
    assert "Traceback" in got["h-odd"]["exception"]
    assert got["h-old"]["at_target"] is False and not got["h-old"].get("failed")
