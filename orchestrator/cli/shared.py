"""What the `cairn` commands share: the typer app, the options and helpers of its commands. A module of
its own so that the command modules and the package that registers them do not import each other."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Optional

import typer

from orchestrator.config import default_runs_dir
from orchestrator.ui.terminal import json_text

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
    """cairn's version (orchestrator/version.py, the one place it is written)."""
    from orchestrator.version import __version__

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
    from orchestrator.store.run_dir import RunDir

    return RunDir.find(_runs_dir(runs_dir), ref)


def _print_json(doc: Any) -> None:
    sys.stdout.write(json_text(doc) + "\n")  # control characters escaped: safe on a terminal, still exact


def _status_colour(status: str) -> str | None:
    """Done green, a failure red, the rest plain (click drops colours when the stream is not a terminal)."""
    if os.environ.get("NO_COLOR"):
        return None
    return {"done": "green", "failed": "red", "looping": "red", "budget": "yellow"}.get(status)
