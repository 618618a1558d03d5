"""The commands that read a run: ls, show, todo, files, diff, report, watch; and say, which adds a message to one."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, List, Optional

import typer

from orchestrator.cli.shared import RUN_HELP, JsonOut, RunsDir, _find, _print_json, _runs_dir, _status_colour, app
from orchestrator.errors import UsageError
from orchestrator.ui.terminal import clean

TODO_SHOWN = 8 * 2**20  # bytes of todo.md `cairn todo` prints at most: a plan, not a dump


def _print_exact_or_clean(text: str) -> None:
    """A file's content or a patch: on a terminal, cleaned of control sequences; piped, exact (not
    through click, which drops some escape sequences from output that is not a terminal)."""
    if sys.stdout.isatty():
        typer.echo(clean(text), nl=False)
    else:
        sys.stdout.write(text)


@app.command("ls")
def ls(
    status: Optional[str] = typer.Option(None, "--status", metavar="STATUS[,STATUS...]",
                                         help="Only runs in these statuses, e.g. --status waiting,interrupted."),
    newest: Optional[int] = typer.Option(None, "-n", metavar="N", min=0, help="Only the newest N runs."),
    wide: bool = typer.Option(False, "--wide", help="Add tokens, cache hits, time and container; cut nothing."),
    runs_dir: Optional[Path] = RunsDir,
    json_output: bool = JsonOut,
) -> None:
    """List runs, oldest first; a run that did not finish says why (the REASON column, `reason` in JSON)."""
    from orchestrator.ui.inspect.listing import list_runs, render_runs, select_runs
    from orchestrator.status import Status
    from orchestrator.ui.terminal import width

    statuses = [s.value for s in Status]
    wanted = [s.strip() for s in status.split(",") if s.strip()] if status is not None else None
    unknown = [s for s in wanted or [] if s not in statuses]
    if unknown:
        raise UsageError(f"--status {', '.join(unknown)}: a status is one of {', '.join(statuses)}")
    rows = select_runs(list_runs(_runs_dir(runs_dir)), wanted, newest)
    if json_output:
        _print_json(rows)
    else:
        typer.echo(render_runs(rows, width(sys.stdout), wide=wide))


@app.command()
def show(
    run_ref: str = typer.Argument(..., metavar="RUN", help=RUN_HELP),
    step: Optional[int] = typer.Option(None, "--step", help="Show one step whole: its messages, text, calls and whole results."),
    runs_dir: Optional[Path] = RunsDir,
    json_output: bool = JsonOut,
    atif: bool = typer.Option(False, "--atif", help="The run as one ATIF trajectory (Harbor's trajectory format), "
                                                    "one JSON document on stdout."),
) -> None:
    """The timeline of a run (with the messages it got, and why it ended), or one step whole; with --atif,
    the run as one ATIF trajectory (docs/atif.md)."""
    from orchestrator.ui.inspect.timeline import step_text, timeline, walk
    from orchestrator.ui.terminal import page

    run_dir = _find(runs_dir, run_ref)
    if atif:
        if step is not None:
            raise UsageError("--atif gives the whole run as one trajectory; it takes no --step")
        from orchestrator.integrations.atif import trajectory

        _print_json(_readable(run_dir, lambda: trajectory(run_dir)))
        return
    walked = _readable(run_dir, lambda: walk(run_dir))
    doc = timeline(run_dir, walked)
    if step is not None:
        matches = [s for s in doc["steps"] if s["index"] == step]
        if not matches:
            raise UsageError(f"run {doc['id']} has no step {step} (it has {len(doc['steps'])})")
        if json_output:
            _print_json(matches[0])
        else:  # the step whole, cleaned of control sequences for the terminal
            page(clean(step_text(walked, step)))
        return
    if json_output:
        _print_json(doc)
        return
    print_timeline(run_dir, doc)


def print_timeline(run_dir: Any, doc: dict[str, Any]) -> None:  # noqa: ANN401 - RunDir, imported lazily
    """`cairn show RUN` as text: the run's state now, its steps, its usage, and how it ended."""
    from orchestrator.ui.inspect.timeline import check_line, critic_line, failed_check_lines, one_line, step_lines

    u = doc["usage"]
    cost = f"${u['cost_usd']:.4f}" if u["cost_usd"] is not None else "cost unknown"
    # The run's own text (task, model, result; step_lines cleans the steps) is cleaned for the terminal.
    typer.echo(f"run {doc['id']}  [{doc['status']}]  model {clean(doc['model'])}")
    if doc.get("forked_from"):
        typer.echo(f"forked from run {doc['forked_from']['run']} at step {doc['forked_from']['step']}")
    typer.echo(f"task: {' '.join(clean(doc['task']).split())}")
    typer.echo("\n".join(step_lines(doc)) or "(no steps yet)")
    typer.echo(f"tokens: {u['prompt_tokens']:,} prompt ({u['cache_hit_ratio']:.0%} cached), "
               f"{u['completion_tokens']:,} completion; {cost}")
    if u["critic"]["requests"]:
        typer.echo(critic_line(u["critic"]))
    for note in doc["critic_notes"]:
        typer.echo(f"critic after step {note['step']}: {clean(one_line(note['text'], 120))}"
                   + (f" ({note['path']})" if note["path"] else ""))
    for c in doc["compactions"]:
        typer.echo(f"compaction at step {c['step']} ({c['kind']}): {c['tokens_before']:,} → {c['tokens_after']:,} tokens")
    for c in doc["checks"][:-1]:
        typer.echo(f"check #{c['round']} after step {c['step']}: {check_line(c, run_dir).removeprefix('check ')}"
                   + (" → sent back to the agent" if c["sent_back"] else ""))
    waiting = doc["approval_waiting"]
    if waiting:  # the call a run stopped for (orchestrator/agent/approvals.py), whole: a person decides from it
        from orchestrator.ui.approval_prompt import waiting_block

        typer.echo(f"approval of {clean(waiting['name'])} at step {waiting['step']}: "
                   + (clean(waiting["answer"]) + f"; go on with: cairn resume {doc['id']}" if waiting["answer"] else
                      f"answer with: cairn approve {doc['id']} [--deny REASON] [--always]"))
        typer.echo(waiting_block(waiting["name"], waiting["arguments"], waiting["why"]))
    if doc["result"]:
        typer.echo(f"result: {clean(doc['result'])}")
    for line in failed_check_lines(doc, run_dir):
        typer.echo(line)
    if doc["error"]:
        typer.secho(f"{doc['status']}: {clean(doc['error']['reason'])}", fg=_status_colour(doc["status"]))


def _readable(run_dir, read: Any) -> Any:  # noqa: ANN001 - RunDir, imported lazily
    """`read()` of a run whose run.json and event log can be read; else one line saying what is wrong."""
    from orchestrator.ui.inspect.listing import check_readable

    check_readable(run_dir)
    return read()


@app.command()
def todo(run_ref: str = typer.Argument(..., metavar="RUN", help=RUN_HELP), runs_dir: Optional[Path] = RunsDir) -> None:
    """The run's plan (workspace/todo.md); on a terminal, without control sequences."""
    from orchestrator.store import run_files

    run_dir = _find(runs_dir, run_ref)
    text = run_files.read_text(run_dir.workspace, "todo.md", max_bytes=TODO_SHOWN + 1)
    if text is None:
        raise UsageError(f"run {run_dir.id} has no todo.md (or it is not a regular file, or is a link)")
    cut = len(text.encode("utf-8", "surrogatepass")) > TODO_SHOWN
    if cut:
        text = text.encode("utf-8", "surrogatepass")[:TODO_SHOWN].decode("utf-8", "ignore")
    _print_exact_or_clean(text)
    if cut:
        typer.echo(f"[cairn todo shows the first {TODO_SHOWN // 2**20} MiB of todo.md; the file is longer]", err=True)


@app.command()
def files(run_ref: str = typer.Argument(..., metavar="RUN", help=RUN_HELP), runs_dir: Optional[Path] = RunsDir,
          json_output: bool = JsonOut) -> None:
    """The workspace's files (as of the last checkpoint), the step that last changed each, and their size."""
    from orchestrator.ui.inspect.changes import files as list_files, render_files

    doc = list_files(_find(runs_dir, run_ref))
    if json_output:
        _print_json(doc)
    else:
        typer.echo(render_files(doc))


@app.command()
def diff(
    run_ref: str = typer.Argument(..., metavar="RUN", help=RUN_HELP),
    paths: Optional[List[str]] = typer.Argument(None, metavar="PATH...",
                                                help="Only these files or folders, relative to the workspace "
                                                     "(after --: cairn diff RUN -- src/)."),
    step: Optional[int] = typer.Option(None, "--step", help="What step N changed (default: the whole run)."),
    stat: bool = typer.Option(False, "--stat", help="A summary: the files changed and how much (git's diffstat)."),
    everything: bool = typer.Option(False, "--all", help="Include cairn's own files (saved outputs, fetched pages)."),
    runs_dir: Optional[Path] = RunsDir,
) -> None:
    """What the run changed in its workspace, as a unified diff (from its checkpoints), without cairn's
    own files unless --all. Piped, it is the exact patch; on a terminal it is cleaned of the run's control
    sequences, then coloured, and goes through $PAGER (less) when longer than the screen."""
    from orchestrator.ui.inspect.changes import diff as run_diff
    from orchestrator.ui.terminal import colour, colour_diff, page, width

    if step is not None and step < 0:
        raise UsageError("--step is 0 or more")
    text = run_diff(_find(runs_dir, run_ref), step, paths=paths, everything=everything, stat=stat,
                    stat_width=width(sys.stdout))
    if text:
        page(text if not sys.stdout.isatty() else colour_diff(clean(text)) if colour(sys.stdout) else clean(text))
    else:
        where = f" to {', '.join(paths)}" if paths else ""
        typer.echo(f"(no changes{where}{'' if step is None else f' in step {step}'})", err=True)


REPORT_NAME = "report.html"  # in the run's directory, beside workspace/, cairn/ and state/


@app.command()
def report(
    run_ref: str = typer.Argument(..., metavar="RUN", help=RUN_HELP),
    output: Optional[Path] = typer.Option(None, "--output", "-o", metavar="FILE.html",
                                          help="The HTML file to write (default: report.html in the run's own "
                                               "directory, beside its workspace)."),
    runs_dir: Optional[Path] = RunsDir,
) -> None:
    """Write one self-contained HTML page of the run (timeline, todo, files, tokens and cost) beside the
    run, or where -o says; print its path."""
    from orchestrator.ui.inspect.report import write_report

    run_dir = _find(runs_dir, run_ref)
    out = output or run_dir.root.absolute() / REPORT_NAME
    _readable(run_dir, lambda: write_report(run_dir, out))
    typer.echo(str(out))  # where it is: the one line, for a person to open and a script to read


@app.command()
def watch(run_ref: str = typer.Argument(..., metavar="RUN", help=RUN_HELP), runs_dir: Optional[Path] = RunsDir) -> None:
    """Follow a live run: its events and workspace file changes as they happen."""
    from orchestrator.ui.inspect.watch import watch_run
    from orchestrator.store.liveness import run_is_live

    watch_run(_find(runs_dir, run_ref), lambda line: typer.echo(line), run_is_live)


@app.command()
def say(
    run_ref: str = typer.Argument(..., metavar="RUN", help=RUN_HELP),
    text: str = typer.Argument(..., help="The message; the agent sees it at its next step."),
    runs_dir: Optional[Path] = RunsDir,
) -> None:
    """Add a message to a run: a live run gets it at its next step, a stopped one when it is resumed."""
    from orchestrator.store.liveness import run_is_live
    from orchestrator.store.inbox import say as append_message

    if not text.strip():
        raise UsageError("the message is empty")
    run_dir = _find(runs_dir, run_ref)
    append_message(run_dir.state, text)
    if run_is_live(run_dir):
        typer.echo(f"run {run_dir.id} gets the message at its next step", err=True)
    else:
        typer.echo(f"run {run_dir.id} is not running; it gets the message when it is resumed "
                   f"(cairn resume {run_dir.id})", err=True)
