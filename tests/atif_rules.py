"""Validating an ATIF trajectory as Harbor does, on cairn's Python (3.11), where Harbor (3.12+) cannot be
installed: the JSON schema derived from Harbor's models (tests/data/atif-trajectory.schema.json, written
by scripts/atif_schema.py), and the rules of those models' validators that a JSON schema cannot say.
Where a Harbor venv exists (`.venv-harbor/`), `harbor_errors` validates with Harbor's models themselves."""

from __future__ import annotations

import json
import subprocess
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "tests" / "data" / "atif-trajectory.schema.json"
HARBOR_PYTHON = ROOT / ".venv-harbor" / "bin" / "python"
AGENT_ONLY = ("model_name", "reasoning_effort", "reasoning_content", "tool_calls", "metrics")


def schema_errors(doc: dict[str, Any]) -> list[str]:
    """Where `doc` breaks the published JSON shape (empty: it fits)."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text()))
    return [f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in validator.iter_errors(doc)]


def rule_errors(doc: dict[str, Any], where: str = "") -> list[str]:
    """The checks of Harbor's model validators (Trajectory, Step, SubagentTrajectoryRef), for `doc` and
    each embedded subagent trajectory."""
    errors = []
    for i, step in enumerate(doc.get("steps") or []):
        at = f"{where}steps[{i}]"
        if step.get("step_id") != i + 1:
            errors.append(f"{at}.step_id: expected {i + 1}, got {step.get('step_id')}")
        if step.get("source") != "agent":
            errors += [f"{at}.{field}: only an agent step may have it" for field in AGENT_ONLY if step.get(field) is not None]
        if step.get("llm_call_count") == 0 and step.get("source") == "agent":
            errors += [f"{at}.{field}: not with llm_call_count 0" for field in ("metrics", "reasoning_content")
                       if step.get(field) is not None]
        if step.get("timestamp") is not None:
            try:
                datetime.fromisoformat(step["timestamp"].replace("Z", "+00:00"))
            except ValueError as exc:
                errors.append(f"{at}.timestamp: {exc}")
        calls = {c["tool_call_id"] for c in step.get("tool_calls") or []}
        for j, result in enumerate((step.get("observation") or {}).get("results") or []):
            source = result.get("source_call_id")
            if source is not None and source not in calls:
                errors.append(f"{at}.observation.results[{j}]: source_call_id {source!r} is no call of this step")
            for ref in result.get("subagent_trajectory_ref") or []:
                if ref.get("trajectory_id") is None and ref.get("trajectory_path") is None:
                    errors.append(f"{at}.observation.results[{j}]: a subagent ref with neither id nor path")
    seen: set[str] = set()
    for k, sub in enumerate(doc.get("subagent_trajectories") or []):
        sub_id = sub.get("trajectory_id")
        if sub_id is None or sub_id in seen:
            errors.append(f"{where}subagent_trajectories[{k}]: trajectory_id missing or not unique ({sub_id!r})")
        seen.add(sub_id)
        errors += rule_errors(sub, f"{where}subagent_trajectories[{k}].")
    return errors


HARBOR_CHECK = """
import json, sys
from pydantic import ValidationError
from harbor.models.trajectories import Trajectory
try:
    t = Trajectory.model_validate(json.load(sys.stdin))
except ValidationError as exc:
    print(exc)
    sys.exit(1)
# Harbor writes a trajectory with to_json_dict(): what it reads back must be what was given
print(json.dumps(t.to_json_dict(), sort_keys=True))
"""


def harbor_check(doc: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """Validates `doc` with Harbor's own models in Harbor's venv; stdout holds Harbor's dump of it."""
    return subprocess.run([str(HARBOR_PYTHON), "-c", HARBOR_CHECK], input=json.dumps(doc), capture_output=True,
                          text=True, timeout=120)
