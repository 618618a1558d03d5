"""The report's time axis: when each step ran, and how long its model requests and tool calls took.

An inline SVG, one lane for the model and one for the tools, over the time the run was running: the
spans between a stop (or a crash) and the resume are left out and drawn as a break, so a run resumed a
day later is still readable. The times come from report_data.step_times.
"""

from __future__ import annotations

import html
from typing import Any

WIDTH, LEFT, RIGHT, TOP = 1000, 64, 16, 10
LANE, GAP, BREAK = 18, 6, 10.0  # lane height, space between lanes, width of a break between sessions
LABEL_GAP = 40.0  # the least room between two labels of the axis: "#123" and "12:34" at the axis's font size


def seconds(ms: float | None) -> str:
    """A length as people read it: 0.31 s, 4.2 s, 1 min 05 s, 2 h 03 min."""
    if ms is None:
        return "?"
    s = ms / 1000
    if s < 10:
        return f"{s:.2f} s"
    if s < 60:
        return f"{s:.1f} s"
    if s < 3600:
        return f"{int(s // 60)} min {int(s % 60):02d} s"
    return f"{int(s // 3600)} h {int(s % 3600 // 60):02d} min"


class Axis:
    """Maps a wall-clock time to its x on the axis, with the time the run was not running cut out."""

    def __init__(self, sessions: list[tuple[float, float]]) -> None:
        self.sessions = sessions or [(0.0, 1.0)]
        self.active = sum(max(b - a, 0.0) for a, b in self.sessions) or 1.0
        self.plot = WIDTH - LEFT - RIGHT - BREAK * (len(self.sessions) - 1)

    def x(self, t: float) -> float:
        x = float(LEFT)
        for i, (a, b) in enumerate(self.sessions):
            if t <= b or i == len(self.sessions) - 1:
                return x + self.plot * (min(max(t, a), b) - a) / self.active
            x += self.plot * (b - a) / self.active + BREAK
        return x

    def elapsed(self, t: float) -> float:
        """Seconds of running time before `t`."""
        return sum(max(min(t, b) - a, 0.0) for a, b in self.sessions)


def time_axis(steps: list[dict[str, Any]], sessions: list[tuple[float, float]]) -> str:
    timed = [s for s in steps if s.get("time")]
    if not timed:
        return '<p class="meta">(no timed steps)</p>'
    axis = Axis(sessions)
    height = TOP + 2 * LANE + GAP + 34
    out = [f'<svg id="time-axis" viewBox="0 0 {WIDTH} {height}" width="100%" role="img" '
           f'aria-label="when each step ran: model requests and tool calls">',
           f'<text x="{LEFT - 6}" y="{TOP + LANE - 5}" text-anchor="end">model</text>',
           f'<text x="{LEFT - 6}" y="{TOP + 2 * LANE + GAP - 5}" text-anchor="end">tools</text>']
    model_ms = tool_ms = 0.0
    for s in timed:
        t = s["time"]
        parts = []
        for m in t["model"]:
            model_ms += m["ms"]
            parts.append(_span(axis, m["start"], m["ms"], TOP, "#2f6fdf",
                               f"step {s['index']}: model request, {seconds(m['ms'])}", "model"))
        for c in t["tools"]:
            tool_ms += c["ms"] or 0.0
            parts.append(_span(axis, c["start"], c["ms"] or 0.0, TOP + LANE + GAP, "#d03b3b" if c["error"] else "#2e9b5b",
                               f"step {s['index']}: {c['name']}, {seconds(c['ms'])}", "tool"))
        out.append(f'<a href="#step-{s["index"]}">{"".join(parts)}</a>')
    for i, (_a, b) in enumerate(axis.sessions[:-1]):
        x = axis.x(b) + BREAK / 2
        gap = seconds((axis.sessions[i + 1][0] - b) * 1000)
        out.append(f'<line class="break" x1="{x:.1f}" x2="{x:.1f}" y1="{TOP - 4}" y2="{TOP + 2 * LANE + GAP + 4}" '
                   f'stroke="#667085" stroke-dasharray="2 2"><title>not running for {html.escape(gap)}</title></line>')
    base = height - 20
    for x, s in _labelled(timed, axis):
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{base - 6}" y2="{base}" stroke="#98a2b3"/>'
                   f'<text x="{x:.1f}" y="{base + 11}" text-anchor="middle">#{s["index"]}</text>'
                   f'<text x="{x:.1f}" y="{base + 22}" text-anchor="middle">{_clock(axis.elapsed(s["time"]["start"]))}'
                   f"</text>")
    out.append("</svg>")
    total = axis.active * 1000
    other = max(total - model_ms - tool_ms, 0.0)
    out.append(f'<div class="legend" id="time-totals"><span><i style="background:#2f6fdf"></i>model requests '
               f"{seconds(model_ms)}</span><span><i style=\"background:#2e9b5b\"></i>tool calls {seconds(tool_ms)}</span>"
               f"<span>other (checkpoints, start-up) {seconds(other)}</span><span>running {seconds(total)}"
               + (f", in {len(axis.sessions)} sessions" if len(axis.sessions) > 1 else "") + "</span></div>")
    return "\n".join(out)


def _labelled(timed: list[dict[str, Any]], axis: Axis) -> list[tuple[float, dict[str, Any]]]:
    """The steps whose start gets a label on the axis: none closer than LABEL_GAP to the one before (steps
    are as wide as they took, so a quick run of them would print `#3#4` over each other); the last always."""
    chosen: list[tuple[float, dict[str, Any]]] = []
    for s in timed:
        x = axis.x(s["time"]["start"])
        if not chosen or x - chosen[-1][0] >= LABEL_GAP:
            chosen.append((x, s))
    last = timed[-1]
    if chosen[-1][1] is not last:
        x = axis.x(last["time"]["start"])
        if x - chosen[-1][0] < LABEL_GAP and len(chosen) > 1:
            chosen.pop()
        if not chosen or x - chosen[-1][0] >= LABEL_GAP:
            chosen.append((x, last))
    return chosen


def _span(axis: Axis, start: float, ms: float, y: int, colour: str, title: str, kind: str) -> str:
    x0 = axis.x(start)
    width = max(axis.x(start + ms / 1000) - x0, 0.6)
    return (f'<rect class="{kind}" x="{x0:.1f}" y="{y}" width="{width:.1f}" height="{LANE}" fill="{colour}">'
            f"<title>{html.escape(title)}</title></rect>")


def _clock(s: float) -> str:
    """Running time as m:ss or h:mm:ss, for the axis labels and the step lines."""
    s = int(s)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def step_clock(axis: Axis, start: float) -> str:
    return "+" + _clock(axis.elapsed(start))
