"""Writes tests/data/atif-trajectory.schema.json: the JSON schema of an ATIF trajectory, derived from
Harbor's own pydantic models (`harbor.models.trajectories.Trajectory.model_json_schema()`).

cairn's tests run on Python 3.11 and Harbor needs 3.12+, so the tests validate exported trajectories
against this committed schema everywhere, and against Harbor's models themselves where a Harbor venv
exists. Run with Harbor's Python after changing the Harbor version the schema follows:

    .venv-harbor/bin/python scripts/atif_schema.py

A JSON schema cannot say what the models' validators check besides (step ids 1, 2, 3...; fields only an
agent step may have; observation results naming calls of their own step; unique subagent trajectory
ids): tests/atif_rules.py checks those.
"""

from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path

from harbor.models.trajectories import Trajectory

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "atif-trajectory.schema.json"


def main() -> None:
    schema = Trajectory.model_json_schema()
    schema["$comment"] = (f"Trajectory.model_json_schema() of harbor {version('harbor')} (PyPI; the models in "
                          "harbor/models/trajectories/), written by scripts/atif_schema.py. Do not edit by hand.")
    OUT.write_text(json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    print(f"wrote {OUT} (harbor {version('harbor')})")


if __name__ == "__main__":
    main()
