# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""The reboot phase: before the host reboots, a full drain (PDBs honoured, whatever drain.enable
says; pods that cannot go stop the reboot and the node stays cordoned), the bootID recorded so that
finish can tell the new boot, and the move to reboot-required.
"""

from __future__ import annotations

from typing import Optional

from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import pod_removal
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import record as node_record
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade import states as sm
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.context import UpgradeContext, describe
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.states import UpgradeFailed
from ansible_collections.npuops.fleet.plugins.module_utils.upgrade.transitions import Transitions


def phase_reboot(ctx: UpgradeContext, tr: Transitions, entry: sm.Entry, reason: Optional[str]) -> None:
    """Drain fully and record the bootID (entry "resume"); the message says the state."""
    if entry.action == "resume":
        # A reboot kills every pod on the host whatever drain.enable says: drain fully first
        # (PDBs honoured); pods that cannot go stop the reboot, and the node stays cordoned.
        ctx.reboot_planned = True
        try:
            why = pod_removal.drain_node(ctx, tr, after_host_work=True)
        except UpgradeFailed:
            raise
        except Exception as exc:  # noqa: BLE001
            tr.fail_after_host_work("refusing to reboot: %s" % describe(exc))
        boot = {ctx.ann(node_record.BOOT_ID_BEFORE): node_record.boot_id(ctx.node) or None}
        if ctx.state == sm.POD_RESTART_REQUIRED:
            why = "%s; %s" % (reason or "host reboot planned", why)
            tr.transition(sm.REBOOT_REQUIRED, why, annotations=boot)
        elif not ctx.check:
            # Rebooting again after a killed run: validation must wait for a boot after this one.
            ctx.node = node_record.patch_node(ctx.core, ctx.name, {"metadata": {"annotations": boot}})
    ctx.result["message"] = "node %s is in %s" % (ctx.name, ctx.state)
