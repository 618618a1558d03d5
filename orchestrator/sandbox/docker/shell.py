"""`cairn shell`: an interactive shell in a run's kept container, else in a fresh sandbox on its workspace.
docker-py has no interactive terminal, so the shell goes through the docker command line client; this
is the one place outside the engine client that knows so."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable

from orchestrator.config import SandboxConfig
from orchestrator.errors import UsageError
from orchestrator.sandbox.docker.sandbox import DockerSandbox
from orchestrator.sandbox.docker import container as containers
from orchestrator.sandbox.docker.engine import connect
from orchestrator.sandbox.docker.image import ensure_image
from orchestrator.store.run_dir import RunDir

SHELL = ["sh", "-c", "command -v bash >/dev/null && exec bash || exec sh"]


def open_shell(run_dir: RunDir, settings: Callable[[], SandboxConfig], is_live: Callable[[], bool],
               say: Callable[[str], None]) -> int:
    """Run a shell for the person at the terminal and return its exit code. `settings` gives the run's
    sandbox settings (read only when a fresh sandbox is needed); `is_live` tells whether the run is
    running, so that a kept container started for the shell is stopped again only when it is not."""
    docker_cli = shutil.which("docker")
    if docker_cli is None:
        raise UsageError("cairn shell needs the docker command line client on PATH")
    tty = ["-t"] if sys.stdin.isatty() and sys.stdout.isatty() else []
    client = connect()
    kept = containers.find(client, run_dir.id, run_dir.root)
    if kept is not None:
        started = kept.status != "running"
        if started:
            client.api.start(kept.id)
        say(f"a shell in the container of run {run_dir.id} ({'started for it' if started else 'running'})")
        try:
            return subprocess.call([docker_cli, "exec", "-i", *tty, kept.name, *SHELL])
        finally:
            if started and not is_live():  # as it was found: stopped
                containers.stop(client, kept.id)
    cfg = settings()
    run_dir.cairn_dir.mkdir(exist_ok=True)
    sandbox = DockerSandbox(f"{run_dir.id}-shell", run_dir.workspace, cfg, image=cfg.image or ensure_image(),
                      client=client, cairn_mount=run_dir.cairn_dir, external=run_dir.external_workspace is not None)
    say(f"run {run_dir.id} holds no container: a shell in a fresh sandbox on its workspace")
    sandbox.start()
    try:
        return subprocess.call([docker_cli, "exec", "-i", *tty, "-w", cfg.workdir, sandbox.container.name, *SHELL])
    finally:
        sandbox.stop()
