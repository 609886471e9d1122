"""A run that loses its maintenance Lease in the middle of a node's prepare: the keepalive, passed to the
NodeUpgrade and called from its waits, raises the one LeaseLostError, and the upgrade treats it as its
conflict - no abort, no upgrade-failed mark on the Node (the node may already be another run's) - where
any other error of the same wait goes through the abort path."""

from __future__ import annotations

import pytest
from fake_k8s import FakeCluster, make_node
from upgrade_pod_fixtures import gpu_labels

from ansible_collections.npuops.fleet.plugins.module_utils.driver.vendor_profiles import resolve_profile
from ansible_collections.npuops.fleet.plugins.module_utils.k8s import wait as k8s_wait
from ansible_collections.npuops.fleet.plugins.module_utils.k8s.lease import LeaseHeldError, LeaseLostError
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.node_upgrade import (
    NodeUpgrade,
    UpgradeConflict,
    UpgradeFailed,
    lost_lease,
)
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.policy import parse_policy
from ansible_collections.npuops.fleet.plugins.module_utils.window.run_lease import LeaseKeepalive

NV = resolve_profile("nvidia")
STATE = NV["upgrade_state_label"]


class Manager:
    """The run's Lease, now another run's: every renewal is refused."""

    def __init__(self):
        self.renewals = 0

    def acquire(self, holder, ttl, renew_only=False):
        assert renew_only
        self.renewals += 1
        raise LeaseHeldError("lease kube-system/w is held by other/run-2", {})


@pytest.fixture
def waits_beat(monkeypatch):
    """wait_for as one list (the in-memory cluster has no watch), with the heartbeat first, as the real
    one calls it before each list."""

    def wait_for(list_fn, predicate, timeout, heartbeat=None, **kw):
        if heartbeat is not None:
            heartbeat()
        items = k8s_wait.list_raw(list_fn, **kw).get("items") or []
        return k8s_wait.WaitResult(predicate(items), items, 0.0)

    monkeypatch.setattr(k8s_wait, "wait_for", wait_for)


def prepare(c, keepalive):
    up = NodeUpgrade(None, NV, parse_policy({}), "n1", target_version="550.90.07", core=c, policy_api=c,
                     keepalive=keepalive)
    return up, up.run


def test_a_lost_lease_is_a_conflict_so_nothing_is_undone(waits_beat):
    c = FakeCluster([make_node("n1", gpu_labels())])
    mgr = Manager()
    up, run = prepare(c, LeaseKeepalive(mgr, "ctl/run-1", 90, clock=lambda: 1000.0).tick)
    with pytest.raises(UpgradeConflict, match="no longer ours: .*other/run-2") as err:
        run("prepare")
    assert mgr.renewals == 1
    assert lost_lease(err.value) and isinstance(err.value.__cause__, LeaseLostError)
    node = c.nodes["n1"]
    # stopped where it was: no upgrade-failed mark, still cordoned, the operand pause not undone
    assert node["metadata"]["labels"][STATE] == sm.POD_DELETION_REQUIRED
    assert node["spec"].get("unschedulable") is True
    assert not any(e["type"] == "Warning" for e in c.events)
    assert up.result["message"] == str(err.value)


def test_any_other_keepalive_error_takes_the_abort_path(waits_beat):
    c = FakeCluster([make_node("n1", gpu_labels())])

    def broken():
        raise ValueError("bad")

    _up, run = prepare(c, broken)
    with pytest.raises(UpgradeFailed) as err:
        run("prepare")
    assert not isinstance(err.value, UpgradeConflict) and not lost_lease(err.value)
    assert c.nodes["n1"]["metadata"]["labels"][STATE] == sm.UPGRADE_FAILED
    assert not c.nodes["n1"]["spec"].get("unschedulable")


def test_without_a_keepalive_nothing_is_renewed(waits_beat):
    c = FakeCluster([make_node("n1", gpu_labels())])
    _up, run = prepare(c, None)
    assert run("prepare")["state"] == sm.POD_RESTART_REQUIRED


def test_a_lost_lease_in_the_drain_previews_dry_run_is_reported_not_warned(monkeypatch):
    # status with a drain preview probes evictions (dry run) with pauses that renew the run-wide Lease
    from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import drain, refusals
    from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.states import UpgradeConflict

    def probe(core, pods, sleep=None):
        raise UpgradeConflict("the run-wide Lease was lost")

    monkeypatch.setattr(drain, "probe_evictions", probe)
    monkeypatch.setattr(drain, "multi_pdb_pods", lambda api, victims: {})

    class Ctx:
        policy_api = core = sleep = None
        warnings: list = []

    with pytest.raises(UpgradeConflict):
        refusals.structural_refusals(Ctx(), [{"metadata": {"namespace": "a", "name": "p"}}])
    assert Ctx.warnings == []
