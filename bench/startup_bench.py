"""Cold start: how long `cairn run` takes to send its first model request, and to finish a one-step run.

    python bench/startup_bench.py [--starts 5] [--scripted | --name NAME] [--short]

Each start is a fresh `python -m orchestrator.cli run TASK` in a new runs dir, with the sandbox image
built and the engine running, against a model whose first answer is `task_done`. Timed from just before
the process is spawned:
- first_request_s: until the model's endpoint receives the first chat request;
- sandbox_ready_s: until cairn says `sandbox started` on stderr (the container runs);
- one_step_total_s: until the process has exited (run.json written, container stopped).
The model is, by default, an OpenAI-compatible endpoint served on loopback by this bench (the scripted
model's server, run here so it stamps each request's arrival): cairn reaches it as `openai/scripted
--api-base URL`, the path of a server of one's own, preflight included, which goes without litellm
once litellm's facts about the model are in cairn's cache (llm/facts.py: the first start fills it;
run with an empty XDG_CACHE_HOME to time that start). `--name gpt-4o` asks for `openai/gpt-4o` there
instead: a model litellm prices, as a hosted OpenAI model is, which goes without litellm as well once
its facts (its prices among them) are cached (llm/direct.py). With `--scripted`, cairn serves the script
itself (`--model scripted:PATH`), reached through litellm like every other provider, and the request's
arrival is read from CAIRN_SCRIPTED_LOG. Beside them, litellm_import_s: `import litellm` alone in a
fresh interpreter (LITELLM_LOCAL_MODEL_COST_MAP=True), the floor of a start that goes through litellm.

Each start's line also gives cpu_s, the CPU time (user and system) the cairn process used: on a
busy machine the wall times follow the load, its CPU time much less, so it is the figure to compare
two versions by when the machine cannot be had idle. Each figure is the median over the starts.
`--short` (for CI) makes one start and checks no timing.
The last line is `first_request_s=<n> sandbox_ready_s=<n> one_step_total_s=<n> litellm_import_s=<n>`.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.llm.scripted import ScriptedServer  # noqa: E402

TASK = "Say that you are done."
DONE = {"tool_calls": [{"name": "task_done", "arguments": {"summary": "done at once"}}]}


class StampedServer(ScriptedServer):
    """The scripted model's server, noting when each request arrives (on this process's clock)."""

    def __init__(self, script: dict) -> None:
        super().__init__(script)
        self.arrivals: list[float] = []

    def respond(self, body: dict):  # noqa: ANN201 - scripted.Response
        self.arrivals.append(time.monotonic())
        return super().respond(body)


def one_start(runs_dir: Path, scripted: bool, image: str | None, name: str = "scripted") -> dict[str, float]:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "NO_COLOR": "1"}
    server = None
    with tempfile.TemporaryDirectory(prefix="cairn-startup-") as scratch:
        log = Path(scratch) / "requests.jsonl"
        if scripted:
            script = Path(scratch) / "done.json"
            script.write_text(json.dumps({"task": TASK, "turns": [DONE]}))
            model = ["--model", f"scripted:{script}"]
            env["CAIRN_SCRIPTED_LOG"] = str(log)
        else:
            server = StampedServer({"turns": [DONE]})
            model = ["--model", f"openai/{name}", "--api-base", server.start()]
        command = [sys.executable, "-m", "orchestrator.cli", "run", TASK, *model, "--runs-dir", str(runs_dir)]
        if image:
            command += ["--image", image]
        ready: list[float] = []
        cpu_before = _children_cpu()
        wall_start, started = time.time(), time.monotonic()
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True)
        stderr_lines: list[str] = []

        def watch() -> None:
            for line in process.stderr:
                stderr_lines.append(line)
                if "sandbox started" in line and not ready:
                    ready.append(time.monotonic())

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        process.stdout.read()
        code = process.wait()
        ended = time.monotonic()
        cpu = _children_cpu() - cpu_before
        watcher.join()
        if server is not None:
            server.stop()
        if code != 0:
            raise SystemExit(f"cairn run exited {code}:\n{''.join(stderr_lines)}")
        if scripted:
            first = log.stat().st_mtime - wall_start  # the log is written once, as the one request arrives
        else:
            first = server.arrivals[0] - started
    if not ready:
        raise SystemExit(f"cairn never said 'sandbox started':\n{''.join(stderr_lines)}")
    return {"first_request_s": first, "sandbox_ready_s": ready[0] - started, "one_step_total_s": ended - started,
            "cpu_s": cpu}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def litellm_import_s() -> float:
    code = "import time; t = time.perf_counter(); import litellm; print(time.perf_counter() - t)"
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--starts", type=int, default=5, help="starts to take the median of (default 5)")
    parser.add_argument("--short", action="store_true", help="one start, for CI: checks the output, not the timings")
    parser.add_argument("--scripted", action="store_true", help="cairn serves the script itself (scripted:PATH)")
    parser.add_argument("--name", default="scripted",
                        help="the model's name at the loopback endpoint, asked as openai/NAME (default scripted)")
    parser.add_argument("--image", help="the sandbox image (default: the one cairn builds)")
    args = parser.parse_args()
    starts = 1 if args.short else args.starts

    from orchestrator.sandbox.docker.image import ensure_image

    ensure_image()  # built before the clock starts: the target is a start with the image there
    figures: dict[str, list[float]] = {"first_request_s": [], "sandbox_ready_s": [], "one_step_total_s": []}
    cpu: list[float] = []
    with tempfile.TemporaryDirectory(prefix="cairn-startup-runs-") as runs:
        for n in range(starts):
            got = one_start(Path(runs), args.scripted, args.image, args.name)
            print(f"start {n + 1}: " + " ".join(f"{k}={v:.2f}" for k, v in got.items()), flush=True)
            cpu.append(got.pop("cpu_s"))
            for key, value in got.items():
                figures[key].append(value)
        _remove_containers(Path(runs))
    imports = [litellm_import_s() for _ in range(starts)]
    print(f"import litellm: " + " ".join(f"{v:.2f}" for v in imports))
    print(f"cairn's CPU time a start (median): cpu_s={statistics.median(cpu):.2f}; load average now "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    medians = {key: statistics.median(values) for key, values in figures.items()}
    medians["litellm_import_s"] = statistics.median(imports)
    print(" ".join(f"{key}={value:.2f}" for key, value in medians.items()))


def _remove_containers(runs: Path) -> None:
    """The runs' kept containers are this bench's own: remove them with their runs."""
    names = [f"cairn-{path.name}" for path in runs.iterdir() if path.is_dir()]
    if names:
        subprocess.run(["docker", "rm", "-f", *names], capture_output=True)


if __name__ == "__main__":
    main()
