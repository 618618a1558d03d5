"""`cairn ARGS` run inside the test's own process, answering as `subprocess.run` would.

A `cairn` subprocess costs a new interpreter and its imports (litellm alone 2.5-3 s of CPU when the
command reaches a model); in process, each module is imported once per session. The command goes
through `orchestrator.cli.main`, so its exit code and its `cairn: error: ...` line are the real ones.
Use it for commands that end on their own in the test's process: usage errors, the read commands,
import and export, a run refused before it starts. A test about signals, a kill, a second process
reading a live run, or the process's own imports (what `--help` loads) keeps a real subprocess.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
from pathlib import Path
from unittest import mock


class _Stream(io.StringIO):
    """A pipe's stand-in: text, not a terminal, with the encoding a subprocess's pipe would have."""

    encoding = "utf-8"

    def isatty(self) -> bool:
        return False


def cairn_in_process(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
                     input: str = "") -> subprocess.CompletedProcess:
    """Run `cairn ARGS` with exactly `env` as its environment (as subprocess's `env=`) in `cwd`."""
    import orchestrator.cli as cli
    from orchestrator.store.liveness import TAKE_PATIENCE_S, RunLock

    out, err = _Stream(), _Stream()
    code: int | str | None = 0
    taken: list[RunLock] = []
    take = RunLock.take.__func__

    def take_and_note(cls: type[RunLock], state: Path, patience: float = TAKE_PATIENCE_S) -> RunLock | None:
        lock = take(cls, state, patience)
        if lock is not None:
            taken.append(lock)
        return lock

    # main() ends with os._exit once litellm is loaded (to skip the interpreter's teardown): here it must
    # only raise, as sys.exit does, so the test's process goes on.
    with contextlib.ExitStack() as stack:
        # A process's end lets go of every run lock it took, whatever still refers to it; here the
        # command's locks are let go of as it returns, not when the garbage collector gets to them.
        stack.callback(lambda: [lock.release() for lock in taken])
        stack.enter_context(mock.patch.object(RunLock, "take", classmethod(take_and_note)))
        stack.enter_context(mock.patch.object(cli, "_exit", sys.exit))
        for signum in (signal.SIGTERM, signal.SIGINT):  # main() and a run set their own handlers
            stack.callback(signal.signal, signum, signal.getsignal(signum))
        stack.enter_context(mock.patch.object(sys, "argv", ["cairn", *args]))
        stack.enter_context(mock.patch.dict(os.environ, env if env is not None else dict(os.environ), clear=True))
        stack.enter_context(mock.patch.object(sys, "stdin", _Stream(input)))
        stack.enter_context(contextlib.redirect_stdout(out))
        stack.enter_context(contextlib.redirect_stderr(err))
        stack.enter_context(contextlib.chdir(cwd or os.getcwd()))
        try:
            cli.main()
        except SystemExit as done:
            code = done.code
    if isinstance(code, str):  # as the interpreter does with sys.exit("message")
        err.write(code + "\n")
        code = 1
    return subprocess.CompletedProcess(["cairn", *args], code or 0, out.getvalue(), err.getvalue())
