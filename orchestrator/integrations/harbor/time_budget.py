"""How long the trial gives the agent, so the model is told the time it has (`limits.max_wall_seconds`).

Harbor kills an agent whose `run()` outlasts the trial's agent timeout (`asyncio.wait_for` in its trial)
but hands that timeout to no agent. It is computed here as Harbor's `Trial._compute_agent_timeout_sec`
computes it, from the two files Harbor wrote before calling the agent: the trial's `config.json` (an
override, a ceiling and the multipliers) and the task's `task.toml` (`[agent] timeout_sec`). A task of
several steps is given the task's own timeout, not a step's. Anything unreadable gives None: the run
then has no time limit of Harbor's, as before.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def trial_agent_timeout(environment: Any) -> float | None:  # noqa: ANN401 - harbor's BaseEnvironment
    """Seconds the trial gives the agent, or None when Harbor sets none or its files cannot be read."""
    try:
        from harbor.models.task.config import TaskConfig
        from harbor.models.trial.config import TrialConfig

        trial = TrialConfig.model_validate_json(Path(environment.trial_paths.config_path).read_text())
        task = TaskConfig.model_validate_toml((Path(environment.environment_dir).parent / "task.toml").read_text())
    except Exception:  # noqa: BLE001 - another Harbor, a task without the file: no limit, as before
        return None
    return agent_timeout(trial.agent.override_timeout_sec or task.agent.timeout_sec, trial.agent.max_timeout_sec,
                         trial.agent_timeout_multiplier, trial.timeout_multiplier)


def agent_timeout(base: float | None, ceiling: float | None, multiplier: float | None,
                  default_multiplier: float) -> float | None:
    """Harbor's rule: the task's timeout (or the override), at most the ceiling, times the agent's multiplier
    (else the trial's)."""
    if not base:
        return None
    return min(base, ceiling or float("inf")) * (multiplier if multiplier is not None else default_multiplier)
