"""A `cairn` command on a real terminal: a tmux pane of a given width, read with capture-pane (what a
person sees) and typed into with send-keys."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent


class Pane:
    def __init__(self, name: str, runs_dir: Path, args: list[str], env: dict[str, str] | None = None,
                 width: int = 160, height: int = 48) -> None:
        self.name, self.runs = name, runs_dir
        command = shlex.join(["env", "-u", "EDITOR", "-u", "VISUAL", f"CAIRN_RUNS_DIR={runs_dir}",
                              *(f"{k}={v}" for k, v in (env or {}).items()),
                              sys.executable, "-m", "orchestrator.cli", *args])
        subprocess.run(["tmux", "new-session", "-d", "-s", name, "-x", str(width), "-y", str(height), "-c", str(ROOT),
                        f"{command}; echo EXIT=$?; sleep 300"], check=True)

    def screen(self) -> str:
        return subprocess.run(["tmux", "capture-pane", "-p", "-t", self.name, "-S", "-"], capture_output=True,
                              text=True, check=True).stdout

    def wait_for(self, text: str, count: int = 1, timeout: float = 120) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            screen = self.screen()
            if screen.count(text) >= count:
                return screen
            time.sleep(0.2)
        raise AssertionError(f"{text!r} (x{count}) never appeared; the screen:\n{self.screen()}")

    def type(self, *lines: str) -> None:
        for line in lines:
            subprocess.run(["tmux", "send-keys", "-t", self.name, "-l", line], check=True)
            subprocess.run(["tmux", "send-keys", "-t", self.name, "Enter"], check=True)

    def keys(self, *keys: str) -> None:
        subprocess.run(["tmux", "send-keys", "-t", self.name, *keys], check=True)

    def close(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True)


@pytest.fixture
def pane(tmp_path: Path, runs_dir: Path):  # noqa: ANN201 - yields the maker of panes
    """`pane(args, env=..., width=...)`: a cairn command in a new tmux pane on this test's runs dir."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (apt-get install tmux)")
    made: list[Pane] = []

    def start(args: list[str], env: dict[str, str] | None = None, width: int = 160) -> Pane:
        made.append(Pane(f"cairn-term-{os.getpid()}-{tmp_path.name}-{len(made)}", runs_dir, args, env, width))
        return made[-1]
    yield start
    for p in made:
        p.close()


def script(path: Path, *turns: dict[str, Any]) -> str:
    path.write_text(json.dumps({"turns": list(turns)}))
    return f"scripted:{path}"
