"""The toolbox: the half of cairn that lives inside the sandbox (standard library only, Python 3.9+).

The host starts it once per sandbox and speaks to it in JSON lines (PROTOCOL.md beside this package).
It needs no python3 in the image (the host can carry one in) and runs commands in bash, or in `sh` where
an image has no bash (busybox, alpine). Its modules, by job:

- `server`: the request loop and the ops, one method each; `journal`: each call journaled before it
  runs and before its answer goes; `channel`: the host's end (stdin);
- `shell`: the agent's persistent shell and a check's fresh one; `capture`: a command's output, capped
  at the source; `processes`: the container's processes and limits;
- `files`: read, write, edit, list; `web`: fetching a page; `sessions`: terminal sessions in
  pseudo-terminals; `waiting`: whether a session's program waits for input (its answer comes then);
  `workspace`: where paths lead, and safe reads and writes there;
- `errors`: the failures a request can meet.

It runs as a directory or a zipapp holding `__main__.py` and this package (sandbox_image/__main__.py);
on the host the same modules are `orchestrator.sandbox_image.toolbox` (orchestrator.sandbox.local).
"""
