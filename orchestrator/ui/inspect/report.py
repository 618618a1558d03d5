"""`cairn report RUN -o FILE.html`: one self-contained HTML page of a run.

The page needs no network: its CSS and JS are inline, its chart is inline SVG. Everything that comes
from the run (the task, the model's text, tool arguments and results, file names) is untrusted and goes
through `html.escape`; on top of that, the page's Content-Security-Policy allows only its own script
(by hash), so even a slip in escaping could not run anything.

Files changed per step come from the workspace checkpoints (`state/checkpoints.git`, one commit per
step, all read in one `git log`: store/checkpoint_log.py) when the run has them, else from the tool calls that
write files (file_write, file_edit, todo_write; what a shell command changed is not seen then).

Each step also shows its durations (on a time axis: report_time.py), its diff, and the messages of its
model requests, rebuilt from the log (report_data.py). Those messages sit once each in a JSON block
(`<`, `>`, `&` escaped, so no payload can end it) that the script reads when a request is opened and
shows as text, never as markup.

Reads only the state directory; imports no model library.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
from importlib import resources
from pathlib import Path
from typing import Any

from orchestrator.ui.inspect.chart import chart, esc
from orchestrator.ui.inspect.report_data import rebuilt_requests, sessions, step_diffs, step_times
from orchestrator.ui.inspect.report_time import Axis, seconds, step_clock, time_axis
from orchestrator.ui.inspect.timeline import approval_line, check_line, critic_line, new_step, step_lines, timeline, walk
from orchestrator import events as ev
from orchestrator.store.checkpoint_log import CheckpointLog
from orchestrator.store.run_dir import RunDir
from orchestrator.tools.outcome import WRITING_TOOLS
from orchestrator.tools.sessions.readable import call_summary

RESULT_PREVIEW = 4000  # characters of a tool result shown in the page


def _clip(text: str | None, width: int) -> str:
    text = text or ""
    return text if len(text) <= width else text[:width] + f"\n… ({len(text) - width:,} more characters)"


def _pretty_arguments(raw: str, name: str = "") -> str:
    summary = call_summary(name, raw)  # a session call: the keys as typed (⏎, ^C), above the raw JSON
    try:
        pretty = json.dumps(json.loads(raw), indent=2, ensure_ascii=False)
    except (ValueError, TypeError):
        pretty = raw
    return f"{summary}\n{pretty}" if summary else pretty


# -- the data -------------------------------------------------------------------------------------


def report_data(run: RunDir) -> dict[str, Any]:
    """Everything the page shows: `cairn show`'s document, with each step whole (its messages, raw
    arguments, whole results, all its requests) and the files it changed, and the todo's versions."""
    walked = walk(run)
    doc = timeline(run, walked)
    children = {c["id"]: c["child"] for step in doc["steps"] for c in step["tool_calls"] if c.get("child")}
    steps = {n: _page_step(step, children) for n, step in walked["steps"].items()}
    todos = [{"step": n, "content": content} for n, step in sorted(steps.items()) for call in step["calls"]
             if call["name"] == "todo_write" and isinstance(content := _todo_content(call["raw"]), str)]
    files_source = "checkpoints"
    log = CheckpointLog.of(run)  # every step's checkpoint, read once
    changes = _checkpoint_changes(log)
    if changes is None:
        files_source = "tool calls"
        changes = _tool_call_changes(steps)
    for n, files in changes.items():
        steps.setdefault(n, _page_step(new_step(n), children))["files"] = files
    times = step_times(walked["events"])
    diffs = step_diffs(run, sorted(n for n in steps if n > 0), log)
    requests = rebuilt_requests(run, walked["events"], log)
    by_step: dict[int, list[dict[str, Any]]] = {}
    for r in requests["requests"]:
        by_step.setdefault(r["step"], []).append(r)
    for n, step in steps.items():
        step.update(time=times.get(n), diff=diffs.get(n), requests=by_step.get(n, []))
    return {**doc, "steps": [steps[n] for n in sorted(steps) if n > 0], "preamble": steps.get(0),
            "todos": todos, "files_source": files_source, "check_rounds": walked["checks"],
            "sessions": sessions(walked["events"]), "requests": requests}


def _page_step(step: dict[str, Any], children: dict[str, Any]) -> dict[str, Any]:
    return {"index": step["index"], "text": step["text"], "messages": step["messages"], "notices": step["notices"],
            "calls": [_page_call(c, children.get(c["id"])) for c in step["calls"]], "usage": step["spent"],
            "files": []}


def _page_call(c: dict[str, Any], child: dict[str, Any] | None) -> dict[str, Any]:
    call = {"id": c["id"], "name": c["name"], "arguments": _pretty_arguments(c["raw"], c["name"]), "raw": c["raw"],
            "result": c["output"], "error": c["error"], "offloaded_to": c["offloaded_to"],
            "finished": c["finished"], "duration_ms": c["duration_ms"]}
    if child:
        call["child"] = child
    if c.get("approval"):
        call["approval"] = c["approval"]
    return call


def _todo_content(raw: str) -> str | None:
    try:
        content = json.loads(raw).get("content")
    except (ValueError, AttributeError):
        return None
    return content if isinstance(content, str) else None


def _checkpoint_changes(log: CheckpointLog | None) -> dict[int, list[tuple[str, str]]] | None:
    """Files changed per step, from consecutive checkpoint commits; None when the run has none."""
    if log is None:
        return None
    out: dict[int, list[tuple[str, str]]] = {}
    for commit in log.commits:
        if commit.changes:
            out.setdefault(commit.step, []).extend((change.status, change.path) for change in commit.changes)
    return out


def _tool_call_changes(steps: dict[int, dict[str, Any]]) -> dict[int, list[tuple[str, str]]]:
    out: dict[int, list[tuple[str, str]]] = {}
    for n, step in steps.items():
        seen: list[tuple[str, str]] = []
        for call in step["calls"]:
            if call["error"] or not call["finished"]:
                continue
            if call["name"] == "todo_write":
                path = "todo.md"
                mark = "w"
            elif call["name"] in WRITING_TOOLS:
                try:
                    path = json.loads(call["raw"]).get("path")
                except (ValueError, AttributeError):
                    continue
                mark = "e" if call["name"] == "file_edit" else "w"
            else:
                continue
            if isinstance(path, str) and (mark, path) not in seen:
                seen.append((mark, path))
        if seen:
            out[n] = seen
    return out


# -- the page -------------------------------------------------------------------------------------

# The page's style and its only script, package data beside this module (ui/inspect/assets/). The
# script's hash is in the Content-Security-Policy, so nothing else can run.
_ASSETS = resources.files("orchestrator.ui.inspect") / "assets"
CSS = (_ASSETS / "report.css").read_text(encoding="utf-8")
JS = (_ASSETS / "report.js").read_text(encoding="utf-8")


def _critic(usage: dict[str, Any]) -> str:
    """One line for the critic's share of the usage (--critic-every), when it was asked at all."""
    critic = usage.get("critic") or {}
    return f'<p class="meta" id="critic">{esc(critic_line(critic))}</p>' if critic.get("requests") else ""


def render_report(run: RunDir) -> str:
    data = report_data(run)
    u = data["usage"]
    cost = f"${u['cost_usd']:.4f}" if u["cost_usd"] is not None else "cost unknown"
    script_hash = base64.b64encode(hashlib.sha256(JS.encode()).digest()).decode()
    csp = f"default-src 'none'; style-src 'unsafe-inline'; img-src data:; script-src 'sha256-{script_hash}'"
    created = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(data["created"])) if data.get("created") else "?"
    result = data["result"]
    axis = Axis(data["sessions"])
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{esc(csp)}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>cairn run {esc(data['id'])}</title>",
        f"<style>{CSS}</style></head>",
        f'<body data-run="{esc(data["id"])}" data-status="{esc(data["status"])}">',
        f"<h1>cairn run {esc(data['id'])} "
        f'<span class="badge {esc(data["status"])}" id="status">{esc(data["status"])}</span></h1>',
        '<div class="meta">'
        f"<span>model {esc(data['model'])}</span><span>started {esc(created)}</span>"
        f'<span><b id="n-steps">{len(data["steps"])}</b> steps</span>'
        f"<span>{u['prompt_tokens']:,} prompt tokens ({u['cache_hit_ratio']:.0%} cached)</span>"
        f"<span>{u['completion_tokens']:,} completion tokens</span><span>{esc(cost)}</span></div>",
        _critic(u),
        _banner(data),
        "<h2>Task</h2>",
        f'<pre id="task">{esc(data["task"])}</pre>',
        "<h2>Result</h2>",
        f'<pre id="result">{esc(result)}</pre>' if result else '<p class="meta" id="result">(no result)</p>',
        *_check(data["check"], data["check_rounds"]),
        "<h2>Tokens and cost per step</h2>",
        chart(data["steps"], data["compactions"]),
        "<h2>Time</h2>",
        time_axis(data["steps"], data["sessions"]),
        "<h2>Timeline</h2>",
        '<div class="controls"><button type="button" id="expand-all">expand all</button>'
        '<button type="button" id="collapse-all">collapse all</button>'
        '<label><input type="checkbox" id="errors-only"> only steps with errors</label></div>',
        '<div id="timeline">',
        *(_step(s, axis) for s in data["steps"]),
        "</div>" if data["steps"] else '<p class="meta">(no steps yet)</p></div>',
        "<h2>Todo as it changed</h2>",
        _todos(data["todos"]),
        "<h2>Files changed per step</h2>",
        _files(data["steps"], data["files_source"]),
    ]
    if data.get("torn_last_line"):
        parts += ["<h2>Torn last line of the event log</h2>", f"<pre>{esc(data['torn_last_line'])}</pre>"]
    parts += [f'<script type="application/json" id="requests-data">{_json_block(data["requests"])}</script>',
              f"<script>{JS}</script>", "</body></html>"]
    return "\n".join(parts) + "\n"


def _banner(data: dict[str, Any]) -> str:
    """Why a run that did not finish ended, at the top of the page (timeline.end_error)."""
    error = data.get("error")
    if not error:
        return ""
    where = f" (step {error['event']['step']})" if error.get("event") and error["event"].get("step") else ""
    return (f'<div class="banner {esc(data["status"])}" id="reason" role="alert"><b>{esc(data["status"])}</b>'
            f"{esc(where)}: {esc(error['reason'])}</div>")


def write_report(run: RunDir, out: Path) -> Path:
    out.write_text(render_report(run), encoding="utf-8")
    return out


def _json_block(value: Any) -> str:
    """JSON for a `<script type="application/json">`: no `<`, `>` or `&` survive as such, so no payload
    can close the element or open another; JSON.parse reads the escapes back."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


# The argument that says what a call does, shown beside its name on a collapsed step's line.
GIST = {"shell_exec": "command", "shell_start": "command", "shell_send": "keys", "web_fetch": "url",
        "file_read": "path", "file_write": "path", "file_edit": "path", "agent_delegate": "task", "ask_user": "question"}


def _gist(call: dict[str, Any], width: int = 70) -> str:
    try:
        args = json.loads(call.get("raw") or "{}")
    except (json.JSONDecodeError, TypeError):
        return ""
    value = args.get(GIST.get(call["name"], "")) if isinstance(args, dict) else None
    if not isinstance(value, str) or not value.strip():
        return ""
    flat = " ".join(value.split())
    flat = flat if len(flat) <= width else flat[: width - 1] + "…"
    return f' <code class="gist" title="{esc(value)}">{esc(flat)}</code>'


def _step(step: dict[str, Any], axis: Axis) -> str:
    u = step["usage"]
    t = step.get("time")
    errors = any(c["error"] for c in step["calls"])
    names = " ".join(
        f'<span class="tool-name">{esc(c["name"])}</span>' + _gist(c)
        + ('<span class="mark-err" title="error"> ✗</span>' if c["error"] else "")
        + ('<span class="mark-off" title="offloaded"> ⇢</span>' if c["offloaded_to"] else "")
        for c in step["calls"]
    ) or '<span class="meta">(text only)</span>'
    if step["messages"]:
        names = '<span title="message from the person">✉</span> ' + names
    cost = f" · ${u['cost_usd']:.4f}" if u["cost_usd"] is not None else ""
    classes = "step has-error" if errors else "step"
    out = [f'<details class="{classes}" id="step-{step["index"]}" data-step="{step["index"]}">',
           f'<summary><span class="idx">#{step["index"]}</span><span class="tools">{names}</span>'
           f'<span class="tok">{u["prompt_tokens"]:,} prompt · {u["cached_tokens"]:,} cached{esc(cost)}</span>'
           + (f'<span class="dur" title="started {step_clock(axis, t["start"])} into the run">{seconds(t["ms"])}</span>'
              if t else "") + "</summary>",
           '<div class="body">']
    if t:
        out.append(_durations(t, axis))
    for m in step["messages"]:
        out.append(f'<div class="msg"><div class="label">message ({esc(m["source"])})</div><pre>{esc(m["text"])}</pre></div>')
    for n in step["notices"]:
        out.append(f'<p class="notice">! {esc(n)}</p>')
    if step["text"]:
        out.append(f'<div class="label">assistant</div><pre class="assistant">{esc(step["text"])}</pre>')
    for c in step["calls"]:
        marks = []
        if c["error"]:
            marks.append('<span class="mark-err">✗ error</span>')
        if c["offloaded_to"]:
            marks.append(f'<span class="mark-off">⇢ offloaded to {esc(c["offloaded_to"])}</span>')
        if not c["finished"]:
            marks.append('<span class="mark-err">… never finished</span>')
        took = f' <span class="meta">{c["duration_ms"] / 1000:.2f}s</span>' if c["duration_ms"] is not None else ""
        out.append(
            f'<div class="call{" error" if c["error"] else ""}" data-tool="{esc(c["name"])}">'
            f'<span class="tool-name">{esc(c["name"])}</span>{took} {" ".join(marks)}'
            f'<div class="label">arguments</div><pre>{esc(_clip(c["arguments"], RESULT_PREVIEW))}</pre>'
            f'<div class="label">result</div><pre class="result">{esc(_clip(c["result"], RESULT_PREVIEW))}</pre>'
            + (f'<p class="approval meta">{esc(approval_line(c["approval"]))}</p>' if c.get("approval") else "")
            + "</div>"
        )
        if c.get("child"):
            child = c["child"]
            out.append(f'<div class="label">sub-agent {esc(child["id"])} [{esc(child["status"])}]</div>'
                       f'<pre class="child">{esc(chr(10).join(step_lines(child)))}</pre>')
    if step["files"]:
        out.append('<div class="label">files changed</div><pre>'
                   + esc("\n".join(f"{mark} {path}" for mark, path in step["files"])) + "</pre>")
    if step.get("diff"):
        out.append(_diff(step["index"], step["diff"]))
    out += [_request(step["index"], r) for r in step.get("requests") or []]
    out.append(f'<p class="meta">usage: {u["prompt_tokens"]:,} prompt, {u["cached_tokens"]:,} cached, '
               f'{u["completion_tokens"]:,} completion tokens; {u["requests"]} model request(s){esc(cost)}</p>')
    out.append("</div></details>")
    return "\n".join(out)


def _durations(t: dict[str, Any], axis: Axis) -> str:
    """When the step started (running time into the run) and what its time went to."""
    model = sum(m["ms"] for m in t["model"])
    tools = sum(c["ms"] or 0.0 for c in t["tools"])
    return (f'<p class="meta durations">started {step_clock(axis, t["start"])} into the run · took '
            f'{seconds(t["ms"])}: model request{"s" if len(t["model"]) != 1 else ""} {seconds(model)}, '
            f'tool calls {seconds(tools)}, other {seconds(max(t["ms"] - model - tools, 0.0))}</p>')


def _diff(n: int, d: dict[str, Any]) -> str:
    files = sum(1 for line in d["text"].splitlines() if line.startswith("diff --git "))
    cut = f'<p class="meta diff-cut">{esc(d["cut"])}</p>' if d["cut"] else ""
    return (f'<details class="diff" id="diff-{n}"><summary>diff of step {n} ({files} file{"s" if files != 1 else ""}, '
            f'{d["bytes"]:,} bytes)</summary><pre class="diff">{esc(d["text"])}</pre>{cut}</details>')


def _request(n: int, r: dict[str, Any]) -> str:
    """A request's messages, filled in from the JSON block by the page's script when opened."""
    exact = "" if r["recorded"] in (0, r["count"]) else (
        f' <span class="mark-err">the log says {r["recorded"]} messages were sent: this rebuild is not exact</span>')
    return (f'<details class="request" id="request-{r["index"]}" data-request="{r["index"]}"><summary>'
            f'messages sent to the model ({r["count"]} messages){exact}</summary>'
            f'<p class="meta">{esc(REBUILT.format(before=n - 1))}</p><pre class="messages"></pre></details>')


REBUILT = ("Rebuilt from the event log by replaying it (the same events give the same request): the messages "
           "cairn handed to litellm, which puts them into the provider's format (an OpenAI-compatible endpoint "
           "gets them as they are, less a null content). The status block at the end has todo.md as the "
           "checkpoint of step {before} holds it, which is what was read, and the notices cairn derives from the "
           "log (budget, loop warning, resume); a sandbox restart's notice is not logged and would be missing.")


def _check(check: dict[str, Any] | None, rounds: list[dict[str, Any]]) -> list[str]:
    """The check (--check): its verdict as a badge, then each time it ran, with what the agent was shown."""
    if check is None:
        return []
    verdict = "not run" if check["passed"] is None else ("passed" if check["passed"] else "failed")
    out = ["<h2>Check</h2>",
           f'<p id="check" data-passed="{esc(verdict)}"><span class="badge {"done" if check["passed"] else "failed"}">'
           f'{esc(verdict)}</span> {esc(check_line(check))}</p>']
    for c in rounds:
        what = "sent back to the agent" if c["sent_back"] else "the run's verdict"
        out.append(f'<details class="check-round" data-round="{c["round"]}"><summary><span class="idx">'
                   f'#{c["round"]}</span><span class="tools">after <a href="#step-{c["step"]}">step {c["step"]}</a>: '
                   f'{esc(check_line(c))}</span><span class="tok">{esc(what)}</span></summary>'
                   f'<div class="body"><pre>{esc(_clip(c["output"], RESULT_PREVIEW))}</pre></div></details>')
    return out


def _todos(todos: list[dict[str, Any]]) -> str:
    if not todos:
        return '<p class="meta">(the agent wrote no todo)</p>'
    return "\n".join(f'<div class="todo" data-step="{t["step"]}"><div class="label">'
                     f'<a href="#step-{t["step"]}">step {t["step"]}</a></div><pre>{esc(t["content"])}</pre></div>'
                     for t in todos)


def _files(steps: list[dict[str, Any]], source: str) -> str:
    rows = [(s["index"], mark, path) for s in steps for mark, path in s["files"]]
    note = ("from the workspace checkpoints (git)" if source == "checkpoints" else
            "from the tool calls that write files (file_write, file_edit, todo_write); "
            "files changed by shell commands are not seen here")
    if not rows:
        return f'<p class="meta">(no files changed; {esc(note)})</p>'
    body = "\n".join(f'<tr><td><a href="#step-{n}">#{n}</a></td><td>{esc(mark)}</td><td class="path">{esc(path)}</td></tr>'
                     for n, mark, path in rows)
    return (f'<p class="meta">{esc(note)}</p><table id="files"><thead><tr><th>step</th><th>change</th>'
            f"<th>path</th></tr></thead><tbody>{body}</tbody></table>")
