"""The host's end of the channel: requests come on stdin, one at a time, and between them it is silent;
each answer is signed with the key the host sent first (see "the channel's integrity" below)."""

from __future__ import annotations

import array
import fcntl
import hashlib
import hmac
import json
import os
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


# -- the channel's integrity (PROTOCOL.md, "The channel") ------------------------------------------
#
# The agent runs in the same container as the toolbox, as root in the default profile and as the
# toolbox's own uid under --lockdown. Two things keep it from speaking for the toolbox:
# 1. the toolbox makes itself non-dumpable before it reads anything, so the kernel refuses other
#    processes its /proc/<pid>/fd (its stdin and stdout), environ, mem and ptrace (gVisor ignores this
#    for /proc: 2.);
# 2. every answer carries an HMAC-SHA256, under a key the host sends as the first line on stdin (never
#    in argv or the environment, which other processes can read), over the exact request line and the
#    answer, so an answer nobody with the key wrote, or one to another request, is refused by the host.

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
