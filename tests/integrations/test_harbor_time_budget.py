"""The trial's agent timeout as Harbor computes it, which the Harbor agent makes the run's time limit
(orchestrator/integrations/harbor/time_budget.py; a whole trial, where the model is told its time:
tests/integrations/test_harbor.py)."""

from __future__ import annotations

from types import SimpleNamespace

from orchestrator.integrations.harbor.time_budget import agent_timeout, trial_agent_timeout


def test_the_tasks_timeout_capped_by_the_ceiling_times_the_agents_multiplier_else_the_trials():
    assert agent_timeout(900.0, None, None, 1.0) == 900.0
    assert agent_timeout(900.0, 600.0, None, 1.0) == 600.0
    assert agent_timeout(900.0, None, 2.0, 1.5) == 1800.0
    assert agent_timeout(900.0, None, None, 1.5) == 1350.0
    assert agent_timeout(None, 600.0, 2.0, 1.0) is None  # Harbor sets no timeout: neither does cairn


def test_files_that_cannot_be_read_give_no_limit(tmp_path):
    environment = SimpleNamespace(trial_paths=SimpleNamespace(config_path=tmp_path / "config.json"),
                                  environment_dir=tmp_path / "task" / "environment")
    assert trial_agent_timeout(environment) is None
    assert trial_agent_timeout(object()) is None
