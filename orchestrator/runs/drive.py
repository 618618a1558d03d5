"""The one sequence that drives a run, used by every entry point: `cairn run`/`resume`, the Python API,
batches on threads and on Ray nodes (and the web page and the Harbor agent, which drive runs too).

    take a `cairn stop` left from the run's last end (it is not for this one)
    open a LiveRun (sandbox, model, tools; recovery of a resumed run), go, keep going while asked
    a run that never started says why in its log
    let go of the run's lock, however the drive ended (a program, a batch or a test goes on after it)

Everything else an entry point does (its display, what it prints, its exit code) stays its own.
"""

from __future__ import annotations

import sys
import traceback
from dataclasses import dataclass
from typing import Any, Callable

from orchestrator.config import RunConfig
from orchestrator.errors import CairnError, SandboxError
from orchestrator.ports import Display, Model, Sandbox
from orchestrator.runs.compose import LiveRun, exit_code, mark_failed
from orchestrator.store.liveness import RunIsLive
from orchestrator.store.run_dir import RunDir


@dataclass
class Driven:
    """How a driven run ended."""

    status: str
    error: CairnError | None  # what made the run fail, when cairn (not the model) ended it
    check: dict[str, Any] | None  # the last --check verdict, if any

    @property
    def exit_code(self) -> int:
        """What `cairn run` exits with (docs/contracts.md): the check counts only for a run that is done."""
        return exit_code(self.status, self.error, self.check if self.status == "done" else None)


def drive(run: RunDir, cfg: RunConfig, display: Display, *, resumed: bool = False, message: str | None = None,
          source: str | None = None, opened: Callable[[LiveRun], None] | None = None,
          more: Callable[[LiveRun, str], tuple[str, str] | None] | None = None, record_every_failure: bool = False,
          sandbox: Sandbox | None = None, hold: bool = True, model: Model | None = None) -> Driven:
    """Drive `run` until it ends (or, with `more`, until `more` has nothing more to say).

    `message`: the person's words for the first request (an answer, when `resumed`). `opened(live)`:
    called once the live runs, so the caller can stop it (a batch's Ctrl-C). `more(live, status)`:
    after each end, the person's next words and their source ("answer" or "user"), or None to finish
    (interactive mode, and a question asked on the terminal). A failure before the run
    started raises, and a new run records why; with `record_every_failure` (batches, where nobody reads
    the exception) every failure is recorded in the run, a resumed one's too, and nothing is raised but
    a KeyboardInterrupt: the `Driven` then holds the error. `sandbox`, `model`: other parts than cairn's
    Docker sandbox and the client of the run's model (the Harbor agent's sandbox; orchestrator.Agent's
    own). `hold=False`: another process holds the run's lock (a Ray batch's driver, for its nodes)."""
    run.take_stop_request()  # a `cairn stop` that came as the run last ended is not for this one
    live: LiveRun | None = None
    try:
        with LiveRun(run, cfg, display, resumed=resumed, sandbox=sandbox, hold=hold, model=model) as live:
            if opened is not None:
                opened(live)
            status = live.go(message, source=source or ("answer" if resumed and message else "user"))
            while more is not None:
                said = more(live, status)  # interactive: after a Ctrl-C too, the person's next words
                if said is None:
                    break
                live.agent.stop_requested, live.agent.stopped_by = False, None  # that stop is behind it now
                status = live.go(said[0], source=said[1])
            return Driven(status, live.agent.error, live.agent.state.check)
    except Exception as exc:
        if not record_every_failure:
            if isinstance(exc, CairnError) and not isinstance(exc, RunIsLive) and live is None and not resumed:
                mark_failed(run, exc.message)  # the agent's own failures end inside the loop
            raise
        error = exc if isinstance(exc, CairnError) else CairnError(f"{type(exc).__name__}: {exc}")
        try:
            mark_failed(run, error.message)
        except Exception:  # noqa: BLE001 - the state dir itself may be the problem
            pass
        if not isinstance(exc, (CairnError, SandboxError)):
            traceback.print_exc(file=sys.stderr)  # a bug of cairn's: its trace, once
        return Driven("failed", error, None)
    finally:
        if hold:
            run.release()  # after the failure is recorded: until then no other process may take the run
