"""The `cairn` command. Commands that do not call a model never import litellm, so they start fast."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Optional

import typer
from pydantic import ValidationError

from orchestrator.config import RunConfig, default_runs_dir
from orchestrator.errors import CairnError, UsageError

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # else importing litellm waits on the network

app = typer.Typer(help="cairn: a long-running agent whose memory is a filesystem, sandboxed in Docker.",
                  epilog="Exit codes: 0 the task was reported done; 1 the run failed, stopped without a tool call, "
                         "waits for an answer or was stopped by the loop guard; 2 a usage error; 3 a budget ran out; "
                         "4 the sandbox could not be started; 130 interrupted (resumable).",
                  no_args_is_help=False, add_completion=False, pretty_exceptions_enable=False)
image_app = typer.Typer(help="The sandbox image.", no_args_is_help=True)
app.add_typer(image_app, name="image")

RunsDir = typer.Option(None, "--runs-dir", help="Where runs live (default $CAIRN_RUNS_DIR, else ~/.cairn/runs).")
JsonOut = typer.Option(False, "--json", help="Print one JSON document on stdout and nothing else.")


def _runs_dir(value: Optional[Path]) -> Path:
    return value or default_runs_dir()


def _find(runs_dir: Optional[Path], ref: str):  # noqa: ANN202 - RunDir, imported lazily
    from orchestrator.store.runs import RunDir

    return RunDir.find(_runs_dir(runs_dir), ref)


def _print_json(doc: Any) -> None:
    sys.stdout.write(json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


@app.command()
def run(
    task: Optional[str] = typer.Argument(None, help="The task. Without one, an interactive session."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="A litellm model string, or scripted:PATH (default: the template's, else $CAIRN_MODEL)."),
    api_base: Optional[str] = typer.Option(None, "--api-base", help="An OpenAI-compatible endpoint (vLLM, llama.cpp, Ollama)."),
    runs_dir: Optional[Path] = RunsDir,
    template: Optional[str] = typer.Option(None, "--template", help="Starter workspace from workspace_templates/ (default, coding, research); default: default."),
    workspace: Optional[Path] = typer.Option(None, "--workspace", help="Work on this existing folder in place (mounted, not copied)."),
    from_git: Optional[str] = typer.Option(None, "--from-git", metavar="URL", help="Start from a clone of this git repository."),
    ref: Optional[str] = typer.Option(None, "--ref", help="With --from-git: the branch, tag or commit to check out."),
    max_steps: Optional[int] = typer.Option(None, "--max-steps", min=1, help="Model calls at most (default 100)."),
    max_cost: Optional[float] = typer.Option(None, "--max-cost", min=0, help="USD at most."),
    max_tokens: Optional[int] = typer.Option(None, "--max-tokens", min=1, help="Prompt plus completion tokens at most."),
    network: Optional[str] = typer.Option(None, "--network", help="none (the default, unless the template says otherwise) or bridge."),
    image: Optional[str] = typer.Option(None, "--image", help="Sandbox image (default: the one cairn builds)."),
    sandbox_user: Optional[str] = typer.Option(None, "--sandbox-user", metavar="UID:GID", help="Run the agent as this uid:gid (default: root; 0 only without --lockdown)."),
    lockdown: bool = typer.Option(False, "--lockdown", help="The cage for untrusted work: a non-root agent, read-only root filesystem, noexec /tmp, no capabilities."),
    runtime: Optional[str] = typer.Option(None, "--runtime", metavar="NAME", help="An OCI runtime the Docker engine knows, e.g. runsc (gVisor)."),
    config: Optional[Path] = typer.Option(None, "--config", metavar="PATH", help="An agent.json (tiny-agents schema: model, MCP servers), or a folder with one and an optional PROMPT.md."),
    json_output: bool = JsonOut,
) -> None:
    """Start a run. Settings: built-in defaults < the template's cairn.json < the options given here."""
    from orchestrator.llm.scripted import check_model
    from orchestrator.runner import create_run, resolve_config

    if workspace is not None and template is not None:
        raise UsageError("--template and --workspace do not go together: cairn adds no files to your folder")
    if workspace is not None and from_git is not None:
        raise UsageError("--workspace and --from-git do not go together")
    if ref is not None and from_git is None:
        raise UsageError("--ref goes with --from-git URL")
    try:
        cfg = resolve_config({
            "model": {"model": model, "api_base": api_base},
            "limits": {"max_steps": max_steps, "max_cost": max_cost, "max_tokens": max_tokens},
            "sandbox": {"network": network, "image": image, "user": sandbox_user, "runtime": runtime,
                        "lockdown": True if lockdown else None},
        }, template=template, model_elsewhere=config is not None)
    except ValidationError as exc:
        raise UsageError(_one_line(exc)) from None
    if config is not None:  # the agent folder: its model unless --model, its prompt, its MCP servers
        from orchestrator.agent_folder import load_config as load_agent_config

        cfg = load_agent_config(config, cfg, cli_model=model, cli_api_base=api_base)
    check_model(cfg.model.model)

    interactive = task is None
    if interactive:
        task = _ask("task> ")
    run_dir = create_run(_runs_dir(runs_dir), task, cfg, workspace=workspace, from_git=from_git, ref=ref)
    _drive(run_dir, cfg, json_output, interactive=interactive)


@app.command()
def demo(runs_dir: Optional[Path] = RunsDir) -> None:
    """Run the built-in scripted demo offline (no model service needed), then show its timeline."""
    from orchestrator.llm.scripted import load_script
    from orchestrator.runner import create_run

    cfg = RunConfig.model_validate({"model": {"model": "scripted:demo"}})
    run_dir = create_run(_runs_dir(runs_dir), load_script("demo")["task"], cfg)
    try:
        _drive(run_dir, cfg, json_output=False)
    finally:
        typer.echo("")
        show(run_dir.id, step=None, runs_dir=runs_dir, json_output=False)


@app.command()
def resume(
    run_ref: str = typer.Argument(..., metavar="RUN", help="A run id or a unique prefix of one."),
    message: Optional[str] = typer.Option(None, "--message", help="A message to the agent (answers ask_user)."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Continue with another model."),
    max_steps: Optional[int] = typer.Option(None, "--max-steps", min=1, help="Raise the step limit."),
    max_cost: Optional[float] = typer.Option(None, "--max-cost", min=0, help="Raise the cost limit (USD)."),
    from_step: Optional[int] = typer.Option(None, "--from-step", min=0,
                                            help="Fork a new run from the end of step N, and continue that."),
    runs_dir: Optional[Path] = RunsDir,
    json_output: bool = JsonOut,
) -> None:
    """Continue a stopped, interrupted or crashed run (or, with --from-step, a fork of it)."""
    from orchestrator.runner import load_config, run_is_live

    run_dir = _find(runs_dir, run_ref)
    if from_step is not None:
        run_dir = _fork(run_dir, from_step, message, runs_dir, json_output)
    if run_is_live(run_dir):
        raise UsageError(f"run {run_dir.id} is running in another process")
    status = run_dir.read_meta().get("status")
    if not message and _has_said(run_dir):
        pass  # a `cairn say` message is waiting to be delivered: that is the instruction
    elif status == "waiting" and not message:
        raise UsageError(f"run {run_dir.id} waits for an answer: {run_dir.read_meta().get('result')}",
                         hint=f'cairn resume {run_dir.id} --message "ANSWER"')
    elif status == "done" and not message:
        raise UsageError(f"run {run_dir.id} is done; to go on, give it a new instruction with --message")
    cfg = load_config(run_dir)
    if model:
        from orchestrator.llm.scripted import check_model

        check_model(model)  # before run.json takes it
        cfg.model.model = model
    if max_steps:
        cfg.limits.max_steps = max_steps
    if max_cost is not None:
        cfg.limits.max_cost = max_cost
    run_dir.update_meta(config=cfg.model_dump(mode="json"))
    _drive(run_dir, cfg, json_output, message=message, resumed=True)


def _fork(source, step: int, message: Optional[str], runs_dir: Optional[Path], json_output: bool):  # noqa: ANN001,ANN202
    """`resume --from-step`: the new run's id goes to stdout (to stderr with --json)."""
    from orchestrator.store.fork import fork_run, plan_fork

    plan = plan_fork(source, step)
    if plan.status == "waiting" and not message:
        raise UsageError(f"at step {step}, run {source.id} waits for an answer: {plan.result}",
                         hint=f'cairn resume {source.id} --from-step {step} --message "ANSWER"')
    fork = fork_run(plan, _runs_dir(runs_dir))
    typer.echo(fork.id, err=json_output)
    return fork


def _has_said(run_dir) -> bool:  # noqa: ANN001 - RunDir, imported lazily
    from orchestrator.store.inbox import delivered_offset, pending

    return bool(pending(run_dir.state, delivered_offset(run_dir.events.read()[0])))


def _drive(run_dir, cfg: RunConfig, json_output: bool, message: str | None = None,  # noqa: ANN001
           interactive: bool = False, resumed: bool = False) -> None:
    from orchestrator.display import make_display
    from orchestrator.inspect.timeline import timeline
    from orchestrator.runner import Session, exit_code, mark_failed

    display = make_display(json_output)
    session = None
    try:
        with Session(run_dir, cfg, display, resumed=resumed) as session:
            status = session.go(message, source="answer" if resumed and message else "user")
            while interactive and status != "interrupted":
                reply = _ask("you> ", allow_eof=True)
                if reply is None:
                    break
                status = session.go(reply)
            error = session.agent.error
    except CairnError as exc:
        # A new run that never started says why in its log (the agent's own failures end inside the
        # loop); a resume that never started leaves the run as it was.
        if session is None and not resumed:
            mark_failed(run_dir, exc.message)
        raise
    finally:
        display.close()
    if json_output:
        _print_json(timeline(run_dir))
    else:
        doc = timeline(run_dir)
        typer.echo(f"run {run_dir.id}: {status}" + (f": {doc['result']}" if doc["result"] else ""), err=True)
        typer.echo(f"  inspect it with: cairn show {run_dir.id}", err=True)
    raise typer.Exit(exit_code(status, error))


def _ask(prompt: str, allow_eof: bool = False) -> str | None:
    if not sys.stdin.isatty() and not allow_eof:
        raise UsageError("no task given and no terminal to ask for one: cairn run \"TASK\"")
    sys.stderr.write(prompt)  # beside the live display, and never into a --json document on stdout
    sys.stderr.flush()
    try:
        text = input().strip()
    except EOFError:
        if allow_eof:
            return None
        raise UsageError("no task given") from None
    if not text and not allow_eof:
        raise UsageError("no task given")
    return text or None


@app.command()
def batch(
    file: Path = typer.Argument(..., metavar="FILE.jsonl", help="One JSON object a line: task (required), "
                                "model, template, max_steps, max_cost."),
    jobs: int = typer.Option(4, "--jobs", "-j", min=1, help="Runs at a time, each in its own sandbox."),
    runs_dir: Optional[Path] = RunsDir,
    json_output: bool = JsonOut,
) -> None:
    """Many runs at once, with a live table and a summary. Running the same file again skips the done
    runs and resumes the interrupted or crashed ones. Exit code: 0 if every run is done, 1 if any is not,
    2 for a bad line (nothing is started), 130 when Ctrl-C stopped the batch (run it again to resume)."""
    from orchestrator.batch import run_batch

    raise typer.Exit(run_batch(file, _runs_dir(runs_dir), jobs, json_output))


@app.command("ls")
def ls(runs_dir: Optional[Path] = RunsDir, json_output: bool = JsonOut) -> None:
    """List runs."""
    from orchestrator.inspect.listing import list_runs, render_runs

    rows = list_runs(_runs_dir(runs_dir))
    if json_output:
        _print_json(rows)
    else:
        typer.echo(render_runs(rows))


@app.command()
def show(
    run_ref: str = typer.Argument(..., metavar="RUN"),
    step: Optional[int] = typer.Option(None, "--step", help="Show one step whole."),
    runs_dir: Optional[Path] = RunsDir,
    json_output: bool = JsonOut,
) -> None:
    """The timeline of a run, or one step whole."""
    from orchestrator.inspect.timeline import step_lines, timeline

    doc = timeline(_find(runs_dir, run_ref))
    if step is not None:
        matches = [s for s in doc["steps"] if s["index"] == step]
        if not matches:
            raise UsageError(f"run {doc['id']} has no step {step} (it has {len(doc['steps'])})")
        if json_output:
            _print_json(matches[0])
        else:
            typer.echo(json.dumps(matches[0], indent=2, ensure_ascii=False))
        return
    if json_output:
        _print_json(doc)
        return
    u = doc["usage"]
    cost = f"${u['cost_usd']:.4f}" if u["cost_usd"] is not None else "cost unknown"
    typer.echo(f"run {doc['id']}  [{doc['status']}]  model {doc['model']}")
    typer.echo(f"task: {doc['task']}")
    typer.echo("\n".join(step_lines(doc)) or "(no steps yet)")
    typer.echo(f"tokens: {u['prompt_tokens']:,} prompt ({u['cache_hit_ratio']:.0%} cached), "
               f"{u['completion_tokens']:,} completion; {cost}")
    for c in doc["compactions"]:
        typer.echo(f"compaction at step {c['step']} ({c['kind']}): {c['tokens_before']:,} → {c['tokens_after']:,} tokens")
    if doc["result"]:
        typer.echo(f"result: {doc['result']}")


@app.command()
def todo(run_ref: str = typer.Argument(..., metavar="RUN"), runs_dir: Optional[Path] = RunsDir) -> None:
    """The run's plan (workspace/todo.md)."""
    run_dir = _find(runs_dir, run_ref)
    path = run_dir.workspace / "todo.md"
    if path.is_symlink() or not path.is_file():
        raise UsageError(f"run {run_dir.id} has no todo.md")
    typer.echo(path.read_text(errors="replace"), nl=False)


@app.command()
def files(run_ref: str = typer.Argument(..., metavar="RUN"), runs_dir: Optional[Path] = RunsDir,
          json_output: bool = JsonOut) -> None:
    """The workspace's files (as of the last checkpoint), the step that last changed each, and their size."""
    from orchestrator.inspect.changes import files as list_files, render_files

    doc = list_files(_find(runs_dir, run_ref))
    if json_output:
        _print_json(doc)
    else:
        typer.echo(render_files(doc))


@app.command()
def diff(
    run_ref: str = typer.Argument(..., metavar="RUN"),
    step: Optional[int] = typer.Option(None, "--step", help="What step N changed (default: the whole run)."),
    runs_dir: Optional[Path] = RunsDir,
) -> None:
    """What the run changed in its workspace, as a unified diff (from its checkpoints)."""
    from orchestrator.inspect.changes import diff as run_diff

    text = run_diff(_find(runs_dir, run_ref), step)
    if text:
        typer.echo(text)
    else:
        typer.echo(f"(no changes{'' if step is None else f' in step {step}'})", err=True)



@app.command()
def report(
    run_ref: str = typer.Argument(..., metavar="RUN"),
    output: Path = typer.Option(..., "--output", "-o", help="The HTML file to write."),
    runs_dir: Optional[Path] = RunsDir,
) -> None:
    """Write one self-contained HTML page of the run (timeline, todo, files, tokens and cost)."""
    from orchestrator.inspect.report import write_report

    run_dir = _find(runs_dir, run_ref)
    write_report(run_dir, output)
    typer.echo(f"wrote {output}", err=True)


@app.command()
def watch(run_ref: str = typer.Argument(..., metavar="RUN"), runs_dir: Optional[Path] = RunsDir) -> None:
    """Follow a live run: its events and workspace file changes as they happen."""
    from orchestrator.inspect.watch import watch_run
    from orchestrator.runner import run_is_live

    watch_run(_find(runs_dir, run_ref), lambda line: typer.echo(line), run_is_live)


@app.command()
def say(
    run_ref: str = typer.Argument(..., metavar="RUN"),
    text: str = typer.Argument(..., help="The message; the agent sees it at its next step."),
    runs_dir: Optional[Path] = RunsDir,
) -> None:
    """Add a message to a run: a live run gets it at its next step, a stopped one when it is resumed."""
    from orchestrator.runner import run_is_live
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


@app.command("export")
def export_cmd(
    run_ref: str = typer.Argument(..., metavar="RUN"),
    output: Path = typer.Option(..., "--output", "-o", help="The archive to write (tar.gz)."),
    with_machine: bool = typer.Option(False, "--with-machine", help="Add the run's container (what the agent "
                                      "installed outside the workspace), as an image: hundreds of MB."),
    runs_dir: Optional[Path] = RunsDir,
) -> None:
    """Write a run (workspace and state) to one tar.gz, to resume it elsewhere with `cairn import`."""
    import tempfile

    from orchestrator.runner import run_is_live
    from orchestrator.store.archive import export_run

    run_dir = _find(runs_dir, run_ref)
    if run_is_live(run_dir):
        raise UsageError(f"run {run_dir.id} is running; export it when it has stopped")
    with tempfile.TemporaryDirectory(prefix="cairn-machine-", dir=Path(output).resolve().parent) as tmp:
        machine_tar = None
        if with_machine:
            from orchestrator.sandbox import machine
            from orchestrator.sandbox.engine import connect

            machine_tar = Path(tmp) / machine.MACHINE_FILE
            typer.echo(f"saving the container of run {run_dir.id} as an image", err=True)
            machine.save(connect(), run_dir.id, machine_tar, run_dir.root)
        for path in export_run(run_dir, output, machine=machine_tar):
            typer.echo(f"left out: {path}", err=True)
    typer.echo(str(output))


@app.command("import")
def import_cmd(
    archive: Path = typer.Argument(..., metavar="FILE", help="An archive written by `cairn export`."),
    runs_dir: Optional[Path] = RunsDir,
) -> None:
    """Add a run from an archive of `cairn export` to the runs directory; then `cairn resume` it."""
    from orchestrator.store.archive import import_run

    run_dir = import_run(archive, _runs_dir(runs_dir))
    typer.echo(run_dir.id)
    typer.echo(f"  resume it with: cairn resume {run_dir.id}", err=True)


@app.command("shell")
def shell_cmd(run_ref: str = typer.Argument(..., metavar="RUN"), runs_dir: Optional[Path] = RunsDir) -> None:
    """An interactive shell in the run's kept container (the machine as the agent left it), else in a fresh
    sandbox on its workspace, made like the run's own."""
    import shutil
    import subprocess

    from orchestrator.runner import load_config, run_is_live
    from orchestrator.sandbox import Sandbox, container as containers
    from orchestrator.sandbox.engine import connect
    from orchestrator.sandbox.image import ensure_image

    run_dir = _find(runs_dir, run_ref)
    run_dir.check_workspace()
    docker_cli = shutil.which("docker")
    if docker_cli is None:  # docker-py has no interactive terminal; the client does
        raise UsageError("cairn shell needs the docker command line client on PATH")
    tty = ["-t"] if sys.stdin.isatty() and sys.stdout.isatty() else []
    shell = ["sh", "-c", "command -v bash >/dev/null && exec bash || exec sh"]
    client = connect()
    kept = containers.find(client, run_dir.id, run_dir.root)
    if kept is not None:
        started = kept.status != "running"
        if started:
            client.api.start(kept.id)
        typer.echo(f"a shell in the container of run {run_dir.id} ({'started for it' if started else 'running'})",
                   err=True)
        try:
            code = subprocess.call([docker_cli, "exec", "-i", *tty, kept.name, *shell])
        finally:
            if started and not run_is_live(run_dir):  # as it was found: stopped
                containers.stop(client, kept.id)
        raise typer.Exit(code)
    cfg = load_config(run_dir)
    sandbox = Sandbox(f"{run_dir.id}-shell", run_dir.workspace, cfg.sandbox, image=cfg.sandbox.image or ensure_image(),
                      client=client, cairn_mount=run_dir.cairn_dir if run_dir.external_workspace else None)
    typer.echo(f"run {run_dir.id} holds no container: a shell in a fresh sandbox on its workspace", err=True)
    sandbox.start()
    try:
        code = subprocess.call([docker_cli, "exec", "-i", *tty, sandbox.container.name, *shell])
    finally:
        sandbox.stop()
    raise typer.Exit(code)


@image_app.command("build")
def image_build(
    force: bool = typer.Option(False, "--force", help="Build even if an image with this tag exists."),
    base: Optional[str] = typer.Option(None, "--base", help="Base image (default python:3.12-slim, else a Debian root)."),
) -> None:
    """Build the sandbox image (tagged by a hash of sandbox_image/, so an unchanged image is reused)."""
    from orchestrator.sandbox.image import build_image

    tag = build_image(progress=lambda line: typer.echo(line, err=True), force=force, base=base)
    typer.echo(tag)


@app.command()
def doctor() -> None:
    """Check the engine, the image, free disk and the model settings, and say what to do."""
    from orchestrator.doctor import run_checks

    checks = run_checks()
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
    from orchestrator.runner import run_is_live
    from orchestrator.sandbox.container import gc as gc_containers
    from orchestrator.sandbox.engine import connect
    from orchestrator.store.runs import RunDir

    seconds = _duration(older_than) if older_than is not None else None
    runs = RunDir.all(_runs_dir(runs_dir))
    live = {r.id for r in runs if run_is_live(r)}
    removed = gc_containers(connect(), live, known_run_ids={r.id for r in runs}, older_than=seconds)
    typer.echo(f"removed {len(removed)} container(s)" + (": " + ", ".join(removed) if removed else ""))


def _duration(text: str) -> float:
    """`30s`, `30m`, `12h`, `7d`, `2w` in seconds."""
    import re

    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text)
    if not match:
        raise UsageError(f"--older-than {text!r} is not a duration: give a number and a unit, e.g. 30m, 12h, 7d")
    return float(match.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[match.group(2)]


def _one_line(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    return f"invalid setting {where}: {first['msg']}"


def main() -> None:
    try:
        app()
    except CairnError as exc:
        typer.echo(f"cairn: error: {exc.message}", err=True)
        if exc.hint:
            typer.echo(f"  hint: {exc.hint}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:  # Ctrl-C outside the loop (while starting or resuming): still resumable
        typer.echo("cairn: interrupted", err=True)
        sys.exit(130)


if __name__ == "__main__":
    main()
