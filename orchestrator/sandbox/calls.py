"""One toolbox op, whatever the backend: the config's defaults filled in, how long the host waits for its
answer, and its response as the op's result or a ToolError (the port's error, which the model sees);
which ops may be in flight together (`OpGate`), and the journal's records the host no longer needs
(`Recorded`)."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

from orchestrator.config import SandboxConfig
from orchestrator.errors import ToolError

# Time the host allows beyond an op's own timeout before it declares the toolbox stuck: killing a
# command's processes, restarting bash and sending a large output back all take a little.
HOST_GRACE_SECONDS = 30.0
DEFAULT_OP_SECONDS = 60.0  # read, write, edit, list, ping
FETCH_SECONDS = 30.0


def op_result(response: dict, restarted: str | None = None) -> dict:
    """A toolbox response as the op's result, or ToolError with its reason. `restarted`: why the sandbox was started again before the op, said with it."""
    if not response.get("ok"):
        error = response.get("error") or "the toolbox gave no reason"
        raise ToolError(f"{error} (and: {restarted})" if restarted else error)
    result = response["result"]
    if restarted:
        result["sandbox_restarted"] = restarted
    return result


def with_defaults(cfg: SandboxConfig, op: str, args: dict) -> tuple[dict, float]:
    """The op's arguments with the config's defaults filled in, and how long the host waits for it."""
    if op == "shell":
        timeout = args.get("timeout")
        if timeout is None or (isinstance(timeout, (int, float)) and not isinstance(timeout, bool)):
            timeout = cfg.shell_timeout(timeout)
            args = {**args, "timeout": timeout}
        else:  # not a number: the toolbox refuses it with a clear message
            timeout = cfg.command_timeout
        args = {"inline_bytes": cfg.inline_output_bytes, "max_file_bytes": cfg.max_output_file_bytes, **args}
        return args, timeout + HOST_GRACE_SECONDS
    if op == "fetch":
        return args, FETCH_SECONDS + HOST_GRACE_SECONDS
    if op in ("session_start", "session_send"):  # the toolbox answers after `wait` at the latest
        wait = args.get("wait")
        numeric = isinstance(wait, (int, float)) and not isinstance(wait, bool)
        return args, (float(wait) if numeric else DEFAULT_OP_SECONDS) + HOST_GRACE_SECONDS
    return args, DEFAULT_OP_SECONDS


# Ops the toolbox runs side by side (sandbox_image/toolbox/dispatch.py): they change nothing another op sees.
TOGETHER_OPS = frozenset({"read", "list", "fetch"})


class OpGate:
    """Who may send a request now: read-only ops (TOGETHER_OPS) go together, any other op goes alone, as
    the toolbox expects (PROTOCOL.md, "Framing"). An op waiting to go alone holds back new read-only ones."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._together = 0  # read-only ops in flight
        self._alone = False  # an op that goes alone is in flight
        self._queued = 0  # ops waiting to go alone

    @contextmanager
    def enter(self, op: str) -> Iterator[None]:
        together = op in TOGETHER_OPS
        with self._changed:
            if together:
                self._changed.wait_for(lambda: not self._alone and not self._queued)
                self._together += 1
            else:
                self._queued += 1
                self._changed.wait_for(lambda: not self._alone and not self._together)
                self._queued -= 1
                self._alone = True
        try:
            yield
        finally:
            with self._changed:
                if together:
                    self._together -= 1
                else:
                    self._alone = False
                self._changed.notify_all()


class Recorded:
    """Keys of calls whose outcomes the run has logged, for the next request to tell the toolbox, which
    then drops their records from its journal (PROTOCOL.md, "The journal")."""

    def __init__(self) -> None:
        self._keys: list[str] = []
        self._lock = threading.Lock()

    def add(self, key: str) -> None:
        with self._lock:
            self._keys.append(key)

    def take(self) -> list[str]:
        with self._lock:
            keys, self._keys = self._keys, []
        return keys

    def give_back(self, keys: list[str]) -> None:
        """Keys a request took and did not deliver: the next one tells them (telling twice is harmless)."""
        with self._lock:
            self._keys[:0] = keys
