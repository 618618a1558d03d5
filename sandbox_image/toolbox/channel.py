"""The host's end of the channel: requests come on stdin, one at a time, and between them it is silent."""

from __future__ import annotations

import array
import fcntl
import select
import termios


class Host:
    """The host's side of the toolbox's stdin (`fd`). A long command watches it: when the host goes away
    (cairn died or was killed), nobody will read the result, so the command must not go on changing the
    workspace behind the run's back."""

    def __init__(self, fd: int = 0) -> None:
        self.fd = fd

    def gone(self) -> bool:
        """stdin is readable with nothing to read: the host closed it (end of file)."""
        waiting = array.array("i", [0])
        try:
            fcntl.ioctl(self.fd, termios.FIONREAD, waiting)
        except OSError:
            return False
        return waiting[0] == 0

    def left(self, ready: list) -> bool:
        """Whether the host went away, given what a select() over the host's fd (and others) found ready."""
        return self.fd in ready and self.gone()

    def left_now(self) -> bool:
        return self.left(select.select([self.fd], [], [], 0)[0])
