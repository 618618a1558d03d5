"""The `cairn` command: the typer app, the options and helpers its commands share, and `main()`.

The commands live in modules by job: `running` (run, demo, resume, batch), `inspecting` (ls, show, todo,
files, diff, report, watch, say) and `managing` (rm, stop, export, import, shell, image build, doctor,
gc); importing them registers them, in the order `cairn --help` lists them. Commands that do not call a
model never import litellm, so they start fast."""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any, Optional

import typer

from orchestrator.config import default_runs_dir
from orchestrator.errors import CairnError
from orchestrator.terminal import clean, json_text

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # else importing litellm waits on the network


app = typer.Typer(help="cairn: a long-running agent whose memory is a filesystem, sandboxed in Docker.",
                  epilog="Exit codes: 0 the task was reported done (and its check passed); 1 the run failed, stopped "
                         "without a tool call, waits for an answer, was stopped by the loop guard or its check "
                         "failed; 2 a usage error; 3 a budget ran out; "
                         "4 the sandbox could not be started; 130 interrupted (resumable).",
                  no_args_is_help=False, add_completion=False, pretty_exceptions_enable=False)
image_app = typer.Typer(help="The sandbox image.", no_args_is_help=True)
app.add_typer(image_app, name="image")

RunsDir = typer.Option(None, "--runs-dir", help="Where runs live (default $CAIRN_RUNS_DIR, else ~/.cairn/runs).")
JsonOut = typer.Option(False, "--json", help="Print one JSON document on stdout and nothing else.")
RUN_HELP = "A run id, a unique prefix of one, or @last (or -) for the newest run."


def _version(value: bool) -> None:
    if value:
        typer.echo(f"cairn {version()}")
        raise typer.Exit()


def version() -> str:
    """The installed package's version (the source tree's, when run from a checkout that is not installed)."""
    from importlib.metadata import PackageNotFoundError, version as installed

    try:
        return installed("cairn-agent")
    except PackageNotFoundError:
        from orchestrator import __version__

        return __version__


@app.callback()
def _app(show_version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                           help="Print the version and exit.")) -> None:
    pass


def _plain_metavars() -> None:
    """Option help as `--step N`, `--json`, `--model TEXT`, not `--json <bool>`, `--model <str>`: typer
    labels every parameter with its Python type, flags too. Done once, for every command: a flag shows
    no label, an argument its upper-case name, an option its metavar when it has one, else a short word."""
    from typer import core

    words = {"int": "N", "float": "NUMBER", "str": "TEXT", "bool": "BOOL"}

    def plain(typed: Any) -> Any:
        def label(self: Any, ctx: Any) -> str | None:
            if self.metavar is not None and not isinstance(self, core.TyperArgument):
                return self.metavar
            if isinstance(self, core.TyperArgument) or getattr(self, "is_flag", False) or getattr(self, "count", False):
                return None  # an argument's name is its label; a flag takes no value
            shown = typed(self, ctx)  # typer's own, e.g. "<int range>", "<path>", "<none|bridge>"
            if not shown:
                return shown
            inner = shown.strip("<>").replace(" range", "")
            return words.get(inner, inner if "|" in inner else inner.upper())
        return label

    def usage_name(self: Any) -> str:
        name = self.metavar or self.name.upper()
        name = name if self.required else f"[{name}]"
        return name + ("..." if self.nargs != 1 and not self.metavar else "")

    for cls in (core.TyperOption, core.TyperArgument):
        if hasattr(cls, "display_type_rich"):  # typer 0.2x; older ones print no type labels
            cls.display_type_rich = plain(cls.display_type_rich)
    if hasattr(core.TyperArgument, "_usage_display_name"):
        core.TyperArgument._usage_display_name = usage_name
        core.TyperArgument.display_name_raw = property(lambda self: self.metavar or self.name.upper())


_plain_metavars()


def _runs_dir(value: Optional[Path]) -> Path:
    return value or default_runs_dir()


def _find(runs_dir: Optional[Path], ref: str):  # noqa: ANN202 - RunDir, imported lazily
    from orchestrator.store.runs import RunDir

    return RunDir.find(_runs_dir(runs_dir), ref)


def _print_json(doc: Any) -> None:
    sys.stdout.write(json_text(doc) + "\n")  # control characters escaped: safe on a terminal, still exact


def _status_colour(status: str) -> str | None:
    """Done green, a failure red, the rest plain (click drops colours when the stream is not a terminal)."""
    if os.environ.get("NO_COLOR"):
        return None
    return {"done": "green", "failed": "red", "looping": "red", "budget": "yellow"}.get(status)


def _stop_like_ctrl_c(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main() -> None:
    # SIGTERM (kill, docker stop, a scheduler) is Ctrl-C: a run stops between actions (the loop handles
    # it while steps run), and before or after the loop a sandbox is stopped on the way out.
    signal.signal(signal.SIGTERM, _stop_like_ctrl_c)
    try:
        app(prog_name="cairn")
    except CairnError as exc:
        # A message may quote a run's text (a question, a path): cleaned. click drops the colour when
        # stderr is not a terminal; NO_COLOR is honoured here too.
        typer.secho(f"cairn: error: {clean(exc.message)}", err=True, fg=None if os.environ.get("NO_COLOR") else "red")
        if exc.hint:
            typer.echo(f"  hint: {clean(exc.hint)}", err=True)
        _exit(exc.exit_code)
    except KeyboardInterrupt:  # Ctrl-C outside the loop (while starting or resuming): still resumable
        typer.echo("cairn: interrupted", err=True)
        _exit(130)
    except SystemExit as done:  # typer ends every command this way
        _exit(done.code)
    _exit(0)


def _exit(code: int | str | None) -> None:
    """Exit with `code`; after a command that loaded litellm, without tearing the interpreter down.

    The command's work is over by now: its run's status is written and its sandbox stopped (the commands
    do both before they return). The at-exit handlers still run and the output is flushed, but the
    interpreter's own teardown, which frees litellm's tens of thousands of objects one by one, is skipped:
    measured at 1-2 s after a one-step run (bench/startup_bench.py), longer than the run itself.
    """
    if "litellm" not in sys.modules or threading.active_count() > 1 and _busy_threads():
        sys.exit(code)
    if isinstance(code, str):  # sys.exit prints a message and exits 1
        print(code, file=sys.stderr)
        code = 1
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)


def _busy_threads() -> bool:
    """A thread that is not a daemon still works (a batch's, or one that writes a run's files): the normal
    exit waits for it. litellm's logging workers only report to callbacks, and cairn sets none."""
    return any(not t.daemon and t is not threading.main_thread() and not t.name.startswith("litellm-logging")
               for t in threading.enumerate())


# Importing the modules registers their commands on `app`; in this order, as `cairn --help` lists them.
from orchestrator.cli import running, inspecting, managing  # noqa: E402,F401
