"""The host's end of the toolbox's channel, whatever the backend carries it (PROTOCOL.md, "The channel").

The agent shares its container with the toolbox, so the host believes no line on the channel until it
has checked it: every answer carries a MAC under a key only the host and that toolbox hold, over the
exact request line it answers (with a fresh nonce in every request) and the answer itself. A line that
is missing its MAC, has a wrong one, answers another request, is longer than ANSWER_LIMIT or is not
JSON is not the toolbox's answer: the channel was tampered with, and the caller treats the toolbox as
dead (the call fails; it is never taken as the call's result).

    channel = Channel()
    send(channel.key_line())                  # the first line, before any request
    ready = channel.ready(read_line())        # {"ready": true, "pid", "uid", "version", "dumpable"}
    request = channel.request("shell", {"command": "ls"})
    send(request.line)                        # signed too: the toolbox drops a line the agent wrote
    response = channel.answer(request, read_line())   # {"id", "ok", "result" | "error"}
    send(channel.interrupt_line(request.id))  # a person's stop, signed like any request

Several requests may be in flight at once (read-only ops): `answer_among` finds which one a line answers.
"""

from __future__ import annotations

import hmac
import json
import re
import secrets
from dataclasses import dataclass
from typing import Mapping

from orchestrator.errors import SandboxError
from orchestrator.sandbox_image.toolbox.channel import (INTERRUPT, KEY_BYTES, MAC_FIELD, MAC_SUFFIX_LENGTH, REQUEST,
                                                       host_signed, mac)

PROTOCOL_VERSION = 3
# The longest answer line the host reads. The toolbox's longest honest answer is a full screen's span of
# a terminal session: 4 MiB, 5.3 MiB as base64; an inline output of 256 KiB is at most 1.5 MiB once
# JSON escapes every byte. A bigger `inline_output_bytes` setting raises it (`answer_limit`).
ANSWER_LIMIT = 32 * 1024 * 1024


class Tampered(SandboxError):
    """A line on the channel that is not the toolbox's answer to the request sent."""


def answer_limit(inline_bytes: int) -> int:
    """The longest answer line to accept when outputs up to `inline_bytes` come back inline: JSON may
    write each byte as a 6-character escape."""
    return max(ANSWER_LIMIT, 7 * inline_bytes + 1024 * 1024)


@dataclass(frozen=True)
class Request:
    id: int
    line: bytes  # as sent, with its newline


class Channel:
    """One toolbox's key (made here, or the one a relay made and reported: `key`) and the numbering of
    its requests."""

    def __init__(self, key: bytes | None = None) -> None:
        self.key = key if key is not None else secrets.token_bytes(KEY_BYTES)
        if len(self.key) != KEY_BYTES:
            raise ValueError(f"a toolbox key is {KEY_BYTES} bytes")
        self._next_id = 0

    def key_line(self) -> bytes:
        """The first line the toolbox reads. It never goes in argv or the environment: any process in the
        container can read those."""
        return key_line(self.key)

    def ready(self, raw: bytes) -> dict:
        """The ready line's result, checked: signed over the key line, id 0, this protocol's version."""
        message = self._opened(self.key_line(), raw, 0, "the ready line")
        result = message.get("result")
        if not message.get("ok") or not isinstance(result, dict) or result.get("ready") is not True:
            raise Tampered(f"the toolbox's first line is not its ready line: {shown(raw)}")
        if result.get("version") != PROTOCOL_VERSION:
            raise Tampered(f"the toolbox speaks protocol version {result.get('version')!r}; this cairn speaks "
                           f"{PROTOCOL_VERSION}")
        return result

    def request(self, op: str, args: dict, call: str | None = None, recorded: list[str] | None = None) -> Request:
        """The next request's line, signed: a new id and a nonce no earlier answer was signed over.
        `recorded`: journal keys of calls whose outcomes the run has logged (PROTOCOL.md, "The journal")."""
        self._next_id += 1
        message = {"id": self._next_id, "nonce": secrets.token_hex(16), "op": op, "args": args,
                   **({"call": call} if call else {}), **({"recorded": recorded} if recorded else {})}
        body = json.dumps(message, ensure_ascii=False).encode("utf-8", "surrogateescape")
        return Request(self._next_id, host_signed(self.key, REQUEST, body))

    def interrupt_line(self, rid: int) -> bytes:
        """The signed line that asks the toolbox to cut request `rid` short (a person's stop)."""
        body = json.dumps({"op": INTERRUPT, "id": rid}).encode("ascii")
        return host_signed(self.key, INTERRUPT.encode("ascii"), body)

    def answer(self, request: Request, raw: bytes) -> dict:
        """The response to `request`, once `raw` (one line, without its newline) is shown to be the
        toolbox's answer to it; Tampered otherwise."""
        return self._opened(request.line, raw, request.id, "the answer")

    def answer_among(self, requests: Mapping[int, Request], raw: bytes) -> dict:
        """The response `raw` is, to one of `requests` (those in flight, by id); Tampered when it answers
        none of them. The id it claims only says which request's MAC to check."""
        claimed = _CLAIMED_ID.match(raw)
        request = requests.get(int(claimed.group(1))) if claimed else None
        if request is None:
            raise Tampered(f"the answer names no request in flight ({shown(raw)})")
        return self.answer(request, raw)

    def _opened(self, request: bytes, raw: bytes, rid: int, what: str) -> dict:
        raw = raw.rstrip(b"\r\n")
        suffix = raw[-MAC_SUFFIX_LENGTH:]
        if len(raw) <= MAC_SUFFIX_LENGTH or not suffix.startswith(MAC_FIELD) or not suffix.endswith(b'"}'):
            raise Tampered(f"{what} carries no MAC: not the toolbox's ({shown(raw)})")
        body = raw[:-MAC_SUFFIX_LENGTH] + b"}"
        if not hmac.compare_digest(suffix[len(MAC_FIELD):-2], mac(self.key, request, body).encode("ascii")):
            raise Tampered(f"{what} has a wrong MAC: not the toolbox's answer to this request ({shown(raw)})")
        message = parse(body)
        if not isinstance(message, dict) or message.get("id") != rid or isinstance(message.get("id"), bool):
            raise Tampered(f"{what} answers another request ({shown(raw)})")
        return message


_CLAIMED_ID = re.compile(rb'\{"id": (\d{1,18}),')  # the toolbox writes the id first


def key_line(key: bytes) -> bytes:
    return b'{"key": "' + key.hex().encode("ascii") + b'"}\n'


def key_from_line(line: bytes) -> bytes:
    """The key in a key line (a relay reports the one it made so); Tampered when it is not one."""
    try:
        key = bytes.fromhex(json.loads(line)["key"])
    except (ValueError, TypeError, KeyError, RecursionError):
        raise Tampered(f"not a key line: {shown(line)}") from None
    if len(key) != KEY_BYTES or key_line(key) != line.rstrip(b"\n") + b"\n":
        raise Tampered(f"not a key line: {shown(line)}")
    return key


def parse(text: bytes | str) -> object:
    """JSON from the sandbox: malformed or absurdly nested text is a Tampered error, never another kind."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise Tampered(f"not JSON ({type(exc).__name__})") from None


def shown(raw: bytes, width: int = 120) -> str:
    """A line from the sandbox in an error message: escaped, and cut short."""
    text = repr(raw[:width])
    return text + (f" ... ({len(raw):,} bytes)" if len(raw) > width else "")


class Lines:
    """A byte stream cut into lines, none longer than `limit`: past it, `next_line` raises LineTooLong
    instead of holding more (a peer that never sends a newline cannot grow the host)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._data = bytearray()
        self._searched = 0  # no newline before this offset: each byte is searched once

    def feed(self, data: bytes) -> None:
        self._data += data
        if self._data.find(b"\n", self._searched) < 0:
            self._searched = len(self._data)
            if len(self._data) > self.limit:
                raise LineTooLong(f"a line longer than {self.limit:,} bytes")

    def pending(self) -> bool:
        """Whether anything but blank lines came that no one has read."""
        return bool(self._data.strip())

    def next_line(self) -> bytes | None:
        """The next whole line without its newline, or None until one is whole."""
        end = self._data.find(b"\n", self._searched)
        if end < 0:
            self._searched = len(self._data)
            return None
        if end > self.limit:
            raise LineTooLong(f"a line longer than {self.limit:,} bytes")
        line = bytes(self._data[:end])
        del self._data[:end + 1]
        self._searched = 0
        return line


class LineTooLong(Tampered):
    """A line past the reader's limit."""
