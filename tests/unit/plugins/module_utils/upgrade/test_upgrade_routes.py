"""The routes of the host work, by upgrade state (states.route_from, states.resumed_from)."""

from __future__ import annotations

import pytest

from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm

# Literal on purpose: the role's phases follow these names.
EXPECTED_ROUTES = [
    ("pod-restart-required", "install"),
    ("reboot-required", "reboot"),
    ("reboot-validation-required", "finish"),
    ("validation-required", "finish"),
    ("uncordon-required", "finish"),
]
NO_ROUTE = [
    None,
    "",
    "upgrade-required",
    "cordon-required",
    "wait-for-jobs-required",
    "pod-deletion-required",
    "drain-required",
    "upgrade-done",
    "upgrade-failed",
    "something-else",
]


@pytest.mark.parametrize("state, route", EXPECTED_ROUTES)
def test_route_from_a_state_a_route_starts_from(state, route):
    assert sm.route_from(state) == route
    assert sm.route_from(state, "none") == route


@pytest.mark.parametrize("state", NO_ROUTE)
def test_no_route_from_the_other_states(state):
    assert sm.route_from(state) is None
    assert sm.route_from(state, "none") == "none"
    assert sm.route_from(state, "install") == "install"


def test_every_state_is_covered():
    known = set(dict(EXPECTED_ROUTES)) | {s for s in NO_ROUTE if s}
    assert set(sm.IDLE_STATES[1:] + sm.IN_PROGRESS_STATES) <= known


@pytest.mark.parametrize(
    "previous",
    [
        "upgrade-required",
        "cordon-required",
        "wait-for-jobs-required",
        "pod-deletion-required",
        "drain-required",
        "pod-restart-required",
        "reboot-required",
        "reboot-validation-required",
        "validation-required",
        "uncordon-required",
    ],
)
@pytest.mark.parametrize("state", ["pod-restart-required", "reboot-required", "uncordon-required"])
def test_resumed_from_an_upgrade_under_way(previous, state):
    assert sm.resumed_from(previous, state) == previous


@pytest.mark.parametrize("previous", [None, "", "upgrade-done", "upgrade-failed"])
def test_a_fresh_start_is_no_resume(previous):
    assert sm.resumed_from(previous, "pod-restart-required") is None


@pytest.mark.parametrize("state", [None, "", "upgrade-required", "drain-required", "upgrade-done", "upgrade-failed"])
def test_no_resume_when_prepare_left_the_node_where_no_route_starts(state):
    assert sm.resumed_from("drain-required", state) is None
