"""`cairn serve` in a real browser: Debian's headless Chromium driven by Playwright's Python package, the
page opened with the URL the server printed, as a person would. Fixtures: `browser`, `server`, `page`
(import them into a test module)."""

from __future__ import annotations

import shutil

import pytest

from orchestrator.store.run_dir import RunDir
from tests.serve_helpers import served, start_run, wait_for

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
browser_marks = [pytest.mark.docker,
                 pytest.mark.skipif(CHROMIUM is None, reason="no chromium (scripts/setup.sh installs it on Debian as root)")]


@pytest.fixture(scope="module")
def browser():  # noqa: ANN201 - yields a Playwright browser
    playwright_api = pytest.importorskip("playwright.sync_api")
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-dev-shm-usage"])
        yield b
        b.close()


@pytest.fixture
def server(runs_dir, sandbox_image):  # noqa: ANN001, ANN201 - yields a Server
    yield from served(runs_dir)


def open_page(browser, server, width: int = 1400, height: int = 1000):  # noqa: ANN001, ANN201
    """A new page of `cairn serve` at this viewport, its errors gathered in `page.errors`."""
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    page.errors = []
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    # Errors of the page's script and CSP violations; a refused request (a file outside the run) is the
    # server's answer, not a fault of the page.
    page.on("console", lambda m: page.errors.append(m.text)
            if m.type == "error" and not m.text.startswith("Failed to load resource") else None)
    page.goto(server.url)  # with the token: it moves to a cookie
    page.wait_for_selector("body[data-ready='1']")
    assert "token" not in page.url
    return page


@pytest.fixture
def page(browser, server):  # noqa: ANN001, ANN201 - yields a Playwright page
    page = open_page(browser, server)
    yield page
    page.context.close()


def open_run(page, run_id: str) -> None:  # noqa: ANN001
    page.goto(f"{page.url.split('/runs/')[0].rstrip('/')}/runs/{run_id}")
    page.wait_for_selector("body[data-caught-up='1']", timeout=60_000)


def only_run(runs_dir) -> RunDir:  # noqa: ANN001
    runs = wait_for(lambda: [p for p in runs_dir.iterdir() if (p / "state" / "events.jsonl").exists()]
                    if runs_dir.exists() else [], what="the run")
    return RunDir(runs[0])


def sideways(page) -> int:  # noqa: ANN001
    """How many pixels the page scrolls sideways (0: it fits its width)."""
    return page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")


def ended_run(runs_dir, task: str, script, turns: list, *options: str, exit_code: int = 0) -> RunDir:  # noqa: ANN001
    """A scripted run driven to its end by `cairn run` (as a person's terminal would), with its exit code."""
    proc = start_run(runs_dir, task, script, turns, *options)
    assert proc.wait(240) == exit_code
    return only_run(runs_dir)
