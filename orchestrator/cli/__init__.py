"""The `cairn` command: `main()`, and the registration of the commands on the app (cli/shared.py).

The commands live in modules by job: `running` (run, demo, resume, approve), `batching` (batch),
`inspecting` (ls, show, todo, files, diff, report, watch, say), `managing` (rm, stop, export, import,
shell, image build, doctor, gc) and `serving` (serve); importing them registers them, in the order
`cairn --help` lists them. Commands that do not call a model never import litellm, so they start fast."""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading

import typer

from orchestrator.cli.shared import app, image_app, version  # noqa: F401 - the app, as tests and entry points name it
from orchestrator.errors import CairnError
from orchestrator.ui.terminal import clean


def _stop_like_ctrl_c(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> None:
    # SIGTERM (kill, docker stop, a scheduler) is Ctrl-C: a run stops now (the loop handles
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
from orchestrator.cli import running, batching, inspecting, managing, serving  # noqa: E402,F401 - submodules, not names of this one
