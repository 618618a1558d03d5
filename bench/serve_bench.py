"""`cairn serve` in a real browser: how soon a logged event shows, and how fast a big list and a long run load.

    python bench/serve_bench.py [--events 30] [--runs 1000] [--long 10000] [--only events,output,list,long]

Needs Debian's chromium and the playwright package (the test extras); no Docker and no model: the runs
are written here, event by event, with cairn's own EventLog, as a run's process writes them.

- **event → browser.** A run's page is open; an event (a new step's tool call) is appended to the log,
  and the time until its step is on the page is taken (Playwright waits on the DOM). Baseline in the same
  run: `cairn watch` on the same run, the time until it prints that event's line. Median and 90th
  percentile over `--events` appends, one every ~0.3 s. Target: median under 0.5 s.
- **output → browser.** A run's page is open while a command runs (a `shell_exec` started in the log);
  a line is appended to the command's live output (`cairn/live/shell.out`, as the toolbox writes it),
  and the time until the page's live pane shows it is taken. Baseline in the same run: `cairn watch`
  on the same run, the time until it prints that line (`│ ...`; it follows a command that has run two
  seconds, as `cairn run` does). Median and 90th percentile over `--events` lines. Target: median under
  0.5 s.
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
from typing import Callable

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


class LiveRun:
    """A run this process plays the driver of (it holds its lock: the run is live), with `cairn watch`
    following it; `seen[n]` is when watch printed the line of mark `n` (found by `pattern`)."""

    def __init__(self, runs_dir: Path, task: str, pattern: str) -> None:
        self.run = new_run(runs_dir, task)
        self.run.hold()
        (self.run.state / "pid").write_text(json.dumps(process_identity(os.getpid())))
        self.runs_dir, self.pattern, self.seen = runs_dir, re.compile(pattern), {}
        self.watch: subprocess.Popen | None = None

    def follow(self) -> None:
        self.watch = subprocess.Popen(cairn("watch", self.run.id, "--runs-dir", str(self.runs_dir)), text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=ENV, cwd=ROOT)

        def read_watch() -> None:
            for line in self.watch.stdout:
                found = self.pattern.search(line)
                if found:
                    self.seen.setdefault(int(found.group(1)), time.perf_counter())

        threading.Thread(target=read_watch, daemon=True).start()

    def measure(self, count: int, make: Callable[[int], None], shown: Callable[[int], None]) -> tuple[list[float], list[float]]:
        """For each n, `make(n)` (then the time runs), `shown(n)` returns once the page shows it; then
        cairn watch's time for the same n. Seconds, the page's and watch's."""
        browser, terminal = [], []
        try:
            for n in range(1, count + 1):
                made = time.perf_counter()
                make(n)
                shown(n)
                browser.append(time.perf_counter() - made)
                deadline = time.monotonic() + 10
                while n not in self.seen and time.monotonic() < deadline:
                    time.sleep(0.005)
                if n in self.seen:
                    terminal.append(self.seen[n] - made)
                time.sleep(0.3)
        finally:
            self.watch.terminate()
            self.watch.wait()
            self.run.release()
        return browser, terminal


def figures_of(prefix: str, watch_name: str, browser: list[float], terminal: list[float]) -> dict[str, float]:
    return {f"{prefix}_to_browser_median_s": statistics.median(browser),
            f"{prefix}_to_browser_p90_s": percentile(browser, 0.9),
            watch_name: statistics.median(terminal) if terminal else float("nan")}


def bench_events(page, base: str, runs_dir: Path, count: int) -> dict[str, float]:
    live = LiveRun(runs_dir, "live", r"bench-(\d+)")
    live.follow()
    page.goto(f"{base}/runs/{live.run.id}")
    page.wait_for_selector("body[data-caught-up='1']")
    time.sleep(2.0)  # cairn watch is up and following

    def append(n: int) -> None:
        for e in step_events(n)[2:3]:  # the call: a new step
            live.run.events.append(e)

    times = live.measure(count, append, lambda n: page.wait_for_selector(f"#step-{n}", timeout=10_000))
    return figures_of("event", "cairn_watch_median_s", *times)


def bench_output(page, base: str, runs_dir: Path, count: int) -> dict[str, float]:
    live = LiveRun(runs_dir, "a command's output", r"│ <out-(\d+)>")
    for e in step_events(1)[:3]:  # a step whose command runs: started, not finished
        live.run.events.append(e)
    path = live.run.cairn_dir / "live" / "shell.out"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")  # emptied as the command starts, as the toolbox does
    live.follow()
    page.goto(f"{base}/runs/{live.run.id}")
    page.wait_for_selector("#step-1[open] pre.live-output")
    time.sleep(3.0)  # cairn watch is up, and follows a command that has run its two seconds
    with open(path, "ab", buffering=0) as out:
        times = live.measure(count, lambda n: out.write(f"<out-{n}> compiling module {n}\n".encode()),
                             lambda n: page.wait_for_selector(f"pre.live-output:has-text('<out-{n}>')", timeout=10_000))
    return figures_of("output", "output_cairn_watch_median_s", *times)


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
    parser.add_argument("--only", default="events,output,list,long", help="the sections to measure")
    args = parser.parse_args()
    if CHROMIUM is None:
        raise SystemExit("serve_bench: no chromium (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="cairn-serve-bench-") as tmp, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-dev-shm-usage"])
        sections = [("events", bench_events, args.events), ("output", bench_output, args.events),
                    ("list", bench_list, args.runs), ("long", bench_long, args.long)]
        for name, bench, size in [s for s in sections if s[0] in args.only.split(",")]:
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
    f = figures
    if "event_to_browser_median_s" in f:
        f["event_ratio_browser_to_watch"] = f["event_to_browser_median_s"] / f["cairn_watch_median_s"]
        print(f"event → browser: median {f['event_to_browser_median_s']:.3f} s (target < 0.5 s), "
              f"cairn watch {f['cairn_watch_median_s']:.3f} s, ratio {f['event_ratio_browser_to_watch']:.2f}")
    if "output_to_browser_median_s" in f:
        f["output_ratio_browser_to_watch"] = f["output_to_browser_median_s"] / f["output_cairn_watch_median_s"]
        print(f"output → browser: median {f['output_to_browser_median_s']:.3f} s (target < 0.5 s), "
              f"cairn watch {f['output_cairn_watch_median_s']:.3f} s, ratio {f['output_ratio_browser_to_watch']:.2f}")
    if "list_page_s" in f:
        f["list_ratio_page_to_ls"] = f["list_page_s"] / f["cairn_ls_json_s"]
        print(f"list of {args.runs} runs: page {f['list_page_s']:.3f} s, scrolled to its end in "
              f"{f['list_scroll_to_end_s']:.3f} s (JSON {f['list_json_s']:.3f} s, cold {f['list_json_cold_s']:.3f} s), "
              f"cairn ls --json {f['cairn_ls_json_s']:.3f} s, ratio {f['list_ratio_page_to_ls']:.2f}")
    if "long_run_page_s" in f:
        f["long_ratio_page_to_show"] = f["long_run_page_s"] / f["cairn_show_json_s"]
        print(f"run of {args.long} events: page {f['long_run_page_s']:.3f} s, last step opened in "
              f"{f['long_run_open_last_step_s']:.3f} s, cairn show --json {f['cairn_show_json_s']:.3f} s, "
              f"ratio {f['long_ratio_page_to_show']:.2f}")
    f["load_average_1min"] = os.getloadavg()[0]
    print(" ".join(f"{k}={v:.3f}" for k, v in figures.items()))


if __name__ == "__main__":
    main()
