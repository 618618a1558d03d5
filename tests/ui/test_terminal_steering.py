"""The terminal as a person watches and steers a run with it: what the start says while it waits, one key
for an approval, a message of several lines brought back whole, a failed check's output where it failed,
a long command's output in `cairn watch` as it comes, `cairn doctor` against an endpoint, the report
written beside its run, and a scripted run that goes on from the turn it reached. On real terminals
(tmux panes) and real sandboxes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from orchestrator import events as ev
from orchestrator.context.framing import FRAMINGS, exit_line, frame_result
from orchestrator.store.run_dir import RunDir
from orchestrator.ui.display import end_line
from tests.fake_openai import FakeOpenAI
from tests.loop_helpers import call, done, turn
from tests.terminal_helpers import ROOT, pane, script  # noqa: F401 - pane is a fixture


def cairn(*args: str, runs_dir, timeout: float = 300) -> subprocess.CompletedProcess:  # noqa: ANN001
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=timeout, cwd=ROOT,
                          env={**os.environ, "CAIRN_RUNS_DIR": str(runs_dir)})


@pytest.mark.docker
def test_the_start_says_on_its_status_line_what_it_waits_for(pane, tmp_path, sandbox_image):
    p = pane(["run", "--model", script(tmp_path / "s.json", done("ready")), "start up"])
    seen: set[str] = set()
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        screen = p.screen()
        seen.update(line.strip() for line in screen.splitlines() if line.startswith("starting · "))
        if "EXIT=" in screen:
            break
        time.sleep(0.1)
    assert "EXIT=0" in screen, screen
    assert seen, "no status line while the run started"
    assert any(line.endswith("s") and " · " in line for line in seen), seen  # what, and for how long
    lines = screen.splitlines()
    first_step = next(i for i, line in enumerate(lines) if line.startswith("[1]"))
    assert any(line.startswith("starting the sandbox") for line in lines[:first_step])


@pytest.mark.docker
def test_one_key_answers_an_approval_and_e_takes_json_on_the_same_line(pane, tmp_path, sandbox_image):
    model = script(tmp_path / "s.json", turn(call("shell_exec", command="echo one")),
                   turn(call("shell_exec", command="echo two")), done("both"))
    p = pane(["run", "--model", model, "--approve", "always", "say two things"])
    p.wait_for("approve?")
    p.keys("y")  # no Enter
    p.wait_for("approve?", count=2)
    p.keys("e")
    p.wait_for("the arguments as one JSON line")
    p.type('{"command": "echo edited"}')
    screen = p.wait_for("EXIT=")
    assert "EXIT=0" in screen and "      → edited" in screen, screen
    [run] = RunDir.all(p.runs)
    ran = [json.loads(e.arguments)["command"] for e in run.events.read()[0] if e.type == "tool_started"
           and e.name == "shell_exec"]
    assert ran == ["echo one", "echo edited"]


@pytest.mark.docker
def test_a_denial_with_n_is_said_once_and_its_reason_reaches_the_model(pane, tmp_path, sandbox_image):
    model = script(tmp_path / "s.json", turn(call("shell_exec", command="echo never")), done("understood"))
    p = pane(["run", "--model", model, "--approve", "always", "say never"])
    p.wait_for("approve?")
    p.keys("n")
    p.wait_for("reason, told to the model")
    p.type("not today")
    screen = p.wait_for("EXIT=")
    assert screen.count("denied") == 1 and "(denied: the model is told so: not today)" in screen, screen
    [run] = RunDir.all(p.runs)
    [finished] = [e for e in run.events.read()[0] if e.type == "tool_finished" and e.name == "shell_exec"]
    assert "not today" in finished.content


@pytest.mark.docker
def test_a_message_of_several_lines_comes_back_whole_from_the_history(pane, tmp_path, sandbox_image):
    model = script(tmp_path / "s.json", {"content": "Hello"}, {"content": "Got both lines."},
                   {"content": "Got them again."}, {"content": "And once more."})
    p = pane(["run", "--model", model], env={"HOME": str(tmp_path)})
    p.wait_for("task>")
    p.type("say hello")
    p.wait_for("you>")
    p.type("first line \\", "second line")
    p.wait_for("Got both lines.")
    p.keys("Up")  # the whole message, not its last line
    p.keys("Enter")
    p.wait_for("Got them again.")
    p.type("/exit")
    p.wait_for("EXIT=")
    [run] = RunDir.all(p.runs)
    said = [e.text for e in run.events.read()[0] if e.type == "user_message"]
    assert said == ["first line \nsecond line"] * 2
    # And in the next session, from the history file: the task, brought back whole.
    again = pane(["run", "--model", script(tmp_path / "t.json", done("ok"))], env={"HOME": str(tmp_path)})
    again.wait_for("task>")
    again.keys("Up")  # /exit
    again.keys("Up")  # the message
    again.keys("Enter")
    again.wait_for("you>")
    again.type("/exit")
    again.wait_for("EXIT=")
    second = next(r for r in RunDir.all(p.runs) if r.id != run.id)
    assert second.read_meta()["task"] == "first line \nsecond line"


@pytest.mark.docker
def test_a_failed_check_shows_the_end_of_its_output_where_it_failed(tmp_path, runs_dir, sandbox_image):
    check = "echo collecting; echo 'FAILED test_parse: expected 3, got 4'; echo '1 failed'; exit 1"
    out = cairn("run", "--model", script(tmp_path / "s.json", done("believes it is fine")), "--check", check,
                "parse it", runs_dir=runs_dir)
    assert out.returncode == 1
    tail = out.stderr[out.stderr.index("check failed (exit code 1)"):]
    assert "│ FAILED test_parse: expected 3, got 4" in tail and "│ 1 failed" in tail, out.stderr
    [run] = RunDir.all(runs_dir)
    shown = cairn("show", run.id, runs_dir=runs_dir).stdout
    assert "│ FAILED test_parse: expected 3, got 4" in shown[shown.index("check failed"):]
    doc = json.loads(cairn("show", run.id, "--json", runs_dir=runs_dir).stdout)
    assert doc["checks"][-1]["output_tail"].endswith("FAILED test_parse: expected 3, got 4\n1 failed")


@pytest.mark.docker
def test_watch_shows_a_long_commands_output_as_it_comes(tmp_path, runs_dir, sandbox_image):
    command = "for i in $(seq 1 12); do echo tick $i; sleep 0.5; done"
    model = script(tmp_path / "s.json", turn(call("shell_exec", command=command)), done("counted"))
    env = {**os.environ, "CAIRN_RUNS_DIR": str(runs_dir)}
    runner = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "run", "--model", model, "count"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        while not list(runs_dir.glob("*/state/run.json")):
            assert runner.poll() is None
            time.sleep(0.05)
        [run] = RunDir.all(runs_dir)
        watch = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "watch", run.id], env=env,
                                 stdout=subprocess.PIPE, text=True)
        lines = [line.rstrip("\n") for line in watch.stdout]
        assert watch.wait(60) == 0
    finally:
        runner.wait(timeout=300)
    streamed = [i for i, line in enumerate(lines) if line.startswith("      │ tick")]
    result = next(i for i, line in enumerate(lines) if line.startswith("      → "))
    assert len(streamed) >= 6 and max(streamed) < result, lines  # as it came, before the command ended
    assert lines[result] == "      → [exit code 0, " + lines[result].split(", ", 1)[1]  # its end, not its lines again
    assert sum("tick 3" in line for line in lines) == 1


@pytest.mark.parametrize("form", range(FRAMINGS))
def test_a_streamed_commands_end_is_said_as_the_tool_gave_it_whatever_the_models_framing(form):
    """The model reads results in varied framings (context/framing.py); a person watching reads the
    command's own exit line, on `cairn run` and `cairn watch` alike (ui/display.py end_line)."""
    plain = "tick 12\n" + exit_line(0, 6.1)
    framed = frame_result("tick 12\n", exit_line(0, 6.1), "shell_exec", form)
    event = ev.ToolFinished(step=1, call_id="c1", name="shell_exec", content=framed,
                            output=plain if plain != framed else None)
    assert end_line(event) == "      → [exit code 0, 6.1 s]"


@pytest.mark.docker
def test_doctor_reaches_the_endpoint_and_names_the_model(tmp_path, runs_dir, sandbox_image):
    nothing = cairn("doctor", "--model", "openai/qwen", "--api-base", "http://127.0.0.1:1/v1", runs_dir=runs_dir)
    line = next(line for line in nothing.stdout.splitlines() if "model" in line)
    assert nothing.returncode == 1 and line.startswith("FAIL model openai/qwen:") and "connection refused" in line
    server = FakeOpenAI("qwen2.5-coder", [{"content": "hi"}])
    try:
        there = cairn("doctor", "--model", "openai/qwen2.5-coder", "--api-base", server.url, runs_dir=runs_dir)
        line = next(line for line in there.stdout.splitlines() if "model" in line)
        assert line.startswith("ok   model openai/qwen2.5-coder:") and f"{server.url} answers and serves 'qwen2.5-coder'" in line
        other = cairn("doctor", "--model", "openai/llama3", "--api-base", server.url, runs_dir=runs_dir)
        assert "which it does not list (it lists qwen2.5-coder" in other.stdout
    finally:
        server.close()
    assert server.requests == []  # asked which models it serves; no chat request (it would be billed)


@pytest.mark.docker
def test_report_writes_beside_the_run_and_says_where(tmp_path, runs_dir, sandbox_image):
    assert cairn("run", "--model", "scripted:demo", "the demo", runs_dir=runs_dir).returncode == 0
    [run] = RunDir.all(runs_dir)
    here = tmp_path / "clone"
    here.mkdir()
    out = subprocess.run([sys.executable, "-m", "orchestrator.cli", "report", run.id[:6]], capture_output=True,
                         text=True, cwd=here, env={**os.environ, "CAIRN_RUNS_DIR": str(runs_dir),
                                                   "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    page = run.root.absolute() / "report.html"
    assert out.stdout.strip() == str(page) and page.is_file() and list(here.iterdir()) == []
    assert cairn("report", run.id, "-o", str(tmp_path / "r.html"), runs_dir=runs_dir).stdout.strip() == str(tmp_path / "r.html")


@pytest.mark.docker
def test_a_resumed_scripted_run_goes_on_from_the_turn_it_reached(tmp_path, runs_dir, sandbox_image):
    model = script(tmp_path / "s.json", {"fail": 503}, turn(call("ask_user", question="Which colour?")),
                   turn(call("shell_exec", command="echo $((40 + 2)) > answer.txt")), done("blue it is"))
    first = cairn("run", "--model", model, "paint it", runs_dir=runs_dir)
    [run] = RunDir.all(runs_dir)
    assert first.returncode == 1 and run.read_meta()["status"] == "waiting", first.stderr
    again = cairn("resume", run.id, "--message", "blue", "--model", model, runs_dir=runs_dir)
    assert again.returncode == 0, again.stderr
    assert f"run {run.id}: done: blue it is" in again.stderr  # turns 3 and 4, not the script again from turn 1
    assert (run.workspace / "answer.txt").read_text() == "42\n"
    asked = [e for e in run.events.read()[0] if e.type == "tool_started" and e.name == "ask_user"]
    assert len(asked) == 1
