"""What a resume costs before the container starts, and what a checkpoint costs per step.

    python bench/resume_bench.py [--image TAG] [--steps 30]

(a) Resume: a synthetic run of 1,001 events (RunStarted, then 200 steps of model call, assistant
    message with a tool call, tool start, tool result and checkpoint, with realistic sizes: results of 0.3-6 KB,
    some file writes of 1-4 KB, a few offloaded previews). Timed: reading events.jsonl, replaying it into
    `RunState` (with the token counter a resume makes), and building the first request with its token
    estimate: what `cairn resume` does before the container starts, plus loading the tokenizer (once per
    process, so once per resume; timed first, separately). The container start
    (`DockerSandbox.start()` with the real image) is measured beside it.
(b) Checkpoints: workspaces of 100 and 2,000 files (0.2-8 KB, nested); each step modifies 3 files and
    adds 1; the median over the steps of `Checkpoints.commit`, beside two baselines in the same run:
    `cp -r` of the workspace, and `git add -A && git commit` (subprocess) with the index removed first,
    i.e. without index reuse (every file hashed again), and the same with the index kept.

The last line is `resume_s=<n> checkpoint_ms_2000=<n>`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from orchestrator.config import RunConfig  # noqa: E402
from orchestrator.context import TokenCounter, build_request, render_tail  # noqa: E402
from orchestrator.agent.prompts import system_prompt  # noqa: E402
from orchestrator import events as ev  # noqa: E402
from orchestrator.store.checkpoints import Checkpoints  # noqa: E402
from orchestrator.agent.state import RunState  # noqa: E402
from orchestrator.store.run_dir import RunDir  # noqa: E402
from orchestrator.tools.specs import BUILTIN_TOOLS, canonical  # noqa: E402

WORDS = ("the of and to in is that for it as with was on be by this are or from at which file test value "
         "error line return def import class self data result output python json path run step todo").split()


def text(rng: random.Random, n_bytes: int) -> str:
    out, size = [], 0
    while size < n_bytes:
        line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 14)))
        out.append(line)
        size += len(line) + 1
    return "\n".join(out)


def synthetic_run(root: Path, steps: int = 200) -> tuple[RunDir, RunConfig]:
    rng = random.Random(7)
    cfg = RunConfig.model_validate({"model": {"model": "scripted:demo"}})
    run = RunDir.create(root, {"task": "bench", "status": "interrupted", "config": cfg.model_dump(mode="json")})
    (run.workspace / "todo.md").write_text("# Plan\n" + "".join(f"- [x] item {i}\n" for i in range(12)))
    log = run.events
    log.append(ev.RunStarted(task="Build a CSV to JSON converter with tests. " + text(rng, 400),
                             system_prompt=system_prompt(""), tools=canonical(BUILTIN_TOOLS)))
    for step in range(1, steps + 1):
        call_id = f"call_{step:04d}"
        if step % 4 == 0:
            name, args = "file_write", {"path": f"src/mod{step}.py", "content": text(rng, rng.randint(1000, 4000))}
        elif step % 4 == 1:
            name, args = "shell_exec", {"command": f"python -m pytest -q tests/test_{step}.py"}
        else:
            name, args = "file_read", {"path": f"src/mod{step - 1}.py"}
        prompt = 2000 + step * 180
        log.append(ev.ModelRequest(step=step, model="scripted:demo", messages=2 + 2 * step, estimated_prompt_tokens=prompt,
                                   usage={"prompt_tokens": prompt, "cached_tokens": prompt - 300,
                                          "completion_tokens": 120, "cost_usd": None}))
        log.append(ev.AssistantMessage(step=step, message={
            "role": "assistant", "content": text(rng, rng.randint(80, 400)),
            "tool_calls": [{"id": call_id, "type": "function",
                            "function": {"name": name, "arguments": json.dumps(args, sort_keys=True)}}]}))
        log.append(ev.ToolStarted(step=step, call_id=call_id, name=name, arguments=json.dumps(args, sort_keys=True)))
        if step % 25 == 0:  # an offloaded result: a preview and its path
            path = f"/cairn/obs/{step}-{name}.txt"
            whole = text(rng, 40000)
            log.append(ev.ToolFinished(step=step, call_id=call_id, name=name, offloaded_to=path, duration_ms=900,
                                       content=whole[:2000] + f"\n[... saved to {path} ...]\n" + whole[-1000:],
                                       output=whole))
        else:
            log.append(ev.ToolFinished(step=step, call_id=call_id, name=name, duration_ms=40,
                                       content=text(rng, rng.randint(300, 6000)), error=step % 9 == 0))
        log.append(ev.Checkpoint(step=step, commit=f"{step:040x}"))
    return run, cfg


def time_resume(run: RunDir, cfg: RunConfig, repeats: int = 5) -> dict[str, float]:
    """Median seconds of each part of what `cairn resume` does before the container starts."""
    parts: dict[str, list[float]] = {"read": [], "replay": [], "build": []}
    for _ in range(repeats):
        t0 = time.perf_counter()
        events, _torn = run.events.read()
        t1 = time.perf_counter()
        counter = TokenCounter()
        state = RunState(cfg.context, counter)
        for e in events:
            state.apply(e)
        t2 = time.perf_counter()
        tail = render_tail((run.workspace / "todo.md").read_text(), ["The run was resumed in a new sandbox."])
        request = build_request(state.system_prompt, state.tools, state.task, state.history, tail)
        counter.estimate(request)
        t3 = time.perf_counter()
        parts["read"].append(t1 - t0)
        parts["replay"].append(t2 - t1)
        parts["build"].append(t3 - t2)
    out = {k: statistics.median(v) for k, v in parts.items()}
    out["events"] = len(events)
    out["messages"] = len(request.messages)
    return out


def time_container_start(run: RunDir, cfg: RunConfig, image: str, repeats: int = 3) -> float:
    from orchestrator.sandbox.docker.sandbox import DockerSandbox
    times = []
    for i in range(repeats):
        sandbox = DockerSandbox(f"{run.id}-b{i}", run.workspace, cfg.sandbox, image=image, cairn_mount=run.cairn_dir)
        t0 = time.perf_counter()
        sandbox.start()
        times.append(time.perf_counter() - t0)
        sandbox.stop()
    return statistics.median(times)


def make_workspace(ws: Path, n_files: int, rng: random.Random) -> list[Path]:
    paths = []
    for i in range(n_files):
        d = ws / f"pkg{i % 23}" / f"sub{i % 7}"
        d.mkdir(parents=True, exist_ok=True)
        p = d / f"m{i}.py"
        p.write_text(text(rng, rng.randint(200, 8000)))
        paths.append(p)
    return paths


def _git(ws: Path, git_dir: Path, *args: str) -> None:
    env = {**os.environ, "GIT_DIR": str(git_dir), "GIT_WORK_TREE": str(ws), "GIT_CONFIG_GLOBAL": os.devnull,
           "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@b"}
    subprocess.run(["git", *args], env=env, check=True, capture_output=True)


def time_checkpoints(n_files: int, steps: int, tmp: Path) -> dict[str, float]:
    rng = random.Random(n_files)
    root = tmp / f"cp{n_files}"
    ws = root / "workspace"
    paths = make_workspace(ws, n_files, rng)
    cp = Checkpoints(root / "state" / "checkpoints.git", ws)
    t0 = time.perf_counter()
    cp.commit(0)
    initial = time.perf_counter() - t0
    plain_dir, naive_dir = root / "plain.git", root / "naive.git"
    for d in (plain_dir, naive_dir):
        subprocess.run(["git", "init", "-q", "--bare", str(d)], check=True, capture_output=True)
        _git(ws, d, "add", "-A")
        _git(ws, d, "commit", "-q", "-m", "0")
    ours, copy, naive, plain = [], [], [], []
    for step in range(1, steps + 1):
        for p in rng.sample(paths, 3):
            p.write_text(text(rng, rng.randint(200, 8000)))
        new = ws / f"pkg{step % 23}" / f"new{step}.txt"
        new.write_text(text(rng, 500))
        paths.append(new)
        t0 = time.perf_counter()
        result = cp.commit(step)
        ours.append(time.perf_counter() - t0)
        assert result.commit is not None
        if step % 5 == 0:  # slow: sampled every fifth step
            t0 = time.perf_counter()
            subprocess.run(["cp", "-r", str(ws), str(root / f"snap{step}")], check=True)
            copy.append(time.perf_counter() - t0)
            shutil.rmtree(root / f"snap{step}")
        (naive_dir / "index").unlink()
        t0 = time.perf_counter()
        _git(ws, naive_dir, "add", "-A")
        _git(ws, naive_dir, "commit", "-q", "-m", str(step))
        naive.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        _git(ws, plain_dir, "add", "-A")
        _git(ws, plain_dir, "commit", "-q", "-m", str(step))
        plain.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    unchanged = cp.commit(steps + 1)
    nothing = time.perf_counter() - t0
    assert unchanged.commit is None
    ms = lambda xs: statistics.median(xs) * 1000  # noqa: E731
    return {"ours": ms(ours), "ours_max": max(ours) * 1000, "cp": ms(copy), "naive": ms(naive), "plain": ms(plain),
            "initial": initial * 1000, "nothing": nothing * 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", help="sandbox image (default: cairn's own, built if missing)")
    parser.add_argument("--steps", type=int, default=30, help="checkpointed steps per workspace size")
    options = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="cairn-resume-bench-") as tmp_name:
        tmp = Path(tmp_name)
        t0 = time.perf_counter()
        TokenCounter().count_text("warm up")  # loads the tokenizer: once per process, so once per resume
        tokenizer_s = time.perf_counter() - t0
        run, cfg = synthetic_run(tmp / "runs")
        size = run.events.path.stat().st_size
        r = time_resume(run, cfg)
        resume_s = tokenizer_s + r["read"] + r["replay"] + r["build"]
        from orchestrator.sandbox.docker.image import ensure_image

        image = options.image or os.environ.get("CAIRN_TEST_IMAGE") or ensure_image()
        start_s = time_container_start(run, cfg, image)
        print(f"resume of a run of {r['events']} events ({size / 1024:.0f} KB, {r['messages']} messages in the "
              f"first request): tokenizer load {tokenizer_s * 1000:.0f} ms + read {r['read'] * 1000:.1f} ms + replay {r['replay'] * 1000:.1f} ms + "
              f"build {r['build'] * 1000:.1f} ms = {resume_s:.3f} s, plus container start {start_s:.2f} s")
        figures = {}
        for n in (100, 2000):
            c = time_checkpoints(n, options.steps, tmp)
            figures[n] = c
            print(f"checkpoint, {n} files: {c['ours']:.1f} ms median (max {c['ours_max']:.0f}) per step; "
                  f"baselines: cp -r {c['cp']:.1f} ms, git add -A + commit without the index {c['naive']:.1f} ms, "
                  f"with it {c['plain']:.1f} ms; a step that changed nothing {c['nothing']:.1f} ms; "
                  f"first checkpoint {c['initial']:.0f} ms")
        print(f"load average during the run: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cpus")
        print(f"resume_s={resume_s:.3f} checkpoint_ms_2000={figures[2000]['ours']:.1f}")


if __name__ == "__main__":
    main()
