"""What a step costs under Harbor once the task's work directory grows, beside what it cost before.

A real `harbor run` (Harbor 0.26 from .venv-harbor, its docker environment, cairn's sandbox image as the
task's base, the scripted model) of tests/integrations/test_harbor.py's GROWING solution: five cheap
steps (`echo >> notes.txt`), then a 4,000-file 26 MB virtualenv in /app (never brought back: the folder
is still followed), five cheap steps, then a data folder as big (past the limit: the folder stops being
followed), five cheap steps. A step's gap is the time from its tool's end to the next model request, as
the run's events record them (the give-back, the checkpoint, reading todo.md, the scripted model's
answer). The baseline is the same run's steps before the growth.

    PYTHONPATH=. python bench/harbor_steps.py [--trials 1]

The last line: `before_s=<median> venv_s=<median> past_limit_s=<median> venv_vs_before=<ratio>
past_limit_vs_before=<ratio> agent_logs_kb=<size of the trial's agent logs> reward=<reward>` (with
several trials, the median of each).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from orchestrator.sandbox.docker.image import ensure_image  # noqa: E402
from tests.integrations.test_harbor import (GROWING, HARBOR_VENV, _run, _task, harbor_env,  # noqa: E402
                                             phase_medians, step_gaps)


def one_trial(image: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="cairn-harbor-bench-") as folder:
        base = Path(folder)
        (base / "env").mkdir()
        trial = _run(harbor_env(base / "env", HARBOR_VENV / "bin" / "python"), base,
                     _task(base / "growing", image, probe=True), GROWING)
        run = next(path for path in trial.agent_dir.iterdir() if (path / "state" / "events.jsonl").is_file())
        events = [json.loads(line) for line in (run / "state" / "events.jsonl").read_text().splitlines()]
        gaps = step_gaps(events)
        before, venv, past = phase_medians(gaps)
        logs = sum(p.stat().st_size for p in trial.agent_dir.rglob("*") if p.is_file())
        print("gaps (s):", " ".join(f"{gap:.2f}" for gap in gaps), flush=True)
        return {"before_s": before, "venv_s": venv, "past_limit_s": past, "venv_vs_before": venv / before,
                "past_limit_vs_before": past / before, "agent_logs_kb": logs / 1024, "reward": trial.reward}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1)
    options = parser.parse_args()
    if not (HARBOR_VENV / "bin" / "harbor").is_file():
        sys.exit("bench: Harbor is not installed in .venv-harbor/ (scripts/test-tools.sh makes it)")
    image = ensure_image()
    results = [one_trial(image) for _ in range(options.trials)]
    for result in results:
        print(" ".join(f"{key}={value:.2f}" for key, value in result.items()), flush=True)
    print(" ".join(f"{key}={statistics.median(r[key] for r in results):.2f}" for key in results[0]))


if __name__ == "__main__":
    main()
