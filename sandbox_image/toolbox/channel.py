"""The host's end of the channel: requests come on stdin, one at a time, and between them it is silent;
every line the host sends is signed with the key it sent first, and so is every answer (see "the
channel's integrity" below).

While an op runs the host may write one more line, `{"op": "interrupt", "id": N, "mac": ...}`: a person
asked to stop now, and op N is cut short (its command's processes killed, a session's wait ended),
answering at once. An interrupt gets no answer of its own, and one for an op that has already answered
is dropped. A line whose MAC is not the host's, an interrupt included, is dropped unread (stderr says
so): the agent beside the toolbox cannot ask it for anything. The host going away (end of file) ends
whatever runs: nobody will read its result.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import select
import sys

INTERRUPT = "interrupt"


class Host:
    """The host's side of the toolbox's stdin (`fd`), read through one buffer: by the request loop
    between ops (`requests`), and by a running op to notice the host leaving or interrupting it."""

    def __init__(self, fd: int = 0, key: bytes | None = None) -> None:
        """`key`: the one the host's lines are signed with; until it is set (`first_line`, then `key =`)
        no request or interrupt is taken."""
        self.fd = fd
        self.key = key
        self._seen: set = set()  # ids of the requests taken: a request sent again is not run again
        self._buffer = bytearray()
        self._eof = False
        self._interrupted: set = set()  # ids of the ops the host asked to cut short
        self.current = None  # the id of the op that runs now

    def first_line(self) -> bytes:
        """The first line on stdin, as it came (the host's key line), or b"" at end of file."""
        return next(self._lines(), b"")

    def requests(self):
        """The request lines the host signed, in order, until it closes stdin; interrupt lines are taken
        aside, and any other line is dropped."""
        for line in self._lines():
            rid = self._from_host(line, REQUEST)
            if rid is not None and rid not in self._seen:
                self._seen.add(rid)
                yield line

    def _lines(self):
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
            if not _INTERRUPT_LINE.match(line):
                kept += line
                continue
            op_id = self._from_host(line, INTERRUPT.encode())
            if op_id is not None:
                self._interrupted.add(op_id)
        self._buffer = kept

    def _from_host(self, line: bytes, purpose: bytes) -> int | None:
        """The id of a line the host signed for `purpose` (REQUEST or INTERRUPT); None, said on stderr,
        for any other (the agent wrote it, or it was changed on its way)."""
        body = opened(self.key, purpose, line) if self.key is not None else None
        found = _ID.match(body or b"")
        if found is None:
            print(f"toolbox: a line on stdin that the host did not sign was dropped: {line[:80]!r}",
                  file=sys.stderr, flush=True)
            return None
        return int(found.group(1))


# The host writes "id" first in every line it sends; an interrupt line is short and says what it is first.
_ID = re.compile(rb'\{"(?:op": "interrupt", ")?id": (\d{1,18})[,}]')
_INTERRUPT_LINE = re.compile(rb'\{"op": "interrupt", "id": \d{1,18}, "mac": "[0-9a-f]{64}"\}\r?\n?$')


# -- the channel's integrity (PROTOCOL.md, "The channel") ------------------------------------------
#
# The agent runs in the same container as the toolbox, as root in the default profile and as the
# toolbox's own uid under --lockdown. Two things keep it from speaking for the toolbox:
# 1. the toolbox makes itself non-dumpable before it reads anything, so the kernel refuses other
#    processes its /proc/<pid>/fd (its stdin and stdout), environ, mem and ptrace (gVisor ignores this
#    for /proc: 2.);
# 2. every answer carries an HMAC-SHA256, under a key the host sends as the first line on stdin (never
#    in argv or the environment, which other processes can read), over the exact request line and the
#    answer, so an answer nobody with the key wrote, or one to another request, is refused by the host;
# 3. every line the host sends (a request, an interrupt) carries an HMAC under the same key, so a line
#    the agent wrote where gVisor lets it reach our stdin asks for nothing: it is dropped (`Host`).

KEY_BYTES = 32
MAC_FIELD = b', "mac": "'  # the answer line ends with this, 64 hex digits and '"}'
MAC_SUFFIX_LENGTH = len(MAC_FIELD) + 64 + 2


class BadKey(Exception):
    """The first line on stdin is not the host's key line."""


def not_dumpable() -> bool:
    """Make this process non-dumpable (prctl PR_SET_DUMPABLE 0); True when it is. Children keep the flag
    until they exec, so no command or session inherits it. Without ctypes, root can still get it by a
    credential change, which sets the flag to the host's fs.suid_dumpable (0 by default)."""
    try:
        import ctypes  # a Python built without _ctypes lacks it

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE
        return libc.prctl(3, 0, 0, 0, 0) == 0  # PR_GET_DUMPABLE
    except (ImportError, OSError, AttributeError):
        pass
    if os.geteuid() != 0:
        return False
    try:  # a change of credentials sets the flag to fs.suid_dumpable, which is 0 unless the host changed it
        gid = os.getegid()
        os.setegid(gid + 1)
        os.setegid(gid)
        with open("/proc/sys/fs/suid_dumpable") as setting:
            return setting.read().strip() == "0"
    except OSError:
        return False


def read_key(line: bytes) -> bytes:
    """The key from the host's first line, `{"key": "<64 hex digits>"}`."""
    try:
        key = bytes.fromhex(json.loads(line)["key"])
    except (ValueError, TypeError, KeyError):
        raise BadKey("the first line on stdin must be the host's key line") from None
    if len(key) != KEY_BYTES:
        raise BadKey(f"the key must be {KEY_BYTES} bytes")
    return key


def request_bytes(line: bytes) -> bytes:
    """A request line as the MAC covers it: without its line end."""
    return line[:-1] if line.endswith(b"\n") else line


def mac(key: bytes, request: bytes, body: bytes) -> str:
    """The answer's MAC: HMAC-SHA256 over the request line (without its newline), a newline and the
    answer's JSON text without the mac field."""
    return hmac.new(key, request_bytes(request) + b"\n" + body, hashlib.sha256).hexdigest()


def signed(key: bytes, request: bytes, message: dict) -> bytes:
    """The answer line for `request`: `message` as JSON (ASCII: file names may hold undecodable bytes that
    UTF-8 cannot carry) with the mac field last."""
    body = json.dumps(message).encode("ascii")
    return body[:-1] + MAC_FIELD + mac(key, request, body).encode("ascii") + b'"}\n'


# The host's lines. A request, `{"id": N, "nonce", "op", "args", ..., "mac"}`, and an interrupt,
# `{"op": "interrupt", "id": N, "mac"}`, carry an HMAC-SHA256 under the same key over their purpose
# ("request" or "interrupt"), a newline and their JSON text without the mac field: a line of the agent's,
# or one line passed off as the other kind, is dropped. The toolbox runs each request id once.

REQUEST = b"request"


def host_mac(key: bytes, purpose: bytes, body: bytes) -> str:
    return hmac.new(key, purpose + b"\n" + body, hashlib.sha256).hexdigest()


def host_signed(key: bytes, purpose: bytes, body: bytes) -> bytes:
    """The line the host sends for `body` (a JSON object's text, without a newline)."""
    return body[:-1] + MAC_FIELD + host_mac(key, purpose, body).encode("ascii") + b'"}\n'


def opened(key: bytes, purpose: bytes, line: bytes) -> bytes | None:
    """The JSON text of a line the host signed for `purpose`, without its mac field; None if it is not one."""
    line = request_bytes(line).rstrip(b"\r")
    suffix = line[-MAC_SUFFIX_LENGTH:]
    if len(line) <= MAC_SUFFIX_LENGTH or not suffix.startswith(MAC_FIELD) or not suffix.endswith(b'"}'):
        return None
    body = line[:-MAC_SUFFIX_LENGTH] + b"}"
    good = host_mac(key, purpose, body).encode("ascii")
    return body if hmac.compare_digest(suffix[len(MAC_FIELD):-2], good) else None
