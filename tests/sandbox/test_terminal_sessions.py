"""Terminal sessions (shell_start, shell_send, shell_stop) driving real programs in real sandboxes.

Most tests call the tools as the loop does (the registry, a ToolContext) on one real container; the
ones about steps, offloading and crashes play scripted runs end to end.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from orchestrator.config import SandboxConfig
from orchestrator.ui.inspect.timeline import step_lines
from orchestrator.sandbox.docker.sandbox import DockerSandbox
from orchestrator.errors import ToolError
from orchestrator.agent.delegate import delegate_tool
from orchestrator.tools.builtin import builtin_tools
from orchestrator.tools.outcome import BadCall, Observation
from orchestrator.tools.registry import Registry, ToolContext
from tests.loop_helpers import call, done, play, tool_messages, turn
from tests.sandbox_fixtures import docker_client, sandbox_image  # noqa: F401 - fixtures

pytestmark = pytest.mark.docker

BASE = "cairn-base:bookworm"  # a debootstrap minbase Debian: no python
CURSES_APP = """\
import curses

def main(screen):
    screen.addstr(2, 4, "cairn curses demo")
    screen.addstr(4, 4, "press q to quit")
    screen.refresh()
    while screen.getch() != ord("q"):
        pass

curses.wrapper(main)
print("bye from curses")
"""


class Agentish:
    """The registry hands this to agent_delegate only."""


REGISTRY = Registry(builtin_tools(delegate_tool(Agentish)))


class Tools:
    """The built-in tools on one sandbox, called as the loop calls them."""

    def __init__(self, sandbox: DockerSandbox) -> None:
        self.sandbox = sandbox
        self.n = 0

    def __call__(self, name: str, **args: Any) -> Observation:
        self.n += 1
        ctx = ToolContext(self.sandbox, self.sandbox.cfg, f"/cairn/obs/{self.n}-{name}.txt", self.n)
        return REGISTRY.run(name, REGISTRY.parse_arguments(name, json.dumps(args)), ctx)


def open_sandbox(name: str, tmp_path: Path, image: str, client: docker.DockerClient, **cfg: Any) -> DockerSandbox:
    (tmp_path / "cairn").mkdir(exist_ok=True)
    return DockerSandbox(f"test-sessions-{name}-{os.getpid()}", tmp_path / "ws", SandboxConfig(**cfg), image, client,
                   cairn_mount=tmp_path / "cairn")


@pytest.fixture(scope="module")
def box(docker_client, sandbox_image, tmp_path_factory) -> Iterator[DockerSandbox]:
    with open_sandbox("shared", tmp_path_factory.mktemp("sessions"), sandbox_image, docker_client) as sandbox:
        yield sandbox


@pytest.fixture
def tools(box) -> Tools:
    return Tools(box)


def test_a_python_repl_keeps_its_state_between_sends(tools):
    started = tools("shell_start", command="python3 -q", session="py", wait=3)
    assert ">>>" in started.text and "session py is still running" in started.footer
    tools("shell_send", session="py", keys="x = 41\n", wait=1)
    answer = tools("shell_send", session="py", keys="print(x + 1)\n", wait=1)
    assert "42" in answer.text.splitlines() and not answer.error
    ended = tools("shell_send", session="py", keys="<C-d>", wait=5)
    assert "session py exited with code 0" in ended.footer


def test_a_read_prompt_gets_its_answer(tools):
    asked = tools("shell_start", command="read -p 'Your name? ' name; echo \"hello, $name\"", wait=1)
    assert asked.text == "Your name?" and "session read is still running" in asked.footer
    answered = tools("shell_send", session="read", keys="cairn\n", wait=5)
    assert answered.text.splitlines() == ["cairn", "hello, cairn"]
    assert "session read exited with code 0" in answered.footer


def test_a_job_that_outlives_its_first_wait_is_read_to_its_end_later(tools):
    job = "for i in 1 2 3 4 5 6; do echo tick $i; sleep 0.4; done; echo finished; exit 3"
    first = tools("shell_start", command=job, session="job", wait=0.5)
    assert "tick 1" in first.text and "finished" not in first.text and "still running" in first.footer
    rest = tools("shell_send", session="job", keys="", wait=30)
    assert rest.text.splitlines()[-1] == "finished" and "tick 1" not in rest.text  # only what came since
    assert rest.error and "exited with code 3" in rest.footer
    log = tools("file_read", path="/cairn/sessions/job.log")  # all of it, kept
    assert [line.strip() for line in log.text.splitlines()] == [*(f"tick {i}" for i in range(1, 7)), "finished"]


def test_ctrl_c_interrupts_a_hung_program_and_the_shell_goes_on(tools):
    tools("shell_start", command="bash", session="sh", wait=1)
    hung = tools("shell_send", session="sh", keys="sleep 1000\n", wait=0.5)
    assert "still running" in hung.footer
    tools("shell_send", session="sh", keys="<C-c>", wait=0.5)
    after = tools("shell_send", session="sh", keys="echo alive after $?\n", wait=1)
    assert "alive after 130" in after.text
    stopped = tools("shell_stop", session="sh")
    assert "session sh stopped" in stopped.footer
    with pytest.raises(ToolError, match="session sh was stopped"):
        tools("shell_send", session="sh", keys="ls\n")


def test_a_curses_programs_screen_is_seen_rendered_and_a_key_ends_it(tools, box):
    tools("file_write", path="menu.py", content=CURSES_APP)
    shown = tools("shell_start", command="python3 menu.py", session="menu", wait=2)
    lines = shown.text.splitlines()
    assert lines[0].startswith("[the screen of session menu (a full-screen program, 120x40")
    assert lines[3] == "    cairn curses demo" and lines[5] == "    press q to quit"
    assert "\x1b" not in shown.text
    ended = tools("shell_send", session="menu", keys="q", wait=5)
    assert ended.text == "bye from curses" and "exited with code 0" in ended.footer


def test_a_server_in_a_session_answers_a_later_command_and_is_stopped(tools):
    tools("file_write", path="www/index.html", content="hello from the session server\n")
    server = tools("shell_start", command="python3 -m http.server 8765 --directory www", session="web", wait=2)
    assert "still running" in server.footer
    fetched = tools("shell_exec", command="curl -s http://127.0.0.1:8765/")
    assert fetched.text == "hello from the session server\n"
    log = tools("shell_send", session="web", keys="", wait=0.2)
    assert '"GET / HTTP/1.1" 200' in log.text
    stopped = tools("shell_stop", session="web")
    assert "session web stopped" in stopped.footer
    assert tools("shell_exec", command="curl -s http://127.0.0.1:8765/ || echo refused").text == "refused\n"


def test_names_are_given_or_made_and_bad_ones_are_one_line_errors(tools):
    first = tools("shell_start", command="sleep 30", wait=0)
    second = tools("shell_start", command="sleep 30", wait=0)
    assert "session sleep is still running" in first.footer and "session sleep-2 is still running" in second.footer
    with pytest.raises(ToolError, match="a session named sleep is open"):
        tools("shell_start", command="true", session="sleep")
    with pytest.raises(ToolError, match="session name 'a b'"):
        tools("shell_start", command="true", session="a b")
    with pytest.raises(ToolError, match=r"no session named nope \(open sessions: .*sleep, sleep-2"):
        tools("shell_send", session="nope", keys="x")
    with pytest.raises(BadCall, match="wait must be a number of seconds from 0 to 600"):
        tools("shell_send", session="sleep", keys="", wait=-1)
    listing = tools.sandbox.call("sessions")["sessions"]
    states = {s["name"]: s["state"] for s in listing}
    assert states["sleep"] == states["sleep-2"] == "running"
    tools("shell_stop", session="sleep")
    tools("shell_stop", session="sleep-2")


def test_a_session_runs_in_the_work_directory_with_the_sandbox_environment(docker_client, sandbox_image, tmp_path):
    with open_sandbox("env", tmp_path, sandbox_image, docker_client, env={"CAIRN_GREETING": "hi"}) as sandbox:
        out = Tools(sandbox)("shell_start", command="pwd; echo $CAIRN_GREETING $TERM; id -u", wait=5)
    assert out.text.splitlines() == ["/workspace", "hi xterm", "0"]


def test_under_lockdown_a_session_runs_as_the_non_root_user(docker_client, sandbox_image, tmp_path):
    with open_sandbox("locked", tmp_path, sandbox_image, docker_client, lockdown=True) as sandbox:
        out = Tools(sandbox)("shell_start", command="id -u; touch /etc/x 2>&1 | grep -o 'Read-only'", wait=5)
    assert out.text.splitlines() == ["1000", "Read-only"]


def test_a_session_runs_on_an_image_without_python(docker_client, sandbox_image, tmp_path):
    try:
        docker_client.api.inspect_image(BASE)
    except docker.errors.ImageNotFound:
        pytest.skip(f"{BASE} is not in the engine")
    with open_sandbox("nopy", tmp_path, BASE, docker_client) as sandbox:
        tools = Tools(sandbox)
        assert tools("shell_exec", command="command -v python3 || echo none").text == "none\n"
        asked = tools("shell_start", command="read -p 'ready? ' a; echo got $a", session="ask", wait=2)
        answered = tools("shell_send", session="ask", keys="yes\n", wait=5)
    assert asked.text == "ready?" and answered.text.splitlines() == ["yes", "got yes"]


def test_a_session_runs_under_gvisor(docker_client, sandbox_image, tmp_path):
    if "runsc" not in (docker_client.info().get("Runtimes") or {}):
        pytest.skip("the engine has no runsc runtime")
    with open_sandbox("runsc", tmp_path, sandbox_image, docker_client, runtime="runsc") as sandbox:
        tools = Tools(sandbox)
        tools("shell_start", command="python3 -q", session="py", wait=3)
        answer = tools("shell_send", session="py", keys="6 * 7\n", wait=2)
    assert "42" in answer.text.splitlines()


# -- in scripted runs: steps, offloading, crashes ---------------------------------------------------------

def test_a_server_started_in_one_step_answers_a_command_in_a_later_step_and_the_tail_lists_it(tmp_path):
    outcome = play(tmp_path, [
        turn(call("shell_start", command="python3 -m http.server 8766", session="web", wait=2)),
        turn(call("shell_exec", command="curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8766/")),
        turn(call("shell_stop", session="web")),
        done(),
    ])
    assert outcome.status == "done"
    results = [m["content"] for m in tool_messages(outcome.requests[-1])]
    assert results[1].startswith("200")
    assert "session web stopped" in results[2]
    tails = [r["messages"][-1]["content"] for r in outcome.requests]
    assert "Terminal session web (`python3 -m http.server 8766`): running for" in tails[1]
    assert "Terminal session web" not in tails[3]  # stopped: no longer listed
    shown = [c["arguments"] for s in outcome.doc["steps"] for c in s["tool_calls"]]
    assert shown[0] == {"command": "python3 -m http.server 8766", "session": "web", "wait": 2}
    timeline = "\n".join(step_lines(outcome.doc))  # cairn show: the session call in short
    assert "$ python3 -m http.server 8766 [session web]" in timeline


def test_a_flooding_session_is_offloaded_and_all_it_printed_is_kept(tmp_path):
    outcome = play(tmp_path, [turn(call("shell_start", command="seq 1 300000", session="flood", wait=20)), done()])
    finished = outcome.events("tool_finished")[0]
    assert finished.offloaded_to and finished.offloaded_to.startswith("/cairn/obs/1-shell_start")
    sent = tool_messages(outcome.requests[-1])[0]["content"]
    assert len(sent) < 20_000 and sent.startswith("[Output too big for the context")
    saved = (outcome.run.cairn_dir / "obs" / "1-shell_start.txt").read_text()
    assert saved.startswith("1\n2\n3\n") and saved.endswith("299999\n300000")
    assert "bytes of output omitted here; all that the session printed is kept in /cairn/sessions/flood.log" in saved
    log = (outcome.run.cairn_dir / "sessions" / "flood.log").read_bytes()
    assert log.split(b"\r\n")[:-1] == [str(n).encode() for n in range(1, 300001)]


def test_sessions_that_died_with_a_killed_run_are_reported_gone_after_resume(tmp_path, sandbox_image):
    from tests.runs.test_survives_sigkill import Cairn, kill, requests, wait_for

    cairn = Cairn(tmp_path)
    proc, _ = cairn.start("run", "sessions crash", "--model", cairn.script([
        turn(call("shell_start", command="python3 -q", session="py", wait=1)),
        turn(call("shell_exec", command="sleep 600")),
    ]))
    run_started = lambda: (list(cairn.runs_dir.glob("*/cairn/sessions/sessions.json")) and  # noqa: E731
                           any('sleep 600' in line for line in
                               next(cairn.runs_dir.glob("*/state/events.jsonl")).read_text().splitlines()
                               if '"tool_started"' in line))
    wait_for(run_started, proc)
    kill(proc)
    resumed, log = cairn.run("resume", "@last", "--model", cairn.script([
        turn(call("shell_send", session="py", keys="1 + 1\n")),
        done(),
    ]))
    assert resumed.returncode == 0, resumed.stderr
    sent = requests(log)
    assert "Terminal session py (`python3 -q`) is gone" in sent[0]["messages"][-1]["content"]
    answer = [m["content"] for m in sent[-1]["messages"] if m["role"] == "tool"][-1]
    assert "error: session py is gone" in answer and "/cairn/sessions/py.log" in answer  # in its framing
    assert "Terminal session py" not in sent[-1]["messages"][-1]["content"]  # told once it was named
