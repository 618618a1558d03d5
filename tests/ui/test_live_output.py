"""What a running call shows so far, as the page's live pane, `cairn watch` and `cairn run` read it
(view/live_output.py): a command's output as it grows, a terminal session's screen, and the files read
as the untrusted files they are. No engine: the files are written here as the toolbox writes them."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from orchestrator.config import RunConfig
from orchestrator import events as ev
from orchestrator.runs.new_run import create_run
from orchestrator.ui.output_lines import OutputLines
from orchestrator.ui.web.feed import Running
from orchestrator.view.live_output import Follower, live_output, render_tail, running_output

SHELL = {"name": "shell_exec", "arguments": json.dumps({"command": "make"}), "since": 0.0}


def live_file(cairn: Path, text: bytes, mode: str = "wb") -> Path:
    path = cairn / "live" / "shell.out"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, mode) as f:
        f.write(text)
    return path


def test_a_commands_output_comes_as_it_grows_and_anew_when_the_next_command_empties_it(tmp_path):
    live_file(tmp_path, b"compiling a\n")
    follower = Follower(tmp_path, {**SHELL, "since": time.time()})
    assert follower.read() == ("compiling a\n", True)
    assert follower.read() is None  # nothing new
    live_file(tmp_path, b"compiling b\xc3", "ab")  # half of a character: it waits for the rest
    assert follower.read() == ("compiling b", False)
    live_file(tmp_path, b"\xa9\n", "ab")
    assert follower.read() == ("é\n", False)
    live_file(tmp_path, b"next\n")  # emptied by the next command
    assert follower.read() == ("next\n", True)


def test_the_last_commands_output_is_not_taken_for_this_ones(tmp_path):
    path = live_file(tmp_path, b"from before\n")
    os.utime(path, (time.time() - 60, time.time() - 60))
    assert Follower(tmp_path, {**SHELL, "since": time.time()}).read() is None


def test_a_link_or_a_fifo_planted_in_cairn_is_never_read(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("the host's key\n")
    cairn = tmp_path / "cairn"
    cairn.mkdir()
    (cairn / "live").symlink_to(tmp_path)  # a folder that is a link
    (tmp_path / "shell.out").symlink_to(secret)
    assert live_output(cairn) is None and Follower(cairn, {**SHELL, "since": 0}).read() is None
    (cairn / "live").unlink()
    (cairn / "live").mkdir()
    os.mkfifo(cairn / "live" / "shell.out")  # would block an open without O_NONBLOCK
    done: list[object] = []
    reader = threading.Thread(target=lambda: done.append(live_output(cairn)), daemon=True)
    reader.start()
    reader.join(5)
    assert done == [None]


def session_files(cairn: Path, name: str, output: bytes, started: float = 0.0) -> None:
    sessions = cairn / "sessions"
    sessions.mkdir(parents=True, exist_ok=True)
    (sessions / f"{name}.log").write_bytes(output)
    entries = [{"name": name, "command": "python3", "started": started, "log_path": f"/cairn/sessions/{name}.log"}]
    (sessions / "sessions.json").write_text(json.dumps(entries))


def test_a_sessions_output_is_rendered_as_its_answer_renders_it(tmp_path):
    session_files(tmp_path, "py", b">>> for i in range(3): print(i)\r\n0\r\n1\r\n2\r\n>>> \rprogress 10%\rprogress 99%\r\n")
    call = {"name": "shell_send", "arguments": json.dumps({"session": "py", "keys": "x\n"}), "since": 0.0}
    assert running_output(tmp_path, call) == ">>> for i in range(3): print(i)\n0\n1\n2\nprogress 99%"
    # A shell_start that names no session: the one the registry lists as started since the call began.
    unnamed = {"name": "shell_start", "arguments": json.dumps({"command": "python3"}), "since": 0.0}
    assert Follower(tmp_path, unnamed).read()[0].endswith("progress 99%")


def test_a_full_screen_program_is_shown_as_its_screen():
    screen = render_tail(b"before\r\n\x1b[?1049h\x1b[H\x1b[2J top line\x1b[5;3Hfifth row", 120, 40)
    assert screen.splitlines()[0] == " top line" and screen.splitlines()[4] == "  fifth row" and "before" not in screen


def test_a_registry_that_points_out_of_the_sessions_folder_is_not_followed(tmp_path):
    (tmp_path / "secret.log").write_text("the host's key")
    sessions = tmp_path / "cairn" / "sessions"
    sessions.mkdir(parents=True)
    (sessions / "sessions.json").write_text(json.dumps([{"name": "x", "started": 0, "log_path": "../../secret.log"},
                                                        {"name": "y", "started": 0, "log_path": "/etc/passwd"}]))
    for name in ("x", "y"):
        call = {"name": "shell_send", "arguments": json.dumps({"session": name}), "since": 0.0}
        assert running_output(tmp_path / "cairn", call) is None


def test_the_terminal_follower_says_each_whole_line_once(tmp_path):
    said: list[str] = []
    live_file(tmp_path, b"one\ntw")
    lines = OutputLines(tmp_path, {**SHELL, "since": time.time()}, said.append, after=0)
    deadline = time.monotonic() + 5
    while not said and time.monotonic() < deadline:
        time.sleep(0.05)
    live_file(tmp_path, b"o\nthree", "ab")
    assert lines.stop() is True
    assert said == ["      │ one", "      │ two", "      │ three"]


def test_the_pages_stream_follows_the_call_that_runs_while_the_run_is_live(tmp_path):
    run = create_run(tmp_path / "runs", "t", RunConfig.model_validate({"model": {"model": "scripted:demo"}}))
    running = Running(run)
    running.see(ev.ToolStarted(step=1, call_id="c1", name="shell_exec", arguments=SHELL["arguments"]))
    live_file(run.cairn_dir, b"building\n")
    assert running.output() == {"id": "c1", "text": "building\n", "replace": True}  # this process holds the run
    running.see(ev.ToolStarted(step=1, call_id="c0", name="file_read", arguments="{}"))  # beside it: no matter
    live_file(run.cairn_dir, b"linking\n", "ab")
    assert running.output() == {"id": "c1", "text": "linking\n", "replace": False}
    running.see(ev.ToolFinished(step=1, call_id="c1", name="shell_exec", content="ok"))
    assert running.call is None and running.output() is None
    running.see(ev.ToolStarted(step=2, call_id="c2", name="shell_exec", arguments=SHELL["arguments"]))
    run.release()  # nobody drives it: a call it left open shows nothing
    assert running.output() is None and running.call is None
