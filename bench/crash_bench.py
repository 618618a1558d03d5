"""Exactly-once tool calls under kill -9: a 30-step ledger run, killed at random and resumed to the end.

    python bench/crash_bench.py [--trials 50] [--seed 1] [--image TAG] [--keep]

Each trial starts `cairn run` as a subprocess, kills it with SIGKILL at a random moment, then runs
`cairn resume` until the run is done (killing some of the resumes too), and reads the ledger.

The model is a loopback OpenAI-compatible server in this process (cairn reaches it through litellm
with `--api-base`, like any endpoint). It plays a careful agent that appends the lines 1..30 to
`ledger.txt`, one a step, with `sleep 0.2; echo N >> ledger.txt` (the sleep makes kills land inside
commands too), and decides each step from the last tool result it sees, as a real model would:
- a result that says the command did not run (`not executed: ...`) → it runs the same command again, so
  a false "not executed" shows up as a duplicate line;
- a result that says the command was killed and may have partly run, or any other error → it checks
  the ledger (`grep -qx N ledger.txt`) and appends N only when it is not there;
- line 30 appended → task_done.

Figures: `duplicates` (lines beyond the first of each number), `lost` (numbers of 1..30 missing),
`resumed_ok` (trials whose run ended `done`). The target is 0 duplicates and 0 lost lines. The last
line is `trials=<n> duplicates=<n> lost=<n> resumed_ok=<n>`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from orchestrator.llm.scripted import Response, ScriptedServer  # noqa: E402

LINES = 30
APPEND = "sleep 0.2; echo {n} >> ledger.txt"
CHECK = "grep -qx {n} ledger.txt && echo present || echo absent"
MAX_RESUMES = 8
WAIT = 300.0  # seconds a cairn command may take on a busy machine before the trial is called failed


# -- the model --------------------------------------------------------------------------------------

def decide(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The next turn (scripted-model format) of the ledger agent, from the conversation so far."""
    last_call, result = _last_call_and_result(messages)
    if last_call is None:
        return _append(1)
    name = last_call["function"]["name"]
    arguments = json.loads(last_call["function"]["arguments"] or "{}")
    command = arguments.get("command", "")
    if name == "task_done":  # its result said it did not take effect: say it again
        return _done()
    appended = re.fullmatch(_pattern(APPEND), command)
    checked = re.fullmatch(_pattern(CHECK), command)
    # It reads a result as a model does, whatever its framing (orchestrator/context/framing.py).
    lines = result.splitlines()
    if appended:
        n = int(appended.group(1))
        if any(line.startswith("not executed") for line in lines):
            return _append(n)
        if _EXIT_0.search(result) and "killed" not in result:
            return _done() if n == LINES else _append(n + 1)
        return _check(n)  # killed, or an error: it may or may not be there
    if checked:
        n = int(checked.group(1))
        if "present" in lines:
            return _done() if n == LINES else _append(n + 1)
        if "absent" in lines:
            return _append(n)
        return _check(n)
    raise ValueError(f"the ledger model did not make this call: {name} {command!r}")


# "[exit code 0, 0.2 s]" and the other forms of that line: "exit code 0", "exit 0 after", "exit status 0".
_EXIT_0 = re.compile(r"\bexit(?: code| status)? 0\b")


def _pattern(template: str) -> str:
    """A regular expression that matches the template's commands, with the number as its group."""
    before, after = template.split("{n}", 1)
    return re.escape(before) + r"(\d+)" + re.escape(after).replace(re.escape("{n}"), r"\1")


def _last_call_and_result(messages: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, str]:
    for i in range(len(messages) - 1, -1, -1):
        message = messages[i]
        if message.get("role") == "assistant" and message.get("tool_calls"):
            call = message["tool_calls"][-1]
            result = next((m.get("content") or "" for m in messages[i + 1:]
                           if m.get("role") == "tool" and m.get("tool_call_id") == call["id"]), "")
            return call, result
    return None, ""


def _append(n: int) -> dict[str, Any]:
    return {"tool_calls": [{"name": "shell_exec", "arguments": {"command": APPEND.format(n=n)}}]}


def _check(n: int) -> dict[str, Any]:
    return {"tool_calls": [{"name": "shell_exec", "arguments": {"command": CHECK.format(n=n)}}]}


def _done() -> dict[str, Any]:
    return {"tool_calls": [{"name": "task_done", "arguments": {"summary": f"appended 1..{LINES}"}}]}


class LedgerModel(ScriptedServer):
    """The scripted server's endpoint (streaming, usage, call ids), with each turn decided from the
    request instead of read from a script: one turn is added per request, so the next turn is it."""

    def __init__(self) -> None:
        super().__init__({"turns": []})
        self._deciding = threading.Lock()

    def respond(self, body: dict) -> Response:
        with self._deciding:
            self.turns.append(decide(body.get("messages") or []))
            return super().respond(body)


# -- one trial --------------------------------------------------------------------------------------

class Trial:
    def __init__(self, root: Path, url: str, rng: random.Random, image: str | None) -> None:
        self.root, self.url, self.rng, self.image = root, url, rng, image
        self.runs_dir = root / "runs"
        self.kills = 0
        self.run_id: str | None = None

    def env(self) -> dict[str, str]:
        return {**os.environ, "CAIRN_RUNS_DIR": str(self.runs_dir), "OPENAI_API_KEY": "crash-bench",
                "LITELLM_LOCAL_MODEL_COST_MAP": "True"}

    def play(self) -> tuple[list[int], str]:
        """Run, kill, resume until done; returns the ledger's numbers and the run's final status."""
        image = ["--image", self.image] if self.image else []
        self.cairn(["run", "append the ledger lines", "--model", "openai/ledger", "--api-base", self.url,
                    "--max-steps", "200", *image], kill=True)
        for attempt in range(MAX_RESUMES):
            status = self.status()
            if status not in ("running", "interrupted"):  # running: the process was killed
                break
            if self.run_id is None:
                break
            self.cairn(["resume", self.run_id], kill=self.rng.random() < 0.3 and attempt < MAX_RESUMES - 2)
        return self.ledger(), self.status()

    def cairn(self, args: list[str], kill: bool) -> None:
        proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", *args], env=self.env(),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        stderr: list[bytes] = []
        reader = threading.Thread(target=lambda: stderr.append(proc.stderr.read()), daemon=True)
        reader.start()
        try:
            if kill and self._wait_for_moment(proc):
                proc.send_signal(signal.SIGKILL)
                self.kills += 1
            proc.wait(timeout=WAIT)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            reader.join(5)
        if self.run_id is None:
            found = [p.name for p in self.runs_dir.iterdir() if p.is_dir()] if self.runs_dir.is_dir() else []
            self.run_id = found[0] if found else None
        if proc.returncode not in (0, -signal.SIGKILL, 130) and stderr and stderr[0].strip():
            print(f"  cairn {args[0]} exited {proc.returncode}: {stderr[0].decode(errors='replace').strip()[-300:]}",
                  flush=True)

    def _wait_for_moment(self, proc: subprocess.Popen) -> bool:
        """Wait for a random moment of the run: a random count of ledger lines, then up to half a second
        more (so the kill lands in a model call, a command, a checkpoint...). False if it ended first."""
        target = self.rng.randint(min(len(self.ledger()), LINES - 1), LINES - 1)
        deadline = time.monotonic() + WAIT
        while proc.poll() is None and time.monotonic() < deadline:
            if self._events_exist() and len(self.ledger()) >= target:
                time.sleep(self.rng.uniform(0, 0.5))
                return proc.poll() is None
            time.sleep(0.02)
        return False

    def _events_exist(self) -> bool:
        return any(self.runs_dir.glob("*/state/events.jsonl")) if self.runs_dir.is_dir() else False

    def ledger(self) -> list[int]:
        paths = list(self.runs_dir.glob("*/workspace/ledger.txt")) if self.runs_dir.is_dir() else []
        if not paths:
            return []
        return [int(line) for line in paths[0].read_text().split() if line.isdigit()]

    def status(self) -> str | None:
        metas = list(self.runs_dir.glob("*/state/run.json")) if self.runs_dir.is_dir() else []
        return json.loads(metas[0].read_text()).get("status") if metas else None

    def cleanup(self) -> None:
        """The run's container, if a failed trial left one (this bench made it)."""
        if self.run_id:
            subprocess.run(["docker", "rm", "-f", f"cairn-{self.run_id}"], capture_output=True)


def score(lines: list[int]) -> tuple[int, int]:
    """(duplicates, lost) of a ledger that should hold 1..LINES once each."""
    counts = Counter(lines)
    duplicates = sum(n - 1 for n in counts.values()) + sum(1 for k in counts if not 1 <= k <= LINES)
    lost = sum(1 for k in range(1, LINES + 1) if k not in counts)
    return duplicates, lost


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--image", default=None, help="sandbox image (default: the one cairn builds)")
    parser.add_argument("--keep", action="store_true", help="keep the trials' run directories")
    options = parser.parse_args()
    if options.image is None:
        from orchestrator.sandbox.docker.image import ensure_image

        options.image = ensure_image()
    rng = random.Random(options.seed)
    model = LedgerModel()
    url = model.start()
    work = Path(tempfile.mkdtemp(prefix="cairn-crash-bench-"))
    totals = Counter()
    try:
        for number in range(1, options.trials + 1):
            trial = Trial(work / f"trial-{number}", url, rng, options.image)
            started = time.monotonic()
            try:
                lines, status = trial.play()
            finally:
                trial.cleanup()
            duplicates, lost = score(lines)
            totals.update(duplicates=duplicates, lost=lost, resumed_ok=int(status == "done"), kills=trial.kills)
            print(f"trial {number}: kills={trial.kills} lines={len(lines)} duplicates={duplicates} lost={lost} "
                  f"status={status} ({time.monotonic() - started:.0f} s)", flush=True)
    finally:
        model.stop()
        if not options.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"kills={totals['kills']} (every trial's first process is killed unless the run ended first)")
    print(f"trials={options.trials} duplicates={totals['duplicates']} lost={totals['lost']} "
          f"resumed_ok={totals['resumed_ok']}")


if __name__ == "__main__":
    main()
