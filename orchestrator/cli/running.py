"""The commands that drive one run: run, demo, resume (and its fork, --from-step) and approve."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

import typer
from pydantic import ValidationError

from orchestrator.cli.shared import RUN_HELP, JsonOut, RunsDir, _find, _print_json, _runs_dir, _status_colour, app
from orchestrator.config import RunConfig
from orchestrator.errors import UsageError
from orchestrator.ui.terminal import clean


MODEL, WORKSPACE, LIMITS, SANDBOX, CHECKS, OUTPUT = ("Model", "Workspace", "Limits", "Sandbox",
                                                   "Approvals and checks", "Output")
RUN_EXAMPLES = ("Examples:\n\n"
                "  cairn run \"add a --verbose flag to cli.py\" --workspace . --check \"pytest -q\"\n\n"
                "  cairn run -m ollama_chat/qwen3 --api-base http://localhost:11434 \"fix it\"")


@app.command(epilog=RUN_EXAMPLES)
def run(
    task: Optional[str] = typer.Argument(None, help="The task. Without one, an interactive session."),
    model: Optional[str] = typer.Option(None, "--model", "-m", metavar="M", rich_help_panel=MODEL, help="A litellm model string, or scripted:PATH (default: the template's, else $CAIRN_MODEL)."),
    api_base: Optional[str] = typer.Option(None, "--api-base", metavar="URL", rich_help_panel=MODEL, help="An OpenAI-compatible endpoint (vLLM, llama.cpp, Ollama)."),
    runs_dir: Optional[Path] = typer.Option(None, "--runs-dir", metavar="DIR", rich_help_panel=WORKSPACE, help="Where runs live (default $CAIRN_RUNS_DIR, else ~/.cairn/runs)."),
    template: Optional[str] = typer.Option(None, "--template", metavar="NAME", rich_help_panel=WORKSPACE, help="Starter workspace from workspace_templates/: default, coding or research."),
    workspace: Optional[Path] = typer.Option(None, "--workspace", metavar="DIR", rich_help_panel=WORKSPACE, help="Work on this existing folder in place (mounted, not copied)."),
    from_git: Optional[str] = typer.Option(None, "--from-git", metavar="URL", rich_help_panel=WORKSPACE, help="Start from a clone of this git repository."),
    ref: Optional[str] = typer.Option(None, "--ref", metavar="REF", rich_help_panel=WORKSPACE, help="With --from-git: the branch, tag or commit to check out."),
    max_steps: Optional[int] = typer.Option(None, "--max-steps", metavar="N", min=1, rich_help_panel=LIMITS, help="Model calls at most (default 100)."),
    max_cost: Optional[float] = typer.Option(None, "--max-cost", metavar="USD", min=0, rich_help_panel=LIMITS, help="Dollars at most."),
    max_tokens: Optional[int] = typer.Option(None, "--max-tokens", metavar="N", min=1, rich_help_panel=LIMITS, help="Prompt plus completion tokens at most."),
    max_time: Optional[str] = typer.Option(None, "--max-time", metavar="DURATION", rich_help_panel=LIMITS, help="Wall-clock time at most: 90m, 1h30m, 45s or a number of seconds. The model is told the time used and left; the time the run sits stopped does not count."),
    network: Optional[str] = typer.Option(None, "--network", metavar="none|bridge", rich_help_panel=SANDBOX, help="The sandbox's network: none (the default, unless the template says otherwise) or bridge."),
    image: Optional[str] = typer.Option(None, "--image", metavar="IMAGE", rich_help_panel=SANDBOX, help="Sandbox image (default: the one cairn builds); any Linux image works."),
    workdir: Optional[str] = typer.Option(None, "--workdir", metavar="PATH", rich_help_panel=WORKSPACE, help="The agent works in PATH (e.g. /app; default /workspace): the image's content there becomes the run's workspace, mounted back at PATH."),
    max_disk: Optional[str] = typer.Option(None, "--max-disk", metavar="SIZE", rich_help_panel=LIMITS, help="Stop the run (status budget) when its workspace and container use more disk than this: 500m, 20g, ... or none (default 20g)."),
    sandbox_user: Optional[str] = typer.Option(None, "--sandbox-user", metavar="UID:GID", rich_help_panel=SANDBOX, help="Run the agent as this uid:gid (default: root; 0 only without --lockdown)."),
    lockdown: bool = typer.Option(False, "--lockdown", rich_help_panel=SANDBOX, help="The cage for untrusted work: a non-root agent, read-only root filesystem, noexec /tmp, no capabilities."),
    runtime: Optional[str] = typer.Option(None, "--runtime", metavar="NAME", rich_help_panel=SANDBOX, help="An OCI runtime the Docker engine knows, e.g. runsc (gVisor)."),
    config: Optional[Path] = typer.Option(None, "--config", metavar="PATH", rich_help_panel=MODEL, help="An agent.json (tiny-agents schema: model, MCP servers), or a folder with one, an optional PROMPT.md and an optional cairn.json of settings."),
    check: Optional[str] = typer.Option(None, "--check", metavar="CMD", rich_help_panel=CHECKS, help="A command that says whether the task is done: run in the sandbox's work directory, in a fresh shell, after task_done; exit code 0 passes, else the run exits 1."),
    check_rounds: Optional[int] = typer.Option(None, "--check-rounds", metavar="N", min=0, rich_help_panel=CHECKS, help="When the check fails, send its output back to the agent and go on, at most N times (default 0)."),
    critic_every: Optional[int] = typer.Option(None, "--critic-every", metavar="N", min=1, rich_help_panel=CHECKS, help="Every N steps, one extra model call reviews the task, the plan and the last N steps; its answer goes into the next request's tail and /cairn/critic/ (default: off)."),
    critic_model: Optional[str] = typer.Option(None, "--critic-model", metavar="M", rich_help_panel=CHECKS, help="The critic's model (a litellm model string or scripted:PATH; default: the run's model)."),
    approve: Optional[str] = typer.Option(None, "--approve", metavar="MODE", rich_help_panel=CHECKS, help="Which tool calls wait for your yes: never, outside (the default: calls that can act outside the sandbox, e.g. MCP tools, web_fetch, git push with the network on) or always. On a terminal you are asked; else the run waits for cairn approve."),
    settings: Optional[Path] = typer.Option(None, "--settings", metavar="FILE", rich_help_panel=WORKSPACE, help="A JSON file of settings (any fields of a run's config, as a template's cairn.json), e.g. {\"model\": {\"context_window\": 32768}}."),
    json_output: bool = typer.Option(False, "--json", rich_help_panel=OUTPUT, help="Print one JSON document on stdout and nothing else."),
) -> None:
    """Start a run. Settings: built-in defaults < the template's cairn.json < an agent folder's cairn.json
    < the --settings file < the options given here."""
    from orchestrator.agent.critic import preflight_critic
    from orchestrator.llm import warmup
    from orchestrator.llm.preflight import preflight
    from orchestrator.runs.new_run import create_run
    from orchestrator.runs.settings import agent_folder_settings, invalid_setting, resolve_config, settings_file

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
            "limits": {"max_steps": max_steps, "max_cost": max_cost, "max_tokens": max_tokens,
                       "max_wall_seconds": _max_time(max_time)},
            "sandbox": {"network": network, "image": image, "user": sandbox_user, "workdir": workdir,
                        "max_disk": max_disk, "runtime": runtime, "lockdown": True if lockdown else None},
            "check": {"command": check, "rounds": check_rounds},
            "critic": {"every": critic_every, "model": critic_model},
            "approvals": {"mode": _approve_mode(approve)},
        }, template=template, model_elsewhere=config is not None, layers=layers)
    except ValidationError as exc:
        raise UsageError(invalid_setting(exc)) from None
    if config is not None:  # the agent folder: its model unless --model, its prompt, its MCP servers
        from orchestrator.runs.agent_folder import load_config as load_agent_config

        cfg = load_agent_config(config, cfg, cli_model=model, cli_api_base=api_base)
    warmup.begin(cfg.model)  # the model library loads from now on, while the run is made (llm/warmup.py)
    preflight(cfg.model)  # a wrong model, key or endpoint: said now, before a run or a sandbox exists
    preflight_critic(cfg)

    if cfg.sandbox.image:
        from orchestrator.sandbox.docker.container import check_image

        check_image(cfg.sandbox.image)  # a missing image is said now: no run is made for it
    interactive = task is None
    if interactive:
        from orchestrator.ui.chat import first_task

        task = first_task(cfg.model.model)
    run_dir = create_run(_runs_dir(runs_dir), task, cfg, workspace=workspace, from_git=from_git, ref=ref)
    _drive(run_dir, cfg, json_output, interactive=interactive)


@app.command()
def demo(runs_dir: Optional[Path] = RunsDir) -> None:
    """Run the built-in scripted demo offline (no model service needed), then show its timeline."""
    from orchestrator.cli.inspecting import print_timeline  # here: importing it first would list its commands first
    from orchestrator.llm.scripted import load_script
    from orchestrator.runs.new_run import create_run
    from orchestrator.ui.inspect.timeline import timeline

    cfg = RunConfig.model_validate({"model": {"model": "scripted:demo"}})
    run_dir = create_run(_runs_dir(runs_dir), load_script("demo")["task"], cfg)
    try:
        _drive(run_dir, cfg, json_output=False)
    finally:
        typer.echo("")
        print_timeline(run_dir, timeline(run_dir))


@app.command()
def resume(
    run_ref: str = typer.Argument(..., metavar="RUN", help=RUN_HELP),
    message: Optional[str] = typer.Option(None, "--message", help="A message to the agent (answers ask_user)."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Continue with another model."),
    api_base: Optional[str] = typer.Option(None, "--api-base", help="Continue with this OpenAI-compatible endpoint."),
    network: Optional[str] = typer.Option(None, "--network", help="none or bridge: the sandbox's network from now on."),
    max_steps: Optional[int] = typer.Option(None, "--max-steps", min=1, help="Raise the step limit."),
    max_cost: Optional[float] = typer.Option(None, "--max-cost", min=0, help="Raise the cost limit (USD)."),
    max_time: Optional[str] = typer.Option(None, "--max-time", metavar="DURATION", help="The run's time limit from now on (90m, 1h30m, 45s or seconds), its earlier drives counted: raise it to go on after the time ran out."),
    from_step: Optional[int] = typer.Option(None, "--from-step", min=0,
                                            help="Fork a new run from the end of step N, and continue that."),
    critic_every: Optional[int] = typer.Option(None, "--critic-every", metavar="N", min=0, help="From now on, every N steps a critic model call reviews the last N steps (0: no critic)."),
    critic_model: Optional[str] = typer.Option(None, "--critic-model", metavar="M", help="The critic's model from now on (default: the run's model)."),
    approve: Optional[str] = typer.Option(None, "--approve", metavar="never|outside|always", help="Which tool calls wait for your yes from now on (see cairn run --help)."),
    trust: bool = typer.Option(False, "--trust", help="Trust an imported run: apply its own settings that reach "
                               "this machine (endpoint, passed variables, image, network, MCP servers...)."),
    safe_defaults: bool = typer.Option(False, "--safe-defaults", help="Resume an imported run with cairn's defaults "
                                       "in place of its settings that reach this machine."),
    runs_dir: Optional[Path] = RunsDir,
    json_output: bool = JsonOut,
) -> None:
    """Continue a stopped, interrupted or crashed run (or, with --from-step, a fork of it). An imported run
    is untrusted: its settings that reach this machine need --trust, --safe-defaults or your own values."""
    from orchestrator.runs.resume import Resumption, fork, prepare

    max_seconds = _max_time(max_time)  # a wrong duration is said before the run is taken
    run_dir = _find(runs_dir, run_ref)
    if from_step is not None:
        source, run_dir = run_dir, fork(run_dir, from_step, message, _runs_dir(runs_dir))
        typer.echo(f"run {run_dir.id}: forked from run {source.id} at step {from_step}", err=True)
        typer.echo(run_dir.id, err=json_output)  # the new run's id alone, for a script (stderr with --json)
    wanted = Resumption(message=message, model=model, api_base=api_base, network=network, max_steps=max_steps,
                        max_cost=max_cost, max_seconds=max_seconds, critic_every=critic_every,
                        critic_model=critic_model, approve=approve, trust=trust, safe_defaults=safe_defaults)
    terminal = _can_ask(json_output)

    def ask(question: str) -> str | None:  # the agent's question, put to the person at this terminal
        typer.echo(f"run {run_dir.id}: the agent asks: {clean(question)}", err=True)
        return _ask("answer> ", allow_eof=True)

    ready = prepare(run_dir, wanted, ask=ask if terminal else None, approvals_on_terminal=terminal)
    _drive(run_dir, ready.cfg, json_output, message=ready.message, resumed=True, source=ready.source)


def _max_time(value: Optional[str]) -> Optional[float]:
    """`--max-time`'s seconds, or a one-line usage error that says what a duration looks like."""
    from orchestrator.sizes import parse_duration

    try:
        return parse_duration(value) if value is not None else None
    except ValueError:
        raise UsageError(f"--max-time {value!r} is not a duration: give 90m, 1h30m, 45s or a number of "
                         "seconds") from None


def _approve_mode(value: Optional[str]) -> Optional[str]:
    if value is not None and value not in ("never", "outside", "always"):
        raise UsageError(f"--approve is never, outside or always, not {value!r}")
    return value


@app.command()
def approve(
    run_ref: str = typer.Argument(..., metavar="RUN", help=RUN_HELP),
    deny: Optional[str] = typer.Option(None, "--deny", metavar="REASON", help="Refuse the call; the model is told \"denied by the user: REASON\"."),
    always: bool = typer.Option(False, "--always", help="The answer holds for every later call of that tool (or shell pattern, or rule) in this run."),
    and_resume: bool = typer.Option(False, "--resume", help="Then go on at once, as cairn resume RUN does."),
    yes: bool = typer.Option(False, "--yes", "-y", help="On a terminal, record the answer without asking to confirm it (the call is shown anyway)."),
    runs_dir: Optional[Path] = RunsDir,
) -> None:
    """Answer a run that waits for approval of a tool call (status waiting, reason approval: ...); then
    `cairn resume RUN` (or --resume here) runs the call, or gives the model its refusal, and goes on."""
    from orchestrator.agent.approval_answers import approval_wait, record_answer
    from orchestrator.store.liveness import RunIsLive
    from orchestrator.ui.approval_prompt import waiting_block
    from orchestrator.ui.display import call_line

    run_dir = _find(runs_dir, run_ref)
    try:
        run_dir.hold()  # no resume starts while the answer is written
    except RunIsLive:
        raise UsageError(f"run {run_dir.id} is running; it waits for an approval only once it has stopped") from None
    if deny is not None and not deny.strip():
        raise UsageError("--deny needs a reason (it is told to the model)")
    asked, answered = approval_wait(run_dir)
    if asked is not None and not answered:  # what is being answered, whole, before the answer is recorded
        typer.echo(f"run {run_dir.id} asks to run {clean(asked.name)} at step {asked.step}:", err=True)
        typer.echo(waiting_block(asked.name, asked.arguments, asked.why), err=True)
        if not yes and sys.stdin.isatty() and sys.stderr.isatty():
            verdict = "approve it" if deny is None else "deny it"
            if (_ask(f"{verdict}{' and every later call of ' + clean(asked.grant) if always else ''}? [y/N] ",
                     allow_eof=True) or "").lower() not in ("y", "yes"):
                typer.echo("nothing recorded", err=True)
                raise typer.Exit(1)
    answer = record_answer(run_dir, approved=deny is None, reason=deny, always=always)
    verdict = "approved" if answer.approved else f"denied ({clean(deny)})"
    scope = f", and every later call of {clean(answer.grant)}" if always else ""
    call = clean(call_line(asked.name, asked.arguments or "", width=200)) if asked is not None else clean(answer.name)
    then = "" if and_resume else f"; go on with: cairn resume {run_dir.id}"
    typer.echo(f"run {run_dir.id}: {verdict}{scope}:\n  {call.replace(chr(10), chr(10) + '  ')}\n" + then.lstrip("; "))
    run_dir.release()  # answered; a resume (below, or later) takes it as its own
    if and_resume:
        resume(run_dir.id, message=None, model=None, api_base=None, network=None, max_steps=None, max_cost=None,
               max_time=None, from_step=None, critic_every=None, critic_model=None, approve=None, trust=False, safe_defaults=False,
               runs_dir=runs_dir, json_output=False)


def _drive(run_dir, cfg: RunConfig, json_output: bool, message: str | None = None,  # noqa: ANN001
           interactive: bool = False, resumed: bool = False, source: str | None = None) -> None:
    from orchestrator.runs.drive import drive
    from orchestrator.ui.chat import EXIT, is_command, next_command, read_message, run_command, waiting_question
    from orchestrator.ui.display import make_display
    from orchestrator.ui.inspect.timeline import failed_check_lines, timeline

    display = make_display(json_output, chat=interactive)
    display.model_wait = min(cfg.model.stream_idle_timeout, cfg.model.request_timeout)  # "37 s of 60"
    display.cairn_dir = run_dir.cairn_dir  # a long command's output, as it comes

    def more(live: Any, status: str) -> tuple[str, str] | None:
        """After each end: the person's next words and how they are said, or None to finish. A question of
        the agent is asked where the person is: on this terminal, in every mode."""
        while True:
            asked = waiting_question(run_dir) if status == "waiting" and _can_ask(json_output) else None
            if asked is None and not interactive:
                return None
            display.pause()  # no status line redrawn under the prompt while the person types
            if interactive:
                reply = read_message("you> ")
                if reply is not None and is_command(reply):  # cairn answers it; the model never sees it
                    said = run_command(reply, run_dir, live)
                    if said == EXIT:
                        return None
                    typer.echo(said, err=True)
                    continue
            else:
                reply = _ask("answer> ", allow_eof=True)
            if reply is None:
                return None
            display.resume()
            return reply, "answer" if asked is not None else "user"

    from orchestrator.runs.new_run import progress_to

    said_before = progress_to(display.progress) if hasattr(display, "progress") else None
    try:
        driven = drive(run_dir, cfg, display, resumed=resumed, message=message, source=source, more=more)
    finally:
        if hasattr(display, "progress"):
            progress_to(said_before)
        display.close()
    doc = timeline(run_dir)  # the run's view, as every face shows it, now that its drive is over
    status = doc["status"]
    if json_output:
        _print_json(doc)
    else:
        said = doc["result"] or (doc["error"] or {}).get("reason")
        typer.secho(f"run {run_dir.id}: {status}" + (f": {clean(said)}" if said else ""), err=True, fg=_status_colour(status))
        if doc["check"] is not None and doc["check"]["passed"] is not None:
            typer.echo("\n".join(failed_check_lines(doc, run_dir, indent="  ")), err=True)
        waiting = doc["approval_waiting"]
        if waiting and not waiting["answer"]:  # a person decides from this: the call whole
            from orchestrator.ui.approval_prompt import waiting_block

            typer.echo(waiting_block(waiting["name"], waiting["arguments"], waiting["why"]), err=True)
        nxt = next_command(run_dir, status)
        if nxt:
            typer.echo(f"  {nxt}", err=True)
        typer.echo(f"  inspect it with: cairn show {run_dir.id}", err=True)
    raise typer.Exit(driven.exit_code)


def _can_ask(json_output: bool) -> bool:
    """A person can answer here: input and the display are a terminal (a --json run is a script's)."""
    return not json_output and sys.stdin.isatty() and sys.stderr.isatty()


def _ask(prompt: str, allow_eof: bool = False) -> str | None:
    """A line typed on the terminal. With `allow_eof`, Ctrl-D and Ctrl-C at the prompt are None (the
    session ends and says how to go on), on a line of their own."""
    if not sys.stdin.isatty() and not allow_eof:
        raise UsageError("no task given and no terminal to ask for one: cairn run \"TASK\"")
    sys.stderr.write(prompt)  # beside the live display, and never into a --json document on stdout
    sys.stderr.flush()
    try:
        text = input().strip()
    except (EOFError, KeyboardInterrupt) as exc:
        if allow_eof:
            sys.stderr.write("\n")  # the closing lines start on a line of their own
            sys.stderr.flush()
            return None
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise UsageError("no task given") from None
    if not text and not allow_eof:
        raise UsageError("no task given")
    return text or None
