"""The relay that keeps the toolbox alive in a Harbor environment (orchestrator/sandbox/harbor/relay.py),
run here on the host with the real toolbox (--root), no Harbor and no Docker: each `call` is one process,
as each op is one `exec` there, and the toolbox's shell lives across them."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.sandbox.channel import PROTOCOL_VERSION, Channel, key_from_line
from orchestrator.sandbox.harbor.relay import GONE
from tests.sandbox_fixtures import TOOLBOX

RELAY = Path(__file__).resolve().parents[2] / "orchestrator" / "sandbox" / "harbor" / "relay.py"


class Relay:
    def __init__(self, root: Path) -> None:
        # A short folder of its own: a Unix socket's path has room for about 100 bytes.
        self.socket = str(Path(tempfile.mkdtemp(prefix="relay-")) / "toolbox.sock")
        self.log = root / "toolbox.log"
        (root / "work").mkdir()
        toolbox = [sys.executable, str(TOOLBOX), "--workdir", "/workspace", "--cairn", str(root / "cairn"),
                   "--root", str(root / "work")]
        # As Harbor's exec runs it: the command returns once the relay is ready, with its report on stdout.
        started = subprocess.run([sys.executable, str(RELAY), "serve", self.socket, "--log", str(self.log), "--",
                                  *toolbox], capture_output=True, timeout=30)
        assert started.returncode == 0, (started.stderr, self.log.read_text())
        self.key_line, self.ready_line = started.stdout.splitlines(keepends=True)
        self.channel = Channel(key_from_line(self.key_line))
        self.ready = self.channel.ready(self.ready_line)
        self.pid = int(Path(self.socket + ".pid").read_text())
        self.last = None

    def call(self, op: str, *, as_file: bool = False, **args: object) -> subprocess.CompletedProcess:
        self.last = self.channel.request(op, args)
        line = self.last.line
        if as_file:
            request = Path(tempfile.mkdtemp()) / "request.json"
            request.write_bytes(line)
            argv = ["--file", str(request)]
        else:
            argv = [base64.b64encode(line).decode()]
        return subprocess.run([sys.executable, str(RELAY), "call", self.socket, *argv], capture_output=True)

    def answer(self, done: subprocess.CompletedProcess) -> dict:
        assert done.returncode == 0, done.stderr
        return self.channel.answer(self.last, done.stdout)

    def result(self, op: str, **args: object) -> dict:
        response = self.answer(self.call(op, **args))
        assert response["ok"], response
        return response["result"]

    def stop(self) -> None:
        try:
            os.kill(self.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        wait_until_gone(self.pid)


def wait_until_gone(pid: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:  # a dead relay stays a zombie until init, its parent by then, reaps it
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return
        except (FileNotFoundError, ProcessLookupError):
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} did not end")


@pytest.fixture
def relay(tmp_path: Path) -> Iterator[Relay]:
    relay = Relay(tmp_path)
    yield relay
    relay.stop()


def test_the_relay_reports_a_key_of_its_own_and_the_toolboxs_ready_line_signed_with_it(relay: Relay) -> None:
    # Relay() checked the ready line as the host does (sandbox/channel.py): signed over the key line.
    assert relay.ready["ready"] is True and relay.ready["version"] == PROTOCOL_VERSION
    assert relay.result("ping") is not None
    assert relay.key_line.hex() not in relay.log.read_text() and b"key" not in Path(relay.socket + ".pid").read_bytes()


def test_the_shell_keeps_its_directory_and_variables_from_one_call_to_the_next(relay: Relay) -> None:
    relay.result("shell", command="mkdir -p sub && cd sub && export ANSWER=42", timeout=30)
    second = relay.result("shell", command='pwd; echo "answer=$ANSWER"', timeout=30)
    assert second["output"].splitlines()[0].endswith("/work/sub") and "answer=42" in second["output"]


def test_a_request_too_long_for_an_argument_goes_as_a_file_and_the_file_is_removed(relay: Relay, tmp_path) -> None:
    content = "x" * 300_000
    done = relay.call("write", as_file=True, path="big.txt", content=content)
    assert relay.answer(done)["ok"], done.stdout + done.stderr
    assert (tmp_path / "work" / "big.txt").read_text() == content
    assert relay.result("read", path="big.txt")


def test_an_ops_error_comes_back_as_the_toolboxs_answer(relay: Relay) -> None:
    response = relay.answer(relay.call("read", path="no-such-file"))
    assert not response["ok"] and "no-such-file" in response["error"]


def test_a_line_the_agent_sends_to_the_relays_socket_runs_nothing_and_holds_nothing_up(relay: Relay, tmp_path) -> None:
    """The agent can reach the socket: a request it wrote, one signed with another key, a signed one sent
    again and an interrupt line are each refused by the relay at once; the toolbox never sees them."""
    relay.result("shell", command="true", timeout=30)
    replayed = relay.last.line
    forged = [b'{"id": 90, "op": "shell", "args": {"command": "touch forged"}}',
              Channel().request("shell", {"command": "touch other-key"}).line,
              replayed,
              json.dumps({"op": "interrupt", "id": 91}).encode(),
              Channel(relay.channel.key).interrupt_line(91)]
    for line in forged:
        done = subprocess.run([sys.executable, str(RELAY), "call", relay.socket, base64.b64encode(line).decode()],
                              capture_output=True, timeout=30)
        assert done.returncode == 0 and b"passes on only requests the host signed, each once" in done.stdout, done
    assert not list((tmp_path / "work").iterdir())
    assert relay.result("shell", command="echo after", timeout=30)["output"] == "after\n"


def test_once_the_relay_is_gone_a_call_exits_with_its_own_code_and_says_why(relay: Relay) -> None:
    relay.stop()
    done = relay.call("ping")
    assert done.returncode == GONE and b"relay" in done.stderr
