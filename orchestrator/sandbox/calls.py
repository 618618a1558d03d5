"""One toolbox op, whatever the backend: the config's defaults filled in, how long the host waits for its
answer, and its response as the op's result or a ToolError (the port's error, which the model sees).

A result is checked before anything reads it: every field the host uses must have its type (an exit code
is an integer, never `false` or "0"), so that no answer, however it came to be, can decide a check or
break a tool with a value of another kind."""

from __future__ import annotations

from orchestrator.config import SandboxConfig
from orchestrator.errors import ToolError

# Time the host allows beyond an op's own timeout before it declares the toolbox stuck: killing a
# command's processes, restarting bash and sending a large output back all take a little.
HOST_GRACE_SECONDS = 30.0
DEFAULT_OP_SECONDS = 60.0  # read, write, edit, list, ping
FETCH_SECONDS = 30.0


NULL = type(None)
NUMBER = (int, float)
_SESSION = {"session": (str,), "log_path": (str,), "head": (str, NULL), "tail": (str, NULL), "start": (int, NULL),
            "end": (int, NULL), "running": (bool, NULL), "exit_code": (int, NULL), "seconds": (*NUMBER, NULL),
            "screen": (bool, NULL), "from_screen": (bool, NULL), "not_kept": (int, NULL), "note": (str, NULL)}
# The fields of each op's result the host reads, and their JSON types; NULL: may be null or missing.
SHAPES: dict[str, dict[str, tuple[type, ...]]] = {
    "shell": {"exit_code": (int,), "output": (str,), "output_bytes": (int,), "output_lines": (int,),
              "truncated": (bool,), "output_path": (str, NULL), "timed_out": (bool,), "duration_ms": NUMBER,
              "note": (str, NULL)},
    "read": {"path": (str,), "content": (str,), "start_line": (int,), "end_line": (int,), "total_lines": (int,),
             "truncated": (bool,)},
    "write": {"path": (str,), "bytes": (int,)},
    "edit": {"path": (str,), "bytes": (int,)},
    "list": {"entries": (list,), "truncated": (bool,)},
    "fetch": {"url": (str,), "status": (int,), "path": (str,), "text": (str,)},
    "session_start": _SESSION, "session_send": _SESSION, "session_stop": _SESSION,
    "sessions": {"sessions": (list,)},
    "ping": {"pid": (int,), "uid": (int,)},
}


def op_result(response: dict, restarted: str | None = None, op: str | None = None) -> dict:
    """A toolbox response as the op's result, or ToolError with its reason. `restarted`: why the sandbox was
    started again before the op, said with it. `op`: the op answered, whose result is checked (SHAPES)."""
    if not response.get("ok"):
        error = response.get("error")
        error = error if isinstance(error, str) and error else "the toolbox gave no reason"
        raise ToolError(f"{error} (and: {restarted})" if restarted else error)
    result = response.get("result")
    problem = malformed(op, result) if op is not None else None
    if problem:
        raise ToolError(f"the toolbox's answer to {op} is malformed ({problem}); it was not used")
    if restarted:
        result["sandbox_restarted"] = restarted
    return result


def malformed(op: str, result: object) -> str | None:
    """What is wrong with `result` as the result of `op`, in a few words; None when nothing is."""
    if not isinstance(result, dict):
        return f"the result is {type(result).__name__}, not an object"
    for field, types in SHAPES.get(op, {}).items():
        if field not in result and NULL in types:
            continue
        value = result.get(field)
        if field not in result or not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            return f"{field} is {'missing' if field not in result else type(value).__name__}"
    return None


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
