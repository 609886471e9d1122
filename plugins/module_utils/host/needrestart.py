# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Note that this module_utils is PRIVATE to the collection. It can have breaking changes at any time.
# Do not use it from other collections or standalone plugins/modules!
"""needrestart's batch output (``needrestart -b``, also in unattended-upgrades logs): pure parser.

``NEEDRESTART-KSTA`` is the kernel status: 0 unknown, 1 the running kernel is the newest installed,
2 a newer kernel with the same ABI is waiting, 3 a newer kernel version is waiting. A missing value is
"unknown", never "no reboot needed".
"""

from __future__ import annotations

import re
from typing import Any

KERNEL_STATES = {"0": "unknown", "1": "current", "2": "pending", "3": "pending"}


def parse_batch(text: str) -> dict[str, Any]:
    """-> ``{"values": {KEY: value}, "kernel_current", "kernel_expected", "kernel_status",
    "kernel_reboot_pending", "services", "sessions"}``.

    ``kernel_status``: ``current``, ``pending`` or ``unknown``; ``kernel_reboot_pending`` True / False,
    None when unknown. ``services``: ``NEEDRESTART-SVC`` values (services needing a restart).
    """
    values: dict[str, str] = {}
    services: list[str] = []
    sessions: list[str] = []
    for line in (text or "").splitlines():
        m = re.match(r"^\s*NEEDRESTART-([A-Z]+):\s*(.*?)\s*$", line)
        if not m:
            continue
        key, value = m.group(1), m.group(2)
        if key == "SVC":
            services.append(value)
        elif key == "SESS":
            sessions.append(value)
        else:
            values[key] = value
    status = KERNEL_STATES.get(values.get("KSTA", ""), "unknown")
    return {
        "values": values,
        "kernel_current": values.get("KCUR"),
        "kernel_expected": values.get("KEXP"),
        "kernel_status": status,
        "kernel_reboot_pending": None if status == "unknown" else status == "pending",
        "services": services,
        "sessions": sessions,
    }
