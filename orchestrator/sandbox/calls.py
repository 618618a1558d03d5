"""One toolbox op, whatever the backend: the config's defaults filled in, how long the host waits for its
answer, and its response as the op's result or a ToolError (the port's error, which the model sees)."""

from __future__ import annotations

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
