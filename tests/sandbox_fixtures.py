"""Fixtures shared by the sandbox tests; test modules import the ones they use.

The image is, in order: `$CAIRN_TEST_IMAGE` (an explicit choice wins, and spares a build), the image
`orchestrator.sandbox.docker.image.ensure_image()` builds from sandbox_image/, or `cairn-sandbox-dev:latest`
when that module is not there.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from orchestrator.errors import SandboxError
from orchestrator.sandbox import toolbox_files
from orchestrator.sandbox.channel import Channel

DEV_IMAGE = "cairn-sandbox-dev:latest"
TOOLBOX = toolbox_files.folder()  # run as a program: `python3 TOOLBOX --workdir ...`


@pytest.fixture(scope="session")
def docker_client() -> docker.DockerClient:
    from orchestrator.sandbox.docker.engine import connect

    try:
        return connect()
    except SandboxError as exc:
        pytest.skip(f"no Docker engine: {exc.message}")


@pytest.fixture(scope="session")
def sandbox_image(docker_client: docker.DockerClient) -> str:
    if os.environ.get("CAIRN_TEST_IMAGE"):
        return os.environ["CAIRN_TEST_IMAGE"]
    try:
        from orchestrator.sandbox.docker.image import ensure_image
    except ImportError:
        return DEV_IMAGE
    return ensure_image()


class ToolboxProcess:
    """The toolbox run on the host with --root, spoken to over pipes exactly as the host client does: its
    key first, then requests whose answers are checked (sandbox/channel.py).

    `root` stands for the work directory (/workspace unless `workdir`), `cairn` for /cairn (default: a
    `cairn` directory beside `root`)."""

    def __init__(self, root: Path, cairn: Path | None = None, workdir: str = "/workspace",
                 lockdown: bool = False) -> None:
        self.root = Path(root)
        self.cairn = Path(cairn) if cairn is not None else self.root.parent / f"{self.root.name}-cairn"
        self.cairn.mkdir(exist_ok=True)
        self.process = subprocess.Popen(
            [sys.executable, str(TOOLBOX), "--workdir", workdir, "--cairn", str(self.cairn),
             *(["--lockdown"] if lockdown else []), "--root", str(root)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.channel = Channel()
        self.process.stdin.write(self.channel.key_line())
        self.process.stdin.flush()
        self.ready = self.channel.ready(self._line())
        self.last = None  # the last request sent (sandbox.channel.Request)
        self.sent: dict = {}  # id -> the requests sent whose answers have not been read

    def send(self, op: str, call: str | None = None, recorded: list[str] | None = None, **args: object) -> int:
        """Send a request without waiting for its answer (`receive` reads it); `call`: its journal key;
        `recorded`: the journal keys the host has logged. Returns its id."""
        self.last = self.channel.request(op, args, call, recorded)
        self.sent[self.last.id] = self.last
        self.write(self.last.line)
        return self.last.id

    def interrupt(self, rid: int) -> None:
        """The host's signed interrupt line for request `rid`."""
        self.write(self.channel.interrupt_line(rid))

    def write(self, line: bytes) -> None:
        """Any bytes on the toolbox's stdin (a forged line, say)."""
        self.process.stdin.write(line)
        self.process.stdin.flush()

    def receive(self) -> dict:
        """The next answer, checked against the request in flight it names."""
        answer = self.channel.answer_among(self.sent, self._line())
        del self.sent[answer["id"]]
        return answer

    def request(self, op: str, call: str | None = None, **args: object) -> dict:
        """The whole response: {"id", "ok", "result"} or {"id", "ok", "error"}."""
        self.send(op, call, **args)
        return self.receive()

    def result(self, op: str, **args: object) -> dict:
        response = self.request(op, **args)
        assert response["ok"], response
        return response["result"]

    def error(self, op: str, **args: object) -> str:
        response = self.request(op, **args)
        assert not response["ok"], response
        return response["error"]

    def _line(self) -> bytes:
        line = self.process.stdout.readline()
        assert line, f"the toolbox exited: {self.process.stderr.read().decode()}"
        return line

    def close(self) -> None:
        """End it (end of file on its stdin); what it wrote on stderr is kept in `stderr`."""
        self.process.stdin.close()
        self.process.wait(timeout=10)
        self.process.stdout.close()
        self.stderr = self.process.stderr.read()
        self.process.stderr.close()


@pytest.fixture(scope="module")
def toolbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ToolboxProcess]:
    process = ToolboxProcess(tmp_path_factory.mktemp("root"))
    yield process
    process.close()


@pytest.fixture(scope="module")
def locked_toolbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ToolboxProcess]:
    """A toolbox as `--lockdown` starts it: paths outside the work directory and cairn's are refused."""
    process = ToolboxProcess(tmp_path_factory.mktemp("root"), lockdown=True)
    yield process
    process.close()


def build_image(client: docker.DockerClient, dockerfile: str, tag: str) -> str:
    """Build `dockerfile` (no other file in its context) as `tag`, and return the tag."""
    data = dockerfile.encode()
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    context.seek(0)
    client.images.build(fileobj=context, custom_context=True, tag=tag, rm=True)
    return tag
