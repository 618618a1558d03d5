"""The host half of terminal sessions, without a sandbox: keys as a terminal's keyboard sends them, raw
bytes rendered as a terminal shows them, and session calls as a person reads them."""

from __future__ import annotations

import base64

from orchestrator.tools.sessions.answer import observe
from orchestrator.tools.sessions.keys import shown, to_bytes
from orchestrator.tools.sessions.readable import call_summary
from orchestrator.tools.sessions.screen import render_lines, render_screen


def test_newline_is_enter_named_keys_are_keys_and_anything_else_is_typed():
    assert to_bytes("ls -l\n") == "ls -l\r"
    assert to_bytes("<C-c><c-D><Esc>:wq<Enter>") == "\x03\x04\x1b:wq\r"
    assert to_bytes("<Up><Down><Right><Left><Tab><Backspace>") == "\x1b[A\x1b[B\x1b[C\x1b[D\t\x7f"
    assert to_bytes("if a <b> c: <Nope>") == "if a <b> c: <Nope>"
    assert to_bytes("") == ""


def test_keys_are_shown_to_a_person_as_keys():
    assert shown("x = 1\n<C-c><Up>") == "x = 1⏎^C↑"
    assert call_summary("shell_send", '{"session": "py", "keys": "print(1)\\n"}') == "py ⌨ print(1)⏎"
    assert call_summary("shell_send", {"session": "job", "keys": "", "wait": 30}) == "job (only reads)  (wait 30 s)"
    assert call_summary("shell_start", {"command": "make -j4"}) == "(new session) $ make -j4"
    assert call_summary("shell_stop", {"session": "web"}) == "web"
    assert call_summary("shell_exec", {"command": "ls"}) is None
    assert call_summary("shell_send", "not json") is None


def test_lines_are_what_a_terminal_shows_not_every_redraw():
    assert render_lines(b"10%\r50%\r100%\r\ndone\r\n", 120, 40) == "100%\ndone"
    assert render_lines(b"\x1b[1;31merror\x1b[0m: bad\r\n", 120, 40) == "error: bad"
    assert render_lines(b"abc\x08\x08XY\r\n", 120, 40) == "aXY"
    many = b"".join(b"line %d\r\n" % n for n in range(100))
    assert render_lines(many, 120, 10).splitlines() == [f"line {n}" for n in range(100)]


def test_a_full_screen_program_that_quit_leaves_the_lines_before_it():
    assert render_lines(b"before\r\n\x1b[?1049h\x1b[2J\x1b[Hvim\x1b[?1049lafter\r\n", 120, 40) == "before\nafter"
    leaving = b"\x1b[40;1H\x1b[?1049l\rbye\r\n"  # begins while the program still has the screen
    assert render_lines(leaving, 120, 40, on_screen=True) == "bye"


def test_a_screen_is_rendered_with_its_cursor():
    text, cursor = render_screen(b"\x1b[?1049h\x1b[H\x1b[2Jtitle\x1b[3;5Hbody\x1b[1;1H", 40, 10)
    assert text == "title\n\n    body" and cursor == (1, 1)


def answer(data: bytes, **fields: object) -> dict:
    return {"session": "s", "command": "c", "log_path": "/cairn/sessions/s.log", "running": True, "exit_code": None,
            "seconds": 1.5, "screen": False, "columns": 120, "rows": 40, "start": 0, "end": len(data),
            "head": base64.b64encode(data).decode(), "tail": "", "not_kept": 0, "note": None, **fields}


def test_every_answer_says_whether_the_program_still_runs():
    running = observe(answer(b"hi\r\n"))
    assert running.text == "hi" and not running.error
    assert running.footer == "[session s is still running (1.5 s so far); read on or type with shell_send]"
    failed = observe(answer(b"", running=False, exit_code=2))
    assert failed.text == "(no new output)" and failed.error
    assert failed.footer == "[session s exited with code 2 after 1.5 s; it is closed]"


def test_an_early_answer_says_the_program_waits_and_a_blind_one_says_why_it_waited():
    early = observe(answer(b">>> ", waits_for_input=True))
    assert early.footer == "[session s is still running (1.5 s so far) and waits for input; type with shell_send]"
    blind = observe(answer(b"name? ", unseen="the kernel hides it"))
    assert blind.footer.splitlines() == [
        "[session s is still running (1.5 s so far); read on or type with shell_send]",
        "[cairn cannot see here whether it waits for input (the kernel hides it); so this answer came after the "
        "whole wait]"]


def test_a_long_answer_keeps_head_and_tail_and_says_where_the_rest_is():
    r = answer(b"first\r\n", tail=base64.b64encode(b"last\r\n").decode(), end=10_000_000)
    assert observe(r).text == ("first\n[... 9,999,987 bytes of output omitted here; all that the session printed is "
                               "kept in /cairn/sessions/s.log ...]\nlast")


def test_a_session_cannot_get_round_the_approval_of_a_command_that_acts_outside():
    from orchestrator.agent import approvals
    from orchestrator.config import ApprovalsConfig

    cfg = ApprovalsConfig()
    started = approvals.decide("shell_start", {"command": "git push origin main"}, cfg, network=True)
    typed = approvals.decide("shell_send", {"session": "sh", "keys": "git push origin main\n"}, cfg, network=True)
    assert started.kind == typed.kind == "ask"
    assert typed.why == "the network is on and the keys typed match the shell pattern 'git push'"
    assert approvals.decide("shell_send", {"session": "sh", "keys": "ls\n"}, cfg, network=True).kind == "run"
    assert approvals.decide("shell_start", {"command": "git push"}, cfg, network=False).kind == "run"


def test_shell_exec_that_times_out_names_shell_start():
    from orchestrator.config import SandboxConfig
    from orchestrator.tools.builtin import shell_exec
    from orchestrator.tools.registry import ToolContext

    class TimedOut:
        network_enabled = False

        def call(self, op: str, **args: object) -> dict:
            return {"output": "", "exit_code": 124, "timed_out": True, "duration_ms": 5000.0}

    seen = shell_exec.TOOL.run({"command": "make"}, ToolContext(TimedOut(), SandboxConfig(), "/cairn/obs/1.txt"))
    assert seen.footer.endswith("To run something longer, start it with shell_start and read it later with "
                                "shell_send]")
