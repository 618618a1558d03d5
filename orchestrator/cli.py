"""The `cairn` command. Commands that do not call a model never import litellm, so they start fast."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, List, Optional

import typer
from pydantic import ValidationError

from orchestrator.config import RunConfig, default_runs_dir
from orchestrator.errors import CairnError, UsageError
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
    image: Optional[str] = typer.Option(None, "--image", help="Sandbox image (default: the one cairn builds); any Linux image works."),
    workdir: Optional[str] = typer.Option(None, "--workdir", metavar="PATH", help="The agent works in PATH (e.g. /app; default /workspace): the image's content there becomes the run's workspace, mounted back at PATH."),
    max_disk: Optional[str] = typer.Option(None, "--max-disk", metavar="SIZE", help="Stop the run (status budget) when its workspace and container use more disk than this: 500m, 20g, ... or none (default 20g)."),
    sandbox_user: Optional[str] = typer.Option(None, "--sandbox-user", metavar="UID:GID", help="Run the agent as this uid:gid (default: root; 0 only without --lockdown)."),
    lockdown: bool = typer.Option(False, "--lockdown", help="The cage for untrusted work: a non-root agent, read-only root filesystem, noexec /tmp, no capabilities."),
    runtime: Optional[str] = typer.Option(None, "--runtime", metavar="NAME", help="An OCI runtime the Docker engine knows, e.g. runsc (gVisor)."),
    config: Optional[Path] = typer.Option(None, "--config", metavar="PATH", help="An agent.json (tiny-agents schema: model, MCP servers), or a folder with one, an optional PROMPT.md and an optional cairn.json of settings."),
    check: Optional[str] = typer.Option(None, "--check", metavar="CMD", help="A command that says whether the task is done: run in the sandbox's work directory, in a fresh shell, after task_done; exit code 0 passes, else the run exits 1."),
    check_rounds: Optional[int] = typer.Option(None, "--check-rounds", metavar="N", min=0, help="When the check fails, send its output back to the agent and go on, at most N times (default 0)."),
    settings: Optional[Path] = typer.Option(None, "--settings", metavar="FILE", help="A JSON file of settings (any fields of a run's config, as a template's cairn.json), e.g. {\"model\": {\"context_window\": 32768}}."),
    json_output: bool = JsonOut,
) -> None:
    """Start a run. Settings: built-in defaults < the template's cairn.json < an agent folder's cairn.json
    < the --settings file < the options given here."""
    from orchestrator.llm.preflight import preflight
    from orchestrator.runner import agent_folder_settings, create_run, resolve_config, settings_file

    if workspace is not None and template is not None:
        raise UsageError("--template and --workspace do not go together: cairn adds no files to your folder")
    if workspace is not None and from_git is not None:
        raise UsageError("--workspace and --from-git do not go together")
    if ref is not None and from_git is None:
        raise UsageError("--ref goes with --from-git URL")
    layers = [agent_folder_settings(config)] if config is not None and config.exists() else []
    if settings is not None:
        layers.append(settings_file(settings))
    try:
        cfg = resolve_config({
            "model": {"model": model, "api_base": api_base},
            "limits": {"max_steps": max_steps, "max_cost": max_cost, "max_tokens": max_tokens},
            "sandbox": {"network": network, "image": image, "user": sandbox_user, "workdir": workdir,
                        "max_disk": max_disk, "runtime": runtime, "lockdown": True if lockdown else None},
            "check": {"command": check, "rounds": check_rounds},
        }, template=template, model_elsewhere=config is not None, layers=layers)
    except ValidationError as exc:
        raise UsageError(_one_line(exc)) from None
    if config is not None:  # the agent folder: its model unless --model, its prompt, its MCP servers
        from orchestrator.agent_folder import load_config as load_agent_config

        cfg = load_agent_config(config, cfg, cli_model=model, cli_api_base=api_base)
    preflight(cfg.model)  # a wrong model, key or endpoint: said now, before a run or a sandbox exists

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
    api_base: Optional[str] = typer.Option(None, "--api-base", help="Continue with this OpenAI-compatible endpoint."),
    network: Optional[str] = typer.Option(None, "--network", help="none or bridge: the sandbox's network from now on."),
    max_steps: Optional[int] = typer.Option(None, "--max-steps", min=1, help="Raise the step limit."),
    max_cost: Optional[float] = typer.Option(None, "--max-cost", min=0, help="Raise the cost limit (USD)."),
    from_step: Optional[int] = typer.Option(None, "--from-step", min=0,
                                            help="Fork a new run from the end of step N, and continue that."),
    trust: bool = typer.Option(False, "--trust", help="Trust an imported run: apply its own settings that reach "
                               "this machine (endpoint, passed variables, image, network, MCP servers...)."),
    safe_defaults: bool = typer.Option(False, "--safe-defaults", help="Resume an imported run with cairn's defaults "
                                       "in place of its settings that reach this machine."),
    runs_dir: Optional[Path] = RunsDir,
    json_output: bool = JsonOut,
) -> None:
    """Continue a stopped, interrupted or crashed run (or, with --from-step, a fork of it). An imported run
    is untrusted: its settings that reach this machine need --trust, --safe-defaults or your own values."""
    from orchestrator.runner import run_is_live
    from orchestrator.store.trust import settle

    if network is not None and network not in ("none", "bridge"):
        raise UsageError(f"--network is none or bridge, not {network!r}")
    if trust and safe_defaults:
        raise UsageError("--trust and --safe-defaults do not go together")
    run_dir = _find(runs_dir, run_ref)
    if from_step is not None:
        run_dir = _fork(run_dir, from_step, message, runs_dir, json_output)
    if run_is_live(run_dir):
        raise UsageError(f"run {run_dir.id} is running in another process")
    status = run_dir.read_meta().get("status")
    source = "answer" if message else "user"
    if not message and _has_said(run_dir):
        pass  # a `cairn say` message is waiting to be delivered: that is the instruction
    elif status == "waiting" and not message:
        raise UsageError(f"run {run_dir.id} waits for an answer: {run_dir.read_meta().get('result')}",
                         hint=f'cairn resume {run_dir.id} --message "ANSWER"')
    elif status == "done" and not message:
        from orchestrator.check import feedback, last_failed
        from orchestrator.runner import load_config

        failed = last_failed(run_dir.events.read()[0])
        if failed is None:
            raise UsageError(f"run {run_dir.id} is done; to go on, give it a new instruction with --message")
        # Its check failed: the agent goes on from the check's output, as a round of --check-rounds would.
        message, source = feedback(failed, load_config(run_dir).sandbox.workdir), "resume"
    if model:
        from orchestrator.llm.scripted import check_model

        check_model(model)  # before run.json takes it
    cfg, meta = settle(run_dir.read_meta(), model=model or None, api_base=api_base, network=network,
                       trust=trust, safe_defaults=safe_defaults, run_id=run_dir.id)
    if max_steps:
        cfg.limits.max_steps = max_steps
    if max_cost is not None:
        cfg.limits.max_cost = max_cost
    from orchestrator.llm.preflight import preflight

    preflight(cfg.model, key_elsewhere=cfg.mcp.api_key_in_file)  # before the sandbox starts
    meta["config"] = cfg.model_dump(mode="json")
    run_dir.write_meta({**meta, "updated": time.time()})
    run_dir._external = False  # trust may have changed which workspace it works on
    _drive(run_dir, cfg, json_output, message=message, resumed=True, source=source)


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
           interactive: bool = False, resumed: bool = False, source: str | None = None) -> None:
    from orchestrator.display import make_display
    from orchestrator.inspect.timeline import check_line, timeline
    from orchestrator.runner import Session, exit_code, mark_failed

    display = make_display(json_output, chat=interactive)
    run_dir.take_stop_request()  # a `cairn stop` that came as the run was ending is not for this one
    session = None
    try:
        with Session(run_dir, cfg, display, resumed=resumed) as session:
            status = session.go(message, source=source or ("answer" if resumed and message else "user"))
            while interactive and status != "interrupted":
                display.pause()  # no status line redrawn under the prompt while the person types
                reply = _ask("you> ", allow_eof=True)
                if reply is None:
                    break
                display.resume()
                status = session.go(reply)
            error, verdict = session.agent.error, session.agent.state.check
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
        said = doc["result"] or (doc["error"] or {}).get("reason")
        typer.secho(f"run {run_dir.id}: {status}" + (f": {clean(said)}" if said else ""), err=True, fg=_status_colour(status))
        if doc["check"] is not None and doc["check"]["passed"] is not None:
            typer.echo(f"  {check_line(doc['check'])}", err=True)
        typer.echo(f"  inspect it with: cairn show {run_dir.id}", err=True)
    raise typer.Exit(exit_code(status, error, verdict if status == "done" else None))


def _status_colour(status: str) -> str | None:
    """Done green, a failure red, the rest plain (click drops colours when the stream is not a terminal)."""
    if os.environ.get("NO_COLOR"):
        return None
    return {"done": "green", "failed": "red", "looping": "red", "budget": "yellow"}.get(status)


def _print_exact_or_clean(text: str) -> None:
    """A file's content or a patch: on a terminal, cleaned of control sequences; piped, exact (not
    through click, which drops some escape sequences from output that is not a terminal)."""
    if sys.stdout.isatty():
        typer.echo(clean(text), nl=False)
    else:
        sys.stdout.write(text)


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
                                "model, api_base, template, image, workdir, check, settings, max_steps, max_cost."),
    jobs: int = typer.Option(4, "--jobs", "-j", min=1, help="Runs at a time, each in its own sandbox."),
    api_base: Optional[str] = typer.Option(None, "--api-base", metavar="URL", help="The OpenAI-compatible endpoint of every line that names none (its api_base key or settings file)."),
    runs_dir: Optional[Path] = RunsDir,
    json_output: bool = JsonOut,
) -> None:
    """Many runs at once, with a live table and a summary. Running the same file again skips the done
    runs and resumes the interrupted or crashed ones. Exit code: 0 if every run is done (and its check
    passed, where a line has one), 1 if any is not,
    2 for a bad line (nothing is started), 130 when Ctrl-C stopped the batch (run it again to resume)."""
    from orchestrator.batch import run_batch

    raise typer.Exit(run_batch(file, _runs_dir(runs_dir), jobs, json_output, api_base=api_base))


@app.command("ls")
def ls(runs_dir: Optional[Path] = RunsDir, json_output: bool = JsonOut) -> None:
    """List runs, oldest first; a run that did not finish says why (the REASON column, `reason` in JSON)."""
    from orchestrator.inspect.listing import list_runs, render_runs

    from orchestrator.terminal import width

    rows = list_runs(_runs_dir(runs_dir))
    if json_output:
        _print_json(rows)
    else:
        typer.echo(render_runs(rows, width(sys.stdout)))


@app.command()
def show(
    run_ref: str = typer.Argument(..., metavar="RUN", help=RUN_HELP),
    step: Optional[int] = typer.Option(None, "--step", help="Show one step whole: its messages, text, calls and whole results."),
    runs_dir: Optional[Path] = RunsDir,
    json_output: bool = JsonOut,
) -> None:
    """The timeline of a run (with the messages it got, and why it ended), or one step whole."""
    from orchestrator.inspect.timeline import check_line, step_lines, step_text, timeline, walk
    from orchestrator.terminal import page

    run_dir = _find(runs_dir, run_ref)
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
    u = doc["usage"]
    cost = f"${u['cost_usd']:.4f}" if u["cost_usd"] is not None else "cost unknown"
    # The run's own text (task, model, result; step_lines cleans the steps) is cleaned for the terminal.
    typer.echo(f"run {doc['id']}  [{doc['status']}]  model {clean(doc['model'])}")
    typer.echo(f"task: {' '.join(clean(doc['task']).split())}")
    typer.echo("\n".join(step_lines(doc)) or "(no steps yet)")
    typer.echo(f"tokens: {u['prompt_tokens']:,} prompt ({u['cache_hit_ratio']:.0%} cached), "
               f"{u['completion_tokens']:,} completion; {cost}")
    for c in doc["compactions"]:
        typer.echo(f"compaction at step {c['step']} ({c['kind']}): {c['tokens_before']:,} → {c['tokens_after']:,} tokens")
    for c in doc["checks"][:-1]:
        typer.echo(f"check #{c['round']} after step {c['step']}: {check_line(c).removeprefix('check ')}"
                   + (" → sent back to the agent" if c["sent_back"] else ""))
    if doc["result"]:
        typer.echo(f"result: {clean(doc['result'])}")
    if doc["check"] is not None:
        typer.echo(check_line(doc["check"]))
    if doc["error"]:
        typer.secho(f"{doc['status']}: {clean(doc['error']['reason'])}", fg=_status_colour(doc["status"]))


def _readable(run_dir, read: Any) -> Any:  # noqa: ANN001 - RunDir, imported lazily
    """`read()` of a run whose run.json and event log can be read; else one line saying what is wrong."""
    from orchestrator.inspect.listing import check_readable

    check_readable(run_dir)
    try:
        return read()
    except ValidationError:  # an event line that is not an event: name it
        check_readable(run_dir, events_too=True)
        raise


@app.command()
def todo(run_ref: str = typer.Argument(..., metavar="RUN"), runs_dir: Optional[Path] = RunsDir) -> None:
    """The run's plan (workspace/todo.md); on a terminal, without control sequences."""
    from orchestrator.store.regular import read_regular

    run_dir = _find(runs_dir, run_ref)
    path = run_dir.workspace / "todo.md"
    text = read_regular(path)
    if text is None:
        raise UsageError(f"run {run_dir.id} has no todo.md (or it is not a regular file)")
    _print_exact_or_clean(text)


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
    from orchestrator.inspect.changes import diff as run_diff
    from orchestrator.terminal import colour, colour_diff, page, width

    if step is not None and step < 0:
        raise UsageError("--step is 0 or more")
    text = run_diff(_find(runs_dir, run_ref), step, paths=paths, everything=everything, stat=stat,
                    stat_width=width(sys.stdout))
    if text:
        page(text if not sys.stdout.isatty() else colour_diff(clean(text)) if colour(sys.stdout) else clean(text))
    else:
        where = f" to {', '.join(paths)}" if paths else ""
        typer.echo(f"(no changes{where}{'' if step is None else f' in step {step}'})", err=True)


@app.command()
def report(
    run_ref: str = typer.Argument(..., metavar="RUN", help=RUN_HELP),
    output: Optional[Path] = typer.Option(None, "--output", "-o", metavar="FILE.html",
                                          help="The HTML file to write (default: RUN.html in this folder)."),
    runs_dir: Optional[Path] = RunsDir,
) -> None:
    """Write one self-contained HTML page of the run (timeline, todo, files, tokens and cost); print its path."""
    from orchestrator.inspect.report import write_report

    run_dir = _find(runs_dir, run_ref)
    out = output or Path(f"{run_dir.id}.html")
    _readable(run_dir, lambda: write_report(run_dir, out))
    typer.echo(str(out))


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


@app.command("rm")
def rm(
    run_refs: List[str] = typer.Argument(..., metavar="RUN...", help=RUN_HELP),
    runs_dir: Optional[Path] = RunsDir,
) -> None:
    """Remove runs: each one's directory and its sandbox container. A live run is refused (cairn stop it
    first); the folder of a run made with --workspace is the user's, and is left as it is."""
    import shutil

    from orchestrator.errors import SandboxError
    from orchestrator.runner import run_is_live
    from orchestrator.sandbox.container import container_name

    runs = list({r.id: r for r in (_find(runs_dir, ref) for ref in run_refs)}.values())  # all found, or none removed
    for run_dir in runs:
        if run_is_live(run_dir):
            raise UsageError(f"run {run_dir.id} is running; stop it first", hint=f"cairn stop {run_dir.id}")
    try:
        from orchestrator.sandbox.engine import connect

        client = connect(timeout=15)
    except SandboxError as exc:
        client = None
        typer.echo(f"cairn: {exc.message}: the runs' containers ({', '.join(container_name(r.id) for r in runs)}) "
                   "are left; `cairn gc` removes them later", err=True)
    for run_dir in runs:
        gone = client is not None and _remove_container(client, container_name(run_dir.id))
        try:
            shutil.rmtree(run_dir.root)
        except OSError as exc:
            raise CairnError(f"cannot remove {run_dir.root}: {exc.strerror or exc}",
                             hint="files the sandbox made as another user: remove the folder as that user") from None
        typer.echo(f"removed run {run_dir.id}" + (f" and its container {container_name(run_dir.id)}" if gone else ""))
        if run_dir.external_workspace:
            typer.echo(f"  its folder {run_dir.external_workspace} is yours, and was left as it is", err=True)


def _remove_container(client: Any, name: str) -> bool:
    """True when there was a container of that name, and it is gone."""
    import docker

    from orchestrator.sandbox.container import remove

    try:
        client.api.inspect_container(name)
    except docker.errors.NotFound:
        return False
    except docker.errors.DockerException:
        pass  # `remove` says what the engine says
    remove(client, name)
    return True


@app.command()
def stop(run_ref: str = typer.Argument(..., metavar="RUN", help=RUN_HELP), runs_dir: Optional[Path] = RunsDir) -> None:
    """Stop a live run between actions, as Ctrl-C does: it ends `interrupted`, and `cairn resume` continues it.
    Works for a run of a batch too."""
    from orchestrator.runner import run_is_live

    run_dir = _find(runs_dir, run_ref)
    if not run_is_live(run_dir):
        status = run_dir.read_meta().get("status", "running")
        raise CairnError(f"run {run_dir.id} is not running (its status: "
                         f"{'interrupted, by a crash' if status == 'running' else status})")
    run_dir.request_stop()
    typer.echo(f"run {run_dir.id} stops after its current action; then `cairn resume {run_dir.id}` continues it")


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
        for note in export_run(run_dir, output, machine=machine_tar):  # 'left out: PATH (why)', 'written sparse: ...'
            typer.echo(note, err=True)
    typer.echo(str(output))


@app.command("import")
def import_cmd(
    archive: Path = typer.Argument(..., metavar="FILE", help="An archive written by `cairn export`."),
    max_size: str = typer.Option("20g", "--max-size", metavar="SIZE", help="Refuse an archive that unpacks to more (e.g. 50g)."),
    max_files: int = typer.Option(1_000_000, "--max-files", min=1, help="Refuse an archive of more files."),
    runs_dir: Optional[Path] = RunsDir,
) -> None:
    """Add a run from an archive of `cairn export` to the runs directory; then `cairn resume` it. The run
    is untrusted: its settings that reach this machine apply only with `cairn resume --trust`."""
    from orchestrator.store.archive import import_run, parse_size
    from orchestrator.store.trust import host_settings

    run_dir = import_run(archive, _runs_dir(runs_dir), max_bytes=parse_size(max_size), max_files=max_files)
    typer.echo(run_dir.id)
    settings = host_settings(run_dir.read_meta())
    if settings:
        typer.echo(f"  its settings that reach this machine are not applied until you trust it: "
                   f"{', '.join(s.name for s in settings)}", err=True)
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
    run_dir.cairn_dir.mkdir(exist_ok=True)
    sandbox = Sandbox(f"{run_dir.id}-shell", run_dir.workspace, cfg.sandbox, image=cfg.sandbox.image or ensure_image(),
                      client=client, cairn_mount=run_dir.cairn_dir, external=run_dir.external_workspace is not None)
    typer.echo(f"run {run_dir.id} holds no container: a shell in a fresh sandbox on its workspace", err=True)
    sandbox.start()
    try:
        code = subprocess.call([docker_cli, "exec", "-i", *tty, "-w", cfg.sandbox.workdir, sandbox.container.name, *shell])
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
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:  # Ctrl-C outside the loop (while starting or resuming): still resumable
        typer.echo("cairn: interrupted", err=True)
        sys.exit(130)


if __name__ == "__main__":
    main()
