"""`cairn serve` without a browser: the token, the origin check, the headers, files that never leave the
run, the event stream, and the command itself (its URL, its port, Ctrl-C). The browser tests are in
test_serve_browser.py."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.config import RunConfig
from orchestrator.runs.new_run import create_run
from orchestrator import events as ev
from orchestrator.store.run_dir import RunDir
from orchestrator.store.run_files import open_file
from orchestrator.ui.web.files import Refused, list_files, read_file
from orchestrator.ui.web.server import is_loopback
from tests.serve_helpers import ROOT, served


def make_run(runs: Path) -> RunDir:
    """A run that was made and never driven (no sandbox needed): status running, not live."""
    cfg = RunConfig.model_validate({"model": {"model": "scripted:demo"}})
    run = create_run(runs, "a task with <img src=x onerror=alert(1)>", cfg)
    run.events.append(ev.RunStarted(task="a task", system_prompt="s", tools=[]))
    run.release()  # made by this process, which does not drive it: it is not live
    return run


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> RunDir:
    """The one run the module's server serves. The tests below only add to it what the others do not
    look at (an event, a message, files of the workspace), so they share one server process."""
    return make_run(tmp_path_factory.mktemp("serve") / "runs")


@pytest.fixture(scope="module")
def server(made):
    yield from served(made.root.parent)


# -- the token ----------------------------------------------------------------------------------


def test_without_the_token_nothing_is_served(server, made):
    for path in ["/", f"/runs/{made.id}", "/api/runs", f"/api/runs/{made.id}", f"/api/runs/{made.id}/events",
                 f"/api/runs/{made.id}/file?path=WORKSPACE.md", "/static/run.js", "/style.css", "/nothing"]:
        status, _headers, body = server.request("GET", path, cookie=False)
        assert status == 401, path
        assert made.id.encode() not in body and b"WORKSPACE" not in body
    status, _headers, _body = server.request("GET", "/?token=not-the-token", cookie=False)
    assert status == 401
    status, _headers, _body = server.request("GET", "/api/runs", cookie=False,
                                             headers={"Cookie": f"cairn_serve_{server.port}=wrong"})
    assert status == 401


def test_the_token_moves_to_an_httponly_strict_cookie_and_out_of_the_address(server):
    status, headers, _body = server.request("GET", f"/runs/x?token={server.token}&a=1", cookie=False)
    assert status == 303
    assert headers["location"] == "/runs/x?a=1"  # the token is gone from the address
    cookie = headers["set-cookie"]
    assert cookie.startswith(f"cairn_serve_{server.port}={server.token};")
    assert "HttpOnly" in cookie and re.search(r"SameSite=strict", cookie, re.I) and "Path=/" in cookie
    status, headers, body = server.request("GET", "/")
    assert status == 200 and b"cairn runs" in body
    csp = headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp.split("style-src")[0]
    assert "frame-ancestors 'none'" in csp and headers["x-content-type-options"] == "nosniff"


def test_a_host_that_is_not_loopback_is_refused_on_a_loopback_server(server):
    """A DNS-rebinding page reaches 127.0.0.1 under its own name: refused before anything is read."""
    status, _headers, body = server.request("GET", "/", headers={"Host": f"evil.example:{server.port}"})
    assert status == 403 and b"loopback" in body
    status, _headers, _body = server.request("GET", "/", headers={"Host": "localhost:9000"})  # a tunnel's end
    assert status == 200


# -- changes: POST, same origin, JSON -------------------------------------------------------------


def test_a_replayed_change_from_another_origin_is_refused_and_changes_nothing(server, made):
    inbox = made.state / "inbox.jsonl"
    body = {"text": "delete everything"}
    path = f"/api/runs/{made.id}/say"
    refused = [
        server.post(path, body, origin="http://evil.example"),
        server.post(path, body, origin=f"http://localhost:{server.port + 1}"),
        server.post(path, body, origin=None),  # no Origin at all
        server.post(path, body, **{"Sec-Fetch-Site": "cross-site"}),
        server.post(path, body, **{"Content-Type": "text/plain"}),  # what a form on another site can send
    ]
    for status, data in refused:
        assert status == 403, data
        assert b"refused" in data
    status, _headers, _data = server.request("PUT", path, body, {"Origin": server.base, "Content-Type": "application/json"})
    assert status == 405
    status, _headers, _data = server.request("GET", path)  # a GET never changes anything
    assert status in (404, 405)
    for action in ("stop", "resume", "answer"):
        status, _data = server.post(f"/api/runs/{made.id}/{action}", {"approve": True}, origin="http://evil.example")
        assert status == 403
    status, _data = server.post("/api/runs", {"task": "mine now"}, origin="http://evil.example")
    assert status == 403
    assert not inbox.exists() and not made.stop_path.exists()
    assert sorted(p.name for p in made.root.parent.iterdir()) == [made.id]
    # The same request from the page's own origin is taken up: the refusals above were the origin's (an
    # empty message is then refused for what it is; a real one would resume this run: test_watch_and_steer_*).
    status, data = server.post(path, {"text": " "})
    assert status == 400 and json.loads(data)["error"] == "the message is empty", data


def test_a_button_that_cannot_act_says_why_in_one_line(server, made):
    status, data = server.post(f"/api/runs/{made.id}/stop", {})
    assert status == 400 and json.loads(data)["error"] == f"run {made.id} is not running"
    status, data = server.post(f"/api/runs/{made.id}/answer", {"approve": True})
    assert status == 400 and "waits for no approval" in json.loads(data)["error"]
    status, data = server.post(f"/api/runs/{made.id}/answer", {"approve": False, "reason": " "})
    assert status == 400 and json.loads(data)["error"] == "a denial needs a reason (it is told to the model)"
    status, data = server.post(f"/api/runs/{made.id}/say", {"text": "  "})
    assert status == 400 and json.loads(data)["error"] == "the message is empty"
    status, data = server.post(f"/api/runs/{made.id}/say", b"not json")
    assert status == 400 and json.loads(data)["error"] == "the request is not JSON"
    status, data = server.post("/api/runs/nope/say", {"text": "x"})
    assert status == 404
    status, data = server.post("/api/runs", {"task": "t", "model": "scripted:/no/such/script.json"})
    assert status == 400 and "no/such/script.json" in json.loads(data)["error"]


# -- reading --------------------------------------------------------------------------------------


def test_the_list_and_a_runs_summary_are_those_of_cairn_ls(server, made):
    status, _headers, body = server.request("GET", "/api/runs")
    (row,) = json.loads(body)
    ls = subprocess.run([sys.executable, "-m", "orchestrator.cli", "ls", "--json", "--runs-dir", str(made.root.parent)],
                        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    (listed,) = json.loads(ls.stdout)
    assert {k: v for k, v in row.items() if k != "duration_s"} == {k: v for k, v in listed.items() if k != "duration_s"}
    status, _headers, body = server.request("GET", f"/api/runs/{made.id}")
    summary = json.loads(body)
    assert summary["status"] == "interrupted" and summary["live"] is False
    assert summary["can"] == {"stop": False, "approve": False, "resume": True}


def test_the_event_stream_sends_new_events_from_where_the_page_is(server, made):
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(f"GET /api/runs/{made.id}/events HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
                  f"Cookie: {server.cookie}\r\n\r\n".encode())
        seen = b""
        while b"caught-up" not in seen:
            seen += s.recv(65536)
        assert b'"t":"task"' in seen and b"system_prompt" not in seen  # what the page needs, no more
        made.events.append(ev.ToolStarted(step=1, call_id="c1", name="shell_exec", arguments='{"command": "ls"}'))
        while b'"t":"call"' not in seen:
            seen += s.recv(65536)
    offsets = [int(m) for m in re.findall(rb"id: (\d+)", seen)]
    assert offsets[-1] == made.events.path.stat().st_size  # a reconnect (Last-Event-ID) goes on from there


def test_files_are_read_only_inside_the_run(tmp_path):
    root = tmp_path / "workspace"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("print('a')\n")
    (tmp_path / "secret.txt").write_text("the host's secret\n")
    os.symlink("/etc/passwd", root / "absolute")
    os.symlink("../secret.txt", root / "up")
    os.symlink("..", root / "src" / "parent")  # inside: src/parent is the workspace itself
    os.symlink("src/a.py", root / "inside")
    os.symlink("src/../../secret.txt", root / "sneaky")
    os.mkfifo(root / "fifo")
    assert read_file(root, "src/a.py")["text"] == "print('a')\n"
    assert read_file(root, "inside")["text"] == "print('a')\n"
    assert read_file(root, "src/parent/src/a.py")["text"] == "print('a')\n"
    for path, why in [("absolute", "outside the run"), ("up", "outside the run"), ("sneaky", "outside the run"),
                      ("src/parent/up", "outside the run"), ("src/parent/../secret.txt", "no '..'"),
                      ("../secret.txt", "no '..'"), ("/etc/passwd", "relative"), ("fifo", "not a regular file"),
                      ("src", "not a regular file"), ("nothing", "no such file"), ("a\0b", "NUL")]:
        with pytest.raises(Refused, match=re.escape(why)):
            open_file(root, path, links="inside")
    listed = {r["path"]: r["link"] for r in list_files(root)["files"]}
    assert listed["up"] is True and listed["src/a.py"] is False and "src/parent/src/a.py" not in listed


def test_loopback_hosts():
    assert all(is_loopback(h) for h in ("127.0.0.1", "localhost", "::1", "[::1]", "127.0.0.2"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "192.168.1.5", "example.com"))


# -- the command ----------------------------------------------------------------------------------


def test_serve_prints_its_url_and_stops_on_ctrl_c(tmp_path):
    from tests.serve_helpers import start_server, stop_server

    started = time.monotonic()
    server = start_server(tmp_path / "runs")
    took = time.monotonic() - started
    try:
        assert server.base.startswith("http://127.0.0.1:") and server.port > 0 and len(server.token) >= 40
        status, _headers, _body = server.request("GET", "/api/runs")
        assert status == 200
        assert "litellm" not in "".join(server.output)
    finally:
        code = stop_server(server)
    assert code == 0, "".join(server.output)
    print(f"cairn serve answered {took:.2f} s after it was started")


def test_serve_imports_neither_litellm_nor_docker():
    code = ("import sys; from orchestrator.ui.web.app import create_app; import uvicorn; "
            "import orchestrator.cli; print(sorted(m for m in ('litellm', 'docker') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.stdout.strip() == "[]", out.stderr


def test_a_host_that_is_not_loopback_is_said_loudly(tmp_path):
    from tests.serve_helpers import start_server, stop_server

    server = start_server(tmp_path / "runs", "--host", "0.0.0.0")
    try:
        text = "".join(server.output)
        assert "WARNING" in text and "anyone who reaches port" in text and "SSH tunnel" in text
    finally:
        stop_server(server)


def test_a_port_in_use_is_one_clear_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = subprocess.run([sys.executable, "-m", "orchestrator.cli", "serve", "--port", str(port), "--runs-dir",
                              str(tmp_path)], capture_output=True, text=True, cwd=ROOT, timeout=60,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 2
    assert out.stderr.startswith(f"cairn: error: cannot listen on 127.0.0.1:{port}: Address already in use")


def test_an_image_of_the_workspace_is_served_as_an_image_and_nothing_else_is(server, made):
    png = bytes.fromhex("89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
                        "0000000d4944415478da63f8cfc0f01f0005000201a5ad6b9b0000000049454e44ae426082")
    (made.workspace / "plot.png").write_bytes(png)
    (made.workspace / "evil.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>')
    status, headers, body = server.request("GET", f"/api/runs/{made.id}/raw?path=plot.png")
    assert status == 200 and body == png and headers["content-type"] == "image/png"
    assert "sandbox" in headers["content-security-policy"]
    status, _headers, body = server.request("GET", f"/api/runs/{made.id}/raw?path=evil.svg")
    assert status == 403 and b"<script>" not in body
    status, _headers, body = server.request("GET", f"/api/runs/{made.id}/file?path=evil.svg")
    assert status == 200 and json.loads(body)["image"] is None  # shown as text on the page


def test_the_list_says_what_a_run_is_now_each_time_it_is_read(tmp_path):
    from orchestrator.ui.inspect.listing import list_runs

    made = make_run(tmp_path / "runs")
    (first,) = list_runs(made.root.parent)
    assert first["status"] == "interrupted"  # no end recorded, no process: it went away
    made.events.append(ev.StatusChanged(step=0, status="stopped", reason="the model answered without a tool call"))
    (after,) = list_runs(made.root.parent)
    assert after["status"] == "stopped" and after["reason"] == "the model answered without a tool call"
    import shutil

    shutil.rmtree(made.root)
    assert list_runs(made.root.parent) == []


def test_the_charts_of_a_long_run_draw_groups_of_steps():
    from orchestrator.ui.web.views import CHART_STEPS, grouped

    def step(n: int) -> dict:
        start = 1000.0 + n
        return {"index": n, "usage": {"prompt_tokens": n, "cached_tokens": n // 2, "cost_usd": 0.001},
                "time": {"start": start, "end": start + 0.9, "ms": 900.0,
                         "model": [{"start": start, "ms": 500.0}],
                         "tools": [{"start": start + 0.6, "ms": 300.0, "name": "shell_exec", "error": n == 7}]}}

    few = [step(n) for n in range(1, CHART_STEPS + 1)]
    assert grouped(few, [(1000.0, 1400.0)]) == few  # each step, as the report draws them
    many = [step(n) for n in range(1, 3001)]
    groups = grouped(many, [(1000.0, 4001.0)])
    assert len(groups) == CHART_STEPS and groups[-1]["index"] == 3000
    first = groups[0]
    assert first["usage"] == {"prompt_tokens": 10, "cached_tokens": 5, "cost_usd": pytest.approx(0.01)}
    # 3,000 s on ~1,000 pixels: spans 0.5 s apart are joined, but never an error's
    assert len(first["time"]["model"]) == 1 and first["time"]["model"][0]["ms"] == pytest.approx(9500.0)
    assert [t["error"] for t in first["time"]["tools"]] == [False, True, False]


@pytest.mark.parametrize("status, result, does, said", [
    (None, None, "say", "at its next step"),  # live: cairn say
    ("waiting", "Which colour?", "answer", "answers the agent's question"),
    ("done", "it works", "follow-up", "follows it up"),
    ("stopped", None, "follow-up", "resumes it with your message"),
    ("interrupted", None, "follow-up", "resumes it with your message"),
    ("budget", None, "follow-up", "--max-steps N"),
])
def test_send_says_before_it_is_pressed_what_it_will_do(tmp_path, status, result, does, said):
    from orchestrator.ui.web.views import summary

    run = make_run(tmp_path / "runs")
    if status is None:
        run.hold()  # this process drives it: live
    else:
        run.events.append(ev.StatusChanged(step=1, status=status, reason="ask_user" if status == "waiting" else "x",
                                           result=result))
    plan = summary(run)["send"]
    assert plan["does"] == does and said in plan["hint"]
    run.release()


def test_a_call_that_waits_for_approval_reaches_the_page_as_the_call_it_is():
    """The page shows the call whole (its tool and arguments) while it waits, not `(text only)`."""
    from orchestrator import events as ev
    from orchestrator.ui.web.feed import item

    asked = item(ev.ApprovalAsked(step=2, call_id="c1", name="shell_exec", arguments='{"command": "git push origin main"}',
                                  why="git push, with the network on", grant="shell_exec: git push"))
    assert (asked["t"], asked["id"], asked["name"], asked["step"]) == ("asked", "c1", "shell_exec", 2)
    assert "git push origin main" in asked["arguments"]


def test_the_pages_scripts_put_text_in_through_one_function_only():
    """Text from a run reaches the page as text, with bidirectional controls shown as their codes
    (issue 34, hole 8): every script sets it through cairn.text (common.js), never by its own
    textContent or as markup, so no later edit can let one view show a command as something else."""
    static = ROOT / "orchestrator" / "ui" / "web" / "static"
    for script in sorted(static.glob("*.js")):
        for number, line in enumerate(script.read_text().splitlines(), 1):
            if script.name == "common.js" and "function text(" in line:
                continue  # the one place that sets it
            code = line.split("//", 1)[0]
            assert ".textContent =" not in code and "innerHTML" not in code and "insertAdjacentHTML" not in code, \
                f"{script.name}:{number}: {line.strip()}"
