"""`cairn serve` in a real browser: how soon a logged event shows, and how fast a big list and a long run load.

    python bench/serve_bench.py [--events 30] [--runs 1000] [--long 10000]

Needs Debian's chromium and the playwright package (the test extras); no Docker and no model: the runs
are written here, event by event, with cairn's own EventLog, as a run's process writes them.

- **event → browser.** A run's page is open; an event (a new step's tool call) is appended to the log,
  and the time until its step is on the page is taken (Playwright waits on the DOM). Baseline in the same
  run: `cairn watch` on the same run, the time until it prints that event's line. Median and 90th
  percentile over `--events` appends, one every ~0.3 s. Target: median under 0.5 s.
- **the list.** `--runs` finished runs (17 events each): the time from asking for the list page until
  it is on screen (every run in it, drawn 100 rows at a time as one scrolls), then the time to scroll
  to its last run, and the JSON behind it alone; baseline: `cairn ls --json` (a fresh process, as a person runs it).
  The server keeps each run's row while the run's files do not change (listing.list_runs' `remember`)
  and reads them all once as it starts, so this is the list as a person sees it after the first
  seconds; `list_json_cold_s` is the same list read without what the server kept, in this process.
- **a long run.** One run of `--long` events: the time from asking for its page until it shows them all
  (caught up, every step drawn), and then until a click opens its last step; baseline: `cairn show RUN --json`.

Each section prints its figures and the ratio to its baseline; the last line holds them all, with the
machine's load average at the end (a shared machine's load stretches every figure, the baselines too).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.config import RunConfig  # noqa: E402
from orchestrator.runs.new_run import create_run  # noqa: E402
from orchestrator import events as ev  # noqa: E402
from orchestrator.store.liveness import process_identity  # noqa: E402
from orchestrator.store.run_dir import RunDir, new_run_id  # noqa: E402

ENV = {**os.environ, "PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def cairn(*args: str) -> list[str]:
    return [sys.executable, "-m", "orchestrator.cli", *args]


def new_run(runs_dir: Path, task: str) -> RunDir:
    cfg = RunConfig.model_validate({"model": {"model": "scripted:demo"}})
    run = create_run(runs_dir, task, cfg)
    run.events.append(ev.RunStarted(task=task, system_prompt="(bench)", tools=[]))
    run.events.append(ev.StatusChanged(status="running"))
    run.release()  # the bench writes its events; no process of its own drives it (nor holds 1,000 locks)
    return run


def step_events(n: int) -> list[ev._Event]:
    """One step as a run logs it: the model's request and answer, a call, its result."""
    call_id = f"call_{n}"
    arguments = json.dumps({"command": f"echo bench-{n}"})
    return [ev.ModelRequest(step=n, model="scripted:demo", usage={"prompt_tokens": 1000 + n, "cached_tokens": 900,
                                                                  "completion_tokens": 20, "cost_usd": 0.0001}),
            ev.AssistantMessage(step=n, message={"role": "assistant", "content": f"step {n}", "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": "shell_exec", "arguments": arguments}}]}),
            ev.ToolStarted(step=n, call_id=call_id, name="shell_exec", arguments=arguments),
            ev.ToolFinished(step=n, call_id=call_id, name="shell_exec", content=f"bench-{n}\n[exit code 0]",
                            duration_ms=3.0)]


def write_events(run: RunDir, events: list[ev._Event]) -> None:
    """Many events in one write (a log as long runs leave it), not one fsync each."""
    with open(run.events.path, "a", encoding="utf-8") as f:
        f.write("".join(ev.dump_event(e) + "\n" for e in events))


def start_server(runs_dir: Path) -> tuple[subprocess.Popen, str, str]:
    proc = subprocess.Popen(cairn("serve", "--port", "0", "--runs-dir", str(runs_dir)), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=ENV, cwd=ROOT)
    for line in proc.stdout:
        match = re.search(r"(http://[^/\s]+)/\?token=\S+", line)
        if match:
            threading.Thread(target=proc.stdout.read, daemon=True).start()  # keep the pipe drained
            return proc, match.group(0), match.group(1)
    raise SystemExit("cairn serve printed no URL")


def timed(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV, cwd=ROOT, check=True)
    return time.perf_counter() - started


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p * (len(ordered) - 1))))]


def in_page(page, *marks: str) -> list[float]:
    """Seconds from the page's request to the moments it marked (`body[data-*-ms]`, set after the frame
    that showed them): what a person waits, without the driver's own round trips."""
    return [int(page.evaluate(f"document.body.dataset.{mark}")) / 1000 for mark in marks]


def bench_events(page, base: str, runs_dir: Path, count: int) -> dict[str, float]:
    run = new_run(runs_dir, "live")
    run.hold()  # this process plays the run's driver: it is live while the bench appends its events
    (run.state / "pid").write_text(json.dumps(process_identity(os.getpid())))  # this process plays the live run
    watch = subprocess.Popen(cairn("watch", run.id, "--runs-dir", str(runs_dir)), stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True, env=ENV, cwd=ROOT)
    seen: dict[int, float] = {}

    def read_watch() -> None:
        for line in watch.stdout:
            found = re.search(r"bench-(\d+)", line)
            if found:
                seen.setdefault(int(found.group(1)), time.perf_counter())

    threading.Thread(target=read_watch, daemon=True).start()
    page.goto(f"{base}/runs/{run.id}")
    page.wait_for_selector("body[data-caught-up='1']")
    time.sleep(2.0)  # cairn watch is up and following
    browser, terminal = [], []
    try:
        for n in range(1, count + 1):
            appended = time.perf_counter()
            for e in step_events(n)[2:3]:  # the call: a new step
                run.events.append(e)
            page.wait_for_selector(f"#step-{n}", timeout=10_000)
            browser.append(time.perf_counter() - appended)
            deadline = time.monotonic() + 10
            while n not in seen and time.monotonic() < deadline:
                time.sleep(0.005)
            if n in seen:
                terminal.append(seen[n] - appended)
            time.sleep(0.3)
    finally:
        watch.terminate()
        watch.wait()
        run.release()
    return {"event_to_browser_median_s": statistics.median(browser), "event_to_browser_p90_s": percentile(browser, 0.9),
            "cairn_watch_median_s": statistics.median(terminal) if terminal else float("nan")}


def bench_list(page, base: str, runs_dir: Path, count: int) -> dict[str, float]:
    template = new_run(runs_dir, "a finished run of the list")
    write_events(template, [e for n in range(1, 5) for e in step_events(n)] +
                 [ev.StatusChanged(step=4, status="done", result="done")])
    meta = template.read_meta()
    template.write_meta({**meta, "status": "done", "steps": 4, "result": "done", "updated": time.time(),
                         "usage": {"prompt_tokens": 4010, "cached_tokens": 3600, "completion_tokens": 80,
                                   "cost_usd": 0.0004, "cache_hit_ratio": 0.9}})
    for k in range(count - 1):
        copy = runs_dir / new_run_id(time.time() - k * 60)
        shutil.copytree(template.root, copy, symlinks=True)
    time.sleep(3.0)  # the server reads the list once as it starts (its warm-up): give it the time a person would
    api, pages, ls = [], [], []
    for _ in range(3):
        started = time.perf_counter()
        response = page.request.get(f"{base}/api/runs")
        assert len(response.json()) >= count
        api.append(time.perf_counter() - started)
        page.goto(f"{base}/")
        page.wait_for_selector(f"body[data-runs='{count}'][data-shown-ms]", timeout=60_000)
        shown = in_page(page, "shownMs")[0]
        started = time.perf_counter()  # then to the end of the list, as a person scrolling through it
        while page.evaluate("document.body.dataset.shown") != str(count):
            page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
            page.wait_for_timeout(50)
        pages.append((shown, time.perf_counter() - started))
        ls.append(timed(cairn("ls", "--json", "--runs-dir", str(runs_dir))))
    from orchestrator.ui.inspect.listing import list_runs

    started = time.perf_counter()
    list_runs(runs_dir)
    cold = time.perf_counter() - started
    return {"list_page_s": statistics.median(p[0] for p in pages),
            "list_scroll_to_end_s": statistics.median(p[1] for p in pages), "list_json_s": statistics.median(api),
            "list_json_cold_s": cold, "cairn_ls_json_s": statistics.median(ls)}


def bench_long(page, base: str, runs_dir: Path, events: int) -> dict[str, float]:
    run = new_run(runs_dir, "a long run")
    steps = events // 4
    write_events(run, [e for n in range(1, steps + 1) for e in step_events(n)])
    loads, opens, shows = [], [], []
    for _ in range(3):
        page.goto(f"{base}/runs/{run.id}", wait_until="domcontentloaded")  # not waiting for the charts' images
        page.wait_for_selector(f"body[data-caught-up='1'][data-steps='{steps}'][data-shown-ms]", timeout=120_000)
        loads.append(in_page(page, "shownMs")[0])
        started = time.perf_counter()
        page.click(f"#step-{steps} summary")
        page.wait_for_selector(f"#step-{steps} pre.result")
        opens.append(time.perf_counter() - started)
        shows.append(timed(cairn("show", run.id, "--json", "--runs-dir", str(runs_dir))))
    return {"long_run_page_s": statistics.median(loads), "long_run_open_last_step_s": statistics.median(opens),
            "cairn_show_json_s": statistics.median(shows)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=30)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--long", type=int, default=10_000)
    args = parser.parse_args()
    if CHROMIUM is None:
        raise SystemExit("serve_bench: no chromium (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="cairn-serve-bench-") as tmp, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-dev-shm-usage"])
        sections = [("events", bench_events, args.events), ("list", bench_list, args.runs),
                    ("long", bench_long, args.long)]
        for name, bench, size in sections:
            runs_dir = Path(tmp) / name
            runs_dir.mkdir()
            server, url, base = start_server(runs_dir)
            try:
                page = browser.new_page()
                page.goto(url)
                result = bench(page, base, runs_dir, size)
                page.close()
            finally:
                server.terminate()
                server.wait()
            figures.update(result)
            print(f"{name}: " + "  ".join(f"{k}={v:.3f}" for k, v in result.items()), flush=True)
        browser.close()
    figures["event_ratio_browser_to_watch"] = figures["event_to_browser_median_s"] / figures["cairn_watch_median_s"]
    figures["list_ratio_page_to_ls"] = figures["list_page_s"] / figures["cairn_ls_json_s"]
    figures["long_ratio_page_to_show"] = figures["long_run_page_s"] / figures["cairn_show_json_s"]
    print(f"event → browser: median {figures['event_to_browser_median_s']:.3f} s (target < 0.5 s), "
          f"cairn watch {figures['cairn_watch_median_s']:.3f} s, ratio {figures['event_ratio_browser_to_watch']:.2f}")
    figures["load_average_1min"] = os.getloadavg()[0]
    print(f"list of {args.runs} runs: page {figures['list_page_s']:.3f} s, scrolled to its end in "
          f"{figures['list_scroll_to_end_s']:.3f} s (JSON {figures['list_json_s']:.3f} s, "
          f"cold {figures['list_json_cold_s']:.3f} s), cairn ls --json {figures['cairn_ls_json_s']:.3f} s, ratio {figures['list_ratio_page_to_ls']:.2f}")
    print(f"run of {args.long} events: page {figures['long_run_page_s']:.3f} s, last step opened in "
          f"{figures['long_run_open_last_step_s']:.3f} s, cairn show --json {figures['cairn_show_json_s']:.3f} s, "
          f"ratio {figures['long_ratio_page_to_show']:.2f}")
    print(" ".join(f"{k}={v:.3f}" for k, v in figures.items()))


if __name__ == "__main__":
    main()
