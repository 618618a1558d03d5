"""A terminal session answers as soon as its program waits for input, on every profile: the root profile,
--lockdown, gVisor (--runtime runsc) and an image without Python (the toolbox on the Python cairn carries
in). A busy program (a sleep, a loop that prints, a server) still gets its whole wait. Where whether the
program waits cannot be seen (gVisor, for a program that reads whole lines), the answer waits and says so.

The bounds on time are behaviour, not speed: an early answer comes well before its `wait` of 10 s, a busy
one not before its `wait`. How soon an early answer comes is measured by bench/session_latency.py.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from typing import Any

import docker
import pytest

from orchestrator.sandbox import carried
from orchestrator.sandbox.docker.sandbox import DockerSandbox
from orchestrator.tools.outcome import Observation
from tests.sandbox.test_terminal_sessions import BASE, Tools, open_sandbox
from tests.sandbox_fixtures import docker_client, sandbox_image  # noqa: F401 - fixtures

pytestmark = pytest.mark.docker

PROFILES = ["root", "lockdown", "runsc", "no python"]
WAIT = 10.0
WAITS = "and waits for input"  # the footer of an early answer
CARRIED_PYTHON = f"{carried.LOADER} --library-path {carried.HOME}/lib {carried.PYTHON} -I -S"


@pytest.fixture(scope="module", params=PROFILES)
def profile(request, docker_client, sandbox_image, tmp_path_factory) -> Iterator[tuple[str, DockerSandbox]]:
    name = request.param
    options: dict[str, Any] = {"root": {}, "lockdown": {"lockdown": True}, "runsc": {"runtime": "runsc"},
                               "no python": {}}[name]
    image = sandbox_image
    if name == "runsc" and "runsc" not in (docker_client.info().get("Runtimes") or {}):
        pytest.skip("the engine has no runsc runtime")
    if name == "no python":
        try:
            docker_client.api.inspect_image(BASE)
        except docker.errors.ImageNotFound:
            pytest.skip(f"{BASE} is not in the engine")
        image = BASE
    folder = tmp_path_factory.mktemp(name.replace(" ", "-"))
    with open_sandbox(f"early-{name.replace(' ', '-')}", folder, image, docker_client, **options) as sandbox:
        yield name, sandbox


def python(profile_name: str) -> str:
    return CARRIED_PYTHON if profile_name == "no python" else "python3"


def timed(tools: Tools, name: str, **args: Any) -> tuple[Observation, float]:
    start = time.monotonic()
    answer = tools(name, **args)
    return answer, time.monotonic() - start


def test_a_repl_answers_as_soon_as_it_waits_for_its_next_line(profile):
    name, sandbox = profile
    tools = Tools(sandbox)
    started, took = timed(tools, "shell_start", command=f"{python(name)} -q -i", session="repl", wait=WAIT)
    assert started.text.endswith(">>>") and WAITS in started.footer and took < WAIT / 2, (started.text, took)
    sends = []
    for n in range(5):
        answer, took = timed(tools, "shell_send", session="repl", keys=f"{n} + 40\n", wait=WAIT)
        assert answer.text.splitlines()[-2:] == [str(n + 40), ">>>"] and WAITS in answer.footer, answer.text
        sends.append(took)
    assert statistics.median(sends) < 1.0, sends
    slow, took = timed(tools, "shell_send", session="repl", keys="import time; time.sleep(1.5); print('woke')\n",
                       wait=WAIT)
    assert slow.text.splitlines()[-2:] == ["woke", ">>>"] and 1.5 <= took < WAIT / 2, (slow.text, took)
    tools("shell_stop", session="repl")


def test_a_read_prompt_is_seen_at_once_or_the_answer_says_why_not(profile):
    name, sandbox = profile
    tools = Tools(sandbox)
    command = "read -p 'Your name? ' who; echo \"hello, $who\""
    if name == "runsc":  # gVisor shows a waiting program only by its terminal's mode: line mode is not seen
        asked, took = timed(tools, "shell_start", command=command, session="ask", wait=1)
        assert asked.text == "Your name?" and took >= 1.0
        assert "cairn cannot see here whether it waits for input (this sandbox's kernel (gVisor)" in asked.footer
    else:
        asked, took = timed(tools, "shell_start", command=command, session="ask", wait=WAIT)
        assert asked.text == "Your name?" and WAITS in asked.footer and took < 1.0, (asked.text, took)
    answered, took = timed(tools, "shell_send", session="ask", keys="cairn\n", wait=WAIT)
    assert answered.text.splitlines() == ["cairn", "hello, cairn"] and "exited with code 0" in answered.footer
    assert took < WAIT / 2


@pytest.mark.parametrize("program", ["sleep", "printing loop", "server"])
def test_a_busy_program_gets_its_whole_wait(profile, program):
    name, sandbox = profile
    tools = Tools(sandbox)
    command = {"sleep": "sleep 30", "printing loop": "while true; do echo tick; sleep 0.05; done",
               "server": f"{python(name)} -m http.server 8771"}[program]
    first, took = timed(tools, "shell_start", command=command, session="busy", wait=1)
    assert took >= 1.0 and "still running" in first.footer and WAITS not in first.footer, (first.footer, took)
    again, took = timed(tools, "shell_send", session="busy", keys="", wait=1)
    assert took >= 1.0 and WAITS not in again.footer
    if program == "printing loop":
        assert "tick" in again.text
    tools("shell_stop", session="busy")


def test_a_shell_in_a_session_answers_after_each_command_and_waits_out_a_slow_one(profile):
    _, sandbox = profile
    tools = Tools(sandbox)
    tools("shell_start", command="env PS1='$ ' bash --norc -i", session="sh", wait=WAIT)
    quick, took = timed(tools, "shell_send", session="sh", keys="echo hi\n", wait=WAIT)
    assert quick.text.splitlines()[-2:] == ["hi", "$"] and took < WAIT / 2
    slow, took = timed(tools, "shell_send", session="sh", keys="sleep 1.2; echo done\n", wait=WAIT)
    assert slow.text.splitlines()[-2:] == ["done", "$"] and 1.2 <= took < WAIT / 2, (slow.text, took)
    cut, took = timed(tools, "shell_send", session="sh", keys="sleep 30\n", wait=1)
    assert took >= 1.0 and WAITS not in cut.footer
    tools("shell_send", session="sh", keys="<C-c>", wait=WAIT)
    tools("shell_stop", session="sh")
