"""One truth of a run on every face: what `ls`, `show` and the page's list say of a run is what it is doing
now, from the first instant of a `cairn resume` to its end; an answered question is never the result,
and a fork names its parent everywhere."""

from __future__ import annotations

import json
import time

import pytest

from orchestrator.store.run_dir import RunDir
from tests.loop_helpers import call, done, turn
from tests.runs.test_survives_sigkill import Cairn, wait_for
from tests.serve_helpers import start_server, stop_server

QUESTION = "Which greeting should the file hold?"


def waiting_run(cairn: Cairn) -> RunDir:
    made, _ = cairn.run("run", "write a greeting", "--json", "--model", cairn.script([
        turn(call("file_write", path="a.txt", content="draft\n")), turn(call("ask_user", question=QUESTION))]))
    assert made.returncode == 1 and json.loads(made.stdout)["status"] == "waiting", made.stderr
    return cairn.the_run()


@pytest.mark.docker
def test_ls_show_and_the_page_agree_from_the_first_instant_of_a_resume_to_its_end(tmp_path, sandbox_image):
    cairn = Cairn(tmp_path)
    run = waiting_run(cairn)
    server = start_server(cairn.runs_dir)
    try:
        proc, _log = cairn.start("resume", run.id, "--message", "hello", "--model", cairn.script([
            turn(call("shell_exec", command="sleep 2; echo one")),
            turn(call("shell_exec", command="sleep 2; echo two")), done("greeted")]))
        seen: list[tuple[str, str, str]] = []
        while True:
            ended = proc.poll() is not None
            listed, _ = cairn.here("ls", "--json")
            shown, _ = cairn.here("show", run.id, "--json")
            status, _headers, body = server.request("GET", "/api/runs")
            assert status == 200
            [row] = json.loads(listed.stdout)
            page = next(r for r in json.loads(body) if r["id"] == run.id)
            seen.append((row["status"], json.loads(shown.stdout)["status"], page["status"]))
            if ended:
                break
        proc.communicate(timeout=60)
    finally:
        stop_server(server)
    assert proc.returncode == 0
    for face in range(3):  # each face tells the same story, in the same order, and never a false one
        story = [statuses[face] for statuses in seen]
        distinct = [s for i, s in enumerate(story) if i == 0 or story[i - 1] != s]
        assert distinct in (["waiting", "running", "done"], ["running", "done"]), (face, distinct)
    agreeing = [s for s in seen if s[0] == s[1] == s[2] == "running"]
    assert len(agreeing) >= 3, seen  # most of the resume is seen, and seen alike
    assert seen[-1] == ("done", "done", "done")


@pytest.mark.docker
def test_an_answered_question_is_never_the_result_on_any_face(tmp_path, sandbox_image):
    cairn = Cairn(tmp_path)
    run = waiting_run(cairn)
    listed, _ = cairn.here("ls", "--json")
    assert json.loads(listed.stdout)[0]["result"] == QUESTION  # asked, not yet answered: it waits on it
    proc, _log = cairn.start("resume", run.id, "--message", "hello", "--model", cairn.script([
        turn(call("shell_exec", command="sleep 60"))]))
    wait_for(lambda: (run.cairn_dir / "live" / "shell.out").exists(), proc)
    stopped, _ = cairn.here("stop", run.id)
    assert stopped.returncode == 0, stopped.stderr
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    summary = [line for line in err.splitlines() if line.startswith(f"run {run.id}: ")][-1]
    assert summary == f"run {run.id}: interrupted: stopped by cairn stop", err[-1500:]
    shown = json.loads(cairn.here("show", run.id, "--json")[0].stdout)
    assert shown["status"] == "interrupted" and shown["result"] is None
    [row] = json.loads(cairn.here("ls", "--json")[0].stdout)
    assert row["result"] is None and row["reason"] == "stopped by cairn stop"
    text = cairn.here("show", run.id)[0].stdout
    assert QUESTION not in text.split("task:", 1)[1].split("\n", 1)[0] and "result:" not in text


@pytest.mark.docker
def test_a_fork_names_its_parent_and_step_on_every_face(tmp_path, sandbox_image):
    cairn = Cairn(tmp_path)
    run = waiting_run(cairn)
    forked, _ = cairn.run("resume", run.id, "--from-step", "1", "--json", "--model", cairn.script([done("again")]))
    assert forked.returncode == 0, forked.stderr
    doc = json.loads(forked.stdout)
    assert doc["forked_from"] == {"run": run.id, "step": 1}
    assert f"forked from run {run.id} at step 1" in forked.stderr
    fork_id = doc["id"]
    rows = {r["id"]: r for r in json.loads(cairn.here("ls", "--json")[0].stdout)}
    assert rows[fork_id]["forked_from"] == {"run": run.id, "step": 1} and rows[run.id]["forked_from"] is None
    assert f"forked from run {run.id} at step 1" in cairn.here("show", fork_id)[0].stdout
    server = start_server(cairn.runs_dir)
    try:
        status, _headers, body = server.request("GET", f"/api/runs/{fork_id}")
        assert status == 200 and json.loads(body)["forked_from"] == {"run": run.id, "step": 1}
    finally:
        stop_server(server)


def test_a_resume_that_is_refused_leaves_the_run_as_every_face_showed_it(tmp_path):
    """Refused before it drives (a waiting run resumed without its answer, and nobody to ask): the run is
    let go of and still waits, on every face."""
    cairn = Cairn(tmp_path)
    run = RunDir.create(cairn.runs_dir, {"task": "t", "config": {}})
    from orchestrator import events as ev

    run.events.append(ev.StatusChanged(status="waiting", reason="ask_user", result=QUESTION))
    run.release()
    refused, _ = cairn.here("resume", run.id)
    assert refused.returncode == 2 and f"waits for an answer: {QUESTION}" in refused.stderr
    [row] = json.loads(cairn.here("ls", "--json")[0].stdout)
    assert row["status"] == "waiting" and row["waiting"] == {"kind": "question", "question": QUESTION}
    time.sleep(0)  # nothing holds it: the next resume may take it
    assert not RunDir(run.root).state.joinpath("pid").exists()
