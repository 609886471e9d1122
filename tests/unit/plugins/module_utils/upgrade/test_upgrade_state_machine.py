from __future__ import annotations

import pytest

from ansible_collections.npuops.fleet.plugins.module_utils.driver.vendor_profiles import UPGRADE_STATES
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm


def chain(start, nxt):
    out, state = [start], start
    while nxt(state):
        state = nxt(state)
        out.append(state)
    return out


def test_prepare_chain_with_drain():
    assert chain(sm.UPGRADE_REQUIRED, lambda s: sm.prepare_next(s, True)) == [
        "upgrade-required",
        "cordon-required",
        "wait-for-jobs-required",
        "pod-deletion-required",
        "drain-required",
        "pod-restart-required",
    ]


def test_prepare_chain_without_drain_skips_drain_required():
    assert "drain-required" not in chain(sm.UPGRADE_REQUIRED, lambda s: sm.prepare_next(s, False))


def test_finish_chains():
    assert chain(sm.POD_RESTART_REQUIRED, sm.finish_next) == [
        "pod-restart-required",
        "validation-required",
        "uncordon-required",
        "upgrade-done",
    ]
    assert chain(sm.REBOOT_REQUIRED, sm.finish_next)[:3] == [
        "reboot-required",
        "reboot-validation-required",
        "validation-required",
    ]


def test_states_are_the_shared_vocabulary():
    names = {v for k, v in vars(sm).items() if k.isupper() and isinstance(v, str) and k not in ("PHASES",)}
    assert names <= set(UPGRADE_STATES)


@pytest.mark.parametrize("state", ["", "upgrade-required", "upgrade-done", "upgrade-failed"])
def test_prepare_starts_from_idle_states(state):
    assert sm.phase_entry("prepare", state, at_target=False, has_bookkeeping=False).action == "start"


@pytest.mark.parametrize(
    "state", ["cordon-required", "wait-for-jobs-required", "pod-deletion-required", "drain-required"]
)
def test_prepare_resumes(state):
    assert sm.phase_entry("prepare", state, False, True).action == "resume"


def test_c16_failed_relabelled_required_is_done_only_at_target():
    assert sm.phase_entry("prepare", "upgrade-required", at_target=False, has_bookkeeping=True).action == "start"
    # Labels at the target, but an earlier attempt left the node cordoned: only a passed host check
    # puts it back into service without host work.
    assert sm.phase_entry("prepare", "upgrade-required", at_target=True, has_bookkeeping=True).action == "start"
    entry = sm.phase_entry("prepare", "upgrade-required", at_target=True, has_bookkeeping=True, host_at_target=True)
    assert entry.action == "done_without_disruption"
    assert sm.phase_entry("finish", "upgrade-required", at_target=True, has_bookkeeping=True).action == "error"
    assert sm.phase_entry("finish", "upgrade-required", at_target=False, has_bookkeeping=False).action == "error"


def test_failed_without_retry_is_an_error():
    assert sm.phase_entry("prepare", "upgrade-failed", False, True, retry_failed=False).action == "error"


def test_prepare_is_noop_after_it_completed():
    for state in ("pod-restart-required", "reboot-required", "validation-required"):
        assert sm.phase_entry("prepare", state, False, True).action == "noop"


def test_reboot_and_finish_entries():
    assert sm.phase_entry("reboot", "pod-restart-required", False, True).action == "resume"
    assert sm.phase_entry("reboot", "drain-required", False, True).action == "error"
    assert sm.phase_entry("finish", "drain-required", False, True).action == "error"
    assert sm.phase_entry("finish", "reboot-required", False, True).action == "resume"
    assert sm.phase_entry("finish", "upgrade-done", True, False).action == "noop"
    assert sm.phase_entry("status", "drain-required", False, True).action == "noop"
    assert sm.phase_entry("fail", "", False, False).action == "resume"


@pytest.mark.parametrize("state", ["", "upgrade-done", "upgrade-failed", "upgrade-required"])
def test_failed_host_check_never_takes_the_label_shortcut(state):
    # The node's labels say the target, the host check says no (a GPU lost): host work, not done.
    for bookkeeping in (False, True):
        entry = sm.phase_entry("prepare", state, at_target=True, has_bookkeeping=bookkeeping, host_at_target=False)
        assert entry.action == "start"
    assert sm.phase_entry("prepare", state, at_target=True, has_bookkeeping=False).action == "done_without_disruption"
    assert sm.phase_entry("finish", "", at_target=True, has_bookkeeping=False, host_at_target=False).action == "error"


def test_the_exported_state_names_are_the_operators_label_values():
    # Written out here, not read from states.py: the tests that import the constants rely on this pin.
    assert {
        "UPGRADE_REQUIRED": "upgrade-required",
        "CORDON_REQUIRED": "cordon-required",
        "WAIT_FOR_JOBS_REQUIRED": "wait-for-jobs-required",
        "POD_DELETION_REQUIRED": "pod-deletion-required",
        "DRAIN_REQUIRED": "drain-required",
        "POD_RESTART_REQUIRED": "pod-restart-required",
        "REBOOT_REQUIRED": "reboot-required",
        "REBOOT_VALIDATION_REQUIRED": "reboot-validation-required",
        "VALIDATION_REQUIRED": "validation-required",
        "UNCORDON_REQUIRED": "uncordon-required",
        "UPGRADE_DONE": "upgrade-done",
        "UPGRADE_FAILED": "upgrade-failed",
    } == {name: getattr(sm, name) for name in (
        "UPGRADE_REQUIRED", "CORDON_REQUIRED", "WAIT_FOR_JOBS_REQUIRED", "POD_DELETION_REQUIRED", "DRAIN_REQUIRED",
        "POD_RESTART_REQUIRED", "REBOOT_REQUIRED", "REBOOT_VALIDATION_REQUIRED", "VALIDATION_REQUIRED",
        "UNCORDON_REQUIRED", "UPGRADE_DONE", "UPGRADE_FAILED",
    )}
