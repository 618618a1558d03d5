"""What the page's buttons do, each through cairn's own operation, as the CLI does it.

`Send` is `cairn say` (store/inbox.say) on a live run; on a run that waits for an answer or has ended it
is `cairn resume RUN --message TEXT`, where runs/resume.py decides what the words are (the answer to
the agent's question, or a follow-up); `send_plan` says which before the person sends. `Stop` is `cairn stop` (RunDir.request_stop), `Approve`/`Deny`
is `cairn approve` (approval_answers.record_answer). A run that is to go on, after an answer, on `Resume` or from
the new-run form, is driven by `cairn resume` / `cairn run` in a process of its own, started detached
(its own session: Ctrl-C on the server does not reach it, and it outlives the server), so it is an
ordinary run that `cairn ls`, `watch` and `stop` see like any other. Its output goes to a log file in the
server's folder of logs; when it ends within moments (a wrong model, a run that cannot go on), the page
is told the error line it printed.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from orchestrator.errors import CairnError
from orchestrator.status import Status
from orchestrator.store.liveness import run_is_live
from orchestrator.store.run_dir import RunDir
from orchestrator.view.read import UNREADABLE, RunView

START_WAIT_S = 90.0  # for a new run to show up (importing the model library, starting its sandbox)
RESUME_WAIT_S = 3.0  # for a resume to fail at once; after that it runs, or ended of its own accord


class ActionError(CairnError):
    """A button that cannot do what it says, with one line why (shown on the page)."""


def say(run: RunDir, text: str) -> str:
    from orchestrator.store.inbox import say as append_message

    if not text.strip():
        raise ActionError("the message is empty")
    append_message(run.state, text)
    return ("the run gets the message at its next step" if run_is_live(run) else
            "the run is not running: it gets the message when it goes on")


SAY, ANSWER, FOLLOW_UP = "say", "answer", "follow-up"


def send_plan(view: RunView, approval: dict[str, Any] | None) -> dict[str, str | None]:
    """What Send does with the Message box on this run, and the words that say so on the page:
    `does` is `say` (the message waits in the run's inbox), `answer` or `follow-up` (the run is resumed
    with it, as `cairn resume RUN --message` does), or None (nothing can be sent)."""
    if view.live:
        return {"does": SAY, "hint": "Send: the agent gets the message at its next step."}
    if view.status in (UNREADABLE, Status.RUNNING):
        return {"does": None, "hint": f"the run is {view.status}: nothing can be sent to it."}
    if approval is not None and not approval.get("answered"):
        return {"does": SAY, "hint": "The run waits for approval: Approve or Deny it. A message sent now "
                                     "reaches the agent after that."}
    if view.status == Status.WAITING:
        return {"does": ANSWER, "hint": "Send answers the agent's question and resumes the run."}
    hint = {Status.DONE: "The run is done: Send follows it up with your message and resumes it.",
            Status.BUDGET: "The run ran out of budget: Send resumes it with your message (its limits still hold: "
                           f"cairn resume {view.id} --max-steps N, --max-cost USD raises them)."}
    return {"does": FOLLOW_UP, "hint": hint.get(view.status, f"The run is {view.status}: Send resumes it with "
                                                               "your message.")}


def stop(run: RunDir) -> str:
    if not run_is_live(run):
        raise ActionError(f"run {run.id} is not running")
    run.request_stop()
    return "the run stops now: its running command is cut short"


def answer(run: RunDir, approved: bool, reason: str | None) -> str:
    from orchestrator.agent.approval_answers import record_answer

    if run_is_live(run):
        raise ActionError(f"run {run.id} is running; it waits for an approval only once it has stopped")
    if not approved and not (reason or "").strip():
        raise ActionError("a denial needs a reason (it is told to the model)")
    recorded = record_answer(run, approved=approved, reason=None if approved else reason)
    return f"{recorded.name} {'approved' if approved else 'denied'}"


# The new-run form's fields and the `cairn run` options they are.
FORM_OPTIONS = (("model", "--model"), ("api_base", "--api-base"), ("template", "--template"), ("image", "--image"),
                ("workdir", "--workdir"), ("check", "--check"), ("max_steps", "--max-steps"),
                ("max_cost", "--max-cost"))


def _checked(key: str, value: str) -> str:
    """A form field as its option takes it; an ActionError in one line when it is not one."""
    if key == "max_steps" and not (value.isdigit() and int(value) >= 1):
        raise ActionError(f"Max steps is a whole number of 1 or more, not {value[:40]!r}")
    if key == "max_cost":
        try:
            ok = float(value) >= 0 and value.strip().lower() not in ("nan", "inf", "+inf", "infinity")
        except ValueError:
            ok = False
        if not ok:
            raise ActionError(f"Max cost is a number of dollars (0.5, 2), not {value[:40]!r}")
    if key == "api_base" and not value.startswith(("http://", "https://")):
        raise ActionError(f"API base is an http:// or https:// address (http://localhost:8000/v1), not {value[:80]!r}")
    return value


class Launcher:
    """Starts `cairn` commands in the background and remembers them until they end (so none is left a
    zombie while the server runs). Logs go to `logs`."""

    def __init__(self, runs_dir: Path, logs: Path) -> None:
        self.runs_dir, self.logs = runs_dir, logs

    def spawn(self, args: list[str], name: str) -> tuple[subprocess.Popen, Path]:
        self.logs.mkdir(parents=True, exist_ok=True)
        log = self.logs / f"{time.strftime('%Y%m%d-%H%M%S')}-{name}-{os.urandom(3).hex()}.log"
        with open(log, "wb") as out:
            command, *rest = args  # the options before a `--` that ends them
            proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", command, "--runs-dir", str(self.runs_dir),
                                     *rest],
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True, close_fds=True, env=_environment())
        threading.Thread(target=proc.wait, name=f"cairn-serve-wait-{proc.pid}", daemon=True).start()
        return proc, log

    async def resume(self, run: RunDir, message: str | None = None) -> str:
        if run_is_live(run):
            raise ActionError(f"run {run.id} is running already")
        args = ["resume", run.id] + (["--message", message] if message else [])
        proc, log = self.spawn(args, f"resume-{run.id}")
        deadline = time.monotonic() + RESUME_WAIT_S
        while time.monotonic() < deadline and proc.poll() is None and not run_is_live(run):
            await asyncio.sleep(0.05)
        if proc.poll() not in (None, 0) and not _went_on(run):
            raise ActionError(_error_line(log) or f"cairn resume ended with exit code {proc.returncode}")
        return "the run goes on"

    async def start(self, form: dict[str, Any]) -> str:
        """`cairn run` with the form's task, model and API base, template or image, work directory, check
        and limits; the new run's id once its process is live (it writes its pid in the run's state)."""
        args = ["run"]
        for key, option in FORM_OPTIONS:
            value = form.get(key)
            if value:
                args += [option, _checked(key, value)]
        task = form.get("task") or ""
        if not task.strip():
            raise ActionError("the task is empty")
        before = {p.name for p in self.runs_dir.iterdir()} if self.runs_dir.is_dir() else set()
        proc, log = self.spawn([*args, "--", task], "run")
        deadline = time.monotonic() + START_WAIT_S
        while time.monotonic() < deadline:
            found = self._run_of(proc.pid, before)
            if found is not None:
                return found
            if proc.poll() is not None:
                found = self._run_of(proc.pid, before, any_new=True)
                if found is not None:  # it ended already (a very short run)
                    return found
                raise ActionError(_error_line(log) or f"cairn run ended with exit code {proc.returncode}")
            await asyncio.sleep(0.1)
        raise ActionError(f"the run did not start within {START_WAIT_S:.0f} s (its output: {log})")

    def _run_of(self, pid: int, before: set[str], any_new: bool = False) -> str | None:
        """The new run that process `pid` drives (its state/pid names it); with `any_new`, a new run
        whose process has ended already and whose run.json names this task's start."""
        if not self.runs_dir.is_dir():
            return None
        for path in self.runs_dir.iterdir():
            if path.name in before or not (path / "state").is_dir():
                continue
            try:
                recorded = json.loads((path / "state" / "pid").read_text())
            except (OSError, ValueError):
                if any_new and (path / "state" / "run.json").exists():
                    return path.name
                continue
            if isinstance(recorded, dict) and recorded.get("pid") == pid:
                return path.name
        return None


def _went_on(run: RunDir) -> bool:
    """The resumed run ended of its own accord within moments (its status was written since)."""
    try:
        return time.time() - float(run.read_meta().get("updated") or 0) < RESUME_WAIT_S + 1
    except (CairnError, ValueError, TypeError):
        return False


def _error_line(log: Path) -> str | None:
    """The `cairn: error: ...` line a failed command printed, with its hint."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return None
    for k, line in enumerate(lines):
        if line.startswith("cairn: error: "):
            hint = lines[k + 1].strip() if k + 1 < len(lines) and lines[k + 1].startswith("  hint:") else ""
            return line.removeprefix("cairn: error: ") + (f" ({hint})" if hint else "")
    said = [line.strip(" │╭╰─╮╯") for line in lines]  # the last line with words, out of a usage box
    said = [line for line in said if any(c.isalpha() for c in line)]
    return said[-1][:300] if said else None


def _environment() -> dict[str, str]:
    """The server's environment (the model's key is there), without a terminal's colours in the logs."""
    env = dict(os.environ)
    env["NO_COLOR"] = "1"
    return env
