"""What `cairn batch` shows: the live table while it runs, then the summary (text or `--json`) and the exit
code."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from orchestrator.batch.rows import Row
from orchestrator.ui.terminal import clean, json_text

if TYPE_CHECKING:
    from orchestrator.batch.threads import Batch


def summary_doc(batch: Batch) -> dict[str, Any]:
    rows = [r.doc() for r in batch.rows]
    costs = [r["cost_usd"] for r in rows]
    return {
        "file": str(batch.file.resolve()),
        "batch": batch.manifest.id,
        "runs": rows,
        "totals": {
            "runs": len(rows),
            "done": sum(r.ok for r in batch.rows),  # done, and its check passed where it has one
            "checks_passed": sum(bool(r["check"] and r["check"]["passed"]) for r in rows),
            "checks_failed": sum(bool(r["check"] and r["check"]["passed"] is False) for r in rows),
            "steps": sum(r["steps"] for r in rows),
            "tokens": sum(r["tokens"] for r in rows),
            "cost_usd": None if any(c is None for c in costs) else round(sum(costs), 6),
        },
        "interrupted": batch.interrupted,
        "exit_code": exit_code(batch),
    }


def exit_code(batch: Batch) -> int:
    """0 when every run is done (and its check passed, where it has one), 130 when Ctrl-C or SIGTERM
    stopped the batch, else 1."""
    if batch.interrupted:
        return 130
    return 0 if all(r.ok for r in batch.rows) else 1


def _money(cost: float | None) -> str:
    return f"${cost:.4f}" if cost is not None else "-"


def _one_line(text: str | None, width: int) -> str:
    """A task, a status or an error on one line, cleaned of control sequences for the terminal."""
    return " ".join(clean(text).split())[:width]


def table(rows: list[Row], title: str | None = None):  # noqa: ANN201 - rich.table.Table
    from rich.table import Table

    t = Table(title=title, title_justify="left", expand=False)
    on_ray = any(r.ray for r in rows)
    for name, justify in (("#", "right"), ("id", "left"), ("task", "left"), *((("node", "left"),) if on_ray else ()),
                          ("status", "left"), ("check", "left"), ("steps", "right"), ("tokens", "right"),
                          ("cost", "right"), ("note", "left")):
        t.add_column(name, justify=justify, no_wrap=True, overflow="ellipsis",
                     min_width=22 if name == "id" else None, max_width={"task": 40, "note": 40}.get(name))
    for r in rows:
        note = r.action if r.action in ("skipped", "resumed", "left") else ""
        if r.error:
            note = (note + ": " if note else "") + _one_line(r.error, 60)
        t.add_row(str(r.line), r.id or "-", _one_line(r.task, 40), *((r.node or "-",) if on_ray else ()),
                  _one_line(r.status, 40), _check_word(r), str(r.step),
                  f"{r.prompt_tokens + r.completion_tokens:,}", _money(r.cost_usd), note)
    return t


def _check_word(row: Row) -> str:
    from orchestrator.ui.inspect.listing import check_word

    return check_word(row.check) or "-"


def render_summary(rows: list[Row]) -> str:
    """The summary as plain text, one line a run (like `cairn ls`), whatever the width of the output."""
    on_ray = any(r.ray for r in rows)
    node = lambda text: f"{text:<9} " if on_ray else ""  # noqa: E731 - the NODE column of a batch on Ray
    lines = [f"{'LINE':>4}  {'ID':<23} {node('NODE')}{'STATUS':<11} {'CHECK':<6} {'STEPS':>5} {'TOKENS':>9} {'COST':>9}  "
             f"{'ACTION':<8} TASK"]
    for r in rows:
        lines.append(f"{r.line:>4}  {r.id or '-':<23} {node(r.node or '-')}{_one_line(r.status, 40):<11} "
                     f"{_check_word(r):<6} {r.step:>5} {r.prompt_tokens + r.completion_tokens:>9,} "
                     f"{_money(r.cost_usd):>9}  {r.action:<8} {_one_line(r.task, 60)}")
        if r.error or (r.id and not r.ok and r.status != "pending"):
            why = _one_line(r.error, 200) if r.error else ("its check failed" if r.status == "done" else r.status)
            lines.append(f"{'':>6}{'error' if r.error else 'not done'}: {why} · cairn show {r.id}"
                         if r.id else f"{'':>6}error: {why}")
        lines += [f"{'':>6}note: {_one_line(n, 300)}" for n in r.notes]
    return "\n".join(lines)


def run_batch(batch_file: Path, runs_dir: Path, jobs: int | None, json_output: bool, api_base: str | None = None,
              make: Callable[..., "Batch"] | None = None) -> int:
    """The `cairn batch` command: returns its exit code. `make` builds the batch, like Batch(batch_file,
    runs_dir, jobs, on_end=..., api_base=...): batch_ray.ray_batch gives one that runs on Ray."""
    from rich.console import Console
    from rich.live import Live

    err = Console(stderr=True, soft_wrap=True)  # piped, a line stays whole
    live_table = not json_output and err.is_terminal

    def ended(row: Row) -> None:
        if not json_output and not live_table:
            check = f", check {_check_word(row)}" if row.check else ""
            node = f" on node {row.node}" if row.node else ""
            err.print(f"line {row.line}: run {row.id}{node} {row.status}{check}" + (f" ({_one_line(row.error, 300)})" if row.error else ""),
                      highlight=False, markup=False)

    from orchestrator.batch.threads import Batch

    batch = (make or Batch)(batch_file, runs_dir, jobs or 4, on_end=ended, api_base=api_base)
    title = f"batch {batch_file.name} · " + getattr(batch, "where", f"{batch.jobs} at a time")
    if live_table:
        with Live(get_renderable=lambda: table(batch.rows, title),
                  console=err, refresh_per_second=4, transient=True):
            batch.run()
    else:
        batch.run()
    doc = summary_doc(batch)
    if json_output:
        sys.stdout.write(json_text(doc) + "\n")
    else:
        t = doc["totals"]
        sys.stdout.write(render_summary(batch.rows) + "\n")
        checks = (f" · checks: {t['checks_passed']} passed, {t['checks_failed']} failed"
                  if t["checks_passed"] or t["checks_failed"] else "")
        cost = f" · {_money(t['cost_usd'])}" if t["cost_usd"] is not None else ""  # unknown: said by no figure
        sys.stdout.write(f"{t['done']}/{t['runs']} done{checks} · {t['steps']} steps · {t['tokens']:,} tokens{cost}"
                         + (" · interrupted: run the batch again to resume" if batch.interrupted else "") + "\n")
    return doc["exit_code"]
