"""`cairn batch`: many runs at once, on threads here or as tasks on a Ray cluster (orchestrator/batch/)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from orchestrator.cli.shared import JsonOut, RunsDir, _runs_dir, app
from orchestrator.errors import UsageError


@app.command()
def batch(
    file: Path = typer.Argument(..., metavar="FILE.jsonl", help="One JSON object a line: task (required), "
                                "model, api_base, template, image, workdir, check, settings, max_steps, max_cost, approve."),
    jobs: Optional[int] = typer.Option(None, "--jobs", "-j", min=1, help="Runs at a time, each in its own sandbox (default 4; with --ray: the local cluster's size, else the cluster's cairn_sandbox resources decide unless given)."),
    api_base: Optional[str] = typer.Option(None, "--api-base", metavar="URL", help="The OpenAI-compatible endpoint of every line that names none (its api_base key or settings file)."),
    runs_dir: Optional[Path] = RunsDir,
    ray: bool = typer.Option(False, "--ray", help="Run the lines as tasks on a Ray cluster (Ray is the optional extra ray of cairn-agent): the one --ray-address names, else the cluster `ray start` made here, else a local one started for this batch. Each run takes one cairn_sandbox resource of a node (ray start --resources '{\"cairn_sandbox\": 4}') and its sandbox's CPUs and memory, and runs with that node's Docker engine; a run whose node dies is taken up on another."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", metavar="ADDRESS", help="With --ray (implied): the Ray cluster's head, host:port; auto (the default: $RAY_ADDRESS, or the cluster `ray start` made here, else a local one); or local (a local cluster for this batch, sized by --jobs)."),
    ray_storage: str = typer.Option("auto", "--ray-storage", metavar="auto|shared|local", help="With --ray: shared when every node mounts --runs-dir at the same path (runs write there); local when not (a node works in its own runs dir, $CAIRN_RAY_RUNS_DIR, and brings each run back here after every step); auto: each node checks whether it sees this runs dir."),
    json_output: bool = JsonOut,
) -> None:
    """Many runs at once, with a live table and a summary. Running the same file again skips the done
    runs and resumes the interrupted or crashed ones. Exit code: 0 if every run is done (and its check
    passed, where a line has one), 1 if any is not,
    2 for a bad line (nothing is started), 130 when Ctrl-C stopped the batch (run it again to resume)."""
    from orchestrator.batch.summary import run_batch

    make = None
    if ray_storage != "auto" and not (ray or ray_address is not None):
        raise UsageError("--ray-storage goes with --ray")
    if ray or ray_address is not None:
        try:
            import ray as _ray  # noqa: F401 - an optional extra: only `--ray` needs it
        except ImportError:
            raise UsageError("--ray needs Ray, which is not installed: pip install 'cairn-agent[ray]'") from None
        from orchestrator.batch.ray_driver import ray_batch

        make = ray_batch(ray_address or "auto", ray_storage, jobs)
    raise typer.Exit(run_batch(file, _runs_dir(runs_dir), jobs, json_output, api_base=api_base, make=make))
