"""The host's end of the channel: requests come on stdin, one at a time, and between them it is silent.

While an op runs the host may write one more line, `{"op": "interrupt", "id": N}`: a person asked to
stop now, and op N is cut short (its command's processes killed, a session's wait ended), answering at
once. An interrupt gets no answer of its own, and one for an op that has already answered is dropped.
The host going away (end of file) ends whatever runs: nobody will read its result.
"""

from __future__ import annotations

import json
import os
import select

INTERRUPT = "interrupt"


class Host:
    """The host's side of the toolbox's stdin (`fd`), read through one buffer: by the request loop
    between ops (`requests`), and by a running op to notice the host leaving or interrupting it."""

    def __init__(self, fd: int = 0) -> None:
        self.fd = fd
        self._buffer = bytearray()
        self._eof = False
        self._interrupted: set = set()  # ids of the ops the host asked to cut short
        self.current = None  # the id of the op that runs now

    def requests(self):
        """The request lines, in order, until the host closes stdin; interrupt lines are taken aside."""
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line = bytes(self._buffer[:end + 1])
                del self._buffer[:end + 1]
                if line.strip():
                    yield line
                continue
            if self._eof:
                return
            select.select([self.fd], [], [])
            self._read()

    def left(self, ready: list) -> bool:
        """Whether the host went away, given what a select() over the host's fd (and others) found ready.
        Reads what came meanwhile: an interrupt is noted for `interrupted`."""
        if self.fd in ready:
            self._read()
        return self._eof

    def left_now(self) -> bool:
        return self.left(select.select([self.fd], [], [], 0)[0])

    def answered(self, op_id: object) -> None:
        """Op `op_id` has answered: an interrupt for it that comes later is dropped."""
        self._interrupted.discard(op_id)
        self.current = None

    def interrupted(self, op_id: object = None) -> bool:
        """Whether the host asked to cut op `op_id` (by default the one that runs now) short."""
        return (self.current if op_id is None else op_id) in self._interrupted

    def _read(self) -> None:
        try:
            data = os.read(self.fd, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._eof = True
            return
        self._buffer += data
        self._take_interrupts()

    def _take_interrupts(self) -> None:
        """Interrupt lines are not requests: they leave the buffer here, whenever they came."""
        kept, start = bytearray(), 0
        while True:
            end = self._buffer.find(b"\n", start)
            if end < 0:
                kept += self._buffer[start:]
                break
            line = bytes(self._buffer[start:end + 1])
            start = end + 1
            op_id = _interrupt_id(line)
            if op_id is None:
                kept += line
            else:
                self._interrupted.add(op_id)
        self._buffer = kept


def _interrupt_id(line: bytes) -> object:
    """The op an interrupt line names; None for any other line (a short look first: requests can be MBs)."""
    if len(line) > 200 or INTERRUPT.encode() not in line:
        return None
    try:
        message = json.loads(line)
    except ValueError:
        return None
    if isinstance(message, dict) and message.get("op") == INTERRUPT and "args" not in message:
        return message.get("id")
    return None
