# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""What stops or refuses one node's upgrade before it changes anything, beside the state machine:
the window's stop file and its ``failures/`` folder on the control node (one file per failed node),
the shared window's record in the cluster (window/shared.py: its budget counts the failures of every
process of the window), the playbook run that called us (fleet/caller.py), and the host-to-Node
identity check.
"""

from __future__ import annotations

import os
from typing import Any, Optional

from ansible_collections.npuops.fleet.plugins.module_utils.fleet import identity
from ansible_collections.npuops.fleet.plugins.module_utils.k8s import wait as k8s_wait
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import record as node_record
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.context import UpgradeContext
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.states import UpgradeConflict

# Seconds prepare waits for the kubelet to report a new boot id when that is the only difference
# between the host and its Node (the kubelet posts status every 10 s once it runs).
IDENTITY_BOOT_ID_WAIT = 90
# beside the stop file: one file per node of the run that failed (record_failure, the role's rescue)
FAILURES_DIR = "failures"


def write_stop(stop_file: Optional[str], reason: str) -> None:
    """Create the stop file with ``reason`` as its first line, unless it exists (the first stays)."""
    if not stop_file:
        return
    try:
        fd = os.open(stop_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except OSError:
        return  # there already, or its directory is gone: nothing more to stop
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(reason.replace("\n", " ")[:600] + "\n")


def record_failure(stop_file: Optional[str], node_name: str, reason: str, max_failures: int) -> None:
    """Record the node's failure in ``failures/`` beside the stop file (one file per node, so a
    node that fails twice counts once) and write the stop file when more than ``max_failures``
    nodes are recorded. Counted at the moment of the failure, after this node's own file is
    written: of two failures at once, the later count sees both. A record that cannot be written
    or counted stops the window (safe side)."""
    if not stop_file:
        return
    folder = os.path.join(os.path.dirname(stop_file), FAILURES_DIR)
    try:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, node_name), "w", encoding="utf-8") as fh:
            fh.write(reason.replace("\n", " ")[:600] + "\n")
        count = len(os.listdir(folder))
    except OSError:
        count = max_failures + 1
    if count > max_failures:
        write_stop(stop_file, reason)


def window_of(ctx: UpgradeContext) -> Any:
    """The shared window (window/run_lease.WindowLease) of the call's keepalive, else None."""
    return getattr(ctx.keepalive, "window", None)


def record_window_failure(ctx: UpgradeContext, reason: str) -> Optional[str]:
    """Count the node's failure against the shared window's budget (a renewal that carries it); None,
    or why it could not be recorded (the caller then stops its own process through the stop file)."""
    window = window_of(ctx)
    if window is None:
        return None
    try:
        window.renew(failure=(ctx.name, reason))
    except Exception as exc:  # noqa: BLE001 - a failure record never fails the failure itself
        return "the failure of %s could not be counted in maintenance window %s: %s" % (ctx.name, window.run_id, exc)
    return None


def stop_reason(ctx: UpgradeContext) -> Optional[str]:
    """Why no admission may be granted now: the playbook run that started this call is gone, the
    shared window is stopping or closed (its record, read at most every 2 s), or the stop file exists
    (its first line, or a default); else None."""
    gone = ctx.caller.gone()
    if gone:
        return gone
    window = window_of(ctx)
    if window is not None:
        why = window.stop_reason()
        if why:
            return why
    if not ctx.stop_file or not os.path.exists(ctx.stop_file):
        return None
    try:
        with open(ctx.stop_file, encoding="utf-8") as fh:
            first = fh.readline().strip()
    except OSError:
        first = ""
    return first or "the window stopped (%s exists)" % ctx.stop_file


def check_identity(ctx: UpgradeContext, refuse: bool) -> None:
    """Compare the host with the Node's machine (result ``identity``); ``refuse``: a different machine
    fails the call (UpgradeConflict: nothing is marked or undone), else the result only reports it."""
    host = ctx.host_identity
    if host is None:
        return  # no host facts given: nothing to compare
    found = identity.compare(host, identity.node_identity(ctx.node), ctx.identity_fields)
    if refuse and [m["field"] for m in found["mismatches"]] == ["boot_id"]:
        # Everything else is this machine: a host that booted moments ago, whose kubelet has not
        # reported the new boot id yet. Wait for it (bounded) instead of refusing a resumed node.
        want = identity.normalised("boot_id", host.get("boot_id"))

        def reported(items: list[dict[str, Any]]) -> bool:
            return any(identity.normalised("boot_id", node_record.boot_id(i)) == want for i in items)

        res = k8s_wait.wait_for(
            ctx.core.list_node, reported, IDENTITY_BOOT_ID_WAIT, field_selector="metadata.name=%s" % ctx.name,
            heartbeat=ctx.heartbeat,
        )
        if res.ok and res.items:
            found = identity.compare(host, identity.node_identity(res.items[0]), ctx.identity_fields)
    found["message"] = identity.refusal(host.get("host") or "(host)", ctx.name, found)
    ctx.result["identity"] = found
    if refuse and found["message"]:
        raise UpgradeConflict(found["message"])
