"""The terminal as a person uses it: what `cairn` shows and asks on a real terminal (a tmux pane, read as
the person reads it), and what it says to a script without one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from orchestrator.store.run_dir import RunDir
from tests.loop_helpers import call, done, turn
from tests.terminal_helpers import pane, script  # noqa: F401 - pane is a fixture

ASK = turn(call("ask_user", question="Which colour should the button be?"))


@pytest.mark.docker
def test_on_a_terminal_ask_user_is_asked_inline_and_the_run_goes_on(pane, tmp_path, sandbox_image):
    model = script(tmp_path / "s.json", ASK, done("made it blue"))
    p = pane(["run", "--model", model, "paint the button"])
    screen = p.wait_for("answer>")
    assert "the agent asks: Which colour should the button be?" in screen
    p.type("blue")
    screen = p.wait_for("EXIT=")
    assert "EXIT=0" in screen and ": done: made it blue" in screen
    [run] = RunDir.all(p.runs)
    answers = [(e.source, e.text) for e in run.events.read()[0] if e.type == "user_message"]
    assert answers[-1] == ("answer", "blue")


@pytest.mark.docker
def test_without_a_terminal_the_run_waits_and_says_the_exact_next_command_then_resume_asks(
        pane, tmp_path, runs_dir, sandbox_image):
    model = script(tmp_path / "s.json", ASK, done("made it green"))
    out = subprocess.run([sys.executable, "-m", "orchestrator.cli", "run", "--model", model, "paint the button"],
                         capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300,
                         env={**os.environ, "CAIRN_RUNS_DIR": str(runs_dir)})
    [run] = RunDir.all(runs_dir)
    assert out.returncode == 1 and run.read_meta()["status"] == "waiting"
    assert f'answer it with: cairn resume {run.id} --message "ANSWER"' in out.stderr

    script(tmp_path / "s.json", done("made it green"))  # another script: played from its first turn
    p = pane(["resume", run.id])  # on a terminal, resume asks instead of refusing
    screen = p.wait_for("answer>")
    assert f"run {run.id}: the agent asks: Which colour should the button be?" in screen
    p.type("green")
    screen = p.wait_for("EXIT=")
    assert "EXIT=0" in screen and ": done: made it green" in screen


@pytest.mark.docker
def test_ctrl_c_at_the_you_prompt_ends_the_session_with_its_id_and_how_to_go_on(pane, tmp_path, sandbox_image):
    model = script(tmp_path / "s.json", {"content": "Hello! What shall we do?"})
    p = pane(["run", "--model", model])
    p.wait_for("task>")
    p.type("say hello")
    p.wait_for("you>")
    p.keys("C-c")
    screen = p.wait_for("EXIT=")
    [run] = RunDir.all(p.runs)
    lines = screen.splitlines()
    closing = next(i for i, line in enumerate(lines) if line.startswith(f"run {run.id}: stopped"))
    assert lines[closing - 1].rstrip() in ("you>", "you> ^C")  # the closing line on a line of its own
    assert f'go on with: cairn resume {run.id} --message "..."' in screen
    assert "EXIT=1" in screen and "rc=130" not in screen


@pytest.mark.docker
def test_in_a_session_the_first_ctrl_c_stops_the_command_and_returns_to_the_prompt_the_second_leaves(
        pane, tmp_path, sandbox_image):
    model = script(tmp_path / "s.json", turn(call("shell_exec", command="echo long-one; sleep 60; touch never")),
                   {"fail": "timeout"}, {"content": "unreachable"})
    p = pane(["run", "--model", model])
    p.wait_for("task>")
    p.type("build it")
    p.wait_for("long-one")
    pressed = time.monotonic()
    p.keys("C-c")
    screen = p.wait_for("you>", timeout=20)
    assert time.monotonic() - pressed < 15, "the first Ctrl-C waited for the command"
    assert "EXIT=" not in screen  # the run is intact: the session goes on
    [run] = RunDir.all(p.runs)
    assert not (run.workspace / "never").exists()  # nothing more of the command line ran
    # While the session waits at its prompt its drive goes on: `cairn watch` follows it, and says so.
    watch = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "watch", run.id], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env={**os.environ, "CAIRN_RUNS_DIR": str(p.runs)})
    time.sleep(3)
    assert watch.poll() is None, watch.communicate()
    watch.terminate()
    watch.communicate(timeout=30)
    listed = json.loads(subprocess.run([sys.executable, "-m", "orchestrator.cli", "ls", "--json"], capture_output=True,
                                       text=True, env={**os.environ, "CAIRN_RUNS_DIR": str(p.runs)}).stdout)
    assert listed[0]["status"] == "running"  # its drive holds it: the same status on every face
    p.type("go on")  # the model now hangs: a Ctrl-C while it thinks also returns to the prompt
    p.wait_for("waiting for the model", timeout=30)
    p.keys("C-c")
    screen = p.wait_for("you>", count=2, timeout=30)
    assert "EXIT=" not in screen
    p.keys("C-c")  # at the prompt: leaves
    screen = p.wait_for("EXIT=", timeout=30)
    assert f"run {run.id}: interrupted" in screen and f"go on with: cairn resume {run.id}" in screen
    events = [json.loads(line) for line in run.events.path.read_text().splitlines()]
    [interrupted] = [e for e in events if e["type"] == "tool_finished"]
    assert interrupted["error"] and "interrupted" in interrupted["content"]


@pytest.mark.docker
def test_watch_shows_each_file_change_under_the_step_that_made_it(tmp_path, runs_dir, sandbox_image):
    model = script(tmp_path / "s.json", turn(call("shell_exec", command="sleep 4")),
                   turn(call("shell_exec", command="echo 'print(1)' > proc.py")),
                   turn(call("shell_exec", command="sleep 1")),
                   turn(call("file_write", path="proc.py", content="print(2)\n")),
                   turn(call("shell_exec", command="sleep 1; rm proc.py")), done("wrote it"))
    env = {**os.environ, "CAIRN_RUNS_DIR": str(runs_dir)}
    runner = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "run", "--model", model, "write proc.py"],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while not list(runs_dir.glob("*/state/run.json")):
            assert runner.poll() is None
        [run] = RunDir.all(runs_dir)
        watched = subprocess.run([sys.executable, "-m", "orchestrator.cli", "watch", run.id], env=env,
                                 capture_output=True, text=True, timeout=300)
    finally:
        runner.wait(timeout=300)
    lines = [line.strip() for line in watched.stdout.splitlines()]
    where = {mark: max(i for i, line in enumerate(lines[:lines.index(mark)]) if line.startswith("["))
             for mark in ("+ proc.py", "~ proc.py", "- proc.py")}
    assert lines[where["+ proc.py"]].startswith("[2] $ echo"), watched.stdout
    assert lines[where["~ proc.py"]].startswith("[4] write proc.py (1 line)"), watched.stdout
    assert lines[where["- proc.py"]].startswith("[5] $ sleep 1; rm proc.py"), watched.stdout
    assert lines.count("+ proc.py") == 1 and lines.count("~ proc.py") == 1


@pytest.mark.docker
def test_ctrl_c_at_the_approval_prompt_denies_the_call_and_stops_the_run(pane, tmp_path, sandbox_image):
    model = script(tmp_path / "s.json", turn(call("shell_exec", command="echo never")), done())
    p = pane(["run", "--model", model, "--approve", "always", "say never"])
    p.wait_for("approve?")
    p.keys("C-c")
    screen = p.wait_for("EXIT=")
    [run] = RunDir.all(p.runs)
    assert "(Ctrl-C: denied; the run stops after this step)" in screen and screen.count("denied") == 1  # once
    assert f"run {run.id}: interrupted" in screen and f"go on with: cairn resume {run.id}" in screen
    assert "EXIT=130" in screen
    [finished] = [e for e in run.events.read()[0] if e.type == "tool_finished"]
    assert (finished.output or finished.content).startswith("denied by the user: the person stopped the run (Ctrl-C)")


# -- cairn ls ----------------------------------------------------------------------------------------

QUESTION = "Which colour should the button be: the red of the logo, or the blue of the header?"


def _runs(runs_dir):
    made = []
    for status, task, result in [("done", "write a parser for the log format and test it on the samples", "parsed"),
                                 ("interrupted", "refactor the module", None),
                                 ("waiting", "paint the button", QUESTION)]:
        run = RunDir.create(runs_dir, {"task": task, "status": status, "result": result})
        run.release()
        made.append(run.id)
    return made


@pytest.mark.parametrize("columns", [80, 160])
def test_ls_gives_the_reason_room_to_be_read_at_80_and_160_columns(runs_dir, columns):
    from orchestrator.ui.inspect.listing import list_runs, render_runs

    _runs(runs_dir)
    table = render_runs(list_runs(runs_dir), columns)
    assert all(len(line) <= columns for line in table.splitlines()), table
    said = next(line for line in table.splitlines() if "the agent asks" in line)
    assert "the agent asks: Which colour should the button be" in said  # not six characters
    if columns == 160:
        assert "paint the button" in said  # beside its run
    else:
        assert said.startswith("  ↳ the agent asks")  # on its own line, under its run


def test_ls_at_120_columns_gives_the_task_the_room_the_reasons_leave(runs_dir):
    from orchestrator.ui.inspect.listing import render_runs

    task = "Write a CLI that converts CSV to JSON, with tests for quoting and empty lines"
    rows = [{"id": "k3f9q2-20261122-2145", "task": task, "status": "failed", "steps": 3, "cost_usd": 0.01,
             "started": 0, "check": None, "reason": "HTTP 401 from the endpoint"},
            {"id": "m1x0a7-20261122-2150", "task": "fix the parser", "status": "done", "steps": 9, "cost_usd": None,
             "started": 0, "check": None, "reason": None}]
    lines = render_runs(rows, 120).splitlines()
    assert all(len(line) <= 120 for line in lines)
    assert "Write a CLI that converts CSV" in lines[1] and lines[1].endswith("  HTTP 401 from the endpoint")
    assert len(lines[1]) == 120  # the task takes what the reason leaves: no empty columns
    assert render_runs([{**rows[0], "task": "fix it"}], 120).splitlines()[1].endswith("fix it  HTTP 401 from the endpoint")
    long = [{**rows[0], "reason": "the agent asks: " + "which of the two formats should win when they disagree? " * 2}]
    lines = render_runs(long, 120).splitlines()
    assert "Write a CLI that converts CSV" in lines[1] and "the agent asks: which" in lines[1]
    assert all(len(line) <= 120 for line in lines)


def test_ls_status_n_and_wide(runs_dir):
    from tests.in_process import cairn_in_process

    done, interrupted, waiting = _runs(runs_dir)
    env = {**os.environ, "CAIRN_RUNS_DIR": str(runs_dir)}
    rows = json.loads(cairn_in_process("ls", "--json", "--status", "waiting,interrupted", env=env).stdout)
    assert [r["id"] for r in rows] == [interrupted, waiting]
    rows = json.loads(cairn_in_process("ls", "--json", "-n", "2", env=env).stdout)
    assert [r["id"] for r in rows] == [interrupted, waiting]
    wide = cairn_in_process("ls", "--wide", env=env).stdout
    assert "TOKENS" in wide and "CONTAINER" in wide and QUESTION in wide  # nothing cut
    bad = cairn_in_process("ls", "--status", "finished", env=env)
    assert bad.returncode == 2 and "--status finished: a status is one of running, done" in bad.stderr


# -- the batch's summary -------------------------------------------------------------------------------

@pytest.mark.docker
def test_a_batch_summary_labels_its_columns_counts_a_failed_check_as_not_done_and_says_what_to_look_at(
        tmp_path, runs_dir, sandbox_image):
    script(tmp_path / "ok.json", done("fine"))
    script(tmp_path / "bad.json", done("believes it is fine"))
    batch = tmp_path / "b.jsonl"
    batch.write_text(json.dumps({"task": "a good one", "model": "scripted:ok.json"}) + "\n"
                     + json.dumps({"task": "a checked one", "model": "scripted:bad.json", "check": "false"}) + "\n")
    out = subprocess.run([sys.executable, "-m", "orchestrator.cli", "batch", str(batch), "--jobs", "2"],
                         capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
                         env={**os.environ, "CAIRN_RUNS_DIR": str(runs_dir)})
    assert out.returncode == 1, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["LINE", "ID", "STATUS", "CHECK", "STEPS", "TOKENS", "COST", "ACTION", "TASK"]
    checked = next(r for r in RunDir.all(runs_dir) if r.read_meta()["task"] == "a checked one")
    assert f"not done: its check failed · cairn show {checked.id}" in out.stdout
    assert lines[-1].startswith("1/2 done · checks: 0 passed, 1 failed · 2 steps · ")
    assert "unknown" not in lines[-1] and not lines[-1].endswith("· -")  # the scripted model has no price
    assert "starting the sandbox" not in out.stderr  # no line that names no run
    doc = json.loads(subprocess.run([sys.executable, "-m", "orchestrator.cli", "show", checked.id, "--json"],
                                    capture_output=True, text=True, env={**os.environ, "CAIRN_RUNS_DIR": str(runs_dir)},
                                    check=True).stdout)
    shown = subprocess.run([sys.executable, "-m", "orchestrator.cli", "show", checked.id], capture_output=True,
                           text=True, env={**os.environ, "CAIRN_RUNS_DIR": str(runs_dir)}, check=True).stdout
    host = checked.cairn_dir / doc["check"]["output_path"].removeprefix("/cairn/")
    assert host.is_file() and f"output in {host}" in shown  # the check's output named where it is here


# -- small truths: doctor, a missing image, the report ------------------------------------------------

@pytest.mark.docker
def test_doctor_checks_the_model_run_would_use_and_takes_model(runs_dir, sandbox_image):
    from tests.in_process import cairn_in_process

    env = {**os.environ, "CAIRN_RUNS_DIR": str(runs_dir)}
    env.pop("CAIRN_MODEL", None)
    out = cairn_in_process("doctor", env=env)
    assert out.returncode == 1 and "FAIL model: no model given" in out.stdout and "--model M" in out.stdout
    out = cairn_in_process("doctor", env={**env, "CAIRN_MODEL": "scripted:demo"})
    assert "ok   model scripted:demo" in out.stdout
    out = cairn_in_process("doctor", "--model", "scripted:nosuch.json", env=env)
    assert "FAIL model scripted:nosuch.json: no script file" in out.stdout


@pytest.mark.docker
def test_a_missing_third_party_image_is_said_before_a_run_is_made(runs_dir, sandbox_image):
    from tests.in_process import cairn_in_process

    out = cairn_in_process("run", "a task", "--image", "nosuch/image:9",
                           env={**os.environ, "CAIRN_RUNS_DIR": str(runs_dir), "CAIRN_MODEL": "scripted:demo"})
    assert out.returncode == 4
    assert out.stderr.splitlines() == ["cairn: error: the sandbox image nosuch/image:9 is not in the Docker engine",
                                       "  hint: pull it (docker pull nosuch/image:9) or build it, then run again; "
                                       "or name another with --image"]
    assert not runs_dir.exists() or not list(runs_dir.iterdir())  # no failed run left behind


def test_the_reports_time_axis_labels_never_overlap_and_the_last_step_has_one():
    import re

    from orchestrator.ui.inspect.report_time import LABEL_GAP, time_axis

    starts = [0.0, 60.0, *(60.0 + 0.2 * k for k in range(1, 30)), 200.0]  # a long step, many quick ones
    steps = [{"index": i + 1, "time": {"start": 1000 + t, "ms": 100.0, "model": [], "tools": []}}
             for i, t in enumerate(starts)]
    svg = time_axis(steps, [(1000.0, 1201.0)])
    labels = [(float(x), text) for x, text in re.findall(r'<text x="([\d.]+)" y="\d+" text-anchor="middle">(#\d+)</text>', svg)]
    xs = [x for x, _ in labels]
    assert all(b - a >= LABEL_GAP for a, b in zip(xs, xs[1:])), labels
    assert labels[0][1] == "#1" and labels[-1][1] == f"#{len(steps)}" and len(labels) >= 3


def test_a_collapsed_step_of_the_report_shows_its_command(tmp_path):
    from orchestrator.config import RunConfig
    from orchestrator.ui.inspect.report import render_report
    from orchestrator.runs.new_run import create_run
    from orchestrator import events as ev

    run = create_run(tmp_path / "runs", "a task", RunConfig.model_validate({"model": {"model": "scripted:demo"}}))
    arguments = json.dumps({"command": "pytest -q tests/test_parser.py"})
    for e in [ev.ModelRequest(step=1, model="m", usage={"prompt_tokens": 10, "cached_tokens": 0}),
              ev.ToolStarted(step=1, call_id="c1", name="shell_exec", arguments=arguments),
              ev.ToolFinished(step=1, call_id="c1", name="shell_exec", content="3 passed")]:
        run.events.append(e)
    page = render_report(run)
    summary = page[page.index('id="step-1"'):].split("</summary>")[0]
    assert "shell_exec</span> <code class=\"gist\"" in summary and "pytest -q tests/test_parser.py" in summary


# -- the live view ------------------------------------------------------------------------------------

def _shown(events, columns: int) -> str:
    """What the live view prints for these events on a terminal `columns` wide."""
    import io

    from rich.console import Console

    from types import SimpleNamespace

    from orchestrator.ui.display import LiveDisplay

    out = io.StringIO()
    display = LiveDisplay(Console(file=out, width=columns, force_terminal=False, soft_wrap=True))
    state = SimpleNamespace(step=2)  # the display reads the state only for its status line
    for e in events:
        display.event(e, state)
    display.close()
    return out.getvalue()


@pytest.mark.parametrize("columns", [80, 160])
def test_the_live_view_shows_each_tool_its_own_way(columns):
    from orchestrator import events as ev

    started = lambda name, **a: ev.ToolStarted(step=2, call_id="c", name=name, arguments=json.dumps(a))  # noqa: E731
    text = _shown([
        started("shell_exec", command="pytest -q tests/"),
        ev.ToolFinished(step=2, call_id="c", name="shell_exec",
                        content="..F\nFAILED tests/test_a.py::test_one\n1 failed, 2 passed\nline four\nline five\n"
                                "[exit code 1, 0.4 s]", error=True),
        started("file_write", path="src/parser.py", content="import re\n\ndef parse(s):\n    return s\n"),
        started("file_edit", path="src/parser.py", old="    return s", new="    return s.strip()"),
        started("file_read", path="README.md"),
        ev.ToolFinished(step=2, call_id="c", name="file_read", content="one\ntwo\nthree\n"),
    ], columns)
    lines = text.splitlines()
    assert "[2] $ pytest -q tests/" in lines
    assert lines[1] == "      ✗ ..F" and lines[2] == "        FAILED tests/test_a.py::test_one"  # as it came
    assert "        … 2 more lines" in lines and '{"command"' not in text and "\\n" not in text
    assert "[2] write src/parser.py (4 lines)" in lines
    assert "[2] edit src/parser.py (-1 +1)" in lines
    assert "      -     return s" in lines and "      +     return s.strip()" in lines
    assert "[2] read README.md" in lines and "      → 3 lines" in lines
    assert all(len(line) <= columns for line in lines)


def test_the_status_line_says_what_is_waited_for_and_how_long():
    import io

    from rich.console import Console

    from types import SimpleNamespace

    from orchestrator.ui.display import LiveDisplay
    from orchestrator import events as ev

    display = LiveDisplay(Console(file=io.StringIO(), width=80, force_terminal=False))
    display.model_wait = 60
    state = SimpleNamespace(step=1)
    display.event(ev.StatusChanged(step=0, status="running"), state)
    assert display.doing(display.since + 37) == "waiting for the model, 37 s of 60"
    display.event(ev.Notice(step=1, text="retry 1/6 in 8 s: HTTP 429 from the endpoint", kind="model_retry",
                            wait_s=8.0), state)
    now = display.retry_until - 5
    assert display.doing(now) == "the model failed (HTTP 429 from the endpoint), retry 1/6: trying again in 5 s"
    assert display.doing(display.retry_until + 12) == "waiting for the model, 12 s of 60"
    display.event(ev.ToolStarted(step=1, call_id="c", name="shell_exec", arguments='{"command": "make test"}'), state)
    assert display.doing(display.since + 95) == "$ make test, 95 s"
    display.close()


@pytest.mark.docker
def test_interactive_mode_has_a_banner_slash_commands_and_multi_line_input(pane, tmp_path, sandbox_image):
    model = script(tmp_path / "s.json", {"content": "Hello! What next?"}, {"content": "Got both lines."})
    p = pane(["run", "--model", model], env={"HOME": str(tmp_path)})
    screen = p.wait_for("task>")
    assert "cairn, interactive · model scripted:" in screen and "/help lists commands" in screen
    p.type("say hello")
    p.wait_for("you>")
    p.type("/help")
    screen = p.wait_for("/cost")
    assert "/todo" in screen and "/diff" in screen and "/model" in screen and "/exit" in screen
    p.type("/cost")
    p.wait_for("prompt tokens")
    p.type("/model")
    p.wait_for("(another: cairn resume")
    p.type("first line \\", "second line")
    p.wait_for("Got both lines.")
    p.type("/exit")
    screen = p.wait_for("EXIT=")
    [run] = RunDir.all(p.runs)
    said = [e.text for e in run.events.read()[0] if e.type == "user_message"]
    assert said == ["first line \nsecond line"]  # the commands never reached the model
    assert f"go on with: cairn resume {run.id}" in screen
    assert (tmp_path / ".cairn" / "history").is_file()  # up-arrow history, kept for the next session


# -- approvals ----------------------------------------------------------------------------------------

@pytest.mark.docker
def test_cairn_approve_echoes_the_call_and_resume_goes_on_at_once(tmp_path, runs_dir, sandbox_image):
    env = {**os.environ, "CAIRN_RUNS_DIR": str(runs_dir)}
    model = script(tmp_path / "s.json", turn(call("shell_exec", command="echo deployed")), done("shipped"))
    out = subprocess.run([sys.executable, "-m", "orchestrator.cli", "run", "--model", model, "--approve", "always",
                          "deploy"], capture_output=True, text=True, stdin=subprocess.DEVNULL, env=env, timeout=300)
    [run] = RunDir.all(runs_dir)
    assert out.returncode == 1 and f"answer it with: cairn approve {run.id} --resume" in out.stderr
    script(tmp_path / "s.json", done("shipped"))  # another script: played from its first turn
    approved = subprocess.run([sys.executable, "-m", "orchestrator.cli", "approve", run.id, "--resume"],
                              capture_output=True, text=True, stdin=subprocess.DEVNULL, env=env, timeout=300)
    assert approved.returncode == 0, approved.stderr
    assert approved.stdout.startswith(f"run {run.id}: approved:\n  $ echo deployed\n")  # the call it approved
    assert f"run {run.id}: done: shipped" in approved.stderr
    results = [e.output or e.content for e in run.events.read()[0] if e.type == "tool_finished"]  # as given, unframed
    assert results[0].startswith("deployed")


@pytest.mark.docker
def test_on_a_terminal_an_approval_is_said_once_and_a_file_write_shows_the_file(pane, tmp_path, sandbox_image):
    model = script(tmp_path / "s.json", turn(call("file_write", path="deploy.sh", content="#!/bin/sh\ngit push\n")),
                   done())
    p = pane(["run", "--model", model, "--approve", "always", "write the deploy script"])
    screen = p.wait_for("approve?")
    assert "    deploy.sh (2 lines):" in screen and "      git push" in screen
    assert '{"content"' not in screen and "] ? file_write" not in screen  # no JSON, and no second telling
    p.type("y")
    assert "EXIT=0" in p.wait_for("EXIT=")


@pytest.mark.docker
def test_a_long_commands_output_is_shown_as_it_comes(pane, tmp_path, sandbox_image):
    command = "for i in 1 2 3 4 5 6; do echo tick $i; sleep 1; done; echo never-seen-yet > /dev/null; sleep 60"
    model = script(tmp_path / "s.json", turn(call("shell_exec", command=command, timeout=8)), done())
    p = pane(["run", "--model", model, "count slowly"])
    screen = p.wait_for("│ tick 5", timeout=180)  # before the command has ended (it runs until its timeout)
    assert "│ tick 1" in screen and "[exit code" not in screen and "timed out" not in screen
    screen = p.wait_for("EXIT=", timeout=120)
    assert screen.count("tick 3") == 1  # shown once: the result does not print its lines again
    assert "✗ timed out after 8" in screen, screen


def test_show_rows_say_each_call_its_own_way_within_160_columns(tmp_path, runs_dir):
    from orchestrator.config import RunConfig
    from orchestrator.runs.new_run import create_run
    from orchestrator import events as ev
    from tests.in_process import cairn_in_process

    run = create_run(runs_dir, "a task", RunConfig.model_validate({"model": {"model": "scripted:demo"}}))
    command = "python3 primes.py 3000 && " + "echo a very long command line " * 10
    for e in [ev.ModelRequest(step=1, model="m", usage={"prompt_tokens": 1793, "cached_tokens": 0}),
              ev.ToolStarted(step=1, call_id="c1", name="shell_exec", arguments=json.dumps({"command": command})),
              ev.ToolFinished(step=1, call_id="c1", name="shell_exec", content=" ".join(map(str, range(2000))),
                              offloaded_to="/cairn/obs/1-shell_exec.txt")]:
        run.events.append(e)
    run.release()
    lines = cairn_in_process("show", run.id, env={**os.environ, "CAIRN_RUNS_DIR": str(runs_dir)}).stdout.splitlines()
    row = next(line for line in lines if line.startswith("   1 "))
    assert row.startswith("   1  $ python3 primes.py 3000 && echo a very long") and '{"command"' not in row
    assert len(row) <= 160 and row.endswith("[1,793 tok]")
    assert lines[lines.index(row) + 1] == "       ⇢ saved in /cairn/obs/1-shell_exec.txt"


# -- issue 34, hole 8: bidirectional controls from the agent show as what they are -----------------

RLO, PDI = "\u202e", "\u2069"  # right-to-left override; pop directional isolate


@pytest.mark.docker
def test_bidi_controls_show_as_their_codes_in_the_approval_the_todo_and_the_diff(pane, tmp_path, sandbox_image):
    """`git push origin main #<RLO> ...` would show reversed, hiding what follows; so would a todo.md or a
    changed file. On the terminal each control shows as [U+202E], and nothing of it reorders the line."""
    command = f"echo hello #{RLO} txt.exe"
    model = script(tmp_path / "s.json", turn(call("shell_exec", command=command)),
                   turn(call("todo_write", content=f"- [ ] ship {RLO}exe.txt{PDI}\n")),
                   turn(call("file_write", path="notes.txt", content=f"a \u2066{RLO}b{PDI} c\n")), done())
    p = pane(["run", "--model", model, "--approve", "always", "bidi"])
    screen = p.wait_for("approve?")
    assert f"echo hello #[U+202E] txt.exe" in screen and RLO not in screen
    p.type("y")
    screen = p.wait_for("approve?", count=2)  # file_write (todo_write and task_done are never asked)
    assert "a [U+2066][U+202E]b[U+2069] c" in screen and RLO not in screen
    p.type("y")
    screen = p.wait_for("EXIT=")
    assert "EXIT=0" in screen and RLO not in screen
    [run] = RunDir.all(p.runs)
    todo = pane(["todo", run.id])
    assert "- [ ] ship [U+202E]exe.txt[U+2069]" in todo.wait_for("EXIT=") and RLO not in todo.screen()
    diff = pane(["diff", run.id])
    shown = diff.wait_for("EXIT=")
    assert "+a [U+2066][U+202E]b[U+2069] c" in shown.replace("\x1b", "") and RLO not in shown


def test_the_history_file_keeps_a_message_of_several_lines_as_one_entry(tmp_path, monkeypatch):
    from orchestrator.ui import chat

    monkeypatch.setattr(chat, "HISTORY", tmp_path / "history")
    (tmp_path / "history").write_text('plain line\n"first line \\nsecond line"\n"quoted" as typed\n')
    assert chat._read_history(tmp_path / "history") == ["plain line", "first line \nsecond line", '"quoted" as typed']


def test_the_status_line_times_the_model_not_the_person_typing():
    """In a session, the prompt pauses the status line; when the person sends, the model's wait starts then."""
    from io import StringIO

    from rich.console import Console

    from orchestrator import events as ev
    from orchestrator.ui.display import LiveDisplay

    display = LiveDisplay(Console(file=StringIO(), force_terminal=False))
    display.event(ev.StatusChanged(status="stopped"), None)  # the turn ends: the prompt comes
    display.since -= 31  # the person types for 31 s
    display.pause()
    display.resume()
    assert display.doing().startswith("waiting for the model, 0 s")
    display.since -= 31
    display.event(ev.UserMessage(step=2, text="and then?"), None)
    assert display.doing().startswith("waiting for the model, 0 s")
