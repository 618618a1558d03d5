"""The relay that keeps the toolbox alive in a Harbor environment (orchestrator/sandbox/harbor/relay.py),
run here on the host with the real toolbox (--root), no Harbor and no Docker: each `call` is one process,
as each op is one `exec` there, and the toolbox's shell lives across them."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.sandbox.harbor.relay import GONE
from tests.sandbox_fixtures import TOOLBOX

RELAY = Path(__file__).resolve().parents[2] / "orchestrator" / "sandbox" / "harbor" / "relay.py"


class Relay:
    def __init__(self, root: Path) -> None:
        # A short folder of its own: a Unix socket's path has room for about 100 bytes.
        self.socket = str(Path(tempfile.mkdtemp(prefix="relay-")) / "toolbox.sock")
        (root / "work").mkdir()
        toolbox = [sys.executable, str(TOOLBOX), "--workdir", "/workspace", "--cairn", str(root / "cairn"),
                   "--root", str(root / "work")]
        self.server = subprocess.Popen([sys.executable, str(RELAY), "serve", self.socket, "--", *toolbox],
                                       stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while not (Path(self.socket).exists() and Path(self.socket + ".ready").exists()):
            assert self.server.poll() is None and time.monotonic() < deadline, self.server.stderr.read()
            time.sleep(0.05)
        self.next_id = 0

    def call(self, op: str, *, as_file: bool = False, **args: object) -> subprocess.CompletedProcess:
        self.next_id += 1
        line = json.dumps({"id": self.next_id, "op": op, "args": args}).encode()
        if as_file:
            request = Path(tempfile.mkdtemp()) / "request.json"
            request.write_bytes(line)
            argv = ["--file", str(request)]
        else:
            argv = [base64.b64encode(line).decode()]
        return subprocess.run([sys.executable, str(RELAY), "call", self.socket, *argv], capture_output=True, text=True)

    def result(self, op: str, **args: object) -> dict:
        done = self.call(op, **args)
        assert done.returncode == 0, done.stderr
        response = json.loads(done.stdout)
        assert response["ok"] and response["id"] == self.next_id, response
        return response["result"]


@pytest.fixture
def relay(tmp_path: Path) -> Iterator[Relay]:
    relay = Relay(tmp_path)
    yield relay
    relay.server.terminate()
    relay.server.wait(timeout=10)
    relay.server.stderr.close()


def test_the_ready_line_is_the_toolboxs_and_each_call_is_one_process(relay: Relay) -> None:
    ready = json.loads(Path(relay.socket + ".ready").read_text())
    assert ready["id"] == 0 and ready["ok"]
    assert relay.result("ping") is not None


def test_the_shell_keeps_its_directory_and_variables_from_one_call_to_the_next(relay: Relay) -> None:
    relay.result("shell", command="mkdir -p sub && cd sub && export ANSWER=42", timeout=30)
    second = relay.result("shell", command='pwd; echo "answer=$ANSWER"', timeout=30)
    assert second["output"].splitlines()[0].endswith("/work/sub") and "answer=42" in second["output"]


def test_a_request_too_long_for_an_argument_goes_as_a_file_and_the_file_is_removed(relay: Relay, tmp_path) -> None:
    content = "x" * 300_000
    done = relay.call("write", as_file=True, path="big.txt", content=content)
    assert done.returncode == 0 and json.loads(done.stdout)["ok"], done.stdout + done.stderr
    assert (tmp_path / "work" / "big.txt").read_text() == content
    assert relay.result("read", path="big.txt")


def test_an_ops_error_comes_back_as_the_toolboxs_answer(relay: Relay) -> None:
    done = relay.call("read", path="no-such-file")
    response = json.loads(done.stdout)
    assert done.returncode == 0 and not response["ok"] and "no-such-file" in response["error"]


def test_once_the_relay_is_gone_a_call_exits_with_its_own_code_and_says_why(relay: Relay) -> None:
    relay.server.terminate()
    relay.server.wait(timeout=10)
    done = relay.call("ping")
    assert done.returncode == GONE and "relay" in done.stderr
