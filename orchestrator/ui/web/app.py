"""The Starlette app of `cairn serve`: pages, the JSON the page reads, the event stream, the buttons.

Every route is a thin layer over cairn's own operations (views.py, files.py, feed.py, actions.py);
guard.py stands in front of all of them. The work that reads a run's files runs in a worker thread,
so a long log or a slow disk never holds up the event streams of the other pages.
"""

from __future__ import annotations

import json
import re
import threading
from importlib.resources import files as package_files
from pathlib import Path
from typing import Any, Awaitable, Callable

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from orchestrator.errors import CairnError
from orchestrator.ui.inspect.report import CSS as REPORT_CSS
from orchestrator.store.run_dir import RunDir
from orchestrator.ui.web import actions, feed, files, views
from orchestrator.ui.web.guard import SANDBOXED, Guard

STATIC = Path(str(package_files("orchestrator.ui.web") / "static"))
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,120}$")
MAX_BODY = 256 * 1024


def create_app(runs_dir: Path, token: str, port: int, loopback_only: bool, logs: Path) -> Guard:
    launcher = actions.Launcher(runs_dir, logs)
    # Fold every run's log once now, in the background (view/read.py keeps each fold): the first look at
    # the list is then as quick as the next.
    threading.Thread(target=views.runs, args=(runs_dir,), name="cairn-serve-warm-up", daemon=True).start()

    def run_of(request: Request) -> RunDir:
        run_id = request.path_params["run_id"]
        if not RUN_ID.match(run_id) or not (runs_dir / run_id / "state").is_dir():
            raise NotFound(f"no run {run_id[:80]!r} in {runs_dir}")
        return RunDir(runs_dir / run_id)

    async def page_list(request: Request) -> Response:
        return FileResponse(STATIC / "list.html")

    async def page_run(request: Request) -> Response:
        run_of(request)
        return FileResponse(STATIC / "run.html")

    async def style(request: Request) -> Response:
        # The report's own style first (the live page shows steps, calls and marks as the report does).
        return Response(REPORT_CSS + (STATIC / "web.css").read_text(), media_type="text/css")

    async def no_icon(request: Request) -> Response:
        return Response(status_code=204)

    async def api_runs(request: Request) -> Response:
        return JSONResponse(await run_in_threadpool(views.runs, runs_dir))

    async def api_summary(request: Request) -> Response:
        return JSONResponse(await run_in_threadpool(views.summary, run_of(request)))

    async def api_events(request: Request) -> Response:
        run = run_of(request)
        offset = request.headers.get("last-event-id") or request.query_params.get("from") or "0"
        return StreamingResponse(feed.stream(run, int(offset) if offset.isdigit() else 0),
                                 media_type="text/event-stream", headers={"x-accel-buffering": "no"})

    async def api_step(request: Request) -> Response:
        n = _int(request.path_params["n"])
        text = await run_in_threadpool(views.step_whole, run_of(request), n)
        if text is None:
            raise NotFound(f"no step {n}")
        return PlainTextResponse(text)

    async def api_diff(request: Request) -> Response:
        d = await run_in_threadpool(views.diff, run_of(request), _int(request.query_params.get("step", "")))
        return JSONResponse(d or {"text": "", "cut": None, "bytes": 0})

    async def api_todo(request: Request) -> Response:
        return JSONResponse({"text": await run_in_threadpool(views.todo, run_of(request))})

    async def api_chart(request: Request) -> Response:
        tokens, time_axis = await run_in_threadpool(views.charts, run_of(request))
        svg = tokens if request.path_params["which"] == "tokens" else time_axis
        return Response(svg, media_type="image/svg+xml", headers={"content-security-policy": SANDBOXED})

    async def api_files(request: Request) -> Response:
        root = files.root_of(run_of(request), request.query_params.get("root", "workspace"))
        return JSONResponse(await run_in_threadpool(files.list_files, root))

    async def api_file(request: Request) -> Response:
        root = files.root_of(run_of(request), request.query_params.get("root", "workspace"))
        return JSONResponse(await run_in_threadpool(files.read_file, root, request.query_params.get("path", "")))

    async def api_raw(request: Request) -> Response:
        root = files.root_of(run_of(request), request.query_params.get("root", "workspace"))
        data, kind = await run_in_threadpool(files.read_image, root, request.query_params.get("path", ""))
        return Response(data, media_type=kind, headers={"content-security-policy": SANDBOXED,
                                                        "content-disposition": "inline"})

    async def do_say(request: Request) -> Response:
        """The one box: `cairn say` to a live run; to a run that waits for an answer or has ended, `cairn
        resume RUN --message`, which decides what the words are (runs/resume.py)."""
        run, body = run_of(request), await _body(request)
        text = _text(body, "text")
        plan = (await run_in_threadpool(views.summary, run))["send"]
        if plan["does"] is None:
            raise actions.ActionError(plan["hint"])
        if plan["does"] == actions.SAY:
            return _done(actions.say(run, text))
        if not text.strip():
            raise actions.ActionError("the message is empty")
        went_on = await launcher.resume(run, text)
        return _done(f"{'answered' if plan['does'] == actions.ANSWER else 'followed up'}: {went_on}")

    async def do_stop(request: Request) -> Response:
        return _done(actions.stop(run_of(request)))

    async def do_answer(request: Request) -> Response:
        """Approve or deny, then go on: the answer alone would leave the run waiting for a `cairn resume`."""
        run, body = run_of(request), await _body(request)
        said = await run_in_threadpool(actions.answer, run, bool(body.get("approve")), _text(body, "reason") or None)
        return _done(f"{said}; {await launcher.resume(run)}")

    async def do_resume(request: Request) -> Response:
        body = await _body(request)
        return _done(await launcher.resume(run_of(request), _text(body, "message").strip() or None))

    async def do_start(request: Request) -> Response:
        body = await _body(request)
        form = {key: _text(body, key).strip() for key, _option in actions.FORM_OPTIONS}
        form["task"] = _text(body, "task")
        run_id = await launcher.start(form)
        return JSONResponse({"ok": True, "id": run_id, "said": f"run {run_id} started"})

    routes = [
        Route("/", page_list), Route("/runs/{run_id}", page_run), Route("/style.css", style),
        Route("/favicon.ico", no_icon),
        Route("/api/runs", api_runs), Route("/api/runs/{run_id}", api_summary),
        Route("/api/runs/{run_id}/events", api_events), Route("/api/runs/{run_id}/steps/{n}", api_step),
        Route("/api/runs/{run_id}/diff", api_diff), Route("/api/runs/{run_id}/todo", api_todo),
        Route("/api/runs/{run_id}/chart/{which:str}.svg", api_chart),
        Route("/api/runs/{run_id}/files", api_files), Route("/api/runs/{run_id}/file", api_file),
        Route("/api/runs/{run_id}/raw", api_raw),
        Route("/api/runs", do_start, methods=["POST"]),
        Route("/api/runs/{run_id}/say", do_say, methods=["POST"]),
        Route("/api/runs/{run_id}/stop", do_stop, methods=["POST"]),
        Route("/api/runs/{run_id}/answer", do_answer, methods=["POST"]),
        Route("/api/runs/{run_id}/resume", do_resume, methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC)),
    ]
    handlers: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
        NotFound: _error(404), files.Refused: _error(403), CairnError: _error(400), BadRequest: _error(400)}
    return Guard(Starlette(routes=routes, exception_handlers=handlers), token, port, loopback_only)


class NotFound(Exception):
    pass


class BadRequest(Exception):
    pass


def _error(status: int) -> Callable[[Request, Exception], Awaitable[Response]]:
    async def handle(request: Request, exc: Exception) -> Response:
        message = exc.message if isinstance(exc, CairnError) else str(exc)
        return JSONResponse({"ok": False, "error": message}, status_code=status)
    return handle


def _done(said: str) -> Response:
    return JSONResponse({"ok": True, "said": said})


async def _body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if len(raw) > MAX_BODY:
        raise BadRequest("the request is too large")
    try:
        body = json.loads(raw or b"{}")
    except ValueError:
        raise BadRequest("the request is not JSON") from None
    if not isinstance(body, dict):
        raise BadRequest("the request is not a JSON object")
    return body


def _text(body: dict[str, Any], key: str) -> str:
    value = body.get(key) or ""
    if not isinstance(value, str):
        raise BadRequest(f"{key} is text")
    return value


def _int(text: str) -> int:
    if not text.isdigit():
        raise BadRequest(f"not a step number: {text[:20]!r}")
    return int(text)
