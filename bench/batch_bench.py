"""Throughput of `cairn batch`: the same scripted tasks run 1, 4 and 16 at a time.

    python bench/batch_bench.py [--tasks 16] [--jobs 1,4,16]
    python bench/batch_bench.py --ray [--tasks 16] [--jobs 4]

Each task is a short realistic run of 4 tool calls (write a Python file, run it, read its output,
task_done), played by its own scripted model, in its own sandbox. Every setting runs in a fresh process
(so the memory high-water mark is that setting's alone) and runs all `--tasks` tasks, `N` at a time,
through `orchestrator.batch.threads.Batch`, as `cairn batch --jobs N` does. Timing starts after litellm is
imported and the image is found. Reported per setting: wall time, runs per minute, container starts per
second and the median time of one sandbox start, and the process's RSS after imports and at its peak
(ru_maxrss). The last line is machine-readable: `runs_per_min_16=<n> speedup_16_vs_1=<n>`.

With `--ray`: the same tasks, N at a time (one N, default 4), through local threads and through Ray
(orchestrator/batch/ray_driver.py) on a local cluster of this machine that the batch starts (N cairn_sandbox
resources), each in a fresh process. The cluster is started before Ray's clock starts (as a cluster
`ray start` made is already up; its start time is reported beside), but the clock includes what a batch
on a running cluster pays: the worker processes of the hub and of the node's runner, the runner's
warm-up (it imports the model library), each run's placement group and call. Both clocks start from the
same line: the batch file read, the image found, the model library not imported (each side loads it as
it does: the local batch before its threads start, the runner while its first containers start), and
the machine quiet. Each setting reports its wall time and the CPU time the whole machine spent in it.
The settings run in `--rounds` rounds (default 5), in turn, and are compared by their median wall
times: this machine's speed drifts by a third within minutes, so one pair is not enough. The last line:
`runs_per_min_local=<n> runs_per_min_ray=<n> ray_overhead=<ratio>` (Ray's median wall time over the
threads').
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
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

PROGRAM = "n = 2000\nprimes = [p for p in range(2, n) if all(p % d for d in range(2, int(p ** 0.5) + 1))]\nprint(len(primes), primes[-1])\n"


def script(i: int) -> dict:
    call = lambda name, **args: {"tool_calls": [{"name": name, "arguments": args}]}  # noqa: E731
    return {"turns": [
        call("file_write", path="primes.py", content=PROGRAM),
        call("shell_exec", command="python3 primes.py > out.txt && echo ok"),
        call("file_read", path="out.txt"),
        call("task_done", summary=f"task {i}: counted the primes below 2000"),
    ]}


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def busy_s() -> float:
    """CPU seconds the whole machine has been busy (every process, the kernel included)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")  # less idle and iowait


def settle(limit_s: float = 15.0) -> float:
    """Waits until the machine is quiet (under a tenth of a core busy for half a second), so that a clock
    starts on no one's leftover work (a cluster just started, the containers of the setting before being
    removed). Returns the seconds waited."""
    began = time.perf_counter()
    while time.perf_counter() - began < limit_s:
        before = busy_s()
        time.sleep(0.5)
        if busy_s() - before < 0.05:
            break
    return round(time.perf_counter() - began, 2)


def forget_containers(rows: list) -> None:
    """The runs' kept containers removed: the runs directory goes with the temporary directory, and an
    engine that piles up a thousand stopped containers gets slower at everything."""
    from orchestrator.sandbox.docker.container import remove
    from orchestrator.sandbox.docker.engine import connect

    client = connect()
    for row in rows:
        if row.id:
            remove(client, f"cairn-{row.id}")


def one_setting(jobs: int, tasks: int, on_ray: bool = False, same_start: bool = False) -> dict:
    """Runs in its own process: `tasks` runs, `jobs` at a time (in threads, or on Ray). `same_start`
    (threads against Ray): litellm is not imported before the clock, as Ray's runners import it within
    theirs; each batch loads it as it does (a local one before its threads start)."""
    from orchestrator.batch.threads import Batch
    from orchestrator.sandbox.docker.sandbox import DockerSandbox
    from orchestrator.sandbox.docker.image import ensure_image

    if not same_start:
        from orchestrator.llm import client  # noqa: F401 - litellm, imported before the clock starts

    ensure_image()
    starts: list[float] = []
    lock = threading.Lock()
    original = DockerSandbox.start

    def timed_start(self) -> None:  # noqa: ANN001
        began = time.perf_counter()
        original(self)
        with lock:
            starts.append(time.perf_counter() - began)

    DockerSandbox.start = timed_start
    baseline = rss_mb()
    with tempfile.TemporaryDirectory(prefix="cairn-batch-bench-") as tmp:
        lines = []
        for i in range(tasks):
            path = Path(tmp, f"script-{i}.json")  # one script each: a scripted server plays one script's turns
            path.write_text(json.dumps(script(i)))
            lines.append(json.dumps({"task": f"count primes ({i})", "model": f"scripted:{path}", "max_steps": 10}))
        batch_file = Path(tmp, "tasks.jsonl")
        batch_file.write_text("\n".join(lines) + "\n")
        if on_ray:
            from orchestrator.batch.ray_driver import Cluster, RayBatch

            # The cluster is up before the clock starts, as one `ray start` made is; its start is reported.
            cluster_began = time.perf_counter()
            cluster = Cluster("local", jobs, 2.0)
            cluster_start_s = round(time.perf_counter() - cluster_began, 2)
            batch = RayBatch(batch_file, Path(tmp, "runs"), address="local", jobs=jobs)
        else:
            batch = Batch(batch_file, Path(tmp, "runs"), jobs=jobs)
        settled_s = settle()
        began, busy_before = time.perf_counter(), busy_s()
        rows = batch.run()
        wall = time.perf_counter() - began
        cpu = busy_s() - busy_before
        if on_ray:
            cluster.close()
        forget_containers(rows)
    statuses = [r.status for r in rows]
    return {
        "jobs": jobs, "tasks": tasks, "done": statuses.count("done"), "wall_s": round(wall, 2),
        "runs_per_min": round(tasks / wall * 60, 1), "container_starts_per_s": round(len(starts) / wall, 2),
        "sandbox_start_median_s": round(statistics.median(starts), 2) if starts else None,
        "rss_after_imports_mb": round(baseline, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "steps_per_run": round(statistics.mean(r.step for r in rows), 1),
        "cluster_start_s": cluster_start_s if on_ray else None, "settled_s": settled_s, "cpu_s": round(cpu, 1),
    }


def run_child(jobs: int, tasks: int, on_ray: bool, compare: bool = True) -> dict:
    out = subprocess.run([sys.executable, __file__, "--one", str(jobs), "--tasks", str(tasks),
                          *(["--ray", "ray" if on_ray else "threads"] if compare else [])],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        sys.stderr.write(out.stderr[-3000:])
        raise SystemExit(f"the setting N={jobs}{' on Ray' if on_ray else ''} failed (exit {out.returncode})")
    return json.loads(out.stdout.strip().splitlines()[-1])


def threads_against_ray(options: argparse.Namespace) -> None:
    """Rounds of the two settings, in turn (the first of each round alternates), compared by their median
    wall times: on a machine whose speed drifts (a shared VM's does: the same CPU work took 0.8-1.5 s
    here minutes apart), one pair alone says as much about the drift as about Ray."""
    jobs = int(options.jobs) if options.jobs != "1,4,16" else 4
    print(f"{os.cpu_count()} cores; {options.tasks} tasks of 4 tool calls each, {jobs} at a time, "
          f"{options.rounds} rounds", flush=True)
    print(f"{'round':>5} {'through':>8} {'wall s':>8} {'runs/min':>9} {'CPU s':>6} {'done':>5}  "
          "cluster start s, then quiet after s", flush=True)
    walls: dict[str, list[float]] = {"threads": [], "ray": []}
    ratios = []
    for n in range(1, options.rounds + 1):
        order = (("threads", False), ("ray", True)) if n % 2 else (("ray", True), ("threads", False))
        for name, on_ray in order:
            r = run_child(jobs, options.tasks, on_ray)
            walls[name].append(r["wall_s"])
            print(f"{n:>5} {name:>8} {r['wall_s']:>8} {r['runs_per_min']:>9} {r['cpu_s']:>6} {r['done']:>3}/{r['tasks']}  "
                  f"{r['cluster_start_s'] if on_ray else '-'}, {r['settled_s']}", flush=True)
        ratios.append(round(walls["ray"][-1] / walls["threads"][-1], 2))
    print(f"each round's ray_overhead: {', '.join(map(str, ratios))}", flush=True)
    local, ray = statistics.median(walls["threads"]), statistics.median(walls["ray"])
    print(f"runs_per_min_local={round(options.tasks / local * 60, 1)} runs_per_min_ray={round(options.tasks / ray * 60, 1)} "
          f"ray_overhead={round(ray / local, 2)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=16, help="runs in each setting (default 16)")
    parser.add_argument("--jobs", default="1,4,16", help="the settings of N, comma-separated")
    parser.add_argument("--ray", nargs="?", const="compare", help="threads against Ray on a local cluster, N at a time "
                        "(one N: default 4)")
    parser.add_argument("--rounds", type=int, default=5, help="with --ray: rounds of the two settings, compared "
                        "by their medians (default 5)")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # the child process of one setting
    options = parser.parse_args()
    if options.one:
        print(json.dumps(one_setting(options.one, options.tasks, options.ray == "ray", options.ray is not None)))
        return
    if options.ray:
        return threads_against_ray(options)
    results = {}
    print(f"{os.cpu_count()} cores; {options.tasks} tasks of 4 tool calls each per setting", flush=True)
    print(f"{'N':>3} {'wall s':>8} {'runs/min':>9} {'starts/s':>9} {'start med s':>12} {'RSS base MB':>12} "
          f"{'RSS peak MB':>12} {'done':>5}", flush=True)
    for jobs in (int(n) for n in options.jobs.split(",")):
        out = subprocess.run([sys.executable, __file__, "--one", str(jobs), "--tasks", str(options.tasks)],
                             capture_output=True, text=True, check=False)
        if out.returncode != 0:
            sys.stderr.write(out.stderr[-3000:])
            raise SystemExit(f"the setting N={jobs} failed (exit {out.returncode})")
        r = json.loads(out.stdout.strip().splitlines()[-1])
        results[jobs] = r
        print(f"{jobs:>3} {r['wall_s']:>8} {r['runs_per_min']:>9} {r['container_starts_per_s']:>9} "
              f"{r['sandbox_start_median_s']:>12} {r['rss_after_imports_mb']:>12} {r['peak_rss_mb']:>12} "
              f"{r['done']:>3}/{r['tasks']}", flush=True)
    top, one = results.get(16), results.get(1)
    speedup = round(top["runs_per_min"] / one["runs_per_min"], 2) if top and one else None
    print(f"runs_per_min_16={top['runs_per_min'] if top else None} speedup_16_vs_1={speedup}")


if __name__ == "__main__":
    main()
