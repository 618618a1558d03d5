"""Exactly-once tool calls: what a call that a crash cut off gets on resume comes from the toolbox's journal.

cairn runs as a subprocess with the real sandbox and is killed with SIGKILL (tests/runs/test_survives_sigkill.py's
helpers). To kill it at a chosen point of a call, it is first frozen with SIGSTOP: the toolbox goes on
alone, as it would after a crash, and the test reads the journal on the host to know where it got.
"""

from __future__ import annotations

import functools
import http.server
import importlib.util
import json
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.context.framing import FRAMINGS, frame_result
from orchestrator.store import journal
from tests.loop_helpers import call, done, turn
from tests.sandbox_fixtures import TOOLBOX
from tests.slow_pages import SCRIPT as SLOW_PAGES
from tests.runs.test_survives_sigkill import Cairn, check_invariants, events, kill, requests, wait_for

KILLED = "[killed: the run stopped while this command ran; it may have partly run"


def journal_lines(cairn: Cairn) -> list[dict[str, Any]]:
    """The whole records of the only run's journal (none while it has none)."""
    runs = list(cairn.runs_dir.glob("*/cairn/journal.jsonl"))
    if not runs:
        return []
    lines = runs[0].read_bytes().split(b"\n")[:-1]
    return [json.loads(line) for line in lines if line.strip()]


def journaled(cairn: Cairn, state: str) -> bool:
    return any(r["state"] == state for r in journal_lines(cairn))


def result_of(evs: list[dict[str, Any]], command_part: str) -> dict[str, Any]:
    """The tool_finished event of the one shell_exec call whose command holds `command_part`."""
    ids = [c["id"] for e in evs if e["type"] == "assistant_message" for c in e["message"].get("tool_calls") or []
           if command_part in c["function"]["arguments"]]
    assert len(ids) == 1, ids
    [finished] = [e for e in evs if e["type"] == "tool_finished" and e["call_id"] == ids[0]]
    # As the tool gave it: the context's copy (`content`) is framed in one of several forms (context/framing.py).
    return {**finished, "content": finished.get("output") or finished["content"]}


def freeze_once_journaled(cairn: Cairn, proc: subprocess.Popen, state: str) -> None:
    """SIGSTOP cairn as soon as the toolbox has journaled the call as started (the request reached it)."""
    wait_for(lambda: journaled(cairn, "started"), proc)
    proc.send_signal(signal.SIGSTOP)
    if state != "started":
        wait_for(lambda: journaled(cairn, state))


@pytest.mark.docker
def test_a_call_that_finished_before_the_kill_gets_its_true_result_and_is_not_run_again(tmp_path, sandbox_image):
    cairn = Cairn(tmp_path)
    command = "sleep 1; echo ran >> ledger.txt; echo the-true-output"
    proc, _ = cairn.start("run", "exactly once", "--model", cairn.script([turn(call("shell_exec", command=command))]))
    # Frozen after the request went out: the command finishes, but cairn never reads its answer.
    freeze_once_journaled(cairn, proc, "finished")
    kill(proc)
    run = cairn.the_run()
    assert not any(e["type"] == "tool_finished" for e in events(cairn.runs_dir)), "the log has no result for it"

    result, log = cairn.run("resume", run.id, "--model", cairn.script([done("resumed")]))
    assert result.returncode == 0, result.stderr
    evs = events(cairn.runs_dir)
    check_invariants(evs)
    finished = result_of(evs, "the-true-output")
    assert finished["content"].startswith("the-true-output\n[exit code 0, ") and not finished["error"]
    assert (run.workspace / "ledger.txt").read_text() == "ran\n", "not run again"
    assert "the-true-output" in json.dumps(requests(log)[0]["messages"]), "the model sees the true result"


@pytest.mark.docker
def test_a_call_killed_mid_command_is_reported_killed_and_never_finishes(tmp_path, sandbox_image):
    cairn = Cairn(tmp_path)
    command = "echo so-far; sleep 5; echo done >> f"
    proc, _ = cairn.start("run", "killed", "--model", cairn.script([turn(call("shell_exec", command=command))]))
    wait_for(lambda: journaled(cairn, "started"), proc)
    time.sleep(1)
    kill(proc)
    run = cairn.the_run()
    wait_for(lambda: journaled(cairn, "killed"), timeout=10)  # the toolbox journals it before it exits
    time.sleep(10)  # past the end the command would have had
    assert not (run.workspace / "f").exists(), "the command was killed when cairn died"

    result, log = cairn.run("resume", run.id, "--model", cairn.script([done("resumed")]))
    assert result.returncode == 0, result.stderr
    evs = events(cairn.runs_dir)
    check_invariants(evs)
    finished = result_of(evs, "echo done >> f")
    assert finished["content"].startswith("so-far\n" + KILLED) and finished["error"]
    assert not (run.workspace / "f").exists()


@pytest.mark.docker
def test_a_call_whose_finish_record_is_torn_is_reported_killed(tmp_path, sandbox_image):
    cairn = Cairn(tmp_path)
    command = "sleep 1; echo once >> f"
    proc, _ = cairn.start("run", "torn", "--model", cairn.script([turn(call("shell_exec", command=command))]))
    freeze_once_journaled(cairn, proc, "finished")
    assert not any(e["type"] == "tool_finished" for e in events(cairn.runs_dir))
    [path] = cairn.runs_dir.glob("*/cairn/journal.jsonl")
    data = path.read_bytes()
    path.write_bytes(data[:-20])  # as if the toolbox was killed while it wrote the finish record
    kill(proc)

    result, _ = cairn.run("resume", cairn.the_run().id, "--model", cairn.script([done()]))
    assert result.returncode == 0, result.stderr
    evs = events(cairn.runs_dir)
    check_invariants(evs)
    assert result_of(evs, "echo once")["content"].startswith(KILLED)


@pytest.mark.docker
def test_a_started_call_the_journal_does_not_know_is_not_executed(tmp_path, sandbox_image):
    cairn = Cairn(tmp_path)
    command = "sleep 3; echo ran >> f"
    proc, _ = cairn.start("run", "never reached", "--model", cairn.script([turn(call("shell_exec", command=command))]))
    freeze_once_journaled(cairn, proc, "started")
    kill(proc)  # the toolbox kills the command
    # As if cairn had died between recording the call's start and sending its request.
    [path] = cairn.runs_dir.glob("*/cairn/journal.jsonl")
    wait_for(lambda: journaled(cairn, "killed"), timeout=10)
    path.write_text("")

    result, _ = cairn.run("resume", cairn.the_run().id, "--model", cairn.script([done()]))
    assert result.returncode == 0, result.stderr
    evs = events(cairn.runs_dir)
    check_invariants(evs)
    assert result_of(evs, "echo ran")["content"] == "not executed: the run stopped before this call reached the sandbox"
    assert not (cairn.the_run().workspace / "f").exists()


@pytest.mark.docker
def test_a_model_answer_that_was_logged_is_not_asked_for_again(tmp_path, sandbox_image):
    cairn = Cairn(tmp_path)
    command = "sleep 3; echo ran >> f"
    proc, _ = cairn.start("run", "answered", "--model", cairn.script([turn(call("shell_exec", command=command))]))
    freeze_once_journaled(cairn, proc, "started")
    kill(proc)
    wait_for(lambda: journaled(cairn, "killed"), timeout=10)
    # Back to the moment after the answer was logged and before its call started.
    run = cairn.the_run()
    lines = (run.state / "events.jsonl").read_text().splitlines(keepends=True)
    assert json.loads(lines[-1])["type"] == "tool_started"
    (run.state / "events.jsonl").write_text("".join(lines[:-1]))
    (run.cairn_dir / journal.JOURNAL_NAME).write_text("")

    result, log = cairn.run("resume", run.id, "--model", cairn.script([done("resumed")]))
    assert result.returncode == 0, result.stderr
    evs = events(cairn.runs_dir)
    check_invariants(evs)
    assert result_of(evs, "echo ran")["content"] == "not executed: the run stopped before this call"
    [request] = requests(log)  # only step 2's: the answer of step 1 came from the log
    assert command in json.dumps(request["messages"])
    assert [e["step"] for e in evs if e["type"] == "model_request"] == [1, 2]


@pytest.mark.docker
def test_a_kill_in_the_middle_of_three_fetches_side_by_side_loses_none_and_repeats_none(tmp_path, sandbox_image):
    cairn = Cairn(tmp_path)
    fetches = [call("web_fetch", url=f"http://127.0.0.1:8778/{name}") for name in "abc"]
    proc, _ = cairn.start("run", "three pages", "--network", "bridge", "--approve", "never", "--model", cairn.script([
        turn(call("file_write", path="pages.py", content=SLOW_PAGES)),  # a server in the sandbox itself
        turn(call("shell_start", command="python3 pages.py 8778 1", session="pages", wait=1)),
        turn(*fetches)]))
    # Killed once all three reached the toolbox, while the pages are still on their way.
    wait_for(lambda: sum(r["state"] == "started" and r["op"] == "fetch" for r in journal_lines(cairn)) == 3, proc)
    kill(proc)
    run = cairn.the_run()
    assert not any(e["type"] == "tool_finished" and e["name"] == "web_fetch" for e in events(cairn.runs_dir))
    # The toolbox lets the fetches in flight finish, and journals their answers, before it exits.
    wait_for(lambda: sum(r["state"] == "finished" for r in journal_lines(cairn)) >= 3, timeout=30)

    result, log = cairn.run("resume", run.id, "--model", cairn.script([done("resumed")]))
    assert result.returncode == 0, result.stderr
    evs = events(cairn.runs_dir)
    check_invariants(evs)
    finished = [e for e in evs if e["type"] == "tool_finished" and e["name"] == "web_fetch"]
    # As the tool gave each (the context frames a result in one of several forms: context/framing.py).
    given = [e.get("output") or e["content"] for e in finished]
    assert [text.split("\n", 1)[1] for text in given] == [f"page /{name}" for name in "abc"], "none lost"
    assert not any(e["error"] for e in finished)
    assert sorted((run.workspace / "served.log").read_text().split()) == ["/a", "/b", "/c"], "none asked twice"
    assert "page /c" in json.dumps(requests(log)[0]["messages"]), "the model sees the true results"


# -- the toolbox on its own --------------------------------------------------------------------------

def toolbox_process(root: Path) -> subprocess.Popen:
    """The toolbox on the host, its work directory `root` and cairn's files in `root/.cairn`."""
    (root / ".cairn").mkdir(exist_ok=True)
    process = subprocess.Popen([sys.executable, str(TOOLBOX), "--root", str(root), "--cairn", str(root / ".cairn")],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert json.loads(process.stdout.readline())["result"]["ready"]
    return process


def send(process: subprocess.Popen, request: dict[str, Any]) -> None:
    process.stdin.write((json.dumps(request) + "\n").encode())
    process.stdin.flush()


def test_the_toolbox_journals_a_call_before_it_answers(tmp_path):
    process = toolbox_process(tmp_path)
    send(process, {"id": 1, "op": "shell", "call": "run:1:c1", "args": {"command": "echo hello"}})
    response = json.loads(process.stdout.readline())
    entry = journal.read(tmp_path / ".cairn").get("run:1:c1")
    assert entry is not None and entry.state == "finished" and entry.response == response
    send(process, {"id": 2, "op": "read", "args": {"path": "nope"}})  # no call key: not journaled
    process.stdout.readline()
    send(process, {"id": 3, "op": "read", "call": "run:2:c1", "args": {"path": "nope"}})
    failed = json.loads(process.stdout.readline())
    record = journal.read(tmp_path / ".cairn")
    assert list(record.entries) == ["run:1:c1", "run:2:c1"], "a record stays until the host says it is logged"
    assert record.get("run:2:c1").response == failed and not failed["ok"]
    send(process, {"id": 4, "op": "read", "call": "run:3:c1", "recorded": ["run:1:c1", "run:2:c1"],
                   "args": {"path": "nope"}})
    process.stdout.readline()
    assert list(journal.read(tmp_path / ".cairn").entries) == ["run:3:c1"], "then the journal begins afresh"
    assert (tmp_path / ".cairn" / journal.JOURNAL_NAME).read_text().count("\n") == 2
    process.stdin.close()
    assert process.wait(timeout=10) == 0


class SlowPages:
    """A web server on this machine's loopback whose every page takes `seconds`; `most` is how many
    requests it held at once."""

    def __init__(self, seconds: float) -> None:
        pages = self
        self.most, self.now, self.lock = 0, 0, threading.Lock()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                with pages.lock:
                    pages.now += 1
                    pages.most = max(pages.most, pages.now)
                time.sleep(seconds)
                with pages.lock:
                    pages.now -= 1
                body = f"<p>page {self.path}</p>".encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_the_toolbox_fetches_side_by_side_journals_each_and_finishes_them_when_the_host_goes(tmp_path):
    pages = SlowPages(0.5)
    process = toolbox_process(tmp_path)
    for n in (1, 2, 3):
        send(process, {"id": n, "op": "fetch", "call": f"run:1:c{n}", "args": {"url": f"{pages.url}/{n}"}})
    answers = [json.loads(process.stdout.readline()) for _ in range(3)]
    assert sorted(a["id"] for a in answers) == [1, 2, 3] and all(a["ok"] for a in answers)
    assert pages.most == 3, "the three fetches were in flight together"
    record = journal.read(tmp_path / ".cairn")
    assert [record.get(f"run:1:c{n}").state for n in (1, 2, 3)] == ["finished"] * 3
    # The host goes away with two fetches in flight: they finish, and the journal has their answers.
    send(process, {"id": 4, "op": "fetch", "call": "run:2:c1", "recorded": [f"run:1:c{n}" for n in (1, 2, 3)],
                   "args": {"url": f"{pages.url}/4"}})
    send(process, {"id": 5, "op": "fetch", "call": "run:2:c2", "args": {"url": f"{pages.url}/5"}})
    time.sleep(0.2)
    process.stdin.close()
    assert process.wait(timeout=10) == 0
    record = journal.read(tmp_path / ".cairn")
    assert sorted(record.entries) == ["run:2:c1", "run:2:c2"], "the logged calls' records went"
    assert all(record.get(key).state == "finished" and record.get(key).response["ok"] for key in record.entries)
    pages.server.shutdown()


def test_the_toolbox_journals_a_command_cut_off_by_the_hosts_end_as_killed_with_its_output(tmp_path):
    process = toolbox_process(tmp_path)
    send(process, {"id": 1, "op": "shell", "call": "run:1:c1",
                   "args": {"command": "echo so-far; sleep 1.5; echo done >> f"}})
    started = time.monotonic()
    time.sleep(0.5)
    process.stdin.close()  # the host is gone
    assert process.wait(timeout=10) == 0
    entry = journal.read(tmp_path / ".cairn").get("run:1:c1")
    assert entry is not None and entry.state == "killed"
    assert entry.partial["output"] == "so-far\n" and 0.4 < entry.seconds < 1.5
    time.sleep(max(0.0, started + 2 - time.monotonic()))  # past the moment the command would have written
    assert not (tmp_path / "f").exists(), "the command was killed"


def test_the_journal_survives_a_torn_last_line(tmp_path):
    cairn_dir = tmp_path / ".cairn"
    cairn_dir.mkdir()
    started = {"call": "run:3:c1", "state": "started", "id": 4, "op": "shell"}
    finished = {"call": "run:3:c1", "state": "finished", "response": {"id": 4, "ok": True, "result": {}}}
    whole = json.dumps(started) + "\n" + json.dumps(finished) + "\n"
    (cairn_dir / journal.JOURNAL_NAME).write_text(whole + '{"call": "run:3:c2", "state": "sta')
    assert journal.read(cairn_dir).get("run:3:c1").state == "finished"
    assert journal.read(cairn_dir).get("run:3:c2") is None
    (cairn_dir / journal.JOURNAL_NAME).write_text(whole[:-15])  # the finish record itself torn
    assert journal.read(cairn_dir).get("run:3:c1").state == "started"

    # The toolbox starts its next record on a line of its own.
    (cairn_dir / journal.JOURNAL_NAME).write_text(json.dumps(started) + "\n" + '{"call": "x", "st')
    from orchestrator.sandbox_image.toolbox.journal import Journal

    Journal(str(cairn_dir / journal.JOURNAL_NAME)).finished("run:3:c1", finished["response"])
    assert journal.read(cairn_dir).get("run:3:c1").state == "finished"


def test_the_journal_is_not_read_through_a_symlink(tmp_path):
    secret = tmp_path / "host-file"
    secret.write_text(json.dumps({"call": "run:1:c1", "state": "finished", "response": {"ok": True}}) + "\n")
    cairn_dir = tmp_path / ".cairn"
    cairn_dir.mkdir()
    (cairn_dir / journal.JOURNAL_NAME).symlink_to(secret)
    record = journal.read(cairn_dir)
    assert record.entries == {} and "cannot read" in record.problem
    (cairn_dir / journal.JOURNAL_NAME).unlink()
    cairn_dir.rmdir()
    cairn_dir.symlink_to(tmp_path)  # the directory itself a link
    (tmp_path / journal.JOURNAL_NAME).write_text(secret.read_text())
    assert journal.read(cairn_dir).entries == {}


# -- the crash bench ---------------------------------------------------------------------------------

BENCH = Path(__file__).resolve().parents[2] / "bench" / "crash_bench.py"


def crash_bench() -> Any:
    spec = importlib.util.spec_from_file_location("crash_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _ledger_turn(bench: Any, command: str, result: str, form: int = 0) -> dict[str, Any]:
    """The bench model's next turn after one shell_exec call of `command` that got `result` (its output, then
    its footer from the first line that opens with a bracket), framed in `form` (context/framing.py)."""
    cut = result.find("[")
    body, footer = (result[:cut], result[cut:]) if cut >= 0 else (result, "")
    messages = [{"role": "user", "content": "append"},
                {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {
                    "name": "shell_exec", "arguments": json.dumps({"command": command})}}]},
                {"role": "tool", "tool_call_id": "c1", "content": frame_result(body, footer, "shell_exec", form)}]
    return bench.decide(messages)["tool_calls"][0]


@pytest.mark.parametrize("form", range(FRAMINGS))
def test_the_crash_bench_model_reruns_what_did_not_run_and_checks_what_was_killed(form):
    bench = crash_bench()
    ledger_turn = functools.partial(_ledger_turn, form=form)
    append, check = bench.APPEND.format(n=7), bench.CHECK.format(n=7)
    assert ledger_turn(bench, append, "[exit code 0, 0.2 s]")["arguments"]["command"] == bench.APPEND.format(n=8)
    assert ledger_turn(bench, append, "not executed: the run stopped before this call reached the sandbox"
                       )["arguments"]["command"] == append
    assert ledger_turn(bench, append, "[killed: the run stopped while this command ran; it may have partly run]"
                       )["arguments"]["command"] == check
    assert ledger_turn(bench, check, "absent\n[exit code 0, 0.1 s]")["arguments"]["command"] == append
    after_check = ledger_turn(bench, check, "present\n[exit code 0, 0.1 s]")
    assert after_check["arguments"]["command"] == bench.APPEND.format(n=8)
    assert ledger_turn(bench, bench.APPEND.format(n=30), "[exit code 0, 0.2 s]")["name"] == "task_done"


@pytest.mark.docker
def test_the_crash_bench_prints_its_figures_in_a_short_run(sandbox_image):
    # One trial shows the bench plays, kills, resumes and scores (three took 70 s); its figures are
    # measured with its default of 50 (bench/crash_bench.py), not here.
    done = subprocess.run([sys.executable, str(BENCH), "--trials", "1", "--image", sandbox_image],
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr
    assert re.search(r"^trial 1: kills=\d+ lines=\d+ duplicates=\d+ lost=\d+ status=\w+", done.stdout, re.M), done.stdout
    last = done.stdout.rstrip("\n").splitlines()[-1]
    assert re.fullmatch(r"trials=1 duplicates=\d+ lost=\d+ resumed_ok=[01]", last), done.stdout
