"""The documents the page reads, each from cairn's own inspection code: the runs list (`cairn ls`), a
run's summary (its row of `ls`, and what it waits for), one step whole (`cairn show --step`), a step's
diff and the charts (the report's own), the todo (`cairn todo`)."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from orchestrator.agent.approvals import subject
from orchestrator.ui.inspect.listing import list_runs, row_of
from orchestrator.ui.inspect.chart import chart as report_chart
from orchestrator.store.checkpoint_log import CheckpointLog
from orchestrator.ui.inspect.report_data import sessions, step_diffs, step_times
from orchestrator.ui.inspect.report_time import time_axis
from orchestrator.ui.inspect.timeline import step_text, walk
from orchestrator.status import Status
from orchestrator.store import run_files
from orchestrator.store.run_dir import RunDir
from orchestrator.ui.web.actions import send_plan
from orchestrator.view.read import UNREADABLE, read_view

SVG_STYLE = "<style>text { font: 11px system-ui, sans-serif; fill: #667085; }</style>"


def runs(runs_dir: Path) -> list[dict[str, Any]]:
    """`cairn ls --json`, newest first."""
    return list(reversed(list_runs(runs_dir)))


def summary(run: RunDir) -> dict[str, Any]:
    """A run's row of `ls` (its view: orchestrator/view/), with its model, whether it is live, what it waits
    for, the call that runs now with its output so far, what Send will do (actions.send_plan), and which
    of the page's buttons apply (the CLI decides again when one is pressed)."""
    view = read_view(run)
    row = row_of(view)
    waiting = view.waiting if not view.live else None
    approval = None
    if waiting is not None and waiting.get("kind") == "approval":
        try:
            what = subject(waiting["name"], json.loads(waiting["arguments"] or "{}"))
        except (ValueError, AttributeError, TypeError):
            what = waiting["arguments"]
        approval = {"name": waiting["name"], "arguments": waiting["arguments"], "what": what, "why": waiting["why"],
                    "answered": waiting.get("answer") is not None}
    resumable = not view.live and view.status not in (Status.RUNNING, UNREADABLE) and \
        (view.status != Status.DONE or row.get("check") == "failed")
    answered = approval is not None and approval["answered"]
    return {**row, "model": view.model, "live": view.live, "approval": approval, "running": view.running,
            "send": send_plan(view, approval),
            "can": {"stop": view.live, "approve": approval is not None and not answered and not view.live,
                    "resume": resumable and (approval is None or answered)}}


def step_whole(run: RunDir, n: int) -> str | None:
    """`cairn show RUN --step N`: the step whole, as text; None when the run has no such step."""
    walked = walk(run)
    return step_text(walked, n) if n in walked["steps"] else None


def diff(run: RunDir, n: int) -> dict[str, Any] | None:
    """What step `n` changed, bounded as the report bounds it (report_data.step_diffs)."""
    return step_diffs(run, [n], CheckpointLog.of(run)).get(n)


def todo(run: RunDir) -> str | None:
    return run_files.read_text(run.workspace, "todo.md", max_bytes=256 * 1024)


_charts: dict[str, tuple[Any, tuple[str, str]]] = {}
_charts_lock = threading.Lock()  # the page asks for both charts at once: the second waits for the first's work


def charts(run: RunDir) -> tuple[str, str]:
    """The report's two charts, tokens and cost per step and the time axis, each one SVG document (shown
    by the page as an image: nothing in it can run); drawn again only when the event log has grown."""
    try:
        info = os.stat(run.events.path)
        stamp: Any = (info.st_size, info.st_mtime_ns)
    except OSError:
        stamp = None
    with _charts_lock:
        kept = _charts.get(str(run.root))
        if kept is not None and kept[0] == stamp:
            return kept[1]
        drawn = _draw_charts(run)
        if len(_charts) >= 64:
            _charts.clear()
        _charts[str(run.root)] = (stamp, drawn)
        return drawn


def _draw_charts(run: RunDir) -> tuple[str, str]:
    walked = walk(run)
    times = step_times(walked["events"])
    steps = [{"index": n, "usage": s["spent"], "time": times.get(n)}
             for n, s in sorted(walked["steps"].items()) if n > 0]
    spans = sessions(walked["events"])
    steps = grouped(steps, spans)
    return (_document(report_chart(steps, walked["compactions"]), "no model calls yet"),
            _document(time_axis(steps, spans), "no timed steps yet"))


CHART_STEPS = 300  # points on a chart at most: a browser draws an SVG image on the page's own thread


def grouped(steps: list[dict[str, Any]], spans: list[tuple[float, float]]) -> list[dict[str, Any]]:
    """The steps as the charts draw them: each step while there are at most CHART_STEPS, else groups of
    consecutive steps, each named by its last step, with its largest prompt and cached tokens and its
    summed cost, and on the time axis its spans joined where they are less than a pixel apart (as they
    would look drawn one by one). The report draws every step; a live run of thousands would make an
    image of megabytes that holds the page up while it is drawn."""
    if len(steps) <= CHART_STEPS:
        return steps
    size = -(-len(steps) // CHART_STEPS)
    running_s = max(sum(b - a for a, b in spans), 1.0)
    pixel = running_s * 1000 / 1000  # ms of running time under one of the axis' ~1000 pixels
    out = []
    for k in range(0, len(steps), size):
        group = steps[k:k + size]
        costs = [s["usage"]["cost_usd"] for s in group if s["usage"]["cost_usd"] is not None]
        usage = {key: max(s["usage"][key] for s in group) for key in ("prompt_tokens", "cached_tokens")}
        usage["cost_usd"] = sum(costs) if costs else None
        times = [s["time"] for s in group if s["time"]]
        time = None
        if times:
            start, end = min(t["start"] for t in times), max(t["end"] for t in times)
            time = {"start": start, "end": end, "ms": (end - start) * 1000,
                    "model": _joined([m for t in times for m in t["model"]], pixel),
                    "tools": _joined([c for t in times for c in t["tools"]], pixel)}
        out.append({"index": group[-1]["index"], "usage": usage, "time": time})
    return out


def _joined(spans: list[dict[str, Any]], pixel_ms: float) -> list[dict[str, Any]]:
    """Spans (`start` in s, `ms`) joined where the gap between them is under a pixel; an error's stays apart."""
    out: list[dict[str, Any]] = []
    for span in sorted(spans, key=lambda s: s["start"]):
        last = out[-1] if out else None
        if last is not None and not span.get("error") and not last.get("error") and \
                (span["start"] - last["start"]) * 1000 - (last["ms"] or 0.0) < pixel_ms:
            end = max(last["start"] * 1000 + (last["ms"] or 0.0), span["start"] * 1000 + (span["ms"] or 0.0))
            last["ms"] = end - last["start"] * 1000
        else:
            out.append(dict(span))
    return out


def _document(fragment: str, empty: str) -> str:
    """An inline SVG of the report as a document of its own (the report follows it with an HTML legend,
    which the page has in its own markup)."""
    if not fragment.startswith("<svg"):
        return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 1000 30">{SVG_STYLE}'
                f'<text x="0" y="20">({empty})</text></svg>')
    svg = fragment.split("</svg>", 1)[0] + "</svg>"
    return svg.replace("<svg ", '<svg xmlns="http://www.w3.org/2000/svg" ', 1).replace(">", ">" + SVG_STYLE, 1)
