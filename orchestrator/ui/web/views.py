"""The documents the page reads, each from cairn's own inspection code: the runs list (`cairn ls`), a
run's summary (its row of `ls`, and what it waits for), one step whole (`cairn show --step`), a step's
diff and the charts (the report's own), the todo (`cairn todo`)."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from orchestrator.approvals import approval_wait, subject
from orchestrator.inspect.listing import list_runs, run_row
from orchestrator.inspect.report import _chart as report_chart
from orchestrator.inspect.report_data import sessions, step_diffs, step_times
from orchestrator.inspect.report_time import time_axis
from orchestrator.inspect.timeline import step_text, walk
from orchestrator.status import Status
from orchestrator.store.liveness import run_is_live
from orchestrator.store.regular import read_regular
from orchestrator.store.runs import RunDir

SVG_STYLE = "<style>text { font: 11px system-ui, sans-serif; fill: #667085; }</style>"


def runs(runs_dir: Path, remember: dict[str, Any]) -> list[dict[str, Any]]:
    """`cairn ls --json`, newest first; `remember` keeps the rows of runs whose files did not change."""
    return list(reversed(list_runs(runs_dir, remember)))


def summary(run: RunDir) -> dict[str, Any]:
    """A run's row of `ls`, with its model, whether it is live, what it waits for, and which of the page's
    buttons apply (the CLI decides again when one is pressed)."""
    row = run_row(run)
    meta = _meta(run)
    live = run_is_live(run)
    asked, answered = approval_wait(run) if row["status"] == Status.WAITING else (None, False)
    approval = None
    if asked is not None:
        try:
            what = subject(asked.name, json.loads(asked.arguments or "{}"))
        except (ValueError, AttributeError, TypeError):
            what = asked.arguments
        approval = {"name": asked.name, "what": what, "why": asked.why, "answered": answered}
    model = ((meta.get("config") or {}).get("model") or {}).get("model") if isinstance(meta.get("config"), dict) else None
    resumable = not live and row["status"] not in (Status.RUNNING, "unreadable") and \
        (row["status"] != Status.DONE or row.get("check") == "failed")
    return {**row, "model": model, "live": live, "approval": approval,
            "can": {"stop": live, "approve": approval is not None and not answered and not live,
                    "resume": resumable and (approval is None or answered)}}


def _meta(run: RunDir) -> dict[str, Any]:
    try:
        return run.read_meta()
    except Exception:  # noqa: BLE001 - an unreadable run.json: its row says so already
        return {}


def step_whole(run: RunDir, n: int) -> str | None:
    """`cairn show RUN --step N`: the step whole, as text; None when the run has no such step."""
    walked = walk(run)
    return step_text(walked, n) if n in walked["steps"] else None


def diff(run: RunDir, n: int) -> dict[str, Any] | None:
    """What step `n` changed, bounded as the report bounds it (report_data.step_diffs)."""
    return step_diffs(run, [n]).get(n)


def todo(run: RunDir) -> str | None:
    return read_regular(run.workspace / "todo.md", max_bytes=256 * 1024)


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
    return (_document(report_chart(steps, walked["compactions"]), "no model calls yet"),
            _document(time_axis(steps, sessions(walked["events"])), "no timed steps yet"))


def _document(fragment: str, empty: str) -> str:
    """An inline SVG of the report as a document of its own (the report follows it with an HTML legend,
    which the page has in its own markup)."""
    if not fragment.startswith("<svg"):
        return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 1000 30">{SVG_STYLE}'
                f'<text x="0" y="20">({empty})</text></svg>')
    svg = fragment.split("</svg>", 1)[0] + "</svg>"
    return svg.replace("<svg ", '<svg xmlns="http://www.w3.org/2000/svg" ', 1).replace(">", ">" + SVG_STYLE, 1)
