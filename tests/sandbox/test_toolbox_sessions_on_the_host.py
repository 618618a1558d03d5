"""The toolbox's half of terminal sessions, run on the host (tests/sandbox_fixtures.py's ToolboxProcess):
the log kept while nobody asks, and the registry that makes the next toolbox say which sessions are gone."""

from __future__ import annotations

import base64
import time

from tests.sandbox_fixtures import ToolboxProcess


def test_a_session_is_drained_into_its_log_while_nobody_asks(tmp_path):
    (tmp_path / "ws").mkdir()
    toolbox = ToolboxProcess(tmp_path / "ws")
    try:
        started = toolbox.result("session_start", command="seq 1 200000; sleep 150", name="many", wait=0)
        assert started["running"] and started["log_path"] == str(toolbox.cairn / "sessions" / "many.log")
        log = toolbox.cairn / "sessions" / "many.log"
        expected = sum(len(f"{n}\r\n") for n in range(1, 200001))
        deadline = time.monotonic() + 120  # a bound for a loaded machine, not a speed target
        while log.stat().st_size < expected and time.monotonic() < deadline:
            time.sleep(0.1)  # no request in between: the toolbox's own thread reads the terminal
        assert log.stat().st_size == expected
        stopped = toolbox.result("session_stop", name="many", inline_bytes=1024)
        # Each answer says what came since the one before: the program's last lines are in the stop's answer,
        # or, where the start's answer read the terminal until it went quiet (a busy machine), in that one.
        last = [answer for answer in (started, stopped) if answer["end"] > answer["start"]][-1]
        shown = base64.b64decode(last["head"]) + base64.b64decode(last.get("tail") or "")
        assert shown.endswith(b"199999\r\n200000\r\n")
        assert "no session named many" not in toolbox.error("session_send", name="many", keys="x")
    finally:
        toolbox.close()


def test_sessions_a_toolbox_left_running_are_gone_for_the_next_one(tmp_path):
    (tmp_path / "ws").mkdir()
    first = ToolboxProcess(tmp_path / "ws")
    first.result("session_start", command="sleep 300", name="nap", wait=0)
    first.close()  # the host went away: the toolbox exits, and its sessions lose their terminal
    second = ToolboxProcess(tmp_path / "ws", cairn=first.cairn)
    try:
        listing = second.result("sessions")["sessions"]
        logs = first.cairn / "sessions"
        assert [(s["name"], s["state"], s["log_path"]) for s in listing] == [("nap", "gone", str(logs / "nap.log"))]
        error = second.error("session_send", name="nap", keys="")
        assert error.startswith("session nap is gone: it was running when the run stopped or the sandbox restarted")
        assert second.result("sessions")["sessions"] == []  # said once, then forgotten
        again = second.result("session_start", command="echo again", name="nap", wait=5)
        assert again["log_path"] == str(logs / "nap.2.log") and again["exit_code"] == 0  # the old log is kept
    finally:
        second.close()


# -- the early answer (sandbox_image/toolbox/waiting.py), on this machine's kernel ------------------------------

def timed(toolbox: ToolboxProcess, op: str, **args: object) -> tuple[dict, float]:
    start = time.monotonic()
    result = toolbox.result(op, **args)
    return result, time.monotonic() - start


def test_an_answer_comes_once_the_program_reads_its_terminal_and_not_while_it_works(tmp_path):
    (tmp_path / "ws").mkdir()
    toolbox = ToolboxProcess(tmp_path / "ws")
    try:
        # Bounds of behaviour, not of speed: an early answer comes well before its wait of 20 s.
        asked, took = timed(toolbox, "session_start", command="read -p 'go? ' a; sleep 0.6; echo got $a; cat",
                            name="ask", wait=20)
        assert asked["waits_for_input"] and base64.b64decode(asked["head"]) == b"go? " and took < 10
        # Typed: it sleeps, then prints and reads again (cat): the answer waits for that, not for less.
        answered, took = timed(toolbox, "session_send", name="ask", keys="yes\n", wait=20)
        assert base64.b64decode(answered["head"]) == b"yes\r\ngot yes\r\n" and answered["waits_for_input"]
        assert 0.6 <= took < 10
        # The same program with the early answer turned off waits the whole wait, as before.
        _, took = timed(toolbox, "session_send", name="ask", keys="", wait=0.5, early=False)
        assert took >= 0.5
        busy, took = timed(toolbox, "session_start", command="sleep 30", name="nap", wait=0.5)
        assert not busy["waits_for_input"] and busy["unseen"] is None and took >= 0.5
    finally:
        toolbox.close()


def test_a_job_in_the_background_does_not_hide_the_program_in_front(tmp_path):
    (tmp_path / "ws").mkdir()
    toolbox = ToolboxProcess(tmp_path / "ws")
    try:  # `&` without job control: the job's stdin is /dev/null, so it does not count
        front, took = timed(toolbox, "session_start", command="sleep 30 & read -p 'name? ' x", name="both", wait=20)
        assert front["waits_for_input"] and took < 10
        # ... but a job that shares the terminal and works keeps the answer waiting.
        _, took = timed(toolbox, "session_start", command="sleep 0.6 | cat", name="pipe", wait=20)
        assert took >= 0.6
    finally:
        toolbox.close()
