"""Errors a person sees: each carries a one-line message and the exit code of docs/contracts.md."""

from __future__ import annotations

EXIT_DONE = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_BUDGET = 3
EXIT_SANDBOX = 4
EXIT_INTERRUPTED = 130


class CairnError(Exception):
    """An error with a clear one-line message for the person at the terminal."""

    exit_code = EXIT_FAILED

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class UsageError(CairnError):
    """Bad input from the person: a broken config, an unknown run id, a wrong option."""

    exit_code = EXIT_USAGE


class SandboxError(CairnError):
    """The sandbox could not be started or reached (no engine, no image, a dead container)."""

    exit_code = EXIT_SANDBOX


class ToolError(Exception):
    """An op failed in a way the model should see and can act on: a path outside the workspace, no such
    file, an edit that is not unique. The message is one line. (Raised by every Sandbox, real or fake.)"""


def first_line(error: BaseException | str, limit: int = 300) -> str:
    """The first non-empty line of an error or a text, cut at `limit`: what a one-line message quotes.
    An exception that says nothing is named by its class; an empty text is "no detail"."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if lines:
        return lines[0][:limit]
    return type(error).__name__ if isinstance(error, BaseException) else "no detail"
