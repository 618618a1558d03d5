"""What a session showed, rendered by a real terminal emulator (pyte) from the raw bytes it printed.

Two readings of the same bytes. A program that writes lines (a shell, a REPL, a build) is read as the
lines it printed since the last answer: carriage returns, backspaces, erased lines and cursor moves are
applied as a terminal applies them, so a progress bar is its last state, not a hundred redraws, and
colours are dropped. A full-screen program (one on the alternate screen: vim, less, htop, a curses UI)
is read as its screen, rendered from everything it drew since it took the screen.
"""

from __future__ import annotations

from typing import Any

import pyte
from pyte.screens import StaticDefaultDict

_ALTERNATE = {1049 << 5, 1047 << 5, 47 << 5}  # pyte keeps private modes shifted by 5 bits


class Terminal(pyte.Screen):
    """pyte's screen, plus the two things a session needs of it: lines that scroll off the top are kept
    (`scrolled`), and the alternate screen is a screen of its own, so a full-screen program that quit
    leaves the lines before it as they were (pyte itself draws both on one)."""

    def __init__(self, columns: int, rows: int, keep_scrolled: bool = True) -> None:
        self.scrolled: list[StaticDefaultDict] = []
        self.keep_scrolled = keep_scrolled  # a screen's rendering shows no lines that scrolled away
        self._main: tuple[dict, Any] | None = None  # the main screen and cursor, while the alternate is shown
        super().__init__(columns, rows)

    @property
    def alternate(self) -> bool:
        return self._main is not None

    def set_mode(self, *modes: int, **kwargs: Any) -> None:
        super().set_mode(*modes, **kwargs)
        if kwargs.get("private") and {m << 5 for m in modes} & _ALTERNATE and self._main is None:
            self._main = ({y: _copy(line) for y, line in self.buffer.items()}, self.cursor)
            self.cursor = pyte.screens.Cursor(self.cursor.x, self.cursor.y, self.cursor.attrs)
            self.buffer.clear()

    def reset_mode(self, *modes: int, **kwargs: Any) -> None:
        super().reset_mode(*modes, **kwargs)
        if kwargs.get("private") and {m << 5 for m in modes} & _ALTERNATE and self._main is not None:
            (lines, cursor), self._main = self._main, None
            self.buffer.clear()
            self.buffer.update(lines)
            self.cursor = cursor

    def index(self) -> None:
        top, bottom = self.margins or (0, self.lines - 1)
        if self.cursor.y == bottom and top == 0 and self._main is None and self.keep_scrolled:
            self.scrolled.append(self.buffer[top])
        super().index()

    def row(self, line: dict | None) -> str:
        """One row as text, trailing blanks cut. Only the cells written are visited: a row is a sparse
        dict, and most of a 120x40 screen is never written."""
        if not line:
            return ""
        cells = [" "] * (min(max(line), self.columns - 1) + 1)
        for x, char in line.items():
            if x < self.columns:
                cells[x] = char.data
        return "".join(cells).rstrip()

    def rows(self) -> list[str]:
        return [self.row(self.buffer.get(y)) for y in range(self.lines)]


def _copy(line: StaticDefaultDict) -> StaticDefaultDict:
    copy = StaticDefaultDict(line.default)
    copy.update(line)
    return copy


def render_lines(data: bytes, columns: int, rows: int, on_screen: bool = False) -> str:
    """The lines `data` shows when printed from the start of a line: those that scrolled away, then the
    screen's rows down to the last one written (or the cursor's). Trailing blanks are cut. `on_screen`:
    `data` begins while a full-screen program still has the screen (it is leaving it), so what it draws
    before it gives the screen back is not part of the lines."""
    terminal = Terminal(columns, rows)
    if on_screen:
        terminal.set_mode(1049, private=True)
    pyte.ByteStream(terminal).feed(data)
    if terminal.alternate:  # it took the screen and has not given it back: show the lines from before
        terminal.reset_mode(1049, private=True)
    shown = [terminal.row(line) for line in terminal.scrolled]
    screen = terminal.rows()
    last = max([terminal.cursor.y] + [y for y, text in enumerate(screen) if text])
    shown += screen[: last + 1]
    while shown and not shown[-1]:
        shown.pop()
    return "\n".join(shown)


def render_screen(data: bytes, columns: int, rows: int) -> tuple[str, tuple[int, int]]:
    """The screen a full-screen program drew with `data` (all it drew since it took the screen): its
    rows, trailing blank rows cut, and the cursor as (row, column), 1-based."""
    terminal = Terminal(columns, rows, keep_scrolled=False)
    terminal.set_mode(1049, private=True)  # `data` begins with the switch; the screen starts empty either way
    pyte.ByteStream(terminal).feed(data)
    screen = terminal.rows()
    while screen and not screen[-1]:
        screen.pop()
    return "\n".join(screen), (terminal.cursor.y + 1, terminal.cursor.x + 1)
