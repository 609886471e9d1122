# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How a window's per-host record reads, for the controller-side plugins that show it (the progress
callback ``npuops.fleet.window`` and the filter ``npuops.fleet.timeline_svg``).

Private to this collection; pure (no Ansible import). The record is the driver_upgrade role's
``_driver_upgrade_result`` (public as ``driver_upgrade_result`` once the role ends) and the summary built
from it (docs/maintenance-summary.schema.json).
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Mapping
from typing import Any, Optional, TypedDict

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


def phase_spans(host: Any) -> list[tuple[str, float, float]]:
    """``(phase, start, end)`` (epoch seconds) of every timed phase of a host's record, by start; a
    phase without a start or an end is placed by its ``duration_s``, one with neither is left out."""
    phases = host.get("phases") if isinstance(host, Mapping) else None
    out = []
    for name, rec in (phases.items() if isinstance(phases, Mapping) else ()):
        if not isinstance(rec, Mapping):
            continue
        start, end, took = epoch(rec.get("started")), epoch(rec.get("finished")), number(rec.get("duration_s"))
        if start is None and end is not None and took is not None:
            start = end - took
        if end is None and start is not None and took is not None:
            end = start + took
        if start is not None and end is not None:
            order = PHASES.index(name) if name in PHASES else len(PHASES)
            out.append((min(start, end), order, str(name), max(start, end)))
    out.sort()
    return [(name, start, end) for start, _order, name, end in out]


class LongestHost(TypedDict):
    """What :func:`longest_host` says of one host."""

    host: str
    span_s: float
    waited_s: float
    phase: str
    phase_s: float


def longest_host(summary: Any) -> Optional[LongestHost]:
    """The host whose window took longest on the wall clock, from its preflight's start to its last
    phase's end - its waits for a lane or a batch included, which its phases' sum leaves out -, and why:
    ``{"host", "span_s", "waited_s" (the gaps between its phases), "phase", "phase_s"}`` with the
    longest phase after the preflight (the preflight runs for every host at once; it is named only for a
    host that had no other phase). None when no host has a timed phase. Ties go to the host that waited
    less, then by name."""
    best: Optional[LongestHost] = None
    for host in (summary or {}).get("hosts") or []:
        spans = phase_spans(host)
        if not spans:
            continue
        span = spans[-1][2] - spans[0][1]
        waited = sum(max(0.0, b[1] - a[2]) for a, b in zip(spans, spans[1:]))
        work = [s for s in spans if s[0] != "preflight"] or spans
        top = max(work, key=lambda s: (s[2] - s[1], -PHASES.index(s[0]) if s[0] in PHASES else 0))
        row: LongestHost = {"host": str(host.get("host")), "span_s": round(span, 1), "waited_s": round(waited, 1),
                            "phase": top[0], "phase_s": round(top[2] - top[1], 1)}
        key = (row["span_s"], -row["waited_s"], row["host"])
        if best is None or key > (best["span_s"], -best["waited_s"], best["host"]):
            best = row
    return best
