# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter ``npuops.fleet.timeline_svg``: the maintenance window as a picture (an SVG document).

Input: the window's summary (``docs/maintenance-summary.schema.json``; ``_mw_summary`` in
``playbooks/maintenance_window.yml``) or its plan (``kind: plan``, ``plan.json``). One row per host on
a common time axis:

* the phases the role timed (``hosts[].phases.<phase>.started/finished``: preflight, prepare, install,
  reload, reboot, verify, finish) as coloured bars, with a legend;
* a gap between two phases of a host (a host that went on from the fleet preflight and waited for its
  lane or batch) hatched as "waiting". A wait for an admission slot and a drain that a
  PodDisruptionBudget holds both happen inside the ``prepare`` phase (npu_node_upgrade's prepare
  admits, cordons and drains in one call) and the summary has no time for either, so they are not
  drawn apart: ``prepare`` is one bar (said in a comment of the document too);
* the failed phase in red, the reason in a ``<title>`` (a tooltip); a failure without timed phases as
  a red mark;
* hosts already at the target and skipped hosts as a thin grey mark with their status;
* along the bottom, how many hosts were in flight (from their first phase after the preflight to
  their last one) over time.

A plan has no times per host: every host is drawn as the plan's preflight (its start to its end),
refused hosts in red with the reason.

Pure Python, no third-party package; the output depends only on the input (no clock is read), so a
summary always gives the same bytes. Text is XML-escaped and characters XML 1.0 forbids are dropped.
Plain exceptions only (see rollout.py): a summary that is not a mapping raises ValueError.
"""

from __future__ import annotations

import re
import time
from typing import Any, Mapping, Optional, Sequence

from ansible_collections.npuops.fleet.plugins.plugin_utils.window_record import PHASES, epoch, phase_spans

DOCUMENTATION = r"""
name: timeline_svg
short_description: Draw a maintenance window summary (or plan) as an SVG timeline
description:
  - One row per host on a common time axis (ticks in seconds or minutes); the role's phases as coloured
    bars with a legend; gaps between phases (waiting for a lane or batch) hatched; the failed phase in
    red with the reason as a tooltip; hosts at the target or skipped as a thin grey mark with their
    status; the number of hosts in flight as a strip along the bottom.
  - Waits for an admission slot and drains held by a PodDisruptionBudget happen inside the C(prepare)
    phase, which the summary times as a whole; they are part of the C(prepare) bar.
  - A plan (C(kind=plan)) has no per-host times; each host is drawn as the plan's preflight.
  - Deterministic (no current time is read); all text is XML-escaped.
options:
  _input:
    description:
      - The summary of playbook C(npuops.fleet.maintenance_window) (C(docs/maintenance-summary.schema.json)),
        or its plan.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Write the window's timeline next to its summary
  ansible.builtin.copy:
    dest: "{{ _mw_result_dir }}/timeline.svg"
    content: "{{ _mw_summary | npuops.fleet.timeline_svg }}"
    mode: "0644"

- name: Draw a summary read back from disk
  ansible.builtin.copy:
    dest: /tmp/timeline.svg
    content: "{{ lookup('ansible.builtin.file', 'reports/latest.json') | from_json | npuops.fleet.timeline_svg }}"
    mode: "0644"
"""

RETURN = r"""
_value:
  description: An SVG 1.1 document (UTF-8 text, starting with C(<?xml)).
  type: str
"""

PHASE_COLOURS = {
    "preflight": "#9ecae1",
    "prepare": "#fdae6b",
    "install": "#3182bd",
    "reload": "#74c476",
    "reboot": "#9e9ac8",
    "verify": "#31a354",
    "finish": "#e6ab02",
}
PHASE_LEGEND = {
    "prepare": "prepare (admission, cordon, drain)",
}
UNKNOWN_PHASE_COLOUR = "#969696"
FAILED_COLOUR = "#d62728"
MARK_COLOUR = "#bdbdbd"
WAIT_HATCH = "url(#npuops-wait)"
INFLIGHT_COLOUR = "#6a51a3"
QUIET_STATUSES = ("already-at-target", "skipped")

WIDTH = 1000
LABEL_W = 190
LABEL_CHARS = 26  # a longer host name is cut in its label (data-host and the tooltip keep it whole)
RIGHT_W = 150
CHART_W = WIDTH - LABEL_W - RIGHT_W
TOP = 62
ROW_H = 22
BAR_H = 14
MARK_H = 4
STRIP_H = 36
TICK_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)

_XML_FORBIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _text(value: Any) -> str:
    """Escaped for element text and attribute values alike."""
    s = _XML_FORBIDDEN.sub("", "" if value is None else str(value))
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def _comment(value: str) -> str:
    # "--" may not appear inside an XML comment
    return _XML_FORBIDDEN.sub("", value).replace("--", "- -")


def _f(x: float) -> str:
    s = "%.1f" % x
    return "0.0" if s == "-0.0" else s


def _span(seconds: float) -> str:
    """A duration for tooltips: 12.3 s, 4m05s, 1h02m."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return "%.1f s" % seconds
    whole = int(round(seconds))
    if whole < 3600:
        return "%dm%02ds" % (whole // 60, whole % 60)
    return "%dh%02dm" % (whole // 3600, (whole % 3600) // 60)


def _tick_label(offset: float, step: int) -> str:
    off = int(round(offset))
    if step < 60:
        return "%ds" % off if off < 60 else "%dm%02ds" % (off // 60, off % 60)
    if step < 3600:
        return "%dm" % (off // 60)
    return "%dh%02dm" % (off // 3600, (off % 3600) // 60) if off % 3600 else "%dh" % (off // 3600)


def _clock(ts: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(ts))


def _phase_rows(host: Mapping[str, Any]) -> list[tuple[str, float, float, Mapping[str, Any]]]:
    """(phase, start, end, record) for every timed phase of a host, by start (then the role's order)."""
    return [(name, start, end, host["phases"][name]) for name, start, end in phase_spans(host)]


class _Scale:
    def __init__(self, t0: float, t1: float) -> None:
        self.t0 = t0
        self.t1 = t1 if t1 > t0 else t0 + 1.0

    def x(self, ts: float) -> float:
        ts = min(max(ts, self.t0), self.t1)
        return LABEL_W + (ts - self.t0) / (self.t1 - self.t0) * CHART_W


def _bounds(doc: Mapping[str, Any], hosts: Sequence[Mapping[str, Any]]) -> tuple[float, float]:
    times = []
    for key in ("started", "finished"):
        t = epoch(doc.get(key))
        if t is not None:
            times.append(t)
    for h in hosts:
        for key in ("started", "finished"):
            t = epoch(h.get(key))
            if t is not None:
                times.append(t)
        for _n, start, end, _r in _phase_rows(h):
            times.extend((start, end))
    if not times:
        return 0.0, 1.0
    return min(times), max(times)


def _ticks(scale: _Scale, y_top: float, y_bottom: float) -> list[str]:
    span = scale.t1 - scale.t0
    step = next((s for s in TICK_STEPS if span / s <= 10), TICK_STEPS[-1])
    out = ['<g class="axis" font-size="10" fill="#555">']
    n = 0
    while n * step <= span + 1e-9:
        x = scale.x(scale.t0 + n * step)
        out.append('<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#e0e0e0"/>' % (_f(x), _f(y_top), _f(x), _f(y_bottom)))
        out.append(
            '<text class="tick" x="%s" y="%s" text-anchor="middle">%s</text>'
            % (_f(x), _f(y_top - 4), _text(_tick_label(n * step, step)))
        )
        n += 1
    out.append("</g>")
    return out


def _bar(cls: str, x0: float, x1: float, y: float, h: float, fill: str, title: str, extra: str = "") -> str:
    w = max(x1 - x0, 1.0)
    return '<rect class="%s"%s x="%s" y="%s" width="%s" height="%s" fill="%s"><title>%s</title></rect>' % (
        cls,
        extra,
        _f(x0),
        _f(y),
        _f(w),
        _f(h),
        fill,
        _text(title),
    )


def _host_row(i: int, host: Mapping[str, Any], scale: _Scale, plan: Optional[tuple[float, float]]) -> list[str]:
    name = str(host.get("host") or "?")
    status = str(host.get("status") or "?")
    reason = host.get("reason")
    failed = status in ("failed", "refused")
    y = TOP + i * ROW_H
    bar_y = y + (ROW_H - BAR_H) / 2
    out = [
        '<g class="host" id="host-%d" data-host="%s" data-status="%s">' % (i + 1, _text(name), _text(status)),
        '<text class="label" x="%d" y="%s" text-anchor="end"%s>%s<title>%s</title></text>'
        % (
            LABEL_W - 8,
            _f(bar_y + BAR_H - 3),
            ' fill="%s"' % FAILED_COLOUR if failed else "",
            _text(name if len(name) <= LABEL_CHARS else name[: LABEL_CHARS - 1] + "\u2026"),
            _text("%s: %s%s" % (name, status, (" - %s" % reason) if reason else "")),
        ),
    ]
    start = epoch(host.get("started"))
    end = epoch(host.get("finished"))
    rows = _phase_rows(host) if plan is None else []
    if plan is not None:
        start, end = plan
    end_x = scale.x(end if end is not None else (start if start is not None else scale.t0))
    if status in QUIET_STATUSES:
        s = start if start is not None else (end if end is not None else scale.t0)
        e = end if end is not None else s
        x0, x1 = scale.x(s), scale.x(e)
        out.append(
            _bar(
                "mark",
                x0,
                x1,
                y + (ROW_H - MARK_H) / 2,
                MARK_H,
                MARK_COLOUR,
                "%s: %s%s" % (name, status, (" - %s" % reason) if reason else ""),
            )
        )
        end_x = max(x0 + 1.0, x1)
    elif plan is not None:
        if start is not None and end is not None:
            fill = FAILED_COLOUR if failed else PHASE_COLOURS["preflight"]
            cls = "phase failed" if failed else "phase"
            title = "preflight %s%s" % (_span(end - start), (": %s" % reason) if reason else "")
            out.append(_bar(cls, scale.x(start), scale.x(end), bar_y, BAR_H, fill, title, ' data-phase="preflight"'))
    else:
        failed_phase = host.get("failed_phase")
        prev_end = None
        drew_failure = False
        for phase, p_start, p_end, _rec in rows:
            if prev_end is not None and p_start - prev_end >= 1.0:
                out.append(
                    _bar(
                        "wait",
                        scale.x(prev_end),
                        scale.x(p_start),
                        bar_y,
                        BAR_H,
                        WAIT_HATCH,
                        "waiting %s (for a lane or batch; %s - %s)"
                        % (_span(p_start - prev_end), _clock(prev_end), _clock(p_start)),
                    )
                )
            red = failed and phase == failed_phase
            drew_failure = drew_failure or red
            fill = FAILED_COLOUR if red else PHASE_COLOURS.get(phase, UNKNOWN_PHASE_COLOUR)
            title = "%s %s (%s - %s)" % (phase, _span(p_end - p_start), _clock(p_start), _clock(p_end))
            if red:
                title = "%s failed after %s: %s" % (phase, _span(p_end - p_start), reason or "no reason recorded")
            out.append(
                _bar(
                    "phase failed" if red else "phase",
                    scale.x(p_start),
                    scale.x(p_end),
                    bar_y,
                    BAR_H,
                    fill,
                    title,
                    ' data-phase="%s"' % _text(phase),
                )
            )
            prev_end = p_end if prev_end is None else max(prev_end, p_end)
        if failed and not drew_failure:
            at = end if end is not None else (prev_end if prev_end is not None else (start or scale.t0))
            x = scale.x(at)
            out.append(
                _bar(
                    "failure",
                    x - 3,
                    x + 3,
                    bar_y - 1,
                    BAR_H + 2,
                    FAILED_COLOUR,
                    "failed%s: %s"
                    % ((" in %s" % failed_phase) if failed_phase else "", reason or "no reason recorded"),
                )
            )
            end_x = max(end_x, x + 3)
        if rows:
            end_x = max(end_x, scale.x(max(r[2] for r in rows)))
    label = status
    if failed and host.get("failed_phase"):
        label = "%s (%s)" % (status, host.get("failed_phase"))
    out.append(
        '<text class="status" x="%s" y="%s" font-size="10"%s>%s<title>%s</title></text>'
        % (
            _f(end_x + 4),
            _f(bar_y + BAR_H - 3),
            ' fill="%s"' % FAILED_COLOUR if failed else ' fill="#555"',
            _text(label),
            _text(reason or status),
        )
    )
    out.append("</g>")
    return out


def _in_flight(hosts: Sequence[Mapping[str, Any]]) -> list[tuple[float, float, int]]:
    """(start, end, count) segments: a host is in flight from its first timed phase after the preflight
    to the end of its last one (hosts at the target and skipped hosts never are)."""
    events: list[tuple[float, int]] = []
    for h in hosts:
        if str(h.get("status") or "") in QUIET_STATUSES:
            continue
        rows = [r for r in _phase_rows(h) if r[0] != "preflight"]
        if not rows:
            continue
        start = min(r[1] for r in rows)
        end = max(r[2] for r in rows)
        if end > start:
            events.extend(((start, 1), (end, -1)))
    events.sort()
    out: list[tuple[float, float, int]] = []
    count = 0
    for n, (t, delta) in enumerate(events):
        count += delta
        nxt = events[n + 1][0] if n + 1 < len(events) else t
        if nxt > t and count > 0:
            if out and out[-1][1] == t and out[-1][2] == count:
                out[-1] = (out[-1][0], nxt, count)
            else:
                out.append((t, nxt, count))
    return out


def timeline_svg(summary: Any) -> str:
    if summary is None:
        summary = {}
    if not isinstance(summary, Mapping):
        raise ValueError("timeline_svg: expected the window's summary (a mapping), got %s" % type(summary).__name__)
    raw_hosts = summary.get("hosts") or []
    hosts = [h for h in raw_hosts if isinstance(h, Mapping)] if isinstance(raw_hosts, (list, tuple)) else []
    is_plan = str(summary.get("kind") or "") == "plan"
    t0, t1 = _bounds(summary, hosts)
    scale = _Scale(t0, t1)
    plan_span = None
    if is_plan:
        ps, pe = epoch(summary.get("started")), epoch(summary.get("finished"))
        plan_span = (ps if ps is not None else scale.t0, pe if pe is not None else scale.t1)

    rows_bottom = TOP + max(len(hosts), 1) * ROW_H
    strip_top = rows_bottom + 14
    legend_y = strip_top + STRIP_H + 28
    height = legend_y + 20
    run_id = summary.get("run_id") or "?"
    title = "Maintenance window %s %s" % ("plan" if is_plan else "", run_id)
    title = " ".join(title.split())
    sub = []
    if summary.get("started") or summary.get("finished"):
        sub.append("%s - %s" % (summary.get("started") or "?", summary.get("finished") or "?"))
    if summary.get("result"):
        sub.append("result %s" % summary.get("result"))
    if is_plan and "would_start" in summary:
        sub.append("the window would start" if summary.get("would_start") else "the window would not start")
    if summary.get("rollout"):
        sub.append("rollout %s, width %s" % (summary.get("rollout"), summary.get("batch_size", "?")))
    sub.append("%d host(s)" % len(hosts))

    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        '<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="%d" height="%d" viewBox="0 0 %d %d" '
        'font-family="sans-serif" font-size="12">' % (WIDTH, height, WIDTH, height),
        "<title>%s</title>" % _text(title),
        "<!-- %s -->"
        % _comment(
            "npuops.fleet.timeline_svg. Waits for an admission slot and drains held by a PodDisruptionBudget both "
            "happen inside the prepare phase (npu_node_upgrade prepare admits, cordons and drains in one call) and "
            "the summary times only the whole phase, so they are not drawn apart: prepare is one bar. Gaps between "
            "two phases of a host (waiting for its lane or batch) are hatched."
            + (" A plan has no per-host times: each host is drawn as the plan's preflight." if is_plan else "")
        ),
        "<defs>",
        '<pattern id="npuops-wait" patternUnits="userSpaceOnUse" width="6" height="6" patternTransform="rotate(45)">'
        '<rect width="6" height="6" fill="#f7f7f7"/><line x1="0" y1="0" x2="0" y2="6" stroke="#969696" '
        'stroke-width="2"/></pattern>',
        "</defs>",
        '<rect class="background" x="0" y="0" width="%d" height="%d" fill="#ffffff"/>' % (WIDTH, height),
        '<text class="title" x="8" y="18" font-size="14" font-weight="bold">%s</text>' % _text(title),
        '<text class="subtitle" x="8" y="34" font-size="11" fill="#555">%s</text>' % _text("; ".join(sub)),
    ]
    out.extend(_ticks(scale, TOP - 8, rows_bottom))
    if not hosts:
        out.append('<text class="empty" x="%d" y="%s" fill="#555">no hosts</text>' % (LABEL_W, _f(TOP + ROW_H / 2 + 4)))
    for i, h in enumerate(hosts):
        out.extend(_host_row(i, h, scale, plan_span))

    segments = [] if is_plan else _in_flight(hosts)
    peak = max((c for _s, _e, c in segments), default=0)
    out.append('<g class="inflight" data-max="%d">' % peak)
    out.append(
        '<text x="%d" y="%s" text-anchor="end" font-size="10" fill="#555">in flight (max %d)</text>'
        % (LABEL_W - 8, _f(strip_top + STRIP_H - 2), peak)
    )
    out.append(
        '<line x1="%d" y1="%s" x2="%d" y2="%s" stroke="#999"/>'
        % (LABEL_W, _f(strip_top + STRIP_H), LABEL_W + CHART_W, _f(strip_top + STRIP_H))
    )
    for s, e, c in segments:
        bar_h = STRIP_H * c / peak
        out.append(
            _bar(
                "inflight-step",
                scale.x(s),
                scale.x(e),
                strip_top + STRIP_H - bar_h,
                bar_h,
                INFLIGHT_COLOUR,
                "%d in flight (%s - %s)" % (c, _clock(s), _clock(e)),
                ' data-count="%d"' % c,
            )
        )
    out.append("</g>")

    out.append('<g class="legend" font-size="10">')
    x = 8
    items = [(PHASE_LEGEND.get(p, p), PHASE_COLOURS[p], "phase") for p in PHASES]
    items += [
        ("waiting", WAIT_HATCH, "wait"),
        ("failed", FAILED_COLOUR, "failed"),
        ("at target / skipped", MARK_COLOUR, "mark"),
    ]
    for label, fill, kind in items:
        out.append(
            '<rect class="swatch" data-kind="%s" x="%d" y="%s" width="12" height="10" fill="%s"/>'
            % (kind, x, _f(legend_y - 9), fill)
        )
        out.append('<text x="%d" y="%s">%s</text>' % (x + 16, _f(legend_y), _text(label)))
        x += 16 + 6 * len(label) + 14
    out.append("</g>")
    out.append("</svg>")
    return "\n".join(out) + "\n"


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"timeline_svg": timeline_svg}
