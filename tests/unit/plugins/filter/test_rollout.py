from __future__ import annotations

import pytest

from ansible_collections.npuops.fleet.plugins.filter.rollout import lane_order
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm


def row(host, reboot=False, domain=None):
    return {"host": host, "reboot": reboot, "domain": domain}


def test_hosts_that_reboot_go_first_in_their_given_order():
    rows = [row("a"), row("b", True), row("c"), row("d", True)]
    assert lane_order(rows) == ["b", "d", "a", "c"]


def test_consecutive_hosts_come_from_different_domains():
    rows = [
        row("r1-a", domain="r1"),
        row("r1-b", domain="r1"),
        row("r1-c", domain="r1"),
        row("r2-a", domain="r2"),
        row("r2-b", domain="r2"),
        row("r3-a", domain="r3"),
    ]
    assert lane_order(rows) == ["r1-a", "r2-a", "r1-b", "r2-b", "r1-c", "r3-a"]


def test_the_biggest_domain_does_not_bunch_up_at_the_end():
    rows = [row("s1", domain="small")] + [row("b%d" % i, domain="big") for i in range(3)]
    assert lane_order(rows) == ["b0", "s1", "b1", "b2"]


def test_hosts_without_a_domain_and_repeats():
    rows = [row("x"), row("y"), row("x")]
    assert lane_order(rows) == ["x", "y"]


@pytest.mark.parametrize("bad", [[{"reboot": True}], [None], "a,b"])
def test_bad_rows_are_named(bad):
    with pytest.raises(ValueError, match="lane_order"):
        lane_order(bad)


def test_max_parallel_upgrades_reads_both_spellings():
    from ansible_collections.npuops.fleet.plugins.filter.rollout import max_parallel_upgrades

    assert [
        max_parallel_upgrades(p) for p in ({}, None, {"maxParallelUpgrades": 3}, {"max_parallel_upgrades": "0"})
    ] == [1, 1, 3, 0]
    with pytest.raises(ValueError, match="maxParallelUpgrades"):
        max_parallel_upgrades({"maxParallelUpgrades": "many"})


def test_lane_row_from_a_preflight_result():
    from ansible_collections.npuops.fleet.plugins.filter.rollout import lane_row

    res = {"host": "h1", "status": "preflight-ok", "reboot_planned": True, "failure_domain": "rack-7", "node": "n1"}
    assert lane_row(res) == {"host": "h1", "reboot": True, "domain": "rack-7", "resume": False}
    assert lane_row({"host": "h2"}) == {"host": "h2", "reboot": False, "domain": None, "resume": False}
    assert [lane_row({"host": "h", "state_at_start": s})["resume"] for s in
            (None, "", sm.UPGRADE_DONE, sm.UPGRADE_REQUIRED, sm.DRAIN_REQUIRED, sm.UPGRADE_FAILED)] == [
        False, False, False, True, True, True]


def test_nodes_already_in_an_upgrade_take_the_first_lanes():
    # one lane (maxParallelUpgrades 1): a fresh host first would wait for the slot the killed run's
    # node holds, and that node would never get a lane
    rows = [row("fresh", True, "r1"), dict(row("killed"), resume=True), row("b", domain="r2"),
            dict(row("failed", True, "r1"), resume=True)]
    assert lane_order(rows) == ["killed", "failed", "fresh", "b"]
