"""Approvals: which tool calls wait for a person's yes before they run (`--approve`, `RunConfig.approvals`).

The wall of the sandbox keeps the host safe, but a call can still act on the world: an MCP tool, a
fetched URL, a `git push` when the network is on. Before each call the loop asks `clear` (one hook in
`Loop.execute`), which decides:

- not asked: the mode does not ask for it (`never`; `outside` and a call whose effects stay in the sandbox);
- answered by a rule (`approvals.rules`, the first that matches) or by an earlier "always" answer;
- asked: on a terminal the live display stops and puts the question (orchestrator/ui/approval_prompt.py);
  without one (a batch, `--json`, the Python API) the run ends `waiting` with the reason
  `approval: <tool> <subject>`, `cairn approve RUN` records the answer (agent/approval_answers.py), and
  `cairn resume` runs the rest of that step: the answered call (or its refusal, `denied by the user:
  <reason>`, an error result that stays in the context like any failure) and the calls after it, none of
  them twice.

What `outside` asks for:
- an MCP tool that does not declare itself read-only (`readOnlyHint` in the tool's annotations, read from
  its server's tools/list; no annotations count as able to act outside). Annotations are hints the
  server gives: the person who configured the server trusts it, so cairn takes them as said;
- `web_fetch`, when the network is on (without it the call fails anyway);
- `shell_exec` (and a terminal session's `shell_start` command or `shell_send` keys), when the network
  is on, for a command that matches a shell pattern: the built-in ones
  (SHELL_PATTERNS: git push, curl or wget sending data, publishing packages, ssh, scp, rsync to a host,
  ...) and `approvals.shell_patterns`, which add to them. The patterns are a net for the common ways, not
  a wall: a program can reach the network in ways no pattern sees. The wall is `--network none`.

`always` asks for every call but `task_done`, `ask_user` and `todo_write` (ending the run, asking the
person and writing the plan file act on nothing). `never` asks nothing; only deny rules still apply.

Every question and answer is an event (ApprovalAsked, ApprovalAnswered), replayed by `Ledger`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any, Callable, Protocol

from orchestrator.agent.rules import SHELL_TEXT, matcher, units as rule_units
from orchestrator.config import ApprovalRule, ApprovalsConfig, RunConfig
from orchestrator.agent.guards import Finished
from orchestrator.llm.types import ToolCall
from orchestrator import events as ev
from orchestrator.ports import Answer, AsksThePerson, Display, Question, Sandbox
from orchestrator.tools.outcome import Observation

if TYPE_CHECKING:
    from orchestrator.tools.registry import Registry

NEVER_ASKED = ("task_done", "ask_user", "todo_write")
# A call asked for several reasons at once (a shell line matching two patterns, two rules asking) has a
# grant of several parts; an "always" answer to it grants each part, and a later call needs all of its own.
GRANTS_JOIN = " + "

# Where a command starts: the line's start or a shell operator, then wrappers and variable assignments
# (`sudo`, `env A=1`, `nohup`, ...). A pattern's arguments may not cross `;`, `&`, `|` or a newline.
_START = (r"(?:^|[;&|(`\n]|\$\()\s*(?:(?:sudo|env|exec|nohup|time|command|xargs)\s+(?:-\S+\s+)*"
          r"|[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*(?:\S*/)?")
_ARGS = r"[^;&|\n]*"
_NOT_GET = r"['\"]?(?!GET\b|HEAD\b)[A-Za-z]+"
# name -> regex searched in a shell command. The name is what an "always" answer covers.
SHELL_PATTERNS: dict[str, str] = {
    "git push": _START + r"git(?:\s+(?:-C|-c)\s+\S+|\s+--?[\w-]+(?:=\S+)?)*\s+push\b",
    "curl sending data": (_START + rf"curl\b{_ARGS}\s(?:-[a-zA-Z]*[dFT]|--data\S*|--form\S*|--json|--upload-file"
                          rf"|-X\s*{_NOT_GET}|--request[= ]\s*{_NOT_GET})"),
    "wget sending data": _START + rf"wget\b{_ARGS}\s--(?:post-data|post-file|body-data|body-file|method)\b",
    "package upload": _START + (r"(?:twine\s+upload|pip3?\s+upload|(?:npm|pnpm|yarn)\s+publish"
                                r"|(?:poetry|uv|flit|hatch)\s+publish|cargo\s+publish|gem\s+push"
                                r"|(?:docker|podman)\s+push|(?:huggingface-cli|hf)\s+upload)\b"),
    "ssh": _START + r"(?:ssh|sftp|mosh|scp)\s",
    "rsync to a host": _START + rf"rsync\b{_ARGS}\s(?:(?:[^\s:/'\"]+@)?[A-Za-z0-9.-]+::?|rsync://)",
    "network client": _START + r"(?:nc|ncat|netcat|telnet|ftp|gh|aws|gsutil|gcloud|az|kubectl)\s",
}


Asker = Callable[[Question], "Answer | None"]  # None: no answer (the person left), the run waits


class WithLedger(Protocol):
    """The part of a run's state (agent/state.py's RunState, which imports this module) approvals keep."""

    approvals: Ledger


class Asking(Protocol):
    """What approvals use of the agent whose call is cleared (loop.Loop, which calls `clear`); a sub-agent's
    `parent` is the agent that delegated to it, whose display asks for it."""

    cfg: RunConfig
    state: WithLedger
    tools: Registry
    sandbox: Sandbox
    display: Display
    stop_requested: bool
    stopped_by: str | None

    def emit(self, event: ev.Event) -> None: ...


@dataclass
class Clearance:
    """What `clear` lets the loop do with a call: run `call` (its arguments maybe edited by the person,
    then `note` says so in the result), or give the model `refused` instead of running it."""

    call: ToolCall
    refused: Observation | None = None
    note: str = ""


@dataclass
class Decision:
    kind: str  # "run" (not asked), "ask", "allow" or "deny" (answered without asking)
    why: str = ""
    grant: str = ""
    by: str = ""  # for allow and deny: "rule" or "always"
    rule: str | None = None
    reason: str | None = None


# -- replaying the log ------------------------------------------------------------------------------


class Ledger:
    """The approvals part of a run's state, rebuilt from its events (RunState.apply feeds it): the
    question of the call that waits, its answer until the call starts, and the "always" answers."""

    def __init__(self) -> None:
        self.asked: ev.ApprovalAsked | None = None
        self.answer: ev.ApprovalAnswered | None = None
        self.grants: dict[str, ev.ApprovalAnswered] = {}

    def apply(self, event: Any) -> None:
        if isinstance(event, ev.ApprovalAsked):
            self.asked, self.answer = event, None
        elif isinstance(event, ev.ApprovalAnswered):
            self.answer = event
            if event.always and event.grant:
                for part in event.grant.split(GRANTS_JOIN):
                    self.grants[part] = event
        elif isinstance(event, (ev.ToolStarted, ev.ToolFinished)):
            if self.asked is not None and self.asked.call_id == event.call_id:
                self.asked = None
            if self.answer is not None and self.answer.call_id == event.call_id:
                self.answer = None  # used: a later call with the same id is a new question

    def answer_for(self, call_id: str) -> ev.ApprovalAnswered | None:
        return self.answer if self.answer is not None and self.answer.call_id == call_id else None

    @property
    def waiting(self) -> ev.ApprovalAsked | None:
        """The question no one has answered yet."""
        if self.asked is not None and self.answer_for(self.asked.call_id) is None:
            return self.asked
        return None

    def holds(self, call_id: str) -> bool:
        """True when this call was asked about or answered and has not started: its step goes on at resume."""
        return (self.asked is not None and self.asked.call_id == call_id) or self.answer_for(call_id) is not None


# -- deciding ---------------------------------------------------------------------------------------


def subject(name: str, args: dict[str, Any]) -> str:
    """What a rule's `match` is matched against, and what a question shows in short."""
    key = {"shell_exec": "command", "web_fetch": "url", "file_read": "path", "file_write": "path",
           "file_edit": "path", **SHELL_TEXT}.get(name)
    if key is not None and isinstance(args.get(key), str):
        return args[key]
    return json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def rule_label(index: int, rule: ApprovalRule) -> str:
    return f"approvals.rules[{index}] ({rule.tool} {rule.match!r} {rule.action})"


def shell_patterns(cfg: ApprovalsConfig) -> dict[str, str]:
    """The patterns of shell commands that can act outside: the built-in ones (unless turned off), and
    the user's, which add to them (each named by itself)."""
    patterns = dict(SHELL_PATTERNS) if cfg.default_shell_patterns else {}
    patterns.update({pattern: pattern for pattern in cfg.shell_patterns})
    return patterns


def outside_reason(name: str, args: dict[str, Any], cfg: ApprovalsConfig, network: bool,
                   annotations: dict[str, dict[str, Any]] | None, mcp_names: set[str]) -> tuple[str, str] | None:
    """(why, grant) when the call's effects can leave the sandbox; None when they cannot. A shell line
    that matches several patterns names them all, and its grant is all of them (GRANTS_JOIN)."""
    if name == "web_fetch":
        return ("web_fetch reaches the network", "web_fetch") if network else None
    if name in SHELL_TEXT:
        command = args.get(SHELL_TEXT[name])
        if not network or not isinstance(command, str):
            return None
        what = "the command matches" if name != "shell_send" else "the keys typed match"
        labels = [label for label, pattern in shell_patterns(cfg).items() if re.search(pattern, command)]
        if not labels:
            return None
        named = ", ".join(repr(label) for label in labels)
        return (f"the network is on and {what} the shell pattern{'s' if len(labels) > 1 else ''} {named}",
                GRANTS_JOIN.join(f"{name}:{label}" for label in labels))
    if name in mcp_names:
        hints = (annotations or {}).get(name)
        if hints and hints.get("readOnlyHint") is True:
            return None
        said = ", ".join(f"{k}={json.dumps(v)}" for k, v in sorted((hints or {}).items())) or "no annotations"
        return f"the MCP tool does not declare itself read-only ({said})", name
    return None


def decide(name: str, args: dict[str, Any], cfg: ApprovalsConfig, *, network: bool,
           annotations: dict[str, dict[str, Any]] | None = None, mcp_names: set[str] | frozenset[str] = frozenset(),
           grants: dict[str, ev.ApprovalAnswered] | None = None, workdir: str = "/workspace") -> Decision:
    """Whether a call runs unasked, is answered (by a rule or an "always" answer), or is asked.

    A rule matches a call through its units (agent/rules.py): each simple command of a shell line
    (shell_exec, shell_start, shell_send), a URL part by part, a path normalised. A deny rule that
    matches the subject as written or any unit denies the call. An allow rule allows a line only when
    every command of it is allowed (each by the first rule that matches it); a line that cannot be seen
    whole is never allowed by a rule, only asked."""
    what = subject(name, args)
    parts = rule_units(name, what) or None
    matches = matcher(name, workdir)
    rules = [(index, rule) for index, rule in enumerate(cfg.rules) if fnmatchcase(name, rule.tool)]

    def first(text: str) -> tuple[int, ApprovalRule] | None:
        return next(((i, r) for i, r in rules if matches(r.match, text)), None)

    def as_written(text: str) -> tuple[int, ApprovalRule] | None:
        return next(((i, r) for i, r in rules if fnmatchcase(text, r.match)), None)

    for found in [*map(first, parts or []), first(what), as_written(what)]:
        if found is not None and found[1].action == "deny":
            return Decision("deny", by="rule", rule=rule_label(*found), reason=found[1].reason)
    if cfg.mode == "never":
        return Decision("run")  # never asks, and needs no allowing
    if parts is None:
        found = first(what)
        if found is not None:
            return _asked(f"the command could not be parsed whole (a command may run where the parser does not "
                          f"look), so {rule_label(*found)} cannot allow it", name, grants, grantable=False)
    else:
        firsts = [first(part) for part in parts]
        labels = list(dict.fromkeys(rule_label(*f) for f in firsts if f is not None))
        if firsts and all(f is not None and f[1].action == "allow" for f in firsts):
            return Decision("allow", by="rule", rule=", ".join(labels))
        asking = list(dict.fromkeys(rule_label(*f) for f in firsts if f is not None and f[1].action == "ask"))
        if asking:
            return _asked(f"{', '.join(asking)} ask{'s' if len(asking) == 1 else ''} for it", GRANTS_JOIN.join(asking),
                          grants)
    if name in NEVER_ASKED:
        return Decision("run")
    if cfg.mode == "always":
        return _asked("--approve always asks before every call", name, grants)
    outside = outside_reason(name, args, cfg, network, annotations, set(mcp_names))
    return _asked(*outside, grants) if outside else Decision("run")


def _asked(why: str, grant: str, grants: dict[str, ev.ApprovalAnswered] | None, grantable: bool = True) -> Decision:
    """Ask, unless "always" answers earlier in the run cover every part of `grant` (GRANTS_JOIN): then
    their answer stands (a "never" among them denies)."""
    needed = grant.split(GRANTS_JOIN)
    earlier = [(grants or {}).get(part) for part in needed] if grantable else [None]
    if all(answer is not None for answer in earlier):
        refused = next((answer for answer in earlier if not answer.approved), None)
        return Decision("deny" if refused else "allow", why=why, grant=grant, by="always",
                        reason=refused.reason if refused else None)
    return Decision("ask", why=why, grant=grant)


# -- the hook in the loop ---------------------------------------------------------------------------


def clear(agent: Asking, call: ToolCall, step: int) -> Clearance:
    """Called by `Loop.execute` before a call runs. Emits the question and the answer as events; raises
    Finished("waiting", "approval: ...") when a question has no one to answer it now."""
    ledger: Ledger = agent.state.approvals
    recorded = ledger.answer_for(call.id)
    if recorded is not None:  # answered before this session (`cairn approve`, or a crash after the answer)
        return _cleared(call, recorded)
    try:
        args = json.loads(call.arguments or "{}")
    except json.JSONDecodeError:
        return Clearance(call)  # malformed: it fails as an error result, never runs
    if not isinstance(args, dict):
        return Clearance(call)
    mcp = {name: tool.annotations for name in agent.tools.names
           if (tool := agent.tools.get(name)) is not None and tool.annotations is not None}
    decision = decide(call.name, args, agent.cfg.approvals, network=bool(agent.sandbox.network_enabled),
                      annotations=mcp, mcp_names=set(mcp), grants=_grants(agent), workdir=agent.cfg.sandbox.workdir)
    if decision.kind == "run":
        if ledger.waiting is not None and ledger.waiting.call_id == call.id:  # asked under a mode now changed
            return _answer(agent, call, step, Answer(True), "mode")
        return Clearance(call)
    if decision.kind in ("allow", "deny"):
        return _answer(agent, call, step, Answer(decision.kind == "allow", decision.reason), decision.by,
                       grant=decision.grant or None, rule=decision.rule)
    if ledger.waiting is None or ledger.waiting.call_id != call.id:  # a resume does not ask twice in the log
        agent.emit(ev.ApprovalAsked(step=step, call_id=call.id, name=call.name, arguments=call.arguments,
                                    why=decision.why, grant=decision.grant))
    ask = find_asker(agent)
    if ask is None and getattr(agent, "parent", None) is not None:
        return _answer(agent, call, step, Answer(False, "a sub-agent cannot wait for a person's approval; the agent "
                                                        "that delegated this task can make the call itself"),
                       "sub-agent", grant=decision.grant)
    answer = ask(Question(call.name, call.arguments, decision.why, decision.grant)) if ask is not None else None
    if answer is None:
        raise Finished("waiting", waiting_reason(call.name, args))
    if answer.stop:
        top = _top(agent)
        top.stop_requested, top.stopped_by = True, "Ctrl-C"  # checked once this step's calls are done
    return _answer(agent, call, step, answer, "terminal", grant=decision.grant)


def waiting_reason(name: str, args: dict[str, Any]) -> str:
    """The status reason of a run that waits: `approval: <tool> <subject>`, on one line and whole (a person
    may decide from it: `ls`, the exit line)."""
    return f"approval: {name} {' '.join(subject(name, args).split())}"


def find_asker(agent: Asking) -> Asker | None:
    """The top agent's display asks, when a person answers at it (ports.AsksThePerson); a sub-agent asks
    through it."""
    top = _top(agent)
    display = top.display
    return display.ask_approval if isinstance(display, AsksThePerson) and display.can_ask() else None


def _top(agent: Asking) -> Asking:
    while getattr(agent, "parent", None) is not None:
        agent = agent.parent  # type: ignore[attr-defined] - a sub-agent's (agent/delegate.py)
    return agent


def _grants(agent: Asking | None) -> dict[str, ev.ApprovalAnswered]:
    """"Always" answers of this agent and of the agents it works for."""
    grants: dict[str, ev.ApprovalAnswered] = {}
    while agent is not None:
        grants = {**agent.state.approvals.grants, **grants}
        agent = getattr(agent, "parent", None)
    return grants


def _answer(agent: Asking, call: ToolCall, step: int, answer: Answer, by: str, grant: str | None = None,
            rule: str | None = None) -> Clearance:
    event = ev.ApprovalAnswered(step=step, call_id=call.id, name=call.name, approved=answer.approved, by=by,
                                reason=answer.reason, always=answer.always, grant=grant, rule=rule,
                                arguments=answer.arguments)
    agent.emit(event)
    return _cleared(call, event)


def _cleared(call: ToolCall, answer: ev.ApprovalAnswered) -> Clearance:
    if not answer.approved:
        if answer.by == "rule":
            text = f"denied by the user's rule {answer.rule}" + (f": {answer.reason}" if answer.reason else "")
        else:
            text = "denied by the user" + (f": {answer.reason}" if answer.reason else "")
        return Clearance(call, refused=Observation(text, error=True))
    if answer.arguments is not None and answer.arguments != call.arguments:
        edited = ToolCall(id=call.id, name=call.name, arguments=answer.arguments)
        return Clearance(edited, note=f"[the user edited the arguments of this call; it ran with: {answer.arguments}]")
    return Clearance(call)


def answer_line(event: ev.ApprovalAnswered) -> str:
    """An approval's answer in a few words, for the live display, `cairn show` and the report."""
    verdict = "approved" if event.approved else "denied"
    if event.arguments is not None:
        verdict += " with edited arguments"
    by = {"rule": f"by {event.rule}", "always": f"by an earlier 'always' for {event.grant}",
          "terminal": "on the terminal", "cairn approve": "by cairn approve",
          "sub-agent": "(a sub-agent cannot wait for a person)", "mode": "by the mode it was resumed with"}.get(event.by, f"by {event.by}")
    always = f"; always, for {event.grant}" if event.always else ""
    reason = f": {event.reason}" if event.reason and event.by != "sub-agent" else ""
    return f"{'✓' if event.approved else '✗'} {verdict} {by}{always}{reason}"
