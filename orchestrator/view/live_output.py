"""The output of the call that runs now, as far as it came: what the page's live pane, `cairn watch` and
`cairn run`'s live display show while a call runs.

- A shell command (`shell_exec`): the toolbox copies its output into `<run>/cairn/live/shell.out` while
  it runs (sandbox_image/PROTOCOL.md), emptied as each command starts.
- A terminal session (`shell_start`, `shell_send`): the toolbox appends all that the session prints to
  its log, `<run>/cairn/sessions/<name>.log`, listed in `sessions/sessions.json`; it is shown as the
  session's answer shows it, rendered by the same terminal emulator (tools/sessions/screen.py): the
  lines it printed, or the screen of a full-screen program.

The sandbox writes these files, so they are read as untrusted: opened one path component at a time
with O_NOFOLLOW (no link is followed, at any depth), non-blocking (a FIFO there never hangs the
reader), only when the descriptor is a regular file, and only their last bytes.
"""

from __future__ import annotations

import codecs
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

LIVE_OUTPUT = Path("live") / "shell.out"  # under the run's cairn/ (the toolbox's capture.LIVE_OUTPUT)
SESSIONS = Path("sessions")  # the sessions' logs and their registry, under cairn/ (toolbox/sessions.py)
REGISTRY = SESSIONS / "sessions.json"
TAIL_BYTES = 64 * 1024
REGISTRY_BYTES = 256 * 1024
SESSION_SIZE = (120, 40)  # the toolbox's terminal: columns, rows (PROTOCOL.md)
SESSION_LINES = 200  # the last lines of a session that prints lines
SHELL_CALL = "shell_exec"
SESSION_CALLS = ("shell_start", "shell_send")
LOG_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,80}\.log$")
STALE_S = 0.25  # a live file last written this long before the call started is the last command's


def open_regular(root: Path, rel: Path) -> int | None:
    """A descriptor of the regular file `rel` under `root`, reached without following any link; None
    when there is none (missing, a link, a FIFO, a folder...)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        for part in rel.parts[:-1]:
            inner = os.open(part, flags | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        found = os.open(rel.parts[-1], flags, dir_fd=fd)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        if stat.S_ISREG(os.fstat(found).st_mode):
            return found
    except OSError:
        pass
    os.close(found)
    return None


def _tail(root: Path, rel: Path, size: int = TAIL_BYTES) -> tuple[bytes, os.stat_result] | None:
    """The last `size` bytes of a regular file, and its stat; None when there is no such file."""
    fd = open_regular(root, rel)
    if fd is None:
        return None
    try:
        info = os.fstat(fd)
        return os.pread(fd, size, max(0, info.st_size - size)), info
    except OSError:
        return None
    finally:
        os.close(fd)


def live_output(cairn_dir: Path, tail: int = TAIL_BYTES) -> str | None:
    """The last `tail` bytes of the running command's output, as text; None when there is none to read."""
    found = _tail(cairn_dir, LIVE_OUTPUT, tail)
    if found is None:
        return None
    data, info = found
    if info.st_size > len(data):  # cut in the middle of a line: start at the next one
        data = data[data.find(b"\n") + 1:] if b"\n" in data else data
    return data.decode("utf-8", "replace")


def running_output(cairn_dir: Path, call: dict[str, Any]) -> str | None:
    """What the running call (a view's `running`: name, arguments, since) has shown so far; None for a
    call that shows nothing while it runs."""
    if call.get("name") == SHELL_CALL:
        return live_output(cairn_dir)
    if call.get("name") in SESSION_CALLS:
        return session_screen(cairn_dir, call)
    return None


# -- terminal sessions ------------------------------------------------------------------------------

def session_log(cairn_dir: Path, call: dict[str, Any]) -> Path | None:
    """The log (under cairn/) of the session a session call acts on: the one it names, else (a
    `shell_start` left to name its session) the newest started since the call began."""
    try:
        raw = json.loads(call.get("arguments") or "{}")
    except (TypeError, ValueError):
        return None
    name = raw.get("session") if isinstance(raw, dict) else None
    found = _tail(cairn_dir, REGISTRY, REGISTRY_BYTES)
    if found is None or found[1].st_size > REGISTRY_BYTES:
        return None
    try:
        entries = json.loads(found[0])
    except ValueError:
        return None
    best: tuple[float, str] | None = None
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict) or not isinstance(entry.get("log_path"), str):
            continue
        started = entry.get("started")
        started = float(started) if isinstance(started, (int, float)) and not isinstance(started, bool) else 0.0
        log = entry["log_path"].rsplit("/", 1)[-1]
        if not LOG_NAME.match(log):
            continue
        if isinstance(name, str) and name:
            if entry.get("name") == name:
                return SESSIONS / log
        elif started >= float(call.get("since") or 0) - 1 and (best is None or started > best[0]):
            best = (started, log)
    return SESSIONS / best[1] if best else None


def render_tail(data: bytes, columns: int, rows: int) -> str:
    """What the end of a session's output shows: the screen of a full-screen program that has it, else
    the last lines it printed (carriage returns, erasures and cursor moves applied, as in its answer)."""
    import pyte  # here: `cairn ls` reads the view and never renders a session

    from orchestrator.tools.sessions.screen import Terminal

    terminal = Terminal(columns, rows)
    pyte.ByteStream(terminal).feed(data)
    screen = terminal.rows()
    if terminal.alternate:
        while screen and not screen[-1]:
            screen.pop()
        return "\n".join(screen)
    lines = [terminal.row(line) for line in terminal.scrolled] + screen[: terminal.cursor.y + 1]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines[-SESSION_LINES:])


def session_screen(cairn_dir: Path, call: dict[str, Any]) -> str | None:
    log = session_log(cairn_dir, call)
    found = _tail(cairn_dir, log) if log is not None else None
    if found is None:
        return None
    return render_tail(found[0], *SESSION_SIZE)


# -- following one call ---------------------------------------------------------------------------

class Follower:
    """What one running call shows, look after look: `read()` gives the text that came since the last
    look (appended, for a command) or the whole screen again (for a session whose log grew)."""

    def __init__(self, cairn_dir: Path, call: dict[str, Any]) -> None:
        self.cairn_dir, self.call = cairn_dir, call
        self.since = float(call.get("since") or 0)
        self.offset: int | None = None  # of shell.out: where the next look reads from
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.seen: tuple[int, int] | None = None  # a session log's size and mtime at the last look
        self.screen: str | None = None

    def read(self) -> tuple[str, bool] | None:
        """(text, replace): new text to add (replace False) or the whole output anew (True); None when
        nothing new came."""
        if self.call.get("name") == SHELL_CALL:
            return self._command()
        if self.call.get("name") in SESSION_CALLS:
            return self._session()
        return None

    def new_bytes(self) -> tuple[bytes, bool] | None:
        """The command's bytes that came since the last look, and whether they start its output anew."""
        fd = open_regular(self.cairn_dir, LIVE_OUTPUT)
        if fd is None:
            return None
        try:
            info = os.fstat(fd)
            if info.st_mtime < self.since - STALE_S:
                return None  # still the last command's output: this one has not begun to write
            again = self.offset is None or info.st_size < self.offset  # first look, or emptied since
            if again:
                self.offset = max(0, info.st_size - TAIL_BYTES)
            if info.st_size == self.offset and not again:
                return None
            data = os.pread(fd, min(TAIL_BYTES, info.st_size - self.offset), self.offset)
        except OSError:
            return None
        finally:
            os.close(fd)
        self.offset += len(data)
        return data, again

    def _command(self) -> tuple[str, bool] | None:
        got = self.new_bytes()
        if got is None:
            return None
        data, again = got
        if again:
            self.decoder.reset()
        text = self.decoder.decode(data)
        return (text, again) if text or again else None

    def _session(self) -> tuple[str, bool] | None:
        log = session_log(self.cairn_dir, self.call)
        fd = open_regular(self.cairn_dir, log) if log is not None else None
        if fd is None:
            return None
        try:
            info = os.fstat(fd)
            seen = (info.st_size, info.st_mtime_ns)
            if seen == self.seen:
                return None  # nothing printed since the last look: nothing to render
            self.seen = seen
            data = os.pread(fd, TAIL_BYTES, max(0, info.st_size - TAIL_BYTES))
        except OSError:
            return None
        finally:
            os.close(fd)
        screen = render_tail(data, *SESSION_SIZE)
        if screen == self.screen:
            return None
        self.screen = screen
        return screen, True
