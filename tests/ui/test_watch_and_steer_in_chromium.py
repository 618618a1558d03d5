"""Watching and steering a run live from the page, in a real headless Chromium over real scripted runs in
real sandboxes: the running call's output as it comes (no click), rows that name their calls, the one
box that answers a question or follows up a run that ended, the new-run form's API base against an
OpenAI-compatible server of the tests' own, and the pages on a phone-width screen."""

from __future__ import annotations

import json

from orchestrator.store.run_dir import RunDir
from tests.browser_helpers import (browser, browser_marks, ended_run, only_run, open_page, open_run,  # noqa: F401
                                   page, server, sideways)
from tests.fake_openai import FakeOpenAI
from tests.loop_helpers import call, done, turn
from tests.serve_helpers import cairn, start_run, wait_for

pytestmark = browser_marks

TICKS = "for i in $(seq 1 16); do echo tick $i; sleep 0.5; done"
SESSION = "for i in 1 2 3 4 5 6 7 8; do echo sess $i; sleep 0.5; done; sleep 30"


def test_a_running_commands_output_and_a_sessions_screen_show_as_they_come_with_no_click(page, runs_dir, tmp_path):
    turns = [turn(call("file_write", path="probe.html", content="<p>hi</p>\n")),
             turn(call("shell_exec", command=TICKS)),
             turn(call("shell_start", command=SESSION, session="counter", wait=7)),
             turn(call("shell_exec", command="cat probe.html")),
             done("counted")]
    proc = start_run(runs_dir, "count slowly", tmp_path / "ticks.json", turns)
    try:
        run = only_run(runs_dir)
        open_run(page, run.id)
        # The newest step of a live run is open, and its command's output streams in while it runs.
        page.wait_for_selector("#step-2[open] pre.live-output:has-text('tick 4')", timeout=120_000)
        assert "tick 16" not in page.locator("#step-2 pre.live-output").inner_text()  # still running
        assert page.locator("#step-2 summary").inner_text().count("running") == 1
        assert page.locator("#step-1").get_attribute("open") is None  # the older step is collapsed
        assert "write probe.html (1 line)" in page.locator("#step-1 summary").inner_text()
        # A terminal session's screen, as the session's answer renders it, while shell_start waits.
        page.wait_for_selector("#step-3[open] pre.live-output:has-text('sess 3')", timeout=120_000)
        assert page.locator("#step-2").get_attribute("open") is None
        assert proc.wait(240) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    page.wait_for_selector("body[data-status='done']", timeout=60_000)
    rows = [page.locator(f"#step-{n} summary").inner_text() for n in (1, 2, 3, 4)]
    assert "$ for i in $(seq 1 16)" in rows[1] and "$ for i in 1 2 3" in rows[2] and "[session counter]" in rows[2]
    assert "$ cat probe.html" in rows[3]  # each row names its call, as cairn show does
    page.click("#step-2 summary")
    assert "tick 16" in page.locator("#step-2 pre.result").inner_text()  # the result, once it ended
    assert page.locator("#step-2 pre.live-output").count() == 0
    assert page.errors == []


def test_send_answers_the_question_of_a_waiting_run_and_it_goes_on_to_done(page, runs_dir, tmp_path):
    turns = [turn(call("ask_user", question="Which colour should the button be?")),
             turn(call("shell_exec", command="echo painted > button.txt")), done("made it blue")]
    run = ended_run(runs_dir, "paint the button", tmp_path / "ask.json", turns, exit_code=1)
    open_run(page, run.id)
    page.wait_for_selector("body[data-status='waiting']")
    page.wait_for_selector("#send-hint:has-text('answers the agent')")  # said before anything is sent
    page.fill("#message", "blue, please")
    page.click("#send")  # one action: the answer, and the run goes on with it
    page.wait_for_selector("#flash:has-text('answered')", timeout=60_000)
    page.wait_for_selector("body[data-status='done']", timeout=180_000)
    assert page.locator("#result").inner_text() == "made it blue"
    answers = [(e.source, e.text) for e in run.events.read()[0] if e.type == "user_message"]
    assert answers == [("answer", "blue, please")]
    assert (run.workspace / "button.txt").read_text() == "painted\n"  # the script went on from its turn
    assert page.errors == []


def test_send_follows_up_a_run_that_is_done_and_it_goes_on_to_done(page, runs_dir, tmp_path):
    turns = [done("wrote the parser"), turn(call("file_write", path="NOTES.md", content="notes\n")),
             done("added the notes")]
    run = ended_run(runs_dir, "write a parser", tmp_path / "follow.json", turns)
    open_run(page, run.id)
    page.wait_for_selector("body[data-status='done']")
    page.wait_for_selector("#send-hint:has-text('follows it up')")
    page.fill("#message", "now add NOTES.md")
    page.click("#send")
    page.wait_for_selector("#flash:has-text('followed up')", timeout=60_000)
    wait_for(lambda: run.read_meta().get("result") == "added the notes", what="the follow-up to end", timeout=180)
    page.wait_for_selector("#result:has-text('added the notes')", timeout=60_000)
    page.wait_for_selector("body[data-status='done']", timeout=60_000)  # once its drive has let go of it
    assert page.locator("#status").inner_text() == "done"
    said = [(e.source, e.text) for e in run.events.read()[0] if e.type == "user_message"]
    assert ("user", "now add NOTES.md") in said
    assert (run.workspace / "NOTES.md").read_text() == "notes\n"
    assert page.errors == []


def test_a_run_started_from_the_form_with_an_api_base_reaches_done(page, runs_dir, tmp_path):
    model = FakeOpenAI("local-coder", [{"tool_calls": [("shell_exec", {"command": "echo 42 > answer.txt"})]},
                                       {"tool_calls": [("task_done", {"summary": "wrote the answer"})]}])
    try:
        page.fill("#task", "write the answer")
        page.fill("#model", "openai/local-coder")
        page.fill("#api_base", model.url)
        page.fill("#max_steps", "7")
        page.fill("#max_cost", "0.5")
        page.click("#start")
        page.wait_for_url("**/runs/*", timeout=120_000)
        page.wait_for_selector("body[data-status='done']", timeout=180_000)
    finally:
        model.close()
    run = RunDir(runs_dir / page.url.rsplit("/", 1)[1])
    assert page.locator("#result").inner_text() == "wrote the answer"
    assert (run.workspace / "answer.txt").read_text() == "42\n"
    assert {r["model"] for r in model.requests} == {"local-coder"}
    config = run.read_meta()["config"]
    assert config["model"]["api_base"] == model.url
    assert (config["limits"]["max_steps"], config["limits"]["max_cost"]) == (7, 0.5)
    page.goto(page.url.split("/runs/")[0] + "/")
    page.fill("#task", "x")
    page.fill("#max_steps", "many")
    page.click("#start")
    page.wait_for_selector("#flash.bad:has-text('Max steps is a whole number')")
    assert page.errors == []


def test_on_a_phone_width_screen_nothing_scrolls_sideways_and_the_task_shows(browser, server, runs_dir, tmp_path):
    task = "Write a small command-line tool that converts CSV files to JSON, with tests for quoting"
    run = ended_run(runs_dir, task, tmp_path / "checked.json", [done("converted")], "--check", "exit 1", exit_code=1)
    wide = open_page(browser, server, width=1280)
    try:
        wide.wait_for_selector("body[data-runs='1']")
        cell = wide.locator("#runs tbody td.task")
        assert cell.bounding_box()["width"] >= 300  # the task's room, not `Write ...`
        badge = wide.locator("#runs tbody .badge")
        assert badge.inner_text() == "done · check failed" and "check-failed" in badge.get_attribute("class")
    finally:
        wide.context.close()
    phone = open_page(browser, server, width=420, height=860)
    try:
        phone.wait_for_selector("body[data-runs='1']")
        assert sideways(phone) == 0
        cell = phone.locator("#runs tbody td.task")
        assert cell.is_visible() and cell.bounding_box()["width"] >= 300 and "converts CSV files" in cell.inner_text()
        assert not phone.locator("#runs thead").is_visible()  # no header squeezed over the rows
        open_run(phone, run.id)
        phone.wait_for_selector("body[data-ready='1']")
        phone.wait_for_selector("#status:has-text('check failed')")
        phone.click("#step-1 summary")
        assert sideways(phone) == 0
        box = phone.locator("h1").bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= 420
        assert phone.errors == []
    finally:
        phone.context.close()
    assert json.loads(cairn("show", run.id, "--json", runs_dir=runs_dir).stdout)["check"]["passed"] is False
