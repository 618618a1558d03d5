"""`cairn report`: one self-contained HTML page, loaded in a real headless Chromium."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from orchestrator.config import RunConfig
from orchestrator.ui.inspect.report import render_report, write_report
from orchestrator.runs.new_run import create_run
from orchestrator import events as ev
from tests.loop_helpers import call, done, play, turn

EVIL = "<script>document.body.dataset.pwned='1'</script>"
BIG = "python3 -c \"print('\\n'.join('row %05d ' % i + 'y' * 40 for i in range(3000)))\""
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _dump_dom(page: Path, profile: Path, fragment: str = "") -> str:
    """The page's DOM after its script ran; `fragment` (`request-3`) opens that element as a link would."""
    argv = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--virtual-time-budget=3000",
            "--dump-dom", page.resolve().as_uri() + (f"#{fragment}" if fragment else "")]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _body_attrs(dom: str) -> dict[str, str]:
    tag = re.search(r"<body([^>]*)>", dom)
    assert tag, dom[:2000]
    return {k: html.unescape(v) for k, v in re.findall(r'([\w-]+)="([^"]*)"', tag.group(1))}


@pytest.mark.docker
@pytest.mark.skipif(CHROMIUM is None, reason="no chromium (scripts/setup.sh installs it on Debian as root)")
def test_the_report_loads_in_chromium_without_errors_and_shows_every_step(tmp_path, sandbox_image):
    pricing = {"pricing": {"input": 0.001, "cached_input": 0.0001, "output": 0.002}}
    out = play(tmp_path, [
        turn(call("todo_write", content="- [ ] write notes\n- [ ] check <b>bold</b>\n"), content="Planning first."),
        turn(call("file_write", path="notes.md", content="# notes & <stuff>\n")),
        turn(call("shell_exec", command=f"echo \"{EVIL}\"; exit 3")),
        turn(call("shell_exec", command=BIG)),
        turn(call("todo_write", content="- [x] write notes\n- [x] check\n")),
        done("all <done> & dusted"),
    ], task="Make notes <em>now</em>", script_extra=pricing)
    assert out.status == "done"
    page = write_report(out.run, tmp_path / "report.html")
    source = page.read_text()
    assert "http://" not in source and "https://" not in source  # nothing to fetch: self-contained

    dom = _dump_dom(page, tmp_path / "profile")
    body = _body_attrs(dom)
    assert body.get("data-ready") == "1", body
    assert "data-errors" not in body, body["data-errors"]
    assert "data-pwned" not in body
    n_steps = len(out.doc["steps"])
    assert n_steps == 6
    assert body.get("data-steps") == str(n_steps)
    steps = re.findall(r'<details class="step[^"]*" id="step-(\d+)"', dom)
    assert steps == [str(i) for i in range(1, n_steps + 1)]
    tools = re.findall(r'<div class="call[^"]*" data-tool="([^"]+)"', dom)
    assert tools == ["todo_write", "file_write", "shell_exec", "shell_exec", "todo_write", "task_done"]
    # marks, the todo as it changed, files per step, the chart, the escaped task and result
    assert dom.count('class="mark-err"') >= 1 and "offloaded to /cairn/obs/4-shell_exec.txt" in dom
    assert len(re.findall(r'<div class="todo" data-step="(\d+)"', dom)) == 2
    assert "notes.md" in dom and "todo.md" in dom
    assert dom.count('class="cost"') == n_steps and "<polyline" in dom
    assert "Make notes &lt;em&gt;now&lt;/em&gt;" in dom and "all &lt;done&gt; &amp; dusted" in dom


def test_the_report_escapes_a_script_in_a_tool_result(tmp_path):
    cfg = RunConfig.model_validate({"model": {"model": "scripted:demo"}})
    run = create_run(tmp_path / "runs", "task with <img src=x onerror=alert(1)>", cfg)
    message = {"role": "assistant", "content": "I'll print </pre><script>alert('text')</script>",
               "tool_calls": [{"id": "c1", "type": "function",
                               "function": {"name": "shell_exec", "arguments": '{"command": "echo \\"<script>\\""}'}}]}
    for e in [
        ev.ModelRequest(step=1, model="m", usage={"prompt_tokens": 100, "cached_tokens": 0, "cost_usd": 0.01}),
        ev.AssistantMessage(step=1, message=message),
        ev.ToolStarted(step=1, call_id="c1", name="shell_exec", arguments='{"command": "echo \\"<script>\\""}'),
        ev.ToolFinished(step=1, call_id="c1", name="shell_exec", content=f"{EVIL}\n\"quoted\" 'single'"),
        ev.Compaction(step=1, kind="pointers", tokens_before=10, tokens_after=5),
        ev.StatusChanged(step=1, status="done", result="<script>alert('result')</script>"),
    ]:
        run.events.append(e)
    page = render_report(run)
    scripts = re.findall(r"<script\b[^>]*>", page, flags=re.I)
    assert scripts == ['<script type="application/json" id="requests-data">', "<script>"]  # data, and the page's own
    assert page.count("</script>") == 2  # no payload closes the data block
    assert html.escape(EVIL) in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page and "<img" not in page
    assert "&lt;/pre&gt;&lt;script&gt;alert(&#x27;text&#x27;)" in page
    assert 'class="compaction"' in page
    # the policy lets only the page's own script run (by hash), should anything slip through
    assert re.search(r"script-src 'sha256-[A-Za-z0-9+/=]+'", html.unescape(page.split("<title>")[0]))


def test_report_command_writes_the_page(tmp_path, runs_dir):
    from typer.testing import CliRunner

    from orchestrator.cli import app

    cfg = RunConfig.model_validate({"model": {"model": "scripted:demo"}})
    run = create_run(runs_dir, "a task", cfg)
    result = CliRunner().invoke(app, ["report", run.id, "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 0, result.output
    assert "a task" in (tmp_path / "r.html").read_text()


def _open_element(dom: str, element_id: str) -> str:
    """The opening tag and text of the element with this id in a dumped DOM (its markup unescaped)."""
    found = re.search(rf'<(\w+)[^>]* id="{element_id}"[^>]*>(.*?)</\1>', dom, flags=re.S)
    assert found, f"no #{element_id} in the page"
    return found.group(0)


@pytest.mark.docker
@pytest.mark.skipif(CHROMIUM is None, reason="no chromium (scripts/setup.sh installs it on Debian as root)")
def test_a_failed_runs_reason_and_a_steps_diff_are_visible_in_chromium(tmp_path, sandbox_image):
    out = play(tmp_path, [
        turn(call("file_write", path="hello.py", content="print('hello <world>')\n")),
        {"fail": 401},
    ])
    assert out.status == "failed"
    page = write_report(out.run, tmp_path / "report.html")
    dom = _dump_dom(page, tmp_path / "profile", fragment="diff-1")
    assert _body_attrs(dom).get("data-ready") == "1"
    reason = html.unescape(re.sub(r"<[^>]+>", "", _open_element(dom, "reason")))
    assert reason.startswith("failed") and out.doc["error"]["reason"] in reason
    diff = _open_element(dom, "diff-1")
    assert re.match(r'<details class="diff" id="diff-1" open=""', diff)  # the link opened it
    assert "+++ b/hello.py" in diff and html.escape("+print('hello <world>')", quote=False) in diff


@pytest.mark.docker
@pytest.mark.skipif(CHROMIUM is None, reason="no chromium (scripts/setup.sh installs it on Debian as root)")
def test_a_steps_durations_and_the_time_axis_are_shown(tmp_path, sandbox_image):
    out = play(tmp_path, [turn(call("shell_exec", command="sleep 0.5"), call("shell_exec", command="true")), done()])
    page = write_report(out.run, tmp_path / "report.html")
    dom = _dump_dom(page, tmp_path / "profile", fragment="step-1")
    step = _open_element(dom, "step-1")
    took = re.search(r'started \+0:\d\d into the run · took ([\d.]+) s: model request ([\d.]+) s, '
                     r'tool calls ([\d.]+) s', step)
    assert took, step[:3000]
    total, model, tools = map(float, took.groups())
    assert tools >= 0.5 and total >= model + tools - 0.02  # the sleep is in the tools' time, inside the step's
    assert len(re.findall(r'<span class="dur"', dom)) == 2
    axis = _open_element(dom, "time-axis")
    assert axis.count('class="model"') == 2 and axis.count('class="tool"') == 3


@pytest.mark.docker
@pytest.mark.skipif(CHROMIUM is None, reason="no chromium (scripts/setup.sh installs it on Debian as root)")
def test_the_messages_of_a_request_are_those_the_model_received(tmp_path, sandbox_image):
    out = play(tmp_path, [
        turn(call("todo_write", content="- [ ] write </script><img src=x onerror=alert(1)>\n"), content="Plan."),
        turn(call("file_write", path="a.md", content=EVIL)),
        turn(call("shell_exec", command=BIG)),
        turn(call("todo_write", content="- [x] all\n")),
        done(),
    ], settings={"limits": {"max_steps": 20}})
    assert out.status == "done" and len(out.requests) == 5
    page = write_report(out.run, tmp_path / "report.html")
    for k in (0, 3, 4):
        dom = _dump_dom(page, tmp_path / f"profile-{k}", fragment=f"request-{k}")
        body = _body_attrs(dom)
        assert body.get("data-ready") == "1" and "data-errors" not in body and "data-pwned" not in body
        box = _open_element(dom, f"request-{k}")
        shown = re.search(r'<pre class="messages" data-filled="1">(.*?)</pre>', box, flags=re.S)
        assert shown, box[:2000]
        # litellm leaves a null content out of what an OpenAI-compatible endpoint gets; the rest is as sent
        sent = out.requests[k]["messages"]
        assert [{key: v for key, v in m.items() if v is not None} for m in json.loads(html.unescape(shown.group(1)))] == sent


def test_a_huge_diff_is_cut_and_the_page_stays_small(tmp_path):
    from orchestrator.store.checkpoints import Checkpoints

    cfg = RunConfig.model_validate({"model": {"model": "scripted:demo"}})
    run = create_run(tmp_path / "runs", "a task", cfg)
    cp = Checkpoints.of(run)
    cp.init()
    run.events.append(ev.Checkpoint(step=0, commit=cp.commit(0).commit))
    (run.workspace / "big.txt").write_text("".join(f"line {i}\n" for i in range(200_000)))  # ~2.3 MB
    (run.workspace / ".cairn").mkdir()
    (run.workspace / ".cairn" / "obs.txt").write_text("cairn's own\n")
    for e in [ev.ModelRequest(step=1, model="m", usage={"prompt_tokens": 10}),
              ev.AssistantMessage(step=1, message={"role": "assistant", "content": "wrote it"})]:
        run.events.append(e)
    run.events.append(ev.Checkpoint(step=1, commit=cp.commit(1).commit))
    page = render_report(run)
    assert len(page.encode()) < 200_000
    assert "+line 0\n" in page and "+line 199999" not in page
    assert f"cairn diff {run.id} --step 1` prints it whole" in page
    diff = _open_element(page, "diff-1")
    assert "big.txt" in diff and ".cairn/obs.txt" not in diff  # cairn's own files are left out


def test_the_report_reads_a_long_run_with_as_many_git_processes_as_a_short_one(tmp_path, monkeypatch):
    """One `git log` for every step's checkpoint, one diff process for all the steps, one read of all the
    todo.md versions: not a few git processes per step."""
    import git

    from tests import fake_loop

    def run_of(steps: int) -> Path:
        turns = []
        for i in range(steps):
            turns.append(turn(call("file_write", path=f"f{i % 3}.txt", content=f"version {i}\n")) if i % 2 else
                         turn(call("todo_write", content=f"- [ ] step {i}\n")))
        return fake_loop.play(tmp_path / f"r{steps}", [*turns, done()], settings={"limits": {"max_steps": 50}}).run

    counted: list[list[str]] = []
    execute = git.cmd.Git.execute

    def counting(self, command, *args, **kwargs):  # noqa: ANN001, ANN202
        counted.append(list(command))
        return execute(self, command, *args, **kwargs)

    short, long = run_of(3), run_of(14)
    monkeypatch.setattr(git.cmd.Git, "execute", counting)
    processes, pages = [], []
    for run in (short, long):
        counted.clear()
        pages.append(render_report(run))
        processes.append(len(counted))
    assert processes[0] == processes[1] <= 6, counted
    assert "+version 13" in pages[1] and "step 12" in pages[1]  # the last step's diff; the todo it read before
    from orchestrator.ui.inspect.report_data import rebuilt_requests
    from orchestrator.ui.inspect.timeline import walk

    requests = rebuilt_requests(long, walk(long)["events"])["requests"]
    assert len(requests) == 15 and all(len(r["ranges"]) <= 2 for r in requests)  # a request costs two ranges
    assert requests[-1]["count"] == requests[-1]["recorded"]  # whatever the history's length
