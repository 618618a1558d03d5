"""The commands that look after runs and the machine they run on: rm, stop, export, import, shell, image
build, doctor and gc."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from orchestrator.cli.shared import RUN_HELP, RunsDir, _find, _runs_dir, app, image_app
from orchestrator.errors import CairnError, UsageError
from orchestrator.ui.terminal import clean_name


@app.command("rm")
def rm(
    run_refs: List[str] = typer.Argument(..., metavar="RUN...", help=RUN_HELP),
    runs_dir: Optional[Path] = RunsDir,
) -> None:
    """Remove runs: each one's directory and its sandbox container. A live run is refused (cairn stop it
    first); the folder of a run made with --workspace is the user's, and is left as it is."""
    import shutil

    from orchestrator.errors import SandboxError
    from orchestrator.sandbox.docker.container import container_name, remove_kept
    from orchestrator.store.liveness import RunIsLive

    runs = list({r.id: r for r in (_find(runs_dir, ref) for ref in run_refs)}.values())  # all found, or none removed
    for run_dir in runs:
        try:
            run_dir.hold()  # held until removed: no resume starts on a run being removed
        except RunIsLive:
            raise UsageError(f"run {run_dir.id} is running; stop it first", hint=f"cairn stop {run_dir.id}") from None
    try:
        from orchestrator.sandbox.docker.engine import connect

        client = connect(timeout=15)
    except SandboxError as exc:
        client = None
        typer.echo(f"cairn: {exc.message}: the runs' containers ({', '.join(container_name(r.id) for r in runs)}) "
                   "are left; `cairn gc` removes them later", err=True)
    for run_dir in runs:
        gone = remove_kept(client, run_dir.id, run_dir.root) if client is not None else None
        try:
            shutil.rmtree(run_dir.root)
        except OSError as exc:
            raise CairnError(f"cannot remove {run_dir.root}: {exc.strerror or exc}",
                             hint="files the sandbox made as another user: remove the folder as that user") from None
        typer.echo(f"removed run {run_dir.id}" + (f" and its container {gone}" if gone else ""))
        if run_dir.external_workspace:
            typer.echo(f"  its folder {run_dir.external_workspace} is yours, and was left as it is", err=True)


@app.command()
def stop(run_ref: str = typer.Argument(..., metavar="RUN", help=RUN_HELP),
         after_step: bool = typer.Option(False, "--after-step", help="Let the running call finish first (a build "
                                         "that should not be cut short), then stop."),
         runs_dir: Optional[Path] = RunsDir) -> None:
    """Stop a live run now, as Ctrl-C does: its running command is cut short (recorded so: it may have partly
    run), the run ends `interrupted`, and `cairn resume` continues it. Works for a run of a batch too."""
    from orchestrator.store.liveness import run_is_live

    run_dir = _find(runs_dir, run_ref)
    if not run_is_live(run_dir):
        status = run_dir.read_meta().get("status", "running")
        raise CairnError(f"run {run_dir.id} is not running (its status: "
                         f"{'interrupted, by a crash' if status == 'running' else status})")
    run_dir.request_stop(now=not after_step)
    when = "after its running call" if after_step else "now (its running command is cut short)"
    typer.echo(f"run {run_dir.id} stops {when}; then `cairn resume {run_dir.id}` continues it")


@app.command("export")
def export_cmd(
    run_ref: str = typer.Argument(..., metavar="RUN", help=RUN_HELP),
    output: Path = typer.Option(..., "--output", "-o", help="The archive to write (tar.gz)."),
    with_machine: bool = typer.Option(False, "--with-machine", help="Add the run's container (what the agent "
                                      "installed outside the workspace), as an image: hundreds of MB."),
    runs_dir: Optional[Path] = RunsDir,
) -> None:
    """Write a run (workspace and state) to one tar.gz, to resume it elsewhere with `cairn import`."""
    import tempfile

    from orchestrator.store.liveness import run_is_live
    from orchestrator.store.archive import export_run

    run_dir = _find(runs_dir, run_ref)
    if run_is_live(run_dir):
        raise UsageError(f"run {run_dir.id} is running; export it when it has stopped")
    with tempfile.TemporaryDirectory(prefix="cairn-machine-", dir=Path(output).resolve().parent) as tmp:
        machine_tar = None
        if with_machine:
            from orchestrator.sandbox.docker import machine
            from orchestrator.sandbox.docker.engine import connect

            machine_tar = Path(tmp) / machine.MACHINE_FILE
            typer.echo(f"saving the container of run {run_dir.id} as an image", err=True)
            machine.save(connect(), run_dir.id, machine_tar, run_dir.root)
        for note in export_run(run_dir, output, machine=machine_tar):  # 'left out: PATH (why)', 'written sparse: ...'
            typer.echo(clean_name(note), err=True)  # the paths are the agent's choice: no escapes reach the terminal
    typer.echo(str(output))


@app.command("import")
def import_cmd(
    archive: Path = typer.Argument(..., metavar="FILE", help="An archive written by `cairn export`."),
    max_size: Optional[str] = typer.Option(None, "--max-size", metavar="SIZE", help="Refuse an archive that "
                                           "unpacks to more (default 20g, and refuse an extreme expansion ratio); "
                                           "given, only this bound holds."),
    max_files: int = typer.Option(1_000_000, "--max-files", min=1, help="Refuse an archive of more files."),
    runs_dir: Optional[Path] = RunsDir,
) -> None:
    """Add a run from an archive of `cairn export` to the runs directory; then `cairn resume` it. The run
    is untrusted: its settings that reach this machine apply only with `cairn resume --trust`."""
    from orchestrator.sizes import parse_size
    from orchestrator.store.archive import import_run
    from orchestrator.store.trust import host_settings

    try:
        max_bytes = parse_size(max_size) if max_size is not None else None
    except ValueError as exc:
        raise UsageError(f"--max-size {exc}") from None
    run_dir = import_run(archive, _runs_dir(runs_dir), max_bytes=max_bytes, max_files=max_files)
    typer.echo(run_dir.id)
    settings = host_settings(run_dir.read_meta())
    if settings:
        typer.echo(f"  its settings that reach this machine are not applied until you trust it: "
                   f"{', '.join(s.name for s in settings)}", err=True)
    typer.echo(f"  resume it with: cairn resume {run_dir.id}", err=True)


@app.command("shell")
def shell_cmd(run_ref: str = typer.Argument(..., metavar="RUN", help=RUN_HELP), runs_dir: Optional[Path] = RunsDir) -> None:
    """An interactive shell in the run's kept container (the machine as the agent left it), else in a fresh
    sandbox on its workspace, made like the run's own."""
    from orchestrator.runs.settings import load_config
    from orchestrator.store.liveness import run_is_live
    from orchestrator.sandbox.docker.shell import open_shell

    run_dir = _find(runs_dir, run_ref)
    run_dir.check_workspace()
    code = open_shell(run_dir, settings=lambda: load_config(run_dir).sandbox, is_live=lambda: run_is_live(run_dir),
                      say=lambda line: typer.echo(line, err=True))
    raise typer.Exit(code)


@image_app.command("build")
def image_build(
    force: bool = typer.Option(False, "--force", help="Build even if an image with this tag exists."),
    base: Optional[str] = typer.Option(None, "--base", help="Base image (default python:3.12-slim, else a Debian root)."),
) -> None:
    """Build the sandbox image (tagged by a hash of sandbox_image/, so an unchanged image is reused)."""
    from orchestrator.sandbox.docker.image import build_image

    tag = build_image(progress=lambda line: typer.echo(line, err=True), force=force, base=base)
    typer.echo(tag)


@app.command()
def doctor(
    model: Optional[str] = typer.Option(None, "--model", "-m", help="The model to check (default: the one cairn run would use: the template's, else $CAIRN_MODEL)."),
    api_base: Optional[str] = typer.Option(None, "--api-base", help="The OpenAI-compatible endpoint cairn run would be given."),
    template: Optional[str] = typer.Option(None, "--template", help="The template cairn run would be given (its model, if it names one)."),
) -> None:
    """Check the engine, the image, free disk and the model cairn run would use, and say what to do."""
    from orchestrator.ui.doctor import run_checks
    from orchestrator.runs.settings import resolve_config

    try:  # the model exactly as `cairn run` with these options resolves it
        model_cfg, model_error = resolve_config({"model": {"model": model, "api_base": api_base}},
                                                template=template).model, None
    except UsageError as exc:
        model_cfg, model_error = None, exc
    checks = run_checks(model_cfg, model_error)
    for c in checks:
        typer.echo(f"{'ok  ' if c.ok else 'FAIL'} {c.name}: {c.detail}" + ("" if c.ok or not c.fix else f"\n     fix: {c.fix}"))
    raise typer.Exit(0 if all(c.ok for c in checks) else 1)


@app.command()
def gc(
    older_than: Optional[str] = typer.Option(None, "--older-than", metavar="DURATION",
                                             help="Only containers unused for this long: 30m, 12h, 7d, 2w."),
    runs_dir: Optional[Path] = RunsDir,
) -> None:
    """Remove the kept containers of runs that are not live (their next resume starts a fresh one). A
    container of another runs dir's run is left alone; an orphan's (its run is gone) only when idle."""
    from orchestrator.sandbox.docker.container import gc as gc_containers
    from orchestrator.sandbox.docker.engine import connect
    from orchestrator.store.liveness import RunIsLive
    from orchestrator.store.run_dir import RunDir

    seconds = _duration(older_than) if older_than is not None else None
    runs = RunDir.all(_runs_dir(runs_dir))
    live = set()
    for run in runs:  # the others' locks are held through the clean-up: none is resumed under it
        try:
            run.hold()
        except RunIsLive:
            live.add(run.id)
    removed = gc_containers(connect(), live, known_run_ids={r.id for r in runs}, older_than=seconds)
    typer.echo(f"removed {len(removed)} container(s)" + (": " + ", ".join(removed) if removed else ""))


def _duration(text: str) -> float:
    """`30s`, `30m`, `12h`, `7d`, `2w` (or `1h30m`, or a number of seconds) in seconds."""
    from orchestrator.sizes import parse_duration

    try:
        return parse_duration(text)
    except ValueError:
        raise UsageError(f"--older-than {text!r} is not a duration: give a number and a unit, e.g. 30m, 12h, "
                         "7d") from None
