"""`cairn serve` in a real browser: Debian's headless Chromium driven by Playwright, over real scripted runs
in real sandboxes. The page is opened with the URL the server printed, as a person would."""

from __future__ import annotations

import json
import time

from orchestrator.store.run_dir import RunDir
from tests.browser_helpers import browser, browser_marks, ended_run, only_run, open_run, page, server  # noqa: F401 - fixtures
from tests.loop_helpers import call, done, turn
from tests.serve_helpers import cairn, start_run, wait_for

pytestmark = browser_marks

XSS = ("<script>document.body.dataset.pwned='script'</script>"
       "<img src=x onerror=\"document.body.dataset.pwned='img'\">")


def shell(command: str) -> dict:
    return turn(call("shell_exec", command=command))


def test_the_list_shows_the_runs_newest_first_and_filters_by_status(page, server, runs_dir, tmp_path):
    first = cairn("run", "--model", "scripted:demo", "--", "the first", runs_dir=runs_dir)
    assert first.returncode == 0, first.stderr
    script = tmp_path / "fails.json"
    script.write_text(json.dumps({"turns": [{"fail": 401}]}))
    second = cairn("run", "--model", f"scripted:{script}", "--", "the second", runs_dir=runs_dir)
    assert second.returncode == 1
    page.reload()
    page.wait_for_selector("body[data-runs='2']")
    rows = page.locator("#runs tbody tr")
    assert [rows.nth(i).get_attribute("data-status") for i in range(2)] == ["failed", "done"]  # newest first
    assert "the second" in rows.nth(0).inner_text() and "the first" in rows.nth(1).inner_text()
    assert "401" in rows.nth(0).locator("td.reason").inner_text() or rows.nth(0).locator("td.reason").inner_text()
    assert rows.nth(1).locator("td").nth(3).inner_text() == "8"  # the demo's steps
    page.select_option("#filter", "done")
    page.wait_for_selector("body[data-runs='1']")
    assert page.locator("#runs tbody tr").count() == 1 and "the first" in page.locator("#runs tbody tr").inner_text()
    assert page.errors == []


def test_a_live_run_grows_without_reload_gets_a_message_and_stops(page, server, runs_dir, tmp_path):
    turns = [shell(f"sleep 1.5; echo step {i}") for i in range(40)]
    proc = start_run(runs_dir, "a long one", tmp_path / "long.json", turns)
    try:
        run = only_run(runs_dir)
        wait_for(lambda: (run.state / "pid").exists(), what="the run to be live")
        open_run(page, run.id)
        page.evaluate("window.sameDocument = true")
        page.wait_for_selector("#step-1")
        shown = int(page.evaluate("document.body.dataset.steps"))
        page.wait_for_selector(f"#step-{shown + 2}", timeout=60_000)  # appeared while we looked
        assert page.evaluate("window.sameDocument") is True  # no reload
        assert page.locator("#stop").is_visible() and page.locator("#status").inner_text() == "running"

        page.fill("#message", "please also write NOTES.md")
        page.click("#send")
        page.wait_for_selector("#flash:has-text('next step')")
        said = wait_for(lambda: [e for e in run.events.read()[0]
                                 if e.type == "user_message" and e.text == "please also write NOTES.md"],
                        what="the message to reach the run")
        step = f"#step-{said[0].step}"
        page.wait_for_selector(f"{step} summary:has-text('✉')")
        if page.locator(step).get_attribute("open") is None:  # the newest step of a live run is open already
            page.click(f"{step} summary")
        page.wait_for_selector(f"{step} .msg", state="attached")  # drawn once opened, kept if the page closes it
        assert "please also write NOTES.md" in page.locator(f"{step} .msg").text_content()

        page.click("#stop")
        page.wait_for_selector("body[data-status='interrupted']", timeout=60_000)
        assert proc.wait(60) == 130
        assert run.read_meta()["status"] == "interrupted"
        page.wait_for_selector("#resume:visible")
    finally:
        if proc.poll() is None:
            proc.kill()
    assert page.errors == []


def test_approve_resumes_a_waiting_run_to_done(page, server, runs_dir, tmp_path):
    # One turn, two calls: the push waits for approval; once approved the same step goes on to task_done.
    turns = [turn(call("shell_exec", command="git push origin main || true"), call("task_done", summary="pushed"))]
    proc = start_run(runs_dir, "push it", tmp_path / "push.json", turns, "--network", "bridge")
    assert proc.wait(240) == 1
    run = only_run(runs_dir)
    assert run.read_meta()["status"] == "waiting"
    open_run(page, run.id)
    page.wait_for_selector("#approval:visible")
    assert "git push origin main" in page.locator("#approval-what").inner_text()
    assert not page.locator("#resume").is_visible()
    page.click("#approve")
    page.wait_for_selector("body[data-status='done']", timeout=180_000)
    assert page.locator("#result").inner_text() == "pushed"
    answers = [e for e in run.events.read()[0] if e.type == "approval_answered"]
    assert [(a.approved, a.by) for a in answers] == [(True, "cairn approve")]
    assert json.loads(cairn("show", run.id, "--json", runs_dir=runs_dir).stdout)["status"] == "done"
    assert page.errors == []


def test_a_runs_markup_is_shown_as_text_and_nothing_of_it_runs(page, server, runs_dir, tmp_path):
    name = "<img src=x onerror=alert(1)>.txt"
    turns = [turn(call("file_write", path=name, content=XSS)),
             turn(call("shell_exec", command=f"cat '{name}'"), content=f"I say {XSS}"),
             turn(call("todo_write", content=f"- [ ] {XSS}\n")),
             done(XSS)]
    proc = start_run(runs_dir, f"task {XSS}", tmp_path / "xss.json", turns)
    assert proc.wait(240) == 0
    run = only_run(runs_dir)
    open_run(page, run.id)
    page.click("#expand-all")
    page.wait_for_selector("#step-2 pre.result")
    assert page.locator("#step-2 pre.result").inner_text().startswith(XSS + "\n[exit code 0")
    assert page.locator("#step-2 pre.assistant").inner_text() == f"I say {XSS}"
    assert page.locator("#task").inner_text() == f"task {XSS}"
    assert page.locator("#result").inner_text() == XSS
    page.wait_for_selector("#todo:has-text('onerror')")
    assert page.locator("#todo").inner_text().strip() == f"- [ ] {XSS}"
    page.click(f"#files button[data-path='{name}']")
    page.wait_for_selector("#viewer[data-state='shown']")
    assert page.locator("#viewer-path").inner_text() == name
    assert page.locator("#viewer-text").inner_text() == f"1  {XSS}"
    time.sleep(0.5)  # an onerror would have fired by now
    assert page.evaluate("document.body.dataset.pwned") is None
    assert page.locator("body img[src='x']").count() == 0 and page.locator("#timeline script").count() == 0
    assert page.errors == []


def test_the_file_view_refuses_a_symlink_out_of_the_run(page, server, runs_dir, tmp_path):
    turns = [shell("echo mine > real.txt; ln -s real.txt inside; ln -s /etc/passwd escape; ln -s ../../.. up"),
             done()]
    run = ended_run(runs_dir, "links", tmp_path / "links.json", turns)
    open_run(page, run.id)
    page.wait_for_selector("#files button[data-path='escape']")
    page.click("#files button[data-path='escape']")
    page.wait_for_selector("#viewer[data-state='refused']")
    assert "a link to /etc/passwd, outside the run: not followed" in page.locator("#viewer-error").inner_text()
    assert "root:" not in page.content()
    page.click("#files button[data-path='inside']")
    page.wait_for_selector("#viewer[data-state='shown']")
    assert page.locator("#viewer-text").inner_text() == "1  mine"
    for path in ("up/etc/passwd", "../../../../etc/passwd", "/etc/passwd", "escape"):
        response = page.request.get(f"{server.base}/api/runs/{run.id}/file?path={path}")
        assert response.status == 403, path
        assert "root:" not in response.text()
    assert page.errors == []


def test_a_run_started_from_the_page_is_an_ordinary_run_and_resume_goes_on(page, server, runs_dir, tmp_path):
    script = tmp_path / "talk.json"
    script.write_text(json.dumps({"turns": [{"content": "I stop here."}]}))  # an answer without a tool call
    page.fill("#task", "from the page")
    page.fill("#model", f"scripted:{script}")
    page.click("#start")
    page.wait_for_url("**/runs/*", timeout=120_000)
    page.wait_for_selector("body[data-status='stopped']", timeout=120_000)
    run_id = page.url.rsplit("/", 1)[1]
    (listed,) = json.loads(cairn("ls", "--json", runs_dir=runs_dir).stdout)
    assert (listed["id"], listed["status"], listed["task"]) == (run_id, "stopped", "from the page")

    page.wait_for_selector("#resume:visible")
    page.fill("#message", "go on, please")
    page.click("#resume")
    run = RunDir(runs_dir / run_id)
    wait_for(lambda: [e for e in run.events.read()[0] if e.type == "user_message" and e.text == "go on, please"],
             what="the resume's message")
    wait_for(lambda: len([e for e in run.events.read()[0] if e.type == "status" and e.status == "stopped"]) == 2,
             what="the resumed run to end", timeout=120)
    page.wait_for_selector("#step-2")  # its new step, on the page without a reload
    assert page.errors == []


def test_bidi_controls_show_as_their_codes_in_the_todo_diff_files_and_approval(page, server, runs_dir, tmp_path):
    """Issue 34, hole 8: a right-to-left override in what the agent wrote would show a command or a file
    as something else than it is; on the page each control shows as its code, as on the terminal."""
    rlo = "\u202e"
    turns = [turn(call("todo_write", content=f"- [ ] ship {rlo}exe.txt\u2069\n")),
             turn(call("file_write", path="notes.txt", content=f"a \u2066{rlo}b\u2069 c\n")),
             turn(call("shell_exec", command=f"git push origin main #{rlo} niam nigiro hsup"))]
    proc = start_run(runs_dir, f"task {rlo}", tmp_path / "bidi.json", turns, "--network", "bridge")
    assert proc.wait(240) == 1
    run = only_run(runs_dir)
    assert run.read_meta()["status"] == "waiting"
    open_run(page, run.id)
    page.wait_for_selector("#approval:visible")
    assert page.locator("#approval-what").inner_text() == f"shell_exec git push origin main #[U+202E] niam nigiro hsup"
    page.wait_for_selector("#todo:has-text('ship')")
    assert page.locator("#todo").inner_text().strip() == "- [ ] ship [U+202E]exe.txt[U+2069]"
    assert page.locator("#task").inner_text() == "task [U+202E]"
    page.click("#expand-all")
    page.click("#step-2 button:has-text('diff of this step')")
    page.wait_for_selector("#step-2 pre.diff:has-text('notes.txt')")
    assert "+a [U+2066][U+202E]b[U+2069] c" in page.locator("#step-2 pre.diff").inner_text()
    page.click("#files button[data-path='notes.txt']")
    page.wait_for_selector("#viewer[data-state='shown']")
    assert page.locator("#viewer-text").inner_text() == "1  a [U+2066][U+202E]b[U+2069] c"
    shown = page.evaluate("document.body.innerText")
    assert not any(c in shown for c in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"), shown
    assert page.errors == []
