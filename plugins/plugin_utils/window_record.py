# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How a window's per-host record reads, for the controller-side plugins that show it (the progress
callback ``npuops.fleet.window`` and the filter ``npuops.fleet.timeline_svg``).

Private to this collection; pure (no Ansible import). The record is the driver_upgrade role's
``_driver_upgrade_result`` and the summary built from it (docs/maintenance-summary.schema.json).
"""

from __future__ import annotations

import calendar
import re
from typing import Any, Optional

# The role's phases, in the order a host goes through them.
PHASES = ("preflight", "prepare", "install", "reload", "reboot", "verify", "finish")

_TIME = re.compile(r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d+)?(Z|[+-]00:?00)?$")


def epoch(value: Any) -> Optional[float]:
    """Seconds since the epoch of an RFC 3339 UTC time ("2026-12-05T05:26:07Z", fractions and a zero
    offset allowed); None when absent or not one."""
    if value is None:
        return None
    m = _TIME.match(str(value).strip())
    if not m:
        return None
    try:
        whole = calendar.timegm(tuple(int(g) for g in m.groups()[:6]) + (0, 0, 0))
    except (ValueError, OverflowError):
        return None
    return float(whole) + (float(m.group(7)) if m.group(7) else 0.0)


def number(value: Any) -> Optional[float]:
    """``value`` as a float (Ansible hands numbers over as strings too); None when it is not one."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
