"""The system prompt: what the model is told about its computer, true for the run's profile, and the
project's own instructions (AGENTS.md in the work directory).

It opens the cached prefix, so it holds no timestamps or run ids and is made once, when the run starts
(`new_run.start_log` records it in RunStarted; a resume and every sub-agent reuse that text).

Each claim about the sandbox is a `Fact` that carries a shell probe which exits 0 when the claim holds,
so a test can start a sandbox of each profile and check every sentence the prompt says about it
(tests/agent/test_prompt_tells_the_truth.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.store.regular import read_regular

if TYPE_CHECKING:
    from orchestrator.config import RunConfig, SandboxConfig

INSTRUCTIONS_FILE = "AGENTS.md"
INSTRUCTIONS_MAX_BYTES = 32 * 1024  # read at the run's start; the prompt is sent with every request
_FRAME = ("<project-instructions>", "</project-instructions>")

HEAD = """\
You are cairn, an agent that works on long tasks in a sandbox: a Linux container that is your own
computer. Your memory is the filesystem."""

HOW_TO_RUN = """\
Running programs:
- shell_exec runs a bash command that must finish: it is killed after its timeout ({timeout:g} s unless
  you give one, at most {max_timeout:g} s). Its stdin is empty: a command that asks a question gets no answer.
  cwd and variables persist between calls.
- Anything that runs long or talks back goes in a terminal session: shell_start runs a program in its
  own terminal, which keeps running. Use it for servers you test against, builds, downloads and
  training runs longer than a few minutes, REPLs and debuggers, installers and CLIs that ask questions,
  and full-screen programs (vim, less, htop). Type into it and read on with shell_send (empty keys only
  wait and read: the way to follow a long job), end it with shell_stop. Open sessions are listed at the
  end of every request; stop the ones you no longer need.
- shell_start and shell_send answer as soon as the program waits for input (a prompt, a question, a
  REPL ready for the next line) or exits, and after `wait` seconds at most: a generous `wait` costs
  nothing when the program answers at once. A busy program (a build, a server, a sleep) gets its whole
  `wait`; one that watches the keyboard while it works (top, a watch mode) answers at its first pause.{early_limits}"""

# In gVisor only the terminal's mode shows that a program waits (sandbox_image/toolbox/waiting.py).
GVISOR_EARLY = """ In this sandbox (gVisor) that is seen only for programs that edit their own line
  or draw the screen (REPLs, shells, debuggers, full-screen programs); one that reads whole lines
  (`read -p`, `cat`, `input()` without readline) gets its whole `wait`, and the answer says so."""

HOW_TO_WORK = """\
How to work:
- Keep a plan in {workdir}/todo.md with todo_write: the goal, the steps as a checklist, what you have
  learned. It is shown to you at the end of every request; update it as you go.
- Big outputs are saved to files under /cairn/obs/ (fetched pages go to /cairn/web/) and you see their
  head and tail with the path; old results may later be replaced by such pointers. Read them back with
  file_read (offset and limit) when you need the details. Nothing is lost.
- The person's messages stay in your context word for word, however much else is compacted. The end
  of every request shows your plan, what is left of your budget (steps, cost, time) and what is in
  flight (terminal sessions, a question you asked).
- The calls of one answer run in order, except that consecutive file_read and web_fetch calls run at
  the same time, and so do consecutive agent_delegate calls: ask for independent reads, pages and
  sub-tasks together. Their results come back in the order of the calls.
- Errors are information. Read them closely before trying again; do not repeat a failing call
  unchanged.
- Verify your work (run it, test it) before calling task_done with a summary. If you need a decision
  only a person can make, call ask_user."""


@dataclass(frozen=True)
class Fact:
    """One sentence the prompt says about the sandbox, and a bash probe that exits 0 when it holds
    (run from the work directory)."""

    text: str
    probe: str


def is_root(sandbox: SandboxConfig) -> bool:
    """Whether the agent runs as root: the default profile, unless `sandbox.user` names another uid."""
    return not sandbox.lockdown and (sandbox.user is None or sandbox.user.split(":")[0] == "0")


def sandbox_facts(sandbox: SandboxConfig) -> list[Fact]:
    """What is true of this profile's computer, each claim with its probe."""
    workdir = sandbox.workdir
    facts = [Fact(f"Your work directory is {workdir}: commands and sessions start there, relative paths are "
                  "relative to it, and what you put there is kept after the run.",
                  f'test "$PWD" = {workdir} && touch .cairn-probe && rm .cairn-probe'),
             Fact("cairn keeps its own files (saved outputs, fetched pages, session logs) under /cairn.",
                  "test -d /cairn -a -w /cairn")]
    if is_root(sandbox):
        facts += [Fact("You are root, and the root filesystem (the container's own) is writable: install what the task "
                            "needs.",
                       'test "$(id -u)" = 0 && touch /usr/local/.cairn-probe && rm /usr/local/.cairn-probe')]
        if sandbox.image is None:  # cairn's own image; another image has its own tools
            facts.append(Fact("The system is Debian with bash, git, curl, ripgrep, python3 and pip; apt-get "
                              "install (after apt-get update) and pip install put packages into it.",
                              "command -v apt-get && command -v git && command -v curl && command -v rg && "
                              "command -v python3 && python3 -m pip --version"))
        else:
            facts.append(Fact(f"The system is the image {sandbox.image}: install with its own package manager.",
                              "true"))
    elif sandbox.lockdown:
        facts += [Fact("You are an unprivileged user (not root) and the system is read-only: no system "
                       "packages can be installed.",
                       'test "$(id -u)" != 0 && ! touch /usr/local/.cairn-probe 2>/dev/null'),
                  Fact(f"You can write only in {workdir}, /cairn, /tmp and your home ($HOME); nothing in /tmp "
                       f"or the home can be executed, so keep scripts, virtual environments (python3 -m venv "
                       f"{workdir}/.venv) and builds in {workdir}. The file tools reach only {workdir} and "
                       "/cairn.",
                       "touch /tmp/.p $HOME/.p && printf '#!/bin/sh\\nexit 0\\n' > /tmp/p.sh && chmod +x /tmp/p.sh "
                       "&& ! /tmp/p.sh 2>/dev/null && cp /tmp/p.sh .p.sh && ./.p.sh && rm .p.sh /tmp/p.sh")]
    else:
        facts.append(Fact(f"You are not root (uid {sandbox.user.split(':')[0]}): system directories are not yours to change.",
                          'test "$(id -u)" != 0'))
    if sandbox.network == "bridge":
        facts.append(Fact("The network is on: packages and web pages can be downloaded.",
                          "ls /sys/class/net | grep -qvx lo"))
    else:
        facts.append(Fact("There is no network: nothing can be downloaded (pip, apt-get and web_fetch fail); "
                          "work with what is installed.",
                          "! ls /sys/class/net | grep -qvx lo"))
    return facts


def system_prompt(extra: str = "", workdir: str = "/workspace", cfg: RunConfig | None = None,
                  instructions: str | None = None) -> str:
    """The prompt of a run with config `cfg` (the default profile when None; `workdir` then names the
    work directory). `extra`: the run's own addition (config `system_prompt_extra`, an agent folder's
    PROMPT.md). `instructions`: the project's AGENTS.md as `read_instructions` framed it."""
    from orchestrator.config import SandboxConfig

    sandbox = cfg.sandbox if cfg is not None else SandboxConfig(workdir=workdir)
    facts = "\n".join(f"- {fact.text}" for fact in sandbox_facts(sandbox))
    parts = [HEAD, f"Your computer:\n{facts}",
             HOW_TO_RUN.format(timeout=sandbox.command_timeout, max_timeout=sandbox.max_command_timeout,
                               early_limits=GVISOR_EARLY if sandbox.runtime == "runsc" else ""),
             HOW_TO_WORK.format(workdir=sandbox.workdir)]
    if extra.strip():
        parts.append(extra.strip())
    if instructions:
        parts.append(instructions)
    return "\n\n".join(parts) + "\n"


def read_instructions(workspace: Path, workdir: str) -> str | None:
    """The project's AGENTS.md (in the run's workspace, as the run starts), framed for the prompt; None
    when there is none, or it is not a regular file (a symlink, a FIFO or a directory is ignored, as
    for todo.md: a cloned repository must not make the host read elsewhere). Cut at
    INSTRUCTIONS_MAX_BYTES, with a note that says so."""
    text = read_regular(Path(workspace) / INSTRUCTIONS_FILE, max_bytes=INSTRUCTIONS_MAX_BYTES + 1)
    if text is None or not text.strip():
        return None
    where = f"{workdir.rstrip('/')}/{INSTRUCTIONS_FILE}"
    cut = len(text.encode("utf-8", "surrogatepass")) > INSTRUCTIONS_MAX_BYTES
    if cut:
        text = text.encode("utf-8", "surrogatepass")[:INSTRUCTIONS_MAX_BYTES].decode("utf-8", "ignore")
    text = text.replace(_FRAME[1], "</ project-instructions>")  # the file cannot close the frame
    note = (f"\n[cairn cut {INSTRUCTIONS_FILE} here: only its first {INSTRUCTIONS_MAX_BYTES // 1024} KiB are "
            f"shown; file_read {where} for the rest.]" if cut else "")
    return (f"The project's instructions, from {where} as it was when the run started (a later change to the "
            f"file is not shown here; read the file for its current text):\n"
            f"{_FRAME[0]}\n{text.strip()}{note}\n{_FRAME[1]}")
