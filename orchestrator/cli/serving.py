"""`cairn serve`: a web page to watch and steer runs (orchestrator/ui/web/, imported only when it runs)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from orchestrator.cli.shared import RunsDir, _runs_dir, app


@app.command()
def serve(
    host: str = typer.Option("127.0.0.1", "--host", metavar="H", help="The address to listen on (default 127.0.0.1, "
                             "this machine only; anything else lets whoever reaches the port and has the token act)."),
    port: int = typer.Option(8765, "--port", metavar="P", help="The port (0: any free one)."),
    runs_dir: Optional[Path] = RunsDir,
) -> None:
    """A web page of the runs: each one live (timeline, todo, files, changes), with Message/Send, Stop,
    Approve/Deny and Resume, and a form to start one. Prints the URL to open, with its access token;
    Ctrl-C stops the server."""
    from orchestrator.ui.web.server import serve as run_server

    run_server(host, port, _runs_dir(runs_dir), say=lambda line: typer.echo(line),
               warn=lambda line: typer.secho(line, err=True, fg="red", bold=True))
